/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The parts of the handler fuzzer (fuzz_handlers.c) that its request
 * builders (fuzz_handlers_build.c) and its replay driver
 * (replay_handlers.c) share: the methods it knows by path, the credentials
 * and the rights each holds on which jobs (the oracle that the handlers'
 * answers are checked against), the small sets of job and blob names, and
 * the byte reader every field of an input is taken from.
 *
 * An input is a sequence of calls, each
 *
 *     method cred fault count  message*
 *
 * one byte each: `method` indexes cpri_service_methods() (modulo its
 * length), `cred` the credentials below (modulo FH_CREDS), `fault` the
 * transport trouble of the call (fuzz_handlers.c, configure_faults),
 * `count` the messages of a client stream (1 + count % FH_MAX_STREAM;
 * other calls have one). A message is a mode byte and then either raw bytes (mode % 4 == 3:
 * a length byte, 255 meaning a 16-bit little-endian length follows, then
 * the bytes as the request) or the fields a builder reads to make a valid
 * encoding (fuzz_handlers_build.c lists them per method). Bytes read past
 * the end of the input are 0, and 0 is each field's everyday value, so that
 * a short input still makes sensible calls.
 */
#ifndef CPR_FUZZ_HANDLERS_H
#define CPR_FUZZ_HANDLERS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpr/types.h"

/* A broken expectation: the fuzzer's crash. */
#define FH_CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "fuzz_handlers: check failed: %s: ", #cond); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            abort(); \
        } \
    } while (0)

/* The methods the builders and the oracle know, by path; FH_UNKNOWN ones
 * (added to the service later) are driven with raw bytes only. */
typedef enum fh_method {
    FH_BEGIN, FH_PUT_ROWS, FH_PUT_BLOB, FH_COMMIT, FH_ABORT, FH_LIST, FH_RESTORE,
    FH_GET_BLOB, FH_STATS, FH_HEALTH, FH_LIST_JOBS, FH_VERIFY, FH_GC, FH_GET_RECOVERY,
    FH_PUT_RECOVERY, FH_UNKNOWN
} fh_method;

fh_method fh_method_of(const char *path);
const char *fh_method_path(fh_method m); /* NULL for FH_UNKNOWN */

/* ---- credentials ----------------------------------------------------------------- */

#define FH_CREDS 15
#define FH_CRED_ADMIN_ALL 0 /* the everyday credential: admin on "*" */
#define FH_CRED_READ_JA 1
#define FH_CRED_NONE 8

typedef struct fh_cred {
    const char *authorization; /* the metadata value (NULL: none) */
    size_t authorization_len;  /* may hold a NUL, or exceed what ckptd reads */
    const char *subject;       /* the verified client certificate (NULL: none) */
} fh_cred;

/* The rules of the auth file the fuzzer writes (its text, NUL-terminated). */
const char *fh_auth_file_text(void);

/* Credential i's metadata. The oversized one is built on first use. */
fh_cred fh_cred_get(unsigned i);

/* The oracle: 1 if credential i is a principal at all (some rule matches);
 * 1 if it holds `right` (CPRI_RIGHT_*) on `job` (NULL: store-wide), by the
 * rules of fh_auth_file_text() and auth.h's semantics. */
int fh_cred_known(unsigned i);
int fh_cred_may(unsigned i, const char *job, unsigned right);
/* The right on some job (a write stream needs the write right on one
 * before its first message). */
int fh_cred_may_some(unsigned i, unsigned right);

/* ---- names ------------------------------------------------------------------------- */

#define FH_JOBS 5 /* "ja", "jb", "team-x", "team-y", and one the store refuses */
#define FH_VALID_JOBS 4
extern const char *const fh_jobs[FH_JOBS];
#define FH_BLOB_NAMES 3
extern const char *const fh_blob_names[FH_BLOB_NAMES];

/* ---- the reader -------------------------------------------------------------------- */

typedef struct fh_reader {
    const uint8_t *p;
    size_t left;
} fh_reader;

static inline uint8_t fh_u8(fh_reader *r)
{
    if (r->left == 0)
        return 0;
    r->left--;
    return *r->p++;
}

static inline uint64_t fh_u64(fh_reader *r)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)fh_u8(r) << (8 * i);
    return v;
}

/* ---- what the builders remember within one input ------------------------------------ */

#define FH_MAX_TABLES 3
#define FH_MAX_STREAM 4  /* messages of one client stream */
#define FH_LEASES 8      /* leases remembered, by part */

typedef struct fh_part_lease {
    char job[CPR_NAME_MAX + 1];
    uint32_t shard;
    uint64_t checkpoint, lease;
} fh_part_lease;

typedef struct fh_memory {
    int have_part;                 /* a Begin succeeded in this input */
    char job[CPR_NAME_MAX + 1];    /* its id */
    uint32_t shard;
    uint64_t checkpoint;
    cpr_table_schema tables[FH_MAX_TABLES]; /* its schema */
    size_t n_tables;
    uint64_t last_lease;           /* the lease the last successful Begin answered */
    fh_part_lease leases[FH_LEASES];
    size_t n_leases;               /* ring: the newest FH_LEASES */
    uint64_t rows_sent;            /* rows built for that part since its Begin */
    uint64_t blob_next[FH_BLOB_NAMES]; /* end of the last chunk built, per name */
    uint64_t generation[FH_JOBS];  /* recovery generations answered, per job */
} fh_memory;

/* Remember a successful Begin of spec (its lease answered). */
void fh_memory_begun(fh_memory *m, const cpr_part_spec *spec, uint64_t lease);

/* The checkpoint id after the newest part of (job, shard) in the store, 1
 * for none: the builders' everyday checkpoint (fuzz_handlers.c). */
uint64_t fh_next_checkpoint(const char *job, uint32_t shard);

/* Build one request of method m from the fields of r into a malloc'd
 * buffer. CPR_INVALID_ARGUMENT when m has no builder (FH_UNKNOWN) or the
 * encoder refused the fields (the caller sends raw bytes instead). */
cpr_status fh_build(fh_method m, fh_reader *r, fh_memory *mem, uint8_t **buf, size_t *len);

/* ---- for the replay ------------------------------------------------------------------ */

/* One input, as LLVMFuzzerTestOneInput takes it. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Close the store, remove its directory and free what the fuzzer holds,
 * so that LeakSanitizer sees a clean exit. */
void fh_shutdown(void);
/* The index of m in cpri_service_methods() (-1 if the service lacks it). */
int fh_method_index(fh_method m);

#endif /* CPR_FUZZ_HANDLERS_H */
