/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reads and operations that fan out over the nodes of a client and merge
 * what they answer: restores (into callbacks or a caller's table), blob
 * reads, the list of jobs, stats, verify and gc. With several nodes, a node
 * without any part of the job is skipped (NOT_FOUND there is not an error
 * unless every node says it), and consistent restores and gc floors use the
 * cut computed over all nodes (client.c says why).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "cpr_common.h"

/* ---- restore ----------------------------------------------------------------------- */

/* One node's part of a restore, retried on CPR_UNAVAILABLE while nothing has
 * been delivered (after that a repeat would deliver rows twice). A direct
 * read that fails with CPR_IO or CPR_CORRUPT before delivering a row (a
 * segment this process may not read, one removed since the plan, a copy of
 * the store that differs) is asked once more without direct reads: the
 * node then reads and checks the blocks itself, and its answer stands. */
static cpr_status restore_node(cpr_client *c, cpri_node *node, const cpr_restore_query *q,
                               cpr_row_fn fn, void *ctx, uint64_t *rows, uint64_t *bytes)
{
    cpri_direct *direct = c->direct;
    char direct_why[512] = ""; /* why a direct read gave up, for a failed retry's message */
    for (unsigned attempt = 0;;) {
        uint64_t r = 0, b = 0;
        int direct_failed = 0;
        cpr_status st = cpri_node_restore(node, q, direct, c->opts.stream_timeout_s, fn, ctx,
                                          &r, &b, &direct_failed);
        *rows += r;
        *bytes += b;
        if ((st == CPR_IO || st == CPR_CORRUPT) && direct_failed && r == 0) {
            snprintf(direct_why, sizeof direct_why, "%s", cpr_errmsg());
            cpri_log(CPR_LOG_WARN, "restore of %s from %s: %s; reading through the daemon",
                     q->job, cpri_node_name(node), direct_why);
            direct = NULL;
            continue;
        }
        if (st != CPR_OK && st != CPR_UNAVAILABLE && direct_why[0]) {
            char why[1024];
            snprintf(why, sizeof why, "%s", cpr_errmsg());
            return cpr_fail(st, "%s (through the daemon, after the %s)", why, direct_why);
        }
        if (st != CPR_UNAVAILABLE)
            return st;
        if (r) {
            char why[1024];
            snprintf(why, sizeof why, "%s", cpr_errmsg());
            return cpr_fail(st, "%s (after %llu rows had been delivered, so not retried)", why,
                            (unsigned long long)r);
        }
        if (!cpri_client_backoff(c, attempt++)) /* the fallback is no attempt */
            return st;
    }
}

/* Which nodes a restore asks: those holding `shards`, or all. want[i] = 1. */
static void nodes_for(const cpr_client *c, const char *job, const uint32_t *shards,
                      size_t n_shards, uint8_t *want)
{
    for (size_t i = 0; i < c->n_nodes; i++)
        want[i] = n_shards == 0;
    for (size_t s = 0; s < n_shards; s++)
        want[cpr_client_node_of(c, job, shards[s])] = 1;
}

/* Turn the query's state into one checkpoint id before anything is read, so
 * that every node reads the same state and the result names it: the cut for
 * `consistent`, else the newest committed id at or below as_of (any, for
 * as_of 0). With several nodes the placement of the job's parts is checked on
 * the way. */
static cpr_status resolve_as_of(cpr_client *c, cpr_restore_query *q)
{
    cpr_status st = CPR_OK;
    if (q->consistent) {
        uint64_t *cuts = NULL;
        size_t n_cuts = 0;
        st = cpri_client_job_cuts(c, q->job, &cuts, &n_cuts);
        if (st == CPR_OK && n_cuts == 0)
            st = cpr_fail(CPR_NOT_FOUND, "job %s has no consistent cut: no checkpoint id has "
                          "a committed FULL (or complete DELTA) part of every shard", q->job);
        if (st == CPR_OK)
            q->as_of = cuts[0];
        free(cuts);
        q->consistent = 0;
        return st;
    }
    cpr_part_info *parts = NULL;
    size_t n = 0;
    uint64_t used = 0, limit = q->as_of ? q->as_of : UINT64_MAX;
    st = cpri_client_list_checked(c, q->job, c->n_nodes > 1, &parts, &n);
    for (size_t i = 0; st == CPR_OK && i < n; i++)
        if (parts[i].committed && parts[i].checkpoint <= limit && parts[i].checkpoint > used)
            used = parts[i].checkpoint;
    free(parts);
    if (st == CPR_OK && !q->as_of && !used)
        st = cpr_fail(CPR_NOT_FOUND, "job %s has no committed part yet", q->job);
    /* The state is as of the newest committed id at or below the one asked
     * for: that id is what every node reads and what the result reports.
     * None: the nodes say why (below the retention floor, or no such part). */
    if (st == CPR_OK && used)
        q->as_of = used;
    return st;
}

/* More than one shard count (num_shards) among the job's committed parts
 * at or below as_of. */
static cpr_status job_resharded(cpr_client *c, const char *job, uint64_t as_of, int *resharded)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    uint32_t seen = 0;
    cpr_status st = cpri_client_list_checked(c, job, 1, &parts, &n);
    *resharded = 0;
    for (size_t i = 0; st == CPR_OK && i < n; i++) {
        if (!parts[i].committed || parts[i].checkpoint > as_of)
            continue;
        *resharded |= seen && parts[i].num_shards != seen;
        seen = parts[i].num_shards;
    }
    free(parts);
    return st;
}

cpr_status cpr_client_restore(cpr_client *c, const cpr_restore_query *query,
                              const uint32_t *shards, size_t n_shards, cpr_row_fn fn,
                              void *ctx, cpr_restore_result *result)
{
    if (!c || !query || !query->job || !fn || (n_shards && !shards))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_restore: client, query, query->job, "
                        "fn and shards (when n_shards > 0) must not be NULL");
    if ((query->n_tables && !query->tables) || (query->n_ranges && !query->ranges))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_restore: query->%s is NULL with "
                        "n_%s %zu: give the array, or a count of 0 (every %s)",
                        !query->tables && query->n_tables ? "tables" : "ranges",
                        !query->tables && query->n_tables ? "tables" : "ranges",
                        !query->tables && query->n_tables ? query->n_tables : query->n_ranges,
                        !query->tables && query->n_tables ? "table" : "row");
    if (query->batch_rows > CPR_RESTORE_BATCH_ROWS_MAX) /* the wire carries 32 bits */
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_restore: batch_rows %zu is above "
                        "the limit of %u", query->batch_rows, CPR_RESTORE_BATCH_ROWS_MAX);
    cpr_restore_query q = *query;
    cpr_status st = resolve_as_of(c, &q);
    if (st)
        return st;
    uint8_t want[256];
    nodes_for(c, q.job, shards, n_shards, want);
    /* Gateways of one store each serve all of it: one of them is asked
     * (resolve_as_of listed every node, so they said what they share). */
    for (size_t i = 0; i < c->n_nodes; i++)
        for (size_t j = 0; want[i] && j < i; j++)
            if (want[j] && cpri_client_same_store(c, i, j))
                want[i] = 0;
    uint64_t rows = 0, bytes = 0;
    size_t asked = 0, missing = 0;
    size_t n_want = 0;
    for (size_t i = 0; i < c->n_nodes; i++)
        n_want += want[i];
    /* Several nodes: their answers are merged by version (merge.c), since
     * after a resharding a row may be on more than one of them, and the
     * parts left after retention do not always show that it was. */
    int merge = n_want > 1, old_daemon = 0;
    if (merge)
        st = cpri_restore_merged(c, &q, want, fn, ctx, &rows, &bytes, &asked, &missing,
                                 &old_daemon);
    if (merge && st != CPR_OK && old_daemon && rows == 0) {
        /* merge.c M5: a daemon without versions. Node after node is right
         * unless the parts show a resharding. */
        char why[1024];
        snprintf(why, sizeof why, "%s", cpr_errmsg());
        int resharded = 0;
        st = job_resharded(c, q.job, q.as_of, &resharded);
        if (st == CPR_OK && resharded)
            st = cpr_fail(CPR_FAILED_PRECONDITION, "%s (job %s was resharded: its rows must "
                          "be merged by version)", why, q.job);
        if (st == CPR_OK) {
            cpri_log(CPR_LOG_WARN, "restore of %s: %s; restoring node after node", q.job, why);
            merge = 0;
            asked = missing = 0;
            bytes = 0;
        }
    }
    for (size_t i = 0; i < c->n_nodes && st == CPR_OK && !merge; i++) {
        if (!want[i])
            continue;
        uint64_t node_rows = 0;
        asked++;
        st = restore_node(c, c->nodes[i], &q, fn, ctx, &node_rows, &bytes);
        rows += node_rows;
        if (st == CPR_NOT_FOUND && c->n_nodes > 1 && node_rows == 0) {
            missing++;
            st = CPR_OK; /* the job has nothing on this node */
        }
    }
    if (st == CPR_OK && asked && missing == asked)
        st = cpr_fail(CPR_NOT_FOUND, "job %s: none of the %zu node(s) asked holds it", q.job,
                      asked);
    if (st)
        return st;
    if (result) {
        result->as_of = q.as_of;
        result->rows = rows;
        result->bytes = bytes;
    }
    return CPR_OK;
}

static cpr_status into_table(void *ctx, const cpr_row_batch *b)
{
    const cpr_restore_into *in = ctx;
    if (b->table != in->table)
        return cpr_fail(CPR_INVALID_ARGUMENT, "restore into table %u received rows of table "
                        "%u: restrict the query to that table", in->table, b->table);
    size_t dim = b->n ? b->values_count / b->n : in->dim;
    size_t sdim = b->n ? b->state_count / b->n : in->state_dim;
    if (dim != in->dim || (in->state && sdim != in->state_dim))
        return cpr_fail(CPR_INVALID_ARGUMENT, "table %u has dim %zu and state_dim %zu in "
                        "storage, the buffer dim %u and state_dim %u", in->table, dim, sdim,
                        in->dim, in->state_dim);
    for (size_t i = 0, k; i < b->n; i += k) {
        uint64_t row = b->ids[i];
        if (row < in->row_base || row - in->row_base >= in->n_rows)
            return cpr_fail(CPR_INVALID_ARGUMENT, "restored row %llu of table %u is outside "
                            "the buffer's rows [%llu, %llu): restrict the query's ranges",
                            (unsigned long long)row, in->table,
                            (unsigned long long)in->row_base,
                            (unsigned long long)(in->row_base + in->n_rows));
        uint64_t at = row - in->row_base;
        /* A run of consecutive ids (a FULL part's rows, a range) inside the
         * buffer is one copy: rows are contiguous on both sides. */
        for (k = 1; i + k < b->n && b->ids[i + k] == row + k && at + k < in->n_rows; k++)
            ;
        memcpy(in->values + at * in->dim, b->values + i * dim, k * dim * sizeof(float));
        if (in->state && sdim)
            memcpy(in->state + at * sdim, b->state + i * sdim, k * sdim * sizeof(float));
        if (in->restored)
            memset(in->restored + at, 1, k);
    }
    return CPR_OK;
}

cpr_status cpr_client_restore_table(cpr_client *c, const cpr_restore_query *query,
                                    const uint32_t *shards, size_t n_shards,
                                    const cpr_restore_into *into, cpr_restore_result *result)
{
    if (!into || !into->values || !into->dim || !query)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_restore_table: into, into->values, "
                        "into->dim and query must be set");
    cpr_restore_query q = *query;
    q.tables = &into->table;
    q.n_tables = 1;
    return cpr_client_restore(c, &q, shards, n_shards, into_table, (void *)into, result);
}

/* ---- blobs ------------------------------------------------------------------------------ */

typedef struct blob_buf {
    uint8_t *data;
    uint64_t size, got;
    int sized;
} blob_buf;

static cpr_status collect_chunk(void *ctx, uint64_t size, uint64_t offset, const void *data,
                                size_t len)
{
    blob_buf *b = ctx;
    if (!b->sized) {
        if (size > SIZE_MAX / 2)
            return cpr_fail(CPR_RESOURCE_EXHAUSTED, "blob of %llu bytes is too large to read "
                            "into memory", (unsigned long long)size);
        b->data = malloc(size ? size : 1);
        if (!b->data)
            return cpr_fail(CPR_NO_MEMORY, "out of memory for a %llu-byte blob",
                            (unsigned long long)size);
        b->size = size;
        b->sized = 1;
    }
    if (offset != b->got || len > b->size - b->got)
        return cpr_fail(CPR_CORRUPT, "blob chunk at offset %llu (%zu bytes) does not follow "
                        "the %llu bytes read of a %llu-byte blob", (unsigned long long)offset,
                        len, (unsigned long long)b->got, (unsigned long long)b->size);
    if (len)
        memcpy(b->data + offset, data, len);
    b->got += len;
    return CPR_OK;
}

typedef struct blob_try {
    cpr_client *c;
    cpri_node *node;
    const cpr_part_id *id;
    const char *name;
    blob_buf buf;
} blob_try;

static cpr_status blob_once(void *ctx)
{
    blob_try *t = ctx;
    free(t->buf.data);
    memset(&t->buf, 0, sizeof t->buf); /* a retry starts over */
    return cpri_node_read_blob(t->node, t->id, t->name, t->c->opts.stream_timeout_s,
                              collect_chunk, &t->buf);
}

cpr_status cpr_client_read_blob(cpr_client *c, const cpr_part_id *id, const char *name,
                                void **data, size_t *len)
{
    if (!c || !id || !id->job || !name || !data || !len)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_read_blob: arguments must not be NULL");
    blob_try t = {c, c->nodes[cpr_client_node_of(c, id->job, id->shard)], id, name, {0}};
    cpr_status st = cpri_client_retry(c, blob_once, &t);
    if (st == CPR_OK && !t.buf.sized) { /* no chunk at all: an empty blob */
        t.buf.data = malloc(1);
        t.buf.sized = 1;
        if (!t.buf.data)
            st = cpr_fail(CPR_NO_MEMORY, "out of memory");
    }
    if (st == CPR_OK && t.buf.got != t.buf.size)
        st = cpr_fail(CPR_CORRUPT, "blob %s ended after %llu of %llu bytes", name,
                      (unsigned long long)t.buf.got, (unsigned long long)t.buf.size);
    if (st) {
        free(t.buf.data);
        return st;
    }
    *data = t.buf.data;
    *len = (size_t)t.buf.size;
    return CPR_OK;
}

/* ---- operations -------------------------------------------------------------------------- */

typedef struct stats_try {
    cpr_client *c;
    cpri_node *node;
    cpr_store_stats stats;
} stats_try;

static cpr_status stats_once(void *ctx)
{
    stats_try *t = ctx;
    return cpri_node_stats(t->node, t->c->opts.call_timeout_s, &t->stats);
}

cpr_status cpr_client_stats(cpr_client *c, cpr_store_stats *out)
{
    if (!c || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_stats: arguments must not be NULL");
    cpr_store_stats sum;
    memset(&sum, 0, sizeof sum);
    for (size_t i = 0; i < c->n_nodes; i++) {
        stats_try t = {c, c->nodes[i], {0}};
        cpr_status st = cpri_client_retry(c, stats_once, &t);
        const cpr_store_stats *sp = &t.stats;
        if (st)
            return st;
        sum.jobs += sp->jobs; /* a job spread over nodes counts once per node */
        sum.parts_committed += sp->parts_committed;
        sum.parts_open += sp->parts_open;
        sum.rows_in += sp->rows_in;
        sum.bytes_in += sp->bytes_in;
        sum.rows_out += sp->rows_out;
        sum.bytes_out += sp->bytes_out;
        sum.store_bytes += sp->store_bytes;
        for (int k = 0; k < CPR_STATUS_COUNT_; k++)
            sum.errors[k] += sp->errors[k];
    }
    *out = sum;
    return CPR_OK;
}

typedef struct problems_of {
    cpr_problem_fn fn;
    void *ctx;
    const char *node;
} problems_of;

static void node_problem(void *ctx, const char *what, const char *where)
{
    problems_of *p = ctx;
    char at[512];
    snprintf(at, sizeof at, "%s: %s", p->node, where);
    p->fn(p->ctx, what, at);
}

cpr_status cpr_client_verify(cpr_client *c, const char *job, cpr_problem_fn fn, void *ctx,
                             cpr_verify_report *report)
{
    if (!c)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_verify: client must not be NULL");
    cpr_verify_report sum = {0};
    size_t missing = 0;
    for (size_t i = 0; i < c->n_nodes; i++) {
        cpr_verify_report r = {0};
        problems_of p = {fn, ctx, cpri_node_name(c->nodes[i])};
        cpr_status st = cpri_node_verify(c->nodes[i], job, c->opts.stream_timeout_s,
                                        fn ? node_problem : NULL, &p, &r);
        if (st == CPR_NOT_FOUND && job && c->n_nodes > 1) {
            missing++;
            continue;
        }
        if (st != CPR_OK && st != CPR_CORRUPT)
            return st;
        sum.rows_checked += r.rows_checked;
        sum.blobs_checked += r.blobs_checked;
        sum.bytes_checked += r.bytes_checked;
        sum.problems += r.problems;
    }
    if (missing == c->n_nodes)
        return cpr_fail(CPR_NOT_FOUND, "job %s has no parts on any node", job);
    if (report)
        *report = sum;
    if (sum.problems)
        return cpr_fail(CPR_CORRUPT, "verify found %llu problem(s)",
                        (unsigned long long)sum.problems);
    return CPR_OK;
}

static void add_gc(cpr_gc_report *sum, const cpr_gc_report *r)
{
    if (r->floor > sum->floor)
        sum->floor = r->floor;
    sum->parts_removed += r->parts_removed;
    sum->versions_removed += r->versions_removed;
    sum->uncommitted_removed += r->uncommitted_removed;
    sum->bytes_before += r->bytes_before;
    sum->bytes_after += r->bytes_after;
}

#define DEFAULT_KEEP 2 /* the store's default, for jobs spread over several nodes */

/* One job over several nodes: the floor from the merged cuts, told to each. */
static cpr_status gc_spread_job(cpr_client *c, const char *job, uint32_t keep,
                                cpr_gc_report *sum)
{
    uint64_t *cuts = NULL;
    size_t n_cuts = 0;
    cpr_status st = cpri_client_job_cuts(c, job, &cuts, &n_cuts);
    if (st)
        return st;
    uint32_t k = keep ? keep : DEFAULT_KEEP;
    uint64_t floor = n_cuts >= k ? cuts[k - 1] : 0;
    free(cuts);
    for (size_t i = 0; i < c->n_nodes && st == CPR_OK; i++) {
        cpr_gc_report r = {0};
        /* With a floor the node computes nothing itself: keep is not sent. */
        st = cpri_node_gc(c->nodes[i], job, floor ? 0 : k, floor, c->opts.stream_timeout_s, &r);
        if (st == CPR_NOT_FOUND) {
            st = CPR_OK; /* no part of the job here */
            continue;
        }
        if (st == CPR_FAILED_PRECONDITION && floor) {
            /* The node refuses the floor (a daemon older than
             * GcRequest.floor_is_cut whose parts are all older than it, or a
             * part at it that is not consistent there): it keeps its parts,
             * whose rows may be the newest versions. */
            cpri_log(CPR_LOG_INFO, "gc of %s on %s skipped: %s", job,
                    cpri_node_name(c->nodes[i]), cpr_errmsg());
            st = CPR_OK;
            continue;
        }
        if (st == CPR_OK)
            add_gc(sum, &r);
    }
    return st;
}

typedef struct jobs_try {
    cpr_client *c;
    cpri_node *node;
    char **jobs;
    size_t n;
} jobs_try;

static cpr_status jobs_once(void *ctx)
{
    jobs_try *t = ctx;
    return cpri_node_list_jobs(t->node, t->c->opts.call_timeout_s, &t->jobs, &t->n);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Move node's names[0..k) to the end of *all (room for a NULL kept). */
static cpr_status append_names(char ***all, size_t *total, char **names, size_t k)
{
    char **grown = realloc(*all, (*total + k + 1) * sizeof *grown);
    if (!grown)
        return cpr_fail(CPR_NO_MEMORY, "out of memory listing jobs");
    *all = grown;
    for (size_t j = 0; j < k; j++) {
        grown[(*total)++] = names[j];
        names[j] = NULL;
    }
    grown[*total] = NULL;
    return CPR_OK;
}

/* Every job that any node holds: sorted, deduplicated, NULL-terminated. */
static cpr_status all_jobs(cpr_client *c, char ***jobs, size_t *n)
{
    char **all = calloc(1, sizeof *all);
    size_t total = 0;
    cpr_status st = all ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory listing jobs");
    for (size_t i = 0; i < c->n_nodes && st == CPR_OK; i++) {
        jobs_try t = {c, c->nodes[i], NULL, 0};
        st = cpri_client_retry(c, jobs_once, &t);
        if (st == CPR_OK)
            st = append_names(&all, &total, t.jobs, t.n);
        cpr_names_free(t.jobs, t.n); /* frees only what was not moved */
    }
    if (st) {
        cpr_names_free(all, total);
        return st;
    }
    qsort(all, total, sizeof *all, by_name);
    size_t kept = 0;
    for (size_t i = 0; i < total; i++) {
        if (kept && strcmp(all[kept - 1], all[i]) == 0)
            free(all[i]);
        else
            all[kept++] = all[i];
    }
    all[kept] = NULL;
    *jobs = all;
    *n = kept;
    return CPR_OK;
}

cpr_status cpr_client_list_jobs(cpr_client *c, char ***jobs, size_t *n)
{
    if (!c || !jobs || !n)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_list_jobs: arguments must not be NULL");
    return all_jobs(c, jobs, n);
}

cpr_status cpr_client_gc(cpr_client *c, const char *job, uint32_t keep, cpr_gc_report *report)
{
    if (!c)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_gc: client must not be NULL");
    cpr_gc_report sum = {0};
    cpr_status st = CPR_OK;
    if (c->n_nodes == 1) {
        st = cpri_node_gc(c->nodes[0], job, keep, 0, c->opts.stream_timeout_s, &sum);
    } else if (job) {
        st = gc_spread_job(c, job, keep, &sum);
    } else {
        char **jobs = NULL;
        size_t n = 0;
        st = all_jobs(c, &jobs, &n);
        /* One job that cannot be collected does not stop the others. */
        for (size_t i = 0; i < n; i++) {
            cpr_status job_st = gc_spread_job(c, jobs[i], keep, &sum);
            /* A job these nodes hold only in folds (its parts are on nodes this
             * client does not know): nothing here to collect. */
            if (job_st == CPR_NOT_FOUND)
                continue;
            if (job_st && st == CPR_OK) {
                char why[1024];
                snprintf(why, sizeof why, "%s", cpr_errmsg());
                st = cpr_fail(job_st, "gc of job %s: %s", jobs[i], why);
            }
        }
        cpr_names_free(jobs, n);
    }
    if (st == CPR_OK && report)
        *report = sum;
    return st;
}
