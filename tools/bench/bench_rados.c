/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr-bench store --backend rados: the store's segments and catalog in a
 * Ceph pool, measured against what the same cluster does with the same
 * bytes when nothing of CPR is in the way: `rados bench` writing them as
 * 4 MiB objects and reading them back sequentially. Both run in one
 * namespace of this run's own ("bench-<pid>-<time>"), emptied at the end.
 * Everything here goes through the `rados` command-line tool, not librados:
 * the store is the one module that links librados.
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cpr_common.h"
#include "cpr_json.h"

extern char **environ;

#define RADOS_OBJECT_BYTES 4194304ull /* rados bench -b, and its default */
#define RADOS_BENCH_MAX_S "600"       /* --max-objects ends it long before */
#define RADOS_MAX_IOS 64
#define RADOS_RM_BATCH 128            /* object names per `rados rm` */
/* A write to a full pool (memstore OSDs fill up) or an op to an OSD that
 * is gone waits forever by default: the store's own connection gives up
 * after 60 s (ckptd/store/rados.c), and so does the rados tool here, so
 * that the bench fails with a message instead of hanging. */
#define RADOS_OP_TIMEOUT_S "60"
#define RADOS_FIXED_ARGS 10           /* rados --rados-osd-op-timeout S -c CONF
                                         -p POOL -N NS ... NULL */
#define NS_PREFIX "bench-"
#define N_ARGS(a) (sizeof (a) / sizeof (a)[0] - 1) /* without the NULL */

/* ---- command line ---------------------------------------------------------------- */

/* 1 taken, 0 not this flag, -1 error (printed). */
static int string_flag(int argc, char **argv, int *i, const char *flag, const char **out)
{
    int missing = 0;
    const char *v = bench_flag_value(argc, argv, i, flag, &missing);
    if (missing)
        return -1;
    if (!v)
        return 0;
    if (!v[0]) {
        fprintf(stderr, "cpr-bench: %s needs a non-empty value\n", flag);
        return -1;
    }
    *out = v;
    return 1;
}

int bench_rados_parse_flag(int argc, char **argv, int *i, bench_opts *opts)
{
    bench_rados_opts *r = &opts->rados;
    const char *backend = NULL;
    int rc = string_flag(argc, argv, i, "--backend", &backend);
    if (rc > 0 && strcmp(backend, "rados") != 0 && strcmp(backend, "local") != 0) {
        fprintf(stderr, "cpr-bench: --backend: '%s' is not local or rados\n", backend);
        return -1;
    }
    if (rc > 0)
        r->enabled = strcmp(backend, "rados") == 0;
    if (rc)
        return rc;
    rc = string_flag(argc, argv, i, "--rados-conf", &r->conf);
    if (rc == 0)
        rc = string_flag(argc, argv, i, "--rados-pool", &r->pool);
    if (rc == 0) {
        const bench_u64_flag ios[] = {
            {"--rados-write-ios", 1, RADOS_MAX_IOS, offsetof(bench_rados_opts, write_ios)},
            {"--rados-read-ios", 1, RADOS_MAX_IOS, offsetof(bench_rados_opts, read_ios)},
        };
        rc = bench_parse_u64_flags(argc, argv, i, ios, 2, r);
    }
    if (rc > 0)
        r->flags_given = 1;
    return rc;
}

int bench_rados_check_opts(bench_opts *opts)
{
    bench_rados_opts *r = &opts->rados;
    if (r->flags_given && !r->enabled) {
        fprintf(stderr, "cpr-bench: --rados-conf, --rados-pool, --rados-write-ios and "
                "--rados-read-ios need --backend rados\n");
        return -1;
    }
    if (!r->pool)
        r->pool = "cpr";
    if (!r->write_ios)
        r->write_ios = 2;
    if (!r->read_ios)
        r->read_ios = 8;
    return 0;
}

int bench_backend_json(cpri_json *root, const bench_opts *opts, int raw_direct)
{
    const bench_rados_opts *ro = &opts->rados;
    if (!ro->enabled)
        return cpri_json_add_string(root, "backend", "local") ||
               cpri_json_add_string(root, "baseline", "raw disk") ||
               cpri_json_add_bool(root, "raw_direct", raw_direct) ||
               cpri_json_add_bool(root, "direct_reads", opts->direct) ? -1 : 0;
    return cpri_json_add_string(root, "backend", "rados") ||
           cpri_json_add_string(root, "baseline", "rados bench (no raw-disk baseline)") ||
           cpri_json_add_string(root, "rados_pool", ro->pool) ||
           cpri_json_add_string(root, "rados_namespace", ro->ns) ||
           (ro->conf && cpri_json_add_string(root, "rados_conf", ro->conf)) ||
           cpri_json_add_number(root, "rados_object_bytes", RADOS_OBJECT_BYTES) ||
           cpri_json_add_number(root, "rados_write_ios", (double)ro->write_ios) ||
           cpri_json_add_number(root, "rados_read_ios", (double)ro->read_ios) ||
           cpri_json_add_bool(root, "direct_reads", opts->direct) ||
           cpri_json_add_bool(root, "direct_writes", opts->direct_writes) ? -1 : 0;
}

cpr_store_options bench_store_options(const bench_opts *opts)
{
    cpr_store_options so;
    memset(&so, 0, sizeof so);
    if (opts->rados.enabled) {
        so.rados_pool = opts->rados.pool;
        so.rados_conf = opts->rados.conf;
        so.rados_namespace = opts->rados.ns;
    }
    return so;
}

/* ---- running the rados tool -------------------------------------------------------- */

/* Read all of fd into a malloc'd, NUL-terminated *text. */
static cpr_status read_all(int fd, char **text)
{
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    while (buf) {
        if (cap - len < 2048) {
            char *grown = realloc(buf, 2 * cap);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    if (!buf)
        return cpr_fail(CPR_NO_MEMORY, "out of memory reading the rados tool's output");
    buf[len] = '\0';
    *text = buf;
    return CPR_OK;
}

static cpr_status wait_child(pid_t pid, const char *what)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return cpr_fail(CPR_IO, "waiting for rados %s: %s", what, strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return CPR_OK;
    if (WIFEXITED(status))
        return cpr_fail(CPR_IO, "rados %s exited with status %d (its messages are above; "
                        "a full pool or a missing OSD shows in `ceph -s`)", what,
                        WEXITSTATUS(status));
    return cpr_fail(CPR_IO, "rados %s was killed by signal %d", what,
                    WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Run `rados [-c CONF] -p POOL -N NS args...` with stdout captured into
 * *out (malloc'd; may be NULL to discard) and stderr passed through. */
static cpr_status run_rados(const bench_opts *opts, const char *const *args, size_t n_args,
                            char **out)
{
    const bench_rados_opts *r = &opts->rados;
    const char **argv = calloc(n_args + RADOS_FIXED_ARGS, sizeof *argv);
    if (!argv)
        return cpr_fail(CPR_NO_MEMORY, "out of memory running rados");
    size_t k = 0;
    argv[k++] = "rados";
    argv[k++] = "--rados-osd-op-timeout";
    argv[k++] = RADOS_OP_TIMEOUT_S;
    if (r->conf) {
        argv[k++] = "-c";
        argv[k++] = r->conf;
    }
    argv[k++] = "-p";
    argv[k++] = r->pool;
    argv[k++] = "-N";
    argv[k++] = r->ns;
    memcpy(argv + k, args, n_args * sizeof *args);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        free(argv);
        return cpr_fail(CPR_IO, "pipe: %s", strerror(errno));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    pid_t pid;
    int rc = posix_spawnp(&pid, "rados", &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    free(argv);
    close(fds[1]);
    char *text = NULL;
    cpr_status st = rc != 0 ? cpr_fail(rc == ENOENT ? CPR_NOT_FOUND : CPR_IO,
                                       "cannot run the rados tool: %s%s", strerror(rc),
                                       rc == ENOENT ? " (install ceph-common)" : "")
                            : read_all(fds[0], &text);
    close(fds[0]);
    if (rc == 0) {
        cpr_status waited = wait_child(pid, args[0]);
        st = st ? st : waited;
    }
    if (st == CPR_OK && out)
        *out = text;
    else
        free(text);
    return st;
}

/* ---- rados bench ------------------------------------------------------------------- */

/* The number after `label` in rados bench's summary. */
static cpr_status summary_number(const char *text, const char *label, double *out)
{
    const char *at = strstr(text, label);
    char *end = NULL;
    if (at)
        *out = strtod(at + strlen(label), &end);
    if (!at || end == at + strlen(label))
        return cpr_fail(CPR_IO, "rados bench printed no \"%s\" line: its output format "
                        "is not one cpr-bench knows", label);
    return CPR_OK;
}

/* Bytes and seconds of one rados bench phase from its summary; `made` is
 * "Total writes made:" or "Total reads made:". The "Bandwidth (MB/sec):"
 * line is in MiB/s: it must agree with bytes / seconds. */
static cpr_status parse_summary(const char *text, const char *made, const char *size,
                                uint64_t *bytes, double *seconds)
{
    double ops = 0, op_bytes = 0, s = 0, mib_s = 0;
    cpr_status st = summary_number(text, "Total time run:", &s);
    if (st == CPR_OK)
        st = summary_number(text, made, &ops);
    if (st == CPR_OK)
        st = summary_number(text, size, &op_bytes);
    if (st == CPR_OK)
        st = summary_number(text, "Bandwidth (MB/sec):", &mib_s);
    if (st)
        return st;
    double computed = s > 0 ? ops * op_bytes / s / 1048576.0 : 0;
    if (s <= 0 || ops < 1 || computed > mib_s * 1.01 + 0.01 || computed < mib_s * 0.99 - 0.01)
        return cpr_fail(CPR_IO, "rados bench's summary does not add up: %.0f x %.0f bytes "
                        "in %.3f s, bandwidth %.3f MiB/s", ops, op_bytes, s, mib_s);
    *bytes = (uint64_t)(ops * op_bytes);
    *seconds = s;
    return CPR_OK;
}

cpr_status bench_rados_run(const bench_opts *opts, uint64_t bytes, bench_result *res)
{
    char objects[32], write_ios[32], read_ios[32];
    uint64_t n_objects = (bytes + RADOS_OBJECT_BYTES - 1) / RADOS_OBJECT_BYTES;
    /* rados bench seq starts -t reads at once, whether or not there are
     * that many objects (the ones past the end fail with ENOENT). */
    uint64_t reads = opts->rados.read_ios < n_objects ? opts->rados.read_ios : n_objects;
    snprintf(objects, sizeof objects, "%llu", (unsigned long long)n_objects);
    snprintf(write_ios, sizeof write_ios, "%llu", (unsigned long long)opts->rados.write_ios);
    snprintf(read_ios, sizeof read_ios, "%llu", (unsigned long long)(reads ? reads : 1));
    const char *write[] = {"bench", RADOS_BENCH_MAX_S, "write", "-b", "4194304", "-t",
                           write_ios, "--no-cleanup", "--max-objects", objects, NULL};
    const char *seq[] = {"bench", RADOS_BENCH_MAX_S, "seq", "-t", read_ios, "--no-verify",
                         NULL};
    const char *cleanup[] = {"cleanup", NULL};
    char *text = NULL;
    uint64_t read_bytes = 0;
    fprintf(stderr, "cpr-bench: rados bench write: %s objects of 4 MiB, %s in flight\n",
            objects, write_ios);
    cpr_status st = run_rados(opts, write, N_ARGS(write), &text);
    if (st == CPR_OK)
        st = parse_summary(text, "Total writes made:", "Write size:", &res->raw_bytes,
                           &res->raw_write_s);
    free(text);
    text = NULL;
    if (st == CPR_OK) {
        fprintf(stderr, "cpr-bench: rados bench seq: %s in flight\n", read_ios);
        st = run_rados(opts, seq, N_ARGS(seq), &text);
    }
    if (st == CPR_OK)
        st = parse_summary(text, "Total reads made:", "Read size:", &read_bytes,
                           &res->raw_read_s);
    free(text);
    if (st == CPR_OK && read_bytes != res->raw_bytes)
        st = cpr_fail(CPR_IO, "rados bench seq read %llu bytes of the %llu written",
                      (unsigned long long)read_bytes, (unsigned long long)res->raw_bytes);
    cpr_status cleaned = run_rados(opts, cleanup, N_ARGS(cleanup), NULL);
    return bench_report(st ? st : cleaned, "rados bench");
}

/* ---- the run's namespace ------------------------------------------------------------ */

/* Remove the names in lines[0..n) with one `rados rm`. */
static cpr_status remove_batch(const bench_opts *opts, char **lines, size_t n)
{
    const char **args = calloc(n + 2, sizeof *args);
    if (!args)
        return cpr_fail(CPR_NO_MEMORY, "out of memory removing objects");
    args[0] = "rm";
    for (size_t i = 0; i < n; i++)
        args[i + 1] = lines[i];
    cpr_status st = run_rados(opts, args, n + 1, NULL);
    free(args);
    return st;
}

cpr_status bench_rados_purge(const bench_opts *opts, uint64_t *removed)
{
    if (strncmp(opts->rados.ns, NS_PREFIX, strlen(NS_PREFIX)) != 0)
        return cpr_fail(CPR_INTERNAL, "refusing to empty namespace \"%s\": not one of "
                        "cpr-bench's", opts->rados.ns);
    const char *ls[] = {"ls", NULL};
    char *text = NULL, *batch[RADOS_RM_BATCH];
    size_t n = 0;
    uint64_t count = 0;
    cpr_status st = run_rados(opts, ls, N_ARGS(ls), &text);
    for (char *line = text, *next; st == CPR_OK && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (*line)
            batch[n++] = line;
        if (n == RADOS_RM_BATCH || (n && (!next || !*next))) {
            st = remove_batch(opts, batch, n);
            count += n;
            n = 0;
        }
    }
    free(text);
    if (st == CPR_OK && removed)
        *removed = count;
    return bench_report(st, "emptying the run's RADOS namespace");
}

cpr_status bench_rados_begin(bench_opts *opts)
{
    const char *ls[] = {"ls", NULL};
    char *text = NULL;
    snprintf(opts->rados.ns, sizeof opts->rados.ns, NS_PREFIX "%ld-%lld", (long)getpid(),
             (long long)time(NULL));
    cpr_status st = run_rados(opts, ls, N_ARGS(ls), &text);
    if (st == CPR_OK && text[0])
        st = cpr_fail(CPR_ALREADY_EXISTS, "RADOS namespace %s/%s already holds objects",
                      opts->rados.pool, opts->rados.ns);
    free(text);
    return bench_report(st, "checking the run's RADOS namespace");
}

void bench_rados_release(const bench_opts *opts)
{
    uint64_t removed = 0;
    if (opts->keep)
        fprintf(stderr, "cpr-bench: kept RADOS namespace %s/%s\n", opts->rados.pool,
                opts->rados.ns);
    else if (bench_rados_purge(opts, &removed) == CPR_OK)
        fprintf(stderr, "cpr-bench: removed %llu objects of RADOS namespace %s/%s\n",
                (unsigned long long)removed, opts->rados.pool, opts->rados.ns);
}
