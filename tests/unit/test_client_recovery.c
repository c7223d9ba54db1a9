/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr_client_recovery_put when the answer is lost (client/recovery_rec.c),
 * against a scripted node: the real module is compiled in with stand-ins
 * for the node calls and the retry helpers of client.c, so each way a put
 * can end is produced exactly. A put that took effect but whose answer was
 * lost reports success (and is not sent twice); one that did not take
 * effect is sent again on UNAVAILABLE only, within `retries`; a record moved
 * by another process with another plan is FAILED_PRECONDITION; an identical
 * plan recorded by another counts as ours; a record that cannot be read
 * back leaves the outcome unknown, and says so; Get is retried on
 * UNAVAILABLE.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client_internal.h"
#include "cpr_common.h"
#include "testutil.h"

/* ---- the scripted node ----------------------------------------------------------- */

/* What the next put does; then what the next gets answer. */
typedef enum put_script {
    PUT_OK,               /* applied and answered */
    PUT_APPLIED_LOST,     /* applied, answer lost: UNAVAILABLE */
    PUT_APPLIED_TIMEOUT,  /* applied, deadline passed: TIMEOUT */
    PUT_LOST,             /* never arrived: UNAVAILABLE */
    PUT_LOST_TIMEOUT,     /* never arrived: TIMEOUT */
    PUT_DELAYED           /* UNAVAILABLE; applied late, just before the next put */
} put_script;

struct cpri_node {
    uint64_t generation;
    unsigned char plan[64];
    size_t len;
    put_script puts[8];   /* one per put call; past the end: PUT_OK */
    unsigned n_puts;
    unsigned get_failures; /* the next gets that fail with UNAVAILABLE */
    unsigned gets;
    int delayed;          /* a PUT_DELAYED put on its way: */
    uint64_t d_expected;
    unsigned char d_plan[64];
    size_t d_len;
};

static cpr_status fake_store(cpri_node *n, uint64_t expected, const void *plan, size_t len)
{
    if (n->generation != expected)
        return cpr_fail(CPR_FAILED_PRECONDITION, "at generation %llu",
                        (unsigned long long)n->generation);
    n->generation++;
    memcpy(n->plan, plan, len);
    n->len = len;
    return CPR_OK;
}

cpr_status cpri_node_recovery_put(cpri_node *n, const char *job, uint64_t expected,
                                 const void *plan, size_t len, double timeout_s,
                                 uint64_t *generation)
{
    (void)job;
    (void)timeout_s;
    put_script what = n->n_puts < 8 ? n->puts[n->n_puts] : PUT_OK;
    n->n_puts++;
    if (n->delayed) { /* the earlier put lands first */
        n->delayed = 0;
        (void)fake_store(n, n->d_expected, n->d_plan, n->d_len);
    }
    if (what == PUT_DELAYED) {
        n->delayed = 1;
        n->d_expected = expected;
        memcpy(n->d_plan, plan, len);
        n->d_len = len;
        return cpr_fail(CPR_UNAVAILABLE, "connection reset");
    }
    if (what == PUT_LOST)
        return cpr_fail(CPR_UNAVAILABLE, "connection refused");
    if (what == PUT_LOST_TIMEOUT)
        return cpr_fail(CPR_TIMEOUT, "deadline exceeded");
    cpr_status st = fake_store(n, expected, plan, len);
    if (st == CPR_OK && what == PUT_APPLIED_LOST)
        return cpr_fail(CPR_UNAVAILABLE, "connection reset");
    if (st == CPR_OK && what == PUT_APPLIED_TIMEOUT)
        return cpr_fail(CPR_TIMEOUT, "deadline exceeded");
    if (st == CPR_OK)
        *generation = n->generation;
    return st;
}

cpr_status cpri_node_recovery_get(cpri_node *n, const char *job, double timeout_s,
                                 uint64_t *generation, void **plan, size_t *len)
{
    (void)job;
    (void)timeout_s;
    n->gets++;
    if (n->get_failures) {
        n->get_failures--;
        return cpr_fail(CPR_UNAVAILABLE, "connection refused");
    }
    *plan = malloc(n->len + 1);
    memcpy(*plan, n->plan, n->len);
    *len = n->len;
    *generation = n->generation;
    return CPR_OK;
}

/* ---- client.c's helpers, without the pauses ----------------------------------------- */

size_t cpr_client_node_of(const cpr_client *c, const char *job, uint32_t shard)
{
    (void)c;
    (void)job;
    (void)shard;
    return 0;
}

int cpri_client_backoff(const cpr_client *c, unsigned attempt)
{
    return attempt < c->opts.retries;
}

cpr_status cpri_client_retry(const cpr_client *c, cpri_attempt_fn call, void *ctx)
{
    cpr_status st = call(ctx);
    for (unsigned i = 0; st == CPR_UNAVAILABLE && cpri_client_backoff(c, i); i++)
        st = call(ctx);
    return st;
}

/* ---- the cases -------------------------------------------------------------------------- */

typedef struct fixture {
    cpri_node node;
    cpri_node *nodes[1];
    cpr_client client;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->nodes[0] = &f->node;
    f->client.nodes = f->nodes;
    f->client.n_nodes = 1;
    f->client.opts.retries = 2;
    f->client.opts.call_timeout_s = 1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    free(*state);
    return 0;
}

static void script(fixture *f, put_script a, put_script b, put_script c)
{
    f->node.puts[0] = a;
    f->node.puts[1] = b;
    f->node.puts[2] = c;
}

static void test_applied_answer_lost(void **state)
{
    fixture *f = *state;
    uint64_t gen = 0;
    script(f, PUT_APPLIED_LOST, PUT_OK, PUT_OK);
    assert_status(CPR_OK, cpr_client_recovery_put(&f->client, "j", 0, "mine", 4, &gen));
    assert_int_equal(gen, 1);
    assert_int_equal(f->node.n_puts, 1); /* not sent twice */
    assert_int_equal(f->node.generation, 1);
    f->node.n_puts = 0;
    script(f, PUT_APPLIED_TIMEOUT, PUT_OK, PUT_OK);
    assert_status(CPR_OK, cpr_client_recovery_put(&f->client, "j", 1, "next", 4, &gen));
    assert_int_equal(gen, 2);
    assert_int_equal(f->node.n_puts, 1);
}

static void test_not_applied_is_sent_again(void **state)
{
    fixture *f = *state;
    uint64_t gen = 0;
    script(f, PUT_LOST, PUT_LOST, PUT_OK);
    assert_status(CPR_OK, cpr_client_recovery_put(&f->client, "j", 0, "mine", 4, &gen));
    assert_int_equal(gen, 1);
    assert_int_equal(f->node.n_puts, 3);
    /* Never arriving, within retries: not recorded, and said so. */
    f->node.n_puts = 0;
    script(f, PUT_LOST, PUT_LOST, PUT_LOST);
    gen = 77;
    assert_status(CPR_UNAVAILABLE, cpr_client_recovery_put(&f->client, "j", 1, "x", 1, &gen));
    assert_non_null(strstr(cpr_errmsg(), "not recorded"));
    assert_int_equal(f->node.n_puts, 3); /* 1 + retries */
    assert_int_equal(gen, 77);
    assert_int_equal(f->node.generation, 1);
    /* A timeout is not sent again: a late arrival could still apply it. */
    f->node.n_puts = 0;
    script(f, PUT_LOST_TIMEOUT, PUT_OK, PUT_OK);
    assert_status(CPR_TIMEOUT, cpr_client_recovery_put(&f->client, "j", 1, "x", 1, &gen));
    assert_int_equal(f->node.n_puts, 1);
}

/* The first send's answer is lost and it lands late, after the read-back
 * (not applied yet) and just before the resend, which is refused: the
 * record holds our plan at expected + 1, so the put succeeded. */
static void test_resend_refused_after_a_late_landing(void **state)
{
    fixture *f = *state;
    uint64_t gen = 0;
    script(f, PUT_DELAYED, PUT_OK, PUT_OK);
    assert_status(CPR_OK, cpr_client_recovery_put(&f->client, "j", 0, "mine", 4, &gen));
    assert_int_equal(gen, 1);
    assert_int_equal(f->node.n_puts, 2);
    assert_int_equal(f->node.generation, 1);
}

static void test_someone_else_won(void **state)
{
    fixture *f = *state;
    uint64_t gen = 0;
    /* Our put never arrives; another process records meanwhile. */
    assert_status(CPR_OK, fake_store(&f->node, 0, "theirs", 6));
    script(f, PUT_LOST, PUT_OK, PUT_OK);
    assert_status(CPR_FAILED_PRECONDITION,
                  cpr_client_recovery_put(&f->client, "j", 0, "mine", 4, &gen));
    assert_non_null(strstr(cpr_errmsg(), "generation 1"));
    assert_int_equal(f->node.n_puts, 1);
    /* The same bytes from another process are the same decision: ours. */
    f->node.n_puts = 0;
    assert_status(CPR_OK, fake_store(&f->node, 1, "same", 4));
    script(f, PUT_LOST, PUT_OK, PUT_OK);
    assert_status(CPR_OK, cpr_client_recovery_put(&f->client, "j", 1, "same", 4, &gen));
    assert_int_equal(gen, 2);
    /* Same length, other bytes: not ours. */
    assert_status(CPR_OK, fake_store(&f->node, 2, "abcd", 4));
    script(f, PUT_LOST, PUT_OK, PUT_OK);
    assert_status(CPR_FAILED_PRECONDITION,
                  cpr_client_recovery_put(&f->client, "j", 2, "abce", 4, &gen));
}

static void test_outcome_unknown(void **state)
{
    fixture *f = *state;
    uint64_t gen = 5;
    script(f, PUT_APPLIED_LOST, PUT_OK, PUT_OK);
    f->node.get_failures = 10; /* the node is gone after the put */
    assert_status(CPR_UNAVAILABLE, cpr_client_recovery_put(&f->client, "j", 0, "mine", 4, &gen));
    assert_non_null(strstr(cpr_errmsg(), "unknown"));
    assert_int_equal(gen, 5);
    assert_int_equal(f->node.gets, 3); /* the read back was retried */
}

static void test_get_retried(void **state)
{
    fixture *f = *state;
    uint64_t gen = 0;
    void *plan = NULL;
    size_t len = 0;
    assert_status(CPR_OK, fake_store(&f->node, 0, "p", 1));
    f->node.get_failures = 2;
    assert_status(CPR_OK, cpr_client_recovery_get(&f->client, "j", &gen, &plan, &len));
    assert_int_equal(gen, 1);
    assert_int_equal(len, 1);
    assert_memory_equal(plan, "p", 1);
    free(plan);
    f->node.get_failures = 3; /* one more than retries */
    assert_status(CPR_UNAVAILABLE, cpr_client_recovery_get(&f->client, "j", &gen, &plan, &len));
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_recovery_get(&f->client, "a b", &gen, &plan,
                                                                &len));
    assert_status(CPR_INVALID_ARGUMENT, cpr_client_recovery_put(&f->client, "j", 0, NULL, 3,
                                                                &gen));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_applied_answer_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_applied_is_sent_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resend_refused_after_a_late_landing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_someone_else_won, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outcome_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_retried, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
