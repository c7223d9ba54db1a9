/* SPDX-License-Identifier: Apache-2.0 */
/* Implementation of testutil.h. */
#define _XOPEN_SOURCE 700
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpr/crc32c.h"
#include "testutil.h"

char *tu_mkdtemp(const char *prefix)
{
    const char *base = getenv("TMPDIR");
    char *path = malloc(4096);
    if (!path)
        abort();
    snprintf(path, 4096, "%s/%s.XXXXXX", base && *base ? base : "/tmp", prefix);
    if (!mkdtemp(path)) {
        perror("mkdtemp");
        abort();
    }
    return path;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void tu_rmtree(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static _Thread_local uint64_t files_counted;

static int count_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    (void)sb;
    (void)ftw;
    files_counted += flag != FTW_D && flag != FTW_DP && flag != FTW_DNR;
    return 0;
}

uint64_t tu_count_files(const char *path)
{
    files_counted = 0;
    nftw(path, count_one, 16, FTW_PHYS);
    return files_counted;
}

void tu_flip_byte(const char *path, uint64_t offset)
{
    int fd = open(path, O_RDWR);
    unsigned char byte;
    if (fd < 0)
        fail_msg("cannot open %s to damage it", path);
    assert_int_equal(pread(fd, &byte, 1, (off_t)offset), 1);
    byte ^= 0xff;
    assert_int_equal(pwrite(fd, &byte, 1, (off_t)offset), 1);
    assert_int_equal(fsync(fd), 0);
    close(fd);
}

static uint32_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

float tu_value(uint32_t table, uint64_t row, uint64_t ckpt, uint32_t i)
{
    /* Chained mixing: every field reaches every bit, whatever its size. */
    uint64_t h = mix(mix(mix(mix(table) ^ row) ^ ckpt) ^ i);
    return (float)(h % 2000003u) / 1000.0f - 1000.0f;
}

float tu_state(uint32_t table, uint64_t row, uint64_t ckpt, uint32_t i)
{
    return tu_value(table ^ 0x5a5a, row, ckpt, i + 7777);
}

unsigned char tu_blob_byte(uint32_t shard, uint64_t ckpt, uint64_t i)
{
    return (unsigned char)(mix(((uint64_t)shard << 56) ^ (ckpt << 40) ^ (i / 7)) + i);
}

void tu_fill_batch(cpr_row_batch *batch, uint32_t table, const uint64_t *ids,
                   size_t n, uint32_t dim, uint32_t state_dim, uint64_t ckpt,
                   float *values, float *state)
{
    for (size_t r = 0; r < n; r++) {
        for (uint32_t i = 0; i < dim; i++)
            values[r * dim + i] = tu_value(table, ids[r], ckpt, i);
        for (uint32_t i = 0; i < state_dim; i++)
            state[r * state_dim + i] = tu_state(table, ids[r], ckpt, i);
    }
    memset(batch, 0, sizeof *batch);
    batch->table = table;
    batch->n = n;
    batch->ids = ids;
    batch->values = values;
    batch->values_count = n * dim;
    batch->state = state_dim ? state : NULL;
    batch->state_count = n * state_dim;
    batch->crc32c = cpr_crc32c_rows(ids, n, values, n * dim, batch->state,
                                    n * state_dim);
}

static cpr_status write_blob(cpr_store *store, const cpr_part_spec *spec,
                             size_t blob_bytes)
{
    cpr_status st = CPR_OK;
    size_t chunk = 300000; /* deliberately not a multiple of the block size */
    unsigned char *buf = malloc(chunk);
    if (!buf)
        abort();
    for (size_t off = 0; st == CPR_OK && off < blob_bytes; off += chunk) {
        size_t len = blob_bytes - off < chunk ? blob_bytes - off : chunk;
        for (size_t i = 0; i < len; i++)
            buf[i] = tu_blob_byte(spec->id.shard, spec->id.checkpoint, off + i);
        st = cpr_store_put_blob(store, &spec->id, "dense", off, buf, len,
                                cpr_crc32c(0, buf, len));
    }
    free(buf);
    return st;
}

cpr_status tu_write_part(cpr_store *store, const cpr_part_spec *spec,
                         const uint64_t *ids, size_t n, size_t batch_rows,
                         size_t blob_bytes, int commit)
{
    cpr_status st = cpr_store_begin(store, spec);
    uint64_t sent = 0;
    for (size_t t = 0; st == CPR_OK && t < spec->n_tables; t++) {
        const cpr_table_schema *ts = &spec->tables[t];
        float *values = malloc(batch_rows * ts->dim * sizeof(float));
        float *state = malloc(batch_rows * (ts->state_dim + 1) * sizeof(float));
        if (!values || !state)
            abort();
        for (size_t off = 0; st == CPR_OK && off < n; off += batch_rows) {
            size_t len = n - off < batch_rows ? n - off : batch_rows;
            cpr_row_batch batch;
            tu_fill_batch(&batch, ts->table, ids + off, len, ts->dim, ts->state_dim,
                          spec->id.checkpoint, values, state);
            st = cpr_store_put_rows(store, &spec->id, &batch);
            sent += len;
        }
        free(values);
        free(state);
    }
    if (st == CPR_OK && blob_bytes)
        st = write_blob(store, spec, blob_bytes);
    if (st == CPR_OK && commit)
        st = cpr_store_commit(store, &spec->id, sent);
    return st;
}

cpr_status tu_collect(void *ctx, const cpr_row_batch *batch)
{
    tu_rows *rows = ctx;
    uint32_t dim = (uint32_t)(batch->values_count / (batch->n ? batch->n : 1));
    uint32_t sdim = (uint32_t)(batch->state_count / (batch->n ? batch->n : 1));
    if (cpr_crc32c_rows(batch->ids, batch->n, batch->values, batch->values_count,
                        batch->state, batch->state_count) != batch->crc32c)
        return CPR_CORRUPT;
    for (size_t r = 0; r < batch->n; r++) {
        if (rows->n == rows->cap) {
            rows->cap = rows->cap ? rows->cap * 2 : 1024;
            rows->rows = realloc(rows->rows, rows->cap * sizeof *rows->rows);
            if (!rows->rows)
                abort();
        }
        tu_row *row = &rows->rows[rows->n++];
        row->table = batch->table;
        row->id = batch->ids[r];
        row->dim = dim;
        row->state_dim = sdim;
        row->values = malloc((dim + sdim + 1) * sizeof(float));
        if (!row->values)
            abort();
        memcpy(row->values, batch->values + r * dim, dim * sizeof(float));
        if (sdim)
            memcpy(row->values + dim, batch->state + r * sdim, sdim * sizeof(float));
    }
    return CPR_OK;
}

void tu_rows_free(tu_rows *rows)
{
    for (size_t i = 0; i < rows->n; i++)
        free(rows->rows[i].values);
    free(rows->rows);
    memset(rows, 0, sizeof *rows);
}

/* ---- cmocka helpers for store tests --------------------------------------- */

int tu_store_teardown(void **state)
{
    tu_store_fixture *f = *state;
    cpr_store_close(f->store);
    tu_rmtree(f->dir);
    free(f->path);
    free(f->dir);
    free(f);
    return 0;
}

static int store_setup(void **state, const cpr_store_options *o)
{
    tu_store_fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    *state = f;
    f->dir = tu_mkdtemp("cpr-store");
    size_t len = strlen(f->dir) + sizeof "/store";
    f->path = malloc(len);
    if (f->path) {
        snprintf(f->path, len, "%s/store", f->dir); /* open must create it */
        if (cpr_store_open(f->path, o, &f->store) == CPR_OK)
            return 0;
        fprintf(stderr, "cpr_store_open: %s\n", cpr_errmsg());
    }
    tu_store_teardown(state);
    return -1;
}

int tu_store_setup(void **state)
{
    return store_setup(state, NULL);
}

int tu_store_setup_buffered(void **state)
{
    cpr_store_options o = {.buffered_reads = 1};
    return store_setup(state, &o);
}

uint64_t tu_row_bytes(const cpr_table_schema *t)
{
    return 8 + 4 * (uint64_t)(t->dim + t->state_dim);
}

cpr_part_spec tu_part(const char *job, uint32_t shard, uint32_t num_shards,
                      uint64_t ckpt, cpr_kind kind, const cpr_table_schema *tables,
                      size_t n_tables)
{
    cpr_part_spec spec = {
        .id = {job, shard, ckpt}, .kind = kind, .step = ckpt * 100,
        .num_shards = num_shards, .tables = tables, .n_tables = n_tables,
    };
    return spec;
}

void tu_iota(uint64_t *ids, uint64_t first, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = first + i;
}

void tu_batch_make(tu_batch *b, const cpr_table_schema *t, const uint64_t *ids,
                   size_t n, uint64_t ckpt)
{
    b->values = malloc((n * t->dim + 1) * sizeof(float));
    b->state = malloc((n * t->state_dim + 1) * sizeof(float));
    assert_non_null(b->values);
    assert_non_null(b->state);
    tu_fill_batch(&b->batch, t->table, ids, n, t->dim, t->state_dim, ckpt,
                  b->values, b->state);
}

void tu_batch_free(tu_batch *b)
{
    free(b->values);
    free(b->state);
}

cpr_status tu_put_rows(cpr_store *s, const cpr_part_id *id, const cpr_table_schema *t,
                       const uint64_t *ids, size_t n, uint64_t value_ckpt)
{
    tu_batch b;
    tu_batch_make(&b, t, ids, n, value_ckpt);
    cpr_status st = cpr_store_put_rows(s, id, &b.batch);
    tu_batch_free(&b);
    return st;
}

void tu_write_part_ok(cpr_store *s, const cpr_part_spec *spec, uint64_t first,
                      size_t n)
{
    uint64_t *ids = malloc((n + 1) * sizeof *ids);
    assert_non_null(ids);
    tu_iota(ids, first, n);
    cpr_status st = tu_write_part(s, spec, ids, n, 16, 0, 1);
    if (st)
        fprintf(stderr, "tu_write_part_ok: %s\n", cpr_errmsg());
    assert_int_equal(st, CPR_OK);
    free(ids);
}

cpr_status tu_restore(cpr_store *s, const cpr_restore_query *q, tu_rows *rows,
                      cpr_restore_result *res)
{
    memset(rows, 0, sizeof *rows);
    return cpr_store_restore(s, q, tu_collect, rows, res);
}

uint32_t tu_float_bits(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits;
}

void tu_assert_row(const tu_row *row, const cpr_table_schema *t, uint64_t id,
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
        if (tu_float_bits(row->values[i]) != tu_float_bits(want))
            fail_msg("table %u row %llu element %u: got %.9g, expected %.9g (the "
                     "value written at checkpoint %llu)", t->table,
                     (unsigned long long)id, i, (double)row->values[i], (double)want,
                     (unsigned long long)ckpt);
    }
}

void tu_assert_rows(const tu_row *got, const cpr_table_schema *t, uint64_t first,
                    uint64_t step, size_t n, uint64_t ckpt)
{
    for (size_t i = 0; i < n; i++)
        tu_assert_row(&got[i], t, first + i * step, ckpt);
}

cpr_status tu_blob_collect(void *ctx, uint64_t offset, const void *data, size_t len)
{
    tu_blob *b = ctx;
    if (offset != b->len)
        b->gaps++;
    b->data = realloc(b->data, b->len + len + 1);
    if (!b->data)
        abort();
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return CPR_OK;
}

void tu_assert_blob(cpr_store *s, const cpr_part_id *id, const char *name,
                    uint64_t size)
{
    tu_blob b = {0};
    uint64_t reported = UINT64_MAX;
    assert_int_equal(cpr_store_read_blob(s, id, name, &reported, tu_blob_collect, &b),
                     CPR_OK);
    assert_int_equal(reported, size);
    assert_int_equal(b.len, size);
    assert_int_equal(b.gaps, 0);
    for (uint64_t i = 0; i < size; i++)
        assert_int_equal(b.data[i], tu_blob_byte(id->shard, id->checkpoint, i));
    free(b.data);
}

/* ---- a Ceph test cluster of the test's own ------------------------------------------ */

int tu_system(const char *cmd)
{
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int tu_cluster_run(const tu_cluster *c, const char *verb, const char *arg)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' %s >/dev/null", c->script, verb, c->dir,
             arg ? arg : "");
    return tu_system(cmd);
}

int tu_cluster_start(tu_cluster *c, const char *flags)
{
    memset(c, 0, sizeof *c);
    c->script = getenv("CPR_TEST_CEPH_SCRIPT");
    if (!c->script) {
        fprintf(stderr, "no CPR_TEST_CEPH_SCRIPT (deploy/ceph/test-cluster.sh): skipped\n");
        return 77;
    }
    char *dir = tu_mkdtemp("cpr-ceph");
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    snprintf(c->conf, sizeof c->conf, "%s/ceph.conf", dir);
    free(dir);
    int rc = tu_cluster_run(c, "start", flags);
    if (rc != 0) {
        fprintf(stderr, "test cluster did not start (%d)%s\n", rc, rc == 77 ? ": skipped" : "");
        tu_cluster_stop(c);
    }
    return rc;
}

void tu_cluster_stop(tu_cluster *c)
{
    tu_cluster_run(c, "stop", NULL);
    tu_rmtree(c->dir);
}

const char *tu_rados_conf(void)
{
    const char *conf = getenv("CPR_TEST_RADOS_CONF");
    if (!conf || access(conf, R_OK) != 0) {
        fprintf(stderr, "no test Ceph cluster (CPR_TEST_RADOS_CONF): skipped\n");
        return NULL;
    }
    return conf;
}
