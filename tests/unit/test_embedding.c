/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPU embedding tables, the training half: configuration validation and
 * defaults, policy names, shard geometry, forward and backward against a
 * naive double-precision reference (every optimizer, both poolings, empty
 * bags, repeated rows), rejection of bad batches with nothing changed, and
 * the gather/apply round trip. Trackers, selection and the save protocol are
 * in test_embedding_track.c. Weights are read through the public API only
 * (a FULL save per shard, gathered, then aborted).
 */
#include "emb_testlib.h"

#include "cpr/codec.h"

/* ---- configuration --------------------------------------------------------- */

static void expect_bad_config(const cpr_emb_config *c, const char *what)
{
    cpr_emb *sentinel = (cpr_emb *)(uintptr_t)0x1234;
    cpr_emb *t = sentinel;
    cpr_status st = cpr_emb_create(c, &t);
    if (st != CPR_INVALID_ARGUMENT)
        fail_msg("config with %s: got %s, want CPR_INVALID_ARGUMENT", what,
                 cpr_status_name(st));
    assert_ptr_equal(t, sentinel); /* out written only on success */
    assert_true(strlen(cpr_errmsg()) > 0);
}

static void test_config_invalid(void **unused)
{
    (void)unused;
    const cpr_emb_config base = {.rows = 100, .dim = 8};
    cpr_emb_config c;

    c = base, c.rows = 0, expect_bad_config(&c, "rows 0");
    c = base, c.dim = 0, expect_bad_config(&c, "dim 0");
    c = base, c.dim = 5000, expect_bad_config(&c, "dim 5000");
    c = base, c.dim = 4097, expect_bad_config(&c, "dim 4097");
    c = base, c.optimizer = (cpr_optimizer)3, expect_bad_config(&c, "optimizer 3");
    c = base, c.optimizer = (cpr_optimizer)-1, expect_bad_config(&c, "optimizer -1");
    c = base, c.ssu_rate = -0.01, expect_bad_config(&c, "ssu_rate -0.01");
    c = base, c.ssu_rate = 1.0001, expect_bad_config(&c, "ssu_rate 1.0001");
    c = base, c.ssu_rate = NAN, expect_bad_config(&c, "ssu_rate NaN");
    c = base, c.scheme = (cpr_shard_scheme)2, expect_bad_config(&c, "scheme 2");
    c = base, c.device = (cpr_device_kind)7, expect_bad_config(&c, "device 7");
    expect_bad_config(NULL, "NULL config");

    /* Edges that are valid: dim 1 and 4096, rows 1, ssu_rate exactly 1. */
    const uint32_t dims[] = {1, 4096};
    for (size_t i = 0; i < 2; i++) {
        c = base, c.dim = dims[i];
        cpr_emb_destroy(tl_create(&c));
    }
    c = base, c.rows = 1, cpr_emb_destroy(tl_create(&c));
    c = base, c.ssu_rate = 1.0, c.track = CPR_TRACK_SSU, cpr_emb_destroy(tl_create(&c));
    /* num_shards 0 is a zero field and so takes the default, 1 shard. */
    c = base, c.num_shards = 0;
    cpr_emb *t = tl_create(&c);
    assert_int_equal(cpr_emb_num_shards(t), 1);
    cpr_emb_destroy(t);
    cpr_emb_destroy(NULL);
}

/* Only rows and dim set: 1 RANGE shard on the CPU, SGD with lr 0.01,
 * weights in [-1/sqrt(rows), 1/sqrt(rows)], deterministic per seed. */
static void test_config_defaults(void **unused)
{
    (void)unused;
    const uint64_t rows = 1000;
    const uint32_t dim = 4;
    cpr_emb_config c = {.rows = rows, .dim = dim};
    cpr_emb *t = tl_create(&c);
    assert_int_equal(cpr_emb_rows(t), rows);
    assert_int_equal(cpr_emb_dim(t), dim);
    assert_int_equal(cpr_emb_state_dim(t), 0);
    assert_int_equal(cpr_emb_num_shards(t), 1);
    assert_int_equal(cpr_emb_device(t), CPR_DEVICE_CPU);
    assert_int_equal(cpr_emb_shard_rows(t, 0), rows);

    float *w = tl_calloc(rows * dim, sizeof *w), *w2 = tl_calloc(rows * dim, sizeof *w2);
    tl_read_all(t, w, NULL);
    double scale = 1.0 / sqrt((double)rows), sum_abs = 0;
    for (size_t i = 0; i < rows * dim; i++) {
        assert_true(fabsf(w[i]) <= (float)scale * 1.0000001f);
        sum_abs += fabs((double)w[i]);
    }
    /* U(-s, s) has mean |w| = s/2; 4000 samples land well inside 0.4s..0.6s. */
    assert_true(sum_abs / (double)(rows * dim) > 0.4 * scale);
    assert_true(sum_abs / (double)(rows * dim) < 0.6 * scale);

    cpr_emb *same = tl_create(&c);
    tl_read_all(same, w2, NULL);
    assert_memory_equal(w, w2, rows * dim * sizeof *w);
    cpr_emb_destroy(same);
    c.seed = 42;
    cpr_emb *other = tl_create(&c);
    tl_read_all(other, w2, NULL);
    assert_memory_not_equal(w, w2, rows * dim * sizeof *w);
    cpr_emb_destroy(other);

    /* Default learning rate: one SGD step on row 5 is w - 0.01 g. */
    const int64_t idx[] = {5}, off[] = {0};
    const float g[] = {1.0f, -2.0f, 0.5f, 4.0f};
    assert_status(CPR_OK, cpr_emb_backward(t, idx, 1, off, 1, CPR_POOL_SUM, g));
    tl_read_all(t, w2, NULL);
    for (uint32_t j = 0; j < dim; j++)
        assert_float_equal(w2[5 * dim + j], w[5 * dim + j] - 0.01f * g[j], 1e-6);
    assert_memory_equal(w2, w, 5 * dim * sizeof *w);
    /* No trackers by default: selection by a tracker is refused. */
    uint64_t id;
    size_t n = 7;
    assert_status(CPR_FAILED_PRECONDITION,
                  cpr_emb_select(t, 0, CPR_POLICY_MFU, tl_rows_budget(1), &id, 1, &n));
    assert_int_equal(n, 7);
    cpr_emb_destroy(t);
    free(w);
    free(w2);
}

/* Default SSU capacity rows/shards/8 + 1 per shard (ssu_rate 1 samples every
 * access); default ssu_rate 0.01 within 5 sigma of its binomial mean. */
static void test_config_ssu_defaults(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 1000, .dim = 2, .num_shards = 4, .scheme = CPR_SHARD_MODULO,
                        .track = CPR_TRACK_SSU, .ssu_rate = 1.0};
    cpr_emb *t = tl_create(&c);
    int64_t *idx = tl_calloc(1000, sizeof *idx), off = 0;
    float g[2] = {0.5f, 0.5f};
    for (int64_t i = 0; i < 1000; i++)
        idx[i] = i;
    assert_status(CPR_OK, cpr_emb_backward(t, idx, 1000, &off, 1, CPR_POOL_SUM, g));
    for (uint32_t s = 0; s < 4; s++)
        assert_int_equal(tl_stats(t, s).sampled_rows, 1000 / 4 / 8 + 1);
    cpr_emb_destroy(t);
    free(idx);

    const size_t n = 20000;
    cpr_emb_config d = {.rows = 100000, .dim = 1, .track = CPR_TRACK_SSU, .seed = 7};
    t = tl_create(&d);
    idx = tl_calloc(n, sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = (int64_t)(i * 5);
    assert_status(CPR_OK, cpr_emb_backward(t, idx, n, &off, 1, CPR_POOL_SUM, g));
    double mean = 0.01 * (double)n, sigma = sqrt((double)n * 0.01 * 0.99);
    double sampled = (double)tl_stats(t, 0).sampled_rows;
    if (fabs(sampled - mean) > 5 * sigma)
        fail_msg("default ssu_rate: %.0f of %zu accesses sampled, want %.0f +- %.0f", sampled,
                 n, mean, 5 * sigma);
    cpr_emb_destroy(t);
    free(idx);
}

static void test_policy_names_and_tracker_bytes(void **unused)
{
    (void)unused;
    static const char *const names[] = {"full", "delta", "mfu", "ssu", "topk-norm"};
    for (int p = 0; p < 5; p++) {
        assert_string_equal(cpr_policy_name((cpr_policy)p), names[p]);
        cpr_policy got = CPR_POLICY_FULL, again = CPR_POLICY_FULL;
        assert_int_equal(cpr_policy_parse(names[p], &got), CPR_OK);
        assert_int_equal(got, p);
        assert_int_equal(cpr_policy_parse(cpr_policy_name((cpr_policy)p), &again), CPR_OK);
        assert_int_equal(again, p);
    }
    assert_int_equal(cpr_policy_parse("lru", NULL), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_policy_parse("", NULL), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_policy_parse("ful", NULL), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_policy_parse("fullx", NULL), CPR_INVALID_ARGUMENT);
    assert_non_null(strstr(cpr_errmsg(), "topk-norm"));

    assert_true(cpr_emb_tracker_bytes_per_row(0) == 0.0);
    const unsigned bits[] = {CPR_TRACK_COUNTS, CPR_TRACK_DIRTY, CPR_TRACK_SSU, CPR_TRACK_NORM};
    double sum = 0;
    for (size_t i = 0; i < 4; i++) {
        double b = cpr_emb_tracker_bytes_per_row(bits[i]);
        assert_true(b > 0);
        assert_true(cpr_emb_tracker_bytes_per_row(CPR_TRACK_ALL) >= b);
        sum += b;
    }
    assert_float_equal(cpr_emb_tracker_bytes_per_row(CPR_TRACK_ALL), sum, 1e-9);
}

/* ---- shard geometry --------------------------------------------------------- */

static void check_geometry(uint64_t rows, uint32_t shards, cpr_shard_scheme scheme)
{
    cpr_emb_config c = {.rows = rows, .dim = 1, .num_shards = shards, .scheme = scheme};
    cpr_emb *t = tl_create(&c);
    uint64_t per = (rows + shards - 1) / shards, total = 0;
    uint64_t *owned = tl_calloc(shards, sizeof *owned);
    unsigned char *seen = tl_calloc(rows, 1);
    assert_int_equal(cpr_emb_num_shards(t), shards);
    for (uint64_t r = 0; r < rows; r++) {
        uint32_t s = cpr_emb_shard_of(t, r);
        assert_true(s < shards);
        assert_int_equal(s, scheme == CPR_SHARD_RANGE ? r / per : r % shards);
        owned[s]++;
    }
    for (uint32_t s = 0; s < shards; s++) {
        assert_int_equal(cpr_emb_shard_rows(t, s), owned[s]);
        total += cpr_emb_shard_rows(t, s);
        size_t n;
        uint64_t *ids = tl_select(t, s, CPR_POLICY_FULL, tl_rows_budget(1), &n);
        assert_int_equal(n, owned[s]); /* tl_select checks ownership and order */
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(seen[ids[i]], 0);
            seen[ids[i]] = 1;
        }
        free(ids);
    }
    assert_int_equal(total, rows);
    for (uint64_t r = 0; r < rows; r++)
        assert_int_equal(seen[r], 1); /* every row in exactly one shard */
    free(seen);
    free(owned);
    cpr_emb_destroy(t);
}

static void test_shard_geometry(void **unused)
{
    (void)unused;
    const struct { uint64_t rows; uint32_t shards; } cases[] = {
        {10, 3}, {10, 4}, {1001, 7}, {5, 5}, {1, 1}, {1000, 8}, {999, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_geometry(cases[i].rows, cases[i].shards, CPR_SHARD_RANGE);
        check_geometry(cases[i].rows, cases[i].shards, CPR_SHARD_MODULO);
    }
    /* Spot values from the header's definitions. */
    cpr_emb_config c = {.rows = 10, .dim = 1, .num_shards = 3};
    cpr_emb *t = tl_create(&c);
    assert_int_equal(cpr_emb_shard_rows(t, 0), 4);
    assert_int_equal(cpr_emb_shard_rows(t, 2), 2);
    assert_int_equal(cpr_emb_shard_of(t, 9), 2);
    cpr_emb_destroy(t);
    c.scheme = CPR_SHARD_MODULO;
    t = tl_create(&c);
    assert_int_equal(cpr_emb_shard_rows(t, 0), 4);
    assert_int_equal(cpr_emb_shard_rows(t, 2), 3);
    assert_int_equal(cpr_emb_shard_of(t, 9), 0);
    cpr_emb_destroy(t);
}

/* ---- forward ------------------------------------------------------------------ */

static void check_forward(cpr_emb *t, const tl_batch *b, cpr_pooling pooling, const float *w)
{
    uint32_t dim = cpr_emb_dim(t);
    float *out = tl_calloc(b->n_bags * dim, sizeof *out);
    double *want = tl_calloc(b->n_bags * dim, sizeof *want);
    assert_status(CPR_OK, cpr_emb_forward(t, b->idx, b->n_idx, b->off, b->n_bags, pooling, out));
    tl_ref_forward(w, dim, b, pooling, want);
    tl_assert_close(out, want, b->n_bags * dim, 1e-5, 1e-6, "forward out");
    for (size_t bag = 0; bag < b->n_bags; bag++)
        if (tl_bag_end(b, bag) == (size_t)b->off[bag])
            for (uint32_t j = 0; j < dim; j++)
                assert_true(out[bag * dim + j] == 0.0f); /* empty bag: zeros */
    free(want);
    free(out);
}

static void test_forward_reference(void **unused)
{
    (void)unused;
    const uint64_t rows = 300;
    const uint32_t dim = 7;
    const uint32_t shards[] = {1, 3};
    for (size_t k = 0; k < 2; k++) {
        cpr_emb_config c = {.rows = rows, .dim = dim, .num_shards = shards[k], .seed = 3,
                            .scheme = CPR_SHARD_MODULO, .init_scale = 0.5f,
                            .track = CPR_TRACK_ALL};
        cpr_emb *t = tl_create(&c);
        float *w = tl_calloc(rows * dim, sizeof *w);
        tl_read_all(t, w, NULL);
        cpr_emb_stats before = tl_stats(t, 0);

        /* Bags: [], [3 3 3 7], [], [1], [299] */
        int64_t idx[] = {3, 3, 3, 7, 1, 299}, off[] = {0, 0, 4, 4, 5};
        tl_batch hand = {.idx = idx, .n_idx = 6, .off = off, .n_bags = 5};
        for (int p = 0; p < 2; p++)
            check_forward(t, &hand, (cpr_pooling)p, w);
        tl_rng rng = {.s = 11 + k};
        for (int round = 0; round < 20; round++) {
            tl_batch b;
            tl_batch_random(&b, &rng, rows, dim, 1 + tl_below(&rng, 64), 12, 2.0);
            check_forward(t, &b, (cpr_pooling)(round & 1), w);
            tl_batch_free(&b);
        }
        /* Forward neither changes weights nor trackers. */
        float *w2 = tl_calloc(rows * dim, sizeof *w2);
        tl_read_all(t, w2, NULL);
        assert_memory_equal(w, w2, rows * dim * sizeof *w);
        cpr_emb_stats after = tl_stats(t, 0);
        assert_memory_equal(&before, &after, sizeof before);
        free(w2);
        free(w);
        cpr_emb_destroy(t);
    }
}

/* Each bad batch is refused by forward (output untouched) and by backward
 * (weights, state and trackers untouched). */
static void test_bad_batches(void **unused)
{
    (void)unused;
    const uint64_t rows = 50;
    const uint32_t dim = 3;
    cpr_emb_config c = {.rows = rows, .dim = dim, .num_shards = 2, .track = CPR_TRACK_ALL,
                        .optimizer = CPR_OPT_ADAGRAD, .ssu_rate = 1.0};
    cpr_emb *t = tl_create(&c);
    /* Some history so trackers are non-trivial. */
    int64_t warm_idx[] = {1, 2, 30}, warm_off[] = {0};
    float warm_g[3] = {0.1f, 0.2f, 0.3f};
    assert_status(CPR_OK, cpr_emb_backward(t, warm_idx, 3, warm_off, 1, CPR_POOL_SUM, warm_g));

    struct bad {
        const char *what;
        int64_t idx[4];
        size_t n_idx;
        int64_t off[3];
        size_t n_bags;
    } cases[] = {
        {"negative index", {1, 2, -1}, 3, {0, 1}, 2},
        {"index == rows", {4, (int64_t)rows}, 2, {0, 1}, 2},
        {"index far past rows", {0, 5, 6, INT64_MAX}, 4, {0, 2}, 2},
        {"index INT64_MIN", {INT64_MIN}, 1, {0}, 1},
        {"decreasing offsets", {1, 2, 3}, 3, {0, 2, 1}, 3},
        {"offset past n_indices", {1, 2, 3}, 3, {0, 4}, 2},
        {"first offset past n_indices", {1, 2}, 2, {3}, 1},
        {"negative offset", {1, 2, 3}, 3, {-1, 2}, 2},
    };
    float *w0 = tl_calloc(rows * dim, sizeof *w0), *s0 = tl_calloc(rows * dim, sizeof *s0);
    float *w1 = tl_calloc(rows * dim, sizeof *w1), *s1 = tl_calloc(rows * dim, sizeof *s1);
    tl_read_all(t, w0, s0);
    cpr_emb_stats st0[2] = {tl_stats(t, 0), tl_stats(t, 1)};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct bad *k = &cases[i];
        float out[3 * 3], sentinel[3 * 3], grad[3 * 3];
        memset(out, 0x5a, sizeof out);
        memcpy(sentinel, out, sizeof out);
        for (size_t j = 0; j < 9; j++)
            grad[j] = 1.0f + (float)j;
        for (int p = 0; p < 2; p++) {
            cpr_status st = cpr_emb_forward(t, k->idx, k->n_idx, k->off, k->n_bags,
                                            (cpr_pooling)p, out);
            if (st != CPR_INVALID_ARGUMENT)
                fail_msg("forward with %s: got %s, want CPR_INVALID_ARGUMENT", k->what,
                         cpr_status_name(st));
            assert_memory_equal(out, sentinel, sizeof out);
            st = cpr_emb_backward(t, k->idx, k->n_idx, k->off, k->n_bags, (cpr_pooling)p, grad);
            if (st != CPR_INVALID_ARGUMENT)
                fail_msg("backward with %s: got %s, want CPR_INVALID_ARGUMENT", k->what,
                         cpr_status_name(st));
        }
        tl_read_all(t, w1, s1);
        assert_memory_equal(w0, w1, rows * dim * sizeof *w0);
        assert_memory_equal(s0, s1, rows * dim * sizeof *s0);
        for (uint32_t s = 0; s < 2; s++) {
            cpr_emb_stats now = tl_stats(t, s);
            assert_memory_equal(&now, &st0[s], sizeof now);
        }
    }
    /* Bad pooling is refused too. */
    int64_t idx[] = {1}, off[] = {0};
    float out[3];
    assert_status(CPR_INVALID_ARGUMENT,
                  cpr_emb_forward(t, idx, 1, off, 1, (cpr_pooling)2, out));
    free(w0), free(s0), free(w1), free(s1);
    cpr_emb_destroy(t);
}

/* ---- backward ------------------------------------------------------------------ */

/* Several random batches with hot (repeated) rows; after each, every row must
 * match one reference step from the previous state; untouched rows exactly. */
static void check_backward(cpr_optimizer opt, cpr_pooling pooling, uint32_t shards,
                           uint32_t dim)
{
    const uint64_t rows = 257;
    const float lr = 0.05f;
    cpr_emb_config c = {.rows = rows, .dim = dim, .optimizer = opt, .learning_rate = lr,
                        .init_scale = 0.5f, .num_shards = shards, .scheme = CPR_SHARD_MODULO,
                        .seed = 5, .track = CPR_TRACK_ALL};
    cpr_emb *t = tl_create(&c);
    uint32_t sd = cpr_emb_state_dim(t);
    assert_int_equal(sd, opt == CPR_OPT_SGD ? 0 : opt == CPR_OPT_ROWWISE_ADAGRAD ? 1 : dim);
    size_t nw = rows * dim, ns = rows * (sd ? sd : 1);
    float *w = tl_calloc(nw, sizeof *w), *st = tl_calloc(ns, sizeof *st);
    float *gw = tl_calloc(nw, sizeof *gw), *gst = tl_calloc(ns, sizeof *gst);
    double *G = tl_calloc(nw, sizeof *G), *wantw = tl_calloc(nw, sizeof *wantw);
    double *wants = tl_calloc(ns, sizeof *wants);
    uint64_t *occ = tl_calloc(rows, sizeof *occ);
    tl_read_all(t, w, sd ? st : NULL);
    for (size_t i = 0; i < ns && sd; i++)
        assert_true(st[i] == 0.0f); /* state starts at 0 */
    tl_rng rng = {.s = 100 + opt * 10 + pooling};
    for (int round = 0; round < 6; round++) {
        tl_batch b;
        tl_batch_random(&b, &rng, rows, dim, 1 + tl_below(&rng, 40), 10, 3.0);
        assert_status(CPR_OK,
                      cpr_emb_backward(t, b.idx, b.n_idx, b.off, b.n_bags, pooling, b.grad));
        tl_ref_row_grads(&b, rows, dim, pooling, G, occ);
        float *prev_w = tl_calloc(nw, sizeof *prev_w);
        memcpy(prev_w, w, nw * sizeof *w);
        tl_ref_step(opt, lr, c.eps ? c.eps : 1e-8, rows, dim, G, occ, w, st);
        tl_read_all(t, gw, sd ? gst : NULL);
        for (size_t i = 0; i < nw; i++)
            wantw[i] = w[i];
        for (size_t i = 0; i < ns; i++)
            wants[i] = st[i];
        tl_assert_close(gw, wantw, nw, 1e-5, 1e-6, "weights after backward");
        if (sd)
            tl_assert_close(gst, wants, ns, 1e-5, 1e-9, "optimizer state after backward");
        for (uint64_t r = 0; r < rows; r++)
            if (!occ[r])
                assert_memory_equal(gw + r * dim, prev_w + r * dim, dim * sizeof *gw);
        /* Continue from the table's own values so rounding never accumulates. */
        memcpy(w, gw, nw * sizeof *w);
        memcpy(st, gst, ns * sizeof *st);
        free(prev_w);
        tl_batch_free(&b);
    }
    free(occ), free(wants), free(wantw), free(G), free(gst), free(gw), free(st), free(w);
    cpr_emb_destroy(t);
}

static void test_backward_sgd(void **unused)
{
    (void)unused;
    for (int p = 0; p < 2; p++) {
        check_backward(CPR_OPT_SGD, (cpr_pooling)p, 1, 8);
        check_backward(CPR_OPT_SGD, (cpr_pooling)p, 3, 5);
    }
}

static void test_backward_rowwise_adagrad(void **unused)
{
    (void)unused;
    for (int p = 0; p < 2; p++) {
        check_backward(CPR_OPT_ROWWISE_ADAGRAD, (cpr_pooling)p, 1, 8);
        check_backward(CPR_OPT_ROWWISE_ADAGRAD, (cpr_pooling)p, 3, 1);
    }
}

static void test_backward_adagrad(void **unused)
{
    (void)unused;
    for (int p = 0; p < 2; p++) {
        check_backward(CPR_OPT_ADAGRAD, (cpr_pooling)p, 1, 8);
        check_backward(CPR_OPT_ADAGRAD, (cpr_pooling)p, 4, 3);
    }
}

/* The one-step-per-row rule by hand: Adagrad with row 2 twice in one call
 * takes one step with G = g1 + g2 (per-occurrence steps would differ). */
static void test_backward_repeats_one_step(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 4, .dim = 1, .optimizer = CPR_OPT_ADAGRAD,
                        .learning_rate = 0.1f, .init_scale = 0.5f};
    cpr_emb *t = tl_create(&c);
    float w0[4], w1[4], s1[4];
    tl_read_all(t, w0, s1);
    int64_t idx[] = {2, 2}, off[] = {0, 1};
    float g[] = {1.0f, 3.0f};
    assert_status(CPR_OK, cpr_emb_backward(t, idx, 2, off, 2, CPR_POOL_SUM, g));
    tl_read_all(t, w1, s1);
    /* G = 4, s = 16, w -= 0.1 * 4 / 4 */
    assert_float_equal(s1[2], 16.0f, 1e-5);
    assert_float_equal(w1[2], w0[2] - 0.1f, 1e-6);
    cpr_emb_destroy(t);
}

/* offsets[0] > 0 is allowed (non-decreasing within [0, n_indices]): the
 * indices before it belong to no bag, so they are neither read by forward
 * nor updated or counted by backward. */
static void test_indices_before_first_offset(void **unused)
{
    (void)unused;
    const uint64_t rows = 10;
    const uint32_t dim = 2;
    cpr_emb_config c = {.rows = rows, .dim = dim, .track = CPR_TRACK_ALL, .ssu_rate = 1.0,
                        .init_scale = 0.5f, .learning_rate = 0.5f};
    cpr_emb *t = tl_create(&c);
    float w0[10 * 2], w1[10 * 2];
    tl_read_all(t, w0, NULL);
    int64_t idx[] = {7, 8, 3, 4}, off[] = {2, 3};
    float out[2 * 2], g[2 * 2] = {1, 2, 3, 4};
    tl_batch b = {.idx = idx, .n_idx = 4, .off = off, .n_bags = 2, .grad = g};
    double want[2 * 2];
    assert_status(CPR_OK, cpr_emb_forward(t, idx, 4, off, 2, CPR_POOL_SUM, out));
    tl_ref_forward(w0, dim, &b, CPR_POOL_SUM, want);
    tl_assert_close(out, want, 4, 1e-6, 1e-7, "forward with offsets[0] = 2");
    assert_status(CPR_OK, cpr_emb_backward(t, idx, 4, off, 2, CPR_POOL_SUM, g));
    tl_read_all(t, w1, NULL);
    for (uint64_t r = 0; r < rows; r++) {
        for (uint32_t j = 0; j < dim; j++) {
            float expect = w0[r * dim + j];
            if (r == 3 || r == 4)
                expect -= 0.5f * g[(r - 3) * dim + j];
            if (fabsf(w1[r * dim + j] - expect) > 1e-6f)
                fail_msg("row %llu[%u] after backward with offsets[0] = 2: got %g, want %g",
                         (unsigned long long)r, j, (double)w1[r * dim + j], (double)expect);
        }
    }
    cpr_emb_stats st = tl_stats(t, 0);
    assert_int_equal(st.update_events, 2);
    assert_int_equal(st.unsaved_events, 2);
    assert_int_equal(st.dirty_rows, 2);
    assert_int_equal(st.sampled_rows, 2);
    cpr_emb_destroy(t);
}

/* ---- gather / apply -------------------------------------------------------------- */

static void test_gather_apply_roundtrip(void **unused)
{
    (void)unused;
    const uint64_t rows = 120;
    const uint32_t dim = 6;
    cpr_emb_config c = {.rows = rows, .dim = dim, .optimizer = CPR_OPT_ADAGRAD,
                        .num_shards = 2, .track = CPR_TRACK_ALL, .ssu_rate = 1.0,
                        .ssu_capacity = rows, .init_scale = 0.3f};
    cpr_emb *t = tl_create(&c);
    tl_rng rng = {.s = 77};
    tl_batch b;
    for (int i = 0; i < 3; i++) {
        tl_batch_random(&b, &rng, rows, dim, 20, 6, 1.0);
        assert_status(CPR_OK, cpr_emb_backward(t, b.idx, b.n_idx, b.off, b.n_bags,
                                               CPR_POOL_SUM, b.grad));
        tl_batch_free(&b);
    }
    /* Rows 60, 63, ... of shard 1 (RANGE: rows 60..119). */
    uint64_t ids[20];
    size_t n = 20;
    for (size_t i = 0; i < n; i++)
        ids[i] = 60 + 3 * i;
    float *v1 = tl_calloc(n * dim, sizeof *v1), *s1 = tl_calloc(n * dim, sizeof *s1);
    float *v2 = tl_calloc(n * dim, sizeof *v2), *s2 = tl_calloc(n * dim, sizeof *s2);
    cpr_emb_save *save = NULL;
    assert_status(CPR_OK, cpr_emb_save_begin(t, 1, CPR_POLICY_MFU, ids, n, &save));
    assert_status(CPR_OK, cpr_emb_gather(t, save, v1, s1));
    assert_status(CPR_OK, cpr_emb_save_commit(t, save));

    /* Perturb every saved row (twice each, one bag per row). */
    int64_t pidx[40], poff[40];
    float pg[40 * 6];
    for (size_t i = 0; i < 40; i++) {
        pidx[i] = (int64_t)ids[i % n];
        poff[i] = (int64_t)i;
    }
    for (size_t i = 0; i < 40 * dim; i++)
        pg[i] = tl_sym(&rng);
    assert_status(CPR_OK, cpr_emb_backward(t, pidx, 40, poff, 40, CPR_POOL_SUM, pg));
    tl_gather_ids(t, 1, CPR_POLICY_MFU, ids, n, v2, s2);
    assert_memory_not_equal(v1, v2, n * dim * sizeof *v1);

    float *all0 = tl_calloc(rows * dim, sizeof *all0), *all1 = tl_calloc(rows * dim, sizeof *all1);
    float *st0 = tl_calloc(rows * dim, sizeof *st0), *st1 = tl_calloc(rows * dim, sizeof *st1);
    tl_read_all(t, all0, st0);
    cpr_emb_stats before = tl_stats(t, 1);

    /* An id outside the table: refused, nothing written. */
    uint64_t bad_ids[2] = {61, rows};
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_apply(t, bad_ids, 2, v1, s1));
    tl_read_all(t, all1, st1);
    assert_memory_equal(all0, all1, rows * dim * sizeof *all0);
    assert_memory_equal(st0, st1, rows * dim * sizeof *st0);

    assert_status(CPR_OK, cpr_emb_apply(t, ids, n, v1, s1));
    tl_gather_ids(t, 1, CPR_POLICY_MFU, ids, n, v2, s2);
    assert_memory_equal(v1, v2, n * dim * sizeof *v1);
    assert_memory_equal(s1, s2, n * dim * sizeof *s1);
    /* Other rows untouched. */
    tl_read_all(t, all1, st1);
    for (size_t i = 0; i < n; i++) {
        memcpy(all0 + ids[i] * dim, v1 + i * dim, dim * sizeof *all0);
        memcpy(st0 + ids[i] * dim, s1 + i * dim, dim * sizeof *st0);
    }
    assert_memory_equal(all0, all1, rows * dim * sizeof *all0);
    assert_memory_equal(st0, st1, rows * dim * sizeof *st0);

    /* Trackers of the applied rows are cleared: the only events since the
     * committed save were the 40 perturbing ones, all on applied rows. */
    cpr_emb_stats after = tl_stats(t, 1);
    assert_int_equal(after.unsaved_events, before.unsaved_events - 40);
    const cpr_policy pol[] = {CPR_POLICY_MFU, CPR_POLICY_DELTA, CPR_POLICY_SSU,
                              CPR_POLICY_TOPK_NORM};
    for (size_t p = 0; p < 4; p++) {
        size_t m;
        uint64_t *sel = tl_select(t, 1, pol[p], tl_rows_budget(rows), &m);
        for (size_t i = 0; i < m; i++)
            for (size_t k = 0; k < n; k++)
                if (sel[i] == ids[k])
                    fail_msg("row %llu selected by %s after apply",
                             (unsigned long long)ids[k], cpr_policy_name(pol[p]));
        free(sel);
    }
    free(all0), free(all1), free(st0), free(st1);
    free(v1), free(s1), free(v2), free(s2);
    cpr_emb_destroy(t);
}

/* cpr_emb_save_copy_encoded on a CPU table: the host codec's bytes of the
 * rows a gather gives, the state as gathered, each codec; refusals. */
static void test_copy_encoded(void **unused)
{
    (void)unused;
    const uint64_t rows = 300;
    const uint32_t dim = 7;
    cpr_emb_config c = {.rows = rows, .dim = dim, .optimizer = CPR_OPT_ROWWISE_ADAGRAD,
                        .track = CPR_TRACK_ALL, .init_scale = 0.4f, .seed = 12};
    cpr_emb *t = tl_create(&c);
    tl_rng rng = {.s = 5};
    tl_batch b;
    tl_batch_random(&b, &rng, rows, dim, 40, 4, 1.0);
    assert_status(CPR_OK, cpr_emb_backward(t, b.idx, b.n_idx, b.off, b.n_bags, CPR_POOL_SUM,
                                           b.grad));
    tl_batch_free(&b);
    size_t n = 0;
    uint64_t *ids = tl_select(t, 0, CPR_POLICY_FULL, tl_rows_budget(rows), &n);
    float *v = tl_calloc(n * dim, sizeof *v), *s = tl_calloc(n, sizeof *s);
    float *got_s = tl_calloc(n, sizeof *got_s);
    for (int codec = CPR_CODEC_F32; codec <= CPR_CODEC_INT4; codec++) {
        size_t rb = cpr_codec_row_bytes((cpr_codec)codec, dim);
        uint8_t *want = tl_calloc(n * rb, 1), *got = tl_calloc(n * rb, 1);
        cpr_emb_save *save = NULL;
        assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_FULL, ids, n, &save));
        assert_status(CPR_OK, cpr_emb_gather(t, save, v, s));
        assert_status(CPR_OK, cpr_codec_encode((cpr_codec)codec, 0, v, n, dim, want));
        assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_fill_encoded(save, 0, n, dim + 1, 1,
                                                                      (cpr_codec)codec, got,
                                                                      got_s));
        assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_copy_encoded(t, save, 0, n,
                                                                      (cpr_codec)7, got, got_s));
        assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_copy_encoded(t, save, 1, n,
                                                                      (cpr_codec)codec, got,
                                                                      got_s));
        assert_status(CPR_OK, cpr_emb_save_copy_encoded(t, save, 0, 100, (cpr_codec)codec, got,
                                                        got_s));
        assert_status(CPR_OK, cpr_emb_save_fill_encoded(save, 100, n - 100, dim, 1,
                                                        (cpr_codec)codec, got + 100 * rb,
                                                        got_s + 100));
        assert_memory_equal(got, want, n * rb);
        assert_memory_equal(got_s, s, n * sizeof *s);
        assert_status(CPR_OK, cpr_emb_save_commit(t, save));
        free(want), free(got);
    }
    free(ids), free(v), free(s), free(got_s);
    cpr_emb_destroy(t);
}

/* Destroy with saves open aborts and frees them (ASan checks the leak). */
static void test_destroy_with_open_saves(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 40, .dim = 2, .num_shards = 2, .track = CPR_TRACK_ALL};
    cpr_emb *t = tl_create(&c);
    uint64_t ids0[] = {0, 5}, ids1[] = {20, 39};
    cpr_emb_save *a = NULL, *b = NULL, *m = NULL;
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_FULL, ids0, 2, &a));
    assert_status(CPR_OK, cpr_emb_save_begin(t, 1, CPR_POLICY_DELTA, ids1, 2, &b));
    assert_status(CPR_OK, cpr_emb_save_begin(t, 1, CPR_POLICY_MFU, ids1, 2, &m));
    assert_int_equal(tl_stats(t, 1).open_saves, 2);
    cpr_emb_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_invalid),
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_config_ssu_defaults),
        cmocka_unit_test(test_policy_names_and_tracker_bytes),
        cmocka_unit_test(test_shard_geometry),
        cmocka_unit_test(test_forward_reference),
        cmocka_unit_test(test_bad_batches),
        cmocka_unit_test(test_backward_sgd),
        cmocka_unit_test(test_backward_rowwise_adagrad),
        cmocka_unit_test(test_backward_adagrad),
        cmocka_unit_test(test_backward_repeats_one_step),
        cmocka_unit_test(test_indices_before_first_offset),
        cmocka_unit_test(test_gather_apply_roundtrip),
        cmocka_unit_test(test_destroy_with_open_saves),
        cmocka_unit_test(test_copy_encoded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
