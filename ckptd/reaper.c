/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The idle-part reaper (see reaper.h). It sleeps on a condition variable
 * bound to CLOCK_MONOTONIC, so a wall-clock jump neither fires it early nor
 * holds it back, and cpri_reaper_stop wakes it at once instead of waiting out
 * the period. The store logs each part it aborts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "cpr_common.h"
#include "reaper.h"

#define MIN_PERIOD_S 0.05
#define MAX_PERIOD_S 30.0

struct cpri_reaper {
    cpr_store *store;
    double idle_s, period_s;
    double gc_interval_s, next_gc_s; /* 0: no periodic retention */
    uint64_t committed_at_gc;        /* rows_in when retention last ran */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* on CLOCK_MONOTONIC */
    int stopping;        /* guarded by mu */
};

static struct timespec monotonic_in(double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long long ns = (long long)t.tv_nsec + (long long)(seconds * 1e9);
    t.tv_sec += (time_t)(ns / 1000000000LL);
    t.tv_nsec = (long)(ns % 1000000000LL);
    return t;
}

/* Periodic retention, when due and something was written since the last. */
static void retention(cpri_reaper *r)
{
    cpr_store_stats stats;
    if (r->gc_interval_s <= 0 || cpri_now_s() < r->next_gc_s ||
        cpr_store_stats_get(r->store, &stats) != CPR_OK || stats.rows_in == r->committed_at_gc)
        return;
    r->next_gc_s = cpri_now_s() + r->gc_interval_s;
    r->committed_at_gc = stats.rows_in;
    cpr_gc_report rep;
    double t0 = cpri_now_s();
    cpr_status st = cpr_store_gc_lazy(r->store, &rep); /* whole parts; folds at the floor */
    if (st != CPR_OK && st != CPR_NOT_FOUND)
        cpri_log(CPR_LOG_ERROR, "periodic retention: %s", cpr_errmsg());
    else if (st == CPR_OK && (rep.parts_removed || rep.uncommitted_removed))
        cpri_log(CPR_LOG_INFO, "periodic retention in %.3f s: floor %llu, %llu parts removed, "
                "%llu row versions dropped, %llu -> %llu bytes",
                cpri_now_s() - t0, (unsigned long long)rep.floor,
                (unsigned long long)rep.parts_removed,
                (unsigned long long)rep.versions_removed, (unsigned long long)rep.bytes_before,
                (unsigned long long)rep.bytes_after);
}

static void *reaper_main(void *arg)
{
    cpri_reaper *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        struct timespec until = monotonic_in(r->period_s);
        int rc = 0;
        while (!r->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&r->wake, &r->mu, &until);
        if (r->stopping)
            break;
        pthread_mutex_unlock(&r->mu);
        uint64_t aborted = 0;
        if (cpr_store_abort_idle(r->store, r->idle_s, &aborted) != CPR_OK)
            cpri_log(CPR_LOG_ERROR, "idle-part reaper: %s", cpr_errmsg());
        retention(r);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

cpr_status cpri_reaper_start(cpr_store *store, double idle_s, double gc_interval_s,
                            cpri_reaper **out)
{
    if (!(idle_s > 0))
        return cpr_fail(CPR_INVALID_ARGUMENT, "idle-part timeout %g s: give more than 0 s",
                        idle_s);
    cpri_reaper *r = calloc(1, sizeof *r);
    if (!r)
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting the idle-part reaper");
    r->store = store;
    r->idle_s = idle_s;
    r->period_s = idle_s / 4 < MIN_PERIOD_S ? MIN_PERIOD_S
                  : idle_s / 4 > MAX_PERIOD_S ? MAX_PERIOD_S : idle_s / 4;
    r->gc_interval_s = gc_interval_s > 0 ? gc_interval_s : 0;
    if (r->gc_interval_s > 0 && r->gc_interval_s < r->period_s)
        r->period_s = r->gc_interval_s < MIN_PERIOD_S ? MIN_PERIOD_S : r->gc_interval_s;
    r->next_gc_s = cpri_now_s() + r->gc_interval_s;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&r->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&r->mu, NULL);
    if (pthread_create(&r->thread, NULL, reaper_main, r) != 0) {
        pthread_cond_destroy(&r->wake);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "cannot start the idle-part reaper thread");
    }
    pthread_setname_np(r->thread, "cpr-reaper");
    *out = r;
    return CPR_OK;
}

void cpri_reaper_stop(cpri_reaper *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
