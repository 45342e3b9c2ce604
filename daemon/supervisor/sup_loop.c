/* sup_loop: the supervisor's one event loop over the client socket, the
 * worker channels, a signalfd and the context timers. */
#include "sup_loop.h"

#include "sup_auth.h"
#include "sup_config.h"
#include "sup_ctx.h"
#include "sup_log.h"
#include "sup_peer.h"
#include "sup_persist.h"
#include "sup_pkgs.h"
#include "sup_request.h"
#include "sup_route.h"
#include "sup_send.h"
#include "sup_sockperm.h"
#include "sup_stats.h"
#include "sup_zygote.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* Listening sockets: 0 plain (ipc, inproc, tcp with --insecure-tcp), 1
 * CurveZMQ (tcp); NULL when unused. */
#define NSOCKS 2
static void *routers[NSOCKS];
static void *zctx;
static int sigfd = -1;
static bool stopping;

/* Tells a client that came back on a new connection (same key, same
 * routing id) that messages for its earlier requests were dropped: one
 * `gap {re: nil, dropped}` before the reply to its new request. */
static void send_gap(int sock, const uint8_t *route, size_t len, uint64_t dropped)
{
    sup_peer peer = {.sock = (uint8_t)sock, .route_len = len};
    if (len > sizeof peer.route)
        return;
    memcpy(peer.route, route, len);
    peer.conn = sup_route_current(route, len);
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "gap", &peer, 1);
    proto_put_str(&b, "dropped");
    proto_put_uint(&b, dropped);
    sup_deliver(&peer, &b);
    proto_buf_free(&b);
}

/* Receives one client message (all its frames) and hands it on. A message
 * with more than one body frame is a client error, answered as such. */
static void read_client(int sock)
{
    void *router = routers[sock];
    for (int budget = 0; budget < 256; budget++) {
        zmq_msg_t route, body;
        zmq_msg_init(&route);
        if (zmq_msg_recv(&route, router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&route);
            return;
        }
        zmq_msg_init(&body);
        bool have_body = zmq_msg_more(&route) && zmq_msg_recv(&body, router, 0) >= 0;
        bool multipart = have_body && zmq_msg_more(&body);
        if (multipart) { /* drain the extra frames */
            zmq_msg_t extra;
            zmq_msg_init(&extra);
            int more = 1;
            while (more && zmq_msg_recv(&extra, router, 0) >= 0)
                more = zmq_msg_more(&extra);
            zmq_msg_close(&extra);
        }
        bool gap = false;
        uint64_t lost = 0;
        if (have_body && sock == 1)
            sup_route_note(zmq_msg_data(&route), zmq_msg_size(&route), &body, &gap, &lost);
        if (gap)
            send_gap(sock, zmq_msg_data(&route), zmq_msg_size(&route), lost);
        if (have_body)
            sup_request_handle(sock, zmq_msg_data(&route), zmq_msg_size(&route),
                               zmq_msg_data(&body), zmq_msg_size(&body), multipart);
        zmq_msg_close(&body);
        zmq_msg_close(&route);
    }
}

static void read_signals(void)
{
    struct signalfd_siginfo si;
    while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT || si.ssi_signo == SIGHUP)
            stopping = true;
    }
    /* Each exited child is looked at before it is reaped: a worker's
     * process group is killed while the zombie leader keeps its id. */
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid <= 0)
            break;
        sup_ctx_before_reap(si.si_pid);
        sup_pkgs_before_reap(si.si_pid);
        int status;
        if (waitpid(si.si_pid, &status, WNOHANG) != si.si_pid)
            break;
        sup_ctx_on_exit(si.si_pid, status);
    }
}

static void *new_router(void)
{
    void *r = zmq_socket(zctx, ZMQ_ROUTER);
    int one = 1, zero = 0;
    int64_t maxmsg = (int64_t)sup_cfg.max_request_bytes * 4;
    zmq_setsockopt(r, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(r, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    int hwm = SUP_ZMQ_SNDHWM;
    zmq_setsockopt(r, ZMQ_SNDHWM, &hwm, sizeof hwm);
    return r;
}

/* libzmq replaces an existing ipc socket file when it binds, which would
 * silently steal a running daemon's endpoint. Refuse if something answers
 * there; a stale file (nobody listening) is fine: libzmq replaces it. */
static int ipc_in_use(const char *endpoint)
{
    const char *path = endpoint + strlen("ipc://");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (path[0] == '@' || strlen(path) >= sizeof sa.sun_path)
        return 0;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    close(fd);
    return rc == 0;
}

/* Binds every endpoint; the caller has made the default runtime dir. tcp
 * endpoints get CurveZMQ unless --insecure-tcp. */
int sup_loop_open(const char **endpoints, size_t n)
{
    zctx = zmq_ctx_new();
    for (size_t i = 0; i < n; i++) {
        const char *ep = endpoints[i];
        bool tcp = strncmp(ep, "tcp://", 6) == 0;
        int sock = tcp && !sup_cfg.insecure_tcp ? 1 : 0;
        if (strncmp(ep, "ipc://", 6) == 0 && ipc_in_use(ep)) {
            fprintf(stderr, "ctxd: another daemon is already listening on %s\n", ep);
            return -1;
        }
        if (tcp && sup_cfg.insecure_tcp)
            fprintf(stderr,
                    "ctxd: WARNING: %s has no authentication or encryption: anyone "
                    "who reaches it can run code as this user\n",
                    ep);
        if (!routers[sock]) {
            routers[sock] = new_router();
            sup_send_router(sock, routers[sock]);
            if (sock == 1 &&
                (sup_auth_setup(zctx, routers[1]) < 0 || sup_route_open(zctx, routers[1]) < 0))
                return -1;
        }
        if (zmq_bind(routers[sock], ep) < 0) {
            fprintf(stderr, "ctxd: cannot listen on %s: %s\n", ep, zmq_strerror(errno));
            return -1;
        }
        /* Closed by mode too (or open to --socket-group). */
        if (strncmp(ep, "ipc://", 6) == 0 && ep[6] != '@' && sup_sockperm_apply(ep + 6) < 0)
            return -1;
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigfd < 0)
        fatal("signalfd: %s", strerror(errno));
    signal(SIGPIPE, SIG_IGN);
    return sup_stats_open();
}

/* Ends every run with `shutdown`, gives clients up to a second to receive
 * what is queued for them, and closes (which removes ipc socket files). */
static void shut_down(void)
{
    sup_ctx_shutdown_all();
    double give_up = sup_now() + 1.0;
    while (!sup_send_flush_outbox() && sup_now() < give_up) {
        struct timespec ms = {0, 2000000};
        nanosleep(&ms, NULL);
    }
    int linger = 1000;
    for (int s = 0; s < NSOCKS; s++) {
        if (!routers[s])
            continue;
        zmq_setsockopt(routers[s], ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(routers[s]);
    }
    if (sup_auth_zap_socket())
        zmq_close(sup_auth_zap_socket());
    if (sup_route_monitor())
        zmq_close(sup_route_monitor());
    zmq_ctx_term(zctx);
    /* libzmq does not always remove the socket files it made. */
    for (size_t i = 0; i < sup_cfg.nendpoints; i++) {
        const char *ep = sup_cfg.endpoints[i];
        struct stat st;
        if (strncmp(ep, "ipc://", 6) == 0 && ep[6] != '@' && lstat(ep + 6, &st) == 0 &&
            S_ISSOCK(st.st_mode))
            unlink(ep + 6);
    }
}

/* Runs until SIGTERM/SIGINT/SIGHUP. */
void sup_loop_run(void)
{
    zmq_pollitem_t *items = NULL;
    sup_ctx **owners = NULL;
    size_t cap = 0;
    while (!stopping) {
        /* Timers first: they can change what is polled (a flushed backlog
         * resumes reading its worker). */
        double now = sup_now();
        double next = sup_ctx_tick(now);
        if (!sup_send_flush_outbox() && (next == 0 || now + 0.002 < next))
            next = now + 0.002;
        size_t n = sup_ctx_count() + 3 + NSOCKS + 1;
        if (n > cap) {
            cap = n * 2;
            items = mem_realloc(items, cap * sizeof *items);
            owners = mem_realloc(owners, cap * sizeof *owners);
        }
        /* Fixed items first: the signalfd, the listening sockets (NULL ones
         * poll nothing), the ZAP handler; then the worker channels. */
        size_t k = 0;
        items[k++] = (zmq_pollitem_t){.fd = sigfd, .events = ZMQ_POLLIN};
        for (int s = 0; s < NSOCKS; s++)
            items[k++] = (zmq_pollitem_t){
                .socket = routers[s], .fd = -1, .events = routers[s] ? ZMQ_POLLIN : 0};
        void *zap = sup_auth_zap_socket();
        items[k++] = (zmq_pollitem_t){.socket = zap, .fd = -1, .events = zap ? ZMQ_POLLIN : 0};
        /* The zygote's answers and hello (its spawns never wait). */
        int zfd = sup_zygote_fd();
        const size_t zygote_item = k;
        items[k++] = (zmq_pollitem_t){.fd = zfd, .events = zfd >= 0 ? ZMQ_POLLIN : 0};
        void *mon = sup_route_monitor();
        items[k++] = (zmq_pollitem_t){.socket = mon, .fd = -1, .events = mon ? ZMQ_POLLIN : 0};
        const size_t first_ctx = k;
        for (sup_ctx *c = sup_ctx_first(); c; c = c->next) {
            /* a worker the zygote is still making is not read before its
             * pid is known */
            if (c->fd < 0 || c->spawning)
                continue;
            short ev = 0;
            if (!c->chan_eof && !c->broken && !sup_ctx_held_back(c))
                ev |= ZMQ_POLLIN;
            if (c->out.len)
                ev |= ZMQ_POLLOUT;
            if (!ev)
                continue;
            owners[k] = c;
            items[k++] = (zmq_pollitem_t){.fd = c->fd, .events = ev};
        }
        long timeout = -1;
        if (next > 0) {
            double ms = (next - now) * 1000.0;
            timeout = ms <= 0 ? 0 : (long)ms + ((double)(long)ms < ms ? 1 : 0); /* rounded up */
        }
        sup_stats_flush();
        sup_persist_flush();
        if (zmq_poll(items, (int)k, timeout) < 0) {
            if (errno == EINTR)
                continue;
            fatal("zmq_poll: %s", zmq_strerror(errno));
        }
        if (items[0].revents)
            read_signals();
        for (size_t i = first_ctx; i < k; i++) {
            sup_ctx *c = owners[i];
            /* Deleted contexts stay allocated until the next tick, so the
             * pointer is valid; a replaced worker has a different fd. */
            if (c->deleted || c->fd != items[i].fd)
                continue;
            if (items[i].revents & ZMQ_POLLOUT)
                sup_ctx_on_writable(c);
            if (items[i].revents & (ZMQ_POLLIN | ZMQ_POLLERR))
                sup_ctx_on_readable(c);
        }
        for (int s = 0; s < NSOCKS; s++)
            if (items[1 + s].revents & ZMQ_POLLIN)
                read_client(s);
        if (items[2 + NSOCKS].revents & ZMQ_POLLIN)
            sup_route_on_monitor();
        if (items[1 + NSOCKS].revents & ZMQ_POLLIN)
            sup_auth_handle();
        if (items[zygote_item].revents & (ZMQ_POLLIN | ZMQ_POLLERR))
            sup_zygote_on_readable();
    }
    free(items);
    free(owners);
    sup_stats_event("shutdown");
    shut_down();
    sup_stats_flush();
}
