/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/store.h - the CPR checkpoint store: durable, atomic, verified storage of
 * embedding-table rows and named blobs, organised as jobs, shards and
 * checkpoints. The daemon (ckptd) serves it over gRPC; the client library
 * also runs it in-process ("local:///path"). See docs/store.md for how it
 * works and docs/format.md for the row block and the on-disk layout.
 *
 * Data model: jobs, parts, kinds, consistency and cuts are cpr/types.h's.
 *   as of C    for every row, the newest committed version with id <= C
 *              in the state of its shard, where a shard's state as of C is
 *              its newest FULL part at or below C and its parts after that
 *              FULL (all its parts if it has none): a FULL is the whole
 *              state of its shard, so a row that an older part of the shard
 *              held and the FULL does not is no longer part of it. Between
 *              shards, the newer checkpoint wins (at equal ids, the lower
 *              shard); within one part, the later block.
 *
 * Threading: a cpr_store is thread-safe; any number of threads may write
 * different parts, restore and list at once. Writes to one part are
 * serialised internally. Callbacks run on the calling thread.
 *
 * Errors: every function returns a cpr_status; cpr_errmsg() says what to fix.
 * A failed call leaves the store unchanged unless documented otherwise.
 * Out-parameters are written only on success.
 */
#ifndef CPR_STORE_H
#define CPR_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/status.h"
#include "cpr/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cpr_store cpr_store;

/*
 * Open (creating if missing) the store in directory `dir`. One process at a
 * time may open a directory (CPR_UNAVAILABLE otherwise). Uncommitted parts
 * left by a crash are reclaimed here. On success *out owns the store; release
 * it with cpr_store_close. `opts` may be NULL.
 */
CPR_API cpr_status cpr_store_open(const char *dir, const cpr_store_options *opts,
                          cpr_store **out);

/*
 * Close the store. Open (uncommitted) parts are aborted; committed data is
 * already durable. NULL is a no-op.
 */
CPR_API void cpr_store_close(cpr_store *store);

/*
 * Open a part for writing. Errors: CPR_INVALID_ARGUMENT (bad name, kind,
 * schema, duplicate table, dim mismatch with earlier parts of the job, a
 * shard not below num_shards, a DELTA base not below its own checkpoint;
 * checked before the part's state),
 * CPR_ALREADY_EXISTS (the part is committed or already open),
 * CPR_FAILED_PRECONDITION (checkpoint id not above the shard's newest
 * committed part or the retention floor; DELTA without a committed base).
 */
CPR_API cpr_status cpr_store_begin(cpr_store *store, const cpr_part_spec *spec);

/*
 * Append rows to an open part (at most 2^24 rows a call). Ids within one
 * batch must be distinct; a row
 * sent again in a later batch of the same part replaces the earlier copy.
 * Errors: CPR_INVALID_ARGUMENT (table not in schema, id >= rows, lengths not
 * n x dim), CPR_CORRUPT (checksum mismatch), CPR_FAILED_PRECONDITION (part
 * not open: never begun, committed or aborted), CPR_IO, CPR_RESOURCE_EXHAUSTED
 * (also: more than 1024 batches of the part went backwards in row order;
 * send each table's rows in ascending id order). On failure the part stays
 * open and unchanged, except after CPR_IO (then abort it).
 */
CPR_API cpr_status cpr_store_put_rows(cpr_store *store, const cpr_part_id *id,
                              const cpr_row_batch *batch);

/*
 * Append one row block (cpr/block.h) to an open part, bytes unchanged: the
 * encoding a client builds once and the store keeps. The block is checked
 * whole before anything is written: its CRC32C, header, ascending ids, that
 * its table is in the part's schema with the same dims, and that its rows
 * are below the table's row count. Blocks with per-row versions are the
 * store's own and refused. Same replacement rule, row order advice and
 * errors as cpr_store_put_rows (CPR_CORRUPT for a block that fails its
 * check).
 */
CPR_API cpr_status cpr_store_put_block(cpr_store *store, const cpr_part_id *id, const void *block,
                               size_t len);

/*
 * Append a chunk to blob `name` (same character rules as job names, at most
 * CPR_NAME_MAX) of an open part. Chunks arrive in order: `offset` must equal
 * the bytes already written to that blob. `crc32c` covers data[0..len).
 * Errors as for cpr_store_put_rows, plus CPR_INVALID_ARGUMENT for a wrong
 * offset.
 */
CPR_API cpr_status cpr_store_put_blob(cpr_store *store, const cpr_part_id *id,
                              const char *name, uint64_t offset,
                              const void *data, size_t len, uint32_t crc32c);

/*
 * Make the part durable and visible, atomically. Returns only after rows,
 * blobs and the commit record are on disk. `rows_sent` is the number of rows
 * the writer sent; a mismatch fails with CPR_INVALID_ARGUMENT and the part
 * stays open (abort it or send the missing rows). Errors:
 * CPR_FAILED_PRECONDITION (no open part, already committed, a newer part of
 * the shard committed first, DELTA base no longer the newest, the retention
 * floor raised to or past the part's checkpoint while it was open).
 */
CPR_API cpr_status cpr_store_commit(cpr_store *store, const cpr_part_id *id,
                            uint64_t rows_sent);

/* cpr_store_commit that also checks the blobs: the part must hold exactly
 * `blobs` blobs of `blob_bytes` bytes in all, what the writer sent; a
 * mismatch fails with CPR_INVALID_ARGUMENT naming both, and the part stays
 * open. */
CPR_API cpr_status cpr_store_commit_blobs(cpr_store *store, const cpr_part_id *id,
                                  uint64_t rows_sent, uint64_t blobs, uint64_t blob_bytes);

/* Drop an open part and everything written to it. CPR_FAILED_PRECONDITION
 * if it is committed, CPR_NOT_FOUND if it was never begun. */
CPR_API cpr_status cpr_store_abort(cpr_store *store, const cpr_part_id *id);

/*
 * Abort every open part that nothing has touched (begin, put_rows, put_blob,
 * commit) for at least `idle_s` seconds (monotonic clock; 0: every open part
 * not in a call right now), as cpr_store_abort would, and log each one. For
 * servers whose clients may vanish between begin and commit: call it
 * periodically. Parts in a call (a put waiting for the disk, a commit) are
 * never aborted, whatever their age. `*aborted` (may be NULL) gets the
 * number aborted. Errors: CPR_INVALID_ARGUMENT (idle_s negative or NaN),
 * CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_store_abort_idle(cpr_store *store, double idle_s, uint64_t *aborted);

/*
 * Parts of `job` (committed and open), ordered by (checkpoint, shard).
 * *out is allocated with malloc and owned by the caller (free()); *n may be 0
 * with *out NULL. CPR_NOT_FOUND if the job has no parts.
 */
CPR_API cpr_status cpr_store_list(cpr_store *store, const char *job,
                          cpr_part_info **out, size_t *n);

/*
 * cpr_store_list and cpr_store_latest_cut from one view of the job (for a
 * store in RADOS, one reload of the job from the pool): the cut is that of
 * the parts listed. *cut (cut may be NULL) is 0 when the job has no
 * consistent cut yet. Errors as cpr_store_list's.
 */
CPR_API cpr_status cpr_store_list_cut(cpr_store *store, const char *job,
                                      cpr_part_info **out, size_t *n, uint64_t *cut);

/*
 * Names of every job with at least one part (committed or open) or a fold
 * (a store can hold only folds of a job spread over several nodes, after
 * cpr_store_gc_floor_cut), sorted
 * (strcmp order). *names is a malloc'd array of *n malloc'd strings followed
 * by a NULL entry, owned by the caller: release it with cpr_names_free.
 * An empty store gives *n = 0 and an array holding only the NULL.
 */
CPR_API cpr_status cpr_store_list_jobs(cpr_store *store, char ***names, size_t *n);

/*
 * Where part `id`'s bytes are, for people (cprctl where), in `out` (cap
 * bytes, truncated to fit): "rados:POOL/NS OBJECT@0..K (B bytes)" for a
 * store in Ceph RADOS, "file:PATH (B bytes)" on a local disk, each followed
 * by its blobs ("; blobs: ..."), or "open: being written" for an open part.
 * CPR_NOT_FOUND when the store has no such part.
 */
CPR_API cpr_status cpr_store_part_location(cpr_store *store, const cpr_part_id *id, char *out,
                                           size_t cap);

/* What names this store's storage when other processes may open the same
 * ("rados:FSID/POOL/NAMESPACE" for a store in Ceph RADOS: ckptd gateways of
 * one namespace share it), or NULL (a local directory: this store's own).
 * Valid until the store is closed. */
CPR_API const char *cpr_store_shared_id(const cpr_store *store);
/* What direct readers name this store's storage by (cpr_store_reader_id):
 * cpr_store_shared_id's for a store in Ceph RADOS; for a store on a local
 * disk "local:" and 32 hex digits, kept in DIR/store-id (written at its
 * first open, and again when damaged), which a reader given DIR as
 * local_dir reads. NULL when the open could not read or write that file (it
 * logs why): the store works, without direct reads. Valid until the store
 * is closed. */
CPR_API const char *cpr_store_read_id(const cpr_store *store);

/* Largest consistent cut of `job`. CPR_NOT_FOUND if the job has none. */
CPR_API cpr_status cpr_store_latest_cut(cpr_store *store, const char *job,
                                uint64_t *cut);

/*
 * Stream the selected rows, table by table in ascending (table, row) order,
 * in batches of at most batch_rows. Only blocks that can hold the answer are
 * read (the block index prunes by table and row span); memory holds the
 * reads in flight and the blocks the merge is inside, whatever the size of
 * the job. Every block's CRC32C is verified before any of its rows is used;
 * a damaged block stops the restore with CPR_CORRUPT (saying which segment
 * and offset) and none of its rows is delivered. Errors:
 * CPR_NOT_FOUND (unknown job; no consistent cut when `consistent`; no
 * committed part or retention's fold at or below as_of; a table in `tables`
 * that no committed part of the job declares),
 * CPR_FAILED_PRECONDITION (as_of below the retention floor). `result` may be
 * NULL.
 */
CPR_API cpr_status cpr_store_restore(cpr_store *store, const cpr_restore_query *query,
                             cpr_row_fn fn, void *ctx,
                             cpr_restore_result *result);

/*
 * cpr_store_restore, with each row's version: versions[i] is the checkpoint
 * id of the part that wrote row batch->ids[i] (the newest at or below the
 * state restored). What a client needs to merge the answers of several
 * stores that each hold some versions of a row (client.h, "resharding over
 * several nodes"). The batch's crc32c covers ids, values and state, not the
 * versions; versions is valid during the call.
 */
typedef cpr_status (*cpr_version_row_fn)(void *ctx, const cpr_row_batch *batch,
                                         const uint64_t *versions);
CPR_API cpr_status cpr_store_restore_versions(cpr_store *store, const cpr_restore_query *query,
                                              cpr_version_row_fn fn, void *ctx,
                                              cpr_restore_result *result);

/* cpr_store_restore_blocks with each row's version: a block with
 * CPR_BLOCK_VERSIONS carries them (version 0), any other is a stored block
 * passed whole and `version` is every row's (its part's checkpoint). */
typedef cpr_status (*cpr_version_block_fn)(void *ctx, const void *block, size_t len,
                                           uint64_t version);
CPR_API cpr_status cpr_store_restore_blocks_versions(cpr_store *store,
                                                     const cpr_restore_query *query,
                                                     cpr_version_block_fn fn, void *ctx,
                                                     cpr_restore_result *result);

/* cpr_store_restore, delivering blocks: the same rows in the same order, in
 * blocks of at most batch_rows rows (a larger stored block is re-batched).
 * Meant for a stream: rows merged from several blocks come in blocks of at
 * most about 256 KiB, whatever batch_rows allows; a stored block that
 * passes whole keeps its size. */
CPR_API cpr_status cpr_store_restore_blocks(cpr_store *store, const cpr_restore_query *query,
                                    cpr_block_fn fn, void *ctx,
                                    cpr_restore_result *result);

/*
 * Direct reads (docs/client.md): a restore whose reading is done by another
 * process, over the store's own storage. cpr_store_restore_plan resolves and
 * plans the query (as cpr_store_restore would: the same errors) and gives
 * the plan as bytes (*plan malloc'd, the caller frees it; result->as_of
 * names the state, rows and bytes are 0); cpr_store_reader_restore, on a
 * reader of the same storage, runs it: the same rows in the same order as
 * cpr_store_restore, every block checked against the plan's record of it.
 * The segments a plan names stay readable for 300 s after retention or a
 * fold removes their records, unless a gateway of the store opens in that
 * time (its sweep removes what no record names); a plan read after its
 * segments went fails with CPR_CORRUPT ("missing"), never with other rows,
 * and a new plan is the remedy. Plans are versioned
 * (CPR_STORE_PLAN_VERSION, docs/format.md); a plan of another version is
 * refused with CPR_INVALID_ARGUMENT. A store on a local disk plans too
 * (its readers open its directory: local_dir); once it has, its removed
 * segments wait out the same 300 s (until it closes, or at once while its
 * disk is below the free-space reserve); without a cpr_store_read_id it
 * refuses with CPR_FAILED_PRECONDITION.
 */
#define CPR_STORE_PLAN_VERSION 1u
CPR_API cpr_status cpr_store_restore_plan(cpr_store *store, const cpr_restore_query *query,
                                          void **plan, size_t *len,
                                          cpr_restore_result *result);

/*
 * A reader of a store's storage, without opening the store (no catalog, no
 * gateway; any number of readers at once). `opts` names the storage: a
 * store in Ceph RADOS as for cpr_store_open (rados_pool, rados_conf,
 * rados_namespace, rados_user), or a store on a disk this process reads by
 * its directory (local_dir; buffered_reads as for cpr_store_open); its
 * other fields are ignored. Errors: CPR_INVALID_ARGUMENT (neither or both
 * named), CPR_UNAVAILABLE (no monitor answers), CPR_NOT_FOUND (no such
 * pool; a directory without DIR/store-id), CPR_CORRUPT (a store-id that is
 * not a name), CPR_IO (a store-id this process may not read). On success
 * *out owns the reader: cpr_store_reader_close.
 * Thread-safe: restores may run on it at once.
 */
typedef struct cpr_store_reader cpr_store_reader;
CPR_API cpr_status cpr_store_reader_open(const cpr_store_options *opts, cpr_store_reader **out);
/* The storage's name, as cpr_store_read_id gives it for a store on it. */
CPR_API const char *cpr_store_reader_id(const cpr_store_reader *r);
/* Run a plan of cpr_store_restore_plan into fn (cpr_store_restore's
 * delivery). A damaged or missing block is CPR_CORRUPT naming the pool or
 * file, segment and offset, and none of its rows is delivered; a segment
 * file this process may not read is CPR_IO. */
CPR_API cpr_status cpr_store_reader_restore(cpr_store_reader *r, const void *plan, size_t len,
                                            cpr_row_fn fn, void *ctx,
                                            cpr_restore_result *result);
/* NULL is a no-op. */
CPR_API void cpr_store_reader_close(cpr_store_reader *r);

/*
 * Direct writes: a part's rows written into the store's storage (Ceph
 * RADOS) by another process, the store keeping the catalog. After
 * cpr_store_begin, cpr_store_direct_segment names the part's segment object
 * (into name[cap]; CPR_STORE_OBJECT_MAX is always enough) and from then on
 * the part takes no rows through cpr_store_put_rows or cpr_store_put_block
 * (CPR_FAILED_PRECONDITION); blobs go through the store as before. A writer
 * on a reader of the same storage writes the blocks, back to back, and gives
 * each one's place; cpr_store_put_segment hands that index to the store,
 * which takes it only after checking it against the segment (finished, of
 * `size` bytes; the blocks back to back up to `size`; every block's header
 * equal to its entry and within the part's schema): a refused index
 * (CPR_INVALID_ARGUMENT or CPR_FAILED_PRECONDITION, naming the block and
 * what differs) changes nothing. Then commit as usual; the rows count is the
 * index's. Payloads are not read by the store: each block's CRC32C is
 * checked by every read of it. An aborted part's segment is removed, and so
 * is one committed without an index. Needs a store in a Ceph pool
 * (CPR_FAILED_PRECONDITION otherwise); the writer's user needs write access
 * to the pool, so such a writer is trusted with the job's storage.
 */
#define CPR_STORE_OBJECT_MAX 400
typedef struct cpr_store_block_ref {
    uint32_t table, n;            /* rows */
    uint64_t first_row, last_row;
    uint64_t offset;              /* in the segment */
    uint32_t len;                 /* the block's bytes (cpr/block.h) */
    uint32_t crc32c;              /* its header's CRC */
} cpr_store_block_ref;
CPR_API cpr_status cpr_store_direct_segment(cpr_store *store, const cpr_part_id *id, char *name,
                                            size_t cap);
CPR_API cpr_status cpr_store_put_segment(cpr_store *store, const cpr_part_id *id,
                                         const cpr_store_block_ref *refs, size_t n,
                                         uint64_t size);

/* A segment written through reader r (borrowed: close it after the writer).
 * `object` is the name cpr_store_direct_segment gave. One thread at a time.
 * A reader of a local directory writes nothing: CPR_FAILED_PRECONDITION. */
typedef struct cpr_store_writer cpr_store_writer;
CPR_API cpr_status cpr_store_writer_create(cpr_store_reader *r, const char *object,
                                           cpr_store_writer **out);
/* Append a sealed block (cpr_block_seal*) of exactly len bytes; *ref gets its
 * entry of the index. The header is checked (CPR_INVALID_ARGUMENT), the
 * payload not. */
CPR_API cpr_status cpr_store_writer_block(cpr_store_writer *w, const void *block, size_t len,
                                          cpr_store_block_ref *ref);
/* Make the segment durable (every replica) and free the writer, whatever
 * the outcome; *size (may be NULL) gets its bytes, for put_segment. */
CPR_API cpr_status cpr_store_writer_finish(cpr_store_writer *w, uint64_t *size);
/* Drop the writer and the object. NULL is a no-op. */
CPR_API void cpr_store_writer_discard(cpr_store_writer *w);

/*
 * Fold `job` (NULL: every job) now: every shard whose newest state is a
 * FULL (or fold) followed by `min_parts` or more parts (0: 2) gets a fold
 * at its newest checkpoint, a segment holding its newest version of every
 * row, so that restores read about the shard's live bytes instead of the
 * whole chain. Retained "as of" restores return exactly what they did.
 * ckptd folds in the background (cpr_store_options.no_fold); this is for
 * tools and tests. `folded` (may be NULL) gets the folds written.
 */
CPR_API cpr_status cpr_store_fold(cpr_store *store, const char *job, uint32_t min_parts,
                          uint64_t *folded);

/*
 * Stream blob `name` of committed part `id`, verifying every chunk's
 * checksum (CPR_CORRUPT on mismatch, before the bad chunk is delivered).
 * `size` (may be NULL) receives the blob's length before the first call.
 */
CPR_API cpr_status cpr_store_read_blob(cpr_store *store, const cpr_part_id *id,
                               const char *name, uint64_t *size,
                               cpr_blob_fn fn, void *ctx);

/*
 * Retention for `job` (NULL: every job): keep the newest `keep` consistent
 * cuts (0: the store's retain_cuts) and everything newer; remove every part
 * (its segment, blobs and record) below the oldest kept cut F, after
 * folding what the states as of F and later still need from them (a DELTA
 * chain, PRIORITY parts after a FULL) into one fold per shard; remove the
 * staging leftovers of crashed writers (committed-looking leftovers, a
 * segment or blob directory no record names, go at the next open: store
 * invariant S2). Retained states restore exactly
 * as before. `report` may be NULL.
 */
CPR_API cpr_status cpr_store_gc(cpr_store *store, const char *job, uint32_t keep,
                        cpr_gc_report *report);

/*
 * Periodic retention, as ckptd runs it between checkpoints: cpr_store_gc
 * with keep 0 for every job. Removing parts takes milliseconds; a shard
 * whose cut is a DELTA or that saved PRIORITY parts after its FULL costs a
 * fold (a read and a write of its live rows) when its floor moves.
 */
CPR_API cpr_status cpr_store_gc_lazy(cpr_store *store, cpr_gc_report *report);

/*
 * Retention for `job` with the floor chosen by the caller instead of
 * computed from this store's cuts: raise the job's retention floor to
 * exactly `floor` and delete what no state as of >= floor needs (as
 * cpr_store_gc does once it has chosen its floor; uncommitted leftovers go
 * too). For a job spread over several stores (one per storage node): a store
 * sees only its own shards, so the caller computes the cut over all of them
 * and gives it to each. `floor` must be a consistent cut of the job:
 * every committed part at exactly `floor` in this store must be consistent.
 * A floor at or below the current one changes nothing (CPR_OK; the report
 * gives the current floor). Errors: CPR_INVALID_ARGUMENT (bad job name,
 * floor 0), CPR_NOT_FOUND (the store knows no such job), CPR_FAILED_PRECONDITION
 * (floor above the job's newest committed checkpoint in this store, which
 * is 0 while it has only open parts, or a
 * part at `floor` that is not consistent: a PRIORITY part or a DELTA with an
 * incomplete chain). `report` may be NULL.
 */
CPR_API cpr_status cpr_store_gc_floor(cpr_store *store, const char *job, uint64_t floor,
                              cpr_gc_report *report);

/*
 * cpr_store_gc_floor for a floor the caller computed as a consistent cut
 * over every store that holds the job: a store whose committed parts of the
 * job are all older than it (shards the job no longer has, after a
 * resharding) takes it too. Each shard with parts below the floor is folded
 * at it, which keeps every row as each state at or above the floor reads it
 * (a restore as of the floor reads the folds), and the parts below go, so
 * this store refuses what the others refuse below the floor. Errors as
 * cpr_store_gc_floor's, without the one for a floor above the newest part.
 */
CPR_API cpr_status cpr_store_gc_floor_cut(cpr_store *store, const char *job, uint64_t floor,
                                          cpr_gc_report *report);

/* ---- the recovery record ---------------------------------------------------- */

/*
 * A job's recovery record: a generation number and an opaque plan (the
 * recovery module's encoding, cpr/recovery.h), so that every process of a
 * job acts on the same recovery decision. Generation 0 means "no record".
 * The record is independent of the job's parts: it may be written before
 * the job has any part (cpr_store_list_jobs does not list such a job), and
 * retention (cpr_store_gc, cpr_store_gc_floor) never removes it. Every
 * record carries a CRC32C, checked on every read (CPR_CORRUPT).
 */

/*
 * The job's record: *generation (0 when there is none) and a malloc'd copy
 * of the plan (*plan, free(); never NULL on success, *len 0 when there is
 * no record or the plan is empty), and the wall-clock time the record was
 * written (milliseconds since the Unix epoch; 0 when there is no record) in
 * *written_unix_ms (may be NULL). Errors: CPR_INVALID_ARGUMENT (bad job
 * name), CPR_CORRUPT (the stored record fails its checksum), CPR_IO,
 * CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_store_recovery_get(cpr_store *store, const char *job, uint64_t *generation,
                                          void **plan, size_t *len, uint64_t *written_unix_ms);

/*
 * Compare-and-set: if the job's generation is exactly `expected` (0: no
 * record yet), store `plan` (len bytes, at most CPR_RECOVERY_PLAN_MAX,
 * copied; may be NULL when len is 0) as generation expected + 1 and return
 * it in *generation, once it is durable (a synced write), with the time it
 * records as written in *written_unix_ms (may be NULL). Atomic with
 * respect to every other put on this store: of concurrent puts with the
 * same `expected`, exactly one succeeds. Errors: CPR_FAILED_PRECONDITION
 * (the generation is not `expected`; the message names the current one, and
 * the record is unchanged), CPR_INVALID_ARGUMENT (bad job name, plan too
 * large, expected = UINT64_MAX), CPR_CORRUPT (the stored record is damaged:
 * its generation cannot be compared), CPR_IO, CPR_RESOURCE_EXHAUSTED.
 */
CPR_API cpr_status cpr_store_recovery_put(cpr_store *store, const char *job, uint64_t expected,
                                          const void *plan, size_t len, uint64_t *generation,
                                          uint64_t *written_unix_ms);

/*
 * Read every row block (of parts and folds) and blob of `job` (NULL: all
 * jobs) and check every checksum, and every block against the catalog's
 * index. Returns CPR_CORRUPT if any problem was found (each reported
 * through `fn`, which may be NULL), CPR_OK if everything is intact. The
 * report is written in both cases. A part that retention removes while
 * verify runs is skipped, not reported. CPR_NOT_FOUND: unknown job.
 */
CPR_API cpr_status cpr_store_verify(cpr_store *store, const char *job,
                            cpr_problem_fn fn, void *ctx,
                            cpr_verify_report *report);

CPR_API cpr_status cpr_store_stats_get(cpr_store *store, cpr_store_stats *out);

/*
 * Can the store commit now? CPR_OK, or CPR_RESOURCE_EXHAUSTED while its file
 * system lacks the catalog's headroom (a commit would be refused; it can
 * again once space is freed, by retention or anyone), or CPR_UNAVAILABLE
 * after a catalog write failed (nothing committed is lost; the store takes
 * writes again once opened anew). The message says which. ckptd's Health
 * answers NOT_SERVING while this is not CPR_OK. Thread-safe.
 */
CPR_API cpr_status cpr_store_health(cpr_store *store);

#ifdef __cplusplus
}
#endif
#endif /* CPR_STORE_H */
