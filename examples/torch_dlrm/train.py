#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A small PyTorch DLRM trained on Criteo rows under injected shard failures,
checkpointed with CPR (cpr.torch) against a real ckptd.

Strategies (--strategy):
  full     FULL saves; a failure restores every shard at the latest consistent
           cut and training rewinds to it (the lost steps run again).
  partial  FULL saves; a failure restores only the failed shard (CPR).
  mfu, ssu prioritized saves of --budget of each shard's rows; partial
           recovery (CPR-MFU, CPR-SSU).
  none     no checkpoints and no failures: the baseline.

The failures replay cpr.failure_schedule (the schedule cpr-dlrm and the test
harness use): --failures expected over the run, each hitting a shard drawn
uniformly. Overhead is the time the strategy spent beyond training: save
stalls, recoveries, and (full) the recomputed steps. PLS is the share of
update events the failed shards lost. Prints one JSON object with --json.

Each run starts a new job: a --job that already has checkpoints is refused
(exit 1; use another --job). Errors print one line "train.py: ..." (exit 1;
a bad command line exits 2).

Example (README.md): build/tools/cpr-data gen --rows 200000 -o var/torch.tsv
  /usr/bin/python3 examples/torch_dlrm/train.py --data var/torch.tsv \\
      --target grpc://127.0.0.1:7717 --job demo-mfu --strategy mfu
"""
import argparse
import json
import re
import sys
import time

import numpy as np
import torch

import cpr
import cpr.torch

TABLES, DENSE = 26, 13


class DLRM(torch.nn.Module):
    """Bottom MLP over the dense features, one EmbeddingBag per categorical
    feature, pairwise dot interactions, top MLP (Naumov et al., 2019)."""

    def __init__(self, rows, dim):
        super().__init__()
        self.emb = torch.nn.ModuleList(
            [torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True) for _ in range(TABLES)])
        for e in self.emb:
            torch.nn.init.uniform_(e.weight, -1.0 / rows ** 0.5, 1.0 / rows ** 0.5)
        self.bot = torch.nn.Sequential(torch.nn.Linear(DENSE, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, dim), torch.nn.ReLU())
        pairs = (TABLES + 1) * TABLES // 2
        self.top = torch.nn.Sequential(torch.nn.Linear(dim + pairs, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 1))
        self.iu = torch.triu_indices(TABLES + 1, TABLES + 1, offset=1)

    def forward(self, dense, sparse):
        x = self.bot(dense)
        z = torch.stack([x] + [e(sparse[:, t:t + 1]) for t, e in enumerate(self.emb)], 1)
        inter = torch.bmm(z, z.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, inter], 1)).squeeze(1)


def auc(labels, scores):
    """Area under the ROC curve by ranks (ties averaged)."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    s = scores[order]
    i = 0
    while i < len(s):  # average the ranks of tied scores
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        if j > i:
            ranks[order[i:j + 1]] = ranks[order[i:j + 1]].mean()
        i = j + 1
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if not n_pos or not n_neg:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="Criteo file (TSV, or CSV with its header)")
    p.add_argument("--target", help="CPR target: grpc://host:port, unix:/path, local:///dir")
    p.add_argument("--job", default="torch-dlrm")
    p.add_argument("--strategy", default="mfu", choices=["full", "partial", "mfu", "ssu", "none"])
    p.add_argument("--rows-per-table", type=int, default=20000)
    p.add_argument("--emb-dim", type=int, default=16)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--max-lines", type=int, default=0, help="0: the whole file")
    p.add_argument("--holdout", type=float, default=0.1, help="share of lines kept for AUC")
    p.add_argument("--failures", type=float, default=4.0, help="failures expected over the run")
    p.add_argument("--failure-seed", type=int, default=1)
    p.add_argument("--save-every", type=int, default=0,
                   help="steps between saves (0: a third of the mean steps between "
                        "failures, for every strategy)")
    p.add_argument("--budget", type=float, default=0.125, help="rows a prioritized save takes")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    a = p.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", a.job):
        p.error("--job %r: a job name is 1-128 characters of A-Z a-z 0-9 . _ -" % a.job)
    for name in ("shards", "batch", "rows_per_table", "emb_dim"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.strategy != "none" and not a.target:
        p.error("--target is required unless --strategy none")
    if a.failures < 0 or not 0 < a.budget <= 1 or not 0 <= a.holdout < 1:
        p.error("--failures >= 0, --budget in (0, 1], --holdout in [0, 1)")
    return a


def refuse_an_existing_job(client, a):
    """Each run starts a new job: continuing another run's checkpoints would
    mix two models (the Checkpointer would refuse at the first save)."""
    try:
        parts = client.list(a.job)
    except cpr.NotFoundError:
        return
    if any(p.committed for p in parts):
        sys.exit("train.py: job '%s' already has checkpoints at %s: use another --job (each "
                 "run starts a new job)" % (a.job, a.target))


def main(argv):
    a = parse_args(argv)
    try:
        return run(a)
    except cpr.Error as e:  # unreachable ckptd, missing --data, ...: one line, exit 1
        print("train.py: %s" % e, file=sys.stderr)
        return 1


def run(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    labels, dense, sparse = (np.asarray(x) for x in cpr.read_criteo(
        a.data, a.rows_per_table, max_lines=a.max_lines))
    n_hold = int(len(labels) * a.holdout)
    n_train = len(labels) - n_hold
    steps = n_train // a.batch
    if steps < 1:
        sys.exit("train.py: %d lines make no batch of %d" % (n_train, a.batch))
    labels_t, dense_t, sparse_t = (torch.from_numpy(x) for x in (labels, dense, sparse))

    model = DLRM(a.rows_per_table, a.emb_dim)
    emb_opt = torch.optim.Adagrad(list(model.emb.parameters()), lr=a.lr)
    mlp_opt = torch.optim.Adagrad(list(model.bot.parameters()) + list(model.top.parameters()),
                                  lr=a.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()

    # ---- the lines a user adds for CPR (README.md) ----
    ckpt = None
    if a.strategy != "none":
        policy = {"full": "full", "partial": "full", "mfu": "mfu", "ssu": "ssu"}[a.strategy]
        client = cpr.Client(a.target, staging_bytes=1 << 30)
        refuse_an_existing_job(client, a)
        ckpt = cpr.torch.Checkpointer(
            client, a.job, model.emb, optimizer=emb_opt,
            dense={"bot": model.bot, "top": model.top, "mlp_opt": mlp_opt},
            num_shards=a.shards, policy=policy, budget=a.budget, seed=a.seed,
            ssu_rate=min(1.0, 2 * a.budget * a.rows_per_table / max(1, a.batch)))
    mode = "full" if a.strategy == "full" else "partial"
    mean_gap = steps / a.failures if a.failures > 0 else float("inf")
    every = a.save_every or max(1, int(min(mean_gap, steps) / 3))
    schedule = [] if ckpt is None or a.failures == 0 else cpr.failure_schedule(
        mean_gap, steps, a.shards, seed=a.failure_seed)

    t_train = t_save = t_recover = t_lost = 0.0
    executed, step, lost_events, rewinds, recovered, redo_until = 0, 0, 0, 0, 0, 0
    pending = list(schedule)
    losses = []
    while step < steps:
        if pending and executed >= pending[0][0]:  # a shard's node fails
            _, shard = pending.pop(0)
            t0 = time.perf_counter()
            lost = ckpt.simulate_failure(shard)
            res = ckpt.recover([shard], mode)
            t_recover += time.perf_counter() - t0
            recovered += 1
            if mode == "partial":
                lost_events += lost
            else:
                rewinds += 1
                redo_until = max(redo_until, step)
                step = res.rewind_step
            continue
        lo = step * a.batch
        t0 = time.perf_counter()
        logits = model(dense_t[lo:lo + a.batch], sparse_t[lo:lo + a.batch])
        loss = loss_fn(logits, labels_t[lo:lo + a.batch])
        emb_opt.zero_grad()
        mlp_opt.zero_grad()
        loss.backward()
        emb_opt.step()
        mlp_opt.step()
        if ckpt:
            ckpt.step()  # the rows this step updated, to CPR's trackers
        dt = time.perf_counter() - t0
        if step < redo_until:
            t_lost += dt  # a step run again after a rewind
        else:
            t_train += dt
            losses.append(float(loss))
        step += 1
        executed += 1
        if ckpt and step % every == 0 and step < steps:
            t0 = time.perf_counter()
            ckpt.async_save(step)  # the stall: selection and the copy of the rows
            t_save += time.perf_counter() - t0
    if ckpt:
        t0 = time.perf_counter()
        ckpt.close()  # the last save lands
        t_save += time.perf_counter() - t0
        events = sum(t.events(s)[0] for t in ckpt.trackers for s in range(a.shards))
    model.eval()
    with torch.no_grad():
        scores = torch.sigmoid(model(dense_t[n_train:], sparse_t[n_train:])).numpy()
    overhead = t_save + t_recover + t_lost
    out = {
        "strategy": a.strategy, "recovery": mode if ckpt else "none", "steps": steps,
        "save_every": every if ckpt else 0, "failures": recovered, "rewinds": rewinds,
        "train_s": t_train, "save_s": t_save, "recover_s": t_recover, "lost_s": t_lost,
        "overhead_frac": overhead / t_train if t_train else 0.0,
        "pls": lost_events / events if ckpt and events else 0.0,
        "checkpoints": (ckpt.next_checkpoint - 1) if ckpt else 0,
        "final_loss": float(np.mean(losses[-50:])) if losses else float("nan"),
        "auc": auc(labels[n_train:], scores) if n_hold else float("nan"),
    }
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print("%-14s %s" % (k, "%.4f" % v if isinstance(v, float) else v))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
