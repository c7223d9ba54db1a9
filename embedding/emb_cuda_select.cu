/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA backend of the embedding module, part 2: stats, row selection, the
 * save protocol (begin, gather, commit/abort), apply and wipe_shard, with the
 * semantics of emb_cpu.c (see emb_cuda.cu for part 1 and the overall design).
 *
 * Selection runs over the shard's rows on the device: DELTA compacts the
 * dirty rows (CUB DeviceSelect, order kept); MFU and TOPK_NORM compact the
 * rows with a non-zero key into words key << shift | (n - 1 - index),
 * radix-sort those descending on their low shift + bits(largest key) bits
 * (equal keys in ascending row order: ties toward lower ids), keep the
 * first min(budget, non-zero keys) and sort their indices ascending. The SSU
 * sample is host state shared with the CPU backend (emb_ssu.c). Rows cross to and from the host through a pinned staging
 * buffer in chunks, on the table's stream; every call has completed when it
 * returns.
 */
#include <stdlib.h>
#include <string.h>

#include <cub/cub.cuh>

#include "emb_cuda_internal.cuh"

/* ---- device helpers ----------------------------------------------------------------- */

/* *p -= min(v, *p), atomically (emb_cpu.c clamps the same way). */
static __device__ void sub_clamped(ull *p, ull v)
{
    ull old = *p, assumed;
    do {
        assumed = old;
        old = atomicCAS(p, assumed, assumed - (v < assumed ? v : assumed));
    } while (old != assumed);
}

static __global__ void sub_clamped_kernel(ull *p, ull v)
{
    sub_clamped(p, v);
}

/* ---- stats ------------------------------------------------------------------------- */

/* out[0] += dirty rows, out[1] += rows with a non-zero count, over rows
 * first + i * stride, i < n. The loop is block-uniform for __syncthreads_count. */
static __global__ void stats_kernel(const ull *dirty, const uint32_t *counts, uint64_t first,
                                    uint64_t stride, uint64_t n, ull *out)
{
    for (uint64_t base = blockIdx.x * (uint64_t)blockDim.x; base < n;
         base += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t i = base + threadIdx.x, row = first + i * stride;
        int d = __syncthreads_count(i < n && dirty && BIT_GET(dirty, row));
        int c = __syncthreads_count(i < n && counts && counts[row] != 0);
        if (threadIdx.x == 0) {
            atomicAdd(&out[0], (ull)d);
            atomicAdd(&out[1], (ull)c);
        }
    }
}

extern "C" cpr_status cpri_emb_cuda_stats(const cpr_emb *t, uint32_t shard, cpr_emb_stats *out)
{
    emb_cuda_table *b = CUDA_T(t);
    uint64_t n = cpri_emb_geom_shard_rows(t, shard);
    ull *host = b->pinned_small, *dev = NULL;
    emb_scratch_part parts[] = {{(void **)&dev, 2 * sizeof(ull)}};
    cpr_emb_stats s;
    cpr_status st = CPR_OK;
    memset(&s, 0, sizeof s);
    CHECK(cudaSetDevice(b->device));
    st = emb_scratch_get(b, parts, 1);
    if (st)
        goto out;
    CHECK(cudaMemsetAsync(dev, 0, 2 * sizeof(ull), b->stream));
    if (b->dirty || b->counts) {
        stats_kernel<<<emb_blocks(n, 256), 256, 0, b->stream>>>(
            b->dirty, b->counts, cpri_emb_geom_first(t, shard), cpri_emb_geom_stride(t), n, dev);
        CHECK_LAUNCH();
    }
    CHECK(cudaMemcpyAsync(host, dev, 2 * sizeof(ull), cudaMemcpyDeviceToHost, b->stream));
    CHECK(cudaMemcpyAsync(host + 2, &b->shards_dev[shard], sizeof(emb_shard_dev),
                          cudaMemcpyDeviceToHost, b->stream));
    CHECK(cudaStreamSynchronize(b->stream));
    s.dirty_rows = host[0];
    s.touched_rows = host[1];
    s.update_events = host[2];
    s.unsaved_events = host[3];
    s.sampled_rows = cpri_emb_ssu_count(&b->ssu, shard);
    s.open_saves = b->shards[shard].open_saves;
    *out = s;
out:
    return st;
}

/* ---- selection --------------------------------------------------------------------- */

/* rows[i] = i-th row of the shard; flags[i] = its dirty bit. */
static __global__ void dirty_flags_kernel(const ull *dirty, uint64_t first, uint64_t stride,
                                          uint64_t n, uint64_t *rows, uint8_t *flags)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t row = first + i * stride;
        rows[i] = row;
        flags[i] = (uint8_t)BIT_GET(dirty, row);
    }
}

/* DELTA: every dirty row of the shard, ascending; more than `cap` is an error. */
static cpr_status select_delta(cpr_emb *t, emb_cuda_table *b, uint32_t shard, uint64_t *ids,
                               size_t cap, size_t *count)
{
    uint64_t n = cpri_emb_geom_shard_rows(t, shard);
    uint64_t *rows = NULL, *selected = NULL;
    uint8_t *flags = NULL;
    int64_t *num = NULL;
    void *temp = NULL;
    size_t temp_bytes = 0;
    ull found;
    cpr_status st = CPR_OK;
    CHECK(cub::DeviceSelect::Flagged(NULL, temp_bytes, rows, flags, selected, num, (int64_t)n,
                                     b->stream));
    {
        emb_scratch_part parts[] = {{(void **)&rows, n * 8}, {(void **)&selected, n * 8},
                                    {(void **)&flags, n}, {(void **)&num, 8},
                                    {&temp, temp_bytes}};
        st = emb_scratch_get(b, parts, 5);
        if (st)
            goto out;
    }
    dirty_flags_kernel<<<emb_blocks(n, 256), 256, 0, b->stream>>>(
        b->dirty, cpri_emb_geom_first(t, shard), cpri_emb_geom_stride(t), n, rows, flags);
    CHECK_LAUNCH();
    CHECK(cub::DeviceSelect::Flagged(temp, temp_bytes, rows, flags, selected, num, (int64_t)n,
                                     b->stream));
    CHECK(cudaMemcpyAsync(b->pinned_small, num, 8, cudaMemcpyDeviceToHost, b->stream));
    CHECK(cudaStreamSynchronize(b->stream));
    found = b->pinned_small[0];
    if (found > cap) {
        st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "more dirty rows than the %zu the buffer holds",
                      cap);
        goto out;
    }
    if (found) {
        CHECK(cudaMemcpyAsync(ids, selected, found * sizeof *ids, cudaMemcpyDeviceToHost,
                              b->stream));
        CHECK(cudaStreamSynchronize(b->stream));
    }
    *count = (size_t)found;
out:
    return st;
}

/* The shard's rows with a non-zero key, compacted: out[j] = key << shift |
 * (n - 1 - i) for the i-th shard row (n <= 2^shift), in no particular order
 * (one atomicAdd and one atomicMax per block and round); *count = how
 * many, *max_key = the largest key. A
 * descending sort of these orders by key, and equal keys by ascending i:
 * ties toward lower ids. The sort needs only the low shift + bits(max_key)
 * bits: for a shard of 50 K rows and counts below 256, 24 of 64 (three
 * radix passes instead of eight). */
#define COMPACT_THREADS 256
static __global__ void topk_compact_kernel(const uint32_t *source, uint64_t first,
                                           uint64_t stride, uint64_t n, unsigned shift,
                                           uint64_t *out, ull *count, unsigned *max_key)
{
    /* Per block: each warp's count and largest key, then one atomic of each
     * for the block (a warp's each made 2 x 312 K atomics on two words at
     * 10 M rows). */
    __shared__ unsigned warp_n[COMPACT_THREADS / 32], warp_top[COMPACT_THREADS / 32];
    __shared__ ull block_at;
    unsigned lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    for (uint64_t base = blockIdx.x * (uint64_t)blockDim.x; base < n;
         base += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t i = base + threadIdx.x;
        uint32_t key = i < n ? source[first + i * stride] : 0;
        unsigned mask = __ballot_sync(0xffffffffu, key != 0), top = key;
        for (int o = 16; o > 0; o /= 2) {
            unsigned other = __shfl_down_sync(0xffffffffu, top, o);
            top = other > top ? other : top;
        }
        if (lane == 0) {
            warp_n[warp] = (unsigned)__popc(mask);
            warp_top[warp] = top;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned total = 0, block_top = 0;
            for (unsigned w = 0; w < blockDim.x / 32; w++) {
                unsigned c = warp_n[w];
                warp_n[w] = total; /* the warp's offset in the block */
                total += c;
                block_top = warp_top[w] > block_top ? warp_top[w] : block_top;
            }
            block_at = total ? atomicAdd(count, (ull)total) : 0;
            if (block_top)
                atomicMax(max_key, block_top);
        }
        __syncthreads();
        if (key)
            out[block_at + warp_n[warp] + __popc(mask & ((1u << lane) - 1))] =
                (uint64_t)key << shift | (n - 1 - i);
        __syncthreads(); /* warp_n and block_at are rewritten next round */
    }
}

/* idx[j] = the shard-row index of sorted[j] (topk_compact_kernel's low bits). */
static __global__ void topk_index_kernel(const uint64_t *sorted, uint64_t take, uint64_t n,
                                         unsigned shift, uint32_t *idx)
{
    uint64_t low = shift < 64 ? ((uint64_t)1 << shift) - 1 : ~(uint64_t)0;
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < take;
         j += (uint64_t)gridDim.x * blockDim.x)
        idx[j] = (uint32_t)(n - 1 - (sorted[j] & low));
}

/* Bits needed for values up to v (0 for 0). */
static unsigned bit_len(uint64_t v)
{
    unsigned b = 0;
    while (v) {
        b++;
        v >>= 1;
    }
    return b;
}

typedef struct topk_scratch {
    uint64_t *pairs_in, *pairs_out; /* topk_compact_kernel's words */
    uint32_t *idx_in, *idx_out;
    ull *count;             /* count, then the largest key (as an unsigned) */
    void *temp;
    size_t temp_bytes;
} topk_scratch;

/* Room for all n rows of a shard (the temporary storage CUB asks for n
 * items, enough for fewer). */
static cpr_status topk_scratch_get(emb_cuda_table *b, uint64_t n, topk_scratch *s)
{
    size_t bytes[2] = {0, 0};
    cpr_status st = CPR_OK;
    memset(s, 0, sizeof *s);
    CHECK(cub::DeviceRadixSort::SortKeysDescending(NULL, bytes[0], s->pairs_in, s->pairs_out,
                                                   (int)n, 0, 64, b->stream));
    CHECK(cub::DeviceRadixSort::SortKeys(NULL, bytes[1], s->idx_in, s->idx_out, (int)n, 0, 32,
                                         b->stream));
    s->temp_bytes = bytes[0] > bytes[1] ? bytes[0] : bytes[1];
    {
        emb_scratch_part parts[] = {{(void **)&s->pairs_in, n * 8}, {(void **)&s->pairs_out, n * 8},
                                    {(void **)&s->idx_in, n * 4},   {(void **)&s->idx_out, n * 4},
                                    {(void **)&s->count, 16},       {&s->temp, s->temp_bytes}};
        st = emb_scratch_get(b, parts, 6);
    }
out:
    return st;
}

/* MFU / TOPK_NORM: the rows with the largest non-zero keys, at most k, ties
 * toward lower ids, ascending (as emb_select.c's cpri_emb_topk). Only the
 * rows with a non-zero key are sorted: a save's interval touches a small
 * part of a large shard, and sorting all 10 M rows' pairs took most of a
 * 47 K-row MFU save's 0.5 ms selection on an H200. */
static cpr_status select_topk(cpr_emb *t, emb_cuda_table *b, uint32_t shard,
                              const uint32_t *source, uint64_t k, uint64_t *ids, size_t *count)
{
    uint64_t n = cpri_emb_geom_shard_rows(t, shard), first = cpri_emb_geom_first(t, shard);
    uint64_t stride = cpri_emb_geom_stride(t), nonzero, take;
    unsigned shift = bit_len(n - 1), key_bits, *max_key;
    uint32_t *picked = NULL, *heap = NULL;
    topk_scratch s;
    cpr_status st = CPR_OK;
    if (k == 0 || n == 0) {
        *count = 0;
        return CPR_OK;
    }
    st = topk_scratch_get(b, n, &s);
    if (st)
        goto out;
    max_key = (unsigned *)(s.count + 1);
    CHECK(cudaMemsetAsync(s.count, 0, 2 * sizeof(ull), b->stream));
    topk_compact_kernel<<<emb_blocks(n, COMPACT_THREADS), COMPACT_THREADS, 0, b->stream>>>(
        source, first, stride, n, shift, s.pairs_in, s.count, max_key);
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(b->pinned_small, s.count, 2 * sizeof(ull), cudaMemcpyDeviceToHost,
                          b->stream));
    CHECK(cudaStreamSynchronize(b->stream));
    nonzero = b->pinned_small[0];
    key_bits = bit_len((uint32_t)b->pinned_small[1]);
    take = nonzero < k ? nonzero : k;
    if (take) {
        /* The picked indexes land in the table's pinned staging (a copy to
         * pageable memory goes through the driver's own, synchronously). */
        if (emb_pinned_get(b, take * sizeof *picked) == CPR_OK &&
            b->pinned_bytes >= take * sizeof *picked) {
            picked = (uint32_t *)b->pinned;
        } else {
            picked = heap = (uint32_t *)malloc(take * sizeof *picked);
        }
        if (!picked) {
            st = cpr_fail(CPR_NO_MEMORY, "out of memory selecting %llu rows",
                          (unsigned long long)take);
            goto out;
        }
        CHECK(cub::DeviceRadixSort::SortKeysDescending(s.temp, s.temp_bytes, s.pairs_in,
                                                       s.pairs_out, (int)nonzero, 0,
                                                       (int)(shift + key_bits), b->stream));
        topk_index_kernel<<<emb_blocks(take, 256), 256, 0, b->stream>>>(s.pairs_out, take, n,
                                                                        shift, s.idx_in);
        CHECK_LAUNCH();
        CHECK(cub::DeviceRadixSort::SortKeys(s.temp, s.temp_bytes, s.idx_in, s.idx_out,
                                             (int)take, 0, (int)(shift ? shift : 1), b->stream));
        CHECK(cudaMemcpyAsync(picked, s.idx_out, take * sizeof *picked, cudaMemcpyDeviceToHost,
                              b->stream));
        CHECK(cudaStreamSynchronize(b->stream));
        for (uint64_t i = 0; i < take; i++)
            ids[i] = first + picked[i] * stride;
    }
    *count = (size_t)take;
out:
    free(heap);
    return st;
}

extern "C" cpr_status cpri_emb_cuda_select(cpr_emb *t, uint32_t shard, cpr_policy policy,
                                          uint64_t budget_rows, uint64_t *ids, size_t cap,
                                          size_t *n)
{
    emb_cuda_table *b = CUDA_T(t);
    uint64_t rows = cpri_emb_geom_shard_rows(t, shard);
    uint64_t k = budget_rows < cap ? budget_rows : cap;
    size_t count = 0;
    cpr_status st = CPR_OK;
    CHECK(cudaSetDevice(b->device));
    switch (policy) {
    case CPR_POLICY_FULL: { /* as emb_cpu.c: a call per row took 23 ms at 10 M rows */
        uint64_t row = cpri_emb_geom_first(t, shard), stride = cpri_emb_geom_stride(t);
        for (uint64_t i = 0; i < rows; i++, row += stride)
            ids[i] = row;
        count = rows;
        break;
    }
    case CPR_POLICY_DELTA:
        st = select_delta(t, b, shard, ids, cap, &count);
        break;
    case CPR_POLICY_MFU:
        st = select_topk(t, b, shard, b->counts, k, ids, &count);
        break;
    case CPR_POLICY_TOPK_NORM: /* non-negative floats order like their bits */
        st = select_topk(t, b, shard, (const uint32_t *)b->norm, k, ids, &count);
        break;
    case CPR_POLICY_SSU:
        count = cpri_emb_ssu_select(&b->ssu, shard, k, ids, cap);
        break;
    }
    if (st == CPR_OK)
        *n = count;
out:
    return st;
}

/* ---- saves --------------------------------------------------------------------------- */

static int consistent_policy(cpr_policy policy)
{
    return policy == CPR_POLICY_FULL || policy == CPR_POLICY_DELTA;
}

EMB_HIDDEN void emb_free_pending(emb_cuda_table *b, emb_pending *p)
{
    /* Stream-ordered frees: no wait for the device here (G1). */
    void *dev[] = {p->d_snap, p->d_ids}; /* d_ids heads the other arrays (pending_alloc) */
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i])
            cudaFreeAsync(dev[i], b->stream);
    free(p->h_snap);
    free(p->sampled);
    free(p);
}

/* Move the ids' tracker values into the pending arrays; *count_sum += the
 * counts moved. Ids are distinct (strictly ascending), so rows do not race. */
static __global__ void save_begin_kernel(const uint64_t *ids, size_t n, uint32_t *counts,
                                         float *norm, ull *dirty, uint32_t *p_counts,
                                         float *p_norm, uint8_t *p_dirty, ull *count_sum)
{
    ull sum = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t row = ids[i];
        if (p_counts) {
            p_counts[i] = counts[row];
            sum += counts[row];
            counts[row] = 0;
        }
        if (p_norm) {
            p_norm[i] = norm[row];
            norm[row] = 0.0f;
        }
        if (p_dirty) {
            ull mask = 1ull << (row & 63);
            p_dirty[i] = (atomicAnd(&dirty[row >> 6], ~mask) & mask) != 0;
        }
    }
    for (int off = 16; off > 0; off /= 2) /* every lane gets here: blockDim % 32 == 0 */
        sum += __shfl_down_sync(0xffffffffu, sum, off);
    if ((threadIdx.x & 31) == 0 && sum)
        atomicAdd(count_sum, sum);
}

/* ids[i] = first + i * stride: a shard's rows in order. */
static __global__ void shard_rows_kernel(uint64_t *ids, size_t n, uint64_t first, uint64_t stride)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        ids[i] = first + i * stride;
}

static cpr_status pending_alloc(emb_cuda_table *b, const cpr_emb_save *save,
                                emb_pending **out)
{
    size_t n = save->n;
    int cons = consistent_policy(save->policy);
    cpr_status st = CPR_OK;
    emb_pending *p = (emb_pending *)calloc(1, sizeof *p);
    if (!p)
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting a save");
    if (n) { /* as emb_cpu.c: an empty save has no pending arrays */
        /* One allocation for the ids and the trackers moved aside (a call
         * each cost a shard's save about 4 us of the stall): ids (8-byte),
         * then counts and norms (4-byte), then dirty bytes. */
        size_t at_counts = n * sizeof(uint64_t);
        size_t at_norm = at_counts + (b->counts ? n * sizeof(uint32_t) : 0);
        size_t at_dirty = at_norm + (b->norm ? n * sizeof(float) : 0);
        size_t total = at_dirty + (b->dirty && cons ? n : 0);
        char *base = NULL;
        CHECK(cudaMallocAsync((void **)&base, total, b->stream));
        p->d_ids = (uint64_t *)base;
        p->d_counts = b->counts ? (uint32_t *)(base + at_counts) : NULL;
        p->d_norm = b->norm ? (float *)(base + at_norm) : NULL;
        p->d_dirty = b->dirty && cons ? (uint8_t *)(base + at_dirty) : NULL;
        if (b->ssu.member)
            p->sampled = (uint8_t *)calloc(n, 1);
        if (b->ssu.member && !p->sampled) {
            st = cpr_fail(CPR_NO_MEMORY, "out of memory starting a save of %zu rows", n);
            goto out;
        }
    }
out:
    if (st)
        emb_free_pending(b, p);
    else
        *out = p;
    return st;
}

/* Rows ids[0..n) into vals (n x dim) and state (n x sd). One block per row. */
static __global__ void gather_kernel(const uint64_t *ids, size_t n, const float *weights,
                                     const float *state, uint32_t dim, uint32_t sd, float *vals,
                                     float *state_out)
{
    for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
        uint64_t row = ids[i];
        for (uint32_t j = threadIdx.x; j < dim; j += blockDim.x)
            vals[i * dim + j] = weights[row * dim + j];
        for (uint32_t j = threadIdx.x; j < sd; j += blockDim.x)
            state_out[i * sd + j] = state[row * sd + j];
    }
}

/* Rows ids[0..n) (device ids) as they are now into host values (n x dim) and
 * state (n x sd), through the table's pinned staging, on the table's stream:
 * a training-thread call. */
static cpr_status gather_to_host(const cpr_emb *t, emb_cuda_table *b, const uint64_t *d_ids,
                                 size_t n, float *values, float *state)
{
    uint32_t dim = t->cfg.dim, sd = t->state_dim;
    size_t row_bytes = ((size_t)dim + sd) * sizeof(float);
    size_t chunk = EMB_STAGING_BYTES / row_bytes < n ? EMB_STAGING_BYTES / row_bytes : n;
    float *dev = NULL, *host;
    emb_scratch_part parts[] = {{(void **)&dev, chunk * row_bytes}};
    cpr_status st = emb_pinned_get(b, chunk * row_bytes);
    if (!st) {
        st = emb_scratch_get(b, parts, 1);
        /* This runs when the device is short of memory (the snapshot's own
         * allocation failed): gather in pieces that the scratch the table
         * already held fits (a smaller chunk: the pinned staging holds it). */
        size_t fits = b->scratch_bytes & ~(size_t)255; /* align_up stays within */
        if (st == CPR_NO_MEMORY && fits >= row_bytes && fits / row_bytes < chunk) {
            chunk = fits / row_bytes;
            parts[0].bytes = chunk * row_bytes;
            st = emb_scratch_get(b, parts, 1);
        }
    }
    if (st)
        goto out;
    host = (float *)b->pinned;
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        gather_kernel<<<emb_blocks(m, 1), emb_row_threads(dim), 0, b->stream>>>(
            d_ids + off, m, b->weights, b->state, dim, sd, dev, dev + m * dim);
        CHECK_LAUNCH();
        CHECK(cudaMemcpyAsync(host, dev, m * row_bytes, cudaMemcpyDeviceToHost, b->stream));
        CHECK(cudaStreamSynchronize(b->stream));
        memcpy(values + off * dim, host, m * dim * sizeof(float));
        if (sd)
            memcpy(state + off * sd, host + m * dim, m * sd * sizeof(float));
    }
out:
    return st;
}

/*
 * G1 (a CUDA save is a snapshot): save_begin gathers the save's rows, on the
 * table's stream, into p->d_snap before it returns, so every later update
 * (backward, apply, wipe: all on that stream) comes after the gather, and
 * d_snap is never written again. Copies out (cpri_emb_cuda_copy) read only
 * d_snap, on copy_stream, from any thread, and wait for their own copies;
 * the save ends (commit, abort, destroy) only after every copy returned
 * (cpr_emb_save_copy's contract), so freeing d_snap on the table's stream
 * races with nothing. When the device has no room for the snapshot, begin
 * copies the rows to host memory instead (h_snap): a longer stall, the same
 * snapshot.
 */
static cpr_status snapshot_rows(const cpr_emb *t, emb_cuda_table *b, emb_pending *p, size_t n)
{
    uint32_t dim = t->cfg.dim, sd = t->state_dim;
    size_t bytes = n * ((size_t)dim + sd) * sizeof(float);
    cpr_status st = CPR_OK;
    if (cudaMallocAsync((void **)&p->d_snap, bytes, b->stream) == cudaSuccess) {
        gather_kernel<<<emb_blocks(n, 1), emb_row_threads(dim), 0, b->stream>>>(
            p->d_ids, n, b->weights, b->state, dim, sd, p->d_snap, p->d_snap + n * dim);
        CHECK_LAUNCH();
        return CPR_OK;
    }
    cudaGetLastError(); /* out of device memory (or no pools): a host snapshot */
    p->d_snap = NULL;
    p->h_snap = (float *)malloc(bytes);
    if (!p->h_snap)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a snapshot of %zu rows (%zu bytes) "
                        "in device or host memory: save fewer rows", n, bytes);
    st = gather_to_host(t, b, p->d_ids, n, p->h_snap, p->h_snap + n * dim);
out:
    return st;
}

extern "C" cpr_status cpri_emb_cuda_save_begin(cpr_emb *t, cpr_emb_save *save)
{
    emb_cuda_table *b = CUDA_T(t);
    emb_shard_host *sc = &b->shards[save->shard];
    int cons = consistent_policy(save->policy);
    emb_pending *p = NULL;
    ull *sum_dev = NULL;
    emb_scratch_part parts[] = {{(void **)&sum_dev, sizeof(ull)}};
    cpr_status st = CPR_OK;
    if (cons && sc->open_consistent)
        return cpr_fail(CPR_FAILED_PRECONDITION, "shard %u already has an open FULL/DELTA "
                        "save; commit or abort it first", save->shard);
    CHECK(cudaSetDevice(b->device));
    st = pending_alloc(b, save, &p);
    if (st)
        goto out;
    if (save->n) {
        if (save->policy == CPR_POLICY_FULL &&
            save->n == cpri_emb_geom_shard_rows(t, save->shard)) {
            /* Strictly ascending rows of the shard (cpr_emb_save_begin checked),
             * as many as it has: its rows in order, written here rather than
             * copied from pageable memory (80 MB at 10 M rows). */
            shard_rows_kernel<<<emb_blocks(save->n, 256), 256, 0, b->stream>>>(
                p->d_ids, save->n, cpri_emb_geom_first(t, save->shard), cpri_emb_geom_stride(t));
            CHECK_LAUNCH();
        } else {
            CHECK(cudaMemcpyAsync(p->d_ids, save->ids, save->n * sizeof(uint64_t),
                                  cudaMemcpyHostToDevice, b->stream));
        }
        /* The snapshot before the trackers move: if it cannot be taken,
         * nothing of the table changed. Its host fallback uses the scratch
         * area, so the sum's place in it is taken after. */
        st = snapshot_rows(t, b, p, save->n);
        if (st)
            goto out;
    }
    st = emb_scratch_get(b, parts, 1);
    if (st)
        goto out;
    CHECK(cudaMemsetAsync(sum_dev, 0, sizeof(ull), b->stream));
    if (save->n) {
        save_begin_kernel<<<emb_blocks(save->n, 256), 256, 0, b->stream>>>(
            p->d_ids, save->n, b->counts, b->norm, b->dirty, p->d_counts, p->d_norm,
            p->d_dirty, sum_dev);
        CHECK_LAUNCH();
    }
    CHECK(cudaMemcpyAsync(b->pinned_small, sum_dev, sizeof(ull), cudaMemcpyDeviceToHost,
                          b->stream));
    CHECK(cudaMemcpyAsync(b->pinned_small + 1, &b->shards_dev[save->shard].unsaved,
                          sizeof(ull), cudaMemcpyDeviceToHost, b->stream));
    /* Held rows keep their place in the sample until commit. The hold is
     * host work: it runs while the device gathers, and is undone if the
     * device fails. */
    if (p->sampled)
        cpri_emb_ssu_hold(&b->ssu, save->shard, save->ids, save->n,
                          cpri_emb_save_whole_shard(t, save) ? cpri_emb_geom_stride(t) : 0,
                          p->sampled);
    {
        cudaError_t e = cudaStreamSynchronize(b->stream);
        if (e != cudaSuccess) {
            if (p->sampled)
                cpri_emb_ssu_end(&b->ssu, save->shard, save->ids, save->n, p->sampled, 0);
            CHECK(e);
        }
    }
    p->count_sum = b->pinned_small[0];
    p->unsaved_at_begin = b->pinned_small[1];
    p->save = save;
    p->next = b->open;
    b->open = p;
    save->backend = p;
    sc->open_saves++;
    sc->open_consistent |= cons;
out:
    if (st && p)
        emb_free_pending(b, p);
    return st;
}

/* Rows [first, first + k) of the save as they were at begin (G1), on any
 * thread: `release` changes nothing (the snapshot goes at the save's end). */
extern "C" cpr_status cpri_emb_cuda_copy(cpr_emb *t, const cpr_emb_save *save, size_t first,
                                        size_t k, float *values, float *state, int release)
{
    emb_cuda_table *b = CUDA_T(t);
    const emb_pending *p = (const emb_pending *)save->backend;
    uint32_t dim = t->cfg.dim, sd = t->state_dim;
    size_t n = save->n;
    cpr_status st = CPR_OK;
    (void)release;
    if (!p)
        return cpr_fail(CPR_FAILED_PRECONDITION, "gather of a save whose table state is gone");
    if (k == 0)
        return CPR_OK;
    if (p->h_snap) {
        memcpy(values, p->h_snap + first * dim, k * dim * sizeof(float));
        if (sd)
            memcpy(state, p->h_snap + n * dim + first * sd, k * sd * sizeof(float));
        return CPR_OK;
    }
    CHECK(cudaSetDevice(b->device)); /* per thread */
    CHECK(cudaMemcpyAsync(values, p->d_snap + first * dim, k * dim * sizeof(float),
                          cudaMemcpyDeviceToHost, b->copy_stream));
    if (sd)
        CHECK(cudaMemcpyAsync(state, p->d_snap + n * dim + first * sd, k * sd * sizeof(float),
                              cudaMemcpyDeviceToHost, b->copy_stream));
    CHECK(cudaStreamSynchronize(b->copy_stream));
out:
    if (st) { /* a failed copy: nothing queued may outlive it (the save may end) */
        cudaStreamSynchronize(b->copy_stream);
        cudaGetLastError();
    }
    return st;
}

/* Abort: the pending values go back to their rows (emb_cpu.c's restore_pending). */
static __global__ void restore_kernel(const uint64_t *ids, size_t n, uint32_t *counts, float *norm,
                                      ull *dirty, const uint32_t *p_counts, const float *p_norm,
                                      const uint8_t *p_dirty)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t row = ids[i];
        if (p_counts) {
            uint64_t c = (uint64_t)counts[row] + p_counts[i];
            counts[row] = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
        }
        if (p_norm)
            norm[row] = __fadd_rn(norm[row], p_norm[i]);
        if (p_dirty && p_dirty[i])
            atomicOr(&dirty[row >> 6], 1ull << (row & 63));
    }
}

static cpr_status save_end_device(emb_cuda_table *b, const cpr_emb_save *save,
                                  const emb_pending *p, int committed)
{
    cpr_status st = CPR_OK;
    ull saved;
    CHECK(cudaSetDevice(b->device));
    if (committed) {
        /* With counts, exactly the saved rows' events; without, a FULL or
         * DELTA save covers everything the shard had at begin. */
        saved = b->counts ? p->count_sum /* the table tracks counts */
                : consistent_policy(save->policy) ? p->unsaved_at_begin : 0;
        sub_clamped_kernel<<<1, 1, 0, b->stream>>>(&b->shards_dev[save->shard].unsaved, saved);
        CHECK_LAUNCH();
    } else if (save->n) {
        restore_kernel<<<emb_blocks(save->n, 256), 256, 0, b->stream>>>(
            p->d_ids, save->n, b->counts, b->norm, b->dirty, p->d_counts, p->d_norm, p->d_dirty);
        CHECK_LAUNCH();
    }
    CHECK(cudaStreamSynchronize(b->stream));
out:
    return st;
}

/* Cannot fail by contract: a CUDA error here is logged (the device is then
 * unusable anyway and the next call reports it). */
extern "C" void cpri_emb_cuda_save_end(cpr_emb *t, cpr_emb_save *save, int committed)
{
    emb_cuda_table *b = CUDA_T(t);
    emb_pending *p = (emb_pending *)save->backend;
    emb_shard_host *sc;
    if (!p)
        return; /* the table was destroyed first */
    for (emb_pending **pp = &b->open; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    sc = &b->shards[save->shard];
    if (!p->wiped && save_end_device(b, save, p, committed) != CPR_OK)
        cpri_log(CPR_LOG_ERROR, "embedding: ending a save of shard %u: %s", save->shard,
                cpr_errmsg());
    if (!p->wiped && p->sampled)
        cpri_emb_ssu_end(&b->ssu, save->shard, save->ids, save->n, p->sampled, committed);
    sc->open_saves--;
    if (consistent_policy(save->policy))
        sc->open_consistent = 0;
    emb_free_pending(b, p);
    save->backend = NULL;
}

/* ---- apply and wipe ----------------------------------------------------------------- */

/* The row now equals a stored copy: nothing about it is unsaved (device
 * trackers; the SSU sample is cleared on the host). Cleared counts collect
 * per shard in `cleared` and leave unsaved_events afterwards in one step per
 * shard (the same as emb_cpu.c's per-row clamped subtraction, since a
 * shard's unsaved events are never fewer than its rows' counts). */
static __device__ void clear_row_trackers(uint64_t row, uint32_t *counts, float *norm, ull *dirty,
                                          ull *cleared, emb_geom g)
{
    if (counts) {
        uint32_t c = counts[row];
        counts[row] = 0;
        if (c)
            atomicAdd(&cleared[emb_dev_shard_of(g, row)], (ull)c);
    }
    if (norm)
        norm[row] = 0.0f;
    if (dirty)
        atomicAnd(&dirty[row >> 6], ~(1ull << (row & 63)));
}

/* Write rows ids[0..n) from vals/state_in and clear their trackers. Ids are
 * distinct. One block per row. */
static __global__ void scatter_kernel(const uint64_t *ids, size_t n, const float *vals,
                                      const float *state_in, float *weights, float *state,
                                      uint32_t dim, uint32_t sd, uint32_t *counts, float *norm,
                                      ull *dirty, ull *cleared, emb_geom g)
{
    for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
        uint64_t row = ids[i];
        for (uint32_t j = threadIdx.x; j < dim; j += blockDim.x)
            weights[row * dim + j] = vals[i * dim + j];
        for (uint32_t j = threadIdx.x; j < sd; j += blockDim.x)
            state[row * sd + j] = state_in[i * sd + j];
        if (threadIdx.x == 0)
            clear_row_trackers(row, counts, norm, dirty, cleared, g);
    }
}

/* unsaved_events of every shard -= its cleared counts (clamped at 0). */
static __global__ void sub_cleared_kernel(emb_shard_dev *shards, const ull *cleared,
                                          uint32_t num_shards)
{
    for (uint64_t s = blockIdx.x * blockDim.x + threadIdx.x; s < num_shards;
         s += (uint64_t)gridDim.x * blockDim.x)
        if (cleared[s])
            sub_clamped(&shards[s].unsaved, cleared[s]);
}

typedef struct id_at {
    uint64_t id;
    size_t at;
} id_at;

static int id_at_cmp(const void *a, const void *b)
{
    const id_at *x = (const id_at *)a, *y = (const id_at *)b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* Positions of `ids` to write: all of them when they are strictly ascending
 * (*src NULL), else the last position of each distinct id (a repeated id
 * ends with its last values, as when emb_cpu.c writes them in order). */
static cpr_status apply_order(const uint64_t *ids, size_t n, size_t **src, size_t *m)
{
    id_at *pairs;
    size_t i = 1, kept = 0;
    while (i < n && ids[i - 1] < ids[i])
        i++;
    *src = NULL;
    *m = n;
    if (i >= n)
        return CPR_OK;
    pairs = (id_at *)malloc(n * sizeof *pairs);
    *src = (size_t *)malloc(n * sizeof **src);
    if (!pairs || !*src) {
        free(pairs);
        free(*src);
        *src = NULL;
        return cpr_fail(CPR_NO_MEMORY, "out of memory ordering %zu restored rows", n);
    }
    for (i = 0; i < n; i++) {
        pairs[i].id = ids[i];
        pairs[i].at = i;
    }
    qsort(pairs, n, sizeof *pairs, id_at_cmp);
    for (i = 0; i < n; i++)
        if (i + 1 == n || pairs[i + 1].id != pairs[i].id)
            (*src)[kept++] = pairs[i].at;
    free(pairs);
    *m = kept;
    return CPR_OK;
}

/* Fill the pinned staging with rows src[off..off+c) as [ids][values][state]. */
static void stage_rows(const cpr_emb *t, char *stage, const uint64_t *ids, const float *values,
                       const float *state, const size_t *src, size_t off, size_t c)
{
    uint32_t dim = t->cfg.dim, sd = t->state_dim;
    uint64_t *sid = (uint64_t *)stage;
    float *sval = (float *)(stage + c * sizeof(uint64_t)), *sst = sval + c * dim;
    for (size_t i = 0; i < c; i++) {
        size_t k = src ? src[off + i] : off + i;
        sid[i] = ids[k];
        memcpy(sval + i * dim, values + k * dim, dim * sizeof(float));
        if (sd)
            memcpy(sst + i * sd, state + k * sd, sd * sizeof(float));
    }
}

extern "C" cpr_status cpri_emb_cuda_apply(cpr_emb *t, const uint64_t *ids, size_t n,
                                         const float *values, const float *state)
{
    emb_cuda_table *b = CUDA_T(t);
    uint32_t dim = t->cfg.dim, sd = t->state_dim;
    size_t row_bytes = sizeof(uint64_t) + ((size_t)dim + sd) * sizeof(float);
    size_t chunk = EMB_STAGING_BYTES / row_bytes < n ? EMB_STAGING_BYTES / row_bytes : n;
    size_t m = 0, *src = NULL;
    uint32_t shards = t->cfg.num_shards;
    char *dev = NULL;
    ull *cleared = NULL;
    emb_scratch_part parts[] = {{(void **)&dev, chunk * row_bytes},
                                {(void **)&cleared, shards * sizeof(ull)}};
    cpr_status st = CPR_OK;
    if (n == 0)
        return CPR_OK;
    CHECK(cudaSetDevice(b->device));
    st = apply_order(ids, n, &src, &m);
    if (!st)
        st = emb_pinned_get(b, chunk * row_bytes);
    if (!st)
        st = emb_scratch_get(b, parts, 2);
    if (st)
        goto out;
    CHECK(cudaMemsetAsync(cleared, 0, shards * sizeof(ull), b->stream));
    for (size_t off = 0; off < m; off += chunk) {
        size_t c = m - off < chunk ? m - off : chunk;
        float *dvals = (float *)(dev + c * sizeof(uint64_t));
        stage_rows(t, (char *)b->pinned, ids, values, state, src, off, c);
        CHECK(cudaMemcpyAsync(dev, b->pinned, c * row_bytes, cudaMemcpyHostToDevice,
                              b->stream));
        scatter_kernel<<<emb_blocks(c, 1), emb_row_threads(dim), 0, b->stream>>>(
            (const uint64_t *)dev, c, dvals, dvals + c * dim, b->weights, b->state, dim, sd,
            b->counts, b->norm, b->dirty, cleared, b->geom);
        CHECK_LAUNCH();
        CHECK(cudaStreamSynchronize(b->stream)); /* the staging buffer is reused */
    }
    if (b->counts) {
        sub_cleared_kernel<<<emb_blocks(shards, 256), 256, 0, b->stream>>>(b->shards_dev,
                                                                           cleared, shards);
        CHECK_LAUNCH();
        CHECK(cudaStreamSynchronize(b->stream));
    }
    if (b->ssu.member) {
        cpri_emb_ssu_forget(&b->ssu, t, ids, n);
        for (emb_pending *p = b->open; p; p = p->next)
            if (p->sampled)
                cpri_emb_ssu_unhold(p->sampled, p->save->ids, p->save->n, ids, n);
    }
out:
    free(src);
    return st;
}

/* Zero rows first + i * stride, i < n: values, state and trackers. */
static __global__ void wipe_kernel(uint64_t first, uint64_t stride, uint64_t n, float *weights,
                                   float *state, uint32_t dim, uint32_t sd, uint32_t *counts,
                                   float *norm, ull *dirty)
{
    for (uint64_t i = blockIdx.x; i < n; i += gridDim.x) {
        uint64_t row = first + i * stride;
        for (uint32_t j = threadIdx.x; j < dim; j += blockDim.x)
            weights[row * dim + j] = 0.0f;
        for (uint32_t j = threadIdx.x; j < sd; j += blockDim.x)
            state[row * sd + j] = 0.0f;
        if (threadIdx.x == 0) {
            if (counts)
                counts[row] = 0;
            if (norm)
                norm[row] = 0.0f;
            if (dirty)
                atomicAnd(&dirty[row >> 6], ~(1ull << (row & 63)));
        }
    }
}

extern "C" cpr_status cpri_emb_cuda_wipe_shard(cpr_emb *t, uint32_t shard, uint64_t *lost_events)
{
    emb_cuda_table *b = CUDA_T(t);
    uint64_t n = cpri_emb_geom_shard_rows(t, shard), lost;
    cpr_status st = CPR_OK;
    CHECK(cudaSetDevice(b->device));
    CHECK(cudaMemcpyAsync(b->pinned_small, &b->shards_dev[shard].unsaved, sizeof(ull),
                          cudaMemcpyDeviceToHost, b->stream));
    wipe_kernel<<<emb_blocks(n, 1), emb_row_threads(t->cfg.dim), 0, b->stream>>>(
        cpri_emb_geom_first(t, shard), cpri_emb_geom_stride(t), n, b->weights, b->state,
        t->cfg.dim, t->state_dim, b->counts, b->norm, b->dirty);
    CHECK_LAUNCH();
    CHECK(cudaMemsetAsync(&b->shards_dev[shard].unsaved, 0, sizeof(ull), b->stream));
    CHECK(cudaStreamSynchronize(b->stream));
    lost = b->pinned_small[0];
    for (emb_pending *p = b->open; p; p = p->next)
        if (p->save->shard == shard)
            p->wiped = 1;
    if (b->ssu.member)
        cpri_emb_ssu_clear_shard(&b->ssu, shard);
    if (lost_events)
        *lost_events = lost;
out:
    return st;
}
