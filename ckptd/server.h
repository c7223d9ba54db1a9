/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ckptd gRPC server: serves service cpr.v1.Checkpoint (and
 * grpc.health.v1.Health/Check) over a cpr_store with the gRPC C core. The
 * only module of ckptd that uses gRPC.
 *
 * Design: an acceptor thread keeps one outstanding request per method; each
 * arriving call is served by its own handler thread, synchronously (start a
 * batch, pluck its completion from a queue owned by that call), so a slow or
 * stalled client holds up nobody but itself, and not for ever: a stream on
 * which no message moves for idle_timeout_s is cancelled, and HTTP/2
 * keepalive pings (every 30 s, 10 s to answer) drop connections to vanished
 * hosts. A PutRows/PutBlob stream that ends abnormally (client gone,
 * cancelled, idle, bad message) aborts the parts it wrote to: nothing
 * half-written stays open or becomes visible. One stream may write to at
 * most 64 parts (a 65th is refused with RESOURCE_EXHAUSTED).
 */
#ifndef CPR_SERVER_H
#define CPR_SERVER_H

#include <stddef.h>

#include "cpr/store.h"

typedef struct cpr_server cpr_server;

typedef struct cpr_server_options {
    const char *listen;          /* host:port; port 0 picks a free one */
    size_t max_message_bytes;    /* largest request accepted (default 64 MiB) */
    unsigned max_calls;          /* concurrent calls; more are refused UNAVAILABLE (default 1024) */
    double idle_timeout_s;       /* a stream that neither receives nor sends a message for
                                    this long is cancelled (default 600) */
} cpr_server_options;

/* Start serving `store` (borrowed: it must outlive the server). *port gets
 * the bound port. */
cpr_status cpr_server_start(cpr_store *store, const cpr_server_options *opts,
                            cpr_server **out, int *port);

/* Stop accepting, cancel calls in flight (their parts are aborted: nothing
 * committed is affected), wait for every handler, free. NULL is a no-op. */
void cpr_server_stop(cpr_server *server);

#endif /* CPR_SERVER_H */
