/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where segments live: a small interface over immutable objects, so that a
 * replicated object store can stand beside the local disk without touching
 * the rest of the store. An object is written once, front to back, made
 * durable by finish, read by extents, and removed whole; nothing renames or
 * rewrites it. An object is part of a checkpoint only once a catalog record
 * names it (the commit point is the catalog's synced write), so an object
 * that no record names is a leftover of an interrupted write and is removed
 * by the sweep at open.
 *
 * Object names: "<job>/<rest>", rest of [A-Za-z0-9._-] (store_internal.h
 * builds them). A backend is thread-safe; a writer or reader is used by one
 * thread at a time.
 */
#ifndef CPR_STORE_BACKEND_H
#define CPR_STORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/status.h"

typedef struct cpri_backend cpri_backend;
typedef struct cpri_obj_writer cpri_obj_writer;
typedef struct cpri_obj_reader cpri_obj_reader;

typedef struct cpri_obj_extent {
    const char *object;
    uint64_t offset;
    size_t len;
} cpri_obj_extent;

/* Called by list for every object; return non-zero to stop. */
typedef int (*cpri_obj_list_fn)(void *ctx, const char *object);

typedef struct cpri_backend_ops {
    const char *name;
    /* What a restore keeps in flight (restore.c, M2): all restores together
     * about read_ahead_bytes, each at most read_depth reads. A local disk is
     * kept busy by a few MiB; reads over the network from a RADOS cluster
     * wait on round trips, and more of them in flight keep it busy. */
    uint64_t read_ahead_bytes;
    unsigned read_depth;
    /* The backend holds its readers to read_ahead_bytes itself, as they
     * read (RADOS: rados.h R11): a restore asks for read_depth and splits
     * nothing at its start. */
    int shares_read_ahead;
    /* Create `object` (replacing a leftover of the same name). */
    cpr_status (*create)(cpri_backend *be, const char *object, cpri_obj_writer **out);
    cpr_status (*append)(cpri_obj_writer *w, const void *data, size_t len);
    uint64_t (*written)(const cpri_obj_writer *w);
    /* Make the object and its name durable; frees the writer either way. */
    cpr_status (*finish)(cpri_obj_writer *w, uint64_t *size);
    /* Drop an unfinished object. NULL is a no-op. */
    void (*discard)(cpri_obj_writer *w);
    /* Read extents (borrowed until read_end) with up to `depth` reads in
     * flight, delivered in order; see cpri_fetcher_next for owner and data. */
    cpr_status (*read_start)(cpri_backend *be, const cpri_obj_extent *ext, size_t n,
                             unsigned depth, cpri_obj_reader **out);
    cpr_status (*read_next)(cpri_obj_reader *r, void **owner, const unsigned char **data);
    /* Give a delivered buffer back, before read_end (free()ing it is also
     * allowed, and the only way after read_end). */
    void (*read_release)(cpri_obj_reader *r, void *owner);
    void (*read_end)(cpri_obj_reader *r);
    /* The size of a finished object (*size); CPR_NOT_FOUND when there is no
     * such object, or it was never finished. */
    cpr_status (*size)(cpri_backend *be, const char *object, uint64_t *size);
    /* Remove an object; a missing one is not an error. */
    cpr_status (*remove)(cpri_backend *be, const char *object);
    cpr_status (*list)(cpri_backend *be, cpri_obj_list_fn fn, void *ctx);
    void (*close)(cpri_backend *be);
} cpri_backend_ops;

struct cpri_backend {
    const cpri_backend_ops *ops;
};

/* Segments as files under `root` (created if missing): <root>/j_<job>/<rest>.seg,
 * written with io_uring and O_DIRECT (blobio.h). no_sync skips fdatasync
 * and directory fsyncs (tests of non-durability only). Reads are O_DIRECT
 * with several in flight, or with `buffered` one pread at a time through
 * the page cache, the kernel reading ahead (cpr_store_options.buffered_reads). */
cpr_status cpri_backend_local_open(const char *root, int no_sync, int buffered,
                                   cpri_backend **out);

#endif /* CPR_STORE_BACKEND_H */
