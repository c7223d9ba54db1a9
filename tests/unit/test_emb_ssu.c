/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The SSU sample (embedding/emb_ssu.c) at capacity: the CUDA backward skips
 * sampling for a whole call when cpri_emb_ssu_all_full says no add can
 * change anything. While a save holds members, an add of one of them marks
 * it resampled (U4), so a sample with held members is never "all full";
 * and a member resampled during its save stays in the sample at its end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "emb_ssu.h"
#include "testutil.h"

#define ROWS 64
#define SHARDS 2
#define CAPACITY 4

static void fill_to_capacity(cpri_emb_ssu *s)
{
    for (uint64_t row = 0; row < ROWS; row++) /* shard = row % SHARDS */
        cpri_emb_ssu_add(s, (uint32_t)(row % SHARDS), row);
    for (uint32_t i = 0; i < SHARDS; i++)
        assert_int_equal(s->lists[i].len, CAPACITY);
}

static void test_full_unless_held(void **state)
{
    (void)state;
    cpri_emb_ssu s;
    assert_status(CPR_OK, cpri_emb_ssu_init(&s, 1, ROWS, SHARDS, CAPACITY));
    assert_false(cpri_emb_ssu_all_full(&s));
    fill_to_capacity(&s);
    assert_true(cpri_emb_ssu_all_full(&s));

    /* A save of shard 1 holds two of its members (rows 1 and 3). */
    uint64_t ids[] = {1, 3};
    uint8_t held[2] = {0, 0};
    cpri_emb_ssu_hold(&s, 1, ids, 2, 0, held);
    assert_int_equal(held[0], 1);
    assert_int_equal(held[1], 1);
    assert_false(cpri_emb_ssu_all_full(&s)); /* an add can mark them (U4) */

    /* Row 3 is sampled again while the save is open; row 1 is not. */
    cpri_emb_ssu_add(&s, 1, 3);
    cpri_emb_ssu_end(&s, 1, ids, 2, held, 1);
    assert_true(cpri_emb_ssu_is_member(&s, 3));  /* stayed, at the end */
    assert_false(cpri_emb_ssu_is_member(&s, 1)); /* left with the save */
    assert_int_equal(s.lists[1].ids[s.lists[1].len - 1], 3);
    assert_false(cpri_emb_ssu_all_full(&s)); /* row 1's place is free */
    cpri_emb_ssu_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_unless_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
