/* SPDX-License-Identifier: Apache-2.0 */
/* ckptd's metric families and what feeds them (telemetry.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "metrics.h"
#include "telemetry.h"

#define MAX_METHODS 33 /* the server's 32, and "unknown" */

enum store_gauge {
    G_STORE_BYTES, G_FREE_BYTES, G_OPEN_PARTS, G_JOBS, G_PARTS, G_SERVING, N_GAUGES
};
enum store_counter {
    C_ROWS_IN, C_BYTES_IN, C_ROWS_OUT, C_BYTES_OUT, C_GC_RUNS, C_GC_PARTS, C_GC_BYTES, C_FOLDS,
    C_FOLD_BYTES, N_COUNTERS
};
enum gate_metric {
    GATE_SLOTS, GATE_STREAMS, GATE_WAITED, GATE_OVER, GATE_PLANS, GATE_DIRECT, N_GATE
};

struct cpri_telemetry {
    cpr_store *store;
    cpri_metrics *m;
    cpri_metrics_server *http;
    size_t n_methods;             /* the service's; index n_methods is "unknown" */
    char names[MAX_METHODS][48];
    const char *name_ptrs[MAX_METHODS];
    const char *status_names[CPR_STATUS_COUNT_];
    cpri_metric_family *calls, *in, *out, *seconds, *reloads;
    cpri_metric *gauges[N_GAUGES], *counters[N_COUNTERS], *gate[N_GATE];
    pthread_mutex_t watch_mu;     /* `server`: set, cleared and read under it */
    cpri_server *server;          /* the Restore gate's, or NULL */
};

static const cpri_metric_desc gauge_desc[N_GAUGES] = {
    {"store_bytes", "Bytes the store holds on disk: segments, blobs and the catalog",
     CPRI_METRIC_GAUGE, NULL, 0, NULL, 0},
    {"free_bytes", "Free bytes on the store's file system (for ckptd's user)",
     CPRI_METRIC_GAUGE, NULL, 0, NULL, 0},
    {"open_parts", "Parts begun and neither committed nor aborted", CPRI_METRIC_GAUGE, NULL, 0,
     NULL, 0},
    {"jobs", "Jobs with at least one committed part or fold", CPRI_METRIC_GAUGE, NULL, 0, NULL, 0},
    {"parts_committed", "Committed parts the store holds", CPRI_METRIC_GAUGE, NULL, 0, NULL, 0},
    {"serving", "1 while the store can commit (Health SERVING), else 0", CPRI_METRIC_GAUGE, NULL,
     0, NULL, 0},
};

static const cpri_metric_desc gate_desc[N_GATE] = {
    {"restore_stream_slots", "Restore streams served at once (--restore-streams; 0: no limit)",
     CPRI_METRIC_GAUGE, NULL, 0, NULL, 0},
    {"restore_streams", "Restore streams holding a slot now, over the limit included",
     CPRI_METRIC_GAUGE, NULL, 0, NULL, 0},
    {"restore_stream_waits_total", "Restore streams that found every slot taken and waited",
     CPRI_METRIC_COUNTER, NULL, 0, NULL, 0},
    {"restore_stream_over_limit_total", "Of them, streams let in over the limit after the "
     "streams served made no progress for a second", CPRI_METRIC_COUNTER, NULL, 0, NULL, 0},
    {"restore_plans_total", "Restores answered with their plan, the client reading the "
     "store's pool itself (direct reads)", CPRI_METRIC_COUNTER, NULL, 0, NULL, 0},
    {"direct_commits_total", "Parts committed whose rows the client wrote into the store's "
     "pool itself (direct writes)", CPRI_METRIC_COUNTER, NULL, 0, NULL, 0},
};

static const cpri_metric_desc counter_desc[N_COUNTERS] = {
    {"rows_received_total", "Rows the store accepted since ckptd started", CPRI_METRIC_COUNTER,
     NULL, 0, NULL, 0},
    {"payload_received_bytes_total", "Row and blob bytes the store accepted since start",
     CPRI_METRIC_COUNTER, NULL, 0, NULL, 0},
    {"rows_restored_total", "Rows restores delivered since start", CPRI_METRIC_COUNTER, NULL,
     0, NULL, 0},
    {"payload_restored_bytes_total", "Row bytes restores delivered since start",
     CPRI_METRIC_COUNTER, NULL, 0, NULL, 0},
    {"gc_runs_total", "Retention runs since start", CPRI_METRIC_COUNTER, NULL, 0, NULL, 0},
    {"gc_parts_removed_total", "Parts retention removed since start", CPRI_METRIC_COUNTER,
     NULL, 0, NULL, 0},
    {"gc_freed_bytes_total", "Store bytes retention freed since start", CPRI_METRIC_COUNTER,
     NULL, 0, NULL, 0},
    {"folds_total", "Folds written since start", CPRI_METRIC_COUNTER, NULL, 0, NULL, 0},
    {"fold_written_bytes_total", "Bytes of the segments folds wrote since start",
     CPRI_METRIC_COUNTER, NULL, 0, NULL, 0},
};

/* "/cpr.v1.Checkpoint/Begin" -> "Begin"; Health's "Check" -> "Health". */
static void short_name(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    snprintf(out, cap, "%s", strstr(path, "grpc.health") ? "Health" : name);
}

static void collect(cpri_metrics *m, void *ctx)
{
    cpri_telemetry *t = ctx;
    cpr_store_stats s;
    (void)m;
    if (cpr_store_stats_get(t->store, &s) != CPR_OK)
        return;
    const uint64_t g[N_GAUGES] = {s.store_bytes, s.free_bytes, s.parts_open, s.jobs,
                                  s.parts_committed, cpr_store_health(t->store) == CPR_OK};
    const uint64_t c[N_COUNTERS] = {s.rows_in, s.bytes_in, s.rows_out, s.bytes_out, s.gc_runs,
                                    s.gc_parts_removed, s.gc_bytes_freed, s.folds,
                                    s.fold_bytes};
    for (int i = 0; i < N_GAUGES; i++)
        cpri_metric_set(t->gauges[i], (double)g[i]);
    for (int i = 0; i < N_COUNTERS; i++)
        cpri_metric_set_u64(t->counters[i], c[i]);
    pthread_mutex_lock(&t->watch_mu);
    if (t->server) {
        cpri_restore_gate_stats gs;
        cpri_server_restore_stats(t->server, &gs);
        cpri_metric_set(t->gate[GATE_SLOTS], (double)gs.slots);
        cpri_metric_set(t->gate[GATE_STREAMS], (double)gs.holding);
        cpri_metric_set_u64(t->gate[GATE_WAITED], gs.waited);
        cpri_metric_set_u64(t->gate[GATE_OVER], gs.over_limit);
        cpri_metric_set_u64(t->gate[GATE_PLANS], cpri_server_plans_sent(t->server));
        cpri_metric_set_u64(t->gate[GATE_DIRECT], cpri_server_direct_commits(t->server));
    }
    pthread_mutex_unlock(&t->watch_mu);
}

static int health(void *ctx, char *why, size_t cap)
{
    cpri_telemetry *t = ctx;
    if (cpr_store_health(t->store) == CPR_OK)
        return 1;
    snprintf(why, cap, "%s", cpr_errmsg());
    return 0;
}

static cpr_status add_families(cpri_telemetry *t)
{
    const cpri_metric_label method = {"method", t->name_ptrs, t->n_methods + 1};
    const cpri_metric_label by_call[] = {method, {"status", t->status_names, CPR_STATUS_COUNT_}};
    static const char *const results[] = {"ok", "failed"};
    const cpri_metric_label result = {"result", results, 2};
    const cpri_metric_desc fam[] = {
        {"calls_total", "Calls finished, by method and status (CPR status names)",
         CPRI_METRIC_COUNTER, by_call, 2, NULL, 0},
        {"received_bytes_total", "Bytes of request messages received, by method",
         CPRI_METRIC_COUNTER, &method, 1, NULL, 0},
        {"sent_bytes_total", "Bytes of answer messages sent, by method", CPRI_METRIC_COUNTER,
         &method, 1, NULL, 0},
        {"call_duration_seconds", "Seconds from a call's start to its status, by method (a "
         "Commit's is the commit latency, a Restore's the whole restore stream)",
         CPRI_METRIC_HISTOGRAM, &method, 1, NULL, 0},
        {"auth_reloads_total", "Reloads of --auth-file (SIGHUP), by result",
         CPRI_METRIC_COUNTER, &result, 1, NULL, 0},
    };
    cpri_metric_family **out[] = {&t->calls, &t->in, &t->out, &t->seconds, &t->reloads};
    cpr_status st = CPR_OK;
    for (size_t i = 0; st == CPR_OK && i < sizeof fam / sizeof fam[0]; i++)
        st = cpri_metrics_family_add(t->m, &fam[i], out[i]);
    for (int i = 0; st == CPR_OK && i < N_GAUGES; i++) {
        cpri_metric_family *f;
        st = cpri_metrics_family_add(t->m, &gauge_desc[i], &f);
        t->gauges[i] = st == CPR_OK ? cpri_metrics_series(f, NULL) : NULL;
    }
    for (int i = 0; st == CPR_OK && i < N_COUNTERS; i++) {
        cpri_metric_family *f;
        st = cpri_metrics_family_add(t->m, &counter_desc[i], &f);
        t->counters[i] = st == CPR_OK ? cpri_metrics_series(f, NULL) : NULL;
    }
    for (int i = 0; st == CPR_OK && i < N_GATE; i++) {
        cpri_metric_family *f;
        st = cpri_metrics_family_add(t->m, &gate_desc[i], &f);
        t->gate[i] = st == CPR_OK ? cpri_metrics_series(f, NULL) : NULL;
    }
    return st;
}

cpr_status cpri_telemetry_start(cpr_store *store, const cpri_rpc_method *methods,
                                size_t n_methods, const char *listen, cpri_telemetry **out,
                                int *port)
{
    if (n_methods + 1 > MAX_METHODS)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%zu methods: telemetry counts at most %d",
                        n_methods, MAX_METHODS - 1);
    cpri_telemetry *t = calloc(1, sizeof *t);
    if (!t)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for metrics");
    t->store = store;
    t->n_methods = n_methods;
    pthread_mutex_init(&t->watch_mu, NULL);
    for (size_t i = 0; i <= n_methods; i++) {
        if (i < n_methods)
            short_name(methods[i].path, t->names[i], sizeof t->names[i]);
        else
            snprintf(t->names[i], sizeof t->names[i], "unknown");
        t->name_ptrs[i] = t->names[i];
    }
    for (int i = 0; i < CPR_STATUS_COUNT_; i++)
        t->status_names[i] = cpr_status_name((cpr_status)i);
    cpr_status st = cpri_metrics_create(&t->m);
    if (st == CPR_OK)
        st = add_families(t);
    if (st == CPR_OK) {
        cpri_metrics_set_collector(t->m, collect, t);
        cpri_metrics_set_health(t->m, health, t);
        st = cpri_metrics_serve(t->m, listen, &t->http, port);
    }
    if (st) {
        cpri_telemetry_stop(t);
        return st;
    }
    /* Every method shows from the start, so that rates begin at zero. */
    for (size_t i = 0; i <= n_methods; i++)
        cpri_metric_add(cpri_metrics_series_at(t->calls, (size_t[]){i, CPR_OK}), 0);
    *out = t;
    return CPR_OK;
}

void cpri_telemetry_stop(cpri_telemetry *t)
{
    if (!t)
        return;
    cpri_metrics_serve_stop(t->http);
    cpri_metrics_destroy(t->m);
    pthread_mutex_destroy(&t->watch_mu);
    free(t);
}

void cpri_telemetry_watch_server(cpri_telemetry *t, cpri_server *srv)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->watch_mu);
    t->server = srv;
    pthread_mutex_unlock(&t->watch_mu);
}

void cpri_telemetry_on_call(void *ctx, size_t method_index, cpr_status st, uint64_t bytes_in,
                            uint64_t bytes_out, double seconds)
{
    cpri_telemetry *t = ctx;
    size_t m = method_index <= t->n_methods ? method_index : t->n_methods;
    size_t status = (unsigned)st < CPR_STATUS_COUNT_ ? (size_t)st : (size_t)CPR_INTERNAL;
    cpri_metric_add(cpri_metrics_series_at(t->calls, (size_t[]){m, status}), 1);
    cpri_metric_add(cpri_metrics_series_at(t->in, &m), bytes_in);
    cpri_metric_add(cpri_metrics_series_at(t->out, &m), bytes_out);
    cpri_metric_observe(cpri_metrics_series_at(t->seconds, &m), seconds);
}

void cpri_telemetry_reloaded(cpri_telemetry *t, int ok)
{
    if (t)
        cpri_metric_add(cpri_metrics_series_at(t->reloads, (size_t[]){ok ? 0u : 1u}), 1);
}
