/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr-bench save: the training stall of one save, policy by policy, beside
 * what the machine needs at the least to copy the same bytes.
 *
 * A CPU table (default 10 M rows x 64, row-wise Adagrad, every tracker on)
 * is trained on a Zipf stream; then, per policy (FULL, DELTA, MFU, SSU,
 * TOPK_NORM) and round, a few more batches are trained and one save is taken
 * the way the reference trainer takes it between two steps:
 *
 *   select -> cpr_emb_save_begin -> cpr_client_begin_async -> cpr_part_put_deferred
 *
 * That is the stall: when it returns, the save is a copy-on-write snapshot
 * (cpr_emb_save_copy) and training may update the table again; the part's
 * sender copies the rows into its blocks, streams and commits after the
 * clock stops (the commit is waited for before the next round, and reported
 * as background_ms, so rounds do not overlap). The baseline is a
 * memcpy of the same number of bytes between two buffers that are already
 * faulted in, measured in the same round: stall_ratio = stall / memcpy.
 * The client defers sending until the commit (defer_send: the staging copy
 * does not compete with sending and storing on this host), its staging is
 * sized for a whole FULL save, and a warm-up FULL
 * save (not reported) runs first so that staging memory is mapped, as it is
 * in a trainer after its first save. Medians over --rounds.
 *
 * The store is local:// in a fresh temporary directory (--target for
 * another): the stall does not depend on the transport, only on staging.
 * With --device cuda the table lives on GPU 0: select on the device, and
 * begin gathers the rows into a device-side snapshot (the stall); the
 * sender copies them to the host in the background, as for a CPU table.
 * The baseline is a device-to-pinned-host copy of the same bytes at the
 * bandwidth cpr_cuda_copy_bandwidth measures in the same run. Without a
 * device it fails with CPR_CUDA.
 * SSU samples at the rate the reference trainer sets (examples/dlrm:
 * each save is offered about twice its budget, docs/model.md): with the
 * table's default 1% a save found a few hundred rows, which measured the
 * fixed costs of a save, not its stall.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cpr/client.h"
#include "cpr/codec.h"
#include "cpr/cuda.h"
#include "cpr/data.h"
#include "cpr/embedding.h"
#include "cpr_cli.h"
#include "cpr_common.h"
#include "cpr_json.h"

#define N_POLICIES 5
#define MAX_ROUNDS 15

typedef struct save_opts {
    uint64_t rows, dim, bags, rounds, warm_batches, step_batches;
    double zipf, fraction;
    const char *target;
    int json;
    int cuda;                 /* --device cuda */
    cpr_codec codec;          /* --codec: the parts' row values */
    double d2h_gb_s;          /* CUDA: device-to-pinned-host copy, measured */
} save_opts;

typedef struct policy_result {
    uint64_t rows[MAX_ROUNDS], bytes[MAX_ROUNDS];
    double stall_s[MAX_ROUNDS], memcpy_s[MAX_ROUNDS], select_s[MAX_ROUNDS];
    double begin_s[MAX_ROUNDS], stage_s[MAX_ROUNDS], ratio[MAX_ROUNDS];
    double background_s[MAX_ROUNDS]; /* copy out, stream, commit: after the stall */
} policy_result;

static const cpr_policy policies[N_POLICIES] = {CPR_POLICY_FULL, CPR_POLICY_DELTA,
                                                 CPR_POLICY_MFU, CPR_POLICY_SSU,
                                                 CPR_POLICY_TOPK_NORM};

static void save_usage(FILE *out)
{
    fputs("usage: cpr-bench save [--rows N] [--dim D] [--fraction F] [--rounds R]\n"
          "                      [--bags B] [--zipf S] [--target T] [--device cpu|cuda]\n"
          "                      [--codec C] [--json]\n"
          "  --rows N      rows of the CPU table (default 10000000)\n"
          "  --dim D       floats per row (default 64); row-wise Adagrad state\n"
          "  --fraction F  budget of MFU, SSU and TOPK_NORM saves (default 0.05)\n"
          "  --rounds R    saves per policy; figures are medians (default 5)\n"
          "  --bags B      bags of 4 Zipf indices per training batch (default 8192)\n"
          "  --zipf S      exponent of the access distribution (default 1.05)\n"
          "  --target T    where the saves go (default: local:// in a temp dir)\n"
          "  --device D    cpu (default) or cuda: the table on GPU 0, the stall beside\n"
          "                a device-to-pinned-host copy of the same bytes\n"
          "  --codec C     f32 (default), bf16, f16, int8 or int4: the parts' row\n"
          "                values, encoded by the sender (a CUDA table: on the\n"
          "                device, only the encoded bytes copied out); the stall\n"
          "                and its baseline do not change, background_ms does\n"
          "  --json        one JSON object on stdout\n"
          "Exit 0 done, 1 failure, 2 usage.\n",
          out);
}

static int parse_save_args(int argc, char **argv, save_opts *o)
{
    static const bench_u64_flag nums[] = {
        {"--rows", 1000, 1ull << 32, offsetof(save_opts, rows)},
        {"--dim", 1, 4096, offsetof(save_opts, dim)},
        {"--rounds", 1, MAX_ROUNDS, offsetof(save_opts, rounds)},
        {"--bags", 1, 1u << 22, offsetof(save_opts, bags)},
    };
    for (int i = 0; i < argc; i++) {
        int missing = 0, matched = 0;
        if (bench_json_or_help(argv[i], &o->json, save_usage))
            continue;
        matched = bench_parse_u64_flags(argc, argv, &i, nums, sizeof nums / sizeof nums[0], o);
        if (matched < 0)
            return -1;
        if (matched)
            continue;
        const char *frac = bench_flag_value(argc, argv, &i, "--fraction", &missing);
        const char *zipf = frac || missing ? NULL
                                           : bench_flag_value(argc, argv, &i, "--zipf", &missing);
        const char *target = frac || zipf || missing
                                 ? NULL : bench_flag_value(argc, argv, &i, "--target", &missing);
        const char *dev = frac || zipf || target || missing
                              ? NULL : bench_flag_value(argc, argv, &i, "--device", &missing);
        const char *codec = frac || zipf || target || dev || missing
                                ? NULL : bench_flag_value(argc, argv, &i, "--codec", &missing);
        if (missing)
            return -1;
        if (dev && strcmp(dev, "cpu") != 0 && strcmp(dev, "cuda") != 0) {
            fprintf(stderr, "cpr-bench save: --device: '%s' is not cpu or cuda\n", dev);
            return -1;
        }
        cpr_status st = CPR_OK;
        if (frac)
            st = cpri_cli_double("--fraction", frac, 0.0, 0, 1.0, 1, &o->fraction);
        else if (zipf)
            st = cpri_cli_double("--zipf", zipf, 0.0, 0, 5.0, 1, &o->zipf);
        else if (target)
            o->target = target;
        else if (dev)
            o->cuda = strcmp(dev, "cuda") == 0;
        else if (codec)
            st = cpr_codec_parse(codec, &o->codec);
        else {
            fprintf(stderr, "cpr-bench save: unknown argument '%s'\n", argv[i]);
            return -1;
        }
        if (st) {
            fprintf(stderr, "cpr-bench: %s\n", cpr_errmsg());
            return -1;
        }
    }
    return 0;
}

/* ---- the workload -------------------------------------------------------------- */

typedef struct trainer {
    cpr_emb *table;
    cpr_zipf *zipf;
    int64_t *indices, *offsets;
    float *grad, *out;
    uint64_t bags;
    int cuda;
    void *dev[4];             /* CUDA: device indices, offsets, grad, out */
} trainer;

static cpr_status trainer_open(const save_opts *o, trainer *t)
{
    memset(t, 0, sizeof *t);
    cpr_emb_config cfg = {.rows = o->rows, .dim = (uint32_t)o->dim,
                          .optimizer = CPR_OPT_ROWWISE_ADAGRAD, .seed = 7,
                          .num_shards = 1, .track = CPR_TRACK_ALL,
                          .device = o->cuda ? CPR_DEVICE_CUDA : CPR_DEVICE_CPU};
    t->bags = o->bags;
    t->cuda = o->cuda;
    cpr_status st = cpr_emb_create(&cfg, &t->table);
    if (st == CPR_OK)
        st = cpr_zipf_create(o->zipf, o->rows, 11, &t->zipf);
    t->indices = malloc(t->bags * 4 * sizeof *t->indices);
    t->offsets = malloc(t->bags * sizeof *t->offsets);
    t->grad = malloc(t->bags * o->dim * sizeof *t->grad);
    t->out = malloc(t->bags * o->dim * sizeof *t->out);
    if (st == CPR_OK && (!t->indices || !t->offsets || !t->grad || !t->out))
        st = cpr_fail(CPR_NO_MEMORY, "out of memory for the training batch");
    for (uint64_t b = 0; st == CPR_OK && b < t->bags; b++)
        t->offsets[b] = (int64_t)(b * 4);
    for (uint64_t i = 0; st == CPR_OK && i < t->bags * o->dim; i++)
        t->grad[i] = (float)((int64_t)(i * 2654435761u % 2001) - 1000) * 1e-4f;
    /* A CUDA table trains on device arrays; offsets and gradients are fixed. */
    size_t bytes[4] = {t->bags * 4 * sizeof *t->indices, t->bags * sizeof *t->offsets,
                       t->bags * o->dim * sizeof *t->grad, t->bags * o->dim * sizeof *t->out};
    for (int i = 0; st == CPR_OK && o->cuda && i < 4; i++)
        st = cpr_cuda_alloc(0, bytes[i], &t->dev[i]);
    if (st == CPR_OK && o->cuda)
        st = cpr_cuda_copy_to_device(t->dev[1], t->offsets, bytes[1]);
    if (st == CPR_OK && o->cuda)
        st = cpr_cuda_copy_to_device(t->dev[2], t->grad, bytes[2]);
    return st;
}

static void trainer_close(trainer *t)
{
    cpr_emb_destroy(t->table);
    cpr_zipf_destroy(t->zipf);
    free(t->indices);
    free(t->offsets);
    free(t->grad);
    free(t->out);
    for (int i = 0; i < 4; i++)
        cpr_cuda_free(t->dev[i]);
}

/* Train `batches` batches of Zipf-distributed rows (spread over the table
 * by a fixed odd multiplier, so hot rows are not neighbours). */
static cpr_status train(trainer *t, uint64_t batches, uint64_t rows)
{
    cpr_status st = CPR_OK;
    for (uint64_t b = 0; st == CPR_OK && b < batches; b++) {
        for (uint64_t i = 0; i < t->bags * 4; i++)
            t->indices[i] = (int64_t)((cpr_zipf_next(t->zipf) * 0x9e3779b97f4a7c15ull) % rows);
        const int64_t *idx = t->indices, *off = t->offsets;
        const float *grad = t->grad;
        float *out = t->out;
        if (t->cuda) {
            st = cpr_cuda_copy_to_device(t->dev[0], t->indices, t->bags * 4 * sizeof *idx);
            idx = t->dev[0], off = t->dev[1], grad = t->dev[2], out = t->dev[3];
        }
        if (st == CPR_OK)
            st = cpr_emb_forward(t->table, idx, t->bags * 4, off, t->bags, CPR_POOL_SUM, out);
        if (st == CPR_OK)
            st = cpr_emb_backward(t->table, idx, t->bags * 4, off, t->bags, CPR_POOL_SUM, grad);
    }
    return st;
}

/* ---- one save ------------------------------------------------------------------- */

typedef struct saver {
    cpr_client *client;
    uint64_t *ids;
    uint64_t next_ckpt;
    char *src, *dst;      /* the memcpy baseline's buffers, faulted in */
    size_t cap;
} saver;

/* One timed save of `policy`; the commit is waited for, untimed. */
static cpr_status save_once(const save_opts *o, trainer *t, saver *s, cpr_policy policy,
                            policy_result *r, size_t k)
{
    cpr_table_schema schema = {0, o->rows, (uint32_t)o->dim, 1};
    cpr_part_spec spec = {.id = {"bench-save", 0, s->next_ckpt++},
                          .kind = policy == CPR_POLICY_FULL    ? CPR_KIND_FULL
                                  : policy == CPR_POLICY_DELTA ? CPR_KIND_DELTA
                                                               : CPR_KIND_PRIORITY,
                          .step = s->next_ckpt, .num_shards = 1, .tables = &schema,
                          .n_tables = 1, .codec = o->codec};
    cpr_budget budget = {.fraction = o->fraction};
    cpr_emb_save *save = NULL;
    cpr_part *part = NULL;
    size_t n = 0;
    double t0 = cpri_now_s();
    cpr_status st = cpr_emb_select(t->table, 0, policy, budget, s->ids, o->rows, &n);
    double t1 = cpri_now_s();
    if (st == CPR_OK)
        st = cpr_emb_save_begin(t->table, 0, policy, s->ids, n, &save);
    if (st == CPR_OK)
        st = cpr_client_begin_async(s->client, &spec, &part); /* Begin: the sender */
    double t2 = cpri_now_s();
    if (st == CPR_OK) { /* the sender copies the rows out of the save's snapshot */
        cpr_deferred_rows d = {.table = 0, .n = n, .ids = cpr_emb_save_ids(save),
                               .fill = cpr_emb_save_fill, .ctx = save,
                               .ids_kept = 1 /* the save's, until it ends */};
        if (o->cuda) /* encoded on the device (emb_cuda_codec.cu) */
            d.fill_encoded = cpr_emb_save_fill_encoded;
        st = cpr_part_put_deferred(part, &d);
    }
    double t3 = cpri_now_s();
    /* The baseline, right after: the same bytes, memcpy between warm buffers
     * (CUDA: a device-to-pinned-host copy at the bandwidth measured). The
     * faster of two copies: the buffers were faulted in at the start, but
     * the same 12 MB copy took 0.87 ms in some rounds and 11.6 ms in others
     * of one run on the VM of docs/performance.md (its pages were not warm
     * after the seconds a save's background takes), which made the ratio a
     * draw of the baseline. */
    size_t bytes = n * (8 + 4 * (o->dim + 1));
    double copy_s = o->cuda ? (double)bytes / (o->d2h_gb_s * 1e9) : 0;
    for (int copy = 0; copy < 2 && !o->cuda; copy++) {
        double c0 = cpri_now_s();
        memcpy(s->dst, s->src, bytes);
        double took = cpri_now_s() - c0;
        copy_s = copy == 0 || took < copy_s ? took : copy_s;
    }
    double c0 = cpri_now_s();
    if (st == CPR_OK)
        st = cpr_part_commit(&part);
    else
        cpr_part_abort(&part);
    r->background_s[k] = cpri_now_s() - c0;
    if (save && st == CPR_OK)
        st = cpr_emb_save_commit(t->table, save);
    else
        cpr_emb_save_abort(t->table, save);
    r->rows[k] = n;
    r->bytes[k] = bytes;
    r->select_s[k] = t1 - t0;
    r->begin_s[k] = t2 - t1;
    r->stage_s[k] = t3 - t2;
    r->stall_s[k] = t3 - t0;
    r->memcpy_s[k] = copy_s;
    r->ratio[k] = copy_s > 0 ? (t3 - t0) / copy_s : 0;
    return st;
}

/* The median of the rounds' values (bench_median sorts: a copy). */
static double median(const double *v, size_t n)
{
    double tmp[MAX_ROUNDS];
    memcpy(tmp, v, n * sizeof *v);
    return bench_median(tmp, n);
}

static double median_u64(const uint64_t *v, size_t n)
{
    double tmp[MAX_ROUNDS];
    for (size_t k = 0; k < n; k++)
        tmp[k] = (double)v[k];
    return bench_median(tmp, n);
}

static int print_json(const save_opts *o, const policy_result *res, double total_s)
{
    cpri_json *root = cpri_json_object(), *pols = cpri_json_object();
    int bad = !root || !pols;
    bad |= cpri_json_add_string(root, "bench", "save");
    bad |= cpri_json_add_number(root, "rows", (double)o->rows);
    bad |= cpri_json_add_number(root, "dim", (double)o->dim);
    bad |= cpri_json_add_number(root, "state_dim", 1);
    bad |= cpri_json_add_string(root, "device", o->cuda ? "cuda" : "cpu");
    bad |= cpri_json_add_string(root, "codec", cpr_codec_name(o->codec));
    if (o->cuda)
        bad |= cpri_json_add_number(root, "d2h_gb_s", bench_r3(o->d2h_gb_s));
    bad |= cpri_json_add_number(root, "fraction", o->fraction);
    bad |= cpri_json_add_number(root, "rounds", (double)o->rounds);
    double worst = 0;
    for (size_t p = 0; p < N_POLICIES; p++) {
        const policy_result *r = &res[p];
        cpri_json *j = cpri_json_object();
        double ratio = median(r->ratio, o->rounds);
        worst = ratio > worst ? ratio : worst;
        bad |= !j;
        bad |= cpri_json_add_number(j, "rows", median_u64(r->rows, o->rounds));
        bad |= cpri_json_add_number(j, "bytes", median_u64(r->bytes, o->rounds));
        bad |= cpri_json_add_number(j, "stall_ms", bench_r3(median(r->stall_s, o->rounds) * 1e3));
        bad |= cpri_json_add_number(j, "select_ms", bench_r3(median(r->select_s, o->rounds) * 1e3));
        bad |= cpri_json_add_number(j, "begin_ms", bench_r3(median(r->begin_s, o->rounds) * 1e3));
        bad |= cpri_json_add_number(j, "stage_ms", bench_r3(median(r->stage_s, o->rounds) * 1e3));
        bad |= cpri_json_add_number(j, "memcpy_ms", bench_r3(median(r->memcpy_s, o->rounds) * 1e3));
        bad |= cpri_json_add_number(j, "stall_ratio", bench_r3(ratio));
        bad |= cpri_json_add_number(j, "background_ms",
                                    bench_r3(median(r->background_s, o->rounds) * 1e3));
        bad |= cpri_json_add_child(pols, cpr_policy_name(policies[p]), j);
    }
    bad |= cpri_json_add_child(root, "policies", pols);
    bad |= cpri_json_add_number(root, "worst_stall_ratio", bench_r3(worst));
    bad |= cpri_json_add_number(root, "total_s", bench_r3(total_s));
    if (!bad)
        bad = cpri_json_print(root, stdout);
    cpri_json_free(root);
    return bad ? -1 : 0;
}

static void print_table(const save_opts *o, const policy_result *res)
{
    printf("cpr-bench save: %llu rows x %llu (+1 state), budget %.3g, medians of %llu\n",
           (unsigned long long)o->rows, (unsigned long long)o->dim, o->fraction,
           (unsigned long long)o->rounds);
    printf("%-10s %10s %10s %9s %9s %9s %9s %9s %7s %10s\n", "policy", "rows", "MB",
           "stall_ms", "select", "begin", "stage", "memcpy", "ratio", "background");
    for (size_t p = 0; p < N_POLICIES; p++) {
        const policy_result *r = &res[p];
        printf("%-10s %10.0f %10.1f %9.2f %9.2f %9.2f %9.2f %9.2f %7.2f %10.1f\n",
               cpr_policy_name(policies[p]), median_u64(r->rows, o->rounds),
               median_u64(r->bytes, o->rounds) / BENCH_MB, median(r->stall_s, o->rounds) * 1e3,
               median(r->select_s, o->rounds) * 1e3, median(r->begin_s, o->rounds) * 1e3,
               median(r->stage_s, o->rounds) * 1e3, median(r->memcpy_s, o->rounds) * 1e3,
               median(r->ratio, o->rounds), median(r->background_s, o->rounds) * 1e3);
    }
}

int bench_save_main(int argc, char **argv)
{
    /* Five rounds: on the VM of docs/performance.md single phases of a save
     * took 3-7 ms instead of 0.1-0.5 in one round of five now and then
     * (the host's, not the save's), and a median of three moved with two. */
    save_opts o = {.rows = 10000000, .dim = 64, .bags = 8192, .rounds = 5,
                   .warm_batches = 64, .step_batches = 4, .zipf = 1.05, .fraction = 0.05};
    if (parse_save_args(argc, argv, &o))
        return 2;
    double t0 = cpri_now_s();
    char dir[] = "/tmp/cpr-bench-save.XXXXXX", target[64];
    int made_dir = 0;
    if (!o.target) {
        if (!mkdtemp(dir)) {
            perror("cpr-bench save: mkdtemp");
            return 1;
        }
        made_dir = 1;
        snprintf(target, sizeof target, "local://%s/store", dir);
        o.target = target;
    }
    trainer t = {0};
    int trained = 0;
    saver s = {.next_ckpt = 1};
    policy_result res[N_POLICIES];
    memset(res, 0, sizeof res);
    size_t full_bytes = o.rows * (8 + 4 * (o.dim + 1));
    /* Staging for a whole FULL save, and the message size's worth of slack. */
    cpr_client_options copts = {.staging_bytes = full_bytes + (8u << 20), .defer_send = 1,
                                .store = {.no_fold = 1}};
    s.cap = full_bytes;
    s.ids = malloc(o.rows * sizeof *s.ids);
    s.src = o.cuda ? NULL : malloc(s.cap);
    s.dst = o.cuda ? NULL : malloc(s.cap);
    /* The target first: a malformed one is a usage error, found before the
     * table is built. */
    cpr_status st = cpr_client_open(o.target, &copts, &s.client);
    int usage = st == CPR_INVALID_ARGUMENT;
    if (usage)
        fprintf(stderr, "cpr-bench save: --target: %s\n", cpr_errmsg());
    if (st == CPR_OK && !(s.ids && (o.cuda || (s.src && s.dst))))
        st = cpr_fail(CPR_NO_MEMORY, "out of memory");
    if (st == CPR_OK && o.cuda) /* the device-to-pinned-host limit of this GPU */
        st = cpr_cuda_copy_bandwidth(0, 256u << 20, &(double){0}, &o.d2h_gb_s);
    if (st == CPR_OK && !o.cuda) {
        memset(s.src, 1, s.cap);
        memset(s.dst, 2, s.cap); /* fault the baseline's pages in before timing */
    }
    if (st == CPR_OK) {
        st = trainer_open(&o, &t);
        trained = 1;
    }
    if (st == CPR_OK)
        fprintf(stderr, "cpr-bench save: training %llu warm-up batches\n",
                (unsigned long long)o.warm_batches);
    if (st == CPR_OK) {
        /* Accesses between two SSU saves: every policy's batches of a round. */
        double accesses = (double)o.step_batches * N_POLICIES * (double)o.bags * 4.0;
        double rate = 2.0 * o.fraction * (double)o.rows / accesses;
        st = cpr_emb_set_ssu_rate(t.table, rate < 1.0 ? rate : 1.0);
    }
    if (st == CPR_OK)
        st = train(&t, o.warm_batches, o.rows);
    /* The warm-up FULL save (not reported): staging memory mapped from here on. */
    policy_result warm;
    if (st == CPR_OK)
        st = save_once(&o, &t, &s, CPR_POLICY_FULL, &warm, 0);
    for (size_t k = 0; st == CPR_OK && k < o.rounds; k++)
        for (size_t p = 0; st == CPR_OK && p < N_POLICIES; p++) {
            fprintf(stderr, "cpr-bench save: round %zu/%llu, %s\n", k + 1,
                    (unsigned long long)o.rounds, cpr_policy_name(policies[p]));
            st = train(&t, o.step_batches, o.rows);
            if (st == CPR_OK)
                st = save_once(&o, &t, &s, policies[p], &res[p], k);
        }
    int rc = 0;
    if (usage) {
        rc = 2;
    } else if (st) {
        fprintf(stderr, "cpr-bench save: %s: %s\n", cpr_status_name(st), cpr_errmsg());
        rc = 1;
    } else if (o.json) {
        rc = print_json(&o, res, cpri_now_s() - t0) ? 1 : 0;
    } else {
        print_table(&o, res);
    }
    cpr_client_close(s.client);
    if (trained)
        trainer_close(&t);
    free(s.ids);
    free(s.src);
    free(s.dst);
    if (made_dir && bench_remove_tree(dir) != CPR_OK)
        fprintf(stderr, "cpr-bench save: could not remove %s\n", dir);
    return rc;
}
