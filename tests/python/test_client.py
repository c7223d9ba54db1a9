# SPDX-License-Identifier: Apache-2.0
"""cpr.Client, cpr.Part and restores against a real ckptd (and local://):
byte-exact round trips for every query shape, errors and bad input, the GIL."""
import os
import threading
import time

import numpy as np
import pytest

import cpr

T0, T0_ROWS, T0_DIM, T0_SDIM = 0, 1000, 8, 1
T1, T1_ROWS, T1_DIM = 1, 300, 4
SHARDS = 2
SCHEMA = [(T0, T0_ROWS, T0_DIM, T0_SDIM), (T1, T1_ROWS, T1_DIM, 0)]


def table0(version):
    """Values and state of table 0 at a version: distinct bit patterns per row."""
    rng = np.random.default_rng(100 + version)
    return (rng.standard_normal((T0_ROWS, T0_DIM)).astype(np.float32),
            rng.standard_normal((T0_ROWS, T0_SDIM)).astype(np.float32))


def table1(version):
    rng = np.random.default_rng(200 + version)
    return rng.standard_normal((T1_ROWS, T1_DIM)).astype(np.float32)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


CHANGED = np.arange(3, T0_ROWS, 7, dtype=np.int64)  # rows checkpoint 2 rewrites


def write_job(c, job):
    """Checkpoint 1: FULL of both shards (rows by modulo). Checkpoint 2: a
    PRIORITY part of shard 1 rewriting its CHANGED rows of table 0."""
    v1, s1 = table0(1)
    w1 = table1(1)
    for shard in range(SHARDS):
        ids0 = np.arange(shard, T0_ROWS, SHARDS, dtype=np.int64)
        ids1 = np.arange(shard, T1_ROWS, SHARDS, dtype=np.uint64)
        with c.begin(job, shard, 1, tables=SCHEMA, kind=cpr.Kind.FULL, step=10,
                     num_shards=SHARDS) as p:
            p.put_rows(T0, ids0, v1[ids0], s1[ids0])
            p.put_rows(T1, ids1, w1[ids1.astype(np.int64)])
            if shard == 0:
                p.put_blob("dense", b"dense-state-1" * 1000)
    v2, s2 = table0(2)
    mine = CHANGED[CHANGED % SHARDS == 1]
    with c.begin(job, 1, 2, tables=SCHEMA, kind="priority", step=20, num_shards=SHARDS) as p:
        p.put_rows(T0, mine, v2[mine], s2[mine])
    want_v, want_s = v1.copy(), s1.copy()
    want_v[mine], want_s[mine] = v2[mine], s2[mine]
    return (v1, s1, w1), (want_v, want_s), mine


@pytest.fixture(params=["grpc", "local", "local-buffered"])
def any_client(request, ckptd, tmp_path):
    """Through ckptd, with the store in-process, and in-process reading its
    segments through the page cache (buffered_reads)."""
    target = ckptd.target if request.param == "grpc" else "local://" + str(tmp_path / "store")
    with cpr.Client(target, buffered_reads=request.param == "local-buffered") as c:
        yield c


def check_rows(got, ids, values, state=None):
    assert np.array_equal(np.asarray(got.ids), np.asarray(ids, dtype=np.uint64))
    assert same_bits(got.values, values)
    if state is None:
        assert got.state is None
    else:
        assert same_bits(got.state, state)


def test_round_trip_every_query_shape(any_client, job):
    c = any_client
    (v1, s1, w1), (v2, s2), mine = write_job(c, job)
    parts = c.list(job)
    assert [(p.checkpoint, p.shard, p.kind) for p in parts] == [
        (1, 0, "FULL"), (1, 1, "FULL"), (2, 1, "PRIORITY")]
    assert all(p.committed for p in parts)
    assert c.latest_cut(job) == 1
    assert job in c.list_jobs()

    every = np.arange(T0_ROWS)
    # The newest state: checkpoint 2 over checkpoint 1.
    rows, res = c.restore(job)
    assert res.as_of == 2 and res.rows == T0_ROWS + T1_ROWS
    check_rows(rows[T0], every, v2, s2)
    check_rows(rows[T1], np.arange(T1_ROWS), w1)
    # As of checkpoint 1, and the consistent cut (also 1: PRIORITY is not consistent).
    for kw in ({"as_of": 1}, {"consistent": True}):
        rows, res = c.restore(job, **kw)
        assert res.as_of == 1
        check_rows(rows[T0], every, v1, s1)
    # One table; row ranges; modulo; the node of one shard; small batches.
    rows, _ = c.restore(job, tables=[T1])
    assert list(rows) == [T1]
    rows, _ = c.restore(job, tables=[T0], ranges=[(10, 20), (500, 510)])
    sel = np.r_[10:20, 500:510]
    check_rows(rows[T0], sel, v2[sel], s2[sel])
    rows, _ = c.restore(job, tables=[T0], modulo=SHARDS, remainder=1)
    sel = np.arange(1, T0_ROWS, SHARDS)
    check_rows(rows[T0], sel, v2[sel], s2[sel])
    rows, res = c.restore(job, tables=[T0], shards=[1], modulo=SHARDS, remainder=1, batch_rows=7)
    check_rows(rows[T0], sel, v2[sel], s2[sel])
    # Into the caller's arrays, in place, with the restored flags and a row base.
    out_v = np.full((T0_ROWS - 100, T0_DIM), np.nan, np.float32)
    out_s = np.full((T0_ROWS - 100, 1), np.nan, np.float32)
    flags = np.zeros(T0_ROWS - 100, np.uint8)
    res = c.restore_into(job, T0, out_v, out_s, row_base=100, restored=flags,
                         ranges=[(100, T0_ROWS)])
    assert res.rows == T0_ROWS - 100 and res.as_of == 2
    assert same_bits(out_v, v2[100:]) and same_bits(out_s, s2[100:]) and flags.all()
    # Blobs.
    assert c.read_blob(job, 0, 1, "dense") == b"dense-state-1" * 1000
    with pytest.raises(cpr.NotFoundError):
        c.read_blob(job, 0, 1, "nope")


def test_arrays_share_memory(client, job):
    with client.begin(job, 0, 1, tables=[(0, 10, 3, 0)]) as p:
        p.put_range(0, 0, np.ones((10, 3), np.float32))
    rows, _ = client.restore(job)
    a = rows[0].values
    assert a.shape == (10, 3) and a.format == "f" and len(a) == 10
    view = np.asarray(a)
    view[0, 0] = 7.0
    assert np.asarray(a)[0, 0] == 7.0  # the same memory, not a copy
    assert memoryview(rows[0].ids).format == "Q"


def test_torch_tensors_in_place(client, job):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(500, 16, generator=g)
    state = torch.rand(500, generator=g)
    weight.requires_grad_(True)  # a model's parameter: read through .detach()
    ids = torch.arange(0, 500, 3)
    with client.begin(job, 0, 1, tables=[(0, 500, 16, 1)]) as p:
        p.put_gather(0, weight, state, ids=ids)
    with client.begin(job, 0, 2, tables=[(0, 500, 16, 1)], kind="priority") as p:
        sel = torch.tensor([4, 5, 6])
        p.put_rows(0, sel, weight.detach()[sel] * 2, state[sel] * 2)
    out = torch.zeros(500, 16)
    out_s = torch.zeros(500)
    res = client.restore_into(job, 0, out, out_s, as_of=1)
    assert res.rows == len(ids)
    assert torch.equal(out[ids], weight.detach()[ids])
    assert torch.equal(out_s[ids], state[ids])
    assert torch.count_nonzero(out[1]) == 0  # never saved: untouched
    client.restore_into(job, 0, out, out_s)  # newest: rows 4..6 from checkpoint 2
    assert torch.equal(out[4:7], weight.detach()[4:7] * 2)
    assert torch.equal(out[3], weight.detach()[3])


def test_put_gather_range_and_bounds(client, job):
    table = np.arange(100 * 4, dtype=np.float32).reshape(100, 4)
    with client.begin(job, 0, 1, tables=[(0, 200, 4, 0)]) as p:
        with pytest.raises(cpr.InvalidArgumentError, match="outside"):
            p.put_gather(0, table, ids=np.array([5, 150]), row_base=0)
        with pytest.raises(cpr.InvalidArgumentError, match="outside"):
            p.put_gather(0, table, first=90, n=20, row_base=0)
        p.put_gather(0, table, first=100, row_base=100)  # rows 100..199 from table[0..99]
    rows, _ = client.restore(job)
    check_rows(rows[0], np.arange(100, 200), table)


def test_shape_errors_name_the_argument_and_the_table(client, job):
    """Puts check the arrays' shapes against the part's schema and say, in
    those shapes, what to pass; nothing is queued."""
    v, s = np.ones((10, T0_DIM), np.float32), np.ones((10, T0_SDIM), np.float32)
    with client.begin(job, 0, 1, tables=SCHEMA) as p:
        cases = [
            (lambda: p.put_range(T0, 0, v), r"^state: table 0 has state_dim 1: pass its "
                                             r"\(n, 1\) optimizer state$"),
            (lambda: p.put_range(T0, 0, v, None), r"^state: table 0 has state_dim 1"),
            (lambda: p.put_rows(T0, np.arange(10), v), r"^state: table 0 has state_dim 1"),
            (lambda: p.put_range(T0, 0, np.ones((10, 5), np.float32), s),
             r"^values: shape \(10, 5\), table 0 has dim 8$"),
            (lambda: p.put_rows(T0, np.arange(3), v[:2], s[:3]),
             r"^values: shape \(2, 8\), expected \(3, 8\): one row per id$"),
            (lambda: p.put_range(T0, 0, v, np.ones((10, 2), np.float32)),
             r"^state: shape \(10, 2\), expected \(10, 1\) \(table 0 has state_dim 1\)$"),
            (lambda: p.put_range(T1, 0, np.ones((10, T1_DIM), np.float32), s),
             r"^state: table 1 has state_dim 0 \(no optimizer state\): pass None$"),
        ]
        for put, text in cases:
            with pytest.raises(cpr.InvalidArgumentError, match=text):
                put()
        assert p.progress().rows_queued == 0 and p.progress().error is None
        p.put_range(T0, 0, v, s.reshape(-1))  # state_dim 1: a 1-D state is (n, 1)
    assert client.restore(job)[1].rows == 10


def test_bad_input_raises_and_changes_nothing(client, job):
    good_v = np.ones((4, T0_DIM), np.float32)
    good_s = np.zeros((4, 1), np.float32)
    ids = np.array([1, 2, 3, 4])
    p = client.begin(job, 0, 1, tables=SCHEMA[:1])
    cases = [
        (dict(ids=ids, values=good_v.astype(np.float64), state=good_s), "float32"),
        (dict(ids=ids, values=np.ones((4, 2 * T0_DIM), np.float32)[:, ::2], state=good_s),
         "C-contiguous"),
        (dict(ids=ids.astype(np.int32), values=good_v, state=good_s), "int64"),
        (dict(ids=ids, values=good_v[:3], state=good_s), None),  # 3 rows of values for 4 ids
        (dict(ids=ids, values=good_v, state=None), None),  # state missing
        (dict(ids=np.array([1, -2, 3, 4]), values=good_v, state=good_s), ">= 0"),
        (dict(ids=np.array([1, 2, 3, T0_ROWS]), values=good_v, state=good_s), None),
    ]
    for kw, text in cases:
        with pytest.raises(cpr.InvalidArgumentError, match=text) as e:
            p.put_rows(T0, **kw)
        assert e.value.status == cpr.Status.INVALID_ARGUMENT and str(e.value)
    with pytest.raises(TypeError, match="expected an array"):
        p.put_rows(T0, [1, 2, 3, 4], good_v, good_s)
    with pytest.raises(cpr.InvalidArgumentError):
        p.put_rows(99, ids, good_v, good_s)  # no such table in the part
    p.put_rows(T0, np.array([7, 8]), good_v[:2] * 3, good_s[:2])
    assert p.progress().rows_queued == 2 and p.progress().error is None
    p.commit()
    assert p.state == "committed"
    # A part used after commit; a read-only array to restore into.
    with pytest.raises(cpr.FailedPreconditionError, match="committed"):
        p.put_rows(T0, ids, good_v, good_s)
    with pytest.raises(cpr.FailedPreconditionError):
        p.commit()
    p.abort()  # nothing to do once ended
    ro = np.zeros((T0_ROWS, T0_DIM), np.float32)
    ro.setflags(write=False)
    with pytest.raises(cpr.InvalidArgumentError, match="read-only"):
        client.restore_into(job, T0, ro)
    # Only the two good rows are stored.
    rows, res = client.restore(job)
    assert res.rows == 2
    check_rows(rows[T0], [7, 8], good_v[:2] * 3, good_s[:2])
    [info] = client.list(job)
    assert info.rows == 2 and info.committed


def test_part_context_aborts_on_exception(client, job):
    with pytest.raises(RuntimeError):
        with client.begin(job, 0, 1, tables=SCHEMA[:1]) as p:
            p.put_rows(T0, np.array([1]), np.ones((1, T0_DIM), np.float32),
                       np.ones((1, 1), np.float32))
            raise RuntimeError("training failed mid-save")
    assert p.state == "aborted"
    with pytest.raises(cpr.NotFoundError):
        client.list(job)
    # The id is free again: nothing of the aborted part stayed behind.
    with client.begin(job, 0, 1, tables=SCHEMA[:1]):
        pass
    assert [x.committed for x in client.list(job)] == [True]


def test_closed_client(ckptd, job):
    c = cpr.Client(ckptd.target)
    p = c.begin(job, 0, 1, tables=SCHEMA[:1])
    c.close()
    assert c.closed and p.state == "aborted when its client closed"
    with pytest.raises(cpr.FailedPreconditionError, match="closed"):
        c.list(job)
    with pytest.raises(cpr.FailedPreconditionError):
        p.commit()
    c.close()  # a second close does nothing
    with cpr.Client(ckptd.target) as c2:
        with pytest.raises(cpr.NotFoundError):
            c2.list(job)  # the open part was aborted on the daemon
    # Closed inside a part's with block: the clean exit says nothing was
    # committed, instead of passing for a commit.
    c3 = cpr.Client(ckptd.target)
    with pytest.raises(cpr.FailedPreconditionError, match="nothing was committed"):
        with c3.begin(job, 0, 2, tables=SCHEMA[:1]) as p3:
            p3.put_rows(T0, np.array([1]), np.ones((1, T0_DIM), np.float32),
                        np.ones((1, 1), np.float32))
            c3.close()
    with cpr.Client(ckptd.target) as c2:
        with pytest.raises(cpr.NotFoundError):
            c2.list(job)


def test_every_status_has_its_exception():
    classes = [getattr(cpr, n) for n in dir(cpr)
               if isinstance(getattr(cpr, n), type) and issubclass(getattr(cpr, n), cpr.Error)
               and getattr(cpr, n) is not cpr.Error]
    by_status = {cls.status: cls for cls in classes}
    assert sorted(by_status) == [s.value for s in cpr.Status if s != cpr.Status.OK]
    for st, cls in by_status.items():
        assert cpr.status_name(st) == "CPR_" + cpr.Status(st).name
    assert issubclass(cpr.InvalidArgumentError, ValueError)
    assert issubclass(cpr.UnavailableError, ConnectionError)
    assert issubclass(cpr.TimeoutError, TimeoutError)


def test_statuses_from_real_calls(ckptd, client, job):
    with pytest.raises(cpr.NotFoundError) as e:
        client.restore(job)
    assert e.value.status == cpr.Status.NOT_FOUND and e.value.status_name == "CPR_NOT_FOUND"
    with pytest.raises(cpr.InvalidArgumentError, match="job"):
        client.list("not a job name")
    with pytest.raises(cpr.InvalidArgumentError, match="NUL"):
        client.list("job\0suffix")
    with client.begin(job, 0, 5, tables=SCHEMA[:1]):
        pass
    with pytest.raises((cpr.AlreadyExistsError, cpr.FailedPreconditionError)) as e:
        client.begin(job, 0, 5, tables=SCHEMA[:1])  # ids only grow per shard
    assert e.value.status in (cpr.Status.ALREADY_EXISTS, cpr.Status.FAILED_PRECONDITION)
    with pytest.raises(cpr.InvalidArgumentError, match="kind"):
        client.begin(job, 0, 6, tables=SCHEMA[:1], kind="sometimes")
    with cpr.Client("grpc://127.0.0.1:1", retries=0, call_timeout_s=2) as dead:
        with pytest.raises(cpr.UnavailableError) as e:
            dead.list(job)
        assert e.value.status == cpr.Status.UNAVAILABLE


def test_gil_released_during_restore(ckptd, client, job):
    rows, dim = 400_000, 32
    values = np.random.default_rng(1).standard_normal((rows, dim)).astype(np.float32)
    with client.begin(job, 0, 1, tables=[(0, rows, dim, 0)]) as p:
        p.put_range(0, 0, values)
    stop = threading.Event()
    ticks = []

    def spin():
        while not stop.is_set():
            ticks.append(time.monotonic())

    t = threading.Thread(target=spin)
    t.start()
    try:
        while not ticks:  # the spinner is running
            time.sleep(0)
        out = np.empty_like(values)
        start = time.monotonic()
        client.restore_into(job, 0, out)
        end = time.monotonic()
    finally:
        stop.set()
        t.join()
    assert same_bits(out, values)
    # Inside the call, away from its edges, the other thread kept running.
    margin = (end - start) / 4
    inside = [x for x in ticks if start + margin < x < end - margin]
    assert inside, "no progress on another thread during a %.3f s restore" % (end - start)


def test_recovery_record_and_plans(client, job):
    write_job(client, job)
    assert client.recovery_get(job) == (0, b"")
    assert client.recovery_put(job, 0, b"plan-a") == 1
    with pytest.raises(cpr.FailedPreconditionError):
        client.recovery_put(job, 0, b"plan-b")
    assert client.recovery_get(job) == (1, b"plan-a")

    parts = client.list(job)
    plan = cpr.plan_recovery(parts, SHARDS, failed=[1], mode="partial")
    assert plan.action == "partial" and plan.problems == []
    s0, s1 = plan.shards
    assert (s0.source, s1.source, s1.as_of, s1.kind) == ("keep", "store", 2, "PRIORITY")
    full = cpr.plan_recovery([tuple(p) for p in parts], SHARDS, mode="full")
    assert full.action == "full" and full.cut == 1 and full.rewind_step == 10
    again = cpr.Plan.decode(full.encode())
    assert again.encode() == full.encode() and again.reason == full.reason
    with pytest.raises(cpr.InvalidArgumentError):
        cpr.Plan.decode(b"{not a plan")
    with pytest.raises(cpr.InvalidArgumentError):
        cpr.plan_recovery(parts, SHARDS, failed=[SHARDS], mode="partial")

    other = job + "-rec"
    write_job(client, other)
    plan, gen, won = client.decide_and_record(other, SHARDS, failed=[0], mode="partial")
    assert gen == 1 and won and plan.action == "partial"
    # The same failure reported again: the recorded plan.
    plan2, gen2, won2 = client.decide_and_record(other, SHARDS, failed=[0], mode="full")
    assert gen2 == 1 and not won2 and plan2.encode() == plan.encode()  # the recorded one
    gen3, rec = client.read_recorded(other)
    assert gen3 == 1 and rec.encode() == plan.encode()
    # Another failure reported at the same generation is not dropped: the
    # recorded plan does not recover it, so it is planned at the next.
    plan4, gen4, won4 = client.decide_and_record(other, SHARDS, failed=[1], mode="partial")
    assert gen4 == 2 and won4 and [s.source for s in plan4.shards] == ["keep", "store"]
    assert client.read_recorded(job + "-none") == (0, None)


def test_operations(client, job):
    write_job(client, job)
    st = client.stats()
    assert st.jobs >= 1 and st.parts_committed >= 3 and isinstance(st.errors, dict)
    rep = client.verify(job)
    assert rep.problems == 0 and rep.rows_checked > 0 and rep.details == []
    for ckpt in (3, 4):
        for shard in range(SHARDS):
            with client.begin(job, shard, ckpt, tables=SCHEMA, num_shards=SHARDS) as p:
                p.put_range(T0, 0, np.zeros((1, T0_DIM), np.float32),
                            np.zeros((1, 1), np.float32))
    gc = client.gc(job, keep=1)
    assert gc.floor == 4 and gc.parts_removed >= 3
    assert [p.checkpoint for p in client.list(job)] == [4, 4]
    with pytest.raises(cpr.FailedPreconditionError):
        client.restore(job, as_of=1)  # below the retention floor
    assert client.nodes == 1 and client.node_of(job, 0) == 0


def test_abort_by_id(ckptd, client, job):
    writer = cpr.Client(ckptd.target)
    p = writer.begin(job, 0, 1, tables=SCHEMA[:1])
    p.put_rows(T0, np.array([1]), np.ones((1, T0_DIM), np.float32), np.ones((1, 1), np.float32))
    client.abort(job, 0, 1)  # a writer that died: free its id
    with pytest.raises(cpr.Error):
        p.commit()
    writer.close()
    with client.begin(job, 0, 1, tables=SCHEMA[:1]):
        pass
    assert [x.rows for x in client.list(job)] == [0]


def test_abort_by_id_races_the_parts_own_commit(tmp_path, job):
    """client.abort of a part that another thread is committing through its
    Part: one of the two is refused or fails, and nothing crashes (the C
    API forbids the abort while another thread uses the handle)."""
    outcomes = {}
    with cpr.Client("local://%s" % (tmp_path / "store"), no_sync=True) as c:
        values, state = np.ones((500, T0_DIM), np.float32), np.ones((500, 1), np.float32)
        for ckpt in range(1, 101):
            p = c.begin(job, 0, ckpt, tables=SCHEMA[:1])
            p.put_range(T0, 0, values, state)
            go = threading.Barrier(2)
            got = {}

            def commit():
                go.wait()
                try:
                    p.commit()
                    got["commit"] = "ok"
                except cpr.Error as e:
                    got["commit"] = type(e).__name__
            t = threading.Thread(target=commit)
            t.start()
            go.wait()
            try:
                c.abort(job, 0, ckpt)
                got["abort"] = "ok"
            except cpr.Error as e:
                got["abort"] = type(e).__name__
            t.join()
            # Never both: a committed part is not aborted, an aborted one
            # does not commit.
            assert not (got["commit"] == "ok" and got["abort"] == "ok"), got
            if p.state == "open":  # its commit was refused: the abort held it
                assert got["commit"] == "FailedPreconditionError", got
                p.abort()
            assert p.state in ("committed", "aborted (its commit failed)", "aborted"), p.state
            outcomes[ckpt] = got["commit"]
        try:
            committed = {x.checkpoint for x in c.list(job) if x.committed}
        except cpr.NotFoundError:
            committed = set()
    # Exactly the parts whose commit returned are in the store.
    assert committed == {k for k, v in outcomes.items() if v == "ok"}


def test_type_stubs_cover_the_module():
    """cpr/_cpr.pyi declares every public name of the extension, and every
    method of its classes."""
    import ast
    import os
    import cpr._cpr as core
    stub = os.path.join(os.path.dirname(cpr.__file__), "_cpr.pyi")
    tree = ast.parse(open(stub).read())
    declared = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            declared[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        elif isinstance(node, ast.FunctionDef):
            declared[node.name] = set()
    public = {n for n in dir(core) if not n.startswith("_")}
    assert public - set(declared) == set()
    for name in ("Client", "Part", "Tracker", "TrackerSave", "Plan", "Array"):
        cls = getattr(core, name)
        members = {m for m in dir(cls) if not m.startswith("_")}
        assert members - declared[name] == set(), name


def test_sequences_changed_while_they_are_read(client, job):
    """An item whose __iter__ empties the list being read (a segfault when
    the list's own items were read): the arguments are copied first."""
    class Evil:
        def __init__(self, row):
            self.row, self.lst = row, None

        def __iter__(self):
            self.lst.clear()
            return iter(self.row)

    e = Evil((0, 100, 8, 0))
    tables = [e] + [(i, 100, 8, 0) for i in range(1, 64)]
    e.lst = tables
    with client.begin(job, 0, 1, tables=tables) as part:
        part.put_rows(63, np.arange(3, dtype=np.int64), np.ones((3, 8), np.float32))
    e = Evil((0, 10))
    ranges = [e] + [(i, i + 1) for i in range(10, 60)]
    e.lst = ranges
    rows, _ = client.restore(job, ranges=ranges)
    assert list(np.asarray(rows[63].ids)) == [0, 1, 2]  # the ranges as passed: [0, 10) ...
    [part] = client.list(job)
    e = Evil(tuple(part))
    plist = [e]
    e.lst = plist  # emptied while its only item is read
    assert cpr.plan_recovery(plist, 1, [0], "partial").action == "partial"


def test_a_part_kept_by_its_client_is_collected(tmp_path, job):
    """A cycle through a Part (a Client subclass keeping its Part) is
    collected: the client closes and its store is free again."""
    import gc
    import weakref

    class MyClient(cpr.Client):
        pass

    target = "local://%s" % (tmp_path / "store")
    c = MyClient(target)
    c.current = c.begin(job, 0, 1, tables=[(0, 10, 2, 0)])
    alive = weakref.ref(c)
    del c
    gc.collect()
    assert alive() is None
    with cpr.Client(target) as again:  # the store was closed: it opens
        with pytest.raises(cpr.NotFoundError):
            again.list(job)  # the part was aborted, not committed


def test_a_forked_child_cannot_use_the_parents_client(tmp_path, job):
    """A client's threads live in its process: in a fork's child a call
    raises (it waited for ever) and the parent's part is left alone."""
    import os
    c = cpr.Client("local://%s" % (tmp_path / "store"))
    part = c.begin(job, 0, 1, tables=[(0, 10, 2, 0)])
    pid = os.fork()
    if pid == 0:  # leave with os._exit: the libraries' exit handlers need their threads
        code = 1
        try:
            c.list_jobs()
        except cpr.FailedPreconditionError as e:
            code = 0 if "fork" in str(e) else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    part.commit()
    assert [p.committed for p in c.list(job)] == [True]
    c.close()


def run_forking(script, *args):
    """Runs `script` (which forks) in a new interpreter under PYTHONMALLOC=debug
    (freed memory is overwritten); asserts it exits 0. A new interpreter: the
    test's own has used gRPC and local:// stores, which decide what a fork's
    child may open."""
    import subprocess
    import sys
    env = dict(os.environ, PYTHONMALLOC="debug",
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(cpr.__file__))))
    r = subprocess.run([sys.executable, "-c", script] + [str(a) for a in args], env=env,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr.decode(errors="replace")[-2000:])


# The children leave with os._exit (the libraries' exit handlers need their
# threads) and report through their exit code.
FORK_HELPERS = r"""
import gc, os, sys, time
import numpy as np
import cpr

def fork(child):
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = child()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)  # -N: killed by signal N
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            sys.exit("the child hung")
        time.sleep(0.05)

def refused(fn):
    try:
        fn()
    except cpr.FailedPreconditionError as e:
        return "fork" in str(e)
    return False

def put(part, n, value):
    part.put_rows(0, np.arange(n), np.full((n, 2), value, np.float32))
"""

# A Part alive across fork() once stayed on its client's list after the child
# freed it: the child's abort read that freed memory, and a begin and close on
# the reopened client wrote into it.
FORK_WITH_A_LIVE_PART = FORK_HELPERS + r"""
target, child_store, job = sys.argv[1:4]
c = cpr.Client(target, call_timeout_s=10)
part = c.begin(job, 0, 1, tables=[(0, 10, 2, 0)])

def child():
    global part
    ok = refused(lambda: put(part, 2, 1))
    del part
    gc.collect()
    junk = [bytearray(64) for _ in range(2000)]  # takes what was freed
    ok = ok and refused(lambda: c.abort(job, 0, 1))  # walks the client's parts
    c.__init__("local://" + child_store)  # the inherited object, reopened
    mine = c.begin(job, 0, 1, tables=[(0, 10, 2, 0)], num_shards=2)  # linked to the freed one
    other = c.begin(job, 1, 1, tables=[(0, 10, 2, 0)], num_shards=2)
    put(other, 3, 2)
    other.commit()
    c.abort(job, 0, 1)
    c.close()  # ends what is on the list
    c.__init__("local://" + child_store)
    listed = [(p.shard, p.committed) for p in c.list(job)]
    c.close()
    return 0 if ok and listed == [(1, True)] else 1

code = fork(child)
assert code == 0, "the child's checks failed (exit %d)" % code
put(part, 2, 3)
part.commit()
assert [(p.committed, p.rows) for p in c.list(job)] == [(True, 2)]
c.close()
"""


def test_a_part_alive_across_fork_is_forgotten_cleanly_in_the_child(ckptd, tmp_path, job):
    """The child forgets the parent's parts (freeing one leaves no dangling
    list node), may reopen the inherited Client, and the parent's part commits."""
    run_forking(FORK_WITH_A_LIVE_PART, ckptd.target, tmp_path / "child", job)


# libgrpc does not survive fork(): a child's gRPC client waited for ever, and
# its channel wrote on the parent's connection, whose calls then failed.
# RocksDB's threads do not either: a child's local:// store never closed.
FORK_AFTER_GRPC_AND_LOCAL = FORK_HELPERS + r"""
target, stores, job = sys.argv[1:4]
c = cpr.Client(target, call_timeout_s=10)
c.list_jobs()
part = c.begin(job, 0, 1, tables=[(0, 10, 2, 0)])

def child_of_grpc():
    ok = all(refused(lambda: cpr.Client(t, call_timeout_s=2).list_jobs())
             for t in [target, target[len("grpc://"):], "unix:/nonexistent/ckptd.sock"])
    with cpr.Client("local://%s/child1" % stores) as local:  # not gRPC: still works
        with local.begin(job, 0, 1, tables=[(0, 10, 2, 0)]) as p:
            put(p, 3, 1)
        ok = ok and [i.rows for i in local.list(job)] == [3]
    return 0 if ok else 1

code = fork(child_of_grpc)
assert code == 0, "the first child's checks failed (exit %d)" % code
put(part, 4, 7)
part.commit()  # the parent's connection is intact
assert [(p.committed, p.rows) for p in c.list(job)] == [(True, 4)]
with cpr.Client(target, call_timeout_s=10) as again:
    assert job in again.list_jobs()

local = cpr.Client("local://%s/parent" % stores)

def child_of_a_store():
    return 0 if refused(lambda: cpr.Client("local://%s/child2" % stores)) else 1

code = fork(child_of_a_store)
assert code == 0, "the second child's checks failed (exit %d)" % code
with local.begin(job, 0, 1, tables=[(0, 10, 2, 0)]) as p:
    put(p, 1, 1)
local.close()
c.close()
"""


def test_a_fork_is_refused_grpc_and_stores_its_parent_used_and_the_parent_carries_on(
        ckptd, tmp_path, job):
    """In a fork's child, a gRPC client (once the parent used gRPC) and a
    local:// store (once the parent opened one) are refused at once; local://
    works in a child of a gRPC-only parent; the parent's clients carry on."""
    run_forking(FORK_AFTER_GRPC_AND_LOCAL, ckptd.target, tmp_path, job)

def test_numpy_integers_are_ints(client, job):
    with client.begin(job, np.int64(0), np.uint32(1), tables=[(np.int32(0), 10, 2, 0)],
                      kind=np.int8(1), num_shards=np.int16(1)) as p:
        p.put_rows(np.uint8(0), np.arange(3, dtype=np.int64), np.ones((3, 2), np.float32))
    [info] = client.list(job)
    assert (info.shard, info.checkpoint, info.kind, info.rows) == (0, 1, "FULL", 3)
    rows, _ = client.restore(job, shards=[np.int64(0)], tables=[np.uint16(0)])
    assert len(rows[0].ids) == 3


def test_negative_and_oversized_ints_are_refused(client, job):
    with pytest.raises(cpr.InvalidArgumentError, match="-1"):
        client.begin(job, 0, -1, tables=SCHEMA[:1])  # would end the shard's ids for ever
    with pytest.raises(cpr.InvalidArgumentError):
        client.begin(job, 2 ** 32, 1, tables=SCHEMA[:1])
    with pytest.raises(cpr.InvalidArgumentError):
        client.restore(job, as_of=-3)
    with pytest.raises(cpr.InvalidArgumentError):
        cpr.Tracker(-5)
    with pytest.raises(TypeError):
        client.begin(job, "0", 1, tables=SCHEMA[:1])
    with pytest.raises(TypeError):
        client.begin(job, 0.0, 1, tables=SCHEMA[:1])
    with pytest.raises(cpr.InvalidArgumentError):
        client.begin(job, 0, 1, tables=SCHEMA[:1], kind=2 ** 70)  # not OverflowError
    assert cpr.status_name(2 ** 40) == cpr.status_name(-1)  # not a status truncated into one
    with pytest.raises(cpr.NotFoundError):
        client.list(job)  # nothing was begun
    with client.begin(job, 0, 1, tables=[(0, 10, 2, 1)]) as p:
        with pytest.raises(cpr.InvalidArgumentError):
            p.put_gather(0, np.ones((10, 2), np.float32), np.ones((10, 0), np.float32),
                         first=0, n=2)  # a state array with no column


@pytest.mark.parametrize("codec", ["bf16", "f16", "int8", "int4"])
def test_part_codecs(any_client, job, codec):
    rng = np.random.default_rng(4)
    values = rng.standard_normal((500, 32)).astype(np.float32)
    state = rng.random((500, 1)).astype(np.float32)
    with any_client.begin(job, 0, 1, tables=[(0, 500, 32, 1)], codec=codec) as p:
        p.put_range(0, 0, values, state)
    [info] = any_client.list(job)
    row = {"bf16": 64, "f16": 64, "int8": 40, "int4": 24}[codec]
    assert info.bytes == 500 * (8 + row + 4)  # the encoded bytes are what is stored
    assert info.codecs == (codec,)  # List says how the rows are stored
    out, out_s = np.empty_like(values), np.empty_like(state)
    any_client.restore_into(job, 0, out, out_s)
    assert np.array_equal(out_s, state)  # state stays f32
    step = (values.max(1) - values.min(1))[:, None] / (255 if codec == "int8" else 15)
    bound = {"bf16": np.abs(values) / 256, "f16": np.abs(values) / 2048 + 1e-7,
             "int8": 0.5 * step * 1.0001 + 1e-6, "int4": 0.5 * step * 1.0001 + 1e-6}[codec]
    assert (np.abs(out - values) <= bound).all()
    with pytest.raises(cpr.InvalidArgumentError, match="codec"):
        any_client.begin(job, 0, 2, tables=[(0, 500, 32, 1)], codec="int3")


def assert_same_restores(plain, direct, job):
    """Restores of three shapes through ckptd and by direct reads: the same
    state, ids and bits."""
    for query in ({}, {"as_of": 1}, {"ranges": [(5, 400)], "modulo": 3, "remainder": 1}):
        a, ra = plain.restore(job, **query)
        b, rb = direct.restore(job, **query)
        assert ra.as_of == rb.as_of and ra.rows == rb.rows > 0
        for t in a:
            assert np.array_equal(np.asarray(a[t].ids), np.asarray(b[t].ids))
            assert same_bits(a[t].values, b[t].values)


def test_direct_reads_from_the_daemons_directory(tmp_path, job):
    """A client on ckptd's host given its --data-dir (local_dir) restores by
    reading the segment files itself (ckptd sends the plan; docs/client.md,
    "Direct reads"): the same rows and bits as through ckptd, with O_DIRECT
    and with buffered reads; a directory without a store is refused."""
    from conftest import Daemon
    binary = os.environ.get("CPR_CKPTD")
    if not binary:
        pytest.skip("CPR_CKPTD (the ckptd binary) is not set; run through ctest")
    store = tmp_path / "store"
    d = Daemon(binary, store, tmp_path / "ckptd.log", ["--metrics-listen", "127.0.0.1:0"])
    plans = "cpr_ckptd_restore_plans_total"
    try:
        with cpr.Client(d.target) as plain:
            (v1, s1, w1), (v2, s2), mine = write_job(plain, job)
            assert d.metric(plans) == 0
            for buffered in (False, True):
                with cpr.Client(d.target, local_dir=str(store),
                                buffered_reads=buffered) as direct:
                    before = d.metric(plans)
                    assert_same_restores(plain, direct, job)
                    got, _ = direct.restore(job)
                    check_rows(got[T0], np.arange(T0_ROWS), v2, s2)
                    assert d.metric(plans) == before + 4  # every restore was planned
        assert (store / "store-id").read_text().startswith("local:")
        with pytest.raises(cpr.NotFoundError, match="store-id"):
            cpr.Client(d.target, local_dir=str(tmp_path))
    finally:
        assert d.stop() == 0


def test_direct_reads_from_the_pool(tmp_path, job):
    """A client given ckptd's Ceph pool restores by reading the pool itself
    (ckptd sends the plan): the same rows and bits as through ckptd; with
    direct_writes, it writes its parts into the pool itself, same rows."""
    from conftest import Daemon
    conf, binary = os.environ.get("CPR_TEST_RADOS_CONF"), os.environ.get("CPR_CKPTD")
    if not conf or not os.access(conf, os.R_OK) or not binary:
        pytest.skip("no test Ceph cluster (CPR_TEST_RADOS_CONF) or ckptd")
    ns = "py-direct-%d-%d" % (os.getpid(), int(time.time()))
    d = Daemon(binary, tmp_path / "store", tmp_path / "ckptd.log",
               ["--backend", "rados", "--rados-pool", "cpr", "--rados-conf", conf,
                "--rados-namespace", ns])
    try:
        with cpr.Client(d.target) as plain, \
                cpr.Client(d.target, rados_pool="cpr", rados_conf=conf,
                           rados_namespace=ns) as direct:
            (v1, s1, w1), (v2, s2), mine = write_job(plain, job)
            assert_same_restores(plain, direct, job)
            got, _ = direct.restore(job)
            check_rows(got[T0], np.arange(T0_ROWS), v2, s2)
        # Direct writes: the same job written into the pool by the client itself
        # restores to the same rows and bits through a plain client.
        with cpr.Client(d.target) as plain, \
                cpr.Client(d.target, rados_pool="cpr", rados_conf=conf, rados_namespace=ns,
                           direct_writes=True) as writer:
            (v1, s1, w1), (v2, s2), mine = write_job(writer, job + "-dw")
            a, ra = plain.restore(job)
            b, rb = plain.restore(job + "-dw")
            assert ra.rows == rb.rows > 0
            for t in a:
                assert np.array_equal(np.asarray(a[t].ids), np.asarray(b[t].ids))
                assert same_bits(a[t].values, b[t].values)
            check_rows(b[T0], np.arange(T0_ROWS), v2, s2)
        with pytest.raises(cpr.InvalidArgumentError):
            cpr.Client(d.target, direct_writes=True)
        with pytest.raises(cpr.NotFoundError):
            cpr.Client(d.target, rados_pool="no-such-pool", rados_conf=conf)
    finally:
        assert d.stop() == 0
