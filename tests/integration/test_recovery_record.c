/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The job's recovery record through the client library, in-process
 * (local://) and against real ckptd processes: compare-and-set semantics,
 * two clients racing PutRecovery round after round (exactly one wins each
 * round and the loser learns the current generation), the record surviving
 * a daemon restart, its placement on the node of (job, shard 0), a daemon
 * that is down (a specific status, never a silent success), and
 * cpr_recovery_decide_and_record from two threads with different decisions:
 * exactly one plan is recorded and both act on it.
 */
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
#include "cpr/recovery.h"
#include "testutil.h"

static const cpr_table_schema tables[1] = {{1, 400, 4, 1}};

/* The job's record read through `c` is exactly (generation, plan). */
static void assert_record(cpr_client *c, const char *job, uint64_t generation, const void *plan,
                          size_t len)
{
    uint64_t gen = 99;
    void *got = NULL;
    size_t got_len = 99;
    assert_status(CPR_OK, cpr_client_recovery_get(c, job, &gen, &got, &got_len));
    assert_non_null(got);
    assert_int_equal(gen, generation);
    assert_int_equal(got_len, len);
    if (len)
        assert_memory_equal(got, plan, len);
    free(got);
}

/* The semantics every transport must give. */
static void compare_and_set(cpr_client *c)
{
    uint64_t gen = 0;
    assert_record(c, "cas", 0, NULL, 0);
    assert_status(CPR_OK, cpr_client_recovery_put(c, "cas", 0, "one", 3, &gen));
    assert_int_equal(gen, 1);
    gen = 77;
    assert_status(CPR_FAILED_PRECONDITION, cpr_client_recovery_put(c, "cas", 0, "two", 3, &gen));
    assert_non_null(strstr(cpr_errmsg(), "generation 1"));
    assert_int_equal(gen, 77);
    assert_record(c, "cas", 1, "one", 3);
    assert_status(CPR_OK, cpr_client_recovery_put(c, "cas", 1, "two", 3, &gen));
    assert_int_equal(gen, 2);
    assert_record(c, "cas", 2, "two", 3);
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_recovery_put(c, "no/job", 0, "x", 1, &gen));
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_recovery_get(c, "", &gen, &(void *){0},
                                                                &(size_t){0}));
    unsigned char *big = calloc(CPR_RECOVERY_PLAN_MAX + 1, 1);
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_recovery_put(c, "cas", 2, big,
                                                                CPR_RECOVERY_PLAN_MAX + 1, &gen));
    assert_status(CPR_OK, cpr_client_recovery_put(c, "cas", 2, big, CPR_RECOVERY_PLAN_MAX, &gen));
    assert_record(c, "cas", 3, big, CPR_RECOVERY_PLAN_MAX);
    free(big);
}

static void test_local(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-recrec"), target[512];
    snprintf(target, sizeof target, "local://%s/store", dir);
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    compare_and_set(c);
    cpr_client_close(c);
    tu_rmtree(dir);
    free(dir);
}

/* ---- two clients racing ------------------------------------------------------------------ */

#define ROUNDS 12

typedef struct racer {
    cpr_client *client;
    pthread_barrier_t *barrier;
    char name;
    cpr_status got[ROUNDS];
    char why[ROUNDS][256];
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
        snprintf(r->why[round], sizeof r->why[round], "%s", cpr_errmsg());
        pthread_barrier_wait(r->barrier); /* the round is decided before the next */
    }
    return NULL;
}

static void test_two_clients_race(void **state)
{
    (void)state;
    ch_daemon d;
    char target[300];
    char *dir = ch_daemon_up(&d, target, sizeof target);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    racer r[2] = {{.barrier = &barrier, .name = 'A'}, {.barrier = &barrier, .name = 'B'}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        assert_status(CPR_OK, cpr_client_open(target, NULL, &r[i].client));
        assert_int_equal(pthread_create(&threads[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&barrier);
    unsigned wins[2] = {0, 0};
    char last[16] = "";
    for (uint64_t round = 0; round < ROUNDS; round++) {
        int a = r[0].got[round] == CPR_OK, b = r[1].got[round] == CPR_OK;
        if (a + b != 1)
            fail_msg("round %llu: %s and %s, want exactly one winner",
                     (unsigned long long)round, cpr_status_name(r[0].got[round]),
                     cpr_status_name(r[1].got[round]));
        const racer *loser = a ? &r[1] : &r[0];
        char want[64];
        snprintf(want, sizeof want, "generation %llu", (unsigned long long)(round + 1));
        assert_int_equal(loser->got[round], CPR_FAILED_PRECONDITION);
        if (!strstr(loser->why[round], want))
            fail_msg("round %llu: the loser's message does not name %s: %s",
                     (unsigned long long)round, want, loser->why[round]);
        wins[!a]++;
        snprintf(last, sizeof last, "%c-%llu", a ? 'A' : 'B', (unsigned long long)round);
    }
    assert_int_equal(wins[0] + wins[1], ROUNDS);
    assert_record(r[0].client, "race", ROUNDS, last, strlen(last));
    assert_record(r[1].client, "race", ROUNDS, last, strlen(last));
    compare_and_set(r[0].client);

    /* Durable: the daemon restarts on the same directory. */
    for (int i = 0; i < 2; i++)
        cpr_client_close(r[i].client);
    ch_stop(&d);
    ch_start(&d, dir);
    snprintf(target, sizeof target, "grpc://%s", d.addr);
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    assert_record(c, "race", ROUNDS, last, strlen(last));
    cpr_client_close(c);
    ch_daemon_down(&d, dir);
}

/* ---- placement and a daemon that is down -------------------------------------------------- */

static void test_placement_and_down(void **state)
{
    (void)state;
    ch_daemon d[2];
    char *dir[2], alone[2][300], target[600];
    for (int i = 0; i < 2; i++)
        dir[i] = ch_daemon_up(&d[i], alone[i], sizeof alone[i]);
    snprintf(target, sizeof target, "grpc://%s,%s", d[0].addr, d[1].addr);
    cpr_client *c, *node[2];
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    for (int i = 0; i < 2; i++)
        assert_status(CPR_OK, cpr_client_open(alone[i], NULL, &node[i]));
    const char *jobs[2] = {NULL, NULL}; /* a job whose shard 0 lives on node i */
    static const char *const names[] = {"pa", "pb", "pc", "pd", "pe", "pf", "pg", "ph",
                                        "pi", "pj", "pk", "pl", "pm", "pn", "po", "pp"};
    for (size_t k = 0; k < 16; k++)
        if (!jobs[cpr_client_node_of(c, names[k], 0)])
            jobs[cpr_client_node_of(c, names[k], 0)] = names[k];
    assert_non_null(jobs[0]);
    assert_non_null(jobs[1]);
    for (int i = 0; i < 2; i++) {
        uint64_t gen = 0;
        assert_status(CPR_OK, cpr_client_recovery_put(c, jobs[i], 0, "p", 1, &gen));
        assert_record(node[i], jobs[i], 1, "p", 1);     /* on its node ... */
        assert_record(node[1 - i], jobs[i], 0, NULL, 0); /* ... and only there */
        assert_record(c, jobs[i], 1, "p", 1);
    }
    for (int i = 0; i < 2; i++)
        cpr_client_close(node[i]);
    cpr_client_close(c);

    /* Node 1 down: its jobs' records are unreachable, and say so. */
    int held = ch_stop_held(&d[1]); /* and no other daemon answers there */
    cpr_client_options o = {.retries = 1, .backoff_s = 0.01, .call_timeout_s = 5};
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    uint64_t gen = 0;
    void *plan = NULL;
    size_t len = 0;
    assert_status(CPR_UNAVAILABLE, cpr_client_recovery_get(c, jobs[1], &gen, &plan, &len));
    assert_status(CPR_UNAVAILABLE, cpr_client_recovery_put(c, jobs[1], 1, "q", 1, &gen));
    assert_non_null(strstr(cpr_errmsg(), "unknown"));
    assert_record(c, jobs[0], 1, "p", 1); /* the other node still answers */
    cpr_client_close(c);
    close(held);
    tu_rmtree(dir[1]);
    free(dir[1]);
    ch_daemon_down(&d[0], dir[0]);
}

/* ---- deciding together ----------------------------------------------------------------------- */

typedef struct decider {
    const char *target;
    pthread_barrier_t *barrier;
    cpr_recovery_mode mode;
    cpr_status st;
    char why[512];
    uint64_t generation;
    int won;
    void *encoded;
    size_t len;
} decider;

static void *decide(void *arg)
{
    decider *d = arg;
    cpr_client *c = NULL;
    const uint32_t failed[] = {1};
    cpr_plan_request req = {.num_shards = 2, .failed = failed, .n_failed = 1, .mode = d->mode};
    cpr_recovery_plan *plan = NULL;
    d->st = cpr_client_open(d->target, NULL, &c);
    pthread_barrier_wait(d->barrier);
    if (d->st == CPR_OK)
        d->st = cpr_recovery_decide_and_record(c, "decide", NULL, &req, 0, &plan, &d->generation,
                                               &d->won);
    if (d->st == CPR_OK)
        d->st = cpr_recovery_plan_encode(plan, &d->encoded, &d->len);
    snprintf(d->why, sizeof d->why, "%s", cpr_errmsg());
    cpr_recovery_plan_destroy(plan);
    cpr_client_close(c);
    return NULL;
}

static void write_full(cpr_client *c, uint32_t shard, uint64_t ckpt)
{
    cpr_part_spec spec = tu_part("decide", shard, 2, ckpt, CPR_KIND_FULL, tables, 1);
    cpr_part *p;
    uint64_t ids[200];
    tu_iota(ids, shard * 200u, 200);
    tu_batch b;
    tu_batch_make(&b, &tables[0], ids, 200, ckpt);
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    assert_status(CPR_OK, cpr_part_put_rows(p, &b.batch));
    assert_status(CPR_OK, cpr_part_commit(&p));
    tu_batch_free(&b);
}

static void test_decide_and_record_race(void **state)
{
    (void)state;
    ch_daemon d;
    char target[300];
    char *dir = ch_daemon_up(&d, target, sizeof target);
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    for (uint32_t s = 0; s < 2; s++)
        write_full(c, s, 1);
    write_full(c, 1, 2); /* shard 1 is newer than the cut */

    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    decider dd[2] = {{.target = target, .barrier = &barrier, .mode = CPR_RECOVERY_PARTIAL},
                     {.target = target, .barrier = &barrier, .mode = CPR_RECOVERY_FULL}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, decide, &dd[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < 2; i++) {
        if (dd[i].st != CPR_OK)
            fail_msg("decider %d: %s: %s", i, cpr_status_name(dd[i].st), dd[i].why);
        assert_int_equal(dd[i].generation, 1);
    }
    assert_int_equal(dd[0].won + dd[1].won, 1);
    assert_int_equal(dd[0].len, dd[1].len); /* both act on the same plan */
    assert_memory_equal(dd[0].encoded, dd[1].encoded, dd[0].len);

    /* A trainer reads it at a step boundary; the winner's decision is in it. */
    uint64_t gen = 0;
    cpr_recovery_plan *plan = NULL;
    assert_status(CPR_OK, cpr_recovery_read_recorded(c, "decide", &gen, &plan));
    assert_int_equal(gen, 1);
    cpr_plan_action want = dd[0].won ? CPR_PLAN_PARTIAL : CPR_PLAN_FULL;
    assert_int_equal(cpr_recovery_plan_action(plan), want);
    const cpr_plan_shard *e = cpr_recovery_plan_shard(plan, 1);
    assert_int_equal(e->as_of, want == CPR_PLAN_PARTIAL ? 2 : 1);
    cpr_recovery_plan_destroy(plan);

    /* A late process that last acted on nothing and reports the same
     * failure acts on generation 1. */
    const uint32_t same[] = {1}, failed[] = {0};
    cpr_plan_request req = {.num_shards = 2, .failed = same, .n_failed = 1,
                            .mode = CPR_RECOVERY_PARTIAL};
    int won = -1;
    assert_status(CPR_OK, cpr_recovery_decide_and_record(c, "decide", NULL, &req, 0, &plan, &gen,
                                                         &won));
    assert_int_equal(gen, 1);
    assert_int_equal(won, 0);
    cpr_recovery_plan_destroy(plan);
    /* One that reports another failure (shard 0) acts on generation 1 only
     * if that plan recovers shard 0 too (a full one); a partial plan of
     * shard 1 does not, and shard 0 is planned at generation 2 (record.c
     * R1): no failure is left out of every plan. */
    req.failed = failed;
    assert_status(CPR_OK, cpr_recovery_decide_and_record(c, "decide", NULL, &req, 0, &plan, &gen,
                                                         &won));
    assert_int_equal(gen, want == CPR_PLAN_FULL ? 1 : 2);
    assert_int_equal(won, want == CPR_PLAN_FULL ? 0 : 1);
    assert_int_not_equal(cpr_recovery_plan_shard(plan, 0)->source, CPR_SOURCE_KEEP);
    cpr_recovery_plan_destroy(plan);
    /* One that acted on the newest records the next decision. */
    uint64_t acted = gen;
    assert_status(CPR_OK, cpr_recovery_decide_and_record(c, "decide", NULL, &req, acted, &plan,
                                                         &gen, &won));
    assert_int_equal(gen, acted + 1);
    assert_int_equal(won, 1);
    assert_int_equal(cpr_recovery_plan_shard(plan, 0)->source, CPR_SOURCE_STORE);
    cpr_recovery_plan_destroy(plan);
    /* An expected generation the record never had is refused. */
    assert_status(CPR_FAILED_PRECONDITION,
                  cpr_recovery_decide_and_record(c, "decide", NULL, &req, 9, &plan, &gen, &won));
    /* A resume (no failed shard) is FULL even when the estimator prefers
     * partial recovery for failures. */
    cpr_estimator_config ec = {.shards = 2, .job_s = 1e5, .target_pls = 0.5,
                               .policy = CPR_POLICY_MFU, .fraction = 0.1,
                               .prior_mtbf_s = 100, .prior_save_s = 1, .prior_load_s = 100,
                               .prior_restart_s = 1};
    cpr_estimator *est = NULL;
    assert_status(CPR_OK, cpr_estimator_create(&ec, &est));
    cpr_estimate guess;
    assert_status(CPR_OK, cpr_estimator_decide(est, &guess));
    assert_int_equal(guess.mode, CPR_RECOVERY_PARTIAL);
    cpr_plan_request resume = {.num_shards = 2, .mode = CPR_RECOVERY_FULL};
    assert_status(CPR_OK, cpr_recovery_decide_and_record(c, "decide", est, &resume, gen, &plan,
                                                         &gen, &won));
    assert_int_equal(cpr_recovery_plan_action(plan), CPR_PLAN_FULL);
    cpr_recovery_plan_destroy(plan);
    cpr_estimator_destroy(est);
    /* A job with no part at all: the plan says so, and is recorded. */
    assert_status(CPR_OK, cpr_recovery_decide_and_record(c, "empty", NULL, &req, 0, &plan, &gen,
                                                         &won));
    assert_int_equal(cpr_recovery_plan_shard(plan, 0)->source, CPR_SOURCE_INIT);
    assert_true(cpr_recovery_plan_problems(plan) & CPR_PLAN_SHARD_UNSAVED);
    cpr_recovery_plan_destroy(plan);

    for (int i = 0; i < 2; i++)
        free(dd[i].encoded);
    cpr_client_close(c);
    ch_daemon_down(&d, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local),
        cmocka_unit_test(test_two_clients_race),
        cmocka_unit_test(test_placement_and_down),
        cmocka_unit_test(test_decide_and_record_race),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
