/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The SSU sample, kept in host memory by both backends so that a CPU and a
 * GPU table sample, select and release rows identically.
 *
 * Per shard, the members in sampling order (oldest first). Invariants:
 *  U1. every list entry is a member (its member bit is set), at most once;
 *  U2. a member held by an open save has its `held` bit set: selection skips
 *      it but it keeps its place, so an aborted save gives it back its age;
 *  U3. a shard never has more than `capacity` members (held ones included).
 *  U4. a held member sampled again while its save is open has its
 *      `resampled` bit set: when that save commits, the row stays a member
 *      and moves to the end of the list (its access came after the copy the
 *      save took), instead of leaving the sample; the bit is clear on every
 *      row that is not held.
 * Not thread-safe (a table is used by one thread at a time).
 */
#ifndef CPR_EMB_SSU_H
#define CPR_EMB_SSU_H

#include <stddef.h>
#include <stdint.h>

#include "emb_internal.h"

#ifdef __cplusplus /* used by the CUDA backend too */
extern "C" {
#endif

typedef struct cpri_emb_ssu_list {
    uint64_t *ids;
    size_t len, cap;
    uint64_t held;            /* members held by open saves */
} cpri_emb_ssu_list;

typedef struct cpri_emb_ssu {
    uint64_t *member;         /* bitmap over rows; NULL: SSU not tracked */
    uint64_t *held;           /* bitmap over rows (U2) */
    uint64_t *resampled;      /* bitmap over rows (U4) */
    cpri_emb_ssu_list *lists;  /* one per shard */
    uint32_t n_shards;
    uint64_t capacity;        /* U3 */
    uint64_t *scratch;        /* selection's sort scratch, kept */
    size_t scratch_cap;
} cpri_emb_ssu;

/* Set up for `rows` rows; all zero (disabled) when !enabled. */
cpr_status cpri_emb_ssu_init(cpri_emb_ssu *s, int enabled, uint64_t rows, uint32_t n_shards,
                            uint64_t capacity);
void cpri_emb_ssu_release(cpri_emb_ssu *s);

static inline int cpri_emb_ssu_is_member(const cpri_emb_ssu *s, uint64_t row)
{
    return (int)((s->member[row >> 6] >> (row & 63)) & 1u);
}

static inline int cpri_emb_ssu_is_held(const cpri_emb_ssu *s, uint64_t row)
{
    return (int)((s->held[row >> 6] >> (row & 63)) & 1u);
}

/* A sampled access of `row`: it joins its shard's sample unless it is a
 * member already or the sample is full (best effort under memory pressure);
 * a held member is marked to stay (U4). */
void cpri_emb_ssu_add(cpri_emb_ssu *s, uint32_t shard, uint64_t row);
/* 1 if no shard's sample has room and none holds members: no add can
 * change anything (a held member's add marks it, U4). */
int cpri_emb_ssu_all_full(const cpri_emb_ssu *s);
/* Members of `shard` not held by a save. */
uint64_t cpri_emb_ssu_count(const cpri_emb_ssu *s, uint32_t shard);
/* The oldest members not held, at most min(budget, cap), ascending into ids. */
size_t cpri_emb_ssu_select(cpri_emb_ssu *s, uint32_t shard, uint64_t budget,
                          uint64_t *ids, size_t cap);
/* Save begin: hold the members among ids[0..n) (ascending); held[i] = 1 for
 * each, held[] zeroed by the caller. stride: 0, or the shard's stride when
 * the ids are every row of the shard (ids[i] = ids[0] + i * stride). */
void cpri_emb_ssu_hold(cpri_emb_ssu *s, uint32_t shard, const uint64_t *ids, size_t n,
                      uint64_t stride, uint8_t *held);
/* Save end: committed, the held rows leave the sample, but for those
 * sampled again meanwhile, which move to its end (U4); aborted, they are
 * released at their old place. */
void cpri_emb_ssu_end(cpri_emb_ssu *s, uint32_t shard, const uint64_t *ids, size_t n,
                     const uint8_t *held, int committed);
/* An open save's held flags (for save_ids, ascending) after `ids` left the
 * sample (apply): those rows are no longer held by it, so its end must not
 * touch them (another save may hold them by then). */
void cpri_emb_ssu_unhold(uint8_t *held, const uint64_t *save_ids, size_t save_n,
                        const uint64_t *ids, size_t n);
/* The rows now equal stored copies (apply): they leave the sample. */
void cpri_emb_ssu_forget(cpri_emb_ssu *s, const cpr_emb *t, const uint64_t *ids, size_t n);
/* Every member of `shard` leaves the sample (wipe). */
void cpri_emb_ssu_clear_shard(cpri_emb_ssu *s, uint32_t shard);

#ifdef __cplusplus
}
#endif
#endif /* CPR_EMB_SSU_H */
