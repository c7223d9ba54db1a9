/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRC32C through Intel ISA-L. This is the only file that includes ISA-L.
 * crc32_iscsi() takes and returns the raw register (no final inversion), so
 * the standard CRC is ~crc32_iscsi(data, len, ~crc); chaining therefore
 * works across calls with the finished value.
 */
#include <isa-l/crc.h>
#include <limits.h>

#include "cpr/crc32c.h"

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
