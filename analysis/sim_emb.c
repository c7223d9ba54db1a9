/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The prioritized policies (MFU, SSU, TOPK_NORM) simulated on a real
 * embedding table (cpr/embedding.h, CPU): a Zipf access stream trains it
 * step by step; every fraction*T of work time each shard saves the rows the
 * policy selects with budget fraction (select, save_begin, save_commit);
 * each failure of the trace wipes its shard and the table reports the
 * update events that were not in a committed save. PLS is those events
 * summed over the run, over all update events: measured, not assumed.
 * The tables run the first emb_saves save intervals of the job (PLS is a
 * ratio that settles within a few tens of intervals, and a whole long job
 * would cost as many selections as it has saves), with the trial's own
 * failures in that window. Events map to step boundaries by rounding
 * (docs/model.md says why).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/rng.h"
#include "analyze.h"
#include "cpr/data.h"
#include "cpr/embedding.h"
#include "cpr_common.h"

#define EMB_DIM 4
#define EMB_LR 0.01f

typedef struct emb_run {
    const sim_opts *o;
    cpr_emb *table;
    cpr_zipf *zipf;
    cpr_policy policy;
    int64_t *indices, *offsets;
    float *grad;
    uint64_t *ids;
    size_t ids_cap;
    uint64_t scatter;         /* rank -> row multiplier, coprime with rows */
    uint64_t grad_state;
    uint64_t steps_done;
    uint64_t lost_events;
    uint64_t steps;           /* steps of the window */
    double step_s;            /* work time of one step */
} emb_run;

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* A multiplier that permutes 0..rows-1, so hot ranks land on scattered ids
 * (MFU breaks ties toward lower ids; hot rows must not own them). */
static uint64_t scatter_multiplier(uint64_t rows)
{
    uint64_t m = 0x9e3779b9ull % rows;
    while (rows > 1 && (m == 0 || gcd(m, rows) != 1))
        m++;
    return rows > 1 ? m : 1;
}

static cpr_policy policy_of(sim_strategy s)
{
    return s == SIM_MFU ? CPR_POLICY_MFU : s == SIM_SSU ? CPR_POLICY_SSU : CPR_POLICY_TOPK_NORM;
}

/* SSU samples accesses; by default at the rate that offers each save about
 * twice its budget of sampled rows (docs/model.md). */
static double ssu_rate(const sim_opts *o)
{
    if (o->ssu_rate > 0.0)
        return o->ssu_rate;
    double accesses = (double)o->steps_per_save * (double)o->batch;
    double rate = 2.0 * o->fraction * (double)o->rows / accesses;
    return rate < 1.0 ? rate : 1.0;
}

/* Tables, stream and buffers for `steps` steps of step_s seconds each. */
static cpr_status run_open(emb_run *r, const sim_opts *o, sim_strategy s, double step_s,
                           uint64_t steps, uint64_t trial)
{
    uint64_t seed = o->seed ^ (0xa0761d6478bd642full * (trial + 1));
    cpr_emb_config cfg = {.rows = o->rows, .dim = EMB_DIM, .optimizer = CPR_OPT_SGD,
                          .learning_rate = EMB_LR, .seed = seed, .num_shards = o->model.shards,
                          .scheme = CPR_SHARD_MODULO, .track = CPR_TRACK_COUNTS};
    r->o = o;
    r->policy = policy_of(s);
    if (r->policy == CPR_POLICY_SSU) {
        cfg.track |= CPR_TRACK_SSU;
        cfg.ssu_rate = ssu_rate(o);
        cfg.ssu_capacity = 2 * (uint64_t)ceil(o->fraction * (double)o->rows / o->model.shards) + 1;
    }
    if (r->policy == CPR_POLICY_TOPK_NORM)
        cfg.track |= CPR_TRACK_NORM;
    r->scatter = scatter_multiplier(o->rows);
    r->grad_state = seed;
    r->step_s = step_s;
    r->steps = steps;
    r->ids_cap = (size_t)(o->rows / o->model.shards + 1);
    r->indices = malloc(o->batch * sizeof *r->indices);
    r->offsets = malloc(o->batch * sizeof *r->offsets);
    r->grad = malloc(o->batch * EMB_DIM * sizeof *r->grad);
    r->ids = malloc(r->ids_cap * sizeof *r->ids);
    if (!r->indices || !r->offsets || !r->grad || !r->ids)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the simulated batches");
    for (uint64_t b = 0; b < o->batch; b++)
        r->offsets[b] = (int64_t)b; /* one row per bag: each access is one update */
    cpr_status st = cpr_zipf_create(o->zipf, o->rows, seed, &r->zipf);
    return st ? st : cpr_emb_create(&cfg, &r->table);
}

static void run_close(emb_run *r)
{
    cpr_emb_destroy(r->table);
    cpr_zipf_destroy(r->zipf);
    free(r->indices);
    free(r->offsets);
    free(r->grad);
    free(r->ids);
}

static float next_grad(uint64_t *state)
{
    uint64_t z = cpr_splitmix64(state);
    return (float)((double)(z >> 11) * 0x1p-52 - 1.0); /* [-1, 1) */
}

static cpr_status run_step(emb_run *r)
{
    const sim_opts *o = r->o;
    for (uint64_t b = 0; b < o->batch; b++)
        r->indices[b] = (int64_t)(cpr_zipf_next(r->zipf) * r->scatter % o->rows);
    for (uint64_t i = 0; i < o->batch * EMB_DIM; i++)
        r->grad[i] = next_grad(&r->grad_state);
    r->steps_done++;
    return cpr_emb_backward(r->table, r->indices, o->batch, r->offsets, o->batch,
                            CPR_POOL_SUM, r->grad);
}

/* Train until `steps` steps are done. */
static cpr_status run_until(emb_run *r, uint64_t steps)
{
    cpr_status st = CPR_OK;
    while (st == CPR_OK && r->steps_done < steps)
        st = run_step(r);
    return st;
}

/* One save of every shard, committed at once (the save is instantaneous in
 * work time: its stall is counted as overhead, not as training). */
static cpr_status run_save(emb_run *r)
{
    cpr_budget budget = {.fraction = r->o->fraction};
    for (uint32_t s = 0; s < r->o->model.shards; s++) {
        size_t n = 0;
        cpr_emb_save *save = NULL;
        cpr_status st = cpr_emb_select(r->table, s, r->policy, budget, r->ids, r->ids_cap, &n);
        if (st == CPR_OK && n > 0)
            st = cpr_emb_save_begin(r->table, s, r->policy, r->ids, n, &save);
        if (st == CPR_OK && save)
            st = cpr_emb_save_commit(r->table, save);
        if (st)
            return st;
    }
    return CPR_OK;
}

/* The step boundary nearest to work time t (never past the job). */
static uint64_t boundary(const emb_run *r, double t)
{
    double b = floor(t / r->step_s + 0.5);
    return b < (double)r->steps ? (uint64_t)b : r->steps;
}

/* Replay saves and the failures before `end_s` in time order; saves first
 * on ties. */
static cpr_status run_events(emb_run *r, double spacing_s, uint64_t n_saves, double end_s,
                             const sim_trace *trace)
{
    uint64_t k = 1;
    size_t f = 0, n_fail = 0;
    cpr_status st = CPR_OK;
    while (n_fail < trace->n && trace->time_s[n_fail] < end_s)
        n_fail++;
    while (st == CPR_OK && (k <= n_saves || f < n_fail)) {
        double save_t = (double)k * spacing_s;
        int save_next = k <= n_saves && (f >= n_fail || save_t <= trace->time_s[f]);
        st = run_until(r, boundary(r, save_next ? save_t : trace->time_s[f]));
        if (st == CPR_OK && save_next) {
            st = run_save(r);
            k++;
        } else if (st == CPR_OK) {
            uint64_t lost = 0;
            st = cpr_emb_wipe_shard(r->table, trace->shard[f++], &lost);
            r->lost_events += lost;
        }
    }
    return st == CPR_OK ? run_until(r, r->steps) : st;
}

static cpr_status total_events(const emb_run *r, uint64_t *events)
{
    uint64_t sum = 0;
    for (uint32_t s = 0; s < r->o->model.shards; s++) {
        cpr_emb_stats stats;
        cpr_status st = cpr_emb_stats_get(r->table, s, &stats);
        if (st)
            return st;
        sum += stats.update_events;
    }
    *events = sum;
    return CPR_OK;
}

cpr_status sim_emb_trial(const sim_opts *o, sim_strategy s, double interval_s,
                         const sim_trace *trace, uint64_t trial, sim_outcome *out)
{
    const cpr_model_params *p = &o->model;
    double spacing_s = o->fraction * interval_s;
    uint64_t n_saves = sim_save_count(p->job_s, spacing_s), events = 0;
    uint64_t window_saves = n_saves < o->emb_saves ? n_saves : o->emb_saves;
    double end_s = window_saves < n_saves ? (double)window_saves * spacing_s : p->job_s;
    /* steps_per_save steps between saves; a job shorter than one interval
     * still gets that many steps. */
    double step_s = (window_saves ? spacing_s : end_s) / (double)o->steps_per_save;
    uint64_t steps = (window_saves ? window_saves : 1) * o->steps_per_save;
    emb_run r;
    memset(&r, 0, sizeof r);
    cpr_status st = run_open(&r, o, s, step_s, steps, trial);
    if (st == CPR_OK)
        st = run_events(&r, spacing_s, window_saves, end_s, trace);
    if (st == CPR_OK)
        st = total_events(&r, &events);
    if (st == CPR_OK) {
        memset(out, 0, sizeof *out);
        out->failures = trace->n;
        /* r of the rows: r of the stall, and r of the background's cost */
        out->save_s = (double)n_saves * o->fraction * p->save_s;
        out->background_s = (double)n_saves * o->fraction * p->background_cost_s;
        out->load_s = (double)trace->n * p->load_s / p->shards;
        out->restart_s = (double)trace->n * p->restart_s;
        out->pls = events ? (double)r.lost_events / (double)events : 0.0;
    }
    run_close(&r);
    return st;
}
