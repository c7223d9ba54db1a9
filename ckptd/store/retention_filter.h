/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention by compaction: a RocksDB compaction filter that drops the row
 * versions no retained state needs, while RocksDB rewrites files anyway.
 *
 * With F a job's retention floor, a version (row r, checkpoint c) is needed
 * iff c > F or it is r's newest version with c <= F (store_gc.c). The filter
 * sees a compaction's keys in order, each row's versions newest first, and
 * drops a version c <= F only when it has already passed a version c' of the
 * same row with c < c' <= F in the same compaction. A compaction that lacks
 * the row's newer versions keeps what it sees (they go in a later one), so
 * the filter only ever errs towards keeping.
 *
 * Invariants
 *  F1. The newest version <= F of every row is never dropped: nothing newer
 *      and <= F exists to be passed first. As floors only rise, the version
 *      kept under F is dropped under F' > F only for a newer one <= F'.
 *  F2. A filter uses the floors as they were when its compaction began. A
 *      floor enters the table only after it is durable and published under
 *      store->mu (restores below it refused), so a stale table only keeps
 *      more. A job missing from the table (out of memory) keeps everything.
 *  F3. The filter ignores snapshots (RocksDB no longer lets it honour them):
 *      a restore therefore creates its iterators under store->mu, in the
 *      same critical section that checks its checkpoint against the floor.
 *      Iterators pin the files they read, so a later compaction cannot take
 *      a version from under them (restore.c).
 *  F4. Table lock order: store->mu before floors->mu; nothing calls RocksDB
 *      while holding floors->mu (the filter factory takes it from RocksDB's
 *      compaction threads).
 */
#ifndef CPR_RETENTION_FILTER_H
#define CPR_RETENTION_FILTER_H

#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct cpr_floors {
    pthread_mutex_t mu;
    uint64_t *floor;             /* indexed by job id; 0: no floor */
    size_t n;
    _Atomic uint64_t dropped;    /* row versions dropped by the filter, ever */
} cpr_floors;

void cpr_floors_init(cpr_floors *f);
void cpr_floors_release(cpr_floors *f);
/* Record job `job_id`'s floor (F2: only once durable and published). */
void cpr_floors_set(cpr_floors *f, uint32_t job_id, uint64_t floor);

/* A factory for rocksdb_options_set_compaction_filter_factory, which takes
 * ownership; `f` must outlive the database and every options object. */
rocksdb_compactionfilterfactory_t *cpr_retention_filter_factory(cpr_floors *f);

#endif /* CPR_RETENTION_FILTER_H */
