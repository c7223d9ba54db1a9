/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of cpr/data.h: the Criteo reader on real rows (the shared
 * DeepCTR sample, values checked by hand against the file), on the Kaggle
 * TSV form with empty fields, on malformed lines in both modes, and across
 * a saved and restored position; the hash's golden values (a changed hash
 * would silently remap every trained embedding row); and the synthetic
 * generator: reproducibility, Zipf head share against theory, positive
 * rate, and labels that the features really predict.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr/data.h"
#include "testutil.h"

#define SAMPLE_ROWS 120
#define SAMPLE_POSITIVES 26 /* awk -F, 'NR>1{s+=$1} END{print s}' */

typedef struct fixture {
    char *dir;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->dir = tu_mkdtemp("cpr-criteo");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static char *path_in(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    assert_non_null(p);
    snprintf(p, len, "%s/%s", dir, name);
    return p;
}

static char *sample_path(void)
{
    const char *dir = getenv("CPR_TEST_DATA");
    assert_non_null(dir);
    return path_in(dir, "criteo_sample.csv");
}

static void write_text(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void assert_near(double got, double want, double tol)
{
    if (fabs(got - want) > tol)
        fail_msg("got %.9g, want %.9g (tolerance %g)", got, want, tol);
}

/* Read sample number `index` (1-based among data lines). */
static void read_nth(cpr_criteo_reader *r, int index, cpr_criteo_sample *s)
{
    for (int i = 0; i < index; i++)
        assert_int_equal(cpr_criteo_next(r, s), CPR_OK);
}

/* ---- hashing ----------------------------------------------------------------------- */

static void test_hash_golden(void **unused)
{
    (void)unused;
    /* Computed independently (Python, SplitMix64 finaliser of
     * ((table << 33) | value) ^ 0x9e3779b97f4a7c15). */
    assert_true(cpr_criteo_hash(0, 0x05db9164u) == 0xe6ff41ee3686db84ull);
    assert_true(cpr_criteo_hash(25, 0x2fede552u) == 0x56d36a9aa431a176ull);
    assert_true(cpr_criteo_hash(0, 0) == 0xe220a8397b1dcdafull);
    assert_true(cpr_criteo_hash_missing(0) == 0x219fc13d6bc5b015ull);
    assert_true(cpr_criteo_hash_missing(25) == 0xd640e7e412d3efbfull);
    for (uint32_t t = 0; t < CPR_CRITEO_SPARSE; t++) {
        assert_true(cpr_criteo_hash_missing(t) != cpr_criteo_hash(t, 0xffffffffu));
        assert_true(cpr_criteo_hash(t, 7) != cpr_criteo_hash((t + 1) % 26, 7));
    }
}

/* ---- the shared real sample ----------------------------------------------------------- */

static void test_sample_counts(void **unused)
{
    (void)unused;
    char *path = sample_path();
    cpr_criteo_reader *r = NULL;
    cpr_criteo_sample s;
    uint64_t rows = 0, positives = 0;
    assert_int_equal(cpr_criteo_open(path, NULL, &r), CPR_OK);
    assert_int_equal(cpr_criteo_format_of(r), CPR_CRITEO_CSV);
    assert_int_equal(cpr_criteo_line(r), 1); /* the header */
    cpr_status st = cpr_criteo_next(r, &s);
    for (; st == CPR_OK; st = cpr_criteo_next(r, &s)) {
        rows++;
        positives += s.label;
        for (int t = 0; t < CPR_CRITEO_SPARSE; t++)
            assert_true(s.sparse[t] < CPR_CRITEO_DEFAULT_ROWS);
    }
    assert_int_equal(st, CPR_NOT_FOUND);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_NOT_FOUND); /* stays at the end */
    assert_int_equal(rows, SAMPLE_ROWS);
    assert_int_equal(positives, SAMPLE_POSITIVES);
    assert_int_equal(cpr_criteo_malformed(r), 0);
    assert_int_equal(cpr_criteo_line(r), SAMPLE_ROWS + 1);
    cpr_criteo_close(r);
    free(path);
}

/* File line 2: 0,,3,260.0,,17668.0,,,33.0,,,,0.0,,05db9164,...,c0d61a5c,, */
static void check_line2(const cpr_criteo_sample *s, uint64_t rows)
{
    assert_int_equal(s->label, 0);
    assert_int_equal(s->dense_present, (1u << 1) | (1u << 2) | (1u << 4) | (1u << 7) |
                                           (1u << 11));
    assert_near(s->dense[0], 0.0, 0);
    assert_near(s->dense[1], log(4.0), 1e-6);
    assert_near(s->dense[2], log(261.0), 1e-6);
    assert_near(s->dense[4], log(17669.0), 1e-6);
    assert_near(s->dense[7], log(34.0), 1e-6);
    assert_near(s->dense[11], 0.0, 0);
    assert_int_equal(s->raw[0], 0x05db9164u);
    assert_int_equal(s->raw[23], 0xc0d61a5cu);
    /* C19, C20, C22, C25, C26 are empty. */
    assert_int_equal(s->sparse_present, 0x3ffffffu & ~((1u << 18) | (1u << 19) |
                                                      (1u << 21) | (1u << 24) | (1u << 25)));
    assert_int_equal(s->raw[18], 0);
    assert_true(s->sparse[0] == 0xe6ff41ee3686db84ull % rows);
    assert_true(s->sparse[18] == cpr_criteo_hash_missing(18) % rows);
}

static void test_sample_fields(void **unused)
{
    (void)unused;
    char *path = sample_path();
    cpr_criteo_reader *r = NULL;
    cpr_criteo_sample s;
    cpr_criteo_options opts = {.rows_per_table = 1000};
    assert_int_equal(cpr_criteo_open(path, &opts, &r), CPR_OK);
    read_nth(r, 1, &s);
    check_line2(&s, 1000);
    /* File line 3: 0,,-1,19.0,...: a negative count reads as 0, present. */
    read_nth(r, 1, &s);
    assert_true(s.dense_present & 2u);
    assert_near(s.dense[1], 0.0, 0);
    assert_near(s.dense[2], log(20.0), 1e-6);
    /* File line 9: 1,19.0,10,...,5.0,,2.0,05db9164,...,,7227c706,...,e8b83407,2fede552 */
    read_nth(r, 6, &s);
    assert_int_equal(cpr_criteo_line(r), 9);
    assert_int_equal(s.label, 1);
    assert_near(s.dense[0], log(20.0), 1e-6);
    assert_near(s.dense[10], log(6.0), 1e-6);
    assert_false(s.dense_present & (1u << 11));
    assert_false(s.sparse_present & (1u << 5));  /* C6 empty */
    assert_false(s.sparse_present & (1u << 21)); /* C22 empty */
    assert_int_equal(s.raw[6], 0x7227c706u);
    assert_int_equal(s.raw[25], 0x2fede552u);
    assert_true(s.sparse[25] == 0x56d36a9aa431a176ull % 1000);
    /* File line 121, the last: 0,,8,8.0,5.0,25660.0,...,05db9164,90081f33,... */
    read_nth(r, SAMPLE_ROWS - 8, &s);
    assert_int_equal(cpr_criteo_line(r), 121);
    assert_near(s.dense[4], log(25661.0), 1e-6);
    assert_int_equal(s.raw[1], 0x90081f33u);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_NOT_FOUND);
    cpr_criteo_close(r);
    free(path);
}

/* ---- the Kaggle TSV form ----------------------------------------------------------------- */

/* Append one line of CPR_CRITEO_FIELDS fields (NULL: empty) joined by TABs. */
static void append_line(char *text, size_t cap, const char *const *fields, const char *end)
{
    size_t len = strlen(text);
    for (int i = 0; i < CPR_CRITEO_FIELDS; i++)
        len += (size_t)snprintf(text + len, cap - len, "%s%s", i ? "\t" : "",
                                fields[i] ? fields[i] : "");
    snprintf(text + len, cap - len, "%s", end);
}

/* Line 1: every field empty but the label. Line 2: CRLF, upper-case and
 * short hex. Line 3: every field set, no final newline. */
static void write_kaggle(const char *path)
{
    char text[4096] = "";
    const char *fields[CPR_CRITEO_FIELDS] = {"1"};
    append_line(text, sizeof text, fields, "\n");
    fields[0] = "0";
    fields[1] = "5";
    fields[13] = "7";
    fields[14] = "ABCDEF01";
    fields[15] = "a";
    append_line(text, sizeof text, fields, "\r\n");
    static const char *const counts[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8",
                                         "9", "10", "11", "12"};
    fields[0] = "1";
    for (int i = 0; i < CPR_CRITEO_DENSE; i++)
        fields[1 + i] = counts[i];
    for (int t = 0; t < CPR_CRITEO_SPARSE; t++)
        fields[1 + CPR_CRITEO_DENSE + t] = "0000000f";
    append_line(text, sizeof text, fields, "");
    write_text(path, text, strlen(text));
}

static void test_tsv_kaggle(void **state)
{
    fixture *f = *state;
    char *path = path_in(f->dir, "train.txt");
    uint64_t rows[CPR_CRITEO_SPARSE];
    for (int t = 0; t < CPR_CRITEO_SPARSE; t++)
        rows[t] = (uint64_t)t + 1;
    write_kaggle(path);
    cpr_criteo_options opts = {.table_rows = rows};
    cpr_criteo_reader *r = NULL;
    cpr_criteo_sample s;
    assert_int_equal(cpr_criteo_open(path, &opts, &r), CPR_OK);
    assert_int_equal(cpr_criteo_format_of(r), CPR_CRITEO_TSV);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(s.label, 1);
    assert_int_equal(s.dense_present, 0);
    assert_int_equal(s.sparse_present, 0);
    for (uint32_t t = 0; t < CPR_CRITEO_SPARSE; t++)
        assert_true(s.sparse[t] == cpr_criteo_hash_missing(t) % (t + 1));
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(s.label, 0);
    assert_int_equal(s.dense_present, 1u | (1u << 12));
    assert_near(s.dense[0], log(6.0), 1e-6);
    assert_near(s.dense[12], log(8.0), 1e-6);
    assert_int_equal(s.raw[0], 0xabcdef01u);
    assert_int_equal(s.raw[1], 0xau);
    assert_int_equal(s.sparse_present, 3u);
    assert_true(s.sparse[1] == cpr_criteo_hash(1, 0xa) % 2);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(s.dense_present, 0x1fffu);
    assert_near(s.dense[12], log(13.0), 1e-6);
    assert_int_equal(s.raw[25], 15);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_NOT_FOUND);
    assert_int_equal(cpr_criteo_line(r), 3);
    assert_int_equal(cpr_criteo_malformed(r), 0);
    cpr_criteo_close(r);
    free(path);
}

/* ---- malformed lines ---------------------------------------------------------------- */

/* A good TSV line with label `label` and categorical value `c` everywhere. */
static void good_line(char *out, size_t cap, int label, const char *c)
{
    size_t len = (size_t)snprintf(out, cap, "%d", label);
    for (int d = 0; d < CPR_CRITEO_DENSE; d++)
        len += (size_t)snprintf(out + len, cap - len, "\t%d", d);
    for (int t = 0; t < CPR_CRITEO_SPARSE; t++)
        len += (size_t)snprintf(out + len, cap - len, "\t%s", c);
    snprintf(out + len, cap - len, "\n");
}

/* Lines 1, 4 and 10 are good; 2, 3, 5, 6, 7, 8 and 9 are not. */
static const uint64_t BAD_LINES[] = {2, 3, 5, 6, 7, 8, 9};
#define N_BAD (sizeof BAD_LINES / sizeof BAD_LINES[0])

static char *write_malformed(const char *dir)
{
    enum { CAP = 200000 };
    char *text = malloc(CAP), line[1024];
    size_t len = 0;
    assert_non_null(text);
    text[0] = '\0';
    good_line(line, sizeof line, 1, "00000001");
    len += (size_t)snprintf(text + len, CAP - len, "%s", line);                 /* 1 */
    len += (size_t)snprintf(text + len, CAP - len, "0\t1\t2\t3\n");              /* 2 */
    good_line(line, sizeof line, 0, "xyz1");
    len += (size_t)snprintf(text + len, CAP - len, "%s", line);                 /* 3 */
    good_line(line, sizeof line, 0, "00000004");
    len += (size_t)snprintf(text + len, CAP - len, "%s", line);                 /* 4 */
    good_line(line, sizeof line, 2, "00000005");
    len += (size_t)snprintf(text + len, CAP - len, "%s", line);                 /* 5 */
    good_line(line, sizeof line, 0, "00000006");
    line[2] = 'q'; /* the first integer becomes "q" */
    len += (size_t)snprintf(text + len, CAP - len, "%s", line);                 /* 6 */
    good_line(line, sizeof line, 0, "123456789");
    len += (size_t)snprintf(text + len, CAP - len, "%s", line);                 /* 7 */
    memset(text + len, '7', 70000);                                             /* 8 */
    len += 70000;
    len += (size_t)snprintf(text + len, CAP - len, "\n\n");                     /* 9 */
    good_line(line, sizeof line, 1, "0000000a");
    len += (size_t)snprintf(text + len, CAP - len, "%s", line);                 /* 10 */
    char *path = path_in(dir, "bad.tsv");
    write_text(path, text, len);
    free(text);
    return path;
}

typedef struct seen {
    uint64_t lines[16];
    size_t n;
} seen;

static void record_bad(void *ctx, uint64_t line, const char *reason)
{
    seen *s = ctx;
    assert_non_null(reason);
    assert_true(reason[0] != '\0');
    if (s->n < 16)
        s->lines[s->n] = line;
    s->n++;
}

static void test_malformed_skip(void **state)
{
    fixture *f = *state;
    char *path = write_malformed(f->dir);
    seen bad = {{0}, 0};
    cpr_criteo_options opts = {.skip_malformed = 1, .on_malformed = record_bad,
                               .malformed_ctx = &bad};
    cpr_criteo_reader *r = NULL;
    cpr_criteo_sample s;
    assert_int_equal(cpr_criteo_open(path, &opts, &r), CPR_OK);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(s.raw[0], 1);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(s.raw[0], 4);
    assert_int_equal(cpr_criteo_line(r), 4);
    assert_int_equal(cpr_criteo_malformed(r), 2);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(s.raw[0], 10);
    assert_int_equal(cpr_criteo_line(r), 10);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_NOT_FOUND);
    assert_int_equal(cpr_criteo_malformed(r), N_BAD);
    assert_int_equal(bad.n, N_BAD);
    for (size_t i = 0; i < N_BAD; i++)
        assert_int_equal(bad.lines[i], BAD_LINES[i]);
    cpr_criteo_close(r);
    free(path);
}

/* cpr_errmsg() names the path and the line, and `what` the problem. */
static void assert_bad_line(cpr_criteo_reader *r, const char *path, uint64_t line,
                            const char *what)
{
    cpr_criteo_sample s;
    char want[512];
    assert_int_equal(cpr_criteo_next(r, &s), CPR_INVALID_ARGUMENT);
    snprintf(want, sizeof want, "%s:%llu: ", path, (unsigned long long)line);
    if (strncmp(cpr_errmsg(), want, strlen(want)) != 0 || !strstr(cpr_errmsg(), what))
        fail_msg("message '%s' lacks '%s' or '%s'", cpr_errmsg(), want, what);
    assert_int_equal(cpr_criteo_line(r), line);
}

static void test_malformed_strict(void **state)
{
    fixture *f = *state;
    char *path = write_malformed(f->dir);
    cpr_criteo_reader *r = NULL;
    cpr_criteo_sample s;
    assert_int_equal(cpr_criteo_open(path, NULL, &r), CPR_OK);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_bad_line(r, path, 2, "expected 40");
    assert_bad_line(r, path, 3, "(C1): 'xyz1' is not 1-8 hex digits");
    /* The bad line is consumed: reading goes on after it. */
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(s.raw[0], 4);
    assert_bad_line(r, path, 5, "(label): '2' is not 0 or 1");
    assert_bad_line(r, path, 6, "(I1): 'q' is not an integer");
    assert_bad_line(r, path, 7, "'123456789' is not 1-8 hex digits");
    assert_bad_line(r, path, 8, "longer than 65536");
    assert_bad_line(r, path, 9, "found 1");
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(s.raw[0], 10);
    assert_int_equal(cpr_criteo_malformed(r), N_BAD);
    cpr_criteo_close(r);
    free(path);
}

/* AUTO decides from the first line with a Criteo line's 39 separators: a
 * blank or comment first line (with a comma in it) no longer makes a TSV
 * file CSV, every row of it malformed. */
static void test_auto_past_a_broken_first_line(void **state)
{
    fixture *f = *state;
    char text[4096], line[1024];
    size_t len = (size_t)snprintf(text, sizeof text, "# day_0, first rows\n\n");
    for (int i = 1; i <= 2; i++) {
        good_line(line, sizeof line, i & 1, "0000000b");
        len += (size_t)snprintf(text + len, sizeof text - len, "%s", line);
    }
    char *path = path_in(f->dir, "comment.tsv");
    write_text(path, text, len);
    cpr_criteo_options opts = {.skip_malformed = 1};
    cpr_criteo_reader *r = NULL;
    cpr_criteo_sample s;
    assert_int_equal(cpr_criteo_open(path, &opts, &r), CPR_OK);
    assert_int_equal(cpr_criteo_format_of(r), CPR_CRITEO_TSV);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(s.raw[0], 11);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_NOT_FOUND);
    assert_int_equal(cpr_criteo_malformed(r), 2);
    cpr_criteo_close(r);
    free(path);
}

/* A field quoted in a message shows bytes outside printable ASCII as \xHH:
 * a NUL does not cut the message short, an escape reaches no terminal. */
static void test_message_escapes_bytes(void **state)
{
    fixture *f = *state;
    char line[1024];
    good_line(line, sizeof line, 0, "0000000c");
    size_t len = strlen(line);
    char *c1 = strstr(line, "0000000c"); /* C1: "0\0\x1b[2Jab" (8 bytes) */
    memcpy(c1, "0\0\x1b[2Jab", 8);
    char *path = path_in(f->dir, "escape.tsv");
    write_text(path, line, len);
    cpr_criteo_reader *r = NULL;
    assert_int_equal(cpr_criteo_open(path, NULL, &r), CPR_OK);
    assert_bad_line(r, path, 1, "(C1): '0\\x00\\x1b[2Jab' is not 1-8 hex digits");
    cpr_criteo_close(r);
    free(path);
}

/* An integer's bound is on its significant digits: leading zeros are
 * read, 19 significant digits are refused with the bound named. */
static void test_integer_digits(void **state)
{
    fixture *f = *state;
    char text[4096], line[1024];
    size_t len = 0;
    const char *i1[] = {"0000000000000000000000001", "1234567890123456789"};
    for (int k = 0; k < 2; k++) {
        good_line(line, sizeof line, 1, "0000000d");
        char *tab = strchr(line, '\t'); /* I1 is "0": replace it */
        len += (size_t)snprintf(text + len, sizeof text - len, "1\t%s%s", i1[k],
                                strchr(tab + 1, '\t'));
    }
    char *path = path_in(f->dir, "digits.tsv");
    write_text(path, text, len);
    cpr_criteo_reader *r = NULL;
    cpr_criteo_sample s;
    assert_int_equal(cpr_criteo_open(path, NULL, &r), CPR_OK);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_true(s.dense[0] > 0.69f && s.dense[0] < 0.70f); /* log(1 + 1) */
    assert_bad_line(r, path, 2, "is not an integer (at most 18 digits)");
    cpr_criteo_close(r);
    free(path);
}

static void test_open_errors(void **state)
{
    fixture *f = *state;
    char *missing = path_in(f->dir, "nope.tsv"), *header = path_in(f->dir, "h.csv");
    cpr_criteo_reader *r = NULL;
    assert_int_equal(cpr_criteo_open(missing, NULL, &r), CPR_NOT_FOUND);
    const char *short_header = "label,I1,I2\n0,1,2\n";
    write_text(header, short_header, strlen(short_header));
    assert_int_equal(cpr_criteo_open(header, NULL, &r), CPR_INVALID_ARGUMENT);
    assert_non_null(strstr(cpr_errmsg(), "header"));
    uint64_t rows[CPR_CRITEO_SPARSE] = {0};
    cpr_criteo_options opts = {.table_rows = rows};
    assert_int_equal(cpr_criteo_open(missing, &opts, &r), CPR_INVALID_ARGUMENT);
    assert_null(r);
    free(missing);
    free(header);
}

/* ---- position and resume ------------------------------------------------------------ */

static size_t read_rest(cpr_criteo_reader *r, cpr_criteo_sample *out, size_t cap)
{
    size_t n = 0;
    while (n < cap && cpr_criteo_next(r, &out[n]) == CPR_OK)
        n++;
    return n;
}

static void test_seek_resume(void **unused)
{
    (void)unused;
    char *path = sample_path();
    cpr_criteo_reader *r = NULL, *again = NULL;
    cpr_criteo_sample s, first, *rest = calloc(2 * SAMPLE_ROWS, sizeof *rest);
    cpr_criteo_pos pos, bad;
    assert_non_null(rest);
    assert_int_equal(cpr_criteo_open(path, NULL, &r), CPR_OK);
    assert_int_equal(cpr_criteo_next(r, &first), CPR_OK);
    read_nth(r, 36, &s);
    cpr_criteo_tell(r, &pos);
    assert_int_equal(pos.line, 38);
    size_t n = read_rest(r, rest, SAMPLE_ROWS);
    assert_int_equal(n, SAMPLE_ROWS - 37);
    /* A fresh reader resumed at pos sees exactly the same samples. */
    assert_int_equal(cpr_criteo_open(path, NULL, &again), CPR_OK);
    assert_int_equal(cpr_criteo_seek(again, &pos), CPR_OK);
    assert_int_equal(read_rest(again, rest + SAMPLE_ROWS, SAMPLE_ROWS), n);
    assert_memory_equal(rest, rest + SAMPLE_ROWS, n * sizeof *rest);
    assert_int_equal(cpr_criteo_line(again), SAMPLE_ROWS + 1);
    /* Seeking the first reader back works too, after the end. */
    assert_int_equal(cpr_criteo_seek(r, &pos), CPR_OK);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_memory_equal(&s, rest, sizeof s);
    /* Not a line start, or past the end: refused, the reader unmoved. */
    bad = pos;
    bad.offset_bytes += 3;
    assert_int_equal(cpr_criteo_seek(r, &bad), CPR_INVALID_ARGUMENT);
    bad.offset_bytes = 1u << 30;
    assert_int_equal(cpr_criteo_seek(r, &bad), CPR_INVALID_ARGUMENT);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_memory_equal(&s, rest + 1, sizeof s);
    /* {0, 0, 0} rewinds to the first data line. */
    assert_int_equal(cpr_criteo_seek(r, &(cpr_criteo_pos){0, 0, 0}), CPR_OK);
    assert_int_equal(cpr_criteo_next(r, &s), CPR_OK);
    assert_memory_equal(&s, &first, sizeof s);
    assert_int_equal(cpr_criteo_line(r), 2);
    cpr_criteo_close(r);
    cpr_criteo_close(again);
    free(rest);
    free(path);
}

/* ---- the generator ------------------------------------------------------------------ */

static char *generate(const char *dir, const char *name, const cpr_synth_options *o,
                      uint64_t rows)
{
    char *path = path_in(dir, name);
    cpr_synth *g = NULL;
    assert_int_equal(cpr_synth_create(o, &g), CPR_OK);
    assert_int_equal(cpr_synth_write(g, path, rows, NULL, NULL), CPR_OK);
    cpr_synth_destroy(g);
    return path;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_true(size >= 0);
    rewind(f);
    char *buf = malloc((size_t)size + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *len = (size_t)size;
    return buf;
}

static void test_synth_reproducible(void **state)
{
    fixture *f = *state;
    cpr_synth_options o = {.seed = 42};
    char *a = generate(f->dir, "a.tsv", &o, 3000), *b = generate(f->dir, "b.tsv", &o, 3000);
    o.seed = 43;
    char *c = generate(f->dir, "c.tsv", &o, 3000);
    size_t la, lb, lc;
    char *da = slurp(a, &la), *db = slurp(b, &lb), *dc = slurp(c, &lc);
    assert_true(la > 3000 * 100);
    assert_int_equal(la, lb);
    assert_memory_equal(da, db, la);
    assert_true(la != lc || memcmp(da, dc, la) != 0);
    free(da);
    free(db);
    free(dc);
    free(a);
    free(b);
    free(c);
}

static void test_synth_options(void **unused)
{
    (void)unused;
    cpr_synth *g = NULL;
    cpr_synth_options bad[] = {
        {.tables = 27}, {.zipf_s = -1}, {.zipf_s = 21}, {.positive_rate = 1.0},
        {.positive_rate = -0.1}, {.cardinality = (1ull << 32) + 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(cpr_synth_create(&bad[i], &g), CPR_INVALID_ARGUMENT);
    assert_null(g);
    char small[16];
    size_t len;
    assert_int_equal(cpr_synth_create(NULL, &g), CPR_OK);
    assert_int_equal(cpr_synth_line(g, small, sizeof small, &len), CPR_INVALID_ARGUMENT);
    cpr_synth_destroy(g);
    cpr_synth_destroy(NULL);
    cpr_criteo_close(NULL);
}

/* Every sample of `path` (skip mode; asserts none is malformed). */
static cpr_criteo_sample *read_all(const char *path, size_t rows)
{
    cpr_criteo_options opts = {.skip_malformed = 1};
    cpr_criteo_reader *r = NULL;
    cpr_criteo_sample *all = calloc(rows + 1, sizeof *all);
    assert_non_null(all);
    assert_int_equal(cpr_criteo_open(path, &opts, &r), CPR_OK);
    assert_int_equal(read_rest(r, all, rows + 1), rows);
    assert_int_equal(cpr_criteo_malformed(r), 0);
    assert_int_equal(cpr_criteo_line(r), rows);
    cpr_criteo_close(r);
    return all;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Count of the most frequent value of table t, and that value. */
static size_t top_value(const cpr_criteo_sample *all, size_t n, int t, uint32_t *value)
{
    uint32_t *v = malloc(n * sizeof *v);
    size_t best = 0, run = 0;
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = all[i].raw[t];
    qsort(v, n, sizeof *v, cmp_u32);
    for (size_t i = 0; i < n; i++) {
        run = i > 0 && v[i] == v[i - 1] ? run + 1 : 1;
        if (run > best) {
            best = run;
            *value = v[i];
        }
    }
    free(v);
    return best;
}

/* The share of rank 1 under Zipf(s) on n ranks: 1 / H(n, s). */
static double zipf_top_share(double s, uint64_t n)
{
    double h = 0;
    for (uint64_t k = n; k >= 1; k--) /* small terms first */
        h += pow((double)k, -s);
    return 1.0 / h;
}

static void check_zipf(const char *dir, double s, uint64_t cardinality)
{
    enum { ROWS = 20000 };
    cpr_synth_options o = {.seed = 5, .tables = 2, .zipf_s = s, .cardinality = cardinality};
    cpr_synth *g = NULL;
    char *path = generate(dir, "zipf.tsv", &o, ROWS);
    cpr_criteo_sample *all = read_all(path, ROWS);
    assert_int_equal(cpr_synth_create(&o, &g), CPR_OK);
    double p = zipf_top_share(s, cardinality), sd = sqrt(p * (1 - p) / ROWS);
    for (int t = 0; t < 2; t++) {
        uint32_t value = 0;
        double share = (double)top_value(all, ROWS, t, &value) / ROWS;
        if (fabs(share - p) > 5 * sd)
            fail_msg("s=%g n=%llu table %d: top share %.4f, theory %.4f (sd %.4f)", s,
                     (unsigned long long)cardinality, t, share, p, sd);
        assert_int_equal(value, cpr_synth_value(g, (uint32_t)t, 0));
    }
    assert_int_equal(all[0].sparse_present, 3u); /* --tables 2 */
    cpr_synth_destroy(g);
    free(all);
    free(path);
}

static void test_synth_zipf(void **state)
{
    fixture *f = *state;
    check_zipf(f->dir, 1.05, 100000);
    check_zipf(f->dir, 1.5, 1000);
    check_zipf(f->dir, 0.8, 5000);
}

static void check_rate(const char *dir, double want)
{
    enum { ROWS = 20000 };
    cpr_synth_options o = {.seed = 9, .positive_rate = want};
    char *path = generate(dir, "rate.tsv", &o, ROWS);
    cpr_criteo_sample *all = read_all(path, ROWS);
    size_t positives = 0;
    for (size_t i = 0; i < ROWS; i++)
        positives += all[i].label;
    assert_near((double)positives / ROWS, want, 0.02);
    free(all);
    free(path);
}

static void test_synth_positive_rate(void **state)
{
    fixture *f = *state;
    check_rate(f->dir, 0.25);
    check_rate(f->dir, 0.10);
}

/* ---- are labels predictable? ---------------------------------------------------------- */

typedef struct ctr_entry {
    uint64_t key;  /* table << 32 | value */
    uint32_t clicks, shows;
} ctr_entry;

static int cmp_entry(const void *a, const void *b)
{
    uint64_t x = ((const ctr_entry *)a)->key, y = ((const ctr_entry *)b)->key;
    return x < y ? -1 : x > y;
}

/* Per-(table, value) click counts of samples [0, n), sorted by key and merged. */
static ctr_entry *train_ctr(const cpr_criteo_sample *all, size_t n, size_t *n_out)
{
    ctr_entry *e = malloc(n * CPR_CRITEO_SPARSE * sizeof *e);
    size_t m = 0, k = 0;
    assert_non_null(e);
    for (size_t i = 0; i < n; i++)
        for (int t = 0; t < CPR_CRITEO_SPARSE; t++)
            e[m++] = (ctr_entry){(uint64_t)t << 32 | all[i].raw[t], all[i].label, 1};
    qsort(e, m, sizeof *e, cmp_entry);
    for (size_t i = 0; i < m; i++) {
        if (k > 0 && e[k - 1].key == e[i].key) {
            e[k - 1].clicks += e[i].clicks;
            e[k - 1].shows++;
        } else {
            e[k++] = e[i];
        }
    }
    *n_out = k;
    return e;
}

/* Naive-Bayes style score: sum over tables of the smoothed log-odds shift. */
static double score(const ctr_entry *e, size_t n, const cpr_criteo_sample *s, double base)
{
    double sum = 0, prior = 20;
    for (int t = 0; t < CPR_CRITEO_SPARSE; t++) {
        ctr_entry key = {(uint64_t)t << 32 | s->raw[t], 0, 0};
        const ctr_entry *hit = bsearch(&key, e, n, sizeof *e, cmp_entry);
        if (!hit)
            continue;
        double ctr = (hit->clicks + prior * base) / (hit->shows + prior);
        sum += log(ctr / (1 - ctr)) - log(base / (1 - base));
    }
    return sum;
}

typedef struct scored {
    double score;
    uint32_t label;
} scored;

static int cmp_scored(const void *a, const void *b)
{
    double x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return x < y ? -1 : x > y;
}

/* Area under the ROC curve by the rank sum, ties sharing their mean rank. */
static double auc(scored *v, size_t n)
{
    double rank_sum = 0, positives = 0;
    qsort(v, n, sizeof *v, cmp_scored);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && v[j].score == v[i].score)
            j++;
        double mean_rank = 0.5 * (double)(i + 1 + j);
        for (size_t k = i; k < j; k++)
            if (v[k].label) {
                rank_sum += mean_rank;
                positives++;
            }
        i = j;
    }
    double negatives = (double)n - positives;
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

static void test_auc_helper(void **unused)
{
    (void)unused;
    scored perfect[] = {{0.1, 0}, {0.9, 1}, {0.2, 0}, {0.8, 1}};
    scored ties[] = {{0.5, 0}, {0.5, 1}, {0.5, 0}, {0.5, 1}};
    scored half[] = {{0.1, 0}, {0.2, 1}, {0.3, 1}, {0.4, 0}};
    assert_near(auc(perfect, 4), 1.0, 1e-12);
    assert_near(auc(ties, 4), 0.5, 1e-12);
    assert_near(auc(half, 4), 0.5, 1e-12);
}

static void test_synth_predictable(void **state)
{
    enum { ROWS = 40000, TRAIN = ROWS / 2 };
    fixture *f = *state;
    cpr_synth_options o = {.seed = 11, .cardinality = 2000};
    char *path = generate(f->dir, "teach.tsv", &o, ROWS);
    cpr_criteo_sample *all = read_all(path, ROWS);
    size_t n_entries = 0, clicks = 0;
    for (size_t i = 0; i < TRAIN; i++)
        clicks += all[i].label;
    double base = (double)clicks / TRAIN;
    ctr_entry *e = train_ctr(all, TRAIN, &n_entries);
    scored *v = malloc((ROWS - TRAIN) * sizeof *v);
    assert_non_null(v);
    for (size_t i = TRAIN; i < ROWS; i++)
        v[i - TRAIN] = (scored){score(e, n_entries, &all[i], base), all[i].label};
    double area = auc(v, ROWS - TRAIN);
    print_message("held-out AUC of per-value CTRs: %.4f\n", area);
    if (area <= 0.55)
        fail_msg("held-out AUC %.4f: labels do not depend on the categoricals", area);
    free(v);
    free(e);
    free(all);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_golden),
        cmocka_unit_test(test_sample_counts),
        cmocka_unit_test(test_sample_fields),
        cmocka_unit_test_setup_teardown(test_tsv_kaggle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_skip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_strict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_past_a_broken_first_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_message_escapes_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_integer_digits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
        cmocka_unit_test(test_seek_resume),
        cmocka_unit_test_setup_teardown(test_synth_reproducible, setup, teardown),
        cmocka_unit_test(test_synth_options),
        cmocka_unit_test_setup_teardown(test_synth_zipf, setup, teardown),
        cmocka_unit_test_setup_teardown(test_synth_positive_rate, setup, teardown),
        cmocka_unit_test(test_auc_helper),
        cmocka_unit_test_setup_teardown(test_synth_predictable, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
