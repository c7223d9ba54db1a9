/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The handler side of rpc/server.h, for the handler fuzzer (see
 * fuzz_handlers.c for why it has its own). Each function holds the handler
 * to the interface's contract (the request only of unary and
 * server-streaming calls, receives only on client streams, sends only on
 * server streams, nothing after the finish, the finish exactly once) and
 * checks every message a server stream sends: it decodes, and its
 * checksum matches what it carries. rpc/server.c's behaviours that a
 * handler may see are reproduced: the header copy's -1 for a value that
 * does not fit or holds a NUL, a send that fails as for a client gone away
 * or idle, streams that break or go idle, a client that cancelled.
 */
#include <string.h>

#include "cpr/block.h"
#include "cpr/crc32c.h"
#include "cpr_common.h"
#include "fuzz_handlers_rpc.h"
#include "wire.h"

/* ---- the server: no transport here ------------------------------------------------ */

cpr_status cpri_rpc_server_start(const cpri_rpc_method *methods, size_t n_methods, void *app,
                                const cpri_rpc_server_options *opts, cpri_rpc_server **out,
                                int *port)
{
    (void)methods, (void)n_methods, (void)app, (void)opts, (void)out, (void)port;
    return cpr_fail(CPR_UNAVAILABLE, "the handler fuzzer has no transport to serve on");
}

void cpri_rpc_server_stop(cpri_rpc_server *server)
{
    FH_CHECK(server == NULL, "no server was ever started");
}

/* ---- inside a handler ------------------------------------------------------------- */

static void live(const cpri_rpc_call *c, const char *fn)
{
    FH_CHECK(!c->finished, "%s after cpri_rpc_finish (%s)", fn, c->m->path);
}

const char *cpri_rpc_call_method(const cpri_rpc_call *c)
{
    return c->m->path;
}

/* As rpc/server.c: the whole value or nothing (-1). */
static long copy_out(const char *value, size_t len, char *buf, size_t cap)
{
    if (cap == 0 || len > cap - 1 || memchr(value, '\0', len))
        return -1;
    memcpy(buf, value, len);
    buf[len] = '\0';
    return (long)len;
}

long cpri_rpc_call_header(const cpri_rpc_call *c, const char *key, char *buf, size_t cap)
{
    live(c, "cpri_rpc_call_header");
    if (strcmp(key, "authorization") != 0 || !c->cred.authorization)
        return -1;
    return copy_out(c->cred.authorization, c->cred.authorization_len, buf, cap);
}

long cpri_rpc_call_peer_subject(cpri_rpc_call *c, char *buf, size_t cap)
{
    live(c, "cpri_rpc_call_peer_subject");
    return c->cred.subject ? copy_out(c->cred.subject, strlen(c->cred.subject), buf, cap) : -1;
}

void cpri_rpc_request(cpri_rpc_call *c, const uint8_t **msg, size_t *len)
{
    live(c, "cpri_rpc_request");
    FH_CHECK(c->m->kind != CPR_RPC_CLIENT_STREAM, "%s is a client stream", c->m->path);
    *msg = c->msgs[0];
    *len = c->lens[0];
}

cpr_status cpri_rpc_start(cpri_rpc_call *c)
{
    live(c, "cpri_rpc_start");
    return c->start_fails ? cpr_fail(CPR_UNAVAILABLE, "the client went away") : CPR_OK;
}

/* Restore's batches: whole rows with the checksum of what they carry, or
 * row blocks that pass their own check. */
static void check_rows(const cpri_rpc_call *c, const uint8_t *bytes, size_t len)
{
    cpri_wire_rows r;
    cpr_status st = cpri_wire_rows_decode(bytes, len, &r);
    FH_CHECK(st == CPR_OK, "%s sent a RowBatch that does not decode: %s", c->m->path,
             cpr_errmsg());
    if (r.block) {
        cpr_block_view v;
        st = cpr_block_open(r.block, r.block_len, &v);
        FH_CHECK(st == CPR_OK, "a restored row block fails its check: %s", cpr_errmsg());
    } else if (r.batch.ids) {
        uint32_t crc = cpr_crc32c_rows(r.batch.ids, r.batch.n, r.batch.values,
                                       r.batch.values_count, r.batch.state, r.batch.state_count);
        FH_CHECK(crc == r.batch.crc32c, "a restored batch of %zu rows has checksum %08x, "
                 "its rows %08x", r.batch.n, r.batch.crc32c, crc);
    }
    cpri_wire_rows_release(&r);
}

/* GetBlob's chunks: contiguous, one size, each with its checksum. */
static void check_chunk(cpri_rpc_call *c, const uint8_t *bytes, size_t len)
{
    cpri_wire_chunk ch;
    cpr_status st = cpri_wire_chunk_decode(bytes, len, &ch);
    FH_CHECK(st == CPR_OK, "GetBlob sent a chunk that does not decode: %s", cpr_errmsg());
    FH_CHECK(cpr_crc32c(0, ch.data, ch.len) == ch.crc32c, "a blob chunk's checksum");
    FH_CHECK(ch.offset == c->blob_offset, "a chunk at %llu after %llu bytes",
             (unsigned long long)ch.offset, (unsigned long long)c->blob_offset);
    FH_CHECK(!c->blob_sized || ch.size == c->blob_size, "chunks of one blob disagree on its size");
    c->blob_sized = 1;
    c->blob_size = ch.size;
    c->blob_offset += ch.len;
    FH_CHECK(c->blob_offset <= c->blob_size, "chunks past the blob's size");
    cpri_wire_chunk_release(&ch);
}

cpr_status cpri_rpc_send(cpri_rpc_call *c, uint8_t *bytes, size_t len, const char *during)
{
    live(c, "cpri_rpc_send");
    FH_CHECK(c->m->kind == CPR_RPC_SERVER_STREAM, "a send on %s", c->m->path);
    if (c->meth == FH_RESTORE)
        check_rows(c, bytes, len);
    else if (c->meth == FH_GET_BLOB)
        check_chunk(c, bytes, len);
    free(bytes);
    if (c->send_fault && c->sends++ == c->fail_send_at)
        return c->send_fault == CPR_TIMEOUT
                   ? cpr_fail(CPR_TIMEOUT, "the client read nothing during the %s", during)
                   : cpr_fail(CPR_UNAVAILABLE, "the client went away during the %s", during);
    return CPR_OK;
}

cpri_rpc_recv_result cpri_rpc_recv(cpri_rpc_call *c, const uint8_t **msg, size_t *len)
{
    live(c, "cpri_rpc_recv");
    FH_CHECK(c->m->kind == CPR_RPC_CLIENT_STREAM, "a receive on %s", c->m->path);
    if (c->received > 0) { /* valid until the next receive: no longer */
        free(c->msgs[c->received - 1]);
        c->msgs[c->received - 1] = NULL;
    }
    if (c->ended || c->received == c->break_after) {
        c->ended = 1;
        return c->end;
    }
    *msg = c->msgs[c->received];
    *len = c->lens[c->received];
    c->received++;
    return CPR_RPC_MESSAGE;
}

double cpri_rpc_idle_timeout_s(const cpri_rpc_call *c)
{
    (void)c;
    return 600;
}

int cpri_rpc_finish(cpri_rpc_call *c, cpr_status st, uint8_t *resp, size_t resp_len)
{
    live(c, "cpri_rpc_finish");
    c->finished = 1;
    c->st = st;
    snprintf(c->errmsg, sizeof c->errmsg, "%s", st ? cpr_errmsg() : "");
    c->resp = resp;
    c->resp_len = resp_len;
    return c->cancelled;
}

void fh_call_release(cpri_rpc_call *c)
{
    for (size_t i = 0; i < c->n_msgs; i++)
        free(c->msgs[i]);
    free(c->msgs);
    free(c->lens);
    free(c->resp);
    c->msgs = NULL;
    c->lens = NULL;
    c->resp = NULL;
}
