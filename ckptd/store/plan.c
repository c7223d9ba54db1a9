/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A restore's plan as bytes (restore.h; restore.c M4): what a gateway sends a
 * client that reads the pool itself. The format is a contract between ckptd
 * and clients of other builds (CPR_STORE_PLAN_VERSION; docs/format.md,
 * "Restore plans"), little-endian:
 *
 *   u32 magic "CPRP"   u32 version          u64 as_of
 *   u64 modulo         u64 remainder        u64 batch_rows
 *   u32 n_tables       u32 n_ranges         u32 n_objects     u32 n_cands
 *   n_tables x  { u32 table  u32 dim  u32 state_dim  u32 0  u64 rows }
 *   n_ranges x  { u64 begin  u64 end }
 *   n_objects x { u16 length, then the name's bytes }
 *   n_cands x   { u32 table  u32 n  u64 first  u64 last  u64 offset
 *                 u32 len  u32 crc  u32 object  u32 shard  u64 checkpoint
 *                 u64 seq  u32 fold }
 *   u32 CRC32C of everything before it
 *
 * Decoding trusts nothing: a plan from a daemon of another build, or damaged
 * on the way, is refused with a message, never merged (the merge relies on
 * the order of candidates, M1, and on every index being in range).
 */
#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"
#include "meta.h"
#include "restore.h"
#include "store_internal.h"

#define PLAN_MAGIC 0x50525043u /* "CPRP" */
#define HEAD_BYTES 56
#define TABLE_BYTES 24
#define RANGE_BYTES 16
#define CAND_BYTES (CPRI_BLOCK_REF_BYTES + 28) /* ref, object, shard, checkpoint, seq, fold */
#define MAX_ITEMS (1u << 24)

cpr_status cpri_merge_plan_encode(const cpri_merge_plan *p, unsigned char **buf, size_t *len)
{
    if (p->keep_below)
        return cpr_fail(CPR_INTERNAL, "a fold's plan (keep_below) is not a restore's");
    if (p->n_tables > MAX_ITEMS || p->n_ranges > MAX_ITEMS || p->n_objects > MAX_ITEMS ||
        p->n_cands > MAX_ITEMS)
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "a restore plan of %zu tables, %zu ranges, "
                        "%zu segments and %zu blocks cannot be sent (at most %u of each): "
                        "restore fewer shards or tables at once", p->n_tables, p->n_ranges,
                        p->n_objects, p->n_cands, MAX_ITEMS);
    cpri_wbuf w = {0};
    CPRI_PUT(&w, (uint32_t)PLAN_MAGIC);
    CPRI_PUT(&w, (uint32_t)CPR_STORE_PLAN_VERSION);
    CPRI_PUT(&w, p->as_of);
    CPRI_PUT(&w, p->modulo);
    CPRI_PUT(&w, p->remainder);
    CPRI_PUT(&w, (uint64_t)p->batch_rows);
    CPRI_PUT(&w, (uint32_t)p->n_tables);
    CPRI_PUT(&w, (uint32_t)p->n_ranges);
    CPRI_PUT(&w, (uint32_t)p->n_objects);
    CPRI_PUT(&w, (uint32_t)p->n_cands);
    for (size_t i = 0; i < p->n_tables; i++) {
        CPRI_PUT(&w, p->tables[i].table);
        CPRI_PUT(&w, p->tables[i].dim);
        CPRI_PUT(&w, p->tables[i].state_dim);
        CPRI_PUT(&w, (uint32_t)0);
        CPRI_PUT(&w, p->tables[i].rows);
    }
    for (size_t i = 0; i < p->n_ranges; i++) {
        CPRI_PUT(&w, p->ranges[i].begin);
        CPRI_PUT(&w, p->ranges[i].end);
    }
    for (size_t i = 0; i < p->n_objects; i++) {
        uint16_t n = (uint16_t)strlen(p->objects[i]); /* < CPR_SEG_NAME_MAX */
        CPRI_PUT(&w, n);
        cpri_wbuf_put(&w, p->objects[i], n);
    }
    for (size_t i = 0; i < p->n_cands; i++) {
        const cpri_merge_cand *c = &p->cands[i];
        cpri_put_block_ref(&w, &c->ref);
        CPRI_PUT(&w, c->object);
        CPRI_PUT(&w, c->shard);
        CPRI_PUT(&w, c->checkpoint);
        CPRI_PUT(&w, c->seq);
        CPRI_PUT(&w, (uint32_t)(c->fold ? 1 : 0));
    }
    if (!w.oom)
        CPRI_PUT(&w, cpr_crc32c(0, w.p, w.len));
    if (w.oom) {
        free(w.p);
        return cpr_fail(CPR_NO_MEMORY, "out of memory encoding a restore plan of %zu blocks",
                        p->n_cands);
    }
    *buf = w.p;
    *len = w.len;
    return CPR_OK;
}

static size_t left(const cpri_rbuf *r)
{
    return r->len - r->off;
}

static cpr_status bad(const char *why)
{
    return cpr_fail(CPR_INVALID_ARGUMENT, "restore plan refused: %s", why);
}

static int cand_before(const cpri_merge_cand *x, const cpri_merge_cand *y)
{
    if (x->ref.table != y->ref.table)
        return x->ref.table < y->ref.table;
    if (x->ref.first != y->ref.first)
        return x->ref.first < y->ref.first;
    if (x->object != y->object)
        return x->object < y->object;
    return x->seq < y->seq;
}

/* Is `table` among the plan's (ascending: checked before the blocks)? */
static int table_known(const cpri_merge_plan *p, uint32_t table)
{
    size_t lo = 0, hi = p->n_tables;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->tables[mid].table < table)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n_tables && p->tables[lo].table == table;
}

static cpr_status decode(cpri_rbuf *r, cpri_merge_plan *p)
{
    uint32_t magic, version, nt, nr, no, nc;
    uint64_t batch_rows;
    CPRI_GET(r, magic);
    CPRI_GET(r, version);
    if (r->bad || magic != PLAN_MAGIC)
        return bad("not a restore plan (magic)");
    if (version != CPR_STORE_PLAN_VERSION)
        return cpr_fail(CPR_INVALID_ARGUMENT, "restore plan refused: version %u, this library "
                        "reads version %u (update the client or the daemon)", version,
                        CPR_STORE_PLAN_VERSION);
    CPRI_GET(r, p->as_of);
    CPRI_GET(r, p->modulo);
    CPRI_GET(r, p->remainder);
    CPRI_GET(r, batch_rows);
    CPRI_GET(r, nt);
    CPRI_GET(r, nr);
    CPRI_GET(r, no);
    CPRI_GET(r, nc);
    if (r->bad)
        return bad("shorter than its header");
    p->batch_rows = (size_t)batch_rows;
    if (p->modulo && p->remainder >= p->modulo)
        return bad("remainder not below modulo");
    if (batch_rows > (1u << 20))
        return bad("batch_rows over the limit");
    /* bound the allocations by the bytes there are */
    if (nt > MAX_ITEMS || nr > MAX_ITEMS || no > MAX_ITEMS || nc > MAX_ITEMS ||
        (uint64_t)nt * TABLE_BYTES + (uint64_t)nr * RANGE_BYTES + (uint64_t)no * 2 +
                (uint64_t)nc * CAND_BYTES > left(r))
        return bad("counts larger than its bytes");
    p->tables = malloc((nt ? nt : 1) * sizeof *p->tables);
    p->ranges = malloc((nr ? nr : 1) * sizeof *p->ranges);
    p->objects = calloc(no ? no : 1, sizeof *p->objects);
    p->cands = malloc((nc ? nc : 1) * sizeof *p->cands);
    if (!p->tables || !p->ranges || !p->objects || !p->cands)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a restore plan of %u blocks", nc);
    p->cap_objects = no;
    p->cap_cands = nc;
    for (uint32_t i = 0; i < nt; i++, p->n_tables++) {
        cpr_table_schema *t = &p->tables[i];
        uint32_t zero;
        CPRI_GET(r, t->table);
        CPRI_GET(r, t->dim);
        CPRI_GET(r, t->state_dim);
        CPRI_GET(r, zero);
        CPRI_GET(r, t->rows);
        if (t->dim == 0 || t->dim > CPRI_MAX_DIM || t->state_dim > CPRI_MAX_DIM)
            return bad("a table's dims out of range");
        if (i && t->table <= p->tables[i - 1].table)
            return bad("tables not in ascending order");
    }
    for (uint32_t i = 0; i < nr; i++, p->n_ranges++) {
        CPRI_GET(r, p->ranges[i].begin);
        CPRI_GET(r, p->ranges[i].end);
        if (p->ranges[i].begin >= p->ranges[i].end ||
            (i && p->ranges[i].begin <= p->ranges[i - 1].end))
            return bad("row ranges empty, overlapping or out of order");
    }
    for (uint32_t i = 0; i < no; i++, p->n_objects++) {
        uint16_t n;
        CPRI_GET(r, n);
        if (r->bad)
            return bad("truncated in its segment names");
        if (left(r) < n || !cpri_seg_name_ok(r->p + r->off, n))
            return bad("a segment name that the store does not make");
        p->objects[i] = strndup((const char *)r->p + r->off, n);
        if (!p->objects[i])
            return cpr_fail(CPR_NO_MEMORY, "out of memory for a restore plan");
        r->off += n;
    }
    if (left(r) != (size_t)nc * CAND_BYTES)
        return bad("its blocks do not fill it");
    for (uint32_t i = 0; i < nc; i++, p->n_cands++) {
        cpri_merge_cand *c = &p->cands[i];
        uint32_t fold;
        cpri_get_block_ref(r, &c->ref);
        CPRI_GET(r, c->object);
        CPRI_GET(r, c->shard);
        CPRI_GET(r, c->checkpoint);
        CPRI_GET(r, c->seq);
        CPRI_GET(r, fold);
        c->fold = fold == 1;
        if (!table_known(p, c->ref.table) || c->object >= no || fold > 1 ||
            (c->fold && c->checkpoint) || c->ref.n == 0 || c->ref.first > c->ref.last ||
            c->ref.last - c->ref.first < (uint64_t)c->ref.n - 1 ||
            c->ref.len < CPR_BLOCK_HEADER_BYTES || c->ref.len > CPR_BLOCK_MAX_BYTES ||
            c->ref.offset > UINT64_MAX - c->ref.len)
            return bad("a block out of range (table, segment, rows or length)");
        if (i && cand_before(c, &p->cands[i - 1]))
            return bad("blocks not in merge order");
    }
    return CPR_OK;
}

cpr_status cpri_merge_plan_decode(const void *buf, size_t len, cpri_merge_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!buf || len < HEAD_BYTES + 4)
        return bad("shorter than its header");
    const unsigned char *b = buf;
    uint32_t crc = (uint32_t)b[len - 4] | (uint32_t)b[len - 3] << 8 |
                   (uint32_t)b[len - 2] << 16 | (uint32_t)b[len - 1] << 24;
    if (cpr_crc32c(0, b, len - 4) != crc)
        return cpr_fail(CPR_CORRUPT, "restore plan failed its CRC32C in transit");
    cpri_rbuf r = {.p = b, .len = len - 4};
    cpr_status st = decode(&r, p);
    if (st)
        cpri_merge_plan_release(p);
    return st;
}
