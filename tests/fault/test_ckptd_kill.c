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
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr_common.h"
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
static void assert_part_intact(cpri_rpc *rpc, const char *job)
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
    cpri_rpc *rpc;
    cpr_part_id kept = {"kept", 0, 1}, lost = {"kept", 0, 2};
    ch_start(&d, dir);
    assert_int_equal(cpri_rpc_open(d.addr, &rpc), CPR_OK);
    assert_int_equal(ch_begin(rpc, "kept", 1), CPR_OK);
    assert_int_equal(ch_put_rows(rpc, &kept, 0, ROWS, 0, NULL, NULL), CPR_OK);
    assert_int_equal(ch_commit(rpc, &kept, ROWS), CPR_OK);

    assert_int_equal(ch_begin(rpc, "kept", 2), CPR_OK);
    kill_at k = {&d, 5};
    cpr_status st = ch_put_rows(rpc, &lost, 0, 2000, 0, kill_after_batch, &k);
    assert_int_not_equal(st, CPR_OK); /* the client learns it failed */
    cpri_rpc_close(rpc);

    ch_start(&d, dir);
    assert_int_equal(cpri_rpc_open(d.addr, &rpc), CPR_OK);
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
    cpri_rpc_close(rpc);
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
    cpri_rpc *rpc;
    cpr_part_id kept = {"kept", 0, 1}, busy = {"kept", 0, 2};
    ch_start(&d, dir);
    assert_int_equal(cpri_rpc_open(d.addr, &rpc), CPR_OK);
    assert_int_equal(ch_begin(rpc, "kept", 1), CPR_OK);
    assert_int_equal(ch_put_rows(rpc, &kept, 0, ROWS, 0, NULL, NULL), CPR_OK);
    assert_int_equal(ch_commit(rpc, &kept, ROWS), CPR_OK);
    assert_int_equal(ch_begin(rpc, "kept", 2), CPR_OK);
    kill_at k = {&d, 3};
    assert_int_not_equal(ch_put_rows(rpc, &busy, 0, 3000, 0, term_after_batch, &k), CPR_OK);
    cpri_rpc_close(rpc);

    ch_start(&d, dir);
    assert_int_equal(cpri_rpc_open(d.addr, &rpc), CPR_OK);
    size_t committed, open_parts;
    int has1;
    assert_int_equal(ch_list(rpc, "kept", &committed, 1, &has1, &open_parts), CPR_OK);
    assert_int_equal(committed, 1);
    assert_int_equal(open_parts, 0);
    assert_part_intact(rpc, "kept");
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* The vanishing client of test_client_vanishes, run as this program again
 * (a fresh process: gRPC does not survive fork() in a process that has used
 * it): begin a part, send a batch, wait (at most 60 s) until the daemon
 * has applied it, and exit without finishing the stream. 0 when it did. */
static int vanishing_client(const char *addr)
{
    cpri_rpc *rpc;
    cpr_part_id id = {"gone", 0, 1};
    cpri_rpc_stream *s;
    if (cpri_rpc_open(addr, &rpc))
        return 1;
    if (ch_begin(rpc, "gone", 1) || cpri_rpc_stream_open(rpc, CH_SVC "PutRows", CH_TIMEOUT_S, &s)) {
        cpri_rpc_close(rpc);
        return 1;
    }
    uint64_t ids[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    float values[80], state[10];
    cpr_row_batch b;
    tu_fill_batch(&b, ch_table.table, ids, 10, ch_table.dim, ch_table.state_dim, 1, values,
                  state);
    uint8_t *buf;
    size_t len;
    if (cpri_wire_rows_encode(&id, ch_lease_of(&id), &b, 0, 0, &buf, &len) ||
        cpri_rpc_stream_send(s, buf, len))
        _exit(1); /* the stream and channel go with the process */
    /* So that the test is about a stream that wrote something and then
     * lost its client. */
    for (double t0 = cpri_now_s(); cpri_now_s() - t0 < 60;) {
        uint8_t *req, *resp;
        size_t rl, n;
        cpr_part_info *parts;
        uint64_t cut;
        int applied = 0;
        if (cpri_wire_list_encode("gone", &req, &rl) == CPR_OK &&
            cpri_rpc_unary(rpc, CH_SVC "List", req, rl, 5.0, &resp, &n) == CPR_OK) {
            if (cpri_wire_list_response_decode(resp, n, &parts, &n, &cut) == CPR_OK) {
                applied = n == 1 && parts[0].rows == 10;
                free(parts);
            }
            free(resp);
        }
        free(req);
        if (applied)
            _exit(0); /* gone without finishing the stream */
        struct timespec pause = {0, 10000000L}; /* the poll's interval */
        nanosleep(&pause, NULL);
    }
    _exit(2);
}

/* A client process that dies mid-PutRows: its part is aborted, not left
 * open for anyone to commit half-written. */
static void test_client_vanishes(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-vanish");
    ch_daemon d;
    ch_start(&d, dir);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        execl("/proc/self/exe", "test_ckptd_kill", "--vanishing-client", d.addr, (char *)NULL);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status)); /* not killed, nor aborted by a sanitizer */
    assert_int_equal(WEXITSTATUS(status), 0);
    cpri_rpc *rpc;
    assert_int_equal(cpri_rpc_open(d.addr, &rpc), CPR_OK);
    assert_true(ch_wait_no_open_parts(rpc, "gone", 10.0));
    cpr_part_id id = {"gone", 0, 1};
    assert_int_equal(ch_commit(rpc, &id, 10), CPR_FAILED_PRECONDITION);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* A refused batch naming someone else's open part does not abort it; an
 * unknown method is answered UNIMPLEMENTED; a second daemon cannot take a
 * port in use. */
static void test_bad_clients_cannot_hurt_others(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-others"), *dir2 = tu_mkdtemp("cpr-others2");
    ch_daemon d;
    cpri_rpc *rpc;
    cpr_part_id victim = {"victim", 0, 1};
    ch_start(&d, dir);
    assert_int_equal(cpri_rpc_open(d.addr, &rpc), CPR_OK);
    assert_int_equal(ch_begin(rpc, "victim", 1), CPR_OK);
    assert_int_equal(ch_put_rows(rpc, &victim, 0, 100, 0, NULL, NULL), CPR_OK);
    assert_int_equal(ch_put_rows(rpc, &victim, 100, 100, 1, NULL, NULL), CPR_CORRUPT);
    assert_int_equal(ch_put_rows(rpc, &victim, 200, 100, 0, NULL, NULL), CPR_OK);
    assert_int_equal(ch_commit(rpc, &victim, 200), CPR_OK); /* still open after the refusal */

    uint8_t *resp = NULL;
    size_t n = 0;
    assert_int_equal(cpri_rpc_unary(rpc, "/cpr.v1.Checkpoint/Nope", (const uint8_t *)"", 0, 5.0,
                                   &resp, &n), CPR_INTERNAL); /* UNIMPLEMENTED */
    assert_non_null(strstr(cpr_errmsg(), "does not serve"));
    free(resp);
    cpri_rpc_close(rpc);

    pid_t pid = fork(); /* a second daemon on the same address must fail */
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, STDOUT_FILENO);
        dup2(devnull, STDERR_FILENO);
        execl(CKPTD_PATH_FOR_TEST, "ckptd", "--listen", d.addr, "--data-dir", dir2,
              "--gc-interval-s", "0", (char *)NULL);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    ch_stop(&d);
    tu_rmtree(dir);
    tu_rmtree(dir2);
    free(dir);
    free(dir2);
}

typedef struct commit_call {
    cpri_rpc *rpc;
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
        cpri_rpc *rpc;
        snprintf(jobs[round], sizeof jobs[round], "round%d", round);
        assert_int_equal(cpri_rpc_open(d.addr, &rpc), CPR_OK);
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
        cpri_rpc_close(rpc);

        ch_start(&d, dir);
        assert_int_equal(cpri_rpc_open(d.addr, &rpc), CPR_OK);
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
        cpri_rpc_close(rpc);
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

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--vanishing-client") == 0)
        return vanishing_client(argv[2]);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_during_put_rows),
        cmocka_unit_test(test_kill_during_commit),
        cmocka_unit_test(test_sigterm_during_load),
        cmocka_unit_test(test_client_vanishes),
        cmocka_unit_test(test_bad_clients_cannot_hurt_others),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
