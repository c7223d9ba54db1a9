/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `cpr-analyze report RUN.jsonl ...`: the tables and plots of `simulate`
 * from real training runs. Each file is one run's event log in the schema
 * of docs/model.md (one JSON object per line). The run's time breakdown and
 * totals come from its summary event when it has one (the trainer measures
 * them directly), else they are summed from the events; the model columns
 * evaluate the closed form with the run's own measured costs at its own
 * interval, so a reader sees how far the run was from the model.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "cpr_cli.h"
#include "cpr_common.h"

#define MAX_RUNS 64

/* Recovery modes of the schema; by_mode counts them in this order. */
static const char *const MODES[3] = {"partial", "full", "restart-from-scratch"};

/* A run's log, summed. Times in seconds. */
typedef struct run_log {
    const char *path;
    char strategy[64];
    uint64_t line;                     /* the line being read, for messages */
    uint64_t checkpoints, committed, failures, recoveries, by_mode[3], steps;
    double stall_s, load_s, restart_s, lost_s, bytes_written, rows_saved;
    double background_s;               /* steps slowed by saves in flight (summary) */
    double rows_restored, bytes_restored, lost_events, update_events;
    double first_commit_t, last_commit_t, last_t;
    double auc, logloss;
    int have_eval, have_auc, have_update_events, have_summary;
    uint32_t shards;
    double fraction;                   /* rows a prioritized save takes; 1 otherwise */
    double compute_s;                  /* failure-free time: the job's T_total */
    double wall_s;                     /* the whole run, end to end */
    double *loss_step, *loss;          /* the loss curve */
    size_t n_loss, cap_loss;
} run_log;

/* What a run comes to: measured, and the model at its interval. */
typedef struct run_result {
    double interval_s, save_interval_s;
    double overhead_frac, save_frac, load_frac, lost_frac, restart_frac, pls;
    double background_frac;
    int have_pls, have_model;
    double model_overhead_frac, model_pls, mtbf_s;
    int have_slowdown;                 /* a "none" run is in the report */
    double slowdown_frac;              /* wall_s over the "none" run's, minus 1 */
} run_result;

/* ---- reading a log ------------------------------------------------------------------- */

static int bad_field(const run_log *r, const char *event, const char *key, const char *type)
{
    fprintf(stderr, "cpr-analyze: %s:%llu: a '%s' event needs %s \"%s\" (docs/model.md)\n",
            r->path, (unsigned long long)r->line, event, type, key);
    return -1;
}

/* Required numeric fields of an event, in order; -1 with the error printed. */
static int need_numbers(const run_log *r, const cpri_json *ev, const char *event,
                        const char *const *keys, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (cpri_json_get_number(ev, keys[i], &out[i]))
            return bad_field(r, event, keys[i], "a number");
    return 0;
}

static double opt_number(const cpri_json *ev, const char *key, double fallback)
{
    double v = fallback;
    cpri_json_get_number(ev, key, &v);
    return v;
}

static int ev_step(run_log *r, const cpri_json *ev)
{
    static const char *const keys[] = {"step", "loss"};
    double v[2];
    if (need_numbers(r, ev, "step", keys, v, 2))
        return -1;
    if (cpri_json_get_number(ev, "update_events", &r->update_events) == 0)
        r->have_update_events = 1;
    if (r->n_loss == r->cap_loss) {
        size_t cap = r->cap_loss ? 2 * r->cap_loss : 256;
        double *steps = realloc(r->loss_step, cap * sizeof *steps);
        if (steps)
            r->loss_step = steps;
        double *loss = steps ? realloc(r->loss, cap * sizeof *loss) : NULL;
        if (!loss) {
            fprintf(stderr, "cpr-analyze: out of memory reading %s\n", r->path);
            return -1;
        }
        r->loss = loss;
        r->cap_loss = cap;
    }
    r->loss_step[r->n_loss] = v[0];
    r->loss[r->n_loss++] = v[1];
    r->steps = v[0] > (double)r->steps ? (uint64_t)v[0] : r->steps;
    return 0;
}

static int ev_checkpoint(run_log *r, const cpri_json *ev, double t)
{
    static const char *const keys[] = {"step", "checkpoint", "rows", "bytes", "stall_ms",
                                       "duration_ms"};
    double v[6];
    const char *kind = NULL, *policy = NULL;
    int committed = 0;
    if (need_numbers(r, ev, "checkpoint", keys, v, 6))
        return -1;
    if (cpri_json_get_string(ev, "kind", &kind))
        return bad_field(r, "checkpoint", "kind", "a string");
    if (cpri_json_get_string(ev, "policy", &policy))
        return bad_field(r, "checkpoint", "policy", "a string");
    if (cpri_json_get_bool(ev, "committed", &committed))
        return bad_field(r, "checkpoint", "committed", "a boolean");
    r->checkpoints++;
    r->stall_s += (v[4] + opt_number(ev, "settle_ms", 0.0)) / 1000.0; /* settle: newer logs */
    r->bytes_written += v[3];
    r->rows_saved += v[2];
    if (committed) {
        if (r->committed++ == 0)
            r->first_commit_t = t;
        r->last_commit_t = t;
    }
    return 0;
}

static int ev_failure(run_log *r, const cpri_json *ev)
{
    static const char *const keys[] = {"step", "shard"};
    double v[2];
    if (need_numbers(r, ev, "failure", keys, v, 2))
        return -1;
    r->failures++;
    return 0;
}

static int ev_recovery(run_log *r, const cpri_json *ev)
{
    static const char *const keys[] = {"step", "rows", "bytes", "ms"};
    double v[4];
    const char *mode = NULL, *reason = NULL;
    if (need_numbers(r, ev, "recovery", keys, v, 4))
        return -1;
    if (cpri_json_get_string(ev, "reason", &reason))
        return bad_field(r, "recovery", "reason", "a string");
    if (cpri_json_get_string(ev, "mode", &mode))
        return bad_field(r, "recovery", "mode", "a string");
    int m = 0;
    while (m < 3 && strcmp(mode, MODES[m]) != 0)
        m++;
    if (m == 3)
        return bad_field(r, "recovery", "mode", "partial, full or restart-from-scratch as");
    r->recoveries++;
    r->by_mode[m]++;
    r->rows_restored += v[1];
    r->bytes_restored += v[2];
    r->load_s += v[3] / 1000.0;
    r->restart_s += opt_number(ev, "restart_ms", 0.0) / 1000.0;
    r->lost_s += opt_number(ev, "lost_ms", 0.0) / 1000.0;
    r->lost_events += opt_number(ev, "lost_events", 0.0);
    return 0;
}

static int ev_eval(run_log *r, const cpri_json *ev)
{
    static const char *const keys[] = {"step", "logloss"};
    double v[2];
    if (need_numbers(r, ev, "eval", keys, v, 2))
        return -1;
    /* "auc" is left out when the held-out part has one class (docs/dlrm.md) */
    r->have_auc = cpri_json_get_number(ev, "auc", &r->auc) == 0;
    r->logloss = v[1];
    r->have_eval = 1;
    return 0;
}

/* The summary's totals replace the sums of the events. */
static int ev_summary(run_log *r, const cpri_json *ev)
{
    static const char *const keys[] = {"shards", "steps", "compute_s", "save_s", "load_s",
                                       "lost_s", "restart_s", "update_events", "lost_events",
                                       "bytes_written", "failures"};
    double v[11];
    const char *strategy = NULL;
    if (need_numbers(r, ev, "summary", keys, v, 11))
        return -1;
    if (cpri_json_get_string(ev, "strategy", &strategy))
        return bad_field(r, "summary", "strategy", "a string");
    if (v[0] < 1 || v[2] <= 0)
        return bad_field(r, "summary", v[0] < 1 ? "shards" : "compute_s", "a positive number");
    snprintf(r->strategy, sizeof r->strategy, "%s", strategy);
    r->shards = (uint32_t)v[0];
    r->steps = (uint64_t)v[1];
    r->compute_s = v[2];
    r->stall_s = v[3], r->load_s = v[4], r->lost_s = v[5], r->restart_s = v[6];
    r->update_events = v[7], r->lost_events = v[8], r->bytes_written = v[9];
    r->failures = (uint64_t)v[10];
    r->have_update_events = 1;
    r->fraction = opt_number(ev, "fraction", 1.0);
    r->wall_s = opt_number(ev, "wall_s", opt_number(ev, "total_s", 0.0));
    r->background_s = fmax(opt_number(ev, "background_s", 0.0), 0.0); /* older logs: 0 */
    r->have_summary = 1;
    return 0;
}

static int handle_event(run_log *r, const cpri_json *ev)
{
    const char *event = NULL;
    double t = 0;
    if (!cpri_json_is_object(ev) || cpri_json_get_string(ev, "event", &event)) {
        fprintf(stderr, "cpr-analyze: %s:%llu: not a JSON object with a string \"event\"\n",
                r->path, (unsigned long long)r->line);
        return -1;
    }
    if (cpri_json_get_number(ev, "t_s", &t) || !(t >= 0))
        return bad_field(r, event, "t_s", "a number >= 0");
    r->last_t = t > r->last_t ? t : r->last_t;
    if (strcmp(event, "step") == 0)
        return ev_step(r, ev);
    if (strcmp(event, "checkpoint") == 0)
        return ev_checkpoint(r, ev, t);
    if (strcmp(event, "failure") == 0)
        return ev_failure(r, ev);
    if (strcmp(event, "recovery") == 0)
        return ev_recovery(r, ev);
    if (strcmp(event, "eval") == 0)
        return ev_eval(r, ev);
    if (strcmp(event, "summary") == 0)
        return ev_summary(r, ev);
    return 0; /* events of later schema versions are skipped */
}

/* The strategy when the log has no summary: the file name without .jsonl. */
static void default_strategy(run_log *r)
{
    const char *base = strrchr(r->path, '/');
    base = base ? base + 1 : r->path;
    snprintf(r->strategy, sizeof r->strategy, "%s", base);
    char *dot = strstr(r->strategy, ".jsonl");
    if (dot)
        *dot = '\0';
}

static int read_log(run_log *r)
{
    FILE *f = fopen(r->path, "r");
    if (!f) {
        fprintf(stderr, "cpr-analyze: report: cannot read %s: %s\n", r->path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    default_strategy(r);
    r->fraction = 1.0;
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        r->line++;
        if (strspn(line, " \t\r\n") == strlen(line))
            continue; /* blank lines are allowed */
        cpri_json *ev = cpri_json_parse(line);
        rc = ev ? handle_event(r, ev) : -1;
        if (!ev)
            fprintf(stderr, "cpr-analyze: %s:%llu: not valid JSON\n", r->path,
                    (unsigned long long)r->line);
        cpri_json_free(ev);
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "cpr-analyze: report: error reading %s\n", r->path);
        rc = -1;
    }
    free(line);
    fclose(f);
    return rc;
}

static void run_release(run_log *r)
{
    free(r->loss_step);
    free(r->loss);
}

/* ---- what a run comes to ------------------------------------------------------------- */

/* The run's most common recovery mode (index into MODES). */
static int dominant_mode(const run_log *r)
{
    int m = 0;
    for (int i = 1; i < 3; i++)
        m = r->by_mode[i] > r->by_mode[m] ? i : m;
    return m;
}

/* A restart from scratch recomputes like a full recovery: both use its model. */
static int dominant_full(const run_log *r)
{
    return dominant_mode(r) != 0;
}

static const char *run_mode(const run_log *r)
{
    return r->recoveries == 0 ? "none" : MODES[dominant_mode(r)];
}

/* The closed form with the run's own costs at the run's own interval. */
static void run_model(const run_log *r, run_result *out)
{
    if (r->failures == 0 || r->recoveries == 0 || out->save_interval_s <= 0 || r->shards < 1 ||
        r->checkpoints == 0)
        return;
    double per_recovery = 1.0 / (double)r->recoveries, tiny = 1e-12;
    int full = dominant_full(r);
    cpr_model_params p = {
        .mtbf_s = r->compute_s / (double)r->failures, .shards = r->shards,
        .save_s = fmax(r->stall_s / (double)r->checkpoints / r->fraction, tiny),
        /* the model's partial load is o_load / N: a partial load is o_load / N */
        .load_s = fmax(r->load_s * per_recovery * (full ? 1.0 : r->shards), tiny),
        .restart_s = fmax(r->restart_s * per_recovery, tiny),
        .job_s = r->compute_s, .target_pls = 0.5, .formula = CPR_INTERVAL_YOUNG};
    cpr_overhead m;
    cpr_status st = full ? cpr_model_full(&p, out->interval_s, &m)
                         : cpr_model_partial(&p, out->interval_s, &m);
    if (st)
        return;
    out->have_model = 1;
    out->model_overhead_frac = m.overhead_frac;
    out->model_pls = m.pls;
    out->mtbf_s = p.mtbf_s;
}

static int run_compute(run_log *r, run_result *out)
{
    memset(out, 0, sizeof *out);
    if (!r->have_summary) /* the restart is emulated: never in t_s (docs/dlrm.md) */
        r->compute_s = r->last_t - (r->stall_s + r->load_s + r->lost_s);
    if (!(r->compute_s > 0)) {
        fprintf(stderr, "cpr-analyze: report: %s: no failure-free time to divide by (no "
                "summary event, and the events' t_s do not exceed their overheads)\n", r->path);
        return -1;
    }
    if (!(r->fraction > 0 && r->fraction <= 1))
        r->fraction = 1.0;
    if (!(r->wall_s > 0))
        r->wall_s = r->last_t;
    double job = r->compute_s;
    if (r->committed >= 2)
        out->save_interval_s = (r->last_commit_t - r->first_commit_t) / (double)(r->committed - 1);
    out->interval_s = out->save_interval_s / r->fraction;
    out->save_frac = r->stall_s / job;
    out->load_frac = r->load_s / job;
    out->lost_frac = r->lost_s / job;
    out->restart_frac = r->restart_s / job;
    out->background_frac = r->background_s / job;
    out->overhead_frac = out->save_frac + out->load_frac + out->lost_frac + out->restart_frac +
                         out->background_frac;
    out->have_pls = r->have_update_events && r->update_events > 0;
    out->pls = out->have_pls ? r->lost_events / r->update_events : 0.0;
    run_model(r, out);
    return 0;
}

/* overhead_frac divides by each run's own compute time, which checkpoint
 * streaming, commits and the storage's compactions stretch when they share
 * the cores; the end-to-end time against the baseline run shows that too. */
static void compare_with_baseline(const run_log *runs, run_result *res, size_t n)
{
    const run_log *base = NULL;
    for (size_t i = 0; i < n && !base; i++)
        if (strcmp(runs[i].strategy, "none") == 0 && runs[i].wall_s > 0)
            base = &runs[i];
    for (size_t i = 0; base && i < n; i++) {
        res[i].have_slowdown = runs[i].wall_s > 0;
        res[i].slowdown_frac = runs[i].wall_s / base->wall_s - 1.0;
    }
}

/* ---- output ------------------------------------------------------------------------- */

static void print_table(const run_log *runs, const run_result *res, size_t n)
{
    printf("cpr-analyze report: %zu run%s\n\n", n, n == 1 ? "" : "s");
    printf("%-12s %-8s %10s %8s %9s %8s %8s %8s %8s %8s %10s %12s %7s %8s %9s %9s %9s\n",
           "strategy", "recovery", "interval_s", "failures", "overhead", "save", "load", "lost",
           "restart", "backgr", "PLS", "bytes", "AUC", "logloss", "model", "model PLS",
           "wall/none");
    for (size_t i = 0; i < n; i++) {
        const run_log *r = &runs[i];
        const run_result *o = &res[i];
        printf("%-12s %-8s %10.1f %8llu %8.3f%% %7.3f%% %7.3f%% %7.3f%% %7.3f%% %7.3f%% ",
               r->strategy, run_mode(r), o->interval_s, (unsigned long long)r->failures,
               100 * o->overhead_frac, 100 * o->save_frac, 100 * o->load_frac,
               100 * o->lost_frac, 100 * o->restart_frac, 100 * o->background_frac);
        if (o->have_pls)
            printf("%10.4g ", o->pls);
        else
            printf("%10s ", "-");
        printf("%12.0f ", r->bytes_written);
        if (r->have_auc)
            printf("%7.4f ", r->auc);
        else
            printf("%7s ", "-");
        if (r->have_eval)
            printf("%8.4f ", r->logloss);
        else
            printf("%8s ", "-");
        if (o->have_model)
            printf("%8.3f%% %9.4g ", 100 * o->model_overhead_frac, o->model_pls);
        else
            printf("%9s %9s ", "-", "-");
        if (o->have_slowdown)
            printf("%+8.1f%%\n", 100 * o->slowdown_frac);
        else
            printf("%9s\n", "-");
    }
    if (n && res[0].have_slowdown)
        printf("\noverhead: over the run's own compute time (backgr: steps slowed while a "
               "save streamed); wall/none: its whole time over the \"none\" run's\n");
}

static cpri_json *model_json(const run_result *o)
{
    static const char *const keys[] = {"overhead_frac", "pls", "mtbf_s"};
    const double values[] = {o->model_overhead_frac, o->model_pls, o->mtbf_s};
    return cpri_json_numbers(keys, values, 3);
}

/* Keys absent from a run: "pls" when the log has no update events, "auc"
 * and "logloss" without an eval event ("auc" also when the eval had none: a
 * held-out part of one class), "model" when it cannot be evaluated. */
static cpri_json *run_json(const run_log *r, const run_result *o)
{
    cpri_json *j = cpri_json_object();
    int bad = !j;
    bad |= cpri_json_add_string(j, "path", r->path) |
           cpri_json_add_string(j, "strategy", r->strategy) |
           cpri_json_add_string(j, "recovery", run_mode(r)) |
           cpri_json_add_number(j, "interval_s", o->interval_s) |
           cpri_json_add_number(j, "save_interval_s", o->save_interval_s) |
           cpri_json_add_number(j, "steps", (double)r->steps) |
           cpri_json_add_number(j, "compute_s", r->compute_s) |
           cpri_json_add_number(j, "wall_s", r->wall_s) |
           cpri_json_add_number(j, "failures", (double)r->failures) |
           cpri_json_add_number(j, "recoveries", (double)r->recoveries) |
           cpri_json_add_number(j, "checkpoints", (double)r->checkpoints) |
           cpri_json_add_number(j, "committed", (double)r->committed) |
           cpri_json_add_number(j, "overhead_frac", o->overhead_frac) |
           cpri_json_add_number(j, "save_frac", o->save_frac) |
           cpri_json_add_number(j, "load_frac", o->load_frac) |
           cpri_json_add_number(j, "lost_frac", o->lost_frac) |
           cpri_json_add_number(j, "restart_frac", o->restart_frac) |
           cpri_json_add_number(j, "background_frac", o->background_frac) |
           cpri_json_add_number(j, "lost_events", r->lost_events) |
           cpri_json_add_number(j, "bytes_written", r->bytes_written) |
           cpri_json_add_number(j, "rows_saved", r->rows_saved) |
           cpri_json_add_number(j, "rows_restored", r->rows_restored) |
           cpri_json_add_number(j, "bytes_restored", r->bytes_restored);
    /* What a codec changes, apart from how many saves the estimator took. */
    if (r->rows_saved > 0)
        bad |= cpri_json_add_number(j, "bytes_per_row_saved", r->bytes_written / r->rows_saved);
    if (o->have_pls)
        bad |= cpri_json_add_number(j, "pls", o->pls) |
               cpri_json_add_number(j, "update_events", r->update_events);
    if (r->have_auc)
        bad |= cpri_json_add_number(j, "auc", r->auc);
    if (r->have_eval)
        bad |= cpri_json_add_number(j, "logloss", r->logloss);
    if (o->have_model)
        bad |= json_put(j, "model", model_json(o));
    if (o->have_slowdown)
        bad |= cpri_json_add_number(j, "slowdown_frac", o->slowdown_frac);
    if (bad) {
        cpri_json_free(j);
        return NULL;
    }
    return j;
}

static int print_json(const run_log *runs, const run_result *res, size_t n)
{
    cpri_json *root = cpri_json_object(), *arr = cpri_json_array();
    int bad = !root || !arr;
    for (size_t i = 0; i < n && !bad; i++) {
        cpri_json *r = run_json(&runs[i], &res[i]);
        if (cpri_json_append(arr, r)) {
            cpri_json_free(r);
            bad = 1;
        }
    }
    bad |= json_put(root, "runs", arr);
    bad |= !bad && cpri_json_print(root, stdout);
    cpri_json_free(root);
    if (bad)
        fprintf(stderr, "cpr-analyze: report: out of memory writing JSON\n");
    return bad ? -1 : 0;
}

/* --summary FILE: a JSON array, one run object per strategy (the objects of
 * --json), for scripts such as the demo's var/report/summary.json. */
static int write_summary(const char *path, const run_log *runs, const run_result *res,
                         size_t n)
{
    cpri_json *arr = cpri_json_array();
    int bad = !arr;
    for (size_t i = 0; i < n && !bad; i++) {
        cpri_json *r = run_json(&runs[i], &res[i]);
        if (cpri_json_append(arr, r)) {
            cpri_json_free(r);
            bad = 1;
        }
    }
    FILE *f = bad ? NULL : fopen(path, "w");
    if (!bad && !f)
        fprintf(stderr, "cpr-analyze: --summary: cannot write %s\n", path);
    bad |= !f || cpri_json_print(arr, f);
    if (f)
        bad |= fclose(f) != 0;
    cpri_json_free(arr);
    if (bad)
        fprintf(stderr, "cpr-analyze: --summary: error writing %s\n", path);
    return bad ? -1 : 0;
}

/* Unknown values are empty CSV fields. */
static void csv_opt(FILE *f, int have, double v)
{
    if (have)
        fprintf(f, ",%.17g", v);
    else
        fputc(',', f);
}

static int write_csv(const char *path, const run_log *runs, const run_result *res, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cpr-analyze: --csv: cannot write %s\n", path);
        return -1;
    }
    fprintf(f, "path,strategy,recovery,interval_s,save_interval_s,failures,overhead_frac,"
            "save_frac,load_frac,lost_frac,restart_frac,pls,bytes_written,auc,logloss,"
            "model_overhead_frac,model_pls,wall_s,slowdown_frac,background_frac\n");
    for (size_t i = 0; i < n; i++) {
        const run_log *r = &runs[i];
        const run_result *o = &res[i];
        fprintf(f, "%s,%s,%s,%.17g,%.17g,%llu,%.17g,%.17g,%.17g,%.17g,%.17g", r->path,
                r->strategy, run_mode(r), o->interval_s, o->save_interval_s,
                (unsigned long long)r->failures, o->overhead_frac, o->save_frac, o->load_frac,
                o->lost_frac, o->restart_frac);
        csv_opt(f, o->have_pls, o->pls);
        fprintf(f, ",%.17g", r->bytes_written);
        csv_opt(f, r->have_auc, r->auc);
        csv_opt(f, r->have_eval, r->logloss);
        csv_opt(f, o->have_model, o->model_overhead_frac);
        csv_opt(f, o->have_model, o->model_pls);
        fprintf(f, ",%.17g", r->wall_s);
        csv_opt(f, o->have_slowdown, o->slowdown_frac);
        fprintf(f, ",%.17g\n", o->background_frac);
    }
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad)
        fprintf(stderr, "cpr-analyze: --csv: error writing %s\n", path);
    return bad ? -1 : 0;
}

/* Overhead and PLS against interval (a point per run) and the loss curves. */
static int plot_runs(const char *dir, int svg, const run_log *runs, const run_result *res,
                     size_t n)
{
    plot_series over[MAX_RUNS], pls[MAX_RUNS], loss[MAX_RUNS];
    for (size_t i = 0; i < n; i++) {
        const run_result *o = &res[i];
        over[i] = (plot_series){runs[i].strategy, o->interval_s > 0, &o->interval_s,
                                &o->overhead_frac, NULL, NULL};
        pls[i] = (plot_series){runs[i].strategy, o->interval_s > 0 && o->have_pls,
                               &o->interval_s, &o->pls, NULL, NULL};
        loss[i] = (plot_series){runs[i].strategy, runs[i].n_loss, runs[i].loss_step,
                                runs[i].loss, NULL, NULL};
    }
    plot_figure figs[3] = {
        {"overhead", "checkpoint interval (s)", "overhead (fraction of the job)", 1, n, over},
        {"pls", "checkpoint interval (s)", "PLS (portion of updates lost)", 1, n, pls},
        {"loss", "step", "training loss", 0, n, loss},
    };
    return plot_write(dir, svg, figs, 3);
}

/* ---- the command ---------------------------------------------------------------------- */

typedef struct report_cmd {
    const char *paths[MAX_RUNS];
    size_t n;
    int json, svg;
    const char *csv, *plot_dir, *summary;
} report_cmd;

/* One argument: 0 taken, 1 --help, -1 error printed. */
static int parse_one(int argc, char **argv, int *i, report_cmd *c)
{
    const char *arg = argv[*i];
    int missing = 0;
    if (analyze_is_help(arg))
        return 1;
    if (strcmp(arg, "--json") == 0 || strcmp(arg, "--svg") == 0) {
        *(arg[2] == 'j' ? &c->json : &c->svg) = 1;
        return 0;
    }
    const char *const flags[3] = {"--csv", "--plot-dir", "--summary"};
    const char **slots[3] = {&c->csv, &c->plot_dir, &c->summary};
    for (int f = 0; f < 3; f++) {
        const char *v = analyze_flag(argc, argv, i, flags[f], &missing);
        if (missing)
            return -1;
        if (!v)
            continue;
        if (v[0] == '\0') {
            fprintf(stderr, "cpr-analyze: %s needs a non-empty path\n", flags[f]);
            return -1;
        }
        *slots[f] = v;
        return 0;
    }
    if (arg[0] == '-' && arg[1] != '\0') {
        fprintf(stderr, "cpr-analyze: report: unknown option '%s' (see cpr-analyze --help)\n",
                arg);
        return -1;
    }
    if (c->n == MAX_RUNS) {
        fprintf(stderr, "cpr-analyze: report: at most %d logs at once\n", MAX_RUNS);
        return -1;
    }
    c->paths[c->n++] = arg;
    return 0;
}

static int report_output(const report_cmd *c, const run_log *runs, const run_result *res)
{
    if (!c->json)
        print_table(runs, res, c->n);
    else if (print_json(runs, res, c->n))
        return EXIT_FAILED;
    if (c->csv && write_csv(c->csv, runs, res, c->n))
        return EXIT_FAILED;
    if (c->summary && write_summary(c->summary, runs, res, c->n))
        return EXIT_FAILED;
    if (c->plot_dir && plot_runs(c->plot_dir, c->svg, runs, res, c->n))
        return EXIT_FAILED;
    return 0;
}

int cmd_report(int argc, char **argv)
{
    report_cmd c = {0};
    for (int i = 0; i < argc; i++) {
        int rc = parse_one(argc, argv, &i, &c);
        if (rc > 0)
            analyze_usage(stdout);
        if (rc)
            return rc > 0 ? 0 : EXIT_USAGE;
    }
    if (c.n == 0) {
        fprintf(stderr, "cpr-analyze: report: RUN.jsonl is required\n");
        return EXIT_USAGE;
    }
    run_log *runs = calloc(c.n, sizeof *runs);
    run_result *res = calloc(c.n, sizeof *res);
    int rc = runs && res ? 0 : EXIT_FAILED;
    for (size_t i = 0; i < c.n && rc == 0; i++) {
        runs[i].path = c.paths[i];
        if (read_log(&runs[i]) || run_compute(&runs[i], &res[i]))
            rc = EXIT_FAILED;
    }
    if (rc == 0) {
        compare_with_baseline(runs, res, c.n);
        rc = report_output(&c, runs, res);
    }
    for (size_t i = 0; runs && i < c.n; i++)
        run_release(&runs[i]);
    free(runs);
    free(res);
    return rc;
}
