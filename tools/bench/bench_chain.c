/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `cpr-bench store --chain N`: what a long CPR-MFU/SSU run leaves behind. A
 * FULL part, then N PRIORITY parts, each a different pseudo-random 1 in 8 of
 * the rows (background folding on, as in ckptd). Then, each from a cold
 * cache: the FULL alone restored (as of checkpoint 1), and the newest state
 * (as of the last part), both checked row by row. chain_restore_ratio is the
 * second time over the first: how much a long chain costs a restore once
 * folding has had its turn (cpr_store_fold finishes what the background
 * thread has not got to yet; its time is reported apart).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cpr/crc32c.h"
#include "cpr/store.h"
#include "cpr_common.h"
#include "cpr/rng.h"

#define CHAIN_JOB "chain"

static float chain_tag(uint64_t id, uint64_t ckpt)
{
    return (float)(cpr_mix64(id * 1000003u + ckpt) >> 40);
}

static int chain_picks(uint64_t id, uint64_t ckpt)
{
    return cpr_mix64(id ^ (ckpt * 0x9e3779b97f4a7c15ull)) % PRIORITY_ONE_IN == 0;
}

typedef struct chain_ctx {
    const bench_opts *opts;
    bench_data *d;
    uint16_t *expected;     /* newest checkpoint of each row as of the end */
    uint64_t as_of;         /* 1: the FULL alone; 0: expected[] */
    uint64_t next_id, rows;
    char problem[160];
} chain_ctx;

static cpr_status chain_check(void *ctx, const cpr_row_batch *b)
{
    chain_ctx *c = ctx;
    uint32_t dim = c->opts->dim;
    for (size_t i = 0; i < b->n; i++, c->next_id++) {
        uint64_t id = b->ids[i];
        uint64_t ckpt = c->as_of ? c->as_of : c->expected[id];
        if (id != c->next_id || b->values[i * dim] != chain_tag(id, ckpt)) {
            snprintf(c->problem, sizeof c->problem, "row %llu is not checkpoint %llu's "
                     "version (or out of order)", (unsigned long long)id,
                     (unsigned long long)ckpt);
            return cpr_fail(CPR_CORRUPT, "%s", c->problem);
        }
    }
    c->rows += b->n;
    return CPR_OK;
}

static cpr_status send(cpr_store *store, const cpr_part_id *id, bench_data *d, size_t n,
                       const float *values, const float *state)
{
    cpr_row_batch b = {
        .table = 0, .n = n, .ids = d->ids, .values = values, .values_count = n * d->dim,
        .state = d->state_dim ? state : NULL, .state_count = n * d->state_dim,
    };
    b.crc32c = cpr_crc32c_rows(b.ids, n, b.values, b.values_count, b.state, b.state_count);
    return cpr_store_put_rows(store, id, &b);
}

/* Part `ckpt` of the chain (1: the FULL), batch by batch. */
static cpr_status write_chain_part(cpr_store *store, const bench_opts *opts, bench_data *d,
                                   uint64_t ckpt, uint16_t *expected, uint64_t *bytes)
{
    cpr_table_schema table = {0, opts->rows, opts->dim, opts->state_dim};
    cpr_part_spec spec = {
        .id = {CHAIN_JOB, 0, ckpt}, .kind = ckpt == 1 ? CPR_KIND_FULL : CPR_KIND_PRIORITY,
        .step = ckpt, .num_shards = 1, .tables = &table, .n_tables = 1,
    };
    size_t dim = d->dim, sdim = d->state_dim, n = 0;
    uint64_t sent = 0;
    cpr_status st = cpr_store_begin(store, &spec);
    for (uint64_t id = 0; st == CPR_OK && id <= opts->rows; id++) {
        if (id < opts->rows && (ckpt == 1 || chain_picks(id, ckpt))) {
            size_t row = (size_t)(id % d->batch_rows);
            d->ids[n] = id;
            memcpy(d->values + n * dim, d->pattern_values + row * dim, dim * 4);
            if (sdim)
                memcpy(d->state + n * sdim, d->pattern_state + row * sdim, sdim * 4);
            d->values[n * dim] = chain_tag(id, ckpt);
            expected[id] = (uint16_t)ckpt;
            n++;
        }
        if (n == d->batch_rows || (id == opts->rows && n)) {
            st = send(store, &spec.id, d, n, d->values, d->state);
            sent += n;
            n = 0;
        }
    }
    if (st == CPR_OK)
        st = cpr_store_commit(store, &spec.id, sent);
    *bytes += sent * (8 + 4 * ((uint64_t)opts->dim + opts->state_dim));
    return bench_report(st, "writing the chain");
}

static cpr_status cold_restore(cpr_store **store, const char *dir, chain_ctx *c,
                               uint64_t as_of, double *seconds, uint64_t *peak_kb)
{
    cpr_store_close(*store);
    *store = NULL;
    cpr_status st = bench_report(bench_drop_cache(dir, NULL), "dropping the page cache");
    if (st == CPR_OK)
        st = bench_report(cpr_store_open(dir, NULL, store), "reopening the store");
    if (st)
        return st;
    cpr_restore_query q = {.job = CHAIN_JOB, .as_of = as_of, .batch_rows = c->opts->batch_rows};
    c->as_of = as_of == 1 ? 1 : 0;
    c->next_id = c->rows = 0;
    bench_peak_rss_reset();
    double t0 = cpri_now_s();
    st = cpr_store_restore(*store, &q, chain_check, c, NULL);
    *seconds = cpri_now_s() - t0;
    *peak_kb = bench_peak_rss_kb();
    if (st == CPR_OK && c->rows != c->opts->rows)
        st = cpr_fail(CPR_CORRUPT, "restore delivered %llu rows of %llu",
                      (unsigned long long)c->rows, (unsigned long long)c->opts->rows);
    return bench_report(st, as_of == 1 ? "restoring the FULL" : "restoring the chain");
}

cpr_status bench_chain_run(const bench_opts *opts, const char *store_dir, bench_chain *res)
{
    bench_data d;
    cpr_store *store = NULL;
    chain_ctx c = {.opts = opts, .d = &d};
    cpr_status st = bench_report(bench_data_init(&d, opts), "preparing rows");
    if (st)
        return st;
    c.expected = calloc(opts->rows, sizeof *c.expected);
    if (!c.expected)
        st = cpr_fail(CPR_NO_MEMORY, "out of memory for %llu rows",
                      (unsigned long long)opts->rows);
    if (st == CPR_OK)
        st = bench_report(cpr_store_open(store_dir, NULL, &store), "opening the store");
    bench_progress progress;
    bench_progress_start(&progress, "writing the FULL part and the chain", opts->chain + 1);
    double t0 = cpri_now_s();
    for (uint64_t ckpt = 1; st == CPR_OK && ckpt <= opts->chain + 1; ckpt++) {
        st = write_chain_part(store, opts, &d, ckpt, c.expected, &res->bytes_written);
        bench_progress_update(&progress, ckpt);
    }
    res->write_s = cpri_now_s() - t0;
    if (st == CPR_OK) {
        fprintf(stderr, "cpr-bench: folding what the background thread has not\n");
        t0 = cpri_now_s();
        st = bench_report(cpr_store_fold(store, CHAIN_JOB, 4, &res->final_folds), "folding");
        res->fold_s = cpri_now_s() - t0;
    }
    if (st == CPR_OK)
        st = cold_restore(&store, store_dir, &c, 1, &res->restore_full_s, &res->full_peak_kb);
    if (st == CPR_OK)
        st = cold_restore(&store, store_dir, &c, 0, &res->restore_chain_s, &res->chain_peak_kb);
    if (st == CPR_OK) {
        cpr_store_stats s;
        cpr_store_stats_get(store, &s);
        res->store_bytes = s.store_bytes;
    }
    cpr_store_close(store);
    free(c.expected);
    bench_data_release(&d);
    return st;
}
