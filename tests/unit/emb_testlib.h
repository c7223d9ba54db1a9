/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the embedding tests (test_embedding*.c): a deterministic RNG,
 * random EmbeddingBag batches, a naive reference for forward and for the
 * optimizer step (written from the header's contract, in double), and a
 * reader of every row of a table through the public save protocol (a FULL
 * save per shard that is gathered and then aborted, which by contract leaves
 * the trackers as they were). Everything is static inline so each test
 * program takes only what it uses.
 */
#ifndef CPR_EMB_TESTLIB_H
#define CPR_EMB_TESTLIB_H

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpr/rng.h"
#include "cpr/embedding.h"
#include "testutil.h"

/* ---- randomness ----------------------------------------------------------- */

typedef struct tl_rng {
    uint64_t s;
} tl_rng;

static inline uint64_t tl_next(tl_rng *r)
{
    return cpr_splitmix64(&r->s);
}

static inline double tl_unif(tl_rng *r) /* [0, 1) */
{
    return (double)(tl_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static inline uint64_t tl_below(tl_rng *r, uint64_t n)
{
    return tl_next(r) % n;
}

static inline float tl_sym(tl_rng *r) /* [-1, 1) */
{
    return (float)(2.0 * tl_unif(r) - 1.0);
}

static inline void *tl_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    assert_non_null(p);
    return p;
}

/* ---- tables ----------------------------------------------------------------- */

static inline cpr_emb *tl_create(const cpr_emb_config *cfg)
{
    cpr_emb *t = NULL;
    assert_status(CPR_OK, cpr_emb_create(cfg, &t));
    assert_non_null(t);
    return t;
}

static inline cpr_emb_stats tl_stats(const cpr_emb *t, uint32_t shard)
{
    cpr_emb_stats s;
    memset(&s, 0, sizeof s);
    assert_status(CPR_OK, cpr_emb_stats_get(t, shard, &s));
    return s;
}

/* Select into a fresh array of shard_rows ids (caller frees); *n set. */
static inline uint64_t *tl_select(cpr_emb *t, uint32_t shard, cpr_policy policy,
                                  cpr_budget budget, size_t *n)
{
    size_t cap = (size_t)cpr_emb_shard_rows(t, shard);
    uint64_t *ids = tl_calloc(cap, sizeof *ids);
    *n = (size_t)-1;
    assert_status(CPR_OK, cpr_emb_select(t, shard, policy, budget, ids, cap, n));
    assert_true(*n <= cap);
    for (size_t i = 1; i < *n; i++)
        assert_true(ids[i - 1] < ids[i]); /* ascending, no duplicates */
    for (size_t i = 0; i < *n; i++) {
        assert_true(ids[i] < cpr_emb_rows(t));
        assert_int_equal(cpr_emb_shard_of(t, ids[i]), shard);
    }
    return ids;
}

static inline cpr_budget tl_rows_budget(uint64_t rows)
{
    cpr_budget b = {.fraction = 0, .rows = rows};
    return b;
}

/* Gather rows `ids` (ascending, of one shard) through a save of `policy`,
 * then abort the save. values: n x dim; state: n x state_dim or NULL. */
static inline void tl_gather_ids(cpr_emb *t, uint32_t shard, cpr_policy policy,
                                 const uint64_t *ids, size_t n, float *values, float *state)
{
    cpr_emb_save *save = NULL;
    assert_status(CPR_OK, cpr_emb_save_begin(t, shard, policy, ids, n, &save));
    assert_non_null(save);
    assert_int_equal(cpr_emb_save_rows(save), n);
    assert_memory_equal(cpr_emb_save_ids(save), ids, n * sizeof *ids);
    assert_status(CPR_OK, cpr_emb_gather(t, save, values, state));
    cpr_emb_save_abort(t, save);
}

/* Every row's values (rows x dim) and state (rows x state_dim, or NULL). */
static inline void tl_read_all(cpr_emb *t, float *w, float *st)
{
    uint32_t dim = cpr_emb_dim(t), sd = cpr_emb_state_dim(t);
    cpr_budget all = {.fraction = 1.0, .rows = 0};
    for (uint32_t s = 0; s < cpr_emb_num_shards(t); s++) {
        size_t n;
        uint64_t *ids = tl_select(t, s, CPR_POLICY_FULL, all, &n);
        assert_int_equal(n, cpr_emb_shard_rows(t, s));
        float *vals = tl_calloc(n * dim, sizeof *vals);
        float *stv = sd ? tl_calloc(n * sd, sizeof *stv) : NULL;
        tl_gather_ids(t, s, CPR_POLICY_FULL, ids, n, vals, stv);
        for (size_t i = 0; i < n; i++) {
            memcpy(w + ids[i] * dim, vals + i * dim, dim * sizeof *w);
            if (sd && st)
                memcpy(st + ids[i] * sd, stv + i * sd, sd * sizeof *st);
        }
        free(stv);
        free(vals);
        free(ids);
    }
}

/* ---- batches ---------------------------------------------------------------- */

typedef struct tl_batch {
    int64_t *idx;
    size_t n_idx;
    int64_t *off;
    size_t n_bags;
    float *grad; /* n_bags x dim */
} tl_batch;

/* n_bags bags of 0..max_bag indices (so empty bags occur); with skew > 1 a
 * few rows are hot (repeats within and across bags), spread over the table
 * by a multiplicative permutation so every shard gets hot rows. */
static inline void tl_batch_random(tl_batch *b, tl_rng *r, uint64_t rows, uint32_t dim,
                                   size_t n_bags, size_t max_bag, double skew)
{
    b->n_bags = n_bags;
    b->off = tl_calloc(n_bags, sizeof *b->off);
    b->idx = tl_calloc(n_bags * max_bag, sizeof *b->idx);
    b->grad = tl_calloc(n_bags * dim, sizeof *b->grad);
    b->n_idx = 0;
    for (size_t i = 0; i < n_bags; i++) {
        size_t len = (size_t)tl_below(r, max_bag + 1);
        b->off[i] = (int64_t)b->n_idx;
        for (size_t k = 0; k < len; k++) {
            uint64_t hot = (uint64_t)((double)rows * pow(tl_unif(r), skew));
            if (hot >= rows)
                hot = rows - 1;
            b->idx[b->n_idx++] = (int64_t)((hot * 7919u + 13u) % rows);
        }
    }
    for (size_t i = 0; i < n_bags * dim; i++)
        b->grad[i] = tl_sym(r);
}

static inline void tl_batch_free(tl_batch *b)
{
    free(b->idx);
    free(b->off);
    free(b->grad);
    memset(b, 0, sizeof *b);
}

static inline size_t tl_bag_end(const tl_batch *b, size_t bag)
{
    return bag + 1 < b->n_bags ? (size_t)b->off[bag + 1] : b->n_idx;
}

/* ---- reference model ------------------------------------------------------------ */

/* out[b] = sum/mean of w rows of bag b, in double. */
static inline void tl_ref_forward(const float *w, uint32_t dim, const tl_batch *b,
                                  cpr_pooling pooling, double *out)
{
    for (size_t bag = 0; bag < b->n_bags; bag++) {
        size_t lo = (size_t)b->off[bag], hi = tl_bag_end(b, bag);
        for (uint32_t j = 0; j < dim; j++) {
            double acc = 0;
            for (size_t i = lo; i < hi; i++)
                acc += w[(size_t)b->idx[i] * dim + j];
            if (pooling == CPR_POOL_MEAN && hi > lo)
                acc /= (double)(hi - lo);
            out[bag * dim + j] = acc;
        }
    }
}

/* Per-row summed gradient G (rows x dim, zeroed here) and occurrences. */
static inline void tl_ref_row_grads(const tl_batch *b, uint64_t rows, uint32_t dim,
                                    cpr_pooling pooling, double *G, uint64_t *occ)
{
    memset(G, 0, (size_t)rows * dim * sizeof *G);
    memset(occ, 0, (size_t)rows * sizeof *occ);
    for (size_t bag = 0; bag < b->n_bags; bag++) {
        size_t lo = (size_t)b->off[bag], hi = tl_bag_end(b, bag);
        double scale = pooling == CPR_POOL_MEAN && hi > lo ? 1.0 / (double)(hi - lo) : 1.0;
        for (size_t i = lo; i < hi; i++) {
            uint64_t row = (uint64_t)b->idx[i];
            occ[row]++;
            for (uint32_t j = 0; j < dim; j++)
                G[row * dim + j] += scale * b->grad[bag * dim + j];
        }
    }
}

/* One optimizer step per used row, in double, written back to w/st:
 *   SGD               w -= lr G
 *   row-wise Adagrad  s += mean_j G_j^2;  w -= lr G / (sqrt(s) + eps)
 *   Adagrad           s_j += G_j^2;       w_j -= lr G_j / (sqrt(s_j) + eps) */
static inline void tl_ref_step(cpr_optimizer opt, double lr, double eps, uint64_t rows,
                               uint32_t dim, const double *G, const uint64_t *occ, float *w,
                               float *st)
{
    for (uint64_t r = 0; r < rows; r++) {
        if (!occ[r])
            continue;
        const double *g = G + r * dim;
        float *wr = w + r * dim;
        if (opt == CPR_OPT_ROWWISE_ADAGRAD) {
            double sq = 0;
            for (uint32_t j = 0; j < dim; j++)
                sq += g[j] * g[j];
            double s = (double)st[r] + sq / dim;
            st[r] = (float)s;
            for (uint32_t j = 0; j < dim; j++)
                wr[j] = (float)((double)wr[j] - lr * g[j] / (sqrt(s) + eps));
        } else if (opt == CPR_OPT_ADAGRAD) {
            for (uint32_t j = 0; j < dim; j++) {
                double s = (double)st[r * dim + j] + g[j] * g[j];
                st[r * dim + j] = (float)s;
                wr[j] = (float)((double)wr[j] - lr * g[j] / (sqrt(s) + eps));
            }
        } else {
            for (uint32_t j = 0; j < dim; j++)
                wr[j] = (float)((double)wr[j] - lr * g[j]);
        }
    }
}

/* |got - want| <= rel |want| + abs for every element. */
static inline void tl_assert_close(const float *got, const double *want, size_t n, double rel,
                                   double abs_tol, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= rel * fabs(want[i]) + abs_tol))
            fail_msg("%s[%zu]: got %.9g, want %.9g (diff %.3g)", what, i, (double)got[i],
                     want[i], d);
    }
}

static inline void tl_assert_close_f(const float *got, const float *want, size_t n, double rel,
                                     double abs_tol, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= rel * fabs((double)want[i]) + abs_tol))
            fail_msg("%s[%zu]: got %.9g, want %.9g (diff %.3g)", what, i, (double)got[i],
                     (double)want[i], d);
    }
}

#endif /* CPR_EMB_TESTLIB_H */
