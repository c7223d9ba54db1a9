/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The touched-row lists (embedding/emb_touched.c) select exactly what the
 * radix selection over every row selects (cpri_emb_topk: the largest
 * non-zero keys, ties toward lower ids), for MFU counts and TOPK_NORM norms,
 * with stale entries in the lists (rows whose trackers went back to zero),
 * strided shards, budgets from 1 to beyond the candidates; and a lost list
 * is reported as such and rebuilt from the rows.
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
#include "emb_select.h"
#include "emb_touched.h"
#include "testutil.h"

#define ROWS 5000
#define SHARDS 3

typedef struct fixture {
    cpr_emb *t;
    uint32_t counts[ROWS];
    float norm[ROWS];
    cpri_emb_touched touched;
} fixture;

/* Trackers as training leaves them: most rows untouched, counts that tie
 * a lot, a few large ones; every touched row listed, some listed twice
 * over (append after the bit is set is a no-op) and some gone stale. */
static void fill(fixture *f, uint64_t seed)
{
    memset(f->counts, 0, sizeof f->counts);
    memset(f->norm, 0, sizeof f->norm);
    for (int i = 0; i < 2500; i++) {
        uint64_t row = cpr_splitmix64(&seed) % ROWS, r = cpr_splitmix64(&seed);
        uint32_t shard = cpr_emb_shard_of(f->t, row);
        f->counts[row] += r % 16 == 0 ? (uint32_t)(r >> 40) % 5000 : 1;
        f->norm[row] += (float)(r % 1000) * 1e-3f;
        cpri_emb_touched_add(&f->touched, shard, row);
    }
    for (int i = 0; i < 300; i++) { /* saved since: stale entries (T2) */
        uint64_t row = cpr_splitmix64(&seed) % ROWS;
        f->counts[row] = 0;
        f->norm[row] = 0;
        cpri_emb_touched_unlist(&f->touched, row);
        if (i % 3 == 0) { /* touched again: a second entry for the row */
            f->counts[row] = 1 + (uint32_t)(row % 7);
            f->norm[row] = 0.5f;
            cpri_emb_touched_add(&f->touched, cpr_emb_shard_of(f->t, row), row);
        }
    }
}

/* Every non-zero row listed, every list entry once (T1, T2). */
static void check_lists(fixture *f)
{
    for (uint32_t s = 0; s < SHARDS; s++) {
        const cpri_emb_touched_list *l = &f->touched.lists[s];
        unsigned char seen[ROWS] = {0};
        for (size_t i = 0; i < l->len; i++) {
            assert_false(seen[l->ids[i]]);
            seen[l->ids[i]] = 1;
        }
        for (uint64_t r = 0; r < ROWS; r++)
            if (cpr_emb_shard_of(f->t, r) == s && (f->counts[r] || f->norm[r] != 0))
                assert_true(seen[r]);
    }
}

static void same_selection(fixture *f, uint32_t shard, const void *keys, uint64_t k)
{
    uint64_t want[ROWS], got[ROWS];
    size_t n_want = 0, n_got = 0;
    int from_list = 0;
    cpri_emb_touched_keys live = {f->counts, f->norm, 4};
    assert_status(CPR_OK, cpri_emb_topk(f->t, shard, keys, 4, k, want, &n_want));
    assert_status(CPR_OK, cpri_emb_touched_topk(&f->touched, shard, ROWS, &live, keys, k, got,
                                                &n_got, &from_list));
    assert_true(from_list);
    assert_int_equal(n_got, n_want);
    assert_memory_equal(got, want, n_want * sizeof *got);
}

static void test_same_as_every_row(void **unused)
{
    (void)unused;
    static fixture f;
    cpr_emb_config cfg = {.rows = ROWS, .dim = 4, .num_shards = SHARDS,
                          .scheme = CPR_SHARD_MODULO};
    assert_status(CPR_OK, cpr_emb_create(&cfg, &f.t));
    assert_status(CPR_OK, cpri_emb_touched_init(&f.touched, 1, ROWS, SHARDS));
    const uint64_t budgets[] = {1, 2, 7, 100, 333, 700, 900, 1700, 5000};
    for (uint64_t seed = 1; seed <= 4; seed++) {
        fill(&f, seed);
        for (uint32_t s = 0; s < SHARDS; s++)
            for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
                same_selection(&f, s, f.counts, budgets[b]);
                same_selection(&f, s, f.norm, budgets[b]);
            }
        check_lists(&f); /* compacted by the selections */
    }
    cpri_emb_touched_release(&f.touched);
    cpr_emb_destroy(f.t);
}

static void test_lost_list_rebuilds(void **unused)
{
    (void)unused;
    static fixture f;
    cpr_emb_config cfg = {.rows = ROWS, .dim = 4, .num_shards = SHARDS};
    assert_status(CPR_OK, cpr_emb_create(&cfg, &f.t));
    assert_status(CPR_OK, cpri_emb_touched_init(&f.touched, 1, ROWS, SHARDS));
    fill(&f, 9);
    f.touched.lists[1].lost = 1; /* what a failed append leaves (T1) */
    uint64_t ids[ROWS];
    size_t n = 0;
    int from_list = 1;
    cpri_emb_touched_keys live = {f.counts, f.norm, 4};
    assert_status(CPR_OK, cpri_emb_touched_topk(&f.touched, 1, ROWS, &live, f.counts, 50, ids,
                                                &n, &from_list));
    assert_false(from_list);
    cpri_emb_touched_rebuild(&f.touched, f.t, 1, &live);
    assert_false(f.touched.lists[1].lost);
    same_selection(&f, 1, f.counts, 50);
    same_selection(&f, 1, f.norm, 3000);
    cpri_emb_touched_clear_shard(&f.touched, 1); /* a wipe: nothing listed */
    assert_int_equal(f.touched.lists[1].len, 0);
    cpri_emb_touched_release(&f.touched);
    cpr_emb_destroy(f.t);
}

/* Saves that never select (DELTA, SSU) unlist rows and training lists
 * them again: appends compact a full list, so it stays about the size of
 * what is listed (T2). */
static void test_list_stays_bounded(void **unused)
{
    (void)unused;
    static fixture f;
    cpr_emb_config cfg = {.rows = ROWS, .dim = 4, .num_shards = 1};
    assert_status(CPR_OK, cpr_emb_create(&cfg, &f.t));
    assert_status(CPR_OK, cpri_emb_touched_init(&f.touched, 1, ROWS, 1));
    for (int round = 0; round < 200; round++)
        for (uint64_t row = 0; row < 300; row++) { /* the same 300 rows, saved and retouched */
            cpri_emb_touched_unlist(&f.touched, row);
            cpri_emb_touched_add(&f.touched, 0, row);
        }
    assert_true(f.touched.lists[0].len <= 2 * 1024); /* not 60,000 entries */
    assert_true(f.touched.lists[0].cap <= 2 * 1024);
    cpri_emb_touched_release(&f.touched);
    cpr_emb_destroy(f.t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_every_row),
        cmocka_unit_test(test_lost_list_rebuilds),
        cmocka_unit_test(test_list_stays_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
