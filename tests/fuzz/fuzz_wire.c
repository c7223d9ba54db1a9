/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: arbitrary bytes through ckptd's request decoding and
 * validation, and through the clients' response decoding (ckptd/rpc/wire.c).
 * The first byte picks the message type (FUZZ_KINDS of them; see the switches).
 * Every view a successful decode returns is read in full, so a length that
 * lies about its array is caught by the sanitizers. Built as a libFuzzer
 * binary with clang (-DCPR_FUZZ=ON) and, for CI, linked into a replay driver
 * (replay_main.c) that any compiler builds.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_KINDS 19u /* 0-7 requests as before; 8-15 added with ListJobs/Verify/Gc;
                          16-18 with GetRecovery/PutRecovery */

static volatile uint64_t sink; /* keeps the reads below from being optimised away */

static void touch(const void *p, size_t bytes)
{
    const unsigned char *c = p;
    uint64_t acc = 0;
    for (size_t i = 0; i < bytes; i++)
        acc += c[i];
    sink += acc;
}

static void touch_part(const cpr_part_id *id)
{
    touch(id->job, strlen(id->job));
    sink += id->shard + id->checkpoint;
}

static void touch_problem(void *ctx, const char *what, const char *where)
{
    (void)ctx;
    touch(what, strlen(what));
    touch(where, strlen(where));
}

/* Kinds 8-15: operations requests and the responses clients decode. */
static void decode_admin(unsigned kind, const uint8_t *data, size_t size)
{
    cpri_wire_list v;
    cpri_wire_gc g;
    cpr_store_stats stats;
    cpr_verify_report vr;
    cpr_gc_report gr;
    cpr_part_info *parts;
    char **jobs;
    size_t n;
    uint64_t cut;
    switch (kind) {
    case 8:
        sink += cpri_wire_list_jobs_decode(data, size);
        break;
    case 9:
        if (cpri_wire_verify_decode(data, size, &v) == CPR_OK) {
            if (v.job)
                touch(v.job, strlen(v.job));
            cpri_wire_list_release(&v);
        }
        break;
    case 10:
        if (cpri_wire_gc_decode(data, size, &g) == CPR_OK) {
            if (g.job)
                touch(g.job, strlen(g.job));
            sink += g.keep + g.floor;
            cpri_wire_gc_release(&g);
        }
        break;
    case 11:
        if (cpri_wire_stats_response_decode(data, size, &stats) == CPR_OK)
            touch(&stats, sizeof stats);
        break;
    case 12:
        if (cpri_wire_list_jobs_response_decode(data, size, &jobs, &n) == CPR_OK) {
            for (size_t i = 0; i < n; i++)
                touch(jobs[i], strlen(jobs[i]));
            sink += jobs[n] == NULL;
            cpr_names_free(jobs, n);
        }
        break;
    case 13:
        if (cpri_wire_verify_response_decode(data, size, &vr, touch_problem, NULL) == CPR_OK)
            touch(&vr, sizeof vr);
        break;
    case 14:
        if (cpri_wire_gc_response_decode(data, size, &gr) == CPR_OK)
            touch(&gr, sizeof gr);
        break;
    default:
        if (cpri_wire_list_response_decode(data, size, &parts, &n, &cut) == CPR_OK) {
            for (size_t i = 0; i < n; i++) /* field by field: the struct has padding */
                sink += parts[i].shard + parts[i].checkpoint + parts[i].rows + parts[i].bytes;
            free(parts);
        }
        break;
    }
}

/* Kinds 16-18: the recovery record's requests and the record clients decode. */
static void decode_recovery(unsigned kind, const uint8_t *data, size_t size)
{
    cpri_wire_list g;
    cpri_wire_recovery r;
    if (kind == 16) {
        if (cpri_wire_get_recovery_decode(data, size, &g) == CPR_OK) {
            touch(g.job, strlen(g.job));
            cpri_wire_list_release(&g);
        }
        return;
    }
    cpr_status st = kind == 17 ? cpri_wire_put_recovery_decode(data, size, &r)
                               : cpri_wire_recovery_record_decode(data, size, &r);
    if (st != CPR_OK)
        return;
    touch(r.job, strlen(r.job));
    if (r.plan)
        touch(r.plan, r.len);
    sink += r.generation + r.written_unix_ms + (r.plan == NULL) * (r.len == 0);
    cpri_wire_recovery_release(&r);
}

static void decode_one(unsigned kind, const uint8_t *data, size_t size)
{
    cpri_wire_begin b;
    cpri_wire_rows r;
    cpri_wire_chunk c;
    cpri_wire_part p;
    cpri_wire_restore q;
    cpri_wire_list l;
    switch (kind) {
    case 0:
        if (cpri_wire_begin_decode(data, size, &b) == CPR_OK) {
            touch_part(&b.spec.id);
            touch(b.spec.tables, b.spec.n_tables * sizeof *b.spec.tables);
            cpri_wire_begin_release(&b);
        }
        break;
    case 1:
        if (cpri_wire_rows_decode(data, size, &r) == CPR_OK) {
            touch_part(&r.id);
            touch(r.batch.ids, r.batch.n * 8);
            touch(r.batch.values, r.batch.values_count * 4);
            if (r.batch.state)
                touch(r.batch.state, r.batch.state_count * 4);
            cpri_wire_rows_release(&r);
        }
        break;
    case 2:
        if (cpri_wire_chunk_decode(data, size, &c) == CPR_OK) {
            touch_part(&c.id);
            touch(c.name, strlen(c.name));
            touch(c.data, c.len);
            cpri_wire_chunk_release(&c);
        }
        break;
    case 3:
    case 4:
    case 5:
        if ((kind == 3 ? cpri_wire_commit_decode(data, size, &p)
             : kind == 4 ? cpri_wire_abort_decode(data, size, &p)
                         : cpri_wire_getblob_decode(data, size, &p)) == CPR_OK) {
            touch_part(&p.id);
            if (p.name)
                touch(p.name, strlen(p.name));
            cpri_wire_part_release(&p);
        }
        break;
    case 6:
        if (cpri_wire_restore_decode(data, size, &q) == CPR_OK) {
            touch(q.query.job, strlen(q.query.job));
            touch(q.query.tables, q.query.n_tables * sizeof *q.query.tables);
            touch(q.query.ranges, q.query.n_ranges * sizeof *q.query.ranges);
            cpri_wire_restore_release(&q);
        }
        break;
    case 7:
        if (cpri_wire_list_decode(data, size, &l) == CPR_OK) {
            touch(l.job, strlen(l.job));
            cpri_wire_list_release(&l);
        }
        break;
    default:
        if (kind >= 16)
            decode_recovery(kind, data, size);
        else
            decode_admin(kind, data, size);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    decode_one(data[0] % FUZZ_KINDS, data + 1, size - 1);
    return 0;
}
