/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Crash test of the store's commit protocol. A writer child commits parts in
 * a loop (three shards with disjoint tables, FULL/PRIORITY/DELTA, blobs) and
 * logs "begin", "committing" and "committed" records to an fsync'd log; the
 * parent SIGKILLs it at a seeded moment (CPR_TEST_SEED overrides the seed):
 * it picks a phase (streaming rows most often, then commit, blobs, begin,
 * open, right after fork), watches the writer's published phase until the
 * writer is in it, and kills a seeded fraction of a millisecond later, so
 * kills land inside the store's calls of every phase; the report counts
 * where each kill landed. CPR_CRASH_KILLS sets how many (default 400). After every kill a verifier child reopens the store and checks that
 * exactly the logged parts are visible and restore byte-exactly, and that the
 * part in flight is all or nothing. The parent itself never opens the store:
 * RocksDB is not fork-safe, so every process that uses it is a fresh fork.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpr/rng.h"
#include "cpr/crc32c.h"
#include "cpr/store.h"
#include "testutil.h"

#define JOB "crash"
#define SHARDS 3u
#define TABLES_PER_SHARD 2u
#define ROWS 8000u
#define BATCH_ROWS 1000u
#define MAX_DIM 16u
#define MAX_STATE_DIM 2u
#define BLOB_CHUNK 300000u
#define MIN_KILLS 400u
#define MIN_STEPS (4 * SHARDS) /* FULL, PRIORITY, DELTA, PRIORITY at least */
#define PHASE_WAIT_NS (2000 * MS) /* a phase not reached by then: kill anyway */
#define MS 1000000ull

/* ---- the deterministic workload ---------------------------------------- */
/* Step k is the part of shard k % SHARDS at checkpoint k / SHARDS + 1. The
 * writer retries a step until it is committed, so the committed parts are
 * always exactly the steps [0, n_committed). */

/* SplitMix64's step from x: cpr/rng.h's mixer of x plus the golden gamma. */
static uint64_t mix64(uint64_t x)
{
    uint64_t state = x;
    return cpr_splitmix64(&state);
}

static uint64_t ckpt_of(uint64_t step) { return step / SHARDS + 1; }
static uint32_t shard_of(uint64_t step) { return (uint32_t)(step % SHARDS); }
static uint64_t step_of(uint32_t shard, uint64_t ckpt) { return (ckpt - 1) * SHARDS + shard; }
static uint32_t table_of(uint32_t shard, uint32_t k) { return 10u * (shard + 1u) + k; }
static uint32_t shard_of_table(uint32_t table) { return table / 10u - 1u; }

static cpr_table_schema schema_of(uint32_t table)
{
    cpr_table_schema ts = { .table = table, .rows = ROWS };
    ts.dim = table % 10u ? 8u : MAX_DIM;
    ts.state_dim = table % 10u ? 0u : MAX_STATE_DIM;
    return ts;
}

static cpr_kind kind_of(uint64_t ckpt)
{
    if (ckpt % 6 == 1)
        return CPR_KIND_FULL;
    return ckpt % 2 == 0 ? CPR_KIND_PRIORITY : CPR_KIND_DELTA;
}

static int row_in_part(uint32_t table, uint64_t row, uint64_t ckpt)
{
    uint64_t h = mix64(((uint64_t)table << 48) ^ (ckpt << 20) ^ row);
    switch (kind_of(ckpt)) {
    case CPR_KIND_FULL:
        return 1;
    case CPR_KIND_DELTA:
        return h % 4 == 0;
    default:
        return h % 10 == 0;
    }
}

/* The newest FULL/DELTA checkpoint below `ckpt` (the DELTA's base). */
static uint64_t base_of(uint64_t ckpt)
{
    uint64_t c = ckpt - 1;
    while (c > 0 && kind_of(c) == CPR_KIND_PRIORITY)
        c--;
    return c;
}

static uint64_t blob_bytes_of(uint32_t shard, uint64_t ckpt)
{
    if (kind_of(ckpt) == CPR_KIND_FULL && shard == 0)
        return (1u << 20) + 4099; /* two checksum blocks, the last partial */
    return ckpt % 3 == 0 ? 5000 + ckpt : 0;
}

static uint64_t part_rows(uint32_t shard, uint64_t ckpt)
{
    uint64_t rows = 0;
    for (uint32_t k = 0; k < TABLES_PER_SHARD; k++)
        for (uint64_t r = 0; r < ROWS; r++)
            rows += (uint64_t)row_in_part(table_of(shard, k), r, ckpt);
    return rows;
}

static uint64_t part_bytes(uint32_t shard, uint64_t ckpt)
{
    uint64_t bytes = blob_bytes_of(shard, ckpt);
    for (uint32_t k = 0; k < TABLES_PER_SHARD; k++) {
        cpr_table_schema ts = schema_of(table_of(shard, k));
        for (uint64_t r = 0; r < ROWS; r++)
            if (row_in_part(ts.table, r, ckpt))
                bytes += 8 + 4ull * (ts.dim + ts.state_dim);
    }
    return bytes;
}

/* Checkpoint of the version of (table, row) a restore as of `as_of` must
 * return when steps [0, n_committed) are committed; 0: the row is absent. */
static uint64_t version_as_of(uint32_t table, uint64_t row, uint64_t as_of,
                              uint64_t n_committed)
{
    uint32_t shard = shard_of_table(table);
    uint64_t top = n_committed ? ckpt_of(n_committed - 1) : 0;
    if (as_of && as_of < top)
        top = as_of;
    for (uint64_t c = top; c >= 1; c--)
        if (step_of(shard, c) < n_committed && row_in_part(table, row, c))
            return c;
    return 0;
}

/* The newest consistent cut when steps [0, n_committed) are committed. */
static uint64_t latest_cut_of(uint64_t n_committed)
{
    for (uint64_t c = n_committed / SHARDS; c >= 1; c--)
        if (kind_of(c) != CPR_KIND_PRIORITY)
            return c;
    return 0;
}

/* ---- state shared with the children ------------------------------------- */

enum phase { PH_START, PH_OPEN, PH_LOG, PH_BEGIN, PH_ROWS, PH_BLOB, PH_COMMIT, PH_COUNT };
static const char *const phase_names[PH_COUNT] = {
    "fork", "open", "log", "begin", "put_rows", "put_blob", "commit"
};

/* One shared anonymous page: the writer publishes where it is, the verifier
 * how far it has checked. Read by the parent only after waitpid(). */
typedef struct shared_state {
    volatile int phase;
    volatile uint64_t open_done_ns;
    volatile uint64_t verified_steps;
    volatile uint64_t parts_committed; /* by writers, over all lives */
    volatile unsigned in_flight_visible, in_flight_invisible; /* kills in commit */
} shared_state;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define FAIL(...)                                                    \
    do {                                                             \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);         \
        fprintf(stderr, __VA_ARGS__);                                \
        fputc('\n', stderr);                                         \
        return -1;                                                   \
    } while (0)
#define CHECK(cond, ...)                                             \
    do {                                                             \
        if (!(cond))                                                 \
            FAIL(__VA_ARGS__);                                       \
    } while (0)
#define CHECK_ST(st, want, what)                                               \
    CHECK((st) == (want), "%s: got %s, want %s (%s)", what, cpr_status_name(st), \
          cpr_status_name(want), cpr_errmsg())

/* ---- the log ------------------------------------------------------------ */
/* One line per record: "B k" (about to begin step k), "C k" (about to
 * commit), "D k" (commit returned CPR_OK), written by the writer; "R k"
 * (the in-flight step k turned out committed) and "A k" (it is invisible,
 * retry it), appended by the verifier after a kill. */

typedef struct log_state {
    uint64_t n_committed;   /* steps [0, n) are committed */
    uint64_t pending;       /* step of an unresolved B or C record */
    char pending_type;      /* 0, 'B' or 'C' */
    off_t valid_bytes;      /* up to the last complete line */
} log_state;

static int log_apply(log_state *ls, char type, uint64_t step)
{
    switch (type) {
    case 'B':
        CHECK(!ls->pending_type && step == ls->n_committed, "log: B %" PRIu64
              " after %" PRIu64 " committed", step, ls->n_committed);
        break;
    case 'C':
        CHECK(ls->pending_type == 'B' && ls->pending == step, "log: C %" PRIu64, step);
        break;
    case 'D':
    case 'R':
        CHECK(ls->pending_type == 'C' && ls->pending == step, "log: %c %" PRIu64, type, step);
        ls->n_committed = step + 1;
        ls->pending_type = 0;
        return 0;
    case 'A':
        CHECK(ls->pending_type && ls->pending == step, "log: A %" PRIu64, step);
        ls->pending_type = 0;
        return 0;
    default:
        FAIL("log: bad record type %c", type);
    }
    ls->pending = step;
    ls->pending_type = type;
    return 0;
}

/* Parse the log; a torn last line (a kill inside write()) is ignored. */
static int log_read(const char *path, log_state *ls)
{
    memset(ls, 0, sizeof *ls);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : -1;
    char line[64];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        char type;
        uint64_t step;
        if (len == 0 || line[len - 1] != '\n')
            break;
        if (sscanf(line, "%c %" SCNu64, &type, &step) != 2) {
            fprintf(stderr, "FAIL: log line '%s'\n", line);
            rc = -1;
            break;
        }
        rc = log_apply(ls, type, step);
        ls->valid_bytes += (off_t)len;
    }
    fclose(f);
    return rc;
}

static int log_append(int fd, char type, uint64_t step, int sync)
{
    char line[64];
    int len = snprintf(line, sizeof line, "%c %" PRIu64 "\n", type, step);
    CHECK(write(fd, line, (size_t)len) == len, "log write: %s", strerror(errno));
    CHECK(!sync || fsync(fd) == 0, "log fsync: %s", strerror(errno));
    return 0;
}

/* ---- the writer child --------------------------------------------------- */

static uint64_t g_ids[ROWS];
static float g_values[BATCH_ROWS * MAX_DIM];
static float g_state[BATCH_ROWS * MAX_STATE_DIM];
static unsigned char g_chunk[BLOB_CHUNK];

static int put_table(cpr_store *store, const cpr_part_id *id, uint32_t table,
                     uint64_t *sent)
{
    cpr_table_schema ts = schema_of(table);
    size_t n = 0;
    for (uint64_t r = 0; r < ROWS; r++)
        if (row_in_part(table, r, id->checkpoint))
            g_ids[n++] = r;
    for (size_t off = 0; off < n; off += BATCH_ROWS) {
        size_t len = n - off < BATCH_ROWS ? n - off : BATCH_ROWS;
        cpr_row_batch batch;
        tu_fill_batch(&batch, table, g_ids + off, len, ts.dim, ts.state_dim,
                      id->checkpoint, g_values, g_state);
        cpr_status st = cpr_store_put_rows(store, id, &batch);
        CHECK_ST(st, CPR_OK, "put_rows");
        *sent += len;
    }
    return 0;
}

static int put_dense_blob(cpr_store *store, const cpr_part_id *id, uint64_t size)
{
    for (uint64_t off = 0; off < size; off += BLOB_CHUNK) {
        size_t len = size - off < BLOB_CHUNK ? (size_t)(size - off) : BLOB_CHUNK;
        for (size_t i = 0; i < len; i++)
            g_chunk[i] = tu_blob_byte(id->shard, id->checkpoint, off + i);
        cpr_status st = cpr_store_put_blob(store, id, "dense", off, g_chunk, len,
                                           cpr_crc32c(0, g_chunk, len));
        CHECK_ST(st, CPR_OK, "put_blob");
    }
    return 0;
}

static int write_step(cpr_store *store, shared_state *sh, int log_fd, uint64_t step)
{
    uint32_t shard = shard_of(step);
    uint64_t ckpt = ckpt_of(step), sent = 0;
    cpr_table_schema tables[TABLES_PER_SHARD];
    for (uint32_t k = 0; k < TABLES_PER_SHARD; k++)
        tables[k] = schema_of(table_of(shard, k));
    cpr_part_spec spec = {
        .id = { .job = JOB, .shard = shard, .checkpoint = ckpt },
        .kind = kind_of(ckpt), .step = ckpt * 100, .num_shards = SHARDS,
        .tables = tables, .n_tables = TABLES_PER_SHARD,
    };
    sh->phase = PH_LOG;
    if (log_append(log_fd, 'B', step, 0))
        return -1;
    sh->phase = PH_BEGIN;
    cpr_status st = cpr_store_begin(store, &spec);
    CHECK_ST(st, CPR_OK, "begin");
    sh->phase = PH_ROWS;
    for (uint32_t k = 0; k < TABLES_PER_SHARD; k++)
        if (put_table(store, &spec.id, tables[k].table, &sent))
            return -1;
    sh->phase = PH_BLOB;
    if (put_dense_blob(store, &spec.id, blob_bytes_of(shard, ckpt)))
        return -1;
    sh->phase = PH_LOG;
    if (log_append(log_fd, 'C', step, 1))
        return -1;
    sh->phase = PH_COMMIT;
    st = cpr_store_commit(store, &spec.id, sent);
    CHECK_ST(st, CPR_OK, "commit");
    sh->phase = PH_LOG;
    if (log_append(log_fd, 'D', step, 1))
        return -1;
    sh->parts_committed++;
    return 0;
}

/* Runs until killed; returns only on failure. */
static int writer_main(const char *store_dir, const char *log_path, shared_state *sh)
{
    cpr_store *store = NULL;
    log_state ls;
    sh->phase = PH_OPEN;
    cpr_status st = cpr_store_open(store_dir, NULL, &store);
    CHECK_ST(st, CPR_OK, "writer open");
    sh->open_done_ns = now_ns();
    sh->phase = PH_LOG;
    if (log_read(log_path, &ls))
        return -1;
    CHECK(!ls.pending_type, "writer: step %" PRIu64 " unresolved", ls.pending);
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    CHECK(fd >= 0, "open log: %s", strerror(errno));
    for (uint64_t step = ls.n_committed;; step++)
        if (write_step(store, sh, fd, step))
            return -1;
}

/* ---- the verifier child ------------------------------------------------- */

typedef struct expect_ctx {
    const uint32_t *tables; /* ascending */
    size_t n_tables;
    uint64_t as_of, n_committed;
    size_t table_index;     /* cursor: the next candidate (table, row) */
    uint64_t row;
    uint64_t rows_seen;
    char err[256];
} expect_ctx;

static int next_expected(expect_ctx *e, uint32_t *table, uint64_t *row, uint64_t *ver)
{
    while (e->table_index < e->n_tables) {
        uint32_t t = e->tables[e->table_index];
        while (e->row < ROWS) {
            uint64_t r = e->row++;
            uint64_t v = version_as_of(t, r, e->as_of, e->n_committed);
            if (v) {
                *table = t;
                *row = r;
                *ver = v;
                return 1;
            }
        }
        e->table_index++;
        e->row = 0;
    }
    return 0;
}

static int same_float(float got, float want)
{
    return memcmp(&got, &want, sizeof got) == 0;
}

static int check_row(expect_ctx *e, const cpr_row_batch *b, size_t i)
{
    uint32_t table;
    uint64_t row, ver;
    if (!next_expected(e, &table, &row, &ver)) {
        snprintf(e->err, sizeof e->err, "extra row %u/%" PRIu64, b->table, b->ids[i]);
        return -1;
    }
    if (b->table != table || b->ids[i] != row) {
        snprintf(e->err, sizeof e->err, "got row %u/%" PRIu64 ", want %u/%" PRIu64
                 " (missing, duplicate or out of order)", b->table, b->ids[i], table, row);
        return -1;
    }
    cpr_table_schema ts = schema_of(table);
    for (uint32_t j = 0; j < ts.dim; j++)
        if (!same_float(b->values[i * ts.dim + j], tu_value(table, row, ver, j)))
            goto wrong;
    for (uint32_t j = 0; j < ts.state_dim; j++)
        if (!same_float(b->state[i * ts.state_dim + j], tu_state(table, row, ver, j)))
            goto wrong;
    e->rows_seen++;
    return 0;
wrong:
    snprintf(e->err, sizeof e->err, "row %u/%" PRIu64 " as of %" PRIu64
             ": value differs from checkpoint %" PRIu64 "'s", table, row, e->as_of, ver);
    return -1;
}

static cpr_status expect_rows(void *ctx, const cpr_row_batch *b)
{
    expect_ctx *e = ctx;
    cpr_table_schema ts = schema_of(b->table);
    if (b->values_count != b->n * ts.dim || b->state_count != b->n * ts.state_dim) {
        snprintf(e->err, sizeof e->err, "table %u: batch shape %zu/%zu for %zu rows",
                 b->table, b->values_count, b->state_count, b->n);
        return CPR_INTERNAL;
    }
    if (cpr_crc32c_rows(b->ids, b->n, b->values, b->values_count, b->state,
                        b->state_count) != b->crc32c) {
        snprintf(e->err, sizeof e->err, "batch checksum wrong");
        return CPR_INTERNAL;
    }
    for (size_t i = 0; i < b->n; i++)
        if (check_row(e, b, i))
            return CPR_INTERNAL;
    return CPR_OK;
}

/* Restore `tables` as of `as_of` and compare with the model, row by row.
 * With no tables, restore every table and expect those of the shards that
 * have committed a part (a table is known to the job once committed). */
static int check_restore(cpr_store *store, const uint32_t *tables, size_t n_tables,
                         uint64_t as_of, uint64_t n_committed)
{
    uint32_t known[SHARDS * TABLES_PER_SHARD];
    size_t n_known = 0;
    for (uint32_t s = 0; s < SHARDS && s < n_committed; s++)
        for (uint32_t k = 0; k < TABLES_PER_SHARD; k++)
            known[n_known++] = table_of(s, k);
    expect_ctx e = { .tables = n_tables ? tables : known,
                     .n_tables = n_tables ? n_tables : n_known, .as_of = as_of,
                     .n_committed = n_committed };
    cpr_restore_query q = { .job = JOB, .as_of = as_of, .tables = tables,
                            .n_tables = n_tables, .batch_rows = 777 };
    cpr_restore_result res = { 0 };
    cpr_status st = cpr_store_restore(store, &q, expect_rows, &e, &res);
    CHECK(!e.err[0], "restore as of %" PRIu64 ": %s", as_of, e.err);
    if (n_committed == 0) {
        CHECK_ST(st, CPR_NOT_FOUND, "restore of a job with no committed part");
        return 0;
    }
    CHECK_ST(st, CPR_OK, "restore");
    uint32_t table;
    uint64_t row, ver;
    CHECK(!next_expected(&e, &table, &row, &ver), "restore as of %" PRIu64
          ": row %u/%" PRIu64 " (checkpoint %" PRIu64 ") missing", as_of, table, row, ver);
    CHECK(res.rows == e.rows_seen, "result.rows %" PRIu64 ", delivered %" PRIu64,
          res.rows, e.rows_seen);
    if (as_of == 0)
        CHECK(res.as_of == ckpt_of(n_committed - 1), "as_of 0 resolved to %" PRIu64
              ", newest committed is %" PRIu64, res.as_of, ckpt_of(n_committed - 1));
    return 0;
}

typedef struct blob_ctx {
    uint32_t shard;
    uint64_t ckpt, next_offset;
    char err[160];
} blob_ctx;

static cpr_status expect_blob(void *ctx, uint64_t offset, const void *data, size_t len)
{
    blob_ctx *b = ctx;
    const unsigned char *p = data;
    if (offset != b->next_offset) {
        snprintf(b->err, sizeof b->err, "chunk at %" PRIu64 ", want %" PRIu64,
                 offset, b->next_offset);
        return CPR_INTERNAL;
    }
    for (size_t i = 0; i < len; i++)
        if (p[i] != tu_blob_byte(b->shard, b->ckpt, offset + i)) {
            snprintf(b->err, sizeof b->err, "byte %" PRIu64 " differs", offset + i);
            return CPR_INTERNAL;
        }
    b->next_offset += len;
    return CPR_OK;
}

/* The blob of step `step` reads back exactly if `visible`, else NOT_FOUND. */
static int check_blob(cpr_store *store, uint64_t step, int visible)
{
    uint32_t shard = shard_of(step);
    uint64_t ckpt = ckpt_of(step), want = blob_bytes_of(shard, ckpt), size = 0;
    cpr_part_id id = { .job = JOB, .shard = shard, .checkpoint = ckpt };
    blob_ctx b = { .shard = shard, .ckpt = ckpt };
    cpr_status st = cpr_store_read_blob(store, &id, "dense", &size, expect_blob, &b);
    CHECK(!b.err[0], "blob of step %" PRIu64 ": %s", step, b.err);
    if (!visible || want == 0) {
        CHECK_ST(st, CPR_NOT_FOUND, "read_blob of an absent blob");
        CHECK(b.next_offset == 0, "absent blob delivered bytes");
        return 0;
    }
    CHECK_ST(st, CPR_OK, "read_blob");
    CHECK(size == want && b.next_offset == want, "blob of step %" PRIu64 ": size %"
          PRIu64 ", delivered %" PRIu64 ", want %" PRIu64, step, size, b.next_offset, want);
    return 0;
}

/* One part's rows as of its own checkpoint, and its blob. */
static int check_step(cpr_store *store, uint64_t step, uint64_t n_committed)
{
    uint32_t tables[TABLES_PER_SHARD];
    for (uint32_t k = 0; k < TABLES_PER_SHARD; k++)
        tables[k] = table_of(shard_of(step), k);
    if (check_restore(store, tables, TABLES_PER_SHARD, ckpt_of(step), n_committed))
        return -1;
    return check_blob(store, step, 1);
}

static int check_part_info(const cpr_part_info *p, uint64_t step)
{
    uint32_t shard = shard_of(step);
    uint64_t ckpt = ckpt_of(step);
    cpr_kind kind = kind_of(ckpt);
    CHECK(p->shard == shard && p->checkpoint == ckpt, "list entry %u/%" PRIu64
          ", want %u/%" PRIu64, p->shard, p->checkpoint, shard, ckpt);
    CHECK(p->committed, "open part %u/%" PRIu64 " listed after reopen", shard, ckpt);
    CHECK(p->kind == kind && p->num_shards == SHARDS && p->step == ckpt * 100,
          "part %u/%" PRIu64 ": kind %d num_shards %u step %" PRIu64, shard, ckpt,
          (int)p->kind, p->num_shards, p->step);
    CHECK(p->base == (kind == CPR_KIND_DELTA ? base_of(ckpt) : 0),
          "part %u/%" PRIu64 ": base %" PRIu64, shard, ckpt, p->base);
    CHECK(p->consistent == (kind != CPR_KIND_PRIORITY), "part %u/%" PRIu64
          ": consistent %d", shard, ckpt, p->consistent);
    CHECK(p->rows == part_rows(shard, ckpt), "part %u/%" PRIu64 ": rows %" PRIu64
          ", want %" PRIu64, shard, ckpt, p->rows, part_rows(shard, ckpt));
    CHECK(p->bytes == part_bytes(shard, ckpt), "part %u/%" PRIu64 ": bytes %" PRIu64
          ", want %" PRIu64, shard, ckpt, p->bytes, part_bytes(shard, ckpt));
    return 0;
}

/* List shows exactly steps [0, n_committed), all committed. */
static int check_list(cpr_store *store, uint64_t n_committed)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    cpr_status st = cpr_store_list(store, JOB, &parts, &n);
    int rc = 0;
    if (st == CPR_NOT_FOUND) {
        CHECK(n_committed == 0, "list: NOT_FOUND with %" PRIu64 " committed", n_committed);
        return 0;
    }
    CHECK_ST(st, CPR_OK, "list");
    if (n != n_committed) {
        fprintf(stderr, "FAIL: list has %zu parts, %" PRIu64 " committed\n", n, n_committed);
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = check_part_info(&parts[i], i);
    free(parts);
    return rc;
}

/* Is the part of `step` listed as committed? */
static int listed_committed(cpr_store *store, uint64_t step)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    int found = 0;
    if (cpr_store_list(store, JOB, &parts, &n) != CPR_OK)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (parts[i].shard == shard_of(step) && parts[i].checkpoint == ckpt_of(step))
            found = parts[i].committed ? 1 : -1;
    free(parts);
    return found;
}

static uint64_t blobs_of_first(uint64_t n_committed)
{
    uint64_t n = 0;
    for (uint64_t s = 0; s < n_committed; s++)
        n += blob_bytes_of(shard_of(s), ckpt_of(s)) > 0;
    return n;
}

/* Objects of the store at `dir` whose names hold `part`, when the store is
 * in RADOS (tests/rados/store_on_rados.c defines it; absent otherwise). */
__attribute__((weak)) unsigned cpr_test_rados_segments(const char *dir, const char *part);

static int check_layout(const char *store_dir, uint64_t n_committed)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/staging", store_dir);
    uint64_t staged = tu_count_files(path);
    CHECK(staged == 0, "%" PRIu64 " files left under staging/ after open", staged);
    snprintf(path, sizeof path, "%s/blobs", store_dir);
    uint64_t blobs = cpr_test_rados_segments ? cpr_test_rados_segments(store_dir, ".b_")
                                             : tu_count_files(path);
    CHECK(blobs == blobs_of_first(n_committed), "%" PRIu64 " blob files or objects, %"
          PRIu64 " committed blobs", blobs, blobs_of_first(n_committed));
    return 0;
}

static int check_latest_cut(cpr_store *store, uint64_t n_committed)
{
    uint64_t cut = 0, want = latest_cut_of(n_committed);
    cpr_status st = cpr_store_latest_cut(store, JOB, &cut);
    if (want == 0) {
        CHECK_ST(st, CPR_NOT_FOUND, "latest_cut with no cut");
        return 0;
    }
    CHECK_ST(st, CPR_OK, "latest_cut");
    CHECK(cut == want, "latest cut %" PRIu64 ", want %" PRIu64, cut, want);
    return 0;
}

/* Decide what happened to the step in flight at the kill: it must be either
 * committed and exactly right, or invisible. Returns the steps committed. */
static int resolve_pending(cpr_store *store, const log_state *ls, uint64_t *n_model,
                           char *resolution)
{
    int listed = listed_committed(store, ls->pending);
    *n_model = ls->n_committed;
    *resolution = 'A';
    CHECK(listed >= 0, "in-flight step %" PRIu64 " listed as open after reopen", ls->pending);
    if (listed) {
        CHECK(ls->pending_type == 'C', "step %" PRIu64 " visible though the writer "
              "was killed before calling commit", ls->pending);
        *n_model = ls->pending + 1;
        *resolution = 'R';
        return check_step(store, ls->pending, *n_model);
    }
    /* Invisible: no blob, and no row of it at any as_of (checked below by
     * the full restore as of a checkpoint beyond it). */
    return check_blob(store, ls->pending, 0);
}

static int verify_store(cpr_store *store, const char *store_dir, const log_state *ls,
                        uint64_t verified_before, uint64_t sample_seed, int full,
                        uint64_t *n_model, char *resolution)
{
    uint64_t n = ls->n_committed;
    *resolution = 0;
    if (ls->pending_type && resolve_pending(store, ls, &n, resolution))
        return -1;
    *n_model = n;
    if (check_list(store, n) || check_layout(store_dir, n) || check_latest_cut(store, n))
        return -1;
    if (check_restore(store, NULL, 0, 0, n) ||
        check_restore(store, NULL, 0, ckpt_of(n) + 5, n))
        return -1;
    uint64_t first = full || verified_before > n ? 0 : verified_before;
    for (uint64_t s = first; s < n; s++)
        if (check_step(store, s, n))
            return -1;
    for (int i = 0; !full && first > 0 && i < 3; i++)
        if (check_step(store, mix64(sample_seed + (uint64_t)i) % first, n))
            return -1;
    return 0;
}

static int verifier_main(const char *store_dir, const char *log_path, shared_state *sh,
                         uint64_t sample_seed, int full)
{
    log_state ls;
    cpr_store *store = NULL;
    uint64_t n_model = 0;
    char resolution = 0;
    if (log_read(log_path, &ls))
        return -1;
    /* Drop a torn last line so that appended records start on a new line. */
    CHECK(truncate(log_path, ls.valid_bytes) == 0 || errno == ENOENT, "truncate log");
    cpr_status st = cpr_store_open(store_dir, NULL, &store);
    CHECK_ST(st, CPR_OK, "reopen after kill");
    int rc = verify_store(store, store_dir, &ls, sh->verified_steps, sample_seed, full,
                          &n_model, &resolution);
    cpr_store_close(store);
    if (rc)
        return -1;
    if (resolution && ls.pending_type == 'C') {
        if (resolution == 'R')
            sh->in_flight_visible++;
        else
            sh->in_flight_invisible++;
    }
    if (resolution) {
        int fd = open(log_path, O_WRONLY | O_APPEND);
        CHECK(fd >= 0, "open log: %s", strerror(errno));
        rc = log_append(fd, resolution, ls.pending, 1);
        close(fd);
    }
    sh->verified_steps = n_model;
    return rc;
}

/* ---- the parent --------------------------------------------------------- */

static uint64_t g_rng;
static uint64_t rng_next(void)
{
    return cpr_splitmix64(&g_rng);
}

static uint64_t test_seed(void)
{
    const char *env = getenv("CPR_TEST_SEED");
    if (env && *env) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 0);
        if (errno == 0 && end && *end == '\0')
            return v;
        fprintf(stderr, "ignoring malformed CPR_TEST_SEED '%s'\n", env);
    }
    return now_ns() ^ ((uint64_t)getpid() << 32);
}

/* Fork fn in a child; returns its pid (the child never returns). */
typedef int (*child_fn)(const char *, const char *, shared_state *, uint64_t, int);

static int writer_entry(const char *store_dir, const char *log_path, shared_state *sh,
                        uint64_t unused_seed, int unused_full)
{
    (void)unused_seed;
    (void)unused_full;
    return writer_main(store_dir, log_path, sh);
}

static pid_t spawn(child_fn fn, const char *store_dir, const char *log_path,
                   shared_state *sh, uint64_t seed, int full)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn(store_dir, log_path, sh, seed, full) == 0 ? 0 : 2);
    return pid;
}

static int run_verifier(const char *store_dir, const char *log_path, shared_state *sh,
                        int full)
{
    int status = 0;
    pid_t pid = spawn(verifier_main, store_dir, log_path, sh, rng_next(), full);
    CHECK(pid > 0, "fork: %s", strerror(errno));
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "verifier failed (status 0x%x)", status);
    return 0;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ull),
                           .tv_nsec = (long)(ns % 1000000000ull) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

typedef struct kill_stats {
    unsigned kills;
    unsigned by_phase[PH_COUNT]; /* where kills landed */
    unsigned aimed[PH_COUNT];    /* where they were aimed */
    unsigned reached;            /* kills whose writer reached the aimed phase */
    uint64_t open_estimate_ns;  /* fork to store open, moving average */
    uint64_t verify_ns;         /* time spent in verifiers */
} kill_stats;

/* The phase a kill aims at, by seeded dice: streaming rows most often. */
static int target_phase(void)
{
    uint64_t dice = rng_next() % 100;
    return dice < 40 ? PH_ROWS : dice < 65 ? PH_COMMIT : dice < 77 ? PH_BLOB
         : dice < 85 ? PH_BEGIN : dice < 93 ? PH_OPEN : PH_START;
}

/* Wait (polling the shared page) until the writer is in `phase` or has
 * exited; returns 0 when it got there. */
static int wait_for_phase(const shared_state *sh, pid_t pid, int phase)
{
    uint64_t until = now_ns() + PHASE_WAIT_NS;
    unsigned spins = 0;
    while (sh->phase != phase) { /* observe the child (a phase lasts ~1 ms) */
        if ((++spins & 1023) == 0 && (now_ns() > until || waitpid(pid, NULL, WNOHANG) != 0))
            return -1;
        sched_yield(); /* spin, but let the child (and ctest's other job) have the core */
    }
    return 0;
}

/* One writer life: fork, reach the seeded phase, wait a seeded moment,
 * SIGKILL, reap, verify. */
static int one_kill(const char *store_dir, const char *log_path, shared_state *sh,
                    kill_stats *ks)
{
    int status = 0;
    int target = target_phase();
    sh->phase = PH_START;
    sh->open_done_ns = 0;
    uint64_t forked_ns = now_ns();
    pid_t pid = spawn(writer_entry, store_dir, log_path, sh, 0, 0);
    CHECK(pid > 0, "fork: %s", strerror(errno));
    if (target == PH_START) {
        sleep_ns(rng_next() % (2 * MS));
    } else {
        if (wait_for_phase(sh, pid, target) == 0)
            ks->reached++;
        /* Streaming lasts ~1 ms, commit several (fsyncs): aim inside each;
         * one life in ten runs on for up to 40 ms, so parts get committed
         * and kills also land after commit points. */
        uint64_t span = target == PH_ROWS ? 150000 : target == PH_COMMIT ? 8 * MS : MS;
        if (rng_next() % 10 == 0)
            span = 40 * MS;
        sleep_ns(rng_next() % span);
    }
    kill(pid, SIGKILL);
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
          "writer ended by itself (status 0x%x) in phase %s", status,
          phase_names[sh->phase]);
    ks->kills++;
    ks->by_phase[sh->phase]++;
    ks->aimed[target]++;
    if (sh->open_done_ns > forked_ns)
        ks->open_estimate_ns = (3 * ks->open_estimate_ns + (sh->open_done_ns - forked_ns)) / 4;
    uint64_t verify_start = now_ns();
    int rc = run_verifier(store_dir, log_path, sh, 0);
    ks->verify_ns += now_ns() - verify_start;
    return rc;
}

static int crash_loop(const char *store_dir, const char *log_path, shared_state *sh)
{
    kill_stats ks = { .open_estimate_ns = 20 * MS };
    uint64_t start = now_ns();
    unsigned min_kills = MIN_KILLS;
    const char *env = getenv("CPR_CRASH_KILLS");
    if (env && *env)
        min_kills = (unsigned)strtoul(env, NULL, 10);
    while (ks.kills < min_kills || sh->verified_steps < MIN_STEPS) {
        CHECK(ks.kills < 4 * min_kills + 100, "%u kills, only %" PRIu64 " parts committed",
              ks.kills, sh->verified_steps);
        if (one_kill(store_dir, log_path, sh, &ks))
            return -1;
    }
    if (run_verifier(store_dir, log_path, sh, 1))
        return -1;
    printf("%u kills in %.1f s (%.1f s verifying, open ~%.0f ms), %" PRIu64 " parts "
           "committed; %u reached the phase they aimed at\nkills by phase landed in:",
           ks.kills, (double)(now_ns() - start) / 1e9, (double)ks.verify_ns / 1e9,
           (double)ks.open_estimate_ns / 1e6, sh->verified_steps, ks.reached);
    for (int p = 0; p < PH_COUNT; p++)
        printf(" %s=%u", phase_names[p], ks.by_phase[p]);
    printf("\nkills by phase aimed at:");
    for (int p = 0; p < PH_COUNT; p++)
        printf(" %s=%u", phase_names[p], ks.aimed[p]);
    printf("\ncommits in flight at a kill: %u landed, %u vanished\n",
           sh->in_flight_visible, sh->in_flight_invisible);
    /* The point of aiming: a real share of the kills inside streaming and
     * commit, not only around open. */
    CHECK(ks.by_phase[PH_ROWS] * 5 >= ks.kills, "only %u of %u kills landed while rows "
          "streamed", ks.by_phase[PH_ROWS], ks.kills);
    CHECK(ks.by_phase[PH_COMMIT] > 0 && ks.by_phase[PH_BLOB] > 0,
          "no kill landed in commit or while blobs streamed");
    return 0;
}

int main(void)
{
    uint64_t seed = test_seed();
    g_rng = seed;
    printf("test_crash: seed %" PRIu64 " (set CPR_TEST_SEED to repeat)\n", seed);
    char *dir = tu_mkdtemp("cpr-crash");
    char store_dir[4096], log_path[4096];
    snprintf(store_dir, sizeof store_dir, "%s/store", dir);
    snprintf(log_path, sizeof log_path, "%s/log", dir);
    shared_state *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(sh, 0, sizeof *sh);
    int rc = crash_loop(store_dir, log_path, sh);
    munmap(sh, sizeof *sh);
    if (rc) {
        printf("test_crash: FAILED (seed %" PRIu64 ", store kept in %s)\n", seed, dir);
        free(dir);
        return 1;
    }
    tu_rmtree(dir);
    free(dir);
    printf("test_crash: 1 passed, 0 failed\n");
    return 0;
}
