/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's recovery records (cpr_store_recovery_get/put): a job without a
 * record reads as generation 0; compare-and-set succeeds only at the
 * expected generation and names the current one when it fails; limits and
 * bad arguments are refused without changing the record; records survive a
 * reopen and a process that dies without closing the store; retention of
 * the job's parts (gc with keep and with a floor) leaves the record alone; a
 * record needs no part; and under concurrency exactly one of the racers at a
 * generation wins, so generations count the successful puts exactly.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpr/store.h"
#include "testutil.h"

static const cpr_table_schema tables[1] = {{.table = 1, .rows = 200, .dim = 4, .state_dim = 1}};

/* The record of `job` is exactly (generation, plan). */
static void assert_record(cpr_store *s, const char *job, uint64_t generation, const void *plan,
                          size_t len)
{
    uint64_t gen = 99;
    void *got = NULL;
    size_t got_len = 99;
    assert_status(CPR_OK, cpr_store_recovery_get(s, job, &gen, &got, &got_len, NULL));
    assert_non_null(got);
    assert_int_equal(gen, generation);
    assert_int_equal(got_len, len);
    if (len)
        assert_memory_equal(got, plan, len);
    free(got);
}

static uint64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void test_no_record(void **state)
{
    tu_store_fixture *f = *state;
    assert_record(f->store, "nobody", 0, NULL, 0);
    uint64_t gen = 7, written = 7;
    void *plan = NULL;
    size_t len = 7;
    assert_status(CPR_OK, cpr_store_recovery_get(f->store, "nobody", &gen, &plan, &len,
                                                       &written));
    assert_int_equal(written, 0);
    free(plan);
    gen = 5;
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_recovery_get(f->store, "bad/name", &gen, &plan,
                                                               &len, NULL));
    assert_non_null(strstr(cpr_errmsg(), "bad/name"));
    assert_int_equal(gen, 5); /* out-parameters untouched on failure */
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_recovery_get(f->store, NULL, &gen, &plan, &len, NULL));
}

static void test_compare_and_set(void **state)
{
    tu_store_fixture *f = *state;
    uint64_t gen = 0, written = 0, before = unix_ms();
    assert_status(CPR_OK, cpr_store_recovery_put(f->store, "j", 0, "first", 5, &gen,
                                                       &written));
    assert_int_equal(gen, 1);
    assert_true(written >= before && written <= unix_ms());
    gen = 42;
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_recovery_put(f->store, "j", 0, "second", 6,
                                                                  &gen, NULL));
    assert_non_null(strstr(cpr_errmsg(), "generation 1"));
    assert_int_equal(gen, 42);
    assert_record(f->store, "j", 1, "first", 5);
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_recovery_put(f->store, "j", 2, "x", 1, &gen, NULL));
    assert_status(CPR_OK, cpr_store_recovery_put(f->store, "j", 1, "second", 6, &gen, NULL));
    assert_int_equal(gen, 2);
    assert_record(f->store, "j", 2, "second", 6);
    /* An empty plan is a plan: the generation still moves. */
    assert_status(CPR_OK, cpr_store_recovery_put(f->store, "j", 2, NULL, 0, &gen, NULL));
    assert_int_equal(gen, 3);
    assert_record(f->store, "j", 3, NULL, 0);
    /* Records of different jobs are independent. */
    assert_status(CPR_OK, cpr_store_recovery_put(f->store, "j2", 0, "other", 5, &gen, NULL));
    assert_int_equal(gen, 1);
    assert_record(f->store, "j", 3, NULL, 0);
}

static void test_limits(void **state)
{
    tu_store_fixture *f = *state;
    size_t big = CPR_RECOVERY_PLAN_MAX + 1;
    unsigned char *plan = malloc(big);
    for (size_t i = 0; i < big; i++)
        plan[i] = (unsigned char)(i * 31u);
    uint64_t gen = 0;
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_recovery_put(f->store, "j", 0, plan, big, &gen, NULL));
    assert_non_null(strstr(cpr_errmsg(), "bytes"));
    assert_status(CPR_INVALID_ARGUMENT,
                  cpr_store_recovery_put(f->store, "j", UINT64_MAX, plan, 1, &gen, NULL));
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_recovery_put(f->store, "", 0, plan, 1, &gen, NULL));
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_recovery_put(f->store, "j", 0, NULL, 3, &gen, NULL));
    assert_record(f->store, "j", 0, NULL, 0); /* nothing refused was written */
    assert_status(CPR_OK, cpr_store_recovery_put(f->store, "j", 0, plan, big - 1, &gen, NULL));
    assert_record(f->store, "j", 1, plan, big - 1);
    free(plan);
}

static void reopen(tu_store_fixture *f)
{
    cpr_store_close(f->store);
    f->store = NULL;
    assert_status(CPR_OK, cpr_store_open(f->path, NULL, &f->store));
}

static void test_durable(void **state)
{
    tu_store_fixture *f = *state;
    uint64_t gen = 0;
    assert_status(CPR_OK, cpr_store_recovery_put(f->store, "j", 0, "plan-1", 6, &gen, NULL));
    reopen(f);
    assert_record(f->store, "j", 1, "plan-1", 6);
    /* A process that records and dies without closing the store: the
     * answer it got means the record is on disk. RocksDB is not fork-safe,
     * so the child is this program run afresh (main: --put-and-die). */
    cpr_store_close(f->store);
    f->store = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_store_recovery", "--put-and-die", f->path, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_status(CPR_OK, cpr_store_open(f->path, NULL, &f->store));
    assert_record(f->store, "j", 2, "plan-2", 6);
}

static void write_full(cpr_store *s, const char *job, uint64_t ckpt)
{
    cpr_part_spec spec = tu_part(job, 0, 1, ckpt, CPR_KIND_FULL, tables, 1);
    tu_write_part_ok(s, &spec, 0, 200);
}

static void test_survives_gc(void **state)
{
    tu_store_fixture *f = *state;
    uint64_t gen = 0;
    /* A record may come before any part: the job is then not listed. */
    assert_status(CPR_OK, cpr_store_recovery_put(f->store, "g", 0, "early", 5, &gen, NULL));
    char **jobs = NULL;
    size_t n_jobs = 0;
    assert_status(CPR_OK, cpr_store_list_jobs(f->store, &jobs, &n_jobs));
    assert_int_equal(n_jobs, 0);
    cpr_names_free(jobs, n_jobs);
    for (uint64_t c = 1; c <= 4; c++)
        write_full(f->store, "g", c);
    assert_status(CPR_OK, cpr_store_recovery_put(f->store, "g", 1, "after", 5, &gen, NULL));
    cpr_gc_report rep = {0};
    assert_status(CPR_OK, cpr_store_gc(f->store, "g", 1, &rep));
    assert_int_equal(rep.floor, 4);
    assert_int_equal(rep.parts_removed, 3);
    assert_record(f->store, "g", 2, "after", 5);
    write_full(f->store, "g", 5);
    assert_status(CPR_OK, cpr_store_gc_floor(f->store, "g", 5, &rep));
    assert_int_equal(rep.parts_removed, 1);
    assert_status(CPR_OK, cpr_store_gc(f->store, NULL, 1, &rep)); /* every job */
    reopen(f);
    assert_record(f->store, "g", 2, "after", 5);
}

/* ---- concurrency ---------------------------------------------------------------- */

#define THREADS 6
#define INCREMENTS 40

typedef struct racer {
    cpr_store *store;
    pthread_barrier_t *start;
    int id;
    cpr_status first;      /* the put at generation 0 */
    unsigned wins;         /* successful puts of the increment loop */
    unsigned errors;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    char plan[32];
    int len = snprintf(plan, sizeof plan, "racer-%d", r->id);
    uint64_t gen = 0;
    pthread_barrier_wait(r->start);
    r->first = cpr_store_recovery_put(r->store, "race", 0, plan, (size_t)len, &gen, NULL);
    pthread_barrier_wait(r->start);
    while (r->wins < INCREMENTS) { /* read, then compare-and-set, until it lands */
        void *cur = NULL;
        size_t cur_len = 0;
        if (cpr_store_recovery_get(r->store, "count", &gen, &cur, &cur_len, NULL) != CPR_OK) {
            r->errors++;
            break;
        }
        free(cur);
        cpr_status st = cpr_store_recovery_put(r->store, "count", gen, plan, (size_t)len, &gen,
                                               NULL);
        r->wins += st == CPR_OK;
        r->errors += st != CPR_OK && st != CPR_FAILED_PRECONDITION;
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    tu_store_fixture *f = *state;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t threads[THREADS];
    racer racers[THREADS];
    for (int i = 0; i < THREADS; i++) {
        racers[i] = (racer){f->store, &start, i, CPR_INTERNAL, 0, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, race, &racers[i]), 0);
    }
    int first_winners = 0, winner = -1;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        assert_int_equal(racers[i].errors, 0);
        assert_int_equal(racers[i].wins, INCREMENTS);
        if (racers[i].first == CPR_OK) {
            first_winners++;
            winner = i;
        } else {
            assert_int_equal(racers[i].first, CPR_FAILED_PRECONDITION);
        }
    }
    pthread_barrier_destroy(&start);
    assert_int_equal(first_winners, 1);
    char plan[32];
    int len = snprintf(plan, sizeof plan, "racer-%d", winner);
    assert_record(f->store, "race", 1, plan, (size_t)len);
    uint64_t gen = 0;
    void *last = NULL;
    size_t last_len = 0;
    assert_status(CPR_OK, cpr_store_recovery_get(f->store, "count", &gen, &last, &last_len, NULL));
    assert_int_equal(gen, THREADS * INCREMENTS); /* no lost and no double update */
    free(last);
}

/* The child of test_durable: record generation 2 and exit without closing. */
static int put_and_die(const char *path)
{
    cpr_store *s = NULL;
    uint64_t g = 0;
    int ok = cpr_store_open(path, NULL, &s) == CPR_OK &&
             cpr_store_recovery_put(s, "j", 1, "plan-2", 6, &g, NULL) == CPR_OK && g == 2;
    if (!ok)
        fprintf(stderr, "put-and-die: %s\n", cpr_errmsg());
    _exit(ok ? 0 : 1);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--put-and-die") == 0)
        return put_and_die(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_record, tu_store_setup, tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_compare_and_set, tu_store_setup, tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_limits, tu_store_setup, tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_durable, tu_store_setup, tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_survives_gc, tu_store_setup, tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent, tu_store_setup, tu_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
