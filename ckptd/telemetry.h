/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What ckptd tells Prometheus (issue #11): the families of ckptd's metrics
 * (metrics.h) and how they are fed. Calls by method and status, the bytes
 * they moved and their duration come from the gRPC machinery's per-call
 * observer (rpc/server.h); the store's size, free space, open parts, jobs
 * and retention and folding totals are read from cpr_store_stats_get at each
 * scrape, the Restore gate's slots, streams and waits from the server
 * (cpri_telemetry_watch_server); authorization reloads are counted by main.c. /healthz answers as
 * grpc.health.v1.Health does (cpr_store_health). docs/operations.md lists
 * every family.
 *
 * Thread-safety: cpri_telemetry_on_call and cpri_telemetry_reloaded may be
 * called from any thread while the telemetry exists.
 */
#ifndef CPR_CKPTD_TELEMETRY_H
#define CPR_CKPTD_TELEMETRY_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/store.h"
#include "server.h" /* rpc/: the observer's signature, the method table */
#include "service.h"

typedef struct cpri_telemetry cpri_telemetry;

/* Families for `methods` (the service's table; borrowed, static) over
 * `store` (borrowed: it must outlive the telemetry), served on `listen`
 * (host:port; port 0 picks one, written to *port). */
cpr_status cpri_telemetry_start(cpr_store *store, const cpri_rpc_method *methods,
                                size_t n_methods, const char *listen, cpri_telemetry **out,
                                int *port);
/* Stop serving and free. NULL is a no-op. */
void cpri_telemetry_stop(cpri_telemetry *t);

/* A cpri_rpc_call_observer; ctx is the telemetry. */
void cpri_telemetry_on_call(void *ctx, size_t method_index, cpr_status st, uint64_t bytes_in,
                            uint64_t bytes_out, double seconds);

/* A reload of --auth-file, ok or not. t NULL is a no-op. */
void cpri_telemetry_reloaded(cpri_telemetry *t, int ok);

/* Report `srv`'s Restore gate at each scrape from now on (NULL: no more;
 * main clears it before it stops the server: a scrape in progress is waited
 * for). t NULL is a no-op. */
void cpri_telemetry_watch_server(cpri_telemetry *t, cpri_server *srv);

#endif /* CPR_CKPTD_TELEMETRY_H */
