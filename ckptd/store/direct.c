/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Direct reads (include/cpr/store.h, cpr_store_reader_*): a restore run by a
 * process that does not open the store, over the segments of a store in
 * Ceph RADOS, from the plan a gateway made (cpr_store_restore_plan;
 * restore.c M4). The plan is checked as it is decoded (plan.c), and every
 * block as the store's own restore checks one (restore.c load_next): its
 * CRC32C and its header against the plan's record of it.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

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
