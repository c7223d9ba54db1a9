# SPDX-License-Identifier: Apache-2.0
"""CPR for PyTorch recommendation models: partial recovery and prioritized saves.

A ``Checkpointer`` holds a model's embedding tables (``nn.Embedding``,
``nn.EmbeddingBag`` or weight tensors; their rows split into shards by
ranges or modulo, as the nodes of a sharded job own them), their optimizer
state, and the dense state (any objects with ``state_dict`` /
``load_state_dict``). It tracks which rows training updates (forward hooks
on the tables record the indices; ``step()`` after ``optimizer.step()``
hands them to CPR's trackers), saves with a policy, and recovers a failed
shard in place (partial recovery) or everything at the consistent cut
(full recovery), following the plan recorded for the job so that every
process acts on the same one::

    ckpt = cpr.torch.Checkpointer(cpr.Client(target), "dlrm", model.embeddings,
                                  optimizer=emb_opt, dense={"mlp": model.mlp},
                                  num_shards=8, policy="mfu")
    if restarting:                         # the job has checkpoints: continue it
        start = ckpt.load().rewind_step    # (a save before load() is refused)
    for step, batch in enumerate(loader):
        loss = model(batch); loss.backward(); opt.step(); emb_opt.step()
        ckpt.step()
        if step % 500 == 0:
            ckpt.async_save(step)          # returns a Future; the stall is the copy
    ...
    ckpt.recover([failed_shard])           # partial: only that shard's rows

Saves copy the chosen rows into the client's staging on the calling thread
(the stall: a gather of those rows, bounded by the client's staging_bytes)
and stream and commit them in the background. One save is in flight at a
time: a save asked for while the previous one streams waits for it first.
See docs/python.md.
"""
import collections.abc
import concurrent.futures
import io
import operator
import os
import re
import threading
import time
import warnings

import numpy as np
import torch

import cpr

DENSE_BLOB = "dense"

_KIND = {
    cpr.Policy.FULL: cpr.Kind.FULL,
    cpr.Policy.DELTA: cpr.Kind.DELTA,
    cpr.Policy.MFU: cpr.Kind.PRIORITY,
    cpr.Policy.SSU: cpr.Kind.PRIORITY,
    cpr.Policy.TOPK_NORM: cpr.Kind.PRIORITY,
}


_POLICY_NAMES = "full, delta, mfu, ssu, topk-norm, auto"
_JOB_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")  # the library's rule (cpri_name_valid)


def _policy(p):
    if p is None:
        return None  # "auto": the estimator's choice, save by save
    try:
        if isinstance(p, str):
            if p.lower() == "auto":
                return None
            return cpr.Policy[p.upper().replace("-", "_")]
        return cpr.Policy(p)
    except (KeyError, ValueError, TypeError):
        raise cpr.InvalidArgumentError("policy: %r is not one of %s" % (p, _POLICY_NAMES)) \
            from None


def _whole(name, value, low):
    """`value` as an int >= low, or InvalidArgumentError naming the argument."""
    try:
        n = operator.index(value)
    except TypeError:
        n = None
    if n is None or n < low:
        raise cpr.InvalidArgumentError("%s: must be a whole number >= %d, got %r"
                                       % (name, low, value))
    return n


def _check_job(job):
    if not isinstance(job, str) or not _JOB_NAME.fullmatch(job):
        raise cpr.InvalidArgumentError("job: %r is not a job name: use 1-128 characters of "
                                       "A-Z a-z 0-9 . _ -" % (job,))
    return job


def _check_shards(shards, num_shards):
    """The shards this process saves: sorted, each once, each below num_shards."""
    if shards is None:
        return list(range(num_shards))
    out = sorted(_whole("shards", s, 0) for s in shards)
    for a, b in zip(out, out[1:]):
        if a == b:
            raise cpr.InvalidArgumentError("shards: %d is given twice" % a)
    if out and out[-1] >= num_shards:
        raise cpr.InvalidArgumentError("shards: %d is not a shard of num_shards %d (give 0..%d)"
                                       % (out[-1], num_shards, num_shards - 1))
    return out


def _check_budget(budget):
    try:
        b = float(budget)
    except (TypeError, ValueError):
        b = float("nan")
    if not 0 < b <= 1:  # NaN too
        raise cpr.InvalidArgumentError("budget: the fraction of each shard's rows a prioritized "
                                       "save takes, in (0, 1]; got %r" % (budget,))
    return b


def _shard_list(shards, most=8):
    """'0, 1, 2' (at most `most` of them, then how many in all)."""
    text = ", ".join(str(s) for s in shards[:most])
    return text if len(shards) <= most else "%s, ... (%d in all)" % (text, len(shards))


def _weight(t):
    """The weight tensor of a table module, or the tensor itself."""
    if isinstance(t, str):
        raise cpr.InvalidArgumentError(
            "a table is an nn.Embedding, nn.EmbeddingBag or a 2-D tensor, not str (got a "
            "name: pass the dict / ModuleDict itself, not list(...) of it)")
    w = getattr(t, "weight", t)
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise cpr.InvalidArgumentError("a table is an nn.Embedding, nn.EmbeddingBag or a 2-D "
                                       "tensor, not %s" % type(t).__name__)
    if w.device.type != "cpu" or w.dtype != torch.float32 or not w.is_contiguous():
        raise cpr.InvalidArgumentError("table weights must be contiguous float32 CPU tensors "
                                       "(got %s %s)" % (w.dtype, w.device))
    return w


def _describe(t):
    """'a float32 cpu tensor of (100, 4)' (', not contiguous'), or the type's name."""
    if not isinstance(t, torch.Tensor):
        return "a %s" % type(t).__name__
    return "a %s %s tensor of %s%s" % (str(t.dtype).replace("torch.", ""), t.device.type,
                                      tuple(t.shape), "" if t.is_contiguous()
                                      else ", not contiguous")


def _array(t):
    """A zero-copy NumPy view of a CPU tensor (parameters included)."""
    return t.detach().numpy()


def _abort_all(parts):
    """Abort each part, ignoring the aborts' own errors (a node that is gone
    fails them too): the error that failed the save is the one to raise."""
    for p in parts:
        try:
            p.abort()
        except cpr.Error:
            pass


class SaveResult:
    """What a committed save wrote."""

    def __init__(self, checkpoint, step, policy, rows, bytes_, stall_s, seconds):
        self.checkpoint, self.step, self.policy = checkpoint, step, policy
        self.rows, self.bytes, self.stall_s, self.seconds = rows, bytes_, stall_s, seconds

    def __repr__(self):
        return ("SaveResult(checkpoint=%d, step=%d, policy=%s, rows=%d, bytes=%d, "
                "stall_s=%.4f, seconds=%.4f)" % (self.checkpoint, self.step, self.policy.name,
                                                 self.rows, self.bytes, self.stall_s,
                                                 self.seconds))


class RecoveryResult:
    """What a recovery did: the plan acted on and the rows written."""

    def __init__(self, plan, generation, rows, lost_events, rewind_step, dense):
        self.plan, self.generation, self.rows = plan, generation, rows
        self.lost_events, self.rewind_step, self.dense = lost_events, rewind_step, dense

    def __repr__(self):
        return ("RecoveryResult(action=%s, rows=%d, lost_events=%d, rewind_step=%d, dense=%s)"
                % (self.plan.action, self.rows, self.lost_events, self.rewind_step, self.dense))


class Checkpointer:
    """Checkpoints and recovers a PyTorch recommendation model with CPR.

    client      a ``cpr.Client``.
    job         the job's name in storage (1-128 characters of A-Z a-z 0-9 . _ -).
                A job whose shards (this process's) already have checkpoints
                is continued: ``load()`` (or ``recover()`` of every such
                shard) before the first save. A save before that raises
                ``cpr.AlreadyExistsError``
                and writes nothing: a new run's fresh rows never land on top
                of another run's checkpoints.
    tables      embedding tables: a list, dict or ``nn.ModuleDict`` of ``nn.Embedding`` /
                ``nn.EmbeddingBag`` modules or 2-D float32 CPU weight tensors.
                Table ids in the checkpoints are their positions.
    optimizer   a ``torch.optim.Adagrad`` over the tables (its per-element
                ``sum`` is saved with the rows), or None; ``states`` instead
                gives each table's state tensor (rows, k) or (rows,) directly
                (row-wise Adagrad).
    dense       objects with ``state_dict()`` / ``load_state_dict()`` (the
                MLPs and their optimizer): a dict name -> object. Saved as one
                blob with shard ``dense_shard``'s parts.
    num_shards, scheme   how rows split into shards ("range" or "modulo").
    policy      "full", "delta", "mfu", "ssu" or "topk-norm": what a save
                takes; ``budget`` the fraction of each shard's rows a
                prioritized save takes, in (0, 1]. "auto": the ``estimator``'s choice
                for every save (a ``cpr.Estimator``, which the checkpointer
                feeds with its saves, failures and loads); ``due()`` then
                says when the next save is due, and ``recover`` picks
                partial or full recovery.
    shards      the shards this process owns and saves (default: all), each
                below ``num_shards`` (at least 1).
    ssu_rate    the probability an access joins the SSU sample.
    hooks       install forward pre-hooks on table modules that record the
                indices of training batches (False: call ``observe``).
    restore_threads  restores run at once (default: one per storage node, at
                most the CPUs and 8).
    codec       the encoding of DELTA and prioritized parts' rows: "bf16",
                "f16", "int8" or "int4" (cpr/codec.h; None: f32), or "auto":
                the estimator's choice at each save (its choose_codec must be
                set; docs/model.md, "The codec"). FULL parts, the base every
                restore starts from, stay exact.

    Open the client with ``defer_send=True``: a save's copy then runs alone on
    the training thread, and its streaming starts as soon as the copy is done.
    """

    def __init__(self, client, job, tables, *, optimizer=None, states=None, dense=None,
                 num_shards=1, scheme="range", policy="mfu", budget=0.125, shards=None,
                 ssu_rate=0.01, dense_shard=0, hooks=True, seed=0, restore_threads=None,
                 estimator=None, codec=None):
        self.client, self.job = client, _check_job(job)
        named = isinstance(tables, (collections.abc.Mapping, torch.nn.ModuleDict))
        self.names = list(tables.keys()) if named else list(range(len(tables)))
        mods = list(tables.values()) if named else list(tables)
        # The modules, the optimizer and `states` are kept, not the tensors
        # they hold now: optimizer.load_state_dict() puts new `sum` tensors in,
        # and `module.weight = nn.Parameter(...)` a new weight. Each save,
        # restore and failure looks the tensors up again (_tables).
        self.modules = mods
        self._optimizer, self._states = optimizer, states
        weights = [_weight(t) for t in mods]
        states_now = [self._state_of(w, optimizer, states, name)
                      for w, name in zip(weights, self.names)]
        self.dense = dict(dense or {})
        self.num_shards, self.scheme = _whole("num_shards", num_shards, 1), scheme
        self.policy, self.budget = _policy(policy), _check_budget(budget)
        self.estimator = estimator
        self.codec = codec  # prioritized and DELTA parts; FULL parts stay exact
        if self.policy is None and estimator is None:
            raise cpr.InvalidArgumentError("policy 'auto' needs estimator=cpr.Estimator(...)")
        if codec == "auto" and estimator is None:
            raise cpr.InvalidArgumentError(
                "codec 'auto' needs estimator=cpr.Estimator(..., choose_codec=True)")
        self._t0 = time.monotonic()
        self._last_save = None
        self.shards = _check_shards(shards, self.num_shards)
        self.dense_shard = _whole("dense_shard", dense_shard, 0)
        if self.dense_shard >= self.num_shards:
            raise cpr.InvalidArgumentError("dense_shard: %d is not a shard of num_shards %d"
                                           % (self.dense_shard, self.num_shards))
        # One stream per storage node: streams to one node share its disk and,
        # here, its cores (measured: 2 streams to one node on 2 cores were
        # 8-25% slower than one; docs/performance.md).
        self.restore_threads = int(restore_threads or min(8, client.nodes, os.cpu_count() or 1))
        self._norm = self.policy == cpr.Policy.TOPK_NORM or (
            self.policy is None and estimator.policy == cpr.Policy.TOPK_NORM)
        self.trackers = [cpr.Tracker(w.shape[0], num_shards=self.num_shards, scheme=scheme,
                                     track="all", ssu_rate=ssu_rate, seed=seed + i)
                         for i, w in enumerate(weights)]
        self.schema = [(i, w.shape[0], w.shape[1], 0 if s is None else s.shape[1])
                       for i, (w, s) in enumerate(zip(weights, states_now))]
        self._pending = [[] for _ in mods]   # indices seen since the last step()
        self._before = [[] for _ in mods]    # TOPK_NORM: rows before the update
        self._hooks = []
        if hooks:
            for i, m in enumerate(mods):
                if isinstance(m, torch.nn.Module):
                    self._hooks.append(m.register_forward_pre_hook(self._hook(i)))
        self._inflight = None
        self._lock = threading.Lock()  # _inflight
        # Saves, recoveries and close() one at a time, whichever threads call
        # them: each save gets its own checkpoint id and its own outcome.
        self._save_lock = threading.RLock()
        self._closed = False
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cpr-save")
        # The recovery record's generation this process has acted on: a new
        # process starts from the current one, so that it never acts on a
        # plan recorded before it began (load() and recover() record anew).
        self.generation = client.recovery_get(job)[0]
        self.abandoned = (0, 0)  # ids written after the cut a full recovery rewound to
        parts = self._parts()
        # A timeline without its FULL base yet: saves are FULL. A new job's
        # first save is one: a PRIORITY part holds only the rows it chose,
        # and a shard restored from PRIORITY parts alone has every other row
        # zero (the C trainer starts with a FULL likewise).
        self._full_next = not self._every_shard_has_full(parts)
        self.next_checkpoint = max((p.checkpoint for p in parts), default=0) + 1
        # Another run's checkpoints of this process's shards: saving fresh
        # rows on top of them would mix two models (a partial recovery would
        # restore the other run's rows). Saves are refused until load() (or
        # a full recovery) took the job over, or a partial recovery restored
        # every such shard; shards nobody saved yet are free (the ranks of
        # one new job start at different times). The parts are listed again
        # at the first save, for a run that started with this one.
        self._taken = self._already_saved(parts)
        self._first_save = True

    # ---- set-up ----------------------------------------------------------------

    @staticmethod
    def _state_of(weight, optimizer, states, name):
        if states is not None and name in states:
            s = states[name]
        elif optimizer is not None:
            if not isinstance(optimizer, torch.optim.Adagrad):
                raise cpr.InvalidArgumentError(
                    "optimizer: only torch.optim.Adagrad's state is known (its 'sum'); for %s "
                    "give its per-row state tensors in states=, or optimizer=None if it keeps "
                    "none (SGD)" % type(optimizer).__name__)
            s = optimizer.state.get(weight, {}).get("sum")  # .get: state is a defaultdict
            if s is None:
                raise cpr.InvalidArgumentError(
                    "optimizer: it holds no Adagrad 'sum' for table %r's weight: give the "
                    "Adagrad that trains the tables (build it on their weights as they are)"
                    % (name,))
        else:
            return None
        if not isinstance(s, torch.Tensor) or s.device.type != "cpu" or \
                s.dtype != torch.float32 or not s.is_contiguous() or \
                s.numel() % max(1, weight.shape[0]):
            raise cpr.InvalidArgumentError("optimizer state of table %r must be a contiguous "
                                           "float32 CPU tensor of (%d, k) or (%d,) elements "
                                           "(got %s)" % (name, weight.shape[0], weight.shape[0],
                                                         _describe(s)))
        return s.view(weight.shape[0], -1)

    def _weight_now(self, i):
        """Table i's weight as its module holds it now, checked against the
        schema (the checkpoints' shapes are fixed when the checkpointer is built)."""
        m = self.modules[i]
        w = getattr(m, "weight", m)
        _, rows, dim, _ = self.schema[i]
        if not isinstance(w, torch.Tensor) or tuple(w.shape) != (rows, dim) or \
                w.dtype != torch.float32 or w.device.type != "cpu" or not w.is_contiguous():
            raise cpr.FailedPreconditionError(
                "table %r: its weight is now %s, not the contiguous float32 CPU tensor of "
                "(%d, %d) it was when the Checkpointer was built; give it back that shape "
                "(or build a new Checkpointer, on a new job, for the new tables)"
                % (self.names[i], _describe(w), rows, dim))
        return w

    def _tables(self):
        """Every table's (weight, state or None) as the modules and the optimizer
        hold them now: what a save copies and a restore writes into."""
        out = []
        for i in range(len(self.modules)):
            w = self._weight_now(i)
            cols, name = self.schema[i][3], self.names[i]
            if not cols:  # the schema has no state for this table
                out.append((w, None))
                continue
            if (self._states is None or name not in self._states) and \
                    self._optimizer is not None and w not in self._optimizer.state:
                raise cpr.FailedPreconditionError(
                    "table %r: the Checkpointer's optimizer holds no state for its weight "
                    "(the module's weight was replaced by a Parameter that optimizer does not "
                    "train?): replace weights before building the optimizer and the "
                    "Checkpointer, or copy into the weight (weight.data.copy_)" % (name,))
            try:
                s = self._state_of(w, self._optimizer, self._states, name)
            except cpr.InvalidArgumentError as e:
                raise cpr.FailedPreconditionError(
                    "table %r: its optimizer state changed since the Checkpointer was built: "
                    "%s" % (name, e)) from None
            if s is None or s.shape[1] != cols:
                raise cpr.FailedPreconditionError(
                    "table %r: its optimizer state is now %s, not the %d column(s) per row it "
                    "had when the Checkpointer was built; give it back that shape (or build a "
                    "new Checkpointer, on a new job)" % (name, _describe(s), cols))
            out.append((w, s))
        return out

    @property
    def weights(self):
        """Every table's weight tensor, as the modules hold it now."""
        return [w for w, _ in self._tables()]

    @property
    def states(self):
        """Every table's optimizer state (rows, k) or None, as the optimizer
        (or ``states``) holds it now."""
        return [s for _, s in self._tables()]

    def _parts(self):
        try:
            return self.client.list(self.job)
        except cpr.NotFoundError:
            return []

    def _already_saved(self, parts):
        """The committed parts that keep this process from saving before
        load()/recover(): its shards' (or any of another layout)."""
        return [p for p in parts if p.committed and
                (p.shard in self.shards or p.num_shards != self.num_shards)]

    def _taken_message(self):
        theirs = self._taken
        layouts = sorted({p.num_shards for p in theirs} - {self.num_shards})
        return ("job %r already has checkpoints of shard(s) %s (newest %d%s): call load() to "
                "continue it (or recover(...) of those shards), or use a new job name"
                % (self.job, _shard_list(sorted({p.shard for p in theirs})),
                   max(p.checkpoint for p in theirs),
                   ", saved with num_shards %s" % _shard_list(layouts) if layouts else ""))

    def _every_shard_has_full(self, parts):
        full = {p.shard for p in parts  # of this layout: another's shards hold other rows
                if p.committed and p.kind == "FULL" and p.num_shards == self.num_shards}
        return all(s in full for s in self.shards)

    def _hook(self, i):
        def record(module, args):
            if module.training and args:
                try:
                    self._record(i, args[0])
                except cpr.InvalidArgumentError as e:
                    # The module rejects the batch right after this hook, and the
                    # caller may skip it and train on: it is not counted.
                    warnings.warn("cpr.torch: batch not tracked: %s" % e, RuntimeWarning,
                                  stacklevel=2)
        return record

    def _record(self, i, indices):
        idx = indices.detach().reshape(-1)
        if idx.dtype != torch.int64:
            idx = idx.to(torch.int64)
        idx = idx.contiguous()  # a column of a batch is strided: copied once here
        rows = self.schema[i][1]
        if len(idx):  # a bad batch recorded would fail every step() after it
            low, high = torch.aminmax(idx)
            if low < 0 or high >= rows:
                bad = int(low) if low < 0 else int(high)
                raise cpr.InvalidArgumentError(
                    "indices: %d is outside table %r (%d rows): the batch's indices must be in "
                    "0..%d" % (bad, self.names[i], rows, rows - 1))
        self._pending[i].append(idx)
        if self._norm:
            uniq = torch.unique(idx)
            self._before[i].append((uniq, self._weight_now(i).detach()[uniq].clone()))

    def close(self):
        """Wait for the save in flight and remove the hooks (also when that
        save failed: its error is raised after). Saves and recoveries after
        it raise cpr.FailedPreconditionError."""
        with self._save_lock:
            self._closed = True
            try:
                self.wait()
            finally:
                for h in self._hooks:
                    h.remove()
                self._hooks = []
                self._pool.shutdown(wait=True)

    def _check_open(self):
        if self._closed:
            raise cpr.FailedPreconditionError("the Checkpointer is closed: build a new one to "
                                              "save or recover")

    # ---- tracking --------------------------------------------------------------

    def observe(self, table, indices):
        """Record that a training batch used `indices` of table `table` (what
        the hooks do; call it yourself for tables given as tensors). Indices
        outside the table raise cpr.InvalidArgumentError and record nothing
        (the hooks warn and skip such a batch, which the module rejects)."""
        self._record(self.names.index(table) if table in self.names else int(table),
                     torch.as_tensor(indices))

    def step(self):
        """After the optimizer's step: the rows the batches since the last
        call used were updated; tell the trackers (and, for TOPK_NORM, by how
        much)."""
        self._settle(block=False)
        for i, tracker in enumerate(self.trackers):
            if not self._pending[i]:
                continue
            idx = torch.cat(self._pending[i]) if len(self._pending[i]) > 1 else self._pending[i][0]
            sq = None
            if self._norm and self._before[i]:
                sq = self._sq_change(i, idx)
            tracker.observe(idx, sq)
            self._pending[i], self._before[i] = [], []

    def _sq_change(self, i, idx):
        """TOPK_NORM: each updated row's squared change (now against its copy
        from the forward, taken before the optimizer step), on the row's
        first occurrence in idx; 0 on the others."""
        rows = torch.cat([u for u, _ in self._before[i]])
        before = torch.cat([b for _, b in self._before[i]])
        change = (self._weight_now(i).detach()[rows] - before).pow(2).sum(1)
        uniq, inv = torch.unique(rows, return_inverse=True)
        per_row = torch.zeros(len(uniq)).scatter_(0, inv, change)  # copies agree
        seen, first = np.unique(idx.numpy(), return_index=True)
        sq = torch.zeros(len(idx), dtype=torch.float32)
        sq[torch.from_numpy(first)] = per_row[
            torch.searchsorted(uniq, torch.from_numpy(seen))].to(torch.float32)
        return sq

    def stats(self):
        """Per table, per shard: the trackers' counters (cpr.TrackerStats)."""
        return [[t.stats(s) for s in range(self.num_shards)] for t in self.trackers]

    # ---- saving ----------------------------------------------------------------

    def _budget(self, policy, budget):
        return {} if policy in (cpr.Policy.FULL, cpr.Policy.DELTA) else {"fraction": budget}

    def now(self):
        """Seconds since the checkpointer was made: the estimator's clock."""
        return time.monotonic() - self._t0

    def _track(self):
        if self.estimator is not None:
            up = uns = 0
            for t in self.trackers:
                for s in self.shards:
                    a, b = t.events(s)
                    up, uns = up + a, uns + b
            self.estimator.tracked(self.now(), up, uns)

    def due(self):
        """policy "auto": whether the estimator's interval has passed since
        the last save began (True before the first)."""
        if self.estimator is None:
            raise cpr.FailedPreconditionError("due() answers for policy 'auto' only")
        if self._last_save is None:
            return True
        return self.now() - self._last_save >= self.estimator.decide().interval_s

    def _dense_bytes(self):
        if not self.dense:
            return None
        buf = io.BytesIO()
        torch.save({k: v.state_dict() for k, v in self.dense.items()}, buf)
        return buf.getvalue()

    def async_save(self, step, policy=None):
        """Save the rows `policy` (default: the checkpointer's) chooses from
        each of this process's shards, with the dense state. Returns a
        concurrent.futures.Future of a SaveResult, done once every shard's
        part committed (its exception: the cpr.Error that failed it). The
        caller's stall is selection and the copy of the chosen rows."""
        with self._save_lock:  # one id, one outcome per save (threads)
            self._check_open()  # before an id or a row is used
            return self._async_save(step, policy)

    def _async_save(self, step, policy):
        if self._first_save and not self._taken:  # a run that started with this one
            self._taken = self._already_saved(self._parts())
        if self._taken:  # nothing written: another run's checkpoints (__init__)
            raise cpr.AlreadyExistsError(self._taken_message())
        self._first_save = False
        policy = self.policy if policy is None else _policy(policy)
        self.wait()  # one save in flight: the previous one lands first
        if self._full_next:  # no FULL landed since the rewind or the restart (planner P6)
            policy = cpr.Policy.FULL
        budget, codec = self.budget, self.codec
        if policy is None or codec == "auto":  # the estimator's choices
            self._track()
            d = self.estimator.decide()
            if policy is None:
                policy, budget = cpr.Policy(d.policy), d.fraction
            if codec == "auto":
                codec = None if d.codec == "f32" else d.codec
        self._last_save = self.now()
        t0 = time.perf_counter()
        tables = self._tables()  # as they are now (load_state_dict, new Parameters)
        ckpt, step = self.next_checkpoint, int(step)
        self.next_checkpoint += 1
        kind = _KIND[policy]
        parts, tsaves, rows, nbytes = [], [], 0, 0
        try:
            for shard in self.shards:
                part = self.client.begin(self.job, shard, ckpt, tables=self.schema, kind=kind,
                                         step=step, num_shards=self.num_shards, wait=False,
                                         codec=None if kind == cpr.Kind.FULL else codec)
                parts.append(part)
                for i, (tracker, (w, s)) in enumerate(zip(self.trackers, tables)):
                    ids = tracker.select(shard, policy, **self._budget(policy, budget))
                    tsaves.append(tracker.begin(shard, policy, ids))
                    st = None if s is None else _array(s)
                    if len(ids) and policy == cpr.Policy.FULL and self.scheme == "range":
                        first = int(np.asarray(ids)[0])  # a range shard: one bulk copy
                        part.put_gather(i, _array(w), st, first=first, n=len(ids))
                    elif len(ids):
                        part.put_gather(i, _array(w), st, ids=ids)
                    rows += len(ids)
                    nbytes += len(ids) * (8 + 4 * self.schema[i][2] + 4 * self.schema[i][3])
                if shard == self.dense_shard:
                    blob = self._dense_bytes()
                    if blob is not None:
                        part.put_blob(DENSE_BLOB, blob)
                        nbytes += len(blob)
        except BaseException:
            # The rows go back to the trackers first; an abort that fails too
            # (the node that failed the save) must not hide why it failed.
            for ts in tsaves:
                ts.abort()
            _abort_all(parts)
            raise
        stall = time.perf_counter() - t0

        def land():  # the background: streams, then commits, every shard's part
            try:
                for p in parts:
                    p.commit()
            except BaseException:
                _abort_all(parts)
                raise
            if policy == cpr.Policy.FULL:  # the timeline has its base (until then: FULL)
                self._full_next = False
            return SaveResult(ckpt, step, policy, rows, nbytes, stall, time.perf_counter() - t0)

        with self._lock:
            self._inflight = (self._pool.submit(land), tsaves)
            return self._inflight[0]

    def save(self, step, policy=None):
        """async_save and wait: the SaveResult once committed (its trackers
        settled), or the error that failed this save."""
        with self._save_lock:  # no other thread's save between this one and its outcome
            fut = self.async_save(step, policy)
            self._settle(block=True)
            return fut.result()

    def wait(self):
        """Wait for the save in flight (its error, if it failed, is raised)."""
        self._settle(block=True)

    def _settle(self, block):
        """On the training thread (the trackers are used by one thread): once
        the save in flight landed, its tracker saves commit (the rows are
        saved) or abort (their tracker values return)."""
        with self._lock:
            if self._inflight is None or not (block or self._inflight[0].done()):
                return
            fut, tsaves = self._inflight
            self._inflight = None
        try:
            res = fut.result()
        except BaseException:
            for ts in tsaves:
                ts.abort()  # aborting an ended save does nothing; this never raises
            raise
        for ts in tsaves:
            ts.commit()  # commits only drop pending values: no error to expect
        if self.estimator is not None:
            self._track()
            self.estimator.saved(self.now(), res.policy, res.stall_s, res.bytes)
            self.estimator.background(res.policy, max(0.0, res.seconds - res.stall_s), 0.0)

    # ---- failures and recovery -------------------------------------------------

    def _shard_rows(self, shard, n):
        """Row ids of `shard` in a table of n rows."""
        if self.scheme == "modulo":
            return np.arange(shard, n, self.num_shards)
        per = -(-n // self.num_shards)
        return np.arange(shard * per, min(n, (shard + 1) * per))

    def simulate_failure(self, shard):
        """Emulate the loss of `shard`'s node: its rows and optimizer state
        are zeroed in every table and its trackers cleared. Returns the update
        events that had not been saved (what a partial recovery loses)."""
        lost = 0
        with torch.no_grad():
            for (w, s), t in zip(self._tables(), self.trackers):
                rows = torch.from_numpy(self._shard_rows(shard, w.shape[0]))
                w[rows] = 0
                if s is not None:
                    s[rows] = 0
                lost += t.wipe_shard(shard)
        return lost

    def load(self):
        """Resume a job (new processes, nothing live): every shard's rows and
        optimizer state and the dense state as of the latest consistent cut;
        RecoveryResult.rewind_step is the step to go on from. The decision is
        recorded like any recovery's."""
        return self.recover([], "full")

    def recover(self, failed, mode=None, *, dense_replica=None, lost_events=0):
        """Recover from the failure of shards `failed`: decide and record the
        plan (or act on the one another process recorded), then restore.
        partial: each failed shard's rows as of its newest committed part,
        in place; the other rows stay as they are. full: every shard at the
        latest consistent cut, and the dense state from its blob; training
        rewinds to RecoveryResult.rewind_step. mode None: the estimator's
        choice, or partial without one. dense_replica: the dense state
        survives on other processes (default: True for partial). A plan of
        action "restart-from-scratch" (nothing consistent was committed)
        restores nothing: the caller re-initializes the tables and dense
        state, and the next save is FULL whatever its policy."""
        with self._save_lock:
            self._check_open()
            return self._recover(sorted(int(s) for s in failed), mode, dense_replica,
                                 lost_events)

    def _recover(self, failed, mode, dense_replica, lost_events):
        # The save in flight may have failed with the node: its rows go back
        # to the trackers (its parts were aborted) and recovery goes on.
        try:
            self.wait()
        except cpr.Error:
            pass
        # Batches recorded before the failure were of rows now restored.
        self._pending = [[] for _ in self.modules]
        self._before = [[] for _ in self.modules]
        # The recovery follows the saves made (after a prioritized save a
        # full recovery would rewind past all of them); the failure moves
        # the decision for the saves to come.
        if mode is None:
            mode = self.estimator.recovery_mode() if self.estimator is not None else "partial"
        if self.estimator is not None and failed:
            self._track()
            self.estimator.failed(self.now())
        if dense_replica is None:
            dense_replica = mode == "partial"
        plan, gen, _won = self.client.decide_and_record(
            self.job, self.num_shards, failed, mode, expected_generation=self.generation,
            dense_replica=dense_replica, dense_shard=self.dense_shard, abandoned=self.abandoned)
        self.generation = gen
        t0 = time.perf_counter()
        result = self._execute(plan, gen, lost_events)
        # This process continues the job: after a full plan every shard is
        # the job's; after a partial one, the shards it restored (the others
        # still hold this process's own rows, which are not the job's if it
        # is a new run: saves stay refused until they are restored too).
        if plan.action == "partial":
            restored = {e.shard for e in plan.shards if e.source == "store"}
            self._taken = [p for p in self._taken
                           if p.num_shards != self.num_shards or p.shard not in restored]
        else:
            self._taken = []
        self._first_save = False
        stored = sum(e.source == "store" for e in plan.shards)
        if self.estimator is not None and stored:
            self.estimator.loaded(time.perf_counter() - t0, stored)
        if plan.action != "partial" and self.next_checkpoint - 1 > plan.cut:
            # Parts after the cut (every part, when training starts over)
            # belong to the timeline training left: later plans ignore them,
            # and new ids stay above them (ids only grow). Their row versions
            # would still show through a later restore "as of" a newer id
            # wherever no save since rewrote the row, so a FULL save starts
            # the new timeline: of the restored state at once (in the
            # background; a later recovery waits for it to land), or, from
            # scratch, the next save, once the caller has re-initialized.
            self.abandoned = (plan.cut, self.next_checkpoint - 1)
            self._full_next = True  # until a FULL save lands
            if plan.action == "full":
                self.async_save(plan.rewind_step, cpr.Policy.FULL)
        if plan.action == "restart-from-scratch":
            for t in self.trackers:  # every row starts over
                for shard in self.shards:
                    t.wipe_shard(shard)
            self._full_next = True
        return result

    def _execute(self, plan, gen, lost_events):
        # Every (shard, table) restore at once, on up to restore_threads
        # threads (each releases the GIL; a node serves each stream on its
        # own); the trackers are told afterwards, on this thread.
        work = []
        # After a resharding a shard's rows were written by other shards,
        # maybe on other nodes: every shard's parts are read (the client
        # merges the nodes' answers by each row's version), and the rows
        # selected by the present sharding below.
        everywhere = "resharded" in plan.problems
        tables = self._tables()  # as they are now: restored into the live tensors
        for entry in plan.shards:
            if entry.source != "store":
                continue
            for i, ((w, s), t) in enumerate(zip(tables, self.trackers)):
                n = w.shape[0]
                q = {"as_of": entry.as_of}
                if not everywhere:
                    q["shards"] = [entry.shard]
                vw, vs, base = _array(w), None if s is None else _array(s), 0
                if self.scheme == "modulo":
                    q.update(modulo=self.num_shards, remainder=entry.shard)
                else:  # a range shard: restore into its window of the table
                    ids = self._shard_rows(entry.shard, n)
                    if not len(ids):
                        continue
                    base, end = int(ids[0]), int(ids[-1]) + 1
                    vw, vs = vw[base:end], None if vs is None else vs[base:end]
                    q.update(ranges=[(base, end)], row_base=base)
                # full: the rewound rows' trackers start over here, and so
                # need no word of which rows came back (nothing runs between
                # this wipe and the restore); partial: the restored rows'
                # trackers are cleared after it, whatever they saw since the
                # failure.
                flags = None
                if plan.action == "full":
                    t.wipe_shard(entry.shard)
                else:
                    flags = np.zeros(len(vw), np.uint8)
                work.append((i, vw, vs, flags, base, q))

        def restore(job):
            i, vw, vs, flags, _, q = job
            return self.client.restore_into(self.job, i, vw, vs, restored=flags, **q)

        rows = 0
        if work:
            with concurrent.futures.ThreadPoolExecutor(
                    min(len(work), self.restore_threads)) as pool:
                results = list(pool.map(restore, work))
            for (i, _, _, flags, base, _), res in zip(work, results):
                if flags is not None:
                    self.trackers[i].restored(np.flatnonzero(flags) + base)
                rows += res.rows
        dense = "keep"
        for entry in plan.shards:
            if entry.source == "store" and entry.dense == "blob" and self.dense:
                blob = self.client.read_blob(self.job, entry.dense_shard,
                                             entry.dense_checkpoint, DENSE_BLOB)
                state = torch.load(io.BytesIO(blob))
                for k, obj in self.dense.items():
                    obj.load_state_dict(state[k])
                dense = "blob"
                break
        return RecoveryResult(plan, gen, rows, lost_events, plan.rewind_step, dense)
