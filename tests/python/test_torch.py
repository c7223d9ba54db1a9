# SPDX-License-Identifier: Apache-2.0
"""cpr.torch against a real ckptd: tracked counts equal a reference from the
index tensors; partial recovery restores exactly the failed shard's newest
committed rows and leaves every other row alone; full recovery restores the
cut (rows, optimizer state, dense state) and rewinds; training continues;
a save is a snapshot of the rows at the call."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import cpr  # noqa: E402
import cpr.torch  # noqa: E402

ROWS = (200, 300, 120)
DIM = 8
SHARDS = 4


class Model(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = torch.nn.ModuleList(
            [torch.nn.EmbeddingBag(n, DIM, mode="sum", sparse=True) for n in ROWS])
        self.mlp = torch.nn.Linear(DIM * len(ROWS), 1)

    def forward(self, idx):
        return self.mlp(torch.cat([e(i) for e, i in zip(self.emb, idx)], 1)).squeeze(1)


class Trainer:
    def __init__(self, client, job, policy="mfu", scheme="range", seed=1, shards=None):
        self.model = Model(seed)
        self.emb_opt = torch.optim.Adagrad(list(self.model.emb.parameters()), lr=0.1)
        self.mlp_opt = torch.optim.SGD(self.model.mlp.parameters(), lr=0.05)
        self.rng = np.random.default_rng(seed)
        self.indices = [[] for _ in ROWS]  # every index tensor training used
        self.ckpt = cpr.torch.Checkpointer(
            client, job, list(self.model.emb), optimizer=self.emb_opt,
            dense={"mlp": self.model.mlp, "mlp_opt": self.mlp_opt}, num_shards=SHARDS,
            scheme=scheme, policy=policy, budget=0.25, shards=shards)

    def step(self, batch=16, bag=3):
        idx = [torch.from_numpy(self.rng.zipf(1.5, size=(batch, bag)) % n) for n in ROWS]
        for t, i in enumerate(idx):
            self.indices[t].append(i.reshape(-1).numpy())
        y = torch.from_numpy(self.rng.random(batch).astype(np.float32))
        loss = torch.nn.functional.mse_loss(self.model(idx), y)
        self.emb_opt.zero_grad()
        self.mlp_opt.zero_grad()
        loss.backward()
        self.emb_opt.step()
        self.mlp_opt.step()
        self.ckpt.step()
        return float(loss)

    def snapshot(self):
        """Every table's rows and Adagrad state, and the MLP, copied."""
        return ([e.weight.detach().clone() for e in self.model.emb],
                [self.emb_opt.state[e.weight]["sum"].clone() for e in self.model.emb],
                {k: v.clone() for k, v in self.model.mlp.state_dict().items()})


class SpyTracker:
    """A tracker that remembers the rows each save began with."""

    def __init__(self, tracker):
        self.tracker, self.begun = tracker, []

    def __getattr__(self, name):
        return getattr(self.tracker, name)

    def begin(self, shard, policy, ids):
        self.begun.append((shard, cpr.torch._policy(policy), set(np.asarray(ids).tolist())))
        return self.tracker.begin(shard, policy, ids)


def shard_rows(n, shard, scheme="range"):
    if scheme == "modulo":
        return torch.arange(shard, n, SHARDS)
    per = -(-n // SHARDS)
    return torch.arange(shard * per, min(n, (shard + 1) * per))


def test_mfu_counts_equal_a_reference(client, job):
    tr = Trainer(client, job)
    for _ in range(30):
        tr.step()
    for t, (n, tracker) in enumerate(zip(ROWS, tr.ckpt.trackers)):
        counts = np.bincount(np.concatenate(tr.indices[t]), minlength=n)
        for shard in range(SHARDS):
            mine = shard_rows(n, shard).numpy()
            want = sorted(sorted((r for r in mine if counts[r]), key=lambda r: (-counts[r], r))[:7])
            assert list(np.asarray(tracker.select(shard, "mfu", rows=7))) == want
            st = tracker.stats(shard)
            assert st.update_events == counts[mine].sum()
            assert st.touched_rows == np.count_nonzero(counts[mine])
    tr.ckpt.close()


@pytest.mark.parametrize("scheme", ["range", "modulo"])
def test_partial_recovery_restores_exactly_the_failed_shard(client, job, scheme):
    tr = Trainer(client, job, scheme=scheme)
    tr.ckpt.trackers = [SpyTracker(t) for t in tr.ckpt.trackers]
    for _ in range(10):
        tr.step()
    full = tr.ckpt.save(10, "full")
    assert full.rows == sum(ROWS)
    w_full, s_full, _ = tr.snapshot()
    for _ in range(10):
        tr.step()
    mfu = tr.ckpt.async_save(20).result()  # a PRIORITY part of the top rows
    w_mfu, s_mfu, _ = tr.snapshot()
    for p in client.list(job):
        assert p.committed
    failed = 2
    in_mfu = [set().union(*[ids for shard, pol, ids in t.begun
                            if shard == failed and pol == cpr.Policy.MFU])
              for t in tr.ckpt.trackers]
    assert any(in_mfu)  # the MFU part holds rows of the failed shard
    for _ in range(5):
        tr.step()  # unsaved updates: what the failure loses
    w_now, s_now, mlp_now = tr.snapshot()
    parts = {(p.checkpoint, p.shard): p for p in client.list(job)}
    assert parts[(mfu.checkpoint, failed)].kind == "PRIORITY"
    lost = tr.ckpt.simulate_failure(failed)
    assert lost > 0
    res = tr.ckpt.recover([failed])
    assert res.plan.action == "partial" and res.dense == "keep"
    [entry] = [e for e in res.plan.shards if e.source == "store"]
    assert entry.shard == failed and entry.as_of == mfu.checkpoint
    for t, n in enumerate(ROWS):
        w = tr.model.emb[t].weight.detach()
        s = tr.emb_opt.state[tr.model.emb[t].weight]["sum"]
        mine = shard_rows(n, failed, scheme)
        others = torch.tensor(sorted(set(range(n)) - set(mine.tolist())), dtype=torch.int64)
        # Survivors are untouched: exactly their pre-failure values.
        assert torch.equal(w[others], w_now[t][others])
        assert torch.equal(s[others], s_now[t][others])
        # The failed shard: each row's newest committed version, bit for bit.
        for r in mine.tolist():
            src_w, src_s = (w_mfu, s_mfu) if r in in_mfu[t] else (w_full, s_full)
            assert torch.equal(w[r], src_w[t][r]), (t, r)
            assert torch.equal(s[r], src_s[t][r]), (t, r)
    for k, v in tr.model.mlp.state_dict().items():  # the dense replica survives
        assert torch.equal(v, mlp_now[k])
    # Training goes on, and the next save lands.
    for _ in range(5):
        assert np.isfinite(tr.step())
    assert tr.ckpt.save(30).checkpoint == mfu.checkpoint + 1  # ids go on
    tr.ckpt.close()


def test_a_new_jobs_first_save_is_full(client, job):
    """With a prioritized policy and no save asked FULL, the first save still
    writes every row: a shard restored from PRIORITY parts alone would have
    the rows they did not choose at zero."""
    tr = Trainer(client, job, policy="mfu")
    for _ in range(5):
        tr.step()
    first = tr.ckpt.save(5)
    assert first.policy == cpr.Policy.FULL and first.rows == sum(ROWS)
    w_first, s_first, _ = tr.snapshot()
    for _ in range(5):
        tr.step()
    second = tr.ckpt.save(10)
    assert second.policy == cpr.Policy.MFU and second.rows < sum(ROWS)
    kinds = {p.checkpoint: p.kind for p in client.list(job)}
    assert kinds[first.checkpoint] == "FULL" and kinds[second.checkpoint] == "PRIORITY"
    w_saved, s_saved, _ = tr.snapshot()
    for _ in range(3):
        tr.step()
    failed = 1
    tr.ckpt.simulate_failure(failed)
    res = tr.ckpt.recover([failed], "partial")
    assert res.plan.action == "partial"
    for t, n in enumerate(ROWS):
        w = tr.model.emb[t].weight.detach()
        for r in shard_rows(n, failed).tolist():  # each row from one of the two saves
            assert torch.equal(w[r], w_saved[t][r]) or torch.equal(w[r], w_first[t][r]), (t, r)
            assert w[r].abs().sum() > 0, (t, r)
    # A checkpointer opened later on the same job finds the FULL base.
    again = cpr.torch.Checkpointer(client, job, list(tr.model.emb), optimizer=tr.emb_opt,
                                   num_shards=SHARDS, policy="mfu", budget=0.25, hooks=False)
    assert not again._full_next
    again.close()
    tr.ckpt.close()


def test_full_recovery_restores_the_cut_and_rewinds(client, job):
    tr = Trainer(client, job, policy="ssu")
    for _ in range(8):
        tr.step()
    cut = tr.ckpt.save(8, "full")
    w_cut, s_cut, mlp_cut = tr.snapshot()
    for _ in range(8):
        tr.step()
    abandoned = tr.ckpt.save(16, "mfu")  # PRIORITY: not consistent, after the cut
    for _ in range(4):
        tr.step()
    tr.ckpt.simulate_failure(1)
    res = tr.ckpt.recover([1], mode="full")
    assert res.plan.action == "full" and res.plan.cut == cut.checkpoint
    assert res.rewind_step == 8 and res.dense == "blob"
    for t in range(len(ROWS)):
        assert torch.equal(tr.model.emb[t].weight.detach(), w_cut[t])
        assert torch.equal(tr.emb_opt.state[tr.model.emb[t].weight]["sum"], s_cut[t])
    for k, v in tr.model.mlp.state_dict().items():
        assert torch.equal(v, mlp_cut[k])
    # Every row is back at the cut: no tracker holds anything unsaved.
    for tracker in tr.ckpt.trackers:
        for shard in range(SHARDS):
            st = tracker.stats(shard)
            assert (st.unsaved_events, st.dirty_rows, st.sampled_rows, st.touched_rows) == (
                0, 0, 0, 0), (shard, st)
            assert len(tracker.select(shard, "mfu", rows=7)) == 0
    # Training goes on from the cut. A later partial recovery restores each
    # row's newest version on the new timeline: from a save made since, or
    # from the cut; never from the part written after the cut and left
    # behind, although its id is lower than the new ones.
    tr.ckpt.wait()  # the FULL save that starts the new timeline
    tr.ckpt.trackers = [SpyTracker(t) for t in tr.ckpt.trackers]
    for _ in range(3):
        tr.step()
    later = tr.ckpt.save(11)
    w_later, _, _ = tr.snapshot()
    assert later.checkpoint > abandoned.checkpoint
    tr.step()
    tr.ckpt.simulate_failure(3)
    res = tr.ckpt.recover([3])
    [entry] = [e for e in res.plan.shards if e.source == "store"]
    assert entry.as_of == later.checkpoint
    for t, n in enumerate(ROWS):
        fresh = set().union(*[ids for shard, _, ids in tr.ckpt.trackers[t].begun if shard == 3])
        w = tr.model.emb[t].weight.detach()
        for r in shard_rows(n, 3).tolist():
            assert torch.equal(w[r], (w_later if r in fresh else w_cut)[t][r]), (t, r)
    tr.ckpt.close()


def test_topk_norm_ranks_by_update_magnitude(client, job):
    tr = Trainer(client, job, policy="topk-norm")
    assert tr.ckpt.save(0).policy == cpr.Policy.FULL  # a new job's base
    before = [e.weight.detach().clone() for e in tr.model.emb]
    tr.step(batch=64)  # one step: a row's tracked norm is its squared change
    for t, (n, tracker) in enumerate(zip(ROWS, tr.ckpt.trackers)):
        change = (tr.model.emb[t].weight.detach() - before[t]).pow(2).sum(1)
        mine = shard_rows(n, 0)
        order = sorted((r for r in mine.tolist() if change[r] > 0), key=lambda r: -change[r])
        picked = list(np.asarray(tracker.select(0, "topk-norm", rows=5)))
        assert picked == sorted(order[:5])
    res = tr.ckpt.save(1)
    assert res.policy == cpr.Policy.TOPK_NORM and res.rows > 0
    tr.ckpt.close()


def test_async_save_is_a_snapshot(client, job):
    tr = Trainer(client, job)
    for _ in range(5):
        tr.step()
    w0, s0, _ = tr.snapshot()
    fut = tr.ckpt.async_save(5, "full")
    with torch.no_grad():  # training changes every row while the save streams
        for e in tr.model.emb:
            e.weight.add_(1.0)
    result = fut.result()
    assert result.rows == sum(ROWS) and result.stall_s <= result.seconds
    for t, n in enumerate(ROWS):
        out = np.empty((n, DIM), np.float32)
        st = np.empty((n, DIM), np.float32)
        client.restore_into(job, t, out, st, as_of=result.checkpoint)
        assert np.array_equal(out.view(np.uint32), w0[t].numpy().view(np.uint32))
        assert np.array_equal(st.view(np.uint32), s0[t].numpy().view(np.uint32))
    tr.ckpt.close()


def test_bad_tables_are_refused(client, job):
    with pytest.raises(cpr.InvalidArgumentError, match="float32"):
        cpr.torch.Checkpointer(client, job, [torch.zeros(4, 4, dtype=torch.float64)])
    with pytest.raises(cpr.InvalidArgumentError, match="Adagrad.*optimizer=None"):
        w = torch.nn.Embedding(4, 4)
        cpr.torch.Checkpointer(client, job, [w], optimizer=torch.optim.SGD(w.parameters(), 0.1))


def test_tables_in_a_module_dict(client, job):
    tables = torch.nn.ModuleDict({"a": torch.nn.Embedding(8, 4), "b": torch.nn.Embedding(6, 4)})
    ckpt = cpr.torch.Checkpointer(client, job, tables, num_shards=2, hooks=False)
    assert ckpt.names == ["a", "b"]
    assert ckpt.save(1).rows == 14
    ckpt.close()


def test_auto_policy_follows_the_estimator(client, job):
    # Failures every 60 s, saves of 1 s, restarts of 30 s: partial recovery
    # with MFU saves wins (docs/model.md), at short intervals.
    est = cpr.Estimator(SHARDS, 3600.0, 0.02, 60.0, 1.0, 2.0, 30.0, policy="mfu")
    model = Model(3)
    opt = torch.optim.Adagrad(list(model.emb.parameters()), lr=0.1)
    ckpt = cpr.torch.Checkpointer(client, job, list(model.emb), optimizer=opt,
                                  num_shards=SHARDS, policy="auto", estimator=est)
    assert est.decide().mode == "partial" and ckpt.due()
    assert ckpt.save(0).policy == cpr.Policy.FULL  # a new job's base, whatever the estimator
    rng = np.random.default_rng(3)
    for _ in range(5):
        idx = [torch.from_numpy(rng.integers(0, n, (8, 2))) for n in ROWS]
        model(idx).sum().backward()
        opt.step()
        ckpt.step()
    res = ckpt.save(5)
    assert res.policy == cpr.Policy.MFU and 0 < res.rows < sum(ROWS)
    assert not ckpt.due()  # the interval starts with the save
    parts = client.list(job)
    assert {p.kind for p in parts if p.checkpoint == res.checkpoint} == {"PRIORITY"}
    ckpt.simulate_failure(1)
    rec = ckpt.recover([1])  # mode from the estimator
    assert rec.plan.action == "partial"
    assert est.decide().failures == 1
    with pytest.raises(cpr.InvalidArgumentError, match="estimator"):
        cpr.torch.Checkpointer(client, job, list(model.emb), policy="auto")
    ckpt.close()


def test_a_new_process_loads_the_cut_not_an_old_plan(client, job):
    tr = Trainer(client, job)
    for _ in range(6):
        tr.step()
    tr.ckpt.save(6, "full")
    w_cut, s_cut, mlp_cut = tr.snapshot()
    tr.step()
    tr.ckpt.simulate_failure(2)
    assert tr.ckpt.recover([2]).plan.action == "partial"  # recorded: generation 1
    tr.ckpt.close()
    # The job restarts: new processes, fresh tables. load() must restore every
    # shard at the cut, not act on the partial plan recorded before.
    fresh = Trainer(client, job, seed=9)
    res = fresh.ckpt.load()
    assert res.plan.action == "full" and res.generation == 2 and res.rewind_step == 6
    for t in range(len(ROWS)):
        assert torch.equal(fresh.model.emb[t].weight.detach(), w_cut[t])
        assert torch.equal(fresh.emb_opt.state[fresh.model.emb[t].weight]["sum"], s_cut[t])
    for k, v in fresh.model.mlp.state_dict().items():
        assert torch.equal(v, mlp_cut[k])
    fresh.ckpt.close()


def test_a_restart_from_scratch_leaves_the_old_timeline(client, job):
    """load() with no consistent cut starts over: the old run's rows never
    come back through a later restore, and the next save is FULL."""
    old = torch.full((8, 2), 7.0)
    a = cpr.torch.Checkpointer(client, job, [old], num_shards=2, shards=[0], policy="full",
                               hooks=False)
    a.save(10)  # shard 0 only: no cut
    a.close()
    fresh = torch.full((8, 2), 1.0)  # a new process's initial table
    b = cpr.torch.Checkpointer(client, job, [fresh], num_shards=2, policy="mfu", budget=0.5,
                               hooks=False)
    assert b.load().plan.action == "restart-from-scratch"
    with torch.no_grad():
        fresh[0] = fresh[4] = 2.0
    b.observe(0, torch.tensor([0, 4]))
    b.step()
    saved = b.save(20)
    assert saved.policy == cpr.Policy.FULL and saved.rows == 8
    expect = fresh.clone()
    b.simulate_failure(0)
    assert b.recover([0], "partial").plan.action == "partial"
    assert torch.equal(fresh, expect)  # none of the old run's 7s
    assert b.save(30).policy == cpr.Policy.MFU  # FULL once, then the policy
    b.close()


@pytest.mark.parametrize("r4,codec", [(None, "int8"), (20.0, "int4"), (0.003, "bf16")])
def test_auto_codec_follows_the_estimator(client, job, r4, codec):
    # 3600 s at an MTBF of 60 s: 60 failures, each restoring 1 shard of
    # SHARDS (4), so a row is restored 15 times from MFU parts: past int4's
    # default budget (10) and within int8's (289 x 10); int4 within a budget
    # of 20; bf16 (6000 x 0.003 = 18) but not int8 at 0.003 (docs/model.md).
    kw = {} if r4 is None else {"int4_max_restores": r4}
    est = cpr.Estimator(SHARDS, 3600.0, 0.02, 60.0, 1.0, 2.0, 30.0, policy="mfu",
                        choose_codec=True, **kw)
    d = est.decide()
    assert d.mode == "partial" and d.codec == codec
    assert d.quantized_restores == pytest.approx(60.0 / SHARDS)
    model = Model(3)
    opt = torch.optim.Adagrad(list(model.emb.parameters()), lr=0.1)
    ckpt = cpr.torch.Checkpointer(client, job, list(model.emb), optimizer=opt,
                                  num_shards=SHARDS, policy="auto", estimator=est, codec="auto")
    idx = [torch.arange(min(n, 16)).reshape(8, -1) for n in ROWS]
    model(idx).sum().backward()
    opt.step()
    ckpt.step()
    assert ckpt.save(1).policy == cpr.Policy.FULL  # a new job's base: f32
    model(idx).sum().backward()  # rows to save after it
    opt.step()
    ckpt.step()
    assert ckpt.save(2).policy == cpr.Policy.MFU
    assert {p.codecs for p in client.list(job) if p.rows and p.checkpoint == 2} == {(codec,)}
    ckpt.close()
    with pytest.raises(cpr.InvalidArgumentError, match="choose_codec"):
        cpr.torch.Checkpointer(client, job, list(model.emb), optimizer=opt, codec="auto")


def test_prioritized_saves_in_int8(client, job):
    tr = Trainer(client, job)
    tr.ckpt.codec = "int8"
    tr.ckpt.trackers = [SpyTracker(t) for t in tr.ckpt.trackers]
    for _ in range(5):
        tr.step()
    full = tr.ckpt.save(5, "full")  # exact
    w_full, _, _ = tr.snapshot()
    for _ in range(5):
        tr.step()
    mfu = tr.ckpt.save(10)  # int8
    w_mfu, s_mfu, _ = tr.snapshot()
    parts = {(p.checkpoint, p.shard): p for p in client.list(job)}
    assert parts[(mfu.checkpoint, 1)].bytes < parts[(full.checkpoint, 1)].bytes
    tr.ckpt.simulate_failure(1)
    tr.ckpt.recover([1])
    for t, n in enumerate(ROWS):
        saved = set().union(*[ids for shard, pol, ids in tr.ckpt.trackers[t].begun
                              if shard == 1 and pol == cpr.Policy.MFU])
        w = tr.model.emb[t].weight.detach()
        s = tr.emb_opt.state[tr.model.emb[t].weight]["sum"]
        for r in shard_rows(n, 1).tolist():
            if r in saved:  # int8: within half a step of its row; state exact
                step = float(w_mfu[t][r].max() - w_mfu[t][r].min()) / 255
                assert float((w[r] - w_mfu[t][r]).abs().max()) <= 0.5 * step * 1.0001 + 1e-6
                assert torch.equal(s[r], s_mfu[t][r])
            else:  # from the exact FULL part
                assert torch.equal(w[r], w_full[t][r])
    tr.ckpt.close()


def test_a_new_run_on_a_saved_job_is_refused_until_it_loads(client, job):
    """A new process with fresh rows on a job that has checkpoints must not
    write on top of them (a partial recovery would then restore the other
    run's rows): its saves are refused, writing nothing, until load() or
    recover() took the job over."""
    tr = Trainer(client, job)
    for _ in range(4):
        tr.step()
    cut = tr.ckpt.save(4)  # FULL: a new job's base
    w_cut, _, _ = tr.snapshot()
    tr.step()
    tr.ckpt.save(5)  # PRIORITY
    tr.ckpt.close()
    before = client.list(job)
    rerun = Trainer(client, job, seed=9)
    for _ in range(2):
        rerun.step()
    for save in (rerun.ckpt.save, rerun.ckpt.async_save):
        with pytest.raises(cpr.AlreadyExistsError,
                           match=r"^job '%s' already has checkpoints of shard\(s\) 0, 1, 2, 3 "
                                 r"\(newest 2\): call load\(\) to continue it "
                                 r"\(or recover\(\.\.\.\) of those shards\), or use a new job name$" % job) as e:
            save(6)
        assert e.value.status == cpr.Status.ALREADY_EXISTS
        assert e.value.status_name == "CPR_ALREADY_EXISTS"
    assert client.list(job) == before and rerun.ckpt.next_checkpoint == 3
    res = rerun.ckpt.load()
    assert res.plan.cut == cut.checkpoint
    for t in range(len(ROWS)):
        assert torch.equal(rerun.model.emb[t].weight.detach(), w_cut[t])
    rerun.step()
    assert rerun.ckpt.save(6).checkpoint > 2  # continued: saves go on
    rerun.ckpt.close()
    # A partial recovery takes over the shards it restored, not the others:
    # a new run restoring shard 1 still holds its own fresh rows of 0, 2, 3.
    other = Trainer(client, job, seed=10)
    with pytest.raises(cpr.AlreadyExistsError):
        other.ckpt.save(7)
    before = client.list(job)
    other.ckpt.recover([1], "partial")
    other.step()
    with pytest.raises(cpr.AlreadyExistsError, match=r"shard\(s\) 0, 2, 3 "):
        other.ckpt.save(7)
    assert client.list(job) == before
    other.ckpt.recover([0, 2, 3], "partial")  # every shard restored: the job's now
    other.step()
    assert other.ckpt.save(7).rows > 0
    other.ckpt.close()
    # A replacement process for one shard restores it and goes on.
    one = Trainer(client, job, seed=11, shards=[2])
    with pytest.raises(cpr.AlreadyExistsError, match=r"shard\(s\) 2 "):
        one.ckpt.save(8)
    one.ckpt.recover([2], "partial")
    one.step()
    assert one.ckpt.save(8).rows > 0
    one.ckpt.close()


def test_ranks_of_one_new_job_start_at_different_times(client, job):
    """Rank 1 starting after rank 0 saved its shard is not refused: only
    checkpoints of a process's own shards (or of another layout) are."""
    w0, w1 = torch.full((8, 2), 1.0), torch.full((8, 2), 2.0)
    rank0 = cpr.torch.Checkpointer(client, job, [w0], num_shards=2, shards=[0], hooks=False)
    assert rank0.save(1).policy == cpr.Policy.FULL
    rank1 = cpr.torch.Checkpointer(client, job, [w1], num_shards=2, shards=[1], hooks=False)
    assert rank1.save(1).policy == cpr.Policy.FULL
    assert {(p.shard, p.committed) for p in client.list(job)} == {(0, True), (1, True)}
    assert rank0.save(2, "full").rows == 4  # the ranks' own objects go on saving
    rank0.close()
    rank1.close()
    before = client.list(job)
    again = cpr.torch.Checkpointer(client, job, [w0], num_shards=2, shards=[0], hooks=False)
    with pytest.raises(cpr.AlreadyExistsError, match=r"shard\(s\) 0 \(newest 2\)"):
        again.save(3)
    resharded = cpr.torch.Checkpointer(client, job, [w1], num_shards=4, shards=[3], hooks=False)
    with pytest.raises(cpr.AlreadyExistsError,
                       match=r"shard\(s\) 0, 1 \(newest 2, saved with num_shards 2\)"):
        resharded.save(3)
    assert client.list(job) == before
    again.close()
    resharded.close()


@pytest.mark.parametrize("kw,message", [
    ({"num_shards": 0}, r"^num_shards: must be a whole number >= 1, got 0$"),
    ({"num_shards": -1}, r"^num_shards: must be a whole number >= 1, got -1$"),
    ({"num_shards": 2.5}, r"^num_shards: must be a whole number >= 1, got 2\.5$"),
    ({"num_shards": 2, "shards": [2]},
     r"^shards: 2 is not a shard of num_shards 2 \(give 0\.\.1\)$"),
    ({"num_shards": 2, "shards": [-1]}, r"^shards: must be a whole number >= 0, got -1$"),
    ({"num_shards": 2, "shards": [1, 1]}, r"^shards: 1 is given twice$"),
    ({"num_shards": 2, "dense_shard": 2}, r"^dense_shard: 2 is not a shard of num_shards 2$"),
    ({"budget": 0}, r"^budget: .* in \(0, 1\]; got 0$"),
    ({"budget": 1.5}, r"^budget: .* in \(0, 1\]; got 1\.5$"),
    ({"budget": float("nan")}, r"^budget: .* in \(0, 1\]; got nan$"),
    ({"policy": "mfuu"},
     r"^policy: 'mfuu' is not one of full, delta, mfu, ssu, topk-norm, auto$"),
    ({"policy": 9}, r"^policy: 9 is not one of full, delta, mfu, ssu, topk-norm, auto$"),
])
def test_bad_arguments_are_refused_naming_them(client, job, kw, message):
    with pytest.raises(cpr.InvalidArgumentError, match=message):
        cpr.torch.Checkpointer(client, job, [torch.zeros(8, 2)], hooks=False, **kw)
    assert client.list_jobs().count(job) == 0  # nothing was written


def test_bad_job_names_and_table_names_say_what_to_fix(client, job):
    with pytest.raises(cpr.InvalidArgumentError,
                       match=r"^job: 'bad job' is not a job name: use 1-128 characters of "
                             r"A-Z a-z 0-9 \. _ -$"):
        cpr.torch.Checkpointer(client, "bad job", [torch.zeros(8, 2)])
    tables = torch.nn.ModuleDict({"user": torch.nn.Embedding(8, 2)})
    with pytest.raises(cpr.InvalidArgumentError,
                       match=r"not str \(got a name: pass the dict / ModuleDict itself, not "
                             r"list\(\.\.\.\) of it\)$"):
        cpr.torch.Checkpointer(client, job, list(tables))
    ckpt = cpr.torch.Checkpointer(client, job, [torch.zeros(8, 2)], hooks=False)
    with pytest.raises(cpr.InvalidArgumentError, match="^policy: 'fulll' is not one of"):
        ckpt.save(1, "fulll")
    assert ckpt.next_checkpoint == 1
    ckpt.close()


def test_a_resumed_optimizers_state_is_saved_and_restored(client, job):
    # optimizer.load_state_dict() puts new `sum` tensors into the optimizer
    # after the checkpointer was built: saves copy those, restores write them.
    emb = torch.nn.Embedding(40, 4)
    opt = torch.optim.Adagrad(emb.parameters(), lr=0.1)
    ckpt = cpr.torch.Checkpointer(client, job, [emb], optimizer=opt, num_shards=2,
                                  policy="full", hooks=False)
    old = opt.state[emb.weight]["sum"]
    sd = opt.state_dict()
    sd["state"][0]["sum"] = torch.arange(160, dtype=torch.float32).reshape(40, 4)
    opt.load_state_dict(sd)
    live = opt.state[emb.weight]["sum"]
    assert live is not old
    want_w, want_s = emb.weight.detach().clone(), live.clone()
    ckpt.save(1)
    st = np.empty((40, 4), np.float32)
    client.restore_into(job, 0, np.empty((40, 4), np.float32), st)
    assert np.array_equal(st, want_s.numpy())
    ckpt.simulate_failure(0)
    assert not live[:20].any()  # the live state was wiped
    ckpt.recover([0], "partial")
    assert opt.state[emb.weight]["sum"] is live
    assert torch.equal(live, want_s) and torch.equal(emb.weight.detach(), want_w)
    ckpt.close()


def test_a_replaced_weight_is_saved_and_restored(client, job):
    emb = torch.nn.Embedding(40, 4)
    ckpt = cpr.torch.Checkpointer(client, job, [emb], num_shards=2, policy="full")
    emb.weight = torch.nn.Parameter(torch.arange(160, dtype=torch.float32).reshape(40, 4))
    want = emb.weight.detach().clone()
    ckpt.save(1)
    out = np.empty((40, 4), np.float32)
    client.restore_into(job, 0, out)
    assert np.array_equal(out, want.numpy())
    ckpt.simulate_failure(1)
    assert not emb.weight[20:].any()
    ckpt.recover([1], "partial")
    assert torch.equal(emb.weight.detach(), want)
    ckpt.close()


def test_a_changed_table_is_refused_saying_how(client, job):
    emb = torch.nn.Embedding(40, 4)
    opt = torch.optim.Adagrad(emb.parameters(), lr=0.1)
    ckpt = cpr.torch.Checkpointer(client, job, [emb], optimizer=opt, policy="full",
                                  hooks=False)
    ckpt.save(1)
    original = emb.weight
    emb.weight = torch.nn.Parameter(torch.zeros(40, 4))  # one the optimizer does not train
    with pytest.raises(cpr.FailedPreconditionError,
                       match=r"^table 0: the Checkpointer's optimizer holds no state for its "
                             r"weight .*replace weights before building the optimizer"):
        ckpt.save(2)
    with pytest.raises(cpr.FailedPreconditionError, match="^table 0: the Checkpointer's opt"):
        ckpt.recover([0], "partial")
    emb.weight = torch.nn.Parameter(torch.zeros(41, 4))
    with pytest.raises(cpr.FailedPreconditionError,
                       match=r"^table 0: its weight is now a float32 cpu tensor of \(41, 4\), "
                             r"not the contiguous float32 CPU tensor of \(40, 4\) it was"):
        ckpt.save(2)
    emb.weight = original
    opt.state[emb.weight]["sum"] = torch.zeros(40, 8)
    with pytest.raises(cpr.FailedPreconditionError,
                       match=r"^table 0: its optimizer state is now a float32 cpu tensor of "
                             r"\(40, 8\), not the 4 column\(s\) per row"):
        ckpt.save(2)
    assert ckpt.next_checkpoint == 2
    assert [p.checkpoint for p in client.list(job)] == [1]  # nothing else was written
    ckpt.close()


def test_a_batch_out_of_range_is_not_tracked(client, job):
    # The pre-hook sees the batch before nn.Embedding rejects it: recorded,
    # it would fail every step() after.
    emb = torch.nn.Embedding(50, 4)
    ckpt = cpr.torch.Checkpointer(client, job, [emb], hooks=True)
    for bad in (50, -1):
        with pytest.warns(RuntimeWarning,
                          match=r"^cpr\.torch: batch not tracked: indices: %d is outside "
                                r"table 0 \(50 rows\): the batch's indices must be in "
                                r"0\.\.49$" % bad):
            with pytest.raises(IndexError):
                emb(torch.tensor([5, bad]))
    with pytest.raises(cpr.InvalidArgumentError, match=r"^indices: 60 is outside table 0"):
        ckpt.observe(0, [1, 60])
    emb(torch.tensor([1, 2, 2]))
    ckpt.step()
    ckpt.step()
    assert ckpt.trackers[0].stats(0).update_events == 3  # only the good batch
    ckpt.close()


def test_save_after_close_is_refused_before_anything(client, job):
    ckpt = cpr.torch.Checkpointer(client, job, [torch.nn.Embedding(20, 4)], policy="full")
    ckpt.save(1)
    ckpt.close()
    for call in (lambda: ckpt.save(2), lambda: ckpt.async_save(2),
                 lambda: ckpt.recover([0], "partial")):
        with pytest.raises(cpr.FailedPreconditionError,
                           match=r"^the Checkpointer is closed: build a new one to save or "
                                 r"recover$"):
            call()
    assert ckpt.next_checkpoint == 2
    assert [p.checkpoint for p in client.list(job)] == [1]
    ckpt.close()  # twice: nothing to do


def test_saves_from_two_threads_each_get_their_own_id(client, job):
    import threading
    emb = torch.nn.Embedding(5000, 16)
    ckpt = cpr.torch.Checkpointer(client, job, [emb], policy="full", hooks=False)
    ckpt.save(0)
    out, errors = [], []

    def saver(k):
        for i in range(8):
            try:
                out.append(ckpt.save(10 * k + i).checkpoint)
            except BaseException as e:  # noqa: BLE001 -- reported below
                errors.append(e)

    threads = [threading.Thread(target=saver, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and sorted(out) == list(range(2, 18))
    assert sorted(p.checkpoint for p in client.list(job) if p.committed) == list(range(1, 18))
    ckpt.close()
