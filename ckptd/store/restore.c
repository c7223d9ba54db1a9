/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Restore: stream rows "as of" a checkpoint, in (table, row) order, in
 * bounded memory, using every core.
 *
 * Scanning. Versions of a row are ordered newest first (keys.h), so for each
 * row the first version with checkpoint <= C is the answer: when the
 * iterator sits on a newer version we seek to (row, ~C); after emitting a
 * row we step over its older versions with Next (far cheaper than a seek).
 * Every row's CRC is checked before it is copied out.
 *
 * Parallelism. A single RocksDB iterator is CPU-bound (about 1 us per row)
 * and waits on its own synchronous read-ahead, so the selected row ranges
 * are cut into segments and scanned by worker threads, each with its own
 * iterator on one shared snapshot (so a concurrent commit or GC cannot tear
 * the restore). Segment i goes to worker i % W; each worker fills a ring of
 * RING_SLOTS batches and blocks when it is full. Segments are sized (from
 * RocksDB's size estimates) to about one ring of data: then worker i+1 can
 * scan its whole segment while the consumer drains worker i's, which is what
 * makes the workers run in parallel. The caller's thread takes
 * the batches of segment 0, 1, 2, ... in order and runs the callback, so the
 * output order is exactly that of a sequential scan, and memory is bounded by
 * W x RING_SLOTS batches whatever the size of the job.
 *
 * Invariants
 *  R1. A batch never spans two segments; the last batch of a segment (maybe
 *      empty) carries seg_end, so the consumer knows when to switch worker.
 *  R2. A worker's ring slot is reused only after the consumer's callback
 *      for it has returned (the consumer advances the tail after the call).
 *  R3. On any error or cancel, every worker sees `cancel` before blocking
 *      again, and all workers are joined before cpr_store_restore returns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpr/crc32c.h"
#include "store_internal.h"

#define DEFAULT_BATCH_ROWS 4096
#define DEFAULT_BATCH_BYTES (3u << 20)
#define MAX_BATCH_ROWS (1u << 20)      /* x dim 65536 x 4 bytes stays far from overflow */
#define MAX_QUERY_ITEMS (1u << 20)     /* tables or ranges in one query */
#define NEXT_BEFORE_SEEK 64          /* older versions to step over before seeking */
#define RESTORE_READAHEAD (512u << 10) /* smaller steps wait less per read */
#define RING_SLOTS 4
#define MAX_WORKERS 8
#define WORKERS_PER_CPU 4

typedef struct segment {
    cpr_table_schema table;
    uint64_t begin, end;
} segment;

typedef struct slot {
    uint64_t *ids;
    float *values, *state;
    size_t n;
    uint32_t table, dim, state_dim;
    int seg_end;
} slot;

struct restore_shared;

typedef struct worker {
    struct restore_shared *sh;
    unsigned index;
    pthread_t thread;
    int started;
    rocksdb_iterator_t *it;
    slot ring[RING_SLOTS];
    unsigned head, count;            /* guarded by sh->mu */
    pthread_cond_t not_full, not_empty;
    cpr_status st;                   /* set before the failing seg_end slot */
    char errmsg[512];
    const segment *seg;              /* being scanned */
} worker;

typedef struct restore_shared {
    const cpr_restore_query *q;
    uint32_t job_id;
    uint64_t as_of;
    size_t batch_rows;
    segment *segs;
    size_t n_segs;
    worker workers[MAX_WORKERS];
    unsigned n_workers;
    pthread_mutex_t mu;
    int cancel;                      /* guarded by mu */
    rocksdb_readoptions_t *ro;
    const rocksdb_snapshot_t *snap;
    unsigned char upper[5];
} restore_shared;

/* ---- one worker's scan -------------------------------------------------- */

static void seek_row(worker *w, uint64_t row)
{
    unsigned char key[CPR_ROW_KEY_LEN];
    cpr_row_key k = {w->sh->job_id, w->seg->table.table, row, w->sh->as_of, 0};
    cpr_key_row(key, &k);
    rocksdb_iter_seek(w->it, (const char *)key, sizeof key);
}

static int current_row(worker *w, cpr_row_key *k)
{
    size_t klen;
    if (!rocksdb_iter_valid(w->it))
        return 0;
    const char *key = rocksdb_iter_key(w->it, &klen);
    return cpr_key_row_parse(key, klen, k) == 0 && k->job_id == w->sh->job_id &&
           k->table == w->seg->table.table;
}

/* Wait for a free slot (the one at head); NULL if cancelled. */
static slot *acquire_slot(worker *w)
{
    restore_shared *sh = w->sh;
    pthread_mutex_lock(&sh->mu);
    while (w->count == RING_SLOTS && !sh->cancel)
        pthread_cond_wait(&w->not_full, &sh->mu);
    slot *s = sh->cancel ? NULL : &w->ring[w->head];
    pthread_mutex_unlock(&sh->mu);
    if (s) {
        s->n = 0;
        s->seg_end = 0;
        s->table = w->seg->table.table;
        s->dim = w->seg->table.dim;
        s->state_dim = w->seg->table.state_dim;
    }
    return s;
}

static void publish_slot(worker *w)
{
    pthread_mutex_lock(&w->sh->mu);
    w->head = (w->head + 1) % RING_SLOTS;
    w->count++;
    pthread_cond_signal(&w->not_empty);
    pthread_mutex_unlock(&w->sh->mu);
}

static cpr_status copy_row(worker *w, slot *s, const cpr_row_key *k)
{
    size_t vlen, klen;
    const char *key = rocksdb_iter_key(w->it, &klen);
    const unsigned char *val = (const unsigned char *)rocksdb_iter_value(w->it, &vlen);
    size_t vbytes = (size_t)s->dim * 4, sbytes = (size_t)s->state_dim * 4;
    uint32_t stored;
    if (vlen != 4 + vbytes + sbytes)
        return cpr_fail(CPR_CORRUPT, "row %llu of table %u (checkpoint %llu, shard %u) "
                        "has %zu bytes, expected %zu", (unsigned long long)k->row,
                        k->table, (unsigned long long)k->checkpoint, k->shard, vlen,
                        4 + vbytes + sbytes);
    memcpy(&stored, val, 4);
    uint32_t crc = cpr_crc32c(0, key + 5, CPR_ROW_KEY_LEN - 5);
    if (cpr_crc32c(crc, val + 4, vbytes + sbytes) != stored)
        return cpr_fail(CPR_CORRUPT, "row %llu of table %u (checkpoint %llu, shard %u) "
                        "fails its checksum: the stored copy is damaged",
                        (unsigned long long)k->row, k->table,
                        (unsigned long long)k->checkpoint, k->shard);
    s->ids[s->n] = k->row;
    memcpy(s->values + s->n * s->dim, val + 4, vbytes);
    if (sbytes)
        memcpy(s->state + s->n * s->state_dim, val + 4 + vbytes, sbytes);
    s->n++;
    return CPR_OK;
}

/* Step past the older versions of `row`. */
static void skip_versions(worker *w, uint64_t row)
{
    cpr_row_key k;
    for (int i = 0; i < NEXT_BEFORE_SEEK; i++) {
        rocksdb_iter_next(w->it);
        if (!current_row(w, &k) || k.row != row)
            return;
    }
    if (row < w->seg->end)
        seek_row(w, row + 1);
}

/* At a version of k->row newer than as_of: step (Next) to the newest one
 * <= as_of, or to the next row; seek only after NEXT_BEFORE_SEEK steps. A
 * seek costs a block read in every overlapping file, a step almost nothing. */
static void newer_versions(worker *w, const cpr_row_key *k)
{
    cpr_row_key at;
    for (int i = 0; i < NEXT_BEFORE_SEEK; i++) {
        rocksdb_iter_next(w->it);
        if (!current_row(w, &at) || at.row != k->row || at.checkpoint <= w->sh->as_of)
            return;
    }
    seek_row(w, k->row); /* lands on the newest version <= as_of */
}

/* First row >= row that passes the modulo filter (UINT64_MAX: none). */
static uint64_t next_wanted(const cpr_restore_query *q, uint64_t row)
{
    uint64_t m = q->modulo, rem = q->remainder, want;
    if (m == 0 || row % m == rem)
        return row;
    want = row - row % m + rem;
    if (want < row)
        want += m;
    return want < row ? UINT64_MAX : want; /* overflow */
}

/* Scan one segment into slots; the last slot published carries seg_end. */
static cpr_status scan_segment(worker *w)
{
    const segment *seg = w->seg;
    cpr_status st = CPR_OK;
    cpr_row_key k;
    slot *s = acquire_slot(w);
    uint64_t first = next_wanted(w->sh->q, seg->begin);
    if (!s)
        return CPR_OK; /* cancelled */
    if (first < seg->end)
        seek_row(w, first);
    while (st == CPR_OK && first < seg->end && current_row(w, &k) && k.row < seg->end) {
        uint64_t want = next_wanted(w->sh->q, k.row);
        if (want != k.row) {
            if (want >= seg->end)
                break;
            seek_row(w, want);
        } else if (k.checkpoint > w->sh->as_of) {
            newer_versions(w, &k); /* to the newest version <= as_of */
        } else {
            st = copy_row(w, s, &k);
            skip_versions(w, k.row);
            if (st == CPR_OK && s->n == w->sh->batch_rows) {
                publish_slot(w);
                if (!(s = acquire_slot(w)))
                    return CPR_OK;
            }
        }
    }
    if (st == CPR_OK) {
        char *err = NULL;
        rocksdb_iter_get_error(w->it, &err);
        if (err)
            st = cpr_rocks_error(err, "reading rows");
    }
    if (st) { /* the consumer reads st after seeing this seg_end slot */
        s->n = 0;
        w->st = st;
        snprintf(w->errmsg, sizeof w->errmsg, "%s", cpr_errmsg());
    }
    s->seg_end = 1;
    publish_slot(w);
    return st;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    restore_shared *sh = w->sh;
    for (size_t i = w->index; i < sh->n_segs; i += sh->n_workers) {
        w->seg = &sh->segs[i];
        if (scan_segment(w) != CPR_OK)
            break;
        pthread_mutex_lock(&sh->mu);
        int stop = sh->cancel;
        pthread_mutex_unlock(&sh->mu);
        if (stop)
            break;
    }
    return NULL;
}

/* ---- planning ------------------------------------------------------------- */

static int range_cmp(const void *a, const void *b)
{
    const cpr_row_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Sorted, merged copy of the query's ranges (all rows if none). */
static cpr_status normalise_ranges(const cpr_restore_query *q, cpr_row_range **out, size_t *n)
{
    size_t count = q->n_ranges ? q->n_ranges : 1, merged = 0;
    cpr_row_range *rs = malloc(count * sizeof *rs);
    if (!rs)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for %zu ranges", count);
    if (q->n_ranges == 0) {
        rs[0] = (cpr_row_range){0, UINT64_MAX};
    } else {
        memcpy(rs, q->ranges, count * sizeof *rs);
        qsort(rs, count, sizeof *rs, range_cmp);
    }
    for (size_t i = 0; i < count; i++) {
        if (rs[i].begin >= rs[i].end)
            continue;
        if (merged && rs[i].begin <= rs[merged - 1].end) {
            if (rs[i].end > rs[merged - 1].end)
                rs[merged - 1].end = rs[i].end;
        } else {
            rs[merged++] = rs[i];
        }
    }
    *out = rs;
    *n = merged;
    return CPR_OK;
}

static int schema_cmp(const void *a, const void *b)
{
    uint32_t x = ((const cpr_table_schema *)a)->table, y = ((const cpr_table_schema *)b)->table;
    return x < y ? -1 : x > y;
}

/* Bytes RocksDB holds for rows [begin, end) of a table (an estimate from
 * the SST indexes: cheap, and exact enough to size segments). */
static uint64_t approx_bytes(rocksdb_t *db, uint32_t job_id, uint32_t table, uint64_t begin,
                             uint64_t end)
{
    unsigned char lo[CPR_ROW_KEY_LEN], hi[CPR_ROW_KEY_LEN];
    cpr_row_key k = {job_id, table, begin, UINT64_MAX, 0};
    const char *starts[1] = {(const char *)lo}, *limits[1] = {(const char *)hi};
    size_t start_len = sizeof lo, limit_len = sizeof hi;
    uint64_t size = 0;
    char *err = NULL;
    cpr_key_row(lo, &k);
    k.row = end;
    cpr_key_row(hi, &k);
    rocksdb_approximate_sizes(db, 1, starts, &start_len, limits, &limit_len, &size, &err);
    if (err) {
        rocksdb_free(err);
        return UINT64_MAX; /* unknown: split as if large */
    }
    return size;
}

typedef struct seg_plan {
    restore_shared *sh;
    rocksdb_t *db;
    uint64_t target_bytes;  /* what fits in one worker's ring */
    segment *segs;
    size_t n, cap;
} seg_plan;

static int add_segment(seg_plan *p, const cpr_table_schema *t, uint64_t begin, uint64_t end)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        segment *grown = realloc(p->segs, cap * sizeof *grown);
        if (!grown)
            return -1;
        p->segs = grown;
        p->cap = cap;
    }
    p->segs[p->n++] = (segment){*t, begin, end};
    return 0;
}

/* Halve [begin, end) until each piece holds about one ring of data, so a
 * worker can scan a whole segment ahead of the consumer (see the top
 * comment). An empty stretch of a sparse table stays one segment: one seek. */
static int split_range(seg_plan *p, const cpr_table_schema *t, uint64_t begin, uint64_t end,
                       int depth)
{
    /* The estimate only decides how to cut, never whether to scan: it can
     * be 0 for rows that share a block with their neighbours. */
    uint64_t bytes = approx_bytes(p->db, p->sh->job_id, t->table, begin, end);
    if (bytes <= p->target_bytes || end - begin < 2 * 1024 || depth >= 40)
        return add_segment(p, t, begin, end);
    uint64_t mid = begin + (end - begin) / 2;
    if (split_range(p, t, begin, mid, depth + 1) != 0)
        return -1;
    return split_range(p, t, mid, end, depth + 1);
}

/* Cut every (table, range) into segments, tables in ascending order. */
static cpr_status plan_segments(restore_shared *sh, rocksdb_t *db, cpr_table_schema *tables,
                                size_t n_tables, const cpr_row_range *ranges, size_t n_ranges)
{
    seg_plan p = {.sh = sh, .db = db};
    int rc = 0;
    qsort(tables, n_tables, sizeof *tables, schema_cmp);
    for (size_t t = 0; rc == 0 && t < n_tables; t++) {
        if (t > 0 && tables[t].table == tables[t - 1].table)
            continue;
        uint64_t row_bytes = 8 + ((uint64_t)tables[t].dim + tables[t].state_dim) * 4;
        p.target_bytes = (RING_SLOTS - 1) * sh->batch_rows * row_bytes;
        for (size_t r = 0; rc == 0 && r < n_ranges; r++) {
            uint64_t begin = ranges[r].begin;
            uint64_t end = ranges[r].end < tables[t].rows ? ranges[r].end : tables[t].rows;
            if (begin < end)
                rc = split_range(&p, &tables[t], begin, end, 0);
        }
    }
    if (rc != 0) {
        free(p.segs);
        return cpr_fail(CPR_NO_MEMORY, "out of memory planning a restore");
    }
    sh->segs = p.segs;
    sh->n_segs = p.n;
    return CPR_OK;
}

static uint64_t newest_checkpoint(const cpr_job *job)
{
    return job->n_parts ? job->parts[job->n_parts - 1].checkpoint : 0;
}

/* Under store->mu: resolve as_of, copy the schemas, take the snapshot. */
static cpr_status prepare(cpr_store *store, restore_shared *sh, cpr_table_schema **tables,
                          size_t *n_tables)
{
    const cpr_restore_query *q = sh->q;
    cpr_job *job = cpr_catalog_find(&store->catalog, q->job);
    if (!job || job->n_parts == 0)
        return cpr_fail(CPR_NOT_FOUND, "job %s has no committed parts", q->job);
    sh->job_id = job->id;
    if (q->consistent) {
        if (cpr_job_cuts(job, &sh->as_of, 1) == 0)
            return cpr_fail(CPR_NOT_FOUND, "job %s has no consistent cut yet", q->job);
    } else {
        sh->as_of = q->as_of ? q->as_of : newest_checkpoint(job);
    }
    if (job->floor && sh->as_of < job->floor)
        return cpr_fail(CPR_FAILED_PRECONDITION, "checkpoint %llu of job %s was "
                        "reclaimed by retention; the oldest restorable is %llu",
                        (unsigned long long)sh->as_of, q->job,
                        (unsigned long long)job->floor);
    size_t n = q->n_tables ? q->n_tables : job->n_tables;
    *tables = malloc((n ? n : 1) * sizeof **tables);
    if (!*tables)
        return cpr_fail(CPR_NO_MEMORY, "out of memory preparing a restore");
    for (size_t i = 0; i < n; i++) {
        const cpr_table_schema *t = q->n_tables ? cpr_job_table(job, q->tables[i])
                                                : &job->tables[i];
        if (!t)
            return cpr_fail(CPR_NOT_FOUND, "table %u is not part of job %s: no committed "
                            "part declares it", q->tables[i], q->job);
        (*tables)[i] = *t;
    }
    *n_tables = n;
    /* GC publishes a new floor under store->mu before the retention filter
     * may drop anything below it, and the filter ignores snapshots: so the
     * iterators are made here, in the critical section that checked as_of
     * against the floor. They pin the files they read (retention_filter.h
     * F3); the snapshot hides commits that come later. */
    sh->snap = rocksdb_create_snapshot(store->db);
    /* Scans read ahead in large steps and stay out of the block cache. */
    sh->ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_verify_checksums(sh->ro, 1);
    rocksdb_readoptions_set_fill_cache(sh->ro, 0);
    rocksdb_readoptions_set_readahead_size(sh->ro, RESTORE_READAHEAD);
    rocksdb_readoptions_set_snapshot(sh->ro, sh->snap);
    sh->upper[0] = 'R';
    cpr_put_be32(sh->upper + 1, sh->job_id + 1);
    rocksdb_readoptions_set_iterate_upper_bound(sh->ro, (const char *)sh->upper, sizeof sh->upper);
    for (unsigned i = 0; i < sh->n_workers; i++)
        sh->workers[i].it = rocksdb_create_iterator(store->db, sh->ro);
    return CPR_OK;
}

/* ---- workers: start, consume, stop ------------------------------------------ */

static cpr_status start_workers(restore_shared *sh, uint32_t max_dim,
                                uint32_t max_sdim)
{
    for (unsigned i = 0; i < sh->n_workers; i++) {
        worker *w = &sh->workers[i];
        w->sh = sh;
        w->index = i;
        pthread_cond_init(&w->not_full, NULL);
        pthread_cond_init(&w->not_empty, NULL);
        for (int s = 0; s < RING_SLOTS; s++) {
            w->ring[s].ids = malloc(sh->batch_rows * sizeof(uint64_t));
            /* batch_rows <= 2^20 and dims <= 2^16 (checked): no overflow */
            w->ring[s].values = malloc(sh->batch_rows * max_dim * sizeof(float));
            w->ring[s].state = malloc(sh->batch_rows * ((size_t)max_sdim + 1) * sizeof(float));
            if (!w->ring[s].ids || !w->ring[s].values || !w->ring[s].state)
                return cpr_fail(CPR_NO_MEMORY, "out of memory for restore batches");
        }
    }
    for (unsigned i = 0; i < sh->n_workers; i++) {
        if (pthread_create(&sh->workers[i].thread, NULL, worker_main, &sh->workers[i]) != 0)
            return cpr_fail(CPR_RESOURCE_EXHAUSTED, "cannot start restore threads");
        sh->workers[i].started = 1;
    }
    return CPR_OK;
}

static cpr_status deliver(slot *s, cpr_row_fn fn, void *ctx, cpr_restore_result *res)
{
    cpr_row_batch b = {
        .table = s->table, .n = s->n, .ids = s->ids, .values = s->values,
        .values_count = s->n * s->dim, .state = s->state_dim ? s->state : NULL,
        .state_count = s->n * s->state_dim,
    };
    b.crc32c = cpr_crc32c_rows(b.ids, b.n, b.values, b.values_count, b.state, b.state_count);
    res->rows += b.n;
    res->bytes += b.n * 8 + (b.values_count + b.state_count) * 4;
    return fn(ctx, &b);
}

/* Take segment after segment, in order, from the worker that scanned it. */
static cpr_status consume(restore_shared *sh, cpr_row_fn fn, void *ctx, cpr_restore_result *res)
{
    cpr_status st = CPR_OK;
    for (size_t i = 0; st == CPR_OK && i < sh->n_segs; i++) {
        worker *w = &sh->workers[i % sh->n_workers];
        int seg_end = 0;
        while (st == CPR_OK && !seg_end) {
            pthread_mutex_lock(&sh->mu);
            while (w->count == 0)
                pthread_cond_wait(&w->not_empty, &sh->mu);
            slot *s = &w->ring[(w->head + RING_SLOTS - w->count) % RING_SLOTS];
            pthread_mutex_unlock(&sh->mu);
            seg_end = s->seg_end;
            if (seg_end && w->st)
                st = cpr_fail(w->st, "%s", w->errmsg);
            else if (s->n)
                st = deliver(s, fn, ctx, res);
            pthread_mutex_lock(&sh->mu); /* R2: release only after the callback */
            w->count--;
            pthread_cond_signal(&w->not_full);
            pthread_mutex_unlock(&sh->mu);
        }
    }
    return st;
}

static void stop_workers(cpr_store *store, restore_shared *sh)
{
    pthread_mutex_lock(&sh->mu);
    sh->cancel = 1; /* R3 */
    for (unsigned i = 0; i < sh->n_workers; i++)
        pthread_cond_broadcast(&sh->workers[i].not_full);
    pthread_mutex_unlock(&sh->mu);
    for (unsigned i = 0; i < sh->n_workers; i++) {
        worker *w = &sh->workers[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        for (int s = 0; s < RING_SLOTS; s++) {
            free(w->ring[s].ids);
            free(w->ring[s].values);
            free(w->ring[s].state);
        }
        if (w->sh) {
            pthread_cond_destroy(&w->not_full);
            pthread_cond_destroy(&w->not_empty);
        }
    }
    /* prepare made one per worker before the count could shrink to the
     * number of segments */
    for (unsigned i = 0; i < MAX_WORKERS; i++)
        if (sh->workers[i].it)
            rocksdb_iter_destroy(sh->workers[i].it);
    if (sh->ro)
        rocksdb_readoptions_destroy(sh->ro);
    if (sh->snap)
        rocksdb_release_snapshot(store->db, sh->snap);
}

/* Up to DEFAULT_BATCH_ROWS rows and about DEFAULT_BATCH_BYTES per batch:
 * ckptd sends one batch per message, and stock gRPC clients refuse messages
 * over 4 MiB unless told otherwise. */
static size_t default_batch_rows(const cpr_table_schema *tables, size_t n)
{
    uint64_t widest = 8 + 4;
    for (size_t i = 0; i < n; i++) {
        uint64_t row = 8 + ((uint64_t)tables[i].dim + tables[i].state_dim) * 4;
        widest = row > widest ? row : widest;
    }
    uint64_t rows = DEFAULT_BATCH_BYTES / widest;
    return rows < 1 ? 1 : rows > DEFAULT_BATCH_ROWS ? DEFAULT_BATCH_ROWS : (size_t)rows;
}

static unsigned worker_count(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    /* A worker spends much of its time in synchronous read-ahead, so run
     * several per core: on 2 cores, 8 workers restore about twice as fast
     * as 2 (docs/performance.md). */
    cpus *= WORKERS_PER_CPU;
    return cpus < 2 ? 2 : cpus > MAX_WORKERS ? MAX_WORKERS : (unsigned)cpus;
}

static cpr_status check_query(const cpr_restore_query *q, cpr_row_fn fn)
{
    if (!q || !fn)
        return cpr_fail(CPR_INVALID_ARGUMENT, "restore needs a query and a callback");
    cpr_status st = cpr_check_job_name(q->job);
    if (st == CPR_OK && q->modulo && q->remainder >= q->modulo)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "remainder %llu must be below modulo %llu",
                      (unsigned long long)q->remainder, (unsigned long long)q->modulo);
    if (st == CPR_OK && q->n_ranges && !q->ranges)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "%zu ranges given without an array", q->n_ranges);
    if (st == CPR_OK && q->n_tables && !q->tables)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "%zu tables given without an array", q->n_tables);
    if (st == CPR_OK && q->batch_rows > MAX_BATCH_ROWS)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "batch_rows %zu is above the limit of %u",
                      q->batch_rows, MAX_BATCH_ROWS);
    if (st == CPR_OK && (q->n_ranges > MAX_QUERY_ITEMS || q->n_tables > MAX_QUERY_ITEMS))
        st = cpr_fail(CPR_INVALID_ARGUMENT, "a restore takes at most %u ranges and %u tables",
                      MAX_QUERY_ITEMS, MAX_QUERY_ITEMS);
    return st;
}

cpr_status cpr_store_restore(cpr_store *store, const cpr_restore_query *q, cpr_row_fn fn,
                             void *ctx, cpr_restore_result *result)
{
    restore_shared sh = {.q = q, .n_workers = worker_count()};
    cpr_restore_result res = {0};
    cpr_table_schema *tables = NULL;
    cpr_row_range *ranges = NULL;
    size_t n_tables = 0, n_ranges = 0;
    uint32_t max_dim = 1, max_sdim = 0;
    cpr_status st = check_query(q, fn);
    pthread_mutex_init(&sh.mu, NULL);
    if (st == CPR_OK)
        st = normalise_ranges(q, &ranges, &n_ranges);
    if (st)
        goto out;
    sh.batch_rows = q->batch_rows ? q->batch_rows : DEFAULT_BATCH_ROWS;
    pthread_mutex_lock(&store->mu);
    st = prepare(store, &sh, &tables, &n_tables);
    pthread_mutex_unlock(&store->mu);
    if (st == CPR_OK && q->batch_rows == 0)
        sh.batch_rows = default_batch_rows(tables, n_tables);
    if (st == CPR_OK)
        st = plan_segments(&sh, store->db, tables, n_tables, ranges, n_ranges);
    for (size_t i = 0; st == CPR_OK && i < n_tables; i++) {
        max_dim = tables[i].dim > max_dim ? tables[i].dim : max_dim;
        max_sdim = tables[i].state_dim > max_sdim ? tables[i].state_dim : max_sdim;
    }
    if (st == CPR_OK && sh.n_segs < sh.n_workers)
        sh.n_workers = sh.n_segs ? (unsigned)sh.n_segs : 1;
    if (st == CPR_OK)
        st = start_workers(&sh, max_dim, max_sdim);
    if (st == CPR_OK)
        st = consume(&sh, fn, ctx, &res);
out:
    stop_workers(store, &sh);
    pthread_mutex_destroy(&sh.mu);
    atomic_fetch_add(&store->rows_out, res.rows);
    atomic_fetch_add(&store->bytes_out, res.bytes);
    free(sh.segs);
    free(tables);
    free(ranges);
    if (st == CPR_OK && result) {
        res.as_of = sh.as_of;
        *result = res;
    }
    return cpr_store_count(store, st);
}
