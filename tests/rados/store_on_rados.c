/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runs a store test against the RADOS backend unchanged: linked with
 * -Wl,--wrap=cpr_store_open, every store the test opens lives in the test
 * cluster's pool (tests/CMakeLists.txt starts it, deploy/ceph/test-cluster.sh),
 * in a namespace named after the store's directory, so that reopening a
 * directory reopens its store and tests running at once never meet. Exits 77
 * (skipped) when the cluster is not there (its packages missing).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpr/store.h"
#include "testutil.h"

cpr_status __real_cpr_store_open(const char *dir, const cpr_store_options *opts,
                                 cpr_store **out);
cpr_status __wrap_cpr_store_open(const char *dir, const cpr_store_options *opts,
                                 cpr_store **out);

unsigned cpr_test_rados_segments(const char *dir, const char *part);

/* The namespace of the store at `dir`. */
static void namespace_of(const char *dir, char ns[32])
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the directory */
    for (const char *p = dir ? dir : ""; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    snprintf(ns, 32, "t%016llx", (unsigned long long)h);
}

/* Segments (objects <name>@<i>, counted once) whose names hold `part`,
 * listed by the rados tool: for tests that count a store's segments. */
unsigned cpr_test_rados_segments(const char *dir, const char *part)
{
    char ns[32], cmd[8192], line[1024], last[1024] = "";
    namespace_of(dir, ns);
    snprintf(cmd, sizeof cmd, "rados -c '%s' -p cpr -N %s ls 2>/dev/null | sort",
             getenv("CPR_TEST_RADOS_CONF"), ns);
    FILE *f = popen(cmd, "r");
    unsigned n = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *at = strrchr(line, '@');
        if (!at || !strstr(line, part))
            continue;
        *at = 0;
        if (strcmp(line, last) != 0)
            n++;
        snprintf(last, sizeof last, "%s", line);
    }
    if (f)
        pclose(f);
    return n;
}

cpr_status __wrap_cpr_store_open(const char *dir, const cpr_store_options *opts,
                                 cpr_store **out)
{
    const char *conf = tu_rados_conf();
    if (!conf)
        exit(77);
    cpr_store_options o = {0};
    if (opts)
        o = *opts;
    char ns[32];
    namespace_of(dir, ns);
    o.rados_conf = conf;
    o.rados_pool = "cpr";
    o.rados_namespace = ns;
    return __real_cpr_store_open(dir, &o, out);
}
