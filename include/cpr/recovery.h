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
 * and two that act through the client library (cpr/client.h; link
 * cpr_recovery_exec):
 *
 *   the record     a plan encoded and recorded in ckptd under the job by
 *                  compare-and-set, so every process of a job acts on the
 *                  same decision (cpr_recovery_decide_and_record);
 *   the executor   a plan carried out into embedding tables, with the rows,
 *                  bytes and time it took (cpr_recovery_execute).
 *
 * Units: seconds everywhere, as doubles. Fractions are overheads divided by
 * the failure-free job length.
 *
 * Threading: the model, planner and codec functions are pure and
 * thread-safe. An estimator is used by one thread at a time; distinct
 * estimators are independent. A plan is immutable once made and may be read
 * from any number of threads. The executor uses the caller's tables on the
 * calling thread (cpr/embedding.h: one thread per table at a time).
 *
 * Errors: cpr_status; cpr_errmsg() names the field to fix. Out-parameters
 * are written only on success; a failed call leaves its handle unchanged.
 */
#ifndef CPR_RECOVERY_H
#define CPR_RECOVERY_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/block.h"
#include "cpr/export.h"
#include "cpr/client.h"
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
CPR_API const char *cpr_recovery_mode_name(cpr_recovery_mode mode);
CPR_API const char *cpr_interval_formula_name(cpr_interval_formula formula);

/*
 * The model's inputs. Zero-initialise, then set; fields are only ever
 * appended. Every time is > 0 and finite (the background's >= 0), shards
 * >= 1, target_pls in (0, 1).
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
    double background_s;   /* b: background time of one full save on the trainer's
                              host, from the end of its stall until it has
                              landed, >= 0 [0: none]. A prioritized save of r
                              of the rows takes r of it. */
    double background_cost_s; /* c: training time one full save's background
                              takes away, >= 0 [0]; r of it for a prioritized save */
    double max_background_share; /* beta: the share of the time between saves a
                              save's background may take, in (0, 1]
                              [0 means CPR_DEFAULT_BACKGROUND_SHARE] */
} cpr_model_params;

/* The default max_background_share, of the model and of the estimator. */
#define CPR_DEFAULT_BACKGROUND_SHARE 0.25

/*
 * Expected overhead of one strategy at one interval, in seconds over the
 * whole job and as fractions of job_s. overhead = save + load + lost +
 * restart + background, where background is the training time the saves'
 * background work takes away (c per save; 0 without it). `pls` is the
 * expected portion of updates lost (0 for full recovery, which recomputes
 * what it loses).
 */
typedef struct cpr_overhead {
    double interval_s;
    double overhead_s, save_s, load_s, lost_s, restart_s;
    double overhead_frac, save_frac, load_frac, lost_frac, restart_frac;
    double pls;
    double background_s, background_frac;
} cpr_overhead;

/* Both strategies at their intervals, and the decision. */
typedef struct cpr_model_plan {
    cpr_overhead full;        /* at T_full (Young or Daly, background floor) */
    cpr_overhead partial;     /* at T_part = min(2 P N T_fail, T_total), floor */
    cpr_recovery_mode decision; /* PARTIAL iff partial.overhead_s < full.overhead_s */
    double benefit_frac;      /* full.overhead_frac - partial.overhead_frac */
} cpr_model_plan;

/* CPR_OK if every input is valid, else CPR_INVALID_ARGUMENT naming the
 * field ("mtbf_s", "shards", ...). */
CPR_API cpr_status cpr_model_check(const cpr_model_params *params);

/*
 * Full recovery at interval `interval_s` (> 0):
 *   O_full(T) = (o_save + c) T_total/T + (T_total/T_fail)(o_load + o_res + T/2).
 */
CPR_API cpr_status cpr_model_full(const cpr_model_params *params, double interval_s,
                          cpr_overhead *out);

/*
 * Partial recovery at interval `interval_s` (> 0):
 *   O_part(T) = (o_save + c) T_total/T + (T_total/T_fail)(o_load/N + o_res),
 *   PLS(T)    = T / (2 N T_fail).
 * A prioritized policy saving r of the rows every r T costs the same.
 */
CPR_API cpr_status cpr_model_partial(const cpr_model_params *params, double interval_s,
                             cpr_overhead *out);

/*
 * The background floor (docs/model.md, "The background of a save"): a
 * save's background may take at most beta of the time between saves, so a
 * base interval is at least b / beta (r b / (beta r T) for a prioritized
 * save every r T: the same floor). *out = max(interval_s, min(b / beta,
 * T_total)): interval_s when b is 0, never raised beyond the job.
 */
CPR_API cpr_status cpr_model_background_floor(const cpr_model_params *params, double interval_s,
                                              double *out);

/* Full recovery's interval: Young sqrt(2 o_save T_fail), or Daly's
 * sqrt(2 o_save T_fail)(1 + sqrt(o_save/(2 T_fail))/3 + o_save/(18 T_fail))
 * - o_save when o_save < 2 T_fail, else T_fail; raised to the background
 * floor. */
CPR_API cpr_status cpr_model_interval_full(const cpr_model_params *params, double *interval_s);

/* Partial recovery's interval: min(2 P N T_fail, T_total), the largest that
 * meets the PLS target (O_part falls as T grows), capped at the job; raised
 * to the background floor (its PLS then misses the target). */
CPR_API cpr_status cpr_model_interval_partial(const cpr_model_params *params, double *interval_s);

/* Both strategies at their intervals and the decision (partial only when
 * strictly cheaper; equal overheads choose full, which loses nothing). */
CPR_API cpr_status cpr_model_plan_compute(const cpr_model_params *params, cpr_model_plan *out);

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
    const char *time_unit;      /* what every time above and below counts, for
                                   messages only; at most 7 bytes, copied ["s"]:
                                   a trainer may count in steps ("steps") */
    double max_background_share; /* a save's background work (from the end of its
                                   stall until it has landed) may take at most
                                   this share of the time between saves, in
                                   (0, 1] [0.25]: the interval of a save is at
                                   least its measured background time over it
                                   (docs/model.md, "The background of a save") */
    int choose_codec;           /* 1: choose the codec of prioritized parts by the
                                   expected restores of a row from them (below);
                                   0: f32 always [0] */
    double int4_max_restores;   /* R4: the quantized restores per row int4 is
                                   trusted with, > 0 [CPR_INT4_MAX_RESTORES];
                                   int8, bf16 and f16 get R4 times their squared
                                   step ratio (docs/model.md, "The codec") */
} cpr_estimator_config;

/* The default int4_max_restores: the most restores of every row from int4
 * blocks at which no measured run lost over 0.001 of AUC (docs/model.md). */
#define CPR_INT4_MAX_RESTORES 10.0

/* Create an estimator; *out owns it. CPR_INVALID_ARGUMENT names a bad
 * field: job_s and the priors of o_save, o_load and o_res above 1e100 among
 * them, and the other positive values above 1e300 (an MTBF may stand for
 * "never"), so that every product the model forms stays finite;
 * CPR_NO_MEMORY. */
CPR_API cpr_status cpr_estimator_create(const cpr_estimator_config *config, cpr_estimator **out);
/* NULL is a no-op. */
CPR_API void cpr_estimator_destroy(cpr_estimator *est);

/*
 * Measurements. `now_s` is the job's time since it started, in the
 * config's time_unit (seconds unless the caller counts otherwise),
 * non-decreasing across calls (an earlier time is CPR_INVALID_ARGUMENT; the
 * MTBF estimate counts time from 0). Each returns CPR_INVALID_ARGUMENT for a
 * negative, NaN or infinite value or one above 1e12, and then records
 * nothing.
 */

/* A checkpoint of the whole job (all shards) under `policy`: its training
 * stall and the bytes it wrote. FULL saves measure o_save directly; other
 * policies' stalls are scaled by full_bytes / bytes. A stall of 0 (below the
 * caller's clock) is no sample of o_save (the save still counts as one). */
CPR_API cpr_status cpr_estimator_saved(cpr_estimator *est, double now_s, cpr_policy policy,
                               double stall_s, uint64_t bytes);
/* The background of a settled save under `policy`: background_s from the
 * end of its stall until it landed (committed or failed), and cost_s, the
 * training time that work cost (how much longer the steps taken meanwhile
 * were than steps taken with no save in flight; 0 when none). Both >= 0. */
CPR_API cpr_status cpr_estimator_background(cpr_estimator *est, cpr_policy policy,
                                            double background_s, double cost_s);
/* A load of `shards_loaded` shards (1..N) that took load_s: o_load is
 * estimated as load_s * N / shards_loaded. */
CPR_API cpr_status cpr_estimator_loaded(cpr_estimator *est, double load_s, uint32_t shards_loaded);
/* The restart/reschedule time of one failure. */
CPR_API cpr_status cpr_estimator_restarted(cpr_estimator *est, double restart_s);
/* A failure at now_s. */
CPR_API cpr_status cpr_estimator_failed(cpr_estimator *est, double now_s);
/* The trackers' totals over all shards at now_s: update events so far
 * (non-decreasing) and unsaved events (cpr_emb_stats). Call it often (each
 * step, or just before and after each save): the estimator integrates
 * unsaved events over time with the trapezoid rule. */
CPR_API cpr_status cpr_estimator_tracked(cpr_estimator *est, double now_s, uint64_t update_events,
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
    char time_unit[8];         /* the config's time_unit ("s" by default) */
    double background_s;       /* the policy's measured background time per save
                                  (0 until measured) */
    double background_cost_s;  /* the training time that background costs per save,
                                  counted in partial.background_s (full's likewise) */
    cpr_codec codec;           /* rows of the next save's non-FULL parts (f32 unless
                                  config.choose_codec; FULL parts stay f32) */
    double quantized_restores; /* restores of a row expected from those parts over
                                  the job: (job_s / mtbf_s) / N under partial
                                  recovery, 0 otherwise */
} cpr_estimate;

/*
 * The decision for the next save from what is known now. Intervals are
 * bounded to [o_save, job_s] (base intervals; a prioritized save runs every
 * fraction x base). The mode the saves follow (the last save's: prioritized
 * is partial, FULL or DELTA full) changes only for one whose overhead is 5%
 * lower (hysteresis: noise near the boundary does not alternate FULL and
 * prioritized saves). Never fails for a valid estimator (CPR_INVALID_ARGUMENT
 * only for NULL arguments).
 */
CPR_API cpr_status cpr_estimator_decide(const cpr_estimator *est, cpr_estimate *out);

/*
 * How to recover a failure now, from the saves made: partial after a
 * prioritized save (the newest consistent cut is older than the rows those
 * saves hold: a full recovery would rewind past every one of them, which the
 * model's steady state does not see), else cpr_estimator_decide's mode. Ask
 * before cpr_estimator_failed records the failure: a failure may move the
 * decision for the saves to come (the next save then follows it), not the
 * recovery from the saves already made.
 */
CPR_API cpr_status cpr_estimator_recovery_mode(const cpr_estimator *est,
                                               cpr_recovery_mode *mode);

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

CPR_API const char *cpr_plan_action_name(cpr_plan_action action);       /* "partial", ... */
CPR_API const char *cpr_shard_source_name(cpr_shard_source source);     /* "keep", ... */
CPR_API const char *cpr_dense_source_name(cpr_dense_source source);     /* "keep", ... */

/* Bits of cpr_recovery_plan_problems(): why a plan is not the one asked for. */
enum {
    CPR_PLAN_NO_CUT = 1,          /* FULL asked, no consistent cut: restart from scratch */
    CPR_PLAN_SHARD_UNSAVED = 2,   /* a failed shard has no committed part (rows INIT,
                                     or restart from scratch if asked) */
    CPR_PLAN_DENSE_UNSAVED = 4,   /* no replica and no committed dense blob part */
    CPR_PLAN_RESHARDED = 8        /* the cut (FULL), or a failed shard's rows
                                     (PARTIAL), were written with another shard
                                     count: restores read every shard's parts and
                                     filter rows by the new sharding */
};

/* One shard's part of a plan. Fields are only ever appended. */
typedef struct cpr_plan_shard {
    uint32_t shard;
    cpr_shard_source source;
    uint64_t as_of;           /* STORE: restore as of this checkpoint id */
    cpr_kind kind;            /* STORE: kind of the shard's part at as_of (PARTIAL),
                                 or of the cut's part (FULL) */
    uint64_t step;            /* STORE: training step of that part (FULL
                                 plans: the cut's rewind step, the same in
                                 every entry); else 0 */
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
    uint64_t abandoned_after;   /* parts with abandoned_after < checkpoint <=      */
    uint64_t abandoned_through; /* abandoned_through are ignored: written after the
                                   cut a FULL recovery rewound to, on the timeline
                                   training then left. A caller that recovered to
                                   cut C with ids up to M used gives (C, M) until
                                   every shard has saved again. [0, 0: none] */
} cpr_plan_request;

typedef struct cpr_recovery_plan cpr_recovery_plan;

/*
 * Plan a recovery; *out owns the plan (cpr_recovery_plan_destroy). Pure:
 * reads only the request. Always produces a plan the caller can act on when
 * the request is valid, whatever the parts: problems are reported by
 * cpr_recovery_plan_problems() and explained by cpr_recovery_plan_reason().
 *   PARTIAL: each failed shard restores as of its newest committed part of
 *     any kind (FULL, DELTA or PRIORITY; "as of C" gives every row's newest
 *     version <= C); survivors keep their state. A failed shard with no
 *     FULL part in the job's present sharding newer than every part of
 *     another sharding (none since the job last changed its sharding),
 *     when parts of another sharding exist, restores as of the newest
 *     committed part of any
 *     shard, from every shard's parts, its rows selected by the present
 *     sharding (CPR_PLAN_RESHARDED). Dense state: replica if
 *     dense_replica, else the blobs of dense_shard's newest committed part.
 *   FULL: every shard restores as of the latest consistent cut C (every
 *     shard s < num_shards of the cut has a committed consistent part at
 *     exactly C, as in cpr/store.h), dense state from the blobs of
 *     (dense_shard, C), and training rewinds to the step of the cut's parts.
 *     No cut: RESTART_FROM_SCRATCH with CPR_PLAN_NO_CUT.
 *   Abandoned (abandoned_after, abandoned_through]: those parts do not
 *     exist for the plan, nor do a shard's later parts before its first
 *     FULL after the range (restored "as of" them, the shard would start
 *     from an abandoned FULL). So every shard's first save after a rewind
 *     should be FULL, as cpr-dlrm and cpr.torch make it.
 * Errors: CPR_INVALID_ARGUMENT (parts not sorted or duplicated, a part with
 * shard >= its num_shards, checkpoint 0 or an unknown kind, a failed shard
 * out of range or repeated, PARTIAL with no failed shard, bad mode,
 * dense_shard >= num_shards, abandoned_through not above abandoned_after
 * when not 0), CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_recovery_plan_make(const cpr_plan_request *request, cpr_recovery_plan **out);
/* NULL is a no-op. */
CPR_API void cpr_recovery_plan_destroy(cpr_recovery_plan *plan);

CPR_API cpr_plan_action cpr_recovery_plan_action(const cpr_recovery_plan *plan);
CPR_API unsigned cpr_recovery_plan_problems(const cpr_recovery_plan *plan); /* CPR_PLAN_* bits */
/* FULL: the consistent cut and the step to rewind to; otherwise 0. */
CPR_API uint64_t cpr_recovery_plan_cut(const cpr_recovery_plan *plan);
CPR_API uint64_t cpr_recovery_plan_rewind_step(const cpr_recovery_plan *plan);
/* Entries, one per shard 0..num_shards-1 in order; the pointer lives as
 * long as the plan. i >= count gives NULL. */
CPR_API size_t cpr_recovery_plan_count(const cpr_recovery_plan *plan);
CPR_API const cpr_plan_shard *cpr_recovery_plan_shard(const cpr_recovery_plan *plan, size_t i);
/* Why: the decision with the estimator's numbers and any problem, for logs
 * and for recording with the plan. Lives as long as the plan. */
CPR_API const char *cpr_recovery_plan_reason(const cpr_recovery_plan *plan);

/* ---- recording the decision (the plan's bytes in ckptd) -------------------- */

#define CPR_PLAN_ENCODING 1 /* version of cpr_recovery_plan_encode's output */

/*
 * A plan as the bytes of a recovery record: one line of versioned JSON
 * (docs/model.md gives the format), every field of the plan, reason
 * included. *buf is malloc'd (free()); *len bytes, not NUL-terminated.
 * Errors: CPR_INVALID_ARGUMENT (an id or step of 2^53 or more, which JSON
 * numbers cannot carry exactly; more than 2^20 shards), CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_recovery_plan_encode(const cpr_recovery_plan *plan, void **buf, size_t *len);

/*
 * The inverse: *out owns a plan equal, field by field, to the one encoded.
 * Nothing is trusted: CPR_INVALID_ARGUMENT for bytes that are not a plan
 * (empty, not JSON, a field missing or out of range, entries out of order:
 * the message says which), CPR_FAILED_PRECONDITION for a plan of a newer
 * encoding version than this library reads, CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_recovery_plan_decode(const void *buf, size_t len, cpr_recovery_plan **out);

/*
 * Decide, plan and record, so that every process of a job acts on the same
 * plan: list the job's parts through `client` (a job without parts plans
 * with an empty list), make the plan from `request` (its num_shards,
 * failed shards, dense_replica, dense_shard and restart_if_unsaved; its
 * parts are ignored) with the estimator's decision (the mode of
 * cpr_estimator_recovery_mode, the estimate of cpr_estimator_decide;
 * `estimator` NULL: request->mode and request->estimate), encode it and
 * record it with cpr_client_recovery_put(expected_generation). If another
 * process recorded first, its plan is read back and decoded instead, when
 * it recovers every shard of request->failed (a full plan, or a partial one
 * that restores or re-initialises them; a resume needs a full one);
 * otherwise the request is planned again and recorded at the newest
 * generation, so that a different failure reported at the same time, or by
 * a process behind the record, is never left out of every plan (after 16
 * such rounds CPR_UNAVAILABLE: call again). On
 * CPR_OK *out owns the plan to act on (the recorded one, whoever wrote it),
 * *generation is its generation, and *won (may be NULL) is 1 if this call's
 * plan was recorded, 0 if another's was. `expected_generation` is the
 * generation this process last acted on (0: none); a record already beyond
 * it makes this process act on the newest record without recording.
 * Errors: the planner's (CPR_INVALID_ARGUMENT), the client's
 * (CPR_UNAVAILABLE when ckptd cannot be reached; nothing was recorded unless
 * the message says the outcome is unknown), a recorded plan that does not
 * decode (CPR_INVALID_ARGUMENT, CPR_FAILED_PRECONDITION).
 */
CPR_API cpr_status cpr_recovery_decide_and_record(cpr_client *client, const char *job,
                                          const cpr_estimator *estimator,
                                          const cpr_plan_request *request,
                                          uint64_t expected_generation, cpr_recovery_plan **out,
                                          uint64_t *generation, int *won);

/*
 * What a trainer calls at a step boundary: the job's recorded plan.
 * *generation gets the record's generation; *out the decoded plan, or NULL
 * when there is no record (generation 0). A trainer that has acted on
 * generation g acts again when this returns a larger one. Errors: the
 * client's, and those of cpr_recovery_plan_decode.
 */
CPR_API cpr_status cpr_recovery_read_recorded(cpr_client *client, const char *job,
                                      uint64_t *generation, cpr_recovery_plan **out);

/* ---- the executor ------------------------------------------------------------ */

/* One embedding table of the job: its id in the checkpoints
 * (cpr_table_schema.table) and the caller's table, which the executor writes
 * with cpr_emb_apply. Every table of the job must be given. */
typedef struct cpr_exec_table {
    uint32_t table;
    cpr_emb *emb;           /* borrowed for the call */
} cpr_exec_table;

/* Zero-initialise, then set; fields are only ever appended. */
typedef struct cpr_exec_options {
    const char *dense_blob; /* name of the dense-state blob to read when the plan's
                               dense source is BLOB (into the report); NULL: read
                               nothing, the report names the part to read */
    size_t batch_rows;      /* rows per restored batch [store default] */
} cpr_exec_options;

/* What one shard's restore did. */
typedef struct cpr_exec_shard {
    uint32_t shard;
    cpr_shard_source source;  /* the plan's: only STORE shards restore rows */
    uint64_t as_of;           /* STORE: the checkpoint id restored */
    uint64_t rows;            /* rows written into the tables */
    uint64_t bytes;           /* their ids, values and state, in bytes */
    uint64_t rows_skipped;    /* rows delivered but owned by another shard (see
                                 cpr_recovery_execute), not written */
    double seconds;           /* wall time of the shard's restore */
} cpr_exec_shard;

/* The executor's report; release with cpr_exec_report_release. */
typedef struct cpr_exec_report {
    cpr_plan_action action;
    uint64_t rewind_step;     /* FULL: the step training rewinds to; else 0 */
    uint64_t rows, bytes, rows_skipped; /* over all shards */
    double seconds;           /* the whole call, dense blob included */
    size_t n_shards;
    cpr_exec_shard *shards;   /* n_shards entries, shard i at index i */
    cpr_dense_source dense;   /* where the dense state comes from (KEEP when no
                                 shard restores) */
    uint32_t dense_shard;     /* BLOB: the part holding the dense blob: */
    uint64_t dense_checkpoint;/*   (job, dense_shard, dense_checkpoint) */
    void *dense_data;         /* BLOB and options.dense_blob set: the blob's bytes */
    size_t dense_len;         /*   (malloc'd, owned by the report); else NULL, 0 */
} cpr_exec_report;

/*
 * Carry out `plan` for `job` through `client` into `tables`:
 *   STORE shards (PARTIAL: the failed shards; FULL: every shard) get their
 *     rows of every table as of the entry's as_of, written with
 *     cpr_emb_apply (values and optimizer state; the rows' trackers are
 *     cleared). A shard's rows are selected by each table's own sharding
 *     (cpr_emb_shard_of): row ranges for CPR_SHARD_RANGE, row % N for
 *     CPR_SHARD_MODULO, asked of the node holding the shard (all nodes
 *     when the plan says CPR_PLAN_RESHARDED). When the tables' shardings
 *     differ, one query cannot select exactly, and delivered rows another
 *     shard owns are skipped (counted in rows_skipped), never written.
 *     Rows never committed as of as_of (partial recovery from a PRIORITY
 *     part with no FULL before it, say) are not touched: they keep
 *     whatever the caller put there (zeros after cpr_emb_wipe_shard).
 *   KEEP and INIT shards are not touched: INIT means nothing usable was
 *     committed, and initialising rows is the caller's (so is restarting
 *     from scratch, RESTART_FROM_SCRATCH, where every shard is INIT).
 *   Dense state: the report says where it comes from; for BLOB with
 *     options->dense_blob set, that blob of part (job, dense_shard,
 *     dense_checkpoint) is read into report->dense_data.
 * Every table's num_shards must be the plan's shard count. `opts` may be
 * NULL. On CPR_OK *out is filled (release it). Errors (nothing is reported,
 * and the STORE shards may be partly restored: fix the cause and run the
 * plan again, which rewrites the same rows):
 *   CPR_INVALID_ARGUMENT: a table NULL or given twice, a table's num_shards
 *     differs from the plan's; restored rows of a table the caller did not
 *     give (the message names the table); a table whose dim or state_dim
 *     differs from the stored rows';
 *   the client's: CPR_NOT_FOUND (the job or the part is gone),
 *     CPR_FAILED_PRECONDITION (as_of below the retention floor),
 *     CPR_CORRUPT, CPR_UNAVAILABLE, CPR_TIMEOUT; CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_recovery_execute(cpr_client *client, const char *job,
                                const cpr_recovery_plan *plan, const cpr_exec_table *tables,
                                size_t n_tables, const cpr_exec_options *opts,
                                cpr_exec_report *out);

/* Free what a report owns (shards, dense_data) and zero it. NULL is a no-op. */
CPR_API void cpr_exec_report_release(cpr_exec_report *report);

#ifdef __cplusplus
}
#endif
#endif /* CPR_RECOVERY_H */
