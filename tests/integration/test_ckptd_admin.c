/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd's operations RPCs end to end, on the real daemon over real gRPC:
 * ListJobs (sorted, open parts count, aborted ones vanish), Stats decoded
 * back into the store's counters, Verify (clean on an intact store; a byte
 * of a committed blob or table file damaged on disk while the daemon is
 * stopped is reported as problems in an OK answer; at most 1000 details of
 * 1001 problems), and Gc with keep (0: the daemon's --retain) and with an
 * explicit floor: rows as of every retained checkpoint restore exactly,
 * older ones are refused, and a floor that cannot be one is refused.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/crc32c.h"
#include "testutil.h"

/* ---- calls ---------------------------------------------------------------------- */

static cpr_status list_jobs(cpri_rpc *rpc, char ***jobs, size_t *n)
{
    uint8_t *req, *resp = NULL;
    size_t len, resp_len = 0;
    assert_status(CPR_OK, cpri_wire_list_jobs_encode(&req, &len));
    cpr_status st = cpri_rpc_unary(rpc, CH_SVC "ListJobs", req, len, CH_TIMEOUT_S, &resp,
                                  &resp_len);
    free(req);
    if (st == CPR_OK)
        assert_status(CPR_OK, cpri_wire_list_jobs_response_decode(resp, resp_len, jobs, n));
    free(resp);
    return st;
}

static void assert_jobs(cpri_rpc *rpc, const char *const *want, size_t n_want)
{
    char **jobs = NULL;
    size_t n = 0;
    assert_status(CPR_OK, list_jobs(rpc, &jobs, &n));
    assert_int_equal(n, n_want);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(jobs[i], want[i]);
    assert_null(jobs[n]); /* NULL-terminated */
    cpr_names_free(jobs, n);
}

typedef struct problems {
    size_t n;
    int blob_named, not_blob; /* a detail about the blob; one about anything else */
} problems;

static void on_problem(void *ctx, const char *what, const char *where)
{
    problems *p = ctx;
    p->n++;
    assert_true(what[0] != '\0' && where[0] != '\0');
    if (strstr(where, "blob dense"))
        p->blob_named = 1;
    else
        p->not_blob = 1;
}

static cpr_status verify(cpri_rpc *rpc, const char *job, cpr_verify_report *rep, problems *p)
{
    uint8_t *req, *resp = NULL;
    size_t len, resp_len = 0;
    assert_status(CPR_OK, cpri_wire_verify_encode(job, &req, &len));
    /* Reading 1001 blobs under ASan on a loaded 2-core machine: a deadline
     * well past CH_TIMEOUT_S. */
    cpr_status st = cpri_rpc_unary(rpc, CH_SVC "Verify", req, len, 180.0, &resp, &resp_len);
    free(req);
    memset(p, 0, sizeof *p);
    if (st == CPR_OK)
        assert_status(CPR_OK, cpri_wire_verify_response_decode(resp, resp_len, rep, on_problem,
                                                               p));
    free(resp);
    return st;
}

static cpr_status gc(cpri_rpc *rpc, const char *job, uint32_t keep, uint64_t floor,
                     cpr_gc_report *rep)
{
    uint8_t *req, *resp = NULL;
    size_t len, resp_len = 0;
    assert_status(CPR_OK, cpri_wire_gc_encode(job, keep, floor, &req, &len));
    cpr_status st = cpri_rpc_unary(rpc, CH_SVC "Gc", req, len, CH_TIMEOUT_S, &resp, &resp_len);
    free(req);
    if (st == CPR_OK)
        assert_status(CPR_OK, cpri_wire_gc_response_decode(resp, resp_len, rep));
    free(resp);
    return st;
}

static void stats(cpri_rpc *rpc, cpr_store_stats *out)
{
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    assert_status(CPR_OK, cpri_rpc_unary(rpc, CH_SVC "Stats", (const uint8_t *)"", 0,
                                        CH_TIMEOUT_S, &resp, &resp_len));
    assert_status(CPR_OK, cpri_wire_stats_response_decode(resp, resp_len, out));
    free(resp);
}

/* Begin, stream rows [0, n) valued at the part's checkpoint, commit. */
static void write_part(cpri_rpc *rpc, const char *job, uint64_t ckpt, size_t n)
{
    cpr_part_id id = {job, 0, ckpt};
    assert_status(CPR_OK, ch_begin(rpc, job, ckpt));
    assert_status(CPR_OK, ch_put_rows(rpc, &id, 0, n, 0, NULL, NULL));
    assert_status(CPR_OK, ch_commit(rpc, &id, n));
}

static void put_blobs(cpri_rpc *rpc, const cpr_part_id *id, size_t n_blobs, size_t bytes)
{
    uint8_t *data = malloc(bytes);
    cpri_rpc_stream *s;
    for (size_t i = 0; i < bytes; i++)
        data[i] = tu_blob_byte(id->shard, id->checkpoint, i);
    assert_status(CPR_OK, cpri_rpc_stream_open(rpc, CH_SVC "PutBlob", CH_TIMEOUT_S, &s));
    for (size_t b = 0; b < n_blobs; b++) {
        char name[32] = "dense";
        if (n_blobs > 1)
            snprintf(name, sizeof name, "b%04zu", b);
        for (size_t off = 0; off < bytes; off += 65536) {
            size_t k = bytes - off < 65536 ? bytes - off : 65536;
            uint8_t *buf;
            size_t len;
            assert_status(CPR_OK, cpri_wire_chunk_encode(id, ch_lease_of(id), name, off, 0, data + off, k,
                                                        cpr_crc32c(0, data + off, k), &buf,
                                                        &len));
            assert_status(CPR_OK, cpri_rpc_stream_send(s, buf, len));
            free(buf);
        }
    }
    assert_status(CPR_OK, cpri_rpc_stream_finish(s, NULL, NULL));
    free(data);
}

/* ---- ListJobs, Stats, refused requests --------------------------------------------- */

static void test_list_jobs_and_stats(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-admin-jobs");
    ch_daemon d;
    cpri_rpc *rpc;
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    assert_jobs(rpc, NULL, 0); /* an empty store */

    write_part(rpc, "beta", 1, 300);
    assert_status(CPR_OK, ch_begin(rpc, "alpha", 1)); /* open only: listed too */
    write_part(rpc, "gamma", 1, 100);
    write_part(rpc, "gamma", 2, 50);
    assert_jobs(rpc, (const char *const[]){"alpha", "beta", "gamma"}, 3);

    cpr_part_id alpha = {"alpha", 0, 1};
    uint8_t *buf;
    size_t len;
    assert_status(CPR_OK, cpri_wire_abort_encode(&alpha, 0, &buf, &len));
    assert_status(CPR_OK, ch_unary(rpc, CH_SVC "Abort", buf, len));
    assert_jobs(rpc, (const char *const[]){"beta", "gamma"}, 2); /* no part left */

    /* Refused requests, each with its own status. */
    uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    buf = malloc(sizeof garbage);
    memcpy(buf, garbage, sizeof garbage);
    assert_status(CPR_INVALID_ARGUMENT, ch_unary(rpc, CH_SVC "ListJobs", buf, sizeof garbage));
    cpr_verify_report vr;
    cpr_gc_report gr;
    problems p;
    assert_status(CPR_NOT_FOUND, verify(rpc, "nosuchjob", &vr, &p));
    assert_status(CPR_INVALID_ARGUMENT, verify(rpc, "bad/name", &vr, &p));
    assert_status(CPR_NOT_FOUND, gc(rpc, "nosuchjob", 0, 0, &gr));
    assert_status(CPR_INVALID_ARGUMENT, gc(rpc, NULL, 0, 5, &gr)); /* a floor needs a job */
    assert_non_null(strstr(cpr_errmsg(), "needs a job"));
    assert_status(CPR_OK, gc(rpc, "beta", 2, 1, &gr)); /* with a floor, keep is not used */
    assert_int_equal(gr.floor, 1);
    assert_int_equal(gr.parts_removed, 0);

    /* Stats, decoded back: parts, jobs, rows, and the errors just provoked. */
    cpr_store_stats st;
    stats(rpc, &st);
    assert_int_equal(st.jobs, 2);
    assert_int_equal(st.parts_committed, 3);
    assert_int_equal(st.parts_open, 0);
    assert_int_equal(st.rows_in, 450);
    assert_true(st.errors[CPR_NOT_FOUND] >= 2);
    assert_true(st.errors[CPR_INVALID_ARGUMENT] >= 1);
    assert_true(st.store_bytes > 0);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* ---- Verify ------------------------------------------------------------------------ */

#define VERIFY_ROWS 20000
#define VERIFY_BLOB_BYTES 300000

/* The largest file under dir whose name ends with `suffix`. */
static void largest_file(const char *dir, const char *suffix, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    off_t best = -1;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name), k = strlen(suffix);
        char path[4096];
        struct stat sb;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
            continue; /* cannot be one of ours */
        if (n < k || strcmp(e->d_name + n - k, suffix) != 0 || stat(path, &sb) != 0)
            continue;
        if (sb.st_size > best) {
            best = sb.st_size;
            snprintf(out, cap, "%s", path);
        }
    }
    closedir(d);
    assert_true(best > 0);
}

static void test_verify_reports_damage(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-admin-verify");
    char path[4096];
    ch_daemon d;
    cpri_rpc *rpc;
    cpr_verify_report rep;
    problems p;
    cpr_part_id id = {"v", 0, 1};
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    assert_status(CPR_OK, ch_begin(rpc, "v", 1));
    assert_status(CPR_OK, ch_put_rows(rpc, &id, 0, VERIFY_ROWS, 0, NULL, NULL));
    put_blobs(rpc, &id, 1, VERIFY_BLOB_BYTES);
    assert_status(CPR_OK, ch_commit(rpc, &id, VERIFY_ROWS));
    for (int all = 0; all < 2; all++) { /* every job, then the one job */
        assert_status(CPR_OK, verify(rpc, all ? NULL : "v", &rep, &p));
        assert_int_equal(rep.problems, 0);
        assert_int_equal(p.n, 0);
        assert_int_equal(rep.rows_checked, VERIFY_ROWS);
        assert_int_equal(rep.blobs_checked, 1);
        assert_true(rep.bytes_checked >= VERIFY_BLOB_BYTES + (uint64_t)VERIFY_ROWS * 4 *
                                                              (ch_table.dim + 1));
    }
    cpri_rpc_close(rpc);
    ch_stop(&d);

    snprintf(path, sizeof path, "%s/blobs/j_v/0-1/b_dense", dir);
    tu_flip_byte(path, 1000); /* a byte of the committed blob */
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    assert_status(CPR_OK, verify(rpc, "v", &rep, &p)); /* the report is the answer */
    assert_int_equal(rep.problems, 1);
    assert_int_equal(p.n, 1);
    assert_true(p.blob_named);
    assert_int_equal(rep.rows_checked, VERIFY_ROWS); /* the rows are fine */
    cpri_rpc_close(rpc);
    ch_stop(&d);

    char segs[4096];
    snprintf(segs, sizeof segs, "%s/segments/j_v", dir);
    largest_file(segs, ".seg", path, sizeof path); /* the rows' segment */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    tu_flip_byte(path, (uint64_t)sb.st_size / 2);
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    assert_status(CPR_OK, verify(rpc, NULL, &rep, &p));
    assert_true(rep.problems >= 2);
    assert_int_equal(p.n, rep.problems);
    assert_true(p.blob_named && p.not_blob); /* the blob, and a block of the rows */
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* 1001 damaged blobs: every problem counted, the first 1000 detailed. */
static void test_verify_caps_details(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-admin-cap");
    const char *const quiet[] = {"--log-level", "error", NULL}; /* not 1001 warnings */
    ch_daemon d;
    cpri_rpc *rpc;
    cpr_verify_report rep;
    problems p;
    cpr_part_id id = {"many", 0, 1};
    ch_start_args(&d, dir, quiet);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    assert_status(CPR_OK, ch_begin(rpc, "many", 1));
    put_blobs(rpc, &id, 1001, 16);
    assert_status(CPR_OK, ch_commit(rpc, &id, 0));
    cpri_rpc_close(rpc);
    ch_stop(&d);
    for (int b = 0; b < 1001; b++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/blobs/j_many/0-1/b_b%04d", dir, b);
        tu_flip_byte(path, 0);
    }
    ch_start_args(&d, dir, quiet);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    assert_status(CPR_OK, verify(rpc, "many", &rep, &p));
    assert_int_equal(rep.blobs_checked, 1001);
    assert_int_equal(rep.problems, 1001);
    assert_int_equal(p.n, 1000);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

/* ---- Gc -------------------------------------------------------------------------- */

#define GC_ROWS 1000

/* Checkpoint c is a FULL of rows [0, GC_ROWS - 200 (c - 1)), valued at c. A
 * FULL is its shard's whole state (cpr/store.h): as of C the job holds
 * exactly FULL C's rows, and the rows an older FULL had beyond them are
 * gone. */
static size_t rows_at(uint64_t ckpt)
{
    return GC_ROWS - 200 * (size_t)(ckpt - 1);
}

typedef struct as_of_check {
    uint64_t as_of, next_row;
    int bad;
} as_of_check;

static cpr_status check_as_of(void *ctx, const uint8_t *msg, size_t len)
{
    as_of_check *c = ctx;
    cpri_wire_rows w;
    assert_status(CPR_OK, cpri_wire_rows_decode(msg, len, &w));
    for (size_t i = 0; i < w.batch.n; i++, c->next_row++) {
        uint64_t row = w.batch.ids[i], at = c->as_of;
        c->bad |= row != c->next_row;
        for (uint32_t j = 0; j < ch_table.dim; j++)
            c->bad |= w.batch.values[i * ch_table.dim + j] != tu_value(1, row, at, j);
        c->bad |= w.batch.state[i] != tu_state(1, row, at, 0);
    }
    cpri_wire_rows_release(&w);
    return CPR_OK;
}

/* Restore `job` as of `as_of`: every row exact, or the status. */
static cpr_status restore_as_of(cpri_rpc *rpc, const char *job, uint64_t as_of)
{
    cpr_restore_query q = {.job = job, .as_of = as_of, .batch_rows = 250};
    as_of_check c = {.as_of = as_of};
    uint8_t *buf;
    size_t len;
    assert_status(CPR_OK, cpri_wire_restore_encode(&q, &buf, &len));
    cpr_status st = cpri_rpc_server_stream(rpc, CH_SVC "Restore", buf, len, CH_TIMEOUT_S,
                                          check_as_of, &c);
    free(buf);
    if (st == CPR_OK) {
        assert_false(c.bad);
        assert_int_equal(c.next_row, rows_at(as_of));
    }
    return st;
}

static void write_history(cpri_rpc *rpc, const char *job, uint64_t newest)
{
    for (uint64_t c = 1; c <= newest; c++)
        write_part(rpc, job, c, rows_at(c));
}

static void test_gc_keep(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-admin-gc");
    const char *const retain_one[] = {"--retain", "1", NULL};
    ch_daemon d;
    cpri_rpc *rpc;
    cpr_gc_report rep;
    size_t n, open_parts;
    int has;
    ch_start_args(&d, dir, retain_one);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    write_history(rpc, "k", 4);

    /* keep 2 of the cuts 1..4: floor 3. No state as of >= 3 needs FULLs 1
     * and 2: their 1000 + 800 row versions go with them. */
    assert_status(CPR_OK, gc(rpc, "k", 2, 0, &rep));
    assert_int_equal(rep.floor, 3);
    assert_int_equal(rep.parts_removed, 2);
    assert_int_equal(rep.versions_removed, 1800);
    assert_true(rep.bytes_before > 0 && rep.bytes_after > 0);
    assert_status(CPR_OK, ch_list(rpc, "k", &n, 3, &has, &open_parts));
    assert_int_equal(n, 2);
    assert_true(has);
    for (uint64_t c = 3; c <= 4; c++)
        assert_status(CPR_OK, restore_as_of(rpc, "k", c));
    assert_status(CPR_FAILED_PRECONDITION, restore_as_of(rpc, "k", 2));

    /* keep 0: the daemon's --retain 1. */
    assert_status(CPR_OK, gc(rpc, "k", 0, 0, &rep));
    assert_int_equal(rep.floor, 4);
    assert_int_equal(rep.parts_removed, 1);
    assert_status(CPR_OK, restore_as_of(rpc, "k", 4));
    assert_status(CPR_FAILED_PRECONDITION, restore_as_of(rpc, "k", 3));

    /* Every job, keep 0: nothing more to do, and a restart keeps the floor. */
    assert_status(CPR_OK, gc(rpc, NULL, 0, 0, &rep));
    assert_int_equal(rep.parts_removed, 0);
    cpri_rpc_close(rpc);
    ch_stop(&d);
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    assert_status(CPR_OK, restore_as_of(rpc, "k", 4));
    assert_status(CPR_FAILED_PRECONDITION, restore_as_of(rpc, "k", 3));
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

typedef struct parts_left {
    cpri_rpc *rpc;
    const char *job;
    size_t n;
} parts_left;

static int one_part_left(void *ctx)
{
    parts_left *p = ctx;
    size_t open_parts;
    int has;
    return ch_list(p->rpc, p->job, &p->n, 4, &has, &open_parts) == CPR_OK && p->n == 1;
}

/* Nobody calls Gc: the daemon's periodic retention keeps --retain cuts. */
static void test_gc_periodic(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-admin-gc");
    const char *const periodic[] = {"--retain", "1", "--gc-interval-s", "0.2", NULL};
    ch_daemon d;
    cpri_rpc *rpc;
    ch_start_args(&d, dir, periodic);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    write_history(rpc, "p", 4);
    parts_left p = {rpc, "p", 0};
    assert_true(ch_poll(one_part_left, &p, 30.0));
    assert_status(CPR_OK, restore_as_of(rpc, "p", 4));
    assert_status(CPR_FAILED_PRECONDITION, restore_as_of(rpc, "p", 3));
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

static void test_gc_floor(void **unused)
{
    (void)unused;
    char *dir = tu_mkdtemp("cpr-admin-floor");
    ch_daemon d;
    cpri_rpc *rpc;
    cpr_gc_report rep;
    ch_start(&d, dir);
    assert_status(CPR_OK, cpri_rpc_open(d.addr, &rpc));
    write_history(rpc, "f", 5);

    /* The floor the caller computed, exactly (not this store's 2 newest cuts). */
    assert_status(CPR_OK, gc(rpc, "f", 0, 3, &rep));
    assert_int_equal(rep.floor, 3);
    assert_int_equal(rep.parts_removed, 2);
    for (uint64_t c = 3; c <= 5; c++)
        assert_status(CPR_OK, restore_as_of(rpc, "f", c));
    assert_status(CPR_FAILED_PRECONDITION, restore_as_of(rpc, "f", 2));

    /* At or below the current floor: nothing to do. */
    assert_status(CPR_OK, gc(rpc, "f", 0, 2, &rep));
    assert_int_equal(rep.floor, 3);
    assert_int_equal(rep.parts_removed, 0);
    assert_int_equal(rep.versions_removed, 0);
    /* Above the newest committed checkpoint: refused, nothing changes. */
    assert_status(CPR_FAILED_PRECONDITION, gc(rpc, "f", 0, 6, &rep));
    assert_non_null(strstr(cpr_errmsg(), "newest committed checkpoint"));
    assert_status(CPR_OK, restore_as_of(rpc, "f", 3));
    /* At or below the floor nothing can be written any more. */
    assert_status(CPR_FAILED_PRECONDITION, ch_begin_part(rpc, "f", 1, 2, 3, CPR_KIND_FULL));
    assert_non_null(strstr(cpr_errmsg(), "retention floor 3"));

    /* A checkpoint that is not a consistent cut cannot be a floor. */
    write_part(rpc, "p", 1, 10);
    cpr_part_id prio = {"p", 0, 2};
    assert_status(CPR_OK, ch_begin_part(rpc, "p", 0, 1, 2, CPR_KIND_PRIORITY));
    assert_status(CPR_OK, ch_put_rows(rpc, &prio, 0, 5, 0, NULL, NULL));
    assert_status(CPR_OK, ch_commit(rpc, &prio, 5));
    assert_status(CPR_FAILED_PRECONDITION, gc(rpc, "p", 0, 2, &rep));
    assert_non_null(strstr(cpr_errmsg(), "PRIORITY"));
    cpri_rpc_close(rpc);
    ch_stop(&d);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_jobs_and_stats),
        cmocka_unit_test(test_verify_reports_damage),
        cmocka_unit_test(test_verify_caps_details),
        cmocka_unit_test(test_gc_keep),
        cmocka_unit_test(test_gc_floor),
        cmocka_unit_test(test_gc_periodic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
