/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CPU save is a copy-on-write snapshot (cpr_emb_save_copy, issue #9): the
 * rows it copies out are the rows as they were at cpr_emb_save_begin, bit
 * for bit, however training, restores (apply) and wipes changed the table
 * since, whether the copy runs on the training thread afterwards or on
 * another thread while training goes on. Every optimizer (state_dim 0, 1,
 * dim), both shard schemes, saves of several shards open at once.
 */
#include <pthread.h>
#include <sched.h>

#include "emb_testlib.h"

#define ROWS 3000
#define DIM 8

typedef struct snap_case {
    cpr_optimizer opt;
    cpr_shard_scheme scheme;
    uint32_t shards;
} snap_case;

static cpr_emb *make(const snap_case *c)
{
    cpr_emb_config cfg = {.rows = ROWS, .dim = DIM, .optimizer = c->opt,
                          .learning_rate = 0.05f, .seed = 9, .num_shards = c->shards,
                          .scheme = c->scheme, .track = CPR_TRACK_ALL};
    return tl_create(&cfg);
}

static void train(cpr_emb *t, tl_rng *r, int batches)
{
    for (int i = 0; i < batches; i++) {
        tl_batch b;
        float *out;
        tl_batch_random(&b, r, ROWS, DIM, 64, 6, 2.0);
        out = tl_calloc(b.n_bags * DIM, sizeof *out);
        assert_status(CPR_OK, cpr_emb_forward(t, b.idx, b.n_idx, b.off, b.n_bags,
                                              CPR_POOL_SUM, out));
        assert_status(CPR_OK, cpr_emb_backward(t, b.idx, b.n_idx, b.off, b.n_bags,
                                               CPR_POOL_SUM, b.grad));
        free(out);
        tl_batch_free(&b);
    }
}

/* One open save of `shard` and what it must copy out. */
typedef struct open_save {
    cpr_emb *t;
    cpr_emb_save *save;
    size_t n;
    float *want_v, *want_s;   /* at begin */
    float *got_v, *got_s;     /* copied out */
    uint64_t seed;
    int yield;                /* give the core away between pieces: the copy
                                 then spans the training thread's changes */
    cpr_status st;
} open_save;

static void open_one(open_save *o, cpr_emb *t, uint32_t shard, cpr_policy policy)
{
    uint32_t sd = cpr_emb_state_dim(t);
    uint64_t *ids = tl_select(t, shard, policy, (cpr_budget){.fraction = 0.5}, &o->n);
    assert_true(o->n > 0);
    o->t = t;
    assert_status(CPR_OK, cpr_emb_save_begin(t, shard, policy, ids, o->n, &o->save));
    o->want_v = tl_calloc(o->n * DIM, sizeof(float));
    o->want_s = tl_calloc(o->n * (sd ? sd : 1), sizeof(float));
    o->got_v = tl_calloc(o->n * DIM, sizeof(float));
    o->got_s = tl_calloc(o->n * (sd ? sd : 1), sizeof(float));
    /* The reference: a gather at begin (it does not release rows). */
    assert_status(CPR_OK, cpr_emb_gather(t, o->save, o->want_v, sd ? o->want_s : NULL));
    free(ids);
}

/* Copy the whole save out in pieces of random length. */
static void *copy_out(void *arg)
{
    open_save *o = arg;
    uint32_t sd = cpr_emb_state_dim(o->t);
    tl_rng r = {o->seed};
    for (size_t at = 0; at < o->n && o->st == CPR_OK;) {
        size_t k = 1 + (size_t)tl_below(&r, 97);
        k = k < o->n - at ? k : o->n - at;
        o->st = cpr_emb_save_copy(o->t, o->save, at, k, o->got_v + at * DIM,
                                  sd ? o->got_s + at * sd : NULL);
        at += k;
        if (o->yield)
            sched_yield();
    }
    return NULL;
}

static void check_and_close(open_save *o)
{
    uint32_t sd = cpr_emb_state_dim(o->t);
    assert_status(CPR_OK, o->st);
    if (memcmp(o->got_v, o->want_v, o->n * DIM * sizeof(float)) != 0)
        fail_msg("a copied row is not the row at the save's begin");
    if (sd)
        assert_memory_equal(o->got_s, o->want_s, o->n * sd * sizeof(float));
    /* Each row is copied out once. */
    assert_status(CPR_FAILED_PRECONDITION,
                  cpr_emb_save_copy(o->t, o->save, 0, 1, o->got_v, sd ? o->got_s : NULL));
    assert_status(CPR_OK, cpr_emb_save_commit(o->t, o->save));
    free(o->want_v), free(o->want_s), free(o->got_v), free(o->got_s);
}

/* Everything that changes rows, between begin and the copy. */
static void disturb(cpr_emb *t, tl_rng *r, uint32_t wipe_shard)
{
    uint32_t sd = cpr_emb_state_dim(t);
    uint64_t ids[40];
    float vals[40 * DIM], st[40 * DIM];
    train(t, r, 6);
    for (size_t i = 0; i < 40; i++) { /* a restore over rows of the open saves */
        ids[i] = i * 37 % ROWS;
        for (uint32_t j = 0; j < DIM; j++)
            vals[i * DIM + j] = st[i * DIM + j] = (float)i + 0.25f * (float)j;
    }
    assert_status(CPR_OK, cpr_emb_apply(t, ids, 40, vals, sd ? st : NULL));
    train(t, r, 3);
    assert_status(CPR_OK, cpr_emb_wipe_shard(t, wipe_shard, NULL));
    train(t, r, 3);
}

/* What the trackers say after the saves: the same whatever the copies'
 * timing (S5: a row's tracker values move once, before it changes). */
typedef struct fingerprint {
    cpr_emb_stats stats[4];
    uint64_t mfu_hash[4], topk_hash[4];
} fingerprint;

static uint64_t selection_hash(cpr_emb *t, uint32_t shard, cpr_policy policy)
{
    size_t n = 0;
    uint64_t *ids = tl_select(t, shard, policy, (cpr_budget){.fraction = 0.3}, &n), h = n;
    for (size_t i = 0; i < n; i++)
        h = h * 1000003u ^ ids[i];
    free(ids);
    return h;
}

static void take_fingerprint(cpr_emb *t, uint32_t shards, fingerprint *f)
{
    memset(f, 0, sizeof *f);
    for (uint32_t s = 0; s < shards && s < 4; s++) {
        f->stats[s] = tl_stats(t, s);
        f->mfu_hash[s] = selection_hash(t, s, CPR_POLICY_MFU);
        f->topk_hash[s] = selection_hash(t, s, CPR_POLICY_TOPK_NORM);
    }
}

static void run_case(const snap_case *c, int concurrent, fingerprint *fp)
{
    static const cpr_policy policies[] = {CPR_POLICY_FULL, CPR_POLICY_MFU, CPR_POLICY_DELTA};
    tl_rng r = {77 + (uint64_t)c->opt * 5 + c->scheme};
    cpr_emb *t = make(c);
    train(t, &r, 8);
    open_save o[4];
    pthread_t th[4];
    uint32_t n_open = c->shards < 4 ? c->shards : 4;
    for (uint32_t s = 0; s < n_open; s++) {
        open_one(&o[s], t, s, policies[s % 3]);
        o[s].seed = 1000 + s;
        o[s].yield = concurrent;
        o[s].st = CPR_OK;
    }
    if (concurrent) { /* copiers run while the table trains, restores and wipes */
        for (uint32_t s = 0; s < n_open; s++)
            assert_int_equal(0, pthread_create(&th[s], NULL, copy_out, &o[s]));
        disturb(t, &r, 0);
        for (uint32_t s = 0; s < n_open; s++)
            pthread_join(th[s], NULL);
    } else { /* everything changes first, then the copies */
        disturb(t, &r, 0);
        for (uint32_t s = 0; s < n_open; s++)
            copy_out(&o[s]);
    }
    for (uint32_t s = 0; s < n_open; s++)
        check_and_close(&o[s]);
    take_fingerprint(t, c->shards, fp);
    /* The table works on: a new save copies its own begin-time rows. */
    uint64_t events_at_begin = tl_stats(t, 0).update_events;
    open_one(&o[0], t, 0, CPR_POLICY_FULL);
    o[0].seed = 5;
    o[0].yield = 0;
    o[0].st = CPR_OK;
    train(t, &r, 2);
    copy_out(&o[0]);
    check_and_close(&o[0]);
    /* The FULL save covered every event before its begin, whoever moved its
     * rows' counts (the copy, or training before it): what is unsaved now
     * is exactly what came after. */
    cpr_emb_stats after = tl_stats(t, 0);
    assert_int_equal(after.unsaved_events, after.update_events - events_at_begin);
    cpr_emb_destroy(t);
}

static const snap_case CASES[] = {
    {CPR_OPT_SGD, CPR_SHARD_RANGE, 1},
    {CPR_OPT_ROWWISE_ADAGRAD, CPR_SHARD_RANGE, 3},
    {CPR_OPT_ADAGRAD, CPR_SHARD_MODULO, 4},
    {CPR_OPT_ROWWISE_ADAGRAD, CPR_SHARD_MODULO, 2},
};

static void test_copy_after_changes(void **unused)
{
    (void)unused;
    fingerprint fp;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        run_case(&CASES[i], 0, &fp);
}

static void test_copy_while_training(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        fingerprint want, got;
        run_case(&CASES[i], 0, &want);
        for (int round = 0; round < 5; round++) {
            run_case(&CASES[i], 1, &got);
            assert_memory_equal(&got, &want, sizeof got); /* trackers too */
        }
    }
}

/* A gather gives the begin-time rows every time, without releasing them;
 * a range outside the save is refused; an aborted save's copy is gone with
 * it (abort after copies returned is the contract). */
static void test_copy_rules(void **unused)
{
    (void)unused;
    snap_case c = {CPR_OPT_ROWWISE_ADAGRAD, CPR_SHARD_RANGE, 1};
    tl_rng r = {3};
    cpr_emb *t = make(&c);
    train(t, &r, 4);
    open_save o = {0};
    open_one(&o, t, 0, CPR_POLICY_MFU);
    train(t, &r, 4);
    float *again_v = tl_calloc(o.n * DIM, sizeof(float)), *again_s = tl_calloc(o.n, sizeof(float));
    assert_status(CPR_OK, cpr_emb_gather(t, o.save, again_v, again_s));
    assert_memory_equal(again_v, o.want_v, o.n * DIM * sizeof(float));
    assert_memory_equal(again_s, o.want_s, o.n * sizeof(float));
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_copy(t, o.save, o.n, 1, again_v, again_s));
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_copy(t, o.save, 0, 1, again_v, NULL));
    assert_status(CPR_INVALID_ARGUMENT, cpr_emb_save_copy(t, NULL, 0, 1, again_v, again_s));
    /* Half copied out: a gather of the whole save then refuses the released rows. */
    assert_status(CPR_OK, cpr_emb_save_copy(t, o.save, 0, o.n / 2, o.got_v, o.got_s));
    assert_status(CPR_FAILED_PRECONDITION, cpr_emb_gather(t, o.save, again_v, again_s));
    assert_memory_equal(o.got_v, o.want_v, (o.n / 2) * DIM * sizeof(float));
    cpr_emb_save_abort(t, o.save);
    free(o.want_v), free(o.want_s), free(o.got_v), free(o.got_s), free(again_v), free(again_s);
    cpr_emb_destroy(t);
}

/* A row restored (apply) while a save holding it is open equals a stored
 * copy: aborting the save must not give it back its counts, and a FULL save
 * of part of a shard leaves the other rows' trackers selectable. */
static void test_apply_and_partial_full(void **unused)
{
    (void)unused;
    snap_case c = {CPR_OPT_ROWWISE_ADAGRAD, CPR_SHARD_RANGE, 1};
    tl_rng r = {21};
    cpr_emb *t = make(&c);
    train(t, &r, 6);
    size_t n = 0;
    uint64_t *ids = tl_select(t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 0.05}, &n);
    assert_true(n >= 2);
    cpr_emb_save *save = NULL;
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_MFU, ids, n, &save));
    float v[DIM] = {0}, st[1] = {0};
    assert_status(CPR_OK, cpr_emb_apply(t, &ids[0], 1, v, st));
    cpr_emb_save_abort(t, save);
    size_t m = 0;
    uint64_t *after = tl_select(t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 1.0}, &m);
    for (size_t i = 0; i < m; i++)
        assert_true(after[i] != ids[0]); /* no count came back */
    int found = 0;
    for (size_t i = 0; i < m; i++)
        found |= after[i] == ids[1]; /* the other rows' did */
    assert_true(found);
    free(after);
    /* A FULL save of two rows: every other touched row stays selectable. */
    uint64_t two[2] = {ids[0] < ids[1] ? ids[0] : ids[1], ids[0] < ids[1] ? ids[1] : ids[0]};
    size_t before_n = 0;
    uint64_t *before = tl_select(t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 1.0}, &before_n);
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_FULL, two, 2, &save));
    assert_status(CPR_OK, cpr_emb_save_commit(t, save));
    uint64_t *rest = tl_select(t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 1.0}, &m);
    assert_int_equal(m, before_n - 1); /* ids[1] saved; ids[0] had no count already */
    free(rest);
    free(before);
    free(ids);
    cpr_emb_destroy(t);
}

/* A1: a row restored (apply) while a save holding it is open, when that
 * save commits: the save stored its copy from before, so the row is
 * tracked as updated and the next DELTA and MFU saves take it again. */
static void test_apply_then_commit_saves_the_row_again(void **unused)
{
    (void)unused;
    snap_case c = {CPR_OPT_ROWWISE_ADAGRAD, CPR_SHARD_RANGE, 1};
    tl_rng r = {22};
    cpr_emb *t = make(&c);
    train(t, &r, 6);
    size_t n = 0;
    uint64_t *ids = tl_select(t, 0, CPR_POLICY_DELTA, (cpr_budget){0}, &n);
    assert_true(n >= 2);
    cpr_emb_save *save = NULL;
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_DELTA, ids, n, &save));
    float v[DIM] = {42, 42, 42, 42, 42, 42, 42, 42}, st[1] = {1};
    assert_status(CPR_OK, cpr_emb_apply(t, &ids[1], 1, v, st));
    float *out = tl_calloc(n * DIM, sizeof *out), *sout = tl_calloc(n, sizeof *sout);
    assert_status(CPR_OK, cpr_emb_save_copy(t, save, 0, n, out, sout));
    assert_true(out[DIM] != 42.0f); /* the save holds the row from before */
    assert_status(CPR_OK, cpr_emb_save_commit(t, save));
    for (int p = 0; p < 2; p++) {
        cpr_policy pol = p ? CPR_POLICY_MFU : CPR_POLICY_DELTA;
        size_t m = 0;
        uint64_t *next = tl_select(t, 0, pol, (cpr_budget){.fraction = 1.0}, &m);
        assert_int_equal(m, 1); /* that row only: the others were saved as they are */
        assert_int_equal(next[0], ids[1]);
        free(next);
    }
    free(out);
    free(sout);
    free(ids);
    cpr_emb_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_after_changes),
        cmocka_unit_test(test_copy_while_training),
        cmocka_unit_test(test_copy_rules),
        cmocka_unit_test(test_apply_and_partial_full),
        cmocka_unit_test(test_apply_then_commit_saves_the_row_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
