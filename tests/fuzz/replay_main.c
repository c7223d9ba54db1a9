/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replays fuzz_wire.c without libFuzzer, so CI runs it with any compiler
 * (and under ASan/UBSan in `make asan`): valid encodings of every request
 * type, deterministic mutations of them (bit flips, truncations, insertions,
 * random bytes; seeded), and every file of the corpus directory given on the
 * command line (reproducers of crashes found by libFuzzer go there).
 * Exits 0 when every input was handled; a crash is the failure.
 * `--write-seeds DIR` writes the valid seeds into DIR instead, as the seed
 * corpus of a libFuzzer run (tests/fuzz/README.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay_util.h"
#include "wire.h"

#define MUTATIONS 4000

#define SEED_KINDS 19u /* as FUZZ_KINDS in fuzz_wire.c */

/* Kinds 16-18: the recovery record's requests and the record. */
static cpr_status encode_recovery(unsigned kind, uint8_t **buf, size_t *len)
{
    static const char plan[] = "{\"cpr_plan\":1,\"action\":\"partial\"}";
    switch (kind) {
    case 16: return cpri_wire_get_recovery_encode("job", buf, len);
    case 17: return cpri_wire_put_recovery_encode("job", 3, plan, sizeof plan - 1, buf, len);
    default: return cpri_wire_recovery_record_encode("job", 4, plan, sizeof plan - 1,
                                                    1700000000000ull, buf, len);
    }
}

/* Kinds 8-15: operations requests and responses. */
static cpr_status encode_admin(unsigned kind, uint8_t **buf, size_t *len)
{
    static char *const jobs[2] = {"job", "other.job"};
    static const cpri_wire_problem details[2] = {{"row checksum mismatch", "job j row 3"},
                                                {"blob block fails", "job j blob dense"}};
    static const cpr_part_info parts[2] = {{.shard = 1, .checkpoint = 5, .kind = CPR_KIND_FULL,
                                            .num_shards = 2, .rows = 10, .committed = 1},
                                           {.shard = 0, .checkpoint = 6, .base = 5,
                                            .kind = CPR_KIND_DELTA, .num_shards = 2}};
    cpr_store_stats stats = {.jobs = 2, .parts_committed = 7, .rows_in = 99};
    cpr_verify_report vr = {10, 2, 4000, 3};
    cpr_gc_report gr = {5, 2, 300, 1, 10000, 4000};
    stats.errors[CPR_INVALID_ARGUMENT] = 2;
    stats.errors[CPR_IO] = 1;
    switch (kind) {
    case 8: return cpri_wire_list_jobs_encode(buf, len);
    case 9: return cpri_wire_verify_encode("job", buf, len);
    case 10: return cpri_wire_gc_encode("job", 2, 7, buf, len);
    case 11: return cpri_wire_stats_response_encode(&stats, buf, len);
    case 12: return cpri_wire_list_jobs_response_encode(jobs, 2, buf, len);
    case 13: return cpri_wire_verify_response_encode(&vr, details, 2, buf, len);
    case 14: return cpri_wire_gc_response_encode(&gr, buf, len);
    default: return cpri_wire_list_response_encode(parts, 2, 5, NULL, NULL, buf, len);
    }
}

/* Seed: one type byte followed by a valid encoding of that type. */
static size_t make_seed(unsigned kind, uint8_t *out, size_t cap)
{
    static const cpr_table_schema t[] = {{1, 100, 4, 1}, {2, 7, 2, 0}};
    static const uint64_t ids[3] = {1, 2, 99};
    static const float vals[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, st[3] = {1, 2, 3};
    cpr_part_id id = {"job", 1, 5};
    cpr_part_spec spec = {id, CPR_KIND_FULL, 3, 2, 0, t, 2, 0};
    cpr_row_batch b = {1, 3, ids, vals, 12, st, 3, 0xdeadbeef, 0};
    cpr_row_range range = {2, 90};
    uint32_t tables[1] = {1};
    cpr_restore_query q = {"job", 5, 0, tables, 1, &range, 1, 4, 1, 16};
    uint8_t *buf = NULL;
    size_t len = 0;
    cpr_status rc = kind == 0 ? cpri_wire_begin_encode(&spec, &buf, &len)
                    : kind == 1 ? cpri_wire_rows_encode(&id, 0, &b, 4, 1, &buf, &len)
                    : kind == 2 ? cpri_wire_chunk_encode(&id, 0, "dense", 0, 3, "abc", 3, 7, &buf, &len)
                    : kind == 3 ? cpri_wire_commit_encode(&id, 0, 3, &buf, &len)
                    : kind == 4 ? cpri_wire_abort_encode(&id, 0, &buf, &len)
                    : kind == 5 ? cpri_wire_getblob_encode(&id, "dense", &buf, &len)
                    : kind == 6 ? cpri_wire_restore_encode(&q, &buf, &len)
                    : kind == 7 ? cpri_wire_list_encode("job", &buf, &len)
                    : kind >= 16 ? encode_recovery(kind, &buf, &len)
                                 : encode_admin(kind, &buf, &len);
    if (rc != CPR_OK || len + 1 > cap) {
        free(buf);
        return 0;
    }
    out[0] = (uint8_t)kind;
    memcpy(out + 1, buf, len);
    free(buf);
    return len + 1;
}

static int write_seeds(const char *dir)
{
    uint8_t seed[4096];
    for (unsigned kind = 0; kind < SEED_KINDS; kind++) {
        char name[32];
        size_t len = make_seed(kind, seed, sizeof seed);
        snprintf(name, sizeof name, "seed-%02u", kind);
        if (len == 0 || replay_write(dir, name, seed, len) != 0) {
            fprintf(stderr, "replay: cannot write seed %u into %s\n", kind, dir);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint8_t seed[4096], buf[4096 + 64];
    size_t inputs = 0;
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0)
        return write_seeds(argv[2]);
    for (unsigned kind = 0; kind < SEED_KINDS; kind++) {
        size_t len = make_seed(kind, seed, sizeof seed);
        if (len == 0) {
            fprintf(stderr, "replay: cannot encode seed %u\n", kind);
            return 1;
        }
        LLVMFuzzerTestOneInput(seed, len);
        for (int m = 0; m < MUTATIONS; m++, inputs++) {
            memcpy(buf, seed, len);
            size_t n = len;
            for (int k = 0; k < 1 + m % 3; k++)
                n = replay_mutate(buf, n, sizeof buf, 1);
            LLVMFuzzerTestOneInput(buf, n);
        }
        for (int m = 0; m < 200; m++, inputs++) { /* pure noise, typed */
            size_t n = 1 + replay_next() % 256;
            buf[0] = (uint8_t)kind;
            for (size_t i = 1; i < n; i++)
                buf[i] = (uint8_t)replay_next();
            LLVMFuzzerTestOneInput(buf, n);
        }
    }
    int files = argc > 1 ? replay_dir(argv[1]) : 0;
    printf("fuzz_wire replay: %zu generated inputs and %d corpus files, no crash\n", inputs, files);
    return 0;
}
