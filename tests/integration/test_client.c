/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client library (cpr/client.h) end to end, against the store in-process
 * (local://) and against real ckptd processes on 127.0.0.1: parts of every
 * kind round-trip byte-exact, restores by table, range, modulo, as-of and
 * consistent cut, blobs, backpressure of the staging buffer, many shards at
 * once, a job spread over two daemons (placement, cuts, restores and gc over
 * both), and faults: the daemon killed mid-part, a node that is down, and a
 * client process killed mid-stream.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/block.h"
#include "cpr/client.h"
#include "cpr/codec.h"
#include "cpr/store.h"
#include "testutil.h"

static const cpr_table_schema tables[2] = {{1, 4000, 8, 1}, {2, 4000, 3, 0}};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Rows first, first+step, ... (n of them) of both tables, valued at `ckpt`,
 * put in one call per table (the library splits them). */
static cpr_status put_rows(cpr_part *p, uint64_t first, uint64_t step, size_t n, uint64_t ckpt)
{
    uint64_t *ids = malloc((n + 1) * sizeof *ids);
    cpr_status st = CPR_OK;
    for (size_t i = 0; i < n; i++)
        ids[i] = first + i * step;
    for (size_t t = 0; t < 2 && st == CPR_OK; t++) {
        tu_batch b;
        tu_batch_make(&b, &tables[t], ids, n, ckpt);
        b.batch.crc32c = 0; /* ignored by the library: it checksums its copy */
        st = cpr_part_put_rows(p, &b.batch);
        tu_batch_free(&b);
    }
    free(ids);
    return st;
}

static void put_blob(cpr_part *p, uint32_t shard, uint64_t ckpt, size_t len)
{
    unsigned char *data = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        data[i] = tu_blob_byte(shard, ckpt, i);
    assert_status(CPR_OK, cpr_part_put_blob(p, "dense", data, len));
    free(data);
}

/* Begin, put rows (modulo layout: shard s of n owns rows s, s+n, ...) and a
 * blob, commit. */
static void write_part(cpr_client *c, const char *job, uint32_t shard, uint32_t num_shards,
                       uint64_t ckpt, cpr_kind kind, size_t rows)
{
    cpr_part_spec spec = tu_part(job, shard, num_shards, ckpt, kind, tables, 2);
    cpr_part *p;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_status(CPR_OK, put_rows(p, shard, num_shards, rows, ckpt));
    put_blob(p, shard, ckpt, 70000 + shard);
    assert_status(CPR_OK, cpr_part_commit(&p));
}

static void restore(cpr_client *c, const cpr_restore_query *q, const uint32_t *shards,
                    size_t n_shards, tu_rows *rows, cpr_restore_result *res)
{
    memset(rows, 0, sizeof *rows);
    assert_status(CPR_OK, cpr_client_restore(c, q, shards, n_shards, tu_collect, rows, res));
}

static void assert_blob(cpr_client *c, const char *job, uint32_t shard, uint64_t ckpt,
                        size_t len)
{
    cpr_part_id id = {job, shard, ckpt};
    void *data = NULL;
    size_t got = 0;
    assert_status(CPR_OK, cpr_client_read_blob(c, &id, "dense", &data, &got));
    assert_int_equal(got, len);
    for (size_t i = 0; i < len; i++)
        if (((unsigned char *)data)[i] != tu_blob_byte(shard, ckpt, i))
            fail_msg("blob byte %zu differs", i);
    free(data);
}

/* ---- one node: every kind, every query shape ------------------------------------ */

static void round_trip_opts(const char *target, const cpr_client_options *given)
{
    cpr_client_options o = *given;
    cpr_client *c;
    tu_rows rows;
    cpr_restore_result res;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    assert_int_equal(cpr_client_nodes(c), 1);

    write_part(c, "rt", 0, 1, 1, CPR_KIND_FULL, 3000);
    /* DELTA: rows 0..99 changed at checkpoint 2. PRIORITY: rows 10..19 at 3. */
    cpr_part_spec spec = tu_part("rt", 0, 1, 2, CPR_KIND_DELTA, tables, 2);
    cpr_part *p;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_status(CPR_OK, put_rows(p, 0, 1, 100, 2));
    assert_status(CPR_OK, cpr_part_commit(&p));
    spec = tu_part("rt", 0, 1, 3, CPR_KIND_PRIORITY, tables, 2);
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_status(CPR_OK, put_rows(p, 10, 1, 10, 3));
    assert_status(CPR_OK, cpr_part_commit(&p));

    cpr_part_info *parts;
    size_t n;
    assert_status(CPR_OK, cpr_client_list(c, "rt", &parts, &n));
    assert_int_equal(n, 3);
    assert_int_equal(parts[0].rows, 6000);
    assert_true(parts[0].committed && parts[1].consistent && !parts[2].consistent);
    assert_int_equal(parts[2].kind, CPR_KIND_PRIORITY);
    free(parts);
    uint64_t cut = 0;
    assert_status(CPR_OK, cpr_client_latest_cut(c, "rt", &cut));
    assert_int_equal(cut, 2); /* PRIORITY parts are never consistent */

    /* Newest: rows 10..19 from 3, 0..99 from 2, the rest from 1. */
    cpr_restore_query q = {.job = "rt"};
    restore(c, &q, NULL, 0, &rows, &res);
    assert_int_equal(rows.n, 6000);
    assert_int_equal(res.as_of, 3);
    assert_int_equal(res.rows, 6000);
    for (size_t t = 0; t < 2; t++) {
        tu_assert_rows(rows.rows + t * 3000, &tables[t], 0, 1, 10, 2);
        tu_assert_rows(rows.rows + t * 3000 + 10, &tables[t], 10, 1, 10, 3);
        tu_assert_rows(rows.rows + t * 3000 + 20, &tables[t], 20, 1, 80, 2);
        tu_assert_rows(rows.rows + t * 3000 + 100, &tables[t], 100, 1, 2900, 1);
    }
    tu_rows_free(&rows);
    /* The consistent cut (2), one table, a range and a modulo. */
    uint32_t only = 2;
    cpr_row_range range = {50, 150};
    q = (cpr_restore_query){.job = "rt", .consistent = 1, .tables = &only, .n_tables = 1,
                            .ranges = &range, .n_ranges = 1, .modulo = 5, .remainder = 0};
    restore(c, &q, NULL, 0, &rows, &res);
    assert_int_equal(res.as_of, 2);
    assert_int_equal(rows.n, 20);
    tu_assert_rows(rows.rows, &tables[1], 50, 5, 10, 2);
    tu_assert_rows(rows.rows + 10, &tables[1], 100, 5, 10, 1);
    tu_rows_free(&rows);
    /* As of 1: the FULL part alone. */
    q = (cpr_restore_query){.job = "rt", .as_of = 1, .batch_rows = 77};
    restore(c, &q, NULL, 0, &rows, &res);
    assert_int_equal(rows.n, 6000);
    tu_assert_rows(rows.rows, &tables[0], 0, 1, 3000, 1);
    tu_rows_free(&rows);

    /* Into a caller's table buffer: rows 0..2999 of table 1. */
    float *values = calloc(3000 * 8, sizeof *values), *state = calloc(3000, sizeof *state);
    uint8_t *seen = calloc(3000, 1);
    cpr_restore_into into = {1, 0, 3000, 8, 1, values, state, seen};
    q = (cpr_restore_query){.job = "rt", .as_of = 1};
    assert_status(CPR_OK, cpr_client_restore_table(c, &q, NULL, 0, &into, &res));
    for (uint64_t r = 0; r < 3000; r++) {
        assert_int_equal(seen[r], 1);
        assert_int_equal(tu_float_bits(values[r * 8 + 7]), tu_float_bits(tu_value(1, r, 1, 7)));
        assert_int_equal(tu_float_bits(state[r]), tu_float_bits(tu_state(1, r, 1, 0)));
    }
    into.n_rows = 100; /* too small a window: refused, not overrun */
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_restore_table(c, &q, NULL, 0, &into, NULL));
    free(values);
    free(state);
    free(seen);

    assert_blob(c, "rt", 0, 1, 70000);

    /* Errors, each specific; nothing committed changes. */
    spec = tu_part("rt", 0, 1, 3, CPR_KIND_FULL, tables, 2);
    assert_status(CPR_ALREADY_EXISTS, cpr_client_begin(c, &spec, &p));
    spec = tu_part("rt", 0, 1, 4, CPR_KIND_FULL, tables, 2);
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    uint64_t id = 1;
    float v[8] = {0};
    cpr_row_batch bad = {9, 1, &id, v, 8, NULL, 0, 0, 0};
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_put_rows(p, &bad));
    bad.table = 1;
    bad.values_count = 7;
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_put_rows(p, &bad));
    assert_status(CPR_OK, cpr_part_put_blob(p, "empty", "", 0));
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_put_blob(p, "empty", "x", 1));
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_put_blob(p, "no/slash", "x", 1));
    assert_status(CPR_OK, put_rows(p, 0, 1, 5, 4));
    assert_status(CPR_OK, cpr_part_abort(&p));
    q = (cpr_restore_query){.job = "rt"};
    restore(c, &q, NULL, 0, &rows, &res);
    assert_int_equal(res.as_of, 3); /* the aborted part left nothing */
    tu_rows_free(&rows);
    /* An empty blob round-trips as empty. */
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_status(CPR_OK, cpr_part_put_blob(p, "empty", NULL, 0));
    assert_status(CPR_OK, put_rows(p, 0, 1, 3000, 4));
    assert_status(CPR_OK, cpr_part_commit(&p));
    cpr_part_id pid = {"rt", 0, 4};
    void *data = NULL;
    size_t len = 99;
    assert_status(CPR_OK, cpr_client_read_blob(c, &pid, "empty", &data, &len));
    assert_int_equal(len, 0);
    free(data);
    assert_status(CPR_NOT_FOUND, cpr_client_read_blob(c, &pid, "dense", &data, &len));
    assert_status(CPR_NOT_FOUND, cpr_client_list(c, "nosuchjob", &parts, &n));
    assert_status(CPR_NOT_FOUND, cpr_client_latest_cut(c, "nosuchjob", &cut));

    /* A row the storage refuses (id >= rows) fails the part after the put
     * returned: commit says why, and nothing of the part is visible. */
    spec = tu_part("rt", 0, 1, 5, CPR_KIND_FULL, tables, 2);
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_status(CPR_OK, put_rows(p, 0, 1, 100, 5));
    uint64_t too_big = tables[0].rows;
    tu_batch tb;
    tu_batch_make(&tb, &tables[0], &too_big, 1, 5);
    /* A row beyond the table is refused at the put, before anything of the
     * batch is queued: the part stays whole and commits what was sent. */
    cpr_status put_st = cpr_part_put_rows(p, &tb.batch);
    tu_batch_free(&tb);
    assert_status(CPR_INVALID_ARGUMENT, put_st);
    assert_non_null(strstr(cpr_errmsg(), "not below the table's rows"));
    /* So is an id twice in one batch (not ascending: 7, 3, 7). */
    uint64_t twice[3] = {7, 3, 7};
    tu_batch_make(&tb, &tables[0], twice, 3, 5);
    put_st = cpr_part_put_rows(p, &tb.batch);
    assert_status(CPR_INVALID_ARGUMENT, put_st);
    assert_non_null(strstr(cpr_errmsg(), "row id 7 appears twice"));
    /* Counts that are right with no array behind them: said so. */
    cpr_row_batch no_values = tb.batch;
    no_values.values = NULL;
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_put_rows(p, &no_values));
    assert_non_null(strstr(cpr_errmsg(), "values is NULL"));
    tu_batch_free(&tb);
    assert_status(CPR_OK, cpr_part_commit(&p));
    assert_null(p);
    /* The handle was cleared: a second commit is refused, not a use after free. */
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_commit(&p));
    assert_non_null(strstr(cpr_errmsg(), "already committed or aborted"));
    assert_status(CPR_OK, cpr_part_abort(&p));
    assert_status(CPR_OK, cpr_client_list(c, "rt", &parts, &n));
    assert_int_equal(n, 5);
    free(parts);

    cpr_store_stats stats;
    assert_status(CPR_OK, cpr_client_stats(c, &stats));
    assert_int_equal(stats.parts_committed, 5);
    cpr_verify_report vr;
    assert_status(CPR_OK, cpr_client_verify(c, "rt", NULL, NULL, &vr));
    assert_true(vr.rows_checked >= 6000 + 200 + 20 + 6000 + 100);
    cpr_client_close(c);
}

static void round_trip(const char *target)
{
    cpr_client_options o = {.message_bytes = 4096, .backoff_s = 0.01};
    round_trip_opts(target, &o);
}

/* A ckptd on a Unix-domain socket in a new temporary directory (returned;
 * ch_daemon_down removes it), with its metrics on 127.0.0.1 if `metrics`. */
static char *unix_daemon(ch_daemon *d, int metrics)
{
    char *dir = tu_mkdtemp("cpr-ckptd");
    char listen[400];
    snprintf(listen, sizeof listen, "unix:%s/ckptd.sock", dir);
    const char *const args[] = {"--listen", listen, metrics ? "--metrics-listen" : NULL,
                                "127.0.0.1:0", NULL};
    ch_start_args(d, dir, args);
    assert_string_equal(d->addr, listen);
    return dir;
}

static double plans_sent(const ch_daemon *d)
{
    return ch_metric_now(d, "cpr_ckptd_restore_plans_total");
}

/* A client opened with `o` restores the round trip's job as of checkpoint 1:
 * its FULL part, rows and bits. */
static void restore_first_part(const char *target, const cpr_client_options *o)
{
    cpr_client *c = NULL;
    tu_rows rows = {0};
    cpr_restore_result res = {0};
    cpr_restore_query q = {.job = "rt", .as_of = 1};
    assert_status(CPR_OK, cpr_client_open(target, o, &c));
    restore(c, &q, NULL, 0, &rows, &res);
    assert_int_equal(rows.n, 6000);
    tu_assert_rows(rows.rows, &tables[0], 0, 1, 3000, 1);
    tu_rows_free(&rows);
    cpr_client_close(c);
}

/* Direct reads from a daemon's directory on this host (docs/client.md,
 * "Direct reads"): every restore of the round trip is planned by ckptd and
 * read from the segment files by the client, with the same rows; pointed at
 * another store's directory the client gets rows from ckptd, as before; a
 * direct read that fails before a row is asked again through ckptd; a
 * directory that holds no store fails the open. Both read modes. */
static void test_direct_local_reads(void **state)
{
    (void)state;
    ch_daemon d;
    char other[4200];
    char *dir = unix_daemon(&d, 1);
    assert_true(plans_sent(&d) == 0);
    cpr_client_options o = {.message_bytes = 4096, .backoff_s = 0.01};
    o.store.local_dir = dir;
    round_trip_opts(d.addr, &o);
    double planned = plans_sent(&d);
    assert_true(planned >= 5); /* every restore of the round trip */

    /* Buffered reads of the same store, then another store's directory: no
     * plan, rows from ckptd, the same answer. */
    snprintf(other, sizeof other, "%s/other", dir);
    cpr_store *s = NULL;
    assert_status(CPR_OK, cpr_store_open(other, NULL, &s));
    cpr_store_close(s);
    for (int i = 0; i < 2; i++) {
        o.store.local_dir = i ? other : dir;
        o.store.buffered_reads = !i;
        restore_first_part(d.addr, &o);
        assert_true(plans_sent(&d) == planned + 1); /* the first only */
    }

    /* A copy of the directory carries the store's name (direct.c D1), so
     * ckptd plans; its segments differ (gone here), the direct read fails
     * before a row is delivered, and the client asks again for rows: the
     * same answer, one plan more. */
    char copy[4200], cmd[27000];
    snprintf(copy, sizeof copy, "%s/copy", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/store-id' '%s/' && cp -r '%s/segments' "
             "'%s/' && find '%s/segments' -name '*.seg' -delete", copy, dir, copy, dir, copy,
             copy);
    assert_int_equal(system(cmd), 0);
    o.store.local_dir = copy;
    o.store.buffered_reads = 0;
    restore_first_part(d.addr, &o);
    assert_true(plans_sent(&d) == planned + 2);

    cpr_client *c = NULL;
    o.store.local_dir = "/nonexistent-cpr-dir";
    assert_status(CPR_NOT_FOUND, cpr_client_open(d.addr, &o, &c));
    assert_non_null(strstr(cpr_errmsg(), "store-id"));
    o.store.local_dir = dir;
    o.direct_writes = 1; /* RADOS only */
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_open(d.addr, &o, &c));
    assert_null(c);
    ch_daemon_down(&d, dir);
}

static void test_local_round_trip(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-client");
    char target[512];
    snprintf(target, sizeof target, "local://%s/store", dir);
    round_trip(target);
    tu_rmtree(dir);
    free(dir);
}

static void test_grpc_round_trip(void **state)
{
    (void)state;
    ch_daemon d;
    char target[300];
    char *dir = ch_daemon_up(&d, target, sizeof target);
    round_trip(target);
    ch_daemon_down(&d, dir);
}

/* A daemon on a Unix-domain socket (same host, no TCP stack). */
static void test_unix_round_trip(void **state)
{
    (void)state;
    ch_daemon d;
    char *dir = unix_daemon(&d, 0);
    round_trip(d.addr);
    ch_daemon_down(&d, dir);
}

static void test_bad_targets(void **state)
{
    (void)state;
    const char *bad[] = {"", "foo", "local://relative", "grpc://", "grpc://host",
                         "grpc://:80", "grpc://a:1,a:1", "grpc://a:1,", "http://a:1",
                         "unix:relative", "unix:/a,unix:/b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cpr_client *c = NULL;
        assert_status(CPR_INVALID_ARGUMENT, cpr_client_open(bad[i], NULL, &c));
        assert_true(strlen(cpr_errmsg()) > 0);
    }
    /* One syntax everywhere: a bare host:port list is grpc:// (connecting is lazy). */
    const char *good[] = {"127.0.0.1:1", "127.0.0.1:1,127.0.0.1:2", "grpc://127.0.0.1:1",
                          "unix:/nonexistent/ckptd.sock"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cpr_client *c = NULL;
        assert_status(CPR_OK, cpr_client_open(good[i], NULL, &c));
        assert_int_equal(cpr_client_nodes(c), i == 1 ? 2 : 1);
        cpr_client_close(c);
    }
}

/* ---- staging: bounded, and puts block rather than grow --------------------------- */

static void test_backpressure(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-client");
    char target[512];
    snprintf(target, sizeof target, "local://%s/store", dir);
    cpr_client_options o = {.staging_bytes = 2u << 20};
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    static const cpr_table_schema wide = {7, 1u << 20, 64, 0};
    cpr_part_spec spec = tu_part("bp", 0, 1, 1, CPR_KIND_FULL, &wide, 1);
    cpr_part *p;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    const size_t per = 4096, batches = 48; /* 48 x ~1 MiB through 2 MiB of staging */
    uint64_t *ids = malloc(per * sizeof *ids);
    for (size_t b = 0; b < batches; b++) {
        tu_iota(ids, b * per, per);
        tu_batch tb;
        tu_batch_make(&tb, &wide, ids, per, 1);
        assert_status(CPR_OK, cpr_part_put_rows(p, &tb.batch));
        tu_batch_free(&tb);
        cpr_part_progress pr;
        cpr_part_progress_get(p, &pr);
        assert_int_equal(pr.rows_queued, (b + 1) * per);
        assert_true(pr.bytes_queued - pr.bytes_sent <= o.staging_bytes);
    }
    free(ids);
    assert_status(CPR_OK, cpr_part_commit(&p));
    cpr_restore_query q = {.job = "bp"};
    tu_rows rows;
    cpr_restore_result res;
    restore(c, &q, NULL, 0, &rows, &res);
    assert_int_equal(rows.n, per * batches);
    tu_assert_rows(rows.rows, &wide, 0, 1, per * batches, 1);
    tu_rows_free(&rows);
    cpr_client_close(c);
    tu_rmtree(dir);
    free(dir);
}

/* ---- many shards at once ---------------------------------------------------------------- */

typedef struct shard_writer {
    cpr_client *c;
    uint32_t shard, num_shards;
    cpr_status st;
    char why[512];
} shard_writer;

static void *write_shard(void *arg)
{
    shard_writer *w = arg;
    cpr_part_spec spec = tu_part("many", w->shard, w->num_shards, 1, CPR_KIND_FULL, tables, 2);
    cpr_part *p;
    w->st = cpr_client_begin(w->c, &spec, &p);
    if (w->st == CPR_OK) {
        w->st = put_rows(p, w->shard, w->num_shards, 4000 / w->num_shards, 1);
        cpr_status end = w->st ? cpr_part_abort(&p) : cpr_part_commit(&p);
        if (w->st == CPR_OK)
            w->st = end;
    }
    snprintf(w->why, sizeof w->why, "%s", cpr_errmsg());
    return NULL;
}

static void write_shards_concurrently(cpr_client *c, uint32_t n)
{
    pthread_t th[64];
    shard_writer w[64];
    for (uint32_t s = 0; s < n; s++) {
        w[s] = (shard_writer){c, s, n, CPR_OK, ""};
        assert_int_equal(pthread_create(&th[s], NULL, write_shard, &w[s]), 0);
    }
    for (uint32_t s = 0; s < n; s++) {
        pthread_join(th[s], NULL);
        if (w[s].st)
            fail_msg("shard %u: %s: %s", s, cpr_status_name(w[s].st), w[s].why);
    }
}

/* All of `job`'s rows as of `ckpt` in the modulo layout, in (table, row) order. */
static void assert_all_rows(cpr_client *c, const cpr_restore_query *q, uint64_t ckpt)
{
    tu_rows rows;
    restore(c, q, NULL, 0, &rows, NULL);
    assert_int_equal(rows.n, 8000);
    /* Several nodes answer in turn: sort back to (table, row). */
    for (size_t i = 0; i < rows.n; i++) {
        tu_row *r = &rows.rows[i];
        size_t t = r->table == 1 ? 0 : 1;
        tu_assert_row(r, &tables[t], r->id, ckpt);
    }
    uint8_t *seen = calloc(8000, 1);
    for (size_t i = 0; i < rows.n; i++) {
        size_t at = (rows.rows[i].table == 1 ? 0 : 4000) + rows.rows[i].id;
        assert_false(seen[at]);
        seen[at] = 1;
    }
    free(seen);
    tu_rows_free(&rows);
}

static void test_concurrent_shards(void **state)
{
    (void)state;
    ch_daemon d;
    char target[300];
    char *dir = ch_daemon_up(&d, target, sizeof target);
    cpr_client_options o = {.message_bytes = 16384, .staging_bytes = 4u << 20};
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    write_shards_concurrently(c, 16);
    uint64_t cut;
    assert_status(CPR_OK, cpr_client_latest_cut(c, "many", &cut));
    assert_int_equal(cut, 1);
    cpr_restore_query q = {.job = "many", .consistent = 1};
    assert_all_rows(c, &q, 1);
    cpr_client_close(c);
    ch_daemon_down(&d, dir);
}

/* ---- the sender pool (part.c P8) -------------------------------------------------------- */

/* The client's sender threads now: threads of this process named
 * "cpr-sender" (the store's own threads come and go as they please). */
static size_t senders_now(void)
{
    DIR *d = opendir("/proc/self/task");
    size_t n = 0;
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[300], comm[32] = "";
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* ended meanwhile */
        if (fgets(comm, sizeof comm, f))
            n += strcmp(comm, "cpr-sender\n") == 0;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* After threads were joined: their tasks leave /proc a moment after the
 * join returns (the kernel releases them after waking the joiner), so the
 * count is read until it is `want`, for at most 10 s. */
static void assert_senders_become(size_t want)
{
    size_t n = senders_now();
    for (double t0 = now_s(); n != want && now_s() - t0 < 10; n = senders_now())
        sched_yield();
    assert_int_equal(n, want);
}

/* Parts take their sender from the client's pool: parts one after another
 * share one thread, more parts at once than the pool keeps idle (64) leave
 * it at 64 idle, and close joins every one. Every part commits its rows. */
static void test_sender_pool(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-client");
    char target[512];
    snprintf(target, sizeof target, "local://%s/store", dir);
    assert_senders_become(0); /* the earlier tests' clients are closed */
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, &(cpr_client_options){0}, &c));
    cpr_part *p = NULL;
    cpr_part_spec spec = tu_part("pool", 0, 1, 1, CPR_KIND_FULL, tables, 2);
    assert_status(CPR_OK, cpr_client_begin_async(c, &spec, &p));
    assert_status(CPR_OK, put_rows(p, 0, 1, 100, 1));
    assert_status(CPR_OK, cpr_part_commit(&p));
    assert_int_equal(senders_now(), 1); /* idle, kept for the next part */
    for (uint64_t ckpt = 2; ckpt <= 21; ckpt++) {
        spec = tu_part("pool", 0, 1, ckpt, CPR_KIND_FULL, tables, 2);
        assert_status(CPR_OK, cpr_client_begin_async(c, &spec, &p));
        assert_status(CPR_OK, put_rows(p, 0, 1, 100, ckpt));
        assert_status(CPR_OK, cpr_part_commit(&p));
        assert_int_equal(senders_now(), 1);
    }
    enum { MANY = 80 };
    cpr_part *parts[MANY];
    for (uint32_t s = 0; s < MANY; s++) {
        spec = tu_part("pool-many", s, MANY, 1, CPR_KIND_FULL, tables, 2);
        assert_status(CPR_OK, cpr_client_begin(c, &spec, &parts[s]));
        assert_status(CPR_OK, put_rows(parts[s], s, MANY, 10, 1));
    }
    assert_int_equal(senders_now(), MANY);
    for (uint32_t s = 0; s < MANY; s++)
        assert_status(CPR_OK, cpr_part_commit(&parts[s]));
    /* 64 idle; the other 16 left the pool and are joined by the next begin. */
    spec = tu_part("pool", 0, 1, 22, CPR_KIND_FULL, tables, 2);
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_senders_become(64);
    assert_status(CPR_OK, cpr_part_abort(&p));
    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_client_list(c, "pool-many", &info, &n));
    assert_int_equal(n, MANY);
    for (size_t i = 0; i < n; i++)
        assert_true(info[i].committed && info[i].rows == 20);
    free(info);
    assert_status(CPR_OK, cpr_client_list(c, "pool", &info, &n));
    assert_int_equal(n, 21);
    free(info);
    cpr_client_close(c);
    assert_senders_become(0);
    tu_rmtree(dir);
    free(dir);
}

/* ---- a job spread over two daemons ------------------------------------------------------- */

static void test_two_daemons(void **state)
{
    (void)state;
    char *dir[2] = {tu_mkdtemp("cpr-client"), tu_mkdtemp("cpr-client")};
    ch_daemon d[2];
    char target[600], reversed[600], alone[2][300];
    for (int i = 0; i < 2; i++) {
        ch_start(&d[i], dir[i]);
        snprintf(alone[i], sizeof alone[i], "grpc://%s", d[i].addr);
    }
    snprintf(target, sizeof target, "grpc://%s,%s", d[0].addr, d[1].addr);
    snprintf(reversed, sizeof reversed, "grpc://%s,%s", d[1].addr, d[0].addr);
    cpr_client *c, *rc, *node[2];
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    assert_status(CPR_OK, cpr_client_open(reversed, NULL, &rc));
    for (int i = 0; i < 2; i++)
        assert_status(CPR_OK, cpr_client_open(alone[i], NULL, &node[i]));
    assert_int_equal(cpr_client_nodes(c), 2);

    /* Placement: stable whatever the order of the list, and both nodes used. */
    const uint32_t n = 16;
    size_t on[2] = {0, 0};
    for (uint32_t s = 0; s < n; s++) {
        size_t a = cpr_client_node_of(c, "spread", s), b = cpr_client_node_of(rc, "spread", s);
        assert_int_equal(a, 1 - b);
        on[a]++;
    }
    assert_true(on[0] > 0 && on[1] > 0);

    write_shards_concurrently(c, n); /* job "many", checkpoint 1 */
    for (uint32_t s = 0; s < n; s++)
        write_part(c, "spread", s, n, 1, CPR_KIND_FULL, 4000 / n);
    /* Checkpoint 2 of every shard but 5: not a cut yet. */
    for (uint32_t s = 0; s < n; s++)
        if (s != 5)
            write_part(c, "spread", s, n, 2, CPR_KIND_FULL, 4000 / n);
    uint64_t cut;
    assert_status(CPR_OK, cpr_client_latest_cut(c, "spread", &cut));
    assert_int_equal(cut, 1);
    /* Each node holds exactly the shards placed on it, and alone sees no cut. */
    for (int i = 0; i < 2; i++) {
        cpr_part_info *parts;
        size_t k;
        assert_status(CPR_OK, cpr_client_list(node[i], "spread", &parts, &k));
        for (size_t j = 0; j < k; j++)
            assert_int_equal(cpr_client_node_of(c, "spread", parts[j].shard), (size_t)i);
        free(parts);
        assert_status(CPR_NOT_FOUND, cpr_client_latest_cut(node[i], "spread", &cut));
    }
    write_part(c, "spread", 5, n, 2, CPR_KIND_FULL, 4000 / n);
    assert_status(CPR_OK, cpr_client_latest_cut(c, "spread", &cut));
    assert_int_equal(cut, 2);

    cpr_restore_query q = {.job = "spread", .consistent = 1};
    assert_all_rows(c, &q, 2);
    q = (cpr_restore_query){.job = "many", .consistent = 1};
    assert_all_rows(c, &q, 1);
    /* One shard's rows, asking only its node (the other is not needed). */
    uint32_t shard = 5;
    tu_rows rows;
    q = (cpr_restore_query){.job = "spread", .as_of = 1, .modulo = n, .remainder = 5};
    restore(c, &q, &shard, 1, &rows, NULL);
    assert_int_equal(rows.n, 2 * 4000 / n);
    tu_assert_rows(rows.rows, &tables[0], 5, n, 4000 / n, 1);
    tu_rows_free(&rows);
    assert_blob(c, "spread", 5, 2, 70005);
    assert_blob(c, "spread", 11, 1, 70011);

    /* A job written through one node alone, read through both: shards that
     * now hash to the other node are refused, not merged silently. */
    for (uint32_t s = 0; s < n; s++)
        write_part(node[0], "moved", s, n, 1, CPR_KIND_FULL, 4000 / n);
    q = (cpr_restore_query){.job = "moved", .consistent = 1};
    memset(&rows, 0, sizeof rows);
    assert_status(CPR_FAILED_PRECONDITION,
                  cpr_client_restore(c, &q, NULL, 0, tu_collect, &rows, NULL));
    assert_non_null(strstr(cpr_errmsg(), "set of nodes changed"));
    assert_status(CPR_FAILED_PRECONDITION, cpr_client_latest_cut(c, "moved", &cut));
    assert_all_rows(node[0], &q, 1); /* the target it was written with still works */

    /* Retention over both nodes: keep one cut (2); as of 1 is gone. */
    cpr_gc_report gr;
    assert_status(CPR_OK, cpr_client_gc(c, "spread", 1, &gr));
    assert_int_equal(gr.floor, 2);
    assert_true(gr.parts_removed >= n);
    q = (cpr_restore_query){.job = "spread", .as_of = 1};
    memset(&rows, 0, sizeof rows);
    assert_int_equal(cpr_client_restore(c, &q, NULL, 0, tu_collect, &rows, NULL),
                     CPR_FAILED_PRECONDITION);
    tu_rows_free(&rows);
    q = (cpr_restore_query){.job = "spread", .consistent = 1};
    assert_all_rows(c, &q, 2);
    cpr_verify_report vr;
    assert_status(CPR_OK, cpr_client_verify(c, NULL, NULL, NULL, &vr));
    assert_true(vr.rows_checked >= 2 * 8000);
    cpr_store_stats st;
    assert_status(CPR_OK, cpr_client_stats(c, &st));
    assert_int_equal(st.parts_committed, n /* many */ + n /* spread at 2 */ + n /* moved */);

    cpr_client_close(c);
    cpr_client_close(rc);
    for (int i = 0; i < 2; i++) {
        cpr_client_close(node[i]);
        ch_stop(&d[i]);
        tu_rmtree(dir[i]);
        free(dir[i]);
    }
}

static int row_order(const void *a, const void *b)
{
    const tu_row *x = a, *y = b;
    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Every row of both tables restored once, ascending, rows below `moved` as
 * of checkpoint 2 and the others as of 1. */
static void assert_resharded_rows(const tu_rows *rows, uint64_t moved)
{
    assert_int_equal(rows->n, 2 * 4000);
    for (size_t i = 0; i < rows->n; i++) {
        const cpr_table_schema *t = &tables[i / 4000];
        uint64_t id = i % 4000;
        tu_assert_row(&rows->rows[i], t, id, id < moved ? 2 : 1);
    }
}

/* A job resharded 4 -> 2 over two daemons: the rows the 2-shard layout saved
 * again (a PRIORITY part of each new shard) have their old version on the
 * other node, for rows of both new shards. Whatever the order of the
 * nodes, the restore merges by version: each row once, its newest. */
static void test_resharded_over_two_daemons(void **state)
{
    (void)state;
    char *dir[2] = {tu_mkdtemp("cpr-client"), tu_mkdtemp("cpr-client")};
    ch_daemon d[2];
    char target[600], reversed[600];
    for (int i = 0; i < 2; i++)
        ch_start(&d[i], dir[i]);
    snprintf(target, sizeof target, "grpc://%s,%s", d[0].addr, d[1].addr);
    snprintf(reversed, sizeof reversed, "grpc://%s,%s", d[1].addr, d[0].addr);
    cpr_client *c, *rc;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    assert_status(CPR_OK, cpr_client_open(reversed, NULL, &rc));
    /* A job name whose new shard 0 (rows 0, 2, ...) is on the node of old
     * shard 0 but not of old shard 2, and new shard 1 on the other node,
     * not the one of old shard 3: rows 2 mod 4 are new on one node, rows 3
     * mod 4 on the other, each with the old version on the other node. */
    char job[64] = "";
    for (int k = 0; k < 10000 && !job[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "reshard-%d", k);
        size_t n0 = cpr_client_node_of(c, name, 0), n1 = cpr_client_node_of(c, name, 1);
        if (n0 != n1 && cpr_client_node_of(c, name, 2) != n0 &&
            cpr_client_node_of(c, name, 3) != n1)
            snprintf(job, sizeof job, "%s", name);
    }
    assert_true(job[0] != 0);
    for (uint32_t s = 0; s < 4; s++)
        write_part(c, job, s, 4, 1, CPR_KIND_FULL, 1000); /* rows s, s + 4, ... */
    for (uint32_t s = 0; s < 2; s++)
        write_part(c, job, s, 2, 2, CPR_KIND_PRIORITY, 500); /* rows s, s + 2, ... < 1000 */

    cpr_client *clients[2] = {c, rc};
    for (int k = 0; k < 2; k++) {
        tu_rows rows;
        cpr_restore_result res;
        cpr_restore_query q = {.job = job};
        restore(clients[k], &q, NULL, 0, &rows, &res);
        assert_resharded_rows(&rows, 1000);
        assert_int_equal(res.as_of, 2);
        assert_int_equal(res.rows, 8000);
        tu_rows_free(&rows);
        /* Small batches: runs and single rows cross batch ends. */
        q.batch_rows = 7;
        restore(clients[k], &q, NULL, 0, &rows, &res);
        assert_resharded_rows(&rows, 1000);
        tu_rows_free(&rows);
        /* As of 1 the job had one sharding: everything as written then,
         * node after node (each node's rows ascending). */
        q = (cpr_restore_query){.job = job, .as_of = 1};
        restore(clients[k], &q, NULL, 0, &rows, &res);
        qsort(rows.rows, rows.n, sizeof *rows.rows, row_order);
        assert_resharded_rows(&rows, 0);
        tu_rows_free(&rows);
        /* Into a table buffer, as the recovery executor restores. */
        const cpr_table_schema *t = &tables[0];
        float *values = calloc(4000 * t->dim, sizeof *values);
        float *st = calloc(4000 * t->state_dim, sizeof *st);
        cpr_restore_into into = {.table = t->table, .row_base = 0, .n_rows = 4000,
                                 .dim = t->dim, .state_dim = t->state_dim, .values = values,
                                 .state = st};
        q = (cpr_restore_query){.job = job};
        assert_status(CPR_OK, cpr_client_restore_table(clients[k], &q, NULL, 0, &into, &res));
        for (uint64_t r = 0; r < 4000; r++)
            for (uint32_t e = 0; e < t->dim; e++)
                if (tu_float_bits(values[r * t->dim + e]) !=
                    tu_float_bits(tu_value(t->table, r, r < 1000 ? 2 : 1, e)))
                    fail_msg("row %llu element %u is not its newest version",
                             (unsigned long long)r, e);
        free(values);
        free(st);
    }

    /* Retention hides a resharding: 4 FULLs at 1, 2 FULLs at 2, keep one
     * cut. The old shards' rows stay in folds that List does not show, on
     * nodes that hold no part of the 2-shard layout; every row still comes
     * once, as of 2. */
    char gcjob[80];
    snprintf(gcjob, sizeof gcjob, "%s-gc", job);
    for (uint32_t s = 0; s < 4; s++)
        write_part(c, gcjob, s, 4, 1, CPR_KIND_FULL, 1000);
    for (uint32_t s = 0; s < 2; s++)
        write_part(c, gcjob, s, 2, 2, CPR_KIND_FULL, 2000);
    cpr_gc_report gr;
    assert_status(CPR_OK, cpr_client_gc(c, gcjob, 1, &gr));
    assert_int_equal(gr.floor, 2);
    for (int k = 0; k < 2; k++) {
        tu_rows rows;
        cpr_restore_result res;
        cpr_restore_query q = {.job = gcjob};
        restore(clients[k], &q, NULL, 0, &rows, &res);
        assert_resharded_rows(&rows, 4000);
        tu_rows_free(&rows);
        q.consistent = 1;
        restore(clients[k], &q, NULL, 0, &rows, &res);
        assert_resharded_rows(&rows, 4000);
        assert_int_equal(res.as_of, 2);
        tu_rows_free(&rows);
    }

    /* Retention where one node holds only shards the job no longer has:
     * 2 shards at 1, then 1 shard at 2. The floor (2) is
     * above every part of shard 1's node; that node takes it too (the gc's
     * floor is a cut over both, GcRequest.floor_is_cut), folds shard 1 and
     * drops its part, so as of 1 is refused there as everywhere, and every
     * row still restores at its newest version. */
    char oldjob[80] = "";
    for (int k = 0; k < 10000 && !oldjob[0]; k++) {
        char name[80];
        snprintf(name, sizeof name, "%s-old-%d", job, k);
        if (cpr_client_node_of(c, name, 0) != cpr_client_node_of(c, name, 1))
            snprintf(oldjob, sizeof oldjob, "%s", name);
    }
    for (uint32_t s = 0; s < 2; s++)
        write_part(c, oldjob, s, 2, 1, CPR_KIND_FULL, 2000);
    write_part(c, oldjob, 0, 1, 2, CPR_KIND_FULL, 4000);
    assert_status(CPR_OK, cpr_client_gc(c, oldjob, 1, &gr));
    assert_int_equal(gr.floor, 2);
    assert_int_equal(gr.parts_removed, 2);
    for (int k = 0; k < 2; k++) {
        tu_rows rows;
        cpr_restore_result res;
        cpr_restore_query q = {.job = oldjob};
        restore(clients[k], &q, NULL, 0, &rows, &res);
        assert_resharded_rows(&rows, 4000);
        tu_rows_free(&rows);
        uint32_t one = 1;
        q.as_of = 1;
        memset(&rows, 0, sizeof rows);
        assert_status(CPR_FAILED_PRECONDITION,
                      cpr_client_restore(clients[k], &q, &one, 1, tu_collect, &rows, NULL));
        tu_rows_free(&rows);
    }

    cpr_client_close(c);
    cpr_client_close(rc);
    for (int i = 0; i < 2; i++) {
        ch_stop(&d[i]);
        tu_rmtree(dir[i]);
        free(dir[i]);
    }
}

/* ---- faults -------------------------------------------------------------------------------- */

static void test_daemon_killed_mid_part(void **state)
{
    (void)state;
    ch_daemon d;
    char target[300];
    char *dir = ch_daemon_up(&d, target, sizeof target);
    cpr_client_options o = {.backoff_s = 0.01, .retries = 2, .call_timeout_s = 5};
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    write_part(c, "kill", 0, 1, 1, CPR_KIND_FULL, 4000);
    cpr_part_spec spec = tu_part("kill", 0, 1, 2, CPR_KIND_FULL, tables, 2);
    cpr_part *p;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_status(CPR_OK, put_rows(p, 0, 1, 2000, 2));
    int held = ch_kill_held(&d); /* no other daemon answers there */
    cpr_status st = put_rows(p, 2000, 1, 2000, 2); /* may still be staged: OK or failed */
    assert_true(st == CPR_OK || st == CPR_UNAVAILABLE);
    st = cpr_part_commit(&p);
    assert_int_equal(st, CPR_UNAVAILABLE);
    assert_true(strlen(cpr_errmsg()) > 0);
    /* A node that is down: Begin retries, then says so. */
    assert_status(CPR_UNAVAILABLE, cpr_client_begin(c, &spec, &p));
    cpr_client_close(c);
    close(held);

    /* Restart on the same data: the committed part intact, the other gone. */
    ch_start(&d, dir);
    snprintf(target, sizeof target, "grpc://%s", d.addr);
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    cpr_part_info *parts;
    size_t n;
    assert_status(CPR_OK, cpr_client_list(c, "kill", &parts, &n));
    assert_int_equal(n, 1);
    assert_int_equal(parts[0].checkpoint, 1);
    free(parts);
    cpr_restore_query q = {.job = "kill"};
    tu_rows rows;
    restore(c, &q, NULL, 0, &rows, NULL);
    assert_int_equal(rows.n, 8000);
    tu_assert_rows(rows.rows, &tables[0], 0, 1, 4000, 1);
    tu_rows_free(&rows);
    write_part(c, "kill", 0, 1, 2, CPR_KIND_FULL, 4000); /* the save is retried: fine */
    cpr_client_close(c);
    ch_daemon_down(&d, dir);
}

typedef struct stats_poll {
    cpr_client *c;
    cpr_store_stats st;
} stats_poll;

static int got_4_mib(void *ctx)
{
    stats_poll *p = ctx;
    assert_status(CPR_OK, cpr_client_stats(p->c, &p->st));
    return p->st.bytes_in >= (4u << 20);
}

static int no_part_open(void *ctx)
{
    stats_poll *p = ctx;
    assert_status(CPR_OK, cpr_client_stats(p->c, &p->st));
    return p->st.parts_open == 0;
}

/* A child process streams a large part through the library; it is killed
 * with SIGKILL once the daemon has received some of it. */
static void test_client_killed_mid_stream(void **state)
{
    (void)state;
    ch_daemon d;
    char target[300];
    char *dir = ch_daemon_up(&d, target, sizeof target);
    /* The writer is this program run again (a fresh process: gRPC does not
     * survive fork() in a process that has used it). */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        execl("/proc/self/exe", "test_client", "--vanishing-writer", target, (char *)NULL);
        _exit(127);
    }
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    stats_poll sp = {c, {0}};
    assert_true(ch_poll(got_4_mib, &sp, 30)); /* 20 ms apart: the writer needs the cores */
    assert_int_equal(sp.st.parts_open, 1);
    kill(child, SIGKILL);
    int wstatus;
    assert_int_equal(waitpid(child, &wstatus, 0), child);
    /* The daemon notices the broken stream and aborts the part. */
    assert_true(ch_poll(no_part_open, &sp, 30));
    assert_int_equal(sp.st.parts_open, 0);
    assert_int_equal(sp.st.parts_committed, 0);
    cpr_part_info *parts;
    size_t n;
    assert_status(CPR_NOT_FOUND, cpr_client_list(c, "vanish", &parts, &n));
    write_part(c, "vanish", 0, 1, 1, CPR_KIND_FULL, 4000); /* the daemon still serves */
    cpr_client_close(c);
    ch_daemon_down(&d, dir);
}

/* The child of test_client_killed_mid_stream: a part that never ends. */
static int vanishing_writer(const char *target)
{
    cpr_client *c;
    cpr_part *p;
    cpr_part_spec spec = tu_part("vanish", 0, 1, 1, CPR_KIND_FULL, tables, 2);
    if (cpr_client_open(target, NULL, &c) || cpr_client_begin(c, &spec, &p))
        return 3;
    for (;;) /* rows 0..3999 over and over until killed */
        if (put_rows(p, 0, 1, 4000, 1))
            return 4;
}

/* ---- range batches and gathers from the caller's table ------------------------------------ */

/* Table 1 (dim 8, state 1) held by "the trainer" as rows of 12 floats:
 * 8 values, 1 state, 3 of padding; row r is at trainer[(r - 100) * 12]. */
#define G_STRIDE 12
#define G_BASE 100
static float g_value(uint64_t row, uint32_t j) { return (float)row * 10.0f + (float)j; }

static void ranges_and_gathers(const char *target)
{
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    size_t rows = 3000;
    float *trainer = calloc(rows * G_STRIDE, sizeof(float));
    for (uint64_t r = 0; r < rows; r++) {
        for (uint32_t j = 0; j < 8; j++)
            trainer[r * G_STRIDE + j] = g_value(r + G_BASE, j);
        trainer[r * G_STRIDE + 8] = -(float)(r + G_BASE);
    }
    /* Checkpoint 1: a FULL of table 2 as one range batch (no ids array) and
     * rows [100, 1100) of table 1 as a range gather. Checkpoint 2: a DELTA
     * of table 1 gathered by ids in no particular order. */
    cpr_part_spec spec = tu_part("gather", 0, 1, 1, CPR_KIND_FULL, tables, 2);
    cpr_part *p = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    float *dense = malloc(sizeof(float) * 4000 * 3);
    for (size_t i = 0; i < 4000 * 3; i++)
        dense[i] = (float)i;
    cpr_row_batch range = {.table = 2, .n = 4000, .range_begin = 0, .values = dense,
                           .values_count = 4000 * 3};
    assert_status(CPR_OK, cpr_part_put_rows(p, &range));
    cpr_row_batch beyond = range;
    beyond.n = 1;
    beyond.range_begin = 4000; /* the table has 4000 rows */
    beyond.values_count = 3;
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_put_rows(p, &beyond));
    cpr_gather g = {.table = 1, .n = 1000, .range_begin = G_BASE, .row_base = G_BASE,
                    .values = trainer, .values_stride = G_STRIDE, .state = trainer + 8,
                    .state_stride = G_STRIDE};
    assert_status(CPR_OK, cpr_part_put_gather(p, &g));
    cpr_gather below = g;
    below.range_begin = G_BASE - 1;
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_put_gather(p, &below));
    cpr_gather narrow = g;
    narrow.values_stride = 7;
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_put_gather(p, &narrow));
    assert_status(CPR_OK, cpr_part_commit(&p));

    uint64_t ids[] = {2500, 150, 3099, 1200, 100};
    for (size_t i = 0; i < 5; i++) /* the trainer updated these rows */
        trainer[(ids[i] - G_BASE) * G_STRIDE] = 0.5f;
    spec = tu_part("gather", 0, 1, 2, CPR_KIND_DELTA, tables, 2);
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    g = (cpr_gather){.table = 1, .n = 5, .ids = ids, .row_base = G_BASE, .values = trainer,
                     .values_stride = G_STRIDE, .state = trainer + 8, .state_stride = G_STRIDE};
    assert_status(CPR_OK, cpr_part_put_gather(p, &g));
    assert_status(CPR_OK, cpr_part_commit(&p));

    /* Everything back as of 2, value by value. */
    float *v1 = calloc(4000 * 8, sizeof(float)), *s1 = calloc(4000, sizeof(float));
    float *v2 = calloc(4000 * 3, sizeof(float));
    uint8_t *got = calloc(4000, 1);
    cpr_restore_query q = {.job = "gather", .as_of = 2};
    cpr_restore_into into1 = {1, 0, 4000, 8, 1, v1, s1, got};
    cpr_restore_into into2 = {2, 0, 4000, 3, 0, v2, NULL, NULL};
    cpr_restore_result res;
    assert_status(CPR_OK, cpr_client_restore_table(c, &q, NULL, 0, &into1, &res));
    assert_int_equal(res.as_of, 2);
    assert_int_equal(res.rows, 1000 + 3); /* of the 5 ids, 150 and 100 are in the range */
    assert_status(CPR_OK, cpr_client_restore_table(c, &q, NULL, 0, &into2, &res));
    assert_int_equal(res.rows, 4000);
    assert_memory_equal(v2, dense, sizeof(float) * 4000 * 3);
    for (uint64_t r = 0; r < 4000; r++) {
        int in_range = r >= G_BASE && r < G_BASE + 1000;
        int updated = r == 2500 || r == 150 || r == 3099 || r == 1200 || r == 100;
        assert_int_equal(got[r], in_range || updated);
        if (!got[r])
            continue;
        for (uint32_t j = 0; j < 8; j++) {
            float want = updated && j == 0 ? 0.5f : g_value(r, j);
            if (v1[r * 8 + j] != want)
                fail_msg("row %llu value %u: %g, want %g", (unsigned long long)r, j,
                         (double)v1[r * 8 + j], (double)want);
        }
        assert_true(s1[r] == -(float)r);
    }
    free(v1);
    free(s1);
    free(v2);
    free(got);
    free(dense);
    free(trainer);
    cpr_client_close(c);
}

/* A check over both transports (ch_each_transport). */
typedef struct check {
    void (*fn)(const char *target);
} check;

static void run_check(const char *target, void *ctx)
{
    ((check *)ctx)->fn(target);
}

static void on_both_transports(void (*fn)(const char *target))
{
    check c = {fn};
    ch_each_transport(run_check, &c);
}

static void test_ranges_and_gathers(void **state)
{
    (void)state;
    on_both_transports(ranges_and_gathers);
}

/* ---- sharp edges: abort by id, num_shards, the checkpoint a restore used ------------------ */

static cpr_status edges_rows(void *ctx, const cpr_row_batch *b)
{
    (void)ctx;
    (void)b;
    return CPR_OK;
}

static void sharp_edges(const char *target)
{
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    /* num_shards 0 is refused the same way on every transport. */
    cpr_part_spec spec = tu_part("edges", 0, 1, 5, CPR_KIND_FULL, tables, 2);
    spec.num_shards = 0;
    cpr_part *p = NULL;
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_begin(c, &spec, &p));
    assert_non_null(strstr(cpr_errmsg(), "num_shards is 0"));
    /* NULL arrays with counts, a batch over the wire's limit, NULL handles:
     * refused or zero, never a crash. */
    cpr_restore_query bad = {.job = "edges", .n_tables = 2};
    cpr_restore_result rr;
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_restore(c, &bad, NULL, 0, edges_rows, NULL,
                                                           &rr));
    assert_non_null(strstr(cpr_errmsg(), "query->tables is NULL with n_tables 2"));
    bad = (cpr_restore_query){.job = "edges", .n_ranges = 1};
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_restore(c, &bad, NULL, 0, edges_rows, NULL,
                                                           &rr));
    assert_non_null(strstr(cpr_errmsg(), "query->ranges is NULL"));
    bad = (cpr_restore_query){.job = "edges", .batch_rows = ((size_t)1 << 32) + 1};
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_restore(c, &bad, NULL, 0, edges_rows, NULL,
                                                           &rr));
    assert_int_equal(cpr_client_nodes(NULL), 0);
    assert_int_equal(cpr_client_node_of(NULL, "edges", 0), 0);
    cpr_part_progress pg;
    cpr_part_progress_get(NULL, &pg);
    assert_int_equal(pg.error, CPR_INVALID_ARGUMENT);

    /* An abandoned open part blocks its id until it is aborted by id. */
    spec.num_shards = 1;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_status(CPR_OK, put_rows(p, 0, 1, 50, 5));
    cpr_part *again = NULL;
    assert_status(CPR_ALREADY_EXISTS, cpr_client_begin(c, &spec, &again));
    assert_status(CPR_OK, cpr_client_abort(c, "edges", 0, 5));
    assert_status(CPR_OK, cpr_client_abort(c, "edges", 0, 5)); /* nothing left: still OK */
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &again));
    assert_status(CPR_OK, put_rows(again, 0, 1, 100, 5));
    assert_status(CPR_OK, cpr_part_commit(&again));
    /* The first writer's handle is still valid; its commit fails, not crashes. */
    assert_true(cpr_part_commit(&p) != CPR_OK);
    assert_null(p);
    /* A committed part is never aborted. */
    assert_status(CPR_FAILED_PRECONDITION, cpr_client_abort(c, "edges", 0, 5));

    /* A restore reports the checkpoint it used: the newest at or below as_of. */
    cpr_restore_query q = {.job = "edges", .as_of = 9, .tables = &tables[1].table,
                           .n_tables = 1};
    float *v = calloc(4000 * 3, sizeof(float));
    cpr_restore_into into = {2, 0, 4000, 3, 0, v, NULL, NULL};
    cpr_restore_result res;
    assert_status(CPR_OK, cpr_client_restore_table(c, &q, NULL, 0, &into, &res));
    assert_int_equal(res.as_of, 5);
    assert_int_equal(res.rows, 100);
    q.as_of = 4;
    assert_status(CPR_NOT_FOUND, cpr_client_restore_table(c, &q, NULL, 0, &into, &res));
    assert_non_null(strstr(cpr_errmsg(), "at or below checkpoint 4"));
    /* A callback's error keeps its message on every transport. */
    cpr_restore_into narrow = {2, 0, 10, 3, 0, v, NULL, NULL};
    q.as_of = 0;
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_restore_table(c, &q, NULL, 0, &narrow, &res));
    assert_non_null(strstr(cpr_errmsg(), "outside"));
    free(v);
    cpr_client_close(c);
}

static void test_sharp_edges(void **state)
{
    (void)state;
    on_both_transports(sharp_edges);
}

/* ---- cpr_client_begin_async: Begin off the caller's thread ---------------------------- */

static void async_begin(const char *target)
{
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    cpr_part_spec spec = tu_part("async", 0, 1, 3, CPR_KIND_FULL, tables, 2);
    cpr_part *p = NULL;
    /* Local checks still fail at once. */
    spec.num_shards = 0;
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_begin_async(c, &spec, &p));
    spec.num_shards = 1;
    /* So do the tables' (rows would be staged in blocks sized by them
     * before the node could refuse them). */
    cpr_table_schema bad[2] = {tables[0], tables[1]};
    cpr_part_spec bad_spec = spec;
    bad_spec.tables = bad;
    const struct { uint32_t dim, state_dim, table1; } cases[] = {
        {0, 0, 1}, {65537, 0, 1}, {8, 65537, 1}, {8, 1, 0 /* table 0 twice */}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bad[0].dim = cases[i].dim;
        bad[0].state_dim = cases[i].state_dim;
        bad[1].table = cases[i].table1 ? tables[1].table : bad[0].table;
        assert_status(CPR_INVALID_ARGUMENT, cpr_client_begin_async(c, &bad_spec, &p));
        assert_null(p);
        assert_status(CPR_INVALID_ARGUMENT, cpr_client_begin(c, &bad_spec, &p));
        assert_null(p);
    }
    /* Puts right away; the sender begins the part first. */
    assert_status(CPR_OK, cpr_client_begin_async(c, &spec, &p));
    assert_status(CPR_OK, put_rows(p, 0, 1, 300, 3));
    assert_status(CPR_OK, cpr_part_commit(&p));
    /* What the node refuses fails the part, not the call; and a part the
     * node never began is not aborted there: another writer's open part of
     * the same id survives the failed one. */
    assert_status(CPR_OK, cpr_client_begin_async(c, &spec, &p));
    cpr_status st = cpr_part_commit(&p);
    assert_true(st == CPR_ALREADY_EXISTS || st == CPR_FAILED_PRECONDITION);
    spec = tu_part("async", 0, 1, 4, CPR_KIND_FULL, tables, 2);
    cpr_part *first = NULL, *second = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &first));
    assert_status(CPR_OK, cpr_client_begin_async(c, &spec, &second));
    assert_status(CPR_ALREADY_EXISTS, cpr_part_commit(&second));
    assert_status(CPR_OK, put_rows(first, 0, 1, 100, 4));
    assert_status(CPR_OK, cpr_part_commit(&first));
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_client_list(c, "async", &parts, &n));
    assert_int_equal(n, 2);
    assert_int_equal(parts[0].rows, 600);
    assert_int_equal(parts[1].rows, 200);
    free(parts);
    cpr_client_close(c);
}

static void test_async_begin(void **state)
{
    (void)state;
    on_both_transports(async_begin);
}

/* ---- defer_send: puts are a pure copy until commit ------------------------------------- */

static void deferred_send(const char *target)
{
    /* Staging of 4 MiB: a part of ~1.3 MB stays held until commit; a part of
     * ~13 MB does not fit, and its puts release it instead of waiting for ever. */
    cpr_client_options o = {.staging_bytes = 4u << 20, .defer_send = 1};
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    cpr_part_spec spec = tu_part("defer", 0, 1, 1, CPR_KIND_FULL, tables, 2);
    cpr_part *p = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_status(CPR_OK, put_rows(p, 0, 1, 4000, 1));
    cpr_part_progress prog;
    cpr_part_progress_get(p, &prog);
    assert_int_equal(prog.rows_queued, 8000);
    assert_int_equal(prog.rows_sent, 0); /* held: nothing sent before the commit */
    assert_status(CPR_OK, cpr_part_commit(&p));

    static const cpr_table_schema wide = {7, 1u << 20, 64, 0};
    spec = tu_part("defer", 0, 1, 2, CPR_KIND_PRIORITY, &wide, 1);
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    size_t n = 50000;
    uint64_t *ids = malloc(n * sizeof *ids);
    float *vals = calloc(n * 64, sizeof(float));
    for (size_t i = 0; i < n; i++) {
        ids[i] = i * 3;
        vals[i * 64] = (float)i;
    }
    cpr_row_batch b = {.table = 7, .n = n, .ids = ids, .values = vals, .values_count = n * 64};
    assert_status(CPR_OK, cpr_part_put_rows(p, &b)); /* 12.8 MB through 4 MiB: no deadlock */
    assert_status(CPR_OK, cpr_part_commit(&p));

    /* One thread, two held parts: the first fills staging, and a put to the
     * second must release the first rather than wait for ever. */
    cpr_part_spec s0 = tu_part("defer2", 0, 2, 1, CPR_KIND_PRIORITY, &wide, 1);
    cpr_part_spec s1 = tu_part("defer2", 1, 2, 1, CPR_KIND_PRIORITY, &wide, 1);
    cpr_part *p0 = NULL, *p1 = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &s0, &p0));
    assert_status(CPR_OK, cpr_client_begin(c, &s1, &p1));
    cpr_row_batch b0 = b;
    b0.n = 15000; /* 3.8 MB: staging is then nearly full */
    b0.values_count = b0.n * 64;
    assert_status(CPR_OK, cpr_part_put_rows(p0, &b0));
    assert_status(CPR_OK, cpr_part_put_rows(p1, &b));
    assert_status(CPR_OK, cpr_part_commit(&p1));
    assert_status(CPR_OK, cpr_part_commit(&p0));
    cpr_part_info *parts = NULL;
    size_t np = 0;
    assert_status(CPR_OK, cpr_client_list(c, "defer", &parts, &np));
    assert_int_equal(np, 2);
    assert_int_equal(parts[0].rows, 8000);
    assert_int_equal(parts[1].rows, n);
    free(parts);
    assert_status(CPR_OK, cpr_client_list(c, "defer2", &parts, &np));
    assert_int_equal(np, 2);
    assert_int_equal(parts[0].rows, 15000);
    assert_int_equal(parts[1].rows, n);
    free(parts);
    free(ids);
    free(vals);
    cpr_client_close(c);
}

static void test_deferred_send(void **state)
{
    (void)state;
    on_both_transports(deferred_send);
}


/* A quantized block stored by the store comes back through ckptd as it is on
 * disk, and the client decodes it: the caller gets f32 rows within half a
 * step, state exact, from cpr_client_restore and cpr_client_restore_table. */
typedef struct qrows {
    uint64_t n;
    float values[64 * 8];
    float state[64];
    uint64_t ids[64];
} qrows;

static cpr_status keep_qrows(void *ctx, const cpr_row_batch *b)
{
    qrows *q = ctx;
    for (size_t i = 0; i < b->n && q->n < 64; i++, q->n++) {
        q->ids[q->n] = b->ids[i];
        memcpy(q->values + q->n * 8, b->values + i * 8, 8 * sizeof(float));
        q->state[q->n] = b->state[i];
    }
    return CPR_OK;
}

static void test_grpc_decodes_quantized_blocks(void **state)
{
    (void)state;
    enum { N = 40, DIM = 8 };
    static const cpr_table_schema t = {.table = 2, .rows = 1000, .dim = DIM, .state_dim = 1};
    char *dir = tu_mkdtemp("cpr-quant");
    cpr_store *store = NULL;
    assert_int_equal(cpr_store_open(dir, NULL, &store), CPR_OK);
    cpr_part_spec spec = tu_part("q", 0, 1, 1, CPR_KIND_FULL, &t, 1);
    assert_int_equal(cpr_store_begin(store, &spec), CPR_OK);
    cpr_block_layout l;
    size_t len = cpr_block_size_codec(N, DIM, 1, 0, CPR_CODEC_INT8);
    unsigned char *b = NULL;
    assert_int_equal(posix_memalign((void **)&b, 64, len), 0);
    cpr_block_layout_codec(N, DIM, 1, 0, CPR_CODEC_INT8, &l);
    float rows[N * DIM];
    for (uint32_t i = 0; i < N; i++) {
        uint64_t id = 5 * (uint64_t)i;
        float st = tu_state(t.table, id, 1, 0);
        memcpy(b + l.ids + i * 8, &id, 8);
        memcpy(b + l.state + i * 4, &st, 4);
        for (uint32_t j = 0; j < DIM; j++)
            rows[i * DIM + j] = tu_value(t.table, id, 1, j);
    }
    assert_int_equal(cpr_codec_encode(CPR_CODEC_INT8, 0, rows, N, DIM, b + l.values), CPR_OK);
    assert_int_equal(cpr_block_seal_codec(b, t.table, N, DIM, 1, 0, CPR_CODEC_INT8), CPR_OK);
    cpr_part_id id = {"q", 0, 1};
    assert_int_equal(cpr_store_put_block(store, &id, b, len), CPR_OK);
    assert_int_equal(cpr_store_commit(store, &id, N), CPR_OK);
    cpr_store_close(store);

    ch_daemon d;
    ch_start(&d, dir);
    char target[300];
    snprintf(target, sizeof target, "grpc://%s", d.addr);
    cpr_client *c = NULL;
    assert_int_equal(cpr_client_open(target, NULL, &c), CPR_OK);
    qrows *got = calloc(1, sizeof *got);
    cpr_restore_query q = {.job = "q"};
    cpr_restore_result res;
    assert_int_equal(cpr_client_restore(c, &q, NULL, 0, keep_qrows, got, &res), CPR_OK);
    assert_int_equal(got->n, N);
    cpr_restore_into in = {.table = t.table, .row_base = 0, .n_rows = N * 5, .dim = DIM,
                           .state_dim = 1};
    float *vals = calloc((size_t)N * 5 * DIM, sizeof *vals), *sts = calloc(N * 5, sizeof *sts);
    in.values = vals;
    in.state = sts;
    assert_int_equal(cpr_client_restore_table(c, &q, NULL, 0, &in, &res), CPR_OK);
    for (uint32_t i = 0; i < N; i++) {
        float step;
        memcpy(&step, b + l.values + i * cpr_codec_row_bytes(CPR_CODEC_INT8, DIM), 4);
        assert_int_equal(got->ids[i], 5 * (uint64_t)i);
        assert_true(got->state[i] == tu_state(t.table, got->ids[i], 1, 0));
        assert_true(sts[i * 5] == got->state[i]);
        for (uint32_t j = 0; j < DIM; j++) {
            float want = rows[i * DIM + j];
            assert_true(fabsf(got->values[i * DIM + j] - want) <= 0.5f * step * (1 + 1e-5f) + 1e-3f);
            assert_memory_equal(&vals[(size_t)i * 5 * DIM + j], &got->values[i * DIM + j], 4);
        }
    }
    free(vals);
    free(sts);
    free(got);
    free(b);
    cpr_client_close(c);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* A part written in a codec: the client encodes every block it sends, the
 * store keeps them, restores decode (values within half a step for int8,
 * nearest for bf16; state exact), the part's bytes shrink, a later f32 part
 * merges over it, and a NaN fails the part with the row named. */
static void codec_parts(const char *target, void *ctx)
{
    (void)ctx;
    enum { N = 3000, DIM = 16 };
    static const cpr_table_schema t = {.table = 4, .rows = N, .dim = DIM, .state_dim = 1};
    static float v[N * DIM], s[N];
    for (size_t i = 0; i < N; i++) {
        s[i] = tu_state(t.table, i, 1, 0);
        for (size_t j = 0; j < DIM; j++)
            v[i * DIM + j] = tu_value(t.table, i, 1, (uint32_t)j) / 1000.0f;
    }
    cpr_client *c = NULL;
    assert_int_equal(cpr_client_open(target, NULL, &c), CPR_OK);
    static const cpr_codec codecs[] = {CPR_CODEC_F32, CPR_CODEC_BF16, CPR_CODEC_INT8};
    uint64_t bytes[3] = {0};
    for (size_t k = 0; k < 3; k++) {
        char job[32];
        snprintf(job, sizeof job, "codec-%s", cpr_codec_name(codecs[k]));
        cpr_part_spec spec = {.id = {job, 0, 1}, .kind = CPR_KIND_FULL, .num_shards = 1,
                              .tables = &t, .n_tables = 1, .codec = codecs[k]};
        cpr_part *p = NULL;
        assert_int_equal(cpr_client_begin(c, &spec, &p), CPR_OK);
        cpr_row_batch b = {.table = t.table, .n = N, .values = v, .values_count = N * DIM,
                           .state = s, .state_count = N, .range_begin = 0};
        assert_int_equal(cpr_part_put_rows(p, &b), CPR_OK);
        assert_int_equal(cpr_part_commit(&p), CPR_OK);
        cpr_part_info *info = NULL;
        size_t n = 0;
        assert_int_equal(cpr_client_list(c, job, &info, &n), CPR_OK);
        bytes[k] = info[0].bytes;
        assert_int_equal(info[0].codecs, 1u << codecs[k]); /* List says the codec */
        free(info);
        static float out[N * DIM], outs[N];
        cpr_restore_into in = {.table = t.table, .n_rows = N, .dim = DIM, .state_dim = 1,
                               .values = out, .state = outs};
        cpr_restore_query q = {.job = job};
        cpr_restore_result res;
        assert_int_equal(cpr_client_restore_table(c, &q, NULL, 0, &in, &res), CPR_OK);
        assert_int_equal(res.rows, N);
        assert_memory_equal(outs, s, sizeof s); /* state stays f32 */
        for (size_t i = 0; i < N; i++) {
            float lo = v[i * DIM], hi = lo;
            for (size_t j = 0; j < DIM; j++) {
                lo = v[i * DIM + j] < lo ? v[i * DIM + j] : lo;
                hi = v[i * DIM + j] > hi ? v[i * DIM + j] : hi;
            }
            for (size_t j = 0; j < DIM; j++) {
                float want = v[i * DIM + j], err = fabsf(out[i * DIM + j] - want);
                if (codecs[k] == CPR_CODEC_F32)
                    assert_memory_equal(&out[i * DIM + j], &want, 4);
                else if (codecs[k] == CPR_CODEC_BF16)
                    assert_true(err <= fabsf(want) / 256);
                else
                    assert_true(err <= 0.5f * (hi - lo) / 255 * (1 + 1e-4f) + 1e-6f);
            }
        }
    }
    /* ids 8 + values + state 4 per row: f32 76, bf16 44, int8 8 + 24 + 4 = 36 */
    assert_int_equal(bytes[0], (uint64_t)N * 76);
    assert_int_equal(bytes[1], (uint64_t)N * 44);
    assert_int_equal(bytes[2], (uint64_t)N * 36);
    /* A NaN cannot be encoded: the part fails, naming it; nothing commits. */
    cpr_part_spec spec = {.id = {"codec-nan", 0, 1}, .kind = CPR_KIND_FULL, .num_shards = 1,
                          .tables = &t, .n_tables = 1, .codec = CPR_CODEC_INT8};
    cpr_part *p = NULL;
    v[77 * DIM + 5] = NAN;
    assert_int_equal(cpr_client_begin(c, &spec, &p), CPR_OK);
    cpr_row_batch b = {.table = t.table, .n = N, .values = v, .values_count = N * DIM,
                       .state = s, .state_count = N, .range_begin = 0};
    cpr_status st = cpr_part_put_rows(p, &b);
    if (st == CPR_OK)
        st = cpr_part_commit(&p);
    else
        cpr_part_abort(&p);
    assert_int_equal(st, CPR_INVALID_ARGUMENT);
    assert_non_null(strstr(cpr_errmsg(), "NaN"));
    v[77 * DIM + 5] = 0;
    cpr_part_info *info = NULL;
    size_t n = 0;
    cpr_status ls = cpr_client_list(c, "codec-nan", &info, &n);
    assert_true(ls == CPR_NOT_FOUND || (ls == CPR_OK && !info[0].committed));
    free(info);
    /* An unknown codec is refused at begin. */
    spec.codec = 9;
    assert_int_equal(cpr_client_begin(c, &spec, &p), CPR_INVALID_ARGUMENT);
    cpr_client_close(c);
}

static void test_codec_parts(void **state)
{
    (void)state;
    ch_each_transport(codec_parts, NULL);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--vanishing-writer") == 0)
        return vanishing_writer(argv[2]);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unix_round_trip),
        cmocka_unit_test(test_direct_local_reads),
        cmocka_unit_test(test_bad_targets),
        cmocka_unit_test(test_local_round_trip),
        cmocka_unit_test(test_ranges_and_gathers),
        cmocka_unit_test(test_sharp_edges),
        cmocka_unit_test(test_async_begin),
        cmocka_unit_test(test_deferred_send),
        cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_grpc_round_trip),
        cmocka_unit_test(test_grpc_decodes_quantized_blocks),
        cmocka_unit_test(test_codec_parts),
        cmocka_unit_test(test_concurrent_shards),
        cmocka_unit_test(test_sender_pool),
        cmocka_unit_test(test_two_daemons),
        cmocka_unit_test(test_resharded_over_two_daemons),
        cmocka_unit_test(test_daemon_killed_mid_part),
        cmocka_unit_test(test_client_killed_mid_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
