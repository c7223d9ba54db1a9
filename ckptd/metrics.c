/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd's metrics (metrics.h, invariants M1-M5): the registry, lock-free
 * updates, the Prometheus text format 0.0.4, and the HTTP endpoint on
 * libmicrohttpd (the only module that uses it).
 *
 * Layout: a family holds every series it can have in one array, indexed
 * row-major by the position of each label value (M1), so a handle is an
 * address that never moves. Series are 64-byte aligned, and so are
 * histogram bucket rows, so that threads updating neighbouring series do
 * not share a cache line. Numbers are formatted in the C locale (ckptd never
 * calls setlocale), the shortest decimal that reads back as the same double.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "cpr_cli.h"
#include "cpr_common.h"
#include "metrics.h"

#define CACHE_LINE 64
#define BUCKETS_PER_LINE (CACHE_LINE / sizeof(uint64_t))
#define HTTP_MAX_CONNECTIONS 16   /* M5 */
#define HTTP_TIMEOUT_S 10         /* M5 */

const double cpri_metrics_latency_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                               0.25,  0.5,    1,     2.5,  5,     10,   30, 60};
const size_t cpri_metrics_latency_buckets_n =
    sizeof cpri_metrics_latency_buckets / sizeof cpri_metrics_latency_buckets[0];

struct cpri_metric {
    _Alignas(CACHE_LINE) _Atomic uint64_t value; /* counter: the total; gauge: a double's bits */
    _Atomic uint64_t sum_bits;                   /* histogram: the sum's bits */
    _Atomic uint64_t *buckets;                   /* histogram: n_bounds + 1, not cumulative */
    const cpri_metric_family *family;
    atomic_bool touched;                         /* M4: a labelled series shows once set */
};

typedef struct label {
    char *name;
    char **values;
    size_t n_values;
} label;

struct cpri_metric_family {
    char *name; /* with the prefix */
    char *help;
    cpri_metric_type type;
    label labels[CPRI_METRICS_MAX_LABELS];
    size_t n_labels;
    double *bounds; /* histograms */
    size_t n_bounds;
    cpri_metric *series;
    size_t n_series;
    _Atomic uint64_t *bucket_rows; /* histograms: n_series rows of row_stride */
};

struct cpri_metrics {
    pthread_mutex_t mu; /* guards the family list and the collector (M4) */
    cpri_metric_family **families;
    size_t n_families, cap_families;
    cpri_metrics_collect_fn collect;
    void *collect_ctx;
    _Atomic(cpri_metrics_health_fn) health; /* /healthz; NULL: 404 */
    void *_Atomic health_ctx;
};

/* ---- doubles in atomics ------------------------------------------------------------ */

static uint64_t bits_of(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static double double_of(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

static void atomic_add_double(_Atomic uint64_t *bits, double delta)
{
    uint64_t old = atomic_load_explicit(bits, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(bits, &old, bits_of(double_of(old) + delta),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

/* ---- names and descriptions -------------------------------------------------------- */

static int is_alpha_(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The family name after the prefix: [a-zA-Z0-9_:]+ (the prefix supplies the
 * leading letter the format wants). */
static int family_name_valid(const char *name)
{
    if (!name || !*name || strlen(name) > 200)
        return 0;
    for (const char *p = name; *p; p++)
        if (!is_alpha_(*p) && !is_digit(*p) && *p != ':')
            return 0;
    return 1;
}

static int label_name_valid(const char *name, cpri_metric_type type)
{
    if (!name || !is_alpha_(name[0]) || strncmp(name, "__", 2) == 0 || strlen(name) > 100)
        return 0;
    for (const char *p = name; *p; p++)
        if (!is_alpha_(*p) && !is_digit(*p))
            return 0;
    return !(type == CPRI_METRIC_HISTOGRAM && strcmp(name, "le") == 0);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* At least one value, none NULL, no two equal (a series per combination). */
static int label_values_valid(const cpri_metric_label *l)
{
    if (l->n_values == 0 || !l->values)
        return 0;
    for (size_t v = 0; v < l->n_values; v++) {
        if (!l->values[v])
            return 0;
        for (size_t w = 0; w < v; w++)
            if (strcmp(l->values[v], l->values[w]) == 0)
                return 0;
    }
    return 1;
}

static cpr_status check_labels(const cpri_metric_desc *d, size_t *n_series)
{
    if (d->n_labels > CPRI_METRICS_MAX_LABELS || (d->n_labels && !d->labels))
        return cpr_fail(CPR_INVALID_ARGUMENT, "metric %s: at most %d labels", d->name,
                        CPRI_METRICS_MAX_LABELS);
    size_t n = 1;
    for (size_t i = 0; i < d->n_labels; i++) {
        const cpri_metric_label *l = &d->labels[i];
        if (!label_name_valid(l->name, d->type))
            return cpr_fail(CPR_INVALID_ARGUMENT, "metric %s: bad label name '%s'", d->name,
                            l->name ? l->name : "(null)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(d->labels[j].name, l->name) == 0)
                return cpr_fail(CPR_INVALID_ARGUMENT, "metric %s: label %s twice", d->name,
                                l->name);
        if (!label_values_valid(l))
            return cpr_fail(CPR_INVALID_ARGUMENT,
                            "metric %s: label %s: values missing or repeated", d->name, l->name);
        if (l->n_values > CPRI_METRICS_MAX_SERIES / n)
            return cpr_fail(CPR_INVALID_ARGUMENT, "metric %s: more than %d series", d->name,
                            CPRI_METRICS_MAX_SERIES);
        n *= l->n_values;
    }
    *n_series = n;
    return CPR_OK;
}

static cpr_status check_buckets(const cpri_metric_desc *d)
{
    if (d->type != CPRI_METRIC_HISTOGRAM || !d->buckets)
        return CPR_OK;
    if (d->n_buckets == 0 || d->n_buckets > CPRI_METRICS_MAX_BUCKETS)
        return cpr_fail(CPR_INVALID_ARGUMENT, "metric %s: 1 to %d buckets", d->name,
                        CPRI_METRICS_MAX_BUCKETS);
    for (size_t i = 0; i < d->n_buckets; i++)
        if (!isfinite(d->buckets[i]) || (i > 0 && !(d->buckets[i] > d->buckets[i - 1])))
            return cpr_fail(CPR_INVALID_ARGUMENT,
                            "metric %s: bucket bounds must be finite and ascending", d->name);
    return CPR_OK;
}

static cpr_status check_desc(const cpri_metric_desc *d, size_t *n_series)
{
    if (!d || !family_name_valid(d->name))
        return cpr_fail(CPR_INVALID_ARGUMENT, "metric name '%s' is not [a-zA-Z0-9_:]+",
                        d && d->name ? d->name : "(null)");
    if (!d->help || !d->help[0])
        return cpr_fail(CPR_INVALID_ARGUMENT, "metric %s needs a help text", d->name);
    if (d->type != CPRI_METRIC_COUNTER && d->type != CPRI_METRIC_GAUGE &&
        d->type != CPRI_METRIC_HISTOGRAM)
        return cpr_fail(CPR_INVALID_ARGUMENT, "metric %s: unknown type %d", d->name, (int)d->type);
    if ((d->type == CPRI_METRIC_COUNTER) != ends_with(d->name, "_total"))
        return cpr_fail(CPR_INVALID_ARGUMENT,
                        "metric %s: counters, and only counters, end in _total", d->name);
    cpr_status st = check_labels(d, n_series);
    if (st == CPR_OK)
        st = check_buckets(d);
    return st;
}

/* ---- families ---------------------------------------------------------------------- */

static size_t row_stride(const cpri_metric_family *f)
{
    size_t n = f->n_bounds + 1;
    return (n + BUCKETS_PER_LINE - 1) / BUCKETS_PER_LINE * BUCKETS_PER_LINE;
}

static void family_free(cpri_metric_family *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_labels; i++) {
        for (size_t v = 0; v < f->labels[i].n_values && f->labels[i].values; v++)
            free(f->labels[i].values[v]);
        free(f->labels[i].values);
        free(f->labels[i].name);
    }
    free(f->name);
    free(f->help);
    free(f->bounds);
    free(f->series);
    free(f->bucket_rows);
    free(f);
}

static char *dup_prefixed(const char *prefix, const char *s)
{
    size_t n = strlen(prefix) + strlen(s) + 1;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s%s", prefix, s);
    return out;
}

static int copy_labels(cpri_metric_family *f, const cpri_metric_desc *d)
{
    for (size_t i = 0; i < d->n_labels; i++, f->n_labels++) {
        label *l = &f->labels[i];
        l->name = dup_prefixed("", d->labels[i].name);
        l->values = calloc(d->labels[i].n_values, sizeof *l->values);
        if (!l->name || !l->values)
            return -1;
        l->n_values = d->labels[i].n_values;
        for (size_t v = 0; v < l->n_values; v++)
            if (!(l->values[v] = dup_prefixed("", d->labels[i].values[v])))
                return -1;
    }
    return 0;
}

static int copy_bounds(cpri_metric_family *f, const cpri_metric_desc *d)
{
    if (f->type != CPRI_METRIC_HISTOGRAM)
        return 0;
    const double *src = d->buckets ? d->buckets : cpri_metrics_latency_buckets;
    f->n_bounds = d->buckets ? d->n_buckets : cpri_metrics_latency_buckets_n;
    f->bounds = malloc(f->n_bounds * sizeof *f->bounds);
    if (!f->bounds)
        return -1;
    memcpy(f->bounds, src, f->n_bounds * sizeof *f->bounds);
    return 0;
}

/* Every series, zero (M1); aligned so that neighbours share no cache line. */
static int alloc_series(cpri_metric_family *f)
{
    f->series = aligned_alloc(CACHE_LINE, f->n_series * sizeof *f->series);
    if (!f->series)
        return -1;
    size_t stride = row_stride(f);
    if (f->type == CPRI_METRIC_HISTOGRAM) {
        f->bucket_rows = aligned_alloc(CACHE_LINE, f->n_series * stride * sizeof *f->bucket_rows);
        if (!f->bucket_rows)
            return -1;
        for (size_t i = 0; i < f->n_series * stride; i++)
            atomic_init(&f->bucket_rows[i], 0);
    }
    for (size_t i = 0; i < f->n_series; i++) {
        cpri_metric *s = &f->series[i];
        atomic_init(&s->value, f->type == CPRI_METRIC_GAUGE ? bits_of(0.0) : 0);
        atomic_init(&s->sum_bits, bits_of(0.0));
        atomic_init(&s->touched, false);
        s->buckets = f->bucket_rows ? f->bucket_rows + i * stride : NULL;
        s->family = f;
    }
    return 0;
}

static cpr_status family_build(const cpri_metric_desc *d, size_t n_series,
                               cpri_metric_family **out)
{
    cpri_metric_family *f = calloc(1, sizeof *f);
    if (!f)
        return cpr_fail(CPR_NO_MEMORY, "out of memory registering metric %s", d->name);
    f->type = d->type;
    f->n_series = n_series;
    f->name = dup_prefixed(CPRI_METRICS_PREFIX, d->name);
    f->help = dup_prefixed("", d->help);
    if (!f->name || !f->help || copy_labels(f, d) || copy_bounds(f, d) || alloc_series(f)) {
        family_free(f);
        return cpr_fail(CPR_NO_MEMORY, "out of memory registering metric %s", d->name);
    }
    *out = f;
    return CPR_OK;
}

static cpr_status registry_append(cpri_metrics *m, cpri_metric_family *f)
{
    for (size_t i = 0; i < m->n_families; i++)
        if (strcmp(m->families[i]->name, f->name) == 0)
            return cpr_fail(CPR_INVALID_ARGUMENT, "metric %s registered twice", f->name);
    if (m->n_families == m->cap_families) {
        size_t cap = m->cap_families ? 2 * m->cap_families : 16;
        cpri_metric_family **grown = realloc(m->families, cap * sizeof *grown);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory registering metric %s", f->name);
        m->families = grown;
        m->cap_families = cap;
    }
    m->families[m->n_families++] = f;
    return CPR_OK;
}

cpr_status cpri_metrics_family_add(cpri_metrics *m, const cpri_metric_desc *desc,
                                   cpri_metric_family **out)
{
    size_t n_series = 0;
    cpri_metric_family *f = NULL;
    cpr_status st = check_desc(desc, &n_series);
    if (st == CPR_OK)
        st = family_build(desc, n_series, &f);
    if (st)
        return st;
    pthread_mutex_lock(&m->mu);
    st = registry_append(m, f);
    pthread_mutex_unlock(&m->mu);
    if (st) {
        family_free(f);
        return st;
    }
    *out = f;
    return CPR_OK;
}

cpr_status cpri_metrics_create(cpri_metrics **out)
{
    cpri_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return cpr_fail(CPR_NO_MEMORY, "out of memory creating the metrics registry");
    if (pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m);
        return cpr_fail(CPR_NO_MEMORY, "cannot create the metrics registry's lock");
    }
    *out = m;
    return CPR_OK;
}

void cpri_metrics_destroy(cpri_metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_families; i++)
        family_free(m->families[i]);
    free(m->families);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* ---- series lookup ----------------------------------------------------------------- */

cpri_metric *cpri_metrics_series_at(const cpri_metric_family *f, const size_t *index)
{
    if (!f || (f->n_labels && !index))
        return NULL;
    size_t at = 0;
    for (size_t i = 0; i < f->n_labels; i++) {
        if (index[i] >= f->labels[i].n_values)
            return NULL;
        at = at * f->labels[i].n_values + index[i];
    }
    return &f->series[at];
}

cpri_metric *cpri_metrics_series(const cpri_metric_family *f, const char *const *values)
{
    if (!f || (f->n_labels && !values))
        return NULL;
    size_t index[CPRI_METRICS_MAX_LABELS] = {0};
    for (size_t i = 0; i < f->n_labels; i++) {
        const label *l = &f->labels[i];
        size_t v = 0;
        while (v < l->n_values && (!values[i] || strcmp(l->values[v], values[i]) != 0))
            v++;
        if (v == l->n_values)
            return NULL;
        index[i] = v;
    }
    return cpri_metrics_series_at(f, index);
}

/* ---- updates (M2) ------------------------------------------------------------------ */

static void touch(cpri_metric *s)
{
    /* A load first: once set, the flag's line is only read (no writes to share). */
    if (!atomic_load_explicit(&s->touched, memory_order_relaxed))
        atomic_store_explicit(&s->touched, true, memory_order_relaxed);
}

static void want_type(const cpri_metric *s, unsigned types_mask, const char *op)
{
    if (!(types_mask & (1u << s->family->type))) {
        cpri_log(CPR_LOG_ERROR, "metrics: %s on %s, a metric of another type", op,
                 s->family->name);
        BUG("metric updated as another type");
    }
}

#define T(type) (1u << (type))

void cpri_metric_add(cpri_metric *s, uint64_t n)
{
    if (!s)
        return;
    want_type(s, T(CPRI_METRIC_COUNTER) | T(CPRI_METRIC_GAUGE), "add");
    if (s->family->type == CPRI_METRIC_COUNTER)
        atomic_fetch_add_explicit(&s->value, n, memory_order_relaxed);
    else
        atomic_add_double(&s->value, (double)n);
    touch(s);
}

void cpri_metric_set_u64(cpri_metric *s, uint64_t v)
{
    if (!s)
        return;
    want_type(s, T(CPRI_METRIC_COUNTER) | T(CPRI_METRIC_GAUGE), "set_u64");
    uint64_t stored = s->family->type == CPRI_METRIC_COUNTER ? v : bits_of((double)v);
    atomic_store_explicit(&s->value, stored, memory_order_relaxed);
    touch(s);
}

void cpri_metric_set(cpri_metric *s, double v)
{
    if (!s)
        return;
    want_type(s, T(CPRI_METRIC_GAUGE), "set");
    atomic_store_explicit(&s->value, bits_of(v), memory_order_relaxed);
    touch(s);
}

void cpri_metric_gauge_add(cpri_metric *s, double delta)
{
    if (!s)
        return;
    want_type(s, T(CPRI_METRIC_GAUGE), "gauge_add");
    atomic_add_double(&s->value, delta);
    touch(s);
}

/* The first bucket whose bound is >= v; n_bounds (+Inf) if none. */
static size_t bucket_of(const cpri_metric_family *f, double v)
{
    size_t lo = 0, hi = f->n_bounds;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v <= f->bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void cpri_metric_observe(cpri_metric *s, double v)
{
    if (!s)
        return;
    want_type(s, T(CPRI_METRIC_HISTOGRAM), "observe");
    if (isnan(v))
        return;
    atomic_fetch_add_explicit(&s->buckets[bucket_of(s->family, v)], 1, memory_order_relaxed);
    atomic_add_double(&s->sum_bits, v);
    touch(s);
}

/* ---- the text format 0.0.4 --------------------------------------------------------- */

typedef struct text {
    char *buf;
    size_t len, cap;
    int failed; /* out of memory: everything after is dropped */
} text;

static void text_reserve(text *t, size_t more)
{
    if (t->failed || t->len + more + 1 <= t->cap)
        return;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + more + 1)
        cap *= 2;
    char *grown = realloc(t->buf, cap);
    if (!grown) {
        t->failed = 1;
        return;
    }
    t->buf = grown;
    t->cap = cap;
}

static void text_put(text *t, const char *s, size_t n)
{
    text_reserve(t, n);
    if (t->failed)
        return;
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static void text_str(text *t, const char *s)
{
    text_put(t, s, strlen(s));
}

/* `s` with backslash and newline escaped, and the double quote when
 * `quote` (label values; HELP text leaves quotes alone). */
static void text_escaped(text *t, const char *s, int quote)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\')
            text_put(t, "\\\\", 2);
        else if (*p == '\n')
            text_put(t, "\\n", 2);
        else if (*p == '"' && quote)
            text_put(t, "\\\"", 2);
        else
            text_put(t, p, 1);
    }
}

/* Integers as integers, else the shortest %g that reads back exactly. */
static void format_double(char *buf, size_t cap, double v)
{
    if (isnan(v)) {
        snprintf(buf, cap, "NaN");
    } else if (isinf(v)) {
        snprintf(buf, cap, v > 0 ? "+Inf" : "-Inf");
    } else if (v > -1e15 && v < 1e15 && v == (double)(int64_t)v) {
        snprintf(buf, cap, "%" PRId64, (int64_t)v);
    } else {
        for (int digits = 1; digits <= 17; digits++) {
            snprintf(buf, cap, "%.*g", digits, v);
            if (strtod(buf, NULL) == v)
                break;
        }
    }
}

static void text_double(text *t, double v)
{
    char num[40];
    format_double(num, sizeof num, v);
    text_str(t, num);
}

static void text_u64(text *t, uint64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%" PRIu64, v);
    text_str(t, num);
}

/* name{l1="v1",l2="v2"[,le="B"]} with a trailing space; no braces when
 * there is nothing in them. */
static void text_series_name(text *t, const cpri_metric_family *f, size_t at, const char *suffix,
                             const char *le)
{
    size_t index[CPRI_METRICS_MAX_LABELS] = {0};
    for (size_t i = f->n_labels; i-- > 0;) {
        index[i] = at % f->labels[i].n_values;
        at /= f->labels[i].n_values;
    }
    text_str(t, f->name);
    text_str(t, suffix);
    if (f->n_labels || le)
        text_put(t, "{", 1);
    for (size_t i = 0; i < f->n_labels; i++) {
        if (i)
            text_put(t, ",", 1);
        text_str(t, f->labels[i].name);
        text_put(t, "=\"", 2);
        text_escaped(t, f->labels[i].values[index[i]], 1);
        text_put(t, "\"", 1);
    }
    if (le) {
        text_str(t, f->n_labels ? ",le=\"" : "le=\"");
        text_str(t, le);
        text_put(t, "\"", 1);
    }
    if (f->n_labels || le)
        text_put(t, "}", 1);
    text_put(t, " ", 1);
}

static void render_histogram(text *t, const cpri_metric_family *f, size_t at)
{
    const cpri_metric *s = &f->series[at];
    uint64_t cumulative = 0;
    char le[40];
    /* M3: one read of each bucket; the +Inf bucket and _count are their total. */
    for (size_t b = 0; b <= f->n_bounds; b++) {
        cumulative += atomic_load_explicit(&s->buckets[b], memory_order_relaxed);
        if (b < f->n_bounds)
            format_double(le, sizeof le, f->bounds[b]);
        else
            snprintf(le, sizeof le, "+Inf");
        text_series_name(t, f, at, "_bucket", le);
        text_u64(t, cumulative);
        text_put(t, "\n", 1);
    }
    text_series_name(t, f, at, "_sum", NULL);
    text_double(t, double_of(atomic_load_explicit(&s->sum_bits, memory_order_relaxed)));
    text_put(t, "\n", 1);
    text_series_name(t, f, at, "_count", NULL);
    text_u64(t, cumulative);
    text_put(t, "\n", 1);
}

static void render_series(text *t, const cpri_metric_family *f, size_t at)
{
    const cpri_metric *s = &f->series[at];
    if (f->n_labels && !atomic_load_explicit(&s->touched, memory_order_relaxed))
        return; /* M4 */
    if (f->type == CPRI_METRIC_HISTOGRAM) {
        render_histogram(t, f, at);
        return;
    }
    text_series_name(t, f, at, "", NULL);
    uint64_t v = atomic_load_explicit(&s->value, memory_order_relaxed);
    if (f->type == CPRI_METRIC_COUNTER)
        text_u64(t, v);
    else
        text_double(t, double_of(v));
    text_put(t, "\n", 1);
}

static void render_family(text *t, const cpri_metric_family *f)
{
    static const char *const type_names[] = {"counter", "gauge", "histogram"};
    text_str(t, "# HELP ");
    text_str(t, f->name);
    text_put(t, " ", 1);
    text_escaped(t, f->help, 0);
    text_str(t, "\n# TYPE ");
    text_str(t, f->name);
    text_put(t, " ", 1);
    text_str(t, type_names[f->type]);
    text_put(t, "\n", 1);
    for (size_t at = 0; at < f->n_series; at++)
        render_series(t, f, at);
}

void cpri_metrics_set_collector(cpri_metrics *m, cpri_metrics_collect_fn fn, void *ctx)
{
    pthread_mutex_lock(&m->mu);
    m->collect = fn;
    m->collect_ctx = ctx;
    pthread_mutex_unlock(&m->mu);
}

cpr_status cpri_metrics_render(cpri_metrics *m, char **out, size_t *len)
{
    text t = {0};
    pthread_mutex_lock(&m->mu);
    if (m->collect)
        m->collect(m, m->collect_ctx);
    text_reserve(&t, 0); /* an empty registry renders "" */
    for (size_t i = 0; i < m->n_families; i++)
        render_family(&t, m->families[i]);
    pthread_mutex_unlock(&m->mu);
    if (t.failed) {
        free(t.buf);
        return cpr_fail(CPR_NO_MEMORY, "out of memory rendering metrics");
    }
    t.buf[t.len] = '\0';
    *out = t.buf;
    *len = t.len;
    return CPR_OK;
}

/* ---- the HTTP endpoint (M5) -------------------------------------------------------- */

struct cpri_metrics_server {
    struct MHD_Daemon *daemon;
    cpri_metrics *m;
    pthread_mutex_t mu;     /* guards start_error */
    atomic_bool started;
    char start_error[256];  /* what libmicrohttpd logged while starting */
};

/* "HOST:PORT" (IPv4 or "localhost") or "[IPV6]:PORT" into *sa. */
static cpr_status parse_addr(const char *addr, struct sockaddr_storage *sa, int *ipv6)
{
    char host[64];
    uint16_t port = 0;
    memset(sa, 0, sizeof *sa);
    cpr_status st = cpri_cli_host_port("--metrics-listen", addr, host, sizeof host, &port, ipv6);
    if (st)
        return st;
    if (*ipv6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1)
            return CPR_OK;
    } else {
        struct sockaddr_in *in4 = (struct sockaddr_in *)sa;
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
        if (strcmp(host, "localhost") == 0)
            snprintf(host, sizeof host, "127.0.0.1");
        if (inet_pton(AF_INET, host, &in4->sin_addr) == 1)
            return CPR_OK;
    }
    return cpr_fail(CPR_INVALID_ARGUMENT, "metrics address '%s': '%s' is not an IP%s address",
                    addr, host, *ipv6 ? "v6" : "v4");
}

/* libmicrohttpd's messages: kept while starting (for the failure's message),
 * logged afterwards (a misbehaving client is not the operator's problem). */
__attribute__((format(printf, 2, 0))) static void http_log(void *cls, const char *fmt, va_list ap)
{
    cpri_metrics_server *srv = cls;
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    if (atomic_load(&srv->started)) {
        cpri_log(CPR_LOG_INFO, "metrics http: %s", line);
        return;
    }
    pthread_mutex_lock(&srv->mu);
    snprintf(srv->start_error, sizeof srv->start_error, "%s", line);
    pthread_mutex_unlock(&srv->mu);
}

static enum MHD_Result reply_static(struct MHD_Connection *conn, unsigned code, const char *body)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    enum MHD_Result ret = MHD_add_response_header(resp, "Content-Type", "text/plain");
    if (ret == MHD_YES && code == MHD_HTTP_METHOD_NOT_ALLOWED)
        ret = MHD_add_response_header(resp, "Allow", "GET, HEAD");
    if (ret == MHD_YES)
        ret = MHD_queue_response(conn, code, resp);
    MHD_destroy_response(resp);
    return ret;
}

void cpri_metrics_set_health(cpri_metrics *m, cpri_metrics_health_fn fn, void *ctx)
{
    atomic_store(&m->health_ctx, ctx);
    atomic_store(&m->health, fn);
}

/* 200 "serving", or 503 with the reason; copied, as the reason is the
 * caller's buffer. */
static enum MHD_Result reply_health(struct MHD_Connection *conn, cpri_metrics *m)
{
    cpri_metrics_health_fn fn = atomic_load(&m->health);
    if (!fn)
        return reply_static(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n");
    char why[512] = "";
    int serving = fn(atomic_load(&m->health_ctx), why, sizeof why - 1);
    char body[600];
    snprintf(body, sizeof body, "%s\n", serving ? "serving" : why[0] ? why : "not serving");
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    enum MHD_Result ret = MHD_add_response_header(resp, "Content-Type", "text/plain");
    if (ret == MHD_YES)
        ret = MHD_queue_response(conn, serving ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_metrics(struct MHD_Connection *conn, cpri_metrics *m)
{
    char *body = NULL;
    size_t len = 0;
    if (cpri_metrics_render(m, &body, &len) != CPR_OK)
        return reply_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(len, body, free);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    enum MHD_Result ret = MHD_add_response_header(resp, "Content-Type", CPRI_METRICS_CONTENT_TYPE);
    if (ret == MHD_YES)
        ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Other methods are refused on the first call, before any body is read
 * (libmicrohttpd then closes the connection). GET and HEAD are answered on
 * the call that follows the whole request, whose body, if any, is dropped:
 * answering earlier would cost the scraper its keep-alive connection. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    static int seen; /* any non-NULL marker: the headers have been seen */
    cpri_metrics_server *srv = cls;
    (void)version;
    (void)upload_data;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
    if (!*req_cls) {
        *req_cls = &seen;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(url, "/healthz") == 0)
        return reply_health(conn, srv->m);
    if (strcmp(url, "/metrics") != 0)
        return reply_static(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n");
    return reply_metrics(conn, srv->m);
}

static void server_free(cpri_metrics_server *srv)
{
    pthread_mutex_destroy(&srv->mu);
    free(srv);
}

static cpr_status server_start(cpri_metrics_server *srv, const char *addr,
                               const struct sockaddr_storage *sa, int ipv6)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    if (ipv6)
        flags |= MHD_USE_IPv6;
    /* The address decides; the port argument only names it in messages. */
    uint16_t port = ntohs(ipv6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
                               : ((const struct sockaddr_in *)sa)->sin_port);
    srv->daemon = MHD_start_daemon(
        flags, port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)sa,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S, MHD_OPTION_EXTERNAL_LOGGER,
        http_log, srv, MHD_OPTION_END);
    if (srv->daemon)
        return CPR_OK;
    pthread_mutex_lock(&srv->mu);
    cpr_status st = cpr_fail(CPR_IO, "cannot serve metrics on %s: %s", addr,
                             srv->start_error[0] ? srv->start_error : "libmicrohttpd failed");
    pthread_mutex_unlock(&srv->mu);
    return st;
}

cpr_status cpri_metrics_serve(cpri_metrics *m, const char *addr, cpri_metrics_server **out,
                              int *port)
{
    struct sockaddr_storage sa;
    int ipv6 = 0;
    cpr_status st = parse_addr(addr, &sa, &ipv6);
    if (st)
        return st;
    cpri_metrics_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting the metrics server");
    srv->m = m;
    atomic_init(&srv->started, false);
    if (pthread_mutex_init(&srv->mu, NULL) != 0) {
        free(srv);
        return cpr_fail(CPR_NO_MEMORY, "cannot create the metrics server's lock");
    }
    st = server_start(srv, addr, &sa, ipv6);
    if (st)
        goto out;
    atomic_store(&srv->started, true);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (!info || info->port == 0) {
        st = cpr_fail(CPR_IO, "metrics server on %s: cannot read its port", addr);
        MHD_stop_daemon(srv->daemon);
        goto out;
    }
    *port = info->port;
    *out = srv;
out:
    if (st)
        server_free(srv);
    return st;
}

void cpri_metrics_serve_stop(cpri_metrics_server *server)
{
    if (!server)
        return;
    MHD_stop_daemon(server->daemon);
    server_free(server);
}
