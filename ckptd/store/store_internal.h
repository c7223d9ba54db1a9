/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the store shared by store*.c. Layout of a store directory:
 *
 *   DIR/db/                      RocksDB: rows, part records, job ids, floors,
 *                                recovery records
 *   DIR/blobs/j_<job>/<shard>-<ckpt>/b_<name>   blob files of committed parts
 *   DIR/staging/j_<job>/<shard>-<ckpt>.<seq>/    an open part: *.sst, blobs/
 *
 * (<seq> is unique per begin, so a part aborted while a late put still holds
 * it can never touch the directory of the same part begun again.)
 *
 * ("j_" and "b_" prefixes keep names such as ".." harmless as path parts.)
 *
 * Commit protocol (store_write.c), in this order; each step durable before
 * the next starts:
 *   1. finish the part's row SST files (SstFileWriter::Finish fsyncs them);
 *   2. finish its blob files (fdatasync);
 *   3. write the part record (and the job id record) into one more SST;
 *   4. rename staging/.../blobs to blobs/j_<job>/<shard>-<ckpt>, fsync dirs;
 *   5. IngestExternalFile(all SSTs): ONE atomic MANIFEST write makes rows and
 *      part record visible together. This is the commit point.
 *   6. remove the staging directory; add the part to the catalog.
 *
 * Invariants
 *  S1. Rows of a part are visible iff its part record is (step 5 is atomic).
 *  S2. A blob directory belongs to a committed part iff its part record
 *      exists; a directory without a record is a leftover of a crash between
 *      steps 4 and 5 and is deleted by the sweep at open and by GC.
 *  S3. Everything under staging/ at open is a leftover of a crash (a store
 *      directory is opened by one process at a time) and is deleted.
 *  S5. A damaged part record keeps its blob directory (verify reports it);
 *      only a missing record makes the directory a leftover.
 *  S4. Nothing the store ever writes changes a committed row version or blob;
 *      only GC deletes versions, and only those no retained state needs,
 *      after the new floor is durable (store_gc.c).
 *  S6. A job's recovery record ('G' name, store_recovery.c) changes only by
 *      a compare-and-set under recovery_mu whose synced write is durable
 *      before the caller hears of it; its generation only ever grows by one.
 *      Nothing else (GC, the sweep, aborts) writes or deletes 'G' keys, and
 *      a record needs no part of its job.
 */
#ifndef CPR_STORE_INTERNAL_H
#define CPR_STORE_INTERNAL_H

#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>

#include "blobio.h"
#include "catalog.h"
#include "cpr/store.h"
#include "cpr_common.h"
#include "keys.h"
#include "lanes.h"
#include "meta.h"
#include "retention_filter.h"

typedef struct open_blob {
    char name[CPR_NAME_MAX + 1];
    cpr_bfile_writer *writer;
} open_blob;

typedef enum part_state { PART_OPEN, PART_COMMITTING, PART_FAILED } part_state;

/* An uncommitted part. Lives in store->open_parts while begun. */
typedef struct open_part {
    struct open_part *next;
    char job_name[CPR_NAME_MAX + 1];
    uint32_t job_id;
    cpr_part_meta meta;          /* spec, counters; blobs filled at commit */
    char *dir;                   /* staging directory */
    char *final_dir;             /* blobs/j_<job>/<shard>-<ckpt> once committing */
    pthread_mutex_t mu;          /* serialises writes to this part */
    int refs;                    /* guarded by store->mu */
    int removed;                 /* unlinked from open_parts; guarded by store->mu */
    part_state state;            /* guarded by mu */
    _Atomic uint64_t active_ms;  /* monotonic ms when a call last touched the part
                                    (cpr_store_abort_idle) */
    cpr_lanes *lanes;            /* row-file writers; NULL until the first rows */
    char **files;                /* row files in ingest order, set at commit */
    size_t n_files;
    unsigned char max_key[CPR_ROW_KEY_LEN]; /* largest row key submitted */
    unsigned out_of_order;       /* batches that went backwards (new chunks) */
    int have_max;
    open_blob *blobs;
    size_t n_blobs;
} open_part;

/* A part whose record did not decode at open (S5). */
typedef struct damaged_part {
    uint32_t job_id, shard;
    uint64_t checkpoint;
} damaged_part;

struct cpr_store {
    char *dir;
    char *db_dir, *blobs_dir, *staging_dir;
    cpr_store_options opts;
    rocksdb_t *db;
    rocksdb_options_t *db_opts;
    rocksdb_cache_t *block_cache; /* shared by every table reader */
    rocksdb_options_t *sst_opts;
    rocksdb_envoptions_t *env_opts;
    rocksdb_readoptions_t *read_opts;
    rocksdb_writeoptions_t *sync_write;
    pthread_mutex_t mu;          /* catalog, open_parts, job commit order */
    cpr_catalog catalog;
    open_part *open_parts;
    damaged_part *damaged;       /* records that failed to decode at open */
    size_t n_damaged;
    pthread_mutex_t commit_mu;   /* commit order per shard vs. each other and GC */
    pthread_mutex_t recovery_mu; /* recovery records' compare-and-set (S6) */
    cpr_floors floors;           /* the compaction filter's view of job floors */
    _Atomic uint64_t staging_seq;/* makes every begin's staging directory unique */
    _Atomic uint64_t rows_in, bytes_in, rows_out, bytes_out;
    _Atomic uint64_t errors[CPR_STATUS_COUNT_];
};

/* Count a failed call in stats; returns st. */
cpr_status cpr_store_count(cpr_store *store, cpr_status st);
/* Map a RocksDB error string (freed here) to a status with a message. */
cpr_status cpr_rocks_error(char *err, const char *what);

/* Paths (malloc'd; NULL on OOM). */
char *cpr_path_join(const char *a, const char *b);
char *cpr_part_dirname(const char *job, uint32_t shard, uint64_t ckpt,
                       const char *root);
int cpr_mkdirs(const char *path);
int cpr_fsync_dir(const char *path);
void cpr_rmtree(const char *path);
uint64_t cpr_tree_bytes(const char *path);

/* Leftover sweep of S2/S3 (caller holds store->mu). Returns items removed. */
uint64_t cpr_store_sweep(cpr_store *store);

/* Look up an open part by id and take a reference (store->mu taken inside). */
open_part *cpr_open_part_get(cpr_store *store, const cpr_part_id *id);
void cpr_open_part_put(cpr_store *store, open_part *part);
void cpr_open_part_free(open_part *part);

/* 1 if the record of this part failed to decode at open (S5). */
int cpr_store_is_damaged(const cpr_store *store, uint32_t job_id, uint32_t shard, uint64_t ckpt);

/* Is `job` valid? Sets the error message if not. */
cpr_status cpr_check_job_name(const char *job);

#endif /* CPR_STORE_INTERNAL_H */
