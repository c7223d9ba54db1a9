/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/client.h - the library trainers link to write checkpoints to CPR
 * storage and read them back. One API over two transports:
 *
 *   grpc://host:port[,host:port...]  ckptd daemons on storage nodes. A job's
 *       shards are spread over the nodes by rendezvous hashing of (job, shard)
 *       against each node's "host:port": stable whatever the order of the
 *       list, and adding a node moves only the shards that now hash to it.
 *       Everything about one shard (its parts, rows and blobs) lives on the
 *       node that shard hashes to.
 *   unix:/path                       one ckptd on this host, over its
 *       Unix-domain socket (ckptd --listen unix:/path): no TCP stack between
 *       the trainer and the daemon.
 *   local:///path                    the store in-process, no daemon (one
 *       machine, tests, the embedded default).
 *
 * Writing a part: cpr_client_begin returns a cpr_part handle. Puts copy the
 * caller's data into a staging buffer shared by all parts of the client and
 * return; a background thread per part streams it out (checksums are
 * computed there, off the training thread). The staging buffer is bounded by
 * cpr_client_options.staging_bytes: a put that does not fit blocks until the
 * streams drain (backpressure), so memory never grows without bound.
 * cpr_part_commit returns once the part is durable and visible.
 *
 * Data model, kinds, "as of", consistent cuts and checksums are the store's:
 * see cpr/store.h. Row values and state are float32; ids uint64.
 *
 * Threading: a cpr_client is thread-safe: any number of threads may begin,
 * list, restore, read blobs at once. A cpr_part is used by one thread at a
 * time (its own puts are ordered). Callbacks run on the calling thread.
 *
 * Errors: every function returns a cpr_status and sets cpr_errmsg(); a
 * server's error comes back as the same status with the server's message,
 * prefixed by the node it came from. Out-parameters are written only on
 * success.
 */
#ifndef CPR_CLIENT_H
#define CPR_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/block.h"
#include "cpr/export.h"
#include "cpr/status.h"
#include "cpr/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cpr_client cpr_client;
typedef struct cpr_part cpr_part;

/*
 * Options for cpr_client_open. Zero-initialise and set what you need; zero
 * fields take the default. Fields are only ever appended.
 */
typedef struct cpr_client_options {
    size_t staging_bytes;     /* bound on data copied by puts and not yet
                                 handed to the transport, over all parts of
                                 the client (default 256 MiB, at least 2 MiB).
                                 Staging memory once used is kept for reuse up
                                 to this bound (a warm arena, so that a save's
                                 copies do not fault pages in) until
                                 cpr_client_close. Size it for a whole save to
                                 keep a save's puts from waiting on the wire */
    size_t message_bytes;     /* payload per PutRows message (default 1 MiB,
                                 at most 16 MiB and staging_bytes / 2) */
    double call_timeout_s;    /* deadline of each short call: Begin, List,
                                 Abort, Stats, the recovery record's get and
                                 put (default 30 s) */
    double stream_timeout_s;  /* deadline of a part's streams, of Commit, of a
                                 restore, of a blob read, of verify and gc
                                 (default 3600 s; timeouts are capped at 30
                                 days) */
    unsigned retries;         /* extra attempts for calls that are safe to
                                 repeat, on CPR_UNAVAILABLE (Begin: also on
                                 CPR_TIMEOUT) (default 3) */
    double backoff_s;         /* first pause between attempts, doubling
                                 up to 30 s a pause (default 0.1 s) */
    int no_retries;           /* 1: never retry (overrides `retries`) */
    int defer_send;           /* 1: a part's staged data is sent only once
                                 cpr_part_commit is called (or when a put
                                 finds staging full, so it never waits for
                                 ever): puts are then a pure snapshot copy,
                                 not competing on the trainer's host with
                                 sending and, for local://, storing. Size
                                 staging_bytes for a whole save */
    cpr_store_options store;  /* local://: options of the store. grpc:// and
                                 unix: with store.rados_pool set (and
                                 rados_conf, rados_namespace, rados_user as
                                 the daemons' --rados-* options), direct
                                 reads: a restore from a ckptd whose store is
                                 that pool's namespace gets where the stored
                                 blocks lie and reads them from the pool
                                 itself, checked and merged as ckptd would
                                 (docs/client.md, "Direct reads"): ckptd
                                 only plans. Opening then fails when the
                                 pool cannot be reached. The other
                                 fields are ignored; the strings are borrowed
                                 for cpr_client_open */
    const char *thread_cpus;  /* the CPUs the client's own threads (each part's
                                 sender: copying out deferred rows,
                                 checksums, sending) run on, as a list such as
                                 "1" or "2-7,12" (borrowed for the call);
                                 NULL or "": where the caller's threads may.
                                 Keeps checkpoint work off a trainer's
                                 training cores. A list naming no CPU of this
                                 machine is CPR_INVALID_ARGUMENT; a CPU the
                                 process may not use leaves a thread where it
                                 was */
    /* Credentials (issue #11; docs/operations.md, "Trust boundaries"). Each NULL
     * field falls back to its environment variable. Strings are borrowed for
     * cpr_client_open; files are read there. */
    const char *token;        /* sent as "authorization: Bearer TOKEN" on every
                                 call to a ckptd run with --auth-file [$CPR_TOKEN] */
    const char *tls_ca_file;  /* grpcs://: PEM roots that sign the daemon's
                                 certificate [$CPR_TLS_CA; unset: the system's] */
    const char *tls_cert_file;/* grpcs:// to a daemon that asks for client
                                 certificates (mutual TLS): this client's PEM
                                 certificate and key [$CPR_TLS_CERT, $CPR_TLS_KEY] */
    const char *tls_key_file;
    int direct_writes;        /* 1, with store.rados_pool (grpc:// and unix:):
                                 a part's rows go from this process into the
                                 pool itself, as row blocks of its own segment,
                                 and ckptd checks the segment's index at commit
                                 (docs/client.md, "Direct writes"): the
                                 gateway's host carries no rows. The RADOS user
                                 needs write access to the pool. A ckptd whose
                                 store is elsewhere takes the rows itself */
} cpr_client_options;

/*
 * Open a client for `target` (see the top of this file). grpc:// connects
 * lazily: an unreachable node shows as CPR_UNAVAILABLE on the first call that
 * needs it. local:// opens (creating) the store directory now; one process at
 * a time may open it. `opts` may be NULL. On success *out owns the client;
 * release it with cpr_client_close. Errors: CPR_INVALID_ARGUMENT (a target
 * that is neither form, an empty or duplicated node), the store's errors for
 * local://.
 */
CPR_API cpr_status cpr_client_open(const char *target, const cpr_client_options *opts,
                           cpr_client **out);

/*
 * Close the client. Parts still open are aborted (their staged data is
 * dropped); every cpr_part handle of the client becomes invalid. Must not
 * run while another thread is inside a call on this client or its parts.
 * NULL is a no-op.
 */
CPR_API void cpr_client_close(cpr_client *client);

/* Number of storage nodes (1 for local://) and the node that holds `shard`
 * of `job` (index into the target's list). A NULL client (or job) gives 0. */
CPR_API size_t cpr_client_nodes(const cpr_client *client);
CPR_API size_t cpr_client_node_of(const cpr_client *client, const char *job, uint32_t shard);

/* ---- writing a part --------------------------------------------------------- */

/*
 * Open a part for writing (cpr_store_begin's rules and errors). `spec` and
 * what it points to are borrowed for the call. Retried on CPR_UNAVAILABLE
 * (nothing was started); if an earlier attempt did reach the node, the retry
 * fails with CPR_ALREADY_EXISTS. On success *out is the part's handle: finish
 * it with cpr_part_commit or cpr_part_abort, which take the handle's address,
 * free the part and set the handle to NULL (a second call then finds NULL:
 * commit refuses it with CPR_INVALID_ARGUMENT, abort does nothing).
 */
CPR_API cpr_status cpr_client_begin(cpr_client *client, const cpr_part_spec *spec,
                            cpr_part **out);

/*
 * cpr_client_begin without the wait: the part's own thread sends Begin
 * before anything else, so the caller (a training loop between two steps)
 * does not wait a round trip per shard. Local checks (names, schema arrays,
 * shard below num_shards) fail here; what the node refuses (an id not above
 * the shard's newest, a part that already exists, ...) fails the part: puts
 * then return that error and cpr_part_commit reports it, and a part the node
 * never began is never aborted or committed there (it may be another
 * writer's). Puts may be made at once; they are staged meanwhile. Over
 * gRPC the Begin waits for the channel to connect (up to call_timeout_s)
 * rather than failing fast while the daemon is unreachable.
 */
CPR_API cpr_status cpr_client_begin_async(cpr_client *client, const cpr_part_spec *spec,
                                          cpr_part **out);

/*
 * Queue rows of one table for the part. The batch's arrays are copied before
 * the call returns (the caller may reuse them at once); `batch->crc32c` is
 * ignored: the checksum is computed from the copy. Batches of any size are
 * split into messages of about message_bytes. Blocks while the staging buffer
 * is full. Send each table's rows in ascending id order (see cpr_store_put_rows);
 * a range batch (ids NULL, cpr/types.h) is. Errors: CPR_INVALID_ARGUMENT
 * (table not in the part's schema, lengths not n x dim / n x state_dim, a row
 * id not below the table's `rows`, an id twice in the batch: nothing of the
 * batch is queued), or the
 * error that has already failed the part's
 * stream (the part is then dead: abort it). A put that returns OK may still
 * fail later; cpr_part_commit reports it.
 */
CPR_API cpr_status cpr_part_put_rows(cpr_part *part, const cpr_row_batch *batch);

/*
 * Rows gathered by id straight from the caller's table: row `id` has its
 * values at values + (id - row_base) * values_stride and its state at
 * state + (id - row_base) * state_stride (strides in floats, at least dim
 * and state_dim: padded rows, or values and state interleaved in one array).
 * The rows are `ids` (n of them, any order; ascending is cheapest) or, with
 * ids NULL, the range [range_begin, range_begin + n). Copied before the call
 * returns, as cpr_part_put_rows copies, with its rules and errors; also
 * CPR_INVALID_ARGUMENT for an id below row_base or a stride below the dim.
 */
typedef struct cpr_gather {
    uint32_t table;
    size_t n;
    const uint64_t *ids;        /* n ids, or NULL for the range */
    uint64_t range_begin;
    uint64_t row_base;          /* id of the row at values[0] */
    const float *values;
    size_t values_stride;
    const float *state;         /* NULL when the table's state_dim is 0 */
    size_t state_stride;
} cpr_gather;
CPR_API cpr_status cpr_part_put_gather(cpr_part *part, const cpr_gather *gather);

/*
 * Rows whose values are written later, on the part's sender thread, once
 * their block is queued: with a copy-on-write snapshot
 * (cpr_emb_save_copy) the caller's thread only queues ids. `ids` (n,
 * strictly ascending, below the table's rows; copied now unless ids_kept)
 * name the rows, and their room in staging is taken now, as a put takes it
 * (this blocks while staging is full); the memory itself is taken by the
 * sender when it fills the rows, so the caller's thread touches none of it. For each row block the sender calls
 * fill(ctx, first, k, values, state) for rows [first, first + k) of this
 * put; it writes k x dim values and k x state_dim state floats, dim and
 * state_dim being the table's in the part's schema (state NULL when
 * state_dim is 0; a fill whose rows have another shape must refuse them),
 * and returns CPR_OK, or a status (message through cpr_fail) that fails the
 * part. fill and ctx must stay valid until the part
 * is committed or aborted; an aborted part may never call fill. The sender
 * calls fill for every queued block as soon as it can, before it sends
 * anything more (with defer_send too: only the sending waits for commit).
 * Errors: as cpr_part_put_rows, and CPR_INVALID_ARGUMENT for ids that do not
 * ascend or a missing fill.
 */
typedef cpr_status (*cpr_fill_fn)(void *ctx, size_t first, size_t k, uint32_t dim,
                                  uint32_t state_dim, float *values, float *state);
/*
 * Optional (NULL: unused): the same rows already in the part's codec. When
 * the part's codec (cpr_part_spec.codec) is not f32, the sender calls
 * fill_encoded(ctx, first, k, dim, state_dim, codec, values, state) instead
 * of fill: it writes k x cpr_codec_row_bytes(codec, dim) bytes of encoded
 * values, the bytes cpr_codec_encode(codec, 0, ...) gives for the rows fill
 * would write, and k x state_dim state floats as fill does. A caller that
 * encodes where its rows live saves the host's copy and encode: a CUDA
 * table encodes on the device and moves only the encoded bytes
 * (cpr_emb_save_fill_encoded, cpr/embedding.h).
 */
typedef cpr_status (*cpr_fill_encoded_fn)(void *ctx, size_t first, size_t k, uint32_t dim,
                                          uint32_t state_dim, cpr_codec codec, void *values,
                                          float *state);
typedef struct cpr_deferred_rows {
    uint32_t table;
    size_t n;
    const uint64_t *ids;
    cpr_fill_fn fill;
    void *ctx;
    cpr_fill_encoded_fn fill_encoded; /* optional, see above */
    int ids_kept;               /* 1: the caller keeps `ids` valid and unchanged
                                   as long as fill and ctx (until the part is
                                   committed or aborted): they are not copied
                                   now but by the sender, into each block as it
                                   fills it. 0: copied now */
} cpr_deferred_rows;
CPR_API cpr_status cpr_part_put_deferred(cpr_part *part, const cpr_deferred_rows *rows);

/*
 * Queue the whole blob `name` (len bytes, copied in pieces as staging room
 * allows; may block). A name may be put once per part. Errors as for put_rows.
 */
CPR_API cpr_status cpr_part_put_blob(cpr_part *part, const char *name, const void *data,
                                     size_t len);

/*
 * Wait until every queued put has been delivered, then commit: on CPR_OK the
 * part is durable and visible. If the answer to Commit is lost (the node went
 * away or the deadline passed), the node is asked whether the part committed
 * and CPR_OK is returned if it did. On failure the part is aborted and the
 * message says "not committed"; only when the node cannot be reached after a
 * Commit was sent does the message say the outcome is unknown (list the job:
 * a daemon that restarts drops parts it had not committed). Frees the part in
 * every case and sets *part to NULL; *part NULL (committed or aborted
 * already) is CPR_INVALID_ARGUMENT.
 */
CPR_API cpr_status cpr_part_commit(cpr_part **part);

/* Drop the part: queued data is discarded, the node told to forget it. Frees
 * the part and sets *part to NULL (*part NULL: nothing to do, CPR_OK).
 * Returns the node's answer: CPR_OK once nothing of the part is left (also
 * when the node had already dropped it). The streams are closed gracefully:
 * a stalled node can hold this call up to stream_timeout_s. */
CPR_API cpr_status cpr_part_abort(cpr_part **part);

/*
 * Abort part (job, shard, checkpoint) by id, whoever began it: for a writer
 * that died between begin and commit, whose open part would otherwise hold
 * its checkpoint id until the daemon's idle timeout. CPR_OK once the part is
 * gone (also when it was never begun or is already gone); nothing else of
 * the job changes. A committed part is never touched: CPR_FAILED_PRECONDITION.
 * This client's own handle for that part is stopped first (its queued data
 * dropped, its streams closed): the handle stays valid, its puts and commit
 * fail and never reach the node again, so they cannot touch a part begun
 * later under the same id. Do not call it while another thread uses that
 * handle. A writer in another process that is still alive is not stopped:
 * this call is for writers that are gone. Retried on CPR_UNAVAILABLE.
 */
CPR_API cpr_status cpr_client_abort(cpr_client *client, const char *job, uint32_t shard,
                                    uint64_t checkpoint);

/* Rows and payload bytes queued so far, and the first error that failed the
 * part's stream (CPR_OK if none). Never blocks. */
typedef struct cpr_part_progress {
    uint64_t rows_queued, bytes_queued;
    uint64_t rows_sent, bytes_sent;   /* handed to the transport */
    cpr_status error;
} cpr_part_progress;
/* A NULL part gives zeros with error CPR_INVALID_ARGUMENT; a NULL out, nothing. */
CPR_API void cpr_part_progress_get(const cpr_part *part, cpr_part_progress *out);

/* ---- reading ------------------------------------------------------------------ */

/*
 * Parts of `job` on every node, merged, ordered by (checkpoint, shard);
 * *out is malloc'd (free()). CPR_NOT_FOUND if no node has a part of the job.
 * Retried on CPR_UNAVAILABLE.
 */
CPR_API cpr_status cpr_client_list(cpr_client *client, const char *job, cpr_part_info **out,
                           size_t *n);

/*
 * Where part `id` is: one line per node that lists it, "NODE: LOCATION\n",
 * LOCATION as cpr_store_part_location gives it (cpr/store.h: a RADOS pool
 * and objects, or a file). *out is malloc'd, the caller frees it.
 * CPR_NOT_FOUND when no node lists the part.
 */
CPR_API cpr_status cpr_client_where(cpr_client *client, const cpr_part_id *id, char **out);

/*
 * Names of every job with at least one part (committed or open) or a fold
 * (what retention keeps of shards the job no longer has) on any node:
 * the union over nodes, sorted (strcmp order), each once. *jobs is a malloc'd
 * array of *n malloc'd strings followed by a NULL entry, owned by the caller:
 * release it with cpr_names_free(*jobs, *n) (cpr/store.h). No jobs at
 * all: *n = 0 and the array holds only the NULL. Retried on CPR_UNAVAILABLE.
 */
CPR_API cpr_status cpr_client_list_jobs(cpr_client *client, char ***jobs, size_t *n);

/*
 * The job's latest consistent cut, computed over every node's parts (a cut
 * needs every shard, wherever it lives). CPR_NOT_FOUND if there is none.
 */
CPR_API cpr_status cpr_client_latest_cut(cpr_client *client, const char *job, uint64_t *cut);

/*
 * Restore rows into the caller's callback (cpr_store_restore's query, order
 * and errors; batches are verified against their checksum before delivery).
 * The state is resolved to one checkpoint id first (the cut for `consistent`,
 * computed over all nodes; the newest committed id for as_of 0), every node
 * asked reads as of it, and result->as_of names it. `shards`/`n_shards` (may
 * be NULL/0) select the nodes to ask: those holding these shards (the query's
 * tables, ranges and modulo select the rows; rows of other shards on the same
 * node match them too). Otherwise every node is asked. When several nodes
 * are asked, their answers are merged by each row's version (after a
 * resharding a row may be on two of them): every row once, its newest
 * version, in (table, row) order (docs/client.md, "Limits"). With several nodes,
 * parts found on a node their shard is not placed on (the node set changed)
 * fail the call with CPR_FAILED_PRECONDITION. Retried on CPR_UNAVAILABLE
 * while nothing has been delivered.
 */
CPR_API cpr_status cpr_client_restore(cpr_client *client, const cpr_restore_query *query,
                              const uint32_t *shards, size_t n_shards, cpr_row_fn fn,
                              void *ctx, cpr_restore_result *result);

/*
 * Restore into a caller-supplied table buffer: rows are written at
 * values[(row - row_base) * dim] and state[(row - row_base) * state_dim]
 * (state may be NULL to skip it) for rows in [row_base, row_base + n_rows) of
 * `table`; a restored row outside that window fails with
 * CPR_INVALID_ARGUMENT. Convenience over cpr_client_restore for one table.
 */
typedef struct cpr_restore_into {
    uint32_t table;
    uint64_t row_base, n_rows;
    uint32_t dim, state_dim;
    float *values;
    float *state;
    uint8_t *restored;        /* optional: set to 1 for each row written */
} cpr_restore_into;
CPR_API cpr_status cpr_client_restore_table(cpr_client *client, const cpr_restore_query *query,
                                    const uint32_t *shards, size_t n_shards,
                                    const cpr_restore_into *into,
                                    cpr_restore_result *result);

/*
 * Read blob `name` of committed part `id` from the node holding the shard,
 * into a malloc'd buffer (*data, free()) of *len bytes. Every chunk is
 * checked (CPR_CORRUPT). Retried on CPR_UNAVAILABLE.
 */
CPR_API cpr_status cpr_client_read_blob(cpr_client *client, const cpr_part_id *id,
                                const char *name, void **data, size_t *len);

/* ---- the job's recovery record -------------------------------------------------- */

/*
 * Every process of a job must act on the same recovery decision: it is
 * recorded in storage under the job as a generation number and an opaque
 * plan (cpr/recovery.h encodes and decodes plans; cpr_recovery_decide_and_record
 * does the whole round). The record lives on the node holding (job, shard 0)
 * (cpr_client_node_of), in the store itself for local://; it may exist
 * before the job has any part, and gc never removes it (cpr/store.h).
 * Trainers read it at step boundaries and act when the generation moves.
 */

/*
 * The job's record: *generation (0 when none) and a malloc'd copy of the
 * plan (*plan, free(); never NULL on success; *len 0 when none). Retried on
 * CPR_UNAVAILABLE. Errors: CPR_INVALID_ARGUMENT (bad job name),
 * CPR_CORRUPT (the stored record is damaged), CPR_UNAVAILABLE.
 */
CPR_API cpr_status cpr_client_recovery_get(cpr_client *client, const char *job, uint64_t *generation,
                                   void **plan, size_t *len);

/*
 * Compare-and-set: record `plan` (len bytes, at most CPR_RECOVERY_PLAN_MAX;
 * borrowed for the call) as generation expected + 1 if the job's generation
 * is exactly `expected` (0: no record yet); on CPR_OK *generation is
 * expected + 1 and the record is durable. Of concurrent puts with the same
 * `expected`, exactly one succeeds; the others get CPR_FAILED_PRECONDITION
 * (the message names the current generation): read the winner's plan with
 * cpr_client_recovery_get and act on it.
 * Not retried blindly: if the answer is lost (CPR_UNAVAILABLE, CPR_TIMEOUT),
 * the record is read back. Generation expected + 1 holding exactly these
 * bytes: CPR_OK (a process that recorded an identical plan is
 * indistinguishable, and it is the same decision). Still `expected`: the put
 * did not happen and is sent again (UNAVAILABLE only, within `retries`).
 * Anything else: CPR_FAILED_PRECONDITION. If the record cannot be read back,
 * the put's own error is returned and the message says the outcome is
 * unknown. Errors also: CPR_INVALID_ARGUMENT (bad job name, plan too large).
 */
CPR_API cpr_status cpr_client_recovery_put(cpr_client *client, const char *job, uint64_t expected,
                                   const void *plan, size_t len, uint64_t *generation);

/* ---- operations ---------------------------------------------------------------- */

/* Counters of every node, summed. */
CPR_API cpr_status cpr_client_stats(cpr_client *client, cpr_store_stats *out);

/*
 * Verify every row and blob of `job` (NULL: all jobs) on every node; each
 * problem goes to `fn` (may be NULL) with its node in `where`. CPR_CORRUPT if
 * any was found. `report` (may be NULL) is summed over nodes.
 */
CPR_API cpr_status cpr_client_verify(cpr_client *client, const char *job, cpr_problem_fn fn,
                             void *ctx, cpr_verify_report *report);

/*
 * Retention for `job` (NULL: every job) keeping `keep` consistent cuts (0: the
 * storage's default). With several nodes the cuts are computed over all of
 * them and each node is told the floor, so a job spread over nodes is
 * collected exactly like one on a single node. `report` is summed over nodes.
 */
CPR_API cpr_status cpr_client_gc(cpr_client *client, const char *job, uint32_t keep,
                         cpr_gc_report *report);

#ifdef __cplusplus
}
#endif
#endif /* CPR_CLIENT_H */
