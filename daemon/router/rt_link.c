/* rt_link: one DEALER per (client, host), opened when the client first
 * names a context there. Requests go out on it with the client's own ids,
 * so replies need no id rewriting; each request is tracked in flight until
 * its terminal reply, so that a lost host still gives every request exactly
 * one (done died / aborted, or err lost). Backpressure as in the
 * supervisor: a link whose client has messages queued (its ZeroMQ queue
 * full) is not read, so the host's own bounded hold and then its worker's
 * pipe stop the writer; other clients of that host are not held up.
 *
 * A link's connection can drop while its host lives (a reset, a NAT or a
 * balancer losing state). ZeroMQ reconnects, but the host answers on the
 * connection a request came in on, so what was in flight on the old one
 * is never answered. A monitor sees each drop; once the replies that came
 * before it are read, the host is asked `hello` pinned to its instance: a
 * host that died (its connections drop too) is lost as before, and its
 * runs end `died`. A host that answers lives: each request sent before
 * the drop ends with `err unavailable` (its outcome unknown), and the
 * catalog entry of a create, fork, delete or restart among them is
 * settled by asking the host `ctx.info` on the same link: behind anything
 * of the old connection's that ZeroMQ still held unsent (it goes out on the
 * new connection first), so the answer sees what the host will have. */
#include "rt_link.h"

#include "rt_base.h"
#include "rt_cat.h"
#include "rt_host.h"
#include "rt_loop.h"
#include "rt_msg.h"
#include "rt_out.h"

#include "mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static void *zctx;
static rt_link *all;
static rt_link_made_fn made_fn;
static void host_lost(void *unused, rt_host *h, const char *cause);

/* The router's own requests on a link: their replies are not the client's. */
static bool own(int kind)
{
    return kind == RT_FL_INTERNAL || kind == RT_FL_SETTLE;
}
static uint64_t hello_seq; /* numbers the hellos asked for a link's drop */

void rt_link_init(void *z, rt_link_made_fn fn)
{
    zctx = z;
    made_fn = fn;
    rt_host_on_lost(host_lost, NULL);
}

size_t rt_link_held(const rt_client *c)
{
    size_t n = c->out.bytes;
    for (size_t i = 0; i < rt_nhosts; i++)
        if (c->links[i])
            n += c->links[i]->out.bytes;
    return n;
}

/* Closes l's socket and its monitor (the host lost, the client gone). */
static void close_sock(rt_link *l)
{
    if (l->sock) {
        rt_loop_unwatch(l->sock);
        zmq_close(l->sock);
    }
    if (l->mon) {
        rt_loop_unwatch(l->mon);
        zmq_close(l->mon);
    }
    l->sock = l->mon = NULL;
}

/* The monitor that tells l's connection drops. */
static void open_mon(rt_link *l)
{
    char ep[80];
    snprintf(ep, sizeof ep, "inproc://rt-link-%p-%p", (void *)l, l->sock);
    if (zmq_socket_monitor(l->sock, ep, ZMQ_EVENT_DISCONNECTED) < 0)
        fatal("monitor a link: %s", zmq_strerror(errno));
    l->mon = zmq_socket(zctx, ZMQ_PAIR);
    int zero = 0;
    zmq_setsockopt(l->mon, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(l->mon, ep) < 0)
        fatal("connect a link's monitor: %s", zmq_strerror(errno));
    rt_loop_watch(l->mon);
}

static void open_sock(rt_link *l)
{
    l->sock = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0, rcv = RT_HWM, snd = 1000, ivl = 100;
    zmq_setsockopt(l->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(l->sock, ZMQ_RCVHWM, &rcv, sizeof rcv);
    zmq_setsockopt(l->sock, ZMQ_SNDHWM, &snd, sizeof snd);
    zmq_setsockopt(l->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    int64_t maxmsg = (int64_t)rt_cfg.max_request_bytes * 4 + (1 << 20);
    zmq_setsockopt(l->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    rt_host_curve(l->sock);
    open_mon(l);
    if (zmq_connect(l->sock, l->host->endpoint) < 0)
        fatal("connect %s: %s", l->host->endpoint, zmq_strerror(errno));
    rt_loop_watch(l->sock);
}

static rt_link *get_link(rt_client *c, rt_host *h)
{
    rt_link *l = c->links[h->idx];
    if (!l) {
        l = mem_calloc(1, sizeof *l);
        l->client = c;
        l->host = h;
        l->next_all = all;
        all = l;
        c->links[h->idx] = l;
    }
    if (!l->sock)
        open_sock(l);
    return l;
}

void rt_link_forward(rt_client *c, rt_host *h, const proto_buf *req, const uint8_t *re,
                     size_t re_len, int kind, const char *ctx)
{
    rt_link *l = get_link(c, h);
    if (zmq_send(l->sock, req->data, req->len, ZMQ_DONTWAIT) < 0) {
        if (!own(kind))
            rt_reply_err(c, re, re_len, "busy", "host %s takes no more requests now (%s)",
                         h->endpoint, zmq_strerror(errno));
        if (kind == RT_FL_CREATE || kind == RT_FL_FORK) {
            rt_entry *e = rt_cat_get(ctx);
            if (e && e->state == RT_CTX_PENDING)
                rt_cat_del(ctx);
        }
        return;
    }
    rt_fl *f = mem_calloc(1, sizeof *f);
    memcpy(f->re, re, re_len);
    f->re_len = re_len;
    f->kind = kind;
    snprintf(f->ctx, sizeof f->ctx, "%s", ctx ? ctx : "");
    snprintf(f->pinned, sizeof f->pinned, "%s", h->instance);
    f->conn = l->conn;
    f->next = l->fl;
    l->fl = f;
    l->nfl++;
}

static rt_fl **find_fl(rt_link *l, const uint8_t *re, size_t re_len)
{
    rt_fl **p = &l->fl;
    while (*p && ((*p)->re_len != re_len || memcmp((*p)->re, re, re_len) != 0))
        p = &(*p)->next;
    return p;
}

static uint64_t get_uint(const proto_val *m, const char *key)
{
    const proto_val *v = proto_map_get(m, key);
    return v && v->kind == PROTO_UINT ? v->as.u : 0;
}

/* What a terminal reply changes in the catalog. */
static void apply(rt_link *l, const rt_fl *f, const proto_val *m, const char *t)
{
    rt_entry *e = f->ctx[0] ? rt_cat_get(f->ctx) : NULL;
    const proto_val *info = proto_map_get(m, "ctx");
    bool ok = strcmp(t, "ok") == 0;
    switch (f->kind) {
    case RT_FL_CREATE:
    case RT_FL_FORK:
        if (!e || e->state != RT_CTX_PENDING || e->host != l->host->idx)
            break;
        if (ok) {
            rt_cat_set_state(e, RT_CTX_LIVE);
            e->incarnation = info && info->kind == PROTO_MAP ? get_uint(info, "incarnation") : 1;
            rt_cat_save(e);
        } else {
            rt_cat_del(f->ctx);
        }
        break;
    case RT_FL_DELETE: {
        const proto_val *code = proto_map_get(m, "code");
        if (e && e->host == l->host->idx && (ok || (code && proto_str_eq(code, "unknown_context"))))
            rt_cat_del(f->ctx);
        break;
    }
    case RT_FL_RESTART:
        if (e && ok && info && info->kind == PROTO_MAP) {
            rt_cat_set_state(e, RT_CTX_LIVE);
            e->incarnation = get_uint(info, "incarnation");
            rt_cat_save(e);
        }
        break;
    case RT_FL_SETTLE: /* what the host has, after a dropped connection */
        if (!e || e->host != l->host->idx || e->state == RT_CTX_LOST)
            break;
        if (ok && info && info->kind == PROTO_MAP) {
            rt_cat_set_state(e, RT_CTX_LIVE);
            e->incarnation = get_uint(info, "incarnation");
            rt_cat_save(e);
        } else if (proto_str_eq(proto_map_get(m, "code"), "unknown_context")) {
            rt_cat_del(f->ctx);
        }
        break;
    case RT_FL_EXECUTE:
        if (e && strcmp(t, "done") == 0 && get_uint(m, "incarnation") != e->incarnation) {
            e->incarnation = get_uint(m, "incarnation");
            rt_cat_save(e);
        }
        break;
    default:
        break;
    }
}

/* The message for the client: the tenant prefix taken off the names it
 * carries (accepted.ctx, ok.ctx.name), a refusal for another instance
 * made `err lost`. False when it is sent as it came. */
static bool rewrite(rt_link *l, const rt_fl *f, const proto_val *m, const char *t, proto_buf *out)
{
    rt_client *c = l->client;
    if (strcmp(t, "err") == 0 && proto_str_eq(proto_map_get(m, "code"), "instance")) {
        rt_entry *e = f->ctx[0] ? rt_cat_get(f->ctx) : NULL;
        rt_msg_err(out, f->re, f->re_len, "lost", "context '%s' was lost: %s",
                   rt_msg_clientname(c, f->ctx) ?: f->ctx,
                   e && e->cause[0] ? e->cause : "its host restarted");
        return true;
    }
    if (!c->tenant[0])
        return false;
    const proto_val *ctx = proto_map_get(m, "ctx");
    if (!ctx)
        return false;
    if (ctx->kind == PROTO_STR) {
        char name[PROTO_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)ctx->n, ctx->as.s);
        const char *cn = rt_msg_clientname(c, name);
        rt_sub s = {.key = "ctx", .str = cn ? cn : name};
        rt_msg_rewrite(out, m, &s, 1);
        return true;
    }
    const proto_val *nm = ctx->kind == PROTO_MAP ? proto_map_get(ctx, "name") : NULL;
    if (!nm || nm->kind != PROTO_STR)
        return false;
    char name[PROTO_MAX_NAME + 1];
    snprintf(name, sizeof name, "%.*s", (int)nm->n, nm->as.s);
    const char *cn = rt_msg_clientname(c, name);
    proto_buf info;
    proto_buf_init(&info);
    rt_sub s = {.key = "name", .str = cn ? cn : name};
    rt_msg_rewrite(&info, ctx, &s, 1);
    proto_doc idoc;
    proto_error err;
    if (proto_decode(&idoc, info.data, info.len, &err) == 0) {
        rt_sub s2 = {.key = "ctx", .val = &idoc.nodes[0]};
        rt_msg_rewrite(out, m, &s2, 1);
        proto_doc_free(&idoc);
    }
    proto_buf_free(&info);
    return true;
}

/* One message from a host on a link. */
static void on_message(rt_link *l, const uint8_t *data, size_t len)
{
    proto_doc doc;
    proto_error err;
    if (proto_decode(&doc, data, len, &err) < 0) {
        rt_log("host %s sent an undecodable message: dropped", l->host->endpoint);
        return;
    }
    l->host->last_reply = rt_now();
    const proto_val *m = &doc.nodes[0], *re = proto_map_get(m, "re"), *tv = proto_map_get(m, "t");
    char t[32] = "";
    if (tv && tv->kind == PROTO_STR && tv->n < sizeof t)
        memcpy(t, tv->as.s, tv->n);
    proto_buf reb;
    proto_buf_init(&reb);
    if (re)
        proto_put_val(&reb, re);
    rt_fl **p = re && reb.len <= PROTO_MAX_ID + 8 ? find_fl(l, reb.data, reb.len) : NULL;
    if (!p || !*p) {
        /* Not a request in flight (a gap notice, a reply to nothing): the
         * router answered for it already, or it is not the client's. */
        proto_buf_free(&reb);
        proto_doc_free(&doc);
        return;
    }
    rt_fl *f = *p;
    if (strcmp(t, "accepted") == 0)
        f->accepted = true;
    bool terminal = strcmp(t, "done") == 0 || strcmp(t, "ok") == 0 || strcmp(t, "err") == 0;
    proto_buf out;
    proto_buf_init(&out);
    /* The router's own request: nothing for the client. */
    if (!own(f->kind) && rewrite(l, f, m, t, &out)) {
        rt_out_deliver(l->client, &l->out, &out);
    } else if (!own(f->kind)) {
        proto_buf raw = {(uint8_t *)data, len, len};
        rt_out_deliver(l->client, &l->out, &raw);
    }
    proto_buf_free(&out);
    bool restarted = strcmp(t, "err") == 0 && proto_str_eq(proto_map_get(m, "code"), "instance");
    char pinned[RT_INSTANCE + 1];
    snprintf(pinned, sizeof pinned, "%s", f->pinned);
    if (terminal) {
        /* The router's own create of a client's `default`: what waited for
         * it is handled once f is off the list (it may send on l). */
        char made[PROTO_MAX_NAME + 1] = "";
        if (f->kind == RT_FL_INTERNAL)
            snprintf(made, sizeof made, "%s", f->ctx);
        apply(l, f, m, t);
        *p = f->next;
        l->nfl--;
        free(f);
        if (made[0])
            made_fn(made, m);
    }
    proto_buf_free(&reb);
    proto_doc_free(&doc);
    /* Last: losing the host closes this link and ends what is in flight. */
    if (restarted)
        rt_host_restarted(l->host, pinned);
}

/* Counts l's connection drops (each moves the cut past what was sent). */
static bool read_mon(rt_link *l)
{
    bool any = false;
    for (int budget = 0; budget < 64 && rt_loop_readable(l->mon); budget++) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, l->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            break;
        }
        uint16_t num = 0;
        if (zmq_msg_size(&ev) >= 2)
            memcpy(&num, zmq_msg_data(&ev), 2);
        while (zmq_msg_more(&ev) && zmq_msg_recv(&ev, l->mon, ZMQ_DONTWAIT) >= 0)
            ;
        zmq_msg_close(&ev);
        any = true;
        if (num == ZMQ_EVENT_DISCONNECTED) {
            l->conn++;
            l->cut = l->conn;
        }
    }
    return any;
}

/* Sends the router's own request {type, id, field: ctx, instance} to h on
 * c's link, tracked as kind (RT_FL_INTERNAL or RT_FL_SETTLE). */
static void own_request(rt_client *c, rt_host *h, const char *type, const char *id,
                        const char *field, const char *ctx, int kind)
{
    proto_buf b, re;
    proto_buf_init(&b);
    proto_buf_init(&re);
    proto_put_map(&b, 5);
    proto_put_str(&b, "v");
    proto_put_uint(&b, PROTO_VERSION);
    proto_put_str(&b, "t");
    proto_put_str(&b, type);
    proto_put_str(&b, "id");
    proto_put_str(&b, id);
    proto_put_str(&b, field);
    proto_put_str(&b, ctx);
    proto_put_str(&b, "instance");
    proto_put_str(&b, h->instance);
    proto_put_str(&re, id);
    rt_link_forward(c, h, &b, re.data, re.len, kind, ctx);
    proto_buf_free(&b);
    proto_buf_free(&re);
}

/* Asks l's host ctx.info for ctx on l itself (RT_FL_SETTLE): the answer
 * comes after anything of the dropped connection's that was still queued,
 * and the catalog follows it (apply). */
static void settle(rt_link *l, const char *ctx)
{
    static uint64_t n;
    char id[48];
    snprintf(id, sizeof id, RT_OWN_ID "settle:%llu", (unsigned long long)++n);
    own_request(l->client, l->host, "ctx.info", id, "ctx", ctx, RT_FL_SETTLE);
}

/* Ends what was sent on l before its last connection drop, oldest first:
 * `err unavailable`, and the catalog settled for what it may have changed. */
static void end_cut(rt_link *l)
{
    rt_fl *rev = NULL;
    for (rt_fl **p = &l->fl; *p;) {
        rt_fl *f = *p;
        if (f->conn >= l->cut) {
            p = &f->next;
            continue;
        }
        *p = f->next;
        l->nfl--;
        f->next = rev;
        rev = f;
    }
    l->cut = 0;
    l->cut_asked = 0;
    while (rev) {
        rt_fl *f = rev;
        rev = f->next;
        if (!own(f->kind)) {
            proto_buf b;
            proto_buf_init(&b);
            rt_msg_err(&b, f->re, f->re_len, "unavailable",
                       "the connection to host %s dropped with this request in flight: its "
                       "outcome is unknown (the host was not lost; ask again)",
                       l->host->endpoint);
            rt_out_deliver(l->client, &l->out, &b);
            proto_buf_free(&b);
        } else if (f->kind == RT_FL_INTERNAL) {
            made_fn(f->ctx, NULL);
        }
        if (f->ctx[0] && f->kind != RT_FL_OTHER && f->kind != RT_FL_EXECUTE)
            settle(l, f->ctx); /* a settle that was cut is asked again */
        free(f);
    }
}

/* The answer to the hello asked after links to h dropped: the same
 * instance is live, so what those links lost ends now. No answer (the
 * control connection dropped as well): asked again. A refusal for another
 * instance: rt_host lost h, which ended everything. */
static void cut_cb(void *arg, rt_host *h, const proto_val *m)
{
    uint64_t seq = (uint64_t)(uintptr_t)arg;
    bool live = m && proto_str_eq(proto_map_get(m, "t"), "ok") && h->state == RT_HOST_LIVE;
    for (rt_link *l = all; l; l = l->next_all) {
        if (l->host != h || !l->cut || !l->cut_asked || l->cut_asked > seq)
            continue;
        if (live)
            end_cut(l);
        else
            l->cut_asked = 0;
    }
}

bool rt_link_serve(void *unused)
{
    (void)unused;
    bool any = false;
    for (rt_link *l = all; l; l = l->next_all) {
        if (l->mon && read_mon(l))
            any = true;
        for (int budget = 0; budget < 64; budget++) {
            if (l->out.head || rt_link_held(l->client) >= RT_CLIENT_HELD ||
                !rt_loop_readable(l->sock))
                break;
            zmq_msg_t msg;
            zmq_msg_init(&msg);
            if (zmq_msg_recv(&msg, l->sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&msg);
                break;
            }
            any = true;
            on_message(l, zmq_msg_data(&msg), zmq_msg_size(&msg));
            zmq_msg_close(&msg);
        }
        /* The replies that came before the drop are read: is the host
         * alive (then the rest of the old connection is not answered)? */
        if (l->cut && !l->cut_asked && l->sock && !l->out.head &&
            rt_link_held(l->client) < RT_CLIENT_HELD && !rt_loop_readable(l->sock)) {
            l->cut_asked = ++hello_seq;
            rt_host_ctl(l->host, "hello", NULL, true, cut_cb, (void *)(uintptr_t)hello_seq);
            any = true;
        }
    }
    return any;
}

bool rt_link_flush(void *unused)
{
    (void)unused;
    bool empty = true;
    for (rt_link *l = all; l; l = l->next_all)
        if (!rt_out_flush(l->client, &l->out))
            empty = false;
    return empty;
}

/* The terminal reply the router gives for a request its host lost. */
static void end_lost(rt_link *l, const rt_fl *f, const char *cause)
{
    proto_buf b;
    proto_buf_init(&b);
    rt_entry *e = f->ctx[0] ? rt_cat_get(f->ctx) : NULL;
    if (f->kind == RT_FL_EXECUTE) {
        rt_msg_begin(&b, "done", f->re, f->re_len, 8);
        proto_put_str(&b, "status");
        proto_put_str(&b, f->accepted ? "died" : "aborted");
        proto_put_str(&b, "execution_count");
        proto_put_uint(&b, 0);
        proto_put_str(&b, "incarnation");
        proto_put_uint(&b, e ? e->incarnation : 0);
        proto_put_str(&b, "duration");
        proto_put_double(&b, 0.0);
        proto_put_str(&b, "cpu_time");
        proto_put_double(&b, 0.0);
        proto_put_str(&b, "truncated");
        proto_put_bool(&b, false);
        proto_put_str(&b, "state_lost");
        proto_put_bool(&b, true);
        proto_put_str(&b, "cause");
        proto_put_str(&b, cause);
    } else {
        rt_msg_err(&b, f->re, f->re_len, "lost", "the request's host was lost: %s", cause);
    }
    rt_out_deliver(l->client, &l->out, &b);
    proto_buf_free(&b);
}

/* The lost hook (rt_host_on_lost): every request in flight to h ends with
 * exactly one terminal reply, and h's links are closed. */
static void host_lost(void *unused, rt_host *h, const char *cause)
{
    (void)unused;
    for (rt_link *l = all; l; l = l->next_all) {
        if (l->host != h)
            continue;
        /* Oldest first: the list is newest first. */
        rt_fl *rev = NULL;
        while (l->fl) {
            rt_fl *f = l->fl;
            l->fl = f->next;
            f->next = rev;
            rev = f;
        }
        while (rev) {
            rt_fl *f = rev;
            rev = f->next;
            if (f->kind == RT_FL_CREATE || f->kind == RT_FL_FORK) {
                rt_entry *e = rt_cat_get(f->ctx);
                if (e && e->state != RT_CTX_LIVE)
                    rt_cat_del(f->ctx);
            }
            if (!own(f->kind))
                end_lost(l, f, cause);
            else if (f->kind == RT_FL_INTERNAL)
                made_fn(f->ctx, NULL);
            free(f);
        }
        l->nfl = 0;
        l->cut = 0;
        l->cut_asked = 0;
        close_sock(l);
    }
}

void rt_link_close_client(rt_client *c)
{
    for (rt_link **p = &all; *p;) {
        rt_link *l = *p;
        if (l->client != c) {
            p = &l->next_all;
            continue;
        }
        *p = l->next_all;
        close_sock(l);
        while (l->fl) {
            rt_fl *f = l->fl;
            l->fl = f->next;
            free(f);
        }
        rt_out_clear(&l->out);
        c->links[l->host->idx] = NULL;
        free(l);
    }
}
