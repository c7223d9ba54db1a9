/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the blob file I/O layer (ckptd/store/blobio.h): files written
 * with appends of odd sizes read back byte-exactly, block by block, with and
 * without O_DIRECT; the per-block checksums are the CRC32C of each block; a
 * wrong recorded length or a missing file reads as CPR_CORRUPT; discard
 * removes the file. Every test works in its own temporary directory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blobio.h"
#include "cpr/crc32c.h"
#include "testutil.h"

/* Byte `i` of every test file: not periodic in any power of two, so a block
 * delivered at the wrong offset cannot compare equal. */
static unsigned char pattern_byte(uint64_t i)
{
    return (unsigned char)(i * 131u + i / 4099u + (i >> 17));
}

static unsigned char *make_pattern(size_t len)
{
    unsigned char *buf = malloc(len ? len : 1);
    assert_non_null(buf);
    for (size_t i = 0; i < len; i++)
        buf[i] = pattern_byte(i);
    return buf;
}

static char *path_in(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *path = malloc(len);
    assert_non_null(path);
    snprintf(path, len, "%s/%s", dir, name);
    return path;
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static uint64_t file_size(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

/* What a read delivered, checked against the pattern as blocks arrive. */
typedef struct read_check {
    uint64_t blocks;      /* callbacks so far */
    uint64_t bytes;       /* bytes delivered so far */
    uint64_t size;        /* expected file length */
    int mismatches;       /* blocks out of order, wrong length or content */
    uint64_t fail_at;     /* return fail_status at this block (UINT64_MAX: never) */
    cpr_status fail_status;
} read_check;

static cpr_status check_block(void *ctx, uint64_t index, const void *data,
                              size_t len)
{
    read_check *rc = ctx;
    const unsigned char *bytes = data;
    uint64_t offset = index * CPR_BLOB_BLOCK;
    uint64_t left = rc->size - offset;
    size_t want = left < CPR_BLOB_BLOCK ? (size_t)left : CPR_BLOB_BLOCK;
    if (index != rc->blocks || len != want || offset != rc->bytes)
        rc->mismatches++;
    for (size_t i = 0; i < len && i < want; i++) {
        if (bytes[i] != pattern_byte(offset + i)) {
            rc->mismatches++;
            break;
        }
    }
    rc->blocks++;
    rc->bytes += len;
    if (index == rc->fail_at)
        return rc->fail_status;
    return CPR_OK;
}

static read_check read_check_for(uint64_t size)
{
    read_check rc = {.size = size, .fail_at = UINT64_MAX};
    return rc;
}

/* Write `size` pattern bytes to `path` in appends of varying odd sizes. */
static void write_file(const char *path, size_t size, int direct, int want_crcs,
                       uint64_t *size_out, uint32_t **crcs, size_t *n_crcs)
{
    static const size_t steps[] = {1, 7, 4093, 65537, 333331, 1048577, 2, 999};
    unsigned char *data = make_pattern(size);
    cpri_bfile_writer *w = NULL;
    assert_int_equal(cpri_bfile_create(path, direct, want_crcs, &w), CPR_OK);
    assert_non_null(w);
    size_t off = 0;
    for (size_t k = 0; off < size; k++) {
        size_t len = steps[k % (sizeof steps / sizeof steps[0])];
        if (len > size - off)
            len = size - off;
        assert_int_equal(cpri_bfile_append(w, data + off, len), CPR_OK);
        off += len;
        assert_int_equal(cpri_bfile_written(w), off);
    }
    /* An empty append is harmless. */
    assert_int_equal(cpri_bfile_append(w, data, 0), CPR_OK);
    assert_int_equal(cpri_bfile_written(w), size);
    assert_int_equal(cpri_bfile_finish(w, 0, size_out, crcs, n_crcs), CPR_OK);
    free(data);
}

static void round_trip(const char *dir, size_t size, int direct)
{
    char name[64];
    snprintf(name, sizeof name, "blob-%zu-%d", size, direct);
    char *path = path_in(dir, name);
    uint64_t written = UINT64_MAX;
    uint32_t *crcs = NULL;
    size_t n_crcs = SIZE_MAX;

    write_file(path, size, direct, 1, &written, &crcs, &n_crcs);
    assert_int_equal(written, size);
    assert_int_equal(file_size(path), size);

    /* One CRC per block, each the CRC32C of exactly that block. */
    size_t want_blocks = (size + CPR_BLOB_BLOCK - 1) / CPR_BLOB_BLOCK;
    assert_int_equal(n_crcs, want_blocks);
    if (want_blocks)
        assert_non_null(crcs);
    unsigned char *data = make_pattern(size);
    for (size_t b = 0; b < want_blocks; b++) {
        size_t off = b * CPR_BLOB_BLOCK;
        size_t len = size - off < CPR_BLOB_BLOCK ? size - off : CPR_BLOB_BLOCK;
        assert_int_equal(crcs[b], cpr_crc32c(0, data + off, len));
    }
    free(data);
    free(crcs);

    /* Read back with and without O_DIRECT, whichever way it was written. */
    for (int read_direct = 0; read_direct <= 1; read_direct++) {
        read_check rc = read_check_for(size);
        assert_int_equal(cpri_bfile_read(path, size, read_direct, check_block, &rc),
                         CPR_OK);
        assert_int_equal(rc.mismatches, 0);
        assert_int_equal(rc.blocks, want_blocks);
        assert_int_equal(rc.bytes, size);
    }
    free(path);
}

static const size_t sizes[] = {
    0, 1, 4095, 4096, CPR_BLOB_BLOCK - 1, CPR_BLOB_BLOCK,
    3 * (size_t)CPR_BLOB_BLOCK + 12345,
};

/* Appends from a thread that exits with its writes in flight, finished by
 * another (ckptd: a PutRows handler's thread ends with the stream, the
 * Commit's thread finishes the segment). Linux cancels the io_uring
 * requests a task submitted when it exits (-ECANCELED: "write ...:
 * Operation canceled" at commit, seen under load); the rings' own thread
 * submits, so none is. */
typedef struct appender {
    cpri_bfile_writer *w;
    const unsigned char *data;
    size_t len;
    cpr_status st;
} appender;

static void *append_and_exit(void *arg)
{
    appender *a = arg;
    a->st = cpri_bfile_append(a->w, a->data, a->len);
    return NULL;
}

static void test_writes_outlive_the_thread_that_submitted_them(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-blobio");
    size_t len = (size_t)24 << 20;
    unsigned char *data = make_pattern(len);
    for (int round = 0; round < 8; round++) {
        char name[32];
        snprintf(name, sizeof name, "exit-%d", round);
        char *path = path_in(dir, name);
        cpri_bfile_writer *w = NULL;
        assert_status(CPR_OK, cpri_bfile_create(path, 1, 0, &w));
        appender a = {.w = w, .data = data, .len = len};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, append_and_exit, &a), 0);
        assert_int_equal(pthread_join(t, NULL), 0); /* gone, writes maybe in flight */
        assert_status(CPR_OK, a.st);
        uint64_t size = 0;
        assert_status(CPR_OK, cpri_bfile_finish(w, 1, &size, NULL, NULL));
        assert_int_equal(size, len);
        free(path);
    }
    free(data);
    tu_rmtree(dir);
    free(dir);
}

static void test_round_trip_buffered(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-blobio");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        round_trip(dir, sizes[i], 0);
    tu_rmtree(dir);
    free(dir);
}

static void test_round_trip_direct(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-blobio");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        round_trip(dir, sizes[i], 1);
    tu_rmtree(dir);
    free(dir);
}

static void test_without_crcs(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-blobio");
    char *path = path_in(dir, "nocrc");
    size_t size = 2 * (size_t)CPR_BLOB_BLOCK + 5;
    uint64_t written = 0;
    write_file(path, size, 1, 0, &written, NULL, NULL);
    assert_int_equal(written, size);
    read_check rc = read_check_for(size);
    assert_int_equal(cpri_bfile_read(path, size, 1, check_block, &rc), CPR_OK);
    assert_int_equal(rc.mismatches, 0);
    assert_int_equal(rc.bytes, size);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

static void test_wrong_size_is_corrupt(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-blobio");
    char *path = path_in(dir, "sized");
    size_t size = (size_t)CPR_BLOB_BLOCK + 100;
    uint64_t written = 0;
    write_file(path, size, 0, 0, &written, NULL, NULL);
    const uint64_t wrong[] = {0, 1, size - 1, size + 1, 2 * (uint64_t)CPR_BLOB_BLOCK};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        for (int direct = 0; direct <= 1; direct++) {
            read_check rc = read_check_for(wrong[i]);
            assert_int_equal(cpri_bfile_read(path, wrong[i], direct, check_block, &rc),
                             CPR_CORRUPT);
        }
    }
    /* The right size still reads. */
    read_check rc = read_check_for(size);
    assert_int_equal(cpri_bfile_read(path, size, 0, check_block, &rc), CPR_OK);
    assert_int_equal(rc.mismatches, 0);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

static void test_missing_is_corrupt(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-blobio");
    char *path = path_in(dir, "never-written");
    for (int direct = 0; direct <= 1; direct++) {
        read_check rc = read_check_for(10);
        assert_int_equal(cpri_bfile_read(path, 10, direct, check_block, &rc),
                         CPR_CORRUPT);
        assert_int_equal(rc.blocks, 0);
    }
    free(path);
    tu_rmtree(dir);
    free(dir);
}

static void test_callback_error_stops(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-blobio");
    char *path = path_in(dir, "stop");
    size_t size = 4 * (size_t)CPR_BLOB_BLOCK + 1;
    uint64_t written = 0;
    write_file(path, size, 0, 0, &written, NULL, NULL);
    for (int direct = 0; direct <= 1; direct++) {
        read_check rc = read_check_for(size);
        rc.fail_at = 1;
        rc.fail_status = CPR_TIMEOUT;
        assert_int_equal(cpri_bfile_read(path, size, direct, check_block, &rc),
                         CPR_TIMEOUT);
        assert_int_equal(rc.blocks, 2); /* blocks 0 and 1, nothing after */
        assert_int_equal(rc.mismatches, 0);
    }
    free(path);
    tu_rmtree(dir);
    free(dir);
}

static void test_discard_removes_file(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-blobio");
    for (int direct = 0; direct <= 1; direct++) {
        char *path = path_in(dir, direct ? "discard-direct" : "discard");
        size_t size = 2 * (size_t)CPR_BLOB_BLOCK + 777; /* blocks in flight */
        unsigned char *data = make_pattern(size);
        cpri_bfile_writer *w = NULL;
        assert_int_equal(cpri_bfile_create(path, direct, 1, &w), CPR_OK);
        assert_true(file_exists(path));
        assert_int_equal(cpri_bfile_append(w, data, size), CPR_OK);
        cpri_bfile_discard(w);
        assert_false(file_exists(path));
        free(data);
        free(path);
    }
    cpri_bfile_discard(NULL); /* no-op */
    tu_rmtree(dir);
    free(dir);
}

static void test_create_truncates(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-blobio");
    char *path = path_in(dir, "again");
    uint64_t written = 0;
    write_file(path, 2 * (size_t)CPR_BLOB_BLOCK, 1, 0, &written, NULL, NULL);
    assert_int_equal(file_size(path), 2 * (uint64_t)CPR_BLOB_BLOCK);
    write_file(path, 10, 1, 0, &written, NULL, NULL);
    assert_int_equal(written, 10);
    assert_int_equal(file_size(path), 10);
    read_check rc = read_check_for(10);
    assert_int_equal(cpri_bfile_read(path, 10, 1, check_block, &rc), CPR_OK);
    assert_int_equal(rc.mismatches, 0);
    assert_int_equal(rc.bytes, 10);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

static void test_create_in_missing_dir_fails(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-blobio");
    char *path = path_in(dir, "no/such/dir/file");
    cpri_bfile_writer *w = NULL;
    assert_int_equal(cpri_bfile_create(path, 0, 1, &w), CPR_IO);
    assert_null(w); /* out-parameters are written only on success */
    free(path);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_outlive_the_thread_that_submitted_them),
        cmocka_unit_test(test_round_trip_buffered),
        cmocka_unit_test(test_round_trip_direct),
        cmocka_unit_test(test_without_crcs),
        cmocka_unit_test(test_wrong_size_is_corrupt),
        cmocka_unit_test(test_missing_is_corrupt),
        cmocka_unit_test(test_callback_error_stops),
        cmocka_unit_test(test_discard_removes_file),
        cmocka_unit_test(test_create_truncates),
        cmocka_unit_test(test_create_in_missing_dir_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
