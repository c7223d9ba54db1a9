/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gRPC server's call machinery (design in server.h).
 *
 * Lifecycle of a call: the acceptor requests it on the server's queue with a
 * completion queue of its own bound to the call (cpri_rpc_call.cq); when it
 * arrives, a handler thread takes over and runs the method as sequential
 * code: each step is one grpc_call_start_batch followed by waiting on the
 * call's own queue, where that batch is the only one outstanding. The
 * acceptor immediately requests the next call of the same method.
 *
 * Invariants
 *  V1. A cpri_rpc_call belongs to the acceptor until its request completes,
 *      then to exactly one handler thread, which frees it.
 *  V2. At most one batch per call is outstanding, so the next event on
 *      cpri_rpc_call.cq is the completion of the batch just started. Every
 *      batch (a stream's message, a unary answer, the final status) is
 *      waited for at most idle_timeout_s, the final one (answer and status:
 *      it needs only room to write) at most FINAL_SEND_S plus a second a
 *      MB; then the call is cancelled and the wait goes on until the batch
 *      completes (failed), so V2 still holds for the final batch, and no
 *      client can hold a handler for longer.
 *  V4. With max_memory_bytes, `budget` bounds the message bytes handlers
 *      hold: before a stream's RECV_MESSAGE is started, the call reserves
 *      twice the largest message (gRPC's copy and ours both exist while the
 *      message is made contiguous), and gives back all but what it keeps
 *      once it is: the buffer it keeps for messages that arrive in pieces
 *      (held until the call ends), plus the message itself when it arrived
 *      as one slice, plus the message's size again for the handler's decode
 *      of it (a PutBlob chunk's or a row block's bytes are copied); a unary request is charged before it is copied: twice
 *      its size, plus what its decoding may take (unary_decode_factor and
 *      _slack, the wire layer's W1 bound), so a flood of requests built to
 *      decode large cannot pass the budget. A one-slice message is given back at the next receive or
 *      when the call ends. A reservation waits at most idle_timeout_s for others to
 *      give back, then the call fails with RESOURCE_EXHAUSTED. Without a
 *      pending receive gRPC holds at most a stream's window of it.
 *  V3. `active` counts handler threads, at most max_calls. Stop cancels
 *      every call, joins the acceptor (which returns at the shutdown
 *      notification, so no handler starts after it), then waits for
 *      `active` to reach zero: no handler outlives the server or what its
 *      handlers use.
 *  V5. A call past max_calls (or whose thread cannot start) is refused on
 *      the acceptor by a cancel with its status, never by a batch: a batch
 *      waits for the client to take the answer, and the acceptor (or a
 *      thread per refused call, as before) would wait with it.
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
#include <time.h>

#include "cpr_common.h"
#include "flat.h"
#include "server.h"

#define MAX_METHODS 32
#define STREAM_WINDOW_BYTES (8 << 20)
#define DEFAULT_IDLE_TIMEOUT_S 600.0
/* HTTP/2 keepalive: ping every 30 s, drop the connection if no ack in 10 s.
 * Clients ping every 30 s (rpc/channel.c): accept pings 10 s apart. */
#define KEEPALIVE_TIME_MS 30000
#define KEEPALIVE_TIMEOUT_MS 10000
#define MIN_RECV_PING_INTERVAL_MS 10000

struct cpri_rpc_call {
    cpri_rpc_server *srv;
    const cpri_rpc_method *m;
    size_t method_index;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_slice request;        /* the payload read whole, once */
    int have_request;
    grpc_byte_buffer *received; /* the last message cpri_rpc_recv returned, when it came
                                   as one slice and is handed over in place ... */
    grpc_byte_buffer_reader reader; /* ... through this reader, which owns that slice */
    int have_received;
    cpri_rpc_flat flat;        /* messages that came in pieces, made contiguous: kept and
                                  reused for the call's next ones (flat.h) */
    grpc_completion_queue *cq; /* bound to the call (V2) */
    int sent_initial;
    int generic;               /* an unregistered method: answered UNIMPLEMENTED */
    grpc_call_details details; /* generic calls only */
    gpr_timespec started;      /* dispatched (for the observer) */
    size_t held;               /* bytes of the budget this call holds (V4) */
    uint64_t bytes_in, bytes_out;
    cpr_status final;          /* as finished */
};

struct cpri_rpc_server {
    const cpri_rpc_method *methods;
    size_t n_methods;
    void *app;
    grpc_server *server;
    grpc_completion_queue *cq; /* new-call notifications */
    void *handles[MAX_METHODS];
    pthread_t acceptor;
    int acceptor_started;
    pthread_mutex_t mu;
    pthread_cond_t idle;
    unsigned active, max_calls; /* V3 */
    double idle_timeout_s;
    int stopping;
    int shutdown_tag;
    grpc_resource_quota *quota; /* NULL: none */
    cpri_rpc_call_observer observe;
    void *observe_ctx;
    size_t max_message;        /* the largest request message */
    size_t budget, budget_used; /* V4; budget 0: none. Under mu */
    unsigned unary_decode_factor; /* V4: a unary request's charge */
    size_t unary_decode_slack;
    pthread_cond_t budget_freed;
};

static int finish_code(cpri_rpc_call *c, grpc_status_code code, cpr_status st, const char *msg,
                       uint8_t *resp, size_t resp_len);

/* Any other method: one generic request is kept outstanding so such calls
 * are answered at once instead of waiting (and piling up) forever. */
static void h_unimplemented(cpri_rpc_call *c, void *app)
{
    char msg[300];
    (void)app;
    snprintf(msg, sizeof msg, "ckptd does not serve %.*s",
             (int)GRPC_SLICE_LENGTH(c->details.method),
             (const char *)GRPC_SLICE_START_PTR(c->details.method));
    finish_code(c, GRPC_STATUS_UNIMPLEMENTED, cpr_status_from_grpc(GRPC_STATUS_UNIMPLEMENTED),
                msg, NULL, 0);
}

static const cpri_rpc_method generic_method = {"(unregistered method)", CPR_RPC_UNARY,
                                              h_unimplemented};

/* ---- batches ------------------------------------------------------------------- */

typedef enum batch_result { BATCH_OK, BATCH_FAILED, BATCH_IDLE } batch_result;

/* Which way a batch moves a message: what the client hears if it stalls. */
typedef enum stream_dir { RECEIVING, SENDING } stream_dir;

/* What a client hears when ckptd gives up on a quiet stream after wait_s. */
static void idle_reason(const cpri_rpc_call *c, stream_dir dir, double wait_s, char *why,
                        size_t cap)
{
    if (dir == RECEIVING)
        snprintf(why, cap, "ckptd: no message arrived on this stream for %g s "
                 "(--idle-part-timeout-s): the call was cancelled, and any part it wrote "
                 "to aborted (begin it again)", wait_s);
    else if (wait_s < c->srv->idle_timeout_s)
        snprintf(why, cap, "ckptd: the client took no part of the call's answer and status "
                 "for %g s: the call was cancelled", wait_s);
    else
        snprintf(why, cap, "ckptd: the client read no message of this stream for %g s "
                 "(--idle-part-timeout-s): the call was cancelled", wait_s);
}

/* Start one batch and wait for it (V2). Every batch is waited for at most
 * `wait_s`; then the call is cancelled, with the reason, and the result is
 * BATCH_IDLE. */
static batch_result run_batch_within(cpri_rpc_call *c, grpc_op *ops, size_t n, stream_dir dir,
                                     double wait_s)
{
    gpr_timespec forever = gpr_inf_future(GPR_CLOCK_MONOTONIC);
    gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                      gpr_time_from_millis((int64_t)(wait_s * 1000),
                                                           GPR_TIMESPAN));
    if (grpc_call_start_batch(c->call, ops, n, c, NULL) != GRPC_CALL_OK)
        return BATCH_FAILED;
    grpc_event ev = grpc_completion_queue_next(c->cq, until, NULL);
    if (ev.type != GRPC_QUEUE_TIMEOUT)
        return ev.type == GRPC_OP_COMPLETE && ev.success ? BATCH_OK : BATCH_FAILED;
    char why[256];
    idle_reason(c, dir, wait_s, why, sizeof why);
    grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED, why, NULL);
    grpc_completion_queue_next(c->cq, forever, NULL); /* the batch, failed by the cancel */
    return BATCH_IDLE;
}

/* ... at most idle_timeout_s (a stream's messages). */
static batch_result run_batch_for(cpri_rpc_call *c, grpc_op *ops, size_t n, stream_dir dir)
{
    return run_batch_within(c, ops, n, dir, c->srv->idle_timeout_s);
}

/* Every batch that sends is bounded too (the final status and a unary
 * answer included): a client that never reads cannot hold a handler. */
static int run_batch(cpri_rpc_call *c, grpc_op *ops, size_t n)
{
    return run_batch_for(c, ops, n, SENDING) == BATCH_OK;
}

#define FINAL_SEND_S 10.0
#define FINAL_SEND_MIN_RATE 1e6 /* bytes a second */

static grpc_byte_buffer *to_buffer(uint8_t *bytes, size_t len)
{
    grpc_slice slice = grpc_slice_new(bytes, len, free); /* takes `bytes` */
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

/* Final batch: optional response (taken), a status with its message and
 * the exact cpr_status as trailing metadata "cpr-status". Returns 1 if the
 * client had cancelled the call (gone, or gave up). */
static int finish_code(cpri_rpc_call *c, grpc_status_code code, cpr_status st, const char *msg,
                       uint8_t *resp, size_t resp_len)
{
    grpc_op ops[4];
    size_t n = 0;
    int cancelled = 0;
    grpc_slice details = grpc_slice_from_copied_string(msg);
    grpc_metadata trailer;
    memset(&trailer, 0, sizeof trailer);
    trailer.key = grpc_slice_from_static_string("cpr-status");
    trailer.value = grpc_slice_from_static_string(cpr_status_name(st));
    memset(ops, 0, sizeof ops);
    if (!c->sent_initial)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->final = st;
    if (resp && code == GRPC_STATUS_OK) {
        c->bytes_out += resp_len;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = to_buffer(resp, resp_len);
        resp = NULL;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details = &details;
    if (code != GRPC_STATUS_OK) {
        ops[n].data.send_status_from_server.trailing_metadata_count = 1;
        ops[n].data.send_status_from_server.trailing_metadata = &trailer;
    }
    n++;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &cancelled;
    c->sent_initial = 1;
    /* V2: the final batch within FINAL_SEND_S plus its answer's bytes at
     * FINAL_SEND_MIN_RATE, not idle_timeout_s: it needs nothing from the
     * client but room to write, and a client that gives none (a zero
     * window) held a call slot for the whole idle timeout. */
    double wait_s = FINAL_SEND_S + (double)resp_len / FINAL_SEND_MIN_RATE;
    if (wait_s > c->srv->idle_timeout_s)
        wait_s = c->srv->idle_timeout_s;
    if (run_batch_within(c, ops, n, SENDING, wait_s) != BATCH_OK)
        cancelled = 1;
    for (size_t i = 0; i < n; i++)
        if (ops[i].op == GRPC_OP_SEND_MESSAGE)
            grpc_byte_buffer_destroy(ops[i].data.send_message.send_message);
    grpc_slice_unref(details);
    free(resp);
    return cancelled;
}

/* ---- the message budget (V4) ------------------------------------------------------- */

/* Take n bytes, waiting at most idle_timeout_s. n above the whole budget
 * takes the whole budget. */
static cpr_status budget_take(cpri_rpc_call *c, size_t n)
{
    cpri_rpc_server *srv = c->srv;
    if (!srv->budget)
        return CPR_OK;
    if (n > srv->budget)
        n = srv->budget;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)srv->idle_timeout_s;
    int rc = 0;
    pthread_mutex_lock(&srv->mu);
    while (srv->budget - srv->budget_used < n && rc == 0 && !srv->stopping)
        rc = pthread_cond_timedwait(&srv->budget_freed, &srv->mu, &until);
    int stopping = srv->stopping;
    int ok = srv->budget - srv->budget_used >= n && !stopping;
    if (ok)
        srv->budget_used += n;
    pthread_mutex_unlock(&srv->mu);
    if (stopping)
        return cpr_fail(CPR_UNAVAILABLE, "ckptd is stopping; retry on another node or later");
    if (!ok)
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "ckptd's memory for messages (--max-memory-mb) "
                        "stayed taken by other calls for %g s; retry later",
                        srv->idle_timeout_s);
    c->held += n;
    return CPR_OK;
}

/* Give back all but `keep` of what the call holds. */
static void budget_keep(cpri_rpc_call *c, size_t keep)
{
    cpri_rpc_server *srv = c->srv;
    if (!srv->budget || c->held <= keep)
        return;
    pthread_mutex_lock(&srv->mu);
    srv->budget_used -= c->held - keep;
    pthread_cond_broadcast(&srv->budget_freed);
    pthread_mutex_unlock(&srv->mu);
    c->held = keep;
}

/* ---- the handler's interface (server.h) --------------------------------------------- */

const char *cpri_rpc_call_method(const cpri_rpc_call *c)
{
    return c->m->path;
}

double cpri_rpc_idle_timeout_s(const cpri_rpc_call *c)
{
    return c->srv->idle_timeout_s;
}

static long copy_out(const char *v, size_t n, char *buf, size_t cap)
{
    if (n >= cap || memchr(v, '\0', n))
        return -1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return (long)n;
}

long cpri_rpc_call_header(const cpri_rpc_call *c, const char *key, char *buf, size_t cap)
{
    size_t klen = strlen(key);
    for (size_t i = 0; i < c->md.count; i++) {
        const grpc_slice *k = &c->md.metadata[i].key, *v = &c->md.metadata[i].value;
        if (GRPC_SLICE_LENGTH(*k) == klen && memcmp(GRPC_SLICE_START_PTR(*k), key, klen) == 0)
            return copy_out((const char *)GRPC_SLICE_START_PTR(*v), GRPC_SLICE_LENGTH(*v), buf,
                            cap);
    }
    return -1;
}

long cpri_rpc_call_peer_subject(cpri_rpc_call *c, char *buf, size_t cap)
{
    long n = -1;
    grpc_auth_context *ctx = grpc_call_auth_context(c->call);
    if (!ctx)
        return -1;
    /* Only a verified peer has an identity: with a client CA, TLS refuses
     * any certificate it did not verify before a call exists. */
    if (grpc_auth_context_peer_is_authenticated(ctx)) {
        grpc_auth_property_iterator it =
            grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_SUBJECT_PROPERTY_NAME);
        const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
        if (p)
            n = copy_out(p->value, p->value_length, buf, cap);
    }
    grpc_auth_context_release(ctx);
    return n;
}

void cpri_rpc_request(cpri_rpc_call *c, const uint8_t **msg, size_t *len)
{
    if (!c->have_request) {
        grpc_byte_buffer_reader reader;
        c->request = grpc_empty_slice();
        /* Charged in handler_main, before the handler runs (V4). */
        if (c->payload && grpc_byte_buffer_reader_init(&reader, c->payload)) {
            c->request = grpc_byte_buffer_reader_readall(&reader);
            grpc_byte_buffer_reader_destroy(&reader);
        }
        c->have_request = 1;
        c->bytes_in += GRPC_SLICE_LENGTH(c->request);
    }
    *msg = GRPC_SLICE_START_PTR(c->request);
    *len = GRPC_SLICE_LENGTH(c->request);
}

cpr_status cpri_rpc_start(cpri_rpc_call *c)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_INITIAL_METADATA;
    c->sent_initial = 1;
    return run_batch(c, &op, 1) ? CPR_OK : cpr_fail(CPR_UNAVAILABLE, "the client went away");
}

cpr_status cpri_rpc_send(cpri_rpc_call *c, uint8_t *bytes, size_t len, const char *during)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = to_buffer(bytes, len);
    batch_result r = run_batch_for(c, &op, 1, SENDING);
    grpc_byte_buffer_destroy(op.data.send_message.send_message);
    if (r == BATCH_OK)
        c->bytes_out += len;
    if (r == BATCH_IDLE)
        return cpr_fail(CPR_TIMEOUT, "the client read nothing for %g s during the %s; "
                        "the call was cancelled", c->srv->idle_timeout_s, during);
    if (r != BATCH_OK)
        return cpr_fail(CPR_UNAVAILABLE, "the client went away during the %s", during);
    return CPR_OK;
}

/* What the call keeps between receives (V4): its request and its flat buffer. */
static size_t kept_bytes(const cpri_rpc_call *c)
{
    return (c->have_request ? GRPC_SLICE_LENGTH(c->request) : 0) + c->flat.cap;
}

static void drop_received(cpri_rpc_call *c)
{
    if (c->received) {
        grpc_byte_buffer_reader_destroy(&c->reader);
        grpc_byte_buffer_destroy(c->received);
    }
    c->received = NULL;
    if (c->have_received)
        budget_keep(c, kept_bytes(c));
    c->have_received = 0;
}

cpri_rpc_recv_result cpri_rpc_recv(cpri_rpc_call *c, const uint8_t **msg, size_t *len)
{
    grpc_op op;
    grpc_byte_buffer *bb = NULL;
    drop_received(c);
    if (!c->sent_initial && cpri_rpc_start(c) != CPR_OK)
        return CPR_RPC_BROKEN;
    size_t before = c->held; /* what the call holds besides this receive */
    if (budget_take(c, 2 * c->srv->max_message) != CPR_OK)
        return CPR_RPC_EXHAUSTED;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &bb;
    batch_result r = run_batch_for(c, &op, 1, RECEIVING);
    if (r != BATCH_OK) {
        if (bb) /* arrived as the call was cancelled */
            grpc_byte_buffer_destroy(bb);
        budget_keep(c, before);
        return r == BATCH_IDLE ? CPR_RPC_IDLE : CPR_RPC_BROKEN;
    }
    if (!bb) {
        budget_keep(c, before);
        return CPR_RPC_END;
    }
    int in_place = 0;
    if (cpri_rpc_flatten(bb, &c->reader, &c->flat, msg, len, &in_place) != CPR_OK) {
        grpc_byte_buffer_destroy(bb);
        cpri_log(CPR_LOG_ERROR, "%s: %s", c->m->path, cpr_errmsg());
        budget_keep(c, before);
        return CPR_RPC_BROKEN;
    }
    if (in_place) {
        c->received = bb; /* with c->reader open until drop_received */
    } else {
        grpc_byte_buffer_destroy(bb);
    }
    c->have_received = 1;
    c->bytes_in += *len;
    /* gRPC's copy is gone, or it is the message itself; and its decoding
     * (protobuf-c copies a bytes field: about the message's size) until the
     * next receive (V4) */
    budget_keep(c, kept_bytes(c) + (c->received ? *len : 0) + *len);
    return CPR_RPC_MESSAGE;
}

int cpri_rpc_finish(cpri_rpc_call *c, cpr_status st, uint8_t *resp, size_t resp_len)
{
    if (st && st != CPR_NOT_FOUND)
        cpri_log(CPR_LOG_INFO, "%s: %s: %s", c->m->path, cpr_status_name(st), cpr_errmsg());
    return finish_code(c, (grpc_status_code)cpr_status_grpc(st), st, st ? cpr_errmsg() : "",
                       resp, resp_len);
}

/* ---- acceptor and handlers -------------------------------------------------------------------- */

static void free_call(cpri_rpc_call *c)
{
    if (c->srv)
        budget_keep(c, 0);
    if (c->call)
        grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md);
    if (c->generic)
        grpc_call_details_destroy(&c->details);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    if (c->have_request)
        grpc_slice_unref(c->request);
    drop_received(c);
    free(c->flat.buf);
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
    cpri_rpc_call *c = arg;
    cpri_rpc_server *srv = c->srv;
    cpr_status admitted = CPR_OK; /* within max_calls: dispatch counted it (V3) */
    if (admitted == CPR_OK && c->payload) { /* the request, its copy, its decoding (V4) */
        size_t len = grpc_byte_buffer_length(c->payload);
        size_t charge = (2 + (size_t)srv->unary_decode_factor) * len + srv->unary_decode_slack;
        /* At most half the budget: one that takes all of it waits for every
         * stream's buffers to be given back (up to the idle timeout). */
        if (srv->budget && charge > srv->budget / 2)
            charge = srv->budget / 2 > 2 * len ? srv->budget / 2 : 2 * len;
        admitted = budget_take(c, charge);
    }
    if (admitted)
        cpri_rpc_finish(c, admitted, NULL, 0);
    else
        c->m->fn(c, srv->app);
    if (srv->observe) {
        gpr_timespec took = gpr_time_sub(gpr_now(GPR_CLOCK_MONOTONIC), c->started);
        srv->observe(srv->observe_ctx, c->generic ? srv->n_methods : c->method_index, c->final,
                     c->bytes_in, c->bytes_out, gpr_timespec_to_micros(took) / 1e6);
    }
    free_call(c);
    pthread_mutex_lock(&srv->mu);
    if (--srv->active == 0)
        pthread_cond_broadcast(&srv->idle);
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

/* Ask for the next call of method i (the acceptor owns the ctx until it arrives, V1). */
static int request_call(cpri_rpc_server *srv, size_t i)
{
    cpri_rpc_call *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->srv = srv;
    c->method_index = i;
    c->generic = i == srv->n_methods;
    c->m = c->generic ? &generic_method : &srv->methods[i];
    grpc_metadata_array_init(&c->md);
    c->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_call_error e;
    if (c->generic) {
        grpc_call_details_init(&c->details);
        e = grpc_server_request_call(srv->server, &c->call, &c->details, &c->md, c->cq, srv->cq, c);
    } else {
        e = grpc_server_request_registered_call(
            srv->server, srv->handles[i], &c->call, &c->deadline, &c->md,
            srv->methods[i].kind == CPR_RPC_CLIENT_STREAM ? NULL : &c->payload, c->cq, srv->cq, c);
    }
    if (e != GRPC_CALL_OK) {
        free_call(c);
        return -1;
    }
    return 0;
}

/* V5: a call refused on the acceptor: its status goes out with the cancel
 * (trailers, then a reset), with no batch to wait for, so a client that
 * reads nothing holds neither a thread nor the acceptor. */
static void refuse(cpri_rpc_server *srv, cpri_rpc_call *c, grpc_status_code code,
                   cpr_status st, const char *msg)
{
    grpc_call_cancel_with_status(c->call, code, msg, NULL);
    if (srv->observe)
        srv->observe(srv->observe_ctx, c->generic ? srv->n_methods : c->method_index, st, 0, 0,
                     0.0);
    free_call(c);
}

static void dispatch(cpri_rpc_server *srv, cpri_rpc_call *c)
{
    pthread_t thread;
    pthread_attr_t attr;
    pthread_mutex_lock(&srv->mu);
    int over = srv->active >= srv->max_calls;
    if (!over)
        srv->active++;
    pthread_mutex_unlock(&srv->mu);
    c->started = gpr_now(GPR_CLOCK_MONOTONIC);
    if (over) {
        char msg[128];
        snprintf(msg, sizeof msg, "ckptd is serving its maximum of %u calls; retry later",
                 srv->max_calls);
        refuse(srv, c, GRPC_STATUS_UNAVAILABLE, CPR_UNAVAILABLE, msg);
        return;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, handler_main, c) != 0) {
        refuse(srv, c, GRPC_STATUS_RESOURCE_EXHAUSTED, CPR_RESOURCE_EXHAUSTED,
               "ckptd cannot start a thread for the call; retry later");
        pthread_mutex_lock(&srv->mu);
        if (--srv->active == 0)
            pthread_cond_broadcast(&srv->idle);
        pthread_mutex_unlock(&srv->mu);
    }
    pthread_attr_destroy(&attr);
}

static void *acceptor_main(void *arg)
{
    cpri_rpc_server *srv = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN || ev.tag == &srv->shutdown_tag)
            return NULL; /* shut down: no call is dispatched after this (V3) */
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        cpri_rpc_call *c = ev.tag;
        size_t i = c->method_index;
        if (!ev.success) { /* the server is shutting down */
            free_call(c);
            continue;
        }
        dispatch(srv, c); /* c is the handler's now: not read here again */
        pthread_mutex_lock(&srv->mu);
        int stopping = srv->stopping;
        pthread_mutex_unlock(&srv->mu);
        /* The method's next call: without an outstanding request it would
         * take no call again, so a failure (out of memory) is retried. */
        for (int tries = 0; !stopping && request_call(srv, i) != 0; tries++) {
            const char *path = i == srv->n_methods ? generic_method.path : srv->methods[i].path;
            if (tries == 0)
                cpri_log(CPR_LOG_ERROR, "cannot request the next %s call; retrying", path);
            struct timespec pause = {0, 10 * 1000 * 1000};
            nanosleep(&pause, NULL);
            pthread_mutex_lock(&srv->mu);
            stopping = srv->stopping;
            pthread_mutex_unlock(&srv->mu);
        }
    }
}

/* Plaintext, TLS, or mutual TLS (server.h). NULL if the PEM is refused. */
static grpc_server_credentials *server_credentials(const cpri_rpc_server_options *o)
{
    if (!o->tls_cert_pem)
        return grpc_insecure_server_credentials_create();
    grpc_ssl_pem_key_cert_pair pair = {o->tls_key_pem, o->tls_cert_pem};
    return grpc_ssl_server_credentials_create_ex(
        o->tls_client_ca_pem, &pair, 1,
        o->tls_client_ca_pem ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                             : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
}

cpr_status cpri_rpc_server_start(const cpri_rpc_method *methods, size_t n_methods, void *app,
                                const cpri_rpc_server_options *opts, cpri_rpc_server **out,
                                int *port)
{
    if (n_methods > MAX_METHODS)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%zu methods: a server serves at most %d",
                        n_methods, MAX_METHODS);
    cpri_rpc_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting the server");
    grpc_init();
    srv->methods = methods;
    srv->n_methods = n_methods;
    srv->app = app;
    srv->max_calls = opts->max_calls ? opts->max_calls : 1024;
    srv->unary_decode_factor = opts->unary_decode_factor;
    srv->unary_decode_slack = opts->unary_decode_slack;
    srv->observe = opts->observe;
    srv->observe_ctx = opts->observe_ctx;
    srv->max_message = opts->max_message_bytes ? opts->max_message_bytes : 64u << 20;
    srv->budget = opts->max_memory_bytes;
    if (srv->budget && srv->budget < 2 * srv->max_message)
        srv->budget = 2 * srv->max_message; /* room for one message at least */
    pthread_condattr_t monotonic; /* budget_take waits against CLOCK_MONOTONIC */
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->budget_freed, &monotonic);
    pthread_condattr_destroy(&monotonic);
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
        /* Uncompressed messages only (identity, bit 0). gRPC inflates a
         * compressed message whole before it checks the length: 1.5 MB of
         * gzip took 1.6 GB, before our budget (V4) or a token check saw it.
         * Our clients never compress (rows do not shrink). */
        {GRPC_ARG_INTEGER, GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET, {.integer = 1}},
    };
    grpc_arg bounds[] = {
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_CONCURRENT_STREAMS,
         {.integer = opts->max_streams ? (int)opts->max_streams : 100}},
        {GRPC_ARG_POINTER, GRPC_ARG_RESOURCE_QUOTA, {.pointer = {NULL, NULL}}},
    };
    grpc_arg all[sizeof arg / sizeof arg[0] + 2];
    size_t n_all = sizeof arg / sizeof arg[0];
    memcpy(all, arg, sizeof arg);
    all[n_all++] = bounds[0];
    if (opts->max_memory_bytes) {
        srv->quota = grpc_resource_quota_create("ckptd");
        /* A backstop above ours (V4): under its pressure gRPC resets streams
         * (ENHANCE_YOUR_CALM) rather than making them wait. */
        grpc_resource_quota_resize(srv->quota, 2 * opts->max_memory_bytes);
        bounds[1].value.pointer.p = srv->quota;
        bounds[1].value.pointer.vtable = grpc_resource_quota_arg_vtable();
        all[n_all++] = bounds[1];
    }
    grpc_channel_args args = {n_all, all};
    srv->server = grpc_server_create(&args, NULL);
    srv->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(srv->server, srv->cq, NULL);
    for (size_t i = 0; i < n_methods; i++)
        srv->handles[i] = grpc_server_register_method(
            srv->server, methods[i].path, NULL,
            methods[i].kind == CPR_RPC_CLIENT_STREAM ? GRPC_SRM_PAYLOAD_NONE
                                                 : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    grpc_server_credentials *creds = server_credentials(opts);
    int bound = creds ? grpc_server_add_http2_port(srv->server, opts->listen, creds) : 0;
    if (creds)
        grpc_server_credentials_release(creds);
    if (!creds) {
        grpc_server_destroy(srv->server);
        srv->server = NULL;
        cpri_rpc_server_stop(srv);
        return cpr_fail(CPR_INVALID_ARGUMENT, "the TLS certificate, key or client CA is not "
                        "usable PEM (check the --tls-* files)");
    }
    if (bound <= 0) {
        cpr_status st = opts->tls_cert_pem
            ? cpr_fail(CPR_UNAVAILABLE, "cannot listen on %s with TLS: the address is "
                       "invalid or in use, or the certificate and key are not a pair (the "
                       "lines above say which)", opts->listen)
            : cpr_fail(CPR_UNAVAILABLE, "cannot listen on %s: the address is invalid or in "
                       "use", opts->listen);
        grpc_server_destroy(srv->server);
        srv->server = NULL;
        cpri_rpc_server_stop(srv);
        return st;
    }
    grpc_server_start(srv->server);
    for (size_t i = 0; i <= n_methods; i++) /* n_methods: the generic request */
        request_call(srv, i);
    srv->acceptor_started = pthread_create(&srv->acceptor, NULL, acceptor_main, srv) == 0;
    *port = bound;
    *out = srv;
    return CPR_OK;
}

void cpri_rpc_server_stop(cpri_rpc_server *srv)
{
    if (!srv)
        return;
    pthread_mutex_lock(&srv->mu);
    srv->stopping = 1;
    pthread_cond_broadcast(&srv->budget_freed); /* reservations give up (V4) */
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
    if (srv->quota)
        grpc_resource_quota_unref(srv->quota);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->idle);
    pthread_cond_destroy(&srv->budget_freed);
    free(srv);
    grpc_shutdown();
}
