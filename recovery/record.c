/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Agreeing on one recovery plan (cpr/recovery.h): every process of a job
 * that sees a failure decides and plans on its own, then tries to record its
 * plan in ckptd by compare-and-set on the job's recovery generation. Exactly
 * one succeeds; every other reads the winner's plan back. So all of them act
 * on the plan that was recorded, whatever each would have decided (their
 * part lists or estimators may differ by a commit or a measurement).
 *
 *   decide  list parts -> estimator decision -> cpr_recovery_plan_make
 *   record  encode -> cpr_client_recovery_put(expected)
 *             OK                      -> act on our plan (won)
 *             FAILED_PRECONDITION     -> get, decode -> act on theirs
 */
#include <stdlib.h>

#include "cpr/recovery.h"
#include "cpr_common.h"

/* The job's parts; a job that has none yet plans from an empty list. */
static cpr_status list_parts(cpr_client *client, const char *job, cpr_part_info **parts,
                             size_t *n)
{
    cpr_status st = cpr_client_list(client, job, parts, n);
    if (st == CPR_NOT_FOUND) {
        *parts = NULL;
        *n = 0;
        return CPR_OK;
    }
    return st;
}

static cpr_status make_plan(cpr_client *client, const char *job, const cpr_estimator *est,
                            const cpr_plan_request *request, cpr_recovery_plan **plan)
{
    cpr_plan_request r = *request;
    cpr_estimate e;
    cpr_part_info *parts = NULL;
    cpr_status st = CPR_OK;
    if (est) {
        cpr_recovery_mode mode = CPR_RECOVERY_FULL;
        st = cpr_estimator_decide(est, &e);
        if (st == CPR_OK) /* from the saves made (cpr_estimator_recovery_mode) */
            st = cpr_estimator_recovery_mode(est, &mode);
        /* A resume (no failed shard) is a FULL recovery, whatever the
         * estimator would choose for a failure. */
        r.mode = request->n_failed ? mode : CPR_RECOVERY_FULL;
        r.estimate = &e;
    }
    if (st == CPR_OK)
        st = list_parts(client, job, &parts, &r.n_parts);
    r.parts = parts;
    if (st == CPR_OK)
        st = cpr_recovery_plan_make(&r, plan);
    free(parts);
    return st;
}

cpr_status cpr_recovery_read_recorded(cpr_client *client, const char *job,
                                      uint64_t *generation, cpr_recovery_plan **out)
{
    if (!client || !job || !generation || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_recovery_read_recorded: arguments must not "
                        "be NULL");
    uint64_t gen = 0;
    void *bytes = NULL;
    size_t len = 0;
    cpr_recovery_plan *plan = NULL;
    cpr_status st = cpr_client_recovery_get(client, job, &gen, &bytes, &len);
    if (st == CPR_OK && gen > 0)
        st = cpr_recovery_plan_decode(bytes, len, &plan);
    free(bytes);
    if (st)
        return st;
    *generation = gen;
    *out = plan;
    return CPR_OK;
}

/* Another process recorded first: its plan is the one to act on. */
static cpr_status take_recorded(cpr_client *client, const char *job, uint64_t expected,
                                cpr_recovery_plan **out, uint64_t *generation)
{
    cpr_status st = cpr_recovery_read_recorded(client, job, generation, out);
    if (st == CPR_OK && *generation <= expected) {
        cpr_recovery_plan_destroy(*out);
        *out = NULL;
        st = cpr_fail(CPR_FAILED_PRECONDITION, "the recovery record of job %s is at generation "
                      "%llu, not beyond the expected %llu: expected_generation must be a "
                      "generation this job's record has had", job,
                      (unsigned long long)*generation, (unsigned long long)expected);
    }
    return st;
}

/* R1: does `plan` recover every failed shard of `request`? A full plan or a
 * restart from scratch recovers all; a partial one those it restores or
 * re-initialises, and never a resume (no failed shard: every shard). */
static int covers(const cpr_recovery_plan *plan, const cpr_plan_request *request)
{
    if (cpr_recovery_plan_action(plan) != CPR_PLAN_PARTIAL)
        return 1;
    if (request->n_failed == 0)
        return 0;
    for (size_t i = 0; i < request->n_failed; i++) {
        int found = 0;
        for (size_t k = 0; k < cpr_recovery_plan_count(plan) && !found; k++) {
            const cpr_plan_shard *e = cpr_recovery_plan_shard(plan, k);
            found = e->shard == request->failed[i] && e->source != CPR_SOURCE_KEEP;
        }
        if (!found)
            return 0;
    }
    return 1;
}

/* Plan and put at `expected`; *lost when another process recorded first. */
static cpr_status plan_and_put(cpr_client *client, const char *job,
                               const cpr_estimator *estimator, const cpr_plan_request *request,
                               uint64_t expected, cpr_recovery_plan **mine, uint64_t *gen,
                               int *lost)
{
    void *bytes = NULL;
    size_t len = 0;
    *lost = 0;
    cpr_status st = make_plan(client, job, estimator, request, mine);
    if (st == CPR_OK)
        st = cpr_recovery_plan_encode(*mine, &bytes, &len);
    if (st == CPR_OK) {
        st = cpr_client_recovery_put(client, job, expected, bytes, len, gen);
        *lost = st == CPR_FAILED_PRECONDITION;
    }
    free(bytes);
    return st;
}

/* R1: rounds of "another process recorded first and its plan does not
 * recover this request's shards" before giving up. */
#define COVER_ROUNDS 16

cpr_status cpr_recovery_decide_and_record(cpr_client *client, const char *job,
                                          const cpr_estimator *estimator,
                                          const cpr_plan_request *request,
                                          uint64_t expected_generation, cpr_recovery_plan **out,
                                          uint64_t *generation, int *won)
{
    if (!client || !job || !request || !out || !generation)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_recovery_decide_and_record: client, job, "
                        "request, out and generation must not be NULL");
    cpr_recovery_plan *mine = NULL, *theirs = NULL;
    uint64_t gen = 0, expected = expected_generation;
    int lost = 0;
    cpr_status st = plan_and_put(client, job, estimator, request, expected, &mine, &gen, &lost);
    /* R1: another process recorded first. Its plan is the one to act on if
     * it recovers this request's failed shards too (the same failure, seen
     * twice; or a full plan); if not (another failure at the same
     * generation, or a record beyond a lagging process's), this request is
     * planned again and recorded at the newest generation, so that no
     * failure is left out of every plan. */
    for (int round = 0; lost && round < COVER_ROUNDS; round++) {
        cpri_log(CPR_LOG_INFO, "job %s: %s; reading the recorded plan", job, cpr_errmsg());
        st = take_recorded(client, job, expected, &theirs, &gen);
        if (st || covers(theirs, request))
            break;
        cpri_log(CPR_LOG_INFO, "job %s: the plan recorded at generation %llu does not recover "
                 "every shard this call reports failed: planning them at it", job,
                 (unsigned long long)gen);
        cpr_recovery_plan_destroy(theirs);
        theirs = NULL;
        cpr_recovery_plan_destroy(mine);
        mine = NULL;
        expected = gen;
        st = plan_and_put(client, job, estimator, request, expected, &mine, &gen, &lost);
    }
    if (st == CPR_OK && lost && !theirs)
        st = cpr_fail(CPR_UNAVAILABLE, "job %s: the recovery record moved %d times while this "
                      "call planned its failed shards; call again", job, COVER_ROUNDS);
    if (st) {
        cpr_recovery_plan_destroy(mine);
        cpr_recovery_plan_destroy(theirs);
        return st;
    }
    if (won)
        *won = theirs == NULL;
    if (theirs) {
        cpr_recovery_plan_destroy(mine);
        mine = theirs;
    }
    *out = mine;
    *generation = gen;
    return CPR_OK;
}
