/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one logging path of CPR libraries: structured single lines on stderr
 * ("ts=... level=... msg=..."), with the level checked before formatting by
 * the cpri_log() macro. Daemons set cpri_log_threshold from their flags.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpr_common.h"

int cpri_log_threshold = CPR_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void cpri_log_impl(cpri_log_level level, const char *fmt, ...)
{
    char msg[1024];
    struct timespec ts;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    clock_gettime(CLOCK_REALTIME, &ts);
    /* One fprintf per line keeps lines from different threads whole. */
    fprintf(stderr, "ts=%lld.%03ld level=%s msg=\"%s\"\n", (long long)ts.tv_sec,
            ts.tv_nsec / 1000000, level_names[level], msg);
}

int cpri_log_level_parse(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

_Noreturn void cpri_bug(const char *file, int line, const char *msg)
{
    fprintf(stderr, "BUG at %s:%d: %s\n", file, line, msg);
    abort();
}

double cpri_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
