/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The `cpr` Python extension (cpr._cpr): CPython C API over the public C
 * API of libcpr (cpr/client.h, cpr/recovery.h, cpr/embedding.h). Shared
 * declarations of its files:
 *   module.c  the module, the exception hierarchy, buffers, cpr._cpr.Array
 *   client.c  cpr.Client
 *   part.c    cpr.Part
 *   plan.c    cpr.Plan, plan_recovery, the recovery record
 *   tracker.c cpr.Tracker (trackers over tables the library does not own)
 *   data.c    read_criteo, failure_schedule
 *   estimator.c cpr.Estimator (the online benefit estimator)
 *
 * Rules every entry point follows:
 *   - Row data crosses by the buffer protocol: C-contiguous float32 values,
 *     int64 or uint64 ids, read or filled in place (CPU torch tensors, which
 *     export no buffer, through their zero-copy .numpy()).
 *   - The GIL is released around every call that can block (anything that
 *     talks to ckptd or the store, waits for staging room, or copies rows).
 *     Buffers stay held (PyBuffer_Release after the call), so an exporter
 *     cannot move or free them meanwhile.
 *   - A failed CPR call raises the exception of its status
 *     (cprpy_raise_status) with cpr_errmsg(), read on the thread that made
 *     the call, before anything else can overwrite it.
 *   - A client's and a part's C handles are used by one Python thread at a
 *     time where the C API requires it: `busy` counts (client) or flags
 *     (part) calls in flight, taken and dropped while holding the GIL.
 */
#ifndef CPRPY_H
#define CPRPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>

#include "cpr/client.h"
#include "cpr/codec.h"
#include "cpr/recovery.h"

/* ---- errors (module.c) ---- */
extern PyObject *cprpy_Error;
/* Raise the exception of `st` (a failed status) with cpr_errmsg(); NULL. */
PyObject *cprpy_raise_status(cpr_status st);
/* Same with a message of the caller's (printf-style). */
PyObject *cprpy_raise(cpr_status st, const char *fmt, ...);
/* The exception class of `st`. */
PyObject *cprpy_error_class(cpr_status st);

/* ---- buffers (module.c) ---- */
typedef enum { CPRPY_F32, CPRPY_ID, CPRPY_U8 } cprpy_dtype;
/*
 * A held view of `obj` as a C-contiguous array of `dtype` (float32; or ids:
 * int64/uint64), writable if asked. `what` names the argument in errors.
 * *len is the element count; *rows and *cols describe a 1-D (cols 0) or
 * 2-D shape. Returns 0, or -1 with InvalidArgumentError/TypeError set.
 * Release with cprpy_buffer_release.
 */
typedef struct cprpy_buffer {
    Py_buffer view;
    PyObject *holder;     /* a .numpy() array standing in for a tensor */
    int held;
    size_t len;           /* elements */
    size_t rows, cols;    /* shape: 1-D is (len, 0) */
    int ndim;
} cprpy_buffer;
int cprpy_buffer_get(PyObject *obj, cprpy_dtype dtype, int writable, const char *what,
                     cprpy_buffer *out);
void cprpy_buffer_release(cprpy_buffer *b);
/* Ids of a held CPRPY_ID buffer: checked non-negative when signed. -1 on error. */
int cprpy_ids_check(const cprpy_buffer *b, const char *what);

/* A new cpr._cpr.Array owning `data` (malloc'd; taken even on failure):
 * format "f" or "Q", shape (n) when cols is 0, else (n, cols). */
PyObject *cprpy_array_new(void *data, char format, size_t n, size_t cols);

/* Argument helpers: an enum given as int or as its name (case-insensitive;
 * the library's names: cpr_kind_name, cpr_policy_name, ...). */
int cprpy_parse_kind(PyObject *o, cpr_kind *out);
int cprpy_parse_policy(PyObject *o, cpr_policy *out);
int cprpy_parse_mode(PyObject *o, cpr_recovery_mode *out);
int cprpy_parse_codec(PyObject *o, cpr_codec *out);
/* A sequence of non-negative ints into a malloc'd uint32/uint64 array
 * (*out NULL and *n 0 for None or empty). -1 on error. */
int cprpy_u32_list(PyObject *o, const char *what, uint32_t **out, size_t *n);
/* A tuple copy of sequence `o` (new reference), or NULL with TypeError(what)
 * set. Read sequences through a copy: converting an item may run Python code
 * (its __iter__, __index__) that changes the caller's list, and the items of
 * PySequence_Fast's view of a list are the list's, freed when it shrinks. */
PyObject *cprpy_seq_copy(PyObject *o, const char *what);
/* "O&" converters: an int in [0, 2^64) into an unsigned long long, an int
 * in [0, 2^32) into an unsigned int; InvalidArgumentError otherwise. */
int cprpy_u64(PyObject *o, void *out);
int cprpy_u32(PyObject *o, void *out);
/* A job name: str without NUL (the C API checks the rest). */
int cprpy_job(PyObject *o, const char **out);

/* Struct sequences (named tuples) built once in module.c. */
extern PyTypeObject *cprpy_PartInfoType, *cprpy_RestoreResultType, *cprpy_GcReportType,
    *cprpy_VerifyReportType, *cprpy_StatsType, *cprpy_ProgressType, *cprpy_PlanShardType,
    *cprpy_RestoredTableType, *cprpy_TrackerStatsType;
PyObject *cprpy_part_info(const cpr_part_info *p);
/* A struct sequence whose first n fields are v[0..n) and, when `last` is not
 * NULL, field n is `last` (a reference it takes, also on failure). */
PyObject *cprpy_struct_u64(PyTypeObject *type, const uint64_t *v, int n, PyObject *last);
/* A cpr_part_info from a PartInfo or any 10-sequence in its order. */
int cprpy_part_info_from(PyObject *o, cpr_part_info *out);

/* ---- types ---- */
extern PyTypeObject cprpy_ClientType, cprpy_PartType, cprpy_PlanType, cprpy_TrackerType;

typedef struct cprpy_part cprpy_part;
typedef struct cprpy_client {
    PyObject_HEAD
    cpr_client *client;   /* NULL once closed */
    long pid;             /* the process that opened it (C5: a fork's child does not own it) */
    int opening;          /* __init__ is opening it, the GIL released (C1) */
    PyObject *target;
    int busy;             /* calls in flight on other threads (GIL held to change) */
    cprpy_part *parts;    /* open Part objects of this client (a list through them) */
    PyObject *weakrefs;
} cprpy_client;

/* A Part's `ended` when its client's close ended it (compared by address). */
extern const char cprpy_ended_by_close[];
/* A Part's `ended` in a fork's child: the part is the parent's (client.c C5). */
extern const char cprpy_ended_by_fork[];

struct cprpy_part {
    PyObject_HEAD
    cprpy_client *client; /* strong reference */
    cpr_part *part;       /* NULL once committed, aborted or the client closed */
    PyObject *job;
    uint32_t shard;
    uint64_t checkpoint;
    int busy;
    const char *ended;    /* why part is NULL: "committed", "aborted", ... */
    cpr_table_schema *tables; /* begin's schema (owned): puts' shapes are checked against it */
    size_t n_tables;
    cprpy_part *prev, *next;
};

/* The client's C handle for a call, or NULL with an error set (closed). */
cpr_client *cprpy_client_enter(cprpy_client *c);
/* C5 (client.c): 1 if `c` was opened by another process (a fork's parent);
 * its handles are then forgotten here, never used or closed. */
int cprpy_client_forked(cprpy_client *c);
void cprpy_client_leave(cprpy_client *c);

/* A new Plan owning `plan`. */
PyObject *cprpy_plan_wrap(cpr_recovery_plan *plan);
/* Module-level functions and client methods of plan.c. */
PyObject *cprpy_plan_recovery(PyObject *self, PyObject *args, PyObject *kw);
PyObject *cprpy_client_decide_and_record(cprpy_client *c, PyObject *args, PyObject *kw);
PyObject *cprpy_client_read_recorded(cprpy_client *c, PyObject *args, PyObject *kw);

/* data.c */
PyObject *cprpy_read_criteo(PyObject *self, PyObject *args, PyObject *kw);
PyObject *cprpy_failure_schedule(PyObject *self, PyObject *args, PyObject *kw);

int cprpy_client_ready(PyObject *m);
int cprpy_part_ready(PyObject *m);
int cprpy_plan_ready(PyObject *m);
int cprpy_tracker_ready(PyObject *m);
int cprpy_estimator_ready(PyObject *m);

#endif /* CPRPY_H */
