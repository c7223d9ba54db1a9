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
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"
#include "restore.h"
#include "store_internal.h"

#define PLAN_MAGIC 0x50525043u /* "CPRP" */
#define HEAD_BYTES 56
#define TABLE_BYTES 24
#define RANGE_BYTES 16
#define CAND_BYTES 68
#define MAX_ITEMS (1u << 24)
#define MAX_DIM 65536u

typedef struct wbuf {
    unsigned char *p;
} wbuf;

static void put32(wbuf *w, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        *w->p++ = (unsigned char)(v >> (8 * i));
}

static void put64(wbuf *w, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        *w->p++ = (unsigned char)(v >> (8 * i));
}

cpr_status cpri_merge_plan_encode(const cpri_merge_plan *p, unsigned char **buf, size_t *len)
{
    size_t bytes = HEAD_BYTES + p->n_tables * TABLE_BYTES + p->n_ranges * RANGE_BYTES +
                   p->n_cands * CAND_BYTES + 4;
    for (size_t i = 0; i < p->n_objects; i++)
        bytes += 2 + strlen(p->objects[i]);
    if (p->keep_below)
        return cpr_fail(CPR_INTERNAL, "a fold's plan (keep_below) is not a restore's");
    if (p->n_tables > MAX_ITEMS || p->n_ranges > MAX_ITEMS || p->n_objects > MAX_ITEMS ||
        p->n_cands > MAX_ITEMS)
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "a restore plan of %zu tables, %zu ranges, "
                        "%zu segments and %zu blocks cannot be sent (at most %u of each): "
                        "restore fewer shards or tables at once", p->n_tables, p->n_ranges,
                        p->n_objects, p->n_cands, MAX_ITEMS);
    unsigned char *out = malloc(bytes);
    if (!out)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a %zu-byte restore plan", bytes);
    wbuf w = {out};
    put32(&w, PLAN_MAGIC);
    put32(&w, CPR_STORE_PLAN_VERSION);
    put64(&w, p->as_of);
    put64(&w, p->modulo);
    put64(&w, p->remainder);
    put64(&w, p->batch_rows);
    put32(&w, (uint32_t)p->n_tables);
    put32(&w, (uint32_t)p->n_ranges);
    put32(&w, (uint32_t)p->n_objects);
    put32(&w, (uint32_t)p->n_cands);
    for (size_t i = 0; i < p->n_tables; i++) {
        put32(&w, p->tables[i].table);
        put32(&w, p->tables[i].dim);
        put32(&w, p->tables[i].state_dim);
        put32(&w, 0);
        put64(&w, p->tables[i].rows);
    }
    for (size_t i = 0; i < p->n_ranges; i++) {
        put64(&w, p->ranges[i].begin);
        put64(&w, p->ranges[i].end);
    }
    for (size_t i = 0; i < p->n_objects; i++) {
        size_t n = strlen(p->objects[i]);
        *w.p++ = (unsigned char)n;
        *w.p++ = (unsigned char)(n >> 8);
        memcpy(w.p, p->objects[i], n);
        w.p += n;
    }
    for (size_t i = 0; i < p->n_cands; i++) {
        const cpri_merge_cand *c = &p->cands[i];
        put32(&w, c->ref.table);
        put32(&w, c->ref.n);
        put64(&w, c->ref.first);
        put64(&w, c->ref.last);
        put64(&w, c->ref.offset);
        put32(&w, c->ref.len);
        put32(&w, c->ref.crc);
        put32(&w, c->object);
        put32(&w, c->shard);
        put64(&w, c->checkpoint);
        put64(&w, c->seq);
        put32(&w, c->fold ? 1 : 0);
    }
    size_t written = (size_t)(w.p - out);
    if (written != bytes - 4) { /* the layout above and the sizes disagree */
        free(out);
        return cpr_fail(CPR_INTERNAL, "restore plan encoded to %zu bytes of %zu", written,
                        bytes - 4);
    }
    put32(&w, cpr_crc32c(0, out, bytes - 4));
    *buf = out;
    *len = bytes;
    return CPR_OK;
}

typedef struct rbuf {
    const unsigned char *p, *end;
} rbuf;

static uint32_t get32(rbuf *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)*r->p++ << (8 * i);
    return v;
}

static uint64_t get64(rbuf *r)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)*r->p++ << (8 * i);
    return v;
}

static size_t left(const rbuf *r)
{
    return (size_t)(r->end - r->p);
}

static cpr_status bad(const char *why)
{
    return cpr_fail(CPR_INVALID_ARGUMENT, "restore plan refused: %s", why);
}

/* A segment name as the store makes them: "<job>/<rest>" of [A-Za-z0-9._-]. */
static int name_ok(const unsigned char *s, size_t n)
{
    size_t slash = 0;
    if (n == 0 || n >= CPR_SEG_NAME_MAX || s[0] == '.' || s[0] == '/')
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == '/')
            slash++;
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return slash == 1 && s[n - 1] != '/' && !memmem(s, n, "/.", 2);
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

static cpr_status decode(rbuf *r, cpri_merge_plan *p)
{
    if (left(r) < HEAD_BYTES)
        return bad("shorter than its header");
    if (get32(r) != PLAN_MAGIC)
        return bad("not a restore plan (magic)");
    uint32_t version = get32(r);
    if (version != CPR_STORE_PLAN_VERSION)
        return cpr_fail(CPR_INVALID_ARGUMENT, "restore plan refused: version %u, this library "
                        "reads version %u (update the client or the daemon)", version,
                        CPR_STORE_PLAN_VERSION);
    p->as_of = get64(r);
    p->modulo = get64(r);
    p->remainder = get64(r);
    p->batch_rows = get64(r);
    uint32_t nt = get32(r), nr = get32(r), no = get32(r), nc = get32(r);
    if (p->modulo && p->remainder >= p->modulo)
        return bad("remainder not below modulo");
    if (p->batch_rows > (1u << 20))
        return bad("batch_rows over the limit");
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
        t->table = get32(r);
        t->dim = get32(r);
        t->state_dim = get32(r);
        (void)get32(r);
        t->rows = get64(r);
        if (t->dim == 0 || t->dim > MAX_DIM || t->state_dim > MAX_DIM)
            return bad("a table's dims out of range");
        if (i && t->table <= p->tables[i - 1].table)
            return bad("tables not in ascending order");
    }
    for (uint32_t i = 0; i < nr; i++, p->n_ranges++) {
        p->ranges[i].begin = get64(r);
        p->ranges[i].end = get64(r);
        if (p->ranges[i].begin >= p->ranges[i].end ||
            (i && p->ranges[i].begin <= p->ranges[i - 1].end))
            return bad("row ranges empty, overlapping or out of order");
    }
    for (uint32_t i = 0; i < no; i++, p->n_objects++) {
        if (left(r) < 2)
            return bad("truncated in its segment names");
        size_t n = r->p[0] | (size_t)r->p[1] << 8;
        r->p += 2;
        if (left(r) < n || !name_ok(r->p, n))
            return bad("a segment name that the store does not make");
        p->objects[i] = strndup((const char *)r->p, n);
        if (!p->objects[i])
            return cpr_fail(CPR_NO_MEMORY, "out of memory for a restore plan");
        r->p += n;
    }
    if (left(r) != (size_t)nc * CAND_BYTES + 4)
        return bad("its blocks do not fill it");
    for (uint32_t i = 0; i < nc; i++, p->n_cands++) {
        cpri_merge_cand *c = &p->cands[i];
        c->ref.table = get32(r);
        c->ref.n = get32(r);
        c->ref.first = get64(r);
        c->ref.last = get64(r);
        c->ref.offset = get64(r);
        c->ref.len = get32(r);
        c->ref.crc = get32(r);
        c->object = get32(r);
        c->shard = get32(r);
        c->checkpoint = get64(r);
        c->seq = get64(r);
        uint32_t fold = get32(r);
        c->fold = fold == 1;
        if (!table_known(p, c->ref.table) || c->object >= no || fold > 1 || (c->fold && c->checkpoint) ||
            c->ref.n == 0 || c->ref.first > c->ref.last ||
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
    rbuf r = {b, b + len};
    cpr_status st = decode(&r, p);
    if (st)
        cpri_merge_plan_release(p);
    return st;
}
