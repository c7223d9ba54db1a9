/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cephx users of deploy/ceph/README.md, on a cluster of its own with
 * authentication on (deploy/ceph/test-cluster.sh --cephx: one monitor, one
 * memstore OSD), each made by the README's own command:
 *  - client.cpr, the gateway's user (rwx on the pool, osd blocklist): a
 *    ckptd run as it saves and restores; killed and started again on its
 *    directory, it fences the old process (one more blocklist entry) and
 *    serves on;
 *  - client.cpr-reader (read only): a client reading directly as it
 *    restores exactly what was saved; writing directly as it fails with
 *    CPR_PERMISSION_DENIED naming the user's caps, and nothing of that part
 *    is committed;
 *  - client.cpr-writer (read and write): a client writing directly as it
 *    commits, and a plain client restores its rows exactly;
 *  - a user without a key in the keyrings, and one whose key the cluster
 *    does not know, are refused at cpr_client_open with
 *    CPR_UNAUTHENTICATED, by name; a configuration naming no monitor with
 *    CPR_INVALID_ARGUMENT, saying so.
 * Exits 77 when the Ceph packages are missing.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/client.h"
#include "testutil.h"

static tu_cluster g_cl;
static const char *g_conf; /* g_cl.conf */

/* `ceph auth get-or-create client.NAME CAPS -o <the keyring ceph.conf names>`
 * (deploy/ceph/README.md, pool "cpr" for "cpr-ckpt"). */
static int make_user(const char *name, const char *caps)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "timeout 60 ceph -c '%s' auth get-or-create client.%s %s "
             "-o '%s/ceph.client.%s.keyring' >/dev/null",
             g_conf, name, caps, g_cl.dir, name);
    return tu_system(cmd);
}

#define ROWS 5000
static const cpr_table_schema T[1] = {{0, ROWS, 16, 1}};

/* A ckptd as client.cpr on the pool, in a fresh *dir. */
static void start_gateway(char **dir, ch_daemon *d, char *target)
{
    *dir = tu_mkdtemp("cpr-rados-cephx");
    const char *const args[] = {"--backend", "rados", "--rados-pool", "cpr", "--rados-conf",
                                g_conf, "--rados-user", "cpr", NULL};
    ch_start_args(d, *dir, args);
    snprintf(target, 300, "grpc://%s", d->addr);
}

static cpr_client *open_as(const char *target, const char *user, int direct_writes)
{
    cpr_client_options o = {.direct_writes = direct_writes};
    o.store.rados_pool = "cpr";
    o.store.rados_conf = g_conf;
    o.store.rados_user = user;
    cpr_client *c = NULL;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    return c;
}

/* FULL part (job, 0, ckpt) of every row through c: the commit's status. */
static cpr_status write_part(cpr_client *c, const char *job, uint64_t ckpt)
{
    cpr_part_spec spec = tu_part(job, 0, 1, ckpt, CPR_KIND_FULL, T, 1);
    uint64_t *ids = malloc(ROWS * sizeof *ids);
    assert_non_null(ids);
    tu_iota(ids, 0, ROWS);
    tu_batch b;
    tu_batch_make(&b, &T[0], ids, ROWS, ckpt);
    cpr_part *p = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    cpr_status st = cpr_part_put_rows(p, &b.batch);
    if (st == CPR_OK)
        st = cpr_part_commit(&p);
    char why[1024];
    snprintf(why, sizeof why, "%s", cpr_errmsg());
    if (p)
        cpr_part_abort(&p);
    tu_batch_free(&b);
    free(ids);
    cpr_fail(st, "%s", why); /* the commit's message, not the abort's */
    return st;
}

typedef struct checked {
    uint64_t ckpt, rows, wrong;
} checked;

static cpr_status check(void *ctx, const cpr_row_batch *b)
{
    checked *k = ctx;
    for (size_t i = 0; i < b->n; i++) {
        for (uint32_t j = 0; j < T[0].dim; j++)
            k->wrong += b->values[i * T[0].dim + j] != tu_value(0, b->ids[i], k->ckpt, j);
        k->wrong += b->ids[i] != k->rows + i;
    }
    k->rows += b->n;
    return CPR_OK;
}

/* Job `job` through c restores every row exactly as of checkpoint ckpt. */
static void assert_job(cpr_client *c, const char *job, uint64_t ckpt)
{
    checked k = {.ckpt = ckpt};
    cpr_restore_query q = {.job = job};
    cpr_restore_result res = {0};
    assert_status(CPR_OK, cpr_client_restore(c, &q, NULL, 0, check, &k, &res));
    assert_int_equal(res.as_of, ckpt);
    assert_int_equal(k.rows, ROWS);
    assert_int_equal(k.wrong, 0);
}

/* Entries of the cluster's OSD blocklist (fenced clients). */
static int blocklisted(void)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "timeout 60 ceph -c '%s' osd blocklist ls -f json 2>/dev/null",
             g_conf);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    int n = 0, c;
    while ((c = fgetc(p)) != EOF)
        n += c == '{'; /* one object an entry */
    assert_int_equal(pclose(p), 0);
    return n;
}

static void test_gateway_user(void **unused)
{
    (void)unused;
    char target[300], *dir = NULL;
    ch_daemon d;
    start_gateway(&dir, &d, target);
    cpr_client *c = NULL;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    assert_status(CPR_OK, write_part(c, "gw", 1));
    assert_job(c, "gw", 1);
    cpr_client_close(c);
    /* Killed and started again on its directory: the new process fences
     * the old one (osd blocklist, a right of the user) and takes over. */
    int before = blocklisted();
    ch_kill(&d);
    const char *const args[] = {"--backend", "rados", "--rados-pool", "cpr", "--rados-conf",
                                g_conf, "--rados-user", "cpr", NULL};
    ch_start_args(&d, dir, args);
    snprintf(target, sizeof target, "grpc://%s", d.addr);
    assert_int_equal(blocklisted(), before + 1);
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    assert_job(c, "gw", 1);
    assert_status(CPR_OK, write_part(c, "gw", 2));
    assert_job(c, "gw", 2);
    cpr_client_close(c);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

static void test_reader_user(void **unused)
{
    (void)unused;
    char target[300], *dir = NULL;
    ch_daemon d;
    start_gateway(&dir, &d, target);
    cpr_client *plain = NULL;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &plain));
    assert_status(CPR_OK, write_part(plain, "rd", 1));

    cpr_client *reader = open_as(target, "cpr-reader", 0);
    assert_job(reader, "rd", 1);
    cpr_client_close(reader);

    /* Writing the pool needs more than the reader's caps: refused, named. */
    reader = open_as(target, "cpr-reader", 1);
    assert_status(CPR_PERMISSION_DENIED, write_part(reader, "rd", 2));
    assert_non_null(strstr(cpr_errmsg(), "caps"));
    cpr_client_close(reader);
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_client_list(plain, "rd", &parts, &n));
    assert_int_equal(n, 1); /* checkpoint 2 never committed */
    assert_int_equal(parts[0].checkpoint, 1);
    free(parts);
    assert_job(plain, "rd", 1);
    cpr_client_close(plain);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

static void test_writer_user(void **unused)
{
    (void)unused;
    char target[300], *dir = NULL;
    ch_daemon d;
    start_gateway(&dir, &d, target);
    cpr_client *writer = open_as(target, "cpr-writer", 1);
    assert_status(CPR_OK, write_part(writer, "wr", 1));
    cpr_client_close(writer);
    cpr_client *plain = NULL;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &plain));
    assert_job(plain, "wr", 1);
    cpr_client_close(plain);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

static void test_unknown_user(void **unused)
{
    (void)unused;
    char target[300], *dir = NULL, cmd[8192];
    ch_daemon d;
    start_gateway(&dir, &d, target);
    /* client.ghost has a keyring, with a key the cluster never saw. */
    snprintf(cmd, sizeof cmd, "ceph-authtool --create-keyring '%s/ceph.client.ghost.keyring' "
             "--gen-key -n client.ghost >/dev/null", g_cl.dir);
    assert_int_equal(tu_system(cmd), 0);
    const char *users[] = {"nobody", "ghost"};
    for (int i = 0; i < 2; i++) {
        cpr_client_options o = {0};
        o.store.rados_pool = "cpr";
        o.store.rados_conf = g_conf;
        o.store.rados_user = users[i];
        cpr_client *c = NULL;
        assert_status(CPR_UNAUTHENTICATED, cpr_client_open(target, &o, &c));
        char want[64];
        snprintf(want, sizeof want, "client.%s", users[i]);
        assert_non_null(strstr(cpr_errmsg(), want));
        assert_null(c);
    }
    /* A configuration that names no monitor is that, not a missing key. */
    char conf[4300];
    snprintf(conf, sizeof conf, "%s/no-mon.conf", g_cl.dir);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f, "[global]\nauth client required = cephx\n");
    fclose(f);
    cpr_client_options o = {0};
    o.store.rados_pool = "cpr";
    o.store.rados_conf = conf;
    o.store.rados_user = "cpr-reader";
    cpr_client *c = NULL;
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_open(target, &o, &c));
    assert_non_null(strstr(cpr_errmsg(), "names no monitor"));
    assert_null(c);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    int rc = tu_cluster_start(&g_cl, "--osds 1 --cephx");
    if (rc != 0)
        return rc == 77 ? 77 : 1;
    g_conf = g_cl.conf;
    /* deploy/ceph/README.md's three users, on pool "cpr". */
    if (make_user("cpr", "mon 'allow r, allow command \"osd blocklist\"' "
                         "osd 'allow rwx pool=cpr'") != 0 ||
        make_user("cpr-reader", "mon 'allow r' osd 'allow r pool=cpr'") != 0 ||
        make_user("cpr-writer", "mon 'allow r' osd 'allow rw pool=cpr'") != 0) {
        fprintf(stderr, "cannot make the cephx users\n");
        tu_cluster_stop(&g_cl);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gateway_user),
        cmocka_unit_test(test_reader_user),
        cmocka_unit_test(test_writer_user),
        cmocka_unit_test(test_unknown_user),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tu_cluster_stop(&g_cl);
    return failed;
}
