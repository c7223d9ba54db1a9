/* SPDX-License-Identifier: Apache-2.0 */
/* Radix top-k selection (see emb_select.h). */
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "emb_select.h"

/* Digits of 16 bits (two passes, 512 KiB of histogram) pay off only when a
 * shard has far more rows than buckets; smaller shards use 8-bit digits
 * (four passes over few rows, a 2 KiB histogram on the stack), so selecting
 * in a small shard costs microseconds instead of clearing 512 KiB. */
#define WIDE_BITS 16
#define NARROW_BITS 8
#define WIDE_MIN_ROWS (1u << 20)
/* Keys below SMALL_KEYS (MFU's counts since the last save, nearly always)
 * are also counted exactly in the first pass; when fewer than k keys lie at
 * or above it, that histogram names the k-th key and the selection takes two
 * passes instead of up to five. */
#define SMALL_KEYS 1024u

typedef struct radix {
    unsigned bits;        /* digit width */
    uint32_t buckets;     /* 1 << bits */
    uint64_t *hist;
} radix;

/* Keys are 32 bits, key_stride bytes apart (a field of per-row structs). */
typedef struct keyset {
    const unsigned char *base;
    size_t stride;
} keyset;

static uint32_t key_at(keyset keys, uint64_t row)
{
    uint32_t key;
    memcpy(&key, keys.base + row * keys.stride, 4);
    return key;
}

/* Count, per digit at `shift`, the shard's non-zero keys whose digits above
 * `shift` equal `prefix` (every non-zero key at the top digit). */
static void histogram(const cpr_emb *t, uint32_t shard, keyset keys, const radix *r,
                      unsigned shift, uint32_t prefix)
{
    uint64_t n = cpri_emb_geom_shard_rows(t, shard), row = cpri_emb_geom_first(t, shard);
    uint64_t stride = cpri_emb_geom_stride(t);
    unsigned above = shift + r->bits; /* 32 at the top digit */
    uint32_t digit_mask = r->buckets - 1;
    memset(r->hist, 0, r->buckets * sizeof *r->hist);
    for (uint64_t i = 0; i < n; i++, row += stride) {
        uint32_t key = key_at(keys, row);
        if (key == 0)
            continue;
        if (above < 32 && (key >> above) != prefix)
            continue;
        r->hist[(key >> shift) & digit_mask]++;
    }
}

/* The first pass: the top digit's histogram of the shard's non-zero keys
 * (r->hist) and their exact histogram below SMALL_KEYS, every key at or
 * above it counted in small[SMALL_KEYS - 1]. */
static void first_pass(const cpr_emb *t, uint32_t shard, keyset keys, const radix *r,
                       uint64_t *small)
{
    uint64_t n = cpri_emb_geom_shard_rows(t, shard), row = cpri_emb_geom_first(t, shard);
    uint64_t stride = cpri_emb_geom_stride(t);
    unsigned shift = 32 - r->bits;
    memset(r->hist, 0, r->buckets * sizeof *r->hist);
    memset(small, 0, SMALL_KEYS * sizeof *small);
    for (uint64_t i = 0; i < n; i++, row += stride) {
        uint32_t key = key_at(keys, row);
        if (key == 0)
            continue;
        r->hist[key >> shift]++;
        small[key < SMALL_KEYS - 1 ? key : SMALL_KEYS - 1]++;
    }
}

/* The digit d where the running count from the top first reaches `want`;
 * *above = keys in digits above d. */
static uint32_t find_digit(const radix *r, uint64_t want, uint64_t *above)
{
    uint64_t acc = 0;
    for (uint32_t d = r->buckets; d-- > 0;) {
        if (acc + r->hist[d] >= want) {
            *above = acc;
            return d;
        }
        acc += r->hist[d];
    }
    *above = acc;
    return 0;
}

/* The k-th largest non-zero key (k < non-zero keys), digit by digit from
 * the top; r->hist holds the top digit's histogram already. *ties = how
 * many keys equal to it to take. */
static uint32_t kth_key(const cpr_emb *t, uint32_t shard, keyset keys, const radix *r,
                        uint64_t k, uint64_t *ties)
{
    uint32_t prefix = 0;
    uint64_t want = k;
    int top = 32 - (int)r->bits;
    for (int shift = top; shift >= 0; shift -= (int)r->bits) {
        uint64_t above = 0;
        if (shift != top)
            histogram(t, shard, keys, r, (unsigned)shift, prefix);
        uint32_t d = find_digit(r, want, &above);
        prefix = (prefix << r->bits) | d;
        want -= above;
    }
    *ties = want;
    return prefix;
}

cpr_status cpri_emb_topk(const cpr_emb *t, uint32_t shard, const void *key_base, size_t key_stride,
                         uint64_t k, uint64_t *ids, size_t *n_out)
{
    keyset keys = {key_base, key_stride};
    uint64_t narrow[1u << NARROW_BITS], small[SMALL_KEYS];
    uint64_t n = cpri_emb_geom_shard_rows(t, shard), row = cpri_emb_geom_first(t, shard);
    uint64_t stride = cpri_emb_geom_stride(t), nonzero = 0, threshold = 1, ties = UINT64_MAX;
    radix r = {NARROW_BITS, 1u << NARROW_BITS, narrow};
    size_t out = 0;
    if (k == 0) {
        *n_out = 0;
        return CPR_OK;
    }
    if (n >= WIDE_MIN_ROWS) {
        r = (radix){WIDE_BITS, 1u << WIDE_BITS, malloc(((size_t)1 << WIDE_BITS) * sizeof(uint64_t))};
        if (!r.hist)
            return cpr_fail(CPR_NO_MEMORY, "out of memory for selection histograms");
    }
    first_pass(t, shard, keys, &r, small);
    for (uint32_t d = 0; d < r.buckets; d++)
        nonzero += r.hist[d];
    if (nonzero > k && small[SMALL_KEYS - 1] < k) { /* the k-th largest key is small */
        radix exact = {0, SMALL_KEYS, small};
        uint64_t above = 0;
        threshold = find_digit(&exact, k, &above);
        ties = k - above;
    } else if (nonzero > k) { /* find the k-th largest key: threshold, and how many ties */
        threshold = kth_key(t, shard, keys, &r, k, &ties);
    }
    for (uint64_t i = 0; i < n && out < k; i++, row += stride) {
        uint32_t key = key_at(keys, row);
        if (key > threshold) {
            ids[out++] = row;
        } else if (key == threshold && key != 0 && ties > 0) { /* lower ids first */
            ids[out++] = row;
            ties--;
        }
    }
    if (r.hist != narrow)
        free(r.hist);
    *n_out = out;
    return CPR_OK;
}

/* ---- sorting ids ------------------------------------------------------------------- */

#define SORT_BITS_MAX 11
/* Below this many ids, 8-bit digits: clearing and summing 2048 buckets a
 * pass costs more than a few thousand ids. */
#define SORT_WIDE_MIN 32768

void cpri_emb_sort_ids(uint64_t *a, uint64_t *tmp, size_t n, uint64_t max_id)
{
    size_t count[(1u << SORT_BITS_MAX) + 1];
    unsigned digit = n < SORT_WIDE_MIN ? 8 : SORT_BITS_MAX, bits = 1;
    if (n < 2)
        return; /* sorted; tmp may be NULL */
    while (bits < 64 && max_id >> bits)
        bits++;
    uint64_t *src = a, *dst = tmp, mask = (1u << digit) - 1;
    for (unsigned shift = 0; shift < bits; shift += digit) {
        memset(count, 0, (mask + 2) * sizeof *count);
        for (size_t i = 0; i < n; i++)
            count[((src[i] >> shift) & mask) + 1]++;
        for (unsigned d = 0; d <= mask; d++)
            count[d + 1] += count[d];
        for (size_t i = 0; i < n; i++)
            dst[count[(src[i] >> shift) & mask]++] = src[i];
        uint64_t *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != a)
        memcpy(a, src, n * sizeof *a);
}
