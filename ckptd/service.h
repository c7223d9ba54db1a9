/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ckptd service: cpr.v1.Checkpoint (and grpc.health.v1.Health/Check)
 * over a cpr_store. Handlers in handlers.c; the gRPC call machinery (threads,
 * deadlines, idle streams, keepalive) is rpc/server.h's.
 */
#ifndef CPR_CKPTD_SERVICE_H
#define CPR_CKPTD_SERVICE_H

#include <stddef.h>

#include "auth.h"
#include "restore_gate.h"
#include "cpr/store.h"
#include "server.h" /* rpc/: the options are the call machinery's */

typedef struct cpri_server cpri_server;
typedef struct cpri_server_options {
    cpri_rpc_server_options rpc; /* the call machinery's */
    int restore_streams;         /* Restore streams served at once (restore_gate.h):
                                    0 the default (the online CPUs, at least 2),
                                    -1 no limit */
} cpri_server_options;

/* Start serving `store` under the rules of `auth` (NULL: none; both
 * borrowed: they must outlive the server). *port gets the bound port. */
cpr_status cpri_server_start(cpr_store *store, cpri_auth *auth, const cpri_server_options *opts,
                            cpri_server **out, int *port);

/* The service without a transport: its methods (static, n of them) and
 * the app they take (cpri_service_create), for cpri_rpc_server_start or for
 * a harness that calls the handlers itself (tests/fuzz/fuzz_handlers.c,
 * over its own implementation of server.h's handler interface). */
const cpri_rpc_method *cpri_service_methods(size_t *n);
cpr_status cpri_service_create(cpr_store *store, cpri_auth *auth, cpri_server **out);
void cpri_service_destroy(cpri_server *srv); /* NULL is a no-op */

/* The Restore streams' gate now (restore_gate.h): its slots, the streams
 * holding one, and how many waited or went in over the limit. */
void cpri_server_restore_stats(cpri_server *srv, cpri_restore_gate_stats *out);
/* Restores answered with their plan (direct reads) since start. */
uint64_t cpri_server_plans_sent(cpri_server *srv);
/* Parts committed with their rows in a segment the client wrote (direct writes). */
uint64_t cpri_server_direct_commits(cpri_server *srv);

/* Stop accepting, cancel calls in flight (their parts are aborted: nothing
 * committed is affected), wait for every handler, free. NULL is a no-op. */
void cpri_server_stop(cpri_server *server);

#endif /* CPR_CKPTD_SERVICE_H */
