/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA embedding tables against CPU tables: with the same config (and so the
 * same initial weights and SSU decisions) and the same batches, a CUDA table
 * must give the same forward outputs, weights, optimizer state, tracker
 * statistics and selections as a CPU table, through saves, apply and
 * wipe_shard; bad device-side indices are refused. A save copied out
 * encoded on the device gives the host codec's bytes. Without a CUDA device (or
 * a build without CUDA) creating a CUDA table must fail with CPR_CUDA, and
 * the test exits 77 (skipped).
 */
#include "emb_testlib.h"

#include "cpr/codec.h"
#include "cpr/cuda.h"

#include <pthread.h>

#ifdef CPR_TEST_HAVE_CUDA
#include <cuda_runtime.h>

#define CUDA_OK(expr)                                                          \
    do {                                                                       \
        cudaError_t e_ = (expr);                                               \
        if (e_ != cudaSuccess)                                                 \
            fail_msg("%s: %s", #expr, cudaGetErrorString(e_));                 \
    } while (0)

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes)
        CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

typedef struct pair {
    cpr_emb *cpu, *gpu;
    uint64_t rows;
    uint32_t dim, sd, shards;
} pair;

static void pair_init(pair *p, cpr_emb_config c)
{
    c.device = CPR_DEVICE_CPU;
    p->cpu = tl_create(&c);
    c.device = CPR_DEVICE_CUDA;
    p->gpu = tl_create(&c);
    assert_int_equal(cpr_emb_device(p->gpu), CPR_DEVICE_CUDA);
    p->rows = c.rows;
    p->dim = c.dim;
    p->sd = cpr_emb_state_dim(p->cpu);
    p->shards = cpr_emb_num_shards(p->cpu);
    assert_int_equal(cpr_emb_state_dim(p->gpu), p->sd);
}

static void pair_free(pair *p)
{
    cpr_emb_destroy(p->cpu);
    cpr_emb_destroy(p->gpu);
}

/* Forward on the CUDA table with device copies of the batch. */
static cpr_status gpu_forward(cpr_emb *t, const tl_batch *b, cpr_pooling pooling, float *out)
{
    uint32_t dim = cpr_emb_dim(t);
    int64_t *di = dev_copy(b->idx, b->n_idx * sizeof *b->idx);
    int64_t *dof = dev_copy(b->off, b->n_bags * sizeof *b->off);
    /* The device output starts as a copy of `out`, and comes back whatever
     * the status, so callers can check that a refused call wrote nothing. */
    float *dout = dev_copy(out, b->n_bags * dim * sizeof *out);
    cpr_status st = cpr_emb_forward(t, di, b->n_idx, dof, b->n_bags, pooling, dout);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(out, dout, b->n_bags * dim * sizeof *out, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(di));
    CUDA_OK(cudaFree(dof));
    CUDA_OK(cudaFree(dout));
    return st;
}

static cpr_status gpu_backward(cpr_emb *t, const tl_batch *b, cpr_pooling pooling)
{
    uint32_t dim = cpr_emb_dim(t);
    int64_t *di = dev_copy(b->idx, b->n_idx * sizeof *b->idx);
    int64_t *dof = dev_copy(b->off, b->n_bags * sizeof *b->off);
    float *dg = dev_copy(b->grad, b->n_bags * dim * sizeof *b->grad);
    cpr_status st = cpr_emb_backward(t, di, b->n_idx, dof, b->n_bags, pooling, dg);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFree(di));
    CUDA_OK(cudaFree(dof));
    CUDA_OK(cudaFree(dg));
    return st;
}

static void pair_forward_backward(pair *p, const tl_batch *b, cpr_pooling pooling)
{
    size_t n = b->n_bags * p->dim;
    float *oc = tl_calloc(n, sizeof *oc), *og = tl_calloc(n, sizeof *og);
    assert_status(CPR_OK, cpr_emb_forward(p->cpu, b->idx, b->n_idx, b->off, b->n_bags,
                                          pooling, oc));
    assert_status(CPR_OK, gpu_forward(p->gpu, b, pooling, og));
    tl_assert_close_f(og, oc, n, 1e-4, 1e-5, "CUDA forward vs CPU");
    assert_status(CPR_OK, cpr_emb_backward(p->cpu, b->idx, b->n_idx, b->off, b->n_bags,
                                           pooling, b->grad));
    assert_status(CPR_OK, gpu_backward(p->gpu, b, pooling));
    free(oc);
    free(og);
}

static void compare_weights(pair *p)
{
    size_t nw = p->rows * p->dim, ns = p->rows * (p->sd ? p->sd : 1);
    float *wc = tl_calloc(nw, sizeof *wc), *wg = tl_calloc(nw, sizeof *wg);
    float *sc = tl_calloc(ns, sizeof *sc), *sg = tl_calloc(ns, sizeof *sg);
    tl_read_all(p->cpu, wc, p->sd ? sc : NULL);
    tl_read_all(p->gpu, wg, p->sd ? sg : NULL);
    tl_assert_close_f(wg, wc, nw, 1e-4, 1e-6, "CUDA weights vs CPU");
    if (p->sd)
        tl_assert_close_f(sg, sc, ns, 1e-4, 1e-8, "CUDA optimizer state vs CPU");
    free(wc), free(wg), free(sc), free(sg);
}

/* Same rows, or (for TOPK_NORM, whose float sums may order near-equal norms
 * differently) the same except for at most `slack` rows at the threshold. */
static void compare_select(pair *p, uint32_t shard, cpr_policy policy, uint64_t budget,
                           size_t slack)
{
    size_t nc, ng, common = 0;
    uint64_t *c = tl_select(p->cpu, shard, policy, tl_rows_budget(budget), &nc);
    uint64_t *g = tl_select(p->gpu, shard, policy, tl_rows_budget(budget), &ng);
    if (nc != ng)
        fail_msg("%s shard %u budget %llu: CUDA selects %zu rows, CPU %zu",
                 cpr_policy_name(policy), shard, (unsigned long long)budget, ng, nc);
    for (size_t i = 0, k = 0; i < nc && k < ng;) { /* both ascending */
        if (c[i] == g[k])
            common++, i++, k++;
        else if (c[i] < g[k])
            i++;
        else
            k++;
    }
    if (nc - common > slack)
        fail_msg("%s shard %u budget %llu: %zu of %zu rows differ between CUDA and CPU",
                 cpr_policy_name(policy), shard, (unsigned long long)budget, nc - common, nc);
    free(c);
    free(g);
}

static void compare_trackers(pair *p)
{
    for (uint32_t s = 0; s < p->shards; s++) {
        cpr_emb_stats c = tl_stats(p->cpu, s), g = tl_stats(p->gpu, s);
        assert_int_equal(g.update_events, c.update_events);
        assert_int_equal(g.unsaved_events, c.unsaved_events);
        assert_int_equal(g.dirty_rows, c.dirty_rows);
        assert_int_equal(g.sampled_rows, c.sampled_rows);
        assert_int_equal(g.touched_rows, c.touched_rows);
        assert_int_equal(g.open_saves, c.open_saves);
        const uint64_t budgets[] = {1, 10, 50, p->rows};
        for (size_t i = 0; i < 4; i++) {
            compare_select(p, s, CPR_POLICY_MFU, budgets[i], 0);
            compare_select(p, s, CPR_POLICY_SSU, budgets[i], 0);
            compare_select(p, s, CPR_POLICY_TOPK_NORM, budgets[i], i == 3 ? 0 : 2);
        }
        compare_select(p, s, CPR_POLICY_DELTA, 1, 0);
    }
}

/* One half of a save copied out on a thread of its own (as the client's
 * sender does, through cpr_part_put_deferred). */
typedef struct copier {
    cpr_emb *t;
    cpr_emb_save *save;
    size_t first, k;
    float *values, *state;
    cpr_status st;
} copier;

static void *copy_main(void *arg)
{
    copier *c = arg;
    c->st = cpr_emb_save_copy(c->t, c->save, c->first, c->k, c->values, c->state);
    return NULL;
}

/* Save the same rows on both tables, train on both while the saves are open
 * (when rng is given), then copy both saves out (the CUDA one in two halves
 * on two threads) and commit or abort both. Both are snapshots: the copies
 * are the rows as they were at begin, whatever training did since (G1 in
 * emb_cuda_select.cu; a CUDA copy of the rows as they are now fails here
 * whenever the training batch touched a saved row). */
static void pair_save(pair *p, uint32_t shard, cpr_policy policy, uint64_t budget, int commit,
                      tl_rng *rng)
{
    size_t n;
    uint64_t *ids = tl_select(p->cpu, shard, policy, tl_rows_budget(budget), &n);
    cpr_emb_save *sc = NULL, *sg = NULL;
    assert_status(CPR_OK, cpr_emb_save_begin(p->cpu, shard, policy, ids, n, &sc));
    assert_status(CPR_OK, cpr_emb_save_begin(p->gpu, shard, policy, ids, n, &sg));
    float *vc = tl_calloc(n * p->dim, sizeof *vc), *vg = tl_calloc(n * p->dim, sizeof *vg);
    float *stc = tl_calloc(n * (p->sd ? p->sd : 1), sizeof *stc);
    float *stg = tl_calloc(n * (p->sd ? p->sd : 1), sizeof *stg);
    compare_trackers(p);
    if (rng) {
        tl_batch b;
        tl_batch_random(&b, rng, p->rows, p->dim, 100, 16, 2.0);
        pair_forward_backward(p, &b, CPR_POOL_SUM);
        tl_batch_free(&b);
        compare_trackers(p);
    }
    assert_status(CPR_OK, cpr_emb_gather(p->cpu, sc, vc, p->sd ? stc : NULL));
    copier halves[2];
    pthread_t th[2];
    for (int h = 0; h < 2; h++) {
        size_t first = h ? n / 2 : 0, k = h ? n - n / 2 : n / 2;
        halves[h] = (copier){.t = p->gpu, .save = sg, .first = first, .k = k,
                             .values = vg + first * p->dim,
                             .state = p->sd ? stg + first * p->sd : NULL};
        assert_int_equal(pthread_create(&th[h], NULL, copy_main, &halves[h]), 0);
    }
    for (int h = 0; h < 2; h++) {
        assert_int_equal(pthread_join(th[h], NULL), 0);
        assert_status(CPR_OK, halves[h].st);
    }
    tl_assert_close_f(vg, vc, n * p->dim, 1e-4, 1e-6, "CUDA snapshot values vs CPU");
    if (p->sd)
        tl_assert_close_f(stg, stc, n * p->sd, 1e-4, 1e-6, "CUDA snapshot state vs CPU");
    if (commit) {
        assert_status(CPR_OK, cpr_emb_save_commit(p->cpu, sc));
        assert_status(CPR_OK, cpr_emb_save_commit(p->gpu, sg));
    } else {
        cpr_emb_save_abort(p->cpu, sc);
        cpr_emb_save_abort(p->gpu, sg);
    }
    free(vc), free(vg), free(stc), free(stg), free(ids);
}

static void check_parity(cpr_optimizer opt, uint32_t dim, uint64_t rows)
{
    cpr_emb_config c = {.rows = rows, .dim = dim, .optimizer = opt, .num_shards = 3,
                        .scheme = CPR_SHARD_MODULO, .track = CPR_TRACK_ALL, .ssu_rate = 0.2,
                        .ssu_capacity = 200, .learning_rate = 0.05f, .seed = 17};
    pair p;
    pair_init(&p, c);
    size_t nw = p.rows * dim;
    float *wc = tl_calloc(nw, sizeof *wc), *wg = tl_calloc(nw, sizeof *wg);
    tl_read_all(p.cpu, wc, NULL);
    tl_read_all(p.gpu, wg, NULL);
    assert_memory_equal(wc, wg, nw * sizeof *wc); /* same seed, same initial table */

    tl_rng rng = {.s = 2024 + opt};
    for (int round = 0; round < 8; round++) {
        tl_batch b;
        tl_batch_random(&b, &rng, p.rows, dim, 64 + tl_below(&rng, 200), 16, 3.0);
        pair_forward_backward(&p, &b, (cpr_pooling)(round & 1));
        tl_batch_free(&b);
        compare_weights(&p);
        compare_trackers(&p);
        uint32_t shard = (uint32_t)(round % p.shards);
        if (round % 3 == 0)
            pair_save(&p, shard, CPR_POLICY_MFU, 40, 1, round % 2 ? &rng : NULL);
        else if (round % 3 == 1)
            pair_save(&p, shard, CPR_POLICY_FULL, 1, 0, round % 2 ? &rng : NULL);
        else
            pair_save(&p, shard, CPR_POLICY_SSU, 30, round % 4 != 0, &rng);
        compare_trackers(&p);
    }

    /* gather/apply round trip on both: rows restored exactly, trackers cleared. */
    size_t n;
    uint64_t *ids = tl_select(p.gpu, 1, CPR_POLICY_MFU, tl_rows_budget(100), &n);
    assert_true(n > 0);
    float *v = tl_calloc(n * dim, sizeof *v), *v2 = tl_calloc(n * dim, sizeof *v2);
    float *s = tl_calloc(n * dim, sizeof *s), *s2 = tl_calloc(n * dim, sizeof *s2);
    float *sarg = p.sd ? s : NULL, *s2arg = p.sd ? s2 : NULL;
    tl_gather_ids(p.gpu, 1, CPR_POLICY_MFU, ids, n, v, sarg);
    tl_batch b;
    tl_batch_random(&b, &rng, p.rows, dim, 200, 16, 2.0);
    pair_forward_backward(&p, &b, CPR_POOL_SUM);
    tl_batch_free(&b);
    assert_status(CPR_OK, cpr_emb_apply(p.gpu, ids, n, v, sarg));
    assert_status(CPR_OK, cpr_emb_apply(p.cpu, ids, n, v, sarg));
    tl_gather_ids(p.gpu, 1, CPR_POLICY_MFU, ids, n, v2, s2arg);
    assert_memory_equal(v, v2, n * dim * sizeof *v);
    if (p.sd)
        assert_memory_equal(s, s2, n * p.sd * sizeof *s);
    uint64_t bad[] = {p.rows};
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_apply(p.gpu, bad, 1, v, sarg));
    compare_weights(&p);
    compare_trackers(&p);

    /* Bad device-side indices: refused, nothing changed. */
    int64_t bidx[] = {1, 2, (int64_t)p.rows}, boff[] = {0, 1};
    float *bg = tl_calloc(2 * dim, sizeof *bg), *bout = tl_calloc(2 * dim, sizeof *bout);
    float *sentinel = tl_calloc(2 * dim, sizeof *sentinel);
    tl_batch bb = {.idx = bidx, .n_idx = 3, .off = boff, .n_bags = 2, .grad = bg};
    for (size_t i = 0; i < 2 * dim; i++)
        bout[i] = sentinel[i] = 1234.5f + (float)i;
    assert_status(CPR_INVALID_ARGUMENT, gpu_forward(p.gpu, &bb, CPR_POOL_SUM, bout));
    assert_memory_equal(bout, sentinel, 2 * dim * sizeof *bout); /* output untouched */
    assert_status(CPR_INVALID_ARGUMENT, gpu_backward(p.gpu, &bb, CPR_POOL_SUM));
    bidx[2] = -1;
    assert_status(CPR_INVALID_ARGUMENT, gpu_backward(p.gpu, &bb, CPR_POOL_MEAN));
    bidx[2] = 3, boff[1] = 4;
    assert_status(CPR_INVALID_ARGUMENT, gpu_backward(p.gpu, &bb, CPR_POOL_SUM));
    free(bg), free(bout), free(sentinel);
    compare_weights(&p);
    compare_trackers(&p);
    /* Indices before offsets[0] belong to no bag: both ignore them. */
    tl_batch_random(&b, &rng, p.rows, dim, 50, 8, 2.0);
    if (b.n_idx > 3) {
        b.off[0] = 3;
        for (size_t i = 1; i < b.n_bags; i++)
            if (b.off[i] < 3)
                b.off[i] = 3;
        pair_forward_backward(&p, &b, CPR_POOL_MEAN);
    }
    tl_batch_free(&b);
    compare_weights(&p);
    compare_trackers(&p);
    /* ... and left no trace: later SSU decisions still agree. */
    tl_batch_random(&b, &rng, p.rows, dim, 200, 16, 2.0);
    pair_forward_backward(&p, &b, CPR_POOL_MEAN);
    tl_batch_free(&b);
    compare_weights(&p);
    compare_trackers(&p);

    /* wipe_shard: same lost events, same table afterwards. */
    uint64_t lost_c = 0, lost_g = 1;
    assert_status(CPR_OK, cpr_emb_wipe_shard(p.cpu, 2, &lost_c));
    assert_status(CPR_OK, cpr_emb_wipe_shard(p.gpu, 2, &lost_g));
    assert_int_equal(lost_g, lost_c);
    compare_weights(&p);
    compare_trackers(&p);
    tl_read_all(p.gpu, wg, NULL);
    for (uint64_t r = 2; r < p.rows; r += 3)
        for (uint32_t j = 0; j < dim; j++)
            assert_true(wg[r * dim + j] == 0.0f);

    free(v), free(v2), free(s), free(s2), free(ids), free(wc), free(wg);
    pair_free(&p);
}

/* SSU with every access sampled into a small sample: capacity, age order,
 * saves (committed and aborted, with training while open) and re-sampling
 * of saved rows must play out identically. */
static void test_parity_ssu_small_sample(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 500, .dim = 2, .num_shards = 2, .track = CPR_TRACK_ALL,
                        .ssu_rate = 1.0, .ssu_capacity = 40, .seed = 8};
    pair p;
    pair_init(&p, c);
    tl_rng rng = {.s = 31};
    for (int round = 0; round < 12; round++) {
        tl_batch b;
        tl_batch_random(&b, &rng, p.rows, p.dim, 4 + tl_below(&rng, 8), 4, 1.0);
        pair_forward_backward(&p, &b, CPR_POOL_SUM);
        tl_batch_free(&b);
        compare_trackers(&p);
        pair_save(&p, (uint32_t)(round & 1), CPR_POLICY_SSU, 1 + tl_below(&rng, 10),
                  round % 3 != 0, &rng);
        compare_trackers(&p);
    }
    pair_free(&p);
}

static void test_parity_sgd(void **unused)
{
    (void)unused;
    check_parity(CPR_OPT_SGD, 16, 3001);
    check_parity(CPR_OPT_SGD, 3, 3001);
    check_parity(CPR_OPT_SGD, 33, 1000);
}

static void test_parity_rowwise_adagrad(void **unused)
{
    (void)unused;
    check_parity(CPR_OPT_ROWWISE_ADAGRAD, 32, 3001);
    check_parity(CPR_OPT_ROWWISE_ADAGRAD, 4096, 300);
}

static void test_parity_adagrad(void **unused)
{
    (void)unused;
    check_parity(CPR_OPT_ADAGRAD, 64, 3001);
    check_parity(CPR_OPT_ADAGRAD, 1, 3001);
}
/* A save of `ids` on the CUDA table, copied out encoded in every codec,
 * half the rows at a time: the bytes the host codec gives for the save's
 * f32 rows, the state as gathered (emb_cuda_codec.cu, C1). */
static void check_encoded_save(cpr_emb *t, const uint64_t *ids, size_t n)
{
    uint32_t dim = cpr_emb_dim(t), sd = cpr_emb_state_dim(t);
    float *rows = tl_calloc(n * dim, sizeof *rows), *state = tl_calloc(n * sd + 1, sizeof *state);
    float *got_state = tl_calloc(n * sd + 1, sizeof *got_state);
    for (int c = CPR_CODEC_F32; c <= CPR_CODEC_INT4; c++) {
        size_t rb = cpr_codec_row_bytes((cpr_codec)c, dim);
        uint8_t *want = tl_calloc(n * rb, 1), *got = tl_calloc(n * rb, 1);
        cpr_emb_save *save = NULL;
        assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_MFU, ids, n, &save));
        assert_status(CPR_OK, cpr_emb_gather(t, save, rows, sd ? state : NULL));
        assert_status(CPR_OK, cpr_codec_encode((cpr_codec)c, 0, rows, n, dim, want));
        size_t half = n / 2;
        assert_status(CPR_OK, cpr_emb_save_copy_encoded(t, save, 0, half, (cpr_codec)c, got,
                                                        sd ? got_state : NULL));
        assert_status(CPR_OK, cpr_emb_save_fill_encoded(save, half, n - half, dim, sd,
                                                        (cpr_codec)c, got + half * rb,
                                                        sd ? got_state + half * sd : NULL));
        for (size_t i = 0; i < n; i++)
            if (memcmp(got + i * rb, want + i * rb, rb) != 0)
                fail_msg("dim %u, %s: row %zu (id %llu) encoded on the device differs from "
                         "the host's", dim, cpr_codec_name((cpr_codec)c), i,
                         (unsigned long long)ids[i]);
        assert_memory_equal(got_state, state, n * sd * sizeof *state);
        assert_status(CPR_OK, cpr_emb_save_commit(t, save));
        free(want), free(got);
    }
    free(rows), free(state), free(got_state);
}

/* cpr_emb_save_copy_encoded on a CUDA table: trained rows of several widths
 * (odd ones: unaligned int8 rows, a half-filled last int4 byte), a constant
 * row, a row of subnormals (1 / scale overflows: the divide path), zeros of
 * both signs;
 * then a value beyond f16's range, refused with the host's message. */
static void test_copy_encoded(void **unused)
{
    (void)unused;
    const uint32_t dims[] = {1, 7, 33, 64};
    for (size_t d = 0; d < sizeof dims / sizeof *dims; d++) {
        uint32_t dim = dims[d];
        cpr_emb_config c = {.rows = 3000, .dim = dim, .optimizer = CPR_OPT_ROWWISE_ADAGRAD,
                            .track = CPR_TRACK_ALL, .seed = 5 + d, .init_scale = 0.5f,
                            .device = CPR_DEVICE_CUDA};
        cpr_emb *t = tl_create(&c);
        tl_rng rng = {.s = 91 + d};
        for (int round = 0; round < 4; round++) {
            tl_batch b;
            tl_batch_random(&b, &rng, c.rows, dim, 64, 4, 1.0);
            assert_status(CPR_OK, gpu_backward(t, &b, CPR_POOL_SUM));
            tl_batch_free(&b);
        }
        /* rows 0-2: constant, subnormal, zeros (state: the table's own) */
        uint32_t sd = cpr_emb_state_dim(t);
        uint64_t special[3] = {0, 1, 2};
        float *sv = tl_calloc(3 * dim, sizeof *sv), *ss = tl_calloc(3 * sd + 1, sizeof *ss);
        for (uint32_t j = 0; j < dim; j++) {
            sv[j] = 0.375f;
            sv[dim + j] = (float)(j % 5) * 1e-41f;
            sv[2 * dim + j] = (j % 3) ? -0.0f : 0.0f; /* zeros of both signs (Q4) */
        }
        assert_status(CPR_OK, cpr_emb_apply(t, special, 3, sv, sd ? ss : NULL));
        size_t n = 0;
        uint64_t *ids = tl_select(t, 0, CPR_POLICY_FULL, tl_rows_budget(c.rows), &n);
        assert_int_equal(n, c.rows);
        check_encoded_save(t, ids, n);
        /* beyond f16: refused, naming the row; bf16 holds it */
        sv[0] = 1e5f;
        assert_status(CPR_OK, cpr_emb_apply(t, special, 1, sv, sd ? ss : NULL));
        cpr_emb_save *save = NULL;
        assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_MFU, ids, 4, &save));
        uint8_t enc[4 * 4 * 64];
        float st4[4 * 4];
        assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_copy_encoded(t, save, 0, 4,
                                                                      CPR_CODEC_F16, enc,
                                                                      sd ? st4 : NULL));
        if (!strstr(cpr_errmsg(), "row 0, value 0") || !strstr(cpr_errmsg(), "f16"))
            fail_msg("f16 refusal: %s", cpr_errmsg());
        assert_status(CPR_OK, cpr_emb_save_copy_encoded(t, save, 0, 4, CPR_CODEC_BF16, enc,
                                                        sd ? st4 : NULL));
        /* an unknown codec and a range outside the save */
        assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_copy_encoded(t, save, 0, 4,
                                                                      (cpr_codec)9, enc, st4));
        assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_copy_encoded(t, save, 3, 2,
                                                                      CPR_CODEC_INT8, enc, st4));
        assert_status(CPR_OK, cpr_emb_save_commit(t, save));
        free(ids), free(sv), free(ss);
        cpr_emb_destroy(t);
    }
}
#endif /* CPR_TEST_HAVE_CUDA */

int main(void)
{
    int count = 0;
    if (cpr_cuda_device_count(&count) != CPR_OK) {
        fprintf(stderr, "device query failed: %s\n", cpr_errmsg());
        return 1;
    }
    if (count == 0 || !cpr_cuda_built()) {
        /* The contract without a device: creating a CUDA table says CPR_CUDA. */
        cpr_emb_config c = {.rows = 10, .dim = 2, .device = CPR_DEVICE_CUDA};
        cpr_emb *t = NULL;
        cpr_status st = cpr_emb_create(&c, &t);
        if (st != CPR_CUDA || t != NULL) {
            fprintf(stderr, "CUDA table without a device: got %s, want CPR_CUDA\n",
                    cpr_status_name(st));
            cpr_emb_destroy(t);
            return 1;
        }
        printf("skipped: no CUDA device\n");
        return 77;
    }
#ifdef CPR_TEST_HAVE_CUDA
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_sgd),
        cmocka_unit_test(test_parity_rowwise_adagrad),
        cmocka_unit_test(test_parity_adagrad),
        cmocka_unit_test(test_parity_ssu_small_sample),
        cmocka_unit_test(test_copy_encoded),
    };
    const char *only = getenv("CPR_TEST_FILTER"); /* e.g. one test under compute-sanitizer */
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    printf("skipped: built without CUDA test support\n");
    return 77;
#endif
}
