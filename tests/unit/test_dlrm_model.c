/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The DLRM model (examples/dlrm): configuration checks, the tables and their
 * shards, the dense blob (round trip, every single-byte corruption caught,
 * version and architecture refused), the gradient of the whole model against
 * finite differences (MLP weights and embedding rows, through one SGD step),
 * refused batches that change nothing, and determinism.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpr/crc32c.h"
#include "cpr/cuda.h"
#include "dlrm.h"
#include "dlrm_internal.h"
#include "dlrm_ops.h"
#include "testutil.h"

#define TABLES 3
#define ROWS 50
#define DIM 4
#define MAX_BATCH 8

static dlrm_config small_config(dlrm_optimizer opt)
{
    dlrm_config c;
    dlrm_config_init(&c);
    c.num_tables = TABLES;
    c.table_rows = ROWS;
    c.emb_dim = DIM;
    c.bottom = (dlrm_layers){.count = 3, .size = {13, 8, DIM}};
    c.top = (dlrm_layers){.count = 2, .size = {6, 1}};
    c.optimizer = opt;
    c.max_batch = MAX_BATCH;
    c.seed = 5;
    return c;
}

static dlrm_model *make_model(const dlrm_config *c)
{
    dlrm_model *m = NULL;
    assert_status(CPR_OK, dlrm_model_create(c, &m));
    return m;
}

/* A deterministic batch of n samples: log-scaled-like dense values, rows
 * hashed from (seed, sample, table), labels from a hash. */
static void fill_batch(dlrm_batch *b, size_t n, uint64_t seed)
{
    b->size = n;
    for (size_t r = 0; r < n; r++) {
        for (int i = 0; i < CPR_CRITEO_DENSE; i++)
            b->dense[r * CPR_CRITEO_DENSE + i] =
                (float)(cpr_mix64(seed * 7919 + r * 13 + (uint64_t)i) % 300) / 100.0f;
        for (uint32_t t = 0; t < b->num_tables; t++)
            b->indices[t * b->cap + r] = (int64_t)(cpr_mix64(seed * 104729 + r * 31 + t) % ROWS);
        b->labels[r] = (float)(cpr_mix64(seed + 77 * r) & 1);
    }
}

static unsigned char *dense_blob(const dlrm_model *m, size_t *len)
{
    size_t cap = dlrm_model_dense_bytes(m);
    unsigned char *buf = malloc(cap);
    assert_non_null(buf);
    assert_status(CPR_OK, dlrm_model_dense_save(m, buf, cap, len));
    assert_int_equal(*len, cap);
    return buf;
}

/* ---- configuration ------------------------------------------------------------ */

static void expect_invalid(const dlrm_config *c)
{
    dlrm_model *m = (dlrm_model *)(uintptr_t)1; /* must stay untouched */
    assert_status(CPR_INVALID_ARGUMENT, dlrm_model_create(c, &m));
    assert_ptr_equal(m, (dlrm_model *)(uintptr_t)1);
}

static void test_config_checks(void **unused)
{
    (void)unused;
    dlrm_config good = small_config(DLRM_OPT_ADAGRAD), c;
    c = good;
    c.bottom.size[0] = 12;
    expect_invalid(&c);                   /* the bottom MLP must start at 13 */
    c = good;
    c.bottom.size[2] = DIM + 1;
    expect_invalid(&c);                   /* ... and end at emb_dim */
    c = good;
    c.top.size[1] = 2;
    expect_invalid(&c);                   /* the top MLP ends in one logit */
    c = good;
    c.num_tables = 27;
    expect_invalid(&c);
    c = good;
    c.lr = 0;
    expect_invalid(&c);
    c = good;
    c.emb_lr = NAN;
    expect_invalid(&c);
    c = good;
    c.max_batch = 0;
    expect_invalid(&c);
    c = good;
    c.num_shards = ROWS + 1;
    expect_invalid(&c);                   /* cpr_emb refuses shards without rows */
    dlrm_model_destroy(make_model(&good));
    dlrm_model_destroy(NULL);
    if (!cpr_cuda_built()) {
        dlrm_model *m = NULL;
        c = good;
        c.device = CPR_DEVICE_CUDA;
        assert_status(CPR_CUDA, dlrm_model_create(&c, &m));
        assert_null(m);
    }
}

static void test_layers_parse(void **unused)
{
    (void)unused;
    dlrm_layers l = {0};
    assert_status(CPR_OK, dlrm_layers_parse("13-512-256-64-16", &l));
    assert_int_equal(l.count, 5);
    assert_int_equal(l.size[0], 13);
    assert_int_equal(l.size[4], 16);
    assert_status(CPR_OK, dlrm_layers_parse("1", &l));
    assert_int_equal(l.count, 1);
    const char *bad[] = {"", "13-", "-13", "13--4", "0-4", "13-x", "13 -4", "13-65537",
                         "1-2-3-4-5-6-7-8-9-10-11-12-13-14-15-16-17-18"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        l.count = 99;
        assert_status(CPR_INVALID_ARGUMENT, dlrm_layers_parse(bad[i], &l));
        assert_int_equal(l.count, 99);
    }
}

/* One table per feature, sharded as asked, each seeded differently. */
static void test_tables_and_shards(void **unused)
{
    (void)unused;
    dlrm_config c = small_config(DLRM_OPT_SGD);
    c.num_shards = 4;
    c.shard_scheme = CPR_SHARD_MODULO;
    c.track = CPR_TRACK_ALL;
    dlrm_model *m = make_model(&c);
    float first[TABLES][DIM];
    const int64_t zero = 0, off = 0;
    for (uint32_t t = 0; t < TABLES; t++) {
        cpr_emb *e = dlrm_model_table(m, t);
        assert_non_null(e);
        assert_int_equal(cpr_emb_rows(e), ROWS);
        assert_int_equal(cpr_emb_dim(e), DIM);
        assert_int_equal(cpr_emb_num_shards(e), 4);
        assert_int_equal(cpr_emb_shard_of(e, 5), 1);
        assert_status(CPR_OK, cpr_emb_forward(e, &zero, 1, &off, 1, CPR_POOL_SUM, first[t]));
    }
    assert_null(dlrm_model_table(m, TABLES));
    assert_memory_not_equal(first[0], first[1], sizeof first[0]);
    assert_int_equal(dlrm_model_dense_params(m), (13 * 8 + 8) + (8 * DIM + DIM) +
                                                 ((DIM + 6) * 6 + 6) + (6 + 1));
    /* Training feeds the trackers the checkpoint code reads. */
    dlrm_batch b;
    assert_status(CPR_OK, dlrm_batch_init(&b, MAX_BATCH, TABLES));
    fill_batch(&b, MAX_BATCH, 1);
    assert_status(CPR_OK, dlrm_model_train_step(m, &b, NULL));
    uint64_t events = 0;
    for (uint32_t s = 0; s < 4; s++) {
        cpr_emb_stats st;
        assert_status(CPR_OK, cpr_emb_stats_get(dlrm_model_table(m, 0), s, &st));
        events += st.update_events;
    }
    assert_int_equal(events, MAX_BATCH); /* one event per occurrence */
    dlrm_batch_release(&b);
    dlrm_model_destroy(m);
}

/* ---- the dense blob --------------------------------------------------------------- */

static void train_steps(dlrm_model *m, int steps, uint64_t seed, double *losses)
{
    dlrm_batch b;
    assert_status(CPR_OK, dlrm_batch_init(&b, MAX_BATCH, TABLES));
    for (int s = 0; s < steps; s++) {
        fill_batch(&b, MAX_BATCH - (size_t)(s % 3), seed + (uint64_t)s);
        double loss = 0;
        assert_status(CPR_OK, dlrm_model_train_step(m, &b, &loss));
        if (losses)
            losses[s] = loss;
    }
    dlrm_batch_release(&b);
}

static void test_dense_round_trip(void **unused)
{
    (void)unused;
    for (int opt = DLRM_OPT_SGD; opt <= DLRM_OPT_ADAGRAD; opt++) {
        dlrm_config c = small_config((dlrm_optimizer)opt);
        dlrm_model *a = make_model(&c), *b;
        size_t fresh_len, len, len_b;
        unsigned char *fresh = dense_blob(a, &fresh_len);
        train_steps(a, 3, 100, NULL);
        unsigned char *blob = dense_blob(a, &len);
        assert_memory_not_equal(fresh, blob, len); /* training changed it */
        size_t params = dlrm_model_dense_params(a);
        assert_int_equal(len, 32 + 4 * (3 + 3) + 4 * params * (opt ? 2 : 1) + 4);
        c.seed = 6; /* other initial weights */
        b = make_model(&c);
        assert_status(CPR_OK, dlrm_model_dense_load(b, blob, len));
        assert_int_equal(dlrm_model_step(b), 3);
        unsigned char *again = dense_blob(b, &len_b);
        assert_int_equal(len_b, len);
        assert_memory_equal(again, blob, len);
        size_t small = 0;
        assert_status(CPR_INVALID_ARGUMENT, dlrm_model_dense_save(b, again, len - 1, &small));
        assert_int_equal(small, 0);
        free(fresh);
        free(blob);
        free(again);
        dlrm_model_destroy(a);
        dlrm_model_destroy(b);
    }
}

static void test_dense_corruption(void **unused)
{
    (void)unused;
    dlrm_config c = small_config(DLRM_OPT_ADAGRAD);
    dlrm_model *a = make_model(&c);
    train_steps(a, 2, 200, NULL);
    size_t len, len_b;
    unsigned char *blob = dense_blob(a, &len);
    c.seed = 9;
    dlrm_model *b = make_model(&c);
    unsigned char *before = dense_blob(b, &len_b);
    /* Every single-byte change is caught (CRC32C), and the model is untouched. */
    for (size_t i = 0; i < len; i++) {
        blob[i] ^= 0x5a;
        assert_status(CPR_CORRUPT, dlrm_model_dense_load(b, blob, len));
        blob[i] ^= 0x5a;
    }
    assert_status(CPR_CORRUPT, dlrm_model_dense_load(b, blob, len - 1));
    assert_status(CPR_CORRUPT, dlrm_model_dense_load(b, blob, 10));
    assert_status(CPR_CORRUPT, dlrm_model_dense_load(b, blob, 0));
    assert_status(CPR_INVALID_ARGUMENT, dlrm_model_dense_load(b, NULL, len));
    /* A future version with a valid checksum: refused as such. */
    dlrm_put_u32(blob + 8, 2);
    dlrm_put_u32(blob + len - 4, cpr_crc32c(0, blob, len - 4));
    assert_status(CPR_INVALID_ARGUMENT, dlrm_model_dense_load(b, blob, len));
    unsigned char *after = dense_blob(b, &len_b);
    assert_memory_equal(before, after, len_b);
    free(after);
    free(blob);
    /* Blobs of another architecture or optimizer. */
    dlrm_config other = small_config(DLRM_OPT_ADAGRAD);
    other.top.size[0] = 7;
    dlrm_model *o = make_model(&other);
    blob = dense_blob(o, &len);
    assert_status(CPR_INVALID_ARGUMENT, dlrm_model_dense_load(b, blob, len));
    free(blob);
    dlrm_model_destroy(o);
    other = small_config(DLRM_OPT_SGD);
    o = make_model(&other);
    blob = dense_blob(o, &len);
    assert_status(CPR_INVALID_ARGUMENT, dlrm_model_dense_load(b, blob, len));
    free(blob);
    dlrm_model_destroy(o);
    after = dense_blob(b, &len_b);
    assert_memory_equal(before, after, len_b);
    free(after);
    free(before);
    dlrm_model_destroy(a);
    dlrm_model_destroy(b);
}

/* ---- the whole model's gradient ----------------------------------------------------- */

typedef struct grad_case {
    dlrm_model *m;
    dlrm_batch b;
    float rows[TABLES][MAX_BATCH][DIM];  /* initial rows of the batch's indices */
} grad_case;

static void read_row(cpr_emb *e, int64_t row, float *out)
{
    const int64_t off = 0;
    assert_status(CPR_OK, cpr_emb_forward(e, &row, 1, &off, 1, CPR_POOL_SUM, out));
}

/* Put the batch's rows back to their initial values (SGD: no state). */
static void restore_rows(grad_case *g)
{
    for (uint32_t t = 0; t < TABLES; t++)
        for (size_t r = 0; r < g->b.size; r++) {
            uint64_t id = (uint64_t)g->b.indices[t * g->b.cap + r];
            assert_status(CPR_OK, cpr_emb_apply(dlrm_model_table(g->m, t), &id, 1,
                                                g->rows[t][r], NULL));
        }
}

static double model_loss(grad_case *g)
{
    float logits[MAX_BATCH];
    assert_status(CPR_OK, dlrm_model_forward(g->m, &g->b, logits));
    return dlrm_bce_logits(logits, g->b.labels, g->b.size, NULL);
}

static double fd_param(grad_case *g, float *p)
{
    const float eps = 2e-3f;
    float keep = *p, hi = keep + eps, lo = keep - eps;
    *p = hi;
    double up = model_loss(g);
    *p = lo;
    double down = model_loss(g);
    *p = keep;
    return (up - down) / ((double)hi - lo); /* the step floats really took */
}

static void assert_grad(double analytic, double numeric, const char *what, size_t i)
{
    if (fabs(analytic - numeric) > 3e-4 + 1e-2 * fabs(numeric))
        fail_msg("%s %zu: from the SGD step %.6g, finite differences %.6g", what, i, analytic,
                 numeric);
}

/* Gradients of the MLP parameters: p_before - p_after of an SGD step, lr 1.
 * Both MLPs are back at their values before the step meanwhile. */
static void check_mlp_grads(grad_case *g, dlrm_mlp *mlp, const float *before,
                            const float *after, const char *what)
{
    for (size_t i = 0; i < mlp->params; i++)
        assert_grad((double)before[i] - after[i], fd_param(g, &mlp->param[i]), what, i);
}

static float *copy_params(const dlrm_mlp *mlp)
{
    float *p = malloc(mlp->params * sizeof *p);
    assert_non_null(p);
    memcpy(p, mlp->param, mlp->params * sizeof *p);
    return p;
}

static void test_model_gradients(void **unused)
{
    (void)unused;
    dlrm_config c = small_config(DLRM_OPT_SGD);
    c.lr = 1.0f;
    c.emb_lr = 1.0f;
    c.emb_optimizer = CPR_OPT_SGD;
    grad_case g = {.m = make_model(&c)};
    assert_status(CPR_OK, dlrm_batch_init(&g.b, MAX_BATCH, TABLES));
    fill_batch(&g.b, 5, 42);
    for (uint32_t t = 0; t < TABLES; t++)
        for (size_t r = 0; r < g.b.size; r++)
            read_row(dlrm_model_table(g.m, t), g.b.indices[t * g.b.cap + r], g.rows[t][r]);
    float *bottom0 = copy_params(&g.m->bottom), *top0 = copy_params(&g.m->top);
    assert_status(CPR_OK, dlrm_model_train_step(g.m, &g.b, NULL));
    float *bottom1 = copy_params(&g.m->bottom), *top1 = copy_params(&g.m->top);
    /* Rows after the step: grad = before - after (summed over repeats). */
    float moved[TABLES][MAX_BATCH][DIM];
    for (uint32_t t = 0; t < TABLES; t++)
        for (size_t r = 0; r < g.b.size; r++)
            read_row(dlrm_model_table(g.m, t), g.b.indices[t * g.b.cap + r], moved[t][r]);
    restore_rows(&g);
    memcpy(g.m->bottom.param, bottom0, g.m->bottom.params * sizeof(float));
    memcpy(g.m->top.param, top0, g.m->top.params * sizeof(float));
    check_mlp_grads(&g, &g.m->bottom, bottom0, bottom1, "bottom param");
    check_mlp_grads(&g, &g.m->top, top0, top1, "top param");
    for (uint32_t t = 0; t < TABLES; t++)
        for (size_t r = 0; r < g.b.size; r++)
            for (int d = 0; d < DIM; d++) {
                uint64_t id = (uint64_t)g.b.indices[t * g.b.cap + r];
                float row[DIM];
                memcpy(row, g.rows[t][r], sizeof row);
                const float eps = 2e-3f, hi = row[d] + eps, lo = row[d] - eps;
                row[d] = hi;
                assert_status(CPR_OK, cpr_emb_apply(dlrm_model_table(g.m, t), &id, 1, row, NULL));
                double up = model_loss(&g);
                row[d] = lo;
                assert_status(CPR_OK, cpr_emb_apply(dlrm_model_table(g.m, t), &id, 1, row, NULL));
                double down = model_loss(&g);
                restore_rows(&g);
                assert_grad((double)g.rows[t][r][d] - moved[t][r][d],
                            (up - down) / ((double)hi - lo), "embedding element",
                            (t * MAX_BATCH + r) * DIM + (size_t)d);
            }
    free(bottom0);
    free(top0);
    free(bottom1);
    free(top1);
    dlrm_batch_release(&g.b);
    dlrm_model_destroy(g.m);
}

/* ---- refused batches, determinism ---------------------------------------------------- */

static void test_refused_batches_change_nothing(void **unused)
{
    (void)unused;
    dlrm_config c = small_config(DLRM_OPT_ADAGRAD);
    dlrm_model *m = make_model(&c);
    dlrm_batch b, wrong;
    size_t len, len2;
    double loss = -1;
    assert_status(CPR_OK, dlrm_batch_init(&b, MAX_BATCH + 1, TABLES));
    assert_status(CPR_OK, dlrm_batch_init(&wrong, MAX_BATCH, TABLES - 1));
    fill_batch(&b, MAX_BATCH, 3);
    unsigned char *before = dense_blob(m, &len);
    b.size = 0;
    assert_status(CPR_INVALID_ARGUMENT, dlrm_model_train_step(m, &b, &loss));
    b.size = MAX_BATCH + 1;
    assert_status(CPR_INVALID_ARGUMENT, dlrm_model_train_step(m, &b, &loss));
    b.size = MAX_BATCH;
    b.indices[2 * b.cap + 5] = ROWS; /* outside table 2 */
    assert_status(CPR_INVALID_ARGUMENT, dlrm_model_train_step(m, &b, &loss));
    wrong.size = 1;
    assert_status(CPR_INVALID_ARGUMENT, dlrm_model_train_step(m, &wrong, &loss));
    assert_float_equal(loss, -1, 0);
    assert_int_equal(dlrm_model_step(m), 0);
    unsigned char *after = dense_blob(m, &len2);
    assert_memory_equal(before, after, len);
    b.indices[2 * b.cap + 5] = 0;
    assert_status(CPR_OK, dlrm_model_train_step(m, &b, &loss));
    assert_true(loss > 0 && isfinite(loss));
    assert_int_equal(dlrm_model_step(m), 1);
    free(before);
    free(after);
    dlrm_batch_release(&b);
    dlrm_batch_release(&wrong);
    dlrm_model_destroy(m);
}

static void test_same_seed_same_losses(void **unused)
{
    (void)unused;
    enum { STEPS = 25 };
    double first[STEPS], second[STEPS], other[STEPS];
    dlrm_config c = small_config(DLRM_OPT_ADAGRAD);
    c.num_shards = 2;
    dlrm_model *a = make_model(&c), *b = make_model(&c);
    train_steps(a, STEPS, 500, first);
    train_steps(b, STEPS, 500, second);
    assert_memory_equal(first, second, sizeof first); /* bit for bit */
    size_t la, lb;
    unsigned char *ba = dense_blob(a, &la), *bb = dense_blob(b, &lb);
    assert_memory_equal(ba, bb, la);
    c.seed++;
    dlrm_model *d = make_model(&c);
    train_steps(d, STEPS, 500, other);
    assert_memory_not_equal(first, other, sizeof first);
    free(ba);
    free(bb);
    dlrm_model_destroy(a);
    dlrm_model_destroy(b);
    dlrm_model_destroy(d);
}

/* Shards and trackers are bookkeeping for checkpoints: they must not change
 * a single bit of training. */
static void test_shards_and_trackers_change_nothing(void **unused)
{
    (void)unused;
    enum { STEPS = 15 };
    double plain[STEPS], sharded[STEPS];
    dlrm_config c = small_config(DLRM_OPT_ADAGRAD);
    dlrm_model *a = make_model(&c);
    c.num_shards = 5;
    c.shard_scheme = CPR_SHARD_MODULO;
    c.track = CPR_TRACK_ALL;
    dlrm_model *b = make_model(&c);
    train_steps(a, STEPS, 900, plain);
    train_steps(b, STEPS, 900, sharded);
    assert_memory_equal(plain, sharded, sizeof plain);
    dlrm_model_destroy(a);
    dlrm_model_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_checks),
        cmocka_unit_test(test_layers_parse),
        cmocka_unit_test(test_tables_and_shards),
        cmocka_unit_test(test_dense_round_trip),
        cmocka_unit_test(test_dense_corruption),
        cmocka_unit_test(test_model_gradients),
        cmocka_unit_test(test_refused_batches_change_nothing),
        cmocka_unit_test(test_same_seed_same_losses),
        cmocka_unit_test(test_shards_and_trackers_change_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
