/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the files of cpr_dlrm: the seeded PRNG (cpr/rng.h: weight
 * init and the loader's shuffle, so that runs repeat exactly), little-endian
 * encoding helpers for the blobs, the MLP (mlp.c) and the model's layout,
 * which model.c owns and dense_io.c serializes.
 */
#ifndef CPR_DLRM_INTERNAL_H
#define CPR_DLRM_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "cpr/rng.h"
#include "dlrm.h"

/* ---- little-endian encoding (the host is little-endian: CMake checks) ---- */

static inline void dlrm_put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline void dlrm_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t dlrm_get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t dlrm_get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- the MLP (mlp.c) ---------------------------------------------------------- */

/*
 * A stack of linear layers, each followed by ReLU except the last unless
 * relu_last. Parameters, gradients and optimizer state are each one array
 * of `params` floats with the same layout (per layer: weights in x out,
 * then out biases), so the optimizer and serialization are single loops.
 */
typedef struct dlrm_mlp {
    uint32_t layers;
    uint32_t width[DLRM_MAX_LAYERS + 1];
    int relu_last;
    size_t params;
    size_t w_off[DLRM_MAX_LAYERS];   /* layer l's weights at params + w_off[l] */
    size_t b_off[DLRM_MAX_LAYERS];   /* and its biases */
    float *param, *grad, *state;     /* state: NULL without Adagrad */
    float *act[DLRM_MAX_LAYERS];     /* output of each layer, max_batch rows */
    float *dact[2];                  /* gradient ping-pong, max_batch x widest */
    float *wt;                       /* transpose scratch, largest in x out */
    size_t max_batch;
} dlrm_mlp;

/* Allocate for `widths` (count >= 2) and initialise the weights from `rng`;
 * on failure nothing is left allocated. */
cpr_status dlrm_mlp_init(dlrm_mlp *mlp, const dlrm_layers *widths, int relu_last,
                         size_t max_batch, int with_state, cpr_rng *rng);
void dlrm_mlp_release(dlrm_mlp *mlp);
/* Output of the last layer (batch x width[layers]) for input x. */
const float *dlrm_mlp_forward(dlrm_mlp *mlp, const float *x, size_t batch);
/* Gradients of the last forward: dy (batch x width[layers], overwritten) is
 * the loss gradient of the output; x is the forward's input; dx receives the
 * input gradient (NULL: not needed). Fills mlp->grad. */
void dlrm_mlp_backward(dlrm_mlp *mlp, const float *x, float *dy, size_t batch, float *dx);
/* One optimizer step with mlp->grad. */
void dlrm_mlp_update(dlrm_mlp *mlp, dlrm_optimizer opt, float lr, float eps);

/* ---- the model (model.c) ----------------------------------------------------------- */

struct dlrm_model {
    dlrm_config cfg;
    dlrm_mlp bottom, top;
    cpr_emb **tables;           /* num_tables */
    uint64_t step;
    size_t vectors;             /* 1 + num_tables: the interaction's inputs */
    size_t inter_width;
    /* Scratch for one batch (max_batch rows). */
    float *emb_out;             /* num_tables x max_batch x dim, table-major */
    float *z;                   /* max_batch x vectors x dim */
    float *inter, *dinter;      /* max_batch x inter_width */
    float *dz;                  /* max_batch x vectors x dim */
    float *demb;                /* num_tables x max_batch x dim */
    float *dbottom;             /* max_batch x dim */
    float *dlogit;              /* max_batch */
    int64_t *offsets;           /* 0, 1, ..., max_batch - 1: one index per bag */
    /* Device copies of a batch, for CUDA tables (NULL otherwise). */
    void *dev_indices, *dev_offsets, *dev_out;
};

#endif /* CPR_DLRM_INTERNAL_H */
