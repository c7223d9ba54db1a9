/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The trainer's own small helpers (util.h): CPR's public API has no logging,
 * clock or name check to offer, and the example must not reach into CPR's
 * internal headers for them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "util.h"

dlrm_log_level dlrm_log_max = DLRM_LOG_WARN;

void dlrm_log_line(dlrm_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    struct timespec now;
    va_list ap;
    clock_gettime(CLOCK_REALTIME, &now);
    /* The commit thread warns too: holding the stream's lock across the
     * pieces keeps each line whole without a bounded buffer. */
    flockfile(stderr);
    fprintf(stderr, "ts=%lld.%03d level=%s msg=\"", (long long)now.tv_sec,
            (int)(now.tv_nsec / 1000000), names[level]);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\"\n", stderr);
    funlockfile(stderr);
}

double dlrm_now_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

static int job_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

int dlrm_job_name_ok(const char *job)
{
    if (!job)
        return 0;
    size_t n = 0;
    for (; job[n] != '\0'; n++)
        if (n == 128 || !job_char_ok(job[n]))
            return 0;
    return n > 0;
}
