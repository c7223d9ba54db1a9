/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd's service: the handlers of cpr.v1.Checkpoint (and
 * grpc.health.v1.Health/Check) over a cpr_store, as sequential functions on
 * rpc/server.h's call machinery. Each decodes its request (rpc/wire.h),
 * calls the store, and finishes with the store's status and message.
 *
 * A PutRows/PutBlob stream that ends abnormally (client gone, cancelled,
 * idle, bad message) aborts the parts it wrote to: nothing half-written
 * stays open or becomes visible. One stream may write to at most 64 parts
 * (a 65th is refused with RESOURCE_EXHAUSTED before anything is written).
 *
 * Parts belong to their writers (leases.h): Begin answers with a lease that
 * every later put, commit and abort of the part must present; a request
 * without it is refused before the store sees it.
 *
 * With --auth-file (auth.h) every call but Health is identified when it
 * starts and each request is checked for its right on its job after it is
 * decoded and before the store sees it: a refused call changes nothing.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/block.h"
#include "cpr/codec.h"
#include "cpr/crc32c.h"
#include "auth.h"
#include "cpr_common.h"
#include "leases.h"
#include "part_fence.h" /* ckptd/store/: leases.h L5 */
#include "restore_gate.h"
#include "server.h"  /* rpc/: the call machinery */
#include "service.h"
#include "wire.h"

#define MAX_TOUCHED_PARTS 64
/* A Restore stream waits for a slot while the holders make progress; after
 * this long without any, it goes in over the limit (restore_gate.c G2). */
#define RESTORE_STALL_S 1.0

struct cpri_server {
    cpr_store *store;
    cpri_rpc_server *rpc;
    cpri_leases *leases;
    cpri_restore_gate *restore_gate; /* Restore streams at once */
    cpri_auth *auth; /* borrowed; NULL: every call is allowed (auth.h, A4) */
    _Atomic uint64_t plans_sent;     /* Restores answered with their plan (direct reads) */
    _Atomic uint64_t direct_commits; /* Commits of direct parts (direct writes) */
};

/* ---- who a call is --------------------------------------------------------------- */

#define MAX_AUTHORIZATION 4200 /* "Bearer " and a token of at most 4096 */
#define MAX_SUBJECT 1100

/* The call's principal (auth.h, A1); *p stays NULL without an auth file. */
static cpr_status identify(cpri_rpc_call *c, cpri_server *srv, cpri_principal **p)
{
    *p = NULL;
    if (!srv->auth)
        return CPR_OK;
    char *authz = malloc(MAX_AUTHORIZATION), subject[MAX_SUBJECT];
    if (!authz)
        return cpr_fail(CPR_NO_MEMORY, "out of memory");
    long a = cpri_rpc_call_header(c, "authorization", authz, MAX_AUTHORIZATION);
    long s = cpri_rpc_call_peer_subject(c, subject, sizeof subject);
    cpr_status st = cpri_auth_identify(srv->auth, a >= 0 ? authz : NULL, s >= 0 ? subject : NULL,
                                       p);
    free(authz);
    return st;
}

/* Identify the call and check one right on `job` (NULL: store-wide). */
static cpr_status allow(cpri_rpc_call *c, cpri_server *srv, const char *job, unsigned right,
                        const char *op)
{
    cpri_principal *p;
    cpr_status st = identify(c, srv, &p);
    if (st == CPR_OK)
        st = cpri_principal_check(p, job, right, op);
    cpri_principal_free(p);
    return st;
}

/* ---- unary methods ----------------------------------------------------------------- */

/* A client's `direct` names storage this daemon has (`mine`, NULL: none). */
static int names_mine(const char *direct, const char *mine)
{
    return direct && *direct && mine && strcmp(direct, mine) == 0;
}

/* Direct writes: the store the client names (BeginRequest.direct) is this
 * daemon's own, in a pool other processes reach. */
static int my_store(const cpri_server *srv, const char *direct)
{
    return names_mine(direct, cpr_store_shared_id(srv->store));
}

/* Commit of a part whose rows are in its own segment (CommitRequest.direct):
 * its index to the store, then the usual commit. */
static cpr_status commit_direct(cpri_server *srv, const cpri_wire_part *p)
{
    cpr_store_block_ref *refs = NULL;
    size_t n = 0;
    cpr_status st = cpri_wire_segment_index_decode(p->segment_index, p->index_len, &refs, &n);
    if (st == CPR_OK && (n || p->segment_bytes))
        st = cpr_store_put_segment(srv->store, &p->id, refs, n, p->segment_bytes);
    free(refs);
    if (st == CPR_OK)
        st = cpr_store_commit_blobs(srv->store, &p->id, p->rows, p->blobs, p->blob_bytes);
    if (st == CPR_OK)
        atomic_fetch_add(&srv->direct_commits, 1);
    return st;
}

static void h_begin(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    const uint8_t *req;
    size_t req_len;
    cpri_rpc_request(c, &req, &req_len);
    cpri_wire_begin b;
    uint64_t lease = 0;
    uint8_t *resp = NULL;
    size_t len = 0;
    cpr_status st = cpri_wire_begin_decode(req, req_len, &b);
    if (st == CPR_OK) {
        st = allow(c, srv, b.spec.id.job, CPRI_RIGHT_WRITE, "Begin");
        uint64_t incarnation = 0;
        if (st == CPR_OK)
            st = cpri_store_begin_incarnation(srv->store, &b.spec, &incarnation);
        int begun = st == CPR_OK;
        if (st == CPR_ALREADY_EXISTS &&
            (lease = cpri_leases_resume(srv->leases, &b.spec.id, b.token)) != 0) {
            /* leases.h L4: open under this token: its writer's Begin again */
            cpri_log(CPR_LOG_INFO, "Begin of %s/%u/%llu again under its token: the writer "
                     "did not hear the first answer", b.spec.id.job, b.spec.id.shard,
                     (unsigned long long)b.spec.id.checkpoint);
            st = CPR_OK;
            begun = 1; /* as if begun here: a failure below aborts it */
        } else if (st == CPR_OK) {
            st = cpri_leases_grant(srv->leases, &b.spec.id, b.token, incarnation, &lease);
        }
        char segment[CPR_STORE_OBJECT_MAX] = "";
        if (st == CPR_OK && my_store(srv, b.direct) &&
            cpr_store_direct_segment(srv->store, &b.spec.id, segment, sizeof segment) != CPR_OK) {
            cpri_log(CPR_LOG_WARN, "Begin of %s/%u/%llu: no direct writes (%s); the part "
                     "takes its rows here", b.spec.id.job, b.spec.id.shard,
                     (unsigned long long)b.spec.id.checkpoint, cpr_errmsg());
            segment[0] = '\0';
        }
        if (st == CPR_OK)
            st = cpri_wire_begin_response_encode_segment(lease, segment, &resp, &len);
        if (st && lease) /* begun, but its writer cannot be told its lease */
            cpri_leases_drop(srv->leases, &b.spec.id, lease);
        if (st && begun) {
            char why[512];
            snprintf(why, sizeof why, "%s", cpr_errmsg());
            cpri_store_fence(incarnation); /* the part begun here (0: the resumed one) */
            cpr_store_abort(srv->store, &b.spec.id); /* nothing may stay open unleased */
            cpri_store_fence(0);
            cpr_fail(st, "%s", why);
        }
        cpri_wire_begin_release(&b);
    }
    int cancelled = cpri_rpc_finish(c, st, resp, len);
    if (cancelled && st == CPR_OK) /* nobody learnt the lease: the idle reaper ends it */
        cpri_log(CPR_LOG_INFO, "Begin: the client cancelled after its part was begun");
}

/* Commit and Abort: decode a part id, act on it, answer with an empty message. */
static void part_call(cpri_rpc_call *c, cpri_server *srv,
                      cpr_status (*decode)(const void *, size_t, cpri_wire_part *), int commit)
{
    const uint8_t *req;
    size_t req_len;
    cpri_rpc_request(c, &req, &req_len);
    cpri_wire_part p;
    cpr_status st = decode(req, req_len, &p);
    if (st == CPR_OK) {
        /* An Abort without a lease is an override (BeginResponse in the
         * .proto); everything else presents the writer's lease. */
        int override = !commit && p.lease == 0;
        uint64_t lease = p.lease, incarnation = 0; /* an override acts on what is open */
        st = allow(c, srv, p.id.job, override ? CPRI_RIGHT_ADMIN : CPRI_RIGHT_WRITE,
                   commit ? "Commit" : override ? "Abort by id (without the writer's lease)"
                                                : "Abort");
        if (st) {
            lease = 0;
        } else if (!override) {
            st = cpri_leases_check(srv->leases, &p.id, p.lease, commit ? "commit" : "abort",
                                   &incarnation);
        } else if ((lease = cpri_leases_get(srv->leases, &p.id)) != 0) {
            cpri_log(CPR_LOG_INFO, "abort of %s/%u/%llu by id, without its writer's lease",
                    p.id.job, p.id.shard, (unsigned long long)p.id.checkpoint);
        }
        cpri_store_fence(incarnation); /* L5 */
        if (st == CPR_OK)
            st = !commit       ? cpr_store_abort(srv->store, &p.id)
                 : p.direct      ? commit_direct(srv, &p)
                 : p.check_blobs ? cpr_store_commit_blobs(srv->store, &p.id, p.rows, p.blobs,
                                                          p.blob_bytes)
                                 : cpr_store_commit(srv->store, &p.id, p.rows);
        cpri_store_fence(0);
        if (lease && (st == CPR_OK || (!commit && st == CPR_NOT_FOUND)))
            cpri_leases_drop(srv->leases, &p.id, lease); /* L1: the part is gone */
        cpri_wire_part_release(&p);
    }
    cpri_rpc_finish(c, st, st ? NULL : calloc(1, 1), 0); /* Commit/AbortResponse are empty */
}

static void h_commit(cpri_rpc_call *c, void *app) { part_call(c, app, cpri_wire_commit_decode, 1); }
static void h_abort(cpri_rpc_call *c, void *app) { part_call(c, app, cpri_wire_abort_decode, 0); }

static void h_list(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    const uint8_t *req;
    size_t req_len;
    cpri_rpc_request(c, &req, &req_len);
    cpri_wire_list l;
    cpr_part_info *parts = NULL;
    size_t n = 0, len = 0;
    uint64_t cut = 0;
    uint8_t *resp = NULL;
    cpr_status st = cpri_wire_list_decode(req, req_len, &l);
    if (st == CPR_OK) {
        st = allow(c, srv, l.job, CPRI_RIGHT_READ, "List");
        if (st == CPR_OK)
            st = cpr_store_list_cut(srv->store, l.job, &parts, &n, &cut); /* cut 0: none */
        char **where = st == CPR_OK && l.locations ? calloc(n + 1, sizeof *where) : NULL;
        if (st == CPR_OK && l.locations && !where)
            st = cpr_fail(CPR_NO_MEMORY, "out of memory listing %zu parts", n);
        for (size_t i = 0; where && i < n; i++) { /* cprctl where: each part's place */
            char buf[2048];
            cpr_part_id id = {l.job, parts[i].shard, parts[i].checkpoint};
            if (cpr_store_part_location(srv->store, &id, buf, sizeof buf) != CPR_OK)
                snprintf(buf, sizeof buf, "unknown: %s", cpr_errmsg());
            where[i] = strdup(buf);
        }
        if (st == CPR_OK)
            st = cpri_wire_list_response_encode(parts, n, cut, where,
                                                cpr_store_shared_id(srv->store), &resp, &len);
        if (where)
            cpr_names_free(where, n);
        cpri_wire_list_release(&l);
    }
    free(parts);
    cpri_rpc_finish(c, st, resp, len);
}

static void h_list_jobs(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    const uint8_t *req;
    size_t req_len;
    cpri_rpc_request(c, &req, &req_len);
    char **jobs = NULL;
    size_t n = 0, len = 0;
    uint8_t *resp = NULL;
    cpri_principal *who = NULL;
    cpr_status st = cpri_wire_list_jobs_decode(req, req_len);
    if (st == CPR_OK)
        st = identify(c, srv, &who);
    if (st == CPR_OK)
        st = cpr_store_list_jobs(srv->store, &jobs, &n);
    size_t shown = 0; /* only the jobs the caller may read */
    for (size_t i = 0; st == CPR_OK && i < n; i++) {
        if (cpri_principal_may(who, jobs[i], CPRI_RIGHT_READ))
            jobs[shown++] = jobs[i];
        else
            free(jobs[i]);
    }
    if (st == CPR_OK)
        n = shown;
    cpri_principal_free(who);
    if (st == CPR_OK)
        st = cpri_wire_list_jobs_response_encode(jobs, n, &resp, &len);
    cpr_names_free(jobs, n);
    cpri_rpc_finish(c, st, resp, len);
}

/* The first CPR_WIRE_MAX_PROBLEMS problems verify reports, copied. */
typedef struct problem_list {
    cpri_wire_problem items[CPR_WIRE_MAX_PROBLEMS];
    size_t n;
} problem_list;

static void keep_problem(void *ctx, const char *what, const char *where)
{
    problem_list *l = ctx;
    if (l->n == CPR_WIRE_MAX_PROBLEMS)
        return; /* counted in the report, not detailed */
    char *what_copy = strdup(what), *where_copy = strdup(where);
    if (!what_copy || !where_copy) { /* out of memory: counted, not detailed */
        free(what_copy);
        free(where_copy);
        return;
    }
    l->items[l->n++] = (cpri_wire_problem){what_copy, where_copy};
}

static void free_problems(problem_list *l)
{
    for (size_t i = 0; l && i < l->n; i++) {
        free((char *)l->items[i].what);
        free((char *)l->items[i].where);
    }
    free(l);
}

/* A damaged store is no failure of the call: the report is the answer. */
static void h_verify(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    const uint8_t *req;
    size_t req_len;
    cpri_rpc_request(c, &req, &req_len);
    cpri_wire_list v;
    cpr_verify_report rep = {0};
    problem_list *found = calloc(1, sizeof *found);
    uint8_t *resp = NULL;
    size_t len = 0;
    cpr_status st = found ? cpri_wire_verify_decode(req, req_len, &v)
                          : cpr_fail(CPR_NO_MEMORY, "out of memory for verify");
    if (st == CPR_OK) {
        st = allow(c, srv, v.job, CPRI_RIGHT_ADMIN, "Verify");
        if (st == CPR_OK)
            st = cpr_store_verify(srv->store, v.job, keep_problem, found, &rep);
        if (st == CPR_CORRUPT && rep.problems > 0) {
            cpri_log(CPR_LOG_WARN, "verify of %s: %llu problems", v.job ? v.job : "every job",
                    (unsigned long long)rep.problems);
            st = CPR_OK;
        }
        cpri_wire_list_release(&v);
    }
    if (st == CPR_OK)
        st = cpri_wire_verify_response_encode(&rep, found->items, found->n, &resp, &len);
    free_problems(found);
    cpri_rpc_finish(c, st, resp, len);
}

/* floor > 0: the caller's cut (clients spread over several daemons; keep
 * is then not used); otherwise keep cuts (0: the store's retain_cuts, which
 * is ckptd --retain). */
static cpr_status run_gc(cpr_store *store, const cpri_wire_gc *g, cpr_gc_report *rep)
{
    if (g->floor && !g->job)
        return cpr_fail(CPR_INVALID_ARGUMENT, "Gc with floor %llu needs a job: a floor is "
                        "a checkpoint id of one job", (unsigned long long)g->floor);
    if (g->floor && g->floor_is_cut)
        return cpr_store_gc_floor_cut(store, g->job, g->floor, rep);
    return g->floor ? cpr_store_gc_floor(store, g->job, g->floor, rep)
                    : cpr_store_gc(store, g->job, g->keep, rep);
}

static void h_gc(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    const uint8_t *req;
    size_t req_len;
    cpri_rpc_request(c, &req, &req_len);
    cpri_wire_gc g;
    cpr_gc_report rep = {0};
    uint8_t *resp = NULL;
    size_t len = 0;
    cpr_status st = cpri_wire_gc_decode(req, req_len, &g);
    if (st == CPR_OK) {
        st = allow(c, srv, g.job, g.job ? CPRI_RIGHT_WRITE : CPRI_RIGHT_ADMIN, "Gc");
        if (st == CPR_OK)
            st = run_gc(srv->store, &g, &rep);
        if (st == CPR_OK)
            cpri_log(CPR_LOG_INFO, "gc of %s: floor %llu, %llu parts and %llu leftovers removed, "
                    "%llu row versions dropped meanwhile", g.job ? g.job : "every job",
                    (unsigned long long)rep.floor, (unsigned long long)rep.parts_removed,
                    (unsigned long long)rep.uncommitted_removed,
                    (unsigned long long)rep.versions_removed);
        cpri_wire_gc_release(&g);
    }
    if (st == CPR_OK)
        st = cpri_wire_gc_response_encode(&rep, &resp, &len);
    cpri_rpc_finish(c, st, resp, len);
}

/* The job's recovery record; a job without one answers generation 0 and an
 * empty plan (not an error). */
static void h_get_recovery(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    const uint8_t *req;
    size_t req_len;
    cpri_rpc_request(c, &req, &req_len);
    cpri_wire_list g;
    uint64_t generation = 0, written_ms = 0;
    void *plan = NULL;
    size_t plan_len = 0, len = 0;
    uint8_t *resp = NULL;
    cpr_status st = cpri_wire_get_recovery_decode(req, req_len, &g);
    if (st == CPR_OK) {
        st = allow(c, srv, g.job, CPRI_RIGHT_READ, "GetRecovery");
        if (st == CPR_OK)
            st = cpr_store_recovery_get(srv->store, g.job, &generation, &plan, &plan_len,
                                        &written_ms);
        if (st == CPR_OK)
            st = cpri_wire_recovery_record_encode(g.job, generation, plan, plan_len, written_ms,
                                                 &resp, &len);
        cpri_wire_list_release(&g);
    }
    free(plan);
    cpri_rpc_finish(c, st, resp, len);
}

/* Compare-and-set; the answer (the new record) is sent only once it is
 * durable. A lost race is FAILED_PRECONDITION naming the current generation. */
static void h_put_recovery(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    const uint8_t *req;
    size_t req_len;
    cpri_rpc_request(c, &req, &req_len);
    cpri_wire_recovery p;
    uint64_t generation = 0, written_ms = 0;
    size_t len = 0;
    uint8_t *resp = NULL;
    cpr_status st = cpri_wire_put_recovery_decode(req, req_len, &p);
    if (st == CPR_OK) {
        st = allow(c, srv, p.job, CPRI_RIGHT_WRITE, "PutRecovery");
        if (st == CPR_OK)
            st = cpr_store_recovery_put(srv->store, p.job, p.generation, p.plan, p.len,
                                        &generation, &written_ms);
        if (st == CPR_OK) {
            cpri_log(CPR_LOG_INFO, "recovery record of %s: generation %llu (%zu-byte plan)",
                    p.job, (unsigned long long)generation, p.len);
            /* The plan is the caller's own: not echoed back. */
            st = cpri_wire_recovery_record_encode(p.job, generation, NULL, 0, written_ms, &resp,
                                                 &len);
        }
        cpri_wire_recovery_release(&p);
    }
    cpri_rpc_finish(c, st, resp, len);
}

static void h_stats(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    cpr_store_stats stats;
    uint8_t *resp = NULL;
    size_t len = 0;
    cpr_status st = allow(c, srv, NULL, CPRI_RIGHT_ADMIN, "Stats");
    if (st == CPR_OK)
        st = cpr_store_stats_get(srv->store, &stats);
    if (st == CPR_OK)
        st = cpri_wire_stats_response_encode(&stats, &resp, &len);
    cpri_rpc_finish(c, st, resp, len);
}

/* grpc.health.v1.HealthCheckResponse{status}: field 1, varint; SERVING (1)
 * while the store can commit, NOT_SERVING (2) while it cannot (a full disk,
 * cpr_store_health), so that probes and load balancers see it. */
static void h_health(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    uint8_t *resp = malloc(2);
    cpr_status st = resp ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory");
    if (resp) {
        int serving = cpr_store_health(srv->store) == CPR_OK;
        resp[0] = 0x08;
        resp[1] = serving ? 0x01 : 0x02;
    }
    cpri_rpc_finish(c, st, resp, 2);
}

/* ---- client streams ------------------------------------------------------------------ */

/* Parts a stream wrote to, aborted if it ends abnormally. */
typedef struct touched {
    char jobs[MAX_TOUCHED_PARTS][CPR_NAME_MAX + 1];
    cpr_part_id ids[MAX_TOUCHED_PARTS];
    uint64_t leases[MAX_TOUCHED_PARTS]; /* each part's, as its messages presented */
    uint64_t incarnations[MAX_TOUCHED_PARTS]; /* and its store part's (leases.h L5) */
    size_t n;
} touched;

static int touched_before(const touched *t, const cpr_part_id *id)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->ids[i].shard == id->shard && t->ids[i].checkpoint == id->checkpoint &&
            strcmp(t->jobs[i], id->job) == 0)
            return 1;
    return 0;
}

/* Before writing: may this stream write to `id`? Every part it writes to
 * must be tracked (to be aborted if the stream breaks), so a part past the
 * limit is refused before anything of it is written. */
static cpr_status may_touch(const touched *t, const cpr_part_id *id)
{
    if (t->n < MAX_TOUCHED_PARTS || touched_before(t, id))
        return CPR_OK;
    return cpr_fail(CPR_RESOURCE_EXHAUSTED, "one stream may write to at most %d parts; "
                    "this message is for a %dth (%.128s/%u/%llu): write it on another "
                    "stream", MAX_TOUCHED_PARTS, MAX_TOUCHED_PARTS + 1, id->job, id->shard,
                    (unsigned long long)id->checkpoint);
}

/* After writing (may_touch said yes, so there is room). */
static void touch_part(touched *t, const cpr_part_id *id, uint64_t lease, uint64_t incarnation)
{
    if (touched_before(t, id))
        return;
    if (t->n == MAX_TOUCHED_PARTS)
        BUG("a stream wrote to a part may_touch refused");
    snprintf(t->jobs[t->n], sizeof t->jobs[0], "%s", id->job);
    t->ids[t->n] = (cpr_part_id){t->jobs[t->n], id->shard, id->checkpoint};
    t->leases[t->n] = lease;
    t->incarnations[t->n] = incarnation;
    t->n++;
}

/* Abort what the stream wrote to; returns how many parts that was. */
static size_t abort_touched(cpri_server *srv, const touched *t)
{
    size_t aborted = 0;
    for (size_t i = 0; i < t->n; i++)
        /* Only the part this stream wrote to: if the reaper ended it and a
         * writer began the id again, the lease tells them apart. */
        if (cpri_leases_get(srv->leases, &t->ids[i]) == t->leases[i]) {
            cpri_store_fence(t->incarnations[i]); /* L5: not a part begun since */
            cpr_status st = cpr_store_abort(srv->store, &t->ids[i]);
            cpri_store_fence(0);
            if (st != CPR_OK)
                continue;
            cpri_leases_drop(srv->leases, &t->ids[i], t->leases[i]); /* L1 */
            cpri_log(CPR_LOG_INFO, "aborted part %s/%u/%llu after its stream broke",
                    t->jobs[i], t->ids[i].shard, (unsigned long long)t->ids[i].checkpoint);
            aborted++;
        }
    return aborted;
}

typedef cpr_status (*apply_fn)(cpri_server *srv, const cpri_principal *who, const uint8_t *msg,
                               size_t len, touched *t, uint64_t *rows, uint64_t *bytes);

/* The store took the call and failed writing it (its disk or pool: I/O, a
 * RADOS user without the right, a cluster that does not answer): the part
 * is not as it was, and the stream's failure aborts it. The store's other
 * refusals (a bad batch, a checksum) leave the part as it was. */
static int write_failed(cpr_status st)
{
    return st == CPR_IO || st == CPR_PERMISSION_DENIED || st == CPR_UNAVAILABLE;
}

static cpr_status apply_rows(cpri_server *srv, const cpri_principal *who, const uint8_t *msg,
                             size_t len, touched *t, uint64_t *rows, uint64_t *bytes)
{
    cpri_wire_rows r;
    cpr_status st = cpri_wire_rows_decode(msg, len, &r);
    if (st)
        return st;
    if (r.plan || r.versions) { /* what a restore answers with, never what it is sent */
        cpri_wire_rows_release(&r);
        return cpr_fail(CPR_INVALID_ARGUMENT, "PutRows: a RowBatch to store has no plan and "
                        "no versions (restore answers carry them); send ids, values and state, "
                        "or a block");
    }
    st = cpri_principal_check(who, r.id.job, CPRI_RIGHT_WRITE, "PutRows");
    uint64_t incarnation = 0;
    if (st == CPR_OK)
        st = cpri_leases_check(srv->leases, &r.id, r.lease, "put_rows", &incarnation);
    if (st == CPR_OK)
        st = may_touch(t, &r.id);
    cpr_block_header h = {0};
    int stored = st == CPR_OK;
    cpri_store_fence(incarnation); /* leases.h L5 */
    if (st == CPR_OK && r.block) /* stored as it came: the client's encoding */
        st = cpr_store_put_block(srv->store, &r.id, r.block, r.block_len);
    else if (st == CPR_OK)
        st = cpr_store_put_rows(srv->store, &r.id, &r.batch);
    cpri_store_fence(0);
    if (st == CPR_OK || (stored && write_failed(st))) /* refused batches leave the part */
        touch_part(t, &r.id, r.lease, incarnation);
    if (st == CPR_OK && r.block && cpr_block_header_parse(r.block, r.block_len, &h) == CPR_OK) {
        *rows += h.n;
        *bytes += (uint64_t)h.n * (8 + cpr_codec_row_bytes((cpr_codec)h.codec, h.dim) +
                                   (uint64_t)h.state_dim * 4);
    } else if (st == CPR_OK) {
        *rows += r.batch.n;
        *bytes += r.batch.n * 8 + (r.batch.values_count + r.batch.state_count) * 4;
    }
    cpri_wire_rows_release(&r);
    return st;
}

static cpr_status apply_chunk(cpri_server *srv, const cpri_principal *who, const uint8_t *msg,
                              size_t len, touched *t, uint64_t *rows, uint64_t *bytes)
{
    cpri_wire_chunk ch;
    (void)rows;
    cpr_status st = cpri_wire_chunk_decode(msg, len, &ch);
    if (st)
        return st;
    st = cpri_principal_check(who, ch.id.job, CPRI_RIGHT_WRITE, "PutBlob");
    uint64_t incarnation = 0;
    if (st == CPR_OK)
        st = cpri_leases_check(srv->leases, &ch.id, ch.lease, "put_blob", &incarnation);
    if (st == CPR_OK)
        st = may_touch(t, &ch.id);
    int stored = st == CPR_OK;
    cpri_store_fence(incarnation); /* leases.h L5 */
    if (st == CPR_OK)
        st = cpr_store_put_blob(srv->store, &ch.id, ch.name, ch.offset, ch.data, ch.len,
                                ch.crc32c);
    cpri_store_fence(0);
    if (st == CPR_OK || (stored && write_failed(st))) /* refused chunks leave the part */
        touch_part(t, &ch.id, ch.lease, incarnation);
    if (st == CPR_OK)
        *bytes += ch.len;
    cpri_wire_chunk_release(&ch);
    return st;
}

/* Apply every message; any failure aborts the parts the stream wrote to. */
static void client_stream(cpri_rpc_call *c, cpri_server *srv, apply_fn apply)
{
    touched *t = calloc(1, sizeof *t);
    uint64_t rows = 0, bytes = 0;
    uint8_t *resp = NULL;
    size_t len = 0;
    cpri_rpc_recv_result got = CPR_RPC_MESSAGE;
    cpri_principal *who = NULL;
    cpr_status st = t ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory");
    if (st == CPR_OK)
        st = identify(c, srv, &who); /* once, before any message (auth.h, A1) */
    if (st == CPR_OK && !cpri_principal_may_some(who, CPRI_RIGHT_WRITE))
        st = cpr_fail(CPR_PERMISSION_DENIED, "%s writes parts, which needs the write right, "
                      "and %s has it on no job", cpri_rpc_call_method(c),
                      cpri_principal_name(who));
    while (st == CPR_OK && got == CPR_RPC_MESSAGE) {
        const uint8_t *msg;
        size_t msg_len;
        got = cpri_rpc_recv(c, &msg, &msg_len);
        if (got == CPR_RPC_MESSAGE)
            st = apply(srv, who, msg, msg_len, t, &rows, &bytes);
    }
    cpri_principal_free(who);
    if (got == CPR_RPC_EXHAUSTED)
        st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "%s", cpr_errmsg());
    else if (got == CPR_RPC_IDLE)
        st = cpr_fail(CPR_TIMEOUT, "no message for %g s: cancelled the stream",
                      cpri_rpc_idle_timeout_s(c));
    else if (got == CPR_RPC_BROKEN && st == CPR_OK)
        st = cpr_fail(CPR_UNAVAILABLE, "the stream broke before it ended");
    if (st && t) { /* say so only of parts that were aborted: the others stay open */
        char why[512];
        snprintf(why, sizeof why, "%s", cpr_errmsg());
        size_t aborted = abort_touched(srv, t);
        if (aborted)
            cpr_fail(st, "%s (the %zu part%s this stream wrote to %s aborted: begin %s again)",
                     why, aborted, aborted == 1 ? "" : "s", aborted == 1 ? "was" : "were",
                     aborted == 1 ? "it" : "them");
    }
    if (st == CPR_OK)
        st = cpri_wire_put_response_encode(rows, bytes, &resp, &len);
    int cancelled = cpri_rpc_finish(c, st, resp, len);
    if (cancelled && st == CPR_OK && t) { /* the client went away: an end that is no end */
        cpri_log(CPR_LOG_INFO, "%s: the client cancelled; aborting its parts",
                cpri_rpc_call_method(c));
        abort_touched(srv, t);
    }
    free(t);
}

static void h_put_rows(cpri_rpc_call *c, void *app) { client_stream(c, app, apply_rows); }
static void h_put_blob(cpri_rpc_call *c, void *app) { client_stream(c, app, apply_chunk); }

/* ---- server streams ---------------------------------------------------------------------- */

typedef struct restore_out {
    cpri_rpc_call *c;
    const char *job;
    cpri_restore_gate *gate; /* told of every message sent (restore_gate.c G2); NULL
                                for a plan, which holds no slot */
} restore_out;

static cpr_status restore_send(restore_out *o, uint8_t *buf, size_t len)
{
    cpr_status st = cpri_rpc_send(o->c, buf, len, "restore");
    if (st == CPR_OK && o->gate) /* a plan holds no slot: its sends are no one's progress */
        cpri_restore_gate_progress(o->gate);
    return st;
}

static cpr_status send_rows(void *ctx, const cpr_row_batch *b)
{
    restore_out *o = ctx;
    cpr_part_id id = {o->job, 0, 0};
    uint8_t *buf;
    size_t len;
    uint32_t dim = b->n ? (uint32_t)(b->values_count / b->n) : 0;
    uint32_t sdim = b->n ? (uint32_t)(b->state_count / b->n) : 0;
    cpr_status st = cpri_wire_rows_encode(&id, 0, b, dim, sdim, &buf, &len);
    return st == CPR_OK ? restore_send(o, buf, len) : st;
}

/* RestoreRequest.versions: rows with the checkpoint that wrote each. */
static cpr_status send_versioned_rows(void *ctx, const cpr_row_batch *b, const uint64_t *versions)
{
    restore_out *o = ctx;
    uint8_t *buf;
    size_t len;
    uint32_t dim = b->n ? (uint32_t)(b->values_count / b->n) : 0;
    uint32_t sdim = b->n ? (uint32_t)(b->state_count / b->n) : 0;
    cpr_status st = cpri_wire_rows_encode_versions(b, dim, sdim, versions, &buf, &len);
    return st == CPR_OK ? restore_send(o, buf, len) : st;
}

/* RestoreRequest.versions with blocks: RowBatch.block, and for a stored
 * block passed whole RowBatch.checkpoint, the version of all its rows. */
static cpr_status send_versioned_block(void *ctx, const void *block, size_t block_len,
                                       uint64_t version)
{
    restore_out *o = ctx;
    cpr_part_id id = {o->job, 0, version};
    uint8_t *buf;
    size_t len;
    cpr_status st = cpri_wire_block_encode(&id, 0, block, block_len, &buf, &len);
    return st == CPR_OK ? restore_send(o, buf, len) : st;
}

/* RowBatch.block: stored blocks go out as they are on disk. */
static cpr_status send_block(void *ctx, const void *block, size_t block_len)
{
    restore_out *o = ctx;
    cpr_part_id id = {o->job, 0, 0};
    uint8_t *buf;
    size_t len;
    cpr_status st = cpri_wire_block_encode(&id, 0, block, block_len, &buf, &len);
    return st == CPR_OK ? restore_send(o, buf, len) : st;
}

/* Direct reads: asked for, of this daemon's own store's storage, in a plan
 * version this daemon writes. */
static int direct_reads(const cpri_server *srv, const cpri_wire_restore *q)
{
    /* the pool's name, or a local directory's (direct.c D1): a client that
     * names it reads the same storage */
    return names_mine(q->direct, cpr_store_read_id(srv->store)) &&
           q->plan_version == CPR_STORE_PLAN_VERSION;
}

#define PLAN_PIECE_BYTES ((size_t)1 << 20) /* under any gRPC message limit */

/* RowBatch.plan: the restore's plan, in pieces; the client reads the rows. */
static cpr_status send_plan(cpri_server *srv, const cpr_restore_query *q, restore_out *o)
{
    void *plan = NULL;
    size_t len = 0;
    cpr_status st = cpr_store_restore_plan(srv->store, q, &plan, &len, NULL);
    for (size_t at = 0; st == CPR_OK && at < len; at += PLAN_PIECE_BYTES) {
        uint8_t *buf;
        size_t n;
        size_t piece = len - at < PLAN_PIECE_BYTES ? len - at : PLAN_PIECE_BYTES;
        st = cpri_wire_plan_encode((const char *)plan + at, piece, &buf, &n);
        if (st == CPR_OK)
            st = restore_send(o, buf, n);
    }
    free(plan);
    if (st == CPR_OK)
        atomic_fetch_add(&srv->plans_sent, 1);
    return st;
}

static void h_restore(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    const uint8_t *req;
    size_t req_len;
    cpri_rpc_request(c, &req, &req_len);
    cpri_wire_restore q;
    cpr_status st = cpri_wire_restore_decode(req, req_len, &q);
    if (st == CPR_OK) {
        restore_out o = {c, q.query.job, srv->restore_gate};
        st = allow(c, srv, q.query.job, CPRI_RIGHT_READ, "Restore");
        if (st == CPR_OK)
            st = cpri_rpc_start(c);
        if (st == CPR_OK && !q.versions && direct_reads(srv, &q)) {
            /* A plan takes no slot: the gate bounds what streaming restores
             * read and send here (restore_gate.c), and a plan is a catalog
             * lookup; the client reads the rows from the pool. */
            o.gate = NULL;
            st = send_plan(srv, &q.query, &o);
        } else if (st == CPR_OK) { /* refused, or the client went away: no slot */
            if (cpri_restore_gate_enter(srv->restore_gate)) {
                cpri_restore_gate_stats gs;
                cpri_restore_gate_stats_get(srv->restore_gate, &gs);
                cpri_log(CPR_LOG_WARN, "Restore of job %s: let in over the limit of %u streams "
                        "at once, after %.1f s in which none of them sent anything (their "
                        "clients are not reading them?)", q.query.job, gs.slots,
                        RESTORE_STALL_S);
            }
            if (q.versions && q.blocks) /* a merge's input: rows with their versions */
                st = cpr_store_restore_blocks_versions(srv->store, &q.query,
                                                       send_versioned_block, &o, NULL);
            else if (q.versions)
                st = cpr_store_restore_versions(srv->store, &q.query, send_versioned_rows, &o,
                                                NULL);
            else if (q.blocks)
                st = cpr_store_restore_blocks(srv->store, &q.query, send_block, &o, NULL);
            else
                st = cpr_store_restore(srv->store, &q.query, send_rows, &o, NULL);
            cpri_restore_gate_leave(srv->restore_gate);
        }
        cpri_wire_restore_release(&q);
    }
    cpri_rpc_finish(c, st, NULL, 0);
}

typedef struct blob_out {
    cpri_rpc_call *c;
    const cpr_part_id *id;
    const char *name;
    uint64_t size;
} blob_out;

/* Every chunk carries the blob's total size: cpr_store_read_blob sets
 * o->size before the first chunk. */
static cpr_status send_chunk(void *ctx, uint64_t offset, const void *data, size_t len)
{
    blob_out *o = ctx;
    uint8_t *buf;
    size_t n;
    cpr_status st = cpri_wire_chunk_encode(o->id, 0, o->name, offset, o->size, data, len,
                                          cpr_crc32c(0, data, len), &buf, &n);
    return st == CPR_OK ? cpri_rpc_send(o->c, buf, n, "blob read") : st;
}

static void h_get_blob(cpri_rpc_call *c, void *app)
{
    cpri_server *srv = app;
    const uint8_t *req;
    size_t req_len;
    cpri_rpc_request(c, &req, &req_len);
    cpri_wire_part p;
    cpr_status st = cpri_wire_getblob_decode(req, req_len, &p);
    if (st == CPR_OK) {
        blob_out o = {c, &p.id, p.name, 0};
        st = allow(c, srv, p.id.job, CPRI_RIGHT_READ, "GetBlob");
        if (st == CPR_OK)
            st = cpri_rpc_start(c);
        if (st == CPR_OK)
            st = cpr_store_read_blob(srv->store, &p.id, p.name, &o.size, send_chunk, &o);
        cpri_wire_part_release(&p);
    }
    cpri_rpc_finish(c, st, NULL, 0);
}

/* ---- the service ------------------------------------------------------------------ */

static const cpri_rpc_method methods[] = {
    {"/cpr.v1.Checkpoint/Begin", CPR_RPC_UNARY, h_begin},
    {"/cpr.v1.Checkpoint/PutRows", CPR_RPC_CLIENT_STREAM, h_put_rows},
    {"/cpr.v1.Checkpoint/PutBlob", CPR_RPC_CLIENT_STREAM, h_put_blob},
    {"/cpr.v1.Checkpoint/Commit", CPR_RPC_UNARY, h_commit},
    {"/cpr.v1.Checkpoint/Abort", CPR_RPC_UNARY, h_abort},
    {"/cpr.v1.Checkpoint/List", CPR_RPC_UNARY, h_list},
    {"/cpr.v1.Checkpoint/Restore", CPR_RPC_SERVER_STREAM, h_restore},
    {"/cpr.v1.Checkpoint/GetBlob", CPR_RPC_SERVER_STREAM, h_get_blob},
    {"/cpr.v1.Checkpoint/Stats", CPR_RPC_UNARY, h_stats},
    {"/grpc.health.v1.Health/Check", CPR_RPC_UNARY, h_health},
    {"/cpr.v1.Checkpoint/ListJobs", CPR_RPC_UNARY, h_list_jobs},
    {"/cpr.v1.Checkpoint/Verify", CPR_RPC_UNARY, h_verify},
    {"/cpr.v1.Checkpoint/Gc", CPR_RPC_UNARY, h_gc},
    {"/cpr.v1.Checkpoint/GetRecovery", CPR_RPC_UNARY, h_get_recovery},
    {"/cpr.v1.Checkpoint/PutRecovery", CPR_RPC_UNARY, h_put_recovery},
};

const cpri_rpc_method *cpri_service_methods(size_t *n)
{
    *n = sizeof methods / sizeof methods[0];
    return methods;
}

/* The service with a gate of `slots` Restore streams (0: no limit). */
static cpr_status service_create(cpr_store *store, cpri_auth *auth, unsigned slots,
                                 cpri_server **out)
{
    cpri_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting the server");
    srv->store = store;
    srv->auth = auth;
    cpr_status st = cpri_leases_create(store, &srv->leases);
    if (st == CPR_OK)
        st = cpri_restore_gate_create(slots, RESTORE_STALL_S, &srv->restore_gate);
    if (st) {
        cpri_leases_destroy(srv->leases);
        free(srv);
        return st;
    }
    *out = srv;
    return CPR_OK;
}

cpr_status cpri_service_create(cpr_store *store, cpri_auth *auth, cpri_server **out)
{
    return service_create(store, auth, cpri_restore_gate_default_slots(), out);
}

void cpri_service_destroy(cpri_server *srv)
{
    if (!srv)
        return;
    cpri_leases_destroy(srv->leases);
    cpri_restore_gate_destroy(srv->restore_gate);
    free(srv);
}

cpr_status cpri_server_start(cpr_store *store, cpri_auth *auth, const cpri_server_options *opts,
                            cpri_server **out, int *port)
{
    cpri_server *srv = NULL; /* service_create leaves it unset on failure */
    int streams = opts ? opts->restore_streams : 0;
    unsigned slots = streams < 0 ? 0 : streams ? (unsigned)streams
                                               : cpri_restore_gate_default_slots();
    cpr_status st = service_create(store, auth, slots, &srv);
    if (st == CPR_OK)
        st = cpri_rpc_server_start(methods, sizeof methods / sizeof methods[0], srv,
                                   opts ? &opts->rpc : NULL, &srv->rpc, port);
    if (st) {
        cpri_service_destroy(srv);
        return st;
    }
    *out = srv;
    return CPR_OK;
}

void cpri_server_restore_stats(cpri_server *srv, cpri_restore_gate_stats *out)
{
    cpri_restore_gate_stats_get(srv->restore_gate, out);
}

uint64_t cpri_server_direct_commits(cpri_server *srv)
{
    return atomic_load(&srv->direct_commits);
}

uint64_t cpri_server_plans_sent(cpri_server *srv)
{
    return atomic_load(&srv->plans_sent);
}

void cpri_server_stop(cpri_server *srv)
{
    if (!srv)
        return;
    cpri_rpc_server_stop(srv->rpc);
    srv->rpc = NULL;
    cpri_service_destroy(srv);
}
