/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The writer behind tests/cli/test_cprctl.sh. `write TARGET` stores, through
 * the client library, a small job whose every value is known (tu_value and
 * tu_state of tests/util): job "demo", 2 shards owning rows r % 2, tables 1
 * (1000 rows, dim 4, state 2) and 2 (500 rows, dim 3, no state); checkpoint
 * 1 FULL on both shards, 2 DELTA of rows < 100 on both, 3 FULL on shard 0
 * only (so 3 is not a consistent cut); each part with a blob "dense". Job
 * "other" has 8 shards of one FULL part each (so that with several nodes it
 * almost surely lives on more than one), table 7 (16 rows, dim 2). Job
 * "demo" also gets a recovery record: the FULL plan of a resume (cut 2,
 * rewind to step 200), recorded as generation 1 by
 * cpr_recovery_decide_and_record; job "junk" has only a recovery record,
 * of bytes that are no plan (terminal controls among them). `expect TABLE AS_OF` prints the CSV that
 * `cprctl export demo TABLE FILE` must write for that state (AS_OF 0: the
 * newest), computed from the layout, not read back from storage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/client.h"
#include "cpr/recovery.h"
#include "testutil.h"

#define NUM_SHARDS 2
#define DELTA_ROWS 100 /* rows below it change at checkpoint 2 */
#define BLOB_BYTES 1000

static const cpr_table_schema DEMO_TABLES[2] = {{1, 1000, 4, 2}, {2, 500, 3, 0}};
static const cpr_table_schema OTHER_TABLES[1] = {{7, 16, 2, 0}};
#define OTHER_SHARDS 8

/* Rows of `t` that `shard` writes at `ckpt` (values as of ckpt). */
static cpr_status put_table(cpr_part *p, const cpr_table_schema *t, uint32_t shard,
                            uint32_t num_shards, uint64_t limit, uint64_t ckpt)
{
    size_t n = 0;
    uint64_t *ids = malloc((t->rows + 1) * sizeof *ids);
    float *values = malloc((t->rows * t->dim + 1) * sizeof *values);
    float *state = malloc((t->rows * t->state_dim + 1) * sizeof *state);
    cpr_status st = CPR_NO_MEMORY;
    if (ids && values && state) {
        for (uint64_t r = shard; r < t->rows && r < limit; r += num_shards)
            ids[n++] = r;
        cpr_row_batch b;
        tu_fill_batch(&b, t->table, ids, n, t->dim, t->state_dim, ckpt, values, state);
        st = cpr_part_put_rows(p, &b);
    }
    free(ids);
    free(values);
    free(state);
    return st;
}

static cpr_status write_part(cpr_client *c, const char *job, const cpr_table_schema *tables,
                             size_t n_tables, uint32_t shard, uint32_t num_shards,
                             uint64_t ckpt, cpr_kind kind, uint64_t limit)
{
    cpr_part_spec spec = tu_part(job, shard, num_shards, ckpt, kind, tables, n_tables);
    unsigned char blob[BLOB_BYTES];
    cpr_part *p = NULL;
    cpr_status st = cpr_client_begin(c, &spec, &p);
    if (st)
        return st;
    for (size_t t = 0; t < n_tables && st == CPR_OK; t++)
        st = put_table(p, &tables[t], shard, num_shards, limit, ckpt);
    for (size_t i = 0; i < sizeof blob; i++)
        blob[i] = tu_blob_byte(shard, ckpt, i);
    if (st == CPR_OK)
        st = cpr_part_put_blob(p, "dense", blob, sizeof blob);
    if (st) {
        cpr_part_abort(&p);
        return st;
    }
    return cpr_part_commit(&p);
}

static int do_write(const char *target)
{
    cpr_client *c = NULL;
    cpr_status st = cpr_client_open(target, NULL, &c);
    for (uint32_t s = 0; s < NUM_SHARDS && st == CPR_OK; s++)
        st = write_part(c, "demo", DEMO_TABLES, 2, s, NUM_SHARDS, 1, CPR_KIND_FULL, UINT64_MAX);
    for (uint32_t s = 0; s < NUM_SHARDS && st == CPR_OK; s++)
        st = write_part(c, "demo", DEMO_TABLES, 2, s, NUM_SHARDS, 2, CPR_KIND_DELTA, DELTA_ROWS);
    if (st == CPR_OK)
        st = write_part(c, "demo", DEMO_TABLES, 2, 0, NUM_SHARDS, 3, CPR_KIND_FULL, UINT64_MAX);
    for (uint32_t s = 0; s < OTHER_SHARDS && st == CPR_OK; s++)
        st = write_part(c, "other", OTHER_TABLES, 1, s, OTHER_SHARDS, 1, CPR_KIND_FULL,
                        UINT64_MAX);
    if (st == CPR_OK) {
        cpr_plan_request req = {.num_shards = NUM_SHARDS, .mode = CPR_RECOVERY_FULL};
        cpr_recovery_plan *plan = NULL;
        uint64_t generation = 0;
        int won = 0;
        st = cpr_recovery_decide_and_record(c, "demo", NULL, &req, 0, &plan, &generation,
                                            &won);
        if (st == CPR_OK && (!won || generation != 1 || cpr_recovery_plan_cut(plan) != 2)) {
            fprintf(stderr, "cprctl_fixture: recorded generation %llu, cut %llu, won %d\n",
                    (unsigned long long)generation,
                    (unsigned long long)cpr_recovery_plan_cut(plan), won);
            st = CPR_INTERNAL;
        }
        cpr_recovery_plan_destroy(plan);
    }
    if (st == CPR_OK) { /* "junk": bytes that are no plan, with terminal controls */
        static const char junk[] = "\x1b[31mred\x07 not a plan";
        uint64_t generation = 0;
        st = cpr_client_recovery_put(c, "junk", 0, junk, sizeof junk - 1, &generation);
    }
    cpr_client_close(c);
    if (st) {
        fprintf(stderr, "cprctl_fixture: write %s: %s: %s\n", target, cpr_status_name(st),
                cpr_errmsg());
        return 1;
    }
    return 0;
}

/* The checkpoint whose values row r holds as of `as_of` (0: newest). */
static uint64_t written_at(uint64_t row, uint64_t as_of)
{
    if ((as_of == 0 || as_of >= 3) && row % NUM_SHARDS == 0)
        return 3;
    if ((as_of == 0 || as_of >= 2) && row < DELTA_ROWS)
        return 2;
    return 1;
}

static int do_expect(const char *table_text, const char *as_of_text)
{
    unsigned long table = strtoul(table_text, NULL, 10);
    unsigned long long as_of = strtoull(as_of_text, NULL, 10);
    const cpr_table_schema *t = NULL;
    for (size_t i = 0; i < 2; i++)
        if (DEMO_TABLES[i].table == table)
            t = &DEMO_TABLES[i];
    if (!t) {
        fprintf(stderr, "cprctl_fixture: no table %lu in job demo\n", table);
        return 2;
    }
    printf("row");
    for (uint32_t i = 0; i < t->dim; i++)
        printf(",v%u", i);
    for (uint32_t i = 0; i < t->state_dim; i++)
        printf(",s%u", i);
    printf("\n");
    for (uint64_t r = 0; r < t->rows; r++) {
        uint64_t ckpt = written_at(r, as_of);
        printf("%llu", (unsigned long long)r);
        for (uint32_t i = 0; i < t->dim; i++)
            printf(",%.9g", (double)tu_value(t->table, r, ckpt, i));
        for (uint32_t i = 0; i < t->state_dim; i++)
            printf(",%.9g", (double)tu_state(t->table, r, ckpt, i));
        printf("\n");
    }
    return fflush(stdout) ? 1 : 0;
}

/* Job "big": FULL parts of shard 0 at checkpoints 2^53 + 1 and 2^64 - 1,
 * ids a double cannot hold. */
static int do_big(const char *target)
{
    cpr_client *c = NULL;
    cpr_status st = cpr_client_open(target, NULL, &c);
    const uint64_t ids[2] = {(1ull << 53) + 1, UINT64_MAX};
    for (int i = 0; i < 2 && st == CPR_OK; i++)
        st = write_part(c, "big", OTHER_TABLES, 1, 0, 1, ids[i], CPR_KIND_FULL, UINT64_MAX);
    cpr_client_close(c);
    if (st)
        fprintf(stderr, "cprctl_fixture: big %s: %s: %s\n", target, cpr_status_name(st),
                cpr_errmsg());
    return st ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "write") == 0)
        return do_write(argv[2]);
    if (argc == 3 && strcmp(argv[1], "big") == 0)
        return do_big(argv[2]);
    if (argc == 4 && strcmp(argv[1], "expect") == 0)
        return do_expect(argv[2], argv[3]);
    fprintf(stderr, "usage: cprctl_fixture write TARGET | big TARGET | expect TABLE AS_OF\n");
    return 2;
}
