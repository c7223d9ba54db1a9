/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a Python trainer needs beside the client: Criteo data read and hashed
 * exactly as cpr-dlrm reads it (cpr/data.h), and the seeded failure schedule
 * of the trainers and the test harness (cpr/failure.h).
 */
#include "cprpy.h"

#include <stdlib.h>
#include <string.h>

#include "cpr/data.h"
#include "cpr/failure.h"

/* Growable sample arrays, filled with the GIL released. */
typedef struct {
    float *labels, *dense;
    int64_t *sparse;
    size_t n, cap;
} samples;

static int grow(samples *s)
{
    size_t cap = s->cap ? 2 * s->cap : 4096;
    float *l = realloc(s->labels, cap * sizeof *l);
    if (l)
        s->labels = l;
    float *d = l ? realloc(s->dense, cap * CPR_CRITEO_DENSE * sizeof *d) : NULL;
    if (d)
        s->dense = d;
    int64_t *sp = d ? realloc(s->sparse, cap * CPR_CRITEO_SPARSE * sizeof *sp) : NULL;
    if (sp)
        s->sparse = sp;
    if (!sp)
        return -1;
    s->cap = cap;
    return 0;
}

/* The first malformed line's reason, for a file none of whose lines is a row. */
typedef struct first_reason {
    uint64_t line;
    char text[256];
} first_reason;

static void note_malformed(void *ctx, uint64_t line, const char *reason)
{
    first_reason *f = ctx;
    if (!f->line) {
        f->line = line;
        snprintf(f->text, sizeof f->text, "%s", reason);
    }
}

PyObject *cprpy_read_criteo(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"path", "rows_per_table", "max_lines", "skip_malformed", NULL};
    const char *path;
    unsigned long long rows = 0, max_lines = 0;
    int skip = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|O&$O&p", kwlist, &path, cprpy_u64, &rows,
                                     cprpy_u64, &max_lines, &skip))
        return NULL;
    if (rows > (unsigned long long)INT64_MAX) /* the row indices are int64 */
        return cprpy_raise(CPR_INVALID_ARGUMENT, "read_criteo: rows_per_table %llu is above "
                           "2^63 - 1, the largest int64 row index", rows);
    first_reason first = {0, ""};
    cpr_criteo_options o = {.rows_per_table = rows, .skip_malformed = skip,
                            .on_malformed = note_malformed, .malformed_ctx = &first};
    cpr_criteo_reader *r = NULL;
    samples s = {0};
    cpr_status st;
    int oom = 0;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_criteo_open(path, &o, &r);
    while (st == CPR_OK && (!max_lines || s.n < max_lines)) {
        cpr_criteo_sample x;
        st = cpr_criteo_next(r, &x);
        if (st != CPR_OK)
            break;
        if (s.n == s.cap && grow(&s) < 0) {
            oom = 1;
            break;
        }
        s.labels[s.n] = (float)x.label;
        memcpy(s.dense + s.n * CPR_CRITEO_DENSE, x.dense, sizeof x.dense);
        for (int t = 0; t < CPR_CRITEO_SPARSE; t++)
            s.sparse[s.n * CPR_CRITEO_SPARSE + t] = (int64_t)x.sparse[t];
        s.n++;
    }
    if (st == CPR_NOT_FOUND && r) /* the end of the file */
        st = CPR_OK;
    /* Skipping malformed lines must not turn a file that is not Criteo rows
     * (or read in the wrong format) into an empty data set. */
    if (st == CPR_OK && s.n == 0 && first.line)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "%s: none of its lines is a Criteo row (%llu "
                      "malformed; line %llu: %s): is it a Criteo TSV or CSV file?", path,
                      (unsigned long long)cpr_criteo_malformed(r),
                      (unsigned long long)first.line, first.text);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (oom)
        PyErr_NoMemory();
    else if (st != CPR_OK)
        cprpy_raise_status(st);
    else
        out = Py_BuildValue("(NNN)", cprpy_array_new(s.labels, 'f', s.n, 0),
                            cprpy_array_new(s.dense, 'f', s.n, CPR_CRITEO_DENSE),
                            cprpy_array_new(s.sparse, 'q', s.n, CPR_CRITEO_SPARSE));
    if (!out && (oom || st != CPR_OK)) {
        free(s.labels);
        free(s.dense);
        free(s.sparse);
    }
    cpr_criteo_close(r);
    return out;
}

PyObject *cprpy_failure_schedule(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"mean_steps", "horizon_steps", "num_shards", "seed", "law", "shape",
                             NULL};
    double mean, shape = 0;
    unsigned long long horizon, seed = 0;
    unsigned int shards;
    const char *law = "exponential";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "dO&O&|$O&sd", kwlist, &mean, cprpy_u64, &horizon,
                                     cprpy_u32, &shards, cprpy_u64, &seed, &law, &shape))
        return NULL;
    cpr_failure_config c = {.seed = seed,
                            .shape = shape,
                            .mean_steps = mean,
                            .horizon_steps = horizon,
                            .num_shards = shards};
    cpr_status st = cpr_failure_law_parse(law, &c.distribution);
    cpr_failure *f = NULL;
    size_t n = 0;
    if (st == CPR_OK)
        st = cpr_failure_schedule(&c, &f, &n);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *t = Py_BuildValue("(KI)", (unsigned long long)f[i].step, f[i].shard);
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    free(f);
    return l;
}
