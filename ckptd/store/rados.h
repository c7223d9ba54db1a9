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
 * Several gateways on one (pool, namespace) (docs/store.md, "Gateways"):
 *  R6. A store open on RADOS is a gateway with a 32-bit id, kept in its
 *      directory (file `gateway`) and claimed in the catalog ('W' record:
 *      id -> "host:directory", by compare-and-set, so two directories never
 *      share an id). While open it holds the exclusive RADOS lock
 *      "cpr.gateway" on object cpr.gw.<id>, with a lease of LEASE_S seconds
 *      renewed every LEASE_S / 3. At open, a lock still held on its own id
 *      is a crashed earlier process of the same directory (RocksDB's lock
 *      rules out a live one): the gateway fences it (blocklists its address)
 *      and breaks the lock. Renewals must renew (LIBRADOS_LOCK_FLAG_MUST_RENEW):
 *      a lease that lapsed is never quietly taken again, since others may
 *      have seen the gateway dead meanwhile (R7). A gateway that fails to
 *      renew stops writing the catalog for good (CPR_UNAVAILABLE), and one
 *      whose last successful renewal was sent LEASE_S - LEASE_MARGIN_S ago
 *      or more (the renewal is still out) stops until one comes back: the
 *      margin is what a commit's catalog write has to land while the lease
 *      still holds. A segment's finishing write asserts that its first
 *      object exists, so that a segment swept meanwhile never finishes.
 *  R7. Every segment and blob object a gateway creates carries its id in
 *      the token of its name (token = id << 32 | sequence). The open-time
 *      sweep (store_internal.h S2) removes an object no record names only
 *      when its gateway is this one or holds no lock (closed, or its lease
 *      ran out): another live gateway's unfinished parts are left alone.
 *      Which records name an object is decided after its gateway was found
 *      closed or lapsed: the candidates' jobs are read from the pool again
 *      then (store.c recheck_in_pool), so a part that gateway committed
 *      after this open read the catalog, and before it closed, is kept.
 *  R8. Job ids are allocated in the catalog: a gateway meeting a job it does
 *      not know takes the id the pool's 'J' record gives, or claims the next
 *      one with a compare-and-set of 'J' and the counter 'N'. A commit's
 *      write compares 'J' (the job's id is still this one) and the part's
 *      'M' record (none yet), so a part committed through one gateway is
 *      never replaced through another. The claim's round trips run outside
 *      store->mu (a degraded pool must not stall the gateway's other calls);
 *      a Begin re-looks the job up after it, and two claims of one name get
 *      the same id.
 *  R9. One holder per job: retention and folding of a job run only on the
 *      gateway holding the RADOS lock "cpr.job" on object cpr.job.<id> (a
 *      lease of LEASE_S seconds, taken or renewed at each pass, and renewed
 *      (must renew) every LEASE_S / 3 while a fold reads and writes, before
 *      each fold is published and before a pass drops parts, the pass
 *      stopping if it lapsed; the others skip the job), and the holder
 *      first reloads the job's records from
 *      the pool (store.c, cpri_store_refresh_job), so that it decides on
 *      every part, whichever gateway committed it. A gateway also reloads a
 *      job before it lists it, gives its latest cut or plans a restore,
 *      without waiting for its own fold or retention pass; a reload that
 *      one of them raced starts over (store.c, refresh_once). A job known
 *      here is reloaded by one read operation (its id record and its three
 *      kinds of records), page by page only when it has more than a page.
 *      Readers share reloads: a reload that began reading the pool after a
 *      reader arrived holds every commit that preceded the reader, so it
 *      serves that reader (reloads run one at a time under commit_mu and
 *      are numbered, store->reloads_begun; a job remembers the number of
 *      its last whole reload, fresh_seq): restores of every shard arriving
 *      at once cost a reload or two, not one each in a row.
 *
 * Memory of the writers:
 *  R10. A backend has at most WRITES_IN_FLIGHT (4) chunk writes in flight,
 *      all writers together (each writer at most WRITE_DEPTH, 2): a writer
 *      waits for room only on writes already submitted, which complete on
 *      their own, so no writer waits on another writer's progress. A
 *      write's buffer is its own until librados' completion callback, which
 *      hands it back to the backend's spares (at most SPARE_CHUNKS, 16, of
 *      4 MiB; the rest are freed) and frees the room; a writer waits for
 *      the callback (rados_aio_wait_for_complete_and_cb) before it reuses
 *      or frees a slot, so no callback outlives its writer. A writer's next
 *      chunk starts in a spare, already faulted in. So S concurrent writers
 *      hold S + 4 chunk buffers, not 3 S, and a daemon's next save finds its
 *      buffers mapped (a first touch costs 14 us a page on the VM of
 *      docs/performance.md, 50 times a copy). The cluster gets no faster
 *      with more writes in flight: rados bench writes with 2.
 *
 * Memory of the readers:
 *  R11. All readers of a backend together have at most read_ahead_bytes
 *      (32 MiB) of reads issued and not yet delivered, and each at most its
 *      share of it (read_ahead_bytes over the readers open), except that
 *      each reader may always have its next READ_OWN_MIN (2) out, so that
 *      every reader makes progress whatever the others hold, and a reader
 *      whose consumer stalls (a stream's client not reading) holds at most
 *      its share: a reader never waits for room, it issues fewer reads
 *      ahead. restore.c takes no split of its own for such a backend (M2). The split by restores at
 *      start (restore.c, M2) sampled how many read at that moment, so the
 *      first of 16 restores arriving together each took a whole window and
 *      their reads in flight came to most of the checkpoint (about 270 at
 *      once): more reads in flight than the cluster serves well (rados bench
 *      seq of the same objects drops to 0.55x at 300) and as many fresh
 *      buffers, each page faulted in by librados' copy. A delivered buffer
 *      given back (read_release) is kept for the next read of a similar
 *      size while any reader is open, up to read_ahead_bytes of spares
 *      (a read that none fits frees the oldest), and the last reader to
 *      end frees them: concurrent and long restores
 *      reuse memory already mapped, and an idle client or daemon holds none.
 *      A buffer's header (read_buf) is the malloc'd pointer handed out as
 *      the owner, so free() of a delivered owner stays allowed (backend.h).
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
#define CPRI_RADOS_CHUNK_BYTES ((uint64_t)4 << 20) /* bytes of a segment per object */

/* "rados:FSID/POOL/NS": names the store for every process that opens it. */
const char *cpri_rados_identity(const cpri_rados *r);
/* "pool/namespace", for messages and stats. */
const char *cpri_rados_where(const cpri_rados *r);

/* The segment backend on `r` (borrowed until the backend is closed). */
cpr_status cpri_backend_rados_open(cpri_rados *r, cpri_backend **out);

/* What the readers of a RADOS backend hold (R11), for tests and metrics. */
typedef struct cpri_rados_read_stats {
    uint64_t in_flight;   /* bytes of reads issued and not yet delivered */
    uint64_t peak;        /* the most in_flight has been since open */
    uint64_t budget;      /* read_ahead_bytes */
    uint64_t spare_bytes; /* given-back buffers kept for the next reads */
    uint64_t reused;      /* reads into a kept buffer, since open */
    unsigned readers;     /* open readers */
    unsigned readers_peak; /* the most readers open at once, since open */
} cpri_rados_read_stats;

/* be must be a RADOS backend (cpri_backend_rados_open). */
void cpri_backend_rados_read_stats(cpri_backend *be, cpri_rados_read_stats *out);

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

/* A condition of a conditional write: record `key` holds exactly
 * val[0..vlen) (vlen 0: there is no record; records are never empty). */
typedef struct cpri_kv_cond {
    const void *key;
    size_t klen;
    const void *val;
    size_t vlen;
} cpri_kv_cond;

/* Apply changes[0..n) in one atomic write iff every condition holds (R5,
 * R8); CPR_FAILED_PRECONDITION, nothing written, when one does not. */
cpr_status cpri_rados_catalog_apply_if(cpri_rados *r, const cpri_kv_cond *conds, size_t nc,
                                      const cpri_kv_change *changes, size_t n, const char *what);

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
/* The records whose keys start with prefix[0..plen), in key order. */
cpr_status cpri_rados_catalog_load_prefix(cpri_rados *r, const void *prefix, size_t plen,
                                         cpri_kv_fn fn, void *ctx);
/* One record (as cpri_rados_catalog_get) and the records of n prefixes of
 * plen bytes each (as cpri_rados_catalog_load_prefix, prefix after prefix),
 * read by one operation: one round trip instead of n + 1. *complete is 0
 * when a prefix holds more records than one read returns: then what fn saw
 * is a part only, and the caller must read again with the calls above. */
cpr_status cpri_rados_catalog_load_many(cpri_rados *r, const void *key, size_t klen, char **val,
                                       size_t *vlen, const unsigned char *prefixes, size_t n,
                                       size_t plen, cpri_kv_fn fn, void *ctx, int *complete);

/* R9. Take or renew this gateway's hold on job `job_id` (a lease of
 * LEASE_S seconds): *held is 1 when this gateway is the job's holder now,
 * 0 when another gateway is. */
cpr_status cpri_rados_job_hold(cpri_rados *r, uint32_t job_id, int *held);
/* R9. Renew a hold taken by cpri_rados_job_hold before a step that must
 * run under it (publishing a fold, dropping parts): CPR_FAILED_PRECONDITION
 * when it lapsed meanwhile (never taken again here: another gateway may
 * hold the job now). */
cpr_status cpri_rados_job_renew(cpri_rados *r, uint32_t job_id);

/* R6. Hold gateway `id`'s lease until cpri_rados_close (renewed by a
 * thread of its own); `desc` ("host:directory") is the lock's description. */
cpr_status cpri_rados_gateway_start(cpri_rados *r, uint32_t id, const char *desc);
/* R7. 1 when gateway `id` holds its lease now, 0 when it does not, -1 when
 * that cannot be told (then the caller must assume it is alive). */
int cpri_rados_gateway_alive(cpri_rados *r, uint32_t id);
/* R6. CPR_OK while this gateway's lease holds; else CPR_UNAVAILABLE. */
cpr_status cpri_rados_gateway_check(cpri_rados *r);

/* The bytes the pool can still take: Ceph's MAX AVAIL for it (after
 * replication and the full ratio), less what its quota leaves, when that is
 * less (*quota_bound = 1). UINT64_MAX when the cluster reports no usage (no
 * manager running). A monitor command or two: callers cache it. */
cpr_status cpri_rados_pool_avail(cpri_rados *r, uint64_t *avail, int *quota_bound);
const char *cpri_rados_pool(const cpri_rados *r);

#endif /* CPR_STORE_RADOS_H */
