/* rt_link: one DEALER per (client, host): forwarding, requests in flight
 * (each ends with exactly one terminal reply, also when its host is lost
 * or its connection drops), backpressure. */
#ifndef CTXD_RT_LINK_H
#define CTXD_RT_LINK_H

#include "proto.h"
#include "rt_host.h"
#include "rt_out.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* RT_FL_INTERNAL: the router's own request on a client's link (a tenant's
 * `default` made before the request that named it): its reply is not the
 * client's. RT_FL_SETTLE: the router's own ctx.info after the link's
 * connection dropped with a create, fork, delete or restart of that
 * context in flight (rt_link.c); not the client's either. */
enum {
    RT_FL_OTHER,
    RT_FL_EXECUTE,
    RT_FL_CREATE,
    RT_FL_FORK,
    RT_FL_DELETE,
    RT_FL_RESTART,
    RT_FL_INTERNAL,
    RT_FL_SETTLE
};
typedef struct rt_fl {
    struct rt_fl *next;
    uint8_t re[PROTO_MAX_ID + 8];
    size_t re_len;
    int kind;
    char ctx[PROTO_MAX_NAME + 1]; /* host-side name it names (or creates) */
    char pinned[RT_INSTANCE + 1]; /* the host instance it was sent to */
    bool accepted;
    uint32_t conn; /* the link's connection count when it was sent */
} rt_fl;
struct rt_link {
    struct rt_link *next_all;
    rt_client *client;
    rt_host *host;
    void *sock;
    void *mon;          /* its DISCONNECTED events */
    uint32_t conn;      /* connections seen to drop so far */
    uint32_t cut;       /* requests with conn < cut end once the link is drained */
    uint64_t cut_asked; /* the hello asked of the host for that end (0: none) */
    rt_outq out;
    rt_fl *fl;
    size_t nfl;
};
/* Called with the reply to the router's own create of a client's
 * `default` (host-side name), or NULL when it got none (its host was lost,
 * its connection cut). One is registered, at rt_link_init. */
typedef void (*rt_link_made_fn)(const char *name, const proto_val *reply);
/* Keeps zctx for the links' sockets, tells fn of each `default` made, and
 * hears of lost hosts (rt_host_on_lost). */
void rt_link_init(void *zctx, rt_link_made_fn fn);
/* Forwards an encoded request to h for client c, tracking it in flight.
 * kind and ctx say what the reply changes in the catalog. */
void rt_link_forward(rt_client *c, rt_host *h, const proto_buf *req, const uint8_t *re,
                     size_t re_len, int kind, const char *ctx);
/* A loop reader: reads every link that has messages and is not held back;
 * true when something was read or asked. */
bool rt_link_serve(void *unused);
/* A loop output: sends what the links queued for their clients; true when
 * nothing is left. */
bool rt_link_flush(void *unused);
/* Bytes held for client c: its own queue and its links' queues. */
size_t rt_link_held(const rt_client *c);
/* Closes c's links, forgetting what was in flight on them. */
void rt_link_close_client(rt_client *c);
/* Ids of the router's own requests on a client's link begin with this; a
 * client may not use them (rt_req.c refuses them), so a reply is never
 * taken for the wrong one. */
#define RT_OWN_ID "ctxd-router:"

#endif
