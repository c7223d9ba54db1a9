/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The handler fuzzer's requests and credentials (fuzz_handlers.h): valid
 * encodings of every request built from fuzz-chosen fields with rpc/wire.h's
 * encoders, so that most calls get past the decoder to the authorization
 * checks, the leases and the store; job names come from a small set and
 * checkpoint ids are small, so that calls meet the same parts. Also the
 * credentials and the rights the auth file gives each, which the fuzzer
 * checks every answer against. Each builder's comment lists the fields it
 * reads, in order; 0 is every field's everyday value.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "cpr/block.h"
#include "cpr/codec.h"
#include "cpr/crc32c.h"
#include "fuzz_handlers.h"
#include "wire.h"

/* ---- methods ---------------------------------------------------------------------- */

static const char *const paths[FH_UNKNOWN] = {
    [FH_BEGIN] = "/cpr.v1.Checkpoint/Begin",
    [FH_PUT_ROWS] = "/cpr.v1.Checkpoint/PutRows",
    [FH_PUT_BLOB] = "/cpr.v1.Checkpoint/PutBlob",
    [FH_COMMIT] = "/cpr.v1.Checkpoint/Commit",
    [FH_ABORT] = "/cpr.v1.Checkpoint/Abort",
    [FH_LIST] = "/cpr.v1.Checkpoint/List",
    [FH_RESTORE] = "/cpr.v1.Checkpoint/Restore",
    [FH_GET_BLOB] = "/cpr.v1.Checkpoint/GetBlob",
    [FH_STATS] = "/cpr.v1.Checkpoint/Stats",
    [FH_HEALTH] = "/grpc.health.v1.Health/Check",
    [FH_LIST_JOBS] = "/cpr.v1.Checkpoint/ListJobs",
    [FH_VERIFY] = "/cpr.v1.Checkpoint/Verify",
    [FH_GC] = "/cpr.v1.Checkpoint/Gc",
    [FH_GET_RECOVERY] = "/cpr.v1.Checkpoint/GetRecovery",
    [FH_PUT_RECOVERY] = "/cpr.v1.Checkpoint/PutRecovery",
};

fh_method fh_method_of(const char *path)
{
    for (int m = 0; m < FH_UNKNOWN; m++)
        if (strcmp(paths[m], path) == 0)
            return (fh_method)m;
    return FH_UNKNOWN;
}

const char *fh_method_path(fh_method m)
{
    return m < FH_UNKNOWN ? paths[m] : NULL;
}

/* ---- credentials and the oracle ---------------------------------------------------- */

const char *const fh_jobs[FH_JOBS] = {"ja", "jb", "team-x", "team-y", "bad/job"};
const char *const fh_blob_names[FH_BLOB_NAMES] = {"dense", "opt.state", "bad name"};

#define TOKEN_ADMIN_ALL "fuzz-admin-all-0123456789"
#define TOKEN_READ_JA "fuzz-read-ja-0123456789"
#define TOKEN_WRITE_TEAM "fuzz-write-team-0123456789"
#define TOKEN_ADMIN_JB "fuzz-admin-jb-0123456789"
#define TOKEN_RW_JB "fuzz-rw-jb-0123456789"
#define SUBJECT "CN=fuzz trainer,O=CPR"

/* Two rules for one token (its grants add up); a subject in quotes (it
 * holds a space); a comma list of rights. */
static const char auth_text[] =
    "# the handler fuzzer's rules (tests/fuzz/fuzz_handlers_build.c)\n"
    TOKEN_ADMIN_ALL "  *       admin\n"
    TOKEN_READ_JA "    ja      read\n"
    TOKEN_READ_JA "    team-*  read\n"
    TOKEN_WRITE_TEAM " team-*  write\n"
    TOKEN_ADMIN_JB "   jb      admin\n"
    "\"subject:" SUBJECT "\"  ja  write   # a client certificate\n"
    TOKEN_RW_JB "      jb      read,write\n";

const char *fh_auth_file_text(void)
{
    return auth_text;
}

#define R (CPRI_RIGHT_READ)
#define W (CPRI_RIGHT_READ | CPRI_RIGHT_WRITE)
#define A (CPRI_RIGHT_READ | CPRI_RIGHT_WRITE | CPRI_RIGHT_ADMIN)

typedef struct grant {
    const char *pattern;
    unsigned rights;
} grant;

typedef struct cred_def {
    const char *authorization; /* NULL: none */
    size_t len;                /* 0: strlen */
    int with_subject;
    grant grants[3];           /* what the rules give it; none: unknown */
} cred_def;

#define OVERSIZED_LEN 4400 /* over handlers.c's MAX_AUTHORIZATION */
static char oversized[OVERSIZED_LEN + 1];

static const cred_def creds[FH_CREDS] = {
    /* 0 */ {"Bearer " TOKEN_ADMIN_ALL, 0, 0, {{"*", A}}},
    /* 1 */ {"Bearer " TOKEN_READ_JA, 0, 0, {{"ja", R}, {"team-*", R}}},
    /* 2 */ {"Bearer " TOKEN_WRITE_TEAM, 0, 0, {{"team-*", W}}},
    /* 3 */ {"Bearer " TOKEN_ADMIN_JB, 0, 0, {{"jb", A}}},
    /* 4 */ {NULL, 0, 1, {{"ja", W}}},  /* mutual TLS only */
    /* 5 */ {"Bearer " TOKEN_RW_JB, 0, 0, {{"jb", W}}},
    /* 6 */ {"Bearer " TOKEN_ADMIN_JB, 0, 1, {{"jb", A}, {"ja", W}}}, /* both match */
    /* 7 */ {"bearer " TOKEN_ADMIN_ALL, 0, 0, {{"*", A}}}, /* the scheme is case-blind */
    /* 8 */ {NULL, 0, 0, {{0}}},                            /* no credentials */
    /* 9 */ {"Bearer fuzz-unknown-0123456789", 0, 0, {{0}}},
    /* 10 */ {"Basic Zm9vOmJhcg==", 0, 0, {{0}}},
    /* 11 */ {"Bearer ", 0, 0, {{0}}},
    /* 12 */ {"Bearer " TOKEN_ADMIN_ALL "\0tail", sizeof("Bearer " TOKEN_ADMIN_ALL "\0tail") - 1,
              0, {{0}}},                                    /* a NUL: not read at all */
    /* 13 */ {oversized, OVERSIZED_LEN, 0, {{0}}},          /* too long to read */
    /* 14 */ {"Bearer fuzz-admin-all-012345678", 0, 0, {{0}}}, /* a prefix of a token */
};

fh_cred fh_cred_get(unsigned i)
{
    const cred_def *c = &creds[i % FH_CREDS];
    if (!oversized[0]) {
        memcpy(oversized, "Bearer ", 7);
        memset(oversized + 7, 'a', OVERSIZED_LEN - 7);
    }
    size_t len = c->len ? c->len : c->authorization ? strlen(c->authorization) : 0;
    return (fh_cred){c->authorization, len, c->with_subject ? SUBJECT : NULL};
}

int fh_cred_known(unsigned i)
{
    return creds[i % FH_CREDS].grants[0].pattern != NULL;
}

/* auth.h: a pattern is a job, or a prefix ending in '*'; store-wide calls
 * (job NULL) need a rule for "*". */
static int pattern_matches(const char *pattern, const char *job)
{
    size_t n = strlen(pattern);
    if (pattern[n - 1] == '*')
        return job ? strncmp(pattern, job, n - 1) == 0 : n == 1;
    return job && strcmp(pattern, job) == 0;
}

int fh_cred_may(unsigned i, const char *job, unsigned right)
{
    const cred_def *c = &creds[i % FH_CREDS];
    for (int g = 0; g < 3 && c->grants[g].pattern; g++)
        if ((c->grants[g].rights & right) == right && pattern_matches(c->grants[g].pattern, job))
            return 1;
    return 0;
}

int fh_cred_may_some(unsigned i, unsigned right)
{
    const cred_def *c = &creds[i % FH_CREDS];
    for (int g = 0; g < 3 && c->grants[g].pattern; g++)
        if ((c->grants[g].rights & right) == right)
            return 1;
    return 0;
}

/* ---- memory --------------------------------------------------------------------------- */

void fh_memory_begun(fh_memory *m, const cpr_part_spec *spec, uint64_t lease)
{
    m->have_part = 1;
    snprintf(m->job, sizeof m->job, "%s", spec->id.job);
    m->shard = spec->id.shard;
    m->checkpoint = spec->id.checkpoint;
    m->n_tables = spec->n_tables < FH_MAX_TABLES ? spec->n_tables : FH_MAX_TABLES;
    memcpy(m->tables, spec->tables, m->n_tables * sizeof *m->tables);
    m->last_lease = lease;
    fh_part_lease *l = &m->leases[m->n_leases++ % FH_LEASES];
    snprintf(l->job, sizeof l->job, "%s", spec->id.job);
    l->shard = spec->id.shard;
    l->checkpoint = spec->id.checkpoint;
    l->lease = lease;
    m->rows_sent = 0;
    memset(m->blob_next, 0, sizeof m->blob_next);
}

static uint64_t lease_of(const fh_memory *m, const cpr_part_id *id)
{
    size_t n = m->n_leases < FH_LEASES ? m->n_leases : FH_LEASES;
    for (size_t k = 0; k < n; k++) {
        const fh_part_lease *l = &m->leases[(m->n_leases - 1 - k) % FH_LEASES];
        if (l->shard == id->shard && l->checkpoint == id->checkpoint &&
            strcmp(l->job, id->job) == 0)
            return l->lease;
    }
    return m->last_lease;
}

/* ---- fields --------------------------------------------------------------------------- */

static int is_last_part(const fh_memory *m, const cpr_part_id *id)
{
    return m->have_part && id->shard == m->shard && id->checkpoint == m->checkpoint &&
           strcmp(id->job, m->job) == 0;
}

/* checkpoint byte: 0 the next id of the shard, 255 the invalid 0, else 1-8. */
static uint64_t checkpoint_of(uint8_t b, const fh_memory *m, const char *job, uint32_t shard)
{
    if (b == 255)
        return 0;
    if (b)
        return 1u + b % 8u;
    uint64_t next = fh_next_checkpoint(job, shard);
    if (m->have_part && strcmp(m->job, job) == 0 && m->shard == shard && m->checkpoint >= next)
        next = m->checkpoint + 1;
    return next;
}

/* id: a byte without 0x80 names the part of the last Begin (when there is
 * one); otherwise job (that byte), shard, checkpoint bytes follow. */
static cpr_part_id pick_id(fh_reader *r, const fh_memory *m)
{
    uint8_t b = fh_u8(r);
    if (!(b & 0x80) && m->have_part)
        return (cpr_part_id){m->job, m->shard, m->checkpoint};
    const char *job = fh_jobs[b % FH_JOBS];
    uint32_t shard = fh_u8(r) % 4u;
    return (cpr_part_id){job, shard, checkpoint_of(fh_u8(r), m, job, shard)};
}

/* lease: 0 the one answered for this part (else the last), 1 the last
 * Begin's, 2 none (0), 3 eight bytes of fuzz. */
static uint64_t pick_lease(fh_reader *r, const fh_memory *m, const cpr_part_id *id)
{
    switch (fh_u8(r) % 4) {
    case 0: return lease_of(m, id);
    case 1: return m->last_lease;
    case 2: return 0;
    default: return fh_u64(r);
    }
}

static const char *pick_job(fh_reader *r)
{
    return fh_jobs[fh_u8(r) % FH_JOBS];
}

/* job, or NULL (every job) for the byte value FH_JOBS. */
static const char *pick_job_or_all(fh_reader *r)
{
    uint8_t b = fh_u8(r) % (FH_JOBS + 1);
    return b == FH_JOBS ? NULL : fh_jobs[b];
}

static float value_of(uint8_t b)
{
    return (float)(int8_t)b / 4.0f;
}

/* ---- builders ---------------------------------------------------------------------------- */

/* Begin: id byte (255: the last Begin's id again; else job), shard,
 * checkpoint, kind (0 FULL, 1 DELTA, 2 PRIORITY, 3 none), num_shards (255:
 * 0, else 1-2), base (0-7, 0 the newest), step, tables (0: 1, 1: 2, 2: 0),
 * per table: id, rows (255: 0, else 64 - b % 64), dim (255: 0, else 1-4),
 * state_dim (0-2); codec (0-5, 5 unknown). */
static cpr_status build_begin(fh_reader *r, fh_memory *m, uint8_t **buf, size_t *len)
{
    cpr_table_schema tables[FH_MAX_TABLES];
    uint8_t b = fh_u8(r);
    cpr_part_id id;
    if (b == 255 && m->have_part) {
        id = (cpr_part_id){m->job, m->shard, m->checkpoint};
    } else {
        id.job = fh_jobs[b % FH_JOBS];
        id.shard = fh_u8(r) % 4u;
        id.checkpoint = checkpoint_of(fh_u8(r), m, id.job, id.shard);
    }
    static const cpr_kind kinds[4] = {CPR_KIND_FULL, CPR_KIND_DELTA, CPR_KIND_PRIORITY,
                                      CPR_KIND_UNSPECIFIED};
    cpr_part_spec spec = {.id = id, .kind = kinds[fh_u8(r) % 4]};
    b = fh_u8(r);
    spec.num_shards = b == 255 ? 0 : 1u + b % 2u;
    spec.base = fh_u8(r) % 8u;
    spec.step = fh_u8(r);
    static const size_t table_counts[3] = {1, 2, 0};
    spec.n_tables = table_counts[fh_u8(r) % 3];
    for (size_t t = 0; t < spec.n_tables; t++) {
        tables[t].table = (uint32_t)(t + fh_u8(r)) % 3u;
        b = fh_u8(r);
        tables[t].rows = b == 255 ? 0 : 64u - b % 64u;
        b = fh_u8(r);
        tables[t].dim = b == 255 ? 0 : 1u + b % 4u;
        tables[t].state_dim = fh_u8(r) % 3u;
    }
    spec.tables = tables;
    spec.codec = fh_u8(r) % 6u;
    return cpri_wire_begin_encode(&spec, buf, len);
}

typedef struct rows_shape {
    uint32_t table, dim, state_dim;
    uint32_t n;
    uint64_t ids[8];
    float values[8 * 4], state[8 * 2];
} rows_shape;

/* The rows of a PutRows: table (of the last Begin's schema, or fuzz dims:
 * dim, state_dim bytes first when `fuzz_dims`), n (255: 0, else 1-8), first
 * id (0-63), step (255: 0, a repeat; else 1-3), n x dim value bytes,
 * n x state_dim state bytes. */
static void read_rows(fh_reader *r, const fh_memory *m, int fuzz_dims, rows_shape *s)
{
    if (fuzz_dims || m->n_tables == 0) {
        s->dim = 1u + fh_u8(r) % 4u;
        s->state_dim = fh_u8(r) % 3u;
        s->table = fh_u8(r) % 3u;
    } else {
        const cpr_table_schema *t = &m->tables[fh_u8(r) % m->n_tables];
        s->table = t->table;
        s->dim = t->dim >= 1 && t->dim <= 4 ? t->dim : 1;
        s->state_dim = t->state_dim <= 2 ? t->state_dim : 0;
    }
    uint8_t b = fh_u8(r);
    s->n = b == 255 ? 0 : 1u + b % 8u;
    uint64_t first = fh_u8(r) % 64u;
    b = fh_u8(r);
    uint64_t step = b == 255 ? 0 : 1u + b % 3u;
    for (uint32_t i = 0; i < s->n; i++)
        s->ids[i] = first + i * step;
    for (uint32_t i = 0; i < s->n * s->dim; i++)
        s->values[i] = value_of(fh_u8(r));
    for (uint32_t i = 0; i < s->n * s->state_dim; i++)
        s->state[i] = value_of(fh_u8(r));
}

/* A row block of the rows (cpr/block.h), codec byte (0-4) read first;
 * `versions` sets the flag only the store's own blocks carry, `corrupt`
 * flips a byte after sealing. NULL when the shape has no block. */
static uint8_t *make_block(fh_reader *r, const rows_shape *s, int versions, int corrupt,
                           size_t *block_len)
{
    cpr_codec codec = (cpr_codec)(fh_u8(r) % 5u);
    uint32_t flags = versions ? CPR_BLOCK_VERSIONS : 0;
    cpr_block_layout lay;
    cpr_block_layout_codec(s->n, s->dim, s->state_dim, flags, codec, &lay);
    uint8_t *block = lay.bytes ? calloc(1, lay.bytes) : NULL;
    if (!block)
        return NULL;
    memcpy(block + lay.ids, s->ids, s->n * sizeof s->ids[0]);
    if (cpr_codec_encode(codec, 0, s->values, s->n, s->dim, block + lay.values) != CPR_OK)
        memset(block + lay.values, 0, lay.state - lay.values);
    memcpy(block + lay.state, s->state, (size_t)s->n * s->state_dim * sizeof(float));
    (void)cpr_block_seal_codec(block, s->table, s->n, s->dim, s->state_dim, flags, codec);
    if (corrupt)
        block[lay.bytes / 2] ^= 0x10;
    *block_len = lay.bytes;
    return block;
}

/* PutRows: id, lease, form (bit 0 a row block; 1 ids descending; 2 a wrong
 * checksum; 3 fuzz dims; 4 versions flag; 5 corrupt block), the rows
 * (read_rows), then for a block its codec byte. */
static cpr_status build_put_rows(fh_reader *r, fh_memory *m, uint8_t **buf, size_t *len)
{
    cpr_part_id id = pick_id(r, m);
    uint64_t lease = pick_lease(r, m, &id);
    uint8_t form = fh_u8(r);
    rows_shape s = {0};
    read_rows(r, m, form & 8, &s);
    if (is_last_part(m, &id))
        m->rows_sent += s.n;
    if (form & 1) {
        size_t block_len = 0;
        uint8_t *block = make_block(r, &s, form & 16, form & 32, &block_len);
        if (!block)
            return CPR_INVALID_ARGUMENT;
        cpr_status st = cpri_wire_block_encode(&id, lease, block, block_len, buf, len);
        free(block);
        return st;
    }
    if (form & 2) /* descending: the store takes them, and counts the batch as backwards */
        for (uint32_t i = 0; i < s.n / 2; i++) {
            uint64_t t = s.ids[i];
            s.ids[i] = s.ids[s.n - 1 - i];
            s.ids[s.n - 1 - i] = t;
        }
    /* Always with ids: the wire has no range form (cpr_row_batch's ids NULL). */
    cpr_row_batch batch = {.table = s.table, .n = s.n, .ids = s.ids, .values = s.values,
                           .values_count = (size_t)s.n * s.dim,
                           .state = s.state_dim ? s.state : NULL,
                           .state_count = (size_t)s.n * s.state_dim};
    batch.crc32c = cpr_crc32c_rows(s.ids, s.n, s.values, batch.values_count, s.state,
                                   batch.state_count) ^ ((form & 4) ? 1u : 0u);
    return cpri_wire_rows_encode(&id, lease, &batch, 0, 0, buf, len);
}

/* PutBlob: id, lease, name (0-2, 2 not a valid name), offset (0 where the
 * last chunk of that name ended, 1 zero, 2 a byte x 16), length (0-64),
 * flags (bit 0 a wrong checksum, 1 a wrong size), the data bytes. */
static cpr_status build_put_blob(fh_reader *r, fh_memory *m, uint8_t **buf, size_t *len)
{
    uint8_t data[64];
    cpr_part_id id = pick_id(r, m);
    uint64_t lease = pick_lease(r, m, &id);
    unsigned name = fh_u8(r) % FH_BLOB_NAMES;
    uint8_t how = fh_u8(r) % 3;
    uint64_t offset = how == 0 ? m->blob_next[name] : how == 1 ? 0 : (uint64_t)fh_u8(r) * 16;
    size_t data_len = fh_u8(r) % 65u;
    uint8_t flags = fh_u8(r);
    for (size_t i = 0; i < data_len; i++)
        data[i] = fh_u8(r);
    uint32_t crc = cpr_crc32c(0, data, data_len) ^ ((flags & 1) ? 1u : 0u);
    uint64_t size = offset + data_len + ((flags & 2) ? 7 : 0);
    m->blob_next[name] = offset + data_len;
    return cpri_wire_chunk_encode(&id, lease, fh_blob_names[name], offset, size, data, data_len,
                                  crc, buf, len);
}

/* Commit: id, lease, rows (0: those built for the last Begin's part, else
 * a byte % 16). Abort: id, lease (2: none, the admin's override). */
static cpr_status build_part_call(fh_method meth, fh_reader *r, fh_memory *m, uint8_t **buf,
                                  size_t *len)
{
    cpr_part_id id = pick_id(r, m);
    uint64_t lease = pick_lease(r, m, &id);
    if (meth == FH_ABORT)
        return cpri_wire_abort_encode(&id, lease, buf, len);
    uint8_t b = fh_u8(r);
    uint64_t rows = b == 0 ? (is_last_part(m, &id) ? m->rows_sent : 0) : b % 16u;
    return cpri_wire_commit_encode(&id, lease, rows, buf, len);
}

/* Restore: job (bit 7: the last Begin's job), as_of (0-9), flags (bit 0
 * consistent, 1 as blocks, 2 direct reads of another store), tables (0-2)
 * and their ids, ranges (0-2) and their begin and length bytes, modulo
 * (0-3), remainder, batch_rows (0-8). */
static cpr_status build_restore(fh_reader *r, fh_memory *m, uint8_t **buf, size_t *len)
{
    uint32_t tables[2];
    cpr_row_range ranges[2];
    uint8_t b = fh_u8(r);
    cpr_restore_query q = {.job = (!(b & 0x80) && m->have_part) ? m->job : fh_jobs[b % FH_JOBS]};
    q.as_of = fh_u8(r) % 10u;
    uint8_t flags = fh_u8(r);
    q.consistent = flags & 1;
    q.n_tables = fh_u8(r) % 3u;
    for (size_t i = 0; i < q.n_tables; i++)
        tables[i] = fh_u8(r) % 3u;
    q.tables = tables;
    q.n_ranges = fh_u8(r) % 3u;
    for (size_t i = 0; i < q.n_ranges; i++) {
        ranges[i].begin = fh_u8(r) % 64u;
        ranges[i].end = ranges[i].begin + fh_u8(r) % 65u;
    }
    q.ranges = ranges;
    q.modulo = fh_u8(r) % 4u;
    q.remainder = fh_u8(r) % 4u;
    q.batch_rows = fh_u8(r) % 9u;
    const char *direct = (flags & 4) ? "rados:f/p/n" : NULL;
    return cpri_wire_restore_encode_blocks(&q, (flags & 2) != 0, direct, buf, len);
}

/* GetBlob: id, name. */
static cpr_status build_get_blob(fh_reader *r, fh_memory *m, uint8_t **buf, size_t *len)
{
    cpr_part_id id = pick_id(r, m);
    return cpri_wire_getblob_encode(&id, fh_blob_names[fh_u8(r) % FH_BLOB_NAMES], buf, len);
}

/* Gc: job (or every job), keep (0-3), floor (even byte: none; odd: a
 * second byte % 9). */
static cpr_status build_gc(fh_reader *r, uint8_t **buf, size_t *len)
{
    const char *job = pick_job_or_all(r);
    uint32_t keep = fh_u8(r) % 4u;
    uint64_t floor = (fh_u8(r) & 1) ? fh_u8(r) % 9u : 0;
    return cpri_wire_gc_encode(job, keep, floor, buf, len);
}

/* PutRecovery: job, expected generation (0: the last answered for the
 * job, 1: none yet, 2: a byte), plan length (0-32), the plan bytes. */
static cpr_status build_put_recovery(fh_reader *r, fh_memory *m, uint8_t **buf, size_t *len)
{
    uint8_t plan[32];
    unsigned j = fh_u8(r) % FH_JOBS;
    uint8_t how = fh_u8(r) % 3;
    uint64_t expected = how == 0 ? m->generation[j] : how == 1 ? 0 : fh_u8(r);
    size_t plan_len = fh_u8(r) % 33u;
    for (size_t i = 0; i < plan_len; i++)
        plan[i] = fh_u8(r);
    return cpri_wire_put_recovery_encode(fh_jobs[j], expected, plan, plan_len, buf, len);
}

cpr_status fh_build(fh_method meth, fh_reader *r, fh_memory *m, uint8_t **buf, size_t *len)
{
    switch (meth) {
    case FH_BEGIN: return build_begin(r, m, buf, len);
    case FH_PUT_ROWS: return build_put_rows(r, m, buf, len);
    case FH_PUT_BLOB: return build_put_blob(r, m, buf, len);
    case FH_COMMIT:
    case FH_ABORT: return build_part_call(meth, r, m, buf, len);
    case FH_LIST: return cpri_wire_list_encode(pick_job(r), buf, len);
    case FH_RESTORE: return build_restore(r, m, buf, len);
    case FH_GET_BLOB: return build_get_blob(r, m, buf, len);
    case FH_LIST_JOBS: return cpri_wire_list_jobs_encode(buf, len);
    case FH_VERIFY: return cpri_wire_verify_encode(pick_job_or_all(r), buf, len);
    case FH_GC: return build_gc(r, buf, len);
    case FH_GET_RECOVERY: return cpri_wire_get_recovery_encode(pick_job(r), buf, len);
    case FH_PUT_RECOVERY: return build_put_recovery(r, m, buf, len);
    case FH_STATS:  /* no request to speak of: the empty message */
    case FH_HEALTH: return cpri_wire_list_jobs_encode(buf, len);
    default: return CPR_INVALID_ARGUMENT;
    }
}
