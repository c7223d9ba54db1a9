/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr-bench: how fast the CPR store ingests and restores a checkpoint
 * compared with what the disk under it can do. `cpr-bench store` writes a
 * FULL and a PRIORITY part, restores them from a cold cache while checking
 * every row, then measures raw sequential O_DIRECT write and read bandwidth
 * in the same directory, and reports both as a table or one JSON line.
 * With --backend rados the store keeps its segments and catalog in a Ceph
 * pool and the baseline is `rados bench` on the same cluster (bench_rados.c).
 * This file parses the command line, manages the working directory and
 * prints the results; bench_store.c, bench_raw.c and bench_fs.c do the work.
 */
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "bench.h"
#include "cpr_common.h"
#include "cpr_cli.h"
#include "cpr_json.h"

#define EXIT_FAILED 1 /* the benchmark ran and something went wrong */
#define EXIT_USAGE 2  /* bad command line */

#define MAX_ROWS (1ull << 40)
#define MAX_DIM 65536u
#define MAX_BATCH_ROWS (1u << 22)
#define MAX_BATCH_BYTES (1ull << 30)

static void usage(FILE *out)
{
    fputs("usage: cpr-bench <command> [options]\n"
          "\n"
          "commands:\n"
          "  store       ingest and restore a checkpoint with the store and compare\n"
          "              with raw sequential O_DIRECT disk bandwidth (--backend rados:\n"
          "              the store in a Ceph pool, against rados bench)\n"
          "  rpc         the same workload through the client library to a ckptd on\n"
          "              127.0.0.1, by 1, 4 and 16 concurrent shards, against the\n"
          "              store in-process and the raw disk\n"
          "  embedding   embedding-table forward/backward, tracking overhead, row\n"
          "              selection and gather, against memcpy bandwidth\n"
          "  save        the training stall of one save per policy (select, begin,\n"
          "              gather into staging) against a memcpy of the same bytes\n"
          "              (cpr-bench save --help)\n"
          "  quant       the row codecs (f32, bf16, f16, int8, int4): encode and decode\n"
          "              throughput against memcpy, bytes per row, error\n"
          "              (cpr-bench quant --help)\n"
          "  nodes       a restore over several ckptd daemons, merged by version,\n"
          "              against the same rows read node after node and a memcpy\n"
          "              (cpr-bench nodes --help)\n"
          "\n"
          "cpr-bench store [--rows N] [--dim D] [--state-dim S] [--dir PATH]\n"
          "                [--batch-rows B] [--rounds R] [--keep] [--json]\n"
          "                [--backend local|rados] [--rados-conf FILE] [--rados-pool NAME]\n"
          "                [--rados-write-ios N] [--rados-read-ios N]\n"
          "  --rows N        rows of the FULL part (default 2000000); the PRIORITY\n"
          "                  part rewrites a pseudo-random 12.5% of them\n"
          "  --dim D         float32 values per row (default 64)\n"
          "  --state-dim S   float32 optimizer-state values per row (default 1)\n"
          "  --batch-rows B  rows per put_rows call and per restore batch (default 8192)\n"
          "  --dir PATH      working directory on the filesystem to measure (default:\n"
          "                  a fresh directory under $TMPDIR or /tmp); the store goes\n"
          "                  in PATH/store, which must not exist yet\n"
          "  --rounds R      measure the store and the baseline R times (default 4),\n"
          "                  in alternating order (after an untimed warm-up\n"
          "                  write; a disk's speed drifts); the ratios are the\n"
          "                  medians of the rounds' ratios\n"
          "  --chain N       instead: a FULL and N PRIORITY parts of 1 in 8 rows each\n"
          "                  (default rows 500000), background folding on; restore\n"
          "                  the FULL alone and the newest state from a cold cache\n"
          "                  and report chain_restore_ratio (newest / FULL alone)\n"
          "  --backend B     local (default): the store on --dir's disk, against the\n"
          "                  raw disk; rados: segments and catalog in a Ceph pool (a\n"
          "                  local copy of the catalog in --dir), against `rados bench`\n"
          "                  writing the FULL part's bytes as 4 MiB objects and reading\n"
          "                  them back in order, each round (no raw-disk baseline);\n"
          "                  all in a namespace of the run's own, bench-<pid>-<time>,\n"
          "                  emptied at the end; reports rados_ingest_ratio and\n"
          "                  rados_restore_ratio; needs the rados tool on PATH\n"
          "  --rados-conf F  ceph.conf of the cluster (default: Ceph's search path)\n"
          "  --rados-pool P  pool, which must exist (default cpr)\n"
          "  --rados-write-ios N, --rados-read-ios N\n"
          "                  rados bench -t of the write and of the seq read (default\n"
          "                  2 and 8: the store's operations in flight, 2 chunk writes\n"
          "                  of 4 MiB and 8 block reads of about 1 MiB)\n"
          "  --keep          leave the store and the raw test file in place (rados:\n"
          "                  and the store's objects in its namespace)\n"
          "  --json          print one JSON object on one line instead of a table\n"
          "  -h, --help      print this help\n"
          "\n"
          "cpr-bench rpc [the store options] [--shards S] [--transport T] [--ckptd PATH]\n"
          "              [--restore-streams N] [--direct] [--direct-writes]\n"
          "  runs cpr-bench store's measurements (as the baseline), then for each\n"
          "  shard count S starts ckptd over DIR/rpc-S, has S threads write their\n"
          "  share of the rows (one part each, through one client) once untimed\n"
          "  (aborted: the daemon's and client's first save, warmup_s) and once\n"
          "  timed, stops it, drops the page cache, restarts it and restores every\n"
          "  shard concurrently\n"
          "  --shards S      run only this shard count (default: 1, 4 and 16)\n"
          "  --transport T   tcp (127.0.0.1), unix (a Unix-domain socket: ckptd on the\n"
          "                  trainer's host) or both (default)\n"
          "  --ckptd PATH    the daemon (default: ../ckptd/ckptd beside cpr-bench, the\n"
          "                  build tree's; else ckptd beside it, as installed)\n"
          "  --restore-streams N  the daemon's --restore-streams (default: its own,\n"
          "                  the online CPUs, at least 2; 0: no limit)\n"
          "  --backend rados (and the --rados-* flags): ckptd keeps its store in the\n"
          "                  pool, and every run is held against a rados bench of the\n"
          "                  same bytes beside it: --rounds R runs per shard count\n"
          "                  (default 3), the rados bench after the run in odd rounds\n"
          "                  and before it in even ones; each run reports the medians\n"
          "                  (ingest_ratio_median, restore_ratio_median), every\n"
          "                  round's ratios, and the figures of the median restore\n"
          "                  round\n"
          "  --direct        the clients read the stored blocks themselves, from the\n"
          "                  pool (--backend rados) or ckptd's directory on this host,\n"
          "                  ckptd answering restores with where they lie (direct\n"
          "                  reads, docs/client.md)\n"
          "  --direct-writes (with --backend rados) the clients write their parts'\n"
          "                  rows into the pool themselves, ckptd checking each\n"
          "                  segment's index at commit (direct writes)\n"
          "\n"
          "Progress goes to stderr. Exit status: 0 done and every restored row\n"
          "verified, 1 a failure or a wrong restored row, 2 bad command line.\n",
          out);
}

/* ---- command line -------------------------------------------------------- */

/* The shared parsers (cpr_cli.h), reporting with this tool's name. */
int bench_parse_u64(const char *flag, const char *text, uint64_t min, uint64_t max,
                    uint64_t *out)
{
    cpr_status st = cpri_cli_u64(flag, text, min, max, out);
    if (st)
        fprintf(stderr, "cpr-bench: %s\n", cpr_errmsg());
    return st ? -1 : 0;
}

int bench_json_or_help(const char *arg, int *json, void (*print_usage)(FILE *out))
{
    if (strcmp(arg, "--json") == 0) {
        *json = 1;
        return 1;
    }
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
        print_usage(stdout);
        exit(0);
    }
    return 0;
}

int bench_parse_u64_flags(int argc, char **argv, int *i, const bench_u64_flag *flags, size_t n,
                          void *opts)
{
    for (size_t k = 0; k < n; k++) {
        int missing = 0;
        const char *v = bench_flag_value(argc, argv, i, flags[k].flag, &missing);
        if (missing)
            return -1;
        if (v)
            return bench_parse_u64(flags[k].flag, v, flags[k].lo, flags[k].hi,
                                   (uint64_t *)((char *)opts + flags[k].off)) ? -1 : 1;
    }
    return 0;
}

const char *bench_flag_value(int argc, char **argv, int *i, const char *flag, int *missing)
{
    const char *v = cpri_cli_value(argc, argv, i, flag, missing);
    if (*missing)
        fprintf(stderr, "cpr-bench: %s\n", cpr_errmsg());
    return v;
}

typedef struct num_flag {
    const char *flag;
    uint64_t min, max;
} num_flag;

static const num_flag NUM_FLAGS[] = {
    {"--rows", 1, MAX_ROWS},
    {"--dim", 1, MAX_DIM},
    {"--state-dim", 0, MAX_DIM},
    {"--batch-rows", 1, MAX_BATCH_ROWS},
    {"--rounds", 1, 15},
    {"--chain", 1, 10000},
};

static void set_num(bench_opts *opts, size_t which, uint64_t v)
{
    switch (which) {
    case 0: opts->rows = v; break;
    case 1: opts->dim = (uint32_t)v; break;
    case 2: opts->state_dim = (uint32_t)v; break;
    case 3: opts->batch_rows = (size_t)v; break;
    case 4: opts->rounds = (uint32_t)v; opts->rounds_set = 1; break;
    default: opts->chain = (uint32_t)v; break;
    }
}

/* One option at argv[*i]: 0 taken, 1 --help, -1 error (already printed). */
static int parse_one(int argc, char **argv, int *i, bench_opts *opts)
{
    const char *arg = argv[*i], *value;
    int missing = 0;
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
        return 1;
    if (strcmp(arg, "--json") == 0) {
        opts->json = 1;
        return 0;
    }
    if (strcmp(arg, "--keep") == 0) {
        opts->keep = 1;
        return 0;
    }
    if (strcmp(arg, "--direct") == 0) {
        opts->direct = 1;
        return 0;
    }
    if (strcmp(arg, "--direct-writes") == 0) {
        opts->direct_writes = 1;
        return 0;
    }
    for (size_t f = 0; f < sizeof NUM_FLAGS / sizeof NUM_FLAGS[0]; f++) {
        const num_flag *nf = &NUM_FLAGS[f];
        uint64_t v;
        value = bench_flag_value(argc, argv, i, nf->flag, &missing);
        if (missing || (value && bench_parse_u64(nf->flag, value, nf->min, nf->max, &v)))
            return -1;
        if (value) {
            set_num(opts, f, v);
            return 0;
        }
    }
    value = bench_flag_value(argc, argv, i, "--shards", &missing);
    if (missing)
        return -1;
    if (value) {
        uint64_t v;
        if (bench_parse_u64("--shards", value, 1, 256, &v))
            return -1;
        opts->shards[0] = (uint32_t)v;
        opts->n_shards = 1;
        return 0;
    }
    value = bench_flag_value(argc, argv, i, "--transport", &missing);
    if (missing)
        return -1;
    if (value) {
        opts->transports = strcmp(value, "tcp") == 0 ? 1 : strcmp(value, "unix") == 0 ? 2
                           : strcmp(value, "both") == 0 ? 3 : 0;
        if (!opts->transports) {
            fprintf(stderr, "cpr-bench: --transport: '%s' is not tcp, unix or both\n", value);
            return -1;
        }
        return 0;
    }
    value = bench_flag_value(argc, argv, i, "--ckptd", &missing);
    if (missing)
        return -1;
    if (value) {
        opts->ckptd = value;
        return 0;
    }
    value = bench_flag_value(argc, argv, i, "--restore-streams", &missing);
    if (missing)
        return -1;
    if (value) {
        uint64_t v;
        if (bench_parse_u64("--restore-streams", value, 0, 4096, &v))
            return -1;
        opts->restore_streams = value;
        return 0;
    }
    value = bench_flag_value(argc, argv, i, "--dir", &missing);
    if (missing || (value && value[0] == '\0')) {
        if (!missing)
            fprintf(stderr, "cpr-bench: --dir needs a non-empty path\n");
        return -1;
    }
    if (value) {
        opts->dir = value;
        return 0;
    }
    int rados = bench_rados_parse_flag(argc, argv, i, opts);
    if (rados)
        return rados > 0 ? 0 : -1;
    fprintf(stderr, "cpr-bench: unknown option '%s' (see cpr-bench store --help)\n", arg);
    return -1;
}

/* 0 run, 1 help printed, -1 error printed. */
static int parse_store_args(int argc, char **argv, bench_opts *opts)
{
    *opts = (bench_opts){.rows = 0, .dim = 64, .state_dim = 1,
                         .batch_rows = 8192, .rounds = 4};
    for (int i = 0; i < argc; i++) {
        int rc = parse_one(argc, argv, &i, opts);
        if (rc)
            return rc;
    }
    if (bench_rados_check_opts(opts))
        return -1;
    if (opts->direct_writes && !opts->rados.enabled) {
        fprintf(stderr, "cpr-bench: --direct-writes works on segments in a Ceph pool: it "
                "needs --backend rados\n");
        return -1;
    }
    if (opts->rados.enabled && opts->chain) {
        fprintf(stderr, "cpr-bench: --chain runs on the local backend only\n");
        return -1;
    }
    if (opts->rows == 0)
        opts->rows = opts->chain ? 500000 : 2000000;
    uint64_t batch_bytes = (uint64_t)opts->batch_rows *
                           (8 + 4 * ((uint64_t)opts->dim + opts->state_dim));
    if (batch_bytes > MAX_BATCH_BYTES) {
        fprintf(stderr, "cpr-bench: --batch-rows: %zu rows of this size need %llu "
                "bytes per batch, more than %llu\n", opts->batch_rows,
                (unsigned long long)batch_bytes, (unsigned long long)MAX_BATCH_BYTES);
        return -1;
    }
    return 0;
}

/* ---- working directory ----------------------------------------------------- */

typedef struct workdir {
    char *dir;        /* malloc'd */
    char *store_dir;  /* dir/store */
    char *raw_path;   /* dir/raw-baseline.bin */
    int created;      /* 1: we made dir, so we remove all of it */
} workdir;

static cpr_status make_dir(const bench_opts *opts, workdir *wd)
{
    if (!opts->dir) {
        const char *tmp = getenv("TMPDIR");
        wd->dir = bench_path_join(tmp && tmp[0] ? tmp : "/tmp", "cpr-bench-XXXXXX");
        if (!wd->dir)
            return cpr_fail(CPR_NO_MEMORY, "out of memory");
        if (!mkdtemp(wd->dir))
            return cpr_fail(CPR_IO, "mkdtemp %s: %s", wd->dir, strerror(errno));
        wd->created = 1;
        return CPR_OK;
    }
    wd->dir = strdup(opts->dir);
    if (!wd->dir)
        return cpr_fail(CPR_NO_MEMORY, "out of memory");
    struct stat st;
    if (mkdir(wd->dir, 0700) == 0)
        wd->created = 1;
    else if (errno != EEXIST || stat(wd->dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return cpr_fail(CPR_IO, "cannot use %s as the working directory: %s",
                        wd->dir, strerror(errno == EEXIST ? ENOTDIR : errno));
    return CPR_OK;
}

static cpr_status must_not_exist(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0)
        return cpr_fail(CPR_ALREADY_EXISTS, "%s already exists: give --dir an empty "
                        "or new directory", path);
    return CPR_OK;
}

static cpr_status workdir_init(const bench_opts *opts, workdir *wd)
{
    *wd = (workdir){NULL, NULL, NULL, 0};
    cpr_status st = make_dir(opts, wd);
    if (st)
        return st;
    wd->store_dir = bench_path_join(wd->dir, "store");
    wd->raw_path = bench_path_join(wd->dir, "raw-baseline.bin");
    if (!wd->store_dir || !wd->raw_path)
        return cpr_fail(CPR_NO_MEMORY, "out of memory");
    st = must_not_exist(wd->store_dir);
    if (st == CPR_OK)
        st = must_not_exist(wd->raw_path);
    return st;
}

/* Remove what this run made (unless --keep) and free the paths. */
static void workdir_release(workdir *wd, const bench_opts *opts, int made_files)
{
    if (wd->dir && opts->keep) {
        fprintf(stderr, "cpr-bench: kept %s\n", wd->dir);
    } else if (wd->dir && wd->created) {
        bench_report(bench_remove_tree(wd->dir), "cleaning up");
    } else if (wd->store_dir && wd->raw_path && made_files) {
        bench_report(bench_remove_tree(wd->store_dir), "cleaning up");
        bench_report(bench_remove_tree(wd->raw_path), "cleaning up");
    }
    free(wd->dir);
    free(wd->store_dir);
    free(wd->raw_path);
}

/* Warn early when the run is unlikely to fit: the store (payload plus a
 * write-ahead copy, roughly) and the raw file. */
static void warn_if_small(const char *dir, uint64_t full_bytes)
{
    struct statvfs vfs;
    uint64_t need = 4 * full_bytes;
    if (statvfs(dir, &vfs) != 0)
        return;
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (avail < need)
        fprintf(stderr, "cpr-bench: warning: %s has %.0f MB free; this run may need "
                "about %.0f MB\n", dir, avail / BENCH_MB, need / BENCH_MB);
}

/* ---- results ---------------------------------------------------------------- */

static double mb_s(uint64_t bytes, double seconds)
{
    return seconds > 0 ? (double)bytes / BENCH_MB / seconds : 0;
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0;
}

/* Three decimals are plenty and keep the JSON readable. */
static double round3(double x)
{
    double scaled = x * 1000 + (x < 0 ? -0.5 : 0.5);
    return (double)(long long)scaled / 1000;
}

typedef struct rates {
    double ingest, full, priority, restore, raw_write, raw_read;
} rates;

static rates compute_rates(const bench_result *r)
{
    rates x = {
        mb_s(r->full_bytes + r->priority_bytes, r->ingest_s),
        mb_s(r->full_bytes, r->full_s),
        mb_s(r->priority_bytes, r->priority_s),
        mb_s(r->restore_bytes, r->restore_s),
        mb_s(r->raw_bytes, r->raw_write_s),
        mb_s(r->raw_bytes, r->raw_read_s),
    };
    return x;
}

typedef struct json_field {
    const char *key;
    double value;
} json_field;

/* What the baseline's figures are called: the raw disk's, or with
 * --backend rados those of `rados bench` (bench.h keeps both in raw_*). */
typedef struct baseline_names {
    const char *bytes, *write_mb_s, *read_mb_s, *ingest_ratio, *restore_ratio;
    const char *write_s, *read_s, *ingest_ratios, *restore_ratios, *store_bytes;
    const char *write_row, *read_row, *ingest_line, *restore_line, *store_line;
} baseline_names;

static const baseline_names RAW_NAMES = {
    "raw_bytes", "raw_write_mb_s", "raw_read_mb_s", "ingest_ratio", "restore_ratio",
    "raw_write_s", "raw_read_s", "ingest_ratios", "restore_ratios", "store_disk_bytes",
    "raw write", "raw read", "ingest / raw write  ", "restore / raw read  ",
    "store on disk       ",
};

static const baseline_names RADOS_NAMES = {
    "rados_bytes", "rados_write_mb_s", "rados_seq_read_mb_s", "rados_ingest_ratio",
    "rados_restore_ratio", "rados_write_s", "rados_seq_read_s", "rados_ingest_ratios",
    "rados_restore_ratios", "store_local_dir_bytes",
    "rados bench write", "rados bench seq", "ingest / rados write", "restore / rados seq ",
    "local dir (catalog) ",
};

static const baseline_names *names_of(const bench_opts *opts)
{
    return opts->rados.enabled ? &RADOS_NAMES : &RAW_NAMES;
}

/* The measurements of one run as a JSON object (NULL when out of memory);
 * the ratios given (>= 0) replace the run's own. */
static cpri_json *result_json_with(const bench_opts *opts, const bench_result *r,
                                  double ingest_ratio, double restore_ratio)
{
    rates x = compute_rates(r);
    const baseline_names *k = names_of(opts);
    if (ingest_ratio < 0)
        ingest_ratio = ratio(x.ingest, x.raw_write);
    if (restore_ratio < 0)
        restore_ratio = ratio(x.restore, x.raw_read);
    const json_field fields[] = {
        {"rows", (double)opts->rows},
        {"dim", opts->dim},
        {"state_dim", opts->state_dim},
        {"batch_rows", (double)opts->batch_rows},
        {"row_bytes", (double)r->row_bytes},
        {"full_bytes", (double)r->full_bytes},
        {"priority_rows", (double)r->priority_rows},
        {"priority_bytes", (double)r->priority_bytes},
        {"restore_rows", (double)r->restore_rows},
        {"restore_bytes", (double)r->restore_bytes},
        {k->store_bytes, (double)r->store_disk_bytes},
        {k->bytes, (double)r->raw_bytes},
        {"ingest_mb_s", round3(x.ingest)},
        {"full_ingest_mb_s", round3(x.full)},
        {"priority_ingest_mb_s", round3(x.priority)},
        {"restore_mb_s", round3(x.restore)},
        {k->write_mb_s, round3(x.raw_write)},
        {k->read_mb_s, round3(x.raw_read)},
        {k->ingest_ratio, round3(ingest_ratio)},
        {k->restore_ratio, round3(restore_ratio)},
        {"open_s", round3(r->open_s)},
        {"full_s", round3(r->full_s)},
        {"priority_s", round3(r->priority_s)},
        {"ingest_s", round3(r->ingest_s)},
        {"close_s", round3(r->close_s)},
        {"drop_cache_s", round3(r->drop_cache_s)},
        {"reopen_s", round3(r->reopen_s)},
        {"restore_s", round3(r->restore_s)},
        {k->write_s, round3(r->raw_write_s)},
        {k->read_s, round3(r->raw_read_s)},
        {"total_s", round3(r->total_s)},
        {"ingest_cpu_user_s", round3(r->ingest_cpu.user_s)},
        {"ingest_cpu_sys_s", round3(r->ingest_cpu.sys_s)},
        {"restore_cpu_user_s", round3(r->restore_cpu.user_s)},
        {"restore_cpu_sys_s", round3(r->restore_cpu.sys_s)},
        {"ingest_peak_rss_kb", (double)r->ingest_peak_kb},
        {"restore_peak_rss_kb", (double)r->restore_peak_kb},
    };
    cpri_json *root = cpri_json_object();
    int failed = !root;
    for (size_t i = 0; !failed && i < sizeof fields / sizeof fields[0]; i++)
        failed = cpri_json_add_number(root, fields[i].key, fields[i].value) != 0;
    failed = failed || bench_backend_json(root, opts, r->raw_direct) ||
             cpri_json_add_bool(root, "verified", 1);
    if (failed) {
        cpri_json_free(root);
        return NULL;
    }
    return root;
}

static cpri_json *result_json(const bench_opts *opts, const bench_result *r)
{
    return result_json_with(opts, r, -1, -1);
}


static void print_row(const char *what, uint64_t bytes, double seconds, double rate)
{
    printf("  %-18s %14llu %10.3f %10.1f\n", what, (unsigned long long)bytes, seconds,
           rate);
}

static int print_table(const bench_opts *opts, const bench_result *r, const char *dir)
{
    rates x = compute_rates(r);
    const baseline_names *k = names_of(opts);
    printf("cpr-bench store: %llu rows x (dim %u + state %u) = %llu bytes/row, "
           "batches of %zu\n", (unsigned long long)opts->rows, opts->dim,
           opts->state_dim, (unsigned long long)r->row_bytes, opts->batch_rows);
    if (opts->rados.enabled)
        printf("  RADOS pool %s, namespace %s (%s); rados bench -t %llu write, -t %llu seq;"
               " no raw-disk baseline\n  dir %s\n\n", opts->rados.pool, opts->rados.ns,
               opts->rados.conf ? opts->rados.conf : "default ceph.conf",
               (unsigned long long)opts->rados.write_ios,
               (unsigned long long)opts->rados.read_ios, dir);
    else
        printf("  dir %s (O_DIRECT %s)\n\n", dir, r->raw_direct ? "yes" : "NO: page cache");
    printf("  %-18s %14s %10s %10s\n", "phase", "bytes", "seconds", "MB/s");
    print_row("FULL ingest", r->full_bytes, r->full_s, x.full);
    print_row("PRIORITY ingest", r->priority_bytes, r->priority_s, x.priority);
    print_row("ingest (both)", r->full_bytes + r->priority_bytes, r->ingest_s, x.ingest);
    print_row("restore", r->restore_bytes, r->restore_s, x.restore);
    print_row(k->write_row, r->raw_bytes, r->raw_write_s, x.raw_write);
    print_row(k->read_row, r->raw_bytes, r->raw_read_s, x.raw_read);
    printf("\n  %s %.3f\n", k->ingest_line, ratio(x.ingest, x.raw_write));
    printf("  %s %.3f\n", k->restore_line, ratio(x.restore, x.raw_read));
    printf("  restored rows        %llu (all verified)\n",
           (unsigned long long)r->restore_rows);
    printf("  %s %llu bytes (%.2f x ingested payload)\n", k->store_line,
           (unsigned long long)r->store_disk_bytes,
           ratio((double)r->store_disk_bytes, (double)(r->full_bytes + r->priority_bytes)));
    printf("  cpu ingest           user %.2f s, sys %.2f s\n", r->ingest_cpu.user_s,
           r->ingest_cpu.sys_s);
    printf("  cpu restore          user %.2f s, sys %.2f s\n", r->restore_cpu.user_s,
           r->restore_cpu.sys_s);
    printf("  peak RSS             ingest %llu MiB, restore %llu MiB (whole process)\n",
           (unsigned long long)r->ingest_peak_kb / 1024,
           (unsigned long long)r->restore_peak_kb / 1024);
    printf("  other                open %.3f s, close %.3f s, drop cache %.3f s, "
           "reopen %.3f s, total %.3f s\n", r->open_s, r->close_s, r->drop_cache_s,
           r->reopen_s, r->total_s);
    return fflush(stdout) == 0 ? 0 : -1;
}

/* ---- rounds ------------------------------------------------------------------ */

static double ingest_ratio_of(const bench_result *r)
{
    rates x = compute_rates(r);
    return ratio(x.ingest, x.raw_write);
}

static double restore_ratio_of(const bench_result *r)
{
    rates x = compute_rates(r);
    return ratio(x.restore, x.raw_read);
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, dbl_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bench_r3(double x)
{
    return round(x * 1000.0) / 1000.0;
}

/* The round whose ratio (ingest_ratio_of, restore_ratio_of) is the median:
 * its figures are reported. */
static size_t median_round(const bench_result *r, size_t n,
                           double (*ratio_of)(const bench_result *))
{
    double v[15];
    for (size_t i = 0; i < n; i++)
        v[i] = ratio_of(&r[i]);
    double m = bench_median(v, n);
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (fabs(ratio_of(&r[i]) - m) < fabs(ratio_of(&r[best]) - m))
            best = i;
    return best;
}

/* The median round's object, with the ratios replaced by the medians over
 * the rounds and every round's ratios alongside. */
static int print_json_rounds(const bench_opts *opts, const bench_result *med,
                             const bench_result *rounds, const char *dir)
{
    double in[15], out[15], in_sorted[15], out_sorted[15];
    for (uint32_t i = 0; i < opts->rounds; i++) {
        in[i] = in_sorted[i] = round3(ingest_ratio_of(&rounds[i]));
        out[i] = out_sorted[i] = round3(restore_ratio_of(&rounds[i]));
    }
    cpri_json *root = result_json_with(opts, med, bench_median(in_sorted, opts->rounds),
                                      bench_median(out_sorted, opts->rounds));
    cpri_json *ins = cpri_json_array(), *outs = cpri_json_array();
    int failed = !root || !ins || !outs;
    for (uint32_t i = 0; !failed && i < opts->rounds; i++)
        failed = cpri_json_append(ins, cpri_json_number(in[i])) ||
                 cpri_json_append(outs, cpri_json_number(out[i]));
    failed = failed || cpri_json_add_number(root, "rounds", opts->rounds) ||
             cpri_json_add_child(root, names_of(opts)->ingest_ratios, ins);
    if (!failed)
        ins = NULL;
    failed = failed || cpri_json_add_child(root, names_of(opts)->restore_ratios, outs);
    if (!failed)
        outs = NULL;
    failed = failed || cpri_json_add_bool(root, "kept", opts->keep) ||
             cpri_json_add_string(root, "dir", dir) || cpri_json_print(root, stdout);
    cpri_json_free(ins);
    cpri_json_free(outs);
    cpri_json_free(root);
    if (failed)
        fprintf(stderr, "cpr-bench: could not print the JSON result\n");
    return failed ? -1 : 0;
}

/* ---- cpr-bench store --chain ----------------------------------------------- */

static int run_chain(const bench_opts *opts, const workdir *wd, cpr_status *st)
{
    bench_chain c;
    memset(&c, 0, sizeof c);
    *st = bench_chain_run(opts, wd->store_dir, &c);
    if (*st)
        return -1;
    double ratio_v = ratio(c.restore_chain_s, c.restore_full_s);
    uint64_t full_bytes = opts->rows * (8 + 4 * ((uint64_t)opts->dim + opts->state_dim));
    if (!opts->json) {
        printf("cpr-bench store --chain %u: %llu rows of dim %u + %u\n", opts->chain,
               (unsigned long long)opts->rows, opts->dim, opts->state_dim);
        printf("  wrote %.0f MB in %.2f s; final folding %.2f s (%llu folds)\n",
               c.bytes_written / BENCH_MB, c.write_s, c.fold_s,
               (unsigned long long)c.final_folds);
        printf("  restore FULL alone  %.3f s  (%.0f MB/s, peak RSS %llu MiB)\n",
               c.restore_full_s, mb_s(full_bytes, c.restore_full_s),
               (unsigned long long)c.full_peak_kb / 1024);
        printf("  restore newest      %.3f s  (peak RSS %llu MiB)\n", c.restore_chain_s,
               (unsigned long long)c.chain_peak_kb / 1024);
        printf("  chain_restore_ratio %.3f\n  store on disk       %.0f MB\n", ratio_v,
               c.store_bytes / BENCH_MB);
        return fflush(stdout) == 0 ? 0 : -1;
    }
    const char *keys[] = {"rows", "dim", "state_dim", "chain", "bytes_written", "write_s",
                          "fold_s", "final_folds", "restore_full_s", "restore_chain_s",
                          "chain_restore_ratio", "restore_full_mb_s",
                          "restore_full_peak_rss_kb", "restore_chain_peak_rss_kb",
                          "store_bytes"};
    const double vals[] = {(double)opts->rows, opts->dim, opts->state_dim, opts->chain,
                           (double)c.bytes_written, round3(c.write_s), round3(c.fold_s),
                           (double)c.final_folds, round3(c.restore_full_s),
                           round3(c.restore_chain_s), round3(ratio_v),
                           round3(mb_s(full_bytes, c.restore_full_s)),
                           (double)c.full_peak_kb, (double)c.chain_peak_kb,
                           (double)c.store_bytes};
    cpri_json *root = cpri_json_numbers(keys, vals, sizeof vals / sizeof vals[0]);
    int failed = !root || cpri_json_add_bool(root, "verified", 1) ||
                 cpri_json_print(root, stdout);
    cpri_json_free(root);
    return failed ? -1 : 0;
}

/* ---- commands ---------------------------------------------------------------- */

/* The baseline of one round: the raw disk, or rados bench. */
static cpr_status run_baseline(const bench_opts *opts, const workdir *wd, uint64_t bytes,
                               bench_result *res)
{
    return opts->rados.enabled ? bench_rados_run(opts, bytes, res)
                               : bench_raw_run(wd->raw_path, bytes, wd->dir, res);
}

/* Between rounds: a fresh store (and, rados, an empty namespace) and file. */
static cpr_status reset_round(const bench_opts *opts, const workdir *wd)
{
    cpr_status st = bench_report(bench_remove_tree(wd->store_dir), "cleaning up");
    if (st == CPR_OK && opts->rados.enabled)
        st = bench_rados_purge(opts, NULL);
    if (st == CPR_OK && !opts->rados.enabled)
        st = bench_report(bench_remove_tree(wd->raw_path), "cleaning up");
    return st;
}

static cpr_status run_rounds(const bench_opts *opts, const workdir *wd, bench_result *rounds,
                             int raw_direct)
{
    uint64_t full_bytes = opts->rows * (8 + 4 * ((uint64_t)opts->dim + opts->state_dim));
    cpr_status st = CPR_OK;
    if (!opts->rados.enabled) {
        /* Untimed: this disk writes the first file of a sequence much slower
         * than the next (docs/performance.md), whoever writes it. */
        fprintf(stderr, "cpr-bench: warming the disk up (untimed raw write)\n");
        st = bench_raw_run(wd->raw_path, full_bytes, wd->dir, &rounds[0]);
        if (st == CPR_OK)
            st = bench_report(bench_remove_tree(wd->raw_path), "cleaning up");
    } else {
        /* Untimed too: the first writes of a run were the slow ones on the
         * memstore cluster (docs/performance.md). */
        fprintf(stderr, "cpr-bench: warming the cluster up (untimed rados bench)\n");
        st = run_baseline(opts, wd, full_bytes, &rounds[0]);
        if (st == CPR_OK)
            st = bench_rados_purge(opts, NULL);
    }
    for (uint32_t r = 0; st == CPR_OK && r < opts->rounds; r++) {
        /* Alternate the order: the first write of a sequence tends to be
         * the slow one on a virtual disk. */
        memset(&rounds[r], 0, sizeof rounds[r]);
        rounds[r].raw_direct = raw_direct;
        fprintf(stderr, "cpr-bench: round %u of %u (%s first)\n", r + 1, opts->rounds,
                r % 2 ? (opts->rados.enabled ? "rados bench" : "raw disk") : "store");
        if (r % 2)
            st = run_baseline(opts, wd, full_bytes, &rounds[r]);
        if (st == CPR_OK)
            st = bench_store_run(opts, wd->store_dir, &rounds[r]);
        /* rados: writes into a pool that holds 300 MB more run 2-4x slower
         * on a memstore cluster, so rados bench starts from the empty
         * namespace the store started from (but --keep keeps the last). */
        if (st == CPR_OK && r % 2 == 0 && opts->rados.enabled &&
            !(opts->keep && r + 1 == opts->rounds))
            st = bench_rados_purge(opts, NULL);
        if (st == CPR_OK && r % 2 == 0)
            st = run_baseline(opts, wd, rounds[r].full_bytes, &rounds[r]);
        if (st == CPR_OK && r + 1 < opts->rounds)
            st = reset_round(opts, wd);
    }
    return st;
}

static int cmd_store(int argc, char **argv)
{
    bench_opts opts;
    bench_result res;
    workdir wd;
    int parsed = parse_store_args(argc, argv, &opts), out_rc = 0, ns_ours = 0;
    const char *rpc_only = opts.direct          ? "--direct"
                           : opts.direct_writes ? "--direct-writes"
                           : opts.n_shards      ? "--shards"
                           : opts.ckptd         ? "--ckptd"
                           : opts.transports    ? "--transport"
                           : opts.restore_streams ? "--restore-streams"
                                                : NULL;
    if (parsed == 0 && rpc_only) {
        fprintf(stderr, "cpr-bench: %s is an option of cpr-bench rpc (the store benchmark "
                "runs the store in this process)\n", rpc_only);
        parsed = -1;
    }
    if (parsed) {
        if (parsed > 0)
            usage(stdout);
        return parsed > 0 ? 0 : EXIT_USAGE;
    }
    memset(&res, 0, sizeof res);
    double t0 = cpri_now_s();
    cpr_status st = bench_report(workdir_init(&opts, &wd), "working directory");
    if (st == CPR_OK && opts.rados.enabled) {
        st = bench_rados_begin(&opts);
        ns_ours = st == CPR_OK;
    }
    if (st)
        goto out;
    if (!opts.rados.enabled) {
        warn_if_small(wd.dir, opts.rows * (8 + 4 * ((uint64_t)opts.dim + opts.state_dim)));
        res.raw_direct = bench_direct_supported(wd.dir);
        if (!res.raw_direct)
            fprintf(stderr, "cpr-bench: warning: %s refuses O_DIRECT (tmpfs?): raw "
                    "numbers will include the page cache\n", wd.dir);
    }
    if (opts.chain) {
        out_rc = run_chain(&opts, &wd, &st);
        goto out;
    }
    bench_result rounds[15];
    st = run_rounds(&opts, &wd, rounds, res.raw_direct);
    if (st)
        goto out;
    res = rounds[median_round(rounds, opts.rounds, ingest_ratio_of)];
    res.total_s = cpri_now_s() - t0;
    out_rc = opts.json ? print_json_rounds(&opts, &res, rounds, wd.dir)
                       : print_table(&opts, &res, wd.dir);
out:
    if (ns_ours)
        bench_rados_release(&opts);
    /* ALREADY_EXISTS: a store or raw file we did not make; leave it alone. */
    workdir_release(&wd, &opts, st != CPR_ALREADY_EXISTS);
    return st || out_rc ? EXIT_FAILED : 0;
}

/* ---- cpr-bench rpc ------------------------------------------------------------ */

/* ../ckptd/ckptd beside this executable (the build tree's layout), else
 * ckptd beside it (an installed bin/). */
static const char *default_ckptd(char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return "ckptd";
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(buf, len, "%s/../ckptd/ckptd", self);
    if (access(buf, X_OK) != 0)
        snprintf(buf, len, "%s/ckptd", self);
    return buf;
}

typedef struct rpc_run {
    uint32_t shards;
    int use_unix;
    bench_result res;        /* rados: the round whose restore ratio is the median */
    uint32_t rounds;         /* rados: runs, each beside its own rados bench */
    double ingest_ratios[15], restore_ratios[15]; /* rados: each round's */
    double ingest_median, restore_median;         /* rados: of those */
} rpc_run;

/* The rados rounds' ratios as the run's: the medians, and each round's. */
static cpr_status add_round_ratios(const bench_opts *opts, const rpc_run *run, cpri_json *o)
{
    cpri_json *ins = cpri_json_array(), *outs = cpri_json_array();
    int failed = !ins || !outs;
    for (uint32_t i = 0; i < run->rounds; i++)
        failed = failed || cpri_json_append(ins, cpri_json_number(round3(run->ingest_ratios[i]))) ||
                 cpri_json_append(outs, cpri_json_number(round3(run->restore_ratios[i])));
    const baseline_names *k = names_of(opts);
    failed = failed || cpri_json_add_number(o, "rounds", run->rounds) ||
             cpri_json_add_number(o, "ingest_ratio_median", round3(run->ingest_median)) ||
             cpri_json_add_number(o, "restore_ratio_median", round3(run->restore_median)) ||
             cpri_json_add_child(o, k->ingest_ratios, ins);
    if (!failed)
        ins = NULL;
    failed = failed || cpri_json_add_child(o, k->restore_ratios, outs);
    if (!failed)
        outs = NULL;
    cpri_json_free(ins);
    cpri_json_free(outs);
    return failed ? CPR_NO_MEMORY : CPR_OK;
}

static int print_rpc_json(const bench_opts *opts, const bench_result *store,
                          const rpc_run *runs, size_t n, const char *dir)
{
    cpri_json *root = cpri_json_object(), *arr = cpri_json_array();
    cpri_json *base = result_json(opts, store);
    int failed = !root || !arr || !base || cpri_json_add_string(root, "bench", "rpc") ||
                 cpri_json_add_child(root, "store", base);
    if (failed)
        cpri_json_free(base);
    double store_ingest = compute_rates(store).ingest;
    double store_restore = compute_rates(store).restore;
    for (size_t i = 0; !failed && i < n; i++) {
        cpri_json *o = result_json(opts, &runs[i].res);
        rates x = compute_rates(&runs[i].res);
        failed = !o || cpri_json_add_number(o, "shards", runs[i].shards) ||
                 cpri_json_add_string(o, "transport", runs[i].use_unix ? "unix" : "tcp") ||
                 cpri_json_add_number(o, "ingest_vs_store", round3(ratio(x.ingest, store_ingest))) ||
                 cpri_json_add_number(o, "restore_vs_store",
                                     round3(ratio(x.restore, store_restore))) ||
                 cpri_json_add_number(o, "warmup_s", round3(runs[i].res.warmup_s)) ||
                 cpri_json_add_number(o, "warmup_full_mb_s",
                                     round3(mb_s(runs[i].res.full_bytes,
                                                 runs[i].res.warmup_s))) ||
                 (runs[i].rounds && add_round_ratios(opts, &runs[i], o)) ||
                 cpri_json_append(arr, o);
        if (failed)
            cpri_json_free(o);
    }
    failed = failed || cpri_json_add_child(root, "runs", arr);
    if (failed)
        cpri_json_free(arr);
    failed = failed || cpri_json_add_bool(root, "kept", opts->keep) ||
             cpri_json_add_string(root, "dir", dir) || cpri_json_print(root, stdout);
    cpri_json_free(root);
    if (failed)
        fprintf(stderr, "cpr-bench: could not print the JSON result\n");
    return failed ? -1 : 0;
}

static int print_rpc_table(const bench_opts *opts, const bench_result *store,
                           const rpc_run *runs, size_t n, const char *dir)
{
    rates s = compute_rates(store);
    printf("cpr-bench rpc: %llu rows x (dim %u + state %u) = %llu bytes/row, batches of "
           "%zu\n  dir %s (O_DIRECT %s)\n\n", (unsigned long long)opts->rows, opts->dim,
           opts->state_dim, (unsigned long long)store->row_bytes, opts->batch_rows, dir,
           store->raw_direct ? "yes" : "NO: page cache");
    const char *base = opts->rados.enabled ? "rados bench" : "raw";
    if (opts->rados.enabled)
        printf("  RADOS pool %s, namespace %s: the baseline is rados bench write and seq\n",
               opts->rados.pool, opts->rados.ns);
    printf("  %s write %.1f MB/s, %s read %.1f MB/s; store in-process: ingest %.1f MB/s "
           "(%.3f x %s), restore %.1f MB/s (%.3f x %s)\n\n", base, s.raw_write, base,
           s.raw_read, s.ingest, ratio(s.ingest, s.raw_write), base, s.restore,
           ratio(s.restore, s.raw_read), base);
    printf("  %6s %5s %12s %9s %9s %12s %9s %9s %16s\n", "shards", "via", "ingest MB/s",
           "/raw", "/store", "restore MB/s", "/raw", "/store", "cpu ingest u+s");
    for (size_t i = 0; i < n; i++) {
        rates x = compute_rates(&runs[i].res);
        const bench_cpu *c = &runs[i].res.ingest_cpu;
        if (opts->rados.enabled) /* each run against its own rados bench */
            s.raw_write = x.raw_write, s.raw_read = x.raw_read;
        printf("  %6u %5s %12.1f %9.3f %9.3f %12.1f %9.3f %9.3f %7.2f+%.2f s\n", runs[i].shards,
               runs[i].use_unix ? "unix" : "tcp", x.ingest, ratio(x.ingest, s.raw_write), ratio(x.ingest, s.ingest), x.restore,
               ratio(x.restore, s.raw_read), ratio(x.restore, s.restore), c->user_s, c->sys_s);
    }
    for (size_t i = 0; i < n; i++)
        if (runs[i].rounds)
            printf("%s  %u shards over %s, medians of %u rounds: ingest %.3f x rados bench "
                   "write, restore %.3f x rados bench seq (the row above: the median restore "
                   "round)\n", i == 0 ? "\n" : "", runs[i].shards,
                   runs[i].use_unix ? "unix" : "tcp", runs[i].rounds, runs[i].ingest_median,
                   runs[i].restore_median);
    printf("\n  every restored row verified; cpu includes the daemon's\n");
    return fflush(stdout) == 0 ? 0 : -1;
}

/* --backend rados: the run `rounds` times (--rounds, default 3), each beside
 * a rados bench of the same bytes, in alternating order, each from an empty
 * namespace: this cluster's speed drifts by 2-3x within minutes
 * (docs/performance.md), so one baseline, or one run, would decide the
 * ratio. The run reports the median of each ratio over the rounds, each
 * round's, and the figures of the round whose restore ratio is the median. */
/* rados bench of `bytes` into `res`, then its objects removed. */
static cpr_status rados_baseline(const bench_opts *opts, uint64_t bytes, bench_result *res)
{
    cpr_status st = bench_rados_run(opts, bytes, res);
    return st ? st : bench_rados_purge(opts, NULL);
}

static cpr_status rpc_rados_rounds(const bench_opts *opts, const char *dir,
                                   const bench_result *store, rpc_run *run)
{
    bench_result rounds[15];
    cpr_status st = CPR_OK;
    run->rounds = opts->rounds_set ? opts->rounds : 3;
    for (uint32_t r = 0; st == CPR_OK && r < run->rounds; r++) {
        memset(&rounds[r], 0, sizeof rounds[r]);
        fprintf(stderr, "cpr-bench: %u shards, round %u of %u (%s first)\n", run->shards,
                r + 1, run->rounds, r % 2 ? "rados bench" : "ckptd");
        if (r % 2)
            st = rados_baseline(opts, store->full_bytes, &rounds[r]);
        if (st == CPR_OK)
            st = bench_rpc_run(opts, dir, run->shards, run->use_unix, &rounds[r]);
        if (st == CPR_OK)
            st = bench_rados_purge(opts, NULL);
        if (st == CPR_OK && r % 2 == 0)
            st = rados_baseline(opts, store->full_bytes, &rounds[r]);
        if (st == CPR_OK && (!opts->keep || r + 1 < run->rounds)) /* the next starts anew */
            st = bench_report(bench_remove_tree(dir), "cleaning up");
        if (st == CPR_OK) {
            run->ingest_ratios[r] = ingest_ratio_of(&rounds[r]);
            run->restore_ratios[r] = restore_ratio_of(&rounds[r]);
        }
    }
    if (st)
        return st;
    double sorted[15]; /* bench_median sorts */
    memcpy(sorted, run->ingest_ratios, run->rounds * sizeof *sorted);
    run->ingest_median = bench_median(sorted, run->rounds);
    memcpy(sorted, run->restore_ratios, run->rounds * sizeof *sorted);
    run->restore_median = bench_median(sorted, run->rounds);
    run->res = rounds[median_round(rounds, run->rounds, restore_ratio_of)];
    return CPR_OK;
}

/* Each shard count in its own directory, removed after unless --keep. */
static size_t rpc_run_count(const bench_opts *opts)
{
    return opts->n_shards * (opts->transports == 3 ? 2 : 1);
}

static cpr_status run_rpc_counts(const bench_opts *opts, const workdir *wd,
                                 const bench_result *store, rpc_run *runs)
{
    cpr_status st = CPR_OK;
    size_t n_runs = rpc_run_count(opts);
    for (size_t i = 0; st == CPR_OK && i < n_runs; i++) {
        char name[32];
        int per = opts->transports == 3 ? 2 : 1;
        runs[i].shards = opts->shards[i / per];
        runs[i].use_unix = opts->transports == 2 || (per == 2 && i % 2 == 1);
        snprintf(name, sizeof name, "rpc-%u-%s", runs[i].shards, runs[i].use_unix ? "unix" : "tcp");
        char *dir = bench_path_join(wd->dir, name);
        if (!dir)
            return cpr_fail(CPR_NO_MEMORY, "out of memory");
        st = must_not_exist(dir);
        if (st == CPR_OK && opts->rados.enabled)
            st = rpc_rados_rounds(opts, dir, store, &runs[i]);
        else if (st == CPR_OK)
            st = bench_rpc_run(opts, dir, runs[i].shards, runs[i].use_unix, &runs[i].res);
        bench_report(st, "rpc");
        if (!opts->rados.enabled) { /* the raw disk is measured once, for every run */
            runs[i].res.raw_bytes = store->raw_bytes;
            runs[i].res.raw_direct = store->raw_direct;
            runs[i].res.raw_write_s = store->raw_write_s;
            runs[i].res.raw_read_s = store->raw_read_s;
        }
        if (!opts->keep)
            bench_report(bench_remove_tree(dir), "cleaning up");
        free(dir);
    }
    return st;
}

/* --backend rados: an untimed rados bench, the store in-process in the pool,
 * then rados bench over the same bytes (the baseline every run is held
 * against), each from an empty namespace. */
static cpr_status rpc_rados_baseline(const bench_opts *opts, const workdir *wd,
                                     bench_result *store)
{
    uint64_t bytes = opts->rows * (8 + 4 * ((uint64_t)opts->dim + opts->state_dim));
    bench_result warm;
    memset(&warm, 0, sizeof warm);
    fprintf(stderr, "cpr-bench: warming the cluster up (untimed rados bench)\n");
    cpr_status st = rados_baseline(opts, bytes, &warm);
    if (st == CPR_OK)
        st = bench_store_run(opts, wd->store_dir, store);
    if (st == CPR_OK)
        st = bench_rados_purge(opts, NULL);
    if (st == CPR_OK)
        st = rados_baseline(opts, store->full_bytes, store);
    if (st == CPR_OK && !opts->keep)
        st = bench_report(bench_remove_tree(wd->store_dir), "cleaning up");
    return st;
}

static int cmd_rpc(int argc, char **argv)
{
    bench_opts opts;
    bench_result store;
    rpc_run runs[16];
    workdir wd;
    char ckptd[PATH_MAX + 32];
    int parsed = parse_store_args(argc, argv, &opts), out_rc = 0;
    if (parsed) {
        if (parsed > 0)
            usage(stdout);
        return parsed > 0 ? 0 : EXIT_USAGE;
    }
    if (!opts.n_shards) {
        const uint32_t counts[3] = {1, 4, 16};
        memcpy(opts.shards, counts, sizeof counts);
        opts.n_shards = 3;
    }
    if (!opts.ckptd)
        opts.ckptd = default_ckptd(ckptd, sizeof ckptd);
    if (access(opts.ckptd, X_OK) != 0) {
        fprintf(stderr, "cpr-bench: --ckptd: %s is not a program this user can run (%s); "
                "name the ckptd binary\n", opts.ckptd, strerror(errno));
        return EXIT_USAGE;
    }
    if (!opts.transports)
        opts.transports = 3;
    memset(&store, 0, sizeof store);
    memset(runs, 0, sizeof runs);
    double t0 = cpri_now_s();
    int ns_ours = 0;
    cpr_status st = bench_report(workdir_init(&opts, &wd), "preparing the working directory");
    if (st == CPR_OK && opts.rados.enabled) {
        st = bench_rados_begin(&opts);
        ns_ours = st == CPR_OK;
        if (st == CPR_OK)
            st = rpc_rados_baseline(&opts, &wd, &store);
        if (st == CPR_OK)
            st = run_rpc_counts(&opts, &wd, &store, runs);
        goto done;
    }
    if (st)
        goto out;
    warn_if_small(wd.dir, opts.rows * (8 + 4 * ((uint64_t)opts.dim + opts.state_dim)));
    store.raw_direct = bench_direct_supported(wd.dir);
    /* Untimed warm-up, as cpr-bench store does: the first large write of a
     * sequence runs slow here, and it would be the baseline's. */
    st = bench_raw_run(wd.raw_path, opts.rows * (8 + 4 * ((uint64_t)opts.dim + opts.state_dim)),
                       wd.dir, &store);
    if (st == CPR_OK)
        st = bench_report(bench_remove_tree(wd.raw_path), "cleaning up");
    if (st == CPR_OK)
        st = bench_store_run(&opts, wd.store_dir, &store);
    if (st == CPR_OK)
        st = bench_raw_run(wd.raw_path, store.full_bytes, wd.dir, &store);
    if (st == CPR_OK && !opts.keep) /* room for the daemon's copy */
        st = bench_report(bench_remove_tree(wd.store_dir), "cleaning up");
    if (st == CPR_OK)
        st = run_rpc_counts(&opts, &wd, &store, runs);
done:
    if (st)
        goto out;
    store.total_s = cpri_now_s() - t0;
    out_rc = opts.json ? print_rpc_json(&opts, &store, runs, rpc_run_count(&opts), wd.dir)
                       : print_rpc_table(&opts, &store, runs, rpc_run_count(&opts), wd.dir);
out:
    if (ns_ours)
        bench_rados_release(&opts);
    workdir_release(&wd, &opts, st != CPR_ALREADY_EXISTS);
    return st || out_rc ? EXIT_FAILED : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
        strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "store") == 0)
        return cmd_store(argc - 2, argv + 2);
    if (strcmp(cmd, "rpc") == 0)
        return cmd_rpc(argc - 2, argv + 2);
    if (strcmp(cmd, "embedding") == 0)
        return bench_embedding_main(argc - 2, argv + 2);
    if (strcmp(cmd, "save") == 0)
        return bench_save_main(argc - 2, argv + 2);
    if (strcmp(cmd, "quant") == 0)
        return bench_quant_main(argc - 2, argv + 2);
    if (strcmp(cmd, "nodes") == 0) {
        char ckptd[PATH_MAX + 32];
        return bench_nodes_main(argc - 2, argv + 2, default_ckptd(ckptd, sizeof ckptd));
    }
    fprintf(stderr, "cpr-bench: unknown command '%s' (see cpr-bench --help)\n", cmd);
    return EXIT_USAGE;
}
