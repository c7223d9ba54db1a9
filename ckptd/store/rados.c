/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store in Ceph RADOS: connection, segment backend and catalog object
 * (rados.h has the layout and invariants R1-R4). Writes and reads use
 * librados' asynchronous API with several operations in flight.
 */
#define _GNU_SOURCE
#include "rados.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <rados/librados.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "cpr_json.h"

#define CHUNK_BYTES ((size_t)CPRI_RADOS_CHUNK_BYTES) /* bytes of a segment per object */
#define WRITE_DEPTH 2                 /* chunk writes in flight per writer */
#define WRITES_IN_FLIGHT 4            /* ... and per backend, all writers together (R10) */
#define SPARE_CHUNKS 16               /* chunk buffers kept between writers (R10) */
#define SPARE_MIN_BYTES ((size_t)256 << 10) /* a buffer growing past this takes a spare */
#define READ_DEPTH_MAX 64
#define CATALOG_OBJECT "cpr.catalog"
#define SIZE_XATTR "cpr.size"
#define LOAD_PAGE 1024                /* catalog keys a read asks for */
#define OP_TIMEOUT_S "60"             /* an OSD or monitor that does not answer */

#define LEASE_S 30                    /* a gateway's lease (R6) */
#define LEASE_MARGIN_S 10             /* R6: counted as lapsed this long before the
                                         lease can have, from a renewal's sending */
#define GATEWAY_LOCK "cpr.gateway"
#define JOB_LOCK "cpr.job"

struct cpri_rados {
    rados_t cluster;
    rados_ioctx_t io;
    char where[256];
    char identity[320];
    char pool[256];
    /* R6: the gateway's lease, renewed by `renewer` until `stop` */
    uint32_t gw_id;
    char gw_object[32], gw_cookie[32], gw_desc[512];
    pthread_t renewer;
    int renewing;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    atomic_int lease_lost;
    _Atomic double lease_until;  /* R6: cpri_now_s() past which it may have lapsed */
    uint32_t *jobs;              /* jobs this gateway held (R9), released at close */
    size_t n_jobs, cap_jobs;
};

/* ---- connection ------------------------------------------------------------------ */

static cpr_status rados_err(int rc, const char *fmt_what, const char *obj)
{
    int e = rc < 0 ? -rc : rc;
    cpr_status st = e == ENOENT                 ? CPR_NOT_FOUND
                    : e == ETIMEDOUT            ? CPR_UNAVAILABLE
                    : e == ENOSPC || e == EDQUOT ? CPR_RESOURCE_EXHAUSTED
                    : e == ENOMEM               ? CPR_NO_MEMORY
                    : e == EPERM || e == EACCES ? CPR_PERMISSION_DENIED
                                                : CPR_IO;
    if (st == CPR_PERMISSION_DENIED) /* cephx: the user's caps (deploy/ceph/README.md) */
        return cpr_fail(st, "RADOS: %s %s: %s (the cephx user lacks the right: its osd caps "
                        "on the pool, r to read, w to write, x for the leases' locks)",
                        fmt_what, obj ? obj : "", strerror(e));
    return cpr_fail(st, "RADOS: %s %s: %s", fmt_what, obj ? obj : "", strerror(e));
}

cpr_status cpri_rados_connect(const cpri_rados_target *t, cpri_rados **out)
{
    cpri_rados *r = calloc(1, sizeof *r);
    if (!r)
        return cpr_fail(CPR_NO_MEMORY, "out of memory connecting to RADOS");
    if (!t->pool || !*t->pool) {
        free(r);
        return cpr_fail(CPR_INVALID_ARGUMENT, "RADOS: no pool given (--rados-pool)");
    }
    snprintf(r->where, sizeof r->where, "%s%s%s", t->pool, t->ns && *t->ns ? "/" : "",
             t->ns ? t->ns : "");
    int rc = rados_create(&r->cluster, t->user && *t->user ? t->user : NULL);
    if (rc < 0) {
        free(r);
        return rados_err(rc, "cannot create a cluster handle", NULL);
    }
    cpr_status st = CPR_OK;
    rc = rados_conf_read_file(r->cluster, t->conf);
    if (rc < 0) {
        st = cpr_fail(CPR_INVALID_ARGUMENT, "RADOS: cannot read the configuration %s: %s",
                      t->conf ? t->conf : "(default search path)", strerror(-rc));
        goto fail;
    }
    /* Bounded waits: a cluster that does not answer is an error, not a hang. */
    rados_conf_set(r->cluster, "client_mount_timeout", "30");
    rados_conf_set(r->cluster, "rados_mon_op_timeout", OP_TIMEOUT_S);
    rados_conf_set(r->cluster, "rados_osd_op_timeout", OP_TIMEOUT_S);
    rc = rados_connect(r->cluster);
    char user[160], mon[512] = "", auth[128] = "";
    snprintf(user, sizeof user, "client.%s", t->user && *t->user ? t->user : "admin");
    if (rc == -ENOENT || rc == -EACCES || rc == -EPERM) {
        rados_conf_get(r->cluster, "mon_host", mon, sizeof mon);
        rados_conf_get(r->cluster, "auth_client_required", auth, sizeof auth);
    }
    if (rc == -ENOENT && !mon[0]) {
        st = cpr_fail(CPR_INVALID_ARGUMENT, "RADOS: %s names no monitor: give the cluster's "
                      "configuration (--rados-conf FILE with mon host = ...)",
                      t->conf ? t->conf : "the default configuration (none found?)");
        goto fail_shutdown;
    }
    if (rc == -ENOENT && strstr(auth, "cephx")) { /* no key for the user */
        st = cpr_fail(CPR_UNAUTHENTICATED,
                      "RADOS: no key for %s: no keyring that %s names (its keyring "
                      "setting; by default /etc/ceph/$cluster.$name.keyring) holds it, or "
                      "this process cannot read it; give that user's keyring "
                      "(deploy/ceph/README.md) or name another user",
                      user, t->conf ? t->conf : "the default configuration");
        goto fail_shutdown;
    }
    if ((rc == -EACCES || rc == -EPERM) && strstr(auth, "cephx")) {
        st = cpr_fail(CPR_UNAUTHENTICATED,
                      "RADOS: the cluster refused %s: %s (does the cluster know the user with "
                      "the key of its keyring, and may it read the monitors, mon 'allow r'? "
                      "ceph auth get %s)",
                      user, strerror(-rc), user);
        goto fail_shutdown;
    }
    if (rc < 0) {
        st = cpr_fail(rc == -ETIMEDOUT ? CPR_UNAVAILABLE : CPR_IO,
                      "RADOS: cannot connect with %s: %s (is the cluster up, and the "
                      "configuration's mon host right?)",
                      t->conf ? t->conf : "the default configuration", strerror(-rc));
        goto fail_shutdown;
    }
    rc = rados_ioctx_create(r->cluster, t->pool, &r->io);
    if (rc < 0) {
        st = rc == -ENOENT ? cpr_fail(CPR_NOT_FOUND,
                                      "RADOS: pool \"%s\" does not exist: create it "
                                      "(ceph osd pool create %s) or name another",
                                      t->pool, t->pool)
                           : rados_err(rc, "cannot open pool", t->pool);
        goto fail_shutdown;
    }
    if (t->ns && *t->ns)
        rados_ioctx_set_namespace(r->io, t->ns);
    char fsid[64] = "";
    if (rados_cluster_fsid(r->cluster, fsid, sizeof fsid) < 0)
        fsid[0] = '\0';
    snprintf(r->identity, sizeof r->identity, "rados:%s/%s/%s", fsid, t->pool,
             t->ns ? t->ns : "");
    snprintf(r->pool, sizeof r->pool, "%s", t->pool);
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca; /* the renewer's waits: on the clock of cpri_now_s */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = r;
    return CPR_OK;
fail:
fail_shutdown:
    rados_shutdown(r->cluster);
    free(r);
    return st;
}

void cpri_rados_close(cpri_rados *r)
{
    if (!r)
        return;
    if (r->renewing) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->renewer, NULL);
        /* Closed cleanly: others may sweep this gateway's leftovers and hold
         * its jobs now (R7, R9). */
        for (size_t i = 0; i < r->n_jobs; i++) {
            char object[32], cookie[32];
            snprintf(object, sizeof object, "cpr.job.%08x", r->jobs[i]);
            snprintf(cookie, sizeof cookie, "gw-%08x", r->gw_id);
            rados_unlock(r->io, object, JOB_LOCK, cookie);
        }
        rados_unlock(r->io, r->gw_object, GATEWAY_LOCK, r->gw_cookie);
    }
    free(r->jobs);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    rados_ioctx_destroy(r->io);
    rados_shutdown(r->cluster);
    free(r);
}

const char *cpri_rados_identity(const cpri_rados *r)
{
    return r->identity;
}

const char *cpri_rados_where(const cpri_rados *r)
{
    return r->where;
}

/* ---- segments ---------------------------------------------------------------------- */

/* A read buffer: this header, then the bytes (R11). The header is the
 * malloc'd pointer, so a caller may free() a delivered owner. */
typedef struct read_buf {
    struct read_buf *next;   /* in the spares */
    size_t cap;              /* bytes after the header */
    max_align_t align[];
} read_buf;

typedef struct rados_backend {
    cpri_backend base;
    cpri_rados *r;
    pthread_mutex_t mu;          /* guards the fields below */
    pthread_cond_t room;         /* a chunk write completed */
    unsigned in_flight;          /* chunk writes submitted and not completed (R10) */
    unsigned char *spare[SPARE_CHUNKS]; /* idle CHUNK_BYTES buffers (R10) */
    size_t n_spare;
    /* Reads (R11), under mu: */
    uint64_t read_bytes;         /* of reads issued and not yet delivered */
    unsigned readers;            /* open readers */
    unsigned readers_peak;       /* the most readers open at once */
    uint64_t read_peak;          /* the most read_bytes has been */
    read_buf *read_spare;        /* released read buffers, kept while readers are open */
    uint64_t read_spare_bytes;
    uint64_t read_reused;        /* reads into a kept buffer */
} rados_backend;

/* An idle chunk buffer, already faulted in, or NULL. */
static unsigned char *spare_take(rados_backend *be)
{
    pthread_mutex_lock(&be->mu);
    unsigned char *b = be->n_spare ? be->spare[--be->n_spare] : NULL;
    pthread_mutex_unlock(&be->mu);
    return b;
}

/* Under be->mu: keep buf among the spares if it is a whole chunk and there
 * is room; returns what the caller must free (NULL if kept). */
static unsigned char *spare_keep_locked(rados_backend *be, unsigned char *buf, size_t cap)
{
    if (buf && cap == CHUNK_BYTES && be->n_spare < SPARE_CHUNKS) {
        be->spare[be->n_spare++] = buf;
        return NULL;
    }
    return buf;
}

/* Keep a writer's buffer for the next writer, or free it. */
static void spare_give(rados_backend *be, unsigned char *buf, size_t cap)
{
    pthread_mutex_lock(&be->mu);
    buf = spare_keep_locked(be, buf, cap);
    pthread_mutex_unlock(&be->mu);
    free(buf);
}

static void chunk_name(char *out, size_t cap, const char *object, uint64_t i)
{
    snprintf(out, cap, "%s@%" PRIu64, object, i);
}

/* One chunk write of a writer. buf belongs to the write while it is in
 * flight and goes back to the backend when it completes (R10). */
typedef struct chunk_write {
    rados_backend *be;
    rados_completion_t c;  /* NULL: idle */
    unsigned char *buf;
    size_t cap;
    uint64_t index;
} chunk_write;

/* librados' completion callback (its finisher thread): the write's buffer
 * is idle now, and one more write may start (R10). */
static void chunk_written(rados_completion_t c, void *arg)
{
    chunk_write *s = arg;
    rados_backend *be = s->be;
    (void)c;
    pthread_mutex_lock(&be->mu);
    unsigned char *drop = spare_keep_locked(be, s->buf, s->cap);
    be->in_flight--;
    pthread_cond_broadcast(&be->room);
    pthread_mutex_unlock(&be->mu);
    free(drop);
    s->buf = NULL;
    s->cap = 0;
}

/* Buffers grow to a chunk as data comes, so that a small object (a blob of
 * a few kilobytes) holds kilobytes, not a chunk. */
struct cpri_obj_writer {
    rados_backend *be;
    char *object;
    unsigned char *cur;    /* the chunk being filled */
    size_t cur_len, cur_cap;
    uint64_t next_chunk;   /* index of the chunk being filled */
    uint64_t written;
    chunk_write inflight[WRITE_DEPTH];
    cpr_status failed;     /* a write that failed: sticky */
};

/* Wait for slot `s` to be idle; a failure is kept in w->failed. */
static void wait_slot(cpri_obj_writer *w, chunk_write *s)
{
    if (!s->c)
        return;
    rados_aio_wait_for_complete_and_cb(s->c); /* chunk_written has run (R10) */
    int rc = rados_aio_get_return_value(s->c);
    rados_aio_release(s->c);
    s->c = NULL;
    if (rc < 0 && w->failed == CPR_OK) {
        char name[512];
        chunk_name(name, sizeof name, w->object, s->index);
        w->failed = rados_err(rc, "writing", name);
    }
}

/* Send the current chunk (cur_len bytes) as object <object>@<next_chunk>. */
static cpr_status send_chunk(cpri_obj_writer *w)
{
    chunk_write *s = &w->inflight[w->next_chunk % WRITE_DEPTH];
    wait_slot(w, s); /* the chunk written WRITE_DEPTH ago */
    if (w->failed)
        return w->failed;
    char name[512];
    chunk_name(name, sizeof name, w->object, w->next_chunk);
    rados_backend *be = w->be;
    s->be = be;
    s->buf = w->cur; /* the write's until it completes */
    s->cap = w->cur_cap;
    s->index = w->next_chunk;
    pthread_mutex_lock(&be->mu); /* R10: wait for room among all writers' writes */
    while (be->in_flight >= WRITES_IN_FLIGHT)
        pthread_cond_wait(&be->room, &be->mu);
    be->in_flight++;
    pthread_mutex_unlock(&be->mu);
    int rc = rados_aio_create_completion2(s, chunk_written, &s->c);
    if (rc == 0)
        rc = rados_aio_write_full(be->r->io, name, s->c, s->buf ? (const char *)s->buf : "",
                                  w->cur_len);
    if (rc < 0) {
        if (s->c)
            rados_aio_release(s->c);
        s->c = NULL;
        w->cur = s->buf; /* still the writer's: discard frees it */
        s->buf = NULL;
        s->cap = 0;
        chunk_written(NULL, s); /* never submitted: no callback comes */
        return w->failed = rados_err(rc, "writing", name);
    }
    w->cur = NULL; /* the next chunk's buffer: a spare, or grown as data comes */
    w->cur_cap = 0;
    w->cur_len = 0;
    w->next_chunk++;
    return CPR_OK;
}

static void writer_free(cpri_obj_writer *w)
{
    for (size_t i = 0; i < WRITE_DEPTH; i++)
        wait_slot(w, &w->inflight[i]); /* their buffers are back (R10) */
    spare_give(w->be, w->cur, w->cur_cap);
    free(w->object);
    free(w);
}

static cpr_status rados_remove_object(cpri_backend *base, const char *object);

static cpr_status rb_create(cpri_backend *base, const char *object, cpri_obj_writer **out)
{
    rados_backend *be = (rados_backend *)base;
    /* No leftover of this name can exist (R4): nothing to remove first,
     * which would cost four round trips a part. */
    cpri_obj_writer *w = calloc(1, sizeof *w);
    if (w)
        w->object = strdup(object);
    if (!w || !w->object) {
        if (w)
            free(w->object);
        free(w);
        return cpr_fail(CPR_NO_MEMORY, "out of memory creating segment %s", object);
    }
    w->be = be;
    *out = w;
    return CPR_OK;
}

static cpr_status rb_append(cpri_obj_writer *w, const void *data, size_t len)
{
    const unsigned char *p = data;
    while (len) {
        if (w->failed)
            return w->failed;
        size_t take = CHUNK_BYTES - w->cur_len < len ? CHUNK_BYTES - w->cur_len : len;
        if (w->cur_len + take > w->cur_cap) {
            size_t cap = w->cur_cap ? w->cur_cap : 64 << 10;
            while (cap < w->cur_len + take)
                cap *= 2;
            cap = cap < CHUNK_BYTES ? cap : CHUNK_BYTES;
            /* a segment past its first chunk, or this chunk past SPARE_MIN_BYTES */
            int big = w->next_chunk > 0 || cap > SPARE_MIN_BYTES;
            unsigned char *g = big ? spare_take(w->be) : NULL;
            if (g) { /* a whole chunk, faulted in by an earlier writer */
                if (w->cur_len)
                    memcpy(g, w->cur, w->cur_len);
                free(w->cur);
                cap = CHUNK_BYTES;
            } else {
                g = realloc(w->cur, cap);
            }
            if (!g)
                return w->failed = cpr_fail(CPR_NO_MEMORY, "out of memory writing %s",
                                            w->object);
            w->cur = g;
            w->cur_cap = cap;
        }
        memcpy(w->cur + w->cur_len, p, take);
        w->cur_len += take;
        w->written += take;
        p += take;
        len -= take;
        if (w->cur_len == CHUNK_BYTES) {
            cpr_status st = send_chunk(w);
            if (st)
                return st;
        }
    }
    return w->failed;
}

static uint64_t rb_written(const cpri_obj_writer *w)
{
    return w->written;
}

static cpr_status rb_finish(cpri_obj_writer *w, uint64_t *size)
{
    cpr_status st = CPR_OK;
    /* The last, partial chunk (or an empty chunk 0 for an empty segment). */
    if (w->cur_len || w->next_chunk == 0)
        st = send_chunk(w);
    for (size_t i = 0; i < WRITE_DEPTH; i++)
        wait_slot(w, &w->inflight[i]); /* R2: every chunk acknowledged */
    if (st == CPR_OK)
        st = w->failed;
    if (st == CPR_OK) {
        char name[512], val[32];
        chunk_name(name, sizeof name, w->object, 0);
        int n = snprintf(val, sizeof val, "%" PRIu64, w->written);
        /* R6: asserted to exist, not created: another gateway that saw this
         * one's lease lapse may have swept the chunks meanwhile (R7). */
        rados_write_op_t op = rados_create_write_op();
        int rc = -ENOMEM;
        if (op) {
            rados_write_op_assert_exists(op);
            rados_write_op_setxattr(op, SIZE_XATTR, val, (size_t)n);
            rc = rados_write_op_operate(op, w->be->r->io, name, NULL, 0);
            rados_release_write_op(op);
        }
        if (rc < 0)
            st = rados_err(rc, "finishing", name);
    }
    if (st == CPR_OK && size)
        *size = w->written;
    if (st != CPR_OK) {
        char *object = w->object;
        rados_backend *be = w->be;
        w->object = NULL;
        writer_free(w);
        cpr_status keep = st;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", cpr_errmsg());
        rados_remove_object(&be->base, object); /* best effort */
        free(object);
        return cpr_fail(keep, "%s", msg);
    }
    writer_free(w);
    return CPR_OK;
}

static void rb_discard(cpri_obj_writer *w)
{
    if (!w)
        return;
    rados_backend *be = w->be;
    char *object = w->object;
    w->object = NULL;
    writer_free(w);
    rados_remove_object(&be->base, object);
    free(object);
}

/* *chunks of a finished segment (0: no cpr.size, or missing); a failure
 * to tell (the cluster's, not the object's absence) is returned. */
static cpr_status finished_chunks(rados_backend *be, const char *object, uint64_t *chunks)
{
    char name[512], val[32];
    chunk_name(name, sizeof name, object, 0);
    int n = rados_getxattr(be->r->io, name, SIZE_XATTR, val, sizeof val - 1);
    *chunks = 0;
    if (n == -ENOENT || n == -ENODATA || n == 0)
        return CPR_OK;
    if (n < 0)
        return rados_err(n, "reading the size of", name);
    val[n] = 0;
    uint64_t bytes = strtoull(val, NULL, 10);
    *chunks = bytes ? (bytes + CHUNK_BYTES - 1) / CHUNK_BYTES : 1;
    return CPR_OK;
}

/* A finished segment's size: its cpr.size (R2: set once every chunk is
 * acknowledged). */
static cpr_status rb_size(cpri_backend *base, const char *object, uint64_t *size)
{
    rados_backend *be = (rados_backend *)base;
    char name[512], val[32];
    chunk_name(name, sizeof name, object, 0);
    int n = rados_getxattr(be->r->io, name, SIZE_XATTR, val, sizeof val - 1);
    if (n == -ENOENT || n == -ENODATA || n == 0)
        return cpr_fail(CPR_NOT_FOUND, "segment %s is not in the pool, or was never finished",
                        object);
    if (n < 0)
        return rados_err(n, "reading the size of", name);
    val[n] = 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (errno || end == val || *end)
        return cpr_fail(CPR_CORRUPT, "segment %s has a malformed size \"%s\"", object, val);
    *size = v;
    return CPR_OK;
}

static cpr_status rados_remove_object(cpri_backend *base, const char *object)
{
    rados_backend *be = (rados_backend *)base;
    char name[512];
    uint64_t n = 0;
    cpr_status st = finished_chunks(be, object, &n);
    if (st)
        return st; /* removing nothing is better than removing a prefix */
    if (n == 0) { /* unfinished or absent (R4): probe */
        unsigned misses = 0;
        for (uint64_t i = 0; misses <= WRITE_DEPTH; i++) {
            chunk_name(name, sizeof name, object, i);
            uint64_t psize;
            time_t pmtime;
            int rc = rados_stat(be->r->io, name, &psize, &pmtime);
            if (rc == 0) {
                n = i + 1;
                misses = 0;
            } else if (rc == -ENOENT) {
                misses++;
            } else {
                return rados_err(rc, "looking for the objects of", name);
            }
        }
    }
    for (uint64_t i = n; i-- > 0;) { /* R3: chunk 0 last */
        chunk_name(name, sizeof name, object, i);
        int rc = rados_remove(be->r->io, name);
        if (rc < 0 && rc != -ENOENT)
            return rados_err(rc, "removing", name);
    }
    return CPR_OK;
}

static cpr_status rb_remove(cpri_backend *base, const char *object)
{
    return rados_remove_object(base, object);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every segment with at least one chunk, each named once. */
static cpr_status rb_list(cpri_backend *base, cpri_obj_list_fn fn, void *ctx)
{
    rados_backend *be = (rados_backend *)base;
    rados_list_ctx_t lc;
    int rc = rados_nobjects_list_open(be->r->io, &lc);
    if (rc < 0)
        return rados_err(rc, "listing", cpri_rados_where(be->r));
    char **names = NULL;
    size_t n = 0, cap = 0;
    cpr_status st = CPR_OK;
    const char *entry, *key, *nspace;
    while ((rc = rados_nobjects_list_next(lc, &entry, &key, &nspace)) == 0) {
        const char *at = strrchr(entry, '@');
        if (!at || !strchr(entry, '/'))
            continue; /* the catalog, probes */
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            char **g = realloc(names, nc * sizeof *g);
            if (!g) {
                st = cpr_fail(CPR_NO_MEMORY, "out of memory listing segments");
                break;
            }
            names = g;
            cap = nc;
        }
        names[n] = strndup(entry, (size_t)(at - entry));
        if (!names[n]) {
            st = cpr_fail(CPR_NO_MEMORY, "out of memory listing segments");
            break;
        }
        n++;
    }
    if (st == CPR_OK && rc != -ENOENT)
        st = rados_err(rc, "listing", cpri_rados_where(be->r));
    rados_nobjects_list_close(lc);
    if (st == CPR_OK) {
        if (n)
            qsort(names, n, sizeof *names, cmp_str);
        for (size_t i = 0; i < n; i++)
            if ((i == 0 || strcmp(names[i], names[i - 1]) != 0) && fn(ctx, names[i]))
                break;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}

static const cpri_backend_ops rados_ops;

/* ---- reads (R11) ------------------------------------------------------------------- */

#define READ_BUF_ROUND ((size_t)64 << 10) /* sizes rounded up, so blocks share buffers */
#define READ_BUF_SMALL ((size_t)4 << 10)  /* ... and reads below 64 KiB to this */
#define READ_OWN_MIN 2                    /* reads a reader may have out over the budget */
#define READ_BUDGET (rados_ops.read_ahead_bytes)

/* A buffer of at least len bytes: a released one that fits, or a new one. */
static read_buf *read_buf_take(rados_backend *be, size_t len)
{
    if (len > SIZE_MAX / 2)
        return NULL;
    size_t round = len < READ_BUF_ROUND ? READ_BUF_SMALL : READ_BUF_ROUND;
    size_t cap = (len + round - 1) / round * round;
    pthread_mutex_lock(&be->mu);
    read_buf **pp = &be->read_spare, *b = NULL, *evict = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= cap && (*pp)->cap - cap <= (*pp)->cap / 4) {
            b = *pp;
            *pp = b->next;
            be->read_spare_bytes -= b->cap;
            be->read_reused++;
            break;
        }
    if (!b && be->read_spare) { /* none fits: the oldest spare makes room */
        for (pp = &be->read_spare; (*pp)->next; pp = &(*pp)->next)
            ;
        evict = *pp;
        *pp = NULL;
        be->read_spare_bytes -= evict->cap;
    }
    pthread_mutex_unlock(&be->mu);
    free(evict);
    if (!b && (b = malloc(sizeof *b + cap)) != NULL)
        b->cap = cap;
    return b;
}

/* Keep a released buffer for the next read while readers are open and the
 * spares stay within the budget; free it otherwise. */
static void read_buf_give(rados_backend *be, read_buf *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&be->mu);
    if (be->readers && be->read_spare_bytes + b->cap <= READ_BUDGET) {
        b->next = be->read_spare;
        be->read_spare = b;
        be->read_spare_bytes += b->cap;
        b = NULL;
    }
    pthread_mutex_unlock(&be->mu);
    free(b);
}

/* One extent: its buffer and the chunk reads that fill it. */
typedef struct extent_read {
    read_buf *buf;
    size_t n_pieces;
    rados_completion_t *c;
    size_t *want;          /* bytes each piece must return */
    int issued;
} extent_read;

struct cpri_obj_reader {
    rados_backend *be;
    const cpri_obj_extent *ext;
    extent_read *er;
    size_t n, issued, delivered, window;
    uint64_t budget_bytes; /* of this reader's reads counted in be->read_bytes */
    cpr_status failed;     /* the first failure: every later read returns it */
    char why[512];         /* ... and its message */
};

static void extent_wait(extent_read *e)
{
    for (size_t i = 0; i < e->n_pieces; i++)
        if (e->c[i]) {
            rados_aio_wait_for_complete(e->c[i]);
        }
}

static void extent_release(extent_read *e)
{
    extent_wait(e);
    for (size_t i = 0; i < e->n_pieces; i++)
        if (e->c[i])
            rados_aio_release(e->c[i]);
    free(e->c);
    free(e->want);
    e->c = NULL;
    e->want = NULL;
    e->n_pieces = 0;
}

/* May reader r issue extent k? Its first READ_OWN_MIN reads ahead always
 * (so every reader makes progress), more while all readers' reads in flight
 * stay within the budget and its own within its share of it (so a reader
 * whose consumer stalls holds no more than its share). Counts what it lets
 * through. */
static int read_admit(cpri_obj_reader *r, size_t k)
{
    rados_backend *be = r->be;
    size_t len = r->ext[k].len;
    int ok;
    pthread_mutex_lock(&be->mu);
    ok = k < r->delivered + READ_OWN_MIN ||
         (be->read_bytes + len <= READ_BUDGET &&
          r->budget_bytes + len <= READ_BUDGET / (be->readers ? be->readers : 1));
    if (ok) {
        be->read_bytes += len;
        r->budget_bytes += len;
        if (be->read_bytes > be->read_peak)
            be->read_peak = be->read_bytes;
    }
    pthread_mutex_unlock(&be->mu);
    return ok;
}

static void read_settle(cpri_obj_reader *r, size_t len)
{
    pthread_mutex_lock(&r->be->mu);
    r->be->read_bytes -= len;
    r->budget_bytes -= len;
    pthread_mutex_unlock(&r->be->mu);
}

static cpr_status issue(cpri_obj_reader *r, size_t k)
{
    const cpri_obj_extent *x = &r->ext[k];
    extent_read *e = &r->er[k];
    uint64_t first = x->offset / CHUNK_BYTES;
    uint64_t last = x->len ? (x->offset + x->len - 1) / CHUNK_BYTES : first;
    size_t pieces = x->len ? (size_t)(last - first + 1) : 0;
    e->issued = 1;
    e->buf = read_buf_take(r->be, x->len);
    e->c = calloc(pieces ? pieces : 1, sizeof *e->c);
    e->want = calloc(pieces ? pieces : 1, sizeof *e->want);
    if (!e->buf || !e->c || !e->want)
        return cpr_fail(CPR_NO_MEMORY, "out of memory reading %s", x->object);
    e->n_pieces = pieces;
    char *dst = (char *)(e->buf + 1);
    size_t pos = 0;
    for (size_t i = 0; i < e->n_pieces; i++) {
        uint64_t chunk = first + i;
        uint64_t off = i == 0 ? x->offset % CHUNK_BYTES : 0;
        size_t take = CHUNK_BYTES - off < x->len - pos ? CHUNK_BYTES - off : x->len - pos;
        char name[512];
        chunk_name(name, sizeof name, x->object, chunk);
        e->want[i] = take;
        int rc = rados_aio_create_completion2(NULL, NULL, &e->c[i]);
        if (rc == 0)
            rc = rados_aio_read(r->be->r->io, name, e->c[i], dst + pos, take, off);
        if (rc < 0) {
            if (e->c[i])
                rados_aio_release(e->c[i]);
            e->c[i] = NULL;
            return rados_err(rc, "reading", name);
        }
        pos += take;
    }
    return CPR_OK;
}

static void reader_free(cpri_obj_reader *r)
{
    for (size_t k = 0; k < r->n; k++)
        if (r->er[k].issued) {
            extent_release(&r->er[k]);
            if (k >= r->delivered)
                read_buf_give(r->be, r->er[k].buf); /* never handed out */
        }
    pthread_mutex_lock(&r->be->mu);
    r->be->read_bytes -= r->budget_bytes;
    read_buf *spares = NULL;
    if (--r->be->readers == 0) { /* the last reader: nothing to keep buffers for */
        spares = r->be->read_spare;
        r->be->read_spare = NULL;
        r->be->read_spare_bytes = 0;
    }
    pthread_mutex_unlock(&r->be->mu);
    while (spares) {
        read_buf *b = spares;
        spares = b->next;
        free(b);
    }
    free(r->er);
    free(r);
}

static cpr_status rb_read_start(cpri_backend *base, const cpri_obj_extent *ext, size_t n,
                                unsigned depth, cpri_obj_reader **out)
{
    cpri_obj_reader *r = calloc(1, sizeof *r);
    if (r)
        r->er = calloc(n ? n : 1, sizeof *r->er);
    if (!r || !r->er) {
        free(r);
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting a segment read");
    }
    r->be = (rados_backend *)base;
    r->ext = ext;
    r->n = n;
    r->window = depth > READ_DEPTH_MAX ? READ_DEPTH_MAX : depth ? depth : 1;
    pthread_mutex_lock(&r->be->mu);
    if (++r->be->readers > r->be->readers_peak)
        r->be->readers_peak = r->be->readers;
    pthread_mutex_unlock(&r->be->mu);
    *out = r;
    return CPR_OK;
}

/* The next extent's read, checked; a failure leaves the reader's state
 * mid-way (rb_read_next makes it sticky). */
static cpr_status read_next(cpri_obj_reader *r)
{
    while (r->issued < r->n && r->issued < r->delivered + r->window &&
           read_admit(r, r->issued)) {
        cpr_status st = issue(r, r->issued);
        r->issued++;
        if (st)
            return st;
    }
    size_t k = r->delivered;
    extent_read *e = &r->er[k];
    extent_wait(e);
    for (size_t i = 0; i < e->n_pieces; i++) {
        int rc = rados_aio_get_return_value(e->c[i]);
        char name[512];
        chunk_name(name, sizeof name, r->ext[k].object,
                   r->ext[k].offset / CHUNK_BYTES + i);
        if (rc == -ENOENT)
            return cpr_fail(CPR_CORRUPT, "RADOS: segment object %s (pool %s) is missing",
                            name, cpri_rados_where(r->be->r));
        if (rc < 0)
            return rados_err(rc, "reading", name);
        if ((size_t)rc < e->want[i])
            return cpr_fail(CPR_CORRUPT,
                            "RADOS: segment object %s ends before the extent read "
                            "(%d of %zu bytes)", name, rc, e->want[i]);
    }
    return CPR_OK;
}

static cpr_status rb_read_next(cpri_obj_reader *r, void **owner, const unsigned char **data)
{
    if (r->failed) /* an extent half-issued or unchecked: never delivered */
        return cpr_fail(r->failed, "%s", r->why);
    if (r->delivered >= r->n)
        return cpr_fail(CPR_INTERNAL, "segment read past its %zu extents", r->n);
    cpr_status st = read_next(r);
    if (st) {
        r->failed = st;
        snprintf(r->why, sizeof r->why, "%s", cpr_errmsg());
        return st;
    }
    size_t k = r->delivered;
    extent_read *e = &r->er[k];
    extent_release(e);
    read_settle(r, r->ext[k].len);
    *owner = e->buf;
    *data = (const unsigned char *)(e->buf + 1);
    r->delivered++;
    return CPR_OK;
}

static void rb_read_release(cpri_obj_reader *r, void *owner)
{
    read_buf_give(r->be, owner);
}

static void rb_read_end(cpri_obj_reader *r)
{
    if (r)
        reader_free(r);
}

void cpri_backend_rados_read_stats(cpri_backend *base, cpri_rados_read_stats *out)
{
    rados_backend *be = (rados_backend *)base;
    pthread_mutex_lock(&be->mu);
    *out = (cpri_rados_read_stats){be->read_bytes, be->read_peak, READ_BUDGET,
                                   be->read_spare_bytes, be->read_reused, be->readers,
                                   be->readers_peak};
    pthread_mutex_unlock(&be->mu);
}

static void rb_close(cpri_backend *base)
{
    rados_backend *be = (rados_backend *)base;
    while (be->n_spare)
        free(be->spare[--be->n_spare]);
    pthread_cond_destroy(&be->room);
    pthread_mutex_destroy(&be->mu);
    free(be);
}

static const cpri_backend_ops rados_ops = {
    .name = "rados",
    /* All readers of a backend together (R11): 32 MiB, what rados bench
     * keeps in flight (8 reads of 4 MiB), each reader its share and its next
     * two. A lone restore keeps about 30 blocks of 1 MiB out: 8 left it
     * 10-15% slower on the test cluster (docs/performance.md, 2026-11-28). */
    .read_ahead_bytes = (uint64_t)32 << 20,
    .read_depth = 32,
    .shares_read_ahead = 1,
    .create = rb_create,
    .append = rb_append,
    .written = rb_written,
    .finish = rb_finish,
    .discard = rb_discard,
    .read_start = rb_read_start,
    .read_next = rb_read_next,
    .read_release = rb_read_release,
    .read_end = rb_read_end,
    .size = rb_size,
    .remove = rb_remove,
    .list = rb_list,
    .close = rb_close,
};

cpr_status cpri_backend_rados_open(cpri_rados *r, cpri_backend **out)
{
    rados_backend *be = calloc(1, sizeof *be);
    if (!be)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening the RADOS backend");
    be->base.ops = &rados_ops;
    be->r = r;
    pthread_mutex_init(&be->mu, NULL);
    pthread_cond_init(&be->room, NULL);
    *out = &be->base;
    return CPR_OK;
}

/* ---- the catalog object -------------------------------------------------------- */

static const char HEX[] = "0123456789abcdef";

/* hex(key), NUL-terminated: omap keys as C strings, in the same order. */
static char *hex_key(const void *key, size_t len)
{
    const unsigned char *k = key;
    char *out = malloc(2 * len + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = HEX[k[i] >> 4];
        out[2 * i + 1] = HEX[k[i] & 15];
    }
    out[2 * len] = 0;
    return out;
}

static int unhex(const char *s, size_t len, unsigned char *out)
{
    if (len % 2)
        return -1;
    for (size_t i = 0; i < len / 2; i++) {
        const char *hi = strchr(HEX, s[2 * i]), *lo = strchr(HEX, s[2 * i + 1]);
        if (!hi || !lo || !s[2 * i] || !s[2 * i + 1])
            return -1;
        out[i] = (unsigned char)(((hi - HEX) << 4) | (lo - HEX));
    }
    return 0;
}

cpr_status cpri_rados_catalog_apply(cpri_rados *r, const cpri_kv_change *changes, size_t n,
                                   const char *what)
{
    return n ? cpri_rados_catalog_apply_if(r, NULL, 0, changes, n, what) : CPR_OK;
}

cpr_status cpri_rados_catalog_apply_if(cpri_rados *r, const cpri_kv_cond *conds, size_t nc,
                                      const cpri_kv_change *changes, size_t n, const char *what)
{
    size_t m = nc + n;
    char **keys = calloc(m ? m : 1, sizeof *keys);
    const char **vals = calloc(n ? n : 1, sizeof *vals);
    size_t *klens = calloc(m ? m : 1, sizeof *klens), *vlens = calloc(n ? n : 1, sizeof *vlens);
    int *prvals = calloc(nc ? nc : 1, sizeof *prvals);
    rados_write_op_t op = rados_create_write_op();
    cpr_status st = CPR_OK;
    if (!keys || !vals || !klens || !vlens || !prvals || !op) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory %s", what);
        goto out;
    }
    for (size_t i = 0; i < m; i++) {
        const void *key = i < nc ? conds[i].key : changes[i - nc].key;
        size_t klen = i < nc ? conds[i].klen : changes[i - nc].klen;
        keys[i] = hex_key(key, klen);
        if (!keys[i]) {
            st = cpr_fail(CPR_NO_MEMORY, "out of memory %s", what);
            goto out;
        }
        klens[i] = 2 * klen;
    }
    for (size_t i = 0; i < n; i++) {
        vals[i] = changes[i].val;
        vlens[i] = changes[i].vlen;
    }
    if (nc) /* an omap compare on no object fails ENOENT: the object first */
        rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, NULL);
    /* A missing key compares equal to the empty value (checked on a cluster). */
    for (size_t i = 0; i < nc; i++)
        rados_write_op_omap_cmp2(op, keys[i], LIBRADOS_CMPXATTR_OP_EQ,
                                 conds[i].vlen ? conds[i].val : "", klens[i], conds[i].vlen,
                                 &prvals[i]);
    /* Runs of puts and of deletes, in the batch's order: sub-operations of
     * one write operation apply in order, all or none. */
    char **ck = keys + nc;
    size_t *ckl = klens + nc;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && changes[j].del == changes[i].del)
            j++;
        if (changes[i].del)
            rados_write_op_omap_rm_keys2(op, (const char *const *)ck + i, ckl + i, j - i);
        else
            rados_write_op_omap_set2(op, (const char *const *)ck + i, vals + i, ckl + i,
                                     vlens + i, j - i);
        i = j;
    }
    int rc = rados_write_op_operate(op, r->io, CATALOG_OBJECT, NULL, 0);
    if (rc == -ECANCELED)
        st = cpr_fail(CPR_FAILED_PRECONDITION, "RADOS: %s: the catalog changed meanwhile", what);
    else if (rc < 0)
        st = cpr_fail(rc == -ETIMEDOUT ? CPR_UNAVAILABLE : CPR_IO,
                      "RADOS: %s (catalog object %s in %s): %s", what, CATALOG_OBJECT,
                      r->where, strerror(-rc));
out:
    if (op)
        rados_release_write_op(op);
    for (size_t i = 0; keys && i < m; i++)
        free(keys[i]);
    free(keys);
    free(vals);
    free(klens);
    free(vlens);
    free(prvals);
    return st;
}

cpr_status cpri_rados_catalog_load(cpri_rados *r, cpri_kv_fn fn, void *ctx)
{
    return cpri_rados_catalog_load_prefix(r, NULL, 0, fn, ctx);
}

cpr_status cpri_rados_catalog_load_prefix(cpri_rados *r, const void *prefix, size_t plen,
                                         cpri_kv_fn fn, void *ctx)
{
    char *hprefix = plen ? hex_key(prefix, plen) : NULL; /* hex keeps byte order */
    if (plen && !hprefix)
        return cpr_fail(CPR_NO_MEMORY, "out of memory loading the catalog");
    char *after = strdup("");
    unsigned char *kbuf = NULL;
    size_t kcap = 0;
    cpr_status st = after ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory loading the catalog");
    unsigned char more = 1;
    int stop = 0;
    while (st == CPR_OK && more && !stop) {
        rados_read_op_t op = rados_create_read_op();
        if (!op) {
            st = cpr_fail(CPR_NO_MEMORY, "out of memory loading the catalog");
            break;
        }
        rados_omap_iter_t it = NULL;
        int prval = 0;
        more = 0;
        rados_read_op_omap_get_vals2(op, after, hprefix, LOAD_PAGE, &it, &more, &prval);
        int rc = rados_read_op_operate(op, r->io, CATALOG_OBJECT, 0);
        if (rc == -ENOENT || rc < 0 || prval < 0) { /* ENOENT: a store never written */
            if (rc != -ENOENT)
                st = cpr_fail(CPR_IO, "RADOS: reading the catalog object %s in %s: %s",
                              CATALOG_OBJECT, r->where, strerror(rc < 0 ? -rc : -prval));
            if (it)
                rados_omap_get_end(it); /* allocated with the operation, whatever it did */
            rados_release_read_op(op);
            break;
        }
        for (;;) {
            char *key, *val;
            size_t klen, vlen;
            if (rados_omap_get_next2(it, &key, &val, &klen, &vlen) < 0 || !key)
                break;
            if (klen / 2 > kcap) {
                unsigned char *g = realloc(kbuf, klen / 2);
                if (!g) {
                    st = cpr_fail(CPR_NO_MEMORY, "out of memory loading the catalog");
                    break;
                }
                kbuf = g;
                kcap = klen / 2;
            }
            if (unhex(key, klen, kbuf) != 0) {
                st = cpr_fail(CPR_CORRUPT, "RADOS: catalog object %s in %s has a key that "
                              "is not hex (%.*s): not written by CPR",
                              CATALOG_OBJECT, r->where, (int)(klen < 64 ? klen : 64), key);
                break;
            }
            char *next = strndup(key, klen);
            if (!next) {
                st = cpr_fail(CPR_NO_MEMORY, "out of memory loading the catalog");
                break;
            }
            free(after);
            after = next;
            if (fn(ctx, kbuf, klen / 2, val, vlen)) {
                stop = 1;
                break;
            }
        }
        if (it)
            rados_omap_get_end(it);
        rados_release_read_op(op);
    }
    free(after);
    free(kbuf);
    free(hprefix);
    return st;
}

#define LOAD_MANY_MAX 4 /* prefixes one cpri_rados_catalog_load_many reads */

/* Hand every record of iterator `it` to fn (keys unhexed into *kbuf). */
/* *stopped: fn asked to stop (cpri_kv_fn). */
static cpr_status deliver_records(cpri_rados *r, rados_omap_iter_t it, unsigned char **kbuf,
                                  size_t *kcap, cpri_kv_fn fn, void *ctx, int *stopped)
{
    for (;;) {
        char *key, *val;
        size_t klen, vlen;
        if (rados_omap_get_next2(it, &key, &val, &klen, &vlen) < 0 || !key)
            return CPR_OK;
        if (klen / 2 > *kcap) {
            unsigned char *g = realloc(*kbuf, klen / 2);
            if (!g)
                return cpr_fail(CPR_NO_MEMORY, "out of memory loading the catalog");
            *kbuf = g;
            *kcap = klen / 2;
        }
        if (unhex(key, klen, *kbuf) != 0)
            return cpr_fail(CPR_CORRUPT, "RADOS: catalog object %s in %s has a key that is not "
                            "hex (%.*s): not written by CPR", CATALOG_OBJECT, r->where,
                            (int)(klen < 64 ? klen : 64), key);
        if (fn(ctx, *kbuf, klen / 2, val, vlen)) {
            *stopped = 1;
            return CPR_OK;
        }
    }
}

cpr_status cpri_rados_catalog_load_many(cpri_rados *r, const void *key, size_t klen, char **val,
                                       size_t *vlen, const unsigned char *prefixes, size_t n,
                                       size_t plen, cpri_kv_fn fn, void *ctx, int *complete)
{
    char *hk = hex_key(key, klen), *hp[LOAD_MANY_MAX] = {0};
    size_t hklen = 2 * klen;
    rados_omap_iter_t kit = NULL, it[LOAD_MANY_MAX] = {0};
    unsigned char more[LOAD_MANY_MAX] = {0};
    int kprval = 0, prval[LOAD_MANY_MAX] = {0};
    unsigned char *kbuf = NULL;
    size_t kcap = 0;
    *val = NULL;
    *vlen = 0;
    *complete = 0;
    if (n > LOAD_MANY_MAX)
        BUG("cpri_rados_catalog_load_many: more prefixes than LOAD_MANY_MAX");
    cpr_status st = hk ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory reading the catalog");
    for (size_t i = 0; st == CPR_OK && i < n; i++)
        if (!(hp[i] = hex_key(prefixes + i * plen, plen)))
            st = cpr_fail(CPR_NO_MEMORY, "out of memory reading the catalog");
    rados_read_op_t op = st ? NULL : rados_create_read_op();
    if (st == CPR_OK && !op)
        st = cpr_fail(CPR_NO_MEMORY, "out of memory reading the catalog");
    if (op) {
        const char *keys[1] = {hk};
        rados_read_op_omap_get_vals_by_keys2(op, keys, 1, &hklen, &kit, &kprval);
        for (size_t i = 0; i < n; i++)
            rados_read_op_omap_get_vals2(op, "", hp[i], LOAD_PAGE, &it[i], &more[i], &prval[i]);
        int rc = rados_read_op_operate(op, r->io, CATALOG_OBJECT, 0);
        /* ENOENT: no catalog object yet; the sub-operations' values then
         * say EIO (nothing to decode) and mean nothing. */
        int bad = rc < 0 && rc != -ENOENT ? -rc : rc == 0 && kprval < 0 ? -kprval : 0;
        for (size_t i = 0; rc == 0 && !bad && i < n; i++)
            bad = prval[i] < 0 ? -prval[i] : 0;
        if (bad)
            st = cpr_fail(CPR_IO, "RADOS: reading the catalog object %s in %s: %s",
                          CATALOG_OBJECT, r->where, strerror(bad));
        char *k, *v;
        size_t kl, vl;
        if (st == CPR_OK && rc == 0 && kit && rados_omap_get_next2(kit, &k, &v, &kl, &vl) == 0 &&
            k) {
            if (!(*val = malloc(vl ? vl : 1)))
                st = cpr_fail(CPR_NO_MEMORY, "out of memory reading the catalog");
            else {
                memcpy(*val, v, vl);
                *vlen = vl;
            }
        }
        int whole = 1;
        for (size_t i = 0; i < n; i++)
            whole &= !more[i];
        int stopped = 0;
        for (size_t i = 0; st == CPR_OK && rc == 0 && whole && !stopped && i < n; i++)
            if (it[i])
                st = deliver_records(r, it[i], &kbuf, &kcap, fn, ctx, &stopped);
        *complete = st == CPR_OK && whole; /* ENOENT: a store never written, and complete */
        if (kit)
            rados_omap_get_end(kit); /* allocated with the operation, whatever it did */
        for (size_t i = 0; i < n; i++)
            if (it[i])
                rados_omap_get_end(it[i]);
        rados_release_read_op(op);
    }
    if (st) {
        free(*val);
        *val = NULL;
        *vlen = 0;
    }
    for (size_t i = 0; i < n; i++)
        free(hp[i]);
    free(hk);
    free(kbuf);
    return st;
}

cpr_status cpri_rados_catalog_get(cpri_rados *r, const void *key, size_t klen, char **val,
                                 size_t *vlen)
{
    char *hk = hex_key(key, klen);
    if (!hk)
        return cpr_fail(CPR_NO_MEMORY, "out of memory reading the catalog");
    size_t hklen = 2 * klen;
    rados_read_op_t op = rados_create_read_op();
    if (!op) {
        free(hk);
        return cpr_fail(CPR_NO_MEMORY, "out of memory reading the catalog");
    }
    rados_omap_iter_t it = NULL;
    int prval = 0;
    const char *keys[1] = {hk};
    rados_read_op_omap_get_vals_by_keys2(op, keys, 1, &hklen, &it, &prval);
    int rc = rados_read_op_operate(op, r->io, CATALOG_OBJECT, 0);
    cpr_status st = CPR_OK;
    *val = NULL;
    *vlen = 0;
    if (rc < 0 && rc != -ENOENT)
        st = cpr_fail(CPR_IO, "RADOS: reading the catalog object %s in %s: %s", CATALOG_OBJECT,
                      r->where, strerror(-rc));
    else if (rc == 0 && prval == 0 && it) {
        char *k, *v;
        size_t kl, vl;
        if (rados_omap_get_next2(it, &k, &v, &kl, &vl) == 0 && k) {
            *val = malloc(vl ? vl : 1);
            if (!*val)
                st = cpr_fail(CPR_NO_MEMORY, "out of memory reading the catalog");
            else {
                memcpy(*val, v, vl);
                *vlen = vl;
            }
        }
    }
    if (it)
        rados_omap_get_end(it);
    rados_release_read_op(op);
    free(hk);
    return st;
}

cpr_status cpri_rados_catalog_cas(cpri_rados *r, const void *key, size_t klen, const void *old,
                                 size_t oldlen, const void *val, size_t vlen, const char *what)
{
    cpri_kv_cond c = {key, klen, old, oldlen};
    cpri_kv_change ch = {key, klen, val, vlen, 0};
    cpr_status st = cpri_rados_catalog_apply_if(r, &c, 1, &ch, 1, what);
    if (st == CPR_FAILED_PRECONDITION)
        cpr_fail(st, "RADOS: %s: the record changed meanwhile", what);
    return st;
}

/* ---- gateways (R6) ------------------------------------------------------------------ */

static void gateway_object(char *out, size_t cap, uint32_t id)
{
    snprintf(out, cap, "cpr.gw.%08x", id);
}

/* The lockers of gateway `object`'s lock: their count, and the first
 * one's client and address (each up to 255 bytes). Negative: an error. */
static ssize_t lockers(cpri_rados *r, const char *object, const char *lock, char client[256],
                       char addr[256], char cookie[256])
{
    int exclusive = 0;
    char tag[256];
    size_t tag_len = sizeof tag, clients_len = 256, cookies_len = 256, addrs_len = 256;
    ssize_t n = rados_list_lockers(r->io, object, lock, &exclusive, tag, &tag_len,
                                   client, &clients_len, cookie, &cookies_len, addr, &addrs_len);
    if (n == -ENOENT)
        return 0;
    return n;
}

static int lock_gateway(cpri_rados *r, uint8_t flags)
{
    struct timeval tv = {LEASE_S, 0};
    return rados_lock_exclusive(r->io, r->gw_object, GATEWAY_LOCK, r->gw_cookie, r->gw_desc,
                                &tv, flags);
}

/* R6: take (flags 0) or renew the gateway's lock; on success the lease
 * holds until LEASE_S from the call's sending, at the OSD's count, so here
 * until LEASE_S - LEASE_MARGIN_S from it. */
static int lease_gateway(cpri_rados *r, uint8_t flags)
{
    double sent = cpri_now_s();
    int rc = lock_gateway(r, flags);
    if (rc == 0)
        atomic_store(&r->lease_until, sent + LEASE_S - LEASE_MARGIN_S);
    return rc;
}

static void *renew_main(void *arg)
{
    cpri_rados *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += LEASE_S / 3;
        while (!r->stop && pthread_cond_timedwait(&r->cv, &r->mu, &until) != ETIMEDOUT)
            ;
        if (r->stop)
            break;
        pthread_mutex_unlock(&r->mu);
        /* MUST_RENEW: a lease that lapsed meanwhile (others may have seen
         * this gateway dead and swept its objects, R7) is not taken again
         * as if nothing had happened. */
        int rc = lease_gateway(r, LIBRADOS_LOCK_FLAG_MUST_RENEW);
        if (rc < 0 && !atomic_exchange(&r->lease_lost, 1))
            cpri_log(CPR_LOG_ERROR, "RADOS %s: gateway %08x could not renew its lease (%s); "
                     "it stops writing the catalog", r->where, r->gw_id, strerror(-rc));
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

cpr_status cpri_rados_gateway_start(cpri_rados *r, uint32_t id, const char *desc)
{
    r->gw_id = id;
    gateway_object(r->gw_object, sizeof r->gw_object, id);
    snprintf(r->gw_cookie, sizeof r->gw_cookie, "%016llx",
             (unsigned long long)rados_get_instance_id(r->cluster));
    snprintf(r->gw_desc, sizeof r->gw_desc, "%s", desc);
    int rc = lease_gateway(r, 0);
    if (rc == -EBUSY || rc == -EEXIST) {
        /* A crashed earlier process of this directory: fence it, then take
         * over (R6). */
        char client[256], addr[256], cookie[256];
        ssize_t n = lockers(r, r->gw_object, GATEWAY_LOCK, client, addr, cookie);
        if (n > 0) {
            int brc = rados_blocklist_add(r->cluster, addr, 3600);
            if (brc < 0)
                cpri_log(CPR_LOG_WARN, "RADOS %s: cannot fence the earlier holder %s (%s) of "
                         "gateway %08x: %s; if that process still runs it could write",
                         r->where, client, addr, id, strerror(-brc));
            else
                cpri_log(CPR_LOG_INFO, "RADOS %s: fenced the earlier holder %s (%s) of "
                         "gateway %08x", r->where, client, addr, id);
            rados_break_lock(r->io, r->gw_object, GATEWAY_LOCK, client, cookie);
        }
        rc = lease_gateway(r, 0);
    }
    if (rc < 0)
        return rados_err(rc, "cannot take the gateway lock on", r->gw_object);
    if (pthread_create(&r->renewer, NULL, renew_main, r) != 0) {
        rados_unlock(r->io, r->gw_object, GATEWAY_LOCK, r->gw_cookie);
        return cpr_fail(CPR_NO_MEMORY, "cannot start the gateway lease's thread");
    }
    pthread_setname_np(r->renewer, "cpr-gw-lease");
    r->renewing = 1;
    return CPR_OK;
}

int cpri_rados_gateway_alive(cpri_rados *r, uint32_t id)
{
    char object[32], client[256], addr[256], cookie[256];
    gateway_object(object, sizeof object, id);
    ssize_t n = lockers(r, object, GATEWAY_LOCK, client, addr, cookie);
    return n < 0 ? -1 : n > 0;
}

cpr_status cpri_rados_gateway_check(cpri_rados *r)
{
    if (atomic_load(&r->lease_lost))
        return cpr_fail(CPR_UNAVAILABLE, "RADOS %s: this gateway (%08x) lost its lease; "
                        "restart ckptd", r->where, r->gw_id);
    double late = cpri_now_s() - atomic_load(&r->lease_until);
    if (late > 0) /* a renewal still out, or the cluster slow to answer */
        return cpr_fail(CPR_UNAVAILABLE, "RADOS %s: this gateway's (%08x) lease has not been "
                        "renewed for %.0f s (the cluster is slow to answer); it writes "
                        "nothing until the renewal comes back: try again", r->where,
                        r->gw_id, late + LEASE_S - LEASE_MARGIN_S);
    return CPR_OK;
}

/* ---- one holder per job (R9) ------------------------------------------------------- */

static int lock_job(cpri_rados *r, const char *object, const char *cookie)
{
    struct timeval tv = {LEASE_S, 0};
    return rados_lock_exclusive(r->io, object, JOB_LOCK, cookie, r->gw_desc, &tv,
                                LIBRADOS_LOCK_FLAG_MAY_RENEW);
}

cpr_status cpri_rados_job_hold(cpri_rados *r, uint32_t job_id, int *held)
{
    char object[32], cookie[32];
    snprintf(object, sizeof object, "cpr.job.%08x", job_id);
    snprintf(cookie, sizeof cookie, "gw-%08x", r->gw_id); /* the same across restarts */
    int rc = lock_job(r, object, cookie);
    if (rc == -EBUSY || rc == -EEXIST) {
        /* Held under this gateway's cookie by another client: an earlier
         * process of this gateway, fenced when this one took the gateway
         * lock (R6). Take the job over. */
        char client[256], addr[256], holder[256];
        if (lockers(r, object, JOB_LOCK, client, addr, holder) > 0 && !strcmp(holder, cookie)) {
            rados_break_lock(r->io, object, JOB_LOCK, client, holder);
            rc = lock_job(r, object, cookie);
        }
    }
    *held = rc == 0;
    if (rc == 0) {
        pthread_mutex_lock(&r->mu);
        int known = 0;
        for (size_t i = 0; i < r->n_jobs && !known; i++)
            known = r->jobs[i] == job_id;
        if (!known && r->n_jobs == r->cap_jobs) { /* if this fails, the lease ends it */
            size_t cap = r->cap_jobs ? 2 * r->cap_jobs : 64;
            uint32_t *grown = realloc(r->jobs, cap * sizeof *grown);
            if (grown) {
                r->jobs = grown;
                r->cap_jobs = cap;
            }
        }
        if (!known && r->n_jobs < r->cap_jobs)
            r->jobs[r->n_jobs++] = job_id;
        pthread_mutex_unlock(&r->mu);
    }
    if (rc == 0 || rc == -EBUSY || rc == -EEXIST)
        return CPR_OK;
    return rados_err(rc, "cannot take the job lock on", object);
}

cpr_status cpri_rados_job_renew(cpri_rados *r, uint32_t job_id)
{
    char object[32], cookie[32];
    snprintf(object, sizeof object, "cpr.job.%08x", job_id);
    snprintf(cookie, sizeof cookie, "gw-%08x", r->gw_id);
    struct timeval tv = {LEASE_S, 0};
    int rc = rados_lock_exclusive(r->io, object, JOB_LOCK, cookie, r->gw_desc, &tv,
                                  LIBRADOS_LOCK_FLAG_MUST_RENEW);
    if (rc == 0)
        return CPR_OK;
    if (rc == -ENOENT || rc == -EBUSY || rc == -EEXIST)
        return cpr_fail(CPR_FAILED_PRECONDITION, "RADOS %s: this gateway's hold on job "
                        "%08x lapsed during its retention or fold pass (another gateway may "
                        "run them now); the pass stops and the next one starts over",
                        r->where, job_id);
    return rados_err(rc, "cannot renew the job lock on", object);
}

/* ---- the pool's free space ------------------------------------------------------------ */

/* One monitor (or manager) command's JSON answer, parsed; NULL on failure. */
static cpri_json *mon_json(cpri_rados *r, const char *cmd)
{
    char *out = NULL, *outs = NULL;
    size_t outlen = 0, outslen = 0;
    const char *cmds[1] = {cmd};
    int rc = rados_mon_command(r->cluster, cmds, 1, "", 0, &out, &outlen, &outs, &outslen);
    cpri_json *j = NULL;
    if (rc == 0 && out && outlen) {
        char *text = strndup(out, outlen);
        j = text ? cpri_json_parse(text) : NULL;
        free(text);
    }
    rados_buffer_free(out);
    rados_buffer_free(outs);
    return j;
}

cpr_status cpri_rados_pool_avail(cpri_rados *r, uint64_t *avail, int *quota_bound)
{
    *avail = UINT64_MAX;
    *quota_bound = 0;
    cpri_json *df = mon_json(r, "{\"prefix\": \"df\", \"format\": \"json\"}");
    const cpri_json *pools = df ? cpri_json_get(df, "pools") : NULL;
    double max_avail = -1, stored = 0;
    for (size_t i = 0; i < cpri_json_array_size(pools); i++) {
        const cpri_json *p = cpri_json_array_get(pools, i);
        const char *name = NULL;
        const cpri_json *stats = cpri_json_get(p, "stats");
        if (cpri_json_get_string(p, "name", &name) == 0 && strcmp(name, r->pool) == 0 && stats) {
            cpri_json_get_number(stats, "max_avail", &max_avail);
            cpri_json_get_number(stats, "stored", &stored);
        }
    }
    cpri_json_free(df);
    if (max_avail < 0)
        return CPR_OK; /* no usage figures (a cluster without a manager): unknown */
    *avail = (uint64_t)max_avail;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "{\"prefix\": \"osd pool get-quota\", \"pool\": \"%s\", "
             "\"format\": \"json\"}", r->pool);
    cpri_json *q = mon_json(r, cmd);
    double quota = 0;
    if (q && cpri_json_get_number(q, "quota_max_bytes", &quota) == 0 && quota > 0) {
        uint64_t left = quota > stored ? (uint64_t)(quota - stored) : 0;
        if (left < *avail) {
            *avail = left;
            *quota_bound = 1;
        }
    }
    cpri_json_free(q);
    return CPR_OK;
}

const char *cpri_rados_pool(const cpri_rados *r)
{
    return r->pool;
}
