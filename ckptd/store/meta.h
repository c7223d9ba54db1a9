/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The commit record of a part ('M' key) or of a fold ('B' key): everything
 * List needs, the table schemas, each blob's length and per-block CRC32C,
 * the segment object holding the rows, and the block index (per block:
 * table, rows, first and last row id, offset and length in the segment,
 * CRC32C). Encoded as a small versioned little-endian record ending in a
 * CRC32C of all preceding bytes, so a damaged record is detected and
 * reported rather than trusted.
 */
#ifndef CPR_STORE_META_H
#define CPR_STORE_META_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/block.h"
#include "cpr/store.h"

typedef struct cpri_blob_meta {
    char name[CPR_NAME_MAX + 1];
    uint64_t size;
    uint32_t *crcs;   /* one per CPR_BLOB_BLOCK bytes; owned */
    size_t n_crcs;
} cpri_blob_meta;

/* Where one row block lives, as the catalog knows it. */
typedef struct cpri_block_ref {
    uint32_t table;
    uint32_t n;          /* rows */
    uint64_t first, last;/* row ids */
    uint64_t offset;     /* in the segment; a multiple of 8 */
    uint32_t len;        /* bytes, header included */
    uint32_t crc;        /* the block's CRC32C (also in its header) */
} cpri_block_ref;

typedef struct cpri_part_meta {
    uint32_t shard;
    uint64_t checkpoint;
    cpr_kind kind;
    uint64_t step;
    uint32_t num_shards;
    uint64_t base;
    uint64_t rows;
    uint64_t bytes;
    int64_t committed_unix_ms;
    uint32_t codecs;          /* bit 1 << c for each codec c its blocks use
                                 (0: none, or a record of version 2) */
    cpr_table_schema *tables; /* owned */
    size_t n_tables;
    cpri_blob_meta *blobs;     /* owned */
    size_t n_blobs;
    uint64_t seg_token;       /* names the segment object (0: no rows) */
    uint64_t seg_bytes;       /* its length */
    cpri_block_ref *blocks;    /* owned; in segment order */
    size_t n_blocks;
    size_t cap_blocks;        /* not stored */
    int consistent;           /* derived by the catalog, not stored */
} cpri_part_meta;

/*
 * The little-endian records' byte codec, shared by part records and restore
 * plans (plan.c). The host is little-endian (checked by the build), so
 * native == wire. A writer grows its buffer (oom set on failure, further
 * puts ignored); a reader never reads past len (bad set, zeros read
 * instead), so a decoder checks `bad` once after a run of gets.
 */
typedef struct cpri_wbuf {
    unsigned char *p;
    size_t len, cap;
    int oom;
} cpri_wbuf;
typedef struct cpri_rbuf {
    const unsigned char *p;
    size_t len, off;
    int bad;
} cpri_rbuf;
void cpri_wbuf_put(cpri_wbuf *b, const void *src, size_t n);
void cpri_rbuf_get(cpri_rbuf *r, void *dst, size_t n);
#define CPRI_PUT(b, v) do { __typeof__(v) v_ = (v); cpri_wbuf_put((b), &v_, sizeof v_); } while (0)
#define CPRI_GET(r, v) cpri_rbuf_get((r), &(v), sizeof(v))
/* A block ref as records hold it: table, n, first, last, offset, len, crc. */
#define CPRI_BLOCK_REF_BYTES 40
void cpri_put_block_ref(cpri_wbuf *b, const cpri_block_ref *ref);
void cpri_get_block_ref(cpri_rbuf *r, cpri_block_ref *ref);

/* Encode into a malloc'd buffer (caller frees). */
cpr_status cpri_meta_encode(const cpri_part_meta *m, unsigned char **buf, size_t *len);
/* Decode; CPR_CORRUPT on any inconsistency. On success *out owns arrays. */
cpr_status cpri_meta_decode(const void *buf, size_t len, cpri_part_meta *out);
void cpri_meta_release(cpri_part_meta *m);
/* Deep copy of the tables array into dst (dst's own arrays are replaced). */
cpr_status cpri_meta_copy_tables(cpri_part_meta *dst, const cpr_table_schema *tables,
                                size_t n);
const cpr_table_schema *cpri_meta_table(const cpri_part_meta *m, uint32_t table);
const cpri_blob_meta *cpri_meta_blob(const cpri_part_meta *m, const char *name);
/* Open a block read for `ref` (cpr_block_open: CRC32C, header, ids) and
 * check that it is the block the catalog records there. CPR_CORRUPT with a
 * message saying which, else *v points into data. */
cpr_status cpri_block_open_ref(const void *data, const cpri_block_ref *ref, cpr_block_view *v);

/* Append a block reference (grows m->blocks). */
cpr_status cpri_meta_add_block(cpri_part_meta *m, const cpri_block_ref *ref);

#endif /* CPR_STORE_META_H */
