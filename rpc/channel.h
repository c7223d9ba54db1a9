/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Client transport to ckptd over the gRPC C core (the only client module
 * that uses gRPC): unary calls, client streams and server streams of
 * already-encoded messages (wire.h encodes them). Every call has a deadline
 * of timeout_s from its start on the monotonic clock (CPR_TIMEOUT when it
 * passes). A server's error arrives as the matching cpr_status with the
 * server's message; a call that never reached a server fails with the
 * status gRPC gives it (CPR_UNAVAILABLE for a refused or lost connection)
 * and gRPC's reason. Channels send HTTP/2 keepalive pings (30 s, 10 s to
 * answer), so a vanished daemon host fails calls instead of hanging them. A
 * channel may be used by many threads at once; a stream by one.
 */
#ifndef CPR_RPC_CHANNEL_H
#define CPR_RPC_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/status.h"

typedef struct cpri_rpc cpri_rpc;
typedef struct cpri_rpc_stream cpri_rpc_stream;

/* A channel to "host:port". Connecting is lazy: errors show on the first call. */
cpr_status cpri_rpc_open(const char *host_port, cpri_rpc **out);

/* Credentials of a channel; strings are copied. */
typedef struct cpri_rpc_options {
    const char *token;       /* "authorization: Bearer TOKEN" on every call; NULL: none */
    int tls;                 /* 1: TLS */
    const char *tls_ca_pem;  /* roots for the server's certificate; NULL: gRPC's default */
    const char *tls_cert_pem;/* the client's certificate chain and key (mutual TLS); */
    const char *tls_key_pem; /* both or neither */
} cpri_rpc_options;

/* cpri_rpc_open with credentials (o NULL: none, plaintext). */
cpr_status cpri_rpc_open_with(const char *host_port, const cpri_rpc_options *o, cpri_rpc **out);
void cpri_rpc_close(cpri_rpc *rpc);

/* method: "/cpr.v1.Checkpoint/Begin" etc. *resp is malloc'd (caller frees).
 * A call fails fast (UNAVAILABLE) while the channel cannot connect. */
cpr_status cpri_rpc_unary(cpri_rpc *rpc, const char *method, const uint8_t *req, size_t len,
                         double timeout_s, uint8_t **resp, size_t *resp_len);
/* The same, but the call waits (up to its deadline) for the channel to
 * connect instead of failing fast: for calls made off a caller's thread,
 * such as a part's Begin sent by its sender (cpr_client_begin_async). */
cpr_status cpri_rpc_unary_wait(cpri_rpc *rpc, const char *method, const uint8_t *req,
                              size_t len, double timeout_s, uint8_t **resp, size_t *resp_len);

/* Start a client stream. If it cannot start (no connection, or the server
 * ended the call at once), the call's own status is returned, with its
 * reason, and *out is not set. */
cpr_status cpri_rpc_stream_open(cpri_rpc *rpc, const char *method, double timeout_s,
                               cpri_rpc_stream **out);
/* Send one message. A failed send means the call has ended (the server
 * answered early with an error, or the connection broke): call
 * cpri_rpc_stream_finish for the status that says why. */
cpr_status cpri_rpc_stream_send(cpri_rpc_stream *s, const uint8_t *msg, size_t len);
/* The same, taking `msg` (malloc'd): it is freed with free() by the call,
 * whatever the outcome, and not copied. */
cpr_status cpri_rpc_stream_send_owned(cpri_rpc_stream *s, uint8_t *msg, size_t len);
/* Half-close, then wait for the response and status; frees the stream
 * whatever the outcome. resp may be NULL. */
cpr_status cpri_rpc_stream_finish(cpri_rpc_stream *s, uint8_t **resp, size_t *resp_len);

/* A way for another thread to end a server stream at once (a merge that
 * stopped, client/merge.c M3): cpri_rpc_cancel_fire cancels the stream in
 * flight under it, and any started after, which then fail with
 * CPR_UNAVAILABLE. Create once, fire at most once; thread-safe. */
typedef struct cpri_rpc_cancel cpri_rpc_cancel;
cpr_status cpri_rpc_cancel_create(cpri_rpc_cancel **out);
void cpri_rpc_cancel_fire(cpri_rpc_cancel *c);
void cpri_rpc_cancel_destroy(cpri_rpc_cancel *c); /* NULL is a no-op; no stream may use it */

typedef cpr_status (*cpri_rpc_msg_fn)(void *ctx, const uint8_t *msg, size_t len);
/* Send one request, receive messages until the server's status; `fn` may
 * stop early by returning non-OK (the call is then cancelled). */
cpr_status cpri_rpc_server_stream(cpri_rpc *rpc, const char *method, const uint8_t *req,
                                 size_t len, double timeout_s, cpri_rpc_msg_fn fn, void *ctx);
/* The same, ended early by `cancel` when it fires (NULL: never). */
cpr_status cpri_rpc_server_stream_cancel(cpri_rpc *rpc, const char *method, const uint8_t *req,
                                        size_t len, double timeout_s, cpri_rpc_msg_fn fn,
                                        void *ctx, cpri_rpc_cancel *cancel);

#endif /* CPR_RPC_CHANNEL_H */
