/* wrk_chan: framed, mutex-serialised I/O on the supervisor channel. */
#include "wrk_chan.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"
#include "wrk_log.h"

static int chan_fd = -1;
static pthread_mutex_t chan_mu = PTHREAD_MUTEX_INITIALIZER;

/* A forked child (os.fork, multiprocessing) must never write into the
 * parent's channel: drop it, and reset the lock another thread may have held
 * at the moment of the fork. */
static void chan_after_fork_child(void)
{
    pthread_mutex_init(&chan_mu, NULL);
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
    if (pthread_atfork(NULL, NULL, chan_after_fork_child) != 0)
        fatal("pthread_atfork failed");
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

/* Writes everything, retrying after signals (SIGINT is unblocked during a
 * run); MSG_NOSIGNAL so a vanished supervisor shows up as EPIPE. */
void wrk_chan_write_locked(const void *p, size_t n)
{
    const uint8_t *q = p;
    if (chan_fd < 0)
        return;
    while (n > 0) {
        ssize_t w = send(chan_fd, q, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            wrk_log("channel write failed: %s; exiting", strerror(errno));
            _exit(1);
        }
        q += w;
        n -= (size_t)w;
    }
}

/* The common case of sending one or more ready-made frames. */
void wrk_chan_send(const proto_buf *frames)
{
    wrk_chan_lock();
    wrk_chan_write_locked(frames->data, frames->len);
    wrk_chan_unlock();
}

/* Only the main thread reads, so no lock is needed here. */
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
        proto_buf_reserve(in, 256 * 1024);
        ssize_t n = read(chan_fd, in->data + in->len, in->cap - in->len);
        if (n == 0)
            _exit(0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            wrk_log("channel read failed: %s; exiting", strerror(errno));
            _exit(1);
        }
        in->len += (size_t)n;
    }
}
