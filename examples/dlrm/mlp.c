/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The MLPs of the DLRM: layer-spec parsing, allocation and seeded
 * initialisation (DLRM's reference scheme: weights N(0, 2/(in+out)), biases
 * N(0, 1/out)), forward and backward over dlrm_ops, and the SGD / Adagrad
 * step. Activations of every layer are kept for the backward pass.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "dlrm_internal.h"
#include "dlrm_ops.h"

cpr_status dlrm_layers_parse(const char *text, dlrm_layers *out)
{
    dlrm_layers l = {0};
    const char *p = text;
    if (!text || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "dlrm_layers_parse needs a text");
    for (;;) {
        char *end = NULL;
        if (*p < '0' || *p > '9')
            return cpr_fail(CPR_INVALID_ARGUMENT, "layers '%s': expected widths like 13-64-16",
                            text);
        errno = 0;
        unsigned long long w = strtoull(p, &end, 10);
        if (errno || w == 0 || w > DLRM_MAX_WIDTH)
            return cpr_fail(CPR_INVALID_ARGUMENT, "layers '%s': a width must be 1 to %u",
                            text, DLRM_MAX_WIDTH);
        if (l.count == DLRM_MAX_LAYERS + 1)
            return cpr_fail(CPR_INVALID_ARGUMENT, "layers '%s': at most %u widths", text,
                            DLRM_MAX_LAYERS + 1);
        l.size[l.count++] = (uint32_t)w;
        if (*end == '\0')
            break;
        if (*end != '-')
            return cpr_fail(CPR_INVALID_ARGUMENT, "layers '%s': expected widths like 13-64-16",
                            text);
        p = end + 1;
    }
    *out = l;
    return CPR_OK;
}

/* Standard normal by Box-Muller (one value per call, so the stream does not
 * depend on call parity). */
static double normal(cpr_rng *rng)
{
    double u1 = cpr_rng_unit(rng), u2 = cpr_rng_unit(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void init_weights(dlrm_mlp *mlp, cpr_rng *rng)
{
    for (uint32_t l = 0; l < mlp->layers; l++) {
        size_t in = mlp->width[l], out = mlp->width[l + 1];
        double w_std = sqrt(2.0 / (double)(in + out)), b_std = sqrt(1.0 / (double)out);
        for (size_t i = 0; i < in * out; i++)
            mlp->param[mlp->w_off[l] + i] = (float)(w_std * normal(rng));
        for (size_t o = 0; o < out; o++)
            mlp->param[mlp->b_off[l] + o] = (float)(b_std * normal(rng));
    }
}

/* Offsets of every layer's weights and biases; the widest layer and the
 * largest weight matrix, for scratch sizes. */
static void layout(dlrm_mlp *mlp, size_t *widest, size_t *largest)
{
    size_t at = 0;
    *widest = 0;
    *largest = 0;
    for (uint32_t l = 0; l < mlp->layers; l++) {
        size_t in = mlp->width[l], out = mlp->width[l + 1];
        mlp->w_off[l] = at;
        mlp->b_off[l] = at + in * out;
        at += in * out + out;
        *largest = in * out > *largest ? in * out : *largest;
        *widest = in > *widest ? in : *widest;
        *widest = out > *widest ? out : *widest;
    }
    mlp->params = at;
}

cpr_status dlrm_mlp_init(dlrm_mlp *mlp, const dlrm_layers *widths, int relu_last,
                         size_t max_batch, int with_state, cpr_rng *rng)
{
    size_t widest, largest;
    int ok = 1;
    memset(mlp, 0, sizeof *mlp);
    if (widths->count < 2 || widths->count > DLRM_MAX_LAYERS + 1)
        return cpr_fail(CPR_INVALID_ARGUMENT, "an MLP needs 2 to %u widths",
                        DLRM_MAX_LAYERS + 1);
    mlp->layers = widths->count - 1;
    memcpy(mlp->width, widths->size, widths->count * sizeof widths->size[0]);
    mlp->relu_last = relu_last;
    mlp->max_batch = max_batch;
    layout(mlp, &widest, &largest);
    mlp->param = calloc(mlp->params, sizeof(float));
    mlp->grad = calloc(mlp->params, sizeof(float));
    if (with_state)
        mlp->state = calloc(mlp->params, sizeof(float));
    ok = mlp->param && mlp->grad && (!with_state || mlp->state);
    for (uint32_t l = 0; ok && l < mlp->layers; l++) {
        mlp->act[l] = malloc(max_batch * mlp->width[l + 1] * sizeof(float));
        ok = mlp->act[l] != NULL;
    }
    for (int i = 0; ok && i < 2; i++) {
        mlp->dact[i] = malloc(max_batch * widest * sizeof(float));
        ok = mlp->dact[i] != NULL;
    }
    mlp->wt = ok ? malloc(largest * sizeof(float)) : NULL;
    if (!mlp->wt) {
        dlrm_mlp_release(mlp);
        return cpr_fail(CPR_NO_MEMORY, "out of memory for an MLP of %zu parameters",
                        mlp->params);
    }
    init_weights(mlp, rng);
    return CPR_OK;
}

void dlrm_mlp_release(dlrm_mlp *mlp)
{
    free(mlp->param);
    free(mlp->grad);
    free(mlp->state);
    for (uint32_t l = 0; l < DLRM_MAX_LAYERS; l++)
        free(mlp->act[l]);
    free(mlp->dact[0]);
    free(mlp->dact[1]);
    free(mlp->wt);
    memset(mlp, 0, sizeof *mlp);
}

static int has_relu(const dlrm_mlp *mlp, uint32_t l)
{
    return l + 1 < mlp->layers || mlp->relu_last;
}

const float *dlrm_mlp_forward(dlrm_mlp *mlp, const float *x, size_t batch)
{
    const float *in = x;
    for (uint32_t l = 0; l < mlp->layers; l++) {
        size_t out = mlp->width[l + 1];
        dlrm_linear_forward(in, batch, mlp->width[l], out, mlp->param + mlp->w_off[l],
                            mlp->param + mlp->b_off[l], mlp->act[l]);
        if (has_relu(mlp, l))
            dlrm_relu_forward(mlp->act[l], batch * out);
        in = mlp->act[l];
    }
    return in;
}

void dlrm_mlp_backward(dlrm_mlp *mlp, const float *x, float *dy, size_t batch, float *dx)
{
    float *g = dy; /* gradient of layer l's output */
    for (uint32_t l = mlp->layers; l-- > 0;) {
        size_t in = mlp->width[l], out = mlp->width[l + 1];
        if (has_relu(mlp, l))
            dlrm_relu_backward(mlp->act[l], g, batch * out);
        /* Ping-pong: layer l's input gradient never lands on its own g. */
        float *g_in = l == 0 ? dx : mlp->dact[l & 1];
        dlrm_linear_backward(l == 0 ? x : mlp->act[l - 1], g, batch, in, out,
                             mlp->param + mlp->w_off[l], mlp->grad + mlp->w_off[l],
                             mlp->grad + mlp->b_off[l], g_in, mlp->wt);
        g = g_in;
    }
}

void dlrm_mlp_update(dlrm_mlp *mlp, dlrm_optimizer opt, float lr, float eps)
{
    float *restrict p = mlp->param;
    const float *restrict g = mlp->grad;
    if (opt == DLRM_OPT_SGD) {
        for (size_t i = 0; i < mlp->params; i++)
            p[i] -= lr * g[i];
        return;
    }
    float *restrict s = mlp->state;
    for (size_t i = 0; i < mlp->params; i++) {
        s[i] += g[i] * g[i];
        p[i] -= lr * g[i] / (sqrtf(s[i]) + eps);
    }
}
