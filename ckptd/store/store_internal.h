/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the store shared by store*.c (store format 2). Layout of a
 * store directory:
 *
 *   DIR/db/                      RocksDB, the catalog only: format version,
 *                                job ids, part and fold records (with their
 *                                block indexes), floors, recovery records
 *   DIR/segments/j_<job>/<shard>-<ckpt>.<token>.seg   a part's row blocks
 *   DIR/segments/j_<job>/<shard>-f<ckpt>.<token>.seg  a fold (fold.c)
 *   DIR/blobs/j_<job>/<shard>-<ckpt>/b_<name>          blob files of committed parts
 *   DIR/staging/j_<job>/<shard>-<ckpt>.<seq>/blobs/    an open part's blobs
 *   DIR/store-id                 "local:<32 hex digits>", random, written at
 *                                the first open: what direct readers on this
 *                                host name the directory by (direct.c D1)
 *
 * Segments are immutable objects behind backend.h, named with a token
 * unique to one begin (or one fold), so nothing ever renames or rewrites
 * one. (<seq> is unique per begin, so a part aborted while a late put still
 * holds it can never touch the directory of the same part begun again;
 * "j_" and "b_" prefixes keep names such as ".." harmless as path parts.)
 *
 * Commit protocol (store_write.c), in this order; each step durable before
 * the next starts:
 *   1. finish the part's segment: the last block, fdatasync, fsync its
 *      directory (backend finish);
 *   2. finish its blob files (fdatasync);
 *   3. rename staging/.../blobs to blobs/j_<job>/<shard>-<ckpt>, fsync dirs;
 *   4. ONE synced RocksDB WriteBatch (WAL on) puts the part record, which
 *      names the segment and indexes its blocks, and the job id record.
 *      This is the commit point.
 *   5. add the part to the catalog; its staging directory goes when the
 *      open part is freed.
 *
 * Invariants
 *  S1. Rows of a part are visible iff its part record is (step 4 is one
 *      atomic write, and the record is written only after the segment it
 *      names is durable).
 *  S2. A blob directory belongs to a committed part iff its part record
 *      exists; a directory without a record is a leftover of a crash between
 *      steps 3 and 4 and is deleted by the sweep at open, never at run time:
 *      a record whose synced write reported failure may still be in the WAL,
 *      and only the next open knows. The same holds for segment objects: one
 *      that no part or fold record names is a leftover (of a crash, an abort,
 *      or a fold that did not finish). A new catalog over a directory holding
 *      segments or blobs (db/ lost) is refused at open, never swept.
 *  S3. Everything under staging/ at open is a leftover of a crash (a store
 *      directory is opened by one process at a time) and is deleted.
 *  S4. Nothing the store ever writes changes a committed block or blob;
 *      only retention removes parts, and only those no retained state needs,
 *      after the new floor is durable (store_gc.c); folding (fold.c) adds
 *      derived segments and never changes what an "as of" restore returns.
 *  S5. A damaged part or fold record keeps its blob directory and segments
 *      (verify reports it); only a missing record makes them leftovers. While
 *      any record is damaged, the sweep removes no segment at all (a damaged
 *      record may be the only one naming it). A damaged fold record makes
 *      restores of its shard as of its checkpoint or later fail CPR_CORRUPT
 *      (the parts it replaced may be gone) rather than return a partial state.
 *  S6. A job's recovery record ('G' name, store_recovery.c) changes only by
 *      a compare-and-set under recovery_mu whose synced write is durable
 *      before the caller hears of it; its generation only ever grows by one.
 *      In RADOS the compare is the pool's own (rados.h R5), so it holds for
 *      every ckptd on the pool, and reads of the record go to the pool.
 *      Nothing else (GC, the sweep, aborts) writes or deletes 'G' keys, and
 *      a record needs no part of its job.
 *  B1. In RADOS (store->rados) a blob is an object of the segment backend,
 *      "<segment name>.b_<blob name>", the part's segment name coming from
 *      its seg_token (which a blob gives a part that has no rows yet), so
 *      every begin names its blobs apart; the part record names them, the
 *      sweep keeps them with their part, retention dooms them like
 *      segments (S7: blob reads register as readers), and there is no
 *      staging or blobs/ directory for them.
 *  S7. A segment that a restore may read is removed only when no restore
 *      that started before its record went is still running (doomed list,
 *      store.c): restores plan from the catalog under store->mu and then
 *      read without it.
 *  S8. In RADOS, readers on other gateways (rados.h R9: the job's holder
 *      removes what every gateway may be reading) do not register here: a
 *      doomed object also waits DOOM_GRACE_S (store.c) after its record
 *      went, so that a restore or blob read another gateway planned before
 *      has that long to read it. At close the objects still waiting stay
 *      (no record names them) for the open-time sweep (R7). A store on a
 *      local disk does the same once it has handed a plan to a direct
 *      reader on its host (plans_served, set before the plan is made;
 *      direct.c D1): until then nobody reads its segments but itself, and
 *      a doomed one goes at once (S7). Its disk comes first: below the
 *      Begin floor (space.c) a doomed segment goes at once, grace or not
 *      (a direct reader then finds it missing and plans again). At its
 *      close the waiting ones go.
 */
#ifndef CPR_STORE_INTERNAL_H
#define CPR_STORE_INTERNAL_H

#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>

#include "backend.h"
#include "blobio.h"
#include "catalog.h"
#include "cpr/block.h"
#include "cpr/store.h"
#include "cpr_common.h"
#include "keys.h"
#include "meta.h"

#define CPR_STORE_FORMAT 2       /* the 'V' record; docs/format.md */
#define CPR_SEG_NAME_MAX CPR_STORE_OBJECT_MAX /* longest segment (or blob) object name */

typedef struct open_blob {
    char name[CPR_NAME_MAX + 1];
    cpri_bfile_writer *writer;   /* a file in staging/ (local store) ... */
    cpri_obj_writer *obj;         /* ... or an object of the backend (RADOS, B1) */
    uint32_t *crcs;              /* obj: CRC32C of each CPR_BLOB_BLOCK so far */
    size_t n_crcs, cap_crcs;
    uint32_t crc;                /* obj: of the block being written */
    uint64_t written;            /* obj: bytes appended */
} open_blob;

typedef enum part_state { PART_OPEN, PART_COMMITTING, PART_FAILED } part_state;

/* Rows waiting to become a block (store_write.c). */
typedef struct block_builder {
    uint32_t table, dim, state_dim;
    size_t n, cap;               /* rows held, rows the arrays hold */
    uint64_t *ids;
    float *values, *state;
} block_builder;

/* An uncommitted part. Lives in store->open_parts while begun. */
typedef struct open_part {
    struct open_part *next;
    char job_name[CPR_NAME_MAX + 1];
    uint32_t job_id;
    cpri_part_meta meta;          /* spec, counters, block index; blobs at commit */
    char *dir;                   /* staging directory (blobs) */
    char *final_dir;             /* blobs/j_<job>/<shard>-<ckpt> once committing */
    pthread_mutex_t mu;          /* serialises writes to this part */
    int refs;                    /* guarded by store->mu */
    int removed;                 /* unlinked from open_parts; guarded by store->mu */
    part_state state;            /* guarded by mu */
    _Atomic uint64_t active_ms;  /* monotonic ms when a call last touched the part
                                    (cpr_store_abort_idle) */
    cpri_obj_writer *seg;         /* the rows' segment; NULL until the first rows */
    char seg_name[CPR_SEG_NAME_MAX];
    uint64_t incarnation;        /* part_fence.h S9: this begin's, never 0 */
    int direct;                  /* W3 (store_write.c): its segment is written by a client (direct
                                    writes): no put_rows or put_block */
    int direct_put;              /* W3: that segment's index was taken */
    block_builder bb;
    uint64_t last_table_row[2];  /* (table, row) of the newest block's last row */
    int have_last;
    unsigned out_of_order;       /* blocks that went backwards in row order */
    open_blob *blobs;
    size_t n_blobs;
} open_part;

/* A part whose record did not decode at open (S5). */
typedef struct damaged_part {
    uint32_t job_id, shard;
    uint64_t checkpoint;
    int fold;                    /* a 'B' record */
} damaged_part;

/* Segment objects waiting for the restores that may read them (S7). */
typedef struct doomed_seg {
    struct doomed_seg *next;
    double due_s;             /* S8: not before (cpri_now_s); 0 locally */
    char name[CPR_SEG_NAME_MAX];
} doomed_seg;

struct cpri_fold_worker;

#define CPRI_LOCAL_ID_CAP 48 /* a local store's name, "local:" and 32 hex digits, + NUL */

struct cpr_store {
    char *dir;
    char *db_dir, *blobs_dir, *staging_dir, *segs_dir;
    cpr_store_options opts;
    rocksdb_t *db;
    rocksdb_options_t *db_opts;
    rocksdb_readoptions_t *read_opts;
    rocksdb_writeoptions_t *sync_write;
    cpri_backend *segs;           /* segment objects (backend.h) */
    struct cpri_rados *rados;     /* the store in RADOS (rados.h R1); NULL: local only */
    char local_id[CPRI_LOCAL_ID_CAP]; /* a local store's "local:<hex>" (direct.c D1); ""
                                     in RADOS, or when it could not be read or made */
    _Atomic int plans_served;     /* a direct reader got a plan (S8) */
    uint32_t gateway_id;         /* in RADOS: this gateway's id (rados.h R6); else 0 */
    pthread_mutex_t mu;          /* catalog, open_parts, job commit order, doomed */
    cpri_catalog catalog;
    open_part *open_parts;
    uint32_t n_open_parts, n_open_blobs; /* O1: counted under mu, capped by opts */
    damaged_part *damaged;       /* records that failed to decode at open */
    size_t n_damaged;
    unsigned readers;            /* restores and folds reading segments (S7) */
    _Atomic unsigned restores_reading; /* merges reading now: they share the read-ahead
                                          (restore.c M2) */
    doomed_seg *doomed;          /* removed from the catalog, still readable */
    pthread_mutex_t commit_mu;   /* commit order per shard vs. each other and GC */
    uint64_t reloads_begun;      /* in RADOS, under mu: job reloads that began reading
                                    the pool (store.c, R9: a read shares one that began
                                    after it arrived) */
    pthread_mutex_t recovery_mu; /* recovery records' compare-and-set (S6) */
    pthread_mutex_t fold_mu;     /* one fold (or GC) writes folds at a time */
    struct cpri_fold_worker *folder; /* background folding (fold.c); NULL: off */
    _Atomic uint64_t staging_seq;/* makes every begin's staging directory unique */
    _Atomic uint64_t token_seq;  /* segment tokens: unique, never 0 */
    _Atomic uint64_t rows_in, bytes_in, rows_out, bytes_out;
    _Atomic int catalog_broken;  /* a catalog write failed: no more (space.c F1) */
    _Atomic uint64_t catalog_bytes, catalog_bytes_ms; /* its size, measured at most once
                                                     a second (space.c) */
    _Atomic uint64_t pool_avail, pool_avail_ms; /* in RADOS: what the pool can take (F5) */
    _Atomic int pool_quota_bound;
    char catalog_error[512];     /* why, written once before catalog_broken is set */
    _Atomic uint64_t gc_runs, gc_parts_removed, gc_bytes_freed, folds, fold_bytes;
    _Atomic uint64_t errors[CPR_STATUS_COUNT_];
};

/* ---- free space (space.c: tiers F1-F4) ----------------------------------------- */

typedef enum cpri_space_need {
    CPRI_SPACE_BEGIN,   /* a new part */
    CPRI_SPACE_DATA,    /* rows, blobs, fold segments */
    CPRI_SPACE_CATALOG, /* a catalog write that is no deletion */
    CPRI_SPACE_GC       /* retention's deletes */
} cpri_space_need;

uint64_t cpri_space_free_bytes(const cpr_store *store);
/* CPR_OK, or CPR_RESOURCE_EXHAUSTED naming `op`, the free and needed bytes. */
cpr_status cpri_space_check(cpr_store *store, cpri_space_need need, const char *op);
/* The same with `more` bytes the caller writes to the local disk before the
 * write the tier is for (a commit's buffered tails, F1); RADOS: as above. */
cpr_status cpri_space_check_more(cpr_store *store, cpri_space_need need, uint64_t more,
                                 const char *op);
/* 1 when a local store's disk is below the Begin floor (no statvfs error
 * counts as low); always 0 in RADOS. */
int cpri_space_low(cpr_store *store);
/* The GC tier, releasing the ballast if that makes the room (F2). */
cpr_status cpri_space_check_gc(cpr_store *store);
/* Put the ballast back if it is gone and there is room (F2). */
void cpri_ballast_restore(cpr_store *store);
/* The store's bytes on disk, the ballast not counted. */
uint64_t cpri_store_bytes(cpr_store *store); /* in RADOS: and the pool's (one replica) */

/* The only ways to write the catalog: one synced batch, or one key. After a
 * failure the catalog takes no more writes (F1: a RocksDB write after a
 * failed WAL append may abort the process) and cpr_store_health says so. */
/* rados.h R9: reload job `name` from the pool (caller holds fold_mu), or
 * for a reader (retried when a fold or retention of this gateway published
 * meanwhile; the local copy serves if it fails). No-ops for local stores.
 * A reader that arrived when reloads_begun was `arrived` is served by any
 * reload of the job that began after (cpri_store_refresh_since): readers
 * arriving together share one. */
cpr_status cpri_store_refresh_job(cpr_store *store, const char *name);
void cpri_store_refresh_for_read(cpr_store *store, const char *name);
uint64_t cpri_store_reloads_begun(cpr_store *store);
void cpri_store_refresh_since(cpr_store *store, const char *name, uint64_t arrived);
/* rados.h R9: *held = may this gateway run retention and folding of job
 * `name` now (reloaded from the pool when so). Caller holds fold_mu. */
cpr_status cpri_store_hold_job(cpr_store *store, const char *name, int *held);
/* rados.h R9: renew that hold before a step that must run under it;
 * CPR_FAILED_PRECONDITION if it lapsed. CPR_OK locally. */
cpr_status cpri_store_renew_job(cpr_store *store, const char *name);
cpr_status cpri_catalog_write(cpr_store *store, rocksdb_writebatch_t *wb, const char *what);
/* In RADOS: the same, iff every condition holds in the pool (rados.h R8);
 * CPR_FAILED_PRECONDITION, nothing written, when one does not. Locally the
 * conditions are not checked (the caller's locks decide there). */
struct cpri_kv_cond;
cpr_status cpri_catalog_write_if(cpr_store *store, const struct cpri_kv_cond *conds, size_t nc,
                                 rocksdb_writebatch_t *wb, const char *what);
cpr_status cpri_catalog_put(cpr_store *store, const void *key, size_t klen, const void *val,
                            size_t vlen, const char *what);

/* Write one key iff its stored bytes are still old[0..oldlen) (oldlen 0:
 * absent): across every ckptd on the pool when the store is in RADOS (R5);
 * locally the caller's lock makes the compare (S6).
 * CPR_FAILED_PRECONDITION when the pool's record changed. */
cpr_status cpri_catalog_cas(cpr_store *store, const void *key, size_t klen, const void *old,
                            size_t oldlen, const void *val, size_t vlen, const char *what);

/* Count a failed call in stats; returns st. */
cpr_status cpri_store_count(cpr_store *store, cpr_status st);
/* Map a RocksDB error string (freed here) to a status with a message. */
cpr_status cpri_rocks_error(char *err, const char *what);

/* Paths (malloc'd; NULL on OOM). */
char *cpri_path_join(const char *a, const char *b);
char *cpri_part_dirname(const char *job, uint32_t shard, uint64_t ckpt,
                       const char *root);
int cpri_mkdirs(const char *path);
void cpri_rmtree(const char *path);
uint64_t cpri_tree_bytes(const char *path);

/* Leftover sweep of S2/S3 (caller holds store->mu). Returns items removed.
 * Staging directories; blob directories only at_open, as segments
 * (sweep_segments). */
uint64_t cpri_store_sweep(cpr_store *store, int at_open);
uint64_t cpri_store_sweep_segments(cpr_store *store);

/* 1 when name[0..n) has the form of the names below: "<job>/<rest>" of
 * [A-Za-z0-9._-], neither part starting with '.' (what a plan or a direct
 * writer may name; no path or object of another kind). */
int cpri_seg_name_ok(const void *name, size_t n);
/* Segment object names (out holds CPR_SEG_NAME_MAX bytes). */
void cpri_seg_part_name(char *out, const char *job, uint32_t shard, uint64_t ckpt,
                       uint64_t token);
void cpri_seg_fold_name(char *out, const char *job, uint32_t shard, uint64_t ckpt,
                       uint64_t token);
uint64_t cpri_seg_new_token(cpr_store *store);
/* B1: the object of blob `blob` of the part whose segment is `seg`. */
void cpri_seg_blob_name(char *out, const char *seg, const char *blob);

/* S7: a reader of segments registers under store->mu before it leaves the
 * critical section in which it planned from the catalog, and leaves when it
 * has read everything (removing what became doomed meanwhile). */
/* D1: DIR/store-id's name into out[CPRI_LOCAL_ID_CAP]. A reader (!create): CPR_NOT_FOUND
 * when missing, CPR_CORRUPT when it holds no name, CPR_IO when unreadable.
 * The store (create): a missing or damaged one is written anew. */
cpr_status cpri_local_id(const char *dir, int create, char *out);
void cpri_store_reader_enter_locked(cpr_store *store);
void cpri_store_reader_leave(cpr_store *store);
/* Remove a segment now if no reader runs, else when the last one leaves.
 * Caller holds store->mu. */
void cpri_store_doom_locked(cpr_store *store, const char *name);
/* S8: remove the doomed objects whose grace is over (none while a reader
 * runs). Takes store->mu. */
void cpri_store_reap_doomed(cpr_store *store);

/* O1. n_open_parts (and a job's open_parts) count the parts in the open
 *     list: incremented by begin, decremented when a part leaves the list.
 *     n_open_blobs (and a job's open_blobs) count open_blob entries of
 *     parts, incremented when a blob's first chunk creates its file and
 *     decremented when the part's commit finishes its blobs (or fails to)
 *     or the part is freed, whichever comes first. All under store->mu; begin and a
 *     new blob are refused (CPR_RESOURCE_EXHAUSTED) past the caps, so the
 *     store's threads, rings and descriptors stay bounded, and past
 *     max_buffer_bytes, counting PART_BUFFER_BYTES a part and
 *     BLOB_BUFFER_BYTES a blob (their writers' I/O buffers and block
 *     builder), so their memory does too. */
#define PART_BUFFER_BYTES ((uint64_t)12 << 20)
#define BLOB_BUFFER_BYTES ((uint64_t)1 << 20)
/* CPR_OK, or CPR_RESOURCE_EXHAUSTED if `parts` more open parts and `blobs`
 * more open blobs would exceed max_buffer_bytes. Under store->mu. */
cpr_status cpri_buffers_admit_locked(const cpr_store *store, uint32_t parts, uint32_t blobs);
cpr_status cpri_open_blob_admit(cpr_store *store, uint32_t job_id);
void cpri_store_release_blobs(cpr_store *store, open_part *part);
/* Look up an open part by id and take a reference (store->mu taken inside). */
open_part *cpri_open_part_get(cpr_store *store, const cpr_part_id *id);
void cpri_open_part_put(cpr_store *store, open_part *part);
void cpri_open_part_free(cpr_store *store, open_part *part);
void cpri_block_builder_release(block_builder *bb);

struct cpri_merge_rows;
/* Append rows (ids strictly ascending; versions make a fold block) as one
 * block to a segment, padded to 8 bytes (store_write.c W1). */
cpr_status cpri_seg_write_block(cpr_store *store, cpri_obj_writer *w,
                               const struct cpri_merge_rows *rows, cpri_block_ref *ref);
cpr_status cpri_seg_pad(cpr_store *store, cpri_obj_writer *w, size_t block_bytes);

/* Write fold (shard, at) of `job` (fold.c; catalog C6) unless nothing below
 * `at` needs one; `replace` drops the shard's older folds in the same
 * write. Caller holds fold_mu, not store->mu. *bytes (may be NULL) gets the
 * bytes written, *rows_out the rows in the fold. */
cpr_status cpri_fold_shard(cpr_store *store, const char *job, uint32_t shard, uint64_t at,
                          int replace, uint64_t *bytes, uint64_t *rows_out);

/* Background folding (fold.c). start: a low-priority thread that folds long
 * chains after commits poke it; stop joins it (NULL-safe, idempotent). */
cpr_status cpri_fold_start(cpr_store *store);
void cpri_fold_stop(cpr_store *store);
void cpri_fold_poke(cpr_store *store);

/* One pass of the background's rule on this thread, without its pauses
 * (tests); *folded (may be NULL) gets the folds written. */
cpr_status cpri_fold_background_pass(cpr_store *store, uint64_t *folded);

/* 1 if the record of this part failed to decode at open (S5). */
int cpri_store_is_damaged(const cpr_store *store, uint32_t job_id, uint32_t shard, uint64_t ckpt);
/* Under store->mu: CPR_CORRUPT (with a message) if a damaged fold record of
 * (job, shard) lies in (start, as_of]: the parts it replaced may be gone,
 * so no restore of that shard as of >= its checkpoint can be trusted,
 * unless it starts at a FULL or an intact fold at or after the damaged one
 * (`start`, from cpri_shard_sources), which holds everything below it. */
cpr_status cpri_store_check_folds(const cpr_store *store, const cpri_job *job, uint32_t shard,
                                  uint64_t start, uint64_t as_of);

/* Is `job` valid? Sets the error message if not. */
cpr_status cpri_check_job_name(const char *job);

#endif /* CPR_STORE_INTERNAL_H */
