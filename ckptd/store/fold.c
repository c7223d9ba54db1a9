/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Folding: a shard that saves a FULL and then many PRIORITY or DELTA parts
 * (CPR-MFU/SSU for hours) would make every restore read the whole chain. A
 * fold (s, X) is a segment of blocks with per-row versions holding, for
 * every row, shard s's newest version older than X, unless a part of s at X
 * holds the row (catalog C6). A restore as of C >= X reads the fold and the
 * parts of s from X on instead of everything since the FULL (restore.c), so
 * it reads about the shard's live bytes whatever the number of parts saved.
 *
 * Invariants
 *  D1. A fold is derived data: it is written from committed parts through
 *      the restore's own merge (as of X, keeping versions below X), made
 *      durable, and only then published by one synced write of its 'B'
 *      record. Its rows carry their original checkpoint, so ties with other
 *      shards resolve exactly as without it: no "as of" restore changes.
 *  D2. A fold that did not finish has no record: its segment is swept.
 *  D3. One writer of folds at a time (store->fold_mu): the background
 *      thread, cpr_store_fold and retention (store_gc.c) take it first.
 *  D4. The background thread runs at nice 19 and pauses after each fold so
 *      that its average write rate stays under cpr_store_options.fold_mb_s
 *      (one fold itself runs at the disk's speed; the pause holds no lock),
 *      so training on the same host keeps the CPU and the disk.
 *  D5. A fold never re-encodes: each row keeps the codec its part stored it
 *      in (cpr/codec.h), copied as stored. Rows of each codec gather in a
 *      block of their own (FOLD_BLOCK_BYTES), so the blocks of a fold of
 *      several codecs overlap in rows (each row is in exactly one of them,
 *      and a restore merges them as it merges parts). Breaking the block
 *      where the codec changed instead, a fold of a FULL in f32 and MFU
 *      parts in int8 came out as a block every few rows: 17 453 blocks for
 *      one table of 50 000 rows, a restore 30 times slower than from f32.
 *  D6. The background folds a shard once the parts after its base (its
 *      FULL or fold) are at least BG_MIN_PARTS and hold a quarter of the
 *      base's bytes, or are BG_FORCE_PARTS whatever their size
 *      (fold_due): a restore reads at most about 1.25 times the shard's
 *      live bytes plus its newest part. The price is write amplification: a
 *      fold rewrites about the base's bytes, so `make demo`'s MFU run (parts
 *      of an eighth of a shard every 0.35 s) folds twice the bytes it saves.
 *      Folding at the base's size instead halved that and took some
 *      background off MFU, but made each partial recovery's load read and
 *      merge twice the parts: with the demo's eight failures, SSU lost more
 *      in loads than it gained (docs/performance.md, "Folds at the base's
 *      size: tried, not kept"). Which side wins depends on how often
 *      restores come against saves, which the store does not know.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "restore.h"
#include "store_internal.h"

#define BG_MIN_PARTS 4       /* parts after the base before a background fold (D6) */
#define BG_FORCE_PARTS 32    /* ... whatever their size */
#define BG_MIN_FRACTION 4    /* ... or when they hold base_bytes / this */

#define FOLD_BLOCK_BYTES (1u << 20) /* rows of one codec gather up to this (D5) */

/* ---- one fold ------------------------------------------------------------ */

/* The rows of one codec waiting for their block (D5). */
typedef struct fold_acc {
    cpri_merge_rows r;     /* table, dims, codec, row_bytes; n rows held */
    size_t cap;            /* rows */
    uint64_t *ids, *versions;
    unsigned char *values; /* f32 values or encoded rows */
    float *state;
} fold_acc;

typedef struct fold_out {
    cpr_store *store;
    cpri_obj_writer *w;
    cpri_part_meta *m;
    fold_acc acc[CPR_CODEC_INT4 + 1];
    const char *job;      /* rados.h R9: the job whose hold the fold renews ... */
    double renewed_at;    /* ... every HOLD_RENEW_S while it reads and writes */
} fold_out;

#define HOLD_RENEW_S 10.0 /* a third of the hold's lease (rados.c LEASE_S) */

/* One block of r's rows into the fold's segment and index. */
static cpr_status fold_write(fold_out *o, const cpri_merge_rows *r)
{
    cpri_block_ref ref;
    cpr_status st = cpri_seg_write_block(o->store, o->w, r, &ref);
    if (st == CPR_OK)
        st = cpri_meta_add_block(o->m, &ref);
    if (st == CPR_OK) {
        o->m->rows += r->n;
        o->m->bytes += r->n * (8 + r->row_bytes + (uint64_t)r->state_dim * 4);
        o->m->codecs |= 1u << r->codec;
    }
    return st;
}

static cpr_status acc_flush(fold_out *o, fold_acc *a)
{
    if (a->r.n == 0)
        return CPR_OK;
    a->r.ids = a->ids;
    a->r.versions = a->versions;
    a->r.values = a->r.codec == CPR_CODEC_F32 ? (const float *)(void *)a->values : NULL;
    a->r.encoded = a->r.codec == CPR_CODEC_F32 ? NULL : a->values;
    a->r.state = a->r.state_dim ? a->state : NULL;
    cpr_status st = fold_write(o, &a->r);
    a->r.n = 0;
    return st;
}

static cpr_status flush_all(fold_out *o)
{
    cpr_status st = CPR_OK;
    for (size_t c = 0; c <= CPR_CODEC_INT4 && st == CPR_OK; c++)
        st = acc_flush(o, &o->acc[c]);
    return st;
}

static void acc_free(fold_out *o)
{
    for (size_t c = 0; c <= CPR_CODEC_INT4; c++) {
        fold_acc *a = &o->acc[c];
        free(a->ids);
        free(a->versions);
        free(a->values);
        free(a->state);
        memset(a, 0, sizeof *a);
    }
}

/* Room for a block's worth of rows of r's table and codec. */
static cpr_status acc_reserve(fold_acc *a, const cpri_merge_rows *r)
{
    size_t vbytes = r->codec == CPR_CODEC_F32 ? (size_t)r->dim * 4 : r->row_bytes;
    size_t per_row = 16 + vbytes + (size_t)r->state_dim * 4;
    size_t cap = FOLD_BLOCK_BYTES / per_row;
    cap = cap < 1 ? 1 : cap;
    if (a->cap < cap || a->r.dim != r->dim || a->r.state_dim != r->state_dim) {
        free(a->ids);
        free(a->versions);
        free(a->values);
        free(a->state);
        a->ids = malloc(cap * 8);
        a->versions = malloc(cap * 8);
        a->values = malloc(cap * vbytes);
        a->state = malloc(cap * (r->state_dim ? r->state_dim : 1) * 4);
        a->cap = a->ids && a->versions && a->values && a->state ? cap : 0;
        if (!a->cap)
            return cpr_fail(CPR_NO_MEMORY, "out of memory folding (%zu rows)", cap);
    }
    a->r = (cpri_merge_rows){.table = r->table, .dim = r->dim, .state_dim = r->state_dim,
                             .codec = r->codec, .row_bytes = r->row_bytes};
    return CPR_OK;
}

/* The merge's rows (ascending ids within a table, each batch of one codec)
 * into each codec's block (D5). */
static cpr_status fold_rows(void *ctx, const cpri_merge_rows *r)
{
    fold_out *o = ctx;
    if (r->codec > CPR_CODEC_INT4 || !r->versions)
        return cpr_fail(CPR_INTERNAL, "fold: rows of codec %d, versions %s", (int)r->codec,
                        r->versions ? "set" : "missing");
    if (cpri_now_s() - o->renewed_at >= HOLD_RENEW_S) { /* R9: a long fold keeps its hold */
        cpr_status held = cpri_store_renew_job(o->store, o->job);
        if (held)
            return held;
        o->renewed_at = cpri_now_s();
    }
    fold_acc *a = &o->acc[r->codec];
    cpr_status st = CPR_OK;
    for (size_t c = 0; c <= CPR_CODEC_INT4 && st == CPR_OK; c++)
        if (o->acc[c].r.n && o->acc[c].r.table != r->table) /* a new table: the last's out */
            st = acc_flush(o, &o->acc[c]);
    if (st == CPR_OK && a->r.n == 0)
        st = acc_reserve(a, r);
    size_t vbytes = r->codec == CPR_CODEC_F32 ? (size_t)r->dim * 4 : r->row_bytes;
    const unsigned char *values = r->codec == CPR_CODEC_F32 ? (const void *)r->values
                                                            : r->encoded;
    for (size_t i = 0; st == CPR_OK && i < r->n;) {
        size_t take = a->cap - a->r.n < r->n - i ? a->cap - a->r.n : r->n - i;
        memcpy(a->ids + a->r.n, r->ids + i, take * 8);
        memcpy(a->versions + a->r.n, r->versions + i, take * 8);
        memcpy(a->values + a->r.n * vbytes, values + i * vbytes, take * vbytes);
        if (r->state_dim)
            memcpy(a->state + a->r.n * r->state_dim, r->state + i * r->state_dim,
                   take * r->state_dim * 4);
        a->r.n += take;
        i += take;
        if (a->r.n == a->cap) {
            st = acc_flush(o, a);
            if (st == CPR_OK && i < r->n)
                st = acc_reserve(a, r);
        }
    }
    return st;
}

/* Under store->mu: does (shard, at) need a fold? Parts or a fold below `at`
 * that a restore as of `at` would read. */
static int needs_fold(const cpri_job *job, uint32_t shard, uint64_t at)
{
    const cpri_part_meta *fold;
    uint64_t start;
    cpri_shard_sources(job, shard, at, &fold, &start);
    if (fold && fold->checkpoint == at)
        return 0;
    if (fold)
        return 1;
    for (size_t i = 0; i < job->n_parts; i++) {
        const cpri_part_meta *m = &job->parts[i];
        if (m->checkpoint >= at)
            break;
        if (m->shard == shard && m->checkpoint >= start)
            return 1;
    }
    return 0;
}

/* An older fold that a new one at `at` makes redundant: above the floor
 * (restores between it and `at` read the fold at or below the floor and
 * the retained parts instead). The fold at or below the floor stays: the
 * parts it replaced are gone. */
static int replaced_by(const cpri_job *job, const cpri_part_meta *f, uint32_t shard, uint64_t at)
{
    return f->shard == shard && f->checkpoint < at && f->checkpoint > job->floor;
}

/* Publish the fold: its record (and, with replace, the removal of the
 * shard's redundant fold records) in one synced write, then the catalog. */
static cpr_status publish_fold(cpr_store *store, const char *job_name, cpri_part_meta *m,
                               int replace, int *attempted)
{
    unsigned char key[CPR_META_KEY_LEN], *rec = NULL;
    size_t rec_len = 0;
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find(&store->catalog, job_name);
    cpr_status st = job ? cpri_meta_encode(m, &rec, &rec_len)
                        : cpr_fail(CPR_INTERNAL, "job %s vanished while folding", job_name);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    if (st == CPR_OK) {
        cpri_key_part_record(key, 'B', job->id, m->shard, m->checkpoint);
        rocksdb_writebatch_put(wb, (const char *)key, sizeof key, (const char *)rec, rec_len);
        for (size_t i = 0; replace && i < job->n_folds; i++) {
            const cpri_part_meta *f = &job->folds[i];
            if (!replaced_by(job, f, m->shard, m->checkpoint))
                continue;
            cpri_key_part_record(key, 'B', job->id, f->shard, f->checkpoint);
            rocksdb_writebatch_delete(wb, (const char *)key, sizeof key);
        }
        *attempted = 1; /* from here the record may be durable: keep its segment */
        st = cpri_catalog_write(store, wb, "publishing a fold");
        job->catalog_gen++; /* rados.h R9: landed or not, a reload must start over */
    }
    if (st == CPR_OK) {
        for (size_t i = job->n_folds; replace && i-- > 0;) {
            const cpri_part_meta *f = &job->folds[i];
            if (!replaced_by(job, f, m->shard, m->checkpoint))
                continue;
            char name[CPR_SEG_NAME_MAX];
            cpri_seg_fold_name(name, job->name, f->shard, f->checkpoint, f->seg_token);
            cpri_store_doom_locked(store, name); /* S7 */
            cpri_job_drop_fold(job, i);
        }
        st = cpri_job_add_fold(job, m);
    }
    pthread_mutex_unlock(&store->mu);
    rocksdb_writebatch_destroy(wb);
    free(rec);
    return st;
}

cpr_status cpri_fold_shard(cpr_store *store, const char *job_name, uint32_t shard, uint64_t at,
                          int replace, uint64_t *bytes, uint64_t *rows_out)
{
    cpri_merge_plan p = {0};
    cpri_part_meta m = {0};
    cpr_restore_result res = {0};
    char name[CPR_SEG_NAME_MAX] = "";
    cpri_obj_writer *w = NULL;
    int reading = 0, needed = 0;
    uint64_t chain_head = 0;
    if (bytes)
        *bytes = 0;
    if (rows_out)
        *rows_out = 0;
    p.ranges = malloc(sizeof *p.ranges);
    if (!p.ranges)
        return cpr_fail(CPR_NO_MEMORY, "out of memory folding");
    p.ranges[0] = (cpr_row_range){0, UINT64_MAX};
    p.n_ranges = 1;
    p.keep_below = at;
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find(&store->catalog, job_name);
    cpr_status st = job ? CPR_OK : cpr_fail(CPR_NOT_FOUND, "job %s has no parts", job_name);
    if (st == CPR_OK && (needed = needs_fold(job, shard, at))) {
        p.store = store;
        st = cpri_merge_plan_build(&p, job, at, NULL, 0, 1, shard);
        chain_head = cpri_job_chain_head(job, shard, at);
        if (st == CPR_OK)
            st = cpri_meta_copy_tables(&m, job->tables, job->n_tables);
        if (st == CPR_OK) {
            cpri_store_reader_enter_locked(store);
            reading = 1;
        }
    }
    pthread_mutex_unlock(&store->mu);
    if (st == CPR_OK && needed) /* a fold writes a segment and a record */
        st = cpri_space_check(store, CPRI_SPACE_DATA, "folding");
    if (st || !needed)
        goto out;
    m.shard = shard;
    m.checkpoint = at;
    m.kind = CPR_KIND_FULL; /* a fold's record is a part record of its rows */
    m.base = chain_head; /* catalog C3: the complete chain it holds, or 0 */
    m.num_shards = shard + 1;
    m.seg_token = cpri_seg_new_token(store);
    cpri_seg_fold_name(name, job_name, shard, at, m.seg_token);
    st = store->segs->ops->create(store->segs, name, &w);
    fold_out o = {.store = store, .w = w, .m = &m, .job = job_name,
                  .renewed_at = cpri_now_s()};
    cpri_merge_sink sink = {.rows = fold_rows, .ctx = &o, .want_versions = 1, .keep_codec = 1};
    if (st == CPR_OK)
        st = cpri_merge_run(store, &p, &sink, &res);
    if (st == CPR_OK)
        st = flush_all(&o);
    acc_free(&o);
    if (st == CPR_OK) {
        cpri_obj_writer *done = w;
        w = NULL;
        st = store->segs->ops->finish(done, &m.seg_bytes);
    }
    if (st == CPR_OK) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        m.committed_unix_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
        uint64_t seg_bytes = m.seg_bytes, rows = m.rows;
        int attempted = 0;
        st = cpri_store_renew_job(store, job_name); /* rados.h R9: still the holder */
        if (st == CPR_OK) /* F1: the segment took room since the check above */
            st = cpri_space_check(store, CPRI_SPACE_CATALOG, "publishing a fold");
        if (st == CPR_OK)
            st = publish_fold(store, job_name, &m, replace, &attempted);
        if (attempted)
            name[0] = '\0'; /* a record may name it: only the sweep at open decides */
        if (st == CPR_OK) {
            atomic_fetch_add(&store->folds, 1);
            atomic_fetch_add(&store->fold_bytes, seg_bytes);
            if (bytes)
                *bytes = seg_bytes;
            if (rows_out)
                *rows_out = rows;
        }
    }
out:
    if (w)
        store->segs->ops->discard(w);
    else if (name[0]) /* finished, never published (D2) */
        store->segs->ops->remove(store->segs, name);
    if (reading)
        cpri_store_reader_leave(store);
    cpri_meta_release(&m);
    cpri_merge_plan_release(&p);
    return st;
}

/* ---- which shards to fold ------------------------------------------------- */

typedef struct fold_todo {
    char job[CPR_NAME_MAX + 1];
    uint32_t shard;
    uint64_t at;
} fold_todo;

/* Under store->mu: shard s of job as of its newest part: parts after the
 * base (a fold or a FULL), their bytes and the base's. */
static void chain_of(const cpri_job *job, uint32_t shard, uint64_t *newest, size_t *parts,
                     uint64_t *after_bytes, uint64_t *base_bytes)
{
    const cpri_part_meta *fold;
    uint64_t start;
    *newest = 0;
    for (size_t i = 0; i < job->n_parts; i++)
        if (job->parts[i].shard == shard)
            *newest = job->parts[i].checkpoint;
    cpri_shard_sources(job, shard, *newest, &fold, &start);
    *parts = 0;
    *after_bytes = 0;
    *base_bytes = fold ? fold->bytes : 0;
    for (size_t i = 0; i < job->n_parts; i++) {
        const cpri_part_meta *m = &job->parts[i];
        if (m->shard != shard || m->checkpoint < start)
            continue;
        if (!fold && m->checkpoint == start && m->kind == CPR_KIND_FULL) {
            *base_bytes = m->bytes;
            continue;
        }
        (*parts)++;
        *after_bytes += m->bytes;
    }
}

/* D6: does the background fold a shard whose base (FULL or fold) holds
 * base_bytes and is followed by `parts` parts of after_bytes? */
static int fold_due(size_t parts, uint64_t after_bytes, uint64_t base_bytes)
{
    return parts >= BG_FORCE_PARTS ||
           (parts >= BG_MIN_PARTS && after_bytes * BG_MIN_FRACTION >= base_bytes);
}

/* Under store->mu: shards to fold (background: by fold_due). */
static cpr_status find_chains(cpr_store *store, const char *only, uint32_t min_parts,
                              int background, fold_todo **out, size_t *n)
{
    size_t count = 0, cap = 0;
    fold_todo *todo = NULL;
    for (size_t j = 0; j < store->catalog.n_jobs; j++) {
        const cpri_job *job = store->catalog.jobs[j];
        if (only && strcmp(job->name, only) != 0)
            continue;
        /* Each shard once: parts are sorted by (checkpoint, shard), so a
         * shard's first part is the one no earlier part of it precedes;
         * `done` remembers the shards handled (few per store node). */
        uint32_t *done = malloc((job->n_parts + 1) * sizeof *done);
        size_t n_done = 0;
        if (!done) {
            free(todo);
            return cpr_fail(CPR_NO_MEMORY, "out of memory planning folds");
        }
        for (size_t i = 0; i < job->n_parts; i++) {
            uint32_t shard = job->parts[i].shard;
            int seen = 0;
            for (size_t k = 0; k < n_done && !seen; k++)
                seen = done[k] == shard;
            if (seen)
                continue;
            done[n_done++] = shard;
            uint64_t newest, after, base;
            size_t parts;
            chain_of(job, shard, &newest, &parts, &after, &base);
            int due = background ? fold_due(parts, after, base) : parts >= min_parts;
            if (!due || newest <= job->floor)
                continue;
            if (count == cap) {
                cap = cap ? cap * 2 : 16;
                fold_todo *grown = realloc(todo, cap * sizeof *grown);
                if (!grown) {
                    free(todo);
                    free(done);
                    return cpr_fail(CPR_NO_MEMORY, "out of memory planning folds");
                }
                todo = grown;
            }
            snprintf(todo[count].job, sizeof todo[count].job, "%s", job->name);
            todo[count].shard = shard;
            todo[count++].at = newest;
        }
        free(done);
    }
    *out = todo;
    *n = count;
    return CPR_OK;
}

struct cpri_fold_worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int poked, stop;
};

/* Wait `seconds` unless asked to stop; returns stop. */
static int pause_for(struct cpri_fold_worker *fw, double seconds)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double end = (double)until.tv_sec + until.tv_nsec / 1e9 + seconds;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&fw->mu);
    while (!fw->stop && pthread_cond_timedwait(&fw->cv, &fw->mu, &until) == 0) {
    }
    int stop = fw->stop;
    pthread_mutex_unlock(&fw->mu);
    return stop;
}

static cpr_status fold_pass(cpr_store *store, const char *job, uint32_t min_parts,
                            int background, uint64_t *folded)
{
    fold_todo *todo = NULL;
    size_t n = 0;
    double rate = (store->opts.fold_mb_s ? store->opts.fold_mb_s : 256) * 1e6;
    pthread_mutex_lock(&store->mu);
    cpr_status st = find_chains(store, job, min_parts, background, &todo, &n);
    pthread_mutex_unlock(&store->mu);
    for (size_t i = 0; st == CPR_OK && i < n; i++) {
        uint64_t bytes = 0, rows = 0;
        double t0 = cpri_now_s();
        /* D3, and no pause under it: GC waits only for the fold itself. A
         * fold of a shard a GC folded meanwhile finds nothing to do. */
        pthread_mutex_lock(&store->fold_mu);
        int held = 0;
        st = cpri_store_hold_job(store, todo[i].job, &held); /* rados.h R9 */
        if (st == CPR_OK && held)
            st = cpri_fold_shard(store, todo[i].job, todo[i].shard, todo[i].at, 1, &bytes,
                                 &rows);
        pthread_mutex_unlock(&store->fold_mu);
        if (st == CPR_NOT_FOUND) /* the job went meanwhile */
            st = CPR_OK;
        if (st == CPR_OK && bytes) {
            *folded += 1;
            cpri_log(CPR_LOG_INFO, "folded %s shard %u at %llu: %llu rows, %llu bytes in "
                    "%.2f s", todo[i].job, todo[i].shard, (unsigned long long)todo[i].at,
                    (unsigned long long)rows, (unsigned long long)bytes, cpri_now_s() - t0);
        }
        if (background && bytes && store->folder) { /* D4: the rate limit */
            double due = (double)bytes / rate - (cpri_now_s() - t0);
            if (due > 0 && pause_for(store->folder, due))
                break;
        }
    }
    free(todo);
    return st;
}

cpr_status cpr_store_fold(cpr_store *store, const char *job, uint32_t min_parts,
                          uint64_t *folded)
{
    uint64_t count = 0;
    cpr_status st = job ? cpri_check_job_name(job) : CPR_OK;
    if (st == CPR_OK)
        st = fold_pass(store, job, min_parts ? min_parts : 2, 0, &count);
    if (st == CPR_OK && folded)
        *folded = count;
    return cpri_store_count(store, st);
}

cpr_status cpri_fold_background_pass(cpr_store *store, uint64_t *folded)
{
    uint64_t count = 0;
    cpr_status st = fold_pass(store, NULL, 0, 1, &count);
    if (folded)
        *folded = count;
    return st;
}

/* ---- the background thread --------------------------------------------------- */

static void *fold_main(void *arg)
{
    cpr_store *store = arg;
    struct cpri_fold_worker *fw = store->folder;
    /* D4: nice only this thread (Linux: the tid is a process id here). */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    for (;;) {
        pthread_mutex_lock(&fw->mu);
        while (!fw->poked && !fw->stop)
            pthread_cond_wait(&fw->cv, &fw->mu);
        int stop = fw->stop;
        fw->poked = 0;
        pthread_mutex_unlock(&fw->mu);
        if (stop)
            break;
        cpr_status st = cpri_fold_background_pass(store, NULL);
        if (st)
            cpri_log(CPR_LOG_WARN, "background folding failed (%s); restores read the "
                    "parts instead", cpr_errmsg());
    }
    return NULL;
}

cpr_status cpri_fold_start(cpr_store *store)
{
    struct cpri_fold_worker *fw = calloc(1, sizeof *fw);
    if (!fw)
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting the folding thread");
    pthread_mutex_init(&fw->mu, NULL);
    pthread_cond_init(&fw->cv, NULL);
    store->folder = fw;
    if (pthread_create(&fw->thread, NULL, fold_main, store) != 0) {
        store->folder = NULL;
        pthread_mutex_destroy(&fw->mu);
        pthread_cond_destroy(&fw->cv);
        free(fw);
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "cannot start the folding thread");
    }
    pthread_setname_np(fw->thread, "cpr-fold");
    return CPR_OK;
}

void cpri_fold_poke(cpr_store *store)
{
    struct cpri_fold_worker *fw = store->folder;
    if (!fw)
        return;
    pthread_mutex_lock(&fw->mu);
    fw->poked = 1;
    pthread_cond_signal(&fw->cv);
    pthread_mutex_unlock(&fw->mu);
}

void cpri_fold_stop(cpr_store *store)
{
    struct cpri_fold_worker *fw = store->folder;
    if (!fw)
        return;
    pthread_mutex_lock(&fw->mu);
    fw->stop = 1;
    pthread_cond_broadcast(&fw->cv);
    pthread_mutex_unlock(&fw->mu);
    pthread_join(fw->thread, NULL);
    pthread_mutex_destroy(&fw->mu);
    pthread_cond_destroy(&fw->cv);
    free(fw);
    store->folder = NULL;
}
