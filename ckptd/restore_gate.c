/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Restore streams ckptd serves at once (restore_gate.h).
 *
 * Why: streams beyond the cores only interleave. On a 2-vCPU host, 16
 * shards restored at once through ckptd from RADOS moved 278 MB/s, the same
 * 16 two at a time 384-426 MB/s; a limit on the store's merge work alone
 * gained nothing, so the cost is in the streams (their gRPC windows and
 * buffers, the reads in flight of each): docs/performance.md.
 *
 * Invariants
 *  G1. At most `slots` streams hold a slot, except those let in by G2.
 *      Waiters are woken one per slot given back.
 *  G2. No wait is unbounded. A holder may be blocked on its client's flow
 *      control, and a client may read its streams in an order of its own
 *      (the stream it waits on queued behind one it does not read yet): a
 *      plain semaphore would deadlock it. So when no holder has sent a
 *      message, and no slot was taken or given back, for stall_s seconds,
 *      one waiter is let in over the limit (counted in over_limit); the
 *      clock restarts with it. A stuck client costs a stall per stream
 *      queued behind it, never a hang.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cpr_common.h"
#include "restore_gate.h"

struct cpri_restore_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* on CLOCK_MONOTONIC */
    unsigned slots, holding;
    uint64_t stall_ns;
    _Atomic uint64_t progress_ns; /* the last send, enter or leave (G2) */
    uint64_t waited, over_limit;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

unsigned cpri_restore_gate_default_slots(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 2 ? (unsigned)cpus : 2;
}

cpr_status cpri_restore_gate_create(unsigned slots, double stall_s, cpri_restore_gate **out)
{
    if (!out || !(stall_s > 0 && stall_s <= 3600))
        return cpr_fail(CPR_INVALID_ARGUMENT, "restore gate: stall %g s: give 0 < stall <= 3600",
                        stall_s);
    cpri_restore_gate *g = calloc(1, sizeof *g);
    if (!g)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the restore gate");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&g->mu, NULL);
    g->slots = slots;
    g->stall_ns = (uint64_t)(stall_s * 1e9);
    atomic_store(&g->progress_ns, now_ns());
    *out = g;
    return CPR_OK;
}

void cpri_restore_gate_destroy(cpri_restore_gate *g)
{
    if (!g)
        return;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

int cpri_restore_gate_enter(cpri_restore_gate *g)
{
    int over = 0;
    pthread_mutex_lock(&g->mu);
    if (g->slots && g->holding >= g->slots) {
        g->waited++;
        while (g->holding >= g->slots) {
            uint64_t last = atomic_load(&g->progress_ns), now = now_ns();
            if (now - last >= g->stall_ns || now < last) { /* G2 */
                g->over_limit++;
                over = 1;
                break;
            }
            uint64_t until = last + g->stall_ns;
            struct timespec ts = {(time_t)(until / 1000000000ull),
                                  (long)(until % 1000000000ull)};
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        }
    }
    g->holding++;
    atomic_store(&g->progress_ns, now_ns());
    pthread_mutex_unlock(&g->mu);
    return over;
}

void cpri_restore_gate_progress(cpri_restore_gate *g)
{
    atomic_store_explicit(&g->progress_ns, now_ns(), memory_order_relaxed);
}

void cpri_restore_gate_leave(cpri_restore_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->holding--;
    atomic_store(&g->progress_ns, now_ns());
    pthread_cond_signal(&g->cv); /* G1: one slot, one waiter */
    pthread_mutex_unlock(&g->mu);
}

void cpri_restore_gate_stats_get(cpri_restore_gate *g, cpri_restore_gate_stats *out)
{
    pthread_mutex_lock(&g->mu);
    *out = (cpri_restore_gate_stats){g->slots, g->holding, g->waited, g->over_limit};
    pthread_mutex_unlock(&g->mu);
}
