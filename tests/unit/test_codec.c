/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Row codecs (cpr/codec.h): round trips within each codec's bound (f32 exact;
 * bf16 and f16 the nearest representable value, ties to even, checked
 * against the neighbours of the result; int8 and int4 within half a step),
 * special values (zeros, constant rows, huge and tiny magnitudes, f16's
 * range, NaN and infinities refused with the row and column named), the
 * greedy range search never worse than min/max, and the AVX2/F16C kernels
 * byte for byte against the portable code on random rows of every width.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpr/codec.h"
#include "cpr/rng.h"
#include "cpr_common.h"
#include "testutil.h"

#define MAX_DIM 300
static const uint32_t DIMS[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 130, 257, 300};
static const cpr_codec CODECS[] = {CPR_CODEC_F32, CPR_CODEC_BF16, CPR_CODEC_F16,
                                   CPR_CODEC_INT8, CPR_CODEC_INT4};

static float uniform(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)((cpr_splitmix64(s) >> 40) * (1.0 / 16777216.0));
}

/* Rows of several kinds: narrow, wide, skewed, with outliers. */
static void fill(float *x, size_t n, uint32_t dim, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        float span = (float)pow(10.0, (double)(i % 7) - 3.0);
        for (uint32_t j = 0; j < dim; j++) {
            float v = uniform(&seed, -span, span);
            if (i % 5 == 4 && j % 11 == 3)
                v *= 40; /* an outlier */
            x[i * dim + j] = v;
        }
    }
}

static uint16_t bits16(const void *enc, size_t i)
{
    uint16_t h;
    memcpy(&h, (const uint8_t *)enc + 2 * i, 2);
    return h;
}

static float f32_of(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* d, decoded from pattern h, is the nearest value of its format to x, ties to
 * an even pattern: no neighbour pattern (h +- 1, the same sign) is nearer. */
static void check_nearest(float x, float d, uint16_t h, float (*value)(uint16_t),
                          uint16_t max_finite)
{
    double err = fabs((double)x - d);
    uint16_t mag = h & 0x7fffu, sign = h & 0x8000u;
    if (mag < max_finite) {
        double up = fabs((double)x - value((uint16_t)(sign | (mag + 1))));
        assert_true(err < up || (err == up && (h & 1) == 0));
    }
    if (mag > 0) {
        double down = fabs((double)x - value((uint16_t)(sign | (mag - 1))));
        assert_true(err < down || (err == down && (h & 1) == 0));
    } else { /* zero: the other sign's smallest is no nearer */
        assert_true(err <= fabs((double)x - value((uint16_t)(sign ^ 0x8001u))));
    }
}

static float bf16_value(uint16_t h) { return f32_of((uint32_t)h << 16); }

static float f16_value(uint16_t h)
{
    float out;
    assert_status(CPR_OK, cpr_codec_decode(CPR_CODEC_F16, &h, 1, 1, &out));
    return out;
}

static void check_round_trip(cpr_codec codec, const float *x, size_t n, uint32_t dim,
                             unsigned flags)
{
    size_t rb = cpr_codec_row_bytes(codec, dim);
    uint8_t *enc = malloc(n * rb);
    float *dec = malloc(n * dim * sizeof *dec);
    assert_non_null(enc);
    assert_non_null(dec);
    assert_status(CPR_OK, cpr_codec_encode(codec, flags, x, n, dim, enc));
    assert_status(CPR_OK, cpr_codec_decode(codec, enc, n, dim, dec));
    for (size_t i = 0; i < n; i++) {
        const float *xi = x + i * dim, *di = dec + i * dim;
        const uint8_t *ei = enc + i * rb;
        float scale = 0, lo = xi[0], hi = xi[0];
        if (codec == CPR_CODEC_INT8 || codec == CPR_CODEC_INT4)
            memcpy(&scale, ei, 4);
        for (uint32_t j = 0; j < dim; j++) {
            lo = xi[j] < lo ? xi[j] : lo;
            hi = xi[j] > hi ? xi[j] : hi;
        }
        float maxabs = fabsf(lo) > fabsf(hi) ? fabsf(lo) : fabsf(hi);
        for (uint32_t j = 0; j < dim; j++) {
            switch (codec) {
            case CPR_CODEC_F32:
                assert_memory_equal(&xi[j], &di[j], 4);
                break;
            case CPR_CODEC_BF16:
                check_nearest(xi[j], di[j], bits16(ei, j), bf16_value, 0x7f7f);
                break;
            case CPR_CODEC_F16:
                check_nearest(xi[j], di[j], bits16(ei, j), f16_value, 0x7bff);
                break;
            default:
                if (!flags) /* half a step, up to float rounding */
                    assert_true(fabsf(xi[j] - di[j]) <=
                                0.5f * scale * (1 + 1e-5f) + 4 * FLT_EPSILON * maxabs);
                break;
            }
        }
    }
    free(enc);
    free(dec);
}

static void test_round_trips(void **state)
{
    (void)state;
    static float x[20 * MAX_DIM];
    for (size_t d = 0; d < sizeof DIMS / sizeof DIMS[0]; d++) {
        fill(x, 20, DIMS[d], 7 + d);
        for (size_t c = 0; c < sizeof CODECS / sizeof CODECS[0]; c++)
            check_round_trip(CODECS[c], x, 20, DIMS[d], 0);
    }
}

static void test_row_bytes_and_names(void **state)
{
    (void)state;
    assert_int_equal(cpr_codec_row_bytes(CPR_CODEC_F32, 64), 256);
    assert_int_equal(cpr_codec_row_bytes(CPR_CODEC_BF16, 64), 128);
    assert_int_equal(cpr_codec_row_bytes(CPR_CODEC_F16, 64), 128);
    assert_int_equal(cpr_codec_row_bytes(CPR_CODEC_INT8, 64), 72);
    assert_int_equal(cpr_codec_row_bytes(CPR_CODEC_INT4, 64), 40);
    assert_int_equal(cpr_codec_row_bytes(CPR_CODEC_INT4, 7), 12);
    assert_int_equal(cpr_codec_row_bytes(CPR_CODEC_INT8, 0), 0);
    assert_int_equal(cpr_codec_row_bytes((cpr_codec)9, 4), 0);
    for (size_t c = 0; c < sizeof CODECS / sizeof CODECS[0]; c++) {
        cpr_codec back;
        assert_status(CPR_OK, cpr_codec_parse(cpr_codec_name(CODECS[c]), &back));
        assert_int_equal(back, CODECS[c]);
    }
    cpr_codec out;
    assert_status(CPR_INVALID_ARGUMENT, cpr_codec_parse("int3", &out));
    char names[32], tiny[6];
    assert_string_equal(cpr_codecs_name(0, names, sizeof names), "-");
    assert_string_equal(cpr_codecs_name(1u << CPR_CODEC_INT8, names, sizeof names), "int8");
    assert_string_equal(cpr_codecs_name((1u << CPR_CODEC_F32) | (1u << CPR_CODEC_INT4), names,
                                        sizeof names), "f32+int4");
    assert_string_equal(cpr_codecs_name(1u << 9, names, sizeof names), "unknown");
    assert_string_equal(cpr_codecs_name(0x1f, tiny, sizeof tiny), "f32+b"); /* truncated */
    float x[4] = {1, 2, 3, 4};
    uint8_t buf[64];
    assert_status(CPR_INVALID_ARGUMENT, cpr_codec_encode(CPR_CODEC_F16, CPR_CODEC_GREEDY, x, 1,
                                                         4, buf));
    assert_status(CPR_INVALID_ARGUMENT, cpr_codec_encode(CPR_CODEC_INT8, 0, x, 1, 0, buf));
}

static void test_special_values(void **state)
{
    (void)state;
    float zeros[16] = {0}, constant[16], huge[16], tiny[16], mixed[16];
    for (int j = 0; j < 16; j++) {
        constant[j] = 3.25f;
        huge[j] = (j % 2 ? -1 : 1) * 1e38f / (float)(j + 1);
        tiny[j] = (j % 2 ? -1 : 1) * 1e-40f * (float)(j + 1); /* float subnormals */
        mixed[j] = j == 5 ? -0.0f : (float)j * 1e-3f;
    }
    for (size_t c = 0; c < sizeof CODECS / sizeof CODECS[0]; c++) {
        check_round_trip(CODECS[c], zeros, 1, 16, 0);
        check_round_trip(CODECS[c], constant, 1, 16, 0);
        check_round_trip(CODECS[c], tiny, 1, 16, 0);
        check_round_trip(CODECS[c], mixed, 1, 16, 0);
        if (CODECS[c] != CPR_CODEC_F16)
            check_round_trip(CODECS[c], huge, 1, 16, 0);
    }
    /* A constant row decodes exactly under the int codecs (scale 0). */
    float back[16];
    uint8_t enc[64];
    assert_status(CPR_OK, cpr_codec_encode(CPR_CODEC_INT4, 0, constant, 1, 16, enc));
    assert_status(CPR_OK, cpr_codec_decode(CPR_CODEC_INT4, enc, 1, 16, back));
    assert_memory_equal(back, constant, sizeof back);
    /* f16's range: 65519 fits (as 65504), 65520 does not. */
    float edge[8] = {65519.0f, -65504.0f, 6.1e-5f, 5.96e-8f, 1e-9f, 1, 2, 3};
    check_round_trip(CPR_CODEC_F16, edge, 1, 8, 0);
    edge[6] = 65520.0f;
    assert_status(CPR_INVALID_ARGUMENT, cpr_codec_encode(CPR_CODEC_F16, 0, edge, 1, 8, enc));
    assert_non_null(strstr(cpr_errmsg(), "f16"));
    /* bf16: beyond its largest value. */
    float big[1] = {FLT_MAX};
    assert_status(CPR_INVALID_ARGUMENT, cpr_codec_encode(CPR_CODEC_BF16, 0, big, 1, 1, enc));
    /* A row whose range overflows float. */
    float wide[2] = {-3e38f, 3e38f};
    assert_status(CPR_INVALID_ARGUMENT, cpr_codec_encode(CPR_CODEC_INT8, 0, wide, 1, 2, enc));
    /* NaN and infinities, anywhere in a row, under every codec and kernel. */
    for (int portable = 0; portable < 2; portable++) {
        cpri_codec_portable(portable);
        for (size_t c = 0; c < sizeof CODECS / sizeof CODECS[0]; c++)
            for (int bad = 0; bad < 3; bad++) {
                float row[2 * 17];
                for (int j = 0; j < 34; j++)
                    row[j] = (float)j;
                row[17 + 13] = bad == 0 ? NAN : bad == 1 ? INFINITY : -INFINITY;
                uint8_t out[2 * 80];
                assert_status(CPR_INVALID_ARGUMENT,
                              cpr_codec_encode(CODECS[c], 0, row, 2, 17, out));
                assert_non_null(strstr(cpr_errmsg(), "row 1, value 13"));
            }
    }
    cpri_codec_portable(0);
}

/* Q5: a finite row reaching FLT_MAX never decodes to inf (its top level
 * rounded past FLT_MAX), under either int codec and either path. */
static void test_top_level_stays_finite(void **state)
{
    (void)state;
    const cpr_codec ints[2] = {CPR_CODEC_INT8, CPR_CODEC_INT4};
    float rows[3][17];
    for (int j = 0; j < 17; j++) {
        rows[0][j] = j % 2 ? FLT_MAX : 0x1.faf4eep+126f; /* rounded to inf before */
        rows[1][j] = FLT_MAX - (float)j * 0x1p+104f;
        rows[2][j] = j ? FLT_MAX : 0x1p+127f;
    }
    for (int portable = 0; portable < 2; portable++) {
        cpri_codec_portable(portable);
        for (int c = 0; c < 2; c++)
            for (int r = 0; r < 3; r++) {
                uint8_t enc[2 * 17 + 16];
                float back[17];
                assert_status(CPR_OK, cpr_codec_encode(ints[c], 0, rows[r], 1, 17, enc));
                assert_status(CPR_OK, cpr_codec_decode(ints[c], enc, 1, 17, back));
                for (int j = 0; j < 17; j++) {
                    assert_true(isfinite(back[j]));
                    /* within a step (and its rounding) of the value */
                    float scale;
                    memcpy(&scale, enc, 4);
                    assert_true(fabsf(back[j] - rows[r][j]) <= scale * 1.01f);
                }
            }
    }
    cpri_codec_portable(0);
}

/* The greedy search never loses more than min/max on the rows it is for. */
static void test_greedy(void **state)
{
    (void)state;
    enum { N = 40, DIM = 64 };
    static float x[N * DIM], d0[N * DIM], d1[N * DIM];
    static uint8_t e[N * 72];
    fill(x, N, DIM, 3);
    for (int codec = CPR_CODEC_INT8; codec <= CPR_CODEC_INT4; codec++) {
        assert_status(CPR_OK, cpr_codec_encode((cpr_codec)codec, 0, x, N, DIM, e));
        assert_status(CPR_OK, cpr_codec_decode((cpr_codec)codec, e, N, DIM, d0));
        assert_status(CPR_OK, cpr_codec_encode((cpr_codec)codec, CPR_CODEC_GREEDY, x, N, DIM, e));
        assert_status(CPR_OK, cpr_codec_decode((cpr_codec)codec, e, N, DIM, d1));
        double total0 = 0, total1 = 0;
        for (int i = 0; i < N; i++) {
            double l0 = 0, l1 = 0;
            for (int j = 0; j < DIM; j++) {
                double a = x[i * DIM + j] - d0[i * DIM + j], b = x[i * DIM + j] - d1[i * DIM + j];
                l0 += a * a;
                l1 += b * b;
            }
            assert_true(l1 <= l0 * (1 + 1e-9) + 1e-30);
            total0 += l0;
            total1 += l1;
        }
        assert_true(total1 < total0); /* the outlier rows gain */
    }
}

/* Q1: the kernels write the bytes the portable code writes, and decode alike
 * (Q4: rows of zeros of both signs too). */
static void test_kernels_match_portable(void **state)
{
    (void)state;
    if (strcmp(cpr_codec_kernels(), "portable") == 0)
        skip();
    enum { N = 64 };
    static float x[N * MAX_DIM], da[N * MAX_DIM], db[N * MAX_DIM];
    static uint8_t ea[N * 4 * MAX_DIM], eb[N * 4 * MAX_DIM];
    for (size_t d = 0; d < sizeof DIMS / sizeof DIMS[0]; d++) {
        uint32_t dim = DIMS[d];
        fill(x, N, dim, 100 + d);
        for (uint32_t j = 0; j < dim; j++) { /* Q4: rows whose min or max is a zero of */
            x[j] = (j % 3) ? -0.0f : 0.0f;   /* either sign, in orders MINPS and the */
            x[dim + j] = (j % 4 == 3) ? 0.5f : (j % 2) ? 0.0f : -0.0f; /* loop differ on */
            x[2 * dim + j] = (j % 5 == 1) ? -0.25f : (j % 2) ? -0.0f : 0.0f;
        }
        for (size_t c = 0; c < sizeof CODECS / sizeof CODECS[0]; c++) {
            size_t bytes = N * cpr_codec_row_bytes(CODECS[c], dim);
            cpri_codec_portable(0);
            assert_status(CPR_OK, cpr_codec_encode(CODECS[c], 0, x, N, dim, ea));
            assert_status(CPR_OK, cpr_codec_decode(CODECS[c], ea, N, dim, da));
            cpri_codec_portable(1);
            assert_status(CPR_OK, cpr_codec_encode(CODECS[c], 0, x, N, dim, eb));
            assert_status(CPR_OK, cpr_codec_decode(CODECS[c], ea, N, dim, db));
            assert_memory_equal(ea, eb, bytes);
            assert_memory_equal(da, db, (size_t)N * dim * sizeof(float));
        }
    }
    cpri_codec_portable(0);
}

/* Q6: encoded rows at an odd address encode and decode as aligned ones do,
 * with the kernels and with the portable code (UBSan's alignment check runs
 * this under `make asan`). */
static void test_unaligned_buffers(void **state)
{
    (void)state;
    enum { N = 5, DIM = 13 }; /* a vector step and a tail, odd row bytes */
    static float x[N * DIM], da[N * DIM], db[N * DIM];
    static uint8_t ea[N * 4 * DIM + 16], raw[N * 4 * DIM + 16];
    fill(x, N, DIM, 77);
    for (int portable = 0; portable < 2; portable++) {
        cpri_codec_portable(portable);
        for (size_t c = 0; c < sizeof CODECS / sizeof CODECS[0]; c++) {
            size_t bytes = N * cpr_codec_row_bytes(CODECS[c], DIM);
            uint8_t *odd = raw + 1;
            assert_status(CPR_OK, cpr_codec_encode(CODECS[c], 0, x, N, DIM, ea));
            assert_status(CPR_OK, cpr_codec_encode(CODECS[c], 0, x, N, DIM, odd));
            assert_memory_equal(ea, odd, bytes);
            assert_status(CPR_OK, cpr_codec_decode(CODECS[c], ea, N, DIM, da));
            assert_status(CPR_OK, cpr_codec_decode(CODECS[c], odd, N, DIM, db));
            assert_memory_equal(da, db, sizeof da);
        }
    }
    cpri_codec_portable(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_row_bytes_and_names),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_top_level_stays_finite),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_kernels_match_portable),
        cmocka_unit_test(test_unaligned_buffers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
