/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store phases of `cpr-bench store`: ingest a FULL part and a PRIORITY
 * part the way a training job would (batches with client-side CRC32C, then a
 * durable commit), then restore the shard from a cold cache and check every
 * row. Row contents are generated so that generation costs almost nothing in
 * the timed loops: one batch of random values is made up front and only the
 * ids and one "tag" value per row (a function of row id and checkpoint) change
 * from batch to batch. The tag is what the restore checks for every row; a
 * sample of rows is compared in full.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cpr/crc32c.h"
#include "cpr/store.h"
#include "cpr_common.h"
#include "cpr/rng.h"

/* Element 0 of row `id` as written at checkpoint `ckpt`: an integer below
 * 2^24, so it is exact as a float and distinct between the two versions. */
static float row_tag(uint64_t id, uint64_t ckpt)
{
    return (float)(cpr_mix64(id * 4 + ckpt) >> 40);
}

/* The PRIORITY part is a pseudo-random 1-in-8 subset, in ascending order;
 * row 0 is always in it so that the part is never empty. */
int bench_in_priority(uint64_t id)
{
    return id == 0 || cpr_mix64(id ^ 0x5bd1e995u) % PRIORITY_ONE_IN == 0;
}

static void fill_noise(float *out, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (float)(x >> 40) / 8388608.0f - 1.0f; /* [-1, 1) */
    }
}

void bench_data_release(bench_data *d)
{
    free(d->pattern_values);
    free(d->pattern_state);
    free(d->ids);
    free(d->values);
    free(d->state);
    free(d->priority_ids);
    memset(d, 0, sizeof *d);
}

static cpr_status choose_priority_rows(bench_data *d, uint64_t rows)
{
    size_t cap = (size_t)(rows / PRIORITY_ONE_IN) + 1024, n = 0;
    uint64_t *ids = malloc(cap * sizeof *ids);
    for (uint64_t id = 0; ids && id < rows; id++) {
        if (!bench_in_priority(id))
            continue;
        if (n == cap) {
            uint64_t *grown = realloc(ids, 2 * cap * sizeof *ids);
            if (!grown) {
                free(ids);
                ids = NULL;
                break;
            }
            ids = grown;
            cap *= 2;
        }
        ids[n++] = id;
    }
    if (!ids)
        return cpr_fail(CPR_NO_MEMORY, "out of memory choosing PRIORITY rows");
    d->priority_ids = ids;
    d->n_priority = n;
    return CPR_OK;
}

cpr_status bench_data_init(bench_data *d, const bench_opts *opts)
{
    size_t b = opts->batch_rows;
    memset(d, 0, sizeof *d);
    d->dim = opts->dim;
    d->state_dim = opts->state_dim;
    d->batch_rows = b;
    d->pattern_values = malloc(b * d->dim * sizeof(float));
    d->values = malloc(b * d->dim * sizeof(float));
    d->ids = malloc(b * sizeof(uint64_t));
    if (d->state_dim) {
        d->pattern_state = malloc(b * d->state_dim * sizeof(float));
        d->state = malloc(b * d->state_dim * sizeof(float));
    }
    if (!d->pattern_values || !d->values || !d->ids ||
        (d->state_dim && (!d->pattern_state || !d->state))) {
        bench_data_release(d);
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a batch of %zu rows", b);
    }
    fill_noise(d->pattern_values, b * d->dim, 0x243F6A8885A308D3ull);
    if (d->state_dim)
        fill_noise(d->pattern_state, b * d->state_dim, 0x13198A2E03707344ull);
    cpr_status st = choose_priority_rows(d, opts->rows);
    if (st)
        bench_data_release(d);
    return st;
}

/* ---- ingest ---------------------------------------------------------------- */


static void set_tag(bench_data *d, float *values, float *state, size_t i,
                    uint64_t id, uint64_t ckpt)
{
    float tag = row_tag(id, ckpt);
    values[i * d->dim] = tag;
    if (d->state_dim)
        state[i * d->state_dim] = -tag;
}

/* FULL: rows first..first+n-1; first is a multiple of batch_rows, so the
 * pattern is used in place. */
void bench_fill_full(bench_data *d, uint64_t first, size_t n, uint64_t ckpt,
                      float **values, float **state)
{
    for (size_t i = 0; i < n; i++) {
        d->ids[i] = first + i;
        set_tag(d, d->pattern_values, d->pattern_state, i, first + i, ckpt);
    }
    *values = d->pattern_values;
    *state = d->pattern_state;
}

/* PRIORITY: the chosen rows first..first+n-1 of priority_ids, copied from
 * their pattern rows. */
void bench_fill_priority(bench_data *d, uint64_t first, size_t n, uint64_t ckpt,
                          float **values, float **state)
{
    size_t dim = d->dim, sdim = d->state_dim;
    for (size_t i = 0; i < n; i++) {
        uint64_t id = d->priority_ids[first + i];
        size_t row = (size_t)(id % d->batch_rows);
        d->ids[i] = id;
        memcpy(d->values + i * dim, d->pattern_values + row * dim, dim * sizeof(float));
        if (sdim)
            memcpy(d->state + i * sdim, d->pattern_state + row * sdim,
                   sdim * sizeof(float));
        set_tag(d, d->values, d->state, i, id, ckpt);
    }
    *values = d->values;
    *state = d->state;
}

static cpr_status send_batch(cpr_store *store, const cpr_part_id *pid,
                             const bench_data *d, size_t n, const float *values,
                             const float *state)
{
    cpr_row_batch batch = {
        .table = 0,
        .n = n,
        .ids = d->ids,
        .values = values,
        .values_count = n * d->dim,
        .state = d->state_dim ? state : NULL,
        .state_count = n * d->state_dim,
    };
    batch.crc32c = cpr_crc32c_rows(batch.ids, n, batch.values, batch.values_count,
                                   batch.state, batch.state_count);
    return cpr_store_put_rows(store, pid, &batch);
}

typedef struct part_plan {
    uint64_t ckpt;
    cpr_kind kind;
    uint64_t n_rows;
    bench_fill_fn fill;
    const char *what;        /* progress label */
} part_plan;

/* begin, stream every batch, commit; *seconds runs from begin to commit. */
static cpr_status write_part(cpr_store *store, const bench_opts *opts,
                             bench_data *d, const part_plan *plan, double *seconds)
{
    cpr_table_schema table = {0, opts->rows, opts->dim, opts->state_dim};
    cpr_part_spec spec = {
        .id = {BENCH_JOB, 0, plan->ckpt},
        .kind = plan->kind,
        .step = plan->ckpt * 1000,
        .num_shards = 1,
        .tables = &table,
        .n_tables = 1,
    };
    bench_progress progress;
    bench_progress_start(&progress, plan->what, plan->n_rows);
    double t0 = cpri_now_s();
    cpr_status st = bench_report(cpr_store_begin(store, &spec), "begin");
    for (uint64_t first = 0; st == CPR_OK && first < plan->n_rows;) {
        uint64_t left = plan->n_rows - first;
        size_t n = left < d->batch_rows ? (size_t)left : d->batch_rows;
        float *values, *state;
        plan->fill(d, first, n, plan->ckpt, &values, &state);
        st = bench_report(send_batch(store, &spec.id, d, n, values, state), "put_rows");
        first += n;
        bench_progress_update(&progress, first);
    }
    if (st == CPR_OK)
        st = bench_report(cpr_store_commit(store, &spec.id, plan->n_rows), "commit");
    *seconds = cpri_now_s() - t0;
    return st;
}

static cpr_status ingest(cpr_store *store, const bench_opts *opts, bench_data *d,
                         bench_result *res)
{
    part_plan full = {FULL_CKPT, CPR_KIND_FULL, opts->rows, bench_fill_full,
                      "writing FULL part"};
    part_plan priority = {PRIORITY_CKPT, CPR_KIND_PRIORITY, d->n_priority,
                          bench_fill_priority, "writing PRIORITY part"};
    bench_cpu cpu0 = bench_cpu_now();
    bench_peak_rss_reset();
    double t0 = cpri_now_s();
    cpr_status st = write_part(store, opts, d, &full, &res->full_s);
    if (st == CPR_OK)
        st = write_part(store, opts, d, &priority, &res->priority_s);
    res->ingest_s = cpri_now_s() - t0;
    res->ingest_peak_kb = bench_peak_rss_kb();
    res->ingest_cpu = bench_cpu_since(cpu0, bench_cpu_now());
    res->full_bytes = opts->rows * res->row_bytes;
    res->priority_rows = d->n_priority;
    res->priority_bytes = d->n_priority * res->row_bytes;
    return st;
}

/* ---- restore and verification ------------------------------------------ */


static cpr_status mismatch(bench_verifier *v, const char *what, uint64_t id)
{
    snprintf(v->problem, sizeof v->problem, "row %llu: %s",
             (unsigned long long)id, what);
    return cpr_fail(CPR_CORRUPT, "restore verification failed: %s", v->problem);
}

/* The restored row i of batch is the version of the newest part that has it;
 * its tag says which, and every 64th row is compared in full. */
static cpr_status check_row(bench_verifier *v, const cpr_row_batch *batch, size_t i)
{
    const bench_data *d = v->d;
    uint64_t id = batch->ids[i];
    if (id != v->next_id)
        return mismatch(v, "out of order, duplicated, or rows before it missing", id);
    v->next_id++;
    uint64_t ckpt = bench_in_priority(id) ? PRIORITY_CKPT : FULL_CKPT;
    const float *values = batch->values + i * d->dim;
    const float *state = d->state_dim ? batch->state + i * d->state_dim : NULL;
    float tag = row_tag(id, ckpt);
    if (values[0] != tag || (state && state[0] != -tag))
        return mismatch(v, ckpt == PRIORITY_CKPT
                               ? "not the PRIORITY part's version"
                               : "not the FULL part's version", id);
    if (id % FULL_CHECK_ONE_IN != 0)
        return CPR_OK;
    size_t row = (size_t)(id % d->batch_rows);
    if (memcmp(values + 1, d->pattern_values + row * d->dim + 1,
               (d->dim - 1) * sizeof(float)) != 0 ||
        (state && memcmp(state + 1, d->pattern_state + row * d->state_dim + 1,
                         (d->state_dim - 1) * sizeof(float)) != 0))
        return mismatch(v, "values differ from what was written", id);
    return CPR_OK;
}

cpr_status bench_check_batch(void *ctx, const cpr_row_batch *batch)
{
    bench_verifier *v = ctx;
    const bench_data *d = v->d;
    uint64_t first = batch->n ? batch->ids[0] : v->next_id;
    if (batch->table != 0 || batch->values_count != batch->n * d->dim ||
        batch->state_count != batch->n * d->state_dim)
        return mismatch(v, "batch has the wrong table or shape", first);
    if (cpr_crc32c_rows(batch->ids, batch->n, batch->values, batch->values_count,
                        batch->state, batch->state_count) != batch->crc32c)
        return mismatch(v, "batch checksum does not match its rows", first);
    for (size_t i = 0; i < batch->n; i++) {
        cpr_status st = check_row(v, batch, i);
        if (st)
            return st;
    }
    v->rows += batch->n;
    bench_progress_update(&v->progress, v->rows);
    return CPR_OK;
}

static cpr_status restore(cpr_store *store, const bench_opts *opts,
                          const bench_data *d, bench_result *res)
{
    cpr_restore_query query = {.job = BENCH_JOB, .as_of = 0,
                               .batch_rows = opts->batch_rows};
    cpr_restore_result got = {0, 0, 0};
    bench_verifier v = {.d = d};
    bench_progress_start(&v.progress, "restoring", opts->rows);
    bench_cpu cpu0 = bench_cpu_now();
    bench_peak_rss_reset();
    double t0 = cpri_now_s();
    cpr_status st = cpr_store_restore(store, &query, bench_check_batch, &v, &got);
    res->restore_s = cpri_now_s() - t0;
    res->restore_peak_kb = bench_peak_rss_kb();
    res->restore_cpu = bench_cpu_since(cpu0, bench_cpu_now());
    if (v.problem[0]) {
        fprintf(stderr, "cpr-bench: restore verification failed: %s\n", v.problem);
        return CPR_CORRUPT;
    }
    if (bench_report(st, "restore"))
        return st;
    if (v.rows != opts->rows || got.rows != opts->rows) {
        fprintf(stderr, "cpr-bench: restore verification failed: %llu rows delivered, "
                "store reports %llu, %llu were written\n", (unsigned long long)v.rows,
                (unsigned long long)got.rows, (unsigned long long)opts->rows);
        return CPR_CORRUPT;
    }
    res->restore_rows = v.rows;
    res->restore_bytes = v.rows * res->row_bytes;
    if (got.bytes != res->restore_bytes)
        fprintf(stderr, "cpr-bench: warning: store reports %llu restored bytes, "
                "rows carry %llu\n", (unsigned long long)got.bytes,
                (unsigned long long)res->restore_bytes);
    return CPR_OK;
}

/* ---- the phases in order --------------------------------------------------- */

static cpr_status open_store(const bench_opts *opts, const char *dir, cpr_store **store,
                             double *seconds)
{
    cpr_store_options so = bench_store_options(opts); /* the backend */
    double t0 = cpri_now_s();
    cpr_status st = bench_report(cpr_store_open(dir, &so, store), "opening the store");
    *seconds = cpri_now_s() - t0;
    return st;
}

/* Closing and reopening makes the restore start like one after a crash:
 * nothing of the ingest left in the process, nothing in the page cache. */
static cpr_status go_cold(const bench_opts *opts, cpr_store **store, const char *store_dir,
                          bench_result *res)
{
    double t0 = cpri_now_s();
    cpr_store_close(*store);
    *store = NULL;
    res->close_s = cpri_now_s() - t0;
    fprintf(stderr, "cpr-bench: dropping the page cache of %s\n", store_dir);
    t0 = cpri_now_s();
    cpr_status st = bench_report(bench_drop_cache(store_dir, &res->store_disk_bytes),
                                 "dropping the page cache");
    res->drop_cache_s = cpri_now_s() - t0;
    if (st == CPR_OK)
        st = open_store(opts, store_dir, store, &res->reopen_s);
    return st;
}

cpr_status bench_store_run(const bench_opts *opts, const char *store_dir,
                           bench_result *res)
{
    bench_data d;
    cpr_store *store = NULL;
    res->row_bytes = 8 + 4 * (uint64_t)opts->dim + 4 * (uint64_t)opts->state_dim;
    cpr_status st = bench_report(bench_data_init(&d, opts), "preparing rows");
    if (st)
        return st;
    st = open_store(opts, store_dir, &store, &res->open_s);
    if (st)
        goto out;
    st = ingest(store, opts, &d, res);
    if (st)
        goto out;
    st = go_cold(opts, &store, store_dir, res);
    if (st)
        goto out;
    st = restore(store, opts, &d, res);
out:
    cpr_store_close(store);
    bench_data_release(&d);
    return st;
}
