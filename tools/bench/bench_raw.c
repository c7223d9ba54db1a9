/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The raw-disk baseline of cpr-bench: how fast this filesystem takes and
 * gives back one large sequential file through the same io_uring/O_DIRECT
 * path (blobio.h) the store uses for blobs. The store's ingest and restore
 * rates are reported as ratios to these, so the numbers say how much of the
 * device the store uses rather than how fast this machine happens to be.
 */
#define _GNU_SOURCE /* O_DIRECT */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "blobio.h"
#include "cpr_common.h"

#define RAW_CHUNK_BYTES (4u << 20) /* what one append hands to the writer */

int bench_direct_supported(const char *dir)
{
    char *probe = bench_path_join(dir, ".cpr-bench-direct-probe");
    if (!probe)
        return 0;
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    free(probe);
    return fd >= 0;
}

/* Incompressible bytes, so a compressing filesystem cannot flatter the
 * baseline. */
static void fill_noise(unsigned char *buf, size_t len)
{
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
}

static cpr_status raw_write(const char *path, uint64_t bytes,
                            const unsigned char *chunk, double *seconds)
{
    cpri_bfile_writer *w = NULL;
    bench_progress progress;
    uint64_t written = 0, size = 0;
    double t0 = cpri_now_s();
    cpr_status st = cpri_bfile_create(path, 1, 0, &w);
    if (st)
        return st;
    bench_progress_start(&progress, "raw O_DIRECT write", bytes);
    while (st == CPR_OK && written < bytes) {
        uint64_t left = bytes - written;
        size_t len = left < RAW_CHUNK_BYTES ? (size_t)left : RAW_CHUNK_BYTES;
        st = cpri_bfile_append(w, chunk, len);
        written += len;
        bench_progress_update(&progress, written);
    }
    if (st) {
        cpri_bfile_discard(w);
        return st;
    }
    st = cpri_bfile_finish(w, 0, &size, NULL, NULL); /* frees w */
    if (st == CPR_OK && size != bytes)
        st = cpr_fail(CPR_INTERNAL, "raw file %s has %llu bytes, wrote %llu", path,
                      (unsigned long long)size, (unsigned long long)bytes);
    *seconds = cpri_now_s() - t0;
    return st;
}

typedef struct raw_reader {
    uint64_t bytes_read;
    uint64_t checksum; /* touches every block so the read is really used */
    bench_progress progress;
} raw_reader;

static cpr_status raw_block(void *ctx, uint64_t index, const void *data, size_t len)
{
    raw_reader *r = ctx;
    const unsigned char *p = data;
    (void)index;
    r->checksum += p[0] + p[len - 1];
    r->bytes_read += len;
    bench_progress_update(&r->progress, r->bytes_read);
    return CPR_OK;
}

static cpr_status raw_read(const char *path, uint64_t bytes, double *seconds)
{
    raw_reader r = {0, 0, {0}};
    bench_progress_start(&r.progress, "raw O_DIRECT read", bytes);
    double t0 = cpri_now_s();
    cpr_status st = cpri_bfile_read(path, bytes, 1, raw_block, &r);
    *seconds = cpri_now_s() - t0;
    if (st == CPR_OK && r.bytes_read != bytes)
        st = cpr_fail(CPR_INTERNAL, "raw read of %s returned %llu of %llu bytes", path,
                      (unsigned long long)r.bytes_read, (unsigned long long)bytes);
    return st;
}

cpr_status bench_raw_run(const char *path, uint64_t bytes, const char *work_dir,
                         bench_result *res)
{
    cpr_status st = CPR_OK;
    unsigned char *chunk = malloc(RAW_CHUNK_BYTES);
    if (!chunk)
        return bench_report(cpr_fail(CPR_NO_MEMORY, "out of memory"), "raw baseline");
    fill_noise(chunk, RAW_CHUNK_BYTES);
    st = bench_report(raw_write(path, bytes, chunk, &res->raw_write_s), "raw write");
    if (st)
        goto out;
    st = bench_report(bench_drop_cache(work_dir, NULL), "dropping the page cache");
    if (st)
        goto out;
    st = bench_report(raw_read(path, bytes, &res->raw_read_s), "raw read");
    if (st)
        goto out;
    res->raw_bytes = bytes;
out:
    free(chunk);
    return st;
}
