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
