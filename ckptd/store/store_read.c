/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading: restore of rows as of a checkpoint, and blob reads.
 *
 * A restore walks the row keys of each selected table with one RocksDB
 * iterator (one implicit snapshot, so a concurrent commit or GC cannot tear
 * it). Versions of a row are ordered newest first (keys.h), so for each row
 * the first version with checkpoint <= C is the answer: when the iterator
 * sits on a newer version we seek to (row, ~C); after emitting a row we step
 * over its older versions with Next, which is far cheaper than a seek. Every
 * row's CRC is checked before it is copied into the outgoing batch; memory is
 * one batch, whatever the size of the table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"
#include "store_internal.h"

#define DEFAULT_BATCH_ROWS 4096
#define NEXT_BEFORE_SEEK 16 /* older versions to step over before seeking */

typedef struct restore_run {
    rocksdb_iterator_t *it;
    uint32_t job_id;
    uint64_t as_of;
    const cpr_restore_query *q;
    cpr_row_fn fn;
    void *ctx;
    cpr_table_schema table;      /* the table being restored */
    uint64_t *ids;
    float *values, *state;
    size_t n, cap;
    cpr_restore_result res;
} restore_run;

static void seek_row(restore_run *r, uint64_t row)
{
    unsigned char key[CPR_ROW_KEY_LEN];
    cpr_row_key k = {r->job_id, r->table.table, row, r->as_of, 0};
    cpr_key_row(key, &k);
    rocksdb_iter_seek(r->it, (const char *)key, sizeof key);
}

/* Parse the iterator's key if it is a row of the current table. */
static int current_row(restore_run *r, cpr_row_key *k)
{
    size_t klen;
    if (!rocksdb_iter_valid(r->it))
        return 0;
    const char *key = rocksdb_iter_key(r->it, &klen);
    return cpr_key_row_parse(key, klen, k) == 0 && k->job_id == r->job_id &&
           k->table == r->table.table;
}

static cpr_status flush_batch(restore_run *r)
{
    cpr_row_batch b = {
        .table = r->table.table, .n = r->n, .ids = r->ids, .values = r->values,
        .values_count = r->n * r->table.dim, .state = r->table.state_dim ? r->state : NULL,
        .state_count = r->n * r->table.state_dim,
    };
    if (r->n == 0)
        return CPR_OK;
    b.crc32c = cpr_crc32c_rows(b.ids, b.n, b.values, b.values_count, b.state, b.state_count);
    r->res.rows += r->n;
    r->res.bytes += b.n * 8 + (b.values_count + b.state_count) * 4;
    r->n = 0;
    return r->fn(r->ctx, &b);
}

static cpr_status emit_row(restore_run *r, const cpr_row_key *k)
{
    size_t vlen, klen;
    const char *key = rocksdb_iter_key(r->it, &klen);
    const unsigned char *val = (const unsigned char *)rocksdb_iter_value(r->it, &vlen);
    size_t vbytes = (size_t)r->table.dim * 4, sbytes = (size_t)r->table.state_dim * 4;
    uint32_t stored;
    if (vlen != 4 + vbytes + sbytes)
        return cpr_fail(CPR_CORRUPT, "row %llu of table %u (checkpoint %llu, shard %u) "
                        "has %zu bytes, expected %zu", (unsigned long long)k->row,
                        k->table, (unsigned long long)k->checkpoint, k->shard, vlen,
                        4 + vbytes + sbytes);
    memcpy(&stored, val, 4);
    uint32_t crc = cpr_crc32c(0, key + 5, CPR_ROW_KEY_LEN - 5);
    if (cpr_crc32c(crc, val + 4, vbytes + sbytes) != stored)
        return cpr_fail(CPR_CORRUPT, "row %llu of table %u (checkpoint %llu, shard %u) "
                        "fails its checksum: the stored copy is damaged",
                        (unsigned long long)k->row, k->table,
                        (unsigned long long)k->checkpoint, k->shard);
    r->ids[r->n] = k->row;
    memcpy(r->values + r->n * r->table.dim, val + 4, vbytes);
    if (sbytes)
        memcpy(r->state + r->n * r->table.state_dim, val + 4 + vbytes, sbytes);
    return ++r->n == r->cap ? flush_batch(r) : CPR_OK;
}

/* Step past the older versions of `row`. */
static void skip_versions(restore_run *r, uint64_t row)
{
    cpr_row_key k;
    for (int i = 0; i < NEXT_BEFORE_SEEK; i++) {
        rocksdb_iter_next(r->it);
        if (!current_row(r, &k) || k.row != row)
            return;
    }
    if (row != UINT64_MAX)
        seek_row(r, row + 1);
    else
        rocksdb_iter_seek_to_last(r->it), rocksdb_iter_next(r->it);
}

/* First row >= row that passes the modulo filter (UINT64_MAX: none). */
static uint64_t next_wanted(const restore_run *r, uint64_t row)
{
    uint64_t m = r->q->modulo, rem = r->q->remainder, want;
    if (m == 0 || row % m == rem)
        return row;
    want = row - row % m + rem;
    if (want < row)
        want += m;
    return want < row ? UINT64_MAX : want; /* overflow */
}

static cpr_status restore_range(restore_run *r, uint64_t begin, uint64_t end)
{
    cpr_status st = CPR_OK;
    cpr_row_key k;
    uint64_t first = next_wanted(r, begin);
    if (first >= end)
        return CPR_OK;
    seek_row(r, first);
    while (st == CPR_OK && current_row(r, &k) && k.row < end) {
        uint64_t want = next_wanted(r, k.row);
        if (want != k.row) {
            if (want >= end)
                break;
            seek_row(r, want);
        } else if (k.checkpoint > r->as_of) {
            seek_row(r, k.row); /* lands on the newest version <= as_of */
            if (current_row(r, &k) && k.row == want && k.checkpoint > r->as_of)
                BUG("seek to (row, ~as_of) found a newer version");
        } else {
            st = emit_row(r, &k);
            skip_versions(r, k.row);
        }
    }
    if (st == CPR_OK) {
        char *err = NULL;
        rocksdb_iter_get_error(r->it, &err);
        if (err)
            st = cpr_rocks_error(err, "reading rows");
    }
    return st;
}

static int range_cmp(const void *a, const void *b)
{
    const cpr_row_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Sorted, merged copy of the query's ranges (all rows if none). */
static cpr_status normalise_ranges(const cpr_restore_query *q, cpr_row_range **out, size_t *n)
{
    size_t count = q->n_ranges ? q->n_ranges : 1, merged = 0;
    cpr_row_range *rs = malloc(count * sizeof *rs);
    if (!rs)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for %zu ranges", count);
    if (q->n_ranges == 0) {
        rs[0] = (cpr_row_range){0, UINT64_MAX};
    } else {
        memcpy(rs, q->ranges, count * sizeof *rs);
        qsort(rs, count, sizeof *rs, range_cmp);
    }
    for (size_t i = 0; i < count; i++) {
        if (rs[i].begin >= rs[i].end)
            continue;
        if (merged && rs[i].begin <= rs[merged - 1].end) {
            if (rs[i].end > rs[merged - 1].end)
                rs[merged - 1].end = rs[i].end;
        } else {
            rs[merged++] = rs[i];
        }
    }
    *out = rs;
    *n = merged;
    return CPR_OK;
}

static cpr_status restore_table(restore_run *r, const cpr_row_range *ranges, size_t n_ranges)
{
    cpr_status st = CPR_OK;
    size_t row_floats = (size_t)r->table.dim;
    free(r->values);
    free(r->state);
    r->values = malloc(r->cap * row_floats * sizeof(float));
    r->state = malloc(r->cap * ((size_t)r->table.state_dim + 1) * sizeof(float));
    if (!r->values || !r->state)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a restore batch");
    for (size_t i = 0; st == CPR_OK && i < n_ranges; i++)
        st = restore_range(r, ranges[i].begin, ranges[i].end);
    if (st == CPR_OK)
        st = flush_batch(r);
    return st;
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t newest_checkpoint(const cpr_job *job)
{
    return job->n_parts ? job->parts[job->n_parts - 1].checkpoint : 0;
}

/* Under store->mu: resolve as_of, copy the schemas, open the snapshot. */
static cpr_status prepare(cpr_store *store, const cpr_restore_query *q, restore_run *r,
                          cpr_table_schema **tables, size_t *n_tables)
{
    cpr_job *job = cpr_catalog_find(&store->catalog, q->job);
    if (!job || job->n_parts == 0)
        return cpr_fail(CPR_NOT_FOUND, "job %s has no committed parts", q->job);
    r->job_id = job->id;
    if (q->consistent) {
        if (cpr_job_cuts(job, &r->as_of, 1) == 0)
            return cpr_fail(CPR_NOT_FOUND, "job %s has no consistent cut yet", q->job);
    } else {
        r->as_of = q->as_of ? q->as_of : newest_checkpoint(job);
    }
    if (job->floor && r->as_of < job->floor)
        return cpr_fail(CPR_FAILED_PRECONDITION, "checkpoint %llu of job %s was "
                        "reclaimed by retention; the oldest restorable is %llu",
                        (unsigned long long)r->as_of, q->job,
                        (unsigned long long)job->floor);
    size_t n = q->n_tables ? q->n_tables : job->n_tables;
    *tables = malloc((n ? n : 1) * sizeof **tables);
    if (!*tables)
        return cpr_fail(CPR_NO_MEMORY, "out of memory preparing a restore");
    for (size_t i = 0; i < n; i++) {
        const cpr_table_schema *t = q->n_tables ? cpr_job_table(job, q->tables[i])
                                                : &job->tables[i];
        if (!t)
            return cpr_fail(CPR_NOT_FOUND, "table %u is not part of job %s",
                            q->tables[i], q->job);
        (*tables)[i] = *t;
    }
    *n_tables = n;
    r->it = rocksdb_create_iterator(store->db, store->read_opts);
    return CPR_OK;
}

static int schema_cmp(const void *a, const void *b)
{
    return u32_cmp(&((const cpr_table_schema *)a)->table, &((const cpr_table_schema *)b)->table);
}

cpr_status cpr_store_restore(cpr_store *store, const cpr_restore_query *q, cpr_row_fn fn,
                             void *ctx, cpr_restore_result *result)
{
    restore_run r = {.q = q, .fn = fn, .ctx = ctx};
    cpr_table_schema *tables = NULL;
    cpr_row_range *ranges = NULL;
    size_t n_tables = 0, n_ranges = 0;
    cpr_status st = q && fn ? cpr_check_job_name(q->job)
                            : cpr_fail(CPR_INVALID_ARGUMENT, "restore needs a query and a callback");
    if (st == CPR_OK && q->modulo && q->remainder >= q->modulo)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "remainder %llu must be below modulo %llu",
                      (unsigned long long)q->remainder, (unsigned long long)q->modulo);
    if (st == CPR_OK)
        st = normalise_ranges(q, &ranges, &n_ranges);
    if (st)
        goto out;
    r.cap = q->batch_rows ? q->batch_rows : DEFAULT_BATCH_ROWS;
    r.ids = malloc(r.cap * sizeof *r.ids);
    if (!r.ids) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory for a batch of %zu rows", r.cap);
        goto out;
    }
    pthread_mutex_lock(&store->mu);
    st = prepare(store, q, &r, &tables, &n_tables);
    pthread_mutex_unlock(&store->mu);
    if (st)
        goto out;
    qsort(tables, n_tables, sizeof *tables, schema_cmp);
    for (size_t i = 0; st == CPR_OK && i < n_tables; i++) {
        if (i > 0 && tables[i].table == tables[i - 1].table)
            continue;
        r.table = tables[i];
        st = restore_table(&r, ranges, n_ranges);
    }
out:
    if (r.it)
        rocksdb_iter_destroy(r.it);
    atomic_fetch_add(&store->rows_out, r.res.rows);
    atomic_fetch_add(&store->bytes_out, r.res.bytes);
    free(tables);
    free(ranges);
    free(r.ids);
    free(r.values);
    free(r.state);
    if (st == CPR_OK && result) {
        r.res.as_of = r.as_of;
        *result = r.res;
    }
    return cpr_store_count(store, st);
}

/* ---- blobs ------------------------------------------------------------------ */

typedef struct blob_read {
    const char *path;
    const uint32_t *crcs;
    cpr_blob_fn fn;
    void *ctx;
    uint64_t bytes;
} blob_read;

static cpr_status check_block(void *ctx, uint64_t index, const void *data, size_t len)
{
    blob_read *b = ctx;
    if (cpr_crc32c(0, data, len) != b->crcs[index])
        return cpr_fail(CPR_CORRUPT, "blob file %s: block %llu (bytes %llu-%llu) fails "
                        "its checksum", b->path, (unsigned long long)index,
                        (unsigned long long)(index * CPR_BLOB_BLOCK),
                        (unsigned long long)(index * CPR_BLOB_BLOCK + len));
    b->bytes += len;
    return b->fn(b->ctx, index * CPR_BLOB_BLOCK, data, len);
}

/* Under store->mu: the blob's path and a copy of its checksums. */
static cpr_status find_blob(cpr_store *store, const cpr_part_id *id, const char *name,
                            char **path, cpr_blob_meta *copy)
{
    cpr_job *job = cpr_catalog_find(&store->catalog, id->job);
    const cpr_part_meta *m = job ? cpr_job_find_part(job, id->shard, id->checkpoint) : NULL;
    const cpr_blob_meta *b = m ? cpr_meta_blob(m, name) : NULL;
    if (!m)
        return cpr_fail(CPR_NOT_FOUND, "no committed part %s/%u/%llu", id->job,
                        id->shard, (unsigned long long)id->checkpoint);
    if (!b)
        return cpr_fail(CPR_NOT_FOUND, "part %s/%u/%llu has no blob named %s", id->job,
                        id->shard, (unsigned long long)id->checkpoint, name);
    *copy = *b;
    copy->crcs = malloc((b->n_crcs ? b->n_crcs : 1) * sizeof *copy->crcs);
    char *dir = cpr_part_dirname(id->job, id->shard, id->checkpoint, store->blobs_dir);
    size_t len = dir ? strlen(dir) + strlen(name) + 4 : 0;
    *path = dir ? malloc(len) : NULL;
    if (!copy->crcs || !*path) {
        free(copy->crcs);
        free(dir);
        free(*path);
        return cpr_fail(CPR_NO_MEMORY, "out of memory reading a blob");
    }
    memcpy(copy->crcs, b->crcs, b->n_crcs * sizeof *copy->crcs);
    snprintf(*path, len, "%s/b_%s", dir, name);
    free(dir);
    return CPR_OK;
}

cpr_status cpr_store_read_blob(cpr_store *store, const cpr_part_id *id, const char *name,
                               uint64_t *size, cpr_blob_fn fn, void *ctx)
{
    cpr_blob_meta meta = {0};
    char *path = NULL;
    cpr_status st = cpr_check_job_name(id->job);
    if (st == CPR_OK && !cpr_name_valid(name))
        st = cpr_fail(CPR_INVALID_ARGUMENT, "blob name \"%.140s\" is invalid",
                      name ? name : "(null)");
    if (st)
        return cpr_store_count(store, st);
    pthread_mutex_lock(&store->mu);
    st = find_blob(store, id, name, &path, &meta);
    pthread_mutex_unlock(&store->mu);
    if (st)
        return cpr_store_count(store, st);
    if (size)
        *size = meta.size;
    blob_read b = {.path = path, .crcs = meta.crcs, .fn = fn, .ctx = ctx};
    st = cpr_bfile_read(path, meta.size, 1, check_block, &b);
    atomic_fetch_add(&store->bytes_out, b.bytes);
    free(meta.crcs);
    free(path);
    return cpr_store_count(store, st);
}
