/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The DLRM's data loader: a Criteo file split into a training part (the
 * first lines) and a held-out part (the last ceil(fraction x data lines)),
 * training samples served in windows that are optionally shuffled with a
 * seeded RNG, and a small state blob that resumes training exactly.
 *
 * Invariants:
 *  1. The current window holds the samples read from window_pos onward,
 *     shuffled by an RNG whose state before the shuffle was window_rng; so
 *     (window_pos, window_rng, served) re-creates the stream at any point.
 *  2. Training never reads a line numbered past end_line, the split, and the
 *     held-out reader starts exactly there.
 *  3. A batch never spans two epochs; an epoch counts as complete when its
 *     last sample has been served (need_rewind then says the next call
 *     starts over from the first data line, and window_rng is the RNG the
 *     next window will be shuffled with).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpr/crc32c.h"
#include "dlrm_internal.h"
#include "util.h"

#define UNSHUFFLED_WINDOW 4096u      /* samples read at once in file order */
#define MAX_WINDOW (1ull << 28)
#define SCAN_CHUNK (1u << 20)
#define STATE_MAGIC "CPRDLRML"
#define STATE_VERSION 1u

struct dlrm_loader {
    dlrm_loader_options opts;
    char *path;
    cpr_criteo_options reader_opts;
    cpr_criteo_reader *train, *held;
    uint64_t train_lines, holdout_lines;
    uint64_t end_line;             /* lines consumed when training data ends */
    cpr_criteo_pos holdout_pos;    /* the first held-out line */
    uint64_t malformed;
    /* The window (sample-major). */
    uint64_t window_cap;
    size_t window_n, served;
    float *w_dense, *w_label;
    int64_t *w_idx;
    uint32_t *order;               /* serving order: a permutation of 0..window_n */
    int window_at_end;             /* the window ends the epoch */
    cpr_criteo_pos window_pos;
    cpr_rng window_rng, rng;
    uint64_t epoch;
    int need_rewind;
};

/* ---- the split -------------------------------------------------------------------- */

/* Lines in the file (a last line without '\n' counts) and whether its last
 * byte is '\n'. */
static cpr_status count_lines(int fd, const char *path, char *buf, uint64_t *lines,
                              int *terminated)
{
    uint64_t newlines = 0;
    char last = '\n';
    for (;;) {
        ssize_t got = read(fd, buf, SCAN_CHUNK);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return cpr_fail(CPR_IO, "%s: read: %s", path, strerror(errno));
        if (got == 0)
            break;
        for (const char *p = buf, *end = buf + got; (p = memchr(p, '\n', (size_t)(end - p)));
             p++)
            newlines++;
        last = buf[got - 1];
    }
    *terminated = last == '\n';
    *lines = newlines + (last != '\n');
    return CPR_OK;
}

/* Byte offset just after the k-th '\n' counted from the end of the file. */
static cpr_status offset_after_newline_from_end(int fd, const char *path, char *buf,
                                                uint64_t k, uint64_t *out)
{
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0)
        return cpr_fail(CPR_IO, "%s: lseek: %s", path, strerror(errno));
    while (end > 0) {
        size_t want = (uint64_t)end < SCAN_CHUNK ? (size_t)end : SCAN_CHUNK;
        ssize_t got = pread(fd, buf, want, end - (off_t)want);
        if (got < 0 && errno == EINTR)
            continue;
        if (got != (ssize_t)want)
            return cpr_fail(CPR_IO, "%s: pread: %s", path, got < 0 ? strerror(errno)
                            : "file shrank");
        for (size_t i = want; i-- > 0;)
            if (buf[i] == '\n' && --k == 0) {
                *out = (uint64_t)(end - (off_t)want) + i + 1;
                return CPR_OK;
            }
        end -= (off_t)want;
    }
    return cpr_fail(CPR_IO, "%s: the file changed while it was read", path);
}

/* ceil(fraction x data), except that a product within rounding error of a
 * whole number is that number (0.3 x 1000 is 300, not 301). */
static uint64_t held_out_lines(double fraction, uint64_t data)
{
    double x = fraction * (double)data, whole = round(x);
    return fabs(x - whole) <= 1e-9 * (whole > 1 ? whole : 1) ? (uint64_t)whole
                                                              : (uint64_t)ceil(x);
}

/* Count the lines, place the split and the held-out reader's start. */
static cpr_status plan_split(dlrm_loader *l, uint64_t header_lines)
{
    uint64_t lines = 0;
    int terminated = 1;
    char *buf = malloc(SCAN_CHUNK);
    int fd = buf ? open(l->path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) {
        free(buf);
        return buf ? cpr_fail(errno == ENOENT ? CPR_NOT_FOUND : CPR_IO, "%s: %s", l->path,
                              strerror(errno))
                   : cpr_fail(CPR_NO_MEMORY, "out of memory scanning %s", l->path);
    }
    cpr_status st = count_lines(fd, l->path, buf, &lines, &terminated);
    uint64_t data = lines > header_lines ? lines - header_lines : 0;
    uint64_t held = held_out_lines(l->opts.holdout, data);
    if (st == CPR_OK && (data == 0 || held >= data))
        st = cpr_fail(CPR_INVALID_ARGUMENT, "%s: %llu data lines leave none for training "
                      "with holdout %g", l->path, (unsigned long long)data, l->opts.holdout);
    if (st == CPR_OK && held > 0)
        st = offset_after_newline_from_end(fd, l->path, buf, held + (terminated ? 1 : 0),
                                           &l->holdout_pos.offset_bytes);
    close(fd);
    free(buf);
    if (st)
        return st;
    l->holdout_lines = held;
    l->train_lines = data - held;
    l->end_line = header_lines + l->train_lines;
    l->holdout_pos.line = l->end_line;
    return CPR_OK;
}

/* ---- open / close ------------------------------------------------------------------ */

static cpr_status check_options(const dlrm_loader_options *o)
{
    if (!o || !o->path || !o->path[0])
        return cpr_fail(CPR_INVALID_ARGUMENT, "the loader needs a path");
    if (o->num_tables == 0 || o->num_tables > CPR_CRITEO_SPARSE || o->table_rows == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "the loader needs 1 to %d tables of >= 1 row",
                        CPR_CRITEO_SPARSE);
    if (!(o->holdout >= 0 && o->holdout < 1))
        return cpr_fail(CPR_INVALID_ARGUMENT, "holdout must be in [0, 1) (got %g)",
                        o->holdout);
    if (o->shuffle_window > MAX_WINDOW)
        return cpr_fail(CPR_INVALID_ARGUMENT, "shuffle window at most %llu samples",
                        (unsigned long long)MAX_WINDOW);
    return CPR_OK;
}

static cpr_status alloc_window(dlrm_loader *l)
{
    uint64_t cap = l->window_cap;
    l->w_dense = malloc(cap * CPR_CRITEO_DENSE * sizeof *l->w_dense);
    l->w_label = malloc(cap * sizeof *l->w_label);
    l->w_idx = malloc(cap * l->opts.num_tables * sizeof *l->w_idx);
    l->order = malloc(cap * sizeof *l->order);
    if (!l->w_dense || !l->w_label || !l->w_idx || !l->order)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a window of %llu samples",
                        (unsigned long long)cap);
    return CPR_OK;
}

cpr_status dlrm_loader_open(const dlrm_loader_options *opts, dlrm_loader **out)
{
    cpr_status st = check_options(opts);
    dlrm_loader *l = NULL;
    cpr_criteo_pos start;
    if (st)
        return st;
    /* The loader counts the lines first, rewinds at every epoch and seeks on
     * a resume: a pipe would be read by the count and lost to training. */
    struct stat sb;
    if (stat(opts->path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: not a regular file: training data must be "
                        "a file the loader can read more than once (lines are counted, "
                        "epochs rewind, resumes seek); write the stream to a file first",
                        opts->path);
    l = calloc(1, sizeof *l);
    if (!l || !(l->path = strdup(opts->path))) {
        free(l);
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening %s", opts->path);
    }
    l->opts = *opts;
    l->opts.path = l->path;
    l->reader_opts.rows_per_table = opts->table_rows;
    l->window_cap = opts->shuffle_window ? opts->shuffle_window : UNSHUFFLED_WINDOW;
    cpr_rng_seed(&l->rng, opts->seed);
    st = cpr_criteo_open(l->path, &l->reader_opts, &l->train);
    if (st == CPR_OK) {
        cpr_criteo_tell(l->train, &start);
        st = plan_split(l, start.line);
    }
    if (st == CPR_OK)
        st = alloc_window(l);
    if (st) {
        dlrm_loader_close(l);
        return st;
    }
    l->window_pos = start; /* the state of a loader that has served nothing */
    l->window_rng = l->rng;
    *out = l;
    return CPR_OK;
}

void dlrm_loader_close(dlrm_loader *l)
{
    if (!l)
        return;
    cpr_criteo_close(l->train);
    cpr_criteo_close(l->held);
    free(l->w_dense);
    free(l->w_label);
    free(l->w_idx);
    free(l->order);
    free(l->path);
    free(l);
}

uint64_t dlrm_loader_epoch(const dlrm_loader *l) { return l->epoch; }
uint64_t dlrm_loader_train_lines(const dlrm_loader *l) { return l->train_lines; }
uint64_t dlrm_loader_holdout_lines(const dlrm_loader *l) { return l->holdout_lines; }
uint64_t dlrm_loader_malformed(const dlrm_loader *l) { return l->malformed; }

/* ---- reading ------------------------------------------------------------------------ */

/* The next good sample: CPR_OK, CPR_NOT_FOUND at the end, or an I/O error.
 * Malformed lines are counted and skipped; `limit` stops before that line. */
static cpr_status read_sample(dlrm_loader *l, cpr_criteo_reader *r, uint64_t limit,
                              cpr_criteo_sample *s)
{
    for (;;) {
        if (cpr_criteo_line(r) >= limit)
            return CPR_NOT_FOUND;
        cpr_status st = cpr_criteo_next(r, s);
        if (st != CPR_INVALID_ARGUMENT)
            return st;
        l->malformed++; /* the line is consumed; the reader goes on after it */
        dlrm_log(DLRM_LOG_WARN, "skipping a malformed line: %s", cpr_errmsg());
    }
}

static void store_sample(dlrm_loader *l, size_t i, const cpr_criteo_sample *s)
{
    memcpy(l->w_dense + i * CPR_CRITEO_DENSE, s->dense, sizeof s->dense);
    for (uint32_t t = 0; t < l->opts.num_tables; t++)
        l->w_idx[i * l->opts.num_tables + t] = (int64_t)s->sparse[t];
    l->w_label[i] = (float)s->label;
}

/* Read the next window (invariant 1) and shuffle it. */
static cpr_status fill_window(dlrm_loader *l)
{
    cpr_criteo_sample s;
    cpr_status st = CPR_OK;
    size_t n = 0;
    cpr_criteo_tell(l->train, &l->window_pos);
    l->window_rng = l->rng;
    while (n < l->window_cap && (st = read_sample(l, l->train, l->end_line, &s)) == CPR_OK)
        store_sample(l, n++, &s);
    if (st != CPR_OK && st != CPR_NOT_FOUND)
        return st;
    l->window_at_end = st == CPR_NOT_FOUND || cpr_criteo_line(l->train) >= l->end_line;
    for (size_t i = 0; i < n; i++)
        l->order[i] = (uint32_t)i;
    if (l->opts.shuffle_window)
        for (size_t i = n; i > 1; i--) { /* Fisher-Yates */
            size_t j = (size_t)cpr_rng_below(&l->rng, i);
            uint32_t tmp = l->order[i - 1];
            l->order[i - 1] = l->order[j];
            l->order[j] = tmp;
        }
    l->window_n = n;
    l->served = 0;
    return CPR_OK;
}

static cpr_status rewind_epoch(dlrm_loader *l)
{
    static const cpr_criteo_pos first = {0, 0, 0};
    cpr_status st = cpr_criteo_seek(l->train, &first);
    if (st == CPR_OK)
        l->need_rewind = 0;
    return st;
}

static void serve(dlrm_loader *l, dlrm_batch *b)
{
    uint32_t tables = l->opts.num_tables;
    while (b->size < b->cap && l->served < l->window_n) {
        uint32_t i = l->order[l->served++];
        size_t r = b->size++;
        memcpy(b->dense + r * CPR_CRITEO_DENSE, l->w_dense + (size_t)i * CPR_CRITEO_DENSE,
               CPR_CRITEO_DENSE * sizeof *b->dense);
        for (uint32_t t = 0; t < tables; t++)
            b->indices[t * b->cap + r] = l->w_idx[(size_t)i * tables + t];
        b->labels[r] = l->w_label[i];
    }
}

cpr_status dlrm_loader_next(dlrm_loader *l, dlrm_batch *b)
{
    cpr_status st = CPR_OK;
    int empty_ends = 0; /* epochs that ended in this call before a sample was served */
    if (!b || b->num_tables != l->opts.num_tables || b->cap == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a batch for %u tables is needed",
                        l->opts.num_tables);
    b->size = 0;
    while (b->size < b->cap) {
        if (l->need_rewind && (st = rewind_epoch(l)))
            return st;
        if (l->served == l->window_n && !l->window_at_end && (st = fill_window(l)))
            return st;
        serve(l, b);
        if (l->served == l->window_n && l->window_at_end) {
            l->epoch++; /* the epoch's last sample was served (invariant 3) */
            l->need_rewind = 1;
            l->window_at_end = 0;
            l->window_n = l->served = 0;
            /* Nothing is left to re-create: the state is the first line and
             * the RNG as the next window will find it. */
            l->window_pos = (cpr_criteo_pos){0, 0, 0};
            l->window_rng = l->rng;
            if (b->size > 0)
                break;
            /* The first may be the tail of an epoch whose last lines were
             * malformed; a second is a whole epoch without a good line. */
            if (++empty_ends == 2)
                return cpr_fail(CPR_FAILED_PRECONDITION, "%s: no well-formed training line",
                                l->path);
        }
    }
    return CPR_OK;
}

/* ---- held-out samples ------------------------------------------------------------ */

cpr_status dlrm_loader_holdout_rewind(dlrm_loader *l)
{
    cpr_status st = CPR_OK;
    if (l->holdout_lines == 0)
        return cpr_fail(CPR_FAILED_PRECONDITION, "no held-out lines (holdout 0)");
    if (!l->held)
        st = cpr_criteo_open(l->path, &l->reader_opts, &l->held);
    if (st == CPR_OK)
        st = cpr_criteo_seek(l->held, &l->holdout_pos);
    return st;
}

cpr_status dlrm_loader_holdout_next(dlrm_loader *l, dlrm_batch *b)
{
    cpr_criteo_sample s;
    if (!l->held)
        return cpr_fail(CPR_FAILED_PRECONDITION, "dlrm_loader_holdout_rewind comes first");
    if (b->num_tables != l->opts.num_tables)
        return cpr_fail(CPR_INVALID_ARGUMENT, "a batch for %u tables is needed",
                        l->opts.num_tables);
    b->size = 0;
    while (b->size < b->cap) {
        cpr_status st = read_sample(l, l->held, UINT64_MAX, &s);
        if (st == CPR_NOT_FOUND)
            break;
        if (st)
            return st;
        size_t r = b->size++;
        memcpy(b->dense + r * CPR_CRITEO_DENSE, s.dense, sizeof s.dense);
        for (uint32_t t = 0; t < l->opts.num_tables; t++)
            b->indices[t * b->cap + r] = (int64_t)s.sparse[t];
        b->labels[r] = (float)s.label;
    }
    return CPR_OK;
}

/* ---- the state blob ------------------------------------------------------------------ */

cpr_status dlrm_loader_state_save(const dlrm_loader *l, void *buf, size_t cap, size_t *len)
{
    unsigned char *p = buf;
    if (!buf || cap < DLRM_LOADER_STATE_BYTES)
        return cpr_fail(CPR_INVALID_ARGUMENT, "the loader state needs %d bytes",
                        DLRM_LOADER_STATE_BYTES);
    memset(p, 0, DLRM_LOADER_STATE_BYTES);
    memcpy(p, STATE_MAGIC, 8);
    dlrm_put_u32(p + 8, STATE_VERSION);
    dlrm_put_u32(p + 12, l->need_rewind ? 1u : 0u);
    dlrm_put_u64(p + 16, l->epoch);
    dlrm_put_u64(p + 24, l->window_pos.offset_bytes);
    dlrm_put_u64(p + 32, l->window_pos.line);
    dlrm_put_u64(p + 40, l->window_pos.malformed);
    dlrm_put_u64(p + 48, l->served);
    for (int i = 0; i < 4; i++)
        dlrm_put_u64(p + 56 + 8 * i, l->window_rng.s[i]);
    dlrm_put_u64(p + 88, l->window_cap);
    dlrm_put_u64(p + 96, l->end_line);
    dlrm_put_u32(p + 108, cpr_crc32c(0, p, DLRM_LOADER_STATE_BYTES - 4));
    *len = DLRM_LOADER_STATE_BYTES;
    return CPR_OK;
}

static cpr_status check_state(const dlrm_loader *l, const unsigned char *p, size_t len)
{
    if (len != DLRM_LOADER_STATE_BYTES || memcmp(p, STATE_MAGIC, 8) != 0)
        return cpr_fail(CPR_CORRUPT, "not a DLRM loader state (%zu bytes)", len);
    if (dlrm_get_u32(p + 108) != cpr_crc32c(0, p, DLRM_LOADER_STATE_BYTES - 4))
        return cpr_fail(CPR_CORRUPT, "DLRM loader state: checksum mismatch");
    if (dlrm_get_u32(p + 8) != STATE_VERSION)
        return cpr_fail(CPR_INVALID_ARGUMENT, "DLRM loader state version %u; this build "
                        "reads version %u", dlrm_get_u32(p + 8), STATE_VERSION);
    if (dlrm_get_u64(p + 88) != l->window_cap || dlrm_get_u64(p + 96) != l->end_line)
        return cpr_fail(CPR_INVALID_ARGUMENT, "DLRM loader state of another split or "
                        "shuffle window than this loader's");
    return CPR_OK;
}

cpr_status dlrm_loader_state_load(dlrm_loader *l, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    cpr_status st = buf ? check_state(l, p, len)
                        : cpr_fail(CPR_INVALID_ARGUMENT, "no loader state given");
    if (st)
        return st;
    cpr_criteo_pos pos = {dlrm_get_u64(p + 24), dlrm_get_u64(p + 32), dlrm_get_u64(p + 40)};
    uint64_t served = dlrm_get_u64(p + 48);
    st = cpr_criteo_seek(l->train, &pos);
    if (st)
        return st; /* the reader is where it was: the loader is unchanged */
    for (int i = 0; i < 4; i++)
        l->rng.s[i] = dlrm_get_u64(p + 56 + 8 * i);
    l->epoch = dlrm_get_u64(p + 16);
    l->need_rewind = dlrm_get_u32(p + 12) & 1;
    l->window_n = l->served = 0;
    l->window_at_end = 0;
    if (l->need_rewind) { /* the window was spent; the next call rewinds */
        l->window_pos = pos;
        l->window_rng = l->rng;
        return CPR_OK;
    }
    st = fill_window(l); /* the same samples, shuffled the same way (invariant 1) */
    if (st == CPR_OK && served > l->window_n)
        st = cpr_fail(CPR_INVALID_ARGUMENT, "DLRM loader state serves %llu samples of a "
                      "window of %zu: the file changed", (unsigned long long)served,
                      l->window_n);
    if (st == CPR_OK)
        l->served = (size_t)served;
    return st;
}
