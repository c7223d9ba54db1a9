/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd's metrics (issue #11): a registry of counters, gauges and histograms
 * that the gRPC call path updates without locks, rendered in the Prometheus
 * text exposition format 0.0.4 and served over HTTP on
 * `ckptd --metrics-listen ADDR` (GET /metrics). This module is the only user
 * of libmicrohttpd.
 *
 * A family is registered once with its name (exposed as "cpr_ckptd_" NAME),
 * help, type and label names, each label with the fixed list of values it
 * may take (ckptd knows them all: method names, status names). Every series
 * (one combination of label values) is allocated at registration, so the
 * call path looks a series up by value or by index without a lock and
 * updates it with one atomic operation. Values a scrape must read from
 * elsewhere (store bytes, free space, open parts, retention and folding
 * totals) are written by a collector callback right before each rendering.
 *
 * Invariants
 *  M1. A family and its series live from registration until
 *      cpri_metrics_destroy, at one address: handles are plain pointers,
 *      used without locks. A family never changes after registration.
 *  M2. An update takes no lock and allocates nothing: counters and
 *      histogram buckets are one relaxed atomic add, a gauge set one atomic
 *      store; a histogram's sum and a gauge add are a compare-and-swap loop.
 *  M3. A histogram's rendered buckets are cumulative and its _count is its
 *      +Inf bucket, both computed from one read of every bucket. _sum is read
 *      apart and may include or miss observations in flight at the scrape.
 *  M4. Rendering holds the registry's lock (one rendering at a time; the
 *      collector runs under it) and is deterministic: families in
 *      registration order, series in label-value order (the first label's
 *      values vary slowest). A family without labels always shows its
 *      series; a labelled series shows once it was first updated (an add
 *      of 0 makes it show with 0).
 *  M5. The HTTP server listens on the one given address only, answers
 *      GET and HEAD of /metrics and /healthz (404 for other paths, 405 for other
 *      methods), on one internal thread, with at most 16 connections
 *      (kept alive between scrapes), each closed after 10 s of inactivity.
 *
 * Thread-safety: every function may be called from any thread, except
 * cpri_metrics_destroy, which must run after every other use of the
 * registry, its families and series has ended (stop the server first).
 */
#ifndef CPR_CKPTD_METRICS_H
#define CPR_CKPTD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/status.h"

#define CPRI_METRICS_PREFIX "cpr_ckptd_"
#define CPRI_METRICS_MAX_LABELS 4
#define CPRI_METRICS_MAX_BUCKETS 32     /* finite bounds; +Inf is implied */
#define CPRI_METRICS_MAX_SERIES 4096    /* per family: the product of the value counts */
#define CPRI_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef enum cpri_metric_type {
    CPRI_METRIC_COUNTER = 0,   /* a monotonic uint64 total; its name ends in "_total" */
    CPRI_METRIC_GAUGE = 1,     /* a double that goes up and down */
    CPRI_METRIC_HISTOGRAM = 2  /* observations counted in fixed buckets, plus their sum */
} cpri_metric_type;

/* One label: its name and every value it may take. */
typedef struct cpri_metric_label {
    const char *name;            /* [a-zA-Z_][a-zA-Z0-9_]*, not "__..."; "le" is reserved */
    const char *const *values;   /* any UTF-8 (escaped when rendered), distinct */
    size_t n_values;             /* >= 1 */
} cpri_metric_label;

/* What a family is. Everything is copied by cpri_metrics_family_add. */
typedef struct cpri_metric_desc {
    const char *name;            /* without the prefix: [a-zA-Z0-9_:]+ ("calls_total") */
    const char *help;            /* what it counts, not empty (escaped when rendered) */
    cpri_metric_type type;
    const cpri_metric_label *labels; /* NULL when n_labels is 0 */
    size_t n_labels;             /* <= CPRI_METRICS_MAX_LABELS */
    const double *buckets;       /* histograms: ascending finite upper bounds; NULL:
                                    cpri_metrics_latency_buckets */
    size_t n_buckets;            /* <= CPRI_METRICS_MAX_BUCKETS */
} cpri_metric_desc;

/* Latency buckets in seconds: 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
 * 0.25, 0.5, 1, 2.5, 5, 10, 30, 60. */
extern const double cpri_metrics_latency_buckets[];
extern const size_t cpri_metrics_latency_buckets_n;

typedef struct cpri_metrics cpri_metrics;               /* the registry */
typedef struct cpri_metric_family cpri_metric_family;   /* owned by the registry */
typedef struct cpri_metric cpri_metric;                 /* one series; owned by its family */
typedef struct cpri_metrics_server cpri_metrics_server;

/* ---- the registry ------------------------------------------------------------------ */

cpr_status cpri_metrics_create(cpri_metrics **out);
/* Frees the registry, its families and series. NULL is a no-op. */
void cpri_metrics_destroy(cpri_metrics *m);

/*
 * Register a family and every one of its series (zero). *out is valid until
 * cpri_metrics_destroy (M1). CPR_INVALID_ARGUMENT for a bad name, label or
 * bucket list, an empty help, a counter whose name does not end in "_total"
 * (or another type's that does), a name already registered, or more than
 * CPRI_METRICS_MAX_SERIES series; CPR_NO_MEMORY. On failure nothing is
 * registered.
 */
cpr_status cpri_metrics_family_add(cpri_metrics *m, const cpri_metric_desc *desc,
                                   cpri_metric_family **out);

/*
 * The series of `f` with label values values[0..n_labels-1] (in the order of
 * the labels; NULL for a family without labels), or NULL if a value is not
 * in its label's list. Lock-free: a string compare per listed value.
 */
cpri_metric *cpri_metrics_series(const cpri_metric_family *f, const char *const *values);

/* The same by position in each label's value list: index[i] < n_values of
 * label i (NULL without labels); NULL if out of range. O(1), lock-free. */
cpri_metric *cpri_metrics_series_at(const cpri_metric_family *f, const size_t *index);

/* ---- updates (M2): any thread; s NULL is a no-op ----------------------------------- */

/* A counter: += n. A gauge: += n. */
void cpri_metric_add(cpri_metric *s, uint64_t n);
/* A counter or a gauge: = v; for a counter that mirrors a monotonic total
 * kept elsewhere (the store's stats, written by the collector). */
void cpri_metric_set_u64(cpri_metric *s, uint64_t v);
/* A gauge: = v; += delta. */
void cpri_metric_set(cpri_metric *s, double v);
void cpri_metric_gauge_add(cpri_metric *s, double delta);
/* A histogram: count v in the first bucket whose bound is >= v, and add it
 * to the sum. NaN is ignored (it would poison the sum for good). */
void cpri_metric_observe(cpri_metric *s, double v);
/* Each of these BUG()s on a series of another type: a wiring mistake. */

/* ---- exposition -------------------------------------------------------------------- */

/* Called by every rendering before anything is formatted, on the rendering
 * thread (the HTTP server's, for scrapes), under the registry's lock (M4):
 * set gauges and mirrored counters here; do not render or register. */
typedef void (*cpri_metrics_collect_fn)(cpri_metrics *m, void *ctx);

/* Install (fn NULL: remove) the collector; ctx is borrowed and must stay
 * valid while it is installed. */
void cpri_metrics_set_collector(cpri_metrics *m, cpri_metrics_collect_fn fn, void *ctx);

/* Whether the service serves: 1, or 0 with a reason in why (cap bytes,
 * NUL-terminated). Called on the HTTP thread for GET /healthz, no lock held. */
typedef int (*cpri_metrics_health_fn)(void *ctx, char *why, size_t cap);

/* Answer GET /healthz with 200 "serving" or 503 and the reason (for probes
 * that cannot speak gRPC over TLS, such as Kubernetes'); fn NULL: 404. ctx is
 * borrowed while installed. */
void cpri_metrics_set_health(cpri_metrics *m, cpri_metrics_health_fn fn, void *ctx);

/* Run the collector, then render the text format 0.0.4 into *text (malloc'd,
 * NUL-terminated, the caller frees it) and its length (without the NUL)
 * into *len. CPR_NO_MEMORY leaves both untouched. */
cpr_status cpri_metrics_render(cpri_metrics *m, char **text, size_t *len);

/*
 * Serve GET /metrics (M5) on `addr`: "HOST:PORT" with HOST an IPv4 address
 * or "localhost", or "[IPV6]:PORT"; port 0 picks a free one. m is borrowed:
 * it must outlive the server. *out and *port (the bound port) are written
 * on success. CPR_INVALID_ARGUMENT for a malformed address, CPR_IO if it
 * cannot be bound (the message has the operating system's reason).
 */
cpr_status cpri_metrics_serve(cpri_metrics *m, const char *addr, cpri_metrics_server **out,
                              int *port);

/* Close the listening socket and every connection, wait for the server's
 * thread, free. NULL is a no-op. */
void cpri_metrics_serve_stop(cpri_metrics_server *server);

#endif /* CPR_CKPTD_METRICS_H */
