/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Top-k row selection over a shard by a 32-bit key (MFU counts, or the bit
 * pattern of non-negative float norms, which orders like the floats), by
 * radix select: histogram passes find the k-th largest key digit by digit
 * (two 16-bit digits with 512 KiB of histograms for shards of 2^20 rows or
 * more; four 8-bit digits with 2 KiB on the stack below that), a last pass
 * collects the rows in ascending id order. The first pass also counts keys
 * below 1023 exactly: when the k-th largest key is one of them (MFU's counts
 * since the last save, nearly always), it is read off that histogram and the
 * selection takes two passes. O(rows) time, no per-row scratch,
 * deterministic (ties toward lower ids).
 */
#ifndef CPR_EMB_SELECT_H
#define CPR_EMB_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "emb_internal.h"

/* Rows of `shard` with the largest non-zero keys (32-bit values at
 * key_base + row * key_stride bytes, read with memcpy so floats may be
 * passed), at most k, ascending into ids (room for k); *n gets how many.
 * CPR_NO_MEMORY if the histograms cannot be had. */
cpr_status cpri_emb_topk(const cpr_emb *t, uint32_t shard, const void *key_base,
                         size_t key_stride, uint64_t k, uint64_t *ids, size_t *n);

/* Sort ids[0..n) (all at most max_id) ascending: LSD radix, tmp (n ids)
 * as scratch. O(n), no allocation; qsort took 1.2 ms for 47 K ids. */
void cpri_emb_sort_ids(uint64_t *ids, uint64_t *tmp, size_t n, uint64_t max_id);

#endif /* CPR_EMB_SELECT_H */
