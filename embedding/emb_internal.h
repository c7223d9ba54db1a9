/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the embedding front end (emb.c: validation, defaults,
 * shard geometry, dispatch) and its two backends: emb_cpu.c and emb_cuda.cu
 * (emb_cuda_none.c when CUDA is not built). The front end validates every
 * host-visible argument before a backend runs, so backends may assume:
 * shard < num_shards; ids < rows; policies have their trackers; budgets are
 * resolved to a row count (`budget_rows`). Index/offset arrays of CUDA tables
 * live on the device and are checked there (CPR_INVALID_ARGUMENT on a bad one).
 * A backend's destroy frees the saves still open on the table (each
 * cpr_emb_save, its ids and its pending state): cpr_emb_destroy ends them.
 */
#ifndef CPR_EMB_INTERNAL_H
#define CPR_EMB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/block.h"
#include "cpr/rng.h"
#include "cpr/embedding.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cpr_emb {
    cpr_emb_config cfg;        /* defaults filled in */
    uint32_t state_dim;
    uint64_t range_rows;       /* RANGE scheme: rows per shard (last may be short) */
    void *backend;             /* emb_cpu.c / emb_cuda.cu private state */
    uint64_t *spare_ids;       /* an ended save's ids array, kept for the next (E1) */
    size_t spare_cap;
    uint64_t ssu_threshold;    /* cfg.ssu_rate * 2^64, saturated; read by every backward */
    int tracker_only;          /* cpr_emb_create_tracker: no rows (cfg.dim 0, no state),
                                  CPU only; the front end refuses what needs rows and
                                  the backend sees cpr_emb_observe instead of backward */
};

struct cpr_emb_save {
    cpr_emb *table;            /* the table it saves (cpr_emb_save_fill) */
    uint32_t shard;
    cpr_policy policy;
    size_t n;
    uint64_t *ids;             /* host, ascending; owned */
    size_t cap;                /* ids' capacity */
    void *backend;             /* pending tracker values; owned by the backend */
};

/* Bit i of a bitmap of 64-bit words (dirty, cow, the SSU sample, the
 * touched lists; host memory). */
#define BIT_GET(map, i) (((map)[(i) >> 6] >> ((i) & 63)) & 1u)
#define BIT_SET(map, i) ((map)[(i) >> 6] |= 1ull << ((i) & 63))
#define BIT_CLR(map, i) ((map)[(i) >> 6] &= ~(1ull << ((i) & 63)))

/*
 * The rows in [first, end) whose bit is set, ascending, into out (room for
 * cap); how many, or SIZE_MAX when there are more than cap. Selection reads
 * sparse bitmaps this way (a save's rows are a few percent of a large
 * shard: most words hold no set bit or one), so the lowest bit of a word is
 * written whether or not there is one and the count moves by whether there
 * was: a branch is taken only for a second bit. A branch per word on "any
 * bit?" mispredicted about a quarter of the time and cost more than the
 * rest of the scan (a 10 M-row bitmap: 0.54 -> 0.25 ms).
 */
static inline size_t cpri_emb_bitmap_rows(const uint64_t *map, uint64_t first, uint64_t end,
                                          uint64_t *out, size_t cap)
{
    size_t m = 0;
    if (first >= end)
        return 0;
    uint64_t w_first = first >> 6, w_last = (end - 1) >> 6;
    for (uint64_t w = w_first; w <= w_last; w++) {
        uint64_t bits = map[w];
        if (w == w_first)
            bits &= ~0ull << (first & 63);
        if (w == w_last && (end & 63))
            bits &= (1ull << (end & 63)) - 1;
        if (m == cap) { /* full: one more set bit is one too many */
            if (bits)
                return SIZE_MAX;
            continue;
        }
        uint64_t rest = bits & (bits - 1);
        out[m] = (w << 6) + (uint64_t)__builtin_ctzll(bits | 1ull << 63); /* m < cap */
        m += bits != 0;
        for (; rest; rest &= rest - 1) {
            if (m == cap)
                return SIZE_MAX;
            out[m++] = (w << 6) + (uint64_t)__builtin_ctzll(rest);
        }
    }
    return m;
}

/* Shard geometry (emb.c). */
uint32_t cpri_emb_geom_shard_of(const cpr_emb *t, uint64_t row);
uint64_t cpri_emb_geom_shard_rows(const cpr_emb *t, uint32_t shard);
/* First row of a shard and the stride between its rows (1 or num_shards). */
uint64_t cpri_emb_geom_first(const cpr_emb *t, uint32_t shard);
uint64_t cpri_emb_geom_stride(const cpr_emb *t);
/* The i-th row of a shard. */
uint64_t cpri_emb_geom_row(const cpr_emb *t, uint32_t shard, uint64_t i);
/* Whether a begun save holds every row of its shard: as many ids as the
 * shard has rows, which cpr_emb_save_begin checked are strictly ascending
 * rows of it, so ids[i] = cpri_emb_geom_row(t, shard, i). */
int cpri_emb_save_whole_shard(const cpr_emb *t, const cpr_emb_save *save);

/* Backend entry points: identical signatures for cpu_ and cuda_. */
#define CPR_EMB_BACKEND(prefix)                                                          \
    cpr_status prefix##create(cpr_emb *t);                                               \
    void prefix##destroy(cpr_emb *t);                                                    \
    cpr_status prefix##forward(cpr_emb *t, const int64_t *indices, size_t n_indices,     \
                               const int64_t *offsets, size_t n_bags, cpr_pooling pooling, \
                               float *out);                                              \
    cpr_status prefix##backward(cpr_emb *t, const int64_t *indices, size_t n_indices,    \
                                const int64_t *offsets, size_t n_bags, cpr_pooling pooling, \
                                const float *grad);                                      \
    cpr_status prefix##stats(const cpr_emb *t, uint32_t shard, cpr_emb_stats *out);      \
    cpr_status prefix##select(cpr_emb *t, uint32_t shard, cpr_policy policy,             \
                              uint64_t budget_rows, uint64_t *ids, size_t cap, size_t *n); \
    cpr_status prefix##save_begin(cpr_emb *t, cpr_emb_save *save);                       \
    cpr_status prefix##copy(cpr_emb *t, const cpr_emb_save *save, size_t first, size_t k, \
                            float *values, float *state, int release);                   \
    void prefix##save_end(cpr_emb *t, cpr_emb_save *save, int committed);               \
    cpr_status prefix##apply(cpr_emb *t, const uint64_t *ids, size_t n,                  \
                             const float *values, const float *state);                   \
    cpr_status prefix##wipe_shard(cpr_emb *t, uint32_t shard, uint64_t *lost_events);

CPR_EMB_BACKEND(cpri_emb_cpu_)
/* The CPU table's shard counters (cpr_emb_events). */
void cpri_emb_cpu_events(const cpr_emb *t, uint32_t shard, uint64_t *update_events,
                         uint64_t *unsaved_events);
/* A tracker's update events (cpr_emb_observe; front end checked the indices). */
cpr_status cpri_emb_cpu_observe(cpr_emb *t, const int64_t *indices, size_t n,
                                const float *sq_change);
/* The CPU table's storage (cpr_emb_view). */
void cpri_emb_cpu_view(const cpr_emb *t, cpr_emb_host_view *out);
CPR_EMB_BACKEND(cpri_emb_cuda_)
/* Rows [first, first + k) of a CUDA save encoded on the device, only the
 * encoded bytes moved to the host (emb_cuda_codec.cu, cpr_emb_save_copy_encoded). */
cpr_status cpri_emb_cuda_copy_encoded(cpr_emb *t, const cpr_emb_save *save, size_t first,
                                      size_t k, cpr_codec codec, void *values, float *state);

/* 1 if the CUDA backend was compiled in. */
int cpri_emb_cuda_built(void);

/* Deterministic per-access sampling hash shared by both backends so that a
 * CPU and a GPU table make the same SSU decisions: 64-bit mix of (seed,
 * backward call number, position of the occurrence in the call). */
static inline uint64_t cpri_emb_mix64(uint64_t x)
{
    return cpr_splitmix64(&x); /* cpr/rng.h; emb_cuda.cu repeats it on the device */
}

/* Initial weight of element j of `row`: U(-scale, scale) from a hash, so
 * both backends (and any shard layout) start from identical tables. */
static inline float cpri_emb_init_value(uint64_t seed, uint64_t row, uint32_t j, float scale)
{
    uint64_t h = cpri_emb_mix64(cpri_emb_mix64(seed ^ 0x5eedULL) ^ cpri_emb_mix64(row) ^ j);
    double u = (double)(h >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
    return (float)((2.0 * u - 1.0) * scale);
}

/* An SSU rate in [0, 1] as the sampling threshold (rate * 2^64, saturated). */
static inline uint64_t cpri_emb_ssu_threshold(double rate)
{
    return rate >= 1.0 ? UINT64_MAX : (uint64_t)(rate * 18446744073709551616.0);
}

/* SSU: is occurrence `pos` of backward call `call` sampled at `threshold`
 * (= ssu_rate * 2^64, saturated)? */
static inline int cpri_emb_sampled(uint64_t seed, uint64_t call, uint64_t pos,
                                  uint64_t threshold)
{
    return cpri_emb_mix64(seed ^ cpri_emb_mix64(call * 0x100000001b3ULL + pos)) < threshold;
}

#ifdef __cplusplus
}
#endif
#endif /* CPR_EMB_INTERNAL_H */
