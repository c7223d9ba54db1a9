/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the read side of the checkpoint store API (cpr/store.h):
 * restore with table, range and modulo selection, as-of and consistent cuts,
 * list, verify and GC, and writers and readers running at once, each test in
 * a fresh store in its own temporary directory. Rows are filled with
 * tu_value/tu_state, so every restored float identifies the table, row and
 * checkpoint it came from and is checked bit for bit against the version the
 * query should resolve to. Every test runs twice: on a store reading its
 * segments with O_DIRECT (the default), and on one reading them through the
 * page cache (cpr_store_options.buffered_reads).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpr/crc32c.h"
#include "cpr/store.h"
#include "testutil.h"

static const cpr_table_schema one_table[1] = {{1, 1000, 4, 2}};
static const cpr_table_schema two_tables[2] = {{1, 1000, 4, 2}, {2, 500, 3, 0}};

/* ---- restore ----------------------------------------------------------- */

static void test_restore_unordered(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema *t1 = &two_tables[0], *t2 = &two_tables[1];
    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, two_tables, 2);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    uint64_t shuffled[6] = {7, 3, 499, 0, 250, 1};
    assert_int_equal(tu_put_rows(f->store, &spec.id, t2, shuffled, 6, 1), CPR_OK);
    for (int b = 9; b >= 0; b--) { /* batches going backwards, each reversed */
        uint64_t ids[10];
        for (int i = 0; i < 10; i++)
            ids[i] = (uint64_t)(b * 10 + 9 - i);
        assert_int_equal(tu_put_rows(f->store, &spec.id, t1, ids, 10, 1), CPR_OK);
    }
    assert_int_equal(cpr_store_commit(f->store, &spec.id, 106), CPR_OK);

    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    cpr_restore_result res;
    assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
    assert_int_equal(rows.n, 106);
    assert_int_equal(res.rows, 106);
    assert_int_equal(res.bytes, 100 * tu_row_bytes(t1) + 6 * tu_row_bytes(t2));
    tu_assert_rows(rows.rows, t1, 0, 1, 100, 1);
    const uint64_t sorted[6] = {0, 1, 3, 7, 250, 499};
    for (size_t i = 0; i < 6; i++)
        tu_assert_row(&rows.rows[100 + i], t2, sorted[i], 1);
    tu_rows_free(&rows);
}

static void test_restore_selection(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema three[3] = {{1, 1000, 4, 2}, {2, 500, 3, 0}, {3, 300, 2, 1}};
    const cpr_table_schema declared[3] = {three[2], three[0], three[1]};
    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, declared, 3);
    tu_write_part_ok(f->store, &spec, 0, 200);
    tu_rows rows;
    cpr_restore_result res;

    const uint32_t t31[2] = {3, 1};
    cpr_restore_query q = {.job = "j", .tables = t31, .n_tables = 2};
    assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
    assert_int_equal(rows.n, 400);
    tu_assert_rows(rows.rows, &three[0], 0, 1, 200, 1);
    tu_assert_rows(rows.rows + 200, &three[2], 0, 1, 200, 1);
    assert_int_equal(res.bytes, 200 * (tu_row_bytes(&three[0]) + tu_row_bytes(&three[2])));
    tu_rows_free(&rows);

    const uint32_t t2[1] = {2};
    const cpr_row_range ranges[3] = {{150, 400}, {10, 20}, {50, 53}};
    cpr_restore_query qr = {.job = "j", .tables = t2, .n_tables = 1,
                            .ranges = ranges, .n_ranges = 3};
    assert_int_equal(tu_restore(f->store, &qr, &rows, &res), CPR_OK);
    assert_int_equal(rows.n, 63);
    assert_int_equal(res.rows, 63);
    tu_assert_rows(rows.rows, &three[1], 10, 1, 10, 1);
    tu_assert_rows(rows.rows + 10, &three[1], 50, 1, 3, 1);
    tu_assert_rows(rows.rows + 13, &three[1], 150, 1, 50, 1);
    tu_rows_free(&rows);

    cpr_restore_query qm = {.job = "j", .tables = t2, .n_tables = 1,
                            .modulo = 4, .remainder = 1};
    assert_int_equal(tu_restore(f->store, &qm, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 50);
    tu_assert_rows(rows.rows, &three[1], 1, 4, 50, 1);
    tu_rows_free(&rows);

    /* Ranges, modulo and every table at once. */
    const cpr_row_range first40[1] = {{0, 40}};
    cpr_restore_query qa = {.job = "j", .ranges = first40, .n_ranges = 1,
                            .modulo = 8, .remainder = 3};
    assert_int_equal(tu_restore(f->store, &qa, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, 15);
    for (size_t t = 0; t < 3; t++)
        tu_assert_rows(rows.rows + 5 * t, &three[t], 3, 8, 5, 1);
    tu_rows_free(&rows);
}

/* Versions written by test_restore_as_of beyond the FULL at 1. */
static uint64_t version_as_of(uint64_t id, uint64_t as_of)
{
    static const struct { uint64_t id, ckpt; } newer[] = {
        {5, 2}, {6, 2}, {7, 2}, {40, 2}, {6, 3}, {10, 3}, {45, 3}, {0, 4},
    };
    uint64_t version = 1;
    for (size_t k = 0; k < sizeof newer / sizeof newer[0]; k++) {
        if (newer[k].id == id && newer[k].ckpt <= as_of && newer[k].ckpt > version)
            version = newer[k].ckpt;
    }
    return version;
}

static void test_restore_as_of(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    cpr_part_spec full = tu_part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    tu_write_part_ok(f->store, &full, 0, 50);
    uint64_t prio_ids[4] = {40, 5, 7, 6};
    cpr_part_spec prio = tu_part("j", 0, 1, 2, CPR_KIND_PRIORITY, one_table, 1);
    assert_int_equal(tu_write_part(f->store, &prio, prio_ids, 4, 4, 0, 1), CPR_OK);
    uint64_t delta_ids[3] = {6, 10, 45};
    cpr_part_spec delta = tu_part("j", 0, 1, 3, CPR_KIND_DELTA, one_table, 1);
    delta.base = 1;
    assert_int_equal(tu_write_part(f->store, &delta, delta_ids, 3, 2, 0, 1), CPR_OK);
    uint64_t late_ids[1] = {0};
    cpr_part_spec late = tu_part("j", 0, 1, 4, CPR_KIND_PRIORITY, one_table, 1);
    assert_int_equal(tu_write_part(f->store, &late, late_ids, 1, 1, 0, 1), CPR_OK);

    uint64_t cut = 0;
    assert_int_equal(cpr_store_latest_cut(f->store, "j", &cut), CPR_OK);
    assert_int_equal(cut, 3);

    /* {as_of asked, consistent, resolved id} */
    const uint64_t cases[][3] = {{1, 0, 1}, {2, 0, 2}, {3, 0, 3}, {4, 0, 4},
                                 {0, 0, 4}, {0, 1, 3}, {1, 1, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tu_rows rows;
        cpr_restore_query q = {.job = "j", .as_of = cases[c][0],
                               .consistent = (int)cases[c][1]};
        cpr_restore_result res;
        assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
        assert_int_equal(res.as_of, cases[c][2]);
        assert_int_equal(rows.n, 50);
        for (uint64_t id = 0; id < 50; id++)
            tu_assert_row(&rows.rows[id], t, id, version_as_of(id, cases[c][2]));
        tu_rows_free(&rows);
    }
}

/* The largest checkpoint id is a checkpoint like any other: committed,
 * listed, restored (on RADOS each of these reloads the job from the pool,
 * whose rebuild once kept that part and aborted on finding it twice). */
static void test_largest_checkpoint_id(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_spec full = tu_part("max", 0, 1, UINT64_MAX - 1, CPR_KIND_FULL, one_table, 1);
    tu_write_part_ok(f->store, &full, 0, 20);
    cpr_part_spec last = tu_part("max", 0, 1, UINT64_MAX, CPR_KIND_FULL, one_table, 1);
    tu_write_part_ok(f->store, &last, 0, 30);
    for (int round = 0; round < 2; round++) {
        tu_rows rows;
        cpr_restore_query q = {.job = "max"};
        cpr_restore_result res;
        assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
        assert_true(res.as_of == UINT64_MAX);
        assert_int_equal(rows.n, 30);
        tu_rows_free(&rows);
        cpr_part_info *parts = NULL;
        size_t n = 0;
        assert_int_equal(cpr_store_list(f->store, "max", &parts, &n), CPR_OK);
        assert_int_equal(n, 2);
        assert_true(parts[1].checkpoint == UINT64_MAX);
        free(parts);
    }
}

/* Rows 0 and 1 get a version in each of 20 parts: more versions than the
 * restore steps over before it seeks. */
static void test_restore_many_versions(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    cpr_part_spec full = tu_part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    tu_write_part_ok(f->store, &full, 0, 10);
    for (uint64_t ckpt = 2; ckpt <= 21; ckpt++) {
        cpr_part_spec prio = tu_part("j", 0, 1, ckpt, CPR_KIND_PRIORITY, one_table, 1);
        tu_write_part_ok(f->store, &prio, 0, 2);
    }
    const uint64_t as_ofs[4] = {0, 21, 10, 1};
    for (size_t c = 0; c < 4; c++) {
        uint64_t hot = as_ofs[c] ? as_ofs[c] : 21;
        tu_rows rows;
        cpr_restore_query q = {.job = "j", .as_of = as_ofs[c], .batch_rows = 3};
        assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
        assert_int_equal(rows.n, 10);
        tu_assert_rows(rows.rows, t, 0, 1, 2, hot);
        tu_assert_rows(rows.rows + 2, t, 2, 1, 8, 1);
        tu_rows_free(&rows);
        q.modulo = 2;
        q.remainder = 1;
        assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
        assert_int_equal(rows.n, 5);
        tu_assert_row(&rows.rows[0], t, 1, hot);
        tu_assert_rows(rows.rows + 1, t, 3, 2, 4, 1);
        tu_rows_free(&rows);
    }
}

/* Watches batch sizes and order, and stops on request. */
typedef struct batch_probe {
    size_t calls, max_n, rows;
    size_t stop_at_call;     /* 1-based call that returns stop_status; 0: none */
    cpr_status stop_status;
    uint32_t last_table;
    uint64_t last_id;
    int out_of_order;
} batch_probe;

static cpr_status probe_batch(void *ctx, const cpr_row_batch *batch)
{
    batch_probe *p = ctx;
    p->calls++;
    if (batch->n > p->max_n)
        p->max_n = batch->n;
    for (size_t i = 0; i < batch->n; i++) {
        int before = batch->table < p->last_table ||
                     (batch->table == p->last_table && batch->ids[i] <= p->last_id);
        if (p->rows > 0 && before)
            p->out_of_order++;
        p->last_table = batch->table;
        p->last_id = batch->ids[i];
        p->rows++;
    }
    if (cpr_crc32c_rows(batch->ids, batch->n, batch->values, batch->values_count,
                        batch->state, batch->state_count) != batch->crc32c)
        p->out_of_order++;
    return p->calls == p->stop_at_call ? p->stop_status : CPR_OK;
}

static void test_restore_batches_and_errors(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, two_tables, 2);
    tu_write_part_ok(f->store, &spec, 0, 300);

    batch_probe p = {0};
    cpr_restore_query q = {.job = "j", .batch_rows = 7};
    cpr_restore_result res;
    assert_int_equal(cpr_store_restore(f->store, &q, probe_batch, &p, &res), CPR_OK);
    assert_int_equal(p.rows, 600);
    assert_int_equal(res.rows, 600);
    assert_true(p.max_n <= 7);
    assert_true(p.calls >= 600 / 7);
    assert_int_equal(p.out_of_order, 0);

    batch_probe all = {0};
    q.batch_rows = 0; /* 4096 */
    assert_int_equal(cpr_store_restore(f->store, &q, probe_batch, &all, NULL), CPR_OK);
    assert_int_equal(all.rows, 600);
    assert_true(all.max_n <= 4096);
    assert_int_equal(all.out_of_order, 0);

    batch_probe stop = {.stop_at_call = 3, .stop_status = CPR_UNAVAILABLE};
    q.batch_rows = 10;
    assert_int_equal(cpr_store_restore(f->store, &q, probe_batch, &stop, &res),
                     CPR_UNAVAILABLE);
    assert_int_equal(stop.calls, 3); /* nothing after the refusal */
    assert_true(stop.rows <= 30);

    cpr_restore_query unknown = {.job = "nojob"};
    batch_probe none = {0};
    assert_int_equal(cpr_store_restore(f->store, &unknown, probe_batch, &none, NULL),
                     CPR_NOT_FOUND);
    unknown.consistent = 1;
    assert_int_equal(cpr_store_restore(f->store, &unknown, probe_batch, &none, NULL),
                     CPR_NOT_FOUND);
    assert_int_equal(none.calls, 0);
}

static void assert_cut(cpr_store *s, const char *job, cpr_status want, uint64_t cut)
{
    uint64_t got = 12345;
    assert_int_equal(cpr_store_latest_cut(s, job, &got), want);
    assert_int_equal(got, want == CPR_OK ? cut : 12345);
    /* cpr_store_list_cut: the same list, and the cut (0: none) of one view */
    cpr_part_info *listed = NULL, *with_cut = NULL;
    size_t n_listed = 0, n_with_cut = 0;
    uint64_t both = 12345;
    cpr_status ls = cpr_store_list(s, job, &listed, &n_listed);
    assert_int_equal(cpr_store_list_cut(s, job, &with_cut, &n_with_cut, &both), ls);
    if (ls == CPR_OK) {
        assert_int_equal(n_with_cut, n_listed);
        for (size_t i = 0; i < n_listed; i++) {
            assert_int_equal(with_cut[i].checkpoint, listed[i].checkpoint);
            assert_int_equal(with_cut[i].shard, listed[i].shard);
        }
        assert_int_equal(both, want == CPR_OK ? cut : 0);
    } else {
        assert_int_equal(both, 12345); /* untouched on failure */
    }
    free(listed);
    free(with_cut);
}

/* The parts test_latest_cut writes, as cpr_store_list must report them. */
static void assert_cut_parts(cpr_store *s)
{
    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(s, "j", &info, &n), CPR_OK);
    assert_int_equal(n, 7);
    const struct { uint64_t ckpt; uint32_t shard; cpr_kind kind; uint64_t base;
                   int consistent; } want[7] = {
        {1, 0, CPR_KIND_FULL, 0, 1}, {1, 1, CPR_KIND_FULL, 0, 1},
        {2, 0, CPR_KIND_PRIORITY, 0, 0}, {2, 1, CPR_KIND_PRIORITY, 0, 0},
        {3, 0, CPR_KIND_DELTA, 1, 1}, {3, 1, CPR_KIND_DELTA, 1, 1},
        {4, 0, CPR_KIND_DELTA, 3, 1},
    };
    for (size_t i = 0; i < 7; i++) {
        assert_int_equal(info[i].checkpoint, want[i].ckpt);
        assert_int_equal(info[i].shard, want[i].shard);
        assert_int_equal(info[i].kind, want[i].kind);
        assert_int_equal(info[i].base, want[i].base);
        assert_int_equal(info[i].consistent, want[i].consistent);
        assert_int_equal(info[i].committed, 1);
        assert_int_equal(info[i].num_shards, 2);
    }
    free(info);
}

static void test_latest_cut(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_spec spec;
    assert_cut(f->store, "j", CPR_NOT_FOUND, 0);

    spec = tu_part("j", 0, 2, 1, CPR_KIND_FULL, one_table, 1);
    tu_write_part_ok(f->store, &spec, 0, 5);
    assert_cut(f->store, "j", CPR_NOT_FOUND, 0);
    batch_probe none = {0};
    cpr_restore_query q = {.job = "j", .consistent = 1};
    assert_int_equal(cpr_store_restore(f->store, &q, probe_batch, &none, NULL),
                     CPR_NOT_FOUND);
    assert_int_equal(none.calls, 0);

    spec = tu_part("j", 1, 2, 1, CPR_KIND_FULL, one_table, 1);
    tu_write_part_ok(f->store, &spec, 5, 5);
    assert_cut(f->store, "j", CPR_OK, 1);
    for (uint32_t s = 0; s < 2; s++) {
        spec = tu_part("j", s, 2, 2, CPR_KIND_PRIORITY, one_table, 1);
        tu_write_part_ok(f->store, &spec, s * 5, 2);
    }
    assert_cut(f->store, "j", CPR_OK, 1);
    for (uint32_t s = 0; s < 2; s++) {
        spec = tu_part("j", s, 2, 3, CPR_KIND_DELTA, one_table, 1);
        tu_write_part_ok(f->store, &spec, s * 5 + 1, 2);
    }
    assert_cut(f->store, "j", CPR_OK, 3);
    spec = tu_part("j", 0, 2, 4, CPR_KIND_DELTA, one_table, 1);
    tu_write_part_ok(f->store, &spec, 4, 1);
    assert_cut(f->store, "j", CPR_OK, 3);

    /* The same answers after the catalog is rebuilt from disk. */
    for (int reopened = 0; reopened <= 1; reopened++) {
        if (reopened) {
            cpr_store_close(f->store);
            f->store = NULL;
            assert_int_equal(cpr_store_open(f->path, NULL, &f->store), CPR_OK);
            assert_cut(f->store, "j", CPR_OK, 3);
        }
        assert_cut_parts(f->store);
        tu_rows rows;
        cpr_restore_result res;
        assert_int_equal(tu_restore(f->store, &q, &rows, &res), CPR_OK);
        assert_int_equal(res.as_of, 3);
        assert_int_equal(rows.n, 10);
        const uint64_t version[10] = {2, 3, 3, 1, 1, 2, 3, 3, 1, 1};
        for (uint64_t id = 0; id < 10; id++)
            tu_assert_row(&rows.rows[id], &one_table[0], id, version[id]);
        tu_rows_free(&rows);
    }

    /* An explicit base must be a committed FULL/DELTA of the shard. */
    spec = tu_part("j", 1, 2, 5, CPR_KIND_DELTA, one_table, 1);
    spec.base = 4; /* only shard 0 has 4 */
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);
    spec.base = 2; /* PRIORITY */
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_FAILED_PRECONDITION);
    spec.base = 3;
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
}

/* ---- verify, gc, concurrency ------------------------------------------- */

static void count_problem(void *ctx, const char *what, const char *where)
{
    (void)what;
    (void)where;
    (*(int *)ctx)++;
}

/* Versions written by test_verify_and_gc: FULL 1 of rows 0-19, DELTA 2 of
 * rows 0-4, DELTA 3 of rows 3-7. */
static uint64_t chain_version(uint64_t id, uint64_t as_of)
{
    if (as_of >= 3 && id >= 3 && id <= 7)
        return 3;
    return as_of >= 2 && id <= 4 ? 2 : 1;
}

static void assert_chain_as_of(cpr_store *s, uint64_t as_of)
{
    tu_rows rows;
    cpr_restore_query q = {.job = "j", .as_of = as_of};
    cpr_restore_result res;
    assert_int_equal(tu_restore(s, &q, &rows, &res), CPR_OK);
    assert_int_equal(res.as_of, as_of);
    assert_int_equal(rows.n, 40);
    for (size_t t = 0; t < 2; t++)
        for (uint64_t id = 0; id < 20; id++)
            tu_assert_row(&rows.rows[t * 20 + id], &two_tables[t], id,
                       chain_version(id, as_of));
    tu_rows_free(&rows);
}

static void test_verify_and_gc(void **state)
{
    tu_store_fixture *f = *state;
    const uint64_t firsts[3] = {0, 0, 3};
    const size_t counts[3] = {20, 5, 5};
    for (uint64_t ckpt = 1; ckpt <= 3; ckpt++) {
        cpr_part_spec spec = tu_part("j", 0, 1, ckpt,
                                     ckpt == 1 ? CPR_KIND_FULL : CPR_KIND_DELTA,
                                     two_tables, 2);
        uint64_t ids[20];
        tu_iota(ids, firsts[ckpt - 1], counts[ckpt - 1]);
        assert_int_equal(tu_write_part(f->store, &spec, ids, counts[ckpt - 1], 8,
                                       ckpt < 3 ? 3000 : 0, 1), CPR_OK);
    }
    int problems = 0;
    cpr_verify_report vr;
    assert_int_equal(cpr_store_verify(f->store, "j", count_problem, &problems, &vr),
                     CPR_OK);
    assert_int_equal(problems, 0);
    assert_int_equal(vr.problems, 0);
    assert_int_equal(vr.rows_checked, 2 * (20 + 5 + 5));
    assert_int_equal(vr.blobs_checked, 2);
    assert_true(vr.bytes_checked >= 2 * 3000);
    assert_int_equal(cpr_store_verify(f->store, NULL, NULL, NULL, NULL), CPR_OK);

    /* Default retention (2 cuts) keeps states 2 and 3; versions 1 of rows
     * 0-4 (both tables) are needed by neither. */
    cpr_gc_report gr;
    assert_int_equal(cpr_store_gc(f->store, "j", 0, &gr), CPR_OK);
    assert_int_equal(gr.floor, 2);
    assert_int_equal(gr.versions_removed, 10);
    assert_int_equal(gr.uncommitted_removed, 0);
    assert_chain_as_of(f->store, 2);
    assert_chain_as_of(f->store, 3);
    /* keep=1: state 3 only; versions 2 of rows 3-4 and 1 of rows 5-7 go. */
    assert_int_equal(cpr_store_gc(f->store, NULL, 1, &gr), CPR_OK);
    assert_int_equal(gr.floor, 3);
    assert_int_equal(gr.versions_removed, 10);

    for (int reopened = 0; reopened <= 1; reopened++) {
        if (reopened) {
            cpr_store_close(f->store);
            f->store = NULL;
            assert_int_equal(cpr_store_open(f->path, NULL, &f->store), CPR_OK);
        }
        assert_cut(f->store, "j", CPR_OK, 3);
        cpr_part_info *info = NULL;
        size_t n = 0;
        assert_int_equal(cpr_store_list(f->store, "j", &info, &n), CPR_OK);
        assert_int_equal(n, 1);
        assert_int_equal(info[0].checkpoint, 3);
        assert_int_equal(info[0].consistent, 1);
        free(info);
        assert_chain_as_of(f->store, 3);
        tu_rows rows;
        cpr_restore_query old = {.job = "j", .as_of = 2};
        assert_int_equal(tu_restore(f->store, &old, &rows, NULL), CPR_FAILED_PRECONDITION);
        tu_rows_free(&rows);
        cpr_part_id id1 = {"j", 0, 1};
        tu_blob b = {0};
        assert_int_equal(cpr_store_read_blob(f->store, &id1, "dense", NULL,
                                             tu_blob_collect, &b), CPR_NOT_FOUND);
    }
}

enum { N_THREADS = 8, SHARD_ROWS = 50, THREAD_CKPTS = 3, THREAD_BLOB = 5000 };

typedef struct shard_writer {
    cpr_store *store;
    uint32_t shard;
    cpr_status st;
} shard_writer;

/* No cmocka asserts here: they are not thread-safe. */
static void *write_shard(void *arg)
{
    shard_writer *w = arg;
    uint64_t ids[SHARD_ROWS];
    tu_iota(ids, (uint64_t)w->shard * SHARD_ROWS, SHARD_ROWS);
    w->st = CPR_OK;
    for (uint64_t ckpt = 1; w->st == CPR_OK && ckpt <= THREAD_CKPTS; ckpt++) {
        cpr_part_spec spec = tu_part("conc", w->shard, N_THREADS, ckpt, CPR_KIND_FULL,
                                  two_tables, 2);
        w->st = tu_write_part(w->store, &spec, ids, SHARD_ROWS, 16, THREAD_BLOB, 1);
    }
    return NULL;
}

/* A restore running while shards commit: every row delivered must be an
 * exact copy of one committed version, none newer than the resolved id. */
typedef struct shard_reader {
    cpr_store *store;
    atomic_int *writers_done;
    uint64_t restores, rows, bad_rows;
    uint64_t newest_seen;   /* newest version seen in the current restore */
    cpr_status bad_status;  /* first unexpected status; CPR_OK if none */
} shard_reader;

static int row_is_version(const cpr_table_schema *t, uint64_t id, const float *values,
                          const float *state_values, uint64_t ckpt)
{
    for (uint32_t i = 0; i < t->dim; i++)
        if (tu_float_bits(values[i]) != tu_float_bits(tu_value(t->table, id, ckpt, i)))
            return 0;
    for (uint32_t i = 0; i < t->state_dim; i++)
        if (tu_float_bits(state_values[i]) != tu_float_bits(tu_state(t->table, id, ckpt, i)))
            return 0;
    return 1;
}

static cpr_status check_any_version(void *ctx, const cpr_row_batch *batch)
{
    shard_reader *r = ctx;
    const cpr_table_schema *t = &two_tables[batch->table == 1 ? 0 : 1];
    if (batch->values_count != batch->n * t->dim ||
        batch->state_count != batch->n * t->state_dim) {
        r->bad_rows += batch->n;
        return CPR_OK;
    }
    for (size_t i = 0; i < batch->n; i++) {
        uint64_t version = 0;
        for (uint64_t c = 1; !version && c <= THREAD_CKPTS; c++)
            if (row_is_version(t, batch->ids[i], batch->values + i * t->dim,
                               t->state_dim ? batch->state + i * t->state_dim : NULL, c))
                version = c;
        r->bad_rows += version == 0;
        if (version > r->newest_seen)
            r->newest_seen = version;
        r->rows++;
    }
    return CPR_OK;
}

static void *read_while_writing(void *arg)
{
    shard_reader *r = arg;
    int last = 0;
    while (!last) {
        last = atomic_load(r->writers_done); /* one more pass after the end */
        cpr_restore_query q = {.job = "conc", .batch_rows = 37};
        cpr_restore_result res = {0};
        r->newest_seen = 0;
        cpr_status st = cpr_store_restore(r->store, &q, check_any_version, r, &res);
        if (st == CPR_OK && r->newest_seen > res.as_of)
            r->bad_rows++;
        if (st != CPR_OK && st != CPR_NOT_FOUND && r->bad_status == CPR_OK)
            r->bad_status = st;
        cpr_part_info *info = NULL;
        size_t n = 0;
        st = cpr_store_list(r->store, "conc", &info, &n);
        if (st != CPR_OK && st != CPR_NOT_FOUND && r->bad_status == CPR_OK)
            r->bad_status = st;
        free(info);
        r->restores++;
    }
    return NULL;
}

static void test_concurrent_shards(void **state)
{
    tu_store_fixture *f = *state;
    enum { N_READERS = 2 };
    pthread_t threads[N_THREADS], reader_threads[N_READERS];
    shard_writer writers[N_THREADS];
    shard_reader readers[N_READERS];
    atomic_int writers_done = 0;
    for (int i = 0; i < N_READERS; i++) {
        readers[i] = (shard_reader){.store = f->store, .writers_done = &writers_done};
        assert_int_equal(pthread_create(&reader_threads[i], NULL, read_while_writing,
                                        &readers[i]), 0);
    }
    for (uint32_t s = 0; s < N_THREADS; s++) {
        writers[s] = (shard_writer){.store = f->store, .shard = s, .st = CPR_INTERNAL};
        assert_int_equal(pthread_create(&threads[s], NULL, write_shard, &writers[s]), 0);
    }
    for (uint32_t s = 0; s < N_THREADS; s++)
        assert_int_equal(pthread_join(threads[s], NULL), 0);
    atomic_store(&writers_done, 1);
    for (int i = 0; i < N_READERS; i++) {
        assert_int_equal(pthread_join(reader_threads[i], NULL), 0);
        assert_int_equal(readers[i].bad_status, CPR_OK);
        assert_int_equal(readers[i].bad_rows, 0);
        assert_true(readers[i].restores >= 1);
    }
    for (uint32_t s = 0; s < N_THREADS; s++)
        assert_int_equal(writers[s].st, CPR_OK);
    assert_cut(f->store, "conc", CPR_OK, THREAD_CKPTS);
    cpr_part_info *info = NULL;
    size_t n = 0;
    assert_int_equal(cpr_store_list(f->store, "conc", &info, &n), CPR_OK);
    assert_int_equal(n, N_THREADS * THREAD_CKPTS);
    free(info);

    for (uint32_t s = 0; s < N_THREADS; s++) {
        for (uint64_t as_of = 2; as_of <= THREAD_CKPTS; as_of++) {
            cpr_row_range range = {s * SHARD_ROWS, (s + 1) * SHARD_ROWS};
            cpr_restore_query q = {.job = "conc", .as_of = as_of,
                                   .ranges = &range, .n_ranges = 1};
            tu_rows rows;
            assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
            assert_int_equal(rows.n, 2 * SHARD_ROWS);
            tu_assert_rows(rows.rows, &two_tables[0], range.begin, 1, SHARD_ROWS, as_of);
            tu_assert_rows(rows.rows + SHARD_ROWS, &two_tables[1], range.begin, 1,
                        SHARD_ROWS, as_of);
            tu_rows_free(&rows);
        }
        cpr_part_id id = {"conc", s, THREAD_CKPTS};
        tu_assert_blob(f->store, &id, "dense", THREAD_BLOB);
    }
}

/* Several threads appending disjoint rows to one part at once. */
typedef struct part_putter {
    cpr_store *store;
    const cpr_part_id *id;
    uint64_t first;        /* rows first, first + 4, first + 8, ... */
    cpr_status st;
} part_putter;

enum { PUTTERS = 4, ROWS_PER_PUTTER = 200, PUT_BATCH = 10 };

static void *put_interleaved(void *arg)
{
    part_putter *p = arg;
    const cpr_table_schema *t = &one_table[0];
    float values[PUT_BATCH * 4], state_values[PUT_BATCH * 2];
    uint64_t ids[PUT_BATCH];
    p->st = CPR_OK;
    for (size_t off = 0; p->st == CPR_OK && off < ROWS_PER_PUTTER; off += PUT_BATCH) {
        for (size_t i = 0; i < PUT_BATCH; i++)
            ids[i] = p->first + (off + i) * PUTTERS;
        cpr_row_batch batch;
        tu_fill_batch(&batch, t->table, ids, PUT_BATCH, t->dim, t->state_dim, 1,
                      values, state_values);
        p->st = cpr_store_put_rows(p->store, p->id, &batch);
    }
    return NULL;
}

static void test_concurrent_same_part(void **state)
{
    tu_store_fixture *f = *state;
    cpr_part_spec spec = tu_part("j", 0, 1, 1, CPR_KIND_FULL, one_table, 1);
    assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
    pthread_t threads[PUTTERS];
    part_putter putters[PUTTERS];
    for (int i = 0; i < PUTTERS; i++) {
        putters[i] = (part_putter){.store = f->store, .id = &spec.id, .first = (uint64_t)i,
                                   .st = CPR_INTERNAL};
        assert_int_equal(pthread_create(&threads[i], NULL, put_interleaved, &putters[i]), 0);
    }
    for (int i = 0; i < PUTTERS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        assert_int_equal(putters[i].st, CPR_OK);
    }
    assert_int_equal(cpr_store_commit(f->store, &spec.id, PUTTERS * ROWS_PER_PUTTER),
                     CPR_OK);
    tu_rows rows;
    cpr_restore_query q = {.job = "j"};
    assert_int_equal(tu_restore(f->store, &q, &rows, NULL), CPR_OK);
    assert_int_equal(rows.n, PUTTERS * ROWS_PER_PUTTER);
    tu_assert_rows(rows.rows, &one_table[0], 0, 1, rows.n, 1);
    tu_rows_free(&rows);
}

/* Without batch_rows, a batch stays near 3 MiB however wide the rows, so
 * that ckptd's restore messages fit gRPC's usual 4 MiB limit. */
typedef struct batch_sizes {
    size_t batches, rows, largest_bytes;
} batch_sizes;

static cpr_status measure_batch(void *ctx, const cpr_row_batch *b)
{
    batch_sizes *m = ctx;
    size_t bytes = b->n * 8 + (b->values_count + b->state_count) * 4;
    m->batches++;
    m->rows += b->n;
    m->largest_bytes = bytes > m->largest_bytes ? bytes : m->largest_bytes;
    return CPR_OK;
}

static void test_restore_default_batch_bytes(void **state)
{
    tu_store_fixture *f = *state;
    static const cpr_table_schema wide[] = {{.table = 7, .rows = 2000, .dim = 1000, .state_dim = 1}};
    cpr_part_spec spec = tu_part("wide", 0, 1, 1, CPR_KIND_FULL, wide, 1);
    tu_write_part_ok(f->store, &spec, 0, 2000);
    batch_sizes m = {0};
    cpr_restore_query q = {.job = "wide"};
    assert_int_equal(cpr_store_restore(f->store, &q, measure_batch, &m, NULL), CPR_OK);
    assert_int_equal(m.rows, 2000);
    assert_true(m.largest_bytes <= (3u << 20));
    assert_true(m.batches >= 3); /* 2000 rows of 4012 bytes do not fit in one */
}

/* ---- the merge against a reference ---------------------------------------- */

#define MODEL_ROWS 3000
#define MODEL_PARTS 6 /* FULL at 1, PRIORITY at 2..6 */
static const cpr_table_schema model_table[1] = {{1, MODEL_ROWS, 4, 2}};

static uint64_t model_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Put ids[0..n) of checkpoint `ckpt` in 1-4 blocks of random sizes. */
static void model_put(cpr_store *st, const cpr_part_id *id, const uint64_t *ids, size_t n,
                      uint64_t *rng)
{
    size_t at = 0;
    while (at < n) {
        size_t take = n - at;
        if (take > 8 && model_rand(rng) % 2)
            take = 1 + model_rand(rng) % (take - 1);
        tu_batch b;
        tu_batch_make(&b, &model_table[0], ids + at, take, id->checkpoint);
        assert_int_equal(cpr_store_put_rows(st, id, &b.batch), CPR_OK);
        tu_batch_free(&b);
        at += take;
    }
}

/* A FULL and five PRIORITY parts of random density and random block
 * splits; restores of random as-of, ranges and modulo must give each
 * selected row's newest version, in order (restore.c M1, M5). */
static void test_restore_matches_model(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema *t = &model_table[0];
    static uint8_t wrote[MODEL_PARTS + 1][MODEL_ROWS];
    memset(wrote, 0, sizeof wrote);
    uint64_t rng = 0x9e3779b97f4a7c15ull, *ids = malloc(MODEL_ROWS * sizeof *ids);
    assert_non_null(ids);
    for (uint64_t ckpt = 1; ckpt <= MODEL_PARTS; ckpt++) {
        cpr_part_spec spec = tu_part("m", 0, 1, ckpt, ckpt == 1 ? CPR_KIND_FULL
                                                                  : CPR_KIND_PRIORITY, t, 1);
        assert_int_equal(cpr_store_begin(f->store, &spec), CPR_OK);
        uint64_t one_in = ckpt == 1 ? 1 : 1 + model_rand(&rng) % 40;
        size_t n = 0;
        for (uint64_t r = 0; r < MODEL_ROWS; r++)
            if (model_rand(&rng) % one_in == 0) {
                ids[n++] = r;
                wrote[ckpt][r] = 1;
            }
        model_put(f->store, &spec.id, ids, n, &rng);
        assert_int_equal(cpr_store_commit(f->store, &spec.id, n), CPR_OK);
    }
    free(ids);
    for (int round = 0; round < 60; round++) {
        cpr_row_range ranges[2];
        cpr_restore_query q = {.job = "m", .as_of = model_rand(&rng) % (MODEL_PARTS + 1)};
        q.n_ranges = model_rand(&rng) % 3;
        for (size_t i = 0; i < q.n_ranges; i++) {
            uint64_t a = model_rand(&rng) % MODEL_ROWS, b = model_rand(&rng) % MODEL_ROWS;
            ranges[i] = (cpr_row_range){a < b ? a : b, (a < b ? b : a) + 1};
        }
        q.ranges = ranges;
        q.modulo = model_rand(&rng) % 4 == 0 ? 2 + model_rand(&rng) % 3 : 0;
        q.remainder = q.modulo ? model_rand(&rng) % q.modulo : 0;
        q.batch_rows = model_rand(&rng) % 2 ? 0 : 1 + model_rand(&rng) % 700;
        tu_rows got;
        assert_int_equal(tu_restore(f->store, &q, &got, NULL), CPR_OK);
        uint64_t as_of = q.as_of ? q.as_of : MODEL_PARTS;
        size_t k = 0;
        for (uint64_t r = 0; r < MODEL_ROWS; r++) {
            int in = q.n_ranges == 0;
            for (size_t i = 0; i < q.n_ranges; i++)
                in |= r >= ranges[i].begin && r < ranges[i].end;
            if (!in || (q.modulo && r % q.modulo != q.remainder))
                continue;
            uint64_t newest = 1;
            for (uint64_t c = 2; c <= as_of; c++)
                if (wrote[c][r])
                    newest = c;
            assert_true(k < got.n);
            tu_assert_row(&got.rows[k++], t, r, newest);
        }
        assert_int_equal(got.n, k);
        tu_rows_free(&got);
    }
}

/* ---- direct reads ------------------------------------------------------------ */

/* A restore's plan run by a reader of the store's storage (include/cpr/store.h):
 * the same rows as the store's own restore, and still after retention
 * dropped the planned part (restore.c M4: the segment waits out S8's grace,
 * in RADOS always, on a local disk once a plan was served). A local store's
 * reader is given its directory (direct.c D1). */
static void test_restore_plan_direct(void **state)
{
    tu_store_fixture *f = *state;
    const cpr_table_schema *t = &one_table[0];
    for (uint64_t ckpt = 1; ckpt <= 2; ckpt++) {
        cpr_part_spec full = tu_part("d", 0, 1, ckpt, CPR_KIND_FULL, one_table, 1);
        tu_write_part_ok(f->store, &full, 0, 600);
    }
    cpr_restore_query q = {.job = "d", .as_of = 1};
    void *plan = NULL;
    size_t len = 0;
    cpr_restore_result res = {0};
    const char *id = cpr_store_read_id(f->store), *shared = cpr_store_shared_id(f->store);
    assert_non_null(id);
    assert_int_equal(cpr_store_restore_plan(f->store, &q, &plan, &len, &res), CPR_OK);
    assert_int_equal(res.as_of, 1);
    assert_int_equal(res.rows, 0);
    /* retention drops checkpoint 1 after the plan was made */
    cpr_gc_report gc;
    assert_int_equal(cpr_store_gc_floor(f->store, "d", 2, &gc), CPR_OK);
    assert_int_equal(gc.parts_removed, 1);
    char pool[128] = "", ns[128] = "";
    cpr_store_options o = {0};
    if (shared) {
        /* "rados:FSID/POOL/NS": the reader names the same pool and namespace */
        assert_string_equal(id, shared);
        const char *p = strchr(id, '/');
        assert_non_null(p);
        assert_int_equal(sscanf(p + 1, "%127[^/]/%127s", pool, ns), 2);
        o = (cpr_store_options){.rados_pool = pool, .rados_namespace = ns,
                                .rados_conf = getenv("CPR_TEST_RADOS_CONF")};
    } else {
        assert_int_equal(strncmp(id, "local:", 6), 0);
        assert_int_equal(strlen(id), 6 + 32);
        o.local_dir = f->path;
    }
    cpr_store_reader *r = NULL;
    for (int buffered = 0; buffered < (shared ? 1 : 2); buffered++) { /* both read modes */
        o.buffered_reads = buffered;
        assert_int_equal(cpr_store_reader_open(&o, &r), CPR_OK);
        assert_string_equal(cpr_store_reader_id(r), id);
        tu_rows rows = {0};
        cpr_restore_result got = {0};
        assert_int_equal(cpr_store_reader_restore(r, plan, len, tu_collect, &rows, &got),
                         CPR_OK);
        assert_int_equal(got.as_of, 1);
        assert_int_equal(rows.n, 600);
        tu_assert_rows(rows.rows, t, 0, 1, 600, 1);
        tu_rows_free(&rows);
        if (!buffered && !shared)
            cpr_store_reader_close(r);
    }
    /* a damaged plan is refused, and nothing is delivered */
    ((unsigned char *)plan)[len / 2] ^= 0x10;
    tu_rows none = {0};
    assert_int_equal(cpr_store_reader_restore(r, plan, len, tu_collect, &none, NULL),
                     CPR_CORRUPT);
    assert_int_equal(none.n, 0);
    tu_rows_free(&none);
    if (!shared) { /* direct writes are RADOS's only */
        cpr_store_writer *w = NULL;
        assert_int_equal(cpr_store_writer_create(r, "d/x", &w), CPR_FAILED_PRECONDITION);
        assert_null(w);
    }
    cpr_store_reader_close(r);
    free(plan);
}

/* A local store's name (direct.c D1) is its directory's, kept across opens;
 * a reader needs exactly one store named, and a directory that holds one. */
static void test_local_reader_names(void **state)
{
    tu_store_fixture *f = *state;
    char id[64];
    if (cpr_store_shared_id(f->store))
        skip();
    snprintf(id, sizeof id, "%s", cpr_store_read_id(f->store));
    cpr_store_close(f->store);
    f->store = NULL;
    assert_int_equal(cpr_store_open(f->path, NULL, &f->store), CPR_OK);
    assert_string_equal(cpr_store_read_id(f->store), id);
    cpr_store_reader *r = NULL;
    cpr_store_options none = {0}, both = {.local_dir = f->path, .rados_pool = "p"};
    cpr_store_options not_a_store = {.local_dir = f->dir};
    assert_int_equal(cpr_store_reader_open(&none, &r), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_store_reader_open(&both, &r), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_store_reader_open(&not_a_store, &r), CPR_NOT_FOUND);
    assert_non_null(strstr(cpr_errmsg(), "store-id"));
    assert_null(r);
    /* a damaged name is reported to readers, not taken; the store's next
     * open writes a new one */
    char path[4200];
    snprintf(path, sizeof path, "%s/store-id", f->path);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("local:nothex\n", fp);
    fclose(fp);
    cpr_store_options here = {.local_dir = f->path};
    assert_int_equal(cpr_store_reader_open(&here, &r), CPR_CORRUPT);
    assert_null(r);
    cpr_store_close(f->store);
    assert_int_equal(cpr_store_open(f->path, NULL, &f->store), CPR_OK);
    assert_non_null(cpr_store_read_id(f->store));
    assert_string_not_equal(cpr_store_read_id(f->store), id);
    assert_int_equal(cpr_store_reader_open(&here, &r), CPR_OK);
    assert_string_equal(cpr_store_reader_id(r), cpr_store_read_id(f->store));
    cpr_store_reader_close(r);
    /* a name that cannot be written (a directory in its place): the store
     * opens and works, without direct reads */
    cpr_store_close(f->store);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(cpr_store_open(f->path, NULL, &f->store), CPR_OK);
    assert_null(cpr_store_read_id(f->store));
    cpr_restore_query q = {.job = "nothing"};
    void *plan = NULL;
    size_t len = 0;
    assert_int_equal(cpr_store_restore_plan(f->store, &q, &plan, &len, NULL),
                     CPR_FAILED_PRECONDITION);
    assert_null(plan);
    assert_int_equal(rmdir(path), 0);
}

/* S8 yields to the disk: a local store short of room (below the Begin floor,
 * here a reserve larger than any disk) removes a doomed segment at once,
 * planned or not; a direct reader of the old plan is told it is missing. */
static void test_plan_grace_yields_to_a_full_disk(void **state)
{
    tu_store_fixture *f = *state;
    if (cpr_store_shared_id(f->store))
        skip();
    for (uint64_t ckpt = 1; ckpt <= 2; ckpt++) {
        cpr_part_spec full = tu_part("g", 0, 1, ckpt, CPR_KIND_FULL, one_table, 1);
        tu_write_part_ok(f->store, &full, 0, 300);
    }
    cpr_store_close(f->store);
    cpr_store_options full_disk = {.min_free_bytes = UINT64_MAX / 4};
    assert_int_equal(cpr_store_open(f->path, &full_disk, &f->store), CPR_OK);
    cpr_restore_query q = {.job = "g", .as_of = 1};
    void *plan = NULL;
    size_t len = 0;
    assert_int_equal(cpr_store_restore_plan(f->store, &q, &plan, &len, NULL), CPR_OK);
    cpr_gc_report gc;
    assert_int_equal(cpr_store_gc_floor(f->store, "g", 2, &gc), CPR_OK);
    assert_int_equal(gc.parts_removed, 1);
    cpr_store_options o = {.local_dir = f->path};
    cpr_store_reader *r = NULL;
    assert_int_equal(cpr_store_reader_open(&o, &r), CPR_OK);
    tu_rows rows = {0};
    assert_int_equal(cpr_store_reader_restore(r, plan, len, tu_collect, &rows, NULL),
                     CPR_CORRUPT);
    assert_non_null(strstr(cpr_errmsg(), "missing"));
    assert_int_equal(rows.n, 0);
    tu_rows_free(&rows);
    cpr_store_reader_close(r);
    free(plan);
}

#define STORE_TESTS(setup)                                                                 \
    {                                                                                      \
        cmocka_unit_test_setup_teardown(test_restore_unordered, setup, tu_store_teardown),   \
        cmocka_unit_test_setup_teardown(test_restore_selection, setup, tu_store_teardown),   \
        cmocka_unit_test_setup_teardown(test_restore_as_of, setup, tu_store_teardown),       \
        cmocka_unit_test_setup_teardown(test_largest_checkpoint_id, setup, tu_store_teardown), \
        cmocka_unit_test_setup_teardown(test_restore_many_versions, setup, tu_store_teardown), \
        cmocka_unit_test_setup_teardown(test_restore_matches_model, setup, tu_store_teardown), \
        cmocka_unit_test_setup_teardown(test_restore_plan_direct, setup, tu_store_teardown), \
        cmocka_unit_test_setup_teardown(test_local_reader_names, setup, tu_store_teardown),  \
        cmocka_unit_test_setup_teardown(test_plan_grace_yields_to_a_full_disk, setup,        \
                                        tu_store_teardown),                                  \
        cmocka_unit_test_setup_teardown(test_restore_batches_and_errors, setup,              \
                                        tu_store_teardown),                                  \
        cmocka_unit_test_setup_teardown(test_restore_default_batch_bytes, setup,             \
                                        tu_store_teardown),                                  \
        cmocka_unit_test_setup_teardown(test_latest_cut, setup, tu_store_teardown),          \
        cmocka_unit_test_setup_teardown(test_verify_and_gc, setup, tu_store_teardown),       \
        cmocka_unit_test_setup_teardown(test_concurrent_shards, setup, tu_store_teardown),   \
        cmocka_unit_test_setup_teardown(test_concurrent_same_part, setup, tu_store_teardown), \
    }

int main(void)
{
    const struct CMUnitTest direct[] = STORE_TESTS(tu_store_setup);
    const struct CMUnitTest buffered[] = STORE_TESTS(tu_store_setup_buffered);
    int failed = cmocka_run_group_tests_name("O_DIRECT reads", direct, NULL, NULL);
    return failed + cmocka_run_group_tests_name("buffered reads", buffered, NULL, NULL);
}
