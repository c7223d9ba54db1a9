/* SPDX-License-Identifier: Apache-2.0 */
/* Implementation of testutil.h. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
