/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: arbitrary bytes through ckptd's request decoding and
 * validation (ckptd/rpc/wire.c). The first byte picks the message type.
 * Every view a successful decode returns is read in full, so a length that
 * lies about its array is caught by the sanitizers. Built as a libFuzzer
 * binary with clang (-DCPR_FUZZ=ON) and, for CI, linked into a replay driver
 * (replay_main.c) that any compiler builds.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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

static void decode_one(unsigned kind, const uint8_t *data, size_t size)
{
    cpr_wire_begin b;
    cpr_wire_rows r;
    cpr_wire_chunk c;
    cpr_wire_part p;
    cpr_wire_restore q;
    cpr_wire_list l;
    switch (kind) {
    case 0:
        if (cpr_wire_begin_decode(data, size, &b) == CPR_OK) {
            touch_part(&b.spec.id);
            touch(b.spec.tables, b.spec.n_tables * sizeof *b.spec.tables);
            cpr_wire_begin_release(&b);
        }
        break;
    case 1:
        if (cpr_wire_rows_decode(data, size, &r) == CPR_OK) {
            touch_part(&r.id);
            touch(r.batch.ids, r.batch.n * 8);
            touch(r.batch.values, r.batch.values_count * 4);
            if (r.batch.state)
                touch(r.batch.state, r.batch.state_count * 4);
            cpr_wire_rows_release(&r);
        }
        break;
    case 2:
        if (cpr_wire_chunk_decode(data, size, &c) == CPR_OK) {
            touch_part(&c.id);
            touch(c.name, strlen(c.name));
            touch(c.data, c.len);
            cpr_wire_chunk_release(&c);
        }
        break;
    case 3:
    case 4:
    case 5:
        if ((kind == 3 ? cpr_wire_commit_decode(data, size, &p)
             : kind == 4 ? cpr_wire_abort_decode(data, size, &p)
                         : cpr_wire_getblob_decode(data, size, &p)) == CPR_OK) {
            touch_part(&p.id);
            if (p.name)
                touch(p.name, strlen(p.name));
            cpr_wire_part_release(&p);
        }
        break;
    case 6:
        if (cpr_wire_restore_decode(data, size, &q) == CPR_OK) {
            touch(q.query.job, strlen(q.query.job));
            touch(q.query.tables, q.query.n_tables * sizeof *q.query.tables);
            touch(q.query.ranges, q.query.n_ranges * sizeof *q.query.ranges);
            cpr_wire_restore_release(&q);
        }
        break;
    default:
        if (cpr_wire_list_decode(data, size, &l) == CPR_OK) {
            touch(l.job, strlen(l.job));
            cpr_wire_list_release(&l);
        }
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    decode_one(data[0] % 8u, data + 1, size - 1);
    return 0;
}
