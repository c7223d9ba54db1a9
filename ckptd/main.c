/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd: the CPR checkpoint daemon for storage nodes. Parses its settings
 * (flags, or a config file with the same keys), opens the store, serves it
 * over gRPC, prints the bound address on one line ("ckptd listening on
 * HOST:PORT") so scripts and tests can read it, reaps parts left idle by
 * vanished clients (reaper.c), reloads its --auth-file on SIGHUP, and on
 * SIGTERM or SIGINT stops accepting, aborts what is in flight and closes the
 * store.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "auth.h"
#include "cpr/store.h"
#include "cpr_cli.h"
#include "cpr_common.h"
#include "reaper.h"
#include "service.h"
#include "telemetry.h"
#include "wire.h"

#define EXIT_USAGE 2
#define MAX_IDLE_PART_TIMEOUT_S (7.0 * 24 * 3600)
/* --max-memory-mb's shares, in twentieths: request messages get 7, the
 * store's write buffers 7, and the remaining 30% is left to what neither
 * accounts for (gRPC's transport buffers, thread stacks, RocksDB, the heap's
 * fragmentation): test_ckptd_limits measured those at up to a quarter of the
 * quota with another test running beside it (docs/operations.md). */
#define MEMORY_SHARE_20THS 7

typedef struct settings {
    char listen[256];
    char data_dir[4096];
    char tls_cert[4096], tls_key[4096], tls_client_ca[4096], auth_file[4096];
    char metrics_listen[256];
    char backend[16], rados_conf[4096], rados_pool[256], rados_namespace[256], rados_user[256];
    int allow_plaintext;
    int buffered_reads;
    uint64_t threads, retain, max_message_mb, min_free_mb, max_memory_mb;
    uint64_t max_open_parts, max_open_parts_per_job, max_open_blobs, max_open_blobs_per_job;
    uint64_t max_streams, restore_streams;
    int restore_streams_set;
    double idle_part_timeout_s, gc_interval_s;
    int log_level;
} settings;

static void usage(FILE *out)
{
    fputs("usage: ckptd --data-dir DIR [--listen ADDR] [--config FILE] [--threads N]\n"
          "             [--retain K] [--gc-interval-s S] [--max-message-mb M]\n"
          "             [--idle-part-timeout-s S] [--log-level L] [--min-free-mb M]\n"
          "             [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n"
          "             [--auth-file FILE] [--allow-plaintext yes]\n"
          "             [--metrics-listen ADDR] [--max-memory-mb M]\n"
          "             [--max-open-parts N] [--max-open-parts-per-job N]\n"
          "             [--max-open-blobs N] [--max-open-blobs-per-job N]\n"
          "             [--max-streams-per-connection N] [--restore-streams N]\n"
          "             [--reads direct|buffered]\n"
          "             [--backend local|rados --rados-pool POOL [--rados-conf FILE]\n"
          "              [--rados-namespace NS] [--rados-user USER]]\n"
          "       ckptd --version | --help\n"
          "\n"
          "  --listen ADDR        HOST:PORT to serve (default 127.0.0.1:7717; port 0 picks a\n"
          "                       free port; IPv6 as [ADDR]:PORT), or unix:/PATH, a\n"
          "                       Unix-domain socket for clients on this host (no TCP\n"
          "                       stack on the way; ckptd holds PATH.lock while it\n"
          "                       runs, and a socket in use is refused); the bound\n"
          "                       address is printed on one line\n"
          "  --data-dir DIR       the store's directory (created if missing)\n"
          "  --config FILE        settings as `key = value` lines, keys as the flags\n"
          "                       without dashes (listen, data-dir, ...); flags win\n"
          "  --threads N          most calls served at once (default 1024)\n"
          "  --retain K           consistent cuts kept by retention (default 2; also what\n"
          "                       Gc with keep 0 keeps)\n"
          "  --gc-interval-s S    run retention (keep --retain cuts of every job) every S\n"
          "                       seconds when something was written (default 30; 0: only\n"
          "                       when a client calls Gc)\n"
          "  --max-message-mb M   largest request message (default 20; the client library\n"
          "                       sends at most 16 MiB of rows a message)\n"
          "  --idle-part-timeout-s S\n"
          "                       abort a part no Begin, PutRows, PutBlob or Commit has\n"
          "                       touched for S seconds (its client is presumed gone), and\n"
          "                       cancel a stream on which no message moved for S seconds\n"
          "                       (default 600; up to 604800)\n"
          "  --log-level L        error, warn, info or debug (default info)\n"
          "  --min-free-mb M      refuse new parts (RESOURCE_EXHAUSTED) while the data\n"
          "                       directory's file system has less free space (default\n"
          "                       256; rows, blobs and commits stop at lower, fixed\n"
          "                       floors so that the catalog never meets a full disk;\n"
          "                       Health says NOT_SERVING while commits cannot be made;\n"
          "                       with --backend rados: while the pool can take less)\n"
          "  --tls-cert FILE      serve TLS only, with this PEM certificate (chain) ...\n"
          "  --tls-key FILE       ... and its PEM private key\n"
          "  --tls-client-ca FILE mutual TLS: every client must present a certificate\n"
          "                       this PEM CA signed\n"
          "  --auth-file FILE     per-job authorization: lines `TOKEN JOB-PATTERN RIGHTS`\n"
          "                       (or `subject:SUBJECT ...` for mutual TLS); RIGHTS a comma\n"
          "                       list of read, write, admin; reloaded on SIGHUP\n"
          "                       (docs/operations.md). Without it every caller may do all\n"
          "  --metrics-listen ADDR  serve Prometheus metrics (GET /metrics) and a health\n"
          "                       probe (GET /healthz: 200, or 503 while the store cannot\n"
          "                       commit) over HTTP on HOST:PORT (port 0 picks one; the\n"
          "                       bound address is printed before the gRPC one); off by\n"
          "                       default. The metrics hold no job names or data\n"
          "  --max-memory-mb M    memory for messages and write buffers (default 4096;\n"
          "                       0: unbounded). 35% is for request messages: each\n"
          "                       receiving call reserves twice --max-message-mb and waits\n"
          "                       for room (RESOURCE_EXHAUSTED after\n"
          "                       --idle-part-timeout-s); 35% for the write buffers of\n"
          "                       open parts (12 MiB each) and blobs (1 MiB): a\n"
          "                       Begin or blob past it is RESOURCE_EXHAUSTED at once;\n"
          "                       the rest is for gRPC's stream windows and the heap\n"
          "  --max-open-parts N   parts begun and not committed or aborted, in all\n"
          "                       (default 4096) ...\n"
          "  --max-open-parts-per-job N  ... and per job (default 1024); a Begin past\n"
          "                       either is RESOURCE_EXHAUSTED\n"
          "  --max-open-blobs N   blobs being written, in all (default 4096) ...\n"
          "  --max-open-blobs-per-job N  ... and per job (default 1024)\n"
          "  --max-streams-per-connection N\n"
          "                       calls one client connection may have open at once\n"
          "                       (HTTP/2 MAX_CONCURRENT_STREAMS, default 100); more wait\n"
          "                       in the client\n"
          "  --restore-streams N  Restore streams served at once (default: the online\n"
          "                       CPUs, at least 2; 0: no limit); the others wait their\n"
          "                       turn, or go in after a second in which none of those\n"
          "                       served sent anything; a direct read's plan takes no\n"
          "                       slot\n"
          "  --reads MODE         how segments on the local disk are read: direct\n"
          "                       (default: O_DIRECT, several reads in flight) or\n"
          "                       buffered (through the page cache, the kernel reading\n"
          "                       ahead: faster where the host still caches recent\n"
          "                       writes, as virtual machines and network disks do;\n"
          "                       docs/store.md, \"Reads\")\n"
          "  --backend B          where segments and the catalog live: local (default: the\n"
          "                       data directory) or rados (a Ceph pool: a committed part\n"
          "                       outlives this node; the data directory keeps a copy of\n"
          "                       the catalog, rebuilt from the pool at start)\n"
          "  --rados-pool POOL    the pool (must exist) ...\n"
          "  --rados-conf FILE    ... the cluster's ceph.conf (default: librados' search)\n"
          "  --rados-namespace NS ... a namespace, so that stores can share a pool\n"
          "  --rados-user USER    ... and the cephx user, without \"client.\" (default\n"
          "                       admin; its keyring as ceph.conf names it)\n"
          "  --allow-plaintext yes  serve plaintext on an address other than loopback\n"
          "                       (refused otherwise: tokens and rows would cross the\n"
          "                       network in clear; give --tls-cert instead)\n"
          "\n"
          "SIGTERM or SIGINT: stop accepting, abort parts in flight, close the store.\n"
          "SIGHUP: read --auth-file again (a bad file keeps the rules in force).\n"
          "Exit status: 0 after a clean stop, 1 failure, 2 bad command line or config.\n",
          out);
}

static int fail_usage(const char *msg)
{
    fprintf(stderr, "ckptd: %s\n", msg);
    return -1;
}

/* Apply one setting (from a flag or the config file). */
static int set(settings *s, const char *key, const char *value)
{
    cpr_status st = CPR_OK;
    if (strcmp(key, "listen") == 0)
        snprintf(s->listen, sizeof s->listen, "%s", value);
    else if (strcmp(key, "data-dir") == 0)
        snprintf(s->data_dir, sizeof s->data_dir, "%s", value);
    else if (strcmp(key, "tls-cert") == 0)
        snprintf(s->tls_cert, sizeof s->tls_cert, "%s", value);
    else if (strcmp(key, "tls-key") == 0)
        snprintf(s->tls_key, sizeof s->tls_key, "%s", value);
    else if (strcmp(key, "tls-client-ca") == 0)
        snprintf(s->tls_client_ca, sizeof s->tls_client_ca, "%s", value);
    else if (strcmp(key, "backend") == 0) {
        if (strcmp(value, "local") != 0 && strcmp(value, "rados") != 0)
            return fail_usage("--backend: local or rados");
        snprintf(s->backend, sizeof s->backend, "%s", value);
    } else if (strcmp(key, "rados-conf") == 0)
        snprintf(s->rados_conf, sizeof s->rados_conf, "%s", value);
    else if (strcmp(key, "rados-pool") == 0)
        snprintf(s->rados_pool, sizeof s->rados_pool, "%s", value);
    else if (strcmp(key, "rados-namespace") == 0)
        snprintf(s->rados_namespace, sizeof s->rados_namespace, "%s", value);
    else if (strcmp(key, "rados-user") == 0)
        snprintf(s->rados_user, sizeof s->rados_user, "%s", value);
    else if (strcmp(key, "metrics-listen") == 0)
        snprintf(s->metrics_listen, sizeof s->metrics_listen, "%s", value);
    else if (strcmp(key, "auth-file") == 0)
        snprintf(s->auth_file, sizeof s->auth_file, "%s", value);
    else if (strcmp(key, "allow-plaintext") == 0) {
        if (strcmp(value, "yes") != 0 && strcmp(value, "no") != 0)
            return fail_usage("--allow-plaintext: use yes or no");
        s->allow_plaintext = strcmp(value, "yes") == 0;
    }
    else if (strcmp(key, "reads") == 0) {
        if (strcmp(value, "direct") != 0 && strcmp(value, "buffered") != 0)
            return fail_usage("--reads: use direct or buffered");
        s->buffered_reads = strcmp(value, "buffered") == 0;
    }
    else if (strcmp(key, "threads") == 0)
        st = cpri_cli_u64("--threads", value, 1, 100000, &s->threads);
    else if (strcmp(key, "retain") == 0)
        st = cpri_cli_u64("--retain", value, 1, 100000, &s->retain);
    else if (strcmp(key, "gc-interval-s") == 0)
        st = cpri_cli_double("--gc-interval-s", value, 0, 1, MAX_IDLE_PART_TIMEOUT_S, 1,
                            &s->gc_interval_s);
    else if (strcmp(key, "max-streams-per-connection") == 0)
        st = cpri_cli_u64("--max-streams-per-connection", value, 1, 100000, &s->max_streams);
    else if (strcmp(key, "restore-streams") == 0) {
        st = cpri_cli_u64("--restore-streams", value, 0, 4096, &s->restore_streams);
        s->restore_streams_set = st == CPR_OK;
    }
    else if (strcmp(key, "max-open-parts") == 0)
        st = cpri_cli_u64("--max-open-parts", value, 1, UINT32_MAX, &s->max_open_parts);
    else if (strcmp(key, "max-open-parts-per-job") == 0)
        st = cpri_cli_u64("--max-open-parts-per-job", value, 1, UINT32_MAX,
                          &s->max_open_parts_per_job);
    else if (strcmp(key, "max-open-blobs") == 0)
        st = cpri_cli_u64("--max-open-blobs", value, 1, UINT32_MAX, &s->max_open_blobs);
    else if (strcmp(key, "max-open-blobs-per-job") == 0)
        st = cpri_cli_u64("--max-open-blobs-per-job", value, 1, UINT32_MAX,
                          &s->max_open_blobs_per_job);
    else if (strcmp(key, "max-memory-mb") == 0)
        st = cpri_cli_u64("--max-memory-mb", value, 0, UINT64_C(1) << 30, &s->max_memory_mb);
    else if (strcmp(key, "min-free-mb") == 0)
        st = cpri_cli_u64("--min-free-mb", value, 0, UINT64_C(1) << 40, &s->min_free_mb);
    else if (strcmp(key, "max-message-mb") == 0)
        st = cpri_cli_u64("--max-message-mb", value, 1, 2047, &s->max_message_mb);
    else if (strcmp(key, "idle-part-timeout-s") == 0)
        st = cpri_cli_double("--idle-part-timeout-s", value, 0, 0, MAX_IDLE_PART_TIMEOUT_S, 1,
                            &s->idle_part_timeout_s);
    else if (strcmp(key, "log-level") == 0) {
        s->log_level = cpri_log_level_parse(value);
        if (s->log_level < 0)
            return fail_usage("--log-level: use error, warn, info or debug");
    } else {
        char msg[300];
        snprintf(msg, sizeof msg, "unknown setting '%.200s' (see ckptd --help)", key);
        return fail_usage(msg);
    }
    return st ? fail_usage(cpr_errmsg()) : 0;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static int read_config(settings *s, const char *path)
{
    char line[4352];
    int lineno = 0, rc = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "ckptd: --config %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (rc == 0 && fgets(line, sizeof line, f)) {
        char *text = trim(line), *eq = strchr(text, '=');
        lineno++;
        if (*text == '\0' || *text == '#')
            continue;
        if (!eq) {
            fprintf(stderr, "ckptd: %s:%d: expected `key = value`\n", path, lineno);
            rc = -1;
            break;
        }
        *eq = '\0';
        if (set(s, trim(text), trim(eq + 1)) != 0) {
            fprintf(stderr, "ckptd: (in %s:%d)\n", path, lineno);
            rc = -1;
        }
    }
    fclose(f);
    return rc;
}

/* "HOST:PORT" -> "HOST". */
static void host_of(const char *addr, char *host, size_t cap)
{
    snprintf(host, cap, "%s", addr);
    char *colon = strrchr(host, ':');
    if (colon)
        *colon = '\0';
}

/* 127.0.0.0/8, ::1, localhost, or a unix socket: plaintext stays on the host. */
static int loopback(const char *listen)
{
    if (strncmp(listen, "unix:", 5) == 0)
        return 1;
    char host[256];
    host_of(listen, host, sizeof host);
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "localhost") == 0 ||
           strcmp(host, "[::1]") == 0;
}

/* --listen: HOST:PORT, or unix: and an absolute path that fits a socket
 * address. -1 with the message printed otherwise (exit 2). */
static int check_listen(const char *listen)
{
    if (strncmp(listen, "unix:", 5) == 0) {
        const char *path = listen + 5;
        char msg[600];
        if (path[0] != '/') {
            snprintf(msg, sizeof msg, "--listen '%.300s': a unix socket is unix:/ABSOLUTE/PATH "
                     "(clients name it so)", listen);
            return fail_usage(msg);
        }
        if (strlen(path) >= sizeof ((struct sockaddr_un *)0)->sun_path) {
            snprintf(msg, sizeof msg, "--listen: the socket path is %zu bytes, over the %zu a "
                     "unix socket may have", strlen(path),
                     sizeof ((struct sockaddr_un *)0)->sun_path - 1);
            return fail_usage(msg);
        }
        return 0;
    }
    static const char *const grpc_schemes[] = {"ipv4:", "ipv6:", "dns:", "unix-abstract:",
                                               "vsock:"};
    for (size_t i = 0; i < sizeof grpc_schemes / sizeof grpc_schemes[0]; i++)
        if (strncmp(listen, grpc_schemes[i], strlen(grpc_schemes[i])) == 0) {
            char msg[400];
            snprintf(msg, sizeof msg, "--listen '%.200s': give HOST:PORT or unix:/PATH, not a "
                     "gRPC address form (%s)", listen, grpc_schemes[i]);
            return fail_usage(msg);
        }
    char host[256];
    uint16_t port;
    int bracketed;
    if (cpri_cli_host_port("--listen", listen, host, sizeof host, &port, &bracketed) != CPR_OK)
        return fail_usage(cpr_errmsg());
    return 0;
}

/* Before serving on unix:PATH: gRPC removes a socket file it finds there
 * and binds anew, so a second daemon would take a running one's socket
 * (its clients then reach the second daemon's store). The rule:
 *  U1. A daemon holds an exclusive flock on PATH.lock from before it looks
 *      at PATH until it exits (the kernel drops it with the process): a
 *      second daemon on PATH fails to take it and exits 1, whichever of the
 *      two started first, before it serves or collects anything (its store
 *      is opened, and --data-dir created, just before: the socket may be
 *      in it).
 *  U2. With the lock held, a socket at PATH that answers a connect (a daemon
 *      of a version without U1) is refused too; one that refuses it, or that
 *      is gone (left by a daemon that was killed), is gRPC's to replace.
 *      Anything else at PATH (a file, a symbolic link, a socket we may not
 *      connect to) is refused, never removed.
 * *lock_fd gets the lock's descriptor (-1 for a TCP address). */
static cpr_status unix_socket_claim(const char *listen, int *lock_fd)
{
    *lock_fd = -1;
    if (strncmp(listen, "unix:", 5) != 0)
        return CPR_OK;
    const char *path = listen + 5;
    char dir[sizeof ((struct sockaddr_un *)0)->sun_path], lock[sizeof dir + 8];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir] = '\0'; /* "/x.sock": the directory is "/" */
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return cpr_fail(errno == ENOENT ? CPR_NOT_FOUND : CPR_IO, "cannot listen on %s: "
                        "directory %s: %s%s", listen, dir, strerror(errno),
                        errno == ENOENT ? " (create it, or choose another path)" : "");
    if (!S_ISDIR(sb.st_mode))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cannot listen on %s: %s is not a directory",
                        listen, dir);
    snprintf(lock, sizeof lock, "%s.lock", path);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return cpr_fail(CPR_IO, "cannot listen on %s: lock file %s: %s", listen, lock,
                        strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        close(fd);
        return err == EWOULDBLOCK
                   ? cpr_fail(CPR_ALREADY_EXISTS, "cannot listen on %s: another ckptd holds "
                              "%s (stop it, or choose another path)", listen, lock)
                   : cpr_fail(CPR_IO, "cannot listen on %s: locking %s: %s", listen, lock,
                              strerror(err));
    }
    cpr_status st = CPR_OK;
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT)
            st = cpr_fail(CPR_IO, "cannot listen on %s: %s", listen, strerror(errno));
    } else if (S_ISLNK(sb.st_mode)) {
        st = cpr_fail(CPR_ALREADY_EXISTS, "cannot listen on %s: %s is a symbolic link (give "
                      "the socket's own path, or remove the link)", listen, path);
    } else if (!S_ISSOCK(sb.st_mode)) {
        st = cpr_fail(CPR_ALREADY_EXISTS, "cannot listen on %s: %s exists and is not a "
                      "socket (remove it, or choose another path)", listen, path);
    } else {
        /* Non-blocking: a live daemon with a full backlog answers EAGAIN. */
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        int rc = probe < 0 ? -1 : connect(probe, (const struct sockaddr *)&sa, sizeof sa);
        int err = rc == 0 ? 0 : errno;
        if (probe >= 0)
            close(probe);
        if (probe < 0)
            st = cpr_fail(CPR_IO, "socket: %s", strerror(err));
        else if (rc == 0 || err == EAGAIN || err == EINPROGRESS)
            st = cpr_fail(CPR_ALREADY_EXISTS, "cannot listen on %s: another process is "
                          "listening there (a ckptd already running? stop it, or choose "
                          "another path)", listen);
        else if (err == EACCES || err == EPERM)
            st = cpr_fail(CPR_PERMISSION_DENIED, "cannot listen on %s: the socket there is "
                          "not ours to connect to (another user's?); if no process serves "
                          "it, remove it", listen);
        else if (err != ECONNREFUSED && err != ENOENT)
            st = cpr_fail(CPR_IO, "cannot listen on %s: connecting to the socket there, to "
                          "see whether it is in use, failed: %s", listen, strerror(err));
    }
    if (st) {
        close(fd);
        return st;
    }
    *lock_fd = fd;
    return CPR_OK;
}

/* Flags first find --config (applied before the other flags, which win). */
static int parse_args(int argc, char **argv, settings *s)
{
    static const char *const keys[] = {"listen", "data-dir", "threads", "retain", "gc-interval-s",
                                       "max-message-mb", "idle-part-timeout-s",
                                       "log-level", "tls-cert", "tls-key", "tls-client-ca",
                                       "auth-file", "allow-plaintext", "min-free-mb",
                                       "max-memory-mb", "metrics-listen", "max-open-parts",
                                       "max-open-parts-per-job", "max-open-blobs",
                                       "max-open-blobs-per-job", "max-streams-per-connection",
                                       "restore-streams", "reads",
                                       "backend", "rados-conf", "rados-pool",
                                       "rados-namespace", "rados-user"};
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *cfg = cpri_cli_value(argc, argv, &i, "--config", &missing);
        if (missing)
            return fail_usage(cpr_errmsg());
        if (cfg && read_config(s, cfg) != 0)
            return -1;
    }
    for (int i = 1; i < argc; i++) {
        int missing = 0, matched = 0;
        if (cpri_cli_value(argc, argv, &i, "--config", &missing))
            continue;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0] && !matched; k++) {
            char flag[32];
            snprintf(flag, sizeof flag, "--%s", keys[k]);
            const char *v = cpri_cli_value(argc, argv, &i, flag, &missing);
            if (missing)
                return fail_usage(cpr_errmsg());
            if (v) {
                matched = 1;
                if (set(s, keys[k], v) != 0)
                    return -1;
            }
        }
        if (!matched) {
            char msg[300];
            snprintf(msg, sizeof msg, "unknown argument '%.200s' (see ckptd --help)", argv[i]);
            return fail_usage(msg);
        }
    }
    if (s->data_dir[0] == '\0')
        return fail_usage("--data-dir is required");
    if (strcmp(s->backend, "rados") == 0 && !s->rados_pool[0])
        return fail_usage("--backend rados needs --rados-pool (and the cluster's --rados-conf)");
    if (strcmp(s->backend, "rados") != 0 &&
        (s->rados_pool[0] || s->rados_conf[0] || s->rados_namespace[0] || s->rados_user[0]))
        return fail_usage("--rados-* options need --backend rados");
    if (!s->tls_cert[0] != !s->tls_key[0])
        return fail_usage("--tls-cert and --tls-key go together: give both");
    if (s->tls_client_ca[0] && !s->tls_cert[0])
        return fail_usage("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)");
    if (check_listen(s->listen) != 0)
        return -1;
    if (!s->tls_cert[0] && !s->allow_plaintext && !loopback(s->listen))
        return fail_usage("--listen on an address other than loopback or a unix socket "
                          "needs TLS (--tls-cert, --tls-key), or --allow-plaintext yes");
    return 0;
}

int main(int argc, char **argv)
{
    /* Every PutRows message is decoded into ~1 MiB buffers. glibc would map
     * and unmap each one (they are above its mmap threshold), paying a page
     * fault per 4 KiB every time; kept on the heap they are reused. */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    /* Hundreds of handler threads would each get an arena of their own and
     * keep what they freed: two arenas keep the heap near what is in use
     * (--max-memory-mb accounts for buffers, not for fragmentation). */
    mallopt(M_ARENA_MAX, 2);
    /* A restore holds one descriptor per segment it reads (docs/store.md):
     * the soft limit (often 1024) goes up to the hard one. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    settings s = {.listen = "127.0.0.1:7717", .threads = 1024, .retain = 2,
                  .max_message_mb = 20, .idle_part_timeout_s = 600, .gc_interval_s = 30,
                  .min_free_mb = 256, .max_memory_mb = 4096, .max_open_parts = 4096,
                  .max_open_parts_per_job = 1024, .max_open_blobs = 4096,
                  .max_open_blobs_per_job = 1024, .max_streams = 100,
                  .log_level = CPR_LOG_INFO};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("ckptd %s\n", CPR_VERSION);
            return 0;
        }
    }
    if (parse_args(argc, argv, &s) != 0)
        return EXIT_USAGE;
    cpri_log_threshold = s.log_level;
    /* An open part holds a segment file and its io_uring ring, an open blob
     * the same: say so now if the caps cannot be met, not at the 1000th part. */
    uint64_t fds_needed = 2 * (s.max_open_parts + s.max_open_blobs) + 1024;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < fds_needed)
        cpri_log(CPR_LOG_WARN, "open files are limited to %llu, and --max-open-parts and "
                 "--max-open-blobs may need %llu: raise the limit (LimitNOFILE=, ulimit -n) "
                 "or lower the caps", (unsigned long long)nofile.rlim_cur,
                 (unsigned long long)fds_needed);

    /* Block the stop signals in every thread; this one waits for them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    cpr_store *store = NULL;
    cpri_server *server = NULL;
    cpri_reaper *reaper = NULL;
    /* retain_cuts is also what Gc with keep 0 keeps (cpr_store_gc). */
    cpr_store_options so = {.retain_cuts = (uint32_t)s.retain,
                            .min_free_bytes = s.min_free_mb << 20,
                            .max_open_parts = (uint32_t)s.max_open_parts,
                            .max_open_parts_per_job = (uint32_t)s.max_open_parts_per_job,
                            .max_open_blobs = (uint32_t)s.max_open_blobs,
                            .max_open_blobs_per_job = (uint32_t)s.max_open_blobs_per_job,
                            .max_buffer_bytes = (s.max_memory_mb << 20) / 20 * MEMORY_SHARE_20THS,
                            .buffered_reads = s.buffered_reads};
    if (strcmp(s.backend, "rados") == 0) {
        so.rados_pool = s.rados_pool;
        so.rados_conf = s.rados_conf[0] ? s.rados_conf : NULL;
        so.rados_namespace = s.rados_namespace[0] ? s.rados_namespace : NULL;
        so.rados_user = s.rados_user[0] ? s.rados_user : NULL;
    }
    cpri_server_options srv = {
        .rpc = {.listen = s.listen,
                .max_message_bytes = (size_t)s.max_message_mb << 20,
                .max_calls = (unsigned)s.threads,
                .idle_timeout_s = s.idle_part_timeout_s,
                .max_memory_bytes = ((size_t)s.max_memory_mb << 20) / 20 * MEMORY_SHARE_20THS,
                .unary_decode_factor = CPRI_WIRE_DECODE_FACTOR,
                .unary_decode_slack = CPRI_WIRE_DECODE_SLACK,
                .max_streams = (unsigned)s.max_streams},
        .restore_streams = s.restore_streams_set ? (s.restore_streams ? (int)s.restore_streams
                                                                      : -1)
                                                 : 0};
    int port = 0, sig = 0;
    char *pem[3] = {NULL, NULL, NULL};
    const char *pem_flag[3] = {"--tls-cert", "--tls-key", "--tls-client-ca"};
    const char *pem_path[3] = {s.tls_cert, s.tls_key, s.tls_client_ca};
    for (int i = 0; i < 3; i++) {
        if (pem_path[i][0] && cpri_cli_read_pem(pem_flag[i], pem_path[i], &pem[i]) != CPR_OK) {
            fprintf(stderr, "ckptd: %s\n", cpr_errmsg());
            for (int j = 0; j < 3; j++)
                free(pem[j]);
            return 1;
        }
    }
    srv.rpc.tls_cert_pem = pem[0];
    srv.rpc.tls_key_pem = pem[1];
    srv.rpc.tls_client_ca_pem = pem[2];
    cpri_auth *auth = NULL;
    int socket_lock = -1; /* held until exit (U1) */
    cpr_status st = s.auth_file[0] ? cpri_auth_load(s.auth_file, &auth) : CPR_OK;
    if (st == CPR_OK)
        st = cpr_store_open(s.data_dir, &so, &store);
    /* After the store, which creates --data-dir (a socket may live in it),
     * and before anything serves or collects. */
    if (st == CPR_OK)
        st = unix_socket_claim(s.listen, &socket_lock);
    if (st == CPR_OK)
        st = cpri_reaper_start(store, s.idle_part_timeout_s, s.gc_interval_s, &reaper);
    cpri_telemetry *telemetry = NULL;
    int metrics_port = 0;
    if (st == CPR_OK && s.metrics_listen[0]) {
        size_t n_methods = 0;
        const cpri_rpc_method *methods = cpri_service_methods(&n_methods);
        st = cpri_telemetry_start(store, methods, n_methods, s.metrics_listen, &telemetry,
                                  &metrics_port);
        srv.rpc.observe = cpri_telemetry_on_call;
        srv.rpc.observe_ctx = telemetry;
    }
    if (st == CPR_OK)
        st = cpri_server_start(store, auth, &srv, &server, &port);
    if (st == CPR_OK)
        cpri_telemetry_watch_server(telemetry, server);
    for (int i = 0; i < 3; i++) { /* gRPC keeps its own copies */
        if (pem[i])
            memset(pem[i], 0, strlen(pem[i])); /* the key, above all */
        free(pem[i]);
    }
    if (st) {
        fprintf(stderr, "ckptd: %s: %s\n", cpr_status_name(st), cpr_errmsg());
        cpri_telemetry_stop(telemetry);
        cpri_reaper_stop(reaper);
        cpr_store_close(store);
        cpri_auth_destroy(auth);
        if (socket_lock >= 0)
            close(socket_lock);
        return 1;
    }
    char bound[300];
    if (strncmp(s.listen, "unix:", 5) == 0) {
        snprintf(bound, sizeof bound, "%s", s.listen);
    } else {
        char host[256];
        host_of(s.listen, host, sizeof host);
        snprintf(bound, sizeof bound, "%s:%d", host, port);
    }
    if (telemetry) {
        char host[256];
        host_of(s.metrics_listen, host, sizeof host);
        printf("ckptd metrics on %s:%d\n", host, metrics_port);
    }
    printf("ckptd listening on %s\n", bound);
    fflush(stdout);
    cpri_log(CPR_LOG_INFO, "serving %s on %s (%s%s)", s.data_dir, bound,
             !s.tls_cert[0] ? "plaintext" : s.tls_client_ca[0] ? "mutual TLS" : "TLS",
             auth ? ", authorization by --auth-file" : ", no authorization");
    for (;;) {
        sigwait(&stop, &sig);
        if (sig != SIGHUP)
            break;
        size_t rules = 0;
        if (!auth)
            cpri_log(CPR_LOG_INFO, "SIGHUP: no --auth-file to reload");
        else if (cpri_auth_reload(auth, &rules) == CPR_OK) {
            cpri_log(CPR_LOG_INFO, "SIGHUP: reloaded %s: %zu rules", s.auth_file, rules);
            cpri_telemetry_reloaded(telemetry, 1);
        } else {
            cpri_log(CPR_LOG_ERROR, "SIGHUP: %s; the rules in force stay", cpr_errmsg());
            cpri_telemetry_reloaded(telemetry, 0);
        }
    }
    cpri_log(CPR_LOG_INFO, "signal %d: stopping", sig);
    cpri_telemetry_watch_server(telemetry, NULL); /* a scrape no longer reads the server */
    cpri_server_stop(server);
    cpri_telemetry_stop(telemetry);
    cpri_reaper_stop(reaper);
    cpr_store_close(store);
    cpri_auth_destroy(auth);
    if (socket_lock >= 0) /* U1: after the server stopped serving the socket */
        close(socket_lock);
    cpri_log(CPR_LOG_INFO, "stopped cleanly");
    return 0;
}
