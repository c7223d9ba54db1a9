/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The DLRM's dense math (examples/dlrm/dlrm_ops.h) and metrics: linear layers
 * against a naive loop (bit for bit), every gradient against central finite
 * differences (linear, a ReLU MLP through its ping-pong buffers, the pairwise
 * interaction, binary cross-entropy), exact AUC against hand-computed values
 * with ties and against an O(n^2) pair count, and log loss.
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

#include "dlrm.h"
#include "dlrm_internal.h"
#include "dlrm_ops.h"
#include "testutil.h"

/* A deterministic value in [-1, 1) for test inputs. */
static float val(uint64_t seed, uint64_t i)
{
    return (float)((double)(cpr_mix64(seed * 0x9e3779b97f4a7c15ull + i) >> 11) * 0x1p-52 - 1.0);
}

static float *filled(size_t n, uint64_t seed)
{
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = val(seed, i);
    return v;
}

/* Analytic and numeric derivatives agree to a relative 2e-3 (float inputs,
 * double losses; the looser bound covers float rounding of the forward). */
static void assert_close(double analytic, double numeric, const char *what, size_t i)
{
    double tol = 2e-3 * fmax(1.0, fabs(numeric));
    if (fabs(analytic - numeric) > tol)
        fail_msg("%s[%zu]: analytic %.6g, numeric %.6g", what, i, analytic, numeric);
}

/* ---- linear layers ------------------------------------------------------------- */

/* The blocked kernel sums in the naive loop's order, so results are identical,
 * including sizes that leave partial row groups and column blocks. */
static void test_linear_forward_matches_naive(void **unused)
{
    (void)unused;
    const size_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {9, 300, 260}, {130, 13, 64}};
    for (size_t s = 0; s < 4; s++) {
        size_t batch = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        float *x = filled(batch * in, 1), *w = filled(in * out, 2), *b = filled(out, 3);
        float *y = malloc(batch * out * sizeof *y);
        dlrm_linear_forward(x, batch, in, out, w, b, y);
        for (size_t r = 0; r < batch; r++)
            for (size_t o = 0; o < out; o++) {
                float want = b[o];
                for (size_t i = 0; i < in; i++)
                    want += x[r * in + i] * w[i * out + o];
                assert_int_equal(tu_float_bits(y[r * out + o]), tu_float_bits(want));
            }
        free(x);
        free(w);
        free(b);
        free(y);
    }
}

/* L = sum(y * R) for a fixed R, so dL/dy = R. */
static double linear_loss(const float *x, size_t batch, size_t in, size_t out, const float *w,
                          const float *b, const float *r)
{
    float *y = malloc(batch * out * sizeof *y);
    double loss = 0;
    dlrm_linear_forward(x, batch, in, out, w, b, y);
    for (size_t i = 0; i < batch * out; i++)
        loss += (double)y[i] * r[i];
    free(y);
    return loss;
}

/* Central difference of linear_loss in element i of `v` (one of x, w, b). */
static double linear_fd(float *v, size_t i, float *x, size_t batch, size_t in, size_t out,
                        float *w, float *b, const float *r)
{
    const float eps = 1e-2f; /* the loss is linear in each input: no truncation error */
    float keep = v[i], hi = keep + eps, lo = keep - eps;
    v[i] = hi;
    double up = linear_loss(x, batch, in, out, w, b, r);
    v[i] = lo;
    double down = linear_loss(x, batch, in, out, w, b, r);
    v[i] = keep;
    return (up - down) / ((double)hi - lo); /* the step floats really took */
}

static void test_linear_backward_finite_differences(void **unused)
{
    (void)unused;
    const size_t batch = 3, in = 5, out = 6; /* 6 columns: rows4 + row1 paths */
    float *x = filled(batch * in, 11), *w = filled(in * out, 12), *b = filled(out, 13);
    float *r = filled(batch * out, 14), *dy = filled(batch * out, 14);
    float *dw = malloc(in * out * sizeof *dw), *db = malloc(out * sizeof *db);
    float *dx = malloc(batch * in * sizeof *dx), *wt = malloc(in * out * sizeof *wt);
    dlrm_linear_backward(x, dy, batch, in, out, w, dw, db, dx, wt);
    for (size_t i = 0; i < in * out; i++)
        assert_close(dw[i], linear_fd(w, i, x, batch, in, out, w, b, r), "dw", i);
    for (size_t i = 0; i < out; i++)
        assert_close(db[i], linear_fd(b, i, x, batch, in, out, w, b, r), "db", i);
    for (size_t i = 0; i < batch * in; i++)
        assert_close(dx[i], linear_fd(x, i, x, batch, in, out, w, b, r), "dx", i);
    /* dx may be omitted (the first layer); dw and db are the same. */
    float *dw2 = malloc(in * out * sizeof *dw2), *db2 = malloc(out * sizeof *db2);
    dlrm_linear_backward(x, dy, batch, in, out, w, dw2, db2, NULL, wt);
    assert_memory_equal(dw, dw2, in * out * sizeof *dw);
    assert_memory_equal(db, db2, out * sizeof *db);
    float *owned[] = {x, w, b, r, dy, dw, db, dx, wt, dw2, db2};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        free(owned[i]);
}

/* ---- a whole MLP: ReLU masks and the gradient ping-pong ------------------------- */

typedef struct mlp_case {
    dlrm_mlp mlp;
    float *x, *r;
    size_t batch;
} mlp_case;

static double mlp_loss(mlp_case *c)
{
    const float *y = dlrm_mlp_forward(&c->mlp, c->x, c->batch);
    size_t n = c->batch * c->mlp.width[c->mlp.layers];
    double loss = 0;
    for (size_t i = 0; i < n; i++)
        loss += (double)y[i] * c->r[i];
    return loss;
}

static double mlp_fd(mlp_case *c, float *v, size_t i)
{
    const float eps = 1e-3f;
    float keep = v[i], hi = keep + eps, lo = keep - eps;
    v[i] = hi;
    double up = mlp_loss(c);
    v[i] = lo;
    double down = mlp_loss(c);
    v[i] = keep;
    return (up - down) / ((double)hi - lo);
}

static void check_mlp(const dlrm_layers *widths, int relu_last)
{
    mlp_case c = {.batch = 4};
    cpr_rng rng;
    cpr_rng_seed(&rng, 21);
    assert_status(CPR_OK, dlrm_mlp_init(&c.mlp, widths, relu_last, c.batch, 0, &rng));
    size_t in = widths->size[0], out = widths->size[widths->count - 1];
    c.x = filled(c.batch * in, 22);
    c.r = filled(c.batch * out, 23);
    float *dy = malloc(c.batch * out * sizeof *dy), *dx = malloc(c.batch * in * sizeof *dx);
    memcpy(dy, c.r, c.batch * out * sizeof *dy);
    mlp_loss(&c); /* forward, keeping activations */
    dlrm_mlp_backward(&c.mlp, c.x, dy, c.batch, dx);
    float *grad = malloc(c.mlp.params * sizeof *grad);
    memcpy(grad, c.mlp.grad, c.mlp.params * sizeof *grad);
    for (size_t i = 0; i < c.mlp.params; i++)
        assert_close(grad[i], mlp_fd(&c, c.mlp.param, i), "param", i);
    for (size_t i = 0; i < c.batch * in; i++)
        assert_close(dx[i], mlp_fd(&c, c.x, i), "dx", i);
    free(grad);
    free(dy);
    free(dx);
    free(c.x);
    free(c.r);
    dlrm_mlp_release(&c.mlp);
}

static void test_mlp_finite_differences(void **unused)
{
    (void)unused;
    dlrm_layers three = {.count = 4, .size = {5, 7, 6, 3}};
    dlrm_layers one = {.count = 2, .size = {4, 2}};
    check_mlp(&three, 0); /* a top MLP: linear last layer */
    check_mlp(&three, 1); /* a bottom MLP: ReLU after the last layer too */
    check_mlp(&one, 0);
}

/* SGD and Adagrad steps follow their formulas. */
static void test_mlp_update_rules(void **unused)
{
    (void)unused;
    dlrm_layers l = {.count = 2, .size = {1, 1}};
    dlrm_mlp mlp;
    cpr_rng rng;
    cpr_rng_seed(&rng, 1);
    assert_status(CPR_OK, dlrm_mlp_init(&mlp, &l, 0, 1, 1, &rng));
    mlp.param[0] = 1.0f;
    mlp.grad[0] = 0.5f;
    dlrm_mlp_update(&mlp, DLRM_OPT_SGD, 0.1f, 1e-8f);
    assert_float_equal(mlp.param[0], 0.95f, 1e-7);
    dlrm_mlp_update(&mlp, DLRM_OPT_ADAGRAD, 0.1f, 1e-8f); /* s = 0.25: step 0.1 */
    assert_float_equal(mlp.state[0], 0.25f, 1e-7);
    assert_float_equal(mlp.param[0], 0.85f, 1e-6);
    dlrm_mlp_update(&mlp, DLRM_OPT_ADAGRAD, 0.1f, 1e-8f); /* s = 0.5 */
    assert_float_equal(mlp.param[0], 0.85f - 0.1f * 0.5f / sqrtf(0.5f), 1e-6);
    dlrm_mlp_release(&mlp);
}

/* ---- the interaction ---------------------------------------------------------------- */

static void test_interaction_forward_layout(void **unused)
{
    (void)unused;
    /* One sample, 3 vectors of dim 2: out = z0, z0.z1, z0.z2, z1.z2. */
    const float z[6] = {1, 2, 3, 4, 5, 6};
    float out[5];
    assert_int_equal(dlrm_interact_width(3, 2), 5);
    assert_int_equal(dlrm_interact_width(27, 16), 16 + 351);
    dlrm_interact_forward(z, 1, 3, 2, out);
    const float want[5] = {1, 2, 11, 17, 39};
    assert_memory_equal(out, want, sizeof want);
}

static double interact_loss(const float *z, size_t batch, size_t vectors, size_t dim,
                            const float *r)
{
    size_t width = dlrm_interact_width(vectors, dim);
    float *out = malloc(batch * width * sizeof *out);
    double loss = 0;
    dlrm_interact_forward(z, batch, vectors, dim, out);
    for (size_t i = 0; i < batch * width; i++)
        loss += (double)out[i] * r[i];
    free(out);
    return loss;
}

static void test_interaction_finite_differences(void **unused)
{
    (void)unused;
    const size_t batch = 2, vectors = 4, dim = 3, n = batch * vectors * dim;
    size_t width = dlrm_interact_width(vectors, dim);
    float *z = filled(n, 31), *r = filled(batch * width, 32);
    float *dz = malloc(n * sizeof *dz);
    dlrm_interact_backward(z, r, batch, vectors, dim, dz);
    for (size_t i = 0; i < n; i++) {
        const float eps = 1e-2f; /* quadratic: central differences are exact */
        float keep = z[i], hi = keep + eps, lo = keep - eps;
        z[i] = hi;
        double up = interact_loss(z, batch, vectors, dim, r);
        z[i] = lo;
        double down = interact_loss(z, batch, vectors, dim, r);
        z[i] = keep;
        assert_close(dz[i], (up - down) / ((double)hi - lo), "dz", i);
    }
    free(z);
    free(r);
    free(dz);
}

/* ---- binary cross-entropy ------------------------------------------------------------- */

static void test_bce_values(void **unused)
{
    (void)unused;
    const float logit[4] = {0.0f, 100.0f, -100.0f, 2.0f};
    const float label[4] = {1.0f, 0.0f, 0.0f, 1.0f};
    float d[4];
    /* log 2; 100 (no overflow); e^-100; log(1 + e^-2). Mean of the four. */
    double want = (log(2.0) + 100.0 + exp(-100.0) + log1p(exp(-2.0))) / 4.0;
    assert_float_equal(dlrm_bce_logits(logit, label, 4, d), want, 1e-12);
    assert_float_equal(d[0], -0.5f / 4, 1e-7);         /* sigmoid(0) - 1 */
    assert_float_equal(d[1], 1.0f / 4, 1e-7);          /* sigmoid(100) - 0 */
    assert_float_equal(d[2], 0.0f, 1e-7);
    assert_float_equal(d[3], (float)((1.0 / (1.0 + exp(-2.0)) - 1.0) / 4.0), 1e-7);
    assert_float_equal(dlrm_logloss(logit, label, 4), want, 1e-12);
    assert_float_equal(dlrm_logloss(logit, label, 0), 0.0, 0);
}

static void test_bce_finite_differences(void **unused)
{
    (void)unused;
    const size_t n = 6;
    float z[6] = {-3.0f, -0.5f, 0.1f, 0.7f, 2.5f, 8.0f};
    const float y[6] = {0, 1, 0, 1, 1, 0};
    float d[6];
    dlrm_bce_logits(z, y, n, d);
    for (size_t i = 0; i < n; i++) {
        const float eps = 1e-3f;
        float keep = z[i], hi = keep + eps, lo = keep - eps;
        z[i] = hi;
        double up = dlrm_bce_logits(z, y, n, NULL);
        z[i] = lo;
        double down = dlrm_bce_logits(z, y, n, NULL);
        z[i] = keep;
        /* The gradient is at most 1/6; compare absolutely. */
        double numeric = (up - down) / ((double)hi - lo);
        if (fabs(d[i] - numeric) > 1e-5)
            fail_msg("dlogit[%zu]: analytic %.8g, numeric %.8g", i, (double)d[i], numeric);
    }
}

/* ---- AUC ---------------------------------------------------------------------------- */

static double auc_of(const float *s, const float *y, size_t n)
{
    double auc = -1;
    assert_status(CPR_OK, dlrm_auc(s, y, n, &auc));
    return auc;
}

static void test_auc_hand_computed(void **unused)
{
    (void)unused;
    const float y[4] = {0, 0, 1, 1};
    const float perfect[4] = {0.1f, 0.2f, 0.8f, 0.9f}, reversed[4] = {0.9f, 0.8f, 0.2f, 0.1f};
    const float one_swap[4] = {0.1f, 0.4f, 0.35f, 0.8f}; /* 3 of 4 pairs ordered */
    const float tie_across[4] = {0.2f, 0.5f, 0.5f, 0.9f}; /* 1 + 0.5 + 2 of 4 */
    const float all_tied[4] = {0.3f, 0.3f, 0.3f, 0.3f};
    assert_float_equal(auc_of(perfect, y, 4), 1.0, 0);
    assert_float_equal(auc_of(reversed, y, 4), 0.0, 0);
    assert_float_equal(auc_of(one_swap, y, 4), 0.75, 0);
    assert_float_equal(auc_of(tie_across, y, 4), 0.875, 0);
    assert_float_equal(auc_of(all_tied, y, 4), 0.5, 0);
    /* Ties within a class change nothing: 2 positives tied above 3 negatives
     * with two of them tied with each other. */
    const float s5[5] = {0.1f, 0.1f, 0.3f, 0.7f, 0.7f}, y5[5] = {0, 0, 0, 1, 1};
    assert_float_equal(auc_of(s5, y5, 5), 1.0, 0);
    /* 1 positive tied with 1 of 2 negatives, above the other: (1 + 0.5) / 2. */
    const float s3[3] = {0.4f, 0.6f, 0.6f}, y3[3] = {0, 0, 1};
    assert_float_equal(auc_of(s3, y3, 3), 0.75, 0);
}

/* Many ties (scores quantized to 8 levels) against counting all pairs. */
static void test_auc_matches_pair_count(void **unused)
{
    (void)unused;
    const size_t n = 600;
    float *s = malloc(n * sizeof *s), *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) {
        y[i] = (float)(cpr_mix64(i + 1) & 1);
        s[i] = (float)(cpr_mix64(i + 1000) % 8) + 0.5f * y[i] * (float)(i % 3);
    }
    double pairs = 0, pos = 0, neg = 0;
    for (size_t i = 0; i < n; i++) {
        pos += y[i];
        neg += 1 - y[i];
        for (size_t j = 0; y[i] == 1 && j < n; j++)
            if (y[j] == 0)
                pairs += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
    }
    assert_float_equal(auc_of(s, y, n), pairs / (pos * neg), 1e-12);
    free(s);
    free(y);
}

static void test_auc_errors(void **unused)
{
    (void)unused;
    double auc = 42;
    const float s[3] = {0.1f, 0.2f, 0.3f}, ones[3] = {1, 1, 1}, bad[3] = {0, 2, 1};
    float nan_s[3] = {0.1f, NAN, 0.3f};
    const float y[3] = {0, 1, 1};
    assert_status(CPR_FAILED_PRECONDITION, dlrm_auc(s, ones, 3, &auc));
    assert_status(CPR_INVALID_ARGUMENT, dlrm_auc(s, bad, 3, &auc));
    assert_status(CPR_INVALID_ARGUMENT, dlrm_auc(nan_s, y, 3, &auc));
    assert_status(CPR_FAILED_PRECONDITION, dlrm_auc(s, y, 0, &auc));
    assert_float_equal(auc, 42, 0); /* never written on failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_forward_matches_naive),
        cmocka_unit_test(test_linear_backward_finite_differences),
        cmocka_unit_test(test_mlp_finite_differences),
        cmocka_unit_test(test_mlp_update_rules),
        cmocka_unit_test(test_interaction_forward_layout),
        cmocka_unit_test(test_interaction_finite_differences),
        cmocka_unit_test(test_bce_values),
        cmocka_unit_test(test_bce_finite_differences),
        cmocka_unit_test(test_auc_hand_computed),
        cmocka_unit_test(test_auc_matches_pair_count),
        cmocka_unit_test(test_auc_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
