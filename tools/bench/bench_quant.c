/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr-bench quant: the row codecs (cpr/codec.h) on rows of `dim` floats with
 * row-wise optimizer state, against a memcpy of the same f32 bytes in the same
 * run. Per codec: encode and decode throughput over the f32 bytes (ratios to
 * the memcpy; the greedy range search of int8/int4 reported apart), the
 * stored bytes per row with its id and its f32 state beside f32's
 * (`bytes_ratio`), and the reconstruction error (largest absolute error over
 * the row's step for the int codecs, RMSE for all).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cpr/codec.h"
#include "cpr/rng.h"
#include "cpr_json.h"

#define MAX_ROUNDS 15
#define N_CODECS 5
#define GREEDY_SHARE 16 /* the greedy search runs on 1 row in this many */

static const cpr_codec codecs[N_CODECS] = {CPR_CODEC_F32, CPR_CODEC_BF16, CPR_CODEC_F16,
                                           CPR_CODEC_INT8, CPR_CODEC_INT4};

typedef struct quant_opts {
    uint64_t rows, dim, rounds;
    int json;
} quant_opts;

typedef struct codec_result {
    double enc_s[MAX_ROUNDS], dec_s[MAX_ROUNDS], greedy_s[MAX_ROUNDS];
    double max_step_err, rmse;
    size_t row_bytes;
} codec_result;

static void quant_usage(FILE *out)
{
    fputs("usage: cpr-bench quant [--rows N] [--dim D] [--rounds R] [--json]\n"
          "  --rows N    rows encoded and decoded per round (default 1000000)\n"
          "  --dim D     floats per row (default 64); one f32 of state per row\n"
          "  --rounds R  rounds; figures are medians (default 5)\n"
          "  --json      one JSON object on stdout\n"
          "Exit 0 done, 1 failure, 2 usage.\n",
          out);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Embedding-like rows: small values around 0 with a spread that varies by
 * row, and an occasional outlier. */
static void fill(float *x, uint64_t rows, uint64_t dim)
{
    uint64_t s = 42;
    for (uint64_t i = 0; i < rows; i++) {
        float spread = 0.01f + 0.2f * (float)((cpr_splitmix64(&s) >> 40) / 16777216.0);
        for (uint64_t j = 0; j < dim; j++) {
            float u = (float)((cpr_splitmix64(&s) >> 40) / 16777216.0) - 0.5f;
            x[i * dim + j] = spread * u * (j % 29 == 7 && i % 13 == 0 ? 20.0f : 1.0f);
        }
    }
}

static double median_of(const double *v, uint64_t n)
{
    double t[MAX_ROUNDS];
    memcpy(t, v, n * sizeof *t);
    return bench_median(t, (size_t)n);
}

int bench_quant_main(int argc, char **argv)
{
    quant_opts o = {.rows = 1000000, .dim = 64, .rounds = 5};
    static const bench_u64_flag nums[] = {
        {"--rows", 1000, 1ull << 28, offsetof(quant_opts, rows)},
        {"--dim", 1, 4096, offsetof(quant_opts, dim)},
        {"--rounds", 1, MAX_ROUNDS, offsetof(quant_opts, rounds)},
    };
    for (int i = 0; i < argc; i++) {
        if (bench_json_or_help(argv[i], &o.json, quant_usage))
            continue;
        int matched = bench_parse_u64_flags(argc, argv, &i, nums, sizeof nums / sizeof nums[0],
                                            &o);
        if (matched < 0)
            return 2;
        if (!matched) {
            fprintf(stderr, "cpr-bench quant: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    size_t n = (size_t)o.rows, dim = (size_t)o.dim, f32_bytes = n * dim * sizeof(float);
    size_t enc_bytes = 0; /* the largest encoding: a small row's header can outweigh f32 */
    for (int c = 0; c < N_CODECS; c++) {
        size_t b = n * cpr_codec_row_bytes(codecs[c], (uint32_t)dim);
        enc_bytes = b > enc_bytes ? b : enc_bytes;
    }
    float *x = malloc(f32_bytes), *y = malloc(f32_bytes), *copy = malloc(f32_bytes);
    uint8_t *enc = malloc(enc_bytes);
    codec_result *res = calloc(N_CODECS, sizeof *res);
    double memcpy_s[MAX_ROUNDS];
    int rc = 1;
    if (!x || !y || !copy || !enc || !res) {
        fprintf(stderr, "cpr-bench quant: out of memory for %zu rows x %zu\n", n, dim);
        goto out;
    }
    fill(x, n, dim);
    memset(y, 0, f32_bytes); /* every buffer's pages in before timing */
    memset(enc, 0, enc_bytes);
    memcpy(copy, x, f32_bytes);
    double t_all = now_s();
    for (uint64_t r = 0; r < o.rounds; r++) {
        double t0 = now_s();
        memcpy(copy, x, f32_bytes);
        memcpy_s[r] = now_s() - t0;
        for (int c = 0; c < N_CODECS; c++) {
            codec_result *cr = &res[c];
            cr->row_bytes = cpr_codec_row_bytes(codecs[c], (uint32_t)dim);
            t0 = now_s();
            cpr_status st = cpr_codec_encode(codecs[c], 0, x, n, (uint32_t)dim, enc);
            cr->enc_s[r] = now_s() - t0;
            t0 = now_s();
            if (st == CPR_OK)
                st = cpr_codec_decode(codecs[c], enc, n, (uint32_t)dim, y);
            cr->dec_s[r] = now_s() - t0;
            if (st == CPR_OK && (codecs[c] == CPR_CODEC_INT8 || codecs[c] == CPR_CODEC_INT4)) {
                size_t g = n / GREEDY_SHARE ? n / GREEDY_SHARE : 1;
                t0 = now_s();
                st = cpr_codec_encode(codecs[c], CPR_CODEC_GREEDY, x, g, (uint32_t)dim, enc);
                cr->greedy_s[r] = (now_s() - t0) * (double)n / (double)g;
                if (st == CPR_OK) /* the default encoding back, for the errors below */
                    st = cpr_codec_encode(codecs[c], 0, x, n, (uint32_t)dim, enc);
            }
            if (st) {
                fprintf(stderr, "cpr-bench quant: %s: %s\n", cpr_codec_name(codecs[c]),
                        cpr_errmsg());
                goto out;
            }
            if (r == 0) { /* errors: the round trip of every row */
                double se = 0, worst = 0;
                for (size_t i = 0; i < n; i++) {
                    float step = 0;
                    if (codecs[c] == CPR_CODEC_INT8 || codecs[c] == CPR_CODEC_INT4)
                        memcpy(&step, enc + i * cr->row_bytes, 4);
                    for (size_t j = 0; j < dim; j++) {
                        double e = fabs((double)x[i * dim + j] - y[i * dim + j]);
                        se += e * e;
                        if (step > 0 && e / step > worst)
                            worst = e / step;
                    }
                }
                cr->rmse = sqrt(se / (double)(n * dim));
                cr->max_step_err = worst;
            }
        }
        if (!o.json)
            fprintf(stderr, "cpr-bench quant: round %llu/%llu done\n",
                    (unsigned long long)(r + 1), (unsigned long long)o.rounds);
    }
    double mc = median_of(memcpy_s, o.rounds), gb = (double)f32_bytes / 1e9;
    size_t f32_row = 8 + 4 * dim + 4; /* id, values, row-wise state */
    if (o.json) {
        cpri_json *root = cpri_json_object(), *cj = cpri_json_object();
        int bad = !root || !cj;
        bad |= cpri_json_add_string(root, "bench", "quant");
        bad |= cpri_json_add_number(root, "rows", (double)n);
        bad |= cpri_json_add_number(root, "dim", (double)dim);
        bad |= cpri_json_add_number(root, "state_dim", 1);
        bad |= cpri_json_add_number(root, "rounds", (double)o.rounds);
        bad |= cpri_json_add_string(root, "kernels", cpr_codec_kernels());
        bad |= cpri_json_add_number(root, "memcpy_gb_s", bench_r3(gb / mc));
        for (int c = 0; c < N_CODECS; c++) {
            codec_result *cr = &res[c];
            cpri_json *j = cpri_json_object();
            double e = median_of(cr->enc_s, o.rounds), d = median_of(cr->dec_s, o.rounds);
            size_t row = 8 + cr->row_bytes + 4;
            bad |= !j;
            bad |= cpri_json_add_number(j, "encode_gb_s", bench_r3(gb / e));
            bad |= cpri_json_add_number(j, "decode_gb_s", bench_r3(gb / d));
            bad |= cpri_json_add_number(j, "encode_ratio", bench_r3(mc / e));
            bad |= cpri_json_add_number(j, "decode_ratio", bench_r3(mc / d));
            if (codecs[c] == CPR_CODEC_INT8 || codecs[c] == CPR_CODEC_INT4) {
                double g = median_of(cr->greedy_s, o.rounds);
                bad |= cpri_json_add_number(j, "greedy_encode_gb_s", bench_r3(gb / g));
                bad |= cpri_json_add_number(j, "greedy_encode_ratio", bench_r3(mc / g));
                bad |= cpri_json_add_number(j, "max_error_steps", bench_r3(cr->max_step_err));
            }
            bad |= cpri_json_add_number(j, "row_bytes", (double)row);
            bad |= cpri_json_add_number(j, "bytes_ratio", bench_r3((double)f32_row / (double)row));
            bad |= cpri_json_add_number(j, "rmse", cr->rmse);
            bad |= cpri_json_add_child(cj, cpr_codec_name(codecs[c]), j);
        }
        bad |= cpri_json_add_child(root, "codecs", cj);
        bad |= cpri_json_add_number(root, "total_s", bench_r3(now_s() - t_all));
        if (!bad)
            bad = cpri_json_print(root, stdout);
        cpri_json_free(root);
        if (bad)
            goto out;
    } else {
        printf("cpr-bench quant: %zu rows x %zu (+1 state), kernels %s, memcpy %.2f GB/s, "
               "medians of %llu\n", n, dim, cpr_codec_kernels(), gb / mc,
               (unsigned long long)o.rounds);
        printf("%-5s %10s %10s %8s %8s %10s %9s %11s %10s\n", "codec", "enc GB/s", "dec GB/s",
               "enc/mc", "dec/mc", "row bytes", "bytes x", "max err/st", "rmse");
        for (int c = 0; c < N_CODECS; c++) {
            codec_result *cr = &res[c];
            double e = median_of(cr->enc_s, o.rounds), d = median_of(cr->dec_s, o.rounds);
            size_t row = 8 + cr->row_bytes + 4;
            printf("%-5s %10.2f %10.2f %8.2f %8.2f %10zu %9.2f %11.3f %10.3g\n",
                   cpr_codec_name(codecs[c]), gb / e, gb / d, mc / e, mc / d, row,
                   (double)f32_row / (double)row, cr->max_step_err, cr->rmse);
        }
    }
    rc = 0;
out:
    free(x);
    free(y);
    free(copy);
    free(enc);
    free(res);
    return rc;
}
