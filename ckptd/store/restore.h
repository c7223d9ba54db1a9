/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The merge engine under restores, folds and verification (restore.c): a
 * plan of candidate blocks made from the catalog under store->mu, then a
 * k-way merge over them, newest version first, into a sink.
 */
#ifndef CPR_STORE_RESTORE_H
#define CPR_STORE_RESTORE_H

#include <stdatomic.h>

#include "backend.h"
#include "catalog.h"
#include "cpr/block.h"
#include "cpr/store.h"

typedef struct cpri_merge_cand {
    cpri_block_ref ref;
    uint32_t object;      /* index into plan->objects */
    uint32_t shard;
    uint64_t checkpoint;  /* the part's; 0 for a fold block (versions per row) */
    uint64_t seq;         /* block index in its part: later blocks win */
    int fold;
} cpri_merge_cand;

typedef struct cpri_merge_plan {
    const struct cpr_store *store;  /* for its damaged fold records (S5); may be NULL */
    uint64_t as_of;
    cpr_table_schema *tables;       /* ascending by id */
    size_t n_tables;
    cpr_row_range *ranges;          /* sorted, merged; filled by the caller */
    size_t n_ranges;
    uint64_t modulo, remainder;
    size_t batch_rows;              /* 0: about 3 MiB */
    uint64_t keep_below;            /* folds: emit only versions below this */
    char **objects;                 /* segment names */
    size_t n_objects, cap_objects;
    cpri_merge_cand *cands;          /* sorted by (table, first row) */
    size_t n_cands, cap_cands;
} cpri_merge_plan;

/* Rows of one table, ascending; arrays valid during the call. */
typedef struct cpri_merge_rows {
    uint32_t table, dim, state_dim;
    size_t n;
    const uint64_t *ids;
    const uint64_t *versions;       /* only when the sink wants them */
    const float *values, *state;    /* values: NULL when codec is not f32 */
    cpr_codec codec;                /* f32 unless the sink keeps codecs */
    const void *encoded;            /* codec != f32: n rows of row_bytes, as stored */
    size_t row_bytes;
} cpri_merge_rows;

typedef struct cpri_merge_sink {
    cpr_status (*rows)(void *ctx, const cpri_merge_rows *rows);
    /* A stored block passed on unchanged (NULL: never pass through); it has
     * no per-row versions, and `version` is its part's checkpoint. */
    cpr_status (*block)(void *ctx, const void *block, size_t len, const cpr_block_view *v,
                        uint64_t version);
    void *ctx;
    int want_versions;
    /* Rows of a block in another codec than f32 reach `rows` as they were
     * stored (codec, encoded), never decoded; a batch holds rows of one
     * codec (folds: a row keeps the codec it was saved in). 0: f32 always. */
    int keep_codec;
    /* Bytes a batch may take at most (ids and f32 values and state), below
     * what batch_rows allows; 0: no such cap. */
    size_t max_batch_bytes;
} cpri_merge_sink;

/* Shard `shard`'s sources as of `as_of`: *fold (or NULL) and the first
 * checkpoint of its parts to read (catalog C6; restore.c). */
cpr_status cpri_shard_sources(const cpri_job *job, uint32_t shard, uint64_t as_of,
                             const cpri_part_meta **fold, uint64_t *start);

/* Under store->mu. p->ranges (and modulo, batch_rows, keep_below) must be
 * set; tables NULL/0 means every table of the job. only_shard: plan that
 * shard alone. */
cpr_status cpri_merge_plan_build(cpri_merge_plan *p, const cpri_job *job, uint64_t as_of,
                                const uint32_t *tables, size_t n_tables, int only_shard,
                                uint32_t shard);
void cpri_merge_plan_release(cpri_merge_plan *p);

/* Direct reads (restore.c M4; plan.c): a restore's plan as bytes, for a
 * process that runs the merge itself over the store's segments. decode
 * checks everything a merge relies on (counts, order, indexes, names) and
 * fills *p (zeroed first; release with cpri_merge_plan_release); a plan
 * that fails is CPR_INVALID_ARGUMENT. store is NULL in a decoded plan. */
cpr_status cpri_merge_plan_encode(const cpri_merge_plan *p, unsigned char **buf, size_t *len);
cpr_status cpri_merge_plan_decode(const void *buf, size_t len, cpri_merge_plan *p);
/* The merge of a plan over `segs`, into rows (cpr_store_restore's
 * delivery); *reading counts the merges reading `segs` at once (M2). */
cpr_status cpri_merge_run_rows(cpri_backend *segs, _Atomic unsigned *reading,
                               const cpri_merge_plan *p, cpr_row_fn fn, void *ctx,
                               cpr_restore_result *res);

/* Run the merge (without store->mu; the caller is a registered reader). */
cpr_status cpri_merge_run(cpr_store *store, const cpri_merge_plan *p, const cpri_merge_sink *sink,
                         cpr_restore_result *res);

#endif /* CPR_STORE_RESTORE_H */
