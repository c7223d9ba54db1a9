/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Saving for the reference DLRM trainer (ckpt.h): options and policies, the
 * interval (given, or derived from the recovery model through the online
 * estimator, in units of training steps), job-wide saves in which each shard
 * writes its own part (its rows of every table; shard 0's part also carries
 * the dense blob and the loader state), the commit thread, settling saves
 * into the trackers (commit or abort), the checkpoint events and the summary.
 * Recovery is recover.c. Invariants in ckpt_internal.h.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/codec.h"
#include "ckpt_internal.h"
#include "util.h"

/* A step longer than this many usual steps did other work (after_step). */
#define OUTLIER_STEPS 4.0

/* cpr_client_options.staging_bytes is raised to at least this (cpr/client.h). */
#define CLIENT_LEAST_STAGING ((uint64_t)2 << 20)

static const char *const POLICY_NAMES[] = {"full", "delta", "partial", "mfu",
                                           "ssu", "topk-norm", "auto", NULL};

int dlrm_ckpt_policy_parse(const char *name)
{
    for (int i = 0; POLICY_NAMES[i]; i++)
        if (strcmp(name, POLICY_NAMES[i]) == 0)
            return i;
    return -1;
}

const char *dlrm_ckpt_policy_name(dlrm_ckpt_policy p)
{
    return (unsigned)p <= DLRM_CKPT_AUTO ? POLICY_NAMES[p] : "?";
}

unsigned dlrm_ckpt_policy_track(dlrm_ckpt_policy p)
{
    switch (p) {
    case DLRM_CKPT_DELTA: return CPR_TRACK_COUNTS | CPR_TRACK_DIRTY;
    case DLRM_CKPT_SSU: return CPR_TRACK_COUNTS | CPR_TRACK_SSU;
    case DLRM_CKPT_TOPK_NORM: return CPR_TRACK_COUNTS | CPR_TRACK_NORM;
    case DLRM_CKPT_AUTO: return CPR_TRACK_ALL;
    default: return CPR_TRACK_COUNTS;
    }
}

dlrm_recovery_choice dlrm_ckpt_default_recovery(dlrm_ckpt_policy p)
{
    if (p == DLRM_CKPT_FULL || p == DLRM_CKPT_DELTA)
        return DLRM_RECOVER_FULL;
    return p == DLRM_CKPT_AUTO ? DLRM_RECOVER_AUTO : DLRM_RECOVER_PARTIAL;
}

static int prioritized(dlrm_ckpt_policy p)
{
    return p == DLRM_CKPT_MFU || p == DLRM_CKPT_SSU || p == DLRM_CKPT_TOPK_NORM;
}

/* The embedding policy of a PRIORITY part. */
static cpr_policy priority_policy(dlrm_ckpt_policy p)
{
    return p == DLRM_CKPT_SSU ? CPR_POLICY_SSU
           : p == DLRM_CKPT_TOPK_NORM ? CPR_POLICY_TOPK_NORM : CPR_POLICY_MFU;
}

/* ---- time in steps ------------------------------------------------------------------ */

/* Executed steps (recomputed ones included): the clock of failures and of
 * the estimator. */
double dlrm_ckpt_exec_steps(const dlrm_ckpt *ck)
{
    dlrm_run_result r;
    dlrm_trainer_times(ck->trainer, &r);
    return (double)r.steps;
}

/* Mean wall seconds of one step (reading and training). */
double dlrm_ckpt_step_s(const dlrm_ckpt *ck)
{
    dlrm_run_result r;
    dlrm_trainer_times(ck->trainer, &r);
    double busy = r.train_s + r.io_s;
    return r.steps && busy > 0 ? busy / (double)r.steps : 1e-3;
}

/* ---- creation ------------------------------------------------------------------------ */

static cpr_status make_estimator(dlrm_ckpt *ck)
{
    const dlrm_ckpt_options *o = &ck->o;
    double job = (double)o->total_steps;
    cpr_estimator_config c = {
        .shards = ck->shards, .job_s = job, .target_pls = o->target_pls,
        .prior_mtbf_s = o->mtbf_steps > 0 ? o->mtbf_steps : 100.0 * job,
        .prior_save_s = 1.0, .prior_load_s = 1.0, .prior_restart_s = 1.0,
        .policy = prioritized(o->policy) ? priority_policy(o->policy)
                  : o->policy == DLRM_CKPT_AUTO ? CPR_POLICY_MFU : CPR_POLICY_FULL,
        .fraction = prioritized(o->policy) || o->policy == DLRM_CKPT_AUTO ? o->fraction : 1.0,
        .time_unit = "steps", /* the trainer's clock is executed steps */
        .choose_codec = o->codec_auto};
    return cpr_estimator_create(&c, &ck->est);
}

static cpr_status check_options(dlrm_ckpt_options *o)
{
    if (!o->job)
        o->job = "dlrm";
    if (o->fraction == 0)
        o->fraction = 0.125;
    if (o->target_pls == 0)
        o->target_pls = 0.02;
    if (o->timeout_s == 0)
        o->timeout_s = 30;
    if (o->full_every == 0 && o->policy == DLRM_CKPT_DELTA)
        o->full_every = 8;
    if (!(o->fraction > 0 && o->fraction <= 1))
        return cpr_fail(CPR_INVALID_ARGUMENT, "fraction must be in (0, 1]");
    if (!(o->target_pls > 0 && o->target_pls < 1))
        return cpr_fail(CPR_INVALID_ARGUMENT, "target PLS must be in (0, 1)");
    if (o->total_steps == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "the run's length in steps is needed");
    if (!dlrm_job_name_ok(o->job))
        return cpr_fail(CPR_INVALID_ARGUMENT, "job name '%s' is not 1-128 chars of "
                        "[A-Za-z0-9._-]", o->job);
    if ((unsigned)o->policy > DLRM_CKPT_AUTO || (unsigned)o->recovery > DLRM_RECOVER_AUTO)
        return cpr_fail(CPR_INVALID_ARGUMENT, "unknown policy or recovery mode");
    return CPR_OK;
}

/* Highest checkpoint id of the job's parts (0: none); refuses an existing
 * job unless resuming. */
static cpr_status scan_job(dlrm_ckpt *ck)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    cpr_status st = cpr_client_list(ck->client, ck->o.job, &parts, &n);
    if (st == CPR_NOT_FOUND)
        return CPR_OK;
    if (st)
        return st;
    for (size_t i = 0; i < n; i++)
        if (parts[i].checkpoint >= ck->next_id)
            ck->next_id = parts[i].checkpoint + 1;
    free(parts);
    if (n && !ck->o.resume)
        return cpr_fail(CPR_ALREADY_EXISTS, "job '%s' already has checkpoints: continue it "
                        "with --resume or choose another --job", ck->o.job);
    return CPR_OK;
}

static cpr_status alloc_tables(dlrm_ckpt *ck)
{
    ck->schemas = calloc(ck->tables, sizeof *ck->schemas);
    ck->need_full = malloc(ck->shards);
    ck->fl.parts = calloc(ck->shards, sizeof *ck->fl.parts);
    ck->fl.status = calloc(ck->shards, sizeof *ck->fl.status);
    ck->fl.kinds = calloc(ck->shards, sizeof *ck->fl.kinds);
    ck->fl.saves = calloc((size_t)ck->shards * ck->tables, sizeof *ck->fl.saves);
    ck->table_events = calloc(ck->tables, sizeof *ck->table_events);
    if (!ck->schemas || !ck->need_full || !ck->fl.parts || !ck->fl.status || !ck->fl.kinds ||
        !ck->fl.saves || !ck->table_events)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the checkpointer");
    memset(ck->need_full, 1, ck->shards);
    uint64_t most = 0;
    for (uint32_t t = 0; t < ck->tables; t++) {
        cpr_emb *e = dlrm_model_table(ck->model, t);
        ck->schemas[t] = (cpr_table_schema){.table = t, .rows = cpr_emb_rows(e),
                                            .dim = cpr_emb_dim(e),
                                            .state_dim = cpr_emb_state_dim(e)};
        for (uint32_t s = 0; s < ck->shards; s++)
            most = cpr_emb_shard_rows(e, s) > most ? cpr_emb_shard_rows(e, s) : most;
    }
    const cpr_table_schema *s0 = &ck->schemas[0];
    ck->scratch_rows = most ? most : 1;
    ck->ids = malloc(ck->scratch_rows * sizeof *ck->ids);
    ck->values = malloc(ck->scratch_rows * s0->dim * sizeof *ck->values);
    ck->state = malloc(ck->scratch_rows * (s0->state_dim ? s0->state_dim : 1) *
                       sizeof *ck->state);
    if (!ck->ids || !ck->values || !ck->state)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the gather buffers");
    return CPR_OK;
}

cpr_status dlrm_ckpt_create(const dlrm_ckpt_options *opts, dlrm_model *model,
                            dlrm_ckpt **out)
{
    if (!opts || !model || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "dlrm_ckpt_create needs options and a model");
    dlrm_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the checkpointer");
    ck->o = *opts;
    ck->model = model;
    ck->next_id = 1;
    pthread_mutex_init(&ck->fl.mu, NULL);
    pthread_cond_init(&ck->fl.cv, NULL);
    const dlrm_config *cfg = dlrm_model_config(model);
    ck->tables = cfg->num_tables;
    ck->shards = cfg->num_shards;
    cpr_status st = check_options(&ck->o);
    if (st == CPR_OK)
        st = alloc_tables(ck);
    if (st == CPR_OK)
        st = make_estimator(ck);
    if (st == CPR_OK && ck->o.target) {
        /* A save is a snapshot: its puts only copy (defer_send), into staging
         * that holds two whole FULL saves, so that one save can stage while
         * the one before it still streams. */
        uint64_t full = 16u << 20; /* the dense blob and slack */
        for (uint32_t t = 0; t < ck->tables; t++)
            full += ck->schemas[t].rows *
                    (8 + 4 * (uint64_t)(ck->schemas[t].dim + ck->schemas[t].state_dim));
        ck->staging_bytes = ck->o.staging_mb > 0 ? (uint64_t)(ck->o.staging_mb * 1048576.0)
                                                  : 2 * full;
        if (ck->staging_bytes < CLIENT_LEAST_STAGING) /* the client raises it so */
            ck->staging_bytes = CLIENT_LEAST_STAGING;
        cpr_client_options co = {.call_timeout_s = ck->o.timeout_s,
                                 .stream_timeout_s = ck->o.timeout_s,
                                 .staging_bytes = (size_t)ck->staging_bytes, .defer_send = 1,
                                 .thread_cpus = ck->o.ckpt_cpus};
        st = cpr_client_open(ck->o.target, &co, &ck->client);
        if (st == CPR_OK)
            st = scan_job(ck);
    }
    if (st) {
        dlrm_ckpt_destroy(ck);
        return st;
    }
    snprintf(ck->job, sizeof ck->job, "%s", ck->o.job);
    ck->o.job = ck->job;
    *out = ck;
    return CPR_OK;
}

void dlrm_ckpt_destroy(dlrm_ckpt *ck)
{
    if (!ck)
        return;
    if (ck->fl.active && ck->trainer)
        dlrm_ckpt_drain(ck);
    cpr_client_close(ck->client);
    cpr_estimator_destroy(ck->est);
    pthread_mutex_destroy(&ck->fl.mu);
    pthread_cond_destroy(&ck->fl.cv);
    free(ck->fl.parts);
    free(ck->fl.status);
    free(ck->fl.kinds);
    free(ck->fl.saves);
    free(ck->schemas);
    free(ck->need_full);
    free(ck->table_events);
    free(ck->ids);
    free(ck->values);
    free(ck->state);
    free(ck);
}

void dlrm_ckpt_stats_get(const dlrm_ckpt *ck, dlrm_ckpt_stats *out)
{
    *out = ck->st;
    out->interval_steps = ck->interval_steps;
}

/* ---- the interval and the recovery decision ------------------------------------------- */

cpr_recovery_mode dlrm_ckpt_decide_mode(dlrm_ckpt *ck, cpr_estimate *est, int *have_est)
{
    *have_est = cpr_estimator_decide(ck->est, est) == CPR_OK;
    if (ck->o.recovery == DLRM_RECOVER_FULL)
        return CPR_RECOVERY_FULL;
    if (ck->o.recovery == DLRM_RECOVER_PARTIAL)
        return CPR_RECOVERY_PARTIAL;
    cpr_recovery_mode mode;
    if (*have_est && cpr_estimator_recovery_mode(ck->est, &mode) == CPR_OK)
        return mode;
    return CPR_RECOVERY_FULL;
}

/* Steps until the next save: given (a base interval; prioritized saves run
 * r times it), or the estimator's answer in steps. */
static uint64_t next_interval(dlrm_ckpt *ck, cpr_estimate *e, int *have)
{
    double r = prioritized(ck->o.policy) ? ck->o.fraction : 1.0, steps;
    *have = cpr_estimator_decide(ck->est, e) == CPR_OK;
    if (ck->o.interval_steps)
        steps = (double)ck->o.interval_steps * r;
    else if (!*have)
        steps = (double)ck->o.total_steps;
    else if (ck->o.policy == DLRM_CKPT_AUTO)
        steps = e->interval_s;
    else if (ck->o.policy == DLRM_CKPT_FULL || ck->o.policy == DLRM_CKPT_DELTA)
        steps = e->full.interval_s;
    else
        steps = e->partial.interval_s * r;
    if (!(steps >= 1))
        steps = 1;
    return (uint64_t)llround(fmin(steps, 1e15));
}

/* ---- starting a save ------------------------------------------------------------------- */

/* The kind shard s writes in this save, and the embedding policy. */
static cpr_kind shard_kind(const dlrm_ckpt *ck, uint32_t s, const cpr_estimate *e, int have,
                           cpr_policy *policy)
{
    dlrm_ckpt_policy p = ck->o.policy;
    int periodic_full = ck->o.full_every && ck->saves_done % ck->o.full_every == 0;
    if (p == DLRM_CKPT_AUTO && have && e->policy != CPR_POLICY_FULL && !ck->need_full[s] &&
        !periodic_full) {
        *policy = e->policy;
        return CPR_KIND_PRIORITY;
    }
    if ((p == DLRM_CKPT_DELTA || prioritized(p)) && !ck->need_full[s] && !periodic_full) {
        *policy = p == DLRM_CKPT_DELTA ? CPR_POLICY_DELTA : priority_policy(p);
        return p == DLRM_CKPT_DELTA ? CPR_KIND_DELTA : CPR_KIND_PRIORITY;
    }
    *policy = CPR_POLICY_FULL;
    return CPR_KIND_FULL;
}

/* Select, begin and queue one table's rows of shard s (the part's sender
 * copies them out of the save's snapshot). */
static cpr_status stage_table(dlrm_ckpt *ck, uint32_t s, uint32_t t, cpr_policy policy,
                              cpr_part *part)
{
    cpr_emb *e = dlrm_model_table(ck->model, t);
    const cpr_table_schema *sc = &ck->schemas[t];
    size_t n = 0;
    cpr_budget budget = {.fraction = ck->o.fraction};
    cpr_status st = cpr_emb_select(e, s, policy, budget, ck->ids, ck->scratch_rows, &n);
    if (st || n == 0)
        return st;
    cpr_emb_save **save = &ck->fl.saves[(size_t)s * ck->tables + t];
    st = cpr_emb_save_begin(e, s, policy, ck->ids, n, save);
    if (st == CPR_OK && part) {
        /* The save is a snapshot (a CPU table's copy-on-write, a CUDA
         * table's device-side gather at begin). Only the ids are queued
         * now; the part's sender copies the rows, as they were at this
         * step, straight into its blocks while training goes on. */
        cpr_deferred_rows d = {.table = t, .n = n, .ids = cpr_emb_save_ids(*save),
                               .fill = cpr_emb_save_fill, .ctx = *save,
                               .ids_kept = 1 /* the save's own, until settle (I2) */};
        /* A CUDA table encodes a quantized part's rows on the device and
         * moves only the encoded bytes; a CPU table's sender copies and
         * encodes them itself, into blocks it has already. */
        if (cpr_emb_device(e) == CPR_DEVICE_CUDA)
            d.fill_encoded = cpr_emb_save_fill_encoded;
        st = cpr_part_put_deferred(part, &d);
        part = NULL; /* staged */
    } else if (st == CPR_OK) {
        st = cpr_emb_gather(e, *save, ck->values, sc->state_dim ? ck->state : NULL);
    }
    if (st == CPR_OK && part) {
        cpr_row_batch b = {.table = t, .n = n, .ids = cpr_emb_save_ids(*save),
                           .values = ck->values, .values_count = n * sc->dim,
                           .state = sc->state_dim ? ck->state : NULL,
                           .state_count = n * sc->state_dim};
        st = cpr_part_put_rows(part, &b);
    }
    /* What goes on the wire and to disk: the values in the part's codec. */
    cpr_codec codec = ck->fl.kinds[s] == CPR_KIND_FULL ? (cpr_codec)ck->o.full_codec
                                                       : ck->fl.codec;
    ck->fl.rows += n;
    ck->fl.bytes += n * (8 + cpr_codec_row_bytes(codec, sc->dim) + 4 * (uint64_t)sc->state_dim);
    return st;
}

size_t dlrm_ckpt_model_text(const dlrm_ckpt *ck, char *buf, size_t cap)
{
    const dlrm_config *cfg = dlrm_model_config(ck->model);
    int n = snprintf(buf, cap, "cpr-dlrm model 1\ntables %u\ntable_rows %llu\nemb_dim %u\n",
                     cfg->num_tables, (unsigned long long)cfg->table_rows, cfg->emb_dim);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* The dense blob, the loader state and the model's geometry, in shard 0's
 * part. */
static cpr_status stage_blobs(dlrm_ckpt *ck, cpr_part *part)
{
    size_t cap = dlrm_model_dense_bytes(ck->model), len = 0, llen = 0;
    uint8_t lbuf[DLRM_LOADER_STATE_BYTES];
    void *buf = malloc(cap);
    if (!buf)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the dense blob");
    cpr_status st = dlrm_model_dense_save(ck->model, buf, cap, &len);
    if (st == CPR_OK)
        st = cpr_part_put_blob(part, "dense", buf, len);
    free(buf);
    if (st == CPR_OK)
        st = dlrm_loader_state_save(dlrm_trainer_loader(ck->trainer), lbuf, sizeof lbuf, &llen);
    if (st == CPR_OK)
        st = cpr_part_put_blob(part, "loader", lbuf, llen);
    char model[128];
    size_t mlen = dlrm_ckpt_model_text(ck, model, sizeof model);
    if (st == CPR_OK)
        st = cpr_part_put_blob(part, DLRM_MODEL_BLOB, model, mlen);
    ck->fl.bytes += len + llen + mlen;
    return st;
}

/* Begin shard s's part and queue everything it holds. On failure the part
 * is dropped (its saves are aborted in settle, I2). */
static void stage_shard(dlrm_ckpt *ck, uint32_t s, const cpr_estimate *e, int have)
{
    cpr_policy policy;
    cpr_kind kind = shard_kind(ck, s, e, have, &policy);
    ck->fl.kinds[s] = kind;
    if (s == 0) {
        ck->fl.kind = kind;
        ck->fl.policy = policy;
        ck->fl.codec = ck->o.codec_auto && have ? e->codec : (cpr_codec)ck->o.codec;
    }
    cpr_part_spec spec = {.id = {ck->o.job, s, ck->fl.checkpoint}, .kind = kind,
                          .step = ck->fl.step, .num_shards = ck->shards,
                          .tables = ck->schemas, .n_tables = ck->tables,
                          .codec = kind == CPR_KIND_FULL ? ck->o.full_codec : ck->fl.codec};
    cpr_part *part = NULL;
    /* The Begin goes out from the part's sender, off this thread (P6): the
     * rows are staged while it is in flight. */
    cpr_status st = cpr_client_begin_async(ck->client, &spec, &part);
    for (uint32_t t = 0; st == CPR_OK && t < ck->tables; t++)
        st = stage_table(ck, s, t, policy, part);
    if (st == CPR_OK && s == 0)
        st = stage_blobs(ck, part);
    if (st && part)
        cpr_part_abort(&part);
    if (st)
        dlrm_log(DLRM_LOG_WARN, "checkpoint %llu: shard %u not staged: %s: %s",
                 (unsigned long long)ck->fl.checkpoint, s, cpr_status_name(st),
                 cpr_errmsg());
    ck->fl.parts[s] = st ? NULL : part;
    ck->fl.status[s] = st;
}

/* The commit thread: commit every staged part (I1). */
static void *commit_main(void *arg)
{
    dlrm_ckpt *ck = arg;
    for (uint32_t s = 0; s < ck->shards; s++) {
        if (!ck->fl.parts[s])
            continue;
        ck->fl.status[s] = cpr_part_commit(&ck->fl.parts[s]);
        if (ck->fl.status[s])
            dlrm_log(DLRM_LOG_WARN, "checkpoint %llu: shard %u not committed: %s",
                     (unsigned long long)ck->fl.checkpoint, s, cpr_errmsg());
        ck->fl.parts[s] = NULL;
    }
    pthread_mutex_lock(&ck->fl.mu);
    ck->fl.done = 1;
    pthread_cond_signal(&ck->fl.cv);
    pthread_mutex_unlock(&ck->fl.mu);
    return NULL;
}

/* The SSU sampling rate of a table whose shards saw `accesses` update
 * events a step, for saves `interval` steps apart: each save is offered
 * about twice its budget (fraction of the table's rows) of sampled rows, the
 * rule cpr-analyze simulate uses (docs/model.md). A fixed rate (the 1%
 * default) offers a short interval far fewer rows than its budget, and SSU's
 * PLS then grows without bound whatever the interval. */
static double ssu_rate_for(double fraction, uint64_t rows, double accesses, uint64_t interval)
{
    if (!(accesses > 0) || interval == 0)
        return 1.0;
    double rate = 2.0 * fraction * (double)rows / (accesses * (double)interval);
    return rate < 1.0 ? rate : 1.0;
}

static void report_tracked(dlrm_ckpt *ck)
{
    uint64_t events = 0, unsaved = 0;
    for (uint32_t t = 0; t < ck->tables; t++) {
        uint64_t table_events = 0;
        for (uint32_t s = 0; s < ck->shards; s++) {
            uint64_t ev = 0, un = 0; /* O(1): cpr_emb_stats_get reads every row */
            if (cpr_emb_events(dlrm_model_table(ck->model, t), s, &ev, &un) == CPR_OK) {
                table_events += ev;
                unsaved += un;
            }
        }
        events += table_events;
        double now = dlrm_ckpt_exec_steps(ck), steps = now - ck->table_events_step;
        if (steps > 0 && ck->table_events_step > 0 && ck->o.ssu_rate_auto &&
            table_events >= ck->table_events[t]) {
            double accesses = (double)(table_events - ck->table_events[t]) / steps;
            cpr_emb_set_ssu_rate(dlrm_model_table(ck->model, t),
                                 ssu_rate_for(ck->o.fraction, ck->schemas[t].rows, accesses,
                                              ck->interval_steps));
        }
        ck->table_events[t] = table_events;
    }
    ck->table_events_step = dlrm_ckpt_exec_steps(ck);
    cpr_estimator_tracked(ck->est, dlrm_ckpt_exec_steps(ck), events, unsaved);
}

/* The trackers' totals when a save ends, just before its commit drops the
 * saved events and just after: the estimator integrates unsaved events
 * between samples (cpr_estimator_tracked wants them just before and after
 * each save). With samples only at saves' begins it measured vanilla
 * partial's loss ratio as 2, not 1 (half the interval); with one only after
 * the commit, as about 0.6 (the events that grew while the save was in
 * flight, averaged with the level after the drop). */
static void report_settled(dlrm_ckpt *ck)
{
    uint64_t events = 0, unsaved = 0;
    for (uint32_t t = 0; t < ck->tables; t++)
        for (uint32_t s = 0; s < ck->shards; s++) {
            uint64_t ev = 0, un = 0;
            if (cpr_emb_events(dlrm_model_table(ck->model, t), s, &ev, &un) == CPR_OK) {
                events += ev;
                unsaved += un;
            }
        }
    cpr_estimator_tracked(ck->est, dlrm_ckpt_exec_steps(ck), events, unsaved);
}

/* Select, snapshot and stage a save, then commit it on the flight's thread
 * (not started when `hold`: --crash-mid-save dies with the save staged). */
static cpr_status start_save_held(dlrm_ckpt *ck, int hold);

static cpr_status start_save(dlrm_ckpt *ck)
{
    return start_save_held(ck, 0);
}

static cpr_status start_save_held(dlrm_ckpt *ck, int hold)
{
    cpr_estimate e;
    int have = 0;
    /* The stall is everything a save costs between two steps, the estimator's
     * decision and the trackers' report included. */
    double t0 = dlrm_now_s();
    ck->interval_steps = next_interval(ck, &e, &have);
    report_tracked(ck);
    ckpt_flight *fl = &ck->fl;
    fl->checkpoint = ck->next_id++;
    fl->step = dlrm_model_step(ck->model);
    fl->rows = fl->bytes = 0;
    fl->done = 0;
    fl->t_begin = t0;
    for (uint32_t s = 0; s < ck->shards; s++)
        stage_shard(ck, s, &e, have);
    fl->stall_s = dlrm_now_s() - t0;
    if (fl->bytes > ck->staging_bytes && !ck->warned_budget) {
        /* The policy for a save the budget cannot hold: wait, never grow.
         * Its puts sent what was staged and waited for room, and the wait
         * is in stall_ms; the event says within_budget: false. */
        ck->warned_budget = 1;
        dlrm_log(DLRM_LOG_WARN, "checkpoint %llu: %.1f MiB does not fit the staging budget "
                 "of %.1f MiB; its puts waited for the wire (counted as stall)",
                 (unsigned long long)fl->checkpoint, (double)fl->bytes / 1048576.0,
                 (double)ck->staging_bytes / 1048576.0);
    }
    ck->flight_extra_s = 0; /* this save's background cost starts now */
    fl->steps_staged = dlrm_ckpt_exec_steps(ck);
    ck->st.saves_started++;
    ck->saves_done++;
    if (ck->o.staged)
        ck->o.staged(ck->o.staged_ctx, fl->checkpoint);
    if (hold)
        return CPR_OK;
    if (pthread_create(&fl->thread, NULL, commit_main, ck) != 0) {
        commit_main(ck); /* no thread: commit inline rather than lose the save */
        fl->done = 1;
        fl->active = 2;
        return CPR_OK;
    }
    fl->active = 1;
    return CPR_OK;
}

/* ---- settling a save ----------------------------------------------------------------------- */

static cpr_status emit_checkpoint(dlrm_ckpt *ck, int committed, uint32_t shards_ok,
                                  double duration_s)
{
    ckpt_flight *fl = &ck->fl;
    cJSON *ev = dlrm_trainer_event(ck->trainer, "checkpoint");
    if (ev && (!cJSON_AddNumberToObject(ev, "checkpoint", (double)fl->checkpoint) ||
               !cJSON_AddStringToObject(ev, "kind", cpr_kind_name(fl->kind)) ||
               !cJSON_AddStringToObject(ev, "policy", cpr_policy_name(fl->policy)) ||
               !cJSON_AddStringToObject(ev, "codec", cpr_codec_name(fl->kind == CPR_KIND_FULL
                                                                        ? (cpr_codec)ck->o.full_codec
                                                                        : fl->codec)) ||
               !cJSON_AddNumberToObject(ev, "rows", (double)fl->rows) ||
               !cJSON_AddNumberToObject(ev, "bytes", (double)fl->bytes) ||
               !cJSON_AddNumberToObject(ev, "stall_ms", fl->stall_s * 1e3) ||
               !cJSON_AddNumberToObject(ev, "settle_ms", fl->settle_s * 1e3) ||
               !cJSON_AddNumberToObject(ev, "delayed_steps", (double)fl->delayed_steps) ||
               !cJSON_AddBoolToObject(ev, "within_budget", fl->bytes <= ck->staging_bytes) ||
               !cJSON_AddNumberToObject(ev, "duration_ms", duration_s * 1e3) ||
               !cJSON_AddBoolToObject(ev, "committed", committed) ||
               !cJSON_AddNumberToObject(ev, "save_step", (double)fl->step) ||
               !cJSON_AddNumberToObject(ev, "shards_committed", shards_ok))) {
        cJSON_Delete(ev);
        ev = NULL;
    }
    return dlrm_trainer_emit(ck->trainer, ev);
}

/* End every embedding save of the flight (I2) and log it. */
static cpr_status settle(dlrm_ckpt *ck)
{
    ckpt_flight *fl = &ck->fl;
    if (fl->active == 1)
        pthread_join(fl->thread, NULL);
    fl->active = 0;
    /* The unsaved events just before the commit drops them, and (below)
     * just after: the estimator sees the drop where it happens. */
    report_settled(ck);
    double settle_t0 = dlrm_now_s(), duration_s = settle_t0 - fl->t_begin;
    uint32_t ok = 0;
    for (uint32_t s = 0; s < ck->shards; s++) {
        int committed = fl->status[s] == CPR_OK;
        ok += committed;
        for (uint32_t t = 0; t < ck->tables; t++) {
            cpr_emb_save **save = &fl->saves[(size_t)s * ck->tables + t];
            if (*save && committed)
                cpr_emb_save_commit(dlrm_model_table(ck->model, t), *save);
            else if (*save)
                cpr_emb_save_abort(dlrm_model_table(ck->model, t), *save);
            *save = NULL;
        }
        if (committed && fl->kinds[s] != CPR_KIND_PRIORITY)
            ck->need_full[s] = 0;
    }
    int all = ok == ck->shards;
    /* Ending the embedding saves is training-thread time the save costs too. */
    fl->settle_s = dlrm_now_s() - settle_t0;
    ck->st.save_s += fl->stall_s + fl->settle_s;
    ck->st.bytes_written += fl->bytes;
    if (all) {
        ck->st.saves_committed++;
        ck->st.last_committed = fl->checkpoint;
        ck->st.last_committed_step = fl->step;
        cpr_estimator_saved(ck->est, dlrm_ckpt_exec_steps(ck), fl->policy,
                            (fl->stall_s + fl->settle_s) / dlrm_ckpt_step_s(ck), fl->bytes);
        /* Its background, in steps: how many steps ran while it was in flight,
         * and how many more those took than they would have without it. */
        double step_s = ck->idle_step_s > 0 ? ck->idle_step_s : dlrm_ckpt_step_s(ck);
        double in_flight = (double)(dlrm_ckpt_exec_steps(ck) - fl->steps_staged);
        cpr_estimator_background(ck->est, fl->policy, in_flight, ck->flight_extra_s / step_s);
    } else {
        ck->st.saves_failed++;
    }
    report_settled(ck);
    return emit_checkpoint(ck, all, ok, duration_s);
}

static int flight_done(dlrm_ckpt *ck)
{
    pthread_mutex_lock(&ck->fl.mu);
    int done = ck->fl.done;
    pthread_mutex_unlock(&ck->fl.mu);
    return done;
}

/* Wait for the save in flight (its commit is bounded by the client's
 * deadlines) and settle it. */
cpr_status dlrm_ckpt_drain(dlrm_ckpt *ck)
{
    if (!ck->fl.active)
        return CPR_OK;
    double t0 = dlrm_now_s();
    pthread_mutex_lock(&ck->fl.mu);
    while (!ck->fl.done)
        pthread_cond_wait(&ck->fl.cv, &ck->fl.mu);
    pthread_mutex_unlock(&ck->fl.mu);
    if (ck->o.sync)
        ck->fl.stall_s += dlrm_now_s() - t0;
    return settle(ck);
}

/* After a recovery, the DELTA and PRIORITY chains of the shards that were
 * restored restart with FULL parts: a restored shard may have parts newer
 * than the state it was restored to, and a chain on top of them would bring
 * rows of the state it left back at a later restore. After a rewind that is
 * every shard (and the next save is scheduled from the step training resumes
 * at); after a partial recovery, only the failed shards: the others kept
 * their state and their chains. */
void dlrm_ckpt_after_recovery(dlrm_ckpt *ck, int rewound, const uint32_t *failed,
                              size_t n_failed)
{
    if (rewound || n_failed == 0) {
        memset(ck->need_full, 1, ck->shards);
    } else {
        for (size_t i = 0; i < n_failed; i++)
            if (failed[i] < ck->shards)
                ck->need_full[failed[i]] = 1;
    }
    if (rewound)
        ck->next_save_step = dlrm_model_step(ck->model) + ck->interval_steps;
}

/* ---- the hooks --------------------------------------------------------------------------- */

static cpr_status after_step(void *ctx, dlrm_trainer *trainer)
{
    dlrm_ckpt *ck = ctx;
    cpr_status st = CPR_OK;
    ck->trainer = trainer;
    uint64_t step = dlrm_model_step(ck->model);
    double now = dlrm_now_s();
    if (ck->last_step_t > 0) { /* the step just run, with or without a save in flight */
        double dt = now - ck->last_step_t;
        /* A step that took many times the usual ran something else too (a
         * recovery before it, an evaluation): neither idle nor a save's. */
        int usual = ck->idle_step_s <= 0 || dt < OUTLIER_STEPS * ck->idle_step_s;
        if (!ck->fl.active && usual) {
            ck->idle_steps++;
            ck->idle_step_s += (dt - ck->idle_step_s) /
                               (double)(ck->idle_steps < 32 ? ck->idle_steps : 32);
        } else if (ck->fl.active && ck->idle_step_s > 0 && usual) {
            if (dt > ck->idle_step_s) /* the estimator's input: the excess only */
                ck->flight_extra_s += dt - ck->idle_step_s;
            ck->st.background_s += dt - ck->idle_step_s; /* signed: noise cancels */
        }
    }
    if (ck->fl.active && flight_done(ck))
        st = settle(ck);
    /* A save due while the previous one is still in flight is delayed, not
     * waited for and not skipped: training goes on, and the save starts at
     * the first step after the previous one has landed; its log event says by
     * how many steps it was late (delayed_steps). Staging holds two whole
     * saves, so a save's puts never wait on the wire (defer_send). */
    if (st == CPR_OK && ck->client && !ck->fl.active && step >= ck->next_save_step) {
        ck->fl.delayed_steps = step - ck->next_save_step;
        st = start_save(ck);
        ck->next_save_step = step + ck->interval_steps;
        if (st == CPR_OK && ck->o.sync)
            st = dlrm_ckpt_drain(ck);
    }
    if (st == CPR_OK && ck->o.crash_at_step && step == ck->o.crash_at_step &&
        ck->o.crash_mid_save && ck->client) {
        /* A save in flight is drained first (its commit would race the
         * kill); then one is staged and held: never committed. */
        if (ck->fl.active)
            st = dlrm_ckpt_drain(ck);
        if (st == CPR_OK)
            st = start_save_held(ck, 1);
        dlrm_log(DLRM_LOG_WARN, "crashing on purpose after step %llu with checkpoint %llu "
                 "staged (--crash-mid-save)", (unsigned long long)step,
                 (unsigned long long)ck->fl.checkpoint);
        raise(SIGKILL);
    }
    if (st == CPR_OK && ck->o.crash_at_step && step == ck->o.crash_at_step) {
        st = dlrm_ckpt_drain(ck);
        dlrm_log(DLRM_LOG_WARN, "crashing on purpose after step %llu (--crash-at-step)",
                 (unsigned long long)step);
        raise(SIGKILL);
    }
    ck->last_step_t = dlrm_now_s(); /* the next step's time starts after this hook's work */
    return st;
}

static cpr_status on_finish(void *ctx, dlrm_trainer *trainer)
{
    dlrm_ckpt *ck = ctx;
    ck->trainer = trainer;
    return dlrm_ckpt_drain(ck);
}

static uint64_t total_update_events(dlrm_ckpt *ck)
{
    uint64_t events = 0;
    for (uint32_t t = 0; t < ck->tables; t++)
        for (uint32_t s = 0; s < ck->shards; s++) {
            uint64_t ev = 0, unsaved = 0;
            if (cpr_emb_events(dlrm_model_table(ck->model, t), s, &ev, &unsaved) == CPR_OK)
                events += ev;
        }
    return events;
}

static void on_summary(void *ctx, dlrm_trainer *trainer, cJSON *ev)
{
    dlrm_ckpt *ck = ctx;
    dlrm_run_result r;
    dlrm_trainer_times(trainer, &r);
    const dlrm_ckpt_stats *s = &ck->st;
    /* The background (steps slowed while a save streams) is in train_s: the
     * overhead takes it out of the compute time and counts it. */
    double background = s->background_s > 0 ? s->background_s : 0;
    double overhead = s->save_s + s->load_s + s->lost_s + s->restart_s + background;
    double compute = r.train_s + r.io_s - s->lost_s - background;
    compute = compute > 1e-9 ? compute : 1e-9;
    uint64_t events = total_update_events(ck);
    const char *names[] = {"shards", "compute_s", "save_s", "load_s", "lost_s", "restart_s",
                           "background_s", "update_events", "lost_events", "bytes_written", "failures",
                           "recoveries", "checkpoints", "checkpoints_failed", "fraction",
                           "overhead_frac", "pls", "interval_steps", "wall_s", NULL};
    double values[] = {ck->shards, compute, s->save_s, s->load_s, s->lost_s, s->restart_s,
                       background, (double)events, (double)s->lost_events, (double)s->bytes_written,
                       (double)s->failures, (double)s->recoveries, (double)s->saves_committed,
                       (double)s->saves_failed,
                       prioritized(ck->o.policy) ? ck->o.fraction : 1.0, overhead / compute,
                       events ? (double)s->lost_events / (double)events : 0,
                       (double)ck->interval_steps, r.total_s};
    const char *recovery = ck->o.recovery == DLRM_RECOVER_FULL ? "full"
                           : ck->o.recovery == DLRM_RECOVER_PARTIAL ? "partial" : "auto";
    /* The trainer prints whatever made it in: a field lost to a failed
     * allocation shortens the summary rather than failing the run. */
    for (size_t i = 0; names[i]; i++)
        cJSON_AddNumberToObject(ev, names[i], values[i]);
    /* the policy, and the codec when it is not f32: "mfu-int8", "mfu-auto" */
    const char *codec = ck->o.codec_auto ? "auto" : cpr_codec_name((cpr_codec)ck->o.codec);
    int plain = !ck->o.codec_auto && !ck->o.codec;
    char strategy[64];
    snprintf(strategy, sizeof strategy, "%s%s%s",
             ck->client ? dlrm_ckpt_policy_name(ck->o.policy) : "none",
             ck->client && !plain ? "-" : "", ck->client && !plain ? codec : "");
    cJSON_AddStringToObject(ev, "strategy", strategy);
    cJSON_AddStringToObject(ev, "codec", codec);
    cJSON_AddStringToObject(ev, "full_codec", cpr_codec_name((cpr_codec)ck->o.full_codec));
    cJSON_AddStringToObject(ev, "recovery", recovery);
}

dlrm_hooks dlrm_ckpt_hooks(dlrm_ckpt *ck)
{
    return (dlrm_hooks){.ctx = ck, .before_step = dlrm_ckpt_before_step,
                        .after_step = after_step, .on_finish = on_finish,
                        .on_summary = on_summary};
}
