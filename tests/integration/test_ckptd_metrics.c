/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd's metrics and HTTP health probe on the real daemon (issue #11;
 * ckptd/telemetry.h): after a known sequence of calls (a part begun,
 * written, committed and restored; a refused anonymous call; a NOT_FOUND),
 * the exposition counts each by method and status, the bytes they moved and
 * their durations, and shows the store's gauges; /healthz answers 200; a
 * SIGHUP with an auth file that does not parse is counted as a failed
 * reload and the rules in force stay; `promtool check metrics` (Debian's
 * prometheus package, when installed) accepts the exposition.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "testutil.h"

#define TOKEN "metrics-test-token-0123456789"
#define SERIES(name, labels) "cpr_ckptd_" name "{" labels "}"

static char *scrape(const ch_daemon *d)
{
    int code = 0;
    char *body = NULL;
    assert_status(CPR_OK, ch_http_get(d->metrics_addr, "/metrics", &code, &body));
    assert_int_equal(code, 200);
    return body;
}

typedef struct reload_wait {
    const ch_daemon *d;
    const char *series;
    double want;
} reload_wait;

static int counted(void *ctx)
{
    reload_wait *r = ctx;
    char *m = scrape(r->d);
    int done = ch_metric(m, r->series) >= r->want;
    free(m);
    return done;
}

static void test_metrics(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-metrics");
    char auth[4096], data[4096];
    snprintf(auth, sizeof auth, "%s/auth", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    ch_write_private(auth, TOKEN " * admin\n");
    const char *const extra[] = {"--metrics-listen", "127.0.0.1:0", "--auth-file", auth,
                                 "--restore-streams", "3", NULL};
    ch_daemon d;
    ch_start_args(&d, data, extra);
    assert_true(d.metrics_addr[0] != '\0');
    cpri_rpc_options o = {.token = TOKEN};
    cpri_rpc *rpc, *anon;
    assert_status(CPR_OK, cpri_rpc_open_with(d.addr, &o, &rpc));
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &anon));

    cpr_part_id id = {"m", 0, 1};
    assert_status(CPR_OK, ch_begin(rpc, "m", 1));
    assert_status(CPR_OK, ch_put_rows(rpc, &id, 0, 1000, 0, NULL, NULL));
    assert_status(CPR_OK, ch_commit(rpc, &id, 1000));
    assert_status(CPR_OK, ch_begin(rpc, "m", 2)); /* left open */
    uint64_t rows = 0;
    int bad = 0;
    assert_status(CPR_OK, ch_restore(rpc, "m", 0, 1, &rows, &bad));
    assert_int_equal(rows, 1000);
    size_t n, open;
    int has;
    assert_status(CPR_NOT_FOUND, ch_list(rpc, "nojob", &n, 1, &has, &open));
    assert_status(CPR_UNAUTHENTICATED, ch_list(anon, "m", &n, 1, &has, &open));

    /* A call is counted once its handler is done, which may be a moment
     * after its client heard the final status: wait for each, then check
     * that nothing was counted twice. */
    const reload_wait calls[] = {
        {&d, SERIES("calls_total", "method=\"Begin\",status=\"CPR_OK\""), 2},
        {&d, SERIES("calls_total", "method=\"Commit\",status=\"CPR_OK\""), 1},
        {&d, SERIES("calls_total", "method=\"PutRows\",status=\"CPR_OK\""), 1},
        {&d, SERIES("calls_total", "method=\"Restore\",status=\"CPR_OK\""), 1},
        {&d, SERIES("calls_total", "method=\"List\",status=\"CPR_NOT_FOUND\""), 1},
        {&d, SERIES("calls_total", "method=\"List\",status=\"CPR_UNAUTHENTICATED\""), 1}};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
        assert_true(ch_poll(counted, (void *)&calls[i], CH_TIMEOUT_S));
    char *m = scrape(&d);
    assert_true(ch_metric(m, SERIES("calls_total", "method=\"Begin\",status=\"CPR_OK\"")) == 2);
    assert_true(ch_metric(m, SERIES("calls_total", "method=\"Commit\",status=\"CPR_OK\"")) == 1);
    assert_true(ch_metric(m, SERIES("calls_total", "method=\"PutRows\",status=\"CPR_OK\"")) == 1);
    assert_true(ch_metric(m, SERIES("calls_total", "method=\"Restore\",status=\"CPR_OK\"")) == 1);
    assert_true(ch_metric(m, SERIES("calls_total", "method=\"List\",status=\"CPR_NOT_FOUND\"")) ==
                1);
    assert_true(ch_metric(m, SERIES("calls_total",
                                    "method=\"List\",status=\"CPR_UNAUTHENTICATED\"")) == 1);
    /* 1000 rows of 8 values and 1 state value arrived; more went out. */
    assert_true(ch_metric(m, SERIES("received_bytes_total", "method=\"PutRows\"")) >=
                1000 * (8 + 9 * 4));
    assert_true(ch_metric(m, SERIES("sent_bytes_total", "method=\"Restore\"")) >=
                1000 * (8 + 9 * 4));
    assert_true(ch_metric(m, SERIES("call_duration_seconds_count", "method=\"Commit\"")) == 1);
    assert_true(ch_metric(m, SERIES("call_duration_seconds_bucket",
                                    "method=\"Commit\",le=\"+Inf\"")) == 1);
    assert_true(ch_metric(m, "cpr_ckptd_open_parts") == 1);
    assert_true(ch_metric(m, "cpr_ckptd_parts_committed") == 1);
    assert_true(ch_metric(m, "cpr_ckptd_rows_received_total") == 1000);
    assert_true(ch_metric(m, "cpr_ckptd_store_bytes") > 0);
    assert_true(ch_metric(m, "cpr_ckptd_free_bytes") > 0);
    assert_true(ch_metric(m, "cpr_ckptd_serving") == 1);
    /* The Restore gate: --restore-streams 3, the one restore over and none waiting. */
    assert_true(ch_metric(m, "cpr_ckptd_restore_stream_slots") == 3);
    assert_true(ch_metric(m, "cpr_ckptd_restore_streams") == 0);
    assert_true(ch_metric(m, "cpr_ckptd_restore_stream_waits_total") == 0);
    assert_true(ch_metric(m, "cpr_ckptd_restore_plans_total") == 0); /* a local store */
    assert_true(ch_metric(m, "cpr_ckptd_restore_stream_over_limit_total") == 0);
    assert_null(strstr(m, TOKEN)); /* no secret, no job name */
    assert_null(strstr(m, "\"m\""));

    if (system("command -v promtool >/dev/null 2>&1") == 0) {
        char path[4200], cmd[4400];
        snprintf(path, sizeof path, "%s/exposition.txt", dir);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(m, f);
        fclose(f);
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
        assert_int_equal(system(cmd), 0);
    } else {
        print_message("promtool not installed: the exposition was not checked by it\n");
    }
    free(m);

    int code = 0;
    char *body = NULL;
    assert_status(CPR_OK, ch_http_get(d.metrics_addr, "/healthz", &code, &body));
    assert_int_equal(code, 200);
    assert_non_null(strstr(body, "serving"));
    free(body);

    /* A reload that fails is counted, and the rules in force stay. */
    ch_write_private(auth, "short * admin\n");
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    reload_wait r = {&d, SERIES("auth_reloads_total", "result=\"failed\""), 1};
    assert_true(ch_poll(counted, &r, CH_TIMEOUT_S));
    assert_status(CPR_OK, ch_list(rpc, "m", &n, 1, &has, &open));

    cpri_rpc_close(rpc);
    cpri_rpc_close(anon);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
