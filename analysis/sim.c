/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Monte Carlo simulator behind `cpr-analyze simulate`: seeded failure
 * traces, the time model of full and partial recovery, summary statistics
 * and the loop over trials. The clock is the job's useful-work time, as in
 * the closed form (first order: failures during saves, loads and restarts
 * are not counted), so with exponential failures the expected results equal
 * the closed form up to the end effect of the last interval (docs/model.md).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/rng.h"
#include "analyze.h"
#include "cpr_common.h"

#define MAX_TRACE_FAILURES 10000000u /* per trial: 160 MB of trace at most */

/* ---- strategies ------------------------------------------------------------ */

static const char *const STRATEGY_NAMES[SIM_STRATEGY_COUNT] = {
    "full", "partial", "mfu", "ssu", "topk-norm",
};

const char *sim_strategy_name(sim_strategy s)
{
    return (unsigned)s < SIM_STRATEGY_COUNT ? STRATEGY_NAMES[s] : "unknown";
}

int sim_strategy_parse(const char *name)
{
    for (int s = 0; s < SIM_STRATEGY_COUNT; s++)
        if (strcmp(name, STRATEGY_NAMES[s]) == 0)
            return s;
    return -1;
}

int sim_strategy_prioritized(sim_strategy s)
{
    return s == SIM_MFU || s == SIM_SSU || s == SIM_TOPK_NORM;
}

/* ---- statistics ---------------------------------------------------------------- */

void sim_acc_add(sim_acc *acc, double x)
{
    acc->sum += x;
    acc->sum_sq += x * x;
    acc->n++;
}

double sim_acc_mean(const sim_acc *acc)
{
    return acc->n ? acc->sum / (double)acc->n : 0.0;
}

/* Two-sided 97.5% quantile of Student's t with `df` degrees of freedom:
 * the table to 30, then 1.96 + 2.5/df (within 0.002 of the exact value). */
static double t975(uint64_t df)
{
    static const double table[31] = {
        0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    };
    return df <= 30 ? table[df] : 1.96 + 2.5 / (double)df;
}

sim_stat sim_acc_stat(const sim_acc *acc)
{
    sim_stat st = {0, 0, 0};
    if (acc->n == 0)
        return st;
    double n = (double)acc->n, mean = acc->sum / n;
    st.mean = st.lo = st.hi = mean;
    if (acc->n < 2)
        return st;
    double var = (acc->sum_sq - n * mean * mean) / (n - 1.0);
    double half = t975(acc->n - 1) * sqrt(var > 0.0 ? var / n : 0.0);
    st.lo = mean - half;
    st.hi = mean + half;
    return st;
}

/* ---- failure traces -------------------------------------------------------------- */

/* SplitMix64 (cpr/rng.h): a tiny seeded stream, plenty for Monte Carlo draws. */
static double next_unit(uint64_t *state) /* in (0, 1] */
{
    return ((double)(cpr_splitmix64(state) >> 11) + 1.0) * 0x1p-53;
}

/* Time to the next failure: exponential, or Weibull with the same mean. */
static double draw_gap(const sim_opts *o, uint64_t *state)
{
    double e = -log(next_unit(state)); /* standard exponential */
    if (o->law == SIM_EXPONENTIAL)
        return o->model.mtbf_s * e;
    double scale = o->model.mtbf_s / tgamma(1.0 + 1.0 / o->shape);
    return scale * pow(e, 1.0 / o->shape);
}

static cpr_status trace_push(sim_trace *t, double time_s, uint32_t shard)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        if (cap > MAX_TRACE_FAILURES)
            return cpr_fail(CPR_RESOURCE_EXHAUSTED, "a trial would see more than %u failures: "
                            "raise --mtbf-hours or lower --job-hours", MAX_TRACE_FAILURES);
        double *times = realloc(t->time_s, cap * sizeof *times);
        if (times)
            t->time_s = times;
        uint32_t *shards = times ? realloc(t->shard, cap * sizeof *shards) : NULL;
        if (!shards)
            return cpr_fail(CPR_NO_MEMORY, "out of memory for a failure trace");
        t->shard = shards;
        t->cap = cap;
    }
    t->time_s[t->n] = time_s;
    t->shard[t->n] = shard;
    t->n++;
    return CPR_OK;
}

cpr_status sim_trace_make(const sim_opts *o, uint64_t trial, sim_trace *trace)
{
    uint64_t state = cpr_mix64(o->seed ^ cpr_mix64(trial + 1));
    trace->n = 0;
    for (double t = draw_gap(o, &state); t < o->model.job_s; t += draw_gap(o, &state)) {
        uint32_t shard = (uint32_t)(next_unit(&state) * o->model.shards);
        cpr_status st = trace_push(trace, t, shard < o->model.shards ? shard : o->model.shards - 1);
        if (st)
            return st;
    }
    return CPR_OK;
}

void sim_trace_release(sim_trace *trace)
{
    free(trace->time_s);
    free(trace->shard);
    memset(trace, 0, sizeof *trace);
}

/* ---- the time model ------------------------------------------------------------- */

uint64_t sim_save_count(double job_s, double spacing_s)
{
    /* The tolerance keeps an interval that divides the job, up to rounding
     * in the caller's arithmetic, from losing its last save. */
    return (uint64_t)floor(job_s / spacing_s * (1.0 + 1e-12));
}

void sim_time_trial(const sim_opts *o, sim_strategy s, double interval_s,
                    const sim_trace *trace, sim_outcome *out)
{
    const cpr_model_params *p = &o->model;
    double lost_s = 0.0;
    uint64_t saves = sim_save_count(p->job_s, interval_s);
    memset(out, 0, sizeof *out);
    out->save_s = p->save_s * (double)saves;
    out->background_s = p->background_cost_s * (double)saves;
    for (size_t i = 0; i < trace->n; i++) {
        double t = trace->time_s[i];
        lost_s += t - interval_s * floor(t / interval_s); /* since the last save (or start) */
    }
    out->failures = trace->n;
    out->restart_s = (double)trace->n * p->restart_s;
    if (s == SIM_FULL) {
        out->load_s = (double)trace->n * p->load_s;
        out->lost_s = lost_s;                   /* recomputed */
    } else {
        out->load_s = (double)trace->n * p->load_s / p->shards;
        out->pls = lost_s / (p->shards * p->job_s); /* one shard's updates lost */
    }
}

/* ---- one point: a strategy at an interval over its trials ---------------------- */

static void progress_tick(sim_progress *pr, sim_strategy s, double interval_s)
{
    double now = cpri_now_s();
    pr->done++;
    if (now - pr->t0 < 1.0 || now - pr->last < 1.0)
        return;
    pr->last = now;
    fprintf(stderr, "cpr-analyze: simulate: %llu/%llu trials (%.0f%%), %s at %.4g s, %.1f s\n",
            (unsigned long long)pr->done, (unsigned long long)pr->total,
            100.0 * (double)pr->done / (double)(pr->total ? pr->total : 1),
            sim_strategy_name(s), interval_s, now - pr->t0);
}

typedef struct point_acc {
    sim_acc overhead, pls, save, load, lost, restart, background, failures;
} point_acc;

static void point_add(point_acc *a, const sim_outcome *r, double job_s)
{
    sim_acc_add(&a->overhead,
                (r->save_s + r->load_s + r->lost_s + r->restart_s + r->background_s) / job_s);
    sim_acc_add(&a->pls, r->pls);
    sim_acc_add(&a->save, r->save_s / job_s);
    sim_acc_add(&a->load, r->load_s / job_s);
    sim_acc_add(&a->lost, r->lost_s / job_s);
    sim_acc_add(&a->restart, r->restart_s / job_s);
    sim_acc_add(&a->background, r->background_s / job_s);
    sim_acc_add(&a->failures, (double)r->failures);
}

static cpr_status point_model(const sim_opts *o, sim_strategy s, double interval_s,
                              sim_result *out)
{
    cpr_overhead m;
    cpr_status st = s == SIM_FULL ? cpr_model_full(&o->model, interval_s, &m)
                                  : cpr_model_partial(&o->model, interval_s, &m);
    if (st)
        return st;
    out->model_overhead_frac = m.overhead_frac;
    out->model_pls = m.pls;
    return CPR_OK;
}

cpr_status sim_run_point(const sim_opts *o, sim_strategy s, double interval_s, int at_plan,
                         sim_progress *progress, sim_result *out)
{
    int emb = sim_strategy_prioritized(s);
    uint64_t trials = emb ? o->emb_trials : o->trials;
    sim_trace trace = {0};
    point_acc acc;
    memset(&acc, 0, sizeof acc);
    cpr_status st = CPR_OK;
    for (uint64_t k = 0; k < trials && st == CPR_OK; k++) {
        sim_outcome r;
        st = sim_trace_make(o, k, &trace);
        if (st == CPR_OK && emb)
            st = sim_emb_trial(o, s, interval_s, &trace, k, &r);
        else if (st == CPR_OK)
            sim_time_trial(o, s, interval_s, &trace, &r);
        if (st == CPR_OK) {
            point_add(&acc, &r, o->model.job_s);
            progress_tick(progress, s, interval_s);
        }
    }
    sim_trace_release(&trace);
    if (st)
        return st;
    sim_result res = {.strategy = s, .interval_s = interval_s, .at_plan = at_plan,
                      .trials = trials};
    res.save_interval_s = emb ? o->fraction * interval_s : interval_s;
    /* A prioritized save carries r of a full save's background. */
    res.background_share = (emb ? o->fraction : 1.0) * o->model.background_s /
                           res.save_interval_s;
    res.back_to_back = res.background_share >= 1.0;
    res.overhead_frac = sim_acc_stat(&acc.overhead);
    res.pls = sim_acc_stat(&acc.pls);
    res.save_frac = sim_acc_mean(&acc.save);
    res.load_frac = sim_acc_mean(&acc.load);
    res.lost_frac = sim_acc_mean(&acc.lost);
    res.restart_frac = sim_acc_mean(&acc.restart);
    res.background_frac = sim_acc_mean(&acc.background);
    res.failures = sim_acc_mean(&acc.failures);
    st = point_model(o, s, interval_s, &res);
    if (st == CPR_OK)
        *out = res;
    return st;
}
