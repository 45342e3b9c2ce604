/* rt_out: a client of the router and the queues of messages to it, sent
 * in order, never blocking the loop, their bytes counted. */
#ifndef CTXD_RT_OUT_H
#define CTXD_RT_OUT_H

#include "proto.h"
#include "rt_base.h"
#include "rt_bound.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_outmsg {
    struct rt_outmsg *next;
    proto_buf body;
} rt_outmsg;
typedef struct rt_outq {
    rt_outmsg *head, *tail;
    size_t bytes;
} rt_outq;

typedef struct rt_link rt_link;

/* One client (a ZeroMQ routing id on a listening socket); rt_req.c keeps
 * the table of them. */
typedef struct rt_client {
    struct rt_client *next;
    int sock; /* listening socket: 0 plain, 1 CurveZMQ */
    uint8_t route[RT_MAX_ROUTE];
    size_t route_len;
    char key[RT_KEY_Z85 + 1]; /* its CurveZMQ key, "" on plain sockets */
    char tenant[33];          /* prefix of its context names, "" for none */
    rt_bounds bounds;         /* what its ctx.create may ask for */
    rt_outq out;              /* the router's own replies not sent yet */
    rt_link *links[RT_MAX_HOSTS];
    double last_active;
    bool gone;
} rt_client;

/* The listening sockets clients are answered on (either may be NULL). */
void rt_out_sockets(void *plain, void *curve);
/* Sends at once when q is empty and the client takes it, else queues. */
void rt_out_deliver(rt_client *c, rt_outq *q, const proto_buf *body);
/* Sends what q holds; true when it is empty. */
bool rt_out_flush(rt_client *c, rt_outq *q);
/* Drops what q holds, unsent. */
void rt_out_clear(rt_outq *q);

#endif
