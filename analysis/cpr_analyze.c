/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr-analyze: plan, simulate and report on CPR's recovery strategies.
 * `plan` evaluates the closed-form model (cpr/recovery.h, docs/model.md),
 * `simulate` runs it as a Monte Carlo over seeded failure traces with the
 * prioritized policies on real embedding tables (simulate.c), and `report`
 * reads a training run's JSON event log (report.c). This file holds the
 * command line shared by all three and the `plan` command.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "cpr_cli.h"
#include "cpr_common.h"

#define MAX_HOURS 1e9
#define MAX_SECONDS 1e12
#define MAX_SHARDS (1u << 20)

void analyze_usage(FILE *out)
{
    fputs("usage: cpr-analyze <command> [options]\n"
          "\n"
          "commands:\n"
          "  plan      the closed-form model: intervals, overheads, decision\n"
          "  simulate  Monte Carlo over seeded failure traces, prioritized policies\n"
          "            on real embedding tables\n"
          "  report    tables and plots from training runs' JSON event logs\n"
          "\n"
          "cpr-analyze plan --mtbf-hours H --shards N --save-s S --load-s L\n"
          "                 --restart-s R --job-hours J --target-pls P\n"
          "                 [--formula young|daly] [--background-s B]\n"
          "                 [--background-cost-s C] [--max-background-share S] [--json]\n"
          "  --mtbf-hours H   mean time between failures of the whole job (> 0)\n"
          "  --shards N       embedding shards, the unit that fails (>= 1)\n"
          "  --save-s S       training stall of one full checkpoint (> 0)\n"
          "  --load-s L       time to load a full checkpoint (> 0)\n"
          "  --restart-s R    restart/reschedule time per failure (> 0)\n"
          "  --job-hours J    failure-free length of the job (> 0)\n"
          "  --target-pls P   largest acceptable portion of lost updates, in (0, 1)\n"
          "  --formula F      full recovery's interval: young (default) or daly\n"
          "  --background-s B  background time of one full save on the trainer's host,\n"
          "                   from the end of its stall until it lands (>= 0, default 0:\n"
          "                   none); a prioritized save of r of the rows has r*B\n"
          "  --background-cost-s C  training time one full save's background takes\n"
          "                   away (>= 0, default 0), counted in the overhead; r*C for a\n"
          "                   prioritized save\n"
          "  --max-background-share S  the background may be in flight at most S of the\n"
          "                   time between saves: every interval is at least B/S, in\n"
          "                   (0, 1] (default 0.25)\n"
          "  --json           one JSON object: full, partial, decision, benefit_frac\n"
          "\n"
          "cpr-analyze simulate <the plan flags> [--trials K] [--seed X]\n"
          "                 [--failures exponential|weibull] [--shape k]\n"
          "                 [--strategies LIST] [--fraction r] [--rows N] [--zipf s]\n"
          "                 [--batch B] [--steps-per-save S] [--emb-saves W]\n"
          "                 [--emb-trials K] [--ssu-rate p]\n"
          "                 [--points K] [--interval-min-s T] [--interval-max-s T]\n"
          "                 [--json] [--csv FILE] [--plot-dir DIR] [--svg]\n"
          "  --trials K       failure traces for full and partial (default 400)\n"
          "  --seed X         any 64-bit number (default 1): same seed, same output\n"
          "  --failures LAW   exponential (default) or weibull, with the same mean\n"
          "  --shape k        Weibull shape, in [0.1, 10] (default 0.7)\n"
          "  --strategies L   comma-separated from full,partial,mfu,ssu,topk-norm\n"
          "                   (default all)\n"
          "  --fraction r     prioritized saves take r of the rows every r*T, in\n"
          "                   (0, 1] (default 0.125)\n"
          "  --rows N         embedding rows of the simulated table (default 4096)\n"
          "  --zipf s         exponent of the row access stream, (0, 5] (default 1.05)\n"
          "  --batch B        row accesses per training step (default 512)\n"
          "  --steps-per-save S  training steps between prioritized saves (default 8)\n"
          "  --emb-saves W    prioritized saves per trial: the tables run the first W\n"
          "                   save intervals of the job (default 256)\n"
          "  --emb-trials K   failure traces per prioritized policy (default 8)\n"
          "  --ssu-rate p     SSU sampling probability (default: fills the budget)\n"
          "  --points K       intervals of the sweep, geometric (default 7)\n"
          "  --interval-min-s, --interval-max-s  the sweep's range (default: a\n"
          "                   factor 4 around the planned intervals)\n"
          "  --csv FILE       also write the results as CSV\n"
          "  --plot-dir DIR   write overhead and PLS against interval with gnuplot\n"
          "  --svg            plots as SVG instead of PNG\n"
          "\n"
          "cpr-analyze report RUN.jsonl [RUN.jsonl ...] [--json] [--csv FILE]\n"
          "                 [--plot-dir DIR] [--svg] [--summary FILE]\n"
          "  reads logs in the schema of docs/model.md, one run per file (at most\n"
          "  64): the time breakdown, PLS, accuracy, and the model at each run's\n"
          "  interval with its measured costs\n"
          "  --summary FILE   also write a JSON array, one object per run (the\n"
          "                   objects of --json)\n"
          "\n"
          "  -h, --help       print this help\n"
          "\n"
          "Progress goes to stderr. Exit status: 0 done, 1 a failure (an unreadable\n"
          "or malformed log, a failed plot), 2 bad command line.\n",
          out);
}

/* ---- shared command-line helpers ------------------------------------------------ */

int analyze_report(cpr_status st)
{
    if (st)
        fprintf(stderr, "cpr-analyze: %s\n", cpr_errmsg());
    return st ? -1 : 0;
}

const char *analyze_flag(int argc, char **argv, int *i, const char *flag, int *missing)
{
    const char *v = cpri_cli_value(argc, argv, i, flag, missing);
    if (*missing)
        analyze_report(CPR_INVALID_ARGUMENT);
    return v;
}

int json_put(cpri_json *obj, const char *key, cpri_json *child)
{
    if (!obj || cpri_json_add_child(obj, key, child)) {
        cpri_json_free(child);
        return -1;
    }
    return 0;
}

int analyze_is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* ---- the model flags ------------------------------------------------------------- */

/* Those before MF_FORMULA are required. */
typedef enum model_flag {
    MF_MTBF, MF_SHARDS, MF_SAVE, MF_LOAD, MF_RESTART, MF_JOB, MF_PLS, MF_FORMULA,
    MF_BACKGROUND, MF_BACKGROUND_COST, MF_BACKGROUND_SHARE, MF_COUNT
} model_flag;

static const char *const MODEL_FLAGS[MF_COUNT] = {
    "--mtbf-hours", "--shards", "--save-s", "--load-s", "--restart-s", "--job-hours",
    "--target-pls", "--formula", "--background-s", "--background-cost-s",
    "--max-background-share",
};

/* A positive finite number no larger than `max`. */
static int positive(const char *flag, const char *text, double max, double *out)
{
    return analyze_report(cpri_cli_double(flag, text, 0.0, 0, max, 1, out));
}

/* A time that may be zero (a save with no background work). */
static int non_negative(const char *flag, const char *text, double *out)
{
    return analyze_report(cpri_cli_double(flag, text, 0.0, 1, MAX_SECONDS, 1, out));
}

static int set_model_flag(model_flag f, const char *text, cpr_model_params *p)
{
    const char *flag = MODEL_FLAGS[f];
    uint64_t shards = 0;
    double hours = 0;
    switch (f) {
    case MF_MTBF:
    case MF_JOB:
        if (positive(flag, text, MAX_HOURS, &hours))
            return -1;
        *(f == MF_MTBF ? &p->mtbf_s : &p->job_s) = hours * 3600.0;
        return 0;
    case MF_SHARDS:
        if (analyze_report(cpri_cli_u64(flag, text, 1, MAX_SHARDS, &shards)))
            return -1;
        p->shards = (uint32_t)shards;
        return 0;
    case MF_SAVE: return positive(flag, text, MAX_SECONDS, &p->save_s);
    case MF_LOAD: return positive(flag, text, MAX_SECONDS, &p->load_s);
    case MF_RESTART: return positive(flag, text, MAX_SECONDS, &p->restart_s);
    case MF_PLS:
        return analyze_report(cpri_cli_double(flag, text, 0.0, 0, 1.0, 0, &p->target_pls));
    case MF_BACKGROUND: return non_negative(flag, text, &p->background_s);
    case MF_BACKGROUND_COST: return non_negative(flag, text, &p->background_cost_s);
    case MF_BACKGROUND_SHARE:
        return analyze_report(cpri_cli_double(flag, text, 0.0, 0, 1.0, 1,
                                              &p->max_background_share));
    default:
        if (strcmp(text, "young") && strcmp(text, "daly")) {
            fprintf(stderr, "cpr-analyze: --formula: '%s' is neither young nor daly\n", text);
            return -1;
        }
        p->formula = strcmp(text, "daly") == 0 ? CPR_INTERVAL_DALY : CPR_INTERVAL_YOUNG;
        return 0;
    }
}

int model_flag_parse(int argc, char **argv, int *i, model_flags *m)
{
    for (int f = 0; f < MF_COUNT; f++) {
        int missing = 0;
        const char *text = analyze_flag(argc, argv, i, MODEL_FLAGS[f], &missing);
        if (missing)
            return -1;
        if (!text)
            continue;
        if (set_model_flag((model_flag)f, text, &m->params))
            return -1;
        m->seen |= 1u << f;
        return 1;
    }
    return 0;
}

int model_flags_complete(const model_flags *m, const char *cmd)
{
    for (int f = 0; f < MF_FORMULA; f++) {
        if (!(m->seen & (1u << f))) {
            fprintf(stderr, "cpr-analyze: %s: %s is required (see cpr-analyze --help)\n", cmd,
                    MODEL_FLAGS[f]);
            return -1;
        }
    }
    return analyze_report(cpr_model_check(&m->params));
}

double model_background_share(const cpr_model_params *p)
{
    return p->max_background_share > 0 ? p->max_background_share : CPR_DEFAULT_BACKGROUND_SHARE;
}

/* ---- plan ------------------------------------------------------------------------- */

/* An overhead's split into save, load, (lost,) restart and background. */
static int add_breakdown(cpri_json *j, const cpr_overhead *o, int with_lost)
{
    return cpri_json_add_number(j, "save_frac", o->save_frac) |
           cpri_json_add_number(j, "load_frac", o->load_frac) |
           (with_lost ? cpri_json_add_number(j, "lost_frac", o->lost_frac) : 0) |
           cpri_json_add_number(j, "restart_frac", o->restart_frac) |
           cpri_json_add_number(j, "background_frac", o->background_frac);
}

cpri_json *plan_json(const cpr_model_plan *plan)
{
    cpri_json *root = cpri_json_object(), *full = cpri_json_object(), *part = cpri_json_object();
    int bad = !root || !full || !part;
    const cpr_overhead *f = &plan->full, *p = &plan->partial;
    bad |= cpri_json_add_number(full, "interval_s", f->interval_s) |
           cpri_json_add_number(full, "overhead_frac", f->overhead_frac) |
           add_breakdown(full, f, 1);
    bad |= cpri_json_add_number(part, "interval_s", p->interval_s) |
           cpri_json_add_number(part, "overhead_frac", p->overhead_frac) |
           cpri_json_add_number(part, "pls", p->pls) | add_breakdown(part, p, 0);
    bad |= json_put(root, "full", full);
    bad |= json_put(root, "partial", part);
    bad |= cpri_json_add_string(root, "decision", cpr_recovery_mode_name(plan->decision)) |
           cpri_json_add_number(root, "benefit_frac", plan->benefit_frac);
    if (bad) {
        cpri_json_free(root);
        return NULL;
    }
    return root;
}

static void print_plan_row(const char *name, const cpr_overhead *o, int partial)
{
    printf("%-8s %11.1f %8.3f%% %8.3f%% %8.3f%% %8.3f%% %8.3f%% %9.3f%%  ", name, o->interval_s,
           100 * o->overhead_frac, 100 * o->save_frac, 100 * o->load_frac,
           100 * o->lost_frac, 100 * o->restart_frac, 100 * o->background_frac);
    if (partial)
        printf("%.4g\n", o->pls);
    else
        printf("0 (recomputed)\n");
}

static void print_plan(const cpr_model_params *p, const cpr_model_plan *plan)
{
    printf("cpr-analyze plan: %u shards, MTBF %.4g h, job %.4g h (%.4g failures), save %.4g s, "
           "load %.4g s, restart %.4g s, PLS target %.4g, %s interval\n\n",
           p->shards, p->mtbf_s / 3600, p->job_s / 3600, p->job_s / p->mtbf_s, p->save_s,
           p->load_s, p->restart_s, p->target_pls, cpr_interval_formula_name(p->formula));
    if (p->background_s > 0 || p->background_cost_s > 0)
        printf("background of a full save %.4g s costing %.4g s, in flight at most %.4g of "
               "the time between saves\n\n", p->background_s, p->background_cost_s,
               model_background_share(p));
    printf("%-8s %11s %9s %9s %9s %9s %9s %10s  %s\n", "strategy", "interval_s", "overhead",
           "save", "load", "lost", "restart", "background", "PLS");
    print_plan_row("full", &plan->full, 0);
    print_plan_row("partial", &plan->partial, 1);
    printf("\ndecision: %s recovery (benefit %.3f%% of the job)\n",
           cpr_recovery_mode_name(plan->decision), 100 * plan->benefit_frac);
}

int cmd_plan(int argc, char **argv)
{
    model_flags m = {0};
    int json = 0;
    for (int i = 0; i < argc; i++) {
        if (analyze_is_help(argv[i])) {
            analyze_usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
            continue;
        }
        int rc = model_flag_parse(argc, argv, &i, &m);
        if (rc < 0)
            return EXIT_USAGE;
        if (rc == 0) {
            fprintf(stderr, "cpr-analyze: plan: unknown option '%s' (see cpr-analyze --help)\n",
                    argv[i]);
            return EXIT_USAGE;
        }
    }
    if (model_flags_complete(&m, "plan"))
        return EXIT_USAGE;
    cpr_model_plan plan;
    if (analyze_report(cpr_model_plan_compute(&m.params, &plan)))
        return EXIT_FAILED;
    if (!json) {
        print_plan(&m.params, &plan);
        return 0;
    }
    cpri_json *root = plan_json(&plan);
    int rc = root && cpri_json_print(root, stdout) == 0 ? 0 : EXIT_FAILED;
    if (rc)
        fprintf(stderr, "cpr-analyze: plan: out of memory writing JSON\n");
    cpri_json_free(root);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        analyze_usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (analyze_is_help(cmd) || strcmp(cmd, "help") == 0) {
        analyze_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "plan") == 0)
        return cmd_plan(argc - 2, argv + 2);
    if (strcmp(cmd, "simulate") == 0)
        return cmd_simulate(argc - 2, argv + 2);
    if (strcmp(cmd, "report") == 0)
        return cmd_report(argc - 2, argv + 2);
    fprintf(stderr, "cpr-analyze: unknown command '%s' (see cpr-analyze --help)\n", cmd);
    return EXIT_USAGE;
}
