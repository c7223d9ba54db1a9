/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recovery records (cpr/store.h): per job, a generation number and an opaque
 * plan, changed only by compare-and-set, so that every process of a job that
 * races to record its recovery decision learns the one that won. Keyed by
 * job name ('G' name, keys.h) so that a record may precede the job's first
 * part and stays out of reach of everything that works by job id (GC).
 *
 * Invariant S6 (store_internal.h): a put reads the current generation,
 * compares it, and writes the new record with a synced write, all under
 * recovery_mu; the caller hears of success only once the write is durable.
 * Reads take no lock: one RocksDB get sees either the old or the new record.
 *
 * Value layout: version:1 (1) ‖ generation:8 ‖ written_unix_ms:8 ‖
 * crc32c:4 ‖ plan, integers big-endian; the CRC32C covers the 17 bytes
 * before it and the plan, so a damaged record is refused (CPR_CORRUPT),
 * never trusted.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpr/crc32c.h"
#include "store_internal.h"
#include "rados.h"

#define RECORD_VERSION 1
#define HEADER_BYTES 21 /* version, generation, written time, crc */

typedef struct record {
    uint64_t generation;
    uint64_t written_unix_ms;
    void *plan;          /* malloc'd, never NULL once decoded */
    size_t len;
} record;

static uint64_t unix_ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint32_t record_crc(const unsigned char *head, const void *plan, size_t len)
{
    return cpr_crc32c(cpr_crc32c(0, head, 17), plan, len);
}

static cpr_status decode(const char *job, const char *val, size_t vlen, record *out)
{
    const unsigned char *v = (const unsigned char *)val;
    if (vlen < HEADER_BYTES || v[0] != RECORD_VERSION ||
        record_crc(v, v + HEADER_BYTES, vlen - HEADER_BYTES) != cpri_get_be32(v + 17))
        return cpr_fail(CPR_CORRUPT, "the recovery record of job %s is damaged (%zu bytes, "
                        "bad version or checksum): it cannot be trusted; an operator must "
                        "remove it", job, vlen);
    out->len = vlen - HEADER_BYTES;
    out->plan = malloc(out->len ? out->len : 1);
    if (!out->plan)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a %zu-byte recovery plan", out->len);
    memcpy(out->plan, v + HEADER_BYTES, out->len);
    out->generation = cpri_get_be64(v + 1);
    out->written_unix_ms = cpri_get_be64(v + 9);
    return CPR_OK;
}

/* The job's record as stored (*val malloc'd; NULL: none): from the pool
 * when the store is in RADOS, which any ckptd on it may have moved (R5). */
static cpr_status read_raw(cpr_store *store, const char *job, char **val, size_t *vlen)
{
    unsigned char key[130];
    size_t klen = cpri_key_recovery(key, job);
    if (store->rados)
        return cpri_rados_catalog_get(store->rados, key, klen, val, vlen);
    char *err = NULL;
    char *v = rocksdb_get(store->db, store->read_opts, (const char *)key, klen, vlen, &err);
    if (err)
        return cpri_rocks_error(err, "reading a recovery record");
    *val = NULL;
    if (v) {
        *val = malloc(*vlen ? *vlen : 1);
        if (*val)
            memcpy(*val, v, *vlen);
        rocksdb_free(v);
        if (!*val)
            return cpr_fail(CPR_NO_MEMORY, "out of memory reading a recovery record");
    }
    return CPR_OK;
}

/* Decode a stored record; generation 0 and an empty plan when there is none. */
static cpr_status decode_raw(const char *job, const char *val, size_t vlen, record *out)
{
    if (val)
        return decode(job, val, vlen, out);
    *out = (record){0, 0, malloc(1), 0};
    return out->plan ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory reading a recovery record");
}

static cpr_status read_record(cpr_store *store, const char *job, record *out)
{
    char *val = NULL;
    size_t vlen = 0;
    cpr_status st = read_raw(store, job, &val, &vlen);
    if (st == CPR_OK)
        st = decode_raw(job, val, vlen, out);
    free(val);
    return st;
}

/* Write generation and time (of *r) with `plan`, synced. */
static cpr_status write_record(cpr_store *store, const char *job, const record *r,
                               const void *plan, size_t len, const char *old, size_t oldlen)
{
    unsigned char key[130];
    size_t klen = cpri_key_recovery(key, job);
    unsigned char *val = malloc(HEADER_BYTES + len);
    if (!val)
        return cpr_fail(CPR_NO_MEMORY, "out of memory writing a %zu-byte recovery plan", len);
    val[0] = RECORD_VERSION;
    cpri_put_be64(val + 1, r->generation);
    cpri_put_be64(val + 9, r->written_unix_ms);
    if (len)
        memcpy(val + HEADER_BYTES, plan, len);
    cpri_put_be32(val + 17, record_crc(val, val + HEADER_BYTES, len));
    cpr_status st = cpri_space_check(store, CPRI_SPACE_CATALOG, "writing a recovery record");
    if (st == CPR_OK)
        st = cpri_catalog_cas(store, key, klen, old, oldlen, val, HEADER_BYTES + len,
                              "writing a recovery record");
    free(val);
    return st;
}

cpr_status cpr_store_recovery_get(cpr_store *store, const char *job, uint64_t *generation,
                                        void **plan, size_t *len, uint64_t *written_unix_ms)
{
    if (!store || !generation || !plan || !len)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_recovery_get: store, generation, plan "
                        "and len must not be NULL");
    cpr_status st = cpri_check_job_name(job);
    record r = {0};
    if (st == CPR_OK)
        st = read_record(store, job, &r);
    if (st)
        return cpri_store_count(store, st);
    *generation = r.generation;
    *plan = r.plan;
    *len = r.len;
    if (written_unix_ms)
        *written_unix_ms = r.written_unix_ms;
    return CPR_OK;
}

static cpr_status check_put(const char *job, uint64_t expected, const void *plan, size_t len)
{
    cpr_status st = cpri_check_job_name(job);
    if (st)
        return st;
    if (len > CPR_RECOVERY_PLAN_MAX)
        return cpr_fail(CPR_INVALID_ARGUMENT, "recovery plan of job %s is %zu bytes; at most "
                        "%u are stored", job, len, CPR_RECOVERY_PLAN_MAX);
    if (len && !plan)
        return cpr_fail(CPR_INVALID_ARGUMENT, "recovery plan is NULL with %zu bytes", len);
    if (expected == UINT64_MAX)
        return cpr_fail(CPR_INVALID_ARGUMENT, "expected generation %llu leaves no next one",
                        (unsigned long long)expected);
    return CPR_OK;
}

/* Under recovery_mu: compare, then write durably (S6). */
static cpr_status compare_and_set(cpr_store *store, const char *job, uint64_t expected,
                                  const void *plan, size_t len, record *now)
{
    record cur = {0};
    char *old = NULL;
    size_t oldlen = 0;
    cpr_status st = read_raw(store, job, &old, &oldlen);
    if (st == CPR_OK)
        st = decode_raw(job, old, oldlen, &cur);
    free(cur.plan);
    if (st == CPR_OK && cur.generation == expected) {
        *now = (record){expected + 1, unix_ms_now(), NULL, 0};
        st = write_record(store, job, now, plan, len, old, oldlen);
        if (st == CPR_FAILED_PRECONDITION) { /* another ckptd on the pool won (R5) */
            record won = {0};
            cur.generation = read_record(store, job, &won) == CPR_OK ? won.generation
                                                                      : expected + 1;
            free(won.plan);
        }
    } else if (st == CPR_OK) {
        st = CPR_FAILED_PRECONDITION;
    }
    free(old);
    if (st != CPR_FAILED_PRECONDITION)
        return st;
    return cpr_fail(CPR_FAILED_PRECONDITION, "the recovery record of job %s is at "
                    "generation %llu, not the expected %llu: another process recorded a "
                    "decision first; read it (GetRecovery) and act on it", job,
                    (unsigned long long)cur.generation, (unsigned long long)expected);
}

cpr_status cpr_store_recovery_put(cpr_store *store, const char *job, uint64_t expected,
                                        const void *plan, size_t len, uint64_t *generation,
                                        uint64_t *written_unix_ms)
{
    if (!store || !generation)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_store_recovery_put: store and generation "
                        "must not be NULL");
    cpr_status st = check_put(job, expected, plan, len);
    record now = {0};
    if (st == CPR_OK) {
        pthread_mutex_lock(&store->recovery_mu);
        st = compare_and_set(store, job, expected, plan, len, &now);
        pthread_mutex_unlock(&store->recovery_mu);
    }
    if (st)
        return cpri_store_count(store, st);
    *generation = now.generation;
    if (written_unix_ms)
        *written_unix_ms = now.written_unix_ms;
    return CPR_OK;
}

