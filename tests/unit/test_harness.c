/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The failure schedule (cpr/failure.h): same seed, same
 * schedule; another seed, another; the mean gap of a long schedule is the
 * configured mean for exponential and Weibull alike; shards are in range and
 * all hit; steps strictly increase within the horizon; bad configs refused.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpr/failure.h"
#include "testutil.h"

static void make(cpr_failure_config c, cpr_failure **f, size_t *n)
{
    assert_status(CPR_OK, cpr_failure_schedule(&c, f, n));
}

static void test_same_seed_same_schedule(void **state)
{
    (void)state;
    cpr_failure_config c = {.seed = 7, .mean_steps = 50, .horizon_steps = 5000,
                            .num_shards = 4};
    cpr_failure *a = NULL, *b = NULL, *d = NULL;
    size_t na = 0, nb = 0, nd = 0;
    make(c, &a, &na);
    make(c, &b, &nb);
    c.seed = 8;
    make(c, &d, &nd);
    assert_true(na > 50);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    assert_true(nd != na || memcmp(a, d, na * sizeof *a) != 0);
    free(a);
    free(b);
    free(d);
}

/* Mean gap within 5% of the configured mean over ~20000 failures. */
static void check_mean(cpr_failure_law dist, double shape)
{
    cpr_failure_config c = {.seed = 3, .distribution = dist, .shape = shape,
                            .mean_steps = 100, .horizon_steps = 2000000, .num_shards = 3};
    cpr_failure *f = NULL;
    size_t n = 0;
    unsigned hits[3] = {0};
    make(c, &f, &n);
    assert_true(n > 15000);
    for (size_t i = 0; i < n; i++) {
        assert_true(f[i].shard < 3);
        hits[f[i].shard]++;
        assert_true(f[i].step >= 1 && f[i].step <= c.horizon_steps);
        assert_true(i == 0 || f[i].step > f[i - 1].step);
    }
    assert_true(hits[0] && hits[1] && hits[2]);
    double mean = (double)f[n - 1].step / (double)n;
    assert_true(fabs(mean - 100) < 5);
    free(f);
}

static void test_means(void **state)
{
    (void)state;
    check_mean(CPR_FAILURE_EXPONENTIAL, 0);
    check_mean(CPR_FAILURE_WEIBULL, 0.7);
    check_mean(CPR_FAILURE_WEIBULL, 2.0);
}

static void test_bad_configs(void **state)
{
    (void)state;
    cpr_failure *f = NULL;
    size_t n = 0;
    cpr_failure_config c = {.mean_steps = 0, .horizon_steps = 10, .num_shards = 1};
    assert_status(CPR_INVALID_ARGUMENT, cpr_failure_schedule(&c, &f, &n));
    c.mean_steps = 10;
    c.num_shards = 0;
    assert_status(CPR_INVALID_ARGUMENT, cpr_failure_schedule(&c, &f, &n));
    c.num_shards = 1;
    c.distribution = CPR_FAILURE_WEIBULL;
    assert_status(CPR_INVALID_ARGUMENT, cpr_failure_schedule(&c, &f, &n));
    c.horizon_steps = 0;
    c.distribution = CPR_FAILURE_EXPONENTIAL;
    assert_status(CPR_OK, cpr_failure_schedule(&c, &f, &n));
    assert_int_equal(n, 0);
    cpr_failure_law law = CPR_FAILURE_EXPONENTIAL;
    assert_status(CPR_OK, cpr_failure_law_parse("weibull", &law));
    assert_int_equal(law, CPR_FAILURE_WEIBULL);
    assert_status(CPR_INVALID_ARGUMENT, cpr_failure_law_parse("gamma", &law));
    assert_int_equal(law, CPR_FAILURE_WEIBULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_seed_same_schedule),
        cmocka_unit_test(test_means),
        cmocka_unit_test(test_bad_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
