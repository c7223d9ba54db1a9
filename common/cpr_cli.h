/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Strict command-line parsing shared by the CPR tools: whole numbers in a
 * range, finite numbers in a range, `--flag V` / `--flag=V` values, and the
 * PEM files TLS options name. On a bad value they return
 * CPR_INVALID_ARGUMENT with a message naming the flag (cpr_errmsg()); the
 * tool prints it and exits 2. No printing here.
 */
#ifndef CPR_CLI_H
#define CPR_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cpr/status.h"

/* A decimal whole number in [min, max]: digits only, no sign, no spaces. */
cpr_status cpri_cli_u64(const char *flag, const char *text, uint64_t min, uint64_t max,
                       uint64_t *out);

/* A finite decimal number between lo and hi (digits, sign, point and
 * exponent only: no spaces, no hex); each bound is included when its
 * *_closed argument is 1. */
cpr_status cpri_cli_double(const char *flag, const char *text, double lo, int lo_closed,
                          double hi, int hi_closed, double *out);

/* The value of `--flag V` or `--flag=V` at argv[*i] (advancing *i past V);
 * NULL if argv[*i] is another argument. *missing is set to 1, with a
 * message, when the flag is there but its value is not. */
const char *cpri_cli_value(int argc, char **argv, int *i, const char *flag, int *missing);

/* "HOST:PORT" or "[IPV6]:PORT" (a port of 0 to 65535, digits only; an IPv6
 * host in brackets; no scheme such as grpc://): the host into host[cap]
 * (without brackets), *port, *bracketed. A message naming `flag` otherwise. */
cpr_status cpri_cli_host_port(const char *flag, const char *addr, char *host, size_t cap,
                              uint16_t *port, int *bracketed);

/* The PEM file `path` that option `what` names, read whole into *out
 * (malloc'd, NUL-terminated; at most 1 MiB, holding "-----BEGIN "). */
cpr_status cpri_cli_read_pem(const char *what, const char *path, char **out);

/* An output file written whole or not at all (common/outfile.c): a regular
 * file (or a new path) through a temporary file beside it, renamed over it
 * by commit and removed by abort or a failed commit; through a symbolic
 * link, the file it names; a FIFO or device (/dev/stdout) written in place,
 * never removed. Write to `f` between open and commit or abort; both free
 * what open allocated. */
typedef struct cpri_outfile {
    FILE *f;
    char *tmp;   /* NULL: written in place */
    char *final; /* the file the rename replaces */
} cpri_outfile;
cpr_status cpri_outfile_open(cpri_outfile *o, const char *path);
/* Flush, sync and rename into place (close only, in place). */
cpr_status cpri_outfile_commit(cpri_outfile *o);
void cpri_outfile_abort(cpri_outfile *o);

#endif /* CPR_CLI_H */
