/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/types.h: the one consistent-cut rule (cpr_cuts, cpr_cut_scan_*) that
 * the store, the client and the planner share, and the names of kinds and
 * policies.
 */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cpr/types.h"

static cpr_part_info part(uint64_t ckpt, uint32_t shard, uint32_t num_shards, cpr_kind kind,
                          int committed, int consistent)
{
    cpr_part_info p = {0};
    p.checkpoint = ckpt;
    p.shard = shard;
    p.num_shards = num_shards;
    p.kind = kind;
    p.committed = committed;
    p.consistent = consistent;
    return p;
}

#define FULL(c, s, n) part((c), (s), (n), CPR_KIND_FULL, 1, 1)

static void test_cuts_newest_first(void **state)
{
    (void)state;
    cpr_part_info parts[] = {FULL(1, 0, 2), FULL(1, 1, 2), FULL(2, 0, 2), FULL(3, 0, 2),
                             FULL(3, 1, 2)};
    uint64_t cuts[4] = {0};
    assert_int_equal(cpr_cuts(parts, 5, 0, cuts, 4), 2);
    assert_int_equal(cuts[0], 3);
    assert_int_equal(cuts[1], 1);
    /* Only `max` are written, all are counted. */
    uint64_t one = 0;
    assert_int_equal(cpr_cuts(parts, 5, 0, &one, 1), 2);
    assert_int_equal(one, 3);
    assert_int_equal(cpr_cuts(parts, 5, 0, NULL, 0), 2);
    /* Below the floor nothing is a cut. */
    assert_int_equal(cpr_cuts(parts, 5, 2, cuts, 4), 1);
    assert_int_equal(cpr_cuts(NULL, 0, 0, NULL, 0), 0);
}

static void test_cut_needs_every_consistent_shard(void **state)
{
    (void)state;
    /* A PRIORITY part never counts, even if a list calls it consistent. */
    cpr_part_info prio[] = {FULL(1, 0, 2), part(1, 1, 2, CPR_KIND_PRIORITY, 1, 1)};
    assert_int_equal(cpr_cuts(prio, 2, 0, NULL, 0), 0);
    /* A DELTA with an incomplete chain. */
    cpr_part_info broken[] = {FULL(1, 0, 2), part(1, 1, 2, CPR_KIND_DELTA, 1, 0)};
    assert_int_equal(cpr_cuts(broken, 2, 0, NULL, 0), 0);
    cpr_part_info delta[] = {FULL(1, 0, 2), part(1, 1, 2, CPR_KIND_DELTA, 1, 1)};
    assert_int_equal(cpr_cuts(delta, 2, 0, NULL, 0), 1);
    /* Shard 0 missing; shard 1 missing. */
    cpr_part_info no0[] = {FULL(1, 1, 2)};
    assert_int_equal(cpr_cuts(no0, 1, 0, NULL, 0), 0);
    cpr_part_info no1[] = {FULL(1, 0, 2), FULL(1, 2, 2)};
    assert_int_equal(cpr_cuts(no1, 2, 0, NULL, 0), 0);
    /* Shards disagreeing on num_shards. */
    cpr_part_info disagree[] = {FULL(1, 0, 2), FULL(1, 1, 3)};
    assert_int_equal(cpr_cuts(disagree, 2, 0, NULL, 0), 0);
    /* num_shards 0 is never a cut. */
    cpr_part_info zero[] = {FULL(1, 0, 0)};
    assert_int_equal(cpr_cuts(zero, 1, 0, NULL, 0), 0);
}

static void test_cut_ignores_open_parts_and_extra_shards(void **state)
{
    (void)state;
    /* An open part of the same id does not spoil the cut, nor count for it. */
    cpr_part_info open_extra[] = {FULL(1, 0, 2), part(1, 0, 2, CPR_KIND_FULL, 0, 0),
                                  FULL(1, 1, 2)};
    assert_int_equal(cpr_cuts(open_extra, 3, 0, NULL, 0), 1);
    cpr_part_info open_only[] = {FULL(1, 0, 2), part(1, 1, 2, CPR_KIND_FULL, 0, 0)};
    assert_int_equal(cpr_cuts(open_only, 2, 0, NULL, 0), 0);
    /* Parts of shards >= num_shards do not matter (the job shrank). */
    cpr_part_info shrunk[] = {FULL(1, 0, 1), part(1, 1, 2, CPR_KIND_PRIORITY, 1, 0)};
    assert_int_equal(cpr_cuts(shrunk, 2, 0, NULL, 0), 1);
}

static void test_scan_decides_early(void **state)
{
    (void)state;
    cpr_cut_scan k = {0};
    assert_int_equal(cpr_cut_scan_add(&k, 0, 2, 1), 1);  /* needs shard 1 */
    assert_int_equal(cpr_cut_scan_done(&k), 0);
    assert_int_equal(cpr_cut_scan_add(&k, 1, 2, 1), 0);  /* complete */
    assert_int_equal(cpr_cut_scan_done(&k), 1);
    assert_int_equal(cpr_cut_scan_add(&k, 5, 9, 0), 0);  /* beyond n: ignored */
    assert_int_equal(cpr_cut_scan_done(&k), 1);
    cpr_cut_scan bad = {0};
    assert_int_equal(cpr_cut_scan_add(&bad, 0, 2, 0), 0);
    assert_int_equal(cpr_cut_scan_done(&bad), 0);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(cpr_kind_name(CPR_KIND_DELTA), "DELTA");
    assert_string_equal(cpr_kind_name((cpr_kind)42), "UNSPECIFIED");
    cpr_policy p = CPR_POLICY_FULL;
    assert_int_equal(cpr_policy_parse("topk-norm", &p), CPR_OK);
    assert_int_equal(p, CPR_POLICY_TOPK_NORM);
    assert_int_equal(cpr_policy_parse("TOPK", &p), CPR_INVALID_ARGUMENT);
    assert_int_equal(p, CPR_POLICY_TOPK_NORM); /* untouched on failure */
    assert_non_null(strstr(cpr_errmsg(), "\"TOPK\""));
    assert_string_equal(cpr_policy_name((cpr_policy)99), "unknown");
}

/* A message may wrap the one before it: cpr_fail reads cpr_errmsg() while
 * it writes the message (it once wrote the buffer it was reading). */
static void test_fail_wraps_previous_message(void **unused)
{
    (void)unused;
    assert_int_equal(CPR_IO, cpr_fail(CPR_IO, "disk said %s", "no"));
    assert_int_equal(CPR_IO, cpr_fail(CPR_IO, "put failed: %s (retry later)", cpr_errmsg()));
    assert_string_equal(cpr_errmsg(), "put failed: disk said no (retry later)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuts_newest_first),
        cmocka_unit_test(test_cut_needs_every_consistent_shard),
        cmocka_unit_test(test_cut_ignores_open_parts_and_extra_shards),
        cmocka_unit_test(test_scan_decides_early),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_fail_wraps_previous_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
