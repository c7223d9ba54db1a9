/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One storage node behind one interface (client_internal.h): the store
 * in-process for local://, or a ckptd reached through rpc/channel.h, speaking
 * the messages of rpc/wire.h. The client library does not link the store:
 * local:// reaches it through its function table (common/cpr_store_api.h),
 * from the program when it links the store, else from libcpr-store.so.0
 * loaded on the first local:// open. Everything the remote path receives is checked here
 * (checksums of rows and chunks) before the rest of the library sees it, so
 * both transports hand callers the same verified data.
 */
#define _GNU_SOURCE /* dlopen's RTLD_ flags */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "cpr/block.h"
#include "cpr/codec.h"
#include "cpr/crc32c.h"
#include "channel.h"
#include "cpr_common.h"
#include "cpr_store_api.h"
#include "wire.h"

#define SVC "/cpr.v1.Checkpoint/"

struct cpri_node {
    char name[256];
    cpr_store *store;          /* local:// */
    const cpri_store_api *api;  /* local:// */
    cpri_rpc *rpc;              /* grpc:// */
    /* ListResponse.store, as the node last said (ckptd gateways of one RADOS
     * namespace name the same store); "" until then, or its own. */
    pthread_mutex_t mu;
    char store_id[320];
};

/* ---- the store for local:// ------------------------------------------------------------ */

/* Resolves to the store library's table when the program links it (the
 * in-tree targets that offer local:// do, through cpr_client_local). */
extern const cpri_store_api *cpri_store_api_get(void) __attribute__((weak));

static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static const cpri_store_api *loaded_api;
static char load_error[512];

static void load_store(void)
{
    if (cpri_store_api_get) {
        loaded_api = cpri_store_api_get();
        return;
    }
    /* CPR_STORE_LIBRARY, else libcpr-store.so.0 beside this library (by its
     * own path: a sanitizer's dlopen interceptor hides the caller's RUNPATH),
     * else wherever the dynamic loader finds it. */
    const char *path = getenv("CPR_STORE_LIBRARY");
    void *lib = NULL;
    char beside[4096];
    Dl_info self;
    if ((!path || !*path) && dladdr((void *)load_store, &self) && self.dli_fname &&
        strrchr(self.dli_fname, '/')) {
        int dir_len = (int)(strrchr(self.dli_fname, '/') - self.dli_fname);
        snprintf(beside, sizeof beside, "%.*s/libcpr-store.so.0", dir_len, self.dli_fname);
        lib = dlopen(beside, RTLD_NOW | RTLD_LOCAL);
        if (lib)
            path = beside;
    }
    if (!lib) {
        if (!path || !*path)
            path = "libcpr-store.so.0";
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!lib) {
        snprintf(load_error, sizeof load_error, "%s", dlerror());
        return;
    }
    const cpri_store_api *(*get)(void) =
        (const cpri_store_api *(*)(void))dlsym(lib, "cpri_store_api_get");
    if (!get) {
        snprintf(load_error, sizeof load_error, "%.400s has no cpri_store_api_get", path);
        return;
    }
    loaded_api = get(); /* the library stays loaded for the life of the process */
}

/* `what` needs the store library: "local://", "direct reads". */
static cpr_status store_api(const char *what, const cpri_store_api **out)
{
    pthread_once(&api_once, load_store);
    if (!loaded_api)
        return cpr_fail(CPR_UNAVAILABLE, "%s needs the CPR store library and it cannot "
                        "be loaded (%s): install libcpr-store (or set CPR_STORE_LIBRARY to its "
                        "path), or link the program with cpr-store", what, load_error);
    if (loaded_api->abi != CPR_STORE_API_ABI)
        return cpr_fail(CPR_FAILED_PRECONDITION, "the CPR store library speaks table version "
                        "%u and this client %u: install matching versions",
                        loaded_api->abi, CPR_STORE_API_ABI);
    *out = loaded_api;
    return CPR_OK;
}

/* A local call's status, with the store's message made this library's. */
static cpr_status local(const cpri_node *n, cpr_status st)
{
    if (st != CPR_OK) { /* the store's buffer may be another copy's (a loaded library) */
        char why[512];
        snprintf(why, sizeof why, "%s", n->api->errmsg());
        cpr_fail(st, "%s", why);
    }
    return st;
}

struct cpri_node_writer {
    cpri_node *node;
    cpr_part_id id;
    _Atomic uint64_t lease; /* set by the sender once Begin answered */
    char job[CPR_NAME_MAX + 1];
    double timeout_s;
    cpri_rpc_stream *rows;  /* opened on first use */
    cpri_rpc_stream *blobs;
    /* Direct writes (cpri_node_writer_set_segment): blocks go to `segment`
     * through `direct`'s connection, `sw` opened on first use. */
    cpri_direct *direct;
    char segment[CPR_STORE_OBJECT_MAX];
    cpr_store_writer *sw;
    cpri_segment_index index;
    unsigned char *block;   /* rows sealed into a block here (direct_rows) */
    size_t block_cap;
    double touched_s;       /* when the node last heard of the part (direct_touch) */
};

struct cpri_direct {
    const cpri_store_api *api;
    cpr_store_reader *reader;
    char id[320];              /* the pool's store, as ckptd names its own */
};

cpr_status cpri_node_open_local(const char *dir, const cpr_store_options *opts, cpri_node **out)
{
    cpri_node *n = calloc(1, sizeof *n);
    if (!n)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening a client");
    snprintf(n->name, sizeof n->name, "local://%s", dir);
    pthread_mutex_init(&n->mu, NULL);
    cpr_status st = store_api("local://", &n->api);
    if (st == CPR_OK)
        st = local(n, n->api->open(dir, opts, &n->store));
    if (st) {
        free(n);
        return st;
    }
    *out = n;
    return CPR_OK;
}

cpr_status cpri_node_open_grpc(const char *host_port, const cpri_rpc_options *creds,
                               cpri_node **out)
{
    cpri_node *n = calloc(1, sizeof *n);
    if (!n)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening a client");
    snprintf(n->name, sizeof n->name, "%s", host_port);
    pthread_mutex_init(&n->mu, NULL);
    cpr_status st = cpri_rpc_open_with(host_port, creds, &n->rpc);
    if (st) {
        free(n);
        return st;
    }
    *out = n;
    return CPR_OK;
}

void cpri_node_close(cpri_node *n)
{
    if (!n)
        return;
    if (n->store)
        n->api->close(n->store);
    cpri_rpc_close(n->rpc);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

const char *cpri_node_name(const cpri_node *n)
{
    return n->name;
}

void cpri_node_store_id(cpri_node *n, char *out, size_t cap)
{
    pthread_mutex_lock(&n->mu);
    snprintf(out, cap, "%s", n->store_id);
    pthread_mutex_unlock(&n->mu);
}

/* A unary call whose request was encoded by the caller (taken: freed here). */
static cpr_status unary_call(cpri_node *n, const char *method, cpr_status enc, uint8_t *req,
                             size_t len, double timeout_s, int wait_ready, uint8_t **resp,
                             size_t *resp_len)
{
    uint8_t *ignored = NULL;
    size_t ignored_len = 0;
    if (enc)
        return enc;
    cpr_status st = wait_ready
                        ? cpri_rpc_unary_wait(n->rpc, method, req, len, timeout_s,
                                              resp ? resp : &ignored,
                                              resp ? resp_len : &ignored_len)
                        : cpri_rpc_unary(n->rpc, method, req, len, timeout_s,
                                         resp ? resp : &ignored, resp ? resp_len : &ignored_len);
    free(req);
    free(ignored);
    return st;
}

static cpr_status unary(cpri_node *n, const char *method, cpr_status enc, uint8_t *req,
                        size_t len, double timeout_s, uint8_t **resp, size_t *resp_len)
{
    return unary_call(n, method, enc, req, len, timeout_s, 0, resp, resp_len);
}

cpr_status cpri_node_begin(cpri_node *n, const cpr_part_spec *spec, double timeout_s,
                           int wait_ready, cpri_direct *direct, uint64_t token,
                           uint64_t *lease, char *segment)
{
    *lease = 0;
    if (segment)
        segment[0] = '\0';
    if (n->store)
        return local(n, n->api->begin(n->store, spec));
    uint8_t *req = NULL, *resp = NULL;
    size_t len = 0, resp_len = 0;
    const char *want = direct && segment ? direct->id : NULL;
    cpr_status enc = cpri_wire_begin_encode_direct(spec, want, token, &req, &len);
    cpr_status st = unary_call(n, SVC "Begin", enc, req, len, timeout_s, wait_ready, &resp,
                               &resp_len);
    if (st == CPR_OK && want)
        st = cpri_wire_begin_response_decode_segment(resp, resp_len, lease, segment,
                                                     CPR_STORE_OBJECT_MAX);
    else if (st == CPR_OK)
        st = cpri_wire_begin_response_decode(resp, resp_len, lease);
    free(resp);
    return st;
}

cpr_status cpri_node_commit(cpri_node *n, const cpr_part_id *id, uint64_t lease, uint64_t rows,
                            uint64_t blobs, uint64_t blob_bytes,
                            const cpri_segment_index *index, double timeout_s)
{
    if (n->store)
        return local(n, n->api->commit_blobs(n->store, id, rows, blobs, blob_bytes));
    uint8_t *req = NULL;
    size_t len = 0;
    cpr_status enc =
        index && index->direct
            ? cpri_wire_commit_encode_direct(id, lease, rows, blobs, blob_bytes, index->refs,
                                             index->n, index->size, &req, &len)
            : cpri_wire_commit_encode_blobs(id, lease, rows, blobs, blob_bytes, &req, &len);
    return unary(n, SVC "Commit", enc, req, len, timeout_s, NULL, NULL);
}

void cpri_segment_index_free(cpri_segment_index *index)
{
    if (!index)
        return;
    free(index->refs);
    memset(index, 0, sizeof *index);
}

cpr_status cpri_node_abort(cpri_node *n, const cpr_part_id *id, uint64_t lease, double timeout_s)
{
    if (n->store)
        return local(n, n->api->abort(n->store, id));
    uint8_t *req = NULL;
    size_t len = 0;
    cpr_status enc = cpri_wire_abort_encode(id, lease, &req, &len);
    return unary(n, SVC "Abort", enc, req, len, timeout_s, NULL, NULL);
}

void cpri_node_writer_set_lease(cpri_node_writer *w, uint64_t lease)
{
    atomic_store(&w->lease, lease);
}

/* ---- the data path of a part ------------------------------------------------------ */

cpr_status cpri_node_writer_open(cpri_node *n, const cpr_part_id *id, double timeout_s,
                                cpri_node_writer **out)
{
    cpri_node_writer *w = calloc(1, sizeof *w);
    if (!w)
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting a part's writer");
    w->node = n;
    snprintf(w->job, sizeof w->job, "%s", id->job);
    w->id = (cpr_part_id){w->job, id->shard, id->checkpoint};
    w->timeout_s = timeout_s;
    *out = w;
    return CPR_OK;
}

static cpr_status send_on(cpri_node_writer *w, cpri_rpc_stream **s, const char *method,
                          uint8_t *msg, size_t len)
{
    cpr_status st = CPR_OK;
    if (!*s)
        st = cpri_rpc_stream_open(w->node->rpc, method, w->timeout_s, s);
    if (st == CPR_OK)
        st = cpri_rpc_stream_send_owned(*s, msg, len); /* takes msg */
    else
        free(msg);
    if (st != CPR_OK && *s) {
        /* The stream ended: its status (the server's reason) is the error. */
        cpr_status end = cpri_rpc_stream_finish(*s, NULL, NULL);
        *s = NULL;
        if (end != CPR_OK)
            st = end;
    }
    return st;
}

void cpri_node_writer_set_segment(cpri_node_writer *w, cpri_direct *d, const char *segment)
{
    if (!d || !segment || !*segment)
        return;
    w->direct = d;
    snprintf(w->segment, sizeof w->segment, "%s", segment);
    w->index.direct = 1;
    w->touched_s = 0; /* the first block says so at once */
}

/* While the rows go to the pool the node hears nothing of the part, and
 * would take it for abandoned after its idle timeout (ckptd
 * --idle-part-timeout-s, 600 s by default): an empty batch on the rows
 * stream with the first block and every DIRECT_TOUCH_S after says the writer
 * is at work (store_write.c W3); the stream it opens also ties the part to
 * this writer's connection, as a writer's PutRows does. */
#define DIRECT_TOUCH_S 60.0

static cpr_status direct_touch(cpri_node_writer *w)
{
    double now = cpri_now_s();
    if (now - w->touched_s < DIRECT_TOUCH_S)
        return CPR_OK;
    w->touched_s = now;
    cpr_row_batch none = {0};
    uint8_t *msg = NULL;
    size_t len = 0;
    cpr_status st = cpri_wire_rows_encode(&w->id, atomic_load(&w->lease), &none, 0, 0, &msg,
                                          &len);
    return st ? st : send_on(w, &w->rows, SVC "PutRows", msg, len);
}

/* A call of the store library failed: its message made this library's. */
static cpr_status direct_error(const cpri_node_writer *w, cpr_status st, const char *what)
{
    char why[512];
    snprintf(why, sizeof why, "%s", w->direct->api->errmsg());
    return cpr_fail(st, "direct write of %s/%u/%llu (%s) %s: %s", w->job, w->id.shard,
                    (unsigned long long)w->id.checkpoint, w->segment, what, why);
}

/* One sealed block into the part's segment, its entry into the index. */
static cpr_status direct_block(cpri_node_writer *w, const void *block, size_t len)
{
    const cpri_store_api *api = w->direct->api;
    cpr_status st = CPR_OK;
    if (!w->sw && (st = api->writer_create(w->direct->reader, w->segment, &w->sw)) != CPR_OK)
        return direct_error(w, st, "opening the segment");
    cpri_segment_index *x = &w->index;
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        cpr_store_block_ref *refs = realloc(x->refs, cap * sizeof *refs);
        if (!refs)
            return cpr_fail(CPR_NO_MEMORY, "out of memory for a segment index of %zu blocks",
                            cap);
        x->refs = refs;
        x->cap = cap;
    }
    st = api->writer_block(w->sw, block, len, &x->refs[x->n]);
    if (st)
        return direct_error(w, st, "appending a block");
    x->n++;
    return direct_touch(w);
}

#define DIRECT_BLOCK_ROWS_MAX 65536u /* rows of a block made of a batch */

/* A batch of rows as f32 blocks of ascending ids, in the order the store
 * takes such a batch itself (cpri_batch_order: an id given twice refused). */
static cpr_status direct_rows(cpri_node_writer *w, const cpr_row_batch *b)
{
    if (b->n == 0)
        return CPR_OK;
    if (b->values_count % b->n || b->state_count % b->n)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a batch of %zu rows with %zu values and %zu "
                        "state values", b->n, b->values_count, b->state_count);
    uint32_t dim = (uint32_t)(b->values_count / b->n), sdim = (uint32_t)(b->state_count / b->n);
    cpri_id_index *order = NULL;
    cpr_status st = cpri_batch_order(b, &order);
    for (size_t first = 0; st == CPR_OK && first < b->n; first += DIRECT_BLOCK_ROWS_MAX) {
        uint32_t k = (uint32_t)(b->n - first < DIRECT_BLOCK_ROWS_MAX ? b->n - first
                                                                     : DIRECT_BLOCK_ROWS_MAX);
        cpr_block_layout l;
        cpr_block_layout_of(k, dim, sdim, 0, &l);
        if (l.bytes > w->block_cap) {
            unsigned char *nb = realloc(w->block, l.bytes);
            if (!nb) {
                st = cpr_fail(CPR_NO_MEMORY, "out of memory for a block of %zu bytes", l.bytes);
                break;
            }
            w->block = nb;
            w->block_cap = l.bytes;
        }
        uint64_t *ids = (uint64_t *)(w->block + l.ids);
        float *vals = (float *)(w->block + l.values), *state = (float *)(w->block + l.state);
        for (uint32_t r = 0; r < k; r++) {
            size_t at = order ? order[first + r].index : first + r;
            ids[r] = b->ids ? b->ids[at] : b->range_begin + at;
            memcpy(vals + (size_t)r * dim, b->values + at * dim, (size_t)dim * 4);
            if (sdim)
                memcpy(state + (size_t)r * sdim, b->state + at * sdim, (size_t)sdim * 4);
        }
        st = cpr_block_seal(w->block, b->table, k, dim, sdim, 0);
        if (st == CPR_OK)
            st = direct_block(w, w->block, l.bytes);
    }
    free(order);
    return st;
}

cpr_status cpri_node_writer_rows(cpri_node_writer *w, const cpr_row_batch *b)
{
    if (w->direct)
        return direct_rows(w, b);
    if (w->node->store)
        return local(w->node, w->node->api->put_rows(w->node->store, &w->id, b));
    uint8_t *msg = NULL;
    size_t len = 0;
    cpr_status st = cpri_wire_rows_encode(&w->id, atomic_load(&w->lease), b, 0, 0, &msg, &len);
    return st ? st : send_on(w, &w->rows, SVC "PutRows", msg, len);
}

cpr_status cpri_node_writer_block(cpri_node_writer *w, const void *block, size_t len)
{
    if (w->direct)
        return direct_block(w, block, len);
    if (w->node->store)
        return local(w->node, w->node->api->put_block(w->node->store, &w->id, block, len));
    uint8_t *msg = NULL;
    size_t n = 0;
    cpr_status st = cpri_wire_block_encode(&w->id, atomic_load(&w->lease), block, len, &msg, &n);
    return st ? st : send_on(w, &w->rows, SVC "PutRows", msg, n);
}

cpr_status cpri_node_writer_blob(cpri_node_writer *w, const char *name, uint64_t offset,
                                const void *data, size_t len, uint32_t crc32c)
{
    if (w->node->store)
        return local(w->node, w->node->api->put_blob(w->node->store, &w->id, name, offset, data,
                                                    len, crc32c));
    uint8_t *msg = NULL;
    size_t n = 0;
    cpr_status st = cpri_wire_chunk_encode(&w->id, atomic_load(&w->lease), name, offset, 0, data,
                                           len, crc32c, &msg, &n);
    return st ? st : send_on(w, &w->blobs, SVC "PutBlob", msg, n);
}

cpr_status cpri_node_writer_close(cpri_node_writer *w, cpri_segment_index *index)
{
    cpr_status st = CPR_OK;
    if (w->rows)
        st = cpri_rpc_stream_finish(w->rows, NULL, NULL);
    if (w->blobs) {
        cpr_status b = cpri_rpc_stream_finish(w->blobs, NULL, NULL);
        if (st == CPR_OK)
            st = b;
    }
    if (w->sw && (!index || st != CPR_OK)) {
        w->direct->api->writer_discard(w->sw); /* abandoned: the object goes */
    } else if (w->sw) {
        cpr_status f = w->direct->api->writer_finish(w->sw, &w->index.size);
        if (f)
            st = direct_error(w, f, "finishing the segment");
    }
    if (index && st == CPR_OK) {
        *index = w->index; /* the caller's now */
        w->index.refs = NULL;
    }
    free(w->index.refs);
    free(w->block);
    free(w);
    return st;
}

/* ---- reads ----------------------------------------------------------------------------- */

cpr_status cpri_node_list(cpri_node *n, const char *job, double timeout_s, cpr_part_info **parts,
                         size_t *count)
{
    return cpri_node_list_where(n, job, timeout_s, parts, count, NULL);
}

cpr_status cpri_node_list_where(cpri_node *n, const char *job, double timeout_s,
                               cpr_part_info **parts, size_t *count, char ***locations)
{
    if (n->store) {
        cpr_status st = local(n, n->api->list(n->store, job, parts, count));
        char **where = st == CPR_OK && locations ? calloc(*count + 1, sizeof *where) : NULL;
        for (size_t i = 0; where && i < *count; i++) {
            char buf[2048];
            cpr_part_id id = {job, (*parts)[i].shard, (*parts)[i].checkpoint};
            if (n->api->part_location(n->store, &id, buf, sizeof buf) != CPR_OK)
                snprintf(buf, sizeof buf, "unknown: %s", n->api->errmsg());
            if (!(where[i] = strdup(buf))) {
                cpr_names_free(where, i);
                where = NULL;
                break;
            }
        }
        if (st == CPR_OK && locations && !where) {
            free(*parts);
            st = cpr_fail(CPR_NO_MEMORY, "out of memory listing job %s", job);
        }
        if (st == CPR_OK && locations)
            *locations = where;
        return st;
    }
    uint8_t *req = NULL, *resp = NULL;
    size_t len = 0, resp_len = 0;
    uint64_t cut;
    char store[sizeof n->store_id] = "";
    cpr_status st = locations ? cpri_wire_list_where_encode(job, &req, &len)
                              : cpri_wire_list_encode(job, &req, &len);
    st = unary(n, SVC "List", st, req, len, timeout_s, &resp, &resp_len);
    if (st == CPR_OK)
        st = cpri_wire_list_response_decode_where(resp, resp_len, parts, count, &cut, locations,
                                                  store, sizeof store);
    free(resp);
    if (st == CPR_OK) {
        pthread_mutex_lock(&n->mu);
        snprintf(n->store_id, sizeof n->store_id, "%s", store);
        pthread_mutex_unlock(&n->mu);
    }
    return st;
}

/* ---- direct reads ------------------------------------------------------------------ */

cpr_status cpri_direct_open(const cpr_store_options *opts, cpri_direct **out)
{
    const cpri_store_api *api;
    cpr_status st = store_api("direct reads", &api);
    if (st)
        return st;
    cpri_direct *d = calloc(1, sizeof *d);
    if (!d)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening direct reads");
    d->api = api;
    st = api->reader_open(opts, &d->reader);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", api->errmsg());
        free(d);
        return cpr_fail(st, "direct reads from %s %s: %s",
                        opts->rados_pool && *opts->rados_pool ? "pool" : "directory",
                        opts->rados_pool && *opts->rados_pool ? opts->rados_pool
                                                              : opts->local_dir, why);
    }
    snprintf(d->id, sizeof d->id, "%s", api->reader_id(d->reader));
    *out = d;
    return CPR_OK;
}

void cpri_direct_close(cpri_direct *d)
{
    if (!d)
        return;
    d->api->reader_close(d->reader);
    free(d);
}

const char *cpri_direct_id(const cpri_direct *d)
{
    return d ? d->id : NULL;
}

/* ---- restores ------------------------------------------------------------------------ */

typedef struct rows_in {
    cpri_node *node;
    cpr_row_fn fn;
    void *ctx;
    uint64_t rows, bytes;
    int fn_failed;            /* the caller's callback stopped the restore */
    cpri_direct *direct;      /* direct reads (NULL: none) */
    unsigned char *plan;      /* RowBatch.plan pieces so far (direct reads) */
    size_t plan_len, plan_cap;
    int plan_seen;            /* a piece came (perhaps empty) */
    int rows_seen;            /* the answer carried rows (no plan then) */
    unsigned char *scratch;   /* an aligned home for a block that arrived misaligned */
    size_t scratch_cap;
    float *decoded;           /* a quantized block's values as f32 */
    size_t decoded_cap;       /* floats */
} rows_in;

static cpr_status count_rows(rows_in *in, const cpr_row_batch *b)
{
    in->rows += b->n;
    in->bytes += b->n * 8 + (b->values_count + b->state_count) * 4;
    return in->fn(in->ctx, b);
}

static cpr_status local_rows(void *ctx, const cpr_row_batch *b)
{
    rows_in *in = ctx;
    cpr_status st = count_rows(in, b);
    in->fn_failed = st != CPR_OK; /* its message is this library's already */
    return st;
}

/* A restored row block: its CRC32C checked (the one the store checked),
 * then delivered as arrays pointing into it. */
/* A restored row block opened and checked (copied first to an aligned
 * home when it arrived misaligned), with its values as f32 (decoded when
 * stored in another codec); *b its rows, crc32c set. */
/* A restored block checked and opened into *b, its values in f32. With
 * `rows_crc`, b->crc32c is the rows' CRC32C (derived from the block's when
 * the layout allows, else a pass over the rows); without, 0. */
static cpr_status open_block(const cpri_node *n, const void *block, size_t len, int rows_crc,
                             unsigned char **scratch, size_t *scratch_cap, float **decoded,
                             size_t *decoded_cap, cpr_block_view *v, cpr_row_batch *b)
{
    if ((uintptr_t)block % 8) {
        if (len > *scratch_cap) {
            free(*scratch);
            *scratch = NULL;
            *scratch_cap = 0;
            if (posix_memalign((void **)scratch, 64, len))
                return cpr_fail(CPR_NO_MEMORY, "out of memory for a %zu-byte block", len);
            *scratch_cap = len;
        }
        memcpy(*scratch, block, len);
        block = *scratch;
    }
    cpr_status st = cpr_block_open(block, len, v);
    if (st) {
        char why[512]; /* cpr_fail writes the buffer cpr_errmsg reads */
        snprintf(why, sizeof why, "%s", cpr_errmsg());
        return cpr_fail(st, "%s: a restored row block failed its check in transit: %s",
                        n->name, why);
    }
    const float *values = NULL; /* another codec: the caller gets f32 (cpr/codec.h) */
    st = cpri_block_f32(v, decoded, decoded_cap, &values);
    if (st)
        return st;
    *b = (cpr_row_batch){v->h.table, v->h.n, v->ids, values, (size_t)v->h.n * v->h.dim,
                         v->state, (size_t)v->h.n * v->h.state_dim, 0, 0};
    /* Checked just now: the rows' CRC follows from the block's (no second pass). */
    if (rows_crc && !cpri_block_rows_crc(block, v, &b->crc32c))
        b->crc32c = cpr_crc32c_rows(b->ids, b->n, b->values, b->values_count, b->state,
                                    b->state_count);
    return CPR_OK;
}

static cpr_status remote_block(rows_in *in, const void *block, size_t len)
{
    cpr_block_view v;
    cpr_row_batch b;
    cpr_status st = open_block(in->node, block, len, 1, &in->scratch, &in->scratch_cap,
                               &in->decoded, &in->decoded_cap, &v, &b);
    return st ? st : count_rows(in, &b);
}

/* The largest plan a reader decodes (plan.c: 2^24 blocks of 68 bytes and
 * their tables, ranges and names): a daemon sending more is refused. */
#define DIRECT_PLAN_MAX ((size_t)2 << 30)

/* RowBatch.plan: a piece of the restore's plan, kept until the stream
 * ends (the plan is run then: direct_run). */
static cpr_status remote_plan(rows_in *in, const void *piece, size_t len)
{
    if (!in->direct || in->rows_seen)
        return cpr_fail(CPR_INTERNAL, "%s answered a restore with a plan, which this client "
                        "did not ask for or among rows", in->node->name);
    in->plan_seen = 1;
    if (len > DIRECT_PLAN_MAX - in->plan_len)
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "%s sent a restore plan of more than %zu "
                        "bytes, over what a plan may hold", in->node->name,
                        (size_t)DIRECT_PLAN_MAX);
    if (len == 0)
        return CPR_OK;
    if (len > in->plan_cap - in->plan_len) {
        size_t cap = in->plan_cap ? in->plan_cap : (size_t)64 << 10;
        while (cap - in->plan_len < len)
            cap *= 2;
        unsigned char *grown = realloc(in->plan, cap);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory for a restore plan of %zu bytes",
                            in->plan_len + len);
        in->plan = grown;
        in->plan_cap = cap;
    }
    memcpy(in->plan + in->plan_len, piece, len);
    in->plan_len += len;
    return CPR_OK;
}

/* Run the plan over the pool: rows checked by the store library as ckptd
 * would check them, then counted and delivered here. */
static cpr_status direct_run(rows_in *in)
{
    const cpri_direct *d = in->direct;
    in->fn_failed = 0;
    cpr_status st = d->api->reader_restore(d->reader, in->plan, in->plan_len, local_rows, in,
                                           NULL);
    if (st && !in->fn_failed) { /* the store library's message */
        char why[768];
        snprintf(why, sizeof why, "%s", d->api->errmsg());
        cpr_fail(st, "%s", why);
    }
    return st;
}

/* A restored batch of arrays: lengths that match its dims, and its CRC32C
 * (over the rows, then the versions when `with_versions`); *rows_crc (may
 * be NULL) the rows'. */
static cpr_status check_batch(const cpri_node *n, const cpri_wire_rows *w, int with_versions,
                              uint32_t *rows_crc)
{
    const cpr_row_batch *b = &w->batch;
    if (b->n && (b->values_count != b->n * (size_t)w->dim ||
                 b->state_count != b->n * (size_t)w->state_dim))
        return cpr_fail(CPR_INTERNAL, "%s sent a row batch whose lengths do not match its dim",
                        n->name);
    uint32_t crc = cpr_crc32c_rows(b->ids, b->n, b->values, b->values_count, b->state,
                                   b->state_count);
    if (rows_crc)
        *rows_crc = crc;
    if (with_versions)
        crc = cpr_crc32c(crc, w->versions, b->n * 8);
    if (crc != b->crc32c)
        return cpr_fail(CPR_CORRUPT, "%s: a restored row batch of table %u failed its checksum "
                        "in transit", n->name, b->table);
    return CPR_OK;
}

static cpr_status remote_rows(void *ctx, const uint8_t *msg, size_t len)
{
    rows_in *in = ctx;
    cpri_wire_rows w;
    cpr_status st = cpri_wire_rows_decode(msg, len, &w);
    if (st)
        return st;
    if (w.plan) {
        st = remote_plan(in, w.plan, w.plan_len);
        cpri_wire_rows_release(&w);
        return st;
    }
    in->rows_seen = 1;
    if (in->plan_seen) {
        cpri_wire_rows_release(&w);
        return cpr_fail(CPR_INTERNAL, "%s answered a restore with rows after its plan",
                        in->node->name);
    }
    if (w.block) {
        st = remote_block(in, w.block, w.block_len);
        cpri_wire_rows_release(&w);
        return st;
    }
    const cpr_row_batch *b = &w.batch;
    st = check_batch(in->node, &w, 0, NULL);
    if (st == CPR_OK)
        st = count_rows(in, b);
    cpri_wire_rows_release(&w);
    return st;
}

cpr_status cpri_node_restore(cpri_node *n, const cpr_restore_query *q, cpri_direct *direct,
                            double timeout_s, cpr_row_fn fn, void *ctx, uint64_t *rows,
                            uint64_t *bytes, int *direct_failed)
{
    rows_in in = {.node = n, .fn = fn, .ctx = ctx};
    cpr_status st;
    int ran_direct = 0;
    if (n->store) {
        st = n->api->restore(n->store, q, local_rows, &in, NULL);
        if (!in.fn_failed)
            st = local(n, st);
    } else {
        uint8_t *req = NULL;
        size_t len = 0;
        in.direct = direct;
        st = cpri_wire_restore_encode_blocks(q, 1, cpri_direct_id(direct), &req, &len);
        if (st == CPR_OK)
            st = cpri_rpc_server_stream(n->rpc, SVC "Restore", req, len, timeout_s,
                                       remote_rows, &in);
        if (st == CPR_OK && in.plan_seen) {
            st = direct_run(&in);
            ran_direct = st != CPR_OK && !in.fn_failed;
        }
        free(in.plan);
        free(req);
        free(in.scratch);
        free(in.decoded);
    }
    *rows = in.rows;
    *bytes = in.bytes;
    if (direct_failed)
        *direct_failed = ran_direct;
    return st;
}

typedef struct versions_in {
    cpri_node *node;
    cpr_version_row_fn fn;
    void *ctx;
    uint64_t rows, bytes;
    int fn_failed;
    int no_versions;          /* the daemon sent rows without versions */
    unsigned char *scratch;   /* as in rows_in */
    size_t scratch_cap;
    float *decoded;
    size_t decoded_cap;
    uint64_t *versions;       /* a passed-through block's version, per row */
    size_t versions_cap;
} versions_in;

static cpr_status deliver_versions(void *ctx, const cpr_row_batch *b, const uint64_t *versions)
{
    versions_in *in = ctx;
    in->rows += b->n;
    in->bytes += b->n * 8 + (b->values_count + b->state_count) * 4;
    cpr_status st = in->fn(in->ctx, b, versions);
    in->fn_failed = st != CPR_OK;
    return st;
}

/* A daemon older than RestoreRequest.versions answered (merge.c M5). */
static cpr_status old_daemon(versions_in *in)
{
    in->no_versions = 1;
    return cpr_fail(CPR_FAILED_PRECONDITION, "%s answered a restore without each row's "
                    "version: that ckptd is older than this client, and a restore over "
                    "several nodes needs them; upgrade it", in->node->name);
}

/* RowBatch.block in a restore with versions: a block that carries its
 * rows' versions (CPR_BLOCK_VERSIONS), or a stored block passed whole whose
 * rows are all of version `version` (RowBatch.checkpoint). */
static cpr_status versioned_block(versions_in *in, const void *block, size_t len,
                                  uint64_t version)
{
    cpr_block_view v;
    cpr_row_batch b;
    cpr_status st = open_block(in->node, block, len, 0, &in->scratch, &in->scratch_cap,
                               &in->decoded, &in->decoded_cap, &v, &b);
    if (st)
        return st;
    if (v.versions)
        return deliver_versions(in, &b, v.versions);
    if (version == 0) /* a daemon that knows blocks but not versions */
        return old_daemon(in);
    if (b.n > in->versions_cap) {
        uint64_t *grown = realloc(in->versions, b.n * sizeof *grown);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory for %zu versions", b.n);
        in->versions = grown;
        in->versions_cap = b.n;
    }
    for (size_t i = 0; i < b.n; i++)
        in->versions[i] = version;
    return deliver_versions(in, &b, in->versions);
}

static cpr_status remote_versions(void *ctx, const uint8_t *msg, size_t len)
{
    versions_in *in = ctx;
    cpri_wire_rows w;
    cpr_status st = cpri_wire_rows_decode(msg, len, &w);
    if (st)
        return st;
    const cpr_row_batch *b = &w.batch;
    cpr_row_batch rows = *b; /* its crc32c: the rows' alone (cpr_version_row_fn) */
    if (w.block) {
        st = versioned_block(in, w.block, w.block_len, w.id.checkpoint);
    } else if (w.plan || (b->n && !w.versions)) {
        st = old_daemon(in);
    } else if (b->n && (st = check_batch(in->node, &w, 1, &rows.crc32c)) == CPR_OK)
        st = deliver_versions(in, &rows, w.versions);
    cpri_wire_rows_release(&w);
    return st;
}

cpr_status cpri_node_restore_versions(cpri_node *n, const cpr_restore_query *q,
                                     double timeout_s, cpri_rpc_cancel *cancel,
                                     cpr_version_row_fn fn, void *ctx, uint64_t *rows,
                                     uint64_t *bytes, int *no_versions)
{
    versions_in in = {.node = n, .fn = fn, .ctx = ctx};
    cpr_status st;
    if (n->store) {
        st = n->api->restore_versions(n->store, q, deliver_versions, &in, NULL);
        if (!in.fn_failed)
            st = local(n, st);
    } else {
        uint8_t *req = NULL;
        size_t len = 0;
        st = cpri_wire_restore_encode_versions(q, &req, &len);
        if (st == CPR_OK)
            st = cpri_rpc_server_stream_cancel(n->rpc, SVC "Restore", req, len, timeout_s,
                                              remote_versions, &in, cancel);
        free(req);
        free(in.scratch);
        free(in.decoded);
        free(in.versions);
    }
    *rows = in.rows;
    *bytes = in.bytes;
    *no_versions = in.no_versions;
    return st;
}

typedef struct chunks_in {
    cpri_node *node;
    cpri_node_chunk_fn fn;
    void *ctx;
    uint64_t size;
    int fn_failed;
} chunks_in;

static cpr_status local_chunk(void *ctx, uint64_t offset, const void *data, size_t len)
{
    chunks_in *in = ctx;
    cpr_status st = in->fn(in->ctx, in->size, offset, data, len);
    in->fn_failed = st != CPR_OK;
    return st;
}

static cpr_status remote_chunk(void *ctx, const uint8_t *msg, size_t len)
{
    chunks_in *in = ctx;
    cpri_wire_chunk c;
    cpr_status st = cpri_wire_chunk_decode(msg, len, &c);
    if (st)
        return st;
    if (cpr_crc32c(0, c.data, c.len) != c.crc32c)
        st = cpr_fail(CPR_CORRUPT, "%s: chunk at offset %llu of blob %s failed its checksum "
                      "in transit", in->node->name, (unsigned long long)c.offset, c.name);
    else
        st = in->fn(in->ctx, c.size, c.offset, c.data, c.len);
    cpri_wire_chunk_release(&c);
    return st;
}

cpr_status cpri_node_read_blob(cpri_node *n, const cpr_part_id *id, const char *name,
                              double timeout_s, cpri_node_chunk_fn fn, void *ctx)
{
    chunks_in in = {n, fn, ctx, 0, 0};
    if (n->store) {
        cpr_status st = n->api->read_blob(n->store, id, name, &in.size, local_chunk, &in);
        if (!in.fn_failed)
            st = local(n, st);
        /* An empty blob has no chunks: tell the reader its size all the same. */
        return st == CPR_OK && in.size == 0 ? fn(ctx, 0, 0, NULL, 0) : st;
    }
    uint8_t *req = NULL;
    size_t len = 0;
    cpr_status st = cpri_wire_getblob_encode(id, name, &req, &len);
    if (st == CPR_OK)
        st = cpri_rpc_server_stream(n->rpc, SVC "GetBlob", req, len, timeout_s, remote_chunk,
                                   &in);
    free(req);
    return st;
}

/* ---- operations ------------------------------------------------------------------------ */

cpr_status cpri_node_stats(cpri_node *n, double timeout_s, cpr_store_stats *out)
{
    if (n->store)
        return local(n, n->api->stats_get(n->store, out));
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    uint8_t *req = calloc(1, 1); /* StatsRequest is empty */
    cpr_status st = req ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory");
    st = unary(n, SVC "Stats", st, req, 0, timeout_s, &resp, &resp_len);
    if (st == CPR_OK)
        st = cpri_wire_stats_response_decode(resp, resp_len, out);
    free(resp);
    return st;
}

cpr_status cpri_node_list_jobs(cpri_node *n, double timeout_s, char ***jobs, size_t *count)
{
    if (n->store)
        return local(n, n->api->list_jobs(n->store, jobs, count));
    uint8_t *req = NULL, *resp = NULL;
    size_t len = 0, resp_len = 0;
    cpr_status st = cpri_wire_list_jobs_encode(&req, &len);
    st = unary(n, SVC "ListJobs", st, req, len, timeout_s, &resp, &resp_len);
    if (st == CPR_OK)
        st = cpri_wire_list_jobs_response_decode(resp, resp_len, jobs, count);
    free(resp);
    return st;
}

cpr_status cpri_node_verify(cpri_node *n, const char *job, double timeout_s, cpr_problem_fn fn,
                           void *ctx, cpr_verify_report *report)
{
    if (n->store)
        return local(n, n->api->verify(n->store, job, fn, ctx, report));
    uint8_t *req = NULL, *resp = NULL;
    size_t len = 0, resp_len = 0;
    cpr_status st = cpri_wire_verify_encode(job, &req, &len);
    st = unary(n, SVC "Verify", st, req, len, timeout_s, &resp, &resp_len);
    if (st == CPR_OK)
        st = cpri_wire_verify_response_decode(resp, resp_len, report, fn, ctx);
    free(resp);
    if (st == CPR_OK && report->problems)
        st = cpr_fail(CPR_CORRUPT, "%s: %llu problem(s) found", n->name,
                      (unsigned long long)report->problems);
    return st;
}

cpr_status cpri_node_gc(cpri_node *n, const char *job, uint32_t keep, uint64_t floor,
                       double timeout_s, cpr_gc_report *report)
{
    if (n->store)
        return local(n, floor ? n->api->gc_floor_cut(n->store, job, floor, report)
                              : n->api->gc(n->store, job, keep, report));
    uint8_t *req = NULL, *resp = NULL;
    size_t len = 0, resp_len = 0;
    cpr_status st = floor ? cpri_wire_gc_encode_cut(job, floor, &req, &len)
                          : cpri_wire_gc_encode(job, keep, floor, &req, &len);
    st = unary(n, SVC "Gc", st, req, len, timeout_s, &resp, &resp_len);
    if (st == CPR_OK)
        st = cpri_wire_gc_response_decode(resp, resp_len, report);
    free(resp);
    return st;
}

/* ---- recovery records ------------------------------------------------------------------ */

/* A RecoveryRecord answer: generation and a malloc'd copy of the plan. */
static cpr_status record_answer(const uint8_t *resp, size_t resp_len, uint64_t *generation,
                                void **plan, size_t *len)
{
    cpri_wire_recovery r;
    cpr_status st = cpri_wire_recovery_record_decode(resp, resp_len, &r);
    if (st)
        return st;
    void *copy = malloc(r.len ? r.len : 1);
    if (copy) {
        if (r.len)
            memcpy(copy, r.plan, r.len);
        *generation = r.generation;
        *plan = copy;
        *len = r.len;
    } else {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory for a %zu-byte recovery plan", r.len);
    }
    cpri_wire_recovery_release(&r);
    return st;
}

cpr_status cpri_node_recovery_get(cpri_node *n, const char *job, double timeout_s,
                                 uint64_t *generation, void **plan, size_t *len)
{
    if (n->store)
        return local(n, n->api->recovery_get(n->store, job, generation, plan, len, NULL));
    uint8_t *req = NULL, *resp = NULL;
    size_t req_len = 0, resp_len = 0;
    cpr_status st = cpri_wire_get_recovery_encode(job, &req, &req_len);
    st = unary(n, SVC "GetRecovery", st, req, req_len, timeout_s, &resp, &resp_len);
    if (st == CPR_OK)
        st = record_answer(resp, resp_len, generation, plan, len);
    free(resp);
    return st;
}

cpr_status cpri_node_recovery_put(cpri_node *n, const char *job, uint64_t expected,
                                 const void *plan, size_t len, double timeout_s,
                                 uint64_t *generation)
{
    if (n->store)
        return local(n, n->api->recovery_put(n->store, job, expected, plan, len, generation, NULL));
    uint8_t *req = NULL, *resp = NULL;
    size_t req_len = 0, resp_len = 0;
    void *none = NULL; /* the answer carries no plan */
    size_t none_len = 0;
    cpr_status st = cpri_wire_put_recovery_encode(job, expected, plan, len, &req, &req_len);
    st = unary(n, SVC "PutRecovery", st, req, req_len, timeout_s, &resp, &resp_len);
    if (st == CPR_OK)
        st = record_answer(resp, resp_len, generation, &none, &none_len);
    free(none);
    free(resp);
    return st;
}
