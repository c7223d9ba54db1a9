/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The DLRM's dense math (dlrm_ops.h). Everything reduces to one matrix
 * kernel, c += a . b, written so the compiler vectorizes it without changing
 * the order of any sum: the innermost loop runs along a row of b and c
 * (independent lanes), four rows of c share each load of b, and columns go
 * in blocks small enough that those four row segments stay in L1 while k
 * runs. No BLAS: this is the only hot loop, and keeping it ours keeps runs
 * bit-reproducible.
 */
#include <math.h>
#include <string.h>

#include "dlrm_ops.h"

/* Columns per block: four rows of c (4 x 4 x 256 = 4 KiB) stay in L1. */
#define GEMM_COLS 256

/* Rows r0..r0+3 of c, columns [0, cols): one load of b feeds four rows.
 * (A 4 x 8 register-blocked variant measured 3x slower here: GCC kept the
 * block in memory.) */
static void gemm_rows4(size_t cols, size_t k, const float *a, size_t a_row, size_t a_col,
                       const float *b, size_t ldb, float *c, size_t ldc)
{
    float *restrict c0 = c, *restrict c1 = c + ldc, *restrict c2 = c + 2 * ldc;
    float *restrict c3 = c + 3 * ldc;
    for (size_t p = 0; p < k; p++) {
        const float *restrict bp = b + p * ldb;
        const float a0 = a[p * a_col], a1 = a[a_row + p * a_col];
        const float a2 = a[2 * a_row + p * a_col], a3 = a[3 * a_row + p * a_col];
        for (size_t j = 0; j < cols; j++) {
            const float bj = bp[j];
            c0[j] += a0 * bj;
            c1[j] += a1 * bj;
            c2[j] += a2 * bj;
            c3[j] += a3 * bj;
        }
    }
}

static void gemm_row1(size_t cols, size_t k, const float *a, size_t a_col, const float *b,
                      size_t ldb, float *restrict c)
{
    for (size_t p = 0; p < k; p++) {
        const float *restrict bp = b + p * ldb;
        const float ap = a[p * a_col];
        for (size_t j = 0; j < cols; j++)
            c[j] += ap * bp[j];
    }
}

void dlrm_gemm_acc(size_t m, size_t n, size_t k, const float *a, size_t a_row, size_t a_col,
                   const float *b, float *c)
{
    for (size_t j0 = 0; j0 < n; j0 += GEMM_COLS) {
        size_t cols = n - j0 < GEMM_COLS ? n - j0 : GEMM_COLS;
        size_t i = 0;
        for (; i + 4 <= m; i += 4)
            gemm_rows4(cols, k, a + i * a_row, a_row, a_col, b + j0, n, c + i * n + j0, n);
        for (; i < m; i++)
            gemm_row1(cols, k, a + i * a_row, a_col, b + j0, n, c + i * n + j0);
    }
}

void dlrm_linear_forward(const float *x, size_t batch, size_t in, size_t out, const float *w,
                         const float *bias, float *y)
{
    for (size_t r = 0; r < batch; r++)
        memcpy(y + r * out, bias, out * sizeof *y);
    dlrm_gemm_acc(batch, out, in, x, in, 1, w, y);
}

void dlrm_linear_backward(const float *x, const float *dy, size_t batch, size_t in, size_t out,
                          const float *w, float *dw, float *dbias, float *dx, float *wt)
{
    memset(dw, 0, in * out * sizeof *dw);
    dlrm_gemm_acc(in, out, batch, x, 1, in, dy, dw); /* x^T . dy */
    memset(dbias, 0, out * sizeof *dbias);
    for (size_t r = 0; r < batch; r++) {
        const float *restrict row = dy + r * out;
        for (size_t o = 0; o < out; o++)
            dbias[o] += row[o];
    }
    if (!dx)
        return;
    for (size_t i = 0; i < in; i++) /* w^T, so dx's kernel runs along rows */
        for (size_t o = 0; o < out; o++)
            wt[o * in + i] = w[i * out + o];
    memset(dx, 0, batch * in * sizeof *dx);
    dlrm_gemm_acc(batch, in, out, dy, out, 1, wt, dx);
}

void dlrm_relu_forward(float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

void dlrm_relu_backward(const float *y, float *dy, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

size_t dlrm_interact_width(size_t vectors, size_t dim)
{
    return dim + vectors * (vectors - 1) / 2;
}

static float dot(const float *restrict u, const float *restrict v, size_t dim)
{
    float s = 0.0f;
    for (size_t d = 0; d < dim; d++)
        s += u[d] * v[d];
    return s;
}

void dlrm_interact_forward(const float *z, size_t batch, size_t vectors, size_t dim, float *out)
{
    size_t width = dlrm_interact_width(vectors, dim);
    for (size_t r = 0; r < batch; r++) {
        const float *zr = z + r * vectors * dim;
        float *o = out + r * width;
        memcpy(o, zr, dim * sizeof *o);
        size_t p = dim;
        for (size_t i = 0; i < vectors; i++)
            for (size_t j = i + 1; j < vectors; j++)
                o[p++] = dot(zr + i * dim, zr + j * dim, dim);
    }
}

void dlrm_interact_backward(const float *z, const float *dout, size_t batch, size_t vectors,
                            size_t dim, float *dz)
{
    size_t width = dlrm_interact_width(vectors, dim);
    memset(dz, 0, batch * vectors * dim * sizeof *dz);
    for (size_t r = 0; r < batch; r++) {
        const float *zr = z + r * vectors * dim, *g = dout + r * width;
        float *dzr = dz + r * vectors * dim;
        memcpy(dzr, g, dim * sizeof *dzr); /* the copied bottom vector */
        size_t p = dim;
        for (size_t i = 0; i < vectors; i++) {
            for (size_t j = i + 1; j < vectors; j++) {
                const float gp = g[p++];
                float *restrict di = dzr + i * dim, *restrict dj = dzr + j * dim;
                const float *zi = zr + i * dim, *zj = zr + j * dim;
                for (size_t d = 0; d < dim; d++) {
                    di[d] += gp * zj[d];
                    dj[d] += gp * zi[d];
                }
            }
        }
    }
}

double dlrm_bce_logits(const float *logit, const float *label, size_t batch, float *dlogit)
{
    double total = 0.0;
    for (size_t r = 0; r < batch; r++) {
        double z = logit[r], y = label[r];
        total += (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
        if (dlogit) {
            double p = z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
            dlogit[r] = (float)((p - y) / (double)batch);
        }
    }
    return batch ? total / (double)batch : 0.0;
}
