/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The seeded failure schedule (cpr_harness.h). Uniform doubles come from
 * xoshiro256** seeded through SplitMix64 (the same generator as the DLRM
 * example's, written out here so the harness depends on nothing but libc and
 * libm), so a seed gives the same schedule everywhere up to libm's log/pow.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "cpr/failure.h"
#include "cpr/rng.h"

/* Uniform in (0, 1]: never 0, so -log(u) is finite. */

static cpr_status check(const cpr_failure_config *c)
{
    if (!(c->mean_steps > 0) || !isfinite(c->mean_steps))
        return cpr_fail(CPR_INVALID_ARGUMENT, "mean_steps must be positive and finite");
    if (c->num_shards == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "num_shards must be at least 1");
    if (c->distribution != CPR_FAILURE_EXPONENTIAL && c->distribution != CPR_FAILURE_WEIBULL)
        return cpr_fail(CPR_INVALID_ARGUMENT, "distribution must be exponential or weibull");
    if (c->distribution == CPR_FAILURE_WEIBULL && (!(c->shape > 0) || !isfinite(c->shape)))
        return cpr_fail(CPR_INVALID_ARGUMENT, "the Weibull shape must be positive and finite");
    return CPR_OK;
}

/* One inter-arrival time in steps (inverse CDF of the distribution). */
static double draw_gap(const cpr_failure_config *c, cpr_rng *r)
{
    double e = -log(cpr_rng_unit(r)); /* Exp(1) */
    if (c->distribution == CPR_FAILURE_EXPONENTIAL)
        return c->mean_steps * e;
    double scale = c->mean_steps / tgamma(1.0 + 1.0 / c->shape);
    return scale * pow(e, 1.0 / c->shape);
}

cpr_status cpr_failure_schedule(const cpr_failure_config *config, cpr_failure **out, size_t *n)
{
    if (!config || !out || !n)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_failure_schedule needs a config and outputs");
    cpr_status st = check(config);
    if (st)
        return st;
    cpr_rng rng;
    cpr_rng_seed(&rng, config->seed ^ 0x6661696c75726573ull); /* "failures" */
    cpr_failure *list = NULL;
    size_t count = 0, cap = 0;
    double t = 0;
    uint64_t last = 0;
    for (;;) {
        t += draw_gap(config, &rng);
        uint64_t step = (uint64_t)ceil(t);
        step = step > last ? step : last + 1;
        if (step > config->horizon_steps)
            break;
        if (count == cap) {
            cap = cap ? 2 * cap : 16;
            cpr_failure *grown = realloc(list, cap * sizeof *grown);
            if (!grown) {
                free(list);
                return cpr_fail(CPR_NO_MEMORY, "out of memory for a failure schedule");
            }
            list = grown;
        }
        /* Whole entries, padding included: the same seed gives the same bytes. */
        memset(&list[count], 0, sizeof list[count]);
        list[count].step = step;
        list[count].shard = (uint32_t)(cpr_rng_next(&rng) % config->num_shards);
        count++;
        last = step;
    }
    *out = list;
    *n = count;
    return CPR_OK;
}

void cpr_failure_schedule_print(FILE *out, const cpr_failure *failures, size_t n)
{
    fprintf(out, "failure schedule: %zu failure%s", n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s step %llu shard %u", i ? "," : ":",
                (unsigned long long)failures[i].step, failures[i].shard);
    fputc('\n', out);
}

cpr_status cpr_failure_law_parse(const char *name, cpr_failure_law *out)
{
    if (name && strcmp(name, "exponential") == 0)
        *out = CPR_FAILURE_EXPONENTIAL;
    else if (name && strcmp(name, "weibull") == 0)
        *out = CPR_FAILURE_WEIBULL;
    else
        return cpr_fail(CPR_INVALID_ARGUMENT, "unknown failure law \"%s\": use exponential "
                        "or weibull", name ? name : "(null)");
    return CPR_OK;
}
