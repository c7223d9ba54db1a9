/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for tests that drive a real ckptd (see ckptd_harness.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/crc32c.h"
#include "testutil.h"

const cpr_table_schema ch_table = {.table = 1, .rows = 100000, .dim = 8, .state_dim = 1};

void ch_start(ch_daemon *d, const char *dir)
{
    ch_start_args(d, dir, NULL);
}

void ch_start_args(ch_daemon *d, const char *dir, const char *const *extra)
{
    if (cpri_ckptd_spawn(CKPTD_PATH, dir, NULL, extra, d) != CPR_OK)
        fail_msg("%s", cpr_errmsg());
}

void ch_stop(ch_daemon *d)
{
    if (cpri_ckptd_stop(d) != CPR_OK)
        fail_msg("%s", cpr_errmsg());
}

char *ch_daemon_up(ch_daemon *d, char *target, size_t cap)
{
    char *dir = tu_mkdtemp("cpr-ckptd");
    ch_start(d, dir);
    snprintf(target, cap, "grpc://%s", d->addr);
    return dir;
}

void ch_daemon_down(ch_daemon *d, char *dir)
{
    ch_stop(d);
    tu_rmtree(dir);
    free(dir);
}

void ch_each_transport(void (*fn)(const char *target, void *ctx), void *ctx)
{
    char *dir = tu_mkdtemp("cpr-local");
    char target[512];
    snprintf(target, sizeof target, "local://%s/store", dir);
    fn(target, ctx);
    tu_rmtree(dir);
    free(dir);
    ch_daemon d;
    dir = ch_daemon_up(&d, target, sizeof target);
    fn(target, ctx);
    ch_daemon_down(&d, dir);
}

void ch_kill(ch_daemon *d)
{
    int status = 0;
    assert_int_equal(kill(d->pid, SIGKILL), 0);
    assert_int_equal(waitpid(d->pid, &status, 0), d->pid);
}

cpr_status ch_unary(cpri_rpc *rpc, const char *method, uint8_t *req, size_t len)
{
    uint8_t *resp = NULL;
    size_t n = 0;
    cpr_status st = cpri_rpc_unary(rpc, method, req, len, CH_TIMEOUT_S, &resp, &n);
    free(req);
    free(resp);
    return st;
}

cpr_status ch_begin(cpri_rpc *rpc, const char *job, uint64_t ckpt)
{
    return ch_begin_part(rpc, job, 0, 1, ckpt, CPR_KIND_FULL);
}

/* The leases of the parts the harness began, newest last (a ring). */
static struct {
    char job[CPR_NAME_MAX + 1];
    uint32_t shard;
    uint64_t ckpt, lease;
} leases[256];
static unsigned n_leases;
static pthread_mutex_t leases_mu = PTHREAD_MUTEX_INITIALIZER;

uint64_t ch_lease_of(const cpr_part_id *id)
{
    uint64_t lease = 0;
    pthread_mutex_lock(&leases_mu);
    for (unsigned i = 0; i < 256 && i < n_leases; i++) {
        unsigned k = (n_leases - 1 - i) % 256; /* newest first */
        if (leases[k].shard == id->shard && leases[k].ckpt == id->checkpoint &&
            strcmp(leases[k].job, id->job) == 0) {
            lease = leases[k].lease;
            break;
        }
    }
    pthread_mutex_unlock(&leases_mu);
    return lease;
}

cpr_status ch_begin_leased(cpri_rpc *rpc, const char *job, uint32_t shard, uint32_t num_shards,
                           uint64_t ckpt, cpr_kind kind, uint64_t *lease)
{
    return ch_begin_token(rpc, job, shard, num_shards, ckpt, kind, 0, lease);
}

cpr_status ch_begin_token(cpri_rpc *rpc, const char *job, uint32_t shard, uint32_t num_shards,
                          uint64_t ckpt, cpr_kind kind, uint64_t token, uint64_t *lease)
{
    cpr_part_spec spec = {.id = {job, shard, ckpt}, .kind = kind, .num_shards = num_shards,
                          .tables = &ch_table, .n_tables = 1};
    uint8_t *buf, *resp = NULL;
    size_t len, n = 0;
    assert_int_equal(cpri_wire_begin_encode_direct(&spec, NULL, token, &buf, &len), CPR_OK);
    cpr_status st = cpri_rpc_unary(rpc, CH_SVC "Begin", buf, len, CH_TIMEOUT_S, &resp, &n);
    free(buf);
    *lease = 0;
    if (st == CPR_OK) {
        assert_int_equal(cpri_wire_begin_response_decode(resp, n, lease), CPR_OK);
        assert_true(*lease != 0);
        pthread_mutex_lock(&leases_mu);
        unsigned k = n_leases++ % 256;
        snprintf(leases[k].job, sizeof leases[k].job, "%s", job);
        leases[k].shard = shard;
        leases[k].ckpt = ckpt;
        leases[k].lease = *lease;
        pthread_mutex_unlock(&leases_mu);
    }
    free(resp);
    return st;
}

cpr_status ch_begin_part(cpri_rpc *rpc, const char *job, uint32_t shard, uint32_t num_shards,
                         uint64_t ckpt, cpr_kind kind)
{
    uint64_t lease;
    return ch_begin_leased(rpc, job, shard, num_shards, ckpt, kind, &lease);
}

cpr_status ch_put_rows(cpri_rpc *rpc, const cpr_part_id *id, uint64_t first, size_t n,
                       int corrupt_last, void (*after_batch)(void *ctx, size_t sent), void *ctx)
{
    cpri_rpc_stream *s;
    cpr_status st = cpri_rpc_stream_open(rpc, CH_SVC "PutRows", CH_TIMEOUT_S, &s);
    if (st)
        return st;
    size_t sent = 0;
    for (size_t off = 0; st == CPR_OK && off < n; off += 100) {
        uint64_t ids[100];
        float values[800], state[100];
        cpr_row_batch b;
        size_t k = n - off < 100 ? n - off : 100;
        for (size_t i = 0; i < k; i++)
            ids[i] = first + off + i;
        tu_fill_batch(&b, ch_table.table, ids, k, ch_table.dim, ch_table.state_dim,
                      id->checkpoint, values, state);
        if (corrupt_last && off + k >= n)
            b.crc32c ^= 1;
        uint8_t *buf;
        size_t len;
        assert_int_equal(cpri_wire_rows_encode(id, ch_lease_of(id), &b, 0, 0, &buf, &len),
                         CPR_OK);
        st = cpri_rpc_stream_send(s, buf, len);
        free(buf);
        if (st == CPR_OK && after_batch)
            after_batch(ctx, ++sent);
    }
    cpr_status end = cpri_rpc_stream_finish(s, NULL, NULL);
    return end != CPR_OK ? end : st;
}

cpr_status ch_send_rows(cpri_rpc_stream *s, const cpr_part_id *id, uint64_t lease,
                        uint64_t first, size_t n)
{
    uint64_t ids[100];
    float values[800], state[100];
    cpr_row_batch b;
    uint8_t *buf;
    size_t len;
    assert_true(n <= 100);
    for (size_t i = 0; i < n; i++)
        ids[i] = first + i;
    tu_fill_batch(&b, ch_table.table, ids, n, ch_table.dim, ch_table.state_dim,
                  id->checkpoint, values, state);
    assert_int_equal(cpri_wire_rows_encode(id, lease, &b, 0, 0, &buf, &len), CPR_OK);
    cpr_status st = cpri_rpc_stream_send(s, buf, len);
    free(buf);
    return st;
}

cpr_status ch_put_blob(cpri_rpc *rpc, const cpr_part_id *id, uint64_t lease, const void *data,
                       size_t len)
{
    uint8_t *buf;
    size_t n;
    cpri_rpc_stream *s;
    cpr_status st = cpri_rpc_stream_open(rpc, CH_SVC "PutBlob", CH_TIMEOUT_S, &s);
    if (st)
        return st;
    assert_int_equal(cpri_wire_chunk_encode(id, lease, "dense", 0, len, data, len,
                                            cpr_crc32c(0, data, len), &buf, &n), CPR_OK);
    st = cpri_rpc_stream_send(s, buf, n);
    free(buf);
    cpr_status end = cpri_rpc_stream_finish(s, NULL, NULL);
    return end != CPR_OK ? end : st;
}

cpr_status ch_commit(cpri_rpc *rpc, const cpr_part_id *id, uint64_t rows)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(cpri_wire_commit_encode(id, ch_lease_of(id), rows, &buf, &len), CPR_OK);
    return ch_unary(rpc, CH_SVC "Commit", buf, len);
}

typedef struct restored {
    uint64_t rows, valued_at;
    int bad;
} restored;

static cpr_status check_rows(void *ctx, const uint8_t *msg, size_t len)
{
    restored *r = ctx;
    cpri_wire_rows w;
    if (cpri_wire_rows_decode(msg, len, &w) != CPR_OK) {
        r->bad = 1;
        return CPR_OK;
    }
    if (cpr_crc32c_rows(w.batch.ids, w.batch.n, w.batch.values, w.batch.values_count,
                        w.batch.state, w.batch.state_count) != w.batch.crc32c)
        r->bad = 1;
    for (size_t i = 0; i < w.batch.n; i++, r->rows++) {
        uint64_t id = w.batch.ids[i];
        for (uint32_t j = 0; j < ch_table.dim; j++)
            r->bad |= w.batch.values[i * ch_table.dim + j] != tu_value(1, id, r->valued_at, j);
        r->bad |= w.batch.state[i] != tu_state(1, id, r->valued_at, 0);
    }
    cpri_wire_rows_release(&w);
    return CPR_OK;
}

cpr_status ch_restore(cpri_rpc *rpc, const char *job, uint64_t as_of, uint64_t valued_at,
                      uint64_t *rows, int *bad)
{
    cpr_restore_query q = {.job = job, .as_of = as_of, .batch_rows = 333};
    restored r = {.valued_at = valued_at};
    uint8_t *buf;
    size_t len;
    assert_int_equal(cpri_wire_restore_encode(&q, &buf, &len), CPR_OK);
    cpr_status st = cpri_rpc_server_stream(rpc, CH_SVC "Restore", buf, len, CH_TIMEOUT_S,
                                          check_rows, &r);
    free(buf);
    *rows = r.rows;
    *bad = r.bad;
    return st;
}

cpr_status ch_list(cpri_rpc *rpc, const char *job, size_t *n, uint64_t ckpt, int *has_ckpt,
                   size_t *open_parts)
{
    uint8_t *req, *resp;
    size_t len, resp_len, count;
    cpr_part_info *parts;
    uint64_t cut;
    assert_int_equal(cpri_wire_list_encode(job, &req, &len), CPR_OK);
    cpr_status st = cpri_rpc_unary(rpc, CH_SVC "List", req, len, CH_TIMEOUT_S, &resp, &resp_len);
    free(req);
    if (st)
        return st;
    assert_int_equal(cpri_wire_list_response_decode(resp, resp_len, &parts, &count, &cut), CPR_OK);
    free(resp);
    *n = 0;
    *has_ckpt = 0;
    *open_parts = 0;
    for (size_t i = 0; i < count; i++) {
        *n += parts[i].committed != 0;
        *open_parts += !parts[i].committed;
        *has_ckpt |= parts[i].committed && parts[i].checkpoint == ckpt;
    }
    free(parts);
    return CPR_OK;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int ch_poll(int (*cond)(void *ctx), void *ctx, double seconds)
{
    double deadline = now_s() + seconds;
    for (;;) {
        if (cond(ctx))
            return 1;
        if (now_s() > deadline)
            return 0;
        struct timespec pause = {0, 20000000L}; /* poll interval, not a synchronisation */
        nanosleep(&pause, NULL);
    }
}

typedef struct open_parts_query {
    cpri_rpc *rpc;
    const char *job;
} open_parts_query;

static int no_open_parts(void *ctx)
{
    open_parts_query *q = ctx;
    size_t n = 0, open_parts = 0;
    int has = 0;
    cpr_status st = ch_list(q->rpc, q->job, &n, 1, &has, &open_parts);
    return (st == CPR_OK && open_parts == 0) || st == CPR_NOT_FOUND;
}

int ch_wait_no_open_parts(cpri_rpc *rpc, const char *job, double seconds)
{
    open_parts_query q = {rpc, job};
    return ch_poll(no_open_parts, &q, seconds);
}

/* HOST:PORT (IPv4) as a socket address. */
static struct sockaddr_in inet_addr_of(const char *addr)
{
    char host[64];
    const char *colon = strrchr(addr, ':');
    assert_non_null(colon);
    snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
    int port = (int)strtol(colon + 1, NULL, 10);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    assert_int_equal(inet_pton(AF_INET, host, &sa.sin_addr), 1);
    return sa;
}

int ch_hold_addr(const char *addr)
{
    struct sockaddr_in sa = inet_addr_of(addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1;
    assert_true(fd >= 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on), 0);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        fail_msg("cannot hold %s, the address of a daemon just stopped: %s (another "
                 "process took its port)", addr, strerror(errno));
    return fd;
}

int ch_stop_held(ch_daemon *d)
{
    ch_stop(d);
    return ch_hold_addr(d->addr);
}

int ch_kill_held(ch_daemon *d)
{
    ch_kill(d);
    return ch_hold_addr(d->addr);
}

cpr_status ch_http_get(const char *addr, const char *path, int *code, char **body)
{
    struct sockaddr_in sa = inet_addr_of(addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return cpr_fail(CPR_UNAVAILABLE, "cannot connect to %s", addr);
    }
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr);
    assert_int_equal(send(fd, req, (size_t)n, 0), n);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    for (ssize_t got; (got = recv(fd, buf + len, cap - len, 0)) > 0;) {
        len += (size_t)got;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            assert_non_null(buf);
        }
    }
    close(fd);
    buf[len] = '\0';
    assert_int_equal(sscanf(buf, "HTTP/1.%*d %d", code), 1);
    const char *start = strstr(buf, "\r\n\r\n");
    assert_non_null(start);
    *body = strdup(start + 4);
    free(buf);
    return CPR_OK;
}

double ch_metric(const char *exposition, const char *series)
{
    size_t n = strlen(series);
    for (const char *line = exposition; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, series, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
    return -1;
}

double ch_metric_now(const ch_daemon *d, const char *series)
{
    int code = 0;
    char *body = NULL;
    assert_status(CPR_OK, ch_http_get(d->metrics_addr, "/metrics", &code, &body));
    assert_int_equal(code, 200);
    double v = ch_metric(body, series);
    free(body);
    return v;
}

void ch_write_private(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0600), 0);
}

typedef struct blob_back {
    uint8_t *data;
    size_t len, cap;
    int bad;
} blob_back;

static cpr_status collect_blob(void *ctx, const uint8_t *msg, size_t len)
{
    blob_back *b = ctx;
    cpri_wire_chunk c;
    cpr_status st = cpri_wire_chunk_decode(msg, len, &c);
    if (st)
        return st;
    b->bad |= c.offset != b->len || cpr_crc32c(0, c.data, c.len) != c.crc32c;
    if (b->len + c.len > b->cap) {
        size_t cap = 2 * (b->len + c.len);
        uint8_t *g = realloc(b->data, cap);
        assert_non_null(g);
        b->data = g;
        b->cap = cap;
    }
    memcpy(b->data + b->len, c.data, c.len);
    b->len += c.len;
    cpri_wire_chunk_release(&c);
    return CPR_OK;
}

cpr_status ch_get_blob(cpri_rpc *rpc, const cpr_part_id *id, uint8_t **data, size_t *len)
{
    blob_back b = {0};
    uint8_t *buf;
    size_t n;
    assert_int_equal(cpri_wire_getblob_encode(id, "dense", &buf, &n), CPR_OK);
    cpr_status st = cpri_rpc_server_stream(rpc, CH_SVC "GetBlob", buf, n, CH_TIMEOUT_S,
                                          collect_blob, &b);
    free(buf);
    if (st == CPR_OK && b.bad)
        st = cpr_fail(CPR_CORRUPT, "GetBlob: a chunk out of order or failing its checksum");
    if (st) {
        free(b.data);
        return st;
    }
    *data = b.data;
    *len = b.len;
    return CPR_OK;
}

/* ---- a restore held unread -------------------------------------------------------- */

static cpr_status held_msg(void *ctx, const uint8_t *msg, size_t len)
{
    (void)msg;
    (void)len;
    ch_held_restore *h = ctx;
    pthread_mutex_lock(&h->mu);
    h->messages++;
    h->started = 1;
    pthread_cond_broadcast(&h->cv);
    while (!h->release)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    return CPR_OK;
}

static void *held_main(void *arg)
{
    ch_held_restore *h = arg;
    cpr_restore_query q = {.job = h->job, .batch_rows = 1000};
    uint8_t *buf;
    size_t len;
    h->st = cpri_wire_restore_encode(&q, &buf, &len);
    if (h->st == CPR_OK) {
        h->st = cpri_rpc_server_stream(h->rpc, CH_SVC "Restore", buf, len, 60.0, held_msg, h);
        free(buf);
    }
    pthread_mutex_lock(&h->mu);
    h->started = 1; /* also when it failed before any message */
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

void ch_hold_restore(ch_held_restore *h, cpri_rpc *rpc, const char *job)
{
    memset(h, 0, sizeof *h);
    h->rpc = rpc;
    h->job = job;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    assert_int_equal(0, pthread_create(&h->thread, NULL, held_main, h));
    pthread_mutex_lock(&h->mu);
    while (!h->started)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

void ch_release_restore(ch_held_restore *h)
{
    pthread_mutex_lock(&h->mu);
    h->release = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
}
