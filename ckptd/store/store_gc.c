/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention (GC) and verification.
 *
 * GC of a job keeps the newest K consistent cuts and everything newer. With
 * F the K-th newest cut (the new floor), the retained states are "as of C"
 * for every C >= F. Rows live in the parts' segments, so retention removes
 * whole parts: every part below F, once nothing at or above F needs it. A
 * shard whose part at F is a FULL needs nothing older. A shard whose state
 * at F still reads older parts (a DELTA chain, PRIORITY parts after its
 * FULL) first gets a fold at F (fold.c): its newest version below F of
 * every row the parts at F do not hold, with the version's checkpoint, so
 * that every state as of C >= F restores exactly as before.
 * cpr_store_gc_floor is the same run with F given by the caller (a client
 * that computed the cut over every store holding the job) instead of chosen
 * from this store's cuts; only choose_floor differs.
 *
 * Order, so that a crash at any point leaves every retained state intact:
 *   G1. persist the floor F (synced write), and publish it in memory under
 *       store->mu: from then on nothing below F can be restored;
 *   G2. write the folds at F that shards need (each published by its own
 *       synced record, fold.c D1);
 *   G3. one synced write deletes the records of the parts and folds below
 *       F; the catalog drops them; their segments go when no restore that
 *       planned with them still runs (S7), their blob directories at once.
 * A crash between steps leaves records below the floor (catalog C5: kept
 * as data, not listed) that the next GC removes, or segments and blob
 * directories without records (swept, S2). GC holds fold_mu throughout
 * (fold.c D3).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"
#include "restore.h"
#include "store_internal.h"

static cpr_status write_floor(cpr_store *store, uint32_t job_id, uint64_t floor)
{
    unsigned char key[CPR_FLOOR_KEY_LEN], val[8];
    cpri_key_floor(key, job_id);
    cpri_put_be64(val, floor);
    return cpri_catalog_put(store, key, sizeof key, val, sizeof val,
                            "recording the retention floor");
}

/* What a run asks for: keep `keep` cuts, or (floor > 0) exactly that floor. */
typedef struct gc_goal {
    uint32_t keep;
    uint64_t floor;
    int floor_is_cut; /* floor: a cut over every store of the job (gc_floor_cut) */
} gc_goal;

/* Under store->mu: may `floor`, given by the caller, become the job's floor?
 * It must be a consistent cut (catalog invariant C3 relies on it): here, at
 * least, no newer than the job's newest part and every part at it consistent. */
static cpr_status check_given_floor(const cpri_job *job, uint64_t floor, int floor_is_cut)
{
    unsigned long long f = (unsigned long long)floor;
    if (floor <= job->floor)
        return CPR_OK; /* nothing to raise */
    /* A cut over several stores may be above every part here: every state
     * as of it or later is this store's newest, which the folds keep. */
    if (!floor_is_cut &&
        (job->n_parts == 0 || job->parts[job->n_parts - 1].checkpoint < floor))
        return cpr_fail(CPR_FAILED_PRECONDITION, "floor %llu is above job %s's newest "
                        "committed checkpoint here (%llu): a floor must be a consistent "
                        "cut of the job", f, job->name, job->n_parts ?
                        (unsigned long long)job->parts[job->n_parts - 1].checkpoint : 0ULL);
    for (size_t i = 0; i < job->n_parts; i++) {
        const cpri_part_meta *p = &job->parts[i];
        if (p->checkpoint == floor && !p->consistent)
            return cpr_fail(CPR_FAILED_PRECONDITION, "floor %llu is not a consistent cut "
                            "of job %s: part %s/%u/%llu is %s", f, job->name, job->name,
                            p->shard, f, p->kind == CPR_KIND_PRIORITY ? "a PRIORITY part"
                            : "a DELTA whose chain is incomplete");
    }
    return CPR_OK;
}

/* Under store->mu: the floor the goal asks for (0: not enough cuts yet). */
static cpr_status choose_floor(const cpri_job *job, const gc_goal *goal, uint64_t *floor)
{
    if (goal->floor) {
        *floor = goal->floor;
        return check_given_floor(job, goal->floor, goal->floor_is_cut);
    }
    uint64_t *cuts = malloc(goal->keep * sizeof *cuts);
    if (!cuts)
        return cpr_fail(CPR_NO_MEMORY, "out of memory planning retention");
    size_t n_cuts = cpri_job_cuts(job, cuts, goal->keep);
    *floor = n_cuts >= goal->keep ? cuts[goal->keep - 1] : 0;
    free(cuts);
    return CPR_OK;
}

/* G1, under store->commit_mu and store->mu: choose the floor and publish it.
 * commit_mu keeps a commit from slipping in below a floor being raised. */
static cpr_status raise_floor(cpr_store *store, cpri_job *job, const gc_goal *goal)
{
    uint64_t floor = 0;
    cpr_status st = choose_floor(job, goal, &floor);
    if (st || floor <= job->floor)
        return st;
    st = write_floor(store, job->id, floor);
    job->catalog_gen++; /* rados.h R9 */
    if (st == CPR_OK)
        job->floor = floor;
    return st;
}

/* Under store->mu: shards with parts or folds below the floor. */
static cpr_status shards_below(const cpri_job *job, uint32_t **out, size_t *n)
{
    size_t count = 0;
    uint32_t *s = malloc((job->n_parts + job->n_folds + 1) * sizeof *s);
    if (!s)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for retention");
    for (size_t i = 0; i < job->n_parts + job->n_folds; i++) {
        const cpri_part_meta *m = i < job->n_parts ? &job->parts[i] : &job->folds[i - job->n_parts];
        if (m->checkpoint >= job->floor)
            continue;
        int seen = 0;
        for (size_t k = 0; k < count; k++)
            seen |= s[k] == m->shard;
        if (!seen)
            s[count++] = m->shard;
    }
    *out = s;
    *n = count;
    return CPR_OK;
}

typedef struct doomed_part {
    uint32_t shard;
    uint64_t checkpoint;
} doomed_part;

/* G3: drop every part and fold below the floor. */
static cpr_status drop_below(cpr_store *store, const char *job_name, cpr_gc_report *rep)
{
    unsigned char key[CPR_META_KEY_LEN];
    char name[CPR_SEG_NAME_MAX];
    doomed_part *blob_dirs = NULL;
    size_t n_dirs = 0;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find(&store->catalog, job_name);
    uint64_t floor = job ? job->floor : 0;
    cpr_status st = CPR_OK;
    for (size_t i = 0; job && i < job->n_parts && job->parts[i].checkpoint < floor; i++) {
        cpri_key_part_record(key, 'M', job->id, job->parts[i].shard, job->parts[i].checkpoint);
        rocksdb_writebatch_delete(wb, (const char *)key, sizeof key);
    }
    for (size_t i = 0; job && i < job->n_folds; i++)
        if (job->folds[i].checkpoint < floor) {
            cpri_key_part_record(key, 'B', job->id, job->folds[i].shard, job->folds[i].checkpoint);
            rocksdb_writebatch_delete(wb, (const char *)key, sizeof key);
        }
    if (rocksdb_writebatch_count(wb)) {
        st = cpri_catalog_write(store, wb, "deleting reclaimed part records");
        job->catalog_gen++; /* rados.h R9 */
    }
    if (st == CPR_OK && job) {
        size_t n = 0;
        while (n < job->n_parts && job->parts[n].checkpoint < floor)
            n++;
        blob_dirs = malloc((n + 1) * sizeof *blob_dirs);
        for (size_t i = 0; i < n; i++) {
            const cpri_part_meta *m = &job->parts[i];
            rep->versions_removed += m->rows;
            if (m->seg_token) {
                cpri_seg_part_name(name, job->name, m->shard, m->checkpoint, m->seg_token);
                cpri_store_doom_locked(store, name);
                for (size_t b = 0; store->rados && b < m->n_blobs; b++) { /* B1 */
                    char blob[CPR_SEG_NAME_MAX];
                    cpri_seg_blob_name(blob, name, m->blobs[b].name);
                    cpri_store_doom_locked(store, blob);
                }
            }
            if (blob_dirs && m->n_blobs && !store->rados)
                blob_dirs[n_dirs++] = (doomed_part){m->shard, m->checkpoint};
        }
        rep->parts_removed += cpri_job_drop_below(job, floor);
        for (size_t i = job->n_folds; i-- > 0;) {
            const cpri_part_meta *f = &job->folds[i];
            if (f->checkpoint >= floor)
                continue;
            rep->versions_removed += f->rows;
            cpri_seg_fold_name(name, job->name, f->shard, f->checkpoint, f->seg_token);
            cpri_store_doom_locked(store, name);
            cpri_job_drop_fold(job, i);
        }
    }
    pthread_mutex_unlock(&store->mu);
    rocksdb_writebatch_destroy(wb);
    for (size_t i = 0; i < n_dirs; i++) {
        char *dir = cpri_part_dirname(job_name, blob_dirs[i].shard, blob_dirs[i].checkpoint,
                                     store->blobs_dir);
        if (dir)
            cpri_rmtree(dir);
        free(dir);
    }
    free(blob_dirs);
    return st;
}

/* G1-G3 for one job; the caller holds fold_mu. */
static cpr_status gc_one(cpr_store *store, const char *job_name, const gc_goal *goal,
                         cpr_gc_report *rep)
{
    uint32_t *shards = NULL;
    size_t n_shards = 0;
    uint64_t floor = 0;
    int held = 0;
    cpr_status st = cpri_store_hold_job(store, job_name, &held); /* rados.h R9 */
    if (st || !held)
        return st;
    pthread_mutex_lock(&store->commit_mu);
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find(&store->catalog, job_name);
    st = job ? raise_floor(store, job, goal) : CPR_OK;
    if (st == CPR_OK && job && job->floor) {
        floor = job->floor;
        st = shards_below(job, &shards, &n_shards);
    }
    pthread_mutex_unlock(&store->mu);
    pthread_mutex_unlock(&store->commit_mu);
    /* G2: folds first; if one fails, nothing below the floor goes. */
    for (size_t i = 0; st == CPR_OK && i < n_shards; i++) {
        uint64_t rows = 0;
        st = cpri_fold_shard(store, job_name, shards[i], floor, 0, NULL, &rows);
        rep->versions_removed -= rows; /* kept, in the fold (added back by G3's count) */
    }
    if (st == CPR_OK && n_shards)
        st = cpri_store_renew_job(store, job_name); /* rados.h R9: still the holder */
    if (st == CPR_OK && n_shards)
        st = drop_below(store, job_name, rep);
    free(shards);
    pthread_mutex_lock(&store->mu);
    rep->floor = job ? job->floor : 0;
    pthread_mutex_unlock(&store->mu);
    return st;
}

/* One run over `job_name` (NULL: every job), arguments already checked. */
static cpr_status gc_run(cpr_store *store, const char *job_name, const gc_goal *goal,
                         cpr_gc_report *report)
{
    cpr_gc_report rep = {0};
    cpr_status st = cpri_space_check_gc(store); /* F1, F2 */
    if (st)
        return cpri_store_count(store, st);
    rep.bytes_before = cpri_store_bytes(store);
    pthread_mutex_lock(&store->fold_mu); /* D3: no fold runs while GC sweeps */
    pthread_mutex_lock(&store->mu);
    rep.uncommitted_removed = cpri_store_sweep(store, 0);
    size_t n_jobs = store->catalog.n_jobs;
    char (*names)[CPR_NAME_MAX + 1] = malloc((n_jobs + 1) * sizeof *names);
    cpri_job *only = job_name ? cpri_catalog_find(&store->catalog, job_name) : NULL;
    for (size_t i = 0; names && i < n_jobs; i++)
        snprintf(names[i], sizeof names[i], "%s", store->catalog.jobs[i]->name);
    pthread_mutex_unlock(&store->mu);
    if (!names)
        st = cpr_fail(CPR_NO_MEMORY, "out of memory for retention");
    else if (job_name && !only)
        st = cpr_fail(CPR_NOT_FOUND, "job %s has no parts", job_name);
    /* Every job gets its pass: one that fails (a damaged block its fold
     * reads) must not stop retention of the others. The first failure is
     * returned, its message naming the job. */
    cpr_status first = st;
    char why[1024] = "";
    for (size_t i = 0; st == CPR_OK && i < (only ? 1 : n_jobs); i++) {
        const char *name = only ? job_name : names[i];
        cpr_status one = gc_one(store, name, goal, &rep);
        if (one && !first) {
            first = one;
            snprintf(why, sizeof why, "retention of job %s: %s", name, cpr_errmsg());
        } else if (one) {
            cpri_log(CPR_LOG_WARN, "retention of job %s: %s", name, cpr_errmsg());
        }
    }
    if (first && why[0])
        st = cpr_fail(first, "%s", why);
    pthread_mutex_unlock(&store->fold_mu);
    free(names);
    cpri_store_reap_doomed(store); /* S8: what waited out its grace */
    rep.bytes_after = cpri_store_bytes(store);
    atomic_fetch_add(&store->gc_runs, 1);
    atomic_fetch_add(&store->gc_parts_removed, rep.parts_removed);
    if (rep.bytes_before > rep.bytes_after)
        atomic_fetch_add(&store->gc_bytes_freed, rep.bytes_before - rep.bytes_after);
    cpri_ballast_restore(store); /* F2 */
    if (st == CPR_OK && report)
        *report = rep;
    return cpri_store_count(store, st);
}

cpr_status cpr_store_gc(cpr_store *store, const char *job_name, uint32_t keep,
                        cpr_gc_report *report)
{
    gc_goal goal = {.keep = keep ? keep : store->opts.retain_cuts};
    cpr_status st = job_name ? cpri_check_job_name(job_name) : CPR_OK;
    if (st == CPR_OK && goal.keep > 100000)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "keep %u: retention keeps at most 100000 cuts",
                      goal.keep);
    if (st)
        return cpri_store_count(store, st);
    return gc_run(store, job_name, &goal, report);
}

cpr_status cpr_store_gc_lazy(cpr_store *store, cpr_gc_report *report)
{
    gc_goal goal = {.keep = store->opts.retain_cuts};
    return gc_run(store, NULL, &goal, report);
}

static cpr_status gc_floor(cpr_store *store, const char *job_name, uint64_t floor,
                           int floor_is_cut, cpr_gc_report *report)
{
    gc_goal goal = {.floor = floor, .floor_is_cut = floor_is_cut};
    cpr_status st = cpri_check_job_name(job_name);
    if (st == CPR_OK && floor == 0)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "gc of job %s: floor 0 is no checkpoint; give "
                      "the consistent cut to keep (or use cpr_store_gc)", job_name);
    if (st)
        return cpri_store_count(store, st);
    return gc_run(store, job_name, &goal, report);
}

cpr_status cpr_store_gc_floor(cpr_store *store, const char *job_name, uint64_t floor,
                              cpr_gc_report *report)
{
    return gc_floor(store, job_name, floor, 0, report);
}

cpr_status cpr_store_gc_floor_cut(cpr_store *store, const char *job_name, uint64_t floor,
                                  cpr_gc_report *report)
{
    return gc_floor(store, job_name, floor, 1, report);
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
    cpri_log(CPR_LOG_WARN, "verify: %s at %s", what, where);
    if (v->fn)
        v->fn(v->ctx, what, where);
}

/* One segment to check: its name, where it belongs, its block index. */
typedef struct seg_copy {
    char name[CPR_SEG_NAME_MAX];
    char where[CPR_NAME_MAX + 96];
    cpri_block_ref *blocks;
    size_t n_blocks;
} seg_copy;

/* What verify needs of a job, copied under store->mu so that concurrent
 * commits may grow the catalog while the scan runs (the run is a reader,
 * S7, so the segments stay while it reads them). */
typedef struct job_copy {
    char name[CPR_NAME_MAX + 1];
    seg_copy *segs;
    size_t n_segs;
    cpr_part_id *blob_parts;
    char (*blob_names)[CPR_NAME_MAX + 1];
    size_t n_blobs;
} job_copy;

static cpr_status copy_segment(job_copy *c, const cpri_part_meta *m, int fold)
{
    seg_copy *sc = &c->segs[c->n_segs];
    if (!m->seg_token)
        return CPR_OK;
    (fold ? cpri_seg_fold_name : cpri_seg_part_name)(sc->name, c->name, m->shard,
                                                   m->checkpoint, m->seg_token);
    snprintf(sc->where, sizeof sc->where, "job %s shard %u %s %llu", c->name, m->shard,
             fold ? "fold at" : "checkpoint", (unsigned long long)m->checkpoint);
    sc->blocks = malloc((m->n_blocks + 1) * sizeof *sc->blocks);
    if (!sc->blocks)
        return cpr_fail(CPR_NO_MEMORY, "out of memory verifying job %s", c->name);
    if (m->n_blocks)
        memcpy(sc->blocks, m->blocks, m->n_blocks * sizeof *sc->blocks);
    sc->n_blocks = m->n_blocks;
    c->n_segs++;
    return CPR_OK;
}

static cpr_status copy_job(const cpri_job *job, job_copy *c)
{
    size_t n = 0;
    cpr_status st = CPR_OK;
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", job->name);
    for (size_t p = 0; p < job->n_parts; p++)
        n += job->parts[p].n_blobs;
    c->segs = calloc(job->n_parts + job->n_folds + 1, sizeof *c->segs);
    c->blob_parts = malloc((n + 1) * sizeof *c->blob_parts);
    c->blob_names = malloc((n + 1) * sizeof *c->blob_names);
    if (!c->segs || !c->blob_parts || !c->blob_names)
        return cpr_fail(CPR_NO_MEMORY, "out of memory verifying job %s", job->name);
    for (size_t p = 0; st == CPR_OK && p < job->n_parts; p++)
        st = copy_segment(c, &job->parts[p], 0);
    for (size_t f = 0; st == CPR_OK && f < job->n_folds; f++)
        st = copy_segment(c, &job->folds[f], 1);
    for (size_t p = 0; p < job->n_parts; p++) {
        for (size_t b = 0; b < job->parts[p].n_blobs; b++) {
            c->blob_parts[c->n_blobs] = (cpr_part_id){c->name, job->parts[p].shard,
                                                       job->parts[p].checkpoint};
            snprintf(c->blob_names[c->n_blobs++], CPR_NAME_MAX + 1, "%s",
                     job->parts[p].blobs[b].name);
        }
    }
    return st;
}

static void free_job_copy(job_copy *c)
{
    for (size_t i = 0; i < c->n_segs; i++)
        free(c->segs[i].blocks);
    free(c->segs);
    free(c->blob_parts);
    free(c->blob_names);
}

/* Read every block of one segment and check it against its header, its
 * CRC32C and the catalog's index. A read that fails stops this segment
 * (reported once); the others are still checked. */
static void verify_segment(verify_run *v, const seg_copy *sc)
{
    cpri_obj_extent *ext = malloc((sc->n_blocks + 1) * sizeof *ext);
    cpri_obj_reader *r = NULL;
    char where[CPR_SEG_NAME_MAX + CPR_NAME_MAX + 512];
    if (!ext) {
        problem(v, "out of memory", sc->where);
        return;
    }
    for (size_t i = 0; i < sc->n_blocks; i++)
        ext[i] = (cpri_obj_extent){sc->name, sc->blocks[i].offset, sc->blocks[i].len};
    const cpri_backend_ops *ops = v->store->segs->ops;
    cpr_status st = sc->n_blocks ? ops->read_start(v->store->segs, ext, sc->n_blocks, 8, &r)
                                 : CPR_OK;
    if (st) {
        snprintf(where, sizeof where, "%s, segment %s", sc->where, sc->name);
        problem(v, cpr_errmsg(), where);
    }
    for (size_t i = 0; st == CPR_OK && i < sc->n_blocks; i++) {
        const cpri_block_ref *b = &sc->blocks[i];
        void *owner = NULL;
        const unsigned char *data = NULL;
        cpr_block_view bv;
        snprintf(where, sizeof where, "%s, segment %s, block at offset %llu (table %u, "
                 "rows %llu..%llu)", sc->where, sc->name, (unsigned long long)b->offset,
                 b->table, (unsigned long long)b->first, (unsigned long long)b->last);
        st = ops->read_next(r, &owner, &data);
        if (st) {
            problem(v, cpr_errmsg(), where);
            break;
        }
        v->rep.bytes_checked += b->len;
        if (cpri_block_open_ref(data, b, &bv) != CPR_OK)
            problem(v, cpr_errmsg(), where);
        else
            v->rep.rows_checked += bv.h.n;
        ops->read_release(r, owner);
    }
    if (r)
        ops->read_end(r);
    free(ext);
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
    cpri_job *job = cpri_catalog_find(&store->catalog, id->job);
    int found = job && cpri_job_find_part(job, id->shard, id->checkpoint);
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
    cpr_status st = job_name ? cpri_check_job_name(job_name) : CPR_OK;
    if (st)
        return cpri_store_count(store, st);
    pthread_mutex_lock(&store->mu);
    size_t n_jobs = store->catalog.n_jobs, n_copies = 0;
    cpri_job *only = job_name ? cpri_catalog_find(&store->catalog, job_name) : NULL;
    job_copy *copies = calloc(n_jobs + 1, sizeof *copies);
    if (!copies)
        st = cpr_fail(CPR_NO_MEMORY, "out of memory verifying");
    else if (job_name && !only)
        st = cpr_fail(CPR_NOT_FOUND, "job %s has no parts", job_name);
    for (size_t i = 0; st == CPR_OK && i < (only ? 1 : n_jobs); i++, n_copies++)
        st = copy_job(only ? only : store->catalog.jobs[i], &copies[i]);
    if (st == CPR_OK)
        cpri_store_reader_enter_locked(store); /* S7 */
    for (size_t i = 0; st == CPR_OK && i < store->n_damaged; i++) { /* S5 */
        const damaged_part *d = &store->damaged[i];
        const cpri_job *j = cpri_catalog_find_id(&store->catalog, d->job_id);
        if (only && (!j || j != only))
            continue;
        char where[CPR_NAME_MAX + 96];
        snprintf(where, sizeof where, "job %s shard %u %s %llu", j ? j->name : "(unknown id)",
                 d->shard, d->fold ? "fold at" : "checkpoint", (unsigned long long)d->checkpoint);
        problem(&v, d->fold ? "fold record is damaged (its shard cannot be restored from "
                              "there on)" : "part record is damaged (the part is ignored)",
                where);
    }
    pthread_mutex_unlock(&store->mu);
    for (size_t i = 0; st == CPR_OK && i < n_copies; i++) {
        for (size_t k = 0; k < copies[i].n_segs; k++)
            verify_segment(&v, &copies[i].segs[k]);
        verify_blobs(&v, &copies[i]);
    }
    if (st == CPR_OK)
        cpri_store_reader_leave(store);
    for (size_t i = 0; copies && i < n_jobs + 1; i++)
        free_job_copy(&copies[i]);
    free(copies);
    if (st)
        return cpri_store_count(store, st);
    if (report)
        *report = v.rep;
    if (v.rep.problems)
        return cpri_store_count(store, cpr_fail(CPR_CORRUPT, "verify found %llu problems",
                                               (unsigned long long)v.rep.problems));
    return CPR_OK;
}
