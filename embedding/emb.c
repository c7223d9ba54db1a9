/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Front end of the embedding module: configuration defaults and validation,
 * shard geometry, budgets, argument checks, and dispatch to the CPU or CUDA
 * backend. Everything a caller can get wrong on the host is rejected here,
 * before a backend touches the table (emb_internal.h lists what backends may
 * therefore assume).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "cpr/codec.h"
#include "emb_internal.h"

#define MAX_DIM 4096u

#define DISPATCH(t, fn, ...) \
    ((t)->cfg.device == CPR_DEVICE_CUDA ? cpri_emb_cuda_##fn(__VA_ARGS__) \
                                         : cpri_emb_cpu_##fn(__VA_ARGS__))

double cpr_emb_tracker_bytes_per_row(unsigned track)
{
    double bytes = 0;
    if (track & CPR_TRACK_COUNTS)
        bytes += 4;     /* uint32 count */
    if (track & CPR_TRACK_DIRTY)
        bytes += 0.125; /* one bit */
    if (track & CPR_TRACK_SSU)
        bytes += 0.375; /* member, held and resampled bits (emb_ssu.h); + 8 bytes
                           per sampled row */
    if (track & CPR_TRACK_NORM)
        bytes += 4;     /* float accumulator */
    return bytes;
}

/* ---- geometry --------------------------------------------------------------- */

uint32_t cpri_emb_geom_shard_of(const cpr_emb *t, uint64_t row)
{
    if (t->cfg.num_shards == 1) /* hot path: spares a 64-bit division per row */
        return 0;
    if (t->cfg.scheme == CPR_SHARD_MODULO)
        return (uint32_t)(row % t->cfg.num_shards);
    return (uint32_t)(row / t->range_rows);
}

uint64_t cpri_emb_geom_shard_rows(const cpr_emb *t, uint32_t shard)
{
    uint64_t rows = t->cfg.rows, n = t->cfg.num_shards;
    if (t->cfg.scheme == CPR_SHARD_MODULO)
        return rows / n + (shard < rows % n);
    uint64_t first = (uint64_t)shard * t->range_rows;
    if (first >= rows)
        return 0;
    return rows - first < t->range_rows ? rows - first : t->range_rows;
}

uint64_t cpri_emb_geom_first(const cpr_emb *t, uint32_t shard)
{
    return t->cfg.scheme == CPR_SHARD_MODULO ? shard : (uint64_t)shard * t->range_rows;
}

uint64_t cpri_emb_geom_stride(const cpr_emb *t)
{
    return t->cfg.scheme == CPR_SHARD_MODULO ? t->cfg.num_shards : 1;
}

uint64_t cpri_emb_geom_row(const cpr_emb *t, uint32_t shard, uint64_t i)
{
    return cpri_emb_geom_first(t, shard) + i * cpri_emb_geom_stride(t);
}

int cpri_emb_save_whole_shard(const cpr_emb *t, const cpr_emb_save *save)
{
    return save->n && save->n == cpri_emb_geom_shard_rows(t, save->shard);
}

uint32_t cpr_emb_shard_of(const cpr_emb *t, uint64_t row) { return cpri_emb_geom_shard_of(t, row); }
uint64_t cpr_emb_shard_rows(const cpr_emb *t, uint32_t shard)
{
    return shard < t->cfg.num_shards ? cpri_emb_geom_shard_rows(t, shard) : 0;
}
uint64_t cpr_emb_rows(const cpr_emb *t) { return t->cfg.rows; }
cpr_shard_scheme cpr_emb_scheme(const cpr_emb *t) { return t->cfg.scheme; }
uint32_t cpr_emb_dim(const cpr_emb *t) { return t->cfg.dim; }
uint32_t cpr_emb_state_dim(const cpr_emb *t) { return t->state_dim; }
uint32_t cpr_emb_num_shards(const cpr_emb *t) { return t->cfg.num_shards; }
cpr_device_kind cpr_emb_device(const cpr_emb *t) { return t->cfg.device; }

/* ---- create / destroy ------------------------------------------------------- */

static cpr_status fill_defaults(cpr_emb_config *c)
{
    if (c->rows == 0 || c->dim == 0 || c->dim > MAX_DIM)
        return cpr_fail(CPR_INVALID_ARGUMENT, "an embedding table needs rows >= 1 and dim "
                        "1-%u (got rows %llu, dim %u)", MAX_DIM,
                        (unsigned long long)c->rows, c->dim);
    if ((unsigned)c->optimizer > CPR_OPT_ADAGRAD)
        return cpr_fail(CPR_INVALID_ARGUMENT, "optimizer %d is not SGD (0), row-wise "
                        "Adagrad (1) or Adagrad (2)", (int)c->optimizer);
    if ((unsigned)c->scheme > CPR_SHARD_MODULO || (unsigned)c->device > CPR_DEVICE_CUDA)
        return cpr_fail(CPR_INVALID_ARGUMENT, "unknown shard scheme or device");
    if (c->track & ~(unsigned)CPR_TRACK_ALL)
        return cpr_fail(CPR_INVALID_ARGUMENT, "unknown tracker bits 0x%x", c->track);
    if (!(c->ssu_rate >= 0.0 && c->ssu_rate <= 1.0) || !isfinite(c->learning_rate) ||
        c->learning_rate < 0 || !isfinite(c->init_scale) || c->init_scale < 0 || c->eps < 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "ssu_rate must be in [0, 1]; learning_rate, "
                        "init_scale and eps finite and >= 0");
    if (c->num_shards == 0)
        c->num_shards = 1;
    if (c->rows > SIZE_MAX / sizeof(float) / c->dim / 2)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a table of %llu x %u floats does not fit in "
                        "memory", (unsigned long long)c->rows, c->dim);
    if (c->num_shards > c->rows)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%u shards for %llu rows: every shard needs "
                        "a row", c->num_shards, (unsigned long long)c->rows);
    uint64_t per = (c->rows + c->num_shards - 1) / c->num_shards;
    if (c->scheme == CPR_SHARD_RANGE && per * (c->num_shards - 1) >= c->rows)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%u range shards of %llu rows leave the last "
                        "shard empty; use fewer shards or CPR_SHARD_MODULO", c->num_shards,
                        (unsigned long long)per);
    if (c->learning_rate == 0)
        c->learning_rate = 0.01f;
    if (c->eps == 0)
        c->eps = 1e-8f;
    if (c->init_scale == 0)
        c->init_scale = (float)(1.0 / sqrt((double)c->rows));
    if (c->ssu_rate == 0)
        c->ssu_rate = 0.01;
    if (c->ssu_capacity == 0)
        c->ssu_capacity = c->rows / c->num_shards / 8 + 1;
    return CPR_OK;
}

static cpr_status create(const cpr_emb_config *config, int tracker_only, cpr_emb **out)
{
    cpr_emb *t;
    cpr_status st;
    if (!config || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_emb_create needs a config");
    t = calloc(1, sizeof *t);
    if (!t)
        return cpr_fail(CPR_NO_MEMORY, "out of memory creating a table");
    t->cfg = *config;
    if (tracker_only) { /* validated as a table of 1 float a row, then rows go */
        t->cfg.dim = 1;
        t->cfg.optimizer = CPR_OPT_SGD;
    }
    st = fill_defaults(&t->cfg);
    if (st) {
        free(t);
        return st;
    }
    t->tracker_only = tracker_only;
    if (tracker_only)
        t->cfg.dim = 0;
    t->state_dim = t->cfg.optimizer == CPR_OPT_SGD ? 0
                   : t->cfg.optimizer == CPR_OPT_ROWWISE_ADAGRAD ? 1 : t->cfg.dim;
    t->range_rows = (t->cfg.rows + t->cfg.num_shards - 1) / t->cfg.num_shards;
    t->ssu_threshold = cpri_emb_ssu_threshold(t->cfg.ssu_rate);
    st = DISPATCH(t, create, t);
    if (st) {
        free(t);
        return st;
    }
    *out = t;
    return CPR_OK;
}

cpr_status cpr_emb_create(const cpr_emb_config *config, cpr_emb **out)
{
    return create(config, 0, out);
}

cpr_status cpr_emb_create_tracker(const cpr_emb_config *config, cpr_emb **out)
{
    if (config && config->device != CPR_DEVICE_CPU)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a tracker lives in host memory whatever the "
                        "table's device: give device CPR_DEVICE_CPU");
    if (config && !(config->track & CPR_TRACK_ALL))
        return cpr_fail(CPR_INVALID_ARGUMENT, "a tracker with no CPR_TRACK_ bits tracks "
                        "nothing: set config.track");
    return create(config, 1, out);
}

/* What needs a table's rows is refused on a tracker. */
static cpr_status need_rows(const cpr_emb *t, const char *call)
{
    if (t && t->tracker_only)
        return cpr_fail(CPR_FAILED_PRECONDITION, "%s: a tracker (cpr_emb_create_tracker) "
                        "holds no rows; read them from your own table", call);
    return CPR_OK;
}

void cpr_emb_destroy(cpr_emb *t)
{
    if (!t)
        return;
    DISPATCH(t, destroy, t);
    free(t->spare_ids);
    free(t);
}

/* ---- training --------------------------------------------------------------- */

/* Host-side checks of a batch; CPU tables also check indices and offsets
 * here (CUDA tables check their device arrays in a kernel). */
static cpr_status check_batch(const cpr_emb *t, const int64_t *indices, size_t n_indices,
                              const int64_t *offsets, size_t n_bags, cpr_pooling pooling,
                              const void *dense)
{
    if ((unsigned)pooling > CPR_POOL_MEAN)
        return cpr_fail(CPR_INVALID_ARGUMENT, "pooling %d is not SUM (0) or MEAN (1)",
                        (int)pooling);
    if ((n_indices && !indices) || (n_bags && (!offsets || !dense)))
        return cpr_fail(CPR_INVALID_ARGUMENT, "a batch of %zu bags and %zu indices needs "
                        "its arrays", n_bags, n_indices);
    if (n_bags > UINT32_MAX || n_indices > ((size_t)1 << 40))
        return cpr_fail(CPR_INVALID_ARGUMENT, "a batch holds at most 2^32-1 bags and 2^40 "
                        "indices (got %zu bags, %zu indices)", n_bags, n_indices);
    if (t->cfg.device == CPR_DEVICE_CUDA)
        return CPR_OK;
    for (size_t b = 0; b < n_bags; b++) {
        int64_t lo = offsets[b], hi = b + 1 < n_bags ? offsets[b + 1] : (int64_t)n_indices;
        if (lo < 0 || lo > hi || hi > (int64_t)n_indices)
            return cpr_fail(CPR_INVALID_ARGUMENT, "offsets[%zu] = %lld: offsets must be "
                            "non-decreasing within [0, %zu]", b, (long long)lo, n_indices);
    }
    if (n_bags == 0 && n_indices)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%zu indices but no bags", n_indices);
    for (size_t i = 0; i < n_indices; i++)
        if (indices[i] < 0 || (uint64_t)indices[i] >= t->cfg.rows)
            return cpr_fail(CPR_INVALID_ARGUMENT, "index %lld at position %zu is outside "
                            "the table (%llu rows)", (long long)indices[i], i,
                            (unsigned long long)t->cfg.rows);
    return CPR_OK;
}

cpr_status cpr_emb_forward(cpr_emb *t, const int64_t *indices, size_t n_indices,
                           const int64_t *offsets, size_t n_bags, cpr_pooling pooling, float *out)
{
    cpr_status st = need_rows(t, "cpr_emb_forward");
    if (st == CPR_OK)
        st = check_batch(t, indices, n_indices, offsets, n_bags, pooling, out);
    if (st)
        return st;
    return DISPATCH(t, forward, t, indices, n_indices, offsets, n_bags, pooling, out);
}

cpr_status cpr_emb_backward(cpr_emb *t, const int64_t *indices, size_t n_indices,
                            const int64_t *offsets, size_t n_bags, cpr_pooling pooling,
                            const float *grad)
{
    cpr_status st = need_rows(t, "cpr_emb_backward (a tracker's is cpr_emb_observe)");
    if (st == CPR_OK)
        st = check_batch(t, indices, n_indices, offsets, n_bags, pooling, grad);
    if (st)
        return st;
    return DISPATCH(t, backward, t, indices, n_indices, offsets, n_bags, pooling, grad);
}

cpr_status cpr_emb_observe(cpr_emb *t, const int64_t *indices, size_t n,
                           const float *sq_change)
{
    if (!t || (n && !indices))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_emb_observe needs a tracker and %zu "
                        "indices", n);
    if (!t->tracker_only)
        return cpr_fail(CPR_FAILED_PRECONDITION, "cpr_emb_observe is for trackers "
                        "(cpr_emb_create_tracker); a table tracks its own cpr_emb_backward");
    if (n > ((size_t)1 << 40))
        return cpr_fail(CPR_INVALID_ARGUMENT, "at most 2^40 indices a call (got %zu)", n);
    for (size_t i = 0; i < n; i++) {
        if (indices[i] < 0 || (uint64_t)indices[i] >= t->cfg.rows)
            return cpr_fail(CPR_INVALID_ARGUMENT, "index %lld at position %zu is outside "
                            "the table (%llu rows)", (long long)indices[i], i,
                            (unsigned long long)t->cfg.rows);
        if (sq_change && !(sq_change[i] >= 0 && sq_change[i] <= FLT_MAX))
            return cpr_fail(CPR_INVALID_ARGUMENT, "sq_change[%zu] = %g: a squared update "
                            "magnitude is finite and >= 0", i, (double)sq_change[i]);
    }
    return cpri_emb_cpu_observe(t, indices, n, sq_change);
}

cpr_status cpr_emb_restored(cpr_emb *t, const uint64_t *ids, size_t n)
{
    if (!t || (n && !ids))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_emb_restored needs a tracker and %zu ids", n);
    if (!t->tracker_only)
        return cpr_fail(CPR_FAILED_PRECONDITION, "cpr_emb_restored is for trackers; a "
                        "table's restored rows go through cpr_emb_apply");
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= t->cfg.rows)
            return cpr_fail(CPR_INVALID_ARGUMENT, "row %llu is outside the table (%llu rows)",
                            (unsigned long long)ids[i], (unsigned long long)t->cfg.rows);
    return cpri_emb_cpu_apply(t, ids, n, NULL, NULL);
}

/* ---- tracking and selection --------------------------------------------------- */

static cpr_status check_shard(const cpr_emb *t, uint32_t shard)
{
    if (shard >= t->cfg.num_shards)
        return cpr_fail(CPR_INVALID_ARGUMENT, "shard %u is not below num_shards %u", shard,
                        t->cfg.num_shards);
    return CPR_OK;
}

cpr_status cpr_emb_stats_get(const cpr_emb *t, uint32_t shard, cpr_emb_stats *out)
{
    cpr_status st = check_shard(t, shard);
    return st ? st : DISPATCH(t, stats, t, shard, out);
}

cpr_status cpr_emb_events(const cpr_emb *t, uint32_t shard, uint64_t *update_events,
                          uint64_t *unsaved_events)
{
    cpr_status st = t && update_events && unsaved_events
                        ? check_shard(t, shard)
                        : cpr_fail(CPR_INVALID_ARGUMENT, "cpr_emb_events: table and outputs "
                                   "must not be NULL");
    if (st)
        return st;
    if (t->cfg.device == CPR_DEVICE_CPU) {
        cpri_emb_cpu_events(t, shard, update_events, unsaved_events);
        return CPR_OK;
    }
    cpr_emb_stats s; /* a CUDA table keeps its counters on the device */
    st = cpri_emb_cuda_stats(t, shard, &s);
    if (st == CPR_OK) {
        *update_events = s.update_events;
        *unsaved_events = s.unsaved_events;
    }
    return st;
}

static cpr_status check_policy(const cpr_emb *t, cpr_policy policy)
{
    static const unsigned needs[] = {0, CPR_TRACK_DIRTY, CPR_TRACK_COUNTS, CPR_TRACK_SSU,
                                     CPR_TRACK_NORM};
    if ((unsigned)policy > CPR_POLICY_TOPK_NORM)
        return cpr_fail(CPR_INVALID_ARGUMENT, "unknown policy %d", (int)policy);
    if ((t->cfg.track & needs[policy]) != needs[policy])
        return cpr_fail(CPR_FAILED_PRECONDITION, "policy %s needs its tracker: create the "
                        "table with that CPR_TRACK_ bit", cpr_policy_name(policy));
    return CPR_OK;
}

/* Rows a budget allows for `shard`. */
static cpr_status budget_rows(const cpr_emb *t, uint32_t shard, cpr_budget b, uint64_t *rows)
{
    uint64_t shard_rows = cpri_emb_geom_shard_rows(t, shard);
    if ((b.fraction > 0) == (b.rows > 0) || !(b.fraction <= 1.0))
        return cpr_fail(CPR_INVALID_ARGUMENT, "a budget is either a fraction in (0, 1] or "
                        "a row count, not both or neither");
    if (b.rows)
        *rows = b.rows < shard_rows ? b.rows : shard_rows;
    else
        *rows = (uint64_t)ceil(b.fraction * (double)shard_rows);
    return CPR_OK;
}

cpr_status cpr_emb_set_ssu_rate(cpr_emb *t, double rate)
{
    if (!t)
        return cpr_fail(CPR_INVALID_ARGUMENT, "table is NULL");
    if (!(rate >= 0.0 && rate <= 1.0))
        return cpr_fail(CPR_INVALID_ARGUMENT, "ssu_rate %g: give a probability in [0, 1]", rate);
    t->cfg.ssu_rate = rate;
    t->ssu_threshold = cpri_emb_ssu_threshold(rate);
    return CPR_OK;
}

cpr_status cpr_emb_select(cpr_emb *t, uint32_t shard, cpr_policy policy, cpr_budget budget,
                          uint64_t *ids, size_t cap, size_t *n)
{
    uint64_t rows = cpri_emb_geom_shard_rows(t, shard);
    cpr_status st = check_shard(t, shard);
    if (st == CPR_OK)
        st = check_policy(t, policy);
    if (st == CPR_OK && (policy == CPR_POLICY_MFU || policy == CPR_POLICY_SSU ||
                         policy == CPR_POLICY_TOPK_NORM))
        st = budget_rows(t, shard, budget, &rows);
    if (st == CPR_OK && (!ids || !n))
        st = cpr_fail(CPR_INVALID_ARGUMENT, "select needs an id buffer");
    if (st == CPR_OK && policy == CPR_POLICY_FULL && cap < rows)
        st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "FULL selects %llu rows; the buffer holds %zu",
                      (unsigned long long)rows, cap);
    if (st)
        return st;
    return DISPATCH(t, select, t, shard, policy, rows, ids, cap, n);
}

/* ---- saves -------------------------------------------------------------------- */

/* An ended save's ids array: kept for the next save if it is the larger (E1). */
static void keep_spare_ids(cpr_emb *t, uint64_t *ids, size_t cap)
{
    if (!t->spare_ids || cap > t->spare_cap) {
        free(t->spare_ids);
        t->spare_ids = ids;
        t->spare_cap = cap;
    } else {
        free(ids);
    }
}

/* Copies ids[0..n), n > 0, to dst and returns whether they are strictly
 * ascending rows of `shard`: one pass, no branch per row. Ascending ids of
 * a range shard (or of the only shard) lie in it when the first and the
 * last do, so only a modulo table of several shards checks each row's
 * shard. (A FULL save of 10 M rows spent 25 ms of its stall on an H200
 * host checking them, a call per row, and copying them in a second pass.) */
static int save_ids_copy(const cpr_emb *t, uint32_t shard, const uint64_t *ids, size_t n,
                         uint64_t *dst)
{
    uint64_t first = cpri_emb_geom_first(t, shard), shard_rows = cpri_emb_geom_shard_rows(t, shard);
    int bad = 0;
    dst[0] = ids[0];
    for (size_t i = 1; i < n; i++) {
        dst[i] = ids[i];
        bad |= ids[i] <= ids[i - 1];
    }
    if (bad || ids[n - 1] >= t->cfg.rows)
        return 0;
    if (t->cfg.num_shards == 1 || t->cfg.scheme == CPR_SHARD_RANGE)
        return ids[0] >= first && ids[n - 1] - first < shard_rows;
    uint64_t shards = t->cfg.num_shards;
    for (size_t i = 0; i < n; i++)
        bad |= ids[i] % shards != shard;
    return !bad;
}

/* The error of the first bad id (save_ids_copy found one). */
static cpr_status save_ids_error(const cpr_emb *t, uint32_t shard, const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->cfg.rows || cpri_emb_geom_shard_of(t, ids[i]) != shard)
            return cpr_fail(CPR_INVALID_ARGUMENT, "row %llu is not a row of shard %u",
                            (unsigned long long)ids[i], shard);
        if (i && ids[i] <= ids[i - 1])
            return cpr_fail(CPR_INVALID_ARGUMENT, "save ids must be strictly ascending "
                            "(as cpr_emb_select returns them)");
    }
    return cpr_fail(CPR_INTERNAL, "save ids: a check found no bad id twice");
}

cpr_status cpr_emb_save_begin(cpr_emb *t, uint32_t shard, cpr_policy policy,
                              const uint64_t *ids, size_t n, cpr_emb_save **out)
{
    cpr_status st = check_shard(t, shard);
    if (st == CPR_OK && (unsigned)policy > CPR_POLICY_TOPK_NORM)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "unknown policy %d", (int)policy);
    if (st == CPR_OK && n && !ids)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "save of %zu rows without ids", n);
    if (st)
        return st;
    cpr_emb_save *save = calloc(1, sizeof *save);
    if (save && t->spare_ids && t->spare_cap >= n) { /* E1 (emb_cpu.c): no fresh pages */
        save->ids = t->spare_ids;
        save->cap = t->spare_cap;
        t->spare_ids = NULL;
    } else if (save) {
        save->ids = malloc((n ? n : 1) * sizeof *save->ids);
        save->cap = n ? n : 1;
    }
    if (!save || !save->ids) {
        free(save);
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting a save of %zu rows", n);
    }
    if (n && !save_ids_copy(t, shard, ids, n, save->ids)) {
        st = save_ids_error(t, shard, ids, n);
        keep_spare_ids(t, save->ids, save->cap);
        free(save);
        return st;
    }
    save->table = t;
    save->shard = shard;
    save->policy = policy;
    save->n = n;
    st = DISPATCH(t, save_begin, t, save);
    if (st) {
        keep_spare_ids(t, save->ids, save->cap);
        free(save);
        return st;
    }
    *out = save;
    return CPR_OK;
}

size_t cpr_emb_save_rows(const cpr_emb_save *save) { return save->n; }
const uint64_t *cpr_emb_save_ids(const cpr_emb_save *save) { return save->ids; }

cpr_status cpr_emb_gather(cpr_emb *t, const cpr_emb_save *save, float *values, float *state)
{
    if (need_rows(t, "cpr_emb_gather"))
        return CPR_FAILED_PRECONDITION;
    if (!save || (save->n && (!values || (t->state_dim && !state))))
        return cpr_fail(CPR_INVALID_ARGUMENT, "gather needs a save and buffers for %zu rows "
                        "of values%s", save ? save->n : 0, t->state_dim ? " and state" : "");
    return DISPATCH(t, copy, t, save, 0, save->n, values, state, 0);
}

/* The checks of a copy of rows [first, first + k) of a save (`what` names
 * the call): cpr_emb_save_copy's and cpr_emb_save_copy_encoded's. */
static cpr_status check_copy(const cpr_emb *t, const cpr_emb_save *save, size_t first, size_t k,
                             const void *values, const float *state, const char *what)
{
    if (need_rows(t, what))
        return CPR_FAILED_PRECONDITION;
    if (!t || !save || first > save->n || k > save->n - first)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: rows [%zu, %zu + %zu) are not rows of a save "
                        "of %zu", what, first, first, k, save ? save->n : 0);
    if (k && (!values || (t->state_dim && !state)))
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s needs buffers for %zu rows of values%s", what,
                        k, t->state_dim ? " and state" : "");
    return CPR_OK;
}

cpr_status cpr_emb_save_copy(cpr_emb *t, cpr_emb_save *save, size_t first, size_t k,
                             float *values, float *state)
{
    cpr_status st = check_copy(t, save, first, k, values, state, "cpr_emb_save_copy");
    return st ? st : DISPATCH(t, copy, t, save, first, k, values, state, 1);
}

cpr_status cpr_emb_view(const cpr_emb *t, cpr_emb_host_view *out)
{
    if (!t || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_emb_view: table and out must not be NULL");
    if (need_rows(t, "cpr_emb_view"))
        return CPR_FAILED_PRECONDITION;
    if (t->cfg.device == CPR_DEVICE_CUDA)
        return cpr_fail(CPR_FAILED_PRECONDITION, "a CUDA table's rows are in device memory: "
                        "copy a save out with cpr_emb_gather");
    cpri_emb_cpu_view(t, out);
    return CPR_OK;
}

/* The save a fill's ctx is, once the part schema's row shape is the table's
 * (`what` names the fill). */
static cpr_status fill_save(void *ctx, uint32_t dim, uint32_t state_dim, const char *what,
                            cpr_emb_save **save)
{
    *save = ctx;
    if (!*save)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: the save is NULL", what);
    const cpr_emb *t = (*save)->table;
    if (dim != t->cfg.dim || state_dim != t->state_dim)
        return cpr_fail(CPR_INVALID_ARGUMENT, "the part's schema has rows of %u + %u floats, "
                        "the table %u + %u", dim, state_dim, t->cfg.dim, t->state_dim);
    return CPR_OK;
}

cpr_status cpr_emb_save_fill(void *ctx, size_t first, size_t k, uint32_t dim,
                             uint32_t state_dim, float *values, float *state)
{
    cpr_emb_save *save;
    cpr_status st = fill_save(ctx, dim, state_dim, "cpr_emb_save_fill", &save);
    return st ? st : cpr_emb_save_copy(save->table, save, first, k, values, state);
}

cpr_status cpr_emb_save_copy_encoded(cpr_emb *t, cpr_emb_save *save, size_t first, size_t k,
                                     cpr_codec codec, void *values, float *state)
{
    cpr_status st = check_copy(t, save, first, k, values, state, "cpr_emb_save_copy_encoded");
    if (st)
        return st;
    if (!cpr_codec_row_bytes(codec, t->cfg.dim))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_emb_save_copy_encoded: codec %d: give "
                        "CPR_CODEC_F32, _BF16, _F16, _INT8 or _INT4", (int)codec);
    if (t->cfg.device == CPR_DEVICE_CUDA)
        return cpri_emb_cuda_copy_encoded(t, save, first, k, codec, values, state);
    if (k == 0)
        return CPR_OK;
    float *rows = malloc(k * t->cfg.dim * sizeof *rows);
    if (!rows)
        return cpr_fail(CPR_NO_MEMORY, "out of memory copying %zu rows to encode", k);
    st = cpri_emb_cpu_copy(t, save, first, k, rows, state, 1);
    if (st == CPR_OK)
        st = cpr_codec_encode(codec, 0, rows, k, t->cfg.dim, values);
    free(rows);
    return st;
}

cpr_status cpr_emb_save_fill_encoded(void *ctx, size_t first, size_t k, uint32_t dim,
                                     uint32_t state_dim, cpr_codec codec, void *values,
                                     float *state)
{
    cpr_emb_save *save;
    cpr_status st = fill_save(ctx, dim, state_dim, "cpr_emb_save_fill_encoded", &save);
    return st ? st : cpr_emb_save_copy_encoded(save->table, save, first, k, codec, values, state);
}

static void save_end(cpr_emb *t, cpr_emb_save *save, int committed)
{
    DISPATCH(t, save_end, t, save, committed);
    keep_spare_ids(t, save->ids, save->cap);
    free(save);
}

cpr_status cpr_emb_save_commit(cpr_emb *t, cpr_emb_save *save)
{
    if (!save)
        return cpr_fail(CPR_INVALID_ARGUMENT, "commit of a NULL save");
    save_end(t, save, 1);
    return CPR_OK;
}

void cpr_emb_save_abort(cpr_emb *t, cpr_emb_save *save)
{
    if (save)
        save_end(t, save, 0);
}

cpr_status cpr_emb_apply(cpr_emb *t, const uint64_t *ids, size_t n, const float *values,
                         const float *state)
{
    if (need_rows(t, "cpr_emb_apply (a tracker's is cpr_emb_restored)"))
        return CPR_FAILED_PRECONDITION;
    if (n && (!ids || !values || (t->state_dim && !state)))
        return cpr_fail(CPR_INVALID_ARGUMENT, "apply of %zu rows needs ids, values%s", n,
                        t->state_dim ? " and state" : "");
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= t->cfg.rows)
            return cpr_fail(CPR_INVALID_ARGUMENT, "row %llu is outside the table (%llu rows)",
                            (unsigned long long)ids[i], (unsigned long long)t->cfg.rows);
    return DISPATCH(t, apply, t, ids, n, values, state);
}

cpr_status cpr_emb_wipe_shard(cpr_emb *t, uint32_t shard, uint64_t *lost_events)
{
    cpr_status st = check_shard(t, shard);
    return st ? st : DISPATCH(t, wipe_shard, t, shard, lost_events);
}
