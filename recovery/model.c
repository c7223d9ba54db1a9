/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The closed-form model of full and partial recovery (cpr/recovery.h): the
 * expected overhead of each at an interval, their intervals (Young or Daly
 * for full; the PLS target for partial; both floored so that a save's
 * background work does not run back to back) and the decision. docs/model.md
 * derives every formula here; the code follows it term by term so the two
 * can be read side by side.
 */
#include <math.h>
#include <string.h>

#include "cpr/recovery.h"
#include "cpr_common.h"

const char *cpr_recovery_mode_name(cpr_recovery_mode mode)
{
    return mode == CPR_RECOVERY_PARTIAL ? "partial" : "full";
}

const char *cpr_interval_formula_name(cpr_interval_formula formula)
{
    return formula == CPR_INTERVAL_DALY ? "daly" : "young";
}

/* A time the model can use: positive and finite. */
static cpr_status check_time(const char *field, double v)
{
    if (!(v > 0.0) || !isfinite(v))
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: %g is not a positive finite time in seconds",
                        field, v);
    return CPR_OK;
}

/* The background of a save: optional, so zero is a valid time here. */
static cpr_status check_background(const cpr_model_params *p)
{
    if (!(p->background_s >= 0.0) || !isfinite(p->background_s))
        return cpr_fail(CPR_INVALID_ARGUMENT, "background_s: %g is not a finite time >= 0",
                        p->background_s);
    if (!(p->background_cost_s >= 0.0) || !isfinite(p->background_cost_s))
        return cpr_fail(CPR_INVALID_ARGUMENT, "background_cost_s: %g is not a finite time >= 0",
                        p->background_cost_s);
    if (!(p->max_background_share >= 0.0 && p->max_background_share <= 1.0))
        return cpr_fail(CPR_INVALID_ARGUMENT, "max_background_share: %g is not in (0, 1] "
                        "(or 0 for the default)", p->max_background_share);
    return CPR_OK;
}

cpr_status cpr_model_check(const cpr_model_params *p)
{
    if (!p)
        return cpr_fail(CPR_INVALID_ARGUMENT, "model parameters are NULL");
    const struct { const char *field; double value; } times[] = {
        {"mtbf_s", p->mtbf_s}, {"save_s", p->save_s}, {"load_s", p->load_s},
        {"restart_s", p->restart_s}, {"job_s", p->job_s},
    };
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
        cpr_status st = check_time(times[i].field, times[i].value);
        if (st)
            return st;
    }
    if (p->shards < 1)
        return cpr_fail(CPR_INVALID_ARGUMENT, "shards: must be at least 1");
    if (!(p->target_pls > 0.0 && p->target_pls < 1.0))
        return cpr_fail(CPR_INVALID_ARGUMENT, "target_pls: %g is not in (0, 1)", p->target_pls);
    if (p->formula != CPR_INTERVAL_YOUNG && p->formula != CPR_INTERVAL_DALY)
        return cpr_fail(CPR_INVALID_ARGUMENT, "formula: %d is neither YOUNG nor DALY",
                        (int)p->formula);
    return check_background(p);
}

static cpr_status check_args(const cpr_model_params *p, double interval_s, const void *out)
{
    if (!out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "output is NULL");
    cpr_status st = cpr_model_check(p);
    return st ? st : check_time("interval_s", interval_s);
}

/* The costs paid once per save, T_total/T of them: the stall, and the
 * training time the save's background work takes away. A prioritized save
 * of r of the rows every r T pays r of each, the same over the job. */
static void per_save(const cpr_model_params *p, double interval_s, cpr_overhead *o)
{
    o->save_s = p->save_s * p->job_s / interval_s;
    o->background_s = p->background_cost_s * p->job_s / interval_s;
}

/* Fill the fractions from the seconds. */
static void finish(const cpr_model_params *p, cpr_overhead *o)
{
    o->overhead_s = o->save_s + o->load_s + o->lost_s + o->restart_s + o->background_s;
    o->overhead_frac = o->overhead_s / p->job_s;
    o->save_frac = o->save_s / p->job_s;
    o->load_frac = o->load_s / p->job_s;
    o->lost_frac = o->lost_s / p->job_s;
    o->restart_frac = o->restart_s / p->job_s;
    o->background_frac = o->background_s / p->job_s;
}

cpr_status cpr_model_full(const cpr_model_params *p, double interval_s, cpr_overhead *out)
{
    cpr_status st = check_args(p, interval_s, out);
    if (st)
        return st;
    double failures = p->job_s / p->mtbf_s;
    cpr_overhead o = {.interval_s = interval_s};
    per_save(p, interval_s, &o);
    o.load_s = failures * p->load_s;
    o.lost_s = failures * interval_s / 2.0;   /* a failure lands mid-interval on average */
    o.restart_s = failures * p->restart_s;
    finish(p, &o);
    *out = o;
    return CPR_OK;
}

cpr_status cpr_model_partial(const cpr_model_params *p, double interval_s, cpr_overhead *out)
{
    cpr_status st = check_args(p, interval_s, out);
    if (st)
        return st;
    double failures = p->job_s / p->mtbf_s;
    cpr_overhead o = {.interval_s = interval_s};
    per_save(p, interval_s, &o);
    o.load_s = failures * p->load_s / p->shards;  /* only the failed shard loads */
    o.lost_s = 0.0;                               /* nothing is recomputed ... */
    o.restart_s = failures * p->restart_s;
    o.pls = interval_s / (2.0 * p->shards * p->mtbf_s); /* ... updates are lost instead */
    finish(p, &o);
    *out = o;
    return CPR_OK;
}

/* A save's background may take at most beta of the time between saves:
 * the interval is at least b / beta, but the floor never passes the job. */
static double background_floor(const cpr_model_params *p, double interval_s)
{
    double share = p->max_background_share > 0.0 ? p->max_background_share
                                                 : CPR_DEFAULT_BACKGROUND_SHARE;
    double floor_s = p->background_s / share;
    if (floor_s > p->job_s)
        floor_s = p->job_s;
    return interval_s < floor_s ? floor_s : interval_s;
}

cpr_status cpr_model_background_floor(const cpr_model_params *p, double interval_s, double *out)
{
    cpr_status st = check_args(p, interval_s, out);
    if (st)
        return st;
    *out = background_floor(p, interval_s);
    return CPR_OK;
}

/* Young's or Daly's interval, before the floor. A save costs the job its
 * stall and the training time its background takes away (c): both are paid
 * once per save, so both are the o_save the interval balances against the
 * lost half interval (docs/model.md, "The background of a save"). */
static double checkpoint_interval(const cpr_model_params *p)
{
    double save_s = p->save_s + p->background_cost_s;
    double young = sqrt(2.0 * save_s * p->mtbf_s);
    if (p->formula == CPR_INTERVAL_YOUNG)
        return young;
    /* Daly (2006), eq. 37: valid while the save is shorter than 2 T_fail. */
    if (save_s >= 2.0 * p->mtbf_s)
        return p->mtbf_s;
    double ratio = save_s / (2.0 * p->mtbf_s);
    return young * (1.0 + sqrt(ratio) / 3.0 + ratio / 9.0) - save_s;
}

cpr_status cpr_model_interval_full(const cpr_model_params *p, double *interval_s)
{
    cpr_status st = check_args(p, 1.0, interval_s);
    if (st)
        return st;
    *interval_s = background_floor(p, checkpoint_interval(p));
    return CPR_OK;
}

cpr_status cpr_model_interval_partial(const cpr_model_params *p, double *interval_s)
{
    cpr_status st = check_args(p, 1.0, interval_s);
    if (st)
        return st;
    double t = 2.0 * p->target_pls * p->shards * p->mtbf_s;
    *interval_s = background_floor(p, t < p->job_s ? t : p->job_s);
    return CPR_OK;
}

cpr_status cpr_model_plan_compute(const cpr_model_params *p, cpr_model_plan *out)
{
    double t_full = 0, t_part = 0;
    cpr_model_plan plan;
    memset(&plan, 0, sizeof plan);
    cpr_status st = check_args(p, 1.0, out);
    if (!st)
        st = cpr_model_interval_full(p, &t_full);
    if (!st)
        st = cpr_model_interval_partial(p, &t_part);
    if (!st)
        st = cpr_model_full(p, t_full, &plan.full);
    if (!st)
        st = cpr_model_partial(p, t_part, &plan.partial);
    if (st)
        return st;
    plan.decision = plan.partial.overhead_s < plan.full.overhead_s ? CPR_RECOVERY_PARTIAL
                                                                   : CPR_RECOVERY_FULL;
    plan.benefit_frac = plan.full.overhead_frac - plan.partial.overhead_frac;
    *out = plan;
    return CPR_OK;
}
