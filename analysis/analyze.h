/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal interface between the files of cpr-analyze: exit codes, the
 * model flags that `plan` and `simulate` share, the Monte Carlo simulator
 * (sim.c for the time model of full and partial recovery, sim_emb.c for the
 * prioritized policies on real embedding tables), summary statistics, the
 * gnuplot driver (plot.c) and the three commands. Not installed; nothing
 * here is part of the CPR API.
 */
#ifndef CPR_ANALYZE_H
#define CPR_ANALYZE_H

#include <stdint.h>
#include <stdio.h>

#include "cpr/recovery.h"
#include "cpr_json.h"

#define EXIT_FAILED 1 /* the command ran and something went wrong */
#define EXIT_USAGE 2  /* bad command line */

/* ---- command-line helpers (cpr_analyze.c) ---------------------------------- */

/* Print cpr_errmsg() as a cpr-analyze error when st is not OK; 0 or -1. */
int analyze_report(cpr_status st);
/* The value of --flag at argv[*i] (see cpri_cli_value); *missing set, and
 * the error printed, when the value is absent. */
const char *analyze_flag(int argc, char **argv, int *i, const char *flag, int *missing);
int analyze_is_help(const char *arg);
void analyze_usage(FILE *out);
/* Add `child` to `obj` under `key`; on failure (or obj NULL) free the child
 * and return -1, so no caller leaks a half-built tree. */
int json_put(cpri_json *obj, const char *key, cpri_json *child);

/* The flags of the closed-form model. `seen` bits record which were given. */
typedef struct model_flags {
    cpr_model_params params;
    unsigned seen;
} model_flags;

/*
 * One model flag at argv[*i] (--mtbf-hours, --shards, --save-s, --load-s,
 * --restart-s, --job-hours, --target-pls, --formula, --background-s,
 * --background-cost-s, --max-background-share): 1 taken, 0 not a model
 * flag, -1 error printed (naming the flag).
 */
int model_flag_parse(int argc, char **argv, int *i, model_flags *m);
/* 0 if every required model flag was given, else -1 with the missing flag
 * named (`cmd` prefixes the message). */
int model_flags_complete(const model_flags *m, const char *cmd);
/* max_background_share, or the default when it was not given. */
double model_background_share(const cpr_model_params *p);
/* The plan object of `plan --json` (keys exactly as docs/model.md lists). */
cpri_json *plan_json(const cpr_model_plan *plan);

/* ---- statistics ---------------------------------------------------------------- */

/* Mean and a 95% confidence interval of the mean (Student t). */
typedef struct sim_stat {
    double mean, lo, hi;
} sim_stat;

/* Running sums of one measured quantity over trials. */
typedef struct sim_acc {
    double sum, sum_sq;
    uint64_t n;
} sim_acc;

void sim_acc_add(sim_acc *acc, double x);
sim_stat sim_acc_stat(const sim_acc *acc);
double sim_acc_mean(const sim_acc *acc);

/* ---- the simulator ------------------------------------------------------------- */

typedef enum sim_strategy {
    SIM_FULL = 0,
    SIM_PARTIAL = 1,
    SIM_MFU = 2,
    SIM_SSU = 3,
    SIM_TOPK_NORM = 4,
    SIM_STRATEGY_COUNT = 5
} sim_strategy;

const char *sim_strategy_name(sim_strategy s); /* "full", ..., "topk-norm" */
int sim_strategy_parse(const char *name);      /* -1 if unknown */
int sim_strategy_prioritized(sim_strategy s);

typedef enum sim_failure_law { SIM_EXPONENTIAL = 0, SIM_WEIBULL = 1 } sim_failure_law;

typedef struct sim_opts {
    cpr_model_params model;
    uint64_t trials;          /* trials of full and partial */
    uint64_t emb_trials;      /* trials of each prioritized policy */
    uint64_t seed;
    sim_failure_law law;
    double shape;             /* Weibull shape k */
    double fraction;          /* r: prioritized saves take r of the rows every r*T */
    uint64_t rows;            /* embedding rows (all shards) */
    double zipf;              /* exponent of the access stream */
    uint64_t batch;           /* row accesses per training step */
    uint64_t steps_per_save;  /* training steps between two prioritized saves */
    uint64_t emb_saves;       /* prioritized saves simulated per trial: the
                                 tables run the first emb_saves * fraction * T
                                 of the job (all of it if shorter) */
    double ssu_rate;          /* 0: chosen from the budget (docs/model.md) */
    uint32_t points;          /* intervals of the sweep */
    double interval_min_s, interval_max_s; /* 0: around the plan's intervals */
    unsigned strategies;      /* bit per sim_strategy */
} sim_opts;

/* One strategy at one interval. */
typedef struct sim_result {
    sim_strategy strategy;
    double interval_s;        /* the base (full-size-equivalent) interval */
    double save_interval_s;   /* time between saves: fraction * interval for
                                 the prioritized policies */
    int at_plan;              /* 1: the plan's interval for this strategy */
    uint64_t trials;
    sim_stat overhead_frac, pls;
    double save_frac, load_frac, lost_frac, restart_frac, failures; /* means */
    double background_frac;   /* mean training time the saves' background took */
    double background_share;  /* b/t: one save's background time over the time
                                 between saves */
    int back_to_back;         /* b/t >= 1: a save's background has not landed
                                 when the next save is due */
    double model_overhead_frac, model_pls; /* the closed form at this interval */
} sim_result;

/* A seeded failure trace: work times (s) and the shard each one hits. */
typedef struct sim_trace {
    double *time_s;
    uint32_t *shard;
    size_t n, cap;
} sim_trace;

/* Draw trial `trial`'s trace: the same (opts seed, law, mtbf, trial) gives
 * the same trace for every strategy and interval (common random numbers). */
cpr_status sim_trace_make(const sim_opts *o, uint64_t trial, sim_trace *trace);
void sim_trace_release(sim_trace *trace);

/* Saves at k * spacing <= job (the last one at the job's end when it
 * divides it: the final model is saved too). */
uint64_t sim_save_count(double job_s, double spacing_s);

/* Per-trial outcome, in seconds and as PLS. */
typedef struct sim_outcome {
    double save_s, load_s, lost_s, restart_s, background_s, pls;
    uint64_t failures;
} sim_outcome;

/* Full or partial recovery over a trace (time model, no tables). */
void sim_time_trial(const sim_opts *o, sim_strategy s, double interval_s,
                    const sim_trace *trace, sim_outcome *out);

/* A prioritized policy on real embedding tables (sim_emb.c). */
cpr_status sim_emb_trial(const sim_opts *o, sim_strategy s, double interval_s,
                         const sim_trace *trace, uint64_t trial, sim_outcome *out);

/* Progress on stderr: called after each trial; prints at most once a
 * second once a run has taken more than a second. */
typedef struct sim_progress {
    double t0, last;
    uint64_t done, total;
} sim_progress;

/* Run one strategy at one interval over its trials into *out. */
cpr_status sim_run_point(const sim_opts *o, sim_strategy s, double interval_s, int at_plan,
                         sim_progress *progress, sim_result *out);

/* ---- plots (plot.c) -------------------------------------------------------------- */

/* A series of points for one curve: x, y and the y interval. */
typedef struct plot_series {
    const char *title;
    size_t n;
    const double *x, *y, *lo, *hi; /* lo/hi may be NULL: no error bars */
} plot_series;

typedef struct plot_figure {
    const char *name;       /* file name without extension: "overhead" */
    const char *xlabel, *ylabel;
    int logx;
    size_t n_series;
    const plot_series *series;
} plot_figure;

/*
 * Write each figure's data files and one gnuplot script into `dir`
 * (created if missing), then run gnuplot on it: PNG, or SVG when `svg`.
 * gnuplot missing: a warning on stderr and 0 (the data and script stay for
 * later). Returns 0, or -1 with the error printed.
 */
int plot_write(const char *dir, int svg, const plot_figure *figures, size_t n_figures);

/* ---- commands ------------------------------------------------------------------- */

int cmd_plan(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_report(int argc, char **argv);

#endif /* CPR_ANALYZE_H */
