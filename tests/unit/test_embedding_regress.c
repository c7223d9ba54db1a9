/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Regression tests for bugs a review found in the embedding and data
 * modules; each test is the reviewer's scenario, which failed before its fix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpr/data.h"
#include "cpr/embedding.h"
#include "testutil.h"

static cpr_emb_stats stats(cpr_emb *t, uint32_t shard)
{
    cpr_emb_stats s;
    assert_int_equal(cpr_emb_stats_get(t, shard, &s), CPR_OK);
    return s;
}

static void backward(cpr_emb *t, const int64_t *idx, size_t n)
{
    int64_t off[1] = {0};
    float grad[64] = {0.5f, -0.25f, 1.0f, 2.0f};
    assert_int_equal(cpr_emb_backward(t, idx, n, off, 1, CPR_POOL_SUM, grad), CPR_OK);
}

/* rows x dim wrapping around 2^64 used to allocate a tiny table. */
static void test_size_overflow_refused(void **unused)
{
    (void)unused;
    cpr_emb *t = NULL;
    cpr_emb_config c = {.rows = (1ull << 52) + 1, .dim = 4096};
    assert_int_equal(cpr_emb_create(&c, &t), CPR_INVALID_ARGUMENT);
    assert_null(t);
}

/* Range shards that leave the last one empty are refused up front. */
static void test_empty_range_shard_refused(void **unused)
{
    (void)unused;
    cpr_emb *t = NULL;
    cpr_emb_config c = {.rows = 9, .dim = 2, .num_shards = 4};
    assert_int_equal(cpr_emb_create(&c, &t), CPR_INVALID_ARGUMENT);
    c.scheme = CPR_SHARD_MODULO; /* 3, 2, 2, 2 rows: fine */
    assert_int_equal(cpr_emb_create(&c, &t), CPR_OK);
    cpr_emb_destroy(t);
}

/* Save A holds row 5; apply(5) drops it from the sample; it is sampled again
 * and held by save B; A's commit must not release B's hold. */
static void test_ssu_hold_survives_other_save(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 16, .dim = 4, .track = CPR_TRACK_ALL, .ssu_rate = 1.0,
                        .ssu_capacity = 16};
    cpr_emb *t;
    cpr_emb_save *a, *b;
    uint64_t five = 5;
    float vals[4] = {0}, st[1] = {0};
    const int64_t idx[1] = {5};
    assert_int_equal(cpr_emb_create(&c, &t), CPR_OK);
    backward(t, idx, 1);
    assert_int_equal(cpr_emb_save_begin(t, 0, CPR_POLICY_SSU, &five, 1, &a), CPR_OK);
    assert_int_equal(cpr_emb_apply(t, &five, 1, vals, st), CPR_OK);
    backward(t, idx, 1); /* sampled again */
    assert_int_equal(cpr_emb_save_begin(t, 0, CPR_POLICY_SSU, &five, 1, &b), CPR_OK);
    assert_int_equal(cpr_emb_save_commit(t, a), CPR_OK);
    cpr_emb_save_abort(t, b); /* B's row returns to the sample */
    assert_int_equal(stats(t, 0).sampled_rows, 1);
    uint64_t ids[16];
    size_t n = 0;
    assert_int_equal(cpr_emb_select(t, 0, CPR_POLICY_SSU, (cpr_budget){.rows = 4}, ids, 16, &n),
                     CPR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 5);
    cpr_emb_destroy(t);
}

/* An empty DELTA commit on a table that tracks counts saved nothing: the
 * shard's unsaved events must not change. */
static void test_empty_delta_commit_keeps_unsaved(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 16, .dim = 4, .track = CPR_TRACK_ALL};
    cpr_emb *t;
    cpr_emb_save *s;
    const int64_t idx[2] = {1, 2};
    assert_int_equal(cpr_emb_create(&c, &t), CPR_OK);
    backward(t, idx, 2);
    uint64_t dirty[16];
    size_t n;
    assert_int_equal(cpr_emb_select(t, 0, CPR_POLICY_DELTA, (cpr_budget){0}, dirty, 16, &n), CPR_OK);
    assert_int_equal(cpr_emb_save_begin(t, 0, CPR_POLICY_DELTA, dirty, n, &s), CPR_OK);
    assert_int_equal(cpr_emb_save_commit(t, s), CPR_OK);
    assert_int_equal(stats(t, 0).unsaved_events, 0);
    backward(t, idx, 2);
    assert_int_equal(stats(t, 0).unsaved_events, 2);
    assert_int_equal(cpr_emb_save_begin(t, 0, CPR_POLICY_DELTA, NULL, 0, &s), CPR_OK);
    assert_int_equal(cpr_emb_save_commit(t, s), CPR_OK);
    assert_int_equal(stats(t, 0).unsaved_events, 2); /* nothing was saved */
    cpr_emb_destroy(t);
}

/* Without trackers the shard still counts unsaved events (PLS of a
 * FULL-only baseline). */
static void test_unsaved_without_trackers(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 16, .dim = 4};
    cpr_emb *t;
    const int64_t idx[3] = {1, 2, 2};
    uint64_t lost = 0;
    assert_int_equal(cpr_emb_create(&c, &t), CPR_OK);
    backward(t, idx, 3);
    assert_int_equal(stats(t, 0).update_events, 3);
    assert_int_equal(stats(t, 0).unsaved_events, 3);
    assert_int_equal(cpr_emb_wipe_shard(t, 0, &lost), CPR_OK);
    assert_int_equal(lost, 3);
    cpr_emb_destroy(t);
}

/* tell at the end of a file without a final newline must be seekable. */
static void test_criteo_seek_to_end(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-regress");
    char path[4200];
    snprintf(path, sizeof path, "%s/x.tsv", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("1", f);
    for (int i = 0; i < 39; i++)
        fputs("\t", f); /* one sample, all fields empty, no final newline */
    fclose(f);
    cpr_criteo_reader *r;
    cpr_criteo_sample s;
    cpr_criteo_pos pos;
    assert_int_equal(cpr_criteo_open(path, NULL, &r), CPR_OK);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_NOT_FOUND);
    cpr_criteo_tell(r, &pos);
    assert_int_equal(cpr_criteo_seek(r, &pos), CPR_OK);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_NOT_FOUND);
    cpr_criteo_close(r);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_overflow_refused),
        cmocka_unit_test(test_empty_range_shard_refused),
        cmocka_unit_test(test_ssu_hold_survives_other_save),
        cmocka_unit_test(test_empty_delta_commit_keeps_unsaved),
        cmocka_unit_test(test_unsaved_without_trackers),
        cmocka_unit_test(test_criteo_seek_to_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
