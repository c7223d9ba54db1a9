/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Status names, the one CPR->gRPC status table, and the thread-local error
 * message behind cpr_errmsg(). A message lives in a fixed per-thread buffer
 * so that reporting an error can never itself fail.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cpr_common.h"

static _Thread_local char errmsg_buf[512];

static const char *const status_names[CPR_STATUS_COUNT_] = {
    "CPR_OK", "CPR_INVALID_ARGUMENT", "CPR_NOT_FOUND", "CPR_ALREADY_EXISTS",
    "CPR_FAILED_PRECONDITION", "CPR_CORRUPT", "CPR_IO", "CPR_UNAVAILABLE",
    "CPR_TIMEOUT", "CPR_NO_MEMORY", "CPR_RESOURCE_EXHAUSTED", "CPR_CUDA",
    "CPR_INTERNAL", "CPR_UNAUTHENTICATED", "CPR_PERMISSION_DENIED",
};

/* gRPC numbering: OK 0, DEADLINE_EXCEEDED 4, NOT_FOUND 5, ALREADY_EXISTS 6,
 * RESOURCE_EXHAUSTED 8, FAILED_PRECONDITION 9, INTERNAL 13, UNAVAILABLE 14,
 * DATA_LOSS 15, INVALID_ARGUMENT 3, PERMISSION_DENIED 7, UNAUTHENTICATED 16. */
static const int status_grpc[CPR_STATUS_COUNT_] = {
    0, 3, 5, 6, 9, 15, 14 /* CPR_IO: the disk failed; retry elsewhere or later */,
    14, 4, 8, 8, 13, 13, 16, 7,
};

const char *cpr_status_name(cpr_status st)
{
    if ((unsigned)st >= CPR_STATUS_COUNT_)
        return "CPR_UNKNOWN_STATUS";
    return status_names[st];
}

int cpr_status_grpc(cpr_status st)
{
    if ((unsigned)st >= CPR_STATUS_COUNT_)
        return 2; /* UNKNOWN */
    return status_grpc[st];
}

cpr_status cpr_status_from_grpc(int code)
{
    switch (code) {
    case 0: return CPR_OK;
    case 1: return CPR_UNAVAILABLE;          /* CANCELLED */
    case 3: return CPR_INVALID_ARGUMENT;
    case 4: return CPR_TIMEOUT;              /* DEADLINE_EXCEEDED */
    case 5: return CPR_NOT_FOUND;
    case 6: return CPR_ALREADY_EXISTS;
    case 7: return CPR_PERMISSION_DENIED;
    case 8: return CPR_RESOURCE_EXHAUSTED;
    case 9: return CPR_FAILED_PRECONDITION;
    case 10: return CPR_UNAVAILABLE;         /* ABORTED: retry */
    case 14: return CPR_UNAVAILABLE;
    case 15: return CPR_CORRUPT;             /* DATA_LOSS */
    case 16: return CPR_UNAUTHENTICATED;
    default: return CPR_INTERNAL;
    }
}

cpr_status cpri_status_from_name(const char *name, size_t len)
{
    for (int st = 1; name && st < CPR_STATUS_COUNT_; st++)
        if (strlen(status_names[st]) == len && memcmp(name, status_names[st], len) == 0)
            return (cpr_status)st;
    return CPR_OK;
}

const char *cpr_errmsg(void)
{
    return errmsg_buf;
}

/* Formatted aside first: an argument may be cpr_errmsg() itself (a message
 * that wraps the one before it), and vsnprintf must not write the buffer it
 * is reading. */
cpr_status cpr_fail(cpr_status st, const char *fmt, ...)
{
    char msg[sizeof errmsg_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(errmsg_buf, msg, sizeof msg);
    return st;
}

void cpri_clear_error(void)
{
    errmsg_buf[0] = '\0';
}

int cpri_name_valid(const char *name)
{
    size_t len;
    if (!name)
        return 0;
    len = strnlen(name, 129);
    if (len < 1 || len > 128)
        return 0;
    return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                        "0123456789._-") == len;
}
