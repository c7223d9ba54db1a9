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
#include <stdio.h>
#include <stdint.h>

#include "cpr/status.h"
#include "cpr/store.h"

#define BENCH_MB 1e6 /* bench reports decimal megabytes */

/* cpr-bench store --backend rados: where the store goes and how the
 * `rados bench` baseline runs (bench_rados.c). */
typedef struct bench_rados_opts {
    int enabled;          /* 1: --backend rados */
    int flags_given;      /* 1: some --rados-* flag was given */
    const char *conf;     /* --rados-conf (NULL: the rados default search path) */
    const char *pool;     /* --rados-pool (default "cpr") */
    uint64_t write_ios;   /* rados bench write -t (default 2) */
    uint64_t read_ios;    /* rados bench seq -t (default 8) */
    char ns[64];          /* this run's namespace, "bench-<pid>-<time>" */
} bench_rados_opts;

typedef struct bench_opts {
    uint64_t rows;        /* rows of the one table, ids 0..rows-1 */
    uint32_t dim;         /* float values per row */
    uint32_t state_dim;   /* float optimizer-state values per row */
    size_t batch_rows;    /* rows per put_rows call and per restore callback */
    const char *dir;      /* working directory; NULL: a fresh temp dir */
    int keep;             /* 1: leave the working directory behind */
    int json;             /* 1: one JSON line on stdout instead of a table */
    uint32_t rounds;      /* store: alternating store/raw rounds (median);
                             rpc --backend rados: runs per shard count */
    int rounds_set;       /* --rounds was given */
    uint32_t chain;       /* store --chain: PRIORITY parts after the FULL */
    /* cpr-bench rpc only */
    uint32_t shards[8];   /* shard counts to run, in order */
    size_t n_shards;
    const char *ckptd;    /* path of the ckptd binary */
    const char *restore_streams; /* rpc: ckptd's --restore-streams (NULL: its default) */
    int transports;       /* rpc: 1 TCP on 127.0.0.1, 2 a Unix socket, 3 both */
    int direct;           /* rpc --direct: the clients read the pool themselves
                             (direct reads; needs --backend rados) */
    int direct_writes;    /* rpc --direct-writes: and write it (direct writes) */
    bench_rados_opts rados; /* store --backend rados */
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
    /* The baseline: the raw disk, or with --backend rados `rados bench`
     * (raw_bytes written then read sequentially in 4 MiB objects). */
    uint64_t raw_bytes;        /* bytes of the raw baseline file */
    int raw_direct;            /* 1: DIR accepted O_DIRECT */
    double open_s, full_s, priority_s, ingest_s, close_s;
    double warmup_s;           /* rpc: the untimed first save (0: none) */
    double drop_cache_s, reopen_s, restore_s;
    double raw_write_s, raw_read_s, total_s;
    bench_cpu ingest_cpu, restore_cpu;
    uint64_t ingest_peak_kb, restore_peak_kb; /* peak resident memory of each phase */
} bench_result;

/* Progress lines on stderr (bench_fs.c). */
typedef struct bench_progress {
    const char *what;   /* "writing FULL part" */
    uint64_t total;
    double last_print_s;
    int last_pct;
} bench_progress;

/* ---- bench_store.c: the workload and the store phases -------------------- */

#define BENCH_JOB "bench"
#define FULL_CKPT 1
#define PRIORITY_CKPT 2
#define PRIORITY_ONE_IN 8      /* 12.5% of the rows */
#define FULL_CHECK_ONE_IN 64   /* rows compared element by element */

/* The rows of the workload, made so that generating them costs almost
 * nothing in timed loops (bench_store.c says how). One per writer thread. */
typedef struct bench_data {
    uint32_t dim, state_dim;
    size_t batch_rows;
    /* batch_rows x dim values (and x state_dim state): a row with id `r` is
     * pattern row r % batch_rows, except element 0, which is its tag. */
    float *pattern_values;
    float *pattern_state;
    uint64_t *ids;             /* ids of the batch being sent */
    float *values, *state;     /* PRIORITY rows gathered from the pattern */
    uint64_t *priority_ids;    /* sorted, chosen before any timing */
    size_t n_priority;
} bench_data;

cpr_status bench_data_init(bench_data *d, const bench_opts *opts);
void bench_data_release(bench_data *d);
/* 1 if row `id` is in the PRIORITY part (a pseudo-random 1 in 8, and row 0). */
int bench_in_priority(uint64_t id);

/* Prepare rows first..first+n-1 of a part: their ids in d->ids, their values
 * and state behind the returned pointers, tags of checkpoint `ckpt`. FULL:
 * `first` counts rows and must be a multiple of batch_rows; PRIORITY: it
 * indexes d->priority_ids. */
typedef void (*bench_fill_fn)(bench_data *d, uint64_t first, size_t n, uint64_t ckpt,
                              float **values, float **state);
void bench_fill_full(bench_data *d, uint64_t first, size_t n, uint64_t ckpt, float **values,
                     float **state);
void bench_fill_priority(bench_data *d, uint64_t first, size_t n, uint64_t ckpt,
                         float **values, float **state);

/* Checks restored rows (a cpr_row_fn): every row from next_id on arrives, in
 * order, holding the version of the newest part that has it. */
typedef struct bench_verifier {
    const bench_data *d;
    uint64_t next_id;   /* every row arrives, in ascending order */
    uint64_t rows;
    char problem[256];  /* first mismatch, "" if none */
    bench_progress progress;
} bench_verifier;
cpr_status bench_check_batch(void *ctx, const cpr_row_batch *batch);

/* Run the store phases in `store_dir` (which must not exist yet): ingest a
 * FULL and a PRIORITY part, close, drop the page cache of `store_dir`,
 * reopen, restore and verify every row. Fills the store fields of *res.
 * Prints the reason and returns non-OK on failure, including CPR_CORRUPT
 * when a restored row or the row count is not what was written. */
cpr_status bench_store_run(const bench_opts *opts, const char *store_dir,
                           bench_result *res);

/* ---- bench_chain.c: a FULL and a long chain of PRIORITY parts ------------- */

typedef struct bench_chain {
    uint64_t bytes_written;    /* payload of the FULL and the chain */
    uint64_t final_folds;      /* folds cpr_store_fold still had to write */
    uint64_t store_bytes;      /* on disk at the end */
    uint64_t full_peak_kb, chain_peak_kb; /* peak resident memory of each restore */
    double write_s, fold_s, restore_full_s, restore_chain_s;
} bench_chain;

/* Write a FULL and opts->chain PRIORITY parts in `store_dir` (must not
 * exist), finish folding, restore the FULL alone and the newest state from
 * a cold cache, checking every row. */
cpr_status bench_chain_run(const bench_opts *opts, const char *store_dir, bench_chain *res);

/* ---- bench_rpc.c: the same workload through the client and ckptd ---------- */

/* Start ckptd (opts->ckptd) on 127.0.0.1 (or, use_unix, a Unix-domain socket
 * in `data_dir`) over `data_dir`; `shards` writers
 * ingest the FULL and PRIORITY parts through one client, concurrently (rows
 * split into contiguous ranges); stop, drop the cache, restart; every shard
 * restores and checks its rows. Fills the same fields as bench_store_run;
 * CPU times include the daemon's. */
cpr_status bench_rpc_run(const bench_opts *opts, const char *data_dir, uint32_t shards,
                         int use_unix, bench_result *res);

/* ---- bench_raw.c: the raw-disk baseline --------------------------------- */

/* 1 if files in `dir` can be opened with O_DIRECT, 0 if not. */
int bench_direct_supported(const char *dir);

/* Write `bytes` bytes to `path` with cpri_bfile (O_DIRECT, fdatasync), drop
 * the page cache of `work_dir`, read the file back with O_DIRECT. Fills
 * raw_bytes, raw_write_s, raw_read_s. Leaves the file in place. */
cpr_status bench_raw_run(const char *path, uint64_t bytes, const char *work_dir,
                         bench_result *res);

/* ---- bench_rados.c: the RADOS backend and its `rados bench` baseline ------ */

/* If argv[*i] is --backend, --rados-conf, --rados-pool, --rados-write-ios or
 * --rados-read-ios, parse it into opts->rados and return 1 (advancing *i);
 * 0 if it is none of them; -1 on a bad or missing value (printed). */
int bench_rados_parse_flag(int argc, char **argv, int *i, bench_opts *opts);
/* After parsing: -1 (printed) when --rados-* flags come without
 * --backend rados; else fill the defaults and return 0. */
int bench_rados_check_opts(bench_opts *opts);

/* Which backend and baseline a run used, into a JSON object: "backend",
 * "baseline", and raw_direct (local) or the pool, namespace, conf and
 * rados bench depths (rados). 0 done, -1 out of memory. */
typedef struct cpri_json cpri_json;
int bench_backend_json(cpri_json *root, const bench_opts *opts, int raw_direct);

/* Store options for `opts` (all zero but the RADOS fields in rados mode;
 * the strings stay borrowed from opts). */
cpr_store_options bench_store_options(const bench_opts *opts);

/* Pick this run's namespace, "bench-<pid>-<unix time>", and check that it
 * is empty (CPR_ALREADY_EXISTS if not: never reuse another run's objects). */
cpr_status bench_rados_begin(bench_opts *opts);

/* The cluster's own limit on the same bytes: `rados bench write` of
 * `bytes` (rounded up to whole 4 MiB objects, write_ios in flight) then
 * `rados bench seq` of them (read_ios in flight, --no-verify) in this
 * run's namespace, then `rados cleanup`. Fills raw_bytes, raw_write_s,
 * raw_read_s. Runs the `rados` CLI (PATH); tools never call librados. */
cpr_status bench_rados_run(const bench_opts *opts, uint64_t bytes, bench_result *res);

/* Remove every object of this run's namespace (the store's segments and
 * catalog, what a failed `rados bench` left); *removed gets the count
 * (may be NULL). Refuses a namespace not named "bench-...". */
cpr_status bench_rados_purge(const bench_opts *opts, uint64_t *removed);
/* At the end of a run whose namespace bench_rados_begin chose: empty it, or
 * with --keep say that it is kept. */
void bench_rados_release(const bench_opts *opts);

/* ---- bench_fs.c: directories, page cache, progress, CPU time ------------ */

/* fsync then POSIX_FADV_DONTNEED every regular file under `dir`, so the
 * next read of each comes from the device. *disk_bytes (may be NULL) gets
 * the allocated size of those files. */
cpr_status bench_drop_cache(const char *dir, uint64_t *disk_bytes);

/* rm -rf `path`. */
cpr_status bench_remove_tree(const char *path);

/* malloc'd "a/b"; NULL when out of memory. */
char *bench_path_join(const char *a, const char *b);

void bench_progress_start(bench_progress *p, const char *what, uint64_t total);
/* Print "cpr-bench: <what> ... NN%" to stderr, at most a few times a second
 * (and always at 100%); nothing when `what` is NULL. */
void bench_progress_update(bench_progress *p, uint64_t done);

/* Peak resident memory: reset the process's high-water mark (Linux
 * clear_refs), and read it in KiB (VmHWM; 0 if unknown). */
void bench_peak_rss_reset(void);
uint64_t bench_peak_rss_kb(void);

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

/* A whole-number flag of a subcommand: its name, range and where it goes
 * (an offset into the subcommand's options struct of uint64_t fields). */
typedef struct bench_u64_flag {
    const char *flag;
    uint64_t lo, hi;
    size_t off;
} bench_u64_flag;

/* If argv[*i] is one of `flags` (`--flag V` or `--flag=V`), parse it into
 * `opts` and return 1 (advancing *i); 0 if it is none of them; -1 on a bad
 * or missing value (the message is printed). */
/* The median of v[0..n) (n >= 1; v is sorted in place), and x rounded to
 * three decimals for JSON output. */
double bench_median(double *v, size_t n);
double bench_r3(double x);

/* --json (sets *json) or --help/-h (prints usage on stdout and exits 0):
 * 1 if `arg` was one of them. */
int bench_json_or_help(const char *arg, int *json, void (*print_usage)(FILE *out));

int bench_parse_u64_flags(int argc, char **argv, int *i, const bench_u64_flag *flags, size_t n,
                          void *opts);

/* ---- bench_embedding.c: cpr-bench embedding ------------------------------ */

/* Run `cpr-bench embedding` with its own arguments; returns the exit code. */
int bench_embedding_main(int argc, char **argv);

/* ---- bench_save.c: cpr-bench save ---------------------------------------- */

/* Run `cpr-bench save` (the stall of one save per policy) with its own
 * arguments; returns the exit code. */
int bench_save_main(int argc, char **argv);

/* ---- bench_quant.c: cpr-bench quant ---------------------------------------- */

/* Run `cpr-bench quant` (the row codecs against memcpy); returns the exit code. */
int bench_quant_main(int argc, char **argv);
/* cpr-bench nodes (bench_nodes.c): a restore over several daemons, merged
 * against node after node; default_ckptd: the daemon to run. */
int bench_nodes_main(int argc, char **argv, const char *default_ckptd);

#endif /* CPR_BENCH_H */
