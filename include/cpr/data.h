/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/data.h - training data for DLRM runs: a streaming reader of Criteo
 * click logs (Kaggle/Terabyte TSV and the CSV-with-header variant) that turns
 * each line into a label, 13 log-scaled dense features and 26 embedding row
 * indices, and a seeded generator of synthetic Criteo-like TSV files whose
 * labels come from a hidden teacher model, so that training on them is
 * measurable. See docs/data.md for the hashing and generator design.
 *
 * Threading: a reader or generator handle is used by one thread at a time;
 * distinct handles are independent. The pure functions are thread-safe.
 *
 * Errors: every fallible function returns a cpr_status; cpr_errmsg() says
 * what went wrong (for a malformed line: the path, the line number and the
 * field). Out-parameters are written only on success.
 */
#ifndef CPR_DATA_H
#define CPR_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "cpr/export.h"
#include "cpr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CPR_CRITEO_DENSE 13        /* integer features I1..I13 */
#define CPR_CRITEO_SPARSE 26       /* categorical features C1..C26 = tables */
#define CPR_CRITEO_FIELDS 40       /* label + 13 + 26 */
#define CPR_CRITEO_MAX_LINE 65536  /* longest accepted line, bytes without '\n' */
#define CPR_CRITEO_DEFAULT_ROWS 10000000u /* rows per table when not given */

/* ---- hashing of categorical values ---------------------------------------- */

/*
 * 64-bit hash of categorical value `value` of table `table` (0-based, C1 is
 * table 0). Row index = hash % rows of the table. The key (table, value) is
 * mixed with a SplitMix64-style finaliser, a bijection on 64 bits, so
 * distinct keys never share a hash and only the modulo makes rows collide.
 */
CPR_API uint64_t cpr_criteo_hash(uint32_t table, uint32_t value);

/*
 * Hash of a missing (empty) categorical field of `table`. Its key lies
 * outside the 32-bit value range, so it never equals cpr_criteo_hash of a
 * present value of any table: missing gets a row of its own unless the
 * modulo makes it collide.
 */
CPR_API uint64_t cpr_criteo_hash_missing(uint32_t table);

/* ---- the reader --------------------------------------------------------------- */

typedef struct cpr_criteo_reader cpr_criteo_reader;

typedef enum cpr_criteo_format {
    CPR_CRITEO_AUTO = 0, /* a first line "label,..." => CSV with a header;
                            else the first of the first 64 lines with 39
                            TABs => TSV, or 39 commas => CSV; else from the
                            first line: a TAB => TSV, a ',' => CSV, or TSV */
    CPR_CRITEO_TSV = 1,  /* Kaggle train.txt / Terabyte day_N: no header */
    CPR_CRITEO_CSV = 2   /* comma separated; a "label," header is skipped */
} cpr_criteo_format;

/* Called for each line skipped as malformed (skip mode only). `reason` is
 * valid during the call. */
typedef void (*cpr_criteo_malformed_fn)(void *ctx, uint64_t line, const char *reason);

/*
 * Options for cpr_criteo_open. Zero-initialise and set what you need; zero
 * fields take the default. Fields are only ever appended.
 */
typedef struct cpr_criteo_options {
    uint64_t rows_per_table;    /* rows of every table (default
                                   CPR_CRITEO_DEFAULT_ROWS) */
    const uint64_t *table_rows; /* NULL, or CPR_CRITEO_SPARSE row counts (each
                                   >= 1) overriding rows_per_table; copied */
    int skip_malformed;         /* 0 (default): a malformed line makes next()
                                   fail; 1: skip and count it */
    cpr_criteo_format format;   /* default CPR_CRITEO_AUTO */
    cpr_criteo_malformed_fn on_malformed; /* may be NULL */
    void *malformed_ctx;
} cpr_criteo_options;

/*
 * One parsed line. A plain value type: its shape is fixed by the Criteo
 * format. Missing dense features read as 0 with their bit clear in
 * dense_present; missing categoricals have their bit clear in
 * sparse_present, raw 0, and row index cpr_criteo_hash_missing(t) % rows.
 */
typedef struct cpr_criteo_sample {
    uint32_t label;                          /* 0 or 1 */
    float dense[CPR_CRITEO_DENSE];           /* log(1 + max(x, 0)) */
    uint64_t sparse[CPR_CRITEO_SPARSE];      /* row index in table t */
    uint32_t raw[CPR_CRITEO_SPARSE];         /* categorical value as written */
    uint32_t dense_present;                  /* bit i: I(i+1) was present */
    uint32_t sparse_present;                 /* bit t: C(t+1) was present */
} cpr_criteo_sample;

/*
 * Where a reader is: enough to resume it exactly (cpr_criteo_seek), e.g.
 * from a training checkpoint. `line` counts every line consumed so far,
 * the CSV header and malformed lines included, so the next line read is
 * number line + 1.
 */
typedef struct cpr_criteo_pos {
    uint64_t offset_bytes; /* file offset of the next line */
    uint64_t line;         /* lines consumed before offset_bytes */
    uint64_t malformed;    /* malformed lines met before offset_bytes */
} cpr_criteo_pos;

/*
 * Open `path` for streaming. The format is fixed here (a CSV header is
 * checked and consumed: CPR_INVALID_ARGUMENT if it is not exactly
 * label,I1..I13,C1..C26). `opts` may be NULL (strict, default rows). On
 * success *out owns the reader; release it with cpr_criteo_close. Errors:
 * CPR_INVALID_ARGUMENT (bad options or header), CPR_NOT_FOUND (no such
 * file), CPR_IO, CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_criteo_open(const char *path, const cpr_criteo_options *opts,
                           cpr_criteo_reader **out);

/*
 * Read the next sample into *out. Returns CPR_OK; CPR_NOT_FOUND at the end
 * of the file (and again on every later call); in strict mode
 * CPR_INVALID_ARGUMENT for a malformed line, with "path:LINE: reason" in
 * cpr_errmsg(): that line is consumed and counted, and the next call goes on
 * with the line after it. CPR_IO is sticky: the reader is unusable after it.
 * A malformed line is one with a field count other than 40, a label other
 * than 0/1, an integer feature that is not [-]digits[.0...], a categorical
 * that is not 1-8 hex digits, or more than CPR_CRITEO_MAX_LINE bytes. A
 * trailing '\r' is ignored; an empty line is malformed.
 */
CPR_API cpr_status cpr_criteo_next(cpr_criteo_reader *reader, cpr_criteo_sample *out);

/* Lines consumed so far (the number of the line last read; 0 at the start). */
CPR_API uint64_t cpr_criteo_line(const cpr_criteo_reader *reader);

/* Malformed lines met so far (skipped, or reported in strict mode). */
CPR_API uint64_t cpr_criteo_malformed(const cpr_criteo_reader *reader);

/* The format in use (never CPR_CRITEO_AUTO after open). */
CPR_API cpr_criteo_format cpr_criteo_format_of(const cpr_criteo_reader *reader);

/* Current position; never fails. */
CPR_API void cpr_criteo_tell(const cpr_criteo_reader *reader, cpr_criteo_pos *out);

/*
 * Continue reading at `pos`, a value from cpr_criteo_tell on a reader of the
 * same file (or {0, 0, 0}: the first data line). Errors:
 * CPR_INVALID_ARGUMENT (offset past the end, or not at the start of a
 * line), CPR_FAILED_PRECONDITION (after a CPR_IO), CPR_IO. On failure the
 * reader is where it was.
 */
CPR_API cpr_status cpr_criteo_seek(cpr_criteo_reader *reader, const cpr_criteo_pos *pos);

/* Close the reader. NULL is a no-op. */
CPR_API void cpr_criteo_close(cpr_criteo_reader *reader);

/* ---- the synthetic generator ------------------------------------------------- */

typedef struct cpr_synth cpr_synth;

/*
 * Options for cpr_synth_create. Zero-initialise and set what you need; zero
 * fields take the default. Fields are only ever appended.
 */
typedef struct cpr_synth_options {
    uint64_t seed;             /* any value, 0 included (default 0) */
    uint32_t tables;           /* categorical fields filled, 1..26 (default
                                  26); the others are written empty */
    double zipf_s;             /* Zipf exponent, (0, 20] (default 1.05) */
    uint64_t cardinality;      /* ids per table, 1..2^32 (default 100000) */
    const uint64_t *table_cardinality; /* NULL, or `tables` values overriding
                                  cardinality; copied */
    double positive_rate;      /* target share of label 1, (0, 1) (default 0.25) */
} cpr_synth_options;

/*
 * Create a generator. The same options give the same lines, byte for byte,
 * on the same platform (the math library enters through exp/log/pow).
 * Creation calibrates the teacher's bias to the positive rate (a few ms).
 * Errors: CPR_INVALID_ARGUMENT, CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_synth_create(const cpr_synth_options *opts, cpr_synth **out);

/*
 * Write the next line, TSV with its '\n', into buf[0..cap) and its length in
 * *len. A line never exceeds CPR_SYNTH_LINE_MAX bytes. Errors:
 * CPR_INVALID_ARGUMENT if cap < CPR_SYNTH_LINE_MAX (nothing consumed).
 */
#define CPR_SYNTH_LINE_MAX 1024
CPR_API cpr_status cpr_synth_line(cpr_synth *synth, char *buf, size_t cap, size_t *len);

/* Called by cpr_synth_write every 2^20 rows and at the end. */
typedef void (*cpr_synth_progress_fn)(void *ctx, uint64_t rows_done, uint64_t rows_total);

/*
 * Write the next `rows` lines to a new file at `path` (replaced if it
 * exists). On failure the partial file is removed. `progress` may be NULL.
 * Errors: CPR_IO, CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_synth_write(cpr_synth *synth, const char *path, uint64_t rows,
                           cpr_synth_progress_fn progress, void *ctx);

/*
 * The 32-bit categorical value written for Zipf rank `id` (0 = most frequent)
 * of `table`: a keyed bijection of 32-bit integers, so ids stay distinct and
 * hashed row indices spread. For tests and analysis.
 */
CPR_API uint32_t cpr_synth_value(const cpr_synth *synth, uint32_t table, uint64_t id);

/* Destroy the generator. NULL is a no-op. */
CPR_API void cpr_synth_destroy(cpr_synth *synth);

/* ---- Zipf samples ---------------------------------------------------------------- */

typedef struct cpr_zipf cpr_zipf;

/*
 * A seeded stream of Zipf ranks 0..n-1 with P(k) proportional to (k+1)^-s:
 * the generator's own sampler (rejection-inversion, docs/data.md), for
 * tools that need hot rows without writing a file (cpr-analyze simulate).
 * The same (s, n, seed) gives the same stream. s in (0, 20], n in 1..2^53.
 * Errors: CPR_INVALID_ARGUMENT, CPR_NO_MEMORY.
 */
CPR_API cpr_status cpr_zipf_create(double s, uint64_t n, uint64_t seed, cpr_zipf **out);
/* The next rank, in 0..n-1. */
CPR_API uint64_t cpr_zipf_next(cpr_zipf *zipf);
/* NULL is a no-op. */
CPR_API void cpr_zipf_destroy(cpr_zipf *zipf);

#ifdef __cplusplus
}
#endif
#endif /* CPR_DATA_H */
