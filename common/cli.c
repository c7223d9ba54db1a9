/* SPDX-License-Identifier: Apache-2.0 */
/* Command-line value parsing for the CPR tools (see cpr_cli.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_cli.h"
#include "cpr_common.h"

cpr_status cpri_cli_u64(const char *flag, const char *text, uint64_t min, uint64_t max,
                       uint64_t *out)
{
    char *end = NULL;
    unsigned long long v = 0;
    int ok = text[0] >= '0' && text[0] <= '9';
    if (ok) {
        errno = 0;
        v = strtoull(text, &end, 10);
        ok = errno == 0 && *end == '\0' && v >= min && v <= max;
    }
    if (!ok)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: '%s' is not a whole number from %llu to %llu",
                        flag, text, (unsigned long long)min, (unsigned long long)max);
    *out = v;
    return CPR_OK;
}

cpr_status cpri_cli_double(const char *flag, const char *text, double lo, int lo_closed,
                          double hi, int hi_closed, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    /* decimal only: strtod also takes leading spaces, hex and "inf"/"nan" */
    int decimal = strspn(text, "0123456789+-.eE") == strlen(text);
    int ok = text[0] != '\0' && decimal && *end == '\0' && errno == 0 && isfinite(v) &&
             (v > lo || (lo_closed && v == lo)) && (v < hi || (hi_closed && v == hi));
    if (!ok)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: '%s' is not a number in %c%g, %g%c", flag,
                        text, lo_closed ? '[' : '(', lo, hi, hi_closed ? ']' : ')');
    *out = v;
    return CPR_OK;
}

const char *cpri_cli_value(int argc, char **argv, int *i, const char *flag, int *missing)
{
    const char *arg = argv[*i];
    size_t len = strlen(flag);
    if (strncmp(arg, flag, len) != 0)
        return NULL;
    if (arg[len] == '=')
        return arg + len + 1;
    if (arg[len] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        cpr_fail(CPR_INVALID_ARGUMENT, "%s needs a value", flag);
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

#define MAX_PEM_BYTES (1u << 20)

cpr_status cpri_cli_read_pem(const char *what, const char *path, char **out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s %.200s: %s", what, path, strerror(errno));
    char *buf = malloc(MAX_PEM_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_PEM_BYTES + 1, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (buf)
        buf[n <= MAX_PEM_BYTES ? n : MAX_PEM_BYTES] = '\0';
    if (!buf || err || n == 0 || n > MAX_PEM_BYTES || !strstr(buf, "-----BEGIN ")) {
        free(buf);
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s %.200s: %s", what, path,
                        !buf ? "out of memory" : err ? "read error"
                                                     : "not a PEM file of at most 1 MiB");
    }
    *out = buf;
    return CPR_OK;
}

cpr_status cpri_cli_host_port(const char *flag, const char *addr, char *host, size_t cap,
                              uint16_t *port, int *bracketed)
{
    if (!addr || !addr[0])
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s: give HOST:PORT", flag);
    if (strchr(addr, ','))
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s '%s': give one HOST:PORT, not a list", flag,
                        addr);
    if (strstr(addr, "://"))
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s takes HOST:PORT without a scheme: '%s' "
                        "(a client's target has grpc://, an address to listen on has not)",
                        flag, addr);
    const char *host_start = addr, *colon;
    *bracketed = addr[0] == '[';
    if (*bracketed) {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':')
            return cpr_fail(CPR_INVALID_ARGUMENT, "%s '%s': an IPv6 host is [ADDRESS]:PORT",
                            flag, addr);
        host_start = addr + 1;
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon)
            return cpr_fail(CPR_INVALID_ARGUMENT, "%s '%s' has no port: give HOST:PORT (port "
                            "0 picks a free one)", flag, addr);
    }
    size_t host_len = (size_t)(colon - host_start) - (size_t)*bracketed;
    if (host_len == 0)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s '%s' has no host: give HOST:PORT "
                        "(127.0.0.1:7717, or 0.0.0.0:7717 for every interface)", flag, addr);
    if (host_len >= cap)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s '%s': the host is too long", flag, addr);
    if (!*bracketed && memchr(host_start, ':', host_len))
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s '%s': an IPv6 host goes in brackets, "
                        "[ADDRESS]:PORT (e.g. [::1]:7717)", flag, addr);
    const char *p = colon + 1;
    uint32_t v = 0;
    size_t n = 0;
    for (; p[n] >= '0' && p[n] <= '9' && n < 6; n++)
        v = v * 10 + (uint32_t)(p[n] - '0');
    if (n == 0 || n > 5 || p[n] != '\0' || v > 65535)
        return cpr_fail(CPR_INVALID_ARGUMENT, "%s '%s': port '%s'; a port is a number from 0 "
                        "to 65535", flag, addr, p);
    snprintf(host, cap, "%.*s", (int)host_len, host_start);
    *port = (uint16_t)v;
    return CPR_OK;
}
