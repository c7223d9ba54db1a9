/* SPDX-License-Identifier: Apache-2.0 */
/* Radix top-k selection (see emb_select.h). */
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "emb_select.h"

#define BUCKETS 65536

static uint32_t key_at(const void *keys, uint64_t row)
{
    uint32_t key;
    memcpy(&key, (const unsigned char *)keys + row * 4, 4);
    return key;
}

/* Count, per 16-bit digit, the shard's non-zero keys whose high half is
 * `hi` (or every key when hi < 0). */
static void histogram(const cpr_emb *t, uint32_t shard, const void *keys, long hi,
                      uint64_t *hist)
{
    uint64_t n = cpr_emb_geom_shard_rows(t, shard), row = cpr_emb_geom_first(t, shard);
    uint64_t stride = cpr_emb_geom_stride(t);
    memset(hist, 0, BUCKETS * sizeof *hist);
    for (uint64_t i = 0; i < n; i++, row += stride) {
        uint32_t key = key_at(keys, row);
        if (key == 0)
            continue;
        if (hi < 0)
            hist[key >> 16]++;
        else if ((long)(key >> 16) == hi)
            hist[key & 0xffff]++;
    }
}

/* The digit d where the running count from the top first reaches `want`;
 * *above = keys in digits above d. */
static uint32_t find_digit(const uint64_t *hist, uint64_t want, uint64_t *above)
{
    uint64_t acc = 0;
    for (uint32_t d = BUCKETS; d-- > 0;) {
        if (acc + hist[d] >= want) {
            *above = acc;
            return d;
        }
        acc += hist[d];
    }
    *above = acc;
    return 0;
}

cpr_status cpr_emb_topk(const cpr_emb *t, uint32_t shard, const void *keys, uint64_t k,
                        uint64_t *ids, size_t *n_out)
{
    uint64_t *hist = malloc(BUCKETS * sizeof *hist);
    uint64_t nonzero = 0, above_hi = 0, above_lo = 0, threshold = 1, ties = UINT64_MAX;
    uint64_t n = cpr_emb_geom_shard_rows(t, shard), row = cpr_emb_geom_first(t, shard);
    uint64_t stride = cpr_emb_geom_stride(t);
    size_t out = 0;
    if (!hist)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for selection histograms");
    if (k == 0) {
        free(hist);
        *n_out = 0;
        return CPR_OK;
    }
    histogram(t, shard, keys, -1, hist);
    for (uint32_t d = 0; d < BUCKETS; d++)
        nonzero += hist[d];
    if (nonzero > k) { /* find the k-th largest key: threshold, and how many ties to take */
        uint32_t hi = find_digit(hist, k, &above_hi);
        histogram(t, shard, keys, hi, hist);
        uint32_t lo = find_digit(hist, k - above_hi, &above_lo);
        threshold = (uint64_t)hi << 16 | lo;
        ties = k - above_hi - above_lo;
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
    free(hist);
    *n_out = out;
    return CPR_OK;
}
