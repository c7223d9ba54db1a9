/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gRPC server's call machinery on the C core, for services whose
 * handlers are plain sequential functions (ckptd/handlers.c is the one
 * user). It knows methods, calls, messages, deadlines and statuses; what a
 * message means is the handler's business (rpc/wire.h).
 *
 * Design: an acceptor thread keeps one outstanding request per method; each
 * arriving call is served by its own handler thread, synchronously (start a
 * batch, pluck its completion from a queue owned by that call), so a slow or
 * stalled client holds up only its own calls, and not for ever: a stream on
 * which no message moves for idle_timeout_s is cancelled, a call whose
 * client does not take its final answer and status within 10 s (plus a
 * second a MB of answer) too, and HTTP/2 keepalive pings (every 30 s, 10 s
 * to answer) drop connections to vanished hosts. It still takes one of
 * max_calls slots while it holds a call: per-peer limits are not here. A
 * call to a method the service does not have is answered UNIMPLEMENTED at
 * once. Over max_calls concurrent calls, the next is answered UNAVAILABLE
 * by a cancel from the acceptor, with no thread (V5).
 *
 * Statuses: a handler finishes with a cpr_status; the client sees the gRPC
 * code of cpr_status_grpc() with the message, and the exact cpr_status in
 * the trailing metadata entry "cpr-status" (its cpr_status_name), which
 * rpc/channel.c prefers, so every status survives the trip (docs/client.md).
 */
#ifndef CPR_RPC_SERVER_H
#define CPR_RPC_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/status.h"

typedef struct cpri_rpc_server cpri_rpc_server;
typedef struct cpri_rpc_call cpri_rpc_call;

typedef enum cpri_rpc_kind {
    CPR_RPC_UNARY,          /* one request, one response */
    CPR_RPC_CLIENT_STREAM,  /* many requests (cpri_rpc_recv), one response */
    CPR_RPC_SERVER_STREAM   /* one request, many responses (cpri_rpc_send) */
} cpri_rpc_kind;

/* Serves one call on its own thread; must end with cpri_rpc_finish. */
typedef void (*cpri_rpc_handler)(cpri_rpc_call *call, void *app);

typedef struct cpri_rpc_method {
    const char *path;       /* "/package.Service/Method" */
    cpri_rpc_kind kind;
    cpri_rpc_handler fn;
} cpri_rpc_method;

/* What one finished call was, for metrics: the index of its method in the
 * table given to cpri_rpc_server_start (n_methods: a method the service does
 * not have), its status, the bytes of the messages it received and sent
 * (requests and answers, without framing), and its seconds from dispatch to
 * the end of its final batch. Runs on the call's handler thread. */
typedef void (*cpri_rpc_call_observer)(void *ctx, size_t method_index, cpr_status st,
                                       uint64_t bytes_in, uint64_t bytes_out, double seconds);

typedef struct cpri_rpc_server_options {
    const char *listen;          /* host:port (port 0 picks a free one) or unix:/path */
    size_t max_message_bytes;    /* largest request accepted (default 64 MiB) */
    unsigned max_calls;          /* concurrent calls (default 1024) */
    double idle_timeout_s;       /* a stream that neither receives nor sends a message for
                                    this long is cancelled (default 600) */
    size_t max_memory_bytes;     /* the message bytes handlers may hold at once (V4 in
                                    server.c), also gRPC's resource quota (0: unbounded) */
    unsigned unary_decode_factor;/* a unary request is charged (2 + this) times its
                                    size plus unary_decode_slack: gRPC's copy, ours,
                                    and what the handler's decoding may take (0, 0:
                                    twice its size) */
    size_t unary_decode_slack;
    unsigned max_streams;        /* concurrent calls on one connection
                                    (GRPC_ARG_MAX_CONCURRENT_STREAMS; 0: 100) */
    /* TLS (all PEM text, borrowed for the start only): with a certificate
     * and its key the port speaks TLS only; with client_ca as well, every
     * client must present a certificate that CA signed (mutual TLS).
     * NULL: plaintext. */
    const char *tls_cert_pem, *tls_key_pem, *tls_client_ca_pem;
    cpri_rpc_call_observer observe; /* may be NULL; with observe_ctx, borrowed until stop */
    void *observe_ctx;
} cpri_rpc_server_options;

/* Serve `methods` (at most 32; borrowed, as `app`, until stop). *port gets
 * the bound port (0 for unix sockets). */
cpr_status cpri_rpc_server_start(const cpri_rpc_method *methods, size_t n_methods, void *app,
                                const cpri_rpc_server_options *opts, cpri_rpc_server **out,
                                int *port);

/* Stop accepting, cancel the calls in flight (their handlers see their
 * sends and receives fail), wait for every handler to return, free. NULL is
 * a no-op. */
void cpri_rpc_server_stop(cpri_rpc_server *server);

/* ---- inside a handler ------------------------------------------------------------ */

/* The method's path, for logs. */
const char *cpri_rpc_call_method(const cpri_rpc_call *call);

/* The value of request metadata `key` (lowercase, e.g. "authorization"),
 * NUL-terminated into buf: its length, or -1 if the call has no such entry,
 * or one longer than cap - 1 or holding a NUL (never truncated). */
long cpri_rpc_call_header(const cpri_rpc_call *call, const char *key, char *buf, size_t cap);

/* The subject of the client certificate that TLS verified (RFC 2253, e.g.
 * "CN=trainer-1,O=CPR"), into buf: its length, or -1 if the call is not over
 * mutual TLS (or the subject does not fit). */
long cpri_rpc_call_peer_subject(cpri_rpc_call *call, char *buf, size_t cap);

/* The request of a unary or server-streaming call (empty if none); valid
 * until cpri_rpc_finish. */
void cpri_rpc_request(cpri_rpc_call *call, const uint8_t **msg, size_t *len);

/* Send the initial metadata now (before a long stream). CPR_UNAVAILABLE if
 * the client went away. */
cpr_status cpri_rpc_start(cpri_rpc_call *call);

/* Send one message of a server stream, taking `bytes` (malloc'd). CPR_OK;
 * CPR_TIMEOUT if the client read nothing for idle_timeout_s (the call is
 * cancelled); CPR_UNAVAILABLE if it went away. `during` names the work in
 * the message ("restore"). */
cpr_status cpri_rpc_send(cpri_rpc_call *call, uint8_t *bytes, size_t len, const char *during);

typedef enum cpri_rpc_recv_result {
    CPR_RPC_MESSAGE,   /* *msg and *len hold the next message */
    CPR_RPC_END,       /* the client half-closed: no more messages */
    CPR_RPC_BROKEN,    /* the stream broke (client gone, cancelled, deadline) */
    CPR_RPC_IDLE,      /* nothing arrived for idle_timeout_s: the call is cancelled */
    CPR_RPC_EXHAUSTED  /* no room in max_memory_bytes for idle_timeout_s: cpr_errmsg() says
                          so; the call may end with CPR_RESOURCE_EXHAUSTED */
} cpri_rpc_recv_result;

/* The next message of a client stream, valid until the next receive or the
 * finish. */
cpri_rpc_recv_result cpri_rpc_recv(cpri_rpc_call *call, const uint8_t **msg, size_t *len);

/* The stream idle timeout, for messages. */
double cpri_rpc_idle_timeout_s(const cpri_rpc_call *call);

/* Finish the call: on CPR_OK the response `resp` (taken, may be NULL), else
 * the status with cpr_errmsg() as its message. Returns 1 if the client had
 * cancelled the call (went away, or gave up), else 0. */
int cpri_rpc_finish(cpri_rpc_call *call, cpr_status st, uint8_t *resp, size_t resp_len);

#endif /* CPR_RPC_SERVER_H */
