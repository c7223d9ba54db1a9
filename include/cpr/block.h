/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/block.h - the row block: CPR's one encoding of embedding rows, from the
 * trainer's gather to the store's segment files and back (docs/format.md says
 * it byte by byte).
 *
 * A block is a run of rows of one table, row ids strictly ascending:
 *
 *   header   CPR_BLOCK_HEADER_BYTES (64), little-endian, below
 *   ids      n x u64
 *   versions n x u64          only with CPR_BLOCK_VERSIONS: the checkpoint id
 *                             each row was saved at (folded blocks)
 *   values   n x dim x f32    row-major
 *   state    n x state_dim x f32 (optimizer state)
 *
 * One CRC32C covers the header (with its crc field taken as zero) and the
 * whole payload. The writer computes it once; every reader checks it before
 * a row of the block is used. Nothing re-encodes a block on its way to disk
 * or back.
 *
 * Thread-safety: the functions are pure; a block buffer is the caller's.
 */
#ifndef CPR_BLOCK_H
#define CPR_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/export.h"
#include "cpr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CPR_BLOCK_MAGIC 0x4b4c4243u /* "CBLK" as little-endian bytes */
#define CPR_BLOCK_FORMAT 1          /* version of this layout */
#define CPR_BLOCK_HEADER_BYTES 64u
#define CPR_BLOCK_MAX_BYTES (64u << 20) /* largest block a reader accepts */

/* Codecs of the values (state is always f32): cpr/codec.h encodes and
 * decodes rows. A block may carry any of them (cpr_block_seal_codec); the
 * store keeps a block as it came and decodes rows to f32 where it merges
 * them or delivers them as rows (a fold keeps each row's codec). */
typedef enum cpr_codec {
    CPR_CODEC_F32 = 0,   /* exact */
    CPR_CODEC_BF16 = 1,  /* bfloat16, round to nearest even */
    CPR_CODEC_F16 = 2,   /* IEEE half, round to nearest even */
    CPR_CODEC_INT8 = 3,  /* row-wise asymmetric: f32 scale and bias, u8 per value */
    CPR_CODEC_INT4 = 4   /* row-wise asymmetric: f32 scale and bias, 4 bits per value */
} cpr_codec;

/* Header flags. */
#define CPR_BLOCK_VERSIONS 0x1u /* a u64 checkpoint id per row follows the ids */

/* The decoded header. */
typedef struct cpr_block_header {
    uint16_t format;      /* CPR_BLOCK_FORMAT */
    uint16_t codec;       /* cpr_codec */
    uint32_t flags;       /* CPR_BLOCK_* flags */
    uint32_t table;
    uint32_t n;           /* rows, >= 1 */
    uint32_t dim;         /* values per row, 1..65536 */
    uint32_t state_dim;   /* state values per row, 0..65536 */
    uint64_t first_row;   /* ids[0] */
    uint64_t last_row;    /* ids[n-1] */
    uint64_t bytes;       /* whole block, header included */
    uint32_t crc32c;
} cpr_block_header;

/* A parsed block: pointers into the caller's buffer. */
typedef struct cpr_block_view {
    cpr_block_header h;
    const uint64_t *ids;
    const uint64_t *versions; /* NULL unless CPR_BLOCK_VERSIONS */
    const float *values;      /* f32 blocks; NULL for another codec (encoded) */
    const float *state;       /* NULL when state_dim is 0 */
    const void *encoded;      /* the values as stored: n rows of row_bytes */
    size_t row_bytes;         /* cpr_codec_row_bytes(h.codec, h.dim) */
} cpr_block_view;

/* Bytes of a block of n rows (0 if it would exceed CPR_BLOCK_MAX_BYTES). */
CPR_API size_t cpr_block_size(uint32_t n, uint32_t dim, uint32_t state_dim, uint32_t flags);

/*
 * Write the header of a block whose ids, versions, values and state are
 * already in place in buf[CPR_BLOCK_HEADER_BYTES ...] (cpr_block_layout
 * gives the offsets) and compute its CRC32C. `buf` must hold
 * cpr_block_size(...) bytes. Errors: CPR_INVALID_ARGUMENT (n 0, dims out of
 * range, ids not strictly ascending, too large).
 */
CPR_API cpr_status cpr_block_seal(void *buf, uint32_t table, uint32_t n, uint32_t dim,
                          uint32_t state_dim, uint32_t flags);

/* Offsets of the arrays of a block of this shape, from the block start. */
typedef struct cpr_block_layout {
    size_t ids, versions, values, state, bytes;
} cpr_block_layout;
CPR_API void cpr_block_layout_of(uint32_t n, uint32_t dim, uint32_t state_dim, uint32_t flags,
                         cpr_block_layout *out);

/*
 * The same for values in `codec` (cpr/codec.h): the values section holds n
 * encoded rows of cpr_codec_row_bytes(codec, dim) bytes, padded with zeros
 * to a multiple of 4 so that the f32 state stays aligned (f32 blocks have no
 * padding: these are cpr_block_layout_of, cpr_block_size and cpr_block_seal
 * for CPR_CODEC_F32). cpr_block_size_codec is 0 for an unknown codec or a
 * block over CPR_BLOCK_MAX_BYTES. cpr_block_seal_codec also refuses an
 * unknown codec (CPR_INVALID_ARGUMENT); it writes the padding itself.
 */
CPR_API void cpr_block_layout_codec(uint32_t n, uint32_t dim, uint32_t state_dim, uint32_t flags,
                                    cpr_codec codec, cpr_block_layout *out);
CPR_API size_t cpr_block_size_codec(uint32_t n, uint32_t dim, uint32_t state_dim, uint32_t flags,
                                    cpr_codec codec);
CPR_API cpr_status cpr_block_seal_codec(void *buf, uint32_t table, uint32_t n, uint32_t dim,
                                        uint32_t state_dim, uint32_t flags, cpr_codec codec);

/*
 * Rows [first, first + k) of an opened block's values as f32 (decoded when
 * the block is not f32) into out (k x dim floats). CPR_INVALID_ARGUMENT for
 * rows outside the block.
 */
CPR_API cpr_status cpr_block_values(const cpr_block_view *v, uint32_t first, uint32_t k,
                                    float *out);

/*
 * Write `h` as a 64-byte header into hdr (all fields as given, crc32c
 * included). For writers that stream the payload: write the header with
 * crc32c 0, take CRC32C of those 64 bytes, extend it over ids, versions,
 * values and state in that order, then write the header again with the
 * result. `h->bytes` must be cpr_block_size() of the shape.
 */
CPR_API void cpr_block_header_write(void *hdr, const cpr_block_header *h);

/*
 * Decode only the header of `buf` (at least CPR_BLOCK_HEADER_BYTES) and check
 * what can be checked without the payload: magic, format, a known codec,
 * flags, shape, and that `bytes` matches the shape. No CRC check. CPR_CORRUPT
 * with a message naming the field on failure.
 */
CPR_API cpr_status cpr_block_header_parse(const void *buf, size_t len, cpr_block_header *out);

/*
 * Parse and verify a whole block of exactly `len` bytes: the header as above,
 * the CRC32C over everything, and ids strictly ascending. On success *out
 * points into buf. CPR_CORRUPT with a message on failure.
 */
CPR_API cpr_status cpr_block_open(const void *buf, size_t len, cpr_block_view *out);

#ifdef __cplusplus
}
#endif
#endif /* CPR_BLOCK_H */
