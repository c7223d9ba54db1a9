/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The readers of one RADOS backend share its read-ahead (rados.h R11), on the
 * test cluster (tests/CMakeLists.txt, fixture "ceph"):
 *  - 4 restores of 4 shards at once, 20 MiB each, whose blocks together are
 *    more than twice the backend's read-ahead: every row comes back with its
 *    written values, and the reads in flight never pass the read-ahead plus
 *    the two reads each reader may always have out (without the shared
 *    budget the first restore took a window of its whole shard, the second
 *    half the read-ahead and so on: about 54 MiB at once);
 *  - reads go into buffers given back by earlier reads (some reuse is
 *    certain: a reader held to its two reads gives a block back before it
 *    issues the next);
 *  - once the last reader ends, nothing is in flight and no buffer is kept;
 *  - restores whose consumer fails after its first batch end with reads
 *    still in flight: each returns the consumer's error, and the same holds
 *    after them (their buffers and their part of the budget came back).
 * Exits 77 when the cluster is not there.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpr/store.h"
#include "rados.h"
#include "store_internal.h" /* the store's segment backend */
#include "testutil.h"

static const char *g_conf;

#define SHARDS 4
#define SHARD_ROWS 78336   /* x 268 bytes: 20 MiB a shard, in blocks of about 1 MiB */
#define BATCH_ROWS 8192    /* rows a put_rows call */
static const cpr_table_schema T[] = {{.table = 0, .rows = SHARDS * SHARD_ROWS, .dim = 64,
                                      .state_dim = 1}};

typedef struct reader {
    cpr_store *store;
    uint32_t shard;
    uint64_t next;      /* the next row expected */
    size_t wrong;       /* rows out of order or with other values */
    int fail_after_first; /* the consumer fails on its second batch */
    size_t batches;
    cpr_status st;
} reader;

/* Every row in order, with the values written at checkpoint 1. */
static cpr_status check_batch(void *ctx, const cpr_row_batch *b)
{
    reader *r = ctx;
    if (r->fail_after_first && r->batches++ > 0)
        return CPR_FAILED_PRECONDITION;
    uint64_t *ids = malloc((b->n + 1) * sizeof *ids);
    if (!ids)
        return CPR_NO_MEMORY;
    for (size_t i = 0; i < b->n; i++)
        ids[i] = b->ids ? b->ids[i] : b->range_begin + i;
    tu_batch want;
    tu_batch_make(&want, &T[0], ids, b->n, 1);
    for (size_t i = 0; i < b->n; i++)
        r->wrong += ids[i] != r->next + i;
    r->next += b->n;
    r->wrong += b->values_count != b->n * T[0].dim ||
                memcmp(b->values, want.values, b->n * T[0].dim * sizeof(float)) != 0;
    r->wrong += b->state_count != b->n * T[0].state_dim ||
                memcmp(b->state, want.state, b->n * T[0].state_dim * sizeof(float)) != 0;
    tu_batch_free(&want);
    free(ids);
    return CPR_OK;
}

static void *restore_main(void *arg)
{
    reader *r = arg;
    cpr_row_range range = {(uint64_t)r->shard * SHARD_ROWS,
                           (uint64_t)(r->shard + 1) * SHARD_ROWS};
    cpr_restore_query q = {.job = "readers", .ranges = &range, .n_ranges = 1};
    r->next = range.begin;
    r->st = cpr_store_restore(r->store, &q, check_batch, r, NULL);
    return NULL;
}

/* Restore every shard at once, each in its own thread, into rs. */
static void restore_all(cpr_store *store, reader *rs, int fail_after_first)
{
    pthread_t th[SHARDS];
    for (uint32_t s = 0; s < SHARDS; s++) {
        rs[s] = (reader){.store = store, .shard = s, .fail_after_first = fail_after_first};
        assert_int_equal(pthread_create(&th[s], NULL, restore_main, &rs[s]), 0);
    }
    for (uint32_t s = 0; s < SHARDS; s++)
        pthread_join(th[s], NULL);
}

/* No reader open, nothing in flight, no buffer kept; the stats in *out. */
static void assert_idle(cpr_store *store, cpri_rados_read_stats *out)
{
    cpri_backend_rados_read_stats(store->segs, out);
    assert_int_equal(out->readers, 0);
    assert_int_equal(out->in_flight, 0);
    assert_int_equal(out->spare_bytes, 0);
}

static void test_readers_share_the_read_ahead(void **unused)
{
    (void)unused;
    char ns[64];
    snprintf(ns, sizeof ns, "readers-%d-%ld", (int)getpid(), (long)time(NULL));
    char *tmp = tu_mkdtemp("cpr-readers"), *dir = NULL;
    assert_int_not_equal(asprintf(&dir, "%s/store", tmp), -1);
    cpr_store_options o = {.rados_pool = "cpr", .rados_conf = g_conf,
                           .rados_namespace = ns, .no_fold = 1};
    cpr_store *store = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, &o, &store));

    uint64_t ids[BATCH_ROWS];
    for (uint32_t s = 0; s < SHARDS; s++) {
        cpr_part_spec spec = tu_part("readers", s, SHARDS, 1, CPR_KIND_FULL, T, 1);
        assert_status(CPR_OK, cpr_store_begin(store, &spec));
        for (uint64_t first = 0; first < SHARD_ROWS; first += BATCH_ROWS) {
            size_t n = SHARD_ROWS - first < BATCH_ROWS ? SHARD_ROWS - first : BATCH_ROWS;
            tu_iota(ids, (uint64_t)s * SHARD_ROWS + first, n);
            assert_status(CPR_OK, tu_put_rows(store, &spec.id, &T[0], ids, n, 1));
        }
        assert_status(CPR_OK, cpr_store_commit(store, &spec.id, SHARD_ROWS));
    }

    cpri_rados_read_stats before;
    cpri_backend_rados_read_stats(store->segs, &before);
    uint64_t total = (uint64_t)SHARDS * SHARD_ROWS * tu_row_bytes(&T[0]);
    assert_true(total > 2 * before.budget); /* the budget binds */

    reader rs[SHARDS];
    restore_all(store, rs, 0);
    for (uint32_t s = 0; s < SHARDS; s++) {
        assert_status(CPR_OK, rs[s].st);
        assert_int_equal(rs[s].next, (uint64_t)(s + 1) * SHARD_ROWS);
        assert_int_equal(rs[s].wrong, 0);
    }

    cpri_rados_read_stats after;
    assert_idle(store, &after);
    /* A block: about 1 MiB of rows (store_write.c, BLOCK_TARGET) and at
     * most 64 KiB of header, index and padding. */
    uint64_t block_max = (1u << 20) + (64u << 10);
    print_message("  %.1f MB read, reads in flight at most %.1f MB (budget %.1f MB), "
                  "%llu reads into kept buffers\n", total / 1e6, after.peak / 1e6,
                  after.budget / 1e6, (unsigned long long)(after.reused - before.reused));
    assert_true(after.peak <= after.budget + SHARDS * 2 * block_max);
    assert_true(after.reused > before.reused);
    assert_true(after.readers_peak >= 2); /* they did overlap */

    /* Consumers that fail early: the merges end with reads in flight. */
    restore_all(store, rs, 1);
    for (uint32_t s = 0; s < SHARDS; s++) {
        assert_status(CPR_FAILED_PRECONDITION, rs[s].st);
        assert_int_equal(rs[s].wrong, 0);
    }
    assert_idle(store, &after);

    cpr_store_close(store);
    tu_rmtree(tmp);
    free(tmp);
    free(dir);
}

int main(void)
{
    if (!(g_conf = tu_rados_conf()))
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_share_the_read_ahead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
