/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.h - what the reference trainer needs beyond CPR's public API, kept in
 * the example so that it builds against include/cpr alone, like any program
 * a user writes: warnings on stderr, a monotonic clock for the time
 * breakdown, and the job-name rule checked before any storage is touched.
 * Errors still travel as cpr_status with a message from cpr_fail().
 */
#ifndef CPR_DLRM_UTIL_H
#define CPR_DLRM_UTIL_H

#define DLRM_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

typedef enum dlrm_log_level {
    DLRM_LOG_ERROR = 0,
    DLRM_LOG_WARN = 1,
    DLRM_LOG_INFO = 2,
    DLRM_LOG_DEBUG = 3
} dlrm_log_level;

/* Messages above this level are dropped before they are formatted (the
 * trainer only warns, so the default keeps everything it says). */
extern dlrm_log_level dlrm_log_max;

/* One line on stderr, "ts=SECONDS level=NAME msg="..."", the shape of the
 * lines CPR's libraries print, so one grep reads a run's whole stderr. */
void dlrm_log_line(dlrm_log_level level, const char *fmt, ...) DLRM_PRINTF(2, 3);
#define dlrm_log(level, ...) \
    do { \
        if ((level) <= dlrm_log_max) \
            dlrm_log_line((level), __VA_ARGS__); \
    } while (0)

/* Seconds on CLOCK_MONOTONIC: differences only (step and save timings). */
double dlrm_now_s(void);

/* 1 if `job` is a name the store accepts: 1 to 128 of [A-Za-z0-9._-]. The
 * checkpointer checks it up front to refuse a bad --job before training. */
int dlrm_job_name_ok(const char *job);

#endif /* CPR_DLRM_UTIL_H */
