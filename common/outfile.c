/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Output files of the tools, written whole or not at all (cpr_cli.h). A
 * regular file, or a path that does not exist yet, is written as a
 * temporary file beside it (created exclusively: an existing FILE.tmp.* of
 * someone else is never touched), synced and renamed over it once complete,
 * and removed if the write fails. Through a symbolic link, the file it
 * names is the one replaced; the link stays. Anything else (a FIFO, a
 * device, /dev/stdout) is written in place and never removed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpr_cli.h"

/* The mode a new file gets: 0666 less the umask, read from /proc (umask()
 * would change it for every thread while it is read); 0644 where unknown. */
static mode_t new_file_mode(void)
{
    mode_t mask = 022;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned v;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %o", &v) == 1) {
            mask = (mode_t)v;
            break;
        }
    if (f)
        fclose(f);
    return 0666 & ~mask;
}

cpr_status cpri_outfile_open(cpri_outfile *o, const char *path)
{
    *o = (cpri_outfile){0};
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        if (S_ISDIR(sb.st_mode))
            return cpr_fail(CPR_INVALID_ARGUMENT, "%s is a directory: name a file", path);
        o->f = fopen(path, "w");
        if (!o->f)
            return cpr_fail(CPR_IO, "opening %s: %s", path, strerror(errno));
        return CPR_OK;
    }
    /* The file a link names (the link may point at a path not there yet). */
    char *real = realpath(path, NULL);
    if (!real) {
        char target[4096];
        ssize_t n = readlink(path, target, sizeof target - 1);
        const char *slash = strrchr(path, '/');
        if (n <= 0)
            real = strdup(path);
        else if (target[0] == '/' || !slash) /* absolute, or beside the link here */
            real = strndup(target, (size_t)n);
        else if (asprintf(&real, "%.*s/%.*s", (int)(slash - path), path, (int)n, target) < 0)
            real = NULL;
    }
    size_t len = real ? strlen(real) + sizeof ".tmp.XXXXXX" : 0;
    char *tmp = real ? malloc(len) : NULL;
    if (!tmp) {
        free(real);
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening %s", path);
    }
    snprintf(tmp, len, "%s.tmp.XXXXXX", real);
    /* The replaced file keeps its mode; a new one gets what open() gives. */
    struct stat old;
    mode_t mode = stat(real, &old) == 0 ? (old.st_mode & 07777) : new_file_mode();
    int fd = mkstemp(tmp);
    if (fd < 0 || fchmod(fd, mode) != 0 || !(o->f = fdopen(fd, "w"))) {
        cpr_status st = cpr_fail(errno == ENOSPC ? CPR_RESOURCE_EXHAUSTED : CPR_IO,
                                 "creating a temporary file beside %s: %s", real,
                                 strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        free(tmp);
        free(real);
        return st;
    }
    o->tmp = tmp;
    o->final = real;
    return CPR_OK;
}

cpr_status cpri_outfile_commit(cpri_outfile *o)
{
    cpr_status st = CPR_OK;
    FILE *f = o->f;
    o->f = NULL;
    if (fflush(f) != 0 || (o->tmp && fsync(fileno(f)) != 0))
        st = cpr_fail(errno == ENOSPC ? CPR_RESOURCE_EXHAUSTED : CPR_IO, "writing %s: %s",
                      o->final ? o->final : "the output", strerror(errno));
    if (fclose(f) != 0 && st == CPR_OK)
        st = cpr_fail(errno == ENOSPC ? CPR_RESOURCE_EXHAUSTED : CPR_IO, "writing %s: %s",
                      o->final ? o->final : "the output", strerror(errno));
    if (st == CPR_OK && o->tmp && rename(o->tmp, o->final) != 0)
        st = cpr_fail(CPR_IO, "renaming %s to %s: %s", o->tmp, o->final, strerror(errno));
    if (st && o->tmp)
        unlink(o->tmp);
    free(o->tmp);
    free(o->final);
    *o = (cpri_outfile){0};
    return st;
}

void cpri_outfile_abort(cpri_outfile *o)
{
    if (o->f)
        fclose(o->f);
    if (o->tmp)
        unlink(o->tmp);
    free(o->tmp);
    free(o->final);
    *o = (cpri_outfile){0};
}
