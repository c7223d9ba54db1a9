# SPDX-License-Identifier: Apache-2.0
"""cpr.Tracker: CPR's trackers over a table the library does not own."""
import numpy as np
import pytest

import cpr


def top_k(counts, rows_of_shard, k):
    """Reference MFU selection: largest non-zero counts, ties toward lower ids,
    returned ascending."""
    cand = [r for r in rows_of_shard if counts[r] > 0]
    cand.sort(key=lambda r: (-counts[r], r))
    return sorted(cand[:k])


@pytest.mark.parametrize("scheme", ["range", "modulo"])
def test_mfu_counts_match_a_reference(scheme):
    rows, shards = 2000, 4
    t = cpr.Tracker(rows, num_shards=shards, scheme=scheme, track=("mfu", "delta"))
    rng = np.random.default_rng(5)
    counts = np.zeros(rows, np.int64)
    for _ in range(50):
        idx = rng.zipf(1.3, size=300) % rows
        t.observe(idx)
        np.add.at(counts, idx, 1)
    for shard in range(shards):
        mine = [r for r in range(rows) if t.shard_of(r) == shard]
        assert len(mine) == t.shard_rows(shard)
        for k in (1, 10, 100, 10_000):
            got = list(np.asarray(t.select(shard, cpr.Policy.MFU, rows=k)))
            assert got == top_k(counts, mine, k)
        dirty = list(np.asarray(t.select(shard, "delta")))
        assert dirty == [r for r in mine if counts[r] > 0]
        st = t.stats(shard)
        assert st.update_events == counts[mine].sum() == st.unsaved_events
        assert st.touched_rows == st.dirty_rows == np.count_nonzero(counts[mine])


def test_save_commit_abort_and_recovery_bookkeeping():
    t = cpr.Tracker(100, track="all", ssu_rate=1.0)
    t.observe(np.array([3, 3, 3, 4, 4, 9], dtype=np.int64), np.full(6, 0.5, np.float32))
    assert list(np.asarray(t.select(0, "topk-norm", rows=1))) == [3]
    save = t.begin(0, "mfu", t.select(0, "mfu", rows=2))
    assert list(np.asarray(save.ids)) == [3, 4] and save.state == "open"
    t.observe(np.array([9]))  # training goes on while the save is open
    save.abort()  # the rows keep their counts
    assert list(np.asarray(t.select(0, "mfu", rows=1))) == [3]
    save = t.begin(0, "mfu", np.array([3, 4], dtype=np.uint64))
    save.commit()
    assert save.state == "committed"
    with pytest.raises(cpr.FailedPreconditionError):
        save.commit()
    assert list(np.asarray(t.select(0, "mfu", rows=5))) == [9]
    assert t.events(0) == (7, 2)  # rows 3 and 4 are saved; 9's two events are not
    t.restored(np.array([9]))
    assert t.events(0)[1] == 0
    t.observe(np.array([1, 2]))
    assert t.wipe_shard(0) == 2  # a lost shard's unsaved events: PLS
    assert t.stats(0).touched_rows == 0


def test_tracker_bad_input():
    with pytest.raises(cpr.InvalidArgumentError, match="track"):
        cpr.Tracker(10, track="sometimes")
    with pytest.raises(cpr.InvalidArgumentError):
        cpr.Tracker(10, num_shards=20)
    t = cpr.Tracker(10)
    with pytest.raises(cpr.InvalidArgumentError, match="outside"):
        t.observe(np.array([1, 10]))
    with pytest.raises(cpr.InvalidArgumentError, match=">= 0"):
        t.observe(np.array([1, 2]), np.array([1.0, -1.0], np.float32))
    with pytest.raises(cpr.InvalidArgumentError, match="one value per index"):
        t.observe(np.array([1, 2]), np.array([1.0], np.float32))
    with pytest.raises(cpr.InvalidArgumentError, match="dtype"):
        t.observe(np.array([1.0, 2.0]))
    with pytest.raises(cpr.InvalidArgumentError, match="policy"):
        t.select(0, "most-loved", rows=1)
    assert t.stats(0).update_events == 0  # nothing changed


def test_torch_indices():
    torch = pytest.importorskip("torch")
    t = cpr.Tracker(50, track="mfu")
    idx = torch.tensor([[1, 2], [2, 2]])
    t.observe(idx.reshape(-1))
    assert list(np.asarray(t.select(0, "mfu", rows=1))) == [2]


def test_read_criteo_refuses_a_file_with_no_row(tmp_path):
    """Skipping malformed lines does not turn a file that is not Criteo rows
    into an empty data set; a broken first line does not decide the format."""
    prose = tmp_path / "prose.txt"
    prose.write_text("not\na criteo file\n")
    with pytest.raises(cpr.InvalidArgumentError, match="none of its lines is a Criteo row"):
        cpr.read_criteo(str(prose))
    with pytest.raises(cpr.InvalidArgumentError, match="2\\^63"):
        cpr.read_criteo(str(prose), 2**64 - 1)
    row = "\t".join(["1"] + [str(i) for i in range(13)] + ["0000000b"] * 26)
    tsv = tmp_path / "comment.tsv"
    tsv.write_text("# day_0, first rows\n" + row + "\n" + row + "\n")
    labels, dense, sparse = (np.asarray(x) for x in cpr.read_criteo(str(tsv), 1000))
    assert labels.tolist() == [1.0, 1.0]
    assert sparse.shape == (2, 26) and (sparse >= 0).all() and (sparse < 1000).all()


# ---- the estimator's decisions over time (recovery/estimator.c) ----------------------

H = 3600.0


def _estimator(save_s, **kw):
    return cpr.Estimator(8, 50 * H, 0.002, 8 * H, save_s, 120, 60, policy="mfu",
                         fraction=0.125, full_bytes=1000, **kw)


def _boundary():
    """The prior save time at which full and partial recovery cost the same."""
    lo, hi = 1.0, 500.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _estimator(mid).decide().mode == "partial" else (lo, mid)
    return lo


def test_the_mode_of_the_saves_changes_only_for_a_clear_gain():
    """Hysteresis: near the boundary, +-3% noise in the measured stalls keeps
    the mode the saves follow (it flipped 10 times in 40 saves without)."""
    s0 = _boundary()
    e = _estimator(s0)
    rng = np.random.default_rng(1)
    modes, t = [], 0.0
    for _ in range(40):
        t += 0.01
        pol = "full" if e.decide().mode == "full" else "mfu"
        stall = s0 * (1 + rng.uniform(-0.03, 0.03)) * (1.0 if pol == "full" else 0.125)
        e.saved(t, pol, stall, 1000 if pol == "full" else 125)
        modes.append(e.decide().mode)
    assert sum(a != b for a, b in zip(modes, modes[1:])) <= 1
    # Far from the boundary the mode does move: stalls 3x the boundary's make
    # full recovery clearly cheaper (its saves are rarer).
    e = _estimator(s0)
    e.saved(1.0, "mfu", s0 * 0.125, 125)
    assert e.decide().mode == "partial"
    for k in range(6):
        e.saved(2.0 + k, "mfu", 3 * s0 * 0.125, 125)
    d = e.decide()
    assert d.mode == "full" and d.full_overhead < 0.95 * d.partial_overhead


def test_a_failure_is_recovered_the_way_the_saves_were_made():
    """After prioritized saves the newest cut is the job's first FULL: a full
    recovery would rewind past every save since. A failure that moves the
    decision to full moves the saves to come, not its own recovery."""
    e = _estimator(50)
    e.saved(10.0, "full", 50, 1000)  # the job's first save is FULL
    assert e.recovery_mode() == e.decide().mode
    e.saved(400.0, "mfu", 50 * 0.125, 125)
    assert e.decide().mode == "partial"
    before = e.recovery_mode()
    e.failed(1800.0)
    e.failed(1900.0)
    e.failed(2000.0)
    assert e.decide().mode == "full"  # the next save: FULL, a cut
    assert before == "partial" and e.recovery_mode() == "partial"
    e.saved(2100.0, "full", 50, 1000)  # with a cut as new as the rows: either way
    assert e.recovery_mode() == e.decide().mode == "full"
