/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRC32C through Intel ISA-L. This is the only file that includes ISA-L.
 * crc32_iscsi() takes and returns the raw register (no final inversion), so
 * the standard CRC is ~crc32_iscsi(data, len, ~crc); chaining therefore
 * works across calls with the finished value.
 */
#include <isa-l/crc.h>
#include <limits.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "cpr/crc32c.h"

/*
 * ISA-L's AVX-512 CRC kernels return with the upper halves of the vector
 * registers dirty (no vzeroupper). Until something clears them, every legacy
 * SSE instruction the calling thread runs pays a false dependency on those
 * halves: a DLRM trainer built for baseline x86-64 ran its dense layers 3.7x
 * slower after saves that checksummed on its thread (docs/performance.md,
 * "The dirty upper state"). vzeroupper is an AVX instruction, hence the
 * check; the check's answer is cached by the compiler's runtime.
 */
#if defined(__x86_64__) || defined(__i386__)
/* The compiler's own vzeroupper: it knows what the instruction clobbers. */
__attribute__((target("avx"), noinline)) static void zero_upper(void)
{
    _mm256_zeroupper();
}
#endif

static void clean_upper_state(void)
{
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx"))
        zero_upper();
#endif
}

uint32_t cpr_crc32c(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint32_t reg = ~crc;
    while (len > 0) { /* ISA-L takes an int length */
        int step = len > (size_t)INT_MAX ? INT_MAX & ~4095 : (int)len;
        reg = crc32_iscsi((unsigned char *)p, step, reg);
        p += step;
        len -= (size_t)step;
    }
    clean_upper_state();
    return ~reg;
}

uint32_t cpr_crc32c_rows(const uint64_t *ids, size_t n, const float *values,
                         size_t values_count, const float *state,
                         size_t state_count)
{
    /* Little-endian hosts only (checked at build time in CMakeLists.txt):
     * the in-memory bytes are the wire bytes. */
    uint32_t crc = cpr_crc32c(0, ids, n * sizeof *ids);
    crc = cpr_crc32c(crc, values, values_count * sizeof *values);
    if (state_count)
        crc = cpr_crc32c(crc, state, state_count * sizeof *state);
    return crc;
}

/* ---- combining: arithmetic modulo the Castagnoli polynomial --------------------------
 * In the reflected representation the CRC uses, bit 31 is the coefficient
 * of x^0 and bit 0 that of x^31; shifting right multiplies by x. A CRC of
 * A || B is CRC(A) times x^(8|B|) plus CRC(B), modulo the polynomial: the
 * initial value and the final xor cancel out of the sum (the method of
 * zlib's crc32_combine, here for CRC32C). */

#define CRC32C_POLY 0x82f63b78u /* reflected */

/* a * b modulo the polynomial. */
static uint32_t mult_mod(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    if (!a)
        return 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                return p;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
}

/* x^(8 * len) modulo the polynomial, by squaring. */
static uint32_t x8n_mod(size_t len)
{
    uint32_t p = 1u << 31, sq = 1u << 23; /* x^0, x^8 */
    while (len) {
        if (len & 1)
            p = mult_mod(sq, p);
        sq = mult_mod(sq, sq);
        len >>= 1;
    }
    return p;
}

uint32_t cpr_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b)
{
    return mult_mod(x8n_mod(len_b), crc_a) ^ crc_b;
}
