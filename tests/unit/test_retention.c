/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention (cpr_store_gc): a two-shard job with a FULL part and then
 * alternating PRIORITY and DELTA parts. Every state as of a checkpoint is
 * recorded before GC; afterwards the retained states must restore exactly as
 * before, older ones must be refused, and the report must count exactly the
 * row versions and parts no retained state needs. Also: nothing is removed
 * with fewer cuts than `keep`, crash leftovers are reclaimed, keep = 1 and the
 * store's default retain_cuts, and a floor given by the caller
 * (cpr_store_gc_floor) is applied exactly or refused.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "cpr/crc32c.h"
#include "cpr/rng.h"
#include "cpr/store.h"
#include "testutil.h"

#define JOB "ret"
#define SHARDS 2u
#define ROWS 600u
#define N_TABLES 2u
#define MAX_CKPT 12u

static const cpr_table_schema g_tables[N_TABLES] = {
    { .table = 1, .rows = ROWS, .dim = 8, .state_dim = 2 },
    { .table = 2, .rows = ROWS, .dim = 4, .state_dim = 0 },
};

/* ---- the model ---------------------------------------------------------- */
/* Checkpoint 1 is FULL, then even ids PRIORITY and odd ids DELTA, so the
 * consistent cuts are the odd ids. Shard s owns rows r % SHARDS == s. */

static cpr_kind kind_of(uint64_t ckpt)
{
    if (ckpt == 1)
        return CPR_KIND_FULL;
    return ckpt % 2 == 0 ? CPR_KIND_PRIORITY : CPR_KIND_DELTA;
}

/* SplitMix64's step from x: cpr/rng.h's mixer of x plus the golden gamma. */
static uint64_t mix64(uint64_t x)
{
    uint64_t state = x;
    return cpr_splitmix64(&state);
}

static int row_in_part(uint64_t row, uint64_t ckpt)
{
    uint64_t h = mix64((ckpt << 32) ^ row);
    switch (kind_of(ckpt)) {
    case CPR_KIND_FULL:
        return 1;
    case CPR_KIND_DELTA:
        return h % 3 == 0;
    default:
        return h % 5 == 0;
    }
}

static size_t blob_bytes_of(uint32_t shard, uint64_t ckpt)
{
    return ckpt == 1 ? (2u << 20) + 100 * shard : 3000 + 100 * ckpt + shard;
}

/* Row versions that exist: bit c of versions[row] is checkpoint c. The same
 * for both tables. parts[c] says whether checkpoint c's parts still exist. */
typedef struct model {
    uint32_t versions[ROWS];
    int parts[MAX_CKPT + 1];
    uint64_t newest, floor;
} model;

static void model_commit(model *m, uint64_t ckpt)
{
    for (uint64_t r = 0; r < ROWS; r++)
        if (row_in_part(r, ckpt))
            m->versions[r] |= 1u << ckpt;
    m->parts[ckpt] = 1;
    m->newest = ckpt;
}

/* Checkpoint of the row's version as of `as_of` (0: none). */
static uint64_t model_version(const model *m, uint64_t row, uint64_t as_of)
{
    for (uint64_t c = as_of < m->newest ? as_of : m->newest; c >= 1; c--)
        if (m->versions[row] & (1u << c))
            return c;
    return 0;
}

/* What GC down to `floor` must remove; applies it to the model. */
static void model_gc(model *m, uint64_t floor, uint64_t *versions_removed,
                     uint64_t *parts_removed)
{
    *versions_removed = 0;
    *parts_removed = 0;
    for (uint64_t r = 0; r < ROWS; r++) {
        uint64_t keep = model_version(m, r, floor);
        for (uint64_t c = 1; c < keep; c++)
            if (m->versions[r] & (1u << c)) {
                m->versions[r] &= ~(1u << c);
                *versions_removed += N_TABLES;
            }
    }
    for (uint64_t c = 1; c < floor; c++)
        if (m->parts[c]) {
            m->parts[c] = 0;
            *parts_removed += SHARDS;
        }
    m->floor = floor;
}

/* ---- writing ------------------------------------------------------------ */

static void write_ckpt(cpr_store *store, model *m, uint64_t ckpt)
{
    uint64_t ids[ROWS];
    for (uint32_t s = 0; s < SHARDS; s++) {
        size_t n = 0;
        for (uint64_t r = s; r < ROWS; r += SHARDS)
            if (row_in_part(r, ckpt))
                ids[n++] = r;
        cpr_part_spec spec = {
            .id = { .job = JOB, .shard = s, .checkpoint = ckpt },
            .kind = kind_of(ckpt), .step = ckpt * 10, .num_shards = SHARDS,
            .tables = g_tables, .n_tables = N_TABLES,
        };
        assert_status(CPR_OK, tu_write_part(store, &spec, ids, n, 128,
                                            blob_bytes_of(s, ckpt), 1));
    }
    if (m)
        model_commit(m, ckpt);
}

/* ---- checking ----------------------------------------------------------- */

static cpr_status restore_rows(cpr_store *store, uint64_t as_of, int consistent,
                               tu_rows *out)
{
    cpr_restore_query q = { .job = JOB, .as_of = as_of, .consistent = consistent,
                            .batch_rows = 100 };
    memset(out, 0, sizeof *out);
    return cpr_store_restore(store, &q, tu_collect, out, NULL);
}

/* The restored rows are exactly the model's state as of `as_of`. */
static void assert_rows_model(const tu_rows *rows, const model *m, uint64_t as_of)
{
    size_t i = 0;
    for (uint32_t t = 0; t < N_TABLES; t++) {
        const cpr_table_schema *ts = &g_tables[t];
        for (uint64_t r = 0; r < ROWS; r++) {
            uint64_t ver = model_version(m, r, as_of);
            if (!ver)
                continue;
            if (i >= rows->n)
                fail_msg("as of %" PRIu64 ": row %u/%" PRIu64 " missing", as_of,
                         ts->table, r);
            const tu_row *got = &rows->rows[i++];
            if (got->table != ts->table || got->id != r)
                fail_msg("as of %" PRIu64 ": got row %u/%" PRIu64 ", want %u/%" PRIu64,
                         as_of, got->table, got->id, ts->table, r);
            assert_int_equal(got->dim, ts->dim);
            assert_int_equal(got->state_dim, ts->state_dim);
            for (uint32_t j = 0; j < ts->dim + ts->state_dim; j++) {
                float want = j < ts->dim ? tu_value(ts->table, r, ver, j)
                                         : tu_state(ts->table, r, ver, j - ts->dim);
                if (memcmp(&got->values[j], &want, sizeof want))
                    fail_msg("as of %" PRIu64 ": row %u/%" PRIu64 " element %u is not "
                             "checkpoint %" PRIu64 "'s", as_of, ts->table, r, j, ver);
            }
        }
    }
    assert_int_equal(i, rows->n);
}

static void assert_rows_equal(const tu_rows *a, const tu_rows *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        const tu_row *x = &a->rows[i], *y = &b->rows[i];
        assert_int_equal(x->table, y->table);
        assert_int_equal(x->id, y->id);
        assert_int_equal(x->dim, y->dim);
        assert_int_equal(x->state_dim, y->state_dim);
        assert_memory_equal(x->values, y->values, (x->dim + x->state_dim) * sizeof(float));
    }
}

typedef struct blob_check {
    uint32_t shard;
    uint64_t ckpt, next_offset;
    int wrong;
} blob_check;

static cpr_status check_chunk(void *ctx, uint64_t offset, const void *data, size_t len)
{
    blob_check *bc = ctx;
    const unsigned char *p = data;
    if (offset != bc->next_offset)
        bc->wrong = 1;
    for (size_t i = 0; !bc->wrong && i < len; i++)
        if (p[i] != tu_blob_byte(bc->shard, bc->ckpt, offset + i))
            bc->wrong = 1;
    bc->next_offset += len;
    return bc->wrong ? CPR_INTERNAL : CPR_OK;
}

static void assert_blob(cpr_store *store, uint32_t shard, uint64_t ckpt, int present)
{
    cpr_part_id id = { .job = JOB, .shard = shard, .checkpoint = ckpt };
    blob_check bc = { .shard = shard, .ckpt = ckpt };
    uint64_t size = 0;
    cpr_status st = cpr_store_read_blob(store, &id, "dense", &size, check_chunk, &bc);
    if (!present) {
        assert_status(CPR_NOT_FOUND, st);
        assert_int_equal(bc.next_offset, 0);
        return;
    }
    assert_status(CPR_OK, st);
    assert_false(bc.wrong);
    assert_int_equal(size, blob_bytes_of(shard, ckpt));
    assert_int_equal(bc.next_offset, size);
}

/* List shows exactly the model's parts, committed, with the right flags. */
static void assert_list_model(cpr_store *store, const model *m)
{
    cpr_part_info *parts = NULL;
    size_t n = 0, i = 0;
    assert_status(CPR_OK, cpr_store_list(store, JOB, &parts, &n));
    for (uint64_t c = 1; c <= m->newest; c++) {
        if (!m->parts[c])
            continue;
        for (uint32_t s = 0; s < SHARDS; s++, i++) {
            if (i >= n)
                fail_msg("part %u/%" PRIu64 " missing from list", s, c);
            if (parts[i].checkpoint != c || parts[i].shard != s)
                fail_msg("list[%zu] is %u/%" PRIu64 ", want %u/%" PRIu64, i,
                         parts[i].shard, parts[i].checkpoint, s, c);
            assert_true(parts[i].committed);
            assert_int_equal(parts[i].kind, kind_of(c));
            if (parts[i].consistent != (kind_of(c) != CPR_KIND_PRIORITY))
                fail_msg("part %u/%" PRIu64 " (%s): consistent = %d", s, c,
                         cpr_kind_name(kind_of(c)), parts[i].consistent);
        }
    }
    assert_int_equal(i, n);
    free(parts);
}

static uint64_t latest_cut_model(const model *m)
{
    for (uint64_t c = m->newest; c >= 1; c--)
        if (kind_of(c) != CPR_KIND_PRIORITY)
            return c;
    return 0;
}

/* Everything the model says about the store, against `recorded` states. */
static void assert_store_model(cpr_store *store, const model *m, tu_rows *recorded)
{
    uint64_t cut = 0;
    assert_list_model(store, m);
    assert_status(CPR_OK, cpr_store_latest_cut(store, JOB, &cut));
    assert_int_equal(cut, latest_cut_model(m));
    for (uint64_t c = 1; c <= m->newest; c++) {
        tu_rows rows;
        cpr_status st = restore_rows(store, c, 0, &rows);
        if (c < m->floor) {
            if (st != CPR_FAILED_PRECONDITION)
                fail_msg("restore as of %" PRIu64 " below floor %" PRIu64 ": %s", c,
                         m->floor, cpr_status_name(st));
        } else {
            assert_status(CPR_OK, st);
            assert_rows_equal(&rows, &recorded[c]);
            assert_rows_model(&rows, m, c);
        }
        tu_rows_free(&rows);
        for (uint32_t s = 0; s < SHARDS; s++) {
            assert_blob(store, s, c, m->parts[c]);
            if (c < m->floor && !m->parts[c] && !strstr(cpr_errmsg(), "retention removed"))
                fail_msg("blob of a part below the floor: '%s' does not say why", cpr_errmsg());
        }
    }
    tu_rows rows;
    assert_status(CPR_OK, restore_rows(store, 0, 1, &rows)); /* consistent */
    assert_rows_equal(&rows, &recorded[latest_cut_model(m)]);
    tu_rows_free(&rows);
    assert_status(CPR_OK, restore_rows(store, 0, 0, &rows)); /* newest */
    assert_rows_equal(&rows, &recorded[m->newest]);
    tu_rows_free(&rows);
    cpr_verify_report rep = { 0 };
    assert_status(CPR_OK, cpr_store_verify(store, JOB, NULL, NULL, &rep));
    assert_int_equal(rep.problems, 0);
}

static void record_states(cpr_store *store, const model *m, tu_rows *recorded)
{
    for (uint64_t c = 1; c <= m->newest; c++) {
        assert_status(CPR_OK, restore_rows(store, c, 0, &recorded[c]));
        assert_rows_model(&recorded[c], m, c);
    }
}

/* A store in `dir` with checkpoints 1..10 written, their states recorded. */
/* Background folding off: these tests count every stored version, and a
 * fold is a derived copy (test_fold covers folding). */
static const cpr_store_options g_no_fold = { .no_fold = 1 };

static cpr_store *open_with_ten(const char *dir, const cpr_store_options *opts, model *m,
                                tu_rows *recorded)
{
    cpr_store *store = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, opts, &store));
    for (uint64_t c = 1; c <= 10; c++)
        write_ckpt(store, m, c);
    record_states(store, m, recorded);
    return store;
}

static void free_states(tu_rows *recorded)
{
    for (uint64_t c = 0; c <= MAX_CKPT; c++)
        tu_rows_free(&recorded[c]);
}

/* The store holds exactly the model's row versions, no more: what an
 * explicit GC's compaction leaves (verify visits every stored version). */
static void assert_versions_stored(cpr_store *store, const model *m)
{
    uint64_t want = 0;
    for (uint64_t r = 0; r < ROWS; r++)
        want += (uint64_t)__builtin_popcount(m->versions[r]) * N_TABLES;
    cpr_verify_report rep = { 0 };
    assert_status(CPR_OK, cpr_store_verify(store, JOB, NULL, NULL, &rep));
    assert_int_equal(rep.rows_checked, want);
}

/* keep > 0: cpr_store_gc(keep); keep == 0 and floor > 0: cpr_store_gc_floor. */
static void gc_and_check_floor(cpr_store *store, model *m, uint32_t keep, uint64_t floor,
                               uint64_t want_floor)
{
    cpr_gc_report rep = { 0 };
    uint64_t versions = 0, parts = 0;
    if (floor)
        assert_status(CPR_OK, cpr_store_gc_floor(store, JOB, floor, &rep));
    else
        assert_status(CPR_OK, cpr_store_gc(store, JOB, keep, &rep));
    print_message("  gc keep %u floor %" PRIu64 ": floor %" PRIu64 ", parts %" PRIu64
                  ", versions %" PRIu64 ", uncommitted %" PRIu64 ", bytes %" PRIu64 " -> %"
                  PRIu64 "\n", keep, floor, rep.floor, rep.parts_removed,
                  rep.versions_removed, rep.uncommitted_removed, rep.bytes_before,
                  rep.bytes_after);
    model_gc(m, want_floor, &versions, &parts);
    assert_int_equal(rep.floor, want_floor);
    assert_int_equal(rep.parts_removed, parts);
    assert_int_equal(rep.versions_removed, versions);
    assert_true(versions > 0 && parts > 0);
    assert_true(rep.bytes_after < rep.bytes_before);
    assert_versions_stored(store, m);
}

static void gc_and_check(cpr_store *store, model *m, uint32_t keep, uint64_t want_floor)
{
    gc_and_check_floor(store, m, keep, 0, want_floor);
}

/* ---- tests -------------------------------------------------------------- */

/* Keep 2 cuts, reopen, then keep 1; the store stays writable. */
static void test_gc_keep_two_then_one(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention");
    cpr_store *store = NULL;
    model m = { 0 };
    tu_rows recorded[MAX_CKPT + 1] = { { 0 } };
    store = open_with_ten(dir, &g_no_fold, &m, recorded);
    assert_store_model(store, &m, recorded);

    gc_and_check(store, &m, 2, 7); /* cuts 1 3 5 7 9: keep 7 and 9 */
    assert_store_model(store, &m, recorded);
    cpr_store_close(store);
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    assert_store_model(store, &m, recorded);

    gc_and_check(store, &m, 1, 9);
    assert_store_model(store, &m, recorded);
    cpr_store_close(store);
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    assert_store_model(store, &m, recorded);

    /* Still writable above the floor: a DELTA on the floor cut. */
    write_ckpt(store, &m, 11);
    assert_status(CPR_OK, restore_rows(store, 11, 0, &recorded[11]));
    assert_rows_model(&recorded[11], &m, 11);
    assert_store_model(store, &m, recorded);
    cpr_store_close(store);
    free_states(recorded);
    tu_rmtree(dir);
    free(dir);
}

/* Fewer consistent cuts than `keep` (and exactly `keep`): nothing goes. */
static void test_gc_fewer_cuts_than_keep(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention");
    cpr_store *store = NULL;
    model m = { 0 };
    tu_rows recorded[MAX_CKPT + 1] = { { 0 } };
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    for (uint64_t c = 1; c <= 4; c++) /* cuts 1 and 3 */
        write_ckpt(store, &m, c);
    record_states(store, &m, recorded);
    static const uint32_t keeps[] = { 5, 3, 2 };
    for (size_t k = 0; k < sizeof keeps / sizeof keeps[0]; k++) {
        cpr_gc_report rep = { 0 };
        assert_status(CPR_OK, cpr_store_gc(store, JOB, keeps[k], &rep));
        assert_int_equal(rep.parts_removed, 0);
        assert_int_equal(rep.versions_removed, 0);
        assert_true(rep.floor <= 1);
        assert_store_model(store, &m, recorded);
    }
    cpr_store_close(store);
    free_states(recorded);
    tu_rmtree(dir);
    free(dir);
}

/* keep = 0 takes the store's retain_cuts; job NULL covers every job. */
static void test_gc_default_keep(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention");
    cpr_store *store = NULL;
    cpr_store_options opts = { .retain_cuts = 3, .no_fold = 1 };
    model m = { 0 };
    tu_rows recorded[MAX_CKPT + 1] = { { 0 } };
    store = open_with_ten(dir, &opts, &m, recorded);
    gc_and_check(store, &m, 0, 5); /* cuts 1 3 5 7 9: keep 5 7 9 */
    assert_store_model(store, &m, recorded);
    cpr_gc_report rep = { 0 };
    assert_status(CPR_OK, cpr_store_gc(store, NULL, 0, &rep)); /* already done */
    assert_int_equal(rep.parts_removed, 0);
    assert_int_equal(rep.versions_removed, 0);
    assert_store_model(store, &m, recorded);
    cpr_store_close(store);
    free_states(recorded);
    tu_rmtree(dir);
    free(dir);
}

/* A floor given by the caller (a client whose job spans several stores):
 * exactly that floor, checked, kept across a reopen. */
static void test_gc_given_floor(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention");
    cpr_store *store = NULL;
    model m = { 0 };
    tu_rows recorded[MAX_CKPT + 1] = { { 0 } };
    cpr_gc_report rep = { 0 };
    store = open_with_ten(dir, &g_no_fold, &m, recorded);

    /* Refused, and nothing changes: no job, floor 0, unknown job, above the
     * newest checkpoint, a checkpoint that is no cut (PRIORITY parts). */
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_gc_floor(store, NULL, 3, &rep));
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_gc_floor(store, JOB, 0, &rep));
    assert_status(CPR_NOT_FOUND, cpr_store_gc_floor(store, "nosuchjob", 3, &rep));
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_gc_floor(store, JOB, 11, &rep));
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_gc_floor(store, JOB, 4, &rep));
    assert_non_null(strstr(cpr_errmsg(), "not a consistent cut"));
    assert_store_model(store, &m, recorded);

    /* 5: not what keep 2 (7) or keep 1 (9) would choose. */
    gc_and_check_floor(store, &m, 0, 5, 5);
    assert_store_model(store, &m, recorded);
    assert_status(CPR_OK, cpr_store_gc_floor(store, JOB, 3, &rep)); /* below: no-op */
    assert_int_equal(rep.floor, 5);
    assert_int_equal(rep.parts_removed + rep.versions_removed, 0);
    cpr_store_close(store);
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    assert_store_model(store, &m, recorded);

    gc_and_check_floor(store, &m, 0, 9, 9);
    assert_store_model(store, &m, recorded);
    cpr_store_close(store);
    free_states(recorded);
    tu_rmtree(dir);
    free(dir);
}

/* The child commits checkpoint 1, begins checkpoint 2 on shard 0 with rows
 * and a blob, and dies without closing the store. */
static void crashed_writer(const char *dir)
{
    cpr_store *store = NULL;
    if (cpr_store_open(dir, &g_no_fold, &store) != CPR_OK)
        _exit(3);
    uint64_t ids[ROWS / SHARDS];
    for (uint32_t s = 0; s < SHARDS; s++) {
        size_t n = 0;
        for (uint64_t r = s; r < ROWS; r += SHARDS)
            ids[n++] = r;
        cpr_part_spec spec = {
            .id = { .job = JOB, .shard = s, .checkpoint = 1 }, .kind = CPR_KIND_FULL,
            .step = 10, .num_shards = SHARDS, .tables = g_tables, .n_tables = N_TABLES,
        };
        if (tu_write_part(store, &spec, ids, n, 128, blob_bytes_of(s, 1), 1) != CPR_OK)
            _exit(4);
    }
    cpr_part_spec open_spec = {
        .id = { .job = JOB, .shard = 0, .checkpoint = 2 }, .kind = CPR_KIND_DELTA,
        .step = 20, .num_shards = SHARDS, .tables = g_tables, .n_tables = N_TABLES,
    };
    if (tu_write_part(store, &open_spec, ids, 100, 50, (3u << 20) + 11, 0) != CPR_OK)
        _exit(5);
    _exit(0);
}

/* Defined by tests/rados/store_on_rados.c when the store is in RADOS. */
__attribute__((weak)) unsigned cpr_test_rados_segments(const char *dir, const char *part);

/* Runs first: the crashed writer is a fork of a process that has not yet
 * started RocksDB (which is not fork-safe). */
static void test_gc_reclaims_crash_leftover(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention");
    char staging[4096];
    snprintf(staging, sizeof staging, "%s/staging", dir);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0)
        crashed_writer(dir);
    int status = 0;
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    uint64_t left = tu_count_files(staging);
    print_message("  staging files left by the crashed writer: %" PRIu64 "\n", left);
    if (!cpr_test_rados_segments) /* (on RADOS its leftovers are objects in the pool) */
        assert_true(left > 0); /* else there is nothing to reclaim: the test proves nothing */

    cpr_store *store = NULL;
    model m = { 0 };
    tu_rows recorded[MAX_CKPT + 1] = { { 0 } };
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    cpr_gc_report rep = { 0 };
    assert_status(CPR_OK, cpr_store_gc(store, JOB, 2, &rep));
    print_message("  gc after crash: uncommitted_removed %" PRIu64 "\n",
                  rep.uncommitted_removed);
    assert_int_equal(tu_count_files(staging), 0);
    assert_int_equal(rep.parts_removed, 0);
    model_commit(&m, 1);
    assert_status(CPR_OK, restore_rows(store, 1, 0, &recorded[1]));
    assert_store_model(store, &m, recorded); /* 2 is neither listed nor visible */
    tu_rows rows;
    assert_status(CPR_OK, restore_rows(store, 5, 0, &rows));
    assert_rows_equal(&rows, &recorded[1]);
    tu_rows_free(&rows);

    /* The abandoned checkpoint id is free again. */
    write_ckpt(store, &m, 2);
    assert_status(CPR_OK, restore_rows(store, 2, 0, &recorded[2]));
    assert_rows_model(&recorded[2], &m, 2);
    assert_store_model(store, &m, recorded);
    cpr_store_close(store);
    free_states(recorded);
    tu_rmtree(dir);
    free(dir);
}

/* Periodic retention (cpr_store_gc_lazy): floors and part records move at
 * once, retained states restore exactly, versions wait for a compaction;
 * a later explicit GC at the same floor returns them. */
static void test_gc_lazy(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention");
    cpr_store *store = NULL;
    model m = { 0 };
    tu_rows recorded[MAX_CKPT + 1] = { { 0 } };
    cpr_gc_report rep = { 0 };
    uint64_t versions = 0, parts = 0;
    store = open_with_ten(dir, &g_no_fold, &m, recorded); /* retain 2 cuts */

    assert_status(CPR_OK, cpr_store_gc_lazy(store, &rep));
    model_gc(&m, 7, &versions, &parts); /* cuts 1 3 5 7 9 */
    print_message("  lazy gc: floor %" PRIu64 ", parts %" PRIu64 ", versions dropped "
                  "meanwhile %" PRIu64 " of %" PRIu64 "\n", rep.floor, rep.parts_removed,
                  rep.versions_removed, versions);
    assert_int_equal(rep.floor, 7);
    assert_int_equal(rep.parts_removed, parts);
    assert_true(rep.versions_removed <= versions);
    assert_store_model(store, &m, recorded);

    /* Reopened: the explicit GC at the same floor changes nothing more. */
    uint64_t dropped = rep.versions_removed;
    cpr_store_close(store);
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    assert_status(CPR_OK, cpr_store_gc(store, JOB, 2, &rep));
    assert_int_equal(rep.floor, 7);
    assert_int_equal(rep.parts_removed, 0);
    assert_true(dropped + rep.versions_removed <= versions);
    assert_versions_stored(store, &m);
    assert_store_model(store, &m, recorded);

    /* Without a reopen: a lazy run to floor 9, then an explicit one. */
    write_ckpt(store, &m, 11);
    assert_status(CPR_OK, restore_rows(store, 11, 0, &recorded[11]));
    assert_status(CPR_OK, cpr_store_gc_lazy(store, &rep));
    model_gc(&m, 9, &versions, &parts);
    assert_int_equal(rep.floor, 9);
    assert_int_equal(rep.parts_removed, parts);
    dropped = rep.versions_removed;
    assert_store_model(store, &m, recorded);
    assert_status(CPR_OK, cpr_store_gc(store, JOB, 2, &rep));
    assert_int_equal(rep.floor, 9);
    assert_true(dropped + rep.versions_removed <= versions);
    assert_versions_stored(store, &m);
    assert_store_model(store, &m, recorded);
    cpr_store_close(store);
    free_states(recorded);
    tu_rmtree(dir);
    free(dir);
}

/* A restore that is running when GC raises the floor above its checkpoint
 * and compacts (the filter ignores snapshots) still returns exactly its
 * state: its iterators pin the files it reads (retention_filter.h F3). */
typedef struct gc_midway {
    cpr_store *store;
    tu_rows rows;
    int gc_done;
    cpr_gc_report rep;
} gc_midway;

static cpr_status collect_then_gc(void *ctx, const cpr_row_batch *batch)
{
    gc_midway *g = ctx;
    cpr_status st = tu_collect(&g->rows, batch);
    if (st == CPR_OK && !g->gc_done) {
        g->gc_done = 1;
        st = cpr_store_gc(g->store, JOB, 1, &g->rep);
    }
    return st;
}

static void test_gc_during_restore(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention");
    model m = { 0 };
    tu_rows recorded[MAX_CKPT + 1] = { { 0 } };
    gc_midway g = { 0 };
    g.store = open_with_ten(dir, &g_no_fold, &m, recorded);

    /* One row per batch: the workers are far from done when GC runs. */
    cpr_restore_query q = { .job = JOB, .as_of = 3, .batch_rows = 1 };
    cpr_restore_result res = { 0 };
    assert_status(CPR_OK, cpr_store_restore(g.store, &q, collect_then_gc, &g, &res));
    assert_true(g.gc_done);
    print_message("  gc during a restore as of 3: floor %" PRIu64 ", versions %" PRIu64
                  ", restored %zu rows\n", g.rep.floor, g.rep.versions_removed, g.rows.n);
    assert_int_equal(g.rep.floor, 9);
    assert_true(g.rep.versions_removed > 0);
    assert_int_equal(res.as_of, 3);
    assert_rows_equal(&g.rows, &recorded[3]);
    tu_rows after;
    assert_status(CPR_FAILED_PRECONDITION, restore_rows(g.store, 3, 0, &after));
    tu_rows_free(&after);
    uint64_t versions = 0, parts = 0;
    model_gc(&m, 9, &versions, &parts);
    assert_int_equal(g.rep.versions_removed, versions);
    assert_versions_stored(g.store, &m);
    assert_store_model(g.store, &m, recorded);
    tu_rows_free(&g.rows);
    cpr_store_close(g.store);
    free_states(recorded);
    tu_rmtree(dir);
    free(dir);
}

static size_t entries(const char *path)
{
    size_t n = 0;
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* An aborted part leaves no directory behind once retention has run: not
 * its own, and not its job's under staging/ (issue #11). */
static void test_gc_sweeps_empty_staging(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention-staging");
    char staging[4200];
    snprintf(staging, sizeof staging, "%s/staging", dir);
    cpr_store *store = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    cpr_table_schema t = {.table = 0, .rows = 100, .dim = 4};
    cpr_part_spec spec = tu_part("gone", 0, 1, 1, CPR_KIND_FULL, &t, 1);
    static const char data[] = "dense";
    assert_status(CPR_OK, cpr_store_begin(store, &spec));
    assert_status(CPR_OK, cpr_store_put_blob(store, &spec.id, "dense", 0, data, sizeof data,
                                             cpr_crc32c(0, data, sizeof data)));
    assert_status(CPR_OK, cpr_store_abort(store, &spec.id));
    cpr_gc_report rep;
    assert_status(CPR_OK, cpr_store_gc(store, NULL, 0, &rep));
    assert_int_equal(entries(staging), 0);
    cpr_store_close(store);
    tu_rmtree(dir);
    free(dir);
}

/* A blob directory no record in memory names (as after a commit whose synced
 * record write reported an error but reached the WAL) stays through GC at
 * run time; the next open, which knows, removes it (store_internal.h S2). */
static void test_gc_keeps_unrecorded_blobs_until_open(void **state)
{
    (void)state;
    if (cpr_test_rados_segments)
        skip(); /* blobs are segment objects there (B1), swept at open only already */
    char *dir = tu_mkdtemp("cpr-retention-limbo");
    cpr_store *store = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    cpr_table_schema t = {.table = 0, .rows = 100, .dim = 4};
    cpr_part_spec spec = tu_part("limbo", 0, 1, 1, CPR_KIND_FULL, &t, 1);
    static const char data[] = "dense";
    assert_status(CPR_OK, cpr_store_begin(store, &spec));
    assert_status(CPR_OK, cpr_store_put_blob(store, &spec.id, "dense", 0, data, sizeof data,
                                             cpr_crc32c(0, data, sizeof data)));
    assert_status(CPR_OK, cpr_store_commit(store, &spec.id, 0));
    char limbo[4200], file[4300];
    snprintf(limbo, sizeof limbo, "%s/blobs/j_limbo/0-2", dir);
    assert_int_equal(mkdir(limbo, 0755), 0);
    snprintf(file, sizeof file, "%s/b_dense", limbo);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("dense", f);
    fclose(f);
    cpr_gc_report rep;
    assert_status(CPR_OK, cpr_store_gc(store, NULL, 0, &rep));
    assert_int_equal(tu_count_files(limbo), 1);
    cpr_store_close(store);
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    assert_int_equal(tu_count_files(limbo), 0); /* no record: a leftover */
    tu_blob got = {0};
    assert_status(CPR_OK, cpr_store_read_blob(store, &spec.id, "dense", NULL, tu_blob_collect,
                                              &got));
    assert_int_equal(got.len, sizeof data); /* the committed part's blob is untouched */
    assert_memory_equal(got.data, data, sizeof data);
    free(got.data);
    cpr_store_close(store);
    tu_rmtree(dir);
    free(dir);
}

/* Rows of each of tables 0 and 1 restored from the newest state. */
static void count_tables(cpr_store *store, size_t counts[2])
{
    cpr_restore_query q = {.job = "t"};
    tu_rows rows = {0};
    assert_status(CPR_OK, tu_restore(store, &q, &rows, NULL));
    counts[0] = counts[1] = 0;
    for (size_t i = 0; i < rows.n; i++)
        counts[rows.rows[i].table == 1]++;
    tu_rows_free(&rows);
}

/* A FULL of tables 0 and 1, then a DELTA of table 1 only: retention keeping
 * one cut folds table 0's rows and drops the FULL, the only part that
 * declared it. The job keeps the table, also after a reopen (the fold's
 * record brings it back), and a restore still has its rows. */
static void test_gc_fold_keeps_a_table_only_it_holds(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention-fold-table");
    const cpr_table_schema both[2] = {{.table = 0, .rows = 100, .dim = 4},
                                      {.table = 1, .rows = 100, .dim = 4}};
    cpr_store *store = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    cpr_part_spec full = tu_part("t", 0, 1, 1, CPR_KIND_FULL, both, 2);
    cpr_part_spec delta = tu_part("t", 0, 1, 2, CPR_KIND_DELTA, &both[1], 1);
    tu_write_part_ok(store, &full, 0, 10);
    tu_write_part_ok(store, &delta, 0, 10);
    size_t counts[2];
    count_tables(store, counts);
    assert_int_equal(counts[0], 10);
    assert_int_equal(counts[1], 10);
    cpr_gc_report rep;
    assert_status(CPR_OK, cpr_store_gc(store, "t", 1, &rep));
    assert_int_equal(rep.floor, 2);
    assert_int_equal(rep.parts_removed, 1);
    for (int reopen = 0; reopen < 2; reopen++) {
        count_tables(store, counts);
        assert_int_equal(counts[0], 10);
        assert_int_equal(counts[1], 10);
        cpr_store_close(store);
        assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    }
    /* The table's shape is still the job's: a part may not change it. */
    const cpr_table_schema wider = {.table = 0, .rows = 100, .dim = 8};
    cpr_part_spec bad = tu_part("t", 0, 1, 3, CPR_KIND_FULL, &wider, 1);
    assert_status(CPR_INVALID_ARGUMENT, cpr_store_begin(store, &bad));
    cpr_store_close(store);
    tu_rmtree(dir);
    free(dir);
}

/* A store that holds only some of a resharded job's shards (a ckptd node
 * among several): none of its parts is at the floor a client gives it, so
 * after retention the state as of the floor is in the folds alone. A
 * restore as of the floor still returns it (it said CPR_NOT_FOUND, and a
 * client over several nodes took the node for one without the job). */
static void test_gc_floor_state_in_folds_alone(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention-folds-alone");
    const cpr_table_schema t = {.table = 3, .rows = 100, .dim = 3};
    cpr_store *store = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    struct { uint32_t shard, num_shards; uint64_t ckpt; cpr_kind kind; uint64_t first, n; }
    w[] = {{1, 3, 6, CPR_KIND_FULL, 0, 20},   {1, 3, 7, CPR_KIND_DELTA, 0, 5},
           {2, 3, 7, CPR_KIND_PRIORITY, 20, 10}, {1, 6, 11, CPR_KIND_DELTA, 0, 3},
           {2, 6, 11, CPR_KIND_FULL, 20, 20}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        cpr_part_spec spec = tu_part("f", w[i].shard, w[i].num_shards, w[i].ckpt, w[i].kind,
                                     &t, 1);
        tu_write_part_ok(store, &spec, w[i].first, w[i].n);
    }
    tu_rows before[2], after;
    cpr_restore_result res;
    for (int k = 0; k < 2; k++) {
        cpr_restore_query q = {.job = "f", .as_of = k ? 11 : 8};
        assert_status(CPR_OK, tu_restore(store, &q, &before[k], &res));
    }
    assert_int_equal(before[0].n, 30);
    cpr_gc_report rep;
    assert_status(CPR_OK, cpr_store_gc_floor(store, "f", 8, &rep));
    assert_int_equal(rep.floor, 8);
    assert_int_equal(rep.parts_removed, 3);
    for (int k = 0; k < 2; k++) {
        cpr_restore_query q = {.job = "f", .as_of = k ? 11 : 8};
        assert_status(CPR_OK, tu_restore(store, &q, &after, &res));
        assert_int_equal(res.as_of, k ? 11 : 8);
        assert_int_equal(after.n, before[k].n);
        for (size_t i = 0; i < after.n; i++) {
            assert_int_equal(after.rows[i].id, before[k].rows[i].id);
            assert_memory_equal(after.rows[i].values, before[k].rows[i].values,
                                t.dim * sizeof(float));
        }
        tu_rows_free(&after);
        tu_rows_free(&before[k]);
    }
    cpr_store_close(store);
    tu_rmtree(dir);
    free(dir);
}

/* cpr_store_gc_floor_cut: a store whose parts are all older than a cut the
 * client computed over every store takes it (cpr_store_gc_floor refuses
 * it): its shard is folded, its part goes, every row stays as the states at
 * or above the floor read it, and below the floor is refused. */
static void test_gc_floor_cut_above_every_part(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention-floor-cut");
    const cpr_table_schema t = {.table = 2, .rows = 100, .dim = 4, .state_dim = 1};
    cpr_store *store = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    cpr_part_spec full = tu_part("c", 1, 2, 1, CPR_KIND_FULL, &t, 1);
    tu_write_part_ok(store, &full, 0, 40);
    tu_rows before, after;
    cpr_restore_result res;
    cpr_restore_query q = {.job = "c", .as_of = 5};
    assert_status(CPR_OK, tu_restore(store, &q, &before, &res));
    cpr_gc_report rep;
    assert_status(CPR_FAILED_PRECONDITION, cpr_store_gc_floor(store, "c", 5, &rep));
    assert_status(CPR_OK, cpr_store_gc_floor_cut(store, "c", 5, &rep));
    assert_int_equal(rep.floor, 5);
    assert_int_equal(rep.parts_removed, 1);
    for (int reopen = 0; reopen < 2; reopen++) {
        assert_status(CPR_OK, tu_restore(store, &q, &after, &res));
        assert_int_equal(res.as_of, 5);
        assert_int_equal(after.n, before.n);
        for (size_t i = 0; i < after.n; i++) {
            assert_int_equal(after.rows[i].id, before.rows[i].id);
            assert_memory_equal(after.rows[i].values, before.rows[i].values,
                                (t.dim + t.state_dim) * sizeof(float));
        }
        tu_rows_free(&after);
        /* Only folds of the job are left: it is still listed and counted,
         * and List and the cut say where its state is. */
        char **names = NULL;
        size_t n_names = 0;
        assert_status(CPR_OK, cpr_store_list_jobs(store, &names, &n_names));
        assert_int_equal(n_names, 1);
        assert_string_equal(names[0], "c");
        cpr_names_free(names, n_names);
        cpr_store_stats stats;
        assert_status(CPR_OK, cpr_store_stats_get(store, &stats));
        assert_int_equal(stats.jobs, 1);
        cpr_part_info *infos = NULL;
        size_t n_infos = 0;
        assert_status(CPR_NOT_FOUND, cpr_store_list(store, "c", &infos, &n_infos));
        assert_non_null(strstr(cpr_errmsg(), "in folds"));
        uint64_t cut = 0;
        assert_status(CPR_NOT_FOUND, cpr_store_latest_cut(store, "c", &cut));
        assert_non_null(strstr(cpr_errmsg(), "only folds"));
        cpr_restore_query old = {.job = "c", .as_of = 1};
        assert_status(CPR_FAILED_PRECONDITION, tu_restore(store, &old, &after, &res));
        tu_rows_free(&after);
        cpr_store_close(store);
        assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    }
    tu_rows_free(&before);
    cpr_store_close(store);
    tu_rmtree(dir);
    free(dir);
}

/* Catalog C3: a job resharded so that shard 1 is outside the floor's cut
 * keeps a DELTA above the floor on a FULL below it. Retention folds shard 1
 * at the floor and removes the FULL; the DELTA stays consistent, and the
 * job's latest cut stays 3, after the store is opened again (the fold's
 * `base` vouches for the chain). Before, the reopen turned the DELTA
 * inconsistent and the latest cut went back to 2. */
static void test_gc_keeps_a_delta_on_a_folded_base(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-retention-delta-base");
    const cpr_table_schema t = {.table = 0, .rows = 100, .dim = 4};
    cpr_store *store = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    cpr_part_spec p[5] = {
        tu_part("r", 0, 2, 1, CPR_KIND_FULL, &t, 1), /* cut 1: two shards */
        tu_part("r", 1, 2, 1, CPR_KIND_FULL, &t, 1),
        tu_part("r", 0, 1, 2, CPR_KIND_FULL, &t, 1), /* cut 2: one shard */
        tu_part("r", 0, 2, 3, CPR_KIND_FULL, &t, 1), /* cut 3: two again, */
        tu_part("r", 1, 2, 3, CPR_KIND_DELTA, &t, 1), /* shard 1 a DELTA on 1 */
    };
    p[4].base = 1;
    for (size_t i = 0; i < 5; i++)
        tu_write_part_ok(store, &p[i], 10 * i, 10);
    cpr_gc_report rep;
    assert_status(CPR_OK, cpr_store_gc_floor(store, "r", 2, &rep));
    assert_int_equal(rep.parts_removed, 2);
    tu_rows before = {0}, after = {0};
    cpr_restore_query q = {.job = "r", .as_of = 3};
    assert_status(CPR_OK, tu_restore(store, &q, &before, NULL));
    for (int reopen = 0; reopen < 2; reopen++) {
        uint64_t cut = 0;
        assert_status(CPR_OK, cpr_store_latest_cut(store, "r", &cut));
        assert_int_equal(cut, 3);
        cpr_part_info *info = NULL;
        size_t n = 0;
        assert_status(CPR_OK, cpr_store_list(store, "r", &info, &n));
        int seen = 0;
        for (size_t i = 0; i < n; i++)
            if (info[i].shard == 1 && info[i].checkpoint == 3) {
                assert_true(info[i].consistent);
                seen = 1;
            }
        assert_true(seen);
        free(info);
        cpr_store_close(store);
        assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    }
    assert_status(CPR_OK, tu_restore(store, &q, &after, NULL));
    assert_rows_equal(&before, &after);
    assert_int_equal(after.n, 30); /* shard 0: its c3; shard 1: c1 (in the fold) and c3 */
    tu_rows_free(&before);
    tu_rows_free(&after);
    cpr_store_close(store);
    tu_rmtree(dir);
    free(dir);
}

/* The first segment file of job `job` under store `dir`, into out. */
static void first_segment(const char *dir, const char *job, char *out, size_t cap)
{
    char jdir[4200];
    snprintf(jdir, sizeof jdir, "%s/segments/j_%s", dir, job);
    DIR *d = opendir(jdir);
    assert_non_null(d);
    out[0] = '\0';
    for (struct dirent *e; !out[0] && (e = readdir(d)) != NULL;)
        if (strstr(e->d_name, ".seg")) {
            size_t a = strlen(jdir), b = strlen(e->d_name);
            assert_true(a + 1 + b < cap);
            memcpy(out, jdir, a);
            out[a] = '/';
            memcpy(out + a + 1, e->d_name, b + 1);
        }
    closedir(d);
    assert_true(out[0] != '\0');
}

/* Retention of every job: one whose fold fails (a damaged block) is
 * reported, by name, and the jobs after it still get their pass. (Local:
 * it damages a segment file.) */
static void test_gc_goes_on_past_a_failing_job(void **state)
{
    (void)state;
    if (cpr_test_rados_segments)
        skip();
    char *dir = tu_mkdtemp("cpr-retention-failing");
    const cpr_table_schema t = {.table = 0, .rows = 100, .dim = 4};
    cpr_store *store = NULL;
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    /* a: FULL then DELTA (retention folds, reading the FULL); b: two FULLs. */
    cpr_part_spec a1 = tu_part("a", 0, 1, 1, CPR_KIND_FULL, &t, 1);
    cpr_part_spec a2 = tu_part("a", 0, 1, 2, CPR_KIND_DELTA, &t, 1);
    cpr_part_spec b1 = tu_part("b", 0, 1, 1, CPR_KIND_FULL, &t, 1);
    cpr_part_spec b2 = tu_part("b", 0, 1, 2, CPR_KIND_FULL, &t, 1);
    tu_write_part_ok(store, &a1, 0, 30);
    char seg[4400];
    first_segment(dir, "a", seg, sizeof seg); /* a1's, before a2 has one */
    tu_write_part_ok(store, &a2, 0, 10);
    tu_write_part_ok(store, &b1, 0, 30);
    tu_write_part_ok(store, &b2, 0, 30);
    cpr_store_close(store);
    tu_flip_byte(seg, 200); /* inside the first block's rows */
    assert_status(CPR_OK, cpr_store_open(dir, &g_no_fold, &store));
    cpr_gc_report rep;
    assert_status(CPR_CORRUPT, cpr_store_gc(store, NULL, 1, &rep));
    assert_non_null(strstr(cpr_errmsg(), "job a"));
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_store_list(store, "b", &parts, &n));
    assert_int_equal(n, 1); /* b's pass ran: its cut at 1 went */
    assert_int_equal(parts[0].checkpoint, 2);
    free(parts);
    cpr_store_close(store);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gc_reclaims_crash_leftover),
        cmocka_unit_test(test_gc_sweeps_empty_staging),
        cmocka_unit_test(test_gc_keeps_unrecorded_blobs_until_open),
        cmocka_unit_test(test_gc_keep_two_then_one),
        cmocka_unit_test(test_gc_fewer_cuts_than_keep),
        cmocka_unit_test(test_gc_default_keep),
        cmocka_unit_test(test_gc_given_floor),
        cmocka_unit_test(test_gc_lazy),
        cmocka_unit_test(test_gc_during_restore),
        /* After the test that forks: with a RADOS store opened and closed
         * in this process before its fork, the parent's open after the
         * child's crash failed with ESHUTDOWN (its own new client fenced
         * with the child's), which a fresh process does not do. */
        cmocka_unit_test(test_gc_goes_on_past_a_failing_job),
        cmocka_unit_test(test_gc_fold_keeps_a_table_only_it_holds),
        cmocka_unit_test(test_gc_keeps_a_delta_on_a_folded_base),
        cmocka_unit_test(test_gc_floor_state_in_folds_alone),
        cmocka_unit_test(test_gc_floor_cut_above_every_part),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
