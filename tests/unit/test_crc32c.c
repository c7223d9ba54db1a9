/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of cpr/crc32c.h: the standard CRC32C check value, chaining
 * across split buffers, empty input, and the row-batch checksum being the
 * plain CRC32C of ids || values || state. Every row batch and blob chunk
 * CPR stores is verified with these functions, so they must match the
 * standard exactly (other implementations check the same bytes).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

static void test_check_value(void **unused)
{
    (void)unused;
    assert_int_equal(cpr_crc32c(0, "123456789", 9), 0xE3069283u);
    /* A second well-known vector: 32 zero bytes (RFC 3720, B.4). */
    unsigned char zeros[32] = {0};
    assert_int_equal(cpr_crc32c(0, zeros, sizeof zeros), 0x8A9136AAu);
}

static void test_chaining(void **unused)
{
    (void)unused;
    enum { LEN = 10007 };
    unsigned char *buf = malloc(LEN);
    assert_non_null(buf);
    for (size_t i = 0; i < LEN; i++)
        buf[i] = (unsigned char)(i * 31u + (i >> 5));
    uint32_t whole = cpr_crc32c(0, buf, LEN);
    /* Split points at 0, odd sizes, and the end. */
    const size_t splits[] = {0, 1, 3, 8, 63, 4096, 5001, LEN - 1, LEN};
    for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
        uint32_t crc = cpr_crc32c(0, buf, splits[s]);
        crc = cpr_crc32c(crc, buf + splits[s], LEN - splits[s]);
        assert_int_equal(crc, whole);
    }
    /* Three pieces. */
    uint32_t crc = cpr_crc32c(0, buf, 17);
    crc = cpr_crc32c(crc, buf + 17, 1000);
    crc = cpr_crc32c(crc, buf + 1017, LEN - 1017);
    assert_int_equal(crc, whole);
    assert_int_equal(cpr_crc32c(0, "12345", 5) == cpr_crc32c(0, "12346", 5), 0);
    free(buf);
}

static void test_empty(void **unused)
{
    (void)unused;
    assert_int_equal(cpr_crc32c(0, "", 0), 0u);
    assert_int_equal(cpr_crc32c(0, NULL, 0), 0u);
    /* Extending with nothing leaves any value unchanged. */
    uint32_t crc = cpr_crc32c(0, "123456789", 9);
    assert_int_equal(cpr_crc32c(crc, NULL, 0), crc);
    assert_int_equal(cpr_crc32c(0x12345678u, "", 0), 0x12345678u);
}

static void test_rows_concatenation(void **unused)
{
    (void)unused;
    const uint64_t ids[3] = {7, 0, 0x0123456789abcdefULL};
    const float values[6] = {1.5f, -2.25f, 0.0f, 3.0e7f, -0.0f, 1e-30f};
    const float state[3] = {0.125f, 42.0f, -7.75f};
    unsigned char bytes[sizeof ids + sizeof values + sizeof state];
    /* The store supports little-endian hosts only, so the in-memory bytes
     * are the wire bytes. */
    memcpy(bytes, ids, sizeof ids);
    memcpy(bytes + sizeof ids, values, sizeof values);
    memcpy(bytes + sizeof ids + sizeof values, state, sizeof state);

    uint32_t rows = cpr_crc32c_rows(ids, 3, values, 6, state, 3);
    assert_int_equal(rows, cpr_crc32c(0, bytes, sizeof bytes));

    /* Without state: ids || values only, state may be NULL. */
    uint32_t no_state = cpr_crc32c_rows(ids, 3, values, 6, NULL, 0);
    assert_int_equal(no_state, cpr_crc32c(0, bytes, sizeof ids + sizeof values));
    /* state_count 0 ignores a non-NULL pointer too. */
    assert_int_equal(cpr_crc32c_rows(ids, 3, values, 6, state, 0), no_state);
    /* State matters when present. */
    assert_int_equal(rows == no_state, 0);

    /* An empty batch has the CRC of no bytes. */
    assert_int_equal(cpr_crc32c_rows(NULL, 0, NULL, 0, NULL, 0), 0u);
}

/* cpr_crc32c_combine gives the CRC of A || B from the CRCs of A and B, for
 * every split (empty pieces, odd sizes, a B of several MiB), and its
 * linearity takes a prefix back out (what a block's rows' CRC uses). */
static void test_combine(void **unused)
{
    (void)unused;
    enum { LEN = (5 << 20) + 13 };
    unsigned char *buf = malloc(LEN);
    assert_non_null(buf);
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < LEN; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    uint32_t whole = cpr_crc32c(0, buf, LEN);
    const size_t splits[] = {0, 1, 2, 7, 64, 4095, 65536, LEN / 2, LEN - 1, LEN};
    for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
        size_t a = splits[s], b = LEN - a;
        uint32_t crc_a = cpr_crc32c(0, buf, a), crc_b = cpr_crc32c(0, buf + a, b);
        assert_int_equal(cpr_crc32c_combine(crc_a, crc_b, b), whole);
        assert_int_equal(cpr_crc32c_combine(crc_a, 0, b) ^ whole, crc_b);
    }
    /* Small known pieces: "1234" || "56789" is the check value. */
    assert_int_equal(cpr_crc32c_combine(cpr_crc32c(0, "1234", 4), cpr_crc32c(0, "56789", 5), 5),
                     0xE3069283u);
    /* Nothing appended: the CRC of A. */
    assert_int_equal(cpr_crc32c_combine(0xE3069283u, 0, 0), 0xE3069283u);
    free(buf);
}

static void test_rows_sensitive(void **unused)
{
    (void)unused;
    uint64_t ids[2] = {1, 2};
    float values[2] = {1.0f, 2.0f};
    uint32_t base = cpr_crc32c_rows(ids, 2, values, 2, NULL, 0);
    ids[1] = 3;
    assert_int_equal(cpr_crc32c_rows(ids, 2, values, 2, NULL, 0) == base, 0);
    ids[1] = 2;
    values[0] = 1.0000001f;
    assert_int_equal(cpr_crc32c_rows(ids, 2, values, 2, NULL, 0) == base, 0);
    values[0] = 1.0f;
    assert_int_equal(cpr_crc32c_rows(ids, 2, values, 2, NULL, 0), base);
}

/*
 * The vector registers' upper halves are clean after a CRC. ISA-L's AVX-512
 * kernels leave them dirty, and a thread that then runs legacy SSE code (the
 * dense layers of a baseline x86-64 trainer) paid 3.7x for it. XINUSE
 * (XGETBV with ECX=1) bit 2 says whether the YMM upper state is in use;
 * where the CPU cannot tell, the test checks nothing more than the value.
 */
#if defined(__x86_64__)
static int xinuse_supported(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX))
        return 0;
    if (__get_cpuid_max(0, NULL) < 0xd)
        return 0;
    __cpuid_count(0xd, 1, a, b, c, d);
    return (a >> 2) & 1;
}

static uint64_t xinuse(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    return ((uint64_t)hi << 32) | lo;
}

/* Whether this CPU clears XINUSE bit 2 on vzeroupper (the manual allows a
 * CPU to report the state in use anyway): only then can the test tell. */
__attribute__((target("avx"), noinline)) static int xinuse_clears(void)
{
    __asm__ volatile("vzeroupper" ::: "memory");
    return (xinuse() & 0x4) == 0;
}
#endif

static void test_upper_state_clean(void **unused)
{
    (void)unused;
    enum { LEN = 1 << 20 };
    unsigned char *buf = calloc(1, LEN);
    assert_non_null(buf);
    uint32_t crc = cpr_crc32c(0, buf, LEN);
#if defined(__x86_64__)
    if (xinuse_supported() && xinuse_clears()) {
        crc = cpr_crc32c(0, buf, LEN);
        assert_int_equal(xinuse() & 0x4, 0); /* YMM_Hi128 not in use */
    }
#endif
    assert_int_equal(crc, cpr_crc32c(0, buf, LEN));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_value),
        cmocka_unit_test(test_chaining),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_rows_concatenation),
        cmocka_unit_test(test_rows_sensitive),
        cmocka_unit_test(test_combine),
        cmocka_unit_test(test_upper_state_clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
