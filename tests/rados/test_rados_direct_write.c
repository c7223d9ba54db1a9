/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Direct writes at the store's API, on the test cluster (store_write.c W3):
 *  - a part's segment written by a cpr_store_writer on a reader of the pool
 *    (not the store), its index handed to the store, committed: it lists and
 *    restores exactly, through that store and through a fresh gateway;
 *  - an index that does not match the segment (its size, a block's place,
 *    CRC or table, a block left out, a segment not finished) is refused,
 *    naming what differs, and the part is unchanged: the right index is
 *    then taken;
 *  - a direct part takes no rows through put_rows (an empty batch, its
 *    writer's sign of life, is taken); the same index given twice is taken,
 *    another one not; put_segment needs a direct part; a store on a local
 *    disk refuses direct writes;
 *  - an aborted part's segment is removed from the pool.
 * Exits 77 when the cluster is not there.
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

#include "cpr/block.h"
#include "cpr/store.h"
#include "testutil.h"

static const char *g_conf;
static char g_ns[64];

static const cpr_table_schema T[] = {{.table = 0, .rows = 100000, .dim = 64, .state_dim = 1}};

typedef struct env {
    char *tmp, *dir;
    cpr_store *store;
    cpr_store_reader *reader;
} env;

static cpr_store_options pool_opts(void)
{
    return (cpr_store_options){.rados_pool = "cpr", .rados_conf = g_conf,
                               .rados_namespace = g_ns, .no_fold = 1};
}

static void env_start(env *e, const char *what)
{
    snprintf(g_ns, sizeof g_ns, "%s-%d-%ld", what, (int)getpid(), (long)time(NULL));
    e->tmp = tu_mkdtemp("cpr-dwrite");
    assert_int_not_equal(asprintf(&e->dir, "%s/store", e->tmp), -1);
    cpr_store_options o = pool_opts();
    assert_status(CPR_OK, cpr_store_open(e->dir, &o, &e->store));
    assert_status(CPR_OK, cpr_store_reader_open(&o, &e->reader));
}

/* Another store: on the pool (o), or on a local disk (o NULL). */
static void other_start(env *x, const char *what, const cpr_store_options *o)
{
    x->tmp = tu_mkdtemp(what);
    assert_int_not_equal(asprintf(&x->dir, "%s/store", x->tmp), -1);
    assert_status(CPR_OK, cpr_store_open(x->dir, o, &x->store));
    x->reader = NULL;
}

static void env_stop(env *e)
{
    cpr_store_reader_close(e->reader);
    cpr_store_close(e->store);
    tu_rmtree(e->tmp);
    free(e->tmp);
    free(e->dir);
}

/* Rows first..first+n-1 of T[0] as written at `ckpt`, as one sealed block. */
static void *make_block(uint64_t first, size_t n, uint64_t ckpt, size_t *len)
{
    const cpr_table_schema *t = &T[0];
    uint64_t *ids = malloc(n * sizeof *ids);
    assert_non_null(ids);
    tu_iota(ids, first, n);
    tu_batch b;
    tu_batch_make(&b, t, ids, n, ckpt);
    cpr_block_layout l;
    cpr_block_layout_of((uint32_t)n, t->dim, t->state_dim, 0, &l);
    unsigned char *blk = calloc(1, l.bytes);
    assert_non_null(blk);
    memcpy(blk + l.ids, ids, n * 8);
    memcpy(blk + l.values, b.values, n * t->dim * 4);
    memcpy(blk + l.state, b.state, n * t->state_dim * 4);
    assert_status(CPR_OK, cpr_block_seal(blk, t->table, (uint32_t)n, t->dim, t->state_dim, 0));
    tu_batch_free(&b);
    free(ids);
    *len = l.bytes;
    return blk;
}

/* Write blocks of rows [0, 1000), [1000, 2000), [2000, 2500) at `ckpt` to
 * `object`; refs[3] and *size get the index. finish: finish the writer (else
 * it is returned in *open_w). */
static void write_segment(env *e, const char *object, uint64_t ckpt, cpr_store_block_ref refs[3],
                          uint64_t *size, cpr_store_writer **open_w)
{
    static const uint64_t firsts[] = {0, 1000, 2000}, counts[] = {1000, 1000, 500};
    cpr_store_writer *w = NULL;
    assert_status(CPR_OK, cpr_store_writer_create(e->reader, object, &w));
    for (int i = 0; i < 3; i++) {
        size_t len = 0;
        void *blk = make_block(firsts[i], counts[i], ckpt, &len);
        assert_status(CPR_OK, cpr_store_writer_block(w, blk, len, &refs[i]));
        assert_int_equal(refs[i].n, counts[i]);
        assert_int_equal(refs[i].first_row, firsts[i]);
        free(blk);
    }
    if (open_w) {
        *open_w = w;
        return;
    }
    assert_status(CPR_OK, cpr_store_writer_finish(w, size));
}

static void assert_restores(cpr_store *s, const char *job, uint64_t as_of, size_t n,
                            uint64_t ckpt)
{
    cpr_row_range r = {.begin = 0, .end = n};
    cpr_restore_query q = {.job = job, .as_of = as_of, .ranges = &r, .n_ranges = 1};
    tu_rows rows = {0};
    assert_status(CPR_OK, tu_restore(s, &q, &rows, NULL));
    assert_int_equal(rows.n, n);
    tu_assert_rows(rows.rows, &T[0], 0, 1, n, ckpt);
    tu_rows_free(&rows);
}

/* 1 when object chunk 0 of `object` is in the pool (rados stat). */
static int in_pool(const char *object)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rados -c '%s' -p cpr -N '%s' stat '%s@0' >/dev/null 2>&1",
             g_conf, g_ns, object);
    return system(cmd) == 0;
}

static void test_direct_part_round_trip(void **unused)
{
    (void)unused;
    env e;
    env_start(&e, "dw-trip");
    cpr_part_spec p = tu_part("d", 0, 1, 1, CPR_KIND_FULL, T, 1);
    char name[CPR_STORE_OBJECT_MAX];
    assert_status(CPR_OK, cpr_store_begin(e.store, &p));
    assert_status(CPR_OK, cpr_store_direct_segment(e.store, &p.id, name, sizeof name));
    char again[CPR_STORE_OBJECT_MAX];
    assert_status(CPR_OK, cpr_store_direct_segment(e.store, &p.id, again, sizeof again));
    assert_string_equal(name, again); /* asked twice: one segment */
    cpr_store_block_ref refs[3];
    uint64_t size = 0;
    write_segment(&e, name, 1, refs, &size, NULL);
    /* The writer's touch while it writes: an empty batch, taken; rows are not. */
    uint64_t one = 7;
    cpr_row_batch none = {.table = 0};
    assert_status(CPR_OK, cpr_store_put_rows(e.store, &p.id, &none));
    assert_status(CPR_FAILED_PRECONDITION, tu_put_rows(e.store, &p.id, &T[0], &one, 1, 1));
    assert_status(CPR_OK, cpr_store_put_segment(e.store, &p.id, refs, 3, size));
    /* The same index again (a commit tried again) is taken; another is not. */
    assert_status(CPR_OK, cpr_store_put_segment(e.store, &p.id, refs, 3, size));
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_put_segment(e.store, &p.id, refs, 2,
                                                                  refs[2].offset));
    assert_status(CPR_OK, cpr_store_commit(e.store, &p.id, 2500));
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_store_list(e.store, "d", &parts, &n));
    assert_int_equal(n, 1);
    assert_int_equal(parts[0].rows, 2500);
    free(parts);
    assert_restores(e.store, "d", 1, 2500, 1);
    /* A fresh gateway on the pool serves it too, and a later FULL written
     * through the store replaces it as usual. */
    cpr_store_options o = pool_opts();
    env b;
    other_start(&b, "cpr-dwrite2", &o);
    assert_restores(b.store, "d", 1, 2500, 1);
    cpr_part_spec p2 = tu_part("d", 0, 1, 2, CPR_KIND_FULL, T, 1);
    tu_write_part_ok(b.store, &p2, 0, 2500);
    assert_restores(e.store, "d", 2, 2500, 2);
    assert_restores(e.store, "d", 1, 2500, 1);
    env_stop(&b);
    env_stop(&e);
}

static void test_wrong_index_refused(void **unused)
{
    (void)unused;
    env e;
    env_start(&e, "dw-index");
    cpr_part_spec p = tu_part("w", 0, 1, 1, CPR_KIND_FULL, T, 1);
    char name[CPR_STORE_OBJECT_MAX];
    assert_status(CPR_OK, cpr_store_begin(e.store, &p));
    assert_status(CPR_OK, cpr_store_direct_segment(e.store, &p.id, name, sizeof name));
    cpr_store_block_ref refs[3], bad[3];
    uint64_t size = 0;
    cpr_store_writer *w = NULL;
    write_segment(&e, name, 1, refs, &size, &w);
    /* Not finished yet: not in the pool as a segment. */
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_put_segment(e.store, &p.id, refs, 3,
                                                                  refs[2].offset + refs[2].len));
    assert_status(CPR_OK, cpr_store_writer_finish(w, &size));
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_put_segment(e.store, &p.id, refs, 3, size + 8));
    assert_non_null(strstr(cpr_errmsg(), "bytes in the pool"));
    memcpy(bad, refs, sizeof bad);
    bad[1].crc32c ^= 1;
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_put_segment(e.store, &p.id, bad, 3, size));
    assert_non_null(strstr(cpr_errmsg(), "does not match the index"));
    memcpy(bad, refs, sizeof bad);
    bad[2].last_row -= 1;
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_put_segment(e.store, &p.id, bad, 3, size));
    assert_non_null(strstr(cpr_errmsg(), "block 2"));
    memcpy(bad, refs, sizeof bad);
    bad[1].offset += 8;
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_put_segment(e.store, &p.id, bad, 3, size));
    assert_non_null(strstr(cpr_errmsg(), "offset"));
    memcpy(bad, refs, sizeof bad);
    bad[0].table = 7;
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_put_segment(e.store, &p.id, bad, 3, size));
    assert_non_null(strstr(cpr_errmsg(), "schema"));
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_put_segment(e.store, &p.id, refs, 2, size));
    assert_non_null(strstr(cpr_errmsg(), "end at byte"));
    /* Nothing of those was taken: the right index is, and commits. */
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_commit(e.store, &p.id, 2500));
    assert_status(CPR_OK, cpr_store_put_segment(e.store, &p.id, refs, 3, size));
    assert_status(CPR_OK, cpr_store_commit(e.store, &p.id, 2500));
    assert_restores(e.store, "w", 1, 2500, 1);
    env_stop(&e);
}

static void test_direct_part_rules(void **unused)
{
    (void)unused;
    env e;
    env_start(&e, "dw-rules");
    cpr_part_spec p = tu_part("r", 0, 1, 1, CPR_KIND_FULL, T, 1);
    cpr_store_block_ref refs[3];
    uint64_t ids[4];
    tu_iota(ids, 0, 4);
    char name[CPR_STORE_OBJECT_MAX];
    assert_status(CPR_OK, cpr_store_begin(e.store, &p));
    /* put_segment needs a direct part. */
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_put_segment(e.store, &p.id, refs, 0, 0));
    assert_status(CPR_OK, cpr_store_direct_segment(e.store, &p.id, name, sizeof name));
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_direct_segment(e.store, &p.id, name, 4));
    /* A direct part takes no rows through the store. */
    assert_status(CPR_FAILED_PRECONDITION, tu_put_rows(e.store, &p.id, &T[0], ids, 4, 1));
    assert_non_null(strstr(cpr_errmsg(), "direct writes"));
    /* Rows put first: no direct segment for that part. */
    cpr_part_spec q = tu_part("r", 0, 1, 2, CPR_KIND_FULL, T, 1);
    assert_status(CPR_OK, cpr_store_begin(e.store, &q));
    assert_status(CPR_OK, tu_put_rows(e.store, &q.id, &T[0], ids, 4, 2));
    assert_status(CPR_FAILED_PRECONDITION,
                  cpr_store_direct_segment(e.store, &q.id, name, sizeof name));
    assert_status(CPR_OK, cpr_store_abort(e.store, &q.id));
    /* A direct part committed without rows: no segment left behind. */
    uint64_t size = 0;
    write_segment(&e, name, 1, refs, &size, NULL);
    assert_true(in_pool(name));
    assert_status(CPR_OK, cpr_store_commit(e.store, &p.id, 0));
    assert_false(in_pool(name));
    /* A store on a local disk has no segments another process reaches. */
    env local;
    other_start(&local, "cpr-dwrite-local", NULL);
    cpr_part_spec l = tu_part("l", 0, 1, 1, CPR_KIND_FULL, T, 1);
    assert_status(CPR_OK, cpr_store_begin(local.store, &l));
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_direct_segment(local.store, &l.id, name,
                                                                     sizeof name));
    env_stop(&local);
    /* Writers take only names of the store's form. */
    cpr_store_writer *w = NULL;
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_writer_create(e.reader, "../x", &w));
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_writer_create(e.reader, "noslash", &w));
    assert_null(w);
    env_stop(&e);
}

static void test_abort_removes_segment(void **unused)
{
    (void)unused;
    env e;
    env_start(&e, "dw-abort");
    cpr_part_spec p = tu_part("a", 0, 1, 1, CPR_KIND_FULL, T, 1);
    char name[CPR_STORE_OBJECT_MAX];
    assert_status(CPR_OK, cpr_store_begin(e.store, &p));
    assert_status(CPR_OK, cpr_store_direct_segment(e.store, &p.id, name, sizeof name));
    cpr_store_block_ref refs[3];
    uint64_t size = 0;
    write_segment(&e, name, 1, refs, &size, NULL);
    assert_status(CPR_OK, cpr_store_put_segment(e.store, &p.id, refs, 3, size));
    assert_true(in_pool(name));
    assert_status(CPR_OK, cpr_store_abort(e.store, &p.id));
    assert_false(in_pool(name));
    uint64_t cut = 0;
    assert_status(CPR_NOT_FOUND, cpr_store_latest_cut(e.store, "a", &cut));
    env_stop(&e);
}

int main(void)
{
    if (!(g_conf = tu_rados_conf()))
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_direct_part_round_trip),
        cmocka_unit_test(test_wrong_index_refused),
        cmocka_unit_test(test_direct_part_rules),
        cmocka_unit_test(test_abort_removes_segment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
