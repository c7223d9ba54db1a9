/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd SIGKILLed over and over (CPR_CKPTD_KILLS, default 200) while a
 * trainer-like writer streams and commits FULL parts through the client
 * library (row blocks over real gRPC on 127.0.0.1). Each round: the daemon
 * (re)starts on the same directory, the writer resumes after the newest
 * committed checkpoint, and the daemon is killed at a seeded moment. After
 * every restart, every commit the client acknowledged is there and restores
 * byte-exactly, and the part that was in flight is either absent or whole.
 * At the end every committed part is restored and checked, and verify finds
 * nothing wrong. The kills land in begin, streaming and commit; the report
 * says how many of each.
 *
 * The kill's moment is drawn over 0-40 ms after the writer starts, which on a
 * loaded machine (ASan, a parallel suite, a slow first connection) can be
 * shorter than one part: so every fourth round waits until the writer's
 * client acknowledged a commit of that round before drawing it. Commits
 * then land in every run, whatever the machine's speed, and the checks of
 * acknowledged parts are never vacuous.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/client.h"
#include "cpr/rng.h"
#include "testutil.h"

#define JOB "loop"
#define ROWS 4000u
#define BATCHES 4u
#define DEFAULT_KILLS 200u
#define COMMIT_EVERY 4u       /* every 4th round waits for a commit first */
#define COMMIT_WAIT_S 120     /* ... and fails the test if none comes */

static const cpr_table_schema g_t = {.table = 1, .rows = ROWS, .dim = 16, .state_dim = 1};
static const cpr_client_options g_opts = {.no_retries = 1};

enum { W_IDLE, W_BEGIN, W_ROWS, W_COMMIT, W_COUNT };
static const char *const w_names[W_COUNT] = {"between parts", "begin", "streaming", "commit"};

typedef struct writer {
    cpr_client *client;
    uint64_t next;                /* checkpoint to write next */
    _Atomic uint64_t acked;       /* newest commit the client acknowledged */
    _Atomic uint64_t in_flight;   /* checkpoint being written (0: none) */
    _Atomic int phase;
    _Atomic int stopped;          /* the writer returned */
    pthread_mutex_t mu;           /* guards nothing but the wake-up below */
    pthread_cond_t acked_cv;      /* signalled after each acknowledged commit */
} writer;

/* FULL parts of ROWS rows until a call fails (the daemon died). */
static void *writer_main(void *arg)
{
    writer *w = arg;
    uint64_t ids[ROWS / BATCHES];
    for (uint64_t c = w->next;; c++) {
        cpr_part_spec spec = tu_part(JOB, 0, 1, c, CPR_KIND_FULL, &g_t, 1);
        cpr_part *p = NULL;
        atomic_store(&w->in_flight, c);
        atomic_store(&w->phase, W_BEGIN);
        if (cpr_client_begin(w->client, &spec, &p) != CPR_OK)
            break;
        atomic_store(&w->phase, W_ROWS);
        cpr_status st = CPR_OK;
        for (uint32_t b = 0; st == CPR_OK && b < BATCHES; b++) {
            tu_batch tb;
            tu_iota(ids, (uint64_t)b * (ROWS / BATCHES), ROWS / BATCHES);
            tu_batch_make(&tb, &g_t, ids, ROWS / BATCHES, c);
            st = cpr_part_put_rows(p, &tb.batch);
            tu_batch_free(&tb);
        }
        atomic_store(&w->phase, W_COMMIT);
        if (st == CPR_OK)
            st = cpr_part_commit(&p);
        else
            cpr_part_abort(&p);
        if (st != CPR_OK)
            break;
        pthread_mutex_lock(&w->mu);
        atomic_store(&w->acked, c);
        pthread_cond_broadcast(&w->acked_cv);
        pthread_mutex_unlock(&w->mu);
        atomic_store(&w->phase, W_IDLE);
    }
    /* wake a waiter: no commit will come from this writer any more */
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->stopped, 1);
    pthread_cond_broadcast(&w->acked_cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Waits until w acknowledged a commit newer than `since`; fails the test if
 * none comes within COMMIT_WAIT_S or the writer stopped without one. */
static void wait_for_commit(writer *w, uint64_t since)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += COMMIT_WAIT_S;
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    while (atomic_load(&w->acked) <= since && !atomic_load(&w->stopped) && rc == 0)
        rc = pthread_cond_timedwait(&w->acked_cv, &w->mu, &until);
    int got = atomic_load(&w->acked) > since;
    pthread_mutex_unlock(&w->mu);
    if (!got)
        fail_msg("the writer acknowledged no commit after checkpoint %llu within %d s",
                 (unsigned long long)since, COMMIT_WAIT_S);
}

typedef struct check {
    uint64_t as_of, next_row;
    int bad;
} check;

static cpr_status check_rows(void *ctx, const cpr_row_batch *b)
{
    check *c = ctx;
    for (size_t i = 0; i < b->n; i++, c->next_row++) {
        c->bad |= b->ids[i] != c->next_row;
        for (uint32_t j = 0; j < g_t.dim && !c->bad; j++)
            c->bad |= tu_float_bits(b->values[i * g_t.dim + j]) !=
                      tu_float_bits(tu_value(g_t.table, b->ids[i], c->as_of, j));
        c->bad |= tu_float_bits(b->state[i]) !=
                  tu_float_bits(tu_state(g_t.table, b->ids[i], c->as_of, 0));
    }
    return CPR_OK;
}

/* Part `ckpt` restores as exactly ROWS rows written at ckpt. */
static void assert_exact(cpr_client *client, uint64_t ckpt)
{
    cpr_restore_query q = {.job = JOB, .as_of = ckpt};
    check c = {.as_of = ckpt};
    cpr_restore_result res;
    assert_int_equal(cpr_client_restore(client, &q, NULL, 0, check_rows, &c, &res), CPR_OK);
    if (c.bad || c.next_row != ROWS || res.as_of != ckpt)
        fail_msg("checkpoint %llu does not restore exactly (%llu rows)",
                 (unsigned long long)ckpt, (unsigned long long)c.next_row);
}

/* Newest committed checkpoint (0: none); every committed part is a FULL. */
static uint64_t newest_committed(cpr_client *client)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    cpr_status st = cpr_client_list(client, JOB, &parts, &n);
    if (st == CPR_NOT_FOUND)
        return 0;
    assert_int_equal(st, CPR_OK);
    uint64_t newest = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(parts[i].committed); /* nothing left open across a restart */
        assert_int_equal(parts[i].rows, ROWS);
        newest = parts[i].checkpoint > newest ? parts[i].checkpoint : newest;
    }
    free(parts);
    return newest;
}

/* One SplitMix64 step from x (common/cpr_rng.h). */
static uint64_t mix(uint64_t x)
{
    return cpr_splitmix64(&x);
}

static void test_ckptd_killed_again_and_again(void **unused)
{
    (void)unused;
    unsigned kills = DEFAULT_KILLS;
    const char *env = getenv("CPR_CKPTD_KILLS");
    if (env && *env)
        kills = (unsigned)strtoul(env, NULL, 10);
    uint64_t seed = 0xC0FFEE;
    env = getenv("CPR_TEST_SEED");
    if (env && *env)
        seed = strtoull(env, NULL, 0);
    char *dir = tu_mkdtemp("cpr-ckptd-loop");
    char target[300];
    unsigned landed[W_COUNT] = {0}, in_flight_landed = 0, in_flight_vanished = 0;
    uint64_t acked = 0;
    ch_daemon d;
    ch_start(&d, dir);
    for (unsigned k = 0; k < kills; k++) {
        cpr_client *client = NULL;
        snprintf(target, sizeof target, "grpc://%s", d.addr);
        /* No retries: the writer stops at the first failure, as a trainer
         * that saves later would. */
        assert_int_equal(cpr_client_open(target, &g_opts, &client), CPR_OK);
        uint64_t newest = newest_committed(client);
        assert_true(newest >= acked); /* every acknowledged commit survived */
        if (acked)
            assert_exact(client, acked);
        if (newest > acked) { /* the part in flight at the kill landed: whole */
            assert_int_equal(newest, acked + 1);
            assert_exact(client, newest);
            in_flight_landed++;
        } else if (k) {
            in_flight_vanished++;
        }
        writer w = {.client = client, .next = newest + 1};
        atomic_store(&w.acked, newest);
        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.acked_cv, NULL);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
        if (k % COMMIT_EVERY == 0)
            wait_for_commit(&w, newest);
        seed = mix(seed);
        /* the kill's moment, spread over a few parts' worth of work */
        struct timespec ts = {0, (long)(seed % 40000000)};
        nanosleep(&ts, NULL);
        landed[atomic_load(&w.phase)]++;
        ch_kill(&d);
        pthread_join(t, NULL);
        acked = atomic_load(&w.acked);
        pthread_cond_destroy(&w.acked_cv);
        pthread_mutex_destroy(&w.mu);
        cpr_client_close(client);
        ch_start(&d, dir);
    }
    /* Every committed part, once more, and a clean verify. */
    cpr_client *client = NULL;
    snprintf(target, sizeof target, "grpc://%s", d.addr);
    assert_int_equal(cpr_client_open(target, NULL, &client), CPR_OK);
    uint64_t newest = newest_committed(client);
    assert_true(newest >= acked);
    assert_true(newest >= (kills + COMMIT_EVERY - 1) / COMMIT_EVERY); /* see the top */
    for (uint64_t c = 1; c <= newest; c++)
        assert_exact(client, c);
    cpr_verify_report vr;
    assert_int_equal(cpr_client_verify(client, JOB, NULL, NULL, &vr), CPR_OK);
    assert_int_equal(vr.problems, 0);
    cpr_client_close(client);
    ch_daemon_down(&d, dir);
    print_message("  %u kills of ckptd, %llu parts committed; the writer was:", kills,
                  (unsigned long long)newest);
    for (int p = 0; p < W_COUNT; p++)
        print_message(" %s %u,", w_names[p], landed[p]);
    print_message(" parts in flight that landed %u, vanished %u\n", in_flight_landed,
                  in_flight_vanished);
    assert_true(landed[W_ROWS] + landed[W_COMMIT] > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckptd_killed_again_and_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
