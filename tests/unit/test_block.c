/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The row block (cpr/block.h) and the store's block path: seal and open
 * round trips; every single flipped byte of a block is caught; malformed
 * headers are named; put_block stores a client's block unchanged (a
 * restore that needs no merge hands back the same bytes) and refuses bad
 * blocks without changing the part; a store of another format is refused
 * with a message naming it. Blocks of every codec (cpr/codec.h) seal, open
 * and decode, their CRC covering the encoded bytes; the store keeps them as
 * they came and restores them decoded, merged with f32 parts.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cpr/block.h"
#include "cpr/codec.h"
#include "cpr/crc32c.h"
#include "cpr/store.h"
#include "cpr_common.h"
#include "testutil.h"

static const cpr_table_schema g_table = {.table = 3, .rows = 100000, .dim = 8, .state_dim = 2};

/* A sealed block of rows first, first+step, ... as written at ckpt
 * (malloc'd, 8-aligned; *len its size). */
static unsigned char *make_block(uint64_t first, uint64_t step, uint32_t n, uint64_t ckpt,
                                 size_t *len)
{
    cpr_block_layout l;
    size_t bytes = cpr_block_size(n, g_table.dim, g_table.state_dim, 0);
    assert_true(bytes > 0);
    unsigned char *b = NULL;
    assert_int_equal(posix_memalign((void **)&b, 64, bytes), 0);
    cpr_block_layout_of(n, g_table.dim, g_table.state_dim, 0, &l);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t id = first + i * step;
        memcpy(b + l.ids + (size_t)i * 8, &id, 8);
        for (uint32_t j = 0; j < g_table.dim; j++) {
            float v = tu_value(g_table.table, id, ckpt, j);
            memcpy(b + l.values + ((size_t)i * g_table.dim + j) * 4, &v, 4);
        }
        for (uint32_t j = 0; j < g_table.state_dim; j++) {
            float v = tu_state(g_table.table, id, ckpt, j);
            memcpy(b + l.state + ((size_t)i * g_table.state_dim + j) * 4, &v, 4);
        }
    }
    assert_int_equal(cpr_block_seal(b, g_table.table, n, g_table.dim, g_table.state_dim, 0),
                     CPR_OK);
    *len = bytes;
    return b;
}

static void test_seal_open_round_trip(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = make_block(10, 3, 50, 7, &len);
    cpr_block_view v;
    assert_int_equal(cpr_block_open(b, len, &v), CPR_OK);
    assert_int_equal(v.h.table, g_table.table);
    assert_int_equal(v.h.n, 50);
    assert_int_equal(v.h.first_row, 10);
    assert_int_equal(v.h.last_row, 10 + 49 * 3);
    assert_int_equal(v.h.bytes, len);
    assert_null(v.versions);
    for (uint32_t i = 0; i < 50; i++) {
        assert_int_equal(v.ids[i], 10 + i * 3);
        assert_int_equal(tu_float_bits(v.values[i * 8 + 5]),
                         tu_float_bits(tu_value(g_table.table, 10 + i * 3, 7, 5)));
        assert_int_equal(tu_float_bits(v.state[i * 2 + 1]),
                         tu_float_bits(tu_state(g_table.table, 10 + i * 3, 7, 1)));
    }
    /* The header alone parses; a length that disagrees with it does not open. */
    cpr_block_header h;
    assert_int_equal(cpr_block_header_parse(b, CPR_BLOCK_HEADER_BYTES, &h), CPR_OK);
    assert_int_equal(cpr_block_open(b, len - 4, &v), CPR_CORRUPT);
    free(b);
}

/* A whole f32 block's rows' CRC (the one their row batch carries) follows
 * from the block's own: equal to the CRC computed over the rows, with state
 * and without; blocks laid out otherwise (versions, another codec) say no. */
static void test_rows_crc_derived(void **state)
{
    (void)state;
    size_t len;
    cpr_block_view v;
    uint32_t crc = 0;
    for (uint32_t n = 1; n <= 300; n += 299) {
        unsigned char *b = make_block(5, 2, n, 4, &len);
        assert_int_equal(cpr_block_open(b, len, &v), CPR_OK);
        assert_int_equal(cpri_block_rows_crc(b, &v, &crc), 1);
        assert_int_equal(crc, cpr_crc32c_rows(v.ids, n, v.values, (size_t)n * g_table.dim,
                                              v.state, (size_t)n * g_table.state_dim));
        free(b);
    }
    /* No state. */
    cpr_block_layout l;
    size_t bytes = cpr_block_size(3, 4, 0, 0);
    unsigned char *b = calloc(1, bytes);
    assert_non_null(b);
    cpr_block_layout_of(3, 4, 0, 0, &l);
    for (uint64_t i = 0; i < 3; i++) {
        uint64_t id = 10 + i;
        float f = (float)i + 0.5f;
        memcpy(b + l.ids + i * 8, &id, 8);
        memcpy(b + l.values + i * 16, &f, 4);
    }
    assert_int_equal(cpr_block_seal(b, 1, 3, 4, 0, 0), CPR_OK);
    assert_int_equal(cpr_block_open(b, bytes, &v), CPR_OK);
    assert_int_equal(cpri_block_rows_crc(b, &v, &crc), 1);
    assert_int_equal(crc, cpr_crc32c_rows(v.ids, 3, v.values, 12, NULL, 0));
    /* Versions after the ids: not the batch's bytes. */
    cpr_block_view other = v;
    other.h.flags |= CPR_BLOCK_VERSIONS;
    assert_int_equal(cpri_block_rows_crc(b, &other, &crc), 0);
    other = v;
    other.h.codec = CPR_CODEC_INT8;
    assert_int_equal(cpri_block_rows_crc(b, &other, &crc), 0);
    free(b);
}

/* Every byte of a block matters: flipping any one is caught by open. */
static void test_every_flip_caught(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = make_block(0, 1, 6, 1, &len);
    cpr_block_view v;
    for (size_t i = 0; i < len; i++) {
        if (i >= 56 && i < 64)
            continue; /* reserved: covered by the CRC, checked below */
        b[i] ^= 0x10;
        if (cpr_block_open(b, len, &v) != CPR_CORRUPT)
            fail_msg("a flipped byte at offset %zu of %zu passed", i, len);
        assert_true(cpr_errmsg()[0] != '\0');
        b[i] ^= 0x10;
    }
    b[60] ^= 1; /* reserved bytes are still under the CRC */
    assert_int_equal(cpr_block_open(b, len, &v), CPR_CORRUPT);
    b[60] ^= 1;
    assert_int_equal(cpr_block_open(b, len, &v), CPR_OK);
    free(b);
}

static void test_bad_shapes(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = make_block(0, 1, 4, 1, &len);
    uint64_t two = 2;
    memcpy(b + CPR_BLOCK_HEADER_BYTES + 8, &two, 8); /* ids 0, 2, 2, 3 */
    memcpy(b + CPR_BLOCK_HEADER_BYTES + 16, &two, 8);
    assert_int_equal(cpr_block_seal(b, 3, 4, 8, 2, 0), CPR_INVALID_ARGUMENT);
    assert_non_null(strstr(cpr_errmsg(), "ascending"));
    assert_int_equal(cpr_block_seal(b, 3, 0, 8, 2, 0), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_block_seal(b, 3, 4, 0, 2, 0), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_block_seal(b, 3, 4, 8, 2, 0x8), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_block_size(1u << 30, 64, 0, 0), 0); /* over the limit */
    free(b);
    b = make_block(0, 1, 4, 1, &len);
    cpr_block_view v;
    uint16_t format = 9;
    memcpy(b + 4, &format, 2);
    assert_int_equal(cpr_block_open(b, len, &v), CPR_CORRUPT);
    assert_non_null(strstr(cpr_errmsg(), "format 9"));
    free(b);
}

/* ---- the store ---------------------------------------------------------------- */

static void begin(cpr_store *s, uint64_t ckpt, cpr_kind kind)
{
    cpr_part_spec spec = tu_part("blk", 0, 1, ckpt, kind, &g_table, 1);
    assert_int_equal(cpr_store_begin(s, &spec), CPR_OK);
}

typedef struct blocks_seen {
    unsigned char *bytes;
    size_t len, count;
} blocks_seen;

static cpr_status keep_blocks(void *ctx, const void *block, size_t len)
{
    blocks_seen *s = ctx;
    unsigned char *grown = realloc(s->bytes, s->len + len);
    if (!grown)
        return CPR_NO_MEMORY;
    memcpy(grown + s->len, block, len);
    s->bytes = grown;
    s->len += len;
    s->count++;
    return CPR_OK;
}

static void test_put_block_pass_through(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_id id = {"blk", 0, 1};
    size_t len1, len2;
    unsigned char *b1 = make_block(0, 1, 1000, 1, &len1);
    unsigned char *b2 = make_block(1000, 1, 500, 1, &len2);
    begin(f->store, 1, CPR_KIND_FULL);
    assert_int_equal(cpr_store_put_block(f->store, &id, b1, len1), CPR_OK);
    assert_int_equal(cpr_store_put_block(f->store, &id, b2, len2), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &id, 1500), CPR_OK);

    /* No merge needed: the stored blocks come back byte for byte. */
    cpr_restore_query q = {.job = "blk", .batch_rows = 4096};
    blocks_seen seen = {0};
    cpr_restore_result res;
    assert_int_equal(cpr_store_restore_blocks(f->store, &q, keep_blocks, &seen, &res), CPR_OK);
    assert_int_equal(res.rows, 1500);
    assert_int_equal(seen.count, 2);
    assert_int_equal(seen.len, len1 + len2);
    assert_memory_equal(seen.bytes, b1, len1);
    assert_memory_equal(seen.bytes + len1, b2, len2);
    free(seen.bytes);

    /* The row API gives the same rows. */
    tu_rows rows = {0};
    assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 1500);
    tu_assert_rows(rows.rows, &g_table, 0, 1, 1500, 1);
    tu_rows_free(&rows);

    /* A filtered restore assembles new blocks, each one sealed. */
    cpr_row_range r = {100, 1200};
    cpr_restore_query fq = {.job = "blk", .ranges = &r, .n_ranges = 1, .modulo = 3,
                            .remainder = 1, .batch_rows = 64};
    seen = (blocks_seen){0};
    assert_int_equal(cpr_store_restore_blocks(f->store, &fq, keep_blocks, &seen, &res), CPR_OK);
    size_t off = 0, rows_seen = 0;
    for (size_t i = 0; i < seen.count; i++) {
        cpr_block_view v;
        cpr_block_header h;
        assert_int_equal(cpr_block_header_parse(seen.bytes + off, seen.len - off, &h), CPR_OK);
        assert_true(h.n <= 64);
        assert_int_equal(cpr_block_open(seen.bytes + off, h.bytes, &v), CPR_OK);
        for (uint32_t k = 0; k < v.h.n; k++)
            assert_int_equal(v.ids[k] % 3, 1);
        rows_seen += v.h.n;
        off += h.bytes;
    }
    assert_int_equal(rows_seen, res.rows);
    assert_int_equal(res.rows, 367); /* 100..1199, r % 3 == 1 */
    free(seen.bytes);
    free(b1);
    free(b2);
}

static void test_put_block_refusals(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_id id = {"blk", 0, 1};
    size_t len;
    unsigned char *b = make_block(0, 1, 100, 1, &len);
    begin(f->store, 1, CPR_KIND_FULL);

    b[200] ^= 1; /* damaged in transit */
    assert_int_equal(cpr_store_put_block(f->store, &id, b, len), CPR_CORRUPT);
    assert_non_null(strstr(cpr_errmsg(), "checksum"));
    b[200] ^= 1;
    assert_int_equal(cpr_store_put_block(f->store, &id, b, len - 1), CPR_CORRUPT);

    unsigned char *wrong = make_block(0, 1, 10, 1, &len);
    uint32_t table = 99; /* not in the schema */
    memcpy(wrong + 12, &table, 4);
    uint32_t zero = 0;
    memcpy(wrong + 28, &zero, 4);
    assert_int_equal(cpr_block_seal(wrong, 99, 10, 8, 2, 0), CPR_OK);
    assert_int_equal(cpr_store_put_block(f->store, &id, wrong, len), CPR_INVALID_ARGUMENT);
    assert_non_null(strstr(cpr_errmsg(), "schema"));
    free(wrong);

    unsigned char *far = make_block(g_table.rows - 5, 1, 10, 1, &len); /* past the table */
    assert_int_equal(cpr_store_put_block(f->store, &id, far, len), CPR_INVALID_ARGUMENT);
    assert_non_null(strstr(cpr_errmsg(), "outside table"));
    free(far);

    /* None of it reached the part: it still commits with 0 rows, then 100. */
    assert_int_equal(cpr_store_commit(f->store, &id, 100), CPR_INVALID_ARGUMENT);
    size_t full_len;
    unsigned char *full = make_block(0, 1, 100, 1, &full_len);
    assert_int_equal(cpr_store_put_block(f->store, &id, full, full_len), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &id, 100), CPR_OK);
    cpr_restore_query q = {.job = "blk"};
    tu_rows rows = {0};
    assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 100);
    tu_assert_rows(rows.rows, &g_table, 0, 1, 100, 1);
    tu_rows_free(&rows);
    free(full);
    free(b);
}


/* A block of n rows of g_table's shape in `codec` (malloc'd; *len its size),
 * values from tu_value, encoded. */
static unsigned char *make_codec_block(cpr_codec codec, uint32_t n, size_t *len)
{
    cpr_block_layout l;
    size_t bytes = cpr_block_size_codec(n, g_table.dim, g_table.state_dim, 0, codec);
    assert_true(bytes > 0);
    unsigned char *b = NULL;
    assert_int_equal(posix_memalign((void **)&b, 64, bytes), 0);
    memset(b, 0xa5, bytes); /* the padding must be written by seal */
    cpr_block_layout_codec(n, g_table.dim, g_table.state_dim, 0, codec, &l);
    float *rows = malloc((size_t)n * g_table.dim * sizeof *rows);
    assert_non_null(rows);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t id = 10 + 3 * (uint64_t)i;
        memcpy(b + l.ids + (size_t)i * 8, &id, 8);
        for (uint32_t j = 0; j < g_table.dim; j++)
            rows[(size_t)i * g_table.dim + j] = tu_value(g_table.table, id, 1, j);
        for (uint32_t j = 0; j < g_table.state_dim; j++) {
            float v = tu_state(g_table.table, id, 1, j);
            memcpy(b + l.state + ((size_t)i * g_table.state_dim + j) * 4, &v, 4);
        }
    }
    assert_int_equal(cpr_codec_encode(codec, 0, rows, n, g_table.dim, b + l.values), CPR_OK);
    free(rows);
    assert_int_equal(cpr_block_seal_codec(b, g_table.table, n, g_table.dim, g_table.state_dim,
                                          0, codec),
                     CPR_OK);
    *len = bytes;
    return b;
}

static void test_codec_blocks(void **state)
{
    (void)state;
    static const cpr_codec codecs[] = {CPR_CODEC_F32, CPR_CODEC_BF16, CPR_CODEC_F16,
                                       CPR_CODEC_INT8, CPR_CODEC_INT4};
    enum { N = 7 }; /* int4 rows of 8 + 4 bytes: 84 bytes of values, padded to 84 */
    for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; c++) {
        size_t len;
        unsigned char *b = make_codec_block(codecs[c], N, &len);
        cpr_block_layout l;
        cpr_block_layout_codec(N, g_table.dim, g_table.state_dim, 0, codecs[c], &l);
        assert_int_equal(l.state % 4, 0);
        assert_int_equal(len, l.bytes);
        if (codecs[c] == CPR_CODEC_F32)
            assert_int_equal(len, cpr_block_size(N, g_table.dim, g_table.state_dim, 0));
        else
            assert_true(len < cpr_block_size(N, g_table.dim, g_table.state_dim, 0));
        for (size_t k = l.values + N * cpr_codec_row_bytes(codecs[c], g_table.dim); k < l.state;
             k++)
            assert_int_equal(b[k], 0); /* the padding */
        cpr_block_view v;
        assert_int_equal(cpr_block_open(b, len, &v), CPR_OK);
        assert_int_equal(v.h.codec, codecs[c]);
        assert_int_equal(v.row_bytes, cpr_codec_row_bytes(codecs[c], g_table.dim));
        assert_true((v.values != NULL) == (codecs[c] == CPR_CODEC_F32));
        float rows[N * 8];
        assert_int_equal(cpr_block_values(&v, 0, N, rows), CPR_OK);
        for (uint32_t i = 0; i < N; i++) {
            assert_int_equal(v.ids[i], 10 + 3 * (uint64_t)i);
            float step = 0; /* int codecs: the row's scale leads its encoding */
            memcpy(&step, (const unsigned char *)v.encoded + i * v.row_bytes, 4);
            for (uint32_t j = 0; j < g_table.dim; j++) {
                float want = tu_value(g_table.table, v.ids[i], 1, j), err;
                err = fabsf(rows[i * 8 + j] - want);
                switch (codecs[c]) {
                case CPR_CODEC_F32:
                    assert_memory_equal(&rows[i * 8 + j], &want, 4);
                    break;
                case CPR_CODEC_BF16:
                    assert_true(err <= fabsf(want) / 256);
                    break;
                case CPR_CODEC_F16:
                    assert_true(err <= fabsf(want) / 2048 + 6e-8f);
                    break;
                default: /* half a step */
                    assert_true(err <= 0.5f * step * (1 + 1e-5f) + 1e-3f);
                    break;
                }
            }
            for (uint32_t j = 0; j < g_table.state_dim; j++) /* state stays f32 */
                assert_true(v.state[i * g_table.state_dim + j] ==
                            tu_state(g_table.table, v.ids[i], 1, j));
        }
        float one[8];
        assert_int_equal(cpr_block_values(&v, N - 1, 1, one), CPR_OK);
        assert_memory_equal(one, &rows[(N - 1) * 8], sizeof one);
        assert_int_equal(cpr_block_values(&v, N, 1, one), CPR_INVALID_ARGUMENT);
        /* The CRC covers the encoded bytes, the padding and the state. */
        for (size_t k = l.values; k < len; k += 5) {
            b[k] ^= 0x10;
            assert_int_equal(cpr_block_open(b, len, &v), CPR_CORRUPT);
            b[k] ^= 0x10;
        }
        free(b);
    }
    /* An unknown codec is refused by seal and by a reader. */
    size_t len;
    unsigned char *b = make_codec_block(CPR_CODEC_INT8, 3, &len);
    assert_int_equal(cpr_block_seal_codec(b, 3, 3, 8, 2, 0, (cpr_codec)7), CPR_INVALID_ARGUMENT);
    uint16_t seven = 7;
    memcpy(b + 6, &seven, 2);
    cpr_block_view v;
    assert_int_equal(cpr_block_open(b, len, &v), CPR_CORRUPT);
    assert_non_null(strstr(cpr_errmsg(), "codec 7"));
    free(b);
}

/* Two restores returned the same rows, byte for byte; both are freed. */
static void assert_same_rows(tu_rows *before, tu_rows *after)
{
    assert_int_equal(before->n, after->n);
    for (size_t i = 0; i < before->n; i++) {
        assert_int_equal(before->rows[i].id, after->rows[i].id);
        assert_memory_equal(before->rows[i].values, after->rows[i].values,
                            (g_table.dim + g_table.state_dim) * sizeof(float));
    }
    tu_rows_free(before);
    tu_rows_free(after);
}

/* The store keeps quantized blocks as they came: a restore merges an int8
 * part with a later f32 one, decoding the int8 rows (within half a step,
 * state exact); the block API hands the int8 block back unchanged; the
 * part's bytes are the encoded ones; verify checks them. */
static void test_store_keeps_codec_blocks(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_id id1 = {"blk", 0, 1}, id2 = {"blk", 0, 2};
    begin(f->store, 1, CPR_KIND_FULL);
    size_t len;
    unsigned char *b = make_codec_block(CPR_CODEC_INT8, 9, &len); /* rows 10, 13, ..., 34 */
    assert_int_equal(cpr_store_put_block(f->store, &id1, b, len), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &id1, 9), CPR_OK);
    cpr_block_view v;
    assert_int_equal(cpr_block_open(b, len, &v), CPR_OK);
    begin(f->store, 2, CPR_KIND_PRIORITY);
    size_t len2;
    unsigned char *later = make_block(13, 3, 2, 2, &len2); /* rows 13, 16 at checkpoint 2 */
    assert_int_equal(cpr_store_put_block(f->store, &id2, later, len2), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &id2, 2), CPR_OK);

    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "blk", &parts, &n), CPR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(parts[0].bytes, 9 * (8 + 8 + 8 + 2 * 4)); /* id, int8 row, state */
    assert_int_equal(parts[0].codecs, 1u << CPR_CODEC_INT8);
    assert_int_equal(parts[1].codecs, 1u << CPR_CODEC_F32);
    free(parts);

    cpr_restore_query q = {.job = "blk"};
    tu_rows rows = {0};
    assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 9);
    for (size_t i = 0; i < rows.n; i++) {
        const tu_row *r = &rows.rows[i];
        uint64_t ckpt = r->id == 13 || r->id == 16 ? 2 : 1;
        if (ckpt == 2) { /* the f32 part's rows, exactly */
            tu_assert_row(r, &g_table, r->id, 2);
            continue;
        }
        float step;
        memcpy(&step, (const unsigned char *)v.encoded + (i * v.row_bytes), 4);
        for (uint32_t j = 0; j < g_table.dim; j++)
            assert_true(fabsf(r->values[j] - tu_value(g_table.table, r->id, 1, j)) <=
                        0.5f * step * (1 + 1e-5f) + 1e-3f);
        for (uint32_t j = 0; j < g_table.state_dim; j++)
            assert_true(r->values[g_table.dim + j] == tu_state(g_table.table, r->id, 1, j));
    }
    tu_rows_free(&rows);
    /* As of checkpoint 1 the int8 block is selected whole: the block API
     * hands it back byte for byte. */
    blocks_seen seen = {0};
    cpr_restore_query q1 = {.job = "blk", .as_of = 1};
    assert_int_equal(cpr_store_restore_blocks(f->store, &q1, keep_blocks, &seen, NULL), CPR_OK);
    assert_int_equal(seen.count, 1);
    assert_int_equal(seen.len, len);
    assert_memory_equal(seen.bytes, b, len);
    free(seen.bytes);
    cpr_verify_report rep;
    assert_int_equal(cpr_store_verify(f->store, "blk", NULL, NULL, &rep), CPR_OK);
    assert_int_equal(rep.problems, 0);
    /* Folding merges the chain without re-encoding (fold.c D5): the fold at
     * 2 holds part 1's seven other rows as int8 blocks with versions, and
     * restores return the same bytes as before. */
    tu_rows before = {0}, after = {0};
    assert_int_equal(tu_restore(f->store, &q, &before, NULL), CPR_OK);
    uint64_t folded = 0;
    assert_int_equal(cpr_store_fold(f->store, "blk", 1, &folded), CPR_OK);
    assert_int_equal(folded, 1);
    cpr_verify_report rep2;
    assert_int_equal(cpr_store_verify(f->store, "blk", NULL, NULL, &rep2), CPR_OK);
    assert_int_equal(rep2.problems, 0);
    assert_int_equal(rep2.bytes_checked - rep.bytes_checked,
                     cpr_block_size_codec(7, g_table.dim, g_table.state_dim, CPR_BLOCK_VERSIONS,
                                          CPR_CODEC_INT8));
    assert_int_equal(tu_restore(f->store, &q, &after, NULL), CPR_OK);
    assert_same_rows(&before, &after);
    /* A part at 3 (row 100, f32) and a fold at 3: part 1's int8 rows and
     * part 2's f32 rows interleave (10 | 13, 16 | 19..34); the fold holds
     * one block of each codec (seven int8 rows, two f32 rows, overlapping
     * in rows: D5), not three; it replaces the fold at 2. */
    cpr_part_id id3 = {"blk", 0, 3};
    begin(f->store, 3, CPR_KIND_PRIORITY);
    size_t len3;
    unsigned char *third = make_block(100, 1, 1, 3, &len3);
    assert_int_equal(cpr_store_put_block(f->store, &id3, third, len3), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &id3, 1), CPR_OK);
    cpr_restore_query q3 = {.job = "blk", .as_of = 3};
    assert_int_equal(tu_restore(f->store, &q3, &before, NULL), CPR_OK);
    assert_int_equal(cpr_store_fold(f->store, "blk", 1, &folded), CPR_OK);
    assert_int_equal(folded, 1);
    cpr_verify_report rep3;
    assert_int_equal(cpr_store_verify(f->store, "blk", NULL, NULL, &rep3), CPR_OK);
    assert_int_equal(rep3.problems, 0);
    size_t fold3 = cpr_block_size_codec(7, g_table.dim, g_table.state_dim, CPR_BLOCK_VERSIONS,
                                        CPR_CODEC_INT8) +
                   cpr_block_size(2, g_table.dim, g_table.state_dim, CPR_BLOCK_VERSIONS);
    assert_int_equal(rep3.bytes_checked, rep.bytes_checked + len3 + fold3);
    assert_int_equal(tu_restore(f->store, &q3, &after, NULL), CPR_OK);
    assert_int_equal(before.n, 10);
    assert_same_rows(&before, &after);
    free(third);
    free(later);
    free(b);
}

/* A later block of a part replaces an earlier copy of a row; blocks of
 * put_block and put_rows mix. */
static void test_blocks_overlap_in_a_part(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_id id = {"blk", 0, 1};
    size_t len1, len2;
    unsigned char *b1 = make_block(0, 1, 300, 1, &len1);   /* rows 0..299 as of 1 */
    unsigned char *b2 = make_block(100, 2, 50, 2, &len2);  /* even rows 100..198 as of 2 */
    begin(f->store, 1, CPR_KIND_FULL);
    assert_int_equal(cpr_store_put_block(f->store, &id, b1, len1), CPR_OK);
    assert_int_equal(cpr_store_put_block(f->store, &id, b2, len2), CPR_OK);
    uint64_t ids[3] = {150, 151, 299};
    assert_int_equal(tu_put_rows(f->store, &id, &g_table, ids, 3, 3), CPR_OK);
    assert_int_equal(cpr_store_commit(f->store, &id, 353), CPR_OK);
    cpr_restore_query q = {.job = "blk", .batch_rows = 7};
    tu_rows rows = {0};
    assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 300);
    for (uint64_t r = 0; r < 300; r++) {
        uint64_t want = (r == 150 || r == 151 || r == 299) ? 3
                      : (r >= 100 && r <= 198 && r % 2 == 0) ? 2 : 1;
        tu_assert_row(&rows.rows[r], &g_table, r, want);
    }
    tu_rows_free(&rows);
    free(b1);
    free(b2);
}

/* ---- formats ------------------------------------------------------------------- */

static void put_raw_key(const char *db_dir, const char *key, size_t klen, const void *val,
                        size_t vlen)
{
    char *err = NULL;
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    rocksdb_t *db = rocksdb_open(o, db_dir, &err);
    assert_null(err);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_put(db, wo, key, klen, val, vlen, &err);
    assert_null(err);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_close(db);
    rocksdb_options_destroy(o);
}

static void test_other_formats_refused(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-format");
    char db[4096];
    cpr_store *s = NULL;
    /* A format-1 store: part records, no 'V' record. */
    snprintf(db, sizeof db, "%s/v1/db", dir);
    char parent[4096];
    snprintf(parent, sizeof parent, "%s/v1", dir);
    assert_int_equal(mkdir(parent, 0755), 0);
    unsigned char key[17] = {'M', 0, 0, 0, 1};
    put_raw_key(db, (const char *)key, sizeof key, "x", 1);
    assert_int_equal(cpr_store_open(parent, NULL, &s), CPR_FAILED_PRECONDITION);
    assert_non_null(strstr(cpr_errmsg(), "format 1"));
    assert_null(s);
    /* A future format. */
    snprintf(parent, sizeof parent, "%s/v3", dir);
    snprintf(db, sizeof db, "%s/v3/db", dir);
    assert_int_equal(mkdir(parent, 0755), 0);
    uint32_t three = 3;
    put_raw_key(db, "V", 1, &three, 4);
    assert_int_equal(cpr_store_open(parent, NULL, &s), CPR_FAILED_PRECONDITION);
    assert_non_null(strstr(cpr_errmsg(), "format 3"));
    /* A new store opens, and opens again. */
    snprintf(parent, sizeof parent, "%s/new", dir);
    assert_int_equal(cpr_store_open(parent, NULL, &s), CPR_OK);
    cpr_store_close(s);
    assert_int_equal(cpr_store_open(parent, NULL, &s), CPR_OK);
    cpr_store_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* A store whose db/ was lost: the open refuses, names what to do, and
 * neither records a new store nor sweeps the segments it cannot see. */
static void test_lost_catalog_refused(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-lostdb");
    cpr_store *s = NULL;
    cpr_store_options o = {.no_fold = 1};
    assert_int_equal(cpr_store_open(dir, &o, &s), CPR_OK);
    cpr_part_spec spec = tu_part("ld", 0, 1, 1, CPR_KIND_FULL, &g_table, 1);
    tu_write_part_ok(s, &spec, 0, 300);
    cpr_store_close(s);
    char segs[4096], db_dir[4096], aside[4096];
    snprintf(segs, sizeof segs, "%s/segments", dir);
    snprintf(db_dir, sizeof db_dir, "%s/db", dir);
    snprintf(aside, sizeof aside, "%s/db.aside", dir);
    uint64_t files = tu_count_files(segs);
    assert_true(files >= 1);
    assert_int_equal(rename(db_dir, aside), 0);

    s = NULL;
    assert_int_equal(cpr_store_open(dir, &o, &s), CPR_FAILED_PRECONDITION);
    assert_null(s);
    assert_non_null(strstr(cpr_errmsg(), "db/"));
    assert_non_null(strstr(cpr_errmsg(), "segments/"));
    assert_int_equal(tu_count_files(segs), files); /* nothing swept */
    /* Twice: the refused open left no format record behind. */
    assert_int_equal(cpr_store_open(dir, &o, &s), CPR_FAILED_PRECONDITION);

    /* With db/ back, everything is there. */
    tu_rmtree(db_dir);
    assert_int_equal(rename(aside, db_dir), 0);
    assert_int_equal(cpr_store_open(dir, &o, &s), CPR_OK);
    cpr_restore_query q = {.job = "ld"};
    tu_rows rows = {0};
    assert_int_equal(tu_restore(s, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 300);
    tu_rows_free(&rows);
    cpr_store_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* A fold record that no longer decodes: restores of its shard as of its
 * checkpoint or later fail CPR_CORRUPT (the parts it replaced may be gone)
 * until a FULL of the shard, earlier ones still work, and no segment or
 * blob directory is swept. */
static void test_damaged_fold_record(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-badfold");
    cpr_store_options o = {.no_fold = 1};
    cpr_store *s = NULL;
    assert_int_equal(cpr_store_open(dir, &o, &s), CPR_OK);
    for (uint64_t c = 1; c <= 3; c++) {
        cpr_part_spec spec = tu_part("bf", 0, 1, c, c == 1 ? CPR_KIND_FULL : CPR_KIND_PRIORITY,
                                     &g_table, 1);
        tu_write_part_ok(s, &spec, c == 1 ? 0 : 10 * c, c == 1 ? 500 : 20);
    }
    uint64_t folded = 0;
    assert_int_equal(cpr_store_fold(s, "bf", 2, &folded), CPR_OK);
    assert_int_equal(folded, 1);
    cpr_store_close(s);
    char segs[4096];
    snprintf(segs, sizeof segs, "%s/segments", dir);
    uint64_t files = tu_count_files(segs);
    assert_int_equal(files, 4); /* three parts and the fold at 3 */

    /* Damage the record's value (its CRC no longer matches). */
    char db_dir[4096], *err = NULL;
    snprintf(db_dir, sizeof db_dir, "%s/db", dir);
    rocksdb_options_t *ro = rocksdb_options_create();
    rocksdb_t *db = rocksdb_open(ro, db_dir, &err);
    assert_null(err);
    unsigned char key[17] = {'B', 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
    rocksdb_readoptions_t *rd = rocksdb_readoptions_create();
    size_t vlen = 0;
    char *val = rocksdb_get(db, rd, (const char *)key, sizeof key, &vlen, &err);
    assert_null(err);
    assert_non_null(val);
    val[vlen / 2] ^= 0x40;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_put(db, wo, (const char *)key, sizeof key, val, vlen, &err);
    assert_null(err);
    rocksdb_free(val);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_readoptions_destroy(rd);
    rocksdb_close(db);
    rocksdb_options_destroy(ro);

    char blob_dir[4200], blob[4300]; /* a blob directory no intact record names */
    snprintf(blob_dir, sizeof blob_dir, "%s/blobs/j_bf", dir);
    assert_int_equal(mkdir(blob_dir, 0755), 0);
    snprintf(blob_dir, sizeof blob_dir, "%s/blobs/j_bf/0-9", dir);
    assert_int_equal(mkdir(blob_dir, 0755), 0);
    snprintf(blob, sizeof blob, "%s/b_dense", blob_dir);
    FILE *bf = fopen(blob, "w");
    assert_non_null(bf);
    fclose(bf);

    assert_int_equal(cpr_store_open(dir, &o, &s), CPR_OK);
    assert_int_equal(tu_count_files(segs), files); /* nothing swept */
    assert_int_equal(tu_count_files(blob_dir), 1);
    cpr_restore_query q = {.job = "bf", .as_of = 3};
    tu_rows rows = {0};
    assert_int_equal(tu_restore(s, &q, &rows, NULL), CPR_CORRUPT);
    assert_non_null(strstr(cpr_errmsg(), "fold record"));
    tu_rows_free(&rows);
    cpr_verify_report vr;
    assert_int_equal(cpr_store_verify(s, "bf", NULL, NULL, &vr), CPR_CORRUPT);
    assert_int_equal(vr.problems, 1); /* the record; every block is intact */
    q.as_of = 2; /* below the fold: the parts are all there */
    assert_int_equal(tu_restore(s, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 500);
    tu_rows_free(&rows);
    /* A FULL after it: restores as of it on do not need the fold. */
    cpr_part_spec full = tu_part("bf", 0, 1, 4, CPR_KIND_FULL, &g_table, 1);
    tu_write_part_ok(s, &full, 0, 200);
    q.as_of = 0;
    assert_int_equal(tu_restore(s, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 200);
    tu_rows_free(&rows);
    q.as_of = 3; /* still the fold's */
    assert_int_equal(tu_restore(s, &q, &rows, NULL), CPR_CORRUPT);
    tu_rows_free(&rows);
    cpr_store_close(s);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seal_open_round_trip),
        cmocka_unit_test(test_every_flip_caught),
        cmocka_unit_test(test_rows_crc_derived),
        cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test_setup_teardown(test_put_block_pass_through, tu_store_setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_put_block_refusals, tu_store_setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_blocks_overlap_in_a_part, tu_store_setup,
                                        tu_store_teardown),
        cmocka_unit_test(test_other_formats_refused),
        cmocka_unit_test(test_lost_catalog_refused),
        cmocka_unit_test(test_codec_blocks),
        cmocka_unit_test_setup_teardown(test_store_keeps_codec_blocks, tu_store_setup,
                                        tu_store_teardown),
        cmocka_unit_test(test_damaged_fold_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
