/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/crc32c.h - CRC32C (Castagnoli), the checksum of every row batch and
 * blob chunk CPR stores or sends. Computed by Intel ISA-L's crc32_iscsi
 * (SIMD, several GB/s per core). Standard parameters: reflected, initial
 * value and final xor 0xFFFFFFFF, so cpr_crc32c(0, "123456789", 9) ==
 * 0xE3069283. Thread-safe, no state.
 */
#ifndef CPR_CRC32C_H
#define CPR_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Extend `crc` (0 to start) with data[0..len). */
CPR_API uint32_t cpr_crc32c(uint32_t crc, const void *data, size_t len);

/* CRC32C over ids || values || state as little-endian bytes, the checksum a
 * cpr_row_batch carries. */
CPR_API uint32_t cpr_crc32c_rows(const uint64_t *ids, size_t n, const float *values,
                         size_t values_count, const float *state,
                         size_t state_count);

/* The CRC32C of A || B from crc_a = cpr_crc32c(0, A, |A|), crc_b likewise
 * and len_b = |B|, without reading either (O(log len_b) steps). It is linear:
 * cpr_crc32c_combine(crc_a, 0, len_b) ^ crc_ab is the CRC32C of B alone, for
 * crc_ab the CRC32C of A || B. */
CPR_API uint32_t cpr_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

#ifdef __cplusplus
}
#endif
#endif /* CPR_CRC32C_H */
