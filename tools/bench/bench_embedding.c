/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr-bench embedding: the embedding module's hot paths against the memory
 * bandwidth of the same machine, measured in the same run. Two identical
 * tables (same seed) train on the same Zipf-distributed batches, one without
 * trackers and one with all of them, alternating call by call so that
 * drift in the machine affects both alike; the ratio of their backward times
 * is the tracking overhead. Then selection over the whole table (10M rows by
 * default) and the gather of the MFU selection, whose bandwidth is compared
 * with memcpy's. With --device cuda the tables live on GPU 0 and the
 * baselines are a device-to-device copy (training) and a device-to-host copy
 * (gather, which ends in host memory).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/rng.h"
#include "bench.h"
#include "cpr/embedding.h"
#include "cpr_cli.h"
#include "cpr_common.h"
#include "cpr/cuda.h"
#include "cpr_json.h"

typedef struct emb_opts {
    uint64_t rows, dim, bags, pooling, iters, rounds;
    double zipf, fraction;
    int json;
    int cuda;                  /* --device cuda */
} emb_opts;

typedef struct emb_result {
    double memcpy_gb_s;
    double d2d_gb_s, d2h_gb_s; /* CUDA: device-to-device and device-to-host copies */
    double forward_s, backward_plain_s, backward_tracked_s;
    uint64_t indices;          /* per pass over the batches */
    double select_ms[5];
    uint64_t selected[5];
    double gather_s;
    uint64_t gather_rows;
    double create_s;
} emb_result;

static void emb_usage(FILE *out)
{
    fputs("usage: cpr-bench embedding [--rows N] [--dim D] [--bags B] [--pooling P]\n"
          "                           [--iters I] [--rounds R] [--zipf S]\n"
          "                           [--device cpu|cuda] [--json]\n"
          "  --rows N     rows of the table (default 10000000)\n"
          "  --dim D      floats per row (default 64)\n"
          "  --bags B     bags per batch (default 8192)\n"
          "  --pooling P  indices per bag (default 4)\n"
          "  --iters I    batches per pass (default 16)\n"
          "  --rounds R   passes; each time is the best pass (default 3)\n"
          "  --zipf S     exponent of the index distribution (default 1.05)\n"
          "  --device D   cpu (default) or cuda: tables on GPU 0, compared with a\n"
          "               device-to-device copy (and gather with device-to-host)\n"
          "  --json       one JSON object on stdout\n"
          "Tables use row-wise Adagrad. Exit 0 done, 1 failure, 2 usage.\n",
          out);
}

static int parse_emb_args(int argc, char **argv, emb_opts *o)
{
    static const bench_u64_flag nums[] = {
        {"--rows", 1, 1ull << 34, offsetof(emb_opts, rows)},
        {"--dim", 1, 4096, offsetof(emb_opts, dim)},
        {"--bags", 1, 1u << 22, offsetof(emb_opts, bags)},
        {"--pooling", 1, 1024, offsetof(emb_opts, pooling)},
        {"--iters", 1, 100000, offsetof(emb_opts, iters)},
        {"--rounds", 1, 100, offsetof(emb_opts, rounds)},
    };
    for (int i = 0; i < argc; i++) {
        int missing = 0, matched = 0;
        if (bench_json_or_help(argv[i], &o->json, emb_usage))
            continue;
        matched = bench_parse_u64_flags(argc, argv, &i, nums, sizeof nums / sizeof nums[0], o);
        if (matched < 0)
            return -1;
        const char *dev = matched ? NULL : bench_flag_value(argc, argv, &i, "--device", &missing);
        if (missing)
            return -1;
        if (dev) {
            if (strcmp(dev, "cpu") != 0 && strcmp(dev, "cuda") != 0) {
                fprintf(stderr, "cpr-bench: --device: '%s' is not cpu or cuda\n", dev);
                return -1;
            }
            o->cuda = strcmp(dev, "cuda") == 0;
            continue;
        }
        const char *z = matched ? NULL : bench_flag_value(argc, argv, &i, "--zipf", &missing);
        if (missing)
            return -1;
        if (z && cpri_cli_double("--zipf", z, 0.0, 1, 5.0, 1, &o->zipf) != CPR_OK) {
            fprintf(stderr, "cpr-bench: %s\n", cpr_errmsg());
            return -1;
        }
        if (!matched && !z) {
            fprintf(stderr, "cpr-bench embedding: unknown argument '%s'\n", argv[i]);
            return -1;
        }
    }
    return 0;
}

/* ---- workload ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    return cpr_splitmix64(s);
}

/* Zipf-like rank in [0, n) by inverting the continuous power law, then
 * scattered over the table so hot rows are not neighbours. */
static int64_t zipf_row(uint64_t *s, uint64_t n, double exponent)
{
    double u = (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
    double rank;
    if (fabs(exponent - 1.0) < 1e-9)
        rank = pow((double)n, u);
    else
        rank = pow((pow((double)n, 1.0 - exponent) - 1.0) * u + 1.0, 1.0 / (1.0 - exponent));
    uint64_t r = (uint64_t)rank - 1;
    if (r >= n)
        r = n - 1;
    return (int64_t)((r * 0x9e3779b97f4a7c15ULL) % n);
}

typedef struct workload {
    int64_t *indices, *offsets;   /* host */
    float *grad, *out;
    void *dev[4];                 /* CUDA: device copies of the four arrays */
} workload;

/* The arrays the table reads: the host ones, or their device copies. */
static void workload_arrays(const emb_opts *o, const workload *w, const int64_t **idx,
                            const int64_t **off, const float **grad, float **out)
{
    *idx = o->cuda ? (const int64_t *)w->dev[0] : w->indices;
    *off = o->cuda ? (const int64_t *)w->dev[1] : w->offsets;
    *grad = o->cuda ? (const float *)w->dev[2] : w->grad;
    *out = o->cuda ? (float *)w->dev[3] : w->out;
}

static cpr_status workload_to_device(const emb_opts *o, workload *w)
{
    size_t bytes[4] = {o->iters * o->bags * o->pooling * sizeof(int64_t),
                       o->bags * sizeof(int64_t), o->bags * o->dim * sizeof(float),
                       o->bags * o->dim * sizeof(float)};
    const void *src[4] = {w->indices, w->offsets, w->grad, w->out};
    cpr_status st = CPR_OK;
    for (int i = 0; st == CPR_OK && i < 4; i++) {
        st = cpr_cuda_alloc(0, bytes[i], &w->dev[i]);
        if (st == CPR_OK)
            st = cpr_cuda_copy_to_device(w->dev[i], src[i], bytes[i]);
    }
    return st;
}

static int make_workload(const emb_opts *o, workload *w)
{
    uint64_t n_idx = o->bags * o->pooling, seed = 42;
    w->indices = malloc(o->iters * n_idx * sizeof *w->indices);
    w->offsets = malloc(o->bags * sizeof *w->offsets);
    w->grad = malloc(o->bags * o->dim * sizeof *w->grad);
    w->out = malloc(o->bags * o->dim * sizeof *w->out);
    if (!w->indices || !w->offsets || !w->grad || !w->out)
        return -1;
    for (uint64_t i = 0; i < o->iters * n_idx; i++)
        w->indices[i] = zipf_row(&seed, o->rows, o->zipf);
    for (uint64_t b = 0; b < o->bags; b++)
        w->offsets[b] = (int64_t)(b * o->pooling);
    for (uint64_t i = 0; i < o->bags * o->dim; i++)
        w->grad[i] = (float)((int64_t)(rng_next(&seed) % 2001) - 1000) * 1e-4f;
    return 0;
}

static void free_workload(workload *w)
{
    for (int i = 0; i < 4; i++)
        cpr_cuda_free(w->dev[i]);
    free(w->indices);
    free(w->offsets);
    free(w->grad);
    free(w->out);
}

/* ---- measurements ----------------------------------------------------------------- */

static double measure_memcpy(void)
{
    size_t bytes = 256u << 20;
    char *a = malloc(bytes), *b = malloc(bytes);
    double best = 0;
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes); /* fault the pages in before timing */
    for (int i = 0; i < 5; i++) {
        double t0 = cpri_now_s();
        memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
        double rate = (double)bytes / (cpri_now_s() - t0) / 1e9;
        best = rate > best ? rate : best;
    }
    free(a);
    free(b);
    return best;
}

static cpr_status train_pass(const emb_opts *o, workload *w, cpr_emb *plain, cpr_emb *tracked,
                             double *fwd, double *bwd_plain, double *bwd_tracked)
{
    size_t n_idx = o->bags * o->pooling;
    const int64_t *indices, *offsets;
    const float *grad;
    float *out;
    cpr_status st = CPR_OK;
    workload_arrays(o, w, &indices, &offsets, &grad, &out);
    *fwd = *bwd_plain = *bwd_tracked = 0;
    /* Each call has finished (also on a GPU) when it returns: host timing is exact. */
    for (uint64_t it = 0; st == CPR_OK && it < o->iters; it++) {
        const int64_t *idx = indices + it * n_idx;
        double t0 = cpri_now_s();
        st = cpr_emb_forward(plain, idx, n_idx, offsets, o->bags, CPR_POOL_SUM, out);
        double t1 = cpri_now_s();
        if (st == CPR_OK)
            st = cpr_emb_backward(plain, idx, n_idx, offsets, o->bags, CPR_POOL_SUM, grad);
        double t2 = cpri_now_s();
        if (st == CPR_OK)
            st = cpr_emb_backward(tracked, idx, n_idx, offsets, o->bags, CPR_POOL_SUM, grad);
        double t3 = cpri_now_s();
        *fwd += t1 - t0;
        *bwd_plain += t2 - t1;
        *bwd_tracked += t3 - t2;
    }
    return st;
}

static cpr_status measure_selection(const emb_opts *o, cpr_emb *tracked, emb_result *r,
                                    uint64_t *ids)
{
    cpr_budget budget = {.fraction = o->fraction};
    cpr_status st = CPR_OK;
    for (int p = 0; st == CPR_OK && p < 5; p++) {
        size_t n = 0;
        double t0 = cpri_now_s();
        st = cpr_emb_select(tracked, 0, (cpr_policy)p, budget, ids, o->rows, &n);
        r->select_ms[p] = (cpri_now_s() - t0) * 1e3;
        r->selected[p] = n;
    }
    return st;
}

static cpr_status measure_gather(const emb_opts *o, cpr_emb *tracked, emb_result *r, uint64_t *ids)
{
    size_t n = 0;
    cpr_emb_save *save = NULL;
    cpr_status st = cpr_emb_select(tracked, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = o->fraction},
                                   ids, o->rows, &n);
    float *values = st ? NULL : malloc((n + 1) * o->dim * sizeof(float));
    float *state = st ? NULL : malloc((n + 1) * sizeof(float));
    if (st == CPR_OK && (!values || !state))
        st = cpr_fail(CPR_NO_MEMORY, "out of memory for the gather buffers");
    if (st == CPR_OK)
        st = cpr_emb_save_begin(tracked, 0, CPR_POLICY_MFU, ids, n, &save);
    for (uint64_t round = 0; st == CPR_OK && round < o->rounds; round++) {
        double t0 = cpri_now_s();
        st = cpr_emb_gather(tracked, save, values, state);
        double dt = cpri_now_s() - t0;
        r->gather_s = round == 0 || dt < r->gather_s ? dt : r->gather_s;
    }
    r->gather_rows = n;
    cpr_emb_save_abort(tracked, save);
    free(values);
    free(state);
    return st;
}

static cpr_status run(const emb_opts *o, emb_result *r)
{
    cpr_emb_config cfg = {.rows = o->rows, .dim = (uint32_t)o->dim,
                          .optimizer = CPR_OPT_ROWWISE_ADAGRAD, .seed = 7,
                          .device = o->cuda ? CPR_DEVICE_CUDA : CPR_DEVICE_CPU};
    cpr_emb *plain = NULL, *tracked = NULL;
    workload w = {0};
    uint64_t *ids = malloc(o->rows * sizeof *ids);
    cpr_status st = ids && make_workload(o, &w) == 0
                        ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory for the workload");
    r->memcpy_gb_s = measure_memcpy();
    if (st == CPR_OK && o->cuda)
        st = cpr_cuda_copy_bandwidth(0, 256u << 20, &r->d2d_gb_s, &r->d2h_gb_s);
    if (st == CPR_OK && o->cuda)
        st = workload_to_device(o, &w);
    fprintf(stderr, "cpr-bench: creating two %llu x %llu tables\n",
            (unsigned long long)o->rows, (unsigned long long)o->dim);
    double t0 = cpri_now_s();
    if (st == CPR_OK)
        st = cpr_emb_create(&cfg, &plain);
    cfg.track = CPR_TRACK_ALL;
    if (st == CPR_OK)
        st = cpr_emb_create(&cfg, &tracked);
    r->create_s = cpri_now_s() - t0;
    r->indices = o->iters * o->bags * o->pooling;
    for (uint64_t round = 0; st == CPR_OK && round < o->rounds; round++) {
        double f, bp, bt;
        fprintf(stderr, "cpr-bench: training pass %llu of %llu\n",
                (unsigned long long)round + 1, (unsigned long long)o->rounds);
        st = train_pass(o, &w, plain, tracked, &f, &bp, &bt);
        if (round == 0 || f < r->forward_s)
            r->forward_s = f;
        if (round == 0 || bp < r->backward_plain_s)
            r->backward_plain_s = bp;
        if (round == 0 || bt < r->backward_tracked_s)
            r->backward_tracked_s = bt;
    }
    if (st == CPR_OK)
        st = measure_selection(o, tracked, r, ids);
    if (st == CPR_OK)
        st = measure_gather(o, tracked, r, ids);
    cpr_emb_destroy(plain);
    cpr_emb_destroy(tracked);
    free_workload(&w);
    free(ids);
    return st;
}

/* ---- output --------------------------------------------------------------------- */

static int print_emb_json(const emb_opts *o, const emb_result *r)
{
    double row_bytes = (double)o->dim * 4;
    double gather_gb_s = (double)r->gather_rows * (row_bytes + 4) / r->gather_s / 1e9;
    cpri_json *j = cpri_json_object(), *sel = cpri_json_object();
    cpri_json_add_string(j, "device", o->cuda ? "cuda" : "cpu");
    if (o->cuda) {
        cpri_json_add_number(j, "d2d_gb_s", bench_r3(r->d2d_gb_s));
        cpri_json_add_number(j, "d2h_gb_s", bench_r3(r->d2h_gb_s));
        cpri_json_add_number(j, "forward_d2d_ratio",
                            bench_r3(r->indices * row_bytes / r->forward_s / 1e9 / r->d2d_gb_s));
    }
    cpri_json_add_number(j, "rows", (double)o->rows);
    cpri_json_add_number(j, "dim", (double)o->dim);
    cpri_json_add_number(j, "indices_per_pass", (double)r->indices);
    cpri_json_add_number(j, "memcpy_gb_s", bench_r3(r->memcpy_gb_s));
    cpri_json_add_number(j, "forward_rows_s", round(r->indices / r->forward_s));
    cpri_json_add_number(j, "forward_gb_s", bench_r3(r->indices * row_bytes / r->forward_s / 1e9));
    cpri_json_add_number(j, "backward_rows_s", round(r->indices / r->backward_plain_s));
    cpri_json_add_number(j, "backward_gb_s",
                        bench_r3(r->indices * row_bytes / r->backward_plain_s / 1e9));
    cpri_json_add_number(j, "backward_tracked_rows_s", round(r->indices / r->backward_tracked_s));
    cpri_json_add_number(j, "tracking_overhead",
                        bench_r3(r->backward_tracked_s / r->backward_plain_s - 1.0));
    for (int p = 0; p < 5; p++) {
        cpri_json *one = cpri_json_object();
        cpri_json_add_number(one, "ms", bench_r3(r->select_ms[p]));
        cpri_json_add_number(one, "rows", (double)r->selected[p]);
        cpri_json_add_child(sel, cpr_policy_name((cpr_policy)p), one);
    }
    cpri_json_add_child(j, "select", sel);
    cpri_json_add_number(j, "gather_rows", (double)r->gather_rows);
    cpri_json_add_number(j, "gather_gb_s", bench_r3(gather_gb_s));
    /* A GPU gather ends in host memory: its limit is the device-to-host copy. */
    cpri_json_add_number(j, "gather_ratio",
                        bench_r3(gather_gb_s / (o->cuda ? r->d2h_gb_s : r->memcpy_gb_s)));
    cpri_json_add_number(j, "tracker_bytes_per_row", cpr_emb_tracker_bytes_per_row(CPR_TRACK_ALL));
    int rc = cpri_json_print(j, stdout);
    cpri_json_free(j);
    return rc;
}

static void print_emb_table(const emb_opts *o, const emb_result *r)
{
    double row_bytes = (double)o->dim * 4;
    double gather_gb_s = (double)r->gather_rows * (row_bytes + 4) / r->gather_s / 1e9;
    printf("cpr-bench embedding: %llu rows x dim %llu, %llu indices per pass (Zipf %.2f)\n\n",
           (unsigned long long)o->rows, (unsigned long long)o->dim,
           (unsigned long long)r->indices, o->zipf);
    printf("  memcpy                 %8.2f GB/s\n", r->memcpy_gb_s);
    if (o->cuda)
        printf("  device copy d2d / d2h  %8.2f / %.2f GB/s\n", r->d2d_gb_s, r->d2h_gb_s);
    printf("  forward                %8.2f M rows/s  %6.2f GB/s\n",
           r->indices / r->forward_s / 1e6, r->indices * row_bytes / r->forward_s / 1e9);
    printf("  backward               %8.2f M rows/s\n", r->indices / r->backward_plain_s / 1e6);
    printf("  backward + tracking    %8.2f M rows/s  overhead %+.1f%%\n",
           r->indices / r->backward_tracked_s / 1e6,
           100.0 * (r->backward_tracked_s / r->backward_plain_s - 1.0));
    for (int p = 0; p < 5; p++)
        printf("  select %-10s      %8.2f ms  (%llu rows)\n", cpr_policy_name((cpr_policy)p),
               r->select_ms[p], (unsigned long long)r->selected[p]);
    printf("  gather (MFU rows)      %8.2f GB/s  = %.2f x %s\n", gather_gb_s,
           gather_gb_s / (o->cuda ? r->d2h_gb_s : r->memcpy_gb_s),
           o->cuda ? "device-to-host copy" : "memcpy");
}

int bench_embedding_main(int argc, char **argv)
{
    emb_opts o = {.rows = 10000000, .dim = 64, .bags = 8192, .pooling = 4, .iters = 16,
                  .rounds = 3, .zipf = 1.05, .fraction = 0.125};
    emb_result r = {0};
    if (parse_emb_args(argc, argv, &o) != 0) {
        emb_usage(stderr);
        return 2;
    }
    cpr_status st = run(&o, &r);
    if (st) {
        fprintf(stderr, "cpr-bench embedding: %s: %s\n", cpr_status_name(st), cpr_errmsg());
        return 1;
    }
    if (o.json)
        return print_emb_json(&o, &r) == 0 ? 0 : 1;
    print_emb_table(&o, &r);
    return 0;
}
