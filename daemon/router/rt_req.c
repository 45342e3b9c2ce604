/* rt_req: client requests. The router answers hello, stats and ctx.list
 * itself (ctx.list merges what the live hosts list, keeping the contexts
 * the catalog records there), places ctx.create, keeps ctx.fork on its
 * source's host, and forwards every other request to its context's host,
 * pinned to that host's instance. A request naming a context makes no
 * catalog entry, except `default`, which PROTOCOL.md makes on first use. */
#include "rt_req.h"

#include "rt_auth.h"
#include "rt_etcd.h"
#include "rt_info.h"
#include "rt_link.h"
#include "rt_msg.h"

#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NCLIENTS 1024
static rt_client *clients[NCLIENTS];
static uint64_t n_requests, n_forwarded, n_refused;
static bool fetched_once; /* re-handling a request after an etcd look-up */
static void drop_waiting(rt_client *c);

/* The state of one request being handled. */
typedef struct req {
    rt_client *c;
    const proto_val *msg;
    const char *type;
    uint8_t re[PROTO_MAX_ID + 8];
    size_t re_len;
    const uint8_t *data;
    size_t len;
} req;

static size_t route_hash(int sock, const uint8_t *r, size_t n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)sock;
    for (size_t i = 0; i < n; i++)
        h = (h ^ r[i]) * 1099511628211ull;
    return (size_t)(h % NCLIENTS);
}

/* The client of a routing id; a new key on the same id is a new client. */
static rt_client *get_client(int sock, const uint8_t *route, size_t len, const char *key)
{
    size_t b = route_hash(sock, route, len);
    rt_client *c = clients[b];
    while (c && (c->sock != sock || c->route_len != len || memcmp(c->route, route, len) != 0))
        c = c->next;
    if (c && strcmp(c->key, key) != 0) {
        drop_waiting(c);
        rt_link_close_client(c);
        rt_out_clear(&c->out);
        c->gone = false;
        snprintf(c->key, sizeof c->key, "%s", key);
        rt_auth_client(key, c->tenant, &c->bounds);
    }
    if (!c) {
        c = mem_calloc(1, sizeof *c);
        c->sock = sock;
        memcpy(c->route, route, len);
        c->route_len = len;
        snprintf(c->key, sizeof c->key, "%s", key);
        rt_auth_client(key, c->tenant, &c->bounds);
        c->next = clients[b];
        clients[b] = c;
    }
    c->gone = false;
    c->last_active = rt_now();
    return c;
}

/* The client-side name a request gives in field key (default "default"
 * when dflt), made host-side; false after an err reply. */
static bool name_of(req *r, const char *key, bool dflt, char out[PROTO_MAX_NAME + 1], bool *absent)
{
    const proto_val *v = proto_map_get(r->msg, key);
    *absent = !v || v->kind == PROTO_NIL;
    if (*absent && !dflt) {
        rt_reply_err(r->c, r->re, r->re_len, "bad_field", "'%s' is required", key);
        return false;
    }
    const char *s = *absent ? "default" : v->as.s;
    size_t n = *absent ? 7 : v->n;
    if (!*absent && v->kind != PROTO_STR) {
        rt_reply_err(r->c, r->re, r->re_len, "bad_field", "'%s' must be a str", key);
        return false;
    }
    size_t t = r->c->tenant[0] ? strlen(r->c->tenant) + 1 : 0;
    if (!proto_name_valid(s, n) || n + t > PROTO_MAX_NAME) {
        rt_reply_err(r->c, r->re, r->re_len, "bad_name",
                     "'%s' must be 1-%zu bytes of [A-Za-z0-9_.-], not starting with '.' or '-'",
                     key, PROTO_MAX_NAME - t);
        return false;
    }
    if (!r->c->tenant[0] && rt_cfg.tenants && memchr(s, '.', n)) {
        /* TENANT.NAME is a tenant's name on the hosts: never another's. */
        rt_reply_err(r->c, r->re, r->re_len, "bad_name",
                     "'%s': names with '.' are the tenants' on this router", key);
        return false;
    }
    rt_msg_hostname(r->c, s, n, out);
    return true;
}

/* Encodes the request for host h: names host-side, pinned to instance. */
static void encode(req *r, proto_buf *b, const char *ctx, const char *name, const char *instance)
{
    rt_sub subs[3];
    size_t n = 0;
    if (ctx)
        subs[n++] = (rt_sub){.key = "ctx", .str = ctx};
    if (name)
        subs[n++] = (rt_sub){.key = "name", .str = name};
    subs[n++] = (rt_sub){.key = "instance", .str = instance};
    rt_msg_rewrite(b, r->msg, subs, n);
}

static void reply_lost(req *r, const rt_entry *e)
{
    const char *cn = rt_msg_clientname(r->c, e->name);
    rt_reply_err(r->c, r->re, r->re_len, "lost", "context '%s' was lost: %s", cn ? cn : e->name,
                 e->cause);
}

/* The live entry of a host-side name, or NULL after an err reply. A
 * recorded host that restarted since marks the entry lost here too. */
static rt_entry *live_entry(req *r, const char *name)
{
    rt_entry *e = rt_cat_get(name);
    if (!e) {
        const char *cn = rt_msg_clientname(r->c, name);
        rt_reply_err(r->c, r->re, r->re_len, "unknown_context", "no context named '%s'",
                     cn ? cn : name);
        return NULL;
    }
    rt_host *h = &rt_hosts[e->host];
    if (e->state != RT_CTX_LOST && h->state == RT_HOST_LIVE && strcmp(h->instance, e->instance)) {
        rt_cat_set_state(e, RT_CTX_LOST);
        snprintf(e->cause, sizeof e->cause, "host %s restarted (instance %.8s is gone)",
                 h->endpoint, e->instance);
        rt_cat_save(e);
        rt_host_fence(h, e);
    }
    if (e->state == RT_CTX_LOST) {
        reply_lost(r, e);
        return NULL;
    }
    if (h->state != RT_HOST_LIVE) {
        rt_reply_err(r->c, r->re, r->re_len, "lost", "host %s of context '%s' is not answering",
                     h->endpoint, name);
        return NULL;
    }
    return e;
}

/* A request parked while etcd is asked for a name this router lacks. */
typedef struct parked {
    rt_client *c;
    proto_buf data;
} parked;

static void handle(rt_client *c, const uint8_t *data, size_t len);

static void unpark(void *arg, rt_entry *e)
{
    (void)e;
    parked *p = arg;
    fetched_once = true;
    handle(p->c, p->data.data, p->data.len);
    fetched_once = false;
    proto_buf_free(&p->data);
    free(p);
}

/* False when the request was parked for an etcd look-up of name. */
static bool known_or_fetch(req *r, const char *name)
{
    if (rt_cat_get(name) || !rt_etcd_on() || fetched_once)
        return true;
    parked *p = mem_calloc(1, sizeof *p);
    p->c = r->c;
    proto_buf_append(&p->data, r->data, r->len);
    rt_cat_fetch(name, unpark, p);
    return false;
}

static int kind_of(const char *type)
{
    if (strcmp(type, "execute") == 0)
        return RT_FL_EXECUTE;
    if (strcmp(type, "ctx.delete") == 0)
        return RT_FL_DELETE;
    if (strcmp(type, "ctx.restart") == 0)
        return RT_FL_RESTART;
    return RT_FL_OTHER;
}

/* Requests naming a `default` the router is making, in arrival order. */
typedef struct waiting {
    struct waiting *next;
    rt_client *c;
    char name[PROTO_MAX_NAME + 1];
    uint8_t re[PROTO_MAX_ID + 8];
    size_t re_len;
    proto_buf data;
} waiting;
static waiting *waitings;

static bool making(const char *name)
{
    for (waiting *w = waitings; w; w = w->next)
        if (strcmp(w->name, name) == 0)
            return true;
    return false;
}

static void wait_default(req *r, const char *name)
{
    waiting *w = mem_calloc(1, sizeof *w), **p = &waitings;
    w->c = r->c;
    snprintf(w->name, sizeof w->name, "%s", name);
    memcpy(w->re, r->re, r->re_len);
    w->re_len = r->re_len;
    proto_buf_append(&w->data, r->data, r->len);
    while (*p)
        p = &(*p)->next;
    *p = w;
}

/* Forgets what client c left waiting (its key changed: a new client). */
static void drop_waiting(rt_client *c)
{
    for (waiting **p = &waitings; *p;) {
        waiting *w = *p;
        if (w->c != c) {
            p = &w->next;
            continue;
        }
        *p = w->next;
        proto_buf_free(&w->data);
        free(w);
    }
}

void rt_req_default_made(const char *name, const proto_val *reply)
{
    const proto_val *t = reply ? proto_map_get(reply, "t") : NULL;
    const proto_val *code = reply ? proto_map_get(reply, "code") : NULL;
    const proto_val *msg = reply ? proto_map_get(reply, "message") : NULL;
    /* `exists`: the host has a `default` already (made before the catalog
     * knew it): the client's, as before. */
    bool ok = t && (proto_str_eq(t, "ok") || proto_str_eq(code, "exists"));
    rt_entry *e = rt_cat_get(name);
    if (e && e->state == RT_CTX_PENDING) {
        if (ok) {
            const proto_val *info = proto_map_get(reply, "ctx"), *inc = NULL;
            inc = info && info->kind == PROTO_MAP ? proto_map_get(info, "incarnation") : NULL;
            e->incarnation = inc && inc->kind == PROTO_UINT ? inc->as.u : 1;
            rt_cat_set_state(e, RT_CTX_LIVE);
            rt_cat_save(e);
        } else {
            rt_cat_del(name);
        }
    }
    waiting *mine = NULL, **tail = &mine;
    for (waiting **p = &waitings; *p;) {
        waiting *w = *p;
        if (strcmp(w->name, name) != 0) {
            p = &w->next;
            continue;
        }
        *p = w->next;
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    while (mine) {
        waiting *w = mine;
        mine = w->next;
        char cbuf[33];
        snprintf(cbuf, sizeof cbuf, "%.*s",
                 code && code->kind == PROTO_STR ? (int)(code->n > 32 ? 32 : code->n) : 11,
                 code && code->kind == PROTO_STR ? code->as.s : "unavailable");
        if (strcmp(cbuf, "instance") == 0) /* its host restarted meanwhile */
            snprintf(cbuf, sizeof cbuf, "lost");
        bool has_msg = msg && msg->kind == PROTO_STR;
        if (ok)
            handle(w->c, w->data.data, w->data.len);
        else
            rt_reply_err(w->c, w->re, w->re_len, cbuf,
                         "the router could not make context 'default' within this client's "
                         "bounds: %.*s",
                         has_msg ? (int)(msg->n > 200 ? 200 : msg->n) : 35,
                         has_msg ? msg->as.s : "its host was lost or did not answer");
        proto_buf_free(&w->data);
        free(w);
    }
}

/* The router's own ctx.create of a client's `default` on h: the client's
 * default tier, its capped policy fields set. */
static void make_default(rt_client *c, rt_host *h, const char *name)
{
    proto_val none = {.kind = PROTO_MAP, .n = 0};
    proto_buf tier, pol, b, re;
    proto_buf_init(&tier);
    proto_buf_init(&pol);
    proto_buf_init(&b);
    proto_buf_init(&re);
    char why[256];
    if (!rt_bound_create(&c->bounds, &none, &tier, &pol, why, sizeof why))
        fatal("rt_req: a client's own bounds refused its default: %s", why);
    proto_put_map(&b, 7);
    proto_put_str(&b, "v");
    proto_put_uint(&b, PROTO_VERSION);
    proto_put_str(&b, "t");
    proto_put_str(&b, "ctx.create");
    proto_put_str(&b, "id");
    proto_put_str(&b, RT_OWN_ID "default");
    proto_put_str(&b, "name");
    proto_put_str(&b, name);
    proto_put_str(&b, "instance");
    proto_put_str(&b, h->instance);
    proto_put_str(&b, "tier");
    proto_buf_append(&b, tier.data, tier.len);
    proto_put_str(&b, "policy");
    proto_buf_append(&b, pol.data, pol.len);
    proto_put_str(&re, RT_OWN_ID "default");
    rt_link_forward(c, h, &b, re.data, re.len, RT_FL_INTERNAL, name);
    proto_buf_free(&tier);
    proto_buf_free(&pol);
    proto_buf_free(&b);
    proto_buf_free(&re);
}

/* Requests that name a context (`ctx`; default "default" unless
 * required) go to its recorded host. */
static void do_named(req *r, bool required)
{
    char name[PROTO_MAX_NAME + 1];
    bool absent;
    if (!name_of(r, "ctx", !required, name, &absent))
        return;
    if (!known_or_fetch(r, name))
        return;
    rt_entry *e = rt_cat_get(name);
    const char *cn = rt_msg_clientname(r->c, name);
    bool is_default = cn && strcmp(cn, "default") == 0;
    if (e && e->state == RT_CTX_LOST && strcmp(r->type, "ctx.delete") == 0) {
        rt_cat_del(name); /* forgetting a lost context is what was asked */
        proto_buf b;
        proto_buf_init(&b);
        rt_msg_begin(&b, "ok", r->re, r->re_len, 0);
        rt_out_deliver(r->c, &r->c->out, &b);
        proto_buf_free(&b);
        return;
    }
    if (!e && is_default && strcmp(r->type, "ctx.delete") != 0 &&
        strcmp(r->type, "ctx.renew") != 0) {
        /* PROTOCOL.md makes `default` on first use: placed like a create. */
        rt_host *h = rt_host_place();
        if (!h) {
            rt_reply_err(r->c, r->re, r->re_len, "unavailable", "%s", rt_host_why_none());
            return;
        }
        /* Made by the router, with the client's tier and bounds (a host
         * would make it unsafe, and makes only its own `default`), and the
         * request handled once it is made: were it sent behind the create,
         * a create that failed would leave the host to make it unsafe. */
        rt_cat_put(name, h->idx, h->instance, RT_CTX_PENDING);
        make_default(r->c, h, name);
        wait_default(r, name);
        return;
    }
    if (e && e->state == RT_CTX_PENDING && making(name)) {
        wait_default(r, name);
        return;
    }
    if (!(e = live_entry(r, name)))
        return;
    rt_host *h = &rt_hosts[e->host];
    proto_buf b;
    proto_buf_init(&b);
    encode(r, &b, name, NULL, e->instance);
    rt_link_forward(r->c, h, &b, r->re, r->re_len, kind_of(r->type), name);
    n_forwarded++;
    proto_buf_free(&b);
}

static void do_ctx_optional(req *r)
{
    do_named(r, false);
}

static void do_ctx_required(req *r)
{
    do_named(r, true);
}

/* A generated name: ctx- and 12 hex digits, unused in the catalog. */
static void gen_name(rt_client *c, char out[PROTO_MAX_NAME + 1])
{
    for (;;) {
        char s[20];
        snprintf(s, sizeof s, "ctx-%06lx%06lx", (unsigned long)(random() & 0xffffff),
                 (unsigned long)(random() & 0xffffff));
        rt_msg_hostname(c, s, strlen(s), out);
        if (!rt_cat_get(out))
            return;
    }
}

/* The new name of a create or fork (`name`, or generated); false after an
 * err reply. */
static bool new_name(req *r, char out[PROTO_MAX_NAME + 1])
{
    bool absent;
    const proto_val *v = proto_map_get(r->msg, "name");
    if (!v || v->kind == PROTO_NIL) {
        gen_name(r->c, out);
        return true;
    }
    if (!name_of(r, "name", false, out, &absent))
        return false;
    if (!known_or_fetch(r, out))
        return false;
    rt_entry *e = rt_cat_get(out);
    if (e && e->state != RT_CTX_LOST) {
        rt_reply_err(r->c, r->re, r->re_len, "exists", "a context named '%.*s' exists", (int)v->n,
                     v->as.s);
        return false;
    }
    return true;
}

/* from_snapshot "CTX/NAME": CTX is one of the client's own contexts (its
 * tenant's name on the hosts), whose host holds the snapshot. False after
 * an err reply; *src NULL when the request has none. */
static bool snapshot_of(req *r, rt_entry **src, char out[2 * PROTO_MAX_NAME + 2])
{
    *src = NULL;
    const proto_val *v = proto_map_get(r->msg, "from_snapshot");
    if (!v || v->kind == PROTO_NIL)
        return true;
    const char *slash = v->kind == PROTO_STR ? memchr(v->as.s, '/', v->n) : NULL;
    size_t cn = slash ? (size_t)(slash - v->as.s) : 0, sn = slash ? v->n - cn - 1 : 0;
    size_t t = r->c->tenant[0] ? strlen(r->c->tenant) + 1 : 0;
    if (!slash || !proto_name_valid(v->as.s, cn) || cn + t > PROTO_MAX_NAME ||
        !proto_name_valid(slash + 1, sn)) {
        rt_reply_err(r->c, r->re, r->re_len, "bad_name",
                     "'from_snapshot' must be \"CTX/NAME\", CTX one of this client's contexts");
        return false;
    }
    if (!r->c->tenant[0] && rt_cfg.tenants && memchr(v->as.s, '.', cn)) {
        rt_reply_err(r->c, r->re, r->re_len, "bad_name",
                     "'from_snapshot': names with '.' are the tenants' on this router");
        return false;
    }
    char host_ctx[PROTO_MAX_NAME + 1];
    rt_msg_hostname(r->c, v->as.s, cn, host_ctx);
    if (!known_or_fetch(r, host_ctx))
        return false;
    if (!(*src = live_entry(r, host_ctx)))
        return false;
    snprintf(out, 2 * PROTO_MAX_NAME + 2, "%s/%.*s", host_ctx, (int)sn, slash + 1);
    return true;
}

/* ctx.create: within the client's bounds (rt_bound.c), its tier and capped
 * policy fields set for the host; placed, or with from_snapshot on the
 * host of the snapshot's context. */
static void do_create(req *r)
{
    char name[PROTO_MAX_NAME + 1], why[256], snap[2 * PROTO_MAX_NAME + 2];
    proto_buf tier, pol;
    proto_buf_init(&tier);
    proto_buf_init(&pol);
    if (!rt_bound_create(&r->c->bounds, r->msg, &tier, &pol, why, sizeof why)) {
        n_refused++;
        rt_reply_err(r->c, r->re, r->re_len, "forbidden", "%s", why);
        goto out;
    }
    rt_entry *src;
    if (!snapshot_of(r, &src, snap) || !new_name(r, name))
        goto out;
    rt_host *h = src ? &rt_hosts[src->host] : rt_host_place();
    if (!h) {
        rt_reply_err(r->c, r->re, r->re_len, "unavailable", "%s", rt_host_why_none());
        goto out;
    }
    rt_cat_put(name, h->idx, h->instance, RT_CTX_PENDING);
    rt_sub subs[] = {{.key = "name", .str = name},
                     {.key = "instance", .str = h->instance},
                     {.key = "tier", .raw = &tier},
                     {.key = "policy", .raw = &pol},
                     {.key = "from_snapshot", .str = src ? snap : NULL, .drop = !src}};
    proto_buf b;
    proto_buf_init(&b);
    rt_msg_rewrite(&b, r->msg, subs, sizeof subs / sizeof subs[0]);
    rt_link_forward(r->c, h, &b, r->re, r->re_len, RT_FL_CREATE, name);
    n_forwarded++;
    proto_buf_free(&b);
out:
    proto_buf_free(&tier);
    proto_buf_free(&pol);
}

/* ctx.fork: the copy lives on its source's host (a fork is a process
 * fork), recorded there. */
static void do_fork(req *r)
{
    char src[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    bool absent;
    if (!name_of(r, "ctx", false, src, &absent) || !known_or_fetch(r, src))
        return;
    rt_entry *s = live_entry(r, src);
    if (!s || !new_name(r, name))
        return;
    rt_host *h = &rt_hosts[s->host];
    rt_cat_put(name, h->idx, h->instance, RT_CTX_PENDING);
    proto_buf b;
    proto_buf_init(&b);
    encode(r, &b, src, name, s->instance);
    rt_link_forward(r->c, h, &b, r->re, r->re_len, RT_FL_FORK, name);
    n_forwarded++;
    proto_buf_free(&b);
}

/* hello and stats: rt_info. */
static void do_hello(req *r)
{
    rt_info_hello(r->c, r->re, r->re_len);
}

static void do_stats(req *r)
{
    const uint64_t counters[3] = {n_requests, n_forwarded, n_refused};
    rt_info_stats(r->c, r->re, r->re_len, counters);
}

/* ---- ctx.list: every live host asked, the answers merged ------------- */
typedef struct item {
    char name[PROTO_MAX_NAME + 1];
    proto_buf info;
} item;
typedef struct listing {
    rt_client *c;
    uint8_t re[PROTO_MAX_ID + 8];
    size_t re_len;
    int waiting;
    item *items;
    size_t n, cap;
} listing;

static item *add_item(listing *l, const char *name)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->items = mem_realloc(l->items, l->cap * sizeof *l->items);
    }
    item *it = &l->items[l->n++];
    snprintf(it->name, sizeof it->name, "%s", name);
    proto_buf_init(&it->info);
    return it;
}

static void add_lost(rt_entry *e, void *arg)
{
    listing *l = arg;
    const char *cn = e->state == RT_CTX_LOST ? rt_msg_clientname(l->c, e->name) : NULL;
    if (!cn)
        return;
    item *it = add_item(l, cn);
    proto_buf *b = &it->info;
    proto_put_map(b, 7);
    proto_put_str(b, "name");
    proto_put_str(b, cn);
    proto_put_str(b, "state");
    proto_put_str(b, "lost");
    proto_put_str(b, "pid");
    proto_put_uint(b, 0);
    proto_put_str(b, "incarnation");
    proto_put_uint(b, e->incarnation);
    proto_put_str(b, "execution_count");
    proto_put_uint(b, 0);
    proto_put_str(b, "queued");
    proto_put_uint(b, 0);
    proto_put_str(b, "last_death");
    proto_put_str(b, e->cause);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const item *)a)->name, ((const item *)b)->name);
}

static void list_done(listing *l)
{
    rt_cat_each(add_lost, l);
    qsort(l->items, l->n, sizeof *l->items, by_name);
    proto_buf b;
    proto_buf_init(&b);
    rt_msg_begin(&b, "ok", l->re, l->re_len, 1);
    proto_put_str(&b, "contexts");
    proto_put_array(&b, (uint32_t)l->n);
    for (size_t i = 0; i < l->n; i++) {
        proto_buf_append(&b, l->items[i].info.data, l->items[i].info.len);
        proto_buf_free(&l->items[i].info);
    }
    rt_out_deliver(l->c, &l->c->out, &b);
    proto_buf_free(&b);
    free(l->items);
    free(l);
}

static void list_cb(void *arg, rt_host *h, const proto_val *m)
{
    listing *l = arg;
    const proto_val *cs = m ? proto_map_get(m, "contexts") : NULL;
    for (uint32_t i = 0; cs && cs->kind == PROTO_ARRAY && i < cs->n; i++) {
        const proto_val *info = &cs->as.items[i], *nm = proto_map_get(info, "name");
        if (!nm || nm->kind != PROTO_STR || nm->n > PROTO_MAX_NAME)
            continue;
        char name[PROTO_MAX_NAME + 1];
        memcpy(name, nm->as.s, nm->n);
        name[nm->n] = '\0';
        rt_entry *e = rt_cat_get(name);
        const char *cn = rt_msg_clientname(l->c, name);
        /* Only what the catalog records on this instance: a context a
         * fenced instance or another tenant holds is not the client's. */
        if (!cn || !e || e->host != h->idx || e->state != RT_CTX_LIVE ||
            strcmp(e->instance, h->instance) != 0)
            continue;
        item *it = add_item(l, cn);
        rt_sub s = {.key = "name", .str = cn};
        rt_msg_rewrite(&it->info, info, &s, 1);
    }
    if (--l->waiting == 0)
        list_done(l);
}

static void do_list(req *r)
{
    listing *l = mem_calloc(1, sizeof *l);
    l->c = r->c;
    memcpy(l->re, r->re, r->re_len);
    l->re_len = r->re_len;
    l->waiting = 1;
    for (size_t i = 0; i < rt_nhosts; i++)
        if (rt_hosts[i].state == RT_HOST_LIVE) {
            l->waiting++;
            rt_host_ctl(&rt_hosts[i], "ctx.list", NULL, true, list_cb, l);
        }
    if (--l->waiting == 0)
        list_done(l);
}

typedef struct kind {
    const char *type;
    void (*handle)(req *r);
} kind;

static const kind kinds[] = {
    {"hello", do_hello},
    {"stats", do_stats},
    {"ctx.list", do_list},
    {"ctx.create", do_create},
    {"ctx.fork", do_fork},
    {"execute", do_ctx_optional},
    {"interrupt", do_ctx_optional},
    {"input.reply", do_ctx_optional},
    {"file.put", do_ctx_optional},
    {"file.get", do_ctx_optional},
    {"pip.install", do_ctx_optional},
    {"complete", do_ctx_optional},
    {"inspect", do_ctx_optional},
    {"is_complete", do_ctx_optional},
    {"ctx.delete", do_ctx_required},
    {"ctx.restart", do_ctx_required},
    {"ctx.renew", do_ctx_required},
    {"ctx.info", do_ctx_required},
};

static void handle(rt_client *c, const uint8_t *data, size_t len)
{
    req r = {.c = c, .data = data, .len = len};
    proto_val peeked;
    if (len > rt_cfg.max_request_bytes) {
        proto_buf reb;
        proto_buf_init(&reb);
        if (proto_peek_id(data, len, &peeked))
            proto_put_val(&reb, &peeked);
        rt_reply_err(c, reb.data, reb.len, "too_large",
                     "message of %zu bytes exceeds max_request_bytes (%zu)", len,
                     rt_cfg.max_request_bytes);
        proto_buf_free(&reb);
        return;
    }
    proto_doc doc;
    proto_error err;
    if (proto_decode(&doc, data, len, &err) < 0) {
        rt_reply_err(c, NULL, 0, err.code, "%s", err.msg);
        return;
    }
    r.msg = &doc.nodes[0];
    proto_envelope env;
    int ok = proto_envelope_read(r.msg, &env, &err);
    if (env.id) {
        proto_buf reb;
        proto_buf_init(&reb);
        proto_put_val(&reb, env.id);
        memcpy(r.re, reb.data, reb.len);
        r.re_len = reb.len;
        proto_buf_free(&reb);
    }
    if (ok < 0) {
        rt_reply_err(c, r.re, r.re_len, err.code, "%s", err.msg);
        proto_doc_free(&doc);
        return;
    }
    if (env.id && env.id->kind == PROTO_STR && env.id->n >= strlen(RT_OWN_ID) &&
        memcmp(env.id->as.s, RT_OWN_ID, strlen(RT_OWN_ID)) == 0) {
        rt_reply_err(c, r.re, r.re_len, "bad_request",
                     "ids beginning '%s' are the router's own: use another id", RT_OWN_ID);
        proto_doc_free(&doc);
        return;
    }
    if (rt_link_held(c) >= RT_CLIENT_HELD + (64u << 10)) {
        /* Past its bound and 64 KiB of refusals: not even a refusal is
         * held for a client that does not read (ctxd's rule, section 7). */
        n_refused++;
        proto_doc_free(&doc);
        return;
    }
    if (rt_link_held(c) >= RT_CLIENT_HELD) {
        n_refused++;
        rt_reply_err(c, r.re, r.re_len, "busy",
                     "%zu bytes of replies to this client are unread: read them first",
                     rt_link_held(c));
        proto_doc_free(&doc);
        return;
    }
    const kind *k = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !k; i++)
        if (proto_str_eq(env.type, kinds[i].type))
            k = &kinds[i];
    if (!k) {
        rt_reply_err(c, r.re, r.re_len, "unknown_type", "unknown message type '%.*s'",
                     (int)(env.type->n > 64 ? 64 : env.type->n), env.type->as.s);
    } else {
        r.type = k->type;
        k->handle(&r);
    }
    proto_doc_free(&doc);
}

void rt_req_handle(int sock, const uint8_t *route, size_t route_len, const char *key,
                   const uint8_t *data, size_t len)
{
    if (route_len > RT_MAX_ROUTE)
        return;
    rt_client *c = get_client(sock, route, route_len, key);
    n_requests++;
    handle(c, data, len);
}

bool rt_req_flush(void *unused __attribute__((unused)))
{
    bool empty = true;
    for (size_t b = 0; b < NCLIENTS; b++)
        for (rt_client *c = clients[b]; c; c = c->next)
            if (!rt_out_flush(c, &c->out))
                empty = false;
    return empty;
}

/* Forgets clients gone or silent for 10 minutes with nothing in flight
 * (their links closed: a host sees them disconnect). */
void rt_req_tick(void *unused __attribute__((unused)), double now)
{
    static double last;
    if (now - last < 5.0)
        return;
    last = now;
    for (size_t b = 0; b < NCLIENTS; b++) {
        for (rt_client **p = &clients[b]; *p;) {
            rt_client *c = *p;
            bool idle = !c->out.head && now - c->last_active > 600.0;
            for (size_t i = 0; idle && i < rt_nhosts; i++)
                idle = !c->links[i] || (!c->links[i]->fl && !c->links[i]->out.head);
            if (!idle) {
                p = &c->next;
                continue;
            }
            *p = c->next;
            rt_link_close_client(c);
            free(c);
        }
    }
}
