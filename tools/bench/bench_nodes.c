/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `cpr-bench nodes`: what a restore over several ckptd nodes costs now that
 * the client merges the nodes' answers by each row's version (client/merge.c).
 * A job of S shards (modulo layout) is written over N daemons on 127.0.0.1;
 * then, in alternating order each round, the whole job is restored by one
 * restore that asks every node (merged), and the same rows by one restore per
 * node naming that node's shards (one node asked: no merge, node after node,
 * as every multi-node restore ran before), and the same bytes are copied by
 * memcpy (the machine's limit). Rows are counted and checked on arrival. The
 * daemons' data is in the page cache (written just before): this measures
 * the client's and the daemons' CPU path, not a disk.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "cpr/client.h"
#include "cpr_common.h"
#include "cpr_json.h"
#include "launch.h"

#define JOB "bench-nodes"
#define MAX_NODES 8
#define BATCH 8192

typedef struct nodes_opts {
    uint32_t nodes, shards, dim, state_dim, rounds;
    uint64_t rows;
    const char *dir, *ckptd;
    int json;
    int ranges;      /* --layout range: shard s owns a range of rows, not r % S == s */
} nodes_opts;

static float value_of(uint64_t row, uint32_t e)
{
    return (float)((row * 31 + e) % 100003);
}

/* Shard s's rows (r % shards == s, or its range), one FULL part. */
static cpr_status write_shard(cpr_client *c, const nodes_opts *o, uint32_t s)
{
    cpr_table_schema t = {0, o->rows, o->dim, o->state_dim};
    cpr_part_spec spec = {{JOB, s, 1}, CPR_KIND_FULL, 100, o->shards, 0, &t, 1, CPR_CODEC_F32};
    uint64_t *ids = malloc(BATCH * sizeof *ids);
    float *v = malloc((size_t)BATCH * o->dim * sizeof *v);
    float *st = malloc((size_t)BATCH * (o->state_dim ? o->state_dim : 1) * sizeof *st);
    cpr_part *p = NULL;
    cpr_status rc = ids && v && st ? cpr_client_begin(c, &spec, &p)
                                   : cpr_fail(CPR_NO_MEMORY, "out of memory");
    uint64_t step = o->ranges ? 1 : o->shards;
    uint64_t first = o->ranges ? o->rows * s / o->shards : s;
    uint64_t end = o->ranges ? o->rows * (s + 1) / o->shards : o->rows;
    for (uint64_t r = first; rc == CPR_OK && r < end;) {
        size_t n = 0;
        for (; n < BATCH && r < end; n++, r += step) {
            ids[n] = r;
            for (uint32_t e = 0; e < o->dim; e++)
                v[n * o->dim + e] = value_of(r, e);
            for (uint32_t e = 0; e < o->state_dim; e++)
                st[n * o->state_dim + e] = 1.0f;
        }
        cpr_row_batch b = {0, n, ids, v, n * o->dim, o->state_dim ? st : NULL,
                           n * o->state_dim, 0, 0};
        rc = cpr_part_put_rows(p, &b);
    }
    if (rc == CPR_OK)
        rc = cpr_part_commit(&p);
    else if (p)
        cpr_part_abort(&p);
    free(ids);
    free(v);
    free(st);
    return rc;
}

typedef struct check {
    uint64_t rows, last;
    int ascending, any;
    char problem[200];
} check;

static cpr_status check_rows(void *ctx, const cpr_row_batch *b)
{
    check *k = ctx;
    size_t dim = b->n ? b->values_count / b->n : 0;
    for (size_t i = 0; i < b->n; i++) {
        if (k->any && b->ids[i] <= k->last)
            k->ascending = 0;
        k->any = 1;
        k->last = b->ids[i];
        if (b->values[i * dim + dim - 1] != value_of(b->ids[i], (uint32_t)dim - 1) &&
            !k->problem[0])
            snprintf(k->problem, sizeof k->problem, "row %llu has another value",
                     (unsigned long long)b->ids[i]);
    }
    k->rows += b->n;
    return k->problem[0] ? cpr_fail(CPR_CORRUPT, "%s", k->problem) : CPR_OK;
}

static cpr_status merged(cpr_client *c, const nodes_opts *o, double *s)
{
    check k = {.ascending = 1};
    cpr_restore_query q = {.job = JOB};
    double t0 = cpri_now_s();
    cpr_status st = cpr_client_restore(c, &q, NULL, 0, check_rows, &k, NULL);
    *s = cpri_now_s() - t0;
    if (st == CPR_OK && (k.rows != o->rows || !k.ascending))
        st = cpr_fail(CPR_CORRUPT, "the merged restore gave %llu rows (%s), %llu written",
                      (unsigned long long)k.rows, k.ascending ? "ascending" : "not ascending",
                      (unsigned long long)o->rows);
    return st;
}

static cpr_status node_after_node(cpr_client *c, const nodes_opts *o, double *s)
{
    uint64_t rows = 0;
    uint32_t *shards = malloc(o->shards * sizeof *shards);
    cpr_status st = shards ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory");
    double t0 = cpri_now_s();
    for (size_t i = 0; st == CPR_OK && i < o->nodes; i++) {
        size_t n = 0;
        for (uint32_t sh = 0; sh < o->shards; sh++)
            if (cpr_client_node_of(c, JOB, sh) == i)
                shards[n++] = sh;
        if (n == 0)
            continue;
        check k = {.ascending = 1};
        cpr_restore_query q = {.job = JOB};
        st = cpr_client_restore(c, &q, shards, n, check_rows, &k, NULL);
        rows += k.rows;
    }
    *s = cpri_now_s() - t0;
    free(shards);
    if (st == CPR_OK && rows != o->rows)
        st = cpr_fail(CPR_CORRUPT, "node after node gave %llu rows, %llu written",
                      (unsigned long long)rows, (unsigned long long)o->rows);
    return st;
}

static double memcpy_s(size_t bytes)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    double s = 0;
    if (a && b) {
        memset(a, 1, bytes);
        memset(b, 2, bytes); /* both touched: no first-touch faults in the copy */
        double t0 = cpri_now_s();
        memcpy(b, a, bytes);
        s = cpri_now_s() - t0;
        if (b[bytes / 2] != 1)
            s = 0;
    }
    free(a);
    free(b);
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void usage(FILE *out)
{
    fputs("cpr-bench nodes [--nodes N] [--shards S] [--rows R] [--dim D] [--state-dim S]\n"
          "                [--rounds R] [--layout modulo|range] [--dir PATH]\n"
          "                [--ckptd PATH] [--json]\n"
          "  a job of S shards (default 8) written over N ckptd daemons (default 2,\n"
          "  at most 8) on 127.0.0.1; each round restores the whole job once with one\n"
          "  restore that asks every node (their answers merged by version) and once\n"
          "  node after node (one restore per node, naming its shards), in turn\n"
          "  first, and copies the same bytes with memcpy; reports medians over\n"
          "  --rounds (default 5) and merged_speedup (node after node / merged)\n"
          "  --rows R        rows of the one table (default 1000000)\n"
          "  --layout L      modulo (default: shard s owns rows r % S == s) or range\n"
          "                  (shard s owns a contiguous range of rows)\n"
          "  --dim D, --state-dim S  floats per row (default 64 and 1)\n"
          "  --dir PATH      where the daemons' directories go (default $TMPDIR or /tmp)\n"
          "  --ckptd PATH    the daemon (default: the build tree's, beside cpr-bench)\n"
          "  --json          one JSON object on one line\n",
          out);
}

static int parse_u(const char *flag, const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = v ? strtoull(v, &end, 10) : 0;
    if (!v || errno || *end || v[0] == '-' || x < lo || x > hi) {
        fprintf(stderr, "cpr-bench nodes: %s takes a number from %llu to %llu\n", flag,
                (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

int bench_nodes_main(int argc, char **argv, const char *default_ckptd)
{
    nodes_opts o = {.nodes = 2, .shards = 8, .dim = 64, .state_dim = 1, .rounds = 5,
                    .rows = 1000000, .ckptd = default_ckptd};
    const char *tmp = getenv("TMPDIR");
    o.dir = tmp && tmp[0] ? tmp : "/tmp";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t x = 0;
        int bad = 0, takes = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            o.json = 1;
            takes = 0;
        } else if (!strcmp(a, "--nodes")) {
            bad = parse_u(a, v, 2, MAX_NODES, &x);
            o.nodes = (uint32_t)x;
        } else if (!strcmp(a, "--shards")) {
            bad = parse_u(a, v, 1, 256, &x);
            o.shards = (uint32_t)x;
        } else if (!strcmp(a, "--rows")) {
            bad = parse_u(a, v, 1, (uint64_t)1 << 32, &x);
            o.rows = x;
        } else if (!strcmp(a, "--dim")) {
            bad = parse_u(a, v, 1, 4096, &x);
            o.dim = (uint32_t)x;
        } else if (!strcmp(a, "--state-dim")) {
            bad = parse_u(a, v, 0, 4096, &x);
            o.state_dim = (uint32_t)x;
        } else if (!strcmp(a, "--rounds")) {
            bad = parse_u(a, v, 1, 100, &x);
            o.rounds = (uint32_t)x;
        } else if (!strcmp(a, "--layout")) {
            if (!v || (strcmp(v, "modulo") && strcmp(v, "range"))) {
                fprintf(stderr, "cpr-bench nodes: --layout takes modulo or range\n");
                return 2;
            }
            o.ranges = !strcmp(v, "range");
        } else if (!strcmp(a, "--dir") && v) {
            o.dir = v;
        } else if (!strcmp(a, "--ckptd") && v) {
            o.ckptd = v;
        } else {
            fprintf(stderr, "cpr-bench nodes: unknown option or missing value: %s "
                    "(--help lists them)\n", a);
            return 2;
        }
        if (bad)
            return 2;
        i += takes;
    }
    if (access(o.ckptd, X_OK) != 0) {
        fprintf(stderr, "cpr-bench nodes: --ckptd: %s is not a program this user can run; "
                "name the ckptd binary\n", o.ckptd);
        return 2;
    }
    char work[PATH_MAX];
    snprintf(work, sizeof work, "%s/cpr-bench-nodes-XXXXXX", o.dir);
    if (!mkdtemp(work)) {
        fprintf(stderr, "cpr-bench nodes: cannot make a directory in %s: %s\n", o.dir,
                strerror(errno));
        return 1;
    }
    cpri_ckptd_proc d[MAX_NODES];
    memset(d, 0, sizeof d);
    char target[MAX_NODES * 300 + 16] = "grpc://";
    cpr_status st = CPR_OK;
    for (uint32_t i = 0; st == CPR_OK && i < o.nodes; i++) {
        char dir[PATH_MAX + 32];
        snprintf(dir, sizeof dir, "%s/node-%u", work, i);
        st = mkdir(dir, 0700) == 0 ? cpri_ckptd_spawn(o.ckptd, dir, NULL, NULL, &d[i])
                                   : cpr_fail(CPR_IO, "mkdir %s: %s", dir, strerror(errno));
        if (st == CPR_OK)
            snprintf(target + strlen(target), sizeof target - strlen(target), "%s%s",
                     i ? "," : "", d[i].addr);
    }
    cpr_client *c = NULL;
    if (st == CPR_OK)
        st = cpr_client_open(target, NULL, &c);
    fprintf(stderr, "cpr-bench nodes: writing %llu rows in %u shards over %u daemons\n",
            (unsigned long long)o.rows, o.shards, o.nodes);
    for (uint32_t s = 0; st == CPR_OK && s < o.shards; s++)
        st = write_shard(c, &o, s);
    double *m = calloc(o.rounds, sizeof *m), *n = calloc(o.rounds, sizeof *n);
    double *cp = calloc(o.rounds, sizeof *cp);
    uint64_t bytes = o.rows * (8 + 4 * ((uint64_t)o.dim + o.state_dim));
    if (st == CPR_OK && (!m || !n || !cp))
        st = cpr_fail(CPR_NO_MEMORY, "out of memory");
    for (uint32_t r = 0; st == CPR_OK && r < o.rounds; r++) {
        fprintf(stderr, "cpr-bench nodes: round %u of %u\n", r + 1, o.rounds);
        if (r % 2 == 0) {
            st = merged(c, &o, &m[r]);
            if (st == CPR_OK)
                st = node_after_node(c, &o, &n[r]);
        } else {
            st = node_after_node(c, &o, &n[r]);
            if (st == CPR_OK)
                st = merged(c, &o, &m[r]);
        }
        cp[r] = memcpy_s((size_t)bytes);
    }
    cpr_client_close(c);
    for (uint32_t i = 0; i < o.nodes; i++)
        if (d[i].pid > 0 && cpri_ckptd_stop(&d[i]) != CPR_OK && st == CPR_OK)
            st = CPR_INTERNAL;
    bench_remove_tree(work);
    int rc = 0;
    if (st) {
        fprintf(stderr, "cpr-bench nodes: %s: %s\n", cpr_status_name(st), cpr_errmsg());
        rc = 1;
    } else {
        double ms = median(m, o.rounds), ns = median(n, o.rounds), cs = median(cp, o.rounds);
        double gb = (double)bytes / 1e9;
        if (o.json) {
            cpri_json *j = cpri_json_object();
            int failed = !j || cpri_json_add_string(j, "bench", "nodes") ||
                         cpri_json_add_u64(j, "nodes", o.nodes) ||
                         cpri_json_add_u64(j, "shards", o.shards) ||
                         cpri_json_add_string(j, "layout", o.ranges ? "range" : "modulo") ||
                         cpri_json_add_u64(j, "rows", o.rows) ||
                         cpri_json_add_u64(j, "bytes", bytes) ||
                         cpri_json_add_u64(j, "rounds", o.rounds) ||
                         cpri_json_add_number(j, "merged_s", ms) ||
                         cpri_json_add_number(j, "node_after_node_s", ns) ||
                         cpri_json_add_number(j, "memcpy_s", cs) ||
                         cpri_json_add_number(j, "merged_gbps", gb / ms) ||
                         cpri_json_add_number(j, "node_after_node_gbps", gb / ns) ||
                         cpri_json_add_number(j, "memcpy_gbps", cs > 0 ? gb / cs : 0) ||
                         cpri_json_add_number(j, "merged_speedup", ns / ms) ||
                         cpri_json_print(j, stdout);
            cpri_json_free(j);
            rc = failed;
        } else {
            printf("cpr-bench nodes: %llu rows x (dim %u + state %u) in %u shards (%s) over "
                   "%u daemons, medians of %u rounds\n", (unsigned long long)o.rows, o.dim,
                   o.state_dim, o.shards, o.ranges ? "ranges" : "modulo", o.nodes, o.rounds);
            printf("  merged (one restore, every node):  %.3f s  %.2f GB/s\n", ms, gb / ms);
            printf("  node after node (a restore a node): %.3f s  %.2f GB/s\n", ns, gb / ns);
            printf("  memcpy of the same bytes:          %.3f s  %.2f GB/s\n", cs,
                   cs > 0 ? gb / cs : 0);
            printf("  merged_speedup (node after node / merged): %.2f\n", ns / ms);
        }
    }
    free(m);
    free(n);
    free(cp);
    return rc;
}
