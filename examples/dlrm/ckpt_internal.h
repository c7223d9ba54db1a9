/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dlrm_ckpt object, shared by ckpt.c (options, saving, the commit
 * thread, the summary) and recover.c (failure injection, recovery, resume).
 *
 * Invariants:
 *  I1. At most one job-wide save is in flight (`fl.active`); its parts are
 *      touched only by the commit thread between start_save and settle.
 *  I2. Every cpr_emb_save of a save ends exactly once, on the training
 *      thread, in settle: committed iff its shard's part committed.
 *  I3. Before a failure is injected or a recovery restores rows, the save in
 *      flight is settled (dlrm_ckpt_drain), so no open save spans a wipe.
 *  I4. Checkpoint ids only grow (next_id), above every part of the job, so a
 *      rewound run never reuses an id.
 *  I5. After a rewind to cut C (0: from scratch), the ids C+1..next_id-1 of
 *      that moment are the abandoned timeline (abandoned_after/_through);
 *      every later plan ignores them (cpr_plan_request), so a partial
 *      recovery never restores a shard from a part training left behind.
 */
#ifndef CPR_DLRM_CKPT_INTERNAL_H
#define CPR_DLRM_CKPT_INTERNAL_H

#include <pthread.h>

#include "ckpt.h"

typedef struct ckpt_flight {
    int active;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;                 /* set by the commit thread under mu */
    uint64_t checkpoint, step;
    cpr_kind kind;            /* shard 0's kind, for the log */
    cpr_policy policy;
    cpr_part **parts;         /* per shard; NULL when begin or a put failed */
    cpr_status *status;       /* per shard: the part's outcome */
    cpr_kind *kinds;          /* per shard */
    cpr_codec codec;          /* of its PRIORITY and DELTA parts' rows */
    cpr_emb_save **saves;     /* shard-major: saves[s * tables + t]; a CPU table's is
                                 what its part's sender copies from until the
                                 flight settles (after its parts end) */
    uint64_t rows, bytes;
    uint64_t delayed_steps;   /* steps this save started after it was due: the
                                 previous save was still in flight */
    double stall_s, t_begin;
    double settle_s;          /* ending its embedding saves, on the training thread */
    uint64_t steps_staged;    /* executed steps then */
} ckpt_flight;

struct dlrm_ckpt {
    dlrm_ckpt_options o;
    char job[CPR_NAME_MAX + 1];
    dlrm_model *model;
    dlrm_trainer *trainer;    /* set by the first hook call */
    cpr_client *client;       /* NULL without a target */
    cpr_estimator *est;
    uint32_t tables, shards;
    cpr_table_schema *schemas;
    /* scratch for one table's shard */
    uint64_t *ids;
    float *values, *state;
    size_t scratch_rows;
    uint8_t *need_full;       /* per shard: next save must be FULL */
    uint64_t staging_bytes;   /* the client's staging budget */
    int warned_budget;        /* a save over the budget was logged */
    /* The SSU sampling rate follows the accesses (ssu_rate_for): each table's
     * update events at the previous save, and the step of that save. */
    uint64_t *table_events;
    double table_events_step;
    ckpt_flight fl;
    uint64_t next_id, next_save_step, saves_done, interval_steps;
    /* What a save's background costs training: the wall time between two
     * after_step calls, averaged over steps with no save in flight (idle_step_s),
     * and the excess over that of steps with one in flight (flight_extra_s). */
    double last_step_t, idle_step_s, flight_extra_s;
    uint64_t idle_steps;
    uint64_t abandoned_after, abandoned_through; /* I5; 0, 0: none */
    size_t next_failure;
    int started;              /* first before_step ran */
    uint8_t loader0[DLRM_LOADER_STATE_BYTES];
    size_t loader0_len;
    dlrm_ckpt_stats st;
    uint64_t lost_events_partial;
};

/* ckpt.c */
cpr_status dlrm_ckpt_drain(dlrm_ckpt *ck);
double dlrm_ckpt_step_s(const dlrm_ckpt *ck);
double dlrm_ckpt_exec_steps(const dlrm_ckpt *ck);
void dlrm_ckpt_after_recovery(dlrm_ckpt *ck, int rewound, const uint32_t *failed,
                              size_t n_failed);
cpr_recovery_mode dlrm_ckpt_decide_mode(dlrm_ckpt *ck, cpr_estimate *est, int *have_est);

/* recover.c */
cpr_status dlrm_ckpt_before_step(void *ctx, dlrm_trainer *trainer);
/* The "model" blob (shard 0's part of every save): the geometry of the
 * sparse side a resume must share (tables, rows, width), as text. */
#define DLRM_MODEL_BLOB "model"
size_t dlrm_ckpt_model_text(const dlrm_ckpt *ck, char *buf, size_t cap);
/* A --resume: the job's latest cut was saved by a model of this geometry
 * (CPR_FAILED_PRECONDITION naming the difference otherwise; a job saved
 * before the blob existed passes). */
cpr_status dlrm_ckpt_check_model(dlrm_ckpt *ck);
/* The rows of `shard` (all shards when shard == UINT32_MAX) back to their
 * initial values, from a freshly created model of the same configuration. */
cpr_status dlrm_ckpt_reinit(dlrm_ckpt *ck, uint32_t shard, int dense_too);

#endif /* CPR_DLRM_CKPT_INTERNAL_H */
