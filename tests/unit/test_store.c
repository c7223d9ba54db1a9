/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the checkpoint store API (cpr/store.h), one behaviour per
 * test, each in a fresh store in its own temporary directory. Every test
 * checks an outcome that could be wrong: the exact status of a refused call,
 * the exact float restored for every row (rows are filled with tu_value and
 * tu_state, so a row read back identifies the checkpoint it came from), row
 * and byte counts, and blob bytes. Errors are followed by a successful commit
 * to show that a refused call left the part unchanged.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"
#include "cpr/store.h"
#include "testutil.h"

typedef struct fixture {
    char *dir;        /* temporary directory, removed by teardown */
    char *path;       /* the store directory inside it */
    cpr_store *store;
} fixture;

static const cpr_table_schema one_table[1] = {{1, 1000, 4, 2}};
static const cpr_table_schema two_tables[2] = {{1, 1000, 4, 2}, {2, 500, 3, 0}};

/* Payload bytes of one row: id, values, state. */
static uint64_t row_bytes(const cpr_table_schema *t)
{
    return 8 + 4 * (uint64_t)(t->dim + t->state_dim);
}

static int teardown(void **state)
{
    fixture *f = *state;
    cpr_store_close(f->store);
    tu_rmtree(f->dir);
    free(f->path);
    free(f->dir);
    free(f);
    return 0;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    *state = f;
    f->dir = tu_mkdtemp("cpr-store");
    size_t len = strlen(f->dir) + sizeof "/store";
    f->path = malloc(len);
    if (f->path) {
        snprintf(f->path, len, "%s/store", f->dir); /* open must create it */
        if (cpr_store_open(f->path, NULL, &f->store) == CPR_OK)
            return 0;
        fprintf(stderr, "cpr_store_open: %s\n", cpr_errmsg());
    }
    teardown(state);
    return -1;
}

static cpr_part_spec part(const char *job, uint32_t shard, uint32_t num_shards,
                          uint64_t ckpt, cpr_kind kind,
                          const cpr_table_schema *tables, size_t n_tables)
{
    cpr_part_spec spec = {
        .id = {job, shard, ckpt}, .kind = kind, .step = ckpt * 100,
        .num_shards = num_shards, .tables = tables, .n_tables = n_tables,
    };
    return spec;
}

static void iota(uint64_t *ids, uint64_t first, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = first + i;
}

/* A row batch with its own arrays, filled as written at checkpoint `ckpt`. */
typedef struct batch_buf {
    cpr_row_batch batch;
    float *values;
    float *state;
} batch_buf;

static void batch_make(batch_buf *b, const cpr_table_schema *t,
                       const uint64_t *ids, size_t n, uint64_t ckpt)
{
    b->values = malloc((n * t->dim + 1) * sizeof(float));
    b->state = malloc((n * t->state_dim + 1) * sizeof(float));
    assert_non_null(b->values);
    assert_non_null(b->state);
    tu_fill_batch(&b->batch, t->table, ids, n, t->dim, t->state_dim, ckpt,
                  b->values, b->state);
}

static void batch_recrc(batch_buf *b)
{
    const cpr_row_batch *x = &b->batch;
    b->batch.crc32c = cpr_crc32c_rows(x->ids, x->n, x->values, x->values_count,
                                      x->state, x->state_count);
}

static void batch_free(batch_buf *b)
{
    free(b->values);
    free(b->state);
}

/* Send rows `ids` of table `t`, valued as written at `value_ckpt`. */
static cpr_status put(cpr_store *s, const cpr_part_id *id, const cpr_table_schema *t,
                      const uint64_t *ids, size_t n, uint64_t value_ckpt)
{
    batch_buf b;
    batch_make(&b, t, ids, n, value_ckpt);
    cpr_status st = cpr_store_put_rows(s, id, &b.batch);
    batch_free(&b);
    return st;
}

/* Write and commit a part with rows first..first+n-1 of every table. */
static void write_part(cpr_store *s, const cpr_part_spec *spec, uint64_t first,
                       size_t n)
{
    uint64_t *ids = malloc((n + 1) * sizeof *ids);
    assert_non_null(ids);
    iota(ids, first, n);
    cpr_status st = tu_write_part(s, spec, ids, n, 16, 0, 1);
    if (st)
        fprintf(stderr, "write_part: %s\n", cpr_errmsg());
    assert_int_equal(st, CPR_OK);
    free(ids);
}

static cpr_status restore(cpr_store *s, const cpr_restore_query *q, tu_rows *rows,
                          cpr_restore_result *res)
{
    memset(rows, 0, sizeof *rows);
    return cpr_store_restore(s, q, tu_collect, rows, res);
}

static uint32_t float_bits(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits;
}

/* `row` is row `id` of table `t` holding exactly what was written at `ckpt`. */
static void assert_row(const tu_row *row, const cpr_table_schema *t, uint64_t id,
                       uint64_t ckpt)
{
    if (row->table != t->table || row->id != id)
        fail_msg("got row %llu of table %u, expected row %llu of table %u",
                 (unsigned long long)row->id, row->table, (unsigned long long)id,
                 t->table);
    assert_int_equal(row->dim, t->dim);
    assert_int_equal(row->state_dim, t->state_dim);
    for (uint32_t i = 0; i < t->dim + t->state_dim; i++) {
        float want = i < t->dim ? tu_value(t->table, id, ckpt, i)
                                : tu_state(t->table, id, ckpt, i - t->dim);
        if (float_bits(row->values[i]) != float_bits(want))
            fail_msg("table %u row %llu element %u: got %.9g, expected %.9g (the "
                     "value written at checkpoint %llu)", t->table,
                     (unsigned long long)id, i, (double)row->values[i], (double)want,
                     (unsigned long long)ckpt);
    }
}

/* got[0..n) are rows first, first+step, ... of `t`, all as of `ckpt`. */
static void assert_rows(const tu_row *got, const cpr_table_schema *t, uint64_t first,
                        uint64_t step, size_t n, uint64_t ckpt)
{
    for (size_t i = 0; i < n; i++)
        assert_row(&got[i], t, first + i * step, ckpt);
}

/* Collects a blob and notes any gap between chunks. */
typedef struct blob_buf {
    unsigned char *data;
    uint64_t len;
    int gaps;
} blob_buf;

static cpr_status blob_collect(void *ctx, uint64_t offset, const void *data, size_t len)
{
    blob_buf *b = ctx;
    if (offset != b->len)
        b->gaps++;
    b->data = realloc(b->data, b->len + len + 1);
    if (!b->data)
        abort();
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return CPR_OK;
}

static void assert_blob(cpr_store *s, const cpr_part_id *id, const char *name,
                        uint64_t size)
{
    blob_buf b = {0};
    uint64_t reported = UINT64_MAX;
    assert_int_equal(cpr_store_read_blob(s, id, name, &reported, blob_collect, &b),
                     CPR_OK);
    assert_int_equal(reported, size);
    assert_int_equal(b.len, size);
    assert_int_equal(b.gaps, 0);
    for (uint64_t i = 0; i < size; i++)
        assert_int_equal(b.data[i], tu_blob_byte(id->shard, id->checkpoint, i));
    free(b.data);
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
    fixture *f = *state;
    uint64_t ids[10];
    iota(ids, 0, 10);
    cpr_part_spec done = part("job", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(tu_write_part(f->store, &done, ids, 10, 4, 1000, 1), CPR_OK);
    cpr_part_spec unfinished = part("job", 0, 1, 2, CPR_KIND_FULL, one_table, 1);
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
    assert_int_equal(info[0].bytes, 10 * row_bytes(&one_table[0]) + 1000);
    assert_int_equal(info[0].committed, 1);
    assert_int_equal(info[0].consistent, 1);
    free(info);

    tu_rows rows;
    cpr_restore_query q = {.job = "job"};
    cpr_restore_result res;
    assert_int_equal(restore(f->store, &q, &rows, &res), CPR_OK);
    assert_int_equal(rows.n, 10);
    assert_rows(rows.rows, &one_table[0], 0, 1, 10, 1);
    assert_int_equal(res.as_of, 1);
    assert_int_equal(res.rows, 10);
    assert_int_equal(res.bytes, 10 * row_bytes(&one_table[0]));
    tu_rows_free(&rows);
    assert_blob(f->store, &done.id, "dense", 1000);

    /* The part aborted by close can be written afresh. */
    assert_int_equal(tu_write_part(f->store, &unfinished, ids, 10, 10, 700, 1), CPR_OK);
    assert_blob(f->store, &unfinished.id, "dense", 700);

    /* Out-parameters are written only on success. */
    cpr_part_info sentinel;
    info = &sentinel;
    n = 99;
    assert_int_equal(cpr_store_list(f->store, "nosuchjob", &info, &n), CPR_NOT_FOUND);
    assert_ptr_equal(info, &sentinel);
    assert_int_equal(n, 99);
    cpr_restore_query nojob = {.job = "nosuchjob"};
    res.as_of = 4242;
    assert_int_equal(restore(f->store, &nojob, &rows, &res), CPR_NOT_FOUND);
    assert_int_equal(res.as_of, 4242);
    tu_rows_free(&rows);
    uint64_t size = 4242;
    blob_buf none = {0};
    assert_int_equal(cpr_store_read_blob(f->store, &done.id, "nope", &size,
                                         blob_collect, &none), CPR_NOT_FOUND);
    assert_int_equal(size, 4242);
}

static void test_job_names(void **state)
{
    fixture *f = *state;
    char name129[130], name128[129];
    memset(name129, 'x', 129);
    name129[129] = '\0';
    memset(name128, 'y', 128);
    name128[128] = '\0';
    uint64_t ids[3] = {0, 1, 2};

    const char *bad[] = {"", name129, "a/b", "a b", "a\\b", "j\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cpr_part_spec spec = part(bad[i], 0, 1, 1, CPR_KIND_FULL, one_table, 1);
        assert_int_equal(cpr_store_begin(f->store, &spec), CPR_INVALID_ARGUMENT);
    }
    /* Odd but valid names are separate jobs, and "." / ".." stay inside
     * the store directory. */
    const char *good[] = {"..", ".", "a.b-c_D", name128};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cpr_part_spec spec = part(good[i], 0, 1, i + 1, CPR_KIND_FULL, one_table, 1);
        assert_int_equal(tu_write_part(f->store, &spec, ids, 3, 3, 10, 1), CPR_OK);
    }
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        tu_rows rows;
        cpr_restore_query q = {.job = good[i]};
        cpr_restore_result res;
        assert_int_equal(restore(f->store, &q, &rows, &res), CPR_OK);
        assert_int_equal(res.as_of, i + 1);
        assert_int_equal(rows.n, 3);
        assert_rows(rows.rows, &one_table[0], 0, 1, 3, i + 1);
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
    fixture *f = *state;
    const cpr_part_spec good = part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
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
    assert_int_equal(put(f->store, &good.id, &one_table[0], &id0, 1, 1),
                     CPR_FAILED_PRECONDITION);
    write_part(f->store, &good, 0, 5);
}

static void test_begin_dim_mismatch(void **state)
{
    fixture *f = *state;
    cpr_part_spec first = part("j", 0, 2, 1, CPR_KIND_FULL, one_table, 1);
    write_part(f->store, &first, 0, 5);

    const cpr_table_schema dim5[1] = {{1, 1000, 5, 2}};
    const cpr_table_schema dim3[1] = {{1, 1000, 3, 2}};
    cpr_part_spec spec = part("j", 1, 2, 1, CPR_KIND_FULL, dim5, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_INVALID_ARGUMENT);
    spec = part("j", 0, 2, 2, CPR_KIND_FULL, dim3, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_INVALID_ARGUMENT);

    /* A new table may have any dim; another job is independent. */
    const cpr_table_schema more[2] = {{1, 1000, 4, 2}, {2, 50, 7, 0}};
    spec = part("j", 1, 2, 1, CPR_KIND_FULL, more, 2);
    write_part(f->store, &spec, 0, 5);
    spec = part("other", 0, 1, 1, CPR_KIND_FULL, dim5, 1);
    write_part(f->store, &spec, 0, 5);
    /* ... and the new table's dim now binds too. */
    const cpr_table_schema t2_dim6[1] = {{2, 50, 6, 0}};
    spec = part("j", 0, 2, 2, CPR_KIND_FULL, t2_dim6, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_INVALID_ARGUMENT);
}

static void test_begin_exists_and_order(void **state)
{
    fixture *f = *state;
    cpr_part_spec s0 = part("j", 0, 2, 5, CPR_KIND_FULL, one_table, 1);
    write_part(f->store, &s0, 0, 5);
    cpr_part_spec s1 = part("j", 1, 2, 3, CPR_KIND_PRIORITY, one_table, 1);
    write_part(f->store, &s1, 5, 5);

    cpr_part_spec spec = s0;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_ALREADY_EXISTS);
    spec.kind = CPR_KIND_DELTA;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_ALREADY_EXISTS);
    spec = part("j", 0, 2, 3, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);
    spec.id.checkpoint = 4;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);

    /* Shard 1 has only a PRIORITY part: no base for a DELTA. */
    spec = part("j", 1, 2, 4, CPR_KIND_DELTA, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);
    spec.base = 3;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);
    /* Shard 0's FULL is no base for shard 1 either. */
    spec.base = 5;
    spec.id.checkpoint = 6;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);

    spec = part("j", 0, 2, 7, CPR_KIND_DELTA, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_ALREADY_EXISTS);
    spec.kind = CPR_KIND_FULL;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_ALREADY_EXISTS);
    /* The open part was not disturbed by the refused begins. */
    uint64_t ids[2] = {1, 3};
    assert_int_equal(put(f->store, &spec.id, &one_table[0], ids, 2, 7), CPR_OK);
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
    fixture *f = *state;
    const cpr_table_schema t[1] = {{1, 100, 4, 2}};
    cpr_part_spec spec = part("j", 0, 1, 1, CPR_KIND_FULL, t, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    batch_buf b;

    cpr_part_id never = {"j", 0, 2};
    uint64_t ids_never[2] = {40, 41};
    assert_int_equal(put(f->store, &never, t, ids_never, 2, 1), CPR_FAILED_PRECONDITION);

    uint64_t ids_table[2] = {20, 21};
    batch_make(&b, t, ids_table, 2, 1);
    b.batch.table = 7;
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_INVALID_ARGUMENT);
    batch_free(&b);

    uint64_t ids_range[2] = {22, 100};
    assert_int_equal(put(f->store, &spec.id, t, ids_range, 2, 1), CPR_INVALID_ARGUMENT);

    uint64_t ids_values[2] = {23, 24};
    batch_make(&b, t, ids_values, 2, 1);
    b.batch.values_count = 2 * 4 - 1;
    batch_recrc(&b);
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_INVALID_ARGUMENT);
    b.batch.values_count = 4; /* a whole number of rows, but not n of them */
    batch_recrc(&b);
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_INVALID_ARGUMENT);
    batch_free(&b);

    uint64_t ids_state[2] = {25, 26};
    batch_make(&b, t, ids_state, 2, 1);
    b.batch.state_count = 3;
    batch_recrc(&b);
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_INVALID_ARGUMENT);
    b.batch.state = NULL;
    b.batch.state_count = 0;
    batch_recrc(&b);
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_INVALID_ARGUMENT);
    batch_free(&b);

    uint64_t ids_dup[3] = {27, 28, 27};
    assert_int_equal(put(f->store, &spec.id, t, ids_dup, 3, 1), CPR_INVALID_ARGUMENT);

    uint64_t ids_crc[2] = {29, 30};
    batch_make(&b, t, ids_crc, 2, 1);
    b.batch.crc32c ^= 1;
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_CORRUPT);
    b.batch.crc32c ^= 1;
    b.values[5] += 1.0f; /* damaged after the checksum was taken */
    assert_int_equal(cpr_store_put_rows(f->store, &spec.id, &b.batch), CPR_CORRUPT);
    batch_free(&b);

    /* The part is open and holds none of the refused rows. */
    uint64_t ids[10];
    iota(ids, 0, 10);
    assert_int_equal(put(f->store, &spec.id, t, ids, 10, 1), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 10), CPR_OK);
    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    assert_int_equal(restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 10);
    assert_rows(rows.rows, t, 0, 1, 10, 1);
    tu_rows_free(&rows);

    /* Committed, then aborted parts take no more writes. */
    assert_int_equal(put(f->store, &spec.id, t, ids, 10, 1), CPR_FAILED_PRECONDITION);
    assert_int_equal(put_blob_pattern(f->store, &spec.id, "b", 0, 10),
                     CPR_FAILED_PRECONDITION);
    cpr_part_spec gone = part("j", 0, 1, 2, CPR_KIND_FULL, t, 1);
    assert_int_equal(cpr_store_begin(f->store, &gone), CPR_OK);
    assert_int_equal(put(f->store, &gone.id, t, ids, 10, 2), CPR_OK);
    assert_int_equal(cpr_store_abort(f->store, &gone.id), CPR_OK);
    assert_int_equal(put(f->store, &gone.id, t, ids, 10, 2), CPR_FAILED_PRECONDITION);
    assert_int_equal(put_blob_pattern(f->store, &gone.id, "b", 0, 10),
                     CPR_FAILED_PRECONDITION);
    assert_int_equal(cpr_store_commit(f->store, &gone.id, 10), CPR_FAILED_PRECONDITION);
}

static void test_put_blob(void **state)
{
    fixture *f = *state;
    cpr_part_spec spec = part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
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
    iota(ids, 0, 5);
    assert_int_equal(put(f->store, id, &one_table[0], ids, 5, 1), CPR_OK);

    /* Not readable before the commit. */
    blob_buf early = {0};
    assert_int_not_equal(cpr_store_read_blob(f->store, id, "w", NULL, blob_collect,
                                             &early), CPR_OK);
    free(early.data);
    assert_int_equal(cpr_store_commit(f->store, id, 5), CPR_OK);

    for (int reopened = 0; reopened <= 1; reopened++) {
        if (reopened) { /* blob records are decoded from disk */
            cpr_store_close(f->store);
            f->store = NULL;
            assert_int_equal(cpr_store_open(f->path, NULL, &f->store), CPR_OK);
        }
        assert_blob(f->store, id, "w", size_w);
        assert_blob(f->store, id, "opt.state-1_X", 1);
        assert_blob(f->store, id, "empty", 0);
    }
    blob_buf b = {0}; /* `size` may be NULL */
    assert_int_equal(cpr_store_read_blob(f->store, id, "w", NULL, blob_collect, &b),
                     CPR_OK);
    assert_int_equal(b.len, size_w);
    free(b.data);

    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "j", &info, &n), CPR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(info[0].bytes, 5 * row_bytes(&one_table[0]) + size_w + 1);
    free(info);

    cpr_part_id other = *id;
    blob_buf none = {0};
    assert_int_equal(cpr_store_read_blob(f->store, id, "nope", NULL, blob_collect, &none),
                     CPR_NOT_FOUND);
    other.checkpoint = 9;
    assert_int_equal(cpr_store_read_blob(f->store, &other, "w", NULL, blob_collect, &none),
                     CPR_NOT_FOUND);
    other = *id;
    other.shard = 3;
    assert_int_equal(cpr_store_read_blob(f->store, &other, "w", NULL, blob_collect, &none),
                     CPR_NOT_FOUND);
    other = *id;
    other.job = "nojob";
    assert_int_equal(cpr_store_read_blob(f->store, &other, "w", NULL, blob_collect, &none),
                     CPR_NOT_FOUND);
    assert_int_equal(none.len, 0);

    /* A part may carry only blobs. */
    cpr_part_spec blobs = part("j", 0, 1, 2, CPR_KIND_FULL, NULL, 0);
    assert_int_equal(cpr_store_begin(f->store, &blobs), CPR_OK);
    assert_int_equal(put_blob_pattern(f->store, &blobs.id, "only", 0, 100), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &blobs.id, 0), CPR_OK);
    assert_blob(f->store, &blobs.id, "only", 100);
}

static void test_commit_and_abort(void **state)
{
    fixture *f = *state;
    cpr_part_spec spec = part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    const cpr_table_schema *t = &one_table[0];
    uint64_t ids[15];
    iota(ids, 0, 15);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    assert_int_equal(put(f->store, &spec.id, t, ids, 10, 1), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 9), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 11), CPR_INVALID_ARGUMENT);

    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "j", &info, &n), CPR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(info[0].committed, 0);
    free(info);

    /* Still open: send the missing rows, then commit. */
    assert_int_equal(put(f->store, &spec.id, t, ids + 10, 5, 1), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 15), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 15), CPR_FAILED_PRECONDITION);
    cpr_part_id never = {"j", 0, 2};
    assert_int_equal(cpr_store_commit(f->store, &never, 0), CPR_FAILED_PRECONDITION);
    assert_int_equal(cpr_store_abort(f->store, &spec.id), CPR_FAILED_PRECONDITION);
    assert_int_equal(cpr_store_abort(f->store, &never), CPR_NOT_FOUND);
    cpr_part_id nojob = {"nojob", 0, 1};
    assert_int_equal(cpr_store_abort(f->store, &nojob), CPR_NOT_FOUND);

    /* An aborted part leaves no trace in list or restore. */
    cpr_part_spec aborted = part("j", 0, 1, 2, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &aborted), CPR_OK);
    assert_int_equal(put(f->store, &aborted.id, t, ids, 15, 2), CPR_OK);
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
        assert_int_equal(restore(f->store, &q, &rows, &res), CPR_OK);
        assert_int_equal(rows.n, 15);
        assert_rows(rows.rows, t, 0, 1, 15, 1);
        if (as_of == 0)
            assert_int_equal(res.as_of, 1);
        tu_rows_free(&rows);
    }
    blob_buf b = {0};
    assert_int_equal(cpr_store_read_blob(f->store, &aborted.id, "dense", NULL,
                                         blob_collect, &b), CPR_NOT_FOUND);
    assert_int_equal(b.len, 0);
}

static void test_uncommitted_invisible(void **state)
{
    fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    cpr_part_spec first = part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    write_part(f->store, &first, 0, 10);
    cpr_part_spec pending = part("j", 0, 1, 2, CPR_KIND_PRIORITY, one_table, 1);
    uint64_t ids[10] = {0, 1, 2, 3, 4, 10, 11, 12, 13, 14};
    assert_int_equal(cpr_store_begin(f->store, &pending), CPR_OK);
    assert_int_equal(put(f->store, &pending.id, t, ids, 10, 2), CPR_OK);

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
        assert_int_equal(restore(f->store, &q, &rows, &res), CPR_OK);
        assert_int_equal(rows.n, 10);
        assert_rows(rows.rows, t, 0, 1, 10, 1);
        if (as_of == 0)
            assert_int_equal(res.as_of, 1);
        tu_rows_free(&rows);
    }

    assert_int_equal(cpr_store_commit(f->store, &pending.id, 10), CPR_OK);
    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    cpr_restore_result res;
    assert_int_equal(restore(f->store, &q, &rows, &res), CPR_OK);
    assert_int_equal(res.as_of, 2);
    assert_int_equal(rows.n, 15);
    assert_rows(rows.rows, t, 0, 1, 5, 2);
    assert_rows(rows.rows + 5, t, 5, 1, 5, 1);
    assert_rows(rows.rows + 10, t, 10, 1, 5, 2);
    tu_rows_free(&rows);
}

static void test_commit_order(void **state)
{
    fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    uint64_t ids[4] = {0, 1, 2, 3};
    cpr_part_spec p5 = part("j", 0, 1, 5, CPR_KIND_FULL, one_table, 1);
    cpr_part_spec p6 = part("j", 0, 1, 6, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &p5), CPR_OK);
    assert_int_equal(cpr_store_begin(f->store, &p6), CPR_OK);
    assert_int_equal(put(f->store, &p5.id, t, ids, 4, 5), CPR_OK);
    assert_int_equal(put(f->store, &p6.id, t, ids, 4, 6), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &p6.id, 4), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &p5.id, 4), CPR_FAILED_PRECONDITION);
    assert_int_equal(cpr_store_abort(f->store, &p5.id), CPR_OK);

    /* A DELTA whose base stopped being the newest cannot commit. */
    cpr_part_spec delta = part("j", 0, 1, 8, CPR_KIND_DELTA, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &delta), CPR_OK); /* base 6 */
    assert_int_equal(put(f->store, &delta.id, t, ids, 2, 8), CPR_OK);
    cpr_part_spec p7 = part("j", 0, 1, 7, CPR_KIND_FULL, one_table, 1);
    write_part(f->store, &p7, 0, 4);
    assert_int_equal(cpr_store_commit(f->store, &delta.id, 2), CPR_FAILED_PRECONDITION);
    cpr_part_spec old_base = part("j", 0, 1, 9, CPR_KIND_DELTA, one_table, 1);
    old_base.base = 6; /* committed, but 7 is newer */
    assert_int_equal(cpr_store_begin(f->store, &old_base), CPR_OK);
    assert_int_equal(put(f->store, &old_base.id, t, ids, 2, 9), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &old_base.id, 2), CPR_FAILED_PRECONDITION);

    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    cpr_restore_result res;
    assert_int_equal(restore(f->store, &q, &rows, &res), CPR_OK);
    assert_int_equal(res.as_of, 7);
    assert_int_equal(rows.n, 4);
    assert_rows(rows.rows, t, 0, 1, 4, 7);
    tu_rows_free(&rows);
}

static void test_row_sent_twice(void **state)
{
    fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    cpr_part_spec spec = part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    uint64_t ids[10], again[2] = {4, 3};
    iota(ids, 0, 10);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    assert_int_equal(put(f->store, &spec.id, t, ids, 10, 1), CPR_OK);
    assert_int_equal(put(f->store, &spec.id, t, again, 2, 77), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 12), CPR_OK);

    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    assert_int_equal(restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 10);
    assert_rows(rows.rows, t, 0, 1, 3, 1);
    assert_rows(rows.rows + 3, t, 3, 1, 2, 77);
    assert_rows(rows.rows + 5, t, 5, 1, 5, 1);
    tu_rows_free(&rows);
}

/* ---- restore ----------------------------------------------------------- */

static void test_restore_unordered(void **state)
{
    fixture *f = *state;
    const cpr_table_schema *t1 = &two_tables[0], *t2 = &two_tables[1];
    cpr_part_spec spec = part("j", 0, 1, 1, CPR_KIND_FULL, two_tables, 2);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    uint64_t shuffled[6] = {7, 3, 499, 0, 250, 1};
    assert_int_equal(put(f->store, &spec.id, t2, shuffled, 6, 1), CPR_OK);
    for (int b = 9; b >= 0; b--) { /* batches going backwards, each reversed */
        uint64_t ids[10];
        for (int i = 0; i < 10; i++)
            ids[i] = (uint64_t)(b * 10 + 9 - i);
        assert_int_equal(put(f->store, &spec.id, t1, ids, 10, 1), CPR_OK);
    }
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 106), CPR_OK);

    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    cpr_restore_result res;
    assert_int_equal(restore(f->store, &q, &rows, &res), CPR_OK);
    assert_int_equal(rows.n, 106);
    assert_int_equal(res.rows, 106);
    assert_int_equal(res.bytes, 100 * row_bytes(t1) + 6 * row_bytes(t2));
    assert_rows(rows.rows, t1, 0, 1, 100, 1);
    const uint64_t sorted[6] = {0, 1, 3, 7, 250, 499};
    for (size_t i = 0; i < 6; i++)
        assert_row(&rows.rows[100 + i], t2, sorted[i], 1);
    tu_rows_free(&rows);
}

static void test_restore_selection(void **state)
{
    fixture *f = *state;
    const cpr_table_schema three[3] = {{1, 1000, 4, 2}, {2, 500, 3, 0}, {3, 300, 2, 1}};
    const cpr_table_schema declared[3] = {three[2], three[0], three[1]};
    cpr_part_spec spec = part("j", 0, 1, 1, CPR_KIND_FULL, declared, 3);
    write_part(f->store, &spec, 0, 200);
    tu_rows rows;
    cpr_restore_result res;

    const uint32_t t31[2] = {3, 1};
    cpr_restore_query q = {.job = "j", .tables = t31, .n_tables = 2};
    assert_int_equal(restore(f->store, &q, &rows, &res), CPR_OK);
    assert_int_equal(rows.n, 400);
    assert_rows(rows.rows, &three[0], 0, 1, 200, 1);
    assert_rows(rows.rows + 200, &three[2], 0, 1, 200, 1);
    assert_int_equal(res.bytes, 200 * (row_bytes(&three[0]) + row_bytes(&three[2])));
    tu_rows_free(&rows);

    const uint32_t t2[1] = {2};
    const cpr_row_range ranges[3] = {{150, 400}, {10, 20}, {50, 53}};
    cpr_restore_query qr = {.job = "j", .tables = t2, .n_tables = 1,
                            .ranges = ranges, .n_ranges = 3};
    assert_int_equal(restore(f->store, &qr, &rows, &res), CPR_OK);
    assert_int_equal(rows.n, 63);
    assert_int_equal(res.rows, 63);
    assert_rows(rows.rows, &three[1], 10, 1, 10, 1);
    assert_rows(rows.rows + 10, &three[1], 50, 1, 3, 1);
    assert_rows(rows.rows + 13, &three[1], 150, 1, 50, 1);
    tu_rows_free(&rows);

    cpr_restore_query qm = {.job = "j", .tables = t2, .n_tables = 1,
                            .modulo = 4, .remainder = 1};
    assert_int_equal(restore(f->store, &qm, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 50);
    assert_rows(rows.rows, &three[1], 1, 4, 50, 1);
    tu_rows_free(&rows);

    /* Ranges, modulo and every table at once. */
    const cpr_row_range first40[1] = {{0, 40}};
    cpr_restore_query qa = {.job = "j", .ranges = first40, .n_ranges = 1,
                            .modulo = 8, .remainder = 3};
    assert_int_equal(restore(f->store, &qa, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 15);
    for (size_t t = 0; t < 3; t++)
        assert_rows(rows.rows + 5 * t, &three[t], 3, 8, 5, 1);
    tu_rows_free(&rows);
}

/* Versions written by test_restore_as_of beyond the FULL at 1. */
static uint64_t version_as_of(uint64_t id, uint64_t as_of)
{
    static const struct { uint64_t id, ckpt; } newer[] = {
        {5, 2}, {6, 2}, {7, 2}, {40, 2}, {6, 3}, {10, 3}, {45, 3}, {0, 4},
    };
    uint64_t version = 1;
    for (size_t k = 0; k < sizeof newer / sizeof newer[0]; k++) {
        if (newer[k].id == id && newer[k].ckpt <= as_of && newer[k].ckpt > version)
            version = newer[k].ckpt;
    }
    return version;
}

static void test_restore_as_of(void **state)
{
    fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    cpr_part_spec full = part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    write_part(f->store, &full, 0, 50);
    uint64_t prio_ids[4] = {40, 5, 7, 6};
    cpr_part_spec prio = part("j", 0, 1, 2, CPR_KIND_PRIORITY, one_table, 1);
    assert_int_equal(tu_write_part(f->store, &prio, prio_ids, 4, 4, 0, 1), CPR_OK);
    uint64_t delta_ids[3] = {6, 10, 45};
    cpr_part_spec delta = part("j", 0, 1, 3, CPR_KIND_DELTA, one_table, 1);
    delta.base = 1;
    assert_int_equal(tu_write_part(f->store, &delta, delta_ids, 3, 2, 0, 1), CPR_OK);
    uint64_t late_ids[1] = {0};
    cpr_part_spec late = part("j", 0, 1, 4, CPR_KIND_PRIORITY, one_table, 1);
    assert_int_equal(tu_write_part(f->store, &late, late_ids, 1, 1, 0, 1), CPR_OK);

    uint64_t cut = 0;
    assert_int_equal(cpr_store_latest_cut(f->store, "j", &cut), CPR_OK);
    assert_int_equal(cut, 3);

    /* {as_of asked, consistent, resolved id} */
    const uint64_t cases[][3] = {{1, 0, 1}, {2, 0, 2}, {3, 0, 3}, {4, 0, 4},
                                 {0, 0, 4}, {0, 1, 3}, {1, 1, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tu_rows rows;
        cpr_restore_query q = {.job = "j", .as_of = cases[c][0],
                               .consistent = (int)cases[c][1]};
        cpr_restore_result res;
        assert_int_equal(restore(f->store, &q, &rows, &res), CPR_OK);
        assert_int_equal(res.as_of, cases[c][2]);
        assert_int_equal(rows.n, 50);
        for (uint64_t id = 0; id < 50; id++)
            assert_row(&rows.rows[id], t, id, version_as_of(id, cases[c][2]));
        tu_rows_free(&rows);
    }
}

/* Rows 0 and 1 get a version in each of 20 parts: more versions than the
 * restore steps over before it seeks. */
static void test_restore_many_versions(void **state)
{
    fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    cpr_part_spec full = part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    write_part(f->store, &full, 0, 10);
    for (uint64_t ckpt = 2; ckpt <= 21; ckpt++) {
        cpr_part_spec prio = part("j", 0, 1, ckpt, CPR_KIND_PRIORITY, one_table, 1);
        write_part(f->store, &prio, 0, 2);
    }
    const uint64_t as_ofs[4] = {0, 21, 10, 1};
    for (size_t c = 0; c < 4; c++) {
        uint64_t hot = as_ofs[c] ? as_ofs[c] : 21;
        tu_rows rows;
        cpr_restore_query q = {.job = "j", .as_of = as_ofs[c], .batch_rows = 3};
        assert_int_equal(restore(f->store, &q, &rows, NULL), CPR_OK);
        assert_int_equal(rows.n, 10);
        assert_rows(rows.rows, t, 0, 1, 2, hot);
        assert_rows(rows.rows + 2, t, 2, 1, 8, 1);
        tu_rows_free(&rows);
        q.modulo = 2;
        q.remainder = 1;
        assert_int_equal(restore(f->store, &q, &rows, NULL), CPR_OK);
        assert_int_equal(rows.n, 5);
        assert_row(&rows.rows[0], t, 1, hot);
        assert_rows(rows.rows + 1, t, 3, 2, 4, 1);
        tu_rows_free(&rows);
    }
}

/* Watches batch sizes and order, and stops on request. */
typedef struct batch_probe {
    size_t calls, max_n, rows;
    size_t stop_at_call;     /* 1-based call that returns stop_status; 0: none */
    cpr_status stop_status;
    uint32_t last_table;
    uint64_t last_id;
    int out_of_order;
} batch_probe;

static cpr_status probe_batch(void *ctx, const cpr_row_batch *batch)
{
    batch_probe *p = ctx;
    p->calls++;
    if (batch->n > p->max_n)
        p->max_n = batch->n;
    for (size_t i = 0; i < batch->n; i++) {
        int before = batch->table < p->last_table ||
                     (batch->table == p->last_table && batch->ids[i] <= p->last_id);
        if (p->rows > 0 && before)
            p->out_of_order++;
        p->last_table = batch->table;
        p->last_id = batch->ids[i];
        p->rows++;
    }
    if (cpr_crc32c_rows(batch->ids, batch->n, batch->values, batch->values_count,
                        batch->state, batch->state_count) != batch->crc32c)
        p->out_of_order++;
    return p->calls == p->stop_at_call ? p->stop_status : CPR_OK;
}

static void test_restore_batches_and_errors(void **state)
{
    fixture *f = *state;
    cpr_part_spec spec = part("j", 0, 1, 1, CPR_KIND_FULL, two_tables, 2);
    write_part(f->store, &spec, 0, 300);

    batch_probe p = {0};
    cpr_restore_query q = {.job = "j", .batch_rows = 7};
    cpr_restore_result res;
    assert_int_equal(cpr_store_restore(f->store, &q, probe_batch, &p, &res), CPR_OK);
    assert_int_equal(p.rows, 600);
    assert_int_equal(res.rows, 600);
    assert_true(p.max_n <= 7);
    assert_true(p.calls >= 600 / 7);
    assert_int_equal(p.out_of_order, 0);

    batch_probe all = {0};
    q.batch_rows = 0; /* 4096 */
    assert_int_equal(cpr_store_restore(f->store, &q, probe_batch, &all, NULL), CPR_OK);
    assert_int_equal(all.rows, 600);
    assert_true(all.max_n <= 4096);
    assert_int_equal(all.out_of_order, 0);

    batch_probe stop = {.stop_at_call = 3, .stop_status = CPR_UNAVAILABLE};
    q.batch_rows = 10;
    assert_int_equal(cpr_store_restore(f->store, &q, probe_batch, &stop, &res),
                     CPR_UNAVAILABLE);
    assert_int_equal(stop.calls, 3); /* nothing after the refusal */
    assert_true(stop.rows <= 30);

    cpr_restore_query unknown = {.job = "nojob"};
    batch_probe none = {0};
    assert_int_equal(cpr_store_restore(f->store, &unknown, probe_batch, &none, NULL),
                     CPR_NOT_FOUND);
    unknown.consistent = 1;
    assert_int_equal(cpr_store_restore(f->store, &unknown, probe_batch, &none, NULL),
                     CPR_NOT_FOUND);
    assert_int_equal(none.calls, 0);
}

static void assert_cut(cpr_store *s, const char *job, cpr_status want, uint64_t cut)
{
    uint64_t got = 12345;
    assert_int_equal(cpr_store_latest_cut(s, job, &got), want);
    assert_int_equal(got, want == CPR_OK ? cut : 12345);
}

/* The parts test_latest_cut writes, as cpr_store_list must report them. */
static void assert_cut_parts(cpr_store *s)
{
    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(s, "j", &info, &n), CPR_OK);
    assert_int_equal(n, 7);
    const struct { uint64_t ckpt; uint32_t shard; cpr_kind kind; uint64_t base;
                   int consistent; } want[7] = {
        {1, 0, CPR_KIND_FULL, 0, 1}, {1, 1, CPR_KIND_FULL, 0, 1},
        {2, 0, CPR_KIND_PRIORITY, 0, 0}, {2, 1, CPR_KIND_PRIORITY, 0, 0},
        {3, 0, CPR_KIND_DELTA, 1, 1}, {3, 1, CPR_KIND_DELTA, 1, 1},
        {4, 0, CPR_KIND_DELTA, 3, 1},
    };
    for (size_t i = 0; i < 7; i++) {
        assert_int_equal(info[i].checkpoint, want[i].ckpt);
        assert_int_equal(info[i].shard, want[i].shard);
        assert_int_equal(info[i].kind, want[i].kind);
        assert_int_equal(info[i].base, want[i].base);
        assert_int_equal(info[i].consistent, want[i].consistent);
        assert_int_equal(info[i].committed, 1);
        assert_int_equal(info[i].num_shards, 2);
    }
    free(info);
}

static void test_latest_cut(void **state)
{
    fixture *f = *state;
    cpr_part_spec spec;
    assert_cut(f->store, "j", CPR_NOT_FOUND, 0);

    spec = part("j", 0, 2, 1, CPR_KIND_FULL, one_table, 1);
    write_part(f->store, &spec, 0, 5);
    assert_cut(f->store, "j", CPR_NOT_FOUND, 0);
    batch_probe none = {0};
    cpr_restore_query q = {.job = "j", .consistent = 1};
    assert_int_equal(cpr_store_restore(f->store, &q, probe_batch, &none, NULL),
                     CPR_NOT_FOUND);
    assert_int_equal(none.calls, 0);

    spec = part("j", 1, 2, 1, CPR_KIND_FULL, one_table, 1);
    write_part(f->store, &spec, 5, 5);
    assert_cut(f->store, "j", CPR_OK, 1);
    for (uint32_t s = 0; s < 2; s++) {
        spec = part("j", s, 2, 2, CPR_KIND_PRIORITY, one_table, 1);
        write_part(f->store, &spec, s * 5, 2);
    }
    assert_cut(f->store, "j", CPR_OK, 1);
    for (uint32_t s = 0; s < 2; s++) {
        spec = part("j", s, 2, 3, CPR_KIND_DELTA, one_table, 1);
        write_part(f->store, &spec, s * 5 + 1, 2);
    }
    assert_cut(f->store, "j", CPR_OK, 3);
    spec = part("j", 0, 2, 4, CPR_KIND_DELTA, one_table, 1);
    write_part(f->store, &spec, 4, 1);
    assert_cut(f->store, "j", CPR_OK, 3);

    /* The same answers after the catalog is rebuilt from disk. */
    for (int reopened = 0; reopened <= 1; reopened++) {
        if (reopened) {
            cpr_store_close(f->store);
            f->store = NULL;
            assert_int_equal(cpr_store_open(f->path, NULL, &f->store), CPR_OK);
            assert_cut(f->store, "j", CPR_OK, 3);
        }
        assert_cut_parts(f->store);
        tu_rows rows;
        cpr_restore_result res;
        assert_int_equal(restore(f->store, &q, &rows, &res), CPR_OK);
        assert_int_equal(res.as_of, 3);
        assert_int_equal(rows.n, 10);
        const uint64_t version[10] = {2, 3, 3, 1, 1, 2, 3, 3, 1, 1};
        for (uint64_t id = 0; id < 10; id++)
            assert_row(&rows.rows[id], &one_table[0], id, version[id]);
        tu_rows_free(&rows);
    }

    /* An explicit base must be a committed FULL/DELTA of the shard. */
    spec = part("j", 1, 2, 5, CPR_KIND_DELTA, one_table, 1);
    spec.base = 4; /* only shard 0 has 4 */
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);
    spec.base = 2; /* PRIORITY */
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);
    spec.base = 3;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
}

/* ---- stats, verify, gc, concurrency -------------------------------------- */

static void test_stats(void **state)
{
    fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    cpr_store_stats before, after;
    assert_int_equal(cpr_store_stats_get(f->store, &before), CPR_OK);
    assert_int_equal(before.parts_committed, 0);
    assert_int_equal(before.jobs, 0);

    cpr_part_spec spec = part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    uint64_t ids[10];
    iota(ids, 0, 10);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    assert_int_equal(put(f->store, &spec.id, t, ids, 10, 1), CPR_OK);
    assert_int_equal(put_blob_pattern(f->store, &spec.id, "dense", 0, 100), CPR_OK);
    assert_int_equal(cpr_store_stats_get(f->store, &after), CPR_OK);
    assert_int_equal(after.parts_open, before.parts_open + 1);
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 10), CPR_OK);

    cpr_part_id never = {"j", 0, 9};
    assert_int_equal(cpr_store_commit(f->store, &never, 0), CPR_FAILED_PRECONDITION);
    /* A refused begin leaves the store unchanged: no job "ghost". */
    cpr_part_spec ghost = part("ghost", 0, 1, 1, CPR_KIND_DELTA, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &ghost), CPR_FAILED_PRECONDITION);
    batch_buf b;
    cpr_part_spec next = part("j", 0, 1, 2, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &next), CPR_OK);
    batch_make(&b, t, ids, 2, 2);
    b.batch.crc32c ^= 1;
    assert_int_equal(cpr_store_put_rows(f->store, &next.id, &b.batch), CPR_CORRUPT);
    batch_free(&b);
    assert_int_equal(cpr_store_abort(f->store, &next.id), CPR_OK);

    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    assert_int_equal(restore(f->store, &q, &rows, NULL), CPR_OK);
    tu_rows_free(&rows);

    assert_int_equal(cpr_store_stats_get(f->store, &after), CPR_OK);
    assert_int_equal(after.parts_committed, 1);
    assert_int_equal(after.parts_open, 0);
    assert_int_equal(after.rows_in - before.rows_in, 10);
    assert_int_equal(after.bytes_in - before.bytes_in, 10 * row_bytes(t) + 100);
    assert_int_equal(after.rows_out - before.rows_out, 10);
    assert_int_equal(after.bytes_out - before.bytes_out, 10 * row_bytes(t));
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

static void count_problem(void *ctx, const char *what, const char *where)
{
    (void)what;
    (void)where;
    (*(int *)ctx)++;
}

/* Versions written by test_verify_and_gc: FULL 1 of rows 0-19, DELTA 2 of
 * rows 0-4, DELTA 3 of rows 3-7. */
static uint64_t chain_version(uint64_t id, uint64_t as_of)
{
    if (as_of >= 3 && id >= 3 && id <= 7)
        return 3;
    return as_of >= 2 && id <= 4 ? 2 : 1;
}

static void assert_chain_as_of(cpr_store *s, uint64_t as_of)
{
    tu_rows rows;
    cpr_restore_query q = {.job = "j", .as_of = as_of};
    cpr_restore_result res;
    assert_int_equal(restore(s, &q, &rows, &res), CPR_OK);
    assert_int_equal(res.as_of, as_of);
    assert_int_equal(rows.n, 40);
    for (size_t t = 0; t < 2; t++)
        for (uint64_t id = 0; id < 20; id++)
            assert_row(&rows.rows[t * 20 + id], &two_tables[t], id,
                       chain_version(id, as_of));
    tu_rows_free(&rows);
}

static void test_verify_and_gc(void **state)
{
    fixture *f = *state;
    const uint64_t firsts[3] = {0, 0, 3};
    const size_t counts[3] = {20, 5, 5};
    for (uint64_t ckpt = 1; ckpt <= 3; ckpt++) {
        cpr_part_spec spec = part("j", 0, 1, ckpt, ckpt == 1 ? CPR_KIND_FULL : CPR_KIND_DELTA,
                                  two_tables, 2);
        uint64_t ids[20];
        iota(ids, firsts[ckpt - 1], counts[ckpt - 1]);
        assert_int_equal(tu_write_part(f->store, &spec, ids, counts[ckpt - 1], 8,
                                       ckpt < 3 ? 3000 : 0, 1), CPR_OK);
    }
    int problems = 0;
    cpr_verify_report vr;
    assert_int_equal(cpr_store_verify(f->store, "j", count_problem, &problems, &vr),
                     CPR_OK);
    assert_int_equal(problems, 0);
    assert_int_equal(vr.problems, 0);
    assert_int_equal(vr.rows_checked, 2 * (20 + 5 + 5));
    assert_int_equal(vr.blobs_checked, 2);
    assert_true(vr.bytes_checked >= 2 * 3000);
    assert_int_equal(cpr_store_verify(f->store, NULL, NULL, NULL, NULL), CPR_OK);

    /* Default retention (2 cuts) keeps states 2 and 3; versions 1 of rows
     * 0-4 (both tables) are needed by neither. */
    cpr_gc_report gr;
    assert_int_equal(cpr_store_gc(f->store, "j", 0, &gr), CPR_OK);
    assert_int_equal(gr.floor, 2);
    assert_int_equal(gr.versions_removed, 10);
    assert_int_equal(gr.uncommitted_removed, 0);
    assert_chain_as_of(f->store, 2);
    assert_chain_as_of(f->store, 3);
    /* keep=1: state 3 only; versions 2 of rows 3-4 and 1 of rows 5-7 go. */
    assert_int_equal(cpr_store_gc(f->store, NULL, 1, &gr), CPR_OK);
    assert_int_equal(gr.floor, 3);
    assert_int_equal(gr.versions_removed, 10);

    for (int reopened = 0; reopened <= 1; reopened++) {
        if (reopened) {
            cpr_store_close(f->store);
            f->store = NULL;
            assert_int_equal(cpr_store_open(f->path, NULL, &f->store), CPR_OK);
        }
        assert_cut(f->store, "j", CPR_OK, 3);
        cpr_part_info *info = NULL;
        size_t n = 0;
        assert_int_equal(cpr_store_list(f->store, "j", &info, &n), CPR_OK);
        assert_int_equal(n, 1);
        assert_int_equal(info[0].checkpoint, 3);
        assert_int_equal(info[0].consistent, 1);
        free(info);
        assert_chain_as_of(f->store, 3);
        tu_rows rows;
        cpr_restore_query old = {.job = "j", .as_of = 2};
        assert_int_equal(restore(f->store, &old, &rows, NULL), CPR_FAILED_PRECONDITION);
        tu_rows_free(&rows);
        cpr_part_id id1 = {"j", 0, 1};
        blob_buf b = {0};
        assert_int_equal(cpr_store_read_blob(f->store, &id1, "dense", NULL,
                                             blob_collect, &b), CPR_NOT_FOUND);
    }
}

enum { N_THREADS = 8, SHARD_ROWS = 50, THREAD_CKPTS = 3, THREAD_BLOB = 5000 };

typedef struct shard_writer {
    cpr_store *store;
    uint32_t shard;
    cpr_status st;
} shard_writer;

/* No cmocka asserts here: they are not thread-safe. */
static void *write_shard(void *arg)
{
    shard_writer *w = arg;
    uint64_t ids[SHARD_ROWS];
    iota(ids, (uint64_t)w->shard * SHARD_ROWS, SHARD_ROWS);
    w->st = CPR_OK;
    for (uint64_t ckpt = 1; w->st == CPR_OK && ckpt <= THREAD_CKPTS; ckpt++) {
        cpr_part_spec spec = part("conc", w->shard, N_THREADS, ckpt, CPR_KIND_FULL,
                                  two_tables, 2);
        w->st = tu_write_part(w->store, &spec, ids, SHARD_ROWS, 16, THREAD_BLOB, 1);
    }
    return NULL;
}

/* A restore running while shards commit: every row delivered must be an
 * exact copy of one committed version, none newer than the resolved id. */
typedef struct shard_reader {
    cpr_store *store;
    atomic_int *writers_done;
    uint64_t restores, rows, bad_rows;
    uint64_t newest_seen;   /* newest version seen in the current restore */
    cpr_status bad_status;  /* first unexpected status; CPR_OK if none */
} shard_reader;

static int row_is_version(const cpr_table_schema *t, uint64_t id, const float *values,
                          const float *state_values, uint64_t ckpt)
{
    for (uint32_t i = 0; i < t->dim; i++)
        if (float_bits(values[i]) != float_bits(tu_value(t->table, id, ckpt, i)))
            return 0;
    for (uint32_t i = 0; i < t->state_dim; i++)
        if (float_bits(state_values[i]) != float_bits(tu_state(t->table, id, ckpt, i)))
            return 0;
    return 1;
}

static cpr_status check_any_version(void *ctx, const cpr_row_batch *batch)
{
    shard_reader *r = ctx;
    const cpr_table_schema *t = &two_tables[batch->table == 1 ? 0 : 1];
    if (batch->values_count != batch->n * t->dim ||
        batch->state_count != batch->n * t->state_dim) {
        r->bad_rows += batch->n;
        return CPR_OK;
    }
    for (size_t i = 0; i < batch->n; i++) {
        uint64_t version = 0;
        for (uint64_t c = 1; !version && c <= THREAD_CKPTS; c++)
            if (row_is_version(t, batch->ids[i], batch->values + i * t->dim,
                               t->state_dim ? batch->state + i * t->state_dim : NULL, c))
                version = c;
        r->bad_rows += version == 0;
        if (version > r->newest_seen)
            r->newest_seen = version;
        r->rows++;
    }
    return CPR_OK;
}

static void *read_while_writing(void *arg)
{
    shard_reader *r = arg;
    int last = 0;
    while (!last) {
        last = atomic_load(r->writers_done); /* one more pass after the end */
        cpr_restore_query q = {.job = "conc", .batch_rows = 37};
        cpr_restore_result res = {0};
        r->newest_seen = 0;
        cpr_status st = cpr_store_restore(r->store, &q, check_any_version, r, &res);
        if (st == CPR_OK && r->newest_seen > res.as_of)
            r->bad_rows++;
        if (st != CPR_OK && st != CPR_NOT_FOUND && r->bad_status == CPR_OK)
            r->bad_status = st;
        cpr_part_info *info = NULL;
        size_t n = 0;
        st = cpr_store_list(r->store, "conc", &info, &n);
        if (st != CPR_OK && st != CPR_NOT_FOUND && r->bad_status == CPR_OK)
            r->bad_status = st;
        free(info);
        r->restores++;
    }
    return NULL;
}

static void test_concurrent_shards(void **state)
{
    fixture *f = *state;
    enum { N_READERS = 2 };
    pthread_t threads[N_THREADS], reader_threads[N_READERS];
    shard_writer writers[N_THREADS];
    shard_reader readers[N_READERS];
    atomic_int writers_done = 0;
    for (int i = 0; i < N_READERS; i++) {
        readers[i] = (shard_reader){.store = f->store, .writers_done = &writers_done};
        assert_int_equal(pthread_create(&reader_threads[i], NULL, read_while_writing,
                                        &readers[i]), 0);
    }
    for (uint32_t s = 0; s < N_THREADS; s++) {
        writers[s] = (shard_writer){.store = f->store, .shard = s, .st = CPR_INTERNAL};
        assert_int_equal(pthread_create(&threads[s], NULL, write_shard, &writers[s]), 0);
    }
    for (uint32_t s = 0; s < N_THREADS; s++)
        assert_int_equal(pthread_join(threads[s], NULL), 0);
    atomic_store(&writers_done, 1);
    for (int i = 0; i < N_READERS; i++) {
        assert_int_equal(pthread_join(reader_threads[i], NULL), 0);
        assert_int_equal(readers[i].bad_status, CPR_OK);
        assert_int_equal(readers[i].bad_rows, 0);
        assert_true(readers[i].restores >= 1);
    }
    for (uint32_t s = 0; s < N_THREADS; s++)
        assert_int_equal(writers[s].st, CPR_OK);
    assert_cut(f->store, "conc", CPR_OK, THREAD_CKPTS);
    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "conc", &info, &n), CPR_OK);
    assert_int_equal(n, N_THREADS * THREAD_CKPTS);
    free(info);

    for (uint32_t s = 0; s < N_THREADS; s++) {
        for (uint64_t as_of = 2; as_of <= THREAD_CKPTS; as_of++) {
            cpr_row_range range = {s * SHARD_ROWS, (s + 1) * SHARD_ROWS};
            cpr_restore_query q = {.job = "conc", .as_of = as_of,
                                   .ranges = &range, .n_ranges = 1};
            tu_rows rows;
            assert_int_equal(restore(f->store, &q, &rows, NULL), CPR_OK);
            assert_int_equal(rows.n, 2 * SHARD_ROWS);
            assert_rows(rows.rows, &two_tables[0], range.begin, 1, SHARD_ROWS, as_of);
            assert_rows(rows.rows + SHARD_ROWS, &two_tables[1], range.begin, 1,
                        SHARD_ROWS, as_of);
            tu_rows_free(&rows);
        }
        cpr_part_id id = {"conc", s, THREAD_CKPTS};
        assert_blob(f->store, &id, "dense", THREAD_BLOB);
    }
}

/* Several threads appending disjoint rows to one part at once. */
typedef struct part_putter {
    cpr_store *store;
    const cpr_part_id *id;
    uint64_t first;        /* rows first, first + 4, first + 8, ... */
    cpr_status st;
} part_putter;

enum { PUTTERS = 4, ROWS_PER_PUTTER = 200, PUT_BATCH = 10 };

static void *put_interleaved(void *arg)
{
    part_putter *p = arg;
    const cpr_table_schema *t = &one_table[0];
    float values[PUT_BATCH * 4], state_values[PUT_BATCH * 2];
    uint64_t ids[PUT_BATCH];
    p->st = CPR_OK;
    for (size_t off = 0; p->st == CPR_OK && off < ROWS_PER_PUTTER; off += PUT_BATCH) {
        for (size_t i = 0; i < PUT_BATCH; i++)
            ids[i] = p->first + (off + i) * PUTTERS;
        cpr_row_batch batch;
        tu_fill_batch(&batch, t->table, ids, PUT_BATCH, t->dim, t->state_dim, 1,
                      values, state_values);
        p->st = cpr_store_put_rows(p->store, p->id, &batch);
    }
    return NULL;
}

static void test_concurrent_same_part(void **state)
{
    fixture *f = *state;
    cpr_part_spec spec = part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    pthread_t threads[PUTTERS];
    part_putter putters[PUTTERS];
    for (int i = 0; i < PUTTERS; i++) {
        putters[i] = (part_putter){.store = f->store, .id = &spec.id, .first = (uint64_t)i,
                                   .st = CPR_INTERNAL};
        assert_int_equal(pthread_create(&threads[i], NULL, put_interleaved, &putters[i]), 0);
    }
    for (int i = 0; i < PUTTERS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        assert_int_equal(putters[i].st, CPR_OK);
    }
    assert_int_equal(cpr_store_commit(f->store, &spec.id, PUTTERS * ROWS_PER_PUTTER),
                     CPR_OK);
    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    assert_int_equal(restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, PUTTERS * ROWS_PER_PUTTER);
    assert_rows(rows.rows, &one_table[0], 0, 1, rows.n, 1);
    tu_rows_free(&rows);
}

#define STORE_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

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
        STORE_TEST(test_uncommitted_invisible),
        STORE_TEST(test_commit_order),
        STORE_TEST(test_row_sent_twice),
        STORE_TEST(test_restore_unordered),
        STORE_TEST(test_restore_selection),
        STORE_TEST(test_restore_as_of),
        STORE_TEST(test_restore_many_versions),
        STORE_TEST(test_restore_batches_and_errors),
        STORE_TEST(test_latest_cut),
        STORE_TEST(test_stats),
        STORE_TEST(test_verify_and_gc),
        STORE_TEST(test_concurrent_shards),
        STORE_TEST(test_concurrent_same_part),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
