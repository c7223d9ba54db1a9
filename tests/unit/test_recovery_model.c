/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The recovery model and the online estimator (cpr/recovery.h): closed
 * forms against values computed by hand (docs/model.md, the worked example),
 * Daly's interval, the decision at its edges (equal overheads choose full, a
 * tight target makes partial lose, a loose one hits the cap at the job),
 * the background floor and cost by hand, input validation naming the field, and the estimator converging on
 * synthetic measurements: priors until measured, EWMA of noisy stalls, the
 * MTBF posterior, the loss ratio of a prioritized policy lengthening its
 * interval, and the bounds.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cpr/codec.h"
#include "cpr/recovery.h"
#include "testutil.h"

#define assert_close(want, got, tol)                                                   \
    do {                                                                               \
        double w_ = (want), g_ = (got);                                                \
        if (!(fabs(w_ - g_) <= (tol)))                                                 \
            fail_msg("%s = %.17g, want %.17g (+-%g)", #got, g_, w_, (double)(tol));    \
    } while (0)

/* The worked example of docs/model.md: MTBF 1 h, 8 shards, save 50 s, load
 * 120 s, restart 60 s, job 50 h, PLS target 0.0125. */
static cpr_model_params example(void)
{
    cpr_model_params p = {.mtbf_s = 3600, .shards = 8, .save_s = 50, .load_s = 120,
                          .restart_s = 60, .job_s = 180000, .target_pls = 0.0125};
    return p;
}

/* ---- closed forms ------------------------------------------------------------ */

static void test_full_by_hand(void **state)
{
    (void)state;
    cpr_model_params p = example();
    cpr_overhead o;
    double t = 0;
    assert_status(CPR_OK, cpr_model_interval_full(&p, &t));
    assert_close(600.0, t, 1e-9); /* sqrt(2 * 50 * 3600) */
    assert_status(CPR_OK, cpr_model_full(&p, 600.0, &o));
    /* 50 failures; save 50*180000/600, load 50*120, lost 50*300, restart 50*60 */
    assert_close(15000.0, o.save_s, 1e-9);
    assert_close(6000.0, o.load_s, 1e-9);
    assert_close(15000.0, o.lost_s, 1e-9);
    assert_close(3000.0, o.restart_s, 1e-9);
    assert_close(39000.0, o.overhead_s, 1e-9);
    assert_close(39000.0 / 180000.0, o.overhead_frac, 1e-15);
    assert_close(15000.0 / 180000.0, o.lost_frac, 1e-15);
    assert_close(0.0, o.pls, 0);
}

static void test_partial_by_hand(void **state)
{
    (void)state;
    cpr_model_params p = example();
    cpr_overhead o;
    double t = 0;
    assert_status(CPR_OK, cpr_model_interval_partial(&p, &t));
    assert_close(720.0, t, 1e-9); /* 2 * 0.0125 * 8 * 3600 */
    assert_status(CPR_OK, cpr_model_partial(&p, 720.0, &o));
    assert_close(12500.0, o.save_s, 1e-9);    /* 50 * 180000 / 720 */
    assert_close(750.0, o.load_s, 1e-9);      /* 50 * 120 / 8 */
    assert_close(0.0, o.lost_s, 0);
    assert_close(3000.0, o.restart_s, 1e-9);
    assert_close(16250.0, o.overhead_s, 1e-9);
    assert_close(0.0125, o.pls, 1e-15);       /* 720 / (2 * 8 * 3600) */
}

static void test_plan_by_hand(void **state)
{
    (void)state;
    cpr_model_params p = example();
    cpr_model_plan plan;
    assert_status(CPR_OK, cpr_model_plan_compute(&p, &plan));
    assert_int_equal(CPR_RECOVERY_PARTIAL, plan.decision);
    assert_close(600.0, plan.full.interval_s, 1e-9);
    assert_close(720.0, plan.partial.interval_s, 1e-9);
    assert_close((39000.0 - 16250.0) / 180000.0, plan.benefit_frac, 1e-12);
}

static void test_daly(void **state)
{
    (void)state;
    cpr_model_params p = example();
    p.formula = CPR_INTERVAL_DALY;
    double t = 0;
    assert_status(CPR_OK, cpr_model_interval_full(&p, &t));
    /* 600 (1 + (1/12)/3 + (1/144)/9) - 50, with o_save/(2 T_fail) = 1/144 */
    assert_close(600.0 * (1.0 + 1.0 / 36.0 + 1.0 / 1296.0) - 50.0, t, 1e-9);
    p.save_s = 8000; /* >= 2 T_fail: Daly's interval is T_fail */
    assert_status(CPR_OK, cpr_model_interval_full(&p, &t));
    assert_close(3600.0, t, 0);
}

/* ---- the decision at its edges ------------------------------------------------ */

static void test_equal_overheads_choose_full(void **state)
{
    (void)state;
    /* Powers of two keep every operation exact: T_full = sqrt(2*1*2) = 2,
     * O_full = 8/2 + 4(1+1+1) = 16; T_part = 2*0.25*1*2 = 1,
     * O_part = 8/1 + 4(1+1) = 16. */
    cpr_model_params p = {.mtbf_s = 2, .shards = 1, .save_s = 1, .load_s = 1, .restart_s = 1,
                          .job_s = 8, .target_pls = 0.25};
    cpr_model_plan plan;
    assert_status(CPR_OK, cpr_model_plan_compute(&p, &plan));
    assert_true(plan.full.overhead_s == 16.0);
    assert_true(plan.partial.overhead_s == 16.0);
    assert_int_equal(CPR_RECOVERY_FULL, plan.decision);
    assert_true(plan.benefit_frac == 0.0);
}

static void test_tight_target_chooses_full(void **state)
{
    (void)state;
    cpr_model_params p = example();
    p.target_pls = 1e-9; /* T_part = 5.76e-5 s: saving all the time */
    cpr_model_plan plan;
    assert_status(CPR_OK, cpr_model_plan_compute(&p, &plan));
    assert_int_equal(CPR_RECOVERY_FULL, plan.decision);
    assert_close(2 * 1e-9 * 8 * 3600, plan.partial.interval_s, 1e-15);
    assert_true(plan.benefit_frac < 0);
}

static void test_loose_target_caps_at_the_job(void **state)
{
    (void)state;
    cpr_model_params p = example();
    p.target_pls = 0.999; /* 2 P N T_fail = 57542 s > ... */
    p.job_s = 36000;      /* ... a 10 h job: the cap */
    cpr_model_plan plan;
    assert_status(CPR_OK, cpr_model_plan_compute(&p, &plan));
    assert_close(36000.0, plan.partial.interval_s, 0);
    assert_close(36000.0 / (2.0 * 8 * 3600), plan.partial.pls, 1e-15);
    /* one save a job: O_part = 50 + 10 * (15 + 60) */
    assert_close(50.0 + 750.0, plan.partial.overhead_s, 1e-9);
    assert_int_equal(CPR_RECOVERY_PARTIAL, plan.decision);
}

static void test_partial_overhead_falls_with_interval(void **state)
{
    (void)state;
    cpr_model_params p = example();
    cpr_overhead a, b;
    assert_status(CPR_OK, cpr_model_partial(&p, 100.0, &a));
    assert_status(CPR_OK, cpr_model_partial(&p, 200.0, &b));
    assert_true(b.overhead_s < a.overhead_s);
    assert_close(2 * a.pls, b.pls, 1e-15);
}

/* The background of a save (docs/model.md): b = 300 s and c = 30 s per
 * full save with beta = 0.25 floor both intervals at 300 / 0.25 = 1200 s.
 * Full: 50 x 180000 / 1200 = 7500 s of stalls, 50 x (120 + 60 + 600) =
 * 39000 s per failure, 30 x 150 = 4500 s of background: 51000 s. Partial:
 * 7500 + 50 x (15 + 60) + 4500 = 15750 s, PLS 1200 / (2 x 8 x 3600). */
static void test_background_by_hand(void **state)
{
    (void)state;
    cpr_model_params p = example();
    p.background_s = 300, p.background_cost_s = 30;
    double t = 0;
    assert_status(CPR_OK, cpr_model_background_floor(&p, 600.0, &t));
    assert_close(1200.0, t, 0);
    assert_status(CPR_OK, cpr_model_background_floor(&p, 1500.0, &t));
    assert_close(1500.0, t, 0);                   /* above the floor: untouched */
    p.max_background_share = 0.5;
    assert_status(CPR_OK, cpr_model_background_floor(&p, 100.0, &t));
    assert_close(600.0, t, 0);
    p.max_background_share = 0, p.background_s = 1e6;
    assert_status(CPR_OK, cpr_model_background_floor(&p, 100.0, &t));
    assert_close(180000.0, t, 0);                 /* never beyond the job */
    p.background_s = 300;
    cpr_model_plan plan;
    assert_status(CPR_OK, cpr_model_plan_compute(&p, &plan));
    assert_close(1200.0, plan.full.interval_s, 0);
    assert_close(1200.0, plan.partial.interval_s, 0);
    assert_close(4500.0, plan.full.background_s, 1e-9);
    assert_close(4500.0 / 180000.0, plan.full.background_frac, 1e-15);
    assert_close(30000.0, plan.full.lost_s, 1e-9);
    assert_close(51000.0, plan.full.overhead_s, 1e-9);
    assert_close(51000.0 / 180000.0, plan.full.overhead_frac, 1e-15);
    assert_close(4500.0, plan.partial.background_s, 1e-9);
    assert_close(15750.0, plan.partial.overhead_s, 1e-9);
    assert_close(1200.0 / (2.0 * 8 * 3600), plan.partial.pls, 1e-15);
    assert_int_equal(CPR_RECOVERY_PARTIAL, plan.decision);
    assert_close((51000.0 - 15750.0) / 180000.0, plan.benefit_frac, 1e-15);
    /* Below the floor, the cost is part of what a save costs: Young's
     * interval balances o_save + c = 50 + 30 s against the lost half
     * interval, sqrt(2 x 80 x 3600) = 758.9 s (Daly's likewise). */
    p.background_s = 60; /* floor 240 s */
    assert_status(CPR_OK, cpr_model_plan_compute(&p, &plan));
    assert_close(sqrt(2.0 * 80 * 3600), plan.full.interval_s, 1e-12);
    p.formula = CPR_INTERVAL_DALY;
    double ratio = 80.0 / (2 * 3600), young = sqrt(2.0 * 80 * 3600);
    assert_status(CPR_OK, cpr_model_interval_full(&p, &t));
    assert_close(young * (1 + sqrt(ratio) / 3 + ratio / 9) - 80, t, 1e-12);
    /* Without a background: the worked example, no background term. */
    p = example();
    assert_status(CPR_OK, cpr_model_plan_compute(&p, &plan));
    assert_close(600.0, plan.full.interval_s, 0);
    assert_close(0.0, plan.partial.background_frac, 0);
}

static void expect_invalid(cpr_model_params p, const char *field)
{
    cpr_model_plan plan;
    memset(&plan, 0x5a, sizeof plan);
    unsigned char before[sizeof plan];
    memcpy(before, &plan, sizeof plan);
    assert_status(CPR_INVALID_ARGUMENT, cpr_model_plan_compute(&p, &plan));
    if (!strstr(cpr_errmsg(), field))
        fail_msg("message '%s' does not name %s", cpr_errmsg(), field);
    assert_memory_equal(before, &plan, sizeof plan); /* untouched on failure */
}

static void test_validation_names_the_field(void **state)
{
    (void)state;
    cpr_model_params p = example();
    p.mtbf_s = 0;
    expect_invalid(p, "mtbf_s");
    p = example(), p.save_s = -1;
    expect_invalid(p, "save_s");
    p = example(), p.load_s = NAN;
    expect_invalid(p, "load_s");
    p = example(), p.restart_s = INFINITY;
    expect_invalid(p, "restart_s");
    p = example(), p.job_s = 0;
    expect_invalid(p, "job_s");
    p = example(), p.shards = 0;
    expect_invalid(p, "shards");
    p = example(), p.target_pls = 1.0;
    expect_invalid(p, "target_pls");
    p = example(), p.target_pls = 0.0;
    expect_invalid(p, "target_pls");
    p = example(), p.formula = (cpr_interval_formula)7;
    expect_invalid(p, "formula");
    const struct { double time_s, cost_s, share; const char *field; } backgrounds[] = {
        {-1, 0, 0, "background_s"}, {NAN, 0, 0, "background_s"},
        {0, INFINITY, 0, "background_cost_s"}, {0, 0, 1.5, "max_background_share"},
        {0, 0, -0.25, "max_background_share"},
    };
    for (size_t i = 0; i < sizeof backgrounds / sizeof backgrounds[0]; i++) {
        p = example();
        p.background_s = backgrounds[i].time_s, p.background_cost_s = backgrounds[i].cost_s;
        p.max_background_share = backgrounds[i].share;
        expect_invalid(p, backgrounds[i].field);
    }
    cpr_overhead o;
    p = example();
    assert_status(CPR_INVALID_ARGUMENT, cpr_model_full(&p, 0.0, &o));
    assert_non_null(strstr(cpr_errmsg(), "interval_s"));
    assert_status(CPR_INVALID_ARGUMENT, cpr_model_partial(&p, NAN, &o));
}

/* ---- the estimator ------------------------------------------------------------- */

static cpr_estimator_config est_config(void)
{
    cpr_estimator_config c = {.shards = 8, .job_s = 180000, .target_pls = 0.0125,
                              .prior_mtbf_s = 3600, .prior_save_s = 50, .prior_load_s = 120,
                              .prior_restart_s = 60};
    return c;
}

static void test_estimator_priors_answer_first(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    cpr_estimator *e = NULL;
    cpr_estimate r;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    /* now_s = 0, no failure: the MTBF is the prior; everything is the example */
    assert_int_equal(0, r.measured);
    assert_close(3600.0, r.mtbf_s, 0);
    assert_int_equal(CPR_RECOVERY_PARTIAL, r.mode);
    assert_int_equal(CPR_POLICY_FULL, r.policy); /* vanilla CPR by default */
    assert_close(720.0, r.interval_s, 1e-9);
    assert_close(1.0, r.fraction, 0);
    assert_close(600.0, r.full.interval_s, 1e-9);
    assert_close(16250.0 / 180000.0, r.partial.overhead_frac, 1e-12);
    assert_close(0.0125, r.pls, 1e-15);
    cpr_estimator_destroy(e);
    cpr_estimator_destroy(NULL);
}

static void test_estimator_save_converges(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    cpr_estimator *e = NULL;
    cpr_estimate r;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    assert_status(CPR_OK, cpr_estimator_saved(e, 10, CPR_POLICY_FULL, 20.0, 1000));
    assert_status(CPR_OK, cpr_estimator_saved(e, 20, CPR_POLICY_FULL, 20.0, 1000));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_close(50.0, r.save_s, 0); /* 2 < min_samples 3: still the prior */
    assert_false(r.measured & CPR_MEASURED_SAVE);
    assert_status(CPR_OK, cpr_estimator_saved(e, 30, CPR_POLICY_FULL, 20.0, 1000));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_close(20.0, r.save_s, 1e-12);
    assert_true(r.measured & CPR_MEASURED_SAVE);
    /* Noisy stalls around 30 s: the average follows within the noise. */
    for (int i = 0; i < 40; i++)
        assert_status(CPR_OK, cpr_estimator_saved(e, 40 + i, CPR_POLICY_FULL,
                                                  i % 2 ? 27.0 : 33.0, 1000));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_close(30.0, r.save_s, 3.0 * 0.25 + 1e-9); /* alpha of the noise amplitude */
    /* A prioritized save of 1/8 of the bytes stalling 1/8 as long is a
     * full-size sample of the same cost. */
    assert_status(CPR_OK, cpr_estimator_saved(e, 100, CPR_POLICY_MFU, r.save_s / 8, 125));
    cpr_estimate r2;
    assert_status(CPR_OK, cpr_estimator_decide(e, &r2));
    assert_close(r.save_s, r2.save_s, 1e-9);
    cpr_estimator_destroy(e);
}

static void test_estimator_mtbf_posterior(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    c.prior_mtbf_s = 10000;
    cpr_estimator *e = NULL;
    cpr_estimate r;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    for (int i = 1; i <= 500; i++)
        assert_status(CPR_OK, cpr_estimator_failed(e, 1000.0 * i));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_close((10000.0 + 500000.0) / 501.0, r.mtbf_s, 1e-9);
    assert_close(1000.0, r.mtbf_s, 20.0);
    assert_int_equal(500, r.failures);
    assert_true(r.measured & CPR_MEASURED_MTBF);
    cpr_estimator_destroy(e);
}

/* The trackers of a job that saves with `policy` every `spacing` seconds,
 * each save leaving `left_after_save` of the unsaved events, reported every
 * second and just after each save. */
static void feed_windows(cpr_estimator *e, cpr_policy policy, double spacing, double rate,
                         double left_after_save, int saves)
{
    double t = 0, events = 0, unsaved = 0;
    for (int k = 0; k < saves; k++) {
        for (int s = 0; s < (int)spacing; s++) {
            t += 1.0;
            events += rate;
            unsaved += rate;
            assert_status(CPR_OK, cpr_estimator_tracked(e, t, (uint64_t)events, (uint64_t)unsaved));
        }
        unsaved *= left_after_save;
        assert_status(CPR_OK, cpr_estimator_saved(e, t, policy, 1.0, 100));
        assert_status(CPR_OK, cpr_estimator_tracked(e, t, (uint64_t)events, (uint64_t)unsaved));
    }
}

static void test_estimator_vanilla_loss_ratio_is_one(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    cpr_estimator *e = NULL;
    cpr_estimate r;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    feed_windows(e, CPR_POLICY_FULL, 100, 1000, 0.0, 10); /* every save takes all */
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_true(r.measured & CPR_MEASURED_LOSS_RATIO);
    /* The trapezoids over 1 s samples see mean (0+100)/2 steps of 1000:
     * exactly rate * T / 2. */
    assert_close(1.0, r.loss_ratio, 0.02);
    assert_close(1000.0, r.events_per_s, 1e-9);
    cpr_estimator_destroy(e);
}

static void test_estimator_prioritized_loses_less_longer_interval(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    c.policy = CPR_POLICY_MFU;
    c.fraction = 0.125;
    c.job_s = 1e9; /* no cap */
    cpr_estimator *e = NULL;
    cpr_estimate before, after;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    assert_status(CPR_OK, cpr_estimator_decide(e, &before));
    assert_close(720.0, before.base_interval_s, 1e-9); /* prior ratio 1: vanilla */
    assert_close(90.0, before.interval_s, 1e-9);       /* 1/8 of the rows every 1/8 T */
    assert_int_equal(CPR_POLICY_MFU, before.policy);
    /* Saves every 90 s that leave nothing unsaved: mean unsaved rate*90/2
     * against vanilla's rate*720/2 at the same bandwidth: ratio 1/8. */
    feed_windows(e, CPR_POLICY_MFU, 90, 100, 0.0, 12);
    assert_status(CPR_OK, cpr_estimator_decide(e, &after));
    assert_true(after.measured & CPR_MEASURED_LOSS_RATIO);
    assert_close(0.125, after.loss_ratio, 0.005);
    /* 1080 s without a failure raised the MTBF posterior: (3600 + 1080) / 1 */
    assert_close(4680.0, after.mtbf_s, 1e-9);
    assert_close(2 * 0.0125 * 8 * 4680.0 / after.loss_ratio, after.base_interval_s, 1e-6);
    assert_true(after.interval_s > 7 * before.interval_s);
    assert_close(0.0125, after.pls, 1e-9); /* the target, met with a longer interval */
    cpr_estimator_destroy(e);
}

static void test_estimator_bounds(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    c.prior_mtbf_s = 100;
    c.prior_save_s = 500; /* Young: sqrt(2*500*100) = 316 < the save itself */
    c.target_pls = 1e-6;
    cpr_estimator *e = NULL;
    cpr_estimate r;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_close(500.0, r.full.interval_s, 0);     /* never below the save time */
    assert_close(500.0, r.partial.interval_s, 0);
    cpr_estimator_destroy(e);
    c = est_config();
    c.job_s = 100; /* shorter than every interval */
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_close(100.0, r.full.interval_s, 0);
    assert_close(100.0, r.partial.interval_s, 0);
    cpr_estimator_destroy(e);
}

/* Measurements of 0 (a save, load or restart too quick for the clock) and
 * extreme priors still give a decision: the estimator never fails for a
 * valid estimator. */
static void test_estimator_zero_and_extreme_inputs(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    cpr_estimator *e = NULL;
    cpr_estimate r;
    for (int kind = 0; kind < 3; kind++) {
        assert_status(CPR_OK, cpr_estimator_create(&c, &e));
        for (int i = 0; i < 3; i++) {
            if (kind == 0)
                assert_status(CPR_OK, cpr_estimator_saved(e, 10.0 * (i + 1), CPR_POLICY_FULL,
                                                          0.0, 1000));
            else if (kind == 1)
                assert_status(CPR_OK, cpr_estimator_loaded(e, 0.0, 1));
            else
                assert_status(CPR_OK, cpr_estimator_restarted(e, 0.0));
        }
        assert_status(CPR_OK, cpr_estimator_decide(e, &r));
        assert_true(isfinite(r.interval_s) && r.interval_s > 0);
        /* A zero stall is below the clock, not a free save: o_save stays the
         * prior (it had fallen to the floor, and the full interval to 2.7 ms). */
        if (kind == 0) {
            assert_true(r.save_s == c.prior_save_s);
            assert_false(r.measured & CPR_MEASURED_SAVE);
        }
        cpr_estimator_destroy(e);
    }
    c = est_config();
    c.prior_mtbf_s = 1e300;
    c.policy = CPR_POLICY_MFU;
    c.prior_loss_ratio = 1e-12;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_true(isfinite(r.partial.interval_s));
    /* Measurements past 1e12 are refused and change nothing; the largest
     * accepted ones, with the largest prior, still decide (a load of 1e308
     * had overflowed to inf, then NaN, and a failure at 1.7e308 made every
     * later decision fail with CPR_INTERNAL). */
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_loaded(e, 1e308, 1));
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_failed(e, 1.7e308));
    for (int i = 0; i < 3; i++)
        assert_status(CPR_OK, cpr_estimator_loaded(e, 1e12, 1));
    assert_status(CPR_OK, cpr_estimator_failed(e, 1e12));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_true(isfinite(r.mtbf_s) && isfinite(r.load_s) && r.load_s >= 1e12);
    assert_true(isfinite(r.partial.interval_s) && isfinite(r.full.interval_s));
    cpr_estimator_destroy(e);
    c.prior_mtbf_s = 1e301; /* past the configuration's bound */
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_create(&c, &e));
    /* The largest job and costs with the shortest MTBF, and with "never":
     * every overhead finite, the benefit a number (1e300 for the job and a
     * cost gave inf overheads, a NaN benefit and a mode from inf < inf). */
    for (int never = 0; never < 2; never++) {
        c = est_config();
        c.job_s = c.prior_save_s = c.prior_load_s = c.prior_restart_s = 1e100;
        c.prior_mtbf_s = never ? 1e300 : 1e-300;
        assert_status(CPR_OK, cpr_estimator_create(&c, &e));
        assert_status(CPR_OK, cpr_estimator_decide(e, &r));
        assert_true(isfinite(r.full.overhead_s) && isfinite(r.partial.overhead_s));
        assert_true(isfinite(r.benefit_frac));
        cpr_estimator_destroy(e);
    }
    c = est_config();
    c.job_s = 1e101; /* the job and the costs: at most 1e100 */
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_create(&c, &e));
    c = est_config();
    c.prior_save_s = 1e300;
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_create(&c, &e));
}

/* The codec rule (docs/model.md, "The codec"): R = (job / MTBF) / N
 * restores of a row from prioritized parts; the most compact codec whose
 * budget (int4: R4, int8: 289 R4, bf16: 6000 R4) covers R. */
static void test_estimator_codec_rule(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    c.policy = CPR_POLICY_MFU;
    cpr_estimator *e = NULL;
    cpr_estimate r;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e)); /* choose_codec 0: f32 */
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_int_equal(CPR_RECOVERY_PARTIAL, r.mode);
    assert_close(180000.0 / 3600.0 / 8.0, r.quantized_restores, 1e-12); /* 6.25 */
    assert_int_equal(CPR_CODEC_F32, r.codec);
    cpr_estimator_destroy(e);
    const struct { double r4; cpr_codec want; } cases[] = {
        {0.0, CPR_CODEC_INT4},       /* the default R4 = 10 covers 6.25 */
        {6.25, CPR_CODEC_INT4},      /* at the budget */
        {6.0, CPR_CODEC_INT8},       /* 6.25 > 6, <= 289 x 6 */
        {6.25 / 289.0 * 0.99, CPR_CODEC_BF16},
        {6.25 / 6000.0 * 0.99, CPR_CODEC_F32}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.choose_codec = 1;
        c.int4_max_restores = cases[i].r4;
        assert_status(CPR_OK, cpr_estimator_create(&c, &e));
        assert_status(CPR_OK, cpr_estimator_decide(e, &r));
        assert_int_equal(cases[i].want, r.codec);
        /* Twice the failures: twice the restores, a codec as safe or safer. */
        assert_status(CPR_OK, cpr_estimator_failed(e, 1800));
        cpr_estimate more;
        assert_status(CPR_OK, cpr_estimator_decide(e, &more));
        assert_true(more.quantized_restores > r.quantized_restores);
        assert_true(cpr_codec_row_bytes(more.codec, 64) >= cpr_codec_row_bytes(r.codec, 64));
        cpr_estimator_destroy(e);
    }
    /* Vanilla CPR saves FULL parts: exact, nothing to choose. */
    c.policy = CPR_POLICY_FULL, c.int4_max_restores = 0;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_int_equal(CPR_CODEC_F32, r.codec);
    assert_close(0.0, r.quantized_restores, 0);
    cpr_estimator_destroy(e);
    c = est_config(), c.choose_codec = 2;
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_create(&c, &e));
    assert_non_null(strstr(cpr_errmsg(), "choose_codec"));
    c = est_config(), c.int4_max_restores = -1;
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_create(&c, &e));
    assert_non_null(strstr(cpr_errmsg(), "int4_max_restores"));
}

static void test_estimator_rejects_bad_input(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    cpr_estimator *e = NULL;
    cpr_estimate a, b;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    assert_status(CPR_OK, cpr_estimator_failed(e, 100));
    assert_status(CPR_OK, cpr_estimator_decide(e, &a));
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_failed(e, 50)); /* time went back */
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_saved(e, 200, CPR_POLICY_FULL, NAN, 1));
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_saved(e, 200, (cpr_policy)9, 1, 1));
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_loaded(e, -1, 1));
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_loaded(e, 1, 9)); /* 9 > 8 shards */
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_restarted(e, INFINITY));
    assert_status(CPR_OK, cpr_estimator_tracked(e, 150, 100, 10));
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_tracked(e, 160, 99, 10));
    assert_status(CPR_OK, cpr_estimator_decide(e, &b));
    assert_int_equal(a.failures, b.failures);
    assert_close(a.save_s, b.save_s, 0);
    assert_close(a.load_s, b.load_s, 0);
    cpr_estimator_destroy(e);
    c.policy = CPR_POLICY_DELTA;
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_create(&c, &e));
    assert_non_null(strstr(cpr_errmsg(), "policy"));
    c = est_config(), c.prior_load_s = 0;
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_create(&c, &e));
    assert_non_null(strstr(cpr_errmsg(), "prior_load_s"));
    c = est_config(), c.policy = CPR_POLICY_SSU, c.fraction = 1.5;
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_create(&c, &e));
    assert_non_null(strstr(cpr_errmsg(), "fraction"));
}

static void test_estimator_partial_loads_scale(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    cpr_estimator *e = NULL;
    cpr_estimate r;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    for (int i = 0; i < 3; i++) {
        assert_status(CPR_OK, cpr_estimator_loaded(e, 10.0, 1)); /* one shard of 8 */
        assert_status(CPR_OK, cpr_estimator_restarted(e, 5.0));
    }
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_close(80.0, r.load_s, 1e-12);
    assert_close(5.0, r.restart_s, 1e-12);
    assert_true((r.measured & (CPR_MEASURED_LOAD | CPR_MEASURED_RESTART)) ==
                (CPR_MEASURED_LOAD | CPR_MEASURED_RESTART));
    cpr_estimator_destroy(e);
}

/* The background of a save (issue #9): a prioritized policy whose saves
 * take long to land is not saved back to back: its interval is at least its
 * background time over max_background_share, and the training time the
 * background costs counts in the overhead. */
static void test_estimator_background_floor(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    c.policy = CPR_POLICY_SSU;
    c.fraction = 0.01;
    cpr_estimator *e = NULL;
    cpr_estimate before, after;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    assert_status(CPR_OK, cpr_estimator_decide(e, &before));
    assert_int_equal(CPR_RECOVERY_PARTIAL, before.mode);
    assert_close(0.0, before.background_s, 0);
    /* Each SSU save keeps the host busy 40x its interval, costing 5 s. */
    double bg = before.interval_s * 40;
    for (int i = 0; i < 3; i++)
        assert_status(CPR_OK, cpr_estimator_background(e, CPR_POLICY_SSU, bg, 5.0));
    assert_status(CPR_OK, cpr_estimator_decide(e, &after));
    assert_int_equal(CPR_RECOVERY_PARTIAL, after.mode);
    assert_close(bg, after.background_s, 1e-9);
    assert_close(5.0, after.background_cost_s, 1e-9);
    assert_true(after.interval_s >= bg / 0.25 * (1 - 1e-9));
    assert_close(after.interval_s, after.base_interval_s * 0.01, 1e-9);
    /* A longer interval loses more, and the background costs its share. */
    assert_true(after.pls > before.pls);
    assert_true(after.partial.overhead_frac >= 5.0 / after.interval_s);
    /* A smaller share allowed: a longer floor (within the job's length). */
    cpr_estimator_destroy(e);
    c.max_background_share = 0.05;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    double bg2 = before.interval_s * 2;
    assert_status(CPR_OK, cpr_estimator_background(e, CPR_POLICY_SSU, bg2, 0.0));
    assert_status(CPR_OK, cpr_estimator_decide(e, &after));
    assert_true(after.interval_s >= bg2 / 0.05 * (1 - 1e-9));
    assert_true(after.interval_s < bg2 / 0.05 * 1.01);
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_background(e, CPR_POLICY_SSU, -1, 0));
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_background(e, (cpr_policy)9, 1, 0));
    cpr_estimator_destroy(e);
    c.max_background_share = 1.5;
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_create(&c, &e));
}

/* The estimator applies the model's floor and cost: with the worked
 * example's priors and FULL saves measured at b = 300 s, c = 30 s, it
 * answers test_background_by_hand's numbers. */
static void test_estimator_background_is_the_model(void **state)
{
    (void)state;
    cpr_estimator_config c = est_config();
    cpr_estimator *e = NULL;
    cpr_estimate r;
    assert_status(CPR_OK, cpr_estimator_create(&c, &e));
    assert_status(CPR_OK, cpr_estimator_background(e, CPR_POLICY_FULL, 300.0, 30.0));
    assert_status(CPR_OK, cpr_estimator_decide(e, &r));
    assert_close(1200.0, r.full.interval_s, 0);
    assert_close(1200.0, r.partial.interval_s, 0);
    assert_close(51000.0, r.full.overhead_s, 1e-9);
    assert_close(15750.0, r.partial.overhead_s, 1e-9);
    assert_close(4500.0, r.partial.background_s, 1e-9);
    assert_close(1200.0 / (2.0 * 8 * 3600), r.pls, 1e-15);
    assert_int_equal(CPR_RECOVERY_PARTIAL, r.mode);
    assert_close(1200.0, r.interval_s, 0);
    cpr_estimator_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_by_hand),
        cmocka_unit_test(test_partial_by_hand),
        cmocka_unit_test(test_plan_by_hand),
        cmocka_unit_test(test_daly),
        cmocka_unit_test(test_equal_overheads_choose_full),
        cmocka_unit_test(test_tight_target_chooses_full),
        cmocka_unit_test(test_loose_target_caps_at_the_job),
        cmocka_unit_test(test_partial_overhead_falls_with_interval),
        cmocka_unit_test(test_background_by_hand),
        cmocka_unit_test(test_validation_names_the_field),
        cmocka_unit_test(test_estimator_priors_answer_first),
        cmocka_unit_test(test_estimator_save_converges),
        cmocka_unit_test(test_estimator_mtbf_posterior),
        cmocka_unit_test(test_estimator_vanilla_loss_ratio_is_one),
        cmocka_unit_test(test_estimator_prioritized_loses_less_longer_interval),
        cmocka_unit_test(test_estimator_bounds),
        cmocka_unit_test(test_estimator_zero_and_extreme_inputs),
        cmocka_unit_test(test_estimator_codec_rule),
        cmocka_unit_test(test_estimator_rejects_bad_input),
        cmocka_unit_test(test_estimator_partial_loads_scale),
        cmocka_unit_test(test_estimator_background_floor),
        cmocka_unit_test(test_estimator_background_is_the_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
