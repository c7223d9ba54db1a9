/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal helpers shared by every CPR module: setting the thread's error
 * message together with a status, leveled logging, BUG() for broken
 * invariants, and a monotonic clock. Not installed; not part of the API.
 */
#ifndef CPR_COMMON_H
#define CPR_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/status.h"

#define CPR_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Internal helpers that the shared libcpr exports to libcpr-store (which
 * links it, so that the process has one error-message buffer and one log
 * threshold). Not part of the API: no header in include/ declares them. */
#define CPR_INTERNAL_API __attribute__((visibility("default")))

#ifdef __cplusplus /* included by CUDA sources */
#define CPR_NORETURN [[noreturn]]
extern "C" {
#else
#define CPR_NORETURN _Noreturn
#endif

/* cpr_fail (record a message for cpr_errmsg() and return a status) is
 * public: cpr/status.h. */

/* The status whose cpr_status_name is the first `len` bytes of `name`;
 * CPR_OK when none is (CPR_OK itself is never looked up). */
cpr_status cpri_status_from_name(const char *name, size_t len);

/* Clear this thread's message (successful calls need not). */
CPR_INTERNAL_API void cpri_clear_error(void);

typedef enum cpri_log_level {
    CPR_LOG_ERROR = 0,
    CPR_LOG_WARN = 1,
    CPR_LOG_INFO = 2,
    CPR_LOG_DEBUG = 3
} cpri_log_level;

/* Current threshold; messages above it are not formatted. */
extern CPR_INTERNAL_API int cpri_log_threshold;

CPR_INTERNAL_API void cpri_log_impl(cpri_log_level level, const char *fmt, ...) CPR_PRINTF(2, 3);
#define cpri_log(level, ...) \
    do { \
        if ((int)(level) <= cpri_log_threshold) \
            cpri_log_impl((level), __VA_ARGS__); \
    } while (0)

/* Parse "error|warn|info|debug"; -1 if unknown. */
int cpri_log_level_parse(const char *name);

/* Report a broken invariant and abort: only for bugs, never for input. */
#define BUG(msg) cpri_bug(__FILE__, __LINE__, (msg))
CPR_INTERNAL_API CPR_NORETURN void cpri_bug(const char *file, int line, const char *msg);

/* Monotonic time in seconds. */
CPR_INTERNAL_API double cpri_now_s(void);

/* 1 if `name` is 1..128 chars of [A-Za-z0-9._-]. */
CPR_INTERNAL_API int cpri_name_valid(const char *name);

/* A part's tables (cpr/types.h): 0..CPRI_MAX_TABLES_PER_PART of them, each
 * with rows >= 1, dim 1..CPRI_MAX_DIM, state_dim 0..CPRI_MAX_DIM, no table
 * twice. CPR_INVALID_ARGUMENT, naming the table, otherwise. The store checks
 * every Begin with it; the client before it stages a row. */
#define CPRI_MAX_TABLES_PER_PART 4096u /* schema checks are quadratic in this */
#define CPRI_MAX_DIM 65536u            /* cpr/block.h's limit */
struct cpr_part_spec;
CPR_INTERNAL_API cpr_status cpri_check_part_tables(const struct cpr_part_spec *spec);

#ifdef __cplusplus
}
#else
#include <string.h>

/* The first index i of ids[0..n) (ascending) with ids[i] >= id; n if none. */
static inline size_t cpri_lower_bound_u64(const uint64_t *ids, size_t n, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* One scattered row's floats: an inline loop for the short rows of
 * embeddings (a library memcpy call per row of 16 floats, and another for
 * its one state value, cost more than the copy), memcpy beyond. Used by the
 * client's gathers and the embedding snapshot's copies. */
static inline void cpri_copy_floats(float *restrict dst, const float *restrict src, size_t n)
{
    if (n > 64) {
        memcpy(dst, src, n * sizeof *dst);
        return;
    }
    for (size_t j = 0; j < n; j++)
        dst[j] = src[j];
}
#endif

/* Tests: 1 makes the row codecs (common/codec.c) use their portable code
 * only, 0 lets them choose their kernels again. */
void cpri_codec_portable(int on);

#ifndef __cplusplus
#include <stdlib.h>

#include "cpr/block.h"
#include "cpr/types.h"

/* A row of a batch in the order to take it: its id and its index in the
 * batch. */
typedef struct cpri_id_index {
    uint64_t id;
    size_t index;
} cpri_id_index;

/* The order of a batch's rows by ascending id, for whoever writes them as
 * blocks (the store's put_rows, the client's direct writes): *order NULL
 * when they ascend already (a range batch, ids NULL, always does), else a
 * malloc'd permutation of b->n entries the caller frees. An id given twice
 * is CPR_INVALID_ARGUMENT, naming it. */
CPR_INTERNAL_API cpr_status cpri_batch_order(const cpr_row_batch *b, cpri_id_index **order);

/* The CRC32C a cpr_row_batch of an opened (so checked) row block's rows
 * carries (ids || values || state), derived from the block's own CRC
 * without reading the rows again: 1 and *crc for an f32 block without
 * versions (its rows are exactly those bytes, after the header), 0 for
 * another (compute it with cpr_crc32c_rows). `block` is the buffer `v` was
 * opened from. */
CPR_INTERNAL_API int cpri_block_rows_crc(const void *block, const cpr_block_view *v,
                                         uint32_t *crc);

/* The f32 values of an opened row block: the block's own when it is f32,
 * else decoded (cpr_block_values) into *buf, grown as needed (*cap floats;
 * the caller frees *buf). *values gets them. */
static inline cpr_status cpri_block_f32(const cpr_block_view *v, float **buf, size_t *cap,
                                        const float **values)
{
    if (v->values) {
        *values = v->values;
        return CPR_OK;
    }
    size_t need = (size_t)v->h.n * v->h.dim;
    if (need > *cap) {
        float *grown = (float *)realloc(*buf, need * sizeof *grown);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory decoding a block of %u rows", v->h.n);
        *buf = grown;
        *cap = need;
    }
    *values = *buf;
    return cpr_block_values(v, 0, v->h.n, *buf);
}
#endif

#endif /* CPR_COMMON_H */
