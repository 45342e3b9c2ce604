/* rt_host: the ctxd hosts behind the router: a control DEALER each (hello,
 * stats, ctx.list, fencing deletes), liveness, placement, loss and
 * handshake failures. Who must know of a loss registers a hook. */
#ifndef CTXD_RT_HOST_H
#define CTXD_RT_HOST_H

#include "proto.h"
#include "rt_base.h"
#include "rt_cat.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { RT_HOST_UNKNOWN, RT_HOST_LIVE, RT_HOST_LOST };
typedef struct rt_host {
    int idx;
    const char *endpoint;
    void *ctl; /* the router's own DEALER: hello, stats, ctx.list, deletes */
    int state;
    char instance[RT_INSTANCE + 1];
    double last_reply, ping_sent;
    bool ping_out;
    uint64_t live;        /* contexts.live from its last stats */
    uint64_t placed;      /* contexts placed since that stats */
    proto_buf hello;      /* its last hello reply */
    void *mon;            /* PAIR: the control socket's handshake failures */
    char auth_error[160]; /* why the host refused the router's key, or "" */
    int refused;          /* the kind (zap_hs.h) of the last failed handshake, -1 none */
    char why[160];        /* what that kind means, or "" */
    uint64_t failed[8];   /* failed handshakes by kind (ZAP_HS_NKINDS of them) */
    double backoff;       /* seconds until the next attempt after a refusal */
    double retry_at;      /* when the control socket is made anew; 0 none */
} rt_host;
/* The longest wait between attempts at a host that refused the router. */
#define RT_HOST_BACKOFF_MAX 30.0
extern rt_host rt_hosts[RT_MAX_HOSTS];
extern size_t rt_nhosts;

/* Called once a host is lost (its contexts already marked lost in the
 * catalog), with the cause. */
typedef void (*rt_host_lost_fn)(void *data, rt_host *h, const char *cause);
void rt_host_on_lost(rt_host_lost_fn fn, void *data);

/* Opens a control socket to each configured host. */
void rt_host_open(void *zctx);
/* Sets CurveZMQ client options for a socket to a host. */
void rt_host_curve(void *sock);
/* A loop timer: hellos and stats every --liveness, losses past
 * --liveness-max. */
void rt_host_tick(void *unused, double now);
/* Loop readers of host h (an rt_host *): its control socket's replies,
 * its monitor's handshake events. */
bool rt_host_read_ctl(void *h);
bool rt_host_read_monitor(void *h);
/* What the router can say of reaching h: "up" (live), "refused" (its
 * handshake failed: h->why says how) or "unreachable" (no answer). */
const char *rt_host_reach(const rt_host *h);
/* One line naming every host's reach: "N of M hosts up; ENDPOINT up;
 * ENDPOINT refused (why); ENDPOINT unreachable". */
void rt_host_summary(char *buf, size_t len);
/* Why no host is live, for an `err unavailable` (an authentication
 * failure names itself). */
const char *rt_host_why_none(void);
/* A host for a new context: the less loaded of two sampled live ones;
 * NULL when none is live. */
rt_host *rt_host_place(void);
/* Sends a router request on the control socket; fn gets the reply doc
 * (NULL when the host was lost first). */
typedef void (*rt_ctl_cb)(void *arg, rt_host *h, const proto_val *reply);
/* pin: the request carries the host's current instance (a restarted host
 * refuses it, and is then known lost at once). */
void rt_host_ctl(rt_host *h, const char *type, const char *ctx, bool pin, rt_ctl_cb fn, void *arg);
/* A request pinned to `pinned` was refused as for another instance: if
 * that is still the instance the router believes in, the host restarted:
 * lost now, and asked for its new instance. */
void rt_host_restarted(rt_host *h, const char *pinned);
/* The catalog is read (from etcd): hosts already live are reconciled with
 * it, as a host's first hello does when the catalog is there first. */
void rt_host_catalog_loaded(void);
/* Deletes on live host h the context of entry e, which the catalog found
 * lost there (a restarted host's table may have made it again, empty). */
void rt_host_fence(rt_host *h, const rt_entry *e);

#endif
