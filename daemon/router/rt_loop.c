/* rt_loop: one turn asks every timer, the gate, every output, then the
 * readers pass after pass until a pass reads nothing, then every output
 * again and every descriptor; it sleeps in epoll_wait only when all of
 * that found nothing left to do. */
#include "rt_loop.h"

#include "mem.h"
#include "rt_base.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

enum { EV_SIGNAL = 1, EV_ZMQ, EV_FD };
#define MAX_HOOKS 160
#define MAX_FDS 4

typedef struct hook {
    union {
        rt_loop_read_fn read;
        rt_loop_timer_fn timer;
        rt_loop_flush_fn flush;
    } fn;
    void *data;
    bool gated;
} hook;
typedef struct hooks {
    hook h[MAX_HOOKS];
    size_t n;
} hooks;

static hooks readers, timers, outputs;
static struct {
    const rt_loop_fd_ops *ops;
    void *data;
} fds[MAX_FDS];
static size_t nfds;
static rt_loop_gate_fn gate_fn;
static void *gate_data;
static int epfd = -1, sigfd = -1;
static bool stopping;

static hook *add(hooks *hs)
{
    if (hs->n == MAX_HOOKS)
        fatal("rt_loop: more than %d hooks of one kind", MAX_HOOKS);
    return &hs->h[hs->n++];
}

void rt_loop_reader(rt_loop_read_fn fn, void *data, bool gated)
{
    *add(&readers) = (hook){.fn.read = fn, .data = data, .gated = gated};
}

void rt_loop_timer(rt_loop_timer_fn fn, void *data)
{
    *add(&timers) = (hook){.fn.timer = fn, .data = data};
}

void rt_loop_output(rt_loop_flush_fn fn, void *data)
{
    *add(&outputs) = (hook){.fn.flush = fn, .data = data};
}

void rt_loop_descriptor(const rt_loop_fd_ops *ops, void *data)
{
    if (nfds == MAX_FDS)
        fatal("rt_loop: more than %d descriptors", MAX_FDS);
    fds[nfds].ops = ops;
    fds[nfds++].data = data;
}

void rt_loop_gate(rt_loop_gate_fn fn, void *data)
{
    gate_fn = fn;
    gate_data = data;
}

static int zmq_fd(void *sock)
{
    int fd = -1;
    size_t len = sizeof fd;
    if (zmq_getsockopt(sock, ZMQ_FD, &fd, &len) < 0)
        fatal("ZMQ_FD: %s", zmq_strerror(errno));
    return fd;
}

void rt_loop_watch(void *sock)
{
    if (epfd < 0)
        return;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = EV_ZMQ};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, zmq_fd(sock), &ev) < 0 && errno != EEXIST)
        fatal("epoll_ctl add: %s", strerror(errno));
}

void rt_loop_unwatch(void *sock)
{
    if (epfd >= 0)
        (void)epoll_ctl(epfd, EPOLL_CTL_DEL, zmq_fd(sock), NULL);
}

bool rt_loop_readable(void *sock)
{
    int ev = 0;
    size_t len = sizeof ev;
    return sock && zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN);
}

void rt_loop_open(void)
{
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        fatal("epoll_create1: %s", strerror(errno));
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_SIGNAL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, sigfd, &ev);
    signal(SIGPIPE, SIG_IGN);
}

/* Asks every reader until a pass reads nothing; false when the passes ran
 * out first (the loop then does not sleep). */
static bool serve(bool open)
{
    for (int pass = 0; pass < 8; pass++) {
        bool any = false;
        for (size_t i = 0; i < readers.n; i++)
            if ((open || !readers.h[i].gated) && readers.h[i].fn.read(readers.h[i].data))
                any = true;
        if (!any)
            return true;
    }
    return false;
}

/* Every output is flushed (none skipped); true when all are empty. */
static bool flush_all(void)
{
    bool empty = true;
    for (size_t i = 0; i < outputs.n; i++)
        empty = outputs.h[i].fn.flush(outputs.h[i].data) & empty;
    return empty;
}

/* Each descriptor's current one, watched level-triggered for what it waits
 * for (it changes when its connection is made again). */
static void watch_fds(void)
{
    for (size_t i = 0; i < nfds; i++) {
        uint32_t want;
        int fd = fds[i].ops->fd(fds[i].data, &want);
        if (fd < 0)
            continue;
        struct epoll_event ev = {.events = want, .data.u64 = EV_FD};
        if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) < 0 && errno == ENOENT)
            (void)epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    }
}

/* True when a descriptor has work but nothing to wait on (it must be
 * asked again soon). */
static bool fds_waiting(void)
{
    for (size_t i = 0; i < nfds; i++)
        if (fds[i].ops->busy(fds[i].data) && fds[i].ops->fd(fds[i].data, &(uint32_t){0}) < 0)
            return true;
    return false;
}

static bool fds_busy(void)
{
    for (size_t i = 0; i < nfds; i++)
        if (fds[i].ops->busy(fds[i].data))
            return true;
    return false;
}

static void fds_io(void)
{
    for (size_t i = 0; i < nfds; i++)
        fds[i].ops->io(fds[i].data);
}

void rt_loop_run(int idle_ms)
{
    struct epoll_event evs[64];
    while (!stopping) {
        double now = rt_now();
        for (size_t i = 0; i < timers.n; i++)
            timers.h[i].fn.timer(timers.h[i].data, now);
        fds_io();
        bool open = !gate_fn || gate_fn(gate_data, now);
        bool flushed = flush_all();
        bool quiet = serve(open);
        flushed = flush_all() & flushed;
        fds_io();
        watch_fds();
        int timeout = idle_ms;
        if (!quiet)
            timeout = 0;
        else if (!flushed || fds_waiting() || !open)
            timeout = 2;
        int n = epoll_wait(epfd, evs, 64, timeout);
        if (n < 0 && errno != EINTR)
            fatal("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++)
            if (evs[i].data.u64 == EV_SIGNAL) {
                struct signalfd_siginfo si;
                while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si)
                    stopping = true;
            }
    }
    /* Up to a second for what is queued to clients and etcd. */
    double give_up = rt_now() + 1.0;
    while ((!flush_all() || fds_busy()) && rt_now() < give_up) {
        fds_io();
        struct timespec ms = {0, 2000000};
        nanosleep(&ms, NULL);
    }
    rt_log("stopped");
}
