/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CUDA save's rows copied out already encoded (issue #12 on the GPU path):
 * cpr_emb_save_copy_encoded on a CUDA table encodes the rows of the save's
 * device snapshot (G1, emb_cuda_select.cu) on the device and moves only the
 * encoded bytes to the host, so an int8 part of 64-wide rows crosses PCIe in
 * 72 bytes a row instead of 256, and the host encodes nothing.
 *
 * Invariants:
 *  C1. The kernels give the bytes cpr_codec_encode (common/codec.c) gives
 *      for the same rows and codec, flags 0: the same float operations in
 *      the same order, each rounded once (the __f*_rn intrinsics: nvcc may
 *      not contract them into FMAs), the same integer rounding (to nearest
 *      even: __float2int_rn as lrintf), the same half conversion (IEEE, to
 *      nearest even, subnormals kept), the same 1/scale-or-divide rule (Q3
 *      there), a zero bias or scale stored as +0 (Q4 there: the min and
 *      max of a row are exact whatever the order, except for the sign of a
 *      zero). tests/unit/test_embedding_gpu.c compares the bytes, rows of
 *      mixed +0 and -0 included.
 *  C2. A row the codec cannot hold (NaN, infinity, beyond f16 or bf16, a
 *      range wider than a float) is never encoded silently: a kernel marks
 *      the lowest such row; the host then copies the rows as f32 and lets
 *      cpr_codec_encode refuse them, so the error names the row and value
 *      as the host path does. A copy that finds no device memory for its
 *      scratch encodes on the host the same way (slower, the same bytes).
 *  C3. A copy runs on copy_stream and waits for itself (as
 *      cpri_emb_cuda_copy), from any thread; d_snap is only read. Its
 *      scratch is the table's (enc_dev, grown with cudaMalloc, and a pinned
 *      word for the bad row), so encoded copies take enc_mu and run one at
 *      a time, and none allocates from the device's memory pool: stream-
 *      ordered allocations there, on the sender's thread, raised the
 *      training thread's stall per save from 35 to 101 ms in cpr-dlrm's
 *      GPU run (26 tables x 8 shards, a copy per block).
 */
#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/codec.h"
#include "emb_cuda_internal.cuh"

#define ROWS_PER_BLOCK 8u /* one warp a row */
#define NO_BAD_ROW (~0ull)

struct enc_args {
    const float *rows; /* k x dim, the snapshot's rows [first, first + k) */
    size_t k;
    uint32_t dim;
    int codec;
    size_t rb;         /* bytes of an encoded row */
    uint8_t *out;      /* k x rb */
    ull *bad;          /* lowest row (of k) that cannot be encoded */
};

static __device__ __forceinline__ int finite(float x)
{
    return isfinite(x) ? 1 : 0;
}

/* lrintf((x - bias) * inv) or, when the inverse overflowed, / scale (Q3);
 * clamped to [0, levels]. */
static __device__ __forceinline__ unsigned quant(float x, float bias, float scale, float inv,
                                                 int divide, int levels)
{
    float d = __fsub_rn(x, bias);
    int v = __float2int_rn(divide ? __fdiv_rn(d, scale) : __fmul_rn(d, inv));
    return (unsigned)(v < 0 ? 0 : v > levels ? levels : v);
}

static __global__ void encode_kernel(enc_args a)
{
    size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    unsigned lane = threadIdx.x & 31u;
    if (row >= a.k) /* the whole warp: one row each */
        return;
    const float *x = a.rows + row * a.dim;
    uint8_t *o = a.out + row * a.rb;
    int ok = 1;
    switch (a.codec) {
    case CPR_CODEC_F32:
        for (uint32_t j = lane; j < a.dim; j += 32) {
            ok &= finite(x[j]);
            ((float *)o)[j] = x[j];
        }
        break;
    case CPR_CODEC_BF16:
        for (uint32_t j = lane; j < a.dim; j += 32) {
            unsigned b = __float_as_uint(x[j]);
            unsigned h = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16; /* to nearest even */
            ok &= finite(x[j]) && (h & 0x7f80u) != 0x7f80u;
            ((uint16_t *)o)[j] = (uint16_t)h;
        }
        break;
    case CPR_CODEC_F16:
        for (uint32_t j = lane; j < a.dim; j += 32) {
            ok &= fabsf(x[j]) < 65520.0f; /* false for NaN too */
            ((uint16_t *)o)[j] = __half_as_ushort(__float2half_rn(x[j]));
        }
        break;
    default: { /* int8, int4: scale and bias, then the values */
        int levels = a.codec == CPR_CODEC_INT8 ? 255 : 15;
        float lo = x[0], hi = x[0];
        for (uint32_t j = lane; j < a.dim; j += 32) {
            ok &= finite(x[j]);
            lo = fminf(lo, x[j]);
            hi = fmaxf(hi, x[j]);
        }
        for (int s = 16; s; s >>= 1) {
            lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, s));
            hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, s));
        }
        ok = __all_sync(0xffffffffu, ok) && finite(__fsub_rn(hi, lo));
        if (!ok)
            break;
        float scale = __fdiv_rn(__fsub_rn(hi, lo), (float)levels);
        if (scale == 0.0f) /* Q4 of common/codec.c: zeros stored as +0 */
            scale = 0.0f;
        if (lo == 0.0f)
            lo = 0.0f;
        /* Q5 of common/codec.c: the top level decodes finite (same steps) */
        for (int i = 0; i < 64 && scale > 0.0f &&
                        !finite(__fadd_rn(__fmul_rn((float)levels, scale), lo)); i++)
            scale = nextafterf(scale, 0.0f);
        float inv = scale > 0.0f ? __fdiv_rn(1.0f, scale) : 0.0f;
        int divide = !finite(inv);
        if (lane < 8) { /* the header, byte by byte: rows need not be aligned */
            unsigned w = __float_as_uint(lane < 4 ? scale : lo);
            o[lane] = (uint8_t)(w >> (8 * (lane & 3u)));
        }
        uint8_t *q = o + 8;
        if (levels == 255) {
            for (uint32_t j = lane; j < a.dim; j += 32)
                q[j] = (uint8_t)quant(x[j], lo, scale, inv, divide, levels);
        } else { /* two values a byte, the low nibble first */
            for (uint32_t p = lane; 2 * p < a.dim; p += 32) {
                unsigned v = quant(x[2 * p], lo, scale, inv, divide, levels);
                if (2 * p + 1 < a.dim)
                    v |= quant(x[2 * p + 1], lo, scale, inv, divide, levels) << 4;
                q[p] = (uint8_t)v;
            }
        }
        break;
    }
    }
    if (!__all_sync(0xffffffffu, ok) && lane == 0)
        atomicMin(a.bad, (ull)row);
}

/* The rows as f32 to the host, encoded there: when the device has no room
 * for a copy's scratch, and (C2) for the error of a row the device refused
 * (`bad`: a row index, or NO_BAD_ROW). */
static cpr_status encode_on_host(cpr_emb *t, const cpr_emb_save *save, size_t first, size_t k,
                                 cpr_codec codec, void *values, float *state, ull bad)
{
    uint32_t dim = t->cfg.dim;
    float *rows = (float *)malloc(k * dim * sizeof(float));
    cpr_status st = rows ? cpri_emb_cuda_copy(t, save, first, k, rows, state, 1)
                         : cpr_fail(CPR_NO_MEMORY, "out of memory encoding %zu rows", k);
    if (st == CPR_OK)
        st = cpr_codec_encode(codec, 0, rows, k, dim, values);
    if (st == CPR_OK && bad != NO_BAD_ROW) /* the device refused what the host accepts */
        st = cpr_fail(CPR_INTERNAL, "the device could not encode row %llu of a save as %s, "
                      "the host could", (unsigned long long)(first + bad), cpr_codec_name(codec));
    free(rows);
    return st;
}

/* Under enc_mu: device scratch of at least `bytes` (plus the bad-row
 * word) and the pinned word; 0 when the device has no room. */
static int enc_scratch(emb_cuda_table *b, size_t bytes)
{
    if (!b->enc_flag && cudaMallocHost((void **)&b->enc_flag, sizeof(ull)) != cudaSuccess) {
        cudaGetLastError();
        b->enc_flag = NULL;
        return 0;
    }
    if (b->enc_cap >= bytes)
        return 1;
    cudaFree(b->enc_dev); /* grows rarely: a copy is at most one of the part's blocks */
    b->enc_dev = NULL;
    b->enc_cap = 0;
    size_t cap = (bytes + bytes / 4 + 7) & ~(size_t)7; /* the word after it aligned */
    if (cudaMalloc((void **)&b->enc_dev, cap + sizeof(ull)) != cudaSuccess) {
        cudaGetLastError();
        b->enc_dev = NULL;
        return 0;
    }
    b->enc_cap = cap;
    return 1;
}

extern "C" cpr_status cpri_emb_cuda_copy_encoded(cpr_emb *t, const cpr_emb_save *save,
                                                size_t first, size_t k, cpr_codec codec,
                                                void *values, float *state)
{
    emb_cuda_table *b = CUDA_T(t);
    const emb_pending *p = (const emb_pending *)save->backend;
    uint32_t dim = t->cfg.dim, sd = t->state_dim;
    size_t n = save->n, rb = cpr_codec_row_bytes(codec, dim);
    size_t out_bytes = (k * rb + 7) & ~(size_t)7;
    ull bad = NO_BAD_ROW;
    int locked = 0;
    enc_args a;
    cpr_status st = CPR_OK;
    if (!p)
        return cpr_fail(CPR_FAILED_PRECONDITION, "copy of a save whose table state is gone");
    if (k == 0)
        return CPR_OK;
    if (p->h_snap) { /* the snapshot is in host memory: encode it there */
        st = cpr_codec_encode(codec, 0, p->h_snap + first * dim, k, dim, values);
        if (st == CPR_OK && sd)
            memcpy(state, p->h_snap + n * dim + first * sd, k * sd * sizeof(float));
        return st;
    }
    CHECK(cudaSetDevice(b->device)); /* per thread */
    pthread_mutex_lock(&b->enc_mu);
    locked = 1;
    if (!enc_scratch(b, out_bytes)) { /* no room on the device: f32 rows, encoded here */
        pthread_mutex_unlock(&b->enc_mu);
        return encode_on_host(t, save, first, k, codec, values, state, NO_BAD_ROW);
    }
    a.rows = p->d_snap + first * dim;
    a.k = k;
    a.dim = dim;
    a.codec = (int)codec;
    a.rb = rb;
    a.out = b->enc_dev;
    a.bad = (ull *)(b->enc_dev + b->enc_cap);
    CHECK(cudaMemsetAsync(a.bad, 0xff, sizeof(ull), b->copy_stream));
    encode_kernel<<<(unsigned)((k + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK,
                    0, b->copy_stream>>>(a);
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(values, b->enc_dev, k * rb, cudaMemcpyDeviceToHost, b->copy_stream));
    CHECK(cudaMemcpyAsync(b->enc_flag, a.bad, sizeof(ull), cudaMemcpyDeviceToHost,
                          b->copy_stream));
    if (sd)
        CHECK(cudaMemcpyAsync(state, p->d_snap + n * dim + first * sd, k * sd * sizeof(float),
                              cudaMemcpyDeviceToHost, b->copy_stream));
    CHECK(cudaStreamSynchronize(b->copy_stream));
    bad = *b->enc_flag;
    pthread_mutex_unlock(&b->enc_mu);
    locked = 0;
    if (bad != NO_BAD_ROW)
        st = encode_on_host(t, save, first, k, codec, values, state, bad);
out:
    if (locked) { /* a failed call: nothing queued may outlive it (the save may end) */
        cudaStreamSynchronize(b->copy_stream);
        cudaGetLastError();
        pthread_mutex_unlock(&b->enc_mu);
    }
    return st;
}
