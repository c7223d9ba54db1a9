/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr.Part: a part being written (cpr_part of cpr/client.h). Puts copy the
 * caller's rows into the client's staging and return (blocking only while
 * staging is full), so a NumPy array or tensor may be changed as soon as a
 * put returns; a background thread streams them out.
 *
 * Invariants:
 *   P1  `part` is NULL once the part ended (committed, aborted, aborted
 *       by its client's close, or left to the parent in a fork's child:
 *       `ended` says which); a live part is on its client's `parts` list
 *       (client.c C3), and a freed one on none.
 *   P2  One call at a time (`busy`, changed with the GIL held): the C API
 *       requires a part to be used by one thread at a time.
 *   P3  A Part keeps its Client alive (strong reference): the C handle
 *       never outlives the client that owns it.
 */
#include "cprpy.h"

#include <stdlib.h>
#include <string.h>

static void unlink_part(cprpy_part *p)
{
    cprpy_client *c = p->client;
    if (p->prev)
        p->prev->next = p->next;
    else if (c->parts == p)
        c->parts = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
}

/* Takes `part` and `tables` (malloc'd, NULL when n_tables is 0), also on failure. */
PyObject *cprpy_part_new(cprpy_client *c, cpr_part *part, PyObject *job, uint32_t shard,
                         uint64_t checkpoint, cpr_table_schema *tables, size_t n_tables)
{
    cprpy_part *p = PyObject_GC_New(cprpy_part, &cprpy_PartType);
    if (!p) {
        free(tables);
        Py_BEGIN_ALLOW_THREADS
        cpr_part_abort(&part);
        Py_END_ALLOW_THREADS
        return NULL;
    }
    p->tables = tables;
    p->n_tables = n_tables;
    p->client = (cprpy_client *)Py_NewRef((PyObject *)c);
    p->part = part;
    p->job = Py_NewRef(job);
    p->shard = shard;
    p->checkpoint = checkpoint;
    p->busy = 0;
    p->ended = NULL;
    p->prev = NULL;
    p->next = c->parts;
    if (c->parts)
        c->parts->prev = p;
    c->parts = p;
    PyObject_GC_Track((PyObject *)p);
    return (PyObject *)p;
}

/* A Part holds its Client: the collector must see that edge, or a cycle
 * through it (a Client subclass keeping its Part in an attribute) keeps the
 * client, its threads and its store open until exit. */
static int part_traverse(cprpy_part *p, visitproc visit, void *arg)
{
    Py_VISIT(p->client);
    return 0;
}

/* P1/P2: the handle for one call, or NULL with an error set. */
static cpr_part *enter(cprpy_part *p)
{
    if (cprpy_client_forked(p->client) || p->ended == cprpy_ended_by_fork)
        return (cpr_part *)cprpy_raise(CPR_FAILED_PRECONDITION,
                                       "part %s/%u/%llu belongs to the parent process (a "
                                       "client does not survive fork())",
                                       PyUnicode_AsUTF8(p->job), p->shard,
                                       (unsigned long long)p->checkpoint);
    if (!p->part)
        return (cpr_part *)cprpy_raise(CPR_FAILED_PRECONDITION,
                                       "part %s/%u/%llu is %s; begin a new part to write more",
                                       PyUnicode_AsUTF8(p->job), p->shard,
                                       (unsigned long long)p->checkpoint,
                                       p->ended ? p->ended : "closed");
    if (p->busy)
        return (cpr_part *)cprpy_raise(CPR_FAILED_PRECONDITION,
                                       "part %s/%u/%llu is in use by another thread (a part is "
                                       "written by one thread at a time)",
                                       PyUnicode_AsUTF8(p->job), p->shard,
                                       (unsigned long long)p->checkpoint);
    p->busy = 1;
    p->client->busy++;
    return p->part;
}

static void leave(cprpy_part *p)
{
    p->busy = 0;
    p->client->busy--;
}

static PyObject *put_result(cpr_status st)
{
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    Py_RETURN_NONE;
}

/* An optional state array: NULL view for None. */
static int get_state(PyObject *state, cprpy_buffer *sb)
{
    memset(sb, 0, sizeof *sb);
    if (state == Py_None)
        return 0;
    return cprpy_buffer_get(state, CPRPY_F32, 0, "state", sb);
}

/*
 * A batch of n rows against its table's schema, in the arrays' own shapes:
 * the library sees only element counts, and says so in its fields' names.
 * A table the part does not have is left to the library to refuse.
 * 0, or -1 with an error set.
 */
static int check_shapes(const cprpy_part *p, uint32_t table, size_t n, const cprpy_buffer *vb,
                        const cprpy_buffer *sb)
{
    const cpr_table_schema *t = NULL;
    for (size_t i = 0; i < p->n_tables && !t; i++)
        if (p->tables[i].table == table)
            t = &p->tables[i];
    if (!t || !n)
        return 0; /* an empty batch puts nothing: the library takes it as it is */
    if (vb->ndim == 2 && vb->cols != t->dim) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "values: shape (%zu, %zu), table %u has dim %u",
                    vb->rows, vb->cols, table, t->dim);
        return -1;
    }
    if (vb->ndim == 2 && vb->rows != n) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "values: shape (%zu, %zu), expected (%zu, %u): one "
                    "row per id", vb->rows, vb->cols, n, t->dim);
        return -1;
    }
    if (vb->ndim != 2 && vb->len != n * t->dim) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "values: %zu values, expected %zu rows x dim %u of "
                    "table %u", vb->len, n, t->dim, table);
        return -1;
    }
    if (t->state_dim && !sb->held) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "state: table %u has state_dim %u: pass its (n, %u) "
                    "optimizer state", table, t->state_dim, t->state_dim);
        return -1;
    }
    if (!t->state_dim && sb->held && sb->len) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "state: table %u has state_dim 0 (no optimizer "
                    "state): pass None", table);
        return -1;
    }
    if (t->state_dim && sb->len != n * t->state_dim) {
        if (sb->ndim == 2)
            cprpy_raise(CPR_INVALID_ARGUMENT, "state: shape (%zu, %zu), expected (%zu, %u) "
                        "(table %u has state_dim %u)", sb->rows, sb->cols, n, t->state_dim,
                        table, t->state_dim);
        else
            cprpy_raise(CPR_INVALID_ARGUMENT, "state: %zu values, expected %zu rows x "
                        "state_dim %u of table %u", sb->len, n, t->state_dim, table);
        return -1;
    }
    return 0;
}

/* One batch through cpr_part_put_rows (put_rows, put_range). */
static PyObject *put_batch(cprpy_part *p, const cpr_row_batch *b)
{
    cpr_part *part = enter(p);
    if (!part)
        return NULL;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_part_put_rows(part, b);
    Py_END_ALLOW_THREADS
    leave(p);
    return put_result(st);
}

static PyObject *part_put_rows(cprpy_part *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"table", "ids", "values", "state", NULL};
    unsigned int table;
    PyObject *ids, *values, *state = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&OO|O", kwlist, cprpy_u32, &table, &ids, &values,
                                     &state))
        return NULL;
    cprpy_buffer ib, vb = {0}, sb = {0};
    if (cprpy_buffer_get(ids, CPRPY_ID, 0, "ids", &ib) < 0)
        return NULL;
    PyObject *out = NULL;
    if (cprpy_ids_check(&ib, "ids") < 0 ||
        cprpy_buffer_get(values, CPRPY_F32, 0, "values", &vb) < 0 || get_state(state, &sb) < 0 ||
        check_shapes(p, table, ib.len, &vb, &sb) < 0)
        goto out;
    cpr_row_batch b = {.table = table, .n = ib.len, .ids = ib.view.buf, .values = vb.view.buf,
                       .values_count = vb.len, .state = sb.held ? sb.view.buf : NULL,
                       .state_count = sb.len};
    out = put_batch(p, &b);
out:
    cprpy_buffer_release(&ib);
    cprpy_buffer_release(&vb);
    cprpy_buffer_release(&sb);
    return out;
}

static PyObject *part_put_range(cprpy_part *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"table", "first", "values", "state", NULL};
    unsigned int table;
    unsigned long long first;
    PyObject *values, *state = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&O|O", kwlist, cprpy_u32, &table, cprpy_u64,
                                     &first, &values, &state))
        return NULL;
    cprpy_buffer vb, sb = {0};
    if (cprpy_buffer_get(values, CPRPY_F32, 0, "values", &vb) < 0)
        return NULL;
    PyObject *out = NULL;
    if (vb.ndim != 2) {
        cprpy_raise(CPR_INVALID_ARGUMENT,
                    "values: expected a 2-D (n, dim) array: its rows are rows first .. first+n");
        goto out;
    }
    if (get_state(state, &sb) < 0 || check_shapes(p, table, vb.rows, &vb, &sb) < 0)
        goto out;
    cpr_row_batch b = {.table = table, .n = vb.rows, .range_begin = first,
                       .values = vb.view.buf, .values_count = vb.len,
                       .state = sb.held ? sb.view.buf : NULL, .state_count = sb.len};
    out = put_batch(p, &b);
out:
    cprpy_buffer_release(&vb);
    cprpy_buffer_release(&sb);
    return out;
}

/*
 * Rows by id straight from a whole table: values is (table_rows, stride)
 * with row r at values[r - row_base]; the ids are checked against the
 * array's rows here, because the C call trusts its pointer.
 */
static PyObject *part_put_gather(cprpy_part *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"table", "values", "state", "ids", "first", "n", "row_base", NULL};
    unsigned int table;
    PyObject *values, *state = Py_None, *ids = Py_None, *n_obj = Py_None;
    unsigned long long first = 0, row_base = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O|O$OO&OO&", kwlist, cprpy_u32, &table, &values,
                                     &state, &ids, cprpy_u64, &first, &n_obj, cprpy_u64, &row_base))
        return NULL;
    cprpy_buffer vb, sb = {0}, ib = {0};
    if (cprpy_buffer_get(values, CPRPY_F32, 0, "values", &vb) < 0)
        return NULL;
    PyObject *out = NULL;
    if (vb.ndim != 2) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "values: expected the 2-D (rows, dim) table");
        goto out;
    }
    if (get_state(state, &sb) < 0)
        goto out;
    if (sb.held && sb.rows != vb.rows) {
        cprpy_raise(CPR_INVALID_ARGUMENT,
                    "state: expected one row per row of values (%zu), got %zu", vb.rows,
                    sb.rows);
        goto out;
    }
    cpr_gather g = {.table = table, .row_base = row_base, .values = vb.view.buf,
                    .values_stride = vb.cols, .state = sb.held ? sb.view.buf : NULL,
                    .state_stride = sb.held ? (sb.ndim == 1 ? 1 : sb.cols) : 0};
    uint64_t end = row_base + vb.rows; /* rows the arrays hold: [row_base, end) */
    if (ids != Py_None) {
        if (n_obj != Py_None || first) {
            cprpy_raise(CPR_INVALID_ARGUMENT, "give either ids or first and n, not both");
            goto out;
        }
        if (cprpy_buffer_get(ids, CPRPY_ID, 0, "ids", &ib) < 0 || cprpy_ids_check(&ib, "ids") < 0)
            goto out;
        const uint64_t *v = ib.view.buf;
        for (size_t i = 0; i < ib.len; i++)
            if (v[i] < row_base || v[i] >= end) {
                cprpy_raise(CPR_INVALID_ARGUMENT,
                            "ids[%zu] = %llu is outside the rows the arrays hold [%llu, %llu)", i,
                            (unsigned long long)v[i], (unsigned long long)row_base,
                            (unsigned long long)end);
                goto out;
            }
        g.ids = v;
        g.n = ib.len;
    } else {
        unsigned long long n = first < end ? end - first : 0;
        if (n_obj != Py_None) {
            n = PyLong_AsUnsignedLongLong(n_obj);
            if (n == (unsigned long long)-1 && PyErr_Occurred())
                goto out;
        }
        if (first < row_base || first + n > end || first + n < first) {
            cprpy_raise(CPR_INVALID_ARGUMENT,
                        "rows [%llu, %llu) are outside the rows the arrays hold [%llu, %llu)",
                        first, first + n, (unsigned long long)row_base, (unsigned long long)end);
            goto out;
        }
        g.range_begin = first;
        g.n = (size_t)n;
    }
    cpr_part *part = enter(p);
    if (!part)
        goto out;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_part_put_gather(part, &g);
    Py_END_ALLOW_THREADS
    leave(p);
    out = put_result(st);
out:
    cprpy_buffer_release(&vb);
    cprpy_buffer_release(&sb);
    cprpy_buffer_release(&ib);
    return out;
}

static PyObject *part_put_blob(cprpy_part *p, PyObject *args)
{
    const char *name;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "sy*", &name, &data))
        return NULL;
    cpr_part *part = enter(p);
    if (!part) {
        PyBuffer_Release(&data);
        return NULL;
    }
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_part_put_blob(part, name, data.buf, (size_t)data.len);
    Py_END_ALLOW_THREADS
    leave(p);
    PyBuffer_Release(&data);
    return put_result(st);
}

/* End the part (commit or abort); P1. */
static PyObject *finish(cprpy_part *p, int commit)
{
    if (!commit && !p->part)
        Py_RETURN_NONE; /* aborting an ended part: nothing to do */
    cpr_part *part = enter(p);
    if (!part)
        return NULL;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = commit ? cpr_part_commit(&part) : cpr_part_abort(&part);
    Py_END_ALLOW_THREADS
    leave(p);
    p->part = NULL; /* both calls free the part, whatever they return */
    p->ended = commit ? (st == CPR_OK ? "committed" : "aborted (its commit failed)") : "aborted";
    unlink_part(p);
    return put_result(st);
}

static PyObject *part_commit(cprpy_part *p, PyObject *unused)
{
    (void)unused;
    return finish(p, 1);
}

static PyObject *part_abort(cprpy_part *p, PyObject *unused)
{
    (void)unused;
    return finish(p, 0);
}

static PyObject *part_progress(cprpy_part *p, PyObject *unused)
{
    (void)unused;
    cpr_part *part = enter(p);
    if (!part)
        return NULL;
    cpr_part_progress pr;
    cpr_part_progress_get(part, &pr); /* never blocks */
    leave(p);
    const uint64_t v[] = {pr.rows_queued, pr.bytes_queued, pr.rows_sent, pr.bytes_sent};
    return cprpy_struct_u64(cprpy_ProgressType, v, 4,
                            pr.error == CPR_OK ? Py_NewRef(Py_None)
                                               : PyUnicode_FromString(cpr_status_name(pr.error)));
}

static PyObject *part_enter_ctx(cprpy_part *p, PyObject *unused)
{
    (void)unused;
    return Py_NewRef((PyObject *)p);
}

/* with client.begin(...) as part: commit on a clean exit, abort on an
 * exception (whose propagation an abort error must not mask). A clean exit
 * from a part that ended in the block by its client's close raises: nothing
 * was committed, and the caller did not say so (commit or abort). */
static PyObject *part_exit_ctx(cprpy_part *p, PyObject *args)
{
    PyObject *type = PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : Py_None;
    if (!p->part) {
        if (type != Py_None ||
            (p->ended != cprpy_ended_by_close && p->ended != cprpy_ended_by_fork))
            Py_RETURN_FALSE; /* committed or aborted in the block */
        return cprpy_raise(CPR_FAILED_PRECONDITION,
                           "part %s/%u/%llu was %s inside its with block: nothing was "
                           "committed", PyUnicode_AsUTF8(p->job), p->shard,
                           (unsigned long long)p->checkpoint, p->ended);
    }
    if (type == Py_None) {
        PyObject *r = finish(p, 1);
        if (!r)
            return NULL;
        Py_DECREF(r);
        Py_RETURN_FALSE;
    }
    PyObject *r = finish(p, 0);
    if (!r)
        PyErr_Clear();
    Py_XDECREF(r);
    Py_RETURN_FALSE;
}

static void part_dealloc(cprpy_part *p)
{
    PyObject_GC_UnTrack((PyObject *)p);
    cprpy_client_forked(p->client); /* C5: a fork's child forgets the parent's part */
    if (p->part) {
        /* Busy while the GIL is released (client.c C2): the client cannot
         * close under the abort. */
        cpr_part *part = p->part;
        p->busy = 1;
        p->client->busy++;
        Py_BEGIN_ALLOW_THREADS
        cpr_part_abort(&part);
        Py_END_ALLOW_THREADS
        p->client->busy--;
        p->part = NULL;
    }
    /* C3: off the list whatever ended it (a no-op once detached); after the
     * abort, so that a client.abort() of it meanwhile finds it busy (C4). */
    unlink_part(p);
    free(p->tables);
    Py_XDECREF(p->job);
    Py_XDECREF(p->client);
    PyObject_GC_Del(p);
}

static PyObject *part_repr(cprpy_part *p)
{
    return PyUnicode_FromFormat("cpr.Part(%R, shard=%u, checkpoint=%llu, %s)", p->job, p->shard,
                                (unsigned long long)p->checkpoint,
                                p->part ? "open" : (p->ended ? p->ended : "closed"));
}

static PyObject *part_get_state(cprpy_part *p, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(p->part ? "open" : (p->ended ? p->ended : "closed"));
}

static PyMemberDef part_members[] = {
    {"job", T_OBJECT, offsetof(cprpy_part, job), READONLY, "The job."},
    {"shard", T_UINT, offsetof(cprpy_part, shard), READONLY, "The shard."},
    {"checkpoint", T_ULONGLONG, offsetof(cprpy_part, checkpoint), READONLY, "The checkpoint id."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef part_getset[] = {
    {"state", (getter)part_get_state, NULL,
     "'open', 'committed', 'aborted', 'aborted (its commit failed)' or 'aborted when its "
     "client closed'.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

#define KW (PyCFunction)(void (*)(void))
static PyMethodDef part_methods[] = {
    {"put_rows", KW part_put_rows, METH_VARARGS | METH_KEYWORDS,
     "put_rows(table, ids, values, state=None): queue rows of one table (ids int64/uint64, "
     "ascending; values (n, dim) and state (n, state_dim) float32). Copied before it returns."},
    {"put_range", KW part_put_range, METH_VARARGS | METH_KEYWORDS,
     "put_range(table, first, values, state=None): rows first .. first + len(values)."},
    {"put_gather", KW part_put_gather, METH_VARARGS | METH_KEYWORDS,
     "put_gather(table, values, state=None, *, ids=None, first=0, n=None, row_base=0): rows "
     "copied straight from a whole table (values[r - row_base] is row r; a weight tensor and "
     "its optimizer state): the rows `ids`, or the range [first, first + n)."},
    {"put_blob", (PyCFunction)part_put_blob, METH_VARARGS,
     "put_blob(name, data): queue a whole blob (any bytes-like object)."},
    {"commit", (PyCFunction)part_commit, METH_NOARGS,
     "commit(): wait for every put to be delivered, then make the part durable and visible. "
     "On an error the part is aborted."},
    {"abort", (PyCFunction)part_abort, METH_NOARGS,
     "abort(): drop the part (nothing of it becomes visible). Nothing to do once ended."},
    {"progress", (PyCFunction)part_progress, METH_NOARGS,
     "progress() -> Progress: rows and bytes queued and sent so far."},
    {"__enter__", (PyCFunction)part_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)part_exit_ctx, METH_VARARGS,
     "Commit on a clean exit, abort when an exception leaves the block."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject cprpy_PartType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cpr.Part",
    .tp_basicsize = sizeof(cprpy_part),
    .tp_dealloc = (destructor)part_dealloc,
    .tp_repr = (reprfunc)part_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)part_traverse,
    .tp_doc = "A part being written; from Client.begin. A context manager: commits on a "
              "clean exit, aborts on an exception. Used by one thread at a time.",
    .tp_methods = part_methods,
    .tp_members = part_members,
    .tp_getset = part_getset,
};

int cprpy_part_ready(PyObject *m)
{
    if (PyType_Ready(&cprpy_PartType) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Part", (PyObject *)&cprpy_PartType);
}
