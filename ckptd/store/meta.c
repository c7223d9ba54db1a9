/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Part metadata codec. Layout (little-endian):
 *   u8 version(1) u8 kind u32 shard u64 checkpoint u64 step u32 num_shards
 *   u64 base u64 rows u64 bytes i64 committed_unix_ms
 *   u32 n_tables { u32 table u64 rows u32 dim u32 state_dim }
 *   u32 n_blobs  { u8 name_len name u64 size u32 n_crcs { u32 crc } }
 *   u64 seg_token u64 seg_bytes
 *   u32 n_blocks { u32 table u32 n u64 first u64 last u64 offset u32 len u32 crc }
 *   u32 crc32c(all of the above)
 * Decoding never trusts a count: every read is bounds-checked first.
 */
#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"
#include "cpr_common.h"
#include "meta.h"

#define META_VERSION 3 /* 2: without codecs; 1: store format 1 (rows in RocksDB) */
#define META_VERSION_MIN 2
void cpri_wbuf_put(cpri_wbuf *b, const void *src, size_t n)
{
    if (b->oom || n == 0) /* an empty blob has no checksum array */
        return;
    if (b->len + n > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 256) + n;
        unsigned char *grown = realloc(b->p, cap);
        if (!grown) {
            b->oom = 1;
            return;
        }
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

void cpri_rbuf_get(cpri_rbuf *r, void *dst, size_t n)
{
    if (n == 0)
        return;
    if (r->bad || r->len - r->off < n) {
        r->bad = 1;
        memset(dst, 0, n);
        return;
    }
    memcpy(dst, r->p + r->off, n);
    r->off += n;
}

void cpri_put_block_ref(cpri_wbuf *b, const cpri_block_ref *r)
{
    CPRI_PUT(b, r->table);
    CPRI_PUT(b, r->n);
    CPRI_PUT(b, r->first);
    CPRI_PUT(b, r->last);
    CPRI_PUT(b, r->offset);
    CPRI_PUT(b, r->len);
    CPRI_PUT(b, r->crc);
}

void cpri_get_block_ref(cpri_rbuf *r, cpri_block_ref *b)
{
    CPRI_GET(r, b->table);
    CPRI_GET(r, b->n);
    CPRI_GET(r, b->first);
    CPRI_GET(r, b->last);
    CPRI_GET(r, b->offset);
    CPRI_GET(r, b->len);
    CPRI_GET(r, b->crc);
}


cpr_status cpri_meta_encode(const cpri_part_meta *m, unsigned char **buf, size_t *len)
{
    cpri_wbuf b = {0};
    CPRI_PUT(&b, (uint8_t)META_VERSION);
    CPRI_PUT(&b, (uint8_t)m->kind);
    CPRI_PUT(&b, m->shard);
    CPRI_PUT(&b, m->checkpoint);
    CPRI_PUT(&b, m->step);
    CPRI_PUT(&b, m->num_shards);
    CPRI_PUT(&b, m->base);
    CPRI_PUT(&b, m->rows);
    CPRI_PUT(&b, m->bytes);
    CPRI_PUT(&b, m->committed_unix_ms);
    CPRI_PUT(&b, m->codecs);
    CPRI_PUT(&b, (uint32_t)m->n_tables);
    for (size_t i = 0; i < m->n_tables; i++) {
        CPRI_PUT(&b, m->tables[i].table);
        CPRI_PUT(&b, m->tables[i].rows);
        CPRI_PUT(&b, m->tables[i].dim);
        CPRI_PUT(&b, m->tables[i].state_dim);
    }
    CPRI_PUT(&b, (uint32_t)m->n_blobs);
    for (size_t i = 0; i < m->n_blobs; i++) {
        const cpri_blob_meta *bl = &m->blobs[i];
        uint8_t name_len = (uint8_t)strlen(bl->name);
        CPRI_PUT(&b, name_len);
        cpri_wbuf_put(&b, bl->name, name_len);
        CPRI_PUT(&b, bl->size);
        CPRI_PUT(&b, (uint32_t)bl->n_crcs);
        cpri_wbuf_put(&b, bl->crcs, bl->n_crcs * sizeof(uint32_t));
    }
    CPRI_PUT(&b, m->seg_token);
    CPRI_PUT(&b, m->seg_bytes);
    CPRI_PUT(&b, (uint32_t)m->n_blocks);
    for (size_t i = 0; i < m->n_blocks; i++)
        cpri_put_block_ref(&b, &m->blocks[i]);
    if (!b.oom)
        CPRI_PUT(&b, cpr_crc32c(0, b.p, b.len));
    if (b.oom) {
        free(b.p);
        return cpr_fail(CPR_NO_MEMORY, "out of memory encoding part metadata");
    }
    *buf = b.p;
    *len = b.len;
    return CPR_OK;
}


static cpr_status decode_blobs(cpri_rbuf *r, cpri_part_meta *m)
{
    uint32_t n;
    CPRI_GET(r, n);
    if (r->bad || n > (r->len - r->off) / 13)
        return CPR_CORRUPT;
    m->blobs = calloc(n ? n : 1, sizeof *m->blobs);
    if (!m->blobs)
        return CPR_NO_MEMORY;
    m->n_blobs = n;
    for (uint32_t i = 0; i < n && !r->bad; i++) {
        cpri_blob_meta *bl = &m->blobs[i];
        uint8_t name_len;
        uint32_t n_crcs;
        CPRI_GET(r, name_len);
        if (name_len > CPR_NAME_MAX)
            return CPR_CORRUPT;
        cpri_rbuf_get(r, bl->name, name_len);
        CPRI_GET(r, bl->size);
        CPRI_GET(r, n_crcs);
        if (r->bad || n_crcs > (r->len - r->off) / 4 ||
            n_crcs != (bl->size + (1u << 20) - 1) / (1u << 20))
            return CPR_CORRUPT;
        bl->crcs = malloc((n_crcs ? n_crcs : 1) * sizeof(uint32_t));
        if (!bl->crcs)
            return CPR_NO_MEMORY;
        bl->n_crcs = n_crcs;
        cpri_rbuf_get(r, bl->crcs, n_crcs * sizeof(uint32_t));
    }
    return r->bad ? CPR_CORRUPT : CPR_OK;
}

static cpr_status decode_blocks(cpri_rbuf *r, cpri_part_meta *m)
{
    uint32_t n;
    CPRI_GET(r, m->seg_token);
    CPRI_GET(r, m->seg_bytes);
    CPRI_GET(r, n);
    if (r->bad || n > (r->len - r->off) / CPRI_BLOCK_REF_BYTES)
        return CPR_CORRUPT;
    m->blocks = malloc((n ? n : 1) * sizeof *m->blocks);
    if (!m->blocks)
        return CPR_NO_MEMORY;
    m->n_blocks = m->cap_blocks = n;
    for (uint32_t i = 0; i < n; i++) {
        cpri_block_ref *b = &m->blocks[i];
        cpri_get_block_ref(r, b);
        if (b->n == 0 || b->first > b->last || b->offset % 8 ||
            b->offset + b->len > m->seg_bytes)
            return CPR_CORRUPT;
    }
    return r->bad ? CPR_CORRUPT : CPR_OK;
}

static cpr_status decode_body(cpri_rbuf *r, cpri_part_meta *m)
{
    uint8_t version, kind;
    uint32_t n_tables;
    CPRI_GET(r, version);
    CPRI_GET(r, kind);
    if (r->bad || version < META_VERSION_MIN || version > META_VERSION || kind < CPR_KIND_FULL ||
        kind > CPR_KIND_PRIORITY)
        return CPR_CORRUPT;
    m->kind = (cpr_kind)kind;
    CPRI_GET(r, m->shard);
    CPRI_GET(r, m->checkpoint);
    CPRI_GET(r, m->step);
    CPRI_GET(r, m->num_shards);
    CPRI_GET(r, m->base);
    CPRI_GET(r, m->rows);
    CPRI_GET(r, m->bytes);
    CPRI_GET(r, m->committed_unix_ms);
    if (version >= 3)
        CPRI_GET(r, m->codecs);
    CPRI_GET(r, n_tables);
    if (r->bad || n_tables > (r->len - r->off) / 20)
        return CPR_CORRUPT;
    m->tables = calloc(n_tables ? n_tables : 1, sizeof *m->tables);
    if (!m->tables)
        return CPR_NO_MEMORY;
    m->n_tables = n_tables;
    for (uint32_t i = 0; i < n_tables; i++) {
        CPRI_GET(r, m->tables[i].table);
        CPRI_GET(r, m->tables[i].rows);
        CPRI_GET(r, m->tables[i].dim);
        CPRI_GET(r, m->tables[i].state_dim);
    }
    cpr_status st = decode_blobs(r, m);
    return st ? st : decode_blocks(r, m);
}

cpr_status cpri_meta_decode(const void *buf, size_t len, cpri_part_meta *out)
{
    cpri_part_meta m = {0};
    cpri_rbuf r = {.p = buf, .len = len};
    uint32_t stored_crc;
    cpr_status st;

    if (len < 4)
        return cpr_fail(CPR_CORRUPT, "part record of %zu bytes is truncated", len);
    memcpy(&stored_crc, r.p + len - 4, 4);
    if (cpr_crc32c(0, buf, len - 4) != stored_crc)
        return cpr_fail(CPR_CORRUPT, "part record checksum mismatch");
    r.len = len - 4;
    st = decode_body(&r, &m);
    if (st == CPR_OK && r.off != r.len)
        st = CPR_CORRUPT;
    if (st) {
        cpri_meta_release(&m);
        return st == CPR_NO_MEMORY ? cpr_fail(st, "out of memory decoding part record")
                                   : cpr_fail(st, "part record is malformed");
    }
    *out = m;
    return CPR_OK;
}

void cpri_meta_release(cpri_part_meta *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_blobs; i++)
        free(m->blobs[i].crcs);
    free(m->blobs);
    free(m->tables);
    free(m->blocks);
    m->blobs = NULL;
    m->tables = NULL;
    m->blocks = NULL;
    m->n_blobs = m->n_tables = m->n_blocks = m->cap_blocks = 0;
}

cpr_status cpri_meta_copy_tables(cpri_part_meta *dst, const cpr_table_schema *tables,
                                size_t n)
{
    cpr_table_schema *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy)
        return cpr_fail(CPR_NO_MEMORY, "out of memory copying %zu table schemas", n);
    if (n)
        memcpy(copy, tables, n * sizeof *copy);
    free(dst->tables);
    dst->tables = copy;
    dst->n_tables = n;
    return CPR_OK;
}

const cpr_table_schema *cpri_meta_table(const cpri_part_meta *m, uint32_t table)
{
    for (size_t i = 0; i < m->n_tables; i++)
        if (m->tables[i].table == table)
            return &m->tables[i];
    return NULL;
}

const cpri_blob_meta *cpri_meta_blob(const cpri_part_meta *m, const char *name)
{
    for (size_t i = 0; i < m->n_blobs; i++)
        if (strcmp(m->blobs[i].name, name) == 0)
            return &m->blobs[i];
    return NULL;
}

cpr_status cpri_meta_add_block(cpri_part_meta *m, const cpri_block_ref *ref)
{
    if (m->n_blocks == m->cap_blocks) {
        size_t cap = m->cap_blocks ? m->cap_blocks * 2 : 16;
        cpri_block_ref *grown = realloc(m->blocks, cap * sizeof *grown);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory indexing blocks");
        m->blocks = grown;
        m->cap_blocks = cap;
    }
    m->blocks[m->n_blocks++] = *ref;
    return CPR_OK;
}

cpr_status cpri_block_open_ref(const void *data, const cpri_block_ref *ref, cpr_block_view *v)
{
    cpr_status st = cpr_block_open(data, ref->len, v);
    if (st)
        return st;
    if (v->h.table != ref->table || v->h.n != ref->n || v->h.first_row != ref->first ||
        v->h.last_row != ref->last || v->h.crc32c != ref->crc)
        return cpr_fail(CPR_CORRUPT, "the block is not the one the catalog records (table "
                        "%u rows %llu..%llu)", ref->table, (unsigned long long)ref->first,
                        (unsigned long long)ref->last);
    return CPR_OK;
}
