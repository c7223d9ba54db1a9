/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Streaming reader of Criteo click logs. It reads through its own buffer
 * rather than stdio so that it always knows the file offset of the next
 * line (the resume point a trainer checkpoints) and so that an absurdly
 * long line costs a bounded buffer, not an unbounded getline(). Lines are
 * parsed in place; a sample is written out only when the whole line parsed.
 *
 * Invariants:
 *   1. next_offset is the file offset of buf[head]: the start of the line
 *      the next call reads, except while a too-long line is being skipped
 *      inside read_line().
 *   2. The fd's own position is next_offset + (tail - head).
 *   3. line and malformed count what lies before next_offset.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpr/data.h"
#include "cpr_common.h"
#include "data_internal.h"

#define READ_BUF_BYTES (256u * 1024u) /* > CPR_CRITEO_MAX_LINE + 1 */
#define REASON_BYTES 256
#define MAX_INT_DIGITS 18             /* fits int64 exactly */

static const char CSV_HEADER[] =
    "label,I1,I2,I3,I4,I5,I6,I7,I8,I9,I10,I11,I12,I13,"
    "C1,C2,C3,C4,C5,C6,C7,C8,C9,C10,C11,C12,C13,C14,C15,C16,C17,C18,C19,C20,"
    "C21,C22,C23,C24,C25,C26";

struct cpr_criteo_reader {
    int fd;
    char *path;                 /* for messages */
    char *buf;                  /* READ_BUF_BYTES */
    size_t head, tail;          /* unread bytes: buf[head..tail) */
    int eof;                    /* read() has returned 0 */
    cpr_status sticky;          /* CPR_IO once a read failed */
    uint64_t next_offset;
    uint64_t line;
    uint64_t malformed;
    uint64_t data_offset;       /* first data line: after a CSV header */
    uint64_t data_line;         /* lines before it: 1 with a header */
    char sep;
    cpr_criteo_format format;
    int skip_malformed;
    cpr_criteo_malformed_fn on_malformed;
    void *malformed_ctx;
    uint64_t table_rows[CPR_CRITEO_SPARSE];
};

/* ---- hashing ------------------------------------------------------------------ */

/* Keys: table in bits 33.., the value in bits 0..31, bit 32 marks missing.
 * Distinct keys stay distinct through the bijective mix. */
#define MISSING_BIT (1ull << 32)
#define HASH_SALT 0x9e3779b97f4a7c15ull /* keeps key 0 off the mixer's fixed point */

uint64_t cpr_criteo_hash(uint32_t table, uint32_t value)
{
    return cpr_mix64((((uint64_t)table << 33) | value) ^ HASH_SALT);
}

uint64_t cpr_criteo_hash_missing(uint32_t table)
{
    return cpr_mix64((((uint64_t)table << 33) | MISSING_BIT) ^ HASH_SALT);
}

/* ---- buffered lines ------------------------------------------------------------- */

static void consume(cpr_criteo_reader *r, size_t n)
{
    r->head += n;
    r->next_offset += n;
}

/* Move unread bytes to the front and read more after them. */
static cpr_status fill(cpr_criteo_reader *r)
{
    size_t unread = r->tail - r->head;
    ssize_t got;
    if (r->head > 0) {
        memmove(r->buf, r->buf + r->head, unread);
        r->head = 0;
        r->tail = unread;
    }
    do {
        got = read(r->fd, r->buf + r->tail, READ_BUF_BYTES - r->tail);
    } while (got < 0 && errno == EINTR);
    if (got < 0) {
        r->sticky = CPR_IO;
        return cpr_fail(CPR_IO, "%s: read: %s", r->path, strerror(errno));
    }
    if (got == 0)
        r->eof = 1;
    r->tail += (size_t)got;
    return CPR_OK;
}

/* Consume the rest of a line known to be too long, through its '\n'. */
static cpr_status skip_rest_of_line(cpr_criteo_reader *r)
{
    for (;;) {
        const char *nl = memchr(r->buf + r->head, '\n', r->tail - r->head);
        if (nl) {
            consume(r, (size_t)(nl - (r->buf + r->head)) + 1);
            return CPR_OK;
        }
        consume(r, r->tail - r->head);
        if (r->eof)
            return CPR_OK;
        cpr_status st = fill(r);
        if (st)
            return st;
    }
}

/*
 * The next line without its '\n', borrowed from the buffer until the next
 * call. CPR_NOT_FOUND at the end. A line longer than CPR_CRITEO_MAX_LINE is
 * consumed whole and reported through *too_long with *len 0.
 */
static cpr_status read_line(cpr_criteo_reader *r, const char **line, size_t *len,
                            int *too_long)
{
    size_t scanned = 0;
    *too_long = 0;
    for (;;) {
        const char *start = r->buf + r->head;
        const char *nl = memchr(start + scanned, '\n', r->tail - r->head - scanned);
        size_t have = nl ? (size_t)(nl - start) : r->tail - r->head;
        if (have > CPR_CRITEO_MAX_LINE) {
            *too_long = 1;
            *len = 0;
            return skip_rest_of_line(r);
        }
        if (nl || (r->eof && have > 0)) {
            *line = start;
            *len = have;
            consume(r, have + (nl ? 1 : 0));
            return CPR_OK;
        }
        if (r->eof)
            return CPR_NOT_FOUND;
        scanned = have;
        cpr_status st = fill(r);
        if (st)
            return st;
    }
}

/* ---- parsing ---------------------------------------------------------------- */

/* [-]digits[.0...]: Criteo integers, as the CSV variant writes them too. */
static int parse_int_field(const char *p, size_t n, double *out)
{
    size_t i = 0, digits = 0, significant = 0; /* leading zeros bound nothing */
    int64_t value = 0;
    int negative = n > 0 && p[0] == '-';
    i = (size_t)negative;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
        if (value == 0 && p[i] == '0')
            continue;
        if (significant++ == MAX_INT_DIGITS)
            return -1;
        value = value * 10 + (p[i] - '0');
    }
    if (digits == 0)
        return -1;
    if (i < n && p[i] == '.')
        for (i++; i < n && p[i] == '0'; i++)
            ;
    if (i != n)
        return -1;
    *out = negative ? -(double)value : (double)value;
    return 0;
}

/* 1..8 hex digits, either case. */
static int parse_hex_field(const char *p, size_t n, uint32_t *out)
{
    uint32_t value = 0;
    if (n < 1 || n > 8)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)p[i], digit;
        if (c >= '0' && c <= '9')
            digit = c - '0';
        else if (c >= 'a' && c <= 'f')
            digit = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            digit = c - 'A' + 10;
        else
            return -1;
        value = value << 4 | digit;
    }
    *out = value;
    return 0;
}

typedef struct fields {
    const char *at[CPR_CRITEO_FIELDS];
    size_t len[CPR_CRITEO_FIELDS];
} fields;

/* Split at `sep`; returns the number of fields found (stores the first 40). */
static size_t split(const char *p, size_t n, char sep, fields *f)
{
    size_t count = 0, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && p[i] != sep)
            continue;
        if (count < CPR_CRITEO_FIELDS) {
            f->at[count] = p + start;
            f->len[count] = i - start;
        }
        count++;
        start = i + 1;
    }
    return count;
}

/* "I3", "C12" or "label" for field index i. */
static void field_name(size_t i, char *out, size_t cap)
{
    if (i == 0)
        snprintf(out, cap, "label");
    else if (i <= CPR_CRITEO_DENSE)
        snprintf(out, cap, "I%zu", i);
    else
        snprintf(out, cap, "C%zu", i - CPR_CRITEO_DENSE);
}

/* A field's first bytes as text a terminal shows as they are: a byte
 * outside printable ASCII as \xHH (a NUL would cut the message, an escape
 * sequence would act on the terminal). */
#define SHOWN_BYTES 32
static void shown_field(const char *at, size_t len, char out[4 * SHOWN_BYTES + 1])
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t k = 0; k < len && k < SHOWN_BYTES; k++) {
        unsigned char c = (unsigned char)at[k];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
}

static int bad_field(const fields *f, size_t i, const char *what, char *why)
{
    char name[8], shown[4 * SHOWN_BYTES + 1];
    field_name(i, name, sizeof name);
    shown_field(f->at[i], f->len[i], shown);
    snprintf(why, REASON_BYTES, "field %zu (%s): '%s'%s is not %s", i + 1, name, shown,
             f->len[i] > SHOWN_BYTES ? "..." : "", what);
    return -1;
}

static int parse_dense(const fields *f, cpr_criteo_sample *s, char *why)
{
    for (size_t d = 0; d < CPR_CRITEO_DENSE; d++) {
        size_t i = 1 + d;
        double x = 0;
        s->dense[d] = 0.0f;
        if (f->len[i] == 0)
            continue;
        if (parse_int_field(f->at[i], f->len[i], &x))
            return bad_field(f, i, "an integer (at most 18 digits)", why);
        s->dense[d] = (float)log1p(x > 0 ? x : 0);
        s->dense_present |= 1u << d;
    }
    return 0;
}

static int parse_sparse(const cpr_criteo_reader *r, const fields *f,
                        cpr_criteo_sample *s, char *why)
{
    for (uint32_t t = 0; t < CPR_CRITEO_SPARSE; t++) {
        size_t i = 1 + CPR_CRITEO_DENSE + t;
        uint32_t value = 0;
        uint64_t h;
        if (f->len[i] == 0) {
            h = cpr_criteo_hash_missing(t);
        } else {
            if (parse_hex_field(f->at[i], f->len[i], &value))
                return bad_field(f, i, "1-8 hex digits", why);
            h = cpr_criteo_hash(t, value);
            s->sparse_present |= 1u << t;
        }
        s->raw[t] = value;
        s->sparse[t] = h % r->table_rows[t];
    }
    return 0;
}

/* Parse one line into *s; on failure write the reason into why[REASON_BYTES]. */
static int parse_line(const cpr_criteo_reader *r, const char *p, size_t n,
                      cpr_criteo_sample *s, char *why)
{
    fields f;
    double label = -1;
    if (n > 0 && p[n - 1] == '\r')
        n--;
    size_t count = split(p, n, r->sep, &f);
    if (count != CPR_CRITEO_FIELDS) {
        snprintf(why, REASON_BYTES, "expected %d %s-separated fields, found %zu",
                 CPR_CRITEO_FIELDS, r->sep == '\t' ? "TAB" : "comma", count);
        return -1;
    }
    memset(s, 0, sizeof *s);
    if (parse_int_field(f.at[0], f.len[0], &label) || (label != 0 && label != 1))
        return bad_field(&f, 0, "0 or 1", why);
    s->label = (uint32_t)label;
    if (parse_dense(&f, s, why) || parse_sparse(r, &f, s, why))
        return -1;
    return 0;
}

/* ---- the public reader -------------------------------------------------------------- */

cpr_status cpr_criteo_next(cpr_criteo_reader *r, cpr_criteo_sample *out)
{
    cpr_criteo_sample sample;
    char why[REASON_BYTES];
    const char *line = NULL;
    size_t len = 0;
    int too_long = 0;
    if (!r || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_criteo_next: NULL argument");
    if (r->sticky)
        return cpr_fail(r->sticky, "%s: the reader failed earlier", r->path);
    for (;;) {
        cpr_status st = read_line(r, &line, &len, &too_long);
        if (st == CPR_NOT_FOUND)
            return cpr_fail(CPR_NOT_FOUND, "%s: end of file after line %llu", r->path,
                            (unsigned long long)r->line);
        if (st)
            return st;
        r->line++;
        if (too_long)
            snprintf(why, sizeof why, "line longer than %d bytes", CPR_CRITEO_MAX_LINE);
        if (!too_long && parse_line(r, line, len, &sample, why) == 0) {
            *out = sample;
            return CPR_OK;
        }
        r->malformed++;
        if (!r->skip_malformed)
            return cpr_fail(CPR_INVALID_ARGUMENT, "%s:%llu: %s", r->path,
                            (unsigned long long)r->line, why);
        if (r->on_malformed)
            r->on_malformed(r->malformed_ctx, r->line, why);
    }
}

uint64_t cpr_criteo_line(const cpr_criteo_reader *r)
{
    return r ? r->line : 0;
}

uint64_t cpr_criteo_malformed(const cpr_criteo_reader *r)
{
    return r ? r->malformed : 0;
}

cpr_criteo_format cpr_criteo_format_of(const cpr_criteo_reader *r)
{
    return r ? r->format : CPR_CRITEO_AUTO;
}

void cpr_criteo_tell(const cpr_criteo_reader *r, cpr_criteo_pos *out)
{
    out->offset_bytes = r->next_offset;
    out->line = r->line;
    out->malformed = r->malformed;
}

/* CPR_OK if `offset` (<= file size) starts a line. */
static cpr_status check_line_start(const cpr_criteo_reader *r, uint64_t offset)
{
    struct stat sb;
    char before = 0;
    ssize_t got;
    if (fstat(r->fd, &sb) != 0)
        return cpr_fail(CPR_IO, "%s: fstat: %s", r->path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return cpr_fail(CPR_FAILED_PRECONDITION, "%s: not a regular file; cannot seek",
                        r->path);
    if (offset > (uint64_t)sb.st_size)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: offset %llu is past the end (%llu "
                        "bytes)", r->path, (unsigned long long)offset,
                        (unsigned long long)sb.st_size);
    if (offset == (uint64_t)sb.st_size) /* the end, as tell reports it (maybe no final newline) */
        return CPR_OK;
    if (offset == r->data_offset)
        return CPR_OK;
    do {
        got = pread(r->fd, &before, 1, (off_t)(offset - 1));
    } while (got < 0 && errno == EINTR);
    if (got != 1)
        return cpr_fail(CPR_IO, "%s: pread: %s", r->path,
                        got < 0 ? strerror(errno) : "short read");
    if (before != '\n')
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: offset %llu is not at the start of "
                        "a line", r->path, (unsigned long long)offset);
    return CPR_OK;
}

cpr_status cpr_criteo_seek(cpr_criteo_reader *r, const cpr_criteo_pos *pos)
{
    cpr_criteo_pos to;
    cpr_status st = CPR_OK;
    if (!r || !pos)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_criteo_seek: NULL argument");
    if (r->sticky)
        return cpr_fail(CPR_FAILED_PRECONDITION, "%s: the reader failed earlier",
                        r->path);
    to = *pos;
    if (to.offset_bytes == 0 && to.line == 0 && to.malformed == 0)
        to = (cpr_criteo_pos){r->data_offset, r->data_line, 0};
    if (to.offset_bytes < r->data_offset)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: offset %llu is inside the CSV header",
                        r->path, (unsigned long long)to.offset_bytes);
    st = check_line_start(r, to.offset_bytes);
    if (st)
        return st;
    if (lseek(r->fd, (off_t)to.offset_bytes, SEEK_SET) < 0)
        return cpr_fail(CPR_IO, "%s: lseek: %s", r->path, strerror(errno));
    r->head = r->tail = 0;
    r->eof = 0;
    r->next_offset = to.offset_bytes;
    r->line = to.line;
    r->malformed = to.malformed;
    return CPR_OK;
}

/* ---- open and close ------------------------------------------------------------- */

static cpr_status check_options(const cpr_criteo_options *o)
{
    if (o->format != CPR_CRITEO_AUTO && o->format != CPR_CRITEO_TSV &&
        o->format != CPR_CRITEO_CSV)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_criteo_open: unknown format %d",
                        (int)o->format);
    if (o->skip_malformed != 0 && o->skip_malformed != 1)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_criteo_open: skip_malformed must be "
                        "0 or 1");
    for (int t = 0; o->table_rows && t < CPR_CRITEO_SPARSE; t++)
        if (o->table_rows[t] == 0)
            return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_criteo_open: table_rows[%d] is 0",
                            t);
    return CPR_OK;
}

static void apply_options(cpr_criteo_reader *r, const cpr_criteo_options *o)
{
    uint64_t rows = o->rows_per_table ? o->rows_per_table : CPR_CRITEO_DEFAULT_ROWS;
    for (int t = 0; t < CPR_CRITEO_SPARSE; t++)
        r->table_rows[t] = o->table_rows ? o->table_rows[t] : rows;
    r->skip_malformed = o->skip_malformed;
    r->on_malformed = o->on_malformed;
    r->malformed_ctx = o->malformed_ctx;
    r->format = o->format;
}

/* Buffer the first line (or as much of it as fits the line limit). */
static cpr_status peek_first_line(cpr_criteo_reader *r, size_t *len)
{
    for (;;) {
        const char *nl = memchr(r->buf, '\n', r->tail);
        if (nl || r->eof || r->tail > CPR_CRITEO_MAX_LINE) {
            *len = nl ? (size_t)(nl - r->buf) : r->tail;
            return CPR_OK;
        }
        cpr_status st = fill(r);
        if (st)
            return st;
    }
}

/* The format of a file without a CSV header: that of the first of the lines
 * read so far (at most FORMAT_PROBE_LINES) that has a Criteo line's 39
 * separators of one kind, so that a blank, comment or broken first line does
 * not decide it; none: from the first line (a TAB => TSV, else a ',' => CSV,
 * otherwise TSV). */
#define FORMAT_PROBE_LINES 64
static cpr_criteo_format guess_format(const char *buf, size_t n, const char *first,
                                      size_t first_len)
{
    const char *p = buf, *end = buf + n;
    for (int i = 0; i < FORMAT_PROBE_LINES && p < end; i++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break; /* a line not read whole */
        size_t tabs = 0, commas = 0;
        for (const char *c = p; c < nl; c++) {
            tabs += *c == '\t';
            commas += *c == ',';
        }
        if (tabs == CPR_CRITEO_FIELDS - 1)
            return CPR_CRITEO_TSV;
        if (commas == CPR_CRITEO_FIELDS - 1 && tabs == 0)
            return CPR_CRITEO_CSV;
        p = nl + 1;
    }
    return !memchr(first, '\t', first_len) && memchr(first, ',', first_len) ? CPR_CRITEO_CSV
                                                                          : CPR_CRITEO_TSV;
}

/* Settle the format (from the first lines) and consume a CSV header. */
static cpr_status detect_format(cpr_criteo_reader *r)
{
    size_t len = 0, header_len = sizeof CSV_HEADER - 1;
    cpr_status st = peek_first_line(r, &len);
    if (st)
        return st;
    const char *first = r->buf;
    int header = r->format != CPR_CRITEO_TSV && len >= 6 && memcmp(first, "label,", 6) == 0;
    if (r->format == CPR_CRITEO_AUTO)
        r->format = header ? CPR_CRITEO_CSV : guess_format(r->buf, r->tail, first, len);
    r->sep = r->format == CPR_CRITEO_CSV ? ',' : '\t';
    if (!header)
        return CPR_OK;
    size_t content = len > 0 && first[len - 1] == '\r' ? len - 1 : len;
    if (content != header_len || memcmp(first, CSV_HEADER, header_len) != 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s:1: the CSV header is not "
                        "label,I1..I13,C1..C26", r->path);
    consume(r, len + (len < r->tail ? 1 : 0));
    r->line = r->data_line = 1;
    r->data_offset = r->next_offset;
    return CPR_OK;
}

static cpr_status open_file(const char *path, int *fd)
{
    do {
        *fd = open(path, O_RDONLY | O_CLOEXEC);
    } while (*fd < 0 && errno == EINTR);
    if (*fd >= 0)
        return CPR_OK;
    return cpr_fail(errno == ENOENT ? CPR_NOT_FOUND : CPR_IO, "open %s: %s", path,
                    strerror(errno));
}

cpr_status cpr_criteo_open(const char *path, const cpr_criteo_options *opts,
                           cpr_criteo_reader **out)
{
    static const cpr_criteo_options defaults;
    cpr_criteo_reader *r = NULL;
    cpr_status st = CPR_OK;
    if (!path || !out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "cpr_criteo_open: NULL argument");
    if (!opts)
        opts = &defaults;
    st = check_options(opts);
    if (st)
        goto out;
    r = calloc(1, sizeof *r);
    if (!r) {
        st = cpr_fail(CPR_NO_MEMORY, "cpr_criteo_open: out of memory");
        goto out;
    }
    r->fd = -1;
    r->path = strdup(path);
    r->buf = malloc(READ_BUF_BYTES);
    if (!r->path || !r->buf) {
        st = cpr_fail(CPR_NO_MEMORY, "cpr_criteo_open: out of memory");
        goto out;
    }
    apply_options(r, opts);
    st = open_file(path, &r->fd);
    if (st)
        goto out;
    st = detect_format(r);
out:
    if (st) {
        cpr_criteo_close(r);
        return st;
    }
    *out = r;
    return CPR_OK;
}

void cpr_criteo_close(cpr_criteo_reader *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    free(r->buf);
    free(r->path);
    free(r);
}
