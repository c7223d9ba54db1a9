/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writing parts: begin, put_rows, put_block, put_blob, commit, abort.
 *
 * Rows become row blocks (cpr/block.h) appended to the part's segment
 * object (backend.h): put_block appends a block the writer built, bytes
 * unchanged, after checking it; put_rows gathers a batch into blocks of
 * about BLOCK_TARGET bytes (small batches of one table in ascending order
 * are coalesced). Each block's offset, rows and CRC go into the part's block
 * index, which the commit writes with the part record in one synced RocksDB
 * batch (protocol and invariants S1-S5 in store_internal.h). Blocks of one
 * part may overlap; a row sent again in a later block replaces the earlier
 * copy (restores prefer the later block of a part).
 *
 * Invariants
 *  W1. Every block starts at a multiple of 8 in its segment (padding
 *      between blocks), so readers can use its arrays in place.
 *  W2. Builder rows are strictly ascending within one table; they become a
 *      block before any other block of the part is appended, so a part's
 *      blocks are in the order their rows were sent.
 *  W3. Direct writes (cpr_store_direct_segment, cpr_store_put_segment): a
 *      part whose segment another process writes into the pool takes no
 *      rows here; the name is this store's (its token, made here), so the
 *      sweep and retention treat the object as any other segment, and an
 *      abort, or a commit without an index, removes it. The index is taken
 *      only after every check passed (the object finished, with the size
 *      the writer gives; blocks back to back, W1; every block's header
 *      equal to its entry and within the schema), so a refused index
 *      leaves the part as it was, and the same index given again is taken
 *      as given (a commit tried again). Payloads are not read here: the CRC
 *      each header names is checked by every read, as for any block. The
 *      writer sends empty batches while it writes (touch_direct), so the
 *      idle abort takes only a direct part whose writer went quiet.
 *
 * Part states:  (begin) -> OPEN --commit--> COMMITTING --ok--> gone (catalog)
 *                           |                   \--error--> FAILED --abort--> gone
 *                           \--abort--> gone
 * A failed put leaves the part OPEN and unchanged, except a failure while
 * its blocks were being appended (I/O, or memory), which makes it FAILED
 * (sticky): abort it.
 * An OPEN or FAILED part that no call has touched for a while may also be
 * aborted by cpr_store_abort_idle (its writer is presumed gone); one in a
 * call holds its mutex and is never taken.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cpr/codec.h"
#include "cpr/crc32c.h"
#include "restore.h"
#include "store_internal.h"
#include "part_fence.h"
#include "rados.h"

#define MAX_BATCH_ROWS (1u << 24)     /* rows in one put_rows call */
#define MAX_BLOBS_PER_PART 1024u
#define MAX_OUT_OF_ORDER 1024u /* each out-of-order batch is a block every restore merges */

/* Monotonic milliseconds, for idle tracking. */
static uint64_t now_ms(void)
{
    return (uint64_t)(cpri_now_s() * 1000.0);
}

/* ---- begin ------------------------------------------------------------- */

static cpr_status validate_spec(const cpr_part_spec *spec)
{
    cpr_status st = cpri_check_job_name(spec->id.job);
    if (st)
        return st;
    if (spec->kind < CPR_KIND_FULL || spec->kind > CPR_KIND_PRIORITY)
        return cpr_fail(CPR_INVALID_ARGUMENT,
                        "kind %d is not FULL (1), DELTA (2) or PRIORITY (3)", (int)spec->kind);
    if (spec->id.checkpoint == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "checkpoint id 0 is reserved; ids start at 1");
    if (spec->num_shards == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "num_shards is 0: set it to the job's shard "
                        "count (at least 1)");
    if (spec->id.shard >= spec->num_shards)
        return cpr_fail(CPR_INVALID_ARGUMENT,
                        "shard %u is not below num_shards %u", spec->id.shard,
                        spec->num_shards);
    if (spec->kind == CPR_KIND_DELTA && spec->base >= spec->id.checkpoint)
        return cpr_fail(CPR_INVALID_ARGUMENT, "DELTA base %llu must be below its "
                        "checkpoint %llu", (unsigned long long)spec->base,
                        (unsigned long long)spec->id.checkpoint);
    return cpri_check_part_tables(spec);
}

/* Dims must agree with committed parts (C4) and with open parts of the job. */
static cpr_status check_dims(cpr_store *store, const cpri_job *job, const cpr_part_spec *spec)
{
    for (size_t i = 0; i < spec->n_tables; i++) {
        const cpr_table_schema *t = &spec->tables[i];
        const cpr_table_schema *known = cpri_job_table(job, t->table);
        for (open_part *p = store->open_parts; !known && p; p = p->next)
            if (p->job_id == job->id)
                known = cpri_meta_table(&p->meta, t->table);
        if (known && (known->dim != t->dim || known->state_dim != t->state_dim))
            return cpr_fail(CPR_INVALID_ARGUMENT,
                            "table %u of job %s has dim %u, state_dim %u; this part "
                            "declares dim %u, state_dim %u: a table's shape cannot "
                            "change within a job", t->table, job->name, known->dim,
                            known->state_dim, t->dim, t->state_dim);
    }
    return CPR_OK;
}

static cpr_status resolve_base(const cpri_job *job, const cpr_part_spec *spec, uint64_t *base)
{
    const cpri_part_meta *b;
    if (spec->kind != CPR_KIND_DELTA) {
        *base = 0;
        return CPR_OK;
    }
    b = spec->base ? cpri_job_find_part(job, spec->id.shard, spec->base)
                   : cpri_job_newest(job, spec->id.shard, 1);
    if (!b || b->kind == CPR_KIND_PRIORITY)
        return cpr_fail(CPR_FAILED_PRECONDITION,
                        "DELTA part %s/%u/%llu needs a committed FULL or DELTA base "
                        "of shard %u%s; write a FULL part first", job->name,
                        spec->id.shard, (unsigned long long)spec->id.checkpoint,
                        spec->id.shard, spec->base ? " with the given base id" : "");
    *base = b->checkpoint;
    return CPR_OK;
}

static cpr_status check_begin(cpr_store *store, const cpri_job *job,
                              const cpr_part_spec *spec, uint64_t *base)
{
    const cpr_part_id *id = &spec->id;
    const cpri_part_meta *newest = cpri_job_newest(job, id->shard, 0);
    unsigned long long ckpt = (unsigned long long)id->checkpoint;
    if (cpri_job_find_part(job, id->shard, id->checkpoint))
        return cpr_fail(CPR_ALREADY_EXISTS, "part %s/%u/%llu is already committed; "
                        "use a new checkpoint id", id->job, id->shard, ckpt);
    for (open_part *p = store->open_parts; p; p = p->next)
        if (p->job_id == job->id && p->meta.shard == id->shard &&
            p->meta.checkpoint == id->checkpoint)
            return cpr_fail(CPR_ALREADY_EXISTS, "part %s/%u/%llu is already open; "
                            "commit or abort it first", id->job, id->shard, ckpt);
    if (newest && newest->checkpoint >= id->checkpoint)
        return cpr_fail(CPR_FAILED_PRECONDITION,
                        "checkpoint %llu is not above shard %u's newest committed "
                        "checkpoint %llu; checkpoint ids must increase", ckpt,
                        id->shard, (unsigned long long)newest->checkpoint);
    if (job->floor && id->checkpoint <= job->floor)
        return cpr_fail(CPR_FAILED_PRECONDITION, "checkpoint %llu is at or below job "
                        "%s's retention floor %llu", ckpt, job->name,
                        (unsigned long long)job->floor);
    cpr_status st = check_dims(store, job, spec);
    return st ? st : resolve_base(job, spec, base);
}

static cpr_status new_open_part(cpr_store *store, const cpr_part_spec *spec, open_part **out)
{
    open_part *part = calloc(1, sizeof *part);
    if (!part)
        return cpr_fail(CPR_NO_MEMORY, "out of memory beginning a part");
    pthread_mutex_init(&part->mu, NULL);
    atomic_store(&part->active_ms, now_ms());
    snprintf(part->job_name, sizeof part->job_name, "%s", spec->id.job);
    part->meta.shard = spec->id.shard;
    part->meta.checkpoint = spec->id.checkpoint;
    part->meta.kind = spec->kind;
    part->meta.step = spec->step;
    part->meta.num_shards = spec->num_shards;
    char *base = cpri_part_dirname(spec->id.job, spec->id.shard, spec->id.checkpoint,
                                  store->staging_dir);
    size_t len = base ? strlen(base) + 24 : 0;
    part->dir = base ? malloc(len) : NULL;
    uint64_t seq = atomic_fetch_add(&store->staging_seq, 1);
    part->incarnation = seq + 1; /* part_fence.h S9: unique to this begin, never 0 */
    if (part->dir)
        snprintf(part->dir, len, "%s.%llu", base, (unsigned long long)seq);
    free(base);
    cpr_status st = part->dir ? cpri_meta_copy_tables(&part->meta, spec->tables, spec->n_tables)
                              : cpr_fail(CPR_NO_MEMORY, "out of memory beginning a part");
    if (st) {
        cpri_open_part_free(store, part);
        return st;
    }
    *out = part;
    return CPR_OK;
}

/* R8: the id of job `name` in the pool, claimed for it when it has none:
 * one compare-and-set of its 'J' record and the counter 'N', retried while
 * other gateways claim ids. Not under store->mu: these are pool round trips,
 * which a degraded cluster can hold for long, and every call of the store
 * would wait behind them. `floor`: the catalog's next_job_id, read under it.
 * Two claims of one name get the same id (the 'J' record decides). */
static cpr_status claim_job_id(cpr_store *store, const char *name, uint32_t floor, uint32_t *id)
{
    unsigned char jkey[130], nkey[1] = {'N'}, nval[4], jval[4], old[4];
    size_t jlen = cpri_key_job(jkey, name);
    cpr_status st = CPR_OK;
    for (int tries = 0; tries < 64; tries++) {
        char *val = NULL, *cnt = NULL;
        size_t vlen = 0, clen = 0;
        st = cpri_rados_catalog_get(store->rados, jkey, jlen, &val, &vlen);
        if (st == CPR_OK && val && vlen == 4) {
            *id = cpri_get_be32((const unsigned char *)val);
            free(val);
            return CPR_OK;
        }
        free(val);
        if (st == CPR_OK)
            st = cpri_rados_catalog_get(store->rados, nkey, 1, &cnt, &clen);
        if (st)
            return st;
        uint32_t next = cnt && clen == 4 ? cpri_get_be32((const unsigned char *)cnt) : 0;
        if (cnt && clen == 4)
            memcpy(old, cnt, 4);
        free(cnt);
        uint32_t cand = next > floor ? next : floor;
        if (cand == 0)
            cand = 1;
        cpri_put_be32(jval, cand);
        cpri_put_be32(nval, cand + 1);
        cpri_kv_cond conds[2] = {{jkey, jlen, NULL, 0}, {nkey, 1, old, next ? 4 : 0}};
        cpri_kv_change ch[2] = {{jkey, jlen, jval, 4, 0}, {nkey, 1, nval, 4, 0}};
        st = cpri_rados_catalog_apply_if(store->rados, conds, 2, ch, 2, "claiming a job id");
        if (st == CPR_OK) {
            *id = cand;
            return CPR_OK;
        }
        if (st != CPR_FAILED_PRECONDITION)
            return st;
    }
    return cpr_fail(CPR_UNAVAILABLE, "RADOS: could not claim an id for job %s: other gateways "
                    "kept claiming ids; try again", name);
}

cpr_status cpr_store_begin(cpr_store *store, const cpr_part_spec *spec)
{
    return cpri_store_begin_incarnation(store, spec, NULL);
}

cpr_status cpri_store_begin_incarnation(cpr_store *store, const cpr_part_spec *spec,
                                        uint64_t *incarnation)
{
    open_part *part = NULL;
    cpri_job *job;
    cpr_status st = validate_spec(spec);
    if (st == CPR_OK) /* F3: refused before anything exists */
        st = cpri_space_check(store, CPRI_SPACE_BEGIN, "begin");
    if (st == CPR_OK)
        st = new_open_part(store, spec, &part);
    if (st)
        return cpri_store_count(store, st);
    uint32_t job_id = 0;
    pthread_mutex_lock(&store->mu);
    job = cpri_catalog_find(&store->catalog, spec->id.job);
    if (!job && store->rados) { /* R8: the id the pool gives this name */
        uint32_t floor = store->catalog.next_job_id;
        pthread_mutex_unlock(&store->mu);
        st = claim_job_id(store, spec->id.job, floor, &job_id);
        pthread_mutex_lock(&store->mu);
        job = cpri_catalog_find(&store->catalog, spec->id.job); /* added meanwhile? */
        if (job)
            st = CPR_OK; /* by another Begin or a reload: its id is the pool's */
    }
    int new_job = !job;
    if (new_job && st == CPR_OK)
        st = cpri_catalog_add_job(&store->catalog, spec->id.job, job_id, &job);
    if (st == CPR_OK && store->n_open_parts >= store->opts.max_open_parts)
        st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "the store has %u open parts, its maximum (ckptd "
                      "--max-open-parts): commit or abort parts first", store->n_open_parts);
    else if (st == CPR_OK && job->open_parts >= store->opts.max_open_parts_per_job)
        st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "job %s has %u open parts, its maximum (ckptd "
                      "--max-open-parts-per-job): commit or abort parts first", job->name,
                      job->open_parts);
    if (st == CPR_OK)
        st = cpri_buffers_admit_locked(store, 1, 0);
    if (st == CPR_OK)
        st = check_begin(store, job, spec, &part->meta.base);
    if (st == CPR_OK) {
        if (cpri_mkdirs(part->dir) != 0)
            st = cpr_fail(errno == ENOSPC ? CPR_RESOURCE_EXHAUSTED : CPR_IO,
                          "cannot create %s: %s", part->dir, strerror(errno));
    }
    if (st == CPR_OK) {
        if (incarnation)
            *incarnation = part->incarnation;
        part->job_id = job->id;
        part->refs = 1; /* the open-parts table's reference */
        part->next = store->open_parts;
        store->open_parts = part;
        store->n_open_parts++; /* O1 */
        job->open_parts++;
    } else if (new_job && job) {
        /* a refused begin leaves no trace: bad requests cannot grow memory */
        cpri_catalog_drop_last(&store->catalog);
    }
    pthread_mutex_unlock(&store->mu);
    if (st) {
        free(part->dir); /* never created (mkdir is the last step that can fail) */
        part->dir = NULL;
        cpri_open_part_free(store, part);
    }
    return cpri_store_count(store, st);
}

/* ---- finding parts for put/commit/abort ------------------------------- */

/* Why is there no open part `id`? Sets the message, returns the status. */
static cpr_status not_open(cpr_store *store, const cpr_part_id *id, const char *op)
{
    cpr_status st = cpri_check_job_name(id->job);
    if (st)
        return st;
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find(&store->catalog, id->job);
    int committed = job && cpri_job_find_part(job, id->shard, id->checkpoint);
    pthread_mutex_unlock(&store->mu);
    if (committed)
        return cpr_fail(CPR_FAILED_PRECONDITION, "%s: part %s/%u/%llu is already "
                        "committed", op, id->job, id->shard,
                        (unsigned long long)id->checkpoint);
    return cpr_fail(strcmp(op, "abort") == 0 ? CPR_NOT_FOUND : CPR_FAILED_PRECONDITION,
                    "%s: no open part %s/%u/%llu (never begun, or aborted: by a "
                    "client, a broken stream, or after it sat idle); begin it", op, id->job,
                    id->shard, (unsigned long long)id->checkpoint);
}

/* Get the open part and lock it in state OPEN. */
static cpr_status lock_open_part(cpr_store *store, const cpr_part_id *id, const char *op,
                                 open_part **out)
{
    open_part *part = cpri_open_part_get(store, id);
    if (!part)
        return not_open(store, id, op);
    pthread_mutex_lock(&part->mu);
    atomic_store(&part->active_ms, now_ms());
    if (part->state != PART_OPEN) {
        int failed = part->state == PART_FAILED;
        pthread_mutex_unlock(&part->mu);
        cpri_open_part_put(store, part);
        return cpr_fail(CPR_FAILED_PRECONDITION, "%s: part %s/%u/%llu %s", op, id->job,
                        id->shard, (unsigned long long)id->checkpoint,
                        failed ? "failed earlier; abort it and write it again"
                               : "is being committed");
    }
    *out = part;
    return CPR_OK;
}

static void unlock_part(cpr_store *store, open_part *part)
{
    atomic_store(&part->active_ms, now_ms()); /* idle from the end of the call */
    pthread_mutex_unlock(&part->mu);
    cpri_open_part_put(store, part);
}

/* ---- put_rows ------------------------------------------------------------ */

static cpr_status validate_batch(const open_part *part, const cpr_row_batch *b,
                                 const cpr_table_schema **schema)
{
    const cpr_table_schema *t = cpri_meta_table(&part->meta, b->table);
    if (!t)
        return cpr_fail(CPR_INVALID_ARGUMENT, "table %u is not in the part's schema; "
                        "declare it at begin", b->table);
    if (b->n > MAX_BATCH_ROWS)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a batch holds at most %u rows; got %zu; "
                        "split it", MAX_BATCH_ROWS, b->n);
    if (b->n > 0 && !b->ids)
        return cpr_fail(CPR_INVALID_ARGUMENT, "batch of %zu rows has no ids", b->n);
    /* n <= 2^24 and dims <= 2^16 (checked at begin): the products below fit. */
    if (b->values_count != b->n * t->dim || (b->n && !b->values))
        return cpr_fail(CPR_INVALID_ARGUMENT, "table %u: %zu rows of dim %u need %zu "
                        "values; got %zu", b->table, b->n, t->dim, b->n * t->dim,
                        b->values_count);
    if (b->state_count != b->n * t->state_dim || (b->state_count && !b->state))
        return cpr_fail(CPR_INVALID_ARGUMENT, "table %u: %zu rows of state_dim %u need "
                        "%zu state values; got %zu", b->table, b->n, t->state_dim,
                        b->n * t->state_dim, b->state_count);
    for (size_t i = 0; i < b->n; i++)
        if (b->ids[i] >= t->rows)
            return cpr_fail(CPR_INVALID_ARGUMENT, "row id %llu is outside table %u "
                            "(%llu rows)", (unsigned long long)b->ids[i], b->table,
                            (unsigned long long)t->rows);
    uint32_t crc = cpr_crc32c_rows(b->ids, b->n, b->values, b->values_count, b->state,
                                   b->state_count);
    if (crc != b->crc32c)
        return cpr_fail(CPR_CORRUPT, "row batch checksum mismatch (sent %08x, data "
                        "has %08x): the batch was damaged in transit", b->crc32c, crc);
    *schema = t;
    return CPR_OK;
}

/* ---- blocks into the segment ------------------------------------------ */

#define BLOCK_TARGET (1u << 20)    /* bytes of a block put_rows builds */

static size_t row_bytes_of(uint32_t dim, uint32_t state_dim)
{
    return 8 + ((size_t)dim + state_dim) * 4;
}

/* The part's segment name (and token), made once per begin: by its first
 * rows, or by its first blob in RADOS (B1). */
static void ensure_token(cpr_store *store, open_part *part)
{
    if (part->meta.seg_token)
        return;
    part->meta.seg_token = cpri_seg_new_token(store);
    cpri_seg_part_name(part->seg_name, part->job_name, part->meta.shard,
                      part->meta.checkpoint, part->meta.seg_token);
}

static cpr_status ensure_segment(cpr_store *store, open_part *part)
{
    if (part->seg)
        return CPR_OK;
    ensure_token(store, part);
    return store->segs->ops->create(store->segs, part->seg_name, &part->seg);
}

/* Pad the segment after a block to a multiple of 8 (W1). */
cpr_status cpri_seg_pad(cpr_store *store, cpri_obj_writer *w, size_t block_bytes)
{
    static const unsigned char zero[8];
    size_t pad = (8 - block_bytes % 8) % 8;
    return pad ? store->segs->ops->append(w, zero, pad) : CPR_OK;
}

/* Note a block's place in the index; counts out-of-order blocks. */
static cpr_status index_block(open_part *part, const cpri_block_ref *ref)
{
    cpr_status st = cpri_meta_add_block(&part->meta, ref);
    if (st)
        return st;
    part->last_table_row[0] = ref->table;
    part->last_table_row[1] = ref->last;
    part->have_last = 1;
    return CPR_OK;
}

/* Write rows from arrays as one block: the header's CRC is computed over
 * the pieces, then header and arrays are appended (one copy, into the
 * writer's aligned buffers) and the segment padded (W1). Ids must be
 * strictly ascending. *ref gets the block's place. */
cpr_status cpri_seg_write_block(cpr_store *store, cpri_obj_writer *w, const cpri_merge_rows *r,
                               cpri_block_ref *ref)
{
    static const unsigned char zeros[4];
    const cpri_backend_ops *ops = store->segs->ops;
    unsigned char hdr[CPR_BLOCK_HEADER_BYTES];
    size_t n = r->n;
    uint32_t flags = r->versions ? CPR_BLOCK_VERSIONS : 0;
    cpr_block_layout lay;
    cpr_block_layout_codec((uint32_t)n, r->dim, r->state_dim, flags, r->codec, &lay);
    cpr_block_header h = {
        .format = CPR_BLOCK_FORMAT, .codec = r->codec, .flags = flags,
        .table = r->table, .n = (uint32_t)n, .dim = r->dim, .state_dim = r->state_dim,
        .first_row = r->ids[0], .last_row = r->ids[n - 1],
        .bytes = cpr_block_size_codec((uint32_t)n, r->dim, r->state_dim, flags, r->codec),
    };
    if (h.bytes == 0)
        return cpr_fail(CPR_INTERNAL, "block of %zu rows is over the size limit", n);
    /* values as stored: f32, or encoded rows padded to 4 bytes (block.h) */
    const void *values = r->codec == CPR_CODEC_F32 ? (const void *)r->values : r->encoded;
    size_t vbytes = r->codec == CPR_CODEC_F32 ? n * r->dim * 4 : n * r->row_bytes;
    size_t pad = lay.state - lay.values - vbytes, sbytes = n * r->state_dim * 4;
    cpr_block_header_write(hdr, &h);
    uint32_t crc = cpr_crc32c(0, hdr, sizeof hdr);
    crc = cpr_crc32c(crc, r->ids, n * 8);
    if (r->versions)
        crc = cpr_crc32c(crc, r->versions, n * 8);
    crc = cpr_crc32c(crc, values, vbytes);
    crc = cpr_crc32c(crc, zeros, pad);
    if (sbytes)
        crc = cpr_crc32c(crc, r->state, sbytes);
    h.crc32c = crc;
    cpr_block_header_write(hdr, &h);
    *ref = (cpri_block_ref){r->table, (uint32_t)n, r->ids[0], r->ids[n - 1], ops->written(w),
                           (uint32_t)h.bytes, crc};
    cpr_status st = ops->append(w, hdr, sizeof hdr);
    if (st == CPR_OK)
        st = ops->append(w, r->ids, n * 8);
    if (st == CPR_OK && r->versions)
        st = ops->append(w, r->versions, n * 8);
    if (st == CPR_OK)
        st = ops->append(w, values, vbytes);
    if (st == CPR_OK && pad)
        st = ops->append(w, zeros, pad);
    if (st == CPR_OK && sbytes)
        st = ops->append(w, r->state, sbytes);
    if (st == CPR_OK)
        st = cpri_seg_pad(store, w, h.bytes);
    return st;
}

static cpr_status emit_block(cpr_store *store, open_part *part, uint32_t table, uint32_t dim,
                             uint32_t state_dim, size_t n, const uint64_t *ids,
                             const float *values, const float *state)
{
    cpri_merge_rows r = {.table = table, .dim = dim, .state_dim = state_dim, .n = n,
                        .ids = ids, .values = values, .state = state};
    cpri_block_ref ref;
    cpr_status st = ensure_segment(store, part);
    if (st == CPR_OK)
        st = cpri_seg_write_block(store, part->seg, &r, &ref);
    part->meta.codecs |= 1u << CPR_CODEC_F32;
    return st ? st : index_block(part, &ref);
}

static cpr_status flush_builder(cpr_store *store, open_part *part)
{
    block_builder *bb = &part->bb;
    if (bb->n == 0)
        return CPR_OK;
    cpr_status st = emit_block(store, part, bb->table, bb->dim, bb->state_dim, bb->n,
                               bb->ids, bb->values, bb->state);
    bb->n = 0;
    return st;
}

static cpr_status builder_reserve(block_builder *bb, const cpr_table_schema *t, size_t cap)
{
    if (bb->cap >= cap && bb->dim == t->dim && bb->state_dim == t->state_dim)
        return CPR_OK;
    free(bb->ids);
    free(bb->values);
    free(bb->state);
    bb->ids = malloc(cap * 8);
    bb->values = malloc(cap * t->dim * 4);
    bb->state = malloc(cap * ((size_t)t->state_dim + 1) * 4);
    bb->cap = bb->ids && bb->values && bb->state ? cap : 0;
    bb->dim = t->dim;
    bb->state_dim = t->state_dim;
    return bb->cap ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory building a block");
}

void cpri_block_builder_release(block_builder *bb)
{
    free(bb->ids);
    free(bb->values);
    free(bb->state);
    memset(bb, 0, sizeof *bb);
}

/* Rows of a validated batch into blocks: straight from the caller's arrays
 * when they are sorted and large, through the builder otherwise (W2). */
static cpr_status write_rows(cpr_store *store, open_part *part, const cpr_row_batch *b,
                             const cpr_table_schema *t, const cpri_id_index *order)
{
    block_builder *bb = &part->bb;
    size_t per_block = BLOCK_TARGET / row_bytes_of(t->dim, t->state_dim);
    cpr_status st = CPR_OK;
    if (per_block < 1)
        per_block = 1;
    /* Start a new block when the builder holds another table or the batch
     * does not continue it in ascending order. */
    uint64_t first = order ? order[0].id : b->ids[0];
    if (bb->n && (bb->table != b->table || first <= bb->ids[bb->n - 1]))
        st = flush_builder(store, part);
    if (st == CPR_OK && !order && bb->n == 0 && b->n >= per_block / 2) {
        for (size_t i = 0; st == CPR_OK && i < b->n; i += per_block) {
            size_t n = b->n - i < per_block ? b->n - i : per_block;
            st = emit_block(store, part, b->table, t->dim, t->state_dim, n, b->ids + i,
                            b->values + i * t->dim,
                            t->state_dim ? b->state + i * t->state_dim : NULL);
        }
        return st;
    }
    if (st == CPR_OK)
        st = builder_reserve(bb, t, per_block);
    for (size_t i = 0; st == CPR_OK && i < b->n; i++) {
        size_t src = order ? order[i].index : i;
        bb->table = b->table;
        bb->ids[bb->n] = b->ids[src];
        memcpy(bb->values + bb->n * t->dim, b->values + src * t->dim, (size_t)t->dim * 4);
        if (t->state_dim)
            memcpy(bb->state + bb->n * t->state_dim, b->state + src * t->state_dim,
                   (size_t)t->state_dim * 4);
        if (++bb->n == per_block)
            st = flush_builder(store, part);
    }
    return st;
}

/* Would this batch or block go backwards, past the limit? (Checked before
 * anything is written, so a refused call leaves the part unchanged.) */
static cpr_status check_order(open_part *part, uint32_t table, uint64_t first, int *backwards)
{
    uint64_t top_table = part->have_last ? part->last_table_row[0] : 0;
    uint64_t top_row = part->have_last ? part->last_table_row[1] : 0;
    const block_builder *bb = &part->bb;
    if (bb->n && (bb->table > top_table || !part->have_last ||
                  (bb->table == top_table && bb->ids[bb->n - 1] > top_row))) {
        top_table = bb->table;
        top_row = bb->ids[bb->n - 1];
    }
    *backwards = (part->have_last || bb->n) &&
                 (table < top_table || (table == top_table && first <= top_row));
    if (*backwards && part->out_of_order >= MAX_OUT_OF_ORDER)
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "%u batches of this part went backwards in "
                        "row order (each starts a block that restores must merge); send "
                        "each table's rows in ascending id order", MAX_OUT_OF_ORDER);
    return CPR_OK;
}

static void count_in(cpr_store *store, open_part *part, uint64_t rows, uint64_t bytes)
{
    part->meta.rows += rows;
    part->meta.bytes += bytes;
    atomic_fetch_add(&store->rows_in, rows);
    atomic_fetch_add(&store->bytes_in, bytes);
}

static void unlock_part(cpr_store *store, open_part *part);

/* lock_open_part for a write of rows or blobs: refused (the part unchanged,
 * space.c F3) while the file system is below the data tier. */
static cpr_status lock_for_put(cpr_store *store, const cpr_part_id *id, const char *op,
                               open_part **out)
{
    cpr_status st = lock_open_part(store, id, op, out);
    if (st == CPR_OK && (*out)->direct && strcmp(op, "put_blob") != 0) { /* W3 */
        st = cpr_fail(CPR_FAILED_PRECONDITION, "%s: part %s/%u/%llu takes its rows through "
                      "its own segment (direct writes): write them with a segment writer "
                      "and hand its index to put_segment", op, id->job, id->shard,
                      (unsigned long long)id->checkpoint);
        unlock_part(store, *out);
    } else if (st == CPR_OK && (st = cpri_space_check(store, CPRI_SPACE_DATA, op)) != CPR_OK) {
        unlock_part(store, *out);
    }
    return st;
}

/* A range batch (ids NULL) as the ids it stands for; its CRC covers them. */
static cpr_status put_range(cpr_store *store, const cpr_part_id *id, const cpr_row_batch *batch)
{
    if (batch->n > ((size_t)1 << 24))
        return cpri_store_count(store, cpr_fail(CPR_RESOURCE_EXHAUSTED, "put_rows: %zu rows in "
                               "one call; at most 2^24", batch->n));
    /* Before the ids are made: a request that claims many rows must carry
     * their values (1..CPRI_MAX_DIM a row), not cost 8 bytes a row for free. */
    if (batch->n && (batch->values_count % batch->n ||
                     batch->values_count / batch->n - 1 >= CPRI_MAX_DIM))
        return cpri_store_count(store, cpr_fail(CPR_INVALID_ARGUMENT, "put_rows: %zu values "
                               "for %zu rows: give dim (1-%u) values a row", batch->values_count,
                               batch->n, CPRI_MAX_DIM));
    uint64_t *ids = malloc(batch->n * sizeof *ids);
    if (!ids)
        return cpri_store_count(store, cpr_fail(CPR_NO_MEMORY, "out of memory for the ids of "
                               "%zu rows", batch->n));
    for (size_t i = 0; i < batch->n; i++)
        ids[i] = batch->range_begin + i;
    cpr_row_batch b = *batch;
    b.ids = ids;
    cpr_status st = cpr_store_put_rows(store, id, &b);
    free(ids);
    return st;
}

/* W3: an empty batch to a direct part says its writer is still at work (the
 * rows go to the pool, not here): the part is not idle. 1 if it was one. */
static int touch_direct(cpr_store *store, const cpr_part_id *id)
{
    open_part *part = cpri_open_part_get(store, id);
    if (!part)
        return 0;
    pthread_mutex_lock(&part->mu);
    int direct = part->direct && part->state == PART_OPEN;
    if (direct)
        atomic_store(&part->active_ms, now_ms());
    pthread_mutex_unlock(&part->mu);
    cpri_open_part_put(store, part);
    return direct;
}

cpr_status cpr_store_put_rows(cpr_store *store, const cpr_part_id *id,
                              const cpr_row_batch *batch)
{
    if (store && id && id->job && batch && batch->n == 0 && touch_direct(store, id))
        return CPR_OK;
    if (store && batch && !batch->ids && batch->n)
        return put_range(store, id, batch);
    open_part *part = NULL;
    const cpr_table_schema *schema = NULL;
    cpri_id_index *order = NULL;
    int backwards = 0;
    cpr_status st = lock_for_put(store, id, "put_rows", &part);
    if (st)
        return cpri_store_count(store, st);
    st = validate_batch(part, batch, &schema);
    if (st == CPR_OK)
        st = cpri_batch_order(batch, &order);
    if (st == CPR_OK && batch->n)
        st = check_order(part, batch->table, order ? order[0].id : batch->ids[0], &backwards);
    if (st == CPR_OK && batch->n) {
        st = write_rows(store, part, batch, schema, order);
        if (st) /* the segment may hold part of it */
            part->state = PART_FAILED;
    }
    if (st == CPR_OK) {
        part->out_of_order += backwards;
        count_in(store, part, batch->n,
                 batch->n * 8 + (batch->values_count + batch->state_count) * 4);
    }
    free(order);
    unlock_part(store, part);
    return cpri_store_count(store, st);
}

/* ---- put_block ------------------------------------------------------------ */

static cpr_status validate_block(const open_part *part, const void *block, size_t len,
                                 cpr_block_view *v)
{
    cpr_status st = cpr_block_open(block, len, v);
    if (st)
        return st; /* CPR_CORRUPT, with what failed */
    const cpr_table_schema *t = cpri_meta_table(&part->meta, v->h.table);
    if (!t)
        return cpr_fail(CPR_INVALID_ARGUMENT, "table %u is not in the part's schema; "
                        "declare it at begin", v->h.table);
    if (v->h.flags & CPR_BLOCK_VERSIONS)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a block with per-row versions is the "
                        "store's own (folds); send plain row blocks");
    if (v->h.dim != t->dim || v->h.state_dim != t->state_dim)
        return cpr_fail(CPR_INVALID_ARGUMENT, "block of table %u has dim %u, state_dim "
                        "%u; the part declares dim %u, state_dim %u", v->h.table, v->h.dim,
                        v->h.state_dim, t->dim, t->state_dim);
    if (v->h.last_row >= t->rows)
        return cpr_fail(CPR_INVALID_ARGUMENT, "row id %llu is outside table %u (%llu rows)",
                        (unsigned long long)v->h.last_row, v->h.table,
                        (unsigned long long)t->rows);
    return CPR_OK;
}

cpr_status cpr_store_put_block(cpr_store *store, const cpr_part_id *id, const void *block,
                               size_t len)
{
    open_part *part = NULL;
    cpr_block_view v;
    int backwards = 0;
    if (!block)
        return cpri_store_count(store, cpr_fail(CPR_INVALID_ARGUMENT, "put_block needs a block"));
    cpr_status st = lock_for_put(store, id, "put_block", &part);
    if (st)
        return cpri_store_count(store, st);
    st = validate_block(part, block, len, &v);
    if (st == CPR_OK)
        st = check_order(part, v.h.table, v.h.first_row, &backwards);
    if (st == CPR_OK) {
        const cpri_backend_ops *ops = store->segs->ops;
        st = flush_builder(store, part);
        if (st == CPR_OK)
            st = ensure_segment(store, part);
        cpri_block_ref ref = {v.h.table, v.h.n, v.h.first_row, v.h.last_row,
                             part->seg ? ops->written(part->seg) : 0, (uint32_t)len,
                             v.h.crc32c};
        if (st == CPR_OK)
            st = ops->append(part->seg, block, len);
        if (st == CPR_OK)
            st = cpri_seg_pad(store, part->seg, len);
        if (st == CPR_OK)
            st = index_block(part, &ref);
        if (st)
            part->state = PART_FAILED;
    }
    if (st == CPR_OK) {
        part->out_of_order += backwards;
        part->meta.codecs |= 1u << v.h.codec;
        count_in(store, part, v.h.n, /* payload as stored: encoded values */
                 (uint64_t)v.h.n * (8 + v.row_bytes + (uint64_t)v.h.state_dim * 4));
    }
    unlock_part(store, part);
    return cpri_store_count(store, st);
}

/* ---- direct writes (W3) ---------------------------------------------------- */

cpr_status cpr_store_direct_segment(cpr_store *store, const cpr_part_id *id, char *name,
                                    size_t cap)
{
    open_part *part = NULL;
    if (!store || !id || !id->job || !name || cap == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "direct_segment: store, id and name must be set");
    if (!store->rados)
        return cpri_store_count(store, cpr_fail(CPR_FAILED_PRECONDITION, "direct writes need "
                                "a store whose segments other processes reach (in a Ceph "
                                "pool: --backend rados); this one is on a local disk"));
    cpr_status st = lock_open_part(store, id, "direct_segment", &part);
    if (st)
        return cpri_store_count(store, st);
    if (!part->direct && (part->seg || part->bb.n || part->meta.n_blocks))
        st = cpr_fail(CPR_FAILED_PRECONDITION, "direct_segment: part %s/%u/%llu has rows "
                      "put through the store already; abort it and begin it again",
                      id->job, id->shard, (unsigned long long)id->checkpoint);
    if (st == CPR_OK) {
        ensure_token(store, part);
        if (strlen(part->seg_name) >= cap)
            st = cpr_fail(CPR_INVALID_ARGUMENT, "direct_segment: the name needs %zu bytes, "
                          "the buffer has %zu", strlen(part->seg_name) + 1, cap);
    }
    if (st == CPR_OK) {
        part->direct = 1;
        snprintf(name, cap, "%s", part->seg_name);
    }
    unlock_part(store, part);
    return cpri_store_count(store, st);
}

/* Refs as a segment must have them: front to back, each block padded to 8
 * (W1), ending at `size`; sane lengths; in the part's schema. */
static cpr_status check_index(const open_part *part, const cpr_store_block_ref *refs, size_t n,
                              uint64_t size)
{
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const cpr_store_block_ref *r = &refs[i];
        const cpr_table_schema *t = cpri_meta_table(&part->meta, r->table);
        if (r->offset != at)
            return cpr_fail(CPR_INVALID_ARGUMENT, "block %zu of the index is at offset %llu; "
                            "the blocks before it end at %llu (blocks follow each other, "
                            "each padded to 8 bytes)", i, (unsigned long long)r->offset,
                            (unsigned long long)at);
        if (r->len < CPR_BLOCK_HEADER_BYTES || r->len > CPR_BLOCK_MAX_BYTES)
            return cpr_fail(CPR_INVALID_ARGUMENT, "block %zu of the index has %u bytes "
                            "(a block has %u to %u)", i, r->len, CPR_BLOCK_HEADER_BYTES,
                            CPR_BLOCK_MAX_BYTES);
        if (!t)
            return cpr_fail(CPR_INVALID_ARGUMENT, "block %zu of the index is of table %u, "
                            "which is not in the part's schema", i, r->table);
        if (r->n == 0 || r->first_row > r->last_row || r->last_row >= t->rows)
            return cpr_fail(CPR_INVALID_ARGUMENT, "block %zu of the index has %u rows from "
                            "%llu to %llu; table %u has %llu rows", i, r->n,
                            (unsigned long long)r->first_row, (unsigned long long)r->last_row,
                            r->table, (unsigned long long)t->rows);
        at = r->offset + r->len + (8 - r->len % 8) % 8;
    }
    if (at != size)
        return cpr_fail(CPR_INVALID_ARGUMENT, "the index's blocks end at byte %llu; the "
                        "segment has %llu", (unsigned long long)at, (unsigned long long)size);
    return CPR_OK;
}

/* Every block's header in the segment against its ref (and the schema);
 * *codecs gets the codecs seen (a bit each), *payload the bytes of rows as
 * stored (put_block's count). */
static cpr_status check_headers(cpr_store *store, const open_part *part,
                                const cpr_store_block_ref *refs, size_t n, uint32_t *codecs,
                                uint64_t *payload)
{
    const cpri_backend_ops *ops = store->segs->ops;
    cpri_obj_extent *ext = malloc((n ? n : 1) * sizeof *ext);
    cpri_obj_reader *rd = NULL;
    if (!ext)
        return cpr_fail(CPR_NO_MEMORY, "out of memory checking a segment");
    for (size_t i = 0; i < n; i++)
        ext[i] = (cpri_obj_extent){part->seg_name, refs[i].offset, CPR_BLOCK_HEADER_BYTES};
    cpr_status st = n ? ops->read_start(store->segs, ext, n, ops->read_depth, &rd) : CPR_OK;
    for (size_t i = 0; st == CPR_OK && i < n; i++) {
        const cpr_store_block_ref *r = &refs[i];
        void *owner = NULL;
        const unsigned char *data = NULL;
        cpr_block_header h;
        st = ops->read_next(rd, &owner, &data);
        if (st)
            break;
        st = cpr_block_header_parse(data, CPR_BLOCK_HEADER_BYTES, &h);
        ops->read_release(rd, owner);
        const cpr_table_schema *t = cpri_meta_table(&part->meta, r->table);
        if (st)
            st = cpr_fail(CPR_INVALID_ARGUMENT, "the segment's block %zu (offset %llu) has "
                          "no valid header: %s", i, (unsigned long long)r->offset,
                          cpr_errmsg());
        else if (h.table != r->table || h.n != r->n || h.first_row != r->first_row ||
                 h.last_row != r->last_row || h.bytes != r->len || h.crc32c != r->crc32c)
            st = cpr_fail(CPR_INVALID_ARGUMENT, "the segment's block %zu (offset %llu) does "
                          "not match the index: table %u, %u rows %llu..%llu, %llu bytes, "
                          "CRC %08x there; table %u, %u rows %llu..%llu, %u bytes, CRC %08x "
                          "in the index", i, (unsigned long long)r->offset, h.table, h.n,
                          (unsigned long long)h.first_row, (unsigned long long)h.last_row,
                          (unsigned long long)h.bytes, h.crc32c, r->table, r->n,
                          (unsigned long long)r->first_row, (unsigned long long)r->last_row,
                          r->len, r->crc32c);
        else if (h.flags & CPR_BLOCK_VERSIONS)
            st = cpr_fail(CPR_INVALID_ARGUMENT, "the segment's block %zu has per-row "
                          "versions, which only the store's own folds have", i);
        else if (h.dim != t->dim || h.state_dim != t->state_dim)
            st = cpr_fail(CPR_INVALID_ARGUMENT, "the segment's block %zu of table %u has dim "
                          "%u, state_dim %u; the part declares dim %u, state_dim %u", i,
                          h.table, h.dim, h.state_dim, t->dim, t->state_dim);
        if (st == CPR_OK) {
            *codecs |= 1u << h.codec;
            *payload += (uint64_t)h.n * (8 + cpr_codec_row_bytes((cpr_codec)h.codec, h.dim) +
                                         (uint64_t)h.state_dim * 4);
        }
    }
    if (rd)
        ops->read_end(rd);
    free(ext);
    return st;
}

/* The index the part took (put_segment) is exactly this one. */
static int same_index(const open_part *part, const cpr_store_block_ref *refs, size_t n,
                      uint64_t size)
{
    if (part->meta.seg_bytes != size || part->meta.n_blocks != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const cpri_block_ref *b = &part->meta.blocks[i];
        const cpr_store_block_ref *r = &refs[i];
        if (b->table != r->table || b->n != r->n || b->first != r->first_row ||
            b->last != r->last_row || b->offset != r->offset || b->len != r->len ||
            b->crc != r->crc32c)
            return 0;
    }
    return 1;
}

cpr_status cpr_store_put_segment(cpr_store *store, const cpr_part_id *id,
                                 const cpr_store_block_ref *refs, size_t n, uint64_t size)
{
    open_part *part = NULL;
    if (!store || !id || !id->job || (n && !refs))
        return cpr_fail(CPR_INVALID_ARGUMENT, "put_segment: store, id and refs must be set");
    cpr_status st = lock_open_part(store, id, "put_segment", &part);
    if (st)
        return cpri_store_count(store, st);
    uint64_t have = 0;
    if (!part->direct)
        st = cpr_fail(CPR_FAILED_PRECONDITION, "put_segment: part %s/%u/%llu has no segment "
                      "of its own; ask for one with direct_segment first", id->job, id->shard,
                      (unsigned long long)id->checkpoint);
    else if (part->direct_put && same_index(part, refs, n, size)) {
        unlock_part(store, part); /* taken already (a commit tried again) */
        return CPR_OK;
    } else if (part->direct_put)
        st = cpr_fail(CPR_FAILED_PRECONDITION, "put_segment: part %s/%u/%llu has another "
                      "index of its segment already", id->job, id->shard,
                      (unsigned long long)id->checkpoint);
    else if ((st = store->segs->ops->size(store->segs, part->seg_name, &have)) != CPR_OK)
        st = st == CPR_NOT_FOUND
                 ? cpr_fail(CPR_FAILED_PRECONDITION, "put_segment: segment %s is not in the "
                            "pool, or its writer did not finish it", part->seg_name)
                 : st;
    else if (have != size)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "put_segment: segment %s has %llu bytes in the "
                      "pool; the writer says %llu", part->seg_name, (unsigned long long)have,
                      (unsigned long long)size);
    if (st == CPR_OK)
        st = check_index(part, refs, n, size);
    /* Rows going backwards start blocks every restore merges: counted and
     * capped as for put_block (check_order). */
    unsigned backwards = 0;
    for (size_t i = 1; st == CPR_OK && i < n; i++)
        backwards += refs[i].table < refs[i - 1].table ||
                     (refs[i].table == refs[i - 1].table &&
                      refs[i].first_row <= refs[i - 1].last_row);
    if (st == CPR_OK && part->out_of_order + backwards > MAX_OUT_OF_ORDER)
        st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "put_segment: %u blocks go backwards in row "
                      "order (each one a block that restores must merge; at most %u); write "
                      "each table's rows in ascending id order", backwards, MAX_OUT_OF_ORDER);
    uint32_t codecs = 0;
    uint64_t rows = 0, payload = 0;
    if (st == CPR_OK)
        st = check_headers(store, part, refs, n, &codecs, &payload);
    /* Checked: now the index (nothing above changed the part). */
    int indexing = st == CPR_OK && n;
    for (size_t i = 0; st == CPR_OK && i < n; i++) {
        const cpr_store_block_ref *r = &refs[i];
        cpri_block_ref ref = {r->table, r->n, r->first_row, r->last_row, r->offset, r->len,
                             r->crc32c};
        st = index_block(part, &ref);
        rows += r->n;
    }
    if (st == CPR_OK) {
        part->direct_put = 1;
        part->out_of_order += backwards;
        part->meta.seg_bytes = size;
        part->meta.codecs |= codecs;
        count_in(store, part, rows, payload);
    } else if (indexing) { /* out of memory half way: no way back */
        part->state = PART_FAILED;
    }
    unlock_part(store, part);
    return cpri_store_count(store, st);
}

/* Commit step 1: the last block, then the segment made durable. */
static cpr_status finish_rows(cpr_store *store, open_part *part)
{
    cpr_status st = flush_builder(store, part);
    if (st || !part->seg)
        return st;
    cpri_obj_writer *w = part->seg;
    part->seg = NULL; /* finish frees the writer whatever the outcome */
    st = store->segs->ops->finish(w, &part->meta.seg_bytes);
    if (st) /* the file may stay: no record names it, so it is swept (S2) */
        return st;
    return CPR_OK;
}

/* ---- put_blob ------------------------------------------------------------ */

/* B1: a blob as an object of the backend, named after the part's segment. */
static cpr_status create_blob_object(cpr_store *store, open_part *part, const char *name,
                                     open_blob *b)
{
    char object[CPR_SEG_NAME_MAX];
    ensure_token(store, part);
    cpri_seg_blob_name(object, part->seg_name, name);
    return store->segs->ops->create(store->segs, object, &b->obj);
}

/* A blob as a file in the part's staging directory. */
static cpr_status create_blob_file(open_part *part, const char *name, open_blob *b)
{
    char *dir = cpri_path_join(part->dir, "blobs");
    char path[4400];
    if (dir)
        snprintf(path, sizeof path, "%s/b_%s", dir, name);
    cpr_status st = !dir ? cpr_fail(CPR_NO_MEMORY, "out of memory adding blob %s", name)
                    : cpri_mkdirs(dir) == 0
                        ? CPR_OK
                        : cpr_fail(CPR_IO, "cannot create %s: %s", dir, strerror(errno));
    free(dir);
    return st == CPR_OK ? cpri_bfile_create(path, 1, 1, &b->writer) : st;
}

static cpr_status blob_writer(cpr_store *store, open_part *part, const char *name, uint64_t offset,
                              open_blob **out)
{
    for (size_t i = 0; i < part->n_blobs; i++) {
        if (strcmp(part->blobs[i].name, name) == 0) {
            uint64_t have = part->blobs[i].obj ? part->blobs[i].written
                                               : cpri_bfile_written(part->blobs[i].writer);
            if (offset != have)
                return cpr_fail(CPR_INVALID_ARGUMENT, "blob %s: chunk offset %llu, "
                                "expected %llu (chunks must arrive in order)", name,
                                (unsigned long long)offset, (unsigned long long)have);
            *out = &part->blobs[i];
            return CPR_OK;
        }
    }
    if (offset != 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "blob %s: first chunk has offset %llu, "
                        "expected 0", name, (unsigned long long)offset);
    if (part->n_blobs >= MAX_BLOBS_PER_PART)
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "a part holds at most %u blobs",
                        MAX_BLOBS_PER_PART);
    open_blob *grown = realloc(part->blobs, (part->n_blobs + 1) * sizeof *grown);
    if (!grown)
        return cpr_fail(CPR_NO_MEMORY, "out of memory adding blob %s", name);
    part->blobs = grown;
    cpr_status st = cpri_open_blob_admit(store, part->job_id); /* O1 */
    if (st)
        return st;
    open_blob *b = &part->blobs[part->n_blobs];
    memset(b, 0, sizeof *b);
    st = store->rados ? create_blob_object(store, part, name, b)
                      : create_blob_file(part, name, b);
    if (st) {
        open_part one = {.job_id = part->job_id, .n_blobs = 1}; /* give the slot back */
        cpri_store_release_blobs(store, &one);
        return st;
    }
    snprintf(b->name, sizeof b->name, "%s", name);
    part->n_blobs++;
    *out = b;
    return CPR_OK;
}

/* B1: append to a blob object, keeping the CRC32C of each CPR_BLOB_BLOCK
 * as the file writer does. */
static cpr_status obj_blob_append(cpr_store *store, open_blob *b, const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t left = len;
    while (left) {
        size_t in_block = (size_t)(b->written % CPR_BLOB_BLOCK);
        size_t take = CPR_BLOB_BLOCK - in_block < left ? CPR_BLOB_BLOCK - in_block : left;
        b->crc = cpr_crc32c(in_block ? b->crc : 0, p, take);
        if (in_block + take == CPR_BLOB_BLOCK || left == take) {
            /* The block's CRC so far: replaced while the block grows. */
            size_t idx = (size_t)(b->written / CPR_BLOB_BLOCK);
            if (idx >= b->cap_crcs) {
                size_t cap = b->cap_crcs ? 2 * b->cap_crcs : 16;
                uint32_t *g = realloc(b->crcs, cap * sizeof *g);
                if (!g)
                    return cpr_fail(CPR_NO_MEMORY, "out of memory writing blob %s", b->name);
                b->crcs = g;
                b->cap_crcs = cap;
            }
            b->crcs[idx] = b->crc;
            b->n_crcs = idx + 1;
        }
        b->written += take;
        p += take;
        left -= take;
    }
    return store->segs->ops->append(b->obj, data, len);
}

cpr_status cpr_store_put_blob(cpr_store *store, const cpr_part_id *id, const char *name,
                              uint64_t offset, const void *data, size_t len,
                              uint32_t crc32c)
{
    open_part *part = NULL;
    open_blob *blob = NULL;
    cpr_status st;
    if (!cpri_name_valid(name))
        return cpri_store_count(store, cpr_fail(CPR_INVALID_ARGUMENT,
                               "blob name \"%.140s\" is invalid: use 1-128 characters "
                               "of A-Z a-z 0-9 . _ -", name ? name : "(null)"));
    if (len > 0 && !data)
        return cpri_store_count(store, cpr_fail(CPR_INVALID_ARGUMENT, "blob chunk has no data"));
    if (cpr_crc32c(0, data, len) != crc32c)
        return cpri_store_count(store, cpr_fail(CPR_CORRUPT, "blob %s chunk at offset "
                               "%llu: checksum mismatch; the chunk was damaged in "
                               "transit", name, (unsigned long long)offset));
    st = lock_for_put(store, id, "put_blob", &part);
    if (st)
        return cpri_store_count(store, st);
    st = blob_writer(store, part, name, offset, &blob);
    if (st == CPR_OK) {
        st = blob->obj ? obj_blob_append(store, blob, data, len)
                       : cpri_bfile_append(blob->writer, data, len);
        if (st)
            part->state = PART_FAILED;
    }
    if (st == CPR_OK) {
        part->meta.bytes += len;
        atomic_fetch_add(&store->bytes_in, len);
    }
    unlock_part(store, part);
    return cpri_store_count(store, st);
}

/* ---- commit -------------------------------------------------------------- */

/* Step 2: finish the blob files and record their sizes and checksums. */
static cpr_status finish_blobs(cpr_store *store, open_part *part)
{
    cpri_part_meta *m = &part->meta;
    m->blobs = calloc(part->n_blobs ? part->n_blobs : 1, sizeof *m->blobs);
    if (!m->blobs)
        return cpr_fail(CPR_NO_MEMORY, "out of memory committing blobs");
    cpr_status st = CPR_OK;
    for (size_t i = 0; i < part->n_blobs; i++) {
        cpri_blob_meta *bm = &m->blobs[m->n_blobs];
        open_blob *b = &part->blobs[i];
        if (st == CPR_OK && b->obj) { /* B1: the object's bytes, the CRCs kept */
            st = store->segs->ops->finish(b->obj, &bm->size);
            bm->crcs = b->crcs;
            bm->n_crcs = b->n_crcs;
            b->crcs = NULL;
            snprintf(bm->name, sizeof bm->name, "%s", b->name);
            m->n_blobs += st == CPR_OK;
        } else if (st == CPR_OK) {
            st = cpri_bfile_finish(b->writer, store->opts.no_sync, &bm->size,
                                  &bm->crcs, &bm->n_crcs);
            snprintf(bm->name, sizeof bm->name, "%s", b->name);
            m->n_blobs += st == CPR_OK;
        } else {
            cpri_bfile_discard(b->writer);
            store->segs->ops->discard(b->obj);
        }
        b->writer = NULL;
        b->obj = NULL;
        free(b->crcs);
        b->crcs = NULL;
    }
    cpri_store_release_blobs(store, part); /* O1: none is open any more */
    part->n_blobs = 0;
    return st;
}

/* Step 4, the commit point: the part record (with its block index) and the
 * job id record in one synced write. */
static cpr_status write_record(cpr_store *store, open_part *part)
{
    unsigned char jkey[130], mkey[CPR_META_KEY_LEN], jval[4], *rec = NULL;
    size_t jlen = cpri_key_job(jkey, part->job_name), rec_len = 0;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    part->meta.committed_unix_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    cpr_status st = cpri_meta_encode(&part->meta, &rec, &rec_len);
    if (st)
        return st;
    cpri_put_be32(jval, part->job_id);
    cpri_key_meta(mkey, part->job_id, part->meta.shard, part->meta.checkpoint);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_writebatch_put(wb, (const char *)jkey, jlen, (const char *)jval, 4);
    rocksdb_writebatch_put(wb, (const char *)mkey, sizeof mkey, (const char *)rec, rec_len);
    /* R8: in RADOS, the job's id is still this one and no gateway committed
     * this part yet. */
    cpri_kv_cond conds[2] = {{jkey, jlen, jval, 4}, {mkey, sizeof mkey, NULL, 0}};
    st = cpri_catalog_write_if(store, conds, 2, wb, "committing (writing the part record)");
    if (st == CPR_FAILED_PRECONDITION)
        cpr_fail(st, "job %s shard %u checkpoint %llu was committed through another gateway "
                 "of this pool meanwhile", part->job_name, part->meta.shard,
                 (unsigned long long)part->meta.checkpoint);
    rocksdb_writebatch_destroy(wb);
    free(rec);
    return st;
}

/* Under store->mu: may this part still commit? */
static cpr_status check_commit(const cpri_job *job, const cpri_part_meta *m)
{
    const cpri_part_meta *newest = cpri_job_newest(job, m->shard, 0);
    if (newest && newest->checkpoint >= m->checkpoint)
        return cpr_fail(CPR_FAILED_PRECONDITION, "shard %u committed checkpoint %llu "
                        "while %llu was open; commit a shard's parts in id order",
                        m->shard, (unsigned long long)newest->checkpoint,
                        (unsigned long long)m->checkpoint);
    if (m->kind == CPR_KIND_DELTA) {
        const cpri_part_meta *base = cpri_job_newest(job, m->shard, 1);
        if (!base || base->checkpoint != m->base)
            return cpr_fail(CPR_FAILED_PRECONDITION, "DELTA %llu was based on %llu, "
                            "but shard %u's newest FULL/DELTA is now %llu",
                            (unsigned long long)m->checkpoint, (unsigned long long)m->base,
                            m->shard, base ? (unsigned long long)base->checkpoint : 0ULL);
    }
    if (job->floor && m->checkpoint <= job->floor)
        return cpr_fail(CPR_FAILED_PRECONDITION, "checkpoint %llu fell below the "
                        "retention floor", (unsigned long long)m->checkpoint);
    return CPR_OK;
}

/* Step 3: move the blobs to their final place (S2 covers a crash after it). */
static cpr_status publish_blobs(cpr_store *store, open_part *part)
{
    char *staged = cpri_path_join(part->dir, "blobs");
    char *job_dir = cpri_path_join(store->blobs_dir, part->final_dir + strlen(store->blobs_dir) + 1);
    cpr_status st = CPR_OK;
    if (!staged || !job_dir) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory publishing blobs");
        goto out;
    }
    *strrchr(job_dir, '/') = '\0';
    /* The blob files' own directory entries first, then the moves. */
    if ((!store->opts.no_sync && cpri_fsync_dir(staged) != 0) ||
        cpri_mkdirs(job_dir) != 0 || cpri_fsync_dir(store->blobs_dir) != 0 ||
        rename(staged, part->final_dir) != 0 ||
        (!store->opts.no_sync && cpri_fsync_dir(job_dir) != 0))
        st = cpr_fail(errno == ENOSPC ? CPR_RESOURCE_EXHAUSTED : CPR_IO,
                      "publishing blobs to %s: %s", part->final_dir, strerror(errno));
out:
    free(staged);
    free(job_dir);
    return st;
}

/* Caller holds store->mu. 1 if this call unlinked it (0: already gone). */
static int unlink_open_part_locked(cpr_store *store, open_part *part)
{
    for (open_part **pp = &store->open_parts; *pp; pp = &(*pp)->next) {
        if (*pp == part) {
            *pp = part->next;
            part->removed = 1;
            part->refs--; /* the table's own reference */
            cpri_job *job = cpri_catalog_find_id(&store->catalog, part->job_id);
            store->n_open_parts--; /* O1 */
            if (job)
                job->open_parts--;
            return 1;
        }
    }
    return 0;
}

static int unlink_open_part(cpr_store *store, open_part *part)
{
    pthread_mutex_lock(&store->mu);
    int unlinked = unlink_open_part_locked(store, part);
    pthread_mutex_unlock(&store->mu);
    return unlinked;
}

/* Steps 3-5 under commit_mu, so that per-shard commit order holds (C2). */
static cpr_status publish(cpr_store *store, open_part *part)
{
    cpr_status st;
    pthread_mutex_lock(&store->commit_mu);
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find_id(&store->catalog, part->job_id);
    st = job ? check_commit(job, &part->meta) : cpr_fail(CPR_INTERNAL, "job vanished");
    if (st == CPR_OK && part->meta.n_blobs && !store->rados) { /* B1: no directory */
        part->final_dir = cpri_part_dirname(part->job_name, part->meta.shard,
                                           part->meta.checkpoint, store->blobs_dir);
        if (!part->final_dir)
            st = cpr_fail(CPR_NO_MEMORY, "out of memory committing");
    }
    pthread_mutex_unlock(&store->mu);
    if (st == CPR_OK && part->meta.n_blobs && !store->rados)
        st = publish_blobs(store, part);
    int written = 0;
    if (st == CPR_OK) {
        st = write_record(store, part);
        written = st == CPR_OK;
        if (!written) {
            /* The synced write failed, but it may still have reached the WAL
             * (an fsync error after the append): the files it names stay, and
             * the sweep at the next open removes them if no record does. */
            part->seg_name[0] = '\0';
            free(part->final_dir);
            part->final_dir = NULL;
        }
    }
    if (written) { /* catalog and open list change together */
        pthread_mutex_lock(&store->mu);
        st = cpri_job_add_part(job, &part->meta);
        unlink_open_part_locked(store, part);
        pthread_mutex_unlock(&store->mu);
        free(part->final_dir); /* the blobs are now the catalog's (S2) */
        part->final_dir = NULL;
        part->seg_name[0] = '\0'; /* and the segment */
    } else if (part->final_dir) {
        cpri_rmtree(part->final_dir); /* published but never committed */
    }
    pthread_mutex_unlock(&store->commit_mu);
    return st;
}

static cpr_status commit_locked(cpr_store *store, open_part *part)
{
    cpr_status st;
    pthread_mutex_lock(&store->mu);
    cpri_job *job = cpri_catalog_find_id(&store->catalog, part->job_id);
    st = job ? check_commit(job, &part->meta) : cpr_fail(CPR_INTERNAL, "job vanished");
    pthread_mutex_unlock(&store->mu);
    if (st == CPR_OK) /* F3: a full disk leaves the part open; F1: counting what the
                         commit still writes (its rows' and blobs' buffered tails) */
        st = cpri_space_check_more(store, CPRI_SPACE_CATALOG,
                                   PART_BUFFER_BYTES + part->n_blobs * BLOB_BUFFER_BYTES,
                                   "commit");
    if (st) /* nothing changed yet: the part stays open */
        return st;
    if (part->direct && !part->direct_put && /* W3: no rows; whatever was written goes */
        (st = store->segs->ops->remove(store->segs, part->seg_name)) != CPR_OK)
        return st; /* the part stays open */
    part->state = PART_COMMITTING;
    st = finish_rows(store, part);
    if (st == CPR_OK)
        st = finish_blobs(store, part);
    if (st == CPR_OK)
        st = publish(store, part);
    if (st == CPR_OK)
        cpri_fold_poke(store);
    part->state = st == CPR_OK ? PART_COMMITTING : PART_FAILED;
    return st;
}

/* The blobs a part holds: count and bytes written (part locked). */
static void blobs_held(const open_part *part, uint64_t *blobs, uint64_t *bytes)
{
    *blobs = part->n_blobs;
    *bytes = 0;
    for (size_t i = 0; i < part->n_blobs; i++)
        *bytes += part->blobs[i].obj ? part->blobs[i].written
                                     : cpri_bfile_written(part->blobs[i].writer);
}

static cpr_status commit_checked(cpr_store *store, const cpr_part_id *id, uint64_t rows_sent,
                                 int check_blobs, uint64_t blobs_sent, uint64_t blob_bytes_sent)
{
    open_part *part = NULL;
    uint64_t blobs = 0, blob_bytes = 0;
    cpr_status st = lock_open_part(store, id, "commit", &part);
    if (st)
        return cpri_store_count(store, st);
    if (check_blobs)
        blobs_held(part, &blobs, &blob_bytes);
    if (check_blobs && (blobs != blobs_sent || blob_bytes != blob_bytes_sent))
        st = cpr_fail(CPR_INVALID_ARGUMENT, "commit of %s/%u/%llu: the writer sent %llu blobs "
                      "of %llu bytes but the store holds %llu of %llu bytes; resend or abort",
                      id->job, id->shard, (unsigned long long)id->checkpoint,
                      (unsigned long long)blobs_sent, (unsigned long long)blob_bytes_sent,
                      (unsigned long long)blobs, (unsigned long long)blob_bytes);
    else if (rows_sent != part->meta.rows)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "commit of %s/%u/%llu: the client sent %llu "
                      "rows but the store received %llu; resend the missing rows or "
                      "abort", id->job, id->shard, (unsigned long long)id->checkpoint,
                      (unsigned long long)rows_sent, (unsigned long long)part->meta.rows);
    else
        st = commit_locked(store, part);
    pthread_mutex_unlock(&part->mu);
    cpri_open_part_put(store, part);
    return cpri_store_count(store, st);
}

cpr_status cpr_store_commit(cpr_store *store, const cpr_part_id *id, uint64_t rows_sent)
{
    return commit_checked(store, id, rows_sent, 0, 0, 0);
}

cpr_status cpr_store_commit_blobs(cpr_store *store, const cpr_part_id *id, uint64_t rows_sent,
                                  uint64_t blobs, uint64_t blob_bytes)
{
    return commit_checked(store, id, rows_sent, 1, blobs, blob_bytes);
}

/* ---- abort ---------------------------------------------------------------- */

cpr_status cpr_store_abort(cpr_store *store, const cpr_part_id *id)
{
    open_part *part = cpri_open_part_get(store, id);
    if (!part)
        return cpri_store_count(store, not_open(store, id, "abort"));
    pthread_mutex_lock(&part->mu);
    if (part->state == PART_COMMITTING) {
        pthread_mutex_unlock(&part->mu);
        cpri_open_part_put(store, part);
        return cpri_store_count(store, cpr_fail(CPR_FAILED_PRECONDITION,
                               "abort: part %s/%u/%llu is being committed", id->job,
                               id->shard, (unsigned long long)id->checkpoint));
    }
    part->state = PART_FAILED; /* puts racing with us now fail */
    pthread_mutex_unlock(&part->mu);
    unlink_open_part(store, part);
    cpri_open_part_put(store, part);
    return CPR_OK;
}

/* ---- idle parts ------------------------------------------------------------ */

/* Under store->mu: references to the open parts untouched since cutoff_ms. */
static cpr_status idle_candidates(cpr_store *store, uint64_t cutoff_ms, open_part ***out,
                                  size_t *n)
{
    size_t count = 0, cap = 0;
    for (open_part *p = store->open_parts; p; p = p->next)
        cap++;
    open_part **parts = malloc((cap + 1) * sizeof *parts);
    if (!parts)
        return cpr_fail(CPR_NO_MEMORY, "out of memory looking for idle parts");
    for (open_part *p = store->open_parts; p; p = p->next) {
        if (atomic_load(&p->active_ms) > cutoff_ms)
            continue;
        p->refs++;
        parts[count++] = p;
    }
    *out = parts;
    *n = count;
    return CPR_OK;
}

/* Abort `part` unless a call holds it or touched it since cutoff_ms. */
static int abort_if_idle(cpr_store *store, open_part *part, uint64_t cutoff_ms)
{
    int idle = 0;
    if (pthread_mutex_trylock(&part->mu) != 0)
        return 0; /* in a call right now: not idle */
    if (part->state != PART_COMMITTING && atomic_load(&part->active_ms) <= cutoff_ms) {
        part->state = PART_FAILED; /* as cpr_store_abort: late puts now fail */
        idle = 1;
    }
    pthread_mutex_unlock(&part->mu);
    return idle && unlink_open_part(store, part);
}

cpr_status cpr_store_abort_idle(cpr_store *store, double idle_s, uint64_t *aborted)
{
    open_part **parts = NULL;
    size_t n = 0;
    uint64_t count = 0, now = now_ms();
    if (!(idle_s >= 0.0)) /* also NaN */
        return cpri_store_count(store, cpr_fail(CPR_INVALID_ARGUMENT, "idle time %g s: "
                               "give 0 or more seconds", idle_s));
    double idle_ms = idle_s * 1000.0;
    uint64_t cutoff = idle_ms >= (double)now ? 0 : now - (uint64_t)idle_ms;
    pthread_mutex_lock(&store->mu);
    cpr_status st = idle_candidates(store, cutoff, &parts, &n);
    pthread_mutex_unlock(&store->mu);
    if (st)
        return cpri_store_count(store, st);
    for (size_t i = 0; i < n; i++) {
        open_part *p = parts[i];
        if (abort_if_idle(store, p, cutoff)) {
            count++;
            cpri_log(CPR_LOG_WARN, "aborted part %s/%u/%llu: untouched for %.1f s (idle "
                    "limit %.1f s); its writer is presumed gone", p->job_name,
                    p->meta.shard, (unsigned long long)p->meta.checkpoint,
                    (double)(now - atomic_load(&p->active_ms)) / 1000.0, idle_s);
        }
        cpri_open_part_put(store, p);
    }
    free(parts);
    if (aborted)
        *aborted = count;
    return CPR_OK;
}
