/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention (GC) and verification.
 *
 * GC of a job keeps the newest K consistent cuts and everything newer. With
 * F the K-th newest cut (the new floor), the retained states are "as of C"
 * for every C >= F. A version (row r, checkpoint c) is needed by one of them
 * iff c >= F, or it is r's newest version with c <= F. Everything else goes.
 * cpr_store_gc_floor is the same run with F given by the caller (a client
 * that computed the cut over every store holding the job) instead of chosen
 * from this store's cuts; only choose_floor differs.
 *
 * Unneeded row versions are not deleted one by one (a tombstone per
 * version, as many as the data, then a rewrite to drop both): they are left
 * to the retention compaction filter (retention_filter.h, F1-F4), which
 * drops them while RocksDB rewrites files. Periodic retention
 * (cpr_store_gc_lazy) stops there and lets RocksDB's own compactions, which
 * new checkpoints keep triggering, reclaim the space; an explicit GC
 * compacts the job's range so that the space is returned before it answers.
 *
 * Order, so that a crash at any point leaves every retained state intact:
 *   G1. persist the floor F (synced write), and publish it in memory under
 *       store->mu: from then on nothing below F can be restored, so no
 *       reader depends on the versions about to go (restores already running
 *       hold iterators that pin their files, F3); then give F to the filter;
 *   G2. delete the part records below F, then their blob directories
 *       (a directory left by a crash here has no record: swept, S2);
 *   G3. explicit GC only: compact the key ranges of the jobs that have
 *       versions to drop (also when a later job of the run failed: their
 *       floors are already durable and published).
 * A crash between steps only leaves garbage that the next GC removes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"
#include "store_internal.h"

typedef struct gc_job {
    uint32_t job_id;
    char name[CPR_NAME_MAX + 1];
    uint64_t floor;     /* 0: nothing to do */
} gc_job;

static cpr_status write_floor(cpr_store *store, uint32_t job_id, uint64_t floor)
{
    unsigned char key[CPR_FLOOR_KEY_LEN], val[8];
    char *err = NULL;
    cpr_key_floor(key, job_id);
    cpr_put_be64(val, floor);
    /* Synced even under no_sync: the filter's drops become durable through
     * RocksDB's synced MANIFEST, so the floor must be durable first (F2). */
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(wo, 1);
    rocksdb_put(store->db, wo, (const char *)key, sizeof key, (const char *)val, sizeof val,
                &err);
    rocksdb_writeoptions_destroy(wo);
    return err ? cpr_rocks_error(err, "recording the retention floor") : CPR_OK;
}

static cpr_status flush_deletes(cpr_store *store, rocksdb_writebatch_t *wb, int sync)
{
    char *err = NULL;
    if (rocksdb_writebatch_count(wb) == 0)
        return CPR_OK;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(wo, sync && !store->opts.no_sync);
    rocksdb_write(store->db, wo, wb, &err);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_writebatch_clear(wb);
    return err ? cpr_rocks_error(err, "deleting reclaimed part records") : CPR_OK;
}

/* G2: every part record below the floor (scanned, not taken from the
 * catalog, so that records a crashed GC left behind go too), then their
 * blob directories. */
static cpr_status delete_parts(cpr_store *store, const gc_job *g, uint64_t *removed)
{
    unsigned char lower[CPR_META_KEY_LEN], upper[5] = {'M'};
    cpr_key_meta(lower, g->job_id, 0, 0);
    cpr_put_be32(upper + 1, g->job_id + 1);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_iterate_upper_bound(ro, (const char *)upper, sizeof upper);
    rocksdb_iterator_t *it = rocksdb_create_iterator(store->db, ro);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    damaged_part *doomed = NULL;
    size_t n = 0, cap = 0;
    cpr_status st = CPR_OK;
    for (rocksdb_iter_seek(it, (const char *)lower, sizeof lower);
         st == CPR_OK && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen;
        const char *key = rocksdb_iter_key(it, &klen);
        uint32_t job_id, shard;
        uint64_t ckpt;
        if (cpr_key_meta_parse(key, klen, &job_id, &shard, &ckpt) != 0 || ckpt >= g->floor)
            continue;
        if (n == cap) {
            damaged_part *grown = realloc(doomed, (cap = cap ? cap * 2 : 64) * sizeof *grown);
            if (!grown) {
                st = cpr_fail(CPR_NO_MEMORY, "out of memory reclaiming parts");
                break;
            }
            doomed = grown;
        }
        doomed[n++] = (damaged_part){job_id, shard, ckpt};
        rocksdb_writebatch_delete(wb, key, klen);
    }
    if (st == CPR_OK)
        st = flush_deletes(store, wb, 1);
    for (size_t i = 0; st == CPR_OK && i < n; i++) {
        char *dir = cpr_part_dirname(g->name, doomed[i].shard, doomed[i].checkpoint,
                                     store->blobs_dir);
        if (dir)
            cpr_rmtree(dir);
        free(dir);
    }
    *removed += n;
    free(doomed);
    rocksdb_writebatch_destroy(wb);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    return st;
}

/* G3: compact one job's rows and part records; the filter drops the
 * versions below its floor on the way. */
static void compact_range(cpr_store *store, char type, uint32_t job_id)
{
    unsigned char begin[5] = {(unsigned char)type}, end[5] = {(unsigned char)type};
    cpr_put_be32(begin + 1, job_id);
    cpr_put_be32(end + 1, job_id + 1);
    rocksdb_compactoptions_t *co = rocksdb_compactoptions_create();
    rocksdb_compactoptions_set_bottommost_level_compaction(co, 1 /* kForce */);
    rocksdb_compact_range_opt(store->db, co, (const char *)begin, sizeof begin,
                              (const char *)end, sizeof end);
    rocksdb_compactoptions_destroy(co);
}

static void compact_job(cpr_store *store, uint32_t job_id)
{
    compact_range(store, 'M', job_id);
    compact_range(store, 'R', job_id);
}

/* What a run asks for: keep `keep` cuts, or (floor > 0) exactly that floor. */
typedef struct gc_goal {
    uint32_t keep;
    uint64_t floor;
} gc_goal;

/* Under store->mu: may `floor`, given by the caller, become the job's floor?
 * It must be a consistent cut (catalog invariant C3 relies on it): here, at
 * least, no newer than the job's newest part and every part at it consistent. */
static cpr_status check_given_floor(const cpr_job *job, uint64_t floor)
{
    unsigned long long f = (unsigned long long)floor;
    if (floor <= job->floor)
        return CPR_OK; /* nothing to raise */
    if (job->n_parts == 0 || job->parts[job->n_parts - 1].checkpoint < floor)
        return cpr_fail(CPR_FAILED_PRECONDITION, "floor %llu is above job %s's newest "
                        "committed checkpoint here (%llu): a floor must be a consistent "
                        "cut of the job", f, job->name, job->n_parts ?
                        (unsigned long long)job->parts[job->n_parts - 1].checkpoint : 0ULL);
    for (size_t i = 0; i < job->n_parts; i++) {
        const cpr_part_meta *p = &job->parts[i];
        if (p->checkpoint == floor && !p->consistent)
            return cpr_fail(CPR_FAILED_PRECONDITION, "floor %llu is not a consistent cut "
                            "of job %s: part %s/%u/%llu is %s", f, job->name, job->name,
                            p->shard, f, p->kind == CPR_KIND_PRIORITY ? "a PRIORITY part"
                            : "a DELTA whose chain is incomplete");
    }
    return CPR_OK;
}

/* Under store->mu: the floor the goal asks for (0: not enough cuts yet). */
static cpr_status choose_floor(const cpr_job *job, const gc_goal *goal, uint64_t *floor)
{
    if (goal->floor) {
        *floor = goal->floor;
        return check_given_floor(job, goal->floor);
    }
    uint64_t *cuts = malloc(goal->keep * sizeof *cuts);
    if (!cuts)
        return cpr_fail(CPR_NO_MEMORY, "out of memory planning retention");
    size_t n_cuts = cpr_job_cuts(job, cuts, goal->keep);
    *floor = n_cuts >= goal->keep ? cuts[goal->keep - 1] : 0;
    free(cuts);
    return CPR_OK;
}

/* G1, under store->commit_mu and store->mu: choose the floor and publish it.
 * commit_mu keeps a commit from slipping in below a floor being raised. */
static cpr_status plan_job(cpr_store *store, cpr_job *job, const gc_goal *goal, gc_job *g)
{
    uint64_t floor = 0;
    cpr_status st = choose_floor(job, goal, &floor);
    if (st)
        return st;
    memset(g, 0, sizeof *g);
    g->job_id = job->id;
    snprintf(g->name, sizeof g->name, "%s", job->name);
    if (floor <= job->floor) { /* nothing new, unless a crashed GC left work */
        g->floor = job->stale_below_floor ? job->floor : 0;
        return CPR_OK;
    }
    st = write_floor(store, job->id, floor);
    if (st == CPR_OK) {
        g->floor = floor;
        job->floor = floor;
        cpr_job_drop_below(job, floor);
        cpr_floors_set(&store->floors, job->id, floor); /* F2: durable and published */
    }
    return st;
}

/* G1-G3 for one job. reclaim_pending counts floor raises not compacted
 * yet (lazy runs, or a reopen); an explicit run compacts and subtracts the
 * raises it saw, so one that comes meanwhile stays pending. */
static cpr_status gc_one(cpr_store *store, cpr_job *job, const gc_goal *goal,
                         int explicit_run, cpr_gc_report *rep)
{
    gc_job g;
    unsigned pending = 0;
    pthread_mutex_lock(&store->commit_mu);
    pthread_mutex_lock(&store->mu);
    cpr_status st = plan_job(store, job, goal, &g);
    if (st == CPR_OK && g.floor)
        job->reclaim_pending++;
    if (st == CPR_OK) /* a refused plan compacts nothing */
        pending = job->reclaim_pending;
    pthread_mutex_unlock(&store->mu);
    pthread_mutex_unlock(&store->commit_mu);
    if (st == CPR_OK && g.floor)
        st = delete_parts(store, &g, &rep->parts_removed);
    /* Also after a failed delete_parts: the floor is durable and published. */
    if (explicit_run && pending)
        compact_job(store, job->id);
    pthread_mutex_lock(&store->mu);
    if (explicit_run && pending)
        job->reclaim_pending -= pending;
    if (st == CPR_OK && g.floor)
        job->stale_below_floor = 0;
    rep->floor = job->floor;
    pthread_mutex_unlock(&store->mu);
    return st;
}

/* One run over `job_name` (NULL: every job), arguments already checked.
 * versions_removed counts what the filter dropped meanwhile, for every job:
 * this run's compaction and any RocksDB ran on its own (and a compaction
 * that failed after filtering counts again when it is redone). */
static cpr_status gc_run(cpr_store *store, const char *job_name, const gc_goal *goal,
                         int explicit_run, cpr_gc_report *report)
{
    cpr_gc_report rep = {0};
    cpr_status st = CPR_OK;
    uint64_t dropped_before = atomic_load(&store->floors.dropped);
    rep.bytes_before = cpr_tree_bytes(store->dir);
    pthread_mutex_lock(&store->mu);
    rep.uncommitted_removed = cpr_store_sweep(store);
    /* A copy of the job pointers: begin may grow the array meanwhile. Jobs
     * with parts are never freed while the store is open. */
    size_t n_jobs = store->catalog.n_jobs;
    cpr_job **jobs = malloc((n_jobs + 1) * sizeof *jobs);
    cpr_job *only = job_name ? cpr_catalog_find(&store->catalog, job_name) : NULL;
    if (jobs && n_jobs)
        memcpy(jobs, store->catalog.jobs, n_jobs * sizeof *jobs);
    pthread_mutex_unlock(&store->mu);
    if (!jobs)
        st = cpr_fail(CPR_NO_MEMORY, "out of memory for retention");
    else if (job_name && !only)
        st = cpr_fail(CPR_NOT_FOUND, "job %s has no parts", job_name);
    for (size_t i = 0; st == CPR_OK && i < (only ? 1 : n_jobs); i++)
        st = gc_one(store, only ? only : jobs[i], goal, explicit_run, &rep);
    free(jobs);
    rep.versions_removed = atomic_load(&store->floors.dropped) - dropped_before;
    rep.bytes_after = cpr_tree_bytes(store->dir);
    if (st == CPR_OK && report)
        *report = rep;
    return cpr_store_count(store, st);
}

cpr_status cpr_store_gc(cpr_store *store, const char *job_name, uint32_t keep,
                        cpr_gc_report *report)
{
    gc_goal goal = {.keep = keep ? keep : store->opts.retain_cuts};
    cpr_status st = job_name ? cpr_check_job_name(job_name) : CPR_OK;
    if (st == CPR_OK && goal.keep > 100000)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "keep %u: retention keeps at most 100000 cuts",
                      goal.keep);
    if (st)
        return cpr_store_count(store, st);
    return gc_run(store, job_name, &goal, 1, report);
}

cpr_status cpr_store_gc_lazy(cpr_store *store, cpr_gc_report *report)
{
    gc_goal goal = {.keep = store->opts.retain_cuts};
    return gc_run(store, NULL, &goal, 0, report);
}

cpr_status cpr_store_gc_floor(cpr_store *store, const char *job_name, uint64_t floor,
                              cpr_gc_report *report)
{
    gc_goal goal = {.floor = floor};
    cpr_status st = cpr_check_job_name(job_name);
    if (st == CPR_OK && floor == 0)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "gc of job %s: floor 0 is no checkpoint; give "
                      "the consistent cut to keep (or use cpr_store_gc)", job_name);
    if (st)
        return cpr_store_count(store, st);
    return gc_run(store, job_name, &goal, 1, report);
}

/* ---- verify ---------------------------------------------------------------- */

typedef struct verify_run {
    cpr_store *store;
    cpr_problem_fn fn;
    void *ctx;
    cpr_verify_report rep;
} verify_run;

static void problem(verify_run *v, const char *what, const char *where)
{
    v->rep.problems++;
    cpr_log(CPR_LOG_WARN, "verify: %s at %s", what, where);
    if (v->fn)
        v->fn(v->ctx, what, where);
}

/* What verify needs of a job, copied under store->mu so that concurrent
 * commits may grow the catalog while the scan runs. */
typedef struct job_copy {
    char name[CPR_NAME_MAX + 1];
    uint32_t id;
    cpr_table_schema *tables;
    size_t n_tables;
    cpr_part_id *blob_parts;
    char (*blob_names)[CPR_NAME_MAX + 1];
    size_t n_blobs;
} job_copy;

static cpr_status copy_job(const cpr_job *job, job_copy *c)
{
    size_t n = 0;
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", job->name);
    c->id = job->id;
    for (size_t p = 0; p < job->n_parts; p++)
        n += job->parts[p].n_blobs;
    c->tables = malloc((job->n_tables + 1) * sizeof *c->tables);
    c->blob_parts = malloc((n + 1) * sizeof *c->blob_parts);
    c->blob_names = malloc((n + 1) * sizeof *c->blob_names);
    if (!c->tables || !c->blob_parts || !c->blob_names)
        return cpr_fail(CPR_NO_MEMORY, "out of memory verifying job %s", job->name);
    if (job->n_tables)
        memcpy(c->tables, job->tables, job->n_tables * sizeof *c->tables);
    c->n_tables = job->n_tables;
    for (size_t p = 0; p < job->n_parts; p++) {
        for (size_t b = 0; b < job->parts[p].n_blobs; b++) {
            c->blob_parts[c->n_blobs] = (cpr_part_id){c->name, job->parts[p].shard,
                                                       job->parts[p].checkpoint};
            snprintf(c->blob_names[c->n_blobs++], CPR_NAME_MAX + 1, "%s",
                     job->parts[p].blobs[b].name);
        }
    }
    return CPR_OK;
}

static void free_job_copy(job_copy *c)
{
    free(c->tables);
    free(c->blob_parts);
    free(c->blob_names);
}

static const cpr_table_schema *copy_table(const job_copy *job, uint32_t table)
{
    for (size_t i = 0; i < job->n_tables; i++)
        if (job->tables[i].table == table)
            return &job->tables[i];
    return NULL;
}

static void verify_row(verify_run *v, const job_copy *job, const cpr_row_key *k,
                       const char *key, const unsigned char *val, size_t vlen)
{
    char where[320];
    const cpr_table_schema *t = copy_table(job, k->table);
    snprintf(where, sizeof where, "job %s table %u row %llu checkpoint %llu shard %u",
             job->name, k->table, (unsigned long long)k->row,
             (unsigned long long)k->checkpoint, k->shard);
    v->rep.rows_checked++;
    v->rep.bytes_checked += vlen;
    if (!t) {
        problem(v, "row of a table no part declares", where);
        return;
    }
    size_t want = 4 + ((size_t)t->dim + t->state_dim) * 4;
    uint32_t stored;
    if (vlen != want) {
        problem(v, "row has the wrong length", where);
        return;
    }
    memcpy(&stored, val, 4);
    uint32_t crc = cpr_crc32c(0, key + 5, CPR_ROW_KEY_LEN - 5);
    if (cpr_crc32c(crc, val + 4, vlen - 4) != stored)
        problem(v, "row checksum mismatch", where);
}

static void verify_rows(verify_run *v, const job_copy *job)
{
    unsigned char lower[5] = {'R'}, upper[5] = {'R'};
    cpr_put_be32(lower + 1, job->id);
    cpr_put_be32(upper + 1, job->id + 1);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_verify_checksums(ro, 1);
    rocksdb_readoptions_set_fill_cache(ro, 0);
    rocksdb_readoptions_set_iterate_upper_bound(ro, (const char *)upper, sizeof upper);
    rocksdb_iterator_t *it = rocksdb_create_iterator(v->store->db, ro);
    for (rocksdb_iter_seek(it, (const char *)lower, sizeof lower); rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t klen, vlen;
        cpr_row_key k;
        const char *key = rocksdb_iter_key(it, &klen);
        const char *val = rocksdb_iter_value(it, &vlen);
        if (cpr_key_row_parse(key, klen, &k) != 0)
            problem(v, "malformed row key", job->name);
        else
            verify_row(v, job, &k, key, (const unsigned char *)val, vlen);
    }
    char *err = NULL;
    rocksdb_iter_get_error(it, &err);
    if (err) { /* a damaged block: RocksDB names the file */
        char where[512];
        snprintf(where, sizeof where, "job %s: %s", job->name, err);
        problem(v, "table file block fails its checksum", where);
        rocksdb_free(err);
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
}

static cpr_status discard_block(void *ctx, uint64_t offset, const void *data, size_t len)
{
    (void)offset;
    (void)data;
    ((verify_run *)ctx)->rep.bytes_checked += len;
    return CPR_OK;
}

/* Is part `id` still committed? Retention may have removed it (with its
 * blobs) since the job was copied: then a failed read is no damage. */
static int still_committed(cpr_store *store, const cpr_part_id *id)
{
    pthread_mutex_lock(&store->mu);
    cpr_job *job = cpr_catalog_find(&store->catalog, id->job);
    int found = job && cpr_job_find_part(job, id->shard, id->checkpoint);
    pthread_mutex_unlock(&store->mu);
    return found;
}

static void verify_blobs(verify_run *v, job_copy *job)
{
    for (size_t i = 0; i < job->n_blobs; i++) {
        const cpr_part_id *id = &job->blob_parts[i];
        char where[320];
        snprintf(where, sizeof where, "job %s shard %u checkpoint %llu blob %s", id->job,
                 id->shard, (unsigned long long)id->checkpoint, job->blob_names[i]);
        cpr_status st = cpr_store_read_blob(v->store, id, job->blob_names[i], NULL,
                                            discard_block, v);
        if (st != CPR_OK && !still_committed(v->store, id))
            continue; /* collected meanwhile: not checked, not a problem */
        v->rep.blobs_checked++;
        if (st != CPR_OK)
            problem(v, cpr_errmsg(), where);
    }
}

cpr_status cpr_store_verify(cpr_store *store, const char *job_name, cpr_problem_fn fn,
                            void *ctx, cpr_verify_report *report)
{
    verify_run v = {.store = store, .fn = fn, .ctx = ctx};
    cpr_status st = job_name ? cpr_check_job_name(job_name) : CPR_OK;
    if (st)
        return cpr_store_count(store, st);
    pthread_mutex_lock(&store->mu);
    size_t n_jobs = store->catalog.n_jobs, n_copies = 0;
    cpr_job *only = job_name ? cpr_catalog_find(&store->catalog, job_name) : NULL;
    job_copy *copies = calloc(n_jobs + 1, sizeof *copies);
    if (!copies)
        st = cpr_fail(CPR_NO_MEMORY, "out of memory verifying");
    else if (job_name && !only)
        st = cpr_fail(CPR_NOT_FOUND, "job %s has no parts", job_name);
    for (size_t i = 0; st == CPR_OK && i < (only ? 1 : n_jobs); i++, n_copies++)
        st = copy_job(only ? only : store->catalog.jobs[i], &copies[i]);
    pthread_mutex_unlock(&store->mu);
    for (size_t i = 0; st == CPR_OK && i < n_copies; i++) {
        verify_rows(&v, &copies[i]);
        verify_blobs(&v, &copies[i]);
    }
    for (size_t i = 0; copies && i < n_jobs + 1; i++)
        free_job_copy(&copies[i]);
    free(copies);
    if (st)
        return cpr_store_count(store, st);
    if (report)
        *report = v.rep;
    if (v.rep.problems)
        return cpr_store_count(store, cpr_fail(CPR_CORRUPT, "verify found %llu problems",
                                               (unsigned long long)v.rep.problems));
    return CPR_OK;
}
