/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS and mutual TLS on the real daemon (issue #11), with certificates made
 * by `openssl` when the test runs: a CA, a server certificate for
 * 127.0.0.1, two client certificates of that CA and one of another CA.
 *  - grpcs:// with the CA: a part round-trips byte-exactly through the
 *    client library; a plaintext client, and a TLS client that does not
 *    trust the CA, get nowhere.
 *  - --tls-client-ca: a client with a certificate of the CA is served; one
 *    without a certificate, or with one of another CA, is refused.
 *  - mutual TLS with --auth-file: a `subject:` rule grants its rights to the
 *    certificate it names; a verified certificate no rule names is
 *    UNAUTHENTICATED.
 *  - ckptd refuses plaintext on an address other than loopback, and a key
 *    that is not its certificate's.
 * Skips (77) if openssl is not installed.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/client.h"
#include "testutil.h"

static char *pki; /* the directory of the certificates */

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", pki, name);
}

static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* A CA `ca` (ca.pem, ca.key). */
static void make_ca(const char *ca)
{
    assert_int_equal(sh("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                        "-nodes -keyout %s.key -out %s.pem -days 2 -subj /CN=%s 2>/dev/null",
                        pki, ca, ca, ca), 0);
}

/* name.pem/name.key signed by ca, with `subject`; server ones for 127.0.0.1. */
static void make_cert(const char *name, const char *ca, const char *subject, int server)
{
    assert_int_equal(sh("cd %s && printf '%s' > %s.ext && "
                        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                        "-keyout %s.key -out %s.csr -subj '%s' 2>/dev/null && "
                        "openssl x509 -req -in %s.csr -CA %s.pem -CAkey %s.key -CAcreateserial "
                        "-out %s.pem -days 2 -extfile %s.ext 2>/dev/null",
                        pki,
                        server ? "subjectAltName=IP:127.0.0.1,DNS:localhost\\n"
                                 "extendedKeyUsage=serverAuth\\n"
                               : "extendedKeyUsage=clientAuth\\n",
                        name, name, name, subject, name, ca, ca, name, name),
                     0);
}

static int setup(void **state)
{
    (void)state;
    if (sh("command -v openssl >/dev/null") != 0)
        return -1;
    pki = tu_mkdtemp("cpr-pki");
    make_ca("ca");
    make_ca("otherca");
    make_cert("server", "ca", "/CN=localhost", 1);
    make_cert("trainer1", "ca", "/O=CPR/CN=trainer-1", 0);
    make_cert("trainer2", "ca", "/O=CPR/CN=trainer-2", 0);
    make_cert("stranger", "otherca", "/O=CPR/CN=trainer-1", 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(pki);
    free(pki);
    return 0;
}

typedef struct tls_daemon {
    char *dir;
    ch_daemon d;
    char target[512];   /* grpcs://127.0.0.1:PORT */
    char plain[512];    /* grpc://... of the same port */
} tls_daemon;

/* A ckptd serving TLS (mutual with `client_ca`), with `auth_rules` (NULL:
 * no --auth-file). */
static void tls_up(tls_daemon *t, int mutual, const char *auth_rules)
{
    char cert[4096], key[4096], ca[4096], auth[4096], data[4096];
    t->dir = tu_mkdtemp("cpr-tls");
    path_of(cert, sizeof cert, "server.pem");
    path_of(key, sizeof key, "server.key");
    path_of(ca, sizeof ca, "ca.pem");
    snprintf(auth, sizeof auth, "%s/auth", t->dir);
    snprintf(data, sizeof data, "%s/data", t->dir);
    const char *extra[12] = {"--tls-cert", cert, "--tls-key", key};
    int n = 4;
    if (mutual) {
        extra[n++] = "--tls-client-ca";
        extra[n++] = ca;
    }
    if (auth_rules) {
        ch_write_private(auth, auth_rules);
        extra[n++] = "--auth-file";
        extra[n++] = auth;
    }
    extra[n] = NULL;
    ch_start_args(&t->d, data, extra);
    snprintf(t->target, sizeof t->target, "grpcs://%s", t->d.addr);
    snprintf(t->plain, sizeof t->plain, "grpc://%s", t->d.addr);
}

static void tls_down(tls_daemon *t)
{
    ch_stop(&t->d);
    tu_rmtree(t->dir);
    free(t->dir);
}

/* Options naming the CA and, if `client` is set, that certificate. */
typedef struct tls_files {
    char ca[4096], cert[4096], key[4096];
} tls_files;

static cpr_client_options opts_for(tls_files *f, const char *client)
{
    cpr_client_options o = {.no_retries = 1, .call_timeout_s = 10, .stream_timeout_s = 10};
    path_of(f->ca, sizeof f->ca, "ca.pem");
    o.tls_ca_file = f->ca;
    if (client) {
        char name[64];
        snprintf(name, sizeof name, "%s.pem", client);
        path_of(f->cert, sizeof f->cert, name);
        snprintf(name, sizeof name, "%s.key", client);
        path_of(f->key, sizeof f->key, name);
        o.tls_cert_file = f->cert;
        o.tls_key_file = f->key;
    }
    return o;
}

/* Begin, rows, commit, restore through the library: the rows come back
 * exactly. Returns the first failure. */
static cpr_status round_trip(const char *target, const cpr_client_options *o, const char *job)
{
    cpr_client *c = NULL;
    cpr_status st = cpr_client_open(target, o, &c);
    if (st)
        return st;
    cpr_part_spec spec = {.id = {job, 0, 1}, .kind = CPR_KIND_FULL, .num_shards = 1,
                          .tables = &ch_table, .n_tables = 1};
    cpr_part *p = NULL;
    uint64_t ids[100];
    float values[800], state[100];
    cpr_row_batch b;
    tu_iota(ids, 0, 100);
    tu_fill_batch(&b, ch_table.table, ids, 100, ch_table.dim, ch_table.state_dim, 1, values,
                  state);
    st = cpr_client_begin(c, &spec, &p);
    if (st == CPR_OK)
        st = cpr_part_put_rows(p, &b);
    if (st == CPR_OK)
        st = cpr_part_commit(&p);
    else
        cpr_part_abort(&p);
    if (st == CPR_OK) {
        tu_rows rows = {0};
        cpr_restore_query q = {.job = job};
        st = cpr_client_restore(c, &q, NULL, 0, tu_collect, &rows, NULL);
        if (st == CPR_OK) {
            assert_int_equal(rows.n, 100);
            tu_assert_rows(rows.rows, &ch_table, 0, 1, 100, 1);
        }
        tu_rows_free(&rows);
    }
    cpr_client_close(c);
    return st;
}

static void test_tls_round_trip(void **unused)
{
    (void)unused;
    tls_daemon t;
    tls_up(&t, 0, NULL);
    tls_files f;
    cpr_client_options o = opts_for(&f, NULL);
    assert_status(CPR_OK, round_trip(t.target, &o, "tls-job"));
    /* Plaintext to a TLS port: no connection. */
    cpr_client_options plain = {.no_retries = 1, .call_timeout_s = 5};
    assert_status(CPR_UNAVAILABLE, round_trip(t.plain, &plain, "plain-job"));
    /* TLS without trusting the CA: the daemon's certificate is refused. */
    cpr_client_options untrusting = {.no_retries = 1, .call_timeout_s = 5};
    setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "/dev/null", 1);
    char other[4096];
    path_of(other, sizeof other, "otherca.pem");
    untrusting.tls_ca_file = other;
    assert_status(CPR_UNAVAILABLE, round_trip(t.target, &untrusting, "untrusting-job"));
    /* A CA file that is not there: said at open, naming the option. */
    cpr_client_options missing = {.tls_ca_file = "/nonexistent/ca.pem"};
    cpr_client *c = NULL;
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_open(t.target, &missing, &c));
    assert_non_null(strstr(cpr_errmsg(), "tls_ca_file"));
    tls_down(&t);
}

static void test_mutual_tls(void **unused)
{
    (void)unused;
    tls_daemon t;
    tls_up(&t, 1, NULL);
    tls_files f;
    cpr_client_options mine = opts_for(&f, "trainer1");
    assert_status(CPR_OK, round_trip(t.target, &mine, "mtls-job"));
    cpr_client_options no_cert = opts_for(&f, NULL);
    assert_status(CPR_UNAVAILABLE, round_trip(t.target, &no_cert, "no-cert-job"));
    cpr_client_options stranger = opts_for(&f, "stranger"); /* same subject, other CA */
    assert_status(CPR_UNAVAILABLE, round_trip(t.target, &stranger, "stranger-job"));
    /* A certificate without its key is refused at open. */
    cpr_client_options half = opts_for(&f, "trainer1");
    half.tls_key_file = NULL;
    unsetenv("CPR_TLS_KEY");
    cpr_client *c = NULL;
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_open(t.target, &half, &c));
    tls_down(&t);
}

static void test_subject_rules(void **unused)
{
    (void)unused;
    tls_daemon t;
    tls_up(&t, 1, "subject:CN=trainer-1,O=CPR jobA* write\n"
                  "admin-0123456789abcdef0 * admin\n");
    tls_files f;
    cpr_client_options one = opts_for(&f, "trainer1");
    assert_status(CPR_OK, round_trip(t.target, &one, "jobA-1"));
    assert_status(CPR_PERMISSION_DENIED, round_trip(t.target, &one, "jobB-1"));
    cpr_client_options two = opts_for(&f, "trainer2"); /* verified, but no rule names it */
    assert_status(CPR_UNAUTHENTICATED, round_trip(t.target, &two, "jobA-2"));
    /* A token works over mutual TLS too (the certificate is still needed). */
    two.token = "admin-0123456789abcdef0";
    assert_status(CPR_OK, round_trip(t.target, &two, "jobB-2"));
    tls_down(&t);
}

static void test_daemon_refuses(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-tls-refuse");
    char data[4096], cert[4096], key[4096];
    snprintf(data, sizeof data, "%s/data", dir);
    path_of(cert, sizeof cert, "server.pem");
    path_of(key, sizeof key, "trainer1.key");
    cpri_ckptd_proc d;
    /* Plaintext beyond loopback. */
    assert_status(CPR_UNAVAILABLE, cpri_ckptd_spawn(CKPTD_PATH_FOR_TEST, data, "0.0.0.0:0",
                                                    NULL, &d));
    /* A key that is not the certificate's. */
    const char *const wrong_key[] = {"--tls-cert", cert, "--tls-key", key, NULL};
    assert_status(CPR_UNAVAILABLE, cpri_ckptd_spawn(CKPTD_PATH_FOR_TEST, data, NULL, wrong_key,
                                                    &d));
    /* A certificate without a key. */
    const char *const no_key[] = {"--tls-cert", cert, NULL};
    assert_status(CPR_UNAVAILABLE, cpri_ckptd_spawn(CKPTD_PATH_FOR_TEST, data, NULL, no_key, &d));
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    if (system("command -v openssl >/dev/null") != 0) {
        fprintf(stderr, "openssl is not installed: skipping\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls_round_trip),
        cmocka_unit_test(test_mutual_tls),
        cmocka_unit_test(test_subject_rules),
        cmocka_unit_test(test_daemon_refuses),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
