/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd's idle-part reaper: a thread that aborts parts no call has touched
 * for the idle timeout (cpr_store_abort_idle), so that a client which dies
 * between Begin and Commit (before its stream even opens, where no broken
 * stream can tell) does not leave its part open until the daemon restarts.
 * The same thread runs retention (cpr_store_gc_lazy: every job keeps the
 * store's retain_cuts) every gc_interval_s, so row versions do not pile up
 * when no operator calls Gc: every restore steps over all of a row's
 * versions, and with tens of FULL parts kept that dominates its cost.
 */
#ifndef CPR_REAPER_H
#define CPR_REAPER_H

#include "cpr/store.h"

typedef struct cpri_reaper cpri_reaper;

/* Start reaping `store` (borrowed: it must outlive the reaper) of parts idle
 * for `idle_s` (> 0) seconds, checking every idle_s / 4 (at least 50 ms, at
 * most 30 s); and, when gc_interval_s > 0, run retention that often (only
 * after a commit since the last run; see cpr_store_stats parts_committed). */
cpr_status cpri_reaper_start(cpr_store *store, double idle_s, double gc_interval_s,
                            cpri_reaper **out);

/* Wake the thread, wait for it to end (at once, unless it is aborting a
 * part), free. NULL is a no-op. */
void cpri_reaper_stop(cpri_reaper *reaper);

#endif /* CPR_REAPER_H */
