/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Parts belong to their writers (issue #11; ckptd/leases.h), on the real
 * daemon: a second client that knows a part's id but not its lease cannot
 * write rows or blobs into it, commit it or abort it with a lease of its
 * own guessing; each attempt is PERMISSION_DENIED and the part is exactly
 * as its writer left it, whose commit then reports what it sent. An abort
 * without a lease is the documented override (no --auth-file here). Through
 * the client library: the writer's part commits with every row it queued
 * while another client tries to commit it from under it.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/client.h"
#include "cpr/crc32c.h"
#include "testutil.h"

static cpr_status put_with(cpri_rpc *rpc, const cpr_part_id *id, uint64_t lease, uint64_t first,
                           size_t n)
{
    cpri_rpc_stream *s;
    assert_status(CPR_OK, cpri_rpc_stream_open(rpc, CH_SVC "PutRows", CH_TIMEOUT_S, &s));
    cpr_status st = ch_send_rows(s, id, lease, first, n);
    cpr_status end = cpri_rpc_stream_finish(s, NULL, NULL);
    return end != CPR_OK ? end : st;
}

static cpr_status blob_with(cpri_rpc *rpc, const cpr_part_id *id, uint64_t lease)
{
    static const char data[] = "not yours";
    return ch_put_blob(rpc, id, lease, data, sizeof data);
}

static cpr_status unary_with(cpri_rpc *rpc, const cpr_part_id *id, uint64_t lease, int commit,
                             uint64_t rows)
{
    uint8_t *buf;
    size_t len;
    if (commit)
        assert_status(CPR_OK, cpri_wire_commit_encode(id, lease, rows, &buf, &len));
    else
        assert_status(CPR_OK, cpri_wire_abort_encode(id, lease, &buf, &len));
    return ch_unary(rpc, commit ? CH_SVC "Commit" : CH_SVC "Abort", buf, len);
}

/* The part's rows as List reports them (and that it is still open). */
static uint64_t open_rows(cpri_rpc *rpc, const char *job)
{
    uint8_t *req, *resp = NULL;
    size_t len, n = 0;
    cpr_part_info *parts = NULL;
    uint64_t cut, rows = UINT64_MAX;
    assert_status(CPR_OK, cpri_wire_list_encode(job, &req, &len));
    assert_status(CPR_OK, cpri_rpc_unary(rpc, CH_SVC "List", req, len, CH_TIMEOUT_S, &resp, &n));
    free(req);
    size_t count = 0;
    assert_status(CPR_OK, cpri_wire_list_response_decode(resp, n, &parts, &count, &cut));
    free(resp);
    if (count == 1 && !parts[0].committed)
        rows = parts[0].rows;
    free(parts);
    return rows;
}

/* A Begin of part (job, 0, ckpt) carrying begin token `token`; its lease. */
static cpr_status begin_token(cpri_rpc *rpc, const char *job, uint64_t ckpt, uint64_t token,
                              uint64_t *lease)
{
    return ch_begin_token(rpc, job, 0, 1, ckpt, CPR_KIND_FULL, token, lease);
}

/* leases.h L4: a writer that did not hear its Begin's answer sends it again
 * under the same token and gets the part's lease; another token, or none,
 * is ALREADY_EXISTS as before; once committed, even the same token is. */
static void test_begin_again_under_its_token(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-leases-token");
    ch_daemon d;
    cpri_rpc *rpc;
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    uint64_t lease = 0, again = 0, other = 0;
    const uint64_t token = 0x5eed5eed12345678ull;
    assert_status(CPR_OK, begin_token(rpc, "tok", 1, token, &lease));
    assert_true(lease != 0);
    assert_status(CPR_OK, begin_token(rpc, "tok", 1, token, &again));
    assert_int_equal(again, lease);
    assert_status(CPR_ALREADY_EXISTS, begin_token(rpc, "tok", 1, token + 1, &other));
    assert_status(CPR_ALREADY_EXISTS, begin_token(rpc, "tok", 1, 0, &other));
    cpr_part_id id = {"tok", 0, 1};
    assert_status(CPR_OK, put_with(rpc, &id, lease, 0, 50));
    assert_status(CPR_OK, unary_with(rpc, &id, lease, 1, 50));
    assert_status(CPR_ALREADY_EXISTS, begin_token(rpc, "tok", 1, token, &other));
    /* Without a token, a part's Begin sent twice stays refused (no writer
     * can be told from another). */
    assert_status(CPR_OK, begin_token(rpc, "tok", 2, 0, &lease));
    assert_status(CPR_ALREADY_EXISTS, begin_token(rpc, "tok", 2, 0, &other));
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

static void test_foreign_requests_change_nothing(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-leases");
    ch_daemon d;
    cpri_rpc *writer, *other;
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &writer));
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &other));
    cpr_part_id id = {"owned", 0, 1};
    uint64_t lease = 0;
    assert_status(CPR_OK, ch_begin_leased(writer, "owned", 0, 1, 1, CPR_KIND_FULL, &lease));
    assert_status(CPR_OK, put_with(writer, &id, lease, 0, 100));
    assert_int_equal(open_rows(other, "owned"), 100);

    /* No lease, and a guessed one: refused, naming the reason; nothing
     * lands, and the refused stream does not abort the writer's part. */
    const uint64_t wrong[] = {0, lease ^ 1, lease + 12345};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        assert_status(CPR_PERMISSION_DENIED, put_with(other, &id, wrong[i], 100, 50));
        assert_non_null(strstr(cpr_errmsg(), "belongs to the writer"));
        assert_status(CPR_PERMISSION_DENIED, blob_with(other, &id, wrong[i]));
        assert_status(CPR_PERMISSION_DENIED, unary_with(other, &id, wrong[i], 1, 100));
        if (wrong[i]) /* lease 0 is the override, below */
            assert_status(CPR_PERMISSION_DENIED, unary_with(other, &id, wrong[i], 0, 0));
        assert_int_equal(open_rows(other, "owned"), 100);
    }
    /* The writer goes on; its commit is of exactly what it sent. */
    assert_status(CPR_OK, put_with(writer, &id, lease, 100, 100));
    assert_status(CPR_OK, unary_with(writer, &id, lease, 1, 200));
    uint64_t rows = 0;
    int bad = 0;
    assert_status(CPR_OK, ch_restore(other, "owned", 0, 1, &rows, &bad));
    assert_int_equal(rows, 200);
    assert_false(bad);
    /* Once committed, the lease is spent: even the writer cannot commit
     * again (the part is no longer open). */
    assert_status(CPR_FAILED_PRECONDITION, unary_with(writer, &id, lease, 1, 200));

    /* A part begun again after an abort gets a new lease; the old one is
     * refused. Abort by id (lease 0) is the override ckptd allows without
     * --auth-file. */
    cpr_part_id two = {"owned", 0, 2};
    uint64_t first = 0, second = 0;
    assert_status(CPR_OK, ch_begin_leased(writer, "owned", 0, 1, 2, CPR_KIND_FULL, &first));
    assert_status(CPR_OK, unary_with(other, &two, 0, 0, 0));
    assert_status(CPR_OK, ch_begin_leased(writer, "owned", 0, 1, 2, CPR_KIND_FULL, &second));
    assert_true(second != first);
    assert_status(CPR_PERMISSION_DENIED, put_with(writer, &two, first, 0, 10));
    assert_status(CPR_OK, put_with(writer, &two, second, 0, 10));
    assert_status(CPR_OK, unary_with(writer, &two, second, 1, 10));

    cpri_rpc_close(writer);
    cpri_rpc_close(other);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

static int thousand_landed(void *ctx)
{
    return open_rows(ctx, "hijack") == 1000;
}

/* The hijack of issue #11 through the client library: the writer queues
 * 2,000 rows; a second client that knows the id tries to commit the part
 * at 1,000. It cannot, and the writer's commit lands all 2,000. */
static void test_library_commit_is_the_writers(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-hijack");
    char target[512];
    ch_daemon d;
    ch_start(&d, dir);
    snprintf(target, sizeof target, "grpc://%s", d.addr);
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, NULL, &c));
    cpr_part_spec spec = {.id = {"hijack", 0, 1}, .kind = CPR_KIND_FULL, .num_shards = 1,
                          .tables = &ch_table, .n_tables = 1};
    cpr_part *p = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    uint64_t ids[2000];
    float *values = calloc(2000 * ch_table.dim, sizeof(float)), state[2000];
    assert_non_null(values);
    cpr_row_batch b;
    for (size_t i = 0; i < 2000; i++)
        ids[i] = i;
    tu_fill_batch(&b, ch_table.table, ids, 1000, ch_table.dim, ch_table.state_dim, 1, values,
                  state);
    assert_status(CPR_OK, cpr_part_put_rows(p, &b));
    cpri_rpc *other;
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &other));
    assert_true(ch_poll(thousand_landed, other, CH_TIMEOUT_S)); /* the first 1,000 landed */
    assert_status(CPR_PERMISSION_DENIED, unary_with(other, &spec.id, 1, 1, 1000));
    tu_fill_batch(&b, ch_table.table, ids + 1000, 1000, ch_table.dim, ch_table.state_dim, 1,
                  values + 1000 * ch_table.dim, state + 1000);
    assert_status(CPR_OK, cpr_part_put_rows(p, &b));
    assert_status(CPR_OK, cpr_part_commit(&p));
    cpr_part_info *parts = NULL;
    size_t n = 0;
    assert_status(CPR_OK, cpr_client_list(c, "hijack", &parts, &n));
    assert_int_equal(n, 1);
    assert_true(parts[0].committed);
    assert_int_equal(parts[0].rows, 2000);
    free(parts);
    free(values);
    cpri_rpc_close(other);
    cpr_client_close(c);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* A commit names the blobs its writer sent: a part holding other blobs (a
 * chunk lost, or never sent) is refused and stays open; the right count and
 * bytes commit it (issue #11). */
static void test_commit_checks_blobs(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-commit-blobs");
    ch_daemon d;
    cpri_rpc *rpc;
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    cpr_part_id id = {"blobs", 0, 1};
    uint64_t lease = 0;
    static const char data[] = "0123456789";
    assert_status(CPR_OK, ch_begin_leased(rpc, "blobs", 0, 1, 1, CPR_KIND_FULL, &lease));
    assert_status(CPR_OK, ch_put_blob(rpc, &id, lease, data, sizeof data));
    static const uint64_t wrong[][2] = {{1, sizeof data + 5}, {2, sizeof data}, {0, 0}};
    uint8_t *buf;
    size_t len;
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        assert_status(CPR_OK, cpri_wire_commit_encode_blobs(&id, lease, 0, wrong[i][0],
                                                            wrong[i][1], &buf, &len));
        assert_status(CPR_INVALID_ARGUMENT, ch_unary(rpc, CH_SVC "Commit", buf, len));
        assert_non_null(strstr(cpr_errmsg(), "blobs"));
        assert_int_equal(open_rows(rpc, "blobs"), 0); /* still open */
    }
    assert_status(CPR_OK, cpri_wire_commit_encode_blobs(&id, lease, 0, 1, sizeof data, &buf,
                                                        &len));
    assert_status(CPR_OK, ch_unary(rpc, CH_SVC "Commit", buf, len));
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_foreign_requests_change_nothing),
        cmocka_unit_test(test_begin_again_under_its_token),
        cmocka_unit_test(test_commit_checks_blobs),
        cmocka_unit_test(test_library_commit_is_the_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
