/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The replay drivers' shared parts (replay_util.h).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay_util.h"

static uint64_t rng = 0x5eed5eed5eedULL;

uint64_t replay_next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

size_t replay_mutate(uint8_t *buf, size_t len, size_t cap, size_t keep)
{
    switch (replay_next() % 4) {
    case 0: /* flip a few bits */
        for (int i = 0; i < 1 + (int)(replay_next() % 4) && len > keep; i++)
            buf[keep + replay_next() % (len - keep)] ^= (uint8_t)(1u << (replay_next() % 8));
        return len;
    case 1: /* truncate */
        return len > keep ? keep + replay_next() % (len - keep) : len;
    case 2: /* insert random bytes */
        if (len + 8 < cap) {
            size_t at = keep + replay_next() % (len - keep + 1), k = 1 + replay_next() % 8;
            memmove(buf + at + k, buf + at, len - at);
            for (size_t i = 0; i < k; i++)
                buf[at + i] = (uint8_t)replay_next();
            return len + k;
        }
        return len;
    default: /* overwrite a byte with a varint-ish extreme */
        if (len > keep)
            buf[keep + replay_next() % (len - keep)] = (uint8_t)(replay_next() % 2 ? 0xff : 0x80);
        return len;
    }
}

int replay_dir(const char *path)
{
    static uint8_t data[1 << 20];
    DIR *d = opendir(path);
    struct dirent *e;
    int files = 0;
    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL) {
        char file[4096];
        if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0)
            continue;
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        FILE *f = fopen(file, "rb");
        if (!f)
            continue;
        size_t n = fread(data, 1, sizeof data, f);
        fclose(f);
        LLVMFuzzerTestOneInput(data, n);
        files++;
    }
    closedir(d);
    return files;
}

int replay_write(const char *dir, const char *name, const uint8_t *data, size_t len)
{
    char file[4096];
    snprintf(file, sizeof file, "%s/%s", dir, name);
    FILE *f = fopen(file, "wb");
    if (!f)
        return -1;
    size_t put = fwrite(data, 1, len, f);
    return (fclose(f) != 0 || put != len) ? -1 : 0;
}
