/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The copy-on-write snapshot of a CPU table's save (issue #9: a save's stall
 * is a snapshot and nothing more). A save's rows are copied out by another
 * thread (the client's sender, through cpr_emb_save_copy) while the training
 * thread keeps updating the table; before the training thread changes a row
 * the save has not copied out yet, it keeps the row's begin-time values
 * aside, and the copier takes them from there.
 *
 * The save's rows (index i in its id order) are grouped in runs of
 * SNAP_RUN_ROWS, each with a one-byte spin lock; per row, three flags:
 *
 *   KEPT      the training thread copied the row aside (slot[i]) before it
 *             changed it;
 *   RELEASED  a copier copied the row out for the last time
 *             (cpr_emb_save_copy): nobody needs it any more;
 *   MOVED     the row's tracker values went into the save (the `move` hook,
 *             emb_cpu.c): whoever reaches the row first under its lock, a
 *             copier or the training thread, moves them, so a save's begin
 *             does not touch every row's trackers in the stall.
 *
 * Invariants:
 *  S1. A row neither KEPT nor RELEASED holds its begin-time values in the
 *      table: the training thread changes a row of an open save only after
 *      cpri_emb_snap_keep returned for it.
 *  S2. Flags, slots and kept rows are read and written only under their
 *      run's lock (acquire to take it, release to drop it). A copier holds
 *      a run for the copy of at most SNAP_RUN_ROWS rows; the training thread
 *      for the copy of one. The copier takes one lock per run, not per row.
 *  S3. A RELEASED row is never read again; copying it once more is
 *      CPR_FAILED_PRECONDITION. Nothing here is freed while a copier runs:
 *      the caller ends a save only after its copies returned.
 *  S4. Only the training thread adds kept rows (chunks, `kept`): chunk
 *      pointers are published to copiers through the run lock (S2).
 *  S5. A row's trackers are moved exactly once, under its run's lock, before
 *      the training thread changes the row (cpri_emb_snap_keep) and before a
 *      copier releases it; the training thread reads or writes the trackers
 *      of a row of an open save only after it was moved
 *      (cpri_emb_snap_keep, or cpri_emb_snap_move_all first).
 *  S6. `released` counts RELEASED rows; it reaches n only after every row's
 *      last copy and move (cpri_emb_snap_all_released).
 */
#ifndef CPR_EMB_SNAP_H
#define CPR_EMB_SNAP_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/status.h"

#define SNAP_RUN_ROWS 64u

typedef struct cpri_emb_snap {
    uint8_t *lock;         /* per run of SNAP_RUN_ROWS rows (atomic accesses only) */
    uint8_t *flags;        /* per row: KEPT, RELEASED (under the run's lock) */
    uint32_t *slot;        /* per KEPT row: its place among the kept rows */
    float **chunks;        /* kept rows, chunk_rows a chunk: values then state */
    size_t n_chunks;       /* chunk pointers allocated (each NULL until used) */
    size_t chunk_rows;     /* at most 4096, about 1 MiB, at most the save's rows */
    size_t kept;           /* rows kept so far */
    size_t n, cap;         /* rows of the save; capacity of the per-row arrays */
    size_t released;       /* rows copied out for the last time (S6; atomic) */
    uint32_t dim, state_dim;
} cpri_emb_snap;

/* Ready for a save of n rows (none kept or released), reusing the arrays
 * of an ended save when they are large enough (E1 in emb_cpu.c).
 * CPR_RESOURCE_EXHAUSTED above UINT32_MAX rows (a kept row's slot is
 * 32-bit). */
cpr_status cpri_emb_snap_init(cpri_emb_snap *s, size_t n, uint32_t dim, uint32_t state_dim);
/* Free the kept rows only (the arrays stay for the next save). */
void cpri_emb_snap_reset(cpri_emb_snap *s);
/* Free everything. */
void cpri_emb_snap_release(cpri_emb_snap *s);

/* Where a copier finds a row in the table (emb_cpu.c knows the layout), and
 * the hook that moves row i's trackers into the save (S5; NULL: none). The
 * hook runs under the row's run lock and returns the MFU count it moved. */
typedef struct cpri_emb_snap_src {
    const float *weights, *state;  /* the table's arrays (state NULL: state_dim 0) */
    const uint64_t *ids;           /* the save's ids */
    uint64_t (*move)(void *ctx, size_t i, uint64_t row); /* row = ids[i] */
    void *move_ctx;
} cpri_emb_snap_src;

/* The training thread, before row i changes: move its trackers (S5), and
 * keep its current values unless it is kept or released already. `row` is
 * src->ids[i], which the caller knows (read here, it missed the cache).
 * CPR_NO_MEMORY if no chunk can be allocated (the caller must not change
 * the row then; nothing was moved). *moved_count gets the count moved (0
 * when a copier moved it). */
cpr_status cpri_emb_snap_keep(cpri_emb_snap *s, const cpri_emb_snap_src *src, size_t i,
                              uint64_t row, uint64_t *moved_count);

/* S6: every row was copied out for the last time (RELEASED, trackers
 * moved): the training thread may change any row of the save without a
 * guard. The copier adds the rows it released after its last read of them
 * (release), so a training thread that saw this return 1 (acquire) writes
 * them only after those reads. */
int cpri_emb_snap_all_released(const cpri_emb_snap *s);

/* The training thread: move every row not moved yet (before it reads the
 * trackers of the save's shard, or ends the save). Returns the counts moved. */
uint64_t cpri_emb_snap_move_all(cpri_emb_snap *s, const cpri_emb_snap_src *src);

/* A copier: rows [first, first + k) as they were at the save's begin into
 * values (k x dim) and state (k x state_dim), moving their trackers (S5);
 * `release` when this is the rows' last copy (S3). *moved_count gets the
 * counts it moved. */
cpr_status cpri_emb_snap_copy(cpri_emb_snap *s, const cpri_emb_snap_src *src, size_t first,
                              size_t k, float *values, float *state, int release,
                              uint64_t *moved_count);

#endif /* CPR_EMB_SNAP_H */
