/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The merge of several nodes' restores by version (client/merge.c), at its
 * edges, against real ckptd processes on 127.0.0.1 (the rows it returns are
 * test_client's test_resharded_over_two_daemons):
 *  - M3: one node fails at once while the other is stopped (SIGSTOP) in the
 *    middle of its stream: the failure comes back when it happens, not when
 *    the stopped node's stream deadline passes; and the caller's callback
 *    failing at its first or a later batch;
 *  - batches of wide rows with batch_rows at its largest stay under the
 *    block limit (the store's rule), and a restore of three nodes of which
 *    one holds nothing of the job;
 *  - quantized parts restore as from one store holding the same parts.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "client_internal.h"
#include "cpr/block.h"
#include "cpr/client.h"
#include "testutil.h"

static const cpr_table_schema tables[2] = {{1, 4000, 8, 1}, {2, 4000, 3, 0}};

static uint32_t g_codec = CPR_CODEC_F32; /* the parts' codec */

/* Rows shard, shard + num_shards, ... (n) of each table, valued at ckpt. */
static void write_rows(cpr_client *c, const char *job, const cpr_table_schema *ts, size_t nt,
                       uint32_t shard, uint32_t num_shards, uint64_t ckpt, cpr_kind kind,
                       size_t n)
{
    cpr_part_spec spec = tu_part(job, shard, num_shards, ckpt, kind, ts, nt);
    spec.codec = g_codec;
    cpr_part *p;
    uint64_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = shard + i * num_shards;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    for (size_t t = 0; t < nt; t++) {
        tu_batch b;
        tu_batch_make(&b, &ts[t], ids, n, ckpt);
        assert_status(CPR_OK, cpr_part_put_rows(p, &b.batch));
        tu_batch_free(&b);
    }
    assert_status(CPR_OK, cpr_part_commit(&p));
    free(ids);
}

/* 4 shards (modulo) at checkpoint 1, then 2 shards re-saving rows < 2 * n2. */
static void write_resharded(cpr_client *c, const char *job, const cpr_table_schema *ts,
                            size_t nt, size_t n4, size_t n2)
{
    for (uint32_t s = 0; s < 4; s++)
        write_rows(c, job, ts, nt, s, 4, 1, CPR_KIND_FULL, n4);
    for (uint32_t s = 0; s < 2; s++)
        write_rows(c, job, ts, nt, s, 2, 2, CPR_KIND_PRIORITY, n2);
}

typedef struct nodes {
    size_t n;
    char *dir[3];
    ch_daemon d[3];
    cpr_client *c;
} nodes;

static void nodes_up(nodes *t, size_t n, const cpr_client_options *o)
{
    char target[1024] = "grpc://";
    t->n = n;
    for (size_t i = 0; i < n; i++) {
        t->dir[i] = tu_mkdtemp("cpr-merge");
        ch_start(&t->d[i], t->dir[i]);
        snprintf(target + strlen(target), sizeof target - strlen(target), "%s%s",
                 i ? "," : "", t->d[i].addr);
    }
    assert_status(CPR_OK, cpr_client_open(target, o, &t->c));
}

static void nodes_down(nodes *t)
{
    cpr_client_close(t->c);
    for (size_t i = 0; i < t->n; i++) {
        ch_stop(&t->d[i]);
        tu_rmtree(t->dir[i]);
        free(t->dir[i]);
    }
}

/* A job of `prefix` whose shards 0..3 of 4 and 0..1 of 2 sit on more than
 * one node, with some row's versions on two nodes. */
static void pick_job(cpr_client *c, const char *prefix, char *job, size_t cap)
{
    job[0] = 0;
    for (int k = 0; k < 10000 && !job[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s-%d", prefix, k);
        size_t n0 = cpr_client_node_of(c, name, 0), n1 = cpr_client_node_of(c, name, 1);
        if (n0 != n1 && cpr_client_node_of(c, name, 2) != n0 &&
            cpr_client_node_of(c, name, 3) != n1)
            snprintf(job, cap, "%s", name);
    }
    assert_true(job[0] != 0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct calls {
    int n, fail_at;
    uint64_t rows;
    size_t most_bytes;
} calls;

static cpr_status counting(void *ctx, const cpr_row_batch *b)
{
    calls *k = ctx;
    size_t bytes = b->n * 8 + (b->values_count + b->state_count) * 4;
    k->most_bytes = bytes > k->most_bytes ? bytes : k->most_bytes;
    k->rows += b->n;
    if (++k->n == k->fail_at)
        return cpr_fail(CPR_ALREADY_EXISTS, "the callback stops at batch %d", k->n);
    return CPR_OK;
}

static void test_stops_at_once(void **state)
{
    (void)state;
    cpr_client_options o = {.stream_timeout_s = 300, .no_retries = 1};
    nodes t;
    nodes_up(&t, 2, &o);
    char job[64];
    pick_job(t.c, "stop", job, sizeof job);
    write_resharded(t.c, job, tables, 2, 1000, 500);

    /* The callback fails at its first batch, and at a later one. */
    for (int at = 1; at <= 40; at += 39) {
        calls k = {.fail_at = at};
        cpr_restore_query q = {.job = job, .batch_rows = 7};
        assert_status(CPR_ALREADY_EXISTS, cpr_client_restore(t.c, &q, NULL, 0, counting, &k,
                                                             NULL));
        assert_non_null(strstr(cpr_errmsg(), "the callback stops"));
        assert_int_equal(k.n, at);
    }

    /* Node 0 refuses the query at once (batch_rows over the store's limit);
     * node 1 is stopped. The merge is called directly: a restore through
     * the client would first list the stopped node. */
    uint8_t want[2] = {1, 1};
    uint64_t rows = 0, bytes = 0;
    size_t asked = 0, missing = 0;
    int old_daemon = 0;
    calls k = {0};
    cpr_restore_query q = {.job = job, .as_of = 2, .batch_rows = (size_t)2 << 20};
    assert_status(CPR_INVALID_ARGUMENT,
                  cpri_restore_merged(t.c, &q, want, counting, &k, &rows, &bytes, &asked,
                                      &missing, &old_daemon));
    assert_int_equal(kill(t.d[1].pid, SIGSTOP), 0);
    double t0 = now_s();
    cpr_status st = cpri_restore_merged(t.c, &q, want, counting, &k, &rows, &bytes, &asked,
                                        &missing, &old_daemon);
    double took = now_s() - t0;
    assert_int_equal(kill(t.d[1].pid, SIGCONT), 0);
    assert_status(CPR_INVALID_ARGUMENT, st);
    assert_int_equal(k.n, 0);
    assert_false(old_daemon);
    /* Not the stopped node's deadline (300 s x 2): its stream was cancelled. */
    if (took > 60)
        fail_msg("the merge returned node 0's error after %.0f s", took);
    nodes_down(&t);
}

static void test_wide_rows_and_a_missing_node(void **state)
{
    (void)state;
    nodes t;
    nodes_up(&t, 2, NULL);
    char job[64];
    pick_job(t.c, "wide", job, sizeof job);
    static const cpr_table_schema wide[1] = {{7, 400, 16384, 0}};
    write_resharded(t.c, job, wide, 1, 100, 50);
    calls k = {0};
    cpr_restore_query q = {.job = job, .batch_rows = (size_t)1 << 20};
    cpr_restore_result res;
    assert_status(CPR_OK, cpr_client_restore(t.c, &q, NULL, 0, counting, &k, &res));
    assert_int_equal(k.rows, 400);
    assert_int_equal(res.rows, 400);
    assert_true(k.most_bytes <= CPR_BLOCK_MAX_BYTES);
    nodes_down(&t);

    /* Three nodes, one without any part of the job. */
    nodes_up(&t, 3, NULL);
    job[0] = 0;
    for (int n = 0; n < 100000 && !job[0]; n++) {
        char name[64];
        int used[3] = {0};
        snprintf(name, sizeof name, "three-%d", n);
        for (uint32_t s = 0; s < 4; s++)
            used[cpr_client_node_of(t.c, name, s)] = 1;
        if (!used[2])
            snprintf(job, sizeof job, "%s", name);
    }
    assert_true(job[0] != 0);
    write_resharded(t.c, job, tables, 2, 1000, 500);
    tu_rows rows = {0};
    q = (cpr_restore_query){.job = job, .batch_rows = 5};
    assert_status(CPR_OK, cpr_client_restore(t.c, &q, NULL, 0, tu_collect, &rows, &res));
    assert_int_equal(rows.n, 8000);
    for (size_t i = 0; i < rows.n; i++)
        tu_assert_row(&rows.rows[i], &tables[i / 4000], i % 4000, i % 4000 < 1000 ? 2 : 1);
    tu_rows_free(&rows);
    uint32_t none = 99; /* a table no node has */
    q = (cpr_restore_query){.job = job, .tables = &none, .n_tables = 1};
    assert_status(CPR_NOT_FOUND, cpr_client_restore(t.c, &q, NULL, 0, tu_collect, &rows, &res));
    tu_rows_free(&rows);
    nodes_down(&t);
}

/* Quantized parts (bf16, int8) merged over two nodes restore exactly as the
 * same parts in one store: stored blocks passed whole are decoded by the
 * client, merged rows by the daemons. */
static void test_quantized_parts(void **state)
{
    (void)state;
    nodes t;
    nodes_up(&t, 2, NULL);
    char *dir = tu_mkdtemp("cpr-merge-local"), local[400];
    snprintf(local, sizeof local, "local://%s/store", dir);
    cpr_client *one;
    assert_status(CPR_OK, cpr_client_open(local, NULL, &one));
    const uint32_t codecs[2] = {CPR_CODEC_BF16, CPR_CODEC_INT8};
    for (int k = 0; k < 2; k++) {
        char job[64];
        pick_job(t.c, k ? "int8" : "bf16", job, sizeof job);
        g_codec = codecs[k];
        write_resharded(t.c, job, tables, 2, 1000, 500);
        write_resharded(one, job, tables, 2, 1000, 500);
        g_codec = CPR_CODEC_F32;
        tu_rows got = {0}, want = {0};
        cpr_restore_query q = {.job = job, .batch_rows = 300};
        assert_status(CPR_OK, cpr_client_restore(t.c, &q, NULL, 0, tu_collect, &got, NULL));
        assert_status(CPR_OK, cpr_client_restore(one, &q, NULL, 0, tu_collect, &want, NULL));
        assert_int_equal(got.n, 8000);
        assert_int_equal(got.n, want.n);
        for (size_t i = 0; i < got.n; i++) {
            assert_int_equal(got.rows[i].table, want.rows[i].table);
            assert_int_equal(got.rows[i].id, want.rows[i].id);
            assert_memory_equal(got.rows[i].values, want.rows[i].values,
                                (got.rows[i].dim + got.rows[i].state_dim) * sizeof(float));
        }
        tu_rows_free(&got);
        tu_rows_free(&want);
    }
    cpr_client_close(one);
    tu_rmtree(dir);
    free(dir);
    nodes_down(&t);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stops_at_once),
        cmocka_unit_test(test_wide_rows_and_a_missing_node),
        cmocka_unit_test(test_quantized_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
