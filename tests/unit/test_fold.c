/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Folding (ckptd/store/fold.c) never changes what a restore returns:
 *  - a two-shard job with a FULL and then 200 PRIORITY parts per shard, a
 *    second FULL on one shard mid-chain, and a shard that also writes rows
 *    the other owns (so versions tie across shards at one checkpoint):
 *    restores as of every tenth checkpoint, by range and by `row % N`,
 *    match an independent model, and are byte-identical before folding,
 *    after folding, after a reopen, after more parts and after a GC whose
 *    floor is a DELTA cut (which folds at the floor);
 *  - a process SIGKILLed while it folds (seeded moments, after a pipe says
 *    the fold is about to start) leaves no visible half-fold: every restore
 *    is exact after the restart, verify finds nothing, and the unfinished
 *    segment is swept. RocksDB is not fork-safe, so every process that uses
 *    the store is a fresh fork of a parent that never opens it;
 *  - the background's rule (fold.c D6): a shard is folded once the parts
 *    after its FULL hold a quarter of its bytes (four parts at least), or
 *    once they are 32 whatever their size, and not before.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "cpr/crc32c.h"
#include "cpr/store.h"
#include "cpr/rng.h"
#include "store_internal.h"
#include "testutil.h"

#define ROWS 3000u
#define SHARDS 2u
#define CHAIN 200u
#define MID_FULL 120u   /* shard 0 writes a second FULL here */
#define CUT 215u        /* both shards DELTA: a cut */

static const cpr_table_schema g_t = {.table = 5, .rows = ROWS, .dim = 4, .state_dim = 1};
static const cpr_store_options g_no_fold = {.no_fold = 1};

/* One SplitMix64 step from x (common/cpr_rng.h). */
static uint64_t mix(uint64_t x)
{
    return cpr_splitmix64(&x);
}

/* ---- the two-shard model ----------------------------------------------------- */

static cpr_kind kind_at(uint32_t shard, uint64_t c)
{
    if (c == 1 || (shard == 0 && c == MID_FULL))
        return CPR_KIND_FULL;
    return c == CUT ? CPR_KIND_DELTA : CPR_KIND_PRIORITY;
}

/* Does shard s write row r at checkpoint c? Shard s owns r % 2 == s; shard
 * 1 also writes some of shard 0's rows every 7th checkpoint. */
static int writes(uint32_t s, uint64_t r, uint64_t c)
{
    if (kind_at(s, c) == CPR_KIND_FULL)
        return r % SHARDS == s;
    if (r % SHARDS == s)
        return mix(r * 1000 + c + s) % 8 == 0;
    return s == 1 && c % 7 == 0 && mix(r ^ (c << 20)) % 40 == 0;
}

/* A write of (s, c) carries values of version c * 4 + s, so a restore shows
 * which shard won. */
static uint64_t tag(uint32_t s, uint64_t c)
{
    return c * 4 + s;
}

/* Shard s's newest FULL at or below C. */
static uint64_t full_at_or_below(uint32_t s, uint64_t C)
{
    return s == 0 && C >= MID_FULL ? MID_FULL : 1;
}

/* The version tag of row r as of C (0: none): among the shards' states
 * (each from its newest FULL), the newest checkpoint; on a tie the lower
 * shard. */
static uint64_t model(uint64_t r, uint64_t C)
{
    uint64_t best_c = 0, best = 0;
    for (uint32_t s = 0; s < SHARDS; s++)
        for (uint64_t c = C; c >= full_at_or_below(s, C); c--)
            if (writes(s, r, c)) {
                if (c > best_c) { /* s ascending: ties keep the lower shard */
                    best_c = c;
                    best = tag(s, c);
                }
                break;
            }
    return best;
}

static void write_ckpt(cpr_store *st, uint64_t c)
{
    uint64_t *ids = malloc(ROWS * sizeof *ids);
    for (uint32_t s = 0; s < SHARDS; s++) {
        size_t n = 0;
        for (uint64_t r = 0; r < ROWS; r++)
            if (writes(s, r, c))
                ids[n++] = r;
        cpr_part_spec spec = tu_part("fold", s, SHARDS, c, kind_at(s, c), &g_t, 1);
        assert_int_equal(cpr_store_begin(st, &spec), CPR_OK);
        assert_int_equal(tu_put_rows(st, &spec.id, &g_t, ids, n, tag(s, c)), CPR_OK);
        assert_int_equal(cpr_store_commit(st, &spec.id, n), CPR_OK);
    }
    free(ids);
}

static tu_rows restore_as_of(cpr_store *st, uint64_t C, uint64_t modulo, const cpr_row_range *r)
{
    cpr_restore_query q = {.job = "fold", .as_of = C, .modulo = modulo,
                           .remainder = modulo ? 1 : 0, .ranges = r, .n_ranges = r ? 1 : 0,
                           .batch_rows = 333};
    tu_rows rows = {0};
    cpr_restore_result res;
    assert_int_equal(tu_restore(st, &q, &rows, &res), CPR_OK);
    assert_int_equal(res.as_of, C);
    return rows;
}

/* Rows restored as of C are the model's, all of them. */
static void assert_model(const tu_rows *rows, uint64_t C)
{
    size_t i = 0;
    for (uint64_t r = 0; r < ROWS; r++) {
        uint64_t want = model(r, C);
        if (!want)
            continue;
        if (i >= rows->n || rows->rows[i].id != r)
            fail_msg("as of %" PRIu64 ": row %" PRIu64 " missing", C, r);
        tu_assert_row(&rows->rows[i], &g_t, r, want);
        i++;
    }
    assert_int_equal(i, rows->n);
}

static void assert_same(const tu_rows *a, const tu_rows *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(a->rows[i].id, b->rows[i].id);
        assert_memory_equal(a->rows[i].values, b->rows[i].values,
                            (g_t.dim + g_t.state_dim) * sizeof(float));
    }
}

/* cpr_store_restore_versions gives each row the checkpoint that wrote it,
 * the model's, folded or not. */
typedef struct version_check {
    uint64_t C;
    size_t rows;
} version_check;

static cpr_status check_versions(void *ctx, const cpr_row_batch *b, const uint64_t *versions)
{
    version_check *vc = ctx;
    for (size_t i = 0; i < b->n; i++)
        if (versions[i] != model(b->ids[i], vc->C) / 4)
            fail_msg("as of %" PRIu64 ": row %" PRIu64 " has version %" PRIu64 ", the model "
                     "%" PRIu64, vc->C, b->ids[i], versions[i], model(b->ids[i], vc->C) / 4);
    if (cpr_crc32c_rows(b->ids, b->n, b->values, b->values_count, b->state, b->state_count) !=
        b->crc32c)
        fail_msg("a batch with versions has a wrong crc32c");
    vc->rows += b->n;
    return CPR_OK;
}

static void assert_versions(cpr_store *st, uint64_t C)
{
    version_check vc = {C, 0};
    cpr_restore_query q = {.job = "fold", .as_of = C, .batch_rows = 500};
    assert_int_equal(cpr_store_restore_versions(st, &q, check_versions, &vc, NULL), CPR_OK);
    size_t want = 0;
    for (uint64_t r = 0; r < ROWS; r++)
        want += model(r, C) != 0;
    assert_int_equal(vc.rows, want);
}

#define N_VIEWS 3
static const cpr_row_range g_range = {700, 2100};

/* Every tenth checkpoint from `from` and the newest, three views each. */
typedef struct states {
    uint64_t at[64];
    size_t n;
    tu_rows rows[64][N_VIEWS];
} states;

static void record(cpr_store *st, states *s, uint64_t from, uint64_t newest)
{
    s->n = 0;
    for (uint64_t c = from; c <= newest; c += 10) {
        s->at[s->n++] = c;
        if (c + 10 > newest && c != newest)
            s->at[s->n++] = newest;
    }
    for (size_t i = 0; i < s->n; i++) {
        uint64_t c = s->at[i];
        s->rows[i][0] = restore_as_of(st, c, 0, NULL);
        s->rows[i][1] = restore_as_of(st, c, 3, NULL);
        s->rows[i][2] = restore_as_of(st, c, 0, &g_range);
    }
}

static void check(cpr_store *st, const states *s)
{
    for (size_t i = 0; i < s->n; i++) {
        tu_rows got[N_VIEWS] = {restore_as_of(st, s->at[i], 0, NULL),
                                restore_as_of(st, s->at[i], 3, NULL),
                                restore_as_of(st, s->at[i], 0, &g_range)};
        for (int v = 0; v < N_VIEWS; v++) {
            assert_same(&got[v], &s->rows[i][v]);
            tu_rows_free(&got[v]);
        }
    }
}

static void release(states *s)
{
    for (size_t i = 0; i < s->n; i++)
        for (int v = 0; v < N_VIEWS; v++)
            tu_rows_free(&s->rows[i][v]);
}

/* Open descriptors of this process. */
static unsigned open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    unsigned n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

typedef struct fd_watch {
    unsigned most;
    size_t rows;
} fd_watch;

static cpr_status watch_fds(void *ctx, const cpr_row_batch *b)
{
    fd_watch *w = ctx;
    unsigned n = open_fds();
    w->most = n > w->most ? n : w->most;
    w->rows += b->n;
    return CPR_OK;
}

static void test_chain_of_200_exact(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-fold");
    cpr_store *st = NULL;
    states *before = calloc(1, sizeof *before);
    assert_int_equal(cpr_store_open(dir, &g_no_fold, &st), CPR_OK);
    for (uint64_t c = 1; c <= CHAIN + 1; c++)
        write_ckpt(st, c);
    record(st, before, 1, CHAIN + 1);
    for (size_t i = 0; i < before->n; i += 5)
        assert_model(&before->rows[i][0], before->at[i]);
    assert_model(&before->rows[before->n - 1][0], CHAIN + 1);

    /* Unfolded, the newest state reads 2 x 201 segments: a restore opens them
     * a few at a time (the read window), not all at once. */
    unsigned before_fds = open_fds();
    fd_watch fw = {0};
    cpr_restore_query nq = {.job = "fold", .batch_rows = 64};
    assert_int_equal(cpr_store_restore(st, &nq, watch_fds, &fw, NULL), CPR_OK);
    print_message("  restore over %u segments: at most %u descriptors open (%u before)\n",
                  2 * (CHAIN + 1), fw.most, before_fds);
    assert_true(fw.most <= before_fds + 24);
    assert_versions(st, 100);
    assert_versions(st, CHAIN + 1);
    uint64_t folded = 0;
    assert_int_equal(cpr_store_fold(st, "fold", 2, &folded), CPR_OK);
    print_message("  folds written: %" PRIu64 "\n", folded);
    assert_int_equal(folded, SHARDS);
    check(st, before);
    assert_versions(st, CHAIN + 1); /* the folds' rows keep their versions */
    assert_int_equal(cpr_store_fold(st, "fold", 2, &folded), CPR_OK);
    assert_int_equal(folded, 0); /* nothing new to fold */

    cpr_store_close(st);
    assert_int_equal(cpr_store_open(dir, &g_no_fold, &st), CPR_OK);
    check(st, before);

    /* More parts after the folds, up to a DELTA cut on both shards. */
    for (uint64_t c = CHAIN + 2; c <= CUT; c++)
        write_ckpt(st, c);
    tu_rows newest = restore_as_of(st, CUT, 0, NULL);
    assert_model(&newest, CUT);
    tu_rows_free(&newest);
    states *late = calloc(1, sizeof *late);
    record(st, late, CUT - 20, CUT);
    assert_int_equal(cpr_store_fold(st, "fold", 2, &folded), CPR_OK);
    assert_int_equal(folded, SHARDS);
    check(st, late);

    /* Retention to the cut at CUT: parts below it go, folded at the floor. */
    cpr_gc_report rep;
    assert_int_equal(cpr_store_gc(st, "fold", 1, &rep), CPR_OK);
    print_message("  gc: floor %" PRIu64 ", parts %" PRIu64 ", versions %" PRIu64 "\n",
                  rep.floor, rep.parts_removed, rep.versions_removed);
    assert_int_equal(rep.floor, CUT);
    assert_int_equal(rep.parts_removed, (CUT - 1) * SHARDS);
    tu_rows at_cut = restore_as_of(st, CUT, 0, NULL);
    assert_same(&at_cut, &late->rows[late->n - 1][0]);
    assert_model(&at_cut, CUT);
    assert_versions(st, CUT);
    tu_rows_free(&at_cut);
    cpr_verify_report vr;
    assert_int_equal(cpr_store_verify(st, "fold", NULL, NULL, &vr), CPR_OK);
    cpr_store_close(st);
    release(before);
    release(late);
    free(before);
    free(late);
    tu_rmtree(dir);
    free(dir);
}

/* ---- SIGKILL while folding ------------------------------------------------------ */

#define KILL_ROWS 150000u
#define KILL_ROUNDS 24
static const cpr_table_schema g_k = {.table = 1, .rows = KILL_ROWS, .dim = 16, .state_dim = 1};

static int k_writes(uint64_t r, uint64_t c)
{
    return c == 1 || mix(r * 7919 + c) % 8 == 0;
}

/* Child: write part c (a FULL at 1), commit it, exit 0. */
static int child_write(const char *dir, uint64_t c)
{
    cpr_store *st = NULL;
    if (cpr_store_open(dir, &g_no_fold, &st))
        return 2;
    uint64_t *ids = malloc(KILL_ROWS * sizeof *ids);
    size_t n = 0;
    for (uint64_t r = 0; r < KILL_ROWS; r++)
        if (k_writes(r, c))
            ids[n++] = r;
    cpr_part_spec spec = tu_part("k", 0, 1, c, c == 1 ? CPR_KIND_FULL : CPR_KIND_PRIORITY,
                                 &g_k, 1);
    int rc = cpr_store_begin(st, &spec) || tu_put_rows(st, &spec.id, &g_k, ids, n, c) ||
             cpr_store_commit(st, &spec.id, n);
    free(ids);
    cpr_store_close(st);
    return rc ? 3 : 0;
}

/* Child: open, say so on `fd`, fold (the parent kills it meanwhile). */
static int child_fold(const char *dir, int fd)
{
    cpr_store *st = NULL;
    if (cpr_store_open(dir, &g_no_fold, &st))
        return 2;
    if (write(fd, "r", 1) != 1)
        return 4;
    uint64_t folded = 0;
    int rc = cpr_store_fold(st, "k", 1, &folded) != CPR_OK;
    if (rc == 0 && write(fd, "d", 1) != 1) /* the fold returned: a kill now is after it */
        rc = 4;
    cpr_store_close(st);
    return rc ? 3 : 0;
}

/* Child: open (sweeping leftovers), check every row as of `newest`, verify. */
static int child_check(const char *dir, uint64_t newest)
{
    cpr_store *st = NULL;
    if (cpr_store_open(dir, &g_no_fold, &st))
        return 2;
    cpr_restore_query q = {.job = "k"};
    tu_rows rows = {0};
    cpr_restore_result res;
    int bad = tu_restore(st, &q, &rows, &res) != CPR_OK || rows.n != KILL_ROWS ||
              res.as_of != newest;
    for (uint64_t r = 0; !bad && r < KILL_ROWS; r++) {
        uint64_t want = 1;
        for (uint64_t c = newest; c > 1; c--)
            if (k_writes(r, c)) {
                want = c;
                break;
            }
        const tu_row *row = &rows.rows[r];
        bad = row->id != r;
        for (uint32_t j = 0; !bad && j < g_k.dim; j++)
            bad = tu_float_bits(row->values[j]) != tu_float_bits(tu_value(1, r, want, j));
    }
    tu_rows_free(&rows);
    cpr_verify_report vr;
    bad = bad || cpr_store_verify(st, "k", NULL, NULL, &vr) != CPR_OK;
    cpr_store_close(st);
    return bad ? 5 : 0;
}

static int run_child(int (*fn)(const char *, uint64_t), const char *dir, uint64_t arg)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn(dir, arg));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* Fold segments on disk (files named <shard>-f<ckpt>.<token>.seg). */
/* Segments of the store at `dir` whose names hold `part`, when the store
 * is in RADOS (tests/rados/store_on_rados.c defines it; absent otherwise). */
__attribute__((weak)) unsigned cpr_test_rados_segments(const char *dir, const char *part);

static unsigned fold_files(const char *dir)
{
    if (cpr_test_rados_segments)
        return cpr_test_rados_segments(dir, "k/0-f");
    char path[4096];
    snprintf(path, sizeof path, "%s/segments/j_k", dir);
    DIR *d = opendir(path);
    struct dirent *e;
    unsigned n = 0;
    while (d && (e = readdir(d)) != NULL)
        n += strstr(e->d_name, "-f") != NULL;
    if (d)
        closedir(d);
    return n;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Fold in a child; kill it `delay` seconds after it says it starts (a
 * negative delay: let it finish). Returns its run time from the signal. */
static double fold_and_kill(const char *dir, double delay, int *finished)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        _exit(child_fold(dir, fds[1]));
    }
    close(fds[1]);
    char c;
    assert_int_equal(read(fds[0], &c, 1), 1); /* it is about to fold */
    double t0 = now_s();
    if (delay >= 0) {
        struct timespec ts = {(time_t)delay, (long)((delay - (time_t)delay) * 1e9)};
        nanosleep(&ts, NULL); /* the kill's moment, not a wait for a result */
        kill(pid, SIGKILL);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    double took = now_s() - t0;
    if (delay < 0)
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The child is gone: the pipe holds what it wrote, then EOF. */
    *finished = read(fds[0], &c, 1) == 1 && c == 'd';
    close(fds[0]);
    return took;
}

static void test_sigkill_while_folding(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-fold-kill");
    uint64_t seed = 0x5eed;
    const char *env = getenv("CPR_TEST_SEED");
    if (env && *env)
        seed = strtoull(env, NULL, 0);
    uint64_t newest = 0;
    for (newest = 1; newest <= 6; newest++)
        assert_int_equal(run_child(child_write, dir, newest), 0);
    newest--;
    /* How long a fold takes here (the first fold reads FULL + 5 parts). */
    int finished = 0;
    double fold_s = fold_and_kill(dir, -1, &finished);
    assert_true(finished);
    assert_int_equal(run_child(child_check, dir, newest), 0);
    unsigned mid = 0, before_or_after = 0;
    /* The kills aim inside the first fold's time; if that fold ran slow (a
     * loaded machine) and none landed mid-fold, more rounds aim earlier. */
    int round;
    for (round = 0; round < KILL_ROUNDS || (mid == 0 && round < 4 * KILL_ROUNDS); round++) {
        assert_int_equal(run_child(child_write, dir, ++newest), 0);
        seed = mix(seed);
        double delay = fold_s * (double)(seed % 1000) / 1000.0 / (round < KILL_ROUNDS ? 1 : 4);
        fold_and_kill(dir, delay, &finished);
        unsigned files_before = fold_files(dir);
        assert_int_equal(run_child(child_check, dir, newest), 0);
        unsigned files_after = fold_files(dir);
        assert_true(files_after <= 1); /* at most the one published fold */
        if (!finished && files_after < files_before)
            mid++; /* killed inside the fold, which had written: its leftover was swept */
        else
            before_or_after++;
    }
    print_message("  fold took %.3f s; %d kills: %u inside a fold that had written, %u "
                  "not\n", fold_s, round, mid, before_or_after);
    assert_true(mid >= 1);
    tu_rmtree(dir);
    free(dir);
}

/* The bytes of part (shard, c) of `job`, as the catalog counts them. */
static uint64_t part_bytes(cpr_store *st, const char *job, uint32_t shard, uint64_t c)
{
    cpr_part_info *parts = NULL;
    size_t n = 0;
    uint64_t bytes = 0;
    assert_int_equal(cpr_store_list(st, job, &parts, &n), CPR_OK);
    for (size_t i = 0; i < n; i++)
        if (parts[i].shard == shard && parts[i].checkpoint == c)
            bytes = parts[i].bytes;
    free(parts);
    assert_true(bytes > 0);
    return bytes;
}

/* Write part (shard, c) of job "rule" (2 shards): `ids`, n of them. */
static void rule_part(cpr_store *st, uint32_t shard, uint64_t c, cpr_kind kind,
                      const uint64_t *ids, size_t n)
{
    cpr_part_spec spec = tu_part("rule", shard, SHARDS, c, kind, &g_t, 1);
    assert_int_equal(cpr_store_begin(st, &spec), CPR_OK);
    assert_int_equal(tu_put_rows(st, &spec.id, &g_t, ids, n, c), CPR_OK);
    assert_int_equal(cpr_store_commit(st, &spec.id, n), CPR_OK);
}

static void test_background_rule(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("cpr-fold-rule");
    cpr_store *st;
    assert_int_equal(cpr_store_open(dir, &g_no_fold, &st), CPR_OK);
    uint64_t *ids = malloc(ROWS * sizeof *ids);
    uint64_t folded = 0, c = 1;

    /* Shard 0: a FULL of its rows, then parts of a sixteenth of them each:
     * folded once four of them hold a quarter of the FULL's bytes. */
    size_t n = 0;
    for (uint64_t r = 0; r < ROWS; r += SHARDS)
        ids[n++] = r;
    rule_part(st, 0, c, CPR_KIND_FULL, ids, n);
    uint64_t base = part_bytes(st, "rule", 0, c), after = 0;
    size_t parts = 0, folded_after = 0;
    while (!folded_after && parts < 20) {
        c++;
        n = 0;
        for (uint64_t r = 0; r < ROWS; r += SHARDS)
            if ((r / SHARDS) % 16 == c % 16)
                ids[n++] = r;
        rule_part(st, 0, c, CPR_KIND_PRIORITY, ids, n);
        after += part_bytes(st, "rule", 0, c);
        parts++;
        assert_int_equal(cpri_fold_background_pass(st, &folded), CPR_OK);
        assert_int_equal(folded, parts >= 4 && after * 4 >= base);
        if (folded)
            folded_after = parts;
    }
    print_message("  shard 0 (base %" PRIu64 " bytes) folded after %zu parts of %" PRIu64
                  " bytes\n", base, folded_after, after);
    assert_true(folded_after >= 4 && folded_after <= 5);
    assert_int_equal(cpri_fold_background_pass(st, &folded), CPR_OK);
    assert_int_equal(folded, 0); /* the fold is shard 0's base now */

    /* Shard 1: a FULL, then parts of one row each: folded at the 32nd. */
    n = 0;
    for (uint64_t r = 1; r < ROWS; r += SHARDS)
        ids[n++] = r;
    rule_part(st, 1, ++c, CPR_KIND_FULL, ids, n);
    for (parts = 1; parts <= 32; parts++) {
        uint64_t one = 1 + 2 * parts;
        rule_part(st, 1, ++c, CPR_KIND_PRIORITY, &one, 1);
        assert_int_equal(cpri_fold_background_pass(st, &folded), CPR_OK);
        assert_int_equal(folded, parts == 32);
    }

    /* Folding changed no answer: the newest rows are as written. */
    tu_rows rows = {0};
    cpr_restore_query q = {.job = "rule", .batch_rows = 100};
    cpr_restore_result res;
    assert_int_equal(tu_restore(st, &q, &rows, &res), CPR_OK);
    assert_int_equal(rows.n, ROWS);
    for (size_t i = 0; i < rows.n; i++) {
        uint64_t r = rows.rows[i].id, want = 1;
        if (r % SHARDS == 0) {
            for (uint64_t k = 2; k <= 1 + folded_after; k++)
                if ((r / SHARDS) % 16 == k % 16)
                    want = k;
        } else {
            want = folded_after + 2; /* shard 1's FULL */
            if (r >= 3 && r <= 1 + 2 * 32)
                want += (r - 1) / 2;
        }
        tu_assert_row(&rows.rows[i], &g_t, r, want);
    }
    tu_rows_free(&rows);
    free(ids);
    cpr_store_close(st);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* First: its processes are forks of a parent that has not opened a
         * store (RocksDB is not fork-safe). */
        cmocka_unit_test(test_sigkill_while_folding),
        cmocka_unit_test(test_chain_of_200_exact),
        cmocka_unit_test(test_background_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
