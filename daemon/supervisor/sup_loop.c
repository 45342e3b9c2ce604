/* sup_loop: the supervisor's one event loop over the client socket, the
 * worker channels, a signalfd and the context timers. */
#include "sup_loop.h"

#include "sup_auth.h"
#include "sup_config.h"
#include "sup_cgroup.h"
#include "sup_chan.h"
#include "sup_ctx.h"
#include "sup_ctxpss.h"
#include "sup_hsmon.h"
#include "sup_life.h"
#include "sup_linger.h"
#include "sup_log.h"
#include "sup_peer.h"
#include "sup_persist.h"
#include "sup_pkgs.h"
#include "sup_pss.h"
#include "sup_reaper.h"
#include "sup_reap.h"
#include "sup_request.h"
#include "sup_route.h"
#include "sup_send.h"
#include "sup_snap.h"
#include "sup_sockperm.h"
#include "sup_spare.h"
#include "sup_stats.h"
#include "sup_trash.h"
#include "sup_wexit.h"
#include "sup_wproc.h"
#include "sup_zygote.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
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

/* A client message was read in this turn (read_client): the background
 * work that waits for a pause of the clients' requests waits again. */
static bool client_read;

/* Receives client messages (all the frames of each) and hands them on, up
 * to a budget. A message with more than one body frame is a client error,
 * answered as such. True when it stopped because none was left: that last
 * receive processed the socket's commands after every send the handling
 * made, which is a look (see serve_zmq). */
static bool read_client(int sock)
{
    void *router = routers[sock];
    for (int budget = 0; budget < 256; budget++) {
        zmq_msg_t route, body;
        zmq_msg_init(&route);
        if (zmq_msg_recv(&route, router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&route);
            return true;
        }
        client_read = true;
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
    return false;
}

static void read_signals(void)
{
    struct signalfd_siginfo si;
    while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT || si.ssi_signo == SIGHUP)
            stopping = true;
    }
    sup_reaper_check();
    /* Each exited child is looked at before it is reaped: a worker's
     * process group is killed while the zombie leader keeps its id. */
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid <= 0)
            break;
        sup_wexit_before_reap(si.si_pid);
        sup_pkgs_before_reap(si.si_pid);
        int status;
        if (waitpid(si.si_pid, &status, WNOHANG) != si.si_pid)
            break;
        sup_wexit_on_exit(si.si_pid, status);
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
    /* Requests already sent but not yet read get an answer, not silence
     * (bounded: a client that keeps sending is cut off after these). */
    sup_request_shutting_down();
    for (int pass = 0; pass < 16; pass++) {
        bool drained = true;
        for (int s = 0; s < NSOCKS; s++)
            if (routers[s])
                drained &= read_client(s);
        if (drained)
            break;
    }
    sup_life_shutdown();
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

/* ---- the loop on epoll ---------------------------------------------- */

/* What an epoll event is about: the fixed sources are tagged by kind; a
 * worker channel by its descriptor, looked up in chan_owner (so an event
 * for a channel closed earlier in the same turn finds nobody, or a
 * different descriptor, and is dropped). */
enum { EV_SIGNAL, EV_ROUTER0, EV_ROUTER1, EV_ZAP, EV_ZYGOTE, EV_MONITOR, EV_PSS, EV_NFIXED };
#define EV_CHAN_BASE ((uint64_t)1 << 32)

static int epfd = -1;
static sup_ctx **chan_owner; /* by descriptor */
static size_t chan_owner_cap;

/* Registers fd with epoll under tag (edge-triggered: ZeroMQ's ZMQ_FD is,
 * and a channel is read until drained). */
static void ep_add(int fd, uint64_t tag, uint32_t events)
{
    struct epoll_event ev = {.events = events | EPOLLET, .data.u64 = tag};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 && errno != EEXIST)
        fatal("epoll_ctl add %d: %s", fd, strerror(errno));
}

/* sup_wproc_chan_watch.add: a worker channel is watched once, for its life. */
static void chan_add(sup_ctx *c)
{
    size_t fd = (size_t)c->fd;
    if (fd >= chan_owner_cap) {
        size_t ncap = chan_owner_cap ? chan_owner_cap : 1024;
        while (ncap <= fd)
            ncap *= 2;
        chan_owner = mem_realloc(chan_owner, ncap * sizeof *chan_owner);
        memset(chan_owner + chan_owner_cap, 0, (ncap - chan_owner_cap) * sizeof *chan_owner);
        chan_owner_cap = ncap;
    }
    chan_owner[fd] = c;
    ep_add(c->fd, EV_CHAN_BASE + fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP);
}

/* sup_wproc_chan_watch.del: before the channel is closed (a copy of the
 * descriptor elsewhere would keep the registration alive). */
static void chan_del(sup_ctx *c)
{
    (void)epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    if ((size_t)c->fd < chan_owner_cap)
        chan_owner[c->fd] = NULL;
}

static const sup_wproc_chan_watch chan_watch = {chan_add, chan_del};

/* A ZeroMQ socket's ZMQ_FD, watched under tag; NULL sockets are not. */
static void ep_add_zmq(void *sock, uint64_t tag)
{
    if (!sock)
        return;
    int fd;
    size_t len = sizeof fd;
    if (zmq_getsockopt(sock, ZMQ_FD, &fd, &len) < 0)
        fatal("ZMQ_FD: %s", zmq_strerror(errno));
    ep_add(fd, tag, EPOLLIN);
}

/* Whether a ZeroMQ socket has a message to read now (a look: it processes
 * the socket's commands, so it costs system calls on an idle socket). */
static bool zmq_readable(void *sock)
{
    if (!sock)
        return false;
    int ev = 0;
    size_t len = sizeof ev;
    return zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN);
}

/* Creates the epoll set with everything fixed; worker channels come and
 * go through chan_watch. */
static void ep_open(void)
{
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        fatal("epoll_create1: %s", strerror(errno));
    ep_add(sigfd, EV_SIGNAL, EPOLLIN);
    ep_add(sup_pss_start(), EV_PSS, EPOLLIN);
    for (int s = 0; s < NSOCKS; s++)
        ep_add_zmq(routers[s], EV_ROUTER0 + (uint64_t)s);
    ep_add_zmq(sup_auth_zap_socket(), EV_ZAP);
    ep_add_zmq(sup_route_monitor(), EV_MONITOR);
    sup_wproc_set_chan_watch(&chan_watch);
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next)
        if (c->fd >= 0)
            chan_add(c);
}

/* The zygote's descriptor changes when it is restarted, maybe to the same
 * number: asked each turn (registered again only for a new zygote: a
 * system call per turn otherwise), MOD fails with ENOENT for a descriptor
 * not watched yet. The old one's registration went when it was closed
 * (never removed by number here: a worker channel may have that number
 * now). Level-triggered. */
static void watch_zygote(void)
{
    static unsigned watched_start; /* a zygote's socket is one per start */
    int zfd = sup_zygote_fd();
    unsigned start = sup_zygote_starts();
    if (zfd < 0 || start == watched_start)
        return;
    watched_start = start;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_ZYGOTE};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, zfd, &ev) < 0 && errno == ENOENT &&
        epoll_ctl(epfd, EPOLL_CTL_ADD, zfd, &ev) < 0)
        fatal("epoll_ctl add zygote: %s", strerror(errno));
}

/* The ZeroMQ sockets serve_zmq looks at: the routers (indexed as routers[]),
 * the route monitor and the ZAP handler's. */
enum { Z_MON = NSOCKS, Z_ZAP, NZ };
/* A socket to look at: its ZMQ_FD fired, or it was used (a send or a
 * receive processes its commands, which can take the signal of a message
 * that came meanwhile), since a look last found it empty. Every socket is
 * due at the start and once a second (sup_loop_run: the safety net). */
static bool zmq_due[NZ] = {true, true, true, true};

/* The ZeroMQ socket of each fixed epoll tag, -1 for the others. */
static const int zmq_of_tag[EV_NFIXED] = {
    [EV_SIGNAL] = -1, [EV_ROUTER0] = 0,     [EV_ROUTER1] = 1, [EV_ZAP] = Z_ZAP,
    [EV_ZYGOTE] = -1, [EV_MONITOR] = Z_MON, [EV_PSS] = -1,
};

/* Marks every socket due: the safety net under ZMQ_FD's edges. */
static void zmq_all_due(void)
{
    for (int i = 0; i < NZ; i++)
        zmq_due[i] = true;
}

/* Serves the monitor or ZAP socket (sock, its handler) while it holds
 * messages, at most 64; True if it read any. The look that finds it empty
 * comes after every use, so it is then not due. */
static bool serve_side(int z, void *sock, void (*handle)(void))
{
    if (!zmq_due[z] || !sock)
        return false;
    int i = 0;
    while (i < 64 && zmq_readable(sock)) {
        handle();
        i++;
    }
    if (i < 64)
        zmq_due[z] = false;
    return i > 0;
}

/* Serves the ZeroMQ sockets that are due, pass after pass, until a pass
 * reads nothing: handling a message may send on another socket. Only due
 * sockets are looked at: a look at an idle socket costs two system calls
 * (libzmq polls its mailbox and checks getpid), and three sockets looked at
 * twice a turn were most of a request's system calls. False when the passes
 * ran out with messages left: the loop does not sleep. */
static bool serve_zmq(void)
{
    for (int pass = 0; pass < 8; pass++) {
        bool any = false;
        for (int s = 0; s < NSOCKS; s++) {
            if (sup_send_take_used(s))
                zmq_due[s] = true;
            if (!zmq_due[s] || !routers[s])
                continue;
            /* A receive that finds nothing is itself the look, after the
             * sends of the handling of what it read. */
            bool drained = read_client(s);
            (void)sup_send_take_used(s);
            zmq_due[s] = !drained;
            any |= !drained; /* the budget ran out: come back */
        }
        any |= serve_side(Z_MON, sup_route_monitor(), sup_route_on_monitor);
        any |= serve_side(Z_ZAP, sup_auth_zap_socket(), sup_auth_handle);
        /* Sent on by a later handler: look again. */
        for (int s = 0; s < NSOCKS; s++) {
            if (sup_send_take_used(s)) {
                zmq_due[s] = true;
                any = true;
            }
        }
        if (!any)
            return true;
    }
    return false;
}

/* The context table as last saved (sup_ctx_table_gen). */
static uint64_t saved_gen = ~(uint64_t)0;

/* Saves the context table if it changed: at the end of each turn (one
 * journal write for a burst of changes), and before any message leaves
 * (sup_send_before), so that no reply tells of a change a killed daemon
 * would forget. */
static void save_table(void)
{
    if (sup_ctx_table_gen() != saved_gen) {
        saved_gen = sup_ctx_table_gen();
        sup_persist_flush();
    }
}

/* The periodic work, in order: each subsystem's own tick, which returns
 * when it wants to be called again (monotonic, 0 = nothing timed). No
 * subsystem ticks another: a new one is a line here. */
static double (*const cron_table[])(double now) = {
    sup_spare_tick,  /* bind frames of taken spares (before the graveyard is freed) */
    sup_ctx_tick,    /* contexts deleted since the last turn freed */
    sup_reap_tick,   /* --idle-ttl, leases, run deadlines, CPU budgets, kill times */
    sup_linger_tick, /* kills workers whose atexit took too long */
    sup_zygote_tick, /* restarts a dead zygote */
    sup_trash_tick,  /* empties deleted contexts' directories */
    sup_cgroup_tick, /* removes emptied cgroups */
    sup_pkgs_tick,   /* kills pip runs past their time */
    sup_snap_tick,   /* interval autosnapshots */
    sup_hsmon_tick,  /* failed handshakes whose peer never came said */
};

/* Calls every periodic tick; returns the earliest time one asked for, 0 =
 * none. */
static double cron(double now)
{
    double next = 0;
    for (size_t i = 0; i < sizeof cron_table / sizeof cron_table[0]; i++) {
        double t = cron_table[i](now);
        if (t > 0 && (next == 0 || t < next))
            next = t;
    }
    return next;
}

/* Background work (spares forked, stale PSS figures read): each job says
 * whether it is due, does it (returning when to come back), and when to
 * come back while it is not due. Making spares (a zygote fork, then a
 * warm-up run) and reading PSS figures take a CPU from the request in hand
 * when they start beside it, so such work starts after a turn's client
 * messages are served and only BG_QUIET after the last one; under requests
 * without such a pause it waits at most BG_DEFER_MAX, then goes ahead
 * (spares and figures are never starved). */
typedef struct bg_job {
    bool (*due)(double now);
    double (*run)(double now);
    double (*wake)(double now); /* NULL: nothing timed while not due */
} bg_job;
static const bg_job bg_table[] = {
    {sup_spare_due, sup_spare_fill, NULL},
    {sup_ctxpss_due, sup_ctxpss_tick, sup_ctxpss_wake},
};
#define BG_QUIET 0.02
#define BG_DEFER_MAX 1.0
static double bg_held_since; /* monotonic: work due but held since; 0 none */

/* Whether work that is due may start now; else *again is when to look. */
static bool bg_may_start(double now, double client_at, double *again)
{
    if (now - client_at >= BG_QUIET) {
        bg_held_since = 0;
        return true;
    }
    if (bg_held_since == 0)
        bg_held_since = now;
    double until = bg_held_since + BG_DEFER_MAX;
    if (now >= until) {
        bg_held_since = 0;
        return true;
    }
    double quiet = client_at + BG_QUIET;
    *again = quiet < until ? quiet : until;
    return false;
}

/* Runs the background jobs that are due once the clients pause (client_at:
 * monotonic time of the last client message); returns when to come back,
 * 0 = nothing waits. */
static double background(double now, double client_at)
{
    size_t n = sizeof bg_table / sizeof bg_table[0];
    bool any = false;
    for (size_t i = 0; i < n && !any; i++)
        any = bg_table[i].due(now);
    double next = 0, t;
    if (!any) {
        bg_held_since = 0;
        for (size_t i = 0; i < n; i++)
            if (bg_table[i].wake && (t = bg_table[i].wake(now)) > 0 && (next == 0 || t < next))
                next = t;
        return next;
    }
    if (!bg_may_start(now, client_at, &next))
        return next;
    for (size_t i = 0; i < n; i++) {
        /* asked again: what a job before it did may have made it due */
        const bg_job *j = &bg_table[i];
        t = j->due(now) ? j->run(now) : j->wake ? j->wake(now) : 0;
        if (t > 0 && (next == 0 || t < next))
            next = t;
    }
    return next;
}

/* Runs until SIGTERM/SIGINT/SIGHUP. Each turn costs the same however many
 * contexts are alive: epoll reports only what fired, the timers look only
 * at contexts with something timed, the table is saved only when it
 * changed. Every send of a turn comes before its last look at the ZeroMQ
 * sockets (serve_zmq), so no message waits behind a consumed edge. */
void sup_loop_run(void)
{
    enum { MAX_EVENTS = 256, WAKE_MAX_MS = 1000 };
    struct epoll_event evs[MAX_EVENTS];
    double all_due_at = 0;
    double client_at = 0; /* monotonic: the last turn that read a client message */
    ep_open();
    sup_send_before(save_table);
    while (!stopping) {
        /* Timers first: they can change what is read (a flushed backlog
         * resumes reading its worker). */
        double now = sup_now();
        if (now - all_due_at >= WAKE_MAX_MS / 1000.0) {
            zmq_all_due(); /* the safety net under ZMQ_FD's edges */
            all_due_at = now;
        }
        double next = cron(now);
        (void)sup_timer_take(); /* the tick's own timers are in next */
        if (!sup_send_flush_outbox() && (next == 0 || now + 0.002 < next))
            next = now + 0.002;
        watch_zygote();
        /* Channels that signalled (or were held back) are read; then the
         * clients' messages, last. */
        if (sup_chan_read_ready() && (next == 0 || now + 0.001 < next))
            next = now + 0.001;
        bool quiet = serve_zmq();
        if (client_read) {
            client_at = now;
            client_read = false;
        }
        /* After the clients' messages: a turn that brings one starts no
         * background work (a spare, a PSS read) before serving it. */
        double bg_next = background(now, client_at);
        if (bg_next > 0 && (next == 0 || bg_next < next))
            next = bg_next;
        long timeout = -1;
        /* A timer set since the tick (a lease renewed, a zygote to
         * restart) is not in next: one more turn, then sleep; one with its
         * time known (a run's deadline) is slept to. */
        double moved = sup_timer_take();
        if (moved > 0 && (next == 0 || moved < next))
            next = moved;
        if (!quiet || moved == 0) {
            timeout = 0;
        } else if (next > 0) {
            double ms = (next - now) * 1000.0;
            timeout = ms <= 0 ? 0 : (long)ms + ((double)(long)ms < ms ? 1 : 0); /* rounded up */
        }
        sup_stats_flush();
        save_table();
        /* At most a second's sleep, also with nothing timed: a safety net
         * under the edge-triggered ZMQ_FD, whose signal a send on another
         * socket can take. A ZAP request (a tcp client's handshake) was
         * seen waiting for good under ASan; every second serve_zmq looks at
         * every socket, so nothing waits more than that. */
        if (timeout < 0 || timeout > WAKE_MAX_MS)
            timeout = WAKE_MAX_MS;
        int n = epoll_wait(epfd, evs, MAX_EVENTS, (int)timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fatal("epoll_wait: %s", strerror(errno));
        }
        bool zygote = false;
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == EV_SIGNAL) {
                read_signals();
            } else if (tag == EV_ZYGOTE) {
                zygote = true;
            } else if (tag == EV_PSS) {
                sup_ctxpss_collect();
            } else if (tag >= EV_CHAN_BASE) {
                size_t fd = (size_t)(tag - EV_CHAN_BASE);
                sup_ctx *c = fd < chan_owner_cap ? chan_owner[fd] : NULL;
                /* Deleted contexts stay allocated until the next tick. */
                if (!c || c->deleted || c->fd != (int)fd)
                    continue;
                uint32_t e = evs[i].events;
                sup_chan_event(c, e & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP),
                               e & (EPOLLERR | EPOLLHUP | EPOLLRDHUP), e & EPOLLOUT);
            } else if (tag < EV_NFIXED && zmq_of_tag[tag] >= 0) {
                zmq_due[zmq_of_tag[tag]] = true; /* served by serve_zmq */
            }
        }
        if (zygote)
            sup_zygote_on_readable();
    }
    sup_stats_event("shutdown");
    shut_down();
    sup_stats_flush();
}
