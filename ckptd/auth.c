/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptd's authorization rules (auth.h): parsing the auth file, reloading it,
 * identifying a call's principal and checking its rights.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "auth.h"
#include "cpr/types.h"
#include "cpr_common.h"

#define MIN_TOKEN 16
#define MAX_TOKEN 4096
#define MAX_SUBJECT 1024
#define MAX_LINE 8192
#define MAX_RULES 100000
#define SUBJECT_PREFIX "subject:"
#define BEARER "Bearer "

typedef struct rule {
    char *principal;   /* the token, or the subject (after "subject:") */
    size_t principal_len;
    int is_subject;
    char pattern[CPR_NAME_MAX + 2]; /* a job, or a prefix with its '*' */
    unsigned rights;   /* CPRI_RIGHT_*, closed under inclusion */
    int line;
} rule;

typedef struct ruleset {
    rule *rules;
    size_t n;
} ruleset;

struct cpri_auth {
    char *path;
    pthread_mutex_t mu; /* guards rs (A1: identify copies what it needs under it) */
    ruleset rs;
};

typedef struct grant {
    char pattern[CPR_NAME_MAX + 2];
    unsigned rights;
} grant;

struct cpri_principal {
    char name[96];
    size_t n;
    grant grants[]; /* copies of the matching rules (A1) */
};

static void ruleset_free(ruleset *rs)
{
    for (size_t i = 0; i < rs->n; i++)
        free(rs->rules[i].principal);
    free(rs->rules);
    rs->rules = NULL;
    rs->n = 0;
}

/* The next field of a line: whitespace-separated, or "a quoted one". */
static char *next_field(char **cursor)
{
    char *p = *cursor;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p || *p == '#')
        return NULL;
    char *start = p, *end;
    if (*p == '"') {
        start = ++p;
        end = strchr(p, '"');
        if (!end)
            return NULL;
        *end = '\0';
        *cursor = end + 1;
        return start;
    }
    end = p + strcspn(p, " \t");
    if (*end)
        *end++ = '\0';
    *cursor = end;
    return start;
}

static int valid_pattern(const char *pat)
{
    size_t n = strlen(pat);
    if (n == 0 || n > CPR_NAME_MAX + 1)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)pat[i];
        if (ch == '*' && i == n - 1)
            continue;
        if (!isalnum(ch) && ch != '.' && ch != '_' && ch != '-')
            return 0;
    }
    return pat[n - 1] == '*' || n <= CPR_NAME_MAX;
}

static cpr_status parse_rights(const char *text, unsigned *out)
{
    static const struct {
        const char *name;
        unsigned rights;
    } names[] = {{"read", CPRI_RIGHT_READ},
                 {"write", CPRI_RIGHT_READ | CPRI_RIGHT_WRITE},
                 {"admin", CPRI_RIGHT_READ | CPRI_RIGHT_WRITE | CPRI_RIGHT_ADMIN}};
    unsigned r = 0;
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, ","), i;
        for (i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == len && strncmp(p, names[i].name, len) == 0)
                break;
        if (i == sizeof names / sizeof names[0])
            return CPR_INVALID_ARGUMENT; /* unknown, or empty between commas */
        r |= names[i].rights;
        p += len;
        if (*p == ',' && !*++p)
            return CPR_INVALID_ARGUMENT; /* a trailing comma */
    }
    *out = r;
    return r ? CPR_OK : CPR_INVALID_ARGUMENT;
}

static cpr_status bad_line(const char *path, int line, const char *what)
{
    return cpr_fail(CPR_INVALID_ARGUMENT, "auth file %s, line %d: %s (a rule is `TOKEN "
                    "JOB-PATTERN RIGHTS` or `subject:SUBJECT JOB-PATTERN RIGHTS`; RIGHTS a "
                    "comma list of read, write, admin)", path, line, what);
}

static cpr_status parse_line(const char *path, int lineno, char *text, rule *r, int *empty)
{
    char *cursor = text;
    char *who = next_field(&cursor), *pat = who ? next_field(&cursor) : NULL;
    char *rights = pat ? next_field(&cursor) : NULL;
    *empty = !who;
    if (!who)
        return CPR_OK;
    if (!pat || !rights)
        return bad_line(path, lineno, "expected three fields");
    if (next_field(&cursor))
        return bad_line(path, lineno, "more than three fields");
    memset(r, 0, sizeof *r);
    r->line = lineno;
    r->is_subject = strncmp(who, SUBJECT_PREFIX, strlen(SUBJECT_PREFIX)) == 0;
    const char *value = r->is_subject ? who + strlen(SUBJECT_PREFIX) : who;
    size_t len = strlen(value);
    if (r->is_subject && (len == 0 || len > MAX_SUBJECT))
        return bad_line(path, lineno, "the subject is empty or over 1024 characters");
    if (!r->is_subject) {
        if (len < MIN_TOKEN || len > MAX_TOKEN)
            return bad_line(path, lineno, "a token has 16 to 4096 characters (make one with "
                            "`openssl rand -hex 32`)");
        for (size_t i = 0; i < len; i++)
            if (!isgraph((unsigned char)value[i]))
                return bad_line(path, lineno, "a token holds printable characters only");
    }
    if (!valid_pattern(pat))
        return bad_line(path, lineno, "the job pattern is not a job name ([A-Za-z0-9._-], at "
                        "most 128) or such a prefix ending in '*'");
    if (parse_rights(rights, &r->rights) != CPR_OK)
        return bad_line(path, lineno, "unknown right");
    snprintf(r->pattern, sizeof r->pattern, "%s", pat);
    r->principal = strdup(value);
    r->principal_len = len;
    return r->principal ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory reading %s", path);
}

static cpr_status parse_file(const char *path, ruleset *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return cpr_fail(CPR_INVALID_ARGUMENT, "auth file %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077))
        cpri_log(CPR_LOG_WARN, "auth file %s can be read by other users (mode %03o): it holds "
                 "tokens; chmod 600 it", path, (unsigned)(sb.st_mode & 0777));
    ruleset rs = {0};
    size_t cap = 0;
    char *line = malloc(MAX_LINE + 2);
    cpr_status st = line ? CPR_OK : cpr_fail(CPR_NO_MEMORY, "out of memory reading %s", path);
    for (int lineno = 1; st == CPR_OK && fgets(line, MAX_LINE + 2, f); lineno++) {
        size_t n = strlen(line);
        if (n > MAX_LINE) {
            st = bad_line(path, lineno, "the line is longer than 8192 characters");
            break;
        }
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (rs.n == cap) {
            if (cap >= MAX_RULES) {
                st = bad_line(path, lineno, "more than 100000 rules");
                break;
            }
            size_t ncap = cap ? cap * 2 : 16;
            rule *grown = realloc(rs.rules, ncap * sizeof *grown);
            if (!grown) {
                st = cpr_fail(CPR_NO_MEMORY, "out of memory reading %s", path);
                break;
            }
            rs.rules = grown;
            cap = ncap;
        }
        int empty = 0;
        st = parse_line(path, lineno, line, &rs.rules[rs.n], &empty);
        if (st == CPR_OK && !empty)
            rs.n++;
    }
    if (st == CPR_OK && ferror(f))
        st = cpr_fail(CPR_IO, "auth file %s: read error", path);
    free(line);
    fclose(f);
    if (st) {
        ruleset_free(&rs);
        return st;
    }
    *out = rs;
    return CPR_OK;
}

cpr_status cpri_auth_load(const char *path, cpri_auth **out)
{
    cpri_auth *a = calloc(1, sizeof *a);
    if (!a || !(a->path = strdup(path))) {
        free(a);
        return cpr_fail(CPR_NO_MEMORY, "out of memory loading %s", path);
    }
    pthread_mutex_init(&a->mu, NULL);
    cpr_status st = parse_file(path, &a->rs);
    if (st) {
        cpri_auth_destroy(a);
        return st;
    }
    *out = a;
    return CPR_OK;
}

cpr_status cpri_auth_reload(cpri_auth *a, size_t *rules)
{
    ruleset fresh;
    cpr_status st = parse_file(a->path, &fresh);
    if (st)
        return st; /* A3 */
    pthread_mutex_lock(&a->mu);
    ruleset old = a->rs;
    a->rs = fresh;
    pthread_mutex_unlock(&a->mu);
    ruleset_free(&old);
    *rules = fresh.n;
    return CPR_OK;
}

void cpri_auth_destroy(cpri_auth *a)
{
    if (!a)
        return;
    ruleset_free(&a->rs);
    pthread_mutex_destroy(&a->mu);
    free(a->path);
    free(a);
}

/* A2: every byte of `given` is compared whatever differs, and the result
 * does not depend on where the first difference is. */
static int same_secret(const char *given, size_t given_len, const char *known, size_t known_len)
{
    volatile unsigned char diff = (unsigned char)(given_len != known_len);
    for (size_t i = 0; i < given_len; i++)
        diff |= (unsigned char)(given[i] ^ known[known_len ? i % known_len : 0]);
    return diff == 0;
}

cpr_status cpri_auth_identify(cpri_auth *a, const char *authorization, const char *subject,
                              cpri_principal **out)
{
    *out = NULL;
    if (!a)
        return CPR_OK; /* A4 */
    const char *token = NULL;
    size_t token_len = 0;
    if (authorization) {
        if (strncasecmp(authorization, BEARER, strlen(BEARER)) != 0)
            return cpr_fail(CPR_UNAUTHENTICATED, "the authorization metadata is not "
                            "\"Bearer TOKEN\"");
        token = authorization + strlen(BEARER);
        token_len = strlen(token);
    }
    if (!token && !subject)
        return cpr_fail(CPR_UNAUTHENTICATED, "ckptd requires credentials: send "
                        "\"authorization: Bearer TOKEN\" (cpr_client_options.token, $CPR_TOKEN, "
                        "cprctl --token) or a client certificate a rule names");
    pthread_mutex_lock(&a->mu);
    size_t matched = 0;
    unsigned char *hit = calloc(a->rs.n ? a->rs.n : 1, 1);
    int first_line = 0, by_subject = 0;
    for (size_t i = 0; hit && i < a->rs.n; i++) {
        const rule *r = &a->rs.rules[i];
        int m = r->is_subject ? subject && strcmp(subject, r->principal) == 0
                              : token && same_secret(token, token_len, r->principal,
                                                     r->principal_len);
        hit[i] = (unsigned char)m;
        matched += (size_t)m;
        if (m && !first_line) {
            first_line = r->line;
            by_subject = r->is_subject;
        }
    }
    cpri_principal *p = hit ? calloc(1, sizeof *p + matched * sizeof(grant)) : NULL;
    for (size_t i = 0; p && i < a->rs.n; i++)
        if (hit[i]) {
            memcpy(p->grants[p->n].pattern, a->rs.rules[i].pattern, sizeof p->grants[0].pattern);
            p->grants[p->n++].rights = a->rs.rules[i].rights;
        }
    pthread_mutex_unlock(&a->mu);
    free(hit);
    if (!p)
        return cpr_fail(CPR_NO_MEMORY, "out of memory identifying a call");
    if (matched == 0) {
        free(p);
        return cpr_fail(CPR_UNAUTHENTICATED, "ckptd knows neither the token nor the client "
                        "certificate this call presented (see its --auth-file)");
    }
    if (by_subject)
        snprintf(p->name, sizeof p->name, "subject %.80s", subject);
    else
        snprintf(p->name, sizeof p->name, "the token of rule line %d", first_line);
    *out = p;
    return CPR_OK;
}

void cpri_principal_free(cpri_principal *p)
{
    free(p);
}

static int pattern_matches(const char *pattern, const char *job)
{
    size_t n = strlen(pattern);
    if (n && pattern[n - 1] == '*')
        return job ? strncmp(pattern, job, n - 1) == 0 : n == 1;
    return job && strcmp(pattern, job) == 0;
}

int cpri_principal_may(const cpri_principal *p, const char *job, unsigned right)
{
    if (!p)
        return 1; /* A4 */
    for (size_t i = 0; i < p->n; i++)
        if ((p->grants[i].rights & right) == right && pattern_matches(p->grants[i].pattern, job))
            return 1;
    return 0;
}

int cpri_principal_may_some(const cpri_principal *p, unsigned right)
{
    if (!p)
        return 1; /* A4 */
    for (size_t i = 0; i < p->n; i++)
        if ((p->grants[i].rights & right) == right)
            return 1;
    return 0;
}

static const char *right_name(unsigned right)
{
    return right & CPRI_RIGHT_ADMIN ? "admin" : right & CPRI_RIGHT_WRITE ? "write" : "read";
}

cpr_status cpri_principal_check(const cpri_principal *p, const char *job, unsigned right,
                                const char *op)
{
    if (cpri_principal_may(p, job, right))
        return CPR_OK;
    if (!job)
        return cpr_fail(CPR_PERMISSION_DENIED, "%s of every job needs the %s right on \"*\", "
                        "which %s does not have", op, right_name(right), p->name);
    return cpr_fail(CPR_PERMISSION_DENIED, "%s of job %.128s needs the %s right, which %s does "
                    "not have on it", op, job, right_name(right), p->name);
}

const char *cpri_principal_name(const cpri_principal *p)
{
    return p ? p->name : "anyone";
}
