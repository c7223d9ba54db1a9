/* SPDX-License-Identifier: Apache-2.0 */
/*
 * protobuf-c <-> the shared types (see wire.h). Generated code lives in
 * build/.../proto/cpr/v1/checkpoint.pb-c.[ch]; nothing else includes it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/crc32c.h"
#include "cpr/store.h" /* CPR_STORE_PLAN_VERSION */
#include "cpr/v1/checkpoint.pb-c.h"
#include "cpr_common.h"
#include "wire.h"

/* Pack any message into a fresh buffer. */
static cpr_status pack(const ProtobufCMessage *msg, uint8_t **buf, size_t *len)
{
    size_t size = protobuf_c_message_get_packed_size(msg);
    uint8_t *out = malloc(size ? size : 1);
    if (!out)
        return cpr_fail(CPR_NO_MEMORY, "out of memory encoding a %zu-byte message", size);
    protobuf_c_message_pack(msg, out);
    *buf = out;
    *len = size;
    return CPR_OK;
}

static cpr_status malformed(const char *what, size_t len)
{
    return cpr_fail(CPR_INVALID_ARGUMENT, "malformed %s (%zu bytes): not a valid protobuf "
                    "message of that type", what, len);
}

static cpr_status precheck(const ProtobufCMessageDescriptor *desc, const void *buf,
                                size_t len, int depth);

/* protobuf-c gives "" for absent strings; keep the store's messages precise. */
static const char *str(const char *s)
{
    return s ? s : "";
}

/* ---- generic helpers: messages whose shape repeats ------------------------------------ */
/*
 * Several requests are the same few fields under other names: a part id
 * (job, shard, checkpoint; Commit adds rows, GetBlob a blob name) or a job
 * alone (List, Verify, GetRecovery). They are read and written here once,
 * through protobuf-c's own field descriptors (name -> offset and type), so
 * adding such a message is one line, not three functions.
 */

/*
 * W1. A decoded request takes at most DECODE_FACTOR times its wire size
 * (plus DECODE_SLACK) of memory, counted with malloc's overhead: tiny
 * repeated items (an empty sub-message, an unknown field: 2 bytes each on
 * the wire) cost 50 times their size decoded, so a 20 MiB request became
 * 1 GiB before anything had checked who sent it. Every message CPR sends
 * decodes to under 9 times its size (a Begin of 4096 one-row tables), and
 * precheck bounds the items first. The memory is malloc's, so the
 * messages are freed as before (free_unpacked with the default allocator).
 */
#define DECODE_FACTOR CPRI_WIRE_DECODE_FACTOR /* wire.h: ckptd charges it (V4) */
#define DECODE_SLACK CPRI_WIRE_DECODE_SLACK
#define ALLOC_OVERHEAD 16 /* malloc's header, about */

typedef struct decode_budget {
    size_t used, cap;
} decode_budget;

static void *budget_alloc(void *data, size_t size)
{
    decode_budget *b = data;
    size_t cost = size + ALLOC_OVERHEAD;
    if (cost < size || cost > b->cap - b->used) {
        b->used = b->cap; /* said below: refused for its size */
        return NULL;
    }
    b->used += cost;
    return malloc(size);
}

static void budget_free(void *data, void *p)
{
    (void)data;
    free(p);
}

/* Unpack `desc`'s message from buf; CPR_INVALID_ARGUMENT names the type. */
static cpr_status unpack(const ProtobufCMessageDescriptor *desc, const void *buf, size_t len,
                         ProtobufCMessage **out)
{
    *out = NULL;
    cpr_status st = precheck(desc, buf, len, 0);
    if (st)
        return st;
    decode_budget b = {0, DECODE_FACTOR * len + DECODE_SLACK};
    ProtobufCAllocator a = {budget_alloc, budget_free, &b};
    *out = protobuf_c_message_unpack(desc, &a, len, buf);
    if (!*out && b.used == b.cap)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s of %zu bytes decodes to more than %zu "
                        "bytes of items (too many repeated or unknown fields): not a message "
                        "CPR sends", desc->short_name, len, b.cap);
    return *out ? CPR_OK : malformed(desc->short_name, len);
}

/* The address of field `name` of message m, or NULL if its type has none. */
/* Field `name` of m's type, checked against the C type the helpers below
 * read and write (`type`); NULL when the type has no such field (the
 * optional ones: rows, name). A field of another type is a bug here, not
 * input: the message types are ours. */
static const ProtobufCFieldDescriptor *field(const ProtobufCMessage *m, const char *name,
                                             int want_string)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
    if (f && f->label == PROTOBUF_C_LABEL_REPEATED)
        BUG("a repeated field where the wire helpers expect a scalar");
    if (f && want_string != (f->type == PROTOBUF_C_TYPE_STRING))
        BUG("a wire field whose type the helpers do not handle");
    if (f && !want_string && f->type != PROTOBUF_C_TYPE_UINT32 &&
        f->type != PROTOBUF_C_TYPE_UINT64)
        BUG("a wire field whose type the helpers do not handle");
    return f;
}

static const char *get_string(const ProtobufCMessage *m, const char *name)
{
    const ProtobufCFieldDescriptor *f = field(m, name, 1);
    return f ? str(*(char *const *)((const char *)m + f->offset)) : NULL;
}

static uint64_t get_u64(const ProtobufCMessage *m, const char *name)
{
    const ProtobufCFieldDescriptor *f = field(m, name, 0);
    if (!f)
        return 0;
    const char *at = (const char *)m + f->offset;
    return f->type == PROTOBUF_C_TYPE_UINT32 ? *(const uint32_t *)at : *(const uint64_t *)at;
}

static void set_string(ProtobufCMessage *m, const char *name, const char *value)
{
    const ProtobufCFieldDescriptor *f = field(m, name, 1);
    if (f)
        *(char **)((char *)m + f->offset) = (char *)str(value);
}

static void set_u64(ProtobufCMessage *m, const char *name, uint64_t value)
{
    const ProtobufCFieldDescriptor *f = field(m, name, 0);
    if (!f)
        return;
    char *at = (char *)m + f->offset;
    if (f->type == PROTOBUF_C_TYPE_UINT32)
        *(uint32_t *)at = (uint32_t)value;
    else
        *(uint64_t *)at = value;
}

/* A part-id request of type `desc`: job, shard, checkpoint, and rows and
 * name where the type has them. */
static cpr_status decode_part(const ProtobufCMessageDescriptor *desc, const void *buf,
                              size_t len, cpri_wire_part *out)
{
    ProtobufCMessage *m;
    cpr_status st = unpack(desc, buf, len, &m);
    if (st == CPR_OK)
        *out = (cpri_wire_part){.id = {get_string(m, "job"), (uint32_t)get_u64(m, "shard"),
                                       get_u64(m, "checkpoint")},
                                .lease = get_u64(m, "lease"), .rows = get_u64(m, "rows"),
                                .name = get_string(m, "name"), .msg = m};
    return st;
}

static cpr_status encode_part(const ProtobufCMessageDescriptor *desc, const cpr_part_id *id,
                              uint64_t lease, uint64_t rows, const char *name, uint8_t **buf,
                              size_t *len)
{
    _Alignas(16) unsigned char mem[256];
    if (desc->sizeof_message > sizeof mem)
        BUG("a part request outgrew encode_part's buffer");
    ProtobufCMessage *m = (ProtobufCMessage *)mem;
    desc->message_init(m);
    set_string(m, "job", id->job);
    set_u64(m, "shard", id->shard);
    set_u64(m, "checkpoint", id->checkpoint);
    set_u64(m, "lease", lease);
    set_u64(m, "rows", rows);
    set_string(m, "name", name);
    return pack(m, buf, len);
}

/* A job request of type `desc`; `all_if_empty`: an empty job means "every
 * job" (NULL), as Verify and Gc read it. */
static cpr_status decode_job(const ProtobufCMessageDescriptor *desc, const void *buf, size_t len,
                             int all_if_empty, cpri_wire_list *out)
{
    ProtobufCMessage *m;
    cpr_status st = unpack(desc, buf, len, &m);
    if (st == CPR_OK) {
        const char *job = get_string(m, "job");
        if (!job)
            BUG("a job request type without a job field");
        *out = (cpri_wire_list){all_if_empty && !*job ? NULL : job, m, 0};
    }
    return st;
}

static cpr_status encode_job(const ProtobufCMessageDescriptor *desc, const char *job,
                             uint8_t **buf, size_t *len)
{
    _Alignas(16) unsigned char mem[256];
    if (desc->sizeof_message > sizeof mem)
        BUG("a job request outgrew encode_job's buffer");
    ProtobufCMessage *m = (ProtobufCMessage *)mem;
    desc->message_init(m);
    set_string(m, "job", job);
    return pack(m, buf, len);
}

/* ---- Begin ------------------------------------------------------------------ */

cpr_status cpri_wire_begin_decode(const void *buf, size_t len, cpri_wire_begin *out)
{
    Cpr__V1__BeginRequest *m;
    cpr_status unpacked =
        unpack(&cpr__v1__begin_request__descriptor, buf, len, (ProtobufCMessage **)&m);
    if (unpacked)
        return unpacked;
    cpri_wire_begin b = {.msg = m};
    b.tables = malloc((m->n_tables ? m->n_tables : 1) * sizeof *b.tables);
    if (!b.tables) {
        cpr__v1__begin_request__free_unpacked(m, NULL);
        return cpr_fail(CPR_NO_MEMORY, "out of memory decoding BeginRequest");
    }
    for (size_t i = 0; i < m->n_tables; i++)
        b.tables[i] = (cpr_table_schema){m->tables[i]->table, m->tables[i]->rows,
                                         m->tables[i]->dim, m->tables[i]->state_dim};
    b.spec.id = (cpr_part_id){str(m->job), m->shard, m->checkpoint};
    b.spec.kind = (cpr_kind)m->kind; /* unknown values are refused by the store */
    b.spec.step = m->step;
    b.spec.num_shards = m->num_shards; /* 0 (unset) is refused by the store, as on local:// */
    b.spec.base = m->base_checkpoint;
    b.spec.tables = b.tables;
    b.spec.n_tables = m->n_tables;
    b.direct = str(m->direct);
    b.token = m->begin_token;
    *out = b;
    return CPR_OK;
}

void cpri_wire_begin_release(cpri_wire_begin *b)
{
    if (b->msg)
        cpr__v1__begin_request__free_unpacked(b->msg, NULL);
    free(b->tables);
    memset(b, 0, sizeof *b);
}

cpr_status cpri_wire_begin_encode(const cpr_part_spec *spec, uint8_t **buf, size_t *len)
{
    return cpri_wire_begin_encode_direct(spec, NULL, 0, buf, len);
}

cpr_status cpri_wire_begin_encode_direct(const cpr_part_spec *spec, const char *direct,
                                        uint64_t token, uint8_t **buf, size_t *len)
{
    Cpr__V1__BeginRequest m = CPR__V1__BEGIN_REQUEST__INIT;
    Cpr__V1__TableSchema *schemas = calloc(spec->n_tables + 1, sizeof *schemas);
    Cpr__V1__TableSchema **ptrs = calloc(spec->n_tables + 1, sizeof *ptrs);
    cpr_status st = CPR_OK;
    if (!schemas || !ptrs) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory encoding BeginRequest");
        goto out;
    }
    for (size_t i = 0; i < spec->n_tables; i++) {
        cpr__v1__table_schema__init(&schemas[i]);
        schemas[i].table = spec->tables[i].table;
        schemas[i].rows = spec->tables[i].rows;
        schemas[i].dim = spec->tables[i].dim;
        schemas[i].state_dim = spec->tables[i].state_dim;
        ptrs[i] = &schemas[i];
    }
    m.job = (char *)spec->id.job;
    m.shard = spec->id.shard;
    m.checkpoint = spec->id.checkpoint;
    m.kind = (Cpr__V1__Kind)spec->kind;
    m.step = spec->step;
    m.n_tables = spec->n_tables;
    m.tables = ptrs;
    m.num_shards = spec->num_shards;
    m.base_checkpoint = spec->base;
    m.direct = (char *)(direct ? direct : "");
    m.begin_token = token;
    st = pack(&m.base, buf, len);
out:
    free(schemas);
    free(ptrs);
    return st;
}

/* ---- row batches -------------------------------------------------------------- */

/* A view of `len` bytes at `bytes` as an array of `elem`-byte items: the
 * length must be a whole number of them; a misaligned pointer gets an
 * aligned copy. */
static cpr_status as_array(const uint8_t *bytes, size_t len, size_t elem, const char *field,
                           const void **data, size_t *count, void **copy)
{
    *copy = NULL;
    if (len % elem != 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s has %zu bytes: not a whole number of "
                        "%zu-byte items", field, len, elem);
    *count = len / elem;
    *data = bytes;
    if (len && ((uintptr_t)bytes % elem) != 0) {
        *copy = malloc(len);
        if (!*copy)
            return cpr_fail(CPR_NO_MEMORY, "out of memory for %s", field);
        memcpy(*copy, bytes, len);
        *data = *copy;
    }
    return CPR_OK;
}

/* ---- RowBatch, decoded in place ----------------------------------------------------
 * protobuf-c's unpack copies every bytes field; a RowBatch is almost all
 * bytes (a row block of up to megabytes), so it is read here field by field
 * straight from the message: protobuf's wire format (varint tags; wire type
 * 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32), unknown fields
 * skipped, a repeated singular field's last value kept, as protobuf does. */

typedef struct pb_reader {
    const uint8_t *p, *end;
} pb_reader;

static int pb_varint(pb_reader *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end)
            return -1;
        uint8_t byte = *r->p++;
        x |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* One field: its number, and for wire type 2 its bytes; varints in *v. */
static int pb_field(pb_reader *r, uint32_t *field, uint64_t *v, const uint8_t **bytes,
                    size_t *len)
{
    uint64_t tag;
    if (pb_varint(r, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
        return -1;
    *field = (uint32_t)(tag >> 3);
    *bytes = NULL;
    switch (tag & 7) {
    case 0:
        return pb_varint(r, v);
    case 1:
    case 5: {
        size_t n = (tag & 7) == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n)
            return -1;
        *v = 0;
        memcpy(v, r->p, n);
        r->p += n;
        return 0;
    }
    case 2:
        if (pb_varint(r, v) || *v > (uint64_t)(r->end - r->p))
            return -1;
        *bytes = r->p;
        *len = (size_t)*v;
        r->p += *len;
        return 0;
    default: /* groups (3, 4) and 6, 7: not in this contract */
        return -1;
    }
}

/* protobuf-c hands string fields over as C strings: an embedded NUL would
 * silently cut "job\0other" to "job". So every request's strings are
 * checked on the wire first, nested messages included (to a depth of 8).
 * W1: so are its counts, before anything is allocated: at most
 * ITEMS_MAX fields in one message (the store takes at most 2^20 ranges and
 * 2^20 tables in a query) and UNKNOWN_MAX that its type does not have. */
#define ITEMS_MAX ((size_t)2 << 20)
#define UNKNOWN_MAX 1024
static cpr_status precheck(const ProtobufCMessageDescriptor *desc, const void *buf,
                                size_t len, int depth)
{
    pb_reader rd = {buf, (const uint8_t *)buf + len};
    size_t items = 0, unknown = 0;
    while (rd.p < rd.end) {
        uint32_t num;
        uint64_t v = 0;
        const uint8_t *bytes = NULL;
        size_t blen = 0;
        if (pb_field(&rd, &num, &v, &bytes, &blen))
            return CPR_OK; /* malformed: unpack says so */
        const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(desc, num);
        unknown += f == NULL;
        if (++items > ITEMS_MAX || unknown > UNKNOWN_MAX)
            return cpr_fail(CPR_INVALID_ARGUMENT, "%s has more than %s: not a message CPR "
                            "sends", desc->short_name,
                            unknown > UNKNOWN_MAX ? "1024 fields its type does not have"
                                                  : "2^21 fields");
        if (!bytes)
            f = NULL; /* a number: no string or message to look into */
        if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(bytes, 0, blen))
            return cpr_fail(CPR_INVALID_ARGUMENT, "%s.%s holds a NUL byte: names are text "
                            "without NULs", desc->short_name, f->name);
        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE && depth < 8) {
            cpr_status st = precheck(f->descriptor, bytes, blen, depth + 1);
            if (st)
                return st;
        }
    }
    return CPR_OK;
}

cpr_status cpri_wire_rows_decode(const void *buf, size_t len, cpri_wire_rows *out)
{
    pb_reader rd = {buf, (const uint8_t *)buf + len};
    cpri_wire_rows r;
    const uint8_t *ids = NULL, *values = NULL, *state = NULL, *job = NULL, *vers = NULL;
    size_t ids_len = 0, values_len = 0, state_len = 0, job_len = 0, vers_len = 0;
    memset(&r, 0, sizeof r);
    while (rd.p < rd.end) {
        uint32_t f;
        uint64_t v = 0;
        const uint8_t *bytes;
        size_t blen = 0;
        if (pb_field(&rd, &f, &v, &bytes, &blen))
            return malformed("RowBatch", len);
        int is_len = bytes != NULL;
        if ((f == 1 || f == 5 || f == 6 || f == 7 || f == 11 || f == 13 || f == 14) !=
                is_len && f <= 14)
            return malformed("RowBatch", len); /* a known field of the wrong type */
        switch (f) {
        case 1: job = bytes; job_len = blen; break;
        case 2: r.id.shard = (uint32_t)v; break;
        case 3: r.id.checkpoint = v; break;
        case 4: r.batch.table = (uint32_t)v; break;
        case 5: ids = bytes; ids_len = blen; break;
        case 6: values = bytes; values_len = blen; break;
        case 7: state = bytes; state_len = blen; break;
        case 8: r.batch.crc32c = (uint32_t)v; break;
        case 9: r.dim = (uint32_t)v; break;
        case 10: r.state_dim = (uint32_t)v; break;
        case 11: r.block = bytes; r.block_len = blen; break;
        case 12: r.lease = v; break;
        case 13: r.plan = bytes; r.plan_len = blen; break;
        case 14: vers = bytes; vers_len = blen; break;
        default: break; /* unknown: skipped */
        }
    }
    if (job_len > CPR_NAME_MAX || (job && memchr(job, 0, job_len)))
        return cpr_fail(CPR_INVALID_ARGUMENT, "RowBatch: the job name is longer than %d "
                        "bytes or holds a NUL byte", CPR_NAME_MAX);
    if (job_len)
        memcpy(r.job, job, job_len);
    const void *a = NULL, *b = NULL, *c = NULL;
    cpr_status st = as_array(ids, ids_len, 8, "ids", &a, &r.batch.n, &r.copies[0]);
    if (st == CPR_OK)
        st = as_array(values, values_len, 4, "values", &b, &r.batch.values_count, &r.copies[1]);
    if (st == CPR_OK)
        st = as_array(state, state_len, 4, "state", &c, &r.batch.state_count, &r.copies[2]);
    const void *d = NULL;
    size_t n_versions = 0;
    if (st == CPR_OK && vers) {
        st = as_array(vers, vers_len, 8, "versions", &d, &n_versions, &r.copies[3]);
        if (st == CPR_OK && n_versions != r.batch.n)
            st = cpr_fail(CPR_INVALID_ARGUMENT, "RowBatch carries %zu versions for %zu rows: "
                          "send one per row", n_versions, r.batch.n);
        r.versions = d;
    }
    if (st) {
        cpri_wire_rows_release(&r);
        return st;
    }
    r.batch.ids = a;
    r.batch.values = b;
    r.batch.state = r.batch.state_count ? c : NULL;
    if (r.block && (r.batch.n || r.batch.values_count || r.batch.state_count)) {
        cpri_wire_rows_release(&r);
        return cpr_fail(CPR_INVALID_ARGUMENT, "RowBatch carries a block and ids/values/"
                        "state: send one or the other");
    }
    if (r.plan && (r.block || r.batch.n || r.batch.values_count || r.batch.state_count)) {
        cpri_wire_rows_release(&r);
        return cpr_fail(CPR_INVALID_ARGUMENT, "RowBatch carries a piece of a restore plan and "
                        "rows: send one or the other");
    }
    *out = r;
    out->id.job = out->job; /* into *out, not the local copy */
    return CPR_OK;
}

void cpri_wire_rows_release(cpri_wire_rows *r)
{
    for (int i = 0; i < 4; i++)
        free(r->copies[i]);
    memset(r, 0, sizeof *r);
}

cpr_status cpri_wire_rows_encode(const cpr_part_id *id, uint64_t lease, const cpr_row_batch *b,
                                uint32_t dim, uint32_t state_dim, uint8_t **buf, size_t *len)
{
    Cpr__V1__RowBatch m = CPR__V1__ROW_BATCH__INIT;
    m.job = (char *)id->job;
    m.shard = id->shard;
    m.checkpoint = id->checkpoint;
    m.lease = lease;
    m.table = b->table;
    m.ids = (ProtobufCBinaryData){b->n * 8, (uint8_t *)b->ids};
    m.values = (ProtobufCBinaryData){b->values_count * 4, (uint8_t *)b->values};
    m.state = (ProtobufCBinaryData){b->state_count * 4, (uint8_t *)b->state};
    m.crc32c = b->crc32c;
    m.dim = dim;
    m.state_dim = state_dim;
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_rows_encode_versions(const cpr_row_batch *b, uint32_t dim,
                                         uint32_t state_dim, const uint64_t *versions,
                                         uint8_t **buf, size_t *len)
{
    Cpr__V1__RowBatch m = CPR__V1__ROW_BATCH__INIT;
    m.job = "";
    m.table = b->table;
    m.ids = (ProtobufCBinaryData){b->n * 8, (uint8_t *)b->ids};
    m.values = (ProtobufCBinaryData){b->values_count * 4, (uint8_t *)b->values};
    m.state = (ProtobufCBinaryData){b->state_count * 4, (uint8_t *)b->state};
    m.versions = (ProtobufCBinaryData){b->n * 8, (uint8_t *)versions};
    m.crc32c = cpr_crc32c(b->crc32c, versions, b->n * 8);
    m.dim = dim;
    m.state_dim = state_dim;
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_block_encode(const cpr_part_id *id, uint64_t lease, const void *block,
                                 size_t block_len, uint8_t **buf, size_t *len)
{
    Cpr__V1__RowBatch m = CPR__V1__ROW_BATCH__INIT;
    m.job = (char *)id->job;
    m.shard = id->shard;
    m.checkpoint = id->checkpoint;
    m.lease = lease;
    m.block = (ProtobufCBinaryData){block_len, (uint8_t *)block};
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_plan_encode(const void *piece, size_t len, uint8_t **buf, size_t *out_len)
{
    Cpr__V1__RowBatch m = CPR__V1__ROW_BATCH__INIT;
    m.plan = (ProtobufCBinaryData){len, (uint8_t *)piece};
    return pack(&m.base, buf, out_len);
}

/* ---- blob chunks ----------------------------------------------------------------- */

cpr_status cpri_wire_chunk_decode(const void *buf, size_t len, cpri_wire_chunk *out)
{
    Cpr__V1__BlobChunk *m;
    cpr_status unpacked =
        unpack(&cpr__v1__blob_chunk__descriptor, buf, len, (ProtobufCMessage **)&m);
    if (unpacked)
        return unpacked;
    *out = (cpri_wire_chunk){
        .id = {str(m->job), m->shard, m->checkpoint}, .lease = m->lease, .name = str(m->name),
        .offset = m->offset, .size = m->size, .data = m->data.data, .len = m->data.len,
        .crc32c = m->crc32c, .msg = m,
    };
    return CPR_OK;
}

void cpri_wire_chunk_release(cpri_wire_chunk *c)
{
    if (c->msg)
        cpr__v1__blob_chunk__free_unpacked(c->msg, NULL);
    memset(c, 0, sizeof *c);
}

cpr_status cpri_wire_chunk_encode(const cpr_part_id *id, uint64_t lease, const char *name,
                                 uint64_t offset, uint64_t size, const void *data,
                                 size_t data_len, uint32_t crc32c, uint8_t **buf, size_t *len)
{
    Cpr__V1__BlobChunk m = CPR__V1__BLOB_CHUNK__INIT;
    m.job = (char *)id->job;
    m.shard = id->shard;
    m.checkpoint = id->checkpoint;
    m.lease = lease;
    m.name = (char *)name;
    m.offset = offset;
    m.size = size;
    m.data = (ProtobufCBinaryData){data_len, (uint8_t *)data};
    m.crc32c = crc32c;
    return pack(&m.base, buf, len);
}

/* ---- commit, abort, get-blob ---------------------------------------------------------- */

cpr_status cpri_wire_commit_decode(const void *buf, size_t len, cpri_wire_part *out)
{
    cpr_status st = decode_part(&cpr__v1__commit_request__descriptor, buf, len, out);
    if (st == CPR_OK) {
        const Cpr__V1__CommitRequest *m = out->msg;
        out->blobs = m->blobs;
        out->blob_bytes = m->blob_bytes;
        out->check_blobs = m->check_blobs;
        out->direct = m->direct;
        out->segment_index = m->segment_index.data;
        out->index_len = m->segment_index.len;
        out->segment_bytes = m->segment_bytes;
    }
    return st;
}

/* A Commit naming the part, its lease, and the rows and blobs sent. */
static void commit_fill(Cpr__V1__CommitRequest *m, const cpr_part_id *id, uint64_t lease,
                        uint64_t rows, uint64_t blobs, uint64_t blob_bytes)
{
    m->job = (char *)id->job;
    m->shard = id->shard;
    m->checkpoint = id->checkpoint;
    m->rows = rows;
    m->lease = lease;
    m->blobs = blobs;
    m->blob_bytes = blob_bytes;
    m->check_blobs = 1;
}

/* CommitRequest.segment_index: one record per block (the .proto). The host
 * is little-endian (the build checks), so fields are copied as they are. */
#define INDEX_RECORD 40u

static uint32_t get32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

cpr_status cpri_wire_segment_index_decode(const void *index, size_t len,
                                         cpr_store_block_ref **refs, size_t *n)
{
    const unsigned char *p = index;
    *refs = NULL;
    *n = 0;
    if (len % INDEX_RECORD)
        return cpr_fail(CPR_INVALID_ARGUMENT, "CommitRequest.segment_index has %zu bytes, "
                        "not a multiple of its %u-byte records", len, INDEX_RECORD);
    size_t count = len / INDEX_RECORD;
    cpr_store_block_ref *r = malloc((count ? count : 1) * sizeof *r);
    if (!r)
        return cpr_fail(CPR_NO_MEMORY, "out of memory decoding a segment index of %zu blocks",
                        count);
    for (size_t i = 0; i < count; i++, p += INDEX_RECORD)
        r[i] = (cpr_store_block_ref){get32(p), get32(p + 4), get64(p + 8), get64(p + 16),
                                     get64(p + 24), get32(p + 32), get32(p + 36)};
    *refs = r;
    *n = count;
    return CPR_OK;
}

cpr_status cpri_wire_commit_encode_direct(const cpr_part_id *id, uint64_t lease, uint64_t rows,
                                         uint64_t blobs, uint64_t blob_bytes,
                                         const cpr_store_block_ref *refs, size_t n,
                                         uint64_t segment_bytes, uint8_t **buf, size_t *len)
{
    Cpr__V1__CommitRequest m = CPR__V1__COMMIT_REQUEST__INIT;
    unsigned char *index = malloc(n ? n * INDEX_RECORD : 1);
    if (!index)
        return cpr_fail(CPR_NO_MEMORY, "out of memory encoding a segment index of %zu blocks",
                        n);
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = index + i * INDEX_RECORD;
        const cpr_store_block_ref *r = &refs[i];
        memcpy(p, &r->table, 4);
        memcpy(p + 4, &r->n, 4);
        memcpy(p + 8, &r->first_row, 8);
        memcpy(p + 16, &r->last_row, 8);
        memcpy(p + 24, &r->offset, 8);
        memcpy(p + 32, &r->len, 4);
        memcpy(p + 36, &r->crc32c, 4);
    }
    commit_fill(&m, id, lease, rows, blobs, blob_bytes);
    m.direct = 1;
    m.segment_index = (ProtobufCBinaryData){n * INDEX_RECORD, index};
    m.segment_bytes = segment_bytes;
    cpr_status st = pack(&m.base, buf, len);
    free(index);
    return st;
}

cpr_status cpri_wire_abort_decode(const void *buf, size_t len, cpri_wire_part *out)
{
    return decode_part(&cpr__v1__abort_request__descriptor, buf, len, out);
}

cpr_status cpri_wire_getblob_decode(const void *buf, size_t len, cpri_wire_part *out)
{
    return decode_part(&cpr__v1__get_blob_request__descriptor, buf, len, out);
}

void cpri_wire_part_release(cpri_wire_part *p)
{
    if (p->msg) /* every part request is a plain message: the generic free fits */
        protobuf_c_message_free_unpacked(p->msg, NULL);
    memset(p, 0, sizeof *p);
}

cpr_status cpri_wire_commit_encode_blobs(const cpr_part_id *id, uint64_t lease, uint64_t rows,
                                        uint64_t blobs, uint64_t blob_bytes, uint8_t **buf,
                                        size_t *len)
{
    Cpr__V1__CommitRequest m = CPR__V1__COMMIT_REQUEST__INIT;
    commit_fill(&m, id, lease, rows, blobs, blob_bytes);
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_commit_encode(const cpr_part_id *id, uint64_t lease, uint64_t rows,
                                  uint8_t **buf, size_t *len)
{
    return encode_part(&cpr__v1__commit_request__descriptor, id, lease, rows, NULL, buf, len);
}

cpr_status cpri_wire_abort_encode(const cpr_part_id *id, uint64_t lease, uint8_t **buf,
                                 size_t *len)
{
    return encode_part(&cpr__v1__abort_request__descriptor, id, lease, 0, NULL, buf, len);
}

cpr_status cpri_wire_begin_response_encode(uint64_t lease, uint8_t **buf, size_t *len)
{
    Cpr__V1__BeginResponse m = CPR__V1__BEGIN_RESPONSE__INIT;
    m.lease = lease;
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_begin_response_decode(const void *buf, size_t len, uint64_t *lease)
{
    Cpr__V1__BeginResponse *m = cpr__v1__begin_response__unpack(NULL, len, buf);
    if (!m)
        return malformed("BeginResponse", len);
    *lease = m->lease; /* a segment nobody asked for is not looked at */
    cpr__v1__begin_response__free_unpacked(m, NULL);
    return CPR_OK;
}

cpr_status cpri_wire_begin_response_encode_segment(uint64_t lease, const char *segment,
                                                  uint8_t **buf, size_t *len)
{
    Cpr__V1__BeginResponse m = CPR__V1__BEGIN_RESPONSE__INIT;
    m.lease = lease;
    m.segment = (char *)(segment ? segment : "");
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_begin_response_decode_segment(const void *buf, size_t len, uint64_t *lease,
                                                  char *segment, size_t cap)
{
    Cpr__V1__BeginResponse *m = cpr__v1__begin_response__unpack(NULL, len, buf);
    if (!m)
        return malformed("BeginResponse", len);
    *lease = m->lease;
    const char *got = str(m->segment);
    cpr_status st = strlen(got) < cap ? CPR_OK
                                      : cpr_fail(CPR_INVALID_ARGUMENT, "BeginResponse.segment "
                                                 "has %zu bytes, more than the %zu expected",
                                                 strlen(got), cap - 1);
    snprintf(segment, cap, "%s", st == CPR_OK ? got : "");
    cpr__v1__begin_response__free_unpacked(m, NULL);
    return st;
}

cpr_status cpri_wire_getblob_encode(const cpr_part_id *id, const char *name, uint8_t **buf,
                                   size_t *len)
{
    return encode_part(&cpr__v1__get_blob_request__descriptor, id, 0, 0, name, buf, len);
}

/* ---- restore and list ------------------------------------------------------------------ */

cpr_status cpri_wire_restore_decode(const void *buf, size_t len, cpri_wire_restore *out)
{
    Cpr__V1__RestoreRequest *m;
    cpr_status unpacked =
        unpack(&cpr__v1__restore_request__descriptor, buf, len, (ProtobufCMessage **)&m);
    if (unpacked)
        return unpacked;
    cpri_wire_restore r = {.msg = m};
    r.ranges = malloc((m->n_ranges ? m->n_ranges : 1) * sizeof *r.ranges);
    if (!r.ranges) {
        cpri_wire_restore_release(&r);
        return cpr_fail(CPR_NO_MEMORY, "out of memory decoding RestoreRequest");
    }
    for (size_t i = 0; i < m->n_ranges; i++)
        r.ranges[i] = (cpr_row_range){m->ranges[i]->begin, m->ranges[i]->end};
    r.query = (cpr_restore_query){
        .job = str(m->job), .as_of = m->as_of, .consistent = m->consistent,
        .tables = m->tables, .n_tables = m->n_tables, .ranges = r.ranges,
        .n_ranges = m->n_ranges, .modulo = m->modulo, .remainder = m->remainder,
        .batch_rows = m->batch_rows,
    };
    r.blocks = m->blocks;
    r.direct = str(m->direct);
    r.plan_version = m->plan_version;
    r.versions = m->versions;
    *out = r;
    return CPR_OK;
}

void cpri_wire_restore_release(cpri_wire_restore *r)
{
    if (r->msg)
        cpr__v1__restore_request__free_unpacked(r->msg, NULL);
    free(r->ranges);
    memset(r, 0, sizeof *r);
}

cpr_status cpri_wire_restore_encode(const cpr_restore_query *q, uint8_t **buf, size_t *len)
{
    return cpri_wire_restore_encode_blocks(q, 0, NULL, buf, len);
}

static cpr_status encode_restore(const cpr_restore_query *q, int blocks, const char *direct,
                                 int versions, uint8_t **buf, size_t *len);

cpr_status cpri_wire_restore_encode_blocks(const cpr_restore_query *q, int blocks,
                                          const char *direct, uint8_t **buf, size_t *len)
{
    return encode_restore(q, blocks, direct, 0, buf, len);
}

cpr_status cpri_wire_restore_encode_versions(const cpr_restore_query *q, uint8_t **buf,
                                            size_t *len)
{
    return encode_restore(q, 1, NULL, 1, buf, len);
}

static cpr_status encode_restore(const cpr_restore_query *q, int blocks, const char *direct,
                                 int versions, uint8_t **buf, size_t *len)
{
    Cpr__V1__RestoreRequest m = CPR__V1__RESTORE_REQUEST__INIT;
    Cpr__V1__RowRange *ranges = calloc(q->n_ranges + 1, sizeof *ranges);
    Cpr__V1__RowRange **ptrs = calloc(q->n_ranges + 1, sizeof *ptrs);
    cpr_status st = CPR_OK;
    if (!ranges || !ptrs) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory encoding RestoreRequest");
        goto out;
    }
    for (size_t i = 0; i < q->n_ranges; i++) {
        cpr__v1__row_range__init(&ranges[i]);
        ranges[i].begin = q->ranges[i].begin;
        ranges[i].end = q->ranges[i].end;
        ptrs[i] = &ranges[i];
    }
    m.job = (char *)q->job;
    m.as_of = q->as_of;
    m.consistent = q->consistent != 0;
    m.n_tables = q->n_tables;
    m.tables = (uint32_t *)q->tables;
    m.n_ranges = q->n_ranges;
    m.ranges = ptrs;
    m.modulo = q->modulo;
    m.remainder = q->remainder;
    m.batch_rows = (uint32_t)q->batch_rows;
    m.blocks = blocks != 0;
    m.direct = (char *)(direct ? direct : "");
    m.plan_version = direct ? CPR_STORE_PLAN_VERSION : 0; /* what this build reads */
    m.versions = versions != 0;
    st = pack(&m.base, buf, len);
out:
    free(ranges);
    free(ptrs);
    return st;
}

cpr_status cpri_wire_list_decode(const void *buf, size_t len, cpri_wire_list *out)
{
    cpr_status st = decode_job(&cpr__v1__list_request__descriptor, buf, len, 0, out);
    if (st == CPR_OK)
        out->locations = ((const Cpr__V1__ListRequest *)out->msg)->locations;
    return st;
}

void cpri_wire_list_release(cpri_wire_list *l)
{
    if (l->msg) /* a List, Verify or GetRecovery request: the generic free fits all */
        protobuf_c_message_free_unpacked(l->msg, NULL);
    memset(l, 0, sizeof *l);
}

cpr_status cpri_wire_list_encode(const char *job, uint8_t **buf, size_t *len)
{
    return encode_job(&cpr__v1__list_request__descriptor, job, buf, len);
}

cpr_status cpri_wire_list_where_encode(const char *job, uint8_t **buf, size_t *len)
{
    Cpr__V1__ListRequest m = CPR__V1__LIST_REQUEST__INIT;
    m.job = (char *)(job ? job : "");
    m.locations = 1;
    return pack(&m.base, buf, len);
}

/* ---- list jobs, verify, gc ------------------------------------------------------------------ */

/* "" (protobuf's absent string) as NULL: "every job". */
static const char *job_or_all(const char *job)
{
    return job && *job ? job : NULL;
}

cpr_status cpri_wire_list_jobs_decode(const void *buf, size_t len)
{
    ProtobufCMessage *m = NULL;
    cpr_status st = unpack(&cpr__v1__list_jobs_request__descriptor, buf, len, &m); /* W1 */
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    return st;
}

cpr_status cpri_wire_list_jobs_encode(uint8_t **buf, size_t *len)
{
    Cpr__V1__ListJobsRequest m = CPR__V1__LIST_JOBS_REQUEST__INIT;
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_verify_decode(const void *buf, size_t len, cpri_wire_list *out)
{
    return decode_job(&cpr__v1__verify_request__descriptor, buf, len, 1, out);
}

cpr_status cpri_wire_verify_encode(const char *job, uint8_t **buf, size_t *len)
{
    return encode_job(&cpr__v1__verify_request__descriptor, job, buf, len);
}

cpr_status cpri_wire_gc_decode(const void *buf, size_t len, cpri_wire_gc *out)
{
    Cpr__V1__GcRequest *m;
    cpr_status unpacked =
        unpack(&cpr__v1__gc_request__descriptor, buf, len, (ProtobufCMessage **)&m);
    if (unpacked)
        return unpacked;
    *out = (cpri_wire_gc){job_or_all(m->job), m->keep, m->floor, m, m->floor_is_cut};
    return CPR_OK;
}

void cpri_wire_gc_release(cpri_wire_gc *g)
{
    if (g->msg)
        cpr__v1__gc_request__free_unpacked(g->msg, NULL);
    memset(g, 0, sizeof *g);
}

cpr_status cpri_wire_gc_encode(const char *job, uint32_t keep, uint64_t floor, uint8_t **buf,
                              size_t *len)
{
    Cpr__V1__GcRequest m = CPR__V1__GC_REQUEST__INIT;
    m.job = (char *)str(job);
    m.keep = keep;
    m.floor = floor;
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_gc_encode_cut(const char *job, uint64_t floor, uint8_t **buf, size_t *len)
{
    Cpr__V1__GcRequest m = CPR__V1__GC_REQUEST__INIT;
    m.job = (char *)str(job);
    m.floor = floor;
    m.floor_is_cut = 1;
    return pack(&m.base, buf, len);
}

/* ---- responses ------------------------------------------------------------------------------ */

cpr_status cpri_wire_put_response_encode(uint64_t rows, uint64_t bytes, uint8_t **buf, size_t *len)
{
    Cpr__V1__PutResponse m = CPR__V1__PUT_RESPONSE__INIT;
    m.rows = rows;
    m.bytes = bytes;
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_list_response_encode(const cpr_part_info *parts, size_t n,
                                         uint64_t latest_consistent,
                                         char *const *locations, const char *store,
                                         uint8_t **buf, size_t *len)
{
    Cpr__V1__ListResponse m = CPR__V1__LIST_RESPONSE__INIT;
    Cpr__V1__PartInfo *infos = calloc(n + 1, sizeof *infos);
    Cpr__V1__PartInfo **ptrs = calloc(n + 1, sizeof *ptrs);
    cpr_status st = CPR_OK;
    if (!infos || !ptrs) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory encoding a list of %zu parts", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        cpr__v1__part_info__init(&infos[i]);
        infos[i].shard = parts[i].shard;
        infos[i].checkpoint = parts[i].checkpoint;
        infos[i].kind = (Cpr__V1__Kind)parts[i].kind;
        infos[i].step = parts[i].step;
        infos[i].rows = parts[i].rows;
        infos[i].bytes = parts[i].bytes;
        infos[i].committed = parts[i].committed != 0;
        infos[i].consistent = parts[i].consistent != 0;
        infos[i].num_shards = parts[i].num_shards;
        infos[i].base_checkpoint = parts[i].base;
        infos[i].codecs = parts[i].codecs;
        if (locations && locations[i])
            infos[i].location = locations[i];
        ptrs[i] = &infos[i];
    }
    m.n_parts = n;
    m.parts = ptrs;
    m.latest_consistent = latest_consistent;
    if (store)
        m.store = (char *)store;
    st = pack(&m.base, buf, len);
out:
    free(infos);
    free(ptrs);
    return st;
}

cpr_status cpri_wire_list_response_decode(const void *buf, size_t len, cpr_part_info **parts,
                                         size_t *n, uint64_t *latest_consistent)
{
    return cpri_wire_list_response_decode_where(buf, len, parts, n, latest_consistent, NULL,
                                                NULL, 0);
}

cpr_status cpri_wire_list_response_decode_where(const void *buf, size_t len,
                                               cpr_part_info **parts, size_t *n,
                                               uint64_t *latest_consistent, char ***locations,
                                               char *store, size_t store_cap)
{
    Cpr__V1__ListResponse *m = cpr__v1__list_response__unpack(NULL, len, buf);
    if (!m)
        return malformed("ListResponse", len);
    cpr_part_info *out = calloc(m->n_parts + 1, sizeof *out);
    char **where = locations ? calloc(m->n_parts + 1, sizeof *where) : NULL;
    for (size_t i = 0; where && i < m->n_parts; i++) {
        where[i] = strdup(m->parts[i]->location ? m->parts[i]->location : "");
        if (!where[i]) {
            cpr_names_free(where, i);
            where = NULL;
        }
    }
    if (!out || (locations && !where)) {
        free(out);
        cpr__v1__list_response__free_unpacked(m, NULL);
        return cpr_fail(CPR_NO_MEMORY, "out of memory decoding a list of parts");
    }
    if (locations)
        *locations = where;
    if (store && store_cap)
        snprintf(store, store_cap, "%s", m->store ? m->store : "");
    for (size_t i = 0; i < m->n_parts; i++) {
        const Cpr__V1__PartInfo *p = m->parts[i];
        out[i] = (cpr_part_info){p->shard, p->checkpoint, (cpr_kind)p->kind, p->step,
                                 p->num_shards, p->base_checkpoint, p->rows, p->bytes, p->committed,
                                 p->consistent, p->codecs};
    }
    *parts = out;
    *n = m->n_parts;
    *latest_consistent = m->latest_consistent;
    cpr__v1__list_response__free_unpacked(m, NULL);
    return CPR_OK;
}

/* gRPC status names by code: ErrorCount.code. */
static const char *const grpc_names[17] = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED"};

cpr_status cpri_wire_stats_response_encode(const cpr_store_stats *s, uint8_t **buf, size_t *len)
{
    Cpr__V1__StatsResponse m = CPR__V1__STATS_RESPONSE__INIT;
    Cpr__V1__ErrorCount counts[CPR_STATUS_COUNT_], *ptrs[CPR_STATUS_COUNT_];
    size_t n = 0;
    /* One entry per status: the exact status, and its gRPC code for clients
     * that know only codes (they sum the entries of one code). */
    for (int st = 1; st < CPR_STATUS_COUNT_; st++) {
        if (!s->errors[st])
            continue;
        cpr__v1__error_count__init(&counts[n]);
        counts[n].code = (char *)grpc_names[cpr_status_grpc((cpr_status)st) % 17];
        counts[n].status = (char *)cpr_status_name((cpr_status)st);
        counts[n].count = s->errors[st];
        ptrs[n] = &counts[n];
        n++;
    }
    m.parts = s->parts_committed;
    m.rows_in = s->rows_in;
    m.bytes_in = s->bytes_in;
    m.rows_out = s->rows_out;
    m.bytes_out = s->bytes_out;
    m.n_errors = n;
    m.errors = ptrs;
    m.store_bytes = s->store_bytes;
    m.jobs = s->jobs;
    m.parts_open = s->parts_open;
    return pack(&m.base, buf, len);
}

/* The status a received ErrorCount stands for: its exact status when the
 * sender named one this build knows, else what its gRPC code stands for. */
static cpr_status status_of_count(const Cpr__V1__ErrorCount *e)
{
    cpr_status st = e->status ? cpri_status_from_name(e->status, strlen(e->status)) : CPR_OK;
    if (st != CPR_OK)
        return st;
    const char *name = e->code;
    for (int code = 0; code < 17; code++)
        if (name && strcmp(name, grpc_names[code]) == 0)
            return cpr_status_from_grpc(code);
    return CPR_INTERNAL; /* a code newer than this build */
}

cpr_status cpri_wire_stats_response_decode(const void *buf, size_t len, cpr_store_stats *out)
{
    Cpr__V1__StatsResponse *m = cpr__v1__stats_response__unpack(NULL, len, buf);
    if (!m)
        return malformed("StatsResponse", len);
    cpr_store_stats s;
    memset(&s, 0, sizeof s);
    s.jobs = m->jobs;
    s.parts_committed = m->parts;
    s.parts_open = m->parts_open;
    s.rows_in = m->rows_in;
    s.bytes_in = m->bytes_in;
    s.rows_out = m->rows_out;
    s.bytes_out = m->bytes_out;
    s.store_bytes = m->store_bytes;
    for (size_t i = 0; i < m->n_errors; i++) {
        cpr_status st = status_of_count(m->errors[i]);
        if (st != CPR_OK) /* OK is no error: never sent, ignored if it is */
            s.errors[st] += m->errors[i]->count;
    }
    cpr__v1__stats_response__free_unpacked(m, NULL);
    *out = s;
    return CPR_OK;
}

cpr_status cpri_wire_list_jobs_response_encode(char *const *jobs, size_t n, uint8_t **buf,
                                              size_t *len)
{
    Cpr__V1__ListJobsResponse m = CPR__V1__LIST_JOBS_RESPONSE__INIT;
    m.n_jobs = n;
    m.jobs = (char **)jobs;
    return pack(&m.base, buf, len);
}

/* A malloc'd copy of s (NULL on OOM). */
static char *copy_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c)
        memcpy(c, s, n);
    return c;
}

cpr_status cpri_wire_list_jobs_response_decode(const void *buf, size_t len, char ***jobs,
                                              size_t *n)
{
    Cpr__V1__ListJobsResponse *m = cpr__v1__list_jobs_response__unpack(NULL, len, buf);
    if (!m)
        return malformed("ListJobsResponse", len);
    size_t count = 0, want = m->n_jobs;
    char **names = calloc(want + 1, sizeof *names); /* NULL-terminated */
    while (names && count < want && (names[count] = copy_string(str(m->jobs[count]))))
        count++;
    cpr__v1__list_jobs_response__free_unpacked(m, NULL);
    if (!names || count < want) {
        cpr_names_free(names, count);
        return cpr_fail(CPR_NO_MEMORY, "out of memory decoding a list of %zu jobs", want);
    }
    *jobs = names;
    *n = count;
    return CPR_OK;
}

cpr_status cpri_wire_verify_response_encode(const cpr_verify_report *r,
                                           const cpri_wire_problem *details, size_t n,
                                           uint8_t **buf, size_t *len)
{
    if (n > CPR_WIRE_MAX_PROBLEMS)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a VerifyResponse carries at most %d "
                        "problems; got %zu", CPR_WIRE_MAX_PROBLEMS, n);
    Cpr__V1__VerifyResponse m = CPR__V1__VERIFY_RESPONSE__INIT;
    Cpr__V1__Problem *problems = calloc(n + 1, sizeof *problems);
    Cpr__V1__Problem **ptrs = calloc(n + 1, sizeof *ptrs);
    cpr_status st = CPR_OK;
    if (!problems || !ptrs) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory encoding %zu problems", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        cpr__v1__problem__init(&problems[i]);
        problems[i].what = (char *)str(details[i].what);
        problems[i].where = (char *)str(details[i].where);
        ptrs[i] = &problems[i];
    }
    m.rows_checked = r->rows_checked;
    m.blobs_checked = r->blobs_checked;
    m.bytes_checked = r->bytes_checked;
    m.problems = r->problems;
    m.n_details = n;
    m.details = ptrs;
    st = pack(&m.base, buf, len);
out:
    free(problems);
    free(ptrs);
    return st;
}

cpr_status cpri_wire_verify_response_decode(const void *buf, size_t len,
                                           cpr_verify_report *report, cpr_problem_fn fn,
                                           void *ctx)
{
    Cpr__V1__VerifyResponse *m = cpr__v1__verify_response__unpack(NULL, len, buf);
    if (!m)
        return malformed("VerifyResponse", len);
    for (size_t i = 0; fn && i < m->n_details; i++)
        fn(ctx, str(m->details[i]->what), str(m->details[i]->where));
    *report = (cpr_verify_report){m->rows_checked, m->blobs_checked, m->bytes_checked,
                                  m->problems};
    cpr__v1__verify_response__free_unpacked(m, NULL);
    return CPR_OK;
}

cpr_status cpri_wire_gc_response_encode(const cpr_gc_report *r, uint8_t **buf, size_t *len)
{
    Cpr__V1__GcResponse m = CPR__V1__GC_RESPONSE__INIT;
    m.floor = r->floor;
    m.parts_removed = r->parts_removed;
    m.versions_removed = r->versions_removed;
    m.uncommitted_removed = r->uncommitted_removed;
    m.bytes_before = r->bytes_before;
    m.bytes_after = r->bytes_after;
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_gc_response_decode(const void *buf, size_t len, cpr_gc_report *out)
{
    Cpr__V1__GcResponse *m = cpr__v1__gc_response__unpack(NULL, len, buf);
    if (!m)
        return malformed("GcResponse", len);
    *out = (cpr_gc_report){m->floor, m->parts_removed, m->versions_removed,
                           m->uncommitted_removed, m->bytes_before, m->bytes_after};
    cpr__v1__gc_response__free_unpacked(m, NULL);
    return CPR_OK;
}

/* ---- recovery records ----------------------------------------------------------------------- */

cpr_status cpri_wire_get_recovery_decode(const void *buf, size_t len, cpri_wire_list *out)
{
    return decode_job(&cpr__v1__get_recovery_request__descriptor, buf, len, 0, out);
}

cpr_status cpri_wire_get_recovery_encode(const char *job, uint8_t **buf, size_t *len)
{
    return encode_job(&cpr__v1__get_recovery_request__descriptor, job, buf, len);
}

cpr_status cpri_wire_put_recovery_decode(const void *buf, size_t len, cpri_wire_recovery *out)
{
    Cpr__V1__PutRecoveryRequest *m;
    cpr_status unpacked =
        unpack(&cpr__v1__put_recovery_request__descriptor, buf, len, (ProtobufCMessage **)&m);
    if (unpacked)
        return unpacked;
    *out = (cpri_wire_recovery){str(m->job), m->expected_generation,
                               m->plan.len ? m->plan.data : NULL, m->plan.len, 0, m};
    return CPR_OK;
}

cpr_status cpri_wire_put_recovery_encode(const char *job, uint64_t expected, const void *plan,
                                        size_t plan_len, uint8_t **buf, size_t *len)
{
    Cpr__V1__PutRecoveryRequest m = CPR__V1__PUT_RECOVERY_REQUEST__INIT;
    m.job = (char *)str(job);
    m.expected_generation = expected;
    m.plan = (ProtobufCBinaryData){plan_len, (uint8_t *)plan};
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_recovery_record_encode(const char *job, uint64_t generation,
                                           const void *plan, size_t plan_len,
                                           uint64_t written_unix_ms, uint8_t **buf, size_t *len)
{
    Cpr__V1__RecoveryRecord m = CPR__V1__RECOVERY_RECORD__INIT;
    m.job = (char *)str(job);
    m.generation = generation;
    m.plan = (ProtobufCBinaryData){plan_len, (uint8_t *)plan};
    m.written_unix_ms = written_unix_ms;
    return pack(&m.base, buf, len);
}

cpr_status cpri_wire_recovery_record_decode(const void *buf, size_t len, cpri_wire_recovery *out)
{
    Cpr__V1__RecoveryRecord *m = cpr__v1__recovery_record__unpack(NULL, len, buf);
    if (!m)
        return malformed("RecoveryRecord", len);
    *out = (cpri_wire_recovery){str(m->job), m->generation, m->plan.len ? m->plan.data : NULL,
                               m->plan.len, m->written_unix_ms, m};
    return CPR_OK;
}

void cpri_wire_recovery_release(cpri_wire_recovery *r)
{
    if (r->msg) /* a PutRecoveryRequest or a RecoveryRecord: the generic free fits both */
        protobuf_c_message_free_unpacked(r->msg, NULL);
    memset(r, 0, sizeof *r);
}
