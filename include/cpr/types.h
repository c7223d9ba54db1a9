/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/types.h - the data model every CPR module shares: the store, the
 * client, the wire, the recovery planner and the tools speak these types.
 *
 *   job        1-128 chars of [A-Za-z0-9._-]
 *   part       what one shard writes for one checkpoint id: kind, step, table
 *              schemas, rows (id, dim values, state_dim values) and blobs.
 *   kinds      FULL (every row the shard owns: the whole state of its shard),
 *              DELTA (rows modified since the shard's previous FULL/DELTA
 *              part: its `base`), PRIORITY (a subset chosen by a policy;
 *              never consistent on its own).
 *   consistent a committed FULL part, or a committed DELTA whose base is
 *              committed and consistent.
 *   cut C      every shard s < n has a consistent committed part at exactly
 *              id C, where n is the num_shards that shard 0's part at C
 *              records and every one of those parts records the same n
 *              (parts of shards >= n at C do not matter). The latest
 *              consistent cut is the largest such C. cpr_cut_* below is the
 *              one implementation of this rule; the store, the client and
 *              the recovery planner all use it.
 *
 * "As of C" (what a restore returns) is defined in cpr/store.h.
 */
#ifndef CPR_TYPES_H
#define CPR_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/export.h"
#include "cpr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpr_kind {
    CPR_KIND_UNSPECIFIED = 0,
    CPR_KIND_FULL = 1,
    CPR_KIND_DELTA = 2,
    CPR_KIND_PRIORITY = 3
} cpr_kind;

/* Name of a kind: "FULL", "DELTA", "PRIORITY" or "UNSPECIFIED". */
CPR_API const char *cpr_kind_name(cpr_kind kind);

#define CPR_NAME_MAX 128 /* longest job or blob name, in bytes */

typedef struct cpr_table_schema {
    uint32_t table;     /* table id, unique within a part */
    uint64_t rows;      /* row ids of this table are < rows */
    uint32_t dim;       /* float32 values per row, >= 1 */
    uint32_t state_dim; /* float32 optimizer-state values per row, >= 0 */
} cpr_table_schema;

/*
 * Options for cpr_store_open. Zero-initialise and set what you need; zero
 * fields take the default. Fields are only ever appended.
 */
typedef struct cpr_store_options {
    uint32_t retain_cuts;   /* consistent cuts kept by cpr_store_gc (default 2) */
    int no_sync;            /* 1: skip fsync (tests of non-durability only) */
    int no_fold;            /* 1: no background folding (cpr_store_fold still
                               folds when asked) */
    uint32_t fold_mb_s;     /* background folding's write rate limit in MB/s
                               (0: 256) */
    uint64_t min_free_bytes;/* new parts are refused (CPR_RESOURCE_EXHAUSTED)
                               while the store's file system has less free
                               space than this, or than the catalog's own
                               headroom if that is more (0: the headroom
                               only; docs/store.md, "Free space") */
    uint32_t max_open_parts;         /* parts begun and not yet committed or
                                        aborted, in all (0: 4096) ... */
    uint32_t max_open_parts_per_job; /* ... and per job (0: 1024); a Begin past
                                        either is CPR_RESOURCE_EXHAUSTED */
    uint32_t max_open_blobs;         /* blobs being written, in all (0: 4096) */
    uint32_t max_open_blobs_per_job; /* ... and per job (0: 1024) */
    uint64_t max_buffer_bytes;       /* memory for the write buffers of open parts
                                        and blobs (12 MiB a part: its writes in
                                        flight and block builder; 1 MiB a blob,
                                        what it holds between writes); a Begin
                                        or a new blob that would
                                        exceed it is CPR_RESOURCE_EXHAUSTED
                                        (0: unbounded but for the caps above) */
    /* Ceph RADOS (docs/store.md, "Segments in RADOS"): with rados_pool set,
     * segments, blobs and the catalog live in that pool, so that a committed
     * part outlives this node's disk; the directory keeps a local copy of
     * the catalog, rebuilt from the pool at every open.
     * All borrowed for cpr_store_open only. */
    const char *rados_pool;          /* NULL: everything on the local disk */
    const char *rados_conf;          /* ceph.conf (NULL: librados' search path) */
    const char *rados_namespace;     /* stores sharing a pool each take their own
                                        (NULL: the pool's default namespace) */
    const char *rados_user;          /* cephx user, without "client." (NULL: admin) */
    int buffered_reads;     /* 1: read segments on the local disk through the
                               page cache (one pread a block, the kernel's
                               sequential read-ahead) instead of O_DIRECT reads
                               in flight: faster where the host still caches
                               recent writes (virtual machines, network block
                               devices), a copy more per byte elsewhere
                               (docs/store.md, "Reads"). Writes stay O_DIRECT. */
    const char *local_dir;  /* cpr_store_reader_open (and a client's direct
                               reads): the directory of a store on a disk
                               this process can read (ckptd's --data-dir on the
                               same host), its segments read from there
                               (docs/client.md, "Direct reads"). Ignored by
                               cpr_store_open. Borrowed for the call. */
} cpr_store_options;

/* Identifies a part. `job` is borrowed for the duration of the call. */
typedef struct cpr_part_id {
    const char *job;
    uint32_t shard;
    uint64_t checkpoint;
} cpr_part_id;

typedef struct cpr_part_spec {
    cpr_part_id id;
    cpr_kind kind;
    uint64_t step;          /* training step the part captures */
    uint32_t num_shards;    /* shards of the job at this checkpoint, >= 1 */
    uint64_t base;          /* DELTA: id of the FULL/DELTA part it is relative
                               to; 0 = the shard's newest committed one */
    const cpr_table_schema *tables; /* borrowed for the call */
    size_t n_tables;        /* >= 1 unless the part carries only blobs */
    uint32_t codec;         /* the client's encoding of this part's row values
                               (cpr_codec of cpr/block.h and cpr/codec.h; 0:
                               f32, exact): the client encodes each row block
                               it sends, so the bytes on the wire and on disk
                               shrink; restores decode to f32. The optimizer
                               state stays f32. The store keeps blocks as they
                               come and ignores this field */
} cpr_part_spec;

/*
 * A batch of rows of one table. Arrays are borrowed for the call. The
 * checksum is CRC32C over ids || values || state as little-endian bytes
 * (see cpr_crc32c_rows in cpr/crc32c.h). A batch of the contiguous rows
 * [range_begin, range_begin + n) may leave `ids` NULL (puts only: no ids
 * array to build for a FULL save; the checksum then covers the ids the
 * range stands for).
 */
typedef struct cpr_row_batch {
    uint32_t table;
    size_t n;                 /* rows in this batch */
    const uint64_t *ids;      /* n row ids, or NULL for the range below */
    const float *values;      /* values_count floats: n x dim */
    size_t values_count;
    const float *state;       /* state_count floats: n x state_dim (may be NULL if 0) */
    size_t state_count;
    uint32_t crc32c;
    uint64_t range_begin;     /* ids == NULL: the first row id */
} cpr_row_batch;

typedef struct cpr_part_info {
    uint32_t shard;
    uint64_t checkpoint;
    cpr_kind kind;
    uint64_t step;
    uint32_t num_shards;
    uint64_t base;          /* DELTA base, 0 otherwise */
    uint64_t rows;          /* rows written */
    uint64_t bytes;         /* payload bytes: ids, values, state, blobs */
    int committed;          /* 0: open, being written */
    int consistent;         /* committed FULL, or DELTA with a complete chain */
    uint32_t codecs;        /* bit 1 << c for each cpr_codec c its row blocks use
                               (cpr_codecs_name); 0: no rows, or not recorded */
} cpr_part_info;

/* Free an array of names from cpr_store_list_jobs or cpr_client_list_jobs:
 * the n strings, then the array. NULL is a no-op. */
CPR_API void cpr_names_free(char **names, size_t n);

/* Row range [begin, end). */
typedef struct cpr_row_range {
    uint64_t begin;
    uint64_t end;
} cpr_row_range;

#define CPR_RESTORE_BATCH_ROWS_MAX (1u << 20) /* cpr_restore_query.batch_rows */

typedef struct cpr_restore_query {
    const char *job;
    uint64_t as_of;       /* state as of this id; 0 = newest committed */
    int consistent;       /* 1: as of the latest consistent cut (as_of ignored) */
    const uint32_t *tables; size_t n_tables;      /* none: every table */
    const cpr_row_range *ranges; size_t n_ranges; /* none: every row */
    uint64_t modulo;      /* >0: only rows with row % modulo == remainder */
    uint64_t remainder;
    size_t batch_rows;    /* rows per callback, at most 2^20
                             (CPR_RESTORE_BATCH_ROWS_MAX); 0: up to 16384 rows
                             and about 3 MiB per batch */
} cpr_restore_query;

/*
 * Receives restored rows. The batch and its arrays are valid only during the
 * call; `crc32c` is set. Return CPR_OK to continue; any other status stops
 * the restore, which then returns that status.
 */
typedef cpr_status (*cpr_row_fn)(void *ctx, const cpr_row_batch *batch);

typedef struct cpr_restore_result {
    uint64_t as_of;       /* the checkpoint the state is as of: the cut, or the
                             newest committed id at or below the one asked for */
    uint64_t rows;
    uint64_t bytes;       /* ids + values + state bytes delivered */
} cpr_restore_result;

/*
 * Receives restored rows as row blocks (cpr/block.h), valid during the call:
 * a stored block the query selects whole is handed on as it is on disk
 * (same bytes, same CRC32C); merged or filtered rows come as a new block.
 * Return CPR_OK to continue.
 */
typedef cpr_status (*cpr_block_fn)(void *ctx, const void *block, size_t len);

/* Receives consecutive chunks of a blob; data is valid during the call. */
typedef cpr_status (*cpr_blob_fn)(void *ctx, uint64_t offset,
                                  const void *data, size_t len);

typedef struct cpr_gc_report {
    uint64_t floor;              /* oldest restorable checkpoint id afterwards */
    uint64_t parts_removed;      /* committed parts no retained state needs */
    uint64_t versions_removed;   /* stored row versions dropped: the rows of
                                    the parts and folds removed, less those
                                    kept in the folds written at the floor */
    uint64_t uncommitted_removed;/* leftovers of crashed writers */
    uint64_t bytes_before;       /* store size on disk before and after */
    uint64_t bytes_after;
} cpr_gc_report;

#define CPR_RECOVERY_PLAN_MAX (1u << 20) /* largest plan, in bytes */

/* Called once per problem found by cpr_store_verify. */
typedef void (*cpr_problem_fn)(void *ctx, const char *what, const char *where);

typedef struct cpr_verify_report {
    uint64_t rows_checked;
    uint64_t blobs_checked;
    uint64_t bytes_checked;
    uint64_t problems;
} cpr_verify_report;

/* Slots of cpr_store_stats.errors: fixed, so that the struct keeps its size
 * when statuses are added (cpr/status.h is append-only and stays below it). */
#define CPR_STATS_ERRORS 32

typedef struct cpr_store_stats {
    uint64_t jobs;           /* jobs with at least one committed part or fold */
    uint64_t parts_committed;
    uint64_t parts_open;
    uint64_t rows_in;        /* rows accepted by put_rows since open */
    uint64_t bytes_in;       /* payload bytes accepted since open */
    uint64_t rows_out;       /* rows delivered by restores since open */
    uint64_t bytes_out;      /* payload bytes delivered since open */
    uint64_t store_bytes;    /* size on disk: segments, catalog and blobs */
    uint64_t errors[CPR_STATS_ERRORS]; /* failed calls, indexed by cpr_status
                                          (slots past the last status are 0) */
    uint64_t free_bytes;     /* free space on the store's file system, for
                                this user (statvfs f_bavail) */
    uint64_t gc_runs;        /* retention runs since open */
    uint64_t gc_parts_removed;
    uint64_t gc_bytes_freed; /* store bytes retention freed since open */
    uint64_t folds;          /* folds written since open */
    uint64_t fold_bytes;     /* bytes of the segments they wrote */
} cpr_store_stats;

/* ---- policies: which rows a save takes ---------------------------------------- */

typedef enum cpr_policy {
    CPR_POLICY_FULL = 0,      /* every row of the shard */
    CPR_POLICY_DELTA = 1,     /* rows dirty since the last FULL/DELTA save */
    CPR_POLICY_MFU = 2,       /* top budget rows by update count */
    CPR_POLICY_SSU = 3,       /* the sampled rows, up to budget, oldest first */
    CPR_POLICY_TOPK_NORM = 4  /* top budget rows by accumulated |update|^2 */
} cpr_policy;

/* Name of a policy ("full", "delta", "mfu", "ssu", "topk-norm"; "unknown"
 * for a value that is none of them). Never NULL. */
CPR_API const char *cpr_policy_name(cpr_policy policy);

/* The policy named `name` (as cpr_policy_name spells it) into *out.
 * CPR_INVALID_ARGUMENT (with the accepted names in the message) otherwise. */
CPR_API cpr_status cpr_policy_parse(const char *name, cpr_policy *out);

/* ---- the consistent-cut rule ----------------------------------------------------- */

/*
 * The rule over the parts of one checkpoint id, fed in ascending shard order
 * (committed parts only; open parts are skipped by the caller): zero a
 * cpr_cut_scan, call cpr_cut_scan_add per part (it returns 0 once the answer
 * is known, so that callers can stop early), then cpr_cut_scan_done says
 * whether the id is a cut.
 */
typedef struct cpr_cut_scan {
    uint32_t n;     /* shards the cut needs: shard 0's num_shards */
    uint32_t next;  /* shards 0..next-1 are accounted for */
    int broken;     /* a shard below n is missing or not consistent */
} cpr_cut_scan;
CPR_API int cpr_cut_scan_add(cpr_cut_scan *scan, uint32_t shard, uint32_t num_shards,
                             int consistent);
CPR_API int cpr_cut_scan_done(const cpr_cut_scan *scan);

/*
 * Consistent cuts of a part list ordered by (checkpoint, shard), as lists
 * return it: the ids that are cuts, newest first, the first `max` of them
 * into cuts[] (may be NULL when max is 0); returns how many there are.
 * Uncommitted parts are skipped; a part counts as consistent only if its
 * flag says so and its kind is FULL or DELTA. Ids below `floor` (0: none)
 * are not cuts (retention has removed what they need).
 */
CPR_API size_t cpr_cuts(const cpr_part_info *parts, size_t n, uint64_t floor, uint64_t *cuts,
                        size_t max);

#ifdef __cplusplus
}
#endif
#endif /* CPR_TYPES_H */
