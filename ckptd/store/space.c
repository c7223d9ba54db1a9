/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Free space: what the store refuses, and when, so that a full disk costs a
 * refused call and never a lost or unreadable commit (issue #11).
 *
 * Why tiers: the catalog is RocksDB, and a RocksDB write that meets ENOSPC
 * may not come back at all (the Debian 12 build asserts on the next write to
 * a WAL whose append failed: the process aborts). So RocksDB must never be
 * the one to find the disk full. Data (segments, blobs) stops well before
 * the catalog does, and the catalog keeps room for its own flushes:
 *
 *   free >= begin_floor    Begin (a new part) is accepted; begin_floor is
 *                          max(min_free_bytes, data_floor)
 *   free >= data_floor     rows and blobs are written; data_floor is twice
 *                          the catalog's headroom
 *   free >= catalog_floor  a catalog write (commit, recovery record, fold
 *                          record, floor) is made; catalog_floor is the
 *                          headroom: CATALOG_SLACK (a memtable flush and its
 *                          WAL) plus the catalog's size (a compaction)
 *   otherwise              only retention's deletes, after the ballast file
 *                          is released if even they lack room
 *
 * Invariants
 *  F1. No RocksDB write is issued while free < catalog_floor, except GC's
 *      (which frees space) with free >= GC_SLACK.
 *  F2. The ballast (BALLAST_BYTES, preallocated at open when there is room)
 *      is released only by GC, to make room for its own deletes when
 *      another writer filled the file system; it is put back once free
 *      space is above begin_floor again.
 *  F3. Refusals are CPR_RESOURCE_EXHAUSTED, before anything changes: a
 *      refused Begin creates nothing, a refused put leaves the part as it
 *      was, a refused commit leaves the part open.
 *  F4. The store cannot commit (cpr_store_health) exactly while free <
 *      catalog_floor; it can again as soon as space is freed, by anyone.
 *
 * The floors are checked with statvfs(2) of the store's directory, a
 * syscall per check; a racing writer outside the store can still win, so
 * ckptd wants a file system (or quota) of its own (docs/operations.md).
 *
 * In RADOS the directory holds only the catalog's copy, and the data goes
 * to the pool, so Begin and data writes also need room in the pool:
 *  F5. free_pool >= max(min_free_bytes, 2 * POOL_SLACK) for Begin, and
 *      >= POOL_SLACK for rows and blobs, where free_pool is what the pool
 *      can still take (rados.h cpri_rados_pool_avail: Ceph's MAX AVAIL for
 *      the pool, less what its quota leaves), read at most every
 *      POOL_CHECK_MS; unknown (no manager in the cluster) is no refusal.
 *      The catalog's writes are omap keys of kilobytes: Ceph itself refuses
 *      them when the pool is full (ENOSPC or EDQUOT: CPR_RESOURCE_EXHAUSTED
 *      before RocksDB is written, rados.h R1), and lets GC's deletes through.
 *      The local Begin floor is then the catalog's alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "store_internal.h"
#include "rados.h"

#define MIB (1024ull * 1024)
#define CATALOG_SLACK (32 * MIB) /* > 2 memtables of setup_rocks_options' size */
#define GC_SLACK (4 * MIB)
#define BALLAST_BYTES (16 * MIB)
#define BALLAST_NAME "ballast"
#define POOL_SLACK (64 * MIB) /* F5: two segments' worth of 4 MiB objects, and more */
#define POOL_CHECK_MS 2000

uint64_t cpri_space_free_bytes(const cpr_store *store)
{
    struct statvfs sv;
    if (statvfs(store->dir, &sv) != 0)
        return UINT64_MAX; /* cannot tell: let the write find out */
    return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

/* The catalog's size, walked at most once a second: the data tier is
 * checked for every put, and the catalog grows by kilobytes a commit. */
static uint64_t catalog_floor(cpr_store *store)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t now_ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
    uint64_t at = atomic_load(&store->catalog_bytes_ms);
    if (at == 0 || now_ms - at >= 1000) {
        atomic_store(&store->catalog_bytes, cpri_tree_bytes(store->db_dir));
        atomic_store(&store->catalog_bytes_ms, now_ms ? now_ms : 1);
    }
    return CATALOG_SLACK + atomic_load(&store->catalog_bytes);
}

static uint64_t floor_of(cpr_store *store, cpri_space_need need)
{
    uint64_t cat = catalog_floor(store);
    switch (need) {
    case CPRI_SPACE_BEGIN: /* in RADOS the reserve is the pool's (F5) */
        return !store->rados && store->opts.min_free_bytes > 2 * cat ? store->opts.min_free_bytes
                                                                     : 2 * cat;
    case CPRI_SPACE_DATA:
        return 2 * cat;
    case CPRI_SPACE_CATALOG:
        return cat;
    default:
        return GC_SLACK;
    }
}

static double mib(uint64_t bytes)
{
    return (double)bytes / (double)MIB;
}

/* F5: what the pool can take, read at most every POOL_CHECK_MS. */
static uint64_t pool_avail(cpr_store *store, int *quota_bound)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t now_ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
    uint64_t at = atomic_load(&store->pool_avail_ms);
    if (at == 0 || now_ms - at >= POOL_CHECK_MS) {
        uint64_t avail = UINT64_MAX;
        int bound = 0;
        if (cpri_rados_pool_avail(store->rados, &avail, &bound) != CPR_OK)
            avail = UINT64_MAX; /* cannot tell: let the write find out */
        atomic_store(&store->pool_avail, avail);
        atomic_store(&store->pool_quota_bound, bound);
        atomic_store(&store->pool_avail_ms, now_ms ? now_ms : 1);
    }
    *quota_bound = atomic_load(&store->pool_quota_bound);
    return atomic_load(&store->pool_avail);
}

static cpr_status check_pool(cpr_store *store, cpri_space_need need, const char *op)
{
    if (!store->rados || (need != CPRI_SPACE_BEGIN && need != CPRI_SPACE_DATA))
        return CPR_OK;
    uint64_t want = POOL_SLACK;
    if (need == CPRI_SPACE_BEGIN)
        want = store->opts.min_free_bytes > 2 * POOL_SLACK ? store->opts.min_free_bytes
                                                            : 2 * POOL_SLACK;
    int quota = 0;
    uint64_t avail = pool_avail(store, &quota);
    if (avail >= want)
        return CPR_OK;
    return cpr_fail(CPR_RESOURCE_EXHAUSTED, "%s: the RADOS pool %s can take %.1f MiB more (%s), "
                    "%.1f MiB needed: %s. Free space (cprctl gc), raise the pool's quota or add "
                    "OSDs, and retry", op, cpri_rados_pool(store->rados), mib(avail),
                    quota ? "its quota" : "Ceph's MAX AVAIL for it",  mib(want),
                    need == CPRI_SPACE_BEGIN ? "new parts are refused below the reserve (ckptd "
                                               "--min-free-mb, at least 128 MiB)"
                                             : "rows and blobs stop there");
}

int cpri_space_low(cpr_store *store)
{
    return !store->rados && cpri_space_free_bytes(store) < floor_of(store, CPRI_SPACE_BEGIN);
}

cpr_status cpri_space_check(cpr_store *store, cpri_space_need need, const char *op)
{
    return cpri_space_check_more(store, need, 0, op);
}

cpr_status cpri_space_check_more(cpr_store *store, cpri_space_need need, uint64_t more,
                                 const char *op)
{
    cpr_status pool = check_pool(store, need, op);
    if (pool)
        return pool;
    uint64_t free_bytes = cpri_space_free_bytes(store);
    uint64_t want = floor_of(store, need) + (store->rados ? 0 : more);
    if (free_bytes >= want)
        return CPR_OK;
    const char *why = need == CPRI_SPACE_BEGIN
                          ? "new parts are refused below the free-space reserve (ckptd "
                            "--min-free-mb, or what the catalog needs if that is more)"
                      : need == CPRI_SPACE_DATA
                          ? "rows and blobs stop there so that commits keep room"
                          : "the catalog keeps that much room for its own writes";
    return cpr_fail(CPR_RESOURCE_EXHAUSTED, "%s: %.1f MiB free on the store's file system (%s), "
                    "%.1f MiB needed: %s. Free space (cprctl gc, or a larger disk) and retry",
                    op, mib(free_bytes), store->dir, mib(want), why);
}

cpr_status cpr_store_health(cpr_store *store)
{
    if (!store)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_health needs a store");
    if (atomic_load(&store->catalog_broken))
        return cpr_fail(CPR_UNAVAILABLE, "the store cannot commit: a catalog write failed "
                        "(%s); reopen it", store->catalog_error);
    return cpri_space_check(store, CPRI_SPACE_CATALOG, "the store cannot commit");
}

/* In RADOS: the bytes of the segments and blobs the catalog names (one
 * replica's worth; the pool holds size times that). Not under store->mu. */
static uint64_t pool_bytes(cpr_store *store)
{
    uint64_t bytes = 0;
    pthread_mutex_lock(&store->mu);
    for (size_t j = 0; j < store->catalog.n_jobs; j++) {
        const cpri_job *job = store->catalog.jobs[j];
        for (size_t i = 0; i < job->n_parts; i++) {
            bytes += job->parts[i].seg_bytes;
            for (size_t b = 0; b < job->parts[i].n_blobs; b++)
                bytes += job->parts[i].blobs[b].size;
        }
        for (size_t i = 0; i < job->n_folds; i++)
            bytes += job->folds[i].seg_bytes;
    }
    pthread_mutex_unlock(&store->mu);
    return bytes;
}

uint64_t cpri_store_bytes(cpr_store *store)
{
    char path[4200];
    struct stat sb;
    uint64_t bytes = cpri_tree_bytes(store->dir) + (store->rados ? pool_bytes(store) : 0);
    snprintf(path, sizeof path, "%s/" BALLAST_NAME, store->dir);
    if (stat(path, &sb) == 0 && (uint64_t)sb.st_size <= bytes)
        bytes -= (uint64_t)sb.st_size;
    return bytes;
}

/* ---- the ballast (F2) ---------------------------------------------------------- */

static void ballast_path(const cpr_store *store, char *out, size_t cap)
{
    snprintf(out, cap, "%s/" BALLAST_NAME, store->dir);
}

void cpri_ballast_restore(cpr_store *store)
{
    char path[4200];
    ballast_path(store, path, sizeof path);
    if (access(path, F_OK) == 0)
        return;
    if (cpri_space_free_bytes(store) < floor_of(store, CPRI_SPACE_BEGIN) + BALLAST_BYTES)
        return; /* not now: it would eat the reserve it stands for */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    int rc = posix_fallocate(fd, 0, (off_t)BALLAST_BYTES);
    close(fd);
    if (rc != 0) { /* a file system without fallocate: no ballast, said once */
        unlink(path);
        cpri_log(CPR_LOG_WARN, "store %s: no ballast file (%s): retention on a disk another "
                 "process filled may find no room", store->dir, strerror(rc));
    }
}

/* GC about to write with less than GC_SLACK free: give the ballast back. */
static int ballast_release(cpr_store *store)
{
    char path[4200];
    ballast_path(store, path, sizeof path);
    if (unlink(path) != 0)
        return 0;
    cpri_log(CPR_LOG_WARN, "store %s: the file system is full; released the %.0f MiB ballast "
             "so that retention can free space", store->dir, mib(BALLAST_BYTES));
    return 1;
}

cpr_status cpri_space_check_gc(cpr_store *store)
{
    cpr_status st = cpri_space_check(store, CPRI_SPACE_GC, "retention");
    if (st == CPR_RESOURCE_EXHAUSTED && ballast_release(store))
        st = cpri_space_check(store, CPRI_SPACE_GC, "retention");
    return st;
}
