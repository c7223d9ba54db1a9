/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tests' watchdog. A test that hangs in CI is killed by ctest with
 * nothing said of where. Every test program links this object
 * (tests/CMakeLists.txt, cpr_test); with CPR_TEST_WATCHDOG_S set (cpr_test_limit
 * sets it 30 s below the test's TIMEOUT), a thread waits that long, prints
 * the stacks of the test's threads and of its children's (a ckptd it
 * started, say) through gdb, and aborts: the children die with it
 * (PR_SET_PDEATHSIG, ckptd/launch.c). The wait is a deadline, never
 * synchronisation.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

/* Each gdb gets this long: the test and a few children fit in the 30 s
 * before ctest's limit. */
#define DUMP_S 8

/* Posted by the watchdog's thread once it runs its own code: the thread's
 * start-up is over. Under ASan that start-up takes the allocator's locks
 * (AsanThread::Init frees through the quarantine), and a test that forks
 * at once (test_retention, test_fold: their first tests fork a writer)
 * could fork while this thread held one: the child, which inherits the lock
 * held and no thread to release it, then hung at its first allocation. */
static sem_t started;

static void *watchdog_main(void *arg)
{
    double seconds = *(const double *)arg;
    sem_post(&started);
    struct timespec left = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
    fprintf(stderr, "\n*** the test is still running after %g s (CPR_TEST_WATCHDOG_S): "
            "its threads and its children's follow, then it aborts ***\n", seconds);
    fprintf(stderr, "--- pid %d (the test) ---\n", (int)getpid());
    cpri_dump_stacks(getpid(), DUMP_S);
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *t;
    while (tasks && (t = readdir(tasks)) != NULL) {
        if (t->d_name[0] == '.')
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/self/task/%s/children", t->d_name);
        FILE *f = fopen(path, "r");
        int child;
        while (f && fscanf(f, "%d", &child) == 1) {
            fprintf(stderr, "--- pid %d (a child) ---\n", child);
            cpri_dump_stacks((pid_t)child, DUMP_S);
        }
        if (f)
            fclose(f);
    }
    if (tasks)
        closedir(tasks);
    abort();
    return NULL;
}

__attribute__((constructor)) static void start_watchdog(void)
{
    static double seconds;
    const char *v = getenv("CPR_TEST_WATCHDOG_S");
    seconds = v ? strtod(v, NULL) : 0;
    if (!(seconds > 0))
        return;
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY); /* gdb, our child, may attach (Yama) */
    pthread_t thread;
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all); /* no signal meant for the test lands on this thread */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    sem_init(&started, 0, 0);
    if (pthread_create(&thread, &attr, watchdog_main, &seconds) != 0) {
        fprintf(stderr, "(no watchdog: cannot start its thread)\n");
    } else {
        pthread_setname_np(thread, "cpr-watchdog");
        while (sem_wait(&started) != 0 && errno == EINTR) { /* its start-up is over */
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}
