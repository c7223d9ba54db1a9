/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dense math of the DLRM as pure functions on row-major float arrays:
 * linear layers (forward and backward over a blocked matrix kernel), ReLU,
 * the pairwise dot interaction and binary cross-entropy on logits. model.c
 * composes them; tests check each against finite differences. No state, no
 * allocation, no failure: callers size the arrays. Results are a fixed
 * function of the inputs (fixed loop order, no fused multiply-add), so a
 * run repeats bit for bit.
 */
#ifndef CPR_DLRM_OPS_H
#define CPR_DLRM_OPS_H

#include <stddef.h>

/* c (m x n) += a (m x k) . b (k x n), where a's element (i, p) is
 * a[i * a_row + p * a_col] (so a transposed operand needs no copy). */
void dlrm_gemm_acc(size_t m, size_t n, size_t k, const float *a, size_t a_row, size_t a_col,
                   const float *b, float *c);

/* y (batch x out) = x (batch x in) . w (in x out) + bias (out). */
void dlrm_linear_forward(const float *x, size_t batch, size_t in, size_t out, const float *w,
                         const float *bias, float *y);

/*
 * Gradients of a linear layer given dy (batch x out): dw (in x out) =
 * x^T . dy and dbias = column sums of dy, both overwritten; dx (batch x in)
 * = dy . w^T when dx is not NULL (the first layer needs none). `wt` is
 * scratch of in x out floats.
 */
void dlrm_linear_backward(const float *x, const float *dy, size_t batch, size_t in, size_t out,
                          const float *w, float *dw, float *dbias, float *dx, float *wt);

/* y = max(y, 0) in place; backward: dy = 0 where the output y is 0. */
void dlrm_relu_forward(float *y, size_t n);
void dlrm_relu_backward(const float *y, float *dy, size_t n);

/* Width of the interaction's output for `vectors` vectors of `dim`:
 * dim + vectors (vectors - 1) / 2. */
size_t dlrm_interact_width(size_t vectors, size_t dim);

/*
 * z: batch x vectors x dim (vector 0 is the bottom MLP's output, then one
 * per table). out: batch x dlrm_interact_width(): vector 0 copied, then the
 * dot products z_i . z_j for i < j in row-major order of the upper triangle
 * ((0,1), (0,2), ..., (1,2), ...).
 */
void dlrm_interact_forward(const float *z, size_t batch, size_t vectors, size_t dim, float *out);

/* dz (overwritten) from dout: the gradient of the forward above. */
void dlrm_interact_backward(const float *z, const float *dout, size_t batch, size_t vectors,
                            size_t dim, float *dz);

/*
 * Mean binary cross-entropy of sigmoid(logit) against 0/1 labels, computed
 * stably from the logits: max(z, 0) - z y + log(1 + exp(-|z|)). When dlogit
 * is not NULL it receives the gradient (sigmoid(z) - y) / batch.
 */
double dlrm_bce_logits(const float *logit, const float *label, size_t batch, float *dlogit);

#endif /* CPR_DLRM_OPS_H */
