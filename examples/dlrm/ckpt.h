/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckpt.h - checkpointing, failure injection and recovery for the reference
 * DLRM trainer (cpr_dlrm; not an installed API). A dlrm_ckpt fills the
 * trainer's hooks (dlrm.h): after_step starts job-wide saves (every shard
 * writes its own part through the client library; the training thread only
 * selects and gathers rows into the client's staging buffer, a background
 * thread commits) and settles finished ones; before_step injects the
 * failures of a schedule (cpr/failure.h) and recovers, partially or fully,
 * through the recovery planner; the first before_step of a --resume run
 * restores the latest consistent cut. docs/dlrm.md describes the policies,
 * the kinds written, recovery and the log events.
 *
 * Ownership: the model, the schedule and the strings in the options are
 * borrowed and must outlive the dlrm_ckpt. Threading: the hooks run on the
 * training thread; the commit thread touches only the client's parts.
 */
#ifndef CPR_DLRM_CKPT_H
#define CPR_DLRM_CKPT_H

#include <stdint.h>

#include "cpr/client.h"
#include "cpr/recovery.h"
#include "cpr/failure.h"
#include "dlrm.h"

/* What each save writes (docs/dlrm.md, "Policies"). */
typedef enum dlrm_ckpt_policy {
    DLRM_CKPT_FULL = 0,      /* FULL parts at the full-recovery interval */
    DLRM_CKPT_DELTA = 1,     /* DELTA parts, a FULL every full_every saves */
    DLRM_CKPT_PARTIAL = 2,   /* vanilla CPR: FULL parts at the PLS-derived interval */
    DLRM_CKPT_MFU = 3,       /* PRIORITY parts: r of the rows, r times as often */
    DLRM_CKPT_SSU = 4,
    DLRM_CKPT_TOPK_NORM = 5,
    DLRM_CKPT_AUTO = 6       /* the online estimator chooses (MFU under partial) */
} dlrm_ckpt_policy;

typedef enum dlrm_recovery_choice {
    DLRM_RECOVER_PARTIAL = 0,
    DLRM_RECOVER_FULL = 1,
    DLRM_RECOVER_AUTO = 2     /* the estimator decides at each failure */
} dlrm_recovery_choice;

/* "full", "delta", "partial", "mfu", "ssu", "topk-norm", "auto"; -1 if unknown. */
int dlrm_ckpt_policy_parse(const char *name);
const char *dlrm_ckpt_policy_name(dlrm_ckpt_policy policy);
/* The CPR_TRACK_* bits a policy needs (counts always: exact PLS). */
unsigned dlrm_ckpt_policy_track(dlrm_ckpt_policy policy);

/* Called on the training thread right after a save's rows and blobs were
 * queued and before its commit starts (tests kill the daemon here). */
typedef void (*dlrm_ckpt_staged_fn)(void *ctx, uint64_t checkpoint);

/* Zero-initialise, then set; zero fields take the defaults in brackets. */
typedef struct dlrm_ckpt_options {
    const char *target;           /* grpc://... or local:///...; NULL: no saves */
    const char *job;              /* ["dlrm"] */
    dlrm_ckpt_policy policy;      /* [FULL] */
    double fraction;              /* prioritized budget r in (0, 1] [0.125] */
    double staging_mb;            /* host memory for staged saves, MiB; 0: two
                                     whole FULL saves. A save larger than what
                                     is free waits for the wire (stall) */
    const char *ckpt_cpus;        /* CPUs for the client's threads (cpr_client_options
                                     .thread_cpus); NULL: where the trainer runs */
    uint32_t codec;               /* cpr_codec of PRIORITY and DELTA parts' rows
                                     (cpr/codec.h) */
    uint32_t full_codec;          /* cpr_codec of FULL parts' rows (default f32) */
    int codec_auto;               /* --ckpt-codec auto: the estimator chooses `codec`
                                     at each save (docs/model.md, "The codec") */
    int ssu_rate_auto;            /* 1: set each table's SSU rate at every save
                                     from its accesses (see ssu_rate_for) */
    uint64_t interval_steps;      /* base (full-size) interval; 0: derived */
    uint32_t full_every;          /* DELTA / prioritized: a FULL part every this
                                     many saves [8 for delta; 0 = first only] */
    dlrm_recovery_choice recovery;/* [PARTIAL]; see dlrm_ckpt_default_recovery */
    double restart_s;             /* emulated restart cost per failure [0] */
    double target_pls;            /* [0.02] */
    double mtbf_steps;            /* for the derived interval; 0: none expected */
    uint64_t total_steps;         /* the run's length in steps (> 0) */
    const cpr_failure *failures;   /* the schedule, sorted; borrowed */
    size_t n_failures;
    int resume;                   /* 1: restore the latest cut before training */
    double timeout_s;             /* client deadlines [30] */
    uint64_t crash_at_step;       /* > 0: drain saves, then SIGKILL this process
                                     after that step (a real trainer fault) */
    int crash_mid_save;           /* with crash_at_step: SIGKILL with a save staged
                                     and not committed, instead of draining */
    int sync;                     /* 1: wait for each save's commit before training
                                     on (save points independent of storage speed;
                                     the wait counts as stall) */
    dlrm_ckpt_staged_fn staged;   /* may be NULL */
    void *staged_ctx;
} dlrm_ckpt_options;

/* The recovery a policy implies when --recovery is not given: full for
 * full and delta, auto for auto, partial otherwise. */
dlrm_recovery_choice dlrm_ckpt_default_recovery(dlrm_ckpt_policy policy);

typedef struct dlrm_ckpt dlrm_ckpt;

/*
 * Create the checkpointer of `model` (borrowed). Opens the client, and
 * refuses (CPR_ALREADY_EXISTS) a job that has parts already unless resuming.
 * Errors: CPR_INVALID_ARGUMENT (options), the client's errors, CPR_NO_MEMORY.
 */
cpr_status dlrm_ckpt_create(const dlrm_ckpt_options *opts, dlrm_model *model,
                            dlrm_ckpt **out);
/* Waits for a save in flight (bounded by the client's deadlines). NULL ok. */
void dlrm_ckpt_destroy(dlrm_ckpt *ck);

/* The trainer hooks of this checkpointer (ctx = ck). */
dlrm_hooks dlrm_ckpt_hooks(dlrm_ckpt *ck);

/* Counters so far. */
typedef struct dlrm_ckpt_stats {
    uint64_t saves_started, saves_committed, saves_failed;
    uint64_t last_committed;       /* checkpoint id of the newest committed save */
    uint64_t last_committed_step;
    uint64_t failures, recoveries;
    uint64_t lost_events, bytes_written;
    uint64_t interval_steps;       /* steps between saves now */
    double save_s, load_s, lost_s, restart_s;
    double background_s;          /* steps' time beyond the usual while a save was in
                                     flight (streaming, commits on the same cores) */
} dlrm_ckpt_stats;
void dlrm_ckpt_stats_get(const dlrm_ckpt *ck, dlrm_ckpt_stats *out);

#endif /* CPR_DLRM_CKPT_H */
