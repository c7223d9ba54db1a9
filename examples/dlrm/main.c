/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr-dlrm: train the reference DLRM on a Criteo file (real Kaggle/Terabyte
 * data or `cpr-data gen` output), evaluate it on the held-out lines and
 * write a JSON event log. This file is the command line (its flag values
 * are parsed by flags.c) and the progress lines on stderr; the model,
 * loader and loop are cpr_dlrm (dlrm.h), and checkpointing, failure
 * injection and recovery are ckpt.h's hooks, set up in make_hooks() below.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "cpr/codec.h"
#include "cpr/cuda.h"
#include "cpr/failure.h"
#include "dlrm.h"
#include "flags.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2

static void usage(FILE *out)
{
    fputs("usage: cpr-dlrm --data FILE [options]\n"
          "\n"
          "Train a DLRM on a Criteo TSV/CSV file; the last --holdout of its lines are\n"
          "held out for evaluation (AUC, log loss).\n"
          "\n"
          "data and run:\n"
          "  --data FILE            Criteo TSV (Kaggle/Terabyte, cpr-data gen) or CSV\n"
          "                         with a header (a regular file, read more than\n"
          "                         once); also accepted as the only argument\n"
          "  --steps N              train N steps (batches)\n"
          "  --epochs E             train E passes over the training lines (default 1;\n"
          "                         not with --steps)\n"
          "  --batch B              samples per step (default 128)\n"
          "  --holdout F            fraction in [0, 1) of the lines, taken from the end\n"
          "                         of the file, held out (default 0.1)\n"
          "  --shuffle-window N     shuffle samples within windows of N (default 0:\n"
          "                         file order)\n"
          "  --seed S               weights, tables and shuffle (default 0)\n"
          "\n"
          "model:\n"
          "  --emb-dim D            embedding width (default 16)\n"
          "  --table-rows R         rows per table: categoricals hash modulo R\n"
          "                         (default 100000)\n"
          "  --tables T             use categoricals C1..CT (default 26)\n"
          "  --bottom SPEC          bottom MLP widths, 13 first and D last\n"
          "                         (default 13-64-D)\n"
          "  --top SPEC             top MLP widths after the interaction, 1 last\n"
          "                         (default 128-64-1)\n"
          "  --optimizer O          MLPs: sgd or adagrad (default adagrad)\n"
          "  --lr LR                MLP learning rate (default 0.05)\n"
          "  --emb-optimizer O      tables: sgd, rowwise-adagrad or adagrad\n"
          "                         (default rowwise-adagrad)\n"
          "  --emb-lr LR            table learning rate (default: --lr)\n"
          "  --shards N             shards per table, the unit that fails and is\n"
          "                         checkpointed (default 1)\n"
          "  --shard-scheme S       range or modulo (default range)\n"
          "  --track LIST           table trackers: none, all, or a comma list of\n"
          "                         counts,dirty,ssu,norm (default none)\n"
          "  --device D             tables on cpu, cuda or auto (default cpu)\n"
          "  --ssu-rate P           SSU: probability an access is sampled (default:\n"
          "                         set at each save so that the next is offered\n"
          "                         about twice its budget of rows)\n"
          "\n"
          "checkpoints and recovery (docs/dlrm.md):\n"
          "  --ckpt TARGET          grpc://HOST:PORT[,...] (ckptd) or local:///PATH;\n"
          "                         none (default): no checkpoints\n"
          "  --job NAME             job name in storage (default dlrm)\n"
          "  --policy P             full, delta, partial, mfu, ssu, topk-norm or auto\n"
          "                         (default full)\n"
          "  --ckpt-interval-steps K  base interval in steps (prioritized policies save\n"
          "                         every r*K); default: derived from the recovery model\n"
          "  --fraction R           rows a prioritized save takes (default 0.125)\n"
          "  --full-every N         delta/prioritized: a FULL part every N saves\n"
          "                         (default 8 for delta, first save only otherwise)\n"
          "  --recovery M           partial, full or auto (default: full for full and\n"
          "                         delta, auto for auto, partial otherwise)\n"
          "  --restart-s S          emulated restart cost per failure, counted as\n"
          "                         overhead, never slept (default 0)\n"
          "  --target-pls P         largest acceptable PLS (default 0.02)\n"
          "  --ckpt-timeout-s S     client deadlines (default 30)\n"
          "  --ckpt-sync            wait for each save's commit (reproducible save\n"
          "                         points; the wait counts as stall)\n"
          "  --resume               continue the job from its latest consistent cut\n"
          "  --ckpt-codec C         encoding of PRIORITY and DELTA parts' rows: f32\n"
          "                         (default), bf16, f16, int8 or int4; auto: the\n"
          "                         estimator's choice at each save, from the\n"
          "                         restores a row is expected to see\n"
          "  --ckpt-codec-full C    the same for FULL parts (default f32: exact; not auto)\n"
          "  --ckpt-cpus LIST       CPUs for the checkpoint client's threads (copying\n"
          "                         saves out, checksums, sending), e.g. 1 or 2-7: keep\n"
          "                         them off the training cores (default: anywhere the\n"
          "                         trainer may run)\n"
          "  --staging-mb M         host memory for staged saves (default: two whole\n"
          "                         FULL saves); a save that does not fit waits for\n"
          "                         the wire, counted as stall\n"
          "  --crash-at-step N      SIGKILL this process after step N (after draining\n"
          "                         the save in flight): a real trainer fault\n"
          "  --crash-mid-save       with --crash-at-step: die with a save staged and\n"
          "                         not committed (one is started if none is in\n"
          "                         flight) instead of draining it\n"
          "\n"
          "failure injection:\n"
          "  --mtbf-steps M         mean executed steps between shard failures\n"
          "  --failures K           K failures expected over the run (mean = steps/K)\n"
          "  --failure-dist D       exponential or weibull (default exponential)\n"
          "  --weibull-shape K      Weibull shape (default 0.7); same mean\n"
          "  --failure-seed S       seed of the schedule (default 1)\n"
          "\n"
          "output:\n"
          "  --eval-every K         evaluate every K steps (default 0: at the end only)\n"
          "  --eval-max N           at most N held-out samples per evaluation\n"
          "                         (default 0: all)\n"
          "  --log-every K          a step event and progress line every K steps\n"
          "                         (default 100; 0: none)\n"
          "  --json-log FILE        one JSON object per line: start, step, eval, summary\n"
          "  -q, --quiet            no progress lines\n"
          "  -h, --help             print this help\n"
          "\n"
          "Exit status: 0 done, 1 failure, 2 bad command line.\n",
          out);
}

typedef struct options {
    dlrm_config model;
    dlrm_loader_options data;
    dlrm_train_options train;
    const char *json_log;
    const char *bottom_spec;
    int have_steps, have_epochs, have_emb_lr, quiet;
    int device_auto;
    dlrm_ckpt_options ckpt;
    int have_recovery;
    double failures_expected, mtbf_steps, weibull_shape;
    uint64_t failure_seed;
    int failure_dist;
} options;

static int parse_u32(const char *flag, const char *text, uint32_t lo, uint32_t hi,
                     uint32_t *out)
{
    uint64_t v = 0;
    if (dlrm_flag_u64(flag, text, lo, hi, &v))
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_rate(const char *flag, const char *text, float *out)
{
    double v = 0;
    if (dlrm_flag_number(flag, text, 0, 1e6, "(]", &v))
        return -1;
    *out = (float)v;
    return 0;
}

/* One of `names` (index into it), or -1 with a message. */
static int parse_choice(const char *flag, const char *text, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(text, names[i]) == 0)
            return i;
    fprintf(stderr, "cpr-dlrm: %s: '%s' is not one of", flag, text);
    for (int i = 0; names[i]; i++)
        fprintf(stderr, " %s", names[i]);
    fputc('\n', stderr);
    return -1;
}

static int parse_track(const char *text, unsigned *out)
{
    static const char *const bits[] = {"counts", "dirty", "ssu", "norm", NULL};
    unsigned track = 0;
    char word[16];
    if (strcmp(text, "none") == 0 || strcmp(text, "all") == 0) {
        *out = text[0] == 'a' ? CPR_TRACK_ALL : 0;
        return 0;
    }
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int bit = -1;
        if (len < sizeof word) {
            memcpy(word, p, len);
            word[len] = '\0';
            bit = parse_choice("--track", word, bits);
        } else {
            fprintf(stderr, "cpr-dlrm: --track: '%s' is not none, all or a list of "
                    "counts,dirty,ssu,norm\n", text);
        }
        if (bit < 0)
            return -1;
        track |= 1u << bit;
        if (!comma)
            break;
        p = comma + 1;
    }
    *out = track;
    return 0;
}

static int parse_layers(const char *flag, const char *text, dlrm_layers *out)
{
    cpr_status st = dlrm_layers_parse(text, out);
    if (st)
        fprintf(stderr, "cpr-dlrm: %s: %s\n", flag, cpr_errmsg());
    return st ? -1 : 0;
}

static int set_choice_flag(options *o, const char *flag, const char *v)
{
    static const char *const mlp_opts[] = {"sgd", "adagrad", NULL};
    static const char *const emb_opts[] = {"sgd", "rowwise-adagrad", "adagrad", NULL};
    static const char *const schemes[] = {"range", "modulo", NULL};
    static const char *const devices[] = {"cpu", "cuda", "auto", NULL};
    int c;
    if (strcmp(flag, "--optimizer") == 0) {
        c = parse_choice(flag, v, mlp_opts);
        o->model.optimizer = (dlrm_optimizer)c;
    } else if (strcmp(flag, "--emb-optimizer") == 0) {
        c = parse_choice(flag, v, emb_opts);
        o->model.emb_optimizer = (cpr_optimizer)c;
    } else if (strcmp(flag, "--shard-scheme") == 0) {
        c = parse_choice(flag, v, schemes);
        o->model.shard_scheme = (cpr_shard_scheme)c;
    } else {
        c = parse_choice(flag, v, devices);
        o->model.device = c == 1 ? CPR_DEVICE_CUDA : CPR_DEVICE_CPU;
        o->device_auto = c == 2;
    }
    return c < 0 ? -1 : 0;
}

/* Flags that take a whole number, with their ranges. */
static int set_count_flag(options *o, const char *flag, const char *v)
{
    dlrm_config *m = &o->model;
    if (strcmp(flag, "--steps") == 0) {
        o->have_steps = 1;
        return dlrm_flag_u64(flag, v, 1, UINT64_MAX / 2, &o->train.steps);
    }
    if (strcmp(flag, "--epochs") == 0) {
        o->have_epochs = 1;
        return dlrm_flag_u64(flag, v, 1, 1u << 20, &o->train.epochs);
    }
    if (strcmp(flag, "--batch") == 0)
        return parse_u32(flag, v, 1, 1u << 20, &m->max_batch);
    if (strcmp(flag, "--emb-dim") == 0)
        return parse_u32(flag, v, 1, 4096, &m->emb_dim);
    if (strcmp(flag, "--table-rows") == 0)
        return dlrm_flag_u64(flag, v, 1, 1ull << 40, &m->table_rows);
    if (strcmp(flag, "--tables") == 0)
        return parse_u32(flag, v, 1, CPR_CRITEO_SPARSE, &m->num_tables);
    if (strcmp(flag, "--shards") == 0)
        return parse_u32(flag, v, 1, 1u << 16, &m->num_shards);
    if (strcmp(flag, "--seed") == 0)
        return dlrm_flag_u64(flag, v, 0, UINT64_MAX, &m->seed);
    if (strcmp(flag, "--eval-every") == 0)
        return dlrm_flag_u64(flag, v, 0, UINT64_MAX, &o->train.eval_every);
    if (strcmp(flag, "--eval-max") == 0)
        return dlrm_flag_u64(flag, v, 0, UINT64_MAX, &o->train.eval_max);
    if (strcmp(flag, "--log-every") == 0)
        return dlrm_flag_u64(flag, v, 0, UINT64_MAX, &o->train.log_every);
    /* --shuffle-window */
    return dlrm_flag_u64(flag, v, 0, 1ull << 28, &o->data.shuffle_window);
}

static int set_number_flag(options *o, const char *flag, const char *v)
{
    if (strcmp(flag, "--lr") == 0)
        return parse_rate(flag, v, &o->model.lr);
    if (strcmp(flag, "--emb-lr") == 0) {
        o->have_emb_lr = 1;
        return parse_rate(flag, v, &o->model.emb_lr);
    }
    if (strcmp(flag, "--holdout") == 0)
        return dlrm_flag_number(flag, v, 0, 1, "[)", &o->data.holdout);
    if (strcmp(flag, "--staging-mb") == 0)
        return dlrm_flag_number(flag, v, 0, 1e7, "(]", &o->ckpt.staging_mb);
    if (strcmp(flag, "--ssu-rate") == 0)
        return dlrm_flag_number(flag, v, 0, 1, "(]", &o->model.ssu_rate);
    return set_count_flag(o, flag, v);
}

static const char *const VALUE_FLAGS[] = {
    "--data", "--json-log", "--bottom", "--top", "--track", "--optimizer",
    "--emb-optimizer", "--shard-scheme", "--device", "--steps", "--epochs", "--batch",
    "--lr", "--emb-lr", "--emb-dim", "--table-rows", "--tables", "--shards", "--seed",
    "--eval-every", "--eval-max", "--log-every", "--shuffle-window", "--holdout", "--ssu-rate", "--staging-mb",
    "--ckpt", "--ckpt-cpus", "--ckpt-codec", "--ckpt-codec-full", "--job", "--policy", "--ckpt-interval-steps", "--fraction", "--full-every",
    "--recovery", "--restart-s", "--target-pls", "--ckpt-timeout-s", "--crash-at-step",
    "--mtbf-steps", "--failures", "--failure-dist", "--weibull-shape", "--failure-seed",
    NULL};

/* The flags of checkpointing and failure injection: 0 set, -1 error, 1 not one. */
static int set_ckpt_flag(options *o, const char *flag, const char *v)
{
    static const char *const recoveries[] = {"partial", "full", "auto", NULL};
    static const char *const dists[] = {"exponential", "weibull", NULL};
    dlrm_ckpt_options *c = &o->ckpt;
    int i;
    if (strcmp(flag, "--ckpt") == 0) {
        c->target = strcmp(v, "none") == 0 ? NULL : v;
        return 0;
    }
    if (strcmp(flag, "--ckpt-cpus") == 0) { /* the CPUs themselves: cpr_client_open */
        c->ckpt_cpus = v;
        return dlrm_flag_cpu_list(flag, v);
    }
    if (strcmp(flag, "--ckpt-codec") == 0 || strcmp(flag, "--ckpt-codec-full") == 0) {
        cpr_codec codec;
        if (strcmp(flag, "--ckpt-codec") == 0 && strcmp(v, "auto") == 0) {
            c->codec_auto = 1; /* the estimator's choice (docs/model.md) */
            return 0;
        }
        if (cpr_codec_parse(v, &codec) != CPR_OK) {
            fprintf(stderr, "cpr-dlrm: %s: %s\n", flag, cpr_errmsg());
            return -1;
        }
        *(strcmp(flag, "--ckpt-codec") == 0 ? &c->codec : &c->full_codec) = (uint32_t)codec;
        return 0;
    }
    if (strcmp(flag, "--job") == 0) {
        c->job = v;
        return 0;
    }
    if (strcmp(flag, "--policy") == 0) {
        static const char *const names[] = {"full", "delta", "partial", "mfu", "ssu",
                                            "topk-norm", "auto", NULL};
        i = parse_choice(flag, v, names);
        c->policy = (dlrm_ckpt_policy)i;
        return i < 0 ? -1 : 0;
    }
    if (strcmp(flag, "--recovery") == 0) {
        i = parse_choice(flag, v, recoveries);
        c->recovery = (dlrm_recovery_choice)i;
        o->have_recovery = 1;
        return i < 0 ? -1 : 0;
    }
    if (strcmp(flag, "--failure-dist") == 0) {
        i = parse_choice(flag, v, dists);
        o->failure_dist = i;
        return i < 0 ? -1 : 0;
    }
    if (strcmp(flag, "--ckpt-interval-steps") == 0)
        return dlrm_flag_u64(flag, v, 1, UINT64_MAX / 2, &c->interval_steps);
    if (strcmp(flag, "--full-every") == 0)
        return parse_u32(flag, v, 0, UINT32_MAX, &c->full_every);
    if (strcmp(flag, "--crash-at-step") == 0)
        return dlrm_flag_u64(flag, v, 1, UINT64_MAX / 2, &c->crash_at_step);
    if (strcmp(flag, "--failure-seed") == 0)
        return dlrm_flag_u64(flag, v, 0, UINT64_MAX, &o->failure_seed);
    if (strcmp(flag, "--fraction") == 0)
        return dlrm_flag_number(flag, v, 0, 1, "(]", &c->fraction);
    if (strcmp(flag, "--target-pls") == 0)
        return dlrm_flag_number(flag, v, 0, 1, "()", &c->target_pls);
    if (strcmp(flag, "--restart-s") == 0)
        return dlrm_flag_number(flag, v, 0, 1e9, "[]", &c->restart_s);
    if (strcmp(flag, "--ckpt-timeout-s") == 0)
        return dlrm_flag_number(flag, v, 0, 1e6, "(]", &c->timeout_s);
    if (strcmp(flag, "--mtbf-steps") == 0)
        return dlrm_flag_number(flag, v, 0, 1e15, "(]", &o->mtbf_steps);
    if (strcmp(flag, "--failures") == 0)
        return dlrm_flag_number(flag, v, 0, 1e9, "[]", &o->failures_expected);
    if (strcmp(flag, "--weibull-shape") == 0)
        return dlrm_flag_number(flag, v, 0, 100, "(]", &o->weibull_shape);
    return 1;
}

static int set_flag(options *o, const char *flag, const char *v)
{
    int ck = set_ckpt_flag(o, flag, v);
    if (ck <= 0)
        return ck;
    if (strcmp(flag, "--data") == 0 || strcmp(flag, "--json-log") == 0) {
        if (v[0] == '\0') {
            fprintf(stderr, "cpr-dlrm: %s needs a non-empty path\n", flag);
            return -1;
        }
        *(strcmp(flag, "--data") == 0 ? &o->data.path : &o->json_log) = v;
        return 0;
    }
    if (strcmp(flag, "--bottom") == 0) {
        o->bottom_spec = v;
        return parse_layers(flag, v, &o->model.bottom);
    }
    if (strcmp(flag, "--top") == 0)
        return parse_layers(flag, v, &o->model.top);
    if (strcmp(flag, "--track") == 0)
        return parse_track(v, &o->model.track);
    if (strcmp(flag, "--optimizer") == 0 || strcmp(flag, "--emb-optimizer") == 0 ||
        strcmp(flag, "--shard-scheme") == 0 || strcmp(flag, "--device") == 0)
        return set_choice_flag(o, flag, v);
    return set_number_flag(o, flag, v);
}

/* One argument at argv[*i]: 0 taken, 1 help, -1 error printed. */
static int parse_one(int argc, char **argv, int *i, options *o)
{
    const char *arg = argv[*i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
        return 1;
    if (strcmp(arg, "--quiet") == 0 || strcmp(arg, "-q") == 0) {
        o->quiet = 1;
        return 0;
    }
    if (strcmp(arg, "--resume") == 0) {
        o->ckpt.resume = 1;
        return 0;
    }
    if (strcmp(arg, "--ckpt-sync") == 0) {
        o->ckpt.sync = 1;
        return 0;
    }
    if (strcmp(arg, "--crash-mid-save") == 0) {
        o->ckpt.crash_mid_save = 1;
        return 0;
    }
    for (int f = 0; VALUE_FLAGS[f]; f++) {
        int missing = 0;
        const char *v = dlrm_flag_value(argc, argv, i, VALUE_FLAGS[f], &missing);
        if (missing)
            return -1;
        if (v)
            return set_flag(o, VALUE_FLAGS[f], v);
    }
    if (arg[0] == '-' || o->data.path) {
        fprintf(stderr, "cpr-dlrm: unexpected argument '%s' (see cpr-dlrm --help)\n", arg);
        return -1;
    }
    o->data.path = arg;
    return 0;
}

/* Cross-flag rules and defaults that depend on other flags. */
static int finish_options(options *o)
{
    if (!o->data.path) {
        fprintf(stderr, "cpr-dlrm: --data FILE is required (see cpr-dlrm --help)\n");
        return -1;
    }
    if (o->have_steps && o->have_epochs) {
        fprintf(stderr, "cpr-dlrm: --steps and --epochs exclude each other\n");
        return -1;
    }
    if (!o->have_steps && !o->have_epochs)
        o->train.epochs = 1;
    if (o->mtbf_steps > 0 && o->failures_expected > 0) {
        fprintf(stderr, "cpr-dlrm: --mtbf-steps and --failures exclude each other\n");
        return -1;
    }
    if (o->ckpt.resume && !o->ckpt.target) {
        fprintf(stderr, "cpr-dlrm: --resume needs --ckpt TARGET\n");
        return -1;
    }
    if (!o->have_recovery)
        o->ckpt.recovery = dlrm_ckpt_default_recovery(o->ckpt.policy);
    if (o->ckpt.target || o->mtbf_steps > 0 || o->failures_expected > 0)
        o->model.track |= dlrm_ckpt_policy_track(o->ckpt.policy);
    o->ckpt.ssu_rate_auto = o->model.ssu_rate == 0;
    if (!o->have_emb_lr)
        o->model.emb_lr = o->model.lr;
    if (!o->bottom_spec) /* 13-64-D follows --emb-dim */
        o->model.bottom.size[2] = o->model.emb_dim;
    o->train.batch = o->model.max_batch;
    o->data.num_tables = o->model.num_tables;
    o->data.table_rows = o->model.table_rows;
    o->data.seed = o->model.seed;
    return 0;
}

/* 0 run, 1 help printed, -1 error printed. */
static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    dlrm_config_init(&o->model);
    o->data.holdout = 0.1;
    o->train.log_every = 100;
    o->failure_seed = 1;
    o->weibull_shape = 0.7;
    for (int i = 1; i < argc; i++) {
        int rc = parse_one(argc, argv, &i, o);
        if (rc)
            return rc;
    }
    return finish_options(o);
}

/* ---- running ---------------------------------------------------------------------- */

static void print_progress(void *ctx, const dlrm_progress *p)
{
    (void)ctx;
    if (p->eval) {
        fprintf(stderr, "cpr-dlrm: eval at step %llu: auc %.4f logloss %.4f (%llu samples)\n",
                (unsigned long long)p->step, p->eval->auc, p->eval->logloss,
                (unsigned long long)p->eval->samples);
        return;
    }
    if (p->steps_total)
        fprintf(stderr, "cpr-dlrm: step %llu/%llu", (unsigned long long)p->step,
                (unsigned long long)p->steps_total);
    else
        fprintf(stderr, "cpr-dlrm: step %llu (epoch %llu)", (unsigned long long)p->step,
                (unsigned long long)p->epoch + 1);
    fprintf(stderr, " loss %.4f, %.1f steps/s, %.1f s\n", p->loss, p->steps_per_s,
            p->elapsed_s);
}

/* The run's length in steps: --steps, or epochs of whole batches. */
static uint64_t total_steps(const options *o, const dlrm_loader *loader)
{
    if (o->train.steps)
        return o->train.steps;
    uint64_t per_epoch = (dlrm_loader_train_lines(loader) + o->train.batch - 1) /
                         o->train.batch;
    return o->train.epochs * (per_epoch ? per_epoch : 1);
}

/* The failure schedule of this run (none without --mtbf-steps/--failures),
 * printed so that runs can be compared. */
static cpr_status make_schedule(options *o, uint64_t steps, cpr_failure **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    double mean = o->mtbf_steps > 0 ? o->mtbf_steps
                  : o->failures_expected > 0 ? (double)steps / o->failures_expected : 0;
    if (mean <= 0)
        return CPR_OK;
    cpr_failure_config c = {.seed = o->failure_seed,
                            .distribution = (cpr_failure_law)o->failure_dist,
                            .shape = o->weibull_shape, .mean_steps = mean,
                            .horizon_steps = 4 * steps, .num_shards = o->model.num_shards};
    cpr_status st = cpr_failure_schedule(&c, out, n);
    if (st == CPR_OK && !o->quiet)
        cpr_failure_schedule_print(stderr, *out, *n);
    o->ckpt.mtbf_steps = mean;
    return st;
}

/*
 * The hooks of this run: ckpt.h's checkpointer (after_step: select rows,
 * gather into the staging buffer, commit in the background; on_finish:
 * drain; on_summary: bytes, stalls, PLS) and failure injection (before_step:
 * wipe a shard on schedule, then partial or full recovery).
 */
static cpr_status make_hooks(options *o, dlrm_model *model, dlrm_loader *loader,
                             cpr_failure **failures, dlrm_ckpt **ck, dlrm_hooks *hooks)
{
    size_t n = 0;
    uint64_t steps = total_steps(o, loader);
    cpr_status st = make_schedule(o, steps, failures, &n);
    o->ckpt.failures = *failures;
    o->ckpt.n_failures = n;
    o->ckpt.total_steps = steps;
    if (st == CPR_OK)
        st = dlrm_ckpt_create(&o->ckpt, model, ck);
    if (st == CPR_OK)
        *hooks = dlrm_ckpt_hooks(*ck);
    return st;
}

static int resolve_device(options *o)
{
    int count = 0;
    if (!o->device_auto)
        return 0;
    if (cpr_cuda_built() && cpr_cuda_device_count(&count) == CPR_OK && count > 0)
        o->model.device = CPR_DEVICE_CUDA;
    return 0;
}

static void print_summary(const dlrm_run_result *r)
{
    double busy = r->train_s + r->io_s;
    fprintf(stderr, "cpr-dlrm: done: %llu steps, %llu samples in %.2f s (train %.2f s, io "
            "%.2f s, eval %.2f s), %.1f steps/s\n", (unsigned long long)r->steps,
            (unsigned long long)r->samples, r->total_s, r->train_s, r->io_s, r->eval_s,
            busy > 0 ? (double)r->steps / busy : 0);
    if (r->evaluated)
        fprintf(stderr, "cpr-dlrm: held-out: auc %.4f logloss %.4f (%llu samples)\n",
                r->eval.auc, r->eval.logloss, (unsigned long long)r->eval.samples);
}

static int run(options *o)
{
    dlrm_model *model = NULL;
    dlrm_loader *loader = NULL;
    dlrm_trainer *trainer = NULL;
    dlrm_run_result result;
    dlrm_hooks hooks = {0};
    dlrm_ckpt *ck = NULL;
    cpr_failure *failures = NULL;
    FILE *log = NULL;
    cpr_status st = CPR_OK;
    resolve_device(o);
    if (o->json_log && !(log = fopen(o->json_log, "w"))) {
        fprintf(stderr, "cpr-dlrm: %s: %s\n", o->json_log, strerror(errno));
        return EXIT_FAILED;
    }
    o->train.json_log = log;
    o->train.progress = o->quiet ? NULL : print_progress;
    st = dlrm_model_create(&o->model, &model);
    /* The model's configuration is all flags: a refusal is a usage error. */
    int usage_error = st == CPR_INVALID_ARGUMENT;
    if (st == CPR_OK)
        st = dlrm_loader_open(&o->data, &loader);
    if (st == CPR_OK) {
        st = make_hooks(o, model, loader, &failures, &ck, &hooks);
        /* So are the checkpointing flags' (--job, --ckpt, --ckpt-cpus, ...),
         * which the client and the checkpointer check. */
        usage_error |= st == CPR_INVALID_ARGUMENT;
    }
    if (st == CPR_OK)
        st = dlrm_trainer_create(model, loader, &o->train, &hooks, &trainer);
    if (st == CPR_OK)
        st = dlrm_trainer_run(trainer, &result);
    if (st)
        fprintf(stderr, "cpr-dlrm: %s: %s\n", cpr_status_name(st), cpr_errmsg());
    else if (!o->quiet)
        print_summary(&result);
    dlrm_ckpt_destroy(ck);
    free(failures);
    dlrm_trainer_destroy(trainer);
    dlrm_loader_close(loader);
    dlrm_model_destroy(model);
    if (log && fclose(log) != 0 && st == CPR_OK) {
        fprintf(stderr, "cpr-dlrm: %s: %s\n", o->json_log, strerror(errno));
        st = CPR_IO;
    }
    return usage_error ? EXIT_USAGE : st ? EXIT_FAILED : 0;
}

int main(int argc, char **argv)
{
    options o;
    int parsed = parse_args(argc, argv, &o);
    if (parsed > 0) {
        usage(stdout);
        return 0;
    }
    if (parsed < 0)
        return EXIT_USAGE;
    return run(&o);
}
