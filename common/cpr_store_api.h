/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's functions as one table: how the client library reaches the
 * store for local:// without linking it. The client (a gRPC-only library)
 * takes the table from the store library when the program links it
 * (cpri_store_api_get resolves), else it loads libcpr-store.so.0 with
 * dlopen when the first local:// client opens (client/node.c). Not
 * installed; an ABI between two CPR libraries of the same build.
 *
 * Messages: the two libraries may each hold their own copy of the status
 * module (a thread's cpr_errmsg() buffer), so the client copies `errmsg()`
 * after a failed call instead of assuming that its own cpr_errmsg() has it.
 */
#ifndef CPR_STORE_API_H
#define CPR_STORE_API_H

#include "cpr/store.h"

/* 6: cpr_store_options gained local_dir (read by reader_open) */
#define CPR_STORE_API_ABI 7u

typedef struct cpri_store_api {
    uint32_t abi;   /* CPR_STORE_API_ABI of the store that filled it */
    cpr_status (*open)(const char *dir, const cpr_store_options *opts, cpr_store **out);
    void (*close)(cpr_store *store);
    cpr_status (*begin)(cpr_store *store, const cpr_part_spec *spec);
    cpr_status (*put_rows)(cpr_store *store, const cpr_part_id *id, const cpr_row_batch *b);
    cpr_status (*put_block)(cpr_store *store, const cpr_part_id *id, const void *block,
                            size_t len);
    cpr_status (*put_blob)(cpr_store *store, const cpr_part_id *id, const char *name,
                           uint64_t offset, const void *data, size_t len, uint32_t crc32c);
    cpr_status (*commit)(cpr_store *store, const cpr_part_id *id, uint64_t rows_sent);
    cpr_status (*abort)(cpr_store *store, const cpr_part_id *id);
    cpr_status (*list)(cpr_store *store, const char *job, cpr_part_info **out, size_t *n);
    cpr_status (*list_jobs)(cpr_store *store, char ***names, size_t *n);
    cpr_status (*restore)(cpr_store *store, const cpr_restore_query *q, cpr_row_fn fn,
                          void *ctx, cpr_restore_result *result);
    cpr_status (*read_blob)(cpr_store *store, const cpr_part_id *id, const char *name,
                            uint64_t *size, cpr_blob_fn fn, void *ctx);
    cpr_status (*stats_get)(cpr_store *store, cpr_store_stats *out);
    cpr_status (*verify)(cpr_store *store, const char *job, cpr_problem_fn fn, void *ctx,
                         cpr_verify_report *report);
    cpr_status (*gc)(cpr_store *store, const char *job, uint32_t keep, cpr_gc_report *report);
    cpr_status (*gc_floor)(cpr_store *store, const char *job, uint64_t floor,
                           cpr_gc_report *report);
    cpr_status (*recovery_get)(cpr_store *store, const char *job, uint64_t *generation,
                               void **plan, size_t *len, uint64_t *written_unix_ms);
    cpr_status (*recovery_put)(cpr_store *store, const char *job, uint64_t expected,
                               const void *plan, size_t len, uint64_t *generation,
                               uint64_t *written_unix_ms);
    const char *(*errmsg)(void);
    cpr_status (*commit_blobs)(cpr_store *store, const cpr_part_id *id, uint64_t rows_sent,
                               uint64_t blobs, uint64_t blob_bytes); /* ABI 2 */
    cpr_status (*part_location)(cpr_store *store, const cpr_part_id *id, char *out,
                                size_t cap); /* ABI 3 */
    /* ABI 4: direct reads (grpc:// clients given the store's pool) */
    cpr_status (*reader_open)(const cpr_store_options *opts, cpr_store_reader **out);
    const char *(*reader_id)(const cpr_store_reader *r);
    cpr_status (*reader_restore)(cpr_store_reader *r, const void *plan, size_t len,
                                 cpr_row_fn fn, void *ctx, cpr_restore_result *result);
    void (*reader_close)(cpr_store_reader *r);
    /* ABI 5: direct writes (the same clients, with direct_writes) */
    cpr_status (*writer_create)(cpr_store_reader *r, const char *object, cpr_store_writer **out);
    cpr_status (*writer_block)(cpr_store_writer *w, const void *block, size_t len,
                               cpr_store_block_ref *ref);
    cpr_status (*writer_finish)(cpr_store_writer *w, uint64_t *size);
    void (*writer_discard)(cpr_store_writer *w);
    /* ABI 7: each row's version (merges over several nodes), and a floor
     * that is a cut over several nodes */
    cpr_status (*restore_versions)(cpr_store *store, const cpr_restore_query *q,
                                   cpr_version_row_fn fn, void *ctx,
                                   cpr_restore_result *result);
    cpr_status (*gc_floor_cut)(cpr_store *store, const char *job, uint64_t floor,
                               cpr_gc_report *report);
} cpri_store_api;

/* Defined (and exported) by the store library. */
CPR_API const cpri_store_api *cpri_store_api_get(void);

#endif /* CPR_STORE_API_H */
