/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gRPC C core client transport (see rpc.h). Every call owns a completion
 * queue and keeps at most one batch outstanding, so the next event on that
 * queue is always the batch just started. Deadlines are on the monotonic
 * clock, so a wall-clock step (NTP) neither kills calls nor stretches them.
 */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "channel.h"
#include "flat.h"

/* HTTP/2 keepalive, matching ckptd's (ckptd/server.c): ping every 30 s, also
 * on idle connections and with no data in between, and drop the connection
 * if no ack comes in 10 s, so a vanished daemon host fails calls instead of
 * hanging them until their deadline. */
#define KEEPALIVE_TIME_MS 30000
#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS 1000
#define KEEPALIVE_TIMEOUT_MS 10000

struct cpri_rpc {
    grpc_channel *channel;
    char target[256];
    grpc_metadata auth;  /* "authorization: Bearer TOKEN", when has_auth */
    int has_auth;
};

/* Every call's initial metadata: the token, if any. */
static void set_initial(const cpri_rpc *r, grpc_op *op)
{
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    if (r->has_auth) {
        op->data.send_initial_metadata.count = 1;
        op->data.send_initial_metadata.metadata = (grpc_metadata *)&r->auth;
    }
}

struct cpri_rpc_stream {
    cpri_rpc *rpc;
    const char *method;
    grpc_call *call;
    grpc_completion_queue *cq;
};

cpr_status cpri_rpc_open(const char *host_port, cpri_rpc **out)
{
    return cpri_rpc_open_with(host_port, NULL, out);
}

/* Plaintext, or TLS with the given roots (and client pair for mutual TLS). */
static grpc_channel_credentials *credentials(const cpri_rpc_options *o)
{
    if (!o || !o->tls)
        return grpc_insecure_credentials_create();
    grpc_ssl_pem_key_cert_pair pair = {o->tls_key_pem, o->tls_cert_pem};
    return grpc_ssl_credentials_create(o->tls_ca_pem,
                                       o->tls_cert_pem && o->tls_key_pem ? &pair : NULL, NULL,
                                       NULL);
}

cpr_status cpri_rpc_open_with(const char *host_port, const cpri_rpc_options *o, cpri_rpc **out)
{
    if (o && !o->tls_cert_pem != !o->tls_key_pem)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a client certificate needs its key, and a key "
                        "its certificate: give both or neither");
    if (o && o->token && (!*o->token || strpbrk(o->token, " \t\r\n")))
        return cpr_fail(CPR_INVALID_ARGUMENT, "the token must be non-empty and hold no "
                        "whitespace");
    cpri_rpc *r = calloc(1, sizeof *r);
    if (!r)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening a channel");
    grpc_init();
    snprintf(r->target, sizeof r->target, "%s", host_port);
    grpc_arg arg[] = {
        /* Checkpoint parts are large: no client-side receive limit. */
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = -1}},
        {GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIME_MS, {.integer = KEEPALIVE_TIME_MS}},
        {GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIMEOUT_MS, {.integer = KEEPALIVE_TIMEOUT_MS}},
        {GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, {.integer = 1}},
        {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, {.integer = 0}},
        /* Uncompressed answers only, as the daemon takes (server.c): gRPC
         * would inflate a compressed one whole before anything checks it. */
        {GRPC_ARG_INTEGER, GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET, {.integer = 1}},
        /* Restores: let the daemon run 2 MiB ahead of each stream, and no
         * further. What a stream's window lets in waits in memory until the
         * stream's reader takes it, so gRPC's BDP probing (which grows the
         * windows) and 8 MiB windows made 16 concurrent restores hold
         * 100+ MiB here, every page of it faulted in, and 2x slower
         * (docs/performance.md). 2 MiB still covers 4 GB/s per stream at a
         * 0.5 ms round trip. */
        {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, {.integer = 2 << 20}},
        {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_BDP_PROBE, {.integer = 0}},
        /* A restarted daemon is found again within a second, not after
         * gRPC's default backoff (up to 120 s), so saves resume promptly.
         * Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC also takes it as the
         * least time a connection attempt is given (20 s by default), and
         * 0.1 s would fail attempts to a slow or distant daemon. */
        {GRPC_ARG_INTEGER, GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, {.integer = RECONNECT_MIN_MS}},
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, {.integer = RECONNECT_MAX_MS}},
        /* No retry filter in the call stack. CPR retries its calls itself
         * (client.c), and with the filter (on by default, no policy set)
         * libgrpc 1.51 crashed the client in CallCombiner::Start when a
         * stream's finishing batch met a connection refused by a daemon
         * that had just stopped (tests/python/test_restarts.py: writers
         * with blobs against SIGTERM restarts). */
        {GRPC_ARG_INTEGER, GRPC_ARG_ENABLE_RETRIES, {.integer = 0}},
    };
    grpc_channel_args args = {sizeof arg / sizeof arg[0], arg};
    grpc_channel_credentials *creds = credentials(o);
    r->channel = creds ? grpc_channel_create(host_port, creds, &args) : NULL;
    if (creds)
        grpc_channel_credentials_release(creds);
    if (!r->channel) {
        free(r);
        grpc_shutdown();
        return cpr_fail(CPR_INVALID_ARGUMENT, "cannot create a %schannel to '%s'%s",
                        o && o->tls ? "TLS " : "", host_port,
                        o && o->tls ? " (check the CA, certificate and key files)" : "");
    }
    if (o && o->token) {
        size_t cap = strlen(o->token) + sizeof "Bearer ";
        char *value = malloc(cap);
        if (!value) {
            grpc_channel_destroy(r->channel);
            free(r);
            grpc_shutdown();
            return cpr_fail(CPR_NO_MEMORY, "out of memory opening a channel");
        }
        snprintf(value, cap, "Bearer %s", o->token);
        r->auth.key = grpc_slice_from_static_string("authorization");
        r->auth.value = grpc_slice_from_copied_string(value);
        r->has_auth = 1;
        free(value);
    }
    *out = r;
    return CPR_OK;
}

void cpri_rpc_close(cpri_rpc *r)
{
    if (!r)
        return;
    grpc_channel_destroy(r->channel);
    if (r->has_auth)
        grpc_slice_unref(r->auth.value);
    free(r);
    grpc_shutdown();
}

static gpr_timespec deadline_in(double seconds)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis((int64_t)(seconds * 1000.0), GPR_TIMESPAN));
}

static int run_batch(grpc_call *call, grpc_completion_queue *cq, grpc_op *ops, size_t n)
{
    if (grpc_call_start_batch(call, ops, n, call, NULL) != GRPC_CALL_OK)
        return 0;
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

static void free_call(grpc_call *call, grpc_completion_queue *cq)
{
    if (call)
        grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

static grpc_call *new_call(cpri_rpc *r, const char *method, double timeout_s,
                           grpc_completion_queue *cq)
{
    grpc_slice path = grpc_slice_from_copied_string(method);
    grpc_call *call = grpc_channel_create_call(r->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                               path, NULL, deadline_in(timeout_s), NULL);
    grpc_slice_unref(path);
    return call;
}

static grpc_byte_buffer *buffer_of(const uint8_t *msg, size_t len)
{
    grpc_slice slice = grpc_slice_from_copied_buffer((const char *)msg, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

static cpr_status bytes_of(grpc_byte_buffer *bb, uint8_t **out, size_t *len)
{
    grpc_byte_buffer_reader reader;
    grpc_byte_buffer_reader_init(&reader, bb);
    grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    size_t n = GRPC_SLICE_LENGTH(s);
    uint8_t *copy = malloc(n ? n : 1);
    if (copy)
        memcpy(copy, GRPC_SLICE_START_PTR(s), n);
    grpc_slice_unref(s);
    if (!copy)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a %zu-byte response", n);
    *out = copy;
    *len = n;
    return CPR_OK;
}

/* The exact status a CPR server sent in its trailing metadata ("cpr-status",
 * rpc/server.h), else the one its gRPC code stands for (a server that is no
 * CPR server, or an error that gRPC itself raised). */
static cpr_status status_sent(grpc_status_code code, const grpc_metadata_array *trailing)
{
    for (size_t i = 0; trailing && i < trailing->count; i++) {
        const grpc_metadata *md = &trailing->metadata[i];
        cpr_status st = CPR_OK;
        if (!grpc_slice_str_cmp(md->key, "cpr-status"))
            st = cpri_status_from_name((const char *)GRPC_SLICE_START_PTR(md->value),
                                       GRPC_SLICE_LENGTH(md->value));
        if (st != CPR_OK)
            return st;
    }
    return cpr_status_from_grpc(code);
}

/* The server's status as ours, with its message. */
static cpr_status status_of(const char *target, const char *method, grpc_status_code code,
                            grpc_slice details, const grpc_metadata_array *trailing)
{
    if (code == GRPC_STATUS_OK)
        return CPR_OK;
    return cpr_fail(status_sent(code, trailing), "%s%s: %.*s", target, method,
                    (int)GRPC_SLICE_LENGTH(details), (const char *)GRPC_SLICE_START_PTR(details));
}

/* Receive the status (and, if asked, one message) that ends a call. */
static cpr_status finish_call(cpri_rpc *r, const char *method, grpc_call *call,
                              grpc_completion_queue *cq, grpc_op *first, size_t n_first,
                              int want_initial, uint8_t **resp, size_t *resp_len)
{
    grpc_op ops[8];
    grpc_metadata_array initial, trailing;
    grpc_byte_buffer *bb = NULL;
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    size_t n = n_first;
    if (n_first)
        memcpy(ops, first, n_first * sizeof *ops);
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    memset(ops + n, 0, 3 * sizeof *ops);
    if (want_initial) {
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n++].data.recv_initial_metadata.recv_initial_metadata = &initial;
    }
    if (resp) {
        ops[n].op = GRPC_OP_RECV_MESSAGE;
        ops[n++].data.recv_message.recv_message = &bb;
    }
    ops[n].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[n].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[n].data.recv_status_on_client.status = &code;
    ops[n++].data.recv_status_on_client.status_details = &details;
    cpr_status st = run_batch(call, cq, ops, n)
                        ? status_of(r->target, method, code, details, &trailing)
                        : cpr_fail(CPR_UNAVAILABLE, "%s%s: the call failed", r->target, method);
    if (st == CPR_OK && resp)
        st = bb ? bytes_of(bb, resp, resp_len)
                : cpr_fail(CPR_INTERNAL, "%s%s: no response message", r->target, method);
    if (bb)
        grpc_byte_buffer_destroy(bb);
    for (size_t i = 0; i < n_first; i++)
        if (first[i].op == GRPC_OP_SEND_MESSAGE)
            grpc_byte_buffer_destroy(first[i].data.send_message.send_message);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    return st;
}

static cpr_status unary(cpri_rpc *r, const char *method, const uint8_t *req, size_t len,
                        double timeout_s, uint32_t flags, uint8_t **resp, size_t *resp_len)
{
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_call *call = new_call(r, method, timeout_s, cq);
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    set_initial(r, &ops[0]);
    ops[0].flags = flags;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = buffer_of(req, len);
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    cpr_status st = finish_call(r, method, call, cq, ops, 3, 1, resp, resp_len);
    free_call(call, cq);
    return st;
}

cpr_status cpri_rpc_unary(cpri_rpc *r, const char *method, const uint8_t *req, size_t len,
                         double timeout_s, uint8_t **resp, size_t *resp_len)
{
    return unary(r, method, req, len, timeout_s, 0, resp, resp_len);
}

cpr_status cpri_rpc_unary_wait(cpri_rpc *r, const char *method, const uint8_t *req,
                              size_t len, double timeout_s, uint8_t **resp, size_t *resp_len)
{
    return unary(r, method, req, len, timeout_s,
                 GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                     GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET,
                 resp, resp_len);
}

cpr_status cpri_rpc_stream_open(cpri_rpc *r, const char *method, double timeout_s,
                               cpri_rpc_stream **out)
{
    cpri_rpc_stream *s = calloc(1, sizeof *s);
    if (!s)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening a stream");
    s->rpc = r;
    s->method = method;
    s->cq = grpc_completion_queue_create_for_next(NULL);
    s->call = new_call(r, method, timeout_s, s->cq);
    grpc_op op;
    memset(&op, 0, sizeof op);
    set_initial(r, &op);
    if (!run_batch(s->call, s->cq, &op, 1)) {
        /* The call ended before it began (no connection, deadline, the
         * server refused it): its status says why. */
        cpr_status st = finish_call(r, method, s->call, s->cq, NULL, 0, 0, NULL, NULL);
        if (st == CPR_OK)
            st = cpr_fail(CPR_UNAVAILABLE, "%s%s: cannot start the stream", r->target, method);
        free_call(s->call, s->cq);
        free(s);
        return st;
    }
    *out = s;
    return CPR_OK;
}

static cpr_status stream_send(cpri_rpc_stream *s, grpc_byte_buffer *bb)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = bb;
    int ok = run_batch(s->call, s->cq, &op, 1);
    grpc_byte_buffer_destroy(op.data.send_message.send_message);
    /* A failed send means the call ended: finish() returns the server's why. */
    return ok ? CPR_OK : cpr_fail(CPR_UNAVAILABLE, "%s%s: the stream ended early",
                                  s->rpc->target, s->method);
}

cpr_status cpri_rpc_stream_send(cpri_rpc_stream *s, const uint8_t *msg, size_t len)
{
    return stream_send(s, buffer_of(msg, len));
}

cpr_status cpri_rpc_stream_send_owned(cpri_rpc_stream *s, uint8_t *msg, size_t len)
{
    /* gRPC frees the bytes with free() once the transport is done with them:
     * the bulk of a checkpoint is not copied again on its way out. */
    grpc_slice slice = grpc_slice_new(msg, len, free);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return stream_send(s, bb);
}

cpr_status cpri_rpc_stream_finish(cpri_rpc_stream *s, uint8_t **resp, size_t *resp_len)
{
    grpc_op op;
    uint8_t *ignored = NULL;
    size_t ignored_len = 0;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    cpr_status st = finish_call(s->rpc, s->method, s->call, s->cq, &op, 1, 1,
                                resp ? resp : &ignored, resp ? resp_len : &ignored_len);
    free(ignored);
    free_call(s->call, s->cq);
    free(s);
    return st;
}

/* One message of a stream to the callback, contiguous (flat.h). */
static cpr_status deliver(grpc_byte_buffer *bb, cpri_rpc_flat *f, cpri_rpc_msg_fn fn, void *ctx)
{
    grpc_byte_buffer_reader reader;
    const uint8_t *msg;
    size_t len;
    int in_place;
    cpr_status st = cpri_rpc_flatten(bb, &reader, f, &msg, &len, &in_place);
    if (st == CPR_OK)
        st = fn(ctx, msg, len);
    if (in_place)
        grpc_byte_buffer_reader_destroy(&reader);
    return st;
}

struct cpri_rpc_cancel {
    pthread_mutex_t mu;
    grpc_call *call;  /* the stream in flight under it, or NULL */
    int fired;
};

cpr_status cpri_rpc_cancel_create(cpri_rpc_cancel **out)
{
    cpri_rpc_cancel *c = calloc(1, sizeof *c);
    if (!c)
        return cpr_fail(CPR_NO_MEMORY, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return CPR_OK;
}

void cpri_rpc_cancel_fire(cpri_rpc_cancel *c)
{
    pthread_mutex_lock(&c->mu);
    c->fired = 1;
    if (c->call) /* grpc_call_cancel may be called from any thread */
        grpc_call_cancel(c->call, NULL);
    pthread_mutex_unlock(&c->mu);
}

void cpri_rpc_cancel_destroy(cpri_rpc_cancel *c)
{
    if (c) {
        pthread_mutex_destroy(&c->mu);
        free(c);
    }
}

/* Put call under c (NULL: take it away); fired already: cancel it now. */
static void cancel_watch(cpri_rpc_cancel *c, grpc_call *call)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->call = call;
    if (call && c->fired)
        grpc_call_cancel(call, NULL);
    pthread_mutex_unlock(&c->mu);
}

cpr_status cpri_rpc_server_stream(cpri_rpc *r, const char *method, const uint8_t *req,
                                 size_t len, double timeout_s, cpri_rpc_msg_fn fn, void *ctx)
{
    return cpri_rpc_server_stream_cancel(r, method, req, len, timeout_s, fn, ctx, NULL);
}

cpr_status cpri_rpc_server_stream_cancel(cpri_rpc *r, const char *method, const uint8_t *req,
                                        size_t len, double timeout_s, cpri_rpc_msg_fn fn,
                                        void *ctx, cpri_rpc_cancel *cancel)
{
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_call *call = new_call(r, method, timeout_s, cq);
    cancel_watch(cancel, call);
    grpc_op ops[4];
    grpc_metadata_array initial;
    cpr_status st = CPR_OK;
    grpc_metadata_array_init(&initial);
    memset(ops, 0, sizeof ops);
    set_initial(r, &ops[0]);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = buffer_of(req, len);
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
    int ok = run_batch(call, cq, ops, 4);
    grpc_byte_buffer_destroy(ops[1].data.send_message.send_message);
    grpc_metadata_array_destroy(&initial);
    cpri_rpc_flat flat = {NULL, 0};
    while (ok && st == CPR_OK) {
        grpc_op op;
        grpc_byte_buffer *bb = NULL;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &bb;
        ok = run_batch(call, cq, &op, 1);
        if (!ok || !bb)
            break; /* end of the stream: the status says how it ended */
        st = deliver(bb, &flat, fn, ctx);
        grpc_byte_buffer_destroy(bb);
    }
    free(flat.buf);
    char why[512] = "";
    if (st != CPR_OK) {
        snprintf(why, sizeof why, "%s", cpr_errmsg()); /* the caller's reason, kept */
        grpc_call_cancel(call, NULL);                   /* the caller stopped: tell the server */
    }
    cpr_status end = finish_call(r, method, call, cq, NULL, 0, 0, NULL, NULL);
    cancel_watch(cancel, NULL);
    free_call(call, cq);
    if (st != CPR_OK)
        return cpr_fail(st, "%s", why);
    return end;
}
