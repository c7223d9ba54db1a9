/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The row block (cpr/block.h; byte layout in docs/format.md). Header, 64
 * bytes, little-endian (the build refuses big-endian hosts):
 *
 *    0 u32 magic "CBLK"     4 u16 format      6 u16 codec
 *    8 u32 flags           12 u32 table      16 u32 n
 *   20 u32 dim             24 u32 state_dim  28 u32 crc32c
 *   32 u64 first_row       40 u64 last_row   48 u64 bytes
 *   56 u64 reserved (0)
 *
 * crc32c = CRC32C(header with bytes 28..32 zero || payload).
 */
#include <string.h>

#include "cpr/block.h"
#include "cpr/codec.h"
#include "cpr/crc32c.h"
#include "cpr_common.h"

#define MAX_DIM 65536u
#define OFF_CRC 28u

static uint32_t get32(const unsigned char *p, size_t off)
{
    uint32_t v;
    memcpy(&v, p + off, 4);
    return v;
}

static uint64_t get64(const unsigned char *p, size_t off)
{
    uint64_t v;
    memcpy(&v, p + off, 8);
    return v;
}

void cpr_block_layout_codec(uint32_t n, uint32_t dim, uint32_t state_dim, uint32_t flags,
                            cpr_codec codec, cpr_block_layout *out)
{
    size_t rows = n, values = rows * cpr_codec_row_bytes(codec, dim);
    out->ids = CPR_BLOCK_HEADER_BYTES;
    out->versions = out->ids + rows * 8;
    out->values = out->versions + ((flags & CPR_BLOCK_VERSIONS) ? rows * 8 : 0);
    out->state = out->values + ((values + 3) & ~(size_t)3); /* the state stays aligned */
    out->bytes = out->state + rows * state_dim * 4;
}

void cpr_block_layout_of(uint32_t n, uint32_t dim, uint32_t state_dim, uint32_t flags,
                         cpr_block_layout *out)
{
    cpr_block_layout_codec(n, dim, state_dim, flags, CPR_CODEC_F32, out);
}

size_t cpr_block_size_codec(uint32_t n, uint32_t dim, uint32_t state_dim, uint32_t flags,
                            cpr_codec codec)
{
    cpr_block_layout l;
    size_t row = cpr_codec_row_bytes(codec, dim);
    /* n < 2^32 and dims <= 2^16 + 2^16: the products fit in 64 bits; the
     * limit check keeps every later size computation small. */
    uint64_t per_row = ((flags & CPR_BLOCK_VERSIONS) ? 16 : 8) + row + 4 * (uint64_t)state_dim;
    if (!row || (uint64_t)n * per_row > CPR_BLOCK_MAX_BYTES - CPR_BLOCK_HEADER_BYTES - 4)
        return 0;
    cpr_block_layout_codec(n, dim, state_dim, flags, codec, &l);
    return l.bytes <= CPR_BLOCK_MAX_BYTES ? l.bytes : 0;
}

size_t cpr_block_size(uint32_t n, uint32_t dim, uint32_t state_dim, uint32_t flags)
{
    return cpr_block_size_codec(n, dim, state_dim, flags, CPR_CODEC_F32);
}

/* CRC of the header with the crc field as zero. */
static uint32_t header_crc(const unsigned char *b)
{
    static const unsigned char zero[4];
    uint32_t crc = cpr_crc32c(0, b, OFF_CRC);
    crc = cpr_crc32c(crc, zero, 4);
    return cpr_crc32c(crc, b + OFF_CRC + 4, CPR_BLOCK_HEADER_BYTES - OFF_CRC - 4);
}

int cpri_block_rows_crc(const void *block, const cpr_block_view *v, uint32_t *crc)
{
    /* An f32 block without versions has no padding: after the header come
     * exactly ids || values || state (cpr_block_layout_of). */
    if (v->h.codec != CPR_CODEC_F32 || (v->h.flags & CPR_BLOCK_VERSIONS))
        return 0;
    *crc = v->h.crc32c ^ cpr_crc32c_combine(header_crc(block), 0,
                                            v->h.bytes - CPR_BLOCK_HEADER_BYTES);
    return 1;
}

/* CRC of header (crc field as zero) || payload. */
static uint32_t block_crc(const unsigned char *b, size_t len)
{
    return cpr_crc32c(header_crc(b), b + CPR_BLOCK_HEADER_BYTES, len - CPR_BLOCK_HEADER_BYTES);
}

static cpr_status check_shape(uint32_t n, uint32_t dim, uint32_t state_dim, uint32_t flags,
                              cpr_codec codec)
{
    if (n == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a block holds at least one row");
    if (dim == 0 || dim > MAX_DIM || state_dim > MAX_DIM)
        return cpr_fail(CPR_INVALID_ARGUMENT, "block dims out of range: dim %u (1-%u), "
                        "state_dim %u (0-%u)", dim, MAX_DIM, state_dim, MAX_DIM);
    if (flags & ~CPR_BLOCK_VERSIONS)
        return cpr_fail(CPR_INVALID_ARGUMENT, "unknown block flags %#x", flags);
    if (!cpr_codec_row_bytes(codec, dim))
        return cpr_fail(CPR_INVALID_ARGUMENT, "unknown block codec %d", (int)codec);
    if (cpr_block_size_codec(n, dim, state_dim, flags, codec) == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a block of %u rows of dim %u + %u is over "
                        "the %u MiB limit; use smaller blocks", n, dim, state_dim,
                        CPR_BLOCK_MAX_BYTES >> 20);
    return CPR_OK;
}

cpr_status cpr_block_seal_codec(void *buf, uint32_t table, uint32_t n, uint32_t dim,
                                uint32_t state_dim, uint32_t flags, cpr_codec codec)
{
    unsigned char *b = buf;
    cpr_block_layout l;
    cpr_status st = check_shape(n, dim, state_dim, flags, codec);
    if (st)
        return st;
    cpr_block_layout_codec(n, dim, state_dim, flags, codec, &l);
    size_t values = (size_t)n * cpr_codec_row_bytes(codec, dim);
    memset(b + l.values + values, 0, l.state - l.values - values); /* the padding */
    const unsigned char *ids = b + l.ids;
    uint64_t prev = get64(ids, 0);
    for (uint32_t i = 1; i < n; i++) {
        uint64_t id = get64(ids, (size_t)i * 8);
        if (id <= prev)
            return cpr_fail(CPR_INVALID_ARGUMENT, "block of table %u: row ids must be "
                            "strictly ascending (row %u has id %llu after %llu)", table, i,
                            (unsigned long long)id, (unsigned long long)prev);
        prev = id;
    }
    cpr_block_header h = {
        .format = CPR_BLOCK_FORMAT, .codec = (uint16_t)codec, .flags = flags,
        .table = table, .n = n, .dim = dim, .state_dim = state_dim,
        .first_row = get64(ids, 0), .last_row = prev, .bytes = l.bytes,
    };
    cpr_block_header_write(b, &h);
    h.crc32c = block_crc(b, l.bytes);
    memcpy(b + OFF_CRC, &h.crc32c, 4);
    return CPR_OK;
}

cpr_status cpr_block_seal(void *buf, uint32_t table, uint32_t n, uint32_t dim,
                          uint32_t state_dim, uint32_t flags)
{
    return cpr_block_seal_codec(buf, table, n, dim, state_dim, flags, CPR_CODEC_F32);
}

void cpr_block_header_write(void *hdr, const cpr_block_header *h)
{
    unsigned char *b = hdr;
    uint32_t magic = CPR_BLOCK_MAGIC;
    uint64_t zero64 = 0;
    memcpy(b + 0, &magic, 4);
    memcpy(b + 4, &h->format, 2);
    memcpy(b + 6, &h->codec, 2);
    memcpy(b + 8, &h->flags, 4);
    memcpy(b + 12, &h->table, 4);
    memcpy(b + 16, &h->n, 4);
    memcpy(b + 20, &h->dim, 4);
    memcpy(b + 24, &h->state_dim, 4);
    memcpy(b + OFF_CRC, &h->crc32c, 4);
    memcpy(b + 32, &h->first_row, 8);
    memcpy(b + 40, &h->last_row, 8);
    memcpy(b + 48, &h->bytes, 8);
    memcpy(b + 56, &zero64, 8);
}

cpr_status cpr_block_header_parse(const void *buf, size_t len, cpr_block_header *out)
{
    const unsigned char *b = buf;
    cpr_block_header h;
    if (len < CPR_BLOCK_HEADER_BYTES)
        return cpr_fail(CPR_CORRUPT, "block of %zu bytes is shorter than its %u-byte "
                        "header", len, CPR_BLOCK_HEADER_BYTES);
    if (get32(b, 0) != CPR_BLOCK_MAGIC)
        return cpr_fail(CPR_CORRUPT, "not a row block: magic %08x (expected %08x)",
                        get32(b, 0), CPR_BLOCK_MAGIC);
    memcpy(&h.format, b + 4, 2);
    memcpy(&h.codec, b + 6, 2);
    if (h.format != CPR_BLOCK_FORMAT)
        return cpr_fail(CPR_CORRUPT, "row block format %u; this build reads format %u",
                        h.format, CPR_BLOCK_FORMAT);
    if (h.codec > CPR_CODEC_INT4)
        return cpr_fail(CPR_CORRUPT, "row block codec %u is unknown to this build "
                        "(it reads 0-4: f32, bf16, f16, int8, int4)", h.codec);
    h.flags = get32(b, 8);
    h.table = get32(b, 12);
    h.n = get32(b, 16);
    h.dim = get32(b, 20);
    h.state_dim = get32(b, 24);
    h.crc32c = get32(b, OFF_CRC);
    h.first_row = get64(b, 32);
    h.last_row = get64(b, 40);
    h.bytes = get64(b, 48);
    if (check_shape(h.n, h.dim, h.state_dim, h.flags, (cpr_codec)h.codec) != CPR_OK)
        return cpr_fail(CPR_CORRUPT, "row block header is malformed: %u rows, dim %u, "
                        "state_dim %u, flags %#x", h.n, h.dim, h.state_dim, h.flags);
    size_t want = cpr_block_size_codec(h.n, h.dim, h.state_dim, h.flags, (cpr_codec)h.codec);
    if (h.bytes != want)
        return cpr_fail(CPR_CORRUPT, "row block header says %llu bytes; %u rows of dim "
                        "%u + %u in %s take %zu", (unsigned long long)h.bytes, h.n, h.dim,
                        h.state_dim, cpr_codec_name((cpr_codec)h.codec), want);
    if (h.first_row > h.last_row || (h.n == 1 && h.first_row != h.last_row) ||
        (h.n > 1 && h.last_row - h.first_row < (uint64_t)h.n - 1))
        return cpr_fail(CPR_CORRUPT, "row block header: rows %llu..%llu cannot hold %u "
                        "ascending ids", (unsigned long long)h.first_row,
                        (unsigned long long)h.last_row, h.n);
    *out = h;
    return CPR_OK;
}

cpr_status cpr_block_open(const void *buf, size_t len, cpr_block_view *out)
{
    const unsigned char *b = buf;
    cpr_block_view v;
    cpr_block_layout l;
    cpr_status st = cpr_block_header_parse(buf, len, &v.h);
    if (st)
        return st;
    if (v.h.bytes != len)
        return cpr_fail(CPR_CORRUPT, "row block is %zu bytes; its header says %llu", len,
                        (unsigned long long)v.h.bytes);
    uint32_t crc = block_crc(b, len);
    if (crc != v.h.crc32c)
        return cpr_fail(CPR_CORRUPT, "row block of table %u (rows %llu..%llu) fails its "
                        "checksum (stored %08x, data %08x)", v.h.table,
                        (unsigned long long)v.h.first_row, (unsigned long long)v.h.last_row,
                        v.h.crc32c, crc);
    cpr_block_layout_codec(v.h.n, v.h.dim, v.h.state_dim, v.h.flags, (cpr_codec)v.h.codec, &l);
    v.ids = (const uint64_t *)(const void *)(b + l.ids);
    v.versions = (v.h.flags & CPR_BLOCK_VERSIONS) ? (const uint64_t *)(const void *)(b + l.versions)
                                                  : NULL;
    v.encoded = b + l.values;
    v.row_bytes = cpr_codec_row_bytes((cpr_codec)v.h.codec, v.h.dim);
    v.values = v.h.codec == CPR_CODEC_F32 ? (const float *)(const void *)(b + l.values) : NULL;
    v.state = v.h.state_dim ? (const float *)(const void *)(b + l.state) : NULL;
    if (get64(b + l.ids, 0) != v.h.first_row ||
        get64(b + l.ids, ((size_t)v.h.n - 1) * 8) != v.h.last_row)
        return cpr_fail(CPR_CORRUPT, "row block: first/last ids disagree with its header");
    for (uint32_t i = 1; i < v.h.n; i++)
        if (get64(b + l.ids, (size_t)i * 8) <= get64(b + l.ids, ((size_t)i - 1) * 8))
            return cpr_fail(CPR_CORRUPT, "row block of table %u: ids not ascending at "
                            "row %u", v.h.table, i);
    *out = v;
    return CPR_OK;
}

cpr_status cpr_block_values(const cpr_block_view *v, uint32_t first, uint32_t k, float *out)
{
    if (!v || first > v->h.n || k > v->h.n - first || (k && !out))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_block_values: rows [%u, %u + %u) are not "
                        "rows of a block of %u", first, first, k, v ? v->h.n : 0);
    return cpr_codec_decode((cpr_codec)v->h.codec,
                            (const unsigned char *)v->encoded + (size_t)first * v->row_bytes, k,
                            v->h.dim, out);
}
