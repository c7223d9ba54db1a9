/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How many Restore streams ckptd serves at once (restore_gate.c says why and
 * the invariants). A stream takes a slot before it reads anything and gives
 * it back when it ends; the rest wait their turn, unless the streams holding
 * the slots stop making progress.
 */
#ifndef CPR_CKPTD_RESTORE_GATE_H
#define CPR_CKPTD_RESTORE_GATE_H

#include <stdint.h>

#include "cpr/status.h"

typedef struct cpri_restore_gate cpri_restore_gate;

/* A gate of `slots` (0: no limit) that lets a waiting stream in over the
 * limit once the holders have made no progress for stall_s seconds. */
cpr_status cpri_restore_gate_create(unsigned slots, double stall_s, cpri_restore_gate **out);
void cpri_restore_gate_destroy(cpri_restore_gate *g); /* NULL is a no-op; no holders left */

/* The default number of slots: the online CPUs, at least 2. */
unsigned cpri_restore_gate_default_slots(void);

/* Take a slot, waiting for one (G1, G2); 1 if let in over the limit after a
 * stall (G2), else 0. Every enter is paired with a leave. */
int cpri_restore_gate_enter(cpri_restore_gate *g);
/* A holder sent a message: the slots are in use, not stuck (G2). */
void cpri_restore_gate_progress(cpri_restore_gate *g);
void cpri_restore_gate_leave(cpri_restore_gate *g);

typedef struct cpri_restore_gate_stats {
    unsigned slots;        /* 0: no limit */
    unsigned holding;      /* streams holding a slot (over the limit included) now */
    uint64_t waited;       /* streams that found every slot taken and waited */
    uint64_t over_limit;   /* of them, let in over the limit after a stall (G2) */
} cpri_restore_gate_stats;

void cpri_restore_gate_stats_get(cpri_restore_gate *g, cpri_restore_gate_stats *out);

#endif /* CPR_CKPTD_RESTORE_GATE_H */
