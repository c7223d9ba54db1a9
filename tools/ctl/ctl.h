/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal interface between the files of cprctl: the parsed command line,
 * the helpers every command uses to report (aligned text tables, one JSON
 * object, failures with their status) and the commands themselves.
 * cprctl.c parses and dispatches, ctl_ops.c runs list, inspect, verify, gc
 * and stats, ctl_export.c runs export, ctl_recovery.c runs recovery. Not
 * installed; not part of the API.
 */
#ifndef CPR_CTL_H
#define CPR_CTL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cpr/client.h"
#include "cpr_json.h"

#define EXIT_FAILED 1 /* the command ran and something went wrong */
#define EXIT_USAGE 2  /* bad command line */

#define CTL_MAX_ARGS 3 /* positional arguments after the command */

typedef enum ctl_format { CTL_FORMAT_CSV = 0, CTL_FORMAT_F32 = 1 } ctl_format;

/* Everything the command line said, and the open client. */
typedef struct ctl {
    const char *command;          /* "list", "inspect", ... */
    const char *args[CTL_MAX_ARGS];
    int n_args;
    const char *server;           /* as given (flag or CPR_SERVER) */
    char *target;                 /* what cpr_client_open gets (malloc'd) */
    double timeout_s;             /* 0: the library's default */
    const char *token;            /* --token; NULL: $CPR_TOKEN (the library reads it) */
    const char *tls_ca, *tls_cert, *tls_key; /* --tls-*; NULL: $CPR_TLS_* */
    int json, quiet;
    uint32_t keep;                /* gc --keep; 0: the storage's default */
    uint64_t as_of;               /* export --as-of; 0: newest */
    int consistent;               /* export --consistent */
    ctl_format format;            /* export --format */
    uint64_t checkpoint;          /* inspect CKPT, abort CKPT */
    uint32_t shard;               /* abort SHARD */
    uint32_t table;               /* export TABLE */
    cpr_client *client;
} ctl;

/* ---- reporting (cprctl.c) ----------------------------------------------------- */

/* Print "cprctl: COMMAND: STATUS_NAME: message" on stderr and, with --json,
 * {"command", "error": {"status", "message"}} on stdout. Returns EXIT_FAILED. */
int ctl_fail(const ctl *c, cpr_status st);

/* A JSON object under construction: adds never fail individually; a failed
 * allocation is remembered and reported by ctl_json_emit. */
typedef struct ctl_json {
    cpri_json *root;
    int oom;
} ctl_json;

/* Start the command's object, with "command" already in it. */
void ctl_json_begin(const ctl *c, ctl_json *j);
/* A whole number, exact in the JSON text up to 2^64 - 1 (cpri_json_add_u64). */
void ctl_jnum(ctl_json *j, cpri_json *obj, const char *key, uint64_t value);
void ctl_jstr(ctl_json *j, cpri_json *obj, const char *key, const char *value);
void ctl_jbool(ctl_json *j, cpri_json *obj, const char *key, int value);
/* Add `child` under `key` (obj an object) or append it (key NULL, obj an
 * array); takes ownership of child in every case. */
void ctl_jchild(ctl_json *j, cpri_json *obj, const char *key, cpri_json *child);
/* A new object or array to fill and then give to ctl_jchild. */
cpri_json *ctl_jobject(ctl_json *j);
cpri_json *ctl_jarray(ctl_json *j);
/* Print the object on stdout and free it; returns the exit code to use:
 * `rc`, or EXIT_FAILED if building or printing failed. */
int ctl_json_emit(const ctl *c, ctl_json *j, int rc);

/* A text table printed with aligned columns. Cells are copied. */
typedef struct ctl_table {
    size_t cols;
    char **cells;
    size_t n_cells, cap;
    int oom;
} ctl_table;

void ctl_table_init(ctl_table *t, size_t cols);
void ctl_table_cell(ctl_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print (columns two spaces apart, no trailing blanks) and release. Returns
 * 0, or -1 if a cell could not be stored. */
int ctl_table_print(ctl_table *t, FILE *out);
void ctl_table_release(ctl_table *t);

/* "yes" / "no". */
const char *ctl_yes_no(int value);

/* ---- commands: each returns the process exit code --------------------------------- */

int ctl_cmd_list(ctl *c);
int ctl_cmd_inspect(ctl *c);
int ctl_cmd_verify(ctl *c);
int ctl_cmd_gc(ctl *c);
int ctl_cmd_abort(ctl *c);
int ctl_cmd_where(ctl *c);
int ctl_cmd_stats(ctl *c);
int ctl_cmd_export(ctl *c);
int ctl_cmd_recovery(ctl *c);

#endif /* CPR_CTL_H */
