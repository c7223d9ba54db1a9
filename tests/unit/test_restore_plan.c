/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Restore plans as bytes (ckptd/store/plan.c; direct reads): a plan survives
 * encode and decode field for field; decode refuses, with a status and a
 * message and without reading out of bounds, every plan that is damaged
 * (CRC32C), truncated, of another version, or that passes its CRC but
 * breaks what the merge relies on (each byte changed in turn and the CRC
 * made right again: accepted only as a plan that still keeps the rules).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpr/crc32c.h"
#include "restore.h"
#include "testutil.h"

static char obj0[] = "job/0-1.5", obj1[] = "job/1-2.7";
static char *objects[2] = {obj0, obj1};
static cpr_table_schema tables[2] = {{1, 1000, 8, 1}, {4, 50, 3, 0}};
static cpr_row_range ranges[2] = {{0, 100}, {200, 900}};
static cpri_merge_cand cands[4] = {
    {{1, 10, 0, 99, 0, 2000, 0x1234}, 0, 0, 1, 0, 0},
    {{1, 5, 3, 80, 2000, 900, 0x5678}, 1, 1, 2, 1, 0},
    {{1, 30, 300, 899, 2900, 4000, 0x9abc}, 0, 0, 0, 2, 1},
    {{4, 2, 0, 1, 0, 200, 0xdef0}, 1, 1, 2, 0, 0},
};

static cpri_merge_plan sample(void)
{
    cpri_merge_plan p = {0};
    p.as_of = 2;
    p.modulo = 3;
    p.remainder = 1;
    p.batch_rows = 77;
    p.tables = tables;
    p.n_tables = 2;
    p.ranges = ranges;
    p.n_ranges = 2;
    p.objects = objects;
    p.n_objects = 2;
    p.cands = cands;
    p.n_cands = 4;
    return p;
}

static void reseal(unsigned char *b, size_t len)
{
    uint32_t crc = cpr_crc32c(0, b, len - 4);
    for (int i = 0; i < 4; i++)
        b[len - 4 + i] = (unsigned char)(crc >> (8 * i));
}

static void test_round_trip(void **unused)
{
    (void)unused;
    cpri_merge_plan p = sample(), q;
    unsigned char *buf = NULL;
    size_t len = 0;
    assert_status(CPR_OK, cpri_merge_plan_encode(&p, &buf, &len));
    assert_status(CPR_OK, cpri_merge_plan_decode(buf, len, &q));
    assert_int_equal(q.as_of, 2);
    assert_int_equal(q.modulo, 3);
    assert_int_equal(q.remainder, 1);
    assert_int_equal(q.batch_rows, 77);
    assert_int_equal(q.n_tables, 2);
    for (size_t i = 0; i < 2; i++) { /* field by field: the struct has padding */
        assert_int_equal(q.tables[i].table, tables[i].table);
        assert_int_equal(q.tables[i].rows, tables[i].rows);
        assert_int_equal(q.tables[i].dim, tables[i].dim);
        assert_int_equal(q.tables[i].state_dim, tables[i].state_dim);
    }
    assert_int_equal(q.n_ranges, 2);
    assert_memory_equal(q.ranges, ranges, sizeof ranges);
    assert_int_equal(q.n_objects, 2);
    assert_string_equal(q.objects[0], obj0);
    assert_string_equal(q.objects[1], obj1);
    assert_int_equal(q.n_cands, 4);
    for (size_t i = 0; i < 4; i++) {
        const cpri_block_ref *a = &q.cands[i].ref, *b = &cands[i].ref;
        assert_true(a->table == b->table && a->n == b->n && a->first == b->first &&
                    a->last == b->last && a->offset == b->offset && a->len == b->len &&
                    a->crc == b->crc);
        assert_int_equal(q.cands[i].object, cands[i].object);
        assert_int_equal(q.cands[i].shard, cands[i].shard);
        assert_int_equal(q.cands[i].checkpoint, cands[i].checkpoint);
        assert_int_equal(q.cands[i].seq, cands[i].seq);
        assert_int_equal(q.cands[i].fold, cands[i].fold);
    }
    assert_null(q.store);
    cpri_merge_plan_release(&q);
    /* a fold's plan (keep_below) never leaves the store */
    p.keep_below = 5;
    unsigned char *none = NULL;
    assert_status(CPR_INTERNAL, cpri_merge_plan_encode(&p, &none, &len));
    assert_null(none);
    free(buf);
}

static void test_refused(void **unused)
{
    (void)unused;
    cpri_merge_plan p = sample(), q;
    unsigned char *buf = NULL;
    size_t len = 0;
    assert_status(CPR_OK, cpri_merge_plan_encode(&p, &buf, &len));
    /* damaged on the way */
    buf[60] ^= 1;
    assert_status(CPR_CORRUPT, cpri_merge_plan_decode(buf, len, &q));
    buf[60] ^= 1;
    /* every truncation */
    for (size_t n = 0; n < len; n++) {
        unsigned char *cut = malloc(n + 1);
        memcpy(cut, buf, n);
        if (n >= 4)
            reseal(cut, n);
        cpr_status st = cpri_merge_plan_decode(cut, n, &q);
        assert_true(st == CPR_INVALID_ARGUMENT || st == CPR_CORRUPT);
        free(cut);
    }
    /* another version */
    buf[4] = 2;
    reseal(buf, len);
    assert_status(CPR_INVALID_ARGUMENT, cpri_merge_plan_decode(buf, len, &q));
    assert_non_null(strstr(cpr_errmsg(), "version 2"));
    buf[4] = 1;
    reseal(buf, len);
    /* every byte changed, the CRC made right: refused, or still a plan the
     * merge can run (ordered, indexes in range) */
    static const unsigned char flips[3] = {0x01, 0x80, 0xff};
    size_t accepted = 0;
    for (size_t i = 0; i + 4 < len; i++)
        for (int f = 0; f < 3; f++) {
            buf[i] ^= flips[f];
            reseal(buf, len);
            cpr_status st = cpri_merge_plan_decode(buf, len, &q);
            if (st == CPR_OK) {
                accepted++;
                for (size_t k = 0; k < q.n_cands; k++) {
                    assert_true(q.cands[k].object < q.n_objects);
                    assert_true(q.cands[k].ref.first <= q.cands[k].ref.last);
                    if (k) {
                        const cpri_merge_cand *a = &q.cands[k - 1], *b = &q.cands[k];
                        assert_true(a->ref.table < b->ref.table ||
                                    (a->ref.table == b->ref.table &&
                                     a->ref.first <= b->ref.first));
                    }
                }
                cpri_merge_plan_release(&q);
            } else {
                assert_int_equal(st, CPR_INVALID_ARGUMENT);
                assert_non_null(strstr(cpr_errmsg(), "restore plan refused"));
            }
            buf[i] ^= flips[f];
        }
    reseal(buf, len);
    print_message("  %zu of %zu changed plans still well-formed\n", accepted, 3 * (len - 4));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
