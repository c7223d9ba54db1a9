/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The training loop: read a batch, take a step, log, evaluate, and call the
 * hooks at step boundaries (dlrm.h says what each may do). The loop's
 * position is the model's step counter and the loader's epoch, never a local
 * count, so a hook that rewinds both (full recovery) makes the loop redo the
 * lost steps. Time is split into io (reading batches), train (the steps),
 * eval and hook; the summary event reports it.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dlrm_internal.h"
#include "util.h"

struct dlrm_trainer {
    dlrm_model *model;
    dlrm_loader *loader;
    dlrm_train_options opts;
    dlrm_hooks hooks;
    dlrm_batch batch;
    double t0;
    dlrm_run_result acc;          /* times, steps and samples so far */
    double loss_sum;              /* since the last step event */
    uint64_t loss_steps;
    double report_t;              /* time and steps at the last report */
    uint64_t report_steps;
    uint64_t eval_step;           /* step of the last evaluation (UINT64_MAX: none) */
};

cpr_status dlrm_trainer_create(dlrm_model *model, dlrm_loader *loader,
                               const dlrm_train_options *opts, const dlrm_hooks *hooks,
                               dlrm_trainer **out)
{
    if (!model || !loader || !opts || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a trainer needs a model, a loader and options");
    const dlrm_config *cfg = dlrm_model_config(model);
    if (opts->batch == 0 || opts->batch > cfg->max_batch)
        return cpr_fail(CPR_INVALID_ARGUMENT, "batch must be 1 to the model's max_batch %u "
                        "(got %zu)", cfg->max_batch, opts->batch);
    if (opts->steps == 0 && opts->epochs == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a run needs a number of steps or epochs");
    dlrm_trainer *tr = calloc(1, sizeof *tr);
    if (!tr)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a trainer");
    cpr_status st = dlrm_batch_init(&tr->batch, opts->batch, cfg->num_tables);
    if (st) {
        free(tr);
        return st;
    }
    tr->model = model;
    tr->loader = loader;
    tr->opts = *opts;
    if (hooks)
        tr->hooks = *hooks;
    tr->eval_step = UINT64_MAX;
    *out = tr;
    return CPR_OK;
}

void dlrm_trainer_destroy(dlrm_trainer *tr)
{
    if (!tr)
        return;
    dlrm_batch_release(&tr->batch);
    free(tr);
}

dlrm_model *dlrm_trainer_model(dlrm_trainer *tr) { return tr->model; }
dlrm_loader *dlrm_trainer_loader(dlrm_trainer *tr) { return tr->loader; }
double dlrm_trainer_elapsed_s(const dlrm_trainer *tr) { return dlrm_now_s() - tr->t0; }

void dlrm_trainer_times(const dlrm_trainer *tr, dlrm_run_result *out)
{
    *out = tr->acc;
    out->total_s = dlrm_trainer_elapsed_s(tr);
    out->epochs = dlrm_loader_epoch(tr->loader);
}

/* ---- log events ------------------------------------------------------------------ */

cJSON *dlrm_trainer_event(dlrm_trainer *tr, const char *name)
{
    cJSON *ev = cJSON_CreateObject();
    if (ev && (!cJSON_AddStringToObject(ev, "event", name) ||
               !cJSON_AddNumberToObject(ev, "step", (double)dlrm_model_step(tr->model)) ||
               !cJSON_AddNumberToObject(ev, "t", dlrm_trainer_elapsed_s(tr)) ||
               !cJSON_AddNumberToObject(ev, "t_s", dlrm_trainer_elapsed_s(tr)))) {
        cJSON_Delete(ev);
        ev = NULL;
    }
    return ev;
}

cpr_status dlrm_trainer_emit(dlrm_trainer *tr, cJSON *ev)
{
    if (!ev)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a log event");
    FILE *log = tr->opts.json_log;
    cpr_status st = CPR_OK;
    if (log) {
        /* One compact line per event: the log is JSON lines, and flushing
         * each keeps it readable up to the last event when a run is killed. */
        char *line = cJSON_PrintUnformatted(ev);
        if (!line)
            st = cpr_fail(CPR_NO_MEMORY, "out of memory printing a log event");
        else if (fprintf(log, "%s\n", line) < 0 || fflush(log) != 0)
            st = cpr_fail(CPR_IO, "cannot write the JSON log: %s", strerror(errno));
        cJSON_free(line);
    }
    cJSON_Delete(ev);
    return st;
}

/* Add number fields; a NULL name ends the list. Returns -1 if one failed. */
static int add_numbers(cJSON *ev, const char *const *names, const double *values)
{
    for (size_t i = 0; names[i]; i++)
        if (!cJSON_AddNumberToObject(ev, names[i], values[i]))
            return -1;
    return 0;
}

/* The shortest decimal that reads back as `f`, so the log says 0.05 and not
 * 0.0500000007 for a float learning rate. */
static double decimal_of(float f)
{
    char text[32];
    for (int digits = 6; digits < 9; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)f);
        if ((float)strtod(text, NULL) == f)
            return strtod(text, NULL);
    }
    return (double)f;
}

static cpr_status emit_start(dlrm_trainer *tr)
{
    const dlrm_config *c = dlrm_model_config(tr->model);
    cJSON *ev = dlrm_trainer_event(tr, "start");
    const char *names[] = {"tables", "table_rows", "emb_dim", "shards", "batch", "lr",
                           "emb_lr", "seed", "dense_params", "train_lines", "holdout_lines",
                           NULL};
    double values[] = {c->num_tables, (double)c->table_rows, c->emb_dim, c->num_shards,
                       (double)tr->opts.batch, decimal_of(c->lr), decimal_of(c->emb_lr),
                       (double)c->seed,
                       (double)dlrm_model_dense_params(tr->model),
                       (double)dlrm_loader_train_lines(tr->loader),
                       (double)dlrm_loader_holdout_lines(tr->loader)};
    if (ev && (add_numbers(ev, names, values) ||
               !cJSON_AddStringToObject(ev, "optimizer",
                                        c->optimizer == DLRM_OPT_SGD ? "sgd" : "adagrad") ||
               !cJSON_AddStringToObject(ev, "device",
                                        c->device == CPR_DEVICE_CUDA ? "cuda" : "cpu"))) {
        cJSON_Delete(ev);
        ev = NULL;
    }
    return dlrm_trainer_emit(tr, ev);
}

static void report(dlrm_trainer *tr, double loss, const dlrm_eval_result *eval)
{
    if (!tr->opts.progress)
        return;
    double now = dlrm_trainer_elapsed_s(tr), dt = now - tr->report_t;
    dlrm_progress p = {
        .step = dlrm_model_step(tr->model), .steps_total = tr->opts.steps,
        .epoch = dlrm_loader_epoch(tr->loader), .loss = loss, .elapsed_s = now,
        .steps_per_s = dt > 0 ? (double)(tr->acc.steps - tr->report_steps) / dt : 0,
        .eval = eval};
    tr->opts.progress(tr->opts.progress_ctx, &p);
    tr->report_t = now;
    tr->report_steps = tr->acc.steps;
}

static cpr_status log_step(dlrm_trainer *tr)
{
    double loss = tr->loss_sum / (double)tr->loss_steps;
    cJSON *ev = dlrm_trainer_event(tr, "step");
    if (ev && (!cJSON_AddNumberToObject(ev, "loss", loss) ||
               !cJSON_AddNumberToObject(ev, "epoch", (double)dlrm_loader_epoch(tr->loader)) ||
               !cJSON_AddNumberToObject(ev, "samples", (double)tr->acc.samples))) {
        cJSON_Delete(ev);
        ev = NULL;
    }
    tr->acc.last_loss = loss;
    tr->loss_sum = 0;
    tr->loss_steps = 0;
    report(tr, loss, NULL);
    return dlrm_trainer_emit(tr, ev);
}

/* ---- evaluation ------------------------------------------------------------------- */

static cpr_status evaluate(dlrm_trainer *tr)
{
    dlrm_eval_result r;
    double t = dlrm_now_s();
    cpr_status st = dlrm_evaluate(tr->model, tr->loader, &tr->batch, tr->opts.eval_max, &r);
    tr->acc.eval_s += dlrm_now_s() - t;
    if (st)
        return st;
    tr->acc.evaluated = 1;
    tr->acc.eval = r;
    tr->eval_step = dlrm_model_step(tr->model);
    cJSON *ev = dlrm_trainer_event(tr, "eval");
    if (ev && ((!isnan(r.auc) && !cJSON_AddNumberToObject(ev, "auc", r.auc)) ||
               !cJSON_AddNumberToObject(ev, "logloss", r.logloss) ||
               !cJSON_AddNumberToObject(ev, "samples", (double)r.samples) ||
               !cJSON_AddNumberToObject(ev, "positives", (double)r.positives))) {
        cJSON_Delete(ev);
        ev = NULL;
    }
    report(tr, tr->acc.last_loss, &r);
    return dlrm_trainer_emit(tr, ev);
}

/* ---- the loop --------------------------------------------------------------------- */

static int finished(const dlrm_trainer *tr)
{
    if (tr->opts.steps)
        return dlrm_model_step(tr->model) >= tr->opts.steps;
    return dlrm_loader_epoch(tr->loader) >= tr->opts.epochs;
}

typedef cpr_status (*hook_fn)(void *ctx, dlrm_trainer *tr);

static cpr_status call_hook(dlrm_trainer *tr, hook_fn fn)
{
    if (!fn)
        return CPR_OK;
    double t = dlrm_now_s();
    cpr_status st = fn(tr->hooks.ctx, tr);
    tr->acc.hook_s += dlrm_now_s() - t;
    return st;
}

static cpr_status one_step(dlrm_trainer *tr)
{
    double loss = 0, t = dlrm_now_s();
    cpr_status st = dlrm_loader_next(tr->loader, &tr->batch);
    double t_read = dlrm_now_s();
    tr->acc.io_s += t_read - t;
    if (st == CPR_OK)
        st = dlrm_model_train_step(tr->model, &tr->batch, &loss);
    tr->acc.train_s += dlrm_now_s() - t_read;
    if (st)
        return st;
    tr->acc.steps++;
    tr->acc.samples += tr->batch.size;
    tr->loss_sum += loss;
    tr->loss_steps++;
    uint64_t step = dlrm_model_step(tr->model);
    if (tr->opts.log_every && step % tr->opts.log_every == 0)
        st = log_step(tr);
    if (st == CPR_OK)
        st = call_hook(tr, tr->hooks.after_step);
    if (st == CPR_OK && tr->opts.eval_every && step % tr->opts.eval_every == 0 &&
        dlrm_loader_holdout_lines(tr->loader) > 0)
        st = evaluate(tr);
    return st;
}

static cpr_status emit_summary(dlrm_trainer *tr)
{
    dlrm_run_result r;
    dlrm_trainer_times(tr, &r);
    cJSON *ev = dlrm_trainer_event(tr, "summary");
    double busy = r.train_s + r.io_s;
    const char *names[] = {"steps", "samples", "epochs", "train_s", "eval_s", "io_s", "hook_s",
                           "total_s", "steps_per_s", "loss", "malformed", NULL};
    double values[] = {(double)r.steps, (double)r.samples, (double)r.epochs, r.train_s,
                       r.eval_s, r.io_s, r.hook_s, r.total_s,
                       busy > 0 ? (double)r.steps / busy : 0, r.last_loss,
                       (double)dlrm_loader_malformed(tr->loader)};
    int auc = r.evaluated && !isnan(r.eval.auc);
    if (ev && (add_numbers(ev, names, values) ||
               (auc && !cJSON_AddNumberToObject(ev, "auc", r.eval.auc)) ||
               (r.evaluated && !cJSON_AddNumberToObject(ev, "logloss", r.eval.logloss)))) {
        cJSON_Delete(ev);
        ev = NULL;
    }
    if (ev && tr->hooks.on_summary)
        tr->hooks.on_summary(tr->hooks.ctx, tr, ev);
    return dlrm_trainer_emit(tr, ev);
}

cpr_status dlrm_trainer_run(dlrm_trainer *tr, dlrm_run_result *out)
{
    tr->t0 = dlrm_now_s();
    cpr_status st = emit_start(tr);
    while (st == CPR_OK && !finished(tr)) {
        st = call_hook(tr, tr->hooks.before_step);
        if (st == CPR_OK && !finished(tr)) /* a resume may have reached the end */
            st = one_step(tr);
    }
    if (st == CPR_OK && tr->loss_steps && tr->opts.log_every)
        st = log_step(tr); /* the last, partial logging period */
    else if (tr->loss_steps)
        tr->acc.last_loss = tr->loss_sum / (double)tr->loss_steps;
    if (st == CPR_OK && dlrm_loader_holdout_lines(tr->loader) > 0 &&
        tr->eval_step != dlrm_model_step(tr->model))
        st = evaluate(tr);
    if (st == CPR_OK)
        st = call_hook(tr, tr->hooks.on_finish);
    if (st == CPR_OK)
        st = emit_summary(tr);
    if (st == CPR_OK && out)
        dlrm_trainer_times(tr, out);
    return st;
}
