/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The read-only and maintenance commands of cprctl: list, inspect, verify,
 * gc and stats. Each makes one or two client calls and prints what came
 * back, as an aligned text table or as one JSON object (ctl.h). Whether a
 * checkpoint is a consistent cut is decided here from the merged part list,
 * by the store's definition (cpr/store.h), so that `inspect` can also say
 * why a checkpoint is not one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/codec.h"
#include "cpr_common.h"
#include "ctl.h"

#define MAX_SHARDS_LISTED 1024 /* missing shards named one by one, at most */
#define MAX_PROBLEMS_JSON 10000

/* ---- list ------------------------------------------------------------------------- */

static int list_jobs(ctl *c)
{
    char **jobs = NULL;
    size_t n = 0;
    cpr_status st = cpr_client_list_jobs(c->client, &jobs, &n);
    if (st)
        return ctl_fail(c, st);
    int rc = 0;
    if (c->json) {
        ctl_json j;
        ctl_json_begin(c, &j);
        cpri_json *names = ctl_jarray(&j);
        for (size_t i = 0; i < n && names; i++)
            ctl_jchild(&j, names, NULL, cpri_json_string(jobs[i]));
        ctl_jchild(&j, j.root, "jobs", names);
        rc = ctl_json_emit(c, &j, 0);
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", jobs[i]);
    }
    cpr_names_free(jobs, n);
    return rc;
}

static cpri_json *part_json(ctl_json *j, const cpr_part_info *p)
{
    cpri_json *o = ctl_jobject(j);
    ctl_jnum(j, o, "checkpoint", p->checkpoint);
    ctl_jnum(j, o, "shard", p->shard);
    ctl_jnum(j, o, "num_shards", p->num_shards);
    ctl_jstr(j, o, "kind", cpr_kind_name(p->kind));
    ctl_jnum(j, o, "step", p->step);
    ctl_jnum(j, o, "rows", p->rows);
    ctl_jnum(j, o, "bytes", p->bytes);
    ctl_jbool(j, o, "committed", p->committed);
    ctl_jbool(j, o, "consistent", p->consistent);
    ctl_jnum(j, o, "base", p->base);
    cpri_json *codecs = ctl_jarray(j); /* each codec its row blocks use */
    for (int c = CPR_CODEC_F32; c <= CPR_CODEC_INT4 && codecs; c++)
        if (p->codecs & (1u << c))
            ctl_jchild(j, codecs, NULL, cpri_json_string(cpr_codec_name((cpr_codec)c)));
    ctl_jchild(j, o, "codecs", codecs);
    return o;
}

static void parts_header(ctl_table *t, int with_checkpoint)
{
    if (with_checkpoint)
        ctl_table_cell(t, "CHECKPOINT");
    ctl_table_cell(t, "SHARD");
    ctl_table_cell(t, "KIND");
    ctl_table_cell(t, "STEP");
    ctl_table_cell(t, "ROWS");
    ctl_table_cell(t, "BYTES");
    ctl_table_cell(t, "CODEC");
    ctl_table_cell(t, "COMMITTED");
    ctl_table_cell(t, "CONSISTENT");
    ctl_table_cell(t, "BASE");
}

static void part_row(ctl_table *t, const cpr_part_info *p, int with_checkpoint)
{
    if (with_checkpoint)
        ctl_table_cell(t, "%llu", (unsigned long long)p->checkpoint);
    ctl_table_cell(t, "%u/%u", p->shard, p->num_shards);
    ctl_table_cell(t, "%s", cpr_kind_name(p->kind));
    ctl_table_cell(t, "%llu", (unsigned long long)p->step);
    ctl_table_cell(t, "%llu", (unsigned long long)p->rows);
    ctl_table_cell(t, "%llu", (unsigned long long)p->bytes);
    char codecs[64];
    ctl_table_cell(t, "%s", cpr_codecs_name(p->codecs, codecs, sizeof codecs));
    ctl_table_cell(t, "%s", ctl_yes_no(p->committed));
    ctl_table_cell(t, "%s", ctl_yes_no(p->consistent));
    if (p->base)
        ctl_table_cell(t, "%llu", (unsigned long long)p->base);
    else
        ctl_table_cell(t, "-");
}

/* Print parts[0..n) as a table (text mode). */
static int print_parts(const cpr_part_info *parts, size_t n, int with_checkpoint)
{
    ctl_table t;
    ctl_table_init(&t, with_checkpoint ? 10 : 9);
    parts_header(&t, with_checkpoint);
    for (size_t i = 0; i < n; i++)
        part_row(&t, &parts[i], with_checkpoint);
    return ctl_table_print(&t, stdout);
}

static int list_parts(ctl *c, const char *job)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    uint64_t cut = 0;
    cpr_status st = cpr_client_list(c->client, job, &parts, &n);
    if (st == CPR_OK) {
        st = cpr_client_latest_cut(c->client, job, &cut);
        if (st == CPR_NOT_FOUND)
            st = CPR_OK; /* no cut: cut stays 0, shown as none */
    }
    if (st) {
        free(parts);
        return ctl_fail(c, st);
    }
    int rc = 0;
    if (c->json) {
        ctl_json j;
        ctl_json_begin(c, &j);
        ctl_jstr(&j, j.root, "job", job);
        cpri_json *list = ctl_jarray(&j);
        for (size_t i = 0; i < n && list; i++)
            ctl_jchild(&j, list, NULL, part_json(&j, &parts[i]));
        ctl_jchild(&j, j.root, "parts", list);
        if (cut)
            ctl_jnum(&j, j.root, "latest_cut", cut);
        else /* none yet: null, so that the key is always there */
            ctl_jchild(&j, j.root, "latest_cut", cpri_json_null());
        rc = ctl_json_emit(c, &j, 0);
    } else {
        rc = print_parts(parts, n, 1) ? EXIT_FAILED : 0;
        if (cut)
            printf("latest consistent cut: %llu\n", (unsigned long long)cut);
        else
            printf("latest consistent cut: none\n");
    }
    free(parts);
    return rc;
}

int ctl_cmd_list(ctl *c)
{
    return c->n_args ? list_parts(c, c->args[0]) : list_jobs(c);
}

/* ---- inspect ------------------------------------------------------------------------ */

/* What the parts at one checkpoint id say about it being a cut. */
typedef struct cut_check {
    uint32_t num_shards;     /* as the committed parts say (else any part) */
    int shards_agree;        /* every part says the same num_shards */
    uint64_t missing;        /* shards < num_shards without a committed part */
    uint64_t extra;          /* committed parts of shards >= num_shards */
    uint64_t inconsistent;   /* committed but not consistent */
    uint64_t rows, bytes;
} cut_check;

/* num_shards as the committed parts say it (all parts if none is committed:
 * an open part's claim is all there is); the largest if they disagree. */
static uint32_t shards_claimed(const cpr_part_info *at, size_t n, int *agree)
{
    int any_committed = 0;
    uint32_t want = 0;
    for (size_t i = 0; i < n; i++)
        any_committed |= at[i].committed;
    *agree = 1;
    for (size_t i = 0; i < n; i++) {
        if (any_committed && !at[i].committed)
            continue;
        if (want && at[i].num_shards != want)
            *agree = 0;
        if (at[i].num_shards > want)
            want = at[i].num_shards;
    }
    return want;
}

/* Shards in [from, to) are missing: count them, name the first ones. */
static void note_missing(ctl_json *j, cpri_json *names, uint64_t from, uint64_t to,
                         cut_check *k, ctl_table *text)
{
    if (from >= to)
        return;
    for (uint64_t s = from; s < to && k->missing + (s - from) < MAX_SHARDS_LISTED; s++)
        if (names)
            ctl_jchild(j, names, NULL, cpri_json_number((double)s));
    if (text && to - from == 1)
        ctl_table_cell(text, "%llu", (unsigned long long)from);
    else if (text)
        ctl_table_cell(text, "%llu-%llu", (unsigned long long)from,
                       (unsigned long long)(to - 1));
    k->missing += to - from;
}

/* Parts at[0..n) are one checkpoint's, ordered by shard. Missing shards go
 * to `names` (JSON, may be NULL) or `text` (one cell per range, may be NULL). */
static void check_cut(const cpr_part_info *at, size_t n, cut_check *k, ctl_json *j,
                      cpri_json *names, ctl_table *text)
{
    memset(k, 0, sizeof *k);
    k->num_shards = shards_claimed(at, n, &k->shards_agree);
    uint64_t next = 0; /* shards below it are accounted for */
    for (size_t i = 0; i < n; i++) {
        k->rows += at[i].rows;
        k->bytes += at[i].bytes;
        if (!at[i].committed)
            continue;
        if (at[i].shard >= k->num_shards) {
            k->extra++;
            continue;
        }
        note_missing(j, names, next, at[i].shard, k, text);
        next = (uint64_t)at[i].shard + 1;
        if (!at[i].consistent)
            k->inconsistent++;
    }
    note_missing(j, names, next, k->num_shards, k, text);
}

/* The verdict is cpr/types.h's rule; cut_check only explains it. */
static int is_cut(const cpr_part_info *at, size_t n)
{
    return cpr_cuts(at, n, 0, NULL, 0) == 1;
}

static int inspect_json(ctl *c, const cpr_part_info *at, size_t n)
{
    ctl_json j;
    cut_check k;
    ctl_json_begin(c, &j);
    cpri_json *missing = ctl_jarray(&j);
    check_cut(at, n, &k, &j, missing, NULL);
    ctl_jstr(&j, j.root, "job", c->args[0]);
    ctl_jnum(&j, j.root, "checkpoint", c->checkpoint);
    ctl_jbool(&j, j.root, "consistent_cut", is_cut(at, n));
    ctl_jnum(&j, j.root, "num_shards", k.num_shards);
    ctl_jbool(&j, j.root, "num_shards_agree", k.shards_agree);
    ctl_jchild(&j, j.root, "missing_shards", missing);
    ctl_jnum(&j, j.root, "missing_count", k.missing);
    ctl_jnum(&j, j.root, "inconsistent_count", k.inconsistent);
    ctl_jnum(&j, j.root, "extra_count", k.extra);
    ctl_jnum(&j, j.root, "rows", k.rows);
    ctl_jnum(&j, j.root, "bytes", k.bytes);
    cpri_json *list = ctl_jarray(&j);
    for (size_t i = 0; i < n && list; i++)
        ctl_jchild(&j, list, NULL, part_json(&j, &at[i]));
    ctl_jchild(&j, j.root, "parts", list);
    return ctl_json_emit(c, &j, 0);
}

/* The missing shards as comma-separated ranges (the cells of `ranges`). */
static void print_ranges(const ctl_table *ranges, const cut_check *k)
{
    printf("missing shards:   ");
    if (!k->missing)
        printf("none");
    for (size_t i = 0; i < ranges->n_cells && i < 32; i++)
        printf("%s%s", i ? ", " : "", ranges->cells[i]);
    if (ranges->n_cells > 32)
        printf(", ...");
    if (k->missing)
        printf(" (%llu of %u)", (unsigned long long)k->missing, k->num_shards);
    printf("\n");
}

static int inspect_text(ctl *c, const cpr_part_info *at, size_t n)
{
    cut_check k;
    ctl_table ranges;
    ctl_table_init(&ranges, 1);
    check_cut(at, n, &k, NULL, NULL, &ranges);
    printf("job %s, checkpoint %llu\n", c->args[0], (unsigned long long)c->checkpoint);
    printf("consistent cut:   %s\n", ctl_yes_no(is_cut(at, n)));
    printf("num_shards:       %u%s\n", k.num_shards,
           k.shards_agree ? "" : " (the parts disagree)");
    print_ranges(&ranges, &k);
    ctl_table_release(&ranges);
    printf("not consistent:   %llu\n", (unsigned long long)k.inconsistent);
    if (k.extra)
        printf("beyond num_shards: %llu\n", (unsigned long long)k.extra);
    printf("total:            %llu rows, %llu bytes\n\n", (unsigned long long)k.rows,
           (unsigned long long)k.bytes);
    return print_parts(at, n, 0) ? EXIT_FAILED : 0;
}

int ctl_cmd_inspect(ctl *c)
{
    cpr_part_info *parts = NULL;
    size_t n = 0, first = 0, end = 0;
    cpr_status st = cpr_client_list(c->client, c->args[0], &parts, &n);
    if (st)
        return ctl_fail(c, st);
    while (first < n && parts[first].checkpoint < c->checkpoint)
        first++;
    end = first;
    while (end < n && parts[end].checkpoint == c->checkpoint)
        end++;
    int rc = 0;
    if (end == first)
        rc = ctl_fail(c, cpr_fail(CPR_NOT_FOUND, "job %s has no part at checkpoint %llu",
                                  c->args[0], (unsigned long long)c->checkpoint));
    else
        rc = c->json ? inspect_json(c, parts + first, end - first)
                     : inspect_text(c, parts + first, end - first);
    free(parts);
    return rc;
}

/* ---- verify ---------------------------------------------------------------------------- */

typedef struct verify_out {
    ctl_json *j;             /* JSON mode: problems collected here */
    cpri_json *problems;
    uint64_t seen;
} verify_out;

static void on_problem(void *ctx, const char *what, const char *where)
{
    verify_out *v = ctx;
    v->seen++;
    if (!v->j) {
        printf("problem: %s: %s\n", where, what);
        return;
    }
    if (v->seen > MAX_PROBLEMS_JSON || !v->problems)
        return;
    cpri_json *p = ctl_jobject(v->j);
    ctl_jstr(v->j, p, "what", what);
    ctl_jstr(v->j, p, "where", where);
    ctl_jchild(v->j, v->problems, NULL, p);
}

static void report_table(const cpr_verify_report *r)
{
    ctl_table t;
    ctl_table_init(&t, 2);
    ctl_table_cell(&t, "rows checked");
    ctl_table_cell(&t, "%llu", (unsigned long long)r->rows_checked);
    ctl_table_cell(&t, "blobs checked");
    ctl_table_cell(&t, "%llu", (unsigned long long)r->blobs_checked);
    ctl_table_cell(&t, "bytes checked");
    ctl_table_cell(&t, "%llu", (unsigned long long)r->bytes_checked);
    ctl_table_cell(&t, "problems");
    ctl_table_cell(&t, "%llu", (unsigned long long)r->problems);
    ctl_table_print(&t, stdout);
}

int ctl_cmd_verify(ctl *c)
{
    const char *job = c->n_args ? c->args[0] : NULL;
    ctl_json j = {0};
    verify_out v = {c->json ? &j : NULL, NULL, 0};
    cpr_verify_report r = {0};
    if (c->json) {
        ctl_json_begin(c, &j);
        v.problems = ctl_jarray(&j);
    }
    cpr_status st = cpr_client_verify(c->client, job, on_problem, &v, &r);
    if (st != CPR_OK && st != CPR_CORRUPT) {
        cpri_json_free(v.problems);
        cpri_json_free(j.root);
        return ctl_fail(c, st);
    }
    int rc = st ? EXIT_FAILED : 0;
    if (st)
        fprintf(stderr, "cprctl: verify: %s: %s\n", cpr_status_name(st), cpr_errmsg());
    if (!c->json) {
        report_table(&r);
        printf("%s\n", st ? "result: PROBLEMS FOUND" : "result: intact");
        return rc;
    }
    if (job)
        ctl_jstr(&j, j.root, "job", job);
    ctl_jbool(&j, j.root, "intact", st == CPR_OK);
    ctl_jnum(&j, j.root, "rows_checked", r.rows_checked);
    ctl_jnum(&j, j.root, "blobs_checked", r.blobs_checked);
    ctl_jnum(&j, j.root, "bytes_checked", r.bytes_checked);
    ctl_jnum(&j, j.root, "problem_count", r.problems);
    ctl_jchild(&j, j.root, "problems", v.problems);
    return ctl_json_emit(c, &j, rc);
}

/* ---- abort ------------------------------------------------------------------------------ */

int ctl_cmd_abort(ctl *c)
{
    const char *job = c->args[0];
    cpr_status st = cpr_client_abort(c->client, job, c->shard, c->checkpoint);
    if (st)
        return ctl_fail(c, st);
    if (c->json) {
        ctl_json j;
        ctl_json_begin(c, &j);
        ctl_jstr(&j, j.root, "job", job);
        ctl_jnum(&j, j.root, "shard", c->shard);
        ctl_jnum(&j, j.root, "checkpoint", c->checkpoint);
        ctl_jbool(&j, j.root, "aborted", 1);
        return ctl_json_emit(c, &j, 0);
    }
    printf("part %s/%u/%llu: not open any more (aborted, or there was none)\n", job, c->shard,
           (unsigned long long)c->checkpoint);
    return 0;
}

/* ---- where ------------------------------------------------------------------------------ */

int ctl_cmd_where(ctl *c)
{
    cpr_part_id id = {c->args[0], c->shard, c->checkpoint};
    char *text = NULL;
    cpr_status st = cpr_client_where(c->client, &id, &text);
    if (st)
        return ctl_fail(c, st);
    if (!c->json) {
        fputs(text, stdout);
        free(text);
        return 0;
    }
    ctl_json j;
    ctl_json_begin(c, &j);
    ctl_jstr(&j, j.root, "job", id.job);
    ctl_jnum(&j, j.root, "shard", id.shard);
    ctl_jnum(&j, j.root, "checkpoint", id.checkpoint);
    cpri_json *places = ctl_jarray(&j);
    for (char *line = text, *nl; places && *line; line = nl + 1) { /* "NODE: LOCATION\n" */
        nl = strchr(line, '\n');
        *nl = '\0';
        char *sep = strstr(line, ": ");
        cpri_json *o = ctl_jobject(&j);
        if (sep)
            *sep = '\0';
        ctl_jstr(&j, o, "node", line);
        ctl_jstr(&j, o, "location", sep ? sep + 2 : "");
        ctl_jchild(&j, places, NULL, o);
    }
    ctl_jchild(&j, j.root, "places", places);
    free(text);
    return ctl_json_emit(c, &j, 0);
}

/* ---- gc --------------------------------------------------------------------------------- */

int ctl_cmd_gc(ctl *c)
{
    const char *job = c->n_args ? c->args[0] : NULL;
    cpr_gc_report r = {0};
    cpr_status st = cpr_client_gc(c->client, job, c->keep, &r);
    if (st)
        return ctl_fail(c, st);
    uint64_t reclaimed = r.bytes_before > r.bytes_after ? r.bytes_before - r.bytes_after : 0;
    if (c->json) {
        ctl_json j;
        ctl_json_begin(c, &j);
        if (job)
            ctl_jstr(&j, j.root, "job", job);
        ctl_jnum(&j, j.root, "keep", c->keep);
        ctl_jnum(&j, j.root, "floor", r.floor);
        ctl_jnum(&j, j.root, "parts_removed", r.parts_removed);
        ctl_jnum(&j, j.root, "versions_removed", r.versions_removed);
        ctl_jnum(&j, j.root, "uncommitted_removed", r.uncommitted_removed);
        ctl_jnum(&j, j.root, "bytes_before", r.bytes_before);
        ctl_jnum(&j, j.root, "bytes_after", r.bytes_after);
        ctl_jnum(&j, j.root, "bytes_reclaimed", reclaimed);
        return ctl_json_emit(c, &j, 0);
    }
    ctl_table t;
    ctl_table_init(&t, 2);
    ctl_table_cell(&t, "job");
    ctl_table_cell(&t, "%s", job ? job : "(every job)");
    ctl_table_cell(&t, "cuts to keep");
    if (c->keep)
        ctl_table_cell(&t, "%u", c->keep);
    else
        ctl_table_cell(&t, "(the storage's default)");
    ctl_table_cell(&t, "floor");
    ctl_table_cell(&t, "%llu", (unsigned long long)r.floor);
    ctl_table_cell(&t, "parts removed");
    ctl_table_cell(&t, "%llu", (unsigned long long)r.parts_removed);
    ctl_table_cell(&t, "row versions dropped");
    ctl_table_cell(&t, "%llu", (unsigned long long)r.versions_removed);
    ctl_table_cell(&t, "uncommitted removed");
    ctl_table_cell(&t, "%llu", (unsigned long long)r.uncommitted_removed);
    ctl_table_cell(&t, "bytes before");
    ctl_table_cell(&t, "%llu", (unsigned long long)r.bytes_before);
    ctl_table_cell(&t, "bytes after");
    ctl_table_cell(&t, "%llu", (unsigned long long)r.bytes_after);
    ctl_table_cell(&t, "bytes reclaimed");
    ctl_table_cell(&t, "%llu", (unsigned long long)reclaimed);
    return ctl_table_print(&t, stdout) ? EXIT_FAILED : 0;
}

/* ---- stats -------------------------------------------------------------------------------- */

#define N_COUNTERS 8

static void counters_of(const cpr_store_stats *s, const char *names[N_COUNTERS],
                        uint64_t values[N_COUNTERS])
{
    static const char *const keys[N_COUNTERS] = {
        "jobs", "parts_committed", "parts_open", "rows_in",
        "bytes_in", "rows_out", "bytes_out", "store_bytes"};
    const uint64_t v[N_COUNTERS] = {s->jobs, s->parts_committed, s->parts_open, s->rows_in,
                                    s->bytes_in, s->rows_out, s->bytes_out, s->store_bytes};
    for (int i = 0; i < N_COUNTERS; i++) {
        names[i] = keys[i];
        values[i] = v[i];
    }
}

int ctl_cmd_stats(ctl *c)
{
    cpr_store_stats s;
    const char *names[N_COUNTERS];
    uint64_t values[N_COUNTERS];
    cpr_status st = cpr_client_stats(c->client, &s);
    if (st)
        return ctl_fail(c, st);
    counters_of(&s, names, values);
    if (c->json) {
        ctl_json j;
        ctl_json_begin(c, &j);
        for (int i = 0; i < N_COUNTERS; i++)
            ctl_jnum(&j, j.root, names[i], values[i]);
        cpri_json *errors = ctl_jobject(&j);
        for (int k = 1; k < CPR_STATUS_COUNT_ && errors; k++)
            if (s.errors[k])
                ctl_jnum(&j, errors, cpr_status_name((cpr_status)k), s.errors[k]);
        ctl_jchild(&j, j.root, "errors", errors);
        return ctl_json_emit(c, &j, 0);
    }
    ctl_table t;
    ctl_table_init(&t, 2);
    for (int i = 0; i < N_COUNTERS; i++) {
        ctl_table_cell(&t, "%s", names[i]);
        ctl_table_cell(&t, "%llu", (unsigned long long)values[i]);
    }
    for (int k = 1; k < CPR_STATUS_COUNT_; k++) {
        if (!s.errors[k])
            continue;
        ctl_table_cell(&t, "errors %s", cpr_status_name((cpr_status)k));
        ctl_table_cell(&t, "%llu", (unsigned long long)s.errors[k]);
    }
    return ctl_table_print(&t, stdout) ? EXIT_FAILED : 0;
}
