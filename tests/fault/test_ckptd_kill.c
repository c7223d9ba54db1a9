/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kill -9 of ckptd while a part streams and while it commits, and SIGTERM
 * while a part streams (a clean stop: exit 0). After each
 * kill the daemon restarts on the same directory: every part that was
 * committed restores exactly, the interrupted part is either invisible or
 * (for a kill during Commit that landed after the commit point) complete and
 * exact, and nothing is left open. The client sees a clear error, never a
 * hang (every call has a deadline).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "testutil.h"

#define ROWS 500
#define ROUNDS 8

typedef struct kill_at {
    ch_daemon *d;
    size_t batch;
} kill_at;

static void kill_after_batch(void *ctx, size_t sent)
{
    kill_at *k = ctx;
    if (sent == k->batch)
        ch_kill(k->d);
}

/* The part of job `job` at checkpoint 1 restores exactly ROWS rows. */
static void assert_part_intact(cpr_rpc *rpc, const char *job)
{
    uint64_t rows = 0;
    int bad = 0;
    assert_int_equal(ch_restore(rpc, job, 0, 1, &rows, &bad), CPR_OK);
    assert_false(bad);
    assert_int_equal(rows, ROWS);
}

static void test_kill_during_put_rows(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-kill");
    ch_daemon d;
    cpr_rpc *rpc;
    cpr_part_id kept = {"kept", 0, 1}, lost = {"kept", 0, 2};
    ch_start(&d, dir);
    assert_int_equal(cpr_rpc_open(d.addr, &rpc), CPR_OK);
    assert_int_equal(ch_begin(rpc, "kept", 1), CPR_OK);
    assert_int_equal(ch_put_rows(rpc, &kept, 0, ROWS, 0, NULL, NULL), CPR_OK);
    assert_int_equal(ch_commit(rpc, &kept, ROWS), CPR_OK);

    assert_int_equal(ch_begin(rpc, "kept", 2), CPR_OK);
    kill_at k = {&d, 5};
    cpr_status st = ch_put_rows(rpc, &lost, 0, 2000, 0, kill_after_batch, &k);
    assert_int_not_equal(st, CPR_OK); /* the client learns it failed */
    cpr_rpc_close(rpc);

    ch_start(&d, dir);
    assert_int_equal(cpr_rpc_open(d.addr, &rpc), CPR_OK);
    size_t committed, open_parts;
    int has1;
    assert_int_equal(ch_list(rpc, "kept", &committed, 1, &has1, &open_parts), CPR_OK);
    assert_int_equal(committed, 1);
    assert_true(has1);
    assert_int_equal(open_parts, 0); /* the interrupted part is gone */
    assert_part_intact(rpc, "kept");
    /* The interrupted checkpoint id can be written again. */
    assert_int_equal(ch_begin(rpc, "kept", 2), CPR_OK);
    assert_int_equal(ch_put_rows(rpc, &lost, 0, ROWS, 0, NULL, NULL), CPR_OK);
    assert_int_equal(ch_commit(rpc, &lost, ROWS), CPR_OK);
    cpr_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

static void term_after_batch(void *ctx, size_t sent)
{
    kill_at *k = ctx;
    if (sent == k->batch)
        ch_stop(k->d); /* SIGTERM, and asserts the daemon exits 0 */
}

/* SIGTERM while a part streams: the daemon stops cleanly (exit 0), the
 * stream's part is aborted, committed data is untouched. */
static void test_sigterm_during_load(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-term");
    ch_daemon d;
    cpr_rpc *rpc;
    cpr_part_id kept = {"kept", 0, 1}, busy = {"kept", 0, 2};
    ch_start(&d, dir);
    assert_int_equal(cpr_rpc_open(d.addr, &rpc), CPR_OK);
    assert_int_equal(ch_begin(rpc, "kept", 1), CPR_OK);
    assert_int_equal(ch_put_rows(rpc, &kept, 0, ROWS, 0, NULL, NULL), CPR_OK);
    assert_int_equal(ch_commit(rpc, &kept, ROWS), CPR_OK);
    assert_int_equal(ch_begin(rpc, "kept", 2), CPR_OK);
    kill_at k = {&d, 3};
    assert_int_not_equal(ch_put_rows(rpc, &busy, 0, 3000, 0, term_after_batch, &k), CPR_OK);
    cpr_rpc_close(rpc);

    ch_start(&d, dir);
    assert_int_equal(cpr_rpc_open(d.addr, &rpc), CPR_OK);
    size_t committed, open_parts;
    int has1;
    assert_int_equal(ch_list(rpc, "kept", &committed, 1, &has1, &open_parts), CPR_OK);
    assert_int_equal(committed, 1);
    assert_int_equal(open_parts, 0);
    assert_part_intact(rpc, "kept");
    cpr_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

typedef struct commit_call {
    cpr_rpc *rpc;
    cpr_part_id id;
    cpr_status st;
} commit_call;

static void *commit_thread(void *arg)
{
    commit_call *c = arg;
    c->st = ch_commit(c->rpc, &c->id, ROWS);
    return NULL;
}

static void test_kill_during_commit(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-kill");
    char jobs[8][16];
    int committed[8] = {0};
    ch_daemon d;
    ch_start(&d, dir);
    for (int round = 0; round < ROUNDS; round++) {
        cpr_rpc *rpc;
        snprintf(jobs[round], sizeof jobs[round], "round%d", round);
        assert_int_equal(cpr_rpc_open(d.addr, &rpc), CPR_OK);
        commit_call c = {rpc, {jobs[round], 0, 1}, CPR_OK};
        assert_int_equal(ch_begin(rpc, jobs[round], 1), CPR_OK);
        assert_int_equal(ch_put_rows(rpc, &c.id, 0, ROWS, 0, NULL, NULL), CPR_OK);
        pthread_t thread;
        assert_int_equal(pthread_create(&thread, NULL, commit_thread, &c), 0);
        /* Fault injection, not synchronisation: kill at a different moment
         * each round, 0 to 98 ms after the commit was sent (a commit fsyncs
         * for a few ms), so kills land before, during and after commits. */
        struct timespec delay = {0, (long)round * round * 2000000L};
        nanosleep(&delay, NULL);
        ch_kill(&d);
        pthread_join(thread, NULL);
        committed[round] = c.st == CPR_OK;
        cpr_rpc_close(rpc);

        ch_start(&d, dir);
        assert_int_equal(cpr_rpc_open(d.addr, &rpc), CPR_OK);
        for (int r = 0; r <= round; r++) {
            size_t n = 0, open_parts = 0;
            int has1 = 0;
            cpr_status ls = ch_list(rpc, jobs[r], &n, 1, &has1, &open_parts);
            assert_true(ls == CPR_OK || ls == CPR_NOT_FOUND); /* NOT_FOUND: nothing committed */
            assert_int_equal(open_parts, 0);
            if (committed[r]) /* acknowledged: must be there, exactly */
                assert_true(has1);
            if (has1) /* there (acknowledged or not): complete and exact */
                assert_part_intact(rpc, jobs[r]);
            committed[r] |= has1;
        }
        cpr_rpc_close(rpc);
    }
    int landed = 0;
    for (int r = 0; r < ROUNDS; r++)
        landed += committed[r];
    printf("kill during commit: %d of %d parts committed before the kill, %d vanished whole\n",
           landed, ROUNDS, ROUNDS - landed);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_during_put_rows),
        cmocka_unit_test(test_kill_during_commit),
        cmocka_unit_test(test_sigterm_during_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
