/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Failure injection and recovery for the reference DLRM trainer (ckpt.h).
 * before_step injects the schedule's failures (a shard's rows, state and
 * trackers wiped with cpr_emb_wipe_shard, whose lost unsaved events are what
 * PLS counts) and recovers along the recovery planner's plan: PARTIAL
 * restores the failed shard as of its newest committed part and keeps the
 * rest; FULL restores every shard, the dense blob and the loader state at
 * the latest consistent cut, so the trainer recomputes the lost steps;
 * RESTART_FROM_SCRATCH re-initialises. The first call of a --resume run asks
 * for a FULL plan. The recovery executor (cpr_recovery_execute) restores
 * rows into the tables and reads the dense blob; the loader state, the
 * re-initialisation of INIT shards and restarts from scratch are done here.
 * The restart cost is emulated: counted, never slept.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"
#include "util.h"

/* ---- re-initialisation ------------------------------------------------------------- */

/* Copy the rows of shard `shard` (every shard: UINT32_MAX) of `from` into
 * `to` (same configuration), through the save protocol's gather. */
static cpr_status copy_rows(dlrm_ckpt *ck, cpr_emb *from, cpr_emb *to, uint32_t shard)
{
    cpr_status st = CPR_OK;
    uint32_t sd = cpr_emb_state_dim(from);
    for (uint32_t s = 0; st == CPR_OK && s < ck->shards; s++) {
        if (shard != UINT32_MAX && s != shard)
            continue;
        size_t n = 0;
        cpr_emb_save *save = NULL;
        st = cpr_emb_select(from, s, CPR_POLICY_FULL, (cpr_budget){0}, ck->ids,
                            ck->scratch_rows, &n);
        if (st == CPR_OK && n)
            st = cpr_emb_save_begin(from, s, CPR_POLICY_FULL, ck->ids, n, &save);
        if (st == CPR_OK && n)
            st = cpr_emb_gather(from, save, ck->values, sd ? ck->state : NULL);
        if (st == CPR_OK && n)
            st = cpr_emb_apply(to, cpr_emb_save_ids(save), n, ck->values, sd ? ck->state : NULL);
        cpr_emb_save_abort(from, save);
    }
    return st;
}

cpr_status dlrm_ckpt_reinit(dlrm_ckpt *ck, uint32_t shard, int dense_too)
{
    dlrm_config cfg = *dlrm_model_config(ck->model);
    cfg.track = 0; /* weights do not depend on trackers */
    dlrm_model *fresh = NULL;
    void *blob = NULL;
    cpr_status st = dlrm_model_create(&cfg, &fresh);
    for (uint32_t t = 0; st == CPR_OK && t < ck->tables; t++)
        st = copy_rows(ck, dlrm_model_table(fresh, t), dlrm_model_table(ck->model, t), shard);
    if (st == CPR_OK && dense_too) {
        size_t cap = dlrm_model_dense_bytes(fresh), len = 0;
        blob = malloc(cap);
        st = blob ? dlrm_model_dense_save(fresh, blob, cap, &len)
                  : cpr_fail(CPR_NO_MEMORY, "out of memory for a dense blob");
        if (st == CPR_OK)
            st = dlrm_model_dense_load(ck->model, blob, len);
    }
    free(blob);
    dlrm_model_destroy(fresh);
    return st;
}

/* ---- restoring from storage --------------------------------------------------------- */

/* The value of `key` in a "key value" line of the model text (NULL: none). */
static const char *model_value(const char *text, const char *key, char *out, size_t cap)
{
    size_t k = strlen(key);
    for (const char *line = text; *line;) {
        size_t n = strcspn(line, "\n");
        if (n > k && strncmp(line, key, k) == 0 && line[k] == ' ') {
            snprintf(out, cap, "%.*s", (int)(n - k - 1), line + k + 1);
            return out;
        }
        line += n + (line[n] == '\n');
    }
    return NULL;
}

cpr_status dlrm_ckpt_check_model(dlrm_ckpt *ck)
{
    uint64_t cut = 0;
    cpr_status st = cpr_client_latest_cut(ck->client, ck->o.job, &cut);
    if (st == CPR_NOT_FOUND)
        return CPR_OK; /* nothing to resume from: the recovery says so */
    if (st)
        return st;
    cpr_part_id id = {ck->o.job, 0, cut};
    void *data = NULL;
    size_t len = 0;
    st = cpr_client_read_blob(ck->client, &id, DLRM_MODEL_BLOB, &data, &len);
    if (st == CPR_NOT_FOUND) { /* saved before the blob existed */
        dlrm_log(DLRM_LOG_WARN, "checkpoint %llu of job '%s' does not record its model's "
                 "geometry: this resume cannot check --tables, --table-rows and --emb-dim "
                 "against it", (unsigned long long)cut, ck->o.job);
        return CPR_OK;
    }
    if (st)
        return st;
    char *stored = malloc(len + 1), mine[128];
    if (!stored) {
        free(data);
        return cpr_fail(CPR_NO_MEMORY, "out of memory reading the model blob");
    }
    memcpy(stored, data, len);
    stored[len] = '\0';
    free(data);
    dlrm_ckpt_model_text(ck, mine, sizeof mine);
    static const char *const keys[][2] = {{"tables", "--tables"},
                                          {"table_rows", "--table-rows"},
                                          {"emb_dim", "--emb-dim"}};
    for (size_t i = 0; st == CPR_OK && i < sizeof keys / sizeof keys[0]; i++) {
        char a[32], b[32];
        const char *was = model_value(stored, keys[i][0], a, sizeof a);
        const char *now = model_value(mine, keys[i][0], b, sizeof b);
        if (!was || !now || strcmp(was, now) != 0)
            st = cpr_fail(CPR_FAILED_PRECONDITION, "job '%s' was saved by a model with %s "
                          "%s, and this run has %s: a resume needs the model it saved (its "
                          "rows would land on other ids); give %s %s, or start a new --job",
                          ck->o.job, keys[i][1], was ? was : "(unknown)", now ? now : "?",
                          keys[i][1], was ? was : "?");
    }
    free(stored);
    return st;
}

/* The loader state blob of the part holding the dense blob. */
static cpr_status load_loader(dlrm_ckpt *ck, const cpr_exec_report *rep,
                              cpr_restore_result *res)
{
    cpr_part_id id = {ck->o.job, rep->dense_shard, rep->dense_checkpoint};
    void *data = NULL;
    size_t len = 0;
    cpr_status st = cpr_client_read_blob(ck->client, &id, "loader", &data, &len);
    if (st == CPR_OK)
        st = dlrm_loader_state_load(dlrm_trainer_loader(ck->trainer), data, len);
    if (st == CPR_OK)
        res->bytes += len;
    free(data);
    return st;
}

/* The executor restores the plan's STORE shards into the model's tables
 * (and reads the dense blob of a FULL plan); the loader state is ours. */
static cpr_status run_executor(dlrm_ckpt *ck, const cpr_recovery_plan *plan,
                               cpr_restore_result *res)
{
    cpr_exec_table *tabs = calloc(ck->tables, sizeof *tabs);
    if (!tabs)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a recovery");
    for (uint32_t t = 0; t < ck->tables; t++)
        tabs[t] = (cpr_exec_table){.table = t, .emb = dlrm_model_table(ck->model, t)};
    cpr_exec_options eo = {.dense_blob = "dense"};
    cpr_exec_report rep = {0};
    cpr_status st = cpr_recovery_execute(ck->client, ck->o.job, plan, tabs, ck->tables, &eo,
                                         &rep);
    free(tabs);
    if (st)
        return st;
    res->rows += rep.rows;
    res->bytes += rep.bytes;
    if (cpr_recovery_plan_action(plan) == CPR_PLAN_FULL) {
        if (!rep.dense_data)
            st = cpr_fail(CPR_NOT_FOUND, "checkpoint %llu has no dense blob",
                          (unsigned long long)rep.dense_checkpoint);
        if (st == CPR_OK)
            st = dlrm_model_dense_load(ck->model, rep.dense_data, rep.dense_len);
        if (st == CPR_OK)
            st = load_loader(ck, &rep, res);
        res->bytes += rep.dense_len;
    }
    cpr_exec_report_release(&rep);
    return st;
}

/* ---- plans ------------------------------------------------------------------------------- */

static cpr_status make_plan(dlrm_ckpt *ck, cpr_recovery_mode mode, const uint32_t *failed,
                            size_t n_failed, const cpr_estimate *est,
                            cpr_recovery_plan **plan)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    cpr_status st = ck->client ? cpr_client_list(ck->client, ck->o.job, &parts, &n)
                               : CPR_NOT_FOUND;
    if (st == CPR_NOT_FOUND)
        st = CPR_OK, n = 0;
    if (st)
        return st;
    cpr_plan_request req = {.parts = parts, .n_parts = n, .num_shards = ck->shards,
                            .failed = failed, .n_failed = n_failed, .mode = mode,
                            .estimate = est, .dense_replica = mode == CPR_RECOVERY_PARTIAL,
                            .dense_shard = 0, .abandoned_after = ck->abandoned_after,
                            .abandoned_through = ck->abandoned_through};
    st = cpr_recovery_plan_make(&req, plan);
    free(parts);
    return st;
}

/* Carry out a plan; *rewound is set when training goes back. */
static cpr_status execute(dlrm_ckpt *ck, const cpr_recovery_plan *plan, int *rewound,
                          cpr_restore_result *res)
{
    cpr_status st = CPR_OK;
    cpr_plan_action action = cpr_recovery_plan_action(plan);
    *rewound = action != CPR_PLAN_PARTIAL;
    if (*rewound && ck->next_id > cpr_recovery_plan_cut(plan) + 1) {
        /* I5: what was saved after the cut is on the timeline we leave. */
        ck->abandoned_after = cpr_recovery_plan_cut(plan);
        ck->abandoned_through = ck->next_id - 1;
    }
    if (action == CPR_PLAN_RESTART_FROM_SCRATCH) {
        st = dlrm_ckpt_reinit(ck, UINT32_MAX, 1);
        if (st == CPR_OK)
            st = dlrm_loader_state_load(dlrm_trainer_loader(ck->trainer), ck->loader0,
                                        ck->loader0_len);
        return st;
    }
    if (ck->client)
        st = run_executor(ck, plan, res);
    for (size_t i = 0; st == CPR_OK && i < cpr_recovery_plan_count(plan); i++) {
        const cpr_plan_shard *p = cpr_recovery_plan_shard(plan, i);
        if (p->source == CPR_SOURCE_INIT) /* nothing committed: initial values */
            st = dlrm_ckpt_reinit(ck, p->shard, 0);
    }
    return st;
}

static cpr_status emit_recovery(dlrm_ckpt *ck, const cpr_recovery_plan *plan,
                                const cpr_restore_result *res, double load_s, double lost_s,
                                uint64_t lost_events, const uint32_t *failed, size_t n_failed)
{
    cJSON *ev = dlrm_trainer_event(ck->trainer, "recovery");
    /* The array belongs to the event from the start, so deleting the event
     * on any failure below frees everything. */
    cJSON *shards = ev ? cJSON_AddArrayToObject(ev, "shards") : NULL;
    int bad = !shards;
    for (size_t i = 0; !bad && i < n_failed; i++)
        bad = !cJSON_AddItemToArray(shards, cJSON_CreateNumber(failed[i]));
    if (ev && (bad ||
               !cJSON_AddStringToObject(ev, "mode",
                                        cpr_plan_action_name(cpr_recovery_plan_action(plan))) ||
               !cJSON_AddStringToObject(ev, "reason", cpr_recovery_plan_reason(plan)) ||
               !cJSON_AddNumberToObject(ev, "rows", (double)res->rows) ||
               !cJSON_AddNumberToObject(ev, "bytes", (double)res->bytes) ||
               !cJSON_AddNumberToObject(ev, "ms", load_s * 1e3) ||
               !cJSON_AddNumberToObject(ev, "restart_ms", ck->o.restart_s * 1e3) ||
               !cJSON_AddNumberToObject(ev, "lost_ms", lost_s * 1e3) ||
               !cJSON_AddNumberToObject(ev, "lost_events", (double)lost_events) ||
               !cJSON_AddNumberToObject(ev, "cut", (double)cpr_recovery_plan_cut(plan)))) {
        cJSON_Delete(ev);
        ev = NULL;
    }
    return dlrm_trainer_emit(ck->trainer, ev);
}

/* Plan and carry out a recovery of `failed` (none: a resume), account for
 * it and log it. `lost_events` are the failed shards' unsaved events. */
static cpr_status recover(dlrm_ckpt *ck, cpr_recovery_mode mode, const cpr_estimate *est,
                          const uint32_t *failed, size_t n_failed, uint64_t lost_events)
{
    cpr_recovery_plan *plan = NULL;
    cpr_restore_result res = {0};
    int rewound = 0;
    double step_s = dlrm_ckpt_step_s(ck), t0 = dlrm_now_s();
    uint64_t step_before = dlrm_model_step(ck->model);
    cpr_status st = make_plan(ck, mode, failed, n_failed, est, &plan);
    if (st == CPR_OK)
        st = execute(ck, plan, &rewound, &res);
    if (st) {
        cpr_recovery_plan_destroy(plan);
        return st;
    }
    double load_s = dlrm_now_s() - t0;
    uint64_t step_after = dlrm_model_step(ck->model);
    double lost_s = step_before > step_after ? (double)(step_before - step_after) * step_s : 0;
    if (rewound)
        lost_events = 0; /* recomputed, not lost */
    if (cpr_recovery_plan_action(plan) == CPR_PLAN_RESTART_FROM_SCRATCH)
        dlrm_log(DLRM_LOG_WARN, "recovery: no consistent checkpoint of job '%s': training "
                 "restarts from scratch", ck->o.job);
    ck->st.recoveries++;
    ck->st.load_s += load_s;
    ck->st.lost_s += lost_s;
    ck->st.restart_s += ck->o.restart_s;
    ck->st.lost_events += lost_events;
    uint32_t loaded = rewound ? ck->shards : (uint32_t)(n_failed ? n_failed : 1);
    cpr_estimator_loaded(ck->est, load_s / step_s, loaded);
    if (ck->o.restart_s > 0)
        cpr_estimator_restarted(ck->est, ck->o.restart_s / step_s);
    st = emit_recovery(ck, plan, &res, load_s, lost_s, lost_events, failed, n_failed);
    cpr_recovery_plan_destroy(plan);
    dlrm_ckpt_after_recovery(ck, rewound, failed, n_failed);
    return st;
}

/* ---- failures and resume ------------------------------------------------------------- */

static cpr_status emit_failure(dlrm_ckpt *ck, uint32_t shard, uint64_t lost)
{
    cJSON *ev = dlrm_trainer_event(ck->trainer, "failure");
    if (ev && (!cJSON_AddNumberToObject(ev, "shard", shard) ||
               !cJSON_AddNumberToObject(ev, "unsaved_events", (double)lost) ||
               !cJSON_AddNumberToObject(ev, "executed_steps", dlrm_ckpt_exec_steps(ck)))) {
        cJSON_Delete(ev);
        ev = NULL;
    }
    return dlrm_trainer_emit(ck->trainer, ev);
}

/* Shard `shard` dies: wipe it in every table (I3: no save in flight), then
 * recover as decided. */
static cpr_status inject(dlrm_ckpt *ck, uint32_t shard)
{
    cpr_status st = dlrm_ckpt_drain(ck);
    uint64_t lost = 0;
    for (uint32_t t = 0; st == CPR_OK && t < ck->tables; t++) {
        uint64_t table_lost = 0;
        st = cpr_emb_wipe_shard(dlrm_model_table(ck->model, t), shard, &table_lost);
        lost += table_lost;
    }
    if (st)
        return st;
    ck->st.failures++;
    /* The recovery follows the saves made (cpr_estimator_recovery_mode);
     * the failure then moves the decision for the saves to come. */
    cpr_estimate est;
    int have = 0;
    cpr_recovery_mode mode = dlrm_ckpt_decide_mode(ck, &est, &have);
    cpr_estimator_failed(ck->est, dlrm_ckpt_exec_steps(ck));
    st = emit_failure(ck, shard, lost);
    if (st == CPR_OK)
        st = recover(ck, mode, have ? &est : NULL, &shard, 1, lost);
    return st;
}

/* The schedule this run replays, once at the start. */
static cpr_status emit_schedule(dlrm_ckpt *ck)
{
    cJSON *ev = dlrm_trainer_event(ck->trainer, "failure_schedule");
    cJSON *steps = ev ? cJSON_AddArrayToObject(ev, "steps") : NULL;
    cJSON *shards = ev ? cJSON_AddArrayToObject(ev, "shards") : NULL;
    int bad = !steps || !shards;
    for (size_t i = 0; !bad && i < ck->o.n_failures; i++) {
        const cpr_failure *f = &ck->o.failures[i];
        bad = !cJSON_AddItemToArray(steps, cJSON_CreateNumber((double)f->step)) ||
              !cJSON_AddItemToArray(shards, cJSON_CreateNumber(f->shard));
    }
    if (ev && bad) {
        cJSON_Delete(ev);
        ev = NULL;
    }
    return dlrm_trainer_emit(ck->trainer, ev);
}

cpr_status dlrm_ckpt_before_step(void *ctx, dlrm_trainer *trainer)
{
    dlrm_ckpt *ck = ctx;
    cpr_status st = CPR_OK;
    ck->trainer = trainer;
    if (!ck->started) {
        ck->started = 1;
        st = dlrm_loader_state_save(dlrm_trainer_loader(trainer), ck->loader0,
                                    sizeof ck->loader0, &ck->loader0_len);
        if (st == CPR_OK && ck->o.n_failures)
            st = emit_schedule(ck);
        if (st == CPR_OK && ck->o.resume && ck->client)
            st = dlrm_ckpt_check_model(ck);
        if (st == CPR_OK && ck->o.resume && ck->client)
            st = recover(ck, CPR_RECOVERY_FULL, NULL, NULL, 0, 0);
    }
    double exec = dlrm_ckpt_exec_steps(ck);
    while (st == CPR_OK && ck->next_failure < ck->o.n_failures &&
           (double)ck->o.failures[ck->next_failure].step <= exec) {
        st = inject(ck, ck->o.failures[ck->next_failure].shard);
        ck->next_failure++;
    }
    return st;
}
