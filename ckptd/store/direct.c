/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Direct reads (include/cpr/store.h, cpr_store_reader_*): a restore run by a
 * process that does not open the store, over the segments of a store in
 * Ceph RADOS or in a directory on a disk it can read, from the plan a
 * gateway made (cpr_store_restore_plan; restore.c M4). The plan is checked
 * as it is decoded (plan.c), and every block as the store's own restore
 * checks one (restore.c load_next): its CRC32C and its header against the
 * plan's record of it.
 *
 *  D1. A store on a local disk is named by DIR/store-id, "local:" and 32
 *      random hex digits written at its first open (cpri_local_id). A
 *      reader given DIR reads that name, and ckptd answers a restore with a
 *      plan only when the name the client sends is its store's, so a client
 *      on another host, or pointed at another directory, gets rows as
 *      before. A copy of a directory carries its name; a reader of the copy
 *      then misses segments or finds other bytes, and both are CPR_CORRUPT
 *      (every block is checked), never rows of another state.
 *
 * Direct writes (cpr_store_writer_*): blocks appended to a segment object
 * the store named (store_write.c W3), padded to 8 as the store pads them
 * (W1), each one's entry of the index noted as it goes. RADOS only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cpr/block.h"
#include "cpr/store.h"
#include "blobio.h"
#include "cpr_common.h"
#include "rados.h"
#include "restore.h"
#include "store_internal.h"

#define LOCAL_ID_FILE "store-id"
#define LOCAL_ID_PREFIX "local:"
#define LOCAL_ID_HEX 32

struct cpr_store_reader {
    cpri_rados *rados;        /* NULL: a local directory's reader */
    cpri_backend *segs;
    char local_id[CPRI_LOCAL_ID_CAP];
    _Atomic unsigned reading; /* restores reading at once (restore.c M2) */
};

static int local_id_ok(const char *id)
{
    size_t p = sizeof LOCAL_ID_PREFIX - 1;
    if (strlen(id) != p + LOCAL_ID_HEX || strncmp(id, LOCAL_ID_PREFIX, p) != 0)
        return 0;
    for (size_t i = p; id[i]; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return 1;
}

static cpr_status read_local_id(const char *path, char *out)
{
    char buf[64] = "";
    cpr_status st = CPR_OK;
    FILE *f = fopen(path, "r");
    if (!f)
        st = errno == ENOENT ? CPR_NOT_FOUND
                             : cpr_fail(CPR_IO, "open %s: %s", path, strerror(errno));
    if (f) {
        int got = fgets(buf, sizeof buf, f) != NULL;
        fclose(f);
        buf[strcspn(buf, "\n")] = 0;
        if (!got || !local_id_ok(buf))
            st = cpr_fail(CPR_CORRUPT, "%s does not hold a store's name (\"%s\" and %d hex "
                          "digits); reopening the store writes a new one", path,
                          LOCAL_ID_PREFIX, LOCAL_ID_HEX);
    }
    if (st == CPR_OK) /* local_id_ok: 38 characters */
        memcpy(out, buf, strlen(buf) + 1);
    return st;
}

/* A new random name, "local:" and LOCAL_ID_HEX hex digits, into id[CPRI_LOCAL_ID_CAP]. */
static cpr_status new_local_id(char *id)
{
    unsigned char r[LOCAL_ID_HEX / 2];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t n = getrandom(r + got, sizeof r - got, 0);
        if (n < 0 && errno != EINTR)
            return cpr_fail(CPR_IO, "getrandom for the store's name failed: %s",
                            strerror(errno));
        got += n > 0 ? (size_t)n : 0;
    }
    size_t at = (size_t)snprintf(id, CPRI_LOCAL_ID_CAP, "%s", LOCAL_ID_PREFIX);
    for (size_t i = 0; i < sizeof r; i++)
        at += (size_t)snprintf(id + at, CPRI_LOCAL_ID_CAP - at, "%02x", r[i]);
    return CPR_OK;
}

/* Write a new name to path (cpri_replace_file: a crash leaves the old state
 * or the new). */
static cpr_status write_local_id(const char *dir, const char *path, char *out)
{
    char id[CPRI_LOCAL_ID_CAP], line[64];
    cpr_status st = new_local_id(id);
    if (st == CPR_OK) {
        int len = snprintf(line, sizeof line, "%s\n", id);
        st = cpri_replace_file(dir, path, line, (size_t)len);
    }
    if (st == CPR_OK)
        snprintf(out, CPRI_LOCAL_ID_CAP, "%s", id);
    return st;
}

cpr_status cpri_local_id(const char *dir, int create, char *out)
{
    char *path = cpri_path_join(dir, LOCAL_ID_FILE);
    cpr_status st = path ? read_local_id(path, out)
                         : cpr_fail(CPR_NO_MEMORY, "out of memory naming %s/%s", dir,
                                    LOCAL_ID_FILE);
    if (path && create && (st == CPR_NOT_FOUND || st == CPR_CORRUPT)) {
        if (st == CPR_CORRUPT)
            cpri_log(CPR_LOG_WARN, "%s; writing a new one", cpr_errmsg());
        st = write_local_id(dir, path, out);
    } else if (st == CPR_NOT_FOUND) {
        st = cpr_fail(CPR_NOT_FOUND, "%s is missing: %s is not the directory of a CPR "
                      "store (give ckptd's --data-dir, or the path of local://)", path, dir);
    }
    free(path);
    return st;
}

static cpr_status open_local(const cpr_store_options *o, cpr_store_reader *r)
{
    char *segs = NULL;
    cpr_status st = cpri_local_id(o->local_dir, 0, r->local_id);
    if (st == CPR_OK && !(segs = cpri_path_join(o->local_dir, "segments")))
        st = cpr_fail(CPR_NO_MEMORY, "out of memory opening a segment reader");
    if (st == CPR_OK) /* no_sync: this backend only reads */
        st = cpri_backend_local_open(segs, 1, o->buffered_reads, &r->segs);
    free(segs);
    return st;
}

cpr_status cpr_store_reader_open(const cpr_store_options *o, cpr_store_reader **out)
{
    if (!out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_reader_open: out must be set");
    *out = NULL;
    int pool = o && o->rados_pool && *o->rados_pool, dir = o && o->local_dir && *o->local_dir;
    if (pool == dir)
        return cpr_fail(CPR_INVALID_ARGUMENT, "direct reads need %s: set rados_pool (with "
                        "rados_conf, rados_namespace and rados_user as ckptd's --rados-* "
                        "options give them) for a store in Ceph RADOS, or local_dir (ckptd's "
                        "--data-dir) for a store on this host's disk",
                        pool ? "one store, not both" : "the store's storage");
    cpr_store_reader *r = calloc(1, sizeof *r);
    if (!r)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening a segment reader");
    cpr_status st;
    if (dir) {
        st = open_local(o, r);
    } else {
        cpri_rados_target t = {o->rados_conf, o->rados_user, o->rados_pool, o->rados_namespace};
        st = cpri_rados_connect(&t, &r->rados);
        if (st == CPR_OK)
            st = cpri_backend_rados_open(r->rados, &r->segs);
    }
    if (st) {
        cpr_store_reader_close(r);
        return st;
    }
    *out = r;
    return CPR_OK;
}

const char *cpr_store_reader_id(const cpr_store_reader *r)
{
    return !r ? NULL : r->rados ? cpri_rados_identity(r->rados) : r->local_id;
}

void cpr_store_reader_close(cpr_store_reader *r)
{
    if (!r)
        return;
    if (r->segs)
        r->segs->ops->close(r->segs);
    if (r->rados)
        cpri_rados_close(r->rados);
    free(r);
}

/* The caller's callback, noting whether it is the one that stopped the run. */
typedef struct caller_fn {
    cpr_row_fn fn;
    void *ctx;
    int failed;
} caller_fn;

static cpr_status call_fn(void *ctx, const cpr_row_batch *b)
{
    caller_fn *c = ctx;
    cpr_status st = c->fn(c->ctx, b);
    c->failed = st != CPR_OK;
    return st;
}

cpr_status cpr_store_reader_restore(cpr_store_reader *r, const void *plan, size_t len,
                                    cpr_row_fn fn, void *ctx, cpr_restore_result *result)
{
    if (!r || !plan || !fn)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_reader_restore: reader, plan and fn "
                        "must be set");
    cpri_merge_plan p;
    cpr_restore_result res = {0};
    cpr_status st = cpri_merge_plan_decode(plan, len, &p);
    if (st)
        return st;
    caller_fn c = {fn, ctx, 0};
    st = cpri_merge_run_rows(r->segs, &r->reading, &p, call_fn, &c, &res);
    if (st == CPR_CORRUPT && !c.failed) { /* a stored block: say where it was read */
        char why[400]; /* cpr_fail writes the buffer cpr_errmsg reads */
        snprintf(why, sizeof why, "%s", cpr_errmsg());
        st = cpr_fail(st, "direct read (restore again if its plan is old): %s", why);
    }
    if (st == CPR_OK && result) {
        res.as_of = p.as_of;
        *result = res;
    }
    cpri_merge_plan_release(&p);
    return st;
}

/* ---- direct writes -------------------------------------------------------------- */

struct cpr_store_writer {
    cpri_backend *segs; /* the reader's */
    cpri_obj_writer *w;
};

cpr_status cpr_store_writer_create(cpr_store_reader *r, const char *object, cpr_store_writer **out)
{
    if (!out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_writer_create: out must be set");
    *out = NULL;
    if (!r || !object || !cpri_seg_name_ok(object, strlen(object)))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_writer_create: a reader and the "
                        "object name cpr_store_direct_segment gave (\"job/name\") must be "
                        "set");
    if (!r->rados)
        return cpr_fail(CPR_FAILED_PRECONDITION, "cpr_store_writer_create: direct writes "
                        "need a store in Ceph RADOS; this reader reads a local directory");
    cpr_store_writer *w = calloc(1, sizeof *w);
    if (!w)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening a segment writer");
    w->segs = r->segs;
    cpr_status st = w->segs->ops->create(w->segs, object, &w->w);
    if (st) {
        free(w);
        return st;
    }
    *out = w;
    return CPR_OK;
}

cpr_status cpr_store_writer_block(cpr_store_writer *w, const void *block, size_t len,
                                  cpr_store_block_ref *ref)
{
    static const unsigned char zero[8];
    cpr_block_header h;
    if (!w || !block || !ref)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_writer_block: writer, block and ref "
                        "must be set");
    cpr_status st = cpr_block_header_parse(block, len, &h);
    if (st)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_writer_block: %s", cpr_errmsg());
    if (h.bytes != len)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_writer_block: the block's header "
                        "says %llu bytes; %zu given", (unsigned long long)h.bytes, len);
    const cpri_backend_ops *ops = w->segs->ops;
    uint64_t at = ops->written(w->w);
    st = ops->append(w->w, block, len);
    size_t pad = (8 - len % 8) % 8; /* W1 */
    if (st == CPR_OK && pad)
        st = ops->append(w->w, zero, pad);
    if (st == CPR_OK)
        *ref = (cpr_store_block_ref){h.table, h.n, h.first_row, h.last_row, at,
                                     (uint32_t)len, h.crc32c};
    return st;
}

cpr_status cpr_store_writer_finish(cpr_store_writer *w, uint64_t *size)
{
    if (!w)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_writer_finish: no writer");
    uint64_t got = 0;
    cpr_status st = w->segs->ops->finish(w->w, &got);
    free(w);
    if (st == CPR_OK && size)
        *size = got;
    return st;
}

void cpr_store_writer_discard(cpr_store_writer *w)
{
    if (!w)
        return;
    w->segs->ops->discard(w->w);
    free(w);
}
