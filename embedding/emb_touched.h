/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rows each shard of a CPU table has touched since they were last
 * saved, kept by the update step so that MFU and TOPK_NORM select from
 * them instead of reading every row's tracker (issue #9: a save's stall).
 * At 10 M rows a radix pass over all counts took 3.5 ms; a save of an
 * interval touches a few percent of the rows.
 *
 * Invariants:
 *  T1. Every row with a non-zero MFU count or TOPK_NORM value is listed:
 *      its `listed` bit is set and its id is in its shard's list, unless the
 *      shard's list is `lost` (an allocation failed): selection then reads
 *      every row, and rebuilds the list. A listed row has at least one entry.
 *  T2. Whoever sets a row's trackers back to zero (a save's begin, a
 *      restore, a wipe) unlists it (cpri_emb_touched_unlist); its entry
 *      stays until the list is compacted, reading only the bitmap: entries
 *      of unlisted rows and all but the first entry of rows listed again
 *      meanwhile go. Selection compacts, and so does an append that finds
 *      the list full (before it grows it), so a list holds at most twice
 *      the rows listed since its last compaction.
 *  T3. The bitmap alone says which rows are listed: a selection may read
 *      the listed rows of a contiguous shard off it (ascending) instead of
 *      the list; it then leaves the list uncompacted, and the appends that
 *      find it full compact it (T2's bound holds: they grow it only when
 *      compaction freed less than half).
 *  T4. Where counts are tracked, every listed row's count is non-zero: an
 *      update adds at least 1 to the count whenever it lists a row (or moves
 *      its norm), and the count and the norm go back to zero together
 *      (T2) or come back together (an aborted save). So an MFU selection
 *      whose budget holds every listed row takes them all without reading
 *      one count (the random reads were most of its stall).
 *  T5. A shard's `zero_norm` is clear only if every listed row's norm is
 *      non-zero (where norms are tracked): whoever leaves a listed row with
 *      a zero norm (an update of no change, an aborted save's rows coming
 *      back, a rebuild) sets it; it clears when the list empties or a
 *      selection that read every listed row's norm found none zero. While it
 *      is clear, a TOPK_NORM selection whose budget holds every listed row
 *      takes them all unread, as T4 lets MFU.
 * Not thread-safe: the training thread only, like the trackers themselves.
 */
#ifndef CPR_EMB_TOUCHED_H
#define CPR_EMB_TOUCHED_H

#include <stddef.h>
#include <stdint.h>

#include "emb_internal.h"

typedef struct cpri_emb_touched_list {
    uint64_t *ids;
    size_t len, cap;
    int lost;                /* T1: an append failed */
    int zero_norm;           /* T5: a listed row's norm may be zero */
} cpri_emb_touched_list;

typedef struct cpri_emb_touched {
    uint64_t *listed;        /* bitmap over rows; NULL: not kept */
    cpri_emb_touched_list *lists; /* one per shard */
    uint32_t n_shards;
    /* selection scratch, kept between selections (no page faults in a stall) */
    uint64_t *scratch_ids, *scratch_ids2;
    uint32_t *scratch_keys;
    size_t scratch_cap;
} cpri_emb_touched;

/* Set up for a table (all zero, disabled, when !enabled). */
cpr_status cpri_emb_touched_init(cpri_emb_touched *s, int enabled, uint64_t rows,
                                 uint32_t n_shards);
void cpri_emb_touched_release(cpri_emb_touched *s);

void cpri_emb_touched_append(cpri_emb_touched *s, uint32_t shard, uint64_t row);

/* A row's MFU count or TOPK_NORM value became non-zero (T1). */
static inline void cpri_emb_touched_add(cpri_emb_touched *s, uint32_t shard, uint64_t row)
{
    if (!((s->listed[row >> 6] >> (row & 63)) & 1u))
        cpri_emb_touched_append(s, shard, row);
}

/* A listed row of the shard has a zero norm (T5). */
static inline void cpri_emb_touched_zero_norm(cpri_emb_touched *s, uint32_t shard)
{
    s->lists[shard].zero_norm = 1;
}

/* The row's trackers are zero again (T2). */
static inline void cpri_emb_touched_unlist(cpri_emb_touched *s, uint64_t row)
{
    s->listed[row >> 6] &= ~(1ull << (row & 63));
}

/* Every row of the shard lost its trackers (wipe). */
void cpri_emb_touched_clear_shard(cpri_emb_touched *s, uint32_t shard);

/* Trackers that keep rows listed (T2): a row stays while either is non-zero.
 * Row r's count is the uint32_t at counts + r * stride bytes, its norm the
 * float at norm + r * stride (interleaved per row, or separate arrays with
 * stride 4). */
typedef struct cpri_emb_touched_keys {
    const void *counts;      /* NULL: not tracked */
    const void *norm;        /* NULL: not tracked */
    size_t stride;
} cpri_emb_touched_keys;

/*
 * The shard's rows with the largest non-zero keys (32-bit, live->stride
 * apart: live->counts, or live->norm as bit patterns), at most k, ties toward
 * lower ids, ascending into ids: exactly what cpri_emb_topk returns. From
 * the list when it is intact and, in a shard of 2^20 rows or more, holds at
 * most half of them (*from_list = 1); otherwise nothing is written
 * (*from_list = 0): the caller reads every row, and calls
 * cpri_emb_touched_rebuild if the list was lost.
 */
cpr_status cpri_emb_touched_topk(cpri_emb_touched *s, const cpr_emb *t, uint32_t shard,
                                 const cpri_emb_touched_keys *live, const void *keys,
                                 uint64_t k, uint64_t *ids, size_t *n, int *from_list);

/* List the shard's rows with non-zero trackers afresh (a lost list). */
static inline int cpri_emb_touched_lost(const cpri_emb_touched *s, uint32_t shard)
{
    return s->lists[shard].lost;
}

void cpri_emb_touched_rebuild(cpri_emb_touched *s, const cpr_emb *t, uint32_t shard,
                              const cpri_emb_touched_keys *live);

#endif /* CPR_EMB_TOUCHED_H */
