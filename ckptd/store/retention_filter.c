/* SPDX-License-Identifier: Apache-2.0 */
/* Retention by compaction (invariants F1-F4 in retention_filter.h). */
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "retention_filter.h"

void cpr_floors_init(cpr_floors *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    atomic_init(&f->dropped, 0);
}

void cpr_floors_release(cpr_floors *f)
{
    free(f->floor);
    f->floor = NULL;
    f->n = 0;
    pthread_mutex_destroy(&f->mu);
}

void cpr_floors_set(cpr_floors *f, uint32_t job_id, uint64_t floor)
{
    pthread_mutex_lock(&f->mu);
    if (job_id >= f->n) {
        size_t n = (size_t)job_id + 16;
        uint64_t *grown = realloc(f->floor, n * sizeof *grown);
        if (!grown) { /* F2: the job keeps every version until memory returns */
            pthread_mutex_unlock(&f->mu);
            return;
        }
        memset(grown + f->n, 0, (n - f->n) * sizeof *grown);
        f->floor = grown;
        f->n = n;
    }
    if (floor > f->floor[job_id])
        f->floor[job_id] = floor;
    pthread_mutex_unlock(&f->mu);
}

/* One compaction's filter: the floors when it began, and where it is. */
typedef struct filter_state {
    cpr_floors *floors;
    uint64_t *floor;
    size_t n;
    cpr_row_key prev;            /* the row of the last version seen */
    int have_prev;
    int kept_at_or_below_floor;  /* prev's row: a version <= floor was kept */
} filter_state;

static unsigned char filter_version(void *arg, int level, const char *key, size_t klen,
                                    const char *value, size_t vlen, char **new_value,
                                    size_t *new_vlen, unsigned char *changed)
{
    (void)level, (void)value, (void)vlen, (void)new_value, (void)new_vlen;
    filter_state *s = arg;
    cpr_row_key k;
    *changed = 0;
    if (cpr_key_row_parse(key, klen, &k) != 0)
        return 0; /* not a row version */
    if (!s->have_prev || k.job_id != s->prev.job_id || k.table != s->prev.table ||
        k.row != s->prev.row)
        s->kept_at_or_below_floor = 0;
    s->have_prev = 1;
    s->prev = k;
    uint64_t floor = k.job_id < s->n ? s->floor[k.job_id] : 0;
    if (floor == 0 || k.checkpoint > floor)
        return 0;
    if (!s->kept_at_or_below_floor) { /* the newest <= floor seen here: F1 */
        s->kept_at_or_below_floor = 1;
        return 0;
    }
    atomic_fetch_add_explicit(&s->floors->dropped, 1, memory_order_relaxed);
    return 1;
}

static void filter_destroy(void *arg)
{
    filter_state *s = arg;
    free(s->floor);
    free(s);
}

static const char *filter_name(void *arg)
{
    (void)arg;
    return "cpr.retention";
}

static rocksdb_compactionfilter_t *filter_create(void *arg,
                                                 rocksdb_compactionfiltercontext_t *ctx)
{
    (void)ctx;
    cpr_floors *f = arg;
    filter_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL; /* no filter: the compaction keeps everything */
    s->floors = f;
    pthread_mutex_lock(&f->mu);
    if (f->n && (s->floor = malloc(f->n * sizeof *s->floor)) != NULL) {
        memcpy(s->floor, f->floor, f->n * sizeof *s->floor);
        s->n = f->n;
    }
    pthread_mutex_unlock(&f->mu);
    return rocksdb_compactionfilter_create(s, filter_destroy, filter_version, filter_name);
}

static void factory_destroy(void *arg)
{
    (void)arg; /* the floors belong to the store */
}

rocksdb_compactionfilterfactory_t *cpr_retention_filter_factory(cpr_floors *f)
{
    return rocksdb_compactionfilterfactory_create(f, factory_destroy, filter_create,
                                                  filter_name);
}
