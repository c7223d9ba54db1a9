/* SPDX-License-Identifier: Apache-2.0 */
/* cpr-dlrm's flag values (flags.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"

int dlrm_flag_u64(const char *flag, const char *text, uint64_t lo, uint64_t hi, uint64_t *out)
{
    /* By hand rather than strtoull, which would take a sign, leading
     * spaces or a "0x" we do not want in a step count. */
    uint64_t v = 0;
    int ok = text[0] != '\0';
    for (const char *p = text; ok && *p; p++) {
        unsigned digit = (unsigned)(*p - '0');
        ok = *p >= '0' && *p <= '9' && v <= (UINT64_MAX - digit) / 10;
        v = v * 10 + digit;
    }
    if (!ok || v < lo || v > hi) {
        fprintf(stderr, "cpr-dlrm: %s: '%s' is not a whole number from %llu to %llu\n", flag,
                text, (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int dlrm_flag_number(const char *flag, const char *text, double lo, double hi, const char *ends,
                     double *out)
{
    char *rest = NULL;
    errno = 0;
    double v = strtod(text, &rest);
    int above = ends[0] == '[' ? v >= lo : v > lo;
    int below = ends[1] == ']' ? v <= hi : v < hi;
    if (text[0] == '\0' || *rest != '\0' || errno != 0 || !isfinite(v) || !above || !below) {
        fprintf(stderr, "cpr-dlrm: %s: '%s' is not a number in %c%g, %g%c\n", flag, text,
                ends[0], lo, hi, ends[1]);
        return -1;
    }
    *out = v;
    return 0;
}

const char *dlrm_flag_value(int argc, char **argv, int *i, const char *flag, int *missing)
{
    const char *arg = argv[*i];
    size_t n = strlen(flag);
    if (strncmp(arg, flag, n) != 0)
        return NULL;
    switch (arg[n]) {
    case '=':
        return arg + n + 1;
    case '\0':
        if (*i + 1 < argc)
            return argv[++*i];
        fprintf(stderr, "cpr-dlrm: %s needs a value\n", flag);
        *missing = 1;
        return NULL;
    default: /* another flag that starts alike: --ckpt-interval-steps for --ckpt */
        return NULL;
    }
}

int dlrm_flag_cpu_list(const char *flag, const char *text)
{
    int ok = text[0] != '\0';
    for (const char *p = text; ok && *p;) {
        size_t lo = strspn(p, "0123456789"), hi = 0;
        if (lo && p[lo] == '-')
            hi = strspn(p + lo + 1, "0123456789");
        size_t len = lo + (hi ? hi + 1 : 0);
        ok = lo > 0 && (p[lo] != '-' || hi > 0) && (p[len] == '\0' || p[len] == ',') &&
             !(p[len] == ',' && p[len + 1] == '\0');
        p += len + (p[len] == ',');
    }
    if (!ok)
        fprintf(stderr, "cpr-dlrm: %s: '%s' is not a CPU list such as 1 or 2-7,12\n", flag,
                text);
    return ok ? 0 : -1;
}
