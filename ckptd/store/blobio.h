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

typedef struct cpri_bfile_writer cpri_bfile_writer;

/* Create (truncate) `path`. direct: try O_DIRECT (falls back silently when
 * the filesystem refuses it). `want_crcs`: keep one CRC32C per block. */
cpr_status cpri_bfile_create(const char *path, int direct, int want_crcs,
                            cpri_bfile_writer **out);
cpr_status cpri_bfile_append(cpri_bfile_writer *w, const void *data, size_t len);
/* Flush, set the exact length, fdatasync unless no_sync, close. The writer is
 * freed whatever the outcome. On success *size and, if kept, the block CRCs
 * (malloc'd, caller frees; *n_crcs = ceil(size / CPR_BLOB_BLOCK)) are set. */
cpr_status cpri_bfile_finish(cpri_bfile_writer *w, int no_sync, uint64_t *size,
                            uint32_t **crcs, size_t *n_crcs);
/* Discard the writer and unlink its file. NULL is a no-op. */
void cpri_bfile_discard(cpri_bfile_writer *w);
uint64_t cpri_bfile_written(const cpri_bfile_writer *w);

/* Receives block `index` (at offset index * CPR_BLOB_BLOCK). */
typedef cpr_status (*cpri_bfile_block_fn)(void *ctx, uint64_t index,
                                         const void *data, size_t len);

/* Read `path` from start to end (expected length `size`), block by block,
 * with read-ahead. CPR_CORRUPT if the file is shorter or longer than `size`. */
cpr_status cpri_bfile_read(const char *path, uint64_t size, int direct,
                          cpri_bfile_block_fn fn, void *ctx);

/* fsync a directory (its entries: files created or renamed in it). 0 or -1
 * with errno set. */
int cpri_fsync_dir(const char *path);

/* Replace `path` (in directory `dir`) with `len` bytes, crash-safely: a
 * temporary file beside it, synced, renamed over it, the directory synced;
 * a crash leaves the old file or the new. */
cpr_status cpri_replace_file(const char *dir, const char *path, const void *bytes, size_t len);

/* ---- extent reads: several files, several reads in flight --------------- */

#define CPR_IO_ALIGN 4096u

/* Open `path` for reading, O_DIRECT if `direct` and the filesystem allows
 * it. Returns the descriptor, or -1 with errno set. */
int cpri_bfile_open_read(const char *path, int direct);

/* One read: [offset, offset + len) of fd. */
typedef struct cpri_fetch_req {
    int fd;
    uint64_t offset;
    size_t len;
} cpri_fetch_req;

typedef struct cpri_fetcher cpri_fetcher;

/*
 * Read reqs[0..n) (borrowed until destroy) with up to `depth` reads in
 * flight, delivered in order by cpri_fetcher_next. Reads are aligned to
 * CPR_IO_ALIGN (O_DIRECT); each goes to its own buffer, so the caller may
 * hold several delivered extents at once. Memory in flight: depth extents,
 * plus up to FETCH_POOL released buffers kept for reuse. `sync`: no
 * io_uring, each extent read by pread when it is asked for (descriptors
 * without O_DIRECT, whose read-ahead is the kernel's).
 */
cpr_status cpri_fetcher_create(const cpri_fetch_req *reqs, size_t n, unsigned depth, int sync,
                              cpri_fetcher **out);

/* The next extent's bytes at *data (aligned like its offset modulo
 * CPR_IO_ALIGN); *owner is the buffer holding them, the caller's to free().
 * CPR_IO on a failed read, CPR_CORRUPT if the file ends before the extent,
 * CPR_INTERNAL when asked for more than n extents. */
cpr_status cpri_fetcher_next(cpri_fetcher *f, void **owner, const unsigned char **data);

/* Give a delivered buffer back for reuse by later reads (instead of free():
 * a fresh megabyte buffer is mapped and faulted in by the kernel each time). */
void cpri_fetcher_release(cpri_fetcher *f, void *owner);

/* Wait for reads still in flight and free what was not delivered. NULL is a
 * no-op. */
void cpri_fetcher_destroy(cpri_fetcher *f);

#endif /* CPR_BLOBIO_H */
