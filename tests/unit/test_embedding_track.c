/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPU embedding tables, the checkpointing half: trackers (counts, dirty,
 * norm, SSU sample, per-shard event counters) against a model kept by the
 * test, row selection by each policy and budget, the save protocol (values
 * move to a pending save at begin, are dropped at commit and return exactly
 * at abort), apply clearing trackers, and wipe_shard. Counts are observed
 * through MFU selection at many budgets and through stats; norms through
 * TOPK_NORM selection (SGD tables, where every norm interpretation orders
 * rows the same way).
 */
#include "emb_testlib.h"

/* ---- the model ------------------------------------------------------------ */

typedef struct model {
    cpr_emb *t;
    uint64_t rows;
    uint32_t dim, shards;
    float lr;
    uint64_t *count;          /* live count per row (what MFU ranks) */
    double *norm;             /* live accumulated |lr G|^2 per call */
    unsigned char *dirty;     /* live dirty bit */
    uint64_t *pending_events; /* per shard: counts held by open saves */
    uint64_t *update_events;  /* per shard: every occurrence so far */
    double *G;                /* scratch rows x dim */
    uint64_t *occ;            /* scratch rows */
} model;

typedef struct model_save {
    cpr_emb_save *save;
    uint32_t shard;
    cpr_policy policy;
    size_t n;
    uint64_t *ids, *count;
    double *norm;
    unsigned char *dirty;
} model_save;

static void model_init(model *m, const cpr_emb_config *c)
{
    memset(m, 0, sizeof *m);
    m->t = tl_create(c);
    m->rows = c->rows;
    m->dim = c->dim;
    m->shards = cpr_emb_num_shards(m->t);
    m->lr = c->learning_rate ? c->learning_rate : 0.01f; /* the default */
    m->count = tl_calloc(m->rows, sizeof *m->count);
    m->norm = tl_calloc(m->rows, sizeof *m->norm);
    m->dirty = tl_calloc(m->rows, 1);
    m->pending_events = tl_calloc(m->shards, sizeof *m->pending_events);
    m->update_events = tl_calloc(m->shards, sizeof *m->update_events);
    m->G = tl_calloc(m->rows * m->dim, sizeof *m->G);
    m->occ = tl_calloc(m->rows, sizeof *m->occ);
}

static void model_free(model *m)
{
    cpr_emb_destroy(m->t);
    free(m->count), free(m->norm), free(m->dirty), free(m->pending_events);
    free(m->update_events), free(m->G), free(m->occ);
}

static void model_backward(model *m, const tl_batch *b, cpr_pooling pooling)
{
    assert_status(CPR_OK, cpr_emb_backward(m->t, b->idx, b->n_idx, b->off, b->n_bags, pooling,
                                           b->grad));
    tl_ref_row_grads(b, m->rows, m->dim, pooling, m->G, m->occ);
    for (uint64_t r = 0; r < m->rows; r++) {
        if (!m->occ[r])
            continue;
        double sq = 0;
        for (uint32_t j = 0; j < m->dim; j++)
            sq += m->G[r * m->dim + j] * m->G[r * m->dim + j];
        m->count[r] += m->occ[r];
        m->norm[r] += (double)m->lr * m->lr * sq;
        m->dirty[r] = 1;
        m->update_events[cpr_emb_shard_of(m->t, r)] += m->occ[r];
    }
}

static void model_random_backward(model *m, tl_rng *rng, size_t n_bags, cpr_pooling pooling)
{
    tl_batch b;
    tl_batch_random(&b, rng, m->rows, m->dim, n_bags, 8, 3.0);
    model_backward(m, &b, pooling);
    tl_batch_free(&b);
}

static void model_begin(model *m, model_save *s, uint32_t shard, cpr_policy policy,
                        const uint64_t *ids, size_t n)
{
    s->save = NULL;
    assert_status(CPR_OK, cpr_emb_save_begin(m->t, shard, policy, ids, n, &s->save));
    assert_non_null(s->save);
    s->shard = shard, s->policy = policy, s->n = n;
    s->ids = tl_calloc(n, sizeof *s->ids);
    s->count = tl_calloc(n, sizeof *s->count);
    s->norm = tl_calloc(n, sizeof *s->norm);
    s->dirty = tl_calloc(n, 1);
    memcpy(s->ids, ids, n * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = ids[i];
        s->count[i] = m->count[r], m->count[r] = 0;
        s->norm[i] = m->norm[r], m->norm[r] = 0;
        m->pending_events[shard] += s->count[i];
        if (policy == CPR_POLICY_FULL || policy == CPR_POLICY_DELTA)
            s->dirty[i] = m->dirty[r], m->dirty[r] = 0;
    }
}

static void model_end(model *m, model_save *s, int commit)
{
    if (commit) {
        assert_status(CPR_OK, cpr_emb_save_commit(m->t, s->save));
    } else {
        cpr_emb_save_abort(m->t, s->save);
        for (size_t i = 0; i < s->n; i++) {
            uint64_t r = s->ids[i];
            m->count[r] += s->count[i];
            m->norm[r] += s->norm[i];
            m->dirty[r] |= s->dirty[i];
        }
    }
    for (size_t i = 0; i < s->n; i++)
        m->pending_events[s->shard] -= s->count[i];
    free(s->ids), free(s->count), free(s->norm), free(s->dirty);
    memset(s, 0, sizeof *s);
}

/* Rows of `shard` with non-zero key, ranked by (key desc, id asc). */
static size_t ranked(const model *m, uint32_t shard, const uint64_t *ukey, const double *dkey,
                     uint64_t *out)
{
    size_t n = 0;
    for (uint64_t r = 0; r < m->rows; r++)
        if (cpr_emb_shard_of(m->t, r) == shard && (ukey ? ukey[r] != 0 : dkey[r] != 0))
            out[n++] = r;
    for (size_t i = 1; i < n; i++) { /* insertion sort: small shards */
        uint64_t r = out[i];
        size_t k = i;
        while (k > 0) {
            uint64_t q = out[k - 1];
            int before = ukey ? ukey[r] > ukey[q] : dkey[r] > dkey[q];
            if (!before)
                break;
            out[k] = q;
            k--;
        }
        out[k] = r;
    }
    return n;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* MFU at budget k is exactly the model's top k by count, ties to lower ids. */
static void check_mfu(const model *m, uint32_t shard, uint64_t k)
{
    uint64_t *want = tl_calloc(m->rows, sizeof *want);
    size_t nz = ranked(m, shard, m->count, NULL, want), n;
    size_t expect = k < nz ? (size_t)k : nz;
    qsort(want, expect, sizeof *want, cmp_u64);
    uint64_t *got = tl_select(m->t, shard, CPR_POLICY_MFU, tl_rows_budget(k), &n);
    if (n != expect || memcmp(got, want, n * sizeof *got) != 0) {
        size_t i = 0;
        while (i < n && i < expect && got[i] == want[i])
            i++;
        fail_msg("MFU shard %u budget %llu: got %zu rows, want %zu; first difference at "
                 "%zu: got row %lld (count %llu), want row %lld (count %llu)",
                 shard, (unsigned long long)k, n, expect, i,
                 i < n ? (long long)got[i] : -1LL,
                 i < n ? (unsigned long long)m->count[got[i]] : 0ULL,
                 i < expect ? (long long)want[i] : -1LL,
                 i < expect ? (unsigned long long)m->count[want[i]] : 0ULL);
    }
    free(got);
    free(want);
}

/* TOPK_NORM at budget k: min(k, non-zero) rows with non-zero norm, and no
 * unselected row's norm clearly above a selected one (float accumulation in
 * the table may reorder near-equal norms). */
static void check_topk(const model *m, uint32_t shard, uint64_t k)
{
    uint64_t *rank = tl_calloc(m->rows, sizeof *rank);
    size_t nz = ranked(m, shard, NULL, m->norm, rank), n;
    uint64_t *got = tl_select(m->t, shard, CPR_POLICY_TOPK_NORM, tl_rows_budget(k), &n);
    assert_int_equal(n, k < nz ? k : nz);
    unsigned char *in = tl_calloc(m->rows, 1);
    double min_sel = INFINITY, max_unsel = 0;
    for (size_t i = 0; i < n; i++) {
        if (m->norm[got[i]] == 0)
            fail_msg("TOPK_NORM shard %u selected row %llu with zero norm", shard,
                     (unsigned long long)got[i]);
        in[got[i]] = 1;
        min_sel = fmin(min_sel, m->norm[got[i]]);
    }
    for (size_t i = 0; i < nz; i++)
        if (!in[rank[i]])
            max_unsel = fmax(max_unsel, m->norm[rank[i]]);
    if (max_unsel > min_sel * (1 + 1e-4))
        fail_msg("TOPK_NORM shard %u budget %llu: unselected norm %.9g above selected %.9g",
                 shard, (unsigned long long)k, max_unsel, min_sel);
    free(in), free(got), free(rank);
}

/* Everything observable about one shard's trackers matches the model. */
static void check_shard(const model *m, uint32_t shard, uint64_t open_saves)
{
    uint64_t sum = 0, touched = 0, dirty = 0;
    for (uint64_t r = 0; r < m->rows; r++) {
        if (cpr_emb_shard_of(m->t, r) != shard)
            continue;
        sum += m->count[r];
        touched += m->count[r] != 0;
        dirty += m->dirty[r];
    }
    cpr_emb_stats st = tl_stats(m->t, shard);
    assert_int_equal(st.update_events, m->update_events[shard]);
    assert_int_equal(st.unsaved_events, sum + m->pending_events[shard]);
    uint64_t events = 0, unsaved = 0; /* the O(1) read says the same */
    assert_status(CPR_OK, cpr_emb_events(m->t, shard, &events, &unsaved));
    assert_int_equal(events, st.update_events);
    assert_int_equal(unsaved, st.unsaved_events);
    assert_int_equal(st.touched_rows, touched);
    assert_int_equal(st.dirty_rows, dirty);
    assert_int_equal(st.open_saves, open_saves);

    const uint64_t budgets[] = {1, 2, 3, 5, touched / 2, touched ? touched - 1 : 0, touched,
                                m->rows};
    for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
        if (budgets[i] == 0)
            continue;
        check_mfu(m, shard, budgets[i]);
        check_topk(m, shard, budgets[i]);
    }
    size_t n;
    uint64_t *got = tl_select(m->t, shard, CPR_POLICY_DELTA, tl_rows_budget(1), &n);
    assert_int_equal(n, dirty);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(m->dirty[got[i]], 1);
    free(got);
    /* The SSU sample holds rows used since they were last saved. */
    got = tl_select(m->t, shard, CPR_POLICY_SSU, tl_rows_budget(m->rows), &n);
    assert_int_equal(n, st.sampled_rows);
    for (size_t i = 0; i < n; i++)
        if (m->count[got[i]] == 0)
            fail_msg("SSU shard %u sampled row %llu, which has no count", shard,
                     (unsigned long long)got[i]);
    free(got);
}

static void check_all(const model *m)
{
    for (uint32_t s = 0; s < m->shards; s++)
        check_shard(m, s, 0);
}

/* Commit a one-row MFU save of every counted row of `shard`: each commit
 * must lower unsaved_events by exactly the model's count of that row. */
static void check_counts_exactly(model *m, uint32_t shard)
{
    for (uint64_t r = 0; r < m->rows; r++) {
        if (cpr_emb_shard_of(m->t, r) != shard)
            continue;
        uint64_t before = tl_stats(m->t, shard).unsaved_events, want = m->count[r];
        model_save s;
        model_begin(m, &s, shard, CPR_POLICY_MFU, &r, 1);
        model_end(m, &s, 1);
        uint64_t after = tl_stats(m->t, shard).unsaved_events;
        if (before - after != want)
            fail_msg("row %llu: saving it removed %llu unsaved events, its count is %llu",
                     (unsigned long long)r, (unsigned long long)(before - after),
                     (unsigned long long)want);
    }
}

/* ---- trackers under random training and saves ---------------------------------- */

static void test_trackers_random(void **unused)
{
    (void)unused;
    const uint32_t shard_counts[] = {1, 3};
    const cpr_shard_scheme schemes[] = {CPR_SHARD_RANGE, CPR_SHARD_MODULO};
    for (size_t k = 0; k < 2; k++) {
        cpr_emb_config c = {.rows = 601, .dim = 4, .num_shards = shard_counts[k],
                            .scheme = schemes[k], .track = CPR_TRACK_ALL, .ssu_rate = 0.3,
                            .ssu_capacity = 1000, .learning_rate = 0.1f, .seed = 9 + k};
        model m;
        model_init(&m, &c);
        tl_rng rng = {.s = 1234 + k};
        check_all(&m);
        for (int round = 0; round < 10; round++) {
            model_random_backward(&m, &rng, 30, (cpr_pooling)(round & 1));
            check_all(&m);
            uint32_t shard = (uint32_t)tl_below(&rng, m.shards);
            size_t n;
            model_save s;
            uint64_t *ids;
            switch (round % 5) {
            case 0: /* MFU save of the top 10%, committed after more training */
                ids = tl_select(m.t, shard, CPR_POLICY_MFU, (cpr_budget){.fraction = 0.1}, &n);
                model_begin(&m, &s, shard, CPR_POLICY_MFU, ids, n);
                model_random_backward(&m, &rng, 10, CPR_POOL_SUM);
                check_shard(&m, shard, 1);
                model_end(&m, &s, 1);
                break;
            case 1: /* FULL save, committed */
                ids = tl_select(m.t, shard, CPR_POLICY_FULL, tl_rows_budget(1), &n);
                model_begin(&m, &s, shard, CPR_POLICY_FULL, ids, n);
                check_shard(&m, shard, 1);
                model_end(&m, &s, 1);
                break;
            case 2: /* DELTA save, training in between, committed */
                ids = tl_select(m.t, shard, CPR_POLICY_DELTA, tl_rows_budget(1), &n);
                model_begin(&m, &s, shard, CPR_POLICY_DELTA, ids, n);
                model_random_backward(&m, &rng, 10, CPR_POOL_MEAN);
                check_shard(&m, shard, 1);
                model_end(&m, &s, 1);
                break;
            case 3: /* TOPK_NORM save, training in between, aborted */
                ids = tl_select(m.t, shard, CPR_POLICY_TOPK_NORM, tl_rows_budget(20), &n);
                model_begin(&m, &s, shard, CPR_POLICY_TOPK_NORM, ids, n);
                model_random_backward(&m, &rng, 10, CPR_POOL_SUM);
                check_shard(&m, shard, 1);
                model_end(&m, &s, 0);
                break;
            default: /* SSU save, committed */
                ids = tl_select(m.t, shard, CPR_POLICY_SSU, tl_rows_budget(15), &n);
                model_begin(&m, &s, shard, CPR_POLICY_SSU, ids, n);
                model_end(&m, &s, 1);
                break;
            }
            free(ids);
            check_all(&m);
        }
        for (uint32_t s = 0; s < m.shards; s++)
            check_counts_exactly(&m, s);
        check_all(&m);
        model_free(&m);
    }
}

/* ---- selection by policy ------------------------------------------------------------ */

/* A batch of single-row bags: row ids[i] with gradient (gnorm[i], 0, ...). */
static void backward_rows(model *m, const int64_t *ids, const float *gnorm, size_t n)
{
    tl_batch b = {.n_idx = n, .n_bags = n};
    b.idx = tl_calloc(n, sizeof *b.idx);
    b.off = tl_calloc(n, sizeof *b.off);
    b.grad = tl_calloc(n * m->dim, sizeof *b.grad);
    for (size_t i = 0; i < n; i++) {
        b.idx[i] = ids[i];
        b.off[i] = (int64_t)i;
        b.grad[i * m->dim] = gnorm ? gnorm[i] : 1.0f;
    }
    model_backward(m, &b, CPR_POOL_SUM);
    tl_batch_free(&b);
}

static void expect_select(cpr_emb *t, uint32_t shard, cpr_policy policy, cpr_budget budget,
                          const uint64_t *want, size_t n_want)
{
    size_t n;
    uint64_t *got = tl_select(t, shard, policy, budget, &n);
    if (n != n_want || (n && memcmp(got, want, n * sizeof *got) != 0)) {
        char g[256] = "", w[256] = "";
        for (size_t i = 0, len = 0; i < n && len < 200; i++)
            len += (size_t)snprintf(g + len, sizeof g - len, " %llu", (unsigned long long)got[i]);
        for (size_t i = 0, len = 0; i < n_want && len < 200; i++)
            len += (size_t)snprintf(w + len, sizeof w - len, " %llu", (unsigned long long)want[i]);
        fail_msg("%s shard %u budget {%g, %llu}: got {%s }, want {%s }",
                 cpr_policy_name(policy), shard, budget.fraction,
                 (unsigned long long)budget.rows, g, w);
    }
    free(got);
}

/* Shard 0 of 100 rows over 3 RANGE shards: rows 0..33 (34 rows). Counts:
 * 20:3, 5:3, 10:3, 2:1, 30:5; shard 1 (34..67) row 40:2. */
static void test_select_mfu(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 100, .dim = 2, .num_shards = 3, .track = CPR_TRACK_ALL};
    model m;
    model_init(&m, &c);
    assert_int_equal(cpr_emb_shard_rows(m.t, 0), 34);
    const int64_t ids[] = {20, 5, 10, 2, 30, 20, 5, 30, 10, 30, 40, 30, 20, 5, 30, 10, 40};
    backward_rows(&m, ids, NULL, sizeof ids / sizeof ids[0]);
    check_all(&m);
    const uint64_t top1[] = {30}, top2[] = {5, 30}, top3[] = {5, 10, 30};
    const uint64_t all[] = {2, 5, 10, 20, 30}, s1[] = {40};
    expect_select(m.t, 0, CPR_POLICY_MFU, tl_rows_budget(1), top1, 1);
    expect_select(m.t, 0, CPR_POLICY_MFU, tl_rows_budget(2), top2, 2);
    expect_select(m.t, 0, CPR_POLICY_MFU, tl_rows_budget(3), top3, 3);
    expect_select(m.t, 0, CPR_POLICY_MFU, tl_rows_budget(34), all, 5);
    expect_select(m.t, 0, CPR_POLICY_MFU, tl_rows_budget(1000), all, 5);
    /* Fractions of 34 rows, rounded up: 0.01 -> 1, 0.03 -> 2, 0.06 -> 3. */
    expect_select(m.t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 0.01}, top1, 1);
    expect_select(m.t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 0.03}, top2, 2);
    expect_select(m.t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 0.06}, top3, 3);
    expect_select(m.t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 1.0}, all, 5);
    expect_select(m.t, 1, CPR_POLICY_MFU, tl_rows_budget(3), s1, 1);
    expect_select(m.t, 2, CPR_POLICY_MFU, tl_rows_budget(3), NULL, 0);
    /* Bad requests leave *n alone. */
    uint64_t buf[100];
    size_t n = 12345;
    assert_status(CPR_INVALID_ARGUMENT,
                  cpr_emb_select(m.t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 0.5, .rows = 3},
                                 buf, 100, &n));
    assert_status(CPR_INVALID_ARGUMENT,
                  cpr_emb_select(m.t, 3, CPR_POLICY_MFU, tl_rows_budget(3), buf, 100, &n));
    assert_status(CPR_INVALID_ARGUMENT,
                  cpr_emb_select(m.t, 0, (cpr_policy)5, tl_rows_budget(3), buf, 100, &n));
    assert_int_equal(n, 12345);
    model_free(&m);
}

/* Counts on both sides of the selection's small-key histogram (exact below
 * 1023, one bucket at or above it): every budget still selects exactly the
 * model's top k, through the two-pass path when the k-th count is small and
 * the radix path when it is not; ties at 1023 and 1024 included. */
static void test_select_mfu_large_counts(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 120, .dim = 2, .num_shards = 2, .track = CPR_TRACK_ALL};
    model m;
    model_init(&m, &c);
    size_t cap = 0, n = 0;
    for (uint64_t r = 0; r < 120; r++)
        cap += r % 7 == 0 ? 1030 : r % 3 == 0 ? 0 : 1 + r % 5;
    int64_t *ids = tl_calloc(cap, sizeof *ids);
    for (uint64_t r = 0; r < 120; r++) { /* 1020..1026 on every 7th row, 1..5 on others */
        size_t count = r % 7 == 0 ? 1020 + (size_t)(r / 7) % 7 : r % 3 == 0 ? 0 : 1 + r % 5;
        for (size_t j = 0; j < count; j++)
            ids[n++] = (int64_t)r;
    }
    backward_rows(&m, ids, NULL, n);
    for (uint32_t shard = 0; shard < 2; shard++)
        for (uint64_t k = 1; k <= 60; k++)
            check_mfu(&m, shard, k);
    check_all(&m);
    free(ids);
    model_free(&m);
}

/* Shard 0 is rows 0..29. SGD norms: 3 -> 6.25 (one call, g 2.5), 12 -> 4.5 (two calls of 1.5: the
 * sum of squared updates, not the square of their sum), 20 -> 4 (twice in
 * one call with g 1: one step of G 2), 22 -> 3.24, 9 -> 0 (zero gradient:
 * counted by MFU, never chosen by TOPK_NORM). */
static void test_select_topk_norm(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 60, .dim = 3, .num_shards = 2, .track = CPR_TRACK_ALL,
                        .learning_rate = 0.1f};
    model m;
    model_init(&m, &c);
    const int64_t a[] = {3, 12, 22, 9, 35}, b2[] = {12};
    const float ga[] = {2.5f, 1.5f, 1.8f, 0.0f, 1.0f}, gb[] = {1.5f};
    backward_rows(&m, a, ga, 5);
    backward_rows(&m, b2, gb, 1);
    int64_t idx[] = {20, 20};
    int64_t off[] = {0};
    float g[3] = {1.0f, 0, 0};
    tl_batch b = {.idx = idx, .n_idx = 2, .off = off, .n_bags = 1, .grad = g};
    model_backward(&m, &b, CPR_POOL_SUM);
    check_all(&m);
    const uint64_t t1[] = {3}, t2[] = {3, 12}, t3[] = {3, 12, 20}, t4[] = {3, 12, 20, 22};
    expect_select(m.t, 0, CPR_POLICY_TOPK_NORM, tl_rows_budget(1), t1, 1);
    expect_select(m.t, 0, CPR_POLICY_TOPK_NORM, tl_rows_budget(2), t2, 2);
    expect_select(m.t, 0, CPR_POLICY_TOPK_NORM, tl_rows_budget(3), t3, 3);
    expect_select(m.t, 0, CPR_POLICY_TOPK_NORM, tl_rows_budget(20), t4, 4);
    expect_select(m.t, 0, CPR_POLICY_TOPK_NORM, (cpr_budget){.fraction = 0.05}, t2, 2);
    const uint64_t mfu_all[] = {3, 9, 12, 20, 22}, s1[] = {35};
    expect_select(m.t, 0, CPR_POLICY_MFU, tl_rows_budget(20), mfu_all, 5);
    expect_select(m.t, 1, CPR_POLICY_TOPK_NORM, tl_rows_budget(20), s1, 1);
    model_free(&m);
}

static void test_select_full_delta(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 30, .dim = 2, .num_shards = 4, .scheme = CPR_SHARD_MODULO,
                        .track = CPR_TRACK_DIRTY};
    model m;
    model_init(&m, &c);
    const int64_t ids[] = {1, 5, 5, 29, 4};
    backward_rows(&m, ids, NULL, 5);
    const uint64_t d1[] = {1, 5, 29}, full3[] = {3, 7, 11, 15, 19, 23, 27};
    /* Budgets are ignored by FULL and DELTA, even an empty one. */
    const cpr_budget none = {0, 0};
    expect_select(m.t, 1, CPR_POLICY_DELTA, none, d1, 3);
    expect_select(m.t, 1, CPR_POLICY_DELTA, tl_rows_budget(1), d1, 3);
    expect_select(m.t, 2, CPR_POLICY_DELTA, none, NULL, 0);
    expect_select(m.t, 3, CPR_POLICY_FULL, none, full3, 7);
    expect_select(m.t, 3, CPR_POLICY_FULL, (cpr_budget){.fraction = 0.1}, full3, 7);
    assert_int_equal(tl_stats(m.t, 1).dirty_rows, 3);
    assert_int_equal(tl_stats(m.t, 0).dirty_rows, 1);
    /* Trackers not configured: their policies are refused. */
    uint64_t buf[30];
    size_t n = 99;
    const cpr_policy need[] = {CPR_POLICY_MFU, CPR_POLICY_SSU, CPR_POLICY_TOPK_NORM};
    for (size_t i = 0; i < 3; i++)
        assert_status(CPR_FAILED_PRECONDITION,
                      cpr_emb_select(m.t, 0, need[i], tl_rows_budget(5), buf, 30, &n));
    assert_int_equal(n, 99);
    model_free(&m);
    c.track = CPR_TRACK_COUNTS | CPR_TRACK_SSU | CPR_TRACK_NORM;
    cpr_emb *t = tl_create(&c);
    assert_status(CPR_FAILED_PRECONDITION,
                  cpr_emb_select(t, 0, CPR_POLICY_DELTA, tl_rows_budget(5), buf, 30, &n));
    assert_int_equal(n, 99);
    cpr_emb_destroy(t);
}

/* ---- SSU -------------------------------------------------------------------- */

static void test_ssu_rate(void **unused)
{
    (void)unused;
    const double rate = 0.1;
    const size_t n = 8000;
    cpr_emb_config c = {.rows = 40000, .dim = 1, .num_shards = 2, .track = CPR_TRACK_ALL,
                        .ssu_rate = rate, .ssu_capacity = 40000, .seed = 3};
    cpr_emb *t = tl_create(&c);
    int64_t *idx = tl_calloc(n, sizeof *idx), off = 0;
    float g = 1.0f;
    uint64_t total = 0;
    for (int call = 0; call < 2; call++) { /* distinct rows, each accessed once */
        for (size_t i = 0; i < n; i++)
            idx[i] = (int64_t)(i * 5 + (size_t)call);
        assert_status(CPR_OK, cpr_emb_backward(t, idx, n, &off, 1, CPR_POOL_SUM, &g));
    }
    for (uint32_t s = 0; s < 2; s++) {
        cpr_emb_stats st = tl_stats(t, s);
        total += st.sampled_rows;
        assert_true(st.sampled_rows <= st.touched_rows);
    }
    double mean = rate * 2 * (double)n, sigma = sqrt(2 * (double)n * rate * (1 - rate));
    if (fabs((double)total - mean) > 5 * sigma)
        fail_msg("ssu_rate %.2f: %llu of %zu accesses sampled, want %.0f +- %.0f", rate,
                 (unsigned long long)total, 2 * n, mean, 5 * sigma);
    cpr_emb_destroy(t);

    /* Capacity: never more than ssu_capacity rows per shard. */
    c.ssu_capacity = 50;
    t = tl_create(&c);
    for (int call = 0; call < 3; call++) {
        for (size_t i = 0; i < n; i++)
            idx[i] = (int64_t)(i * 5 + (size_t)call);
        assert_status(CPR_OK, cpr_emb_backward(t, idx, n, &off, 1, CPR_POOL_SUM, &g));
        for (uint32_t s = 0; s < 2; s++) {
            assert_true(tl_stats(t, s).sampled_rows <= 50);
            size_t m;
            free(tl_select(t, s, CPR_POLICY_SSU, tl_rows_budget(40000), &m));
            assert_true(m <= 50);
        }
    }
    assert_int_equal(tl_stats(t, 0).sampled_rows, 50); /* ~800 candidates a call */
    cpr_emb_destroy(t);

    /* cpr_emb_set_ssu_rate: 0 samples nothing from then on, 1 every access;
     * what the sample holds stays; bad rates are refused and change nothing. */
    c.ssu_capacity = 40000;
    t = tl_create(&c);
    for (size_t i = 0; i < n; i++)
        idx[i] = (int64_t)(i * 5);
    assert_status(CPR_OK, cpr_emb_backward(t, idx, n, &off, 1, CPR_POOL_SUM, &g));
    uint64_t held = tl_stats(t, 0).sampled_rows + tl_stats(t, 1).sampled_rows;
    assert_true(held > 0);
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_set_ssu_rate(t, 1.5));
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_set_ssu_rate(t, NAN));
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_set_ssu_rate(NULL, 0.5));
    assert_status(CPR_OK, cpr_emb_set_ssu_rate(t, 0.0));
    for (size_t i = 0; i < n; i++)
        idx[i] = (int64_t)(i * 5 + 1);
    assert_status(CPR_OK, cpr_emb_backward(t, idx, n, &off, 1, CPR_POOL_SUM, &g));
    assert_int_equal(tl_stats(t, 0).sampled_rows + tl_stats(t, 1).sampled_rows, held);
    assert_status(CPR_OK, cpr_emb_set_ssu_rate(t, 1.0));
    for (size_t i = 0; i < n; i++)
        idx[i] = (int64_t)(i * 5 + 2);
    assert_status(CPR_OK, cpr_emb_backward(t, idx, n, &off, 1, CPR_POOL_SUM, &g));
    assert_int_equal(tl_stats(t, 0).sampled_rows + tl_stats(t, 1).sampled_rows, held + n);
    cpr_emb_destroy(t);
    free(idx);
}

/* With ssu_rate 1 every access is sampled: the budget takes the oldest. */
static void test_ssu_oldest_first(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 100, .dim = 1, .track = CPR_TRACK_ALL, .ssu_rate = 1.0,
                        .ssu_capacity = 20};
    model m;
    model_init(&m, &c);
    const int64_t a[] = {50, 51, 52, 53, 54}, b[] = {0, 1, 2, 3, 4};
    const int64_t d[] = {20, 21, 22, 23, 24, 25, 26, 27, 28, 29};
    backward_rows(&m, a, NULL, 5);
    backward_rows(&m, b, NULL, 5);
    backward_rows(&m, d, NULL, 10);
    backward_rows(&m, a, NULL, 5); /* re-access: stays as old as it was */
    assert_int_equal(tl_stats(m.t, 0).sampled_rows, 20);
    const uint64_t old5[] = {50, 51, 52, 53, 54};
    const uint64_t old10[] = {0, 1, 2, 3, 4, 50, 51, 52, 53, 54};
    expect_select(m.t, 0, CPR_POLICY_SSU, tl_rows_budget(5), old5, 5);
    expect_select(m.t, 0, CPR_POLICY_SSU, tl_rows_budget(10), old10, 10);
    expect_select(m.t, 0, CPR_POLICY_SSU, (cpr_budget){.fraction = 0.05}, old5, 5);
    /* Saving the oldest 5 (and aborting) restores them, still oldest. */
    model_save s;
    model_begin(&m, &s, 0, CPR_POLICY_SSU, old5, 5);
    assert_int_equal(tl_stats(m.t, 0).sampled_rows, 15);
    const uint64_t next5[] = {0, 1, 2, 3, 4};
    expect_select(m.t, 0, CPR_POLICY_SSU, tl_rows_budget(5), next5, 5);
    model_end(&m, &s, 0);
    assert_int_equal(tl_stats(m.t, 0).sampled_rows, 20);
    expect_select(m.t, 0, CPR_POLICY_SSU, tl_rows_budget(5), old5, 5);
    expect_select(m.t, 0, CPR_POLICY_SSU, tl_rows_budget(10), old10, 10);
    /* Committed: gone from the sample until used again. */
    model_begin(&m, &s, 0, CPR_POLICY_SSU, old5, 5);
    model_end(&m, &s, 1);
    expect_select(m.t, 0, CPR_POLICY_SSU, tl_rows_budget(5), next5, 5);
    assert_int_equal(tl_stats(m.t, 0).sampled_rows, 15);
    /* Sampled again after their save, they are the newest members now. */
    backward_rows(&m, a, NULL, 5);
    const uint64_t b_then_d[] = {0, 1, 2, 3, 4, 20, 21, 22, 23, 24};
    expect_select(m.t, 0, CPR_POLICY_SSU, tl_rows_budget(5), next5, 5);
    expect_select(m.t, 0, CPR_POLICY_SSU, tl_rows_budget(10), b_then_d, 10);
    check_all(&m);
    model_free(&m);
}

/* An aborted SSU save gives its rows back their age, whatever the size of
 * the sample (so whatever bookkeeping the table does as the sample grows). */
static void test_ssu_abort_keeps_age(void **unused)
{
    (void)unused;
    const int64_t oldest[] = {500, 501, 502, 503, 504};
    const uint64_t want[] = {500, 501, 502, 503, 504};
    int64_t *rest = tl_calloc(300, sizeof *rest);
    for (int64_t i = 0; i < 300; i++)
        rest[i] = i;
    for (size_t n_rest = 1; n_rest <= 300; n_rest += 7) {
        cpr_emb_config c = {.rows = 600, .dim = 1, .track = CPR_TRACK_ALL, .ssu_rate = 1.0,
                            .ssu_capacity = 600};
        model m;
        model_init(&m, &c);
        backward_rows(&m, oldest, NULL, 5);
        backward_rows(&m, rest, NULL, n_rest);
        expect_select(m.t, 0, CPR_POLICY_SSU, tl_rows_budget(5), want, 5);
        model_save s;
        model_begin(&m, &s, 0, CPR_POLICY_SSU, want, 5);
        model_end(&m, &s, 0);
        size_t n;
        uint64_t *got = tl_select(m.t, 0, CPR_POLICY_SSU, tl_rows_budget(5), &n);
        if (n != 5 || memcmp(got, want, sizeof want) != 0)
            fail_msg("sample of %zu rows: after an aborted save of the oldest 5, SSU budget 5 "
                     "gives rows %llu.. (%zu rows), want 500..504", n_rest + 5,
                     (unsigned long long)(n ? got[0] : 0), n);
        free(got);
        model_free(&m);
    }
    free(rest);
}

/* One backward of row `row` alone (a dim-1 table). */
static void touch_row(cpr_emb *t, int64_t row)
{
    int64_t off = 0;
    float grad = 1.0f;
    assert_status(CPR_OK, cpr_emb_backward(t, &row, 1, &off, 1, CPR_POOL_SUM, &grad));
}

/* A member sampled again while an open save holds it (U4): when that save
 * commits, the row stays in the sample, at its end, since the access came
 * after the save's copy; an untouched one leaves; an abort changes nothing
 * of the order. */
static void test_ssu_resampled_while_held(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 64, .dim = 1, .track = CPR_TRACK_ALL, .ssu_rate = 1.0,
                        .ssu_capacity = 64};
    for (int commit = 0; commit < 2; commit++) {
        cpr_emb *t = tl_create(&c);
        const int64_t rows[] = {5, 9, 20, 33};
        for (size_t i = 0; i < 4; i++)
            touch_row(t, rows[i]);
        const uint64_t held[] = {5, 9};
        cpr_emb_save *save = NULL;
        assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_SSU, held, 2, &save));
        float v[2];
        assert_status(CPR_OK, cpr_emb_save_copy(t, save, 0, 2, v, NULL));
        touch_row(t, 5); /* after the copy: its update is not in the save */
        touch_row(t, 40); /* a new member, after 5's resampling */
        if (commit) {
            assert_status(CPR_OK, cpr_emb_save_commit(t, save));
            const uint64_t want[] = {5, 20, 33, 40}; /* ascending; order below */
            expect_select(t, 0, CPR_POLICY_SSU, tl_rows_budget(64), want, 4);
            const uint64_t oldest[] = {20, 33, 40}; /* 5 moved to the end */
            expect_select(t, 0, CPR_POLICY_SSU, tl_rows_budget(3), oldest, 3);
        } else {
            cpr_emb_save_abort(t, save);
            const uint64_t oldest[] = {5, 9, 20}; /* their old places */
            expect_select(t, 0, CPR_POLICY_SSU, tl_rows_budget(3), oldest, 3);
        }
        cpr_emb_destroy(t);
    }
}

/* Saves hold the SSU members among their rows in three ways (emb_ssu.c): a
 * save of every row of a shard computes each member's index, a save of many
 * rows against a tiny sample looks each member up, any other goes over its
 * ids. Each way holds exactly the members among the save's rows that no
 * other open save holds: taken out of the sample on commit, given back in
 * their order on abort. Range and modulo shards. */
static void test_ssu_hold_every_way(void **unused)
{
    (void)unused;
    const size_t used_counts[] = {10, 3000, 20000}; /* 20000: every row of shard 1 */
    const cpr_shard_scheme schemes[] = {CPR_SHARD_RANGE, CPR_SHARD_MODULO};
    for (size_t sc = 0; sc < 2; sc++) {
        for (size_t k = 0; k < 3; k++) {
            cpr_emb_config c = {.rows = 40000, .dim = 1, .num_shards = 2, .scheme = schemes[sc],
                                .track = CPR_TRACK_ALL, .ssu_rate = 1.0, .ssu_capacity = 40000};
            model m;
            model_init(&m, &c);
            size_t used = used_counts[k], n_members, n_full, n_half = 0, n_top;
            int64_t *rows = tl_calloc(used, sizeof *rows);
            for (size_t i = 0; i < used; i++) { /* distinct rows of shard 1 (7919 is prime) */
                uint64_t j = (i * 7919) % 20000;
                rows[i] = (int64_t)(schemes[sc] == CPR_SHARD_RANGE ? 20000 + j : 2 * j + 1);
            }
            backward_rows(&m, rows, NULL, used);
            uint64_t *members = tl_select(m.t, 1, CPR_POLICY_SSU, tl_rows_budget(c.rows),
                                          &n_members);
            assert_int_equal(n_members, used);
            uint64_t *full = tl_select(m.t, 1, CPR_POLICY_FULL, tl_rows_budget(1), &n_full);
            assert_int_equal(n_full, 20000);
            uint64_t *half = tl_calloc(n_full / 2, sizeof *half); /* every other row */
            for (size_t i = 0; i < n_full; i += 2)
                half[n_half++] = full[i];
            size_t half_members = 0;
            for (size_t i = 0, h = 0; i < n_members; i++) { /* both ascending */
                while (h < n_half && half[h] < members[i])
                    h++;
                half_members += h < n_half && half[h] == members[i];
            }
            /* DELTA of every other row: only the members among them are held. */
            model_save s, top;
            model_begin(&m, &s, 1, CPR_POLICY_DELTA, half, n_half);
            assert_int_equal(tl_stats(m.t, 1).sampled_rows, n_members - half_members);
            model_end(&m, &s, 0);
            expect_select(m.t, 1, CPR_POLICY_SSU, tl_rows_budget(c.rows), members, n_members);
            /* An MFU save holds 5 members; a FULL save begun beside it holds
             * the others, once: aborted, they are back in their order. */
            uint64_t *topids = tl_select(m.t, 1, CPR_POLICY_MFU, tl_rows_budget(5), &n_top);
            assert_int_equal(n_top, 5);
            model_begin(&m, &top, 1, CPR_POLICY_MFU, topids, n_top);
            assert_int_equal(tl_stats(m.t, 1).sampled_rows, n_members - 5);
            model_begin(&m, &s, 1, CPR_POLICY_FULL, full, n_full);
            assert_int_equal(tl_stats(m.t, 1).sampled_rows, 0);
            model_end(&m, &s, 0);
            assert_int_equal(tl_stats(m.t, 1).sampled_rows, n_members - 5);
            model_end(&m, &top, 1); /* its 5 leave the sample */
            assert_int_equal(tl_stats(m.t, 1).sampled_rows, n_members - 5);
            /* FULL, committed: the sample is empty. */
            model_begin(&m, &s, 1, CPR_POLICY_FULL, full, n_full);
            model_end(&m, &s, 1);
            assert_int_equal(tl_stats(m.t, 1).sampled_rows, 0);
            free(rows), free(members), free(full), free(half), free(topids);
            model_free(&m);
        }
    }
}

/* ---- the save protocol --------------------------------------------------------------- */

static void test_save_begin_commit(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 200, .dim = 3, .num_shards = 2, .track = CPR_TRACK_ALL,
                        .ssu_rate = 1.0, .ssu_capacity = 200};
    model m;
    model_init(&m, &c);
    tl_rng rng = {.s = 55};
    model_random_backward(&m, &rng, 40, CPR_POOL_SUM);
    cpr_emb_stats before = tl_stats(m.t, 0);

    size_t n;
    uint64_t *top = tl_select(m.t, 0, CPR_POLICY_MFU, tl_rows_budget(5), &n);
    assert_int_equal(n, 5);
    model_save s;
    model_begin(&m, &s, 0, CPR_POLICY_MFU, top, n);
    /* Pending, not yet saved: MFU moves on, unsaved_events still counts them. */
    size_t n2;
    uint64_t *next = tl_select(m.t, 0, CPR_POLICY_MFU, tl_rows_budget(5), &n2);
    for (size_t i = 0; i < n2; i++)
        for (size_t k = 0; k < n; k++)
            assert_true(next[i] != top[k]);
    free(next);
    cpr_emb_stats during = tl_stats(m.t, 0);
    assert_int_equal(during.unsaved_events, before.unsaved_events);
    assert_int_equal(during.update_events, before.update_events);
    assert_int_equal(during.touched_rows, before.touched_rows - 5);
    assert_int_equal(during.open_saves, 1);
    check_shard(&m, 0, 1);

    /* top[0] is used 3 more times before the commit: it keeps those. */
    int64_t again[] = {(int64_t)top[0], (int64_t)top[0], (int64_t)top[0]};
    backward_rows(&m, again, NULL, 3);
    uint64_t saved_events = s.count[0] + s.count[1] + s.count[2] + s.count[3] + s.count[4];
    model_end(&m, &s, 1);
    cpr_emb_stats after = tl_stats(m.t, 0);
    assert_int_equal(after.unsaved_events, before.unsaved_events + 3 - saved_events);
    assert_int_equal(m.count[top[0]], 3);
    check_all(&m);

    /* FULL begin clears dirty bits; a row used before the commit stays dirty. */
    uint64_t *full = tl_select(m.t, 1, CPR_POLICY_FULL, tl_rows_budget(1), &n);
    model_begin(&m, &s, 1, CPR_POLICY_FULL, full, n);
    assert_int_equal(tl_stats(m.t, 1).dirty_rows, 0);
    assert_int_equal(tl_stats(m.t, 1).touched_rows, 0);
    assert_int_equal(tl_stats(m.t, 1).sampled_rows, 0);
    int64_t row150[] = {150};
    backward_rows(&m, row150, NULL, 1);
    model_end(&m, &s, 1);
    const uint64_t only150[] = {150};
    expect_select(m.t, 1, CPR_POLICY_DELTA, tl_rows_budget(1), only150, 1);
    expect_select(m.t, 1, CPR_POLICY_MFU, tl_rows_budget(100), only150, 1);
    assert_int_equal(tl_stats(m.t, 1).unsaved_events, 1);
    check_all(&m);
    free(full);
    free(top);
    model_free(&m);
}

/* Snapshot of everything selectable about a shard, for exact comparison. */
typedef struct shard_view {
    cpr_emb_stats stats;
    uint64_t *sel[4][4]; /* [policy MFU/TOPK/SSU/DELTA][budget index] */
    size_t n[4][4];
} shard_view;

static const cpr_policy view_policies[] = {CPR_POLICY_MFU, CPR_POLICY_TOPK_NORM,
                                           CPR_POLICY_SSU, CPR_POLICY_DELTA};

static void view_take(cpr_emb *t, uint32_t shard, shard_view *v)
{
    const cpr_policy *pol = view_policies;
    const uint64_t budgets[] = {1, 7, 30, 1000};
    v->stats = tl_stats(t, shard);
    for (size_t p = 0; p < 4; p++)
        for (size_t b = 0; b < 4; b++)
            v->sel[p][b] = tl_select(t, shard, pol[p], tl_rows_budget(budgets[b]), &v->n[p][b]);
}

static void view_assert_equal_free(shard_view *a, shard_view *b)
{
    assert_memory_equal(&a->stats, &b->stats, sizeof a->stats);
    for (size_t p = 0; p < 4; p++)
        for (size_t k = 0; k < 4; k++) {
            if (a->n[p][k] != b->n[p][k] ||
                memcmp(a->sel[p][k], b->sel[p][k], a->n[p][k] * sizeof(uint64_t)) != 0)
                fail_msg("%s selection %zu differs after abort: %zu rows before, %zu after",
                         cpr_policy_name(view_policies[p]), k, a->n[p][k], b->n[p][k]);
            free(a->sel[p][k]);
            free(b->sel[p][k]);
        }
}

/* Begin + abort of each policy, with and without a FULL save: every tracker
 * back exactly as before (counts, norms, dirty bits, SSU membership). */
static void test_save_abort_restores(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 300, .dim = 2, .num_shards = 2, .scheme = CPR_SHARD_MODULO,
                        .track = CPR_TRACK_ALL, .ssu_rate = 0.5, .ssu_capacity = 300};
    model m;
    model_init(&m, &c);
    tl_rng rng = {.s = 99};
    for (int i = 0; i < 3; i++)
        model_random_backward(&m, &rng, 30, CPR_POOL_MEAN);
    const cpr_policy pol[] = {CPR_POLICY_FULL, CPR_POLICY_DELTA, CPR_POLICY_MFU,
                              CPR_POLICY_SSU, CPR_POLICY_TOPK_NORM};
    for (size_t p = 0; p < 5; p++) {
        shard_view before, after;
        view_take(m.t, 1, &before);
        size_t n;
        uint64_t *ids = tl_select(m.t, 1, pol[p], tl_rows_budget(25), &n);
        assert_true(n > 0);
        model_save s;
        model_begin(&m, &s, 1, pol[p], ids, n);
        check_shard(&m, 1, 1);
        model_end(&m, &s, 0);
        view_take(m.t, 1, &after);
        view_assert_equal_free(&before, &after);
        check_all(&m);
        free(ids);
    }
    model_free(&m);
}

static void test_save_errors(void **unused)
{
    (void)unused;
    cpr_emb_config c = {.rows = 50, .dim = 2, .num_shards = 2, .track = CPR_TRACK_ALL};
    cpr_emb *t = tl_create(&c);
    const uint64_t a[] = {1, 2}, b[] = {3}, other[] = {1, 30}, outside[] = {50};
    const uint64_t s1[] = {30};
    cpr_emb_save *sentinel = (cpr_emb_save *)(uintptr_t)0x4321, *x = sentinel;
    cpr_emb_save *full = NULL, *mfu = NULL, *full1 = NULL;

    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_begin(t, 0, CPR_POLICY_MFU, other, 2, &x));
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_begin(t, 1, CPR_POLICY_FULL, outside, 1, &x));
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_begin(t, 2, CPR_POLICY_FULL, a, 2, &x));
    assert_ptr_equal(x, sentinel);

    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_FULL, a, 2, &full));
    assert_status(CPR_FAILED_PRECONDITION, cpr_emb_save_begin(t, 0, CPR_POLICY_FULL, b, 1, &x));
    assert_status(CPR_FAILED_PRECONDITION, cpr_emb_save_begin(t, 0, CPR_POLICY_DELTA, b, 1, &x));
    assert_ptr_equal(x, sentinel);
    /* Other policies, and other shards, may save alongside. */
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_MFU, b, 1, &mfu));
    assert_status(CPR_OK, cpr_emb_save_begin(t, 1, CPR_POLICY_FULL, s1, 1, &full1));
    assert_int_equal(tl_stats(t, 0).open_saves, 2);
    assert_int_equal(tl_stats(t, 1).open_saves, 1);
    cpr_emb_save_abort(t, full);
    /* Once the FULL save ended, a DELTA may start. */
    x = NULL;
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_DELTA, b, 1, &x));
    assert_status(CPR_OK, cpr_emb_save_commit(t, x));
    assert_status(CPR_OK, cpr_emb_save_commit(t, mfu));
    assert_status(CPR_OK, cpr_emb_save_commit(t, full1));
    assert_int_equal(tl_stats(t, 0).open_saves, 0);
    assert_int_equal(tl_stats(t, 1).open_saves, 0);
    cpr_emb_save_abort(t, NULL);
    cpr_emb_destroy(t);
}

/* ---- wipe_shard ------------------------------------------------------------------ */

static void test_wipe_shard(void **unused)
{
    (void)unused;
    const uint64_t rows = 150;
    const uint32_t dim = 3;
    cpr_emb_config c = {.rows = rows, .dim = dim, .num_shards = 3, .scheme = CPR_SHARD_MODULO,
                        .optimizer = CPR_OPT_ADAGRAD, .track = CPR_TRACK_ALL,
                        .ssu_rate = 0.5, .ssu_capacity = 100, .learning_rate = 0.1f};
    model m;
    model_init(&m, &c);
    tl_rng rng = {.s = 4242};
    model_random_backward(&m, &rng, 40, CPR_POOL_SUM);
    size_t n;
    uint64_t *ids = tl_select(m.t, 1, CPR_POLICY_MFU, tl_rows_budget(6), &n);
    model_save s;
    model_begin(&m, &s, 1, CPR_POLICY_MFU, ids, n);
    model_end(&m, &s, 1);
    free(ids);
    model_random_backward(&m, &rng, 20, CPR_POOL_MEAN);
    /* A save open across the wipe: its pending events are lost too, and
     * ending it afterwards brings nothing back. */
    ids = tl_select(m.t, 1, CPR_POLICY_MFU, tl_rows_budget(4), &n);
    assert_true(n > 0);
    model_begin(&m, &s, 1, CPR_POLICY_MFU, ids, n);
    free(ids);

    float *w0 = tl_calloc(rows * dim, sizeof *w0), *s0 = tl_calloc(rows * dim, sizeof *s0);
    float *w1 = tl_calloc(rows * dim, sizeof *w1), *s1 = tl_calloc(rows * dim, sizeof *s1);
    tl_read_all(m.t, w0, s0);
    cpr_emb_stats st0 = tl_stats(m.t, 0), st2 = tl_stats(m.t, 2);
    uint64_t want_lost = tl_stats(m.t, 1).unsaved_events, lost = 0;
    assert_true(want_lost > 0);
    uint64_t model_lost = m.pending_events[1];
    for (uint64_t r = 1; r < rows; r += 3)
        model_lost += m.count[r];
    assert_int_equal(want_lost, model_lost);

    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_wipe_shard(m.t, 3, &lost));
    assert_status(CPR_OK, cpr_emb_wipe_shard(m.t, 1, &lost));
    assert_int_equal(lost, want_lost);
    tl_read_all(m.t, w1, s1);
    for (uint64_t r = 0; r < rows; r++) {
        for (uint32_t j = 0; j < dim; j++) {
            size_t i = r * dim + j;
            if (r % 3 == 1) {
                assert_true(w1[i] == 0.0f && s1[i] == 0.0f);
            } else {
                assert_memory_equal(&w1[i], &w0[i], sizeof w1[i]);
                assert_memory_equal(&s1[i], &s0[i], sizeof s1[i]);
            }
        }
    }
    cpr_emb_save_abort(m.t, s.save);
    free(s.ids), free(s.count), free(s.norm), free(s.dirty);
    cpr_emb_stats now = tl_stats(m.t, 1);
    assert_int_equal(now.open_saves, 0);
    assert_int_equal(now.unsaved_events, 0);
    assert_int_equal(now.touched_rows, 0);
    assert_int_equal(now.dirty_rows, 0);
    assert_int_equal(now.sampled_rows, 0);
    const cpr_policy pol[] = {CPR_POLICY_MFU, CPR_POLICY_DELTA, CPR_POLICY_SSU,
                              CPR_POLICY_TOPK_NORM};
    for (size_t p = 0; p < 4; p++) {
        free(tl_select(m.t, 1, pol[p], tl_rows_budget(rows), &n));
        assert_int_equal(n, 0);
    }
    cpr_emb_stats a0 = tl_stats(m.t, 0), a2 = tl_stats(m.t, 2);
    assert_memory_equal(&a0, &st0, sizeof a0);
    assert_memory_equal(&a2, &st2, sizeof a2);
    /* Nothing unsaved now: a second wipe loses nothing (NULL out allowed). */
    assert_status(CPR_OK, cpr_emb_wipe_shard(m.t, 1, &lost));
    assert_int_equal(lost, 0);
    assert_status(CPR_OK, cpr_emb_wipe_shard(m.t, 1, NULL));
    free(w0), free(s0), free(w1), free(s1);
    model_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trackers_random),
        cmocka_unit_test(test_select_mfu),
        cmocka_unit_test(test_select_mfu_large_counts),
        cmocka_unit_test(test_select_topk_norm),
        cmocka_unit_test(test_select_full_delta),
        cmocka_unit_test(test_ssu_rate),
        cmocka_unit_test(test_ssu_oldest_first),
        cmocka_unit_test(test_ssu_abort_keeps_age),
        cmocka_unit_test(test_ssu_hold_every_way),
        cmocka_unit_test(test_ssu_resampled_while_held),
        cmocka_unit_test(test_save_begin_commit),
        cmocka_unit_test(test_save_abort_restores),
        cmocka_unit_test(test_save_errors),
        cmocka_unit_test(test_wipe_shard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
