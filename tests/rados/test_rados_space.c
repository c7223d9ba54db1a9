/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Free space in the pool (ckptd/store/space.c F5), on a cluster of its own
 * with a manager (which reports the pool's usage): a store in RADOS refuses
 * a Begin with CPR_RESOURCE_EXHAUSTED, naming the pool, while the pool can
 * take less than the reserve (--min-free-mb), and while the pool's quota
 * leaves less; nothing is created by a refused Begin, and parts are taken
 * again as soon as there is room (the quota lifted), without a reopen.
 * Exits 77 when the cluster cannot start (its packages missing).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpr/store.h"
#include "testutil.h"

static tu_cluster g_cl;
static const char *g_conf; /* g_cl.conf */

static int ceph(const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "ceph -c '%s' %s >/dev/null 2>&1", g_conf, args);
    return tu_system(cmd);
}

static const cpr_table_schema T[] = {{.table = 0, .rows = 1000, .dim = 4, .state_dim = 0}};

static cpr_store *open_store(const char *dir, uint64_t min_free_bytes)
{
    cpr_store_options o = {.rados_pool = "cpr", .rados_conf = g_conf,
                           .rados_namespace = "space", .no_fold = 1,
                           .min_free_bytes = min_free_bytes};
    cpr_store *s = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, &o, &s));
    return s;
}

/* Begin part (shard 0, ckpt) until it gets `want` (the manager's figures
 * and the store's 2 s cache take a few seconds); a Begin that succeeds
 * meanwhile is aborted. Polls a condition, at most 90 s. */
static cpr_status begin_until(cpr_store *s, uint64_t ckpt, cpr_status want)
{
    cpr_part_spec spec = tu_part("job", 0, 1, ckpt, CPR_KIND_FULL, T, 1);
    cpr_status st = CPR_INTERNAL;
    for (int i = 0; i < 180; i++) {
        st = cpr_store_begin(s, &spec);
        if (st == want)
            return st;
        if (st == CPR_OK)
            cpr_store_abort(s, &spec.id);
        struct timespec half = {0, 500 * 1000 * 1000};
        nanosleep(&half, NULL);
    }
    return st;
}

static void test_pool_reserve_and_quota(void **unused)
{
    (void)unused;
    char *tmp = tu_mkdtemp("cpr-rados-space");
    char *dir = NULL;
    assert_int_not_equal(asprintf(&dir, "%s/store", tmp), -1);
    /* A reserve larger than the whole pool (memstore OSDs of 2 GiB). */
    cpr_store *s = open_store(dir, (uint64_t)1 << 40);
    assert_status(CPR_RESOURCE_EXHAUSTED, begin_until(s, 1, CPR_RESOURCE_EXHAUSTED));
    assert_non_null(strstr(cpr_errmsg(), "RADOS pool cpr"));
    assert_non_null(strstr(cpr_errmsg(), "MAX AVAIL"));
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_NOT_FOUND, cpr_store_list(s, "job", &parts, &n)); /* nothing created */
    cpr_store_close(s);
    /* A reserve the pool has: parts are taken; then a quota that leaves
     * less than the data tier refuses new parts, and lifting it lets them
     * in again, on the same open store. */
    s = open_store(dir, 1 << 20);
    assert_status(CPR_OK, begin_until(s, 1, CPR_OK));
    uint64_t ids[10];
    tu_iota(ids, 0, 10);
    cpr_part_spec spec = tu_part("job", 0, 1, 1, CPR_KIND_FULL, T, 1);
    assert_status(CPR_OK, tu_put_rows(s, &spec.id, &T[0], ids, 10, 1));
    assert_status(CPR_OK, cpr_store_commit(s, &spec.id, 10));
    assert_int_equal(ceph("osd pool set-quota cpr max_bytes 16777216"), 0);
    assert_status(CPR_RESOURCE_EXHAUSTED, begin_until(s, 2, CPR_RESOURCE_EXHAUSTED));
    assert_non_null(strstr(cpr_errmsg(), "its quota"));
    assert_int_equal(ceph("osd pool set-quota cpr max_bytes 0"), 0);
    assert_status(CPR_OK, begin_until(s, 2, CPR_OK));
    cpr_store_close(s);
    tu_rmtree(tmp);
    free(tmp);
    free(dir);
}

int main(void)
{
    int rc = tu_cluster_start(&g_cl, "--mgr");
    if (rc != 0)
        return rc == 77 ? 77 : 1;
    g_conf = g_cl.conf;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_pool_reserve_and_quota)};
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tu_cluster_stop(&g_cl);
    return failed;
}
