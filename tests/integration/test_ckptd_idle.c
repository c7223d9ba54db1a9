/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd and clients that go quiet, end to end on the real daemon: a part
 * begun by a client that then vanishes is aborted after --idle-part-timeout-s
 * (committed data untouched, a late Commit refused); a client that holds a
 * PutRows stream open and sends nothing loses the call (its handler thread
 * is freed: with --threads 1 the daemon serves others again) and its part;
 * so does a client that stops reading a Restore (the call, that is), and one
 * that never reads a unary answer (a 1 MiB recovery record); a
 * stream that writes to a 65th part is refused with RESOURCE_EXHAUSTED and
 * leaves nothing half-written; a stream to a daemon that is not there fails
 * with gRPC's UNAVAILABLE and reason, not a generic message.
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
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>

#include "ckptd_harness.h"
#include "testutil.h"

#define QUIET_LIMIT_S 20.0 /* deadline for the daemon to act on a 1 s timeout */

static cpr_status send_rows(cpri_rpc_stream *s, const cpr_part_id *id, uint64_t first,
                            size_t n)
{
    return ch_send_rows(s, id, ch_lease_of(id), first, n);
}

/* A client dies after Begin, before any stream: the part is aborted. */
static void test_idle_part_reaped(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-idle-part");
    const char *const idle_1s[] = {"--idle-part-timeout-s", "1", NULL};
    ch_daemon d;
    cpri_rpc *rpc;
    cpr_part_id kept = {"kept", 0, 1}, idle = {"idle", 0, 1};
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    assert_status(CPR_OK, ch_begin(rpc, "kept", 1));
    assert_status(CPR_OK, ch_put_rows(rpc, &kept, 0, 500, 0, NULL, NULL));
    assert_status(CPR_OK, ch_commit(rpc, &kept, 500));
    cpri_rpc_close(rpc);
    ch_stop(&d);

    ch_start_args(&d, dir, idle_1s);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    assert_status(CPR_OK, ch_begin(rpc, "idle", 1)); /* ... and nothing more */
    assert_true(ch_wait_no_open_parts(rpc, "idle", QUIET_LIMIT_S));
    cpr_status late = ch_commit(rpc, &idle, 0);
    assert_true(late == CPR_FAILED_PRECONDITION || late == CPR_NOT_FOUND);
    uint64_t rows = 0;
    int bad = 0;
    assert_status(CPR_OK, ch_restore(rpc, "kept", 0, 1, &rows, &bad));
    assert_int_equal(rows, 500);
    assert_false(bad);
    assert_status(CPR_OK, ch_begin(rpc, "idle", 1)); /* the id is free again */
    cpri_rpc_close(rpc);
    ch_stop(&d); /* exit 0: the reaper stops at once */
    tu_rmtree(dir);
    free(dir);
}

static int serving(void *ctx)
{
    uint8_t *resp = NULL;
    size_t n = 0;
    cpr_status st = cpri_rpc_unary(ctx, "/grpc.health.v1.Health/Check", (const uint8_t *)"", 0,
                                  CH_TIMEOUT_S, &resp, &n);
    free(resp);
    return st == CPR_OK;
}

/* Refused because a call's handler was still winding down after its answer
 * (the daemon counts handler threads; --threads 1 below)? */
static int busy(cpr_status st)
{
    return st == CPR_UNAVAILABLE && strstr(cpr_errmsg(), "maximum of 1 calls") != NULL;
}

/* ch_poll's context for a call on one part: its last status. */
typedef struct part_try {
    cpri_rpc *rpc;
    const cpr_part_id *id;
    cpr_status st;
} part_try;

static int commit_answered(void *ctx)
{
    part_try *t = ctx;
    t->st = ch_commit(t->rpc, t->id, 100);
    return !busy(t->st);
}

/* Open a PutRows stream, send one batch and go quiet until the daemon
 * serves others again; then the stream's status. */
static cpr_status stall_once(cpri_rpc *rpc, const cpr_part_id *id)
{
    cpri_rpc_stream *s;
    /* The client's own deadline is far away: only the daemon can end this. */
    cpr_status st = cpri_rpc_stream_open(rpc, CH_SVC "PutRows", 600.0, &s);
    if (st)
        return st;
    assert_status(CPR_OK, send_rows(s, id, 0, 100));
    assert_true(ch_poll(serving, rpc, QUIET_LIMIT_S));
    return cpri_rpc_stream_finish(s, NULL, NULL);
}

/* ch_poll's condition: one stall that the daemon did not refuse as busy.
 * The part is begun in the same try (again if the daemon reaped it while
 * the tries were refused: it sat idle past the 1 s limit). */
static int stalled(void *ctx)
{
    part_try *t = ctx;
    t->st = ch_begin(t->rpc, t->id->job, 1);
    if (busy(t->st))
        return 0;
    if (t->st != CPR_OK && t->st != CPR_ALREADY_EXISTS)
        return 1; /* not what this test is about: the assert below says so */
    t->st = stall_once(t->rpc, t->id);
    return !busy(t->st);
}

/* A client keeps a PutRows stream open and sends nothing after one batch. */
static void test_stalled_stream_cancelled(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-idle-stream");
    /* One call at a time: while the stalled stream holds its handler, every
     * other call is refused; serving again proves the handler was freed. */
    const char *const args[] = {"--idle-part-timeout-s", "1", "--threads", "1", NULL};
    ch_daemon d;
    cpri_rpc *rpc;
    cpr_part_id id = {"stall", 0, 1};
    ch_start_args(&d, dir, args);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    /* Busy: refused at its start, so it never stalled: again, for a time
     * rather than a count (a handler that just answered may not have left
     * its slot yet; under ASan on a loaded host 50 quick tries were not
     * enough once). */
    part_try t = {rpc, &id, CPR_OK};
    assert_true(ch_poll(stalled, &t, QUIET_LIMIT_S));
    cpr_status st = t.st;
    /* The daemon ended the call with its reason; the part went with it. */
    print_message("  stalled stream: %s: %s\n", cpr_status_name(st), cpr_errmsg());
    assert_int_equal(st, CPR_TIMEOUT);
    assert_non_null(strstr(cpr_errmsg(), "no message arrived on this stream for 1 s"));
    assert_true(ch_wait_no_open_parts(rpc, "stall", QUIET_LIMIT_S));
    part_try late = {rpc, &id, CPR_OK};
    assert_true(ch_poll(commit_answered, &late, QUIET_LIMIT_S));
    assert_status(CPR_FAILED_PRECONDITION, late.st);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* 64 MiB of rows: more than gRPC buffers for a reader that stalls
 * (4 MiB here, 35 MiB seen once in CI). */
#define BIG_ROWS 16384
#define BIG_DIM 1024

typedef struct slow_reader {
    cpri_rpc *rpc;
    uint64_t batches;
    int freed;     /* the daemon served others while this reader stalled */
} slow_reader;

/* Stalls on the first batch until the daemon has given up on the call. */
static cpr_status read_slowly(void *ctx, const uint8_t *msg, size_t len)
{
    slow_reader *r = ctx;
    (void)msg;
    (void)len;
    if (r->batches++ == 0)
        r->freed = ch_poll(serving, r->rpc, QUIET_LIMIT_S);
    return CPR_OK;
}

/* ch_poll's context for a restore read at once: its reader and status. */
typedef struct whole_try {
    cpri_rpc *rpc;
    const cpr_restore_query *q;
    slow_reader reader;
    cpr_status st;
} whole_try;

static int whole_answered(void *ctx)
{
    whole_try *t = ctx;
    uint8_t *buf;
    size_t len;
    t->reader = (slow_reader){.rpc = t->rpc, .batches = 1}; /* 1: does not stall */
    assert_status(CPR_OK, cpri_wire_restore_encode(t->q, &buf, &len));
    t->st = cpri_rpc_server_stream(t->rpc, CH_SVC "Restore", buf, len, 600.0, read_slowly,
                                   &t->reader);
    free(buf);
    return !busy(t->st);
}

/* A client stops reading a Restore: the daemon cancels it after the idle
 * timeout instead of blocking a handler thread until the client's deadline. */
static void test_stalled_restore_cancelled(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-idle-restore");
    const char *const args[] = {"--idle-part-timeout-s", "1", "--threads", "1", NULL};
    ch_daemon d;
    cpri_rpc *rpc;
    cpr_store *store;
    cpr_table_schema wide = {.table = 1, .rows = BIG_ROWS, .dim = BIG_DIM};
    cpr_part_spec spec = tu_part("big", 0, 1, 1, CPR_KIND_FULL, &wide, 1);
    uint64_t *ids = malloc(BIG_ROWS * sizeof *ids);
    tu_iota(ids, 0, BIG_ROWS);
    cpr_store_options no_sync = {.no_sync = 1};
    assert_status(CPR_OK, cpr_store_open(dir, &no_sync, &store)); /* written directly */
    assert_status(CPR_OK, tu_write_part(store, &spec, ids, BIG_ROWS, 1024, 0, 1));
    cpr_store_close(store);
    free(ids);

    ch_start_args(&d, dir, args); /* no call yet: the restore gets the only slot */
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    cpr_restore_query q = {.job = "big", .batch_rows = 256}; /* 1 MiB messages */
    slow_reader r = {.rpc = rpc};
    uint8_t *buf;
    size_t len;
    assert_status(CPR_OK, cpri_wire_restore_encode(&q, &buf, &len));
    cpr_status st = cpri_rpc_server_stream(rpc, CH_SVC "Restore", buf, len, 600.0, read_slowly,
                                          &r);
    free(buf);
    print_message("  stalled restore: %llu batches, %s: %s\n", (unsigned long long)r.batches,
                  cpr_status_name(st), cpr_errmsg());
    assert_true(r.freed);
    assert_int_equal(st, CPR_TIMEOUT);
    assert_non_null(strstr(cpr_errmsg(), "read no message"));
    /* Cut off, not finished: fewer messages than the same restore read
     * at once. (gRPC may buffer many of them for a reader that stalls: its
     * window grows with BDP probing, so no fixed bound holds.) */
    /* The slot frees a moment after the last Health call's client heard its
     * answer (the handler ends after it): a refusal as busy is retried. */
    whole_try whole = {.rpc = rpc, .q = &q};
    assert_true(ch_poll(whole_answered, &whole, QUIET_LIMIT_S));
    assert_status(CPR_OK, whole.st);
    print_message("  the whole restore: %llu messages\n",
                  (unsigned long long)whole.reader.batches - 1);
    assert_true(r.batches < whole.reader.batches - 1);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* A unary call whose answer is never read: the call sends its request,
 * never half-closes and asks for nothing back (gRPC's C core lets a client
 * do that), on a connection whose window does not grow. */
typedef struct unread_call {
    grpc_channel *ch;
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_metadata_array initial, trailing;
    grpc_status_code status;  /* the call's end, as the client hears it */
    grpc_slice details;
} unread_call;

static void start_unread(unread_call *u, const char *addr, const char *method,
                         const uint8_t *req, size_t len)
{
    grpc_init();
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    /* A window that does not grow: the answer cannot be sent unread. */
    grpc_arg arg[] = {{GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_BDP_PROBE, {.integer = 0}},
                      {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                       {.integer = 1}}};
    grpc_channel_args args = {2, arg};
    u->ch = grpc_channel_create(addr, creds, &args);
    grpc_channel_credentials_release(creds);
    u->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_slice m = grpc_slice_from_static_string(method);
    u->call = grpc_channel_create_call(u->ch, NULL, GRPC_PROPAGATE_DEFAULTS, u->cq, m, NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_slice_unref(m);
    grpc_slice body = grpc_slice_from_copied_buffer((const char *)req, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&body, 1);
    grpc_slice_unref(body);
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    assert_int_equal(grpc_call_start_batch(u->call, ops, 2, u, NULL), GRPC_CALL_OK);
    grpc_event ev = grpc_completion_queue_next(u->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    assert_int_equal(ev.type, GRPC_OP_COMPLETE);
    grpc_byte_buffer_destroy(bb);
    /* The call's metadata and status only (no message is ever asked for):
     * they come at once when the daemon refuses the call. */
    grpc_metadata_array_init(&u->initial);
    grpc_metadata_array_init(&u->trailing);
    grpc_op st[2];
    memset(st, 0, sizeof st);
    st[0].op = GRPC_OP_RECV_INITIAL_METADATA;
    st[0].data.recv_initial_metadata.recv_initial_metadata = &u->initial;
    st[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    st[1].data.recv_status_on_client.trailing_metadata = &u->trailing;
    st[1].data.recv_status_on_client.status = &u->status;
    st[1].data.recv_status_on_client.status_details = &u->details;
    assert_int_equal(grpc_call_start_batch(u->call, st, 2, &u->status, NULL), GRPC_CALL_OK);
}

/* 1 once the unread call has ended (its status is in u), 0 if it has not
 * within `seconds`. */
static int unread_ended(unread_call *u, double seconds)
{
    gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                      gpr_time_from_millis((int64_t)(seconds * 1000),
                                                           GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_next(u->cq, until, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT)
        return 0;
    assert_int_equal(ev.type, GRPC_OP_COMPLETE);
    assert_ptr_equal(ev.tag, &u->status);
    return 1;
}

/* Refused at once because the only slot was still taken (busy above)? */
static int unread_refused(const unread_call *u)
{
    char *why = grpc_slice_to_c_string(u->details);
    int refused = u->status == GRPC_STATUS_UNAVAILABLE && strstr(why, "maximum of 1 calls");
    gpr_free(why);
    return refused;
}

static void end_unread(unread_call *u)
{
    grpc_call_cancel(u->call, NULL); /* completes the status batch if still out */
    grpc_call_unref(u->call);
    grpc_completion_queue_shutdown(u->cq);
    while (grpc_completion_queue_next(u->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(u->cq);
    grpc_metadata_array_destroy(&u->initial);
    grpc_metadata_array_destroy(&u->trailing);
    grpc_slice_unref(u->details);
    grpc_channel_destroy(u->ch);
    grpc_shutdown();
}

/* A client that never reads a unary answer (1 MiB, far over the 64 KiB
 * HTTP/2 window it opened) nor ends its side of the call holds the daemon's
 * only call slot for the idle timeout, not for ever. */
static void test_unread_unary_answer_cancelled(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-idle-unary");
    const char *const args[] = {"--idle-part-timeout-s", "1", "--threads", "1", NULL};
    ch_daemon d;
    cpri_rpc *rpc;
    ch_start_args(&d, dir, args);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    size_t plan_len = 1 << 20;
    uint8_t *plan = malloc(plan_len), *buf;
    size_t len;
    memset(plan, 'p', plan_len);
    assert_status(CPR_OK, cpri_wire_put_recovery_encode("job", 0, plan, plan_len, &buf, &len));
    assert_status(CPR_OK, ch_unary(rpc, CH_SVC "PutRecovery", buf, len));
    free(plan);
    assert_status(CPR_OK, cpri_wire_get_recovery_encode("job", &buf, &len));
    /* The slot frees a moment after the last call's client heard its answer
     * (busy above): a GetRecovery refused for that is sent again, so that
     * the one below was admitted and held the slot. */
    unread_call u;
    int tries = 0, ended;
    for (;;) {
        start_unread(&u, d.addr, CH_SVC "GetRecovery", buf, len);
        tries++;
        /* Ended at once only if refused: an admitted one waits on its reader. */
        ended = unread_ended(&u, 0.5);
        if (!ended || !unread_refused(&u) || tries == 50)
            break;
        end_unread(&u);
    }
    free(buf);
    /* Admitted: its handler holds the slot, and the call stays open (its
     * answer cannot be sent), until the daemon gives up on it. (The daemon
     * then cancels it, but the client never hears that: the cancel's
     * trailers queue behind the answer's unsent bytes.) */
    print_message("  unread answer: admitted after %d tries\n", tries);
    assert_false(ended);
    /* A refusal slower than the 0.5 s above would look admitted: one more
     * look, and a call that ends refused after all fails the test rather
     * than passing it with no slot held. */
    assert_false(unread_ended(&u, 2.0) && unread_refused(&u));
    assert_true(ch_poll(serving, rpc, QUIET_LIMIT_S));
    end_unread(&u);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

#define WIDE_PARTS 65 /* one more than a stream may write to */

static void test_stream_part_limit(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-idle-wide");
    ch_daemon d;
    cpri_rpc *rpc;
    cpri_rpc_stream *s;
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    for (uint32_t shard = 0; shard < WIDE_PARTS; shard++)
        assert_status(CPR_OK, ch_begin_part(rpc, "wide", shard, WIDE_PARTS, 1, CPR_KIND_FULL));
    assert_status(CPR_OK, cpri_rpc_stream_open(rpc, CH_SVC "PutRows", CH_TIMEOUT_S, &s));
    cpr_status st = CPR_OK;
    for (uint32_t shard = 0; shard < WIDE_PARTS && st == CPR_OK; shard++) {
        cpr_part_id id = {"wide", shard, 1};
        st = send_rows(s, &id, shard * 10, 10);
    }
    st = cpri_rpc_stream_finish(s, NULL, NULL);
    assert_int_equal(st, CPR_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(cpr_errmsg(), "at most 64 parts"));

    /* The 64 parts the stream wrote to were aborted; the 65th was never
     * written to: still open, empty. */
    uint8_t *req, *resp;
    size_t len, resp_len, n;
    cpr_part_info *parts;
    uint64_t cut;
    assert_status(CPR_OK, cpri_wire_list_encode("wide", &req, &len));
    assert_status(CPR_OK, cpri_rpc_unary(rpc, CH_SVC "List", req, len, CH_TIMEOUT_S, &resp,
                                        &resp_len));
    free(req);
    assert_status(CPR_OK, cpri_wire_list_response_decode(resp, resp_len, &parts, &n, &cut));
    free(resp);
    assert_int_equal(n, 1);
    assert_int_equal(parts[0].shard, WIDE_PARTS - 1);
    assert_false(parts[0].committed);
    assert_int_equal(parts[0].rows, 0);
    free(parts);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* No daemon at the address: the stream's real status, not a guess. */
static void test_stream_open_reports_status(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-idle-gone");
    ch_daemon d;
    cpri_rpc *rpc;
    cpri_rpc_stream *s = NULL;
    ch_start(&d, dir);
    int held = ch_stop_held(&d); /* its port is now closed, and stays so */
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    /* The call fails as it starts (not wait-for-ready): the open says so. */
    assert_status(CPR_UNAVAILABLE, cpri_rpc_stream_open(rpc, CH_SVC "PutRows", CH_TIMEOUT_S, &s));
    assert_null(s);
    assert_null(strstr(cpr_errmsg(), "cannot start the stream"));
    assert_non_null(strstr(cpr_errmsg(), d.addr)); /* where, and gRPC's why */
    print_message("  refused stream: %s\n", cpr_errmsg());
    cpri_rpc_close(rpc);
    close(held);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_part_reaped),
        cmocka_unit_test(test_stalled_stream_cancelled),
        cmocka_unit_test(test_stalled_restore_cancelled),
        cmocka_unit_test(test_unread_unary_answer_cancelled),
        cmocka_unit_test(test_stream_part_limit),
        cmocka_unit_test(test_stream_open_reports_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
