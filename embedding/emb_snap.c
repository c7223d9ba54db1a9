/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The copy-on-write snapshot of a CPU save (emb_snap.h has the design and
 * invariants). Run locks are bytes taken with the compiler's __atomic
 * builtins on plain memory: a lock per row made the copier pay an atomic
 * exchange per 68-byte row, which cost more than the copy itself.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "emb_snap.h"

enum { SNAP_KEPT = 1, SNAP_RELEASED = 2, SNAP_MOVED = 4 };

#define SNAP_CHUNK_ROWS 4096u          /* at most, a chunk of kept rows ... */
#define SNAP_CHUNK_BYTES ((size_t)1 << 20) /* ... and about this many bytes */
#define SNAP_PREFETCH 8 /* rows ahead: they are scattered over the table */

/* The other side holds a run for a few row copies; on a loaded machine it
 * may have been descheduled meanwhile, so give up the core now and then. */
static void run_lock(cpri_emb_snap *s, size_t run)
{
    unsigned spins = 0;
    while (__atomic_exchange_n(&s->lock[run], 1, __ATOMIC_ACQUIRE)) {
        while (__atomic_load_n(&s->lock[run], __ATOMIC_RELAXED)) {
            if (++spins % 64 == 0)
                sched_yield();
#if defined(__x86_64__) || defined(__i386__)
            else
                __builtin_ia32_pause();
#endif
        }
    }
}

static void run_unlock(cpri_emb_snap *s, size_t run)
{
    __atomic_store_n(&s->lock[run], 0, __ATOMIC_RELEASE);
}

cpr_status cpri_emb_snap_init(cpri_emb_snap *s, size_t n, uint32_t dim, uint32_t state_dim)
{
    if (n > UINT32_MAX) /* slots are 32-bit */
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "a save of %zu rows: a save holds at most "
                        "%u rows; save the shard in parts, or use more shards", n, UINT32_MAX);
    /* Chunks sized for the save and its rows: a small save of wide rows
     * does not reserve 4096 of them. */
    size_t row_bytes = ((size_t)dim + state_dim) * sizeof(float);
    size_t chunk_rows = row_bytes ? SNAP_CHUNK_BYTES / row_bytes : SNAP_CHUNK_ROWS;
    chunk_rows = chunk_rows > SNAP_CHUNK_ROWS ? SNAP_CHUNK_ROWS : chunk_rows;
    chunk_rows = chunk_rows > n ? n : chunk_rows;
    chunk_rows = chunk_rows ? chunk_rows : 1;
    size_t runs = n / SNAP_RUN_ROWS + 1, n_chunks = n / chunk_rows + 1;
    if (s->cap < n || !s->flags) {
        uint8_t *lock = malloc(runs), *flags = malloc(n ? n : 1);
        uint32_t *slot = malloc((n ? n : 1) * sizeof *slot);
        if (!lock || !flags || !slot) {
            free(lock);
            free(flags);
            free(slot);
            return cpr_fail(CPR_NO_MEMORY, "out of memory for the snapshot of %zu rows", n);
        }
        free(s->lock);
        free(s->flags);
        free(s->slot);
        s->lock = lock;
        s->flags = flags;
        s->slot = slot;
        s->cap = n;
    }
    float **chunks = calloc(n_chunks, sizeof *chunks);
    if (!chunks)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the snapshot of %zu rows", n);
    cpri_emb_snap_reset(s);
    s->chunks = chunks;
    s->n_chunks = n_chunks;
    memset(s->lock, 0, runs);
    memset(s->flags, 0, n);
    s->released = 0;
    s->n = n;
    s->chunk_rows = chunk_rows;
    s->dim = dim;
    s->state_dim = state_dim;
    return CPR_OK;
}

void cpri_emb_snap_reset(cpri_emb_snap *s)
{
    for (size_t c = 0; c < s->n_chunks; c++)
        free(s->chunks[c]);
    free(s->chunks);
    s->chunks = NULL;
    s->n_chunks = 0;
    s->kept = 0;
    s->n = 0;
}

void cpri_emb_snap_release(cpri_emb_snap *s)
{
    cpri_emb_snap_reset(s);
    free(s->lock);
    free(s->flags);
    free(s->slot);
    memset(s, 0, sizeof *s);
}

static float *kept_row(const cpri_emb_snap *s, uint32_t slot)
{
    size_t floats = (size_t)s->dim + s->state_dim;
    return s->chunks[slot / s->chunk_rows] + (size_t)(slot % s->chunk_rows) * floats;
}

/* Under row i's run lock: its trackers into the save, once (S5). */
static uint64_t move_once(cpri_emb_snap *s, const cpri_emb_snap_src *src, size_t i,
                          uint64_t row)
{
    if (s->flags[i] & SNAP_MOVED)
        return 0;
    s->flags[i] |= SNAP_MOVED;
    return src->move ? src->move(src->move_ctx, i, row) : 0;
}

cpr_status cpri_emb_snap_keep(cpri_emb_snap *s, const cpri_emb_snap_src *src, size_t i,
                              uint64_t row, uint64_t *moved_count)
{
    size_t floats = (size_t)s->dim + s->state_dim, run = i / SNAP_RUN_ROWS;
    if (floats == 0) { /* a tracker (cpr_emb_create_tracker) holds no rows to keep */
        run_lock(s, run);
        *moved_count = move_once(s, src, i, row);
        run_unlock(s, run);
        return CPR_OK;
    }
    const float *values = src->weights + row * s->dim;
    const float *state = s->state_dim ? src->state + row * s->state_dim : NULL;
    run_lock(s, run);
    for (;;) {
        int need = !(s->flags[i] & (SNAP_KEPT | SNAP_RELEASED));
        size_t c = s->kept / s->chunk_rows; /* kept < n while a row needs keeping */
        if (!need || s->chunks[c])
            break;
        /* A chunk for the kept rows, allocated outside the lock; a failure
         * leaves everything as it was. Only this thread adds kept rows (S4). */
        run_unlock(s, run);
        s->chunks[c] = malloc(s->chunk_rows * floats * sizeof(float));
        if (!s->chunks[c])
            return cpr_fail(CPR_NO_MEMORY, "out of memory keeping a row of an open save");
        run_lock(s, run);
    }
    *moved_count = move_once(s, src, i, row);
    if (!(s->flags[i] & (SNAP_KEPT | SNAP_RELEASED))) {
        uint32_t slot = (uint32_t)s->kept++;
        float *dst = kept_row(s, slot);
        cpri_copy_floats(dst, values, s->dim);
        if (s->state_dim)
            cpri_copy_floats(dst + s->dim, state, s->state_dim);
        s->slot[i] = slot;
        s->flags[i] |= SNAP_KEPT;
    }
    run_unlock(s, run);
    return CPR_OK;
}

static void prefetch_src(const cpri_emb_snap *s, const cpri_emb_snap_src *src, uint64_t row)
{
    const char *w = (const char *)(src->weights + row * s->dim);
    for (size_t off = 0; off < (size_t)s->dim * 4; off += 64)
        __builtin_prefetch(w + off);
    if (s->state_dim)
        __builtin_prefetch(src->state + row * s->state_dim);
}

uint64_t cpri_emb_snap_move_all(cpri_emb_snap *s, const cpri_emb_snap_src *src)
{
    uint64_t moved = 0;
    for (size_t run = 0; run * SNAP_RUN_ROWS < s->n; run++) {
        size_t end = (run + 1) * SNAP_RUN_ROWS < s->n ? (run + 1) * SNAP_RUN_ROWS : s->n;
        run_lock(s, run);
        for (size_t i = run * SNAP_RUN_ROWS; i < end; i++)
            moved += move_once(s, src, i, src->ids[i]);
        run_unlock(s, run);
    }
    return moved;
}

cpr_status cpri_emb_snap_copy(cpri_emb_snap *s, const cpri_emb_snap_src *src, size_t first,
                              size_t k, float *values, float *state, int release,
                              uint64_t *moved_count)
{
    cpr_status st = CPR_OK;
    uint64_t moved = 0;
    uint32_t dim = s->dim, sd = s->state_dim;
    for (size_t i = first; i < first + k && st == CPR_OK;) {
        size_t run = i / SNAP_RUN_ROWS, end = (run + 1) * SNAP_RUN_ROWS;
        end = end < first + k ? end : first + k;
        run_lock(s, run);
        for (; i < end; i++) {
            float *v = values + (i - first) * dim, *sv = sd ? state + (i - first) * sd : NULL;
            uint64_t row = src->ids[i];
            if (i + SNAP_PREFETCH < first + k)
                prefetch_src(s, src, src->ids[i + SNAP_PREFETCH]);
            if (s->flags[i] & SNAP_RELEASED) {
                st = cpr_fail(CPR_FAILED_PRECONDITION, "row %zu of the save was copied out "
                              "already (cpr_emb_save_copy copies each row once)", i);
                break;
            }
            moved += move_once(s, src, i, row);
            if (s->flags[i] & SNAP_KEPT) {
                const float *kept = kept_row(s, s->slot[i]);
                cpri_copy_floats(v, kept, dim);
                if (sd)
                    cpri_copy_floats(sv, kept + dim, sd);
            } else {
                cpri_copy_floats(v, src->weights + row * dim, dim);
                if (sd)
                    cpri_copy_floats(sv, src->state + row * sd, sd);
            }
            if (release)
                s->flags[i] |= SNAP_RELEASED;
        }
        run_unlock(s, run);
    }
    if (release && st == CPR_OK) /* after the rows' reads: pairs with all_released */
        __atomic_fetch_add(&s->released, k, __ATOMIC_RELEASE);
    *moved_count = moved;
    return st;
}

int cpri_emb_snap_all_released(const cpri_emb_snap *s)
{
    return __atomic_load_n(&s->released, __ATOMIC_ACQUIRE) == s->n;
}
