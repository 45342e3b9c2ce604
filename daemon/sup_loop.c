/* sup_loop: the supervisor's one event loop over the client socket, the
 * worker channels, a signalfd and the context timers. */
#include "sup.h"

#include "mem.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static void *router;
static int sigfd = -1;
static bool stopping;

double sup_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double sup_unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sup_log(const char *fmt, ...)
{
    if (!sup_cfg.verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("ctxd: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int sup_send(const sup_peer *peer, const proto_buf *body)
{
    if (zmq_send(router, peer->route, peer->route_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        /* EHOSTUNREACH: the client is gone; its events are dropped. */
        return errno == EAGAIN ? -1 : 0;
    }
    /* The routing frame went out, so the body cannot fail on HWM. */
    if (zmq_send(router, body->data, body->len, ZMQ_DONTWAIT) < 0)
        sup_log("send to client failed: %s", zmq_strerror(errno));
    return 0;
}

typedef struct sup_outmsg {
    struct sup_outmsg *next;
    sup_peer peer;
    proto_buf body;
} sup_outmsg;

/* Messages for clients whose queue was full, not tied to a live context. */
static sup_outq outbox;
#define OUTBOX_MAX 100000

void sup_outq_push(sup_outq *q, const sup_peer *peer, const proto_buf *body)
{
    sup_outmsg *m = mem_calloc(1, sizeof *m);
    m->peer = *peer;
    proto_buf_append(&m->body, body->data, body->len);
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    q->n++;
}

static void outq_pop(sup_outq *q)
{
    sup_outmsg *m = q->head;
    q->head = m->next;
    if (!q->head)
        q->tail = NULL;
    q->n--;
    proto_buf_free(&m->body);
    free(m);
}

bool sup_outq_flush(sup_outq *q)
{
    while (q->head) {
        if (sup_send(&q->head->peer, &q->head->body) < 0)
            return false;
        outq_pop(q);
    }
    return true;
}

void sup_outq_adopt(sup_outq *q)
{
    if (!q->head)
        return;
    if (outbox.tail)
        outbox.tail->next = q->head;
    else
        outbox.head = q->head;
    outbox.tail = q->tail;
    outbox.n += q->n;
    q->head = q->tail = NULL;
    q->n = 0;
    while (outbox.n > OUTBOX_MAX) { /* a client that never reads: bounded */
        sup_log("outbox full: dropping a message");
        outq_pop(&outbox);
    }
}

void sup_deliver(const sup_peer *peer, const proto_buf *body)
{
    if (!outbox.head && sup_send(peer, body) == 0)
        return;
    sup_outq tmp = {0};
    sup_outq_push(&tmp, peer, body);
    sup_outq_adopt(&tmp);
}

/* Receives one client message (all its frames) and hands it on. A message
 * with more than one body frame is a client error, answered as such. */
static void read_client(void)
{
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
        if (have_body)
            sup_request_handle(zmq_msg_data(&route), zmq_msg_size(&route), zmq_msg_data(&body),
                               zmq_msg_size(&body), multipart);
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
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        sup_ctx_on_exit(pid, status);
}

/* Binds every endpoint; the caller has made the default runtime dir. */
int sup_loop_open(const char **endpoints, size_t n)
{
    void *zctx = zmq_ctx_new();
    router = zmq_socket(zctx, ZMQ_ROUTER);
    int one = 1, zero = 0;
    int64_t maxmsg = (int64_t)PROTO_MAX_REQUEST * 4;
    zmq_setsockopt(router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    for (size_t i = 0; i < n; i++) {
        if (zmq_bind(router, endpoints[i]) < 0) {
            fprintf(stderr, "ctxd: cannot listen on %s: %s\n", endpoints[i], zmq_strerror(errno));
            return -1;
        }
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
    return 0;
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
        if (!sup_outq_flush(&outbox) && (next == 0 || now + 0.002 < next))
            next = now + 0.002;
        size_t n = sup_ctx_count() + 2;
        if (n > cap) {
            cap = n * 2;
            items = mem_realloc(items, cap * sizeof *items);
            owners = mem_realloc(owners, cap * sizeof *owners);
        }
        size_t k = 0;
        items[k++] = (zmq_pollitem_t){.socket = router, .events = ZMQ_POLLIN};
        items[k++] = (zmq_pollitem_t){.fd = sigfd, .events = ZMQ_POLLIN};
        for (sup_ctx *c = sup_ctx_first(); c; c = c->next) {
            if (c->fd < 0)
                continue;
            short ev = 0;
            if (!c->chan_eof && !c->broken && !c->pending.head)
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
            timeout = ms < 0 ? 0 : (long)ms + 1;
        }
        if (zmq_poll(items, (int)k, timeout) < 0) {
            if (errno == EINTR)
                continue;
            fatal("zmq_poll: %s", zmq_strerror(errno));
        }
        if (items[1].revents)
            read_signals();
        for (size_t i = 2; i < k; i++) {
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
        if (items[0].revents & ZMQ_POLLIN)
            read_client();
    }
    free(items);
    free(owners);
    sup_ctx_shutdown_all();
    zmq_close(router);
}
