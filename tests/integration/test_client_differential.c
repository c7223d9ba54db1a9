/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client over several daemons restores what one store holding the same
 * parts restores, byte for byte. Each seed writes a job resharded over time
 * (1 to 6 shards; FULL, DELTA and PRIORITY parts, a few DELTAs without a
 * base) through a client over 2 or 3 real ckptd on 127.0.0.1 and into one
 * local:// store, the oracle, then compares random restores (as_of,
 * consistent, tables, row ranges, modulo, batch_rows) of both: the status,
 * the result and every row, in the store's order (the client merges several
 * nodes' answers by version, resharded or not). A query naming shards asks
 * only their nodes: its oracle is a store of those daemons' parts alone (one
 * per subset of daemons), read as of what the whole job resolves to.
 * restore_table into a window compares with the oracle's too, and gc (keep 1
 * or 2) must agree on the floor, restores at and below it on their status.
 *
 * Seeds DEFAULT_FIRST_SEED.. run by default; CPR_DIFF_SEEDS=FIRST:COUNT runs
 * others. Shards are placed by hashing the daemons' ports, so a seed does not
 * repeat exactly: a failure prints its seed, the job's history and the query.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ckptd_harness.h"
#include "cpr/client.h"
#include "cpr/crc32c.h"
#include "cpr/rng.h"
#include "cpr/store.h"
#include "testutil.h"

/* The seeds run by default: 5 to 10 s on 2 cores (about 25 s under ASan). */
#define DEFAULT_FIRST_SEED 1
#define DEFAULT_SEEDS 60

#define N_DAEMONS 3
#define N_SUBSETS (1 << N_DAEMONS) /* subsets of the daemons, as bit masks */
#define MAX_SHARDS 6
#define MAX_TABLES 2
#define MAX_CKPTS 64
#define MAX_PARTS (MAX_CKPTS * MAX_SHARDS)
#define ERR_TEXT 600

/* The daemons every seed's client goes over, and the oracles. */
typedef struct world {
    char *dir;
    ch_daemon daemon[N_DAEMONS];
    cpr_client *local;            /* local://: every part of every job */
    cpr_store *subset[N_SUBSETS]; /* subset[m]: the parts placed on the daemons in m */
} world;

/* What the seeds did, summed. */
typedef struct tally {
    uint64_t queries, named, merged, tables, compared, equal_errors, gcs, failures;
} tally;

/* A part as written: the order rule reads the shard counts of these. */
typedef struct written {
    uint64_t ckpt;
    uint32_t num_shards;
    int committed;
} written;

typedef struct job {
    world *w;
    tally *t;
    uint64_t seed;
    cpr_rng rng;
    char name[64];
    int n_nodes;
    int daemon_of_node[N_DAEMONS];
    cpr_client *multi; /* grpc:// over n_nodes of the daemons */
    cpr_table_schema tables[MAX_TABLES];
    size_t n_tables;
    uint64_t ckpts[MAX_CKPTS]; /* the checkpoints of which some part committed */
    size_t n_ckpts;
    uint64_t next_ckpt;
    uint32_t num_shards; /* the shard count now */
    written parts[MAX_PARTS];
    size_t n_parts;
    uint64_t floor;              /* gc's, 0 before any */
    int has_base[MAX_SHARDS];    /* the shard has a committed FULL or DELTA */
    char *history;               /* what was done to the job, a line each */
    size_t history_len, history_cap, history_shown;
} job;

/* Uniform in [0, n); 0 when n is 0. */
static uint64_t rr(job *j, uint64_t n)
{
    return n ? cpr_rng_below(&j->rng, n) : 0;
}

/* ---- what a failure prints --------------------------------------------------- */

static void note(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mismatch(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append a line to the job's history. */
static void note(job *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    size_t need = j->history_len + (size_t)n + 2;
    if (need > j->history_cap) {
        char *grown = realloc(j->history, 2 * need);
        assert_non_null(grown);
        j->history = grown;
        j->history_cap = 2 * need;
    }
    va_start(ap, fmt);
    vsnprintf(j->history + j->history_len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    j->history_len += (size_t)n;
    j->history[j->history_len++] = '\n';
    j->history[j->history_len] = '\0';
}

/* A comparison differed: print the history not printed yet (so the log
 * reads in order), then what differed; the test fails at its end. */
static void mismatch(job *j, const char *fmt, ...)
{
    va_list ap;
    if (j->history)
        fputs(j->history + j->history_shown, stdout);
    j->history_shown = j->history_len;
    printf("FAIL seed %" PRIu64 ": ", j->seed);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    j->t->failures++;
}

/* A call on one oracle store that must succeed. */
static void must(job *j, const char *what, cpr_status st)
{
    if (st)
        mismatch(j, "%s: %s (%s)", what, cpr_status_name(st), cpr_errmsg());
}

static void save_error(cpr_status st, char *err)
{
    if (st)
        snprintf(err, ERR_TEXT, "%s", cpr_errmsg());
}

/* ---- writing the job --------------------------------------------------------- */

static int daemon_of(job *j, uint32_t shard)
{
    return j->daemon_of_node[cpr_client_node_of(j->multi, j->name, shard)];
}

/* One part's writers: the oracle's, the client's over the daemons, and the
 * subset stores that hold the daemon the shard is placed on. */
typedef struct part_writers {
    cpr_part *local, *multi;
    cpr_status local_begin, multi_begin, local_commit, multi_commit;
    int in_subset[N_SUBSETS];
} part_writers;

static void begin_part(job *j, const cpr_part_spec *spec, part_writers *pw)
{
    char local_err[ERR_TEXT] = "", multi_err[ERR_TEXT] = "";
    pw->local_begin = cpr_client_begin(j->w->local, spec, &pw->local);
    save_error(pw->local_begin, local_err);
    pw->multi_begin = cpr_client_begin(j->multi, spec, &pw->multi);
    save_error(pw->multi_begin, multi_err);
    if (pw->local_begin != pw->multi_begin)
        mismatch(j, "begin shard %u/%u ckpt %" PRIu64 " %s: local %s (%s), multi %s (%s)",
                 spec->id.shard, spec->num_shards, spec->id.checkpoint,
                 cpr_kind_name(spec->kind), cpr_status_name(pw->local_begin), local_err,
                 cpr_status_name(pw->multi_begin), multi_err);
    if (pw->local_begin)
        return;
    int daemon = daemon_of(j, spec->id.shard);
    for (int m = 1; m < N_SUBSETS; m++) {
        if (!(m & (1 << daemon)))
            continue;
        cpr_status st = cpr_store_begin(j->w->subset[m], spec);
        must(j, "begin in a subset store", st);
        pw->in_subset[m] = st == CPR_OK;
    }
}

static void put_rows(job *j, const cpr_part_id *id, part_writers *pw, const tu_batch *b)
{
    if (pw->local)
        must(j, "put rows, local", cpr_part_put_rows(pw->local, &b->batch));
    if (pw->multi) {
        cpr_status st = cpr_part_put_rows(pw->multi, &b->batch);
        if (st)
            mismatch(j, "put rows, multi: %s (%s)", cpr_status_name(st), cpr_errmsg());
    }
    for (int m = 1; m < N_SUBSETS; m++)
        if (pw->in_subset[m])
            must(j, "put rows in a subset store", cpr_store_put_rows(j->w->subset[m], id,
                                                                    &b->batch));
}

/* Commit everywhere it began; 1 if the oracle's part committed. */
static int commit_part(job *j, const cpr_part_id *id, part_writers *pw, uint64_t rows)
{
    char local_err[ERR_TEXT] = "", multi_err[ERR_TEXT] = "";
    pw->local_commit = pw->multi_commit = CPR_OK;
    if (pw->local) {
        pw->local_commit = cpr_part_commit(&pw->local);
        save_error(pw->local_commit, local_err);
    }
    if (pw->multi) {
        pw->multi_commit = cpr_part_commit(&pw->multi);
        save_error(pw->multi_commit, multi_err);
    }
    if (pw->local_begin == CPR_OK && pw->multi_begin == CPR_OK &&
        pw->local_commit != pw->multi_commit)
        mismatch(j, "commit shard %u ckpt %" PRIu64 ": local %s (%s), multi %s (%s)",
                 id->shard, id->checkpoint, cpr_status_name(pw->local_commit), local_err,
                 cpr_status_name(pw->multi_commit), multi_err);
    for (int m = 1; m < N_SUBSETS; m++) {
        if (!pw->in_subset[m])
            continue;
        cpr_status st = cpr_store_commit(j->w->subset[m], id, rows);
        if (st != pw->local_commit)
            mismatch(j, "commit in subset store %d: %s (%s), local %s", m, cpr_status_name(st),
                     cpr_errmsg(), cpr_status_name(pw->local_commit));
    }
    return pw->local_begin == CPR_OK && pw->local_commit == CPR_OK;
}

static void record_part(job *j, const cpr_part_spec *spec, const part_writers *pw,
                        const size_t *n_ids, int committed)
{
    assert_true(j->n_parts < MAX_PARTS);
    j->parts[j->n_parts++] = (written){spec->id.checkpoint, spec->num_shards, committed};
    note(j, "  part %u/%u ckpt %" PRIu64 " %s, rows %zu+%zu, daemon %d: begin %s/%s, commit "
         "%s/%s (local/multi)", spec->id.shard, spec->num_shards, spec->id.checkpoint,
         cpr_kind_name(spec->kind), n_ids[0], n_ids[1], daemon_of(j, spec->id.shard),
         cpr_status_name(pw->local_begin), cpr_status_name(pw->multi_begin),
         cpr_status_name(pw->local_commit), cpr_status_name(pw->multi_commit));
    if (!committed)
        return;
    if (!j->n_ckpts || j->ckpts[j->n_ckpts - 1] != spec->id.checkpoint)
        j->ckpts[j->n_ckpts++] = spec->id.checkpoint;
    if (spec->kind != CPR_KIND_PRIORITY)
        j->has_base[spec->id.shard] = 1;
}

/* Write one part everywhere: rows ids[t] (n_ids[t], ascending) of table t. */
static void write_part(job *j, uint32_t shard, uint64_t ckpt, cpr_kind kind,
                       uint64_t *const *ids, const size_t *n_ids)
{
    cpr_part_spec spec = tu_part(j->name, shard, j->num_shards, ckpt, kind, j->tables,
                                 j->n_tables);
    part_writers pw = {0};
    uint64_t rows = 0;
    begin_part(j, &spec, &pw);
    for (size_t t = 0; t < j->n_tables; t++) {
        if (!n_ids[t])
            continue;
        tu_batch b;
        tu_batch_make(&b, &j->tables[t], ids[t], n_ids[t], ckpt);
        put_rows(j, &spec.id, &pw, &b);
        tu_batch_free(&b);
        rows += n_ids[t];
    }
    int committed = commit_part(j, &spec.id, &pw, rows);
    record_part(j, &spec, &pw, n_ids, committed);
}

static cpr_kind pick_kind(job *j, uint32_t shard)
{
    unsigned k = (unsigned)rr(j, 10);
    cpr_kind kind = k < 4 ? CPR_KIND_FULL : k < 7 ? CPR_KIND_DELTA : CPR_KIND_PRIORITY;
    if (kind == CPR_KIND_DELTA && !j->has_base[shard] && rr(j, 4))
        kind = CPR_KIND_FULL; /* mostly valid; now and then a DELTA without a base */
    return kind;
}

/* A part of `shard` of `kind` at `ckpt` with some of the shard's rows. */
static void write_shard(job *j, uint32_t shard, uint64_t ckpt)
{
    cpr_kind kind = pick_kind(j, shard);
    unsigned density = kind == CPR_KIND_FULL ? (rr(j, 5) ? 100 : 1 + (unsigned)rr(j, 100))
                                             : 1 + (unsigned)rr(j, 60);
    uint64_t *ids[MAX_TABLES] = {NULL, NULL};
    size_t n_ids[MAX_TABLES] = {0, 0};
    for (size_t t = 0; t < j->n_tables; t++) {
        ids[t] = malloc((j->tables[t].rows + 1) * sizeof *ids[t]);
        assert_non_null(ids[t]);
        for (uint64_t r = shard; r < j->tables[t].rows; r += j->num_shards)
            if (rr(j, 100) < density)
                ids[t][n_ids[t]++] = r;
    }
    write_part(j, shard, ckpt, kind, ids, n_ids);
    free(ids[0]);
    free(ids[1]);
}

/* `count` more checkpoints, the shard count changing now and then, some
 * with every shard and some with a few. */
static void write_checkpoints(job *j, int count)
{
    for (int c = 0; c < count && j->n_ckpts < MAX_CKPTS - 1; c++) {
        if (j->num_shards == 0 || rr(j, 10) < 3)
            j->num_shards = 1 + (uint32_t)rr(j, MAX_SHARDS);
        uint64_t ckpt = j->next_ckpt;
        j->next_ckpt += 1 + rr(j, 2);
        int every_shard = rr(j, 10) < 6;
        for (uint32_t s = 0; s < j->num_shards; s++)
            if (every_shard || !rr(j, 2))
                write_shard(j, s, ckpt);
    }
}

/* ---- restored rows ------------------------------------------------------------ */

/* Rows restored, and the first thing wrong with the batches they came in. */
typedef struct restored {
    tu_rows rows;
    size_t batch_rows; /* the query's limit; 0: none */
    char bad[256];     /* empty while every batch was well formed */
} restored;

static cpr_status collect(void *ctx, const cpr_row_batch *b)
{
    restored *r = ctx;
    int malformed = b->n == 0 || b->values_count % b->n || b->state_count % b->n;
    if (!r->bad[0] && malformed)
        snprintf(r->bad, sizeof r->bad, "a batch of %zu rows, %zu values, %zu state", b->n,
                 b->values_count, b->state_count);
    else if (!r->bad[0] && r->batch_rows && b->n > r->batch_rows)
        snprintf(r->bad, sizeof r->bad, "a batch of %zu rows, over batch_rows %zu", b->n,
                 r->batch_rows);
    else if (!r->bad[0] && cpr_crc32c_rows(b->ids, b->n, b->values, b->values_count, b->state,
                                           b->state_count) != b->crc32c)
        snprintf(r->bad, sizeof r->bad, "a batch failing its checksum");
    return malformed ? CPR_OK : tu_collect(&r->rows, b);
}

static int row_cmp(const void *a, const void *b)
{
    const tu_row *x = a, *y = b;
    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    if (x->dim != y->dim || x->state_dim != y->state_dim)
        return x->dim != y->dim ? (x->dim < y->dim ? -1 : 1)
                                : (x->state_dim < y->state_dim ? -1 : 1);
    return memcmp(x->values, y->values, (x->dim + x->state_dim) * sizeof(float));
}

/* The checkpoint at which `v` (element 0) was written to row `id`, or -1. */
static long long valued_at(uint32_t table, uint64_t id, const float *v)
{
    for (uint64_t ckpt = 1; ckpt < 200; ckpt++)
        if (tu_float_bits(tu_value(table, id, ckpt, 0)) == tu_float_bits(v[0]))
            return (long long)ckpt;
    return -1;
}

static void describe_row(const tu_rows *r, size_t i, char *out, size_t cap)
{
    if (i >= r->n) {
        snprintf(out, cap, "(end)");
        return;
    }
    const tu_row *row = &r->rows[i];
    snprintf(out, cap, "t%u r%" PRIu64 " dim %u state %u (the value of ckpt %lld)", row->table,
             row->id, row->dim, row->state_dim,
             row->dim ? valued_at(row->table, row->id, row->values) : -1);
}

/* 1 (and why) if `got` is not `want`. Not in order: rows of a node come
 * whole but nodes in any order, so `got` is sorted first (no row twice). */
static int rows_differ(const tu_rows *want, tu_rows *got, int any_order, char *why, size_t cap)
{
    char a[160], b[160];
    if (any_order && got->n) {
        qsort(got->rows, got->n, sizeof *got->rows, row_cmp);
        for (size_t i = 1; i < got->n; i++) {
            if (got->rows[i].table != got->rows[i - 1].table ||
                got->rows[i].id != got->rows[i - 1].id)
                continue;
            describe_row(got, i - 1, a, sizeof a);
            describe_row(got, i, b, sizeof b);
            snprintf(why, cap, "a row delivered twice: %s / %s", a, b);
            return 1;
        }
    }
    size_t n = want->n < got->n ? want->n : got->n, i = 0;
    while (i < n && row_cmp(&want->rows[i], &got->rows[i]) == 0)
        i++;
    if (i == n && want->n == got->n)
        return 0;
    describe_row(want, i, a, sizeof a);
    describe_row(got, i, b, sizeof b);
    snprintf(why, cap, "rows %zu vs %zu; first difference at %zu: want %s, got %s", want->n,
             got->n, i, a, b);
    return 1;
}

/* ---- queries -------------------------------------------------------------------- */

typedef struct query {
    cpr_restore_query q;
    uint32_t tables[MAX_TABLES + 1];
    cpr_row_range ranges[3];
    uint32_t shards[2];
    size_t n_shards;
    char text[512];
} query;

static void appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = *len < cap ? vsnprintf(buf + *len, cap - *len, fmt, ap) : 0;
    va_end(ap);
    *len += n > 0 ? (size_t)n : 0;
}

static void describe_query(query *d)
{
    size_t len = 0, cap = sizeof d->text;
    appendf(d->text, cap, &len, "job %s as_of %" PRIu64 " consistent %d batch_rows %zu modulo %"
            PRIu64 "/%" PRIu64 " tables[", d->q.job, d->q.as_of, d->q.consistent,
            d->q.batch_rows, d->q.modulo, d->q.remainder);
    for (size_t i = 0; i < d->q.n_tables; i++)
        appendf(d->text, cap, &len, "%s%u", i ? "," : "", d->q.tables[i]);
    appendf(d->text, cap, &len, "] ranges[");
    for (size_t i = 0; i < d->q.n_ranges; i++)
        appendf(d->text, cap, &len, "%s%" PRIu64 "-%" PRIu64, i ? "," : "",
                d->q.ranges[i].begin, d->q.ranges[i].end);
    appendf(d->text, cap, &len, "] shards[");
    for (size_t i = 0; i < d->n_shards; i++)
        appendf(d->text, cap, &len, "%s%u", i ? "," : "", d->shards[i]);
    appendf(d->text, cap, &len, "]");
}

static void pick_as_of(job *j, query *d)
{
    unsigned a = (unsigned)rr(j, 10);
    if (a < 3)
        d->q.as_of = 0;
    else if (a < 5)
        d->q.consistent = 1;
    else if (a < 8 && j->n_ckpts)
        d->q.as_of = j->ckpts[rr(j, j->n_ckpts)];
    else
        d->q.as_of = 1 + rr(j, j->next_ckpt + 1);
}

static void pick_tables(job *j, query *d)
{
    size_t k = 0;
    for (size_t t = 0; t < j->n_tables; t++)
        if (rr(j, 2))
            d->tables[k++] = j->tables[t].table;
    if (rr(j, 30) == 0)
        d->tables[k++] = 9; /* a table no part declares */
    if (k == 0)
        d->tables[k++] = j->tables[rr(j, j->n_tables)].table;
    d->q.tables = d->tables;
    d->q.n_tables = k;
}

static void pick_ranges(job *j, query *d)
{
    uint64_t past_end = 5;
    for (size_t t = 0; t < j->n_tables; t++)
        if (j->tables[t].rows + 5 > past_end)
            past_end = j->tables[t].rows + 5;
    d->q.n_ranges = 1 + rr(j, 3);
    for (size_t i = 0; i < d->q.n_ranges; i++) {
        uint64_t begin = rr(j, past_end);
        d->ranges[i] = (cpr_row_range){begin, begin + 1 + rr(j, past_end - begin)};
    }
    d->q.ranges = d->ranges;
}

static void pick_query(job *j, query *d)
{
    static const size_t batch_rows[] = {0, 0, 0, 1, 3, 7, 2, 5, 64, 1000};
    memset(d, 0, sizeof *d);
    d->q.job = j->name;
    pick_as_of(j, d);
    if (rr(j, 3) == 0)
        pick_tables(j, d);
    if (rr(j, 3) == 0)
        pick_ranges(j, d);
    if (rr(j, 4) == 0) {
        d->q.modulo = 1 + rr(j, 7);
        d->q.remainder = rr(j, d->q.modulo);
    }
    d->q.batch_rows = batch_rows[rr(j, 10)];
    if (d->q.batch_rows == 64)
        d->q.batch_rows = 1 + rr(j, 64);
    if (rr(j, 5) == 0) {
        d->n_shards = 1 + rr(j, 2);
        for (size_t i = 0; i < d->n_shards; i++)
            d->shards[i] = (uint32_t)rr(j, MAX_SHARDS);
    }
}

/* The order rule's question: did the committed parts at or below as_of have
 * more than one shard count (from what was written, not what is listed)? */
static int log_resharded(const job *j, uint64_t as_of)
{
    uint32_t seen = 0;
    for (size_t i = 0; i < j->n_parts; i++) {
        if (!j->parts[i].committed || j->parts[i].ckpt > as_of)
            continue;
        if (seen && j->parts[i].num_shards != seen)
            return 1;
        seen = j->parts[i].num_shards;
    }
    return 0;
}

/* The same from the client's list (-1 if it fails): printed on a failure. */
static int list_resharded(job *j, uint64_t as_of)
{
    cpr_part_info *p = NULL;
    size_t n = 0;
    if (cpr_client_list(j->multi, j->name, &p, &n))
        return -1;
    uint32_t seen = 0;
    int resharded = 0;
    for (size_t i = 0; i < n; i++) {
        if (!p[i].committed || p[i].checkpoint > as_of)
            continue;
        resharded |= seen && p[i].num_shards != seen;
        seen = p[i].num_shards;
    }
    free(p);
    return resharded;
}

/* Whether rows over `nodes` nodes may come in any order (never: the client
 * merges several nodes' answers by version, in the store's order); *merged:
 * it merged them, and the job was resharded by as_of (what the merge is for). */
static int any_order(const job *j, int nodes, uint64_t as_of, int *merged)
{
    *merged = nodes > 1 && log_resharded(j, as_of);
    return 0;
}

/* One restore's outcome. */
typedef struct side {
    restored got;
    cpr_restore_result res;
    cpr_status st;
    char err[ERR_TEXT];
} side;

static void restore_side(cpr_client *c, const query *d, const uint32_t *shards,
                         size_t n_shards, side *s)
{
    memset(s, 0, sizeof *s);
    s->got.batch_rows = d->q.batch_rows;
    s->st = cpr_client_restore(c, &d->q, shards, n_shards, collect, &s->got, &s->res);
    save_error(s->st, s->err);
}

/* The two clients' statuses and results of one call (`what`) agree; 1 when
 * both succeeded, and what they restored is compared next. */
static int outcomes_agree(job *j, const char *what, cpr_status local_st, const char *local_err,
                          cpr_status multi_st, const char *multi_err,
                          const cpr_restore_result *local, const cpr_restore_result *multi)
{
    if (local_st != multi_st) {
        mismatch(j, "%s: local %s (%s), multi %s (%s)", what, cpr_status_name(local_st),
                 local_err, cpr_status_name(multi_st), multi_err);
        return 0;
    }
    if (local_st) {
        j->t->equal_errors++;
        return 0;
    }
    j->t->compared++;
    if (local->as_of != multi->as_of || local->rows != multi->rows)
        mismatch(j, "%s: as_of %" PRIu64 "/%" PRIu64 " rows %" PRIu64 "/%" PRIu64
                 " (local/multi)", what, local->as_of, multi->as_of, local->rows, multi->rows);
    return 1;
}

static void compare_whole(job *j, const query *d, const side *local, side *multi)
{
    if (!outcomes_agree(j, d->text, local->st, local->err, multi->st, multi->err, &local->res,
                        &multi->res))
        return;
    int merged, unordered = any_order(j, j->n_nodes, local->res.as_of, &merged);
    j->t->merged += merged;
    char why[512];
    if (multi->res.rows != multi->got.rows.n)
        mismatch(j, "%s: multi's result says %" PRIu64 " rows, %zu delivered", d->text,
                 multi->res.rows, multi->got.rows.n);
    if (rows_differ(&local->got.rows, &multi->got.rows, unordered, why, sizeof why))
        mismatch(j, "%s (merged %d, list says resharded %d, floor %" PRIu64 ", nodes %d): %s",
                 d->text, merged, list_resharded(j, local->res.as_of), j->floor, j->n_nodes,
                 why);
}

/* Named shards: only their nodes are asked, so the oracle is the store of
 * those daemons' parts, read as of what the whole job resolves to. */
static void compare_named(job *j, const query *d, const side *local, side *multi)
{
    j->t->named++;
    if (local->st)
        return; /* nothing to read as of: what the nodes answer is not compared */
    int mask = 0;
    for (size_t i = 0; i < d->n_shards; i++)
        mask |= 1 << daemon_of(j, d->shards[i]);
    cpr_restore_query q = d->q;
    q.as_of = local->res.as_of;
    q.consistent = 0;
    side want = {.got.batch_rows = 0};
    want.st = cpr_store_restore(j->w->subset[mask], &q, collect, &want.got, NULL);
    save_error(want.st, want.err);
    if (want.st != multi->st) {
        mismatch(j, "%s: named shards (daemons %d): oracle %s (%s), multi %s (%s)", d->text,
                 mask, cpr_status_name(want.st), want.err, cpr_status_name(multi->st),
                 multi->err);
    } else if (want.st == CPR_OK) {
        j->t->compared++;
        int merged, unordered = any_order(j, __builtin_popcount((unsigned)mask),
                                          local->res.as_of, &merged);
        char why[512];
        if (multi->res.as_of != local->res.as_of)
            mismatch(j, "%s: named: as_of %" PRIu64 ", want %" PRIu64, d->text,
                     multi->res.as_of, local->res.as_of);
        if (multi->res.rows != multi->got.rows.n)
            mismatch(j, "%s: named: the result says %" PRIu64 " rows, %zu delivered", d->text,
                     multi->res.rows, multi->got.rows.n);
        if (rows_differ(&want.got.rows, &multi->got.rows, unordered, why, sizeof why))
            mismatch(j, "%s (named, daemons %d, merged %d): %s", d->text, mask, merged, why);
    }
    tu_rows_free(&want.got.rows);
}

static void run_query(job *j, query *d)
{
    side local, multi;
    describe_query(d);
    j->t->queries++;
    restore_side(j->w->local, d, NULL, 0, &local);
    restore_side(j->multi, d, d->n_shards ? d->shards : NULL, d->n_shards, &multi);
    if (multi.got.bad[0])
        mismatch(j, "%s: multi's batches: %s", d->text, multi.got.bad);
    if (local.got.bad[0])
        mismatch(j, "%s: local's batches: %s", d->text, local.got.bad);
    if (d->n_shards)
        compare_named(j, d, &local, &multi);
    else
        compare_whole(j, d, &local, &multi);
    tu_rows_free(&local.got.rows);
    tu_rows_free(&multi.got.rows);
}

/* ---- restore_table --------------------------------------------------------------- */

#define SENTINEL 0xcdcdcdcdu /* the bytes after a window, never written */

/* A window restored by one client: its arrays each one float longer than
 * the window, holding SENTINEL there. */
typedef struct window {
    cpr_restore_into in;
    cpr_restore_result res;
    cpr_status st;
    char err[ERR_TEXT];
} window;

static void window_restore(cpr_client *c, const query *d, const cpr_restore_into *shape,
                           int with_state, int with_restored, window *w)
{
    size_t values = shape->n_rows * shape->dim, state = shape->n_rows * shape->state_dim;
    memset(w, 0, sizeof *w);
    w->in = *shape;
    w->in.values = malloc((values + 1) * sizeof(float));
    assert_non_null(w->in.values);
    memset(w->in.values, 0xab, (values + 1) * sizeof(float));
    if (with_state) {
        w->in.state = malloc((state + 1) * sizeof(float));
        assert_non_null(w->in.state);
        memset(w->in.state, 0xcd, (state + 1) * sizeof(float));
    }
    if (with_restored) {
        w->in.restored = calloc(shape->n_rows, 1);
        assert_non_null(w->in.restored);
    }
    memset(w->in.values + values, 0xcd, sizeof(float));
    w->st = cpr_client_restore_table(c, &d->q, NULL, 0, &w->in, &w->res);
    save_error(w->st, w->err);
}

static void window_free(window *w)
{
    free(w->in.values);
    free(w->in.state);
    free(w->in.restored);
}

static int past_window_written(const window *w)
{
    const cpr_restore_into *in = &w->in;
    uint32_t after;
    memcpy(&after, in->values + in->n_rows * in->dim, sizeof after);
    if (after != SENTINEL)
        return 1;
    if (in->state)
        memcpy(&after, in->state + in->n_rows * in->state_dim, sizeof after);
    return after != SENTINEL;
}

/* The first row of the window where the two differ, or n_rows. */
static uint64_t first_row_differing(const window *a, const window *b, int *dv, int *ds, int *dr)
{
    const cpr_restore_into *x = &a->in, *y = &b->in;
    for (uint64_t i = 0; i < x->n_rows; i++) {
        *dv = memcmp(x->values + i * x->dim, y->values + i * x->dim, x->dim * sizeof(float));
        *ds = x->state && memcmp(x->state + i * x->state_dim, y->state + i * x->state_dim,
                                 x->state_dim * sizeof(float));
        *dr = x->restored && x->restored[i] != y->restored[i];
        if (*dv || *ds || *dr)
            return i;
    }
    return x->n_rows;
}

static void compare_windows(job *j, const query *d, const window *local, const window *multi)
{
    const cpr_restore_into *in = &local->in;
    char what[700];
    snprintf(what, sizeof what, "restore_table t%u [%" PRIu64 ",+%" PRIu64 ") %s", in->table,
             in->row_base, in->n_rows, d->text);
    if (!outcomes_agree(j, what, local->st, local->err, multi->st, multi->err, &local->res,
                        &multi->res))
        return;
    int dv = 0, ds = 0, dr = 0;
    uint64_t i = first_row_differing(local, multi, &dv, &ds, &dr);
    if (i < in->n_rows)
        mismatch(j, "%s: row %" PRIu64 " differs (values %d state %d restored %d; local ckpt "
                 "%lld, multi ckpt %lld)", what, in->row_base + i, dv, ds, dr,
                 valued_at(in->table, in->row_base + i, local->in.values + i * in->dim),
                 valued_at(in->table, in->row_base + i, multi->in.values + i * in->dim));
    if (past_window_written(local) || past_window_written(multi))
        mismatch(j, "%s: written past the window", what);
}

/* restore_table of a window of one table, its rows mostly the query's range
 * (rows outside the window fail the call). */
static void run_table_query(job *j, query *d)
{
    j->t->tables++;
    const cpr_table_schema *t = &j->tables[rr(j, j->n_tables)];
    uint64_t base = rr(j, t->rows / 2 + 1), n_rows = 1 + rr(j, t->rows - base + 3);
    cpr_restore_into shape = {.table = t->table, .row_base = base, .n_rows = n_rows,
                              .dim = t->dim, .state_dim = t->state_dim};
    d->q.tables = NULL;
    d->q.n_tables = 0;
    d->n_shards = 0;
    if (rr(j, 8)) {
        d->ranges[0] = (cpr_row_range){base, base + n_rows};
        d->q.ranges = d->ranges;
        d->q.n_ranges = 1;
    }
    int with_state = rr(j, 3) != 0, with_restored = (int)rr(j, 2);
    describe_query(d);
    window local, multi;
    window_restore(j->w->local, d, &shape, with_state, with_restored, &local);
    window_restore(j->multi, d, &shape, with_state, with_restored, &multi);
    compare_windows(j, d, &local, &multi);
    window_free(&local);
    window_free(&multi);
}

static void run_queries(job *j, int count)
{
    for (int i = 0; i < count; i++) {
        query d;
        pick_query(j, &d);
        if (rr(j, 6) == 0)
            run_table_query(j, &d);
        else
            run_query(j, &d);
    }
}

/* ---- gc ------------------------------------------------------------------------- */

static void gc(job *j)
{
    j->t->gcs++;
    uint32_t keep = 1 + (uint32_t)rr(j, 2);
    cpr_gc_report local = {0}, multi = {0};
    char local_err[ERR_TEXT] = "", multi_err[ERR_TEXT] = "";
    cpr_status local_st = cpr_client_gc(j->w->local, j->name, keep, &local);
    save_error(local_st, local_err);
    cpr_status multi_st = cpr_client_gc(j->multi, j->name, keep, &multi);
    save_error(multi_st, multi_err);
    note(j, "  gc keep %u: local %s floor %" PRIu64 " removed %" PRIu64 "; multi %s floor %"
         PRIu64 " removed %" PRIu64, keep, cpr_status_name(local_st), local.floor,
         local.parts_removed, cpr_status_name(multi_st), multi.floor, multi.parts_removed);
    if (local_st != multi_st)
        mismatch(j, "gc keep %u: local %s (%s), multi %s (%s)", keep,
                 cpr_status_name(local_st), local_err, cpr_status_name(multi_st), multi_err);
    else if (local_st == CPR_OK && local.floor != multi.floor)
        mismatch(j, "gc keep %u: floor local %" PRIu64 ", multi %" PRIu64, keep, local.floor,
                 multi.floor);
    if (local_st || !local.floor)
        return;
    j->floor = local.floor;
    for (int m = 1; m < N_SUBSETS; m++) {
        cpr_gc_report r;
        cpr_status st = cpr_store_gc_floor(j->w->subset[m], j->name, local.floor, &r);
        if (st != CPR_NOT_FOUND && st != CPR_FAILED_PRECONDITION)
            must(j, "gc_floor of a subset store", st);
    }
}

/* A restore as of every id up to just past the floor: the statuses agree. */
static void below_floor(job *j)
{
    for (uint64_t a = 1; j->floor && a <= j->floor + 1; a++) {
        query d;
        memset(&d, 0, sizeof d);
        d.q.job = j->name;
        d.q.as_of = a;
        run_query(j, &d);
    }
}

/* ---- one seed -------------------------------------------------------------------- */

/* The job's nodes (2 or 3 of the daemons, in a random order) and tables. */
static void job_open(job *j)
{
    int order[N_DAEMONS] = {0, 1, 2};
    for (int i = N_DAEMONS - 1; i > 0; i--) {
        int k = (int)rr(j, (uint64_t)i + 1), swap = order[i];
        order[i] = order[k];
        order[k] = swap;
    }
    char target[1024];
    size_t len = 0;
    appendf(target, sizeof target, &len, "grpc://");
    j->n_nodes = 2 + (int)rr(j, 2);
    for (int i = 0; i < j->n_nodes; i++) {
        j->daemon_of_node[i] = order[i];
        appendf(target, sizeof target, &len, "%s%s", i ? "," : "", j->w->daemon[order[i]].addr);
    }
    cpr_client_options o = {.no_retries = 1};
    assert_status(CPR_OK, cpr_client_open(target, &o, &j->multi));
    j->n_tables = 1 + rr(j, 2);
    for (size_t t = 0; t < j->n_tables; t++) {
        j->tables[t].table = (uint32_t)(t == 0 ? 1 + rr(j, 3) : j->tables[0].table + 1 +
                                                                    rr(j, 3));
        j->tables[t].rows = 5 + rr(j, rr(j, 4) == 0 ? 3000 : 200);
        j->tables[t].dim = 1 + (uint32_t)rr(j, 6);
        j->tables[t].state_dim = (uint32_t)rr(j, 3);
    }
    note(j, "seed %" PRIu64 ": job %s over %s (nodes 0..%d: daemons %d,%d,%d, in that order)",
         j->seed, j->name, target, j->n_nodes - 1, order[0], order[1], order[2]);
    for (size_t t = 0; t < j->n_tables; t++)
        note(j, "  table %u: rows %" PRIu64 " dim %u state_dim %u", j->tables[t].table,
             j->tables[t].rows, j->tables[t].dim, j->tables[t].state_dim);
}

static void run_seed(world *w, tally *t, uint64_t seed)
{
    job *j = calloc(1, sizeof *j);
    assert_non_null(j);
    j->w = w;
    j->t = t;
    j->seed = seed;
    cpr_rng_seed(&j->rng, seed);
    snprintf(j->name, sizeof j->name, "diff-%" PRIu64, seed);
    job_open(j);
    j->next_ckpt = 1 + rr(j, 3);
    int with_gc = rr(j, 4) == 0;
    write_checkpoints(j, 3 + (int)rr(j, 10));
    run_queries(j, 25);
    if (with_gc) {
        gc(j);
        run_queries(j, 20);
        below_floor(j);
        write_checkpoints(j, 1 + (int)rr(j, 4));
        run_queries(j, 15);
        gc(j);
        run_queries(j, 10);
        below_floor(j);
    }
    cpr_client_close(j->multi);
    free(j->history);
    free(j);
}

/* ---- the daemons and the oracles --------------------------------------------------- */

static void world_up(world *w)
{
    char path[4200];
    w->dir = tu_mkdtemp("cpr-diff");
    for (int d = 0; d < N_DAEMONS; d++) {
        snprintf(path, sizeof path, "%s/daemon%d", w->dir, d);
        ch_start(&w->daemon[d], path);
    }
    cpr_client_options local = {.store = {.no_sync = 1}};
    snprintf(path, sizeof path, "local://%s/local", w->dir);
    assert_status(CPR_OK, cpr_client_open(path, &local, &w->local));
    cpr_store_options so = {.no_sync = 1};
    for (int m = 1; m < N_SUBSETS; m++) {
        snprintf(path, sizeof path, "%s/subset%d", w->dir, m);
        assert_status(CPR_OK, cpr_store_open(path, &so, &w->subset[m]));
    }
}

static void world_down(world *w)
{
    cpr_client_close(w->local);
    for (int m = 1; m < N_SUBSETS; m++)
        cpr_store_close(w->subset[m]);
    for (int d = 0; d < N_DAEMONS; d++)
        ch_stop(&w->daemon[d]); /* a clean exit: no daemon crashed meanwhile */
    tu_rmtree(w->dir);
    free(w->dir);
}

/* CPR_DIFF_SEEDS=FIRST:COUNT; 0 when it is not set (the default range). */
static int seeds_from_env(uint64_t *first, uint64_t *count)
{
    const char *env = getenv("CPR_DIFF_SEEDS");
    if (!env || !*env)
        return 0;
    char *colon = NULL, *end = NULL;
    errno = 0;
    *first = strtoull(env, &colon, 10);
    if (errno || colon == env || *colon != ':')
        fail_msg("CPR_DIFF_SEEDS=%s: want FIRST:COUNT", env);
    *count = strtoull(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end)
        fail_msg("CPR_DIFF_SEEDS=%s: want FIRST:COUNT", env);
    return 1;
}

static void test_restores_match_one_store(void **state)
{
    (void)state;
    uint64_t first = DEFAULT_FIRST_SEED, count = DEFAULT_SEEDS;
    int by_hand = seeds_from_env(&first, &count);
    world w = {0};
    tally t = {0};
    world_up(&w);
    for (uint64_t seed = first; seed - first < count; seed++)
        run_seed(&w, &t, seed);
    world_down(&w);
    print_message("seeds %" PRIu64 "..%" PRIu64 ": queries %" PRIu64 " (named %" PRIu64
                  ", merged %" PRIu64 "), restore_table %" PRIu64 ", compared %" PRIu64
                  ", equal errors %" PRIu64 ", gc %" PRIu64 ", failures %" PRIu64 "\n", first,
                  first + count - 1, t.queries, t.named, t.merged, t.tables, t.compared,
                  t.equal_errors, t.gcs, t.failures);
    if (t.failures)
        fail_msg("%" PRIu64 " comparisons differed (each above, after its seed's history)",
                 t.failures);
    if (by_hand)
        return;
    /* The default seeds reach every path compared. */
    assert_true(t.merged > 0);
    assert_true(t.named > 0);
    assert_true(t.tables > 0);
    assert_true(t.gcs > 0);
    assert_true(t.equal_errors > 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restores_match_one_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
