/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The job's recovery record through the client (cpr/client.h): a generation
 * and an opaque plan, kept on the node that holds (job, shard 0) so that
 * every process of the job asks the same node. Get is a read and is retried
 * on CPR_UNAVAILABLE. Put is a compare-and-set and is never repeated
 * blindly: when its answer is lost the record is read back, and only its
 * state decides (the put took effect, it did not and may be sent again, or
 * another process won meanwhile).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "cpr_common.h"

static cpri_node *record_node(const cpr_client *c, const char *job)
{
    return c->nodes[cpr_client_node_of(c, job, 0)];
}

typedef struct get_try {
    cpr_client *c;
    cpri_node *node;
    const char *job;
    uint64_t generation;
    void *plan;
    size_t len;
} get_try;

static cpr_status get_once(void *ctx)
{
    get_try *t = ctx;
    return cpri_node_recovery_get(t->node, t->job, t->c->opts.call_timeout_s, &t->generation,
                                 &t->plan, &t->len);
}

static cpr_status check_job(const char *job, const char *fn)
{
    if (!cpri_name_valid(job))
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: job name \"%.140s\" is invalid: use 1-128 "
                        "characters of A-Z a-z 0-9 . _ -", fn, job ? job : "(null)");
    return CPR_OK;
}

cpr_status cpr_client_recovery_get(cpr_client *c, const char *job, uint64_t *generation,
                                   void **plan, size_t *len)
{
    if (!c || !generation || !plan || !len)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_recovery_get: client, generation, "
                        "plan and len must not be NULL");
    cpr_status st = check_job(job, "cpr_client_recovery_get");
    if (st)
        return st;
    get_try t = {c, record_node(c, job), job, 0, NULL, 0};
    st = cpri_client_retry(c, get_once, &t);
    if (st)
        return st;
    *generation = t.generation;
    *plan = t.plan;
    *len = t.len;
    return CPR_OK;
}

/* What the record says about a put whose answer was lost. */
typedef enum put_outcome {
    PUT_APPLIED,     /* generation expected + 1 with our bytes */
    PUT_NOT_APPLIED, /* still at `expected`: safe to send again */
    PUT_LOST_RACE,   /* another process moved the record */
    PUT_UNKNOWN      /* the record could not be read */
} put_outcome;

static put_outcome read_back(cpr_client *c, const char *job, uint64_t expected,
                             const void *plan, size_t len, uint64_t *now)
{
    get_try t = {c, record_node(c, job), job, 0, NULL, 0};
    if (cpri_client_retry(c, get_once, &t) != CPR_OK)
        return PUT_UNKNOWN;
    put_outcome o = PUT_LOST_RACE;
    if (t.generation == expected)
        o = PUT_NOT_APPLIED;
    else if (t.generation == expected + 1 && t.len == len &&
             (len == 0 || memcmp(t.plan, plan, len) == 0))
        o = PUT_APPLIED; /* ours (or an identical plan: the same decision) */
    *now = t.generation;
    free(t.plan);
    return o;
}

/* The put's answer was lost (`lost`, with `why`): decide from the record.
 * CPR_OK: it took effect (*generation set). *again set: it did not, and may
 * be sent again after the backoff just taken. Otherwise: the status to report. */
static cpr_status reconcile(cpr_client *c, const char *job, uint64_t expected, const void *plan,
                            size_t len, cpr_status lost, const char *why, unsigned attempt,
                            uint64_t *generation, int *again)
{
    uint64_t now = 0;
    *again = 0;
    switch (read_back(c, job, expected, plan, len, &now)) {
    case PUT_APPLIED:
        *generation = now;
        return CPR_OK;
    case PUT_NOT_APPLIED:
        if (lost == CPR_UNAVAILABLE && cpri_client_backoff(c, attempt)) {
            *again = 1;
            return lost;
        }
        if (lost == CPR_TIMEOUT) /* the put may still be on its way */
            return cpr_fail(lost, "%s (the recovery record of job %s was still at generation "
                            "%llu when read back; the put timed out and may yet take "
                            "effect: read the record again)", why, job,
                            (unsigned long long)expected);
        return cpr_fail(lost, "%s (the recovery record of job %s is still at generation "
                        "%llu: not recorded)", why, job, (unsigned long long)expected);
    case PUT_LOST_RACE:
        return cpr_fail(CPR_FAILED_PRECONDITION, "the recovery record of job %s is at "
                        "generation %llu, not the expected %llu, and holds another plan: "
                        "another process recorded a decision first (the answer to this "
                        "put was lost: %s)", job, (unsigned long long)now,
                        (unsigned long long)expected, why);
    case PUT_UNKNOWN:
        break;
    }
    return cpr_fail(lost, "%s (the recovery record of job %s could not be read back: "
                    "whether this put took effect is unknown; read the record later)", why,
                    job);
}

cpr_status cpr_client_recovery_put(cpr_client *c, const char *job, uint64_t expected,
                                   const void *plan, size_t len, uint64_t *generation)
{
    if (!c || !generation || (len && !plan))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_recovery_put: client and "
                        "generation must not be NULL, nor plan when len > 0");
    cpr_status st = check_job(job, "cpr_client_recovery_put");
    if (st)
        return st;
    cpri_node *node = record_node(c, job);
    for (unsigned attempt = 0;; attempt++) {
        uint64_t gen = 0;
        st = cpri_node_recovery_put(node, job, expected, plan, len, c->opts.call_timeout_s, &gen);
        if (st == CPR_OK) {
            *generation = gen;
            return CPR_OK;
        }
        if (st == CPR_FAILED_PRECONDITION && attempt > 0) {
            /* A resend refused: the first send, whose answer was lost, may
             * have been delayed and applied meanwhile. */
            char why[1024];
            snprintf(why, sizeof why, "%s", cpr_errmsg());
            uint64_t now = 0;
            put_outcome got = read_back(c, job, expected, plan, len, &now);
            if (got == PUT_APPLIED) {
                *generation = now;
                return CPR_OK;
            }
            if (got == PUT_UNKNOWN)
                return cpr_fail(CPR_UNAVAILABLE, "%s (the record of job %s could not be read "
                                "back: whether the first send of this put took effect is "
                                "unknown; read the record later)", why, job);
            return cpr_fail(st, "%s", why);
        }
        if (st != CPR_UNAVAILABLE && st != CPR_TIMEOUT)
            return st;
        char why[1024];
        int again = 0;
        snprintf(why, sizeof why, "%s", cpr_errmsg());
        st = reconcile(c, job, expected, plan, len, st, why, attempt, generation, &again);
        if (!again)
            return st;
    }
}
