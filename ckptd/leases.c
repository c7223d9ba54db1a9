/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writer leases (leases.h): a hash table of (job, shard, checkpoint) ->
 * lease under one mutex. Entries of parts that ended without a Commit or
 * Abort through the daemon's handlers (the idle reaper, a broken stream)
 * are swept when the table has doubled since the last sweep: the open
 * parts of each job are listed from the store, without the table's lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cpr_common.h"
#include "leases.h"

#define BUCKETS 4096u
#define SWEEP_MIN 4096u /* entries before the first sweep */

typedef struct entry {
    struct entry *next;
    uint32_t shard;
    uint64_t checkpoint, lease;
    uint64_t token;         /* L4: the Begin's token (0: none) */
    uint64_t incarnation;   /* L5: the store's part this lease was granted for */
    char job[CPR_NAME_MAX + 1];
} entry;

struct cpri_leases {
    cpr_store *store;
    pthread_mutex_t mu;
    entry *buckets[BUCKETS];
    uint64_t count, sweep_at;
};

static unsigned bucket_of(const cpr_part_id *id)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = id->job; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ id->shard) * 1099511628211ull;
    h = (h ^ id->checkpoint) * 1099511628211ull;
    return (unsigned)(h % BUCKETS);
}

/* Under mu: the link that points at id's entry (or at NULL). */
static entry **find(cpri_leases *l, const cpr_part_id *id)
{
    entry **e = &l->buckets[bucket_of(id)];
    while (*e && !((*e)->shard == id->shard && (*e)->checkpoint == id->checkpoint &&
                   strcmp((*e)->job, id->job) == 0))
        e = &(*e)->next;
    return e;
}

cpr_status cpri_leases_create(cpr_store *store, cpri_leases **out)
{
    cpri_leases *l = calloc(1, sizeof *l);
    if (!l)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for the lease table");
    l->store = store;
    l->sweep_at = SWEEP_MIN;
    pthread_mutex_init(&l->mu, NULL);
    *out = l;
    return CPR_OK;
}

void cpri_leases_destroy(cpri_leases *l)
{
    if (!l)
        return;
    for (unsigned b = 0; b < BUCKETS; b++)
        for (entry *e = l->buckets[b], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static int is_open(const cpr_part_info *parts, size_t n, uint32_t shard, uint64_t checkpoint)
{
    for (size_t i = 0; i < n; i++)
        if (parts[i].shard == shard && parts[i].checkpoint == checkpoint)
            return !parts[i].committed;
    return 0;
}

/* L1: drop the entries whose parts are no longer open. The table is copied
 * (ids and leases) so that the store is asked without the lock; an entry
 * re-granted meanwhile has another lease and stays. */
static void sweep(cpri_leases *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t n = 0, cap = l->count;
    entry *copy = malloc((cap ? cap : 1) * sizeof *copy);
    for (unsigned b = 0; copy && b < BUCKETS; b++)
        for (const entry *e = l->buckets[b]; e && n < cap; e = e->next)
            copy[n++] = *e;
    pthread_mutex_unlock(&l->mu);
    if (!copy)
        return; /* out of memory: try again at the next grant */
    uint64_t dropped = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!copy[i].job[0])
            continue; /* its job was listed already */
        cpr_part_info *parts = NULL;
        size_t np = 0;
        cpr_status st = cpr_store_list(l->store, copy[i].job, &parts, &np);
        if (st != CPR_OK && st != CPR_NOT_FOUND)
            continue; /* cannot tell: keep */
        char job[CPR_NAME_MAX + 1];
        snprintf(job, sizeof job, "%s", copy[i].job);
        for (uint64_t k = i; k < n; k++) {
            if (strcmp(copy[k].job, job) != 0)
                continue;
            if (!is_open(parts, np, copy[k].shard, copy[k].checkpoint)) {
                cpr_part_id id = {job, copy[k].shard, copy[k].checkpoint};
                pthread_mutex_lock(&l->mu);
                entry **e = find(l, &id);
                if (*e && (*e)->lease == copy[k].lease) {
                    entry *gone = *e;
                    *e = gone->next;
                    free(gone);
                    l->count--;
                    dropped++;
                }
                pthread_mutex_unlock(&l->mu);
            }
            copy[k].job[0] = '\0';
        }
        free(parts);
    }
    free(copy);
    pthread_mutex_lock(&l->mu);
    l->sweep_at = l->count * 2 > SWEEP_MIN ? l->count * 2 : SWEEP_MIN;
    pthread_mutex_unlock(&l->mu);
    if (dropped)
        cpri_log(CPR_LOG_INFO, "leases: forgot %llu of parts no longer open",
                (unsigned long long)dropped);
}

cpr_status cpri_leases_grant(cpri_leases *l, const cpr_part_id *id, uint64_t token,
                             uint64_t incarnation, uint64_t *lease)
{
    uint64_t v = 0;
    while (v == 0) { /* L3 */
        ssize_t got = getrandom(&v, sizeof v, 0);
        if (got != (ssize_t)sizeof v && !(got < 0 && errno == EINTR))
            return cpr_fail(CPR_INTERNAL, "getrandom for a writer lease failed: %s",
                            got < 0 ? strerror(errno) : "short read");
    }
    pthread_mutex_lock(&l->mu);
    entry **e = find(l, id);
    if (!*e) {
        entry *n = calloc(1, sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&l->mu);
            return cpr_fail(CPR_NO_MEMORY, "out of memory for a writer lease");
        }
        snprintf(n->job, sizeof n->job, "%s", id->job);
        n->shard = id->shard;
        n->checkpoint = id->checkpoint;
        *e = n;
        l->count++;
    }
    (*e)->lease = v;
    (*e)->token = token;
    (*e)->incarnation = incarnation;
    int want_sweep = l->count >= l->sweep_at;
    if (want_sweep) /* one sweep at a time: the next is due only past 2x */
        l->sweep_at = UINT64_MAX;
    pthread_mutex_unlock(&l->mu);
    if (want_sweep)
        sweep(l);
    *lease = v;
    return CPR_OK;
}

static int store_has_open(cpri_leases *l, const cpr_part_id *id);

uint64_t cpri_leases_resume(cpri_leases *l, const cpr_part_id *id, uint64_t token)
{
    if (token == 0)
        return 0;
    pthread_mutex_lock(&l->mu);
    entry *e = *find(l, id);
    uint64_t lease = e && e->token == token ? e->lease : 0;
    pthread_mutex_unlock(&l->mu);
    /* L4: open, not committed (its entry goes a moment after the commit) */
    return lease && store_has_open(l, id) ? lease : 0;
}

/* Is `id` an open part in the store? 1 also when the store cannot tell. A
 * part ends in the store before its entry is dropped (a broken stream's
 * abort, the reaper, a sweep to come), so a refusal asks the store first:
 * a part that is gone is answered as gone (L2), not as another writer's. */
static int store_has_open(cpri_leases *l, const cpr_part_id *id)
{
    cpr_part_info *parts = NULL;
    size_t np = 0;
    cpr_status st = cpr_store_list(l->store, id->job, &parts, &np);
    if (st == CPR_NOT_FOUND)
        return 0;
    if (st != CPR_OK)
        return 1;
    int open = is_open(parts, np, id->shard, id->checkpoint);
    free(parts);
    return open;
}

cpr_status cpri_leases_check(cpri_leases *l, const cpr_part_id *id, uint64_t lease,
                             const char *op, uint64_t *incarnation)
{
    pthread_mutex_lock(&l->mu);
    entry *e = *find(l, id);
    int held = e != NULL, ok = e && (e->lease ^ lease) == 0;
    if (ok && incarnation)
        *incarnation = e->incarnation;
    pthread_mutex_unlock(&l->mu);
    if (ok)
        return CPR_OK;
    if (held && !store_has_open(l, id)) /* gone, its entry not yet dropped (L1) */
        held = 0;
    if (!held) /* L2 */
        return cpr_fail(CPR_FAILED_PRECONDITION, "%s: no open part %s/%u/%llu (never begun, "
                        "or aborted: by a client, a broken stream, or after it sat idle); "
                        "begin it", op, id->job, id->shard, (unsigned long long)id->checkpoint);
    return cpr_fail(CPR_PERMISSION_DENIED, "%s: part %s/%u/%llu belongs to the writer that "
                    "began it, and this request presents %s lease; only that writer may "
                    "write, commit or abort it", op, id->job, id->shard,
                    (unsigned long long)id->checkpoint, lease ? "another" : "no");
}

uint64_t cpri_leases_get(cpri_leases *l, const cpr_part_id *id)
{
    pthread_mutex_lock(&l->mu);
    entry *e = *find(l, id);
    uint64_t lease = e ? e->lease : 0;
    pthread_mutex_unlock(&l->mu);
    return lease;
}

void cpri_leases_drop(cpri_leases *l, const cpr_part_id *id, uint64_t lease)
{
    pthread_mutex_lock(&l->mu);
    entry **e = find(l, id);
    if (*e && (*e)->lease == lease) {
        entry *gone = *e;
        *e = gone->next;
        free(gone);
        l->count--;
    }
    pthread_mutex_unlock(&l->mu);
}

uint64_t cpri_leases_count(cpri_leases *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t n = l->count;
    pthread_mutex_unlock(&l->mu);
    return n;
}
