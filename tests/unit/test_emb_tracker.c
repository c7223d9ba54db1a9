/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Trackers over tables the library does not own (cpr_emb_create_tracker):
 *  - a tracker that observes the indices a CPU table's backward updates
 *    tracks and selects exactly as that table does (MFU, DELTA, SSU; counts,
 *    dirty rows, the sample, unsaved events), through saves that commit and
 *    abort, wiped shards and restored rows, for range and modulo sharding;
 *  - TOPK_NORM ranks rows by the squared changes the caller reports, summed
 *    per row;
 *  - what needs rows is refused, bad input changes nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpr/embedding.h"
#include "cpr/rng.h"
#include "testutil.h"

#define ROWS 3000
#define SHARDS 3
#define DIM 4

static cpr_emb_config config(cpr_shard_scheme scheme)
{
    cpr_emb_config c = {.rows = ROWS, .dim = DIM, .num_shards = SHARDS, .scheme = scheme,
                        .track = CPR_TRACK_ALL, .ssu_rate = 0.3, .seed = 7};
    return c;
}

/* A skewed batch: most indices among the first rows, the rest anywhere. */
static size_t batch(uint64_t *rng, int64_t *idx, size_t max)
{
    size_t n = 1 + cpr_splitmix64(rng) % max;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = cpr_splitmix64(rng);
        idx[i] = (int64_t)(r % 4 ? (r >> 8) % 200 : (r >> 8) % ROWS);
    }
    return n;
}

static void same_selection(cpr_emb *table, cpr_emb *tracker, uint32_t shard, cpr_policy p,
                           cpr_budget b)
{
    static uint64_t a[ROWS], t[ROWS];
    size_t na = 0, nt = 0;
    assert_status(CPR_OK, cpr_emb_select(table, shard, p, b, a, ROWS, &na));
    assert_status(CPR_OK, cpr_emb_select(tracker, shard, p, b, t, ROWS, &nt));
    assert_int_equal(na, nt);
    assert_memory_equal(a, t, na * sizeof *a);
}

static void same_stats(cpr_emb *table, cpr_emb *tracker)
{
    for (uint32_t s = 0; s < SHARDS; s++) {
        cpr_emb_stats x, y;
        assert_status(CPR_OK, cpr_emb_stats_get(table, s, &x));
        assert_status(CPR_OK, cpr_emb_stats_get(tracker, s, &y));
        assert_int_equal(x.update_events, y.update_events);
        assert_int_equal(x.unsaved_events, y.unsaved_events);
        assert_int_equal(x.dirty_rows, y.dirty_rows);
        assert_int_equal(x.sampled_rows, y.sampled_rows);
        assert_int_equal(x.touched_rows, y.touched_rows);
        assert_int_equal(x.open_saves, y.open_saves);
    }
}

static void tracks_like_a_table(cpr_shard_scheme scheme)
{
    cpr_emb_config c = config(scheme);
    cpr_emb *table, *tracker;
    assert_status(CPR_OK, cpr_emb_create(&c, &table));
    assert_status(CPR_OK, cpr_emb_create_tracker(&c, &tracker));
    assert_int_equal(cpr_emb_dim(tracker), 0);
    assert_int_equal(cpr_emb_shard_rows(tracker, 2), cpr_emb_shard_rows(table, 2));
    static int64_t idx[512], off[512];
    static float grad[512 * DIM], values[64 * DIM];
    static uint64_t ids[ROWS];
    uint64_t rng = 42;
    cpr_emb_save *open_a = NULL, *open_t = NULL;
    for (int round = 1; round <= 60; round++) {
        size_t n = batch(&rng, idx, 512);
        for (size_t i = 0; i < n; i++) {
            off[i] = (int64_t)i;
            for (int j = 0; j < DIM; j++)
                grad[i * DIM + j] = (float)((cpr_splitmix64(&rng) % 200) - 100) * 1e-3f;
        }
        assert_status(CPR_OK, cpr_emb_backward(table, idx, n, off, n, CPR_POOL_SUM, grad));
        assert_status(CPR_OK, cpr_emb_observe(tracker, idx, n, NULL));
        same_stats(table, tracker);
        uint32_t shard = (uint32_t)(round % SHARDS);
        if (round % 4 == 0) {
            same_selection(table, tracker, shard, CPR_POLICY_MFU, (cpr_budget){.rows = 25});
            same_selection(table, tracker, shard, CPR_POLICY_DELTA, (cpr_budget){0});
            same_selection(table, tracker, shard, CPR_POLICY_SSU, (cpr_budget){.rows = 30});
            same_selection(table, tracker, shard, CPR_POLICY_FULL, (cpr_budget){0});
        }
        if (round % 5 == 0 && !open_a) { /* a save stays open across updates */
            cpr_policy p = round % 10 ? CPR_POLICY_MFU : CPR_POLICY_DELTA;
            size_t k = 0;
            assert_status(CPR_OK, cpr_emb_select(tracker, shard, p, (cpr_budget){.fraction = 0.05}, ids,
                                    ROWS, &k));
            assert_status(CPR_OK, cpr_emb_save_begin(table, shard, p, ids, k, &open_a));
            assert_status(CPR_OK, cpr_emb_save_begin(tracker, shard, p, ids, k, &open_t));
        } else if (round % 5 == 2 && open_a) { /* every other save aborts */
            if (round % 10 == 2) {
                assert_status(CPR_OK, cpr_emb_save_commit(table, open_a));
                assert_status(CPR_OK, cpr_emb_save_commit(tracker, open_t));
            } else {
                cpr_emb_save_abort(table, open_a);
                cpr_emb_save_abort(tracker, open_t);
            }
            open_a = open_t = NULL;
        }
        if (round % 13 == 0) {
            uint64_t la = 0, lt = 0;
            assert_status(CPR_OK, cpr_emb_wipe_shard(table, 1, &la));
            assert_status(CPR_OK, cpr_emb_wipe_shard(tracker, 1, &lt));
            assert_int_equal(la, lt);
        }
        if (round % 11 == 0) { /* rows written from a checkpoint */
            uint64_t restored[64];
            for (size_t i = 0; i < 64; i++)
                restored[i] = (cpr_splitmix64(&rng) >> 4) % 250;
            assert_status(CPR_OK, cpr_emb_apply(table, restored, 64, values, NULL));
            assert_status(CPR_OK, cpr_emb_restored(tracker, restored, 64));
        }
        same_stats(table, tracker);
    }
    if (open_a) {
        cpr_emb_save_abort(table, open_a);
        cpr_emb_save_abort(tracker, open_t);
    }
    for (uint32_t s = 0; s < SHARDS; s++) {
        same_selection(table, tracker, s, CPR_POLICY_MFU, (cpr_budget){.fraction = 1.0});
        same_selection(table, tracker, s, CPR_POLICY_SSU, (cpr_budget){.fraction = 1.0});
        same_selection(table, tracker, s, CPR_POLICY_DELTA, (cpr_budget){0});
    }
    cpr_emb_destroy(table);
    cpr_emb_destroy(tracker);
}

static void test_like_a_table_range(void **state)
{
    (void)state;
    tracks_like_a_table(CPR_SHARD_RANGE);
}

static void test_like_a_table_modulo(void **state)
{
    (void)state;
    tracks_like_a_table(CPR_SHARD_MODULO);
}

/* TOPK_NORM: rows ranked by the squared changes reported, summed per row. */
static void test_topk_norm_from_reported_changes(void **state)
{
    (void)state;
    cpr_emb_config c = config(CPR_SHARD_RANGE);
    c.num_shards = 1;
    c.track = CPR_TRACK_NORM;
    cpr_emb *tr;
    assert_status(CPR_OK, cpr_emb_create_tracker(&c, &tr));
    static double norm[ROWS];
    static int64_t idx[256];
    static float sq[256];
    uint64_t rng = 9;
    for (int call = 0; call < 30; call++) {
        size_t n = batch(&rng, idx, 256);
        double per_call[ROWS] = {0};
        for (size_t i = 0; i < n; i++) {
            sq[i] = (float)(cpr_splitmix64(&rng) % 100000) * 1e-5f;
            per_call[idx[i]] += sq[i];
        }
        for (int r = 0; r < ROWS; r++) /* the backend adds each call's sum as a float */
            norm[r] = (double)((float)norm[r] + (float)per_call[r]);
        assert_status(CPR_OK, cpr_emb_observe(tr, idx, n, sq));
    }
    uint64_t got[40];
    size_t n = 0;
    assert_status(CPR_OK, cpr_emb_select(tr, 0, CPR_POLICY_TOPK_NORM, (cpr_budget){.rows = 40}, got, 40, &n));
    assert_int_equal(n, 40);
    /* Every selected row's norm is at least every unselected row's. */
    double least = 1e300;
    uint8_t chosen[ROWS] = {0};
    for (size_t i = 0; i < n; i++) {
        chosen[got[i]] = 1;
        least = norm[got[i]] < least ? norm[got[i]] : least;
        assert_true(i == 0 || got[i] > got[i - 1]);
    }
    for (int r = 0; r < ROWS; r++)
        if (!chosen[r])
            assert_true(norm[r] <= least);
    cpr_emb_destroy(tr);
}

static void test_refusals_and_bad_input(void **state)
{
    (void)state;
    cpr_emb_config c = config(CPR_SHARD_RANGE);
    cpr_emb *tr, *table;
    c.device = CPR_DEVICE_CUDA;
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_create_tracker(&c, &tr));
    c.device = CPR_DEVICE_CPU;
    c.track = 0;
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_create_tracker(&c, &tr));
    c.track = CPR_TRACK_ALL;
    assert_status(CPR_OK, cpr_emb_create_tracker(&c, &tr));
    assert_status(CPR_OK, cpr_emb_create(&c, &table));
    int64_t idx[3] = {1, 2, 3}, off[1] = {0};
    float out[DIM], grad[DIM] = {0};
    uint64_t ids[3] = {1, 2, 3};
    cpr_emb_host_view view;
    assert_status(CPR_FAILED_PRECONDITION, cpr_emb_forward(tr, idx, 3, off, 1, CPR_POOL_SUM, out));
    assert_status(CPR_FAILED_PRECONDITION,
                  cpr_emb_backward(tr, idx, 3, off, 1, CPR_POOL_SUM, grad));
    assert_status(CPR_FAILED_PRECONDITION, cpr_emb_view(tr, &view));
    assert_status(CPR_FAILED_PRECONDITION, cpr_emb_apply(tr, ids, 3, out, NULL));
    assert_status(CPR_FAILED_PRECONDITION, cpr_emb_observe(table, idx, 3, NULL));
    assert_status(CPR_FAILED_PRECONDITION, cpr_emb_restored(table, ids, 3));
    /* Bad input is refused before anything changes. */
    int64_t bad[3] = {1, ROWS, 2};
    float sq[3] = {1, -1, 1};
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_observe(tr, bad, 3, NULL));
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_observe(tr, idx, 3, sq));
    uint64_t bad_ids[1] = {ROWS};
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_restored(tr, bad_ids, 1));
    cpr_emb_stats s;
    assert_status(CPR_OK, cpr_emb_stats_get(tr, 0, &s));
    assert_int_equal(s.update_events, 0);
    /* A save of a tracker: its rows come from the caller, not the library. */
    assert_status(CPR_OK, cpr_emb_observe(tr, idx, 3, NULL));
    cpr_emb_save *save;
    assert_status(CPR_OK, cpr_emb_save_begin(tr, 0, CPR_POLICY_DELTA, ids, 3, &save));
    assert_status(CPR_FAILED_PRECONDITION, cpr_emb_gather(tr, save, out, NULL));
    assert_status(CPR_FAILED_PRECONDITION, cpr_emb_save_copy(tr, save, 0, 1, out, NULL));
    assert_status(CPR_OK, cpr_emb_save_commit(tr, save));
    assert_status(CPR_OK, cpr_emb_stats_get(tr, 0, &s));
    assert_int_equal(s.unsaved_events, 0);
    assert_int_equal(s.dirty_rows, 0);
    cpr_emb_destroy(tr);
    cpr_emb_destroy(table);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_like_a_table_range),
        cmocka_unit_test(test_like_a_table_modulo),
        cmocka_unit_test(test_topk_norm_from_reported_changes),
        cmocka_unit_test(test_refusals_and_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
