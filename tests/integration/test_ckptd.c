/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd end to end: the real daemon process on 127.0.0.1 (port 0) with a
 * temporary data directory, driven over real gRPC. A checkpoint part goes
 * in (Begin, PutRows, PutBlob, Commit) and comes back byte-exact (List,
 * Restore, GetBlob); every error status is provoked and the daemon still
 * serves; SIGTERM stops it cleanly (exit 0); a restart on the same
 * directory serves the same committed data.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpr/crc32c.h"
#include "ckptd_harness.h"
#include "testutil.h"


static cpr_status put_blob(cpri_rpc *rpc, const cpr_part_id *id, const uint8_t *data, size_t n)
{
    cpri_rpc_stream *s;
    cpr_status st = cpri_rpc_stream_open(rpc, CH_SVC "PutBlob", CH_TIMEOUT_S, &s);
    assert_int_equal(st, CPR_OK);
    for (size_t off = 0; st == CPR_OK && off < n; off += 65536) {
        size_t k = n - off < 65536 ? n - off : 65536;
        uint8_t *buf;
        size_t len;
        assert_int_equal(cpri_wire_chunk_encode(id, ch_lease_of(id), "dense", off, 0, data + off, k,
                                               cpr_crc32c(0, data + off, k), &buf, &len),
                         CPR_OK);
        st = cpri_rpc_stream_send(s, buf, len);
        free(buf);
    }
    cpr_status end = cpri_rpc_stream_finish(s, NULL, NULL);
    return end != CPR_OK ? end : st;
}

typedef struct restored {
    uint64_t rows, next_id;
    int bad;
} restored;

static cpr_status check_rows(void *ctx, const uint8_t *msg, size_t len)
{
    restored *r = ctx;
    cpri_wire_rows w;
    assert_int_equal(cpri_wire_rows_decode(msg, len, &w), CPR_OK);
    if (cpr_crc32c_rows(w.batch.ids, w.batch.n, w.batch.values, w.batch.values_count,
                        w.batch.state, w.batch.state_count) != w.batch.crc32c)
        r->bad = 1;
    for (size_t i = 0; i < w.batch.n; i++, r->rows++, r->next_id++) {
        r->bad |= w.batch.ids[i] != r->next_id;
        for (uint32_t j = 0; j < ch_table.dim; j++)
            r->bad |= w.batch.values[i * ch_table.dim + j] != tu_value(1, r->next_id, 1, j);
        r->bad |= w.batch.state[i] != tu_state(1, r->next_id, 1, 0);
    }
    cpri_wire_rows_release(&w);
    return CPR_OK;
}

static void check_restore(cpri_rpc *rpc, uint64_t want_rows)
{
    cpr_restore_query q = {.job = "job1", .batch_rows = 333};
    restored r = {0};
    uint8_t *buf;
    size_t len;
    assert_int_equal(cpri_wire_restore_encode(&q, &buf, &len), CPR_OK);
    assert_int_equal(cpri_rpc_server_stream(rpc, CH_SVC "Restore", buf, len, CH_TIMEOUT_S, check_rows, &r),
                     CPR_OK);
    free(buf);
    assert_false(r.bad);
    assert_int_equal(r.rows, want_rows);
}

static void check_blob(cpri_rpc *rpc, const cpr_part_id *id, const uint8_t *want, size_t n)
{
    uint8_t *got = NULL;
    size_t len = 0;
    assert_int_equal(ch_get_blob(rpc, id, &got, &len), CPR_OK);
    assert_int_equal(len, n);
    assert_memory_equal(got, want, n);
    free(got);
}

static void check_health(cpri_rpc *rpc)
{
    uint8_t *resp = NULL;
    size_t n = 0;
    assert_int_equal(cpri_rpc_unary(rpc, "/grpc.health.v1.Health/Check", (const uint8_t *)"", 0,
                                   CH_TIMEOUT_S, &resp, &n), CPR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(resp[0], 0x08);
    assert_int_equal(resp[1], 0x01); /* SERVING */
    free(resp);
}

static void provoke_errors(cpri_rpc *rpc, const cpr_part_id *committed)
{
    uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    uint8_t *copy = malloc(sizeof garbage);
    memcpy(copy, garbage, sizeof garbage);
    assert_int_equal(ch_unary(rpc, CH_SVC "Begin", copy, sizeof garbage), CPR_INVALID_ARGUMENT);
    assert_int_equal(ch_begin(rpc, "bad/name", 1), CPR_INVALID_ARGUMENT);
    assert_int_equal(ch_begin(rpc, "job1", 1), CPR_ALREADY_EXISTS);
    assert_int_equal(ch_commit(rpc, committed, 250), CPR_FAILED_PRECONDITION);

    cpr_restore_query q = {.job = "nosuchjob"};
    restored r = {0};
    uint8_t *buf;
    size_t len;
    assert_int_equal(cpri_wire_restore_encode(&q, &buf, &len), CPR_OK);
    assert_int_equal(cpri_rpc_server_stream(rpc, CH_SVC "Restore", buf, len, CH_TIMEOUT_S, check_rows, &r),
                     CPR_NOT_FOUND);
    free(buf);

    /* A damaged batch: DATA_LOSS, and the stream's part is aborted. */
    cpr_part_id two = {"job1", 0, 2};
    assert_int_equal(ch_begin(rpc, "job1", 2), CPR_OK);
    assert_int_equal(ch_put_rows(rpc, &two, 0, 150, 1, NULL, NULL), CPR_CORRUPT);
    assert_int_equal(ch_commit(rpc, &two, 100), CPR_FAILED_PRECONDITION);
    check_health(rpc); /* still serving */
}

static void test_ckptd_end_to_end(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-ckptd");
    ch_daemon d;
    cpri_rpc *rpc;
    size_t blob_len = 300000;
    uint8_t *blob = malloc(blob_len);
    for (size_t i = 0; i < blob_len; i++)
        blob[i] = tu_blob_byte(0, 1, i);
    cpr_part_id id = {"job1", 0, 1};

    ch_start(&d, dir);
    assert_int_equal(cpri_rpc_open(d.addr, &rpc), CPR_OK);
    check_health(rpc);
    assert_int_equal(ch_begin(rpc, "job1", 1), CPR_OK);
    assert_int_equal(ch_put_rows(rpc, &id, 0, 2500, 0, NULL, NULL), CPR_OK);
    assert_int_equal(put_blob(rpc, &id, blob, blob_len), CPR_OK);
    assert_int_equal(ch_commit(rpc, &id, 2500), CPR_OK);

    uint8_t *req, *resp;
    size_t len, resp_len, n;
    cpr_part_info *parts;
    uint64_t cut;
    assert_int_equal(cpri_wire_list_encode("job1", &req, &len), CPR_OK);
    assert_int_equal(cpri_rpc_unary(rpc, CH_SVC "List", req, len, CH_TIMEOUT_S, &resp, &resp_len), CPR_OK);
    free(req);
    assert_int_equal(cpri_wire_list_response_decode(resp, resp_len, &parts, &n, &cut), CPR_OK);
    free(resp);
    assert_int_equal(n, 1);
    assert_int_equal(parts[0].rows, 2500);
    assert_true(parts[0].committed && parts[0].consistent);
    assert_int_equal(cut, 1);
    free(parts);

    check_restore(rpc, 2500);
    check_blob(rpc, &id, blob, blob_len);
    provoke_errors(rpc, &id);
    cpri_rpc_close(rpc);
    ch_stop(&d);

    ch_start(&d, dir); /* the same directory after a clean stop */
    assert_int_equal(cpri_rpc_open(d.addr, &rpc), CPR_OK);
    check_restore(rpc, 2500);
    check_blob(rpc, &id, blob, blob_len);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    free(blob);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckptd_end_to_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
