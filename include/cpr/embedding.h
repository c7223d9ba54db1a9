/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/embedding.h - embedding tables for recommendation models, with the
 * access tracking and row selection that CPR's prioritized checkpointing
 * needs. One API for CPU tables and CUDA tables (chosen at creation).
 *
 * Training: EmbeddingBag forward (sum or mean pooling over bags given as
 * indices + offsets, like PyTorch's nn.EmbeddingBag) and a backward that
 * applies the sparse update directly (SGD, row-wise Adagrad, Adagrad) and,
 * in the same pass, updates the trackers:
 *   counts   update events per row since the row was last saved   (MFU)
 *   dirty    rows modified since the shard's last FULL/DELTA save  (DELTA)
 *   sampled  a sub-sample of used rows, each access kept with
 *            probability ssu_rate, at most ssu_capacity rows/shard  (SSU)
 *   norm     accumulated squared update magnitude since last save  (TOPK_NORM)
 *   unsaved  per shard: update events not yet in a committed save  (PLS)
 *
 * Saving a shard (the save protocol):
 *   cpr_emb_select      choose rows by policy and budget;
 *   cpr_emb_save_begin  move the chosen rows' tracker values into a pending
 *                       save (training may go on and re-dirty them);
 *   cpr_emb_gather      copy ids, values and optimizer state into host memory
 *   or cpr_emb_save_copy  (the rows as they were at begin, on any thread while
 *                       training goes on: a save is a snapshot);
 *   cpr_emb_save_commit once the checkpoint committed: drop the pending values
 *                       (the rows are now saved); or
 *   cpr_emb_save_abort  the save failed: the pending values return, as if the
 *                       save had never started.
 * Invariant: for every row, live tracker value + pending values of open saves
 * = accumulation since the row's last committed save. unsaved_events counts
 * both, so PLS is exact even while saves are in flight.
 *
 * Memory spaces: for CPU tables every pointer is host memory. For CUDA tables
 * the training arrays (indices, offsets, output, gradients) are device
 * pointers; ids, values and state of select/gather/apply are host memory.
 *
 * Threading: a table is used by one thread at a time (like a model replica),
 * except cpr_emb_save_copy (see there).
 * Errors: cpr_status; cpr_errmsg() says what to fix; out-parameters are
 * written only on success; a failed call leaves the table unchanged.
 */
#ifndef CPR_EMBEDDING_H
#define CPR_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/block.h"
#include "cpr/export.h"
#include "cpr/status.h"
#include "cpr/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cpr_emb cpr_emb;
typedef struct cpr_emb_save cpr_emb_save;

typedef enum cpr_optimizer {
    CPR_OPT_SGD = 0,             /* no state */
    CPR_OPT_ROWWISE_ADAGRAD = 1, /* 1 float of state per row */
    CPR_OPT_ADAGRAD = 2          /* dim floats of state per row */
} cpr_optimizer;

typedef enum cpr_pooling { CPR_POOL_SUM = 0, CPR_POOL_MEAN = 1 } cpr_pooling;
typedef enum cpr_device_kind { CPR_DEVICE_CPU = 0, CPR_DEVICE_CUDA = 1 } cpr_device_kind;

/* Which rows a shard owns: contiguous ranges of ceil(rows / n), or row % n. */
typedef enum cpr_shard_scheme { CPR_SHARD_RANGE = 0, CPR_SHARD_MODULO = 1 } cpr_shard_scheme;

enum {
    CPR_TRACK_COUNTS = 1,  /* MFU counts (also what unsaved_events sums) */
    CPR_TRACK_DIRTY = 2,
    CPR_TRACK_SSU = 4,
    CPR_TRACK_NORM = 8,
    CPR_TRACK_ALL = 15
};

/* cpr_policy and its names: cpr/types.h. */

/*
 * Zero-initialise, then set. Zero fields take the defaults in brackets.
 * Fields are only ever appended.
 */
typedef struct cpr_emb_config {
    uint64_t rows;             /* >= 1 */
    uint32_t dim;              /* 1..4096 */
    cpr_optimizer optimizer;   /* [SGD] */
    float learning_rate;       /* [0.01] */
    float eps;                 /* Adagrad epsilon [1e-8] */
    float init_scale;          /* weights ~ U(-s, s) [1/sqrt(rows)]; state starts at 0 */
    uint64_t seed;             /* weights and SSU sampling [0] */
    uint32_t num_shards;       /* [1] */
    cpr_shard_scheme scheme;   /* [RANGE] */
    unsigned track;            /* CPR_TRACK_* bits; 0 = no tracking */
    double ssu_rate;           /* probability an access is sampled [0.01] */
    uint64_t ssu_capacity;     /* sampled rows kept per shard [rows/shards/8 + 1] */
    cpr_device_kind device;    /* [CPU] */
    int cuda_device;           /* [0] */
} cpr_emb_config;

/* Create a table; *out owns it (release with cpr_emb_destroy). Errors:
 * CPR_INVALID_ARGUMENT (bad config), CPR_NO_MEMORY, CPR_CUDA (no device or
 * built without CUDA, with the reason). */
CPR_API cpr_status cpr_emb_create(const cpr_emb_config *config, cpr_emb **out);
/* Open saves end with the table: their handles are freed and must not be
 * used afterwards. NULL is a no-op. */
CPR_API void cpr_emb_destroy(cpr_emb *table);

CPR_API uint64_t cpr_emb_rows(const cpr_emb *table);
CPR_API uint32_t cpr_emb_dim(const cpr_emb *table);
CPR_API uint32_t cpr_emb_state_dim(const cpr_emb *table); /* 0, 1 or dim */
CPR_API uint32_t cpr_emb_num_shards(const cpr_emb *table);
CPR_API cpr_shard_scheme cpr_emb_scheme(const cpr_emb *table);
CPR_API cpr_device_kind cpr_emb_device(const cpr_emb *table);

/* Shard that owns `row`; rows owned by `shard`. */
CPR_API uint32_t cpr_emb_shard_of(const cpr_emb *table, uint64_t row);
CPR_API uint64_t cpr_emb_shard_rows(const cpr_emb *table, uint32_t shard);

/*
 * out[b] = sum (or mean) of rows indices[offsets[b] .. offsets[b+1]) with
 * offsets[n_bags] taken as n_indices; an empty bag gives zeros.
 * out: n_bags x dim floats. CPR_INVALID_ARGUMENT for an index outside the
 * table or offsets that are not non-decreasing within [0, n_indices].
 */
CPR_API cpr_status cpr_emb_forward(cpr_emb *table, const int64_t *indices, size_t n_indices,
                           const int64_t *offsets, size_t n_bags, cpr_pooling pooling,
                           float *out);

/*
 * Apply the gradient of the loss with respect to the forward's output
 * (grad: n_bags x dim) to the rows used, with the table's optimizer; occurrences
 * of a row within one call are summed first (one optimizer step per row per
 * call), and the trackers are updated in the same pass. Validation happens
 * before anything changes.
 */
CPR_API cpr_status cpr_emb_backward(cpr_emb *table, const int64_t *indices, size_t n_indices,
                            const int64_t *offsets, size_t n_bags, cpr_pooling pooling,
                            const float *grad);

typedef struct cpr_emb_stats {
    uint64_t update_events;   /* every row update event so far (this shard) */
    uint64_t unsaved_events;  /* events not yet covered by a committed save */
    uint64_t dirty_rows;      /* rows a DELTA would save now */
    uint64_t sampled_rows;    /* rows in the SSU sample */
    uint64_t touched_rows;    /* rows with a non-zero count */
    uint64_t open_saves;
} cpr_emb_stats;

CPR_API cpr_status cpr_emb_stats_get(const cpr_emb *table, uint32_t shard, cpr_emb_stats *out);

/* The shard's update_events and unsaved_events of cpr_emb_stats only, without
 * the counts of dirty and touched rows (which read every row of the shard):
 * what a trainer reports at every save. O(1) on a CPU table. */
CPR_API cpr_status cpr_emb_events(const cpr_emb *table, uint32_t shard, uint64_t *update_events,
                                  uint64_t *unsaved_events);

/*
 * Change the probability that an access is sampled into the SSU sample, from
 * the next backward on (rate in [0, 1]; 0 samples nothing). A trainer that
 * knows how many accesses an interval between saves brings sets it so that
 * each save is offered about twice its budget of sampled rows (the rule of
 * docs/model.md); the sample keeps what it holds. CPR_INVALID_ARGUMENT for a
 * rate outside [0, 1] or NaN.
 */
CPR_API cpr_status cpr_emb_set_ssu_rate(cpr_emb *table, double rate);

/* Bytes of tracker memory per row for the tracker bits in `track`
 * (documented overhead; SSU adds 8 bytes per sampled row). */
CPR_API double cpr_emb_tracker_bytes_per_row(unsigned track);

/* A budget: exactly one of `fraction` (of the shard's rows, rounded up) or
 * `rows`. Ignored by FULL and DELTA. */
typedef struct cpr_budget {
    double fraction;
    uint64_t rows;
} cpr_budget;

/*
 * Choose the rows `policy` saves for `shard`, in ascending id order, into
 * ids[0 .. *n) (capacity `cap`; cpr_emb_shard_rows() always suffices).
 * MFU and TOPK_NORM return the rows with the largest non-zero tracker values
 * (at most budget; ties broken toward lower ids); SSU the oldest sampled rows
 * (at most budget); DELTA every dirty row; FULL every row. Requires the
 * policy's tracker (CPR_FAILED_PRECONDITION otherwise).
 */
CPR_API cpr_status cpr_emb_select(cpr_emb *table, uint32_t shard, cpr_policy policy,
                          cpr_budget budget, uint64_t *ids, size_t cap, size_t *n);

/*
 * Start saving rows ids[0..n) of `shard` under `policy` (the ids are
 * copied). FULL and DELTA saves also clear the rows' dirty bits (restored on
 * abort); at most one FULL/DELTA save per shard may be open
 * (CPR_FAILED_PRECONDITION). Ids must belong to the shard.
 */
CPR_API cpr_status cpr_emb_save_begin(cpr_emb *table, uint32_t shard, cpr_policy policy,
                              const uint64_t *ids, size_t n, cpr_emb_save **out);

/* Number of rows and the ids (ascending) of a save; valid until it ends. */
CPR_API size_t cpr_emb_save_rows(const cpr_emb_save *save);
CPR_API const uint64_t *cpr_emb_save_ids(const cpr_emb_save *save);

/*
 * Copy the save's rows into host memory: values (n x dim) and state
 * (n x state_dim; may be NULL when state_dim is 0), in the order of
 * cpr_emb_save_ids(): the rows as they were at cpr_emb_save_begin, however
 * training changed them since (every call alike). A CPU table refuses with
 * CPR_FAILED_PRECONDITION once cpr_emb_save_copy copied rows of the save
 * out; a CUDA table copies from the save's snapshot (see cpr_emb_save_copy)
 * and has completed the copy when this returns.
 */
CPR_API cpr_status cpr_emb_gather(cpr_emb *table, const cpr_emb_save *save, float *values,
                          float *state);

/*
 * Copy rows [first, first + k) of the save (in the order of
 * cpr_emb_save_ids()) as they were at cpr_emb_save_begin into values
 * (k x dim) and state (k x state_dim; NULL when state_dim is 0), and let the
 * save forget them: each row is copied out once (on a CPU table a second
 * copy of a row is CPR_FAILED_PRECONDITION).
 *
 * On a CPU table this may run on another thread while the training thread
 * goes on with forward, backward, apply and wipe: the table keeps each
 * row's begin-time values aside before it first changes a row not yet
 * copied (copy-on-write), so the training thread's stall for a save is its
 * select and begin, and the copy happens in the background (the client's
 * sender calls it through cpr_part_put_deferred). Concurrent copies of
 * disjoint ranges are fine. The save must not end (commit, abort, destroy)
 * before every copy returned. Memory: at most one row (plus its state) for
 * each row of the save the training thread changes before it is copied.
 *
 * On a CUDA table: cpr_emb_save_begin gathered the save's rows into a
 * snapshot in device memory (host memory when the device had no room), so
 * the stall is the device-side gather; copies run on a stream of their own,
 * on any thread, with the same rules. Memory: the save's rows and state,
 * until it ends. CPR_INVALID_ARGUMENT for a range outside the save or
 * missing buffers.
 */
CPR_API cpr_status cpr_emb_save_copy(cpr_emb *table, cpr_emb_save *save, size_t first,
                                     size_t k, float *values, float *state);

/*
 * cpr_emb_save_copy in the shape of a cpr_part_put_deferred fill
 * (cpr/client.h: `.fill = cpr_emb_save_fill, .ctx = save`): the save knows
 * its table. dim and state_dim, the part schema's, must be the table's
 * (CPR_INVALID_ARGUMENT, nothing copied). Keep the save open until the part
 * is committed or aborted.
 */
CPR_API cpr_status cpr_emb_save_fill(void *save, size_t first, size_t k, uint32_t dim,
                                     uint32_t state_dim, float *values, float *state);

/*
 * cpr_emb_save_copy with the values encoded in `codec` (cpr/codec.h): values
 * gets k x cpr_codec_row_bytes(codec, dim) bytes, the bytes
 * cpr_codec_encode(codec, 0, ...) writes for the rows cpr_emb_save_copy would
 * copy; state stays float
 * (k x state_dim; NULL when state_dim is 0). On a CUDA table the rows are
 * encoded on the device from the save's snapshot and only the encoded bytes
 * cross to the host (an int8 row of 64 values is 72 bytes, not 256); on a
 * CPU table they are copied and encoded on the calling thread. The rules of
 * cpr_emb_save_copy hold (any thread, each row once). Errors: those of
 * cpr_emb_save_copy; CPR_INVALID_ARGUMENT for an unknown codec, or a row the
 * codec cannot hold (NaN, infinity, beyond f16's range: the message names
 * the row and value, and the rows count as copied).
 */
CPR_API cpr_status cpr_emb_save_copy_encoded(cpr_emb *table, cpr_emb_save *save, size_t first,
                                             size_t k, cpr_codec codec, void *values,
                                             float *state);

/* cpr_emb_save_copy_encoded in the shape of a cpr_part_put_deferred
 * fill_encoded (`.fill_encoded = cpr_emb_save_fill_encoded, .ctx = save`). */
CPR_API cpr_status cpr_emb_save_fill_encoded(void *save, size_t first, size_t k, uint32_t dim,
                                             uint32_t state_dim, cpr_codec codec, void *values,
                                             float *state);

/*
 * A CPU table's rows in host memory, to copy them out without a buffer in
 * between (cpr_part_put_gather with the save's ids): row r's values are at
 * values + r * values_stride and its optimizer state at state +
 * r * state_stride (floats; state NULL when state_dim is 0). This is the live
 * table: read it only between training steps, where a save's snapshot is
 * taken. Valid until the table is destroyed. CUDA tables:
 * CPR_FAILED_PRECONDITION (their rows are in device memory: cpr_emb_gather).
 */
typedef struct cpr_emb_host_view {
    const float *values;
    size_t values_stride;
    const float *state;
    size_t state_stride;
} cpr_emb_host_view;
CPR_API cpr_status cpr_emb_view(const cpr_emb *table, cpr_emb_host_view *out);

/* The checkpoint holding the save committed: the pending tracker values are
 * dropped. Frees `save`. */
CPR_API cpr_status cpr_emb_save_commit(cpr_emb *table, cpr_emb_save *save);
/* The save failed: pending tracker values return to the rows. Frees `save`.
 * NULL is a no-op. */
CPR_API void cpr_emb_save_abort(cpr_emb *table, cpr_emb_save *save);

/*
 * Write restored rows (values n x dim, state n x state_dim, host memory)
 * into the table. The rows' trackers are cleared: they now equal their
 * stored copies. CPR_INVALID_ARGUMENT for an id outside the table.
 */
CPR_API cpr_status cpr_emb_apply(cpr_emb *table, const uint64_t *ids, size_t n,
                         const float *values, const float *state);

/* ---- trackers over tables the library does not own ---------------------------- */

/*
 * The trackers and the row selection of this module for a table someone
 * else owns and trains (a PyTorch nn.Embedding, a table in a framework's
 * memory): a tracker is a cpr_emb without rows. Create it with the table's
 * geometry (rows, num_shards, scheme) and the trackers wanted (track, ssu_rate,
 * ssu_capacity, seed; dim, optimizer, learning_rate and init_scale are
 * ignored; device must be CPU), then:
 *   cpr_emb_observe       after each update of the table: the indices it
 *                         updated (and, for TOPK_NORM, how much);
 *   cpr_emb_select, cpr_emb_save_begin   exactly as for a table;
 *   the rows themselves   the caller copies them out of its own table
 *                         before it next changes them (cpr_part_put_gather
 *                         reads ids straight from a pointer and a row stride);
 *   cpr_emb_save_commit / cpr_emb_save_abort, cpr_emb_stats_get,
 *   cpr_emb_events, cpr_emb_set_ssu_rate, cpr_emb_wipe_shard  as for a table;
 *   cpr_emb_restored      rows the caller wrote from a checkpoint.
 * The same code tracks and selects as for the library's own CPU tables:
 * observing the indices a backward updates gives the same MFU counts, dirty
 * rows and SSU sample as that backward (tests/unit/test_emb_tracker.c).
 * What needs rows (forward, backward, gather, save_copy, save_fill, view,
 * apply) is CPR_FAILED_PRECONDITION; cpr_emb_dim is 0.
 */
CPR_API cpr_status cpr_emb_create_tracker(const cpr_emb_config *config, cpr_emb **out);

/*
 * The table updated the rows `indices` (n of them, each in [0, rows);
 * repeats count as in cpr_emb_backward: an MFU count grows by the
 * occurrences, a row is dirtied and may be sampled once per call).
 * sq_change (n floats, or NULL) is each occurrence's squared update
 * magnitude, summed per row into TOPK_NORM's accumulator (NULL adds 0).
 * Checked before anything changes: CPR_INVALID_ARGUMENT for an index
 * outside the table or a sq_change that is negative or not finite;
 * CPR_FAILED_PRECONDITION on a table (its backward tracks itself).
 */
CPR_API cpr_status cpr_emb_observe(cpr_emb *tracker, const int64_t *indices, size_t n,
                                   const float *sq_change);

/*
 * The rows ids[0..n) now equal their stored copies (the caller restored
 * them): their trackers are cleared, as cpr_emb_apply clears a table's.
 * CPR_INVALID_ARGUMENT for an id outside the table; CPR_FAILED_PRECONDITION
 * on a table (use cpr_emb_apply).
 */
CPR_API cpr_status cpr_emb_restored(cpr_emb *tracker, const uint64_t *ids, size_t n);

/*
 * Emulate the loss of a shard's node: its rows, optimizer state and trackers
 * are zeroed, and its open saves become inert (their commit or abort then
 * changes nothing but frees them). Returns, in *lost_events (may be NULL),
 * the shard's unsaved events at that moment: the updates a partial recovery
 * loses.
 */
CPR_API cpr_status cpr_emb_wipe_shard(cpr_emb *table, uint32_t shard, uint64_t *lost_events);

#ifdef __cplusplus
}
#endif
#endif /* CPR_EMBEDDING_H */
