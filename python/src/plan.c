/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr.Plan and the recovery record: plans made by the planner
 * (cpr_recovery_plan_make), recorded and read back through a client so
 * that every process of a job acts on the same decision (cpr/recovery.h).
 */
#include "cprpy.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    cpr_recovery_plan *plan; /* owned */
} cprpy_plan;

PyObject *cprpy_plan_wrap(cpr_recovery_plan *plan)
{
    cprpy_plan *p = PyObject_New(cprpy_plan, &cprpy_PlanType);
    if (!p) {
        cpr_recovery_plan_destroy(plan);
        return NULL;
    }
    p->plan = plan;
    return (PyObject *)p;
}

static void plan_dealloc(cprpy_plan *p)
{
    cpr_recovery_plan_destroy(p->plan);
    PyObject_Free(p);
}

static PyObject *plan_get_action(cprpy_plan *p, void *u)
{
    (void)u;
    return PyUnicode_FromString(cpr_plan_action_name(cpr_recovery_plan_action(p->plan)));
}

static PyObject *plan_get_problems(cprpy_plan *p, void *u)
{
    (void)u;
    static const struct {
        unsigned bit;
        const char *name;
    } bits[] = {{CPR_PLAN_NO_CUT, "no_cut"},
                {CPR_PLAN_SHARD_UNSAVED, "shard_unsaved"},
                {CPR_PLAN_DENSE_UNSAVED, "dense_unsaved"},
                {CPR_PLAN_RESHARDED, "resharded"}};
    unsigned v = cpr_recovery_plan_problems(p->plan);
    PyObject *l = PyList_New(0);
    for (size_t i = 0; l && i < sizeof bits / sizeof bits[0]; i++) {
        if (!(v & bits[i].bit))
            continue;
        PyObject *s = PyUnicode_FromString(bits[i].name);
        if (!s || PyList_Append(l, s) < 0)
            Py_CLEAR(l);
        Py_XDECREF(s);
    }
    return l;
}

static PyObject *plan_get_cut(cprpy_plan *p, void *u)
{
    (void)u;
    return PyLong_FromUnsignedLongLong(cpr_recovery_plan_cut(p->plan));
}

static PyObject *plan_get_rewind(cprpy_plan *p, void *u)
{
    (void)u;
    return PyLong_FromUnsignedLongLong(cpr_recovery_plan_rewind_step(p->plan));
}

static PyObject *plan_get_reason(cprpy_plan *p, void *u)
{
    (void)u;
    return PyUnicode_FromString(cpr_recovery_plan_reason(p->plan));
}

static PyObject *plan_get_shards(cprpy_plan *p, void *u)
{
    (void)u;
    size_t n = cpr_recovery_plan_count(p->plan);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        const cpr_plan_shard *s = cpr_recovery_plan_shard(p->plan, i);
        PyObject *o = PyStructSequence_New(cprpy_PlanShardType);
        if (!o) {
            Py_CLEAR(l);
            break;
        }
        PyStructSequence_SetItem(o, 0, PyLong_FromUnsignedLong(s->shard));
        PyStructSequence_SetItem(o, 1, PyUnicode_FromString(cpr_shard_source_name(s->source)));
        PyStructSequence_SetItem(o, 2, PyLong_FromUnsignedLongLong(s->as_of));
        PyStructSequence_SetItem(o, 3, PyUnicode_FromString(cpr_kind_name(s->kind)));
        PyStructSequence_SetItem(o, 4, PyLong_FromUnsignedLongLong(s->step));
        PyStructSequence_SetItem(o, 5, PyUnicode_FromString(cpr_dense_source_name(s->dense)));
        PyStructSequence_SetItem(o, 6, PyLong_FromUnsignedLongLong(s->dense_checkpoint));
        PyStructSequence_SetItem(o, 7, PyLong_FromUnsignedLong(s->dense_shard));
        PyList_SET_ITEM(l, (Py_ssize_t)i, o);
        if (PyErr_Occurred())
            Py_CLEAR(l);
    }
    return l;
}

static PyObject *plan_encode(cprpy_plan *p, PyObject *u)
{
    (void)u;
    void *buf = NULL;
    size_t len = 0;
    cpr_status st = cpr_recovery_plan_encode(p->plan, &buf, &len);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    PyObject *b = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return b;
}

static PyObject *plan_decode(PyObject *cls, PyObject *arg)
{
    (void)cls;
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    cpr_recovery_plan *plan = NULL;
    cpr_status st = cpr_recovery_plan_decode(b.buf, (size_t)b.len, &plan);
    PyBuffer_Release(&b);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    return cprpy_plan_wrap(plan);
}

static PyObject *plan_repr(cprpy_plan *p)
{
    return PyUnicode_FromFormat("cpr.Plan(action=%s, cut=%llu, shards=%zu)",
                                cpr_plan_action_name(cpr_recovery_plan_action(p->plan)),
                                (unsigned long long)cpr_recovery_plan_cut(p->plan),
                                cpr_recovery_plan_count(p->plan));
}

static PyGetSetDef plan_getset[] = {
    {"action", (getter)plan_get_action, NULL,
     "'partial', 'full' or 'restart-from-scratch' (cpr_plan_action_name).", NULL},
    {"problems", (getter)plan_get_problems, NULL,
     "Why the plan is not the one asked for: a list of 'no_cut', 'shard_unsaved', "
     "'dense_unsaved', 'resharded'.",
     NULL},
    {"cut", (getter)plan_get_cut, NULL, "full: the consistent cut; else 0.", NULL},
    {"rewind_step", (getter)plan_get_rewind, NULL, "full: the step to rewind to; else 0.", NULL},
    {"reason", (getter)plan_get_reason, NULL, "The decision and the numbers behind it.", NULL},
    {"shards", (getter)plan_get_shards, NULL, "One PlanShard per shard, in order.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef plan_methods[] = {
    {"encode", (PyCFunction)plan_encode, METH_NOARGS,
     "encode() -> bytes: the plan as a recovery record (versioned JSON)."},
    {"decode", (PyCFunction)plan_decode, METH_O | METH_CLASS,
     "Plan.decode(data) -> Plan: the inverse of encode; InvalidArgumentError for bytes that "
     "are not a plan."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject cprpy_PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cpr.Plan",
    .tp_basicsize = sizeof(cprpy_plan),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_repr = (reprfunc)plan_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A recovery plan: what each shard restores and from where "
              "(cpr.plan_recovery, Client.decide_and_record, Client.read_recorded).",
    .tp_methods = plan_methods,
    .tp_getset = plan_getset,
};

/* The request fields plan_recovery and decide_and_record share. */
typedef struct {
    cpr_plan_request r;
    uint32_t *failed;
    cpr_part_info *parts;
} request_args;

static int parse_request(request_args *a, unsigned int num_shards, PyObject *failed,
                         PyObject *mode, int dense_replica, unsigned int dense_shard,
                         int restart_if_unsaved)
{
    memset(a, 0, sizeof *a);
    size_t nf;
    if (cprpy_u32_list(failed, "failed", &a->failed, &nf) < 0)
        return -1;
    cpr_recovery_mode m = CPR_RECOVERY_PARTIAL;
    if (mode && cprpy_parse_mode(mode, &m) < 0) {
        free(a->failed);
        return -1;
    }
    a->r.num_shards = num_shards;
    a->r.failed = a->failed;
    a->r.n_failed = nf;
    a->r.mode = m;
    a->r.dense_replica = dense_replica;
    a->r.dense_shard = dense_shard;
    a->r.restart_if_unsaved = restart_if_unsaved;
    return 0;
}

PyObject *cprpy_plan_recovery(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"parts", "num_shards", "failed", "mode", "dense_replica",
                             "dense_shard", "restart_if_unsaved", "abandoned", NULL};
    PyObject *parts, *failed = Py_None, *mode = NULL;
    unsigned int num_shards, dense_shard = 0;
    int dense_replica = 0, restart = 0;
    unsigned long long ab_after = 0, ab_through = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&|OO$pO&p(O&O&)", kwlist, &parts, cprpy_u32,
                                     &num_shards, &failed, &mode, &dense_replica, cprpy_u32,
                                     &dense_shard, &restart, cprpy_u64, &ab_after, cprpy_u64,
                                     &ab_through))
        return NULL;
    PyObject *seq = cprpy_seq_copy(parts, "parts: expected a sequence of cpr.PartInfo");
    if (!seq)
        return NULL;
    request_args a;
    if (parse_request(&a, num_shards, failed, mode, dense_replica, dense_shard, restart) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = NULL;
    a.parts = n ? calloc((size_t)n, sizeof *a.parts) : NULL;
    if (n && !a.parts) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (cprpy_part_info_from(PySequence_Fast_GET_ITEM(seq, i), &a.parts[i]) < 0)
            goto done;
    a.r.parts = a.parts;
    a.r.n_parts = (size_t)n;
    a.r.abandoned_after = ab_after;
    a.r.abandoned_through = ab_through;
    cpr_recovery_plan *plan = NULL;
    cpr_status st = cpr_recovery_plan_make(&a.r, &plan);
    out = st == CPR_OK ? cprpy_plan_wrap(plan) : cprpy_raise_status(st);
done:
    Py_DECREF(seq);
    free(a.parts);
    free(a.failed);
    return out;
}

PyObject *cprpy_client_decide_and_record(cprpy_client *c, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"job", "num_shards", "failed", "mode", "expected_generation",
                             "dense_replica", "dense_shard", "restart_if_unsaved", "abandoned",
                             NULL};
    PyObject *job, *failed = Py_None, *mode = NULL;
    const char *j;
    unsigned int num_shards, dense_shard = 0;
    unsigned long long expected = 0, ab_after = 0, ab_through = 0;
    int dense_replica = 0, restart = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "UO&|OO$O&pO&p(O&O&)", kwlist, &job, cprpy_u32,
                                     &num_shards, &failed, &mode, cprpy_u64, &expected,
                                     &dense_replica, cprpy_u32, &dense_shard, &restart, cprpy_u64,
                                     &ab_after, cprpy_u64, &ab_through))
        return NULL;
    if (cprpy_job(job, &j) < 0)
        return NULL;
    request_args a;
    if (parse_request(&a, num_shards, failed, mode, dense_replica, dense_shard, restart) < 0)
        return NULL;
    a.r.abandoned_after = ab_after;
    a.r.abandoned_through = ab_through;
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl) {
        free(a.failed);
        return NULL;
    }
    cpr_recovery_plan *plan = NULL;
    uint64_t gen = 0;
    int won = 0;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_recovery_decide_and_record(cl, j, NULL, &a.r, expected, &plan, &gen, &won);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    free(a.failed);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    PyObject *p = cprpy_plan_wrap(plan);
    if (!p)
        return NULL;
    return Py_BuildValue("(NKO)", p, (unsigned long long)gen, won ? Py_True : Py_False);
}

PyObject *cprpy_client_read_recorded(cprpy_client *c, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"job", NULL};
    PyObject *job;
    const char *j;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "U", kwlist, &job) || cprpy_job(job, &j) < 0)
        return NULL;
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl)
        return NULL;
    cpr_recovery_plan *plan = NULL;
    uint64_t gen = 0;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_recovery_read_recorded(cl, j, &gen, &plan);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    PyObject *p = plan ? cprpy_plan_wrap(plan) : Py_NewRef(Py_None);
    if (!p)
        return NULL;
    return Py_BuildValue("(KN)", (unsigned long long)gen, p);
}

int cprpy_plan_ready(PyObject *m)
{
    if (PyType_Ready(&cprpy_PlanType) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Plan", (PyObject *)&cprpy_PlanType);
}
