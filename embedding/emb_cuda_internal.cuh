/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the files of the CUDA embedding backend: emb_cuda.cu
 * (table, forward, backward), emb_cuda_select.cu (stats, selection, saves,
 * apply, wipe) and emb_cuda_codec.cu (a save's rows copied out encoded). The table's rows, optimizer state and
 * per-row trackers live on the device; the SSU sample (membership bitmap and
 * per-shard lists) and the save bookkeeping live on the host, where they
 * follow emb_cpu.c step by step so both backends select the same rows.
 */
#ifndef CPR_EMB_CUDA_INTERNAL_CUH
#define CPR_EMB_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <pthread.h>

#include "cpr_common.h"
#include "emb_internal.h"
#include "emb_ssu.h"

#define EMB_HIDDEN __attribute__((visibility("hidden")))

/* Every CUDA call is checked; the runtime's message goes to cpr_errmsg().
 * Needs `cpr_status st` and an `out:` label (declare variables before the
 * first CHECK: C++ forbids jumping over initialisations). */
#define CHECK(call)                                                            \
    do {                                                                       \
        cudaError_t err_ = (call);                                             \
        if (err_ != cudaSuccess) {                                             \
            cudaGetLastError(); /* clear a non-sticky error (e.g. OOM) */      \
            st = cpr_fail(err_ == cudaErrorMemoryAllocation ? CPR_NO_MEMORY    \
                                                            : CPR_CUDA,        \
                          "%s failed: %s", #call, cudaGetErrorString(err_));   \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* A kernel launch: configuration errors surface at once, faults at the next
 * synchronisation (also checked). */
#define CHECK_LAUNCH() CHECK(cudaGetLastError())

/* Host bytes staged through pinned memory per chunk of gather or apply. */
#define EMB_STAGING_BYTES (32u << 20)
#define EMB_STAGING_MIN_BYTES (256u << 10) /* the first pinned staging (emb_pinned_get) */
/* Grid size for grid-stride kernels: enough blocks to fill any current GPU. */
#define EMB_MAX_BLOCKS 65535u

typedef unsigned long long ull;

/* Shard geometry as kernels need it (a copy of emb.c's arithmetic). */
typedef struct emb_geom {
    uint64_t range_rows;
    uint32_t num_shards;
    int modulo;
} emb_geom;

/* Per-shard event counters, on the device (updated by backward). */
typedef struct emb_shard_dev {
    ull events;   /* update events so far */
    ull unsaved;  /* events not yet covered by a committed save */
} emb_shard_dev;

typedef struct emb_shard_host {
    uint64_t open_saves;
    int open_consistent;    /* a FULL/DELTA save is open */
} emb_shard_host;

/* An open save's pending tracker values (save->backend). */
typedef struct emb_pending {
    uint64_t *d_ids;        /* device copy of save->ids (gather reads it) */
    uint32_t *d_counts;     /* device, per id; NULL without CPR_TRACK_COUNTS */
    float *d_norm;          /* device, per id; NULL without CPR_TRACK_NORM */
    uint8_t *d_dirty;       /* device, per id: was dirty (FULL/DELTA saves only) */
    uint8_t *sampled;       /* host, per id: was in the SSU sample */
    /* The save's rows as they were at begin (invariant G1 in
     * emb_cuda_select.cu): n x dim values, then n x state_dim state. On the
     * device (stream-ordered allocation on the table's stream) when it has
     * room, else in host memory; the other is NULL. */
    float *d_snap;
    float *h_snap;
    uint64_t count_sum;
    uint64_t unsaved_at_begin;
    int wiped;              /* the shard was wiped while this save was open */
    struct emb_pending *next;
    cpr_emb_save *save;
} emb_pending;

typedef struct emb_cuda_table {
    int device;
    cudaStream_t stream;
    cudaStream_t copy_stream; /* non-blocking: snapshots to the host, any thread */
    emb_geom geom;
    /* device */
    float *weights, *state;
    uint32_t *counts;       /* CPR_TRACK_COUNTS */
    ull *dirty;             /* CPR_TRACK_DIRTY bitmap */
    float *norm;            /* CPR_TRACK_NORM */
    emb_shard_dev *shards_dev;
    void *scratch;          /* grow-only arena for one call's temporaries */
    size_t scratch_bytes;
    /* host */
    cpri_emb_ssu ssu;        /* the SSU sample, host memory (emb_ssu.c, as the CPU) */
    emb_shard_host *shards;
    emb_pending *open;      /* open saves */
    uint64_t calls;
    ull *pinned_small;      /* a few pinned words for results read back */
    void *pinned;           /* pinned staging, pinned_bytes, grown on use (emb_pinned_get) */
    size_t pinned_bytes;
    /* encoded copies (emb_cuda_codec.cu, C3): device scratch, grown, and a
     * pinned word, one copy at a time under enc_mu */
    pthread_mutex_t enc_mu;
    uint8_t *enc_dev;
    size_t enc_cap;
    ull *enc_flag;
} emb_cuda_table;

#define CUDA_T(t) ((emb_cuda_table *)(t)->backend)

/* One call's temporaries: fill `bytes`, then emb_scratch_get sets `*ptr`. */
typedef struct emb_scratch_part {
    void **ptr;
    size_t bytes;
} emb_scratch_part;

EMB_HIDDEN cpr_status emb_scratch_get(emb_cuda_table *b, emb_scratch_part *parts, int n);
EMB_HIDDEN cpr_status emb_pinned_get(emb_cuda_table *b, size_t bytes);
EMB_HIDDEN unsigned emb_blocks(uint64_t work, unsigned per_block);
EMB_HIDDEN unsigned emb_row_threads(uint32_t dim);

/* Frees an open save's pending arrays, its snapshot and the record itself. */
EMB_HIDDEN void emb_free_pending(emb_cuda_table *b, emb_pending *p);

/* The shard of a row, on the device (emb.c's arithmetic). */
static __device__ __forceinline__ uint32_t emb_dev_shard_of(emb_geom g, uint64_t row)
{
    return g.modulo ? (uint32_t)(row % g.num_shards) : (uint32_t)(row / g.range_rows);
}


#endif /* CPR_EMB_CUDA_INTERNAL_CUH */
