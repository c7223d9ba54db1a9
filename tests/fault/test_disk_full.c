/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A full disk on the real daemon (issue #11; ckptd/store/space.c, F1-F4):
 * ckptd on a small tmpfs of its own, filled by another writer (a filler
 * file, as another process would) to chosen levels of free space.
 *  - below --min-free-mb: Begin is RESOURCE_EXHAUSTED and creates nothing;
 *  - below the catalog's headroom: a commit is RESOURCE_EXHAUSTED, Health
 *    says NOT_SERVING, and every committed part still restores exactly;
 *  - retention runs on that disk and the bytes it reports freed are freed
 *    on the file system;
 *  - once space is free again (the filler removed), Health says SERVING
 *    and parts commit, without a restart;
 *  - with no byte free at all, retention still runs (the ballast makes
 *    room for its deletes), and the daemon stops cleanly at the end.
 * Needs root to mount the tmpfs: skips (77) otherwise.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/client.h"
#include "cpr/crc32c.h"
#include "testutil.h"

#define MIB (1024ull * 1024)
#define ROWS 32768 /* 8 MiB of values a part */
#define DIM 64

static const cpr_table_schema big = {.table = 0, .rows = 1u << 20, .dim = DIM, .state_dim = 0};

typedef struct disk {
    char *mnt;
    char data[4096], filler[4096];
    ch_daemon d;
    cpr_client *c;
    cpri_rpc *rpc;
    float *values;
    uint64_t *ids;
} disk;

static uint64_t free_bytes(const disk *k)
{
    struct statvfs sv;
    assert_int_equal(statvfs(k->mnt, &sv), 0);
    return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* Grow the filler so that about `left` bytes stay free (0: none). */
static void fill_to(disk *k, uint64_t left)
{
    int fd = open(k->filler, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    off_t size = lseek(fd, 0, SEEK_END);
    uint64_t now = free_bytes(k);
    if (now > left) {
        uint64_t grow = (now - left) & ~(uint64_t)4095;
        /* fallocate fails past the last byte with ENOSPC; what it got stays */
        (void)posix_fallocate(fd, size, (off_t)grow);
    }
    close(fd);
}

static void unfill(disk *k)
{
    unlink(k->filler);
}

static cpr_status save(disk *k, uint64_t ckpt, cpr_part **keep_open)
{
    cpr_part_spec spec = {.id = {"full", 0, ckpt}, .kind = CPR_KIND_FULL, .num_shards = 1,
                          .tables = &big, .n_tables = 1};
    cpr_part *p = NULL;
    cpr_row_batch b = {.table = 0, .ids = k->ids, .n = ROWS, .values = k->values,
                       .values_count = (size_t)ROWS * DIM};
    for (size_t i = 0; i < (size_t)ROWS * DIM; i++)
        k->values[i] = tu_value(0, k->ids[i / DIM], ckpt, (uint32_t)(i % DIM));
    b.crc32c = cpr_crc32c_rows(b.ids, b.n, b.values, b.values_count, NULL, 0);
    cpr_status st = cpr_client_begin(k->c, &spec, &p);
    if (st == CPR_OK)
        st = cpr_part_put_rows(p, &b);
    if (st == CPR_OK && keep_open) {
        *keep_open = p;
        return CPR_OK;
    }
    if (st == CPR_OK)
        return cpr_part_commit(&p);
    cpr_part_abort(&p);
    return st;
}

/* Every row of checkpoint `ckpt` restores exactly as of it. */
static void assert_restores(disk *k, uint64_t ckpt)
{
    tu_rows rows = {0};
    cpr_restore_query q = {.job = "full", .as_of = ckpt};
    assert_status(CPR_OK, cpr_client_restore(k->c, &q, NULL, 0, tu_collect, &rows, NULL));
    assert_int_equal(rows.n, ROWS);
    for (size_t i = 0; i < rows.n; i++) {
        assert_int_equal(rows.rows[i].id, i);
        for (uint32_t j = 0; j < DIM; j++)
            assert_int_equal(tu_float_bits(rows.rows[i].values[j]),
                             tu_float_bits(tu_value(0, i, ckpt, j)));
    }
    tu_rows_free(&rows);
}

static int all_rows_stored(void *ctx)
{
    disk *k = ctx;
    cpr_part_info *parts = NULL;
    size_t n = 0;
    int done = 0;
    if (cpr_client_list(k->c, "full", &parts, &n) == CPR_OK)
        for (size_t i = 0; i < n; i++)
            done |= !parts[i].committed && parts[i].rows == ROWS;
    free(parts);
    return done;
}

static int serving(disk *k)
{
    uint8_t *resp = NULL;
    size_t n = 0;
    uint8_t *req = calloc(1, 1);
    assert_status(CPR_OK, cpri_rpc_unary(k->rpc, "/grpc.health.v1.Health/Check", req, 0,
                                        CH_TIMEOUT_S, &resp, &n));
    free(req);
    assert_int_equal(n, 2);
    int s = resp[1];
    free(resp);
    assert_true(s == 1 || s == 2);
    return s == 1;
}

static int setup(void **state)
{
    disk *k = calloc(1, sizeof *k);
    k->mnt = tu_mkdtemp("cpr-diskfull");
    if (geteuid() != 0 || mount("tmpfs", k->mnt, "tmpfs", 0, "size=224m") != 0) {
        fprintf(stderr, "cannot mount a tmpfs (needs root): skipping\n");
        tu_rmtree(k->mnt);
        free(k->mnt);
        free(k);
        exit(77);
    }
    snprintf(k->data, sizeof k->data, "%s/data", k->mnt);
    snprintf(k->filler, sizeof k->filler, "%s/filler", k->mnt);
    const char *const extra[] = {"--min-free-mb", "100", NULL};
    ch_start_args(&k->d, k->data, extra);
    char target[512];
    snprintf(target, sizeof target, "grpc://%s", k->d.addr);
    cpr_client_options o = {.no_retries = 1};
    assert_status(CPR_OK, cpr_client_open(target, &o, &k->c));
    assert_status(CPR_OK, cpri_rpc_open(k->d.addr, &k->rpc));
    k->values = malloc((size_t)ROWS * DIM * sizeof(float));
    k->ids = malloc(ROWS * sizeof(uint64_t));
    tu_iota(k->ids, 0, ROWS);
    *state = k;
    return 0;
}

static int teardown(void **state)
{
    disk *k = *state;
    cpri_rpc_close(k->rpc);
    cpr_client_close(k->c);
    ch_stop(&k->d); /* a clean exit: the full disk crashed nothing */
    umount2(k->mnt, MNT_DETACH);
    tu_rmtree(k->mnt);
    free(k->mnt);
    free(k->values);
    free(k->ids);
    free(k);
    return 0;
}

static void test_full_disk(void **state)
{
    disk *k = *state;
    for (uint64_t c = 1; c <= 3; c++)
        assert_status(CPR_OK, save(k, c, NULL));
    cpr_part *open_part = NULL; /* streamed while there was room */
    assert_status(CPR_OK, save(k, 4, &open_part));
    assert_true(ch_poll(all_rows_stored, k, CH_TIMEOUT_S));
    assert_true(serving(k));

    /* Below --min-free-mb (100): no new part, and none was created. */
    fill_to(k, 60 * MIB);
    cpr_part *p = NULL;
    cpr_part_spec spec = {.id = {"full", 0, 5}, .kind = CPR_KIND_FULL, .num_shards = 1,
                          .tables = &big, .n_tables = 1};
    assert_status(CPR_RESOURCE_EXHAUSTED, cpr_client_begin(k->c, &spec, &p));
    assert_non_null(strstr(cpr_errmsg(), "min-free-mb"));
    assert_true(serving(k)); /* commits can still be made */

    /* Below the catalog's headroom: the commit is refused, Health flips,
     * and nothing committed is lost. */
    fill_to(k, 8 * MIB);
    assert_false(serving(k));
    assert_status(CPR_RESOURCE_EXHAUSTED, cpr_part_commit(&open_part));
    for (uint64_t c = 1; c <= 3; c++)
        assert_restores(k, c);

    /* Retention on the full disk frees what it says it frees. */
    uint64_t before = free_bytes(k);
    cpr_gc_report rep;
    assert_status(CPR_OK, cpr_client_gc(k->c, "full", 1, &rep));
    assert_int_equal(rep.parts_removed, 2);
    uint64_t freed = rep.bytes_before - rep.bytes_after;
    assert_true(freed >= 2 * (uint64_t)ROWS * DIM * 4);
    assert_true(free_bytes(k) >= before + freed - MIB);
    assert_restores(k, 3);

    /* Space back: serving and committing again, without a restart. */
    unfill(k);
    assert_true(serving(k));
    assert_status(CPR_OK, save(k, 6, NULL));
    assert_restores(k, 6);

    /* Not a byte free: retention still makes room for its deletes. */
    fill_to(k, 0);
    assert_status(CPR_RESOURCE_EXHAUSTED, save(k, 7, NULL));
    assert_status(CPR_OK, cpr_client_gc(k->c, "full", 1, &rep));
    assert_int_equal(rep.parts_removed, 1);
    assert_true(rep.bytes_before > rep.bytes_after);
    assert_restores(k, 6);
    unfill(k);
    assert_true(serving(k));
    assert_status(CPR_OK, save(k, 8, NULL));
    assert_restores(k, 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_disk, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
