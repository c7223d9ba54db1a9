/* SPDX-License-Identifier: Apache-2.0 */
/*
 * quickstart: save one embedding table and a blob as a checkpoint, then
 * restore them and check every value. The program of docs/getting-started.md,
 * written against include/cpr/ only; the test suite builds it in the tree and
 * against an installed prefix (pkg-config and find_package), and runs it.
 *
 *   quickstart TARGET      TARGET: grpc://HOST:PORT, unix:/PATH or local:///DIR
 *
 * Exit status: 0 when everything restored exactly, 1 on any failure, 2 on a
 * usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/client.h"

#define ROWS 10000u /* rows of the table */
#define DIM 16u     /* float32 values per row */
#define STATE 1u    /* optimizer state per row (row-wise Adagrad's sum) */

static int fail(const char *what, cpr_status st)
{
    fprintf(stderr, "quickstart: %s: %s: %s\n", what, cpr_status_name(st), cpr_errmsg());
    return 1;
}

static float value_of(uint64_t row, uint32_t j) { return (float)row + (float)j / 100.0f; }

int main(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: quickstart TARGET (grpc://HOST:PORT, unix:/PATH or local:///DIR)\n");
        return 2;
    }
    int rc = 1;
    cpr_client *client = NULL;
    float *values = malloc(sizeof(float) * ROWS * DIM);
    float *state = malloc(sizeof(float) * ROWS * STATE);
    float *back = calloc(ROWS * DIM, sizeof(float));
    float *back_state = calloc(ROWS * STATE, sizeof(float));
    if (!values || !state || !back || !back_state)
        goto out;
    for (uint64_t r = 0; r < ROWS; r++) {
        for (uint32_t j = 0; j < DIM; j++)
            values[r * DIM + j] = value_of(r, j);
        state[r] = (float)r * 0.5f;
    }

    /* 1. A client: the target decides the transport. */
    cpr_status st = cpr_client_open(argv[1], NULL, &client);
    if (st) {
        rc = fail("open", st);
        goto out;
    }

    /* 2. Save: checkpoint ids start at 1 and increase per shard. A FULL part
     *    is the shard's whole state; this job has one shard. */
    cpr_table_schema table = {.table = 0, .rows = ROWS, .dim = DIM, .state_dim = STATE};
    cpr_part_spec spec = {.id = {.job = "quickstart", .shard = 0, .checkpoint = 1},
                          .kind = CPR_KIND_FULL, .step = 100, .num_shards = 1,
                          .tables = &table, .n_tables = 1};
    cpr_part *part = NULL;
    st = cpr_client_begin(client, &spec, &part);
    if (st) {
        rc = fail("begin", st);
        goto out;
    }
    /* Rows [0, ROWS) as one range: no ids array needed. Puts copy and return;
     * the library streams in the background. */
    cpr_row_batch rows = {.table = 0, .n = ROWS, .range_begin = 0, .values = values,
                          .values_count = (size_t)ROWS * DIM, .state = state,
                          .state_count = (size_t)ROWS * STATE};
    const char dense[] = "the dense model's bytes";
    st = cpr_part_put_rows(part, &rows);
    if (st == CPR_OK)
        st = cpr_part_put_blob(part, "dense", dense, sizeof dense);
    if (st) {
        cpr_part_abort(&part); /* frees the handle and clears it */
        rc = fail("put", st);
        goto out;
    }
    st = cpr_part_commit(&part); /* durable on CPR_OK; the handle is freed and cleared */
    if (st) {
        rc = fail("commit", st);
        goto out;
    }

    /* 3. Restore the table as of the latest consistent cut into our buffers. */
    cpr_restore_query query = {.job = "quickstart", .consistent = 1};
    cpr_restore_into into = {.table = 0, .row_base = 0, .n_rows = ROWS, .dim = DIM,
                             .state_dim = STATE, .values = back, .state = back_state};
    cpr_restore_result result;
    st = cpr_client_restore_table(client, &query, NULL, 0, &into, &result);
    if (st) {
        rc = fail("restore", st);
        goto out;
    }
    void *blob = NULL;
    size_t blob_len = 0;
    cpr_part_id id = {"quickstart", 0, result.as_of};
    st = cpr_client_read_blob(client, &id, "dense", &blob, &blob_len);
    if (st) {
        rc = fail("read blob", st);
        goto out;
    }
    int same = result.rows == ROWS && blob_len == sizeof dense && !memcmp(blob, dense, blob_len) &&
               !memcmp(back, values, sizeof(float) * ROWS * DIM) &&
               !memcmp(back_state, state, sizeof(float) * ROWS * STATE);
    free(blob);
    if (!same) {
        fprintf(stderr, "quickstart: the restored data differ from what was saved\n");
        goto out;
    }
    printf("quickstart: restored %llu rows and the blob exactly, as of checkpoint %llu\n",
           (unsigned long long)result.rows, (unsigned long long)result.as_of);
    rc = 0;
out:
    cpr_client_close(client); /* NULL is a no-op */
    free(values);
    free(state);
    free(back);
    free(back_state);
    return rc;
}
