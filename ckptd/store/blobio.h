/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sequential file I/O through io_uring, O_DIRECT where the filesystem allows
 * it: the blob path of the store and the raw-disk baseline of cpr-bench.
 * Writes are pipelined (several aligned buffers in flight); the checksum of
 * every CPR_BLOB_BLOCK bytes is computed as data streams through.
 * A writer or reader is used by one thread at a time.
 */
#ifndef CPR_BLOBIO_H
#define CPR_BLOBIO_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/status.h"

#define CPR_BLOB_BLOCK (1u << 20) /* checksum granule and I/O size */

typedef struct cpr_bfile_writer cpr_bfile_writer;

/* Create (truncate) `path`. direct: try O_DIRECT (falls back silently when
 * the filesystem refuses it). `want_crcs`: keep one CRC32C per block. */
cpr_status cpr_bfile_create(const char *path, int direct, int want_crcs,
                            cpr_bfile_writer **out);
cpr_status cpr_bfile_append(cpr_bfile_writer *w, const void *data, size_t len);
/* Flush, set the exact length, fdatasync unless no_sync, close. The writer is
 * freed whatever the outcome. On success *size and, if kept, the block CRCs
 * (malloc'd, caller frees; *n_crcs = ceil(size / CPR_BLOB_BLOCK)) are set. */
cpr_status cpr_bfile_finish(cpr_bfile_writer *w, int no_sync, uint64_t *size,
                            uint32_t **crcs, size_t *n_crcs);
/* Discard the writer and unlink its file. NULL is a no-op. */
void cpr_bfile_discard(cpr_bfile_writer *w);
uint64_t cpr_bfile_written(const cpr_bfile_writer *w);

/* Receives block `index` (at offset index * CPR_BLOB_BLOCK). */
typedef cpr_status (*cpr_bfile_block_fn)(void *ctx, uint64_t index,
                                         const void *data, size_t len);

/* Read `path` from start to end (expected length `size`), block by block,
 * with read-ahead. CPR_CORRUPT if the file is shorter or longer than `size`. */
cpr_status cpr_bfile_read(const char *path, uint64_t size, int direct,
                          cpr_bfile_block_fn fn, void *ctx);

#endif /* CPR_BLOBIO_H */
