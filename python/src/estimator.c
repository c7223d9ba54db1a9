/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr.Estimator: the online benefit estimator (cpr_estimator, cpr/recovery.h):
 * measurements in, the recovery mode, the policy and the interval of the
 * next save out. Pure computation (no I/O): calls hold the GIL.
 */
#include "cprpy.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    cpr_estimator *est;
    int policy; /* the config's: what partial recovery saves with */
} cprpy_estimator;

static PyStructSequence_Field estimate_fields[] = {
    {"mode", "'full' or 'partial': how to recover from the next failure"},
    {"policy", "the policy of the next save (cpr.Policy)"},
    {"interval_s", "time between saves of that policy"},
    {"fraction", "rows per shard that save takes (1 for FULL)"},
    {"pls", "predicted PLS of partial recovery with the policy"},
    {"mtbf_s", NULL}, {"save_s", NULL}, {"load_s", NULL}, {"restart_s", NULL},
    {"full_overhead", "expected overhead fraction of full recovery"},
    {"partial_overhead", "expected overhead fraction of partial recovery with the policy"},
    {"benefit", "full_overhead - partial_overhead"},
    {"failures", "failures seen"},
    {"codec", "codec of the next save's PRIORITY/DELTA rows ('f32' unless choose_codec)"},
    {"quantized_restores", "restores of a row expected from those parts over the job"},
    {NULL, NULL}};
static PyStructSequence_Desc estimate_desc = {
    "cpr.Estimate", "The estimator's decision and the numbers behind it.", estimate_fields, 15};
static PyTypeObject *EstimateType;

static int est_init(cprpy_estimator *e, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"shards", "job_s", "target_pls", "prior_mtbf_s", "prior_save_s",
                             "prior_load_s", "prior_restart_s", "policy", "fraction",
                             "full_bytes", "time_unit", "max_background_share", "choose_codec",
                             "int4_max_restores", NULL};
    cpr_estimator_config c;
    memset(&c, 0, sizeof c);
    PyObject *policy = NULL;
    unsigned long long full_bytes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&dddddd|$OdO&zdpd", kwlist, cprpy_u32, &c.shards,
                                     &c.job_s, &c.target_pls, &c.prior_mtbf_s, &c.prior_save_s,
                                     &c.prior_load_s, &c.prior_restart_s, &policy, &c.fraction,
                                     cprpy_u64, &full_bytes, &c.time_unit, &c.max_background_share,
                                     &c.choose_codec, &c.int4_max_restores))
        return -1;
    if (policy && cprpy_parse_policy(policy, &c.policy) < 0)
        return -1;
    c.full_bytes = full_bytes;
    if (e->est) {
        cprpy_raise(CPR_FAILED_PRECONDITION, "the estimator is already initialised");
        return -1;
    }
    cpr_status st = cpr_estimator_create(&c, &e->est);
    if (st != CPR_OK) {
        cprpy_raise_status(st);
        return -1;
    }
    e->policy = (int)c.policy;
    return 0;
}

static void est_dealloc(cprpy_estimator *e)
{
    cpr_estimator_destroy(e->est);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyObject *done(cpr_status st)
{
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    Py_RETURN_NONE;
}

#define EST(e)                                                                            \
    do {                                                                                  \
        if (!(e)->est)                                                                    \
            return cprpy_raise(CPR_FAILED_PRECONDITION, "the estimator is not initialised"); \
    } while (0)

static PyObject *est_saved(cprpy_estimator *e, PyObject *args)
{
    double now, stall;
    PyObject *policy;
    unsigned long long bytes;
    cpr_policy p;
    EST(e);
    if (!PyArg_ParseTuple(args, "dOdO&", &now, &policy, &stall, cprpy_u64, &bytes) ||
        cprpy_parse_policy(policy, &p) < 0)
        return NULL;
    return done(cpr_estimator_saved(e->est, now, p, stall, bytes));
}

static PyObject *est_background(cprpy_estimator *e, PyObject *args)
{
    double bg, cost;
    PyObject *policy;
    cpr_policy p;
    EST(e);
    if (!PyArg_ParseTuple(args, "Odd", &policy, &bg, &cost) || cprpy_parse_policy(policy, &p) < 0)
        return NULL;
    return done(cpr_estimator_background(e->est, p, bg, cost));
}

static PyObject *est_loaded(cprpy_estimator *e, PyObject *args)
{
    double s;
    unsigned int n;
    EST(e);
    if (!PyArg_ParseTuple(args, "dO&", &s, cprpy_u32, &n))
        return NULL;
    return done(cpr_estimator_loaded(e->est, s, n));
}

static PyObject *est_restarted(cprpy_estimator *e, PyObject *args)
{
    double s;
    EST(e);
    if (!PyArg_ParseTuple(args, "d", &s))
        return NULL;
    return done(cpr_estimator_restarted(e->est, s));
}

static PyObject *est_failed(cprpy_estimator *e, PyObject *args)
{
    double now;
    EST(e);
    if (!PyArg_ParseTuple(args, "d", &now))
        return NULL;
    return done(cpr_estimator_failed(e->est, now));
}

static PyObject *est_tracked(cprpy_estimator *e, PyObject *args)
{
    double now;
    unsigned long long up, unsaved;
    EST(e);
    if (!PyArg_ParseTuple(args, "dO&O&", &now, cprpy_u64, &up, cprpy_u64, &unsaved))
        return NULL;
    return done(cpr_estimator_tracked(e->est, now, up, unsaved));
}

static PyObject *est_decide(cprpy_estimator *e, PyObject *unused)
{
    (void)unused;
    EST(e);
    cpr_estimate x;
    cpr_status st = cpr_estimator_decide(e->est, &x);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    PyObject *o = PyStructSequence_New(EstimateType);
    if (!o)
        return NULL;
    PyStructSequence_SetItem(o, 0, PyUnicode_FromString(cpr_recovery_mode_name(x.mode)));
    PyStructSequence_SetItem(o, 1, PyLong_FromLong((long)x.policy));
    const double d[] = {x.interval_s, x.fraction, x.pls, x.mtbf_s, x.save_s, x.load_s,
                        x.restart_s, x.full.overhead_frac, x.partial.overhead_frac,
                        x.benefit_frac};
    for (int i = 0; i < 10; i++)
        PyStructSequence_SetItem(o, 2 + i, PyFloat_FromDouble(d[i]));
    PyStructSequence_SetItem(o, 12, PyLong_FromUnsignedLongLong(x.failures));
    PyStructSequence_SetItem(o, 13, PyUnicode_FromString(cpr_codec_name(x.codec)));
    PyStructSequence_SetItem(o, 14, PyFloat_FromDouble(x.quantized_restores));
    if (PyErr_Occurred()) {
        Py_DECREF(o);
        return NULL;
    }
    return o;
}

static PyObject *est_recovery_mode(cprpy_estimator *e, PyObject *unused)
{
    (void)unused;
    EST(e);
    cpr_recovery_mode mode;
    cpr_status st = cpr_estimator_recovery_mode(e->est, &mode);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    return PyUnicode_FromString(cpr_recovery_mode_name(mode));
}

static PyMethodDef est_methods[] = {
    {"saved", (PyCFunction)est_saved, METH_VARARGS,
     "saved(now_s, policy, stall_s, bytes): a checkpoint of the whole job: its stall and bytes."},
    {"background", (PyCFunction)est_background, METH_VARARGS,
     "background(policy, background_s, cost_s): a landed save's background time and the "
     "training time it cost."},
    {"loaded", (PyCFunction)est_loaded, METH_VARARGS,
     "loaded(load_s, shards_loaded): a restore of that many shards took load_s."},
    {"restarted", (PyCFunction)est_restarted, METH_VARARGS,
     "restarted(restart_s): the restart/reschedule time of one failure."},
    {"failed", (PyCFunction)est_failed, METH_VARARGS, "failed(now_s): a failure."},
    {"tracked", (PyCFunction)est_tracked, METH_VARARGS,
     "tracked(now_s, update_events, unsaved_events): the trackers' totals over all shards."},
    {"decide", (PyCFunction)est_decide, METH_NOARGS,
     "decide() -> Estimate: recovery mode, policy and interval of the next save."},
    {"recovery_mode", (PyCFunction)est_recovery_mode, METH_NOARGS,
     "recovery_mode() -> str: how to recover a failure now, from the saves made: "
     "'partial' after a prioritized save, else decide().mode. Ask before failed()."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef est_members[] = {
    {"policy", T_INT, offsetof(cprpy_estimator, policy), READONLY,
     "The policy partial recovery saves with (the configuration's; cpr.Policy)."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject cprpy_EstimatorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cpr.Estimator",
    .tp_basicsize = sizeof(cprpy_estimator),
    .tp_dealloc = (destructor)est_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Estimator(shards, job_s, target_pls, prior_mtbf_s, prior_save_s, prior_load_s, "
              "prior_restart_s, *, policy='full', fraction=0.125, full_bytes=0, "
              "time_unit='s', max_background_share=0.25, choose_codec=False, "
              "int4_max_restores=10)\n\n"
              "CPR's online benefit estimator (docs/model.md): feed it measurements, and "
              "decide() chooses partial or full recovery, the policy and the interval of the "
              "next save. policy is the one partial recovery saves with. choose_codec: "
              "decide() also chooses the codec of prioritized parts from the restores a row "
              "is expected to see (docs/model.md, \"The codec\").",
    .tp_methods = est_methods,
    .tp_members = est_members,
    .tp_init = (initproc)est_init,
    .tp_new = PyType_GenericNew,
};

int cprpy_estimator_ready(PyObject *m)
{
    if (!(EstimateType = PyStructSequence_NewType(&estimate_desc)) ||
        PyModule_AddObjectRef(m, "Estimate", (PyObject *)EstimateType) < 0)
        return -1;
    if (PyType_Ready(&cprpy_EstimatorType) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Estimator", (PyObject *)&cprpy_EstimatorType);
}
