/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The DLRM model: configuration checks, creation of the MLPs and of one
 * cpr_emb table per categorical feature, and the training step. The forward
 * pass is embedding lookups + bottom MLP -> pairwise dot interaction -> top
 * MLP -> logit; the backward pass runs the same graph in reverse and hands
 * each table its output gradient, so the embedding module applies the sparse
 * update and feeds its checkpoint trackers in one pass. Tables may live on a
 * GPU (cfg.device); the MLPs always run here, so a GPU table's output comes
 * back to the host each step (docs/dlrm.md).
 */
#include <math.h>
#include <stdlib.h>

#include "cpr/cuda.h"
#include "dlrm_internal.h"
#include "dlrm_ops.h"

#define MAX_BATCH_LIMIT (1u << 24)

void dlrm_config_init(dlrm_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->num_tables = CPR_CRITEO_SPARSE;
    cfg->table_rows = 100000;
    cfg->emb_dim = 16;
    cfg->bottom = (dlrm_layers){.count = 3, .size = {CPR_CRITEO_DENSE, 64, 16}};
    cfg->top = (dlrm_layers){.count = 3, .size = {128, 64, 1}};
    cfg->optimizer = DLRM_OPT_ADAGRAD;
    cfg->lr = 0.05f;
    cfg->eps = 1e-8f;
    cfg->emb_optimizer = CPR_OPT_ROWWISE_ADAGRAD;
    cfg->emb_lr = 0.05f;
    cfg->num_shards = 1;
    cfg->shard_scheme = CPR_SHARD_RANGE;
    cfg->device = CPR_DEVICE_CPU;
    cfg->max_batch = 128;
}

/* ---- batches --------------------------------------------------------------------- */

cpr_status dlrm_batch_init(dlrm_batch *batch, size_t cap, uint32_t num_tables)
{
    dlrm_batch b = {.cap = cap, .num_tables = num_tables};
    if (cap == 0 || cap > MAX_BATCH_LIMIT || num_tables == 0 ||
        num_tables > CPR_CRITEO_SPARSE)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a batch needs 1 to %u samples and 1 to %u "
                        "tables", MAX_BATCH_LIMIT, CPR_CRITEO_SPARSE);
    b.dense = malloc(cap * CPR_CRITEO_DENSE * sizeof *b.dense);
    b.indices = malloc(cap * num_tables * sizeof *b.indices);
    b.labels = malloc(cap * sizeof *b.labels);
    if (!b.dense || !b.indices || !b.labels) {
        dlrm_batch_release(&b);
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a batch of %zu", cap);
    }
    *batch = b;
    return CPR_OK;
}

void dlrm_batch_release(dlrm_batch *batch)
{
    free(batch->dense);
    free(batch->indices);
    free(batch->labels);
    memset(batch, 0, sizeof *batch);
}

/* ---- create / destroy -------------------------------------------------------------- */

static cpr_status check_mlps(const dlrm_config *c)
{
    const dlrm_layers *b = &c->bottom, *t = &c->top;
    if (b->count < 2 || b->count > DLRM_MAX_LAYERS + 1 || b->size[0] != CPR_CRITEO_DENSE ||
        b->size[b->count - 1] != c->emb_dim)
        return cpr_fail(CPR_INVALID_ARGUMENT, "bottom MLP: widths must run from %d (the "
                        "dense features) to emb_dim %u, with at most %u layers",
                        CPR_CRITEO_DENSE, c->emb_dim, DLRM_MAX_LAYERS);
    if (t->count < 1 || t->count > DLRM_MAX_LAYERS || t->size[t->count - 1] != 1)
        return cpr_fail(CPR_INVALID_ARGUMENT, "top MLP: widths after the interaction must "
                        "end in 1 (the logit), at most %u layers", DLRM_MAX_LAYERS);
    for (uint32_t i = 0; i < b->count; i++)
        if (b->size[i] == 0 || b->size[i] > DLRM_MAX_WIDTH)
            return cpr_fail(CPR_INVALID_ARGUMENT, "bottom MLP: widths must be 1 to %u",
                            DLRM_MAX_WIDTH);
    for (uint32_t i = 0; i < t->count; i++)
        if (t->size[i] == 0 || t->size[i] > DLRM_MAX_WIDTH)
            return cpr_fail(CPR_INVALID_ARGUMENT, "top MLP: widths must be 1 to %u",
                            DLRM_MAX_WIDTH);
    return CPR_OK;
}

static cpr_status check_config(const dlrm_config *c)
{
    if (c->num_tables == 0 || c->num_tables > CPR_CRITEO_SPARSE)
        return cpr_fail(CPR_INVALID_ARGUMENT, "num_tables must be 1 to %d (got %u)",
                        CPR_CRITEO_SPARSE, c->num_tables);
    if (c->table_rows == 0 || c->emb_dim == 0 || c->emb_dim > 4096)
        return cpr_fail(CPR_INVALID_ARGUMENT, "table_rows must be >= 1 and emb_dim 1 to 4096");
    if (!(c->lr > 0) || !isfinite(c->lr) || !(c->emb_lr > 0) || !isfinite(c->emb_lr) ||
        !(c->eps > 0) || !isfinite(c->eps))
        return cpr_fail(CPR_INVALID_ARGUMENT, "lr, emb_lr and eps must be finite and > 0");
    if ((unsigned)c->optimizer > DLRM_OPT_ADAGRAD)
        return cpr_fail(CPR_INVALID_ARGUMENT, "optimizer %d is not SGD (0) or Adagrad (1)",
                        (int)c->optimizer);
    if (c->max_batch == 0 || c->max_batch > MAX_BATCH_LIMIT)
        return cpr_fail(CPR_INVALID_ARGUMENT, "max_batch must be 1 to %u", MAX_BATCH_LIMIT);
    if (c->num_shards == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "num_shards must be >= 1");
    return check_mlps(c);
}

static cpr_status create_tables(dlrm_model *m)
{
    const dlrm_config *c = &m->cfg;
    m->tables = calloc(c->num_tables, sizeof *m->tables);
    if (!m->tables)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for %u tables", c->num_tables);
    for (uint32_t t = 0; t < c->num_tables; t++) {
        cpr_emb_config ec = {
            .rows = c->table_rows, .dim = c->emb_dim, .optimizer = c->emb_optimizer,
            .learning_rate = c->emb_lr, .eps = c->eps,
            .seed = cpr_mix64(c->seed + 0x9e3779b97f4a7c15ull * (t + 1)),
            .num_shards = c->num_shards, .scheme = c->shard_scheme, .track = c->track,
            .ssu_rate = c->ssu_rate, .ssu_capacity = c->ssu_capacity, .device = c->device,
            .cuda_device = c->cuda_device};
        cpr_status st = cpr_emb_create(&ec, &m->tables[t]);
        if (st)
            return st; /* cpr_emb's message names the problem */
    }
    return CPR_OK;
}

static cpr_status alloc_scratch(dlrm_model *m)
{
    size_t n = m->cfg.max_batch, d = m->cfg.emb_dim, tables = m->cfg.num_tables;
    m->emb_out = malloc(tables * n * d * sizeof(float));
    m->z = malloc(n * m->vectors * d * sizeof(float));
    m->inter = malloc(n * m->inter_width * sizeof(float));
    m->dinter = malloc(n * m->inter_width * sizeof(float));
    m->dz = malloc(n * m->vectors * d * sizeof(float));
    m->demb = malloc(tables * n * d * sizeof(float));
    m->dbottom = malloc(n * d * sizeof(float));
    m->dlogit = malloc(n * sizeof(float));
    m->offsets = malloc(n * sizeof(int64_t));
    if (!m->emb_out || !m->z || !m->inter || !m->dinter || !m->dz || !m->demb ||
        !m->dbottom || !m->dlogit || !m->offsets)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the model's batch buffers");
    for (size_t i = 0; i < n; i++)
        m->offsets[i] = (int64_t)i;
    return CPR_OK;
}

/* Device copies of a batch's indices, the offsets and one table's output. */
static cpr_status alloc_device(dlrm_model *m)
{
    size_t n = m->cfg.max_batch, d = m->cfg.emb_dim;
    int dev = m->cfg.cuda_device;
    cpr_status st = cpr_cuda_alloc(dev, m->cfg.num_tables * n * sizeof(int64_t),
                                   &m->dev_indices);
    if (st == CPR_OK)
        st = cpr_cuda_alloc(dev, n * sizeof(int64_t), &m->dev_offsets);
    if (st == CPR_OK)
        st = cpr_cuda_alloc(dev, n * d * sizeof(float), &m->dev_out);
    if (st == CPR_OK)
        st = cpr_cuda_copy_to_device(m->dev_offsets, m->offsets, n * sizeof(int64_t));
    return st;
}

cpr_status dlrm_model_create(const dlrm_config *cfg, dlrm_model **out)
{
    dlrm_model *m = NULL;
    dlrm_layers top;
    cpr_rng rng;
    cpr_status st = cfg && out ? check_config(cfg)
                               : cpr_fail(CPR_INVALID_ARGUMENT, "dlrm_model_create needs a "
                                          "config");
    if (st)
        return st;
    m = calloc(1, sizeof *m);
    if (!m)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a model");
    m->cfg = *cfg;
    m->vectors = 1 + (size_t)cfg->num_tables;
    m->inter_width = dlrm_interact_width(m->vectors, cfg->emb_dim);
    top.count = cfg->top.count + 1; /* the interaction's width comes first */
    top.size[0] = (uint32_t)m->inter_width;
    memcpy(top.size + 1, cfg->top.size, cfg->top.count * sizeof top.size[0]);
    cpr_rng_seed(&rng, cfg->seed);
    int adagrad = cfg->optimizer == DLRM_OPT_ADAGRAD;
    st = dlrm_mlp_init(&m->bottom, &cfg->bottom, 1, cfg->max_batch, adagrad, &rng);
    if (st == CPR_OK)
        st = dlrm_mlp_init(&m->top, &top, 0, cfg->max_batch, adagrad, &rng);
    if (st == CPR_OK)
        st = alloc_scratch(m);
    if (st == CPR_OK)
        st = create_tables(m);
    if (st == CPR_OK && cfg->device == CPR_DEVICE_CUDA)
        st = alloc_device(m);
    if (st) {
        dlrm_model_destroy(m);
        return st;
    }
    *out = m;
    return CPR_OK;
}

void dlrm_model_destroy(dlrm_model *m)
{
    if (!m)
        return;
    for (uint32_t t = 0; m->tables && t < m->cfg.num_tables; t++)
        cpr_emb_destroy(m->tables[t]);
    free(m->tables);
    dlrm_mlp_release(&m->bottom);
    dlrm_mlp_release(&m->top);
    free(m->emb_out);
    free(m->z);
    free(m->inter);
    free(m->dinter);
    free(m->dz);
    free(m->demb);
    free(m->dbottom);
    free(m->dlogit);
    free(m->offsets);
    cpr_cuda_free(m->dev_indices);
    cpr_cuda_free(m->dev_offsets);
    cpr_cuda_free(m->dev_out);
    free(m);
}

const dlrm_config *dlrm_model_config(const dlrm_model *m) { return &m->cfg; }
uint64_t dlrm_model_step(const dlrm_model *m) { return m->step; }
void dlrm_model_set_step(dlrm_model *m, uint64_t step) { m->step = step; }
uint64_t dlrm_model_dense_params(const dlrm_model *m) { return m->bottom.params + m->top.params; }

cpr_emb *dlrm_model_table(dlrm_model *m, uint32_t t)
{
    return t < m->cfg.num_tables ? m->tables[t] : NULL;
}

/* ---- forward -------------------------------------------------------------------- */

static cpr_status check_batch(const dlrm_model *m, const dlrm_batch *b)
{
    if (!b || b->size == 0 || b->size > m->cfg.max_batch || b->size > b->cap)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a batch must hold 1 to %u samples (got %zu)",
                        m->cfg.max_batch, b ? b->size : 0);
    if (b->num_tables != m->cfg.num_tables)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a batch of %u tables for a model of %u",
                        b->num_tables, m->cfg.num_tables);
    return CPR_OK;
}

/* Table t's lookups for the batch into emb_out (one index per bag). */
static cpr_status embed_table(dlrm_model *m, const dlrm_batch *b, uint32_t t)
{
    size_t n = b->size, d = m->cfg.emb_dim, max = m->cfg.max_batch;
    const int64_t *idx = b->indices + t * b->cap;
    float *out = m->emb_out + t * max * d;
    if (m->cfg.device != CPR_DEVICE_CUDA)
        return cpr_emb_forward(m->tables[t], idx, n, m->offsets, n, CPR_POOL_SUM, out);
    int64_t *dev_idx = (int64_t *)m->dev_indices + t * max;
    cpr_status st = cpr_cuda_copy_to_device(dev_idx, idx, n * sizeof *idx);
    if (st == CPR_OK)
        st = cpr_emb_forward(m->tables[t], dev_idx, n, m->dev_offsets, n, CPR_POOL_SUM,
                             m->dev_out);
    if (st == CPR_OK)
        st = cpr_cuda_copy_to_host(out, m->dev_out, n * d * sizeof *out);
    return st;
}

/* z[r] = (bottom output, table 0's row, table 1's row, ...). */
static void assemble(dlrm_model *m, const float *x0, size_t n)
{
    size_t d = m->cfg.emb_dim, v = m->vectors, max = m->cfg.max_batch;
    for (size_t r = 0; r < n; r++) {
        float *zr = m->z + r * v * d;
        memcpy(zr, x0 + r * d, d * sizeof *zr);
        for (uint32_t t = 0; t < m->cfg.num_tables; t++)
            memcpy(zr + (t + 1) * d, m->emb_out + (t * max + r) * d, d * sizeof *zr);
    }
}

/* The whole forward pass; *logits points into the top MLP's last activation. */
static cpr_status forward(dlrm_model *m, const dlrm_batch *b, const float **logits)
{
    cpr_status st = check_batch(m, b);
    for (uint32_t t = 0; st == CPR_OK && t < m->cfg.num_tables; t++)
        st = embed_table(m, b, t);
    if (st)
        return st;
    const float *x0 = dlrm_mlp_forward(&m->bottom, b->dense, b->size);
    assemble(m, x0, b->size);
    dlrm_interact_forward(m->z, b->size, m->vectors, m->cfg.emb_dim, m->inter);
    *logits = dlrm_mlp_forward(&m->top, m->inter, b->size);
    return CPR_OK;
}

cpr_status dlrm_model_forward(dlrm_model *m, const dlrm_batch *b, float *logits)
{
    const float *out = NULL;
    cpr_status st = forward(m, b, &out);
    if (st == CPR_OK)
        memcpy(logits, out, b->size * sizeof *logits);
    return st;
}

/* ---- backward and update ---------------------------------------------------------- */

/* Gradients of everything from m->dlogit; MLP gradients land in their grad
 * arrays, table gradients in demb. */
static void backward(dlrm_model *m, const dlrm_batch *b)
{
    size_t n = b->size, d = m->cfg.emb_dim, v = m->vectors, max = m->cfg.max_batch;
    dlrm_mlp_backward(&m->top, m->inter, m->dlogit, n, m->dinter);
    dlrm_interact_backward(m->z, m->dinter, n, v, d, m->dz);
    for (size_t r = 0; r < n; r++) {
        const float *dzr = m->dz + r * v * d;
        memcpy(m->dbottom + r * d, dzr, d * sizeof(float));
        for (uint32_t t = 0; t < m->cfg.num_tables; t++)
            memcpy(m->demb + (t * max + r) * d, dzr + (t + 1) * d, d * sizeof(float));
    }
    dlrm_mlp_backward(&m->bottom, b->dense, m->dbottom, n, NULL);
}

static cpr_status update_table(dlrm_model *m, const dlrm_batch *b, uint32_t t)
{
    size_t n = b->size, d = m->cfg.emb_dim, max = m->cfg.max_batch;
    const float *grad = m->demb + t * max * d;
    if (m->cfg.device != CPR_DEVICE_CUDA)
        return cpr_emb_backward(m->tables[t], b->indices + t * b->cap, n, m->offsets, n,
                                CPR_POOL_SUM, grad);
    /* The indices are still on the device from the forward pass. */
    cpr_status st = cpr_cuda_copy_to_device(m->dev_out, grad, n * d * sizeof *grad);
    if (st == CPR_OK)
        st = cpr_emb_backward(m->tables[t], (const int64_t *)m->dev_indices + t * max, n,
                              m->dev_offsets, n, CPR_POOL_SUM, m->dev_out);
    return st;
}

cpr_status dlrm_model_train_step(dlrm_model *m, const dlrm_batch *b, double *loss)
{
    const float *logits = NULL;
    cpr_status st = forward(m, b, &logits);
    if (st)
        return st;
    double batch_loss = dlrm_bce_logits(logits, b->labels, b->size, m->dlogit);
    if (!isfinite(batch_loss))
        return cpr_fail(CPR_FAILED_PRECONDITION, "the loss at step %llu is not finite: "
                        "training diverged (lower the learning rates)",
                        (unsigned long long)m->step + 1);
    backward(m, b);
    dlrm_mlp_update(&m->bottom, m->cfg.optimizer, m->cfg.lr, m->cfg.eps);
    dlrm_mlp_update(&m->top, m->cfg.optimizer, m->cfg.lr, m->cfg.eps);
    for (uint32_t t = 0; st == CPR_OK && t < m->cfg.num_tables; t++)
        st = update_table(m, b, t);
    if (st)
        return st;
    m->step++;
    if (loss)
        *loss = batch_loss;
    return CPR_OK;
}
