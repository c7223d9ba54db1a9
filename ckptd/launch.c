/* SPDX-License-Identifier: Apache-2.0 */
/* The shared ckptd launcher (launch.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpr_common.h"
#include "launch.h"

#define MAX_EXTRA 16

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
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(ckptd, (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", ckptd, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    FILE *from = fdopen(fds[0], "r");
    char line[400] = "";
    /* The daemon prints its address once it serves (its metrics' first, if
     * any); EOF means it died. */
    int ok = 0;
    out->metrics_addr[0] = '\0';
    while (!ok && from && fgets(line, sizeof line, from))
        if (sscanf(line, "ckptd listening on %255s", out->addr) == 1)
            ok = 1;
        else
            sscanf(line, "ckptd metrics on %255s", out->metrics_addr);
    if (from)
        fclose(from);
    else
        close(fds[0]);
    out->pid = pid;
    if (!ok) {
        cpri_ckptd_kill(out);
        return cpr_fail(CPR_UNAVAILABLE, "ckptd (%s) did not start (see its messages above)",
                        ckptd);
    }
    return CPR_OK;
}

cpr_status cpri_ckptd_stop(cpri_ckptd_proc *d)
{
    int status = 0;
    kill(d->pid, SIGTERM);
    if (waitpid(d->pid, &status, 0) != d->pid)
        return cpr_fail(CPR_IO, "waitpid ckptd: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return cpr_fail(CPR_INTERNAL, "ckptd did not exit cleanly on SIGTERM (status %d)",
                        status);
    return CPR_OK;
}

void cpri_ckptd_kill(cpri_ckptd_proc *d)
{
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
}
