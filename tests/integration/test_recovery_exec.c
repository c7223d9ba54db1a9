/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The recovery executor (cpr_recovery_execute) end to end against a real
 * ckptd with CPU embedding tables, saved as a trainer saves them (select,
 * save_begin, gather, put through cpr_client, commit, save_commit):
 *   - four shards, two RANGE tables of different sizes (so one query per
 *     shard also returns rows other shards own: they must be skipped), FULL
 *     then DELTA (a cut), PRIORITY, and DELTA of two shards; more training;
 *     a shard wiped. PARTIAL: the failed shard's rows equal their newest
 *     committed versions bit for bit, every other shard is untouched, and
 *     the dense blob of the plan comes back. FULL: every shard equals the
 *     consistent cut bit for bit, and training rewinds to the cut's step.
 *   - MODULO tables, a shard whose only part is PRIORITY: restored rows
 *     equal what was saved, rows never committed keep the caller's values;
 *     a table not given, a dim that differs, a shard count that differs and
 *     a table given twice are refused with CPR_INVALID_ARGUMENT naming the
 *     cause; a restart-from-scratch plan touches nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/client.h"
#include "cpr/recovery.h"
#include "emb_testlib.h"
#include "testutil.h"

#define JOB "exec"
#define MAX_TABLES 2

/* A table of the job, with the newest committed version of every row. */
typedef struct model {
    uint32_t id;
    cpr_emb *emb;
    uint64_t rows;
    uint32_t dim, sdim;
    float *saved_v, *saved_s;  /* rows x dim, rows x sdim: as committed */
    uint8_t *saved;            /* rows: 1 once some part committed the row */
} model;

static void model_init(model *m, uint32_t id, const cpr_emb_config *cfg)
{
    m->id = id;
    m->emb = tl_create(cfg);
    m->rows = cfg->rows;
    m->dim = cpr_emb_dim(m->emb);
    m->sdim = cpr_emb_state_dim(m->emb);
    m->saved_v = tl_calloc(m->rows * m->dim, sizeof(float));
    m->saved_s = tl_calloc(m->rows * m->sdim + 1, sizeof(float));
    m->saved = tl_calloc(m->rows, 1);
}

static void model_free(model *m)
{
    cpr_emb_destroy(m->emb);
    free(m->saved_v);
    free(m->saved_s);
    free(m->saved);
}

/* Every row of the table now: values, then state. */
typedef struct snap {
    float *v, *s;
} snap;

static snap take(const model *m)
{
    snap x = {tl_calloc(m->rows * m->dim, sizeof(float)),
              tl_calloc(m->rows * m->sdim + 1, sizeof(float))};
    tl_read_all(m->emb, x.v, m->sdim ? x.s : NULL);
    return x;
}

static void snap_free(snap *x)
{
    free(x->v);
    free(x->s);
}

/* Row `row` of the table is bit for bit (v, s). */
static void assert_row(const model *m, const snap *now, uint64_t row, const float *v,
                       const float *s, const char *what)
{
    if (memcmp(now->v + row * m->dim, v + row * m->dim, m->dim * sizeof(float)) != 0 ||
        memcmp(now->s + row * m->sdim, s + row * m->sdim, m->sdim * sizeof(float)) != 0)
        fail_msg("table %u row %llu (shard %u) is not %s", m->id, (unsigned long long)row,
                 cpr_emb_shard_of(m->emb, row), what);
}

static void train(model *ms, size_t n, tl_rng *rng, int steps)
{
    for (int step = 0; step < steps; step++)
        for (size_t t = 0; t < n; t++) {
            tl_batch b;
            tl_batch_random(&b, rng, ms[t].rows, ms[t].dim, 16, 6, 2.0);
            assert_status(CPR_OK, cpr_emb_backward(ms[t].emb, b.idx, b.n_idx, b.off, b.n_bags,
                                                   CPR_POOL_SUM, b.grad));
            tl_batch_free(&b);
        }
}

static unsigned char dense_byte(uint32_t shard, uint64_t ckpt, size_t i)
{
    return (unsigned char)(i * 131u + shard * 17u + ckpt * 7u);
}

#define DENSE_BYTES 3000

/* One table's rows of a save: selected, begun, gathered, queued. */
typedef struct table_save {
    cpr_emb_save *save;
    uint64_t *ids;
    float *v, *s;
    size_t n;
} table_save;

static void save_table(model *m, cpr_part *p, uint32_t shard, cpr_policy policy,
                       table_save *ts)
{
    ts->ids = tl_select(m->emb, shard, policy, (cpr_budget){.fraction = 0.25}, &ts->n);
    ts->v = tl_calloc(ts->n * m->dim, sizeof(float));
    ts->s = tl_calloc(ts->n * m->sdim + 1, sizeof(float));
    assert_status(CPR_OK, cpr_emb_save_begin(m->emb, shard, policy, ts->ids, ts->n, &ts->save));
    assert_status(CPR_OK, cpr_emb_gather(m->emb, ts->save, ts->v, m->sdim ? ts->s : NULL));
    cpr_row_batch b = {.table = m->id, .n = ts->n, .ids = ts->ids, .values = ts->v,
                       .values_count = ts->n * m->dim, .state = m->sdim ? ts->s : NULL,
                       .state_count = ts->n * m->sdim};
    if (ts->n)
        assert_status(CPR_OK, cpr_part_put_rows(p, &b));
}

/* The part committed: the rows are saved, and are now the newest versions. */
static void table_saved(model *m, table_save *ts)
{
    assert_status(CPR_OK, cpr_emb_save_commit(m->emb, ts->save));
    for (size_t i = 0; i < ts->n; i++) {
        memcpy(m->saved_v + ts->ids[i] * m->dim, ts->v + i * m->dim, m->dim * sizeof(float));
        memcpy(m->saved_s + ts->ids[i] * m->sdim, ts->s + i * m->sdim, m->sdim * sizeof(float));
        m->saved[ts->ids[i]] = 1;
    }
    free(ts->ids);
    free(ts->v);
    free(ts->s);
}

/* Save `shard` of every table as one part, as a trainer does. */
static void save_shard(cpr_client *c, model *ms, size_t n, uint32_t shard, uint32_t num_shards,
                       uint64_t ckpt, cpr_kind kind)
{
    cpr_policy policy = kind == CPR_KIND_FULL    ? CPR_POLICY_FULL
                        : kind == CPR_KIND_DELTA ? CPR_POLICY_DELTA
                                                 : CPR_POLICY_MFU;
    cpr_table_schema schema[MAX_TABLES];
    for (size_t t = 0; t < n; t++)
        schema[t] = (cpr_table_schema){ms[t].id, ms[t].rows, ms[t].dim, ms[t].sdim};
    cpr_part_spec spec = tu_part(JOB, shard, num_shards, ckpt, kind, schema, n);
    cpr_part *p;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    table_save ts[MAX_TABLES];
    for (size_t t = 0; t < n; t++)
        save_table(&ms[t], p, shard, policy, &ts[t]);
    unsigned char dense[DENSE_BYTES];
    for (size_t i = 0; i < sizeof dense; i++)
        dense[i] = dense_byte(shard, ckpt, i);
    assert_status(CPR_OK, cpr_part_put_blob(p, "dense", dense, sizeof dense));
    assert_status(CPR_OK, cpr_part_commit(&p));
    for (size_t t = 0; t < n; t++)
        table_saved(&ms[t], &ts[t]);
}

static cpr_recovery_plan *plan_for(cpr_client *c, uint32_t num_shards, cpr_recovery_mode mode,
                                   uint32_t failed)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_client_list(c, JOB, &parts, &n));
    cpr_plan_request r = {.parts = parts, .n_parts = n, .num_shards = num_shards,
                          .failed = &failed, .n_failed = mode == CPR_RECOVERY_PARTIAL,
                          .mode = mode};
    cpr_recovery_plan *plan = NULL;
    assert_status(CPR_OK, cpr_recovery_plan_make(&r, &plan));
    free(parts);
    return plan;
}

static void assert_dense(const cpr_exec_report *rep, uint32_t shard, uint64_t ckpt)
{
    assert_int_equal(rep->dense, CPR_DENSE_BLOB);
    assert_int_equal(rep->dense_shard, shard);
    assert_int_equal(rep->dense_checkpoint, ckpt);
    assert_int_equal(rep->dense_len, DENSE_BYTES);
    for (size_t i = 0; i < DENSE_BYTES; i++)
        if (((const unsigned char *)rep->dense_data)[i] != dense_byte(shard, ckpt, i))
            fail_msg("dense blob byte %zu differs", i);
}

static uint64_t row_bytes(const model *m)
{
    return 8 + 4 * (uint64_t)(m->dim + m->sdim);
}

/* ---- four shards, RANGE tables ----------------------------------------------------------- */

#define SHARDS 4

static void range_tables(model ms[2])
{
    cpr_emb_config a = {.rows = 1000, .dim = 8, .optimizer = CPR_OPT_ROWWISE_ADAGRAD,
                        .learning_rate = 0.05f, .seed = 11, .num_shards = SHARDS,
                        .scheme = CPR_SHARD_RANGE, .track = CPR_TRACK_COUNTS | CPR_TRACK_DIRTY};
    cpr_emb_config b = a;
    b.rows = 600;
    b.dim = 4;
    b.optimizer = CPR_OPT_ADAGRAD;
    b.seed = 12;
    model_init(&ms[0], 1, &a);
    model_init(&ms[1], 2, &b);
}

/* Checkpoints 1 FULL, 2 DELTA (the cut), 3 PRIORITY, 4 DELTA of shards 0-1,
 * with training between; returns the committed state at the cut. */
static void write_history(cpr_client *c, model *ms, tl_rng *rng, snap cut[2])
{
    static const cpr_kind kinds[4] = {CPR_KIND_FULL, CPR_KIND_DELTA, CPR_KIND_PRIORITY,
                                      CPR_KIND_DELTA};
    for (uint64_t ckpt = 1; ckpt <= 4; ckpt++) {
        train(ms, 2, rng, 3);
        for (uint32_t s = 0; s < SHARDS; s++)
            if (ckpt < 4 || s < 2)
                save_shard(c, ms, 2, s, SHARDS, ckpt, kinds[ckpt - 1]);
        if (ckpt != 2)
            continue;
        for (int t = 0; t < 2; t++) {
            cut[t].v = tl_calloc(ms[t].rows * ms[t].dim, sizeof(float));
            cut[t].s = tl_calloc(ms[t].rows * ms[t].sdim + 1, sizeof(float));
            memcpy(cut[t].v, ms[t].saved_v, ms[t].rows * ms[t].dim * sizeof(float));
            memcpy(cut[t].s, ms[t].saved_s, ms[t].rows * ms[t].sdim * sizeof(float));
        }
    }
    train(ms, 2, rng, 3); /* updates no checkpoint has */
}

static void check_partial(cpr_client *c, model *ms)
{
    const uint32_t failed = 1;
    snap live[2] = {take(&ms[0]), take(&ms[1])};
    for (int t = 0; t < 2; t++)
        assert_status(CPR_OK, cpr_emb_wipe_shard(ms[t].emb, failed, NULL));
    cpr_recovery_plan *plan = plan_for(c, SHARDS, CPR_RECOVERY_PARTIAL, failed);
    const cpr_plan_shard *e = cpr_recovery_plan_shard(plan, failed);
    assert_int_equal(e->source, CPR_SOURCE_STORE);
    assert_int_equal(e->as_of, 4);
    cpr_exec_table tables[2] = {{2, ms[1].emb}, {1, ms[0].emb}}; /* any order */
    cpr_exec_options opts = {.dense_blob = "dense", .batch_rows = 64};
    cpr_exec_report rep;
    assert_status(CPR_OK, cpr_recovery_execute(c, JOB, plan, tables, 2, &opts, &rep));
    assert_int_equal(rep.action, CPR_PLAN_PARTIAL);
    assert_int_equal(rep.n_shards, SHARDS);
    uint64_t rows = 250 + 150, bytes = 250 * row_bytes(&ms[0]) + 150 * row_bytes(&ms[1]);
    assert_int_equal(rep.shards[failed].rows, rows);
    assert_int_equal(rep.shards[failed].bytes, bytes);
    assert_int_equal(rep.shards[failed].as_of, 4);
    /* One query for both tables: [150, 300) of table 2 and [250, 500) of
     * table 1 ask rows 150-249 of table 1 and 300-499 of table 2 too. */
    assert_int_equal(rep.shards[failed].rows_skipped, 100 + 200);
    assert_true(rep.shards[failed].seconds >= 0 && rep.seconds >= rep.shards[failed].seconds);
    for (uint32_t s = 0; s < SHARDS; s++)
        if (s != failed)
            assert_true(rep.shards[s].source == CPR_SOURCE_KEEP && rep.shards[s].rows == 0);
    assert_int_equal(rep.rows, rows);
    assert_dense(&rep, 0, 4); /* no replica: shard 0's newest part */
    cpr_exec_report_release(&rep);
    for (int t = 0; t < 2; t++) {
        snap now = take(&ms[t]);
        for (uint64_t row = 0; row < ms[t].rows; row++) {
            if (cpr_emb_shard_of(ms[t].emb, row) == failed)
                assert_row(&ms[t], &now, row, ms[t].saved_v, ms[t].saved_s,
                           "its newest committed version");
            else
                assert_row(&ms[t], &now, row, live[t].v, live[t].s, "untouched");
        }
        snap_free(&now);
        snap_free(&live[t]);
    }
    cpr_recovery_plan_destroy(plan);
}

static void check_full(cpr_client *c, model *ms, snap cut[2])
{
    cpr_recovery_plan *plan = plan_for(c, SHARDS, CPR_RECOVERY_FULL, 0);
    assert_int_equal(cpr_recovery_plan_cut(plan), 2);
    cpr_exec_table tables[2] = {{1, ms[0].emb}, {2, ms[1].emb}};
    cpr_exec_options opts = {.dense_blob = "dense"};
    cpr_exec_report rep;
    assert_status(CPR_OK, cpr_recovery_execute(c, JOB, plan, tables, 2, &opts, &rep));
    assert_int_equal(rep.action, CPR_PLAN_FULL);
    assert_int_equal(rep.rewind_step, 200);
    assert_int_equal(rep.rows, 1000 + 600);
    assert_int_equal(rep.bytes, 1000 * row_bytes(&ms[0]) + 600 * row_bytes(&ms[1]));
    for (uint32_t s = 0; s < SHARDS; s++) {
        assert_int_equal(rep.shards[s].source, CPR_SOURCE_STORE);
        assert_int_equal(rep.shards[s].as_of, 2);
        assert_int_equal(rep.shards[s].rows, 250 + 150);
    }
    assert_dense(&rep, 0, 2);
    cpr_exec_report_release(&rep);
    for (int t = 0; t < 2; t++) {
        snap now = take(&ms[t]);
        for (uint64_t row = 0; row < ms[t].rows; row++)
            assert_row(&ms[t], &now, row, cut[t].v, cut[t].s, "as of the cut");
        snap_free(&now);
        snap_free(&cut[t]);
    }
    cpr_recovery_plan_destroy(plan);
}

static void test_range_partial_then_full(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-exec"), target[300];
    ch_daemon d;
    ch_start(&d, dir);
    snprintf(target, sizeof target, "grpc://%s", d.addr);
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    model ms[2];
    range_tables(ms);
    tl_rng rng = {42};
    snap cut[2];
    write_history(c, ms, &rng, cut);
    check_partial(c, ms);
    train(ms, 2, &rng, 2);
    check_full(c, ms, cut);
    for (int t = 0; t < 2; t++)
        model_free(&ms[t]);
    cpr_client_close(c);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* ---- MODULO tables, a PRIORITY-only shard, and refusals ----------------------------------- */

static void modulo_tables(model ms[2], uint32_t shards)
{
    cpr_emb_config a = {.rows = 90, .dim = 3, .optimizer = CPR_OPT_SGD, .seed = 5,
                        .num_shards = shards, .scheme = CPR_SHARD_MODULO,
                        .track = CPR_TRACK_COUNTS};
    cpr_emb_config b = a;
    b.rows = 50;
    b.dim = 2;
    b.optimizer = CPR_OPT_ROWWISE_ADAGRAD;
    b.seed = 6;
    model_init(&ms[0], 7, &a);
    model_init(&ms[1], 8, &b);
}

static void expect_refused(cpr_client *c, const cpr_recovery_plan *plan,
                           const cpr_exec_table *tables, size_t n, const char *says)
{
    cpr_exec_report rep = {.rows = 12345};
    assert_status(CPR_INVALID_ARGUMENT, cpr_recovery_execute(c, JOB, plan, tables, n, NULL, &rep));
    if (!strstr(cpr_errmsg(), says))
        fail_msg("the message does not say \"%s\": %s", says, cpr_errmsg());
    assert_int_equal(rep.rows, 12345); /* nothing reported */
}

static void refusals(cpr_client *c, const cpr_recovery_plan *plan, model *ms)
{
    cpr_exec_table only_first[1] = {{7, ms[0].emb}};
    expect_refused(c, plan, only_first, 1, "table 8");
    cpr_emb_config wide = {.rows = 50, .dim = 5, .num_shards = 3, .scheme = CPR_SHARD_MODULO,
                           .optimizer = CPR_OPT_ROWWISE_ADAGRAD};
    cpr_emb *w = tl_create(&wide);
    cpr_exec_table wrong_dim[2] = {{7, ms[0].emb}, {8, w}};
    expect_refused(c, plan, wrong_dim, 2, "dim 2");
    cpr_emb_destroy(w);
    cpr_emb_config halves = {.rows = 50, .dim = 2, .num_shards = 2, .scheme = CPR_SHARD_MODULO};
    cpr_emb *h = tl_create(&halves);
    cpr_exec_table wrong_shards[2] = {{7, ms[0].emb}, {8, h}};
    expect_refused(c, plan, wrong_shards, 2, "2 shards");
    cpr_emb_destroy(h);
    cpr_exec_table twice[2] = {{7, ms[0].emb}, {7, ms[0].emb}};
    expect_refused(c, plan, twice, 2, "twice");
}

static void test_modulo_priority_only(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-exec"), target[600];
    snprintf(target, sizeof target, "local://%s/store", dir);
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    model ms[2];
    modulo_tables(ms, 3);
    tl_rng rng = {7};
    train(ms, 2, &rng, 4);
    save_shard(c, ms, 2, 0, 3, 1, CPR_KIND_PRIORITY); /* shard 0 only, never a FULL */
    train(ms, 2, &rng, 4);
    snap live[2] = {take(&ms[0]), take(&ms[1])};
    for (int t = 0; t < 2; t++)
        assert_status(CPR_OK, cpr_emb_wipe_shard(ms[t].emb, 0, NULL));
    snap wiped[2] = {take(&ms[0]), take(&ms[1])};
    cpr_recovery_plan *plan = plan_for(c, 3, CPR_RECOVERY_PARTIAL, 0);
    assert_int_equal(cpr_recovery_plan_shard(plan, 0)->kind, CPR_KIND_PRIORITY);
    refusals(c, plan, ms); /* each may have written some rows first: run again below */

    cpr_exec_table tables[2] = {{7, ms[0].emb}, {8, ms[1].emb}};
    cpr_exec_report rep;
    assert_status(CPR_OK, cpr_recovery_execute(c, JOB, plan, tables, 2, NULL, &rep));
    assert_int_equal(rep.rows_skipped, 0); /* row % 3 selects exactly */
    assert_int_equal(rep.dense, CPR_DENSE_BLOB);
    assert_null(rep.dense_data); /* no dense_blob asked: the report names the part */
    uint64_t restored = 0;
    for (int t = 0; t < 2; t++) {
        snap now = take(&ms[t]);
        for (uint64_t row = 0; row < ms[t].rows; row++) {
            if (cpr_emb_shard_of(ms[t].emb, row) != 0) {
                assert_row(&ms[t], &now, row, live[t].v, live[t].s, "untouched");
                continue;
            }
            /* Rows never committed keep the caller's (wiped) values. */
            if (ms[t].saved[row]) {
                restored++;
                assert_row(&ms[t], &now, row, ms[t].saved_v, ms[t].saved_s, "as saved");
            } else {
                assert_row(&ms[t], &now, row, wiped[t].v, wiped[t].s, "as the caller left it");
            }
        }
        snap_free(&now);
        snap_free(&live[t]);
        snap_free(&wiped[t]);
    }
    assert_int_equal(rep.rows, restored);
    assert_true(restored > 0 && restored < 30 + 17); /* some, not all, of shard 0 */
    cpr_exec_report_release(&rep);
    cpr_recovery_plan_destroy(plan);

    /* No cut at all: restart from scratch, and the executor touches nothing. */
    plan = plan_for(c, 3, CPR_RECOVERY_FULL, 0);
    assert_int_equal(cpr_recovery_plan_action(plan), CPR_PLAN_RESTART_FROM_SCRATCH);
    snap before = take(&ms[0]);
    assert_status(CPR_OK, cpr_recovery_execute(c, JOB, plan, tables, 2, NULL, &rep));
    assert_int_equal(rep.rows, 0);
    assert_int_equal(rep.dense, CPR_DENSE_INIT);
    for (uint32_t s = 0; s < 3; s++)
        assert_int_equal(rep.shards[s].source, CPR_SOURCE_INIT);
    snap after = take(&ms[0]);
    assert_memory_equal(after.v, before.v, ms[0].rows * ms[0].dim * sizeof(float));
    snap_free(&before);
    snap_free(&after);
    cpr_exec_report_release(&rep);
    cpr_exec_report_release(NULL);
    cpr_recovery_plan_destroy(plan);

    for (int t = 0; t < 2; t++)
        model_free(&ms[t]);
    cpr_client_close(c);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_partial_then_full),
        cmocka_unit_test(test_modulo_priority_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
