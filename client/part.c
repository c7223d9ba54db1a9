/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The asynchronous writer of one part. Puts copy the caller's data into
 * staged items (at most about message_bytes each) and queue them; the part's
 * sender thread computes checksums and hands the items to the node, in
 * order. Commit drains the queue, closes the streams and commits.
 *
 * Rows whose ids ascend (the common case: a gather in id order) are staged
 * straight into the layout of a row block (cpr/block.h); the sender seals
 * it (one CRC32C) and the block goes to the store unchanged. Other batches
 * go as ids/values/state with a batch CRC, and the store sorts them.
 *
 * Invariants
 *  P1. client->staged_bytes is the sum of the `charge` of every item that
 *      exists (queued or being sent) in any part, and never exceeds
 *      opts.staging_bytes: a put waits on client->room until its item fits.
 *      Every item is charged when created and discharged when freed, and
 *      its charge is the memory it takes: a pooled item is message_bytes
 *      whatever it holds, so only payloads of at least half of that are
 *      pooled (charged at most twice what they hold); a smaller one gets
 *      memory of its own size. (Charging only the payload of a pooled item
 *      let a save of many small pieces, such as an MFU save of 208
 *      shard-tables of a few hundred rows each, take a 1 MiB item for each
 *      60 KB it charged.) A lazy item (P10) is charged at its put for the
 *      memory its sender takes later, carrier included.
 *  P2. part->error, once set, never changes; after it the sender discards
 *      queued items instead of sending them, so a put blocked on room always
 *      wakes (P1) and then reports the error.
 *  P3. Items reach the node in the order the puts were made (one queue, one
 *      sender), so "ascending id order" and blob offsets hold on the wire.
 *  P4. The sender gives the part back (`sent`) only after `closing` is set
 *      and the queue is empty, and never touches the part after that;
 *      commit/abort wait for it before touching the node again, so no call
 *      on the part's writer races a Commit or Abort. They wait once
 *      (`stopped`).
 *  P7. With defer_send, a part is `hold`: its sender sends nothing until
 *      commit or abort sets `closing`, or a put of the client finds staging
 *      full and releases every held part of the client (so a put never waits
 *      for room that only held parts could free). Puts to a held part are
 *      pure copies. Lock order: c->mu before p->mu, never the reverse.
 *  P8. Senders are threads of the client's pool, not of the part: a part
 *      takes an idle one (or starts one) at begin, and the thread goes back
 *      to the pool when it gives the part back (P4); at most
 *      SENDERS_IDLE_MAX wait idle, any more leave and are joined by the next
 *      begin or by cpr_client_close, which also stops the idle ones (every
 *      part is finished first, so every sender is idle or has left). A
 *      sender is on the idle or the left list from before it gives its part
 *      back until it is handed another or joined. Starting a thread took
 *      0.1-0.3 ms of the trainer's stall per part on the VM of
 *      docs/performance.md (and once 17 ms). The lists (c->idle_senders,
 *      c->left_senders) and each sender's `part` and `quit` are under c->mu.
 *  P9. A part's deferred f32 rows are filled (copied out of the caller's
 *      snapshot) as soon as they are queued, held or not: the sender wakes
 *      for `to_fill` (queued items fill has not run for) and fills every
 *      queued one before it sends anything more. Their memory was charged
 *      when they were put; the copy runs on the client's threads, and a
 *      copy-on-write snapshot (cpr_emb_save_copy) costs the training thread
 *      a guard for each of its rows the trainer changes before the row is
 *      copied out, which filling block by block as the wire drained spread
 *      over the whole save (docs/client.md).
 *  P10. Deferred f32 rows are lazy items, unless their block is full size
 *      and the arena has an idle item for it (mapped and faulted in: it is
 *      staged at once, as other rows are): the put allocates only the item's
 *      header (and the ids, unless the caller keeps them: ids_kept), and the
 *      sender takes the block's memory when it fills the rows (lazy_memory):
 *      a full-size block borrows an arena item (its `carrier`, back to the
 *      arena when the item is freed), a smaller one gets memory of its own.
 *      So a save's staging memory is never mapped or faulted in on the
 *      caller's thread: a first save's 208 fresh 475 KB items had cost the
 *      trainer 27-36 ms of its stall (docs/results.md). Only the sender
 *      reads or writes `data` of a lazy item, and only once it is set.
 *  P6. `begun` says whether the node began the part: set before the sender
 *      starts (cpr_client_begin), or by the sender itself before it sends
 *      anything (cpr_client_begin_async); final once the sender gave the part
 *      back (P4).
 *      A part the node never began is never aborted or committed on the node
 *      (its id may be another writer's).
 *  P5. A handle whose part was aborted by id (cpr_client_abort) is stopped
 *      before the node is told, and never calls the node again: a new part
 *      of the same id, begun after the abort, cannot receive its rows, and
 *      its commit or abort cannot touch that new part.
 *  P11. Each part draws a begin token (random, not 0) and sends it with
 *      every Begin of it, the resends after a lost answer too: ckptd answers
 *      a Begin of a part open under the same token with that part's lease
 *      (ckptd/leases.h L4), so a Begin whose answer was lost does not leave
 *      the part open and unowned until the idle reaper ends it.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <stdint.h>
#include <sys/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "cpr/block.h"
#include "cpr/codec.h"
#include "cpr/crc32c.h"
#include "cpr_common.h"

#define MAX_ITEM_ROWS ((size_t)1 << 24) /* the store's rows per put */
#define PREFETCH_ROWS 8                    /* a gather's look-ahead */

typedef struct item {
    struct item *next;
    size_t charge;        /* bytes counted against staging: the item's memory (P1) */
    size_t bytes;         /* what it carries, for progress: its payload (an ids-only
                             block: the encoded block it becomes) */
    int pooled;           /* allocated full size: may go back to the pool */
    int is_blob;
    int is_block;         /* rows staged as a row block of len bytes */
    uint32_t table;       /* rows */
    uint32_t dim, state_dim; /* blocks */
    size_t n, values_count, state_count;
    char name[CPR_NAME_MAX + 1]; /* blob */
    uint64_t offset;
    size_t len;
    cpr_fill_fn fill;     /* deferred rows: values written by fill before sealing */
    cpr_fill_encoded_fn fill_encoded; /* ... or already encoded (non-f32 parts) */
    void *fill_ctx;
    size_t fill_first;    /* the block's first row within its put */
    int filled;           /* fill ran already (fill_queued, P9) */
    uint8_t *data;        /* rows: ids | values | state; blob: bytes. In `inline_data`,
                             or, for a lazy item, memory of its own (P10) */
    int lazy;             /* deferred f32 rows: `data` is allocated when filled (P10) */
    const uint64_t *ids_src; /* lazy, until filled: the rows' ids (the caller's when it
                                keeps them, cpr_deferred_rows.ids_kept, else inline_data) */
    struct item *carrier; /* lazy, full size: the arena item whose memory is `data` */
    _Alignas(8) uint8_t inline_data[];
} item;

typedef struct schema {
    uint32_t table, dim, state_dim;
    uint64_t rows;
} schema;

/* Where a put's rows come from: row i of the put has id ids[i] (or
 * range_begin + i when ids is NULL), its values at values + at * vstride and
 * its state at state + at * sstride floats, where `at` is i for a batch and
 * id - row_base for a gather from the caller's table. */
typedef struct rows_src {
    uint32_t table;
    size_t n;
    const uint64_t *ids;
    uint64_t range_begin;
    int by_id;
    uint64_t row_base;
    const float *values, *state;
    size_t vstride, sstride;
    cpr_fill_fn fill;      /* cpr_part_put_deferred: no values now */
    cpr_fill_encoded_fn fill_encoded;
    void *fill_ctx;
    int ids_kept;          /* deferred: the caller keeps ids until commit or abort */
} rows_src;

static uint64_t src_id(const rows_src *r, size_t i)
{
    return r->ids ? r->ids[i] : r->range_begin + i;
}

static const float *src_values(const rows_src *r, size_t i)
{
    return r->values + (r->by_id ? src_id(r, i) - r->row_base : i) * r->vstride;
}

static const float *src_state(const rows_src *r, size_t i)
{
    return r->state + (r->by_id ? src_id(r, i) - r->row_base : i) * r->sstride;
}

struct cpr_part {
    cpr_client *client;
    cpri_node *node;
    char job[CPR_NAME_MAX + 1];
    cpr_part_id id;
    schema *tables;
    size_t n_tables;
    char **blob_names;
    size_t n_blobs;
    uint64_t blob_bytes;     /* of the blobs put whole; the commit names both */
    cpri_node_writer *writer;
    char segment[CPR_STORE_OBJECT_MAX]; /* direct writes: Begin's answer ("" if not) */
    cpri_segment_index index;   /* direct writes: the segment, once finished */
    pthread_mutex_t mu;
    pthread_cond_t wake;     /* items queued or closing */
    pthread_cond_t given_back; /* `sent` set (P4) */
    int sent;                /* the sender is done with the part (P4) */
    item *head, *tail;
    int closing;
    int hold;                /* defer_send: the sender waits for commit (or room) */
    int stopped;             /* the sender gave the part back and the writer is closed */
    int begun;               /* the node has begun the part (P6) */
    size_t to_fill;          /* queued items fill has not run for (P9) */
    uint64_t lease;          /* the writer lease the node granted at Begin (0: none) */
    uint64_t begin_token;    /* P11: this part's Begin token, the same on every resend */
    cpr_part_spec deferred;  /* cpr_client_begin_async: the Begin the sender sends */
    cpr_table_schema *deferred_tables;
    int orphaned;            /* aborted by id (cpr_client_abort): the node's part of
                                this id may be another writer's now, so this
                                handle never calls the node again (P5) */
    cpr_status error;        /* P2 */
    char errmsg[1024];
    cpr_part_progress progress;
    cpr_part *next_open;     /* client->parts, under client->mu */
    cpr_codec codec;         /* the part's row values on the wire (spec->codec) */
    unsigned char *enc;      /* the sender's encoded block (sender thread only) */
    size_t enc_cap;
};

/* ---- staging (P1) ------------------------------------------------------------------ */

static void discharge(cpr_client *c, size_t charge)
{
    pthread_mutex_lock(&c->mu);
    c->staged_bytes -= charge;
    pthread_cond_broadcast(&c->room);
    pthread_mutex_unlock(&c->mu);
}

/* Freed full-size items are kept for reuse, up to the staging bound: the
 * staging arena. A save then gathers into memory that is already mapped and
 * faulted in (a 1 MiB malloc is above glibc's mmap threshold: without the
 * arena every item would be mapped, faulted in page by page and unmapped
 * again, in the trainer's stall). The arena never holds more than
 * staging_bytes, the bound the caller chose; cpr_client_close frees it. */
static void item_free(cpr_part *p, item *it)
{
    cpr_client *c = p->client;
    /* What may go back to the arena: a full-size item, or a lazy item's
     * carrier (P10). */
    int lazy = it->lazy;
    item *keep = lazy ? it->carrier : it;
    if (lazy && !it->carrier)
        free(it->data); /* memory of its own (NULL: never filled) */
    pthread_mutex_lock(&c->mu);
    c->staged_bytes -= it->charge;
    pthread_cond_broadcast(&c->room);
    if (keep && keep->pooled && c->n_pool < c->pool_max) {
        keep->next = c->pool;
        c->pool = keep;
        c->n_pool++;
        keep = NULL; /* in the arena now */
    }
    pthread_mutex_unlock(&c->mu);
    free(keep); /* it (or its carrier), unless the arena took it */
    if (lazy)
        free(it); /* the header */
}

void cpri_parts_pool_release(cpr_client *c)
{
    while (c->pool) {
        item *it = c->pool;
        c->pool = it->next;
        free(it);
    }
    c->n_pool = 0;
}

/* defer_send (P7): staging is full, so every held part of the client starts
 * sending: the room a put waits for may be held by any of them (one thread
 * staging several shards). Under c->mu, which is taken before p->mu and
 * never inside it; parts leave c->parts under c->mu before they are freed. */
static void release_holds(cpr_client *c)
{
    for (cpr_part *q = c->parts; q; q = q->next_open) {
        pthread_mutex_lock(&q->mu);
        if (q->hold) {
            q->hold = 0;
            pthread_cond_signal(&q->wake);
        }
        pthread_mutex_unlock(&q->mu);
    }
}

/* An idle arena item, taken off the arena, or NULL. Under c->mu. */
static item *pool_pop(cpr_client *c)
{
    item *it = c->pool;
    if (it) {
        c->pool = it->next;
        c->n_pool--;
    }
    return it;
}

/* What an item takes (P1): its header and its payload's memory; a lazy one
 * (P10) also its inline ids, and a full-size one its carrier's header. */
static size_t item_charge(int lazy, int full_size, size_t inline_bytes, size_t memory)
{
    return sizeof(item) + memory + (lazy ? inline_bytes + (full_size ? sizeof(item) : 0) : 0);
}

/* Wait for room, then allocate an item of `payload` bytes. A lazy item
 * (P10) gets its header and `inline_bytes` now and its payload's memory
 * when the sender fills it; it is charged for both now. NULL + status on
 * failure (the part's error, or no memory). */
static item *item_new(cpr_part *p, size_t payload, int lazy, size_t inline_bytes,
                      cpr_status *st)
{
    cpr_client *c = p->client;
    size_t msg = c->opts.message_bytes;
    int full_size = payload <= msg && payload >= msg / 2; /* P1 */
    size_t memory = full_size ? msg : payload;
    size_t charge = item_charge(lazy, full_size, inline_bytes, memory);
    pthread_mutex_lock(&c->mu);
    while (c->staged_bytes > 0 && c->staged_bytes + charge > c->opts.staging_bytes) {
        release_holds(c); /* parts held since the last wake-up too */
        pthread_cond_wait(&c->room, &c->mu);
    }
    c->staged_bytes += charge;
    /* An idle arena item is mapped and faulted in already: a full-size
     * block is staged in it now, lazy or not (P10). */
    item *it = full_size ? pool_pop(c) : NULL;
    if (it && lazy) {
        size_t staged = item_charge(0, full_size, 0, memory);
        c->staged_bytes -= charge - staged;
        charge = staged;
        lazy = 0;
    }
    pthread_mutex_unlock(&c->mu);
    if (!it)
        it = malloc(lazy ? sizeof(item) + inline_bytes : charge);
    if (!it) {
        discharge(c, charge);
        *st = cpr_fail(CPR_NO_MEMORY, "out of memory staging %zu bytes", payload);
        return NULL;
    }
    memset(it, 0, sizeof *it); /* the payload is written by the caller */
    it->charge = charge;
    it->bytes = payload;
    it->pooled = full_size;
    it->lazy = lazy;
    it->data = lazy ? NULL : it->inline_data;
    return it;
}

/* P10: a lazy item's memory, taken on the sender's thread before its rows
 * are filled: an arena item (the carrier) when it is full size, else memory
 * of its own; then its ids go into the block. */
static cpr_status lazy_memory(cpr_part *p, item *it)
{
    cpr_client *c = p->client;
    if (it->pooled) {
        pthread_mutex_lock(&c->mu);
        item *carrier = pool_pop(c);
        pthread_mutex_unlock(&c->mu);
        if (!carrier)
            carrier = malloc(sizeof(item) + c->opts.message_bytes);
        if (carrier) {
            memset(carrier, 0, sizeof *carrier);
            carrier->pooled = 1; /* back to the arena with the item (item_free) */
            it->carrier = carrier;
            it->data = carrier->inline_data;
        }
    } else {
        it->data = malloc(it->len ? it->len : 1);
    }
    if (!it->data)
        return cpr_fail(CPR_NO_MEMORY, "out of memory staging a block of %zu rows of table %u",
                        it->n, it->table);
    cpr_block_layout l;
    cpr_block_layout_of((uint32_t)it->n, it->dim, it->state_dim, 0, &l);
    memcpy(it->data + l.ids, it->ids_src, it->n * 8);
    it->ids_src = NULL;
    return CPR_OK;
}

/* ---- the sender thread ---------------------------------------------------------------- */

static void set_error(cpr_part *p, cpr_status st)
{
    pthread_mutex_lock(&p->mu);
    if (p->error == CPR_OK) {
        p->error = st;
        snprintf(p->errmsg, sizeof p->errmsg, "%s", cpr_errmsg());
    }
    pthread_mutex_unlock(&p->mu);
}

/* The sender's own buffer for an encoded block of it->n rows (an encoded
 * block may be larger than the f32 one for rows of 1 or 2 values), with the
 * ids copied in; *dst its layout, *len its bytes. */
static cpr_status encoded_block(cpr_part *p, const item *it, cpr_block_layout *dst, size_t *len)
{
    cpr_block_layout src;
    uint32_t n = (uint32_t)it->n;
    *len = cpr_block_size_codec(n, it->dim, it->state_dim, 0, p->codec);
    if (!*len)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a %s block of %u rows of table %u is too large",
                        cpr_codec_name(p->codec), n, it->table);
    if (*len > p->enc_cap) {
        free(p->enc);
        p->enc = NULL;
        p->enc_cap = 0;
        if (posix_memalign((void **)&p->enc, 64, *len))
            return cpr_fail(CPR_NO_MEMORY, "out of memory encoding a %zu-byte block", *len);
        p->enc_cap = *len;
    }
    cpr_block_layout_of(n, it->dim, it->state_dim, 0, &src);
    cpr_block_layout_codec(n, it->dim, it->state_dim, 0, p->codec, dst);
    memcpy(p->enc + dst->ids, it->data + src.ids, (size_t)n * 8);
    return CPR_OK;
}

/* A staged f32 block sent in the part's codec: values encoded and state
 * copied into the sender's buffer, then sealed. */
static cpr_status send_encoded(cpr_part *p, item *it)
{
    cpr_block_layout src, dst;
    size_t len;
    uint32_t n = (uint32_t)it->n;
    cpr_status st = encoded_block(p, it, &dst, &len);
    if (st)
        return st;
    cpr_block_layout_of(n, it->dim, it->state_dim, 0, &src);
    st = cpr_codec_encode(p->codec, 0, (const float *)(it->data + src.values), n, it->dim,
                          p->enc + dst.values);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", cpr_errmsg());
        return cpr_fail(st, "table %u, rows %llu..: %s", it->table,
                        (unsigned long long)*(const uint64_t *)(it->data + src.ids), why);
    }
    memcpy(p->enc + dst.state, it->data + src.state, (size_t)n * it->state_dim * 4);
    st = cpr_block_seal_codec(p->enc, it->table, n, it->dim, it->state_dim, 0, p->codec);
    return st ? st : cpri_node_writer_block(p->writer, p->enc, len);
}

/* Deferred rows the caller encodes itself (cpr_deferred_rows.fill_encoded):
 * straight into the sender's buffer, then sealed. */
static cpr_status send_fill_encoded(cpr_part *p, item *it)
{
    cpr_block_layout dst;
    size_t len;
    uint32_t n = (uint32_t)it->n;
    cpr_status st = encoded_block(p, it, &dst, &len);
    if (st)
        return st;
    st = it->fill_encoded(it->fill_ctx, it->fill_first, it->n, it->dim, it->state_dim, p->codec,
                          p->enc + dst.values,
                          it->state_dim ? (float *)(void *)(p->enc + dst.state) : NULL);
    if (st)
        return cpr_fail(st, "filling rows [%zu, %zu) of table %u as %s: %s", it->fill_first,
                        it->fill_first + it->n, it->table, cpr_codec_name(p->codec),
                        cpr_errmsg());
    st = cpr_block_seal_codec(p->enc, it->table, n, it->dim, it->state_dim, 0, p->codec);
    return st ? st : cpri_node_writer_block(p->writer, p->enc, len);
}

/* Deferred f32 rows not copied yet (P9). */
static int item_to_fill(const cpr_part *p, const item *it)
{
    return it->is_block && it->fill && !it->filled &&
           !(it->fill_encoded && p->codec != CPR_CODEC_F32);
}

/* Deferred f32 rows: the caller's fill copies them into the item (once). */
static cpr_status fill_item(cpr_part *p, item *it)
{
    if (!item_to_fill(p, it))
        return CPR_OK;
    if (it->lazy && !it->data) {
        cpr_status st = lazy_memory(p, it);
        if (st)
            return st;
    }
    cpr_block_layout l;
    cpr_block_layout_of((uint32_t)it->n, it->dim, it->state_dim, 0, &l);
    cpr_status st = it->fill(it->fill_ctx, it->fill_first, it->n, it->dim, it->state_dim,
                             (float *)(it->data + l.values),
                             it->state_dim ? (float *)(it->data + l.state) : NULL);
    if (st)
        return cpr_fail(st, "filling rows [%zu, %zu) of table %u: %s", it->fill_first,
                        it->fill_first + it->n, it->table, cpr_errmsg());
    it->filled = 1;
    return CPR_OK;
}

static cpr_status send_item(cpr_part *p, item *it)
{
    if (it->is_blob)
        return cpri_node_writer_blob(p->writer, it->name, it->offset, it->data, it->len,
                                    cpr_crc32c(0, it->data, it->len));
    if (it->is_block) {
        cpr_status st = CPR_OK;
        if (it->fill_encoded && p->codec != CPR_CODEC_F32)
            return send_fill_encoded(p, it);
        st = fill_item(p, it); /* the caller's snapshot, copied out now, if not yet (P9) */
        if (st)
            return st;
        if (p->codec != CPR_CODEC_F32)
            return send_encoded(p, it);
        st = cpr_block_seal(it->data, it->table, (uint32_t)it->n, it->dim, it->state_dim, 0);
        return st ? st : cpri_node_writer_block(p->writer, it->data, it->len);
    }
    const uint64_t *ids = (const uint64_t *)it->data;
    const float *values = (const float *)(it->data + it->n * 8);
    const float *state = values + it->values_count;
    cpr_row_batch b = {it->table, it->n, ids, values, it->values_count,
                       it->state_count ? state : NULL, it->state_count, 0, 0};
    b.crc32c = cpr_crc32c_rows(b.ids, b.n, b.values, b.values_count, b.state, b.state_count);
    return cpri_node_writer_rows(p->writer, &b);
}

typedef struct begin_try {
    cpr_client *client;
    cpri_node *node;
    const cpr_part_spec *spec;
    int wait_ready; /* sent by the sender: wait for the channel (P6) */
    uint64_t lease; /* the writer's lease the node answered with */
    cpri_direct *direct; /* ask for direct writes (NULL: not) */
    char *segment;  /* the part's segment when the node agreed */
    uint64_t token; /* P11 */
} begin_try;

/* The client's direct writes, when asked for. */
static cpri_direct *direct_writes(const cpr_client *c)
{
    return c->opts.direct_writes ? c->direct : NULL;
}

static cpr_status begin_retry(cpr_client *c, begin_try *b);

/* Fill the queued items from `it` to `last` (P9), adding how many to
 * *filled. Only the sender takes items off the queue, and the caller only
 * appends after `tail`, so the items from `head` to the `tail` seen under
 * the lock stay put while they are filled without it. */
static cpr_status fill_queued(cpr_part *p, item *it, const item *last, size_t *filled)
{
    cpr_status st = CPR_OK;
    for (; it && st == CPR_OK; it = it == last ? NULL : it->next)
        if (item_to_fill(p, it) && (st = fill_item(p, it)) == CPR_OK)
            ++*filled;
    return st;
}

/* Under p->mu: queued rows wait to be filled and the part has not failed (P9). */
static int fill_due(const cpr_part *p)
{
    return p->to_fill && p->error == CPR_OK;
}

/* A sender's work on one part: Begin if the node has not begun it, then
 * send the queued items until closing and drained (P4). */
static void send_part(cpr_part *p)
{
    if (!p->begun) { /* cpr_client_begin_async: Begin here, off the caller's thread (P6) */
        begin_try b = {p->client, p->node, &p->deferred, 1, 0, direct_writes(p->client),
                       p->segment, p->begin_token};
        cpr_status st = begin_retry(p->client, &b);
        if (st) {
            set_error(p, st);
        } else {
            p->lease = b.lease;
            cpri_node_writer_set_lease(p->writer, b.lease);
            cpri_node_writer_set_segment(p->writer, b.direct, p->segment);
            p->begun = 1;
        }
    }
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while ((!p->head || p->hold) && !p->closing && !fill_due(p))
            pthread_cond_wait(&p->wake, &p->mu);
        if (fill_due(p)) { /* P9: copy out first, held or not */
            item *first = p->head;
            const item *last = p->tail;
            pthread_mutex_unlock(&p->mu);
            size_t filled = 0;
            cpr_status st = fill_queued(p, first, last, &filled);
            if (st)
                set_error(p, st);
            pthread_mutex_lock(&p->mu);
            p->to_fill -= filled;
            pthread_mutex_unlock(&p->mu);
            continue;
        }
        item *it = p->head;
        if (it) {
            p->head = it->next;
            if (!p->head)
                p->tail = NULL;
        }
        cpr_status failed = p->error;
        pthread_mutex_unlock(&p->mu);
        if (!it)
            return; /* closing and drained (P4) */
        if (failed == CPR_OK) {
            cpr_status st = send_item(p, it);
            if (st)
                set_error(p, st);
            pthread_mutex_lock(&p->mu);
            if (st == CPR_OK) {
                p->progress.rows_sent += it->n;
                p->progress.bytes_sent += it->bytes;
            }
            pthread_mutex_unlock(&p->mu);
        }
        item_free(p, it);
    }
}

static cpr_status queue_item(cpr_part *p, item *it)
{
    pthread_mutex_lock(&p->mu);
    cpr_status st = p->error;
    if (st == CPR_OK) {
        if (p->tail)
            p->tail->next = it;
        else
            p->head = it;
        p->tail = it;
        p->progress.rows_queued += it->n;
        p->progress.bytes_queued += it->bytes;
        p->to_fill += item_to_fill(p, it);
        pthread_cond_signal(&p->wake);
    }
    pthread_mutex_unlock(&p->mu);
    if (st) {
        item_free(p, it);
        return cpr_fail(st, "%s", p->errmsg);
    }
    return CPR_OK;
}

/* ---- the sender pool (P8) ------------------------------------------------------------- */

#define SENDERS_IDLE_MAX 64

struct cpri_sender {
    cpri_sender *next;       /* on the idle or the left list */
    cpr_client *client;
    pthread_t thread;
    pthread_cond_t wake;     /* `part` or `quit` set */
    cpr_part *part;          /* the part it sends; NULL while idle */
    int quit;                /* cpr_client_close: exit once idle */
};

static void *sender_main(void *arg)
{
    cpri_sender *s = arg;
    cpr_client *c = s->client;
    cpri_client_pin_thread(c); /* off the training cores, if asked */
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!s->part && !s->quit)
            pthread_cond_wait(&s->wake, &c->mu);
        cpr_part *p = s->part;
        if (!p)
            break; /* quit */
        pthread_mutex_unlock(&c->mu);
        send_part(p);
        /* Back to the pool (or out of it) before the part is given back, so
         * that a commit returns with its sender idle again. */
        pthread_mutex_lock(&c->mu);
        s->part = NULL;
        int leave = c->n_idle_senders >= SENDERS_IDLE_MAX;
        cpri_sender **list = leave ? &c->left_senders : &c->idle_senders;
        s->next = *list;
        *list = s;
        c->n_idle_senders += !leave;
        /* Give the part back (P4): from here on it may be freed. c->mu
         * before p->mu (P7's order). */
        pthread_mutex_lock(&p->mu);
        p->sent = 1;
        pthread_cond_broadcast(&p->given_back);
        pthread_mutex_unlock(&p->mu);
        if (leave)
            break;
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Join and free the senders in the list `gone` (linked by next). */
static void join_senders(cpri_sender *gone)
{
    while (gone) {
        cpri_sender *s = gone;
        gone = s->next;
        pthread_join(s->thread, NULL);
        pthread_cond_destroy(&s->wake);
        free(s);
    }
}

/* Hand `p` to an idle sender, or start one (P8). */
static cpr_status start_sender(cpr_client *c, cpr_part *p)
{
    pthread_mutex_lock(&c->mu);
    cpri_sender *gone = c->left_senders, *s = c->idle_senders;
    c->left_senders = NULL;
    if (s) {
        c->idle_senders = s->next;
        c->n_idle_senders--;
        s->part = p;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&c->mu);
    join_senders(gone);
    if (s)
        return CPR_OK;
    s = calloc(1, sizeof *s);
    if (!s)
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting the part's sender");
    s->client = c;
    s->part = p;
    pthread_cond_init(&s->wake, NULL);
    if (pthread_create(&s->thread, NULL, sender_main, s) != 0) {
        pthread_cond_destroy(&s->wake);
        free(s);
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "cannot start the part's sender thread");
    }
    pthread_setname_np(s->thread, "cpr-sender"); /* top -H; the tests count them */
    return CPR_OK;
}

void cpri_senders_stop(cpr_client *c)
{
    pthread_mutex_lock(&c->mu); /* every part is finished: every sender idle or left (P8) */
    cpri_sender *idle = c->idle_senders, *left = c->left_senders;
    c->idle_senders = c->left_senders = NULL;
    c->n_idle_senders = 0;
    for (cpri_sender *s = idle; s; s = s->next) {
        s->quit = 1;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&c->mu);
    join_senders(idle);
    join_senders(left);
}

/* ---- begin ------------------------------------------------------------------------------ */

static cpr_status begin_once(begin_try *b)
{
    return cpri_node_begin(b->node, b->spec, b->client->opts.call_timeout_s, b->wait_ready,
                           b->direct, b->token, &b->lease, b->segment);
}

/* P11: with its token a Begin is safe to send again also after a timeout
 * (the first may land later: the node then answers it with the same lease). */
static cpr_status begin_retry(cpr_client *c, begin_try *b)
{
    cpr_status st = begin_once(b);
    for (unsigned i = 0; (st == CPR_UNAVAILABLE || st == CPR_TIMEOUT) &&
                         cpri_client_backoff(c, i); i++)
        st = begin_once(b);
    return st;
}

static void part_free(cpr_part *p)
{
    free(p->enc);
    free(p->deferred_tables);
    for (size_t i = 0; i < p->n_blobs; i++)
        free(p->blob_names[i]);
    free(p->blob_names);
    free(p->tables);
    cpri_segment_index_free(&p->index);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->given_back);
    free(p);
}

static cpr_status part_new(cpr_client *c, const cpr_part_spec *spec, cpr_part **out)
{
    cpr_part *p = calloc(1, sizeof *p);
    if (!p)
        return cpr_fail(CPR_NO_MEMORY, "out of memory beginning a part");
    p->client = c;
    p->codec = (cpr_codec)spec->codec;
    p->hold = c->opts.defer_send;
    p->node = c->nodes[cpr_client_node_of(c, spec->id.job, spec->id.shard)];
    snprintf(p->job, sizeof p->job, "%s", spec->id.job);
    p->id = (cpr_part_id){p->job, spec->id.shard, spec->id.checkpoint};
    while (p->begin_token == 0) { /* P11: not 0 (none); best effort, 1 in 2^64 clashes */
        if (getrandom(&p->begin_token, sizeof p->begin_token, 0) != sizeof p->begin_token)
            p->begin_token = (uint64_t)(uintptr_t)p ^ (uint64_t)(cpri_now_s() * 1e9);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->given_back, NULL);
    p->tables = calloc(spec->n_tables + 1, sizeof *p->tables);
    if (!p->tables) {
        part_free(p);
        return cpr_fail(CPR_NO_MEMORY, "out of memory beginning a part");
    }
    for (size_t i = 0; i < spec->n_tables; i++)
        p->tables[i] = (schema){spec->tables[i].table, spec->tables[i].dim,
                                spec->tables[i].state_dim, spec->tables[i].rows};
    p->n_tables = spec->n_tables;
    *out = p;
    return CPR_OK;
}

static cpr_status check_spec(cpr_client *c, const cpr_part_spec *spec, cpr_part **out)
{
    if (!c || !spec || !out || !spec->id.job || (spec->n_tables && !spec->tables))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_begin: client, spec, spec->id.job, "
                        "spec->tables (when n_tables > 0) and out must not be NULL");
    if (!cpri_name_valid(spec->id.job))
        return cpr_fail(CPR_INVALID_ARGUMENT, "job name '%.64s' is not 1-%d characters of "
                        "[A-Za-z0-9._-]", spec->id.job, CPR_NAME_MAX);
    if (spec->codec > CPR_CODEC_INT4)
        return cpr_fail(CPR_INVALID_ARGUMENT, "codec %u: give 0-4 (f32, bf16, f16, int8, "
                        "int4; cpr/codec.h)", spec->codec);
    /* Here, not only on the node: an async part stages rows before its
     * Begin is answered, in blocks sized by these dims. */
    return cpri_check_part_tables(spec);
}

/* The part's writer and sender; on failure the part is freed (and, when the
 * node began it, aborted there). */
static cpr_status start_part(cpr_client *c, cpr_part *p, cpr_part **out)
{
    cpr_status st = cpri_node_writer_open(p->node, &p->id, c->opts.stream_timeout_s,
                                          &p->writer);
    if (st == CPR_OK) {
        cpri_node_writer_set_lease(p->writer, p->lease); /* 0 until an async Begin answers */
        cpri_node_writer_set_segment(p->writer, direct_writes(c), p->segment);
    }
    if (st == CPR_OK && (st = start_sender(c, p)) != CPR_OK)
        cpri_node_writer_close(p->writer, NULL);
    if (st) { /* begun on the node but unusable here: do not leave it open */
        char why[1024];
        snprintf(why, sizeof why, "%s", cpr_errmsg());
        if (p->begun)
            cpri_node_abort(p->node, &p->id, p->lease, c->opts.call_timeout_s);
        part_free(p);
        return cpr_fail(st, "%s", why);
    }
    pthread_mutex_lock(&c->mu);
    p->next_open = c->parts;
    c->parts = p;
    pthread_mutex_unlock(&c->mu);
    *out = p;
    return CPR_OK;
}

cpr_status cpr_client_begin(cpr_client *c, const cpr_part_spec *spec, cpr_part **out)
{
    cpr_status st = check_spec(c, spec, out);
    cpr_part *p = NULL;
    if (st == CPR_OK)
        st = part_new(c, spec, &p);
    if (st)
        return st;
    begin_try b = {c, p->node, spec, 0, 0, direct_writes(c), p->segment, p->begin_token};
    st = begin_retry(c, &b);
    if (st) {
        part_free(p);
        return st;
    }
    p->lease = b.lease;
    p->begun = 1;
    return start_part(c, p, out);
}

cpr_status cpr_client_begin_async(cpr_client *c, const cpr_part_spec *spec, cpr_part **out)
{
    cpr_status st = check_spec(c, spec, out);
    if (st == CPR_OK && spec->num_shards == 0)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "num_shards is 0: set it to the job's shard count "
                      "(at least 1)");
    else if (st == CPR_OK && spec->id.shard >= spec->num_shards)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "shard %u is not below num_shards %u",
                      spec->id.shard, spec->num_shards);
    cpr_part *p = NULL;
    if (st == CPR_OK)
        st = part_new(c, spec, &p);
    if (st)
        return st;
    /* The sender sends this Begin before anything else (P6): a copy, since
     * the caller's spec is borrowed for this call only. */
    p->deferred = *spec;
    p->deferred.id = p->id;
    p->deferred_tables = malloc((spec->n_tables + 1) * sizeof *p->deferred_tables);
    if (!p->deferred_tables) {
        part_free(p);
        return cpr_fail(CPR_NO_MEMORY, "out of memory beginning a part");
    }
    if (spec->n_tables)
        memcpy(p->deferred_tables, spec->tables, spec->n_tables * sizeof *spec->tables);
    p->deferred.tables = p->deferred_tables;
    return start_part(c, p, out);
}

/* ---- puts --------------------------------------------------------------------------------- */

static const schema *find_table(const cpr_part *p, uint32_t table)
{
    for (size_t i = 0; i < p->n_tables; i++)
        if (p->tables[i].table == table)
            return &p->tables[i];
    return NULL;
}

/* a * b, or SIZE_MAX when it does not fit. */
static size_t mul_size(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

static cpr_status check_table(const cpr_part *p, uint32_t table, const schema **t)
{
    *t = find_table(p, table);
    if (!*t)
        return cpr_fail(CPR_INVALID_ARGUMENT, "table %u is not in the schema of part "
                        "(%s, shard %u, checkpoint %llu): declare it at begin", table,
                        p->job, p->id.shard, (unsigned long long)p->id.checkpoint);
    return CPR_OK;
}

static cpr_status check_batch(const cpr_part *p, const cpr_row_batch *b, const schema **t)
{
    cpr_status st = check_table(p, b->table, t);
    if (st)
        return st;
    size_t want_values = mul_size(b->n, (*t)->dim), want_state = mul_size(b->n, (*t)->state_dim);
    if (b->n && (want_values == SIZE_MAX || want_state == SIZE_MAX))
        return cpr_fail(CPR_INVALID_ARGUMENT, "row batch of table %u: %zu rows is too many",
                        b->table, b->n);
    if (b->n && b->values_count == want_values && b->state_count == want_state &&
        (!b->values || (b->state_count && !b->state)))
        return cpr_fail(CPR_INVALID_ARGUMENT, "row batch of table %u: %s is NULL (its count, "
                        "%zu, is right)", b->table, !b->values ? "values" : "state",
                        !b->values ? b->values_count : b->state_count);
    if (b->n && (b->values_count != want_values || b->state_count != want_state))
        return cpr_fail(CPR_INVALID_ARGUMENT, "row batch of table %u: expected %zu ids, "
                        "%zu values (n x dim %u) and %zu state values (n x state_dim %u), "
                        "got values_count %zu, state_count %zu", b->table, b->n,
                        b->n * (size_t)(*t)->dim, (*t)->dim, b->n * (size_t)(*t)->state_dim,
                        (*t)->state_dim, b->values_count, b->state_count);
    return CPR_OK;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* An id of ids[0..n) found twice (*dup), by a sorted copy: 1, 0 if none,
 * -1 out of memory. Only for batches that do not ascend (the store sorts
 * those anyway); an ascending batch has none. */
static int find_duplicate(const uint64_t *ids, size_t n, uint64_t *dup)
{
    uint64_t *sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return -1;
    memcpy(sorted, ids, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, u64_cmp);
    int found = 0;
    for (size_t i = 1; i < n && !found; i++)
        if (sorted[i] == sorted[i - 1]) {
            *dup = sorted[i];
            found = 1;
        }
    free(sorted);
    return found;
}

/* Every id below the table's row count and none twice (what the store would
 * refuse at commit, refused here, before anything is queued); 1 if they
 * ascend. */
static cpr_status check_ids(const cpr_part *p, const rows_src *r, const schema *t, int *ascend)
{
    *ascend = 1;
    if (!r->ids) {
        if (r->n && (r->range_begin >= t->rows || t->rows - r->range_begin < r->n))
            return cpr_fail(CPR_INVALID_ARGUMENT, "rows [%llu, %llu) of table %u: the table "
                            "has %llu rows (part %s/%u/%llu)",
                            (unsigned long long)r->range_begin,
                            (unsigned long long)(r->range_begin + r->n), r->table,
                            (unsigned long long)t->rows, p->job, p->id.shard,
                            (unsigned long long)p->id.checkpoint);
        return CPR_OK;
    }
    if (r->n == 0)
        return CPR_OK;
    /* One pass without a branch per id (a FULL save queues 10 M); the
     * first bad id is looked for only when there is one. */
    uint64_t lo = r->ids[0], hi = r->ids[0];
    int unordered = 0;
    for (size_t i = 1; i < r->n; i++) {
        uint64_t id = r->ids[i];
        lo = id < lo ? id : lo;
        hi = id > hi ? id : hi;
        unordered |= id <= r->ids[i - 1];
    }
    *ascend = !unordered;
    uint64_t dup = 0;
    /* (deferred rows must ascend: put_src refuses them first, by that rule) */
    int twice = unordered && !r->fill ? find_duplicate(r->ids, r->n, &dup) : 0;
    if (twice < 0)
        return cpr_fail(CPR_NO_MEMORY, "out of memory checking %zu row ids", r->n);
    if (twice)
        return cpr_fail(CPR_INVALID_ARGUMENT, "row id %llu appears twice in one batch of table "
                        "%u (ids within a batch must be distinct; part %s/%u/%llu)",
                        (unsigned long long)dup, r->table, p->job, p->id.shard,
                        (unsigned long long)p->id.checkpoint);
    if (hi < t->rows && !(r->by_id && lo < r->row_base))
        return CPR_OK;
    for (size_t i = 0; i < r->n; i++) {
        if (r->ids[i] >= t->rows || (r->by_id && r->ids[i] < r->row_base))
            return cpr_fail(CPR_INVALID_ARGUMENT, "row id %llu (at %zu) of table %u is %s "
                            "(part %s/%u/%llu)", (unsigned long long)r->ids[i], i, r->table,
                            r->ids[i] >= t->rows ? "not below the table's rows in the schema"
                                                 : "below the gather's row_base",
                            p->job, p->id.shard, (unsigned long long)p->id.checkpoint);
    }
    return CPR_OK;
}

/* Rows [done, done + k) of r into a staged row block. */
static cpr_status stage_block(cpr_part *p, const rows_src *r, const schema *t, size_t done,
                              size_t k)
{
    cpr_status st = CPR_OK;
    size_t bytes = cpr_block_size((uint32_t)k, t->dim, t->state_dim, 0);
    if (bytes == 0) /* check_spec's dims make this unreachable */
        return cpr_fail(CPR_INTERNAL, "%zu rows of table %u (dim %u, state_dim %u) make no "
                        "valid block", k, t->table, t->dim, t->state_dim);
    cpr_block_layout l;
    cpr_block_layout_of((uint32_t)k, t->dim, t->state_dim, 0, &l);
    /* Rows the caller encodes into the sender's buffer (send_fill_encoded)
     * need only their ids staged: not the f32 values they never occupy. */
    int ids_only = r->fill_encoded && p->codec != CPR_CODEC_F32;
    size_t staged = ids_only ? l.ids + k * 8 : bytes;
    /* Deferred f32 rows: their block's memory is the sender's to take (P10);
     * the ids wait inline, or in the caller's array when it keeps it. */
    int lazy = r->fill && !ids_only;
    size_t inline_ids = lazy && !(r->ids && r->ids_kept) ? k * 8 : 0;
    item *it = item_new(p, staged, lazy, inline_ids, &st);
    if (!it)
        return st;
    if (!it->lazy) /* an idle arena item took the block at once (P10) */
        lazy = 0, inline_ids = 0;
    if (ids_only)
        it->bytes = cpr_block_size_codec((uint32_t)k, t->dim, t->state_dim, 0, p->codec);
    it->is_block = 1;
    it->table = r->table;
    it->dim = t->dim;
    it->state_dim = t->state_dim;
    it->n = k;
    it->len = staged;
    uint64_t *ids = lazy ? (uint64_t *)(void *)it->inline_data : (uint64_t *)(it->data + l.ids);
    float *values = NULL, *state = NULL; /* an ids-only item has no room for them */
    if (!r->fill) {
        values = (float *)(it->data + l.values);
        state = (float *)(it->data + l.state);
    }
    size_t vrow = (size_t)t->dim * 4, srow = (size_t)t->state_dim * 4;
    if (lazy) /* the sender copies them into the block (P10) */
        it->ids_src = inline_ids ? ids : r->ids + done;
    if (!lazy || inline_ids) { /* else the caller's, kept: nothing to copy now */
        if (r->ids)
            memcpy(ids, r->ids + done, k * 8);
        else
            for (size_t i = 0; i < k; i++)
                ids[i] = r->range_begin + done + i;
    }
    if (r->fill) { /* deferred: the sender fills the values (send_item) */
        it->fill = r->fill;
        it->fill_encoded = r->fill_encoded;
        it->fill_ctx = r->fill_ctx;
        it->fill_first = done;
    } else if (!r->by_id && r->vstride == t->dim) { /* a dense batch: one copy per array */
        memcpy(values, r->values + done * t->dim, k * vrow);
        if (t->state_dim)
            memcpy(state, r->state + done * t->state_dim, k * srow);
    } else { /* a gather from the caller's table */
        /* Runs of consecutive ids are contiguous in a table whose stride is
         * the row (a FULL save, a range, the dense stretches of a DELTA):
         * one copy per run instead of one per row. */
        int packed_v = r->vstride == t->dim, packed_s = r->sstride == t->state_dim;
        for (size_t i = 0; i < k;) {
            size_t run = 1;
            if (i + PREFETCH_ROWS < k) { /* scattered rows: keep DRAM misses in flight */
                const char *ahead = (const char *)src_values(r, done + i + PREFETCH_ROWS);
                for (size_t b = 0; b < vrow; b += 64)
                    __builtin_prefetch(ahead + b);
                if (t->state_dim)
                    __builtin_prefetch(src_state(r, done + i + PREFETCH_ROWS));
            }
            if (packed_v || packed_s)
                while (i + run < k && src_id(r, done + i + run) == src_id(r, done + i) + run)
                    run++;
            if (run == 1) {
                cpri_copy_floats(values + i * t->dim, src_values(r, done + i), t->dim);
                if (t->state_dim)
                    cpri_copy_floats(state + i * t->state_dim, src_state(r, done + i),
                                     t->state_dim);
                i++;
                continue;
            }
            if (packed_v) {
                memcpy(values + i * t->dim, src_values(r, done + i), run * vrow);
            } else {
                for (size_t j = 0; j < run; j++)
                    memcpy(values + (i + j) * t->dim, src_values(r, done + i + j), vrow);
            }
            if (t->state_dim && packed_s) {
                memcpy(state + i * t->state_dim, src_state(r, done + i), run * srow);
            } else if (t->state_dim) {
                for (size_t j = 0; j < run; j++)
                    memcpy(state + (i + j) * t->state_dim, src_state(r, done + i + j), srow);
            }
            i += run;
        }
    }
    return queue_item(p, it);
}

/* Rows [done, done + k) of r, ids in any order, as an ids/values/state item. */
static cpr_status stage_rows(cpr_part *p, const rows_src *r, const schema *t, size_t done,
                             size_t k)
{
    cpr_status st = CPR_OK;
    size_t row_bytes = 8 + 4 * ((size_t)t->dim + t->state_dim);
    item *it = item_new(p, k * row_bytes, 0, 0, &st);
    if (!it)
        return st;
    it->table = r->table;
    it->n = k;
    it->values_count = k * t->dim;
    it->state_count = k * t->state_dim;
    uint64_t *ids = (uint64_t *)it->data;
    float *values = (float *)(it->data + k * 8), *state = values + it->values_count;
    for (size_t i = 0; i < k; i++) {
        ids[i] = src_id(r, done + i);
        memcpy(values + i * t->dim, src_values(r, done + i), (size_t)t->dim * 4);
        if (t->state_dim)
            memcpy(state + i * t->state_dim, src_state(r, done + i), (size_t)t->state_dim * 4);
    }
    return queue_item(p, it);
}

/* Stage r (checked) in items of about message_bytes: row blocks when the ids
 * ascend, else ids/values/state items that the store sorts. */
static cpr_status put_src(cpr_part *p, const rows_src *r, const schema *t)
{
    int ascend;
    cpr_status st = check_ids(p, r, t, &ascend);
    if (st == CPR_OK && r->fill && !ascend)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "deferred rows of table %u: ids must be strictly "
                      "ascending (they are staged as row blocks)", r->table);
    if (st || r->n == 0)
        return st;
    size_t row_bytes = 8 + 4 * ((size_t)t->dim + t->state_dim);
    size_t room = p->client->opts.message_bytes;
    size_t per_item;
    if (ascend) {
        room = room > CPR_BLOCK_HEADER_BYTES ? room - CPR_BLOCK_HEADER_BYTES : 0;
        size_t max_rows = (CPR_BLOCK_MAX_BYTES - 64) / row_bytes;
        per_item = room / row_bytes;
        per_item = per_item < 1 ? 1 : per_item > max_rows ? max_rows : per_item;
    } else {
        per_item = room / row_bytes;
        per_item = per_item < 1 ? 1 : per_item > MAX_ITEM_ROWS ? MAX_ITEM_ROWS : per_item;
    }
    int queued = 0;
    for (size_t done = 0; st == CPR_OK && done < r->n; done += per_item) {
        size_t k = r->n - done < per_item ? r->n - done : per_item;
        st = ascend ? stage_block(p, r, t, done, k) : stage_rows(p, r, t, done, k);
        queued |= st == CPR_OK;
    }
    if (st && queued)
        set_error(p, st); /* part of the rows is queued: the part is incomplete */
    return st;
}

cpr_status cpr_part_put_rows(cpr_part *p, const cpr_row_batch *b)
{
    const schema *t;
    if (!p || !b)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_part_put_rows: part and batch must not be NULL");
    cpr_status st = check_batch(p, b, &t);
    if (st)
        return st;
    rows_src r = {b->table, b->n, b->ids, b->range_begin, 0, 0, b->values, b->state,
                  t->dim, t->state_dim, NULL, NULL, NULL, 0};
    return put_src(p, &r, t);
}

cpr_status cpr_part_put_gather(cpr_part *p, const cpr_gather *g)
{
    const schema *t;
    if (!p || !g)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_part_put_gather: part and gather must not be "
                        "NULL");
    cpr_status st = check_table(p, g->table, &t);
    if (st)
        return st;
    if (g->n && (!g->values || g->values_stride < t->dim ||
                 (t->state_dim && (!g->state || g->state_stride < t->state_dim))))
        return cpr_fail(CPR_INVALID_ARGUMENT, "gather of table %u: values (stride >= dim %u) "
                        "and, when state_dim %u > 0, state (stride >= state_dim) are needed; "
                        "got values %s stride %zu, state %s stride %zu", g->table, t->dim,
                        t->state_dim, g->values ? "set" : "NULL", g->values_stride,
                        g->state ? "set" : "NULL", g->state_stride);
    if (!g->ids && g->n && g->range_begin < g->row_base)
        return cpr_fail(CPR_INVALID_ARGUMENT, "gather of table %u: range_begin %llu is below "
                        "row_base %llu", g->table, (unsigned long long)g->range_begin,
                        (unsigned long long)g->row_base);
    rows_src r = {g->table, g->n, g->ids, g->range_begin, 1, g->row_base, g->values, g->state,
                  g->values_stride, g->state_stride, NULL, NULL, NULL, 0};
    return put_src(p, &r, t);
}

cpr_status cpr_part_put_deferred(cpr_part *p, const cpr_deferred_rows *d)
{
    const schema *t;
    if (!p || !d || !d->fill || (d->n && !d->ids))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_part_put_deferred: part, rows, their ids "
                        "and a fill function are needed");
    cpr_status st = check_table(p, d->table, &t);
    if (st)
        return st;
    rows_src r = {.table = d->table, .n = d->n, .ids = d->ids, .fill = d->fill,
                  .fill_encoded = d->fill_encoded, .fill_ctx = d->ctx,
                  .ids_kept = d->ids_kept};
    return put_src(p, &r, t);
}

static cpr_status claim_blob_name(cpr_part *p, const char *name)
{
    if (!name || !cpri_name_valid(name))
        return cpr_fail(CPR_INVALID_ARGUMENT, "blob name '%.64s' is not 1-%d characters of "
                        "[A-Za-z0-9._-]", name ? name : "(null)", CPR_NAME_MAX);
    for (size_t i = 0; i < p->n_blobs; i++)
        if (strcmp(p->blob_names[i], name) == 0)
            return cpr_fail(CPR_INVALID_ARGUMENT, "blob %s was already put in this part: "
                            "put each blob once, whole", name);
    char **grown = realloc(p->blob_names, (p->n_blobs + 1) * sizeof *grown);
    char *copy = strdup(name);
    if (grown)
        p->blob_names = grown;
    if (!grown || !copy) {
        free(copy);
        return cpr_fail(CPR_NO_MEMORY, "out of memory");
    }
    p->blob_names[p->n_blobs++] = copy;
    return CPR_OK;
}

cpr_status cpr_part_put_blob(cpr_part *p, const char *name, const void *data, size_t len)
{
    if (!p || (len && !data))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_part_put_blob: part and data must not be NULL");
    cpr_status st = claim_blob_name(p, name);
    size_t piece = p->client->opts.message_bytes;
    int queued = 0;
    /* An empty blob still sends one (empty) chunk so that it exists. */
    for (size_t off = 0; st == CPR_OK && (off < len || (len == 0 && off == 0)); off += piece) {
        size_t k = len - off < piece ? len - off : piece;
        item *it = item_new(p, k, 0, 0, &st);
        if (!it)
            break;
        it->is_blob = 1;
        snprintf(it->name, sizeof it->name, "%s", name);
        it->offset = off;
        it->len = k;
        if (k)
            memcpy(it->data, (const uint8_t *)data + off, k);
        st = queue_item(p, it);
        if (st == CPR_OK && off + k < len)
            queued = 1;
        if (len == 0)
            break;
    }
    if (st && queued)
        set_error(p, st); /* part of the blob is queued: the part is incomplete */
    if (st == CPR_OK)
        p->blob_bytes += len;
    return st;
}

void cpr_part_progress_get(const cpr_part *p, cpr_part_progress *out)
{
    if (!out)
        return;
    if (!p) {
        *out = (cpr_part_progress){.error = CPR_INVALID_ARGUMENT};
        return;
    }
    cpr_part *mp = (cpr_part *)p; /* the mutex, not the part, changes */
    pthread_mutex_lock(&mp->mu);
    *out = p->progress;
    out->error = p->error;
    pthread_mutex_unlock(&mp->mu);
}

/* ---- commit and abort ----------------------------------------------------------------------- */

/* Stop the sender after the queue drains (or at once, discarding, when
 * `discard`), join it and close the writer. Returns the part's outcome. */
static cpr_status finish_sender(cpr_part *p, int discard)
{
    pthread_mutex_lock(&p->mu);
    p->closing = 1;
    if (discard && p->error == CPR_OK) {
        p->error = CPR_FAILED_PRECONDITION;
        snprintf(p->errmsg, sizeof p->errmsg, "the part was aborted");
    }
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
    cpr_status st = CPR_OK;
    if (!p->stopped) { /* P4: waited for once */
        pthread_mutex_lock(&p->mu);
        while (!p->sent)
            pthread_cond_wait(&p->given_back, &p->mu);
        pthread_mutex_unlock(&p->mu);
        st = cpri_node_writer_close(p->writer, discard ? NULL : &p->index);
        p->writer = NULL;
        p->stopped = 1;
    }
    if (p->error)
        return cpr_fail(p->error, "%s", p->errmsg);
    return st;
}
static void unlink_part(cpr_part *p)
{
    cpr_client *c = p->client;
    pthread_mutex_lock(&c->mu);
    for (cpr_part **pp = &c->parts; *pp; pp = &(*pp)->next_open)
        if (*pp == p) {
            *pp = p->next_open;
            break;
        }
    pthread_mutex_unlock(&c->mu);
}

/* After a lost answer: is the part committed on its node? 1 yes, 0 no (open
 * or gone), -1 cannot tell (the node does not answer). */
typedef struct state_try {
    cpr_part *p;
    cpr_part_info *parts;
    size_t n;
} state_try;

static cpr_status list_part_once(void *ctx)
{
    state_try *t = ctx;
    return cpri_node_list(t->p->node, t->p->job, t->p->client->opts.call_timeout_s, &t->parts,
                         &t->n);
}

static int committed_on_node(cpr_part *p)
{
    state_try t = {p, NULL, 0};
    cpr_status st = cpri_client_retry(p->client, list_part_once, &t);
    int committed = st == CPR_OK || st == CPR_NOT_FOUND ? 0 : -1;
    /* Committed with the rows this writer sent: another writer's commit of
     * the same id is not this one's. */
    for (size_t i = 0; st == CPR_OK && i < t.n; i++)
        if (t.parts[i].shard == p->id.shard && t.parts[i].checkpoint == p->id.checkpoint)
            committed = t.parts[i].committed && t.parts[i].rows == p->progress.rows_sent;
    free(t.parts);
    return committed;
}

/*
 * Commit, and when its answer is lost (UNAVAILABLE, TIMEOUT) find out what
 * happened rather than guess: the part may be committed although the call
 * failed. On failure the part is aborted; if the daemon refuses the abort
 * because the commit is still going on or done, its state decides.
 */
cpr_status cpr_part_commit(cpr_part **handle)
{
    if (!handle || !*handle)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_part_commit: no part (the handle is NULL: "
                        "it was already committed or aborted, which freed it)");
    cpr_part *p = *handle;
    *handle = NULL;
    cpr_client *c = p->client;
    if (p->orphaned) { /* P5 */
        unlink_part(p);
        cpr_status st = cpr_fail(CPR_FAILED_PRECONDITION, "commit of (%s, shard %u, "
                                 "checkpoint %llu): the part was aborted by id, not committed",
                                 p->job, p->id.shard, (unsigned long long)p->id.checkpoint);
        part_free(p);
        return st;
    }
    char why[1024] = "";
    int state = 0, sent = 0; /* committed_on_node's answer; Commit was sent */
    unlink_part(p);
    cpr_status st = finish_sender(p, 0);
    if (st == CPR_OK) {
        sent = 1;
        st = cpri_node_commit(p->node, &p->id, p->lease, p->progress.rows_sent, p->n_blobs,
                              p->blob_bytes, &p->index, c->opts.stream_timeout_s);
        if (st == CPR_UNAVAILABLE || st == CPR_TIMEOUT) {
            snprintf(why, sizeof why, "%s", cpr_errmsg());
            state = committed_on_node(p);
            if (state == 1)
                st = CPR_OK;
        }
    }
    if (st) {
        if (!why[0])
            snprintf(why, sizeof why, "%s", cpr_errmsg());
        cpr_status ab = p->begun ? cpri_node_abort(p->node, &p->id, p->lease,
                                                   c->opts.call_timeout_s)
                                 : CPR_NOT_FOUND; /* P6: not ours to abort */
        if (ab == CPR_FAILED_PRECONDITION) /* committed, or being committed */
            state = committed_on_node(p);
        if (state == 1)
            st = CPR_OK;
        else if (!sent || ab == CPR_OK || ab == CPR_NOT_FOUND)
            cpr_fail(st, "commit of (%s, shard %u, checkpoint %llu) failed, the part is "
                     "not committed: %s", p->job, p->id.shard, (unsigned long long)p->id.checkpoint,
                     why);
        else
            cpr_fail(st, "commit of (%s, shard %u, checkpoint %llu) failed and its outcome is "
                     "unknown (the node does not answer; list the job to see whether it "
                     "committed): %s", p->job, p->id.shard,
                     (unsigned long long)p->id.checkpoint, why);
    }
    part_free(p);
    return st;
}

static cpr_status part_abort(cpr_part *p)
{
    unlink_part(p);
    if (p->orphaned) { /* P5: already stopped; the node's part is not ours any more */
        part_free(p);
        return CPR_OK;
    }
    finish_sender(p, 1);
    cpr_status st = p->begun ? cpri_node_abort(p->node, &p->id, p->lease,
                                               p->client->opts.call_timeout_s)
                             : CPR_OK; /* P6: the node never began it */
    if (st == CPR_NOT_FOUND)
        st = CPR_OK; /* already gone (e.g. reaped by the daemon): nothing is left */
    part_free(p);
    return st;
}

cpr_status cpr_part_abort(cpr_part **handle)
{
    if (!handle || !*handle)
        return CPR_OK; /* nothing left to abort */
    cpr_part *p = *handle;
    *handle = NULL;
    return part_abort(p);
}

typedef struct abort_try {
    cpr_client *client;
    cpri_node *node;
    cpr_part_id id;
} abort_try;

static cpr_status abort_once(void *ctx)
{
    abort_try *a = ctx;
    return cpri_node_abort(a->node, &a->id, 0, a->client->opts.call_timeout_s); /* by id */
}

cpr_status cpr_client_abort(cpr_client *c, const char *job, uint32_t shard, uint64_t checkpoint)
{
    if (!c || !job)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_abort: client and job must not be "
                        "NULL");
    if (!cpri_name_valid(job))
        return cpr_fail(CPR_INVALID_ARGUMENT, "job name '%.64s' is not 1-%d characters of "
                        "[A-Za-z0-9._-]", job, CPR_NAME_MAX);
    /* This client's own handle for the part, if any, is stopped first (P5):
     * its queued rows are dropped and its sender joined before the node
     * forgets the part, so none of them can land in a part begun later
     * under the same id. The handle stays valid; its commit then fails. */
    pthread_mutex_lock(&c->mu);
    cpr_part *mine = c->parts;
    while (mine && !(mine->id.shard == shard && mine->id.checkpoint == checkpoint &&
                     strcmp(mine->job, job) == 0))
        mine = mine->next_open;
    pthread_mutex_unlock(&c->mu);
    if (mine)
        finish_sender(mine, 1);
    abort_try a = {c, c->nodes[cpr_client_node_of(c, job, shard)], {job, shard, checkpoint}};
    cpr_status st = cpri_client_retry(c, abort_once, &a);
    /* The node's part is gone (or committed by another writer): it is not
     * this handle's any more (P5). After a failed abort the handle keeps its
     * part, so that its own abort still reaches the node. */
    if (mine && (st == CPR_OK || st == CPR_NOT_FOUND || st == CPR_FAILED_PRECONDITION))
        mine->orphaned = 1;
    if (st == CPR_NOT_FOUND)
        st = CPR_OK; /* never begun, or already gone: nothing of it is left */
    return st;
}

void cpri_parts_abort_all(cpr_client *c)
{
    for (;;) {
        pthread_mutex_lock(&c->mu);
        cpr_part *p = c->parts;
        pthread_mutex_unlock(&c->mu);
        if (!p)
            return;
        part_abort(p);
    }
}
