/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `cpr-analyze simulate`: the command line, the sweep of intervals, and the
 * results as a table, JSON, CSV and plots. Each strategy runs at its planned
 * interval (full at T_full; partial and the prioritized policies at T_part)
 * and at every interval of a geometric sweep; all of them replay the same
 * seeded failure traces, so differences between strategies are not noise
 * of different traces. sim.c and sim_emb.c do the simulating.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "cpr_cli.h"
#include "cpr_common.h"

#define ALL_STRATEGIES ((1u << SIM_STRATEGY_COUNT) - 1)
#define MAX_POINTS 100

typedef struct sim_cmd {
    model_flags model;
    sim_opts o;
    int json, svg;
    const char *csv, *plot_dir;
} sim_cmd;

typedef enum sim_flag {
    SF_TRIALS, SF_SEED, SF_FAILURES, SF_SHAPE, SF_STRATEGIES, SF_FRACTION, SF_ROWS, SF_ZIPF,
    SF_BATCH, SF_STEPS, SF_EMB_SAVES, SF_EMB_TRIALS, SF_SSU_RATE, SF_POINTS, SF_IMIN, SF_IMAX, SF_CSV,
    SF_PLOT_DIR, SF_COUNT
} sim_flag;

static const char *const SIM_FLAGS[SF_COUNT] = {
    "--trials", "--seed", "--failures", "--shape", "--strategies", "--fraction", "--rows",
    "--zipf", "--batch", "--steps-per-save", "--emb-saves", "--emb-trials", "--ssu-rate", "--points",
    "--interval-min-s", "--interval-max-s", "--csv", "--plot-dir",
};

/* ---- command line ---------------------------------------------------------------- */

static int parse_strategies(const char *text, unsigned *mask)
{
    char buf[256];
    if (strlen(text) >= sizeof buf || text[0] == '\0') {
        fprintf(stderr, "cpr-analyze: --strategies: '%s' is not a list of strategies\n", text);
        return -1;
    }
    memcpy(buf, text, strlen(text) + 1);
    *mask = 0;
    for (char *item = buf, *comma; item; item = comma ? comma + 1 : NULL) {
        comma = strchr(item, ',');
        if (comma)
            *comma = '\0';
        int s = sim_strategy_parse(item);
        if (s < 0) {
            fprintf(stderr, "cpr-analyze: --strategies: '%s' is not one of full, partial, mfu, "
                    "ssu, topk-norm\n", item);
            return -1;
        }
        *mask |= 1u << s;
    }
    return 0;
}

static int parse_u64(const char *flag, const char *text, uint64_t lo, uint64_t hi, uint64_t *out)
{
    return analyze_report(cpri_cli_u64(flag, text, lo, hi, out));
}

static int parse_real(const char *flag, const char *text, double lo, int lo_closed, double hi,
                      double *out)
{
    return analyze_report(cpri_cli_double(flag, text, lo, lo_closed, hi, 1, out));
}

static int set_failures(const char *text, sim_opts *o)
{
    if (strcmp(text, "exponential") && strcmp(text, "weibull")) {
        fprintf(stderr, "cpr-analyze: --failures: '%s' is neither exponential nor weibull\n",
                text);
        return -1;
    }
    o->law = strcmp(text, "weibull") == 0 ? SIM_WEIBULL : SIM_EXPONENTIAL;
    return 0;
}

static int set_sim_flag(sim_flag f, const char *text, sim_cmd *c)
{
    sim_opts *o = &c->o;
    const char *flag = SIM_FLAGS[f];
    uint64_t points = 0;
    switch (f) {
    case SF_TRIALS: return parse_u64(flag, text, 2, 10000000, &o->trials);
    case SF_SEED: return parse_u64(flag, text, 0, UINT64_MAX, &o->seed);
    case SF_FAILURES: return set_failures(text, o);
    case SF_SHAPE: return parse_real(flag, text, 0.1, 1, 10.0, &o->shape);
    case SF_STRATEGIES: return parse_strategies(text, &o->strategies);
    case SF_FRACTION: return parse_real(flag, text, 0.0, 0, 1.0, &o->fraction);
    case SF_ROWS: return parse_u64(flag, text, 1, 1u << 24, &o->rows);
    case SF_ZIPF: return parse_real(flag, text, 0.0, 0, 5.0, &o->zipf);
    case SF_BATCH: return parse_u64(flag, text, 1, 1u << 20, &o->batch);
    case SF_STEPS: return parse_u64(flag, text, 1, 1000000, &o->steps_per_save);
    case SF_EMB_SAVES: return parse_u64(flag, text, 1, 100000000, &o->emb_saves);
    case SF_EMB_TRIALS: return parse_u64(flag, text, 2, 1000000, &o->emb_trials);
    case SF_SSU_RATE: return parse_real(flag, text, 0.0, 0, 1.0, &o->ssu_rate);
    case SF_POINTS:
        if (parse_u64(flag, text, 1, MAX_POINTS, &points))
            return -1;
        o->points = (uint32_t)points;
        return 0;
    case SF_IMIN: return parse_real(flag, text, 0.0, 0, 1e12, &o->interval_min_s);
    case SF_IMAX: return parse_real(flag, text, 0.0, 0, 1e12, &o->interval_max_s);
    case SF_CSV: c->csv = text; return text[0] ? 0 : -1;
    default: c->plot_dir = text; return text[0] ? 0 : -1;
    }
}

/* One argument at argv[*i]: 0 taken, 1 --help, -1 error printed. */
static int parse_one(int argc, char **argv, int *i, sim_cmd *c)
{
    const char *arg = argv[*i];
    if (analyze_is_help(arg))
        return 1;
    if (strcmp(arg, "--json") == 0 || strcmp(arg, "--svg") == 0) {
        *(arg[2] == 'j' ? &c->json : &c->svg) = 1;
        return 0;
    }
    int rc = model_flag_parse(argc, argv, i, &c->model);
    if (rc)
        return rc > 0 ? 0 : -1;
    for (int f = 0; f < SF_COUNT; f++) {
        int missing = 0;
        const char *text = analyze_flag(argc, argv, i, SIM_FLAGS[f], &missing);
        if (missing)
            return -1;
        if (!text)
            continue;
        if (set_sim_flag((sim_flag)f, text, c) == 0)
            return 0;
        if (text[0] == '\0')
            fprintf(stderr, "cpr-analyze: %s needs a non-empty path\n", SIM_FLAGS[f]);
        return -1;
    }
    fprintf(stderr, "cpr-analyze: simulate: unknown option '%s' (see cpr-analyze --help)\n", arg);
    return -1;
}

static void sim_defaults(sim_opts *o)
{
    memset(o, 0, sizeof *o);
    o->trials = 400;
    o->emb_trials = 8;
    o->seed = 1;
    o->shape = 0.7;
    o->fraction = 0.125;
    o->rows = 4096;
    o->zipf = 1.05;
    o->batch = 512;
    o->steps_per_save = 8;
    o->emb_saves = 256;
    o->points = 7;
    o->strategies = ALL_STRATEGIES;
}

/* 0 run, 1 help printed, -1 error printed. */
static int parse_args(int argc, char **argv, sim_cmd *c)
{
    memset(c, 0, sizeof *c);
    sim_defaults(&c->o);
    for (int i = 0; i < argc; i++) {
        int rc = parse_one(argc, argv, &i, c);
        if (rc)
            return rc;
    }
    if (model_flags_complete(&c->model, "simulate"))
        return -1;
    c->o.model = c->model.params;
    if (c->o.rows < c->o.model.shards) {
        fprintf(stderr, "cpr-analyze: --rows: %llu rows cannot fill %u shards\n",
                (unsigned long long)c->o.rows, c->o.model.shards);
        return -1;
    }
    if (c->o.interval_min_s > 0 && c->o.interval_max_s > 0 &&
        c->o.interval_min_s > c->o.interval_max_s) {
        fprintf(stderr, "cpr-analyze: --interval-min-s is above --interval-max-s\n");
        return -1;
    }
    return 0;
}

/* ---- the runs --------------------------------------------------------------------- */

/* The sweep: `points` intervals, geometric, around the planned ones. */
static void sweep_grid(const sim_opts *o, const cpr_model_plan *plan, double *grid)
{
    double t_lo = fmin(plan->full.interval_s, plan->partial.interval_s);
    double t_hi = fmax(plan->full.interval_s, plan->partial.interval_s);
    double lo = o->interval_min_s > 0 ? o->interval_min_s : fmax(o->model.save_s, t_lo / 4);
    double hi = o->interval_max_s > 0 ? o->interval_max_s : fmin(o->model.job_s, 4 * t_hi);
    if (lo > hi)
        lo = hi;
    for (uint32_t i = 0; i < o->points; i++)
        grid[i] = o->points == 1 ? hi : lo * pow(hi / lo, (double)i / (o->points - 1));
}

typedef struct sim_run {
    sim_result *results;
    size_t n;
    cpr_model_plan plan;
} sim_run;

static uint64_t total_trials(const sim_opts *o)
{
    uint64_t sum = 0;
    for (int s = 0; s < SIM_STRATEGY_COUNT; s++)
        if (o->strategies & (1u << s))
            sum += (o->points + 1) *
                   (sim_strategy_prioritized((sim_strategy)s) ? o->emb_trials : o->trials);
    return sum;
}

static cpr_status run_all(const sim_opts *o, const double *grid, sim_run *run)
{
    sim_progress progress = {.t0 = cpri_now_s(), .total = total_trials(o)};
    progress.last = progress.t0;
    cpr_status st = CPR_OK;
    run->results = calloc((size_t)SIM_STRATEGY_COUNT * (o->points + 1), sizeof *run->results);
    if (!run->results)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the results");
    for (int s = 0; s < SIM_STRATEGY_COUNT && st == CPR_OK; s++) {
        if (!(o->strategies & (1u << s)))
            continue;
        double planned = s == SIM_FULL ? run->plan.full.interval_s : run->plan.partial.interval_s;
        st = sim_run_point(o, (sim_strategy)s, planned, 1, &progress, &run->results[run->n++]);
        for (uint32_t i = 0; i < o->points && st == CPR_OK; i++)
            st = sim_run_point(o, (sim_strategy)s, grid[i], 0, &progress,
                               &run->results[run->n++]);
    }
    if (progress.last > progress.t0)
        fprintf(stderr, "cpr-analyze: simulate: done, %.1f s\n", cpri_now_s() - progress.t0);
    return st;
}

/* ---- output ------------------------------------------------------------------------ */

static cpri_json *stat_json(sim_stat s)
{
    static const char *const keys[] = {"mean", "lo", "hi"};
    const double values[] = {s.mean, s.lo, s.hi};
    return cpri_json_numbers(keys, values, 3);
}

static cpri_json *result_json(const sim_opts *o, const sim_result *r)
{
    cpri_json *j = cpri_json_object();
    int bad = !j;
    bad |= cpri_json_add_string(j, "strategy", sim_strategy_name(r->strategy)) |
           cpri_json_add_string(j, "point", r->at_plan ? "plan" : "sweep") |
           cpri_json_add_number(j, "interval_s", r->interval_s) |
           cpri_json_add_number(j, "save_interval_s", r->save_interval_s) |
           cpri_json_add_number(j, "trials", (double)r->trials) |
           json_put(j, "overhead_frac", stat_json(r->overhead_frac)) |
           json_put(j, "pls", stat_json(r->pls)) |
           cpri_json_add_number(j, "save_frac", r->save_frac) |
           cpri_json_add_number(j, "load_frac", r->load_frac) |
           cpri_json_add_number(j, "lost_frac", r->lost_frac) |
           cpri_json_add_number(j, "restart_frac", r->restart_frac) |
           cpri_json_add_number(j, "background_frac", r->background_frac) |
           cpri_json_add_number(j, "background_share", r->background_share) |
           cpri_json_add_bool(j, "back_to_back", r->back_to_back) |
           cpri_json_add_number(j, "failures", r->failures) |
           cpri_json_add_number(j, "model_overhead_frac", r->model_overhead_frac) |
           cpri_json_add_number(j, "model_pls", r->model_pls);
    if (sim_strategy_prioritized(r->strategy) && r->model_pls > 0)
        bad |= cpri_json_add_number(j, "loss_ratio", r->pls.mean / r->model_pls) |
               cpri_json_add_number(j, "fraction", o->fraction);
    if (bad) {
        cpri_json_free(j);
        return NULL;
    }
    return j;
}

static cpri_json *params_json(const sim_opts *o)
{
    const cpr_model_params *p = &o->model;
    cpri_json *j = cpri_json_object();
    int bad = !j;
    bad |= cpri_json_add_number(j, "mtbf_s", p->mtbf_s) |
           cpri_json_add_number(j, "shards", p->shards) |
           cpri_json_add_number(j, "save_s", p->save_s) |
           cpri_json_add_number(j, "load_s", p->load_s) |
           cpri_json_add_number(j, "restart_s", p->restart_s) |
           cpri_json_add_number(j, "job_s", p->job_s) |
           cpri_json_add_number(j, "target_pls", p->target_pls) |
           cpri_json_add_string(j, "formula", cpr_interval_formula_name(p->formula)) |
           cpri_json_add_number(j, "background_s", p->background_s) |
           cpri_json_add_number(j, "background_cost_s", p->background_cost_s) |
           cpri_json_add_number(j, "max_background_share", model_background_share(p)) |
           cpri_json_add_string(j, "failures", o->law == SIM_WEIBULL ? "weibull" : "exponential") |
           cpri_json_add_number(j, "shape", o->law == SIM_WEIBULL ? o->shape : 1.0) |
           cpri_json_add_number(j, "trials", (double)o->trials) |
           cpri_json_add_number(j, "emb_trials", (double)o->emb_trials) |
           cpri_json_add_number(j, "seed", (double)o->seed) |
           cpri_json_add_number(j, "fraction", o->fraction) |
           cpri_json_add_number(j, "rows", (double)o->rows) |
           cpri_json_add_number(j, "zipf", o->zipf) |
           cpri_json_add_number(j, "batch", (double)o->batch) |
           cpri_json_add_number(j, "steps_per_save", (double)o->steps_per_save) |
           cpri_json_add_number(j, "emb_saves", (double)o->emb_saves);
    if (bad) {
        cpri_json_free(j);
        return NULL;
    }
    return j;
}

static int print_json(const sim_opts *o, const sim_run *run)
{
    cpri_json *root = cpri_json_object(), *results = cpri_json_array();
    int bad = !root || !results;
    for (size_t i = 0; i < run->n && !bad; i++) {
        cpri_json *r = result_json(o, &run->results[i]);
        if (cpri_json_append(results, r)) {
            cpri_json_free(r);
            bad = 1;
        }
    }
    bad |= json_put(root, "params", params_json(o));
    bad |= json_put(root, "plan", plan_json(&run->plan));
    bad |= json_put(root, "results", results);
    bad |= !bad && cpri_json_print(root, stdout);
    cpri_json_free(root);
    if (bad)
        fprintf(stderr, "cpr-analyze: simulate: out of memory writing JSON\n");
    return bad ? -1 : 0;
}

static void print_table(const sim_opts *o, const sim_run *run)
{
    const cpr_model_params *p = &o->model;
    printf("cpr-analyze simulate: %u shards, MTBF %.4g h (%s), job %.4g h, save %.4g s, load "
           "%.4g s, restart %.4g s; %llu trials (%llu for prioritized, fraction %.4g), seed "
           "%llu\n\n", p->shards, p->mtbf_s / 3600,
           o->law == SIM_WEIBULL ? "weibull" : "exponential", p->job_s / 3600, p->save_s,
           p->load_s, p->restart_s, (unsigned long long)o->trials,
           (unsigned long long)o->emb_trials, o->fraction, (unsigned long long)o->seed);
    if (p->background_s > 0 || p->background_cost_s > 0)
        printf("background of a full save %.4g s costing %.4g s (r of it for a prioritized "
               "save), in flight at most %.4g of the time between saves in the plan\n\n",
               p->background_s, p->background_cost_s, model_background_share(p));
    printf("%-10s %-5s %11s %24s %28s %9s %9s %10s %10s %8s %3s\n", "strategy", "point",
           "interval_s", "overhead [95% CI]", "PLS [95% CI]", "failures", "model", "model PLS",
           "background", "bg share", "b2b");
    for (size_t i = 0; i < run->n; i++) {
        const sim_result *r = &run->results[i];
        printf("%-10s %-5s %11.1f %7.3f%% [%6.3f, %6.3f] %9.3g [%7.3g, %7.3g] %9.2f %8.3f%% "
               "%10.3g %9.3f%% %8.3g %3s\n", sim_strategy_name(r->strategy),
               r->at_plan ? "plan" : "sweep", r->interval_s, 100 * r->overhead_frac.mean,
               100 * r->overhead_frac.lo, 100 * r->overhead_frac.hi, r->pls.mean, r->pls.lo,
               r->pls.hi, r->failures, 100 * r->model_overhead_frac, r->model_pls,
               100 * r->background_frac, r->background_share, r->back_to_back ? "yes" : "no");
    }
    printf("\nplan: %s recovery (full %.3f%% at %.1f s, partial %.3f%% at %.1f s)\n",
           cpr_recovery_mode_name(run->plan.decision), 100 * run->plan.full.overhead_frac,
           run->plan.full.interval_s, 100 * run->plan.partial.overhead_frac,
           run->plan.partial.interval_s);
}

static int write_csv(const char *path, const sim_run *run)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cpr-analyze: --csv: cannot write %s\n", path);
        return -1;
    }
    fprintf(f, "strategy,point,interval_s,save_interval_s,trials,overhead_frac_mean,"
            "overhead_frac_lo,overhead_frac_hi,pls_mean,pls_lo,pls_hi,save_frac,load_frac,"
            "lost_frac,restart_frac,failures,model_overhead_frac,model_pls,background_frac,"
            "background_share,back_to_back\n");
    for (size_t i = 0; i < run->n; i++) {
        const sim_result *r = &run->results[i];
        fprintf(f, "%s,%s,%.17g,%.17g,%llu,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,"
                "%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%d\n", sim_strategy_name(r->strategy),
                r->at_plan ? "plan" : "sweep", r->interval_s, r->save_interval_s,
                (unsigned long long)r->trials, r->overhead_frac.mean, r->overhead_frac.lo,
                r->overhead_frac.hi, r->pls.mean, r->pls.lo, r->pls.hi, r->save_frac,
                r->load_frac, r->lost_frac, r->restart_frac, r->failures,
                r->model_overhead_frac, r->model_pls, r->background_frac, r->background_share,
                r->back_to_back);
    }
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad)
        fprintf(stderr, "cpr-analyze: --csv: error writing %s\n", path);
    return bad ? -1 : 0;
}

/* ---- plots -------------------------------------------------------------------------- */

typedef struct series_data {
    double x[MAX_POINTS], y[2][MAX_POINTS], lo[2][MAX_POINTS], hi[2][MAX_POINTS];
} series_data;

static int plot_results(const sim_cmd *c, const sim_run *run)
{
    series_data data[SIM_STRATEGY_COUNT];
    plot_series over[SIM_STRATEGY_COUNT], pls[SIM_STRATEGY_COUNT];
    size_t n_series = 0;
    for (int s = 0; s < SIM_STRATEGY_COUNT; s++) {
        if (!(c->o.strategies & (1u << s)))
            continue;
        series_data *d = &data[n_series];
        size_t n = 0;
        for (size_t i = 0; i < run->n; i++) {
            const sim_result *r = &run->results[i];
            if ((int)r->strategy != s || r->at_plan)
                continue;
            d->x[n] = r->interval_s;
            d->y[0][n] = r->overhead_frac.mean, d->lo[0][n] = r->overhead_frac.lo;
            d->hi[0][n] = r->overhead_frac.hi, d->y[1][n] = r->pls.mean;
            d->lo[1][n] = r->pls.lo, d->hi[1][n] = r->pls.hi;
            n++;
        }
        const char *name = sim_strategy_name((sim_strategy)s);
        over[n_series] = (plot_series){name, n, d->x, d->y[0], d->lo[0], d->hi[0]};
        pls[n_series] = (plot_series){name, n, d->x, d->y[1], d->lo[1], d->hi[1]};
        n_series++;
    }
    plot_figure figs[2] = {
        {"overhead", "checkpoint interval (s)", "overhead (fraction of the job)", 1, n_series, over},
        {"pls", "checkpoint interval (s)", "PLS (portion of updates lost)", 1, n_series, pls},
    };
    return plot_write(c->plot_dir, c->svg, figs, 2);
}

int cmd_simulate(int argc, char **argv)
{
    sim_cmd c;
    int parsed = parse_args(argc, argv, &c), rc = 0;
    if (parsed)
        return parsed > 0 ? (analyze_usage(stdout), 0) : EXIT_USAGE;
    sim_run run = {0};
    double grid[MAX_POINTS];
    if (analyze_report(cpr_model_plan_compute(&c.o.model, &run.plan)))
        return EXIT_FAILED;
    sweep_grid(&c.o, &run.plan, grid);
    cpr_status st = run_all(&c.o, grid, &run);
    if (st)
        rc = analyze_report(st) ? EXIT_FAILED : 0;
    else if (c.json)
        rc = print_json(&c.o, &run) ? EXIT_FAILED : 0;
    else
        print_table(&c.o, &run);
    if (!rc && c.csv && write_csv(c.csv, &run))
        rc = EXIT_FAILED;
    if (!rc && c.plot_dir && plot_results(&c, &run))
        rc = EXIT_FAILED;
    free(run.results);
    return rc;
}
