/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Per-shard lists of touched rows and the top-k selection over them
 * (emb_touched.h has the invariants). Selection: compact the list (drop
 * unlisted rows and repeated entries), find the k-th largest key (off an
 * exact histogram of small keys, by quickselect above them), take the rows
 * above it and the lowest-id rows equal to it, and sort the result by id
 * (cpri_emb_sort_ids): O(listed rows), never O(shard rows). A long list of
 * a contiguous shard is not read at all (T3): the listed rows come off the
 * bitmap in ascending order (a word scan, an eighth of a word per listed
 * row at most), so neither the compaction nor the sort runs, and the keys
 * are read in ascending address order.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "emb_select.h"
#include "emb_touched.h"

#define LIST_MIN_CAP 1024
/* A few bytes of work a row: DRAM latency needs many ahead (reading the keys
 * of 47 K listed rows of 10 M: 0.6 ms at 32 ahead, 0.3 ms at 64). */
#define PREFETCH_AHEAD 64
#define SMALL_KEYS 256u
#define DENSE_MIN_ROWS (1u << 20)
/* T3: lists this long of contiguous shards, with an entry per 8 bitmap words
 * or more, are read off the bitmap. Short lists of small shards too: make
 * demo's MFU selects from 208 shard-tables of 6,250 rows with about 1,700
 * entries each, and reading 98 words each instead of compacting and sorting
 * the lists took its median stall from 10.1 to 7.5-7.8 ms (cpr-dlrm, the
 * demo's arguments, seed 1, alternating pairs; the floor was 4096). */
#define BITMAP_MIN_LISTED 64u
#define BITMAP_WORDS_PER_ENTRY 8u

cpr_status cpri_emb_touched_init(cpri_emb_touched *s, int enabled, uint64_t rows,
                                 uint32_t n_shards)
{
    memset(s, 0, sizeof *s);
    if (!enabled)
        return CPR_OK;
    s->listed = calloc((rows + 63) / 64, 8);
    s->lists = calloc(n_shards, sizeof *s->lists);
    s->n_shards = n_shards;
    if (!s->listed || !s->lists) {
        cpri_emb_touched_release(s);
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the touched-row lists");
    }
    return CPR_OK;
}

void cpri_emb_touched_release(cpri_emb_touched *s)
{
    for (uint32_t i = 0; s->lists && i < s->n_shards; i++)
        free(s->lists[i].ids);
    free(s->lists);
    free(s->listed);
    free(s->scratch_ids);
    free(s->scratch_ids2);
    free(s->scratch_keys);
    memset(s, 0, sizeof *s);
}

static void compact(cpri_emb_touched *s, cpri_emb_touched_list *l);

void cpri_emb_touched_append(cpri_emb_touched *s, uint32_t shard, uint64_t row)
{
    cpri_emb_touched_list *l = &s->lists[shard];
    if (l->lost)
        return; /* selection reads every row until it rebuilds the list (T1) */
    if (l->len == l->cap) {
        /* Stale entries first: policies that never select (DELTA, SSU) would
         * otherwise grow the list by every save's rows (T2). Then grow unless
         * that freed half: at least cap/2 appends between two compactions,
         * so appending stays O(1) amortized. */
        if (l->len)
            compact(s, l);
        if (l->cap == 0 || l->len > l->cap / 2) {
            size_t cap = l->cap ? 2 * l->cap : LIST_MIN_CAP;
            uint64_t *grown = realloc(l->ids, cap * sizeof *grown);
            if (!grown && l->len == l->cap) {
                l->lost = 1;
                return;
            }
            if (grown) {
                l->ids = grown;
                l->cap = cap;
            }
        }
    }
    l->ids[l->len++] = row;
    BIT_SET(s->listed, row);
}

static void forget_list(cpri_emb_touched *s, cpri_emb_touched_list *l)
{
    for (size_t i = 0; i < l->len; i++)
        BIT_CLR(s->listed, l->ids[i]);
    l->len = 0;
    l->lost = 0;
    l->zero_norm = 0; /* T5: nothing listed */
}

void cpri_emb_touched_clear_shard(cpri_emb_touched *s, uint32_t shard)
{
    forget_list(s, &s->lists[shard]);
}

static uint32_t key_at(const void *keys, size_t stride, uint64_t row)
{
    uint32_t key;
    memcpy(&key, (const unsigned char *)keys + row * stride, 4);
    return key;
}

/* Non-zero count, or norm (a non-negative float: zero is bits 0; -0.0 is
 * never stored, the norm only grows from 0). */
static int alive(const cpri_emb_touched_keys *live, uint64_t row)
{
    return (live->counts && key_at(live->counts, live->stride, row)) ||
           (live->norm && key_at(live->norm, live->stride, row));
}

void cpri_emb_touched_rebuild(cpri_emb_touched *s, const cpr_emb *t, uint32_t shard,
                              const cpri_emb_touched_keys *live)
{
    uint64_t n = cpri_emb_geom_shard_rows(t, shard), row = cpri_emb_geom_first(t, shard);
    uint64_t stride = cpri_emb_geom_stride(t);
    forget_list(s, &s->lists[shard]);
    s->lists[shard].zero_norm = live->norm != NULL; /* T5: not looked at */
    for (uint64_t i = 0; i < n; i++, row += stride)
        if (alive(live, row))
            cpri_emb_touched_append(s, shard, row);
}

/* T2: drop the entries of unlisted rows (their trackers went back to zero)
 * and the later entries of rows listed again since: reads the bitmap only
 * (a save's rows were unlisted by its begin, in the training thread). */
static void compact(cpri_emb_touched *s, cpri_emb_touched_list *l)
{
    size_t kept = 0;
    for (size_t i = 0; i < l->len; i++) {
        uint64_t row = l->ids[i];
        if (i + PREFETCH_AHEAD < l->len)
            __builtin_prefetch(s->listed + (l->ids[i + PREFETCH_AHEAD] >> 6));
        if (!BIT_GET(s->listed, row))
            continue; /* unlisted, or kept already through an earlier entry */
        BIT_CLR(s->listed, row);
        l->ids[kept++] = row;
    }
    for (size_t i = 0; i < kept; i++)
        BIT_SET(s->listed, l->ids[i]);
    l->len = kept;
}

static cpr_status reserve_scratch(cpri_emb_touched *s, size_t n)
{
    if (s->scratch_cap >= n)
        return CPR_OK;
    size_t cap = n < LIST_MIN_CAP ? LIST_MIN_CAP : n + n / 2;
    uint64_t *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b);
    uint32_t *keys = malloc(2 * cap * sizeof *keys);
    if (!a || !b || !keys) {
        free(a);
        free(b);
        free(keys);
        return CPR_NO_MEMORY;
    }
    free(s->scratch_ids);
    free(s->scratch_ids2);
    free(s->scratch_keys);
    s->scratch_ids = a;
    s->scratch_ids2 = b;
    s->scratch_keys = keys;
    s->scratch_cap = cap;
    return CPR_OK;
}

static void swap32(uint32_t *a, size_t i, size_t j)
{
    uint32_t x = a[i];
    a[i] = a[j];
    a[j] = x;
}

/* The k-th largest (1 <= k <= n) of a[0..n), reordering a: quickselect
 * with three-way partitions (counts repeat a lot). */
static uint32_t kth_largest(uint32_t *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n, want = k - 1;
    while (hi - lo > 1) {
        uint32_t x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi - 1];
        uint32_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        size_t gt_end = lo, i = lo, lt_begin = hi; /* [> pivot][== pivot][< pivot] */
        while (i < lt_begin) {
            if (a[i] > pivot)
                swap32(a, gt_end++, i++);
            else if (a[i] < pivot)
                swap32(a, i, --lt_begin);
            else
                i++;
        }
        if (want < gt_end)
            hi = gt_end;
        else if (want < lt_begin)
            return pivot;
        else
            lo = lt_begin;
    }
    return a[lo];
}


/* The k-th largest key off the exact histogram of keys below SMALL_KEYS - 1
 * (k <= candidates); SMALL_KEYS - 1 when it is at or above that. MFU's counts
 * since the last save nearly always are small. */
static uint32_t kth_small(const uint32_t *small, uint64_t k)
{
    uint64_t acc = 0;
    for (uint32_t key = SMALL_KEYS - 1; key > 0; key--) {
        acc += small[key];
        if (acc >= k)
            return key;
    }
    return 1; /* not reached: k <= candidates, every candidate is counted */
}


cpr_status cpri_emb_touched_topk(cpri_emb_touched *s, const cpr_emb *t, uint32_t shard,
                                 const cpri_emb_touched_keys *live, const void *keys,
                                 uint64_t k, uint64_t *ids, size_t *n, int *from_list)
{
    cpri_emb_touched_list *l = &s->lists[shard];
    uint64_t shard_rows = cpri_emb_geom_shard_rows(t, shard);
    *from_list = 0;
    /* In a large shard, a list of most of its rows is slower to select from
     * than the rows themselves (random reads from DRAM against a sequential
     * pass): the caller reads every row, and the list stays as it is (never
     * above the shard's rows: one entry a row). Small shards' trackers are
     * few, and the list wins even when it holds all of them (make demo). */
    if (l->lost)
        return CPR_OK;
    /* T3: a list of a contiguous shard that is long against its bitmap is
     * read off the bitmap instead, in ascending order: no compaction, no sort
     * of the result. */
    int by_bitmap = shard_rows && cpri_emb_geom_stride(t) == 1 && l->len >= BITMAP_MIN_LISTED &&
                    l->len * BITMAP_WORDS_PER_ENTRY >= (shard_rows + 63) / 64;
    if (!by_bitmap)
        compact(s, l);
    if (!by_bitmap && shard_rows >= DENSE_MIN_ROWS && l->len > shard_rows / 2)
        return CPR_OK;
    if (reserve_scratch(s, l->len) != CPR_OK)
        return CPR_OK; /* the caller reads every row instead */
    const uint64_t *rows = l->ids;
    size_t len = l->len;
    /* T4, T5: MFU (and TOPK_NORM while no listed norm is zero) with room
     * for every listed row takes them all, unread. */
    int take_all = len <= k && (keys == live->counts || (keys == live->norm && !l->zero_norm));
    if (by_bitmap) {
        /* The shard's listed rows, ascending: at most the list's length (T1:
         * every listed row has an entry). */
        uint64_t first = cpri_emb_geom_first(t, shard);
        uint64_t *out = take_all ? ids : s->scratch_ids2;
        len = cpri_emb_bitmap_rows(s->listed, first, first + shard_rows, out, len);
        rows = out;
        if (len == SIZE_MAX) { /* T1 broken: read every row, and rebuild the list */
            l->lost = 1;
            return CPR_OK;
        }
        if (shard_rows >= DENSE_MIN_ROWS && len > shard_rows / 2)
            return CPR_OK; /* the listed rows, counted exactly: most of the shard */
    }
    if (take_all) { /* ascending off the bitmap already, or the compacted list sorted */
        if (!by_bitmap && len) {
            uint64_t max_id = 0;
            for (size_t i = 0; i < len; i++)
                max_id = rows[i] > max_id ? rows[i] : max_id;
            memcpy(ids, rows, len * sizeof *ids);
            cpri_emb_sort_ids(ids, s->scratch_ids2, len, max_id);
        }
        *n = len;
        *from_list = 1;
        return CPR_OK;
    }
    uint32_t *cand_keys = s->scratch_keys;
    uint64_t *cand_ids = s->scratch_ids, max_id = 0;
    uint32_t small[SMALL_KEYS] = {0}; /* keys below SMALL_KEYS - 1, the rest in the last */
    size_t cand = 0, out = 0;
    for (size_t i = 0; i < len; i++) {
        if (i + PREFETCH_AHEAD < len)
            __builtin_prefetch((const char *)keys + rows[i + PREFETCH_AHEAD] * live->stride);
        uint32_t key = key_at(keys, live->stride, rows[i]);
        if (key) {
            cand_keys[cand] = key;
            cand_ids[cand++] = rows[i];
            small[key < SMALL_KEYS - 1 ? key : SMALL_KEYS - 1]++;
        }
        max_id = rows[i] > max_id ? rows[i] : max_id;
    }
    if (keys == live->norm)
        l->zero_norm = cand < len; /* T5: every listed row's norm was read */
    if (cand <= k) {
        if (cand) /* cand_ids is NULL until a list held anything */
            memcpy(ids, cand_ids, cand * sizeof *ids);
        out = cand;
    } else if (k > 0) {
        uint32_t kth = kth_small(small, k);
        if (kth == SMALL_KEYS - 1) { /* among the large keys: select exactly */
            uint32_t *sel_keys = s->scratch_keys + s->scratch_cap; /* cand > 0: allocated */
            memcpy(sel_keys, cand_keys, cand * sizeof *sel_keys);
            kth = kth_largest(sel_keys, cand, k);
        }
        /* Both loops below are branch-free (keys around the k-th one come in
         * no order, and a branch on each cost most of an MFU save's selection
         * in make demo): every candidate is written, the cursor moves only
         * for those taken. Writes stay in bounds: at most k - 1 keys are
         * above the k-th (kth_small, kth_largest), and the loop over ids
         * stops once k are taken. */
        if (by_bitmap) { /* ascending: the first ties are the lowest ids */
            size_t above = 0;
            for (size_t i = 0; i < cand; i++)
                above += cand_keys[i] > kth;
            size_t ties = k - above;
            for (size_t i = 0; i < cand && out < k; i++) {
                uint32_t key = cand_keys[i];
                size_t tie = (key == kth) & (ties != 0);
                ids[out] = cand_ids[i];
                out += (key > kth) | tie;
                ties -= tie;
            }
        } else {
            uint64_t *ties = s->scratch_ids2; /* room for every candidate (reserve_scratch) */
            size_t n_ties = 0;
            for (size_t i = 0; i < cand; i++) {
                uint32_t key = cand_keys[i];
                ids[out] = cand_ids[i];
                out += key > kth;
                ties[n_ties] = cand_ids[i];
                n_ties += key == kth;
            }
            /* The lowest ids among the ties fill the budget (cpri_emb_topk's rule). */
            if (n_ties > k - out)
                cpri_emb_sort_ids(ties, cand_ids, n_ties, max_id);
            memcpy(ids + out, ties, (k - out) * sizeof *ids);
            out = k;
        }
    }
    if (!by_bitmap)
        cpri_emb_sort_ids(ids, s->scratch_ids2, out, max_id);
    *n = out;
    *from_list = 1;
    return CPR_OK;
}
