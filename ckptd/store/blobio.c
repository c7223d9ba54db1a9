/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io_uring implementation of blobio.h; the only user of liburing. Each writer
 * has up to CPR_BFILE_DEPTH aligned buffers, written through rings the
 * process shares (R1-R4 below): the caller fills one buffer while earlier
 * ones are written, so copying overlaps the disk. With
 * O_DIRECT the tail is written padded to the alignment and the file is then
 * truncated to its exact length. If io_uring is unavailable (old kernel,
 * seccomp) we fall back to pwrite/pread so the store still works.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "blobio.h"
#include "cpr/crc32c.h"
#include "cpr_common.h"

#define CPR_BFILE_DEPTH 8
#define CPR_ALIGN 4096

struct cpri_bfile_writer;

typedef struct iobuf {
    unsigned char *data;
    size_t fill;
    int in_flight;            /* submitted, not yet completed (R2) */
    int done;                 /* completed, result not yet looked at (R2) */
    int res;                  /* the completion's result */
    struct cpri_bfile_writer *owner;
} iobuf;

struct cpri_bfile_writer {
    char *path;
    int fd;
    int direct;
    int have_ring;            /* writes go through a shared ring (else pwrite) */
    struct write_ring *ring;
    pthread_mutex_t mu;       /* in_flight, done, res of the buffers (R2) */
    pthread_cond_t completed;
    iobuf bufs[CPR_BFILE_DEPTH];
    unsigned cur;             /* buffer being filled */
    unsigned in_flight;
    uint64_t submitted_bytes; /* file offset of the next block written */
    uint64_t written;         /* bytes appended by the caller */
    uint32_t *crcs;
    size_t n_crcs, cap_crcs;
    int want_crcs;
    cpr_status sticky;        /* first I/O error: every later call fails */
};

/* ---- the shared write rings -------------------------------------------------------
 * Writers own no ring: they submit to one of WRITE_RINGS rings of the
 * process, each drained by one completion thread that hands every completion
 * to its writer. So writes cost WRITE_RINGS threads and ring descriptors,
 * whatever the number of open parts and blobs (issue #11); a writer holds
 * only its file.
 *
 * Invariants
 *  R1. A ring's submission queue is used under its mutex only.
 *  R2. A buffer is in flight from its submission until its ring's thread
 *      records the result under the writer's mutex (done = 1) and signals;
 *      only the writer's own thread then reads the result and clears done.
 *  R3. A writer is freed only once none of its buffers is in flight: no
 *      completion can name it afterwards.
 *  R4. A forked child sees no rings (pthread_atfork): it makes its own.
 *  R5. Only a ring's own thread enters the kernel with it (io_uring_submit):
 *      writers prepare their entries under the ring's mutex and wake the
 *      thread through its eventfd. Linux cancels the io_uring requests a
 *      task submitted, if still queued, when that task exits (-ECANCELED),
 *      and writers run on short-lived threads (a PutRows handler's ends
 *      with its stream, before the Commit's thread finishes the segment):
 *      "write ...: Operation canceled" at commit, under load. The ring's
 *      thread lives as long as the process.
 */
#define WRITE_RINGS 2
#define WRITE_RING_ENTRIES 256
#define WRITE_RING_IN_FLIGHT (2 * WRITE_RING_ENTRIES) /* the completion queue's size, less
                                                         one for the wake read (R5) ... */

typedef struct write_ring {
    struct io_uring ring;
    pthread_mutex_t mu;        /* R1 */
    pthread_cond_t room;       /* ... so no completion overflows: a submit waits */
    unsigned in_flight;        /* under mu: prepared and not completed */
    unsigned pending;          /* under mu: prepared, not yet submitted (R5) */
    int wake_fd;               /* eventfd: writers' entries are ready (R5) */
    uint64_t wake_buf;         /* the ring thread's read of it */
    pthread_t thread;
} write_ring;

static pthread_mutex_t rings_mu = PTHREAD_MUTEX_INITIALIZER;
static write_ring rings[WRITE_RINGS];
static int rings_state;        /* 0 not tried, 1 up, -1 unavailable (pwrite) */
static unsigned rings_next;
static int atfork_set;

/* R4: fork holds rings_mu, so the child gets it unlocked and no rings. */
static void rings_prepare(void) { pthread_mutex_lock(&rings_mu); }
static void rings_parent(void) { pthread_mutex_unlock(&rings_mu); }
static void rings_child(void)
{
    rings_state = 0; /* the parent's rings and threads are not the child's */
    pthread_mutex_unlock(&rings_mu);
}

/* io_uring_wait_cqe, retried when a signal interrupts the wait. */
static int wait_cqe(struct io_uring *ring, struct io_uring_cqe **cqe)
{
    int rc;
    do {
        rc = io_uring_wait_cqe(ring, cqe);
    } while (rc == -EINTR);
    return rc;
}

/* Under r->mu: a read of the eventfd, whose completion wakes the thread. */
static void arm_wake(write_ring *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring); /* room kept for it */
    io_uring_prep_read(sqe, r->wake_fd, &r->wake_buf, sizeof r->wake_buf, 0);
    io_uring_sqe_set_data(sqe, &r->wake_buf);
}

/* Under r->mu (R5): hand every prepared entry to the kernel. */
static void submit_pending(write_ring *r)
{
    while (r->pending) {
        int rc = io_uring_submit(&r->ring);
        if (rc > 0) {
            r->pending -= (unsigned)rc < r->pending ? (unsigned)rc : r->pending;
            continue;
        }
        pthread_mutex_unlock(&r->mu); /* not expected (EBUSY, ENOMEM): again shortly */
        struct timespec pause = {0, 1000000L};
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&r->mu);
    }
    pthread_cond_broadcast(&r->room);
}

static void *ring_main(void *arg)
{
    write_ring *r = arg;
    pthread_mutex_lock(&r->mu);
    arm_wake(r);
    r->pending++;
    submit_pending(r);
    pthread_mutex_unlock(&r->mu);
    for (;;) {
        struct io_uring_cqe *cqe;
        if (wait_cqe(&r->ring, &cqe) < 0) {
            struct timespec pause = {0, 1000000L}; /* not expected: do not spin */
            nanosleep(&pause, NULL);
            continue;
        }
        void *data = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&r->ring, cqe);
        if (data == &r->wake_buf) { /* writers' entries are ready (R5) */
            pthread_mutex_lock(&r->mu);
            arm_wake(r);
            r->pending++;
            submit_pending(r);
            pthread_mutex_unlock(&r->mu);
            continue;
        }
        iobuf *b = data;
        pthread_mutex_lock(&r->mu);
        r->in_flight--;
        pthread_cond_broadcast(&r->room);
        pthread_mutex_unlock(&r->mu);
        if (!b)
            continue;
        cpri_bfile_writer *w = b->owner;
        pthread_mutex_lock(&w->mu); /* R2 */
        b->res = res;
        b->done = 1;
        b->in_flight = 0;
        w->in_flight--;
        pthread_cond_broadcast(&w->completed);
        pthread_mutex_unlock(&w->mu);
    }
    return NULL;
}

/* A ring for a new writer, or NULL (io_uring refused: pwrite instead). */
static write_ring *ring_for_writer(void)
{
    pthread_mutex_lock(&rings_mu);
    if (!atfork_set)
        atfork_set = pthread_atfork(rings_prepare, rings_parent, rings_child) == 0;
    for (int i = 0; rings_state == 0 && i < WRITE_RINGS; i++) {
        pthread_mutex_init(&rings[i].mu, NULL);
        pthread_cond_init(&rings[i].room, NULL);
        rings[i].in_flight = 0;
        rings[i].pending = 0;
        rings[i].wake_fd = eventfd(0, EFD_CLOEXEC);
        int ok = rings[i].wake_fd >= 0 &&
                 io_uring_queue_init(WRITE_RING_ENTRIES, &rings[i].ring, 0) == 0;
        if (!ok && rings[i].wake_fd >= 0)
            close(rings[i].wake_fd);
        sigset_t all, old;
        sigfillset(&all); /* the threads take no signal */
        pthread_sigmask(SIG_SETMASK, &all, &old);
        if (ok && pthread_create(&rings[i].thread, NULL, ring_main, &rings[i]) != 0) {
            io_uring_queue_exit(&rings[i].ring);
            close(rings[i].wake_fd);
            ok = 0;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (ok) {
            /* named, not inherited from whoever opened the first writer */
            pthread_setname_np(rings[i].thread, "cpr-io-ring");
            pthread_detach(rings[i].thread);
        }
        if (!ok) /* the rings made so far stay, unused: io_uring is off */
            rings_state = -1;
        else if (i == WRITE_RINGS - 1)
            rings_state = 1;
    }
    write_ring *r = rings_state == 1 ? &rings[rings_next++ % WRITE_RINGS] : NULL;
    pthread_mutex_unlock(&rings_mu);
    return r;
}

static int open_maybe_direct(const char *path, int flags, int direct, int *got_direct)
{
    int fd = -1;
    *got_direct = 0;
    if (direct) {
        fd = open(path, flags | O_DIRECT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            *got_direct = 1;
            return fd;
        }
        if (errno != EINVAL)
            return -1;
    }
    return open(path, flags | O_CLOEXEC, 0644);
}

static cpr_status io_error(const char *what, const char *path, int err)
{
    if (err == ENOSPC || err == EDQUOT)
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "%s %s: disk full (%s)", what,
                        path, strerror(err));
    return cpr_fail(CPR_IO, "%s %s: %s", what, path, strerror(err));
}

/* The result of completed buffer b (writer's thread, R2): an error, or
 * CPR_OK with b ready to fill again (or freed, if it is not the current). */
static cpr_status take_result(cpri_bfile_writer *w, iobuf *b, int res)
{
    size_t fill = b->fill;
    if (b != &w->bufs[w->cur]) { /* written: a writer between writes holds one buffer */
        free(b->data);
        b->data = NULL;
    }
    b->fill = 0;
    if (res < 0)
        return io_error("write", w->path, -res);
    if ((size_t)res != fill) /* on ext4, xfs and tmpfs: the disk filled mid-write */
        return cpr_fail(CPR_RESOURCE_EXHAUSTED, "short write to %s (%d of %zu bytes): the "
                        "file system is full", w->path, res, fill);
    return CPR_OK;
}

/* Wait until `b` (NULL: every buffer) is not in flight, then look at every
 * completion that came meanwhile; the first error is returned. */
static cpr_status wait_writes(cpri_bfile_writer *w, const iobuf *b)
{
    int res[CPR_BFILE_DEPTH];
    int done[CPR_BFILE_DEPTH] = {0};
    pthread_mutex_lock(&w->mu);
    while (b ? b->in_flight : w->in_flight > 0)
        pthread_cond_wait(&w->completed, &w->mu);
    for (int i = 0; i < CPR_BFILE_DEPTH; i++)
        if (w->bufs[i].done) {
            done[i] = 1;
            res[i] = w->bufs[i].res;
            w->bufs[i].done = 0;
        }
    pthread_mutex_unlock(&w->mu);
    cpr_status st = CPR_OK;
    for (int i = 0; i < CPR_BFILE_DEPTH; i++)
        if (done[i]) {
            cpr_status one = take_result(w, &w->bufs[i], res[i]);
            if (st == CPR_OK)
                st = one;
        }
    return st;
}

static cpr_status write_sync(cpri_bfile_writer *w, iobuf *b, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(w->fd, b->data + done, len - done,
                           (off_t)(w->submitted_bytes + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return io_error("write", w->path, errno);
        done += (size_t)n;
    }
    b->fill = 0;
    return CPR_OK;
}

/* Buffers are allocated when filling starts and freed once written (but
 * the one being filled): an idle writer holds one, a streaming one up to
 * CPR_BFILE_DEPTH (the store counts a blob writer as its one buffer, store.c O1). */
static cpr_status ensure_buf(cpri_bfile_writer *w, iobuf *b)
{
    b->fill = 0;
    if (b->data)
        return CPR_OK;
    if (posix_memalign((void **)&b->data, CPR_ALIGN, CPR_BLOB_BLOCK)) {
        b->data = NULL;
        return cpr_fail(CPR_NO_MEMORY, "out of memory for I/O buffers of %s", w->path);
    }
    return CPR_OK;
}

/* Submit the current buffer (len bytes, aligned for O_DIRECT) and advance. */
static cpr_status submit_current(cpri_bfile_writer *w, size_t len)
{
    iobuf *b = &w->bufs[w->cur];
    cpr_status st = CPR_OK;
    if (!w->have_ring) {
        st = write_sync(w, b, len);
    } else {
        b->fill = len;
        b->owner = w;
        pthread_mutex_lock(&w->mu); /* before the submit: the completion may come at once */
        b->in_flight = 1;
        w->in_flight++;
        pthread_mutex_unlock(&w->mu);
        write_ring *r = w->ring;
        pthread_mutex_lock(&r->mu); /* R1 */
        /* Room in the completion queue, and in the submission queue with
         * one entry kept for the ring thread's wake read (R5). */
        while (r->in_flight >= WRITE_RING_IN_FLIGHT - 1 || io_uring_sq_space_left(&r->ring) < 2)
            pthread_cond_wait(&r->room, &r->mu);
        struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
        io_uring_prep_write(sqe, w->fd, b->data, (unsigned)len, w->submitted_bytes);
        io_uring_sqe_set_data(sqe, b);
        r->in_flight++;
        int wake = r->pending++ == 0;
        pthread_mutex_unlock(&r->mu);
        if (wake) { /* R5: the ring thread submits; an eventfd write does not fail here */
            uint64_t one = 1;
            while (write(r->wake_fd, &one, sizeof one) < 0 && errno == EINTR) {
            }
        }
    }
    w->submitted_bytes += len;
    w->cur = (w->cur + 1) % CPR_BFILE_DEPTH;
    /* The next buffer may still be in flight: wait for it. */
    if (st == CPR_OK && w->have_ring)
        st = wait_writes(w, &w->bufs[w->cur]);
    if (st == CPR_OK)
        st = ensure_buf(w, &w->bufs[w->cur]);
    return st;
}

static cpr_status push_crc(cpri_bfile_writer *w, uint32_t crc)
{
    if (w->n_crcs == w->cap_crcs) {
        size_t cap = w->cap_crcs ? w->cap_crcs * 2 : 16;
        uint32_t *grown = realloc(w->crcs, cap * sizeof *grown);
        if (!grown)
            return cpr_fail(CPR_NO_MEMORY, "out of memory for blob checksums");
        w->crcs = grown;
        w->cap_crcs = cap;
    }
    w->crcs[w->n_crcs++] = crc;
    return CPR_OK;
}

cpr_status cpri_bfile_create(const char *path, int direct, int want_crcs,
                            cpri_bfile_writer **out)
{
    cpr_status st = CPR_OK;
    cpri_bfile_writer *w = calloc(1, sizeof *w);
    if (!w)
        return cpr_fail(CPR_NO_MEMORY, "out of memory opening %s", path);
    w->fd = -1;
    w->want_crcs = want_crcs;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->completed, NULL);
    w->path = strdup(path);
    if (!w->path) {
        st = cpr_fail(CPR_NO_MEMORY, "out of memory opening %s", path);
        goto out;
    }
    st = ensure_buf(w, &w->bufs[0]); /* the others when needed */
    if (st)
        goto out;
    w->fd = open_maybe_direct(path, O_WRONLY | O_CREAT | O_TRUNC, direct, &w->direct);
    if (w->fd < 0) {
        st = io_error("create", path, errno);
        goto out;
    }
    w->ring = ring_for_writer();
    w->have_ring = w->ring != NULL;
out:
    if (st) {
        cpri_bfile_discard(w);
        return st;
    }
    *out = w;
    return CPR_OK;
}

cpr_status cpri_bfile_append(cpri_bfile_writer *w, const void *data, size_t len)
{
    const unsigned char *src = data;
    cpr_status st = w->sticky;
    while (st == CPR_OK && len > 0) {
        iobuf *b = &w->bufs[w->cur];
        size_t take = CPR_BLOB_BLOCK - b->fill;
        if (take > len)
            take = len;
        memcpy(b->data + b->fill, src, take);
        b->fill += take;
        src += take;
        len -= take;
        w->written += take;
        if (b->fill == CPR_BLOB_BLOCK) {
            if (w->want_crcs)
                st = push_crc(w, cpr_crc32c(0, b->data, CPR_BLOB_BLOCK));
            if (st == CPR_OK)
                st = submit_current(w, CPR_BLOB_BLOCK);
        }
    }
    w->sticky = st;
    return st;
}

uint64_t cpri_bfile_written(const cpri_bfile_writer *w)
{
    return w->written;
}

static void writer_free(cpri_bfile_writer *w, int unlink_file)
{
    if (w->have_ring)
        wait_writes(w, NULL); /* R3; errors are moot here */
    if (w->fd >= 0)
        close(w->fd);
    if (unlink_file && w->path)
        unlink(w->path);
    for (int i = 0; i < CPR_BFILE_DEPTH; i++)
        free(w->bufs[i].data);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->completed);
    free(w->crcs);
    free(w->path);
    free(w);
}

void cpri_bfile_discard(cpri_bfile_writer *w)
{
    if (w)
        writer_free(w, 1);
}

cpr_status cpri_bfile_finish(cpri_bfile_writer *w, int no_sync, uint64_t *size,
                            uint32_t **crcs, size_t *n_crcs)
{
    cpr_status st = w->sticky;
    iobuf *tail = &w->bufs[w->cur];
    if (st == CPR_OK && tail->fill > 0) {
        size_t len = tail->fill;
        if (w->want_crcs)
            st = push_crc(w, cpr_crc32c(0, tail->data, len));
        if (w->direct) { /* pad to the alignment; truncated below */
            size_t padded = (len + CPR_ALIGN - 1) & ~(size_t)(CPR_ALIGN - 1);
            memset(tail->data + len, 0, padded - len);
            len = padded;
        }
        if (st == CPR_OK)
            st = submit_current(w, len);
    }
    if (st == CPR_OK && w->have_ring)
        st = wait_writes(w, NULL);
    if (st == CPR_OK && ftruncate(w->fd, (off_t)w->written) != 0)
        st = io_error("truncate", w->path, errno);
    if (st == CPR_OK && !no_sync && fdatasync(w->fd) != 0)
        st = io_error("fdatasync", w->path, errno);
    if (st == CPR_OK) {
        *size = w->written;
        if (crcs) {
            *crcs = w->crcs;
            *n_crcs = w->n_crcs;
            w->crcs = NULL;
        }
    }
    writer_free(w, st != CPR_OK);
    return st;
}

/* ---- reading ---------------------------------------------------------- */

typedef struct reader {
    const char *path;
    int fd;
    uint64_t size;
    struct io_uring ring;
    unsigned char *bufs[CPR_BFILE_DEPTH];
} reader;

static cpr_status read_block_sync(reader *r, uint64_t index, unsigned char *buf,
                                  size_t want, size_t *got)
{
    size_t done = 0;
    size_t ask = (want + CPR_ALIGN - 1) & ~(size_t)(CPR_ALIGN - 1);
    while (done < want) {
        ssize_t n = pread(r->fd, buf + done, ask - done,
                          (off_t)(index * CPR_BLOB_BLOCK + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return io_error("read", r->path, errno);
        if (n == 0)
            break;
        done += (size_t)n;
    }
    *got = done;
    return CPR_OK;
}

static size_t block_len(uint64_t size, uint64_t index)
{
    uint64_t left = size - index * CPR_BLOB_BLOCK;
    return left < CPR_BLOB_BLOCK ? (size_t)left : CPR_BLOB_BLOCK;
}

static void submit_read(reader *r, uint64_t index)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe)
        BUG("io_uring read queue full although depth is bounded");
    size_t len = block_len(r->size, index);
    size_t ask = (len + CPR_ALIGN - 1) & ~(size_t)(CPR_ALIGN - 1);
    io_uring_prep_read(sqe, r->fd, r->bufs[index % CPR_BFILE_DEPTH],
                       (unsigned)ask, index * CPR_BLOB_BLOCK);
    io_uring_sqe_set_data64(sqe, index);
}

/* Read with up to CPR_BFILE_DEPTH blocks in flight; completions are handled
 * in order because the callback must see the blocks in order. */
static cpr_status read_ring(reader *r, uint64_t n_blocks, cpri_bfile_block_fn fn,
                            void *ctx)
{
    cpr_status st = CPR_OK;
    uint64_t next_submit = 0, next_deliver = 0;
    int done_res[CPR_BFILE_DEPTH];
    int done_flag[CPR_BFILE_DEPTH] = {0};
    unsigned pending = 0;

    while (st == CPR_OK && next_deliver < n_blocks) {
        while (next_submit < n_blocks && next_submit < next_deliver + CPR_BFILE_DEPTH) {
            submit_read(r, next_submit++);
            pending++;
        }
        io_uring_submit(&r->ring);
        while (st == CPR_OK && !done_flag[next_deliver % CPR_BFILE_DEPTH]) {
            struct io_uring_cqe *cqe;
            int rc = wait_cqe(&r->ring, &cqe);
            if (rc < 0) {
                st = io_error("io_uring wait on", r->path, -rc);
                break;
            }
            uint64_t idx = io_uring_cqe_get_data64(cqe);
            done_res[idx % CPR_BFILE_DEPTH] = cqe->res;
            done_flag[idx % CPR_BFILE_DEPTH] = 1;
            io_uring_cqe_seen(&r->ring, cqe);
            pending--;
        }
        if (st)
            break;
        unsigned slot = next_deliver % CPR_BFILE_DEPTH;
        int res = done_res[slot];
        size_t want = block_len(r->size, next_deliver);
        done_flag[slot] = 0;
        if (res < 0)
            st = io_error("read", r->path, -res);
        else if ((size_t)res < want)
            st = cpr_fail(CPR_CORRUPT, "%s is shorter than its recorded %llu bytes",
                          r->path, (unsigned long long)r->size);
        else
            st = fn(ctx, next_deliver, r->bufs[slot], want);
        next_deliver++;
    }
    while (pending > 0) { /* drain so the buffers can be freed */
        struct io_uring_cqe *cqe;
        if (wait_cqe(&r->ring, &cqe) < 0)
            break; /* the ring is broken: exiting it cancels what is left */
        io_uring_cqe_seen(&r->ring, cqe);
        pending--;
    }
    return st;
}

static cpr_status read_plain(reader *r, uint64_t n_blocks, cpri_bfile_block_fn fn,
                             void *ctx)
{
    cpr_status st = CPR_OK;
    for (uint64_t i = 0; st == CPR_OK && i < n_blocks; i++) {
        size_t want = block_len(r->size, i), got = 0;
        st = read_block_sync(r, i, r->bufs[0], want, &got);
        if (st == CPR_OK && got < want)
            st = cpr_fail(CPR_CORRUPT, "%s is shorter than its recorded %llu bytes",
                          r->path, (unsigned long long)r->size);
        if (st == CPR_OK)
            st = fn(ctx, i, r->bufs[0], want);
    }
    return st;
}

cpr_status cpri_bfile_read(const char *path, uint64_t size, int direct,
                          cpri_bfile_block_fn fn, void *ctx)
{
    cpr_status st = CPR_OK;
    int got_direct = 0, have_ring = 0;
    reader r = {.path = path, .fd = -1, .size = size};
    struct stat_like { off_t len; } info;
    uint64_t n_blocks = (size + CPR_BLOB_BLOCK - 1) / CPR_BLOB_BLOCK;

    r.fd = open_maybe_direct(path, O_RDONLY, direct, &got_direct);
    if (r.fd < 0) {
        st = errno == ENOENT ? cpr_fail(CPR_CORRUPT, "blob file %s is missing", path)
                             : io_error("open", path, errno);
        goto out;
    }
    info.len = lseek(r.fd, 0, SEEK_END);
    if (info.len < 0 || (uint64_t)info.len != size) {
        st = cpr_fail(CPR_CORRUPT, "%s has %lld bytes, its record says %llu", path,
                      (long long)info.len, (unsigned long long)size);
        goto out;
    }
    for (int i = 0; i < CPR_BFILE_DEPTH; i++) {
        if (posix_memalign((void **)&r.bufs[i], CPR_ALIGN, CPR_BLOB_BLOCK)) {
            st = cpr_fail(CPR_NO_MEMORY, "out of memory reading %s", path);
            goto out;
        }
    }
    have_ring = io_uring_queue_init(CPR_BFILE_DEPTH, &r.ring, 0) == 0;
    st = have_ring ? read_ring(&r, n_blocks, fn, ctx) : read_plain(&r, n_blocks, fn, ctx);
out:
    if (have_ring)
        io_uring_queue_exit(&r.ring);
    for (int i = 0; i < CPR_BFILE_DEPTH; i++)
        free(r.bufs[i]);
    if (r.fd >= 0)
        close(r.fd);
    return st;
}

int cpri_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

cpr_status cpri_replace_file(const char *dir, const char *path, const void *bytes, size_t len)
{
    char tmp[4200];
    cpr_status st = CPR_OK;
    int fd = -1;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return cpr_fail(CPR_INVALID_ARGUMENT, "path too long: %s", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = io_error("create", tmp, errno);
        goto out;
    }
    ssize_t w = write(fd, bytes, len);
    if (w < 0)
        st = io_error("write", tmp, errno);
    else if ((size_t)w != len)
        st = cpr_fail(CPR_RESOURCE_EXHAUSTED, "short write to %s: the file system is full", tmp);
    else if (fsync(fd) != 0)
        st = io_error("fsync", tmp, errno);
    if (st)
        goto out;
    if (rename(tmp, path) != 0)
        st = io_error("rename", tmp, errno);
    else if (cpri_fsync_dir(dir) != 0)
        st = io_error("fsync", dir, errno);
out:
    if (fd >= 0)
        close(fd);
    if (st)
        unlink(tmp);
    return st;
}

/* ---- extent reads ------------------------------------------------------- */

int cpri_bfile_open_read(const char *path, int direct)
{
    int got;
    return open_maybe_direct(path, O_RDONLY, direct, &got);
}

typedef struct fetch_slot {
    unsigned char *buf;   /* aligned; NULL once delivered */
    size_t skip;          /* bytes before the extent in buf */
    size_t ask;           /* bytes read into buf */
    int res;
    int done;
} fetch_slot;

#define FETCH_POOL 16

struct cpri_fetcher {
    const cpri_fetch_req *reqs;
    size_t n, next_submit, next_deliver;
    unsigned depth, in_flight;
    int have_ring;
    struct io_uring ring;
    fetch_slot *slots;    /* depth of them; request i uses slot i % depth */
    void *pool[FETCH_POOL]; /* released buffers (their sizes: malloc_usable_size) */
    unsigned n_pool;
};

/* A buffer of at least `ask` bytes: the smallest released one that is big
 * enough, else a new one. */
static unsigned char *fetch_buffer(cpri_fetcher *f, size_t ask)
{
    unsigned best = f->n_pool;
    size_t best_cap = 0;
    for (unsigned i = 0; i < f->n_pool; i++) {
        size_t cap = malloc_usable_size(f->pool[i]);
        if (cap >= ask && (best == f->n_pool || cap < best_cap)) {
            best = i;
            best_cap = cap;
        }
    }
    if (best < f->n_pool) {
        unsigned char *b = f->pool[best];
        f->pool[best] = f->pool[--f->n_pool];
        return b;
    }
    unsigned char *b = NULL;
    size_t want = ask < (1u << 20) ? (1u << 20) : ask; /* room for typical blocks */
    return posix_memalign((void **)&b, CPR_IO_ALIGN, want) ? NULL : b;
}

static cpr_status fetch_prepare(cpri_fetcher *f, size_t i, fetch_slot *s)
{
    const cpri_fetch_req *r = &f->reqs[i];
    uint64_t start = r->offset & ~(uint64_t)(CPR_IO_ALIGN - 1);
    s->skip = (size_t)(r->offset - start);
    s->ask = (s->skip + r->len + CPR_IO_ALIGN - 1) & ~(size_t)(CPR_IO_ALIGN - 1);
    s->done = 0;
    s->res = 0;
    s->buf = fetch_buffer(f, s->ask ? s->ask : CPR_IO_ALIGN);
    if (!s->buf)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a read of %zu bytes", s->ask);
    return CPR_OK;
}

/* Read whatever of [have, need) is missing synchronously (short reads,
 * and the path without io_uring). */
static cpr_status fetch_finish_sync(const cpri_fetch_req *r, fetch_slot *s, size_t have)
{
    uint64_t start = r->offset - s->skip;
    size_t need = s->skip + r->len;
    if (have >= need)
        return CPR_OK;
    have &= ~(size_t)(CPR_IO_ALIGN - 1); /* O_DIRECT: resume at an aligned offset */
    while (have < need) {
        ssize_t got = pread(r->fd, s->buf + have, s->ask - have, (off_t)(start + have));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return cpr_fail(CPR_IO, "read of %zu bytes at offset "
                            "%llu: %s", r->len, (unsigned long long)r->offset,
                            strerror(errno));
        if (got == 0 || (size_t)got % CPR_IO_ALIGN != 0) {
            if (have + (size_t)got >= need)
                return CPR_OK;
            return cpr_fail(CPR_CORRUPT, "segment ends before the extent of %zu bytes at "
                            "offset %llu", r->len, (unsigned long long)r->offset);
        }
        have += (size_t)got;
    }
    return CPR_OK;
}

static cpr_status fetch_submit(cpri_fetcher *f)
{
    while (f->next_submit < f->n && f->next_submit < f->next_deliver + f->depth) {
        size_t i = f->next_submit;
        fetch_slot *s = &f->slots[i % f->depth];
        cpr_status st = fetch_prepare(f, i, s);
        if (st)
            return st;
        f->next_submit++;
        if (!f->have_ring)
            continue;
        struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
        if (!sqe)
            BUG("io_uring fetch queue full although depth is bounded");
        io_uring_prep_read(sqe, f->reqs[i].fd, s->buf, (unsigned)s->ask,
                           f->reqs[i].offset - s->skip);
        io_uring_sqe_set_data64(sqe, i);
        f->in_flight++;
    }
    /* in_flight counts prepared reads; any not yet submitted (a failure
     * above, a short submit) are submitted by the next call here or in
     * destroy, and every wait comes after one. */
    if (f->have_ring && f->in_flight) {
        int rc = io_uring_submit(&f->ring);
        if (rc < 0)
            return cpr_fail(CPR_IO, "io_uring submit: %s", strerror(-rc));
    }
    return CPR_OK;
}

cpr_status cpri_fetcher_create(const cpri_fetch_req *reqs, size_t n, unsigned depth, int sync,
                              cpri_fetcher **out)
{
    cpri_fetcher *f = calloc(1, sizeof *f);
    if (depth == 0)
        depth = 1;
    if (f)
        f->slots = calloc(depth, sizeof *f->slots);
    if (!f || !f->slots) {
        free(f);
        return cpr_fail(CPR_NO_MEMORY, "out of memory starting reads");
    }
    f->reqs = reqs;
    f->n = n;
    f->depth = depth;
    f->have_ring = !sync && n > 0 && io_uring_queue_init(depth, &f->ring, 0) == 0;
    *out = f;
    return CPR_OK;
}

cpr_status cpri_fetcher_next(cpri_fetcher *f, void **owner, const unsigned char **data)
{
    if (f->next_deliver >= f->n)
        return cpr_fail(CPR_INTERNAL, "fetcher: all %zu extents were delivered", f->n);
    cpr_status st = fetch_submit(f);
    size_t i = f->next_deliver;
    fetch_slot *s = &f->slots[i % f->depth];
    while (st == CPR_OK && f->have_ring && !s->done) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_submit(&f->ring); /* nothing prepared stays unsubmitted */
        if (rc < 0)
            return cpr_fail(CPR_IO, "io_uring submit: %s", strerror(-rc));
        rc = wait_cqe(&f->ring, &cqe);
        if (rc < 0)
            return cpr_fail(CPR_IO, "io_uring wait: %s", strerror(-rc));
        uint64_t idx = io_uring_cqe_get_data64(cqe);
        f->slots[idx % f->depth].res = cqe->res;
        f->slots[idx % f->depth].done = 1;
        io_uring_cqe_seen(&f->ring, cqe);
        f->in_flight--;
    }
    if (st)
        return st;
    if (f->have_ring && s->res < 0)
        return cpr_fail(CPR_IO, "read of %zu bytes at offset %llu: %s", f->reqs[i].len,
                        (unsigned long long)f->reqs[i].offset, strerror(-s->res));
    st = fetch_finish_sync(&f->reqs[i], s, f->have_ring ? (size_t)s->res : 0);
    if (st)
        return st;
    *owner = s->buf;
    *data = s->buf + s->skip;
    s->buf = NULL;
    f->next_deliver++;
    return CPR_OK;
}

void cpri_fetcher_release(cpri_fetcher *f, void *owner)
{
    if (!owner)
        return;
    if (f->n_pool == FETCH_POOL)
        free(owner);
    else
        f->pool[f->n_pool++] = owner;
}

void cpri_fetcher_destroy(cpri_fetcher *f)
{
    if (!f)
        return;
    int drained = 1;
    if (f->have_ring) {
        if (io_uring_submit(&f->ring) < 0) { /* prepared but never submitted: none will complete */
            unsigned unsent = io_uring_sq_ready(&f->ring);
            f->in_flight -= unsent < f->in_flight ? unsent : f->in_flight;
        }
        while (f->in_flight > 0) {
            struct io_uring_cqe *cqe;
            if (wait_cqe(&f->ring, &cqe) < 0) {
                drained = 0; /* reads may still land in the slot buffers */
                break;
            }
            io_uring_cqe_seen(&f->ring, cqe);
            f->in_flight--;
        }
        io_uring_queue_exit(&f->ring);
    }
    for (unsigned i = 0; drained && i < f->depth; i++)
        free(f->slots[i].buf); /* not drained: leaked rather than written after free */
    for (unsigned i = 0; i < f->n_pool; i++)
        free(f->pool[i]);
    free(f->slots);
    free(f);
}
