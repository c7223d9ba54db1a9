/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The layout of a recovery plan, shared by the planner (planner.c), which
 * makes plans, and the codec (plan_codec.c), which turns them into the bytes
 * recorded in ckptd and back. Nothing outside recovery/ sees it.
 */
#ifndef CPR_PLAN_INTERNAL_H
#define CPR_PLAN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/recovery.h"

#define REASON_MAX 1024 /* bytes of a plan's reason, with its NUL */

struct cpr_recovery_plan {
    cpr_plan_action action;
    unsigned problems;
    uint64_t cut, rewind_step;
    size_t n;
    cpr_plan_shard *shards;  /* n entries, shard i at index i (P1) */
    char reason[REASON_MAX];
    size_t reason_len;
};

#endif /* CPR_PLAN_INTERNAL_H */
