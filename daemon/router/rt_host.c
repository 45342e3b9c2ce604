/* rt_host: the ctxd hosts behind the router. Each has a control DEALER of
 * the router's own, on which it is asked `hello` (its instance: liveness)
 * and `stats` (its load) every --liveness seconds. A host that does not
 * answer within --liveness-max, or answers with another instance, is lost:
 * its contexts are marked lost in the catalog, the requests in flight to it
 * end (whoever registered rt_host_on_lost hears of it), and that instance is fenced: nothing is
 * sent to it again but the deletion of the contexts the catalog had there. */
#include "rt_host.h"

#include "rt_auth.h"
#include "rt_base.h"
#include "rt_cat.h"
#include "rt_loop.h"

#include "mem.h"
#include "zap_hs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

_Static_assert(ZAP_HS_NKINDS <= 8, "rt_host.failed holds every kind");

rt_host rt_hosts[RT_MAX_HOSTS];
size_t rt_nhosts;
static void *zctx;
static rt_host_lost_fn lost_fn;
static void *lost_data;

typedef struct ctlreq {
    struct ctlreq *next;
    uint64_t id;
    rt_host *host;
    rt_ctl_cb fn;
    void *arg;
    char pinned[RT_INSTANCE + 1];
} ctlreq;
static ctlreq *ctl_pending;
static uint64_t ctl_next = 1;

void rt_host_curve(void *sock)
{
    if (!rt_cfg.host_z85[0])
        return;
    zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, rt_cfg.host_z85, RT_KEY_Z85);
    zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, rt_auth_public(), RT_KEY_Z85);
    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, rt_auth_secret(), RT_KEY_Z85);
}

/* A DEALER to h, non-blocking, CurveZMQ with the router's key. */
static void *open_ctl(rt_host *h)
{
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0, hwm = 1000, ivl = 100;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    rt_host_curve(s);
    /* A host that refuses the router's key says so only in a handshake
     * event: watched, so the refusal is reported, not a silence. */
    char mon[64];
    snprintf(mon, sizeof mon, "inproc://rt-mon-%d-%p", h->idx, s);
    zmq_socket_monitor(s, mon,
                       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                           ZMQ_EVENT_DISCONNECTED);
    if (h->mon) {
        rt_loop_unwatch(h->mon);
        zmq_close(h->mon);
    }
    h->mon = zmq_socket(zctx, ZMQ_PAIR);
    zmq_setsockopt(h->mon, ZMQ_LINGER, &(int){0}, sizeof(int));
    zmq_connect(h->mon, mon);
    rt_loop_watch(h->mon);
    if (zmq_connect(s, h->endpoint) < 0)
        fatal("cannot connect to host %s: %s", h->endpoint, zmq_strerror(errno));
    rt_loop_watch(s);
    return s;
}

void rt_host_open(void *z)
{
    zctx = z;
    rt_nhosts = rt_cfg.nhosts;
    for (size_t i = 0; i < rt_nhosts; i++) {
        rt_host *h = &rt_hosts[i];
        h->idx = (int)i;
        h->endpoint = rt_cfg.hosts[i];
        proto_buf_init(&h->hello);
        h->refused = -1;
        h->ctl = open_ctl(h);
    }
}

/* Sends {v, t, id[, ctx][, instance]} on h's control socket. */
static uint64_t ctl_send(rt_host *h, const char *type, const char *ctx, const char *instance)
{
    uint64_t id = ctl_next++;
    proto_buf b;
    proto_buf_init(&b);
    proto_put_map(&b, 3 + (ctx ? 1 : 0) + (instance ? 1 : 0));
    proto_put_str(&b, "v");
    proto_put_uint(&b, PROTO_VERSION);
    proto_put_str(&b, "t");
    proto_put_str(&b, type);
    proto_put_str(&b, "id");
    proto_put_uint(&b, id);
    if (ctx) {
        proto_put_str(&b, "ctx");
        proto_put_str(&b, ctx);
    }
    if (instance) {
        proto_put_str(&b, "instance");
        proto_put_str(&b, instance);
    }
    if (zmq_send(h->ctl, b.data, b.len, ZMQ_DONTWAIT) < 0 && h->state == RT_HOST_LIVE)
        rt_log("host %s: control message %s not sent: %s", h->endpoint, type, zmq_strerror(errno));
    proto_buf_free(&b);
    return id;
}

void rt_host_ctl(rt_host *h, const char *type, const char *ctx, bool pin, rt_ctl_cb fn, void *arg)
{
    ctlreq *r = mem_calloc(1, sizeof *r);
    if (pin)
        snprintf(r->pinned, sizeof r->pinned, "%s", h->instance);
    r->id = ctl_send(h, type, ctx, pin ? r->pinned : NULL);
    r->host = h;
    r->fn = fn;
    r->arg = arg;
    r->next = ctl_pending;
    ctl_pending = r;
}

/* Ends the control requests waiting on h (fn gets NULL). They are taken
 * off the list first: a callback may ask h again. */
static void ctl_fail(rt_host *h)
{
    ctlreq *failed = NULL;
    ctlreq **p = &ctl_pending;
    while (*p) {
        ctlreq *r = *p;
        if (r->host != h) {
            p = &r->next;
            continue;
        }
        *p = r->next;
        r->next = failed;
        failed = r;
    }
    while (failed) {
        ctlreq *r = failed;
        failed = r->next;
        if (r->fn)
            r->fn(r->arg, h, NULL);
        free(r);
    }
}

typedef struct lose {
    rt_host *h;
    const char *cause;
    size_t n;
} lose;

static void lose_entry(rt_entry *e, void *arg)
{
    lose *l = arg;
    if (e->host != l->h->idx || e->state == RT_CTX_LOST)
        return;
    rt_cat_set_state(e, RT_CTX_LOST);
    snprintf(e->cause, sizeof e->cause, "%s", l->cause);
    rt_cat_save(e);
    l->n++;
}

void rt_host_on_lost(rt_host_lost_fn fn, void *data)
{
    lost_fn = fn;
    lost_data = data;
}

/* Marks h lost: its catalog entries lost, the lost hook told, what was
 * asked on its control socket ended, a new control socket opened. */
static void host_lost(rt_host *h, const char *cause)
{
    if (h->state == RT_HOST_LOST)
        return;
    rt_log("host %s lost: %s", h->endpoint, cause);
    h->state = RT_HOST_LOST;
    lose l = {h, cause, 0};
    rt_cat_each(lose_entry, &l);
    if (lost_fn)
        lost_fn(lost_data, h, cause);
    ctl_fail(h);
    /* A new control socket: nothing queued for the old connection (hellos
     * sent into a partition) is answered later as if current. */
    rt_loop_unwatch(h->ctl);
    zmq_close(h->ctl);
    h->ctl = open_ctl(h);
    h->ping_out = false;
    rt_log("host %s: %zu contexts lost", h->endpoint, l.n);
}

/* Deletes, on a host seen again, the contexts the catalog lost there (its
 * table may have made them again, empty, after a restart; after a
 * partition they are still the old ones, which nobody may reach now). */
static void fence_entry(rt_entry *e, void *arg)
{
    rt_host_fence(arg, e);
}

typedef struct stale {
    rt_host *h;
    size_t n;
} stale;

static void stale_entry(rt_entry *e, void *arg)
{
    stale *st = arg;
    if (e->host != st->h->idx || e->state == RT_CTX_LOST ||
        strcmp(e->instance, st->h->instance) == 0)
        return;
    rt_cat_set_state(e, RT_CTX_LOST);
    snprintf(e->cause, sizeof e->cause, "host %s restarted (instance %.8s is gone, now %.8s)",
             st->h->endpoint, e->instance, st->h->instance);
    rt_cat_save(e);
    st->n++;
}

/* Contexts the catalog records on an earlier instance of h (a live host)
 * were lost while no router watched: marked lost, and deleted there. Runs
 * when both are known: h's instance (its first hello) and the catalog (a
 * router reading etcd may get a host's hello first). */
static void reconcile(rt_host *h)
{
    stale st = {h, 0};
    rt_cat_each(stale_entry, &st);
    if (st.n)
        rt_log("host %s: %zu contexts of an earlier instance lost", h->endpoint, st.n);
    rt_cat_each(fence_entry, h);
}

void rt_host_catalog_loaded(void)
{
    for (size_t i = 0; i < rt_nhosts; i++)
        if (rt_hosts[i].state == RT_HOST_LIVE)
            reconcile(&rt_hosts[i]);
}

void rt_host_fence(rt_host *h, const rt_entry *e)
{
    if (h->state == RT_HOST_LIVE && e->host == h->idx && e->state == RT_CTX_LOST)
        ctl_send(h, "ctx.delete", e->name, h->instance);
}

/* A hello answer: the host's instance decides what it is now. */
static void on_hello(rt_host *h, const proto_val *m, const uint8_t *raw, size_t len)
{
    const proto_val *inst = proto_map_get(m, "instance");
    if (!inst || inst->kind != PROTO_STR || inst->n != RT_INSTANCE)
        return;
    char now_inst[RT_INSTANCE + 1];
    memcpy(now_inst, inst->as.s, RT_INSTANCE);
    now_inst[RT_INSTANCE] = '\0';
    h->ping_out = false;
    h->last_reply = rt_now();
    h->refused = -1;
    h->backoff = 0;
    h->why[0] = '\0';
    h->hello.len = 0;
    proto_buf_append(&h->hello, raw, len);
    if (h->state == RT_HOST_LIVE && strcmp(now_inst, h->instance) == 0)
        return;
    if (h->state == RT_HOST_LIVE) {
        char cause[256];
        snprintf(cause, sizeof cause, "host %s restarted (instance %.8s is gone, now %.8s)",
                 h->endpoint, h->instance, now_inst);
        host_lost(h, cause);
    }
    /* First sight (a router that just started) or back after a loss:
     * what the catalog lost there is deleted there. */
    bool fencing = h->state == RT_HOST_LOST || h->state == RT_HOST_UNKNOWN;
    snprintf(h->instance, sizeof h->instance, "%s", now_inst);
    h->state = RT_HOST_LIVE;
    if (fencing)
        reconcile(h);
    rt_log("host %s live: instance %s%s", h->endpoint, h->instance,
           fencing ? " (the contexts lost there deleted)" : "");
}

static void on_stats(rt_host *h, const proto_val *m)
{
    const proto_val *c = proto_map_get(m, "contexts"), *live = c ? proto_map_get(c, "live") : NULL;
    if (live && live->kind == PROTO_UINT) {
        h->live = live->as.u;
        h->placed = 0;
    }
}

/* Reads what h's control socket holds. */
static void read_ctl(rt_host *h)
{
    for (int budget = 0; budget < 256; budget++) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, h->ctl, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            return;
        }
        proto_doc doc;
        proto_error err;
        if (proto_decode(&doc, zmq_msg_data(&msg), zmq_msg_size(&msg), &err) == 0) {
            const proto_val *m = &doc.nodes[0], *re = proto_map_get(m, "re");
            ctlreq **p = &ctl_pending;
            while (re && re->kind == PROTO_UINT && *p && (*p)->id != re->as.u)
                p = &(*p)->next;
            if (re && re->kind == PROTO_UINT && *p) {
                ctlreq *r = *p;
                *p = r->next;
                const proto_val *code = proto_map_get(m, "code");
                bool refused = r->pinned[0] && code && proto_str_eq(code, "instance");
                if (r->fn)
                    r->fn(r->arg, h, refused ? NULL : m);
                if (refused)
                    rt_host_restarted(h, r->pinned);
                free(r);
            }
        }
        (void)doc;
        proto_doc_free(&doc);
        zmq_msg_close(&msg);
    }
}

/* A failed handshake with h: counted, said (once for each new reason: a
 * wrong key fails every reconnect), and kept for stats and `unavailable`.
 * After a refusal or a plain-text mismatch libzmq does not connect again:
 * the control socket is made anew after a backoff (rt_host_tick), so a key
 * added to the host's authorized_keys later is found without a restart. */
static void handshake_failed(rt_host *h, int kind, uint32_t value)
{
    h->failed[kind]++;
    const char *reason = zap_hs_reason(kind, false);
    if (h->refused != kind)
        rt_log("handshake with host %s failed: %s (%s, router key %.8s..., host key %.8s...)%s",
               h->endpoint, reason, zap_hs_kind_names[kind], rt_auth_public(),
               rt_cfg.host_z85[0] ? rt_cfg.host_z85 : "none",
               kind == ZAP_HS_REFUSED ? ": add router.pub to the host's authorized_keys" : "");
    h->refused = kind;
    snprintf(h->why, sizeof h->why, "%s", reason);
    snprintf(h->auth_error, sizeof h->auth_error,
             "host %s refused the router: CurveZMQ authentication failed: %s (%u)", h->endpoint,
             reason, (unsigned)value);
    if (kind == ZAP_HS_REFUSED || kind == ZAP_HS_PLAIN) {
        double lo = rt_cfg.liveness < 0.5 ? 0.5 : rt_cfg.liveness;
        h->backoff = h->backoff ? h->backoff * 2 : lo;
        if (h->backoff > RT_HOST_BACKOFF_MAX)
            h->backoff = RT_HOST_BACKOFF_MAX;
        h->retry_at = rt_now() + h->backoff;
    }
}

/* Events of h's control socket: handshakes, and drops. A drop while the
 * host lives (a reset connection) leaves what was asked on it unanswered:
 * it ends now (fn gets NULL), and a hello goes out again at once, so the
 * host is not taken for lost for a hello that could not be answered. */
static void read_monitor(rt_host *h)
{
    for (int budget = 0; budget < 64; budget++) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, h->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        zmq_msg_init(&addr);
        if (zmq_msg_more(&ev))
            zmq_msg_recv(&addr, h->mon, 0);
        uint16_t event = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&value, (uint8_t *)zmq_msg_data(&ev) + 2, 4);
        }
        int kind = zap_hs_kind(event, value);
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            h->auth_error[0] = '\0';
            h->refused = -1;
            h->backoff = 0;
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            if (h->state == RT_HOST_LIVE)
                rt_log("host %s: the control connection dropped; reconnecting", h->endpoint);
            ctl_fail(h);
            h->ping_out = false;
            h->ping_sent = 0;
        } else if (kind >= 0) {
            handshake_failed(h, kind, value);
        }
        zmq_msg_close(&addr);
        zmq_msg_close(&ev);
    }
}

bool rt_host_read_ctl(void *h)
{
    if (!rt_loop_readable(((rt_host *)h)->ctl))
        return false;
    read_ctl(h);
    return true;
}

bool rt_host_read_monitor(void *h)
{
    if (!rt_loop_readable(((rt_host *)h)->mon))
        return false;
    read_monitor(h);
    return true;
}

const char *rt_host_reach(const rt_host *h)
{
    if (h->state == RT_HOST_LIVE)
        return "up";
    return h->refused >= 0 ? "refused" : "unreachable";
}

void rt_host_summary(char *buf, size_t len)
{
    size_t up = 0;
    for (size_t i = 0; i < rt_nhosts; i++)
        up += rt_hosts[i].state == RT_HOST_LIVE;
    int n = snprintf(buf, len, "%zu of %zu hosts up", up, rt_nhosts);
    for (size_t i = 0; i < rt_nhosts && n >= 0 && (size_t)n < len; i++) {
        const rt_host *h = &rt_hosts[i];
        const char *reach = rt_host_reach(h);
        n += snprintf(buf + n, len - (size_t)n, "; %s %s%s%s%s", h->endpoint, reach,
                      h->refused >= 0 && h->state != RT_HOST_LIVE ? " (" : "",
                      h->refused >= 0 && h->state != RT_HOST_LIVE ? h->why : "",
                      h->refused >= 0 && h->state != RT_HOST_LIVE ? ")" : "");
    }
}

const char *rt_host_why_none(void)
{
    static char why[1024];
    for (size_t i = 0; i < rt_nhosts; i++)
        if (rt_hosts[i].auth_error[0]) {
            char sum[900];
            rt_host_summary(sum, sizeof sum);
            snprintf(why, sizeof why, "%s; no host is live: %s", rt_hosts[i].auth_error, sum);
            return why;
        }
    char sum[900];
    rt_host_summary(sum, sizeof sum);
    snprintf(why, sizeof why, "no host is live: %s", sum);
    return why;
}

static void hello_cb(void *arg, rt_host *h, const proto_val *m)
{
    (void)arg;
    if (!m || !proto_str_eq(proto_map_get(m, "t"), "ok"))
        return;
    proto_buf b;
    proto_buf_init(&b);
    proto_put_val(&b, m);
    on_hello(h, m, b.data, b.len);
    proto_buf_free(&b);
}

static void stats_cb(void *arg, rt_host *h, const proto_val *m)
{
    (void)arg;
    if (m && proto_str_eq(proto_map_get(m, "t"), "ok"))
        on_stats(h, m);
}

/* Liveness: a hello (and a stats) each interval; no answer within
 * liveness_max and the host is lost. */
void rt_host_tick(void *unused, double now)
{
    (void)unused;
    for (size_t i = 0; i < rt_nhosts; i++) {
        rt_host *h = &rt_hosts[i];
        if (h->retry_at && now >= h->retry_at) {
            h->retry_at = 0;
            ctl_fail(h);
            rt_loop_unwatch(h->ctl);
            zmq_close(h->ctl);
            h->ctl = open_ctl(h);
            h->ping_out = false;
            h->ping_sent = 0;
        }
        /* Any message from the host counts as an answer: a host busy
         * starting a hundred workers may be slow to say hello. */
        if (h->ping_out && now - h->ping_sent > rt_cfg.liveness_max &&
            now - h->last_reply > rt_cfg.liveness_max) {
            if (h->state == RT_HOST_LIVE) {
                char cause[256];
                snprintf(cause, sizeof cause,
                         "host %s (instance %.8s) did not answer for %.1f s: lost", h->endpoint,
                         h->instance, rt_cfg.liveness_max);
                host_lost(h, cause);
            } else {
                ctl_fail(h); /* unanswered hellos of a host not live: not kept */
            }
            h->ping_out = false;
        }
        if (!h->ping_out && now - h->ping_sent >= rt_cfg.liveness) {
            h->ping_out = true;
            h->ping_sent = now;
            rt_host_ctl(h, "hello", NULL, false, hello_cb, NULL);
            rt_host_ctl(h, "stats", NULL, false, stats_cb, NULL);
        }
    }
}

/* Asks h for its instance now, unless a hello is out already. */
static void check(rt_host *h)
{
    if (!h->ping_out) {
        h->ping_out = true;
        h->ping_sent = rt_now();
        rt_host_ctl(h, "hello", NULL, false, hello_cb, NULL);
    }
}

void rt_host_restarted(rt_host *h, const char *pinned)
{
    if (h->state == RT_HOST_LIVE && strcmp(pinned, h->instance) == 0) {
        char cause[256];
        snprintf(cause, sizeof cause, "host %s restarted (instance %.8s is gone)", h->endpoint,
                 h->instance);
        host_lost(h, cause);
    }
    check(h);
}

/* Two live hosts at random; the one with fewer contexts (its last stats
 * plus what was placed there since) gets the new one. */
rt_host *rt_host_place(void)
{
    rt_host *live[RT_MAX_HOSTS];
    size_t n = 0;
    for (size_t i = 0; i < rt_nhosts; i++)
        if (rt_hosts[i].state == RT_HOST_LIVE)
            live[n++] = &rt_hosts[i];
    if (n == 0)
        return NULL;
    rt_host *a = live[(size_t)random() % n], *b = live[(size_t)random() % n];
    rt_host *h = a->live + a->placed <= b->live + b->placed ? a : b;
    h->placed++;
    return h;
}
