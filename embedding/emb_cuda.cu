/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA backend of the embedding module, part 1: the table, forward and
 * backward (part 2, emb_cuda_select.cu: stats, selection, saves, apply,
 * wipe). It reproduces emb_cpu.c, the reference, operation for operation:
 * the same float operations in the same order (explicit _rn intrinsics, so
 * nvcc cannot contract them into FMAs), the same hashes for initial weights
 * and SSU sampling, the same tracker rules.
 *
 * Kernels. Batches are validated on the device first (one grid-stride pass
 * over indices and offsets; nothing is written before it passes). Forward:
 * one block per bag, threads over dim, each summing its bag in position
 * order. Backward: (row, position) pairs of every occurrence are radix-sorted
 * by row (CUB, stable, so each row's occurrences stay in position order),
 * run-length encoded into unique rows, and one block per unique row sums its
 * gradient, takes the optimizer step and updates that row's trackers; the
 * row-wise reductions (Adagrad's mean square, the update norm) run in one
 * thread in index order, as on the CPU. SSU decisions are made per
 * occurrence on the device; the rows sampled in a call come back to the host,
 * which keeps the sample exactly as emb_cpu.c does.
 *
 * All work runs on the table's own stream and has completed when a call
 * returns. Every CUDA call and launch is checked (CPR_CUDA with the
 * runtime's message). Cross-backend invariant: emb_dev_mix64,
 * emb_dev_init_value and emb_dev_sampled below must stay bit-identical to
 * cpri_emb_mix64, cpri_emb_init_value and cpri_emb_sampled in emb_internal.h.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cub/cub.cuh>

#include "emb_cuda_internal.cuh"

/* ---- device copies of the shared hashes (keep identical to emb_internal.h) ---- */

static __device__ __forceinline__ uint64_t emb_dev_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static __device__ __forceinline__ float emb_dev_init_value(uint64_t seed, uint64_t row, uint32_t j,
                                                           float scale)
{
    uint64_t h = emb_dev_mix64(emb_dev_mix64(seed ^ 0x5eedULL) ^ emb_dev_mix64(row) ^ j);
    double u = __dmul_rn((double)(h >> 11), 1.0 / 9007199254740992.0); /* [0, 1) */
    return __double2float_rn(__dmul_rn(__dadd_rn(__dmul_rn(2.0, u), -1.0), (double)scale));
}

static __device__ __forceinline__ int emb_dev_sampled(uint64_t seed, uint64_t call, uint64_t pos,
                                                      uint64_t threshold)
{
    return emb_dev_mix64(seed ^ emb_dev_mix64(call * 0x100000001b3ULL + pos)) < threshold;
}

/* ---- small host helpers --------------------------------------------------------- */

EMB_HIDDEN unsigned emb_blocks(uint64_t work, unsigned per_block)
{
    uint64_t blocks = (work + per_block - 1) / per_block;
    if (blocks == 0)
        blocks = 1;
    return blocks > EMB_MAX_BLOCKS ? EMB_MAX_BLOCKS : (unsigned)blocks;
}

/* Threads for a block that works on one row: a whole number of warps. */
EMB_HIDDEN unsigned emb_row_threads(uint32_t dim)
{
    unsigned threads = (dim + 31) / 32 * 32;
    return threads > 256 ? 256 : threads;
}

static size_t align_up(size_t bytes)
{
    return (bytes + 255) & ~(size_t)255;
}

/* Carve a call's temporaries out of the table's arena, growing it first if
 * it is too small (after the stream drained, since kernels may still use it). */
EMB_HIDDEN cpr_status emb_scratch_get(emb_cuda_table *b, emb_scratch_part *parts, int n)
{
    cpr_status st = CPR_OK;
    size_t total = 0, grown;
    char *cursor;
    for (int i = 0; i < n; i++)
        total += align_up(parts[i].bytes);
    if (total > b->scratch_bytes) {
        size_t old_bytes = b->scratch_bytes;
        grown = total + total / 4;
        CHECK(cudaStreamSynchronize(b->stream));
        CHECK(cudaFree(b->scratch));
        b->scratch = NULL;
        b->scratch_bytes = 0;
        if (cudaMalloc(&b->scratch, grown) != cudaSuccess) {
            cudaGetLastError();
            /* Keep what the table had, so that a caller that can work in
             * smaller pieces (gather_to_host) still has it. */
            b->scratch = NULL;
            if (old_bytes && cudaMalloc(&b->scratch, old_bytes) == cudaSuccess) {
                b->scratch_bytes = old_bytes;
            } else {
                cudaGetLastError();
                b->scratch = NULL;
            }
            return cpr_fail(CPR_NO_MEMORY, "out of device memory for %zu bytes of "
                            "temporaries", grown);
        }
        b->scratch_bytes = grown;
    }
    cursor = (char *)b->scratch;
    for (int i = 0; i < n; i++) {
        *parts[i].ptr = parts[i].bytes ? cursor : NULL;
        cursor += align_up(parts[i].bytes);
    }
out:
    return st;
}

/* Pinned staging of at least `bytes`, or of EMB_STAGING_BYTES when more is
 * asked (the caller checks pinned_bytes then, and goes without): grown by
 * doubling from EMB_STAGING_MIN_BYTES. Pinning is paid per page (a fixed
 * 32 MiB a table cost a partial recovery of 26 small tables about 0.8 GiB
 * of pinned memory and most of its time). A staging already at the most is
 * kept: asking above it must not unpin and pin the same size again. */
EMB_HIDDEN cpr_status emb_pinned_get(emb_cuda_table *b, size_t bytes)
{
    cpr_status st = CPR_OK;
    size_t cap = b->pinned_bytes ? b->pinned_bytes : EMB_STAGING_MIN_BYTES;
    if (bytes > EMB_STAGING_BYTES)
        bytes = EMB_STAGING_BYTES;
    if (b->pinned && b->pinned_bytes >= bytes)
        return CPR_OK;
    while (cap < bytes && cap < EMB_STAGING_BYTES)
        cap *= 2;
    cap = cap > EMB_STAGING_BYTES ? EMB_STAGING_BYTES : cap;
    if (b->pinned) {
        cudaFreeHost(b->pinned);
        b->pinned = NULL;
        b->pinned_bytes = 0;
    }
    CHECK(cudaMallocHost(&b->pinned, cap));
    b->pinned_bytes = cap;
out:
    return st;
}

/* cudaMalloc of `bytes` (none for 0), zeroed; out of memory is CPR_NO_MEMORY. */
static cpr_status dev_alloc_zero(emb_cuda_table *b, void **p, size_t bytes, const char *what)
{
    cpr_status st = CPR_OK;
    cudaError_t err;
    *p = NULL;
    if (bytes == 0)
        return CPR_OK;
    err = cudaMalloc(p, bytes);
    if (err != cudaSuccess) {
        cudaGetLastError();
        *p = NULL;
        return cpr_fail(err == cudaErrorMemoryAllocation ? CPR_NO_MEMORY : CPR_CUDA,
                        "cudaMalloc of %zu bytes for the %s failed: %s", bytes, what,
                        cudaGetErrorString(err));
    }
    CHECK(cudaMemsetAsync(*p, 0, bytes, b->stream));
out:
    return st;
}

/* ---- create / destroy ---------------------------------------------------------- */

static __global__ void init_weights_kernel(float *w, uint64_t rows, uint32_t dim, uint64_t seed,
                                           float scale)
{
    uint64_t n = rows * dim;
    for (uint64_t e = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; e < n;
         e += (uint64_t)gridDim.x * blockDim.x)
        w[e] = emb_dev_init_value(seed, e / dim, (uint32_t)(e % dim), scale);
}

/* A device that exists, or CPR_CUDA saying why not. */
static cpr_status check_device(int device)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky error */
        return cpr_fail(CPR_CUDA, "no CUDA device for a CUDA table: %s",
                        cudaGetErrorString(err));
    }
    if (device < 0 || device >= count)
        return cpr_fail(CPR_CUDA, "CUDA device %d does not exist (%d visible)", device, count);
    return CPR_OK;
}

static cpr_status alloc_device_arrays(cpr_emb *t, emb_cuda_table *b)
{
    const cpr_emb_config *c = &t->cfg;
    uint64_t words = (c->rows + 63) / 64;
    cpr_status st = CPR_OK;
    if (c->rows > SIZE_MAX / sizeof(float) / c->dim)
        return cpr_fail(CPR_NO_MEMORY, "a table of %llu x %u does not fit in memory",
                        (unsigned long long)c->rows, c->dim);
    st = dev_alloc_zero(b, (void **)&b->weights, c->rows * c->dim * sizeof(float), "weights");
    if (!st)
        st = dev_alloc_zero(b, (void **)&b->state, c->rows * t->state_dim * sizeof(float),
                            "optimizer state");
    if (!st && (c->track & CPR_TRACK_COUNTS))
        st = dev_alloc_zero(b, (void **)&b->counts, c->rows * sizeof(uint32_t), "counts");
    if (!st && (c->track & CPR_TRACK_DIRTY))
        st = dev_alloc_zero(b, (void **)&b->dirty, words * sizeof(ull), "dirty bitmap");
    if (!st && (c->track & CPR_TRACK_NORM))
        st = dev_alloc_zero(b, (void **)&b->norm, c->rows * sizeof(float), "norms");
    if (!st)
        st = dev_alloc_zero(b, (void **)&b->shards_dev, c->num_shards * sizeof(emb_shard_dev),
                            "shard counters");
    return st;
}

/* Saves allocate their snapshots and pending arrays from the device's
 * default memory pool, on the table's stream (emb_cuda_select.cu, G1). The
 * pool keeps up to one whole table's rows and state between saves, instead
 * of handing memory back at every synchronisation and mapping it again at
 * the next save (a FULL save's begin paid for that mapping). Best effort:
 * without pools the saves still work, at that cost. */
static void keep_snapshot_memory(const cpr_emb *t, const emb_cuda_table *b)
{
    cudaMemPool_t pool;
    uint64_t keep = t->cfg.rows * ((uint64_t)t->cfg.dim + t->state_dim) * sizeof(float), now = 0;
    if (cudaDeviceGetDefaultMemPool(&pool, b->device) == cudaSuccess &&
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &now) == cudaSuccess &&
        now < keep)
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    cudaGetLastError();
}

extern "C" cpr_status cpri_emb_cuda_create(cpr_emb *t)
{
    const cpr_emb_config *c = &t->cfg;
    emb_cuda_table *b = NULL;
    cpr_status st = check_device(c->cuda_device);
    if (st)
        return st;
    if (t->range_rows > INT32_MAX)
        return cpr_fail(CPR_INVALID_ARGUMENT, "CUDA tables hold at most 2^31-1 rows per "
                        "shard (%llu requested): use more shards",
                        (unsigned long long)t->range_rows);
    b = (emb_cuda_table *)calloc(1, sizeof *b);
    if (!b)
        return cpr_fail(CPR_NO_MEMORY, "out of memory creating a table");
    t->backend = b;
    pthread_mutex_init(&b->enc_mu, NULL);
    b->device = c->cuda_device;
    b->geom.range_rows = t->range_rows;
    b->geom.num_shards = c->num_shards;
    b->geom.modulo = c->scheme == CPR_SHARD_MODULO;
    b->shards = (emb_shard_host *)calloc(c->num_shards, sizeof *b->shards);
    if (!b->shards) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory creating a table");
        goto out;
    }
    st = cpri_emb_ssu_init(&b->ssu, (c->track & CPR_TRACK_SSU) != 0, c->rows, c->num_shards,
                          c->ssu_capacity);
    if (st)
        goto out;
    CHECK(cudaSetDevice(b->device));
    CHECK(cudaStreamCreate(&b->stream));
    CHECK(cudaStreamCreateWithFlags(&b->copy_stream, cudaStreamNonBlocking));
    keep_snapshot_memory(t, b);
    CHECK(cudaMallocHost(&b->pinned_small, 8 * sizeof(ull)));
    st = alloc_device_arrays(t, b);
    if (st)
        goto out;
    init_weights_kernel<<<emb_blocks(c->rows * c->dim, 256), 256, 0, b->stream>>>(
        b->weights, c->rows, c->dim, c->seed, c->init_scale);
    CHECK_LAUNCH();
    CHECK(cudaStreamSynchronize(b->stream));
out:
    if (st)
        cpri_emb_cuda_destroy(t);
    return st;
}

/* Frees what exists; errors cannot be reported here and are dropped. */
extern "C" void cpri_emb_cuda_destroy(cpr_emb *t)
{
    emb_cuda_table *b = CUDA_T(t);
    if (!b)
        return;
    cudaSetDevice(b->device);
    if (b->stream)
        cudaStreamSynchronize(b->stream);
    while (b->open) { /* open saves end with the table (cpr_emb_destroy) */
        emb_pending *p = b->open;
        b->open = p->next;
        free(p->save->ids);
        free(p->save);
        emb_free_pending(b, p);
    }
    cudaFree(b->weights);
    cudaFree(b->state);
    cudaFree(b->counts);
    cudaFree(b->dirty);
    cudaFree(b->norm);
    cudaFree(b->shards_dev);
    cudaFree(b->scratch);
    if (b->pinned_small)
        cudaFreeHost(b->pinned_small);
    if (b->pinned)
        cudaFreeHost(b->pinned);
    cudaFree(b->enc_dev);
    if (b->enc_flag)
        cudaFreeHost(b->enc_flag);
    pthread_mutex_destroy(&b->enc_mu);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    if (b->copy_stream)
        cudaStreamDestroy(b->copy_stream);
    cudaGetLastError(); /* leave no sticky error behind */
    cpri_emb_ssu_release(&b->ssu);
    free(b->shards);
    free(b);
    t->backend = NULL;
}

/* ---- batch validation ------------------------------------------------------------- */

/* check[0]: first bad index position; check[1]: first bad bag; check[2]:
 * offsets[0] (where the bags start). Bad ones stay ULLONG_MAX. */
static __global__ void validate_kernel(const int64_t *indices, size_t n_indices,
                                       const int64_t *offsets, size_t n_bags, uint64_t rows,
                                       ull *check)
{
    size_t n = n_indices > n_bags ? n_indices : n_bags;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (i < n_indices) {
            int64_t v = indices[i];
            if (v < 0 || (uint64_t)v >= rows)
                atomicMin(&check[0], (ull)i);
        }
        if (i < n_bags) {
            int64_t lo = offsets[i], hi = i + 1 < n_bags ? offsets[i + 1] : (int64_t)n_indices;
            if (lo < 0 || lo > hi || hi > (int64_t)n_indices)
                atomicMin(&check[1], (ull)i);
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0 && n_bags)
        check[2] = (ull)offsets[0];
}

/* Check a batch's device arrays before anything is written; *first is the
 * position where the bags start (positions before it belong to no bag). */
static cpr_status validate_batch(const cpr_emb *t, emb_cuda_table *b, const int64_t *indices,
                                 size_t n_indices, const int64_t *offsets, size_t n_bags,
                                 uint64_t *first)
{
    cpr_status st = CPR_OK;
    ull *check = b->pinned_small, *check_dev = NULL;
    int64_t bad_value = 0;
    emb_scratch_part parts[] = {{(void **)&check_dev, 3 * sizeof(ull)}};
    if (n_bags == 0 && n_indices)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%zu indices but no bags", n_indices);
    if (n_indices > INT32_MAX || n_bags > INT32_MAX)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a CUDA batch holds at most 2^31-1 indices "
                        "and bags (got %zu and %zu)", n_indices, n_bags);
    st = emb_scratch_get(b, parts, 1);
    if (st)
        goto out;
    CHECK(cudaMemsetAsync(check_dev, 0xff, 3 * sizeof(ull), b->stream));
    if (n_indices || n_bags) {
        size_t n = n_indices > n_bags ? n_indices : n_bags;
        validate_kernel<<<emb_blocks(n, 256), 256, 0, b->stream>>>(
            indices, n_indices, offsets, n_bags, t->cfg.rows, check_dev);
        CHECK_LAUNCH();
    }
    CHECK(cudaMemcpyAsync(check, check_dev, 3 * sizeof(ull), cudaMemcpyDeviceToHost,
                          b->stream));
    CHECK(cudaStreamSynchronize(b->stream));
    if (check[1] != ULLONG_MAX) {
        st = cpr_fail(CPR_INVALID_ARGUMENT, "offsets[%llu]: offsets must be non-decreasing "
                      "within [0, %zu]", check[1], n_indices);
        goto out;
    }
    if (check[0] != ULLONG_MAX) {
        CHECK(cudaMemcpy(&bad_value, indices + check[0], sizeof bad_value,
                         cudaMemcpyDeviceToHost));
        st = cpr_fail(CPR_INVALID_ARGUMENT, "index %lld at position %llu is outside the "
                      "table (%llu rows)", (long long)bad_value, check[0],
                      (unsigned long long)t->cfg.rows);
        goto out;
    }
    *first = n_bags ? check[2] : n_indices;
out:
    return st;
}

/* ---- forward ---------------------------------------------------------------------- */

/* One block per bag, threads over dim; each element sums its bag in position
 * order, then MEAN multiplies by 1/len (as emb_cpu.c does). */
static __global__ void forward_kernel(const float *w, uint32_t dim, const int64_t *indices,
                                      size_t n_indices, const int64_t *offsets, size_t n_bags,
                                      int mean, float *out)
{
    for (size_t bag = blockIdx.x; bag < n_bags; bag += gridDim.x) {
        size_t lo = (size_t)offsets[bag];
        size_t hi = bag + 1 < n_bags ? (size_t)offsets[bag + 1] : n_indices;
        float scale = hi > lo ? __fdiv_rn(1.0f, (float)(hi - lo)) : 1.0f;
        for (uint32_t j = threadIdx.x; j < dim; j += blockDim.x) {
            float acc = 0.0f;
            for (size_t i = lo; i < hi; i++)
                acc = __fadd_rn(acc, w[(uint64_t)indices[i] * dim + j]);
            if (mean && hi > lo)
                acc = __fmul_rn(acc, scale);
            out[bag * dim + j] = acc;
        }
    }
}

extern "C" cpr_status cpri_emb_cuda_forward(cpr_emb *t, const int64_t *indices, size_t n_indices,
                                           const int64_t *offsets, size_t n_bags,
                                           cpr_pooling pooling, float *out)
{
    emb_cuda_table *b = CUDA_T(t);
    uint32_t dim = t->cfg.dim;
    uint64_t first = 0;
    cpr_status st = CPR_OK;
    CHECK(cudaSetDevice(b->device));
    st = validate_batch(t, b, indices, n_indices, offsets, n_bags, &first);
    if (st || n_bags == 0)
        goto out;
    forward_kernel<<<emb_blocks(n_bags, 1), emb_row_threads(dim), 0, b->stream>>>(
        b->weights, dim, indices, n_indices, offsets, n_bags, pooling == CPR_POOL_MEAN, out);
    CHECK_LAUNCH();
    CHECK(cudaStreamSynchronize(b->stream));
out:
    return st;
}

/* ---- backward --------------------------------------------------------------------- */

/* Occurrence k = position first + k: its row (sort key), position, bag and
 * the bag's pooling scale. One block per bag, threads over its positions. */
static __global__ void occurrences_kernel(const int64_t *indices, size_t n_indices,
                                          const int64_t *offsets, size_t n_bags, uint64_t first,
                                          int mean, uint64_t *rows, uint32_t *pos, uint32_t *bag_of,
                                          float *scale_of)
{
    for (size_t bag = blockIdx.x; bag < n_bags; bag += gridDim.x) {
        size_t lo = (size_t)offsets[bag];
        size_t hi = bag + 1 < n_bags ? (size_t)offsets[bag + 1] : n_indices;
        float scale = mean && hi > lo ? __fdiv_rn(1.0f, (float)(hi - lo)) : 1.0f;
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            size_t k = i - first;
            rows[k] = (uint64_t)indices[i];
            pos[k] = (uint32_t)i;
            bag_of[k] = (uint32_t)bag;
            scale_of[k] = scale;
        }
    }
}

typedef struct backward_args {
    /* table */
    float *weights, *state;
    uint32_t *counts;
    ull *dirty;
    float *norm;
    emb_shard_dev *shards;
    emb_geom geom;
    uint32_t dim;
    int optimizer;
    float lr, eps;
    unsigned track;
    uint64_t seed, call, threshold;
    /* batch, sorted by row */
    const float *grad;
    uint64_t first;
    const uint32_t *bag_of;      /* by position - first */
    const float *scale_of;       /* by position - first */
    const uint32_t *sorted_pos;  /* positions, grouped by row, ascending within a row */
    const uint64_t *uniq;        /* unique rows, ascending */
    const int *run_len, *run_start, *num_runs;
    uint8_t *sampled;            /* per unique row; NULL: SSU off or every sample full */
} backward_args;

/* The update of w (and state) for element j, given the row's gradient g;
 * returns the change d (w -= d), exactly as emb_cpu.c's step_row. */
static __device__ __forceinline__ float step_element(const backward_args &a, uint64_t row,
                                                     uint32_t j, float g, float rowwise_scale)
{
    float *w = a.weights + row * a.dim + j, d;
    if (a.optimizer == CPR_OPT_ROWWISE_ADAGRAD) {
        d = __fmul_rn(rowwise_scale, g);
    } else if (a.optimizer == CPR_OPT_ADAGRAD) {
        float *s = a.state + row * a.dim + j;
        float sj = __fadd_rn(*s, __fmul_rn(g, g));
        *s = sj;
        d = __fdiv_rn(__fmul_rn(a.lr, g), __fadd_rn(__fsqrt_rn(sj), a.eps));
    } else {
        d = __fmul_rn(a.lr, g);
    }
    *w = __fsub_rn(*w, d);
    return d;
}

/* Row-wise Adagrad's state update (one thread, index order): returns the
 * row's step scale lr / (sqrt(s) + eps). */
static __device__ __forceinline__ float rowwise_state(const backward_args &a, uint64_t row,
                                                      const float *g)
{
    double sq = 0;
#pragma unroll 1 /* no unrolled remainder reading past row_buf (see the kernel) */
    for (uint32_t j = 0; j < a.dim; j++)
        sq = __dadd_rn(sq, __dmul_rn((double)g[j], (double)g[j]));
    float s = __fadd_rn(a.state[row], __double2float_rn(__ddiv_rn(sq, (double)a.dim)));
    a.state[row] = s;
    return __fdiv_rn(a.lr, __fadd_rn(__fsqrt_rn(s), a.eps));
}

/* Trackers of one updated row (one thread), as emb_cpu.c's track_row. */
static __device__ __forceinline__ void track_row(const backward_args &a, uint64_t row, int occ,
                                                 const float *change, int sampled, int u)
{
    uint32_t shard = emb_dev_shard_of(a.geom, row);
    if (!a.track) { /* the shard counters are kept whatever the trackers */
        atomicAdd(&a.shards[shard].events, (ull)occ);
        atomicAdd(&a.shards[shard].unsaved, (ull)occ);
        return;
    }
    if (a.counts) {
        uint64_t c = (uint64_t)a.counts[row] + (uint64_t)occ;
        a.counts[row] = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
    }
    if (a.dirty)
        atomicOr(&a.dirty[row >> 6], 1ull << (row & 63));
    if (a.norm) {
        double sum = 0;
#pragma unroll 1 /* no unrolled remainder reading past row_buf (see the kernel) */
        for (uint32_t j = 0; j < a.dim; j++)
            sum = __dadd_rn(sum, __dmul_rn((double)change[j], (double)change[j]));
        a.norm[row] = __fadd_rn(a.norm[row], __double2float_rn(sum));
    }
    if (a.sampled && sampled)
        a.sampled[u] = 1;
    atomicAdd(&a.shards[shard].events, (ull)occ);
    atomicAdd(&a.shards[shard].unsaved, (ull)occ);
}

/* One block per unique row (grid-stride), threads over dim. Shared memory:
 * dim floats holding the row's gradient, then its per-element change.
 * Thread 0's loops over the row (rowwise_state, track_row) are not unrolled:
 * the unrolled loop's remainder read up to 12 bytes past row_buf (found by
 * compute-sanitizer's memcheck on an H200; the values were not used). */
static __global__ void backward_rows_kernel(backward_args a)
{
    extern __shared__ float row_buf[];
    __shared__ float rowwise_scale;
    int runs = *a.num_runs;
    for (int u = blockIdx.x; u < runs; u += gridDim.x) {
        uint64_t row = a.uniq[u];
        int start = a.run_start[u], occ = a.run_len[u], sampled = 0;
        for (uint32_t j = threadIdx.x; j < a.dim; j += blockDim.x) {
            float g = 0.0f;
            for (int k = start; k < start + occ; k++) {
                uint64_t at = a.sorted_pos[k] - a.first;
                float grad = a.grad[(size_t)a.bag_of[at] * a.dim + j];
                g = __fadd_rn(g, __fmul_rn(a.scale_of[at], grad));
            }
            row_buf[j] = g;
        }
        __syncthreads();
        if (a.optimizer == CPR_OPT_ROWWISE_ADAGRAD && threadIdx.x == 0)
            rowwise_scale = rowwise_state(a, row, row_buf);
        __syncthreads();
        for (uint32_t j = threadIdx.x; j < a.dim; j += blockDim.x)
            row_buf[j] = step_element(a, row, j, row_buf[j], rowwise_scale);
        for (int k = threadIdx.x; a.sampled && k < occ; k += blockDim.x)
            sampled |= emb_dev_sampled(a.seed, a.call, a.sorted_pos[start + k], a.threshold);
        sampled = __syncthreads_or(sampled); /* also: every change is in row_buf */
        if (threadIdx.x == 0)
            track_row(a, row, occ, row_buf, sampled, u);
        __syncthreads(); /* row_buf is reused by the next row */
    }
}

/* Device temporaries of one backward call over n occurrences. */
typedef struct backward_scratch {
    uint64_t *rows_in, *rows_sorted, *uniq, *ssu_rows;
    uint32_t *pos_in, *pos_sorted, *bag_of;
    float *scale_of;
    int *run_len, *run_start, *num_runs;
    uint8_t *sampled;
    int64_t *num_sampled;
    void *cub_temp;
    size_t cub_bytes;
} backward_scratch;

static int row_bits(uint64_t rows)
{
    int bits = 1;
    while (bits < 64 && ((rows - 1) >> bits))
        bits++;
    return bits;
}

static cpr_status backward_scratch_get(const cpr_emb *t, emb_cuda_table *b, size_t n,
                                       backward_scratch *s)
{
    cpr_status st = CPR_OK;
    size_t bytes[4] = {0, 0, 0, 0};
    int end_bit = row_bits(t->cfg.rows);
    memset(s, 0, sizeof *s);
    CHECK(cub::DeviceRadixSort::SortPairs(NULL, bytes[0], s->rows_in, s->rows_sorted,
                                          s->pos_in, s->pos_sorted, (int)n, 0, end_bit,
                                          b->stream));
    CHECK(cub::DeviceRunLengthEncode::Encode(NULL, bytes[1], s->rows_sorted, s->uniq,
                                             s->run_len, s->num_runs, (int)n, b->stream));
    CHECK(cub::DeviceScan::ExclusiveSum(NULL, bytes[2], s->run_len, s->run_start, (int)n,
                                        b->stream));
    CHECK(cub::DeviceSelect::Flagged(NULL, bytes[3], s->uniq, s->sampled, s->ssu_rows,
                                     s->num_sampled, (int64_t)n, b->stream));
    for (int i = 0; i < 4; i++)
        s->cub_bytes = bytes[i] > s->cub_bytes ? bytes[i] : s->cub_bytes;
    {
        emb_scratch_part parts[] = {
            {(void **)&s->rows_in, n * 8}, {(void **)&s->rows_sorted, n * 8},
            {(void **)&s->uniq, n * 8},    {(void **)&s->ssu_rows, n * 8},
            {(void **)&s->pos_in, n * 4},  {(void **)&s->pos_sorted, n * 4},
            {(void **)&s->bag_of, n * 4},  {(void **)&s->scale_of, n * 4},
            {(void **)&s->run_len, n * 4}, {(void **)&s->run_start, n * 4},
            {(void **)&s->num_runs, 8},    {(void **)&s->sampled, n},
            {(void **)&s->num_sampled, 8}, {&s->cub_temp, s->cub_bytes},
        };
        st = emb_scratch_get(b, parts, (int)(sizeof parts / sizeof parts[0]));
    }
out:
    return st;
}

/* The rows sampled in this call go into the host SSU sample, ascending, as
 * emb_cpu.c adds them while it walks the sorted rows. */
static cpr_status ssu_collect(cpr_emb *t, emb_cuda_table *b, backward_scratch *s, size_t n)
{
    cpr_status st = CPR_OK;
    uint64_t *rows = NULL;
    ull count;
    CHECK(cub::DeviceSelect::Flagged(s->cub_temp, s->cub_bytes, s->uniq, s->sampled,
                                     s->ssu_rows, s->num_sampled, (int64_t)n, b->stream));
    CHECK(cudaMemcpyAsync(b->pinned_small, s->num_sampled, sizeof(int64_t),
                          cudaMemcpyDeviceToHost, b->stream));
    CHECK(cudaStreamSynchronize(b->stream));
    count = b->pinned_small[0];
    if (count == 0)
        goto out;
    rows = (uint64_t *)malloc(count * sizeof *rows);
    if (!rows) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory for %llu sampled rows", count);
        goto out;
    }
    CHECK(cudaMemcpyAsync(rows, s->ssu_rows, count * sizeof *rows, cudaMemcpyDeviceToHost,
                          b->stream));
    CHECK(cudaStreamSynchronize(b->stream));
    for (ull i = 0; i < count; i++)
        cpri_emb_ssu_add(&b->ssu, cpri_emb_geom_shard_of(t, rows[i]), rows[i]);
out:
    free(rows);
    return st;
}

static backward_args backward_args_of(const cpr_emb *t, const emb_cuda_table *b,
                                      const backward_scratch *s, const float *grad,
                                      uint64_t first)
{
    backward_args a;
    memset(&a, 0, sizeof a);
    a.weights = b->weights;
    a.state = b->state;
    a.counts = b->counts;
    a.dirty = b->dirty;
    a.norm = b->norm;
    a.shards = b->shards_dev;
    a.geom = b->geom;
    a.dim = t->cfg.dim;
    a.optimizer = (int)t->cfg.optimizer;
    a.lr = t->cfg.learning_rate;
    a.eps = t->cfg.eps;
    a.track = t->cfg.track;
    a.seed = t->cfg.seed;
    a.call = b->calls;
    a.threshold = t->ssu_threshold;
    a.grad = grad;
    a.first = first;
    a.bag_of = s->bag_of;
    a.scale_of = s->scale_of;
    a.sorted_pos = s->pos_sorted;
    a.uniq = s->uniq;
    a.run_len = s->run_len;
    a.run_start = s->run_start;
    a.num_runs = s->num_runs;
    a.sampled = b->ssu.member && !cpri_emb_ssu_all_full(&b->ssu) ? s->sampled : NULL;
    return a;
}

/* Sort the n occurrences from position `first` by row, then one block per
 * unique row applies its update. */
static cpr_status backward_rows(cpr_emb *t, emb_cuda_table *b, const int64_t *indices,
                                size_t n_indices, const int64_t *offsets, size_t n_bags,
                                cpr_pooling pooling, const float *grad, uint64_t first)
{
    size_t n = n_indices - first;
    uint32_t dim = t->cfg.dim;
    backward_scratch s;
    backward_args a;
    cpr_status st = backward_scratch_get(t, b, n, &s);
    if (st)
        goto out;
    occurrences_kernel<<<emb_blocks(n_bags, 1), 64, 0, b->stream>>>(
        indices, n_indices, offsets, n_bags, first, pooling == CPR_POOL_MEAN, s.rows_in,
        s.pos_in, s.bag_of, s.scale_of);
    CHECK_LAUNCH();
    CHECK(cub::DeviceRadixSort::SortPairs(s.cub_temp, s.cub_bytes, s.rows_in, s.rows_sorted,
                                          s.pos_in, s.pos_sorted, (int)n, 0,
                                          row_bits(t->cfg.rows), b->stream));
    CHECK(cudaMemsetAsync(s.run_len, 0, n * sizeof(int), b->stream));
    CHECK(cub::DeviceRunLengthEncode::Encode(s.cub_temp, s.cub_bytes, s.rows_sorted, s.uniq,
                                             s.run_len, s.num_runs, (int)n, b->stream));
    CHECK(cub::DeviceScan::ExclusiveSum(s.cub_temp, s.cub_bytes, s.run_len, s.run_start,
                                        (int)n, b->stream));
    a = backward_args_of(t, b, &s, grad, first);
    if (a.sampled)
        CHECK(cudaMemsetAsync(s.sampled, 0, n, b->stream));
    backward_rows_kernel<<<emb_blocks(n, 1), emb_row_threads(dim), dim * sizeof(float),
                           b->stream>>>(a);
    CHECK_LAUNCH();
    if (a.sampled)
        st = ssu_collect(t, b, &s, n);
    else
        CHECK(cudaStreamSynchronize(b->stream));
out:
    return st;
}

extern "C" cpr_status cpri_emb_cuda_backward(cpr_emb *t, const int64_t *indices,
                                            size_t n_indices, const int64_t *offsets,
                                            size_t n_bags, cpr_pooling pooling,
                                            const float *grad)
{
    emb_cuda_table *b = CUDA_T(t);
    uint64_t first = 0;
    cpr_status st = CPR_OK;
    CHECK(cudaSetDevice(b->device));
    st = validate_batch(t, b, indices, n_indices, offsets, n_bags, &first);
    if (st)
        goto out;
    if (first < n_indices)
        st = backward_rows(t, b, indices, n_indices, offsets, n_bags, pooling, grad, first);
    if (st == CPR_OK)
        b->calls++;
out:
    return st;
}

extern "C" int cpri_emb_cuda_built(void)
{
    return 1;
}
