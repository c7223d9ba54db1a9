/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The touched-row lists (embedding/emb_touched.c) select exactly what the
 * radix selection over every row selects (cpri_emb_topk: the largest
 * non-zero keys, ties toward lower ids), for MFU counts and TOPK_NORM norms,
 * with stale entries in the lists (rows whose trackers went back to zero),
 * strided shards, budgets from 1 to beyond the candidates; and a lost list
 * is reported as such and rebuilt from the rows. Long lists of range shards
 * are read off the bitmap (T3), with the same results.
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
#include "emb_internal.h"
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
    for (uint64_t row = 0; row < ROWS; row++) /* zeroed: unlisted (T2) */
        cpri_emb_touched_unlist(&f->touched, row);
    for (int i = 0; i < 2500; i++) {
        uint64_t row = cpr_splitmix64(&seed) % ROWS, r = cpr_splitmix64(&seed);
        uint32_t shard = cpr_emb_shard_of(f->t, row);
        /* at least 1 an update, as the table counts (T4) */
        f->counts[row] += r % 16 == 0 ? 1 + (uint32_t)(r >> 40) % 5000 : 1;
        f->norm[row] += (float)(r % 1000) * 1e-3f;
        cpri_emb_touched_add(&f->touched, shard, row);
        if (f->norm[row] == 0) /* an update of no change (T5), as the table notes it */
            cpri_emb_touched_zero_norm(&f->touched, shard);
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
    assert_status(CPR_OK, cpri_emb_touched_topk(&f->touched, f->t, shard, &live, keys, k, got,
                                                &n_got, &from_list));
    assert_true(from_list);
    assert_int_equal(n_got, n_want);
    assert_memory_equal(got, want, n_want * sizeof *got);
}

/* A table of ROWS rows in SHARDS modulo shards, and its lists. */
static void open_modulo(fixture *f)
{
    cpr_emb_config cfg = {.rows = ROWS, .dim = 4, .num_shards = SHARDS,
                          .scheme = CPR_SHARD_MODULO};
    assert_status(CPR_OK, cpr_emb_create(&cfg, &f->t));
    assert_status(CPR_OK, cpri_emb_touched_init(&f->touched, 1, ROWS, SHARDS));
}

static void test_same_as_every_row(void **unused)
{
    (void)unused;
    static fixture f;
    open_modulo(&f);
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
    assert_status(CPR_OK, cpri_emb_touched_topk(&f.touched, f.t, 1, &live, f.counts, 50, ids,
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

/* T3: long lists of contiguous (range) shards are read off the bitmap, in
 * ascending order, uncompacted: the same selections as over every row, for
 * budgets around the candidates, through rounds of saves (rows unlisted,
 * some touched again) that leave stale entries in the lists. */
static void test_bitmap_selection(void **unused)
{
    (void)unused;
    enum { BIG = 1 << 17, BIG_SHARDS = 2 };
    static uint32_t counts[BIG + 1000]; /* rows past BIG stay untouched */
    static float norm[BIG + 1000];
    static uint64_t want[BIG], got[BIG];
    cpr_emb *t = NULL;
    cpri_emb_touched touched;
    cpr_emb_config cfg = {.rows = BIG + 1000, .dim = 4, .num_shards = BIG_SHARDS};
    assert_status(CPR_OK, cpr_emb_create(&cfg, &t));
    assert_status(CPR_OK, cpri_emb_touched_init(&touched, 1, BIG + 1000, BIG_SHARDS));
    uint64_t seed = 77;
    cpri_emb_touched_keys live = {counts, norm, 4};
    for (int round = 0; round < 6; round++) {
        for (int i = 0; i < 12000; i++) { /* odd-sized shards: words cut at both ends */
            uint64_t row = cpr_splitmix64(&seed) % BIG, r = cpr_splitmix64(&seed);
            counts[row] += r % 16 == 0 ? 1 + (uint32_t)(r >> 40) % 5000 : 1 + (uint32_t)(r % 3);
            norm[row] += (float)(r % 1000) * 1e-3f;
            cpri_emb_touched_add(&touched, cpr_emb_shard_of(t, row), row);
            if (norm[row] == 0) /* T5 */
                cpri_emb_touched_zero_norm(&touched, cpr_emb_shard_of(t, row));
        }
        for (uint32_t s = 0; s < BIG_SHARDS; s++) {
            const uint64_t budgets[] = {1, 100, 3000, 5500, 6000, 20000};
            for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++)
                for (int which = 0; which < 2; which++) {
                    const void *keys = which ? (const void *)norm : (const void *)counts;
                    size_t n_want = 0, n_got = 0, len = touched.lists[s].len;
                    int from_list = 0;
                    assert_status(CPR_OK, cpri_emb_topk(t, s, keys, 4, budgets[b], want,
                                                        &n_want));
                    assert_status(CPR_OK, cpri_emb_touched_topk(&touched, t, s, &live, keys,
                                                                budgets[b], got, &n_got,
                                                                &from_list));
                    assert_true(from_list);
                    assert_true(len >= 4096);
                    assert_int_equal(touched.lists[s].len, len); /* not compacted (T3) */
                    assert_int_equal(n_got, n_want);
                    assert_memory_equal(got, want, n_want * sizeof *got);
                }
        }
        for (int i = 0; i < 3000; i++) { /* a save: unlisted, some touched again */
            uint64_t row = cpr_splitmix64(&seed) % BIG;
            counts[row] = 0;
            norm[row] = 0;
            cpri_emb_touched_unlist(&touched, row);
            if (i % 4 == 0) {
                counts[row] = 2;
                norm[row] = 0.25f;
                cpri_emb_touched_add(&touched, cpr_emb_shard_of(t, row), row);
            }
        }
    }
    for (uint32_t s = 0; s < BIG_SHARDS; s++) /* appends alone kept the lists bounded */
        assert_true(touched.lists[s].len <= 2 * 6 * 12000);
    cpri_emb_touched_release(&touched);
    cpr_emb_destroy(t);
}

/* cpri_emb_bitmap_rows against reading every bit: ranges that start and end
 * inside words, words of one, several and 64 set bits, a cap met exactly
 * and a cap one short (SIZE_MAX), and the out buffer never written past
 * cap (a guard word after it stays as it was). */
static void test_bitmap_rows(void **unused)
{
    (void)unused;
    enum { WORDS = 40 };
    uint64_t map[WORDS] = {0}, want[WORDS * 64], got[WORDS * 64 + 1];
    cpr_rng rng;
    cpr_rng_seed(&rng, 12);
    map[3] = ~0ull;           /* every bit */
    map[7] = 1ull << 63;      /* the highest only */
    map[8] = 1;               /* the lowest only */
    map[9] = 0x8000000000000001ull;
    for (int w = 12; w < WORDS; w++) /* sparse: zero, one or two bits */
        for (int k = 0; k < 2; k++)
            if (cpr_rng_next(&rng) % 3 == 0)
                map[w] |= 1ull << (cpr_rng_next(&rng) % 64);
    const uint64_t ranges[][2] = {{0, WORDS * 64}, {5, 300}, {192, 256}, {193, 255},
                                  {511, 513}, {700, 701}, {100, 100}, {1000, WORDS * 64 - 3}};
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        uint64_t first = ranges[r][0], end = ranges[r][1];
        size_t n = 0;
        for (uint64_t i = first; i < end; i++)
            if ((map[i >> 6] >> (i & 63)) & 1)
                want[n++] = i;
        for (size_t cap = n ? n - 1 : 0; cap <= n + 1; cap++) {
            memset(got, 0xab, sizeof got);
            uint64_t guard;
            memset(&guard, 0xab, sizeof guard);
            size_t m = cpri_emb_bitmap_rows(map, first, end, got, cap);
            if (n > cap) {
                assert_true(m == SIZE_MAX);
            } else {
                assert_int_equal(m, n);
                assert_memory_equal(got, want, n * sizeof *want);
            }
            assert_memory_equal(&got[cap], &guard, sizeof guard); /* nothing past cap */
        }
    }
}

/* T4 and T5: a budget that holds every listed row takes them all without
 * reading a key, for MFU always and for TOPK_NORM while no listed norm is
 * zero. Listed rows whose norm is zero (updates of no change) are left out
 * of TOPK_NORM's selection and kept in MFU's, exactly as reading every row
 * decides; and a selection that read every norm clears the shard's flag
 * only when it found none zero. */
static void test_take_all_listed(void **unused)
{
    (void)unused;
    static fixture f;
    open_modulo(&f);
    fill(&f, 9);
    for (uint64_t row = 0; row < ROWS; row += 97) /* zero-change updates: listed, norm 0 */
        if (f.counts[row]) {
            f.norm[row] = 0;
            cpri_emb_touched_zero_norm(&f.touched, cpr_emb_shard_of(f.t, row));
        }
    for (uint32_t s = 0; s < SHARDS; s++) {
        same_selection(&f, s, f.counts, ROWS);
        same_selection(&f, s, f.norm, ROWS);  /* reads every norm: some are zero */
        assert_true(f.touched.lists[s].zero_norm);
        same_selection(&f, s, f.norm, ROWS);  /* still read, still the same */
    }
    for (uint64_t row = 0; row < ROWS; row++) /* every listed norm non-zero again */
        if (f.counts[row] && f.norm[row] == 0)
            f.norm[row] = 0.25f;
    for (uint32_t s = 0; s < SHARDS; s++) {
        same_selection(&f, s, f.norm, 1);     /* reads every norm: none zero */
        assert_false(f.touched.lists[s].zero_norm);
        same_selection(&f, s, f.norm, ROWS);  /* taken unread, the same rows */
        same_selection(&f, s, f.counts, ROWS);
    }
    cpri_emb_touched_release(&f.touched);
    cpr_emb_destroy(f.t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_every_row),
        cmocka_unit_test(test_lost_list_rebuilds),
        cmocka_unit_test(test_list_stays_bounded),
        cmocka_unit_test(test_bitmap_selection),
        cmocka_unit_test(test_bitmap_rows),
        cmocka_unit_test(test_take_all_listed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
