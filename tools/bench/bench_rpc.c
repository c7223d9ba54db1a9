/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The phases of `cpr-bench rpc`: the store benchmark's workload sent through
 * the client library to a real ckptd on 127.0.0.1, by S shards at once (one
 * thread and one part per shard, as S trainers would). A first FULL save,
 * aborted at its end, runs untimed (warmup_s): a daemon and a trainer's
 * client live for the whole job, and every save after the first finds their
 * buffers mapped (on the VM of docs/performance.md a first touch of a page
 * costs 50 times its copy). Ingest is timed from
 * the first Begin to the last durable Commit; then the daemon is stopped,
 * the page cache of its data dropped, the daemon restarted, and every shard
 * restores its rows concurrently while each row is checked. CPU time counts
 * this process and the daemon.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cpr/block.h"
#include "cpr/client.h"
#include "cpr_common.h"
#include "launch.h"

#define WARMUP_CKPT (FULL_CKPT + 1000) /* aborted: never seen by the restore */

/* ---- the daemon --------------------------------------------------------------- */

typedef cpri_ckptd_proc bench_daemon;

/* use_unix: listen on DIR/ckptd.sock instead of 127.0.0.1. With --backend
 * rados the daemon's store is in this run's namespace of the pool. */
static cpr_status daemon_start(const bench_opts *opts, const char *dir, int use_unix,
                               bench_daemon *d)
{
    char listen[300];
    snprintf(listen, sizeof listen, "unix:%s/ckptd.sock", dir);
    const char *extra[12];
    size_t n = 0;
    if (opts->restore_streams) {
        extra[n++] = "--restore-streams";
        extra[n++] = opts->restore_streams;
    }
    if (opts->rados.enabled) {
        const char *rados[] = {"--backend", "rados", "--rados-pool", opts->rados.pool,
                               "--rados-namespace", opts->rados.ns};
        for (size_t i = 0; i < 6; i++)
            extra[n++] = rados[i];
        if (opts->rados.conf) {
            extra[n++] = "--rados-conf";
            extra[n++] = opts->rados.conf;
        }
    }
    extra[n] = NULL;
    const char *ckptd = opts->ckptd;
    cpr_status st = cpri_ckptd_spawn(ckptd, dir, use_unix ? listen : NULL, n ? extra : NULL, d);
    if (st)
        cpr_fail(st, "%s (--ckptd PATH names the binary)", cpr_errmsg());
    return st;
}

/* User and system CPU seconds of process `pid` so far (/proc/PID/stat). */
static bench_cpu proc_cpu(pid_t pid)
{
    bench_cpu cpu = {0, 0};
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return cpu;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command may contain spaces */
    unsigned long long utime = 0, stime = 0;
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                    &stime) == 2) {
        double tick = (double)sysconf(_SC_CLK_TCK);
        cpu.user_s = (double)utime / tick;
        cpu.sys_s = (double)stime / tick;
    }
    return cpu;
}

static bench_cpu both_cpu(pid_t daemon_pid)
{
    bench_cpu a = bench_cpu_now(), b = proc_cpu(daemon_pid);
    return (bench_cpu){a.user_s + b.user_s, a.sys_s + b.sys_s};
}

/* ---- one shard's writer and reader -------------------------------------------------- */

typedef struct shard {
    const bench_opts *opts;
    cpr_client *client;
    uint32_t index, count;
    uint64_t lo, hi;            /* rows [lo, hi), lo a multiple of batch_rows */
    size_t prio_lo, prio_hi;    /* its rows in d.priority_ids */
    bench_data d;
    pthread_barrier_t *phase;
    cpr_status st;
    char why[512];
    bench_verifier v;
} shard;

static cpr_status shard_fail(shard *s, cpr_status st)
{
    if (st && s->st == CPR_OK) {
        s->st = st;
        snprintf(s->why, sizeof s->why, "%s", cpr_errmsg());
    }
    return st;
}

static cpr_status write_part(shard *s, uint64_t ckpt, cpr_kind kind, uint64_t first,
                             uint64_t end, bench_fill_fn fill, int keep)
{
    cpr_table_schema table = {0, s->opts->rows, s->opts->dim, s->opts->state_dim};
    cpr_part_spec spec = {{BENCH_JOB, s->index, ckpt}, kind, ckpt * 1000, s->count, 0,
                          &table, 1, CPR_CODEC_F32};
    cpr_part *part;
    cpr_status st = cpr_client_begin(s->client, &spec, &part);
    if (st)
        return st;
    for (uint64_t at = first; st == CPR_OK && at < end;) {
        size_t n = end - at < s->d.batch_rows ? (size_t)(end - at) : s->d.batch_rows;
        float *values, *state;
        fill(&s->d, at, n, ckpt, &values, &state);
        cpr_row_batch b = {0, n, s->d.ids, values, n * s->d.dim,
                           s->d.state_dim ? state : NULL, n * s->d.state_dim, 0, 0};
        st = cpr_part_put_rows(part, &b);
        at += n;
    }
    if (st == CPR_OK && !keep) {
        /* The warm-up: wait until every byte went out to the daemon, so
         * that its path ran too, then drop the part. */
        cpr_part_progress pr;
        cpr_part_progress_get(part, &pr);
        while (pr.error == CPR_OK && pr.bytes_sent < pr.bytes_queued) {
            nanosleep(&(struct timespec){0, 1000000}, NULL); /* 1 ms: a bench, not a test */
            cpr_part_progress_get(part, &pr);
        }
        st = pr.error;
    }
    if (st || !keep)
        return cpr_part_abort(&part), st;
    return cpr_part_commit(&part);
}

static void *writer_main(void *arg)
{
    shard *s = arg;
    shard_fail(s, write_part(s, FULL_CKPT, CPR_KIND_FULL, s->lo, s->hi, bench_fill_full, 1));
    pthread_barrier_wait(s->phase);
    if (s->st == CPR_OK)
        shard_fail(s, write_part(s, PRIORITY_CKPT, CPR_KIND_PRIORITY, s->prio_lo, s->prio_hi,
                                 bench_fill_priority, 1));
    pthread_barrier_wait(s->phase);
    return NULL;
}

/* The untimed first save: all of FULL's bytes, then aborted. */
static void *warm_main(void *arg)
{
    shard *s = arg;
    shard_fail(s, write_part(s, WARMUP_CKPT, CPR_KIND_FULL, s->lo, s->hi, bench_fill_full, 0));
    return NULL;
}

static void *reader_main(void *arg)
{
    shard *s = arg;
    cpr_row_range range = {s->lo, s->hi};
    cpr_restore_query q = {.job = BENCH_JOB, .ranges = &range, .n_ranges = 1,
                           .batch_rows = s->opts->batch_rows};
    s->v = (bench_verifier){.d = &s->d, .next_id = s->lo};
    bench_progress_start(&s->v.progress, "restoring (shard 0)", s->hi - s->lo);
    if (s->index)
        s->v.progress.what = NULL; /* shard 0 alone reports progress */
    cpr_status st = cpr_client_restore(s->client, &q, &s->index, 1, bench_check_batch, &s->v,
                                       NULL);
    if (st == CPR_OK && s->v.rows != s->hi - s->lo)
        st = cpr_fail(CPR_CORRUPT, "shard %u restored %llu rows, %llu were written", s->index,
                      (unsigned long long)s->v.rows, (unsigned long long)(s->hi - s->lo));
    shard_fail(s, st);
    return NULL;
}

/* ---- the run -------------------------------------------------------------------------- */

static cpr_status shards_init(const bench_opts *opts, uint32_t count, cpr_client *client,
                              pthread_barrier_t *phase, shard *sh)
{
    uint64_t b = opts->batch_rows;
    for (uint32_t i = 0; i < count; i++) {
        shard *s = &sh[i];
        *s = (shard){.opts = opts, .client = client, .index = i, .count = count,
                     .phase = phase};
        s->lo = opts->rows * i / count / b * b;
        s->hi = i + 1 == count ? opts->rows : opts->rows * (i + 1) / count / b * b;
        cpr_status st = bench_data_init(&s->d, opts);
        if (st)
            return st;
        s->prio_lo = cpri_lower_bound_u64(s->d.priority_ids, s->d.n_priority, s->lo);
        s->prio_hi = cpri_lower_bound_u64(s->d.priority_ids, s->d.n_priority, s->hi);
    }
    return CPR_OK;
}

/* Run `fn` on every shard in its own thread; the first failure wins. */
static cpr_status run_shards(shard *sh, uint32_t count, void *(*fn)(void *))
{
    pthread_t th[256];
    uint32_t started = 0;
    cpr_status st = CPR_OK;
    for (; started < count; started++)
        if (pthread_create(&th[started], NULL, fn, &sh[started]) != 0)
            break;
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (started < count)
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "cannot start %u threads", count);
    for (uint32_t i = 0; i < count && st == CPR_OK; i++)
        if (sh[i].st)
            st = cpr_fail(sh[i].st, "shard %u: %s", i, sh[i].why);
    return st;
}

static cpr_status ingest(shard *sh, uint32_t count, pid_t pid, bench_result *res)
{
    bench_cpu cpu0 = both_cpu(pid);
    double t0 = cpri_now_s();
    cpr_status st = run_shards(sh, count, writer_main);
    res->ingest_s = cpri_now_s() - t0;
    res->ingest_cpu = bench_cpu_since(cpu0, both_cpu(pid));
    return st;
}

/* The writers meet at a barrier after FULL, so the phases split cleanly;
 * this thread notes when. */
typedef struct phase_clock {
    pthread_barrier_t *phase;
    double t_full;
} phase_clock;

static void *timed_barrier(void *arg)
{
    phase_clock *pc = arg;
    pthread_barrier_wait(pc->phase);
    pc->t_full = cpri_now_s();
    pthread_barrier_wait(pc->phase);
    return NULL;
}

/* --direct: the client reads the stored blocks itself (direct reads), from
 * the pool or from the daemon's directory `dir`; --direct-writes: it writes
 * its parts' segments into the pool itself. */
static cpr_status open_client(const bench_opts *opts, const bench_daemon *d, const char *dir,
                              cpr_client **client)
{
    char target[300];
    cpr_client_options o;
    memset(&o, 0, sizeof o);
    if (opts->direct || opts->direct_writes)
        o.store = bench_store_options(opts);
    if (opts->direct && !opts->rados.enabled)
        o.store.local_dir = dir;
    o.direct_writes = opts->direct_writes;
    if (strncmp(d->addr, "unix:", 5) == 0)
        snprintf(target, sizeof target, "%s", d->addr);
    else
        snprintf(target, sizeof target, "grpc://%s", d->addr);
    return cpr_client_open(target, &o, client);
}

cpr_status bench_rpc_run(const bench_opts *opts, const char *data_dir, uint32_t count,
                         int use_unix, bench_result *res)
{
    shard *sh = calloc(count, sizeof *sh);
    pthread_barrier_t phase;
    bench_daemon d = {0};
    cpr_client *client = NULL;
    pthread_t clock_thread;
    phase_clock pc = {&phase, 0};
    int have_barrier = 0;
    res->row_bytes = 8 + 4 * (uint64_t)opts->dim + 4 * (uint64_t)opts->state_dim;
    if (!sh)
        return cpr_fail(CPR_NO_MEMORY, "out of memory");
    double t0 = cpri_now_s();
    cpr_status st = daemon_start(opts, data_dir, use_unix, &d);
    res->open_s = cpri_now_s() - t0;
    if (st == CPR_OK)
        st = open_client(opts, &d, data_dir, &client);
    if (st == CPR_OK)
        st = shards_init(opts, count, client, &phase, sh);
    if (st == CPR_OK) {
        fprintf(stderr, "cpr-bench: rpc, %u shard(s): an untimed first save\n", count);
        t0 = cpri_now_s();
        st = run_shards(sh, count, warm_main);
        res->warmup_s = cpri_now_s() - t0;
    }
    if (st == CPR_OK) {
        have_barrier = pthread_barrier_init(&phase, NULL, count + 1) == 0;
        if (!have_barrier || pthread_create(&clock_thread, NULL, timed_barrier, &pc) != 0)
            st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "cannot start the phase clock");
    }
    if (st == CPR_OK) {
        fprintf(stderr, "cpr-bench: rpc, %u shard(s): writing FULL and PRIORITY parts\n",
                count);
        double start = cpri_now_s();
        st = ingest(sh, count, d.pid, res);
        pthread_join(clock_thread, NULL);
        res->full_s = pc.t_full - start;
        res->priority_s = res->ingest_s - res->full_s;
        res->full_bytes = opts->rows * res->row_bytes;
        for (uint32_t i = 0; i < count; i++)
            res->priority_rows += sh[i].prio_hi - sh[i].prio_lo;
        res->priority_bytes = res->priority_rows * res->row_bytes;
    }
    cpr_client_close(client);
    client = NULL;
    if (st == CPR_OK) { /* cold: as after a failure, nothing cached anywhere */
        t0 = cpri_now_s();
        st = cpri_ckptd_stop(&d);
        d.pid = 0;
        res->close_s = cpri_now_s() - t0;
        t0 = cpri_now_s();
        if (st == CPR_OK)
            st = bench_drop_cache(data_dir, &res->store_disk_bytes);
        res->drop_cache_s = cpri_now_s() - t0;
        t0 = cpri_now_s();
        if (st == CPR_OK)
            st = daemon_start(opts, data_dir, use_unix, &d);
        res->reopen_s = cpri_now_s() - t0;
    }
    if (st == CPR_OK)
        st = open_client(opts, &d, data_dir, &client);
    if (st == CPR_OK) {
        for (uint32_t i = 0; i < count; i++)
            sh[i].client = client;
        bench_cpu cpu0 = both_cpu(d.pid);
        t0 = cpri_now_s();
        st = run_shards(sh, count, reader_main);
        res->restore_s = cpri_now_s() - t0;
        res->restore_cpu = bench_cpu_since(cpu0, both_cpu(d.pid));
        for (uint32_t i = 0; i < count; i++)
            res->restore_rows += sh[i].v.rows;
        res->restore_bytes = res->restore_rows * res->row_bytes;
    }
    cpr_client_close(client);
    if (d.pid > 0) {
        cpr_status stop = cpri_ckptd_stop(&d);
        if (st == CPR_OK)
            st = stop;
    }
    for (uint32_t i = 0; i < count; i++)
        bench_data_release(&sh[i].d);
    if (have_barrier)
        pthread_barrier_destroy(&phase);
    free(sh);
    return st;
}
