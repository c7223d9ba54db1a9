/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The handler fuzzer's transport (fuzz_handlers_rpc.c): a cpri_rpc_call of
 * its own behind rpc/server.h's handler interface. The driver
 * (fuzz_handlers.c) fills a call, runs the method's handler on it, and
 * reads what the handler did from it afterwards.
 */
#ifndef CPR_FUZZ_HANDLERS_RPC_H
#define CPR_FUZZ_HANDLERS_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_handlers.h"
#include "server.h"

struct cpri_rpc_call {
    /* set by the driver */
    const cpri_rpc_method *m;
    fh_method meth;
    fh_cred cred;
    uint8_t **msgs;        /* the request, or a client stream's messages: each its own
                              malloc'd buffer of exactly its length (ASan sees over-reads);
                              the transport frees each one as the next is received */
    size_t *lens, n_msgs;
    cpri_rpc_recv_result end;  /* what a receive answers after break_after messages */
    size_t break_after;
    cpr_status send_fault;     /* CPR_UNAVAILABLE or CPR_TIMEOUT at send fail_send_at; 0 none */
    size_t fail_send_at;
    int start_fails;           /* cpri_rpc_start answers CPR_UNAVAILABLE */
    int cancelled;             /* what cpri_rpc_finish answers */
    /* what the handler did */
    size_t received;           /* messages handed out */
    int ended;                 /* a receive answered something other than a message */
    size_t sends;
    int finished;
    cpr_status st;
    char errmsg[512];          /* cpr_errmsg() at the finish */
    uint8_t *resp;             /* the response (taken), for the driver to check and free */
    size_t resp_len;
    /* GetBlob's chunks so far */
    uint64_t blob_offset, blob_size;
    int blob_sized;
};

/* Free what the call still holds (messages, response). */
void fh_call_release(cpri_rpc_call *c);

#endif /* CPR_FUZZ_HANDLERS_RPC_H */
