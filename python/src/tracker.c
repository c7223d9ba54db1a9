/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr.Tracker: the embedding module's trackers and row selection over a
 * table the library does not own (cpr_emb_create_tracker, cpr/embedding.h),
 * and cpr.TrackerSave, one save in progress.
 *
 * Invariants:
 *   K1  One call at a time on a tracker and its saves (`busy`, changed with
 *       the GIL held): the C tracker is used by one thread at a time.
 *   K2  A TrackerSave keeps its Tracker alive (strong reference), so its C
 *       save never outlives the tracker; `save` is NULL once it ended.
 *   K3  A TrackerSave dropped while open aborts its save; if another thread
 *       is inside the tracker then, the save waits on `orphans` and the
 *       call in flight aborts it as it leaves (an open FULL/DELTA save left
 *       behind would refuse every later one of its shard).
 */
#include "cprpy.h"

#include <stdlib.h>
#include <string.h>

#include "cpr/embedding.h"

typedef struct {
    PyObject_HEAD
    cpr_emb *t;
    int busy;
    cpr_emb_save **orphans; /* saves dropped open while busy: aborted at leave() (K3) */
    size_t n_orphans, cap_orphans;
} cprpy_tracker;

typedef struct {
    PyObject_HEAD
    cprpy_tracker *tracker; /* strong reference (K2) */
    cpr_emb_save *save;     /* NULL once committed or aborted */
    const char *ended;
} cprpy_tsave;

static PyTypeObject TrackerSaveType;

static cpr_emb *enter(cprpy_tracker *k)
{
    if (k->busy)
        return (cpr_emb *)cprpy_raise(CPR_FAILED_PRECONDITION,
                                      "the tracker is in use by another thread (a tracker is "
                                      "used by one thread at a time)");
    k->busy = 1;
    return k->t;
}

static void leave(cprpy_tracker *k)
{
    for (size_t i = 0; i < k->n_orphans; i++) /* K3 */
        cpr_emb_save_abort(k->t, k->orphans[i]);
    k->n_orphans = 0;
    k->busy = 0;
}

static int parse_track(PyObject *o, unsigned *out)
{
    static const struct {
        const char *name;
        unsigned bit;
    } bits[] = {{"mfu", CPR_TRACK_COUNTS}, {"counts", CPR_TRACK_COUNTS},
                {"delta", CPR_TRACK_DIRTY}, {"dirty", CPR_TRACK_DIRTY},
                {"ssu", CPR_TRACK_SSU},     {"topk-norm", CPR_TRACK_NORM},
                {"norm", CPR_TRACK_NORM},   {"all", CPR_TRACK_ALL}};
    *out = 0;
    PyObject *seq = PyUnicode_Check(o) ? PyTuple_Pack(1, o) : PySequence_Tuple(o);
    if (!seq)
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++) {
        const char *s = PyUnicode_Check(PyTuple_GET_ITEM(seq, i))
                            ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(seq, i))
                            : NULL;
        size_t b = 0;
        while (s && b < sizeof bits / sizeof bits[0] && strcmp(s, bits[b].name) != 0)
            b++;
        if (!s || b == sizeof bits / sizeof bits[0]) {
            Py_DECREF(seq);
            PyErr_Clear();
            cprpy_raise(CPR_INVALID_ARGUMENT, "track: give names among 'mfu', 'delta', "
                                              "'ssu', 'topk-norm' or 'all'");
            return -1;
        }
        *out |= bits[b].bit;
    }
    Py_DECREF(seq);
    return 0;
}

static int tracker_init(cprpy_tracker *k, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"rows", "num_shards", "scheme", "track", "ssu_rate",
                             "ssu_capacity", "seed", NULL};
    unsigned long long rows, cap = 0, seed = 0;
    unsigned int shards = 1;
    const char *scheme = "range";
    PyObject *track = NULL;
    double rate = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|$O&sOdO&O&", kwlist, cprpy_u64, &rows, cprpy_u32,
                                     &shards, &scheme, &track, &rate, cprpy_u64, &cap, cprpy_u64,
                                     &seed))
        return -1;
    cpr_emb_config c = {.rows = rows,
                        .num_shards = shards,
                        .ssu_rate = rate,
                        .ssu_capacity = cap,
                        .seed = seed,
                        .track = CPR_TRACK_ALL};
    if (strcmp(scheme, "range") == 0)
        c.scheme = CPR_SHARD_RANGE;
    else if (strcmp(scheme, "modulo") == 0)
        c.scheme = CPR_SHARD_MODULO;
    else {
        cprpy_raise(CPR_INVALID_ARGUMENT, "scheme: 'range' or 'modulo', not '%s'", scheme);
        return -1;
    }
    if (track && parse_track(track, &c.track) < 0)
        return -1;
    if (k->t) {
        cprpy_raise(CPR_FAILED_PRECONDITION, "the tracker is already initialised");
        return -1;
    }
    cpr_status st = cpr_emb_create_tracker(&c, &k->t);
    if (st != CPR_OK) {
        cprpy_raise_status(st);
        return -1;
    }
    return 0;
}

static void tracker_dealloc(cprpy_tracker *k)
{
    free(k->orphans);
    cpr_emb_destroy(k->t); /* saves hold a reference: none is open here (K2) */
    Py_TYPE(k)->tp_free((PyObject *)k);
}

static cpr_emb *ready(cprpy_tracker *k)
{
    if (!k->t)
        return (cpr_emb *)cprpy_raise(CPR_FAILED_PRECONDITION, "the tracker is not initialised");
    return enter(k);
}

/* Methods whose one argument is a shard: parse it and enter (K1). */
static cpr_emb *ready_with_shard(cprpy_tracker *k, PyObject *args, unsigned int *shard)
{
    if (!PyArg_ParseTuple(args, "O&", cprpy_u32, shard))
        return NULL;
    return ready(k);
}

static PyObject *tracker_observe(cprpy_tracker *k, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"indices", "sq_change", NULL};
    PyObject *indices, *sq = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &indices, &sq))
        return NULL;
    cprpy_buffer ib, sb = {0};
    if (cprpy_buffer_get(indices, CPRPY_ID, 0, "indices", &ib) < 0)
        return NULL;
    PyObject *out = NULL;
    const char *f = ib.view.format;
    if (f && (*f == '<' || *f == '=' || *f == '@'))
        f++;
    if (f && (*f == 'Q' || *f == 'L')) { /* uint64 ids: as int64 they must stay >= 0 */
        const uint64_t *v = ib.view.buf;
        for (size_t i = 0; i < ib.len; i++)
            if (v[i] > (uint64_t)INT64_MAX) {
                cprpy_raise(CPR_INVALID_ARGUMENT, "indices[%zu] is outside any table", i);
                goto out;
            }
    }
    if (sq != Py_None) {
        if (cprpy_buffer_get(sq, CPRPY_F32, 0, "sq_change", &sb) < 0)
            goto out;
        if (sb.len != ib.len) {
            cprpy_raise(CPR_INVALID_ARGUMENT, "sq_change: one value per index (%zu), got %zu",
                        ib.len, sb.len);
            goto out;
        }
    }
    cpr_emb *t = ready(k);
    if (!t)
        goto out;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_emb_observe(t, ib.view.buf, ib.len, sb.held ? sb.view.buf : NULL);
    Py_END_ALLOW_THREADS
    leave(k);
    if (st != CPR_OK)
        cprpy_raise_status(st);
    else
        out = Py_NewRef(Py_None);
out:
    cprpy_buffer_release(&ib);
    cprpy_buffer_release(&sb);
    return out;
}

static PyObject *tracker_select(cprpy_tracker *k, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"shard", "policy", "fraction", "rows", NULL};
    unsigned int shard;
    PyObject *policy;
    double fraction = 0;
    unsigned long long rows = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O|$dO&", kwlist, cprpy_u32, &shard, &policy,
                                     &fraction, cprpy_u64, &rows))
        return NULL;
    cpr_policy p;
    if (cprpy_parse_policy(policy, &p) < 0)
        return NULL;
    cpr_budget b = {.fraction = fraction, .rows = rows};
    if (p == CPR_POLICY_FULL || p == CPR_POLICY_DELTA)
        b = (cpr_budget){0}; /* ignored */
    cpr_emb *t = ready(k);
    if (!t)
        return NULL;
    size_t cap = (size_t)cpr_emb_shard_rows(t, shard);
    uint64_t *ids = malloc((cap ? cap : 1) * sizeof *ids);
    size_t n = 0;
    cpr_status st = ids ? CPR_OK : CPR_NO_MEMORY;
    if (st == CPR_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = cpr_emb_select(t, shard, p, b, ids, cap, &n);
        Py_END_ALLOW_THREADS
    }
    leave(k);
    if (st != CPR_OK) {
        free(ids);
        return st == CPR_NO_MEMORY && !ids ? PyErr_NoMemory() : cprpy_raise_status(st);
    }
    if (n < cap / 2) { /* a budget's few rows: keep no room for the whole shard */
        uint64_t *fit = realloc(ids, (n ? n : 1) * sizeof *ids);
        ids = fit ? fit : ids;
    }
    return cprpy_array_new(ids, 'Q', n, 0);
}

static PyObject *tracker_begin(cprpy_tracker *k, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"shard", "policy", "ids", NULL};
    unsigned int shard;
    PyObject *policy, *ids;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&OO", kwlist, cprpy_u32, &shard, &policy, &ids))
        return NULL;
    cpr_policy p;
    if (cprpy_parse_policy(policy, &p) < 0)
        return NULL;
    cprpy_buffer ib;
    if (cprpy_buffer_get(ids, CPRPY_ID, 0, "ids", &ib) < 0)
        return NULL;
    if (cprpy_ids_check(&ib, "ids") < 0) {
        cprpy_buffer_release(&ib);
        return NULL;
    }
    cpr_emb *t = ready(k);
    if (!t) {
        cprpy_buffer_release(&ib);
        return NULL;
    }
    cpr_emb_save *save = NULL;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_emb_save_begin(t, shard, p, ib.view.buf, ib.len, &save);
    Py_END_ALLOW_THREADS
    leave(k);
    cprpy_buffer_release(&ib);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    cprpy_tsave *s = PyObject_New(cprpy_tsave, &TrackerSaveType);
    if (!s) {
        cpr_emb_save_abort(t, save);
        return NULL;
    }
    s->tracker = (cprpy_tracker *)Py_NewRef((PyObject *)k);
    s->save = save;
    s->ended = NULL;
    return (PyObject *)s;
}

static PyObject *stats_tuple(const cpr_emb_stats *s)
{
    const uint64_t v[] = {s->update_events, s->unsaved_events, s->dirty_rows,
                          s->sampled_rows,  s->touched_rows,   s->open_saves};
    return cprpy_struct_u64(cprpy_TrackerStatsType, v, 6, NULL);
}

static PyObject *tracker_stats(cprpy_tracker *k, PyObject *args)
{
    unsigned int shard;
    cpr_emb *t = ready_with_shard(k, args, &shard);
    if (!t)
        return NULL;
    cpr_emb_stats s;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_emb_stats_get(t, shard, &s);
    Py_END_ALLOW_THREADS
    leave(k);
    return st == CPR_OK ? stats_tuple(&s) : cprpy_raise_status(st);
}

static PyObject *tracker_events(cprpy_tracker *k, PyObject *args)
{
    unsigned int shard;
    cpr_emb *t = ready_with_shard(k, args, &shard);
    if (!t)
        return NULL;
    uint64_t up = 0, unsaved = 0;
    cpr_status st = cpr_emb_events(t, shard, &up, &unsaved); /* O(1) */
    leave(k);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    return Py_BuildValue("(KK)", (unsigned long long)up, (unsigned long long)unsaved);
}

static PyObject *tracker_set_ssu_rate(cprpy_tracker *k, PyObject *args)
{
    double rate;
    if (!PyArg_ParseTuple(args, "d", &rate))
        return NULL;
    cpr_emb *t = ready(k);
    if (!t)
        return NULL;
    cpr_status st = cpr_emb_set_ssu_rate(t, rate);
    leave(k);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *tracker_wipe_shard(cprpy_tracker *k, PyObject *args)
{
    unsigned int shard;
    cpr_emb *t = ready_with_shard(k, args, &shard);
    if (!t)
        return NULL;
    uint64_t lost = 0;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_emb_wipe_shard(t, shard, &lost);
    Py_END_ALLOW_THREADS
    leave(k);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    return PyLong_FromUnsignedLongLong(lost);
}

static PyObject *tracker_restored(cprpy_tracker *k, PyObject *args)
{
    PyObject *ids;
    if (!PyArg_ParseTuple(args, "O", &ids))
        return NULL;
    cprpy_buffer ib;
    if (cprpy_buffer_get(ids, CPRPY_ID, 0, "ids", &ib) < 0)
        return NULL;
    PyObject *out = NULL;
    cpr_emb *t = cprpy_ids_check(&ib, "ids") < 0 ? NULL : ready(k);
    if (t) {
        cpr_status st;
        Py_BEGIN_ALLOW_THREADS
        st = cpr_emb_restored(t, ib.view.buf, ib.len);
        Py_END_ALLOW_THREADS
        leave(k);
        out = st == CPR_OK ? Py_NewRef(Py_None) : cprpy_raise_status(st);
    }
    cprpy_buffer_release(&ib);
    return out;
}

static PyObject *tracker_shard_of(cprpy_tracker *k, PyObject *args)
{
    unsigned long long row;
    if (!PyArg_ParseTuple(args, "O&", cprpy_u64, &row) || !k->t)
        return k->t ? NULL : cprpy_raise(CPR_FAILED_PRECONDITION, "not initialised");
    if (row >= cpr_emb_rows(k->t))
        return cprpy_raise(CPR_INVALID_ARGUMENT, "row %llu is outside the table", row);
    return PyLong_FromUnsignedLong(cpr_emb_shard_of(k->t, row));
}

static PyObject *tracker_shard_rows(cprpy_tracker *k, PyObject *args)
{
    unsigned int shard;
    if (!PyArg_ParseTuple(args, "O&", cprpy_u32, &shard) || !k->t)
        return k->t ? NULL : cprpy_raise(CPR_FAILED_PRECONDITION, "not initialised");
    return PyLong_FromUnsignedLongLong(cpr_emb_shard_rows(k->t, shard));
}

static PyObject *tracker_get_rows(cprpy_tracker *k, void *u)
{
    (void)u;
    return PyLong_FromUnsignedLongLong(k->t ? cpr_emb_rows(k->t) : 0);
}

static PyObject *tracker_get_shards(cprpy_tracker *k, void *u)
{
    (void)u;
    return PyLong_FromUnsignedLong(k->t ? cpr_emb_num_shards(k->t) : 0);
}

#define KW (PyCFunction)(void (*)(void))
static PyMethodDef tracker_methods[] = {
    {"observe", KW tracker_observe, METH_VARARGS | METH_KEYWORDS,
     "observe(indices, sq_change=None): the table updated these rows (int64 indices, any "
     "order, repeats counted as occurrences); sq_change: float32 per index, the squared "
     "update magnitude (TOPK_NORM)."},
    {"select", KW tracker_select, METH_VARARGS | METH_KEYWORDS,
     "select(shard, policy, *, fraction=0, rows=0) -> Array of uint64 ids, ascending: the rows "
     "`policy` saves (budget: a fraction of the shard or a row count; FULL and DELTA ignore "
     "it)."},
    {"begin", KW tracker_begin, METH_VARARGS | METH_KEYWORDS,
     "begin(shard, policy, ids) -> TrackerSave: the rows' tracker values go into a pending "
     "save; copy the rows out of your table before you next update it, then commit() once "
     "the checkpoint is committed, or abort()."},
    {"stats", (PyCFunction)tracker_stats, METH_VARARGS, "stats(shard) -> TrackerStats"},
    {"events", (PyCFunction)tracker_events, METH_VARARGS,
     "events(shard) -> (update_events, unsaved_events), O(1)."},
    {"set_ssu_rate", (PyCFunction)tracker_set_ssu_rate, METH_VARARGS,
     "set_ssu_rate(rate): probability an access is sampled (SSU), from now on."},
    {"wipe_shard", (PyCFunction)tracker_wipe_shard, METH_VARARGS,
     "wipe_shard(shard) -> int: the shard's node was lost: its trackers are cleared; "
     "returns the unsaved update events lost (PLS)."},
    {"restored", (PyCFunction)tracker_restored, METH_VARARGS,
     "restored(ids): these rows were written from a checkpoint: their trackers clear."},
    {"shard_of", (PyCFunction)tracker_shard_of, METH_VARARGS, "shard_of(row) -> int"},
    {"shard_rows", (PyCFunction)tracker_shard_rows, METH_VARARGS, "shard_rows(shard) -> int"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tracker_getset[] = {
    {"rows", (getter)tracker_get_rows, NULL, "Rows of the table.", NULL},
    {"num_shards", (getter)tracker_get_shards, NULL, "Shards of the table.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject cprpy_TrackerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cpr.Tracker",
    .tp_basicsize = sizeof(cprpy_tracker),
    .tp_dealloc = (destructor)tracker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Tracker(rows, *, num_shards=1, scheme='range', track='all', ssu_rate=0.01, "
              "ssu_capacity=0, seed=0)\n\n"
              "CPR's access trackers (MFU counts, DELTA's dirty rows, the SSU sample, "
              "TOPK_NORM's update magnitude, unsaved events) and row selection for a table "
              "the library does not own: the same code as its own tables "
              "(cpr_emb_create_tracker). track: names among 'mfu', 'delta', 'ssu', "
              "'topk-norm', or 'all'. Used by one thread at a time.",
    .tp_methods = tracker_methods,
    .tp_getset = tracker_getset,
    .tp_init = (initproc)tracker_init,
    .tp_new = PyType_GenericNew,
};

/* ---- TrackerSave ---- */

static PyObject *tsave_end(cprpy_tsave *s, int commit)
{
    if (!s->save) {
        if (!commit)
            Py_RETURN_NONE;
        return cprpy_raise(CPR_FAILED_PRECONDITION, "the save is %s", s->ended);
    }
    cpr_emb *t = enter(s->tracker);
    if (!t)
        return NULL;
    cpr_status st = CPR_OK;
    if (commit)
        st = cpr_emb_save_commit(t, s->save);
    else
        cpr_emb_save_abort(t, s->save);
    leave(s->tracker);
    s->save = NULL;
    s->ended = commit ? "committed" : "aborted";
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *tsave_commit(cprpy_tsave *s, PyObject *u)
{
    (void)u;
    return tsave_end(s, 1);
}

static PyObject *tsave_abort(cprpy_tsave *s, PyObject *u)
{
    (void)u;
    return tsave_end(s, 0);
}

static PyObject *tsave_get_ids(cprpy_tsave *s, void *u)
{
    (void)u;
    if (!s->save)
        return cprpy_raise(CPR_FAILED_PRECONDITION, "the save is %s", s->ended);
    size_t n = cpr_emb_save_rows(s->save);
    uint64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return PyErr_NoMemory();
    memcpy(ids, cpr_emb_save_ids(s->save), n * sizeof *ids);
    return cprpy_array_new(ids, 'Q', n, 0);
}

static PyObject *tsave_get_state(cprpy_tsave *s, void *u)
{
    (void)u;
    return PyUnicode_FromString(s->save ? "open" : s->ended);
}

static void tsave_dealloc(cprpy_tsave *s)
{
    cprpy_tracker *k = s->tracker;
    if (s->save && !k->busy) {
        cpr_emb_save_abort(k->t, s->save);
    } else if (s->save) { /* K3: the call in flight aborts it as it leaves */
        if (k->n_orphans == k->cap_orphans) {
            size_t cap = k->cap_orphans ? 2 * k->cap_orphans : 8;
            cpr_emb_save **o = realloc(k->orphans, cap * sizeof *o);
            if (o) {
                k->orphans = o;
                k->cap_orphans = cap;
            }
        }
        if (k->n_orphans < k->cap_orphans)
            k->orphans[k->n_orphans++] = s->save;
        /* else: no memory; the save stays open until the tracker goes */
    }
    Py_XDECREF(s->tracker);
    PyObject_Free(s);
}

static PyMethodDef tsave_methods[] = {
    {"commit", (PyCFunction)tsave_commit, METH_NOARGS,
     "commit(): the checkpoint holding the rows committed: their pending tracker values go."},
    {"abort", (PyCFunction)tsave_abort, METH_NOARGS,
     "abort(): the save failed: the pending tracker values return to the rows."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tsave_getset[] = {
    {"ids", (getter)tsave_get_ids, NULL, "The save's row ids (a copy), ascending.", NULL},
    {"state", (getter)tsave_get_state, NULL, "'open', 'committed' or 'aborted'.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TrackerSaveType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cpr.TrackerSave",
    .tp_basicsize = sizeof(cprpy_tsave),
    .tp_dealloc = (destructor)tsave_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A save of a Tracker's rows in progress (Tracker.begin). Dropped while open, "
              "it aborts.",
    .tp_methods = tsave_methods,
    .tp_getset = tsave_getset,
};

int cprpy_tracker_ready(PyObject *m)
{
    if (PyType_Ready(&cprpy_TrackerType) < 0 || PyType_Ready(&TrackerSaveType) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "Tracker", (PyObject *)&cprpy_TrackerType) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "TrackerSave", (PyObject *)&TrackerSaveType);
}
