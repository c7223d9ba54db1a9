/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Filesystem and process helpers of cpr-bench: a recursive directory walk
 * used both to drop the page cache of a tree (so the restore and the raw
 * read measure the device, not memory) and to remove the working directory;
 * rate-limited progress lines; process CPU time. The walk uses only
 * POSIX.1-2008 *at() calls and never follows symbolic links.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "cpr_common.h"

#define WALK_MAX_DEPTH 64

/* Called for every entry but directories (`st` from fstatat), and for every
 * directory after its contents were walked (`is_dir` set). */
typedef cpr_status (*walk_fn)(void *ctx, int dir_fd, const char *dir_path,
                              const char *name, const struct stat *st, int is_dir);

static cpr_status walk_dir(int dir_fd, const char *path, int depth, walk_fn fn,
                           void *ctx);

static cpr_status walk_entry(int dir_fd, const char *path, const char *name,
                             int depth, walk_fn fn, void *ctx)
{
    struct stat st;
    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return cpr_fail(CPR_IO, "stat %s/%s: %s", path, name, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return fn(ctx, dir_fd, path, name, &st, 0);
    if (depth >= WALK_MAX_DEPTH)
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "%s/%s: directories nested too deep",
                        path, name);
    int sub_fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub_fd < 0)
        return cpr_fail(CPR_IO, "open %s/%s: %s", path, name, strerror(errno));
    char *sub_path = bench_path_join(path, name);
    cpr_status st_walk = sub_path ? walk_dir(sub_fd, sub_path, depth + 1, fn, ctx)
                                  : cpr_fail(CPR_NO_MEMORY, "out of memory walking %s", path);
    free(sub_path); /* walk_dir closed sub_fd */
    if (st_walk)
        return st_walk;
    return fn(ctx, dir_fd, path, name, &st, 1);
}

/* Walk the directory open as `dir_fd` (taken over and closed). */
static cpr_status walk_dir(int dir_fd, const char *path, int depth, walk_fn fn,
                           void *ctx)
{
    cpr_status st = CPR_OK;
    DIR *d = fdopendir(dir_fd);
    if (!d) {
        st = cpr_fail(CPR_IO, "opendir %s: %s", path, strerror(errno));
        close(dir_fd);
        return st;
    }
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno)
                st = cpr_fail(CPR_IO, "readdir %s: %s", path, strerror(errno));
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        st = walk_entry(dirfd(d), path, e->d_name, depth, fn, ctx);
        if (st)
            break;
    }
    closedir(d);
    return st;
}

static cpr_status walk_tree(const char *path, walk_fn fn, void *ctx)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return cpr_fail(CPR_IO, "open %s: %s", path, strerror(errno));
    return walk_dir(fd, path, 0, fn, ctx);
}

char *bench_path_join(const char *a, const char *b)
{
    size_t len = strlen(a) + 1 + strlen(b) + 1;
    char *out = malloc(len);
    if (out && snprintf(out, len, "%s/%s", a, b) < 0) {
        free(out);
        out = NULL;
    }
    return out;
}

/* ---- dropping the page cache --------------------------------------------- */

static cpr_status drop_one(void *ctx, int dir_fd, const char *dir_path,
                           const char *name, const struct stat *st, int is_dir)
{
    uint64_t *disk_bytes = ctx;
    if (is_dir || !S_ISREG(st->st_mode))
        return CPR_OK;
    int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return cpr_fail(CPR_IO, "open %s/%s: %s", dir_path, name, strerror(errno));
    cpr_status rc = CPR_OK;
    /* Dirty pages are not dropped: write them back first. */
    if (fsync(fd) != 0)
        rc = cpr_fail(CPR_IO, "fsync %s/%s: %s", dir_path, name, strerror(errno));
    int adv = rc ? 0 : posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (adv != 0)
        rc = cpr_fail(CPR_IO, "posix_fadvise %s/%s: %s", dir_path, name,
                      strerror(adv));
    close(fd);
    *disk_bytes += (uint64_t)st->st_blocks * 512u;
    return rc;
}

cpr_status bench_drop_cache(const char *dir, uint64_t *disk_bytes)
{
    uint64_t total = 0;
    cpr_status st = walk_tree(dir, drop_one, &total);
    if (st == CPR_OK && disk_bytes)
        *disk_bytes = total;
    return st;
}

/* ---- removing a tree ----------------------------------------------------- */

static cpr_status remove_one(void *ctx, int dir_fd, const char *dir_path,
                             const char *name, const struct stat *st, int is_dir)
{
    (void)ctx;
    (void)st;
    if (unlinkat(dir_fd, name, is_dir ? AT_REMOVEDIR : 0) != 0)
        return cpr_fail(CPR_IO, "remove %s/%s: %s", dir_path, name, strerror(errno));
    return CPR_OK;
}

cpr_status bench_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? CPR_OK
                               : cpr_fail(CPR_IO, "stat %s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0)
            return cpr_fail(CPR_IO, "remove %s: %s", path, strerror(errno));
        return CPR_OK;
    }
    cpr_status rc = walk_tree(path, remove_one, NULL);
    if (rc == CPR_OK && rmdir(path) != 0)
        rc = cpr_fail(CPR_IO, "remove %s: %s", path, strerror(errno));
    return rc;
}

/* ---- progress, CPU time, errors ------------------------------------------ */

#define PROGRESS_INTERVAL_S 0.4

void bench_progress_start(bench_progress *p, const char *what, uint64_t total)
{
    p->what = what;
    p->total = total ? total : 1;
    p->last_print_s = cpri_now_s();
    p->last_pct = -1;
}

void bench_progress_update(bench_progress *p, uint64_t done)
{
    if (!p->what) /* a silent tracker (one of several threads) */
        return;
    int pct = (int)(done >= p->total ? 100 : done * 100 / p->total);
    if (pct == p->last_pct)
        return;
    double now = cpri_now_s();
    if (pct < 100 && now - p->last_print_s < PROGRESS_INTERVAL_S)
        return;
    fprintf(stderr, "cpr-bench: %s ... %d%%\n", p->what, pct);
    p->last_pct = pct;
    p->last_print_s = now;
}

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

void bench_peak_rss_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

uint64_t bench_peak_rss_kb(void)
{
    char line[256];
    unsigned long long kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

bench_cpu bench_cpu_now(void)
{
    struct rusage ru;
    bench_cpu cpu = {0, 0};
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        cpu.user_s = tv_s(ru.ru_utime);
        cpu.sys_s = tv_s(ru.ru_stime);
    }
    return cpu;
}

bench_cpu bench_cpu_since(bench_cpu start, bench_cpu end)
{
    bench_cpu d = {end.user_s - start.user_s, end.sys_s - start.sys_s};
    return d;
}

cpr_status bench_report(cpr_status st, const char *what)
{
    if (st)
        fprintf(stderr, "cpr-bench: %s: %s: %s\n", what, cpr_status_name(st),
                cpr_errmsg());
    return st;
}
