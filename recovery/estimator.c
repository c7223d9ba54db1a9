/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The online estimator (cpr/recovery.h): the closed-form model fed with what
 * the running job measures. Each input has a prior that answers until
 * `min_samples` samples arrived; from then on an exponentially weighted
 * moving average (seeded with the mean of the first samples) follows it, so
 * a slow drift (a store filling up, a busier network) moves the estimate
 * while one outlier moves it by only `smoothing` of its distance. Failures
 * are rare, so the MTBF is not averaged but estimated as a Gamma-posterior
 * mean that starts at the prior and lets the evidence take over.
 * The prioritized policies' PLS is predicted from measured unsaved events
 * (the loss ratio below), not from the vanilla formula. docs/model.md has
 * every formula.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/recovery.h"
#include "cpr_common.h"

#define POLICY_COUNT 5
#define LOSS_RATIO_FLOOR 1e-9 /* a policy that lost nothing: the interval is capped by the job */
#define TIME_FLOOR 1e-9 /* the least time the model is given (in the estimator's unit) */
/* E-H: the mode the saves follow (the last save's: prioritized is partial,
 * FULL or DELTA full) changes only for one cheaper by this share of its
 * overhead, so that noise near the boundary does not alternate FULL and
 * prioritized saves (±3% noise in measured stalls flipped it 10 times in
 * 40 saves). */
#define MODE_HYSTERESIS 0.05

/* An input: the prior until `n` reaches min_samples, then an EWMA. */
typedef struct ewma {
    double value;   /* mean of the samples so far while n <= min, then the EWMA */
    uint64_t n;
} ewma;

struct cpr_estimator {
    cpr_estimator_config cfg;  /* defaults filled in */
    ewma save, load, restart, full_bytes, rate;
    ewma loss_ratio[POLICY_COUNT];
    ewma bg_time[POLICY_COUNT], bg_cost[POLICY_COUNT]; /* per save, by policy */
    uint64_t failures;
    char time_unit[8];         /* cfg.time_unit points here */
    double now_s;              /* the latest time seen */
    /* The trackers, integrated over the window since the last save. */
    int have_track;
    double track_t;
    uint64_t track_events, track_unsaved;
    double area, span;         /* integral of unsaved events dt, and of dt */
    uint64_t window_events;
    /* The last save, which opened the window. */
    int have_save;
    double save_t;
    cpr_policy save_policy;
};

static void ewma_add(ewma *e, double sample, double alpha, uint32_t min_samples)
{
    e->n++;
    if (e->n <= min_samples) /* the running mean seeds the average */
        e->value += (sample - e->value) / (double)e->n;
    else
        e->value += alpha * (sample - e->value);
}

static int ewma_ready(const ewma *e, uint32_t min_samples)
{
    return e->n >= min_samples && e->n > 0;
}

static double ewma_get(const ewma *e, double prior, uint32_t min_samples)
{
    return ewma_ready(e, min_samples) ? e->value : prior;
}

static int prioritized(cpr_policy policy)
{
    return policy == CPR_POLICY_MFU || policy == CPR_POLICY_SSU ||
           policy == CPR_POLICY_TOPK_NORM;
}

/*
 * The codec of prioritized parts (docs/model.md, "The codec"): every restore
 * of a row from a quantized block adds that codec's rounding error, and the
 * errors of R restores add up like a random walk (RMS grows as sqrt(R)), so
 * a codec with RMS error e_c is worth as many restores as int4 for
 * R4 (e_int4 / e_c)^2. The ratios: int8 (255 / 15)^2, exact for uniform
 * rounding; bf16 from cpr-bench quant's RMS errors on its rows (0.00647
 * against 0.0000822: 6200, taken as 6000). The most compact codec whose
 * budget covers the expected restores wins; f32 past bf16's.
 */
static const struct { cpr_codec codec; double restores_per_int4; } CODEC_BUDGETS[] = {
    {CPR_CODEC_INT4, 1.0}, {CPR_CODEC_INT8, 289.0}, {CPR_CODEC_BF16, 6000.0}};

static cpr_codec choose_codec(const cpr_estimator_config *c, double restores)
{
    if (!c->choose_codec)
        return CPR_CODEC_F32;
    for (size_t i = 0; i < sizeof CODEC_BUDGETS / sizeof CODEC_BUDGETS[0]; i++)
        if (restores <= c->int4_max_restores * CODEC_BUDGETS[i].restores_per_int4)
            return CODEC_BUDGETS[i].codec;
    return CPR_CODEC_F32;
}

/* ---- configuration --------------------------------------------------------- */

/* The largest measurement (a time in seconds: about 31,700 years) and the
 * largest configured value the estimator takes, so that every product and
 * sum the model forms of them stays finite and a decision never fails on
 * overflow: the model multiplies up to three of them and divides by times
 * down to TIME_FLOOR (job_s / mtbf_s x load_s), so the job and the costs
 * stay at most 1e100; an MTBF or a count may stand for "never" (1e300),
 * which only ever divides. */
#define INPUT_MAX 1e12
#define CONFIG_MAX 1e300
#define CONFIG_TIME_MAX 1e100

static cpr_status check_positive(const char *field, double v, double most)
{
    if (!(v > 0.0) || !isfinite(v) || v > most)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: %g is not a positive number of at most %g",
                        field, v, most);
    return CPR_OK;
}

static void fill_defaults(cpr_estimator_config *c)
{
    if (c->fraction == 0.0)
        c->fraction = 0.125;
    if (c->smoothing == 0.0)
        c->smoothing = 0.25;
    if (c->min_samples == 0)
        c->min_samples = 3;
    if (c->prior_failures == 0.0)
        c->prior_failures = 1.0;
    if (c->prior_loss_ratio == 0.0)
        c->prior_loss_ratio = 1.0;
    if (c->policy == CPR_POLICY_FULL)
        c->fraction = 1.0; /* vanilla CPR saves every row */
    if (!c->time_unit || !*c->time_unit)
        c->time_unit = "s";
    if (c->max_background_share == 0.0)
        c->max_background_share = CPR_DEFAULT_BACKGROUND_SHARE;
    if (c->int4_max_restores == 0.0)
        c->int4_max_restores = CPR_INT4_MAX_RESTORES;
}

static cpr_status check_config(const cpr_estimator_config *c)
{
    const struct { const char *field; double value, most; } positive[] = {
        {"job_s", c->job_s, CONFIG_TIME_MAX}, {"prior_mtbf_s", c->prior_mtbf_s, CONFIG_MAX},
        {"prior_save_s", c->prior_save_s, CONFIG_TIME_MAX},
        {"prior_load_s", c->prior_load_s, CONFIG_TIME_MAX},
        {"prior_restart_s", c->prior_restart_s, CONFIG_TIME_MAX},
        {"prior_failures", c->prior_failures, CONFIG_MAX},
        {"prior_loss_ratio", c->prior_loss_ratio, CONFIG_MAX},
        {"int4_max_restores", c->int4_max_restores, CONFIG_MAX},
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++) {
        cpr_status st = check_positive(positive[i].field, positive[i].value, positive[i].most);
        if (st)
            return st;
    }
    if (c->shards < 1)
        return cpr_fail(CPR_INVALID_ARGUMENT, "shards: must be at least 1");
    if (!(c->target_pls > 0.0 && c->target_pls < 1.0))
        return cpr_fail(CPR_INVALID_ARGUMENT, "target_pls: %g is not in (0, 1)", c->target_pls);
    if (c->formula != CPR_INTERVAL_YOUNG && c->formula != CPR_INTERVAL_DALY)
        return cpr_fail(CPR_INVALID_ARGUMENT, "formula: %d is neither YOUNG nor DALY",
                        (int)c->formula);
    if (c->policy != CPR_POLICY_FULL && !prioritized(c->policy))
        return cpr_fail(CPR_INVALID_ARGUMENT, "policy: %d is not FULL, MFU, SSU or TOPK_NORM "
                        "(partial recovery needs rows of every kind saved)", (int)c->policy);
    if (!(c->fraction > 0.0 && c->fraction <= 1.0))
        return cpr_fail(CPR_INVALID_ARGUMENT, "fraction: %g is not in (0, 1]", c->fraction);
    if (!(c->smoothing > 0.0 && c->smoothing <= 1.0))
        return cpr_fail(CPR_INVALID_ARGUMENT, "smoothing: %g is not in (0, 1]", c->smoothing);
    if (c->choose_codec != 0 && c->choose_codec != 1)
        return cpr_fail(CPR_INVALID_ARGUMENT, "choose_codec: %d is neither 0 nor 1",
                        c->choose_codec);
    if (!(c->max_background_share > 0.0 && c->max_background_share <= 1.0))
        return cpr_fail(CPR_INVALID_ARGUMENT, "max_background_share: %g is not in (0, 1]",
                        c->max_background_share);
    return CPR_OK;
}

cpr_status cpr_estimator_create(const cpr_estimator_config *config, cpr_estimator **out)
{
    if (!config || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "config and out must not be NULL");
    cpr_estimator_config c = *config;
    fill_defaults(&c);
    cpr_status st = check_config(&c);
    if (st)
        return st;
    if (strlen(c.time_unit) >= sizeof ((cpr_estimate *)0)->time_unit)
        return cpr_fail(CPR_INVALID_ARGUMENT, "time_unit \"%s\" is longer than %zu bytes",
                        c.time_unit, sizeof ((cpr_estimate *)0)->time_unit - 1);
    cpr_estimator *e = calloc(1, sizeof *e);
    if (!e)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for an estimator");
    e->cfg = c;
    snprintf(e->time_unit, sizeof e->time_unit, "%s", c.time_unit);
    e->cfg.time_unit = e->time_unit; /* the caller's string need not outlive us */
    *out = e;
    return CPR_OK;
}

void cpr_estimator_destroy(cpr_estimator *est)
{
    free(est);
}

/* ---- measurements ------------------------------------------------------------ */

static cpr_status check_sample(const char *field, double v)
{
    if (!(v >= 0.0) || !isfinite(v) || v > INPUT_MAX)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: %g is not a number in [0, %g]", field, v,
                        INPUT_MAX);
    return CPR_OK;
}

/* Validate `now_s` against the clock; does not move it. */
static cpr_status check_now(const cpr_estimator *e, double now_s)
{
    cpr_status st = check_sample("now_s", now_s);
    if (!st && now_s < e->now_s)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "now_s: %g is before the latest time seen, %g",
                      now_s, e->now_s);
    return st;
}

/* Close the tracker window at a save: one loss-ratio sample for `policy`
 * when the window spans a whole interval of that policy. */
static void close_window(cpr_estimator *e, double now_s, cpr_policy policy)
{
    const cpr_estimator_config *c = &e->cfg;
    if (e->have_save && e->save_policy == policy && e->span > 0.0 && e->window_events > 0 &&
        now_s > e->save_t) {
        double fraction = prioritized(policy) ? c->fraction : 1.0;
        double base_s = (now_s - e->save_t) / fraction;
        double rate = (double)e->window_events / e->span;
        double mean_unsaved = e->area / e->span;
        /* Vanilla saving every base_s averages rate * base_s / 2 unsaved events. */
        ewma_add(&e->loss_ratio[policy], mean_unsaved / (rate * base_s / 2.0), c->smoothing,
                 c->min_samples);
    }
    e->area = e->span = 0.0;
    e->window_events = 0;
    e->have_save = 1;
    e->save_t = now_s;
    e->save_policy = policy;
}

cpr_status cpr_estimator_saved(cpr_estimator *est, double now_s, cpr_policy policy,
                               double stall_s, uint64_t bytes)
{
    if (!est)
        return cpr_fail(CPR_INVALID_ARGUMENT, "estimator is NULL");
    cpr_status st = check_now(est, now_s);
    if (!st)
        st = check_sample("stall_s", stall_s);
    if (!st && ((int)policy < 0 || (int)policy >= POLICY_COUNT))
        st = cpr_fail(CPR_INVALID_ARGUMENT, "policy: %d is not a cpr_policy", (int)policy);
    if (st)
        return st;
    const cpr_estimator_config *c = &est->cfg;
    est->now_s = now_s;
    if (policy == CPR_POLICY_FULL && bytes > 0)
        ewma_add(&est->full_bytes, (double)bytes, c->smoothing, 1);
    double full_bytes = c->full_bytes ? (double)c->full_bytes
                        : ewma_get(&est->full_bytes, 0.0, 1);
    /* A stall of 0 is below the caller's clock (a step count, a coarse
     * timer), not a free save: it tells nothing of o_save, and averaged in it
     * shrank the interval to the model's floor (2.7 ms: a save every step). */
    if (stall_s == 0.0)
        ;
    else if (policy == CPR_POLICY_FULL)
        ewma_add(&est->save, stall_s, c->smoothing, c->min_samples);
    else if (bytes > 0 && full_bytes > 0.0) /* a stall grows with the bytes gathered */
        ewma_add(&est->save, stall_s * full_bytes / (double)bytes, c->smoothing,
                 c->min_samples);
    close_window(est, now_s, policy);
    return CPR_OK;
}

cpr_status cpr_estimator_background(cpr_estimator *est, cpr_policy policy, double background_s,
                                    double cost_s)
{
    if (!est)
        return cpr_fail(CPR_INVALID_ARGUMENT, "estimator is NULL");
    cpr_status st = check_sample("background_s", background_s);
    if (!st)
        st = check_sample("cost_s", cost_s);
    if (!st && ((int)policy < 0 || (int)policy >= POLICY_COUNT))
        st = cpr_fail(CPR_INVALID_ARGUMENT, "policy: %d is not a cpr_policy", (int)policy);
    if (st)
        return st;
    ewma_add(&est->bg_time[policy], background_s, est->cfg.smoothing, 1);
    ewma_add(&est->bg_cost[policy], cost_s, est->cfg.smoothing, 1);
    return CPR_OK;
}

cpr_status cpr_estimator_loaded(cpr_estimator *est, double load_s, uint32_t shards_loaded)
{
    if (!est)
        return cpr_fail(CPR_INVALID_ARGUMENT, "estimator is NULL");
    cpr_status st = check_sample("load_s", load_s);
    if (st)
        return st;
    if (shards_loaded < 1 || shards_loaded > est->cfg.shards)
        return cpr_fail(CPR_INVALID_ARGUMENT, "shards_loaded: %u is not in 1..%u",
                        shards_loaded, est->cfg.shards);
    /* The model's partial load is o_load / N per failed shard: invert it. */
    ewma_add(&est->load, load_s * est->cfg.shards / shards_loaded, est->cfg.smoothing,
             est->cfg.min_samples);
    return CPR_OK;
}

cpr_status cpr_estimator_restarted(cpr_estimator *est, double restart_s)
{
    if (!est)
        return cpr_fail(CPR_INVALID_ARGUMENT, "estimator is NULL");
    cpr_status st = check_sample("restart_s", restart_s);
    if (st)
        return st;
    ewma_add(&est->restart, restart_s, est->cfg.smoothing, est->cfg.min_samples);
    return CPR_OK;
}

cpr_status cpr_estimator_failed(cpr_estimator *est, double now_s)
{
    if (!est)
        return cpr_fail(CPR_INVALID_ARGUMENT, "estimator is NULL");
    cpr_status st = check_now(est, now_s);
    if (st)
        return st;
    est->now_s = now_s;
    est->failures++;
    return CPR_OK;
}

cpr_status cpr_estimator_tracked(cpr_estimator *est, double now_s, uint64_t update_events,
                                 uint64_t unsaved_events)
{
    if (!est)
        return cpr_fail(CPR_INVALID_ARGUMENT, "estimator is NULL");
    cpr_status st = check_now(est, now_s);
    if (st)
        return st;
    if (est->have_track && update_events < est->track_events)
        return cpr_fail(CPR_INVALID_ARGUMENT, "update_events: %llu is below the %llu reported "
                        "before (it counts every event so far)",
                        (unsigned long long)update_events,
                        (unsigned long long)est->track_events);
    est->now_s = now_s;
    if (est->have_track && now_s > est->track_t) {
        double dt = now_s - est->track_t;
        uint64_t events = update_events - est->track_events;
        est->area += dt * ((double)est->track_unsaved + (double)unsaved_events) / 2.0;
        est->span += dt;
        est->window_events += events;
        ewma_add(&est->rate, (double)events / dt, est->cfg.smoothing, 1);
    }
    est->have_track = 1;
    est->track_t = now_s;
    est->track_events = update_events;
    est->track_unsaved = unsaved_events;
    return CPR_OK;
}

/* ---- the decision -------------------------------------------------------------- */

/* Into [lo, hi]; hi wins when the bounds cross (a save longer than the job). */
static double bound(double v, double lo, double hi)
{
    if (v < lo)
        v = lo;
    return v > hi ? hi : v;
}

/* The inputs in use: measured where enough was measured, else the priors. */
static void current_inputs(const cpr_estimator *e, cpr_estimate *out)
{
    const cpr_estimator_config *c = &e->cfg;
    uint32_t min = c->min_samples;
    /* Exponential failures with a Gamma(prior_failures, prior_failures *
     * prior_mtbf) prior on the rate: 1 / the posterior mean rate. */
    double seen = c->prior_failures + (double)e->failures;
    out->mtbf_s = c->prior_mtbf_s * (c->prior_failures / seen) + e->now_s / seen;
    out->save_s = ewma_get(&e->save, c->prior_save_s, min);
    out->load_s = ewma_get(&e->load, c->prior_load_s, min);
    out->restart_s = ewma_get(&e->restart, c->prior_restart_s, min);
    out->loss_ratio = ewma_get(&e->loss_ratio[c->policy], c->prior_loss_ratio, min);
    out->events_per_s = ewma_get(&e->rate, 0.0, 1);
    out->failures = e->failures;
    out->measured = (e->failures ? CPR_MEASURED_MTBF : 0u) |
                    (ewma_ready(&e->save, min) ? CPR_MEASURED_SAVE : 0u) |
                    (ewma_ready(&e->load, min) ? CPR_MEASURED_LOAD : 0u) |
                    (ewma_ready(&e->restart, min) ? CPR_MEASURED_RESTART : 0u) |
                    (ewma_ready(&e->loss_ratio[c->policy], min) ? CPR_MEASURED_LOSS_RATIO : 0u);
}

/* The model's background for saves under `policy` (docs/model.md, "The
 * background of a save"): the measured background time and cost of one
 * save, as for a full-size save (a prioritized save of `fraction` of the
 * rows has that fraction of it), so that the model's floor and cost apply. */
static void set_background(const cpr_estimator *est, cpr_policy policy, double fraction,
                           cpr_model_params *p)
{
    p->background_s = ewma_get(&est->bg_time[policy], 0.0, 1) / fraction;
    p->background_cost_s = ewma_get(&est->bg_cost[policy], 0.0, 1) / fraction;
}

cpr_status cpr_estimator_decide(const cpr_estimator *est, cpr_estimate *out)
{
    if (!est || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "estimator and out must not be NULL");
    const cpr_estimator_config *c = &est->cfg;
    cpr_estimate r;
    memset(&r, 0, sizeof r);
    snprintf(r.time_unit, sizeof r.time_unit, "%s", est->time_unit);
    current_inputs(est, &r);
    /* Measurements may be 0 (a save or load too quick for the clock): the
     * model needs times above 0. */
    r.save_s = fmax(r.save_s, TIME_FLOOR);
    r.load_s = fmax(r.load_s, TIME_FLOOR);
    r.restart_s = fmax(r.restart_s, TIME_FLOOR);
    r.mtbf_s = fmax(r.mtbf_s, TIME_FLOOR);
    cpr_model_params p = {.mtbf_s = r.mtbf_s, .shards = c->shards, .save_s = r.save_s,
                          .load_s = r.load_s, .restart_s = r.restart_s, .job_s = c->job_s,
                          .target_pls = c->target_pls, .formula = c->formula,
                          .max_background_share = c->max_background_share};
    double t_full = 0.0, t_part = 0.0, part_frac = prioritized(c->policy) ? c->fraction : 1.0;
    double ratio = r.loss_ratio > LOSS_RATIO_FLOOR ? r.loss_ratio : LOSS_RATIO_FLOOR;
    /* Full recovery saves FULL, partial the policy; each interval is at
     * least its saves' background floor, and the training time the
     * background costs counts in the overhead (the model does both). */
    set_background(est, CPR_POLICY_FULL, 1.0, &p);
    cpr_status st = cpr_model_interval_full(&p, &t_full);
    t_full = bound(t_full, r.save_s, c->job_s);
    if (!st)
        st = cpr_model_full(&p, t_full, &r.full);
    /* PLS(T) = ratio * T / (2 N T_fail) meets P up to T = 2 P N T_fail / ratio.
     * A floor above that stretches the interval: PLS is computed at it, so
     * the miss is visible in the estimate. */
    set_background(est, c->policy, part_frac, &p);
    if (!st)
        st = cpr_model_background_floor(
            &p, fmin(2.0 * c->target_pls * c->shards * r.mtbf_s / ratio, c->job_s), &t_part);
    t_part = bound(t_part, r.save_s, c->job_s);
    if (!st)
        st = cpr_model_partial(&p, t_part, &r.partial);
    if (st)
        return cpr_fail(CPR_INTERNAL, "estimator inputs became invalid: %s", cpr_errmsg());
    r.partial.pls *= r.loss_ratio;
    r.pls = r.partial.pls;
    r.benefit_frac = r.full.overhead_frac - r.partial.overhead_frac;
    r.mode = r.partial.overhead_s < r.full.overhead_s ? CPR_RECOVERY_PARTIAL : CPR_RECOVERY_FULL;
    if (est->have_save) { /* E-H */
        cpr_recovery_mode now = prioritized(est->save_policy) ? CPR_RECOVERY_PARTIAL
                                                               : CPR_RECOVERY_FULL;
        double stay = now == CPR_RECOVERY_PARTIAL ? r.partial.overhead_s : r.full.overhead_s;
        double move = now == CPR_RECOVERY_PARTIAL ? r.full.overhead_s : r.partial.overhead_s;
        if (r.mode != now && !(move < stay * (1.0 - MODE_HYSTERESIS)))
            r.mode = now;
    }
    r.policy = r.mode == CPR_RECOVERY_PARTIAL ? c->policy : CPR_POLICY_FULL;
    r.fraction = r.policy == CPR_POLICY_FULL ? 1.0 : c->fraction;
    r.base_interval_s = r.mode == CPR_RECOVERY_PARTIAL ? t_part : t_full;
    r.interval_s = r.base_interval_s * r.fraction;
    r.background_s = ewma_get(&est->bg_time[r.policy], 0.0, 1);
    r.background_cost_s = ewma_get(&est->bg_cost[r.policy], 0.0, 1);
    /* Partial recovery restores the failed shard (1 of N) from the policy's
     * parts; full recovery and FULL parts stay exact. */
    if (r.mode == CPR_RECOVERY_PARTIAL && prioritized(r.policy)) {
        r.quantized_restores = c->job_s / r.mtbf_s / c->shards;
        r.codec = choose_codec(c, r.quantized_restores);
    }
    *out = r;
    return CPR_OK;
}

cpr_status cpr_estimator_recovery_mode(const cpr_estimator *est, cpr_recovery_mode *mode)
{
    if (!est || !mode)
        return cpr_fail(CPR_INVALID_ARGUMENT, "estimator and mode must not be NULL");
    /* Since a prioritized save the newest consistent cut is older than the
     * rows saved: a full recovery would rewind past them all (to the job's
     * first save, when every save since was prioritized), which the model's
     * half an interval of lost work does not see. */
    if (est->have_save && prioritized(est->save_policy)) {
        *mode = CPR_RECOVERY_PARTIAL;
        return CPR_OK;
    }
    cpr_estimate e;
    cpr_status st = cpr_estimator_decide(est, &e);
    if (st == CPR_OK)
        *mode = e.mode;
    return st;
}
