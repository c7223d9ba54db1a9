/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Restore: rows "as of" a checkpoint, in (table, row) order, read from the
 * blocks that can hold the answer and merged newest first.
 *
 * Sources. As of C, shard s's state is its newest FULL part at or below C
 * and the parts of s after it up to C; when a fold (s, X) exists with
 * FULL < X <= C, the fold replaces every part of s below X (catalog C6).
 * Every shard with a part at or below C contributes its sources; a row's
 * answer is its newest version among all of them (by checkpoint; between
 * shards at the same checkpoint the lower shard; within one part the later
 * block). Blocks whose table or row span misses the query are not read.
 *
 * Merge. The candidate blocks of a table are sorted by first row and read
 * in that order (backend read_start: several reads in flight). A block is
 * loaded when the merge reaches its first row, its CRC32C and header are
 * checked against the catalog before any of its rows is used, and it is
 * freed when the merge passes its last row; a binary heap of cursors keyed
 * by (row id, priority) yields each row's winner. A stretch where one block
 * is alone is copied as a run, and a whole stored block that the query
 * selects entirely is handed on unchanged (pass-through).
 *
 * Blocks of another codec than f32 (cpr/codec.h) are decoded as their rows
 * are copied into a batch; a block handed on whole stays encoded (the row
 * API decodes it at the end: block_to_batch).
 *
 * Invariants
 *  M1. A cursor is loaded before the merge emits any row >= its first row
 *      (candidates are loaded while their first row <= the heap's least
 *      id), so every version of an emitted row was in the heap.
 *  M2. Memory: the reads in flight, the blocks whose row span the merge
 *      is inside, and one output batch. The reads in flight are at most
 *      the backend's read_depth blocks, and fewer when several restores
 *      read at once: together they aim at its read_ahead_bytes
 *      (fetch_depth), at least FETCH_DEPTH_MIN blocks each. Read-ahead
 *      beyond that buys nothing the other streams do not already keep
 *      busy, and every byte of it is memory a cold daemon must fault in.
 *      The split is taken at each restore's start, from the restores
 *      reading then; a backend that holds its readers to read_ahead_bytes
 *      as they read (shares_read_ahead: RADOS, rados.h R11) gets no split,
 *      only read_depth.
 *  M3. The catalog is read only under store->mu, in plan(); the restore is
 *      registered as a reader there (S7), so the segments it planned to
 *      read outlive any GC or fold that removes their records.
 *  M4. Direct reads (cpr_store_restore_plan): the plan leaves the process
 *      (plan.c encodes it) and another process runs the merge over the
 *      pool or directory (direct.c). Its reads come after this store has
 *      stopped counting it as a reader, so what keeps its segments is S8: a
 *      segment stays DOOM_GRACE_S after its record goes. A segment read
 *      later is missing, never other bytes (names are never reused), and
 *      every block is checked against its catalog record as here.
 *  M5. After the merge takes a row from cursor w, w's following rows whose
 *      ids are below both the heap's least id and the next unloaded
 *      candidate's first row are in no other block (by M1 and the order of
 *      candidates), so they go as runs (emit_until) instead of row by row
 *      through the heap: a FULL under a sparse PRIORITY part goes as runs
 *      between the PRIORITY part's rows.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/codec.h"
#include "cpr/crc32c.h"
#include "restore.h"
#include "store_internal.h"

#define DEFAULT_BATCH_ROWS 16384
#define DEFAULT_BATCH_BYTES (3u << 20)
#define MAX_BATCH_ROWS CPR_RESTORE_BATCH_ROWS_MAX /* x dim 65536 x 4 bytes: far from overflow */
#define MAX_QUERY_ITEMS (1u << 20)     /* tables or ranges in one query */
#define FETCH_DEPTH_MIN 2
/* A block restore's re-batched output is meant for a stream (ckptd's
 * Restore): at most this many bytes a message. Small messages keep the
 * working set of both ends in cache; 2 MiB ones made 16 concurrent
 * restores 2x slower (docs/performance.md). */
#define STREAM_BATCH_BYTES ((size_t)256 << 10)

/* ---- planning ------------------------------------------------------------- */

static int range_cmp(const void *a, const void *b)
{
    const cpr_row_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Sorted, merged copy of the query's ranges (all rows if none). */
static cpr_status normalise_ranges(const cpr_row_range *in, size_t n_in, cpr_row_range **out,
                                   size_t *n)
{
    size_t count = n_in ? n_in : 1, merged = 0;
    cpr_row_range *rs = malloc(count * sizeof *rs);
    if (!rs)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for %zu ranges", count);
    if (n_in == 0) {
        rs[0] = (cpr_row_range){0, UINT64_MAX};
    } else {
        memcpy(rs, in, count * sizeof *rs);
        qsort(rs, count, sizeof *rs, range_cmp);
    }
    for (size_t i = 0; i < count; i++) {
        if (rs[i].begin >= rs[i].end)
            continue;
        if (merged && rs[i].begin <= rs[merged - 1].end) {
            if (rs[i].end > rs[merged - 1].end)
                rs[merged - 1].end = rs[i].end;
        } else {
            rs[merged++] = rs[i];
        }
    }
    *out = rs;
    *n = merged;
    return CPR_OK;
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorted, unique copy of the query's tables, made before the store's lock
 * is taken: a query naming a table a million times costs its own thread a
 * sort, and the planning under the lock one lookup per distinct table. */
static cpr_status normalise_tables(const uint32_t *in, size_t n_in, uint32_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (n_in == 0)
        return CPR_OK;
    uint32_t *ts = malloc(n_in * sizeof *ts);
    if (!ts)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for %zu tables", n_in);
    memcpy(ts, in, n_in * sizeof *ts);
    qsort(ts, n_in, sizeof *ts, u32_cmp);
    size_t uniq = 0;
    for (size_t i = 0; i < n_in; i++)
        if (uniq == 0 || ts[uniq - 1] != ts[i])
            ts[uniq++] = ts[i];
    *out = ts;
    *n = uniq;
    return CPR_OK;
}

/* Index of the first range with end > row (n if none). */
static size_t range_at(const cpr_row_range *rs, size_t n, uint64_t row)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rs[mid].end <= row)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int span_selected(const cpri_merge_plan *p, uint64_t first, uint64_t last)
{
    size_t i = range_at(p->ranges, p->n_ranges, first);
    return i < p->n_ranges && p->ranges[i].begin <= last;
}

static int table_wanted(const cpri_merge_plan *p, uint32_t table)
{
    for (size_t i = 0; i < p->n_tables; i++)
        if (p->tables[i].table == table)
            return 1;
    return 0;
}

static cpr_status add_object(cpri_merge_plan *p, const char *name, uint32_t *index)
{
    if (p->n_objects && strcmp(p->objects[p->n_objects - 1], name) == 0) {
        *index = (uint32_t)(p->n_objects - 1);
        return CPR_OK;
    }
    if (p->n_objects == p->cap_objects) {
        size_t cap = p->cap_objects ? p->cap_objects * 2 : 16;
        char **grown = realloc(p->objects, cap * sizeof *grown);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory planning a restore");
        p->objects = grown;
        p->cap_objects = cap;
    }
    p->objects[p->n_objects] = strdup(name);
    if (!p->objects[p->n_objects])
        return cpr_fail(CPR_NO_MEMORY, "out of memory planning a restore");
    *index = (uint32_t)p->n_objects++;
    return CPR_OK;
}

static cpr_status add_candidate(cpri_merge_plan *p, const cpri_merge_cand *c)
{
    if (p->n_cands == p->cap_cands) {
        size_t cap = p->cap_cands ? p->cap_cands * 2 : 64;
        cpri_merge_cand *grown = realloc(p->cands, cap * sizeof *grown);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory planning a restore");
        p->cands = grown;
        p->cap_cands = cap;
    }
    p->cands[p->n_cands++] = *c;
    return CPR_OK;
}

/* The blocks of one source (a part, or a fold) that the query can use. */
static cpr_status add_source(cpri_merge_plan *p, const char *job, const cpri_part_meta *m,
                             int fold)
{
    char name[CPR_SEG_NAME_MAX];
    uint32_t obj = 0;
    int have_obj = 0;
    cpr_status st = CPR_OK;
    if (!m->seg_token)
        return CPR_OK;
    (fold ? cpri_seg_fold_name : cpri_seg_part_name)(name, job, m->shard, m->checkpoint,
                                                   m->seg_token);
    for (size_t i = 0; st == CPR_OK && i < m->n_blocks; i++) {
        const cpri_block_ref *b = &m->blocks[i];
        if (!table_wanted(p, b->table) || !span_selected(p, b->first, b->last))
            continue;
        if (!have_obj) {
            st = add_object(p, name, &obj);
            have_obj = 1;
        }
        cpri_merge_cand c = {
            .ref = *b, .object = obj, .shard = m->shard,
            .checkpoint = fold ? 0 : m->checkpoint, .seq = i, .fold = fold,
        };
        if (st == CPR_OK)
            st = add_candidate(p, &c);
    }
    return st;
}

cpr_status cpri_shard_sources(const cpri_job *job, uint32_t shard, uint64_t as_of,
                             const cpri_part_meta **fold, uint64_t *start)
{
    const cpri_part_meta *full = NULL;
    for (size_t i = 0; i < job->n_parts; i++) {
        const cpri_part_meta *m = &job->parts[i];
        if (m->checkpoint > as_of)
            break;
        if (m->shard == shard && m->kind == CPR_KIND_FULL)
            full = m;
    }
    const cpri_part_meta *f = cpri_job_fold_at_most(job, shard, as_of);
    if (f && (!full || f->checkpoint > full->checkpoint)) {
        *fold = f;
        *start = f->checkpoint;
    } else {
        *fold = NULL;
        *start = full ? full->checkpoint : 0;
    }
    return CPR_OK;
}

/* Distinct shards with a part or fold at or below as_of, ascending. */
static cpr_status shards_of(const cpri_job *job, uint64_t as_of, uint32_t **out, size_t *n)
{
    size_t cap = job->n_parts + job->n_folds + 1, count = 0;
    uint32_t *s = malloc(cap * sizeof *s);
    if (!s)
        return cpr_fail(CPR_NO_MEMORY, "out of memory planning a restore");
    for (size_t i = 0; i < job->n_parts; i++)
        if (job->parts[i].checkpoint <= as_of)
            s[count++] = job->parts[i].shard;
    for (size_t i = 0; i < job->n_folds; i++)
        if (job->folds[i].checkpoint <= as_of)
            s[count++] = job->folds[i].shard;
    /* few shards: insertion sort and dedupe */
    size_t uniq = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t v = s[i];
        size_t j = uniq;
        int dup = 0;
        for (size_t k = 0; k < uniq; k++)
            dup |= s[k] == v;
        if (dup)
            continue;
        while (j > 0 && s[j - 1] > v) {
            s[j] = s[j - 1];
            j--;
        }
        s[j] = v;
        uniq++;
    }
    *out = s;
    *n = uniq;
    return CPR_OK;
}

/* Candidates of one shard as of `as_of` (sources above). */
static cpr_status plan_shard(cpri_merge_plan *p, const cpri_job *job, uint32_t shard,
                             uint64_t as_of)
{
    const cpri_part_meta *fold;
    uint64_t start;
    cpr_status st = cpri_shard_sources(job, shard, as_of, &fold, &start);
    if (st == CPR_OK && p->store)
        st = cpri_store_check_folds(p->store, job, shard, start, as_of); /* S5 */
    if (st == CPR_OK && fold)
        st = add_source(p, job->name, fold, 1);
    for (size_t i = 0; st == CPR_OK && i < job->n_parts; i++) {
        const cpri_part_meta *m = &job->parts[i];
        if (m->checkpoint > as_of)
            break;
        if (m->shard == shard && m->checkpoint >= start)
            st = add_source(p, job->name, m, 0);
    }
    return st;
}

static int cand_cmp(const void *a, const void *b)
{
    const cpri_merge_cand *x = a, *y = b;
    if (x->ref.table != y->ref.table)
        return x->ref.table < y->ref.table ? -1 : 1;
    if (x->ref.first != y->ref.first)
        return x->ref.first < y->ref.first ? -1 : 1;
    if (x->object != y->object)
        return x->object < y->object ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int schema_cmp(const void *a, const void *b)
{
    uint32_t x = ((const cpr_table_schema *)a)->table, y = ((const cpr_table_schema *)b)->table;
    return x < y ? -1 : x > y;
}

cpr_status cpri_merge_plan_build(cpri_merge_plan *p, const cpri_job *job, uint64_t as_of,
                                const uint32_t *tables, size_t n_tables, int only_shard,
                                uint32_t shard)
{
    size_t n = n_tables ? n_tables : job->n_tables;
    p->as_of = as_of;
    p->tables = malloc((n ? n : 1) * sizeof *p->tables);
    if (!p->tables)
        return cpr_fail(CPR_NO_MEMORY, "out of memory planning a restore");
    for (size_t i = 0; i < n; i++) {
        const cpr_table_schema *t = n_tables ? cpri_job_table(job, tables[i]) : &job->tables[i];
        if (!t)
            return cpr_fail(CPR_NOT_FOUND, "table %u is not part of job %s: no committed "
                            "part declares it", tables[i], job->name);
        p->tables[i] = *t;
    }
    qsort(p->tables, n, sizeof *p->tables, schema_cmp);
    size_t uniq = 0;
    for (size_t i = 0; i < n; i++)
        if (uniq == 0 || p->tables[uniq - 1].table != p->tables[i].table)
            p->tables[uniq++] = p->tables[i];
    p->n_tables = uniq;
    cpr_status st = CPR_OK;
    if (only_shard) {
        st = plan_shard(p, job, shard, as_of);
    } else {
        uint32_t *shards = NULL;
        size_t n_shards = 0;
        st = shards_of(job, as_of, &shards, &n_shards);
        for (size_t i = 0; st == CPR_OK && i < n_shards; i++)
            st = plan_shard(p, job, shards[i], as_of);
        free(shards);
    }
    if (st == CPR_OK && p->n_cands) /* none: cands may be NULL, no qsort of it */
        qsort(p->cands, p->n_cands, sizeof *p->cands, cand_cmp);
    return st;
}

void cpri_merge_plan_release(cpri_merge_plan *p)
{
    for (size_t i = 0; i < p->n_objects; i++)
        free(p->objects[i]);
    free(p->objects);
    free(p->cands);
    free(p->tables);
    free(p->ranges);
    memset(p, 0, sizeof *p);
}

/* ---- cursors and the heap ---------------------------------------------------- */

typedef struct cursor {
    void *owner;                 /* the read buffer */
    const unsigned char *data;   /* the stored block */
    cpr_block_view v;
    uint32_t pos;
    const cpri_merge_cand *cand;
} cursor;

static uint64_t version_of(const cursor *c)
{
    return c->v.versions ? c->v.versions[c->pos] : c->cand->checkpoint;
}

/* Does a's row version beat b's (same row id)? */
static int beats(const cursor *a, const cursor *b)
{
    uint64_t va = version_of(a), vb = version_of(b);
    if (va != vb)
        return va > vb;
    if (a->cand->shard != b->cand->shard)
        return a->cand->shard < b->cand->shard;
    return a->cand->seq > b->cand->seq;
}

static int before(const cursor *a, const cursor *b)
{
    uint64_t ia = a->v.ids[a->pos], ib = b->v.ids[b->pos];
    return ia != ib ? ia < ib : beats(a, b);
}

typedef struct heap {
    cursor **c;
    size_t n, cap;
} heap;

static cpr_status heap_push(heap *h, cursor *x)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        cursor **grown = realloc(h->c, cap * sizeof *grown);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory merging blocks");
        h->c = grown;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && before(x, h->c[(i - 1) / 2])) {
        h->c[i] = h->c[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->c[i] = x;
    return CPR_OK;
}

static cursor *heap_pop(heap *h)
{
    cursor *top = h->c[0], *last = h->c[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cursor *best = last;
        if (l < h->n && before(h->c[l], best)) {
            m = l;
            best = h->c[l];
        }
        if (r < h->n && before(h->c[r], best))
            m = r;
        if (m == i)
            break;
        h->c[i] = h->c[m];
        i = m;
    }
    if (h->n)
        h->c[i] = last;
    return top;
}


/* ---- output ------------------------------------------------------------------ */

typedef struct out_batch {
    const cpri_merge_sink *sink;
    const cpr_table_schema *t;
    size_t n, cap;
    size_t pass_rows;          /* a stored block of at most this many rows passes whole */
    uint64_t *ids, *versions;
    float *values, *state;
    cpr_codec codec;           /* of the rows held (f32 unless sink->keep_codec) */
    unsigned char *enc;        /* keep_codec: the rows as stored, when not f32 */
    size_t enc_row_cap;        /* bytes a row of enc may take */
    cpr_restore_result *res;
} out_batch;

static cpr_status out_flush(out_batch *o)
{
    if (o->n == 0)
        return CPR_OK;
    cpri_merge_rows rows = {
        .table = o->t->table, .dim = o->t->dim, .state_dim = o->t->state_dim, .n = o->n,
        .ids = o->ids, .versions = o->sink->want_versions ? o->versions : NULL,
        .values = o->codec == CPR_CODEC_F32 ? o->values : NULL,
        .state = o->t->state_dim ? o->state : NULL, .codec = o->codec,
        .encoded = o->codec == CPR_CODEC_F32 ? NULL : o->enc,
        .row_bytes = cpr_codec_row_bytes(o->codec, o->t->dim),
    };
    o->res->rows += o->n;
    o->res->bytes += o->n * (8 + ((uint64_t)o->t->dim + o->t->state_dim) * 4);
    o->n = 0;
    return o->sink->rows(o->sink->ctx, &rows);
}

/* Rows [i, j) of cursor c (all selected) into the batch. */
static cpr_status out_copy(out_batch *o, const cursor *c, uint32_t i, uint32_t j)
{
    const cpr_table_schema *t = o->t;
    cpr_status st = CPR_OK;
    cpr_codec codec = o->sink->keep_codec ? (cpr_codec)c->v.h.codec : CPR_CODEC_F32;
    if (codec != o->codec) { /* a batch holds rows of one codec */
        st = out_flush(o);
        if (st == CPR_OK && codec != CPR_CODEC_F32 && c->v.row_bytes > o->enc_row_cap)
            st = cpr_fail(CPR_INTERNAL, "encoded rows of %zu bytes over the batch's %zu",
                          c->v.row_bytes, o->enc_row_cap);
        o->codec = codec;
    }
    while (st == CPR_OK && i < j) {
        size_t take = o->cap - o->n;
        if (take > j - i)
            take = j - i;
        memcpy(o->ids + o->n, c->v.ids + i, take * 8);
        if (o->sink->want_versions) {
            if (c->v.versions) {
                memcpy(o->versions + o->n, c->v.versions + i, take * 8);
            } else {
                for (size_t k = 0; k < take; k++)
                    o->versions[o->n + k] = c->cand->checkpoint;
            }
        }
        if (codec != CPR_CODEC_F32) { /* kept as stored */
            memcpy(o->enc + o->n * c->v.row_bytes,
                   (const unsigned char *)c->v.encoded + (size_t)i * c->v.row_bytes,
                   take * c->v.row_bytes);
        } else if (c->v.values) {
            memcpy(o->values + o->n * t->dim, c->v.values + (size_t)i * t->dim,
                   take * t->dim * 4);
        } else { /* a quantized block (cpr/codec.h): merged rows come out as f32 */
            st = cpr_block_values(&c->v, i, (uint32_t)take, o->values + o->n * t->dim);
            if (st)
                return st;
        }
        if (t->state_dim)
            memcpy(o->state + o->n * t->state_dim, c->v.state + (size_t)i * t->state_dim,
                   take * t->state_dim * 4);
        o->n += take;
        i += (uint32_t)take;
        if (o->n == o->cap)
            st = out_flush(o);
    }
    return st;
}

/* ---- the merge ------------------------------------------------------------------ */

typedef struct merge {
    cpri_backend *segs;
    const cpri_merge_plan *p;
    cpri_obj_reader *reader;
    out_batch out;
    heap h;
    size_t next;                 /* next candidate to load */
} merge;

/* Free a cursor; its read buffer goes back to the reader for reuse. */
static void cursor_free(merge *m, cursor *c)
{
    if (!c)
        return;
    if (c->owner)
        m->segs->ops->read_release(m->reader, c->owner);
    free(c);
}

static int row_selected(const cpri_merge_plan *p, uint64_t id)
{
    if (p->modulo && id % p->modulo != p->remainder)
        return 0;
    size_t i = range_at(p->ranges, p->n_ranges, id);
    return i < p->n_ranges && p->ranges[i].begin <= id;
}

/* Keep a version? (folds keep versions below keep_below only) */
static int version_kept(const merge *m, const cursor *c)
{
    return !m->p->keep_below || version_of(c) < m->p->keep_below;
}

static cpr_status load_next(merge *m, cursor **out)
{
    const cpri_merge_cand *cand = &m->p->cands[m->next++];
    cursor *c = calloc(1, sizeof *c);
    if (!c)
        return cpr_fail(CPR_NO_MEMORY, "out of memory merging blocks");
    c->cand = cand;
    cpr_status st = m->segs->ops->read_next(m->reader, &c->owner, &c->data);
    if (st == CPR_OK)
        st = cpri_block_open_ref(c->data, &cand->ref, &c->v);
    if (st == CPR_OK && !c->v.versions != !cand->fold)
        st = cpr_fail(CPR_CORRUPT, "a %s block where the catalog records a %s",
                      c->v.versions ? "fold's" : "part's", cand->fold ? "fold" : "part");
    const char *obj = m->p->objects[cand->object];
    if (st == CPR_CORRUPT) {
        char why[512]; /* cpr_fail writes the buffer cpr_errmsg reads */
        snprintf(why, sizeof why, "%s", cpr_errmsg());
        st = cpr_fail(CPR_CORRUPT, "segment %s, block at offset %llu (table %u, rows "
                      "%llu..%llu): %s", obj, (unsigned long long)cand->ref.offset,
                      cand->ref.table, (unsigned long long)cand->ref.first,
                      (unsigned long long)cand->ref.last, why);
    }
    if (st == CPR_OK && (c->v.h.dim != m->out.t->dim || c->v.h.state_dim != m->out.t->state_dim))
        st = cpr_fail(CPR_CORRUPT, "segment %s, block at offset %llu: dims %u+%u, the "
                      "table has %u+%u", obj, (unsigned long long)cand->ref.offset,
                      c->v.h.dim, c->v.h.state_dim, m->out.t->dim, m->out.t->state_dim);
    if (st) {
        cursor_free(m, c);
        return st;
    }
    /* Skip to the first row the query's ranges can select. */
    const cpri_merge_plan *p = m->p;
    size_t r = range_at(p->ranges, p->n_ranges, c->v.h.first_row);
    if (r < p->n_ranges && p->ranges[r].begin > c->v.h.first_row) {
        uint32_t lo = 0, hi = c->v.h.n;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (c->v.ids[mid] < p->ranges[r].begin)
                lo = mid + 1;
            else
                hi = mid;
        }
        c->pos = lo;
    }
    *out = c;
    return CPR_OK;
}

/* Load every candidate of the table whose first row is <= row (M1). */
static cpr_status load_through(merge *m, size_t end, uint64_t row)
{
    cpr_status st = CPR_OK;
    while (st == CPR_OK && m->next < end && m->p->cands[m->next].ref.first <= row) {
        cursor *c = NULL;
        st = load_next(m, &c);
        if (st == CPR_OK && c->pos < c->v.h.n) {
            st = heap_push(&m->h, c);
            if (st)
                cursor_free(m, c);
        } else {
            cursor_free(m, c);
        }
    }
    return st;
}

/* Cursor c's rows from its position while their id is below `bound`, which
 * no other block can hold (merge_table, M5): runs of selected rows. */
static cpr_status emit_until(merge *m, cursor *c, uint64_t bound)
{
    const cpri_merge_plan *p = m->p;
    uint32_t n = c->v.h.n;
    cpr_status st = CPR_OK;
    while (st == CPR_OK && c->pos < n && c->v.ids[c->pos] < bound) {
        uint64_t id = c->v.ids[c->pos];
        size_t r = range_at(p->ranges, p->n_ranges, id);
        if (r == p->n_ranges) { /* past the last range: no later row is selected */
            c->pos = n;
            break;
        }
        uint32_t i = c->pos;
        while (i < n && c->v.ids[i] < p->ranges[r].begin && c->v.ids[i] < bound)
            i++;
        uint32_t j = i;
        while (j < n && c->v.ids[j] < p->ranges[r].end && c->v.ids[j] < bound)
            j++;
        if (!p->modulo && !p->keep_below) {
            st = out_copy(&m->out, c, i, j);
        } else {
            for (uint32_t k = i; st == CPR_OK && k < j; k++) {
                c->pos = k;
                if ((!p->modulo || c->v.ids[k] % p->modulo == p->remainder) &&
                    version_kept(m, c))
                    st = out_copy(&m->out, c, k, k + 1);
            }
        }
        c->pos = j;
    }
    return st;
}

/* The lone cursor c, from its position to its end: runs of selected rows. */
static cpr_status emit_alone(merge *m, cursor *c)
{
    const cpri_merge_plan *p = m->p;
    uint32_t n = c->v.h.n;
    if (c->pos == 0 && m->out.sink->block && !p->modulo && !p->keep_below &&
        !c->v.versions && n <= m->out.pass_rows && row_selected(p, c->v.ids[0]) &&
        range_at(p->ranges, p->n_ranges, c->v.ids[0]) ==
            range_at(p->ranges, p->n_ranges, c->v.ids[n - 1])) {
        /* pass-through: the stored block, unchanged */
        cpr_status st = out_flush(&m->out);
        if (st)
            return st;
        m->out.res->rows += n;
        m->out.res->bytes += (uint64_t)n * (8 + ((uint64_t)c->v.h.dim + c->v.h.state_dim) * 4);
        c->pos = n;
        return m->out.sink->block(m->out.sink->ctx, c->data, c->cand->ref.len, &c->v,
                                  c->cand->checkpoint);
    }
    return emit_until(m, c, UINT64_MAX);
}

/* Merge the candidates [begin, end) of one table. */
static cpr_status merge_table(merge *m, size_t end)
{
    cpr_status st = CPR_OK;
    while (st == CPR_OK) {
        if (m->h.n == 0) {
            if (m->next == end)
                break;
            st = load_through(m, end, m->p->cands[m->next].ref.first);
            continue;
        }
        st = load_through(m, end, m->h.c[0]->v.ids[m->h.c[0]->pos]);
        if (st)
            break;
        cursor *top = m->h.c[0];
        if (m->h.n == 1 &&
            (m->next == end || m->p->cands[m->next].ref.first > top->v.h.last_row)) {
            heap_pop(&m->h);
            st = emit_alone(m, top);
            cursor_free(m, top);
            continue;
        }
        cursor *w = heap_pop(&m->h);
        uint64_t id = w->v.ids[w->pos];
        if (row_selected(m->p, id) && version_kept(m, w))
            st = out_copy(&m->out, w, w->pos, w->pos + 1);
        /* losers: the same row in other blocks */
        while (st == CPR_OK && m->h.n && m->h.c[0]->v.ids[m->h.c[0]->pos] == id) {
            cursor *l = heap_pop(&m->h);
            if (++l->pos < l->v.h.n)
                st = heap_push(&m->h, l);
            if (l->pos >= l->v.h.n || st)
                cursor_free(m, l);
        }
        /* M5: w's next rows below every other block's next row (and the
         * first row of the next block to load) are w's alone: runs. */
        if (st == CPR_OK && ++w->pos < w->v.h.n) {
            uint64_t bound = m->h.n ? m->h.c[0]->v.ids[m->h.c[0]->pos] : UINT64_MAX;
            if (m->next < end && m->p->cands[m->next].ref.first < bound)
                bound = m->p->cands[m->next].ref.first;
            if (w->v.ids[w->pos] < bound)
                st = emit_until(m, w, bound);
        }
        if (st == CPR_OK && w->pos < w->v.h.n) {
            st = heap_push(&m->h, w);
            if (st)
                cursor_free(m, w);
        } else {
            cursor_free(m, w);
        }
    }
    while (m->h.n)
        cursor_free(m, heap_pop(&m->h));
    return st;
}

/* Rows of an output batch; with the sink's byte cap unless `whole` (a
 * stored block handed on as it is, which costs no copy at any size). */
static size_t batch_rows_for(const cpri_merge_plan *p, const cpri_merge_sink *sink,
                             const cpr_table_schema *t, int whole)
{
    /* A batch may become a block (restore_blocks, folds): never over the
     * block limit, whatever batch_rows asks. */
    size_t row = 16 + ((size_t)t->dim + t->state_dim) * 4;
    size_t most = (CPR_BLOCK_MAX_BYTES - CPR_BLOCK_HEADER_BYTES) / row;
    size_t rows = p->batch_rows ? p->batch_rows : DEFAULT_BATCH_BYTES / (row - 8);
    rows = rows > most ? most : rows;
    if (!p->batch_rows && rows > DEFAULT_BATCH_ROWS)
        rows = DEFAULT_BATCH_ROWS;
    if (!whole && sink->max_batch_bytes && rows > sink->max_batch_bytes / (row - 8))
        rows = sink->max_batch_bytes / (row - 8);
    return rows < 1 ? 1 : rows;
}

static cpr_status out_reserve(out_batch *o, const cpr_table_schema *t, size_t cap)
{
    free(o->ids);
    free(o->versions);
    free(o->values);
    free(o->state);
    free(o->enc);
    o->t = t;
    o->n = 0;
    o->cap = cap;
    o->codec = CPR_CODEC_F32;
    o->enc = NULL;
    o->enc_row_cap = 0;
    o->ids = malloc(cap * 8);
    o->versions = malloc(cap * 8);
    o->values = malloc(cap * t->dim * 4);
    o->state = malloc(cap * ((size_t)t->state_dim + 1) * 4);
    if (o->sink->keep_codec) { /* the widest encoded row of any codec */
        for (int c = CPR_CODEC_F32; c <= CPR_CODEC_INT4; c++) {
            size_t rb = cpr_codec_row_bytes((cpr_codec)c, t->dim);
            o->enc_row_cap = rb > o->enc_row_cap ? rb : o->enc_row_cap;
        }
        o->enc = malloc(cap * o->enc_row_cap);
    }
    if (!o->ids || !o->versions || !o->values || !o->state ||
        (o->sink->keep_codec && !o->enc))
        return cpr_fail(CPR_NO_MEMORY, "out of memory for restore batches");
    return CPR_OK;
}

/* Blocks in flight for one of `reading` restores at once (M2). */
static unsigned fetch_depth(const cpri_backend_ops *ops, const cpri_merge_plan *p,
                            unsigned reading)
{
    if (ops->shares_read_ahead)
        return ops->read_depth;
    uint64_t bytes = 0;
    for (size_t i = 0; i < p->n_cands; i++)
        bytes += p->cands[i].ref.len;
    uint64_t per_block = p->n_cands ? bytes / p->n_cands : 0;
    uint64_t share = ops->read_ahead_bytes / (reading ? reading : 1);
    uint64_t depth = per_block ? share / per_block : ops->read_depth;
    return depth < FETCH_DEPTH_MIN ? FETCH_DEPTH_MIN
           : depth > ops->read_depth ? ops->read_depth : (unsigned)depth;
}

/* The merge over `segs`; *reading counts the merges reading it (M2). */
static cpr_status merge_run_on(cpri_backend *segs, _Atomic unsigned *reading_now,
                               const cpri_merge_plan *p, const cpri_merge_sink *sink,
                               cpr_restore_result *res)
{
    merge m = {.segs = segs, .p = p, .out = {.sink = sink, .res = res}};
    cpri_obj_extent *ext = malloc((p->n_cands ? p->n_cands : 1) * sizeof *ext);
    cpr_status st = ext ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory starting reads");
    for (size_t i = 0; st == CPR_OK && i < p->n_cands; i++)
        ext[i] = (cpri_obj_extent){p->objects[p->cands[i].object], p->cands[i].ref.offset,
                                  p->cands[i].ref.len};
    unsigned reading = atomic_fetch_add(reading_now, 1) + 1;
    if (st == CPR_OK && p->n_cands)
        st = segs->ops->read_start(segs, ext, p->n_cands, fetch_depth(segs->ops, p, reading),
                                   &m.reader);
    for (size_t t = 0; st == CPR_OK && t < p->n_tables; t++) {
        const cpr_table_schema *schema = &p->tables[t];
        size_t end = m.next;
        while (end < p->n_cands && p->cands[end].ref.table == schema->table)
            end++;
        if (end == m.next)
            continue;
        st = out_reserve(&m.out, schema, batch_rows_for(p, sink, schema, 0));
        m.out.pass_rows = batch_rows_for(p, sink, schema, 1);
        if (st == CPR_OK)
            st = merge_table(&m, end);
        if (st == CPR_OK)
            st = out_flush(&m.out);
    }
    if (m.reader)
        segs->ops->read_end(m.reader);
    free(m.h.c);
    free(m.out.ids);
    free(m.out.versions);
    free(m.out.values);
    free(m.out.state);
    free(m.out.enc);
    free(ext);
    atomic_fetch_sub(reading_now, 1);
    return st;
}

cpr_status cpri_merge_run(cpr_store *store, const cpri_merge_plan *p, const cpri_merge_sink *sink,
                         cpr_restore_result *res)
{
    return merge_run_on(store->segs, &store->restores_reading, p, sink, res);
}

/* ---- cpr_store_restore ----------------------------------------------------------- */

/* The newest committed checkpoint id at or below `max` (parts are sorted,
 * C1), or the fold's (a fold at the floor F holds a shard's state as of F
 * once retention removed the parts below: a store that holds only some of
 * the job's shards may have no part at F); 0 if there is none. */
static uint64_t newest_at_most(const cpri_job *job, uint64_t max)
{
    uint64_t newest = 0;
    for (size_t i = job->n_parts; i-- > 0;)
        if (job->parts[i].checkpoint <= max) {
            newest = job->parts[i].checkpoint;
            break;
        }
    for (size_t i = 0; i < job->n_folds; i++)
        if (job->folds[i].checkpoint <= max && job->folds[i].checkpoint > newest)
            newest = job->folds[i].checkpoint;
    return newest;
}

/* Under store->mu: resolve as_of and plan (M3). */
static cpr_status plan(cpr_store *store, const cpr_restore_query *q, cpri_merge_plan *p)
{
    cpri_job *job = cpri_catalog_find(&store->catalog, q->job);
    uint64_t as_of = 0;
    if (!job || (job->n_parts == 0 && job->n_folds == 0))
        return cpr_fail(CPR_NOT_FOUND, "job %s has no committed parts", q->job);
    if (q->consistent) {
        if (cpri_job_cuts(job, &as_of, 1) == 0)
            return cpr_fail(CPR_NOT_FOUND, "job %s has no consistent cut yet", q->job);
    } else {
        as_of = q->as_of ? q->as_of : UINT64_MAX;
    }
    if (job->floor && as_of < job->floor)
        return cpr_fail(CPR_FAILED_PRECONDITION, "checkpoint %llu of job %s was "
                        "reclaimed by retention; the oldest restorable is %llu",
                        (unsigned long long)as_of, q->job, (unsigned long long)job->floor);
    /* The id the state is really as of (what the result reports): the newest
     * committed checkpoint at or below the one asked for. */
    uint64_t used = newest_at_most(job, as_of);
    if (used == 0)
        return cpr_fail(CPR_NOT_FOUND, "job %s has no committed part at or below checkpoint "
                        "%llu (its oldest is %llu)", q->job, (unsigned long long)as_of,
                        job->n_parts ? (unsigned long long)job->parts[0].checkpoint : 0ULL);
    as_of = used;
    p->store = store;
    cpr_status st = cpri_merge_plan_build(p, job, as_of, q->tables, q->n_tables, 0, 0);
    if (st == CPR_OK)
        cpri_store_reader_enter_locked(store);
    return st;
}

static cpr_status check_query(const cpr_restore_query *q, int have_fn)
{
    if (!q || !have_fn)
        return cpr_fail(CPR_INVALID_ARGUMENT, "restore needs a query and a callback");
    cpr_status st = cpri_check_job_name(q->job);
    if (st == CPR_OK && q->modulo && q->remainder >= q->modulo)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "remainder %llu must be below modulo %llu",
                      (unsigned long long)q->remainder, (unsigned long long)q->modulo);
    if (st == CPR_OK && q->n_ranges && !q->ranges)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "%zu ranges given without an array", q->n_ranges);
    if (st == CPR_OK && q->n_tables && !q->tables)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "%zu tables given without an array", q->n_tables);
    if (st == CPR_OK && q->batch_rows > MAX_BATCH_ROWS)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "batch_rows %zu is above the limit of %u",
                      q->batch_rows, MAX_BATCH_ROWS);
    if (st == CPR_OK && (q->n_ranges > MAX_QUERY_ITEMS || q->n_tables > MAX_QUERY_ITEMS))
        st = cpr_fail(CPR_INVALID_ARGUMENT, "a restore takes at most %u ranges and %u tables",
                      MAX_QUERY_ITEMS, MAX_QUERY_ITEMS);
    return st;
}

/* Check and normalise the query, then plan it under store->mu; on success
 * the caller is a registered reader (M3) and must leave. */
static cpr_status plan_query(cpr_store *store, const cpr_restore_query *q, int have_fn,
                             cpri_merge_plan *p)
{
    cpr_restore_query uq = q ? *q : (cpr_restore_query){0}; /* its tables unique */
    uint32_t *tables = NULL;
    cpr_status st = check_query(q, have_fn);
    if (st == CPR_OK)
        st = normalise_ranges(q->ranges, q->n_ranges, &p->ranges, &p->n_ranges);
    if (st == CPR_OK)
        st = normalise_tables(q->tables, q->n_tables, &tables, &uq.n_tables);
    uq.tables = tables;
    if (st == CPR_OK) {
        p->modulo = q->modulo;
        p->remainder = q->remainder;
        p->batch_rows = q->batch_rows;
        pthread_mutex_lock(&store->mu);
        st = plan(store, &uq, p);
        pthread_mutex_unlock(&store->mu);
    }
    free(tables);
    return st;
}

static cpr_status restore(cpr_store *store, const cpr_restore_query *q,
                          const cpri_merge_sink *sink, int have_fn, cpr_restore_result *result)
{
    cpri_merge_plan p = {0};
    cpr_restore_result res = {0};
    cpr_status st = plan_query(store, q, have_fn, &p);
    int reading = st == CPR_OK;
    if (st == CPR_OK)
        st = cpri_merge_run(store, &p, sink, &res);
    if (reading)
        cpri_store_reader_leave(store);
    atomic_fetch_add(&store->rows_out, res.rows);
    atomic_fetch_add(&store->bytes_out, res.bytes);
    if (st == CPR_OK && result) {
        res.as_of = p.as_of;
        *result = res;
    }
    cpri_merge_plan_release(&p);
    return cpri_store_count(store, st);
}

cpr_status cpr_store_restore_plan(cpr_store *store, const cpr_restore_query *q, void **plan,
                                  size_t *len, cpr_restore_result *result)
{
    if (!store || !plan || !len)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_restore_plan: store, plan and len "
                        "must be set");
    *plan = NULL;
    *len = 0;
    if (!cpr_store_read_id(store))
        return cpr_fail(CPR_FAILED_PRECONDITION, "this store has no name for direct readers "
                        "(its store-id could not be read or written: see the log); restore "
                        "through it");
    cpri_merge_plan p = {0};
    cpri_store_refresh_for_read(store, q ? q->job : NULL); /* rados.h R9 */
    /* S8: set before planning, so that every segment doomed from the plan
     * on waits out the grace (one doomed before it is not in the plan) */
    atomic_store(&store->plans_served, 1);
    cpr_status st = plan_query(store, q, 1, &p);
    if (st == CPR_OK) {
        /* M4: the segments outlive this reader by DOOM_GRACE_S (S8) */
        cpri_store_reader_leave(store);
        unsigned char *buf = NULL;
        st = cpri_merge_plan_encode(&p, &buf, len);
        *plan = buf;
    }
    if (st == CPR_OK && result)
        *result = (cpr_restore_result){.as_of = p.as_of};
    cpri_merge_plan_release(&p);
    return cpri_store_count(store, st);
}

/* Row API: batches of arrays with their CRC32C. */
typedef struct row_ctx {
    cpr_row_fn fn;
    void *ctx;
    float *decoded;           /* a quantized stored block's values as f32 */
    size_t decoded_cap;       /* floats */
} row_ctx;

/* A batch of r's rows; crc: its CRC32C when known (1), else computed here. */
static cpr_status deliver_batch(row_ctx *rc, const cpri_merge_rows *r, int have_crc,
                                uint32_t crc)
{
    cpr_row_batch b = {
        .table = r->table, .n = r->n, .ids = r->ids, .values = r->values,
        .values_count = r->n * r->dim, .state = r->state,
        .state_count = r->n * r->state_dim,
    };
    b.crc32c = have_crc ? crc
                        : cpr_crc32c_rows(b.ids, b.n, b.values, b.values_count, b.state,
                                          b.state_count);
    return rc->fn(rc->ctx, &b);
}

static cpr_status rows_to_batch(void *ctx, const cpri_merge_rows *r)
{
    return deliver_batch(ctx, r, 0, 0);
}

static cpr_status block_to_batch(void *ctx, const void *block, size_t len,
                                 const cpr_block_view *v, uint64_t version)
{
    (void)len;
    (void)version;
    row_ctx *rc = ctx;
    const float *values = NULL; /* the row API delivers f32: other codecs decode */
    cpr_status st = cpri_block_f32(v, &rc->decoded, &rc->decoded_cap, &values);
    if (st)
        return st;
    cpri_merge_rows r = {
        .table = v->h.table, .dim = v->h.dim, .state_dim = v->h.state_dim, .n = v->h.n,
        .ids = v->ids, .values = values, .state = v->state,
    };
    /* A whole stored block (checked when read): its rows' CRC follows from
     * the block's, with no second pass over the rows. */
    uint32_t crc = 0;
    int have = cpri_block_rows_crc(block, v, &crc);
    return deliver_batch(rc, &r, have, crc);
}

/* The row API's sink over rc. */
static cpri_merge_sink row_sink(row_ctx *rc)
{
    return (cpri_merge_sink){.rows = rows_to_batch, .block = block_to_batch, .ctx = rc};
}

cpr_status cpr_store_restore(cpr_store *store, const cpr_restore_query *q, cpr_row_fn fn,
                             void *ctx, cpr_restore_result *result)
{
    row_ctx rc = {fn, ctx, NULL, 0};
    cpri_merge_sink sink = row_sink(&rc);
    cpri_store_refresh_for_read(store, q ? q->job : NULL); /* rados.h R9 */
    cpr_status st = restore(store, q, &sink, fn != NULL, result);
    free(rc.decoded);
    return st;
}

cpr_status cpri_merge_run_rows(cpri_backend *segs, _Atomic unsigned *reading,
                               const cpri_merge_plan *p, cpr_row_fn fn, void *ctx,
                               cpr_restore_result *res)
{
    row_ctx rc = {fn, ctx, NULL, 0};
    cpri_merge_sink sink = row_sink(&rc);
    cpr_status st = merge_run_on(segs, reading, p, &sink, res);
    free(rc.decoded);
    return st;
}

/* Rows with their versions: every row comes through the merge (no block
 * passes whole), which fills a version per row (a fold's rows keep theirs). */
typedef struct version_ctx {
    cpr_version_row_fn fn;
    void *ctx;
} version_ctx;

static cpr_status rows_with_versions(void *ctx, const cpri_merge_rows *r)
{
    version_ctx *vc = ctx;
    cpr_row_batch b = {
        .table = r->table, .n = r->n, .ids = r->ids, .values = r->values,
        .values_count = r->n * r->dim, .state = r->state, .state_count = r->n * r->state_dim,
    };
    b.crc32c = cpr_crc32c_rows(b.ids, b.n, b.values, b.values_count, b.state, b.state_count);
    return vc->fn(vc->ctx, &b, r->versions);
}

cpr_status cpr_store_restore_versions(cpr_store *store, const cpr_restore_query *q,
                                      cpr_version_row_fn fn, void *ctx,
                                      cpr_restore_result *result)
{
    version_ctx vc = {fn, ctx};
    cpri_merge_sink sink = {.rows = rows_with_versions, .ctx = &vc, .want_versions = 1};
    cpri_store_refresh_for_read(store, q ? q->job : NULL); /* rados.h R9 */
    return restore(store, q, &sink, fn != NULL, result);
}

/* Block API: stored blocks unchanged, merged rows sealed into new blocks. */
typedef struct block_ctx {
    cpr_block_fn fn;
    cpr_version_block_fn vfn;  /* instead of fn: blocks with versions */
    void *ctx;
    unsigned char *buf;
    size_t cap;
} block_ctx;

/* r's rows sealed into bc->buf as one block (with r's versions when
 * `flags` has CPR_BLOCK_VERSIONS); *bytes its size. */
static cpr_status seal_rows(block_ctx *bc, const cpri_merge_rows *r, uint32_t flags,
                            size_t *bytes)
{
    *bytes = cpr_block_size((uint32_t)r->n, r->dim, r->state_dim, flags);
    cpr_block_layout l;
    if (*bytes == 0)
        return cpr_fail(CPR_INTERNAL, "restore batch of %zu rows is over the block limit",
                        r->n);
    if (*bytes > bc->cap) {
        free(bc->buf);
        bc->buf = NULL;
        if (posix_memalign((void **)&bc->buf, 64, *bytes)) {
            bc->cap = 0;
            return cpr_fail(CPR_NO_MEMORY, "out of memory building a block");
        }
        bc->cap = *bytes;
    }
    cpr_block_layout_of((uint32_t)r->n, r->dim, r->state_dim, flags, &l);
    memcpy(bc->buf + l.ids, r->ids, r->n * 8);
    if (flags & CPR_BLOCK_VERSIONS)
        memcpy(bc->buf + l.versions, r->versions, r->n * 8);
    memcpy(bc->buf + l.values, r->values, r->n * r->dim * 4);
    if (r->state_dim)
        memcpy(bc->buf + l.state, r->state, r->n * r->state_dim * 4);
    return cpr_block_seal(bc->buf, r->table, (uint32_t)r->n, r->dim, r->state_dim, flags);
}

static cpr_status rows_to_block(void *ctx, const cpri_merge_rows *r)
{
    block_ctx *bc = ctx;
    size_t bytes;
    cpr_status st = seal_rows(bc, r, 0, &bytes);
    return st ? st : bc->fn(bc->ctx, bc->buf, bytes);
}

static cpr_status block_as_is(void *ctx, const void *block, size_t len, const cpr_block_view *v,
                              uint64_t version)
{
    (void)v;
    (void)version;
    block_ctx *bc = ctx;
    return bc->fn(bc->ctx, block, len);
}

/* Blocks with versions: merged rows sealed with CPR_BLOCK_VERSIONS, stored
 * blocks unchanged with their part's checkpoint as every row's version. */
static cpr_status rows_to_vblock(void *ctx, const cpri_merge_rows *r)
{
    block_ctx *bc = ctx;
    size_t bytes;
    cpr_status st = seal_rows(bc, r, CPR_BLOCK_VERSIONS, &bytes);
    return st ? st : bc->vfn(bc->ctx, bc->buf, bytes, 0);
}

static cpr_status vblock_as_is(void *ctx, const void *block, size_t len, const cpr_block_view *v,
                               uint64_t version)
{
    (void)v;
    block_ctx *bc = ctx;
    return bc->vfn(bc->ctx, block, len, version);
}

cpr_status cpr_store_restore_blocks_versions(cpr_store *store, const cpr_restore_query *q,
                                             cpr_version_block_fn fn, void *ctx,
                                             cpr_restore_result *result)
{
    block_ctx bc = {NULL, fn, ctx, NULL, 0};
    cpri_merge_sink sink = {.rows = rows_to_vblock, .block = vblock_as_is, .ctx = &bc,
                            .want_versions = 1, .max_batch_bytes = STREAM_BATCH_BYTES};
    cpri_store_refresh_for_read(store, q ? q->job : NULL); /* rados.h R9 */
    cpr_status st = restore(store, q, &sink, fn != NULL, result);
    free(bc.buf);
    return st;
}

cpr_status cpr_store_restore_blocks(cpr_store *store, const cpr_restore_query *q,
                                    cpr_block_fn fn, void *ctx, cpr_restore_result *result)
{
    block_ctx bc = {fn, NULL, ctx, NULL, 0};
    cpri_merge_sink sink = {.rows = rows_to_block, .block = block_as_is, .ctx = &bc,
                            .max_batch_bytes = STREAM_BATCH_BYTES};
    cpri_store_refresh_for_read(store, q ? q->job : NULL); /* rados.h R9 */
    cpr_status st = restore(store, q, &sink, fn != NULL, result);
    free(bc.buf);
    return st;
}
