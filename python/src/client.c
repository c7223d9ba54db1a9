/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr.Client: one CPR client (cpr/client.h) for a target
 * (grpc://host:port[,...], host:port, unix:/path, local:///dir).
 *
 * Invariants:
 *   C1  `client` is NULL exactly when the Client is closed; every call takes
 *       it through cprpy_client_enter, which refuses a closed client and
 *       counts the call in `busy` (the GIL is held while busy changes).
 *   C2  close() refuses while busy > 0 (another thread is inside a call):
 *       cpr_client_close must not run concurrently with a call.
 *   C3  Every Part whose C handle is live is on the `parts` list. close()
 *       clears their handles first (cpr_client_close frees them), so a
 *       Part used afterwards raises instead of touching freed memory.
 *   C4  abort(job, shard, checkpoint) of a part that a Part of this client
 *       holds takes that Part's `busy` for the call (refused if another
 *       thread is inside one of its calls), as the C API requires.
 *   C5  A client belongs to the process that opened it (`pid`). In a fork's
 *       child (which has none of its threads) every call raises, and
 *       close and deallocation forget the C handles instead of closing
 *       them (which would wait for ever): the parent still owns them. The
 *       child detaches its Parts as close does (C3), so no list node is
 *       left to be freed while linked.
 *   C6  libgrpc does not survive fork(): a child's calls wait for ever on
 *       the parent's epoll fd, and its new channels share (and corrupt) the
 *       parent's connections. So a process forked from one that opened a
 *       gRPC target (`grpc_pid`) opens none itself, and touches no gRPC
 *       state: the parent's clients stay healthy. Likewise RocksDB's
 *       background threads (shared by every store of a process) are not in
 *       a child: a local:// store it opened never flushes, and its close
 *       waits for ever. So a child of a process that opened a local://
 *       store (`store_pid`) opens none. Each is refused at once.
 */
#include "cprpy.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpr/types.h"

const char cprpy_ended_by_close[] = "aborted when its client closed";
const char cprpy_ended_by_fork[] = "left to the parent process (a client does not survive "
                                   "fork())";

/* `pid` of a client a fork's child forgot (C5): its calls say why they fail. */
#define FORGOTTEN_PID (-1L)

/* C6: the processes that first opened a gRPC target and a local:// store
 * (0: none yet). The GIL guards them; a fork's child inherits them, exec
 * clears them. */
static long grpc_pid, store_pid;

/* C3/C5: end every Part's hold on the C client (`why` says how) and empty
 * the list, so no Part is left linked to one freed later. */
static void detach_parts(cprpy_client *c, const char *why)
{
    for (cprpy_part *p = c->parts; p;) {
        cprpy_part *next = p->next;
        p->part = NULL;
        p->ended = why;
        p->busy = 0;
        p->prev = p->next = NULL;
        p = next;
    }
    c->parts = NULL;
}

/* C5: the C client's threads (senders, gRPC's, the store's) live in the
 * process that opened it; a fork's child has none of them, so it may
 * neither use nor close it (either would wait for ever). The child forgets
 * it: the parent still owns it. */
int cprpy_client_forked(cprpy_client *c)
{
    if (!c->client || c->pid == (long)getpid())
        return 0;
    detach_parts(c, cprpy_ended_by_fork); /* not ours to abort: the parent's */
    c->client = NULL;
    c->pid = FORGOTTEN_PID;
    c->busy = 0; /* the threads inside its calls stayed in the parent */
    return 1;
}

cpr_client *cprpy_client_enter(cprpy_client *c)
{
    if (cprpy_client_forked(c) || (!c->client && c->pid == FORGOTTEN_PID)) {
        cprpy_raise(CPR_FAILED_PRECONDITION, "this client was opened by the parent process "
                    "(a client does not survive fork()); open a new cpr.Client in the child");
        return NULL;
    }
    if (!c->client) {
        cprpy_raise(CPR_FAILED_PRECONDITION, "the client is closed; open a new cpr.Client");
        return NULL;
    }
    c->busy++;
    return c->client;
}

void cprpy_client_leave(cprpy_client *c) { c->busy--; }

/* C6: -1 with FailedPreconditionError when this process is a fork's child
 * of one that opened what `target` needs: a local:// store, or gRPC (any
 * other target, valid or not: none touches gRPC here). Else records this
 * process as its user, before the open (which initialises either library
 * even if it fails). */
static int fork_forbids(const char *target)
{
    long pid = (long)getpid();
    int local = strncmp(target, "local://", strlen("local://")) == 0;
    long *owner = local ? &store_pid : &grpc_pid;
    if (!*owner)
        *owner = pid;
    if (*owner == pid)
        return 0;
    if (local)
        cprpy_raise(CPR_FAILED_PRECONDITION,
                    "a local:// store cannot be opened in a process forked from one that "
                    "opened one (RocksDB's background threads do not survive fork(): the "
                    "store would never flush, and its close would wait for ever): start "
                    "workers with multiprocessing's 'spawn' or 'forkserver' method, or fork "
                    "them before opening a local:// store");
    else
        cprpy_raise(CPR_FAILED_PRECONDITION,
                    "a gRPC client cannot be used in a process forked from one that used "
                    "gRPC (libgrpc does not survive fork()): start workers with "
                    "multiprocessing's 'spawn' or 'forkserver' method, or open the client "
                    "with local:// in the child");
    return -1;
}

static int client_init(cprpy_client *c, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"target",  "staging_bytes", "message_bytes", "call_timeout_s",
                             "stream_timeout_s", "retries", "backoff_s", "defer_send",
                             "thread_cpus", "retain_cuts", "no_sync", "no_fold", "token",
                             "tls_ca_file", "tls_cert_file", "tls_key_file", "rados_pool",
                             "rados_conf", "rados_namespace", "rados_user", "direct_writes",
                             "buffered_reads", "local_dir", NULL};
    const char *target;
    cpr_client_options o;
    memset(&o, 0, sizeof o);
    PyObject *retries = Py_None;
    int defer = 0, no_sync = 0, no_fold = 0, direct_writes = 0, buffered_reads = 0;
    const char *cpus = NULL;
    unsigned int retain = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$nnddOdpzO&ppzzzzzzzzppz", kwlist, &target,
                                     (Py_ssize_t *)&o.staging_bytes,
                                     (Py_ssize_t *)&o.message_bytes, &o.call_timeout_s,
                                     &o.stream_timeout_s, &retries, &o.backoff_s, &defer, &cpus,
                                     cprpy_u32, &retain, &no_sync, &no_fold, &o.token,
                                     &o.tls_ca_file, &o.tls_cert_file, &o.tls_key_file,
                                     &o.store.rados_pool, &o.store.rados_conf,
                                     &o.store.rados_namespace, &o.store.rados_user,
                                     &direct_writes, &buffered_reads, &o.store.local_dir))
        return -1;
    if ((Py_ssize_t)o.staging_bytes < 0 || (Py_ssize_t)o.message_bytes < 0) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "staging_bytes and message_bytes must be >= 0");
        return -1;
    }
    if (retries != Py_None) {
        long r = PyLong_AsLong(retries);
        if ((r == -1 && PyErr_Occurred()) || r < 0 || r > 1000) {
            PyErr_Clear();
            cprpy_raise(CPR_INVALID_ARGUMENT,
                        "retries: expected an int in [0, 1000] (0: never retry), or None");
            return -1;
        }
        if (r == 0)
            o.no_retries = 1;
        o.retries = (unsigned)r;
    }
    o.defer_send = defer;
    o.direct_writes = direct_writes;
    o.thread_cpus = cpus;
    o.store.retain_cuts = retain;
    o.store.no_sync = no_sync;
    o.store.no_fold = no_fold;
    o.store.buffered_reads = buffered_reads;
    cprpy_client_forked(c); /* C5: a fork's child may reopen an inherited Client */
    if (c->client || c->opening) {
        cprpy_raise(CPR_FAILED_PRECONDITION, "the client is already open%s",
                    c->client ? "" : "ing on another thread");
        return -1;
    }
    if (fork_forbids(target))
        return -1;
    cpr_client *cl = NULL;
    cpr_status st;
    c->opening = 1; /* two __init__ at once must not both open (one would leak) */
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_open(target, &o, &cl);
    Py_END_ALLOW_THREADS
    c->opening = 0;
    if (st != CPR_OK) {
        cprpy_raise_status(st);
        return -1;
    }
    c->client = cl;
    c->pid = (long)getpid();
    Py_XSETREF(c->target, PyUnicode_FromString(target));
    return 0;
}

/* C3: detach every Part, then close (C2 checked by the caller). */
static void client_close_now(cprpy_client *c)
{
    detach_parts(c, cprpy_ended_by_close);
    cpr_client *cl = c->client;
    c->client = NULL;
    Py_BEGIN_ALLOW_THREADS
    cpr_client_close(cl);
    Py_END_ALLOW_THREADS
}

static PyObject *client_close(cprpy_client *c, PyObject *unused)
{
    (void)unused;
    if (!c->client || cprpy_client_forked(c))
        Py_RETURN_NONE;
    if (c->busy > 0)
        return cprpy_raise(CPR_FAILED_PRECONDITION,
                           "the client is in use by %d call(s) on other threads; close it "
                           "after they return",
                           c->busy);
    for (cprpy_part *p = c->parts; p; p = p->next)
        if (p->busy)
            return cprpy_raise(CPR_FAILED_PRECONDITION,
                               "a part of this client is in use on another thread; close "
                               "the client after it returns");
    client_close_now(c);
    Py_RETURN_NONE;
}

static void client_dealloc(cprpy_client *c)
{
    /* Parts hold a reference to their client, so none is left here. */
    if (c->client && !cprpy_client_forked(c))
        client_close_now(c);
    if (c->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)c);
    Py_XDECREF(c->target);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *client_enter_ctx(cprpy_client *c, PyObject *unused)
{
    (void)unused;
    if (!c->client)
        return cprpy_raise(CPR_FAILED_PRECONDITION, "the client is closed");
    return Py_NewRef((PyObject *)c);
}

/* with cpr.Client(...) as c: closed at the end; a close that fails (another
 * thread inside a call) does not mask an exception leaving the block. */
static PyObject *client_exit_ctx(cprpy_client *c, PyObject *args)
{
    PyObject *type = PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : Py_None;
    PyObject *r = client_close(c, NULL);
    if (!r) {
        if (type == Py_None)
            return NULL;
        PyErr_Clear();
    }
    Py_XDECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *client_repr(cprpy_client *c)
{
    return PyUnicode_FromFormat("cpr.Client(%R%s)", c->target ? c->target : Py_None,
                                c->client ? "" : ", closed");
}

/* ---- begin ---------------------------------------------------------------------- */

static int parse_tables(PyObject *o, cpr_table_schema **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!o || o == Py_None)
        return 0;
    PyObject *seq = cprpy_seq_copy(o, "tables: expected a sequence of (table, rows, dim, "
                                       "state_dim)");
    if (!seq)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    cpr_table_schema *t = len ? calloc((size_t)len, sizeof *t) : NULL;
    if (len && !t) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        unsigned int table, dim, sdim;
        unsigned long long rows;
        PyObject *tup = PySequence_Tuple(PySequence_Fast_GET_ITEM(seq, i));
        if (!tup || !PyArg_ParseTuple(tup, "O&O&O&O&", cprpy_u32, &table, cprpy_u64, &rows,
                                      cprpy_u32, &dim, cprpy_u32, &sdim)) {
            Py_XDECREF(tup);
            PyErr_Clear();
            free(t);
            Py_DECREF(seq);
            cprpy_raise(CPR_INVALID_ARGUMENT,
                        "tables[%zd]: expected (table, rows, dim, state_dim), ints >= 0", i);
            return -1;
        }
        Py_DECREF(tup);
        t[i].table = table;
        t[i].rows = rows;
        t[i].dim = dim;
        t[i].state_dim = sdim;
    }
    Py_DECREF(seq);
    *out = t;
    *n = (size_t)len;
    return 0;
}

PyObject *cprpy_part_new(cprpy_client *c, cpr_part *part, PyObject *job, uint32_t shard,
                         uint64_t checkpoint, cpr_table_schema *tables, size_t n_tables);

static PyObject *client_begin(cprpy_client *c, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"job", "shard", "checkpoint", "tables", "kind", "step",
                             "num_shards", "base", "wait", "codec", NULL};
    PyObject *job, *tables = Py_None, *kind = NULL, *codec = NULL;
    unsigned int shard, num_shards = 1;
    unsigned long long ckpt, step = 0, base = 0;
    int wait = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "UO&O&|$OOO&O&O&pO", kwlist, &job, cprpy_u32,
                                     &shard, cprpy_u64, &ckpt, &tables, &kind, cprpy_u64, &step,
                                     cprpy_u32, &num_shards, cprpy_u64, &base, &wait, &codec))
        return NULL;
    cpr_part_spec spec;
    memset(&spec, 0, sizeof spec);
    if (cprpy_job(job, &spec.id.job) < 0)
        return NULL;
    spec.kind = CPR_KIND_FULL;
    if (kind && cprpy_parse_kind(kind, &spec.kind) < 0)
        return NULL;
    if (codec && codec != Py_None) {
        cpr_codec cd;
        if (cprpy_parse_codec(codec, &cd) < 0)
            return NULL;
        spec.codec = (uint32_t)cd;
    }
    cpr_table_schema *t;
    size_t nt;
    if (parse_tables(tables, &t, &nt) < 0)
        return NULL;
    spec.id.shard = shard;
    spec.id.checkpoint = ckpt;
    spec.step = step;
    spec.num_shards = num_shards;
    spec.base = base;
    spec.tables = t;
    spec.n_tables = nt;
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl) {
        free(t);
        return NULL;
    }
    cpr_part *part = NULL;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = wait ? cpr_client_begin(cl, &spec, &part) : cpr_client_begin_async(cl, &spec, &part);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (st != CPR_OK) {
        free(t);
        return cprpy_raise_status(st);
    }
    return cprpy_part_new(c, part, job, shard, ckpt, t, nt); /* takes t */
}

/* ---- reading -------------------------------------------------------------------- */

/* Methods whose one argument is a job: parse it and enter (C1); the
 * client's handle, or NULL with an error set. */
static cpr_client *enter_with_job(cprpy_client *c, PyObject *args, const char **job)
{
    PyObject *o;
    if (!PyArg_ParseTuple(args, "U", &o) || cprpy_job(o, job) < 0)
        return NULL;
    return cprpy_client_enter(c);
}

static PyObject *client_list(cprpy_client *c, PyObject *args)
{
    const char *j;
    cpr_client *cl = enter_with_job(c, args, &j);
    if (!cl)
        return NULL;
    cpr_part_info *parts = NULL;
    size_t n = 0;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_list(cl, j, &parts, &n);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *p = cprpy_part_info(&parts[i]);
        if (!p) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, p);
    }
    free(parts);
    return list;
}

static PyObject *client_list_jobs(cprpy_client *c, PyObject *unused)
{
    (void)unused;
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl)
        return NULL;
    char **jobs = NULL;
    size_t n = 0;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_list_jobs(cl, &jobs, &n);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *s = PyUnicode_FromString(jobs[i]);
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    cpr_names_free(jobs, n);
    return list;
}

static PyObject *client_latest_cut(cprpy_client *c, PyObject *args)
{
    const char *j;
    cpr_client *cl = enter_with_job(c, args, &j);
    if (!cl)
        return NULL;
    uint64_t cut = 0;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_latest_cut(cl, j, &cut);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    return PyLong_FromUnsignedLongLong(cut);
}

/* The query arguments restore and restore_into share, parsed into q (its
 * arrays malloc'd: release with query_free). */
typedef struct {
    cpr_restore_query q;
    uint32_t *tables;
    cpr_row_range *ranges;
    uint32_t *shards;
    size_t n_shards;
} query_args;

static void query_free(query_args *a)
{
    free(a->tables);
    free(a->ranges);
    free(a->shards);
}

static int parse_query(query_args *a, PyObject *job, unsigned long long as_of, int consistent,
                       PyObject *tables, PyObject *ranges, unsigned long long modulo,
                       unsigned long long remainder, PyObject *shards, Py_ssize_t batch_rows)
{
    memset(a, 0, sizeof *a);
    if (cprpy_job(job, &a->q.job) < 0)
        return -1;
    a->q.as_of = as_of;
    a->q.consistent = consistent;
    a->q.modulo = modulo;
    a->q.remainder = remainder;
    if (batch_rows < 0) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "batch_rows must be >= 0");
        return -1;
    }
    a->q.batch_rows = (size_t)batch_rows;
    size_t nt;
    if (cprpy_u32_list(tables, "tables", &a->tables, &nt) < 0)
        goto fail;
    a->q.tables = a->tables;
    a->q.n_tables = nt;
    if (cprpy_u32_list(shards, "shards", &a->shards, &a->n_shards) < 0)
        goto fail;
    if (ranges && ranges != Py_None) {
        PyObject *seq = cprpy_seq_copy(ranges, "ranges: expected a sequence of (begin, end)");
        if (!seq)
            goto fail;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        a->ranges = n ? calloc((size_t)n, sizeof *a->ranges) : NULL;
        if (n && !a->ranges) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned long long b, e;
            PyObject *tup = PySequence_Tuple(PySequence_Fast_GET_ITEM(seq, i));
            if (!tup || !PyArg_ParseTuple(tup, "O&O&", cprpy_u64, &b, cprpy_u64, &e)) {
                Py_XDECREF(tup);
                PyErr_Clear();
                Py_DECREF(seq);
                cprpy_raise(CPR_INVALID_ARGUMENT,
                            "ranges[%zd]: expected (begin, end), ints >= 0", i);
                goto fail;
            }
            Py_DECREF(tup);
            a->ranges[i].begin = b;
            a->ranges[i].end = e;
        }
        Py_DECREF(seq);
        a->q.ranges = a->ranges;
        a->q.n_ranges = (size_t)n;
    }
    return 0;
fail:
    query_free(a);
    return -1;
}

static PyObject *restore_result(const cpr_restore_result *r)
{
    const uint64_t v[] = {r->as_of, r->rows, r->bytes};
    return cprpy_struct_u64(cprpy_RestoreResultType, v, 3, NULL);
}

/* Rows collected per table by restore()'s callback (GIL released). */
typedef struct {
    uint32_t table, dim, state_dim;
    size_t n, cap;
    uint64_t *ids;
    float *values, *state;
} collected;

typedef struct {
    collected *t;
    size_t n, cap;
} collector;

static cpr_status collect_rows(void *ctx, const cpr_row_batch *b)
{
    collector *c = ctx;
    if (!b->n)
        return CPR_OK;
    uint32_t dim = (uint32_t)(b->values_count / b->n), sdim = (uint32_t)(b->state_count / b->n);
    collected *t = NULL;
    for (size_t i = 0; i < c->n; i++)
        if (c->t[i].table == b->table)
            t = &c->t[i];
    if (!t) {
        if (c->n == c->cap) {
            size_t cap = c->cap ? 2 * c->cap : 4;
            collected *nt = realloc(c->t, cap * sizeof *nt);
            if (!nt)
                return cpr_fail(CPR_NO_MEMORY, "restore: no memory for table %u", b->table);
            c->t = nt;
            c->cap = cap;
        }
        t = &c->t[c->n++];
        memset(t, 0, sizeof *t);
        t->table = b->table;
        t->dim = dim;
        t->state_dim = sdim;
    }
    if (dim != t->dim || sdim != t->state_dim)
        return cpr_fail(CPR_CORRUPT, "restore: table %u changed its row shape mid-restore",
                        b->table);
    if (t->n + b->n > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap < t->n + b->n)
            cap *= 2;
        uint64_t *ids = realloc(t->ids, cap * sizeof *ids);
        if (!ids)
            return cpr_fail(CPR_NO_MEMORY, "restore: no memory for %zu rows", cap);
        t->ids = ids;
        float *v = realloc(t->values, cap * dim * sizeof *v);
        if (!v)
            return cpr_fail(CPR_NO_MEMORY, "restore: no memory for %zu rows", cap);
        t->values = v;
        if (sdim) {
            float *s = realloc(t->state, cap * sdim * sizeof *s);
            if (!s)
                return cpr_fail(CPR_NO_MEMORY, "restore: no memory for %zu rows", cap);
            t->state = s;
        }
        t->cap = cap;
    }
    if (b->ids)
        memcpy(t->ids + t->n, b->ids, b->n * sizeof *b->ids);
    else
        for (size_t i = 0; i < b->n; i++)
            t->ids[t->n + i] = b->range_begin + i;
    memcpy(t->values + t->n * dim, b->values, b->values_count * sizeof(float));
    if (sdim)
        memcpy(t->state + t->n * sdim, b->state, b->state_count * sizeof(float));
    t->n += b->n;
    return CPR_OK;
}

static void collector_free(collector *c, size_t from)
{
    for (size_t i = from; i < c->n; i++) {
        free(c->t[i].ids);
        free(c->t[i].values);
        free(c->t[i].state);
    }
    free(c->t);
}

static PyObject *client_restore(cprpy_client *c, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"job", "as_of", "consistent", "tables", "ranges", "modulo",
                             "remainder", "shards", "batch_rows", NULL};
    PyObject *job, *tables = Py_None, *ranges = Py_None, *shards = Py_None;
    unsigned long long as_of = 0, modulo = 0, remainder = 0;
    int consistent = 0;
    Py_ssize_t batch_rows = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "U|$O&pOOO&O&On", kwlist, &job, cprpy_u64, &as_of,
                                     &consistent, &tables, &ranges, cprpy_u64, &modulo, cprpy_u64,
                                     &remainder, &shards, &batch_rows))
        return NULL;
    query_args a;
    if (parse_query(&a, job, as_of, consistent, tables, ranges, modulo, remainder, shards,
                    batch_rows) < 0)
        return NULL;
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl) {
        query_free(&a);
        return NULL;
    }
    collector col = {0};
    cpr_restore_result res = {0};
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_restore(cl, &a.q, a.shards, a.n_shards, collect_rows, &col, &res);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    query_free(&a);
    if (st != CPR_OK) {
        cprpy_raise_status(st);
        collector_free(&col, 0);
        return NULL;
    }
    PyObject *dict = PyDict_New(), *out = NULL;
    size_t i = 0;
    for (; dict && i < col.n; i++) {
        collected *t = &col.t[i];
        PyObject *row = PyStructSequence_New(cprpy_RestoredTableType);
        if (!row)
            break;
        PyStructSequence_SetItem(row, 0, cprpy_array_new(t->ids, 'Q', t->n, 0));
        PyStructSequence_SetItem(row, 1, cprpy_array_new(t->values, 'f', t->n, t->dim));
        PyStructSequence_SetItem(row, 2, t->state_dim
                                             ? cprpy_array_new(t->state, 'f', t->n, t->state_dim)
                                             : Py_NewRef(Py_None));
        if (!t->state_dim)
            free(t->state);
        PyObject *key = PyLong_FromUnsignedLong(t->table);
        int bad = PyErr_Occurred() || !key || PyDict_SetItem(dict, key, row) < 0;
        Py_XDECREF(key);
        Py_DECREF(row);
        if (bad) {
            i++;
            break;
        }
    }
    if (i == col.n && !PyErr_Occurred() && dict)
        out = Py_BuildValue("(ON)", dict, restore_result(&res));
    Py_XDECREF(dict);
    collector_free(&col, i);
    return out;
}

static PyObject *client_restore_into(cprpy_client *c, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"job", "table", "values", "state", "row_base", "restored",
                             "as_of", "consistent", "ranges", "modulo", "remainder", "shards",
                             "batch_rows", NULL};
    PyObject *job, *values, *state = Py_None, *restored = Py_None, *ranges = Py_None,
                            *shards = Py_None;
    unsigned int table;
    unsigned long long row_base = 0, as_of = 0, modulo = 0, remainder = 0;
    int consistent = 0;
    Py_ssize_t batch_rows = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "UO&O|O$O&OO&pOO&O&On", kwlist, &job, cprpy_u32,
                                     &table, &values, &state, cprpy_u64, &row_base, &restored,
                                     cprpy_u64, &as_of, &consistent, &ranges, cprpy_u64, &modulo,
                                     cprpy_u64, &remainder, &shards, &batch_rows))
        return NULL;
    cprpy_buffer vb, sb = {0}, rb = {0};
    if (cprpy_buffer_get(values, CPRPY_F32, 1, "values", &vb) < 0)
        return NULL;
    PyObject *out = NULL;
    query_args a;
    int have_q = 0;
    if (vb.ndim != 2 || !vb.cols) {
        cprpy_raise(CPR_INVALID_ARGUMENT, "values: expected a 2-D (rows, dim) float32 array");
        goto out;
    }
    cpr_restore_into into = {.table = table, .row_base = row_base, .n_rows = vb.rows,
                             .dim = (uint32_t)vb.cols, .values = vb.view.buf};
    if (state != Py_None) {
        if (cprpy_buffer_get(state, CPRPY_F32, 1, "state", &sb) < 0)
            goto out;
        if (sb.rows != vb.rows || !sb.len) {
            cprpy_raise(CPR_INVALID_ARGUMENT,
                        "state: expected (%zu, state_dim) or (%zu,) floats, one row per row of "
                        "values; got %zu rows",
                        vb.rows, vb.rows, sb.rows);
            goto out;
        }
        into.state_dim = (uint32_t)(sb.len / sb.rows);
        into.state = sb.view.buf;
    }
    if (restored != Py_None) {
        if (cprpy_buffer_get(restored, CPRPY_U8, 1, "restored", &rb) < 0)
            goto out;
        if (rb.len != vb.rows) {
            cprpy_raise(CPR_INVALID_ARGUMENT, "restored: expected %zu flags (one per row), got %zu",
                        vb.rows, rb.len);
            goto out;
        }
        into.restored = rb.view.buf;
    }
    if (parse_query(&a, job, as_of, consistent, Py_None, ranges, modulo, remainder, shards,
                    batch_rows) < 0)
        goto out;
    have_q = 1;
    a.q.tables = &into.table;
    a.q.n_tables = 1;
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl)
        goto out;
    cpr_restore_result res = {0};
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_restore_table(cl, &a.q, a.shards, a.n_shards, &into, &res);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (st != CPR_OK)
        cprpy_raise_status(st);
    else
        out = restore_result(&res);
out:
    if (have_q)
        query_free(&a);
    cprpy_buffer_release(&vb);
    cprpy_buffer_release(&sb);
    cprpy_buffer_release(&rb);
    return out;
}

static PyObject *client_read_blob(cprpy_client *c, PyObject *args)
{
    PyObject *job;
    unsigned int shard;
    unsigned long long ckpt;
    const char *name;
    cpr_part_id id;
    if (!PyArg_ParseTuple(args, "UO&O&s", &job, cprpy_u32, &shard, cprpy_u64, &ckpt, &name) ||
        cprpy_job(job, &id.job) < 0)
        return NULL;
    id.shard = shard;
    id.checkpoint = ckpt;
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl)
        return NULL;
    void *data = NULL;
    size_t len = 0;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_read_blob(cl, &id, name, &data, &len);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    PyObject *b = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    free(data);
    return b;
}

/* This client's live Part for (job, shard, checkpoint), if any (C3). */
static cprpy_part *part_of(cprpy_client *c, PyObject *job, uint32_t shard, uint64_t ckpt)
{
    for (cprpy_part *p = c->parts; p; p = p->next) {
        if (p->shard != shard || p->checkpoint != ckpt)
            continue;
        int same = PyUnicode_Compare(p->job, job);
        if (same == -1 && PyErr_Occurred())
            PyErr_Clear();
        else if (same == 0)
            return p;
    }
    return NULL;
}

static PyObject *client_abort(cprpy_client *c, PyObject *args)
{
    PyObject *job;
    const char *j;
    unsigned int shard;
    unsigned long long ckpt;
    if (!PyArg_ParseTuple(args, "UO&O&", &job, cprpy_u32, &shard, cprpy_u64, &ckpt) ||
        cprpy_job(job, &j) < 0)
        return NULL;
    /* C4: cpr_client_abort stops this client's own handle for the part,
     * which no other thread may be using meanwhile (part.c P2). */
    cprpy_part *mine = part_of(c, job, shard, ckpt);
    if (mine && mine->busy)
        return cprpy_raise(CPR_FAILED_PRECONDITION,
                           "part %s/%u/%llu is in use by another thread; abort it once that "
                           "call has returned", j, shard, ckpt);
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl)
        return NULL;
    if (mine) { /* kept alive and busy: no dealloc or call of it meanwhile */
        Py_INCREF(mine);
        mine->busy = 1;
    }
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_abort(cl, j, shard, ckpt);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (mine) {
        mine->busy = 0;
        Py_DECREF(mine);
    }
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    Py_RETURN_NONE;
}

/* ---- the recovery record ------------------------------------------------------------ */

static PyObject *client_recovery_get(cprpy_client *c, PyObject *args)
{
    const char *j;
    cpr_client *cl = enter_with_job(c, args, &j);
    if (!cl)
        return NULL;
    uint64_t gen = 0;
    void *plan = NULL;
    size_t len = 0;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_recovery_get(cl, j, &gen, &plan, &len);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    PyObject *r = Py_BuildValue("(Ky#)", (unsigned long long)gen, (const char *)plan,
                                (Py_ssize_t)len);
    free(plan);
    return r;
}

static PyObject *client_recovery_put(cprpy_client *c, PyObject *args)
{
    PyObject *job;
    const char *j;
    unsigned long long expected;
    Py_buffer plan;
    if (!PyArg_ParseTuple(args, "UO&y*", &job, cprpy_u64, &expected, &plan))
        return NULL;
    if (cprpy_job(job, &j) < 0) {
        PyBuffer_Release(&plan);
        return NULL;
    }
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl) {
        PyBuffer_Release(&plan);
        return NULL;
    }
    uint64_t gen = 0;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_recovery_put(cl, j, expected, plan.buf, (size_t)plan.len, &gen);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    PyBuffer_Release(&plan);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    return PyLong_FromUnsignedLongLong(gen);
}

/* ---- operations ----------------------------------------------------------------------- */

static PyObject *client_stats(cprpy_client *c, PyObject *unused)
{
    (void)unused;
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl)
        return NULL;
    cpr_store_stats s;
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_stats(cl, &s);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    PyObject *errors = PyDict_New();
    for (int i = 1; errors && i < CPR_STATS_ERRORS; i++) {
        if (!s.errors[i])
            continue;
        PyObject *v = PyLong_FromUnsignedLongLong(s.errors[i]);
        if (!v || PyDict_SetItemString(errors, cpr_status_name((cpr_status)i), v) < 0)
            Py_CLEAR(errors);
        Py_XDECREF(v);
    }
    if (!errors)
        return NULL;
    const uint64_t v[] = {s.jobs,    s.parts_committed, s.parts_open, s.rows_in,
                          s.bytes_in, s.rows_out,       s.bytes_out,  s.store_bytes};
    return cprpy_struct_u64(cprpy_StatsType, v, 8, errors);
}

typedef struct {
    char **what, **where;
    size_t n, cap;
    int oom;
} problems;

static void note_problem(void *ctx, const char *what, const char *where)
{
    problems *p = ctx;
    if (p->oom || p->n >= 10000) /* enough to act on; the count stays exact */
        return;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        char **a = realloc(p->what, cap * sizeof *a);
        if (a)
            p->what = a;
        char **b = a ? realloc(p->where, cap * sizeof *b) : NULL;
        if (b)
            p->where = b;
        if (!a || !b) {
            p->oom = 1;
            return;
        }
        p->cap = cap;
    }
    p->what[p->n] = strdup(what ? what : "");
    p->where[p->n] = strdup(where ? where : "");
    p->n++;
}

static PyObject *client_verify(cprpy_client *c, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"job", NULL};
    PyObject *job = Py_None;
    const char *j = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &job))
        return NULL;
    if (job != Py_None && cprpy_job(job, &j) < 0)
        return NULL;
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl)
        return NULL;
    problems p = {0};
    cpr_verify_report r = {0};
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_verify(cl, j, note_problem, &p, &r);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    /* Save the message before Python calls can overwrite it. */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", cpr_errmsg());
    PyObject *report = NULL, *details = PyList_New(0);
    for (size_t i = 0; details && i < p.n; i++) {
        PyObject *t =
            Py_BuildValue("(ss)", p.what[i] ? p.what[i] : "", p.where[i] ? p.where[i] : "");
        if (!t || PyList_Append(details, t) < 0)
            Py_CLEAR(details);
        Py_XDECREF(t);
    }
    for (size_t i = 0; i < p.n; i++) {
        free(p.what[i]);
        free(p.where[i]);
    }
    free(p.what);
    free(p.where);
    if (!details)
        return NULL;
    const uint64_t v[] = {r.rows_checked, r.blobs_checked, r.bytes_checked, r.problems};
    report = cprpy_struct_u64(cprpy_VerifyReportType, v, 4, details);
    if (!report)
        return NULL;
    if (st == CPR_OK)
        return report;
    /* The exception carries the report: CorruptError lists what was found. */
    cprpy_raise(st, "%s", msg[0] ? msg : cpr_status_name(st));
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value)
        PyObject_SetAttrString(value, "report", report);
    Py_DECREF(report);
    PyErr_Restore(type, value, tb);
    return NULL;
}

static PyObject *client_gc(cprpy_client *c, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"job", "keep", NULL};
    PyObject *job = Py_None;
    const char *j = NULL;
    unsigned int keep = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$O&", kwlist, &job, cprpy_u32, &keep))
        return NULL;
    if (job != Py_None && cprpy_job(job, &j) < 0)
        return NULL;
    cpr_client *cl = cprpy_client_enter(c);
    if (!cl)
        return NULL;
    cpr_gc_report r = {0};
    cpr_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cpr_client_gc(cl, j, keep, &r);
    Py_END_ALLOW_THREADS
    cprpy_client_leave(c);
    if (st != CPR_OK)
        return cprpy_raise_status(st);
    const uint64_t v[] = {r.floor,       r.parts_removed, r.versions_removed, r.uncommitted_removed,
                          r.bytes_before, r.bytes_after};
    return cprpy_struct_u64(cprpy_GcReportType, v, 6, NULL);
}

static PyObject *client_node_of(cprpy_client *c, PyObject *args)
{
    PyObject *job;
    const char *j;
    unsigned int shard;
    if (!PyArg_ParseTuple(args, "UO&", &job, cprpy_u32, &shard) || cprpy_job(job, &j) < 0)
        return NULL;
    if (!cprpy_client_enter(c))
        return NULL;
    size_t n = cpr_client_node_of(c->client, j, shard);
    cprpy_client_leave(c);
    return PyLong_FromSize_t(n);
}

static PyObject *client_get_nodes(cprpy_client *c, void *unused)
{
    (void)unused;
    if (!cprpy_client_enter(c))
        return NULL;
    size_t n = cpr_client_nodes(c->client);
    cprpy_client_leave(c);
    return PyLong_FromSize_t(n);
}

static PyObject *client_get_closed(cprpy_client *c, void *unused)
{
    (void)unused;
    return PyBool_FromLong(c->client == NULL);
}

static PyObject *client_get_target(cprpy_client *c, void *unused)
{
    (void)unused;
    return Py_NewRef(c->target ? c->target : Py_None);
}

#define KW (PyCFunction)(void (*)(void))
static PyMethodDef client_methods[] = {
    {"close", (PyCFunction)client_close, METH_NOARGS,
     "close(): abort the parts still open and release the client. A second close does "
     "nothing. Refused while another thread is inside a call on this client."},
    {"__enter__", (PyCFunction)client_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)client_exit_ctx, METH_VARARGS, NULL},
    {"begin", KW client_begin, METH_VARARGS | METH_KEYWORDS,
     "begin(job, shard, checkpoint, *, tables, kind='full', step=0, num_shards=1, base=0, "
     "wait=True, codec=None) -> Part\n\n"
     "Open a part. tables: (table, rows, dim, state_dim) tuples. kind: 'full', 'delta' or "
     "'priority' (or cpr.Kind). wait=False sends Begin from the part's own thread (errors "
     "then surface at a put or at commit). codec: 'f32' (default), 'bf16', 'f16', 'int8' or "
     "'int4': the encoding of the part's row values on the wire and on disk (restores "
     "decode to float32)."},
    {"list", (PyCFunction)client_list, METH_VARARGS,
     "list(job) -> list[PartInfo]: the job's parts on every node, by (checkpoint, shard)."},
    {"list_jobs", (PyCFunction)client_list_jobs, METH_NOARGS,
     "list_jobs() -> list[str]: every job with a part or a fold, sorted."},
    {"latest_cut", (PyCFunction)client_latest_cut, METH_VARARGS,
     "latest_cut(job) -> int: the newest checkpoint id every shard can restore consistently."},
    {"restore", KW client_restore, METH_VARARGS | METH_KEYWORDS,
     "restore(job, *, as_of=0, consistent=False, tables=None, ranges=None, modulo=0, "
     "remainder=0, shards=None, batch_rows=0) -> (dict[int, RestoredTable], RestoreResult)\n\n"
     "Rows as of a checkpoint (0: the newest; consistent: the latest cut), by table: "
     "ids (uint64), values (n, dim) and state (n, state_dim) as cpr.Array (numpy.asarray "
     "shares the memory)."},
    {"restore_into", KW client_restore_into, METH_VARARGS | METH_KEYWORDS,
     "restore_into(job, table, values, state=None, *, row_base=0, restored=None, as_of=0, "
     "consistent=False, ranges=None, modulo=0, remainder=0, shards=None, batch_rows=0) "
     "-> RestoreResult\n\n"
     "Restore one table into the caller's arrays in place: row r goes to values[r - "
     "row_base] (a writable C-contiguous float32 (rows, dim) array or CPU tensor) and "
     "state[r - row_base]; restored (uint8/bool, one per row) gets 1 for each row written."},
    {"read_blob", (PyCFunction)client_read_blob, METH_VARARGS,
     "read_blob(job, shard, checkpoint, name) -> bytes"},
    {"abort", (PyCFunction)client_abort, METH_VARARGS,
     "abort(job, shard, checkpoint): drop an open part by id (a writer that died)."},
    {"recovery_get", (PyCFunction)client_recovery_get, METH_VARARGS,
     "recovery_get(job) -> (generation, bytes): the job's recovery record (0, b'' if none)."},
    {"recovery_put", (PyCFunction)client_recovery_put, METH_VARARGS,
     "recovery_put(job, expected, plan) -> int: compare-and-set the record to generation "
     "expected + 1; FailedPreconditionError if another writer won."},
    {"decide_and_record", KW cprpy_client_decide_and_record, METH_VARARGS | METH_KEYWORDS,
     "decide_and_record(job, num_shards, failed=(), mode='partial', *, expected_generation=0, "
     "dense_replica=False, dense_shard=0, restart_if_unsaved=False, abandoned=(0, 0)) -> "
     "(Plan, generation, won)\n\nPlan from the job's parts and record the plan, so that every "
     "process acts on the "
     "same one; won is False when another process recorded first (its plan is returned)."},
    {"read_recorded", KW cprpy_client_read_recorded, METH_VARARGS | METH_KEYWORDS,
     "read_recorded(job) -> (generation, Plan or None): the job's recorded plan."},
    {"stats", (PyCFunction)client_stats, METH_NOARGS, "stats() -> Stats: every node's counters."},
    {"verify", KW client_verify, METH_VARARGS | METH_KEYWORDS,
     "verify(job=None) -> VerifyReport: check every row and blob. CorruptError (with the "
     "report in .report) when a problem is found."},
    {"gc", KW client_gc, METH_VARARGS | METH_KEYWORDS,
     "gc(job=None, *, keep=0) -> GcReport: retention keeping `keep` consistent cuts."},
    {"node_of", (PyCFunction)client_node_of, METH_VARARGS,
     "node_of(job, shard) -> int: index of the node holding the shard."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"closed", (getter)client_get_closed, NULL, "True once closed.", NULL},
    {"target", (getter)client_get_target, NULL, "The target it was opened with.", NULL},
    {"nodes", (getter)client_get_nodes, NULL, "Number of storage nodes (1 for local://).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject cprpy_ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cpr.Client",
    .tp_basicsize = sizeof(cprpy_client),
    .tp_dealloc = (destructor)client_dealloc,
    .tp_repr = (reprfunc)client_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Client(target, *, staging_bytes=0, message_bytes=0, call_timeout_s=0, "
              "stream_timeout_s=0, retries=None, backoff_s=0, defer_send=False, "
              "thread_cpus=None, retain_cuts=0, no_sync=False, no_fold=False, token=None, "
              "tls_ca_file=None, tls_cert_file=None, tls_key_file=None, rados_pool=None, "
              "rados_conf=None, rados_namespace=None, rados_user=None, direct_writes=False, "
              "buffered_reads=False, local_dir=None)\n\n"
              "A CPR client. target: 'grpc://host:port[,host:port...]' (or 'host:port'), "
              "'grpcs://host:port[,...]' (TLS), 'unix:/path', or 'local:///dir' (the store "
              "in-process). token: the bearer token of a ckptd with --auth-file; tls_*: PEM "
              "files for grpcs:// (None: $CPR_TOKEN, $CPR_TLS_CA, $CPR_TLS_CERT, "
              "$CPR_TLS_KEY). rados_*: the Ceph pool of the store (as ckptd's --rados-* "
              "options): for local://, where the store lives; for a ckptd whose store is "
              "there, direct reads (restores read the pool themselves, docs/client.md); with "
              "direct_writes=True, parts write their rows into the pool themselves too. "
              "local_dir: the --data-dir of a ckptd on this host: direct reads from its "
              "directory (restores read the segment files themselves; docs/client.md). "
              "buffered_reads=True (local:// and local_dir): segments are read through "
              "the page cache, not with O_DIRECT (as ckptd's --reads buffered). "
              "Zero options take "
              "the library's defaults (docs/client.md); retries=0 never retries. "
              "Thread-safe; a context manager (closes on exit).",
    .tp_methods = client_methods,
    .tp_getset = client_getset,
    .tp_init = (initproc)client_init,
    .tp_new = PyType_GenericNew,
    .tp_weaklistoffset = offsetof(cprpy_client, weakrefs),
};

int cprpy_client_ready(PyObject *m)
{
    if (PyType_Ready(&cprpy_ClientType) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Client", (PyObject *)&cprpy_ClientType);
}
