/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replays fuzz_handlers.c without libFuzzer, so CI runs it with any
 * compiler (and under ASan/UBSan in `make asan`): scripted call sequences
 * (a job's whole life with every method, row blocks in every codec, a DELTA
 * chain, every method under every credential, transport faults, foreign
 * leases, raw requests), seeded mutations of them, random inputs, and every
 * file of the corpus directory given on the command line. Exits 0 when
 * every input passed the target's checks; a failed check or a crash is the
 * failure. `--write-seeds DIR` writes the scripted sequences into DIR
 * instead, as the seed corpus of a libFuzzer run (tests/fuzz/README.md).
 */
#include <stdio.h>
#include <string.h>

#include "fuzz_handlers.h"
#include "replay_util.h"

#define MUTATIONS 40 /* per seed: the replay stays well under a minute under ASan */
#define NOISE 100

typedef struct seed {
    uint8_t b[8192];
    size_t n;
} seed;

static void put(seed *s, unsigned v)
{
    if (s->n < sizeof s->b)
        s->b[s->n++] = (uint8_t)v;
}

static void put_bytes(seed *s, size_t k, unsigned first)
{
    for (size_t i = 0; i < k; i++)
        put(s, first + 3 * (unsigned)i);
}

/* A call header; `messages` 1-4 for client streams. Each message follows:
 * mode 0 (built) and the fields fuzz_handlers_build.c lists. */
static void call(seed *s, fh_method m, unsigned cred, unsigned fault, unsigned messages)
{
    int index = fh_method_index(m);
    put(s, index < 0 ? 0 : (unsigned)index);
    put(s, cred);
    put(s, fault);
    put(s, messages ? messages - 1 : 0);
}

/* Begin: job, shard and checkpoint bytes (0: the next), kind, one table of
 * 64 rows with dim_byte (dim 1 + dim_byte % 4) and state_dim. */
static void begin(seed *s, unsigned cred, unsigned job, unsigned shard, unsigned ckpt,
                  unsigned kind, unsigned dim_byte, unsigned state_dim)
{
    call(s, FH_BEGIN, cred, 0, 1);
    put(s, 0);
    put(s, job), put(s, shard), put(s, ckpt), put(s, kind);
    put(s, 0), put(s, 0), put(s, 7); /* one shard, newest base, step 7 */
    put(s, 0);                       /* one table */
    put(s, 0), put(s, 0), put(s, dim_byte), put(s, state_dim);
    put(s, 0); /* f32 */
}

/* One PutRows message to the last Begin's part: `form` as the builder
 * reads it, n rows from `first`, dims of that part's table. */
static void rows(seed *s, unsigned form, unsigned n, unsigned first, unsigned dim,
                 unsigned state_dim, unsigned codec)
{
    put(s, 0);
    put(s, 0), put(s, 0), put(s, form);
    put(s, 0), put(s, n - 1), put(s, first), put(s, 0);
    put_bytes(s, (size_t)n * dim, 1 + first);
    put_bytes(s, (size_t)n * state_dim, 2);
    if (form & 1)
        put(s, codec);
}

static void chunk(seed *s, unsigned name, unsigned len)
{
    put(s, 0);
    put(s, 0), put(s, 0), put(s, name), put(s, 0), put(s, len), put(s, 0);
    put_bytes(s, len, 5);
}

/* Unary calls whose message is mode 0 and the given field bytes. */
static void unary(seed *s, fh_method m, unsigned cred, unsigned fault, const char *fields,
                  size_t n)
{
    call(s, m, cred, fault, 1);
    put(s, 0);
    for (size_t i = 0; i < n; i++)
        put(s, (uint8_t)fields[i]);
}
#define UNARY(s, m, cred, fields) unary(s, m, cred, 0, fields, sizeof fields - 1)

/* Every method once on the last Begin's part (or its job), by `cred`. */
static void every_method(seed *s, unsigned cred)
{
    call(s, FH_PUT_ROWS, cred, 0, 2);
    rows(s, 0, 4, 0, 2, 1, 0);
    rows(s, 0, 4, 8, 2, 1, 0);
    call(s, FH_PUT_BLOB, cred, 0, 2);
    chunk(s, 0, 16);
    chunk(s, 0, 9);
    UNARY(s, FH_COMMIT, cred, "\0\0\0");
    UNARY(s, FH_LIST, cred, "\0");
    UNARY(s, FH_RESTORE, cred, "\0\0\0\0\0\0\0\3");        /* rows, 3 a batch */
    UNARY(s, FH_RESTORE, cred, "\0\0\2\1\0\1\10\40\0\0\0"); /* blocks, table 0, rows 8-40 */
    UNARY(s, FH_GET_BLOB, cred, "\0\0");
    UNARY(s, FH_LIST_JOBS, cred, "");
    UNARY(s, FH_STATS, cred, "");
    UNARY(s, FH_VERIFY, cred, "\0");
    UNARY(s, FH_VERIFY, cred, "\5");                  /* every job */
    UNARY(s, FH_GET_RECOVERY, cred, "\0");
    UNARY(s, FH_PUT_RECOVERY, cred, "\0\1\10abcdefgh"); /* none yet: generation 1 */
    UNARY(s, FH_PUT_RECOVERY, cred, "\0\0\4abcd");      /* the one answered */
    UNARY(s, FH_GC, cred, "\0\1\0");                   /* keep 1 */
    UNARY(s, FH_GC, cred, "\5\0\0");                   /* every job */
    UNARY(s, FH_ABORT, cred, "\0\2");                  /* by id: the override */
    UNARY(s, FH_HEALTH, cred, "");
}

static void seed_life(seed *s)
{
    begin(s, FH_CRED_ADMIN_ALL, 0, 0, 0, 0, 1, 1); /* ja, dim 2, state 1 */
    every_method(s, FH_CRED_ADMIN_ALL);
}

static void seed_blocks(seed *s)
{
    begin(s, FH_CRED_ADMIN_ALL, 1, 0, 0, 0, 3, 0); /* jb, dim 4 */
    call(s, FH_PUT_ROWS, FH_CRED_ADMIN_ALL, 0, 4);
    for (unsigned codec = 0; codec < 4; codec++)
        rows(s, 1, 3, 10 * codec, 4, 0, codec);
    call(s, FH_PUT_ROWS, FH_CRED_ADMIN_ALL, 0, 2);
    rows(s, 1, 2, 50, 4, 0, 4);   /* int4 */
    rows(s, 2, 2, 60, 4, 0, 0);   /* ids descending */
    UNARY(s, FH_COMMIT, FH_CRED_ADMIN_ALL, "\0\0\0");
    UNARY(s, FH_RESTORE, FH_CRED_ADMIN_ALL, "\0\0\2\0\0\0\0\1"); /* blocks, one row each */
    UNARY(s, FH_RESTORE, FH_CRED_ADMIN_ALL, "\0\0\1\0\0\2\1\0");  /* consistent, odd rows */
}

static void seed_delta(seed *s)
{
    for (unsigned kind = 0; kind < 3; kind++) { /* FULL, DELTA, PRIORITY */
        begin(s, FH_CRED_ADMIN_ALL, 2, 0, 0, kind, 0, 0); /* team-x, dim 1 */
        call(s, FH_PUT_ROWS, FH_CRED_ADMIN_ALL, 0, 1);
        rows(s, 0, 5, 3 * kind, 1, 0, 0);
        UNARY(s, FH_COMMIT, FH_CRED_ADMIN_ALL, "\0\0\0");
    }
    UNARY(s, FH_RESTORE, FH_CRED_ADMIN_ALL, "\0\0\1\0\0\0\0\0");
    UNARY(s, FH_RESTORE, FH_CRED_ADMIN_ALL, "\0\2\0\0\0\0\0\0"); /* as of 2 */
    UNARY(s, FH_GC, FH_CRED_ADMIN_ALL, "\2\0\1\1");             /* a floor */
    UNARY(s, FH_LIST, FH_CRED_ADMIN_ALL, "\2");
}

/* Every method under credential `cred`, on a part begun by the admin. */
static void seed_credential(seed *s, unsigned cred)
{
    begin(s, FH_CRED_ADMIN_ALL, cred % 4, 0, 0, 0, 1, 1);
    begin(s, cred, cred % 4, 1, 0, 0, 1, 1);
    every_method(s, cred);
}

static void seed_faults(seed *s)
{
    begin(s, FH_CRED_ADMIN_ALL, 0, 2, 0, 0, 1, 1);
    call(s, FH_PUT_ROWS, FH_CRED_ADMIN_ALL, 4 | 1 << 3, 3); /* breaks after one */
    for (unsigned i = 0; i < 3; i++)
        rows(s, 0, 2, 4 * i, 2, 1, 0);
    begin(s, FH_CRED_ADMIN_ALL, 0, 2, 0, 0, 1, 1);
    call(s, FH_PUT_ROWS, FH_CRED_ADMIN_ALL, 6, 1); /* the client cancelled */
    rows(s, 0, 2, 0, 2, 1, 0);
    call(s, FH_PUT_BLOB, FH_CRED_ADMIN_ALL, 5 | 1 << 3, 2); /* idle after one */
    chunk(s, 1, 8);
    chunk(s, 1, 8);
    call(s, FH_PUT_ROWS, FH_CRED_ADMIN_ALL, 0, 1);
    rows(s, 0, 3, 0, 2, 1, 0);
    UNARY(s, FH_COMMIT, FH_CRED_ADMIN_ALL, "\0\0\0");
    unary(s, FH_RESTORE, FH_CRED_ADMIN_ALL, 4, "\0\0\0\0\0\0\0\1", 8);        /* first send */
    unary(s, FH_RESTORE, FH_CRED_ADMIN_ALL, 5 | 2 << 3, "\0\0\0\0\0\0\0\1", 8); /* idle */
    unary(s, FH_GET_BLOB, FH_CRED_ADMIN_ALL, 7, "\0\0", 2); /* no initial metadata */
    unary(s, FH_BEGIN, FH_CRED_ADMIN_ALL, 6, "\0\0\0\0\0\0\0\0\0\0\0\0\0", 13); /* cancelled */
}

static void seed_leases(seed *s)
{
    begin(s, FH_CRED_ADMIN_ALL, 0, 3, 0, 0, 1, 1);
    call(s, FH_PUT_ROWS, FH_CRED_ADMIN_ALL, 0, 1);
    put(s, 0), put(s, 0), put(s, 3); /* id, a fuzz lease */
    for (int i = 0; i < 8; i++)
        put(s, 0x11 * (unsigned)i);
    put(s, 0), put(s, 0), put(s, 1), put(s, 0), put(s, 0); /* 2 rows of dim 2, state 1 */
    put_bytes(s, 6, 1);
    UNARY(s, FH_COMMIT, FH_CRED_ADMIN_ALL, "\0\2\0"); /* no lease */
    UNARY(s, FH_ABORT, 4, "\0\2");                    /* a writer's override */
    UNARY(s, FH_COMMIT, FH_CRED_ADMIN_ALL, "\0\0\5");  /* wrong rows */
    UNARY(s, FH_ABORT, FH_CRED_ADMIN_ALL, "\0\0");     /* with the lease */
    UNARY(s, FH_ABORT, FH_CRED_ADMIN_ALL, "\0\0");     /* again: gone */
}

/* Raw requests: the mode byte 3, a length, bytes. */
static void seed_raw(seed *s)
{
    for (int m = 0; m < FH_UNKNOWN; m++) {
        call(s, (fh_method)m, FH_CRED_ADMIN_ALL, 0, 1);
        put(s, 3);
        put(s, 6);
        put_bytes(s, 6, 10u + (unsigned)m);
    }
}

typedef void (*seed_fn)(seed *s);

static size_t make_seed(unsigned i, seed *s)
{
    static const seed_fn scripted[] = {seed_life, seed_blocks, seed_delta, seed_faults,
                                       seed_leases, seed_raw};
    const size_t n_scripted = sizeof scripted / sizeof scripted[0];
    s->n = 0;
    if (i < n_scripted)
        scripted[i](s);
    else if (i < n_scripted + FH_CREDS)
        seed_credential(s, i - (unsigned)n_scripted);
    return s->n;
}
#define SEEDS (6 + FH_CREDS)

static int write_seeds(const char *dir)
{
    static seed s;
    for (unsigned i = 0; i < SEEDS; i++) {
        char name[32];
        snprintf(name, sizeof name, "seed-%02u", i);
        if (replay_write(dir, name, s.b, make_seed(i, &s)) != 0) {
            fprintf(stderr, "replay: cannot write %s into %s\n", name, dir);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    static seed s;
    static uint8_t buf[sizeof s.b + 64];
    size_t inputs = 0;
    int status = 0;
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) {
        status = write_seeds(argv[2]);
        fh_shutdown();
        return status;
    }
    for (unsigned i = 0; i < SEEDS; i++, inputs++) {
        size_t len = make_seed(i, &s);
        LLVMFuzzerTestOneInput(s.b, len);
        for (int m = 0; m < MUTATIONS; m++, inputs++) {
            memcpy(buf, s.b, len);
            size_t n = len;
            for (int k = 0; k < 1 + m % 4; k++)
                n = replay_mutate(buf, n, sizeof buf, 0);
            LLVMFuzzerTestOneInput(buf, n);
        }
    }
    for (int m = 0; m < NOISE; m++, inputs++) {
        size_t n = 1 + replay_next() % 512;
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)replay_next();
        LLVMFuzzerTestOneInput(buf, n);
    }
    int files = argc > 1 ? replay_dir(argv[1]) : 0;
    fh_shutdown();
    printf("fuzz_handlers replay: %zu generated inputs and %d corpus files, every check "
           "held\n", inputs, files);
    return 0;
}
