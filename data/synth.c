/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Synthetic Criteo-like data with a known answer. Categorical ids are Zipf
 * ranks per table (hot rows, as in real click logs, which is what makes
 * frequency-aware checkpointing worth studying); dense counts are log-normal;
 * labels are drawn from a hidden teacher: each (table, id) has a small
 * pseudo-random embedding computed from a hash (so the teacher costs no
 * memory per id), and the logit adds their projections, neighbouring-table
 * dot products and a dense term. A model that learns the embeddings beats
 * chance by a clear margin; one that learns nothing scores AUC 0.5.
 * Everything is drawn from one seeded stream, so a seed names a file.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpr/data.h"
#include "cpr_cli.h"
#include "cpr_common.h"
#include "data_internal.h"

#define TEACHER_DIM 4
#define CALIBRATION_ROWS 16384   /* rows drawn to standardise the logit */
#define LOGIT_SCALE 2.0          /* std of the teacher logit before the bias */
#define DENSE_MISSING_MASK 15u   /* a dense field is empty 1 time in 16 */
#define DENSE_MAX 1e12           /* keeps every count to 13 digits */
#define MAX_CARDINALITY (1ull << 32)
#define PROGRESS_ROWS (1ull << 20)
#define WRITE_BUF_BYTES (1u << 20)

struct cpr_synth {
    uint32_t tables;
    data_zipf zipf[CPR_CRITEO_SPARSE];
    cpr_rng rng;                          /* the row stream */
    uint64_t teacher_key;                  /* keys the hashed embeddings */
    uint32_t scramble_key[CPR_CRITEO_SPARSE][2];
    double table_weight[CPR_CRITEO_SPARSE];
    double query[TEACHER_DIM];             /* projects an embedding to a score */
    double dense_mu[CPR_CRITEO_DENSE], dense_sigma[CPR_CRITEO_DENSE];
    double dense_weight[CPR_CRITEO_DENSE];
    double logit_mean, logit_inv_std, bias;
};

/* One row before it becomes text. */
typedef struct synth_row {
    uint64_t ids[CPR_CRITEO_SPARSE];       /* Zipf rank - 1 */
    double dense[CPR_CRITEO_DENSE];        /* whole counts >= 0 */
    uint32_t dense_present;
} synth_row;

/* ---- the value scramble -------------------------------------------------------- */

uint32_t cpr_synth_value(const cpr_synth *s, uint32_t table, uint64_t id)
{
    /* xor, xorshift and odd multiplies are each invertible mod 2^32. */
    uint32_t x = (uint32_t)id ^ s->scramble_key[table % CPR_CRITEO_SPARSE][0];
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x + s->scramble_key[table % CPR_CRITEO_SPARSE][1];
}

/* ---- the teacher -------------------------------------------------------------- */

static void embedding(const cpr_synth *s, uint32_t table, uint64_t id,
                      double e[TEACHER_DIM])
{
    /* id < 2^32, so (table, id, j) packs into distinct keys. */
    uint64_t base = s->teacher_key ^ ((uint64_t)table << 40) ^ (id << 2);
    for (uint64_t j = 0; j < TEACHER_DIM; j++)
        e[j] = data_hash_unit(base ^ j);
}

static double dot(const double *a, const double *b)
{
    double sum = 0;
    for (int j = 0; j < TEACHER_DIM; j++)
        sum += a[j] * b[j];
    return sum;
}

/* The teacher's raw score: per-table projections, dot products of
 * neighbouring tables (a DLRM-style interaction), and standardised dense. */
static double raw_logit(const cpr_synth *s, const synth_row *row)
{
    double e[CPR_CRITEO_SPARSE][TEACHER_DIM], logit = 0;
    for (uint32_t t = 0; t < s->tables; t++) {
        embedding(s, t, row->ids[t], e[t]);
        logit += s->table_weight[t] * dot(s->query, e[t]);
    }
    for (uint32_t t = 0; t + 1 < s->tables; t++)
        logit += 0.5 * dot(e[t], e[t + 1]);
    for (int d = 0; d < CPR_CRITEO_DENSE; d++)
        if (row->dense_present & (1u << d))
            logit += s->dense_weight[d] *
                     (log1p(row->dense[d]) - s->dense_mu[d]) / s->dense_sigma[d];
    return logit;
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* ---- drawing rows ------------------------------------------------------------ */

static void draw_row(const cpr_synth *s, cpr_rng *rng, synth_row *row)
{
    row->dense_present = 0;
    for (int d = 0; d < CPR_CRITEO_DENSE; d++) {
        row->dense[d] = 0;
        if ((cpr_rng_next(rng) & DENSE_MISSING_MASK) == 0)
            continue;
        double x = floor(exp(s->dense_mu[d] + s->dense_sigma[d] * data_rng_normal(rng)));
        row->dense[d] = x < DENSE_MAX ? x : DENSE_MAX;
        row->dense_present |= 1u << d;
    }
    for (uint32_t t = 0; t < s->tables; t++)
        row->ids[t] = data_zipf_sample(&s->zipf[t], rng) - 1;
}

static uint32_t draw_label(const cpr_synth *s, cpr_rng *rng, const synth_row *row)
{
    double z = (raw_logit(s, row) - s->logit_mean) * s->logit_inv_std * LOGIT_SCALE;
    return data_rng_uniform(rng) < sigmoid(z + s->bias) ? 1u : 0u;
}

/* ---- creation --------------------------------------------------------------------- */

static cpr_status check_options(const cpr_synth_options *o)
{
    if (o->tables > CPR_CRITEO_SPARSE)
        return cpr_fail(CPR_INVALID_ARGUMENT, "synth: tables %u is more than %d",
                        o->tables, CPR_CRITEO_SPARSE);
    if (!(o->zipf_s >= 0 && o->zipf_s <= 20))
        return cpr_fail(CPR_INVALID_ARGUMENT, "synth: zipf exponent %g is not in (0, 20]",
                        o->zipf_s);
    if (o->cardinality > MAX_CARDINALITY)
        return cpr_fail(CPR_INVALID_ARGUMENT, "synth: cardinality %llu is more than 2^32",
                        (unsigned long long)o->cardinality);
    uint32_t tables = o->tables ? o->tables : CPR_CRITEO_SPARSE;
    for (uint32_t t = 0; o->table_cardinality && t < tables; t++)
        if (o->table_cardinality[t] < 1 || o->table_cardinality[t] > MAX_CARDINALITY)
            return cpr_fail(CPR_INVALID_ARGUMENT, "synth: table_cardinality[%u] is not "
                            "in 1..2^32", t);
    if (!(o->positive_rate >= 0 && o->positive_rate < 1))
        return cpr_fail(CPR_INVALID_ARGUMENT, "synth: positive rate %g is not in (0, 1)",
                        o->positive_rate);
    return CPR_OK;
}

/* Every hidden parameter, from sub-seeds of the one seed. */
static void draw_teacher(cpr_synth *s, const cpr_synth_options *o, uint64_t *seeder)
{
    cpr_rng rng;
    double zipf_s = o->zipf_s > 0 ? o->zipf_s : 1.05;
    cpr_rng_seed(&rng, cpr_splitmix64(seeder));
    s->teacher_key = cpr_splitmix64(seeder);
    for (uint32_t t = 0; t < CPR_CRITEO_SPARSE; t++) {
        uint64_t card = o->cardinality ? o->cardinality : 100000;
        if (o->table_cardinality && t < s->tables)
            card = o->table_cardinality[t];
        data_zipf_init(&s->zipf[t], zipf_s, card);
        uint64_t key = cpr_splitmix64(seeder);
        s->scramble_key[t][0] = (uint32_t)key;
        s->scramble_key[t][1] = (uint32_t)(key >> 32);
        s->table_weight[t] = 0.3 + 0.7 * data_rng_uniform(&rng);
    }
    for (int j = 0; j < TEACHER_DIM; j++)
        s->query[j] = data_rng_normal(&rng);
    for (int d = 0; d < CPR_CRITEO_DENSE; d++) {
        s->dense_mu[d] = 4.0 * data_rng_uniform(&rng);
        s->dense_sigma[d] = 0.5 + 1.5 * data_rng_uniform(&rng);
        s->dense_weight[d] = 0.5 * data_rng_normal(&rng);
    }
}

/* Mean of sigmoid(z + bias) over the calibration logits. */
static double mean_rate(const double *z, size_t n, double bias)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += sigmoid(z[i] + bias);
    return sum / (double)n;
}

/* Standardise the teacher logit and solve for the bias that gives the
 * positive rate, on rows from a stream of their own (so calibrating does not
 * move the row stream). */
static cpr_status calibrate(cpr_synth *s, double rate, uint64_t seed)
{
    double *z = malloc(CALIBRATION_ROWS * sizeof *z), sum = 0, sum_sq = 0;
    double lo = -40, hi = 40;
    synth_row row;
    cpr_rng rng;
    if (!z)
        return cpr_fail(CPR_NO_MEMORY, "synth: out of memory");
    cpr_rng_seed(&rng, seed);
    for (size_t i = 0; i < CALIBRATION_ROWS; i++) {
        draw_row(s, &rng, &row);
        z[i] = raw_logit(s, &row);
        sum += z[i];
        sum_sq += z[i] * z[i];
    }
    s->logit_mean = sum / CALIBRATION_ROWS;
    double var = sum_sq / CALIBRATION_ROWS - s->logit_mean * s->logit_mean;
    s->logit_inv_std = var > 1e-12 ? 1.0 / sqrt(var) : 0.0;
    for (size_t i = 0; i < CALIBRATION_ROWS; i++)
        z[i] = (z[i] - s->logit_mean) * s->logit_inv_std * LOGIT_SCALE;
    for (int iter = 0; iter < 60; iter++) { /* mean_rate rises with the bias */
        double mid = 0.5 * (lo + hi);
        if (mean_rate(z, CALIBRATION_ROWS, mid) < rate)
            lo = mid;
        else
            hi = mid;
    }
    s->bias = 0.5 * (lo + hi);
    free(z);
    return CPR_OK;
}

cpr_status cpr_synth_create(const cpr_synth_options *opts, cpr_synth **out)
{
    static const cpr_synth_options defaults;
    cpr_synth *s = NULL;
    cpr_status st = CPR_OK;
    if (!out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_synth_create: NULL argument");
    if (!opts)
        opts = &defaults;
    st = check_options(opts);
    if (st)
        goto out;
    s = calloc(1, sizeof *s);
    if (!s) {
        st = cpr_fail(CPR_NO_MEMORY, "synth: out of memory");
        goto out;
    }
    uint64_t seeder = opts->seed;
    s->tables = opts->tables ? opts->tables : CPR_CRITEO_SPARSE;
    draw_teacher(s, opts, &seeder);
    cpr_rng_seed(&s->rng, cpr_splitmix64(&seeder));
    st = calibrate(s, opts->positive_rate > 0 ? opts->positive_rate : 0.25,
                   cpr_splitmix64(&seeder));
out:
    if (st) {
        cpr_synth_destroy(s);
        return st;
    }
    *out = s;
    return CPR_OK;
}

void cpr_synth_destroy(cpr_synth *s)
{
    free(s);
}

/* ---- text --------------------------------------------------------------------- */

/* Decimal digits of a whole number 0 <= x <= DENSE_MAX. */
static char *put_count(char *p, double x)
{
    char digits[24];
    int n = 0;
    uint64_t v = (uint64_t)x;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = digits[--n];
    return p;
}

static char *put_hex8(char *p, uint32_t v)
{
    static const char hex[] = "0123456789abcdef";
    for (int shift = 28; shift >= 0; shift -= 4)
        *p++ = hex[(v >> shift) & 15u];
    return p;
}

cpr_status cpr_synth_line(cpr_synth *s, char *buf, size_t cap, size_t *len)
{
    synth_row row;
    char *p = buf;
    if (!s || !buf || !len)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_synth_line: NULL argument");
    if (cap < CPR_SYNTH_LINE_MAX)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_synth_line: buffer of %zu bytes is "
                        "below CPR_SYNTH_LINE_MAX", cap);
    draw_row(s, &s->rng, &row);
    *p++ = (char)('0' + draw_label(s, &s->rng, &row));
    for (int d = 0; d < CPR_CRITEO_DENSE; d++) {
        *p++ = '\t';
        if (row.dense_present & (1u << d))
            p = put_count(p, row.dense[d]);
    }
    for (uint32_t t = 0; t < CPR_CRITEO_SPARSE; t++) {
        *p++ = '\t';
        if (t < s->tables)
            p = put_hex8(p, cpr_synth_value(s, t, row.ids[t]));
    }
    *p++ = '\n';
    *len = (size_t)(p - buf);
    return CPR_OK;
}

/* ---- files ------------------------------------------------------------------------ */

static cpr_status write_lines(cpr_synth *s, FILE *f, const char *path, uint64_t rows,
                              cpr_synth_progress_fn progress, void *ctx)
{
    char line[CPR_SYNTH_LINE_MAX];
    size_t len = 0;
    for (uint64_t i = 0; i < rows; i++) {
        cpr_status st = cpr_synth_line(s, line, sizeof line, &len);
        if (st)
            return st;
        if (fwrite(line, 1, len, f) != len)
            return cpr_fail(CPR_IO, "write %s: %s", path, strerror(errno));
        if (progress && (i + 1) % PROGRESS_ROWS == 0 && i + 1 < rows)
            progress(ctx, i + 1, rows);
    }
    return CPR_OK;
}

cpr_status cpr_synth_write(cpr_synth *s, const char *path, uint64_t rows,
                           cpr_synth_progress_fn progress, void *ctx)
{
    cpr_status st = CPR_OK;
    FILE *f = NULL;
    char *wbuf = NULL;
    if (!s || !path)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_synth_write: NULL argument");
    wbuf = malloc(WRITE_BUF_BYTES);
    if (!wbuf)
        return cpr_fail(CPR_NO_MEMORY, "synth: out of memory");
    /* Whole or not at all: a failure leaves what was at `path` (cpr_cli.h). */
    cpri_outfile file;
    st = cpri_outfile_open(&file, path);
    if (st)
        goto out;
    f = file.f;
    setvbuf(f, wbuf, _IOFBF, WRITE_BUF_BYTES);
    st = write_lines(s, f, path, rows, progress, ctx);
    if (st == CPR_OK)
        st = cpri_outfile_commit(&file);
    else
        cpri_outfile_abort(&file);
out:
    if (st == CPR_OK && progress)
        progress(ctx, rows, rows);
    free(wbuf);
    return st;
}
