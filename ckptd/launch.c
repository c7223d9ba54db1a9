/* SPDX-License-Identifier: Apache-2.0 */
/* The shared ckptd launcher (launch.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpr_common.h"
#include "launch.h"

#define MAX_EXTRA 16

/* The daemon prints its address once it serves (its metrics' first, if
 * any): read from its stdout `fd` until that line. 1 if it came; 0 at EOF
 * (it died) or, with *silent set, after CPRI_CKPTD_START_S of waiting. */
static int read_address(int fd, cpri_ckptd_proc *out, int *silent)
{
    char acc[1024];
    size_t have = 0;
    int ok = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    out->metrics_addr[0] = '\0';
    while (!ok) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = CPRI_CKPTD_START_S * 1000L - ((now.tv_sec - t0.tv_sec) * 1000L +
                                                (now.tv_nsec - t0.tv_nsec) / 1000000L);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = ms > 0 ? poll(&p, 1, (int)ms) : 0;
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0) {
            *silent = rc == 0;
            break;
        }
        ssize_t n = read(fd, acc + have, sizeof acc - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        acc[have] = '\0';
        for (char *nl = memchr(acc, '\n', have); !ok && nl; nl = memchr(acc, '\n', have)) {
            *nl = '\0';
            if (sscanf(acc, "ckptd listening on %255s", out->addr) == 1)
                ok = 1;
            else
                sscanf(acc, "ckptd metrics on %255s", out->metrics_addr);
            have -= (size_t)(nl + 1 - acc);
            memmove(acc, nl + 1, have + 1);
        }
        if (have == sizeof acc - 1) /* a line longer than any we look for */
            have = 0;
    }
    return ok;
}

cpr_status cpri_ckptd_spawn(const char *ckptd, const char *dir, const char *listen,
                           const char *const *extra, cpri_ckptd_proc *out)
{
    /* Retention only when asked for: a periodic run could remove the old
     * checkpoints a test or benchmark reads back. */
    const char *argv[10 + MAX_EXTRA] = {"ckptd", "--listen", listen ? listen : "127.0.0.1:0",
                                        "--data-dir", dir, "--log-level", "warn",
                                        "--gc-interval-s", "0"};
    size_t argc = 9;
    for (size_t i = 0; extra && extra[i]; i++) {
        if (i == MAX_EXTRA)
            return cpr_fail(CPR_INVALID_ARGUMENT, "more than %d extra ckptd flags", MAX_EXTRA);
        argv[argc++] = extra[i];
    }
    argv[argc] = NULL;
    int fds[2];
    if (pipe(fds) != 0)
        return cpr_fail(CPR_IO, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return cpr_fail(CPR_IO, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the parent */
        /* a hang's stacks: gdb, run by the parent, may attach (Yama) */
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(ckptd, (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", ckptd, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    int silent = 0, ok = read_address(fds[0], out, &silent);
    close(fds[0]);
    out->pid = pid;
    if (!ok) {
        cpri_ckptd_kill(out);
        if (silent)
            return cpr_fail(CPR_TIMEOUT, "ckptd (%s) did not say it serves within %d s (see "
                            "its messages above)", ckptd, CPRI_CKPTD_START_S);
        return cpr_fail(CPR_UNAVAILABLE, "ckptd (%s) did not start (see its messages above)",
                        ckptd);
    }
    return CPR_OK;
}

/* Wait for child `pid` to exit, at most `seconds`: 1 if it did (status
 * set), 0 if it still runs, -1 if it cannot be waited for (errno). */
static int wait_within(pid_t pid, double seconds, int *status)
{
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd >= 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc;
        do
            rc = poll(&p, 1, (int)(seconds * 1000));
        while (rc < 0 && errno == EINTR);
        close(fd);
        if (rc == 0)
            return 0;
    } else if (errno != ESRCH) {
        /* No pidfds (Linux < 5.3, or a seccomp profile refusing them): look
         * every 10 ms; the pause bounds the wait, it synchronises nothing. */
        for (int i = 0; i < (int)(seconds * 100); i++) {
            pid_t got = waitpid(pid, status, WNOHANG);
            if (got == pid)
                return 1;
            if (got < 0 && errno != EINTR)
                return -1;
            struct timespec pause = {0, 10000000L};
            nanosleep(&pause, NULL);
        }
        return 0;
    }
    /* it exited (or ESRCH: reaped already, which waitpid reports) */
    pid_t got;
    while ((got = waitpid(pid, status, 0)) < 0 && errno == EINTR) {
    }
    return got == pid ? 1 : -1;
}

void cpri_dump_stacks(pid_t pid, int timeout_s)
{
    char spid[32], limit[32];
    snprintf(spid, sizeof spid, "%d", (int)pid);
    snprintf(limit, sizeof limit, "%d", timeout_s);
    pid_t gdb = fork();
    if (gdb == 0) {
        dup2(STDERR_FILENO, STDOUT_FILENO);
        execlp("timeout", "timeout", limit, "gdb", "-batch", "-nx", "-iex",
               "set debuginfod enabled off", "-p", spid, "-ex", "thread apply all bt",
               (char *)NULL);
        static const char why[] = "(no stacks: cannot run timeout or gdb)\n";
        ssize_t unused = write(STDERR_FILENO, why, sizeof why - 1);
        (void)unused;
        _exit(127);
    }
    while (gdb > 0 && waitpid(gdb, NULL, 0) < 0 && errno == EINTR) {
    }
}

cpr_status cpri_ckptd_stop(cpri_ckptd_proc *d)
{
    int status = 0;
    if (d->pid <= 0) /* never started, or reaped already: no pid to signal (0 is the group) */
        return CPR_OK;
    kill(d->pid, SIGTERM);
    int waited = wait_within(d->pid, CPRI_CKPTD_STOP_S, &status);
    if (waited < 0) {
        int err = errno;
        pid_t pid = d->pid;
        if (err == ECHILD)
            d->pid = 0; /* not our child (any more): never signal that pid again */
        return cpr_fail(CPR_IO, "waitpid ckptd (pid %d): %s", (int)pid, strerror(err));
    }
    if (waited == 1)
        d->pid = 0; /* reaped: the pid may be another process's from now on */
    if (waited == 0) {
        cpri_log(CPR_LOG_ERROR, "ckptd (pid %d) did not stop within %d s of SIGTERM; its "
                 "threads follow", (int)d->pid, CPRI_CKPTD_STOP_S);
        cpri_dump_stacks(d->pid, 60);
        cpri_ckptd_kill(d);
        return cpr_fail(CPR_TIMEOUT, "ckptd did not stop within %d s of SIGTERM (its threads "
                        "are printed above)", CPRI_CKPTD_STOP_S);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return cpr_fail(CPR_INTERNAL, "ckptd did not exit cleanly on SIGTERM (status %d)",
                        status);
    return CPR_OK;
}

void cpri_ckptd_kill(cpri_ckptd_proc *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
}
