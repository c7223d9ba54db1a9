/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for tests that drive a real ckptd process on 127.0.0.1: start it
 * (port 0; its address is read from the line it prints), stop it, and the
 * RPCs of a checkpoint part with rows valued by tu_value() at the part's id.
 * The daemon gets SIGKILL if the test process dies, so none is left behind.
 */
#ifndef CPR_CKPTD_HARNESS_H
#define CPR_CKPTD_HARNESS_H

#include <pthread.h>
#include <sys/types.h>

#include "channel.h"
#include "launch.h"
#include "wire.h"

#define CH_TIMEOUT_S 20.0
#define CH_SVC "/cpr.v1.Checkpoint/"

/* The one table the harness's parts hold. */
extern const cpr_table_schema ch_table;

typedef cpri_ckptd_proc ch_daemon; /* ckptd/launch.h: the launcher cpr-bench uses too */

void ch_start(ch_daemon *d, const char *dir);
/* ch_start with more daemon flags: `extra` is a NULL-terminated list
 * (e.g. {"--idle-part-timeout-s", "1", NULL}); NULL for none. */
void ch_start_args(ch_daemon *d, const char *dir, const char *const *extra);
/* SIGTERM; asserts a clean exit (status 0). */
void ch_stop(ch_daemon *d);
/* SIGKILL, reaped. */
void ch_kill(ch_daemon *d);
/* A daemon's address that stays dead: a socket bound to it (not listening,
 * so that connections are refused) until the caller closes the returned
 * fd; no other process can take the port meanwhile. ch_stop_held and
 * ch_kill_held stop the daemon and hold its address at once. */
int ch_hold_addr(const char *addr);
int ch_stop_held(ch_daemon *d);
int ch_kill_held(ch_daemon *d);
/* A daemon on a fresh temporary directory (returned, malloc'd); `target`
 * gets grpc://ADDR. ch_daemon_down stops it (clean exit asserted) and removes
 * and frees the directory. */
char *ch_daemon_up(ch_daemon *d, char *target, size_t cap);
void ch_daemon_down(ch_daemon *d, char *dir);
/* fn(target, ctx) against local:// in a fresh directory, then against a
 * fresh ckptd (each removed afterwards). */
void ch_each_transport(void (*fn)(const char *target, void *ctx), void *ctx);

cpr_status ch_unary(cpri_rpc *rpc, const char *method, uint8_t *req, size_t len); /* takes req */
cpr_status ch_begin(cpri_rpc *rpc, const char *job, uint64_t ckpt);
/* Begin part (job, shard, ckpt) of `kind` in a job of num_shards shards. */
cpr_status ch_begin_part(cpri_rpc *rpc, const char *job, uint32_t shard, uint32_t num_shards,
                         uint64_t ckpt, cpr_kind kind);
/* Stream rows first..first+n-1 in batches of 100; corrupt_last damages the
 * last batch's checksum. after_batch (may be NULL) runs after each send. */
cpr_status ch_put_rows(cpri_rpc *rpc, const cpr_part_id *id, uint64_t first, size_t n,
                       int corrupt_last, void (*after_batch)(void *ctx, size_t sent), void *ctx);
cpr_status ch_commit(cpri_rpc *rpc, const cpr_part_id *id, uint64_t rows);
/* One RowBatch of rows first..first+n-1 (n <= 100) for `id` presenting
 * `lease`, sent on an open PutRows stream. */
cpr_status ch_send_rows(cpri_rpc_stream *s, const cpr_part_id *id, uint64_t lease,
                        uint64_t first, size_t n);
/* A PutBlob stream of one chunk: blob "dense" of `id` holding data[0..len),
 * presenting `lease`. The first failure. */
cpr_status ch_put_blob(cpri_rpc *rpc, const cpr_part_id *id, uint64_t lease, const void *data,
                       size_t len);
/* The writer lease the daemon answered ch_begin/ch_begin_part of `id` with
 * (0 if the harness began no such part); ch_put_rows and ch_commit present
 * it. The harness remembers the last 256 parts it began. */
uint64_t ch_lease_of(const cpr_part_id *id);
/* Blob "dense" of a committed part through GetBlob, every chunk's offset and
 * checksum checked: *data (malloc'd) and *len. */
cpr_status ch_get_blob(cpri_rpc *rpc, const cpr_part_id *id, uint8_t **data, size_t *len);
/* Begin as ch_begin_part and hand back the lease (the harness keeps it too). */
cpr_status ch_begin_leased(cpri_rpc *rpc, const char *job, uint32_t shard, uint32_t num_shards,
                           uint64_t ckpt, cpr_kind kind, uint64_t *lease);
/* The same with BeginRequest.begin_token `token` (0: none; ckptd/leases.h L4). */
cpr_status ch_begin_token(cpri_rpc *rpc, const char *job, uint32_t shard, uint32_t num_shards,
                          uint64_t ckpt, cpr_kind kind, uint64_t token, uint64_t *lease);
/* Restore `job` as of `as_of` (0: newest); *rows gets the count; returns
 * non-OK or sets *bad if any row is not exactly as written at `valued_at`. */
cpr_status ch_restore(cpri_rpc *rpc, const char *job, uint64_t as_of, uint64_t valued_at,
                      uint64_t *rows, int *bad);
/* Committed parts of `job` (count, and whether `ckpt` is one of them). */
cpr_status ch_list(cpri_rpc *rpc, const char *job, size_t *n, uint64_t ckpt, int *has_ckpt,
                   size_t *open_parts);

/* A Restore of `job` (every row, batches of 1000) that takes its first
 * message and then stops reading until released: once the daemon's stream
 * has filled the flow-control window it blocks, holding its restore slot
 * (ckptd/restore_gate.c). The job must restore to more than the window
 * (2 MiB). ch_hold_restore returns once the first message came (or the
 * call failed before any: see st); ch_release_restore lets it read to its
 * end and joins it: then st and messages are final. */
typedef struct ch_held_restore {
    cpri_rpc *rpc;
    const char *job;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, release;
    size_t messages;
    cpr_status st;
} ch_held_restore;
void ch_hold_restore(ch_held_restore *h, cpri_rpc *rpc, const char *job);
void ch_release_restore(ch_held_restore *h);

/* Write `text` to `path`, mode 0600 (an auth file: ckptd warns otherwise). */
void ch_write_private(const char *path, const char *text);

/* GET `path` from an HTTP server at "host:port" (IPv4): *code gets the
 * status, *body the body (malloc'd, NUL-terminated). CPR_UNAVAILABLE if it
 * cannot connect. */
cpr_status ch_http_get(const char *addr, const char *path, int *code, char **body);

/* The value of the sample `series` (the exact text before the value, e.g.
 * `cpr_ckptd_calls_total{method="Commit",status="CPR_OK"}`) in a metrics
 * exposition; -1 if it is not there. */
double ch_metric(const char *exposition, const char *series);
/* ch_metric of a scrape of d's --metrics-listen now (asserts it answers). */
double ch_metric_now(const ch_daemon *d, const char *series);

/* Poll cond(ctx) until it returns non-zero, for at most `seconds` (a short
 * pause between polls). 1 if it did, 0 at the deadline. */
int ch_poll(int (*cond)(void *ctx), void *ctx, double seconds);
/* Poll List until `job` has no open part (or no part at all). */
int ch_wait_no_open_parts(cpri_rpc *rpc, const char *job, double seconds);

#endif /* CPR_CKPTD_HARNESS_H */
