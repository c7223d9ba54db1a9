/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A save is a snapshot (issue #9): the rows a trainer stages with
 * cpr_part_put_gather straight from a CPU table (cpr_emb_view), or queues
 * with cpr_part_put_deferred for the part's sender to copy out of the
 * save's copy-on-write snapshot (cpr_emb_save_copy), are the rows as they
 * were at the save's begin, bit for bit, although training goes on
 * updating the table until the commit (on the same thread, or on another
 * while the sender copies); with and without defer_send, over local:// and
 * a real ckptd. Policies FULL and MFU (a subset of rows). A deferred put
 * whose ids do not ascend is refused; a fill that fails fails the part, and
 * nothing of it becomes visible. Deferred rows the caller encodes itself
 * (fill_encoded) restore as the host codec decodes them, in every codec.
 * A held part's deferred rows are copied out before its commit (P9).
 */
#define _GNU_SOURCE /* pthread_getaffinity_np */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/client.h"
#include "cpr/codec.h"
#include "cpr/embedding.h"
#include "cpr/rng.h"
#include "testutil.h"

#define ROWS 6000
#define DIM 16
#define BAGS 256

static cpr_emb *make_table(void)
{
    cpr_emb_config cfg = {.rows = ROWS, .dim = DIM, .optimizer = CPR_OPT_ROWWISE_ADAGRAD,
                          .learning_rate = 0.05f, .seed = 3, .num_shards = 1,
                          .track = CPR_TRACK_ALL};
    cpr_emb *t = NULL;
    assert_status(CPR_OK, cpr_emb_create(&cfg, &t));
    return t;
}

/* `batches` batches of 4 indices a bag over the hot first half of the table. */
static void train(cpr_emb *t, int batches, uint64_t seed)
{
    int64_t idx[BAGS * 4], off[BAGS];
    static float grad[BAGS * DIM], out[BAGS * DIM];
    for (int b = 0; b < batches; b++) {
        for (size_t i = 0; i < BAGS * 4; i++)
            idx[i] = (int64_t)(cpr_splitmix64(&seed) % (ROWS / 2));
        for (size_t i = 0; i < BAGS; i++)
            off[i] = (int64_t)(i * 4);
        for (size_t i = 0; i < BAGS * DIM; i++)
            grad[i] = (float)(cpr_splitmix64(&seed) % 1000) * 1e-3f - 0.5f;
        assert_status(CPR_OK, cpr_emb_forward(t, idx, BAGS * 4, off, BAGS, CPR_POOL_SUM, out));
        assert_status(CPR_OK, cpr_emb_backward(t, idx, BAGS * 4, off, BAGS, CPR_POOL_SUM, grad));
    }
}

/* The restored rows of checkpoint `ckpt` against `want` (rows ids[0..n)). */
static void check_restored(cpr_client *c, uint64_t ckpt, const uint64_t *ids, size_t n,
                           const float *want, const float *want_state)
{
    float *got = calloc((size_t)ROWS * DIM, sizeof *got), *got_state = calloc(ROWS, sizeof *got_state);
    uint8_t *seen = calloc(ROWS, 1);
    cpr_restore_query q = {.job = "snap", .as_of = ckpt};
    cpr_restore_into into = {0, 0, ROWS, DIM, 1, got, got_state, seen};
    cpr_restore_result res;
    assert_status(CPR_OK, cpr_client_restore_table(c, &q, NULL, 0, &into, &res));
    assert_int_equal(res.as_of, ckpt);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = ids[i];
        assert_true(seen[r]);
        if (memcmp(got + r * DIM, want + i * DIM, DIM * sizeof(float)) != 0 ||
            memcmp(got_state + r, want_state + i, sizeof(float)) != 0)
            fail_msg("checkpoint %llu, row %llu: the committed row is not the snapshot",
                     (unsigned long long)ckpt, (unsigned long long)r);
    }
    free(got);
    free(got_state);
    free(seen);
}

static void snapshot_once(cpr_client *c, cpr_emb *t, cpr_policy policy, uint64_t ckpt)
{
    uint64_t *ids = malloc(ROWS * sizeof *ids);
    size_t n = 0;
    cpr_budget budget = {.fraction = 0.1};
    assert_status(CPR_OK, cpr_emb_select(t, 0, policy, budget, ids, ROWS, &n));
    assert_true(n > 0);
    cpr_emb_save *save = NULL;
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, policy, ids, n, &save));
    cpr_table_schema schema = {0, ROWS, DIM, 1};
    cpr_part_spec spec = {.id = {"snap", 0, ckpt},
                          .kind = policy == CPR_POLICY_FULL ? CPR_KIND_FULL : CPR_KIND_PRIORITY,
                          .step = ckpt, .num_shards = 1, .tables = &schema, .n_tables = 1};
    cpr_part *p = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    cpr_emb_host_view view;
    assert_status(CPR_OK, cpr_emb_view(t, &view));
    cpr_gather g = {.table = 0, .n = n, .ids = cpr_emb_save_ids(save), .values = view.values,
                    .values_stride = view.values_stride, .state = view.state,
                    .state_stride = view.state_stride};
    assert_status(CPR_OK, cpr_part_put_gather(p, &g));
    /* The snapshot as the table holds it now, then training goes on. */
    float *want = malloc(n * DIM * sizeof *want), *want_state = malloc(n * sizeof *want_state);
    assert_status(CPR_OK, cpr_emb_gather(t, save, want, want_state));
    train(t, 8, ckpt * 977);
    float *now = malloc(n * DIM * sizeof *now), *now_state = malloc(n * sizeof *now_state);
    size_t moved = 0;
    for (size_t i = 0; i < n; i++) /* training did move them in the table */
        moved += memcmp(view.values + ids[i] * view.values_stride, want + i * DIM,
                        DIM * sizeof(float)) != 0;
    assert_true(moved > 0);
    /* ... and a gather still gives the save's rows as they were at begin. */
    assert_status(CPR_OK, cpr_emb_gather(t, save, now, now_state));
    assert_memory_equal(now, want, n * DIM * sizeof *now);
    assert_memory_equal(now_state, want_state, n * sizeof *now_state);
    assert_status(CPR_OK, cpr_part_commit(&p));
    assert_status(CPR_OK, cpr_emb_save_commit(t, save));
    check_restored(c, ckpt, ids, n, want, want_state); /* the snapshot, bit for bit */
    free(ids);
    free(want);
    free(want_state);
    free(now);
    free(now_state);
}

typedef struct fill_ctx {
    cpr_emb *t;
    cpr_emb_save *save;
    int fail_at;              /* > 0: the fill of the block holding this row fails */
} fill_ctx;

static cpr_status fill_rows(void *ctx, size_t first, size_t k, uint32_t dim, uint32_t state_dim,
                            float *values, float *state)
{
    const fill_ctx *f = ctx;
    if (dim != DIM || state_dim != 1) /* the schema's, handed over by the sender */
        return cpr_fail(CPR_INTERNAL, "fill got rows of %u + %u floats", dim, state_dim);
    if (f->fail_at > 0 && (size_t)f->fail_at >= first && (size_t)f->fail_at < first + k)
        return cpr_fail(CPR_CORRUPT, "the test's fill refuses row %d", f->fail_at);
    return cpr_emb_save_fill(f->save, first, k, dim, state_dim, values, state);
}

typedef struct committer {
    cpr_part *part;
    cpr_status st;
} committer;

static void *commit_main(void *arg)
{
    committer *c = arg;
    c->st = cpr_part_commit(&c->part);
    return NULL;
}

/* A deferred save: the ids are queued, training goes on, and the part's
 * sender copies the rows out of the snapshot; with `concurrent`, it commits
 * on another thread while this one trains. Odd checkpoints keep their ids
 * (cpr_deferred_rows.ids_kept: the save's own array, valid until the save
 * ends), so the sender copies them into each block; even ones are copied
 * at the put. */
static void deferred_once(cpr_client *c, cpr_emb *t, cpr_policy policy, uint64_t ckpt,
                          int concurrent)
{
    uint64_t *ids = malloc(ROWS * sizeof *ids);
    size_t n = 0;
    assert_status(CPR_OK, cpr_emb_select(t, 0, policy, (cpr_budget){.fraction = 0.1}, ids,
                                         ROWS, &n));
    assert_true(n > 0);
    fill_ctx f = {t, NULL, 0};
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, policy, ids, n, &f.save));
    float *want = malloc(n * DIM * sizeof *want), *want_state = malloc(n * sizeof *want_state);
    assert_status(CPR_OK, cpr_emb_gather(t, f.save, want, want_state));
    cpr_table_schema schema = {0, ROWS, DIM, 1};
    cpr_part_spec spec = {.id = {"snap", 0, ckpt},
                          .kind = policy == CPR_POLICY_FULL ? CPR_KIND_FULL : CPR_KIND_PRIORITY,
                          .step = ckpt, .num_shards = 1, .tables = &schema, .n_tables = 1};
    committer cm = {NULL, CPR_OK};
    assert_status(CPR_OK, cpr_client_begin_async(c, &spec, &cm.part));
    cpr_deferred_rows d = {.table = 0, .n = n, .ids = cpr_emb_save_ids(f.save),
                           .fill = fill_rows, .ctx = &f, .ids_kept = (int)(ckpt % 2)};
    assert_status(CPR_OK, cpr_part_put_deferred(cm.part, &d));
    if (concurrent) {
        pthread_t th;
        assert_int_equal(0, pthread_create(&th, NULL, commit_main, &cm));
        train(t, 8, ckpt * 31);
        pthread_join(th, NULL);
    } else {
        train(t, 8, ckpt * 31);
        commit_main(&cm);
    }
    assert_status(CPR_OK, cm.st);
    assert_status(CPR_OK, cpr_emb_save_commit(t, f.save));
    check_restored(c, ckpt, ids, n, want, want_state);
    free(ids);
    free(want);
    free(want_state);
}

typedef struct enc_fill {
    cpr_emb_save *save;
    int calls, f32_calls;
} enc_fill;

static cpr_status enc_fill_f32(void *ctx, size_t first, size_t k, uint32_t dim,
                               uint32_t state_dim, float *values, float *state)
{
    enc_fill *f = ctx;
    f->f32_calls++;
    return cpr_emb_save_fill(f->save, first, k, dim, state_dim, values, state);
}

static cpr_status enc_fill_encoded(void *ctx, size_t first, size_t k, uint32_t dim,
                                   uint32_t state_dim, cpr_codec codec, void *values,
                                   float *state)
{
    enc_fill *f = ctx;
    f->calls++;
    return cpr_emb_save_fill_encoded(f->save, first, k, dim, state_dim, codec, values, state);
}

/* A deferred save in `codec` whose rows the caller encodes
 * (cpr_deferred_rows.fill_encoded): the sender calls fill_encoded and never
 * fill, and the part restores as the host codec decodes the snapshot's rows;
 * an f32 part calls fill. */
static void deferred_encoded(cpr_client *c, cpr_emb *t, cpr_codec codec, uint64_t ckpt)
{
    uint64_t *ids = malloc(ROWS * sizeof *ids);
    size_t n = 0;
    assert_status(CPR_OK, cpr_emb_select(t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 0.2},
                                         ids, ROWS, &n));
    assert_true(n > 0);
    enc_fill f = {0};
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_MFU, ids, n, &f.save));
    float *want = malloc(n * DIM * sizeof *want), *want_state = malloc(n * sizeof *want_state);
    uint8_t *enc = malloc(n * cpr_codec_row_bytes(codec, DIM));
    assert_status(CPR_OK, cpr_emb_gather(t, f.save, want, want_state));
    assert_status(CPR_OK, cpr_codec_encode(codec, 0, want, n, DIM, enc));
    assert_status(CPR_OK, cpr_codec_decode(codec, enc, n, DIM, want));
    cpr_table_schema schema = {0, ROWS, DIM, 1};
    cpr_part_spec spec = {.id = {"snap", 0, ckpt}, .kind = CPR_KIND_PRIORITY, .step = ckpt,
                          .num_shards = 1, .tables = &schema, .n_tables = 1, .codec = codec};
    cpr_part *p = NULL;
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    cpr_deferred_rows d = {.table = 0, .n = n, .ids = cpr_emb_save_ids(f.save),
                           .fill = enc_fill_f32, .ctx = &f, .fill_encoded = enc_fill_encoded};
    assert_status(CPR_OK, cpr_part_put_deferred(p, &d));
    train(t, 4, ckpt * 7);
    assert_status(CPR_OK, cpr_part_commit(&p));
    assert_status(CPR_OK, cpr_emb_save_commit(t, f.save));
    if (codec == CPR_CODEC_F32) {
        assert_true(f.f32_calls > 0);
        assert_int_equal(f.calls, 0);
    } else {
        assert_true(f.calls > 0);
        assert_int_equal(f.f32_calls, 0);
    }
    check_restored(c, ckpt, ids, n, want, want_state);
    free(ids);
    free(want);
    free(want_state);
    free(enc);
}

/* Rows of part `ckpt` for held_encoded: row r, column j. */
static float held_value(uint64_t ckpt, uint64_t r, uint32_t j)
{
    return (float)((r * 31 + j * 7 + ckpt * 13) % 251) * 0.01f - 1.25f;
}

typedef struct held_fill {
    uint64_t ckpt;
    const uint64_t *ids;
    int f32_calls;
} held_fill;

static cpr_status held_fill_f32(void *ctx, size_t first, size_t k, uint32_t dim,
                                uint32_t state_dim, float *values, float *state)
{
    (void)first, (void)k, (void)dim, (void)state_dim, (void)values, (void)state;
    ((held_fill *)ctx)->f32_calls++;
    return cpr_fail(CPR_INTERNAL, "an int8 part with fill_encoded called fill");
}

static cpr_status held_fill_encoded(void *ctx, size_t first, size_t k, uint32_t dim,
                                    uint32_t state_dim, cpr_codec codec, void *values,
                                    float *state)
{
    held_fill *h = ctx;
    float *rows = malloc(k * dim * sizeof *rows);
    if (!rows)
        return cpr_fail(CPR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < k; i++) {
        for (uint32_t j = 0; j < dim; j++)
            rows[i * dim + j] = held_value(h->ckpt, h->ids[first + i], j);
        for (uint32_t j = 0; j < state_dim; j++)
            state[i * state_dim + j] = (float)h->ckpt;
    }
    cpr_status st = cpr_codec_encode(codec, 0, rows, k, dim, values);
    free(rows);
    return st;
}

/* Rows a caller encodes itself (fill_encoded) stage only their ids: eight
 * held int8 parts of every row (8 x 456 KB were they staged as f32) sit in
 * 2 MiB of staging with defer_send, none of them released to send before
 * its commit, and each reports the encoded bytes it will send; the newest
 * restores as the host codec decodes it. */
static void held_encoded(const char *target)
{
    cpr_client_options o = {.defer_send = 1, .staging_bytes = 2u << 20};
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    enum { PARTS = 8 };
    uint64_t *ids = malloc(ROWS * sizeof *ids);
    for (uint64_t r = 0; r < ROWS; r++)
        ids[r] = r;
    cpr_table_schema schema = {0, ROWS, DIM, 1};
    cpr_part *parts[PARTS];
    held_fill fills[PARTS];
    for (int i = 0; i < PARTS; i++) {
        cpr_part_spec spec = {.id = {"held", 0, 1 + (uint64_t)i}, .kind = CPR_KIND_PRIORITY,
                              .step = 1 + (uint64_t)i, .num_shards = 1, .tables = &schema,
                              .n_tables = 1, .codec = CPR_CODEC_INT8};
        fills[i] = (held_fill){.ckpt = 1 + (uint64_t)i, .ids = ids};
        assert_status(CPR_OK, cpr_client_begin(c, &spec, &parts[i]));
        cpr_deferred_rows d = {.table = 0, .n = ROWS, .ids = ids, .fill = held_fill_f32,
                               .ctx = &fills[i], .fill_encoded = held_fill_encoded};
        assert_status(CPR_OK, cpr_part_put_deferred(parts[i], &d));
    }
    size_t int8_row = 8 + cpr_codec_row_bytes(CPR_CODEC_INT8, DIM) + 4;
    for (int i = 0; i < PARTS; i++) {
        cpr_part_progress pr;
        cpr_part_progress_get(parts[i], &pr);
        assert_int_equal(pr.rows_queued, ROWS);
        assert_int_equal(pr.bytes_sent, 0); /* held: staging never filled up */
        assert_true(pr.bytes_queued >= ROWS * int8_row);
        assert_true(pr.bytes_queued < ROWS * int8_row + 4096); /* + block headers */
    }
    for (int i = 0; i < PARTS; i++) {
        assert_status(CPR_OK, cpr_part_commit(&parts[i]));
        assert_int_equal(fills[i].f32_calls, 0);
    }
    float *want = malloc((size_t)ROWS * DIM * sizeof *want);
    uint8_t *enc = malloc(ROWS * cpr_codec_row_bytes(CPR_CODEC_INT8, DIM));
    for (uint64_t r = 0; r < ROWS; r++)
        for (uint32_t j = 0; j < DIM; j++)
            want[r * DIM + j] = held_value(PARTS, r, j);
    assert_status(CPR_OK, cpr_codec_encode(CPR_CODEC_INT8, 0, want, ROWS, DIM, enc));
    assert_status(CPR_OK, cpr_codec_decode(CPR_CODEC_INT8, enc, ROWS, DIM, want));
    float *got = calloc((size_t)ROWS * DIM, sizeof *got), *got_state = calloc(ROWS, sizeof *got_state);
    uint8_t *seen = calloc(ROWS, 1);
    cpr_restore_query q = {.job = "held"};
    cpr_restore_into into = {0, 0, ROWS, DIM, 1, got, got_state, seen};
    cpr_restore_result res;
    assert_status(CPR_OK, cpr_client_restore_table(c, &q, NULL, 0, &into, &res));
    assert_int_equal(res.as_of, PARTS);
    for (uint64_t r = 0; r < ROWS; r++) {
        assert_true(seen[r]);
        assert_true(got_state[r] == (float)PARTS);
    }
    assert_memory_equal(got, want, (size_t)ROWS * DIM * sizeof *got);
    free(got);
    free(got_state);
    free(seen);
    free(want);
    free(enc);
    free(ids);
    cpr_client_close(c);
}

static void held_encoded_in(const char *target, void *unused)
{
    (void)unused;
    held_encoded(target);
}

static void test_encoded_stages_ids_only(void **state)
{
    (void)state;
    ch_each_transport(held_encoded_in, NULL);
}

/* Refused and failed deferred puts leave nothing visible. */
static void deferred_errors(cpr_client *c, cpr_emb *t, uint64_t ckpt)
{
    uint64_t ids[3] = {5, 4, 9};
    cpr_table_schema schema = {0, ROWS, DIM, 1};
    cpr_part_spec spec = {.id = {"snap", 0, ckpt}, .kind = CPR_KIND_FULL, .step = ckpt,
                          .num_shards = 1, .tables = &schema, .n_tables = 1};
    cpr_part *p = NULL;
    fill_ctx f = {t, NULL, 0};
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    cpr_deferred_rows d = {.table = 0, .n = 3, .ids = ids, .fill = fill_rows, .ctx = &f};
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_put_deferred(p, &d));
    d.fill = NULL;
    ids[0] = 1;
    assert_status(CPR_INVALID_ARGUMENT, cpr_part_put_deferred(p, &d));
    assert_status(CPR_OK, cpr_part_abort(&p));
    /* A fill that fails: the commit reports it with the fill's message. */
    uint64_t *all = malloc(ROWS * sizeof *all);
    size_t n = 0;
    assert_status(CPR_OK, cpr_emb_select(t, 0, CPR_POLICY_FULL, (cpr_budget){0}, all, ROWS, &n));
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_FULL, all, n, &f.save));
    f.fail_at = (int)(n - 1);
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    d = (cpr_deferred_rows){.table = 0, .n = n, .ids = cpr_emb_save_ids(f.save),
                            .fill = fill_rows, .ctx = &f};
    assert_status(CPR_OK, cpr_part_put_deferred(p, &d));
    assert_status(CPR_CORRUPT, cpr_part_commit(&p));
    if (!strstr(cpr_errmsg(), "the test's fill refuses row"))
        fail_msg("commit message: %s", cpr_errmsg());
    cpr_emb_save_abort(t, f.save);
    cpr_part_info *parts = NULL;
    size_t n_parts = 0;
    assert_status(CPR_OK, cpr_client_list(c, "snap", &parts, &n_parts));
    for (size_t i = 0; i < n_parts; i++)
        assert_true(parts[i].checkpoint != ckpt);
    free(parts);
    free(all);
}

/* The sender runs on the CPUs of cpr_client_options.thread_cpus: the fill
 * (called on the sender) reads its own thread's CPU set. */
typedef struct where {
    cpu_set_t cpus;
    int seen;
} where;

static cpr_status note_cpus(void *ctx, size_t first, size_t k, uint32_t dim, uint32_t state_dim,
                            float *values, float *state)
{
    (void)dim, (void)state_dim;
    where *w = ctx;
    memset(values, 0, k * DIM * sizeof *values);
    memset(state, 0, k * sizeof *state);
    (void)first;
    w->seen = pthread_getaffinity_np(pthread_self(), sizeof w->cpus, &w->cpus) == 0;
    return CPR_OK;
}

static void sender_cpus(const char *target, void *unused)
{
    (void)unused;
    cpu_set_t mine;
    assert_int_equal(0, sched_getaffinity(0, sizeof mine, &mine));
    int last = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &mine))
            last = cpu;
    char list[16];
    snprintf(list, sizeof list, "%d", last);
    cpr_client_options o = {.thread_cpus = list};
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    cpr_table_schema schema = {0, ROWS, DIM, 1};
    cpr_part_spec spec = {.id = {"pinned", 0, 1}, .kind = CPR_KIND_FULL, .step = 1,
                          .num_shards = 1, .tables = &schema, .n_tables = 1};
    cpr_part *p = NULL;
    where w = {.seen = 0};
    uint64_t ids[4] = {1, 2, 3, 4};
    assert_status(CPR_OK, cpr_client_begin(c, &spec, &p));
    cpr_deferred_rows d = {.table = 0, .n = 4, .ids = ids, .fill = note_cpus, .ctx = &w};
    assert_status(CPR_OK, cpr_part_put_deferred(p, &d));
    assert_status(CPR_OK, cpr_part_commit(&p));
    assert_true(w.seen);
    assert_int_equal(1, CPU_COUNT(&w.cpus));
    assert_true(CPU_ISSET(last, &w.cpus));
    cpr_client_close(c);
    /* A list that names no CPU of this machine, or is not a list, is refused. */
    const char *bad[] = {"100000", "1-", "x", "2-1", "1,", NULL};
    for (size_t i = 0; bad[i]; i++) {
        o.thread_cpus = bad[i];
        c = NULL;
        assert_status(CPR_INVALID_ARGUMENT, cpr_client_open(target, &o, &c));
        assert_null(c);
    }
}

static void test_sender_cpus(void **state)
{
    (void)state;
    ch_each_transport(sender_cpus, NULL);
}

/* P9: with defer_send, a held part's deferred rows are copied out of the
 * snapshot before the commit (the sender fills, and sends nothing): the
 * training thread then changes rows the save no longer needs to guard
 * (S6), and the committed rows are still those of the begin. */
typedef struct early_fill {
    fill_ctx f;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t rows_filled;
} early_fill;

static cpr_status fill_and_count(void *ctx, size_t first, size_t k, uint32_t dim,
                                 uint32_t state_dim, float *values, float *state)
{
    early_fill *e = ctx;
    cpr_status st = fill_rows(&e->f, first, k, dim, state_dim, values, state);
    pthread_mutex_lock(&e->mu);
    e->rows_filled += st == CPR_OK ? k : 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return st;
}

static void filled_before_commit(const char *target, void *unused)
{
    (void)unused;
    cpr_client_options o = {.defer_send = 1, .staging_bytes = 64u << 20};
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    cpr_emb *t = make_table();
    train(t, 16, 7);
    uint64_t *ids = malloc(ROWS * sizeof *ids);
    size_t n = 0;
    assert_status(CPR_OK, cpr_emb_select(t, 0, CPR_POLICY_MFU, (cpr_budget){.fraction = 0.5},
                                         ids, ROWS, &n));
    assert_true(n > 1000); /* several row blocks */
    early_fill e = {.f = {t, NULL, 0}, .rows_filled = 0};
    pthread_mutex_init(&e.mu, NULL);
    pthread_cond_init(&e.cv, NULL);
    assert_status(CPR_OK, cpr_emb_save_begin(t, 0, CPR_POLICY_MFU, ids, n, &e.f.save));
    float *want = malloc(n * DIM * sizeof *want), *want_state = malloc(n * sizeof *want_state);
    assert_status(CPR_OK, cpr_emb_gather(t, e.f.save, want, want_state));
    cpr_table_schema schema = {0, ROWS, DIM, 1};
    cpr_part_spec spec = {.id = {"snap", 0, 1}, .kind = CPR_KIND_PRIORITY, .step = 1,
                          .num_shards = 1, .tables = &schema, .n_tables = 1};
    cpr_part *p = NULL;
    assert_status(CPR_OK, cpr_client_begin_async(c, &spec, &p));
    cpr_deferred_rows d = {.table = 0, .n = n, .ids = cpr_emb_save_ids(e.f.save),
                           .fill = fill_and_count, .ctx = &e};
    assert_status(CPR_OK, cpr_part_put_deferred(p, &d));
    /* The sender fills every block while the part is held: wait for it (a
     * sender that filled only at commit would time this out). */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&e.mu);
    int rc = 0;
    while (e.rows_filled < n && rc == 0)
        rc = pthread_cond_timedwait(&e.cv, &e.mu, &until);
    size_t filled = e.rows_filled;
    pthread_mutex_unlock(&e.mu);
    assert_int_equal(n, filled);
    cpr_part_progress prog;
    cpr_part_progress_get(p, &prog);
    assert_int_equal(0, prog.rows_sent); /* held: copied out, nothing sent */
    train(t, 8, 8); /* every row of the save is out: no guard keeps any (S6) */
    assert_status(CPR_OK, cpr_part_commit(&p));
    assert_status(CPR_OK, cpr_emb_save_commit(t, e.f.save));
    check_restored(c, 1, ids, n, want, want_state);
    pthread_cond_destroy(&e.cv);
    pthread_mutex_destroy(&e.mu);
    free(ids);
    free(want);
    free(want_state);
    cpr_emb_destroy(t);
    cpr_client_close(c);
}

static void test_filled_before_commit(void **state)
{
    (void)state;
    ch_each_transport(filled_before_commit, NULL);
}

static void snapshots(const char *target, int defer)
{
    cpr_client_options o = {.defer_send = defer};
    cpr_client *c;
    assert_status(CPR_OK, cpr_client_open(target, &o, &c));
    cpr_emb *t = make_table();
    train(t, 16, 1);
    snapshot_once(c, t, CPR_POLICY_FULL, 1);
    train(t, 4, 2);
    snapshot_once(c, t, CPR_POLICY_MFU, 2);
    train(t, 4, 3);
    deferred_once(c, t, CPR_POLICY_FULL, 3, 0);
    train(t, 4, 4);
    deferred_once(c, t, CPR_POLICY_MFU, 4, 0);
    for (uint64_t k = 5; k < 9; k++) {
        train(t, 2, k);
        deferred_once(c, t, k % 2 ? CPR_POLICY_FULL : CPR_POLICY_MFU, k, 1);
    }
    deferred_errors(c, t, 9);
    for (int codec = CPR_CODEC_F32; codec <= CPR_CODEC_INT4; codec++) {
        train(t, 2, 10 + (uint64_t)codec);
        deferred_encoded(c, t, (cpr_codec)codec, 10 + (uint64_t)codec);
    }
    cpr_emb_destroy(t);
    cpr_client_close(c);
}

static void snapshots_in(const char *target, void *defer)
{
    snapshots(target, *(const int *)defer);
}

static void test_snapshot(void **state)
{
    (void)state;
    for (int defer = 0; defer < 2; defer++)
        ch_each_transport(snapshots_in, &defer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot),
        cmocka_unit_test(test_sender_cpus),
        cmocka_unit_test(test_encoded_stages_ids_only),
        cmocka_unit_test(test_filled_before_commit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
