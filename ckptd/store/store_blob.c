/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Blob reads: stream a committed part's blob, verifying the CRC32C of every
 * 1 MiB block before it is handed to the caller (io_uring, O_DIRECT).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"
#include "store_internal.h"

/* ---- blobs ------------------------------------------------------------------ */

typedef struct blob_read {
    const char *path;
    const uint32_t *crcs;
    cpr_blob_fn fn;
    void *ctx;
    uint64_t bytes;
} blob_read;

static cpr_status check_block(void *ctx, uint64_t index, const void *data, size_t len)
{
    blob_read *b = ctx;
    if (cpr_crc32c(0, data, len) != b->crcs[index])
        return cpr_fail(CPR_CORRUPT, "blob file %s: block %llu (bytes %llu-%llu) fails "
                        "its checksum", b->path, (unsigned long long)index,
                        (unsigned long long)(index * CPR_BLOB_BLOCK),
                        (unsigned long long)(index * CPR_BLOB_BLOCK + len));
    b->bytes += len;
    return b->fn(b->ctx, index * CPR_BLOB_BLOCK, data, len);
}

/* B1: a blob object read through the backend, 1 MiB block by block with
 * several in flight, each checked before it is handed on. The caller has
 * entered as a reader (S7). */
static cpr_status read_blob_object(cpr_store *store, const char *object, uint64_t size,
                                   blob_read *b)
{
    size_t n = (size_t)((size + CPR_BLOB_BLOCK - 1) / CPR_BLOB_BLOCK);
    cpri_obj_extent *ext = calloc(n ? n : 1, sizeof *ext);
    if (!ext)
        return cpr_fail(CPR_NO_MEMORY, "out of memory reading blob %s", object);
    for (size_t i = 0; i < n; i++) {
        uint64_t off = (uint64_t)i * CPR_BLOB_BLOCK;
        ext[i] = (cpri_obj_extent){object, off,
                                   (size_t)(size - off < CPR_BLOB_BLOCK ? size - off
                                                                        : CPR_BLOB_BLOCK)};
    }
    const cpri_backend_ops *ops = store->segs->ops;
    cpri_obj_reader *r = NULL;
    cpr_status st = n ? ops->read_start(store->segs, ext, n, 4, &r) : CPR_OK;
    for (size_t i = 0; st == CPR_OK && i < n; i++) {
        void *owner;
        const unsigned char *data;
        st = ops->read_next(r, &owner, &data);
        if (st == CPR_OK) {
            st = check_block(b, i, data, ext[i].len);
            ops->read_release(r, owner);
        }
    }
    if (r)
        ops->read_end(r);
    free(ext);
    return st;
}

/* Under store->mu: the blob's path and a copy of its checksums. */
static cpr_status find_blob(cpr_store *store, const cpr_part_id *id, const char *name,
                            char **path, cpri_blob_meta *copy)
{
    cpri_job *job = cpri_catalog_find(&store->catalog, id->job);
    const cpri_part_meta *m = job ? cpri_job_find_part(job, id->shard, id->checkpoint) : NULL;
    const cpri_blob_meta *b = m ? cpri_meta_blob(m, name) : NULL;
    if (!m && job && id->checkpoint < job->floor)
        return cpr_fail(CPR_NOT_FOUND, "no committed part %s/%u/%llu: retention removed the "
                        "job's parts below its floor, checkpoint %llu", id->job, id->shard,
                        (unsigned long long)id->checkpoint, (unsigned long long)job->floor);
    if (!m)
        return cpr_fail(CPR_NOT_FOUND, "no committed part %s/%u/%llu", id->job,
                        id->shard, (unsigned long long)id->checkpoint);
    if (!b)
        return cpr_fail(CPR_NOT_FOUND, "part %s/%u/%llu has no blob named %s", id->job,
                        id->shard, (unsigned long long)id->checkpoint, name);
    *copy = *b;
    copy->crcs = malloc((b->n_crcs ? b->n_crcs : 1) * sizeof *copy->crcs);
    char *dir = NULL;
    if (store->rados) { /* B1: the object's name */
        *path = malloc(CPR_SEG_NAME_MAX);
        dir = malloc(CPR_SEG_NAME_MAX);
        if (copy->crcs && *path && dir) {
            if (b->n_crcs)
                memcpy(copy->crcs, b->crcs, b->n_crcs * sizeof *copy->crcs);
            cpri_seg_part_name(dir, id->job, id->shard, id->checkpoint, m->seg_token);
            cpri_seg_blob_name(*path, dir, name);
            free(dir);
            return CPR_OK;
        }
        free(copy->crcs);
        free(dir);
        free(*path);
        return cpr_fail(CPR_NO_MEMORY, "out of memory reading a blob");
    }
    dir = cpri_part_dirname(id->job, id->shard, id->checkpoint, store->blobs_dir);
    size_t len = dir ? strlen(dir) + strlen(name) + 4 : 0;
    *path = dir ? malloc(len) : NULL;
    if (!copy->crcs || !*path) {
        free(copy->crcs);
        free(dir);
        free(*path);
        return cpr_fail(CPR_NO_MEMORY, "out of memory reading a blob");
    }
    if (b->n_crcs) /* an empty blob has no checksums */
        memcpy(copy->crcs, b->crcs, b->n_crcs * sizeof *copy->crcs);
    snprintf(*path, len, "%s/b_%s", dir, name);
    free(dir);
    return CPR_OK;
}

/* A local blob file is read without a reader's hold (a file open before
 * retention removes it stays readable): one found missing is corrupt only
 * if its part is still committed. Removal drops the record under store->mu
 * before the files (store_gc.c), so this answer is exact. */
static int part_gone(cpr_store *store, const cpr_part_id *id)
{
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find(&store->catalog, id->job);
    int gone = !job || !cpri_job_find_part(job, id->shard, id->checkpoint);
    pthread_mutex_unlock(&store->mu);
    return gone;
}

cpr_status cpr_store_read_blob(cpr_store *store, const cpr_part_id *id, const char *name,
                               uint64_t *size, cpr_blob_fn fn, void *ctx)
{
    cpri_blob_meta meta = {0};
    char *path = NULL;
    cpr_status st = cpri_check_job_name(id->job);
    if (st == CPR_OK && !cpri_name_valid(name))
        st = cpr_fail(CPR_INVALID_ARGUMENT, "blob name \"%.140s\" is invalid",
                      name ? name : "(null)");
    if (st)
        return cpri_store_count(store, st);
    pthread_mutex_lock(&store->mu);
    st = find_blob(store, id, name, &path, &meta);
    if (st == CPR_OK && store->rados)
        cpri_store_reader_enter_locked(store); /* S7: retention may doom it */
    pthread_mutex_unlock(&store->mu);
    if (st)
        return cpri_store_count(store, st);
    if (size)
        *size = meta.size;
    blob_read b = {.path = path, .crcs = meta.crcs, .fn = fn, .ctx = ctx};
    if (store->rados) {
        st = read_blob_object(store, path, meta.size, &b);
        cpri_store_reader_leave(store);
    } else {
        st = cpri_bfile_read(path, meta.size, 1, check_block, &b);
        if (st == CPR_CORRUPT && b.bytes == 0 && part_gone(store, id))
            st = cpr_fail(CPR_NOT_FOUND, "part %s/%u/%llu was removed by retention while "
                          "its blob %s was being opened", id->job, id->shard,
                          (unsigned long long)id->checkpoint, name);
    }
    atomic_fetch_add(&store->bytes_out, b.bytes);
    free(meta.crcs);
    free(path);
    return cpri_store_count(store, st);
}
