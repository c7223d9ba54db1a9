/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Authorization (issue #11): who may do what to which job, from
 * `ckptd --auth-file FILE`. One rule a line:
 *
 *     PRINCIPAL  JOB-PATTERN  RIGHTS        # comment
 *
 *   PRINCIPAL    a bearer token (16-4096 printable characters, no spaces;
 *                clients send "authorization: Bearer TOKEN"), or
 *                subject:SUBJECT, the RFC 2253 subject of a client
 *                certificate verified by mutual TLS ("subject:CN=trainer,O=ML";
 *                in double quotes if it holds spaces: "subject:CN=a b,O=ML")
 *   JOB-PATTERN  a job name, or a prefix ending in '*' ("team-a-*"; "*": all)
 *   RIGHTS       a comma list of read, write, admin. write includes read, and
 *                admin includes write, on the matching jobs.
 *
 * What each right allows (docs/operations.md has the table): read: List,
 * Restore, GetBlob, GetRecovery, and the job in ListJobs; write: also Begin,
 * PutRows, PutBlob, Commit, Abort with the writer's lease, PutRecovery and Gc
 * of the job; admin: also Verify of the job and Abort by id (without the
 * lease). Store-wide calls (Stats, Verify and Gc of every job) need admin on
 * "*". Health needs nothing.
 *
 * Invariants
 *  A1. A call is identified once, when it starts, against one snapshot of
 *      the rules: a reload (SIGHUP) that lands meanwhile applies from the
 *      next call on. A principal holds copies of the rules it matched.
 *  A2. Tokens are compared in constant time (no early exit on the first
 *      differing byte, every token rule compared), and never logged.
 *  A3. A reload that fails (unreadable file, bad line) changes nothing: the
 *      rules in force stay, and the error is logged with file and line.
 *  A4. With no auth file there are no rules and every call is allowed
 *      (plaintext on loopback for tests and one-host setups).
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef CPR_CKPTD_AUTH_H
#define CPR_CKPTD_AUTH_H

#include <stddef.h>

#include "cpr/status.h"

enum {
    CPRI_RIGHT_READ = 1,
    CPRI_RIGHT_WRITE = 2,
    CPRI_RIGHT_ADMIN = 4
};

typedef struct cpri_auth cpri_auth;
typedef struct cpri_principal cpri_principal;

/* Read the rules of `path` (kept for reloads). CPR_INVALID_ARGUMENT naming
 * the file and line of the first bad rule. */
cpr_status cpri_auth_load(const char *path, cpri_auth **out);

/* Read the file again and swap the rules in (A3). *rules gets their count. */
cpr_status cpri_auth_reload(cpri_auth *a, size_t *rules);
void cpri_auth_destroy(cpri_auth *a); /* NULL is a no-op */

/*
 * Who a call is: `authorization` is the call's "authorization" metadata
 * (NULL if none), `subject` its verified client certificate's subject (NULL
 * if none). CPR_UNAUTHENTICATED if neither matches a rule (the message says
 * what was missing, never the token). `a` NULL (no auth file): *out is NULL,
 * which every check allows (A4).
 */
cpr_status cpri_auth_identify(cpri_auth *a, const char *authorization, const char *subject,
                              cpri_principal **out);
void cpri_principal_free(cpri_principal *p); /* NULL is a no-op */

/* 1 if p holds `right` on `job` (NULL: on every job, i.e. a rule for "*"). */
int cpri_principal_may(const cpri_principal *p, const char *job, unsigned right);

/* 1 if p holds `right` on some job (a write stream's caller before its
 * first message names one: a read-only credential may not hold write calls
 * open). */
int cpri_principal_may_some(const cpri_principal *p, unsigned right);

/* CPR_OK, or CPR_PERMISSION_DENIED naming the right, the job and `op`. */
cpr_status cpri_principal_check(const cpri_principal *p, const char *job, unsigned right,
                                const char *op);

/* Whom p names in logs: "subject CN=..", "token #3" (the rule's line), never
 * the token. */
const char *cpri_principal_name(const cpri_principal *p);

#endif /* CPR_CKPTD_AUTH_H */
