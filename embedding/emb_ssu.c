/* SPDX-License-Identifier: Apache-2.0 */
/* The SSU sample shared by both backends (invariants in emb_ssu.h). */
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "emb_select.h"
#include "emb_ssu.h"

#define PREFETCH_AHEAD 64 /* list entries: the held bit of each is a random read */


cpr_status cpri_emb_ssu_init(cpri_emb_ssu *s, int enabled, uint64_t rows, uint32_t n_shards,
                            uint64_t capacity)
{
    memset(s, 0, sizeof *s);
    if (!enabled)
        return CPR_OK;
    s->member = calloc((rows + 63) / 64, 8);
    s->held = calloc((rows + 63) / 64, 8);
    s->resampled = calloc((rows + 63) / 64, 8);
    s->lists = calloc(n_shards, sizeof *s->lists);
    s->n_shards = n_shards;
    s->capacity = capacity;
    if (!s->member || !s->held || !s->resampled || !s->lists) {
        cpri_emb_ssu_release(s);
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the SSU sample of %llu rows",
                        (unsigned long long)rows);
    }
    return CPR_OK;
}

void cpri_emb_ssu_release(cpri_emb_ssu *s)
{
    for (uint32_t i = 0; s->lists && i < s->n_shards; i++)
        free(s->lists[i].ids);
    free(s->lists);
    free(s->member);
    free(s->held);
    free(s->resampled);
    free(s->scratch);
    memset(s, 0, sizeof *s);
}

void cpri_emb_ssu_add(cpri_emb_ssu *s, uint32_t shard, uint64_t row)
{
    cpri_emb_ssu_list *l = &s->lists[shard];
    if (BIT_GET(s->member, row)) {
        if (BIT_GET(s->held, row)) /* U4: sampled again after its save's copy */
            BIT_SET(s->resampled, row);
        return;
    }
    if (l->len >= s->capacity)
        return; /* the shard's sample is full (U3) */
    if (l->len == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        uint64_t *grown = realloc(l->ids, cap * sizeof *grown);
        if (!grown)
            return; /* sampling is best effort under memory pressure */
        l->ids = grown;
        l->cap = cap;
    }
    l->ids[l->len++] = row;
    BIT_SET(s->member, row);
}

int cpri_emb_ssu_all_full(const cpri_emb_ssu *s)
{
    /* A shard with held members is not "full" for this purpose: an add of a
     * held member marks it resampled (U4), so sampling must still run. */
    for (uint32_t i = 0; i < s->n_shards; i++)
        if (s->lists[i].len < s->capacity || s->lists[i].held)
            return 0;
    return 1;
}

uint64_t cpri_emb_ssu_count(const cpri_emb_ssu *s, uint32_t shard)
{
    return s->lists ? s->lists[shard].len - s->lists[shard].held : 0;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

size_t cpri_emb_ssu_select(cpri_emb_ssu *s, uint32_t shard, uint64_t budget, uint64_t *ids,
                          size_t cap)
{
    const cpri_emb_ssu_list *l = &s->lists[shard];
    size_t n = 0;
    uint64_t max_id = 0;
    int any_held = l->held != 0; /* none: no bit to read (a random read each) */
    for (size_t i = 0; i < l->len && n < budget && n < cap; i++) {
        if (any_held && i + PREFETCH_AHEAD < l->len)
            __builtin_prefetch(s->held + (l->ids[i + PREFETCH_AHEAD] >> 6));
        if (!any_held || !BIT_GET(s->held, l->ids[i])) { /* U2 */
            ids[n++] = l->ids[i];
            max_id = l->ids[i] > max_id ? l->ids[i] : max_id;
        }
    }
    if (n > s->scratch_cap) { /* kept between selections: no page faults in a stall */
        uint64_t *grown = realloc(s->scratch, n * sizeof *grown);
        if (!grown) { /* sorting in place is slower, not wrong */
            qsort(ids, n, sizeof *ids, u64_cmp);
            return n;
        }
        s->scratch = grown;
        s->scratch_cap = n;
    }
    cpri_emb_sort_ids(ids, s->scratch, n, max_id);
    return n;
}

/* The index of `row` in ids[0..n) (ascending), or n. */
static size_t find_id(const uint64_t *ids, size_t n, uint64_t row)
{
    size_t at = cpri_lower_bound_u64(ids, n, row);
    return at < n && ids[at] == row ? at : n;
}

/* held[] comes zeroed. The members among the ids, found the cheapest way:
 *  - a save of every row of the shard (stride > 0) with fewer members than
 *    rows: each member's index is arithmetic (a FULL save of 10 M rows
 *    spent 20 ms of its stall on an H200 host going over every id);
 *  - a save of many rows against a small sample: each member looked up by
 *    binary search, a few hundred ns each in a large array, so only below
 *    one member per 512 ids;
 *  - else one pass over the ids, without a branch per id.
 * The list holds exactly the members (a held one is skipped: another open
 * save holds it). */
void cpri_emb_ssu_hold(cpri_emb_ssu *s, uint32_t shard, const uint64_t *ids, size_t n,
                      uint64_t stride, uint8_t *held)
{
    cpri_emb_ssu_list *l = &s->lists[shard];
    uint64_t count = 0;
    if (n == 0)
        return;
    if ((stride && l->len < n) || l->len < n / 512) {
        for (size_t j = 0; j < l->len; j++) {
            uint64_t row = l->ids[j];
            size_t i;
            if (BIT_GET(s->held, row))
                continue;
            if (stride) { /* every row of the shard: row = ids[0] + i * stride */
                i = row >= ids[0] ? (size_t)((row - ids[0]) / stride) : n;
                if (i >= n || ids[i] != row)
                    continue; /* not of this shard: cannot happen (the list is its) */
            } else if ((i = find_id(ids, n, row)) == n) {
                continue;
            }
            held[i] = 1;
            BIT_SET(s->held, row);
            count++;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            uint64_t w = ids[i] >> 6, bit = 1ull << (ids[i] & 63);
            uint64_t take = (s->member[w] & ~s->held[w] & bit) != 0;
            held[i] = (uint8_t)take;
            s->held[w] |= bit & (0 - take);
            count += take;
        }
    }
    l->held += count;
}

/* Remove `row` from the bitmaps; the caller compacts the list (U1). */
static void forget_row(cpri_emb_ssu *s, cpri_emb_ssu_list *l, uint64_t row)
{
    if (!BIT_GET(s->member, row))
        return;
    BIT_CLR(s->member, row);
    if (BIT_GET(s->held, row)) {
        BIT_CLR(s->held, row);
        BIT_CLR(s->resampled, row);
        l->held--;
    }
}

/* Drop the entries whose member bit was cleared, keeping the order (U1). */
static void compact(cpri_emb_ssu *s, cpri_emb_ssu_list *l)
{
    size_t keep = 0;
    for (size_t i = 0; i < l->len; i++)
        if (BIT_GET(s->member, l->ids[i]))
            l->ids[keep++] = l->ids[i];
    l->len = keep;
}

void cpri_emb_ssu_end(cpri_emb_ssu *s, uint32_t shard, const uint64_t *ids, size_t n,
                     const uint8_t *held, int committed)
{
    cpri_emb_ssu_list *l = &s->lists[shard];
    int any = 0, moved = 0;
    for (size_t i = 0; held && i < n; i++) {
        if (!held[i] || !BIT_GET(s->held, ids[i]))
            continue; /* the row left the sample meanwhile (apply, wipe) */
        if (committed && BIT_GET(s->resampled, ids[i])) {
            /* U4: out of its place now (the member bit cleared for the
             * compaction), back at the end below; resampled marks it */
            BIT_CLR(s->member, ids[i]);
            BIT_CLR(s->held, ids[i]);
            l->held--;
            any = moved = 1;
        } else if (committed) {
            forget_row(s, l, ids[i]);
            any = 1;
        } else { /* back at its old place */
            BIT_CLR(s->held, ids[i]);
            BIT_CLR(s->resampled, ids[i]);
            l->held--;
        }
    }
    if (any)
        compact(s, l);
    for (size_t i = 0; moved && i < n; i++) /* in the list's room: each was in it */
        if (held[i] && BIT_GET(s->resampled, ids[i])) {
            BIT_CLR(s->resampled, ids[i]);
            BIT_SET(s->member, ids[i]);
            l->ids[l->len++] = ids[i];
        }
}

void cpri_emb_ssu_forget(cpri_emb_ssu *s, const cpr_emb *t, const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        forget_row(s, &s->lists[cpri_emb_geom_shard_of(t, ids[i])], ids[i]);
    for (uint32_t shard = 0; n && shard < s->n_shards; shard++)
        compact(s, &s->lists[shard]);
}

void cpri_emb_ssu_clear_shard(cpri_emb_ssu *s, uint32_t shard)
{
    cpri_emb_ssu_list *l = &s->lists[shard];
    for (size_t i = 0; i < l->len; i++) /* every member is in the list (U1) */
        forget_row(s, l, l->ids[i]);
    l->len = 0;
}

void cpri_emb_ssu_unhold(uint8_t *held, const uint64_t *save_ids, size_t save_n,
                        const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t at = find_id(save_ids, save_n, ids[i]); /* save ids are ascending */
        if (at < save_n)
            held[at] = 0;
    }
}
