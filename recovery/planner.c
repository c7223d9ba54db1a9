/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The recovery planner (cpr/recovery.h): from a job's part list, the failed
 * shards and the estimator's decision, what every shard restores and from
 * which checkpoint. A pure function, so the same list gives every process
 * of a job the same plan, and tests can feed it crafted lists.
 *
 * Invariants of a plan:
 *   P1  one entry per shard 0..num_shards-1, in order;
 *   P2  PARTIAL: failed shards are STORE (as of their newest committed part)
 *       or INIT (nothing committed; CPR_PLAN_SHARD_UNSAVED); the others KEEP;
 *   P3  FULL: every shard is STORE as of the cut C, with the cut's step as
 *       the rewind step and dense state from the cut's blobs; C is a
 *       consistent cut by the store's definition (cpr/store.h), computed
 *       here from the list exactly as the store's catalog does;
 *   P4  RESTART_FROM_SCRATCH: every shard INIT, rewind step 0;
 *   P5  the reason names the decision's numbers and every problem;
 *   P6  parts in the abandoned range (abandoned_after, abandoned_through] do
 *       not exist for the plan: a FULL recovery rewound training to a cut,
 *       and what was saved after it belongs to a timeline that was left.
 *       Nor do a shard's parts after that range until its first FULL part
 *       after it: a restore "as of" one of them would start from the
 *       shard's newest FULL at or below it, an abandoned one (a DELTA's
 *       base may be one too).
 *   P7  PARTIAL: a failed shard with no FULL part in the job's present
 *       sharding (num_shards) has its rows in parts of another sharding,
 *       on other shards: it restores as of the newest committed part of
 *       any shard, from every shard, its rows selected by the present
 *       sharding (CPR_PLAN_RESHARDED), not from its own parts alone. When
 *       the list had an abandoned timeline, as of no later than the cut it
 *       was abandoned at: read from every shard, a restore would meet the
 *       other shards' abandoned parts, which P6 cannot keep apart.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/recovery.h"
#include "cpr_common.h"
#include "cpr_json.h"
#include "plan_internal.h"

#define REASON_SHARDS 8 /* failed shards named in the reason; the rest are counted */

const char *cpr_plan_action_name(cpr_plan_action action)
{
    switch (action) {
    case CPR_PLAN_PARTIAL: return "partial";
    case CPR_PLAN_FULL: return "full";
    case CPR_PLAN_RESTART_FROM_SCRATCH: return "restart-from-scratch";
    }
    return "unknown";
}

const char *cpr_shard_source_name(cpr_shard_source source)
{
    switch (source) {
    case CPR_SOURCE_KEEP: return "keep";
    case CPR_SOURCE_STORE: return "store";
    case CPR_SOURCE_INIT: return "init";
    }
    return "unknown";
}

const char *cpr_dense_source_name(cpr_dense_source source)
{
    switch (source) {
    case CPR_DENSE_KEEP: return "keep";
    case CPR_DENSE_REPLICA: return "replica";
    case CPR_DENSE_BLOB: return "blob";
    case CPR_DENSE_INIT: return "init";
    }
    return "unknown";
}

static void reason_add(cpr_recovery_plan *plan, const char *fmt, ...) CPR_PRINTF(2, 3);
static void reason_add(cpr_recovery_plan *plan, const char *fmt, ...)
{
    size_t room = REASON_MAX - plan->reason_len;
    if (room <= 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(plan->reason + plan->reason_len, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        plan->reason_len += (size_t)n < room ? (size_t)n : room - 1;
}

/* ---- validation ---------------------------------------------------------------- */

static cpr_status check_parts(const cpr_part_info *parts, size_t n)
{
    if (n > 0 && !parts)
        return cpr_fail(CPR_INVALID_ARGUMENT, "parts is NULL with n_parts %zu", n);
    for (size_t i = 0; i < n; i++) {
        const cpr_part_info *p = &parts[i];
        if (p->kind != CPR_KIND_FULL && p->kind != CPR_KIND_DELTA && p->kind != CPR_KIND_PRIORITY)
            return cpr_fail(CPR_INVALID_ARGUMENT, "parts[%zu]: kind %d is not FULL, DELTA or "
                            "PRIORITY", i, (int)p->kind);
        if (p->num_shards < 1 || p->shard >= p->num_shards)
            return cpr_fail(CPR_INVALID_ARGUMENT, "parts[%zu]: shard %u is not below its "
                            "num_shards %u", i, p->shard, p->num_shards);
        if (p->checkpoint == 0) /* as in the store: a plan would name it and not decode */
            return cpr_fail(CPR_INVALID_ARGUMENT, "parts[%zu]: checkpoint 0 is reserved; "
                            "ids start at 1", i);
        if (i > 0 && (p->checkpoint < parts[i - 1].checkpoint ||
                      (p->checkpoint == parts[i - 1].checkpoint && p->shard <= parts[i - 1].shard)))
            return cpr_fail(CPR_INVALID_ARGUMENT, "parts[%zu] (checkpoint %llu, shard %u) is not "
                            "after parts[%zu]: the list must be sorted by (checkpoint, shard) "
                            "without duplicates, as cpr_store_list returns it", i,
                            (unsigned long long)p->checkpoint, p->shard, i - 1);
    }
    return CPR_OK;
}

static cpr_status check_failed(const cpr_plan_request *r)
{
    if (r->n_failed > 0 && !r->failed)
        return cpr_fail(CPR_INVALID_ARGUMENT, "failed is NULL with n_failed %zu", r->n_failed);
    for (size_t i = 0; i < r->n_failed; i++) {
        if (r->failed[i] >= r->num_shards)
            return cpr_fail(CPR_INVALID_ARGUMENT, "failed[%zu]: shard %u is not below "
                            "num_shards %u", i, r->failed[i], r->num_shards);
        for (size_t j = 0; j < i; j++)
            if (r->failed[j] == r->failed[i])
                return cpr_fail(CPR_INVALID_ARGUMENT, "failed[%zu]: shard %u is listed twice",
                                i, r->failed[i]);
    }
    return CPR_OK;
}

static cpr_status check_request(const cpr_plan_request *r)
{
    if (r->num_shards < 1)
        return cpr_fail(CPR_INVALID_ARGUMENT, "num_shards: must be at least 1");
    if (r->mode != CPR_RECOVERY_FULL && r->mode != CPR_RECOVERY_PARTIAL)
        return cpr_fail(CPR_INVALID_ARGUMENT, "mode: %d is neither FULL nor PARTIAL",
                        (int)r->mode);
    if (r->mode == CPR_RECOVERY_PARTIAL && r->n_failed == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a PARTIAL recovery needs at least one failed shard");
    if (r->dense_shard >= r->num_shards)
        return cpr_fail(CPR_INVALID_ARGUMENT, "dense_shard: %u is not below num_shards %u",
                        r->dense_shard, r->num_shards);
    if (r->abandoned_through && r->abandoned_through <= r->abandoned_after)
        return cpr_fail(CPR_INVALID_ARGUMENT, "abandoned_through %llu must be above "
                        "abandoned_after %llu (or 0: nothing abandoned)",
                        (unsigned long long)r->abandoned_through,
                        (unsigned long long)r->abandoned_after);
    cpr_status st = check_parts(r->parts, r->n_parts);
    return st ? st : check_failed(r);
}

/* ---- reading the part list ----------------------------------------------------- */

/* Index of `shard`'s newest committed part of any kind, or -1. */
static long newest_committed(const cpr_part_info *parts, size_t n, uint32_t shard)
{
    for (size_t i = n; i-- > 0;)
        if (parts[i].shard == shard && parts[i].committed)
            return (long)i;
    return -1;
}

/* The committed part of `shard` at checkpoint `id` (the list is sorted). */
static const cpr_part_info *part_at(const cpr_part_info *parts, size_t n, uint64_t id,
                                    uint32_t shard)
{
    for (size_t i = 0; i < n; i++)
        if (parts[i].checkpoint == id && parts[i].shard == shard && parts[i].committed)
            return &parts[i];
    return NULL;
}

/* ---- the decision's numbers ---------------------------------------------------- */

static void add_decision(cpr_recovery_plan *plan, const cpr_plan_request *r)
{
    const cpr_estimate *e = r->estimate;
    if (!e) {
        reason_add(plan, "%s recovery asked by the caller (no estimate)",
                   cpr_recovery_mode_name(r->mode));
        return;
    }
    const char *cmp = e->partial.overhead_s < e->full.overhead_s ? "<" : ">=";
    /* The caller may have filled the estimate itself: bounded, NUL or not. */
    char u[sizeof e->time_unit + 1] = "s";
    if (e->time_unit[0])
        snprintf(u, sizeof u, "%.*s", (int)strnlen(e->time_unit, sizeof e->time_unit),
                 e->time_unit);
    /* The reason travels as JSON text: bytes that are not UTF-8 would come
     * back as U+FFFD (3 bytes each), another reason, maybe past its cap. */
    if (!cpri_utf8_valid(u))
        for (char *c = u; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
                *c = '?';
    reason_add(plan, "%s recovery: partial overhead %.4g%% at %.4g %s (%s, PLS %.3g) %s full "
               "overhead %.4g%% at %.4g %s; mtbf %.4g %s, save %.4g %s, load %.4g %s, restart "
               "%.4g %s, %llu failures seen",
               cpr_recovery_mode_name(r->mode), 100.0 * e->partial.overhead_frac,
               e->partial.interval_s, u, cpr_policy_name(e->policy), e->pls, cmp,
               100.0 * e->full.overhead_frac, e->full.interval_s, u, e->mtbf_s, u, e->save_s,
               u, e->load_s, u, e->restart_s, u, (unsigned long long)e->failures);
}

/* ---- the plans ------------------------------------------------------------------- */

static void restart_from_scratch(cpr_recovery_plan *plan)
{
    plan->action = CPR_PLAN_RESTART_FROM_SCRATCH;
    plan->cut = plan->rewind_step = 0;
    for (size_t s = 0; s < plan->n; s++) {
        cpr_plan_shard *e = &plan->shards[s];
        memset(e, 0, sizeof *e);
        e->shard = (uint32_t)s;
        e->source = CPR_SOURCE_INIT;
        e->dense = CPR_DENSE_INIT;
    }
}

/* Dense state of a failed shard under PARTIAL. */
static void partial_dense(cpr_recovery_plan *plan, const cpr_plan_request *r, cpr_plan_shard *e)
{
    if (r->dense_replica) {
        e->dense = CPR_DENSE_REPLICA;
        return;
    }
    long d = newest_committed(r->parts, r->n_parts, r->dense_shard);
    if (d < 0) {
        e->dense = CPR_DENSE_INIT;
        plan->problems |= CPR_PLAN_DENSE_UNSAVED;
        return;
    }
    e->dense = CPR_DENSE_BLOB;
    e->dense_checkpoint = r->parts[d].checkpoint;
    e->dense_shard = r->dense_shard;
}

/* P7: does `shard` have a committed FULL part in the request's sharding,
 * newer than every committed part of another sharding? A FULL from before
 * the job last changed its sharding (4 shards, then 2, then 4 again) holds
 * the shard's rows as they were then, not since: the rows the other
 * sharding saved are newer. */
static int full_in_sharding(const cpr_plan_request *r, uint32_t shard)
{
    uint64_t resharded = 0; /* the newest checkpoint of another sharding */
    for (size_t i = 0; i < r->n_parts; i++) {
        const cpr_part_info *p = &r->parts[i];
        if (p->committed && p->num_shards != r->num_shards && p->checkpoint > resharded)
            resharded = p->checkpoint;
    }
    for (size_t i = 0; i < r->n_parts; i++) {
        const cpr_part_info *p = &r->parts[i];
        if (p->shard == shard && p->committed && p->kind == CPR_KIND_FULL &&
            p->num_shards == r->num_shards && p->checkpoint > resharded)
            return 1;
    }
    return 0;
}

/* P7: the newest committed part of any shard at or below checkpoint
 * `max`, or -1; *other: some committed part has another sharding than the
 * request's. */
static long newest_of_any(const cpr_plan_request *r, uint64_t max, int *other)
{
    long newest = -1;
    *other = 0;
    for (size_t i = 0; i < r->n_parts; i++)
        if (r->parts[i].committed) {
            if (r->parts[i].checkpoint <= max)
                newest = (long)i;
            *other |= r->parts[i].num_shards != r->num_shards;
        }
    return newest;
}

/* abandoned: the request's list had parts in its abandoned range (P6). */
static void partial_shard(cpr_recovery_plan *plan, const cpr_plan_request *r, uint32_t shard,
                          size_t nth, int abandoned)
{
    cpr_plan_shard *e = &plan->shards[shard];
    long i = newest_committed(r->parts, r->n_parts, shard);
    int elsewhere = 0;
    if (!full_in_sharding(r, shard)) {
        /* P7. Read from every shard, a restore would meet other shards'
         * abandoned parts too (P6 keeps only a shard's own apart): then it
         * goes no later than the cut training was rewound to. */
        int other = 0;
        long any = newest_of_any(r, abandoned ? r->abandoned_after : UINT64_MAX, &other);
        if (other) { /* resharded since this shard's rows were last saved whole */
            i = any;
            elsewhere = i >= 0;
        }
    }
    if (elsewhere) { /* P7 */
        plan->problems |= CPR_PLAN_RESHARDED;
        e->source = CPR_SOURCE_STORE;
        e->as_of = r->parts[i].checkpoint;
        e->kind = CPR_KIND_UNSPECIFIED; /* parts of several shards */
        e->step = r->parts[i].step;
    } else if (i >= 0) {
        e->source = CPR_SOURCE_STORE;
        e->as_of = r->parts[i].checkpoint;
        e->kind = r->parts[i].kind;
        e->step = r->parts[i].step;
    } else {
        e->source = CPR_SOURCE_INIT;
        plan->problems |= CPR_PLAN_SHARD_UNSAVED;
    }
    partial_dense(plan, r, e);
    if (nth >= REASON_SHARDS)
        return;
    if (elsewhere)
        reason_add(plan, "; shard %u has no FULL part in the present %u-shard layout: its "
                   "rows restore as of checkpoint %llu from every shard's parts, selected by "
                   "the present sharding", shard, r->num_shards,
                   (unsigned long long)e->as_of);
    else if (i >= 0)
        reason_add(plan, "; shard %u restores as of checkpoint %llu (%s, step %llu)", shard,
                   (unsigned long long)e->as_of, cpr_kind_name(e->kind),
                   (unsigned long long)e->step);
    else
        reason_add(plan, "; shard %u has no committed part: its rows restart from their "
                   "initial values, losing all its updates", shard);
    reason_add(plan, ", dense state from %s", cpr_dense_source_name(e->dense));
}

static void plan_partial(cpr_recovery_plan *plan, const cpr_plan_request *r, int abandoned)
{
    plan->action = CPR_PLAN_PARTIAL;
    for (size_t s = 0; s < plan->n; s++)
        plan->shards[s].shard = (uint32_t)s; /* KEEP, dense KEEP */
    for (size_t k = 0; k < r->n_failed; k++)
        partial_shard(plan, r, r->failed[k], k, abandoned);
    if (r->n_failed > REASON_SHARDS)
        reason_add(plan, "; and %zu more failed shards", r->n_failed - REASON_SHARDS);
    if (plan->problems & CPR_PLAN_DENSE_UNSAVED)
        reason_add(plan, "; no replica and no committed part of shard %u: dense state is "
                   "re-initialised", r->dense_shard);
    if ((plan->problems & CPR_PLAN_SHARD_UNSAVED) && r->restart_if_unsaved) {
        reason_add(plan, "; a failed shard has nothing committed and restart_if_unsaved is "
                   "set: every shard restarts from scratch (step 0)");
        restart_from_scratch(plan);
    }
}

/* The step to rewind to: the cut's parts' step (the smallest, if they differ). */
static uint64_t cut_step(cpr_recovery_plan *plan, const cpr_plan_request *r, uint32_t n)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t s = 0; s < n; s++) {
        uint64_t step = part_at(r->parts, r->n_parts, plan->cut, s)->step;
        lo = step < lo ? step : lo;
        hi = step > hi ? step : hi;
    }
    if (lo != hi)
        reason_add(plan, "; the cut's parts record steps %llu to %llu: rewinding to the "
                   "earliest", (unsigned long long)lo, (unsigned long long)hi);
    return lo;
}

static void plan_full(cpr_recovery_plan *plan, const cpr_plan_request *r)
{
    uint64_t cut_id;
    if (cpr_cuts(r->parts, r->n_parts, 0, &cut_id, 1) == 0) {
        plan->problems |= CPR_PLAN_NO_CUT;
        reason_add(plan, "; no consistent cut yet (no checkpoint id at which every shard has "
                   "a committed FULL part or complete DELTA chain): every shard restarts "
                   "from scratch (step 0)");
        restart_from_scratch(plan);
        return;
    }
    /* A cut has a committed part for every shard below shard 0's num_shards. */
    uint32_t cut_n = part_at(r->parts, r->n_parts, cut_id, 0)->num_shards;
    plan->action = CPR_PLAN_FULL;
    plan->cut = cut_id;
    plan->rewind_step = cut_step(plan, r, cut_n);
    uint32_t dense_shard = r->dense_shard < cut_n ? r->dense_shard : 0;
    for (size_t s = 0; s < plan->n; s++) {
        cpr_plan_shard *e = &plan->shards[s];
        e->shard = (uint32_t)s;
        e->source = CPR_SOURCE_STORE;
        e->as_of = plan->cut;
        e->kind = s < cut_n ? part_at(r->parts, r->n_parts, cut_id, (uint32_t)s)->kind
                          : CPR_KIND_UNSPECIFIED;
        e->step = plan->rewind_step;
        e->dense = CPR_DENSE_BLOB;
        e->dense_checkpoint = plan->cut;
        e->dense_shard = dense_shard;
    }
    reason_add(plan, "; every shard restores as of consistent cut %llu, rewinding to step %llu",
               (unsigned long long)plan->cut, (unsigned long long)plan->rewind_step);
    if (cut_n != r->num_shards) {
        plan->problems |= CPR_PLAN_RESHARDED;
        reason_add(plan, "; the cut has %u shards and the job %u: restores select each "
                   "shard's rows by the new sharding", cut_n, r->num_shards);
    }
}

/* P6's set of shards, ascending in ids[0..n): is `shard` in it. */
static int has_shard(const uint64_t *ids, size_t n, uint32_t shard)
{
    size_t at = cpri_lower_bound_u64(ids, n, shard);
    return at < n && ids[at] == shard;
}

/* Add `shard` (room for it is there); the new count. */
static size_t add_shard(uint64_t *ids, size_t n, uint32_t shard)
{
    size_t at = cpri_lower_bound_u64(ids, n, shard);
    if (at < n && ids[at] == shard)
        return n;
    memmove(ids + at + 1, ids + at, (n - at) * sizeof *ids);
    ids[at] = shard;
    return n + 1;
}

cpr_status cpr_recovery_plan_make(const cpr_plan_request *request, cpr_recovery_plan **out)
{
    if (!request || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "request and out must not be NULL");
    cpr_status st = check_request(request);
    if (st)
        return st;
    cpr_recovery_plan *plan = calloc(1, sizeof *plan);
    cpr_plan_shard *shards = calloc(request->num_shards, sizeof *shards);
    if (!plan || !shards) {
        free(plan);
        free(shards);
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a plan of %u shards",
                        request->num_shards);
    }
    plan->shards = shards;
    plan->n = request->num_shards;
    add_decision(plan, request);
    /* P6: plan over the parts of the timeline training is on. */
    cpr_plan_request live = *request;
    cpr_part_info *kept = NULL;
    size_t dropped = 0;
    size_t unbased = 0;
    if (request->abandoned_through && request->n_parts) {
        kept = malloc(request->n_parts * sizeof *kept);
        /* The shards with a FULL since the range, ascending (at most one per
         * part; not a table by shard id, which a caller's list could make
         * huge). */
        uint64_t *based = malloc(request->n_parts * sizeof *based);
        size_t n_based = 0;
        if (!kept || !based) {
            free(kept);
            free(based);
            cpr_recovery_plan_destroy(plan);
            return cpr_fail(CPR_NO_MEMORY, "out of memory planning over %zu parts",
                            request->n_parts);
        }
        live.n_parts = 0;
        for (size_t i = 0; i < request->n_parts; i++) { /* by checkpoint: P6 */
            const cpr_part_info *p = &request->parts[i];
            uint64_t c = p->checkpoint;
            if (c > request->abandoned_through && p->committed && p->kind == CPR_KIND_FULL)
                n_based = add_shard(based, n_based, p->shard);
            if (c > request->abandoned_after && c <= request->abandoned_through)
                dropped++;
            else if (c > request->abandoned_through && !has_shard(based, n_based, p->shard))
                unbased++;
            else
                kept[live.n_parts++] = *p;
        }
        free(based);
        live.parts = kept;
    }
    if (dropped)
        reason_add(plan, "; %zu parts of the abandoned timeline (checkpoints %llu-%llu) ignored",
                   dropped, (unsigned long long)request->abandoned_after + 1,
                   (unsigned long long)request->abandoned_through);
    if (unbased)
        reason_add(plan, "; %zu parts after it ignored too: their shard had no FULL part "
                   "since, so a restore of them would start from the abandoned timeline",
                   unbased);
    if (request->mode == CPR_RECOVERY_PARTIAL)
        plan_partial(plan, &live, dropped + unbased > 0);
    else
        plan_full(plan, &live);
    free(kept);
    *out = plan;
    return CPR_OK;
}

void cpr_recovery_plan_destroy(cpr_recovery_plan *plan)
{
    if (!plan)
        return;
    free(plan->shards);
    free(plan);
}

cpr_plan_action cpr_recovery_plan_action(const cpr_recovery_plan *plan) { return plan->action; }
unsigned cpr_recovery_plan_problems(const cpr_recovery_plan *plan) { return plan->problems; }
uint64_t cpr_recovery_plan_cut(const cpr_recovery_plan *plan) { return plan->cut; }
uint64_t cpr_recovery_plan_rewind_step(const cpr_recovery_plan *plan) { return plan->rewind_step; }
size_t cpr_recovery_plan_count(const cpr_recovery_plan *plan) { return plan->n; }
const char *cpr_recovery_plan_reason(const cpr_recovery_plan *plan) { return plan->reason; }

const cpr_plan_shard *cpr_recovery_plan_shard(const cpr_recovery_plan *plan, size_t i)
{
    return i < plan->n ? &plan->shards[i] : NULL;
}
