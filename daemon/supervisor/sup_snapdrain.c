/* sup_snapdrain: the copier of a snapshot's pipe (sup_snapdrain.h). A
 * thread moves what the worker writes into the snapshot's temporary file,
 * counting it against the cap, while a second thread reads the file back
 * into its HMAC; the worker never holds the file itself. */
#include "sup_snapdrain.h"

#include "sup_log.h"

#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* ---- the pipe a snapshot comes through --------------------------------- */

/* What the worker writes to the pipe is records, each a u64 (little-
 * endian): a length, then that many bytes of the file; or, with bit 63
 * set, an offset at most what was written, to which the file goes back
 * (the worker writes the stream again without the globals that failed). */
#define DRAIN_CHUNK (1 << 20)
#define DRAIN_RESET (1ull << 63)
#define PIPE_BYTES (8 << 20)

static void drain_fail(sup_snap_drain *d, const char *why, int e)
{
    pthread_mutex_lock(&d->mu);
    if (!d->bad) {
        d->bad = why;
        d->bad_errno = e;
    }
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* The hasher's thread: the file's bytes into the HMAC as the copier writes
 * them (read back from the page cache), so the two run side by side. */
static void *hash_main(void *arg)
{
    sup_snap_drain *d = arg;
    unsigned char *buf = mem_alloc(DRAIN_CHUNK);
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->hashed == d->n && !d->copied && !d->bad)
            pthread_cond_wait(&d->cv, &d->mu);
        if (d->bad || (d->hashed == d->n && d->copied))
            break;
        uint64_t at = d->hashed;
        size_t want = d->n - at < DRAIN_CHUNK ? (size_t)(d->n - at) : DRAIN_CHUNK;
        unsigned gen = d->gen;
        pthread_mutex_unlock(&d->mu);
        ssize_t k = pread(d->out, buf, want, (off_t)at);
        if (k > 0)
            sup_snapmac_add(d->mac, buf, (uint64_t)k);
        pthread_mutex_lock(&d->mu);
        if (d->gen != gen) { /* the file went back: start over */
            sup_snapmac_reset(d->mac);
            d->hashed = 0;
            continue;
        }
        if (k <= 0) {
            d->hash_failed = true;
            break;
        }
        d->hashed += (uint64_t)k;
    }
    pthread_mutex_unlock(&d->mu);
    free(buf);
    return NULL;
}

/* Moves len bytes of the record being read from the pipe to the file's
 * end (splice: no copy); false (d->bad set) when it cannot. The bytes
 * moved, through *moved (0 when the pipe was empty). */
static bool drain_move(sup_snap_drain *d, uint64_t len, unsigned flags, size_t *moved)
{
    pthread_mutex_lock(&d->mu);
    loff_t off = (loff_t)d->n;
    pthread_mutex_unlock(&d->mu);
    size_t want = len < DRAIN_CHUNK ? (size_t)len : DRAIN_CHUNK;
    ssize_t k = splice(d->rd, NULL, d->out, &off, want, SPLICE_F_MOVE | flags);
    *moved = 0;
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
        return true;
    if (k <= 0) {
        drain_fail(d, k == 0 ? "internal" : "io", k == 0 ? 0 : errno);
        return false;
    }
    pthread_mutex_lock(&d->mu);
    d->n += (uint64_t)k;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    *moved = (size_t)k;
    return true;
}

/* Takes the file back to off (the hasher starts over). */
static bool drain_reset(sup_snap_drain *d, uint64_t off)
{
    pthread_mutex_lock(&d->mu);
    bool ok = off <= d->n && ftruncate(d->out, (off_t)off) == 0;
    int e = errno;
    if (ok) {
        d->n = off;
        d->gen++;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    if (!ok)
        drain_fail(d, off > d->n ? "internal" : "io", e);
    return ok;
}

/* The copier's thread: the pipe into the file until its end, a fault, the
 * cap, or the stop (then what the pipe holds, without waiting). Closing
 * its read end makes the worker's further writes fail. */
static void *drain_main(void *arg)
{
    sup_snap_drain *d = arg;
    unsigned char hdr[8];
    size_t hn = 0;
    uint64_t left = 0; /* bytes of the record being read still to come */
    bool stopping = false;
    size_t last = 0; /* once stopping: what the pipe held then, left to read */
    while (!d->bad) {
        if (!stopping) {
            struct pollfd p[2] = {{d->rd, POLLIN, 0}, {d->evfd, POLLIN, 0}};
            if (poll(p, 2, -1) < 0 && errno != EINTR) {
                drain_fail(d, "io", errno);
                break;
            }
            if (atomic_load(&d->stop)) {
                /* The worker wrote everything before it answered: what
                 * the pipe holds now is the rest (at most the pipe's
                 * size); what it writes later is not read. */
                int avail = 0;
                stopping = true;
                (void)fcntl(d->rd, F_SETFL, O_NONBLOCK);
                if (ioctl(d->rd, FIONREAD, &avail) < 0 || avail <= 0)
                    break;
                last = (size_t)avail;
            } else if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
                continue;
            }
        }
        if (stopping && last == 0)
            break;
        size_t got = 0;
        if (left) {
            uint64_t want = stopping && last < left ? last : left;
            if (!drain_move(d, want, stopping ? SPLICE_F_NONBLOCK : 0, &got))
                break;
            left -= got;
        } else {
            size_t want = stopping && last < 8 - hn ? last : 8 - hn;
            ssize_t k = read(d->rd, hdr + hn, want);
            if (k == 0)
                break; /* the worker closed its end */
            if (k < 0) {
                if (errno != EAGAIN && errno != EINTR)
                    drain_fail(d, "io", errno);
                if (errno == EINTR || (errno == EAGAIN && !stopping))
                    continue;
                break;
            }
            got = (size_t)k;
            hn += got;
            if (hn == 8) {
                hn = 0;
                uint64_t v = 0;
                for (int j = 7; j >= 0; j--)
                    v = v << 8 | hdr[j];
                pthread_mutex_lock(&d->mu);
                uint64_t n = d->n;
                pthread_mutex_unlock(&d->mu);
                if (v & DRAIN_RESET)
                    (void)drain_reset(d, v & ~DRAIN_RESET);
                else if (n + v > d->max) /* the cap: known from the length */
                    drain_fail(d, "too_large", 0);
                else
                    left = v;
            }
        }
        if (stopping) {
            if (got == 0)
                break; /* nothing more was there */
            last -= got;
        }
    }
    if (!d->bad && (left || hn))
        drain_fail(d, "internal", 0); /* a record cut short */
    close(d->rd);
    d->rd = -1;
    pthread_mutex_lock(&d->mu);
    d->copied = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* Ends the copier (it takes what the pipe holds first) and waits for it. */
void sup_snapdrain_join(sup_snap_drain *d)
{
    if (!d->running)
        return;
    atomic_store(&d->stop, true);
    uint64_t one = 1;
    if (write(d->evfd, &one, sizeof one) != sizeof one)
        fatal("eventfd write: %s", strerror(errno));
    pthread_join(d->thread, NULL);
    pthread_join(d->hasher, NULL);
    d->running = false;
    if (d->hash_failed && !d->bad) {
        d->bad = "io";
        d->bad_errno = EIO;
    }
}

/* Starts copying a pipe into out (capped at max); the pipe's write end for
 * the worker in *wfd, or NULL with errno. */
sup_snap_drain *sup_snapdrain_start(int out, uint64_t max, int *wfd)
{
    sup_snapmac *mac = sup_snapmac_new(SUP_SNAPMAC_OWN);
    if (!mac)
        return NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        sup_snapmac_free(mac);
        return NULL;
    }
    (void)fcntl(p[0], F_SETPIPE_SZ, PIPE_BYTES);
    sup_snap_drain *d = mem_calloc(1, sizeof *d);
    d->rd = p[0];
    d->out = out;
    d->max = max;
    d->mac = mac;
    d->evfd = eventfd(0, EFD_CLOEXEC);
    if (d->evfd < 0)
        fatal("eventfd: %s", strerror(errno));
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    int e = pthread_create(&d->thread, NULL, drain_main, d);
    if (!e)
        e = pthread_create(&d->hasher, NULL, hash_main, d);
    if (e)
        fatal("pthread_create: %s", strerror(e));
    d->running = true;
    *wfd = p[1];
    return d;
}
