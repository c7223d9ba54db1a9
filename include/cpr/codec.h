/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/codec.h - encodings of embedding rows (issue #12): the value codecs a
 * row block may carry (cpr_codec, cpr/block.h). Each encodes rows of `dim`
 * float32 values into a fixed number of bytes per row and decodes them back
 * to float32:
 *
 *   f32    4 dim bytes, exact.
 *   bf16   2 dim bytes: the upper half of the f32, rounded to nearest even.
 *   f16    2 dim bytes: IEEE binary16, rounded to nearest even (subnormals
 *          kept); |x| >= 65520 does not fit and is refused.
 *   int8   8 + dim bytes: scale and bias (f32 each), then one byte a value,
 *          q = round((x - bias) / scale), x' = q * scale + bias, with bias the
 *          row's minimum and scale (max - min) / 255: every value within half
 *          a step (scale / 2, up to float rounding) of its original.
 *   int4   8 + ceil(dim / 2) bytes: the same with 15 steps, two values a byte
 *          (the low nibble first).
 *
 * CPR_CODEC_GREEDY (int8, int4) narrows each row's range [bias, bias + 255 or
 * 15 steps] by a greedy search that minimises the row's squared
 * reconstruction error (as production embedding quantizers do): values left
 * outside the range are clamped to it, so the half-step bound then holds
 * only inside it.
 *
 * NaN and infinite values are refused (CPR_INVALID_ARGUMENT naming the row
 * and column): a checkpoint of them would restore garbage, quietly.
 * Kernels: AVX2 (and F16C for f16) where the CPU has them, chosen at run
 * time, giving the same bytes as the portable code (tested); the portable
 * half conversion is libfp16's. Thread-safe, no allocation.
 */
#ifndef CPR_CODEC_H
#define CPR_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/block.h"
#include "cpr/export.h"
#include "cpr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CPR_CODEC_GREEDY 0x1u /* int8/int4: search each row's range (see above) */

/* "f32", "bf16", "f16", "int8", "int4"; "unknown" otherwise. Never NULL. */
CPR_API const char *cpr_codec_name(cpr_codec codec);
/* The codec named `name` into *out; CPR_INVALID_ARGUMENT (the names in the
 * message) otherwise. */
CPR_API cpr_status cpr_codec_parse(const char *name, cpr_codec *out);
/* A set of codecs (bit 1 << c for each codec c: cpr_part_info.codecs) as
 * their names joined by '+', e.g. "f32+int8", or "-" for none, into buf
 * (len bytes; truncated to fit). Returns buf. */
CPR_API const char *cpr_codecs_name(uint32_t codecs, char *buf, size_t len);

/* Bytes of one encoded row of `dim` values (0 for an unknown codec or dim 0). */
CPR_API size_t cpr_codec_row_bytes(cpr_codec codec, uint32_t dim);

/*
 * Encode n rows of dim floats (rows: n x dim, row-major) into out
 * (n x cpr_codec_row_bytes bytes). flags: 0 or CPR_CODEC_GREEDY. Errors:
 * CPR_INVALID_ARGUMENT (unknown codec or flag, dim 0, a NaN or infinite
 * value, a value f16 cannot hold, a row whose range overflows float); out
 * may be partly written then.
 */
CPR_API cpr_status cpr_codec_encode(cpr_codec codec, unsigned flags, const float *rows, size_t n,
                                    uint32_t dim, void *out);

/* Decode n encoded rows into rows (n x dim floats). CPR_INVALID_ARGUMENT for
 * an unknown codec or dim 0. */
CPR_API cpr_status cpr_codec_decode(cpr_codec codec, const void *in, size_t n, uint32_t dim,
                                    float *rows);

/* Which kernels run here: "avx2+f16c" or "portable" (for benchmarks' JSON). */
CPR_API const char *cpr_codec_kernels(void);

#ifdef __cplusplus
}
#endif
#endif /* CPR_CODEC_H */
