/* wrk_chan: framed, mutex-serialised I/O on the supervisor channel. */
#include "wrk_chan.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"
#include "wrk_log.h"

/* The header of the stream frame being written (channel lock held). */
static proto_buf stream_hdr;

static int chan_fd = -1;
static pthread_mutex_t chan_mu = PTHREAD_MUTEX_INITIALIZER;
/* Descriptors received with SCM_RIGHTS (only `fork` frames carry them), in
 * arrival order, until the frame that owns them takes them. */
#define MAX_HELD_FDS 16
static int held_fds[MAX_HELD_FDS];
static int nheld;

/* A frame held back to go out in front of the next write (a run's
 * `start`, wrk_output.c), so that a short run's start and done leave in one
 * write and wake the supervisor once. */
static uint8_t deferred[WRK_CHAN_DEFER_MAX];
static size_t ndeferred;

/* A forked child (os.fork, multiprocessing) must never write into the
 * parent's channel: drop it, and reset the lock another thread may have held
 * at the moment of the fork. */
static void chan_after_fork_child(void)
{
    pthread_mutex_init(&chan_mu, NULL);
    ndeferred = 0;
    if (chan_fd >= 0)
        close(chan_fd);
    chan_fd = -1;
}

/* Makes the inherited descriptor the channel: blocking writes are the
 * backpressure mechanism, and children (os.system) must not inherit it. */
void wrk_chan_init(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) {
        wrk_log("fd %d (the supervisor channel) is not open", fd);
        _exit(2);
    }
    if (fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        fatal("fcntl on the channel: %s", strerror(errno));
    chan_fd = fd;
    proto_buf_reserve(&stream_hdr, 64);
    /* Registered once per process image: a worker forked from a zygote or
     * from another worker inherits the registration and calls this again. */
    static bool registered;
    if (!registered && pthread_atfork(NULL, NULL, chan_after_fork_child) != 0)
        fatal("pthread_atfork failed");
    registered = true;
}

void wrk_chan_gone(int code)
{
    if (getpgrp() == getpid())
        kill(0, SIGKILL);
    _exit(code);
}

/* Serialises whole frames on the channel. */
void wrk_chan_lock(void)
{
    if (pthread_mutex_lock(&chan_mu) != 0)
        fatal("channel mutex lock failed");
}

/* Counterpart of wrk_chan_lock. */
void wrk_chan_quiesce(int max_ms)
{
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < max_ms; i++) {
        if (pthread_mutex_trylock(&chan_mu) == 0)
            return;
        nanosleep(&ms, NULL);
    }
}

void wrk_chan_unlock(void)
{
    if (pthread_mutex_unlock(&chan_mu) != 0)
        fatal("channel mutex unlock failed");
}

/* Writes the pieces in order, retrying after signals (SIGINT is unblocked
 * during a run) and partial writes; MSG_NOSIGNAL so a vanished supervisor
 * shows up as EPIPE. */
static void writev_all(struct iovec *v, int nv)
{
    while (nv > 0 && v->iov_len == 0) {
        v++;
        nv--;
    }
    while (nv > 0) {
        struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)nv};
        ssize_t w = sendmsg(chan_fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            wrk_log("channel write failed: %s; exiting", strerror(errno));
            wrk_chan_gone(1);
        }
        while (nv > 0 && (size_t)w >= v->iov_len) {
            w -= (ssize_t)v->iov_len;
            v++;
            nv--;
        }
        if (nv > 0) {
            v->iov_base = (uint8_t *)v->iov_base + w;
            v->iov_len -= (size_t)w;
        }
    }
}

/* Writes the held-back frame (if any) and then the two pieces, in one
 * sendmsg where the socket takes it all. */
static void write_after_deferred(const void *a, size_t na, const void *b, size_t nb)
{
    if (chan_fd < 0)
        return;
    struct iovec iov[3] = {{deferred, ndeferred}, {(void *)a, na}, {(void *)b, nb}};
    ndeferred = 0;
    writev_all(iov, 3);
}

void wrk_chan_defer_locked(const void *p, size_t n)
{
    if (ndeferred || n > sizeof deferred)
        fatal("channel: a second or oversized frame held back");
    memcpy(deferred, p, n);
    ndeferred = n;
}

void wrk_chan_flush_deferred_locked(void)
{
    if (ndeferred)
        write_after_deferred(NULL, 0, NULL, 0);
}

void wrk_chan_write_locked(const void *p, size_t n)
{
    write_after_deferred(p, n, NULL, 0);
}

/* Appends a msgpack bin header for n bytes (the smallest form). */
static void put_bin_header(proto_buf *b, size_t n)
{
    uint8_t h[5];
    size_t hl;
    if (n < 256) {
        h[0] = 0xc4, h[1] = (uint8_t)n, hl = 2;
    } else if (n < 65536) {
        h[0] = 0xc5, h[1] = (uint8_t)(n >> 8), h[2] = (uint8_t)n, hl = 3;
    } else {
        h[0] = 0xc6, h[1] = (uint8_t)(n >> 24), h[2] = (uint8_t)(n >> 16);
        h[3] = (uint8_t)(n >> 8), h[4] = (uint8_t)n, hl = 5;
    }
    proto_buf_append(b, h, hl);
}

/* Each frame is its header, built here, and the data where it lies, in one
 * sendmsg where it can: the data is never copied. */
void wrk_chan_write_stream_locked(const char *name, const uint8_t *p, size_t n)
{
    while (n > 0) {
        size_t k = n < (size_t)PROTO_STREAM_CHUNK ? n : (size_t)PROTO_STREAM_CHUNK;
        stream_hdr.len = 0;
        size_t start = proto_frame_begin(&stream_hdr);
        proto_put_map(&stream_hdr, 3);
        proto_put_str(&stream_hdr, "t");
        proto_put_str(&stream_hdr, "stream");
        proto_put_str(&stream_hdr, "name");
        proto_put_str(&stream_hdr, name);
        proto_put_str(&stream_hdr, "data");
        put_bin_header(&stream_hdr, k);
        size_t body = stream_hdr.len - start - 4 + k;
        uint8_t *h = stream_hdr.data + start;
        h[0] = (uint8_t)(body >> 24), h[1] = (uint8_t)(body >> 16);
        h[2] = (uint8_t)(body >> 8), h[3] = (uint8_t)body;
        write_after_deferred(stream_hdr.data, stream_hdr.len, p, k);
        p += k;
        n -= k;
    }
}

/* Writes whole frames with descriptors attached to their first byte
 * (SCM_RIGHTS): the first sendmsg carries them, the rest is written as
 * usual. */
void wrk_chan_write_fds_locked(const void *p, size_t n, const int *fds, int nfds)
{
    if (nfds <= 0 || nfds > 4 || chan_fd < 0) {
        wrk_chan_write_locked(p, n);
        return;
    }
    wrk_chan_flush_deferred_locked(); /* the descriptors go with p's first byte */
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {(void *)p, n};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
    ssize_t w;
    do
        w = sendmsg(chan_fd, &mh, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0) {
        wrk_log("channel write failed: %s; exiting", strerror(errno));
        wrk_chan_gone(1);
    }
    wrk_chan_write_locked((const uint8_t *)p + w, n - (size_t)w);
}

/* Sends frames with one descriptor attached (the output memory, with
 * `ready`). */
void wrk_chan_send_fd(const proto_buf *frames, int fd)
{
    wrk_chan_lock();
    wrk_chan_write_fds_locked(frames->data, frames->len, &fd, fd >= 0 ? 1 : 0);
    wrk_chan_unlock();
}

/* The common case of sending one or more ready-made frames. */
void wrk_chan_send(const proto_buf *frames)
{
    wrk_chan_lock();
    wrk_chan_write_locked(frames->data, frames->len);
    wrk_chan_unlock();
}

/* Keeps descriptors that came with the bytes just read (close-on-exec);
 * more than fit are closed. */
static void hold_fds(struct msghdr *mh)
{
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const unsigned char *p = CMSG_DATA(cm);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, p + i * sizeof fd, sizeof fd);
            if (nheld < MAX_HELD_FDS)
                held_fds[nheld++] = fd;
            else
                close(fd);
        }
    }
}

int wrk_chan_take_fds(int *fds, int n)
{
    int k = n < nheld ? n : nheld;
    memcpy(fds, held_fds, (size_t)k * sizeof *fds);
    memmove(held_fds, held_fds + k, (size_t)(nheld - k) * sizeof *held_fds);
    nheld -= k;
    return k;
}

/* Sleeps until the channel is readable (or hung up). In poll, not in
 * recvmsg: a reader asleep in recvmsg is also woken each time the
 * supervisor reads what this worker wrote (the socket's write-space wake),
 * a second switch per run for nothing; poll sleeps on POLLIN alone. */
static void wait_readable(void)
{
    struct pollfd p = {.fd = chan_fd, .events = POLLIN};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) {
        wrk_log("channel poll failed: %s; exiting", strerror(errno));
        wrk_chan_gone(1);
    }
}

/* Only the main thread reads, so no lock is needed here. recvmsg, so that
 * descriptors passed with a `fork` frame are kept (read() would drop them). */
void wrk_chan_recv(proto_buf *in, const uint8_t **body, size_t *body_len, size_t *consumed)
{
    for (;;) {
        int r = proto_frame_next(in->data, in->len, PROTO_MAX_FRAME, body, body_len, consumed);
        if (r == 1)
            return;
        if (r < 0) {
            wrk_log("the supervisor announced a frame larger than %u bytes", PROTO_MAX_FRAME);
            _exit(2);
        }
        /* Nothing of a frame here yet: the next one is most likely not
         * sent yet either, so sleep first rather than learn that from a
         * receive (a system call per run). */
        if (in->len == 0)
            wait_readable();
        proto_buf_reserve(in, 256 * 1024);
        struct iovec iov = {in->data + in->len, in->cap - in->len};
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(8 * sizeof(int))];
        } ctl;
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.buf,
                            .msg_controllen = sizeof ctl.buf};
        ssize_t n = recvmsg(chan_fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n > 0)
            hold_fds(&mh);
        if (n == 0)
            wrk_chan_gone(0);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                wait_readable();
                continue;
            }
            if (errno == EINTR)
                continue;
            wrk_log("channel read failed: %s; exiting", strerror(errno));
            wrk_chan_gone(1);
        }
        in->len += (size_t)n;
    }
}

int wrk_chan_fd(void)
{
    return chan_fd;
}
