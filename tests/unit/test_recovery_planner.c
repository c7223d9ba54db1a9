/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The recovery planner (cpr_recovery_plan_make) on crafted part lists, as
 * cpr_store_list returns them: partial recovery takes each failed shard's
 * newest committed part of any kind (open parts ignored); full recovery
 * finds the latest consistent cut exactly as the store defines it (gaps in
 * DELTA chains, uncommitted parts, PRIORITY parts, a missing shard and a
 * shard-count mismatch all break a cut; FULL and DELTA parts mix); no cut
 * and a failed shard with nothing committed give actionable plans with
 * named problems; invalid lists are refused and write nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cpr/recovery.h"
#include "testutil.h"

enum { F = CPR_KIND_FULL, D = CPR_KIND_DELTA, P = CPR_KIND_PRIORITY };

/* One part: shard, checkpoint, kind, step, num_shards, base, committed,
 * consistent (rows and bytes do not matter to the planner). */
static cpr_part_info part(uint32_t shard, uint64_t ckpt, int kind, uint64_t step,
                          uint32_t num_shards, uint64_t base, int committed, int consistent)
{
    cpr_part_info p = {.shard = shard, .checkpoint = ckpt, .kind = (cpr_kind)kind,
                       .step = step, .num_shards = num_shards, .base = base,
                       .committed = committed, .consistent = consistent};
    return p;
}

static cpr_recovery_plan *make(const cpr_part_info *parts, size_t n, uint32_t num_shards,
                               cpr_recovery_mode mode, const uint32_t *failed, size_t n_failed)
{
    cpr_plan_request r = {.parts = parts, .n_parts = n, .num_shards = num_shards,
                          .failed = failed, .n_failed = n_failed, .mode = mode};
    cpr_recovery_plan *plan = NULL;
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    assert_non_null(plan);
    assert_int_equal(num_shards, cpr_recovery_plan_count(plan));
    assert_null(cpr_recovery_plan_shard(plan, num_shards));
    return plan;
}

static void assert_entry(const cpr_recovery_plan *plan, uint32_t shard, cpr_shard_source src,
                         uint64_t as_of, cpr_kind kind, uint64_t step)
{
    const cpr_plan_shard *e = cpr_recovery_plan_shard(plan, shard);
    assert_non_null(e);
    assert_int_equal(shard, e->shard);
    if (e->source != src)
        fail_msg("shard %u: source %s, want %s (%s)", shard, cpr_shard_source_name(e->source),
                 cpr_shard_source_name(src), cpr_recovery_plan_reason(plan));
    assert_int_equal(as_of, e->as_of);
    assert_int_equal(kind, e->kind);
    assert_int_equal(step, e->step);
}

/* A two-shard job: FULL at 1, DELTA at 2, PRIORITY parts after. */
static void test_partial_takes_newest_committed_of_any_kind(void **state)
{
    (void)state;
    const cpr_part_info parts[] = {
        part(0, 1, F, 100, 2, 0, 1, 1), part(1, 1, F, 100, 2, 0, 1, 1),
        part(0, 2, D, 200, 2, 1, 1, 1), part(1, 2, D, 200, 2, 1, 1, 1),
        part(0, 3, P, 300, 2, 0, 1, 0), part(1, 3, P, 300, 2, 0, 1, 0),
        part(1, 4, P, 400, 2, 0, 0, 0), /* still being written: not restorable */
    };
    const uint32_t failed[] = {1};
    cpr_recovery_plan *plan = make(parts, 7, 2, CPR_RECOVERY_PARTIAL, failed, 1);
    assert_int_equal(CPR_PLAN_PARTIAL, cpr_recovery_plan_action(plan));
    assert_int_equal(0, cpr_recovery_plan_problems(plan));
    assert_entry(plan, 0, CPR_SOURCE_KEEP, 0, CPR_KIND_UNSPECIFIED, 0);
    assert_entry(plan, 1, CPR_SOURCE_STORE, 3, CPR_KIND_PRIORITY, 300);
    assert_int_equal(CPR_DENSE_KEEP, cpr_recovery_plan_shard(plan, 0)->dense);
    const cpr_plan_shard *e = cpr_recovery_plan_shard(plan, 1);
    assert_int_equal(CPR_DENSE_BLOB, e->dense);  /* no replica: the newest blob */
    assert_int_equal(3, e->dense_checkpoint);
    assert_int_equal(0, e->dense_shard);
    assert_int_equal(0, cpr_recovery_plan_cut(plan));
    assert_non_null(strstr(cpr_recovery_plan_reason(plan), "checkpoint 3"));
    cpr_recovery_plan_destroy(plan);
}

static void test_partial_dense_from_replica(void **state)
{
    (void)state;
    const cpr_part_info parts[] = {part(0, 5, F, 50, 3, 0, 1, 1), part(2, 6, P, 60, 3, 0, 1, 0)};
    const uint32_t failed[] = {2, 0};
    cpr_plan_request r = {.parts = parts, .n_parts = 2, .num_shards = 3, .failed = failed,
                          .n_failed = 2, .mode = CPR_RECOVERY_PARTIAL, .dense_replica = 1};
    cpr_recovery_plan *plan = NULL;
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    assert_entry(plan, 0, CPR_SOURCE_STORE, 5, CPR_KIND_FULL, 50);
    assert_entry(plan, 1, CPR_SOURCE_KEEP, 0, CPR_KIND_UNSPECIFIED, 0);
    assert_entry(plan, 2, CPR_SOURCE_STORE, 6, CPR_KIND_PRIORITY, 60);
    assert_int_equal(CPR_DENSE_REPLICA, cpr_recovery_plan_shard(plan, 0)->dense);
    assert_int_equal(CPR_DENSE_REPLICA, cpr_recovery_plan_shard(plan, 2)->dense);
    cpr_recovery_plan_destroy(plan);
}

static void test_partial_shard_with_nothing_committed(void **state)
{
    (void)state;
    const cpr_part_info parts[] = {
        part(0, 1, F, 10, 2, 0, 1, 1), part(1, 1, F, 10, 2, 0, 0, 0), /* shard 1: open only */
    };
    const uint32_t failed[] = {1};
    cpr_recovery_plan *plan = make(parts, 2, 2, CPR_RECOVERY_PARTIAL, failed, 1);
    assert_int_equal(CPR_PLAN_PARTIAL, cpr_recovery_plan_action(plan));
    assert_int_equal(CPR_PLAN_SHARD_UNSAVED, cpr_recovery_plan_problems(plan));
    assert_entry(plan, 1, CPR_SOURCE_INIT, 0, CPR_KIND_UNSPECIFIED, 0);
    assert_non_null(strstr(cpr_recovery_plan_reason(plan), "no committed part"));
    cpr_recovery_plan_destroy(plan);

    /* The caller may prefer starting over to a shard of initial values. */
    cpr_plan_request r = {.parts = parts, .n_parts = 2, .num_shards = 2, .failed = failed,
                          .n_failed = 1, .mode = CPR_RECOVERY_PARTIAL, .restart_if_unsaved = 1};
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    assert_int_equal(CPR_PLAN_RESTART_FROM_SCRATCH, cpr_recovery_plan_action(plan));
    assert_int_equal(CPR_PLAN_SHARD_UNSAVED, cpr_recovery_plan_problems(plan));
    for (uint32_t s = 0; s < 2; s++) {
        assert_entry(plan, s, CPR_SOURCE_INIT, 0, CPR_KIND_UNSPECIFIED, 0);
        assert_int_equal(CPR_DENSE_INIT, cpr_recovery_plan_shard(plan, s)->dense);
    }
    assert_non_null(strstr(cpr_recovery_plan_reason(plan), "from scratch"));
    cpr_recovery_plan_destroy(plan);
}

static void test_partial_empty_job_dense_unsaved(void **state)
{
    (void)state;
    const uint32_t failed[] = {0};
    cpr_recovery_plan *plan = make(NULL, 0, 1, CPR_RECOVERY_PARTIAL, failed, 1);
    assert_int_equal(CPR_PLAN_SHARD_UNSAVED | CPR_PLAN_DENSE_UNSAVED,
                     cpr_recovery_plan_problems(plan));
    assert_int_equal(CPR_DENSE_INIT, cpr_recovery_plan_shard(plan, 0)->dense);
    cpr_recovery_plan_destroy(plan);
}

/* Gaps in chains, PRIORITY and open parts after the cut: the cut stays. */
static void test_full_cut_skips_broken_checkpoints(void **state)
{
    (void)state;
    const cpr_part_info parts[] = {
        part(0, 1, F, 100, 2, 0, 1, 1), part(1, 1, F, 100, 2, 0, 1, 1),
        part(0, 2, D, 200, 2, 1, 1, 1), part(1, 2, D, 200, 2, 9, 1, 0), /* base 9 missing */
        part(0, 3, P, 300, 2, 0, 1, 0), part(1, 3, P, 300, 2, 0, 1, 0),
        part(0, 4, F, 400, 2, 0, 1, 1), part(1, 4, F, 400, 2, 0, 0, 0), /* open */
        part(0, 5, F, 500, 2, 0, 1, 1),                                  /* shard 1 missing */
    };
    cpr_recovery_plan *plan = make(parts, 9, 2, CPR_RECOVERY_FULL, NULL, 0);
    assert_int_equal(CPR_PLAN_FULL, cpr_recovery_plan_action(plan));
    assert_int_equal(0, cpr_recovery_plan_problems(plan));
    assert_int_equal(1, cpr_recovery_plan_cut(plan));
    assert_int_equal(100, cpr_recovery_plan_rewind_step(plan));
    for (uint32_t s = 0; s < 2; s++) {
        assert_entry(plan, s, CPR_SOURCE_STORE, 1, CPR_KIND_FULL, 100);
        const cpr_plan_shard *e = cpr_recovery_plan_shard(plan, s);
        assert_int_equal(CPR_DENSE_BLOB, e->dense);
        assert_int_equal(1, e->dense_checkpoint);
    }
    assert_non_null(strstr(cpr_recovery_plan_reason(plan), "cut 1"));
    cpr_recovery_plan_destroy(plan);
}

/* FULL and DELTA mix in a cut; a complete DELTA chain is consistent. */
static void test_full_mixed_kinds_and_delta_chain(void **state)
{
    (void)state;
    const cpr_part_info parts[] = {
        part(0, 1, F, 10, 3, 0, 1, 1), part(1, 1, F, 10, 3, 0, 1, 1),
        part(2, 1, F, 10, 3, 0, 1, 1),
        part(0, 2, D, 20, 3, 1, 1, 1), part(1, 2, F, 20, 3, 0, 1, 1),
        part(2, 2, D, 20, 3, 1, 1, 1),
        part(0, 3, D, 30, 3, 2, 1, 1), part(1, 3, D, 30, 3, 2, 1, 1),
        part(2, 3, D, 30, 3, 2, 1, 1),
    };
    const uint32_t failed[] = {2};
    cpr_recovery_plan *plan = make(parts, 9, 3, CPR_RECOVERY_FULL, failed, 1);
    assert_int_equal(3, cpr_recovery_plan_cut(plan));
    assert_int_equal(30, cpr_recovery_plan_rewind_step(plan));
    for (uint32_t s = 0; s < 3; s++)
        assert_entry(plan, s, CPR_SOURCE_STORE, 3, CPR_KIND_DELTA, 30);
    cpr_recovery_plan_destroy(plan);
}

static void test_full_without_cut_restarts_from_scratch(void **state)
{
    (void)state;
    const cpr_part_info parts[] = {
        part(0, 1, F, 10, 2, 0, 1, 1), /* shard 1 never committed */
        part(0, 2, P, 20, 2, 0, 1, 0), part(1, 2, P, 20, 2, 0, 1, 0),
        /* a malformed list claiming a PRIORITY cut must not make one */
        part(0, 3, P, 30, 2, 0, 1, 1), part(1, 3, P, 30, 2, 0, 1, 1),
    };
    const uint32_t failed[] = {0};
    cpr_recovery_plan *plan = make(parts, 5, 2, CPR_RECOVERY_FULL, failed, 1);
    assert_int_equal(CPR_PLAN_RESTART_FROM_SCRATCH, cpr_recovery_plan_action(plan));
    assert_int_equal(CPR_PLAN_NO_CUT, cpr_recovery_plan_problems(plan));
    assert_int_equal(0, cpr_recovery_plan_cut(plan));
    assert_int_equal(0, cpr_recovery_plan_rewind_step(plan));
    for (uint32_t s = 0; s < 2; s++)
        assert_entry(plan, s, CPR_SOURCE_INIT, 0, CPR_KIND_UNSPECIFIED, 0);
    assert_non_null(strstr(cpr_recovery_plan_reason(plan), "no consistent cut"));
    cpr_recovery_plan_destroy(plan);
    plan = make(NULL, 0, 4, CPR_RECOVERY_FULL, NULL, 0); /* a job with no parts at all */
    assert_int_equal(CPR_PLAN_RESTART_FROM_SCRATCH, cpr_recovery_plan_action(plan));
    cpr_recovery_plan_destroy(plan);
}

static void test_full_shard_count_rules(void **state)
{
    (void)state;
    /* Checkpoint 2 says 3 shards but has 2 parts: not a cut. Checkpoint 1
     * is a 2-shard cut restored into a job that now has 4 shards. */
    const cpr_part_info parts[] = {
        part(0, 1, F, 10, 2, 0, 1, 1), part(1, 1, F, 11, 2, 0, 1, 1),
        part(0, 2, F, 20, 3, 0, 1, 1), part(1, 2, F, 20, 3, 0, 1, 1),
    };
    cpr_recovery_plan *plan = make(parts, 4, 4, CPR_RECOVERY_FULL, NULL, 0);
    assert_int_equal(1, cpr_recovery_plan_cut(plan));
    assert_int_equal(CPR_PLAN_RESHARDED, cpr_recovery_plan_problems(plan));
    assert_int_equal(10, cpr_recovery_plan_rewind_step(plan)); /* steps 10, 11: the earliest */
    assert_non_null(strstr(cpr_recovery_plan_reason(plan), "earliest"));
    assert_entry(plan, 3, CPR_SOURCE_STORE, 1, CPR_KIND_UNSPECIFIED, 10);
    assert_entry(plan, 1, CPR_SOURCE_STORE, 1, CPR_KIND_FULL, 10);
    cpr_recovery_plan_destroy(plan);
}

static void test_reason_carries_the_estimate(void **state)
{
    (void)state;
    cpr_estimator_config c = {.shards = 2, .job_s = 36000, .target_pls = 0.02,
                              .prior_mtbf_s = 3600, .prior_save_s = 30, .prior_load_s = 60,
                              .prior_restart_s = 20};
    cpr_estimator *est = NULL;
    cpr_estimate e;
    assert_status(CPR_OK, cpr_estimator_create(&c, &est));
    assert_status(CPR_OK, cpr_estimator_decide(est, &e));
    const cpr_part_info parts[] = {part(0, 1, F, 10, 2, 0, 1, 1), part(1, 1, F, 10, 2, 0, 1, 1)};
    const uint32_t failed[] = {0};
    cpr_plan_request r = {.parts = parts, .n_parts = 2, .num_shards = 2, .failed = failed,
                          .n_failed = 1, .mode = e.mode, .estimate = &e};
    cpr_recovery_plan *plan = NULL;
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    const char *why = cpr_recovery_plan_reason(plan);
    assert_non_null(strstr(why, cpr_recovery_mode_name(e.mode)));
    assert_non_null(strstr(why, "mtbf 3600 s"));
    assert_non_null(strstr(why, "save 30 s"));
    cpr_recovery_plan_destroy(plan);
    cpr_estimator_destroy(est);
    cpr_recovery_plan_destroy(NULL);

    /* A trainer counting in steps sees steps; the unit string is copied. */
    char unit[8] = "steps";
    c.time_unit = unit;
    assert_status(CPR_OK, cpr_estimator_create(&c, &est));
    memset(unit, 'x', sizeof unit - 1);
    assert_status(CPR_OK, cpr_estimator_decide(est, &e));
    assert_string_equal(e.time_unit, "steps");
    r.estimate = &e;
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    why = cpr_recovery_plan_reason(plan);
    assert_non_null(strstr(why, "mtbf 3600 steps"));
    assert_non_null(strstr(why, "restart 20 steps"));
    assert_null(strstr(why, " s,"));
    cpr_recovery_plan_destroy(plan);
    cpr_estimator_destroy(est);
    c.time_unit = "fortnights"; /* too long */
    assert_status(CPR_INVALID_ARGUMENT, cpr_estimator_create(&c, &est));
    assert_non_null(strstr(cpr_errmsg(), "time_unit"));
}

/* After a FULL recovery rewound to cut 1, shard 0 had saved PRIORITY parts 2
 * and 3 and both shards a FULL part at 4 that never became a cut together
 * (shard 1's is uncommitted): 2..4 are the abandoned timeline. On the new
 * timeline shard 1 saved FULL at 5. Ignoring 1 < c <= 4, shard 0 restores
 * as of the cut, not from its abandoned part 3; shard 1 from 5. */
static void test_abandoned_timeline_is_ignored(void **state)
{
    (void)state;
    const cpr_part_info parts[] = {
        part(0, 1, F, 100, 2, 0, 1, 1), part(1, 1, F, 100, 2, 0, 1, 1),
        part(0, 2, P, 150, 2, 0, 1, 0), part(0, 3, P, 180, 2, 0, 1, 0),
        part(0, 4, F, 200, 2, 0, 1, 1), part(1, 4, F, 200, 2, 0, 0, 0),
        part(1, 5, F, 130, 2, 0, 1, 1),
    };
    const uint32_t both[] = {0, 1};
    cpr_plan_request r = {.parts = parts, .n_parts = 7, .num_shards = 2, .failed = both,
                          .n_failed = 2, .mode = CPR_RECOVERY_PARTIAL};
    cpr_recovery_plan *plan = NULL;
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan)); /* unaware: the wrong part */
    assert_entry(plan, 0, CPR_SOURCE_STORE, 4, CPR_KIND_FULL, 200);
    cpr_recovery_plan_destroy(plan);

    r.abandoned_after = 1;
    r.abandoned_through = 4;
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    assert_entry(plan, 0, CPR_SOURCE_STORE, 1, CPR_KIND_FULL, 100);
    assert_entry(plan, 1, CPR_SOURCE_STORE, 5, CPR_KIND_FULL, 130);
    assert_non_null(strstr(cpr_recovery_plan_reason(plan), "4 parts of the abandoned timeline"));
    cpr_recovery_plan_destroy(plan);

    r.mode = CPR_RECOVERY_FULL; /* the cut stays 1: 4 is abandoned, 5 is shard 1 alone */
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    assert_int_equal(CPR_PLAN_FULL, cpr_recovery_plan_action(plan));
    assert_int_equal(1, cpr_recovery_plan_cut(plan));
    assert_int_equal(100, cpr_recovery_plan_rewind_step(plan));
    cpr_recovery_plan_destroy(plan);

    r.abandoned_through = 1; /* not above abandoned_after */
    assert_status(CPR_INVALID_ARGUMENT, cpr_recovery_plan_make(&r, &plan));
    assert_non_null(strstr(cpr_errmsg(), "abandoned_through"));
}

/* P6: after the rewind to cut 1 (2..4 abandoned, with a FULL of shard 0 at
 * 4), shard 0 saved a DELTA at 5 whose base is its newest FULL, the
 * abandoned 4, and shard 1 a FULL at 5. Restored "as of 5", shard 0 would
 * start from 4: neither its DELTA nor a cut at 5 counts until shard 0 saves
 * a FULL on the new timeline (6). */
static void test_parts_after_the_range_need_a_full(void **state)
{
    (void)state;
    const cpr_part_info parts[] = {
        part(0, 1, F, 100, 2, 0, 1, 1), part(1, 1, F, 100, 2, 0, 1, 1),
        part(0, 4, F, 200, 2, 0, 1, 1), part(1, 4, F, 200, 2, 0, 0, 0),
        part(0, 5, D, 130, 2, 4, 1, 1), part(1, 5, F, 130, 2, 0, 1, 1),
        part(0, 6, F, 160, 2, 0, 1, 1),
    };
    const uint32_t shard0[] = {0};
    cpr_plan_request r = {.parts = parts, .n_parts = 6, .num_shards = 2,
                          .mode = CPR_RECOVERY_FULL, .abandoned_after = 1,
                          .abandoned_through = 4};
    cpr_recovery_plan *plan = NULL;
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    assert_int_equal(1, cpr_recovery_plan_cut(plan)); /* not 5 */
    assert_non_null(strstr(cpr_recovery_plan_reason(plan), "no FULL part since"));
    cpr_recovery_plan_destroy(plan);
    r.mode = CPR_RECOVERY_PARTIAL;
    r.failed = shard0;
    r.n_failed = 1;
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    assert_entry(plan, 0, CPR_SOURCE_STORE, 1, CPR_KIND_FULL, 100); /* not the DELTA at 5 */
    cpr_recovery_plan_destroy(plan);
    r.n_parts = 7; /* shard 0's FULL at 6: the new timeline is based */
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    assert_entry(plan, 0, CPR_SOURCE_STORE, 6, CPR_KIND_FULL, 160);
    cpr_recovery_plan_destroy(plan);
}

/* P7: the job ran with 2 shards (cut at 10) and now runs with 4. A failed
 * shard with no FULL part in the 4-shard layout restores from every
 * shard's parts as of the newest one, selected by the new sharding
 * (RESHARDED); one with a FULL of its own in the new layout restores from
 * its own parts as usual. */
static void test_partial_after_resharding(void **state)
{
    (void)state;
    const cpr_part_info parts[] = {
        part(0, 10, F, 100, 2, 0, 1, 1), part(1, 10, F, 100, 2, 0, 1, 1),
        part(1, 11, P, 120, 4, 0, 1, 0), part(2, 11, F, 120, 4, 0, 1, 1),
    };
    const uint32_t failed[] = {1, 2, 3};
    cpr_recovery_plan *plan = make(parts, 4, 4, CPR_RECOVERY_PARTIAL, failed, 3);
    assert_true(cpr_recovery_plan_problems(plan) & CPR_PLAN_RESHARDED);
    assert_false(cpr_recovery_plan_problems(plan) & CPR_PLAN_SHARD_UNSAVED);
    assert_entry(plan, 1, CPR_SOURCE_STORE, 11, CPR_KIND_UNSPECIFIED, 120);
    assert_entry(plan, 2, CPR_SOURCE_STORE, 11, CPR_KIND_FULL, 120);
    assert_entry(plan, 3, CPR_SOURCE_STORE, 11, CPR_KIND_UNSPECIFIED, 120);
    assert_entry(plan, 0, CPR_SOURCE_KEEP, 0, CPR_KIND_UNSPECIFIED, 0);
    cpr_recovery_plan_destroy(plan);

    /* With an abandoned timeline (2-shard FULLs at 12 after a rewind to
     * 10), read from every shard "as of 13" would meet old shard 1's
     * abandoned FULL at 12: as of the cut, 10, instead. */
    const cpr_part_info rewound[] = {
        part(0, 10, F, 100, 2, 0, 1, 1), part(1, 10, F, 100, 2, 0, 1, 1),
        part(0, 12, F, 140, 2, 0, 1, 1), part(1, 12, F, 140, 2, 0, 1, 1),
        part(2, 13, F, 110, 4, 0, 1, 1),
    };
    const uint32_t one[] = {1};
    cpr_plan_request r = {.parts = rewound, .n_parts = 5, .num_shards = 4, .failed = one,
                          .n_failed = 1, .mode = CPR_RECOVERY_PARTIAL, .abandoned_after = 10,
                          .abandoned_through = 12};
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    assert_true(cpr_recovery_plan_problems(plan) & CPR_PLAN_RESHARDED);
    assert_entry(plan, 1, CPR_SOURCE_STORE, 10, CPR_KIND_UNSPECIFIED, 100);
    cpr_recovery_plan_destroy(plan);
}

/* P7: a FULL from before the job last changed its sharding does not count.
 * 4 shards at 1, 2 shards at 2, 4 again at 3 (shards 0-2 saved; shard 3
 * failed before its first save there). Shard 3's FULL at 1 holds its rows
 * as they were before the 2-shard period: it restores from every shard as
 * of 3 (RESHARDED), not as of 1. Shard 1's newest part is its 2-shard FULL
 * at 2, which held other rows: it restores from every shard too. */
static void test_partial_full_before_a_resharding(void **state)
{
    (void)state;
    const cpr_part_info parts[] = {
        part(0, 1, F, 100, 4, 0, 1, 1), part(1, 1, F, 100, 4, 0, 1, 1),
        part(2, 1, F, 100, 4, 0, 1, 1), part(3, 1, F, 100, 4, 0, 1, 1),
        part(0, 2, F, 200, 2, 0, 1, 1), part(1, 2, F, 200, 2, 0, 1, 1),
        part(0, 3, F, 300, 4, 0, 1, 1), part(2, 3, F, 300, 4, 0, 1, 1),
    };
    const uint32_t failed[] = {1, 3};
    cpr_recovery_plan *plan = make(parts, 8, 4, CPR_RECOVERY_PARTIAL, failed, 2);
    assert_true(cpr_recovery_plan_problems(plan) & CPR_PLAN_RESHARDED);
    assert_entry(plan, 1, CPR_SOURCE_STORE, 3, CPR_KIND_UNSPECIFIED, 300);
    assert_entry(plan, 3, CPR_SOURCE_STORE, 3, CPR_KIND_UNSPECIFIED, 300);
    cpr_recovery_plan_destroy(plan);
}

static void expect_refused(const cpr_part_info *parts, size_t n, uint32_t num_shards,
                           cpr_recovery_mode mode, const uint32_t *failed, size_t n_failed,
                           const char *words)
{
    cpr_plan_request r = {.parts = parts, .n_parts = n, .num_shards = num_shards,
                          .failed = failed, .n_failed = n_failed, .mode = mode};
    cpr_recovery_plan *plan = (cpr_recovery_plan *)&r; /* must stay as it was */
    assert_status(CPR_INVALID_ARGUMENT, cpr_recovery_plan_make(&r, &plan));
    assert_ptr_equal(&r, plan);
    if (!strstr(cpr_errmsg(), words))
        fail_msg("message '%s' does not say '%s'", cpr_errmsg(), words);
}

static void test_invalid_requests(void **state)
{
    (void)state;
    const cpr_part_info unsorted[] = {part(0, 2, F, 1, 1, 0, 1, 1), part(0, 1, F, 1, 1, 0, 1, 1)};
    const cpr_part_info dup[] = {part(0, 1, F, 1, 2, 0, 1, 1), part(0, 1, F, 1, 2, 0, 1, 1)};
    const cpr_part_info wide[] = {part(2, 1, F, 1, 2, 0, 1, 1)};
    const cpr_part_info nokind[] = {part(0, 1, CPR_KIND_UNSPECIFIED, 1, 1, 0, 1, 1)};
    const cpr_part_info ok[] = {part(0, 1, F, 1, 2, 0, 1, 1)};
    const uint32_t f0[] = {0}, f5[] = {5}, f00[] = {0, 0};
    expect_refused(unsorted, 2, 1, CPR_RECOVERY_FULL, NULL, 0, "sorted");
    expect_refused(dup, 2, 2, CPR_RECOVERY_FULL, NULL, 0, "sorted");
    expect_refused(wide, 1, 2, CPR_RECOVERY_FULL, NULL, 0, "num_shards");
    expect_refused(nokind, 1, 1, CPR_RECOVERY_FULL, NULL, 0, "kind");
    expect_refused(ok, 1, 2, CPR_RECOVERY_PARTIAL, f5, 1, "failed[0]");
    expect_refused(ok, 1, 2, CPR_RECOVERY_PARTIAL, f00, 2, "twice");
    expect_refused(ok, 1, 2, CPR_RECOVERY_PARTIAL, NULL, 0, "at least one failed");
    expect_refused(ok, 1, 0, CPR_RECOVERY_FULL, NULL, 0, "num_shards");
    expect_refused(ok, 1, 2, (cpr_recovery_mode)5, f0, 1, "mode");
    expect_refused(NULL, 3, 2, CPR_RECOVERY_FULL, NULL, 0, "parts is NULL");
    assert_status(CPR_INVALID_ARGUMENT, cpr_recovery_plan_make(NULL, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partial_takes_newest_committed_of_any_kind),
        cmocka_unit_test(test_partial_dense_from_replica),
        cmocka_unit_test(test_partial_shard_with_nothing_committed),
        cmocka_unit_test(test_partial_empty_job_dense_unsaved),
        cmocka_unit_test(test_full_cut_skips_broken_checkpoints),
        cmocka_unit_test(test_full_mixed_kinds_and_delta_chain),
        cmocka_unit_test(test_full_without_cut_restarts_from_scratch),
        cmocka_unit_test(test_full_shard_count_rules),
        cmocka_unit_test(test_reason_carries_the_estimate),
        cmocka_unit_test(test_abandoned_timeline_is_ignored),
        cmocka_unit_test(test_parts_after_the_range_need_a_full),
        cmocka_unit_test(test_partial_after_resharding),
        cmocka_unit_test(test_partial_full_before_a_resharding),
        cmocka_unit_test(test_invalid_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
