/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr-dlrm's checkpointer (examples/dlrm/ckpt.h) against a real ckptd on
 * 127.0.0.1: partial recovery restores exactly the failed shard's newest
 * committed rows and leaves the other shard untouched; full recovery rewinds
 * to the consistent cut and recomputes bit for bit (losses, tables and dense
 * state equal a failure-free run's); ckptd SIGKILLed while a save streams
 * (the trainer goes on, that save fails cleanly and leaves nothing, a later
 * one commits); the trainer process SIGKILLed and restarted with --resume
 * ends exactly where an uninterrupted run ends. Small models: 8 tables of
 * 500 rows, dim 4, 2 shards.
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckpt.h"
#include "ckptd_harness.h"
#include "cpr/data.h"
#include "cpr_json.h"
#include "dlrm.h"
#include "testutil.h"

#define TABLES 8
#define ROWS 500
#define DIM 4
#define SHARDS 2
#define BATCH 16
#define MAX_STEPS 200

typedef struct fixture {
    char *dir;
    char data[512];
    char store[512];
    ch_daemon d;
    char target[300];
} fixture;

static fixture *fx;

static int setup(void **state)
{
    (void)state;
    fx = calloc(1, sizeof *fx);
    fx->dir = tu_mkdtemp("dlrm-ckpt");
    snprintf(fx->data, sizeof fx->data, "%s/data.tsv", fx->dir);
    cpr_synth_options o = {.seed = 5, .tables = TABLES, .cardinality = 1000};
    cpr_synth *s = NULL;
    assert_status(CPR_OK, cpr_synth_create(&o, &s));
    assert_status(CPR_OK, cpr_synth_write(s, fx->data, 3000, NULL, NULL));
    cpr_synth_destroy(s);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(fx->dir);
    free(fx->dir);
    free(fx);
    return 0;
}

/* A fresh daemon with its own store for each test. */
static void start_daemon(const char *name)
{
    snprintf(fx->store, sizeof fx->store, "%s/%s", fx->dir, name);
    ch_start(&fx->d, fx->store);
    snprintf(fx->target, sizeof fx->target, "grpc://%s", fx->d.addr);
}

static void small_config(dlrm_config *c, unsigned track)
{
    dlrm_config_init(c);
    c->num_tables = TABLES;
    c->table_rows = ROWS;
    c->emb_dim = DIM;
    assert_status(CPR_OK, dlrm_layers_parse("13-8-4", &c->bottom));
    assert_status(CPR_OK, dlrm_layers_parse("8-1", &c->top));
    c->max_batch = BATCH;
    c->num_shards = SHARDS;
    c->track = track;
}

/* Values of every row of every table (forward over bags of one row: no
 * side effect on trackers or open saves). */
static float *snapshot(dlrm_model *m)
{
    float *out = malloc((size_t)TABLES * ROWS * DIM * sizeof *out);
    int64_t idx[ROWS], off[ROWS];
    for (int64_t i = 0; i < ROWS; i++)
        idx[i] = off[i] = i;
    for (uint32_t t = 0; t < TABLES; t++)
        assert_status(CPR_OK, cpr_emb_forward(dlrm_model_table(m, t), idx, ROWS, off, ROWS,
                                              CPR_POOL_SUM, out + (size_t)t * ROWS * DIM));
    return out;
}

/* ---- a run: model, loader, trainer and optional checkpointer ----------------------- */

typedef struct run {
    dlrm_model *model;
    dlrm_loader *loader;
    dlrm_trainer *trainer;
    dlrm_ckpt *ck;
    dlrm_hooks inner;         /* the checkpointer's hooks, wrapped by the test */
    uint64_t n_losses;
    uint64_t loss_step[2 * MAX_STEPS];
    double loss[2 * MAX_STEPS];
    /* test-specific state */
    cpr_failure failure;
    int failure_checked;
    float *staged[64];        /* snapshot at each save's gather, by checkpoint id */
    int killed, restarted;
    uint64_t killed_id;
} run;

static void on_progress(void *ctx, const dlrm_progress *p)
{
    run *r = ctx;
    if (p->eval || r->n_losses >= 2 * MAX_STEPS)
        return;
    r->loss_step[r->n_losses] = p->step;
    r->loss[r->n_losses++] = p->loss;
}

static void run_open(run *r, unsigned track)
{
    memset(r, 0, sizeof *r);
    dlrm_config c;
    small_config(&c, track);
    assert_status(CPR_OK, dlrm_model_create(&c, &r->model));
    dlrm_loader_options lo = {.path = fx->data, .num_tables = TABLES, .table_rows = ROWS};
    assert_status(CPR_OK, dlrm_loader_open(&lo, &r->loader));
}

static cpr_status run_train(run *r, uint64_t steps, const dlrm_hooks *hooks)
{
    dlrm_train_options to = {.steps = steps, .batch = BATCH, .log_every = 1,
                             .progress = on_progress, .progress_ctx = r};
    assert_status(CPR_OK, dlrm_trainer_create(r->model, r->loader, &to, hooks, &r->trainer));
    return dlrm_trainer_run(r->trainer, NULL);
}

static void run_close(run *r)
{
    dlrm_ckpt_destroy(r->ck);
    dlrm_trainer_destroy(r->trainer);
    dlrm_loader_close(r->loader);
    dlrm_model_destroy(r->model);
    for (size_t i = 0; i < 64; i++)
        free(r->staged[i]);
}

static void base_options(dlrm_ckpt_options *o, const char *job, uint64_t steps)
{
    memset(o, 0, sizeof *o);
    o->target = fx->target;
    o->job = job;
    o->total_steps = steps;
    o->interval_steps = 10;
    o->timeout_s = 10;
}

static double executed(run *r)
{
    dlrm_run_result rr;
    dlrm_trainer_times(r->trainer, &rr);
    return (double)rr.steps;
}

/* ---- partial recovery ---------------------------------------------------------------- */

static cpr_status partial_after(void *ctx, dlrm_trainer *tr)
{
    run *r = ctx;
    dlrm_ckpt_stats before, after;
    dlrm_ckpt_stats_get(r->ck, &before);
    cpr_status st = r->inner.after_step(r->ck, tr);
    dlrm_ckpt_stats_get(r->ck, &after);
    if (after.saves_started > before.saves_started) { /* gathered just now */
        assert_true(after.saves_started < 64);
        r->staged[after.saves_started] = snapshot(r->model); /* ids start at 1 */
    }
    return st;
}

static cpr_status partial_before(void *ctx, dlrm_trainer *tr)
{
    run *r = ctx;
    if (r->failure_checked || executed(r) < (double)r->failure.step)
        return r->inner.before_step(r->ck, tr);
    float *pre = snapshot(r->model);
    cpr_status st = r->inner.before_step(r->ck, tr);
    assert_status(CPR_OK, st);
    float *post = snapshot(r->model);
    dlrm_ckpt_stats s;
    dlrm_ckpt_stats_get(r->ck, &s);
    assert_int_equal(s.failures, 1);
    assert_int_equal(s.recoveries, 1);
    assert_int_equal(s.last_committed, 5);
    assert_int_equal(s.last_committed_step, 41);
    const float *committed = r->staged[s.last_committed];
    assert_non_null(committed);
    cpr_emb *e0 = dlrm_model_table(r->model, 0);
    size_t restored = 0, changed = 0;
    for (uint32_t t = 0; t < TABLES; t++)
        for (uint64_t row = 0; row < ROWS; row++) {
            size_t at = ((size_t)t * ROWS + row) * DIM;
            const float *want = cpr_emb_shard_of(e0, row) == r->failure.shard ? committed + at
                                                                               : pre + at;
            assert_memory_equal(post + at, want, DIM * sizeof(float));
            if (cpr_emb_shard_of(e0, row) == r->failure.shard) {
                restored++;
                changed += memcmp(pre + at, post + at, DIM * sizeof(float)) != 0;
            }
        }
    assert_int_equal(restored, (size_t)TABLES * (ROWS / SHARDS));
    assert_true(changed > 0); /* the failure really lost updates */
    r->failure_checked = 1;
    free(pre);
    free(post);
    return st;
}

static void test_partial_restores_newest_committed(void **state)
{
    (void)state;
    start_daemon("partial");
    run r;
    run_open(&r, dlrm_ckpt_policy_track(DLRM_CKPT_FULL));
    r.failure = (cpr_failure){.step = 47, .shard = 1};
    dlrm_ckpt_options o;
    base_options(&o, "partial", 60);
    o.policy = DLRM_CKPT_FULL;
    o.recovery = DLRM_RECOVER_PARTIAL;
    o.sync = 1; /* saves at steps 1, 11, ..., 41: the failure at 47 loses 6 steps */
    o.failures = &r.failure;
    o.n_failures = 1;
    assert_status(CPR_OK, dlrm_ckpt_create(&o, r.model, &r.ck));
    r.inner = dlrm_ckpt_hooks(r.ck);
    dlrm_hooks h = r.inner;
    h.ctx = &r;
    h.before_step = partial_before;
    h.after_step = partial_after;
    h.on_finish = NULL;
    h.on_summary = NULL;
    assert_status(CPR_OK, run_train(&r, 60, &h));
    assert_status(CPR_OK, r.inner.on_finish(r.ck, r.trainer));
    assert_true(r.failure_checked);
    dlrm_ckpt_stats s;
    dlrm_ckpt_stats_get(r.ck, &s);
    assert_true(s.lost_events > 0); /* partial recovery loses the unsaved updates */
    assert_int_equal(dlrm_model_step(r.model), 60);
    run_close(&r);
    ch_stop(&fx->d);
}

/* ---- full recovery ------------------------------------------------------------------- */

static void test_full_recovery_recomputes(void **state)
{
    (void)state;
    start_daemon("full");
    run base, full;
    run_open(&base, 0);
    assert_status(CPR_OK, run_train(&base, 60, NULL));
    run_open(&full, dlrm_ckpt_policy_track(DLRM_CKPT_FULL));
    full.failure = (cpr_failure){.step = 37, .shard = 0};
    dlrm_ckpt_options o;
    base_options(&o, "full", 60);
    o.policy = DLRM_CKPT_FULL;
    o.recovery = DLRM_RECOVER_FULL;
    o.sync = 1; /* saves at steps 1, 11, 21, 31: the failure at 37 rewinds to 31 */
    o.failures = &full.failure;
    o.n_failures = 1;
    assert_status(CPR_OK, dlrm_ckpt_create(&o, full.model, &full.ck));
    dlrm_hooks h = dlrm_ckpt_hooks(full.ck);
    assert_status(CPR_OK, run_train(&full, 60, &h));
    dlrm_ckpt_stats s;
    dlrm_ckpt_stats_get(full.ck, &s);
    assert_int_equal(s.failures, 1);
    assert_int_equal(s.recoveries, 1);
    assert_true(s.lost_s > 0);
    assert_int_equal(s.lost_events, 0);
    /* Steps were recomputed: the run logged more steps than it advanced. */
    assert_true(full.n_losses > 60);
    assert_int_equal(base.n_losses, 60);
    size_t repeats = 0;
    for (size_t i = 0; i < full.n_losses; i++) {
        uint64_t step = full.loss_step[i];
        assert_true(step >= 1 && step <= 60);
        assert_int_equal(base.loss_step[step - 1], step);
        /* bit-identical to the failure-free run, recomputed steps included */
        assert_memory_equal(&full.loss[i], &base.loss[step - 1], sizeof(double));
        repeats += i > 0 && step <= full.loss_step[i - 1];
    }
    assert_int_equal(repeats, 1); /* one rewind */
    assert_int_equal(full.n_losses, 60 + (37 - 31));
    float *a = snapshot(base.model), *b = snapshot(full.model);
    assert_memory_equal(a, b, (size_t)TABLES * ROWS * DIM * sizeof(float));
    free(a);
    free(b);
    size_t len = dlrm_model_dense_bytes(base.model), la = 0, lb = 0;
    void *da = malloc(len), *db = malloc(len);
    assert_status(CPR_OK, dlrm_model_dense_save(base.model, da, len, &la));
    assert_status(CPR_OK, dlrm_model_dense_save(full.model, db, len, &lb));
    assert_memory_equal(da, db, len);
    free(da);
    free(db);
    run_close(&base);
    run_close(&full);
    ch_stop(&fx->d);
}

/* ---- ckptd killed mid-save ----------------------------------------------------------- */

static void kill_on_second(void *ctx, uint64_t checkpoint)
{
    run *r = ctx;
    if (checkpoint != 2 || r->killed)
        return;
    ch_kill(&fx->d); /* rows and blobs are queued; the commit has not started */
    r->killed = 1;
    r->killed_id = checkpoint;
}

static cpr_status restart_after_failed(void *ctx, dlrm_trainer *tr)
{
    run *r = ctx;
    cpr_status st = r->inner.after_step(r->ck, tr);
    dlrm_ckpt_stats s;
    dlrm_ckpt_stats_get(r->ck, &s);
    if (r->killed && !r->restarted && s.saves_failed >= 1) {
        char addr[256];
        snprintf(addr, sizeof addr, "%s", fx->d.addr);
        const char *extra[] = {"--listen", addr, NULL};
        ch_start_args(&fx->d, fx->store, extra);
        assert_string_equal(fx->d.addr, addr);
        r->restarted = 1;
    }
    return st;
}

static void test_ckptd_killed_mid_save(void **state)
{
    (void)state;
    start_daemon("kill");
    run r;
    run_open(&r, dlrm_ckpt_policy_track(DLRM_CKPT_FULL));
    dlrm_ckpt_options o;
    base_options(&o, "kill", 80);
    o.policy = DLRM_CKPT_FULL;
    o.timeout_s = 5;
    /* Each save's commit still runs on the commit thread, but training waits
     * for it: saves at steps 1, 11 (killed), 21, ..., 71 whatever the speed
     * of the daemon. */
    o.sync = 1;
    o.staged = kill_on_second;
    o.staged_ctx = &r;
    assert_status(CPR_OK, dlrm_ckpt_create(&o, r.model, &r.ck));
    r.inner = dlrm_ckpt_hooks(r.ck);
    dlrm_hooks h = r.inner;
    h.ctx = &r;
    h.before_step = NULL;
    h.after_step = restart_after_failed;
    h.on_finish = NULL;
    h.on_summary = NULL;
    assert_status(CPR_OK, run_train(&r, 80, &h)); /* the trainer survives */
    assert_status(CPR_OK, r.inner.on_finish(r.ck, r.trainer));
    assert_true(r.killed && r.restarted);
    dlrm_ckpt_stats s;
    dlrm_ckpt_stats_get(r.ck, &s);
    /* Saves right after the restart may still fail: the client's channel
     * backs off before reconnecting (the gRPC default), and each such save
     * is refused within its deadline. A later one commits. */
    assert_int_equal(s.saves_started, 8);
    assert_true(s.saves_failed >= 1);
    assert_int_equal(s.saves_committed + s.saves_failed, 8);
    assert_true(s.saves_committed >= 2);
    assert_int_equal(s.last_committed, 8); /* the last save succeeded */
    assert_int_equal(s.last_committed_step, 71);
    /* Nothing of the killed save is visible, committed or open. */
    cpr_client *c = NULL;
    cpr_part_info *parts = NULL;
    size_t n = 0;
    uint64_t cut = 0;
    assert_status(CPR_OK, cpr_client_open(fx->target, NULL, &c));
    assert_status(CPR_OK, cpr_client_list(c, "kill", &parts, &n));
    for (size_t i = 0; i < n; i++) {
        assert_true(parts[i].checkpoint != r.killed_id);
        assert_true(parts[i].committed);
    }
    assert_status(CPR_OK, cpr_client_latest_cut(c, "kill", &cut));
    assert_int_equal(cut, s.last_committed);
    free(parts);
    cpr_client_close(c);
    run_close(&r);
    ch_stop(&fx->d);
}

/* ---- the trainer killed and resumed -------------------------------------------------- */

/* Run cpr-dlrm with the common flags and `extra`; returns the wait status. */
static int run_cli(const char *log, const char *const *extra)
{
    const char *argv[64] = {"cpr-dlrm", "--data", fx->data, "--tables", "8", "--table-rows",
                            "500", "--emb-dim", "4", "--bottom", "13-8-4", "--top", "8-1",
                            "--batch", "16", "--shards", "2", "--holdout", "0.2",
                            "--steps", "80", "--quiet", "--json-log", log};
    size_t argc = 24;
    for (size_t i = 0; extra && extra[i]; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, STDERR_FILENO);
        execv(CPR_DLRM_PATH, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

/* The last event named `name` of a log (parsed; cpri_json_free it). */
static cpri_json *last_event(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    cpri_json *found = NULL;
    while (getline(&line, &cap, f) > 0) {
        cpri_json *ev = cpri_json_parse(line);
        const char *event = NULL;
        assert_non_null(ev);
        if (cpri_json_get_string(ev, "event", &event) == 0 && strcmp(event, name) == 0) {
            cpri_json_free(found);
            found = ev;
        } else {
            cpri_json_free(ev);
        }
    }
    free(line);
    fclose(f);
    return found;
}

static double number(const cpri_json *ev, const char *key)
{
    double v = NAN;
    assert_int_equal(cpri_json_get_number(ev, key, &v), 0);
    return v;
}

/* The resumed run (from the cut at step 51 of an 80-step run) ran only the
 * rest and ended with the uninterrupted run's AUC; *a and *b get both
 * summaries (cpri_json_free them). */
static void resumed_like_base(const char *base_log, const char *resume_log, cpri_json **a,
                              cpri_json **b)
{
    *a = last_event(base_log, "summary");
    *b = last_event(resume_log, "summary");
    assert_non_null(*a);
    assert_non_null(*b);
    assert_true(number(*b, "steps") == 80 - 51); /* only the rest ran here */
    assert_true(number(*a, "auc") == number(*b, "auc"));
}

static void test_trainer_killed_and_resumed(void **state)
{
    (void)state;
    start_daemon("resume");
    char base_log[600], crash_log[600], resume_log[600];
    snprintf(base_log, sizeof base_log, "%s/base.jsonl", fx->dir);
    snprintf(crash_log, sizeof crash_log, "%s/crash.jsonl", fx->dir);
    snprintf(resume_log, sizeof resume_log, "%s/resume.jsonl", fx->dir);
    int status = run_cli(base_log, NULL);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const char *crash[] = {"--ckpt", fx->target, "--job", "resume", "--policy", "full",
                           "--ckpt-interval-steps", "10", "--ckpt-sync", "--crash-at-step", "55",
                           NULL};
    status = run_cli(crash_log, crash);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_null(last_event(crash_log, "summary")); /* it died before finishing */
    /* Without --resume the job is refused (exit 1), with it the run continues. */
    const char *again[] = {"--ckpt", fx->target, "--job", "resume", NULL};
    status = run_cli(resume_log, again);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    /* A resume by a model of other tables (the flags given later win): refused
     * (exit 1) before anything is restored. */
    char other_log[600];
    snprintf(other_log, sizeof other_log, "%s/other.jsonl", fx->dir);
    const char *other[] = {"--ckpt", fx->target, "--job", "resume", "--policy", "full",
                           "--table-rows", "1000", "--resume", NULL};
    status = run_cli(other_log, other);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    assert_null(last_event(other_log, "recovery"));
    const char *resume[] = {"--ckpt", fx->target, "--job", "resume", "--policy", "full",
                            "--ckpt-interval-steps", "10", "--ckpt-sync", "--resume", NULL};
    status = run_cli(resume_log, resume);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cpri_json *rec = last_event(resume_log, "recovery");
    assert_non_null(rec);
    const char *mode = NULL;
    assert_int_equal(cpri_json_get_string(rec, "mode", &mode), 0);
    assert_string_equal(mode, "full");
    assert_true(number(rec, "cut") >= 1);
    /* saves at steps 1, 11, ..., 51: the cut is the save of step 51 */
    assert_true(number(rec, "step") == 51);
    cpri_json_free(rec);
    cpri_json *a = NULL, *b = NULL;
    resumed_like_base(base_log, resume_log, &a, &b);
    assert_true(number(a, "logloss") == number(b, "logloss"));
    cpri_json_free(a);
    cpri_json_free(b);
    ch_stop(&fx->d);
}

/* A trainer killed with a save staged and not committed (--crash-mid-save:
 * saves at steps 1, 11, ..., 51 committed, checkpoint 7 staged at step 55,
 * its Begins sent or not yet, SIGKILL before its commit): nothing of
 * checkpoint 7 is committed or in a cut, and a resumed run goes on from
 * checkpoint 6 (step 51) to the AUC of an uninterrupted run. */
static void test_trainer_killed_mid_save(void **state)
{
    (void)state;
    start_daemon("midsave");
    char base_log[600], crash_log[600], resume_log[600];
    snprintf(base_log, sizeof base_log, "%s/mid-base.jsonl", fx->dir);
    snprintf(crash_log, sizeof crash_log, "%s/mid-crash.jsonl", fx->dir);
    snprintf(resume_log, sizeof resume_log, "%s/mid-resume.jsonl", fx->dir);
    int status = run_cli(base_log, NULL);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const char *crash[] = {"--ckpt", fx->target, "--job", "midsave", "--policy", "full",
                           "--ckpt-interval-steps", "10", "--ckpt-sync", "--crash-at-step", "55",
                           "--crash-mid-save", NULL};
    status = run_cli(crash_log, crash);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    cpr_client *c = NULL;
    cpr_part_info *parts = NULL;
    size_t n = 0;
    uint64_t cut = 0;
    assert_status(CPR_OK, cpr_client_open(fx->target, NULL, &c));
    assert_status(CPR_OK, cpr_client_list(c, "midsave", &parts, &n));
    size_t committed = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(parts[i].checkpoint <= 7);
        if (parts[i].checkpoint == 7)
            assert_false(parts[i].committed); /* begun at most, never committed */
        committed += parts[i].committed != 0;
    }
    assert_int_equal(committed, 6 * 2); /* checkpoints 1..6, two shards each */
    free(parts);
    assert_status(CPR_OK, cpr_client_latest_cut(c, "midsave", &cut));
    assert_int_equal(cut, 6);
    const char *resume[] = {"--ckpt", fx->target, "--job", "midsave", "--policy", "full",
                            "--ckpt-interval-steps", "10", "--ckpt-sync", "--resume", NULL};
    status = run_cli(resume_log, resume);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cpri_json *rec = last_event(resume_log, "recovery");
    assert_non_null(rec);
    assert_true(number(rec, "cut") == 6);
    assert_true(number(rec, "step") == 51);
    cpri_json_free(rec);
    cpri_json *a = NULL, *b = NULL;
    resumed_like_base(base_log, resume_log, &a, &b);
    cpri_json_free(a);
    cpri_json_free(b);
    /* Nothing saved at step 55 was ever committed: the resumed run's saves
     * are of steps 52, 62 and 72 (numbered past what the node had of the
     * dead run: 7 again when its Begins never left the process, 8 on when
     * they did). */
    assert_status(CPR_OK, cpr_client_list(c, "midsave", &parts, &n));
    for (size_t i = 0; i < n; i++)
        if (parts[i].committed && parts[i].checkpoint >= 7)
            assert_true(parts[i].step != 55);
    free(parts);
    cpr_client_close(c);
    ch_stop(&fx->d);
}

/* Saves larger than the staging budget (--staging-mb 2, the client's least,
 * against FULL saves of 8 x 20,000 rows, 4.5 MB): the documented policy is to
 * wait for the wire, never to grow. Every save commits whole, every event
 * says within_budget: false, and each checkpoint holds every row. */
static void test_save_over_staging_budget(void **state)
{
    (void)state;
    start_daemon("budget");
    char log[600];
    snprintf(log, sizeof log, "%s/budget.jsonl", fx->dir);
    const char *extra[] = {"--ckpt", fx->target, "--job", "budget", "--policy", "full",
                           "--ckpt-interval-steps", "10", "--ckpt-sync", "--table-rows", "20000",
                           "--staging-mb", "2", NULL};
    int status = run_cli(log, extra);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0, events = 0;
    while (getline(&line, &cap, f) > 0) {
        cpri_json *ev = cpri_json_parse(line);
        const char *name = NULL;
        int flag = -1;
        assert_non_null(ev);
        if (cpri_json_get_string(ev, "event", &name) == 0 && strcmp(name, "checkpoint") == 0) {
            events++;
            assert_int_equal(cpri_json_get_bool(ev, "committed", &flag), 0);
            assert_int_equal(flag, 1);
            assert_int_equal(cpri_json_get_bool(ev, "within_budget", &flag), 0);
            assert_int_equal(flag, 0);
            assert_true(number(ev, "bytes") > 2.0 * 1048576);
        }
        cpri_json_free(ev);
    }
    free(line);
    fclose(f);
    assert_int_equal(events, 8); /* steps 1, 11, ..., 71 */
    cpr_client *c = NULL;
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_client_open(fx->target, NULL, &c));
    assert_status(CPR_OK, cpr_client_list(c, "budget", &parts, &n));
    uint64_t rows[9] = {0};
    for (size_t i = 0; i < n; i++) {
        assert_true(parts[i].committed && parts[i].checkpoint >= 1 && parts[i].checkpoint <= 8);
        rows[parts[i].checkpoint] += parts[i].rows;
    }
    for (int k = 1; k <= 8; k++)
        assert_int_equal(rows[k], 8 * 20000);
    free(parts);
    cpr_client_close(c);
    ch_stop(&fx->d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partial_restores_newest_committed),
        cmocka_unit_test(test_full_recovery_recomputes),
        cmocka_unit_test(test_ckptd_killed_mid_save),
        cmocka_unit_test(test_trainer_killed_and_resumed),
        cmocka_unit_test(test_trainer_killed_mid_save),
        cmocka_unit_test(test_save_over_staging_budget),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
