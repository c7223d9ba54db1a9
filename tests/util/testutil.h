/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by CPR tests: temporary directories, deterministic row
 * contents (so a restored value can be checked against what was written
 * without keeping a copy), and writing a whole part in one call. The
 * tu_store_* fixture and the tu_assert_* checks are for cmocka tests: they
 * fail the running test through cmocka's assertions.
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
/* Regular files (and other non-directories) under `path`, recursively; 0 if missing. */
uint64_t tu_count_files(const char *path);
/* Damage a file on disk: invert the byte at `offset` and fsync (in cmocka
 * tests: fails the test if the file cannot be changed). */
void tu_flip_byte(const char *path, uint64_t offset);

/* The ceph.conf of the run's shared test cluster ($CPR_TEST_RADOS_CONF,
 * readable), or NULL (said on stderr: the caller skips, exit 77). */
const char *tu_rados_conf(void);

/* A Ceph test cluster of a test's own (deploy/ceph/test-cluster.sh, named
 * by $CPR_TEST_CEPH_SCRIPT), in a fresh temporary directory. */
typedef struct tu_cluster {
    const char *script;
    char dir[4096];
    char conf[4200]; /* dir/ceph.conf */
} tu_cluster;
/* Start one with test-cluster.sh's start flags (NULL: none): 0 when it
 * runs; 77 when $CPR_TEST_CEPH_SCRIPT is not set or the packages are
 * missing (the test skips); another exit status when it did not start
 * (said on stderr; stopped and removed). */
int tu_cluster_start(tu_cluster *c, const char *flags);
/* system(cmd): the shell's exit status (-1 if it did not exit). */
int tu_system(const char *cmd);
/* test-cluster.sh VERB DIR [ARG], its output dropped: its exit status. */
int tu_cluster_run(const tu_cluster *c, const char *verb, const char *arg);
/* Stop every daemon of it and remove its directory. */
void tu_cluster_stop(tu_cluster *c);

/* In cmocka tests: fail with both status names and cpr_errmsg() unless
 * `expr` returns `want`. */
#define assert_status(want, expr)                                              \
    do {                                                                       \
        cpr_status got_ = (expr);                                              \
        if (got_ != (want))                                                    \
            fail_msg("%s: got %s, want %s (%s)", #expr, cpr_status_name(got_), \
                     cpr_status_name(want), cpr_errmsg());                     \
    } while (0)

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

/* ---- cmocka helpers for store tests --------------------------------------- */

/* A fresh store in its own temporary directory, for one cmocka test. */
typedef struct tu_store_fixture {
    char *dir;        /* temporary directory, removed by teardown */
    char *path;       /* the store directory inside it */
    cpr_store *store;
} tu_store_fixture;
/* cmocka setup/teardown: *state becomes / is a tu_store_fixture. Setup
 * returns -1 (and cleans up) if the store cannot be opened. */
int tu_store_setup(void **state);
/* The same with cpr_store_options.buffered_reads: reads through the page cache. */
int tu_store_setup_buffered(void **state);
int tu_store_teardown(void **state);

/* Payload bytes of one row: id, values, state. */
uint64_t tu_row_bytes(const cpr_table_schema *t);
/* A part spec with step = ckpt * 100 and no explicit base. `job` and
 * `tables` are borrowed: they must outlive the spec. */
cpr_part_spec tu_part(const char *job, uint32_t shard, uint32_t num_shards,
                      uint64_t ckpt, cpr_kind kind, const cpr_table_schema *tables,
                      size_t n_tables);
/* ids[i] = first + i for i < n. */
void tu_iota(uint64_t *ids, uint64_t first, size_t n);

/* A row batch with its own arrays, filled as written at a checkpoint. */
typedef struct tu_batch {
    cpr_row_batch batch;
    float *values;
    float *state;
} tu_batch;
/* Fill b with rows `ids` of `t` as written at `ckpt` (ids are borrowed);
 * release with tu_batch_free. */
void tu_batch_make(tu_batch *b, const cpr_table_schema *t, const uint64_t *ids,
                   size_t n, uint64_t ckpt);
void tu_batch_free(tu_batch *b);

/* Send rows `ids` of table `t`, valued as written at `value_ckpt`. */
cpr_status tu_put_rows(cpr_store *s, const cpr_part_id *id, const cpr_table_schema *t,
                       const uint64_t *ids, size_t n, uint64_t value_ckpt);
/* Write and commit a part with rows first..first+n-1 of every table; the
 * test fails unless that succeeds. */
void tu_write_part_ok(cpr_store *s, const cpr_part_spec *spec, uint64_t first,
                      size_t n);
/* cpr_store_restore into a fresh `rows` (free it with tu_rows_free). */
cpr_status tu_restore(cpr_store *s, const cpr_restore_query *q, tu_rows *rows,
                      cpr_restore_result *res);

/* The bit pattern of v, so floats compare exactly (and -0 != +0). */
uint32_t tu_float_bits(float v);
/* `row` is row `id` of table `t` holding exactly what was written at `ckpt`. */
void tu_assert_row(const tu_row *row, const cpr_table_schema *t, uint64_t id,
                   uint64_t ckpt);
/* got[0..n) are rows first, first+step, ... of `t`, all as of `ckpt`. */
void tu_assert_rows(const tu_row *got, const cpr_table_schema *t, uint64_t first,
                    uint64_t step, size_t n, uint64_t ckpt);

/* Collects a blob (a cpr_blob_fn) and notes any gap between chunks. The
 * caller frees data. */
typedef struct tu_blob {
    unsigned char *data;
    uint64_t len;
    int gaps;
} tu_blob;
cpr_status tu_blob_collect(void *ctx, uint64_t offset, const void *data, size_t len);
/* Blob `name` of part `id` is `size` bytes of the tu_blob_byte pattern,
 * delivered in order. */
void tu_assert_blob(cpr_store *s, const cpr_part_id *id, const char *name,
                    uint64_t size);

#endif /* CPR_TESTUTIL_H */
