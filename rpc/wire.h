/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wire layer of ckptd and its clients: protobuf messages of
 * proto/cpr/v1/checkpoint.proto <-> the shared types of cpr/types.h. The only module
 * that uses protobuf-c.
 *
 * Decoding never trusts the bytes: anything malformed (truncated, garbage,
 * byte arrays whose lengths are not whole numbers of ids or floats, missing
 * names) is CPR_INVALID_ARGUMENT with a message saying what to fix; the
 * semantic checks (names, schemas, checksums, states) are the store's. A
 * decoded request owns its message: views inside it (names, arrays) stay
 * valid until the matching _release. Encoders return malloc'd buffers the
 * caller frees. All functions are thread-safe (no shared state).
 */
#ifndef CPR_WIRE_H
#define CPR_WIRE_H

/* W1 (wire.c): a decoded request takes at most CPRI_WIRE_DECODE_FACTOR times
 * its wire size plus CPRI_WIRE_DECODE_SLACK of memory; the server charges
 * that to its message budget before the handler runs (rpc/server.h). */
#define CPRI_WIRE_DECODE_FACTOR 16
#define CPRI_WIRE_DECODE_SLACK ((size_t)64 << 10)

#include <stddef.h>
#include <stdint.h>

#include "cpr/types.h"

/* ---- requests ------------------------------------------------------------- */

typedef struct cpri_wire_begin {
    cpr_part_spec spec;           /* id.job and tables point into the message */
    const char *direct;           /* BeginRequest.direct ("" if absent) */
    uint64_t token;               /* BeginRequest.begin_token (0 if absent) */
    void *msg;
    cpr_table_schema *tables;
} cpri_wire_begin;

/* A RowBatch, decoded in place: nothing of the message is copied except the
 * job name and, for ids/values/state that are not aligned in it, those
 * arrays. The message must outlive the struct, and the struct must not be
 * copied (id.job points into it). */
typedef struct cpri_wire_rows {
    cpr_part_id id;               /* id.job points into `job` */
    uint64_t lease;               /* the writer's lease (0 if absent) */
    cpr_row_batch batch;          /* arrays point into the message (or copies) */
    uint32_t dim, state_dim;      /* as sent (set in Restore responses) */
    const void *block;            /* RowBatch.block: a row block (NULL if absent) */
    size_t block_len;
    const void *plan;             /* RowBatch.plan: a piece of a restore plan */
    size_t plan_len;
    const uint64_t *versions;     /* RowBatch.versions: batch.n ids (NULL if absent) */
    char job[CPR_NAME_MAX + 1];
    void *copies[4];              /* aligned copies, when the message's were not */
} cpri_wire_rows;

typedef struct cpri_wire_chunk {
    cpr_part_id id;
    uint64_t lease;
    const char *name;
    uint64_t offset, size;
    const void *data;
    size_t len;
    uint32_t crc32c;
    void *msg;
} cpri_wire_chunk;

/* Commit (rows set), Abort and GetBlob (name set) carry a part id. */
typedef struct cpri_wire_part {
    cpr_part_id id;
    uint64_t lease;               /* Commit, Abort (0 if absent) */
    uint64_t rows;
    uint64_t blobs, blob_bytes;   /* Commit, when check_blobs */
    int check_blobs;
    int direct;                   /* Commit: the rows are in the part's segment */
    const void *segment_index;    /* Commit, direct: 40-byte records (the .proto) */
    size_t index_len;
    uint64_t segment_bytes;
    const char *name;
    void *msg;
} cpri_wire_part;

typedef struct cpri_wire_restore {
    cpr_restore_query query;      /* arrays point into this struct or the message */
    int blocks;                   /* answer with RowBatch.block */
    const char *direct;           /* RestoreRequest.direct ("" if absent) */
    uint32_t plan_version;        /* RestoreRequest.plan_version */
    int versions;                 /* RestoreRequest.versions: rows with their versions */
    void *msg;
    uint32_t *tables;
    cpr_row_range *ranges;
} cpri_wire_restore;

/* List (job as sent, "" if absent) and Verify (job NULL when empty: all jobs). */
typedef struct cpri_wire_list {
    const char *job;
    void *msg;
    int locations;     /* List: ListRequest.locations */
} cpri_wire_list;

/* Gc: job NULL when empty (every job); floor 0 when absent. */
typedef struct cpri_wire_gc {
    const char *job;
    uint32_t keep;
    uint64_t floor;
    void *msg;
    int floor_is_cut;  /* GcRequest.floor_is_cut */
} cpri_wire_gc;

/* PutRecoveryRequest (generation = expected_generation; written_unix_ms 0)
 * and RecoveryRecord. job is as sent ("" if absent); plan points into the
 * message (NULL when len is 0). */
typedef struct cpri_wire_recovery {
    const char *job;
    uint64_t generation;
    const void *plan;
    size_t len;
    uint64_t written_unix_ms;
    void *msg;
} cpri_wire_recovery;

cpr_status cpri_wire_begin_decode(const void *buf, size_t len, cpri_wire_begin *out);
cpr_status cpri_wire_rows_decode(const void *buf, size_t len, cpri_wire_rows *out);
cpr_status cpri_wire_chunk_decode(const void *buf, size_t len, cpri_wire_chunk *out);
cpr_status cpri_wire_commit_decode(const void *buf, size_t len, cpri_wire_part *out);
cpr_status cpri_wire_abort_decode(const void *buf, size_t len, cpri_wire_part *out);
cpr_status cpri_wire_getblob_decode(const void *buf, size_t len, cpri_wire_part *out);
cpr_status cpri_wire_restore_decode(const void *buf, size_t len, cpri_wire_restore *out);
cpr_status cpri_wire_list_decode(const void *buf, size_t len, cpri_wire_list *out);
/* ListJobsRequest has no fields: this only refuses bytes that are not one. */
cpr_status cpri_wire_list_jobs_decode(const void *buf, size_t len);
cpr_status cpri_wire_verify_decode(const void *buf, size_t len, cpri_wire_list *out);
cpr_status cpri_wire_gc_decode(const void *buf, size_t len, cpri_wire_gc *out);
/* GetRecoveryRequest: the job as sent ("" if absent); release with
 * cpri_wire_list_release. */
cpr_status cpri_wire_get_recovery_decode(const void *buf, size_t len, cpri_wire_list *out);
cpr_status cpri_wire_put_recovery_decode(const void *buf, size_t len, cpri_wire_recovery *out);

void cpri_wire_begin_release(cpri_wire_begin *m);
void cpri_wire_rows_release(cpri_wire_rows *m);
void cpri_wire_chunk_release(cpri_wire_chunk *m);
void cpri_wire_part_release(cpri_wire_part *m);
void cpri_wire_restore_release(cpri_wire_restore *m);
void cpri_wire_list_release(cpri_wire_list *m); /* also for verify and get_recovery */
void cpri_wire_gc_release(cpri_wire_gc *m);
/* For PutRecoveryRequest and RecoveryRecord alike. */
void cpri_wire_recovery_release(cpri_wire_recovery *m);

/* ---- encoders (requests: the client library; responses: ckptd) ------------- */

cpr_status cpri_wire_begin_encode(const cpr_part_spec *spec, uint8_t **buf, size_t *len);
/* The same asking for direct writes to store `direct` (NULL: not), with
 * the writer's begin token (0: none; BeginRequest.begin_token). */
cpr_status cpri_wire_begin_encode_direct(const cpr_part_spec *spec, const char *direct,
                                        uint64_t token, uint8_t **buf, size_t *len);
/* Requests of a part carry its writer's lease (0: none; responses). dim and
 * state_dim are written as given (0 in requests). */
cpr_status cpri_wire_rows_encode(const cpr_part_id *id, uint64_t lease, const cpr_row_batch *batch,
                                uint32_t dim, uint32_t state_dim, uint8_t **buf, size_t *len);
/* A Restore answer with each row's version (RestoreRequest.versions):
 * batch->crc32c must cover the rows; the message's covers the versions too. */
cpr_status cpri_wire_rows_encode_versions(const cpr_row_batch *batch, uint32_t dim,
                                         uint32_t state_dim, const uint64_t *versions,
                                         uint8_t **buf, size_t *len);
/* A RowBatch carrying one row block (bytes copied once, into the message). */
cpr_status cpri_wire_block_encode(const cpr_part_id *id, uint64_t lease, const void *block,
                                 size_t block_len,
                                 uint8_t **buf, size_t *len);
/* RestoreRequest; `blocks` asks for answers as row blocks, `direct` (NULL:
 * none) for the plan, when the daemon's store is that one. */
cpr_status cpri_wire_restore_encode_blocks(const cpr_restore_query *q, int blocks,
                                          const char *direct, uint8_t **buf, size_t *len);
/* RestoreRequest asking for rows with their versions, as blocks (no plan). */
cpr_status cpri_wire_restore_encode_versions(const cpr_restore_query *q, uint8_t **buf,
                                            size_t *len);
/* A RowBatch carrying a piece of a restore plan (direct reads). */
cpr_status cpri_wire_plan_encode(const void *piece, size_t len, uint8_t **buf, size_t *out_len);
cpr_status cpri_wire_chunk_encode(const cpr_part_id *id, uint64_t lease, const char *name,
                                 uint64_t offset,
                                 uint64_t size, const void *data, size_t data_len,
                                 uint32_t crc32c, uint8_t **buf, size_t *len);
/* A Commit that also names the blobs sent (count and total bytes). */
cpr_status cpri_wire_commit_encode_blobs(const cpr_part_id *id, uint64_t lease, uint64_t rows,
                                        uint64_t blobs, uint64_t blob_bytes, uint8_t **buf,
                                        size_t *len);
cpr_status cpri_wire_commit_encode(const cpr_part_id *id, uint64_t lease, uint64_t rows,
                                  uint8_t **buf, size_t *len);
/* A Commit of a direct part (and its blobs): the segment's index and size. */
struct cpr_store_block_ref;
cpr_status cpri_wire_commit_encode_direct(const cpr_part_id *id, uint64_t lease, uint64_t rows,
                                         uint64_t blobs, uint64_t blob_bytes,
                                         const struct cpr_store_block_ref *refs, size_t n,
                                         uint64_t segment_bytes, uint8_t **buf, size_t *len);
/* CommitRequest.segment_index as refs (*refs malloc'd, the caller frees);
 * CPR_INVALID_ARGUMENT when its length is not a multiple of a record. */
cpr_status cpri_wire_segment_index_decode(const void *index, size_t len,
                                         struct cpr_store_block_ref **refs, size_t *n);
cpr_status cpri_wire_abort_encode(const cpr_part_id *id, uint64_t lease, uint8_t **buf,
                                 size_t *len);
cpr_status cpri_wire_getblob_encode(const cpr_part_id *id, const char *name, uint8_t **buf,
                                   size_t *len);
cpr_status cpri_wire_restore_encode(const cpr_restore_query *q, uint8_t **buf, size_t *len);
cpr_status cpri_wire_list_encode(const char *job, uint8_t **buf, size_t *len);
/* A ListRequest that asks for each part's location. */
cpr_status cpri_wire_list_where_encode(const char *job, uint8_t **buf, size_t *len);
cpr_status cpri_wire_list_jobs_encode(uint8_t **buf, size_t *len);
/* job NULL or "": every job. */
cpr_status cpri_wire_verify_encode(const char *job, uint8_t **buf, size_t *len);
/* job NULL or "": every job (keep only). floor > 0: raise `job`'s floor to
 * exactly that id (keep is then not used; see GcRequest in the .proto). */
/* A Gc whose floor is a cut over every node holding the job (GcRequest.floor_is_cut). */
cpr_status cpri_wire_gc_encode_cut(const char *job, uint64_t floor, uint8_t **buf, size_t *len);
cpr_status cpri_wire_gc_encode(const char *job, uint32_t keep, uint64_t floor, uint8_t **buf,
                              size_t *len);

cpr_status cpri_wire_get_recovery_encode(const char *job, uint8_t **buf, size_t *len);
cpr_status cpri_wire_put_recovery_encode(const char *job, uint64_t expected, const void *plan,
                                        size_t plan_len, uint8_t **buf, size_t *len);

cpr_status cpri_wire_put_response_encode(uint64_t rows, uint64_t bytes, uint8_t **buf,
                                        size_t *len);
cpr_status cpri_wire_begin_response_encode(uint64_t lease, uint8_t **buf, size_t *len);
cpr_status cpri_wire_begin_response_decode(const void *buf, size_t len, uint64_t *lease);
/* With BeginResponse.segment (NULL or "": none). */
cpr_status cpri_wire_begin_response_encode_segment(uint64_t lease, const char *segment,
                                                  uint8_t **buf, size_t *len);
/* segment[cap] gets BeginResponse.segment ("" if absent); CPR_INVALID_ARGUMENT
 * when it does not fit. */
cpr_status cpri_wire_begin_response_decode_segment(const void *buf, size_t len, uint64_t *lease,
                                                  char *segment, size_t cap);
/* locations (NULL: none sent) holds one string per part. */
cpr_status cpri_wire_list_response_encode(const cpr_part_info *parts, size_t n,
                                         uint64_t latest_consistent,
                                         char *const *locations, const char *store,
                                         uint8_t **buf, size_t *len);
/* Error counts travel by gRPC status name, several of our codes sharing one
 * (see cpr_status_grpc). */
cpr_status cpri_wire_stats_response_encode(const cpr_store_stats *stats, uint8_t **buf,
                                          size_t *len);
cpr_status cpri_wire_list_jobs_response_encode(char *const *jobs, size_t n, uint8_t **buf,
                                              size_t *len);

/* A problem found by verify, as sent in a VerifyResponse. */
typedef struct cpri_wire_problem {
    const char *what;
    const char *where;
} cpri_wire_problem;
#define CPR_WIRE_MAX_PROBLEMS 1000 /* details in one VerifyResponse */

/* `report->problems` counts every problem; `details` holds the first n
 * (at most CPR_WIRE_MAX_PROBLEMS are sent; more is CPR_INVALID_ARGUMENT). */
cpr_status cpri_wire_verify_response_encode(const cpr_verify_report *report,
                                           const cpri_wire_problem *details, size_t n,
                                           uint8_t **buf, size_t *len);
cpr_status cpri_wire_gc_response_encode(const cpr_gc_report *report, uint8_t **buf,
                                       size_t *len);

/* ---- response decoders (client side) ----------------------------------------- */

/* Decode a ListResponse: *parts malloc'd, caller frees. */
cpr_status cpri_wire_list_response_decode(const void *buf, size_t len, cpr_part_info **parts,
                                         size_t *n, uint64_t *latest_consistent);
/* The same, with (each may be NULL) *locations: n malloc'd strings ("" when
 * not sent), freed with cpr_names_free(*locations, n); and store[0..cap):
 * ListResponse.store, truncated. */
cpr_status cpri_wire_list_response_decode_where(const void *buf, size_t len,
                                               cpr_part_info **parts, size_t *n,
                                               uint64_t *latest_consistent, char ***locations,
                                               char *store, size_t store_cap);

/* The inverse of cpri_wire_stats_response_encode; `parts` is parts_committed.
 * Each error count goes to out->errors[cpr_status_from_grpc(code)]: codes
 * that several statuses share come back under one of them (UNAVAILABLE as
 * CPR_UNAVAILABLE, RESOURCE_EXHAUSTED as CPR_RESOURCE_EXHAUSTED, INTERNAL as
 * CPR_INTERNAL); a name this build does not know counts as CPR_INTERNAL. */
cpr_status cpri_wire_stats_response_decode(const void *buf, size_t len, cpr_store_stats *out);

/* *jobs: n malloc'd names and a NULL entry; free with cpr_names_free. */
cpr_status cpri_wire_list_jobs_response_decode(const void *buf, size_t len, char ***jobs,
                                              size_t *n);

/* Fill *report and call fn (may be NULL) once per detail, in order; the
 * strings are valid during the call only. */
cpr_status cpri_wire_verify_response_decode(const void *buf, size_t len,
                                           cpr_verify_report *report, cpr_problem_fn fn,
                                           void *ctx);
cpr_status cpri_wire_gc_response_decode(const void *buf, size_t len, cpr_gc_report *out);

/* RecoveryRecord, the answer to GetRecovery and PutRecovery. */
cpr_status cpri_wire_recovery_record_encode(const char *job, uint64_t generation,
                                           const void *plan, size_t plan_len,
                                           uint64_t written_unix_ms, uint8_t **buf,
                                           size_t *len);
cpr_status cpri_wire_recovery_record_decode(const void *buf, size_t len,
                                           cpri_wire_recovery *out);

#endif /* CPR_WIRE_H */
