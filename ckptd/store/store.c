/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Store lifecycle and metadata queries: open (format check, RocksDB setup,
 * catalog load, crash-leftover sweep), close, list, latest cut, stats, the
 * segment readers' pins (S7), and the filesystem helpers the other store
 * files share. Layout and invariants: store_internal.h.
 */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store_internal.h"
#include "part_fence.h"
#include "rados.h"

/* ---- small helpers --------------------------------------------------- */

cpr_status cpri_store_count(cpr_store *store, cpr_status st)
{
    if (st != CPR_OK && (unsigned)st < CPR_STATUS_COUNT_)
        atomic_fetch_add(&store->errors[st], 1);
    return st;
}

cpr_status cpri_rocks_error(char *err, const char *what)
{
    cpr_status st = CPR_IO;
    if (strncmp(err, "Corruption", 10) == 0)
        st = CPR_CORRUPT;
    else if (strstr(err, "No space left") || strstr(err, "NoSpace"))
        st = CPR_RESOURCE_EXHAUSTED;
    else if (strstr(err, "lock") && strstr(err, "LOCK"))
        st = CPR_UNAVAILABLE;
    cpr_fail(st, "%s: %s", what, err);
    rocksdb_free(err);
    return st;
}

/* F1: the first failure stops every later write (see space.c). */
static cpr_status catalog_failed(cpr_store *store, char *err, const char *what)
{
    cpr_status st = cpri_rocks_error(err, what);
    if (!atomic_load(&store->catalog_broken)) {
        snprintf(store->catalog_error, sizeof store->catalog_error, "%s", cpr_errmsg());
        atomic_store(&store->catalog_broken, 1);
        cpri_log(CPR_LOG_ERROR, "store %s: the catalog refused a write (%s); it takes no more "
                 "until the store is opened again", store->dir, store->catalog_error);
    }
    return st;
}

static cpr_status catalog_usable(cpr_store *store, const char *what)
{
    if (store->rados && store->gateway_id && cpri_rados_gateway_check(store->rados) != CPR_OK)
        return CPR_UNAVAILABLE; /* R6: a gateway without its lease writes nothing */
    if (!atomic_load(&store->catalog_broken))
        return CPR_OK;
    return cpr_fail(CPR_UNAVAILABLE, "%s: an earlier catalog write failed (%s); restart ckptd "
                    "(or reopen the store) once the cause is fixed: nothing committed is lost",
                    what, store->catalog_error);
}

/* A write batch as changes for the RADOS catalog (rados.h R1). */
typedef struct batch_changes {
    cpri_kv_change *c;
    size_t n, cap;
    int oom;
} batch_changes;

static void add_change(batch_changes *b, const char *k, size_t klen, const char *v,
                       size_t vlen, int del)
{
    if (b->n == b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 16;
        cpri_kv_change *g = realloc(b->c, nc * sizeof *g);
        if (!g) {
            b->oom = 1;
            return;
        }
        b->c = g;
        b->cap = nc;
    }
    b->c[b->n++] = (cpri_kv_change){k, klen, v, vlen, del};
}

static void batch_put(void *ctx, const char *k, size_t klen, const char *v, size_t vlen)
{
    add_change(ctx, k, klen, v, vlen, 0);
}

static void batch_deleted(void *ctx, const char *k, size_t klen)
{
    add_change(ctx, k, klen, NULL, 0, 1);
}

cpr_status cpri_catalog_write(cpr_store *store, rocksdb_writebatch_t *wb, const char *what)
{
    return cpri_catalog_write_if(store, NULL, 0, wb, what);
}

cpr_status cpri_catalog_write_if(cpr_store *store, const struct cpri_kv_cond *conds, size_t nc,
                                 rocksdb_writebatch_t *wb, const char *what)
{
    char *err = NULL;
    cpr_status st = catalog_usable(store, what);
    if (st)
        return st;
    if (store->rados) { /* R1: the pool first; it is the commit point */
        batch_changes b = {0};
        rocksdb_writebatch_iterate(wb, &b, batch_put, batch_deleted);
        st = b.oom ? cpr_fail(CPR_NO_MEMORY, "out of memory %s", what)
                   : cpri_rados_catalog_apply_if(store->rados, conds, nc, b.c, b.n, what);
        free(b.c);
        if (st)
            return st;
    }
    rocksdb_write(store->db, store->sync_write, wb, &err);
    return err ? catalog_failed(store, err, what) : CPR_OK;
}

cpr_status cpri_catalog_put(cpr_store *store, const void *key, size_t klen, const void *val,
                            size_t vlen, const char *what)
{
    char *err = NULL;
    cpr_status st = catalog_usable(store, what);
    if (st)
        return st;
    if (store->rados) { /* R1 */
        cpri_kv_change c = {key, klen, val, vlen, 0};
        st = cpri_rados_catalog_apply(store->rados, &c, 1, what);
        if (st)
            return st;
    }
    rocksdb_put(store->db, store->sync_write, key, klen, val, vlen, &err);
    return err ? catalog_failed(store, err, what) : CPR_OK;
}

cpr_status cpri_catalog_cas(cpr_store *store, const void *key, size_t klen, const void *old,
                            size_t oldlen, const void *val, size_t vlen, const char *what)
{
    if (!store->rados)
        return cpri_catalog_put(store, key, klen, val, vlen, what);
    cpr_status st = catalog_usable(store, what);
    if (st == CPR_OK)
        st = cpri_rados_catalog_cas(store->rados, key, klen, old, oldlen, val, vlen, what);
    if (st)
        return st;
    char *err = NULL; /* the local copy (R1) */
    rocksdb_put(store->db, store->sync_write, key, klen, val, vlen, &err);
    return err ? catalog_failed(store, err, what) : CPR_OK;
}

cpr_status cpri_check_job_name(const char *job)
{
    if (!cpri_name_valid(job))
        return cpr_fail(CPR_INVALID_ARGUMENT,
                        "job name \"%.140s\" is invalid: use 1-128 characters of "
                        "A-Z a-z 0-9 . _ -", job ? job : "(null)");
    return CPR_OK;
}

char *cpri_path_join(const char *a, const char *b)
{
    size_t len = strlen(a) + strlen(b) + 2;
    char *p = malloc(len);
    if (p)
        snprintf(p, len, "%s/%s", a, b);
    return p;
}

char *cpri_part_dirname(const char *job, uint32_t shard, uint64_t ckpt, const char *root)
{
    size_t len = strlen(root) + strlen(job) + 64;
    char *p = malloc(len);
    if (p)
        snprintf(p, len, "%s/j_%s/%u-%llu", root, job, shard, (unsigned long long)ckpt);
    return p;
}

int cpri_mkdirs(const char *path)
{
    char buf[4096];
    size_t len = strlen(path);
    if (len >= sizeof buf)
        return -1;
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        buf[i] = saved;
    }
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void cpri_rmtree(const char *path)
{
    nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

static _Thread_local uint64_t tree_bytes_acc;

static int add_bytes(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (flag == FTW_F)
        tree_bytes_acc += (uint64_t)sb->st_size;
    return 0;
}

uint64_t cpri_tree_bytes(const char *path)
{
    tree_bytes_acc = 0;
    nftw(path, add_bytes, 32, FTW_PHYS);
    return tree_bytes_acc;
}

/* ---- open parts table -------------------------------------------------- */

static int part_matches(const open_part *p, const cpr_part_id *id)
{
    return p->meta.shard == id->shard && p->meta.checkpoint == id->checkpoint &&
           strcmp(p->job_name, id->job) == 0;
}

/* part_fence.h S9: this thread's fence (0: none). */
static _Thread_local uint64_t part_fence;

void cpri_store_fence(uint64_t incarnation)
{
    part_fence = incarnation;
}

uint64_t cpri_store_part_incarnation(cpr_store *store, const cpr_part_id *id)
{
    uint64_t inc = 0;
    pthread_mutex_lock(&store->mu);
    for (open_part *p = store->open_parts; p && !inc; p = p->next)
        if (part_matches(p, id))
            inc = p->incarnation;
    pthread_mutex_unlock(&store->mu);
    return inc;
}

open_part *cpri_open_part_get(cpr_store *store, const cpr_part_id *id)
{
    open_part *found = NULL;
    pthread_mutex_lock(&store->mu);
    for (open_part *p = store->open_parts; p; p = p->next) {
        if (part_matches(p, id) && (!part_fence || p->incarnation == part_fence)) {
            p->refs++;
            found = p;
            break;
        }
    }
    pthread_mutex_unlock(&store->mu);
    return found;
}

void cpri_open_part_put(cpr_store *store, open_part *part)
{
    int last;
    pthread_mutex_lock(&store->mu);
    last = --part->refs == 0 && part->removed;
    pthread_mutex_unlock(&store->mu);
    if (last)
        cpri_open_part_free(store, part);
}

cpr_status cpri_buffers_admit_locked(const cpr_store *store, uint32_t parts, uint32_t blobs)
{
    uint64_t limit = store->opts.max_buffer_bytes;
    uint64_t want = (uint64_t)(store->n_open_parts + parts) * PART_BUFFER_BYTES +
                    (uint64_t)(store->n_open_blobs + blobs) *
                        (store->rados ? PART_BUFFER_BYTES : BLOB_BUFFER_BYTES); /* B1 */
    if (!limit || want <= limit)
        return CPR_OK;
    return cpr_fail(CPR_RESOURCE_EXHAUSTED, "the write buffers of %u open parts and %u open "
                    "blobs take the store's memory for them (%llu MiB; ckptd --max-memory-mb): "
                    "retry when parts commit", store->n_open_parts, store->n_open_blobs,
                    (unsigned long long)(limit >> 20));
}

cpr_status cpri_open_blob_admit(cpr_store *store, uint32_t job_id)
{
    cpr_status st = CPR_OK;
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find_id(&store->catalog, job_id);
    if (store->n_open_blobs >= store->opts.max_open_blobs)
        st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "the store has %u blobs being written, its "
                      "maximum (ckptd --max-open-blobs): commit or abort parts first",
                      store->n_open_blobs);
    else if (job && job->open_blobs >= store->opts.max_open_blobs_per_job)
        st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "job %s has %u blobs being written, its maximum "
                      "(ckptd --max-open-blobs-per-job): commit or abort parts first",
                      job->name, job->open_blobs);
    if (st == CPR_OK)
        st = cpri_buffers_admit_locked(store, 0, 1);
    if (st == CPR_OK) {
        store->n_open_blobs++;
        if (job)
            job->open_blobs++;
    }
    pthread_mutex_unlock(&store->mu);
    return st;
}

/* O1: the blobs of a part being freed are no longer open. */
void cpri_store_release_blobs(cpr_store *store, open_part *part)
{
    if (!part->n_blobs)
        return;
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find_id(&store->catalog, part->job_id);
    store->n_open_blobs -= (uint32_t)part->n_blobs;
    if (job)
        job->open_blobs -= (uint32_t)part->n_blobs;
    pthread_mutex_unlock(&store->mu);
}

void cpri_open_part_free(cpr_store *store, open_part *part)
{
    cpri_store_release_blobs(store, part);
    if (part->seg)
        store->segs->ops->discard(part->seg);
    else if (part->seg_name[0]) /* finished but never committed */
        store->segs->ops->remove(store->segs, part->seg_name);
    cpri_block_builder_release(&part->bb);
    for (size_t i = 0; i < part->n_blobs; i++) {
        cpri_bfile_discard(part->blobs[i].writer);
        store->segs->ops->discard(part->blobs[i].obj);
        free(part->blobs[i].crcs);
    }
    if (part->dir)
        cpri_rmtree(part->dir);
    free(part->blobs);
    free(part->dir);
    free(part->final_dir);
    cpri_meta_release(&part->meta);
    pthread_mutex_destroy(&part->mu);
    free(part);
}

/* S8: how long a doomed object stays in RADOS for readers on other gateways. */
#define DOOM_GRACE_S 300.0

/* ---- a job reloaded from the pool (rados.h R9) -------------------------- */

typedef struct pool_record {
    char *key, *val;
    size_t klen, vlen;
} pool_record;

typedef struct pool_records {
    pool_record *r;
    size_t n, cap;
    int oom;             /* a record could not be kept: the reload fails */
} pool_records;

static int keep_record(void *ctx, const void *key, size_t klen, const void *val, size_t vlen)
{
    pool_records *pr = ctx;
    if (pr->n == pr->cap) {
        size_t cap = pr->cap ? 2 * pr->cap : 64;
        pool_record *grown = realloc(pr->r, cap * sizeof *grown);
        if (!grown)
            return pr->oom = 1;
        pr->r = grown;
        pr->cap = cap;
    }
    pool_record *rec = &pr->r[pr->n];
    rec->key = malloc(klen);
    rec->val = malloc(vlen ? vlen : 1);
    if (!rec->key || !rec->val) {
        free(rec->key);
        free(rec->val);
        return pr->oom = 1;
    }
    memcpy(rec->key, key, klen);
    memcpy(rec->val, val, vlen);
    rec->klen = klen;
    rec->vlen = vlen;
    pr->n++;
    return 0;
}

/* Free and empty (ready for reuse). */
static void pool_records_free(pool_records *pr)
{
    for (size_t i = 0; i < pr->n; i++) {
        free(pr->r[i].key);
        free(pr->r[i].val);
    }
    free(pr->r);
    memset(pr, 0, sizeof *pr);
}

/* The job's part, fold and floor records in memory, from `pr` (key order:
 * per shard ascending, C2). Caller holds commit_mu and mu. */
static cpr_status note_damaged(cpr_store *store, uint32_t job_id, uint32_t shard, uint64_t ckpt,
                               int fold);

static cpr_status rebuild_job(cpr_store *store, cpri_job *job, const pool_records *pr)
{
    cpri_job_drop_first(job, job->n_parts); /* all: a part may have id 2^64 - 1 */
    while (job->n_folds)
        cpri_job_drop_fold(job, job->n_folds - 1);
    job->floor = 0;
    cpr_status st = CPR_OK;
    for (size_t i = 0; st == CPR_OK && i < pr->n; i++) {
        const pool_record *rec = &pr->r[i];
        const char *key = rec->key;
        uint32_t job_id, shard;
        uint64_t ckpt;
        cpri_part_meta m;
        if (key[0] == 'F') {
            if (rec->vlen == 8)
                job->floor = cpri_get_be64((const unsigned char *)rec->val);
            continue;
        }
        if (cpri_key_meta_parse(key, rec->klen, &job_id, &shard, &ckpt) != 0)
            continue;
        st = cpri_meta_decode(rec->val, rec->vlen, &m);
        if (st == CPR_NO_MEMORY)
            break;
        if (st) { /* S5: as at open */
            cpri_log(CPR_LOG_ERROR, "job %s: the pool's %s record of shard %u checkpoint %llu "
                     "is damaged; %s (cprctl verify reports it)", job->name,
                     key[0] == 'B' ? "fold" : "part", shard, (unsigned long long)ckpt,
                     key[0] == 'B' ? "restores of that shard from there on fail"
                                   : "the part is ignored");
            st = note_damaged(store, job->id, shard, ckpt, key[0] == 'B');
            continue;
        }
        st = key[0] == 'M' ? cpri_job_add_part(job, &m) : cpri_job_add_fold(job, &m);
    }
    if (st == CPR_OK)
        cpri_job_settle_consistency(job); /* C3: the floor came after the folds */
    return st;
}

/* R9: reload job `name`'s records from the pool: its part ('M'), fold ('B')
 * and floor ('F') records replace the local ones, in RocksDB and in memory,
 * so this gateway sees what every gateway committed. No-op for a local
 * store, or a job the pool does not know. This holds commit_mu from before
 * it reads the pool until the rebuild is done (none of this gateway's
 * commits lands in between: what it read holds every one of them), and mu
 * for the rebuild. The other writers of the job's records here, folds and
 * retention, write the pool, count the write in the job's catalog_gen and
 * change the catalog in memory under one hold of mu: a count that moved
 * while this read the pool means such a write may be missing from what it
 * read, and the rebuild would put back what the write took away (a replaced
 * fold, a part below the floor, whose segments are doomed): *raced is set
 * and nothing changes. */
static uint64_t job_gen_locked(cpr_store *store, const char *name)
{
    const cpri_job *job = cpri_catalog_find(&store->catalog, name);
    return job ? job->catalog_gen : 0;
}

static const char RECORD_TYPES[] = {'F', 'M', 'B'}; /* as at open: floor, parts, folds */

/* The job's id record and its records of RECORD_TYPES, read from the pool:
 * *id 0 when the pool has no such job. A job known here by id `known` (0:
 * not known) is read by one operation (cpri_rados_catalog_load_many),
 * unless it has more records than one read returns. */
static cpr_status read_job(cpr_store *store, const unsigned char *jkey, size_t jlen,
                           uint32_t known, uint32_t *id, pool_records *pr)
{
    unsigned char prefixes[sizeof RECORD_TYPES][5];
    char *val = NULL;
    size_t vlen = 0;
    int complete = 0;
    cpr_status st = CPR_OK;
    *id = 0;
    if (known) {
        for (size_t t = 0; t < sizeof RECORD_TYPES; t++) {
            prefixes[t][0] = (unsigned char)RECORD_TYPES[t];
            cpri_put_be32(prefixes[t] + 1, known);
        }
        st = cpri_rados_catalog_load_many(store->rados, jkey, jlen, &val, &vlen, prefixes[0],
                                          sizeof RECORD_TYPES, 5, keep_record, pr, &complete);
        if (st == CPR_OK && complete && val && vlen == 4 &&
            cpri_get_be32((const unsigned char *)val) == known) {
            free(val);
            *id = known;
            return pr->oom ? cpr_fail(CPR_NO_MEMORY, "out of memory reloading a job") : CPR_OK;
        }
        free(val);
        val = NULL;
        pool_records_free(pr); /* read it again, the long way */
        if (st)
            return st;
    }
    st = cpri_rados_catalog_get(store->rados, jkey, jlen, &val, &vlen);
    if (st || !val || vlen != 4) {
        free(val);
        return st;
    }
    *id = cpri_get_be32((const unsigned char *)val);
    free(val);
    for (size_t t = 0; st == CPR_OK && t < sizeof RECORD_TYPES; t++) {
        unsigned char prefix[5] = {(unsigned char)RECORD_TYPES[t]};
        cpri_put_be32(prefix + 1, *id);
        st = cpri_rados_catalog_load_prefix(store->rados, prefix, 5, keep_record, pr);
    }
    if (st == CPR_OK && pr->oom)
        st = cpr_fail(CPR_NO_MEMORY, "out of memory reloading a job");
    return st;
}

static cpr_status refresh_once(cpr_store *store, const char *name, const uint64_t *arrived,
                               int *raced)
{
    *raced = 0;
    if (!store->rados)
        return CPR_OK;
    unsigned char jkey[130];
    size_t jlen = cpri_key_job(jkey, name);
    pool_records pr = {0};
    uint32_t id = 0;
    if (arrived) { /* served already (below): no wait for commit_mu */
        pthread_mutex_lock(&store->mu);
        const cpri_job *known = cpri_catalog_find(&store->catalog, name);
        int served = known && known->fresh_seq > *arrived;
        pthread_mutex_unlock(&store->mu);
        if (served)
            return CPR_OK;
    }
    /* commit_mu from before the pool is read until the job is rebuilt: a
     * commit of this gateway's that landed in between would otherwise be
     * in memory, missing from what was read, and lost by the rebuild. */
    pthread_mutex_lock(&store->commit_mu);
    pthread_mutex_lock(&store->mu);
    const cpri_job *known = cpri_catalog_find(&store->catalog, name);
    if (arrived && known && known->fresh_seq > *arrived) {
        /* A reload that began reading the pool after this reader arrived
         * (reloads run one at a time, under commit_mu) has finished: what
         * it read holds every commit that preceded the reader. */
        pthread_mutex_unlock(&store->mu);
        pthread_mutex_unlock(&store->commit_mu);
        return CPR_OK;
    }
    uint32_t known_id = known ? known->id : 0;
    uint64_t gen = job_gen_locked(store, name); /* before the first read */
    uint64_t seq = ++store->reloads_begun;
    pthread_mutex_unlock(&store->mu);
    cpr_status st = read_job(store, jkey, jlen, known_id, &id, &pr);
    if (st || !id) {
        pthread_mutex_unlock(&store->commit_mu);
        pool_records_free(&pr);
        return st;
    }
    /* The records as loaded, hashed: unchanged since the last reload (no
     * gateway wrote the job meanwhile), there is nothing to do. */
    uint64_t hash = 1469598103934665603ull;
    for (size_t i = 0; i < pr.n; i++) {
        const unsigned char *parts[2] = {(const unsigned char *)pr.r[i].key,
                                         (const unsigned char *)pr.r[i].val};
        size_t lens[2] = {pr.r[i].klen, pr.r[i].vlen};
        for (int k = 0; k < 2; k++) {
            for (size_t b = 0; b < lens[k]; b++)
                hash = (hash ^ parts[k][b]) * 1099511628211ull;
            hash = (hash ^ lens[k]) * 1099511628211ull; /* field boundaries count */
        }
    }
    hash = hash ? hash : 1;
    pthread_mutex_lock(&store->mu);
    if (job_gen_locked(store, name) != gen) { /* a fold or retention wrote */
        *raced = 1;
        pthread_mutex_unlock(&store->mu);
        pthread_mutex_unlock(&store->commit_mu);
        pool_records_free(&pr);
        return CPR_OK;
    }
    cpri_job *job = cpri_catalog_find(&store->catalog, name);
    if (job && job->id == id && job->pool_hash == hash) {
        job->fresh_seq = seq;
        pthread_mutex_unlock(&store->mu);
        pthread_mutex_unlock(&store->commit_mu);
        pool_records_free(&pr);
        return CPR_OK;
    }
    if (!job)
        st = cpri_catalog_add_job(&store->catalog, name, id, &job);
    else if (job->id != id)
        st = cpr_fail(CPR_CORRUPT, "job %s has id %u here and %u in the pool", name, job->id, id);
    /* RocksDB, the local copy (R1): the job's records as the pool has them. */
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_iterator_t *it;
    for (size_t t = 0; st == CPR_OK && t < sizeof RECORD_TYPES; t++) {
        unsigned char prefix[5] = {(unsigned char)RECORD_TYPES[t]};
        cpri_put_be32(prefix + 1, id);
        it = rocksdb_create_iterator(store->db, store->read_opts);
        for (rocksdb_iter_seek(it, (const char *)prefix, 5); rocksdb_iter_valid(it);
             rocksdb_iter_next(it)) {
            size_t klen;
            const char *key = rocksdb_iter_key(it, &klen);
            if (klen < 5 || memcmp(key, prefix, 5) != 0)
                break;
            rocksdb_writebatch_delete(wb, key, klen);
        }
        rocksdb_iter_destroy(it);
    }
    unsigned char jval[4];
    cpri_put_be32(jval, id);
    rocksdb_writebatch_put(wb, (const char *)jkey, jlen, (const char *)jval, 4);
    for (size_t i = 0; i < pr.n; i++)
        rocksdb_writebatch_put(wb, pr.r[i].key, pr.r[i].klen, pr.r[i].val, pr.r[i].vlen);
    /* Not synced: the copy is rebuilt from the pool at every open anyway. */
    char *err = NULL;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    if (st == CPR_OK)
        rocksdb_write(store->db, wo, wb, &err);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_writebatch_destroy(wb);
    if (err)
        st = cpri_rocks_error(err, "copying a job's records from RADOS");
    if (st == CPR_OK)
        st = rebuild_job(store, job, &pr);
    if (st == CPR_OK) {
        job->pool_hash = hash;
        job->fresh_seq = seq;
    } else if (job) { /* maybe rebuilt in part: no reader may take it as is */
        job->pool_hash = 0;
        job->fresh_seq = 0;
    }
    pthread_mutex_unlock(&store->mu);
    pthread_mutex_unlock(&store->commit_mu);
    pool_records_free(&pr);
    return st;
}

/* R9: may this gateway run retention or folding of job `name`? Locally
 * always; in RADOS when it holds the job's lease, after reloading the job
 * from the pool. The caller holds fold_mu. */
/* Job `name`'s id here, 0 if it is not known. */
static uint32_t job_id_of(cpr_store *store, const char *name)
{
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find(&store->catalog, name);
    uint32_t id = job ? job->id : 0;
    pthread_mutex_unlock(&store->mu);
    return id;
}

cpr_status cpri_store_hold_job(cpr_store *store, const char *name, int *held)
{
    *held = 1;
    if (!store->rados)
        return CPR_OK;
    uint32_t id = job_id_of(store, name);
    if (!id)
        return CPR_OK; /* nothing of it here */
    cpr_status st = cpri_rados_job_hold(store->rados, id, held);
    if (st == CPR_OK && *held)
        st = cpri_store_refresh_job(store, name);
    if (st == CPR_OK && !*held)
        cpri_log(CPR_LOG_DEBUG, "store %s: job %s is held by another gateway: its retention "
                 "and folding run there", store->dir, name);
    return st;
}

cpr_status cpri_store_renew_job(cpr_store *store, const char *name)
{
    if (!store->rados)
        return CPR_OK;
    uint32_t id = job_id_of(store, name);
    return id ? cpri_rados_job_renew(store->rados, id) : CPR_OK;
}

#define REFRESH_TRIES 3

/* R9: refresh_once until no write of this gateway's raced it. After
 * REFRESH_TRIES races, with fold_mu, which every such writer holds (fold.c
 * D3): unless the caller holds it already, in which case no race happens. */
static cpr_status refresh_job(cpr_store *store, const char *name, const uint64_t *arrived,
                              int have_fold_mu)
{
    int raced = 0;
    cpr_status st = CPR_OK;
    for (int i = 0; i < REFRESH_TRIES; i++) {
        st = refresh_once(store, name, arrived, &raced);
        if (st || !raced)
            return st;
    }
    if (have_fold_mu)
        return cpr_fail(CPR_INTERNAL, "job %s: its records changed here while they were "
                        "reloaded, although retention and folding are held", name);
    pthread_mutex_lock(&store->fold_mu);
    st = refresh_once(store, name, arrived, &raced);
    pthread_mutex_unlock(&store->fold_mu);
    if (st == CPR_OK && raced)
        st = cpr_fail(CPR_INTERNAL, "job %s: its records changed here while they were "
                      "reloaded under fold_mu", name);
    return st;
}

cpr_status cpri_store_refresh_job(cpr_store *store, const char *name)
{
    return refresh_job(store, name, NULL, 1);
}

/* R9 for readers (list, latest cut, restore). They do not wait for a fold
 * or retention pass in progress (which holds fold_mu for as long as it
 * reads and writes segments): a reload is only retried when one of them
 * published meanwhile. Skipping the reload instead served, during every
 * fold, what this gateway knew before: parts committed through another
 * gateway were missing from lists, cuts and restores.
 *
 * Readers share reloads: one that began reading the pool after the reader
 * arrived serves it (refresh_once). Reloads run one at a time (commit_mu),
 * so N restores of a job arriving at once cost one or two reloads, not N
 * in a row. */
uint64_t cpri_store_reloads_begun(cpr_store *store)
{
    pthread_mutex_lock(&store->mu);
    uint64_t n = store->reloads_begun;
    pthread_mutex_unlock(&store->mu);
    return n;
}

void cpri_store_refresh_since(cpr_store *store, const char *name, uint64_t arrived)
{
    if (!store->rados || !name || cpri_check_job_name(name) != CPR_OK)
        return;
    if (refresh_job(store, name, &arrived, 0) != CPR_OK) /* the local copy serves */
        cpri_log(CPR_LOG_WARN, "store %s: job %s not reloaded from RADOS: %s", store->dir, name,
                 cpr_errmsg());
}

void cpri_store_refresh_for_read(cpr_store *store, const char *name)
{
    if (store->rados)
        cpri_store_refresh_since(store, name, cpri_store_reloads_begun(store));
}

/* ---- open / close ------------------------------------------------------ */

static cpr_status load_jobs(cpr_store *store, rocksdb_iterator_t *it)
{
    cpr_status st = CPR_OK;
    for (rocksdb_iter_seek(it, "J", 1); st == CPR_OK && rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *key = rocksdb_iter_key(it, &klen);
        const char *val = rocksdb_iter_value(it, &vlen);
        char name[CPR_NAME_MAX + 1];
        cpri_job *job;
        if (klen < 1 || key[0] != 'J')
            break;
        if (klen - 1 > CPR_NAME_MAX || vlen != 4) {
            cpri_log(CPR_LOG_ERROR, "skipping malformed job record");
            continue;
        }
        memcpy(name, key + 1, klen - 1);
        name[klen - 1] = '\0';
        st = cpri_catalog_add_job(&store->catalog, name,
                                 cpri_get_be32((const unsigned char *)val), &job);
    }
    char *err = NULL;
    rocksdb_iter_get_error(it, &err);
    if (st == CPR_OK && err)
        return cpri_rocks_error(err, "reading job records");
    rocksdb_free(err);
    return st;
}

static void load_floor(cpr_store *store, cpri_job *job)
{
    unsigned char key[CPR_FLOOR_KEY_LEN];
    size_t vlen = 0;
    char *err = NULL;
    cpri_key_floor(key, job->id);
    char *val = rocksdb_get(store->db, store->read_opts, (const char *)key, sizeof key,
                            &vlen, &err);
    if (err)
        rocksdb_free(err);
    if (val && vlen == 8)
        job->floor = cpri_get_be64((const unsigned char *)val);
    rocksdb_free(val);
}

/* S5: under store->mu (at open, alone); once per record, for reloads. */
static cpr_status note_damaged(cpr_store *store, uint32_t job_id, uint32_t shard, uint64_t ckpt,
                               int fold)
{
    for (size_t i = 0; i < store->n_damaged; i++) {
        const damaged_part *d = &store->damaged[i];
        if (d->job_id == job_id && d->shard == shard && d->checkpoint == ckpt &&
            d->fold == fold)
            return CPR_OK;
    }
    damaged_part *grown = realloc(store->damaged, (store->n_damaged + 1) * sizeof *grown);
    if (!grown)
        return cpr_fail(CPR_NO_MEMORY, "out of memory loading part records");
    store->damaged = grown;
    store->damaged[store->n_damaged++] = (damaged_part){job_id, shard, ckpt, fold};
    return CPR_OK;
}

int cpri_store_is_damaged(const cpr_store *store, uint32_t job_id, uint32_t shard, uint64_t ckpt)
{
    for (size_t i = 0; i < store->n_damaged; i++)
        if (!store->damaged[i].fold && store->damaged[i].job_id == job_id &&
            store->damaged[i].shard == shard && store->damaged[i].checkpoint == ckpt)
            return 1;
    return 0;
}

cpr_status cpri_store_check_folds(const cpr_store *store, const cpri_job *job, uint32_t shard,
                                 uint64_t start, uint64_t as_of)
{
    for (size_t i = 0; i < store->n_damaged; i++) {
        const damaged_part *d = &store->damaged[i];
        if (d->fold && d->job_id == job->id && d->shard == shard && d->checkpoint <= as_of &&
            d->checkpoint > start)
            return cpr_fail(CPR_CORRUPT, "job %s shard %u: the fold record at checkpoint "
                            "%llu is damaged, and the parts it replaced may be gone; restore "
                            "as of an earlier checkpoint, or write a FULL of the shard (a "
                            "restore as of it or later does not need the fold)", job->name,
                            shard, (unsigned long long)d->checkpoint);
    }
    return CPR_OK;
}

/* Part ('M') or fold ('B') records. */
static cpr_status load_parts(cpr_store *store, rocksdb_iterator_t *it, char type)
{
    cpr_status st = CPR_OK;
    char prefix[1] = {type};
    /* 'M' keys sort by (job, shard, checkpoint): per shard ascending, so
     * every DELTA's base is loaded before it (catalog invariant C2). */
    for (rocksdb_iter_seek(it, prefix, 1); st == CPR_OK && rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *key = rocksdb_iter_key(it, &klen);
        const char *val = rocksdb_iter_value(it, &vlen);
        uint32_t job_id, shard;
        uint64_t ckpt;
        cpri_part_meta m;
        if (klen < 1 || key[0] != type)
            break;
        if (cpri_key_meta_parse(key, klen, &job_id, &shard, &ckpt) != 0)
            continue;
        cpri_job *job = cpri_catalog_find_id(&store->catalog, job_id);
        cpr_status dec = job ? cpri_meta_decode(val, vlen, &m) : CPR_CORRUPT;
        if (dec == CPR_NO_MEMORY) {
            st = cpr_fail(CPR_NO_MEMORY, "out of memory loading part records");
            break;
        }
        if (dec != CPR_OK) { /* S5 */
            cpri_log(CPR_LOG_ERROR, "%s record of job id %u shard %u checkpoint %llu is "
                    "damaged; %s (cprctl verify reports it)", type == 'B' ? "fold" : "part",
                    job_id, shard, (unsigned long long)ckpt,
                    type == 'B' ? "restores of that shard from there on fail"
                                : "the part is ignored");
            st = note_damaged(store, job_id, shard, ckpt, type == 'B');
            continue;
        }
        st = type == 'M' ? cpri_job_add_part(job, &m) : cpri_job_add_fold(job, &m);
    }
    if (st == CPR_OK) {
        char *err = NULL;
        rocksdb_iter_get_error(it, &err);
        if (err)
            st = cpri_rocks_error(err, "reading part records");
    }
    return st;
}

static cpr_status load_catalog(cpr_store *store)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator(store->db, store->read_opts);
    cpr_status st = load_jobs(store, it);
    for (size_t j = 0; st == CPR_OK && j < store->catalog.n_jobs; j++)
        load_floor(store, store->catalog.jobs[j]);
    if (st == CPR_OK)
        st = load_parts(store, it, 'M');
    if (st == CPR_OK)
        st = load_parts(store, it, 'B');
    for (size_t j = 0; st == CPR_OK && j < store->catalog.n_jobs; j++)
        cpri_job_settle_consistency(store->catalog.jobs[j]); /* C3: folds are in */
    rocksdb_iter_destroy(it);
    return st;
}

static void setup_rocks_options(cpr_store *store)
{
    /* The catalog is small (records of kilobytes): RocksDB's defaults, the
     * WAL on, every commit a synced write. */
    store->db_opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(store->db_opts, 1);
    rocksdb_options_set_info_log_level(store->db_opts, 2 /* WARN */);
    rocksdb_options_set_keep_log_file_num(store->db_opts, 4);
    /* Memtables of 8 MiB: a flush needs that much free space, which the
     * catalog's headroom keeps (space.c, F1). */
    rocksdb_options_set_write_buffer_size(store->db_opts, 8 << 20);
    rocksdb_options_set_max_write_buffer_number(store->db_opts, 2);
    /* A torn last record (a crash inside a write nobody was told of) is
     * dropped; a damaged record anywhere else fails the open, loudly. */
    rocksdb_options_set_wal_recovery_mode(store->db_opts, 0 /* kTolerateCorruptedTailRecords */);
    store->read_opts = rocksdb_readoptions_create();
    rocksdb_readoptions_set_verify_checksums(store->read_opts, 1);
    store->sync_write = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(store->sync_write, !store->opts.no_sync);
}

/* Is the database empty (a new store)? */
static int db_is_empty(cpr_store *store)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator(store->db, store->read_opts);
    rocksdb_iter_seek_to_first(it);
    int empty = !rocksdb_iter_valid(it);
    rocksdb_iter_destroy(it);
    return empty;
}

/* Does `path` hold a file (not a directory) within `depth` levels? A
 * directory that cannot be read counts as holding one: the caller then
 * refuses rather than sweeps. */
static int holds_files(const char *path, int depth)
{
    DIR *d = opendir(path);
    if (!d)
        return errno != ENOENT;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *sub = cpri_path_join(path, e->d_name);
        struct stat sb;
        if (!sub || lstat(sub, &sb) != 0)
            found = 1;
        else if (S_ISDIR(sb.st_mode))
            found = depth > 1 && holds_files(sub, depth - 1);
        else
            found = 1;
        free(sub);
    }
    closedir(d);
    return found;
}

/* D1 (direct.c): the local store's name. It serves direct reads only; without
 * one the store works, and restores go through it. */
static void local_name(cpr_store *store, const char *dir)
{
    if (cpri_local_id(dir, 1, store->local_id) != CPR_OK) {
        cpri_log(CPR_LOG_WARN, "store %s: no direct reads (%s)", dir, cpr_errmsg());
        store->local_id[0] = 0;
    }
}

/* The 'V' record: a new store gets this build's format; any other format
 * is refused with a message that says which. Format 1 (rows as RocksDB
 * keys) has no 'V' record but has 'M' records. */
static cpr_status check_format(cpr_store *store, const char *dir)
{
    size_t vlen = 0;
    char *err = NULL;
    char *val = rocksdb_get(store->db, store->read_opts, "V", 1, &vlen, &err);
    if (err)
        return cpri_rocks_error(err, "reading the store format");
    uint32_t format = 0;
    if (val && vlen == 4)
        memcpy(&format, val, 4);
    int had = val != NULL;
    rocksdb_free(val);
    if (had && format == CPR_STORE_FORMAT)
        return CPR_OK;
    if (had)
        return cpr_fail(CPR_FAILED_PRECONDITION, "store %s is in format %u; this build "
                        "reads store format %u only (docs/format.md). Open it with a "
                        "build of that format, or start a new store", dir, format,
                        CPR_STORE_FORMAT);
    if (!db_is_empty(store))
        return cpr_fail(CPR_FAILED_PRECONDITION, "store %s is in format 1 (rows kept as "
                        "RocksDB keys, CPR 0.1); this build reads store format %u only "
                        "(docs/format.md). Export its jobs with the older cprctl, or start "
                        "a new store", dir, CPR_STORE_FORMAT);
    /* A new catalog over a directory that already holds committed data: its
     * db/ was lost or moved. Going on would record a new store here, and the
     * sweep below would take every segment and blob for a crash leftover. */
    const char *held = NULL;
    if (!store->opts.rados_pool) /* a pool's catalog is rebuilt from the pool (R1) */
        held = holds_files(store->segs_dir, 3) ? "segments/"
               : holds_files(store->blobs_dir, 3) ? "blobs/" : NULL;
    if (held)
        return cpr_fail(CPR_FAILED_PRECONDITION, "store %s: its catalog (db/) is missing or "
                        "empty, but %s holds checkpoint data written under one; it was left "
                        "as it is. Put the store's db/ back, or move %s aside to start a new "
                        "store here", dir, held, held);
    unsigned char v[4];
    format = CPR_STORE_FORMAT;
    memcpy(v, &format, 4);
    rocksdb_put(store->db, store->sync_write, "V", 1, (const char *)v, 4, &err);
    return err ? cpri_rocks_error(err, "recording the store format") : CPR_OK;
}

/* Rebuild of the local catalog from the pool's (R1): every local record
 * but 'V' goes, every record of the pool comes, in one synced write. */
typedef struct rebuild {
    rocksdb_writebatch_t *wb;
    uint64_t records;
} rebuild;

static int rebuild_put(void *ctx, const void *key, size_t klen, const void *val, size_t vlen)
{
    rebuild *rb = ctx;
    rocksdb_writebatch_put(rb->wb, key, klen, val, vlen);
    rb->records++;
    return 0;
}

/* R6: this directory's gateway id, from its file `gateway`, claimed in the
 * pool's catalog ('W' id -> "host:directory"): an id another directory
 * claimed is never used; a new one is drawn at random. */
static cpr_status gateway_id(cpr_store *store, char *desc, size_t cap, uint32_t *out)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(desc, cap, "%s:%s", host, store->dir);
    char *path = cpri_path_join(store->dir, "gateway");
    if (!path)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening store %s", store->dir);
    uint32_t id = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        unsigned v = 0;
        if (fscanf(f, "%8x", &v) == 1)
            id = v;
        fclose(f);
    }
    cpr_status st = CPR_OK;
    for (int tries = 0; tries < 16; tries++) {
        while (id == 0 && st == CPR_OK) {
            if (getentropy(&id, sizeof id) != 0)
                st = cpr_fail(CPR_IO, "no random bytes for a gateway id: %s", strerror(errno));
        }
        if (st)
            break;
        unsigned char key[5] = {'W'};
        cpri_put_be32(key + 1, id);
        char *val = NULL;
        size_t vlen = 0;
        st = cpri_rados_catalog_get(store->rados, key, sizeof key, &val, &vlen);
        if (st == CPR_OK && !val)
            st = cpri_rados_catalog_cas(store->rados, key, sizeof key, NULL, 0, desc,
                                        strlen(desc), "claiming a gateway id");
        int mine = st == CPR_OK && (!val || (vlen == strlen(desc) && !memcmp(val, desc, vlen)));
        free(val);
        if (st == CPR_FAILED_PRECONDITION)
            st = CPR_OK; /* claimed meanwhile: read it again */
        else if (st == CPR_OK && mine)
            break;
        else if (st == CPR_OK)
            id = 0; /* another directory's: draw again */
        if (st)
            break;
    }
    if (st == CPR_OK) {
        char line[16];
        int len = snprintf(line, sizeof line, "%08x\n", id);
        st = cpri_replace_file(store->dir, path, line, (size_t)len);
    }
    free(path);
    if (st == CPR_OK)
        *out = id;
    return st;
}

static cpr_status open_rados(cpr_store *store)
{
    cpri_rados_target t = {store->opts.rados_conf, store->opts.rados_user,
                           store->opts.rados_pool, store->opts.rados_namespace};
    cpr_status st = cpri_rados_connect(&t, &store->rados);
    if (st)
        return st;
    rebuild rb = {rocksdb_writebatch_create(), 0};
    rocksdb_iterator_t *it = rocksdb_create_iterator(store->db, store->read_opts);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen;
        const char *key = rocksdb_iter_key(it, &klen);
        if (!(klen == 1 && key[0] == 'V'))
            rocksdb_writebatch_delete(rb.wb, key, klen);
    }
    char *err = NULL;
    rocksdb_iter_get_error(it, &err);
    rocksdb_iter_destroy(it);
    if (err)
        st = cpri_rocks_error(err, "reading the local catalog");
    if (st == CPR_OK)
        st = cpri_rados_catalog_load(store->rados, rebuild_put, &rb);
    if (st == CPR_OK) {
        rocksdb_write(store->db, store->sync_write, rb.wb, &err);
        if (err)
            st = cpri_rocks_error(err, "rebuilding the local catalog from RADOS");
    }
    rocksdb_writebatch_destroy(rb.wb);
    char desc[4400];
    uint32_t id = 0;
    if (st == CPR_OK)
        st = gateway_id(store, desc, sizeof desc, &id);
    if (st == CPR_OK)
        st = cpri_rados_gateway_start(store->rados, id, desc);
    if (st == CPR_OK)
        store->gateway_id = id;
    if (st == CPR_OK)
        st = cpri_backend_rados_open(store->rados, &store->segs);
    if (st == CPR_OK)
        cpri_log(CPR_LOG_INFO, "store %s: segments and catalog in RADOS %s (%llu records), "
                 "gateway %08x", store->dir, cpri_rados_where(store->rados),
                 (unsigned long long)rb.records, id);
    return st;
}

static cpr_status make_dirs(cpr_store *store, const char *dir)
{
    store->dir = strdup(dir);
    store->db_dir = cpri_path_join(dir, "db");
    store->blobs_dir = cpri_path_join(dir, "blobs");
    store->staging_dir = cpri_path_join(dir, "staging");
    store->segs_dir = cpri_path_join(dir, "segments");
    if (!store->dir || !store->db_dir || !store->blobs_dir || !store->staging_dir ||
        !store->segs_dir)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening store %s", dir);
    if (cpri_mkdirs(dir) || cpri_mkdirs(store->blobs_dir) || cpri_mkdirs(store->staging_dir))
        return cpr_fail(errno == ENOSPC ? CPR_RESOURCE_EXHAUSTED : CPR_IO,
                        "cannot create store directories under %s: %s", dir,
                        strerror(errno));
    return CPR_OK;
}

cpr_status cpr_store_open(const char *dir, const cpr_store_options *opts,
                          cpr_store **out)
{
    cpr_status st = CPR_OK;
    char *err = NULL;
    cpr_store *store;

    if (!dir || !*dir || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_open needs a directory");
    store = calloc(1, sizeof *store);
    if (!store)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening store %s", dir);
    pthread_mutex_init(&store->mu, NULL);
    pthread_mutex_init(&store->commit_mu, NULL);
    pthread_mutex_init(&store->recovery_mu, NULL);
    pthread_mutex_init(&store->fold_mu, NULL);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* tokens grow across restarts too */
    atomic_store(&store->token_seq, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
    if (opts)
        store->opts = *opts;
    if (store->opts.retain_cuts == 0)
        store->opts.retain_cuts = 2;
    if (store->opts.max_open_parts == 0)
        store->opts.max_open_parts = 4096;
    if (store->opts.max_open_parts_per_job == 0)
        store->opts.max_open_parts_per_job = 1024;
    if (store->opts.max_open_blobs == 0)
        store->opts.max_open_blobs = 4096;
    if (store->opts.max_open_blobs_per_job == 0)
        store->opts.max_open_blobs_per_job = 1024;
    st = make_dirs(store, dir);
    if (st)
        goto out;
    setup_rocks_options(store);
    store->db = rocksdb_open(store->db_opts, store->db_dir, &err);
    if (err) {
        st = cpri_rocks_error(err, "opening the store database");
        if (st == CPR_UNAVAILABLE)
            cpr_fail(st, "store %s is already open in another process or handle (a ckptd "
                     "serving it? reach it through its grpc:// or unix: address, or stop it)",
                     dir);
        goto out;
    }
    st = check_format(store, dir);
    if (st == CPR_OK && store->opts.rados_pool)
        st = open_rados(store);
    else if (st == CPR_OK) {
        st = cpri_backend_local_open(store->segs_dir, store->opts.no_sync,
                                     store->opts.buffered_reads, &store->segs);
        if (st == CPR_OK)
            local_name(store, dir);
    }
    if (st == CPR_OK)
        st = load_catalog(store);
    if (st)
        goto out;
    pthread_mutex_lock(&store->mu);
    uint64_t swept = cpri_store_sweep(store, 1);
    pthread_mutex_unlock(&store->mu);
    swept += cpri_store_sweep_segments(store);
    if (swept)
        cpri_log(CPR_LOG_INFO, "store %s: removed %llu leftovers of interrupted writes",
                dir, (unsigned long long)swept);
    cpri_ballast_restore(store);
    if (!store->opts.no_fold)
        st = cpri_fold_start(store);
out:
    if (st) {
        cpr_store_close(store);
        return st;
    }
    *out = store;
    return CPR_OK;
}

void cpr_store_close(cpr_store *store)
{
    if (!store)
        return;
    cpri_fold_stop(store);
    while (store->open_parts) {
        open_part *p = store->open_parts;
        store->open_parts = p->next;
        cpri_open_part_free(store, p);
    }
    while (store->doomed) { /* no reader is left */
        doomed_seg *d = store->doomed;
        store->doomed = d->next;
        if (!store->rados) /* S8: in RADOS they wait out their grace, for the sweep */
            store->segs->ops->remove(store->segs, d->name);
        free(d);
    }
    if (store->segs)
        store->segs->ops->close(store->segs);
    cpri_rados_close(store->rados);
    if (store->db) {
        /* The catalog at rest in table files (block checksums), not only
         * in the WAL: a damaged record is then reported, not taken for a
         * torn tail. */
        char *err = NULL;
        rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
        rocksdb_flush(store->db, fo, &err);
        rocksdb_flushoptions_destroy(fo);
        if (err) {
            cpri_log(CPR_LOG_WARN, "store %s: flushing the catalog at close: %s", store->dir, err);
            rocksdb_free(err);
        }
        rocksdb_close(store->db);
    }
    if (store->db_opts)
        rocksdb_options_destroy(store->db_opts);
    if (store->read_opts)
        rocksdb_readoptions_destroy(store->read_opts);
    if (store->sync_write)
        rocksdb_writeoptions_destroy(store->sync_write);
    cpri_catalog_release(&store->catalog);
    pthread_mutex_destroy(&store->mu);
    pthread_mutex_destroy(&store->commit_mu);
    pthread_mutex_destroy(&store->recovery_mu);
    pthread_mutex_destroy(&store->fold_mu);
    free(store->damaged);
    free(store->dir);
    free(store->db_dir);
    free(store->blobs_dir);
    free(store->staging_dir);
    free(store->segs_dir);
    free(store);
}

/* ---- sweep of crash leftovers (S2, S3) --------------------------------- */

static int staging_in_use(cpr_store *store, const char *path)
{
    for (open_part *p = store->open_parts; p; p = p->next)
        if ((p->dir && strcmp(p->dir, path) == 0) ||
            (p->final_dir && strcmp(p->final_dir, path) == 0))
            return 1;
    return 0;
}

/* Visit root/j_<job>/<shard>-<ckpt> directories. */
static uint64_t sweep_root(cpr_store *store, const char *root, int is_staging)
{
    uint64_t removed = 0;
    DIR *jobs = opendir(root);
    struct dirent *je;
    if (!jobs)
        return 0;
    while ((je = readdir(jobs)) != NULL) {
        if (strncmp(je->d_name, "j_", 2) != 0)
            continue;
        char *job_dir = cpri_path_join(root, je->d_name);
        DIR *parts = job_dir ? opendir(job_dir) : NULL;
        struct dirent *pe;
        cpri_job *job = cpri_catalog_find(&store->catalog, je->d_name + 2);
        while (parts && (pe = readdir(parts)) != NULL) {
            unsigned shard;
            unsigned long long ckpt;
            char tail;
            if (pe->d_name[0] == '.')
                continue;
            char *path = cpri_path_join(job_dir, pe->d_name);
            int parsed = sscanf(pe->d_name, "%u-%llu%c", &shard, &ckpt, &tail) == 2;
            int keep = !path || staging_in_use(store, path) ||
                       (!is_staging && parsed && job &&
                        (cpri_job_find_part(job, shard, ckpt) ||
                         cpri_store_is_damaged(store, job->id, shard, ckpt))); /* S5 */
            if (!keep) {
                cpri_rmtree(path);
                removed++;
            }
            free(path);
        }
        if (parts)
            closedir(parts);
        /* A staging job directory left empty (its parts aborted or
         * committed) goes too: Begin creates parts in it under store->mu,
         * which the sweep holds. (Not in blobs/: a commit makes its job
         * directory there under commit_mu, outside store->mu.) */
        if (is_staging && job_dir)
            rmdir(job_dir);
        free(job_dir);
    }
    closedir(jobs);
    return removed;
}

/* Is segment `name` named by a record, an open part or a doomed entry? */
static int segment_known(cpr_store *store, const char *name)
{
    char buf[CPR_SEG_NAME_MAX];
    const char *slash = strchr(name, '/');
    if (!slash)
        return 0;
    for (open_part *p = store->open_parts; p; p = p->next) {
        size_t len = strlen(p->seg_name);
        if (len && strncmp(p->seg_name, name, len) == 0 && (!name[len] || name[len] == '.'))
            return 1; /* its segment, or one of its blobs (B1) */
    }
    for (doomed_seg *d = store->doomed; d; d = d->next)
        if (strcmp(d->name, name) == 0)
            return 1;
    char job_name[CPR_NAME_MAX + 1];
    snprintf(job_name, sizeof job_name, "%.*s", (int)(slash - name), name);
    cpri_job *job = cpri_catalog_find(&store->catalog, job_name);
    unsigned shard;
    unsigned long long ckpt;
    if (!job)
        return 0;
    int fold = sscanf(slash + 1, "%u-f%llu.", &shard, &ckpt) == 2;
    if (!fold && sscanf(slash + 1, "%u-%llu.", &shard, &ckpt) != 2)
        return 0;
    if (!fold && cpri_store_is_damaged(store, job->id, shard, ckpt))
        return 1; /* S5 */
    const cpri_part_meta *list = fold ? job->folds : job->parts;
    size_t n = fold ? job->n_folds : job->n_parts;
    for (size_t i = 0; i < n; i++) {
        if (list[i].shard != shard || list[i].checkpoint != ckpt || !list[i].seg_token)
            continue;
        (fold ? cpri_seg_fold_name : cpri_seg_part_name)(buf, job->name, shard, ckpt,
                                                       list[i].seg_token);
        if (strcmp(buf, name) == 0)
            return 1;
        size_t seg_len = strlen(buf);
        if (!fold && strncmp(buf, name, seg_len) == 0 &&
            strncmp(name + seg_len, ".b_", 3) == 0) /* B1: one of its blobs? */
            return cpri_meta_blob(&list[i], name + seg_len + 3) != NULL;
    }
    return 0;
}

typedef struct seg_sweep {
    cpr_store *store;
    char **names;
    size_t n, cap;
    uint32_t live[64], dead[64]; /* gateways asked about (R7), a few at most */
    size_t n_live, n_dead;
} seg_sweep;

/* R7: was `name` written by another gateway that still holds its lease? */
static int other_gateway_alive(seg_sweep *s, const char *name)
{
    const char *slash = strchr(name, '/'), *dot = slash ? strchr(slash, '.') : NULL;
    unsigned long long token = 0;
    if (!s->store->gateway_id || !dot || sscanf(dot + 1, "%16llx", &token) != 1)
        return 0;
    uint32_t gw = (uint32_t)(token >> 32);
    if (gw == s->store->gateway_id)
        return 0;
    for (size_t i = 0; i < s->n_live; i++)
        if (s->live[i] == gw)
            return 1;
    for (size_t i = 0; i < s->n_dead; i++)
        if (s->dead[i] == gw)
            return 0;
    int alive = cpri_rados_gateway_alive(s->store->rados, gw) != 0; /* unknown: alive */
    if (alive && s->n_live < 64)
        s->live[s->n_live++] = gw;
    else if (!alive && s->n_dead < 64)
        s->dead[s->n_dead++] = gw;
    return alive;
}

static int note_unknown_segment(void *ctx, const char *name)
{
    seg_sweep *s = ctx;
    if (segment_known(s->store, name) || other_gateway_alive(s, name))
        return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **grown = realloc(s->names, cap * sizeof *grown);
        if (!grown)
            return 1;
        s->names = grown;
        s->cap = cap;
    }
    s->names[s->n] = strdup(name);
    s->n += s->names[s->n] != NULL;
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* R7: the candidates' jobs read again from the pool, then the candidates a
 * record now names dropped. Their gateways were found closed or lapsed (or
 * are this one, fenced) before this read: whatever they committed is in
 * the pool now, also what another gateway committed after this open read
 * the catalog and before it listed. A job that cannot be read keeps all its
 * candidates. */
static void recheck_in_pool(seg_sweep *s)
{
    cpr_store *store = s->store;
    qsort(s->names, s->n, sizeof *s->names, name_cmp);
    size_t kept = 0;
    for (size_t i = 0; i < s->n;) {
        char job[CPR_NAME_MAX + 1];
        const char *slash = strchr(s->names[i], '/');
        size_t len = slash ? (size_t)(slash - s->names[i]) : strlen(s->names[i]);
        snprintf(job, sizeof job, "%.*s", (int)len, s->names[i]);
        size_t end = i;
        while (end < s->n && strncmp(s->names[end], s->names[i], len + 1) == 0)
            end++;
        cpr_status st = cpri_store_refresh_job(store, job);
        if (st)
            cpri_log(CPR_LOG_WARN, "store %s: job %s not read again from RADOS (%s); its %zu "
                     "objects without a record are kept", store->dir, job, cpr_errmsg(),
                     end - i);
        pthread_mutex_lock(&store->mu);
        for (; i < end; i++) {
            if (st || segment_known(store, s->names[i]))
                free(s->names[i]);
            else
                s->names[kept++] = s->names[i];
        }
        pthread_mutex_unlock(&store->mu);
    }
    s->n = kept;
}

/* Segments no record names (S2): a crash before a commit record or while a
 * fold was written. Only at open (the store's other threads have not
 * started): at run time every writer removes its own segment when it
 * fails, and a sweep could race a record just written whose catalog entry
 * is not in memory yet. */
static uint64_t sweep_segments(cpr_store *store)
{
    seg_sweep s = {.store = store};
    pthread_mutex_lock(&store->mu);
    store->segs->ops->list(store->segs, note_unknown_segment, &s);
    pthread_mutex_unlock(&store->mu);
    size_t damaged = store->n_damaged;
    if (store->rados && s.n)
        recheck_in_pool(&s);
    if (store->n_damaged > damaged) { /* S5: a record read again may be the only one */
        cpri_log(CPR_LOG_WARN, "store %s: a record read again from the pool is damaged; "
                 "objects without a record are kept", store->dir);
        for (size_t i = 0; i < s.n; i++)
            free(s.names[i]);
        s.n = 0;
    }
    for (size_t i = 0; i < s.n; i++) {
        store->segs->ops->remove(store->segs, s.names[i]);
        free(s.names[i]);
    }
    free(s.names);
    return s.n;
}

uint64_t cpri_store_sweep(cpr_store *store, int at_open)
{
    /* Blob directories, like segments, only at open (S2): a commit whose
     * synced record write failed may still have landed in the WAL, and its
     * blobs must outlive this process for the next open to decide. */
    return sweep_root(store, store->staging_dir, 1) +
           (at_open && !store->n_damaged /* S5, as for segments */
                ? sweep_root(store, store->blobs_dir, 0)
                : 0);
}

uint64_t cpri_store_sweep_segments(cpr_store *store)
{
    if (store->n_damaged) { /* S5: a damaged record may be the only one naming it */
        cpri_log(CPR_LOG_WARN, "store %s: %zu damaged records; segments without a record "
                "are kept", store->dir, store->n_damaged);
        return 0;
    }
    return sweep_segments(store);
}

/* ---- segment names and readers (S7) ------------------------------------ */

int cpri_seg_name_ok(const void *name, size_t n)
{
    const unsigned char *s = name;
    size_t slash = 0;
    if (n == 0 || n >= CPR_SEG_NAME_MAX || s[0] == '.' || s[0] == '/')
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == '/')
            slash++;
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return slash == 1 && s[n - 1] != '/' && !memmem(s, n, "/.", 2);
}

void cpri_seg_part_name(char *out, const char *job, uint32_t shard, uint64_t ckpt,
                       uint64_t token)
{
    snprintf(out, CPR_SEG_NAME_MAX, "%s/%u-%llu.%016llx", job, shard,
             (unsigned long long)ckpt, (unsigned long long)token);
}

void cpri_seg_blob_name(char *out, const char *seg, const char *blob)
{
    snprintf(out, CPR_SEG_NAME_MAX, "%s.b_%s", seg, blob);
}

void cpri_seg_fold_name(char *out, const char *job, uint32_t shard, uint64_t ckpt,
                       uint64_t token)
{
    snprintf(out, CPR_SEG_NAME_MAX, "%s/%u-f%llu.%016llx", job, shard,
             (unsigned long long)ckpt, (unsigned long long)token);
}

uint64_t cpri_seg_new_token(cpr_store *store)
{
    uint64_t t = atomic_fetch_add(&store->token_seq, 1);
    if (store->gateway_id) /* R7: the gateway's id in the high half */
        return (uint64_t)store->gateway_id << 32 | (uint32_t)t;
    return t ? t : atomic_fetch_add(&store->token_seq, 1);
}

void cpri_store_reader_enter_locked(cpr_store *store)
{
    store->readers++;
}

/* Under store->mu: unlink the doomed entries that may go now (S7, S8). */
static doomed_seg *take_due_locked(cpr_store *store)
{
    doomed_seg *todo = NULL;
    if (store->readers)
        return NULL;
    double now = cpri_now_s();
    for (doomed_seg **pp = &store->doomed; *pp;) {
        doomed_seg *d = *pp;
        if (d->due_s <= now) {
            *pp = d->next;
            d->next = todo;
            todo = d;
        } else {
            pp = &d->next;
        }
    }
    return todo;
}

static void remove_all(cpr_store *store, doomed_seg *todo)
{
    while (todo) {
        doomed_seg *d = todo;
        todo = d->next;
        store->segs->ops->remove(store->segs, d->name);
        free(d);
    }
}

void cpri_store_reader_leave(cpr_store *store)
{
    doomed_seg *todo = NULL;
    pthread_mutex_lock(&store->mu);
    if (--store->readers == 0)
        todo = take_due_locked(store);
    pthread_mutex_unlock(&store->mu);
    remove_all(store, todo);
}

void cpri_store_reap_doomed(cpr_store *store)
{
    pthread_mutex_lock(&store->mu);
    doomed_seg *todo = take_due_locked(store);
    pthread_mutex_unlock(&store->mu);
    remove_all(store, todo);
}

void cpri_store_doom_locked(cpr_store *store, const char *name)
{
    /* S8: in RADOS always; a local store once it planned for a direct
     * reader, unless its disk is short of room */
    int grace = store->rados || (atomic_load(&store->plans_served) && !cpri_space_low(store));
    if (!store->readers && !grace) {
        store->segs->ops->remove(store->segs, name);
        return;
    }
    doomed_seg *d = calloc(1, sizeof *d);
    if (!d) { /* S7 forbids removing it now: the sweep at the next open will */
        cpri_log(CPR_LOG_WARN, "out of memory: segment %s stays until the next open", name);
        return;
    }
    d->due_s = grace ? cpri_now_s() + DOOM_GRACE_S : 0; /* S8 */
    snprintf(d->name, sizeof d->name, "%s", name);
    d->next = store->doomed;
    store->doomed = d;
}

/* ---- metadata queries -------------------------------------------------- */

static void fill_info(cpr_part_info *info, const cpri_part_meta *m, int committed)
{
    info->shard = m->shard;
    info->checkpoint = m->checkpoint;
    info->kind = m->kind;
    info->step = m->step;
    info->num_shards = m->num_shards;
    info->base = m->kind == CPR_KIND_DELTA ? m->base : 0;
    info->rows = m->rows;
    info->bytes = m->bytes;
    info->committed = committed;
    info->consistent = committed && m->consistent;
    info->codecs = m->codecs;
}

/* Under store->mu: parts List shows (C5: none below the floor). */
static size_t count_listed(const cpr_store *store, const cpri_job *job, const char *job_name)
{
    size_t n = 0;
    for (size_t i = 0; job && i < job->n_parts; i++)
        n += !job->floor || job->parts[i].checkpoint >= job->floor;
    for (const open_part *p = store->open_parts; p; p = p->next)
        n += strcmp(p->job_name, job_name) == 0;
    return n;
}

static int info_cmp(const void *a, const void *b)
{
    const cpr_part_info *x = a, *y = b;
    if (x->checkpoint != y->checkpoint)
        return x->checkpoint < y->checkpoint ? -1 : 1;
    return x->shard < y->shard ? -1 : x->shard > y->shard;
}

/* Under store->mu: the parts of job_name, unsorted (cpr_store_list). */
static cpr_status list_locked(cpr_store *store, const char *job_name, cpr_part_info **out,
                              size_t *n)
{
    cpri_job *job = cpri_catalog_find(&store->catalog, job_name);
    size_t cap = job ? job->n_parts : 0, count = 0;
    for (open_part *p = store->open_parts; p; p = p->next)
        cap += strcmp(p->job_name, job_name) == 0;
    if (cap == 0 || count_listed(store, job, job_name) == 0) {
        if (job && job->n_folds)
            return cpr_fail(CPR_NOT_FOUND, "job %s has no parts on this store: its shards' "
                            "state at its floor %llu is in folds (a gc over several nodes "
                            "left it so); restore it through a client of every node",
                            job_name, (unsigned long long)job->floor);
        return cpr_fail(CPR_NOT_FOUND, "job %s has no parts", job_name);
    }
    cpr_part_info *infos = calloc(cap, sizeof *infos);
    if (!infos)
        return cpr_fail(CPR_NO_MEMORY, "out of memory listing job %s", job_name);
    for (size_t i = 0; job && i < job->n_parts; i++)
        if (!job->floor || job->parts[i].checkpoint >= job->floor) /* C5 */
            fill_info(&infos[count++], &job->parts[i], 1);
    for (open_part *p = store->open_parts; p; p = p->next)
        if (strcmp(p->job_name, job_name) == 0)
            fill_info(&infos[count++], &p->meta, 0);
    *out = infos;
    *n = count;
    return CPR_OK;
}

/* Under store->mu: the largest consistent cut of job_name (cpr_store_latest_cut). */
static cpr_status cut_locked(cpr_store *store, const char *job_name, uint64_t *cut)
{
    cpri_job *job = cpri_catalog_find(&store->catalog, job_name);
    if (job && job->n_parts == 0 && job->n_folds)
        return cpr_fail(CPR_NOT_FOUND, "job %s has no committed parts on this store, only "
                        "folds at its floor %llu: a cut is found over every node the job "
                        "is on (a client of all of them)", job_name,
                        (unsigned long long)job->floor);
    if (!job || job->n_parts == 0)
        return cpr_fail(CPR_NOT_FOUND, "job %s has no committed parts", job_name);
    if (cpri_job_cuts(job, cut, 1) == 0)
        return cpr_fail(CPR_NOT_FOUND, "job %s has no consistent cut yet: every shard "
                        "needs a committed FULL (or complete DELTA chain) at the same "
                        "checkpoint id", job_name);
    return CPR_OK;
}

cpr_status cpr_store_list_cut(cpr_store *store, const char *job_name, cpr_part_info **out,
                              size_t *n, uint64_t *cut)
{
    cpr_part_info *infos = NULL;
    size_t count = 0;
    uint64_t found = 0;
    cpr_status st = cpri_check_job_name(job_name);
    if (st)
        return cpri_store_count(store, st);
    cpri_store_refresh_for_read(store, job_name); /* rados.h R9: once for both */
    pthread_mutex_lock(&store->mu);
    st = list_locked(store, job_name, &infos, &count);
    if (st == CPR_OK && cut && cut_locked(store, job_name, &found) != CPR_OK)
        found = 0; /* no consistent cut yet */
    pthread_mutex_unlock(&store->mu);
    if (st)
        return cpri_store_count(store, st);
    qsort(infos, count, sizeof *infos, info_cmp);
    *out = infos;
    *n = count;
    if (cut)
        *cut = found;
    return CPR_OK;
}

cpr_status cpr_store_list(cpr_store *store, const char *job_name,
                          cpr_part_info **out, size_t *n)
{
    return cpr_store_list_cut(store, job_name, out, n, NULL);
}

/* Under store->mu: does `job` hold anything to restore or being written: a
 * part (committed or open) or a fold? A store of several nodes' job can hold
 * only folds of it: a gc whose floor was a cut over every node folded the
 * shards it held at the floor and dropped their parts (cpr_store_gc_floor_cut). */
static int job_holds_state(const cpr_store *store, const cpri_job *job)
{
    if (job->n_parts || job->n_folds)
        return 1;
    for (const open_part *p = store->open_parts; p; p = p->next)
        if (p->job_id == job->id)
            return 1;
    return 0;
}

cpr_status cpr_store_list_jobs(cpr_store *store, char ***names, size_t *n)
{
    cpr_status st = CPR_OK;
    size_t count = 0;
    pthread_mutex_lock(&store->mu);
    char **out = calloc(store->catalog.n_jobs + 1, sizeof *out);
    for (size_t i = 0; out && i < store->catalog.n_jobs; i++) {
        const cpri_job *job = store->catalog.jobs[i];
        if (!job_holds_state(store, job))
            continue;
        out[count] = strdup(job->name);
        if (!out[count++]) {
            st = cpr_fail(CPR_NO_MEMORY, "out of memory listing jobs");
            break;
        }
    }
    pthread_mutex_unlock(&store->mu);
    if (!out)
        st = cpr_fail(CPR_NO_MEMORY, "out of memory listing jobs");
    if (st) {
        cpr_names_free(out, count);
        return cpri_store_count(store, st);
    }
    qsort(out, count, sizeof *out, name_cmp);
    *names = out;
    *n = count;
    return CPR_OK;
}

const char *cpr_store_shared_id(const cpr_store *store)
{
    return store && store->rados ? cpri_rados_identity(store->rados) : NULL;
}

const char *cpr_store_read_id(const cpr_store *store)
{
    if (!store || store->rados)
        return cpr_store_shared_id(store);
    return store->local_id[0] ? store->local_id : NULL;
}

/* Appends to out[0..cap) what fmt says, keeping it terminated. */
static void append(char *out, size_t cap, const char *fmt, ...)
{
    size_t used = strnlen(out, cap);
    if (used + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + used, cap - used, fmt, ap);
    va_end(ap);
}

cpr_status cpr_store_part_location(cpr_store *store, const cpr_part_id *id, char *out,
                                   size_t cap)
{
    if (!store || !id || !out || cap == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_part_location needs a store, a part "
                        "id and room for the answer");
    cpr_status st = cpri_check_job_name(id->job);
    if (st)
        return st;
    out[0] = '\0';
    pthread_mutex_lock(&store->mu); /* (a List reloaded the job just before: R9) */
    cpri_job *job = cpri_catalog_find(&store->catalog, id->job);
    const cpri_part_meta *m = job ? cpri_job_find_part(job, id->shard, id->checkpoint) : NULL;
    int open = 0;
    for (open_part *p = store->open_parts; p && !m && !open; p = p->next)
        open = p->job_id == (job ? job->id : 0) && job && p->meta.shard == id->shard &&
               p->meta.checkpoint == id->checkpoint;
    if (open) {
        append(out, cap, "open: being written");
    } else if (!m) {
        st = cpr_fail(CPR_NOT_FOUND, "job %s has no part of shard %u at checkpoint %llu",
                      id->job, id->shard, (unsigned long long)id->checkpoint);
    } else {
        char seg[CPR_SEG_NAME_MAX] = "";
        if (m->seg_token)
            cpri_seg_part_name(seg, job->name, m->shard, m->checkpoint, m->seg_token);
        if (!m->seg_token)
            append(out, cap, "no rows");
        else if (store->rados)
            append(out, cap, "rados:%s %s@0..%llu (%llu bytes)", cpri_rados_where(store->rados),
                   seg, (unsigned long long)(m->seg_bytes ? (m->seg_bytes - 1) /
                                                           CPRI_RADOS_CHUNK_BYTES : 0),
                   (unsigned long long)m->seg_bytes);
        else
            append(out, cap, "file:%s/j_%s.seg (%llu bytes)", store->segs_dir, seg,
                   (unsigned long long)m->seg_bytes);
        for (size_t b = 0; b < m->n_blobs; b++) {
            append(out, cap, b ? ", " : "; blobs: ");
            if (store->rados)
                append(out, cap, "%s.b_%s (%llu bytes)", seg, m->blobs[b].name,
                       (unsigned long long)m->blobs[b].size);
            else {
                char *dir = cpri_part_dirname(job->name, m->shard, m->checkpoint,
                                              store->blobs_dir);
                append(out, cap, "file:%s/%s (%llu bytes)", dir ? dir : "?", m->blobs[b].name,
                       (unsigned long long)m->blobs[b].size);
                free(dir);
            }
        }
    }
    pthread_mutex_unlock(&store->mu);
    return cpri_store_count(store, st);
}

cpr_status cpr_store_latest_cut(cpr_store *store, const char *job_name, uint64_t *cut)
{
    cpr_status st = cpri_check_job_name(job_name);
    uint64_t found = 0;
    if (st)
        return cpri_store_count(store, st);
    cpri_store_refresh_for_read(store, job_name); /* rados.h R9 */
    pthread_mutex_lock(&store->mu);
    st = cut_locked(store, job_name, &found);
    pthread_mutex_unlock(&store->mu);
    if (st)
        return cpri_store_count(store, st);
    *cut = found;
    return CPR_OK;
}

cpr_status cpr_store_stats_get(cpr_store *store, cpr_store_stats *out)
{
    cpr_store_stats s;
    memset(&s, 0, sizeof s);
    pthread_mutex_lock(&store->mu);
    for (size_t i = 0; i < store->catalog.n_jobs; i++) {
        s.parts_committed += store->catalog.jobs[i]->n_parts;
        s.jobs += store->catalog.jobs[i]->n_parts > 0 || store->catalog.jobs[i]->n_folds > 0;
    }
    for (open_part *p = store->open_parts; p; p = p->next)
        s.parts_open++;
    pthread_mutex_unlock(&store->mu);
    s.rows_in = atomic_load(&store->rows_in);
    s.bytes_in = atomic_load(&store->bytes_in);
    s.rows_out = atomic_load(&store->rows_out);
    s.bytes_out = atomic_load(&store->bytes_out);
    for (int i = 0; i < CPR_STATUS_COUNT_; i++)
        s.errors[i] = atomic_load(&store->errors[i]);
    s.store_bytes = cpri_store_bytes(store);
    s.free_bytes = cpri_space_free_bytes(store);
    s.gc_runs = atomic_load(&store->gc_runs);
    s.gc_parts_removed = atomic_load(&store->gc_parts_removed);
    s.gc_bytes_freed = atomic_load(&store->gc_bytes_freed);
    s.folds = atomic_load(&store->folds);
    s.fold_bytes = atomic_load(&store->fold_bytes);
    *out = s;
    return CPR_OK;
}

