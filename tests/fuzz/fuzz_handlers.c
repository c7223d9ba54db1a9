/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: sequences of calls of every method of ckptd's service
 * (ckptd/handlers.c, through cpri_service_methods), with and without valid
 * credentials, against a real store in a temporary directory. The input
 * format is fuzz_handlers.h's; the requests are raw bytes or valid
 * encodings built from fuzz-chosen fields (fuzz_handlers_build.c).
 *
 * The transport is the fuzzer's own (fuzz_handlers_rpc.c): it implements
 * the handler side of rpc/server.h (a call holding its request, the queue
 * of a client stream's messages, the metadata and the verified client
 * subject, and the status the handler finished with), so that the fuzzer
 * links handlers.c, leases.c, auth.c (cpr_ckptd_service), the store and the
 * wire codec, but not rpc/server.c nor gRPC. handlers.c's cpri_server_start
 * also needs cpri_rpc_server_start/stop: the transport has stubs that
 * refuse to start (CPR_UNAVAILABLE; init checks that cpri_server_start then
 * fails cleanly) rather than a second library or linker tricks (weak
 * symbols, --gc-sections): one link of the real service library, which
 * fails loudly if handlers.c ever calls a function of server.h that the
 * transport lacks. The transport misbehaves at fuzz-chosen points (sends
 * fail as for a client gone away or idle, streams break, the initial
 * metadata cannot be sent, calls are cancelled) as a real one does.
 *
 * Beyond "no crash, no leak, no undefined behaviour", every call is checked:
 *  C1. the handler finishes exactly once, with a valid cpr_status, a message
 *      when it is not CPR_OK, and uses only its method kind's functions;
 *  C2. the status is the one auth.h's rules give (fuzz_handlers_build.c
 *      models them): CPR_UNAUTHENTICATED for unknown credentials,
 *      CPR_PERMISSION_DENIED without the right on the request's job, and no
 *      message of a stream the rules refuse is ever accepted;
 *  C3. a refused call changes nothing (every job's parts and the recovery
 *      records compared before and after), nor does a read-only call or a
 *      failed Begin, Commit, Abort, PutRecovery or Gc (store.h: "a failed
 *      call leaves the store unchanged"); a stream that fails leaves none of
 *      the parts it wrote to open, and changes no other;
 *  C4. what is answered decodes: Begin's lease is not 0 (leases.h L3), each
 *      restored batch and blob chunk carries a checksum that matches, blob
 *      chunks are contiguous and sum to the size, ListJobs lists exactly
 *      the jobs the caller may read.
 *
 * State persists across inputs, as in a daemon, and is wiped every
 * CPR_FUZZ_RESET_EVERY inputs (default 128; 1 makes each input stand alone,
 * for reproducing a crash). The store lives in $TMPDIR, else /dev/shm.
 * CPR_FUZZ_LOG=info shows the service's log; CPR_FUZZ_STATS=1 prints what
 * each method answered how often, at the end of a replay.
 */
#define _GNU_SOURCE /* nftw's FTW_DEPTH and FTW_PHYS */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "cpr/store.h"
#include "cpr_common.h"
#include "fuzz_handlers_rpc.h"
#include "service.h"
#include "wire.h"

#define MAX_CALLS 64 /* calls of one input */

/* ---- the process: a store, the rules, the service ------------------------------------ */

static struct {
    char dir[256], store_dir[300], auth_path[300];
    cpr_store *store;
    cpri_auth *auth;
    cpri_server *srv;
    const cpri_rpc_method *methods;
    size_t n_methods;
    unsigned long inputs, reset_every;
    unsigned long answers[FH_UNKNOWN + 1][CPR_STATUS_COUNT_]; /* for CPR_FUZZ_STATS */
} fz;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void wipe(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void open_service(void)
{
    cpr_store_options opts = {.no_sync = 1, .no_fold = 1}; /* speed; no thread of its own */
    cpr_status st = cpr_store_open(fz.store_dir, &opts, &fz.store);
    FH_CHECK(st == CPR_OK, "cannot open the store in %s: %s", fz.store_dir, cpr_errmsg());
    st = cpri_service_create(fz.store, fz.auth, &fz.srv);
    FH_CHECK(st == CPR_OK, "cpri_service_create: %s", cpr_errmsg());
}

static void close_service(void)
{
    cpri_service_destroy(fz.srv);
    cpr_store_close(fz.store);
    fz.srv = NULL;
    fz.store = NULL;
}

static void write_auth_file(void)
{
    FILE *f = fopen(fz.auth_path, "w");
    FH_CHECK(f != NULL, "cannot write %s", fz.auth_path);
    fputs(fh_auth_file_text(), f);
    fclose(f);
    chmod(fz.auth_path, 0600);
}

static void init_once(void)
{
    if (fz.methods)
        return;
    const char *log = getenv("CPR_FUZZ_LOG"), *tmp = getenv("TMPDIR");
    cpri_log_threshold = log ? cpri_log_level_parse(log) : -1;
    const char *every = getenv("CPR_FUZZ_RESET_EVERY");
    fz.reset_every = every ? strtoul(every, NULL, 10) : 128;
    /* tmpfs unless told otherwise: a store's metadata work on a busy disk
     * would take most of the fuzzer's time */
    if (!tmp || !*tmp)
        tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fz.dir, sizeof fz.dir, "%s/cpr-fuzz-handlers-XXXXXX", tmp);
    FH_CHECK(mkdtemp(fz.dir) != NULL, "mkdtemp %s", fz.dir);
    snprintf(fz.store_dir, sizeof fz.store_dir, "%s/store", fz.dir);
    snprintf(fz.auth_path, sizeof fz.auth_path, "%s/auth", fz.dir);
    write_auth_file();
    cpr_status st = cpri_auth_load(fz.auth_path, &fz.auth);
    FH_CHECK(st == CPR_OK, "the fuzzer's auth file: %s", cpr_errmsg());
    open_service();
    /* The stubs below: starting a server fails, and frees what it made. */
    cpri_server *server = NULL;
    int port = 0;
    st = cpri_server_start(fz.store, fz.auth, NULL, &server, &port);
    FH_CHECK(st == CPR_UNAVAILABLE && server == NULL, "cpri_server_start without a transport");
    fz.methods = cpri_service_methods(&fz.n_methods);
}

/* Wipe the store now and then: bounded state, and the reload path of the
 * rules (auth.h A3) on an unchanged file. */
static void maybe_reset(void)
{
    if (fz.reset_every == 0 || ++fz.inputs % fz.reset_every != 0)
        return;
    close_service();
    wipe(fz.store_dir);
    size_t rules = 0;
    cpr_status st = cpri_auth_reload(fz.auth, &rules);
    FH_CHECK(st == CPR_OK && rules == 7, "reloading the fuzzer's rules: %s", cpr_errmsg());
    open_service();
}

/* CPR_FUZZ_STATS=1: what the calls answered, per method, at the end. */
static void print_answers(void)
{
    if (!getenv("CPR_FUZZ_STATS"))
        return;
    for (int m = 0; m <= FH_UNKNOWN; m++) {
        const char *path = fh_method_path((fh_method)m);
        fprintf(stderr, "%-34s", path ? path : "(unknown methods)");
        for (int st = 0; st < CPR_STATUS_COUNT_; st++)
            if (fz.answers[m][st])
                fprintf(stderr, " %s %lu", cpr_status_name((cpr_status)st) + 4,
                        fz.answers[m][st]);
        fprintf(stderr, "\n");
    }
}

void fh_shutdown(void)
{
    if (!fz.methods)
        return;
    print_answers();
    close_service();
    cpri_auth_destroy(fz.auth);
    wipe(fz.dir);
    fz.methods = NULL;
}

int fh_method_index(fh_method m)
{
    init_once();
    for (size_t i = 0; i < fz.n_methods; i++)
        if (fh_method_of(fz.methods[i].path) == m)
            return (int)i;
    return -1;
}

uint64_t fh_next_checkpoint(const char *job, uint32_t shard)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    uint64_t newest = 0;
    if (cpr_store_list(fz.store, job, &parts, &n) == CPR_OK)
        for (size_t i = 0; i < n; i++)
            if (parts[i].shard == shard && parts[i].checkpoint > newest)
                newest = parts[i].checkpoint;
    free(parts);
    return newest + 1;
}


/* ---- what a request asks, by the harness's own decoding (C2) --------------------------- */

typedef struct expect {
    int decoded;          /* the method's decoder takes the request */
    char *job;            /* the job it names (malloc'd); NULL: store-wide, or none */
    unsigned right;       /* what auth.h says it needs; 0: nothing (Health) */
    int identify_only;    /* ListJobs: any principal, the answer filtered */
    int lease_checked;    /* CPR_PERMISSION_DENIED may also be another writer's part */
    int has_id;           /* the part it names */
    uint32_t shard;
    uint64_t checkpoint;
} expect;

static void expect_job(expect *e, const char *job, unsigned right)
{
    e->decoded = 1;
    e->right = right;
    e->job = job ? strdup(job) : NULL;
    FH_CHECK(!job || e->job, "out of memory");
}

static void expect_part(expect *e, const cpr_part_id *id, unsigned right, int lease_checked)
{
    expect_job(e, id->job, right);
    e->has_id = 1;
    e->shard = id->shard;
    e->checkpoint = id->checkpoint;
    e->lease_checked = lease_checked;
}

/* Requests that name a part. */
static void expect_part_request(fh_method m, const uint8_t *msg, size_t len, expect *e)
{
    cpri_wire_begin b;
    cpri_wire_rows r;
    cpri_wire_chunk ch;
    cpri_wire_part p;
    if (m == FH_BEGIN && cpri_wire_begin_decode(msg, len, &b) == CPR_OK) {
        expect_part(e, &b.spec.id, CPRI_RIGHT_WRITE, 0);
        cpri_wire_begin_release(&b);
    } else if (m == FH_PUT_ROWS && cpri_wire_rows_decode(msg, len, &r) == CPR_OK) {
        expect_part(e, &r.id, CPRI_RIGHT_WRITE, 1);
        cpri_wire_rows_release(&r);
    } else if (m == FH_PUT_BLOB && cpri_wire_chunk_decode(msg, len, &ch) == CPR_OK) {
        expect_part(e, &ch.id, CPRI_RIGHT_WRITE, 1);
        cpri_wire_chunk_release(&ch);
    } else if (m == FH_COMMIT && cpri_wire_commit_decode(msg, len, &p) == CPR_OK) {
        expect_part(e, &p.id, CPRI_RIGHT_WRITE, 1);
        cpri_wire_part_release(&p);
    } else if (m == FH_ABORT && cpri_wire_abort_decode(msg, len, &p) == CPR_OK) {
        /* without the writer's lease: the admin's override */
        expect_part(e, &p.id, p.lease ? CPRI_RIGHT_WRITE : CPRI_RIGHT_ADMIN, p.lease != 0);
        cpri_wire_part_release(&p);
    } else if (m == FH_GET_BLOB && cpri_wire_getblob_decode(msg, len, &p) == CPR_OK) {
        expect_part(e, &p.id, CPRI_RIGHT_READ, 0);
        cpri_wire_part_release(&p);
    }
}

/* Requests that name a job, or every job. */
static void expect_job_request(fh_method m, const uint8_t *msg, size_t len, expect *e)
{
    cpri_wire_list l;
    cpri_wire_restore q;
    cpri_wire_gc g;
    cpri_wire_recovery rec;
    if (m == FH_LIST && cpri_wire_list_decode(msg, len, &l) == CPR_OK) {
        expect_job(e, l.job, CPRI_RIGHT_READ);
        cpri_wire_list_release(&l);
    } else if (m == FH_VERIFY && cpri_wire_verify_decode(msg, len, &l) == CPR_OK) {
        expect_job(e, l.job, CPRI_RIGHT_ADMIN);
        cpri_wire_list_release(&l);
    } else if (m == FH_GET_RECOVERY && cpri_wire_get_recovery_decode(msg, len, &l) == CPR_OK) {
        expect_job(e, l.job, CPRI_RIGHT_READ);
        cpri_wire_list_release(&l);
    } else if (m == FH_RESTORE && cpri_wire_restore_decode(msg, len, &q) == CPR_OK) {
        expect_job(e, q.query.job, CPRI_RIGHT_READ);
        cpri_wire_restore_release(&q);
    } else if (m == FH_GC && cpri_wire_gc_decode(msg, len, &g) == CPR_OK) {
        /* a job's own Gc is its writers'; every job's, the store admin's */
        expect_job(e, g.job, g.job ? CPRI_RIGHT_WRITE : CPRI_RIGHT_ADMIN);
        cpri_wire_gc_release(&g);
    } else if (m == FH_PUT_RECOVERY && cpri_wire_put_recovery_decode(msg, len, &rec) == CPR_OK) {
        expect_job(e, rec.job, CPRI_RIGHT_WRITE);
        cpri_wire_recovery_release(&rec);
    }
}

static void expect_of(fh_method m, const uint8_t *msg, size_t len, expect *e)
{
    memset(e, 0, sizeof *e);
    switch (m) {
    case FH_STATS: expect_job(e, NULL, CPRI_RIGHT_ADMIN); break;
    case FH_HEALTH: e->decoded = 1; break;
    case FH_LIST_JOBS:
        e->decoded = cpri_wire_list_jobs_decode(msg, len) == CPR_OK;
        e->identify_only = 1;
        break;
    case FH_BEGIN: case FH_PUT_ROWS: case FH_PUT_BLOB: case FH_COMMIT: case FH_ABORT:
    case FH_GET_BLOB:
        expect_part_request(m, msg, len, e);
        break;
    default:
        expect_job_request(m, msg, len, e);
        break;
    }
}

/* ---- the store's state, before and after a call (C3) ----------------------------------- */

typedef struct snap_job {
    char *name;
    cpr_part_info *parts;
    size_t n;
} snap_job;

typedef struct snapshot {
    snap_job *jobs;
    size_t n;
    uint64_t generation[FH_VALID_JOBS]; /* recovery records of the jobs the builders use */
} snapshot;

static void snap_take(snapshot *s)
{
    char **names = NULL;
    size_t n = 0;
    cpr_status st = cpr_store_list_jobs(fz.store, &names, &n);
    FH_CHECK(st == CPR_OK, "cpr_store_list_jobs: %s", cpr_errmsg());
    s->n = n;
    s->jobs = calloc(n ? n : 1, sizeof *s->jobs);
    FH_CHECK(s->jobs != NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        s->jobs[i].name = names[i]; /* taken */
        st = cpr_store_list(fz.store, names[i], &s->jobs[i].parts, &s->jobs[i].n);
        FH_CHECK(st == CPR_OK, "cpr_store_list %s: %s", names[i], cpr_errmsg());
    }
    free(names);
    for (int j = 0; j < FH_VALID_JOBS; j++) {
        void *plan = NULL;
        size_t len = 0;
        st = cpr_store_recovery_get(fz.store, fh_jobs[j], &s->generation[j], &plan, &len, NULL);
        FH_CHECK(st == CPR_OK, "cpr_store_recovery_get %s: %s", fh_jobs[j], cpr_errmsg());
        free(plan);
    }
}

static void snap_free(snapshot *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->jobs[i].name);
        free(s->jobs[i].parts);
    }
    free(s->jobs);
    memset(s, 0, sizeof *s);
}

static const cpr_part_info *snap_find(const snapshot *s, const char *job, uint32_t shard,
                                      uint64_t checkpoint)
{
    for (size_t i = 0; job && i < s->n; i++)
        if (strcmp(s->jobs[i].name, job) == 0)
            for (size_t k = 0; k < s->jobs[i].n; k++)
                if (s->jobs[i].parts[k].shard == shard &&
                    s->jobs[i].parts[k].checkpoint == checkpoint)
                    return &s->jobs[i].parts[k];
    return NULL;
}

/* Field by field: the struct has padding. */
static int part_same(const cpr_part_info *a, const cpr_part_info *b)
{
    return a->shard == b->shard && a->checkpoint == b->checkpoint && a->kind == b->kind &&
           a->step == b->step && a->num_shards == b->num_shards && a->base == b->base &&
           a->rows == b->rows && a->bytes == b->bytes && a->committed == b->committed &&
           a->consistent == b->consistent && a->codecs == b->codecs;
}

/* The parts a call may have changed: the one it named, or those a stream wrote to. */
typedef struct exempt {
    const expect *parts[FH_MAX_STREAM + 1];
    size_t n;
} exempt;

static int exempted(const exempt *x, const char *job, const cpr_part_info *p)
{
    for (size_t i = 0; i < x->n; i++)
        if (x->parts[i]->shard == p->shard && x->parts[i]->checkpoint == p->checkpoint &&
            strcmp(x->parts[i]->job, job) == 0)
            return 1;
    return 0;
}

/* Every part of `a` not exempted is in `b`, unchanged. */
static void snap_contained(const snapshot *a, const snapshot *b, const exempt *x,
                           const cpri_rpc_call *c, const char *which)
{
    for (size_t i = 0; i < a->n; i++)
        for (size_t k = 0; k < a->jobs[i].n; k++) {
            const cpr_part_info *p = &a->jobs[i].parts[k];
            if (exempted(x, a->jobs[i].name, p))
                continue;
            const cpr_part_info *q = snap_find(b, a->jobs[i].name, p->shard, p->checkpoint);
            FH_CHECK(q && part_same(p, q), "%s (%s: %s) changed part %s/%u/%llu %s",
                     c->m->path, cpr_status_name(c->st), c->errmsg, a->jobs[i].name, p->shard,
                     (unsigned long long)p->checkpoint, which);
        }
}

/* C3: nothing but the exempted parts changed, and no recovery record
 * unless `record` (that job's, by one generation). */
static void snap_unchanged(const snapshot *before, const snapshot *after, const exempt *x,
                           const cpri_rpc_call *c, const char *record)
{
    snap_contained(before, after, x, c, "(gone or altered)");
    snap_contained(after, before, x, c, "(new)");
    for (int j = 0; j < FH_VALID_JOBS; j++) {
        uint64_t want = before->generation[j] + (record && strcmp(record, fh_jobs[j]) == 0);
        FH_CHECK(after->generation[j] == want, "%s (%s) left job %s's recovery record at "
                 "generation %llu, not %llu", c->m->path, cpr_status_name(c->st), fh_jobs[j],
                 (unsigned long long)after->generation[j], (unsigned long long)want);
    }
}

/* ---- the checks of one call --------------------------------------------------------------- */

/* C2 for a unary or server-streaming call. */
static void check_rights(const cpri_rpc_call *c, unsigned cred, const expect *e)
{
    const char *job = e->job ? e->job : "(every job)";
    if (c->meth == FH_HEALTH) {
        FH_CHECK(c->st == CPR_OK, "Health answered %s", cpr_status_name(c->st));
    } else if (!e->decoded) {
        FH_CHECK(c->st == CPR_INVALID_ARGUMENT, "%s answered %s (%s) to a request its decoder "
                 "refuses", c->m->path, cpr_status_name(c->st), c->errmsg);
    } else if (!fh_cred_known(cred)) {
        FH_CHECK(c->st == CPR_UNAUTHENTICATED, "%s of %s with unknown credential %u: %s (%s)",
                 c->m->path, job, cred, cpr_status_name(c->st), c->errmsg);
    } else if (!e->identify_only && !fh_cred_may(cred, e->job, e->right)) {
        FH_CHECK(c->st == CPR_PERMISSION_DENIED, "%s of %s by credential %u without the "
                 "right: %s (%s)", c->m->path, job, cred, cpr_status_name(c->st), c->errmsg);
    } else {
        FH_CHECK(c->st != CPR_UNAUTHENTICATED &&
                 (c->st != CPR_PERMISSION_DENIED || e->lease_checked),
                 "%s of %s by credential %u, which has the right: %s (%s)", c->m->path, job,
                 cred, cpr_status_name(c->st), c->errmsg);
    }
}

/* C2 for a client stream: no message the rules refuse is accepted, and the
 * stream ends as its last message or its transport says. Returns the
 * messages it accepted. */
static size_t check_stream_rights(const cpri_rpc_call *c, unsigned cred, const expect *es)
{
    if (!fh_cred_known(cred)) {
        FH_CHECK(c->st == CPR_UNAUTHENTICATED && c->received == 0, "%s with unknown "
                 "credential %u: %s after %zu messages", c->m->path, cred,
                 cpr_status_name(c->st), c->received);
        return 0;
    }
    if (!fh_cred_may_some(cred, CPRI_RIGHT_WRITE)) { /* refused before any message */
        FH_CHECK(c->st == CPR_PERMISSION_DENIED && c->received == 0, "%s with credential %u, "
                 "which may write no job: %s after %zu messages", c->m->path, cred,
                 cpr_status_name(c->st), c->received);
        return 0;
    }
    FH_CHECK(c->ended || c->received > 0, "%s ended before its first message: %s (%s)",
             c->m->path, cpr_status_name(c->st), c->errmsg);
    size_t accepted = c->ended ? c->received : c->received - 1;
    for (size_t i = 0; i < accepted; i++)
        FH_CHECK(es[i].decoded && fh_cred_may(cred, es[i].job, CPRI_RIGHT_WRITE), "%s accepted "
                 "message %zu (job %s) from credential %u", c->m->path, i,
                 es[i].job ? es[i].job : "?", cred);
    if (c->ended) {
        cpr_status want = c->end == CPR_RPC_END      ? CPR_OK
                          : c->end == CPR_RPC_BROKEN ? CPR_UNAVAILABLE
                                                     : CPR_TIMEOUT;
        FH_CHECK(c->st == want, "%s ended by its client with %s (%s), not %s", c->m->path,
                 cpr_status_name(c->st), c->errmsg, cpr_status_name(want));
        return accepted;
    }
    const expect *last = &es[accepted];
    if (!last->decoded)
        FH_CHECK(c->st == CPR_INVALID_ARGUMENT, "%s: a message its decoder refuses answered %s",
                 c->m->path, cpr_status_name(c->st));
    else if (!fh_cred_may(cred, last->job, CPRI_RIGHT_WRITE))
        FH_CHECK(c->st == CPR_PERMISSION_DENIED, "%s: a message for job %s without the right "
                 "answered %s", c->m->path, last->job, cpr_status_name(c->st));
    else
        FH_CHECK(c->st != CPR_OK && c->st != CPR_UNAUTHENTICATED, "%s stopped at message %zu "
                 "with %s", c->m->path, accepted, cpr_status_name(c->st));
    return accepted;
}

/* C3 for a client stream: the parts its accepted messages wrote to are
 * still open if it succeeded, gone if it failed or its client cancelled;
 * nothing else changed. */
static void check_stream_store(const cpri_rpc_call *c, const expect *es, size_t accepted,
                               const snapshot *before, const snapshot *after)
{
    exempt x = {.n = 0};
    for (size_t i = 0; i < accepted; i++)
        x.parts[x.n++] = &es[i];
    if (!c->ended && c->st == CPR_IO) /* written in part: aborted too */
        x.parts[x.n++] = &es[accepted];
    snap_unchanged(before, after, &x, c, NULL);
    int kept = c->st == CPR_OK && !c->cancelled;
    for (size_t i = 0; i < x.n; i++) {
        const expect *e = x.parts[i];
        const cpr_part_info *p = snap_find(before, e->job, e->shard, e->checkpoint);
        const cpr_part_info *q = snap_find(after, e->job, e->shard, e->checkpoint);
        FH_CHECK(p && !p->committed, "%s wrote to %s/%u/%llu, which was not open", c->m->path,
                 e->job, e->shard, (unsigned long long)e->checkpoint);
        FH_CHECK(kept ? q && !q->committed : !q, "%s (%s%s) left part %s/%u/%llu %s",
                 c->m->path, cpr_status_name(c->st), c->cancelled ? ", cancelled" : "", e->job,
                 e->shard, (unsigned long long)e->checkpoint, q ? "open" : "gone");
    }
}

/* C3 for a unary or server-streaming call. */
static void check_unary_store(const cpri_rpc_call *c, const expect *e, const snapshot *before,
                              const snapshot *after)
{
    exempt x = {.n = 0};
    cpr_status st = c->st;
    int writes = c->meth == FH_BEGIN || c->meth == FH_COMMIT || c->meth == FH_ABORT ||
                 c->meth == FH_PUT_RECOVERY || c->meth == FH_GC;
    if (!writes || st != CPR_OK) {
        /* Failures that may leave the store changed (store.h): none of the refusals. */
        if (writes && (st == CPR_IO || st == CPR_NO_MEMORY || st == CPR_INTERNAL ||
                       st == CPR_CORRUPT))
            return;
        snap_unchanged(before, after, &x, c, NULL);
        return;
    }
    if (c->meth == FH_GC)
        return;
    if (c->meth == FH_PUT_RECOVERY) {
        snap_unchanged(before, after, &x, c, e->job);
        return;
    }
    x.parts[x.n++] = e;
    snap_unchanged(before, after, &x, c, NULL);
    const cpr_part_info *p = snap_find(before, e->job, e->shard, e->checkpoint);
    const cpr_part_info *q = snap_find(after, e->job, e->shard, e->checkpoint);
    if (c->meth == FH_BEGIN)
        FH_CHECK(!p && q && !q->committed, "Begin of %s/%u/%llu succeeded: the part was %s "
                 "and is %s", e->job, e->shard, (unsigned long long)e->checkpoint,
                 p ? "there" : "not there", q ? (q->committed ? "committed" : "open") : "gone");
    else
        FH_CHECK(p && !p->committed && (c->meth == FH_COMMIT ? q && q->committed : !q),
                 "%s of %s/%u/%llu succeeded: the part was %s and is %s", c->m->path, e->job,
                 e->shard, (unsigned long long)e->checkpoint,
                 p ? (p->committed ? "committed" : "open") : "not there",
                 q ? (q->committed ? "committed" : "open") : "gone");
}

static int job_index(const char *job)
{
    for (int j = 0; job && j < FH_JOBS; j++)
        if (strcmp(job, fh_jobs[j]) == 0)
            return j;
    return -1;
}

/* ListJobs answers exactly the jobs the caller may read. */
static void check_list_jobs(const cpri_rpc_call *c, unsigned cred, const snapshot *after)
{
    char **jobs = NULL;
    size_t n = 0, shown = 0;
    cpr_status st = cpri_wire_list_jobs_response_decode(c->resp, c->resp_len, &jobs, &n);
    FH_CHECK(st == CPR_OK, "ListJobs' answer does not decode: %s", cpr_errmsg());
    for (size_t i = 0; i < after->n; i++) {
        if (!fh_cred_may(cred, after->jobs[i].name, CPRI_RIGHT_READ))
            continue;
        FH_CHECK(shown < n && strcmp(jobs[shown], after->jobs[i].name) == 0, "ListJobs for "
                 "credential %u lacks %s", cred, after->jobs[i].name);
        shown++;
    }
    FH_CHECK(shown == n, "ListJobs for credential %u shows %zu jobs, of which it may read %zu",
             cred, n, shown);
    cpr_names_free(jobs, n);
}

/* The recovery record answered: of the job asked, at the generation stored. */
static void check_record(const cpri_rpc_call *c, const expect *e, const snapshot *after,
                         fh_memory *mem)
{
    cpri_wire_recovery rec;
    cpr_status st = cpri_wire_recovery_record_decode(c->resp, c->resp_len, &rec);
    FH_CHECK(st == CPR_OK, "%s's record does not decode: %s", c->m->path, cpr_errmsg());
    FH_CHECK(e->job && strcmp(rec.job, e->job) == 0, "%s answered job %s's record", c->m->path,
             rec.job);
    int j = job_index(e->job);
    if (j >= 0 && j < FH_VALID_JOBS)
        FH_CHECK(rec.generation == after->generation[j], "%s answered generation %llu; the "
                 "store holds %llu", c->m->path, (unsigned long long)rec.generation,
                 (unsigned long long)after->generation[j]);
    if (j >= 0)
        mem->generation[j] = rec.generation;
    cpri_wire_recovery_release(&rec);
}

/* Begin: a lease that is not 0 (leases.h L3), remembered for the calls after. */
static void check_begun(const cpri_rpc_call *c, fh_memory *mem)
{
    uint64_t lease = 0;
    cpri_wire_begin b;
    cpr_status st = cpri_wire_begin_response_decode(c->resp, c->resp_len, &lease);
    FH_CHECK(st == CPR_OK && lease != 0, "Begin answered lease %llu (%s)",
             (unsigned long long)lease, st ? cpr_errmsg() : "");
    st = cpri_wire_begin_decode(c->msgs[0], c->lens[0], &b);
    FH_CHECK(st == CPR_OK, "a Begin that succeeded does not decode");
    fh_memory_begun(mem, &b.spec, lease);
    cpri_wire_begin_release(&b);
}

/* C4: what a successful call answers. */
static void check_response(const cpri_rpc_call *c, unsigned cred, const expect *e,
                           const snapshot *after, fh_memory *mem)
{
    cpr_store_stats stats;
    cpr_verify_report vr;
    cpr_gc_report gr;
    cpr_part_info *parts = NULL;
    size_t n = 0;
    uint64_t cut = 0;
    if (c->st != CPR_OK)
        return;
    switch (c->meth) {
    case FH_BEGIN: check_begun(c, mem); break;
    case FH_HEALTH:
        FH_CHECK(c->resp_len == 2 && c->resp[0] == 0x08 && (c->resp[1] == 1 || c->resp[1] == 2),
                 "Health's answer is not SERVING (1) or NOT_SERVING (2)");
        break;
    case FH_LIST: {
        FH_CHECK(cpri_wire_list_response_decode(c->resp, c->resp_len, &parts, &n, &cut) == CPR_OK,
                 "List's answer does not decode: %s", cpr_errmsg());
        size_t stored = 0;
        for (size_t i = 0; i < after->n; i++)
            if (strcmp(after->jobs[i].name, e->job) == 0)
                stored = after->jobs[i].n;
        FH_CHECK(n == stored, "List of %s answered %zu parts; the store has %zu", e->job, n,
                 stored);
        free(parts);
        break;
    }
    case FH_LIST_JOBS: check_list_jobs(c, cred, after); break;
    case FH_STATS:
        FH_CHECK(cpri_wire_stats_response_decode(c->resp, c->resp_len, &stats) == CPR_OK,
                 "Stats' answer does not decode: %s", cpr_errmsg());
        break;
    case FH_VERIFY:
        FH_CHECK(cpri_wire_verify_response_decode(c->resp, c->resp_len, &vr, NULL, NULL) ==
                 CPR_OK, "Verify's answer does not decode: %s", cpr_errmsg());
        break;
    case FH_GC:
        FH_CHECK(cpri_wire_gc_response_decode(c->resp, c->resp_len, &gr) == CPR_OK,
                 "Gc's answer does not decode: %s", cpr_errmsg());
        break;
    case FH_GET_RECOVERY:
    case FH_PUT_RECOVERY: check_record(c, e, after, mem); break;
    case FH_GET_BLOB:
        FH_CHECK(c->blob_offset == c->blob_size, "GetBlob sent %llu bytes of a %llu-byte blob",
                 (unsigned long long)c->blob_offset, (unsigned long long)c->blob_size);
        break;
    case FH_PUT_ROWS:
    case FH_PUT_BLOB: FH_CHECK(c->resp != NULL, "%s answered nothing", c->m->path); break;
    default: break;
    }
}

/* ---- one call, one input ------------------------------------------------------------------- */

/* fault byte: (fault & 7) 4: sends fail as for a client gone away at send
 * fault >> 3, and a client stream breaks after that many messages; 5: the
 * same as for a client gone idle; 6: the client cancelled (the finish says
 * so); 7: the initial metadata cannot be sent; else nothing goes wrong. */
static void configure_faults(cpri_rpc_call *c, uint8_t fault)
{
    size_t k = fault >> 3;
    c->end = CPR_RPC_END;
    c->break_after = c->n_msgs;
    switch (fault & 7) {
    case 4: c->send_fault = CPR_UNAVAILABLE; c->end = CPR_RPC_BROKEN; break;
    case 5: c->send_fault = CPR_TIMEOUT; c->end = CPR_RPC_IDLE; break;
    case 6: c->cancelled = 1; return;
    case 7: c->start_fails = 1; return;
    default: return;
    }
    c->fail_send_at = k;
    if (k < c->n_msgs)
        c->break_after = k;
}

/* A message: raw bytes (mode % 4 == 3) or a built request, copied into a
 * buffer of exactly its length. */
static void read_message(fh_reader *r, fh_method meth, fh_memory *mem, uint8_t **msg,
                         size_t *len)
{
    uint8_t mode = fh_u8(r), *built = NULL;
    const uint8_t *src = NULL;
    size_t n = 0;
    if (mode % 4 == 3) {
        n = fh_u8(r);
        if (n == 255)
            n = fh_u8(r) | (size_t)fh_u8(r) << 8;
        n = n < r->left ? n : r->left;
        src = r->p;
        r->p += n;
        r->left -= n;
    } else if (fh_build(meth, r, mem, &built, &n) == CPR_OK) {
        src = built;
    } else {
        n = 0;
    }
    *msg = malloc(n ? n : 1);
    FH_CHECK(*msg != NULL, "out of memory");
    if (n)
        memcpy(*msg, src, n);
    *len = n;
    free(built);
}

static void run_call(fh_reader *r, fh_memory *mem)
{
    const cpri_rpc_method *m = &fz.methods[fh_u8(r) % fz.n_methods];
    unsigned cred = fh_u8(r) % FH_CREDS;
    uint8_t fault = fh_u8(r), count = fh_u8(r);
    cpri_rpc_call c = {.m = m, .meth = fh_method_of(m->path), .cred = fh_cred_get(cred)};
    expect es[FH_MAX_STREAM];
    snapshot before = {0}, after = {0};
    c.n_msgs = m->kind == CPR_RPC_CLIENT_STREAM ? 1u + count % FH_MAX_STREAM : 1;
    c.msgs = calloc(c.n_msgs, sizeof *c.msgs);
    c.lens = calloc(c.n_msgs, sizeof *c.lens);
    FH_CHECK(c.msgs && c.lens, "out of memory");
    for (size_t i = 0; i < c.n_msgs; i++) {
        read_message(r, c.meth, mem, &c.msgs[i], &c.lens[i]);
        expect_of(c.meth, c.msgs[i], c.lens[i], &es[i]);
    }
    configure_faults(&c, fault);
    if (c.meth != FH_UNKNOWN)
        snap_take(&before);
    cpri_clear_error();
    m->fn(&c, fz.srv);
    /* C1 */
    FH_CHECK(c.finished, "%s returned without cpri_rpc_finish", m->path);
    FH_CHECK((unsigned)c.st < CPR_STATUS_COUNT_, "%s finished with status %d", m->path, c.st);
    FH_CHECK(c.st == CPR_OK || c.errmsg[0], "%s finished with %s and no message", m->path,
             cpr_status_name(c.st));
    fz.answers[c.meth][c.st]++;
    if (c.meth != FH_UNKNOWN) {
        snap_take(&after);
        if (m->kind == CPR_RPC_CLIENT_STREAM) {
            size_t accepted = check_stream_rights(&c, cred, es);
            check_stream_store(&c, es, accepted, &before, &after);
        } else {
            check_rights(&c, cred, &es[0]);
            check_unary_store(&c, &es[0], &before, &after);
        }
        check_response(&c, cred, &es[0], &after, mem);
    }
    snap_free(&before);
    snap_free(&after);
    for (size_t i = 0; i < c.n_msgs; i++)
        free(es[i].job);
    fh_call_release(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init_once();
    maybe_reset();
    fh_memory mem;
    memset(&mem, 0, sizeof mem);
    fh_reader r = {data, size};
    for (int calls = 0; r.left > 0 && calls < MAX_CALLS; calls++)
        run_call(&r, &mem);
    return 0;
}
