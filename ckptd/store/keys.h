/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RocksDB key layout of the store's catalog (store format 2: RocksDB holds
 * no rows). All integers are big-endian so that byte order is numeric
 * order. Every key starts with a one-byte record type:
 *
 *   'V'                                                store format (u32 LE)
 *   'M' job_id:4 shard:4 checkpoint:8                  part record (meta.h)
 *   'B' job_id:4 shard:4 checkpoint:8                  fold record (meta.h)
 *   'J' job name                                       job name -> job_id
 *   'F' job_id:4                                       retention floor
 *   'G' job name                                       recovery record
 *   'N'                                                in RADOS: the next job id (u32
 *                                                      BE; rados.h R8)
 *   'W' gateway_id:4                                   in RADOS: a gateway's
 *                                                      "host:directory" (rados.h R6)
 *
 * The recovery record is keyed by the job's name, not its id: it may exist
 * before the job has any part (and so any id), and nothing that works by
 * job id (GC's deletes of 'M' and 'B' records) can reach it.
 */
#ifndef CPR_STORE_KEYS_H
#define CPR_STORE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define CPR_META_KEY_LEN 17
#define CPR_FLOOR_KEY_LEN 5

void cpri_key_meta(unsigned char out[CPR_META_KEY_LEN], uint32_t job_id,
                  uint32_t shard, uint64_t checkpoint);
/* 'M' (part) or 'B' (fold) record key. */
void cpri_key_part_record(unsigned char out[CPR_META_KEY_LEN], char type, uint32_t job_id,
                         uint32_t shard, uint64_t checkpoint);
/* Parses 'M' and 'B' keys. */
int cpri_key_meta_parse(const void *key, size_t len, uint32_t *job_id,
                       uint32_t *shard, uint64_t *checkpoint);
void cpri_key_floor(unsigned char out[CPR_FLOOR_KEY_LEN], uint32_t job_id);
/* 'J' + name; returns the length (<= 129). */
size_t cpri_key_job(unsigned char out[130], const char *name);
/* 'G' + name; returns the length (<= 129). */
size_t cpri_key_recovery(unsigned char out[130], const char *name);

void cpri_put_be32(unsigned char *p, uint32_t v);
void cpri_put_be64(unsigned char *p, uint64_t v);
uint32_t cpri_get_be32(const unsigned char *p);
uint64_t cpri_get_be64(const unsigned char *p);

#endif /* CPR_STORE_KEYS_H */
