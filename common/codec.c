/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Row codecs (cpr/codec.h): a portable reference of every codec, and AVX2
 * (+ F16C) kernels chosen at run time that produce the same bytes.
 *
 * Invariants:
 *  Q1. The kernels compute exactly what the portable code computes: the
 *      same float operations in the same order (no FMA: C11 mode keeps
 *      contraction off, and the vector code multiplies and adds apart), the
 *      same rounding (round to nearest even: lrintf and cvtps_epi32 under
 *      the default MXCSR), the same half conversion (F16C and libfp16 both
 *      round to nearest even). tests/unit/test_codec.c compares them.
 *  Q2. A row a kernel cannot encode (a NaN, an infinity, a value f16 cannot
 *      hold, a range that overflows) is handed to the portable code, which
 *      refuses it with the row and column in the message.
 *  Q3. A row whose step is so small that 1 / step overflows (subnormal
 *      values) divides by the step instead of multiplying by its inverse,
 *      in both paths alike.
 *  Q4. A zero bias or scale is stored as +0 (canonical_zeros): which of a
 *      row's +0 and -0 a min or max keeps depends on the order it compares
 *      them in (MINPS keeps its second operand, the portable loop its
 *      first, a GPU warp its own order), and the bytes must not.
 *  Q5. The top level decodes to a finite value: where levels x scale + bias
 *      rounds past FLT_MAX (a row reaching FLT_MAX), the scale steps down
 *      an ulp at a time until it does not (finite_top; the GPU encoder,
 *      embedding/emb_cuda_codec.cu, alike). Finite rows never restore inf.
 *  Q6. Encoded bytes may start at any address: 16-bit values are read and
 *      written with memcpy (get16/put16) or unaligned vector moves, never
 *      through a uint16_t pointer.
 */
#include "cpr/codec.h"

#include <fp16.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpr_common.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define CODEC_X86 1
#endif

#define F16_LIMIT 65520.0f /* |x| at or beyond it rounds to infinity in f16 */
#define GREEDY_BINS 200    /* steps of the greedy range search */
#define GREEDY_RATIO 0.16f /* at most this share of the range is trimmed */

const char *cpr_codec_name(cpr_codec codec)
{
    switch (codec) {
    case CPR_CODEC_F32: return "f32";
    case CPR_CODEC_BF16: return "bf16";
    case CPR_CODEC_F16: return "f16";
    case CPR_CODEC_INT8: return "int8";
    case CPR_CODEC_INT4: return "int4";
    }
    return "unknown";
}

cpr_status cpr_codec_parse(const char *name, cpr_codec *out)
{
    for (int c = CPR_CODEC_F32; c <= CPR_CODEC_INT4; c++)
        if (name && strcmp(name, cpr_codec_name((cpr_codec)c)) == 0) {
            *out = (cpr_codec)c;
            return CPR_OK;
        }
    return cpr_fail(CPR_INVALID_ARGUMENT, "codec '%s': give f32, bf16, f16, int8 or int4",
                    name ? name : "(null)");
}

const char *cpr_codecs_name(uint32_t codecs, char *buf, size_t len)
{
    size_t at = 0;
    if (!buf || !len)
        return buf;
    buf[0] = '\0';
    for (int c = CPR_CODEC_F32; c <= CPR_CODEC_INT4; c++)
        if (codecs & (1u << c)) {
            int k = snprintf(buf + at, len - at, "%s%s", at ? "+" : "", cpr_codec_name((cpr_codec)c));
            at = k < 0 || (size_t)k >= len - at ? len - 1 : at + (size_t)k;
        }
    if (codecs >> (CPR_CODEC_INT4 + 1)) {
        int k = snprintf(buf + at, len - at, "%sunknown", at ? "+" : "");
        at = k < 0 || (size_t)k >= len - at ? len - 1 : at + (size_t)k;
    }
    if (!at)
        snprintf(buf, len, "-");
    return buf;
}

size_t cpr_codec_row_bytes(cpr_codec codec, uint32_t dim)
{
    if (!dim)
        return 0;
    switch (codec) {
    case CPR_CODEC_F32: return 4 * (size_t)dim;
    case CPR_CODEC_BF16:
    case CPR_CODEC_F16: return 2 * (size_t)dim;
    case CPR_CODEC_INT8: return 8 + (size_t)dim;
    case CPR_CODEC_INT4: return 8 + ((size_t)dim + 1) / 2;
    }
    return 0;
}

/* ---- the portable reference ------------------------------------------------ */

static cpr_status not_finite(size_t row, uint32_t j, float x)
{
    return cpr_fail(CPR_INVALID_ARGUMENT, "row %zu, value %u is %s: a checkpoint cannot hold "
                    "NaN or infinite values", row, j, isnan(x) ? "NaN" : "infinite");
}

static uint16_t bf16_bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16); /* to nearest even */
}

static float bf16_value(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float x;
    memcpy(&x, &b, 4);
    return x;
}

/* Encoded rows start at any byte (the public API takes void *): 16-bit
 * values are moved with memcpy, never through a uint16_t pointer that may
 * be misaligned (Q6). */
static uint16_t get16(const unsigned char *p, uint32_t j)
{
    uint16_t h;
    memcpy(&h, p + 2 * (size_t)j, 2);
    return h;
}

static void put16(unsigned char *p, uint32_t j, uint16_t h)
{
    memcpy(p + 2 * (size_t)j, &h, 2);
}

static cpr_status enc_bf16_row(const float *x, uint32_t dim, size_t row, unsigned char *out)
{
    for (uint32_t j = 0; j < dim; j++) {
        if (!isfinite(x[j]))
            return not_finite(row, j, x[j]);
        uint16_t h = bf16_bits(x[j]);
        if ((h & 0x7f80u) == 0x7f80u)
            return cpr_fail(CPR_INVALID_ARGUMENT, "row %zu, value %u (%g) rounds beyond "
                            "bf16's largest value", row, j, (double)x[j]);
        put16(out, j, h);
    }
    return CPR_OK;
}

static cpr_status enc_f16_row(const float *x, uint32_t dim, size_t row, unsigned char *out)
{
    for (uint32_t j = 0; j < dim; j++) {
        if (!isfinite(x[j]))
            return not_finite(row, j, x[j]);
        if (fabsf(x[j]) >= F16_LIMIT)
            return cpr_fail(CPR_INVALID_ARGUMENT, "row %zu, value %u (%g) is beyond f16's "
                            "range (|x| < 65520): use bf16 or an int codec", row, j,
                            (double)x[j]);
        put16(out, j, fp16_ieee_from_fp32_value(x[j]));
    }
    return CPR_OK;
}

/* The row's range, checked: every value finite and max - min finite. */
static cpr_status row_range(const float *x, uint32_t dim, size_t row, float *lo, float *hi)
{
    float mn = x[0], mx = x[0];
    for (uint32_t j = 0; j < dim; j++) {
        if (!isfinite(x[j]))
            return not_finite(row, j, x[j]);
        mn = x[j] < mn ? x[j] : mn;
        mx = x[j] > mx ? x[j] : mx;
    }
    if (!isfinite(mx - mn))
        return cpr_fail(CPR_INVALID_ARGUMENT, "row %zu spans [%g, %g], wider than a float "
                        "can express: use bf16", row, (double)mn, (double)mx);
    *lo = mn;
    *hi = mx;
    return CPR_OK;
}

/* Q5: the largest scale <= `scale` whose top level, decoded as dec_int_row
 * does (a multiply, then an add), is finite. A few ulps at most. */
static float finite_top(float lo, float scale, int levels)
{
    for (int i = 0; i < 64 && scale > 0 && !isfinite((float)levels * scale + lo); i++)
        scale = nextafterf(scale, 0.0f);
    return scale;
}

/* Quantize one row with levels (255 or 15) steps from bias. */
/* The multiplier of a scale: 1 / scale, or 0 for a constant row. A scale so
 * small that its inverse overflows (a row of subnormals) divides instead
 * (Q3, both in the portable code and in the kernels). */
static float inverse(float scale)
{
    return scale > 0 ? 1.0f / scale : 0.0f;
}

static void quantize(const float *x, uint32_t dim, float bias, float scale, int levels,
                     uint8_t *q)
{
    float inv = inverse(scale);
    int divide = !isfinite(inv);
    for (uint32_t j = 0; j < dim; j++) {
        long v = lrintf(divide ? (x[j] - bias) / scale : (x[j] - bias) * inv);
        q[j] = (uint8_t)(v < 0 ? 0 : v > levels ? levels : v);
    }
}

/* Q4: +0 for a zero bias and a zero scale, whatever their sign. */
static void canonical_zeros(float *bias, float *scale)
{
    if (*bias == 0.0f)
        *bias = 0.0f;
    if (*scale == 0.0f)
        *scale = 0.0f;
}

static void put_header(uint8_t *out, float scale, float bias)
{
    memcpy(out, &scale, 4);
    memcpy(out + 4, &bias, 4);
}

static void pack_nibbles(const uint8_t *q, uint32_t dim, uint8_t *out)
{
    for (uint32_t j = 0; j < dim; j += 2)
        out[j / 2] = (uint8_t)(q[j] | (j + 1 < dim ? q[j + 1] << 4 : 0));
}

/* Squared reconstruction error of a row quantized on [lo, hi]. */
static double range_loss(const float *x, uint32_t dim, float lo, float hi, int levels)
{
    float scale = (hi - lo) / (float)levels, inv = inverse(scale);
    int divide = !isfinite(inv);
    double loss = 0;
    for (uint32_t j = 0; j < dim; j++) {
        long v = lrintf(divide ? (x[j] - lo) / scale : (x[j] - lo) * inv);
        v = v < 0 ? 0 : v > levels ? levels : v;
        double d = (double)x[j] - ((float)v * scale + lo);
        loss += d * d;
    }
    return loss;
}

/* The greedy search: trim the side whose trimming loses less, keep the best. */
static void greedy_range(const float *x, uint32_t dim, int levels, float *lo, float *hi)
{
    float step = (*hi - *lo) / GREEDY_BINS, a = *lo, b = *hi;
    double best = range_loss(x, dim, a, b, levels);
    float best_a = a, best_b = b;
    for (int i = 0; i < (int)(GREEDY_BINS * GREEDY_RATIO) && step > 0; i++) {
        double left = range_loss(x, dim, a + step, b, levels);
        double right = range_loss(x, dim, a, b - step, levels);
        if (left < right)
            a += step;
        else
            b -= step;
        double cur = left < right ? left : right;
        if (cur < best) {
            best = cur;
            best_a = a;
            best_b = b;
        }
    }
    *lo = best_a;
    *hi = best_b;
}

static cpr_status enc_int_row(const float *x, uint32_t dim, size_t row, int levels,
                              unsigned flags, uint8_t *out)
{
    float lo = 0, hi = 0;
    cpr_status st = row_range(x, dim, row, &lo, &hi);
    if (st)
        return st;
    if (flags & CPR_CODEC_GREEDY)
        greedy_range(x, dim, levels, &lo, &hi);
    float scale = (hi - lo) / (float)levels;
    canonical_zeros(&lo, &scale);
    scale = finite_top(lo, scale, levels);
    put_header(out, scale, lo);
    if (levels == 255) {
        quantize(x, dim, lo, scale, levels, out + 8);
        return CPR_OK;
    }
    uint8_t q[256];
    for (uint32_t j = 0; j < dim; j += 256) { /* even chunks: nibbles stay aligned */
        uint32_t k = dim - j < 256 ? dim - j : 256;
        quantize(x + j, k, lo, scale, levels, q);
        pack_nibbles(q, k, out + 8 + j / 2);
    }
    return CPR_OK;
}

static void dec_int_row(const uint8_t *in, uint32_t dim, int nibbles, float *x)
{
    float scale, bias;
    memcpy(&scale, in, 4);
    memcpy(&bias, in + 4, 4);
    const uint8_t *q = in + 8;
    for (uint32_t j = 0; j < dim; j++) {
        unsigned v = nibbles ? (q[j / 2] >> (4 * (j & 1))) & 0xfu : q[j];
        x[j] = (float)v * scale + bias;
    }
}

/* ---- AVX2 / F16C kernels (Q1, Q2) -------------------------------------------- */

#ifdef CODEC_X86
#define KERNEL __attribute__((target("avx2,f16c")))

/* 1 if all 8 lanes are finite. */
KERNEL static int all_finite8(__m256 v)
{
    __m256 d = _mm256_sub_ps(v, v); /* 0 when finite, NaN otherwise */
    return _mm256_movemask_ps(_mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_EQ_OQ)) == 0xff;
}

KERNEL static int enc_bf16_row_avx2(const float *x, uint32_t dim, unsigned char *out)
{
    const __m256i round = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i expmask = _mm256_set1_epi32(0x7f80);
    uint32_t j = 0;
    for (; j + 8 <= dim; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        if (!all_finite8(v))
            return 0;
        __m256i b = _mm256_castps_si256(v);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), one);
        __m256i h = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, round), lsb), 16);
        __m256i e = _mm256_and_si256(h, expmask);
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(e, expmask)))
            return 0;
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0xd8);
        _mm_storeu_si128((__m128i_u *)(void *)(out + 2 * (size_t)j), _mm256_castsi256_si128(p));
    }
    for (; j < dim; j++) {
        if (!isfinite(x[j]))
            return 0;
        uint16_t h = bf16_bits(x[j]);
        if ((h & 0x7f80u) == 0x7f80u)
            return 0;
        put16(out, j, h);
    }
    return 1;
}

KERNEL static void dec_bf16_row_avx2(const unsigned char *in, uint32_t dim, float *x)
{
    uint32_t j = 0;
    for (; j + 8 <= dim; j += 8) {
        __m256i h = _mm256_cvtepu16_epi32(
            _mm_loadu_si128((const __m128i_u *)(const void *)(in + 2 * (size_t)j)));
        _mm256_storeu_ps(x + j, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; j < dim; j++)
        x[j] = bf16_value(get16(in, j));
}

KERNEL static int enc_f16_row_avx2(const float *x, uint32_t dim, unsigned char *out)
{
    const __m256 limit = _mm256_set1_ps(F16_LIMIT);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    uint32_t j = 0;
    for (; j + 8 <= dim; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        __m256 a = _mm256_and_ps(v, absmask);
        /* a < limit is false for NaN, infinities and what f16 cannot hold */
        if (_mm256_movemask_ps(_mm256_cmp_ps(a, limit, _CMP_LT_OQ)) != 0xff)
            return 0;
        _mm_storeu_si128((__m128i_u *)(void *)(out + 2 * (size_t)j),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; j < dim; j++) {
        if (!(fabsf(x[j]) < F16_LIMIT))
            return 0;
        put16(out, j, fp16_ieee_from_fp32_value(x[j]));
    }
    return 1;
}

KERNEL static void dec_f16_row_avx2(const unsigned char *in, uint32_t dim, float *x)
{
    uint32_t j = 0;
    for (; j + 8 <= dim; j += 8)
        _mm256_storeu_ps(x + j, _mm256_cvtph_ps(
            _mm_loadu_si128((const __m128i_u *)(const void *)(in + 2 * (size_t)j))));
    for (; j < dim; j++)
        x[j] = fp16_ieee_to_fp32_value(get16(in, j));
}

/* 8 quantized values of [x, x + 8) as u8 in the low 8 bytes: times inv, or
 * divided by scale when divide (Q3). */
KERNEL static __m128i quant8(const float *x, __m256 bias, __m256 inv, __m256 scale, int divide,
                             __m256i top)
{
    __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x), bias);
    __m256i q = _mm256_cvtps_epi32(divide ? _mm256_div_ps(d, scale) : _mm256_mul_ps(d, inv));
    q = _mm256_min_epi32(_mm256_max_epi32(q, _mm256_setzero_si256()), top);
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    return _mm_packus_epi16(w, w);
}

/* The default (min/max) int8/int4 encoder; 0 hands the row to the portable
 * code (Q2). */
KERNEL static int enc_int_row_avx2(const float *x, uint32_t dim, int levels, uint8_t *out)
{
    if (dim < 8)
        return 0;
    __m256 vmin = _mm256_loadu_ps(x), vmax = vmin;
    uint32_t j = 0;
    for (; j + 8 <= dim; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        if (!all_finite8(v))
            return 0;
        vmin = _mm256_min_ps(vmin, v);
        vmax = _mm256_max_ps(vmax, v);
    }
    float mn[8], mx[8];
    _mm256_storeu_ps(mn, vmin);
    _mm256_storeu_ps(mx, vmax);
    float lo = mn[0], hi = mx[0];
    for (int k = 1; k < 8; k++) {
        lo = mn[k] < lo ? mn[k] : lo;
        hi = mx[k] > hi ? mx[k] : hi;
    }
    for (uint32_t t = j; t < dim; t++) {
        if (!isfinite(x[t]))
            return 0;
        lo = x[t] < lo ? x[t] : lo;
        hi = x[t] > hi ? x[t] : hi;
    }
    if (!isfinite(hi - lo))
        return 0;
    float scale = (hi - lo) / (float)levels;
    canonical_zeros(&lo, &scale);
    scale = finite_top(lo, scale, levels);
    float inv = inverse(scale);
    int divide = !isfinite(inv);
    put_header(out, scale, lo);
    __m256 vb = _mm256_set1_ps(lo), vi = _mm256_set1_ps(divide ? 0.0f : inv);
    __m256 vs = _mm256_set1_ps(scale);
    __m256i top = _mm256_set1_epi32(levels);
    uint8_t *q = out + 8;
    j = 0;
    if (levels == 255) {
        for (; j + 8 <= dim; j += 8)
            _mm_storel_epi64((__m128i *)(q + j), quant8(x + j, vb, vi, vs, divide, top));
    } else { /* 16 values into 8 bytes: pairs of bytes into one, low nibble first */
        for (; j + 16 <= dim; j += 16) {
            __m128i b = _mm_unpacklo_epi64(quant8(x + j, vb, vi, vs, divide, top),
                                           quant8(x + j + 8, vb, vi, vs, divide, top));
            __m128i lo4 = _mm_and_si128(b, _mm_set1_epi16(0x000f));
            __m128i hi4 = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi16(0x00f0));
            __m128i p = _mm_packus_epi16(_mm_or_si128(lo4, hi4), _mm_setzero_si128());
            _mm_storel_epi64((__m128i *)(q + j / 2), p);
        }
    }
    if (j < dim) { /* the tail, as the portable code does it (j is even) */
        uint8_t t[16];
        quantize(x + j, dim - j, lo, scale, levels, t);
        if (levels == 255)
            memcpy(q + j, t, dim - j);
        else
            pack_nibbles(t, dim - j, q + j / 2);
    }
    return 1;
}

KERNEL static void dec_int_row_avx2(const uint8_t *in, uint32_t dim, int nibbles, float *x)
{
    float scale, bias;
    memcpy(&scale, in, 4);
    memcpy(&bias, in + 4, 4);
    const uint8_t *q = in + 8;
    __m256 vs = _mm256_set1_ps(scale), vb = _mm256_set1_ps(bias);
    uint32_t j = 0;
    for (; j + 8 <= dim; j += 8) {
        __m128i b;
        if (nibbles) {
            int32_t four;
            memcpy(&four, q + j / 2, 4);
            __m128i p = _mm_cvtsi32_si128(four);
            __m128i lo4 = _mm_and_si128(p, _mm_set1_epi8(0x0f));
            __m128i hi4 = _mm_and_si128(_mm_srli_epi16(p, 4), _mm_set1_epi8(0x0f));
            b = _mm_unpacklo_epi8(lo4, hi4);
        } else {
            b = _mm_loadl_epi64((const __m128i *)(q + j));
        }
        __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
        _mm256_storeu_ps(x + j, _mm256_add_ps(_mm256_mul_ps(v, vs), vb));
    }
    for (; j < dim; j++) {
        unsigned v = nibbles ? (q[j / 2] >> (4 * (j & 1))) & 0xfu : q[j];
        x[j] = (float)v * scale + bias;
    }
}
#endif /* CODEC_X86 */

/* 1: the kernels; 0: portable; -1: not decided yet. */
static int use_kernels = -1;

static int kernels(void)
{
    int k = __atomic_load_n(&use_kernels, __ATOMIC_RELAXED);
    if (k < 0) {
#ifdef CODEC_X86
        /* F16C from CPUID leaf 1 (ECX bit 29): clang before 15 knows no
         * "f16c" for __builtin_cpu_supports. */
        unsigned eax, ebx, ecx, edx;
        int f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx2") && f16c;
#else
        k = 0;
#endif
        __atomic_store_n(&use_kernels, k, __ATOMIC_RELAXED);
    }
    return k;
}

void cpri_codec_portable(int on)
{
    __atomic_store_n(&use_kernels, on ? 0 : -1, __ATOMIC_RELAXED);
}

const char *cpr_codec_kernels(void)
{
    return kernels() ? "avx2+f16c" : "portable";
}

/* ---- the API ---------------------------------------------------------------- */

cpr_status cpr_codec_encode(cpr_codec codec, unsigned flags, const float *rows, size_t n,
                            uint32_t dim, void *out)
{
    size_t rb = cpr_codec_row_bytes(codec, dim);
    if (!rb || (flags & ~CPR_CODEC_GREEDY) ||
        ((flags & CPR_CODEC_GREEDY) && codec != CPR_CODEC_INT8 && codec != CPR_CODEC_INT4))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_codec_encode: codec %d, flags 0x%x, dim %u: "
                        "give a known codec, dim >= 1, and CPR_CODEC_GREEDY only with int8 "
                        "or int4", (int)codec, flags, dim);
    if (n && (!rows || !out))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_codec_encode: %zu rows need buffers", n);
    int k = kernels();
    (void)k;
    for (size_t i = 0; i < n; i++) {
        const float *x = rows + i * dim;
        uint8_t *o = (uint8_t *)out + i * rb;
        cpr_status st = CPR_OK;
        switch (codec) {
        case CPR_CODEC_F32:
            for (uint32_t j = 0; j < dim; j++)
                if (!isfinite(x[j]))
                    return not_finite(i, j, x[j]);
            memcpy(o, x, rb);
            break;
        case CPR_CODEC_BF16:
#ifdef CODEC_X86
            if (k && enc_bf16_row_avx2(x, dim, o))
                break;
#endif
            st = enc_bf16_row(x, dim, i, o);
            break;
        case CPR_CODEC_F16:
#ifdef CODEC_X86
            if (k && enc_f16_row_avx2(x, dim, o))
                break;
#endif
            st = enc_f16_row(x, dim, i, o);
            break;
        case CPR_CODEC_INT8:
        case CPR_CODEC_INT4: {
            int levels = codec == CPR_CODEC_INT8 ? 255 : 15;
#ifdef CODEC_X86
            if (k && !flags && enc_int_row_avx2(x, dim, levels, o))
                break;
#endif
            st = enc_int_row(x, dim, i, levels, flags, o);
            break;
        }
        }
        if (st)
            return st;
    }
    return CPR_OK;
}

cpr_status cpr_codec_decode(cpr_codec codec, const void *in, size_t n, uint32_t dim,
                            float *rows)
{
    size_t rb = cpr_codec_row_bytes(codec, dim);
    if (!rb)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_codec_decode: codec %d, dim %u: give a "
                        "known codec and dim >= 1", (int)codec, dim);
    if (n && (!rows || !in))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_codec_decode: %zu rows need buffers", n);
    int k = kernels();
    (void)k;
    if (codec == CPR_CODEC_F32) {
        memcpy(rows, in, n * rb);
        return CPR_OK;
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *e = (const uint8_t *)in + i * rb;
        float *x = rows + i * dim;
        switch (codec) {
        case CPR_CODEC_BF16:
#ifdef CODEC_X86
            if (k) {
                dec_bf16_row_avx2(e, dim, x);
                break;
            }
#endif
            for (uint32_t j = 0; j < dim; j++)
                x[j] = bf16_value(get16(e, j));
            break;
        case CPR_CODEC_F16:
#ifdef CODEC_X86
            if (k) {
                dec_f16_row_avx2(e, dim, x);
                break;
            }
#endif
            for (uint32_t j = 0; j < dim; j++)
                x[j] = fp16_ieee_to_fp32_value(get16(e, j));
            break;
        default:
#ifdef CODEC_X86
            if (k) {
                dec_int_row_avx2(e, dim, codec == CPR_CODEC_INT4, x);
                break;
            }
#endif
            dec_int_row(e, dim, codec == CPR_CODEC_INT4, x);
            break;
        }
    }
    return CPR_OK;
}
