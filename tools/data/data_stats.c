/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `cpr-data stats`: one pass over a Criteo file with the library reader,
 * counting rows, positives, malformed lines and, per table, missing values,
 * distinct raw categorical values and distinct hashed rows. Distinct counts
 * are exact: open-addressing hash sets of 64-bit keys, which together hold
 * at most --max-distinct values; past that cap a set stops growing and its
 * count becomes a lower bound (reported as distinct_exact false) rather
 * than the run failing or swapping.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/data.h"
#include "cpr_common.h"
#include "cpr_json.h"
#include "data_tool.h"

#define SET_MIN_BITS 10
#define MALFORMED_SHOWN 10

/* ---- a set of 64-bit keys ----------------------------------------------------- */

/* Slot value 0 means empty; key 0 is tracked by has_zero instead. */
typedef struct key_set {
    uint64_t *slots;
    unsigned bits;      /* capacity = 2^bits */
    uint64_t used;      /* non-zero keys in slots */
    int has_zero;
    int saturated;      /* a key was dropped at the cap */
} key_set;

typedef struct set_budget {
    uint64_t held;      /* keys in all sets */
    uint64_t max;
} set_budget;

static uint64_t set_count(const key_set *s)
{
    return s->used + (uint64_t)s->has_zero;
}

static size_t slot_of(uint64_t key, unsigned bits)
{
    /* Fibonacci hashing: the high bits of key * 2^64/phi spread any keys. */
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

static void place(uint64_t *slots, unsigned bits, uint64_t key)
{
    size_t mask = ((size_t)1 << bits) - 1, i = slot_of(key, bits);
    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = key;
}

/* Double the capacity (or make the first table). */
static cpr_status set_grow(key_set *s)
{
    unsigned bits = s->slots ? s->bits + 1 : SET_MIN_BITS;
    uint64_t *slots = calloc((size_t)1 << bits, sizeof *slots);
    if (!slots)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a set of 2^%u keys "
                        "(lower --max-distinct)", bits);
    for (size_t i = 0; s->slots && i < ((size_t)1 << s->bits); i++)
        if (s->slots[i])
            place(slots, bits, s->slots[i]);
    free(s->slots);
    s->slots = slots;
    s->bits = bits;
    return CPR_OK;
}

static int set_contains(const key_set *s, uint64_t key)
{
    if (key == 0)
        return s->has_zero;
    if (!s->slots)
        return 0;
    size_t mask = ((size_t)1 << s->bits) - 1, i = slot_of(key, s->bits);
    for (; s->slots[i] != 0; i = (i + 1) & mask)
        if (s->slots[i] == key)
            return 1;
    return 0;
}

static cpr_status set_add(key_set *s, uint64_t key, set_budget *budget)
{
    if (set_contains(s, key))
        return CPR_OK;
    if (budget->held >= budget->max) {
        s->saturated = 1;
        return CPR_OK;
    }
    budget->held++;
    if (key == 0) {
        s->has_zero = 1;
        return CPR_OK;
    }
    /* Keep the load at most 3/4 so probes stay short. */
    if (!s->slots || (s->used + 1) * 4 > ((uint64_t)3 << s->bits)) {
        cpr_status st = set_grow(s);
        if (st)
            return st;
    }
    place(s->slots, s->bits, key);
    s->used++;
    return CPR_OK;
}

/* ---- the pass over the file ---------------------------------------------------- */

typedef struct stats {
    uint64_t rows, positives, lines, malformed, shown;
    uint64_t missing[CPR_CRITEO_SPARSE];
    key_set values[CPR_CRITEO_SPARSE];  /* raw 32-bit categoricals */
    key_set hashed[CPR_CRITEO_SPARSE];  /* row indices, missing included */
    set_budget budget;
    const char *path;
    cpr_criteo_format format;
    double seconds;
} stats;

static void show_malformed(void *ctx, uint64_t line, const char *reason)
{
    stats *s = ctx;
    if (s->shown < MALFORMED_SHOWN)
        fprintf(stderr, "cpr-data: %s:%llu: %s\n", s->path, (unsigned long long)line,
                reason);
    else if (s->shown == MALFORMED_SHOWN)
        fprintf(stderr, "cpr-data: further malformed lines are counted, not shown\n");
    s->shown++;
}

static cpr_status count_sample(stats *s, const cpr_criteo_sample *x)
{
    cpr_status st = CPR_OK;
    s->rows++;
    s->positives += x->label;
    for (int t = 0; t < CPR_CRITEO_SPARSE && st == CPR_OK; t++) {
        if (x->sparse_present & (1u << t))
            st = set_add(&s->values[t], x->raw[t], &s->budget);
        else
            s->missing[t]++;
        if (st == CPR_OK)
            st = set_add(&s->hashed[t], x->sparse[t], &s->budget);
    }
    return st;
}

static cpr_status scan(const stats_opts *o, stats *s)
{
    cpr_criteo_options ropts = {
        .rows_per_table = o->rows_per_table,
        .skip_malformed = !o->strict,
        .on_malformed = show_malformed,
        .malformed_ctx = s,
    };
    cpr_criteo_reader *reader = NULL;
    cpr_criteo_sample sample;
    double t0 = cpri_now_s();
    cpr_status st = cpr_criteo_open(o->path, &ropts, &reader);
    if (st)
        goto out;
    s->format = cpr_criteo_format_of(reader);
    /* Progress on stderr once a second after the first: a Criteo day is
     * hours of reading, a test file none. */
    double next_progress = t0 + 1.0;
    for (uint64_t n = 1;; n++) {
        st = cpr_criteo_next(reader, &sample);
        if (st)
            break;
        st = count_sample(s, &sample);
        if (st)
            break;
        if ((n & 0xffff) == 0 && cpri_now_s() >= next_progress) {
            fprintf(stderr, "cpr-data: stats: %llu rows, %.1f s\n", (unsigned long long)n,
                    cpri_now_s() - t0);
            next_progress = cpri_now_s() + 1.0;
        }
    }
    if (st == CPR_NOT_FOUND)
        st = CPR_OK;
    s->lines = cpr_criteo_line(reader);
    s->malformed = cpr_criteo_malformed(reader);
out:
    cpr_criteo_close(reader);
    s->seconds = cpri_now_s() - t0;
    return st;
}

/* ---- output ------------------------------------------------------------------ */

static int exact(const stats *s)
{
    for (int t = 0; t < CPR_CRITEO_SPARSE; t++)
        if (s->values[t].saturated || s->hashed[t].saturated)
            return 0;
    return 1;
}

static double rate(const stats *s)
{
    return s->rows ? (double)s->positives / (double)s->rows : 0.0;
}

/* An array of one count per table; NULL on allocation failure. */
static cpri_json *per_table(const stats *s, int which)
{
    cpri_json *array = cpri_json_array();
    for (int t = 0; array && t < CPR_CRITEO_SPARSE; t++) {
        uint64_t n = which == 0 ? set_count(&s->values[t])
                   : which == 1 ? set_count(&s->hashed[t]) : s->missing[t];
        if (cpri_json_append(array, cpri_json_number((double)n)) != 0) {
            cpri_json_free(array);
            return NULL;
        }
    }
    return array;
}

static int print_json(const stats_opts *o, const stats *s)
{
    cpri_json *root = cpri_json_object();
    int failed = !root;
    failed = failed || cpri_json_add_string(root, "file", o->path) ||
             cpri_json_add_string(root, "format",
                                 s->format == CPR_CRITEO_CSV ? "csv" : "tsv") ||
             cpri_json_add_number(root, "lines", (double)s->lines) ||
             cpri_json_add_number(root, "rows", (double)s->rows) ||
             cpri_json_add_number(root, "positives", (double)s->positives) ||
             cpri_json_add_number(root, "positive_rate", rate(s)) ||
             cpri_json_add_number(root, "malformed", (double)s->malformed) ||
             cpri_json_add_number(root, "rows_per_table",
                                 (double)(o->rows_per_table ? o->rows_per_table
                                                            : CPR_CRITEO_DEFAULT_ROWS)) ||
             cpri_json_add_child(root, "distinct", per_table(s, 0)) ||
             cpri_json_add_child(root, "distinct_rows", per_table(s, 1)) ||
             cpri_json_add_child(root, "missing", per_table(s, 2)) ||
             cpri_json_add_bool(root, "distinct_exact", exact(s)) ||
             cpri_json_add_number(root, "seconds", s->seconds) ||
             cpri_json_print(root, stdout);
    cpri_json_free(root);
    if (failed)
        fprintf(stderr, "cpr-data: could not print the JSON result\n");
    return failed ? -1 : 0;
}

static int print_table(const stats *s)
{
    const char *bound = exact(s) ? "" : ">=";
    printf("cpr-data stats: %s (%s)\n", s->path, s->format == CPR_CRITEO_CSV ? "csv" : "tsv");
    printf("  lines       %llu\n", (unsigned long long)s->lines);
    printf("  rows        %llu\n", (unsigned long long)s->rows);
    printf("  positives   %llu (%.2f%%)\n", (unsigned long long)s->positives,
           100.0 * rate(s));
    printf("  malformed   %llu\n\n", (unsigned long long)s->malformed);
    printf("  %-6s %14s %14s %12s\n", "table", "distinct", "hashed rows", "missing");
    for (int t = 0; t < CPR_CRITEO_SPARSE; t++)
        printf("  C%-5d %2s%12llu %2s%12llu %12llu\n", t + 1, bound,
               (unsigned long long)set_count(&s->values[t]), bound,
               (unsigned long long)set_count(&s->hashed[t]),
               (unsigned long long)s->missing[t]);
    if (!exact(s))
        printf("\n  (--max-distinct reached: distinct counts are lower bounds)\n");
    printf("  %.2f s\n", s->seconds);
    return fflush(stdout) == 0 ? 0 : -1;
}

int data_stats_run(const stats_opts *o)
{
    stats *s = calloc(1, sizeof *s);
    int rc = EXIT_FAILED;
    if (!s) {
        fprintf(stderr, "cpr-data: stats: out of memory\n");
        return EXIT_FAILED;
    }
    s->path = o->path;
    s->budget.max = o->max_distinct;
    cpr_status st = scan(o, s);
    if (st)
        fprintf(stderr, "cpr-data: stats: %s: %s\n", cpr_status_name(st), cpr_errmsg());
    else
        rc = (o->json ? print_json(o, s) : print_table(s)) ? EXIT_FAILED : 0;
    if (!st && rc == 0 && s->rows == 0 && s->malformed > 0) {
        /* Statistics of nothing: the file is not Criteo rows as read. */
        fprintf(stderr, "cpr-data: stats: %s: none of its %llu lines is a Criteo row as %s "
                "(see the reasons above): is it a Criteo TSV or CSV file?\n", o->path,
                (unsigned long long)s->lines, s->format == CPR_CRITEO_CSV ? "CSV" : "TSV");
        rc = EXIT_FAILED;
    }
    for (int t = 0; t < CPR_CRITEO_SPARSE; t++) {
        free(s->values[t].slots);
        free(s->hashed[t].slots);
    }
    free(s);
    return rc;
}
