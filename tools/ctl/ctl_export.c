/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `cprctl export`: restore one table of a job and write it to a file as CSV
 * or as raw little-endian float32 records (formats in cprctl --help and
 * docs/architecture.md). Rows stream from the restore callback straight into
 * a buffered FILE, so memory stays bounded by one restore batch whatever the
 * table's size. The output is written to a temporary FILE.tmp.XXXXXX, synced
 * and renamed only once the restore succeeded: a failed or interrupted
 * export never leaves a partial FILE behind (at worst the temporary file,
 * removed on every failure we see). A FIFO or device (/dev/stdout) is
 * written in place (cpri_outfile, common/cpr_cli.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpr_cli.h"
#include "cpr_common.h"
#include "ctl.h"

#define OUT_BUFFER_BYTES ((size_t)1 << 20)
#define PROGRESS_AFTER_S 1.0    /* quick exports print no progress */
#define PROGRESS_EVERY_S 0.5

typedef struct export_sink {
    const ctl *c;
    FILE *out;
    const char *name;           /* for messages: the file being written */
    int shaped;                 /* dim and state_dim known (first row seen) */
    uint32_t dim, state_dim;
    uint64_t rows, bytes;       /* rows and bytes written */
    double t0, next_progress_s;
} export_sink;

static cpr_status write_failed(const export_sink *s)
{
    return cpr_fail(CPR_IO, "writing %s: %s", s->name, strerror(errno));
}

/* Learn dim and state_dim from the first batch (and write the CSV header);
 * later batches must agree. */
static cpr_status shape(export_sink *s, const cpr_row_batch *b)
{
    if (b->values_count % b->n || b->state_count % b->n)
        return cpr_fail(CPR_CORRUPT, "a restored batch of %zu rows has %zu values and %zu "
                        "state values", b->n, b->values_count, b->state_count);
    uint32_t dim = (uint32_t)(b->values_count / b->n);
    uint32_t state_dim = (uint32_t)(b->state_count / b->n);
    if (s->shaped && (dim != s->dim || state_dim != s->state_dim))
        return cpr_fail(CPR_CORRUPT, "table %u changed shape mid-export: dim %u state_dim %u, "
                        "then %u and %u", b->table, s->dim, s->state_dim, dim, state_dim);
    int header = !s->shaped && s->c->format == CTL_FORMAT_CSV;
    s->shaped = 1;
    s->dim = dim;
    s->state_dim = state_dim;
    if (!header)
        return CPR_OK;
    int len = fprintf(s->out, "row");
    for (uint64_t i = 0; i < (uint64_t)dim + state_dim && len >= 0; i++) {
        s->bytes += (uint64_t)len;
        len = fprintf(s->out, ",%c%llu", i < dim ? 'v' : 's',
                      (unsigned long long)(i < dim ? i : i - dim));
    }
    if (len < 0 || fputc('\n', s->out) == EOF)
        return write_failed(s);
    s->bytes += (uint64_t)len + 1;
    return CPR_OK;
}

/* One row as a CSV line; returns bytes written or -1. */
static long csv_row(FILE *out, uint64_t id, const float *values, uint32_t dim,
                    const float *state, uint32_t state_dim)
{
    long total = 0;
    int len = fprintf(out, "%llu", (unsigned long long)id);
    for (uint64_t i = 0; i < (uint64_t)dim + state_dim && len >= 0; i++) {
        total += len;
        float v = i < dim ? values[i] : state[i - dim];
        len = fprintf(out, ",%.9g", (double)v);
    }
    if (len < 0 || fputc('\n', out) == EOF)
        return -1;
    return total + len + 1;
}

/* One row as a record: id, values, state (the host is little-endian: the
 * build refuses big-endian hosts). */
static long f32_row(FILE *out, uint64_t id, const float *values, uint32_t dim,
                    const float *state, uint32_t state_dim)
{
    if (fwrite(&id, sizeof id, 1, out) != 1 ||
        fwrite(values, sizeof *values, dim, out) != dim ||
        (state_dim && fwrite(state, sizeof *state, state_dim, out) != state_dim))
        return -1;
    return (long)(sizeof id + sizeof(float) * ((size_t)dim + state_dim));
}

static void progress(export_sink *s)
{
    double now = cpri_now_s();
    if (s->c->quiet || now < s->next_progress_s)
        return;
    s->next_progress_s = now + PROGRESS_EVERY_S;
    fprintf(stderr, "cprctl: export: %llu rows, %.1f MiB written, %.1f s\n",
            (unsigned long long)s->rows, (double)s->bytes / (1 << 20), now - s->t0);
}

static cpr_status write_batch(void *ctx, const cpr_row_batch *b)
{
    export_sink *s = ctx;
    if (b->n == 0)
        return CPR_OK;
    cpr_status st = shape(s, b);
    for (size_t i = 0; st == CPR_OK && i < b->n; i++) {
        const float *values = b->values + i * s->dim;
        const float *state = s->state_dim ? b->state + i * s->state_dim : NULL;
        long len = s->c->format == CTL_FORMAT_CSV
                       ? csv_row(s->out, b->ids[i], values, s->dim, state, s->state_dim)
                       : f32_row(s->out, b->ids[i], values, s->dim, state, s->state_dim);
        if (len < 0)
            st = write_failed(s);
        else
            s->bytes += (uint64_t)len;
    }
    if (st)
        return st;
    s->rows += b->n;
    progress(s);
    return CPR_OK;
}

/* ---- the file ------------------------------------------------------------------------- */

/* Finish a successful export: the CSV header of an empty table, then the
 * file synced and renamed into place (stdout: flushed). */
static cpr_status finish(export_sink *s, cpri_outfile *file)
{
    if (!s->shaped && s->c->format == CTL_FORMAT_CSV) {
        if (fputs("row\n", s->out) == EOF)
            return write_failed(s);
        s->bytes += 4;
    }
    if (!file->f)
        return fflush(s->out) != 0 ? write_failed(s) : CPR_OK;
    s->out = NULL;
    return cpri_outfile_commit(file);
}

static int summary(const ctl *c, const export_sink *s, const cpr_restore_result *res)
{
    const char *format = c->format == CTL_FORMAT_CSV ? "csv" : "f32";
    if (!c->json) {
        fprintf(stderr, "cprctl: export: %llu rows (%llu bytes, %s, dim %u, state_dim %u) "
                "of table %u of job %s as of checkpoint %llu to %s\n",
                (unsigned long long)s->rows, (unsigned long long)s->bytes, format, s->dim,
                s->state_dim, c->table, c->args[0], (unsigned long long)res->as_of,
                c->args[2]);
        return 0;
    }
    ctl_json j;
    ctl_json_begin(c, &j);
    ctl_jstr(&j, j.root, "job", c->args[0]);
    ctl_jnum(&j, j.root, "table", c->table);
    ctl_jstr(&j, j.root, "file", c->args[2]);
    ctl_jstr(&j, j.root, "format", format);
    ctl_jnum(&j, j.root, "as_of", res->as_of);
    ctl_jnum(&j, j.root, "rows", s->rows);
    ctl_jnum(&j, j.root, "bytes", s->bytes);
    ctl_jnum(&j, j.root, "dim", s->dim);
    ctl_jnum(&j, j.root, "state_dim", s->state_dim);
    return ctl_json_emit(c, &j, 0);
}

int ctl_cmd_export(ctl *c)
{
    const char *path = c->args[2];
    export_sink s = {.c = c, .name = path, .t0 = cpri_now_s()};
    s.next_progress_s = s.t0 + PROGRESS_AFTER_S;
    cpr_restore_query q = {.job = c->args[0], .as_of = c->as_of,
                           .consistent = c->consistent, .tables = &c->table, .n_tables = 1};
    cpr_restore_result res = {0};
    cpr_status st = CPR_OK;
    cpri_outfile file = {0};
    if (strcmp(path, "-") == 0) {
        s.out = stdout;
        s.name = "stdout";
    } else {
        st = cpri_outfile_open(&file, path);
        s.out = file.f;
        s.name = path;
    }
    if (st == CPR_OK && setvbuf(s.out, NULL, _IOFBF, OUT_BUFFER_BYTES) != 0)
        st = cpr_fail(CPR_NO_MEMORY, "out of memory for the output buffer");
    if (st == CPR_OK)
        st = cpr_client_restore(c->client, &q, NULL, 0, write_batch, &s, &res);
    if (st == CPR_OK)
        st = finish(&s, &file); /* commits the file (or removes it) */
    if (st)
        cpri_outfile_abort(&file); /* a failed export leaves nothing (no-op once committed) */
    return st ? ctl_fail(c, st) : summary(c, &s, &res);
}
