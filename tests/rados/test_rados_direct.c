/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Direct reads (docs/client.md): a client given the pool of a ckptd whose
 * store is in Ceph RADOS reads the stored blocks ckptd locates from the pool
 * itself, on the test cluster (tests/CMakeLists.txt, fixture "ceph"):
 *  - every query shape (newest, as of, ranges that cut blocks, modulo, one
 *    shard's rows) over a FULL with a DELTA on top delivers exactly the rows a
 *    client without direct reads gets, in the same order, with the right
 *    values;
 *  - a client pointed at another namespace is answered with bytes, and
 *    still right;
 *  - a block damaged in the pool fails the direct restore with CPR_CORRUPT
 *    from the client's own read, and nothing of it is delivered (the client
 *    then asks ckptd for the rows, which finds the same: the message names
 *    both); through ckptd it fails too, and ckptd's verify names
 *    the segment;
 *  - a pool that does not exist fails cpr_client_open with CPR_NOT_FOUND;
 *  - ckptd counts the plans it sent (restore_plans_total): the direct
 *    client's restores only;
 *  - a plan takes no restore slot: with --restore-streams 1 held by a
 *    streaming restore whose client stops reading, a direct restore is
 *    answered without waiting for the slot (restore_stream_waits_total
 *    stays 0 while the stream holds it); and a streaming restore waiting
 *    for that slot still goes in over the limit while plans go out
 *    back to back (a plan's sends are no holder's progress).
 * Direct writes (docs/client.md): a client with direct_writes writes its
 * parts' rows into the pool itself, ckptd checking each segment's index at
 * commit:
 *  - the same job written so (parts begun at once and in the background; a
 *    FULL from ascending rows, a DELTA from rows out of order, a blob beside
 *    the rows) restores exactly as above, through a client without direct
 *    anything, and its blob reads back;
 *  - ckptd counts those commits (direct_commits_total), and none of a client
 *    pointed at another namespace, whose rows it takes itself (still right);
 *  - direct_writes without the pool is refused at open.
 * Exits 77 when the cluster is not there.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr_common.h"
#include "cpr/client.h"
#include "cpr/crc32c.h"
#include "testutil.h"

static const char *g_conf;

#define SHARDS 2
#define ROWS 20000 /* per shard: shard s owns rows [s * ROWS, (s + 1) * ROWS) */
static const cpr_table_schema T[1] = {{0, SHARDS * ROWS, 16, 1}};
/* The DELTA at checkpoint 2 of shard 0: rows in these ranges. */
static const cpr_row_range DELTA[2] = {{100, 300}, {5000, 5100}};

static uint64_t newest_ckpt(uint64_t row, uint64_t as_of)
{
    if (as_of >= 2)
        for (int i = 0; i < 2; i++)
            if (row >= DELTA[i].begin && row < DELTA[i].end)
                return 2;
    return 1;
}

typedef struct seen {
    uint64_t as_of;
    uint64_t *ids;
    size_t n, cap;
    size_t wrong;
} seen;

static cpr_status see(void *ctx, const cpr_row_batch *b)
{
    seen *s = ctx;
    if (cpr_crc32c_rows(b->ids, b->n, b->values, b->values_count, b->state, b->state_count) !=
        b->crc32c)
        s->wrong++;
    for (size_t i = 0; i < b->n; i++) {
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 4096;
            s->ids = realloc(s->ids, s->cap * sizeof *s->ids);
            assert_non_null(s->ids);
        }
        uint64_t row = b->ids[i], ck = newest_ckpt(row, s->as_of);
        s->ids[s->n++] = row;
        for (uint32_t k = 0; k < T[0].dim; k++)
            s->wrong += b->values[i * T[0].dim + k] != tu_value(0, row, ck, k);
        s->wrong += b->state[i] != tu_state(0, row, ck, 0);
    }
    return CPR_OK;
}

static void note_problem(void *ctx, const char *what, const char *where)
{
    snprintf(ctx, 1024, "%s: %s", where, what);
}

static const char BLOB[] = "dense state beside the rows";

/* Job `job`: a FULL of every shard (shard 1 begun in the background, a blob
 * with shard 0's), a DELTA of shard 0, through a client opened with `o`
 * (NULL: defaults). shuffle: the DELTA's rows out of id order. */
static void write_job_with(const char *target, const char *job, const cpr_client_options *o,
                           int shuffle)
{
    cpr_client_options opts = o ? *o : (cpr_client_options){0};
    opts.message_bytes = 256u << 10; /* several blocks a part */
    cpr_client *c = NULL;
    assert_status(CPR_OK, cpr_client_open(target, &opts, &c));
    for (uint32_t s = 0; s < SHARDS; s++) {
        cpr_part_spec spec = tu_part(job, s, SHARDS, 1, CPR_KIND_FULL, T, 1);
        uint64_t *ids = malloc(ROWS * sizeof *ids);
        tu_iota(ids, (uint64_t)s * ROWS, ROWS);
        tu_batch b;
        tu_batch_make(&b, &T[0], ids, ROWS, 1);
        cpr_part *p = NULL;
        assert_status(CPR_OK, s ? cpr_client_begin_async(c, &spec, &p)
                                : cpr_client_begin(c, &spec, &p));
        assert_status(CPR_OK, cpr_part_put_rows(p, &b.batch));
        if (s == 0)
            assert_status(CPR_OK, cpr_part_put_blob(p, "dense", BLOB, sizeof BLOB));
        assert_status(CPR_OK, cpr_part_commit(&p));
        tu_batch_free(&b);
        free(ids);
    }
    cpr_part_spec spec = tu_part(job, 0, SHARDS, 2, CPR_KIND_DELTA, T, 1);
    cpr_part *p = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    for (int r = 0; r < 2; r++) {
        size_t n = DELTA[r].end - DELTA[r].begin;
        uint64_t *ids = malloc(n * sizeof *ids);
        tu_iota(ids, DELTA[r].begin, n);
        for (size_t i = 0; shuffle && i + 1 < n; i++) { /* a fixed permutation */
            size_t j = i + (i * 7919 + 13) % (n - i);
            uint64_t t = ids[i];
            ids[i] = ids[j];
            ids[j] = t;
        }
        tu_batch b;
        tu_batch_make(&b, &T[0], ids, n, 2);
        assert_status(CPR_OK, cpr_part_put_rows(p, &b.batch));
        tu_batch_free(&b);
        free(ids);
    }
    assert_status(CPR_OK, cpr_part_commit(&p));
    cpr_client_close(c);
}

static void write_job(const char *target)
{
    write_job_with(target, "direct", NULL, 0);
}

/* The query through `c`: every row right, ascending, and the ids into *out. */
static void restore_checked(cpr_client *c, const cpr_restore_query *q, seen *out)
{
    memset(out, 0, sizeof *out);
    out->as_of = q->as_of ? q->as_of : 2;
    assert_status(CPR_OK, cpr_client_restore(c, q, NULL, 0, see, out, NULL));
    assert_int_equal(out->wrong, 0);
    for (size_t i = 1; i < out->n; i++)
        assert_true(out->ids[i - 1] < out->ids[i]);
}

static size_t expected_rows(const cpr_restore_query *q)
{
    size_t n = 0;
    for (uint64_t row = 0; row < SHARDS * ROWS; row++) {
        int in = q->n_ranges == 0;
        for (size_t i = 0; i < q->n_ranges; i++)
            in |= row >= q->ranges[i].begin && row < q->ranges[i].end;
        if (q->modulo && row % q->modulo != q->remainder)
            in = 0;
        n += in;
    }
    return n;
}

static void open_direct(const char *target, const char *pool, const char *ns, cpr_client **c)
{
    cpr_client_options o = {0};
    o.store.rados_pool = pool;
    o.store.rados_conf = g_conf;
    o.store.rados_namespace = ns;
    assert_status(CPR_OK, cpr_client_open(target, &o, c));
}

/* Flip one byte of chunk 0 of `object` in namespace ns of the test pool. */
static void damage(const char *ns, const char *object, long at)
{
    char *dir = tu_mkdtemp("cpr-direct-obj"), path[600], cmd[2048];
    snprintf(path, sizeof path, "%s/chunk", dir);
    snprintf(cmd, sizeof cmd, "rados -c '%s' -p cpr -N '%s' get '%s@0' '%s'", g_conf, ns,
             object, path);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    int byte = fgetc(f);
    assert_true(byte != EOF);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    fputc(byte ^ 0x40, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "rados -c '%s' -p cpr -N '%s' put '%s@0' '%s'", g_conf, ns,
             object, path);
    assert_int_equal(system(cmd), 0);
    tu_rmtree(dir);
    free(dir);
}

/* A ckptd on namespace "<what>-<pid>-<time>" (ns[64]) of the test pool, with
 * metrics and `restore_streams` (NULL: its default), in a fresh *dir;
 * target[300] gets its grpc:// address. */
static void start_gateway_with(const char *what, const char *restore_streams, char *ns,
                               char **dir, ch_daemon *d, char *target)
{
    snprintf(ns, 64, "%s-%d-%ld", what, (int)getpid(), (long)time(NULL));
    *dir = tu_mkdtemp("cpr-rados-direct");
    const char *const args[] = {"--backend", "rados", "--rados-pool", "cpr",
                                "--rados-conf", g_conf, "--rados-namespace", ns,
                                "--metrics-listen", "127.0.0.1:0",
                                restore_streams ? "--restore-streams" : NULL, restore_streams,
                                NULL};
    ch_start_args(d, *dir, args);
    snprintf(target, 300, "grpc://%s", d->addr);
}

static void start_gateway(const char *what, char *ns, char **dir, ch_daemon *d, char *target)
{
    start_gateway_with(what, NULL, ns, dir, d, target);
}

static void test_direct_reads(void **unused)
{
    (void)unused;
    char ns[64], target[300], *dir = NULL;
    ch_daemon d;
    start_gateway("direct", ns, &dir, &d, target);
    write_job(target);

    cpr_client *plain = NULL, *direct = NULL, *other = NULL;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &plain));
    open_direct(target, "cpr", ns, &direct);
    open_direct(target, "cpr", "another-namespace", &other);

    cpr_row_range cut[2] = {{50, 7000}, {12000, 30000}};
    cpr_row_range shard0[1] = {{0, ROWS}}, shard1[1] = {{ROWS, 2 * ROWS}};
    cpr_restore_query cases[] = {
        {.job = "direct"},
        {.job = "direct", .as_of = 1},
        {.job = "direct", .ranges = cut, .n_ranges = 2},
        {.job = "direct", .modulo = 3, .remainder = 1},
        {.job = "direct", .ranges = shard1, .n_ranges = 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        seen a, b, o;
        restore_checked(plain, &cases[k], &a);
        restore_checked(direct, &cases[k], &b);
        restore_checked(other, &cases[k], &o);
        size_t want = expected_rows(&cases[k]);
        print_message("  query %zu: %zu rows\n", k, want);
        assert_int_equal(a.n, want);
        assert_int_equal(b.n, want);
        assert_int_equal(o.n, want);
        assert_memory_equal(a.ids, b.ids, want * sizeof *a.ids);
        assert_memory_equal(a.ids, o.ids, want * sizeof *a.ids);
        free(a.ids);
        free(b.ids);
        free(o.ids);
    }

    /* Damage a block of shard 1's FULL (no DELTA over it: every block of
     * it is located). The direct client's own read finds it; ckptd's
     * answer to the plain client finds it too, in ckptd's words. */
    char *where = NULL, prefix[128];
    cpr_part_id id = {"direct", 1, 1};
    assert_status(CPR_OK, cpr_client_where(plain, &id, &where));
    snprintf(prefix, sizeof prefix, "rados:cpr/%s ", ns);
    char *obj = strstr(where, prefix);
    assert_non_null(obj);
    obj += strlen(prefix);
    char *at = strchr(obj, '@');
    assert_non_null(at);
    *at = 0;
    char segment[512];
    snprintf(segment, sizeof segment, "%s", obj);
    free(where);
    damage(ns, segment, 5000); /* inside the first block's rows */
    cpr_restore_query q = {.job = "direct", .ranges = shard1, .n_ranges = 1};
    seen s = {.as_of = 2};
    assert_status(CPR_CORRUPT, cpr_client_restore(direct, &q, NULL, 0, see, &s, NULL));
    assert_non_null(strstr(cpr_errmsg(), "direct read"));
    assert_int_equal(s.n, 0); /* the damaged block is the first: nothing delivered */
    assert_int_equal(s.wrong, 0);
    free(s.ids);
    memset(&s, 0, sizeof s);
    s.as_of = 2;
    assert_status(CPR_CORRUPT, cpr_client_restore(plain, &q, NULL, 0, see, &s, NULL));
    assert_null(strstr(cpr_errmsg(), "direct read"));
    assert_int_equal(s.wrong, 0);
    free(s.ids);
    /* ckptd's verify reports the damage, naming the segment. */
    cpr_verify_report rep = {0};
    char problem[1024] = "";
    assert_status(CPR_CORRUPT, cpr_client_verify(plain, "direct", note_problem, problem, &rep));
    assert_int_equal(rep.problems, 1);
    assert_non_null(strstr(problem, segment));
    /* Shard 0 is untouched: still restored, directly. */
    q.ranges = shard0;
    seen z;
    restore_checked(direct, &q, &z);
    assert_int_equal(z.n, ROWS);
    free(z.ids);

    /* ckptd planned for the direct client only: five queries, the damaged
     * restore, shard 0's. */
    int code = 0;
    char *metrics = NULL;
    assert_status(CPR_OK, ch_http_get(d.metrics_addr, "/metrics", &code, &metrics));
    assert_int_equal(code, 200);
    assert_true(ch_metric(metrics, "cpr_ckptd_restore_plans_total") == 7);
    free(metrics);

    cpr_client_close(plain);
    cpr_client_close(direct);
    cpr_client_close(other);

    /* Bad input: a pool that is not there is refused at open, by name. */
    cpr_client_options o = {0};
    o.store.rados_pool = "no-such-pool";
    o.store.rados_conf = g_conf;
    cpr_client *c = NULL;
    assert_status(CPR_NOT_FOUND, cpr_client_open(target, &o, &c));
    assert_non_null(strstr(cpr_errmsg(), "no-such-pool"));
    assert_null(c);

    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* Every query of test_direct_reads on job `job`, through `c`: right rows. */
static void assert_job(cpr_client *c, const char *job)
{
    cpr_row_range cut[2] = {{50, 7000}, {12000, 30000}};
    cpr_restore_query cases[] = {
        {.job = job},
        {.job = job, .as_of = 1},
        {.job = job, .ranges = cut, .n_ranges = 2},
        {.job = job, .modulo = 3, .remainder = 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        seen a;
        restore_checked(c, &cases[k], &a);
        assert_int_equal(a.n, expected_rows(&cases[k]));
        free(a.ids);
    }
    void *data = NULL;
    size_t len = 0;
    cpr_part_id id = {job, 0, 1};
    assert_status(CPR_OK, cpr_client_read_blob(c, &id, "dense", &data, &len));
    assert_int_equal(len, sizeof BLOB);
    assert_memory_equal(data, BLOB, sizeof BLOB);
    free(data);
}

static void test_direct_writes(void **unused)
{
    (void)unused;
    char ns[64], target[300], *dir = NULL;
    ch_daemon d;
    start_gateway("dwrite", ns, &dir, &d, target);
    cpr_client_options o = {.direct_writes = 1};
    o.store.rados_pool = "cpr";
    o.store.rados_conf = g_conf;
    o.store.rados_namespace = ns;
    write_job_with(target, "dw", &o, 1);
    /* Another namespace: ckptd's store is not that one, and takes the rows. */
    o.store.rados_namespace = "another-namespace";
    write_job_with(target, "dw-other", &o, 1);

    cpr_client *plain = NULL;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &plain));
    assert_job(plain, "dw");
    assert_job(plain, "dw-other");
    cpr_client_close(plain);

    int code = 0;
    char *metrics = NULL;
    assert_status(CPR_OK, ch_http_get(d.metrics_addr, "/metrics", &code, &metrics));
    assert_int_equal(code, 200);
    assert_true(ch_metric(metrics, "cpr_ckptd_direct_commits_total") == 3);
    free(metrics);

    /* direct_writes needs the pool. */
    cpr_client_options bad = {.direct_writes = 1};
    cpr_client *c = NULL;
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_open(target, &bad, &c));
    assert_non_null(strstr(cpr_errmsg(), "rados_pool"));
    assert_null(c);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* ---- a plan takes no restore slot ---------------------------------------------------- */


/* A streaming restore of "big" on a connection of its own. */
typedef struct waiter {
    const char *addr;
    _Atomic int done;
    cpr_status st;
    uint64_t rows;
    int bad;
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    cpri_rpc *rpc = NULL;
    w->st = cpri_rpc_open(w->addr, &rpc);
    if (w->st == CPR_OK)
        w->st = ch_restore(rpc, "big", 0, 1, &w->rows, &w->bad);
    cpri_rpc_close(rpc);
    atomic_store(&w->done, 1);
    return NULL;
}

static void test_plan_takes_no_slot(void **unused)
{
    (void)unused;
    char ns[64], target[300], *dir = NULL;
    ch_daemon d;
    start_gateway_with("slot", "1", ns, &dir, &d, target);
    write_job(target);
    /* Job "big" restores to twice a stream's window (ckptd_harness.h). */
    cpri_rpc *rpc = NULL;
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    cpr_part_id big = {"big", 0, 1};
    assert_status(CPR_OK, ch_begin(rpc, "big", 1));
    assert_status(CPR_OK, ch_put_rows(rpc, &big, 0, ch_table.rows, 0, NULL, NULL));
    assert_status(CPR_OK, ch_commit(rpc, &big, ch_table.rows));
    ch_held_restore h;
    ch_hold_restore(&h, rpc, "big");
    assert_int_equal(h.messages, 1);
    assert_true(ch_metric_now(&d, "cpr_ckptd_restore_streams") == 1); /* the one slot, held */

    cpr_client *direct = NULL;
    open_direct(target, "cpr", ns, &direct);
    cpr_row_range shard0[1] = {{0, ROWS}};
    cpr_restore_query q = {.job = "direct", .ranges = shard0, .n_ranges = 1};
    seen z;
    restore_checked(direct, &q, &z);
    assert_int_equal(z.n, ROWS);
    free(z.ids);
    /* Still held (so held throughout), and the plan never waited for it. */
    assert_true(ch_metric_now(&d, "cpr_ckptd_restore_streams") == 1);
    assert_true(ch_metric_now(&d, "cpr_ckptd_restore_stream_waits_total") == 0);
    assert_true(ch_metric_now(&d, "cpr_ckptd_restore_plans_total") == 1);

    /* A streaming restore waiting for the slot goes in over the limit once
     * the holder has sent nothing for a second, however many plans go out
     * meanwhile: a plan's sends are no slot holder's progress (G2). */
    waiter w = {.addr = d.addr};
    pthread_t wt;
    assert_int_equal(0, pthread_create(&wt, NULL, waiter_main, &w));
    size_t plans = 0;
    /* A bound for a hang (plans counted as progress would keep the waiter
     * out for as long as they go on), not a speed: ASan on Ceph is slow. */
    double deadline = cpri_now_s() + 6 * CH_TIMEOUT_S;
    while (!atomic_load(&w.done) && cpri_now_s() < deadline) {
        restore_checked(direct, &q, &z);
        free(z.ids);
        plans++;
    }
    int in_time = atomic_load(&w.done); /* not let in only once the plans stopped */
    pthread_join(wt, NULL);
    print_message("  %zu plans while the waiter waited\n", plans);
    assert_true(in_time);
    assert_true(plans >= 1);
    assert_status(CPR_OK, w.st);
    assert_int_equal(w.rows, ch_table.rows);
    assert_false(w.bad);
    assert_true(ch_metric_now(&d, "cpr_ckptd_restore_stream_over_limit_total") == 1);

    ch_release_restore(&h);
    assert_status(CPR_OK, h.st);
    assert_true(h.messages > 1);
    cpr_client_close(direct);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    if (!(g_conf = tu_rados_conf()))
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_direct_reads),
        cmocka_unit_test(test_direct_writes),
        cmocka_unit_test(test_plan_takes_no_slot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
