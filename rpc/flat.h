/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A received gRPC message as one contiguous run of bytes, for the client's
 * streams (channel.c) and the server's handlers (server.c).
 *
 * Not grpc_byte_buffer_reader_readall: it allocates every message afresh,
 * and with many streams at once those allocations come from fresh pages (a
 * page fault per 4 KiB, the largest cost of concurrent restores on a VM;
 * docs/performance.md). A message that arrived as one slice is read in
 * place; one in pieces is copied into a buffer its owner keeps and reuses.
 */
#ifndef CPR_RPC_FLAT_H
#define CPR_RPC_FLAT_H

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <stddef.h>
#include <stdint.h>

#include "cpr/status.h"

/* The reused buffer; {NULL, 0} to start, free(buf) at the end. */
typedef struct cpri_rpc_flat {
    uint8_t *buf;
    size_t cap;
} cpri_rpc_flat;

/* bb's bytes in *msg, *len. *in_place = 1: they are bb's one slice, read
 * through `reader`, which stays open until the caller destroys it (after
 * the last use of *msg); 0: they are in f (grown if needed), and the reader
 * is closed. bb stays the caller's either way. On failure (CPR_INTERNAL: an
 * unreadable message; CPR_NO_MEMORY) the reader is closed. */
cpr_status cpri_rpc_flatten(grpc_byte_buffer *bb, grpc_byte_buffer_reader *reader,
                            cpri_rpc_flat *f, const uint8_t **msg, size_t *len,
                            int *in_place);

#endif
