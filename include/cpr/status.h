/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/status.h - the one status enum of the CPR libraries.
 *
 * Every fallible CPR function returns a cpr_status. The enum is append-only:
 * a code, once published, keeps its number forever. Details of the most recent
 * failure on the calling thread are available from cpr_errmsg(); the code is
 * the contract, the message is for people. cpr_status_grpc() is the single
 * table that maps our codes to gRPC status codes (used by ckptd and clients).
 */
#ifndef CPR_STATUS_H
#define CPR_STATUS_H

#include "cpr/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpr_status {
    CPR_OK = 0,
    CPR_INVALID_ARGUMENT = 1,   /* malformed or inconsistent request */
    CPR_NOT_FOUND = 2,          /* unknown job, part, blob or checkpoint */
    CPR_ALREADY_EXISTS = 3,     /* e.g. begin on a committed checkpoint id */
    CPR_FAILED_PRECONDITION = 4,/* wrong state: commit without begin, ... */
    CPR_CORRUPT = 5,            /* checksum mismatch or damaged record */
    CPR_IO = 6,                 /* the operating system refused an I/O */
    CPR_UNAVAILABLE = 7,        /* shutting down, or a peer is unreachable */
    CPR_TIMEOUT = 8,            /* a deadline passed */
    CPR_NO_MEMORY = 9,          /* allocation failed */
    CPR_RESOURCE_EXHAUSTED = 10,/* too large, disk full, limit reached */
    CPR_CUDA = 11,              /* a CUDA runtime call failed */
    CPR_INTERNAL = 12,          /* a broken invariant inside CPR (a bug) */
    CPR_UNAUTHENTICATED = 13,   /* no credentials, or ones the daemon does not know */
    CPR_PERMISSION_DENIED = 14, /* the credentials lack the right, or the part
                                   belongs to another writer */
    CPR_STATUS_COUNT_ = 15      /* not a status; number of codes so far */
} cpr_status;

/* Short stable name of a code, e.g. "CPR_NOT_FOUND". Never NULL. */
CPR_API const char *cpr_status_name(cpr_status st);

/* The gRPC status code (grpc_status_code numbering) for a CPR status. */
CPR_API int cpr_status_grpc(cpr_status st);

/* The CPR status for a gRPC status code received from a server (the inverse
 * of cpr_status_grpc where it is one-to-one; codes CPR never sends map to
 * CPR_UNAVAILABLE when transient, else CPR_INTERNAL). */
CPR_API cpr_status cpr_status_from_grpc(int code);

/*
 * Message describing the most recent non-OK status returned to the calling
 * thread by any CPR function ("" if none). Thread-local: valid until the
 * next CPR call on this thread. Never NULL.
 */
CPR_API const char *cpr_errmsg(void);

/*
 * Record a printf-style message for cpr_errmsg() on this thread and return
 * `st`: how a callback (a restore's row function, say) or code built on CPR
 * reports a failure through the same channel as the library.
 */
CPR_API cpr_status cpr_fail(cpr_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif /* CPR_STATUS_H */
