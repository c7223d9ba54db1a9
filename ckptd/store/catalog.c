/* SPDX-License-Identifier: Apache-2.0 */
/* The catalog of committed parts; invariants C1-C4 are stated in catalog.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "cpr_common.h"

void cpri_catalog_release(cpri_catalog *cat)
{
    for (size_t i = 0; i < cat->n_jobs; i++) {
        cpri_job *job = cat->jobs[i];
        for (size_t p = 0; p < job->n_parts; p++)
            cpri_meta_release(&job->parts[p]);
        for (size_t f = 0; f < job->n_folds; f++)
            cpri_meta_release(&job->folds[f]);
        free(job->folds);
        free(job->parts);
        free(job->tables);
        free(job);
    }
    free(cat->jobs);
    free(cat->by_name);
    free(cat->by_id);
    memset(cat, 0, sizeof *cat);
}

/* ---- the index (C7) ------------------------------------------------------------- */

static size_t hash_name(const char *name)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

static size_t hash_id(uint32_t id)
{
    uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 20);
}

static size_t job_hash(const cpri_catalog *cat, const cpri_job *job, int by_name)
{
    return (by_name ? hash_name(job->name) : hash_id(job->id)) & (cat->index_cap - 1);
}

static void index_put(cpri_catalog *cat, uint32_t *slots, size_t i, int by_name)
{
    size_t at = job_hash(cat, cat->jobs[i], by_name);
    while (slots[at])
        at = (at + 1) & (cat->index_cap - 1);
    slots[at] = (uint32_t)(i + 1);
}

/* Remove jobs[i]'s entry (backward-shift deletion keeps probes unbroken). */
static void index_remove(cpri_catalog *cat, uint32_t *slots, size_t i, int by_name)
{
    size_t mask = cat->index_cap - 1, at = job_hash(cat, cat->jobs[i], by_name);
    while (slots[at] != i + 1)
        at = (at + 1) & mask;
    for (size_t next = (at + 1) & mask; slots[next]; next = (next + 1) & mask) {
        size_t home = job_hash(cat, cat->jobs[slots[next] - 1], by_name);
        /* Move the entry back if its home is not in (at, next]. */
        if (((next - home) & mask) >= ((next - at) & mask)) {
            slots[at] = slots[next];
            at = next;
        }
    }
    slots[at] = 0;
}

/* Room for one more job in the index, rebuilt at twice the size if needed. */
static cpr_status index_reserve(cpri_catalog *cat)
{
    if (2 * (cat->n_jobs + 1) <= cat->index_cap)
        return CPR_OK;
    size_t cap = cat->index_cap ? 2 * cat->index_cap : 16;
    uint32_t *names = calloc(cap, sizeof *names), *ids = calloc(cap, sizeof *ids);
    if (!names || !ids) {
        free(names);
        free(ids);
        return cpr_fail(CPR_NO_MEMORY, "out of memory indexing jobs");
    }
    free(cat->by_name);
    free(cat->by_id);
    cat->by_name = names;
    cat->by_id = ids;
    cat->index_cap = cap;
    for (size_t i = 0; i < cat->n_jobs; i++) {
        index_put(cat, cat->by_name, i, 1);
        index_put(cat, cat->by_id, i, 0);
    }
    return CPR_OK;
}

cpri_job *cpri_catalog_find(const cpri_catalog *cat, const char *name)
{
    if (!cat->index_cap)
        return NULL;
    size_t mask = cat->index_cap - 1;
    for (size_t at = hash_name(name) & mask; cat->by_name[at]; at = (at + 1) & mask)
        if (strcmp(cat->jobs[cat->by_name[at] - 1]->name, name) == 0)
            return cat->jobs[cat->by_name[at] - 1];
    return NULL;
}

cpri_job *cpri_catalog_find_id(const cpri_catalog *cat, uint32_t id)
{
    if (!cat->index_cap)
        return NULL;
    size_t mask = cat->index_cap - 1;
    for (size_t at = hash_id(id) & mask; cat->by_id[at]; at = (at + 1) & mask)
        if (cat->jobs[cat->by_id[at] - 1]->id == id)
            return cat->jobs[cat->by_id[at] - 1];
    return NULL;
}

cpr_status cpri_catalog_add_job(cpri_catalog *cat, const char *name, uint32_t id,
                               cpri_job **out)
{
    cpri_job *job;
    cpr_status st = index_reserve(cat);
    if (st)
        return st;
    if (cat->n_jobs == cat->cap_jobs) {
        size_t cap = cat->cap_jobs ? cat->cap_jobs * 2 : 8;
        cpri_job **grown = realloc(cat->jobs, cap * sizeof *grown);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory adding job %s", name);
        cat->jobs = grown;
        cat->cap_jobs = cap;
    }
    job = calloc(1, sizeof *job);
    if (!job)
        return cpr_fail(CPR_NO_MEMORY, "out of memory adding job %s", name);
    snprintf(job->name, sizeof job->name, "%s", name);
    if (id == 0)
        id = cat->next_job_id ? cat->next_job_id : 1;
    job->id = id;
    if (id >= cat->next_job_id)
        cat->next_job_id = id + 1;
    cat->jobs[cat->n_jobs++] = job;
    index_put(cat, cat->by_name, cat->n_jobs - 1, 1);
    index_put(cat, cat->by_id, cat->n_jobs - 1, 0);
    *out = job;
    return CPR_OK;
}

void cpri_catalog_drop_last(cpri_catalog *cat)
{
    cpri_job *job = cat->jobs[cat->n_jobs - 1];
    if (job->n_parts)
        BUG("dropping a job that has parts");
    index_remove(cat, cat->by_name, cat->n_jobs - 1, 1);
    index_remove(cat, cat->by_id, cat->n_jobs - 1, 0);
    cat->n_jobs--;
    free(job->parts);
    free(job->tables);
    free(job);
}

static int part_cmp(const cpri_part_meta *a, uint64_t ckpt, uint32_t shard)
{
    if (a->checkpoint != ckpt)
        return a->checkpoint < ckpt ? -1 : 1;
    if (a->shard != shard)
        return a->shard < shard ? -1 : 1;
    return 0;
}

/* Index of the first part >= (ckpt, shard). */
static size_t lower_bound(const cpri_job *job, uint64_t ckpt, uint32_t shard)
{
    size_t lo = 0, hi = job->n_parts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (part_cmp(&job->parts[mid], ckpt, shard) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

cpri_part_meta *cpri_job_find_part(const cpri_job *job, uint32_t shard, uint64_t ckpt)
{
    size_t i = lower_bound(job, ckpt, shard);
    if (i < job->n_parts && part_cmp(&job->parts[i], ckpt, shard) == 0)
        return &job->parts[i];
    return NULL;
}

const cpri_part_meta *cpri_job_newest(const cpri_job *job, uint32_t shard,
                                    int consistent_kinds_only)
{
    for (size_t i = job->n_parts; i-- > 0;) {
        const cpri_part_meta *p = &job->parts[i];
        if (p->shard != shard)
            continue;
        if (!consistent_kinds_only || p->kind != CPR_KIND_PRIORITY)
            return p;
    }
    return NULL;
}

/* C3: computed once when the part is added (C2 makes that sufficient). */
static int compute_consistent(const cpri_job *job, const cpri_part_meta *m)
{
    if (m->kind == CPR_KIND_FULL)
        return 1;
    if (m->kind != CPR_KIND_DELTA)
        return 0;
    if (job->floor && m->checkpoint == job->floor)
        return 1;
    const cpri_part_meta *base = cpri_job_find_part(job, m->shard, m->base);
    if (base)
        return base->kind != CPR_KIND_PRIORITY && base->consistent;
    /* C3: a base that retention removed, vouched for by the shard's fold
     * at the floor (its `base`: the complete chain it holds). */
    const cpri_part_meta *f = job->floor && m->base && m->base < job->floor
                                  ? cpri_job_fold_at_most(job, m->shard, job->floor)
                                  : NULL;
    return f && f->checkpoint == job->floor && f->base == m->base;
}

void cpri_job_settle_consistency(cpri_job *job)
{
    for (size_t i = 0; i < job->n_parts; i++) /* (checkpoint, shard) order: bases first */
        job->parts[i].consistent = compute_consistent(job, &job->parts[i]);
}

uint64_t cpri_job_chain_head(const cpri_job *job, uint32_t shard, uint64_t at)
{
    /* The newest FULL or DELTA of the shard below `at`, and the fold below
     * `at` that may stand for one retention removed: a complete chain, or 0. */
    const cpri_part_meta *p = NULL;
    for (size_t i = 0; i < job->n_parts && job->parts[i].checkpoint < at; i++)
        if (job->parts[i].shard == shard && job->parts[i].kind != CPR_KIND_PRIORITY)
            p = &job->parts[i];
    const cpri_part_meta *f = at ? cpri_job_fold_at_most(job, shard, at - 1) : NULL;
    if (f && f->base && (!p || p->checkpoint < f->base))
        return f->base; /* its part is gone (below the floor): the fold vouched for it */
    return p && p->consistent ? p->checkpoint : 0;
}

cpr_status cpri_job_add_part(cpri_job *job, cpri_part_meta *m)
{
    size_t at;
    if (job->n_parts == job->cap_parts) {
        size_t cap = job->cap_parts ? job->cap_parts * 2 : 16;
        cpri_part_meta *grown = realloc(job->parts, cap * sizeof *grown);
        if (!grown) {
            cpri_meta_release(m);
            return cpr_fail(CPR_NO_MEMORY, "out of memory adding a part to job %s",
                            job->name);
        }
        job->parts = grown;
        job->cap_parts = cap;
    }
    at = lower_bound(job, m->checkpoint, m->shard);
    if (at < job->n_parts && part_cmp(&job->parts[at], m->checkpoint, m->shard) == 0)
        BUG("a part was committed twice");
    m->consistent = compute_consistent(job, m);
    memmove(&job->parts[at + 1], &job->parts[at],
            (job->n_parts - at) * sizeof *job->parts);
    job->parts[at] = *m;
    job->n_parts++;
    memset(m, 0, sizeof *m);
    return cpri_job_merge_tables(job, job->parts[at].tables, job->parts[at].n_tables);
}

size_t cpri_job_drop_below(cpri_job *job, uint64_t floor)
{
    return cpri_job_drop_first(job, lower_bound(job, floor, 0));
}

size_t cpri_job_drop_first(cpri_job *job, size_t n)
{
    if (n == 0)
        return 0; /* (parts may be NULL: memmove must not see it) */
    for (size_t i = 0; i < n; i++)
        cpri_meta_release(&job->parts[i]);
    memmove(job->parts, job->parts + n, (job->n_parts - n) * sizeof *job->parts);
    job->n_parts -= n;
    return n;
}

const cpr_table_schema *cpri_job_table(const cpri_job *job, uint32_t table)
{
    for (size_t i = 0; i < job->n_tables; i++)
        if (job->tables[i].table == table)
            return &job->tables[i];
    return NULL;
}

cpr_status cpri_job_merge_tables(cpri_job *job, const cpr_table_schema *tables, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const cpr_table_schema *known = cpri_job_table(job, tables[i].table);
        if (known && (known->dim != tables[i].dim || known->state_dim != tables[i].state_dim))
            return cpr_fail(CPR_INVALID_ARGUMENT,
                            "table %u of job %s has dim %u and state_dim %u; this "
                            "part declares dim %u and state_dim %u: a table's shape "
                            "cannot change within a job",
                            tables[i].table, job->name, known->dim, known->state_dim,
                            tables[i].dim, tables[i].state_dim);
    }
    for (size_t i = 0; i < n; i++) {
        cpr_table_schema *known = (cpr_table_schema *)cpri_job_table(job, tables[i].table);
        if (known) {
            if (tables[i].rows > known->rows)
                known->rows = tables[i].rows;
            continue;
        }
        cpr_table_schema *grown = realloc(job->tables, (job->n_tables + 1) * sizeof *grown);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory recording tables of %s", job->name);
        job->tables = grown;
        job->tables[job->n_tables++] = tables[i];
    }
    return CPR_OK;
}

/* Is the checkpoint of parts [first, end) of the sorted array a cut?
 * cpr/types.h's rule; every part here is committed (C1). */
static int is_cut(const cpri_job *job, size_t first, size_t end)
{
    cpr_cut_scan k = {0};
    for (size_t i = first; i < end; i++) {
        const cpri_part_meta *p = &job->parts[i];
        if (!cpr_cut_scan_add(&k, p->shard, p->num_shards, p->consistent))
            break;
    }
    return cpr_cut_scan_done(&k);
}

size_t cpri_job_cuts(const cpri_job *job, uint64_t *cuts, size_t max)
{
    size_t count = 0, end = job->n_parts;
    while (end > 0) {
        size_t first = end - 1;
        uint64_t ckpt = job->parts[first].checkpoint;
        if (job->floor && ckpt < job->floor)
            break; /* C5: below the floor nothing is a cut any more */
        while (first > 0 && job->parts[first - 1].checkpoint == ckpt)
            first--;
        if (is_cut(job, first, end)) {
            if (count < max)
                cuts[count] = ckpt;
            count++;
        }
        end = first;
    }
    return count;
}

cpr_status cpri_job_add_fold(cpri_job *job, cpri_part_meta *m)
{
    if (job->n_folds == job->cap_folds) {
        size_t cap = job->cap_folds ? job->cap_folds * 2 : 8;
        cpri_part_meta *grown = realloc(job->folds, cap * sizeof *grown);
        if (!grown) {
            cpri_meta_release(m);
            return cpr_fail(CPR_NO_MEMORY, "out of memory adding a fold to job %s", job->name);
        }
        job->folds = grown;
        job->cap_folds = cap;
    }
    size_t at = 0;
    while (at < job->n_folds &&
           (job->folds[at].shard < m->shard ||
            (job->folds[at].shard == m->shard && job->folds[at].checkpoint < m->checkpoint)))
        at++;
    memmove(&job->folds[at + 1], &job->folds[at], (job->n_folds - at) * sizeof *job->folds);
    job->folds[at] = *m;
    job->n_folds++;
    memset(m, 0, sizeof *m);
    /* A fold may hold the only rows left of a table (the parts that
     * declared it dropped below the floor): the job still has it. A store
     * written before this rule may since have a part giving the table
     * another shape: that part's shape stands (the store still opens), and
     * restores of the fold's rows of it fail their dims check, named. */
    const cpri_part_meta *f = &job->folds[at];
    if (cpri_job_merge_tables(job, f->tables, f->n_tables) != CPR_OK)
        cpri_log(CPR_LOG_WARN, "job %s: the tables of the fold of shard %u at %llu are not "
                 "the job's (%s); restores of its rows of them will fail", job->name,
                 f->shard, (unsigned long long)f->checkpoint, cpr_errmsg());
    return CPR_OK;
}

void cpri_job_drop_fold(cpri_job *job, size_t i)
{
    cpri_meta_release(&job->folds[i]);
    memmove(&job->folds[i], &job->folds[i + 1], (job->n_folds - i - 1) * sizeof *job->folds);
    job->n_folds--;
}

const cpri_part_meta *cpri_job_fold_at_most(const cpri_job *job, uint32_t shard, uint64_t max)
{
    const cpri_part_meta *best = NULL;
    for (size_t i = 0; i < job->n_folds; i++)
        if (job->folds[i].shard == shard && job->folds[i].checkpoint <= max)
            best = &job->folds[i];
    return best;
}
