/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/recovery.h - deciding how a DLRM job recovers from a failure, after
 * CPR (Maeng et al., MLSys 2021). Three parts, all pure computation (no I/O):
 *
 *   the model      closed forms for the overhead of full recovery (every shard
 *                  rolls back to a consistent checkpoint) and of partial
 *                  recovery (only the failed shard restores; some updates are
 *                  lost: PLS, the portion of lost samples), their intervals
 *                  and the decision between them (docs/model.md derives them);
 *   the estimator  an online version of the model fed with measurements as
 *                  the job runs (save stalls, loads, restarts, failures, the
 *                  trackers' unsaved events), answering: recovery mode,
 *                  interval and policy of the next save;
 *   the planner    given the job's parts (cpr_store_list or a client list),
 *                  the failed shards and the decision, what each shard
 *                  restores and from which checkpoint, or why it cannot.
 *
 * Units: seconds everywhere, as doubles. Fractions are overheads divided by
 * the failure-free job length.
 *
 * Threading: the model and planner functions are pure and thread-safe. An
 * estimator is used by one thread at a time; distinct estimators are
 * independent. A plan is immutable once made and may be read from any number
 * of threads.
 *
 * Errors: cpr_status; cpr_errmsg() names the field to fix. Out-parameters
 * are written only on success; a failed call leaves its handle unchanged.
 */
#ifndef CPR_RECOVERY_H
#define CPR_RECOVERY_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/embedding.h"
#include "cpr/status.h"
#include "cpr/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the closed-form model ------------------------------------------------- */

typedef enum cpr_interval_formula {
    CPR_INTERVAL_YOUNG = 0, /* sqrt(2 o_save T_fail) (Young 1974) */
    CPR_INTERVAL_DALY = 1   /* Daly's higher-order estimate (Daly 2006) */
} cpr_interval_formula;

typedef enum cpr_recovery_mode {
    CPR_RECOVERY_FULL = 0,    /* every shard back to the latest consistent cut */
    CPR_RECOVERY_PARTIAL = 1  /* only failed shards restore; the rest go on */
} cpr_recovery_mode;

/* "full" / "partial"; "young" / "daly". */
const char *cpr_recovery_mode_name(cpr_recovery_mode mode);
const char *cpr_interval_formula_name(cpr_interval_formula formula);

/*
 * The model's inputs. Zero-initialise, then set; fields are only ever
 * appended. Every time is > 0 and finite, shards >= 1, target_pls in (0, 1).
 */
typedef struct cpr_model_params {
    double mtbf_s;         /* T_fail: mean time between failures of the job */
    uint32_t shards;       /* N: embedding shards (the unit that fails) */
    double save_s;         /* o_save: training stall of one full checkpoint */
    double load_s;         /* o_load: time to load a full checkpoint */
    double restart_s;      /* o_res: restart/reschedule time per failure */
    double job_s;          /* T_total: failure-free job length */
    double target_pls;     /* P: largest acceptable PLS */
    cpr_interval_formula formula; /* full recovery's interval [YOUNG] */
} cpr_model_params;

/*
 * Expected overhead of one strategy at one interval, in seconds over the
 * whole job and as fractions of job_s. overhead = save + load + lost +
 * restart. `pls` is the expected portion of updates lost (0 for full
 * recovery, which recomputes what it loses).
 */
typedef struct cpr_overhead {
    double interval_s;
    double overhead_s, save_s, load_s, lost_s, restart_s;
    double overhead_frac, save_frac, load_frac, lost_frac, restart_frac;
    double pls;
} cpr_overhead;

/* Both strategies at their intervals, and the decision. */
typedef struct cpr_model_plan {
    cpr_overhead full;        /* at T_full (Young or Daly) */
    cpr_overhead partial;     /* at T_part = min(2 P N T_fail, T_total) */
    cpr_recovery_mode decision; /* PARTIAL iff partial.overhead_s < full.overhead_s */
    double benefit_frac;      /* full.overhead_frac - partial.overhead_frac */
} cpr_model_plan;

/* CPR_OK if every input is valid, else CPR_INVALID_ARGUMENT naming the
 * field ("mtbf_s", "shards", ...). */
cpr_status cpr_model_check(const cpr_model_params *params);

/*
 * Full recovery at interval `interval_s` (> 0):
 *   O_full(T) = o_save T_total/T + (T_total/T_fail)(o_load + o_res + T/2).
 */
cpr_status cpr_model_full(const cpr_model_params *params, double interval_s,
                          cpr_overhead *out);

/*
 * Partial recovery at interval `interval_s` (> 0):
 *   O_part(T) = o_save T_total/T + (T_total/T_fail)(o_load/N + o_res),
 *   PLS(T)    = T / (2 N T_fail).
 */
cpr_status cpr_model_partial(const cpr_model_params *params, double interval_s,
                             cpr_overhead *out);

/* Full recovery's interval: Young sqrt(2 o_save T_fail), or Daly's
 * sqrt(2 o_save T_fail)(1 + sqrt(o_save/(2 T_fail))/3 + o_save/(18 T_fail))
 * - o_save when o_save < 2 T_fail, else T_fail. */
cpr_status cpr_model_interval_full(const cpr_model_params *params, double *interval_s);

/* Partial recovery's interval: min(2 P N T_fail, T_total), the largest that
 * meets the PLS target (O_part falls as T grows), capped at the job. */
cpr_status cpr_model_interval_partial(const cpr_model_params *params, double *interval_s);

/* Both strategies at their intervals and the decision (partial only when
 * strictly cheaper; equal overheads choose full, which loses nothing). */
cpr_status cpr_model_plan_compute(const cpr_model_params *params, cpr_model_plan *out);

/* ---- the online estimator -------------------------------------------------- */

typedef struct cpr_estimator cpr_estimator;

/*
 * Zero-initialise, then set; zero fields take the defaults in brackets.
 * Fields are only ever appended. The priors answer until enough is measured.
 */
typedef struct cpr_estimator_config {
    uint32_t shards;            /* N >= 1 */
    double job_s;               /* failure-free job length, > 0 */
    double target_pls;          /* P in (0, 1) */
    double prior_mtbf_s;        /* > 0 */
    double prior_save_s;        /* stall of one full checkpoint, > 0 */
    double prior_load_s;        /* load of a full checkpoint (all shards), > 0 */
    double prior_restart_s;     /* > 0 */
    cpr_interval_formula formula; /* [YOUNG] */
    cpr_policy policy;          /* saving policy under partial recovery: FULL
                                   (vanilla CPR), MFU, SSU or TOPK_NORM [FULL] */
    double fraction;            /* rows a prioritized save takes, (0, 1] [0.125] */
    double smoothing;           /* EWMA weight of a new sample, (0, 1] [0.25] */
    uint32_t min_samples;       /* samples before a measurement replaces its prior [3] */
    double prior_failures;      /* weight of prior_mtbf_s, in failures, > 0 [1] */
    double prior_loss_ratio;    /* the policy's PLS relative to vanilla's at the
                                   same interval before it is measured, > 0 [1] */
    uint64_t full_bytes;        /* bytes of a full checkpoint; 0: learnt from FULL
                                   saves. Scales prioritized saves' stalls. */
} cpr_estimator_config;

/* Create an estimator; *out owns it. CPR_INVALID_ARGUMENT names a bad
 * field; CPR_NO_MEMORY. */
cpr_status cpr_estimator_create(const cpr_estimator_config *config, cpr_estimator **out);
/* NULL is a no-op. */
void cpr_estimator_destroy(cpr_estimator *est);

/*
 * Measurements. `now_s` is the job's time: seconds since it started,
 * non-decreasing across calls (an earlier time is CPR_INVALID_ARGUMENT; the
 * MTBF estimate counts time from 0). Each returns CPR_INVALID_ARGUMENT for a
 * negative, NaN or infinite value, and then records nothing.
 */

/* A checkpoint of the whole job (all shards) under `policy`: its training
 * stall and the bytes it wrote. FULL saves measure o_save directly; other
 * policies' stalls are scaled by full_bytes / bytes. */
cpr_status cpr_estimator_saved(cpr_estimator *est, double now_s, cpr_policy policy,
                               double stall_s, uint64_t bytes);
/* A load of `shards_loaded` shards (1..N) that took load_s: o_load is
 * estimated as load_s * N / shards_loaded. */
cpr_status cpr_estimator_loaded(cpr_estimator *est, double load_s, uint32_t shards_loaded);
/* The restart/reschedule time of one failure. */
cpr_status cpr_estimator_restarted(cpr_estimator *est, double restart_s);
/* A failure at now_s. */
cpr_status cpr_estimator_failed(cpr_estimator *est, double now_s);
/* The trackers' totals over all shards at now_s: update events so far
 * (non-decreasing) and unsaved events (cpr_emb_stats). Call it often (each
 * step, or just before and after each save): the estimator integrates
 * unsaved events over time with the trapezoid rule. */
cpr_status cpr_estimator_tracked(cpr_estimator *est, double now_s, uint64_t update_events,
                                 uint64_t unsaved_events);

/* Bits of cpr_estimate.measured: inputs taken from measurements, not priors. */
enum {
    CPR_MEASURED_MTBF = 1,       /* at least one failure seen */
    CPR_MEASURED_SAVE = 2,
    CPR_MEASURED_LOAD = 4,
    CPR_MEASURED_RESTART = 8,
    CPR_MEASURED_LOSS_RATIO = 16 /* the partial policy's PLS measured */
};

/* The estimator's answer and every number behind it. */
typedef struct cpr_estimate {
    cpr_recovery_mode mode;    /* how to recover from the next failure */
    cpr_policy policy;         /* policy of the next save */
    double interval_s;         /* time between saves of `policy` */
    double fraction;           /* rows per shard that save takes (1 for FULL) */
    double base_interval_s;    /* full-size-equivalent interval: interval_s / fraction */
    double pls;                /* predicted PLS of partial recovery with the policy */
    double loss_ratio;         /* that policy's PLS over vanilla's at equal interval */
    double mtbf_s, save_s, load_s, restart_s; /* the inputs used */
    double events_per_s;       /* update events per second (0 until measured) */
    uint64_t failures;         /* failures seen */
    unsigned measured;         /* CPR_MEASURED_* */
    cpr_overhead full;         /* full recovery at its (bounded) interval */
    cpr_overhead partial;      /* partial recovery with the policy at its interval */
    double benefit_frac;       /* full.overhead_frac - partial.overhead_frac */
} cpr_estimate;

/*
 * The decision for the next save from what is known now. Intervals are
 * bounded to [o_save, job_s] (base intervals; a prioritized save runs every
 * fraction x base). Never fails for a valid estimator (CPR_INVALID_ARGUMENT
 * only for NULL arguments).
 */
cpr_status cpr_estimator_decide(const cpr_estimator *est, cpr_estimate *out);

/* ---- the recovery planner -------------------------------------------------- */

typedef enum cpr_plan_action {
    CPR_PLAN_PARTIAL = 1,              /* failed shards restore; the others go on */
    CPR_PLAN_FULL = 2,                 /* every shard restores at the cut, rewind */
    CPR_PLAN_RESTART_FROM_SCRATCH = 3  /* nothing usable: every shard starts over */
} cpr_plan_action;

/* Where a shard's embedding rows come from. */
typedef enum cpr_shard_source {
    CPR_SOURCE_KEEP = 0,   /* a survivor of a partial recovery: untouched */
    CPR_SOURCE_STORE = 1,  /* restore the shard's rows as of `as_of` */
    CPR_SOURCE_INIT = 2    /* nothing committed: re-initialise the rows */
} cpr_shard_source;

/* Where a shard's dense (MLP) state comes from. */
typedef enum cpr_dense_source {
    CPR_DENSE_KEEP = 0,    /* the survivor's own live state */
    CPR_DENSE_REPLICA = 1, /* a surviving replica's live state */
    CPR_DENSE_BLOB = 2,    /* the blobs of part (dense_shard, dense_checkpoint) */
    CPR_DENSE_INIT = 3     /* no replica, no committed blob: re-initialise */
} cpr_dense_source;

const char *cpr_plan_action_name(cpr_plan_action action);       /* "partial", ... */
const char *cpr_shard_source_name(cpr_shard_source source);     /* "keep", ... */
const char *cpr_dense_source_name(cpr_dense_source source);     /* "keep", ... */

/* Bits of cpr_recovery_plan_problems(): why a plan is not the one asked for. */
enum {
    CPR_PLAN_NO_CUT = 1,          /* FULL asked, no consistent cut: restart from scratch */
    CPR_PLAN_SHARD_UNSAVED = 2,   /* a failed shard has no committed part (rows INIT,
                                     or restart from scratch if asked) */
    CPR_PLAN_DENSE_UNSAVED = 4,   /* no replica and no committed dense blob part */
    CPR_PLAN_RESHARDED = 8        /* the cut was written with another shard count:
                                     restores must filter rows by the new sharding */
};

/* One shard's part of a plan. Fields are only ever appended. */
typedef struct cpr_plan_shard {
    uint32_t shard;
    cpr_shard_source source;
    uint64_t as_of;           /* STORE: restore as of this checkpoint id */
    cpr_kind kind;            /* STORE: kind of the shard's part at as_of (PARTIAL),
                                 or of the cut's part (FULL) */
    uint64_t step;            /* STORE: training step of that part; else 0 */
    cpr_dense_source dense;
    uint64_t dense_checkpoint; /* BLOB: the part holding the dense blobs */
    uint32_t dense_shard;
} cpr_plan_shard;

/* What to plan for. Zero-initialise, then set; fields are only appended. */
typedef struct cpr_plan_request {
    const cpr_part_info *parts; /* the job's parts, sorted by (checkpoint, shard)
                                   as cpr_store_list returns them; borrowed */
    size_t n_parts;
    uint32_t num_shards;        /* shards of the job now, >= 1 */
    const uint32_t *failed;     /* failed shards, distinct, < num_shards; borrowed */
    size_t n_failed;            /* >= 1 for PARTIAL; may be 0 for FULL (a resume) */
    cpr_recovery_mode mode;     /* what the estimator decided */
    const cpr_estimate *estimate; /* its numbers, for the plan's reason; may be NULL */
    int dense_replica;          /* 1: a surviving replica holds the dense state */
    uint32_t dense_shard;       /* the shard whose parts carry the dense blobs [0] */
    int restart_if_unsaved;     /* 1: a failed shard with nothing committed makes
                                   the plan RESTART_FROM_SCRATCH instead of INIT */
} cpr_plan_request;

typedef struct cpr_recovery_plan cpr_recovery_plan;

/*
 * Plan a recovery; *out owns the plan (cpr_recovery_plan_destroy). Pure:
 * reads only the request. Always produces a plan the caller can act on when
 * the request is valid, whatever the parts: problems are reported by
 * cpr_recovery_plan_problems() and explained by cpr_recovery_plan_reason().
 *   PARTIAL: each failed shard restores as of its newest committed part of
 *     any kind (FULL, DELTA or PRIORITY; "as of C" gives every row's newest
 *     version <= C); survivors keep their state. Dense state: replica if
 *     dense_replica, else the blobs of dense_shard's newest committed part.
 *   FULL: every shard restores as of the latest consistent cut C (every
 *     shard s < num_shards of the cut has a committed consistent part at
 *     exactly C, as in cpr/store.h), dense state from the blobs of
 *     (dense_shard, C), and training rewinds to the step of the cut's parts.
 *     No cut: RESTART_FROM_SCRATCH with CPR_PLAN_NO_CUT.
 * Errors: CPR_INVALID_ARGUMENT (parts not sorted or duplicated, a part with
 * shard >= its num_shards or an unknown kind, a failed shard out of range or
 * repeated, PARTIAL with no failed shard, bad mode), CPR_NO_MEMORY.
 */
cpr_status cpr_recovery_plan_make(const cpr_plan_request *request, cpr_recovery_plan **out);
/* NULL is a no-op. */
void cpr_recovery_plan_destroy(cpr_recovery_plan *plan);

cpr_plan_action cpr_recovery_plan_action(const cpr_recovery_plan *plan);
unsigned cpr_recovery_plan_problems(const cpr_recovery_plan *plan); /* CPR_PLAN_* bits */
/* FULL: the consistent cut and the step to rewind to; otherwise 0. */
uint64_t cpr_recovery_plan_cut(const cpr_recovery_plan *plan);
uint64_t cpr_recovery_plan_rewind_step(const cpr_recovery_plan *plan);
/* Entries, one per shard 0..num_shards-1 in order; the pointer lives as
 * long as the plan. i >= count gives NULL. */
size_t cpr_recovery_plan_count(const cpr_recovery_plan *plan);
const cpr_plan_shard *cpr_recovery_plan_shard(const cpr_recovery_plan *plan, size_t i);
/* Why: the decision with the estimator's numbers and any problem, for logs
 * and for recording with the plan. Lives as long as the plan. */
const char *cpr_recovery_plan_reason(const cpr_recovery_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* CPR_RECOVERY_H */
