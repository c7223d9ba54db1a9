/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Several stores (gateways) on one RADOS namespace at once, through the
 * store API on the test cluster (rados.h R6-R8):
 *  - a gateway that reopens (its open-time sweep runs) leaves another live
 *    gateway's unfinished part alone: that part commits and restores
 *    exactly;
 *  - job ids come from the pool: two gateways creating jobs at once never
 *    give two jobs one id, and a gateway meeting a job another created
 *    takes its id, so a third gateway, opened later, serves each job's
 *    parts, whichever gateway wrote them;
 *  - a part committed through one gateway is never replaced through
 *    another: the second commit of the same part fails and the first one's
 *    rows stay;
 *  - one holder per job: retention runs on the gateway holding the job and
 *    decides on every shard's parts, whichever gateway wrote them; another
 *    gateway's retention leaves the job alone, and lists and restores what
 *    the holder left (rados.h R9);
 *  - a part the holder's retention removed stays readable for a while by a
 *    gateway that planned its read before (store_internal.h S8);
 *  - a gateway in the middle of a fold or retention pass (fold_mu held)
 *    still reloads a job before it lists it, gives its latest cut or
 *    restores it (R9): parts committed through another gateway are there;
 *  - a job with more records than one read of the catalog returns reloads
 *    whole, on a gateway that knows it and on one that does not;
 *  - readers share reloads: a reader is served by a reload that began after
 *    it arrived (no reload of its own), and one arriving later reloads and
 *    sees what another gateway committed in between; readers let go at once,
 *    round after round, each see every part committed through the other
 *    gateway before they started;
 *  - a gateway whose lease ended under it stops committing at its next
 *    renewal, instead of taking the lease back (R6);
 *  - a part another gateway commits while one opens, between its reading
 *    of the catalog and its listing of the pool, is not swept by that open
 *    (R7; the test wraps rados_nobjects_list_open to commit there).
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
#include <rados/librados.h>

#include "cpr/store.h"
#include "store_internal.h" /* fold_mu: a fold or retention pass in progress */
#include "testutil.h"

static const char *g_conf;
static char g_ns[64];

/* Rows of 64 floats (256 bytes and a state float): BIG_ROWS of them pass
 * one 4 MiB object, so an open part has objects in the pool before it
 * commits. */
static const cpr_table_schema T[] = {{.table = 0, .rows = 100000, .dim = 64, .state_dim = 1}};
#define BIG_ROWS 20000

typedef struct gateway {
    char *tmp, *dir;
    cpr_store *store;
} gateway;

static void gw_open(gateway *g)
{
    cpr_store_options o = {.rados_pool = "cpr", .rados_conf = g_conf,
                           .rados_namespace = g_ns, .no_fold = 1};
    assert_status(CPR_OK, cpr_store_open(g->dir, &o, &g->store));
}

static void gw_start(gateway *g, const char *what)
{
    g->tmp = tu_mkdtemp(what);
    assert_int_not_equal(asprintf(&g->dir, "%s/store", g->tmp), -1);
    gw_open(g);
}

static void gw_stop(gateway *g)
{
    cpr_store_close(g->store);
    tu_rmtree(g->tmp);
    free(g->tmp);
    free(g->dir);
}

static void new_namespace(const char *what)
{
    snprintf(g_ns, sizeof g_ns, "%s-%d-%ld", what, (int)getpid(), (long)time(NULL));
}

/* Rows first..first+n-1 of table 0 as of `ckpt`, restored from `s`. */
static void assert_restores(cpr_store *s, const char *job, uint64_t as_of, uint64_t first,
                            size_t n, uint64_t ckpt)
{
    cpr_row_range r = {.begin = first, .end = first + n};
    cpr_restore_query q = {.job = job, .as_of = as_of, .ranges = &r, .n_ranges = 1};
    tu_rows rows = {0};
    assert_status(CPR_OK, tu_restore(s, &q, &rows, NULL));
    assert_int_equal(rows.n, n);
    tu_assert_rows(rows.rows, &T[0], first, 1, n, ckpt);
    tu_rows_free(&rows);
}

/* Linked with --wrap=rados_nobjects_list_open: when g_before_list is set,
 * it runs once (cleared first) before the listing it stands in front of. */
int __real_rados_nobjects_list_open(rados_ioctx_t io, rados_list_ctx_t *ctx);
int __wrap_rados_nobjects_list_open(rados_ioctx_t io, rados_list_ctx_t *ctx);
static void (*g_before_list)(void);

int __wrap_rados_nobjects_list_open(rados_ioctx_t io, rados_list_ctx_t *ctx)
{
    void (*fn)(void) = g_before_list;
    g_before_list = NULL;
    if (fn)
        fn();
    return __real_rados_nobjects_list_open(io, ctx);
}

/* Gateway C, opened, committing part (job "race", shard 0, checkpoint 1)
 * and closed (its lease released: it no longer counts as alive). */
static void commit_through_another_gateway(void)
{
    gateway c;
    gw_start(&c, "cpr-shared-c");
    cpr_part_spec spec = tu_part("race", 0, 1, 1, CPR_KIND_FULL, T, 1);
    tu_write_part_ok(c.store, &spec, 0, 40);
    gw_stop(&c);
}

static void test_open_keeps_a_part_committed_meanwhile(void **unused)
{
    (void)unused;
    new_namespace("race");
    gateway b;
    g_before_list = commit_through_another_gateway; /* during B's open */
    gw_start(&b, "cpr-shared-b");
    assert_null(g_before_list); /* it ran */
    assert_restores(b.store, "race", 0, 0, 40, 1);
    cpr_verify_report vr;
    assert_status(CPR_OK, cpr_store_verify(b.store, "race", NULL, NULL, &vr));
    assert_int_equal(vr.problems, 0);
    gw_stop(&b);
}

static void test_reopen_keeps_live_gateways_parts(void **unused)
{
    (void)unused;
    new_namespace("live");
    gateway a, b;
    gw_start(&a, "cpr-shared-a");
    gw_start(&b, "cpr-shared-b");
    /* A's part passes 4 MiB: objects of it are in the pool, unnamed. */
    cpr_part_spec spec = tu_part("job", 0, 1, 1, CPR_KIND_FULL, T, 1);
    uint64_t *ids = malloc(BIG_ROWS * sizeof *ids);
    assert_non_null(ids);
    tu_iota(ids, 0, BIG_ROWS);
    assert_status(CPR_OK, cpr_store_begin(a.store, &spec));
    assert_status(CPR_OK, tu_put_rows(a.store, &spec.id, &T[0], ids, BIG_ROWS, 1));
    /* B reopens: its sweep sees A's objects, which no record names. */
    cpr_store_close(b.store);
    gw_open(&b);
    assert_status(CPR_OK, cpr_store_commit(a.store, &spec.id, BIG_ROWS));
    assert_restores(a.store, "job", 0, 0, BIG_ROWS, 1);
    free(ids);
    gw_stop(&b);
    gw_stop(&a);
}

static void test_job_ids_from_the_pool(void **unused)
{
    (void)unused;
    new_namespace("ids");
    gateway a, b, c;
    gw_start(&a, "cpr-shared-a");
    gw_start(&b, "cpr-shared-b");
    /* Two new jobs at once on two gateways, then one job through both. */
    cpr_part_spec x0 = tu_part("x", 0, 2, 1, CPR_KIND_FULL, T, 1);
    cpr_part_spec y0 = tu_part("y", 0, 1, 1, CPR_KIND_FULL, T, 1);
    cpr_part_spec x1 = tu_part("x", 1, 2, 1, CPR_KIND_FULL, T, 1);
    assert_status(CPR_OK, cpr_store_begin(a.store, &x0));
    assert_status(CPR_OK, cpr_store_begin(b.store, &y0));
    assert_status(CPR_OK, cpr_store_begin(b.store, &x1));
    uint64_t ids[300];
    tu_iota(ids, 0, 100); /* x: rows 0..99 on shard 0 */
    assert_status(CPR_OK, tu_put_rows(a.store, &x0.id, &T[0], ids, 100, 1));
    tu_iota(ids, 1000, 300); /* y: rows 1000..1299, values of checkpoint 9 */
    assert_status(CPR_OK, tu_put_rows(b.store, &y0.id, &T[0], ids, 300, 9));
    tu_iota(ids, 100, 100); /* x: rows 100..199 on shard 1 */
    assert_status(CPR_OK, tu_put_rows(b.store, &x1.id, &T[0], ids, 100, 1));
    assert_status(CPR_OK, cpr_store_commit(a.store, &x0.id, 100));
    assert_status(CPR_OK, cpr_store_commit(b.store, &y0.id, 300));
    assert_status(CPR_OK, cpr_store_commit(b.store, &x1.id, 100));
    /* A third gateway, opened now, serves both jobs whole. */
    gw_start(&c, "cpr-shared-c");
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_store_list(c.store, "x", &parts, &n));
    assert_int_equal(n, 2);
    assert_int_equal(parts[0].shard, 0);
    assert_int_equal(parts[0].rows, 100);
    assert_int_equal(parts[1].shard, 1);
    assert_int_equal(parts[1].rows, 100);
    assert_true(parts[1].consistent);
    free(parts);
    assert_status(CPR_OK, cpr_store_list(c.store, "y", &parts, &n));
    assert_int_equal(n, 1);
    assert_int_equal(parts[0].rows, 300);
    free(parts);
    uint64_t cut = 0;
    assert_status(CPR_OK, cpr_store_latest_cut(c.store, "x", &cut));
    assert_int_equal(cut, 1);
    assert_restores(c.store, "x", 1, 0, 200, 1);
    assert_restores(c.store, "y", 1, 1000, 300, 9);
    gw_stop(&c);
    gw_stop(&b);
    gw_stop(&a);
}

static void test_commit_once_across_gateways(void **unused)
{
    (void)unused;
    new_namespace("once");
    gateway a, b, c;
    gw_start(&a, "cpr-shared-a");
    gw_start(&b, "cpr-shared-b");
    /* The job exists first, so both gateways know its id. */
    cpr_part_spec first = tu_part("z", 0, 1, 1, CPR_KIND_FULL, T, 1);
    tu_write_part_ok(a.store, &first, 0, 50);
    cpr_part_spec twice = tu_part("z", 0, 1, 2, CPR_KIND_FULL, T, 1);
    uint64_t ids[50];
    tu_iota(ids, 0, 50);
    assert_status(CPR_OK, cpr_store_begin(a.store, &twice));
    assert_status(CPR_OK, cpr_store_begin(b.store, &twice));
    assert_status(CPR_OK, tu_put_rows(a.store, &twice.id, &T[0], ids, 50, 2));
    assert_status(CPR_OK, tu_put_rows(b.store, &twice.id, &T[0], ids, 50, 7));
    assert_status(CPR_OK, cpr_store_commit(a.store, &twice.id, 50));
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_commit(b.store, &twice.id, 50));
    assert_non_null(strstr(cpr_errmsg(), "another gateway"));
    assert_status(CPR_OK, cpr_store_abort(b.store, &twice.id));
    gw_start(&c, "cpr-shared-c");
    assert_restores(c.store, "z", 2, 0, 50, 2); /* A's rows, not B's */
    gw_stop(&c);
    gw_stop(&b);
    gw_stop(&a);
}

static void test_one_holder_per_job(void **unused)
{
    (void)unused;
    new_namespace("holder");
    gateway a, b, c;
    gw_start(&a, "cpr-shared-a");
    gw_start(&b, "cpr-shared-b");
    /* Job h, two shards: shard 0 through A, shard 1 through B, checkpoints
     * 1..4. Neither gateway has committed the other's shard itself. */
    for (uint64_t ckpt = 1; ckpt <= 4; ckpt++) {
        cpr_part_spec s0 = tu_part("h", 0, 2, ckpt, CPR_KIND_FULL, T, 1);
        cpr_part_spec s1 = tu_part("h", 1, 2, ckpt, CPR_KIND_FULL, T, 1);
        tu_write_part_ok(a.store, &s0, 0, 40);
        tu_write_part_ok(b.store, &s1, 40, 40);
    }
    /* A runs retention first and becomes the job's holder: it decides on
     * both shards (it reloads the job from the pool), keeping one cut. */
    cpr_gc_report rep = {0};
    assert_status(CPR_OK, cpr_store_gc(a.store, "h", 1, &rep));
    assert_int_equal(rep.floor, 4);
    assert_int_equal(rep.parts_removed, 6);
    /* A newer cut; B is not the holder: its retention leaves the job to A,
     * whose next pass takes the cut at 4 away. */
    cpr_part_spec s0 = tu_part("h", 0, 2, 5, CPR_KIND_FULL, T, 1);
    cpr_part_spec s1 = tu_part("h", 1, 2, 5, CPR_KIND_FULL, T, 1);
    tu_write_part_ok(a.store, &s0, 0, 40);
    tu_write_part_ok(b.store, &s1, 40, 40);
    cpr_gc_report rep_b = {0};
    assert_status(CPR_OK, cpr_store_gc(b.store, "h", 1, &rep_b));
    assert_int_equal(rep_b.parts_removed, 0);
    assert_status(CPR_OK, cpr_store_gc(a.store, "h", 1, &rep));
    assert_int_equal(rep.floor, 5);
    assert_int_equal(rep.parts_removed, 2);
    /* Every gateway, B too (it reloads the job to list it), sees the same. */
    gw_start(&c, "cpr-shared-c");
    cpr_store *views[] = {b.store, c.store};
    for (int v = 0; v < 2; v++) {
        cpr_part_info *parts = NULL;
        size_t n = 0;
        assert_status(CPR_OK, cpr_store_list(views[v], "h", &parts, &n));
        assert_int_equal(n, 2);
        assert_int_equal(parts[0].checkpoint, 5);
        assert_int_equal(parts[1].checkpoint, 5);
        free(parts);
        assert_restores(views[v], "h", 5, 0, 80, 5);
    }
    gw_stop(&c);
    gw_stop(&b);
    gw_stop(&a);
}

/* The output of a shell command (at most cap - 1 bytes); its exit status. */
static int run_cmd(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    return pclose(p);
}

/* The value of "key":"value" in JSON text (no escapes), into out. */
static void json_string(const char *text, const char *key, char *out, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *v = strstr(text, pat);
    assert_non_null(v);
    v += strlen(pat);
    const char *end = strchr(v, '"');
    assert_non_null(end);
    snprintf(out, cap, "%.*s", (int)(end - v), v);
}

/* R6: a gateway whose lease ended under it (broken here, as its lapse
 * would end it: others may then have seen it dead and swept its objects)
 * does not take it back at its next renewal; it stops committing. */
static void test_lapsed_lease_stops_commits(void **unused)
{
    (void)unused;
    new_namespace("lapse");
    gateway a;
    gw_start(&a, "cpr-shared-lapse");
    cpr_part_spec first = tu_part("l", 0, 1, 1, CPR_KIND_FULL, T, 1);
    tu_write_part_ok(a.store, &first, 0, 40);
    char base[512], cmd[1024], out[4096], locker[128], cookie[128];
    snprintf(base, sizeof base, "rados -c '%s' -p cpr -N '%s'", g_conf, g_ns);
    snprintf(cmd, sizeof cmd, "%s lock info cpr.gw.%08x cpr.gateway --format json", base,
             a.store->gateway_id);
    assert_int_equal(run_cmd(cmd, out, sizeof out), 0);
    const char *lockers = strstr(out, "\"lockers\"");
    assert_non_null(lockers);
    json_string(lockers, "name", locker, sizeof locker);
    json_string(lockers, "cookie", cookie, sizeof cookie);
    snprintf(cmd, sizeof cmd, "%s lock break cpr.gw.%08x cpr.gateway %s --lock-cookie %s",
             base, a.store->gateway_id, locker, cookie);
    assert_int_equal(run_cmd(cmd, out, sizeof out), 0);
    /* Its next renewal (every LEASE_S / 3 = 10 s) must renew, and fails:
     * commits fail from then on (polled; a part a try). */
    cpr_status st = CPR_OK;
    uint64_t ckpt = 2;
    struct timespec t0, now, pause = {0, 100 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (now = t0; st == CPR_OK && now.tv_sec - t0.tv_sec < 60; ckpt++) {
        cpr_part_spec s = tu_part("l", 0, 1, ckpt, CPR_KIND_FULL, T, 1);
        uint64_t ids[4] = {0, 1, 2, 3};
        st = tu_write_part(a.store, &s, ids, 4, 4, 0, 1);
        if (st == CPR_OK)
            nanosleep(&pause, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
    }
    print_message("  lapsed lease: commits refused after %ld s: %s\n",
                  (long)(now.tv_sec - t0.tv_sec), cpr_errmsg());
    assert_int_equal(st, CPR_UNAVAILABLE);
    assert_non_null(strstr(cpr_errmsg(), "lost its lease"));
    /* What it committed before stays. */
    assert_restores(a.store, "l", 1, 0, 40, 1);
    gw_stop(&a);
}

/* S8: the holder's retention removes a part another gateway may still be
 * reading; its objects wait out a grace, so that read completes. */
static void test_removed_part_readable_meanwhile(void **unused)
{
    (void)unused;
    new_namespace("grace");
    gateway a, b;
    gw_start(&a, "cpr-shared-a");
    cpr_part_spec p1 = tu_part("g", 0, 1, 1, CPR_KIND_FULL, T, 1);
    cpr_part_spec p2 = tu_part("g", 0, 1, 2, CPR_KIND_FULL, T, 1);
    uint64_t ids[30];
    tu_iota(ids, 0, 30);
    assert_status(CPR_OK, tu_write_part(a.store, &p1, ids, 30, 30, 100000, 1));
    tu_write_part_ok(a.store, &p2, 0, 30);
    gw_start(&b, "cpr-shared-b"); /* B knows both parts */
    cpr_gc_report rep = {0};
    assert_status(CPR_OK, cpr_store_gc(a.store, "g", 1, &rep));
    assert_int_equal(rep.parts_removed, 1);
    /* B planned before the removal (its catalog still names part 1). */
    tu_assert_blob(b.store, &p1.id, "dense", 100000);
    gw_stop(&b);
    gw_stop(&a);
}

/* R9: reads do not skip their reload while this gateway folds. */
static void test_reads_during_a_fold_see_other_gateways(void **unused)
{
    (void)unused;
    new_namespace("foldread");
    gateway a, b;
    gw_start(&a, "cpr-shared-a");
    gw_start(&b, "cpr-shared-b");
    cpr_part_spec p1 = tu_part("f", 0, 1, 1, CPR_KIND_FULL, T, 1);
    cpr_part_spec p2 = tu_part("f", 0, 1, 2, CPR_KIND_FULL, T, 1);
    tu_write_part_ok(a.store, &p1, 0, 40);
    uint64_t cut = 0;
    assert_status(CPR_OK, cpr_store_latest_cut(a.store, "f", &cut));
    assert_int_equal(cut, 1);
    /* A fold (or retention) runs on A for as long as it reads and writes
     * segments; meanwhile B commits checkpoint 2. */
    pthread_mutex_lock(&a.store->fold_mu);
    tu_write_part_ok(b.store, &p2, 0, 40);
    assert_status(CPR_OK, cpr_store_latest_cut(a.store, "f", &cut));
    assert_int_equal(cut, 2);
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_store_list(a.store, "f", &parts, &n));
    assert_int_equal(n, 2);
    free(parts);
    assert_restores(a.store, "f", UINT64_MAX, 0, 40, 2);
    pthread_mutex_unlock(&a.store->fold_mu);
    gw_stop(&b);
    gw_stop(&a);
}

/* R9: a job with more records than one read of the catalog returns (1024)
 * reloads whole on a gateway that knows it (one operation would return a
 * part only: the reload reads again, page by page). */
static void test_reload_of_a_long_job(void **unused)
{
    (void)unused;
    new_namespace("long");
    gateway a, b;
    gw_start(&a, "cpr-shared-a");
    gw_start(&b, "cpr-shared-b");
    enum { PARTS = 1100 };
    for (uint64_t ckpt = 1; ckpt <= PARTS; ckpt++) {
        cpr_part_spec p = tu_part("long", 0, 1, ckpt, CPR_KIND_FULL, T, 1);
        tu_write_part_ok(a.store, &p, ckpt % 50, 1);
    }
    for (int pass = 0; pass < 2; pass++) { /* B: the job unknown, then known */
        cpr_part_info *parts = NULL;
        size_t n = 0;
        assert_status(CPR_OK, cpr_store_list(b.store, "long", &parts, &n));
        assert_int_equal(n, PARTS + pass);
        assert_int_equal(parts[n - 1].checkpoint, PARTS + pass);
        free(parts);
        cpr_part_spec p = tu_part("long", 0, 1, PARTS + 1, CPR_KIND_FULL, T, 1);
        if (pass == 0)
            tu_write_part_ok(a.store, &p, 7, 1);
    }
    gw_stop(&b);
    gw_stop(&a);
}

/* Parts of job `name` in s's memory, without a reload. */
static size_t parts_in_memory(cpr_store *s, const char *name)
{
    pthread_mutex_lock(&s->mu);
    const cpri_job *job = cpri_catalog_find(&s->catalog, name);
    size_t n = job ? job->n_parts : 0;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* R9: readers arriving together share one reload. */
static void test_readers_share_a_reload(void **unused)
{
    (void)unused;
    new_namespace("share");
    gateway a, b;
    gw_start(&a, "cpr-shared-a");
    gw_start(&b, "cpr-shared-b");
    for (uint64_t ckpt = 1; ckpt <= 3; ckpt++) { /* A knows the job: one of its parts */
        cpr_part_spec p = tu_part("s", 0, 1, ckpt, CPR_KIND_FULL, T, 1);
        tu_write_part_ok(ckpt == 1 ? a.store : b.store, &p, 0, 10);
        if (ckpt == 1)
            assert_int_equal(parts_in_memory(a.store, "s"), 1);
    }
    /* Reader 1 arrives after B's commits; its reload (the first since it
     * arrived) brings them. */
    uint64_t arrived = cpri_store_reloads_begun(a.store);
    cpri_store_refresh_since(a.store, "s", arrived);
    assert_int_equal(cpri_store_reloads_begun(a.store), arrived + 1);
    assert_int_equal(parts_in_memory(a.store, "s"), 3);
    /* Reader 2 arrived with reader 1 (it waited behind that reload): served
     * by it, no reload of its own, even though B committed since. */
    cpr_part_spec p4 = tu_part("s", 0, 1, 4, CPR_KIND_FULL, T, 1);
    tu_write_part_ok(b.store, &p4, 0, 10);
    cpri_store_refresh_since(a.store, "s", arrived);
    assert_int_equal(cpri_store_reloads_begun(a.store), arrived + 1);
    assert_int_equal(parts_in_memory(a.store, "s"), 3);
    /* A reader arriving now reloads and sees checkpoint 4. */
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_store_list(a.store, "s", &parts, &n));
    assert_int_equal(n, 4);
    assert_int_equal(parts[3].checkpoint, 4);
    free(parts);
    assert_int_equal(cpri_store_reloads_begun(a.store), arrived + 2);
    gw_stop(&b);
    gw_stop(&a);
}

/* R9 under real concurrency: readers of gateway A let go together after
 * gateway B committed checkpoint `round` each see it, however their reloads
 * were shared. */
#define READERS 8
#define ROUNDS 6

typedef struct reader_arg {
    cpr_store *store;
    pthread_barrier_t *go;
    uint64_t newest, cut;
    cpr_status st;
} reader_arg;

static void *reader_main(void *p)
{
    reader_arg *r = p;
    pthread_barrier_wait(r->go);
    cpr_part_info *parts = NULL;
    size_t n = 0;
    r->st = cpr_store_list(r->store, "conc", &parts, &n);
    r->newest = r->st == CPR_OK && n ? parts[n - 1].checkpoint : 0;
    free(parts);
    if (r->st == CPR_OK)
        r->st = cpr_store_latest_cut(r->store, "conc", &r->cut);
    return NULL;
}

static void test_concurrent_readers_see_earlier_commits(void **unused)
{
    (void)unused;
    new_namespace("conc");
    gateway a, b;
    gw_start(&a, "cpr-shared-a");
    gw_start(&b, "cpr-shared-b");
    cpr_part_spec first = tu_part("conc", 0, 1, 1, CPR_KIND_FULL, T, 1);
    tu_write_part_ok(a.store, &first, 0, 5); /* A knows the job */
    uint64_t before = cpri_store_reloads_begun(a.store);
    for (uint64_t round = 2; round < 2 + ROUNDS; round++) {
        cpr_part_spec p = tu_part("conc", 0, 1, round, CPR_KIND_FULL, T, 1);
        tu_write_part_ok(b.store, &p, 0, 5);
        pthread_barrier_t go;
        assert_int_equal(0, pthread_barrier_init(&go, NULL, READERS));
        reader_arg args[READERS];
        pthread_t t[READERS];
        for (int i = 0; i < READERS; i++) {
            args[i] = (reader_arg){.store = a.store, .go = &go};
            assert_int_equal(0, pthread_create(&t[i], NULL, reader_main, &args[i]));
        }
        for (int i = 0; i < READERS; i++) {
            pthread_join(t[i], NULL);
            assert_status(CPR_OK, args[i].st);
            assert_int_equal(args[i].newest, round);
            assert_int_equal(args[i].cut, round);
        }
        pthread_barrier_destroy(&go);
    }
    /* Each reader lists and cuts (two reads each): print how many reloads
     * that took, for the record. */
    print_message("  %llu reloads for %d reads\n",
                  (unsigned long long)(cpri_store_reloads_begun(a.store) - before),
                  2 * READERS * ROUNDS);
    gw_stop(&b);
    gw_stop(&a);
}

int main(void)
{
    if (!(g_conf = tu_rados_conf()))
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reopen_keeps_live_gateways_parts),
        cmocka_unit_test(test_job_ids_from_the_pool),
        cmocka_unit_test(test_commit_once_across_gateways),
        cmocka_unit_test(test_one_holder_per_job),
        cmocka_unit_test(test_removed_part_readable_meanwhile),
        cmocka_unit_test(test_reads_during_a_fold_see_other_gateways),
        cmocka_unit_test(test_reload_of_a_long_job),
        cmocka_unit_test(test_readers_share_a_reload),
        cmocka_unit_test(test_concurrent_readers_see_earlier_commits),
        cmocka_unit_test(test_lapsed_lease_stops_commits),
        cmocka_unit_test(test_open_keeps_a_part_committed_meanwhile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
