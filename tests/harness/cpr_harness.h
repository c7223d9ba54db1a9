/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr_harness.h - failure injection for CPR's trainer and tests: a seeded
 * schedule of shard failures (exponential or Weibull inter-arrival times with
 * the same mean), in units of executed training steps, each hitting a shard
 * drawn uniformly. The same configuration gives the same schedule on every
 * machine, so every strategy of a comparison replays the same failures.
 * Pure computation: no I/O, no global state, thread-safe.
 */
#ifndef CPR_HARNESS_H
#define CPR_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cpr/status.h"

typedef enum fh_distribution {
    FH_EXPONENTIAL = 0, /* memoryless: the CPR paper's assumption */
    FH_WEIBULL = 1      /* shape k: < 1 infant mortality, > 1 wear-out */
} fh_distribution;

/* Zero-initialise, then set. */
typedef struct fh_schedule_config {
    uint64_t seed;
    fh_distribution distribution;
    double shape;            /* Weibull shape k > 0 (ignored for exponential) */
    double mean_steps;       /* mean steps between failures, > 0 */
    uint64_t horizon_steps;  /* failures are drawn in (0, horizon_steps] */
    uint32_t num_shards;     /* >= 1 */
} fh_schedule_config;

/* One failure: before the executed step `step` + 1 runs (i.e. once `step`
 * steps have run, recomputed ones included), shard `shard` fails. */
typedef struct fh_failure {
    uint64_t step;
    uint32_t shard;
} fh_failure;

/*
 * Draw the schedule: inter-arrival times from the distribution (Weibull with
 * scale mean / Gamma(1 + 1/k), so both have the configured mean), rounded up
 * to whole steps (at least 1 apart), until the horizon. *out is malloc'd
 * (free()), sorted by step; *n may be 0 with *out NULL. Errors:
 * CPR_INVALID_ARGUMENT (the message names the field), CPR_NO_MEMORY.
 */
cpr_status fh_schedule_make(const fh_schedule_config *config, fh_failure **out, size_t *n);

/* Print "failure schedule: N failures: step/shard ..." on one line. */
void fh_schedule_print(FILE *out, const fh_failure *failures, size_t n);

/* "exponential" / "weibull" -> the enum, or -1. */
int fh_distribution_parse(const char *name);

#endif /* CPR_HARNESS_H */
