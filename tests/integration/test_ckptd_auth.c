/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Authorization on the real daemon (issue #11; ckptd/auth.h): ckptd run with
 * --auth-file, every RPC called by every kind of caller (no credentials, an
 * unknown token, read, write and admin rights on the job, write rights on
 * other jobs only). Each call is allowed, UNAUTHENTICATED or
 * PERMISSION_DENIED exactly as the rules say, and a refused call changes
 * nothing: the state it would have changed is checked after it. Also:
 * ListJobs shows only the jobs a caller may read; SIGHUP reloads the rules
 * (and a file that does not parse keeps the rules in force); the client
 * library and cprctl's options carry the token; an auth file with a bad
 * line keeps ckptd from starting, naming the line.
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
#include <sys/stat.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/client.h"
#include "cpr/crc32c.h"
#include "testutil.h"

#define TOK_READ "reader-0123456789abcdef"
#define TOK_WRITE "writer-0123456789abcdef"
#define TOK_ADMIN "admin-0123456789abcdef0"
#define TOK_OTHER "other-0123456789abcdef0"
#define TOK_UNKNOWN "unknown-0123456789abcdef"

#define UA CPR_UNAUTHENTICATED
#define PD CPR_PERMISSION_DENIED
#define OK CPR_OK

enum { NONE, UNKNOWN, READ, WRITE, ADMIN, OTHER, N_CALLERS };
static const char *const caller_name[N_CALLERS] = {"no credentials", "unknown token", "read",
                                                   "write", "admin", "other job's write"};
static const char *const caller_token[N_CALLERS] = {NULL, TOK_UNKNOWN, TOK_READ, TOK_WRITE,
                                                    TOK_ADMIN, TOK_OTHER};

static const char rules[] =
    "# test rules\n"
    TOK_READ "  jobA*  read\n"
    TOK_WRITE " jobA* write   # write includes read\n"
    "\n"
    TOK_ADMIN " * admin\n"
    TOK_OTHER " jobB* write\n";

typedef struct world {
    char *dir;
    char auth[4096];
    ch_daemon d;
    cpri_rpc *as[N_CALLERS];
    unsigned next_job;
} world;

static cpri_rpc *open_as(const char *addr, const char *token)
{
    cpri_rpc_options o = {.token = token};
    cpri_rpc *r = NULL;
    assert_status(CPR_OK, cpri_rpc_open_with(addr, &o, &r));
    return r;
}

static void world_up(world *w)
{
    memset(w, 0, sizeof *w);
    w->dir = tu_mkdtemp("cpr-auth");
    snprintf(w->auth, sizeof w->auth, "%s/auth", w->dir);
    ch_write_private(w->auth, rules);
    char data[4096];
    snprintf(data, sizeof data, "%s/data", w->dir);
    const char *const extra[] = {"--auth-file", w->auth, NULL};
    ch_start_args(&w->d, data, extra);
    for (int i = 0; i < N_CALLERS; i++)
        w->as[i] = open_as(w->d.addr, caller_token[i]);
}

static void world_down(world *w)
{
    for (int i = 0; i < N_CALLERS; i++)
        cpri_rpc_close(w->as[i]);
    ch_stop(&w->d);
    tu_rmtree(w->dir);
    free(w->dir);
}

/* ---- state, read as admin ----------------------------------------------------- */

typedef struct job_state {
    size_t parts, open, committed;
    uint64_t open_rows, open_bytes;
} job_state;

static job_state state_of(world *w, const char *job)
{
    job_state s = {0};
    uint8_t *req, *resp = NULL;
    size_t len, n = 0, count = 0;
    cpr_part_info *parts = NULL;
    uint64_t cut;
    assert_status(CPR_OK, cpri_wire_list_encode(job, &req, &len));
    cpr_status st = cpri_rpc_unary(w->as[ADMIN], CH_SVC "List", req, len, CH_TIMEOUT_S, &resp, &n);
    free(req);
    if (st == CPR_NOT_FOUND)
        return s;
    assert_status(CPR_OK, st);
    assert_status(CPR_OK, cpri_wire_list_response_decode(resp, n, &parts, &count, &cut));
    free(resp);
    s.parts = count;
    for (size_t i = 0; i < count; i++) {
        s.committed += parts[i].committed != 0;
        if (!parts[i].committed) {
            s.open++;
            s.open_rows += parts[i].rows;
            s.open_bytes += parts[i].bytes;
        }
    }
    free(parts);
    return s;
}

static uint64_t generation_of(cpri_rpc *rpc, const char *job, cpr_status *st)
{
    uint8_t *req, *resp = NULL;
    size_t len, n = 0;
    assert_status(CPR_OK, cpri_wire_get_recovery_encode(job, &req, &len));
    *st = cpri_rpc_unary(rpc, CH_SVC "GetRecovery", req, len, CH_TIMEOUT_S, &resp, &n);
    free(req);
    uint64_t g = UINT64_MAX;
    if (*st == CPR_OK) {
        cpri_wire_recovery r;
        assert_status(CPR_OK, cpri_wire_recovery_record_decode(resp, n, &r));
        g = r.generation;
        cpri_wire_recovery_release(&r);
    }
    free(resp);
    return g;
}

/* ---- calls ------------------------------------------------------------------------ */

static cpr_status put_rows(cpri_rpc *rpc, const cpr_part_id *id, uint64_t lease, size_t n)
{
    cpri_rpc_stream *s;
    assert_status(CPR_OK, cpri_rpc_stream_open(rpc, CH_SVC "PutRows", CH_TIMEOUT_S, &s));
    cpr_status st = ch_send_rows(s, id, lease, 0, n);
    cpr_status end = cpri_rpc_stream_finish(s, NULL, NULL);
    return end != CPR_OK ? end : st;
}

/* A PutRows stream that sends nothing: a read-only credential may not hold
 * a write stream open (it is refused before its first message). */
static cpr_status put_nothing(cpri_rpc *rpc)
{
    cpri_rpc_stream *s;
    cpr_status st = cpri_rpc_stream_open(rpc, CH_SVC "PutRows", CH_TIMEOUT_S, &s);
    return st ? st : cpri_rpc_stream_finish(s, NULL, NULL);
}

static cpr_status put_blob(cpri_rpc *rpc, const cpr_part_id *id, uint64_t lease)
{
    static const char data[] = "dense state";
    return ch_put_blob(rpc, id, lease, data, sizeof data);
}

static cpr_status commit(cpri_rpc *rpc, const cpr_part_id *id, uint64_t lease, uint64_t rows)
{
    uint8_t *buf;
    size_t len;
    assert_status(CPR_OK, cpri_wire_commit_encode(id, lease, rows, &buf, &len));
    return ch_unary(rpc, CH_SVC "Commit", buf, len);
}

static cpr_status abort_part(cpri_rpc *rpc, const cpr_part_id *id, uint64_t lease)
{
    uint8_t *buf;
    size_t len;
    assert_status(CPR_OK, cpri_wire_abort_encode(id, lease, &buf, &len));
    return ch_unary(rpc, CH_SVC "Abort", buf, len);
}

/* A committed FULL part of `job` at ckpt with 10 rows and a blob, as admin. */
static void committed_part(world *w, const char *job, uint64_t ckpt)
{
    uint64_t lease;
    cpr_part_id id = {job, 0, ckpt};
    assert_status(CPR_OK, ch_begin_leased(w->as[ADMIN], job, 0, 1, ckpt, CPR_KIND_FULL, &lease));
    assert_status(CPR_OK, put_rows(w->as[ADMIN], &id, lease, 10));
    assert_status(CPR_OK, put_blob(w->as[ADMIN], &id, lease));
    assert_status(CPR_OK, commit(w->as[ADMIN], &id, lease, 10));
}

/* ---- the probes: set up as admin, call as the caller, check the state ----------- */

typedef struct probe_ctx {
    world *w;
    char job[64];
    cpr_part_id id;
    uint64_t lease;
} probe_ctx;

typedef struct probe {
    const char *name;
    cpr_status expect[N_CALLERS];
    void (*setup)(probe_ctx *p);
    cpr_status (*call)(probe_ctx *p, cpri_rpc *as);
    /* After the call: assert the state is what `allowed` says. */
    void (*check)(probe_ctx *p, int allowed);
} probe;

static void setup_open(probe_ctx *p)
{
    assert_status(CPR_OK, ch_begin_leased(p->w->as[ADMIN], p->job, 0, 1, 1, CPR_KIND_FULL,
                                          &p->lease));
}

static void setup_open_rows(probe_ctx *p)
{
    setup_open(p);
    assert_status(CPR_OK, put_rows(p->w->as[ADMIN], &p->id, p->lease, 10));
}

static void setup_committed(probe_ctx *p)
{
    committed_part(p->w, p->job, 1);
}

static void setup_three_cuts(probe_ctx *p)
{
    for (uint64_t c = 1; c <= 3; c++)
        committed_part(p->w, p->job, c);
}

static cpr_status c_begin(probe_ctx *p, cpri_rpc *as)
{
    uint64_t lease;
    return ch_begin_leased(as, p->job, 0, 1, 1, CPR_KIND_FULL, &lease);
}
static void k_begin(probe_ctx *p, int allowed)
{
    assert_int_equal(state_of(p->w, p->job).open, allowed ? 1 : 0);
}

static cpr_status c_put_rows(probe_ctx *p, cpri_rpc *as) { return put_rows(as, &p->id, p->lease, 10); }
static void k_put_rows(probe_ctx *p, int allowed)
{
    assert_int_equal(state_of(p->w, p->job).open_rows, allowed ? 10 : 0);
}

static cpr_status c_put_nothing(probe_ctx *p, cpri_rpc *as)
{
    (void)p;
    return put_nothing(as);
}

static cpr_status c_put_blob(probe_ctx *p, cpri_rpc *as) { return put_blob(as, &p->id, p->lease); }
static void k_put_blob(probe_ctx *p, int allowed)
{
    job_state s = state_of(p->w, p->job);
    assert_int_equal(s.open, 1);
    assert_int_equal(s.open_bytes != 0, allowed);
}

static cpr_status c_commit(probe_ctx *p, cpri_rpc *as) { return commit(as, &p->id, p->lease, 10); }
static void k_commit(probe_ctx *p, int allowed)
{
    job_state s = state_of(p->w, p->job);
    assert_int_equal(s.committed, allowed ? 1 : 0);
    assert_int_equal(s.open, allowed ? 0 : 1);
    assert_int_equal(s.open_rows, allowed ? 0 : 10);
}

static cpr_status c_abort(probe_ctx *p, cpri_rpc *as) { return abort_part(as, &p->id, p->lease); }
static cpr_status c_abort_by_id(probe_ctx *p, cpri_rpc *as) { return abort_part(as, &p->id, 0); }
static void k_abort(probe_ctx *p, int allowed)
{
    assert_int_equal(state_of(p->w, p->job).open, allowed ? 0 : 1);
}

static cpr_status c_list(probe_ctx *p, cpri_rpc *as)
{
    size_t n, open;
    int has;
    return ch_list(as, p->job, &n, 1, &has, &open);
}

static cpr_status c_restore(probe_ctx *p, cpri_rpc *as)
{
    uint64_t rows = 0;
    int bad = 0;
    cpr_status st = ch_restore(as, p->job, 0, 1, &rows, &bad);
    if (st == CPR_OK) {
        assert_int_equal(rows, 10);
        assert_false(bad);
    } else {
        assert_int_equal(rows, 0); /* nothing of a refused restore arrives */
    }
    return st;
}

static cpr_status ignore_chunk(void *ctx, const uint8_t *msg, size_t len)
{
    (void)msg;
    *(size_t *)ctx += len;
    return CPR_OK;
}

static cpr_status c_get_blob(probe_ctx *p, cpri_rpc *as)
{
    uint8_t *buf;
    size_t len, got = 0;
    assert_status(CPR_OK, cpri_wire_getblob_encode(&p->id, "dense", &buf, &len));
    cpr_status st = cpri_rpc_server_stream(as, CH_SVC "GetBlob", buf, len, CH_TIMEOUT_S,
                                          ignore_chunk, &got);
    free(buf);
    assert_int_equal(got != 0, st == CPR_OK);
    return st;
}

static cpr_status c_get_recovery(probe_ctx *p, cpri_rpc *as)
{
    cpr_status st;
    generation_of(as, p->job, &st);
    return st;
}

static cpr_status c_put_recovery(probe_ctx *p, cpri_rpc *as)
{
    uint8_t *buf;
    size_t len;
    assert_status(CPR_OK, cpri_wire_put_recovery_encode(p->job, 0, "plan", 4, &buf, &len));
    return ch_unary(as, CH_SVC "PutRecovery", buf, len);
}
static void k_put_recovery(probe_ctx *p, int allowed)
{
    cpr_status st;
    assert_int_equal(generation_of(p->w->as[ADMIN], p->job, &st), allowed ? 1 : 0);
    assert_status(CPR_OK, st);
}

static cpr_status gc(cpri_rpc *as, const char *job)
{
    uint8_t *buf;
    size_t len;
    assert_status(CPR_OK, cpri_wire_gc_encode(job, 1, 0, &buf, &len));
    return ch_unary(as, CH_SVC "Gc", buf, len);
}
static cpr_status c_gc_job(probe_ctx *p, cpri_rpc *as) { return gc(as, p->job); }
static cpr_status c_gc_all(probe_ctx *p, cpri_rpc *as) { (void)p; return gc(as, NULL); }
static void k_gc(probe_ctx *p, int allowed)
{
    assert_int_equal(state_of(p->w, p->job).committed, allowed ? 1 : 3);
}

static cpr_status verify(cpri_rpc *as, const char *job)
{
    uint8_t *buf;
    size_t len;
    assert_status(CPR_OK, cpri_wire_verify_encode(job, &buf, &len));
    return ch_unary(as, CH_SVC "Verify", buf, len);
}
static cpr_status c_verify_job(probe_ctx *p, cpri_rpc *as) { return verify(as, p->job); }
static cpr_status c_verify_all(probe_ctx *p, cpri_rpc *as) { (void)p; return verify(as, NULL); }

static cpr_status c_stats(probe_ctx *p, cpri_rpc *as)
{
    (void)p;
    return ch_unary(as, CH_SVC "Stats", calloc(1, 1), 0);
}

static cpr_status c_health(probe_ctx *p, cpri_rpc *as)
{
    (void)p;
    return ch_unary(as, "/grpc.health.v1.Health/Check", calloc(1, 1), 0);
}

/* Unchanged state for the read-only calls: the part is there as it was. */
static void k_committed_unchanged(probe_ctx *p, int allowed)
{
    (void)allowed;
    job_state s = state_of(p->w, p->job);
    assert_int_equal(s.committed, 1);
    assert_int_equal(s.open, 0);
}

/*                          none unknown read write admin other */
static const probe probes[] = {
    {"Begin", {UA, UA, PD, OK, OK, PD}, NULL, c_begin, k_begin},
    {"PutRows", {UA, UA, PD, OK, OK, PD}, setup_open, c_put_rows, k_put_rows},
    {"PutBlob", {UA, UA, PD, OK, OK, PD}, setup_open, c_put_blob, k_put_blob},
    {"PutRows with no message", {UA, UA, PD, OK, OK, OK}, NULL, c_put_nothing, NULL},
    {"Commit", {UA, UA, PD, OK, OK, PD}, setup_open_rows, c_commit, k_commit},
    {"Abort", {UA, UA, PD, OK, OK, PD}, setup_open, c_abort, k_abort},
    {"Abort by id", {UA, UA, PD, PD, OK, PD}, setup_open, c_abort_by_id, k_abort},
    {"List", {UA, UA, OK, OK, OK, PD}, setup_committed, c_list, k_committed_unchanged},
    {"Restore", {UA, UA, OK, OK, OK, PD}, setup_committed, c_restore, k_committed_unchanged},
    {"GetBlob", {UA, UA, OK, OK, OK, PD}, setup_committed, c_get_blob, k_committed_unchanged},
    {"GetRecovery", {UA, UA, OK, OK, OK, PD}, NULL, c_get_recovery, NULL},
    {"PutRecovery", {UA, UA, PD, OK, OK, PD}, NULL, c_put_recovery, k_put_recovery},
    {"Gc of the job", {UA, UA, PD, OK, OK, PD}, setup_three_cuts, c_gc_job, k_gc},
    {"Gc of every job", {UA, UA, PD, PD, OK, PD}, setup_three_cuts, c_gc_all, k_gc},
    {"Verify of the job", {UA, UA, PD, PD, OK, PD}, setup_committed, c_verify_job,
     k_committed_unchanged},
    {"Verify of every job", {UA, UA, PD, PD, OK, PD}, setup_committed, c_verify_all,
     k_committed_unchanged},
    {"Stats", {UA, UA, PD, PD, OK, PD}, NULL, c_stats, NULL},
    {"Health", {OK, OK, OK, OK, OK, OK}, NULL, c_health, NULL},
};

/* Every RPC against every kind of caller, each on a job of its own. */
static void test_every_rpc_every_right(void **unused)
{
    (void)unused;
    world w;
    world_up(&w);
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        const probe *pr = &probes[i];
        for (int who = 0; who < N_CALLERS; who++) {
            probe_ctx p = {.w = &w};
            snprintf(p.job, sizeof p.job, "jobA-%u", w.next_job++);
            p.id = (cpr_part_id){p.job, 0, 1};
            if (pr->setup)
                pr->setup(&p);
            cpr_status got = pr->call(&p, w.as[who]);
            if (got != pr->expect[who])
                fail_msg("%s as %s: %s (%s), expected %s", pr->name, caller_name[who],
                         cpr_status_name(got), cpr_errmsg(), cpr_status_name(pr->expect[who]));
            if (got == PD) /* the message names the right that is missing */
                assert_non_null(strstr(cpr_errmsg(), "right"));
            if (pr->check)
                pr->check(&p, got == CPR_OK);
        }
    }
    world_down(&w);
}

static int has_job(char **jobs, size_t n, const char *prefix)
{
    for (size_t i = 0; i < n; i++)
        if (strncmp(jobs[i], prefix, strlen(prefix)) == 0)
            return 1;
    return 0;
}

static void list_jobs(cpri_rpc *as, char ***jobs, size_t *n)
{
    uint8_t *req, *resp = NULL;
    size_t len, rlen = 0;
    assert_status(CPR_OK, cpri_wire_list_jobs_encode(&req, &len));
    assert_status(CPR_OK, cpri_rpc_unary(as, CH_SVC "ListJobs", req, len, CH_TIMEOUT_S, &resp,
                                        &rlen));
    free(req);
    assert_status(CPR_OK, cpri_wire_list_jobs_response_decode(resp, rlen, jobs, n));
    free(resp);
}

/* ListJobs answers each caller with the jobs it may read, and no others. */
static void test_list_jobs_filtered(void **unused)
{
    (void)unused;
    world w;
    world_up(&w);
    committed_part(&w, "jobA-1", 1);
    committed_part(&w, "jobB-1", 1);
    committed_part(&w, "jobC-1", 1);
    static const struct {
        int who;
        int a, b, c;
    } want[] = {{READ, 1, 0, 0}, {WRITE, 1, 0, 0}, {OTHER, 0, 1, 0}, {ADMIN, 1, 1, 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char **jobs;
        size_t n;
        list_jobs(w.as[want[i].who], &jobs, &n);
        assert_int_equal(n, (size_t)(want[i].a + want[i].b + want[i].c));
        assert_int_equal(has_job(jobs, n, "jobA"), want[i].a);
        assert_int_equal(has_job(jobs, n, "jobB"), want[i].b);
        assert_int_equal(has_job(jobs, n, "jobC"), want[i].c);
        cpr_names_free(jobs, n);
    }
    uint8_t *req;
    size_t len;
    assert_status(CPR_OK, cpri_wire_list_jobs_encode(&req, &len));
    assert_status(UA, ch_unary(w.as[NONE], CH_SVC "ListJobs", req, len));
    world_down(&w);
}

typedef struct reload_wait {
    cpri_rpc *rpc;
    cpr_status want;
} reload_wait;

static int list_gives(void *ctx)
{
    reload_wait *r = ctx;
    size_t n, open;
    int has;
    return ch_list(r->rpc, "jobA-1", &n, 1, &has, &open) == r->want;
}

/* SIGHUP reads the file again: a token taken out is refused from then on, a
 * new one works, and calls of the tokens kept go on. */
static void test_sighup_reload(void **unused)
{
    (void)unused;
    world w;
    world_up(&w);
    committed_part(&w, "jobA-1", 1);
    cpri_rpc *fresh = open_as(w.d.addr, "fresh-0123456789abcdef");
    size_t n, open;
    int has;
    assert_status(UA, ch_list(fresh, "jobA-1", &n, 1, &has, &open));
    assert_status(OK, ch_list(w.as[READ], "jobA-1", &n, 1, &has, &open));

    ch_write_private(w.auth, TOK_ADMIN " * admin\n"
                       "fresh-0123456789abcdef jobA-1 read\n");
    assert_int_equal(kill(w.d.pid, SIGHUP), 0);
    reload_wait r = {fresh, OK};
    assert_true(ch_poll(list_gives, &r, CH_TIMEOUT_S));
    assert_status(UA, ch_list(w.as[READ], "jobA-1", &n, 1, &has, &open));
    assert_status(OK, ch_list(w.as[ADMIN], "jobA-1", &n, 1, &has, &open));
    /* The new rule is for jobA-1 alone. */
    assert_status(PD, ch_list(fresh, "jobA-2", &n, 1, &has, &open));
    cpri_rpc_close(fresh);
    world_down(&w);
}

/* The client library sends cpr_client_options.token, or $CPR_TOKEN. */
static void test_client_library_token(void **unused)
{
    (void)unused;
    world w;
    world_up(&w);
    char target[512];
    snprintf(target, sizeof target, "grpc://%s", w.d.addr);
    cpr_client *c = NULL;
    cpr_client_options o = {.token = TOK_WRITE, .no_retries = 1};
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    cpr_part_spec spec = {.id = {"jobA-lib", 0, 1}, .kind = CPR_KIND_FULL, .num_shards = 1,
                          .tables = &ch_table, .n_tables = 1};
    cpr_part *p = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_status(CPR_OK, cpr_part_commit(&p));
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_client_list(c, "jobA-lib", &parts, &n));
    assert_int_equal(n, 1);
    free(parts);
    /* A job the token has no right on. */
    spec.id.job = "jobB-lib";
    assert_status(PD, cpr_client_begin(c, &spec, &p));
    cpr_client_close(c);

    /* From the environment, when the option is not set. */
    setenv("CPR_TOKEN", TOK_READ, 1);
    cpr_client_options none = {.no_retries = 1};
    assert_status(CPR_OK, cpr_client_open(target, &none, &c));
    assert_status(CPR_OK, cpr_client_list(c, "jobA-lib", &parts, &n));
    free(parts);
    spec.id.job = "jobA-lib2";
    assert_status(PD, cpr_client_begin(c, &spec, &p));
    cpr_client_close(c);
    unsetenv("CPR_TOKEN");

    /* A token with whitespace cannot be sent as a header: refused at open. */
    cpr_client_options bad = {.token = "two words"};
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_open(target, &bad, &c));
    world_down(&w);
}

/* An auth file that does not parse keeps ckptd from starting, naming the
 * line; a short token is refused. */
static void test_bad_auth_file(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-auth-bad");
    char auth[4096], data[4096];
    snprintf(auth, sizeof auth, "%s/auth", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    static const char *const bad[] = {
        TOK_READ " jobA read,fly\n",       /* unknown right */
        "short jobA read\n",               /* token too short */
        TOK_READ " job/A read\n",          /* not a job pattern */
        TOK_READ " jobA\n",                /* two fields */
        TOK_READ " jobA read extra\n",     /* four */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ch_write_private(auth, bad[i]);
        const char *const extra[] = {"--auth-file", auth, NULL};
        cpri_ckptd_proc d;
        assert_status(CPR_UNAVAILABLE, cpri_ckptd_spawn(CKPTD_PATH_FOR_TEST, data, NULL, extra,
                                                        &d));
    }
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_rpc_every_right),
        cmocka_unit_test(test_list_jobs_filtered),
        cmocka_unit_test(test_sighup_reload),
        cmocka_unit_test(test_client_library_token),
        cmocka_unit_test(test_bad_auth_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
