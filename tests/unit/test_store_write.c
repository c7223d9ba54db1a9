/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the write path of the checkpoint store API (cpr/store.h):
 * open and reopen, job names, begin, put_rows, put_blob, commit, abort, idle
 * parts, the list of jobs and the stats counters, one behaviour per test, each in a fresh store in its own
 * temporary directory. Every refused call is checked for its exact status and
 * followed by a successful write or commit, to show that it left the part
 * unchanged; rows read back are compared bit for bit with tu_value/tu_state.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"
#include "cpr/store.h"
#include "part_fence.h" /* ckptd/store/: S9 */
#include "testutil.h"

static const cpr_table_schema one_table[1] = {{1, 1000, 4, 2}};

static void batch_recrc(tu_batch *b)
{
    const cpr_row_batch *x = &b->batch;
    b->batch.crc32c = cpr_crc32c_rows(x->ids, x->n, x->values, x->values_count,
                                      x->state, x->state_count);
}

static cpr_status put_blob_pattern(cpr_store *s, const cpr_part_id *id,
                                   const char *name, uint64_t offset, size_t len)
{
    unsigned char *buf = malloc(len + 1);
    assert_non_null(buf);
    for (size_t i = 0; i < len; i++)
        buf[i] = tu_blob_byte(id->shard, id->checkpoint, offset + i);
    cpr_status st = cpr_store_put_blob(s, id, name, offset, buf, len,
                                       cpr_crc32c(0, buf, len));
    free(buf);
    return st;
}

/* ---- open, close, names, begin -------------------------------------------- */

static void test_kind_name(void **state)
{
    (void)state;
    assert_string_equal(cpr_kind_name(CPR_KIND_FULL), "FULL");
    assert_string_equal(cpr_kind_name(CPR_KIND_DELTA), "DELTA");
    assert_string_equal(cpr_kind_name(CPR_KIND_PRIORITY), "PRIORITY");
    assert_string_equal(cpr_kind_name(CPR_KIND_UNSPECIFIED), "UNSPECIFIED");
    assert_string_equal(cpr_kind_name((cpr_kind)9), "UNSPECIFIED");
}

static void test_reopen_keeps_committed(void **state)
{
    tu_store_fixture *f = *state;
    uint64_t ids[10];
    tu_iota(ids, 0, 10);
    cpr_part_spec done = tu_part("job", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(tu_write_part(f->store, &done, ids, 10, 4, 1000, 1), CPR_OK);
    cpr_part_spec unfinished = tu_part("job", 0, 1, 2, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(tu_write_part(f->store, &unfinished, ids, 10, 10, 500, 0), CPR_OK);

    cpr_store *second = NULL;
    assert_int_equal(cpr_store_open(f->path, NULL, &second), CPR_UNAVAILABLE);
    assert_null(second);

    cpr_store_close(f->store); /* aborts part 2 */
    f->store = NULL;
    cpr_store_close(NULL);
    assert_int_equal(cpr_store_open(f->path, NULL, &f->store), CPR_OK);

    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "job", &info, &n), CPR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(info[0].shard, 0);
    assert_int_equal(info[0].checkpoint, 1);
    assert_int_equal(info[0].kind, CPR_KIND_FULL);
    assert_int_equal(info[0].step, 100);
    assert_int_equal(info[0].num_shards, 1);
    assert_int_equal(info[0].base, 0);
    assert_int_equal(info[0].rows, 10);
    assert_int_equal(info[0].bytes, 10 * tu_row_bytes(&one_table[0]) + 1000);
    assert_int_equal(info[0].committed, 1);
    assert_int_equal(info[0].consistent, 1);
    free(info);

    tu_rows rows;
    cpr_restore_query q = {.job = "job"};
    cpr_restore_result res;
    assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
    assert_int_equal(rows.n, 10);
    tu_assert_rows(rows.rows, &one_table[0], 0, 1, 10, 1);
    assert_int_equal(res.as_of, 1);
    assert_int_equal(res.rows, 10);
    assert_int_equal(res.bytes, 10 * tu_row_bytes(&one_table[0]));
    tu_rows_free(&rows);
    tu_assert_blob(f->store, &done.id, "dense", 1000);

    /* The part aborted by close can be written afresh. */
    assert_int_equal(tu_write_part(f->store, &unfinished, ids, 10, 10, 700, 1), CPR_OK);
    tu_assert_blob(f->store, &unfinished.id, "dense", 700);

    /* Out-parameters are written only on success. */
    cpr_part_info sentinel;
    info = &sentinel;
    n = 99;
    assert_int_equal(cpr_store_list(f->store, "nosuchjob", &info, &n), CPR_NOT_FOUND);
    assert_ptr_equal(info, &sentinel);
    assert_int_equal(n, 99);
    cpr_restore_query nojob = {.job = "nosuchjob"};
    res.as_of = 4242;
    assert_int_equal(tu_restore(f->store, &nojob, &rows, &res), CPR_NOT_FOUND);
    assert_int_equal(res.as_of, 4242);
    tu_rows_free(&rows);
    uint64_t size = 4242;
    tu_blob none = {0};
    assert_int_equal(cpr_store_read_blob(f->store, &done.id, "nope", &size,
                                         tu_blob_collect, &none), CPR_NOT_FOUND);
    assert_int_equal(size, 4242);
}

static void test_job_names(void **state)
{
    tu_store_fixture *f = *state;
    char name129[130], name128[129];
    memset(name129, 'x', 129);
    name129[129] = '\0';
    memset(name128, 'y', 128);
    name128[128] = '\0';
    uint64_t ids[3] = {0, 1, 2};

    const char *bad[] = {"", name129, "a/b", "a b", "a\\b", "j\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cpr_part_spec spec = tu_part(bad[i], 0, 1, 1, CPR_KIND_FULL, one_table, 1);
        assert_int_equal(cpr_store_begin(f->store, &spec), CPR_INVALID_ARGUMENT);
    }
    /* Odd but valid names are separate jobs, and "." / ".." stay inside
     * the store directory. */
    const char *good[] = {"..", ".", "a.b-c_D", name128};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cpr_part_spec spec = tu_part(good[i], 0, 1, i + 1, CPR_KIND_FULL, one_table, 1);
        assert_int_equal(tu_write_part(f->store, &spec, ids, 3, 3, 10, 1), CPR_OK);
    }
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        tu_rows rows;
        cpr_restore_query q = {.job = good[i]};
        cpr_restore_result res;
        assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
        assert_int_equal(res.as_of, i + 1);
        assert_int_equal(rows.n, 3);
        tu_assert_rows(rows.rows, &one_table[0], 0, 1, 3, i + 1);
        tu_rows_free(&rows);
    }
    DIR *d = opendir(f->dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            assert_string_equal(e->d_name, "store");
    }
    closedir(d);
}

static void test_begin_invalid_spec(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_part_spec good = tu_part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    const cpr_table_schema dim0[1] = {{1, 1000, 0, 2}};
    const cpr_table_schema rows0[1] = {{1, 0, 4, 2}};
    const cpr_table_schema dup[2] = {{1, 1000, 4, 2}, {1, 1000, 4, 2}};
    const cpr_table_schema dup_far[3] = {{3, 10, 1, 0}, {1, 10, 1, 0}, {3, 10, 1, 0}};
    enum { N_BAD = 10 };
    cpr_part_spec bad[N_BAD];
    for (int i = 0; i < N_BAD; i++)
        bad[i] = good;
    bad[0].kind = CPR_KIND_UNSPECIFIED;
    bad[1].kind = (cpr_kind)9;
    bad[2].num_shards = 0;
    bad[3].id.shard = 1;          /* == num_shards */
    bad[4].id.shard = 5;
    bad[4].num_shards = 2;
    bad[5].id.checkpoint = 0;
    bad[6].tables = dim0;
    bad[7].tables = rows0;
    bad[8].tables = dup;
    bad[8].n_tables = 2;
    bad[9].tables = dup_far;
    bad[9].n_tables = 3;
    for (int i = 0; i < N_BAD; i++) {
        cpr_status st = cpr_store_begin(f->store, &bad[i]);
        if (st != CPR_INVALID_ARGUMENT)
            fail_msg("bad spec %d: begin returned %s, expected CPR_INVALID_ARGUMENT",
                     i, cpr_status_name(st));
    }

    /* Nothing was created by the refused calls. */
    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "j", &info, &n), CPR_NOT_FOUND);
    uint64_t id0 = 0;
    assert_int_equal(tu_put_rows(f->store, &good.id, &one_table[0], &id0, 1, 1),
                     CPR_FAILED_PRECONDITION);
    tu_write_part_ok(f->store, &good, 0, 5);
}

static void test_begin_dim_mismatch(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_spec first = tu_part("j", 0, 2, 1, CPR_KIND_FULL, one_table, 1);
    tu_write_part_ok(f->store, &first, 0, 5);

    const cpr_table_schema dim5[1] = {{1, 1000, 5, 2}};
    const cpr_table_schema dim3[1] = {{1, 1000, 3, 2}};
    cpr_part_spec spec = tu_part("j", 1, 2, 1, CPR_KIND_FULL, dim5, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_INVALID_ARGUMENT);
    spec = tu_part("j", 0, 2, 2, CPR_KIND_FULL, dim3, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_INVALID_ARGUMENT);

    /* A new table may have any dim; another job is independent. */
    const cpr_table_schema more[2] = {{1, 1000, 4, 2}, {2, 50, 7, 0}};
    spec = tu_part("j", 1, 2, 1, CPR_KIND_FULL, more, 2);
    tu_write_part_ok(f->store, &spec, 0, 5);
    spec = tu_part("other", 0, 1, 1, CPR_KIND_FULL, dim5, 1);
    tu_write_part_ok(f->store, &spec, 0, 5);
    /* ... and the new table's dim now binds too. */
    const cpr_table_schema t2_dim6[1] = {{2, 50, 6, 0}};
    spec = tu_part("j", 0, 2, 2, CPR_KIND_FULL, t2_dim6, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_INVALID_ARGUMENT);
}

static void test_begin_exists_and_order(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_spec s0 = tu_part("j", 0, 2, 5, CPR_KIND_FULL, one_table, 1);
    tu_write_part_ok(f->store, &s0, 0, 5);
    cpr_part_spec s1 = tu_part("j", 1, 2, 3, CPR_KIND_PRIORITY, one_table, 1);
    tu_write_part_ok(f->store, &s1, 5, 5);

    cpr_part_spec spec = s0;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_ALREADY_EXISTS);
    spec.kind = CPR_KIND_DELTA;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_ALREADY_EXISTS);
    spec = tu_part("j", 0, 2, 3, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);
    spec.id.checkpoint = 4;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);

    /* Shard 1 has only a PRIORITY part: no base for a DELTA. */
    spec = tu_part("j", 1, 2, 4, CPR_KIND_DELTA, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);
    spec.base = 3;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);
    /* Shard 0's FULL is no base for shard 1 either. */
    spec.base = 5;
    spec.id.checkpoint = 6;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);

    spec = tu_part("j", 0, 2, 7, CPR_KIND_DELTA, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_ALREADY_EXISTS);
    spec.kind = CPR_KIND_FULL;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_ALREADY_EXISTS);
    /* The open part was not disturbed by the refused begins. */
    uint64_t ids[2] = {1, 3};
    assert_int_equal(tu_put_rows(f->store, &spec.id, &one_table[0], ids, 2, 7), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 2), CPR_OK);

    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "j", &info, &n), CPR_OK);
    assert_int_equal(n, 3); /* ordered by (checkpoint, shard) */
    assert_int_equal(info[0].checkpoint, 3);
    assert_int_equal(info[0].shard, 1);
    assert_int_equal(info[0].kind, CPR_KIND_PRIORITY);
    assert_int_equal(info[0].consistent, 0);
    assert_int_equal(info[1].checkpoint, 5);
    assert_int_equal(info[2].checkpoint, 7);
    assert_int_equal(info[2].kind, CPR_KIND_DELTA);
    assert_int_equal(info[2].base, 5);
    assert_int_equal(info[2].rows, 2);
    assert_int_equal(info[2].consistent, 1);
    free(info);
}

/* ---- put_rows, put_blob, commit, abort -------------------------------------- */

static void test_put_rows_errors(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema t[1] = {{1, 100, 4, 2}};
    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, t, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    tu_batch b;

    cpr_part_id never = {"j", 0, 2};
    uint64_t ids_never[2] = {40, 41};
    assert_int_equal(tu_put_rows(f->store, &never, t, ids_never, 2, 1),
                     CPR_FAILED_PRECONDITION);

    uint64_t ids_table[2] = {20, 21};
    tu_batch_make(&b, t, ids_table, 2, 1);
    b.batch.table = 7;
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_INVALID_ARGUMENT);
    tu_batch_free(&b);

    uint64_t ids_range[2] = {22, 100};
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids_range, 2, 1),
                     CPR_INVALID_ARGUMENT);

    uint64_t ids_values[2] = {23, 24};
    tu_batch_make(&b, t, ids_values, 2, 1);
    b.batch.values_count = 2 * 4 - 1;
    batch_recrc(&b);
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_INVALID_ARGUMENT);
    b.batch.values_count = 4; /* a whole number of rows, but not n of them */
    batch_recrc(&b);
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_INVALID_ARGUMENT);
    tu_batch_free(&b);

    uint64_t ids_state[2] = {25, 26};
    tu_batch_make(&b, t, ids_state, 2, 1);
    b.batch.state_count = 3;
    batch_recrc(&b);
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_INVALID_ARGUMENT);
    b.batch.state = NULL;
    b.batch.state_count = 0;
    batch_recrc(&b);
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_INVALID_ARGUMENT);
    tu_batch_free(&b);

    uint64_t ids_dup[3] = {27, 28, 27};
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids_dup, 3, 1), CPR_INVALID_ARGUMENT);

    uint64_t ids_crc[2] = {29, 30};
    tu_batch_make(&b, t, ids_crc, 2, 1);
    b.batch.crc32c ^= 1;
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_CORRUPT);
    b.batch.crc32c ^= 1;
    b.values[5] += 1.0f; /* damaged after the checksum was taken */
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_CORRUPT);
    tu_batch_free(&b);

    /* The part is open and holds none of the refused rows. */
    uint64_t ids[10];
    tu_iota(ids, 0, 10);
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids, 10, 1), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 10), CPR_OK);
    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 10);
    tu_assert_rows(rows.rows, t, 0, 1, 10, 1);
    tu_rows_free(&rows);

    /* Committed, then aborted parts take no more writes. */
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids, 10, 1), CPR_FAILED_PRECONDITION);
    assert_int_equal(put_blob_pattern(f->store, &spec.id, "b", 0, 10),
                     CPR_FAILED_PRECONDITION);
    cpr_part_spec gone = tu_part("j", 0, 1, 2, CPR_KIND_FULL, t, 1);
    assert_int_equal(cpr_store_begin(f->store, &gone), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &gone.id, t, ids, 10, 2), CPR_OK);
    assert_int_equal(cpr_store_abort(f->store, &gone.id), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &gone.id, t, ids, 10, 2), CPR_FAILED_PRECONDITION);
    assert_int_equal(put_blob_pattern(f->store, &gone.id, "b", 0, 10),
                     CPR_FAILED_PRECONDITION);
    assert_int_equal(cpr_store_commit(f->store, &gone.id, 10), CPR_FAILED_PRECONDITION);
}

static void test_put_blob(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    const cpr_part_id *id = &spec.id;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    assert_int_equal(put_blob_pattern(f->store, id, "w", 0, 10), CPR_OK);
    assert_int_equal(put_blob_pattern(f->store, id, "w", 5, 10), CPR_INVALID_ARGUMENT);
    assert_int_equal(put_blob_pattern(f->store, id, "w", 11, 10), CPR_INVALID_ARGUMENT);
    assert_int_equal(put_blob_pattern(f->store, id, "w", 0, 10), CPR_INVALID_ARGUMENT);
    unsigned char chunk[16];
    for (size_t i = 0; i < sizeof chunk; i++)
        chunk[i] = tu_blob_byte(0, 1, 10 + i);
    assert_int_equal(cpr_store_put_blob(f->store, id, "w", 10, chunk, sizeof chunk,
                                        cpr_crc32c(0, chunk, sizeof chunk) ^ 4),
                     CPR_CORRUPT);
    char name129[130];
    memset(name129, 'n', 129);
    name129[129] = '\0';
    const char *bad[] = {"", "a/b", "a b", name129};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(put_blob_pattern(f->store, id, bad[i], 0, 10),
                         CPR_INVALID_ARGUMENT);

    /* Continue "w" after the refused chunks, in odd sizes across blocks. */
    const size_t steps[] = {1, 4093, 300007, 1048576, 999, 1048577};
    uint64_t size_w = 10;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        assert_int_equal(put_blob_pattern(f->store, id, "w", size_w, steps[i]), CPR_OK);
        size_w += steps[i];
    }
    assert_int_equal(put_blob_pattern(f->store, id, "opt.state-1_X", 0, 1), CPR_OK);
    assert_int_equal(cpr_store_put_blob(f->store, id, "empty", 0, "", 0, 0), CPR_OK);
    uint64_t ids[5];
    tu_iota(ids, 0, 5);
    assert_int_equal(tu_put_rows(f->store, id, &one_table[0], ids, 5, 1), CPR_OK);

    /* Not readable before the commit. */
    tu_blob early = {0};
    assert_int_not_equal(cpr_store_read_blob(f->store, id, "w", NULL, tu_blob_collect,
                                             &early), CPR_OK);
    free(early.data);
    assert_int_equal(cpr_store_commit(f->store, id, 5), CPR_OK);

    for (int reopened = 0; reopened <= 1; reopened++) {
        if (reopened) { /* blob records are decoded from disk */
            cpr_store_close(f->store);
            f->store = NULL;
            assert_int_equal(cpr_store_open(f->path, NULL, &f->store), CPR_OK);
        }
        tu_assert_blob(f->store, id, "w", size_w);
        tu_assert_blob(f->store, id, "opt.state-1_X", 1);
        tu_assert_blob(f->store, id, "empty", 0);
    }
    tu_blob b = {0}; /* `size` may be NULL */
    assert_int_equal(cpr_store_read_blob(f->store, id, "w", NULL, tu_blob_collect, &b),
                     CPR_OK);
    assert_int_equal(b.len, size_w);
    free(b.data);

    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "j", &info, &n), CPR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(info[0].bytes, 5 * tu_row_bytes(&one_table[0]) + size_w + 1);
    free(info);

    cpr_part_id other = *id;
    tu_blob none = {0};
    assert_int_equal(cpr_store_read_blob(f->store, id, "nope", NULL, tu_blob_collect, &none),
                     CPR_NOT_FOUND);
    other.checkpoint = 9;
    assert_int_equal(cpr_store_read_blob(f->store, &other, "w", NULL, tu_blob_collect, &none),
                     CPR_NOT_FOUND);
    other = *id;
    other.shard = 3;
    assert_int_equal(cpr_store_read_blob(f->store, &other, "w", NULL, tu_blob_collect, &none),
                     CPR_NOT_FOUND);
    other = *id;
    other.job = "nojob";
    assert_int_equal(cpr_store_read_blob(f->store, &other, "w", NULL, tu_blob_collect, &none),
                     CPR_NOT_FOUND);
    assert_int_equal(none.len, 0);

    /* A part may carry only blobs. */
    cpr_part_spec blobs = tu_part("j", 0, 1, 2, CPR_KIND_FULL, NULL, 0);
    assert_int_equal(cpr_store_begin(f->store, &blobs), CPR_OK);
    assert_int_equal(put_blob_pattern(f->store, &blobs.id, "only", 0, 100), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &blobs.id, 0), CPR_OK);
    tu_assert_blob(f->store, &blobs.id, "only", 100);
}

static void test_commit_and_abort(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    const cpr_table_schema *t = &one_table[0];
    uint64_t ids[15];
    tu_iota(ids, 0, 15);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids, 10, 1), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 9), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 11), CPR_INVALID_ARGUMENT);

    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "j", &info, &n), CPR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(info[0].committed, 0);
    free(info);

    /* Still open: send the missing rows, then commit. */
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids + 10, 5, 1), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 15), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 15), CPR_FAILED_PRECONDITION);
    cpr_part_id never = {"j", 0, 2};
    assert_int_equal(cpr_store_commit(f->store, &never, 0), CPR_FAILED_PRECONDITION);
    assert_int_equal(cpr_store_abort(f->store, &spec.id), CPR_FAILED_PRECONDITION);
    assert_int_equal(cpr_store_abort(f->store, &never), CPR_NOT_FOUND);
    cpr_part_id nojob = {"nojob", 0, 1};
    assert_int_equal(cpr_store_abort(f->store, &nojob), CPR_NOT_FOUND);

    /* An aborted part leaves no trace in list or restore. */
    cpr_part_spec aborted = tu_part("j", 0, 1, 2, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &aborted), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &aborted.id, t, ids, 15, 2), CPR_OK);
    assert_int_equal(put_blob_pattern(f->store, &aborted.id, "dense", 0, 50), CPR_OK);
    assert_int_equal(cpr_store_abort(f->store, &aborted.id), CPR_OK);
    assert_int_equal(cpr_store_list(f->store, "j", &info, &n), CPR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(info[0].checkpoint, 1);
    assert_int_equal(info[0].committed, 1);
    assert_int_equal(info[0].rows, 15);
    free(info);
    for (uint64_t as_of = 0; as_of <= 2; as_of++) {
        tu_rows rows;
        cpr_restore_query q = {.job = "j", .as_of = as_of};
        cpr_restore_result res;
        assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
        assert_int_equal(rows.n, 15);
        tu_assert_rows(rows.rows, t, 0, 1, 15, 1);
        if (as_of == 0)
            assert_int_equal(res.as_of, 1);
        tu_rows_free(&rows);
    }
    tu_blob b = {0};
    assert_int_equal(cpr_store_read_blob(f->store, &aborted.id, "dense", NULL,
                                         tu_blob_collect, &b), CPR_NOT_FOUND);
    assert_int_equal(b.len, 0);
}

/* part_fence.h S9: a writer fenced to the part it began never touches the
 * part of a later Begin of the same id (ckptd's leases, L5). */
static void test_fence_keeps_to_its_incarnation(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_spec spec = tu_part("fence", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    const cpr_table_schema *t = &one_table[0];
    uint64_t ids[20];
    tu_iota(ids, 0, 20);
    uint64_t old = 0, now = 0;
    assert_int_equal(cpri_store_begin_incarnation(f->store, &spec, &old), CPR_OK);
    assert_true(old != 0);
    assert_true(cpri_store_part_incarnation(f->store, &spec.id) == old);
    cpri_store_fence(old);
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids, 5, 1), CPR_OK);
    cpri_store_fence(0);
    /* Aborted (by the idle reaper, say) and begun again by another writer. */
    assert_int_equal(cpr_store_abort(f->store, &spec.id), CPR_OK);
    assert_int_equal(cpri_store_begin_incarnation(f->store, &spec, &now), CPR_OK);
    assert_true(now != 0 && now != old);
    /* The old writer's calls find no open part: nothing of the new one changes. */
    cpri_store_fence(old);
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids + 5, 5, 1),
                     CPR_FAILED_PRECONDITION);
    assert_int_equal(put_blob_pattern(f->store, &spec.id, "dense", 0, 10),
                     CPR_FAILED_PRECONDITION);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 0), CPR_FAILED_PRECONDITION);
    assert_int_equal(cpr_store_abort(f->store, &spec.id), CPR_NOT_FOUND);
    /* The new writer's go on. */
    cpri_store_fence(now);
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids, 20, 1), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 20), CPR_OK);
    cpri_store_fence(0);
    tu_rows rows;
    cpr_restore_query q = {.job = "fence"};
    assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 20);
    tu_assert_rows(rows.rows, t, 0, 1, 20, 1);
    tu_rows_free(&rows);
    assert_true(cpri_store_part_incarnation(f->store, &spec.id) == 0); /* committed */
}

static void test_uncommitted_invisible(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    cpr_part_spec first = tu_part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    tu_write_part_ok(f->store, &first, 0, 10);
    cpr_part_spec pending = tu_part("j", 0, 1, 2, CPR_KIND_PRIORITY, one_table, 1);
    uint64_t ids[10] = {0, 1, 2, 3, 4, 10, 11, 12, 13, 14};
    assert_int_equal(cpr_store_begin(f->store, &pending), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &pending.id, t, ids, 10, 2), CPR_OK);

    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "j", &info, &n), CPR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(info[1].checkpoint, 2);
    assert_int_equal(info[1].committed, 0);
    free(info);

    for (uint64_t as_of = 0; as_of <= 2; as_of++) {
        tu_rows rows;
        cpr_restore_query q = {.job = "j", .as_of = as_of};
        cpr_restore_result res;
        assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
        assert_int_equal(rows.n, 10);
        tu_assert_rows(rows.rows, t, 0, 1, 10, 1);
        if (as_of == 0)
            assert_int_equal(res.as_of, 1);
        tu_rows_free(&rows);
    }

    assert_int_equal(cpr_store_commit(f->store, &pending.id, 10), CPR_OK);
    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    cpr_restore_result res;
    assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
    assert_int_equal(res.as_of, 2);
    assert_int_equal(rows.n, 15);
    tu_assert_rows(rows.rows, t, 0, 1, 5, 2);
    tu_assert_rows(rows.rows + 5, t, 5, 1, 5, 1);
    tu_assert_rows(rows.rows + 10, t, 10, 1, 5, 2);
    tu_rows_free(&rows);
}

static void test_commit_order(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    uint64_t ids[4] = {0, 1, 2, 3};
    cpr_part_spec p5 = tu_part("j", 0, 1, 5, CPR_KIND_FULL, one_table, 1);
    cpr_part_spec p6 = tu_part("j", 0, 1, 6, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &p5), CPR_OK);
    assert_int_equal(cpr_store_begin(f->store, &p6), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &p5.id, t, ids, 4, 5), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &p6.id, t, ids, 4, 6), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &p6.id, 4), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &p5.id, 4), CPR_FAILED_PRECONDITION);
    assert_int_equal(cpr_store_abort(f->store, &p5.id), CPR_OK);

    /* A DELTA whose base stopped being the newest cannot commit. */
    cpr_part_spec delta = tu_part("j", 0, 1, 8, CPR_KIND_DELTA, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &delta), CPR_OK); /* base 6 */
    assert_int_equal(tu_put_rows(f->store, &delta.id, t, ids, 2, 8), CPR_OK);
    cpr_part_spec p7 = tu_part("j", 0, 1, 7, CPR_KIND_FULL, one_table, 1);
    tu_write_part_ok(f->store, &p7, 0, 4);
    assert_int_equal(cpr_store_commit(f->store, &delta.id, 2), CPR_FAILED_PRECONDITION);
    cpr_part_spec old_base = tu_part("j", 0, 1, 9, CPR_KIND_DELTA, one_table, 1);
    old_base.base = 6; /* committed, but 7 is newer */
    assert_int_equal(cpr_store_begin(f->store, &old_base), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &old_base.id, t, ids, 2, 9), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &old_base.id, 2), CPR_FAILED_PRECONDITION);

    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    cpr_restore_result res;
    assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
    assert_int_equal(res.as_of, 7);
    assert_int_equal(rows.n, 4);
    tu_assert_rows(rows.rows, t, 0, 1, 4, 7);
    tu_rows_free(&rows);
}

static void test_row_sent_twice(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    uint64_t ids[10], again[2] = {4, 3};
    tu_iota(ids, 0, 10);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids, 10, 1), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, again, 2, 77), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 12), CPR_OK);

    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 10);
    tu_assert_rows(rows.rows, t, 0, 1, 3, 1);
    tu_assert_rows(rows.rows + 3, t, 3, 1, 2, 77);
    tu_assert_rows(rows.rows + 5, t, 5, 1, 5, 1);
    tu_rows_free(&rows);
}

/* Batches that go backwards in row order each cost a row file; past 1024
 * the store refuses the next one with a specific status, leaving the part
 * open and unchanged, and what was accepted still commits exactly. */
static void test_out_of_order_limit(void **state)
{
    tu_store_fixture *f = *state;
    static const cpr_table_schema big[] = {{.table = 1, .rows = 4096, .dim = 2, .state_dim = 0}};
    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, big, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    uint64_t row = 2000;
    assert_int_equal(tu_put_rows(f->store, &spec.id, &big[0], &row, 1, 1), CPR_OK);
    for (unsigned i = 1; i <= 1024; i++) { /* each one below everything before */
        row = 2000 - i;
        assert_int_equal(tu_put_rows(f->store, &spec.id, &big[0], &row, 1, 1), CPR_OK);
    }
    row = 10;
    assert_int_equal(tu_put_rows(f->store, &spec.id, &big[0], &row, 1, 1),
                     CPR_RESOURCE_EXHAUSTED);
    assert_true(strstr(cpr_errmsg(), "ascending") != NULL);
    row = 3000; /* in order again: still accepted */
    assert_int_equal(tu_put_rows(f->store, &spec.id, &big[0], &row, 1, 1), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 1026), CPR_OK);

    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 1026);
    tu_assert_rows(rows.rows, &big[0], 2000 - 1024, 1, 1025, 1);
    tu_assert_rows(rows.rows + 1025, &big[0], 3000, 1, 1, 1);
    tu_rows_free(&rows);
}

/* ---- stats ------------------------------------------------------------- */

static void test_stats(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    cpr_store_stats before, after;
    assert_int_equal(cpr_store_stats_get(f->store, &before), CPR_OK);
    assert_int_equal(before.parts_committed, 0);
    assert_int_equal(before.jobs, 0);

    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    uint64_t ids[10];
    tu_iota(ids, 0, 10);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    assert_int_equal(tu_put_rows(f->store, &spec.id, t, ids, 10, 1), CPR_OK);
    assert_int_equal(put_blob_pattern(f->store, &spec.id, "dense", 0, 100), CPR_OK);
    assert_int_equal(cpr_store_stats_get(f->store, &after), CPR_OK);
    assert_int_equal(after.parts_open, before.parts_open + 1);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 10), CPR_OK);

    cpr_part_id never = {"j", 0, 9};
    assert_int_equal(cpr_store_commit(f->store, &never, 0), CPR_FAILED_PRECONDITION);
    /* A refused begin leaves the store unchanged: no job "ghost". */
    cpr_part_spec ghost = tu_part("ghost", 0, 1, 1, CPR_KIND_DELTA, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &ghost), CPR_FAILED_PRECONDITION);
    tu_batch b;
    cpr_part_spec next = tu_part("j", 0, 1, 2, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &next), CPR_OK);
    tu_batch_make(&b, t, ids, 2, 2);
    b.batch.crc32c ^= 1;
    assert_int_equal(cpr_store_put_rows(f->store, &next.id, &b.batch), CPR_CORRUPT);
    tu_batch_free(&b);
    assert_int_equal(cpr_store_abort(f->store, &next.id), CPR_OK);

    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
    tu_rows_free(&rows);

    assert_int_equal(cpr_store_stats_get(f->store, &after), CPR_OK);
    assert_int_equal(after.parts_committed, 1);
    assert_int_equal(after.parts_open, 0);
    assert_int_equal(after.rows_in - before.rows_in, 10);
    assert_int_equal(after.bytes_in - before.bytes_in, 10 * tu_row_bytes(t) + 100);
    assert_int_equal(after.rows_out - before.rows_out, 10);
    assert_int_equal(after.bytes_out - before.bytes_out, 10 * tu_row_bytes(t));
    assert_true(after.store_bytes > 0);
    assert_int_equal(after.errors[CPR_FAILED_PRECONDITION] -
                     before.errors[CPR_FAILED_PRECONDITION], 2);
    assert_int_equal(after.errors[CPR_CORRUPT] - before.errors[CPR_CORRUPT], 1);
    assert_int_equal(after.errors[CPR_OK], 0);
    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "ghost", &info, &n), CPR_NOT_FOUND);
    assert_int_equal(after.jobs, 1); /* "j" only: the refused begin made no job */
}

static void assert_job_names(cpr_store *store, const char *const *want, size_t n_want)
{
    char **names = NULL;
    size_t n = 99;
    assert_status(CPR_OK, cpr_store_list_jobs(store, &names, &n));
    assert_int_equal(n, n_want);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(names[i], want[i]);
    assert_null(names[n]);
    cpr_names_free(names, n);
}

/* Jobs with a committed or open part, sorted; aborted or refused ones do
 * not appear; the list survives a reopen. */
static void test_list_jobs(void **state)
{
    tu_store_fixture *f = *state;
    uint64_t ids[10];
    tu_iota(ids, 0, 10);
    assert_job_names(f->store, NULL, 0);
    cpr_part_spec zeta = tu_part("zeta", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    cpr_part_spec alpha = tu_part("alpha", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    cpr_part_spec mid = tu_part("mid.1", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    cpr_part_spec gone = tu_part("gone", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    assert_status(CPR_OK, tu_write_part(f->store, &zeta, ids, 10, 10, 0, 1));
    assert_status(CPR_OK, cpr_store_begin(f->store, &alpha)); /* open only */
    assert_status(CPR_OK, tu_write_part(f->store, &mid, ids, 10, 10, 0, 1));
    assert_status(CPR_OK, cpr_store_begin(f->store, &gone));
    assert_status(CPR_OK, cpr_store_abort(f->store, &gone.id));
    assert_job_names(f->store, (const char *const[]){"alpha", "mid.1", "zeta"}, 3);
    cpr_store_close(f->store); /* the open part is aborted by close */
    f->store = NULL;
    assert_status(CPR_OK, cpr_store_open(f->path, NULL, &f->store));
    assert_job_names(f->store, (const char *const[]){"mid.1", "zeta"}, 2);
    cpr_names_free(NULL, 0); /* a no-op */
}

/* Idle parts are aborted; fresh ones and committed data are not. */
static void test_abort_idle(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    uint64_t ids[10], other[10], aborted = 99; /* shard 0's rows, shard 1's */
    tu_iota(ids, 0, 10);
    tu_iota(other, 100, 10);
    cpr_part_spec done = tu_part("j", 0, 2, 1, CPR_KIND_FULL, one_table, 1);
    cpr_part_spec idle = tu_part("j", 1, 2, 1, CPR_KIND_FULL, one_table, 1);
    assert_status(CPR_OK, tu_write_part(f->store, &done, ids, 10, 10, 0, 1));
    assert_status(CPR_OK, cpr_store_begin(f->store, &idle));
    assert_status(CPR_OK, tu_put_rows(f->store, &idle.id, t, other, 10, 1));

    assert_status(CPR_INVALID_ARGUMENT, cpr_store_abort_idle(f->store, -1.0, &aborted));
    assert_int_equal(aborted, 99); /* written only on success */
    assert_status(CPR_OK, cpr_store_abort_idle(f->store, 3600.0, &aborted));
    assert_int_equal(aborted, 0); /* touched just now */
    assert_status(CPR_OK, tu_put_rows(f->store, &idle.id, t, other, 10, 1)); /* still open */

    assert_status(CPR_OK, cpr_store_abort_idle(f->store, 0.0, &aborted));
    assert_int_equal(aborted, 1);
    assert_status(CPR_FAILED_PRECONDITION, tu_put_rows(f->store, &idle.id, t, other, 10, 1));
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_commit(f->store, &idle.id, 20));
    assert_status(CPR_NOT_FOUND, cpr_store_abort(f->store, &idle.id));
    assert_status(CPR_OK, cpr_store_abort_idle(f->store, 0.0, NULL)); /* nothing left */

    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_store_list(f->store, "j", &info, &n));
    assert_int_equal(n, 1);
    assert_true(info[0].committed && info[0].shard == 0);
    free(info);
    /* The id is free again, and nothing of the aborted rows is visible. */
    assert_status(CPR_OK, tu_write_part(f->store, &idle, other, 5, 5, 0, 1));
    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    assert_status(CPR_OK, tu_restore(f->store, &q, &rows, NULL));
    assert_int_equal(rows.n, 15);
    tu_assert_rows(rows.rows, t, 0, 1, 10, 1);
    tu_assert_rows(rows.rows + 10, t, 100, 1, 5, 1);
    tu_rows_free(&rows);
}

/* O1: the caps count blobs being written, not blobs ever written: a
 * committed part's blobs are no longer open (they were counted for ever,
 * until blobs and then parts were refused). */
static void test_blob_caps_count_open_blobs(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-blob-caps");
    cpr_store_options o = {.no_sync = 1, .no_fold = 1, .max_open_blobs_per_job = 2,
                           .max_open_blobs = 3};
    cpr_store *s = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, &o, &s));
    for (uint64_t c = 1; c <= 6; c++) { /* committed ones, twice the caps */
        cpr_part_spec spec = tu_part("j", 0, 1, c, CPR_KIND_FULL, one_table, 1);
        assert_status(CPR_OK, cpr_store_begin(s, &spec));
        assert_status(CPR_OK, put_blob_pattern(s, &spec.id, "a", 0, 10));
        assert_status(CPR_OK, cpr_store_commit(s, &spec.id, 0));
    }
    /* Open ones count: the job's cap, then the store's. */
    cpr_part_spec open[3];
    for (uint32_t i = 0; i < 3; i++) {
        open[i] = tu_part(i < 2 ? "j" : "k", i, 3, 7, CPR_KIND_FULL, one_table, 1);
        assert_status(CPR_OK, cpr_store_begin(s, &open[i]));
        assert_status(CPR_OK, put_blob_pattern(s, &open[i].id, "a", 0, 10));
    }
    cpr_part_spec more = tu_part("k", 0, 3, 7, CPR_KIND_FULL, one_table, 1);
    assert_status(CPR_OK, cpr_store_begin(s, &more));
    assert_status(CPR_RESOURCE_EXHAUSTED, put_blob_pattern(s, &more.id, "a", 0, 10));
    assert_status(CPR_OK, cpr_store_commit(s, &open[0].id, 0));
    assert_status(CPR_OK, put_blob_pattern(s, &more.id, "a", 0, 10));
    assert_status(CPR_RESOURCE_EXHAUSTED, put_blob_pattern(s, &open[1].id, "b", 0, 10));
    assert_status(CPR_OK, cpr_store_abort(s, &open[2].id));
    assert_status(CPR_OK, put_blob_pattern(s, &open[1].id, "b", 0, 10));
    cpr_store_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* A range batch must carry its rows' values before its ids are made. */
static void test_put_range_values_checked_first(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    assert_status(CPR_OK, cpr_store_begin(f->store, &spec));
    cpr_row_batch b = {.table = 1, .n = (size_t)1 << 24, .values_count = 0};
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_put_rows(f->store, &spec.id, &b));
    assert_non_null(strstr(cpr_errmsg(), "give dim")); /* refused before the ids */
    assert_status(CPR_OK, cpr_store_abort(f->store, &spec.id));
}

#define STORE_TEST(fn) cmocka_unit_test_setup_teardown(fn, tu_store_setup, tu_store_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kind_name),
        STORE_TEST(test_reopen_keeps_committed),
        STORE_TEST(test_job_names),
        STORE_TEST(test_begin_invalid_spec),
        STORE_TEST(test_begin_dim_mismatch),
        STORE_TEST(test_begin_exists_and_order),
        STORE_TEST(test_put_rows_errors),
        STORE_TEST(test_put_blob),
        STORE_TEST(test_commit_and_abort),
        STORE_TEST(test_fence_keeps_to_its_incarnation),
        STORE_TEST(test_uncommitted_invisible),
        STORE_TEST(test_commit_order),
        STORE_TEST(test_row_sent_twice),
        STORE_TEST(test_out_of_order_limit),
        STORE_TEST(test_stats),
        STORE_TEST(test_list_jobs),
        STORE_TEST(test_abort_idle),
        cmocka_unit_test(test_blob_caps_count_open_blobs),
        STORE_TEST(test_put_range_values_checked_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
