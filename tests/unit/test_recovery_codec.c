/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The recorded form of a recovery plan (cpr_recovery_plan_encode/_decode):
 * partial, full (resharded) and restart-from-scratch plans made by the
 * planner come back field by field, reason included; survivors are left out
 * so a partial plan of a thousand shards stays small; ids JSON cannot carry
 * exactly are refused at encoding; and the decoder refuses, with
 * CPR_INVALID_ARGUMENT (CPR_FAILED_PRECONDITION for a newer version), empty
 * input, non-JSON, every truncation of a valid plan, missing and
 * out-of-range fields and entries out of order, and survives every one-byte
 * change of a valid plan.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpr/recovery.h"
#include "testutil.h"

enum { F = CPR_KIND_FULL, D = CPR_KIND_DELTA, P = CPR_KIND_PRIORITY };

static cpr_part_info part(uint32_t shard, uint64_t ckpt, int kind, uint64_t step,
                          uint32_t num_shards, uint64_t base, int consistent)
{
    cpr_part_info p = {.shard = shard, .checkpoint = ckpt, .kind = (cpr_kind)kind,
                       .step = step, .num_shards = num_shards, .base = base,
                       .committed = 1, .consistent = consistent};
    return p;
}

/* Two shards: FULL at 1, DELTA at 2 (the cut), PRIORITY of shard 1 at 3. */
static const cpr_part_info *parts_of_two(size_t *n)
{
    static cpr_part_info parts[5];
    parts[0] = part(0, 1, F, 100, 2, 0, 1);
    parts[1] = part(1, 1, F, 100, 2, 0, 1);
    parts[2] = part(0, 2, D, 200, 2, 1, 1);
    parts[3] = part(1, 2, D, 200, 2, 1, 1);
    parts[4] = part(1, 3, P, 300, 2, 0, 0);
    *n = 5;
    return parts;
}

static cpr_recovery_plan *make(const cpr_plan_request *r)
{
    cpr_recovery_plan *plan = NULL;
    assert_status(CPR_OK, cpr_recovery_plan_make(r, &plan));
    return plan;
}

/* encode(plan) decodes to a plan equal to it in every field. */
static void assert_round_trip(const cpr_recovery_plan *plan)
{
    void *buf = NULL;
    size_t len = 0;
    cpr_recovery_plan *back = NULL;
    assert_status(CPR_OK, cpr_recovery_plan_encode(plan, &buf, &len));
    assert_null(memchr(buf, '\n', len));
    assert_status(CPR_OK, cpr_recovery_plan_decode(buf, len, &back));
    assert_int_equal(cpr_recovery_plan_action(back), cpr_recovery_plan_action(plan));
    assert_int_equal(cpr_recovery_plan_problems(back), cpr_recovery_plan_problems(plan));
    assert_int_equal(cpr_recovery_plan_cut(back), cpr_recovery_plan_cut(plan));
    assert_int_equal(cpr_recovery_plan_rewind_step(back), cpr_recovery_plan_rewind_step(plan));
    assert_string_equal(cpr_recovery_plan_reason(back), cpr_recovery_plan_reason(plan));
    assert_int_equal(cpr_recovery_plan_count(back), cpr_recovery_plan_count(plan));
    for (size_t i = 0; i < cpr_recovery_plan_count(plan); i++) {
        const cpr_plan_shard *a = cpr_recovery_plan_shard(plan, i);
        const cpr_plan_shard *b = cpr_recovery_plan_shard(back, i);
        assert_int_equal(a->shard, b->shard);
        assert_int_equal(a->source, b->source);
        assert_int_equal(a->as_of, b->as_of);
        assert_int_equal(a->kind, b->kind);
        assert_int_equal(a->step, b->step);
        assert_int_equal(a->dense, b->dense);
        assert_int_equal(a->dense_checkpoint, b->dense_checkpoint);
        assert_int_equal(a->dense_shard, b->dense_shard);
    }
    /* The same plan encodes to the same bytes: processes can compare them. */
    void *again = NULL;
    size_t again_len = 0;
    assert_status(CPR_OK, cpr_recovery_plan_encode(back, &again, &again_len));
    assert_int_equal(again_len, len);
    assert_memory_equal(again, buf, len);
    free(again);
    free(buf);
    cpr_recovery_plan_destroy(back);
}

static void test_partial_round_trip(void **unused)
{
    (void)unused;
    size_t n;
    const cpr_part_info *two = parts_of_two(&n);
    cpr_part_info parts[5]; /* the same, written by a job of 4 shards */
    for (size_t i = 0; i < n; i++) {
        parts[i] = two[i];
        parts[i].num_shards = 4;
    }
    const uint32_t failed[] = {1, 3}; /* 3 has nothing committed: INIT */
    cpr_estimate e = {.mode = CPR_RECOVERY_PARTIAL, .policy = CPR_POLICY_MFU, .pls = 0.01,
                      .mtbf_s = 3600, .save_s = 10, .load_s = 20, .restart_s = 30,
                      .failures = 2};
    e.full.overhead_s = 100;
    e.partial.overhead_s = 50;
    cpr_plan_request r = {.parts = parts, .n_parts = n, .num_shards = 4, .failed = failed,
                          .n_failed = 2, .mode = CPR_RECOVERY_PARTIAL, .estimate = &e};
    cpr_recovery_plan *plan = make(&r);
    assert_int_equal(cpr_recovery_plan_problems(plan), CPR_PLAN_SHARD_UNSAVED);
    assert_round_trip(plan);
    cpr_recovery_plan_destroy(plan);
    r.dense_replica = 1;
    plan = make(&r);
    assert_round_trip(plan);
    cpr_recovery_plan_destroy(plan);
}

static void test_full_round_trip(void **unused)
{
    (void)unused;
    size_t n;
    const cpr_part_info *parts = parts_of_two(&n);
    /* The job now has 3 shards, the cut 2: resharded, shard 2's kind unknown. */
    cpr_plan_request r = {.parts = parts, .n_parts = n, .num_shards = 3,
                          .mode = CPR_RECOVERY_FULL, .dense_shard = 1};
    cpr_recovery_plan *plan = make(&r);
    assert_int_equal(cpr_recovery_plan_action(plan), CPR_PLAN_FULL);
    assert_int_equal(cpr_recovery_plan_cut(plan), 2);
    assert_int_equal(cpr_recovery_plan_rewind_step(plan), 200);
    assert_int_equal(cpr_recovery_plan_problems(plan), CPR_PLAN_RESHARDED);
    assert_round_trip(plan);
    cpr_recovery_plan_destroy(plan);
    r.n_parts = 0; /* no cut: restart from scratch */
    plan = make(&r);
    assert_int_equal(cpr_recovery_plan_action(plan), CPR_PLAN_RESTART_FROM_SCRATCH);
    assert_round_trip(plan);
    cpr_recovery_plan_destroy(plan);
}

static void test_survivors_left_out(void **unused)
{
    (void)unused;
    const cpr_part_info one = part(700, 9, F, 900, 1000, 0, 1);
    const uint32_t failed[] = {700};
    cpr_plan_request r = {.parts = &one, .n_parts = 1, .num_shards = 1000, .failed = failed,
                          .n_failed = 1, .mode = CPR_RECOVERY_PARTIAL, .dense_shard = 700};
    cpr_recovery_plan *plan = make(&r);
    void *buf = NULL;
    size_t len = 0;
    assert_status(CPR_OK, cpr_recovery_plan_encode(plan, &buf, &len));
    assert_true(len < 1024);
    assert_round_trip(plan);
    free(buf);
    cpr_recovery_plan_destroy(plan);
}

/* Ids below 2^53 come back exactly: cJSON's printing had rounded
 * 9007199254740979 to 9.00719925474098e+15 (…980), a plan naming another
 * checkpoint than the one planned. */
static void test_large_exact_ids_round_trip(void **unused)
{
    (void)unused;
    const uint64_t ids[] = {9007199254740979ull, (1ull << 53) - 1, 4503599627370497ull,
                            1234567890123457ull};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        const cpr_part_info big = part(0, ids[k], F, ids[k] - 2, 1, 0, 1);
        const uint32_t failed[] = {0};
        cpr_plan_request r = {.parts = &big, .n_parts = 1, .num_shards = 1, .failed = failed,
                              .n_failed = 1, .mode = CPR_RECOVERY_PARTIAL};
        cpr_recovery_plan *plan = make(&r);
        assert_int_equal(cpr_recovery_plan_shard(plan, 0)->as_of, ids[k]);
        assert_round_trip(plan);
        cpr_recovery_plan_destroy(plan);
    }
}

/* A time unit that is not UTF-8 (a caller's Latin-1 "\xb5s") does not
 * change the reason on its way through the codec: the JSON encoder would
 * write U+FFFD for each bad byte, and with 64 failed shards the reason at
 * its cap then grew past it and no process could decode the plan. A
 * reason that is not UTF-8 is refused by the decoder. */
static void test_reason_with_a_non_utf8_unit(void **unused)
{
    (void)unused;
    enum { SHARDS = 64 };
    cpr_part_info parts[SHARDS];
    uint32_t failed[SHARDS];
    for (uint32_t i = 0; i < SHARDS; i++) {
        parts[i] = part(i, 3, F, 30, SHARDS, 0, 1);
        failed[i] = i;
    }
    cpr_estimate e = {.mode = CPR_RECOVERY_PARTIAL, .policy = CPR_POLICY_MFU, .pls = 0.01,
                      .mtbf_s = 3600, .save_s = 10, .load_s = 20, .restart_s = 30};
    memcpy(e.time_unit, "\xb5s", 3);
    for (size_t n_failed = 1; n_failed <= SHARDS; n_failed += SHARDS - 1) {
        cpr_plan_request r = {.parts = parts, .n_parts = SHARDS, .num_shards = SHARDS,
                              .failed = failed, .n_failed = n_failed,
                              .mode = CPR_RECOVERY_PARTIAL, .estimate = &e};
        cpr_recovery_plan *plan = make(&r);
        assert_non_null(strstr(cpr_recovery_plan_reason(plan), "?s"));
        assert_round_trip(plan);
        cpr_recovery_plan_destroy(plan);
    }
}

static void test_ids_beyond_exact_refused(void **unused)
{
    (void)unused;
    const cpr_part_info big = part(0, (1ull << 53) + 1, F, 5, 1, 0, 1);
    const uint32_t failed[] = {0};
    cpr_plan_request r = {.parts = &big, .n_parts = 1, .num_shards = 1, .failed = failed,
                          .n_failed = 1, .mode = CPR_RECOVERY_PARTIAL};
    cpr_recovery_plan *plan = make(&r);
    void *buf = (void *)1;
    size_t len = 7;
    assert_status(CPR_INVALID_ARGUMENT, cpr_recovery_plan_encode(plan, &buf, &len));
    assert_non_null(strstr(cpr_errmsg(), "2^53"));
    assert_int_equal(len, 7);
    cpr_recovery_plan_destroy(plan);
}

static cpr_status decode_text(const char *text)
{
    cpr_recovery_plan *plan = NULL;
    cpr_status st = cpr_recovery_plan_decode(text, strlen(text), &plan);
    cpr_recovery_plan_destroy(plan);
    return st;
}

#define HEAD "\"action\":\"partial\",\"num_shards\":2,\"problems\":0,\"cut\":0," \
             "\"rewind_step\":0,\"reason\":\"r\""

static void test_decode_refuses_garbage(void **unused)
{
    (void)unused;
    cpr_recovery_plan *plan = NULL;
    assert_status(CPR_OK, decode_text("{\"cpr_plan\":1," HEAD ",\"shards\":[[1,\"store\",3,"
                                      "\"DELTA\",30,\"blob\",3,0]]}"));
    assert_status(CPR_INVALID_ARGUMENT, cpr_recovery_plan_decode("", 0, &plan));
    assert_status(CPR_INVALID_ARGUMENT, decode_text("not json"));
    assert_status(CPR_INVALID_ARGUMENT, decode_text("[1,2]"));
    assert_status(CPR_INVALID_ARGUMENT, cpr_recovery_plan_decode("{\"a\":1}\0x", 9, &plan));
    assert_status(CPR_FAILED_PRECONDITION, decode_text("{\"cpr_plan\":2}"));
    assert_non_null(strstr(cpr_errmsg(), "version 2"));
    /* a reason that is not UTF-8: not what the encoder writes */
    assert_status(CPR_INVALID_ARGUMENT,
                  decode_text("{\"cpr_plan\":1,\"action\":\"partial\",\"num_shards\":2,"
                              "\"problems\":0,\"cut\":0,\"rewind_step\":0,\"reason\":\"\xb5"
                              "\",\"shards\":[[1,\"store\",3,\"DELTA\",30,\"blob\",3,0]]}"));
    static const char *const bad[] = {
        "{" HEAD ",\"shards\":[[1,\"store\",3,\"DELTA\",30,\"blob\",3,0]]}", /* no version */
        "{\"cpr_plan\":1," HEAD "}",                                          /* no shards */
        "{\"cpr_plan\":1," HEAD ",\"shards\":[]}",                            /* all KEEP */
        "{\"cpr_plan\":1," HEAD ",\"shards\":[[2,\"store\",3,\"DELTA\",30,\"blob\",3,0]]}",
        "{\"cpr_plan\":1," HEAD ",\"shards\":[[1,\"stored\",3,\"DELTA\",30,\"blob\",3,0]]}",
        "{\"cpr_plan\":1," HEAD ",\"shards\":[[1,\"store\",-3,\"DELTA\",30,\"blob\",3,0]]}",
        "{\"cpr_plan\":1," HEAD ",\"shards\":[[1,\"store\",1.5,\"DELTA\",30,\"blob\",3,0]]}",
        "{\"cpr_plan\":1," HEAD ",\"shards\":[[1,\"store\",3,\"DELTA\",30,\"blob\",3]]}",
        "{\"cpr_plan\":1," HEAD ",\"shards\":[[1,\"store\",3,\"DELTA\",30,\"blob\",3,0],"
        "[0,\"store\",3,\"DELTA\",30,\"blob\",3,0]]}",                        /* out of order */
        "{\"cpr_plan\":1,\"action\":\"partial\",\"num_shards\":0,\"problems\":0,\"cut\":0,"
        "\"rewind_step\":0,\"reason\":\"r\",\"shards\":[[0,\"init\",0,\"FULL\",0,\"init\",0,0]]}",
        "{\"cpr_plan\":1,\"action\":\"sideways\",\"num_shards\":1,\"problems\":0,\"cut\":0,"
        "\"rewind_step\":0,\"reason\":\"r\",\"shards\":[[0,\"init\",0,\"FULL\",0,\"init\",0,0]]}",
        "{\"cpr_plan\":1,\"action\":\"full\",\"num_shards\":1,\"problems\":0,"
        "\"cut\":1e300,\"rewind_step\":0,\"reason\":\"r\",\"shards\":[[0,\"init\",0,\"FULL\",0,"
        "\"init\",0,0]]}",
        /* 2^53, which the encoder refuses */
        "{\"cpr_plan\":1," HEAD ",\"shards\":[[1,\"store\",9007199254740992,\"DELTA\",30,"
        "\"blob\",3,0]]}",
        /* what no plan of the planner holds: a store entry as of 0 ... */
        "{\"cpr_plan\":1," HEAD ",\"shards\":[[1,\"store\",0,\"DELTA\",30,\"blob\",3,0]]}",
        /* ... a full plan with a shard left out (a million of them, from a
         * few bytes) or one not restored as of the cut ... */
        "{\"cpr_plan\":1,\"action\":\"full\",\"num_shards\":1000000,\"problems\":0,"
        "\"cut\":1,\"rewind_step\":0,\"reason\":\"r\",\"shards\":[[0,\"store\",1,\"FULL\",0,"
        "\"blob\",1,0]]}",
        "{\"cpr_plan\":1,\"action\":\"full\",\"num_shards\":1,\"problems\":0,"
        "\"cut\":2,\"rewind_step\":0,\"reason\":\"r\",\"shards\":[[0,\"store\",1,\"FULL\",0,"
        "\"blob\",1,0]]}",
        /* ... and problem bits CPR does not define */
        "{\"cpr_plan\":1,\"action\":\"partial\",\"num_shards\":4,\"problems\":64,"
        "\"cut\":0,\"rewind_step\":0,\"reason\":\"r\",\"shards\":[[1,\"store\",3,\"DELTA\",30,"
        "\"blob\",3,0]]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cpr_status st = decode_text(bad[i]);
        if (st != CPR_INVALID_ARGUMENT)
            fail_msg("bad plan %zu: got %s, want CPR_INVALID_ARGUMENT", i, cpr_status_name(st));
    }
}

static void test_decode_truncations_and_mutations(void **unused)
{
    (void)unused;
    size_t n;
    const cpr_part_info *parts = parts_of_two(&n);
    const uint32_t failed[] = {0, 1};
    cpr_plan_request r = {.parts = parts, .n_parts = n, .num_shards = 2, .failed = failed,
                          .n_failed = 2, .mode = CPR_RECOVERY_PARTIAL};
    cpr_recovery_plan *plan = make(&r), *back = NULL;
    void *buf = NULL;
    size_t len = 0;
    assert_status(CPR_OK, cpr_recovery_plan_encode(plan, &buf, &len));
    for (size_t cut = 0; cut < len; cut++) /* no prefix of a plan is a plan */
        if (cpr_recovery_plan_decode(buf, cut, &back) == CPR_OK)
            fail_msg("a %zu-byte prefix of a %zu-byte plan decoded", cut, len);
    unsigned char *copy = malloc(len);
    size_t decoded = 0;
    for (size_t i = 0; i < len; i++) { /* every byte changed: refused or a valid plan */
        memcpy(copy, buf, len);
        copy[i] ^= 0x15;
        cpr_status st = cpr_recovery_plan_decode(copy, len, &back);
        assert_true(st == CPR_OK || st == CPR_INVALID_ARGUMENT || st == CPR_FAILED_PRECONDITION);
        if (st == CPR_OK) {
            decoded++;
            assert_int_equal(cpr_recovery_plan_count(back), 2);
            cpr_recovery_plan_destroy(back);
        }
    }
    assert_true(decoded < len);
    free(copy);
    free(buf);
    cpr_recovery_plan_destroy(plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partial_round_trip),
        cmocka_unit_test(test_full_round_trip),
        cmocka_unit_test(test_survivors_left_out),
        cmocka_unit_test(test_large_exact_ids_round_trip),
        cmocka_unit_test(test_reason_with_a_non_utf8_unit),
        cmocka_unit_test(test_ids_beyond_exact_refused),
        cmocka_unit_test(test_decode_refuses_garbage),
        cmocka_unit_test(test_decode_truncations_and_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
