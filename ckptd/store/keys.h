/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RocksDB key layout of the store. All integers are big-endian so that byte
 * order is numeric order. Every key starts with a one-byte record type:
 *
 *   'R' job_id:4 table:4 row:8 ~checkpoint:8 shard:4   row version (29 bytes)
 *   'M' job_id:4 shard:4 checkpoint:8                  part metadata
 *   'J' job name                                       job name -> job_id
 *   'F' job_id:4                                       retention floor
 *   'G' job name                                       recovery record
 *
 * The checkpoint id is stored inverted (~id) so the versions of one row are
 * ordered newest first: "newest version <= C" is a single forward seek to
 * (job, table, row, ~C). The shard is last so that two shards writing the
 * same row at the same checkpoint can never overwrite each other. The
 * recovery record is keyed by the job's name, not its id: it may exist before
 * the job has any part (and so any id), and nothing that works by job id
 * (GC's deletes and compactions of 'R' and 'M' ranges) can reach it.
 */
#ifndef CPR_STORE_KEYS_H
#define CPR_STORE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define CPR_ROW_KEY_LEN 29
#define CPR_META_KEY_LEN 17
#define CPR_FLOOR_KEY_LEN 5

typedef struct cpr_row_key {
    uint32_t job_id;
    uint32_t table;
    uint64_t row;
    uint64_t checkpoint;
    uint32_t shard;
} cpr_row_key;

void cpr_key_row(unsigned char out[CPR_ROW_KEY_LEN], const cpr_row_key *k);
/* Returns 0 if `key` is a well-formed row key. */
int cpr_key_row_parse(const void *key, size_t len, cpr_row_key *out);
/* Prefix of all row keys of (job, table): 9 bytes; of a job: 5 bytes. */
void cpr_key_row_prefix(unsigned char out[9], uint32_t job_id, uint32_t table);

void cpr_key_meta(unsigned char out[CPR_META_KEY_LEN], uint32_t job_id,
                  uint32_t shard, uint64_t checkpoint);
int cpr_key_meta_parse(const void *key, size_t len, uint32_t *job_id,
                       uint32_t *shard, uint64_t *checkpoint);
void cpr_key_floor(unsigned char out[CPR_FLOOR_KEY_LEN], uint32_t job_id);
/* 'J' + name; returns the length (<= 129). */
size_t cpr_key_job(unsigned char out[130], const char *name);
/* 'G' + name; returns the length (<= 129). */
size_t cpr_key_recovery(unsigned char out[130], const char *name);

void cpr_put_be32(unsigned char *p, uint32_t v);
void cpr_put_be64(unsigned char *p, uint64_t v);
uint32_t cpr_get_be32(const unsigned char *p);
uint64_t cpr_get_be64(const unsigned char *p);

#endif /* CPR_STORE_KEYS_H */
