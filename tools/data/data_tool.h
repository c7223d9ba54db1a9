/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal interface between the files of cpr-data: the options of
 * `cpr-data stats`, which data_stats.c runs, and the exit codes both files
 * use. Not installed; nothing here is part of the CPR API.
 */
#ifndef CPR_DATA_TOOL_H
#define CPR_DATA_TOOL_H

#include <stdint.h>

#define EXIT_FAILED 1 /* the command ran and something went wrong */
#define EXIT_USAGE 2  /* bad command line */

#define STATS_DEFAULT_MAX_DISTINCT (1ull << 26)

typedef struct stats_opts {
    const char *path;
    uint64_t rows_per_table;  /* 0: the reader's default */
    uint64_t max_distinct;    /* values held by all distinct sets together */
    int strict;               /* 1: stop at the first malformed line */
    int json;                 /* 1: one JSON object on stdout */
} stats_opts;

/* Read the file and print its statistics; returns the process exit code. */
int data_stats_run(const stats_opts *opts);

#endif /* CPR_DATA_TOOL_H */
