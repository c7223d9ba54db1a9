/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Start a ckptd as a child process and learn its address: the one launcher
 * that cpr-bench and the tests share (library cpr_ckptd_launch). The child
 * dies with its parent (PR_SET_PDEATHSIG), so a crashed benchmark or test
 * leaves no daemon behind.
 */
#ifndef CPR_CKPTD_LAUNCH_H
#define CPR_CKPTD_LAUNCH_H

#include <sys/types.h>

#include "cpr/status.h"

typedef struct cpri_ckptd_proc {
    pid_t pid;
    char addr[256];       /* host:port, or unix:/path: what it printed */
    char metrics_addr[256]; /* host:port of --metrics-listen, if given ("" if not) */
} cpri_ckptd_proc;

/*
 * Run `ckptd` (the binary's path) on data directory `dir`, listening on
 * `listen` (NULL: 127.0.0.1:0, a free port), with retention off and
 * warnings only, plus the flags in `extra` (NULL-terminated, at most 16;
 * may be NULL). Returns once the daemon serves (it prints its address after
 * binding). CPR_UNAVAILABLE if it exits first (its stderr says why),
 * CPR_TIMEOUT (and killed) if it has not printed its address
 * CPRI_CKPTD_START_S after the start.
 */
cpr_status cpri_ckptd_spawn(const char *ckptd, const char *dir, const char *listen,
                           const char *const *extra, cpri_ckptd_proc *out);

/* How long a start waits for the daemon's address (a RADOS store connects
 * first), and a stop for its exit: ckptd stops in well under a second. */
#define CPRI_CKPTD_START_S 120
#define CPRI_CKPTD_STOP_S 60

/* SIGTERM, wait; CPR_INTERNAL unless it exited with status 0. A daemon
 * still running after CPRI_CKPTD_STOP_S has its threads' stacks printed to
 * stderr (by gdb, where installed), is killed, and CPR_TIMEOUT returned:
 * a hang at shutdown is a failure that says where, not a suite timeout. */
cpr_status cpri_ckptd_stop(cpri_ckptd_proc *d);
/* SIGKILL and reap. Both set d->pid to 0 once the process is reaped, and
 * do nothing for a pid of 0 (a failed spawn kills what it started). */
void cpri_ckptd_kill(cpri_ckptd_proc *d);

/* The stacks of every thread of process `pid`, to stderr, by gdb (under
 * `timeout timeout_s`); a line saying why not where gdb is missing. */
void cpri_dump_stacks(pid_t pid, int timeout_s);

#endif /* CPR_CKPTD_LAUNCH_H */
