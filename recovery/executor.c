/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The recovery executor (cpr/recovery.h): a plan carried out through the
 * client library into the caller's embedding tables. Each STORE shard is one
 * restore as of the entry's checkpoint, asking for that shard's rows of
 * every table; the batches are written with cpr_emb_apply on the calling
 * thread as they arrive, so memory stays bounded by the restore's batches
 * whatever the size of the tables.
 *
 * Invariants:
 *   E1  only rows the shard owns under the caller's sharding are written:
 *       the query selects them where one query can (ranges for RANGE tables,
 *       row % N for MODULO tables), and every delivered row is checked all
 *       the same, so a survivor's row is never overwritten;
 *   E2  a row is written only with a version the store delivered, with the
 *       dims of the caller's table: a table not given or a dim that differs
 *       stops the restore with CPR_INVALID_ARGUMENT before its rows are
 *       written;
 *   E3  KEEP and INIT shards are never touched.
 */
#include <stdlib.h>
#include <string.h>

#include "cpr/recovery.h"
#include "cpr_common.h"

/* ---- one shard's restore ------------------------------------------------------------ */

typedef struct shard_run {
    const char *job;
    const cpr_exec_table *tables;
    size_t n_tables;
    uint32_t shard;
    size_t last;             /* table of the previous batch: batches come table by table */
    uint64_t *ids;           /* scratch for a batch with rows of other shards (E1) */
    float *values, *state;
    size_t cap_rows, cap_values, cap_state;
    uint64_t rows, bytes, skipped;
} shard_run;

static const cpr_exec_table *find_table(shard_run *r, uint32_t table)
{
    if (r->last < r->n_tables && r->tables[r->last].table == table)
        return &r->tables[r->last];
    for (size_t i = 0; i < r->n_tables; i++)
        if (r->tables[i].table == table) {
            r->last = i;
            return &r->tables[i];
        }
    return NULL;
}

/* E2: the batch's dims are the table's. */
static cpr_status check_dims(const cpr_exec_table *t, const cpr_row_batch *b)
{
    size_t dim = b->values_count / b->n, sdim = b->state_count / b->n;
    if (dim != cpr_emb_dim(t->emb) || sdim != cpr_emb_state_dim(t->emb) ||
        b->values_count != b->n * dim || b->state_count != b->n * sdim)
        return cpr_fail(CPR_INVALID_ARGUMENT, "table %u: the stored rows have dim %zu and "
                        "state_dim %zu, the caller's table dim %u and state_dim %u (a "
                        "different model or optimizer)", t->table, dim, sdim,
                        cpr_emb_dim(t->emb), cpr_emb_state_dim(t->emb));
    return CPR_OK;
}

static int grow(void **p, size_t *cap, size_t want, size_t elem)
{
    if (want <= *cap)
        return 0;
    void *grown = realloc(*p, want * elem);
    if (!grown)
        return -1;
    *p = grown;
    *cap = want;
    return 0;
}

/* Copy the rows `shard` owns into the scratch arrays; returns how many. */
static size_t keep_owned(shard_run *r, const cpr_emb *emb, const cpr_row_batch *b, size_t dim,
                         size_t sdim)
{
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (cpr_emb_shard_of(emb, b->ids[i]) != r->shard)
            continue;
        r->ids[k] = b->ids[i];
        memcpy(r->values + k * dim, b->values + i * dim, dim * sizeof(float));
        if (sdim)
            memcpy(r->state + k * sdim, b->state + i * sdim, sdim * sizeof(float));
        k++;
    }
    return k;
}

/* E1: write only the rows the shard owns. */
static cpr_status apply_owned(shard_run *r, const cpr_exec_table *t, const cpr_row_batch *b)
{
    size_t dim = cpr_emb_dim(t->emb), sdim = cpr_emb_state_dim(t->emb), owned = 0;
    for (size_t i = 0; i < b->n; i++)
        owned += cpr_emb_shard_of(t->emb, b->ids[i]) == r->shard;
    const uint64_t *ids = b->ids;
    const float *values = b->values, *state = b->state;
    if (owned < b->n) {
        if (grow((void **)&r->ids, &r->cap_rows, b->n, sizeof *r->ids) ||
            grow((void **)&r->values, &r->cap_values, b->n * dim, sizeof *r->values) ||
            grow((void **)&r->state, &r->cap_state, b->n * sdim + 1, sizeof *r->state))
            return cpr_fail(CPR_NO_MEMORY, "out of memory filtering a batch of %zu rows", b->n);
        keep_owned(r, t->emb, b, dim, sdim);
        ids = r->ids;
        values = r->values;
        state = r->state;
    }
    cpr_status st = owned ? cpr_emb_apply(t->emb, ids, owned, values, sdim ? state : NULL)
                          : CPR_OK;
    if (st)
        return st;
    r->rows += owned;
    r->bytes += owned * (8 + 4 * (dim + sdim));
    r->skipped += b->n - owned;
    return CPR_OK;
}

/* The restore's callback (cpr_row_fn). */
static cpr_status apply_batch(void *ctx, const cpr_row_batch *b)
{
    shard_run *r = ctx;
    if (b->n == 0)
        return CPR_OK;
    const cpr_exec_table *t = find_table(r, b->table);
    if (!t)
        return cpr_fail(CPR_INVALID_ARGUMENT, "job %s has rows of table %u, which the caller "
                        "did not give (cpr_exec_table): every table of the job must be given",
                        r->job, b->table);
    cpr_status st = check_dims(t, b);
    return st ? st : apply_owned(r, t, b);
}

/* ---- which rows a shard asks for (E1) -------------------------------------------------- */

typedef struct selection {
    cpr_row_range *ranges;   /* RANGE tables: each table's range of the shard */
    size_t n_ranges;
    uint64_t modulo, remainder;
    int nothing;             /* the shard owns no row of any table */
} selection;

static int same_scheme(const cpr_exec_table *tables, size_t n, cpr_shard_scheme scheme)
{
    for (size_t i = 0; i < n; i++)
        if (cpr_emb_scheme(tables[i].emb) != scheme)
            return 0;
    return 1;
}

static cpr_status select_rows(const cpr_exec_table *tables, size_t n, uint32_t shard,
                              uint32_t num_shards, selection *sel)
{
    memset(sel, 0, sizeof *sel);
    if (num_shards == 1 || n == 0)
        return CPR_OK; /* every row */
    if (same_scheme(tables, n, CPR_SHARD_MODULO)) {
        sel->modulo = num_shards;
        sel->remainder = shard;
        return CPR_OK;
    }
    if (!same_scheme(tables, n, CPR_SHARD_RANGE))
        return CPR_OK; /* mixed: every row, filtered as it arrives */
    sel->ranges = malloc(n * sizeof *sel->ranges);
    if (!sel->ranges)
        return cpr_fail(CPR_NO_MEMORY, "out of memory selecting rows");
    for (size_t i = 0; i < n; i++) {
        uint64_t per = cpr_emb_shard_rows(tables[i].emb, 0); /* rows of every range but the last */
        uint64_t count = cpr_emb_shard_rows(tables[i].emb, shard);
        if (count)
            sel->ranges[sel->n_ranges++] = (cpr_row_range){shard * per, shard * per + count};
    }
    sel->nothing = sel->n_ranges == 0; /* no range would mean every row */
    return CPR_OK;
}

static cpr_status restore_shard(cpr_client *client, const char *job, const cpr_recovery_plan *plan,
                                const cpr_plan_shard *e, shard_run *run, size_t batch_rows)
{
    selection sel;
    cpr_status st = select_rows(run->tables, run->n_tables, e->shard,
                                (uint32_t)cpr_recovery_plan_count(plan), &sel);
    if (st || sel.nothing) {
        free(sel.ranges);
        return st;
    }
    cpr_restore_query q = {.job = job, .as_of = e->as_of, .ranges = sel.ranges,
                           .n_ranges = sel.n_ranges, .modulo = sel.modulo,
                           .remainder = sel.remainder, .batch_rows = batch_rows};
    /* After a resharding the rows of a shard were written by other shards,
     * maybe on other nodes: ask them all (the client merges their answers
     * by each row's version: client/merge.c). */
    int everywhere = (cpr_recovery_plan_problems(plan) & CPR_PLAN_RESHARDED) != 0;
    st = cpr_client_restore(client, &q, everywhere ? NULL : &e->shard, everywhere ? 0 : 1,
                            apply_batch, run, NULL);
    free(sel.ranges);
    return st;
}

/* ---- the plan ------------------------------------------------------------------------ */

static cpr_status check_tables(const cpr_exec_table *tables, size_t n, size_t num_shards)
{
    if (n && !tables)
        return cpr_fail(CPR_INVALID_ARGUMENT, "tables is NULL with n_tables %zu", n);
    for (size_t i = 0; i < n; i++) {
        if (!tables[i].emb)
            return cpr_fail(CPR_INVALID_ARGUMENT, "tables[%zu] (table %u): emb is NULL", i,
                            tables[i].table);
        if (cpr_emb_num_shards(tables[i].emb) != num_shards)
            return cpr_fail(CPR_INVALID_ARGUMENT, "table %u has %u shards, the plan %zu: "
                            "restore into tables sharded as the job is now",
                            tables[i].table, cpr_emb_num_shards(tables[i].emb), num_shards);
        for (size_t j = 0; j < i; j++)
            if (tables[j].table == tables[i].table)
                return cpr_fail(CPR_INVALID_ARGUMENT, "table %u is given twice",
                                tables[i].table);
    }
    return CPR_OK;
}

/* Every STORE shard's rows (E3: nothing else is touched). */
static cpr_status restore_rows(cpr_client *client, const char *job, const cpr_recovery_plan *plan,
                               const cpr_exec_table *tables, size_t n_tables, size_t batch_rows,
                               cpr_exec_report *rep)
{
    shard_run run = {.job = job, .tables = tables, .n_tables = n_tables};
    cpr_status st = CPR_OK;
    for (size_t i = 0; st == CPR_OK && i < rep->n_shards; i++) {
        const cpr_plan_shard *e = cpr_recovery_plan_shard(plan, i);
        cpr_exec_shard *out = &rep->shards[i];
        *out = (cpr_exec_shard){.shard = e->shard, .source = e->source};
        if (e->source != CPR_SOURCE_STORE)
            continue;
        double start = cpri_now_s();
        run.shard = e->shard;
        run.rows = run.bytes = run.skipped = 0;
        st = restore_shard(client, job, plan, e, &run, batch_rows);
        out->as_of = e->as_of;
        out->rows = run.rows;
        out->bytes = run.bytes;
        out->rows_skipped = run.skipped;
        out->seconds = cpri_now_s() - start;
        rep->rows += run.rows;
        rep->bytes += run.bytes;
        rep->rows_skipped += run.skipped;
    }
    free(run.ids);
    free(run.values);
    free(run.state);
    return st;
}

/* Where the dense state comes from: the first shard that does not keep its
 * own (the planner gives every such shard the same source). */
static void dense_source(const cpr_recovery_plan *plan, cpr_exec_report *rep)
{
    rep->dense = CPR_DENSE_KEEP;
    for (size_t i = 0; i < rep->n_shards; i++) {
        const cpr_plan_shard *e = cpr_recovery_plan_shard(plan, i);
        if (e->dense == CPR_DENSE_KEEP)
            continue;
        rep->dense = e->dense;
        if (e->dense == CPR_DENSE_BLOB) {
            rep->dense_shard = e->dense_shard;
            rep->dense_checkpoint = e->dense_checkpoint;
        }
        return;
    }
}

static cpr_status read_dense(cpr_client *client, const char *job, const char *name,
                             cpr_exec_report *rep)
{
    if (!name || rep->dense != CPR_DENSE_BLOB)
        return CPR_OK;
    cpr_part_id id = {job, rep->dense_shard, rep->dense_checkpoint};
    return cpr_client_read_blob(client, &id, name, &rep->dense_data, &rep->dense_len);
}

cpr_status cpr_recovery_execute(cpr_client *client, const char *job,
                                const cpr_recovery_plan *plan, const cpr_exec_table *tables,
                                size_t n_tables, const cpr_exec_options *opts,
                                cpr_exec_report *out)
{
    if (!client || !job || !plan || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_recovery_execute: client, job, plan and "
                        "out must not be NULL");
    cpr_exec_options none = {0};
    if (!opts)
        opts = &none;
    cpr_exec_report rep = {.action = cpr_recovery_plan_action(plan),
                           .n_shards = cpr_recovery_plan_count(plan)};
    cpr_status st = check_tables(tables, n_tables, rep.n_shards);
    if (st)
        return st;
    double start = cpri_now_s();
    rep.shards = calloc(rep.n_shards, sizeof *rep.shards);
    if (!rep.shards)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a report of %zu shards", rep.n_shards);
    if (rep.action == CPR_PLAN_FULL)
        rep.rewind_step = cpr_recovery_plan_rewind_step(plan);
    st = restore_rows(client, job, plan, tables, n_tables, opts->batch_rows, &rep);
    dense_source(plan, &rep);
    if (st == CPR_OK)
        st = read_dense(client, job, opts->dense_blob, &rep);
    if (st) {
        cpr_exec_report_release(&rep);
        return st;
    }
    rep.seconds = cpri_now_s() - start;
    *out = rep;
    return CPR_OK;
}

void cpr_exec_report_release(cpr_exec_report *report)
{
    if (!report)
        return;
    free(report->shards);
    free(report->dense_data);
    memset(report, 0, sizeof *report);
}
