/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd's metrics (ckptd/metrics.h): updates from many threads add up
 * exactly; a small registry renders to exactly the expected text (HELP and
 * TYPE lines, escaping, cumulative buckets with +Inf, number formats, series
 * shown once touched); bad registrations are refused; the HTTP endpoint
 * answers a real socket client on 127.0.0.1 (200 with the rendered body, HEAD,
 * 404, 405) and refuses malformed or taken addresses; and `promtool check
 * metrics` accepts a ckptd-like exposition (that part is skipped without
 * promtool on PATH).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpr_common.h"
#include "metrics.h"
#include "testutil.h"

/* ---- helpers ----------------------------------------------------------------------- */

static cpri_metric_family *family(cpri_metrics *m, const cpri_metric_desc *d)
{
    cpri_metric_family *f = NULL;
    assert_status(CPR_OK, cpri_metrics_family_add(m, d, &f));
    assert_non_null(f);
    return f;
}

static char *render(cpri_metrics *m)
{
    char *text = NULL;
    size_t len = 0;
    assert_status(CPR_OK, cpri_metrics_render(m, &text, &len));
    assert_int_equal(strlen(text), len);
    return text;
}

static void assert_has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return;
    fail_msg("no line \"%s\" in:\n%s", line, text);
}

/* ---- rendering --------------------------------------------------------------------- */

static const char *const methods[] = {"Begin", "Commit"};
static const char *const statuses[] = {"OK", "NOT_FOUND"};
static const char *const paths[] = {"a\"b", "c\\d", "e\nf", "plain"};

static void set_store_bytes(cpri_metrics *m, void *ctx)
{
    (void)m;
    cpri_metric_set_u64(ctx, 1234);
}

static void test_render_exact(void **unused)
{
    (void)unused;
    cpri_metrics *m = NULL;
    assert_status(CPR_OK, cpri_metrics_create(&m));
    cpri_metric_label call_labels[] = {{"method", methods, 2}, {"status", statuses, 2}};
    cpri_metric_family *calls = family(m, &(cpri_metric_desc){.name = "calls_total",
                                                              .help = "Calls served.",
                                                              .type = CPRI_METRIC_COUNTER,
                                                              .labels = call_labels,
                                                              .n_labels = 2});
    cpri_metric_family *bytes = family(m, &(cpri_metric_desc){.name = "store_bytes",
                                                              .help = "Bytes \\ on\ndisk \"now\".",
                                                              .type = CPRI_METRIC_GAUGE});
    cpri_metric_label path_label[] = {{"path", paths, 4}};
    cpri_metric_family *odd = family(m, &(cpri_metric_desc){.name = "odd",
                                                            .help = "Values.",
                                                            .type = CPRI_METRIC_GAUGE,
                                                            .labels = path_label,
                                                            .n_labels = 1});
    static const double bounds[] = {0.01, 0.1, 0.5};
    cpri_metric_label commit_label[] = {{"method", methods + 1, 1}};
    cpri_metric_family *commit = family(m, &(cpri_metric_desc){.name = "commit_duration_seconds",
                                                               .help = "Commit latency.",
                                                               .type = CPRI_METRIC_HISTOGRAM,
                                                               .labels = commit_label,
                                                               .n_labels = 1,
                                                               .buckets = bounds,
                                                               .n_buckets = 3});
    family(m, &(cpri_metric_desc){
                  .name = "idle_seconds", .help = "Nothing yet.", .type = CPRI_METRIC_HISTOGRAM});
    cpri_metric_family *folds = family(
        m,
        &(cpri_metric_desc){.name = "folds_total", .help = "Folds.", .type = CPRI_METRIC_COUNTER});
    /* A counter mirrored from a total kept elsewhere: exact beyond 2^53. */
    cpri_metric_set_u64(cpri_metrics_series(folds, NULL), (1ull << 60) + 1);

    cpri_metric_add(cpri_metrics_series(calls, (const char *[]){"Begin", "OK"}), 2);
    cpri_metric_add(cpri_metrics_series_at(calls, (const size_t[]){0, 0}), 1);
    cpri_metric_add(cpri_metrics_series(calls, (const char *[]){"Commit", "NOT_FOUND"}), 0);
    cpri_metrics_set_collector(m, set_store_bytes, cpri_metrics_series(bytes, NULL));
    cpri_metric_set(cpri_metrics_series_at(odd, (const size_t[]){0}), 0.5);
    cpri_metric_set(cpri_metrics_series_at(odd, (const size_t[]){1}), -2);
    cpri_metric_set(cpri_metrics_series_at(odd, (const size_t[]){2}), 1e300);
    cpri_metric_set(cpri_metrics_series_at(odd, (const size_t[]){3}), 0.1);
    cpri_metric *c = cpri_metrics_series(commit, (const char *[]){"Commit"});
    /* Binary fractions, so the sum is exact; 0.5 falls into the 0.5 bucket
     * (le: less than or equal); NaN is dropped. */
    const double seen[] = {0.0078125, 0.0625, 0.0625, 0.5, 4, 0.0 / 0.0};
    for (size_t i = 0; i < sizeof seen / sizeof seen[0]; i++)
        cpri_metric_observe(c, seen[i]);
    char *text = render(m);
    char expected[4096];
    snprintf(expected, sizeof expected, "%s",
             "# HELP cpr_ckptd_calls_total Calls served.\n"
             "# TYPE cpr_ckptd_calls_total counter\n"
             "cpr_ckptd_calls_total{method=\"Begin\",status=\"OK\"} 3\n"
             "cpr_ckptd_calls_total{method=\"Commit\",status=\"NOT_FOUND\"} 0\n"
             "# HELP cpr_ckptd_store_bytes Bytes \\\\ on\\ndisk \"now\".\n"
             "# TYPE cpr_ckptd_store_bytes gauge\n"
             "cpr_ckptd_store_bytes 1234\n"
             "# HELP cpr_ckptd_odd Values.\n"
             "# TYPE cpr_ckptd_odd gauge\n"
             "cpr_ckptd_odd{path=\"a\\\"b\"} 0.5\n"
             "cpr_ckptd_odd{path=\"c\\\\d\"} -2\n"
             "cpr_ckptd_odd{path=\"e\\nf\"} 1e+300\n"
             "cpr_ckptd_odd{path=\"plain\"} 0.1\n"
             "# HELP cpr_ckptd_commit_duration_seconds Commit latency.\n"
             "# TYPE cpr_ckptd_commit_duration_seconds histogram\n"
             "cpr_ckptd_commit_duration_seconds_bucket{method=\"Commit\",le=\"0.01\"} 1\n"
             "cpr_ckptd_commit_duration_seconds_bucket{method=\"Commit\",le=\"0.1\"} 3\n"
             "cpr_ckptd_commit_duration_seconds_bucket{method=\"Commit\",le=\"0.5\"} 4\n"
             "cpr_ckptd_commit_duration_seconds_bucket{method=\"Commit\",le=\"+Inf\"} 5\n"
             "cpr_ckptd_commit_duration_seconds_sum{method=\"Commit\"} 4.6328125\n"
             "cpr_ckptd_commit_duration_seconds_count{method=\"Commit\"} 5\n"
             "# HELP cpr_ckptd_idle_seconds Nothing yet.\n"
             "# TYPE cpr_ckptd_idle_seconds histogram\n");
    const char *les[] = {"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
                         "0.5",   "1",      "2.5",   "5",    "10",    "30",   "60",  "+Inf"};
    for (size_t i = 0; i < sizeof les / sizeof les[0]; i++) {
        size_t used = strlen(expected);
        snprintf(expected + used, sizeof expected - used,
                 "cpr_ckptd_idle_seconds_bucket{le=\"%s\"} 0\n", les[i]);
    }
    size_t used = strlen(expected);
    snprintf(expected + used, sizeof expected - used,
             "cpr_ckptd_idle_seconds_sum 0\ncpr_ckptd_idle_seconds_count 0\n"
             "# HELP cpr_ckptd_folds_total Folds.\n"
             "# TYPE cpr_ckptd_folds_total counter\n"
             "cpr_ckptd_folds_total 1152921504606846977\n");
    assert_string_equal(text, expected);
    free(text);
    cpri_metrics_destroy(m);
}

static void test_empty_registry_renders_nothing(void **unused)
{
    (void)unused;
    cpri_metrics *m = NULL;
    assert_status(CPR_OK, cpri_metrics_create(&m));
    char *text = render(m);
    assert_string_equal(text, "");
    free(text);
    cpri_metrics_destroy(m);
    cpri_metrics_destroy(NULL);
}

/* ---- registration ------------------------------------------------------------------ */

static void refused(cpri_metrics *m, const cpri_metric_desc *d)
{
    cpri_metric_family *f = (cpri_metric_family *)&f; /* must stay untouched */
    cpri_metric_family *before = f;
    assert_status(CPR_INVALID_ARGUMENT, cpri_metrics_family_add(m, d, &f));
    assert_ptr_equal(f, before);
}

static void refused_named(cpri_metrics *m, const char *name, cpri_metric_type type)
{
    refused(m, &(cpri_metric_desc){.name = name, .help = "h", .type = type});
}

static void refused_labels(cpri_metrics *m, cpri_metric_type type, const cpri_metric_label *labels,
                           size_t n_labels)
{
    refused(m, &(cpri_metric_desc){
                   .name = "x", .help = "h", .type = type, .labels = labels, .n_labels = n_labels});
}

static void refused_buckets(cpri_metrics *m, const double *buckets, size_t n_buckets)
{
    refused(m, &(cpri_metric_desc){.name = "x",
                                   .help = "h",
                                   .type = CPRI_METRIC_HISTOGRAM,
                                   .buckets = buckets,
                                   .n_buckets = n_buckets});
}

static void test_registration_refusals(void **unused)
{
    (void)unused;
    cpri_metrics *m = NULL;
    assert_status(CPR_OK, cpri_metrics_create(&m));
    const cpri_metric_type C = CPRI_METRIC_COUNTER, G = CPRI_METRIC_GAUGE,
                           H = CPRI_METRIC_HISTOGRAM;
    refused_named(m, "calls", C);      /* a counter without _total */
    refused_named(m, "open_total", G); /* _total on a gauge */
    refused_named(m, "open_total", H);
    refused_named(m, "bad-name", G);
    refused_named(m, "", G);
    refused_named(m, NULL, G);
    refused_named(m, "x", (cpri_metric_type)7);
    refused(m, &(cpri_metric_desc){.name = "x", .help = "", .type = G});
    refused(m, &(cpri_metric_desc){.name = "x", .type = G});
    static const char *const two[] = {"a", "b"}, *const dup[] = {"a", "a"},
                             *const hole[] = {NULL, "a"};
    refused_labels(m, H, (cpri_metric_label[]){{"le", two, 2}}, 1);
    refused_labels(m, G, (cpri_metric_label[]){{"__x", two, 2}}, 1);
    refused_labels(m, G, (cpri_metric_label[]){{"1x", two, 2}}, 1);
    refused_labels(m, G, (cpri_metric_label[]){{"a-b", two, 2}}, 1);
    refused_labels(m, G, (cpri_metric_label[]){{NULL, two, 2}}, 1);
    refused_labels(m, G, (cpri_metric_label[]){{"l", two, 0}}, 1);
    refused_labels(m, G, (cpri_metric_label[]){{"l", NULL, 2}}, 1);
    refused_labels(m, G, (cpri_metric_label[]){{"l", dup, 2}}, 1);
    refused_labels(m, G, (cpri_metric_label[]){{"l", hole, 2}}, 1);
    refused_labels(m, G, (cpri_metric_label[]){{"l", two, 2}, {"l", two, 2}}, 2);
    refused_labels(m, G, NULL, 1);
    cpri_metric_label five[] = {
        {"a", two, 2}, {"b", two, 2}, {"c", two, 2}, {"d", two, 2}, {"e", two, 2}};
    refused_labels(m, G, five, 5);
    /* 2^13 series > CPRI_METRICS_MAX_SERIES. */
    static const char *v16[16];
    char names[16][4];
    for (int i = 0; i < 16; i++) {
        snprintf(names[i], sizeof names[i], "v%d", i);
        v16[i] = names[i];
    }
    cpri_metric_label big[] = {{"a", v16, 16}, {"b", v16, 16}, {"c", v16, 16}, {"d", two, 2}};
    refused_labels(m, G, big, 4);
    refused_buckets(m, (const double[]){1, 0.5}, 2);
    refused_buckets(m, (const double[]){1, 1}, 2);
    refused_buckets(m, (const double[]){1.0 / 0.0}, 1);
    refused_buckets(m, (const double[]){0.0 / 0.0}, 1);
    refused_buckets(m, (const double[]){1}, 0);
    double many[CPRI_METRICS_MAX_BUCKETS + 1];
    for (size_t i = 0; i < CPRI_METRICS_MAX_BUCKETS + 1; i++)
        many[i] = (double)i;
    refused_buckets(m, many, CPRI_METRICS_MAX_BUCKETS + 1);
    /* 16 x 16 x 16 is exactly the limit and fine; a name twice is not. */
    cpri_metric_family *f = family(
        m, &(cpri_metric_desc){.name = "x", .help = "ok", .type = G, .labels = big, .n_labels = 3});
    refused(m, &(cpri_metric_desc){.name = "x", .help = "again", .type = G});

    /* Lookups outside the lists find nothing, and updating nothing is a no-op. */
    assert_null(cpri_metrics_series(f, (const char *[]){"v1", "v2", "v16"}));
    assert_null(cpri_metrics_series(f, (const char *[]){"v1", NULL, "v2"}));
    assert_null(cpri_metrics_series(f, NULL));
    assert_null(cpri_metrics_series_at(f, (const size_t[]){0, 16, 0}));
    assert_non_null(cpri_metrics_series_at(f, (const size_t[]){15, 15, 15}));
    assert_ptr_equal(cpri_metrics_series(f, (const char *[]){"v3", "v0", "v15"}),
                     cpri_metrics_series_at(f, (const size_t[]){3, 0, 15}));
    cpri_metric_add(NULL, 1);
    cpri_metric_set(NULL, 1);
    cpri_metric_set_u64(NULL, 1);
    cpri_metric_gauge_add(NULL, 1);
    cpri_metric_observe(NULL, 1);
    /* Nothing touched: the family shows its HELP and TYPE only. */
    char *text = render(m);
    assert_string_equal(text, "# HELP cpr_ckptd_x ok\n# TYPE cpr_ckptd_x gauge\n");
    free(text);
    cpri_metrics_destroy(m);
}

/* ---- many threads ------------------------------------------------------------------ */

#define THREADS 8
#define PER_THREAD 100000

typedef struct hammer {
    cpri_metric_family *calls, *in_flight, *latency;
} hammer;

static void *hammer_run(void *arg)
{
    hammer *h = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        /* Look the series up each time, as a handler would. */
        const char *status = i % 4 ? "OK" : "NOT_FOUND";
        cpri_metric_add(cpri_metrics_series(h->calls, (const char *[]){"Commit", status}), 1);
        cpri_metric *g = cpri_metrics_series(h->in_flight, NULL);
        cpri_metric_gauge_add(g, 1);
        cpri_metric_gauge_add(g, -0.5);
        cpri_metric_observe(cpri_metrics_series_at(h->latency, (const size_t[]){1}),
                            i % 2 ? 0.25 : 2.0);
    }
    return NULL;
}

static void *scraper_run(void *arg)
{
    for (int i = 0; i < 50; i++)
        free(render(arg));
    return NULL;
}

static void test_threads_add_up_exactly(void **unused)
{
    (void)unused;
    cpri_metrics *m = NULL;
    assert_status(CPR_OK, cpri_metrics_create(&m));
    cpri_metric_label call_labels[] = {{"method", methods, 2}, {"status", statuses, 2}};
    hammer h;
    h.calls = family(m, &(cpri_metric_desc){.name = "calls_total",
                                            .help = "c",
                                            .type = CPRI_METRIC_COUNTER,
                                            .labels = call_labels,
                                            .n_labels = 2});
    h.in_flight =
        family(m, &(cpri_metric_desc){.name = "in_flight", .help = "g", .type = CPRI_METRIC_GAUGE});
    h.latency = family(m, &(cpri_metric_desc){.name = "latency_seconds",
                                              .help = "h",
                                              .type = CPRI_METRIC_HISTOGRAM,
                                              .labels = call_labels,
                                              .n_labels = 1,
                                              .buckets = (const double[]){0.5, 1},
                                              .n_buckets = 2});
    pthread_t threads[THREADS], scraper;
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, hammer_run, &h), 0);
    assert_int_equal(pthread_create(&scraper, NULL, scraper_run, m), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    pthread_join(scraper, NULL);
    char *text = render(m);
    const int total = THREADS * PER_THREAD;
    char line[160];
    snprintf(line, sizeof line, "cpr_ckptd_calls_total{method=\"Commit\",status=\"OK\"} %d",
             total / 4 * 3);
    assert_has_line(text, line);
    snprintf(line, sizeof line, "cpr_ckptd_calls_total{method=\"Commit\",status=\"NOT_FOUND\"} %d",
             total / 4);
    assert_has_line(text, line);
    snprintf(line, sizeof line, "cpr_ckptd_in_flight %d", total / 2);
    assert_has_line(text, line);
    snprintf(line, sizeof line, "cpr_ckptd_latency_seconds_bucket{method=\"Commit\",le=\"0.5\"} %d",
             total / 2);
    assert_has_line(text, line);
    assert_has_line(text, line);
    snprintf(line, sizeof line, "cpr_ckptd_latency_seconds_bucket{method=\"Commit\",le=\"1\"} %d",
             total / 2);
    assert_has_line(text, line);
    snprintf(line, sizeof line,
             "cpr_ckptd_latency_seconds_bucket{method=\"Commit\",le=\"+Inf\"} %d", total);
    assert_has_line(text, line);
    snprintf(line, sizeof line, "cpr_ckptd_latency_seconds_count{method=\"Commit\"} %d", total);
    assert_has_line(text, line);
    snprintf(line, sizeof line, "cpr_ckptd_latency_seconds_sum{method=\"Commit\"} %d",
             total / 2 * 2 + total / 2 / 4);
    assert_has_line(text, line);
    /* The Begin series were never touched. */
    assert_null(strstr(text, "Begin"));
    free(text);
    cpri_metrics_destroy(m);
}

/* ---- HTTP -------------------------------------------------------------------------- */

typedef struct http_reply {
    int code;
    char headers[2048];
    char *body;
    size_t body_len;
} http_reply;

/* Connect, send `request`, read to EOF within 10 s (no sleeps: poll). */
static int http_exchange(int family_, int port, const char *request, char **out, size_t *len)
{
    struct sockaddr_storage sa = {0};
    socklen_t sa_len;
    if (family_ == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        a->sin6_addr = in6addr_loopback;
        sa_len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&sa;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa_len = sizeof *a;
    }
    int fd = socket(family_, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sa_len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t sent = 0, n = strlen(request), cap = 1 << 16, got = 0;
    while (sent < n) {
        ssize_t w = send(fd, request + sent, n - sent, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        sent += (size_t)w;
    }
    char *buf = malloc(cap);
    double deadline = cpri_now_s() + 10;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int left_ms = (int)((deadline - cpri_now_s()) * 1000);
        if (left_ms <= 0 || poll(&p, 1, left_ms) <= 0)
            break;
        if (got + 4096 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t r = recv(fd, buf + got, cap - got - 1, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *out = buf;
    *len = got;
    return 0;
}

static void http(int family_, int port, const char *method, const char *path, http_reply *r)
{
    char request[512];
    snprintf(request, sizeof request,
             "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", method, path);
    char *raw = NULL;
    size_t len = 0;
    assert_int_equal(http_exchange(family_, port, request, &raw, &len), 0);
    const char *end = strstr(raw, "\r\n\r\n");
    if (!end || sscanf(raw, "HTTP/1.%*d %d", &r->code) != 1)
        fail_msg("not an HTTP response: %s", raw);
    snprintf(r->headers, sizeof r->headers, "%.*s", (int)(end - raw), raw);
    r->body_len = len - (size_t)(end + 4 - raw);
    r->body = malloc(r->body_len + 1);
    memcpy(r->body, end + 4, r->body_len + 1);
    free(raw);
}

static void assert_header(const http_reply *r, const char *header)
{
    if (!strstr(r->headers, header))
        fail_msg("no header \"%s\" in:\n%s", header, r->headers);
}

static void count_scrapes(cpri_metrics *m, void *ctx)
{
    (void)m;
    atomic_fetch_add((atomic_int *)ctx, 1);
}

static cpri_metrics *small_registry(void)
{
    cpri_metrics *m = NULL;
    assert_status(CPR_OK, cpri_metrics_create(&m));
    cpri_metric_label call_labels[] = {{"method", methods, 2}, {"status", statuses, 2}};
    cpri_metric_family *calls = family(m, &(cpri_metric_desc){.name = "calls_total",
                                                              .help = "Calls.",
                                                              .type = CPRI_METRIC_COUNTER,
                                                              .labels = call_labels,
                                                              .n_labels = 2});
    cpri_metric_add(cpri_metrics_series(calls, (const char *[]){"Begin", "OK"}), 7);
    cpri_metric_family *lat =
        family(m, &(cpri_metric_desc){
                      .name = "commit_seconds", .help = "Latency.", .type = CPRI_METRIC_HISTOGRAM});
    cpri_metric_observe(cpri_metrics_series(lat, NULL), 0.003);
    return m;
}

static void test_http_endpoint(void **unused)
{
    (void)unused;
    cpri_metrics *m = small_registry();
    atomic_int scrapes = 0;
    cpri_metrics_set_collector(m, count_scrapes, &scrapes);
    cpri_metrics_server *srv = NULL;
    int port = 0;
    assert_status(CPR_OK, cpri_metrics_serve(m, "127.0.0.1:0", &srv, &port));
    assert_true(port > 0);
    /* A client that connects and says nothing holds up no one. */
    int idle = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(idle, (struct sockaddr *)&to, sizeof to), 0);

    http_reply r = {0};
    http(AF_INET, port, "GET", "/metrics", &r);
    assert_int_equal(r.code, 200);
    assert_header(&r, "Content-Type: text/plain; version=0.0.4");
    char *expected = render(m);
    assert_string_equal(r.body, expected);
    assert_int_equal(atomic_load(&scrapes), 2);
    free(r.body);

    http(AF_INET, port, "HEAD", "/metrics", &r);
    assert_int_equal(r.code, 200);
    assert_int_equal(r.body_len, 0);
    free(r.body);
    http(AF_INET, port, "GET", "/metrics?x=1", &r); /* the query is not the path */
    assert_int_equal(r.code, 200);
    assert_string_equal(r.body, expected);
    free(r.body);
    http(AF_INET, port, "GET", "/", &r);
    assert_int_equal(r.code, 404);
    free(r.body);
    http(AF_INET, port, "GET", "/metrics/x", &r);
    assert_int_equal(r.code, 404);
    free(r.body);
    http(AF_INET, port, "POST", "/metrics", &r);
    assert_int_equal(r.code, 405);
    assert_header(&r, "Allow: GET, HEAD");
    free(r.body);
    http(AF_INET, port, "DELETE", "/nothing", &r);
    assert_int_equal(r.code, 405);
    free(r.body);
    assert_int_equal(atomic_load(&scrapes), 4); /* only GET and HEAD of /metrics render */

    /* A scraper keeps its connection: two pipelined requests on one are both
     * answered; a GET's body is read and dropped. */
    char *raw = NULL;
    size_t raw_len = 0;
    assert_int_equal(
        http_exchange(AF_INET, port,
                      "GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nxyz"
                      "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                      &raw, &raw_len),
        0);
    const char *second = strstr(raw, "HTTP/1.1 200");
    assert_non_null(second);
    assert_non_null(strstr(second + 1, "HTTP/1.1 200"));
    free(raw);

    /* The port is taken: CPR_IO with the system's reason. */
    char addr[64];
    cpri_metrics_server *again = NULL;
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    assert_status(CPR_IO, cpri_metrics_serve(m, addr, &again, &port));
    assert_null(again);
    assert_non_null(strstr(cpr_errmsg(), addr));
    free(expected);
    cpri_metrics_serve_stop(srv); /* with the idle client still connected (a hang: the
                                     watchdog's stacks) */
    char byte;
    ssize_t got = recv(idle, &byte, 1, 0); /* the server closed it: EOF or a reset */
    assert_true(got == 0 || (got < 0 && errno == ECONNRESET));
    close(idle);
    cpri_metrics_serve_stop(NULL);
    cpri_metrics_destroy(m);
}

static void test_http_ipv6(void **unused)
{
    (void)unused;
    cpri_metrics *m = small_registry();
    cpri_metrics_server *srv = NULL;
    int port = 0;
    cpr_status st = cpri_metrics_serve(m, "[::1]:0", &srv, &port);
    if (st == CPR_IO) { /* a host without IPv6 loopback */
        printf("test_http_ipv6: skipped: %s\n", cpr_errmsg());
        cpri_metrics_destroy(m);
        return;
    }
    assert_status(CPR_OK, st);
    http_reply r = {0};
    http(AF_INET6, port, "GET", "/metrics", &r);
    assert_int_equal(r.code, 200);
    assert_non_null(strstr(r.body, "cpr_ckptd_calls_total{method=\"Begin\",status=\"OK\"} 7\n"));
    free(r.body);
    cpri_metrics_serve_stop(srv);
    cpri_metrics_destroy(m);
}

static void test_bad_addresses(void **unused)
{
    (void)unused;
    cpri_metrics *m = small_registry();
    const char *bad[] = {"",
                         "127.0.0.1",
                         "127.0.0.1:",
                         ":9100",
                         "1.2.3:80",
                         "127.0.0.1:65536",
                         "127.0.0.1:9x",
                         "127.0.0.1:-1",
                         "[::1]9100",
                         "[::1:9100",
                         "::1:9100",
                         "[nope]:80",
                         "example.com:80",
                         "127.0.0.1:000009100"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cpri_metrics_server *srv = NULL;
        int port = -1;
        if (cpri_metrics_serve(m, bad[i], &srv, &port) != CPR_INVALID_ARGUMENT)
            fail_msg("'%s' was not refused as an address (%s)", bad[i], cpr_errmsg());
        assert_null(srv);
        assert_int_equal(port, -1);
    }
    cpri_metrics_server *srv = NULL;
    int port = 0;
    assert_status(CPR_OK, cpri_metrics_serve(m, "localhost:0", &srv, &port));
    cpri_metrics_serve_stop(srv);
    cpri_metrics_destroy(m);
}

/* ---- promtool ---------------------------------------------------------------------- */

static int on_path(const char *program)
{
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *colon = strchr(path, ':');
        size_t n = colon ? (size_t)(colon - path) : strlen(path);
        char candidate[4096];
        snprintf(candidate, sizeof candidate, "%.*s/%s", (int)n, path, program);
        if (n > 0 && access(candidate, X_OK) == 0)
            return 1;
        path = colon ? colon + 1 : NULL;
    }
    return 0;
}

/* The families ckptd exposes (issue #11), with some traffic. */
static cpri_metrics *ckptd_like_registry(void)
{
    static const char *const rpcs[] = {"Begin", "PutRows", "Commit", "Restore", "Health/Check"};
    static const char *const codes[] = {"OK", "NOT_FOUND", "PERMISSION_DENIED"};
    static const char *const rpc_kinds[] = {"Commit", "Restore"};
    cpri_metrics *m = NULL;
    assert_status(CPR_OK, cpri_metrics_create(&m));
    cpri_metric_label by_call[] = {{"method", rpcs, 5}, {"status", codes, 3}};
    cpri_metric_label by_method[] = {{"method", rpcs, 5}};
    cpri_metric_label by_kind[] = {{"method", rpc_kinds, 2}};
    cpri_metric_family *calls =
        family(m, &(cpri_metric_desc){.name = "calls_total",
                                      .help = "RPCs finished, by method and status.",
                                      .type = CPRI_METRIC_COUNTER,
                                      .labels = by_call,
                                      .n_labels = 2});
    cpri_metric_family *in = family(m, &(cpri_metric_desc){.name = "received_bytes_total",
                                                           .help = "Request payload bytes.",
                                                           .type = CPRI_METRIC_COUNTER,
                                                           .labels = by_method,
                                                           .n_labels = 1});
    cpri_metric_family *lat = family(m, &(cpri_metric_desc){.name = "latency_seconds",
                                                            .help = "Commit and restore latency.",
                                                            .type = CPRI_METRIC_HISTOGRAM,
                                                            .labels = by_kind,
                                                            .n_labels = 1});
    const char *gauges[] = {"open_parts", "store_bytes", "free_bytes"};
    for (size_t i = 0; i < 3; i++) {
        cpri_metric_family *g =
            family(m, &(cpri_metric_desc){.name = gauges[i],
                                          .help = "A gauge \\ with \"quotes\"\nand a newline.",
                                          .type = CPRI_METRIC_GAUGE});
        cpri_metric_set(cpri_metrics_series(g, NULL), (double)(i + 1) * 1e9);
    }
    family(m, &(cpri_metric_desc){
                  .name = "gc_runs_total", .help = "Retention runs.", .type = CPRI_METRIC_COUNTER});
    cpri_metric_add(cpri_metrics_series(calls, (const char *[]){"Health/Check", "OK"}), 3);
    cpri_metric_add(cpri_metrics_series(calls, (const char *[]){"Commit", "PERMISSION_DENIED"}), 1);
    cpri_metric_add(cpri_metrics_series(in, (const char *[]){"PutRows"}), 1 << 20);
    cpri_metric_observe(cpri_metrics_series(lat, (const char *[]){"Commit"}), 0.042);
    cpri_metric_observe(cpri_metrics_series(lat, (const char *[]){"Restore"}), 75);
    return m;
}

static void test_promtool_accepts(void **unused)
{
    (void)unused;
    if (!on_path("promtool")) {
        printf("test_promtool_accepts: skipped: no promtool on PATH\n");
        return;
    }
    cpri_metrics *m = ckptd_like_registry();
    char *text = render(m);
    FILE *p = popen("promtool check metrics", "w");
    assert_non_null(p);
    assert_int_equal(fwrite(text, 1, strlen(text), p), strlen(text));
    int status = pclose(p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("promtool check metrics refused (status %d):\n%s", status, text);
    free(text);
    /* And it does refuse what it should: a counter without _total. */
    p = popen("promtool check metrics >/dev/null 2>&1", "w");
    assert_non_null(p);
    fputs("# HELP x_bytes x\n# TYPE x_bytes counter\nx_bytes 1\n", p);
    status = pclose(p);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    cpri_metrics_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_exact),
        cmocka_unit_test(test_empty_registry_renders_nothing),
        cmocka_unit_test(test_registration_refusals),
        cmocka_unit_test(test_threads_add_up_exactly),
        cmocka_unit_test(test_http_endpoint),
        cmocka_unit_test(test_http_ipv6),
        cmocka_unit_test(test_bad_addresses),
        cmocka_unit_test(test_promtool_accepts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
