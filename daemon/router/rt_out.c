/* rt_out: messages to clients, never blocking the loop: sent at once when
 * nothing is queued before them and the client's ZeroMQ queue takes them,
 * else queued in order. What a client's queues hold is counted: past
 * RT_CLIENT_HELD its links are not read (backpressure to the hosts). */
#include "rt_out.h"

#include "mem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static void *socks[2];

void rt_out_sockets(void *plain, void *curve)
{
    socks[0] = plain;
    socks[1] = curve;
}

/* 0 sent, -1 the client's queue is full, 1 the client is gone. */
static int send_now(rt_client *c, const proto_buf *body)
{
    void *s = socks[c->sock];
    if (zmq_send(s, c->route, c->route_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return errno == EAGAIN ? -1 : 1;
    if (zmq_send(s, body->data, body->len, ZMQ_DONTWAIT) < 0)
        rt_log("send to a client failed: %s", zmq_strerror(errno));
    return 0;
}

static void push(rt_outq *q, const proto_buf *body)
{
    rt_outmsg *m = mem_calloc(1, sizeof *m);
    proto_buf_append(&m->body, body->data, body->len);
    q->bytes += body->len + sizeof *m;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
}

void rt_out_deliver(rt_client *c, rt_outq *q, const proto_buf *body)
{
    if (c->gone)
        return;
    if (!q->head) {
        int rc = send_now(c, body);
        if (rc == 1)
            c->gone = true;
        if (rc >= 0)
            return;
    }
    push(q, body);
}

bool rt_out_flush(rt_client *c, rt_outq *q)
{
    while (q->head) {
        rt_outmsg *m = q->head;
        int rc = c->gone ? 1 : send_now(c, &m->body);
        if (rc < 0)
            return false;
        if (rc == 1)
            c->gone = true;
        q->head = m->next;
        if (!q->head)
            q->tail = NULL;
        q->bytes -= m->body.len + sizeof *m;
        proto_buf_free(&m->body);
        free(m);
    }
    return true;
}

void rt_out_clear(rt_outq *q)
{
    while (q->head) {
        rt_outmsg *m = q->head;
        q->head = m->next;
        proto_buf_free(&m->body);
        free(m);
    }
    q->tail = NULL;
    q->bytes = 0;
}
