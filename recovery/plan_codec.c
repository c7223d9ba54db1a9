/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bytes of a recorded plan (cpr_recovery_plan_encode/_decode): one line
 * of JSON, versioned, so that every process of a job (and an operator with
 * cprctl or a Python tool) reads the same decision from ckptd:
 *
 *   {"cpr_plan":1,"action":"partial","num_shards":4,"problems":0,"cut":0,
 *    "rewind_step":0,"reason":"...",
 *    "shards":[[1,"store",4,"DELTA",400,"blob",4,0]]}
 *
 * Each "shards" tuple is [shard, source, as_of, kind, step, dense,
 * dense_checkpoint, dense_shard]; shards whose rows and dense state are both
 * KEEP are left out (most shards of a partial recovery), so a plan stays
 * small. Integers are JSON numbers and must be below 2^53, where doubles are
 * exact: the encoder refuses larger ids rather than round them. The decoder
 * trusts nothing: every field is checked and a plan that breaks the
 * planner's invariant P1 (one entry per shard, in order) is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "cpr_json.h"
#include "plan_internal.h"

#define EXACT_MAX 9007199254740992.0 /* 2^53: integers above are not exact doubles */
#define SHARDS_MAX (1u << 20)        /* more shards than any job has; bounds what a
                                        decoder allocates for a short input */
#define TUPLE_FIELDS 8

/* ---- names --------------------------------------------------------------------- */

/* Index i such that name_of(i) is `name`, over first..last; -1 if none. */
static int parse_name(const char *name, const char *(*name_of)(int), int first, int last)
{
    for (int i = first; name && i <= last; i++)
        if (strcmp(name, name_of(i)) == 0)
            return i;
    return -1;
}

static const char *action_i(int i) { return cpr_plan_action_name((cpr_plan_action)i); }
static const char *source_i(int i) { return cpr_shard_source_name((cpr_shard_source)i); }
static const char *dense_i(int i) { return cpr_dense_source_name((cpr_dense_source)i); }
static const char *kind_i(int i) { return cpr_kind_name((cpr_kind)i); }

/* ---- encoding -------------------------------------------------------------------- */

static cpr_status check_exact(uint64_t v, const char *what, size_t shard)
{
    if ((double)v >= EXACT_MAX)
        return cpr_fail(CPR_INVALID_ARGUMENT, "plan entry %zu: %s %llu is 2^53 or more, which "
                        "the plan encoding cannot carry exactly", shard, what,
                        (unsigned long long)v);
    return CPR_OK;
}

static cpr_status check_plan(const cpr_recovery_plan *p)
{
    if (p->n > SHARDS_MAX)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a plan of %zu shards: the plan encoding "
                        "carries at most %u", p->n, SHARDS_MAX);
    cpr_status st = check_exact(p->cut, "cut", 0);
    if (st == CPR_OK)
        st = check_exact(p->rewind_step, "rewind step", 0);
    for (size_t i = 0; st == CPR_OK && i < p->n; i++) {
        const cpr_plan_shard *e = &p->shards[i];
        st = check_exact(e->as_of, "as_of", i);
        if (st == CPR_OK)
            st = check_exact(e->step, "step", i);
        if (st == CPR_OK)
            st = check_exact(e->dense_checkpoint, "dense checkpoint", i);
    }
    return st;
}

static cpri_json *entry_tuple(const cpr_plan_shard *e)
{
    cpri_json *t = cpri_json_array();
    cpri_json *items[TUPLE_FIELDS] = {
        cpri_json_u64(e->shard), cpri_json_string(cpr_shard_source_name(e->source)),
        cpri_json_u64(e->as_of), cpri_json_string(cpr_kind_name(e->kind)),
        cpri_json_u64(e->step), cpri_json_string(cpr_dense_source_name(e->dense)),
        cpri_json_u64(e->dense_checkpoint), cpri_json_u64(e->dense_shard)};
    int bad = !t;
    for (int i = 0; i < TUPLE_FIELDS; i++) {
        if (!bad && items[i] && cpri_json_append(t, items[i]) == 0)
            continue;
        bad = 1;
        cpri_json_free(items[i]);
    }
    if (bad) {
        cpri_json_free(t);
        return NULL;
    }
    return t;
}

static cpri_json *plan_tree(const cpr_recovery_plan *p)
{
    cpri_json *root = cpri_json_object(), *shards = cpri_json_array();
    int bad = !root || !shards;
    bad = bad || cpri_json_add_number(root, "cpr_plan", CPR_PLAN_ENCODING) ||
          cpri_json_add_string(root, "action", cpr_plan_action_name(p->action)) ||
          cpri_json_add_u64(root, "num_shards", p->n) ||
          cpri_json_add_number(root, "problems", p->problems) ||
          cpri_json_add_u64(root, "cut", p->cut) ||
          cpri_json_add_u64(root, "rewind_step", p->rewind_step) ||
          cpri_json_add_string(root, "reason", p->reason);
    for (size_t i = 0; !bad && i < p->n; i++) {
        const cpr_plan_shard *e = &p->shards[i];
        if (e->source == CPR_SOURCE_KEEP && e->dense == CPR_DENSE_KEEP)
            continue; /* the default: left out */
        cpri_json *t = entry_tuple(e);
        bad = !t || cpri_json_append(shards, t) != 0;
        if (bad)
            cpri_json_free(t);
    }
    if (!bad)
        bad = cpri_json_add_child(root, "shards", shards) != 0;
    if (bad) {
        cpri_json_free(shards);
        cpri_json_free(root);
        return NULL;
    }
    return root;
}

cpr_status cpr_recovery_plan_encode(const cpr_recovery_plan *plan, void **buf, size_t *len)
{
    if (!plan || !buf || !len)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_recovery_plan_encode: arguments must not be "
                        "NULL");
    cpr_status st = check_plan(plan);
    if (st)
        return st;
    cpri_json *root = plan_tree(plan);
    char *text = NULL;
    size_t text_len = 0;
    FILE *f = root ? open_memstream(&text, &text_len) : NULL;
    int bad = !f || cpri_json_print(root, f) != 0;
    if (f)
        bad = fclose(f) != 0 || bad;
    cpri_json_free(root);
    if (bad || !text) {
        free(text);
        return cpr_fail(CPR_NO_MEMORY, "out of memory encoding a plan of %zu shards", plan->n);
    }
    if (text_len && text[text_len - 1] == '\n')
        text[--text_len] = '\0';
    *buf = text;
    *len = text_len;
    return CPR_OK;
}

/* ---- decoding -------------------------------------------------------------------- */

static cpr_status bad_plan(const char *what)
{
    return cpr_fail(CPR_INVALID_ARGUMENT, "recorded recovery plan: %s", what);
}

/* An integer in [0, max]. */
static int as_uint(const cpri_json *v, double max, uint64_t *out)
{
    double d;
    if (cpri_json_number_value(v, &d) != 0 || !(d >= 0) || d > max || d >= EXACT_MAX ||
        d != (double)(uint64_t)d) /* (the encoder refuses 2^53 and above too) */
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static int get_uint(const cpri_json *obj, const char *key, double max, uint64_t *out)
{
    return as_uint(cpri_json_get(obj, key), max, out);
}

static int as_name(const cpri_json *v, const char *(*name_of)(int), int first, int last,
                   int *out)
{
    const char *s = NULL;
    if (cpri_json_string_value(v, &s) != 0)
        return -1;
    *out = parse_name(s, name_of, first, last);
    return *out < 0 ? -1 : 0;
}

/* One "shards" tuple into p->shards; *next is the previous entry's shard + 1. */
static cpr_status decode_entry(cpr_recovery_plan *p, const cpri_json *t, uint64_t *next)
{
    uint64_t shard, as_of, step, dense_ckpt, dense_shard;
    int source, kind, dense;
    if (cpri_json_array_size(t) != TUPLE_FIELDS ||
        as_uint(cpri_json_array_get(t, 0), (double)p->n - 1, &shard) ||
        as_name(cpri_json_array_get(t, 1), source_i, CPR_SOURCE_KEEP, CPR_SOURCE_INIT, &source) ||
        as_uint(cpri_json_array_get(t, 2), EXACT_MAX, &as_of) ||
        as_name(cpri_json_array_get(t, 3), kind_i, CPR_KIND_UNSPECIFIED, CPR_KIND_PRIORITY,
                &kind) ||
        as_uint(cpri_json_array_get(t, 4), EXACT_MAX, &step) ||
        as_name(cpri_json_array_get(t, 5), dense_i, CPR_DENSE_KEEP, CPR_DENSE_INIT, &dense) ||
        as_uint(cpri_json_array_get(t, 6), EXACT_MAX, &dense_ckpt) ||
        as_uint(cpri_json_array_get(t, 7), (double)p->n - 1, &dense_shard))
        return bad_plan("a \"shards\" entry is not [shard, source, as_of, kind, step, dense, "
                        "dense_checkpoint, dense_shard] with shards below num_shards");
    if (shard < *next)
        return bad_plan("\"shards\" entries are not in increasing shard order");
    p->shards[shard] = (cpr_plan_shard){(uint32_t)shard, (cpr_shard_source)source, as_of,
                                        (cpr_kind)kind, step, (cpr_dense_source)dense,
                                        dense_ckpt, (uint32_t)dense_shard};
    *next = shard + 1;
    return CPR_OK;
}

/* The top-level fields; allocates p->shards (all KEEP). `count`: the
 * entries the record holds, so that a small record cannot make a full or
 * from-scratch plan of many shards allocate (each shard has its entry). */
static cpr_status decode_head(const cpri_json *root, cpr_recovery_plan *p, size_t count)
{
    uint64_t version, n, problems;
    int action;
    const char *reason = NULL;
    if (!cpri_json_is_object(root) || get_uint(root, "cpr_plan", EXACT_MAX, &version))
        return bad_plan("not a CPR plan (no \"cpr_plan\" version)");
    if (version != CPR_PLAN_ENCODING)
        return cpr_fail(CPR_FAILED_PRECONDITION, "recorded recovery plan has encoding version "
                        "%llu; this CPR reads version %d: upgrade it",
                        (unsigned long long)version, CPR_PLAN_ENCODING);
    if (as_name(cpri_json_get(root, "action"), action_i, CPR_PLAN_PARTIAL,
                CPR_PLAN_RESTART_FROM_SCRATCH, &action) ||
        get_uint(root, "num_shards", SHARDS_MAX, &n) || n < 1 ||
        get_uint(root, "problems", 255, &problems) ||
        get_uint(root, "cut", EXACT_MAX, &p->cut) ||
        get_uint(root, "rewind_step", EXACT_MAX, &p->rewind_step) ||
        cpri_json_get_string(root, "reason", &reason) || strlen(reason) >= REASON_MAX ||
        !cpri_utf8_valid(reason)) /* what the encoder writes, so decode, encode is stable */
        return bad_plan("a field of action, num_shards, problems, cut, rewind_step or reason "
                        "is missing or out of range");
    if (action != CPR_PLAN_PARTIAL && n != count)
        return bad_plan("a full or from-scratch plan has an entry for every shard");
    p->action = (cpr_plan_action)action;
    p->problems = (unsigned)problems;
    p->reason_len = strlen(reason);
    memcpy(p->reason, reason, p->reason_len + 1);
    p->shards = calloc(n, sizeof *p->shards);
    if (!p->shards)
        return cpr_fail(CPR_NO_MEMORY, "out of memory decoding a plan of %llu shards",
                        (unsigned long long)n);
    p->n = (size_t)n;
    for (size_t i = 0; i < p->n; i++)
        p->shards[i].shard = (uint32_t)i;
    return CPR_OK;
}

/* What the planner's invariants (planner.c P2-P4) say a plan of its action
 * holds: a record that breaks them was not written by CPR. */
static cpr_status check_meaning(const cpr_recovery_plan *p)
{
    if (p->problems & ~(unsigned)(CPR_PLAN_NO_CUT | CPR_PLAN_SHARD_UNSAVED |
                                  CPR_PLAN_DENSE_UNSAVED | CPR_PLAN_RESHARDED))
        return bad_plan("\"problems\" has bits CPR does not define");
    for (size_t i = 0; i < p->n; i++) {
        const cpr_plan_shard *e = &p->shards[i];
        int ok = p->action == CPR_PLAN_FULL ? e->source == CPR_SOURCE_STORE &&
                                                  e->as_of == p->cut && p->cut >= 1
                 : p->action == CPR_PLAN_RESTART_FROM_SCRATCH ? e->source == CPR_SOURCE_INIT
                 : e->source != CPR_SOURCE_STORE || e->as_of >= 1;
        if (!ok)
            return bad_plan(p->action == CPR_PLAN_FULL
                                ? "a full plan's shards all restore as of its cut (>= 1)"
                            : p->action == CPR_PLAN_RESTART_FROM_SCRATCH
                                ? "a from-scratch plan's shards all start from INIT"
                                : "a shard restored from the store names a checkpoint >= 1");
    }
    return CPR_OK;
}

static cpr_status decode_tree(const cpri_json *root, cpr_recovery_plan *p)
{
    const cpri_json *shards = cpri_json_is_object(root) ? cpri_json_get(root, "shards") : NULL;
    size_t count = cpri_json_array_size(shards);
    cpr_status st = decode_head(root, p, count);
    if (st)
        return st;
    /* Every plan has an entry that is not KEEP: a failed shard, or all of them. */
    if (count == 0 || count > p->n)
        return bad_plan("\"shards\" is missing, empty, or longer than num_shards");
    uint64_t next = 0;
    for (const cpri_json *t = cpri_json_array_first(shards); st == CPR_OK && t;
         t = cpri_json_array_next(t))
        st = decode_entry(p, t, &next);
    return st ? st : check_meaning(p);
}

cpr_status cpr_recovery_plan_decode(const void *buf, size_t len, cpr_recovery_plan **out)
{
    if (!out || (len && !buf))
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_recovery_plan_decode: out (and buf when "
                        "len > 0) must not be NULL");
    if (len == 0)
        return bad_plan("empty (generation 0 means no plan was recorded)");
    if (memchr(buf, '\0', len))
        return bad_plan("contains a NUL byte: not JSON text");
    char *text = malloc(len + 1);
    cpr_recovery_plan *p = calloc(1, sizeof *p);
    if (!text || !p) {
        free(text);
        free(p);
        return cpr_fail(CPR_NO_MEMORY, "out of memory decoding a %zu-byte plan", len);
    }
    memcpy(text, buf, len);
    text[len] = '\0';
    cpri_json *root = cpri_json_parse(text);
    cpr_status st = root ? decode_tree(root, p) : bad_plan("not valid JSON");
    cpri_json_free(root);
    free(text);
    if (st) {
        cpr_recovery_plan_destroy(p);
        return st;
    }
    *out = p;
    return CPR_OK;
}
