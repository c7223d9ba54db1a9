/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Restores over several nodes: a merge of the nodes' answers by each row's
 * version (read.c merges whenever more than one node is asked).
 *
 * Shards own disjoint rows within one sharding, and a shard's parts live on
 * one node, so without a resharding a row is on one node and the nodes'
 * answers are disjoint. After a resharding that moved rows between shards on
 * different nodes, a row can have versions on two nodes: its old shard's
 * (written before) and its new shard's (written after, by a partial save or
 * not yet at all). Each node answers with its newest version, and only the
 * versions tell which is the newest of all. The parts a node lists do not
 * always show such a history (retention keeps old shards' rows in folds,
 * which are not listed), so the client does not try to tell.
 *
 * M1  Every asked node streams the query's rows with their versions
 *     (cpri_node_restore_versions: ascending (table, row), each row once),
 *     in a thread of its own, into a queue of at most QUEUE_BATCHES batches.
 *     The caller's thread takes the smallest (table, row) of the queues'
 *     heads; for a row several heads hold, the highest version is delivered
 *     and the others are dropped (equal versions: the first asked node's).
 *     So fn sees each row once, its newest
 *     version at or below the state restored over all nodes, in ascending
 *     (table, row) order, in batches of one table.
 * M2  Memory is bounded: QUEUE_BATCHES batches a node (each at most the
 *     query's batch size) and one output batch. A node whose rows come later
 *     in the order is not read meanwhile: its stream waits in gRPC's flow
 *     control (the daemon waits up to its --idle-part-timeout-s for a client
 *     that does not read).
 * M3  Any failure stops everything: a node's error reaches the caller once
 *     its queue is drained (the rows before it are delivered, as a restore
 *     node after node would), fn's error or the merge's own ends the merge
 *     at once. Stopping sets `stop` (waking producers that wait for room)
 *     and fires each producer's cancel (ending a stream that waits for a
 *     message: a hung node does not hold the call), and every producer is
 *     joined before the call returns. A producer retries on CPR_UNAVAILABLE
 *     while it has queued nothing and the merge has not stopped, as
 *     restore_node does.
 * M4  A node that holds none of the job (CPR_NOT_FOUND with no row) counts
 *     as missing, not as an error, as in a restore node after node.
 * M5  A daemon older than the versions (it answers without them) fails the
 *     merge before any row is delivered (every head is read before the
 *     first row goes out); *old_daemon says so, and read.c then restores
 *     node after node if the job shows no resharding.
 * M6  Every stream lives as long as the merge, so each gets
 *     stream_timeout_s times the number of nodes asked: the time the same
 *     restore had node after node. Versions are checked: each is a
 *     checkpoint at or below the state restored.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel.h"
#include "client_internal.h"
#include "cpr/block.h"
#include "cpr/crc32c.h"
#include "cpr_common.h"

#define QUEUE_BATCHES 4
#define DEFAULT_BATCH_ROWS 16384
#define DEFAULT_BATCH_BYTES ((size_t)3 << 20)

typedef struct mbatch {
    struct mbatch *next;
    uint32_t table, dim, state_dim;
    size_t n;
    uint64_t *ids, *versions;
    float *values, *state;
} mbatch;

struct merge;

typedef struct mnode {
    struct merge *m;
    cpri_node *node;
    cpri_rpc_cancel *cancel;   /* ends its stream when the merge stops (M3) */
    pthread_t thread;
    int started;
    int no_versions;           /* the node's daemon sends no versions (M5) */
    /* under m->mu */
    mbatch *head, *tail;
    size_t queued;
    int done;
    cpr_status st;
    uint64_t rows;             /* rows the node answered */
    char err[1024];
    /* the consumer's */
    mbatch *cur;
    size_t pos;
    int finished, missing;
    uint32_t last_table;
    uint64_t last_row;
    int any;
} mnode;

typedef struct merge {
    cpr_client *c;
    const cpr_restore_query *q;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    double timeout_s;          /* each stream's deadline (M6) */
    mnode *nodes;
    size_t n;
} merge;

static void batch_free(mbatch *b)
{
    if (b) {
        free(b->ids);
        free(b);
    }
}

/* A copy of what a node sent, queued for the consumer (M2: waits for room). */
static cpr_status enqueue(void *ctx, const cpr_row_batch *b, const uint64_t *versions)
{
    mnode *p = ctx;
    merge *m = p->m;
    if (b->n == 0)
        return CPR_OK;
    for (size_t i = 0; i < b->n; i++) /* a version is a checkpoint of the state asked */
        if (versions[i] == 0 || versions[i] > m->q->as_of)
            return cpr_fail(CPR_INTERNAL, "%s answered row %llu of table %u as of checkpoint "
                            "%llu, for a restore as of %llu", cpri_node_name(p->node),
                            (unsigned long long)b->ids[i], b->table,
                            (unsigned long long)versions[i], (unsigned long long)m->q->as_of);
    uint32_t dim = (uint32_t)(b->values_count / b->n), sdim = (uint32_t)(b->state_count / b->n);
    mbatch *q = calloc(1, sizeof *q);
    size_t words = 2 * b->n, floats = b->values_count + b->state_count;
    if (q)
        q->ids = malloc(words * 8 + floats * 4 + 1);
    if (!q || !q->ids) {
        free(q);
        return cpr_fail(CPR_NO_MEMORY, "out of memory queueing %zu restored rows", b->n);
    }
    q->table = b->table;
    q->dim = dim;
    q->state_dim = sdim;
    q->n = b->n;
    q->versions = q->ids + b->n;
    q->values = (float *)(q->ids + words);
    q->state = q->values + b->values_count;
    memcpy(q->ids, b->ids, b->n * 8);
    memcpy(q->versions, versions, b->n * 8);
    memcpy(q->values, b->values, b->values_count * 4);
    if (b->state_count)
        memcpy(q->state, b->state, b->state_count * 4);
    pthread_mutex_lock(&m->mu);
    while (p->queued >= QUEUE_BATCHES && !m->stop)
        pthread_cond_wait(&m->cv, &m->mu);
    int stop = m->stop;
    if (!stop) {
        if (p->tail)
            p->tail->next = q;
        else
            p->head = q;
        p->tail = q;
        p->queued++;
        pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    if (stop) {
        batch_free(q);
        return cpr_fail(CPR_FAILED_PRECONDITION, "the merge of the nodes' rows stopped");
    }
    return CPR_OK;
}

static void *producer(void *arg)
{
    mnode *p = arg;
    merge *m = p->m;
    uint64_t rows = 0;
    cpr_status st = CPR_OK;
    int no_versions = 0;
    for (unsigned attempt = 0;;) {
        pthread_mutex_lock(&m->mu);
        int stop = m->stop;
        pthread_mutex_unlock(&m->mu);
        if (stop) /* also after a pause: no new stream once stopped */
            break;
        uint64_t r = 0, b = 0;
        st = cpri_node_restore_versions(p->node, m->q, m->timeout_s, p->cancel, enqueue, p, &r,
                                        &b, &no_versions);
        rows += r;
        if (st != CPR_UNAVAILABLE || rows || !cpri_client_backoff(m->c, attempt++))
            break;
    }
    pthread_mutex_lock(&m->mu);
    p->no_versions = no_versions;
    p->st = st;
    p->rows = rows;
    if (st)
        snprintf(p->err, sizeof p->err, "%s", cpr_errmsg());
    p->done = 1;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* Make p->cur hold p's next row, or mark p finished. */
static cpr_status advance(merge *m, mnode *p)
{
    while (!p->finished && (!p->cur || p->pos == p->cur->n)) {
        batch_free(p->cur);
        p->cur = NULL;
        p->pos = 0;
        pthread_mutex_lock(&m->mu);
        while (!p->head && !p->done)
            pthread_cond_wait(&m->cv, &m->mu);
        if (p->head) {
            p->cur = p->head;
            p->head = p->cur->next;
            if (!p->head)
                p->tail = NULL;
            p->queued--;
            pthread_cond_broadcast(&m->cv);
            pthread_mutex_unlock(&m->mu);
            continue;
        }
        cpr_status st = p->st;
        uint64_t rows = p->rows;
        pthread_mutex_unlock(&m->mu);
        p->finished = 1;
        if (st == CPR_NOT_FOUND && rows == 0 && m->n > 1) {
            p->missing = 1; /* M4 */
        } else if (st) {
            char why[1024];
            snprintf(why, sizeof why, "%s", p->err);
            return cpr_fail(st, "%s", why);
        }
    }
    if (p->finished)
        return CPR_OK;
    uint32_t table = p->cur->table;
    uint64_t row = p->cur->ids[p->pos];
    if (p->any && (table < p->last_table || (table == p->last_table && row <= p->last_row)))
        return cpr_fail(CPR_INTERNAL, "%s answered row %llu of table %u after row %llu of table "
                        "%u: a restore's rows must ascend", cpri_node_name(p->node),
                        (unsigned long long)row, table, (unsigned long long)p->last_row,
                        p->last_table);
    p->any = 1;
    p->last_table = table;
    p->last_row = row;
    return CPR_OK;
}

/* (table, row) of p's head: -1, 0, 1 against a's. */
static int key_cmp(const mnode *p, const mnode *a)
{
    uint32_t tp = p->cur->table, ta = a->cur->table;
    uint64_t rp = p->cur->ids[p->pos], ra = a->cur->ids[a->pos];
    if (tp != ta)
        return tp < ta ? -1 : 1;
    return rp < ra ? -1 : rp > ra;
}

typedef struct out_batch {
    int have;                  /* table, dim, state_dim: the last rows' */
    uint32_t table, dim, state_dim;
    size_t n, cap;
    uint64_t *ids;
    float *values, *state;
    uint64_t rows, bytes;
} out_batch;

static cpr_status out_flush(out_batch *o, cpr_row_fn fn, void *ctx)
{
    if (o->n == 0)
        return CPR_OK;
    cpr_row_batch b = {
        .table = o->table, .n = o->n, .ids = o->ids, .values = o->values,
        .values_count = o->n * o->dim, .state = o->state_dim ? o->state : NULL,
        .state_count = o->n * o->state_dim,
    };
    b.crc32c = cpr_crc32c_rows(b.ids, b.n, b.values, b.values_count, b.state, b.state_count);
    o->rows += o->n;
    o->bytes += o->n * 8 + (b.values_count + b.state_count) * 4;
    o->n = 0;
    return fn(ctx, &b);
}

/* Rows a batch holds: the query's batch_rows, else up to 16384 rows and
 * about 3 MiB; never a batch over a block's limit (as the store's). */
static size_t batch_cap(const cpr_restore_query *q, uint32_t dim, uint32_t state_dim)
{
    size_t row = 8 + ((size_t)dim + state_dim) * 4;
    size_t most = (CPR_BLOCK_MAX_BYTES - CPR_BLOCK_HEADER_BYTES) / (row + 8);
    size_t cap = q->batch_rows ? q->batch_rows : DEFAULT_BATCH_BYTES / row;
    if (!q->batch_rows && cap > DEFAULT_BATCH_ROWS)
        cap = DEFAULT_BATCH_ROWS;
    cap = cap > most ? most : cap;
    return cap < 1 ? 1 : cap;
}

/* Rows [pos, pos + k) of p's current batch to the output. Tables ascend,
 * so a table's rows are consecutive in it: they must have one shape. */
static cpr_status out_rows(out_batch *o, const cpr_restore_query *q, const mnode *p, size_t k,
                           cpr_row_fn fn, void *ctx)
{
    const mbatch *b = p->cur;
    cpr_status st = CPR_OK;
    if (o->have && o->table == b->table && (o->dim != b->dim || o->state_dim != b->state_dim))
        return cpr_fail(CPR_FAILED_PRECONDITION, "table %u has dim %u and state_dim %u on %s, "
                        "dim %u and state_dim %u on another node: the nodes hold different "
                        "tables under one number", b->table, b->dim, b->state_dim,
                        cpri_node_name(p->node), o->dim, o->state_dim);
    if (!o->have || o->table != b->table) {
        st = out_flush(o, fn, ctx);
        size_t cap = batch_cap(q, b->dim, b->state_dim);
        if (st == CPR_OK && (!o->have || cap != o->cap || o->dim != b->dim ||
                             o->state_dim != b->state_dim)) {
            free(o->ids);
            o->ids = malloc(cap * (8 + ((size_t)b->dim + b->state_dim) * 4) + 1);
            o->have = 0;
            if (!o->ids)
                return cpr_fail(CPR_NO_MEMORY, "out of memory for a batch of %zu rows", cap);
            o->cap = cap;
            o->values = (float *)(o->ids + cap);
            o->state = o->values + cap * b->dim;
        }
        o->have = st == CPR_OK;
        o->table = b->table;
        o->dim = b->dim;
        o->state_dim = b->state_dim;
    }
    for (size_t i = p->pos; st == CPR_OK && k;) {
        size_t take = o->cap - o->n < k ? o->cap - o->n : k;
        memcpy(o->ids + o->n, b->ids + i, take * 8);
        memcpy(o->values + o->n * o->dim, b->values + i * b->dim, take * b->dim * 4);
        if (b->state_dim)
            memcpy(o->state + o->n * o->state_dim, b->state + i * b->state_dim,
                   take * b->state_dim * 4);
        o->n += take;
        i += take;
        k -= take;
        if (o->n == o->cap)
            st = out_flush(o, fn, ctx);
    }
    return st;
}

/* M1: the consumer. */
static cpr_status merge_run(merge *m, cpr_row_fn fn, void *ctx, out_batch *o)
{
    cpr_status st = CPR_OK;
    for (size_t i = 0; i < m->n && st == CPR_OK; i++)
        st = advance(m, &m->nodes[i]);
    while (st == CPR_OK) {
        mnode *best = NULL, *next = NULL; /* the smallest key; the smallest other */
        for (size_t i = 0; i < m->n; i++) {
            mnode *p = &m->nodes[i];
            if (p->finished)
                continue;
            int cmp = best ? key_cmp(p, best) : -1;
            if (cmp < 0 ||
                (cmp == 0 && p->cur->versions[p->pos] > best->cur->versions[best->pos])) {
                if (best && (!next || key_cmp(best, next) <= 0))
                    next = best;
                best = p;
            } else if (!next || key_cmp(p, next) < 0) {
                next = p;
            }
        }
        if (!best)
            break;
        if (next && key_cmp(next, best) == 0) {
            /* One row on several nodes: best's version, then every head at
             * this key moves on by one (a node holds a row once). */
            st = out_rows(o, m->q, best, 1, fn, ctx);
            uint32_t table = best->cur->table;
            uint64_t row = best->cur->ids[best->pos];
            for (size_t i = 0; i < m->n && st == CPR_OK; i++) {
                mnode *p = &m->nodes[i];
                if (!p->finished && p->cur->table == table && p->cur->ids[p->pos] == row) {
                    p->pos++;
                    st = advance(m, p);
                }
            }
            continue;
        }
        /* A run of best's rows below every other head's key. */
        size_t k = 1;
        const mbatch *b = best->cur;
        while (best->pos + k < b->n &&
               (!next || b->table < next->cur->table ||
                (b->table == next->cur->table && b->ids[best->pos + k] < next->cur->ids[next->pos])))
            k++;
        st = out_rows(o, m->q, best, k, fn, ctx);
        best->pos += k;
        if (st == CPR_OK)
            st = advance(m, best);
    }
    return st == CPR_OK ? out_flush(o, fn, ctx) : st;
}

cpr_status cpri_restore_merged(cpr_client *c, const cpr_restore_query *q, const uint8_t *want,
                               cpr_row_fn fn, void *ctx, uint64_t *rows, uint64_t *bytes,
                               size_t *asked, size_t *missing, int *old_daemon)
{
    merge m = {.c = c, .q = q};
    out_batch o = {0};
    *rows = *bytes = 0;
    *asked = *missing = 0;
    *old_daemon = 0;
    for (size_t i = 0; i < c->n_nodes; i++)
        m.n += want[i] != 0;
    m.timeout_s = c->opts.stream_timeout_s * (double)m.n; /* M6 */
    m.nodes = calloc(m.n ? m.n : 1, sizeof *m.nodes);
    if (!m.nodes)
        return cpr_fail(CPR_NO_MEMORY, "out of memory merging %zu nodes' restores", m.n);
    pthread_mutex_init(&m.mu, NULL);
    pthread_cond_init(&m.cv, NULL);
    cpr_status st = CPR_OK;
    for (size_t i = 0, k = 0; i < c->n_nodes; i++) {
        if (!want[i])
            continue;
        mnode *p = &m.nodes[k++];
        p->m = &m;
        p->node = c->nodes[i];
        if (st == CPR_OK)
            st = cpri_rpc_cancel_create(&p->cancel);
        if (st == CPR_OK && pthread_create(&p->thread, NULL, producer, p) == 0)
            p->started = 1;
        else if (st == CPR_OK)
            st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "cannot start a thread to read %s",
                          cpri_node_name(p->node));
        if (!p->started) { /* never read: nothing will come */
            p->done = 1;
            p->finished = 1;
        }
    }
    if (st == CPR_OK)
        st = merge_run(&m, fn, ctx, &o);
    /* M3: stop, end every stream, and join every producer. */
    pthread_mutex_lock(&m.mu);
    m.stop = 1;
    pthread_cond_broadcast(&m.cv);
    pthread_mutex_unlock(&m.mu);
    for (size_t i = 0; i < m.n; i++)
        if (m.nodes[i].cancel)
            cpri_rpc_cancel_fire(m.nodes[i].cancel);
    for (size_t i = 0; i < m.n; i++) {
        mnode *p = &m.nodes[i];
        if (p->started)
            pthread_join(p->thread, NULL);
        cpri_rpc_cancel_destroy(p->cancel);
        batch_free(p->cur);
        while (p->head) {
            mbatch *b = p->head;
            p->head = b->next;
            batch_free(b);
        }
        *missing += p->missing;
        *old_daemon |= p->no_versions; /* M5 */
    }
    *asked = m.n;
    *rows = o.rows;
    *bytes = o.bytes;
    free(o.ids);
    free(m.nodes);
    pthread_cond_destroy(&m.cv);
    pthread_mutex_destroy(&m.mu);
    return st;
}
