/* sup_send: messages to clients, never blocking the loop: sent at once,
 * else held per context (backpressure on its worker) or in the daemon-wide
 * outbox, bounded (sup_held.c). */
#include "sup_send.h"

#include "sup_config.h"
#include "sup_held.h"
#include "sup_log.h"
#include "sup_peer.h"
#include "sup_route.h"
#include "sup_stats.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* The listening sockets (sup_loop.c): 0 plain, 1 CurveZMQ; NULL unused. */
static void *routers[2];

/* Registered by the loop once it opened the socket. */
void sup_send_router(int sock, void *router)
{
    routers[sock] = router;
}

/* Bodies at least this large are handed to ZeroMQ rather than copied
 * (stream frames of 64 KiB: one copy and one allocation less each). */
#define TAKE_MIN (8 * 1024)

/* ZeroMQ's release of a body it was handed (from its I/O thread). */
static void free_body(void *data, void *hint)
{
    (void)hint;
    free(data);
}

/* Sends the body frame: a large body's buffer is handed over (body is left
 * empty) when take is set, else copied. */
static void send_body(void *router, proto_buf *body, bool take)
{
    int rc;
    if (take && body->len >= TAKE_MIN) {
        zmq_msg_t msg;
        if (zmq_msg_init_data(&msg, body->data, body->len, free_body, NULL) != 0)
            fatal("zmq_msg_init_data: %s", zmq_strerror(errno));
        proto_buf_init(body); /* ZeroMQ owns the data now, whatever happens */
        rc = zmq_msg_send(&msg, router, ZMQ_DONTWAIT);
        if (rc < 0)
            zmq_msg_close(&msg);
    } else {
        rc = zmq_send(router, body->data, body->len, ZMQ_DONTWAIT);
    }
    /* The routing frame went out, so the body cannot fail on HWM. */
    if (rc < 0)
        sup_log("send to client failed: %s", zmq_strerror(errno));
}

/* The loop's hook, run before every send (sup_send_before). */
static void (*before_send)(void);

void sup_send_before(void (*fn)(void))
{
    before_send = fn;
}

/* Per listening socket: sent on since sup_send_take_used last asked. */
static bool used[2];

bool sup_send_take_used(int sock)
{
    bool u = used[sock];
    used[sock] = false;
    return u;
}

/* The routing frame, then the body (handed over when take); 0, -1 when
 * the client's queue is full, 1 when the client is gone. */
static int send_to(const sup_peer *peer, proto_buf *body, bool take)
{
    void *router = routers[peer->sock];
    if (before_send)
        before_send();
    used[peer->sock] = true; /* even a failed send processes its commands */
    if (!sup_route_ok(peer)) /* its connection is gone: not to whoever holds the id now */
        return 1;
    if (zmq_send(router, peer->route, peer->route_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        /* EHOSTUNREACH: the client is gone; its events are dropped. */
        return errno == EAGAIN ? -1 : 1;
    }
    send_body(router, body, take);
    return 0;
}

/* Sends body, which stays the caller's: the same answers as send_to. */
static int send_copy(const sup_peer *peer, const proto_buf *body)
{
    proto_buf copy = *body; /* never taken: only read */
    return send_to(peer, &copy, false);
}

int sup_send_take(const sup_peer *peer, proto_buf *body)
{
    return send_to(peer, body, true);
}

typedef struct sup_outmsg {
    struct sup_outmsg *next;
    sup_peer peer;
    proto_buf body;
} sup_outmsg;

/* Messages for clients whose queue was full, not tied to a live context.
 * Bounded: a client past max_client_held gets no more replies queued (its
 * requests are refused, sup_request.c); what deleted contexts leave here is
 * cut, oldest first and logged, past twice max_held, the last safety. */
static sup_outq outbox;
static size_t outbox_bytes;
#define OUTBOX_MAX_BYTES (2 * sup_cfg.max_held)
#define OUTMSG_OVERHEAD sizeof(sup_outmsg)

void sup_outq_push(sup_outq *q, const sup_peer *peer, const proto_buf *body)
{
    sup_outmsg *m = mem_calloc(1, sizeof *m);
    m->peer = *peer;
    proto_buf_append(&m->body, body->data, body->len);
    q->bytes += body->len + OUTMSG_OVERHEAD;
    sup_held_add(peer, body->len + OUTMSG_OVERHEAD);
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    q->n++;
}

static void outmsg_free(sup_outmsg *m)
{
    sup_held_sub(&m->peer, m->body.len + OUTMSG_OVERHEAD);
    proto_buf_free(&m->body);
    free(m);
}

bool sup_outq_flush(sup_outq *q)
{
    while (q->head) {
        if (send_copy(&q->head->peer, &q->head->body) < 0)
            return false;
        sup_outmsg *m = q->head;
        q->head = m->next;
        if (!q->head)
            q->tail = NULL;
        q->n--;
        q->bytes -= m->body.len + OUTMSG_OVERHEAD;
        outmsg_free(m);
    }
    return true;
}

static bool same_peer(const sup_peer *a, const sup_peer *b)
{
    return a->sock == b->sock && a->route_len == b->route_len &&
           memcmp(a->route, b->route, a->route_len) == 0;
}

/* Sends what the outbox holds, in order per client; a client whose queue is
 * still full does not hold up the others. True when the outbox is empty. */
bool sup_send_flush_outbox(void)
{
    enum { MAX_BLOCKED = 32 };
    const sup_peer *blocked[MAX_BLOCKED];
    size_t nblocked = 0;
    sup_outmsg **link = &outbox.head, *prev = NULL;
    while (*link) {
        sup_outmsg *m = *link;
        bool skip = false;
        for (size_t i = 0; i < nblocked && !skip; i++)
            skip = same_peer(blocked[i], &m->peer);
        if (!skip && send_copy(&m->peer, &m->body) >= 0) {
            *link = m->next;
            outbox.n--;
            outbox_bytes -= m->body.len + OUTMSG_OVERHEAD;
            outmsg_free(m);
            continue;
        }
        if (!skip) {
            if (nblocked == MAX_BLOCKED)
                break;
            blocked[nblocked++] = &m->peer;
        }
        prev = m;
        link = &m->next;
    }
    if (!*link) /* walked to the end: prev is the last message kept */
        outbox.tail = prev;
    return outbox.head == NULL;
}

void sup_outq_adopt(sup_outq *q)
{
    if (!q->head)
        return;
    for (sup_outmsg *m = q->head; m; m = m->next)
        outbox_bytes += m->body.len + OUTMSG_OVERHEAD;
    if (outbox.tail)
        outbox.tail->next = q->head;
    else
        outbox.head = q->head;
    outbox.tail = q->tail;
    outbox.n += q->n;
    q->head = q->tail = NULL;
    q->n = 0;
    q->bytes = 0;
    while (outbox_bytes > OUTBOX_MAX_BYTES && outbox.head) {
        sup_outmsg *m = outbox.head;
        outbox.head = m->next;
        if (!outbox.head)
            outbox.tail = NULL;
        outbox.n--;
        outbox_bytes -= m->body.len + OUTMSG_OVERHEAD;
        sup_stats_event("outbox-full dropped=%zu", m->body.len);
        outmsg_free(m);
    }
}

/* True when the outbox holds messages for this client (they go first). */
static bool outbox_has(const sup_peer *peer)
{
    for (sup_outmsg *m = outbox.head; m; m = m->next)
        if (same_peer(&m->peer, peer))
            return true;
    return false;
}

void sup_deliver(const sup_peer *peer, const proto_buf *body)
{
    if (!outbox_has(peer) && send_copy(peer, body) >= 0)
        return;
    sup_outq tmp = {0};
    sup_outq_push(&tmp, peer, body);
    sup_outq_adopt(&tmp);
}

/* Every message to a client starts with v, t and re. */
void sup_msg_begin(proto_buf *b, const char *type, const sup_peer *peer, uint32_t nfields)
{
    proto_put_map(b, nfields + 3);
    proto_put_str(b, "v");
    proto_put_uint(b, PROTO_VERSION);
    proto_put_str(b, "t");
    proto_put_str(b, type);
    proto_put_str(b, "re");
    if (peer->re_len)
        proto_buf_append(b, peer->re, peer->re_len);
    else
        proto_put_nil(b);
}

proto_map sup_msg_open(proto_buf *b, const char *type, const sup_peer *peer)
{
    proto_map m = proto_map_open(b);
    proto_key(b, &m, "v");
    proto_put_uint(b, PROTO_VERSION);
    proto_key(b, &m, "t");
    proto_put_str(b, type);
    proto_key(b, &m, "re");
    if (peer->re_len)
        proto_buf_append(b, peer->re, peer->re_len);
    else
        proto_put_nil(b);
    return m;
}

void sup_msg_end(proto_buf *b, const proto_map *m)
{
    proto_map_close(b, m);
}

/* The code of the last err reply, so the request log can say why. */
static const char *last_err_code;

const char *sup_reply_last_code(void)
{
    return last_err_code;
}

void sup_reply_reset(void)
{
    last_err_code = NULL;
}

/* An `err` reply, logged with --verbose. */
void sup_reply_err(const sup_peer *peer, const char *code, const char *fmt, ...)
{
    last_err_code = code;
    char msg[4096]; /* pip's message can be long (sup_pkgs.c) */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    proto_buf b;
    proto_buf_init(&b);
    proto_map m = sup_msg_open(&b, "err", peer);
    proto_key(&b, &m, "code");
    proto_put_str(&b, code);
    proto_key(&b, &m, "message");
    proto_put_str(&b, msg);
    sup_msg_end(&b, &m);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
    sup_log("err %s: %s", code, msg);
}
