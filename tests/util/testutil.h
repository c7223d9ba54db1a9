/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by CPR tests: temporary directories, deterministic row
 * contents (so a restored value can be checked against what was written
 * without keeping a copy), and writing a whole part in one call.
 */
#ifndef CPR_TESTUTIL_H
#define CPR_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/store.h"

/* mkdtemp under $TMPDIR (or /tmp); returns a malloc'd path. Aborts on error. */
char *tu_mkdtemp(const char *prefix);
/* rm -rf path (no error if missing). */
void tu_rmtree(const char *path);

/* The deterministic value of element `i` of row `row` of `table` as written
 * at checkpoint `ckpt`: a hash of all four, so a row restored from the wrong
 * table, row, checkpoint or position is caught with near certainty. */
float tu_value(uint32_t table, uint64_t row, uint64_t ckpt, uint32_t i);
/* Same for optimizer state. */
float tu_state(uint32_t table, uint64_t row, uint64_t ckpt, uint32_t i);

/* Fill values/state (n x dim, n x state_dim) for ids as of checkpoint ckpt
 * and compute the batch checksum into batch->crc32c. The caller owns the
 * arrays; batch points into them. */
void tu_fill_batch(cpr_row_batch *batch, uint32_t table, const uint64_t *ids,
                   size_t n, uint32_t dim, uint32_t state_dim, uint64_t ckpt,
                   float *values, float *state);

/* Write and commit a part with rows `ids` of every table in `tables` (rows
 * filled with tu_value/tu_state at the part's checkpoint), in batches of
 * `batch_rows`, plus blobs named "dense" of `blob_bytes` bytes (pattern from
 * tu_blob_byte) when blob_bytes > 0. Returns the first failing status. */
cpr_status tu_write_part(cpr_store *store, const cpr_part_spec *spec,
                         const uint64_t *ids, size_t n, size_t batch_rows,
                         size_t blob_bytes, int commit);

/* Deterministic byte `i` of blob of part (shard, ckpt). */
unsigned char tu_blob_byte(uint32_t shard, uint64_t ckpt, uint64_t i);

/* Collect every restored row: rows are appended to a growing array. */
typedef struct tu_row {
    uint32_t table;
    uint64_t id;
    float *values; /* dim floats, then state_dim floats */
    uint32_t dim, state_dim;
} tu_row;
typedef struct tu_rows {
    tu_row *rows;
    size_t n, cap;
} tu_rows;
cpr_status tu_collect(void *ctx, const cpr_row_batch *batch); /* cpr_row_fn */
void tu_rows_free(tu_rows *rows);

#endif /* CPR_TESTUTIL_H */
