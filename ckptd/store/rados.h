/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store in Ceph RADOS (rados.c, the one module that calls librados):
 * segments as objects of a pool, and the catalog as the omap of one object,
 * so that a committed part outlives the node that wrote it. A store in
 * RADOS is a (pool, namespace): several stores share a pool in different
 * namespaces (the tests do).
 *
 * Objects of a store's namespace:
 *   cpr.catalog                 omap: hex(RocksDB key) -> value, every
 *                               catalog record but 'V' (keys.h)
 *   <job>/<rest>@<i>            chunk i of segment <job>/<rest> (backend.h):
 *                               bytes [i * 4 MiB, (i + 1) * 4 MiB); chunk 0
 *                               carries xattr cpr.size (the segment's bytes,
 *                               decimal) once the segment is finished
 *
 * Invariants
 *  R1. The catalog object is the store's truth; the local RocksDB is its
 *      copy, rebuilt from it at every open (cpr_store_open), so a node whose
 *      disk is lost loses nothing committed. A catalog write goes to RADOS
 *      first, as ONE write operation (atomic: all of its keys or none), and
 *      only then to RocksDB; the RADOS write is the commit point. (An
 *      operation that times out may still have been applied: a commit
 *      reported failed can then be found committed after the next open, as
 *      with any commit whose answer is lost; never the other way round.)
 *  R2. A segment's chunks are all durable (every replica acknowledged
 *      them) before finish returns, and finish returns before any record
 *      names the segment (store_internal.h S1), so a record never names
 *      bytes that a failure of fewer than min_size OSDs can lose.
 *  R3. Removal deletes chunks from the last to chunk 0, so a removal cut
 *      short leaves chunk 0 and its size, and is simply done again.
 *  R4. An unfinished segment (a crash mid-write) has no cpr.size; its
 *      chunks are found by listing, and removed by probing up to
 *      WRITE_DEPTH + 1 missing chunks past the last one found. Object names
 *      hold a token unique to one begin (store_internal.h), so create never
 *      meets a leftover of its own name and does not look for one.
 *  R5. (cpri_rados_catalog_cas) A recovery record changes only by an omap
 *      compare-and-set on the catalog object, so two ckptd on one pool
 *      never both move it from one generation (store_internal.h S6).
 *
 * Thread safety: a cpri_rados is shared by the store's threads (librados'
 * I/O contexts are thread-safe for operations); a writer or reader is used
 * by one thread at a time.
 */
#ifndef CPR_STORE_RADOS_H
#define CPR_STORE_RADOS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpr/status.h"

typedef struct cpri_rados cpri_rados;

/* Where a store lives in RADOS (all borrowed). */
typedef struct cpri_rados_target {
    const char *conf;       /* ceph.conf path (NULL: librados' search path) */
    const char *user;       /* cephx user without "client." (NULL: admin) */
    const char *pool;       /* must exist */
    const char *ns;         /* namespace (NULL or "": the pool's default) */
} cpri_rados_target;

/* Connect, within a bounded time (CPR_UNAVAILABLE when no monitor
 * answers, CPR_NOT_FOUND for a missing pool). */
cpr_status cpri_rados_connect(const cpri_rados_target *t, cpri_rados **out);
/* NULL is a no-op. Every backend opened on it must be closed first. */
void cpri_rados_close(cpri_rados *r);
/* "pool/namespace", for messages and stats. */
const char *cpri_rados_where(const cpri_rados *r);

/* The segment backend on `r` (borrowed until the backend is closed). */
cpr_status cpri_backend_rados_open(cpri_rados *r, cpri_backend **out);

/* One change of a catalog write: a put, or a delete when del is set. */
typedef struct cpri_kv_change {
    const void *key;
    size_t klen;
    const void *val;
    size_t vlen;
    int del;
} cpri_kv_change;

/* Apply changes[0..n) to the catalog object in one atomic write (R1). */
cpr_status cpri_rados_catalog_apply(cpri_rados *r, const cpri_kv_change *changes, size_t n,
                                   const char *what);

/* One record, read from the pool: *val (malloc'd) and *vlen, or *val NULL
 * when there is none. */
cpr_status cpri_rados_catalog_get(cpri_rados *r, const void *key, size_t klen, char **val,
                                 size_t *vlen);

/* R5. Compare-and-set of one record, atomic across every process on the
 * pool: write `val` iff the record's bytes are still old[0..oldlen) (oldlen
 * 0: iff there is no record; records are never empty).
 * CPR_FAILED_PRECONDITION when the record changed (nothing written). */
cpr_status cpri_rados_catalog_cas(cpri_rados *r, const void *key, size_t klen, const void *old,
                                 size_t oldlen, const void *val, size_t vlen, const char *what);

/* Every catalog record, in key order; fn returns non-zero to stop. */
typedef int (*cpri_kv_fn)(void *ctx, const void *key, size_t klen, const void *val,
                          size_t vlen);
cpr_status cpri_rados_catalog_load(cpri_rados *r, cpri_kv_fn fn, void *ctx);

#endif /* CPR_STORE_RADOS_H */
