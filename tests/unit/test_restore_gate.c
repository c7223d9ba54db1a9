/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd's gate on Restore streams (ckptd/restore_gate.h): at most `slots`
 * streams in while the holders make progress (G1), a slot given back lets
 * one waiter in; holders that make no progress let a waiter in over the
 * limit after the stall, so a client that reads its streams in an order of
 * its own never hangs (G2); 0 slots is no limit; bad arguments are refused.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cpr_common.h"
#include "restore_gate.h"
#include "testutil.h"

typedef struct waiter {
    cpri_restore_gate *g;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int in, over;
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    int over = cpri_restore_gate_enter(w->g);
    pthread_mutex_lock(&w->mu);
    w->in = 1;
    w->over = over;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void waiter_start(waiter *w, cpri_restore_gate *g, pthread_t *t)
{
    *w = (waiter){.g = g};
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    assert_int_equal(0, pthread_create(t, NULL, waiter_main, w));
}

/* Wait up to `s` seconds for the waiter to get in; 1 if it did. */
static int waiter_in_within(waiter *w, double s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)s;
    ts.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->mu);
    while (!w->in && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0)
        ;
    int in = w->in;
    pthread_mutex_unlock(&w->mu);
    return in;
}

static void waiter_join(waiter *w, pthread_t t)
{
    pthread_join(t, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

/* G1: with two slots taken and their holders making progress, a third
 * stream waits (observed for 0.3 s, well inside a 30 s stall); a slot given
 * back lets it in, not over the limit. */
static void test_waits_for_a_slot(void **state)
{
    (void)state;
    cpri_restore_gate *g = NULL;
    assert_status(CPR_OK, cpri_restore_gate_create(2, 30.0, &g));
    assert_int_equal(0, cpri_restore_gate_enter(g));
    assert_int_equal(0, cpri_restore_gate_enter(g));
    waiter w;
    pthread_t t;
    waiter_start(&w, g, &t);
    cpri_restore_gate_stats st;
    /* The waiter has come to the gate (a thread not yet scheduled is "not
     * in" too), then it stays out while the holders make progress. */
    for (int i = 0; i < 3000; i++) {
        cpri_restore_gate_progress(g);
        cpri_restore_gate_stats_get(g, &st);
        if (st.waited == 1)
            break;
        assert_false(waiter_in_within(&w, 0.01));
    }
    assert_int_equal(1, st.waited);
    for (int i = 0; i < 30; i++) { /* the holders send their messages */
        cpri_restore_gate_progress(g);
        assert_false(waiter_in_within(&w, 0.01));
    }
    cpri_restore_gate_stats_get(g, &st);
    assert_int_equal(2, st.slots);
    assert_int_equal(2, st.holding);
    assert_int_equal(1, st.waited);
    cpri_restore_gate_leave(g);
    assert_true(waiter_in_within(&w, 30.0));
    assert_int_equal(0, w.over);
    waiter_join(&w, t);
    cpri_restore_gate_stats_get(g, &st);
    assert_int_equal(2, st.holding);
    assert_int_equal(0, st.over_limit);
    cpri_restore_gate_leave(g);
    cpri_restore_gate_leave(g);
    cpri_restore_gate_destroy(g);
}

/* G2: the one holder never sends (its client does not read it): the next
 * stream goes in over the limit once the stall has passed, and so does the
 * one after it: no hang, and each one counted. */
static void test_stalled_holders_let_a_waiter_in(void **state)
{
    (void)state;
    cpri_restore_gate *g = NULL;
    assert_status(CPR_OK, cpri_restore_gate_create(1, 0.2, &g));
    assert_int_equal(0, cpri_restore_gate_enter(g));
    for (int k = 1; k <= 2; k++) {
        waiter w;
        pthread_t t;
        waiter_start(&w, g, &t);
        assert_true(waiter_in_within(&w, 60.0));
        assert_int_equal(1, w.over);
        waiter_join(&w, t);
        cpri_restore_gate_stats st;
        cpri_restore_gate_stats_get(g, &st);
        assert_int_equal(1 + k, st.holding);
        assert_int_equal(k, st.waited);
        assert_int_equal(k, st.over_limit);
    }
    for (int k = 0; k < 3; k++)
        cpri_restore_gate_leave(g);
    /* Every slot given back: the next stream goes straight in. */
    assert_int_equal(0, cpri_restore_gate_enter(g));
    cpri_restore_gate_leave(g);
    cpri_restore_gate_destroy(g);
}

/* 0 slots: no limit, nobody waits. */
static void test_no_limit(void **state)
{
    (void)state;
    cpri_restore_gate *g = NULL;
    assert_status(CPR_OK, cpri_restore_gate_create(0, 1.0, &g));
    for (int i = 0; i < 64; i++)
        assert_int_equal(0, cpri_restore_gate_enter(g));
    cpri_restore_gate_stats st;
    cpri_restore_gate_stats_get(g, &st);
    assert_int_equal(64, st.holding);
    assert_int_equal(0, st.waited);
    for (int i = 0; i < 64; i++)
        cpri_restore_gate_leave(g);
    cpri_restore_gate_destroy(g);
    assert_true(cpri_restore_gate_default_slots() >= 2);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    cpri_restore_gate *g = NULL;
    assert_status(CPR_INVALID_ARGUMENT, cpri_restore_gate_create(2, 0.0, &g));
    assert_non_null(strstr(cpr_errmsg(), "stall"));
    assert_status(CPR_INVALID_ARGUMENT, cpri_restore_gate_create(2, -1.0, &g));
    assert_status(CPR_INVALID_ARGUMENT, cpri_restore_gate_create(2, 1.0, NULL));
    assert_null(g);
    cpri_restore_gate_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waits_for_a_slot),
        cmocka_unit_test(test_stalled_holders_let_a_waiter_in),
        cmocka_unit_test(test_no_limit),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
