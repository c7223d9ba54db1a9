/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr._cpr: the module, the exception hierarchy, buffer handling and
 * cpr._cpr.Array (memory the module allocated, handed to Python by the
 * buffer protocol: numpy.asarray(a) and torch.from_numpy(numpy.asarray(a))
 * use it in place). See cprpy.h for the rules every entry point follows.
 */
#include "cprpy.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpr/codec.h"
#include "cpr/types.h"

/* ---- exceptions ---------------------------------------------------------- */

PyObject *cprpy_Error;
static PyObject *status_class[CPR_STATUS_COUNT_];

/* Class name, builtin base (NULL: none) and doc of each status's exception. */
static const struct {
    cpr_status st;
    const char *name;
    PyObject **base;
    const char *doc;
} ERRORS[] = {
    {CPR_INVALID_ARGUMENT, "InvalidArgumentError", &PyExc_ValueError,
     "A malformed or inconsistent request: the message says what to fix."},
    {CPR_NOT_FOUND, "NotFoundError", &PyExc_LookupError,
     "An unknown job, part, blob or checkpoint."},
    {CPR_ALREADY_EXISTS, "AlreadyExistsError", NULL,
     "The part or checkpoint id is taken (ids only grow per shard)."},
    {CPR_FAILED_PRECONDITION, "FailedPreconditionError", NULL,
     "The request is valid but not in this state (a closed client, a committed part, "
     "a checkpoint below the retention floor, ...)."},
    {CPR_CORRUPT, "CorruptError", NULL, "A checksum mismatch or a damaged record."},
    {CPR_IO, "IOFailureError", &PyExc_OSError, "The operating system refused an I/O."},
    {CPR_UNAVAILABLE, "UnavailableError", &PyExc_ConnectionError,
     "ckptd is unreachable or shutting down."},
    {CPR_TIMEOUT, "TimeoutError", &PyExc_TimeoutError, "A deadline passed."},
    {CPR_NO_MEMORY, "NoMemoryError", &PyExc_MemoryError, "An allocation failed."},
    {CPR_RESOURCE_EXHAUSTED, "ResourceExhaustedError", NULL,
     "Too large, disk full or a limit reached."},
    {CPR_CUDA, "CudaError", NULL, "A CUDA runtime call failed."},
    {CPR_INTERNAL, "InternalError", NULL, "A broken invariant inside CPR (a bug: report it)."},
    {CPR_UNAUTHENTICATED, "UnauthenticatedError", &PyExc_PermissionError,
     "No credentials, or a token or certificate the daemon does not know."},
    {CPR_PERMISSION_DENIED, "PermissionDeniedError", &PyExc_PermissionError,
     "The credentials lack the right for this job, or the part belongs to another writer."},
};

PyObject *cprpy_error_class(cpr_status st)
{
    if ((int)st > 0 && (int)st < CPR_STATUS_COUNT_ && status_class[st])
        return status_class[st];
    return cprpy_Error;
}

static PyObject *raise_msg(cpr_status st, const char *msg)
{
    PyObject *cls = cprpy_error_class(st);
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong((long)st);
    PyObject *name = PyUnicode_FromString(cpr_status_name(st));
    int bad = !code || !name || PyObject_SetAttrString(exc, "status", code) < 0 ||
              PyObject_SetAttrString(exc, "status_name", name) < 0;
    Py_XDECREF(code);
    Py_XDECREF(name);
    if (bad) {
        Py_DECREF(exc);
        return NULL;
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *cprpy_raise_status(cpr_status st)
{
    /* A copy: making the exception may run a dealloc that calls CPR (a
     * garbage-collected Part aborting), which would overwrite cpr_errmsg(). */
    char m[1024];
    snprintf(m, sizeof m, "%s", *cpr_errmsg() ? cpr_errmsg() : cpr_status_name(st));
    return raise_msg(st, m);
}

PyObject *cprpy_raise(cpr_status st, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return raise_msg(st, buf);
}

static int add_errors(PyObject *m)
{
    cprpy_Error = PyErr_NewExceptionWithDoc(
        "cpr.Error",
        "Base of every error CPR reports. `status` is the cpr_status code (an int), "
        "`status_name` its name (\"CPR_NOT_FOUND\", ...); str() is the message, which "
        "says what to fix.",
        NULL, NULL);
    if (!cprpy_Error || PyModule_AddObjectRef(m, "Error", cprpy_Error) < 0)
        return -1;
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++) {
        char qual[96];
        snprintf(qual, sizeof qual, "cpr.%s", ERRORS[i].name);
        PyObject *bases = ERRORS[i].base ? PyTuple_Pack(2, cprpy_Error, *ERRORS[i].base)
                                         : PyTuple_Pack(1, cprpy_Error);
        if (!bases)
            return -1;
        PyObject *cls = PyErr_NewExceptionWithDoc(qual, ERRORS[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!cls)
            return -1;
        /* On the class too: an error raised by Python code (cpr.torch) has
         * them as well as one raised here (raise_msg sets the instance's). */
        PyObject *code = PyLong_FromLong((long)ERRORS[i].st);
        PyObject *name = PyUnicode_FromString(cpr_status_name(ERRORS[i].st));
        int bad = !code || !name || PyObject_SetAttrString(cls, "status", code) < 0 ||
                  PyObject_SetAttrString(cls, "status_name", name) < 0;
        Py_XDECREF(code);
        Py_XDECREF(name);
        if (bad) {
            Py_DECREF(cls);
            return -1;
        }
        status_class[ERRORS[i].st] = cls; /* the module keeps a reference too */
        if (PyModule_AddObjectRef(m, ERRORS[i].name, cls) < 0)
            return -1;
    }
    return 0;
}

/* ---- buffers --------------------------------------------------------------- */

/* A torch tensor exports no buffer: its .numpy() (after .detach(), which
 * shares storage) is a zero-copy view of a CPU tensor. */
/* o's str (as_str) or repr as UTF-8 for a message, or "?"; never leaves an
 * error set. *hold gets the string object, to release after use. */
static const char *describe(PyObject *o, int as_str, PyObject **hold)
{
    *hold = as_str ? PyObject_Str(o) : PyObject_Repr(o);
    const char *s = *hold ? PyUnicode_AsUTF8(*hold) : NULL;
    if (!s) {
        PyErr_Clear();
        return "?";
    }
    return s;
}

static PyObject *tensor_as_array(PyObject *obj)
{
    if (!PyObject_HasAttrString(obj, "numpy") || !PyObject_HasAttrString(obj, "detach"))
        return NULL;
    PyObject *d = PyObject_CallMethod(obj, "detach", NULL);
    if (!d)
        return NULL;
    PyObject *a = PyObject_CallMethod(d, "numpy", NULL);
    Py_DECREF(d);
    return a;
}

int cprpy_buffer_get(PyObject *obj, cprpy_dtype dtype, int writable, const char *what,
                     cprpy_buffer *out)
{
    memset(out, 0, sizeof *out);
    int flags = PyBUF_RECORDS_RO | (writable ? PyBUF_WRITABLE : 0);
    PyObject *src = obj;
    if (!PyObject_CheckBuffer(obj)) {
        out->holder = tensor_as_array(obj);
        if (!out->holder) {
            if (PyErr_Occurred()) {
                /* .numpy() refused (a CUDA tensor, say): say so with its reason. */
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyObject *s = NULL;
                const char *why = value ? describe(value, 1, &s) : "?";
                cprpy_raise(CPR_INVALID_ARGUMENT,
                            "%s: a %s cannot be read in place (%s); pass a CPU tensor or a "
                            "NumPy array",
                            what, Py_TYPE(obj)->tp_name, why);
                Py_XDECREF(s);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                return -1;
            }
            PyErr_Format(PyExc_TypeError,
                         "%s: expected an array (a NumPy array, a CPU torch tensor or "
                         "any object with the buffer protocol), got %s",
                         what, Py_TYPE(obj)->tp_name);
            return -1;
        }
        src = out->holder;
    }
    if (PyObject_GetBuffer(src, &out->view, flags) < 0) {
        if (writable) {
            /* Readable but not writable: say so (NumPy raises ValueError,
             * others BufferError). */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            Py_buffer ro;
            if (PyObject_GetBuffer(src, &ro, PyBUF_RECORDS_RO) == 0) {
                PyBuffer_Release(&ro);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                Py_CLEAR(out->holder);
                cprpy_raise(CPR_INVALID_ARGUMENT,
                            "%s: the array is read-only; pass a writable one", what);
                return -1;
            }
            PyErr_Clear();
            PyErr_Restore(type, value, tb);
        }
        Py_CLEAR(out->holder);
        return -1;
    }
    out->held = 1;
    const char *f = out->view.format ? out->view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    int ok;
    const char *want;
    if (dtype == CPRPY_F32) {
        ok = strcmp(f, "f") == 0 && out->view.itemsize == 4;
        want = "float32";
    } else if (dtype == CPRPY_U8) {
        ok = (strcmp(f, "B") == 0 || strcmp(f, "?") == 0 || strcmp(f, "b") == 0) &&
             out->view.itemsize == 1;
        want = "uint8 or bool";
    } else {
        ok = (strcmp(f, "q") == 0 || strcmp(f, "Q") == 0 || strcmp(f, "l") == 0 ||
              strcmp(f, "L") == 0) &&
             out->view.itemsize == 8;
        want = "int64 or uint64";
    }
    if (!ok) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "%s: dtype must be %s, got format '%s' of %zd bytes",
                    what, want, f, out->view.itemsize);
        cprpy_buffer_release(out);
        return -1;
    }
    if (!PyBuffer_IsContiguous(&out->view, 'C')) {
        cprpy_raise(CPR_INVALID_ARGUMENT,
                    "%s: the array must be C-contiguous (numpy.ascontiguousarray or "
                    "tensor.contiguous())",
                    what);
        cprpy_buffer_release(out);
        return -1;
    }
    if (out->view.ndim > 2) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "%s: expected 1 or 2 dimensions, got %d", what,
                    out->view.ndim);
        cprpy_buffer_release(out);
        return -1;
    }
    out->ndim = out->view.ndim;
    out->len = (size_t)(out->view.len / out->view.itemsize);
    if (out->ndim == 2) {
        out->rows = (size_t)out->view.shape[0];
        out->cols = (size_t)out->view.shape[1];
    } else {
        out->rows = out->len;
        out->cols = 0;
    }
    return 0;
}

void cprpy_buffer_release(cprpy_buffer *b)
{
    if (b->held)
        PyBuffer_Release(&b->view);
    b->held = 0;
    Py_CLEAR(b->holder);
}

int cprpy_ids_check(const cprpy_buffer *b, const char *what)
{
    const char *f = b->view.format ? b->view.format : "q";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (*f == 'Q' || *f == 'L')
        return 0;
    const int64_t *ids = b->view.buf;
    for (size_t i = 0; i < b->len; i++)
        if (ids[i] < 0) {
            cprpy_raise(CPR_INVALID_ARGUMENT, "%s[%zu] is %lld: row ids are >= 0", what, i,
                        (long long)ids[i]);
            return -1;
        }
    return 0;
}

/* ---- cpr._cpr.Array ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    void *data;
    char format[2];
    Py_ssize_t shape[2];
    Py_ssize_t strides[2];
    int ndim;
    Py_ssize_t itemsize;
    Py_ssize_t exports;
} cprpy_array;

static void array_dealloc(cprpy_array *a)
{
    free(a->data);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

static int array_getbuffer(cprpy_array *a, Py_buffer *view, int flags)
{
    (void)flags; /* always C-contiguous, writable, with format and shape */
    view->buf = a->data;
    view->obj = Py_NewRef((PyObject *)a);
    view->itemsize = a->itemsize;
    view->len = a->itemsize * a->shape[0] * (a->ndim == 2 ? a->shape[1] : 1);
    view->readonly = 0;
    view->format = a->format;
    view->ndim = a->ndim;
    view->shape = a->shape;
    view->strides = a->strides;
    view->suboffsets = NULL;
    view->internal = NULL;
    a->exports++;
    return 0;
}

static void array_releasebuffer(cprpy_array *a, Py_buffer *view)
{
    (void)view;
    a->exports--;
}

static Py_ssize_t array_len(cprpy_array *a) { return a->shape[0]; }

static PyObject *array_repr(cprpy_array *a)
{
    if (a->ndim == 2)
        return PyUnicode_FromFormat("cpr.Array(format='%s', shape=(%zd, %zd))", a->format,
                                    a->shape[0], a->shape[1]);
    return PyUnicode_FromFormat("cpr.Array(format='%s', shape=(%zd,))", a->format, a->shape[0]);
}

static PyObject *array_get_shape(cprpy_array *a, void *unused)
{
    (void)unused;
    return a->ndim == 2 ? Py_BuildValue("(nn)", a->shape[0], a->shape[1])
                        : Py_BuildValue("(n)", a->shape[0]);
}

static PyObject *array_get_format(cprpy_array *a, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(a->format);
}

static PyBufferProcs array_as_buffer = {(getbufferproc)array_getbuffer,
                                        (releasebufferproc)array_releasebuffer};
static PySequenceMethods array_as_sequence = {.sq_length = (lenfunc)array_len};
static PyGetSetDef array_getset[] = {
    {"shape", (getter)array_get_shape, NULL, "Shape: (n,) or (n, cols).", NULL},
    {"format", (getter)array_get_format, NULL,
     "Struct format of an element: 'f' (float32), 'Q' (uint64) or 'q' (int64).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cpr.Array",
    .tp_basicsize = sizeof(cprpy_array),
    .tp_dealloc = (destructor)array_dealloc,
    .tp_repr = (reprfunc)array_repr,
    .tp_as_buffer = &array_as_buffer,
    .tp_as_sequence = &array_as_sequence,
    .tp_getset = array_getset,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Rows the library allocated (restored ids, values or state), shared by the "
              "buffer protocol: numpy.asarray(a) and memoryview(a) use the memory in place.",
};

PyObject *cprpy_array_new(void *data, char format, size_t n, size_t cols)
{
    cprpy_array *a = PyObject_New(cprpy_array, &ArrayType);
    if (!a) {
        free(data);
        return NULL;
    }
    a->data = data;
    a->format[0] = format;
    a->format[1] = 0;
    a->itemsize = format == 'f' ? 4 : 8; /* 'f', or 'Q' / 'q' */
    a->ndim = cols ? 2 : 1;
    a->shape[0] = (Py_ssize_t)n;
    a->shape[1] = (Py_ssize_t)cols;
    a->strides[0] = a->itemsize * (cols ? (Py_ssize_t)cols : 1);
    a->strides[1] = a->itemsize;
    a->exports = 0;
    return (PyObject *)a;
}

/* ---- argument helpers -------------------------------------------------------------- */

/* An enum given as its number or as its name (case-insensitive); the names
 * are the library's own (name(i), NULL for a number that is not a value). */
static int parse_enum(PyObject *o, const char *what, const char *(*name)(int), int count,
                      int *out)
{
    if (PyIndex_Check(o) && !PyUnicode_Check(o)) {
        PyObject *i = PyNumber_Index(o);
        long v = i ? PyLong_AsLong(i) : -1;
        Py_XDECREF(i);
        if (v == -1 && PyErr_Occurred())
            PyErr_Clear(); /* too large: refused below, as any other value */
        else if (v >= 0 && v < count && name((int)v)) {
            *out = (int)v;
            return 0;
        }
    } else if (PyUnicode_Check(o)) {
        const char *s = PyUnicode_AsUTF8(o);
        if (!s)
            return -1;
        for (int i = 0; i < count; i++)
            if (name(i) && strcasecmp(s, name(i)) == 0) {
                *out = i;
                return 0;
            }
    }
    char list[256] = "";
    for (int i = 0; i < count; i++)
        if (name(i)) {
            strncat(list, list[0] ? ", " : "", sizeof list - strlen(list) - 1);
            strncat(list, name(i), sizeof list - strlen(list) - 1);
        }
    PyObject *r = NULL;
    const char *shown = describe(o, 0, &r);
    cprpy_raise(CPR_INVALID_ARGUMENT, "%s: %s is not one of %s", what, shown, list);
    Py_XDECREF(r);
    return -1;
}

static const char *kind_name(int i)
{
    return i >= CPR_KIND_FULL && i <= CPR_KIND_PRIORITY ? cpr_kind_name((cpr_kind)i) : NULL;
}

static const char *policy_name(int i) { return cpr_policy_name((cpr_policy)i); }
static const char *mode_name(int i) { return cpr_recovery_mode_name((cpr_recovery_mode)i); }
static const char *codec_name(int i) { return cpr_codec_name((cpr_codec)i); }

int cprpy_parse_kind(PyObject *o, cpr_kind *out)
{
    int v;
    if (parse_enum(o, "kind", kind_name, CPR_KIND_PRIORITY + 1, &v) < 0)
        return -1;
    *out = (cpr_kind)v;
    return 0;
}

int cprpy_parse_policy(PyObject *o, cpr_policy *out)
{
    int v;
    if (parse_enum(o, "policy", policy_name, CPR_POLICY_TOPK_NORM + 1, &v) < 0)
        return -1;
    *out = (cpr_policy)v;
    return 0;
}

int cprpy_parse_mode(PyObject *o, cpr_recovery_mode *out)
{
    int v;
    if (parse_enum(o, "mode", mode_name, CPR_RECOVERY_PARTIAL + 1, &v) < 0)
        return -1;
    *out = (cpr_recovery_mode)v;
    return 0;
}

int cprpy_parse_codec(PyObject *o, cpr_codec *out)
{
    int v;
    if (parse_enum(o, "codec", codec_name, CPR_CODEC_INT4 + 1, &v) < 0)
        return -1;
    *out = (cpr_codec)v;
    return 0;
}

PyObject *cprpy_seq_copy(PyObject *o, const char *what)
{
    PyObject *t = PySequence_Tuple(o); /* any iterable, as PySequence_Fast took */
    if (!t && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, what);
    }
    return t;
}

int cprpy_u32_list(PyObject *o, const char *what, uint32_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!o || o == Py_None)
        return 0;
    PyObject *seq = cprpy_seq_copy(o, what);
    if (!seq)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    uint32_t *v = len ? malloc((size_t)len * sizeof *v) : NULL;
    if (len && !v) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *idx = PyIndex_Check(item) ? PyNumber_Index(item) : NULL; /* NumPy ints */
        unsigned long x = idx ? PyLong_AsUnsignedLong(idx) : (unsigned long)-1;
        Py_XDECREF(idx);
        if (!idx || (x == (unsigned long)-1 && PyErr_Occurred()) || x > UINT32_MAX) {
            PyErr_Clear();
            free(v);
            Py_DECREF(seq);
            cprpy_raise(CPR_INVALID_ARGUMENT, "%s[%zd]: expected an int in [0, 2^32)", what, i);
            return -1;
        }
        v[i] = (uint32_t)x;
    }
    Py_DECREF(seq);
    *out = v;
    *n = (size_t)len;
    return 0;
}

/* "O&" converters for unsigned arguments: PyArg's "K" and "I" wrap -1 into
 * 2^64 - 1 silently, and a checkpoint id of 2^64 - 1 would end a shard's
 * ids for ever (ids only grow). */
static int conv_unsigned(PyObject *o, unsigned long long max, unsigned long long *v)
{
    /* An int, or what stands for one (__index__: NumPy's integer scalars). */
    PyObject *i = PyIndex_Check(o) ? PyNumber_Index(o) : NULL;
    if (!i) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "expected an int, got %s", Py_TYPE(o)->tp_name);
        return 0;
    }
    *v = PyLong_AsUnsignedLongLong(i);
    Py_DECREF(i);
    if ((*v == (unsigned long long)-1 && PyErr_Occurred()) || *v > max) {
        PyErr_Clear();
        PyObject *r = NULL;
        const char *shown = describe(o, 0, &r);
        cprpy_raise(CPR_INVALID_ARGUMENT, "%s is not an int in [0, %llu]", shown, max);
        Py_XDECREF(r);
        return 0;
    }
    return 1;
}

int cprpy_u64(PyObject *o, void *out)
{
    unsigned long long v;
    if (!conv_unsigned(o, ULLONG_MAX, &v))
        return 0;
    *(unsigned long long *)out = v;
    return 1;
}

int cprpy_u32(PyObject *o, void *out)
{
    unsigned long long v;
    if (!conv_unsigned(o, UINT_MAX, &v))
        return 0;
    *(unsigned int *)out = (unsigned int)v;
    return 1;
}

int cprpy_job(PyObject *o, const char **out)
{
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "job: expected str, got %s", Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(o, &len);
    if (!s)
        return -1;
    if ((size_t)len != strlen(s)) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "job: a name may not contain NUL characters");
        return -1;
    }
    *out = s;
    return 0;
}

/* ---- struct sequences ------------------------------------------------------------- */

PyTypeObject *cprpy_PartInfoType, *cprpy_RestoreResultType, *cprpy_GcReportType,
    *cprpy_VerifyReportType, *cprpy_StatsType, *cprpy_ProgressType, *cprpy_PlanShardType,
    *cprpy_RestoredTableType, *cprpy_TrackerStatsType;

static PyStructSequence_Field part_info_fields[] = {
    {"shard", NULL}, {"checkpoint", NULL}, {"kind", "\"FULL\", \"DELTA\" or \"PRIORITY\""},
    {"step", NULL}, {"num_shards", NULL}, {"base", "DELTA base, 0 otherwise"},
    {"rows", NULL}, {"bytes", "payload bytes: ids, values, state, blobs"},
    {"committed", NULL}, {"consistent", "committed FULL, or DELTA with a complete chain"},
    {"codecs", "the codecs its row blocks use, e.g. ('int8',); () for none"},
    {NULL, NULL}};
static PyStructSequence_Field restore_result_fields[] = {
    {"as_of", "the checkpoint id the state is as of"}, {"rows", NULL},
    {"bytes", "ids + values + state bytes delivered"}, {NULL, NULL}};
static PyStructSequence_Field gc_fields[] = {
    {"floor", NULL}, {"parts_removed", NULL}, {"versions_removed", NULL},
    {"uncommitted_removed", NULL}, {"bytes_before", NULL}, {"bytes_after", NULL}, {NULL, NULL}};
static PyStructSequence_Field verify_fields[] = {
    {"rows_checked", NULL}, {"blobs_checked", NULL}, {"bytes_checked", NULL},
    {"problems", "number of problems"}, {"details", "list of (what, where) strings"},
    {NULL, NULL}};
static PyStructSequence_Field stats_fields[] = {
    {"jobs", NULL}, {"parts_committed", NULL}, {"parts_open", NULL}, {"rows_in", NULL},
    {"bytes_in", NULL}, {"rows_out", NULL}, {"bytes_out", NULL}, {"store_bytes", NULL},
    {"errors", "dict: status name -> failed calls (non-zero only)"}, {NULL, NULL}};
static PyStructSequence_Field progress_fields[] = {
    {"rows_queued", NULL}, {"bytes_queued", NULL}, {"rows_sent", NULL}, {"bytes_sent", NULL},
    {"error", "status name of the error that failed the stream, or None"}, {NULL, NULL}};
static PyStructSequence_Field plan_shard_fields[] = {
    {"shard", NULL}, {"source", "\"keep\", \"store\" or \"init\""},
    {"as_of", "store: restore as of this checkpoint id"}, {"kind", NULL}, {"step", NULL},
    {"dense", "\"keep\", \"replica\", \"blob\" or \"init\""}, {"dense_checkpoint", NULL},
    {"dense_shard", NULL}, {NULL, NULL}};
static PyStructSequence_Field restored_table_fields[] = {
    {"ids", "cpr.Array of uint64, (n,)"}, {"values", "cpr.Array of float32, (n, dim)"},
    {"state", "cpr.Array of float32, (n, state_dim), or None when state_dim is 0"},
    {NULL, NULL}};
static PyStructSequence_Field tracker_stats_fields[] = {
    {"update_events", NULL}, {"unsaved_events", NULL}, {"dirty_rows", NULL},
    {"sampled_rows", NULL}, {"touched_rows", NULL}, {"open_saves", NULL}, {NULL, NULL}};

static PyTypeObject *new_struct(PyObject *m, const char *name, const char *doc,
                                PyStructSequence_Field *fields)
{
    int n = 0;
    while (fields[n].name)
        n++;
    PyStructSequence_Desc desc = {(char *)name, (char *)doc, fields, n};
    PyTypeObject *t = PyStructSequence_NewType(&desc);
    if (!t)
        return NULL;
    const char *dot = strrchr(name, '.');
    if (PyModule_AddObjectRef(m, dot ? dot + 1 : name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

PyObject *cprpy_struct_u64(PyTypeObject *type, const uint64_t *v, int n, PyObject *last)
{
    PyObject *o = PyStructSequence_New(type);
    if (!o) {
        Py_XDECREF(last);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        PyStructSequence_SetItem(o, i, PyLong_FromUnsignedLongLong(v[i]));
    if (last)
        PyStructSequence_SetItem(o, n, last);
    if (PyErr_Occurred()) {
        Py_DECREF(o);
        return NULL;
    }
    return o;
}

PyObject *cprpy_part_info(const cpr_part_info *p)
{
    PyObject *o = PyStructSequence_New(cprpy_PartInfoType);
    if (!o)
        return NULL;
    PyStructSequence_SetItem(o, 0, PyLong_FromUnsignedLong(p->shard));
    PyStructSequence_SetItem(o, 1, PyLong_FromUnsignedLongLong(p->checkpoint));
    PyStructSequence_SetItem(o, 2, PyUnicode_FromString(cpr_kind_name(p->kind)));
    PyStructSequence_SetItem(o, 3, PyLong_FromUnsignedLongLong(p->step));
    PyStructSequence_SetItem(o, 4, PyLong_FromUnsignedLong(p->num_shards));
    PyStructSequence_SetItem(o, 5, PyLong_FromUnsignedLongLong(p->base));
    PyStructSequence_SetItem(o, 6, PyLong_FromUnsignedLongLong(p->rows));
    PyStructSequence_SetItem(o, 7, PyLong_FromUnsignedLongLong(p->bytes));
    PyStructSequence_SetItem(o, 8, PyBool_FromLong(p->committed));
    PyStructSequence_SetItem(o, 9, PyBool_FromLong(p->consistent));
    PyObject *names = PyList_New(0), *codecs = NULL;
    for (int c = CPR_CODEC_F32; c <= CPR_CODEC_INT4 && names; c++) {
        if (!(p->codecs & (1u << c)))
            continue;
        PyObject *name = PyUnicode_FromString(cpr_codec_name((cpr_codec)c));
        if (!name || PyList_Append(names, name) < 0)
            Py_CLEAR(names);
        Py_XDECREF(name);
    }
    if (names)
        codecs = PyList_AsTuple(names);
    Py_XDECREF(names);
    PyStructSequence_SetItem(o, 10, codecs);
    if (PyErr_Occurred()) {
        Py_DECREF(o);
        return NULL;
    }
    return o;
}

int cprpy_part_info_from(PyObject *o, cpr_part_info *out)
{
    PyObject *seq = cprpy_seq_copy(o, "a part: expected a cpr.PartInfo or a 10-sequence");
    if (!seq)
        return -1;
    int rc = -1; /* the 11th field, codecs, does not matter to a plan */
    if (PySequence_Fast_GET_SIZE(seq) != 10 && PySequence_Fast_GET_SIZE(seq) != 11) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "a part: expected 10 or 11 fields (cpr.PartInfo), got %zd",
                    PySequence_Fast_GET_SIZE(seq));
        goto out;
    }
    PyObject **it = PySequence_Fast_ITEMS(seq);
    memset(out, 0, sizeof *out);
    unsigned long long v[10];
    for (int i = 0; i < 10; i++) {
        if (i == 2) {
            if (cprpy_parse_kind(it[2], &out->kind) < 0)
                goto out;
            continue;
        }
        v[i] = PyLong_AsUnsignedLongLong(it[i]);
        if (v[i] == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            cprpy_raise(CPR_INVALID_ARGUMENT, "a part: field %s must be an int >= 0",
                        part_info_fields[i].name);
            goto out;
        }
    }
    if (v[0] > UINT32_MAX || v[4] > UINT32_MAX) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "a part: shard and num_shards must fit 32 bits");
        goto out;
    }
    out->shard = (uint32_t)v[0];
    out->checkpoint = v[1];
    out->step = v[3];
    out->num_shards = (uint32_t)v[4];
    out->base = v[5];
    out->rows = v[6];
    out->bytes = v[7];
    out->committed = v[8] != 0;
    out->consistent = v[9] != 0;
    rc = 0;
out:
    Py_DECREF(seq);
    return rc;
}

/* ---- the module ------------------------------------------------------------------ */

static PyObject *mod_status_name(PyObject *self, PyObject *arg)
{
    (void)self;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (v < INT_MIN || v > INT_MAX) /* not a status: its name is the unknown one's */
        v = -1;
    return PyUnicode_FromString(cpr_status_name((cpr_status)v));
}

static PyMethodDef module_methods[] = {
    {"status_name", mod_status_name, METH_O,
     "status_name(code) -> str: the name of a cpr_status code (\"CPR_NOT_FOUND\", ...)."},
    {"plan_recovery", (PyCFunction)(void (*)(void))cprpy_plan_recovery,
     METH_VARARGS | METH_KEYWORDS,
     "plan_recovery(parts, num_shards, failed=(), mode='partial', *, dense_replica=False, "
     "dense_shard=0, restart_if_unsaved=False, abandoned=(0, 0)) -> Plan\n\n"
     "Plan a recovery from a job's parts (Client.list), purely: which shards restore, as of "
     "which checkpoint, where the dense state comes from. See cpr/recovery.h."},
    {"read_criteo", (PyCFunction)(void (*)(void))cprpy_read_criteo, METH_VARARGS | METH_KEYWORDS,
     "read_criteo(path, rows_per_table=0, *, max_lines=0, skip_malformed=True) -> "
     "(labels, dense, sparse)\n\n"
     "Criteo lines (TSV, or CSV with its header) parsed and hashed as cpr-dlrm does "
     "(docs/data.md): labels float32 (n,), dense float32 (n, 13) = log(1 + max(x, 0)), "
     "sparse int64 (n, 26) row indices into tables of rows_per_table rows (0: the "
     "library's default). max_lines 0 reads the whole file. Malformed lines are skipped "
     "(skip_malformed) or raise; a file with no well-formed line raises "
     "InvalidArgumentError either way."},
    {"failure_schedule", (PyCFunction)(void (*)(void))cprpy_failure_schedule,
     METH_VARARGS | METH_KEYWORDS,
     "failure_schedule(mean_steps, horizon_steps, num_shards, *, seed=0, law='exponential', "
     "shape=0) -> list[(step, shard)]\n\n"
     "The seeded failure schedule the trainers and the test harness replay (cpr/failure.h): "
     "shard `shard` fails once `step` steps have run."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cpr",
    "C core of the cpr package: the CPR client, recovery planning and trackers. Import "
    "`cpr`, not this module.",
    -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cpr(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (add_errors(m) < 0 || PyType_Ready(&ArrayType) < 0 ||
        PyModule_AddObjectRef(m, "Array", (PyObject *)&ArrayType) < 0)
        goto fail;
    if (!(cprpy_PartInfoType = new_struct(m, "cpr.PartInfo",
                                          "A part of a job, as Client.list reports it.",
                                          part_info_fields)) ||
        !(cprpy_RestoreResultType = new_struct(m, "cpr.RestoreResult",
                                               "What a restore delivered.",
                                               restore_result_fields)) ||
        !(cprpy_GcReportType = new_struct(m, "cpr.GcReport", "What retention did.", gc_fields)) ||
        !(cprpy_VerifyReportType = new_struct(m, "cpr.VerifyReport", "What verify checked.",
                                              verify_fields)) ||
        !(cprpy_StatsType = new_struct(m, "cpr.Stats", "Counters of every node, summed.",
                                       stats_fields)) ||
        !(cprpy_ProgressType = new_struct(m, "cpr.Progress", "A part's progress.",
                                          progress_fields)) ||
        !(cprpy_PlanShardType = new_struct(m, "cpr.PlanShard", "One shard's part of a plan.",
                                           plan_shard_fields)) ||
        !(cprpy_RestoredTableType = new_struct(m, "cpr.RestoredTable",
                                               "The restored rows of one table.",
                                               restored_table_fields)) ||
        !(cprpy_TrackerStatsType = new_struct(m, "cpr.TrackerStats",
                                              "A tracker's counters for one shard.",
                                              tracker_stats_fields)))
        goto fail;
    if (cprpy_client_ready(m) < 0 || cprpy_part_ready(m) < 0 || cprpy_plan_ready(m) < 0 ||
        cprpy_tracker_ready(m) < 0 || cprpy_estimator_ready(m) < 0)
        goto fail;
    if (PyModule_AddStringConstant(m, "__version__", CPR_VERSION) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
