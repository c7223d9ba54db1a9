/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd's gRPC server on the C core (design in server.h).
 *
 * Lifecycle of a call: the acceptor requests it on the server's queue with a
 * completion queue of its own bound to the call (call_ctx.cq); when it
 * arrives, a handler thread takes over and runs the method as sequential
 * code: each step is one grpc_call_start_batch followed by waiting on the
 * call's own queue, where that batch is the only one outstanding. The
 * acceptor immediately requests the next call of the same method.
 *
 * Invariants
 *  V1. A call_ctx belongs to the acceptor until its request completes, then
 *      to exactly one handler thread, which frees it.
 *  V2. At most one batch per call is outstanding, so the next event on
 *      call_ctx.cq is the completion of the batch just started. A batch
 *      that moves a stream's message is waited for at most idle_timeout_s;
 *      then the call is cancelled and the wait goes on until the batch
 *      completes (failed), so V2 still holds for the final batch.
 *  V3. `active` counts handler threads. Stop cancels every call, joins the
 *      acceptor (which returns at the shutdown notification, so no handler
 *      starts after it), then waits for `active` to reach zero: no handler
 *      outlives the server or the store.
 */
#define _GNU_SOURCE
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/block.h"
#include "cpr/crc32c.h"
#include "cpr_common.h"
#include "server.h"
#include "wire.h"

#define BLOB_CHUNK_BYTES (1u << 20)
#define MAX_TOUCHED_PARTS 64
#define STREAM_WINDOW_BYTES (8 << 20)
#define DEFAULT_IDLE_TIMEOUT_S 600.0
/* HTTP/2 keepalive: ping every 30 s, drop the connection if no ack in 10 s.
 * Clients ping every 30 s (client/rpc.c): accept pings 10 s apart. */
#define KEEPALIVE_TIME_MS 30000
#define KEEPALIVE_TIMEOUT_MS 10000
#define MIN_RECV_PING_INTERVAL_MS 10000

typedef struct call_ctx call_ctx;
typedef void (*handler_fn)(call_ctx *c);
typedef enum rpc_kind { RPC_UNARY, RPC_CLIENT_STREAM, RPC_SERVER_STREAM } rpc_kind;

typedef struct method {
    const char *path;
    rpc_kind kind;
    handler_fn fn;
} method;

struct call_ctx {
    cpr_server *srv;
    const method *m;
    size_t method_index;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_completion_queue *cq; /* bound to the call (V2) */
    int sent_initial;
    int generic;               /* an unregistered method: answered UNIMPLEMENTED */
    grpc_call_details details; /* generic calls only */
};

struct cpr_server {
    cpr_store *store;
    grpc_server *server;
    grpc_completion_queue *cq; /* new-call notifications */
    void *handles[16];
    pthread_t acceptor;
    int acceptor_started;
    pthread_mutex_t mu;
    pthread_cond_t idle;
    unsigned active, max_calls; /* V3 */
    double idle_timeout_s;
    int stopping;
    int shutdown_tag;
};

static void h_begin(call_ctx *c);
static void h_put_rows(call_ctx *c);
static void h_put_blob(call_ctx *c);
static void h_commit(call_ctx *c);
static void h_abort(call_ctx *c);
static void h_list(call_ctx *c);
static void h_restore(call_ctx *c);
static void h_get_blob(call_ctx *c);
static void h_stats(call_ctx *c);
static void h_health(call_ctx *c);
static void h_list_jobs(call_ctx *c);
static void h_verify(call_ctx *c);
static void h_gc(call_ctx *c);
static void h_get_recovery(call_ctx *c);
static void h_put_recovery(call_ctx *c);
static int finish_code(call_ctx *c, grpc_status_code code, const char *msg, uint8_t *resp,
                       size_t resp_len);

static const method methods[] = {
    {"/cpr.v1.Checkpoint/Begin", RPC_UNARY, h_begin},
    {"/cpr.v1.Checkpoint/PutRows", RPC_CLIENT_STREAM, h_put_rows},
    {"/cpr.v1.Checkpoint/PutBlob", RPC_CLIENT_STREAM, h_put_blob},
    {"/cpr.v1.Checkpoint/Commit", RPC_UNARY, h_commit},
    {"/cpr.v1.Checkpoint/Abort", RPC_UNARY, h_abort},
    {"/cpr.v1.Checkpoint/List", RPC_UNARY, h_list},
    {"/cpr.v1.Checkpoint/Restore", RPC_SERVER_STREAM, h_restore},
    {"/cpr.v1.Checkpoint/GetBlob", RPC_SERVER_STREAM, h_get_blob},
    {"/cpr.v1.Checkpoint/Stats", RPC_UNARY, h_stats},
    {"/grpc.health.v1.Health/Check", RPC_UNARY, h_health},
    {"/cpr.v1.Checkpoint/ListJobs", RPC_UNARY, h_list_jobs},
    {"/cpr.v1.Checkpoint/Verify", RPC_UNARY, h_verify},
    {"/cpr.v1.Checkpoint/Gc", RPC_UNARY, h_gc},
    {"/cpr.v1.Checkpoint/GetRecovery", RPC_UNARY, h_get_recovery},
    {"/cpr.v1.Checkpoint/PutRecovery", RPC_UNARY, h_put_recovery},
};
#define N_METHODS (sizeof methods / sizeof methods[0])
_Static_assert(N_METHODS <= sizeof ((cpr_server *)0)->handles /
                            sizeof ((cpr_server *)0)->handles[0], "grow cpr_server.handles");

/* Any other method: one generic request is kept outstanding so such calls
 * are answered at once instead of waiting (and piling up) forever. */
static void h_unimplemented(call_ctx *c)
{
    char msg[300];
    snprintf(msg, sizeof msg, "ckptd does not serve %.*s",
             (int)GRPC_SLICE_LENGTH(c->details.method),
             (const char *)GRPC_SLICE_START_PTR(c->details.method));
    finish_code(c, GRPC_STATUS_UNIMPLEMENTED, msg, NULL, 0);
}

static const method generic_method = {"(unregistered method)", RPC_UNARY, h_unimplemented};

/* ---- batches ------------------------------------------------------------------- */

typedef enum batch_result { BATCH_OK, BATCH_FAILED, BATCH_IDLE } batch_result;

/* Which way a stream's batch moves a message: how long it may wait. */
typedef enum stream_dir { NOT_STREAMING, RECEIVING, SENDING } stream_dir;

/* What a client hears when ckptd gives up on a quiet stream. */
static void idle_reason(const call_ctx *c, stream_dir dir, char *why, size_t cap)
{
    if (dir == RECEIVING)
        snprintf(why, cap, "ckptd: no message arrived on this stream for %g s "
                 "(--idle-part-timeout-s): the call was cancelled and the parts it wrote "
                 "to aborted; begin them again", c->srv->idle_timeout_s);
    else
        snprintf(why, cap, "ckptd: the client read no message of this stream for %g s "
                 "(--idle-part-timeout-s): the call was cancelled", c->srv->idle_timeout_s);
}

/* Start one batch and wait for it (V2). A stream's batch is waited for at
 * most idle_timeout_s; then the call is cancelled, with the reason, and the
 * result is BATCH_IDLE. */
static batch_result run_batch_for(call_ctx *c, grpc_op *ops, size_t n, stream_dir dir)
{
    gpr_timespec forever = gpr_inf_future(GPR_CLOCK_MONOTONIC);
    gpr_timespec until = forever;
    if (dir != NOT_STREAMING)
        until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                             gpr_time_from_millis((int64_t)(c->srv->idle_timeout_s * 1000),
                                                  GPR_TIMESPAN));
    if (grpc_call_start_batch(c->call, ops, n, c, NULL) != GRPC_CALL_OK)
        return BATCH_FAILED;
    grpc_event ev = grpc_completion_queue_next(c->cq, until, NULL);
    if (ev.type != GRPC_QUEUE_TIMEOUT)
        return ev.type == GRPC_OP_COMPLETE && ev.success ? BATCH_OK : BATCH_FAILED;
    char why[256];
    idle_reason(c, dir, why, sizeof why);
    grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED, why, NULL);
    grpc_completion_queue_next(c->cq, forever, NULL); /* the batch, failed by the cancel */
    return BATCH_IDLE;
}

static int run_batch(call_ctx *c, grpc_op *ops, size_t n)
{
    return run_batch_for(c, ops, n, NOT_STREAMING) == BATCH_OK;
}

static int send_initial(call_ctx *c)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_INITIAL_METADATA;
    c->sent_initial = 1;
    return run_batch(c, &op, 1);
}

static grpc_byte_buffer *to_buffer(uint8_t *bytes, size_t len)
{
    grpc_slice slice = grpc_slice_new(bytes, len, free); /* takes `bytes` */
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

/* Send one message of a server stream; takes `bytes`. A client that reads
 * nothing for idle_timeout_s is cut off (BATCH_IDLE). */
static batch_result send_message(call_ctx *c, uint8_t *bytes, size_t len)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = to_buffer(bytes, len);
    batch_result r = run_batch_for(c, &op, 1, SENDING);
    grpc_byte_buffer_destroy(op.data.send_message.send_message);
    return r;
}

/* The status for a server stream's failed send. */
static cpr_status send_failed(call_ctx *c, batch_result r, const char *during)
{
    if (r == BATCH_IDLE)
        return cpr_fail(CPR_TIMEOUT, "the client read nothing for %g s during the %s; "
                        "the call was cancelled", c->srv->idle_timeout_s, during);
    return cpr_fail(CPR_UNAVAILABLE, "the client went away during the %s", during);
}

/* Final batch: optional response (taken), a status with its message.
 * Returns 1 if the client had cancelled the call (gone, or gave up). */
static int finish_code(call_ctx *c, grpc_status_code code, const char *msg, uint8_t *resp,
                       size_t resp_len)
{
    grpc_op ops[4];
    size_t n = 0;
    int cancelled = 0;
    grpc_slice details = grpc_slice_from_copied_string(msg);
    memset(ops, 0, sizeof ops);
    if (!c->sent_initial)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (resp && code == GRPC_STATUS_OK) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = to_buffer(resp, resp_len);
        resp = NULL;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details = &details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &cancelled;
    c->sent_initial = 1;
    if (!run_batch(c, ops, n))
        cancelled = 1;
    for (size_t i = 0; i < n; i++)
        if (ops[i].op == GRPC_OP_SEND_MESSAGE)
            grpc_byte_buffer_destroy(ops[i].data.send_message.send_message);
    grpc_slice_unref(details);
    free(resp);
    return cancelled;
}

static int finish(call_ctx *c, cpr_status st, uint8_t *resp, size_t resp_len)
{
    if (st && st != CPR_NOT_FOUND)
        cpr_log(CPR_LOG_INFO, "%s: %s: %s", c->m->path, cpr_status_name(st), cpr_errmsg());
    return finish_code(c, (grpc_status_code)cpr_status_grpc(st), st ? cpr_errmsg() : "", resp,
                       resp_len);
}

/* The payload of a unary or server-streaming call, as one slice. */
static grpc_slice payload_slice(call_ctx *c)
{
    grpc_byte_buffer_reader reader;
    if (!c->payload || !grpc_byte_buffer_reader_init(&reader, c->payload))
        return grpc_empty_slice();
    grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    return s;
}

#define PAYLOAD(s) GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s)

/* ---- unary methods ----------------------------------------------------------------- */

static void h_begin(call_ctx *c)
{
    grpc_slice s = payload_slice(c);
    cpr_wire_begin b;
    cpr_status st = cpr_wire_begin_decode(PAYLOAD(s), &b);
    if (st == CPR_OK) {
        st = cpr_store_begin(c->srv->store, &b.spec);
        cpr_wire_begin_release(&b);
    }
    grpc_slice_unref(s);
    finish(c, st, st ? NULL : calloc(1, 1), 0); /* BeginResponse is empty */
}

/* Commit and Abort: decode a part id, act on it, answer with an empty message. */
static void part_call(call_ctx *c, cpr_status (*decode)(const void *, size_t, cpr_wire_part *),
                      int commit)
{
    grpc_slice s = payload_slice(c);
    cpr_wire_part p;
    cpr_status st = decode(PAYLOAD(s), &p);
    if (st == CPR_OK) {
        st = commit ? cpr_store_commit(c->srv->store, &p.id, p.rows)
                    : cpr_store_abort(c->srv->store, &p.id);
        cpr_wire_part_release(&p);
    }
    grpc_slice_unref(s);
    finish(c, st, st ? NULL : calloc(1, 1), 0); /* Commit/AbortResponse are empty */
}

static void h_commit(call_ctx *c) { part_call(c, cpr_wire_commit_decode, 1); }
static void h_abort(call_ctx *c) { part_call(c, cpr_wire_abort_decode, 0); }

static void h_list(call_ctx *c)
{
    grpc_slice s = payload_slice(c);
    cpr_wire_list l;
    cpr_part_info *parts = NULL;
    size_t n = 0, len = 0;
    uint64_t cut = 0;
    uint8_t *resp = NULL;
    cpr_status st = cpr_wire_list_decode(PAYLOAD(s), &l);
    if (st == CPR_OK) {
        st = cpr_store_list(c->srv->store, l.job, &parts, &n);
        if (st == CPR_OK && cpr_store_latest_cut(c->srv->store, l.job, &cut) != CPR_OK)
            cut = 0; /* no consistent cut yet: reported as 0 */
        if (st == CPR_OK)
            st = cpr_wire_list_response_encode(parts, n, cut, &resp, &len);
        cpr_wire_list_release(&l);
    }
    grpc_slice_unref(s);
    free(parts);
    finish(c, st, resp, len);
}

static void h_list_jobs(call_ctx *c)
{
    grpc_slice s = payload_slice(c);
    char **jobs = NULL;
    size_t n = 0, len = 0;
    uint8_t *resp = NULL;
    cpr_status st = cpr_wire_list_jobs_decode(PAYLOAD(s));
    grpc_slice_unref(s);
    if (st == CPR_OK)
        st = cpr_store_list_jobs(c->srv->store, &jobs, &n);
    if (st == CPR_OK)
        st = cpr_wire_list_jobs_response_encode(jobs, n, &resp, &len);
    cpr_names_free(jobs, n);
    finish(c, st, resp, len);
}

/* The first CPR_WIRE_MAX_PROBLEMS problems verify reports, copied. */
typedef struct problem_list {
    cpr_wire_problem items[CPR_WIRE_MAX_PROBLEMS];
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
    l->items[l->n++] = (cpr_wire_problem){what_copy, where_copy};
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
static void h_verify(call_ctx *c)
{
    grpc_slice s = payload_slice(c);
    cpr_wire_list v;
    cpr_verify_report rep = {0};
    problem_list *found = calloc(1, sizeof *found);
    uint8_t *resp = NULL;
    size_t len = 0;
    cpr_status st = found ? cpr_wire_verify_decode(PAYLOAD(s), &v)
                          : cpr_fail(CPR_NO_MEMORY, "out of memory for verify");
    grpc_slice_unref(s);
    if (st == CPR_OK) {
        st = cpr_store_verify(c->srv->store, v.job, keep_problem, found, &rep);
        if (st == CPR_CORRUPT && rep.problems > 0) {
            cpr_log(CPR_LOG_WARN, "verify of %s: %llu problems", v.job ? v.job : "every job",
                    (unsigned long long)rep.problems);
            st = CPR_OK;
        }
        cpr_wire_list_release(&v);
    }
    if (st == CPR_OK)
        st = cpr_wire_verify_response_encode(&rep, found->items, found->n, &resp, &len);
    free_problems(found);
    finish(c, st, resp, len);
}

/* floor > 0: the caller's cut (clients spread over several daemons; keep
 * is then not used); otherwise keep cuts (0: the store's retain_cuts, which
 * is ckptd --retain). */
static cpr_status run_gc(cpr_store *store, const cpr_wire_gc *g, cpr_gc_report *rep)
{
    if (g->floor && !g->job)
        return cpr_fail(CPR_INVALID_ARGUMENT, "Gc with floor %llu needs a job: a floor is "
                        "a checkpoint id of one job", (unsigned long long)g->floor);
    return g->floor ? cpr_store_gc_floor(store, g->job, g->floor, rep)
                    : cpr_store_gc(store, g->job, g->keep, rep);
}

static void h_gc(call_ctx *c)
{
    grpc_slice s = payload_slice(c);
    cpr_wire_gc g;
    cpr_gc_report rep = {0};
    uint8_t *resp = NULL;
    size_t len = 0;
    cpr_status st = cpr_wire_gc_decode(PAYLOAD(s), &g);
    grpc_slice_unref(s);
    if (st == CPR_OK) {
        st = run_gc(c->srv->store, &g, &rep);
        if (st == CPR_OK)
            cpr_log(CPR_LOG_INFO, "gc of %s: floor %llu, %llu parts and %llu leftovers removed, "
                    "%llu row versions dropped meanwhile", g.job ? g.job : "every job",
                    (unsigned long long)rep.floor, (unsigned long long)rep.parts_removed,
                    (unsigned long long)rep.uncommitted_removed,
                    (unsigned long long)rep.versions_removed);
        cpr_wire_gc_release(&g);
    }
    if (st == CPR_OK)
        st = cpr_wire_gc_response_encode(&rep, &resp, &len);
    finish(c, st, resp, len);
}

/* The job's recovery record; a job without one answers generation 0 and an
 * empty plan (not an error). */
static void h_get_recovery(call_ctx *c)
{
    grpc_slice s = payload_slice(c);
    cpr_wire_list g;
    uint64_t generation = 0, written_ms = 0;
    void *plan = NULL;
    size_t plan_len = 0, len = 0;
    uint8_t *resp = NULL;
    cpr_status st = cpr_wire_get_recovery_decode(PAYLOAD(s), &g);
    grpc_slice_unref(s);
    if (st == CPR_OK) {
        st = cpr_store_recovery_get_timed(c->srv->store, g.job, &generation, &plan, &plan_len,
                                          &written_ms);
        if (st == CPR_OK)
            st = cpr_wire_recovery_record_encode(g.job, generation, plan, plan_len, written_ms,
                                                 &resp, &len);
        cpr_wire_list_release(&g);
    }
    free(plan);
    finish(c, st, resp, len);
}

/* Compare-and-set; the answer (the new record) is sent only once it is
 * durable. A lost race is FAILED_PRECONDITION naming the current generation. */
static void h_put_recovery(call_ctx *c)
{
    grpc_slice s = payload_slice(c);
    cpr_wire_recovery p;
    uint64_t generation = 0, written_ms = 0;
    size_t len = 0;
    uint8_t *resp = NULL;
    cpr_status st = cpr_wire_put_recovery_decode(PAYLOAD(s), &p);
    if (st == CPR_OK) {
        st = cpr_store_recovery_put_timed(c->srv->store, p.job, p.generation, p.plan, p.len,
                                          &generation, &written_ms);
        if (st == CPR_OK) {
            cpr_log(CPR_LOG_INFO, "recovery record of %s: generation %llu (%zu-byte plan)",
                    p.job, (unsigned long long)generation, p.len);
            /* The plan is the caller's own: not echoed back. */
            st = cpr_wire_recovery_record_encode(p.job, generation, NULL, 0, written_ms, &resp,
                                                 &len);
        }
        cpr_wire_recovery_release(&p);
    }
    grpc_slice_unref(s);
    finish(c, st, resp, len);
}

static void h_stats(call_ctx *c)
{
    cpr_store_stats stats;
    uint8_t *resp = NULL;
    size_t len = 0;
    cpr_status st = cpr_store_stats_get(c->srv->store, &stats);
    if (st == CPR_OK)
        st = cpr_wire_stats_response_encode(&stats, &resp, &len);
    finish(c, st, resp, len);
}

/* grpc.health.v1.HealthCheckResponse{status: SERVING}: field 1, varint 1. */
static void h_health(call_ctx *c)
{
    uint8_t *resp = malloc(2);
    cpr_status st = resp ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory");
    if (resp) {
        resp[0] = 0x08;
        resp[1] = 0x01;
    }
    finish(c, st, resp, 2);
}

/* ---- client streams ------------------------------------------------------------------ */

/* Parts a stream wrote to, aborted if it ends abnormally. */
typedef struct touched {
    char jobs[MAX_TOUCHED_PARTS][CPR_NAME_MAX + 1];
    cpr_part_id ids[MAX_TOUCHED_PARTS];
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
static void touch_part(touched *t, const cpr_part_id *id)
{
    if (touched_before(t, id))
        return;
    if (t->n == MAX_TOUCHED_PARTS)
        BUG("a stream wrote to a part may_touch refused");
    snprintf(t->jobs[t->n], sizeof t->jobs[0], "%s", id->job);
    t->ids[t->n] = (cpr_part_id){t->jobs[t->n], id->shard, id->checkpoint};
    t->n++;
}

static void abort_touched(cpr_server *srv, const touched *t)
{
    for (size_t i = 0; i < t->n; i++)
        if (cpr_store_abort(srv->store, &t->ids[i]) == CPR_OK)
            cpr_log(CPR_LOG_INFO, "aborted part %s/%u/%llu after its stream broke",
                    t->jobs[i], t->ids[i].shard, (unsigned long long)t->ids[i].checkpoint);
}

/* One received message of a stream as a slice; *end at end of stream.
 * BATCH_FAILED: the stream broke (client gone, cancelled, deadline);
 * BATCH_IDLE: nothing arrived for idle_timeout_s, the call is cancelled. */
static batch_result recv_message(call_ctx *c, grpc_slice *out, int *end)
{
    grpc_op op;
    grpc_byte_buffer *bb = NULL;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &bb;
    batch_result r = run_batch_for(c, &op, 1, RECEIVING);
    if (r != BATCH_OK) {
        if (bb) /* arrived as the call was cancelled */
            grpc_byte_buffer_destroy(bb);
        return r;
    }
    *end = bb == NULL;
    if (bb) {
        grpc_byte_buffer_reader reader;
        grpc_byte_buffer_reader_init(&reader, bb);
        *out = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        grpc_byte_buffer_destroy(bb);
    }
    return BATCH_OK;
}

typedef cpr_status (*apply_fn)(cpr_server *srv, const uint8_t *msg, size_t len, touched *t,
                               uint64_t *rows, uint64_t *bytes);

static cpr_status apply_rows(cpr_server *srv, const uint8_t *msg, size_t len, touched *t,
                             uint64_t *rows, uint64_t *bytes)
{
    cpr_wire_rows r;
    cpr_status st = cpr_wire_rows_decode(msg, len, &r);
    if (st)
        return st;
    st = may_touch(t, &r.id);
    cpr_block_header h = {0};
    if (st == CPR_OK && r.block) /* stored as it came: the client's encoding */
        st = cpr_store_put_block(srv->store, &r.id, r.block, r.block_len);
    else if (st == CPR_OK)
        st = cpr_store_put_rows(srv->store, &r.id, &r.batch);
    if (st == CPR_OK || st == CPR_IO) /* refused batches leave the part as it was */
        touch_part(t, &r.id);
    if (st == CPR_OK && r.block && cpr_block_header_parse(r.block, r.block_len, &h) == CPR_OK) {
        *rows += h.n;
        *bytes += (uint64_t)h.n * (8 + ((uint64_t)h.dim + h.state_dim) * 4);
    } else if (st == CPR_OK) {
        *rows += r.batch.n;
        *bytes += r.batch.n * 8 + (r.batch.values_count + r.batch.state_count) * 4;
    }
    cpr_wire_rows_release(&r);
    return st;
}

static cpr_status apply_chunk(cpr_server *srv, const uint8_t *msg, size_t len, touched *t,
                              uint64_t *rows, uint64_t *bytes)
{
    cpr_wire_chunk ch;
    (void)rows;
    cpr_status st = cpr_wire_chunk_decode(msg, len, &ch);
    if (st)
        return st;
    st = may_touch(t, &ch.id);
    if (st == CPR_OK)
        st = cpr_store_put_blob(srv->store, &ch.id, ch.name, ch.offset, ch.data, ch.len,
                                ch.crc32c);
    if (st == CPR_OK || st == CPR_IO) /* refused chunks leave the part as it was */
        touch_part(t, &ch.id);
    if (st == CPR_OK)
        *bytes += ch.len;
    cpr_wire_chunk_release(&ch);
    return st;
}

/* Apply every message; any failure aborts the parts the stream wrote to. */
static void client_stream(call_ctx *c, apply_fn apply)
{
    touched *t = calloc(1, sizeof *t);
    uint64_t rows = 0, bytes = 0;
    uint8_t *resp = NULL;
    size_t len = 0;
    int end = 0, broken = !t || !send_initial(c);
    batch_result got = BATCH_OK;
    cpr_status st = t ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory");
    while (st == CPR_OK && !broken && !end) {
        grpc_slice msg = grpc_empty_slice();
        got = recv_message(c, &msg, &end);
        if (got != BATCH_OK)
            broken = 1;
        else if (!end)
            st = apply(c->srv, GRPC_SLICE_START_PTR(msg), GRPC_SLICE_LENGTH(msg), t, &rows,
                       &bytes);
        grpc_slice_unref(msg);
    }
    if (got == BATCH_IDLE)
        st = cpr_fail(CPR_TIMEOUT, "no message for %g s: cancelled the stream",
                      c->srv->idle_timeout_s);
    else if (broken && st == CPR_OK)
        st = cpr_fail(CPR_UNAVAILABLE, "the stream broke before it ended; its parts were "
                      "aborted: begin them again");
    if (st && t) {
        char why[512];
        snprintf(why, sizeof why, "%s", cpr_errmsg());
        abort_touched(c->srv, t);
        cpr_fail(st, "%s (the parts this stream wrote to were aborted: begin them again)",
                 why);
    }
    if (st == CPR_OK)
        st = cpr_wire_put_response_encode(rows, bytes, &resp, &len);
    int cancelled = finish(c, st, resp, len);
    if (cancelled && st == CPR_OK && t) { /* the client went away: an end that is no end */
        cpr_log(CPR_LOG_INFO, "%s: the client cancelled; aborting its parts", c->m->path);
        abort_touched(c->srv, t);
    }
    free(t);
}

static void h_put_rows(call_ctx *c) { client_stream(c, apply_rows); }
static void h_put_blob(call_ctx *c) { client_stream(c, apply_chunk); }

/* ---- server streams ---------------------------------------------------------------------- */

typedef struct restore_out {
    call_ctx *c;
    const char *job;
} restore_out;

static cpr_status send_rows(void *ctx, const cpr_row_batch *b)
{
    restore_out *o = ctx;
    cpr_part_id id = {o->job, 0, 0};
    uint8_t *buf;
    size_t len;
    uint32_t dim = b->n ? (uint32_t)(b->values_count / b->n) : 0;
    uint32_t sdim = b->n ? (uint32_t)(b->state_count / b->n) : 0;
    cpr_status st = cpr_wire_rows_encode(&id, b, dim, sdim, &buf, &len);
    batch_result r = st == CPR_OK ? send_message(o->c, buf, len) : BATCH_OK;
    return r == BATCH_OK ? st : send_failed(o->c, r, "restore");
}

/* RowBatch.block: stored blocks go out as they are on disk. */
static cpr_status send_block(void *ctx, const void *block, size_t block_len)
{
    restore_out *o = ctx;
    cpr_part_id id = {o->job, 0, 0};
    uint8_t *buf;
    size_t len;
    cpr_status st = cpr_wire_block_encode(&id, block, block_len, &buf, &len);
    batch_result r = st == CPR_OK ? send_message(o->c, buf, len) : BATCH_OK;
    return r == BATCH_OK ? st : send_failed(o->c, r, "restore");
}

static void h_restore(call_ctx *c)
{
    grpc_slice s = payload_slice(c);
    cpr_wire_restore q;
    cpr_status st = cpr_wire_restore_decode(PAYLOAD(s), &q);
    if (st == CPR_OK) {
        restore_out o = {c, q.query.job};
        if (!send_initial(c))
            st = cpr_fail(CPR_UNAVAILABLE, "the client went away");
        else if (q.blocks)
            st = cpr_store_restore_blocks(c->srv->store, &q.query, send_block, &o, NULL);
        else
            st = cpr_store_restore(c->srv->store, &q.query, send_rows, &o, NULL);
        cpr_wire_restore_release(&q);
    }
    grpc_slice_unref(s);
    finish(c, st, NULL, 0);
}

typedef struct blob_out {
    call_ctx *c;
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
    cpr_status st = cpr_wire_chunk_encode(o->id, o->name, offset, o->size, data, len,
                                          cpr_crc32c(0, data, len), &buf, &n);
    batch_result r = st == CPR_OK ? send_message(o->c, buf, n) : BATCH_OK;
    return r == BATCH_OK ? st : send_failed(o->c, r, "blob read");
}

static void h_get_blob(call_ctx *c)
{
    grpc_slice s = payload_slice(c);
    cpr_wire_part p;
    cpr_status st = cpr_wire_getblob_decode(PAYLOAD(s), &p);
    if (st == CPR_OK) {
        blob_out o = {c, &p.id, p.name, 0};
        st = send_initial(c) ? cpr_store_read_blob(c->srv->store, &p.id, p.name, &o.size,
                                                   send_chunk, &o)
                             : cpr_fail(CPR_UNAVAILABLE, "the client went away");
        cpr_wire_part_release(&p);
    }
    grpc_slice_unref(s);
    finish(c, st, NULL, 0);
}

/* ---- acceptor and handlers -------------------------------------------------------------------- */

static void free_call(call_ctx *c)
{
    if (c->call)
        grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md);
    if (c->generic)
        grpc_call_details_destroy(&c->details);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    if (c->cq) {
        grpc_completion_queue_shutdown(c->cq);
        while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(c->cq);
    }
    free(c);
}

static void *handler_main(void *arg)
{
    call_ctx *c = arg;
    cpr_server *srv = c->srv;
    pthread_mutex_lock(&srv->mu);
    int over = srv->active > srv->max_calls;
    pthread_mutex_unlock(&srv->mu);
    if (over)
        finish(c, cpr_fail(CPR_UNAVAILABLE, "ckptd is serving its maximum of %u calls; "
                           "retry later", srv->max_calls), NULL, 0);
    else
        c->m->fn(c);
    free_call(c);
    pthread_mutex_lock(&srv->mu);
    if (--srv->active == 0)
        pthread_cond_broadcast(&srv->idle);
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

/* Ask for the next call of method i (the acceptor owns the ctx until it arrives, V1). */
static int request_call(cpr_server *srv, size_t i)
{
    call_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->srv = srv;
    c->method_index = i;
    c->generic = i == N_METHODS;
    c->m = c->generic ? &generic_method : &methods[i];
    grpc_metadata_array_init(&c->md);
    c->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_call_error e;
    if (c->generic) {
        grpc_call_details_init(&c->details);
        e = grpc_server_request_call(srv->server, &c->call, &c->details, &c->md, c->cq, srv->cq, c);
    } else {
        e = grpc_server_request_registered_call(
            srv->server, srv->handles[i], &c->call, &c->deadline, &c->md,
            methods[i].kind == RPC_CLIENT_STREAM ? NULL : &c->payload, c->cq, srv->cq, c);
    }
    if (e != GRPC_CALL_OK) {
        free_call(c);
        return -1;
    }
    return 0;
}

static void dispatch(cpr_server *srv, call_ctx *c)
{
    pthread_t thread;
    pthread_attr_t attr;
    pthread_mutex_lock(&srv->mu);
    srv->active++;
    pthread_mutex_unlock(&srv->mu);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, handler_main, c) != 0) {
        finish(c, cpr_fail(CPR_RESOURCE_EXHAUSTED, "ckptd cannot start a thread"), NULL, 0);
        free_call(c);
        pthread_mutex_lock(&srv->mu);
        if (--srv->active == 0)
            pthread_cond_broadcast(&srv->idle);
        pthread_mutex_unlock(&srv->mu);
    }
    pthread_attr_destroy(&attr);
}

static void *acceptor_main(void *arg)
{
    cpr_server *srv = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN || ev.tag == &srv->shutdown_tag)
            return NULL; /* shut down: no call is dispatched after this (V3) */
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        call_ctx *c = ev.tag;
        size_t i = c->method_index;
        if (!ev.success) { /* the server is shutting down */
            free_call(c);
            continue;
        }
        dispatch(srv, c);
        pthread_mutex_lock(&srv->mu);
        int stopping = srv->stopping;
        pthread_mutex_unlock(&srv->mu);
        if (!stopping && request_call(srv, i) != 0)
            cpr_log(CPR_LOG_ERROR, "cannot request the next %s call", methods[i].path);
    }
}

cpr_status cpr_server_start(cpr_store *store, const cpr_server_options *opts,
                            cpr_server **out, int *port)
{
    cpr_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting the server");
    grpc_init();
    srv->store = store;
    srv->max_calls = opts->max_calls ? opts->max_calls : 1024;
    srv->idle_timeout_s = opts->idle_timeout_s > 0 ? opts->idle_timeout_s
                                                   : DEFAULT_IDLE_TIMEOUT_S;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->idle, NULL);
    grpc_arg arg[] = {
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         {.integer = (int)(opts->max_message_bytes ? opts->max_message_bytes : 64u << 20)}},
        /* Two daemons must never share a port (and so serve each other's jobs). */
        {GRPC_ARG_INTEGER, GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}},
        /* A client host that vanished (no FIN, no RST) is noticed within ~40 s. */
        {GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIME_MS, {.integer = KEEPALIVE_TIME_MS}},
        {GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIMEOUT_MS, {.integer = KEEPALIVE_TIMEOUT_MS}},
        {GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, {.integer = 1}},
        /* Clients' own keepalive pings, also on idle connections, are welcome
         * (the default would answer them with GOAWAY "too_many_pings"). */
        {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
         {.integer = MIN_RECV_PING_INTERVAL_MS}},
        {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, {.integer = 0}},
        /* A stream's receive window: a client may run this far ahead of the
         * handler, so sending and storing overlap (the default, 64 KiB grown
         * by BDP probing, keeps a 1 MiB-message stream mostly waiting). */
        {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, {.integer = STREAM_WINDOW_BYTES}},
    };
    grpc_channel_args args = {sizeof arg / sizeof arg[0], arg};
    srv->server = grpc_server_create(&args, NULL);
    srv->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(srv->server, srv->cq, NULL);
    for (size_t i = 0; i < N_METHODS; i++)
        srv->handles[i] = grpc_server_register_method(
            srv->server, methods[i].path, NULL,
            methods[i].kind == RPC_CLIENT_STREAM ? GRPC_SRM_PAYLOAD_NONE
                                                 : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int bound = grpc_server_add_http2_port(srv->server, opts->listen, creds);
    grpc_server_credentials_release(creds);
    if (bound <= 0) {
        cpr_status st = cpr_fail(CPR_UNAVAILABLE, "cannot listen on %s: the address is "
                                 "invalid or in use", opts->listen);
        grpc_server_destroy(srv->server);
        srv->server = NULL;
        cpr_server_stop(srv);
        return st;
    }
    grpc_server_start(srv->server);
    for (size_t i = 0; i <= N_METHODS; i++) /* N_METHODS: the generic request */
        request_call(srv, i);
    srv->acceptor_started = pthread_create(&srv->acceptor, NULL, acceptor_main, srv) == 0;
    *port = bound;
    *out = srv;
    return CPR_OK;
}

void cpr_server_stop(cpr_server *srv)
{
    if (!srv)
        return;
    pthread_mutex_lock(&srv->mu);
    srv->stopping = 1;
    pthread_mutex_unlock(&srv->mu);
    if (srv->server) {
        grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->shutdown_tag);
        grpc_server_cancel_all_calls(srv->server); /* handlers see their batches fail */
    }
    /* The acceptor returns at the shutdown notification; after the join no
     * new handler can start, so the wait below is final (V3). */
    if (srv->acceptor_started)
        pthread_join(srv->acceptor, NULL);
    pthread_mutex_lock(&srv->mu);
    while (srv->active > 0)
        pthread_cond_wait(&srv->idle, &srv->mu);
    pthread_mutex_unlock(&srv->mu);
    if (srv->cq) { /* requests the shutdown failed may still be queued */
        grpc_completion_queue_shutdown(srv->cq);
        for (;;) {
            grpc_event ev = grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                                       NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN)
                break;
            if (ev.type == GRPC_OP_COMPLETE && ev.tag != &srv->shutdown_tag)
                free_call(ev.tag);
        }
    }
    if (srv->server)
        grpc_server_destroy(srv->server);
    if (srv->cq)
        grpc_completion_queue_destroy(srv->cq);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->idle);
    free(srv);
    grpc_shutdown();
}
