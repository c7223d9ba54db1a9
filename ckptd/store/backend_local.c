/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The local-disk segment backend (backend.h): one file per object,
 * <root>/j_<job>/<rest>.seg. Writes go through blobio's io_uring writer
 * (O_DIRECT, several 1 MiB writes in flight); finish fdatasyncs the file
 * and fsyncs its directory (and the root when the job's directory is new),
 * so a committed record never names a file a crash could lose. Reads open
 * each object once per reader and go through blobio's fetcher.
 */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "blobio.h"
#include "cpr_common.h"

#define FETCH_DEPTH_MAX 64

typedef struct local_backend {
    cpri_backend base;
    char *root;
    int no_sync;
    int buffered;          /* reads through the page cache (backend.h) */
} local_backend;

struct cpri_obj_writer {
    local_backend *be;
    cpri_bfile_writer *w;
    char *dir;
};

/* Files are opened when a read of them comes within the window of reads in
 * flight and closed when the next read of them lies beyond it (or there is
 * none), so a restore holds a handful of descriptors however many segments
 * it reads. A file removed meanwhile is still readable: segments are
 * removed only after their readers finish (store_internal.h S7). */
struct cpri_obj_reader {
    local_backend *be;
    cpri_fetcher *fetch;
    cpri_fetch_req *reqs;
    size_t n, delivered, window;
    size_t *obj_of;        /* extent -> object */
    size_t *next_use;      /* extent -> the next extent of its object (n: none) */
    const char **names;    /* object -> name (borrowed from ext) */
    int *fds;              /* object -> descriptor, -1 while closed */
    size_t n_objs;
};

/* <root>/j_<job>/<rest>.seg, and the directory part in *dir (malloc'd). */
static cpr_status object_path(const local_backend *be, const char *object, char **path,
                              char **dir)
{
    const char *slash = strchr(object, '/');
    if (!slash || slash == object || !slash[1] || strchr(slash + 1, '/'))
        return cpr_fail(CPR_INTERNAL, "bad segment object name \"%s\"", object);
    size_t len = strlen(be->root) + strlen(object) + 16;
    *path = malloc(len);
    if (dir)
        *dir = malloc(len);
    if (!*path || (dir && !*dir)) {
        free(*path);
        if (dir)
            free(*dir);
        return cpr_fail(CPR_NO_MEMORY, "out of memory naming a segment");
    }
    snprintf(*path, len, "%s/j_%s.seg", be->root, object);
    if (dir)
        snprintf(*dir, len, "%s/j_%.*s", be->root, (int)(slash - object), object);
    return CPR_OK;
}

static cpr_status local_create(cpri_backend *base, const char *object, cpri_obj_writer **out)
{
    local_backend *be = (local_backend *)base;
    char *path = NULL, *dir = NULL;
    cpr_status st = object_path(be, object, &path, &dir);
    if (st)
        return st;
    cpri_obj_writer *w = calloc(1, sizeof *w);
    if (!w) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory creating segment %s", object);
        goto out;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        st = cpr_fail(errno == ENOSPC ? CPR_RESOURCE_EXHAUSTED : CPR_IO,
                      "cannot create %s: %s", dir, strerror(errno));
        goto out;
    }
    /* Every time, not only by the creator of the job's directory: a
     * concurrent creator may finish first, and a failed fsync is retried. */
    if (!be->no_sync && cpri_fsync_dir(be->root) != 0) {
        st = cpr_fail(CPR_IO, "fsync %s: %s", be->root, strerror(errno));
        goto out;
    }
    st = cpri_bfile_create(path, 1, 0, &w->w);
    if (st)
        goto out;
    w->be = be;
    w->dir = dir;
    dir = NULL;
    *out = w;
    w = NULL;
out:
    free(w);
    free(dir);
    free(path);
    return st;
}

static cpr_status local_append(cpri_obj_writer *w, const void *data, size_t len)
{
    return cpri_bfile_append(w->w, data, len);
}

static uint64_t local_written(const cpri_obj_writer *w)
{
    return cpri_bfile_written(w->w);
}

static cpr_status local_finish(cpri_obj_writer *w, uint64_t *size)
{
    cpr_status st = cpri_bfile_finish(w->w, w->be->no_sync, size, NULL, NULL);
    if (st == CPR_OK && !w->be->no_sync && cpri_fsync_dir(w->dir) != 0)
        st = cpr_fail(CPR_IO, "fsync %s: %s", w->dir, strerror(errno));
    free(w->dir);
    free(w);
    return st;
}

static void local_discard(cpri_obj_writer *w)
{
    if (!w)
        return;
    cpri_bfile_discard(w->w);
    free(w->dir);
    free(w);
}

static void reader_free(cpri_obj_reader *r)
{
    cpri_fetcher_destroy(r->fetch);
    for (size_t i = 0; r->fds && i < r->n_objs; i++)
        if (r->fds[i] >= 0)
            close(r->fds[i]);
    free(r->fds);
    free(r->names);
    free(r->obj_of);
    free(r->next_use);
    free(r->reqs);
    free(r);
}

/* Open every file the reads of the window [delivered, delivered + window)
 * need, and point their requests at it. */
static cpr_status open_window(cpri_obj_reader *r)
{
    size_t end = r->delivered + r->window < r->n ? r->delivered + r->window : r->n;
    for (size_t i = r->delivered; i < end; i++) {
        size_t k = r->obj_of[i];
        if (r->fds[k] < 0) {
            char *path = NULL;
            cpr_status st = object_path(r->be, r->names[k], &path, NULL);
            if (st)
                return st;
            r->fds[k] = cpri_bfile_open_read(path, !r->be->buffered);
            if (r->fds[k] >= 0 && r->be->buffered) /* read-ahead: the kernel's, doubled */
                (void)posix_fadvise(r->fds[k], 0, 0, POSIX_FADV_SEQUENTIAL);
            if (r->fds[k] < 0)
                st = errno == ENOENT
                         ? cpr_fail(CPR_CORRUPT, "segment file %s is missing", path)
                         : cpr_fail(CPR_IO, "open %s: %s", path, strerror(errno));
            free(path);
            if (st)
                return st;
        }
        r->reqs[i].fd = r->fds[k];
    }
    return CPR_OK;
}

static cpr_status local_read_start(cpri_backend *base, const cpri_obj_extent *ext, size_t n,
                                   unsigned depth, cpri_obj_reader **out)
{
    cpri_obj_reader *r = calloc(1, sizeof *r);
    size_t cap = n ? n : 1;
    if (r) {
        r->reqs = calloc(cap, sizeof *r->reqs);
        r->obj_of = calloc(cap, sizeof *r->obj_of);
        r->next_use = calloc(cap, sizeof *r->next_use);
        r->names = calloc(cap, sizeof *r->names);
        r->fds = calloc(cap, sizeof *r->fds);
    }
    if (!r || !r->reqs || !r->obj_of || !r->next_use || !r->names || !r->fds) {
        if (r)
            reader_free(r);
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting a segment read");
    }
    r->be = (local_backend *)base;
    r->n = n;
    depth = depth > FETCH_DEPTH_MAX ? FETCH_DEPTH_MAX : depth ? depth : 1;
    if (r->be->buffered) /* one read at a time: the kernel reads ahead */
        depth = 1;
    r->window = (size_t)depth + 1;
    /* Objects by name (extents of one object are usually adjacent: look
     * back one before searching), and each extent's next of its object. */
    size_t *last = calloc(cap, sizeof *last);
    if (!last) {
        reader_free(r);
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting a segment read");
    }
    for (size_t i = 0; i < n; i++) {
        size_t k = r->n_objs;
        if (k && strcmp(r->names[k - 1], ext[i].object) == 0)
            k = k - 1;
        else
            for (size_t j = 0; j < r->n_objs; j++)
                if (strcmp(r->names[j], ext[i].object) == 0) {
                    k = j;
                    break;
                }
        if (k == r->n_objs) {
            r->names[k] = ext[i].object;
            r->fds[k] = -1;
            r->n_objs++;
        } else {
            r->next_use[last[k]] = i;
        }
        last[k] = i;
        r->obj_of[i] = k;
        r->next_use[i] = n;
        r->reqs[i] = (cpri_fetch_req){-1, ext[i].offset, ext[i].len};
    }
    free(last);
    cpr_status st = open_window(r);
    if (st == CPR_OK)
        st = cpri_fetcher_create(r->reqs, n, depth, r->be->buffered, &r->fetch);
    if (st) {
        reader_free(r);
        return st;
    }
    *out = r;
    return CPR_OK;
}

static cpr_status local_read_next(cpri_obj_reader *r, void **owner, const unsigned char **data)
{
    cpr_status st = open_window(r); /* the fetcher submits within the window */
    if (st == CPR_OK)
        st = cpri_fetcher_next(r->fetch, owner, data);
    if (st)
        return st;
    size_t i = r->delivered++, k = r->obj_of[i];
    if (r->next_use[i] >= r->delivered + r->window) { /* not needed soon: close */
        close(r->fds[k]);
        r->fds[k] = -1;
    }
    return CPR_OK;
}

static void local_read_release(cpri_obj_reader *r, void *owner)
{
    cpri_fetcher_release(r->fetch, owner);
}

static void local_read_end(cpri_obj_reader *r)
{
    if (r)
        reader_free(r);
}

static cpr_status local_remove(cpri_backend *base, const char *object)
{
    char *path = NULL;
    cpr_status st = object_path((local_backend *)base, object, &path, NULL);
    if (st)
        return st;
    if (unlink(path) != 0 && errno != ENOENT)
        st = cpr_fail(CPR_IO, "remove %s: %s", path, strerror(errno));
    free(path);
    return st;
}

static cpr_status local_size(cpri_backend *base, const char *object, uint64_t *size)
{
    char *path = NULL;
    struct stat sb;
    cpr_status st = object_path((local_backend *)base, object, &path, NULL);
    if (st)
        return st;
    if (stat(path, &sb) != 0)
        st = errno == ENOENT ? cpr_fail(CPR_NOT_FOUND, "segment file %s is missing", path)
                             : cpr_fail(CPR_IO, "stat %s: %s", path, strerror(errno));
    else
        *size = (uint64_t)sb.st_size;
    free(path);
    return st;
}

static cpr_status local_list(cpri_backend *base, cpri_obj_list_fn fn, void *ctx)
{
    local_backend *be = (local_backend *)base;
    DIR *jobs = opendir(be->root);
    struct dirent *je;
    int stop = 0;
    if (!jobs)
        return cpr_fail(CPR_IO, "cannot list %s: %s", be->root, strerror(errno));
    while (!stop && (je = readdir(jobs)) != NULL) {
        if (strncmp(je->d_name, "j_", 2) != 0)
            continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", be->root, je->d_name);
        DIR *segs = opendir(dir);
        struct dirent *se;
        while (!stop && segs && (se = readdir(segs)) != NULL) {
            size_t len = strlen(se->d_name);
            if (len <= 4 || strcmp(se->d_name + len - 4, ".seg") != 0)
                continue;
            char object[600];
            snprintf(object, sizeof object, "%s/%.*s", je->d_name + 2, (int)(len - 4),
                     se->d_name);
            stop = fn(ctx, object);
        }
        if (segs)
            closedir(segs);
    }
    closedir(jobs);
    return CPR_OK;
}

static void local_close(cpri_backend *base)
{
    local_backend *be = (local_backend *)base;
    if (!be)
        return;
    free(be->root);
    free(be);
}

static const cpri_backend_ops local_ops = {
    .name = "local",
    /* 16 MiB, 8 blocks a restore: more bought nothing on this project's
     * disks (docs/performance.md) */
    .read_ahead_bytes = (uint64_t)16 << 20,
    .read_depth = 8,
    .create = local_create,
    .append = local_append,
    .written = local_written,
    .finish = local_finish,
    .discard = local_discard,
    .read_start = local_read_start,
    .read_next = local_read_next,
    .read_release = local_read_release,
    .read_end = local_read_end,
    .size = local_size,
    .remove = local_remove,
    .list = local_list,
    .close = local_close,
};

cpr_status cpri_backend_local_open(const char *root, int no_sync, int buffered,
                                   cpri_backend **out)
{
    local_backend *be = calloc(1, sizeof *be);
    if (!be || !(be->root = strdup(root))) {
        free(be);
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening %s", root);
    }
    if (mkdir(root, 0755) != 0 && errno != EEXIST) {
        cpr_status st = cpr_fail(CPR_IO, "cannot create %s: %s", root, strerror(errno));
        local_close(&be->base);
        return st;
    }
    char parent[4096]; /* root's own entry in the store directory */
    snprintf(parent, sizeof parent, "%s", root);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent)
        *slash = '\0';
    if (!no_sync && slash && cpri_fsync_dir(parent) != 0) {
        cpr_status st = cpr_fail(CPR_IO, "fsync %s: %s", parent, strerror(errno));
        local_close(&be->base);
        return st;
    }
    be->base.ops = &local_ops;
    be->no_sync = no_sync;
    be->buffered = buffered;
    *out = &be->base;
    return CPR_OK;
}
