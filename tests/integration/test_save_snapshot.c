/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A save is a snapshot (issue #9): the rows a trainer stages with
 * cpr_part_put_gather straight from a CPU table (cpr_emb_view) are the rows
 * that commit, bit for bit, although training goes on updating the table
 * between the put and the commit; with and without defer_send, over
 * local:// and a real ckptd. Policies FULL and MFU (a subset of rows).
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
#include "cpr/embedding.h"
#include "cpr/rng.h"
#include "testutil.h"

#define ROWS 6000
#define DIM 16
#define BAGS 256

static cpr_emb *make_table(void)
{
    cpr_emb_config cfg = {.rows = ROWS, .dim = DIM, .optimizer = CPR_OPT_ROWWISE_ADAGRAD,
                          .learning_rate = 0.05f, .seed = 3, .num_shards = 1,
                          .track = CPR_TRACK_ALL};
    cpr_emb *t = NULL;
    assert_status(CPR_OK, cpr_emb_create(&cfg, &t));
    return t;
}

/* `batches` batches of 4 indices a bag over the hot first half of the table. */
static void train(cpr_emb *t, int batches, uint64_t seed)
{
    int64_t idx[BAGS * 4], off[BAGS];
    static float grad[BAGS * DIM], out[BAGS * DIM];
    for (int b = 0; b < batches; b++) {
        for (size_t i = 0; i < BAGS * 4; i++)
            idx[i] = (int64_t)(cpr_splitmix64(&seed) % (ROWS / 2));
        for (size_t i = 0; i < BAGS; i++)
            off[i] = (int64_t)(i * 4);
        for (size_t i = 0; i < BAGS * DIM; i++)
            grad[i] = (float)(cpr_splitmix64(&seed) % 1000) * 1e-3f - 0.5f;
        assert_status(CPR_OK, cpr_emb_forward(t, idx, BAGS * 4, off, BAGS, CPR_POOL_SUM, out));
        assert_status(CPR_OK, cpr_emb_backward(t, idx, BAGS * 4, off, BAGS, CPR_POOL_SUM, grad));
    }
}

static void snapshot_once(cpr_client *c, cpr_emb *t, cpr_policy policy, uint64_t ckpt)
{
    uint64_t *ids = malloc(ROWS * sizeof *ids);
    size_t n = 0;
    cpr_budget budget = {.fraction = 0.1};
    assert_status(CPR_OK, cpr_emb_select(t, 0, policy, budget, ids, ROWS, &n));
    assert_true(n > 0);
    cpr_emb_save *save = NULL;
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, policy, ids, n, &save));
    cpr_table_schema schema = {0, ROWS, DIM, 1};
    cpr_part_spec spec = {.id = {"snap", 0, ckpt},
                          .kind = policy == CPR_POLICY_FULL ? CPR_KIND_FULL : CPR_KIND_PRIORITY,
                          .step = ckpt, .num_shards = 1, .tables = &schema, .n_tables = 1};
    cpr_part *p = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    cpr_emb_host_view view;
    assert_status(CPR_OK, cpr_emb_view(t, &view));
    cpr_gather g = {.table = 0, .n = n, .ids = cpr_emb_save_ids(save), .values = view.values,
                    .values_stride = view.values_stride, .state = view.state,
                    .state_stride = view.state_stride};
    assert_status(CPR_OK, cpr_part_put_gather(p, &g));
    /* The snapshot as the table holds it now, then training goes on. */
    float *want = malloc(n * DIM * sizeof *want), *want_state = malloc(n * sizeof *want_state);
    assert_status(CPR_OK, cpr_emb_gather(t, save, want, want_state));
    train(t, 8, ckpt * 977);
    float *now = malloc(n * DIM * sizeof *now), *now_state = malloc(n * sizeof *now_state);
    assert_status(CPR_OK, cpr_emb_gather(t, save, now, now_state));
    assert_true(memcmp(now, want, n * DIM * sizeof *now) != 0); /* training did move them */
    assert_status(CPR_OK, cpr_part_commit(&p));
    assert_status(CPR_OK, cpr_emb_save_commit(t, save));
    /* What committed is the snapshot, bit for bit. */
    float *got = calloc((size_t)ROWS * DIM, sizeof *got), *got_state = calloc(ROWS, sizeof *got_state);
    uint8_t *seen = calloc(ROWS, 1);
    cpr_restore_query q = {.job = "snap", .as_of = ckpt};
    cpr_restore_into into = {0, 0, ROWS, DIM, 1, got, got_state, seen};
    cpr_restore_result res;
    assert_status(CPR_OK, cpr_client_restore_table(c, &q, NULL, 0, &into, &res));
    for (size_t i = 0; i < n; i++) {
        uint64_t r = ids[i];
        assert_true(seen[r]);
        if (memcmp(got + r * DIM, want + i * DIM, DIM * sizeof(float)) != 0 ||
            memcmp(got_state + r, want_state + i, sizeof(float)) != 0)
            fail_msg("%s save, row %llu: the committed row is not the snapshot",
                     cpr_policy_name(policy), (unsigned long long)r);
    }
    free(ids);
    free(want);
    free(want_state);
    free(now);
    free(now_state);
    free(got);
    free(got_state);
    free(seen);
}

static void snapshots(const char *target, int defer)
{
    cpr_client_options o = {.defer_send = defer};
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    cpr_emb *t = make_table();
    train(t, 16, 1);
    snapshot_once(c, t, CPR_POLICY_FULL, 1);
    train(t, 4, 2);
    snapshot_once(c, t, CPR_POLICY_MFU, 2);
    cpr_emb_destroy(t);
    cpr_client_close(c);
}

static void snapshots_in(const char *target, void *defer)
{
    snapshots(target, *(const int *)defer);
}

static void test_snapshot(void **state)
{
    (void)state;
    for (int defer = 0; defer < 2; defer++)
        ch_each_transport(snapshots_in, &defer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
