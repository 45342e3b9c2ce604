/* rt_loop: the router's one event loop (epoll), in the supervisor's style:
 * every ZeroMQ socket's ZMQ_FD watched edge-triggered, and ZMQ_EVENTS asked
 * of every socket each turn after the turn's sends, pass after pass until a
 * pass reads nothing; a signalfd; the etcd connection; the liveness timer.
 * Clients are not read until the catalog is loaded and each host has
 * answered once or had --liveness-max to do so. */
#include "rt_link.h"

#include "mem.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

enum { EV_SIGNAL = 1, EV_ZMQ, EV_ETCD };

static void *zctx;
static void *routers[2];
static int epfd = -1, sigfd = -1;
static bool stopping;

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

static void *new_router(void)
{
    void *r = zmq_socket(zctx, ZMQ_ROUTER);
    int one = 1, zero = 0, hwm = RT_HWM;
    int64_t maxmsg = (int64_t)rt_cfg.max_request_bytes * 4;
    zmq_setsockopt(r, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(r, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(r, ZMQ_SNDHWM, &hwm, sizeof hwm);
    return r;
}

/* Binds the client endpoints (tcp:// with CurveZMQ, ipc:// plain), opens
 * the hosts' control sockets and the signalfd. */
int rt_loop_open(void)
{
    zctx = zmq_ctx_new();
    epfd = epoll_create1(EPOLL_CLOEXEC);
    for (size_t i = 0; i < rt_cfg.nlisten; i++) {
        int s = strncmp(rt_cfg.listen[i], "tcp://", 6) == 0 ? 1 : 0;
        if (!routers[s]) {
            routers[s] = new_router();
            if (s == 1 && rt_auth_setup(zctx, routers[1]) < 0)
                return -1;
        }
        if (zmq_bind(routers[s], rt_cfg.listen[i]) < 0) {
            fprintf(stderr, "ctxd-router: cannot listen on %s: %s\n", rt_cfg.listen[i],
                    zmq_strerror(errno));
            return -1;
        }
    }
    if (!routers[1] && rt_auth_setup(zctx, NULL) < 0)
        return -1;
    rt_out_sockets(routers[0], routers[1]);
    for (int s = 0; s < 2; s++)
        if (routers[s])
            rt_loop_watch(routers[s]);
    if (rt_auth_zap())
        rt_loop_watch(rt_auth_zap());
    rt_link_init(zctx);
    rt_host_open(zctx);
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
    return 0;
}

static bool readable(void *sock)
{
    int ev = 0;
    size_t len = sizeof ev;
    return sock && zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN);
}

/* One client message (a multi-frame one is refused as ctxd refuses it). */
static void read_client(int s)
{
    for (int budget = 0; budget < 256; budget++) {
        zmq_msg_t route, body;
        zmq_msg_init(&route);
        if (zmq_msg_recv(&route, routers[s], ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&route);
            return;
        }
        zmq_msg_init(&body);
        bool have = zmq_msg_more(&route) && zmq_msg_recv(&body, routers[s], 0) >= 0;
        bool multi = have && zmq_msg_more(&body);
        if (multi) {
            zmq_msg_t extra;
            zmq_msg_init(&extra);
            int more = 1;
            while (more && zmq_msg_recv(&extra, routers[s], 0) >= 0)
                more = zmq_msg_more(&extra);
            zmq_msg_close(&extra);
        }
        const char *key = have ? zmq_msg_gets(&body, "User-Id") : NULL;
        if (have && multi) {
            proto_buf b;
            proto_buf_init(&b);
            rt_msg_err(&b, NULL, 0, "bad_frame", "a message must be exactly one frame");
            zmq_send(routers[s], zmq_msg_data(&route), zmq_msg_size(&route),
                     ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(routers[s], b.data, b.len, ZMQ_DONTWAIT);
            proto_buf_free(&b);
        } else if (have) {
            rt_req_handle(s, zmq_msg_data(&route), zmq_msg_size(&route), key && s == 1 ? key : "",
                          zmq_msg_data(&body), zmq_msg_size(&body));
        }
        zmq_msg_close(&body);
        zmq_msg_close(&route);
    }
}

/* Serves every socket with messages until a pass finds none; false when
 * the passes ran out first (the loop then does not sleep). */
static bool serve(bool clients)
{
    for (int pass = 0; pass < 8; pass++) {
        bool any = false;
        for (size_t i = 0; i < rt_nhosts; i++)
            if (readable(rt_hosts[i].ctl)) {
                any = true;
                rt_host_read(&rt_hosts[i]);
            }
        for (size_t i = 0; i < rt_nhosts; i++)
            if (readable(rt_hosts[i].mon)) {
                any = true;
                rt_host_read_monitor(&rt_hosts[i]);
            }
        if (rt_link_serve())
            any = true;
        for (int i = 0; i < 64 && readable(rt_auth_zap()); i++) {
            any = true;
            rt_auth_handle();
        }
        for (int s = 0; clients && s < 2; s++)
            if (readable(routers[s])) {
                any = true;
                read_client(s);
            }
        if (!any)
            return true;
    }
    return false;
}

/* The etcd connection's descriptor, watched level-triggered for what it
 * waits for (it changes when the connection is made again). */
static void watch_etcd(void)
{
    uint32_t want;
    int fd = rt_etcd_fd(&want);
    if (fd < 0)
        return;
    struct epoll_event ev = {.events = want, .data.u64 = EV_ETCD};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) < 0 && errno == ENOENT)
        (void)epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

void rt_loop_run(void)
{
    bool loaded = false, gate = false;
    double start = rt_now();
    bool reconciled = false;
    rt_cat_load(&loaded);
    struct epoll_event evs[64];
    while (!stopping) {
        double now = rt_now();
        rt_host_tick(now);
        rt_req_tick(now);
        rt_etcd_io();
        if (loaded && !reconciled) {
            reconciled = true;
            rt_host_catalog_loaded();
        }
        if (!gate && loaded) {
            bool all = true;
            for (size_t i = 0; i < rt_nhosts; i++)
                all = all && rt_hosts[i].state != RT_HOST_UNKNOWN;
            gate = all || now - start > rt_cfg.liveness_max + 0.5;
            if (gate)
                rt_log("serving clients (%zu contexts in the catalog)",
                       rt_cat_count(RT_CTX_LIVE) + rt_cat_count(RT_CTX_LOST));
        }
        bool flushed = rt_req_flush() & rt_link_flush();
        bool quiet = serve(gate);
        flushed = rt_req_flush() & rt_link_flush() & flushed;
        rt_etcd_io();
        watch_etcd();
        int timeout = (int)(rt_cfg.liveness * 1000 / 4) + 1;
        if (!quiet)
            timeout = 0;
        else if (!flushed || (rt_etcd_busy() && rt_etcd_fd(&(uint32_t){0}) < 0) || !gate)
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
    while ((!(rt_req_flush() & rt_link_flush()) || rt_etcd_busy()) && rt_now() < give_up) {
        rt_etcd_io();
        struct timespec ms = {0, 2000000};
        nanosleep(&ms, NULL);
    }
    rt_log("stopped");
}
