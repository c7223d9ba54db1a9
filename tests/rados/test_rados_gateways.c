/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd with its store in Ceph RADOS (--backend rados), end to end on the
 * test cluster (tests/CMakeLists.txt, fixture "ceph"):
 *  - node loss: a job saved through ckptd A; A's directory deleted; ckptd B
 *    on an empty directory, pointed at the pool, restores every committed
 *    row and blob exactly, lists the same parts, and serves the recovery
 *    record with the same generation and plan;
 *  - two ckptd gateways on one pool racing on a job's recovery record: one
 *    winner per generation, and both serve the winner's plan;
 *  - one client given both gateways: each part counted once in lists and
 *    restores, and cpr_client_where names the pool's objects.
 * Exits 77 when the cluster is not there.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/client.h"
#include "testutil.h"

static const char *g_conf;

/* ckptd on `dir` with its store in namespace `ns` of the test pool. */
static void start_gateway(ch_daemon *d, const char *dir, const char *ns)
{
    const char *const args[] = {"--backend", "rados", "--rados-pool", "cpr",
                                "--rados-conf", g_conf, "--rados-namespace", ns, NULL};
    ch_start_args(d, dir, args);
}

static void unique_ns(char *out, size_t cap, const char *what)
{
    snprintf(out, cap, "%s-%d-%ld", what, (int)getpid(), (long)time(NULL));
}

#define SHARDS 2
#define ROWS 3000
#define BLOB_BYTES ((5u << 20) / 2 + 12345) /* blocks of 1 MiB, the last partial */

static uint8_t *make_blob(void)
{
    uint8_t *b = malloc(BLOB_BYTES);
    assert_non_null(b);
    for (size_t i = 0; i < BLOB_BYTES; i++)
        b[i] = tu_blob_byte(0, 1, i);
    return b;
}

static void test_node_loss(void **unused)
{
    (void)unused;
    char ns[64], target[300];
    unique_ns(ns, sizeof ns, "nodeloss");
    char *dir_a = tu_mkdtemp("cpr-rados-a");
    ch_daemon a, b;
    cpri_rpc *rpc;
    start_gateway(&a, dir_a, ns);
    assert_status(CPR_OK, cpri_rpc_open(a.addr, &rpc));
    /* Two checkpoints of two shards: FULL at 1, FULL at 2 over fewer rows. */
    for (uint64_t ckpt = 1; ckpt <= 2; ckpt++)
        for (uint32_t s = 0; s < SHARDS; s++) {
            cpr_part_id id = {"loss", s, ckpt};
            size_t n = ckpt == 1 ? ROWS : ROWS / 3;
            assert_status(CPR_OK, ch_begin_part(rpc, "loss", s, SHARDS, ckpt, CPR_KIND_FULL));
            assert_status(CPR_OK, ch_put_rows(rpc, &id, (uint64_t)s * ROWS, n, 0, NULL, NULL));
            if (ckpt == 1 && s == 0) { /* the dense part, as a blob */
                uint8_t *blob = make_blob();
                assert_status(CPR_OK, ch_put_blob(rpc, &id, ch_lease_of(&id), blob, BLOB_BYTES));
                free(blob);
            }
            assert_status(CPR_OK, ch_commit(rpc, &id, n));
        }
    uint64_t rows = 0;
    int bad = 0;
    assert_status(CPR_OK, ch_restore(rpc, "loss", 1, 1, &rows, &bad));
    assert_int_equal(rows, SHARDS * ROWS);
    assert_false(bad);
    cpri_rpc_close(rpc);
    cpr_client *c;
    uint64_t gen = 0;
    snprintf(target, sizeof target, "grpc://%s", a.addr);
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    assert_status(CPR_OK, cpr_client_recovery_put(c, "loss", 0, "first", 5, &gen));
    assert_status(CPR_OK, cpr_client_recovery_put(c, "loss", 1, "partial:1", 9, &gen));
    assert_int_equal(gen, 2);
    cpr_client_close(c);
    ch_stop(&a);
    tu_rmtree(dir_a); /* the node's disk is gone */
    free(dir_a);

    char *dir_b = tu_mkdtemp("cpr-rados-b");
    start_gateway(&b, dir_b, ns);
    assert_status(CPR_OK, cpri_rpc_open(b.addr, &rpc));
    size_t n_parts = 0, open_parts = 0;
    int has = 0;
    assert_status(CPR_OK, ch_list(rpc, "loss", &n_parts, 2, &has, &open_parts));
    assert_int_equal(n_parts, 2 * SHARDS);
    assert_true(has);
    rows = 0;
    bad = 0;
    assert_status(CPR_OK, ch_restore(rpc, "loss", 1, 1, &rows, &bad)); /* as of 1 */
    assert_int_equal(rows, SHARDS * ROWS);
    assert_false(bad);
    cpr_part_id dense = {"loss", 0, 1};
    uint8_t *want = make_blob(), *got = NULL;
    size_t got_len = 0;
    assert_status(CPR_OK, ch_get_blob(rpc, &dense, &got, &got_len));
    assert_int_equal(got_len, BLOB_BYTES);
    assert_memory_equal(got, want, BLOB_BYTES);
    free(got);
    free(want);
    cpri_rpc_close(rpc);
    snprintf(target, sizeof target, "grpc://%s", b.addr);
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    void *plan = NULL;
    size_t len = 0;
    assert_status(CPR_OK, cpr_client_recovery_get(c, "loss", &gen, &plan, &len));
    assert_int_equal(gen, 2);
    assert_int_equal(len, 9);
    assert_memory_equal(plan, "partial:1", 9);
    free(plan);
    /* ... and B goes on from there: the next generation is 3. */
    assert_status(CPR_FAILED_PRECONDITION, cpr_client_recovery_put(c, "loss", 1, "x", 1, &gen));
    assert_status(CPR_OK, cpr_client_recovery_put(c, "loss", 2, "full", 4, &gen));
    assert_int_equal(gen, 3);
    cpr_client_close(c);
    ch_stop(&b);
    tu_rmtree(dir_b);
    free(dir_b);
}

/* ---- two gateways racing on the recovery record --------------------------------- */

#define ROUNDS 10

typedef struct racer {
    cpr_client *client;
    pthread_barrier_t *barrier;
    char name;
    cpr_status got[ROUNDS];
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    for (uint64_t round = 0; round < ROUNDS; round++) {
        char plan[16];
        int len = snprintf(plan, sizeof plan, "%c-%llu", r->name, (unsigned long long)round);
        uint64_t gen = 0;
        pthread_barrier_wait(r->barrier);
        r->got[round] = cpr_client_recovery_put(r->client, "race", round, plan, (size_t)len, &gen);
        if (r->got[round] == CPR_OK && gen != round + 1)
            r->got[round] = CPR_INTERNAL;
        pthread_barrier_wait(r->barrier);
    }
    return NULL;
}

static void test_two_gateways_race(void **unused)
{
    (void)unused;
    char ns[64], target[2][300];
    unique_ns(ns, sizeof ns, "race");
    char *dir[2] = {tu_mkdtemp("cpr-rados-g0"), tu_mkdtemp("cpr-rados-g1")};
    ch_daemon d[2];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    racer r[2] = {{.barrier = &barrier, .name = 'A'}, {.barrier = &barrier, .name = 'B'}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        start_gateway(&d[i], dir[i], ns);
        snprintf(target[i], sizeof target[i], "grpc://%s", d[i].addr);
        assert_status(CPR_OK, cpr_client_open(target[i], NULL, &r[i].client));
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&barrier);
    unsigned wins[2] = {0, 0};
    char last[16] = "";
    for (uint64_t round = 0; round < ROUNDS; round++) {
        int a = r[0].got[round] == CPR_OK, b = r[1].got[round] == CPR_OK;
        if (a + b != 1)
            fail_msg("round %llu: %s and %s (one winner wanted)", (unsigned long long)round,
                     cpr_status_name(r[0].got[round]), cpr_status_name(r[1].got[round]));
        assert_int_equal(r[a ? 1 : 0].got[round], CPR_FAILED_PRECONDITION);
        wins[a ? 0 : 1]++;
        snprintf(last, sizeof last, "%c-%llu", a ? 'A' : 'B', (unsigned long long)round);
    }
    print_message("  %d rounds through two gateways: A won %u, B won %u\n", ROUNDS, wins[0],
                  wins[1]);
    /* Both gateways serve the last winner's plan at generation ROUNDS. */
    for (int i = 0; i < 2; i++) {
        uint64_t gen = 0;
        void *plan = NULL;
        size_t len = 0;
        assert_status(CPR_OK, cpr_client_recovery_get(r[i].client, "race", &gen, &plan, &len));
        assert_int_equal(gen, ROUNDS);
        assert_int_equal(len, strlen(last));
        assert_memory_equal(plan, last, len);
        free(plan);
        cpr_client_close(r[i].client);
        ch_stop(&d[i]);
        tu_rmtree(dir[i]);
        free(dir[i]);
    }
}

/* ---- one client, two gateways of one namespace --------------------------------- */

#define GW_SHARDS 4
#define GW_ROWS 500 /* per shard */

static const cpr_table_schema GW_T[] = {{.table = 0, .rows = GW_SHARDS * GW_ROWS, .dim = 8,
                                         .state_dim = 1}};

typedef struct seen_rows {
    unsigned count[GW_SHARDS * GW_ROWS];
    size_t total;
    int wrong;
} seen_rows;

static cpr_status see_row(void *ctx, const cpr_row_batch *b)
{
    seen_rows *s = ctx;
    for (size_t i = 0; i < b->n; i++) {
        uint64_t id = b->ids ? b->ids[i] : b->range_begin + i;
        if (id >= GW_SHARDS * GW_ROWS)
            return CPR_INTERNAL;
        s->count[id]++;
        s->total++;
        for (uint32_t k = 0; k < GW_T[0].dim; k++)
            s->wrong += b->values[i * GW_T[0].dim + k] != tu_value(0, id, 1, k);
    }
    return CPR_OK;
}

/* A client given both gateways writes each shard through the one placement
 * picks; both gateways then list every part, and the client counts each
 * once (ListResponse.store names the shared store): no part is "misplaced",
 * a restore delivers every row once, and cpr_client_where names the pool's
 * objects through either gateway. */
static void test_client_over_two_gateways(void **unused)
{
    (void)unused;
    char ns[64], target[700];
    unique_ns(ns, sizeof ns, "client");
    char *dir[2] = {tu_mkdtemp("cpr-rados-c0"), tu_mkdtemp("cpr-rados-c1")};
    ch_daemon d[2];
    for (int i = 0; i < 2; i++)
        start_gateway(&d[i], dir[i], ns);
    snprintf(target, sizeof target, "grpc://%s,%s", d[0].addr, d[1].addr);
    cpr_client *c = NULL;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    unsigned on[2] = {0, 0};
    for (uint32_t s = 0; s < GW_SHARDS; s++) {
        cpr_part_spec spec = tu_part("gw", s, GW_SHARDS, 1, CPR_KIND_FULL, GW_T, 1);
        cpr_part *part = NULL;
        uint64_t ids[GW_ROWS];
        tu_iota(ids, (uint64_t)s * GW_ROWS, GW_ROWS);
        tu_batch b;
        tu_batch_make(&b, &GW_T[0], ids, GW_ROWS, 1);
        assert_status(CPR_OK, cpr_client_begin(c, &spec, &part));
        assert_status(CPR_OK, cpr_part_put_rows(part, &b.batch));
        assert_status(CPR_OK, cpr_part_commit(&part));
        tu_batch_free(&b);
        on[cpr_client_node_of(c, "gw", s)]++;
    }
    print_message("  shards written through gateway 0: %u, gateway 1: %u\n", on[0], on[1]);
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_client_list(c, "gw", &parts, &n));
    assert_int_equal(n, GW_SHARDS);
    free(parts);
    uint64_t cut = 0;
    assert_status(CPR_OK, cpr_client_latest_cut(c, "gw", &cut));
    assert_int_equal(cut, 1);
    seen_rows *seen = calloc(1, sizeof *seen);
    assert_non_null(seen);
    cpr_restore_query q = {.job = "gw", .consistent = 1};
    assert_status(CPR_OK, cpr_client_restore(c, &q, NULL, 0, see_row, seen, NULL));
    assert_int_equal(seen->total, GW_SHARDS * GW_ROWS);
    assert_int_equal(seen->wrong, 0);
    for (size_t i = 0; i < GW_SHARDS * GW_ROWS; i++)
        assert_int_equal(seen->count[i], 1);
    free(seen);
    char *where = NULL, want[128];
    cpr_part_id id = {"gw", 1, 1};
    assert_status(CPR_OK, cpr_client_where(c, &id, &where));
    snprintf(want, sizeof want, ": rados:cpr/%s gw/1-1.", ns);
    char *second = strchr(where, '\n');
    assert_non_null(second);
    assert_non_null(strstr(where, want));
    assert_non_null(strstr(second + 1, want)); /* both gateways name it */
    free(where);
    cpr_client_close(c);
    for (int i = 0; i < 2; i++) {
        ch_stop(&d[i]);
        tu_rmtree(dir[i]);
        free(dir[i]);
    }
}

int main(void)
{
    if (!(g_conf = tu_rados_conf()))
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_loss),
        cmocka_unit_test(test_two_gateways_race),
        cmocka_unit_test(test_client_over_two_gateways),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
