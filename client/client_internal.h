/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inside the client library. Four modules:
 *   node.c    one storage node behind one interface: the store in-process
 *             (local://) or a ckptd over cpri_rpc (grpc://). The only module
 *             that knows which; it speaks the wire format through wire.h.
 *   part.c    the asynchronous writer of a part: staging, its sender thread,
 *             commit and abort.
 *   client.c  targets, shard placement, retries, list and cuts merged over
 *             nodes.
 *   read.c    restores, blob reads and the operations calls (stats, verify,
 *             gc) that fan out over nodes and merge.
 *   recovery_rec.c  the job's recovery record (compare-and-set on the node of
 *             shard 0), with the reconciliation of a put whose answer is lost.
 */
#ifndef CPR_CLIENT_INTERNAL_H
#define CPR_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cpr/client.h"
#include "cpr/store.h" /* cpr_version_row_fn */

/* ---- node.c ------------------------------------------------------------------- */

typedef struct cpri_node cpri_node;
typedef struct cpri_node_writer cpri_node_writer;
typedef struct cpri_rpc_options cpri_rpc_options; /* rpc/channel.h */

/* "local:///path" (store options from opts) or "host:port". */
cpr_status cpri_node_open_local(const char *dir, const cpr_store_options *opts, cpri_node **out);
cpr_status cpri_node_open_grpc(const char *host_port, const cpri_rpc_options *creds,
                               cpri_node **out);
void cpri_node_close(cpri_node *node);
const char *cpri_node_name(const cpri_node *node);

typedef struct cpri_direct cpri_direct;

/* wait_ready: a grpc Begin waits (up to timeout_s) for the channel to
 * connect instead of failing fast; the async Begin of a part's sender. */
/* *lease gets the writer's lease ckptd granted (0 on local://, where the
 * store is this process's own); commit, abort and the writer present it.
 * direct (may be NULL): ask a grpc node for direct writes to that store;
 * segment[CPR_STORE_OBJECT_MAX] gets the part's segment when the node
 * agreed, else "" (segment may be NULL when direct is). token: the part's
 * begin token (BeginRequest.begin_token), the same on every resend. */
cpr_status cpri_node_begin(cpri_node *node, const cpr_part_spec *spec, double timeout_s,
                           int wait_ready, cpri_direct *direct, uint64_t token,
                           uint64_t *lease, char *segment);

/* A direct part's segment as its writer left it (node.c): the index of its
 * blocks and its size. direct: the rows went to the segment. */
typedef struct cpri_segment_index {
    int direct;
    cpr_store_block_ref *refs;
    size_t n, cap;
    uint64_t size;
} cpri_segment_index;
void cpri_segment_index_free(cpri_segment_index *index);

/* Commit naming what the writer sent: rows, and its blobs' count and bytes
 * (the node refuses a part that holds anything else); for a direct part
 * (index->direct) its segment's index. */
cpr_status cpri_node_commit(cpri_node *node, const cpr_part_id *id, uint64_t lease, uint64_t rows,
                            uint64_t blobs, uint64_t blob_bytes,
                            const cpri_segment_index *index, double timeout_s);
/* lease 0: abort by id (an override ckptd allows only to admins when it
 * checks rights). */
cpr_status cpri_node_abort(cpri_node *node, const cpr_part_id *id, uint64_t lease,
                          double timeout_s);

/* The data path of one part: streams opened on first use, finished by
 * cpri_node_writer_close (which frees the writer whatever it returns). */
cpr_status cpri_node_writer_open(cpri_node *node, const cpr_part_id *id, double timeout_s,
                                cpri_node_writer **out);
/* The part's lease, presented by every later message (set once Begin answered). */
void cpri_node_writer_set_lease(cpri_node_writer *w, uint64_t lease);
/* Direct writes: the part's rows go to `segment` (Begin's answer) through d
 * (borrowed), as row blocks; set before the first row, or never. */
void cpri_node_writer_set_segment(cpri_node_writer *w, cpri_direct *d, const char *segment);
cpr_status cpri_node_writer_rows(cpri_node_writer *w, const cpr_row_batch *batch);
/* One sealed row block, sent (or stored) unchanged. */
cpr_status cpri_node_writer_block(cpri_node_writer *w, const void *block, size_t len);
cpr_status cpri_node_writer_blob(cpri_node_writer *w, const char *name, uint64_t offset,
                                const void *data, size_t len, uint32_t crc32c);
/* Finish the streams and free the writer. A direct part's segment is
 * finished into *index (the caller frees it: cpri_segment_index_free), or
 * removed when index is NULL (the part is abandoned). */
cpr_status cpri_node_writer_close(cpri_node_writer *w, cpri_segment_index *index);

cpr_status cpri_node_list(cpri_node *node, const char *job, double timeout_s,
                         cpr_part_info **parts, size_t *n);
/* The same with each part's location (cpr_store_part_location; *locations:
 * n malloc'd strings, cpr_names_free). */
cpr_status cpri_node_list_where(cpri_node *node, const char *job, double timeout_s,
                               cpr_part_info **parts, size_t *n, char ***locations);
/* What the node said its store is (ListResponse.store): "" until it listed,
 * or when its store is its own. Nodes naming one store share it. */
void cpri_node_store_id(cpri_node *node, char *out, size_t cap);
/* Direct reads (docs/client.md): the store library's reader of a pool, for
 * restores from ckptd gateways whose store is in it. */
cpr_status cpri_direct_open(const cpr_store_options *opts, cpri_direct **out);
void cpri_direct_close(cpri_direct *d); /* NULL is a no-op */
/* "rados:FSID/POOL/NS" (NULL for NULL). */
const char *cpri_direct_id(const cpri_direct *d);
/* Rows are checked against their checksum before `fn` sees them. With
 * `direct` (may be NULL), a grpc node asks for the blocks of that store by
 * location and reads them from the pool or its directory; *direct_failed
 * (may be NULL) is then 1 if the failure was that read's, not the node's
 * or fn's. */
cpr_status cpri_node_restore(cpri_node *node, const cpr_restore_query *q, cpri_direct *direct,
                            double timeout_s, cpr_row_fn fn, void *ctx, uint64_t *rows,
                            uint64_t *bytes, int *direct_failed);
/* The query's rows with each row's version (cpr_store_restore_versions),
 * checked against their checksum before `fn` sees them. Unlike
 * cpr_store_restore_versions', a batch's crc32c may be 0 (rows that came in
 * a block: the block's CRC was checked; the merge, the one caller, sums
 * what it delivers itself). A daemon that does
 * not send versions fails it with CPR_FAILED_PRECONDITION and
 * *no_versions = 1. No direct reads. `cancel` (may be NULL) ends the
 * stream from another thread (channel.h). */
struct cpri_rpc_cancel;
cpr_status cpri_node_restore_versions(cpri_node *node, const cpr_restore_query *q,
                                     double timeout_s, struct cpri_rpc_cancel *cancel,
                                     cpr_version_row_fn fn, void *ctx, uint64_t *rows,
                                     uint64_t *bytes, int *no_versions);
/* fn(ctx, size, offset, data, len) per chunk, checked; size is the blob's length. */
typedef cpr_status (*cpri_node_chunk_fn)(void *ctx, uint64_t size, uint64_t offset,
                                        const void *data, size_t len);
cpr_status cpri_node_read_blob(cpri_node *node, const cpr_part_id *id, const char *name,
                              double timeout_s, cpri_node_chunk_fn fn, void *ctx);
cpr_status cpri_node_stats(cpri_node *node, double timeout_s, cpr_store_stats *out);
cpr_status cpri_node_list_jobs(cpri_node *node, double timeout_s, char ***jobs, size_t *n);
cpr_status cpri_node_verify(cpri_node *node, const char *job, double timeout_s,
                           cpr_problem_fn fn, void *ctx, cpr_verify_report *report);
/* floor > 0: raise `job`'s floor to it, a cut computed over every node
 * (GcRequest.floor_is_cut: a node whose parts are all older takes it too);
 * else keep `keep` cuts computed by the node. */
cpr_status cpri_node_gc(cpri_node *node, const char *job, uint32_t keep, uint64_t floor,
                       double timeout_s, cpr_gc_report *report);
/* The job's recovery record (*plan malloc'd) and its compare-and-set. */
cpr_status cpri_node_recovery_get(cpri_node *node, const char *job, double timeout_s,
                                 uint64_t *generation, void **plan, size_t *len);
cpr_status cpri_node_recovery_put(cpri_node *node, const char *job, uint64_t expected,
                                 const void *plan, size_t len, double timeout_s,
                                 uint64_t *generation);

/* ---- client.c ------------------------------------------------------------------ */

#define CPRI_MAX_CPUS 1024

typedef struct cpri_sender cpri_sender; /* a part's sender thread (part.c) */

struct cpr_client {
    cpr_client_options opts;   /* defaults filled in; thread_cpus parsed into: */
    uint64_t thread_cpus[CPRI_MAX_CPUS / 64]; /* a bitmap of CPUs; all 0: not pinned */
    cpri_node **nodes;
    size_t n_nodes;
    int local;
    cpri_direct *direct;       /* grpc:// with opts.store.rados_pool: direct reads */
    /* Staging (part.c): bytes held by queued puts of every part, <= limit. */
    pthread_mutex_t mu;
    pthread_cond_t room;
    size_t staged_bytes;
    cpr_part *parts;           /* open parts, for close */
    void *pool;                /* free full-size staging items, a list (part.c) */
    size_t n_pool, pool_max;   /* pool_max: staging_bytes' worth (the warm arena) */
    /* The parts' sender threads (part.c, P8): idle, and left to be joined. */
    cpri_sender *idle_senders, *left_senders;
    size_t n_idle_senders;
};

/* The calling thread (a part's sender) moves to opts.thread_cpus, if given
 * (best effort: a CPU the process may not use leaves it where it is). */
void cpri_client_pin_thread(const cpr_client *c);

/* Run `call` up to 1 + retries times while it returns CPR_UNAVAILABLE,
 * pausing with exponential backoff in between. */
typedef cpr_status (*cpri_attempt_fn)(void *ctx);
cpr_status cpri_client_retry(const cpr_client *c, cpri_attempt_fn call, void *ctx);
/* Before retry number `attempt` (0-based): 0 if no retries are left, else
 * pause for the backoff and return 1. */
int cpri_client_backoff(const cpr_client *c, unsigned attempt);

/* merge.c: restore from the nodes with want[i] set, merging their rows by
 * version (each row once, its newest version over all of them). */
cpr_status cpri_restore_merged(cpr_client *c, const cpr_restore_query *q, const uint8_t *want,
                               cpr_row_fn fn, void *ctx, uint64_t *rows, uint64_t *bytes,
                               size_t *asked, size_t *missing, int *old_daemon);

/* Nodes i and j named one shared store in their last List (gateways). */
int cpri_client_same_store(cpr_client *c, size_t i, size_t j);
/* cpr_client_list; with check_placement, a part found on a node other than
 * its shard's fails with CPR_FAILED_PRECONDITION (the node set changed). */
cpr_status cpri_client_list_checked(cpr_client *c, const char *job, int check_placement,
                                   cpr_part_info **out, size_t *n);

/* Consistent cuts of `job` over every node, newest first (*cuts malloc'd;
 * *n_cuts may be 0). */
cpr_status cpri_client_job_cuts(cpr_client *c, const char *job, uint64_t **cuts,
                               size_t *n_cuts);

/* ---- part.c --------------------------------------------------------------------- */

/* Abort and free every part still open (cpr_client_close). */
void cpri_parts_abort_all(cpr_client *c);
/* Free the pooled staging items (cpr_client_close, after the parts). */
void cpri_parts_pool_release(cpr_client *c);
/* Stop and join the sender threads (cpr_client_close, after the parts). */
void cpri_senders_stop(cpr_client *c);

#endif /* CPR_CLIENT_INTERNAL_H */
