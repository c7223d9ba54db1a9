/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/failure.h - failure injection for trainers, benchmarks and tests: a seeded
 * schedule of shard failures (exponential or Weibull inter-arrival times with
 * the same mean), in units of executed training steps, each hitting a shard
 * drawn uniformly. The same configuration gives the same schedule on every
 * machine, so every strategy of a comparison replays the same failures.
 * Pure computation: no I/O, no global state, thread-safe.
 */
#ifndef CPR_FAILURE_H
#define CPR_FAILURE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cpr/export.h"
#include "cpr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpr_failure_law {
    CPR_FAILURE_EXPONENTIAL = 0, /* memoryless: the CPR paper's assumption */
    CPR_FAILURE_WEIBULL = 1      /* shape k: < 1 infant mortality, > 1 wear-out */
} cpr_failure_law;

/* Zero-initialise, then set. */
typedef struct cpr_failure_config {
    uint64_t seed;
    cpr_failure_law distribution;
    double shape;            /* Weibull shape k > 0 (ignored for exponential) */
    double mean_steps;       /* mean steps between failures, > 0 */
    uint64_t horizon_steps;  /* failures are drawn in (0, horizon_steps] */
    uint32_t num_shards;     /* >= 1 */
} cpr_failure_config;

/* One failure: before the executed step `step` + 1 runs (i.e. once `step`
 * steps have run, recomputed ones included), shard `shard` fails. */
typedef struct cpr_failure {
    uint64_t step;
    uint32_t shard;
} cpr_failure;

/*
 * Draw the schedule: inter-arrival times from the distribution (Weibull with
 * scale mean / Gamma(1 + 1/k), so both have the configured mean), rounded up
 * to whole steps (at least 1 apart), until the horizon. *out is malloc'd
 * (free()), sorted by step; *n may be 0 with *out NULL. Errors:
 * CPR_INVALID_ARGUMENT (the message names the field), CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_failure_schedule(const cpr_failure_config *config, cpr_failure **out, size_t *n);

/* Print "failure schedule: N failures: step/shard ..." on one line. */
CPR_API void cpr_failure_schedule_print(FILE *out, const cpr_failure *failures, size_t n);

/* "exponential" / "weibull" into *out; CPR_INVALID_ARGUMENT otherwise. */
CPR_API cpr_status cpr_failure_law_parse(const char *name, cpr_failure_law *out);

#ifdef __cplusplus
}
#endif
#endif /* CPR_FAILURE_H */
