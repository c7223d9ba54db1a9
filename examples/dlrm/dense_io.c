/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dense parameters as one byte string, for checkpoints: the step
 * counter, the MLPs' weights and biases and their Adagrad state.
 * Little-endian, versioned, ending in a CRC32C of everything before it.
 *
 *   0   magic "CPRDLRMD"          8 bytes
 *   8   version (1)               u32
 *   12  optimizer (0 SGD, 1 Adagrad) u32
 *   16  step                      u64
 *   24  bottom widths count Nb    u32
 *   28  top widths count Nt       u32   (the top's input width included)
 *   32  widths                    u32 x (Nb + Nt)
 *   ..  bottom params, top params f32 (per layer: weights in x out, biases)
 *   ..  bottom state, top state   f32, same layout (Adagrad only)
 *   end CRC32C of bytes [0, end)  u32
 *
 * Load checks, in order: length and magic (CPR_CORRUPT), checksum
 * (CPR_CORRUPT), version (CPR_INVALID_ARGUMENT), the header's own sizes
 * against the length (CPR_CORRUPT), then optimizer and widths against the
 * model (CPR_INVALID_ARGUMENT). Nothing is written to the model until all pass.
 */
#include "cpr/crc32c.h"
#include "dlrm_internal.h"

#define DENSE_MAGIC "CPRDLRMD"
#define DENSE_VERSION 1u
#define HEADER_BYTES 32u

static size_t state_floats(const dlrm_model *m)
{
    return m->cfg.optimizer == DLRM_OPT_ADAGRAD ? m->bottom.params + m->top.params : 0;
}

/* Size of a blob with these widths and parameter count. */
static size_t blob_bytes(size_t widths, size_t params, int adagrad)
{
    return HEADER_BYTES + 4 * widths + 4 * params * (adagrad ? 2 : 1) + 4;
}

size_t dlrm_model_dense_bytes(const dlrm_model *m)
{
    return blob_bytes(m->bottom.layers + 1 + m->top.layers + 1,
                      m->bottom.params + m->top.params, m->cfg.optimizer == DLRM_OPT_ADAGRAD);
}

static unsigned char *put_floats(unsigned char *p, const float *v, size_t n)
{
    memcpy(p, v, n * sizeof *v); /* little-endian host */
    return p + n * sizeof *v;
}

cpr_status dlrm_model_dense_save(const dlrm_model *m, void *buf, size_t cap, size_t *len)
{
    size_t need = dlrm_model_dense_bytes(m);
    unsigned char *p = buf;
    if (!buf || cap < need)
        return cpr_fail(CPR_INVALID_ARGUMENT, "the dense blob needs %zu bytes (got %zu)",
                        need, cap);
    memcpy(p, DENSE_MAGIC, 8);
    dlrm_put_u32(p + 8, DENSE_VERSION);
    dlrm_put_u32(p + 12, (uint32_t)m->cfg.optimizer);
    dlrm_put_u64(p + 16, m->step);
    dlrm_put_u32(p + 24, m->bottom.layers + 1);
    dlrm_put_u32(p + 28, m->top.layers + 1);
    p += HEADER_BYTES;
    for (uint32_t i = 0; i <= m->bottom.layers; i++, p += 4)
        dlrm_put_u32(p, m->bottom.width[i]);
    for (uint32_t i = 0; i <= m->top.layers; i++, p += 4)
        dlrm_put_u32(p, m->top.width[i]);
    p = put_floats(p, m->bottom.param, m->bottom.params);
    p = put_floats(p, m->top.param, m->top.params);
    if (state_floats(m)) {
        p = put_floats(p, m->bottom.state, m->bottom.params);
        p = put_floats(p, m->top.state, m->top.params);
    }
    dlrm_put_u32(p, cpr_crc32c(0, buf, need - 4));
    *len = need;
    return CPR_OK;
}

/* Integrity of the blob on its own: magic, checksum, version, sizes. */
static cpr_status check_blob(const unsigned char *p, size_t len)
{
    if (len < HEADER_BYTES + 4 || memcmp(p, DENSE_MAGIC, 8) != 0)
        return cpr_fail(CPR_CORRUPT, "not a DLRM dense blob (%zu bytes, bad magic or too "
                        "short)", len);
    uint32_t want = dlrm_get_u32(p + len - 4), got = cpr_crc32c(0, p, len - 4);
    if (want != got)
        return cpr_fail(CPR_CORRUPT, "DLRM dense blob: checksum %08x, expected %08x", got,
                        want);
    if (dlrm_get_u32(p + 8) != DENSE_VERSION)
        return cpr_fail(CPR_INVALID_ARGUMENT, "DLRM dense blob version %u; this build reads "
                        "version %u", dlrm_get_u32(p + 8), DENSE_VERSION);
    uint32_t nb = dlrm_get_u32(p + 24), nt = dlrm_get_u32(p + 28), opt = dlrm_get_u32(p + 12);
    if (nb < 2 || nt < 2 || nb > DLRM_MAX_LAYERS + 1 || nt > DLRM_MAX_LAYERS + 1 || opt > 1 ||
        len < HEADER_BYTES + 4 * ((size_t)nb + nt) + 4)
        return cpr_fail(CPR_CORRUPT, "DLRM dense blob: impossible header");
    return CPR_OK;
}

/* The blob's widths, optimizer and size match this model. */
static cpr_status check_shape(const dlrm_model *m, const unsigned char *p, size_t len)
{
    uint32_t nb = dlrm_get_u32(p + 24), nt = dlrm_get_u32(p + 28);
    const unsigned char *w = p + HEADER_BYTES;
    int same = nb == m->bottom.layers + 1 && nt == m->top.layers + 1 &&
               dlrm_get_u32(p + 12) == (uint32_t)m->cfg.optimizer;
    for (uint32_t i = 0; same && i < nb; i++)
        same = dlrm_get_u32(w + 4 * i) == m->bottom.width[i];
    for (uint32_t i = 0; same && i < nt; i++)
        same = dlrm_get_u32(w + 4 * (nb + i)) == m->top.width[i];
    if (!same)
        return cpr_fail(CPR_INVALID_ARGUMENT, "DLRM dense blob of another architecture or "
                        "optimizer than this model");
    if (len != dlrm_model_dense_bytes(m))
        return cpr_fail(CPR_CORRUPT, "DLRM dense blob: %zu bytes, its header says %zu", len,
                        dlrm_model_dense_bytes(m));
    return CPR_OK;
}

static const unsigned char *get_floats(const unsigned char *p, float *v, size_t n)
{
    memcpy(v, p, n * sizeof *v);
    return p + n * sizeof *v;
}

cpr_status dlrm_model_dense_load(dlrm_model *m, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    cpr_status st = buf ? check_blob(p, len)
                        : cpr_fail(CPR_INVALID_ARGUMENT, "dlrm_model_dense_load needs a blob");
    if (st == CPR_OK)
        st = check_shape(m, p, len);
    if (st)
        return st;
    m->step = dlrm_get_u64(p + 16);
    p += HEADER_BYTES + 4 * (size_t)(m->bottom.layers + 1 + m->top.layers + 1);
    p = get_floats(p, m->bottom.param, m->bottom.params);
    p = get_floats(p, m->top.param, m->top.params);
    if (state_floats(m)) {
        p = get_floats(p, m->bottom.state, m->bottom.params);
        get_floats(p, m->top.state, m->top.params);
    }
    return CPR_OK;
}
