/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cprctl: the operators' CLI of CPR storage. It answers what is stored
 * (list, inspect), whether it is intact (verify), reclaims space (gc), shows
 * the daemons' counters (stats), dumps a table to a file (export) and
 * decodes a job's recovery record (recovery), over any target the client
 * library accepts. This file parses the command line, opens the client and
 * dispatches; it also holds the reporting helpers the commands share
 * (ctl.h). Commands are in ctl_ops.c, ctl_export.c and ctl_recovery.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_cli.h"
#include "cpr_common.h"
#include "ctl.h"

#define MAX_TIMEOUT_S 1e6

/* Options that only some commands take. */
enum {
    OPT_KEEP = 1u << 0,
    OPT_AS_OF = 1u << 1,
    OPT_CONSISTENT = 1u << 2,
    OPT_FORMAT = 1u << 3,
    OPT_QUIET = 1u << 4,
};

typedef struct command {
    const char *name;
    int min_args, max_args;
    unsigned options;       /* OPT_* it accepts */
    int (*run)(ctl *c);
    const char *help;
} command;

static const command COMMANDS[] = {
    {"list", 0, 1, 0, ctl_cmd_list,
     "cprctl list [JOB]\n"
     "  Without JOB: the jobs stored, one a line. With JOB: one row per part\n"
     "  (checkpoint, shard/num_shards, kind, step, rows, bytes, committed,\n"
     "  consistent, base), then the job's latest consistent cut ('none' if it\n"
     "  has none).\n"},
    {"inspect", 2, 2, 0, ctl_cmd_inspect,
     "cprctl inspect JOB CKPT\n"
     "  The parts of JOB at checkpoint id CKPT; whether CKPT is a consistent cut\n"
     "  (shards 0..num_shards-1 all committed and consistent); the shards missing\n"
     "  (no committed part) or not consistent; total rows and bytes. Exit 1 if\n"
     "  no part has that id.\n"},
    {"where", 3, 3, 0, ctl_cmd_where,
     "cprctl where JOB SHARD CKPT\n"
     "  Where the part of JOB's SHARD at checkpoint id CKPT is kept: for each\n"
     "  node that lists it, the node and the place: 'rados:POOL/NS OBJECT@0..K'\n"
     "  (its 4 MiB objects in a Ceph pool) or 'file:PATH' (a ckptd's disk), with\n"
     "  the bytes, then its blobs; 'open: being written' for an open part. With\n"
     "  --json: {job, shard, checkpoint, places: [{node, location}]}. Exit 1\n"
     "  when no node lists it.\n"},
    {"verify", 0, 1, 0, ctl_cmd_verify,
     "cprctl verify [JOB]\n"
     "  Read every row and blob of JOB (default: every job) on every node and\n"
     "  check every checksum. Prints each problem (what, where), then what was\n"
     "  checked. Exit 0 intact, 1 problems found (or the check failed).\n"},
    {"gc", 0, 1, OPT_KEEP, ctl_cmd_gc,
     "cprctl gc [JOB] [--keep K]\n"
     "  Retention for JOB (default: every job): keep the newest K consistent cuts\n"
     "  (K >= 1; default: the storage's setting, 2 unless ckptd --retain says\n"
     "  otherwise) and everything newer, delete what no retained state needs\n"
     "  (whole parts; what the kept states still need of them is folded first).\n"
     "  Prints the floor (oldest restorable checkpoint), the parts and uncommitted\n"
     "  leftovers removed, the stored row versions dropped, and the store size\n"
     "  before and after.\n"},
    {"abort", 3, 3, 0, ctl_cmd_abort,
     "cprctl abort JOB SHARD CKPT\n"
     "  Drop the open (uncommitted) part of JOB's SHARD at checkpoint id CKPT,\n"
     "  say of a trainer that died between begin and commit, so that the id is\n"
     "  free at once instead of after the daemon's idle timeout. Exit 0 when\n"
     "  nothing of the part is left (also when there was none); a committed\n"
     "  part is never touched (exit 1, FAILED_PRECONDITION).\n"},
    {"stats", 0, 0, 0, ctl_cmd_stats,
     "cprctl stats\n"
     "  Counters of every node, summed: jobs, parts, rows and bytes in and out\n"
     "  since each daemon started, size on disk, failed calls by status (only\n"
     "  statuses with failures are shown).\n"},
    {"recovery", 1, 1, 0, ctl_cmd_recovery,
     "cprctl recovery JOB\n"
     "  JOB's recovery record, the decision every process of the job acts on:\n"
     "  its generation (0: none recorded), the action (partial, full,\n"
     "  restart-from-scratch), the consistent cut and the step to rewind to\n"
     "  (full), problems, the reason with the estimator's numbers, and per shard\n"
     "  what it restores (source, as-of checkpoint, kind, step, dense state).\n"
     "  With --json the plan is the recorded JSON (docs/model.md), or null.\n"
     "  A record may exist before a job has parts, so a job without one (or\n"
     "  unknown) is generation 0 and exit 0; a record this cprctl cannot decode\n"
     "  is printed raw on stderr with exit 1.\n"},
    {"export", 3, 3, OPT_AS_OF | OPT_CONSISTENT | OPT_FORMAT | OPT_QUIET, ctl_cmd_export,
     "cprctl export JOB TABLE FILE [--as-of C | --consistent] [--format csv|f32]\n"
     "                             [--quiet]\n"
     "  Restore table TABLE of JOB into FILE ('-': stdout): the newest committed\n"
     "  state, or as of checkpoint C, or at the latest consistent cut. FILE is\n"
     "  written as a temporary FILE.tmp.XXXXXX and renamed once complete, so a\n"
     "  failed export leaves no partial FILE (stdout, a FIFO or a device is\n"
     "  written in place and cannot be taken back: there a failure can follow\n"
     "  some rows). Rows are in ascending row order on each storage node, node\n"
     "  after node.\n"
     "  --format csv   (default) a header line 'row,v0,...,v<dim-1>,s0,...,\n"
     "                 s<state_dim-1>', then one line per row; floats printed\n"
     "                 with %.9g, which reads back as the same float32. An\n"
     "                 export of no rows is the header 'row' alone.\n"
     "  --format f32   raw little-endian binary, no header: per row a uint64 row\n"
     "                 id, dim float32 values, then state_dim float32 optimizer\n"
     "                 state values (row size 8 + 4 x (dim + state_dim) bytes).\n"
     "  The summary (rows, bytes written, dim, state_dim, as_of) goes to stderr,\n"
     "  or to stdout as JSON with --json (FILE must then not be '-'). Exports\n"
     "  that take over a second report progress on stderr twice a second unless\n"
     "  --quiet.\n"},
};

#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *out)
{
    fputs("usage: cprctl [--server TARGET] [--timeout S] [--json] [--token T]\n"
          "              [--tls-ca FILE [--tls-cert FILE --tls-key FILE]] COMMAND [ARGS]\n"
          "\n"
          "The operators' tool for CPR checkpoint storage: what is stored, is it\n"
          "intact, reclaim space, dump a table.\n"
          "\n"
          "  --server TARGET  grpc://HOST:PORT[,HOST:PORT...] (ckptd daemons; the\n"
          "                   list of every node the job was written to), HOST:PORT\n"
          "                   [,...] (the same), unix:/PATH (a ckptd's socket), or\n"
          "                   local:///ABS/PATH (an existing store, in-process, when\n"
          "                   no daemon has it open), or grpcs://HOST:PORT[,...] (ckptd\n"
          "                   daemons serving TLS): the client library's targets.\n"
          "                   Default: $CPR_SERVER.\n"
          "  --token T        the bearer token a ckptd with --auth-file knows\n"
          "                   (default: $CPR_TOKEN, which ps does not show: prefer it)\n"
          "  --tls-ca FILE    grpcs://: PEM roots of the daemons' certificates\n"
          "                   (default: $CPR_TLS_CA, else the system's)\n"
          "  --tls-cert FILE, --tls-key FILE\n"
          "                   grpcs:// with mutual TLS: this client's PEM certificate\n"
          "                   and key (default: $CPR_TLS_CERT, $CPR_TLS_KEY)\n"
          "  --timeout S      deadline of each short call in seconds (default 30)\n"
          "  --json           print exactly one JSON object on stdout\n"
          "  -h, --help       print this help (cprctl COMMAND --help: that command's)\n"
          "\n"
          "Options may come before or after the command.\n"
          "\n",
          out);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "%s\n", COMMANDS[i].help);
    fputs("Exit status: 0 done (verify: intact), 1 failure (the status name and\n"
          "message on stderr; with --json also {\"command\", \"error\": {\"status\",\n"
          "\"message\"}} on stdout), 2 bad command line.\n",
          out);
}

/* ---- reporting helpers (ctl.h) ------------------------------------------------------ */

int ctl_fail(const ctl *c, cpr_status st)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", cpr_errmsg()); /* later calls may replace it */
    fprintf(stderr, "cprctl: %s: %s: %s\n", c->command, cpr_status_name(st), msg);
    if (c->json) {
        ctl_json j;
        ctl_json_begin(c, &j);
        cpri_json *err = ctl_jobject(&j);
        ctl_jstr(&j, err, "status", cpr_status_name(st));
        ctl_jstr(&j, err, "message", msg);
        ctl_jchild(&j, j.root, "error", err);
        ctl_json_emit(c, &j, EXIT_FAILED);
    }
    return EXIT_FAILED;
}

void ctl_json_begin(const ctl *c, ctl_json *j)
{
    j->root = cpri_json_object();
    j->oom = !j->root;
    ctl_jstr(j, j->root, "command", c->command);
}

void ctl_jnum(ctl_json *j, cpri_json *obj, const char *key, uint64_t value)
{
    if (!obj || cpri_json_add_u64(obj, key, value))
        j->oom = 1;
}

void ctl_jstr(ctl_json *j, cpri_json *obj, const char *key, const char *value)
{
    if (!obj || cpri_json_add_string(obj, key, value))
        j->oom = 1;
}

void ctl_jbool(ctl_json *j, cpri_json *obj, const char *key, int value)
{
    if (!obj || cpri_json_add_bool(obj, key, value))
        j->oom = 1;
}

void ctl_jchild(ctl_json *j, cpri_json *obj, const char *key, cpri_json *child)
{
    int rc = -1;
    if (obj && child)
        rc = key ? cpri_json_add_child(obj, key, child) : cpri_json_append(obj, child);
    if (rc) {
        cpri_json_free(child); /* not adopted */
        j->oom = 1;
    }
}

cpri_json *ctl_jobject(ctl_json *j)
{
    cpri_json *o = cpri_json_object();
    if (!o)
        j->oom = 1;
    return o;
}

cpri_json *ctl_jarray(ctl_json *j)
{
    cpri_json *a = cpri_json_array();
    if (!a)
        j->oom = 1;
    return a;
}

int ctl_json_emit(const ctl *c, ctl_json *j, int rc)
{
    int bad = j->oom || cpri_json_print(j->root, stdout) || fflush(stdout);
    cpri_json_free(j->root);
    j->root = NULL;
    if (bad) {
        fprintf(stderr, "cprctl: %s: could not build or print the JSON output\n", c->command);
        return EXIT_FAILED;
    }
    return rc;
}

void ctl_table_init(ctl_table *t, size_t cols)
{
    memset(t, 0, sizeof *t);
    t->cols = cols;
}

void ctl_table_cell(ctl_table *t, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (t->n_cells == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        char **grown = realloc(t->cells, cap * sizeof *grown);
        if (!grown) {
            t->oom = 1;
            return;
        }
        t->cells = grown;
        t->cap = cap;
    }
    t->cells[t->n_cells] = strdup(text);
    if (!t->cells[t->n_cells])
        t->oom = 1;
    else
        t->n_cells++;
}

int ctl_table_print(ctl_table *t, FILE *out)
{
    size_t width[16] = {0};
    if (t->oom || t->cols == 0 || t->cols > 16 || t->n_cells % t->cols) {
        ctl_table_release(t);
        return -1;
    }
    for (size_t i = 0; i < t->n_cells; i++) {
        size_t len = strlen(t->cells[i]);
        if (len > width[i % t->cols])
            width[i % t->cols] = len;
    }
    for (size_t i = 0; i < t->n_cells; i++) {
        size_t col = i % t->cols;
        if (col + 1 == t->cols)
            fprintf(out, "%s\n", t->cells[i]);
        else
            fprintf(out, "%-*s  ", (int)width[col], t->cells[i]);
    }
    ctl_table_release(t);
    return 0;
}

void ctl_table_release(ctl_table *t)
{
    for (size_t i = 0; i < t->n_cells; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof *t);
}

const char *ctl_yes_no(int value)
{
    return value ? "yes" : "no";
}

/* ---- command line -------------------------------------------------------------------- */

/* What parsing found besides the ctl fields. */
typedef struct parsed {
    unsigned options_seen;  /* OPT_* given */
    const char *option_name[5];
    int help;
    const char *positional[1 + CTL_MAX_ARGS];
    int n_positional;
} parsed;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("cprctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see cprctl --help)\n", stderr);
    return -1;
}

static int cli_error(cpr_status st)
{
    return st ? usage_error("%s", cpr_errmsg()) : 0;
}

static void saw(parsed *p, unsigned opt, const char *name)
{
    p->options_seen |= opt;
    for (int b = 0; b < 5; b++)
        if (opt == 1u << b)
            p->option_name[b] = name;
}

/* A flag with a value at argv[*i]: 1 taken, 0 not this kind, -1 error printed. */
static int parse_valued(int argc, char **argv, int *i, ctl *c, parsed *p)
{
    static const char *const names[] = {"--server", "--timeout", "--keep", "--as-of",
                                        "--format", "--token", "--tls-ca", "--tls-cert",
                                        "--tls-key"};
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        int missing = 0;
        const char *v = cpri_cli_value(argc, argv, i, names[f], &missing);
        uint64_t n = 0;
        if (missing)
            return cli_error(CPR_INVALID_ARGUMENT);
        if (!v)
            continue;
        switch (f) {
        case 0:
            c->server = v;
            return 1;
        case 1:
            return cli_error(cpri_cli_double(names[f], v, 0, 0, MAX_TIMEOUT_S, 1,
                                            &c->timeout_s)) ? -1 : 1;
        case 2:
            saw(p, OPT_KEEP, names[f]);
            if (cli_error(cpri_cli_u64(names[f], v, 1, UINT32_MAX, &n)))
                return -1;
            c->keep = (uint32_t)n;
            return 1;
        case 3:
            saw(p, OPT_AS_OF, names[f]);
            return cli_error(cpri_cli_u64(names[f], v, 1, UINT64_MAX, &c->as_of)) ? -1 : 1;
        case 5:
            c->token = v;
            return 1;
        case 6:
            c->tls_ca = v;
            return 1;
        case 7:
            c->tls_cert = v;
            return 1;
        case 8:
            c->tls_key = v;
            return 1;
        default:
            saw(p, OPT_FORMAT, names[f]);
            if (strcmp(v, "csv") != 0 && strcmp(v, "f32") != 0)
                return usage_error("--format: '%s' is neither csv nor f32", v);
            c->format = strcmp(v, "csv") == 0 ? CTL_FORMAT_CSV : CTL_FORMAT_F32;
            return 1;
        }
    }
    return 0;
}

/* One argument at argv[*i]: 0 taken, -1 error printed. */
static int parse_one(int argc, char **argv, int *i, int *only_positional, ctl *c, parsed *p)
{
    const char *arg = argv[*i];
    /* "-1" is a (bad) number, not an option: its argument's check names it. */
    if (*only_positional || arg[0] != '-' || strcmp(arg, "-") == 0 ||
        (arg[1] >= '0' && arg[1] <= '9')) {
        if (p->n_positional == 1 + CTL_MAX_ARGS)
            return usage_error("too many arguments (from '%s' on)", arg);
        p->positional[p->n_positional++] = arg;
        return 0;
    }
    if (strcmp(arg, "--") == 0)
        *only_positional = 1;
    else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
        p->help = 1;
    else if (strcmp(arg, "--json") == 0)
        c->json = 1;
    else if (strcmp(arg, "--quiet") == 0 || strcmp(arg, "-q") == 0) {
        saw(p, OPT_QUIET, arg);
        c->quiet = 1;
    } else if (strcmp(arg, "--consistent") == 0) {
        saw(p, OPT_CONSISTENT, arg);
        c->consistent = 1;
    } else {
        int rc = parse_valued(argc, argv, i, c, p);
        if (rc == 0)
            return usage_error("unknown option '%s'", arg);
        return rc < 0 ? -1 : 0;
    }
    return 0;
}

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(COMMANDS[i].name, name) == 0)
            return &COMMANDS[i];
    return NULL;
}

static int check_job(const char *job)
{
    if (!cpri_name_valid(job))
        return usage_error("'%s' is not a job name (1-%d characters of [A-Za-z0-9._-])", job,
                           CPR_NAME_MAX);
    return 0;
}

/* The command's own arguments: counts, job names, numbers, conflicts. */
static int check_args(const command *cmd, ctl *c, const parsed *p)
{
    uint64_t n = 0;
    for (int b = 0; b < 5; b++)
        if ((p->options_seen & (1u << b)) && !(cmd->options & (1u << b)))
            return usage_error("%s: %s is not an option of this command", cmd->name,
                               p->option_name[b]);
    if (c->n_args < cmd->min_args || c->n_args > cmd->max_args) {
        fprintf(stderr, "cprctl: %s: wrong number of arguments; usage:\n%s", cmd->name,
                cmd->help);
        return -1;
    }
    if (c->n_args > 0 && check_job(c->args[0]))
        return -1;
    if (strcmp(cmd->name, "abort") == 0 || strcmp(cmd->name, "where") == 0) {
        uint64_t shard;
        if (cli_error(cpri_cli_u64("SHARD", c->args[1], 0, UINT32_MAX, &shard)) ||
            cli_error(cpri_cli_u64("CKPT", c->args[2], 1, UINT64_MAX, &c->checkpoint)))
            return -1;
        c->shard = (uint32_t)shard;
    }
    if (strcmp(cmd->name, "inspect") == 0 &&
        cli_error(cpri_cli_u64("CKPT", c->args[1], 1, UINT64_MAX, &c->checkpoint)))
        return -1;
    if (strcmp(cmd->name, "export") == 0) {
        if (cli_error(cpri_cli_u64("TABLE", c->args[1], 0, UINT32_MAX, &n)))
            return -1;
        c->table = (uint32_t)n;
        if (c->as_of && c->consistent)
            return usage_error("export: --as-of and --consistent exclude each other");
        if (c->args[2][0] == '\0')
            return usage_error("export: FILE must not be empty");
        if (c->json && strcmp(c->args[2], "-") == 0)
            return usage_error("export: --json and FILE '-' would both write to stdout");
    }
    return 0;
}

/* The target as the client library reads it (cpr/client.h: one syntax). */
static int resolve_target(ctl *c)
{
    if (!c->server)
        c->server = getenv("CPR_SERVER");
    if (!c->server || c->server[0] == '\0')
        return usage_error("%s: no server: give --server TARGET or set CPR_SERVER", c->command);
    c->target = strdup(c->server);
    if (!c->target) {
        fprintf(stderr, "cprctl: out of memory\n");
        return -1;
    }
    return 0;
}

/* Parse argv into c: 0 run, 1 help printed (exit 0), -1 error printed (exit 2). */
static int parse(int argc, char **argv, ctl *c, const command **cmd)
{
    parsed p;
    int only_positional = 0;
    memset(&p, 0, sizeof p);
    for (int i = 1; i < argc; i++)
        if (parse_one(argc, argv, &i, &only_positional, c, &p))
            return -1;
    if (p.n_positional == 0 && p.help) {
        usage(stdout);
        return 1;
    }
    if (p.n_positional == 0) {
        usage(stderr);
        return -1;
    }
    c->command = p.positional[0];
    *cmd = find_command(c->command);
    if (!*cmd)
        return usage_error("unknown command '%s'", c->command);
    if (p.help) {
        fputs((*cmd)->help, stdout);
        return 1;
    }
    c->n_args = p.n_positional - 1;
    for (int a = 0; a < c->n_args; a++)
        c->args[a] = p.positional[1 + a];
    if (check_args(*cmd, c, &p))
        return -1;
    return resolve_target(c);
}

/* Every command reads or changes a store that exists: a local:// target
 * naming a directory without one is refused (opening it would create a
 * store there and report an empty one). */
static cpr_status check_local_store(const char *target)
{
    static const char prefix[] = "local://";
    if (strncmp(target, prefix, sizeof prefix - 1) != 0)
        return CPR_OK;
    const char *dir = target + sizeof prefix - 1;
    if (dir[0] != '/') /* the library's rule: a usage error, before any look on disk */
        return cpr_fail(CPR_INVALID_ARGUMENT, "--server '%.200s': local:// takes an absolute "
                        "path, local:///ABS/PATH", target);
    char db[4200];
    struct stat sb;
    snprintf(db, sizeof db, "%s/db", dir);
    if (stat(db, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cpr_fail(CPR_NOT_FOUND, "no CPR store at %s (it has no db/ directory): check "
                        "the path in --server", dir);
    return CPR_OK;
}

int main(int argc, char **argv)
{
    ctl c;
    const command *cmd = NULL;
    memset(&c, 0, sizeof c);
    int parsed_rc = parse(argc, argv, &c, &cmd);
    if (parsed_rc) {
        free(c.target);
        return parsed_rc > 0 ? 0 : EXIT_USAGE;
    }
    cpr_client_options opts;
    memset(&opts, 0, sizeof opts);
    opts.call_timeout_s = c.timeout_s;
    opts.token = c.token;
    opts.tls_ca_file = c.tls_ca;
    opts.tls_cert_file = c.tls_cert;
    opts.tls_key_file = c.tls_key;
    cpr_status st = check_local_store(c.target);
    if (st == CPR_OK)
        st = cpr_client_open(c.target, &opts, &c.client);
    int rc = 0;
    if (st == CPR_INVALID_ARGUMENT) /* the target, a TLS file or the token: the message says */
        rc = usage_error("%s", cpr_errmsg()) ? EXIT_USAGE : 0;
    else
        rc = st ? ctl_fail(&c, st) : cmd->run(&c);
    cpr_client_close(c.client);
    free(c.target);
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "cprctl: %s: could not write to stdout\n", c.command);
        rc = EXIT_FAILED;
    }
    return rc;
}
