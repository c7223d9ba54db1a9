/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Disk loss under ckptd --backend rados, on a cluster of its own
 * (deploy/ceph/test-cluster.sh: one monitor, three memstore OSDs, pool size
 * 3, min_size 2): an OSD is SIGKILLed in the middle of a save; the save
 * commits and every committed row restores exactly. Then the OSD comes back
 * empty (memstore), another OSD is killed, and every row still restores
 * exactly: the returned OSD was healed from the survivors. Exits 77 when
 * the Ceph packages are missing.
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
#include "testutil.h"

static tu_cluster g_cl;
static const char *g_conf; /* g_cl.conf */

static int cluster(const char *verb, const char *arg)
{
    return tu_cluster_run(&g_cl, verb, arg);
}

#define ROWS 100000 /* every row of ch_table: ~4 MiB, a segment chunk */

static void after_batch(void *ctx, size_t sent)
{
    int *killed = ctx;
    if (!*killed && sent * 100 >= ROWS / 2) { /* half in (100-row batches): a disk dies */
        assert_int_equal(cluster("kill-osd", "1"), 0);
        *killed = 1;
    }
}

static void check_all(cpri_rpc *rpc)
{
    uint64_t rows = 0;
    int bad = 0;
    assert_status(CPR_OK, ch_restore(rpc, "disk", 1, 1, &rows, &bad));
    assert_int_equal(rows, ROWS);
    assert_false(bad);
    rows = 0;
    assert_status(CPR_OK, ch_restore(rpc, "disk", 2, 2, &rows, &bad));
    assert_int_equal(rows, ROWS);
    assert_false(bad);
}

static void test_osd_lost_mid_save(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-rados-disk");
    const char *const args[] = {"--backend", "rados", "--rados-pool", "cpr", "--rados-conf",
                                g_conf, NULL};
    ch_daemon d;
    cpri_rpc *rpc;
    ch_start_args(&d, dir, args);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    cpr_part_id one = {"disk", 0, 1}, two = {"disk", 0, 2};
    assert_status(CPR_OK, ch_begin_part(rpc, "disk", 0, 1, 1, CPR_KIND_FULL));
    assert_status(CPR_OK, ch_put_rows(rpc, &one, 0, ROWS, 0, NULL, NULL));
    assert_status(CPR_OK, ch_commit(rpc, &one, ROWS));
    int killed = 0;
    assert_status(CPR_OK, ch_begin_part(rpc, "disk", 0, 1, 2, CPR_KIND_FULL));
    assert_status(CPR_OK, ch_put_rows(rpc, &two, 0, ROWS, 0, after_batch, &killed));
    assert_true(killed);
    assert_status(CPR_OK, ch_commit(rpc, &two, ROWS)); /* on two of three replicas */
    check_all(rpc);
    /* The disk comes back empty and is filled again from the others; then
     * another one dies, and the returned one must hold its replicas. */
    assert_int_equal(cluster("start-osd", "1"), 0);
    assert_int_equal(cluster("wait-ready", "cpr 60"), 0);
    assert_int_equal(cluster("kill-osd", "2"), 0);
    check_all(rpc);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    int rc = tu_cluster_start(&g_cl, NULL);
    if (rc != 0)
        return rc == 77 ? 77 : 1;
    g_conf = g_cl.conf;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_osd_lost_mid_save)};
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tu_cluster_stop(&g_cl);
    return failed;
}
