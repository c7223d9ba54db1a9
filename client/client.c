/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client library's front: targets, placement of shards on nodes
 * (rendezvous hashing), retries, and the calls that read or operate on a job
 * across every node and merge the answers. Writing parts is part.c; talking
 * to one node is node.c.
 *
 * Why the client computes cuts: a daemon sees only the shards placed on it,
 * so with several nodes no daemon can tell whether checkpoint C is complete
 * over all shards. The client merges every node's part list and applies the
 * store's definition (cpr/store.h) to the union; consistent restores and GC
 * floors then name that cut explicitly to each node.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "channel.h" /* rpc/: the channels' credentials */
#include "client_internal.h"
#include "cpr_cli.h"
#include "cpr_common.h"
#include "cpr/rng.h"

#define LOCAL_PREFIX "local://"
#define GRPC_PREFIX "grpc://"
#define GRPCS_PREFIX "grpcs://"
#define UNIX_PREFIX "unix:"
#define MAX_NODES 256
#define MAX_MESSAGE_BYTES ((size_t)16 << 20)
#define MAX_TIMEOUT_S (30.0 * 24 * 3600)
#define MAX_BACKOFF_S 30.0 /* one pause between attempts at most */

/* ---- options, open, close ------------------------------------------------------- */

static void fill_defaults(cpr_client_options *o)
{
    if (!o->staging_bytes)
        o->staging_bytes = (size_t)256 << 20;
    if (o->staging_bytes < ((size_t)2 << 20))
        o->staging_bytes = (size_t)2 << 20;
    if (!o->message_bytes)
        o->message_bytes = (size_t)1 << 20;
    if (o->message_bytes > MAX_MESSAGE_BYTES) /* ckptd's default message limit is 64 MiB */
        o->message_bytes = MAX_MESSAGE_BYTES;
    if (o->message_bytes > o->staging_bytes / 2)
        o->message_bytes = o->staging_bytes / 2; /* two messages always fit */
    if (!(o->call_timeout_s > 0))
        o->call_timeout_s = 30.0;
    if (!(o->stream_timeout_s > 0))
        o->stream_timeout_s = 3600.0;
    if (o->call_timeout_s > MAX_TIMEOUT_S) /* also catches infinity */
        o->call_timeout_s = MAX_TIMEOUT_S;
    if (o->stream_timeout_s > MAX_TIMEOUT_S)
        o->stream_timeout_s = MAX_TIMEOUT_S;
    if (!o->retries)
        o->retries = 3;
    if (o->no_retries)
        o->retries = 0;
    if (!(o->backoff_s > 0))
        o->backoff_s = 0.1;
    if (o->backoff_s > MAX_BACKOFF_S) /* also catches infinity */
        o->backoff_s = MAX_BACKOFF_S;
}

static cpr_status add_node(cpr_client *c, cpri_node *n)
{
    cpri_node **grown = realloc(c->nodes, (c->n_nodes + 1) * sizeof *grown);
    if (!grown) {
        cpri_node_close(n);
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening a client");
    }
    c->nodes = grown;
    c->nodes[c->n_nodes++] = n;
    return CPR_OK;
}

/* The credentials of a client's channels (cpr_client_options, else the
 * environment), PEM files read into memory. */
typedef struct creds {
    cpri_rpc_options o;
    char *pem[3]; /* ca, cert, key */
} creds;

static const char *opt_or_env(const char *v, const char *env)
{
    const char *e = v ? v : getenv(env);
    return e && *e ? e : NULL;
}

static cpr_status load_creds(const cpr_client_options *opts, int tls, creds *cr)
{
    memset(cr, 0, sizeof *cr);
    cr->o.tls = tls;
    cr->o.token = opt_or_env(opts->token, "CPR_TOKEN");
    if (!tls)
        return CPR_OK;
    const char *what[3] = {"tls_ca_file ($CPR_TLS_CA)", "tls_cert_file ($CPR_TLS_CERT)",
                           "tls_key_file ($CPR_TLS_KEY)"};
    const char *path[3] = {opt_or_env(opts->tls_ca_file, "CPR_TLS_CA"),
                           opt_or_env(opts->tls_cert_file, "CPR_TLS_CERT"),
                           opt_or_env(opts->tls_key_file, "CPR_TLS_KEY")};
    for (int i = 0; i < 3; i++) {
        cpr_status st = path[i] ? cpri_cli_read_pem(what[i], path[i], &cr->pem[i]) : CPR_OK;
        if (st)
            return st;
    }
    cr->o.tls_ca_pem = cr->pem[0];
    cr->o.tls_cert_pem = cr->pem[1];
    cr->o.tls_key_pem = cr->pem[2];
    return CPR_OK;
}

static void free_creds(creds *cr)
{
    for (int i = 0; i < 3; i++)
        free(cr->pem[i]);
}

/* "host:port,host:port": each non-empty, with a port, no duplicates. */
static cpr_status open_grpc_nodes(cpr_client *c, const char *list,
                                  const cpri_rpc_options *cred)
{
    cpr_status st = CPR_OK;
    const char *p = list;
    while (st == CPR_OK) {
        size_t len = strcspn(p, ",");
        char host_port[256];
        const char *colon = memrchr(p, ':', len);
        if (len == 0 || len >= sizeof host_port || !colon || colon == p || colon + 1 == p + len)
            return cpr_fail(CPR_INVALID_ARGUMENT, "target grpc://%s: node '%.*s' is not "
                            "host:port (list nodes as grpc://host:port[,host:port...])", list,
                            (int)len, p);
        memcpy(host_port, p, len);
        host_port[len] = '\0';
        const char *port = host_port + (colon - p) + 1;
        char *end = NULL;
        errno = 0;
        unsigned long pn = strtoul(port, &end, 10);
        if (!(port[0] >= '0' && port[0] <= '9') || *end || errno || pn < 1 || pn > 65535)
            return cpr_fail(CPR_INVALID_ARGUMENT, "target grpc://%s: node '%s' has port '%s'; "
                            "a port is a number from 1 to 65535", list, host_port, port);
        for (size_t i = 0; i < c->n_nodes; i++)
            if (strcmp(cpri_node_name(c->nodes[i]), host_port) == 0)
                return cpr_fail(CPR_INVALID_ARGUMENT, "target grpc://%s names node %s twice",
                                list, host_port);
        if (c->n_nodes == MAX_NODES)
            return cpr_fail(CPR_INVALID_ARGUMENT, "target grpc://%s: more than %d nodes", list,
                            MAX_NODES);
        cpri_node *n;
        st = cpri_node_open_grpc(host_port, cred, &n);
        if (st == CPR_OK)
            st = add_node(c, n);
        if (!p[len])
            break;
        p += len + 1;
    }
    return st;
}

/* "1", "2-7,12": CPUs below CPRI_MAX_CPUS and this machine's count. */
static cpr_status parse_cpus(const char *list, uint64_t *set)
{
    long n_cpus = sysconf(_SC_NPROCESSORS_CONF);
    const char *p = list;
    n_cpus = n_cpus > 0 && n_cpus < CPRI_MAX_CPUS ? n_cpus : CPRI_MAX_CPUS;
    while (*p) {
        char *end;
        errno = 0;
        long lo = strtol(p, &end, 10), hi = lo;
        int ok = end != p && errno == 0 && *p >= '0' && *p <= '9';
        if (ok && *end == '-') {
            p = end + 1;
            hi = strtol(p, &end, 10);
            ok = end != p && errno == 0 && *p >= '0' && *p <= '9' && hi >= lo;
        }
        if (!ok || (*end && *end != ',') || (*end == ',' && !end[1]) || hi >= n_cpus)
            return cpr_fail(CPR_INVALID_ARGUMENT, "thread_cpus '%.100s': give CPUs of this "
                            "machine (0-%ld) as a list such as 1 or 2-7,12", list, n_cpus - 1);
        for (long cpu = lo; cpu <= hi; cpu++)
            set[cpu / 64] |= 1ull << (cpu % 64);
        p = *end ? end + 1 : end;
    }
    return CPR_OK;
}

void cpri_client_pin_thread(const cpr_client *c)
{
    cpu_set_t set;
    int any = 0;
    CPU_ZERO(&set);
    for (int cpu = 0; cpu < CPRI_MAX_CPUS && cpu < CPU_SETSIZE; cpu++)
        if (c->thread_cpus[cpu / 64] >> (cpu % 64) & 1) {
            CPU_SET(cpu, &set);
            any = 1;
        }
    if (any) /* best effort: a refused set leaves the thread where it was */
        (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* The nodes of `target` (see cpr/client.h). */
static cpr_status open_target(cpr_client *c, const char *target, const cpr_client_options *opts)
{
    cpr_status st;
    int tls = strncmp(target, GRPCS_PREFIX, strlen(GRPCS_PREFIX)) == 0;
    creds cr;
    st = load_creds(opts, tls, &cr);
    if (st) {
        free_creds(&cr);
        return st;
    }
    if (tls) {
        st = open_grpc_nodes(c, target + strlen(GRPCS_PREFIX), &cr.o);
    } else if (strncmp(target, LOCAL_PREFIX, strlen(LOCAL_PREFIX)) == 0 &&
        target[strlen(LOCAL_PREFIX)] == '/') {
        cpri_node *n;
        c->local = 1;
        st = cpri_node_open_local(target + strlen(LOCAL_PREFIX), &c->opts.store, &n);
        if (st == CPR_OK)
            st = add_node(c, n);
    } else if (strncmp(target, GRPC_PREFIX, strlen(GRPC_PREFIX)) == 0) {
        st = open_grpc_nodes(c, target + strlen(GRPC_PREFIX), &cr.o);
    } else if (!strstr(target, "://") && strncmp(target, UNIX_PREFIX, strlen(UNIX_PREFIX)) &&
               strchr(target, ':')) {
        st = open_grpc_nodes(c, target, &cr.o); /* host:port[,...]: grpc:// is the default */
    } else if (strncmp(target, UNIX_PREFIX, strlen(UNIX_PREFIX)) == 0 &&
               target[strlen(UNIX_PREFIX)] == '/' && !strchr(target, ',')) {
        cpri_node *n; /* gRPC reads "unix:/path" itself */
        st = cpri_node_open_grpc(target, &cr.o, &n);
        if (st == CPR_OK)
            st = add_node(c, n);
    } else {
        st = cpr_fail(CPR_INVALID_ARGUMENT, "target '%.200s' is none of "
                      "[grpc://]host:port[,host:port...], grpcs://host:port[,...] (TLS), "
                      "unix:/absolute/socket/path and local:///absolute/path", target);
    }
    free_creds(&cr);
    return st;
}

cpr_status cpr_client_open(const char *target, const cpr_client_options *opts,
                           cpr_client **out)
{
    if (!target || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_open: target and out must not be NULL");
    cpr_client *c = calloc(1, sizeof *c);
    if (!c)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening a client");
    if (opts)
        c->opts = *opts;
    fill_defaults(&c->opts);
    c->pool_max = c->opts.staging_bytes / c->opts.message_bytes; /* the arena (part.c) */
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->room, NULL);
    cpr_status st = c->opts.thread_cpus ? parse_cpus(c->opts.thread_cpus, c->thread_cpus)
                                        : CPR_OK;
    c->opts.thread_cpus = NULL; /* borrowed for the call only */
    if (st == CPR_OK)
        st = open_target(c, target, &c->opts);
    int pool = c->opts.store.rados_pool && *c->opts.store.rados_pool;
    int dir = c->opts.store.local_dir && *c->opts.store.local_dir;
    if (st == CPR_OK && !c->local && c->opts.direct_writes && !pool)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_open: direct_writes needs the pool "
                      "of the daemons' store (store.rados_pool, and rados_conf, "
                      "rados_namespace, rados_user as their --rados-* options)");
    else if (st == CPR_OK && !c->local && (pool || dir))
        st = cpri_direct_open(&c->opts.store, &c->direct);
    if (!c->local) /* borrowed for the call only: the reader holds what it needs */
        c->opts.store.rados_pool = c->opts.store.rados_conf = c->opts.store.rados_namespace =
            c->opts.store.rados_user = c->opts.store.local_dir = NULL;
    /* Borrowed for the call only (read by open_target). */
    c->opts.token = c->opts.tls_ca_file = c->opts.tls_cert_file = c->opts.tls_key_file = NULL;
    if (st) {
        cpr_client_close(c);
        return st;
    }
    *out = c;
    return CPR_OK;
}

void cpr_client_close(cpr_client *c)
{
    if (!c)
        return;
    cpri_parts_abort_all(c);
    cpri_senders_stop(c);
    cpri_parts_pool_release(c);
    for (size_t i = 0; i < c->n_nodes; i++)
        cpri_node_close(c->nodes[i]);
    free(c->nodes);
    cpri_direct_close(c->direct);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->room);
    free(c);
}

/* ---- placement ------------------------------------------------------------------------ */

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

size_t cpr_client_nodes(const cpr_client *c)
{
    return c ? c->n_nodes : 0;
}

/* Rendezvous (highest random weight): the node whose name scores highest
 * for (job, shard). Depends only on the names, not on their order. */
size_t cpr_client_node_of(const cpr_client *c, const char *job, uint32_t shard)
{
    if (!c || !job)
        return 0;
    uint8_t le[4] = {(uint8_t)shard, (uint8_t)(shard >> 8), (uint8_t)(shard >> 16),
                     (uint8_t)(shard >> 24)};
    uint64_t key = fnv1a(fnv1a(0xcbf29ce484222325ull, job, strlen(job) + 1), le, 4);
    size_t best = 0;
    uint64_t best_score = 0;
    for (size_t i = 0; i < c->n_nodes; i++) {
        const char *name = cpri_node_name(c->nodes[i]);
        uint64_t score = cpr_mix64(key ^ fnv1a(0xcbf29ce484222325ull, name, strlen(name)));
        if (i == 0 || score > best_score) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

/* ---- retries --------------------------------------------------------------------------- */

static void pause_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int cpri_client_backoff(const cpr_client *c, unsigned attempt)
{
    if (attempt >= c->opts.retries)
        return 0;
    double backoff = c->opts.backoff_s * (double)(1u << (attempt < 16 ? attempt : 16));
    if (backoff > MAX_BACKOFF_S) /* many retries: the pauses stop doubling */
        backoff = MAX_BACKOFF_S;
    cpri_log(CPR_LOG_INFO, "retrying in %.2f s after: %s", backoff, cpr_errmsg());
    pause_s(backoff);
    return 1;
}

cpr_status cpri_client_retry(const cpr_client *c, cpri_attempt_fn call, void *ctx)
{
    cpr_status st = call(ctx);
    for (unsigned i = 0; st == CPR_UNAVAILABLE && cpri_client_backoff(c, i); i++)
        st = call(ctx);
    return st;
}

/* ---- list and cuts ------------------------------------------------------------------------ */

typedef struct list_try {
    cpr_client *c;
    cpri_node *node;
    const char *job;
    cpr_part_info *parts;
    size_t n;
} list_try;

static cpr_status list_once(void *ctx)
{
    list_try *t = ctx;
    return cpri_node_list(t->node, t->job, t->c->opts.call_timeout_s, &t->parts, &t->n);
}

static int by_checkpoint_shard(const void *a, const void *b)
{
    const cpr_part_info *x = a, *y = b;
    if (x->checkpoint != y->checkpoint)
        return x->checkpoint < y->checkpoint ? -1 : 1;
    return x->shard < y->shard ? -1 : x->shard > y->shard;
}

/* A part on a node other than the one its shard is placed on: the node set
 * changed since it was written. Every reader that merges nodes refuses it,
 * since the same shard's versions would be split over two stores. */
static cpr_status misplaced(cpr_client *c, const char *job, uint32_t shard, size_t on)
{
    size_t home = cpr_client_node_of(c, job, shard);
    return cpr_fail(CPR_FAILED_PRECONDITION, "job %s shard %u has parts on %s but this "
                    "target places the shard on %s: the set of nodes changed since it was "
                    "written; use the target it was written with (moving shards between "
                    "nodes is not supported)", job, shard, cpri_node_name(c->nodes[on]),
                    cpri_node_name(c->nodes[home]));
}

int cpri_client_same_store(cpr_client *c, size_t i, size_t j)
{
    char a[320], b[320];
    cpri_node_store_id(c->nodes[i], a, sizeof a);
    cpri_node_store_id(c->nodes[j], b, sizeof b);
    return a[0] && strcmp(a, b) == 0;
}

cpr_status cpri_client_list_checked(cpr_client *c, const char *job, int check_placement,
                                   cpr_part_info **out, size_t *n)
{
    cpr_part_info *all = NULL;
    size_t total = 0, found = 0;
    cpr_status st = CPR_OK;
    uint8_t *listed = calloc(c->n_nodes + 1, 1);
    if (!listed)
        return cpr_fail(CPR_NO_MEMORY, "out of memory listing job %s", job);
    for (size_t i = 0; i < c->n_nodes && st == CPR_OK; i++) {
        list_try t = {c, c->nodes[i], job, NULL, 0};
        st = cpri_client_retry(c, list_once, &t);
        if (st == CPR_NOT_FOUND) {
            st = CPR_OK; /* no part of the job on this node */
            continue;
        }
        if (st)
            break;
        found++;
        listed[i] = 1;
        /* Gateways of one store (ckptd on one RADOS namespace) each list all
         * of it: the first one's list is the store's; placement only spread
         * the writes. */
        char sid[320];
        cpri_node_store_id(c->nodes[i], sid, sizeof sid);
        int again = 0;
        for (size_t j = 0; j < i && !again; j++)
            again = listed[j] && cpri_client_same_store(c, i, j);
        if (again) {
            free(t.parts);
            continue;
        }
        for (size_t j = 0; check_placement && !sid[0] && c->n_nodes > 1 && j < t.n; j++)
            if (cpr_client_node_of(c, job, t.parts[j].shard) != i) {
                st = misplaced(c, job, t.parts[j].shard, i);
                break;
            }
        if (st) {
            free(t.parts);
            break;
        }
        cpr_part_info *grown = realloc(all, (total + t.n + 1) * sizeof *grown);
        if (!grown) {
            free(t.parts);
            st = cpr_fail(CPR_NO_MEMORY, "out of memory listing job %s", job);
            break;
        }
        all = grown;
        if (t.n)
            memcpy(all + total, t.parts, t.n * sizeof *t.parts);
        total += t.n;
        free(t.parts);
    }
    free(listed);
    if (st == CPR_OK && !found)
        st = cpr_fail(CPR_NOT_FOUND, "job %s has no parts on %s%s", job,
                      c->n_nodes > 1 ? "any of the nodes, e.g. " : "",
                      cpri_node_name(c->nodes[0]));
    if (st) {
        free(all);
        return st;
    }
    qsort(all, total, sizeof *all, by_checkpoint_shard);
    *out = all;
    *n = total;
    return CPR_OK;
}

cpr_status cpr_client_list(cpr_client *c, const char *job, cpr_part_info **out, size_t *n)
{
    if (!c || !job || !out || !n)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_list: arguments must not be NULL");
    return cpri_client_list_checked(c, job, 0, out, n);
}

/* Appends a line to a growing text. */
static int add_line(char **text, size_t *len, const char *node, const char *where)
{
    size_t add = strlen(node) + strlen(where) + 3;
    char *grown = realloc(*text, *len + add + 1);
    if (!grown)
        return -1;
    *text = grown;
    *len += (size_t)snprintf(grown + *len, add + 1, "%s: %s\n", node, where);
    return 0;
}

cpr_status cpr_client_where(cpr_client *c, const cpr_part_id *id, char **out)
{
    if (!c || !id || !id->job || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_where: arguments must not be NULL");
    char *text = NULL;
    size_t len = 0;
    cpr_status st = CPR_OK;
    for (size_t i = 0; i < c->n_nodes && st == CPR_OK; i++) {
        cpr_part_info *parts = NULL;
        char **where = NULL;
        size_t n = 0;
        st = cpri_node_list_where(c->nodes[i], id->job, c->opts.call_timeout_s, &parts, &n,
                                  &where);
        if (st == CPR_NOT_FOUND) {
            st = CPR_OK;
            continue;
        }
        for (size_t j = 0; st == CPR_OK && j < n; j++)
            if (parts[j].shard == id->shard && parts[j].checkpoint == id->checkpoint &&
                add_line(&text, &len, cpri_node_name(c->nodes[i]), where[j]) != 0)
                st = cpr_fail(CPR_NO_MEMORY, "out of memory");
        free(parts);
        cpr_names_free(where, n);
    }
    if (st == CPR_OK && !text)
        st = cpr_fail(CPR_NOT_FOUND, "no node lists job %s shard %u checkpoint %llu", id->job,
                      id->shard, (unsigned long long)id->checkpoint);
    if (st) {
        free(text);
        return st;
    }
    *out = text;
    return CPR_OK;
}

/* Cuts of a merged, sorted list, newest first (cpr/types.h's rule); *cuts malloc'd. */
static cpr_status cuts_of(const cpr_part_info *parts, size_t n, uint64_t **cuts, size_t *n_cuts)
{
    uint64_t *out = malloc((n + 1) * sizeof *out);
    if (!out)
        return cpr_fail(CPR_NO_MEMORY, "out of memory");
    *n_cuts = cpr_cuts(parts, n, 0, out, n + 1);
    *cuts = out;
    return CPR_OK;
}

cpr_status cpri_client_job_cuts(cpr_client *c, const char *job, uint64_t **cuts,
                               size_t *n_cuts)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    cpr_status st = cpri_client_list_checked(c, job, 1, &parts, &n);
    if (st == CPR_OK)
        st = cuts_of(parts, n, cuts, n_cuts);
    free(parts);
    return st;
}

cpr_status cpr_client_latest_cut(cpr_client *c, const char *job, uint64_t *cut)
{
    if (!c || !job || !cut)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_client_latest_cut: arguments must not be NULL");
    size_t n_cuts = 0;
    uint64_t *cuts = NULL;
    cpr_status st = cpri_client_job_cuts(c, job, &cuts, &n_cuts);
    if (st)
        return st;
    if (n_cuts == 0)
        st = cpr_fail(CPR_NOT_FOUND, "job %s has no consistent cut: no checkpoint id has a "
                      "committed FULL (or complete DELTA) part of every shard", job);
    if (st == CPR_OK)
        *cut = cuts[0];
    free(cuts);
    return st;
}
