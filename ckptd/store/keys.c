/* SPDX-License-Identifier: Apache-2.0 */
/* Encoding and parsing of the store's RocksDB keys (layout in keys.h). */
#include <string.h>

#include "keys.h"

void cpri_put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

void cpri_put_be64(unsigned char *p, uint64_t v)
{
    cpri_put_be32(p, (uint32_t)(v >> 32));
    cpri_put_be32(p + 4, (uint32_t)v);
}

uint32_t cpri_get_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint64_t cpri_get_be64(const unsigned char *p)
{
    return (uint64_t)cpri_get_be32(p) << 32 | cpri_get_be32(p + 4);
}

void cpri_key_meta(unsigned char out[CPR_META_KEY_LEN], uint32_t job_id,
                  uint32_t shard, uint64_t checkpoint)
{
    cpri_key_part_record(out, 'M', job_id, shard, checkpoint);
}

void cpri_key_part_record(unsigned char out[CPR_META_KEY_LEN], char type, uint32_t job_id,
                         uint32_t shard, uint64_t checkpoint)
{
    out[0] = (unsigned char)type;
    cpri_put_be32(out + 1, job_id);
    cpri_put_be32(out + 5, shard);
    cpri_put_be64(out + 9, checkpoint);
}

int cpri_key_meta_parse(const void *key, size_t len, uint32_t *job_id,
                       uint32_t *shard, uint64_t *checkpoint)
{
    const unsigned char *p = key;
    if (len != CPR_META_KEY_LEN || (p[0] != 'M' && p[0] != 'B'))
        return -1;
    *job_id = cpri_get_be32(p + 1);
    *shard = cpri_get_be32(p + 5);
    *checkpoint = cpri_get_be64(p + 9);
    return 0;
}

void cpri_key_floor(unsigned char out[CPR_FLOOR_KEY_LEN], uint32_t job_id)
{
    out[0] = 'F';
    cpri_put_be32(out + 1, job_id);
}

size_t cpri_key_job(unsigned char out[130], const char *name)
{
    size_t len = strnlen(name, 128);
    out[0] = 'J';
    memcpy(out + 1, name, len);
    return len + 1;
}

size_t cpri_key_recovery(unsigned char out[130], const char *name)
{
    size_t len = cpri_key_job(out, name);
    out[0] = 'G';
    return len;
}
