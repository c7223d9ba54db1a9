/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The in-memory catalog of jobs and their committed parts, rebuilt from the
 * 'J', 'M' and 'F' records at open. It answers every metadata question
 * (list, consistency, cuts, commit preconditions) without touching disk.
 * Not thread-safe: the store guards it with its mutex.
 *
 * Invariants
 *  C1. A job's parts are sorted by (checkpoint, shard) and unique.
 *  C2. Per (job, shard), parts are committed in increasing checkpoint order,
 *      so a new part never changes the consistency of an older one, and a
 *      part's `consistent` flag is computed once, when it is added.
 *  C3. A DELTA is consistent iff its base part (same shard) is committed and
 *      consistent, or it sits exactly at the job's retention floor (GC only
 *      ever raises the floor to a consistent cut, deleting older parts), or
 *      its base lies below the floor and the shard's fold at the floor holds
 *      that base's complete chain: a fold records in `base` the newest
 *      consistent FULL or DELTA of its shard below it (cpri_job_chain_head;
 *      0 for none, and in folds written before this rule). A shard outside
 *      the floor's cut (a job resharded) may keep a DELTA above the floor
 *      on a base below it; without the fold's word such a DELTA turned
 *      inconsistent at the next open, and the job's latest cut went back.
 *      Folds load after parts at open, so the flags are settled once all
 *      records are in (cpri_job_settle_consistency).
 *  C4. tables[] of a job holds one schema per table id ever declared; dims
 *      never change within a job.
 *  C5. parts[] holds every part whose record exists, also below the floor
 *      (a GC that crashed before removing them); List, cuts and restores
 *      ignore parts below the floor except as data (store_gc.c).
 *  C6. folds[] holds the job's folds, sorted by (shard, checkpoint): fold
 *      (s, X) holds, for every row, shard s's newest version older than X
 *      unless a part of s at X holds the row (fold.c).
 */
#ifndef CPR_STORE_CATALOG_H
#define CPR_STORE_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "meta.h"

typedef struct cpri_job {
    char name[CPR_NAME_MAX + 1];
    uint32_t id;
    uint64_t floor;              /* oldest restorable checkpoint id (0: none) */
    cpri_part_meta *parts;        /* committed, sorted (C1) */
    size_t n_parts, cap_parts;
    cpr_table_schema *tables;    /* C4 */
    size_t n_tables;
    cpri_part_meta *folds;        /* C6; checkpoint = X */
    size_t n_folds, cap_folds;
    uint32_t open_parts;         /* in the store's open list (store.c, O1) */
    uint32_t open_blobs;         /* blob files being written by its open parts (O1) */
    uint64_t pool_hash;          /* in RADOS: hash of its records as last reloaded from
                                    the pool (store.c, R9), 0: never */
    uint64_t fresh_seq;          /* in RADOS: the reloads_begun number of its last whole
                                    reload (store.c, R9), 0: none */
    uint64_t catalog_gen;        /* in RADOS: this gateway's writes of its fold,
                                    part-removal and floor records to the pool, counted
                                    in the same hold of the store's mu as the write (a
                                    reload that saw it move starts over: store.c) */
} cpri_job;

/* C7. by_name and by_id index jobs[] (slot value i + 1; 0: empty) by
 *     open addressing with linear probing, at most half full: finding a
 *     job costs a hash, not a scan (a lookup runs under the store's lock
 *     for every call). */
typedef struct cpri_catalog {
    cpri_job **jobs;
    size_t n_jobs, cap_jobs;
    uint32_t next_job_id;
    uint32_t *by_name, *by_id;   /* C7; index_cap slots each */
    size_t index_cap;            /* a power of two, >= 2 * n_jobs */
} cpri_catalog;

void cpri_catalog_release(cpri_catalog *cat);
cpri_job *cpri_catalog_find(const cpri_catalog *cat, const char *name);
cpri_job *cpri_catalog_find_id(const cpri_catalog *cat, uint32_t id);
/* Add a job; id 0 assigns the next free id. */
cpr_status cpri_catalog_add_job(cpri_catalog *cat, const char *name, uint32_t id,
                               cpri_job **out);

/* Remove the most recently added job (it must have no parts). */
void cpri_catalog_drop_last(cpri_catalog *cat);

/* Take ownership of *m (on success and failure alike) and insert it. */
cpr_status cpri_job_add_part(cpri_job *job, cpri_part_meta *m);
/* Remove and release parts with checkpoint < floor; returns how many. */
size_t cpri_job_drop_below(cpri_job *job, uint64_t floor);
/* Remove and release the first n parts (in checkpoint order); n_parts: all. */
size_t cpri_job_drop_first(cpri_job *job, size_t n);
cpri_part_meta *cpri_job_find_part(const cpri_job *job, uint32_t shard, uint64_t ckpt);
/* Newest committed part of `shard` (any kind, or FULL/DELTA only). */
const cpri_part_meta *cpri_job_newest(const cpri_job *job, uint32_t shard,
                                    int consistent_kinds_only);
/* Check `tables` against the job's dims (C4) and merge new ones in. */
cpr_status cpri_job_merge_tables(cpri_job *job, const cpr_table_schema *tables,
                                size_t n);
const cpr_table_schema *cpri_job_table(const cpri_job *job, uint32_t table);

/* Take ownership of *m and insert it as a fold (replacing none); its
 * tables are merged into the job's (C4). */
cpr_status cpri_job_add_fold(cpri_job *job, cpri_part_meta *m);
/* Remove (and release) fold i. */
void cpri_job_drop_fold(cpri_job *job, size_t i);
/* Newest fold of `shard` with checkpoint <= max (NULL: none). */
const cpri_part_meta *cpri_job_fold_at_most(const cpri_job *job, uint32_t shard, uint64_t max);
/* C3: every part's `consistent` computed again, once all of the job's part,
 * fold and floor records are loaded. */
void cpri_job_settle_consistency(cpri_job *job);
/* C3: what a fold of `shard` at `at` records in its `base`: the checkpoint of
 * the shard's newest FULL or DELTA below `at` if that one is consistent (or
 * the one an older fold vouched for), else 0. */
uint64_t cpri_job_chain_head(const cpri_job *job, uint32_t shard, uint64_t at);

/* Consistent cuts at or above the floor, newest first; returns how many
 * exist (writes at most max). */
size_t cpri_job_cuts(const cpri_job *job, uint64_t *cuts, size_t max);

#endif /* CPR_STORE_CATALOG_H */
