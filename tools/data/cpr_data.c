/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr-data: make and inspect DLRM training data. `cpr-data gen` writes a
 * synthetic Criteo-format TSV whose labels come from a hidden teacher (see
 * include/cpr/data.h); `cpr-data stats` reads a Criteo TSV or CSV and
 * reports rows, positives, malformed lines and per-table distinct values.
 * This file parses the command line and runs `gen`; data_stats.c does
 * `stats`.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/data.h"
#include "cpr_cli.h"
#include "cpr_common.h"
#include "data_tool.h"

#define MAX_ROWS (1ull << 40)
#define MAX_CARDINALITY (1ull << 32)
#define PROGRESS_MIN_ROWS (1ull << 20)

static void usage(FILE *out)
{
    fputs("usage: cpr-data <command> [options]\n"
          "\n"
          "commands:\n"
          "  gen     write a synthetic Criteo-format TSV file\n"
          "  stats   read a Criteo TSV or CSV file and summarise it\n"
          "\n"
          "cpr-data gen --rows N -o FILE [--tables T] [--zipf S] [--cardinality C]\n"
          "             [--seed X] [--positive-rate R]\n"
          "  --rows N           lines to write (1 to 2^40)\n"
          "  -o, --output FILE  the file to write (replaced if it exists)\n"
          "  --tables T         categorical fields filled, 1 to 26 (default 26);\n"
          "                     the others are left empty\n"
          "  --zipf S           Zipf exponent of the ids of each table, in (0, 20]\n"
          "                     (default 1.05)\n"
          "  --cardinality C    ids per table, 1 to 2^32 (default 100000)\n"
          "  --seed X           any 64-bit number (default 0); the same options\n"
          "                     write the same bytes\n"
          "  --positive-rate R  share of label 1, in (0, 1) (default 0.25)\n"
          "\n"
          "cpr-data stats FILE [--rows-per-table R] [--strict] [--max-distinct N]\n"
          "                    [--json]\n"
          "  --rows-per-table R rows of each embedding table the categoricals hash\n"
          "                     into (default 10000000); reported as distinct_rows\n"
          "  --strict           stop at the first malformed line (exit 1); by\n"
          "                     default malformed lines are counted and skipped\n"
          "  --max-distinct N   distinct values are counted exactly with hash sets\n"
          "                     holding at most N values in all (default 67108864,\n"
          "                     about 16 bytes each); past it counts are lower\n"
          "                     bounds and distinct_exact is false\n"
          "  --json             print one JSON object on one line\n"
          "\n"
          "  -h, --help         print this help\n"
          "\n"
          "Progress and malformed lines go to stderr. Exit status: 0 done, 1 a\n"
          "failure (or a malformed line with --strict, or no line a row), 2 bad\n"
          "command line.\n",
          out);
}

/* ---- command line -------------------------------------------------------- */

/* The shared parsers (cpr_cli.h), reporting with this tool's name. */
static int report(cpr_status st)
{
    if (st)
        fprintf(stderr, "cpr-data: %s\n", cpr_errmsg());
    return st ? -1 : 0;
}

static int parse_u64(const char *flag, const char *text, uint64_t min, uint64_t max,
                     uint64_t *out)
{
    return report(cpri_cli_u64(flag, text, min, max, out));
}

/* A finite number in (lo, hi), or (lo, hi] when hi_inclusive. */
static int parse_double(const char *flag, const char *text, double lo, double hi,
                        int hi_inclusive, double *out)
{
    return report(cpri_cli_double(flag, text, lo, 0, hi, hi_inclusive, out));
}

static const char *flag_value(int argc, char **argv, int *i, const char *flag, int *missing)
{
    const char *v = cpri_cli_value(argc, argv, i, flag, missing);
    if (*missing)
        report(CPR_INVALID_ARGUMENT);
    return v;
}

static int is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* ---- gen --------------------------------------------------------------------- */

typedef struct gen_opts {
    cpr_synth_options synth;
    uint64_t rows;        /* 0 until given */
    const char *output;
} gen_opts;

typedef enum gen_flag {
    GEN_ROWS, GEN_TABLES, GEN_CARDINALITY, GEN_SEED, GEN_ZIPF, GEN_RATE, GEN_OUTPUT,
    GEN_O, GEN_FLAG_COUNT
} gen_flag;

static const char *const GEN_FLAGS[GEN_FLAG_COUNT] = {
    "--rows", "--tables", "--cardinality", "--seed", "--zipf", "--positive-rate",
    "--output", "-o",
};

/* Store the value of one gen flag: 0 done, -1 error printed. */
static int set_gen_flag(gen_flag f, const char *text, gen_opts *g)
{
    const char *flag = GEN_FLAGS[f];
    uint64_t tables = 0;
    switch (f) {
    case GEN_ROWS:
        return parse_u64(flag, text, 1, MAX_ROWS, &g->rows);
    case GEN_TABLES:
        if (parse_u64(flag, text, 1, CPR_CRITEO_SPARSE, &tables))
            return -1;
        g->synth.tables = (uint32_t)tables;
        return 0;
    case GEN_CARDINALITY:
        return parse_u64(flag, text, 1, MAX_CARDINALITY, &g->synth.cardinality);
    case GEN_SEED:
        return parse_u64(flag, text, 0, UINT64_MAX, &g->synth.seed);
    case GEN_ZIPF:
        return parse_double(flag, text, 0, 20, 1, &g->synth.zipf_s);
    case GEN_RATE:
        return parse_double(flag, text, 0, 1, 0, &g->synth.positive_rate);
    default:
        if (text[0] == '\0') {
            fprintf(stderr, "cpr-data: %s needs a non-empty path\n", flag);
            return -1;
        }
        g->output = text;
        return 0;
    }
}

/* One option of gen at argv[*i]: 0 taken, 1 --help, -1 error printed. */
static int parse_gen_one(int argc, char **argv, int *i, gen_opts *g)
{
    if (is_help(argv[*i]))
        return 1;
    for (int f = 0; f < GEN_FLAG_COUNT; f++) {
        int missing = 0;
        const char *text = flag_value(argc, argv, i, GEN_FLAGS[f], &missing);
        if (missing)
            return -1;
        if (text)
            return set_gen_flag((gen_flag)f, text, g) ? -1 : 0;
    }
    fprintf(stderr, "cpr-data: gen: unknown option '%s' (see cpr-data --help)\n",
            argv[*i]);
    return -1;
}

/* 0 run, 1 help printed, -1 error printed. */
static int parse_gen_args(int argc, char **argv, gen_opts *g)
{
    memset(g, 0, sizeof *g);
    for (int i = 0; i < argc; i++) {
        int rc = parse_gen_one(argc, argv, &i, g);
        if (rc)
            return rc;
    }
    if (g->rows == 0) {
        fprintf(stderr, "cpr-data: gen: --rows N is required\n");
        return -1;
    }
    if (!g->output) {
        fprintf(stderr, "cpr-data: gen: -o FILE is required\n");
        return -1;
    }
    return 0;
}

static void print_progress(void *ctx, uint64_t done, uint64_t total)
{
    double t0 = *(const double *)ctx;
    fprintf(stderr, "cpr-data: gen: %llu/%llu rows (%.0f%%), %.1f s\n",
            (unsigned long long)done, (unsigned long long)total,
            100.0 * (double)done / (double)total, cpri_now_s() - t0);
}

static int cmd_gen(int argc, char **argv)
{
    gen_opts g;
    cpr_synth *synth = NULL;
    int parsed = parse_gen_args(argc, argv, &g);
    if (parsed) {
        if (parsed > 0)
            usage(stdout);
        return parsed > 0 ? 0 : EXIT_USAGE;
    }
    double t0 = cpri_now_s();
    int show = g.rows >= PROGRESS_MIN_ROWS;
    cpr_status st = cpr_synth_create(&g.synth, &synth);
    if (st == CPR_OK)
        st = cpr_synth_write(synth, g.output, g.rows, show ? print_progress : NULL, &t0);
    if (st)
        fprintf(stderr, "cpr-data: gen: %s: %s\n", cpr_status_name(st), cpr_errmsg());
    else if (show)
        fprintf(stderr, "cpr-data: gen: wrote %s\n", g.output);
    cpr_synth_destroy(synth);
    return st ? EXIT_FAILED : 0;
}

/* ---- stats -------------------------------------------------------------------- */

/* One option of stats at argv[*i]: 0 taken, 1 --help, -1 error printed. */
static int parse_stats_one(int argc, char **argv, int *i, stats_opts *o)
{
    const char *arg = argv[*i], *value;
    int missing = 0;
    if (is_help(arg))
        return 1;
    if (strcmp(arg, "--json") == 0) {
        o->json = 1;
        return 0;
    }
    if (strcmp(arg, "--strict") == 0) {
        o->strict = 1;
        return 0;
    }
    value = flag_value(argc, argv, i, "--rows-per-table", &missing);
    if (value || missing)
        return missing || parse_u64("--rows-per-table", value, 1, UINT64_MAX,
                                    &o->rows_per_table) ? -1 : 0;
    value = flag_value(argc, argv, i, "--max-distinct", &missing);
    if (value || missing)
        return missing || parse_u64("--max-distinct", value, 1, 1ull << 40,
                                    &o->max_distinct) ? -1 : 0;
    if (arg[0] == '-' && arg[1] != '\0') {
        fprintf(stderr, "cpr-data: stats: unknown option '%s' (see cpr-data --help)\n",
                arg);
        return -1;
    }
    if (o->path) {
        fprintf(stderr, "cpr-data: stats: one FILE only ('%s' and '%s')\n", o->path, arg);
        return -1;
    }
    o->path = arg;
    return 0;
}

static int cmd_stats(int argc, char **argv)
{
    stats_opts o = {.max_distinct = STATS_DEFAULT_MAX_DISTINCT};
    for (int i = 0; i < argc; i++) {
        int rc = parse_stats_one(argc, argv, &i, &o);
        if (rc > 0)
            usage(stdout);
        if (rc)
            return rc > 0 ? 0 : EXIT_USAGE;
    }
    if (!o.path) {
        fprintf(stderr, "cpr-data: stats: FILE is required\n");
        return EXIT_USAGE;
    }
    return data_stats_run(&o);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (is_help(cmd) || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "gen") == 0)
        return cmd_gen(argc - 2, argv + 2);
    if (strcmp(cmd, "stats") == 0)
        return cmd_stats(argc - 2, argv + 2);
    fprintf(stderr, "cpr-data: unknown command '%s' (see cpr-data --help)\n", cmd);
    return EXIT_USAGE;
}
