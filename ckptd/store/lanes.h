/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Write lanes: the part's row files are built by background threads so that
 * SST building (RocksDB's block encoding, checksums and the copy into the
 * page cache, about 1 us per row) runs on every core while the caller
 * validates and encodes the next batch.
 *
 * The caller hands over encoded batches (records of key || value, keys
 * strictly increasing within a batch). Consecutive batches are grouped into
 * *chunks* of about CPR_LANE_CHUNK_BYTES; each chunk becomes one SST file,
 * written by one lane, and successive chunks go to successive lanes, so the
 * lanes work in parallel while every file still covers a contiguous key
 * range (read sequentially by restores). A batch that does not start above every key
 * before it starts a new chunk as well. cpr_lanes_finish returns the files in
 * chunk order, the order in which they must be ingested, so that a key
 * written twice keeps its later copy.
 *
 * One thread submits; lanes report failures as a sticky status.
 */
#ifndef CPR_STORE_LANES_H
#define CPR_STORE_LANES_H

#include <rocksdb/c.h>
#include <stddef.h>

#include "cpr/status.h"

typedef struct cpr_lanes cpr_lanes;

/* A batch being encoded: `data` holds n records of rec_len bytes each
 * (key_len bytes of key, then the value). Owned by the lanes. */
typedef struct cpr_encoded {
    unsigned char *data;
    size_t cap;          /* bytes allocated */
    size_t n, rec_len, key_len;
    size_t charged;      /* bytes counted against the budget; lanes.c only */
    unsigned chunk;      /* chunk sequence number; lanes.c only */
} cpr_encoded;

/* Files go to `dir` (which must exist). The options are borrowed and must
 * outlive the lanes. */
cpr_status cpr_lanes_create(const char *dir, unsigned n_lanes,
                            const rocksdb_envoptions_t *env,
                            const rocksdb_options_t *opts, cpr_lanes **out);

/* A buffer of at least `bytes` to encode the next batch into; blocks while
 * the queued batches exceed the memory budget (backpressure). */
cpr_status cpr_lanes_buffer(cpr_lanes *lanes, size_t bytes, cpr_encoded **out);

#define CPR_LANE_CHUNK_BYTES (16u << 20)

/* Queue a filled buffer; `out_of_order` if its first key is not above every
 * key submitted before. Returns a lane's earlier failure, if any. */
cpr_status cpr_lanes_submit(cpr_lanes *lanes, cpr_encoded *batch, int out_of_order);

/* Give back a buffer that will not be submitted. */
void cpr_lanes_unused(cpr_lanes *lanes, cpr_encoded *batch);

/* Wait for every lane, finish (fsync) its file, and return the file paths in
 * ingest order (*files malloc'd, each path malloc'd; caller frees). */
cpr_status cpr_lanes_finish(cpr_lanes *lanes, char ***files, size_t *n_files);

/* Stop the threads and free everything; files stay (the part's directory
 * is removed by its owner). NULL is a no-op. */
void cpr_lanes_destroy(cpr_lanes *lanes);

#endif /* CPR_STORE_LANES_H */
