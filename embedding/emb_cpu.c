/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPU backend of the embedding module: the reference semantics that the
 * CUDA backend reproduces.
 *
 * Backward sorts the call's index occurrences by (row, position), sums each
 * row's gradients in position order, takes one optimizer step per row, and
 * updates every tracker of that row in the same loop (no second pass over
 * the batch). SSU sampling decides per occurrence with a hash of (seed, call,
 * position), shared with the CUDA backend, so both sample identically.
 *
 * Saves move tracker values into the save (pending) at begin and drop or
 * return them at commit or abort (invariant in cpr/embedding.h). A wiped
 * shard's open saves become inert: their pending values belong to rows
 * that no longer exist.
 *
 * Every save is a copy-on-write snapshot (emb_snap.h, S1-S4): `cow` marks
 * the rows of open saves, and whatever changes a marked row (backward,
 * apply, wipe) first has each open save holding it keep the row's values,
 * so cpr_emb_save_copy may copy the save out on another thread while
 * training goes on. Those guards run before anything changes, so a failed
 * call still leaves the table unchanged.
 *
 * G1. `guard` marks the rows of open saves that a change must still guard:
 *     set with `cow` at a save's begin (and again for the rows of the
 *     shard's other open saves when one ends), cleared by the training
 *     thread once every open save holding the row has kept it or copied it
 *     out and moved its trackers (a guard that returned CPR_OK). From then
 *     on nothing a change of the row does concerns those saves (S1, S5:
 *     their flags never clear while they are open), so a hot row pays the
 *     guard once a save, not once a step. `cow` stays set until the save
 *     ends: drop_pending needs every open save's rows.
 * A1. A row applied (restored) while an open save holds it is in that
 *     save's `stale` list: the save stores the row's copy from before the
 *     apply, so when it commits the row is tracked as updated again
 *     (mark_stale: dirty, listed, count at least 1) and the next save takes
 *     it; when it aborts the row equals its stored copy and stays clean.
 */
#define _GNU_SOURCE /* madvise, sched_getaffinity */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "emb_internal.h"
#include "emb_select.h"
#include "emb_snap.h"
#include "emb_touched.h"
#include "emb_ssu.h"

typedef struct shard_ctr {
    uint64_t events, unsaved;
    uint64_t open_saves;
    int open_consistent;    /* a FULL/DELTA save is open */
} shard_ctr;

struct cpu_table;

typedef struct pending {
    uint32_t *counts;
    float *norm;
    uint8_t *dirty;         /* per id: was dirty (FULL/DELTA saves: cons) */
    int cons;               /* a FULL/DELTA save of a table with dirty bits */
    uint8_t *sampled;       /* per id: was in the SSU sample */
    uint64_t count_sum;     /* counts moved in so far (atomic adds: copiers move too) */
    uint64_t unsaved_at_begin;
    int wiped;              /* the shard was wiped while this save was open */
    cpri_emb_snap snap;     /* the rows' begin-time values, copy on write */
    uint64_t *stale;        /* rows applied while this save held them: at its
                               commit they differ from what it stored */
    size_t n_stale, cap_stale;
    struct cpu_table *table; /* for the tracker moves (S5) */
    size_t cap;             /* rows the arrays hold (a spare is reused, E1) */
    struct pending *next;   /* open saves of the table */
    cpr_emb_save *save;
} pending;

typedef struct occ {
    uint64_t row;
    uint32_t bag;
    uint32_t pos_hi;        /* position in the call: pos_hi << 32 | pos_lo */
    uint32_t pos_lo;
} occ;

/* A row's MFU count and TOPK_NORM norm side by side: a save's bookkeeping
 * and a selection read both, and one cache line a row instead of two halves
 * the DRAM misses of touching scattered rows (issue #9's stall). */
typedef struct row_trk {
    uint32_t count;
    float norm;
} row_trk;

typedef struct cpu_table {
    float *weights, *state;
    row_trk *trk;           /* NULL when neither counts nor norm are tracked */
    int has_counts, has_norm;
    uint64_t *dirty;        /* bitmap */
    cpri_emb_ssu ssu;        /* the SSU sample (emb_ssu.c, shared with CUDA) */
    cpri_emb_touched touched; /* rows MFU/TOPK_NORM select from (emb_touched.c) */
    shard_ctr *shards;
    pending *open;
    pending *spare;         /* arrays of ended saves, kept for the next (E1) */
    uint32_t n_spare, shards_n;
    uint64_t *cow;          /* bitmap: rows of open saves (S1) */
    uint64_t *guard;        /* bitmap: rows a change must guard first (G1) */
    uint32_t snap_open;     /* open saves */
    uint64_t calls;
    occ *occs;
    size_t occ_cap;
    float *gsum;
} cpu_table;

static void free_pending(pending *p);

#define CPU(t) ((cpu_table *)(t)->backend)
#define PREFETCH_AHEAD 8 /* rows: enough to cover DRAM latency at ~50 ns per row */
/* Bookkeeping touches a few bytes a row: DRAM latency needs more rows ahead. */
#define PREFETCH_TRACKERS 32

/* Bring a row (and its trackers) toward the cache before it is needed: rows
 * are random in a table far larger than the cache, so every access would
 * otherwise wait for DRAM. */
static void prefetch_row(const cpu_table *b, uint64_t row, uint32_t dim, uint32_t state_dim)
{
    const char *w = (const char *)(b->weights + row * dim);
    for (size_t off = 0; off < (size_t)dim * 4; off += 64)
        __builtin_prefetch(w + off);
    if (state_dim)
        __builtin_prefetch(b->state + row * state_dim);
    if (b->trk)
        __builtin_prefetch(b->trk + row);
    if (b->dirty)
        __builtin_prefetch(b->dirty + (row >> 6));
    if (b->ssu.member)
        __builtin_prefetch(b->ssu.member + (row >> 6));
    if (b->snap_open)
        __builtin_prefetch(b->guard + (row >> 6));
}
/* A row's tracker entries, ahead of a save's bookkeeping. */
static void prefetch_trackers(const cpu_table *b, uint64_t row)
{
    __builtin_prefetch(b->cow + (row >> 6), 1);
    __builtin_prefetch(b->guard + (row >> 6), 1);
    if (b->trk)
        __builtin_prefetch(b->trk + row, 1);
    if (b->touched.listed)
        __builtin_prefetch(b->touched.listed + (row >> 6), 1);
    if (b->dirty)
        __builtin_prefetch(b->dirty + (row >> 6), 1);
}

static void *xcalloc(size_t n, size_t size, int *oom)
{
    void *p = n ? calloc(n, size) : NULL;
    if (n && !p)
        *oom = 1;
    return p;
}

#define HUGE_PAGE (2u << 20)

/* Zeroed memory for the big per-row arrays, on transparent huge pages where
 * the kernel offers them: rows are accessed at random, and with 4 KiB pages
 * almost every access also misses the TLB (measured: forward 2.8M -> see
 * docs/performance.md). Freed with free(). */
static void *table_alloc(size_t n, size_t size, int *oom)
{
    void *p = NULL;
    size_t bytes = n * size;
    if (n == 0)
        return NULL;
    if (bytes < HUGE_PAGE)
        return xcalloc(n, size, oom);
    if (posix_memalign(&p, HUGE_PAGE, bytes) != 0) {
        *oom = 1;
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* advice only: fine if refused */
#endif
    memset(p, 0, bytes);
    return p;
}

cpr_status cpri_emb_cpu_create(cpr_emb *t)
{
    const cpr_emb_config *c = &t->cfg;
    int oom = 0;
    cpu_table *b = calloc(1, sizeof *b);
    if (!b)
        return cpr_fail(CPR_NO_MEMORY, "out of memory creating a table");
    t->backend = b;
    uint64_t words = (c->rows + 63) / 64;
    b->weights = table_alloc(c->rows * c->dim, sizeof(float), &oom);
    b->state = table_alloc(c->rows * t->state_dim, sizeof(float), &oom);
    b->has_counts = (c->track & CPR_TRACK_COUNTS) != 0;
    b->has_norm = (c->track & CPR_TRACK_NORM) != 0;
    b->trk = b->has_counts || b->has_norm ? table_alloc(c->rows, sizeof(row_trk), &oom) : NULL;
    b->dirty = c->track & CPR_TRACK_DIRTY ? table_alloc(words, 8, &oom) : NULL;
    b->cow = table_alloc(words, 8, &oom);
    b->guard = table_alloc(words, 8, &oom);
    b->shards = xcalloc(c->num_shards, sizeof *b->shards, &oom);
    b->shards_n = c->num_shards;
    b->gsum = xcalloc(c->dim, sizeof(float), &oom);
    if (oom) {
        cpri_emb_cpu_destroy(t);
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a table of %llu x %u",
                        (unsigned long long)c->rows, c->dim);
    }
    cpr_status st = cpri_emb_ssu_init(&b->ssu, (c->track & CPR_TRACK_SSU) != 0, c->rows,
                                     c->num_shards, c->ssu_capacity);
    if (st == CPR_OK)
        st = cpri_emb_touched_init(&b->touched, b->trk != NULL, c->rows, c->num_shards);
    if (st) {
        cpri_emb_cpu_destroy(t);
        return st;
    }
    for (uint64_t r = 0; c->dim && r < c->rows; r++) /* dim 0: a tracker, no rows */
        for (uint32_t j = 0; j < c->dim; j++)
            b->weights[r * c->dim + j] = cpri_emb_init_value(c->seed, r, j, c->init_scale);
    return CPR_OK;
}

void cpri_emb_cpu_destroy(cpr_emb *t)
{
    cpu_table *b = CPU(t);
    if (!b)
        return;
    while (b->spare) { /* E1's kept arrays */
        pending *p = b->spare;
        b->spare = p->next;
        free_pending(p);
    }
    while (b->open) { /* open saves end with the table (cpr_emb_destroy) */
        pending *p = b->open;
        b->open = p->next;
        free(p->save->ids);
        free(p->save);
        free_pending(p);
    }
    cpri_emb_ssu_release(&b->ssu);
    cpri_emb_touched_release(&b->touched);
    free(b->weights);
    free(b->state);
    free(b->trk);
    free(b->dirty);
    free(b->cow);
    free(b->guard);
    free(b->shards);
    free(b->occs);
    free(b->gsum);
    free(b);
    t->backend = NULL;
}

/* ---- forward ------------------------------------------------------------------ */

static size_t bag_end(const int64_t *offsets, size_t n_bags, size_t n_indices, size_t b)
{
    return b + 1 < n_bags ? (size_t)offsets[b + 1] : n_indices;
}

cpr_status cpri_emb_cpu_forward(cpr_emb *t, const int64_t *indices, size_t n_indices,
                               const int64_t *offsets, size_t n_bags, cpr_pooling pooling,
                               float *out)
{
    const float *w = CPU(t)->weights;
    uint32_t dim = t->cfg.dim;
    for (size_t b = 0; b < n_bags; b++) {
        float *o = out + b * dim;
        size_t lo = (size_t)offsets[b], hi = bag_end(offsets, n_bags, n_indices, b);
        memset(o, 0, dim * sizeof *o);
        for (size_t i = lo; i < hi; i++) {
            if (i + PREFETCH_AHEAD < n_indices)
                prefetch_row(CPU(t), (uint64_t)indices[i + PREFETCH_AHEAD], dim, 0);
            const float *row = w + (uint64_t)indices[i] * dim;
            for (uint32_t j = 0; j < dim; j++)
                o[j] += row[j];
        }
        if (pooling == CPR_POOL_MEAN && hi > lo) {
            float scale = 1.0f / (float)(hi - lo);
            for (uint32_t j = 0; j < dim; j++)
                o[j] *= scale;
        }
    }
    return CPR_OK;
}

/* ---- backward ------------------------------------------------------------------ */

/* Stable LSD radix sort by row, 8 bits a pass, only as many passes as the
 * table's row ids need: occurrences come in position order, so stability
 * keeps equal rows in position order (the CUDA backend sums in that order
 * too). About 10x faster than qsort for a training batch. */
static void sort_occurrences(occ *a, occ *tmp, size_t n, uint64_t rows)
{
    int passes = 0;
    while (passes < 8 && (rows - 1) >> (8 * passes))
        passes++;
    for (int p = 0; p < passes; p++) {
        size_t count[257] = {0};
        int shift = 8 * p;
        for (size_t i = 0; i < n; i++)
            count[((a[i].row >> shift) & 0xff) + 1]++;
        for (int d = 0; d < 256; d++)
            count[d + 1] += count[d];
        for (size_t i = 0; i < n; i++)
            tmp[count[(a[i].row >> shift) & 0xff]++] = a[i];
        occ *swap = a;
        a = tmp;
        tmp = swap;
    }
    if (passes % 2) /* the result is in the scratch half */
        memcpy(tmp, a, n * sizeof *a);
}

/* The occurrences that belong to a bag (indices before offsets[0] belong to
 * none), sorted by row; returns how many in *n_occ. */
static cpr_status collect_occurrences(const cpr_emb *t, cpu_table *b, const int64_t *indices,
                                      size_t n_indices, const int64_t *offsets, size_t n_bags,
                                      size_t *n_occ)
{
    size_t n = 0;
    if (b->occ_cap < n_indices) {
        occ *grown = realloc(b->occs, 2 * n_indices * sizeof *grown); /* + sort scratch */
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory for a batch of %zu indices",
                            n_indices);
        b->occs = grown;
        b->occ_cap = n_indices;
    }
    for (size_t bag = 0; bag < n_bags; bag++) {
        size_t hi = bag_end(offsets, n_bags, n_indices, bag);
        for (size_t i = (size_t)offsets[bag]; i < hi; i++)
            b->occs[n++] = (occ){(uint64_t)indices[i], (uint32_t)bag, (uint32_t)(i >> 32),
                                 (uint32_t)i};
    }
    sort_occurrences(b->occs, b->occs + n_indices, n, t->cfg.rows);
    *n_occ = n;
    return CPR_OK;
}

/* One optimizer step on `row` with gradient g; returns sum of squared changes. */
static double step_row(cpr_emb *t, uint64_t row, const float *g)
{
    cpu_table *b = CPU(t);
    uint32_t dim = t->cfg.dim;
    float lr = t->cfg.learning_rate, eps = t->cfg.eps;
    float *w = b->weights + row * dim;
    double change = 0;
    if (t->cfg.optimizer == CPR_OPT_ROWWISE_ADAGRAD) {
        double sq = 0;
        for (uint32_t j = 0; j < dim; j++)
            sq += (double)g[j] * g[j];
        float *s = b->state + row;
        *s += (float)(sq / dim);
        float scale = lr / (sqrtf(*s) + eps);
        for (uint32_t j = 0; j < dim; j++) {
            float d = scale * g[j];
            w[j] -= d;
            change += (double)d * d;
        }
    } else if (t->cfg.optimizer == CPR_OPT_ADAGRAD) {
        float *s = b->state + row * dim;
        for (uint32_t j = 0; j < dim; j++) {
            s[j] += g[j] * g[j];
            float d = lr * g[j] / (sqrtf(s[j]) + eps);
            w[j] -= d;
            change += (double)d * d;
        }
    } else {
        for (uint32_t j = 0; j < dim; j++) {
            float d = lr * g[j];
            w[j] -= d;
            change += (double)d * d;
        }
    }
    return change;
}

/* `row` has non-zero trackers (T1); a zero norm among them is noted (T5:
 * an update of no change, or an aborted save's counts coming back). */
static void list_touched(cpu_table *b, uint32_t shard, uint64_t row)
{
    cpri_emb_touched_add(&b->touched, shard, row);
    if (b->has_norm && b->trk[row].norm == 0)
        cpri_emb_touched_zero_norm(&b->touched, shard);
}

/* The row differs from what a committed save stored of it (its copy from
 * before an apply): tracked as updated at least once, so that the next save
 * of any policy that saves updated rows takes it again. */
static void mark_stale(cpr_emb *t, uint64_t row)
{
    cpu_table *b = CPU(t);
    uint32_t shard = cpri_emb_geom_shard_of(t, row);
    if (b->has_counts && b->trk[row].count == 0) {
        b->trk[row].count = 1;
        b->shards[shard].unsaved++;
    }
    if (b->dirty)
        BIT_SET(b->dirty, row);
    if (b->touched.listed)
        list_touched(b, shard, row);
}

/* Trackers of `row` after an update by `n_occ` occurrences (first at `first`). */
static void track_row(cpr_emb *t, uint64_t row, const occ *first, size_t n_occ, double change)
{
    cpu_table *b = CPU(t);
    uint32_t shard = cpri_emb_geom_shard_of(t, row);
    if (b->has_counts) {
        uint64_t c = (uint64_t)b->trk[row].count + n_occ;
        b->trk[row].count = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
    }
    if (b->dirty)
        BIT_SET(b->dirty, row);
    if (b->has_norm)
        b->trk[row].norm += (float)change;
    if (b->touched.listed)
        list_touched(b, shard, row);
    if (b->ssu.member && (!cpri_emb_ssu_is_member(&b->ssu, row) ||
                          cpri_emb_ssu_is_held(&b->ssu, row))) { /* U4 when held */
        for (size_t k = 0; k < n_occ; k++) {
            uint64_t pos = (uint64_t)first[k].pos_hi << 32 | first[k].pos_lo;
            if (cpri_emb_sampled(t->cfg.seed, b->calls, pos, t->ssu_threshold)) {
                cpri_emb_ssu_add(&b->ssu, shard, row);
                break;
            }
        }
    }
    b->shards[shard].events += n_occ;
    b->shards[shard].unsaved += n_occ;
}

/* ---- the snapshot's guards (S1) ---------------------------------------------------- */

/* Position of `row` in a save's ascending ids, or n. */
static size_t save_index(const cpr_emb_save *save, uint64_t row)
{
    size_t lo = 0, hi = save->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (save->ids[mid] < row)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < save->n && save->ids[lo] == row ? lo : save->n;
}

/* Before `row` changes: every open save holding it keeps its values. */
/* S5: row i's trackers into the save (under its run lock). */
static uint64_t move_trackers(void *ctx, size_t i, uint64_t row)
{
    pending *p = ctx;
    row_trk *trk = p->table->trk + row;
    uint64_t count = 0;
    if (p->counts) {
        count = trk->count;
        p->counts[i] = trk->count;
        trk->count = 0;
    }
    if (p->norm) {
        p->norm[i] = trk->norm;
        trk->norm = 0;
    }
    return count;
}

static cpri_emb_snap_src snap_src(const cpr_emb *t, pending *p)
{
    const cpu_table *b = t->backend;
    return (cpri_emb_snap_src){b->weights, t->state_dim ? b->state : NULL, p->save->ids,
                               b->trk ? move_trackers : NULL, p};
}

static void add_moved(pending *p, uint64_t count)
{
    if (count)
        __atomic_fetch_add(&p->count_sum, count, __ATOMIC_RELAXED);
}

/* Every open save of the shard moves the trackers it has not moved yet
 * (S5), before the training thread reads the shard's trackers. */
static void move_open(cpr_emb *t, uint32_t shard)
{
    for (pending *p = CPU(t)->open; p; p = p->next)
        if (p->save->shard == shard) {
            cpri_emb_snap_src src = snap_src(t, p);
            add_moved(p, cpri_emb_snap_move_all(&p->snap, &src));
        }
}

/* Before `row` changes: every open save holding it moves its trackers and
 * keeps its values. */
static cpr_status guard_row(cpr_emb *t, uint64_t row)
{
    cpu_table *b = CPU(t);
    if (!b->snap_open || !BIT_GET(b->guard, row))
        return CPR_OK;
    uint32_t shard = cpri_emb_geom_shard_of(t, row);
    for (pending *p = b->open; p; p = p->next) {
        if (p->save->shard != shard || cpri_emb_snap_all_released(&p->snap)) /* S6 */
            continue;
        size_t i = save_index(p->save, row);
        if (i == p->save->n)
            continue;
        cpri_emb_snap_src src = snap_src(t, p);
        uint64_t moved = 0;
        cpr_status st = cpri_emb_snap_keep(&p->snap, &src, i, row, &moved);
        if (st)
            return st;
        add_moved(p, moved);
    }
    /* G1: every open save holding the row has it kept or copied out, and
     * its trackers moved: nothing a later change does concerns them. */
    BIT_CLR(b->guard, row);
    return CPR_OK;
}

/* The rows a backward is about to update (sorted occurrences). */
static cpr_status guard_batch(cpr_emb *t, const occ *occs, size_t n_occ)
{
    cpu_table *b = CPU(t);
    cpr_status st = CPR_OK;
    int any = 0;
    for (pending *p = b->open; p && !any; p = p->next)
        any = !cpri_emb_snap_all_released(&p->snap);
    if (!any) /* no open save, or every one copied out (S6): nothing to guard */
        return CPR_OK;
    for (size_t i = 0; st == CPR_OK && i < n_occ; i++)
        if (i == 0 || occs[i].row != occs[i - 1].row)
            st = guard_row(t, occs[i].row);
    return st;
}

cpr_status cpri_emb_cpu_backward(cpr_emb *t, const int64_t *indices, size_t n_indices,
                                const int64_t *offsets, size_t n_bags, cpr_pooling pooling,
                                const float *grad)
{
    cpu_table *b = CPU(t);
    uint32_t dim = t->cfg.dim;
    size_t n_occ = 0;
    cpr_status st = collect_occurrences(t, b, indices, n_indices, offsets, n_bags, &n_occ);
    if (st == CPR_OK)
        st = guard_batch(t, b->occs, n_occ);
    if (st)
        return st;
    for (size_t i = 0; i < n_occ;) {
        size_t end = i;
        uint64_t row = b->occs[i].row;
        if (i + PREFETCH_AHEAD < n_occ)
            prefetch_row(b, b->occs[i + PREFETCH_AHEAD].row, dim, t->state_dim);
        memset(b->gsum, 0, dim * sizeof *b->gsum);
        for (; end < n_occ && b->occs[end].row == row; end++) {
            uint32_t bag = b->occs[end].bag;
            float scale = 1.0f;
            if (pooling == CPR_POOL_MEAN)
                scale = 1.0f / (float)(bag_end(offsets, n_bags, n_indices, bag) -
                                       (size_t)offsets[bag]);
            const float *g = grad + (size_t)bag * dim;
            for (uint32_t j = 0; j < dim; j++)
                b->gsum[j] += scale * g[j];
        }
        double change = step_row(t, row, b->gsum);
        if (t->cfg.track)
            track_row(t, row, &b->occs[i], end - i, change);
        else { /* the shard counters are kept whatever the trackers */
            shard_ctr *sc = &b->shards[cpri_emb_geom_shard_of(t, row)];
            sc->events += end - i;
            sc->unsaved += end - i;
        }
        i = end;
    }
    b->calls++;
    return CPR_OK;
}

/* A tracker's backward without the update: the caller's optimizer changed
 * the rows; `sq_change` (per index, or NULL) says by how much. */
cpr_status cpri_emb_cpu_observe(cpr_emb *t, const int64_t *indices, size_t n,
                                const float *sq_change)
{
    cpu_table *b = CPU(t);
    static const int64_t one_bag = 0;
    size_t n_occ = 0;
    cpr_status st = collect_occurrences(t, b, indices, n, &one_bag, 1, &n_occ);
    if (st == CPR_OK)
        st = guard_batch(t, b->occs, n_occ); /* S5: open saves move their trackers first */
    if (st)
        return st;
    for (size_t i = 0; i < n_occ;) {
        size_t end = i;
        uint64_t row = b->occs[i].row;
        double change = 0;
        for (; end < n_occ && b->occs[end].row == row; end++)
            if (sq_change)
                change += sq_change[(size_t)b->occs[end].pos_hi << 32 | b->occs[end].pos_lo];
        track_row(t, row, &b->occs[i], end - i, change);
        i = end;
    }
    b->calls++;
    return CPR_OK;
}

/* ---- stats and selection ------------------------------------------------------------ */

void cpri_emb_cpu_events(const cpr_emb *t, uint32_t shard, uint64_t *update_events,
                         uint64_t *unsaved_events)
{
    const cpu_table *b = CPU(t);
    *update_events = b->shards[shard].events; /* live + pending: no move needed */
    *unsaved_events = b->shards[shard].unsaved;
}

cpr_status cpri_emb_cpu_stats(const cpr_emb *t, uint32_t shard, cpr_emb_stats *out)
{
    const cpu_table *b = CPU(t);
    /* Logically const: a move changes where a save's trackers are, not what
     * the table reports (unsaved = live + pending). */
    move_open((cpr_emb *)t, shard);
    cpr_emb_stats s = {0};
    uint64_t n = cpri_emb_geom_shard_rows(t, shard), row = cpri_emb_geom_first(t, shard);
    uint64_t stride = cpri_emb_geom_stride(t);
    s.update_events = b->shards[shard].events;
    s.unsaved_events = b->shards[shard].unsaved;
    s.sampled_rows = cpri_emb_ssu_count(&b->ssu, shard);
    s.open_saves = b->shards[shard].open_saves;
    for (uint64_t i = 0; i < n; i++, row += stride) {
        s.dirty_rows += b->dirty && BIT_GET(b->dirty, row);
        s.touched_rows += b->has_counts && b->trk[row].count != 0;
    }
    *out = s;
    return CPR_OK;
}

cpr_status cpri_emb_cpu_select(cpr_emb *t, uint32_t shard, cpr_policy policy,
                              uint64_t budget_rows, uint64_t *ids, size_t cap, size_t *n)
{
    move_open(t, shard); /* S5: the trackers read below are the rows' own */
    cpu_table *b = CPU(t);
    uint64_t rows = cpri_emb_geom_shard_rows(t, shard), row = cpri_emb_geom_first(t, shard);
    uint64_t stride = cpri_emb_geom_stride(t), k = budget_rows < cap ? budget_rows : cap;
    size_t count = 0;
    switch (policy) {
    case CPR_POLICY_FULL:
        for (uint64_t i = 0; i < rows; i++, row += stride)
            ids[count++] = row;
        break;
    case CPR_POLICY_DELTA:
        if (stride == 1) { /* a range shard: whole words of the bitmap, set bits only */
            count = cpri_emb_bitmap_rows(b->dirty, row, row + rows, ids, cap);
            if (count == SIZE_MAX)
                return cpr_fail(CPR_RESOURCE_EXHAUSTED, "more dirty rows than the %zu the "
                                "buffer holds", cap);
            break;
        }
        for (uint64_t i = 0; i < rows; i++, row += stride) {
            if (!BIT_GET(b->dirty, row))
                continue;
            if (count == cap)
                return cpr_fail(CPR_RESOURCE_EXHAUSTED, "more dirty rows than the %zu the "
                                "buffer holds", cap);
            ids[count++] = row;
        }
        break;
    case CPR_POLICY_MFU:
    case CPR_POLICY_TOPK_NORM: { /* non-negative floats order like their bits */
        const void *keys = policy == CPR_POLICY_MFU ? (const void *)&b->trk->count
                                                    : (const void *)&b->trk->norm;
        cpri_emb_touched_keys live = {b->has_counts ? &b->trk->count : NULL,
                                      b->has_norm ? &b->trk->norm : NULL, sizeof *b->trk};
        int from_list = 0;
        cpr_status st = cpri_emb_touched_topk(&b->touched, t, shard, &live, keys, k, ids,
                                              &count, &from_list);
        if (st == CPR_OK && !from_list) { /* read every row (and rebuild a lost list, T1) */
            st = cpri_emb_topk(t, shard, keys, sizeof *b->trk, k, ids, &count);
            if (cpri_emb_touched_lost(&b->touched, shard))
                cpri_emb_touched_rebuild(&b->touched, t, shard, &live);
        }
        if (st)
            return st;
        break;
    }
    case CPR_POLICY_SSU:
        count = cpri_emb_ssu_select(&b->ssu, shard, k, ids, cap);
        break;
    }
    *n = count;
    return CPR_OK;
}

/* ---- saves ---------------------------------------------------------------------------- */

static void free_pending(pending *p)
{
    cpri_emb_snap_release(&p->snap);
    free(p->counts);
    free(p->norm);
    free(p->dirty);
    free(p->sampled);
    free(p->stale);
    free(p);
}

/*
 * E1. A save's pending arrays are as large as the save (a FULL save of 10 M
 * rows: 90 MB). Allocating them fresh each save made its begin fault every
 * page in, in the training stall, so the arrays of ended saves are kept (up
 * to one per shard and one more: a trainer has a save of every shard open
 * at once) and the next save takes the smallest that fits. Every save has
 * an array for each tracker of the table, whatever its policy, so any
 * spare fits any policy. counts, norm and dirty are written for every row
 * of the save below; `sampled` is cleared (cpri_emb_ssu_hold sets only the
 * rows it holds).
 */
static pending *take_spare(cpu_table *b, size_t n)
{
    pending **best = NULL;
    for (pending **pp = &b->spare; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= n && (!best || (*pp)->cap < (*best)->cap))
            best = pp;
    if (!best)
        return NULL;
    pending *s = *best;
    *best = s->next;
    b->n_spare--;
    s->count_sum = s->unsaved_at_begin = 0;
    s->wiped = 0;
    s->next = NULL;
    s->save = NULL;
    if (s->sampled)
        memset(s->sampled, 0, n);
    return s;
}

static void keep_spare(cpu_table *b, pending *p)
{
    if (b->n_spare > b->shards_n) { /* full: drop the smallest, or p itself */
        pending **smallest = &b->spare;
        for (pending **pp = &b->spare; *pp; pp = &(*pp)->next)
            if ((*pp)->cap < (*smallest)->cap)
                smallest = pp;
        if ((*smallest)->cap >= p->cap) {
            free_pending(p);
            return;
        }
        pending *drop = *smallest;
        *smallest = drop->next;
        free_pending(drop);
        b->n_spare--;
    }
    p->next = b->spare;
    b->spare = p;
    b->n_spare++;
}

static int consistent_policy(cpr_policy policy)
{
    return policy == CPR_POLICY_FULL || policy == CPR_POLICY_DELTA;
}

cpr_status cpri_emb_cpu_save_begin(cpr_emb *t, cpr_emb_save *save)
{
    cpu_table *b = CPU(t);
    shard_ctr *sc = &b->shards[save->shard];
    int oom = 0, cons = consistent_policy(save->policy);
    if (cons && sc->open_consistent)
        return cpr_fail(CPR_FAILED_PRECONDITION, "shard %u already has an open FULL/DELTA "
                        "save; commit or abort it first", save->shard);
    pending *p = take_spare(b, save->n); /* E1 */
    if (!p) {
        p = calloc(1, sizeof *p);
        if (!p)
            return cpr_fail(CPR_NO_MEMORY, "out of memory starting a save");
        p->counts = b->has_counts ? xcalloc(save->n, 4, &oom) : NULL;
        p->norm = b->has_norm ? xcalloc(save->n, 4, &oom) : NULL;
        p->dirty = b->dirty ? xcalloc(save->n, 1, &oom) : NULL;
        p->sampled = b->ssu.member ? xcalloc(save->n, 1, &oom) : NULL;
        p->cap = save->n;
        if (oom) {
            free_pending(p);
            return cpr_fail(CPR_NO_MEMORY, "out of memory starting a save of %zu rows",
                            save->n);
        }
    }
    p->cons = cons && b->dirty; /* FULL and DELTA clear the dirty bits */
    move_open(t, save->shard); /* S5: an open save's rows are moved before another begins */
    p->table = b;
    cpr_status st = cpri_emb_snap_init(&p->snap, save->n, t->cfg.dim, t->state_dim);
    if (st) {
        keep_spare(b, p);
        return st;
    }
    for (size_t i = 0; i < save->n; i++) {
        uint64_t row = save->ids[i];
        if (i + PREFETCH_TRACKERS < save->n) /* the rows' trackers are scattered */
            prefetch_trackers(b, save->ids[i + PREFETCH_TRACKERS]);
        BIT_SET(b->cow, row); /* S1 */
        BIT_SET(b->guard, row); /* G1 */
        /* The counts and norm move later (S5), by whoever reaches the row
         * first; selection moves what is left before it reads them, so the
         * row is unlisted now (T2). */
        if (b->touched.listed)
            cpri_emb_touched_unlist(&b->touched, row);
        if (p->cons) {
            p->dirty[i] = (uint8_t)BIT_GET(b->dirty, row);
            BIT_CLR(b->dirty, row);
        }
    }
    if (save->policy == CPR_POLICY_FULL && b->touched.listed &&
        save->n == cpri_emb_geom_shard_rows(t, save->shard)) /* every count goes to 0 (T2) */
        cpri_emb_touched_clear_shard(&b->touched, save->shard);
    if (p->sampled) /* held rows keep their place in the sample until commit */
        cpri_emb_ssu_hold(&b->ssu, save->shard, save->ids, save->n,
                          cpri_emb_save_whole_shard(t, save) ? cpri_emb_geom_stride(t) : 0,
                          p->sampled);
    p->unsaved_at_begin = sc->unsaved;
    p->save = save;
    p->next = b->open;
    b->open = p;
    save->backend = p;
    sc->open_saves++;
    sc->open_consistent |= cons;
    b->snap_open++;
    return CPR_OK;
}

typedef struct gather_job {
    const cpu_table *b;
    pending *p;
    const uint64_t *ids;
    size_t first, n;        /* save rows [first, first + n) */
    uint32_t dim, state_dim;
    float *values, *state;
    int release;
    cpr_status st;
    char msg[256];          /* st's message: cpr_errmsg() is per thread */
} gather_job;

/* Rows of the save as they were at its begin (S1): from the table, or from
 * where the training thread kept them. */
static void *gather_range(void *arg)
{
    gather_job *g = arg;
    const cpu_table *b = g->b;
    cpri_emb_snap_src src = {b->weights, g->state_dim ? b->state : NULL, g->ids,
                             b->trk ? move_trackers : NULL, g->p};
    uint64_t moved = 0;
    g->st = cpri_emb_snap_copy(&g->p->snap, &src, g->first, g->n, g->values, g->state,
                               g->release, &moved);
    add_moved(g->p, moved);
    if (g->st)
        snprintf(g->msg, sizeof g->msg, "%s", cpr_errmsg());
    return NULL;
}

void cpri_emb_cpu_view(const cpr_emb *t, cpr_emb_host_view *out)
{
    const cpu_table *b = t->backend;
    *out = (cpr_emb_host_view){b->weights, t->cfg.dim, t->state_dim ? b->state : NULL,
                               t->state_dim};
}

#define GATHER_THREADS_MAX 8
#define GATHER_ROWS_PER_THREAD 16384 /* below this, threads cost more than they win */

/* Rows are scattered over a table far larger than the caches, so one thread
 * waits on DRAM most of the time; a few threads keep more misses in flight.
 * Runs on any thread while the table trains (emb_snap.h). */
cpr_status cpri_emb_cpu_copy(cpr_emb *t, const cpr_emb_save *save, size_t first, size_t k,
                             float *values, float *state, int release)
{
    gather_job jobs[GATHER_THREADS_MAX];
    pthread_t threads[GATHER_THREADS_MAX];
    pending *p = save->backend;
    cpu_set_t allowed; /* the CPUs this thread may use (a pinned sender: maybe one) */
    long cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed)
                                                                  : sysconf(_SC_NPROCESSORS_ONLN);
    size_t n_jobs = k / GATHER_ROWS_PER_THREAD + 1;
    if (!p)
        return cpr_fail(CPR_FAILED_PRECONDITION, "copy of a save whose table is gone");
    if (k == 0)
        return CPR_OK;
    if (n_jobs > (size_t)(cpus > 0 ? cpus : 1))
        n_jobs = (size_t)(cpus > 0 ? cpus : 1);
    if (n_jobs > GATHER_THREADS_MAX)
        n_jobs = GATHER_THREADS_MAX;
    size_t per = (k + n_jobs - 1) / n_jobs, started = 0;
    for (size_t j = 0; j < n_jobs; j++) {
        size_t lo = j * per < k ? j * per : k;
        size_t hi = lo + per < k ? lo + per : k;
        jobs[j] = (gather_job){CPU(t), p, save->ids, first + lo, hi - lo, t->cfg.dim,
                               t->state_dim, values + lo * t->cfg.dim,
                               state ? state + lo * t->state_dim : NULL, release, CPR_OK, ""};
    }
    /* Job 0 runs here; a thread that cannot start is done here too. */
    for (size_t j = 1; j < n_jobs; j++) {
        if (pthread_create(&threads[j], NULL, gather_range, &jobs[j]) != 0)
            break;
        started = j;
    }
    for (size_t j = started + 1; j < n_jobs; j++)
        gather_range(&jobs[j]);
    gather_range(&jobs[0]);
    for (size_t j = 1; j <= started; j++)
        pthread_join(threads[j], NULL);
    for (size_t j = 0; j < n_jobs; j++)
        if (jobs[j].st)
            return cpr_fail(jobs[j].st, "%s", jobs[j].msg);
    return CPR_OK;
}

/* Abort: the pending values go back to their rows. */
static void restore_pending(cpr_emb *t, const cpr_emb_save *save, const pending *p)
{
    cpu_table *b = CPU(t);
    for (size_t i = 0; i < save->n; i++) {
        uint64_t row = save->ids[i];
        if (p->counts) {
            uint64_t c = (uint64_t)b->trk[row].count + p->counts[i];
            b->trk[row].count = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
        }
        if (p->norm)
            b->trk[row].norm += p->norm[i];
        if (p->cons && p->dirty[i])
            BIT_SET(b->dirty, row);
        if (b->touched.listed && ((p->counts && p->counts[i]) || (p->norm && p->norm[i] != 0)))
            list_touched(b, save->shard, row); /* T1: the counts are back */
    }
    if (p->sampled)
        cpri_emb_ssu_end(&b->ssu, save->shard, save->ids, save->n, p->sampled, 0);
}

/* The ended save's rows leave `cow`, except those another open save of the
 * shard still holds (S1). */
static void unmark(cpr_emb *t, const cpr_emb_save *save)
{
    cpu_table *b = CPU(t);
    for (size_t i = 0; i < save->n; i++) {
        BIT_CLR(b->cow, save->ids[i]);
        BIT_CLR(b->guard, save->ids[i]);
    }
    for (pending *q = b->open; q; q = q->next) /* G1: guarding again is harmless */
        if (q->save->shard == save->shard)
            for (size_t i = 0; i < q->save->n; i++) {
                BIT_SET(b->cow, q->save->ids[i]);
                BIT_SET(b->guard, q->save->ids[i]);
            }
    b->snap_open--;
}

void cpri_emb_cpu_save_end(cpr_emb *t, cpr_emb_save *save, int committed)
{
    cpu_table *b = CPU(t);
    pending *p = save->backend;
    if (!p)
        return; /* the table was destroyed first */
    /* S5: every open save of the shard has moved its rows' trackers (this
     * one's into it; another's before an abort below writes rows they share,
     * which that save's copier might otherwise be moving meanwhile). */
    move_open(t, save->shard);
    for (pending **pp = &b->open; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    shard_ctr *sc = &b->shards[save->shard];
    if (!p->wiped && committed) {
        /* With counts, exactly the saved rows' events; without, a FULL or
         * DELTA save covers everything the shard had at begin. */
        uint64_t saved = t->cfg.track & CPR_TRACK_COUNTS ? p->count_sum
                         : consistent_policy(save->policy) ? p->unsaved_at_begin : 0;
        sc->unsaved -= saved < sc->unsaved ? saved : sc->unsaved;
        if (p->sampled)
            cpri_emb_ssu_end(&b->ssu, save->shard, save->ids, save->n, p->sampled, 1);
        for (size_t i = 0; i < p->n_stale; i++) /* A1 */
            mark_stale(t, p->stale[i]);
    } else if (!p->wiped) {
        restore_pending(t, save, p);
    }
    p->n_stale = 0;
    sc->open_saves--;
    if (consistent_policy(save->policy))
        sc->open_consistent = 0;
    unmark(t, save);
    cpri_emb_snap_reset(&p->snap);
    keep_spare(b, p); /* E1 */
    save->backend = NULL;
}

/* ---- apply and wipe ---------------------------------------------------------------------- */

/* The row now equals a stored copy: nothing about it is unsaved. */
static void clear_trackers(cpr_emb *t, uint64_t row)
{
    cpu_table *b = CPU(t);
    uint32_t shard = cpri_emb_geom_shard_of(t, row);
    if (b->has_counts) {
        shard_ctr *sc = &b->shards[shard];
        uint32_t c = b->trk[row].count;
        sc->unsaved -= c < sc->unsaved ? c : sc->unsaved;
        b->trk[row].count = 0;
    }
    if (b->has_norm)
        b->trk[row].norm = 0;
    if (b->touched.listed)
        cpri_emb_touched_unlist(&b->touched, row);
    if (b->dirty)
        BIT_CLR(b->dirty, row);
}

/* The row now equals a stored copy: the open saves holding it (their
 * guards moved its trackers into them) drop its pending values, so that an
 * abort does not give the row back counts, norm or dirt it no longer has;
 * a commit of theirs stores the row's copy from before, so each notes the
 * row as stale then (A1). */
static void drop_pending(cpr_emb *t, uint64_t row)
{
    cpu_table *b = CPU(t);
    if (!b->snap_open || !BIT_GET(b->cow, row))
        return;
    uint32_t shard = cpri_emb_geom_shard_of(t, row);
    shard_ctr *sc = &b->shards[shard];
    for (pending *p = b->open; p; p = p->next) {
        size_t i = p->save->shard == shard && !p->wiped ? save_index(p->save, row)
                                                         : p->save->n;
        if (i == p->save->n)
            continue;
        if (p->n_stale == p->cap_stale) {
            size_t cap = p->cap_stale ? 2 * p->cap_stale : 16;
            uint64_t *grown = realloc(p->stale, cap * sizeof *grown);
            if (grown) {
                p->stale = grown;
                p->cap_stale = cap;
            }
        }
        if (p->n_stale < p->cap_stale)
            p->stale[p->n_stale++] = row;
        else /* no memory to wait for the end: stale now, at worst saved once more */
            mark_stale(t, row);
        if (p->counts && p->counts[i]) { /* unsaved counts live + pending */
            __atomic_fetch_sub(&p->count_sum, p->counts[i], __ATOMIC_RELAXED);
            sc->unsaved -= p->counts[i] < sc->unsaved ? p->counts[i] : sc->unsaved;
            p->counts[i] = 0;
        }
        if (p->norm)
            p->norm[i] = 0;
        if (p->cons)
            p->dirty[i] = 0;
    }
}

cpr_status cpri_emb_cpu_apply(cpr_emb *t, const uint64_t *ids, size_t n, const float *values,
                             const float *state)
{
    cpu_table *b = CPU(t);
    uint32_t dim = t->cfg.dim, sd = t->state_dim;
    for (size_t i = 0; i < n; i++) {
        cpr_status st = guard_row(t, ids[i]);
        if (st)
            return st;
    }
    for (size_t i = 0; i < n; i++) {
        if (dim) /* a tracker (cpr_emb_restored) has no rows, only trackers */
            memcpy(b->weights + ids[i] * dim, values + i * dim, dim * sizeof(float));
        if (sd)
            memcpy(b->state + ids[i] * sd, state + i * sd, sd * sizeof(float));
        clear_trackers(t, ids[i]);
        drop_pending(t, ids[i]);
    }
    if (b->ssu.member) {
        cpri_emb_ssu_forget(&b->ssu, t, ids, n);
        for (pending *p = b->open; p; p = p->next)
            if (p->sampled)
                cpri_emb_ssu_unhold(p->sampled, p->save->ids, p->save->n, ids, n);
    }
    return CPR_OK;
}

cpr_status cpri_emb_cpu_wipe_shard(cpr_emb *t, uint32_t shard, uint64_t *lost_events)
{
    cpu_table *b = CPU(t);
    uint64_t n = cpri_emb_geom_shard_rows(t, shard), row = cpri_emb_geom_first(t, shard);
    uint64_t stride = cpri_emb_geom_stride(t), lost = b->shards[shard].unsaved;
    uint32_t dim = t->cfg.dim, sd = t->state_dim;
    for (pending *p = b->open; p; p = p->next) /* the open saves keep their rows */
        for (size_t i = 0; p->save->shard == shard && i < p->save->n; i++) {
            cpr_status st = guard_row(t, p->save->ids[i]);
            if (st)
                return st;
        }
    for (uint64_t i = 0; i < n; i++, row += stride) {
        if (dim)
            memset(b->weights + row * dim, 0, dim * sizeof(float));
        if (sd)
            memset(b->state + row * sd, 0, sd * sizeof(float));
        clear_trackers(t, row);
    }
    for (pending *p = b->open; p; p = p->next)
        if (p->save->shard == shard)
            p->wiped = 1;
    if (b->ssu.member)
        cpri_emb_ssu_clear_shard(&b->ssu, shard);
    if (b->touched.listed)
        cpri_emb_touched_clear_shard(&b->touched, shard);
    b->shards[shard].unsaved = 0;
    if (lost_events)
        *lost_events = lost;
    return CPR_OK;
}
