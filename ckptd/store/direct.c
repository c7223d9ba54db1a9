/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Direct reads (include/cpr/store.h, cpr_store_reader_*): a restore run by a
 * process that does not open the store, over the segments of a store in
 * Ceph RADOS, from the plan a gateway made (cpr_store_restore_plan;
 * restore.c M4). The plan is checked as it is decoded (plan.c), and every
 * block as the store's own restore checks one (restore.c load_next): its
 * CRC32C and its header against the plan's record of it.
 *
 * Direct writes (cpr_store_writer_*): blocks appended to a segment object
 * the store named (store_write.c W3), padded to 8 as the store pads them
 * (W1), each one's entry of the index noted as it goes.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/block.h"
#include "cpr/store.h"
#include "rados.h"
#include "restore.h"
#include "store_internal.h"

struct cpr_store_reader {
    cpri_rados *rados;
    cpri_backend *segs;
    _Atomic unsigned reading; /* restores reading at once (restore.c M2) */
};

cpr_status cpr_store_reader_open(const cpr_store_options *o, cpr_store_reader **out)
{
    if (!out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_reader_open: out must be set");
    *out = NULL;
    if (!o || !o->rados_pool || !*o->rados_pool)
        return cpr_fail(CPR_INVALID_ARGUMENT, "direct reads need the store's Ceph pool: set "
                        "rados_pool (with rados_conf, rados_namespace and rados_user as "
                        "ckptd's --rados-* options give them)");
    cpr_store_reader *r = calloc(1, sizeof *r);
    if (!r)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening a segment reader");
    cpri_rados_target t = {o->rados_conf, o->rados_user, o->rados_pool, o->rados_namespace};
    cpr_status st = cpri_rados_connect(&t, &r->rados);
    if (st == CPR_OK)
        st = cpri_backend_rados_open(r->rados, &r->segs);
    if (st) {
        cpr_store_reader_close(r);
        return st;
    }
    *out = r;
    return CPR_OK;
}

const char *cpr_store_reader_id(const cpr_store_reader *r)
{
    return r ? cpri_rados_identity(r->rados) : NULL;
}

void cpr_store_reader_close(cpr_store_reader *r)
{
    if (!r)
        return;
    if (r->segs)
        r->segs->ops->close(r->segs);
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
    if (st == CPR_CORRUPT && !c.failed) { /* a block of the pool: say where it was read */
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
