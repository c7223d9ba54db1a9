/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared data model's functions (cpr/types.h): names of kinds and
 * policies, freeing name lists, the one check of a part's tables that the
 * store and the client make, and the one implementation of the
 * consistent-cut rule that the store, the client and the planner use.
 */
#include <stdlib.h>
#include <string.h>

#include "cpr/types.h"
#include "cpr_common.h"

cpr_status cpri_check_part_tables(const cpr_part_spec *spec)
{
    if (spec->n_tables > CPRI_MAX_TABLES_PER_PART || (spec->n_tables && !spec->tables))
        return cpr_fail(CPR_INVALID_ARGUMENT, "a part declares 0-%u tables; got %zu",
                        CPRI_MAX_TABLES_PER_PART, spec->n_tables);
    for (size_t i = 0; i < spec->n_tables; i++) {
        const cpr_table_schema *t = &spec->tables[i];
        if (t->rows == 0 || t->dim == 0 || t->dim > CPRI_MAX_DIM ||
            t->state_dim > CPRI_MAX_DIM)
            return cpr_fail(CPR_INVALID_ARGUMENT,
                            "table %u: rows must be >= 1, dim 1-%u and state_dim "
                            "0-%u (got rows %llu, dim %u, state_dim %u)",
                            t->table, CPRI_MAX_DIM, CPRI_MAX_DIM,
                            (unsigned long long)t->rows, t->dim, t->state_dim);
        for (size_t j = 0; j < i; j++)
            if (spec->tables[j].table == t->table)
                return cpr_fail(CPR_INVALID_ARGUMENT,
                                "table %u is declared twice in one part", t->table);
    }
    return CPR_OK;
}

const char *cpr_kind_name(cpr_kind kind)
{
    switch (kind) {
    case CPR_KIND_FULL: return "FULL";
    case CPR_KIND_DELTA: return "DELTA";
    case CPR_KIND_PRIORITY: return "PRIORITY";
    default: return "UNSPECIFIED";
    }
}

static const char *const policy_names[] = {"full", "delta", "mfu", "ssu", "topk-norm"};
#define N_POLICIES (sizeof policy_names / sizeof policy_names[0])

const char *cpr_policy_name(cpr_policy policy)
{
    return (unsigned)policy < N_POLICIES ? policy_names[policy] : "unknown";
}

cpr_status cpr_policy_parse(const char *name, cpr_policy *out)
{
    for (unsigned i = 0; name && i < N_POLICIES; i++)
        if (strcmp(name, policy_names[i]) == 0) {
            if (out)
                *out = (cpr_policy)i;
            return CPR_OK;
        }
    return cpr_fail(CPR_INVALID_ARGUMENT,
                    "unknown policy \"%s\": use full, delta, mfu, ssu or topk-norm",
                    name ? name : "(null)");
}

void cpr_names_free(char **names, size_t n)
{
    if (!names)
        return;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* ---- the consistent-cut rule (cpr/types.h) ------------------------------------------ */

int cpr_cut_scan_add(cpr_cut_scan *k, uint32_t shard, uint32_t num_shards, int consistent)
{
    if (k->broken || (k->next > 0 && k->next == k->n))
        return 0; /* decided: parts of shards >= n do not matter */
    if (k->next == 0)
        k->n = num_shards;
    if (shard != k->next || !consistent || num_shards != k->n || k->n == 0) {
        k->broken = 1;
        return 0;
    }
    k->next++;
    return k->next < k->n;
}

int cpr_cut_scan_done(const cpr_cut_scan *k)
{
    return !k->broken && k->n > 0 && k->next == k->n;
}

size_t cpr_cuts(const cpr_part_info *parts, size_t n, uint64_t floor, uint64_t *cuts, size_t max)
{
    size_t count = 0;
    for (size_t end = n; end > 0;) {
        size_t first = end - 1;
        uint64_t id = parts[first].checkpoint;
        if (floor && id < floor)
            break;
        while (first > 0 && parts[first - 1].checkpoint == id)
            first--;
        cpr_cut_scan k = {0};
        for (size_t i = first; i < end; i++) {
            const cpr_part_info *p = &parts[i];
            if (!p->committed)
                continue; /* an open part of the same id does not spoil the cut */
            int consistent = p->consistent &&
                             (p->kind == CPR_KIND_FULL || p->kind == CPR_KIND_DELTA);
            if (!cpr_cut_scan_add(&k, p->shard, p->num_shards, consistent))
                break;
        }
        if (cpr_cut_scan_done(&k)) {
            if (count < max)
                cuts[count] = id;
            count++;
        }
        end = first;
    }
    return count;
}

_Static_assert(CPR_STATUS_COUNT_ <= CPR_STATS_ERRORS,
               "cpr_store_stats.errors must have a slot for every status");

/* ---- the order of a batch's rows ------------------------------------------ */

static int id_index_cmp(const void *a, const void *b)
{
    const cpri_id_index *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

cpr_status cpri_batch_order(const cpr_row_batch *b, cpri_id_index **order)
{
    *order = NULL;
    if (!b->ids)
        return CPR_OK;
    size_t i = 1;
    while (i < b->n && b->ids[i - 1] < b->ids[i])
        i++;
    if (i >= b->n)
        return CPR_OK;
    cpri_id_index *o = malloc(b->n * sizeof *o);
    if (!o)
        return cpr_fail(CPR_NO_MEMORY, "out of memory sorting a batch of %zu rows", b->n);
    for (i = 0; i < b->n; i++)
        o[i] = (cpri_id_index){b->ids[i], i};
    qsort(o, b->n, sizeof *o, id_index_cmp);
    for (i = 1; i < b->n; i++) {
        if (o[i].id == o[i - 1].id) {
            unsigned long long dup = (unsigned long long)o[i].id;
            free(o);
            return cpr_fail(CPR_INVALID_ARGUMENT, "row id %llu appears twice in one batch", dup);
        }
    }
    *order = o;
    return CPR_OK;
}
