/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal interface between the files of cpr-bench: the options of one
 * `cpr-bench store` run, the numbers it measures, and the helpers each file
 * provides (store phases, raw-disk baseline, directory walks, progress).
 * Not installed; nothing here is part of the CPR API.
 */
#ifndef CPR_BENCH_H
#define CPR_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/status.h"

#define BENCH_MB 1e6 /* bench reports decimal megabytes */

typedef struct bench_opts {
    uint64_t rows;        /* rows of the one table, ids 0..rows-1 */
    uint32_t dim;         /* float values per row */
    uint32_t state_dim;   /* float optimizer-state values per row */
    size_t batch_rows;    /* rows per put_rows call and per restore callback */
    const char *dir;      /* working directory; NULL: a fresh temp dir */
    int keep;             /* 1: leave the working directory behind */
    int json;             /* 1: one JSON line on stdout instead of a table */
} bench_opts;

/* CPU time used by the whole process (all threads) during a phase. */
typedef struct bench_cpu {
    double user_s;
    double sys_s;
} bench_cpu;

typedef struct bench_result {
    uint64_t row_bytes;        /* payload bytes of one row */
    uint64_t full_bytes;       /* payload of the FULL part */
    uint64_t priority_rows;
    uint64_t priority_bytes;
    uint64_t restore_rows;     /* rows the restore delivered (and verified) */
    uint64_t restore_bytes;    /* payload bytes the restore delivered */
    uint64_t store_disk_bytes; /* allocated size of DIR/store after ingest */
    uint64_t raw_bytes;        /* bytes of the raw baseline file */
    int raw_direct;            /* 1: DIR accepted O_DIRECT */
    double open_s, full_s, priority_s, ingest_s, close_s;
    double drop_cache_s, reopen_s, restore_s;
    double raw_write_s, raw_read_s, total_s;
    bench_cpu ingest_cpu, restore_cpu;
} bench_result;

/* ---- bench_store.c: the store phases ------------------------------------ */

/* Run the store phases in `store_dir` (which must not exist yet): ingest a
 * FULL and a PRIORITY part, close, drop the page cache of `store_dir`,
 * reopen, restore and verify every row. Fills the store fields of *res.
 * Prints the reason and returns non-OK on failure, including CPR_CORRUPT
 * when a restored row or the row count is not what was written. */
cpr_status bench_store_run(const bench_opts *opts, const char *store_dir,
                           bench_result *res);

/* ---- bench_raw.c: the raw-disk baseline --------------------------------- */

/* 1 if files in `dir` can be opened with O_DIRECT, 0 if not. */
int bench_direct_supported(const char *dir);

/* Write `bytes` bytes to `path` with cpr_bfile (O_DIRECT, fdatasync), drop
 * the page cache of `work_dir`, read the file back with O_DIRECT. Fills
 * raw_bytes, raw_write_s, raw_read_s. Leaves the file in place. */
cpr_status bench_raw_run(const char *path, uint64_t bytes, const char *work_dir,
                         bench_result *res);

/* ---- bench_fs.c: directories, page cache, progress, CPU time ------------ */

/* fsync then POSIX_FADV_DONTNEED every regular file under `dir`, so the
 * next read of each comes from the device. *disk_bytes (may be NULL) gets
 * the allocated size of those files. */
cpr_status bench_drop_cache(const char *dir, uint64_t *disk_bytes);

/* rm -rf `path`. */
cpr_status bench_remove_tree(const char *path);

/* malloc'd "a/b"; NULL when out of memory. */
char *bench_path_join(const char *a, const char *b);

typedef struct bench_progress {
    const char *what;   /* "writing FULL part" */
    uint64_t total;
    double last_print_s;
    int last_pct;
} bench_progress;

void bench_progress_start(bench_progress *p, const char *what, uint64_t total);
/* Print "cpr-bench: <what> ... NN%" to stderr, at most a few times a second
 * (and always at 100%). */
void bench_progress_update(bench_progress *p, uint64_t done);

/* CPU time of the process so far. */
bench_cpu bench_cpu_now(void);
/* end - start */
bench_cpu bench_cpu_since(bench_cpu start, bench_cpu end);

/* Print "cpr-bench: <what>: <STATUS>: <cpr_errmsg()>" to stderr; returns st. */
cpr_status bench_report(cpr_status st, const char *what);

/* ---- cpr_bench.c: command-line helpers ---------------------------------- */

/* A decimal number in [min, max]; prints a message naming `flag` and
 * returns -1 if `text` is not one. */
int bench_parse_u64(const char *flag, const char *text, uint64_t min, uint64_t max,
                    uint64_t *out);
/* The value of `--flag V` or `--flag=V` at argv[*i]; NULL if argv[*i] is
 * not `flag`; *missing set when the value is absent. */
const char *bench_flag_value(int argc, char **argv, int *i, const char *flag, int *missing);

/* ---- bench_embedding.c: cpr-bench embedding ------------------------------ */

/* Run `cpr-bench embedding` with its own arguments; returns the exit code. */
int bench_embedding_main(int argc, char **argv);

#endif /* CPR_BENCH_H */
