/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Write lanes (see lanes.h). Every lane owns a FIFO of work items (a batch
 * or "finish"), a thread, and at most one open SstFileWriter: the file of
 * the chunk it is writing. Queued batches are charged against a byte budget
 * of LANE_BUDGET_CHUNKS chunks per lane, which bounds memory and lets the
 * submitter run one chunk ahead of every lane.
 *
 * Invariants
 *  L1. Chunk numbers increase with submission order, a chunk's batches all
 *      go to one lane in order, and keys increase within a chunk (the
 *      submitter starts a new chunk on any out-of-order batch): every file
 *      is sorted, and chunk order is key order within each run of ordered
 *      batches.
 *  L2. A lane closes its file before opening the next chunk's file.
 *  L3. After a lane fails it drops the batches it receives (returning their
 *      memory), and its status is reported by the next submit or finish.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "lanes.h"

#define MAX_LANES 8
#define LANE_BUDGET_CHUNKS 2
#define MAX_FREE_BUFFERS 16

typedef struct item {
    struct item *next;
    cpr_encoded *batch; /* NULL: finish */
} item;

typedef struct file_rec {
    char *path;
    unsigned chunk;
} file_rec;

typedef struct lane {
    struct cpr_lanes *owner;
    pthread_t thread;
    int started;
    item *head, *tail;            /* guarded by owner->mu */
    pthread_cond_t wake;
    rocksdb_sstfilewriter_t *sst; /* lane thread only */
    unsigned chunk;               /* chunk of the open file; lane thread only */
    cpr_status st;                /* guarded by owner->mu */
    char errmsg[512];
    int finished;                 /* guarded by owner->mu */
} lane;

struct cpr_lanes {
    char *dir;
    const rocksdb_envoptions_t *env;
    const rocksdb_options_t *opts;
    lane lanes[MAX_LANES];
    unsigned n_lanes;
    /* submitter side */
    unsigned chunk, chunk_lane;
    size_t chunk_bytes;
    /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t budget_cond, lane_done;
    size_t charged_bytes, budget_bytes;
    cpr_encoded *free_list[MAX_FREE_BUFFERS];
    unsigned n_free;
    file_rec *files;
    size_t n_files, cap_files;
};

static void release_buffer(cpr_lanes *ls, cpr_encoded *b)
{
    pthread_mutex_lock(&ls->mu);
    ls->charged_bytes -= b->charged;
    b->charged = 0;
    if (ls->n_free < MAX_FREE_BUFFERS) {
        ls->free_list[ls->n_free++] = b;
        b = NULL;
    }
    pthread_cond_broadcast(&ls->budget_cond);
    pthread_mutex_unlock(&ls->mu);
    if (b) {
        free(b->data);
        free(b);
    }
}

static void lane_fail(lane *l, cpr_status st)
{
    pthread_mutex_lock(&l->owner->mu);
    if (l->st == CPR_OK) {
        l->st = st;
        snprintf(l->errmsg, sizeof l->errmsg, "%s", cpr_errmsg());
    }
    pthread_mutex_unlock(&l->owner->mu);
}

static cpr_status rocks_status(char *err, const char *what)
{
    cpr_status st = strstr(err, "No space") ? CPR_RESOURCE_EXHAUSTED : CPR_IO;
    cpr_fail(st, "%s: %s", what, err);
    rocksdb_free(err);
    return st;
}

static cpr_status close_file(lane *l)
{
    char *err = NULL;
    if (!l->sst)
        return CPR_OK;
    rocksdb_sstfilewriter_finish(l->sst, &err);
    rocksdb_sstfilewriter_destroy(l->sst);
    l->sst = NULL;
    return err ? rocks_status(err, "finishing a row file") : CPR_OK;
}

/* Register the file of `chunk` and open it. */
static cpr_status open_file(lane *l, unsigned chunk)
{
    cpr_lanes *ls = l->owner;
    char *err = NULL, *path;
    size_t path_len = strlen(ls->dir) + 32;
    pthread_mutex_lock(&ls->mu);
    if (ls->n_files == ls->cap_files) {
        size_t cap = ls->cap_files ? ls->cap_files * 2 : 8;
        file_rec *grown = realloc(ls->files, cap * sizeof *grown);
        if (grown) {
            ls->files = grown;
            ls->cap_files = cap;
        }
    }
    path = ls->n_files < ls->cap_files ? malloc(path_len) : NULL;
    if (path) {
        snprintf(path, path_len, "%s/rows-%08u.sst", ls->dir, chunk);
        ls->files[ls->n_files++] = (file_rec){path, chunk};
    }
    pthread_mutex_unlock(&ls->mu);
    if (!path)
        return cpr_fail(CPR_NO_MEMORY, "out of memory adding a row file");
    l->sst = rocksdb_sstfilewriter_create(ls->env, ls->opts);
    l->chunk = chunk;
    rocksdb_sstfilewriter_open(l->sst, path, &err);
    return err ? rocks_status(err, "creating a row file") : CPR_OK;
}

static cpr_status write_batch(lane *l, const cpr_encoded *b)
{
    cpr_status st = CPR_OK;
    char *err = NULL;
    size_t vlen = b->rec_len - b->key_len;
    if (l->sst && l->chunk != b->chunk)
        st = close_file(l); /* L2 */
    if (st == CPR_OK && !l->sst)
        st = open_file(l, b->chunk);
    for (size_t i = 0; st == CPR_OK && i < b->n; i++) {
        const char *rec = (const char *)b->data + i * b->rec_len;
        rocksdb_sstfilewriter_put(l->sst, rec, b->key_len, rec + b->key_len, vlen, &err);
        if (err)
            st = rocks_status(err, "writing rows");
    }
    return st;
}

static item *next_item(lane *l, int *failed)
{
    cpr_lanes *ls = l->owner;
    pthread_mutex_lock(&ls->mu);
    while (!l->head)
        pthread_cond_wait(&l->wake, &ls->mu);
    item *it = l->head;
    l->head = it->next;
    if (!l->head)
        l->tail = NULL;
    *failed = l->st != CPR_OK;
    pthread_mutex_unlock(&ls->mu);
    return it;
}

static void *lane_main(void *arg)
{
    lane *l = arg;
    for (;;) {
        int failed;
        item *it = next_item(l, &failed);
        cpr_encoded *batch = it->batch;
        free(it);
        if (!batch) { /* finish */
            cpr_status st = close_file(l);
            if (st)
                lane_fail(l, st);
            pthread_mutex_lock(&l->owner->mu);
            l->finished = 1;
            pthread_cond_broadcast(&l->owner->lane_done);
            pthread_mutex_unlock(&l->owner->mu);
            return NULL;
        }
        cpr_status st = failed ? CPR_OK : write_batch(l, batch); /* L3 */
        release_buffer(l->owner, batch);
        if (st)
            lane_fail(l, st);
    }
}

static cpr_status enqueue(lane *l, cpr_encoded *batch)
{
    item *it = calloc(1, sizeof *it);
    if (!it)
        return cpr_fail(CPR_NO_MEMORY, "out of memory queueing rows");
    it->batch = batch;
    pthread_mutex_lock(&l->owner->mu);
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->owner->mu);
    return CPR_OK;
}

cpr_status cpr_lanes_create(const char *dir, unsigned n_lanes, const rocksdb_envoptions_t *env,
                            const rocksdb_options_t *opts, cpr_lanes **out)
{
    cpr_lanes *ls = calloc(1, sizeof *ls);
    if (!ls || !(ls->dir = strdup(dir))) {
        free(ls);
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting row writers");
    }
    ls->env = env;
    ls->opts = opts;
    ls->n_lanes = n_lanes < 1 ? 1 : n_lanes > MAX_LANES ? MAX_LANES : n_lanes;
    ls->budget_bytes = (size_t)ls->n_lanes * LANE_BUDGET_CHUNKS * CPR_LANE_CHUNK_BYTES;
    pthread_mutex_init(&ls->mu, NULL);
    pthread_cond_init(&ls->budget_cond, NULL);
    pthread_cond_init(&ls->lane_done, NULL);
    for (unsigned i = 0; i < ls->n_lanes; i++) {
        lane *l = &ls->lanes[i];
        l->owner = ls;
        pthread_cond_init(&l->wake, NULL);
        if (pthread_create(&l->thread, NULL, lane_main, l) != 0) {
            cpr_lanes_destroy(ls);
            return cpr_fail(CPR_RESOURCE_EXHAUSTED, "cannot start a row writer thread");
        }
        l->started = 1;
    }
    *out = ls;
    return CPR_OK;
}

cpr_status cpr_lanes_buffer(cpr_lanes *ls, size_t bytes, cpr_encoded **out)
{
    cpr_encoded *b = NULL;
    pthread_mutex_lock(&ls->mu);
    /* A batch larger than the budget still goes through, alone. */
    while (ls->charged_bytes > 0 && ls->charged_bytes + bytes > ls->budget_bytes)
        pthread_cond_wait(&ls->budget_cond, &ls->mu);
    ls->charged_bytes += bytes;
    if (ls->n_free)
        b = ls->free_list[--ls->n_free];
    pthread_mutex_unlock(&ls->mu);
    if (!b)
        b = calloc(1, sizeof *b);
    if (b && b->cap < bytes) {
        unsigned char *grown = realloc(b->data, bytes);
        if (grown) {
            b->data = grown;
            b->cap = bytes;
        }
    }
    if (!b || b->cap < bytes) {
        pthread_mutex_lock(&ls->mu);
        ls->charged_bytes -= bytes;
        pthread_cond_broadcast(&ls->budget_cond);
        pthread_mutex_unlock(&ls->mu);
        if (b)
            free(b->data);
        free(b);
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a batch of %zu bytes", bytes);
    }
    b->charged = bytes;
    b->n = 0;
    *out = b;
    return CPR_OK;
}

void cpr_lanes_unused(cpr_lanes *ls, cpr_encoded *batch)
{
    release_buffer(ls, batch);
}

/* First failure of any lane, with its message restored on this thread. */
static cpr_status lanes_status(cpr_lanes *ls)
{
    cpr_status st = CPR_OK;
    pthread_mutex_lock(&ls->mu);
    for (unsigned i = 0; st == CPR_OK && i < ls->n_lanes; i++)
        if (ls->lanes[i].st)
            st = cpr_fail(ls->lanes[i].st, "%s", ls->lanes[i].errmsg);
    pthread_mutex_unlock(&ls->mu);
    return st;
}

cpr_status cpr_lanes_submit(cpr_lanes *ls, cpr_encoded *batch, int out_of_order)
{
    cpr_status st = lanes_status(ls);
    size_t bytes = batch->n * batch->rec_len;
    if (st) {
        release_buffer(ls, batch);
        return st;
    }
    if (ls->chunk_bytes > 0 &&
        (out_of_order || ls->chunk_bytes + bytes > CPR_LANE_CHUNK_BYTES)) {
        ls->chunk++; /* L1 */
        ls->chunk_lane = (ls->chunk_lane + 1) % ls->n_lanes;
        ls->chunk_bytes = 0;
    }
    batch->chunk = ls->chunk;
    ls->chunk_bytes += bytes;
    st = enqueue(&ls->lanes[ls->chunk_lane], batch);
    if (st)
        release_buffer(ls, batch);
    return st;
}

static int file_cmp(const void *a, const void *b)
{
    const file_rec *x = a, *y = b;
    return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

/* Let every lane finish its queued work, then join it. */
static void stop_lanes(cpr_lanes *ls)
{
    for (unsigned i = 0; i < ls->n_lanes; i++) {
        lane *l = &ls->lanes[i];
        if (!l->started)
            continue;
        if (!l->finished && enqueue(l, NULL) == CPR_OK) {
            pthread_mutex_lock(&ls->mu);
            while (!l->finished)
                pthread_cond_wait(&ls->lane_done, &ls->mu);
            pthread_mutex_unlock(&ls->mu);
        }
        pthread_join(l->thread, NULL);
        l->started = 0;
    }
}

cpr_status cpr_lanes_finish(cpr_lanes *ls, char ***files, size_t *n_files)
{
    stop_lanes(ls);
    cpr_status st = lanes_status(ls);
    if (st)
        return st;
    char **paths = malloc((ls->n_files + 1) * sizeof *paths);
    if (!paths)
        return cpr_fail(CPR_NO_MEMORY, "out of memory listing row files");
    qsort(ls->files, ls->n_files, sizeof *ls->files, file_cmp);
    for (size_t i = 0; i < ls->n_files; i++) {
        paths[i] = ls->files[i].path;
        ls->files[i].path = NULL;
    }
    *files = paths;
    *n_files = ls->n_files;
    ls->n_files = 0;
    return CPR_OK;
}

void cpr_lanes_destroy(cpr_lanes *ls)
{
    if (!ls)
        return;
    stop_lanes(ls);
    for (unsigned i = 0; i < ls->n_lanes; i++) {
        lane *l = &ls->lanes[i];
        if (l->sst)
            rocksdb_sstfilewriter_destroy(l->sst);
        while (l->head) { /* only if queueing "finish" ran out of memory */
            item *it = l->head;
            l->head = it->next;
            if (it->batch) {
                free(it->batch->data);
                free(it->batch);
            }
            free(it);
        }
        pthread_cond_destroy(&l->wake);
    }
    for (unsigned i = 0; i < ls->n_free; i++) {
        free(ls->free_list[i]->data);
        free(ls->free_list[i]);
    }
    for (size_t i = 0; i < ls->n_files; i++)
        free(ls->files[i].path);
    free(ls->files);
    pthread_cond_destroy(&ls->budget_cond);
    pthread_cond_destroy(&ls->lane_done);
    pthread_mutex_destroy(&ls->mu);
    free(ls->dir);
    free(ls);
}
