/* rt: ctxd-router's shared types. The router speaks PROTOCOL.md to clients
 * and forwards each request naming a context to the one ctxd instance its
 * catalog records for it (README.md here). Each part has its own file:
 *   rt_main.c   command line, wiring
 *   rt_loop.c   the epoll loop over ZeroMQ sockets, signals, etcd, timers
 *   rt_auth.c   the router's key pair, the clients' ZAP handler, tenants
 *   rt_bound.c  what each client may ask the hosts for (tier, cwd, policy)
 *   rt_msg.c    msgpack rewriting (ids, names, instance pins)
 *   rt_out.c    queues of messages to clients (bounded, in order)
 *   rt_cat.c    the catalog: context -> host, instance, incarnation
 *   rt_etcd.c   a non-blocking client of etcd's v3 JSON gateway
 *   rt_host.c   hosts: liveness, instance, load, loss and fencing
 *   rt_link.c   one DEALER per (client, host): forwarding and in-flight
 *   rt_req.c    client requests, dispatched by a table */
#ifndef CTXD_RT_H
#define CTXD_RT_H

#include "proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RT_MAX_HOSTS 64
#define RT_KEY_Z85 40
#define RT_INSTANCE 32
#define RT_MAX_ROUTE 256
/* Bytes held for one client (its queues and its requests waiting for a
 * host), past which its requests get `err busy` and its links are not read. */
#define RT_CLIENT_HELD (16u << 20)
#define RT_HWM 64

typedef struct rt_config {
    const char *listen[8];
    size_t nlisten;
    const char *hosts[RT_MAX_HOSTS];
    size_t nhosts;
    const char *state_dir;
    const char *host_key; /* the hosts' server public key (or its file) */
    const char *tenants;  /* file: "CLIENTKEY TENANT" lines */
    const char *etcd;     /* http://127.0.0.1:2379 or NULL */
    const char *etcd_prefix;
    double liveness;     /* seconds between hellos to each host */
    double liveness_max; /* no answer this long: the host is lost */
    size_t max_request_bytes;
} rt_config;
extern rt_config rt_cfg;
extern char rt_instance[RT_INSTANCE + 1];

double rt_now(void);
void rt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- rt_out: a FIFO of messages for one client ------------------------ */
typedef struct rt_outmsg {
    struct rt_outmsg *next;
    proto_buf body;
} rt_outmsg;
typedef struct rt_outq {
    rt_outmsg *head, *tail;
    size_t bytes;
} rt_outq;

/* ---- rt_bound: a client's bounds -------------------------------------- */
enum { RT_TIER_STATIC, RT_TIER_UNSAFE, RT_TIER_LOCAL, RT_TIER_SANDBOX, RT_NTIERS };
#define RT_MAX_ROOTS 8
#define RT_MAX_PATH 256
#define RT_NCAPS 7
#define RT_NBOOLS 3
typedef struct rt_bounds {
    unsigned tiers;                        /* bit per RT_TIER_* it may ask for */
    int dflt;                              /* the tier of a create that names none */
    char roots[RT_MAX_ROOTS][RT_MAX_PATH]; /* its cwd may lie under these */
    size_t nroots;
    double cap[RT_NCAPS]; /* timeout, cpu_seconds, memory_bytes, ... */
    bool capped[RT_NCAPS];
    bool no[RT_NBOOLS]; /* network_access, subprocess_execution, env_var_access stay false */
} rt_bounds;
/* The bounds of a client no line names: sandbox only, no cwd, no caps. */
void rt_bound_default(rt_bounds *b);
/* Adds one tenants-file option (tiers=A,B cwd=/D,/E FIELD=MAX FIELD=false)
 * to b; false when opt is not one. */
bool rt_bound_option(rt_bounds *b, const char *opt);
/* Checks ctx.create msg against b: false (why filled, naming the field)
 * when it asks for more; else the tier to send (a str) in tier_out and the
 * policy (a map, capped fields set) in policy_out. */
bool rt_bound_create(const rt_bounds *b, const proto_val *msg, proto_buf *tier_out,
                     proto_buf *policy_out, char *why, size_t whylen);

typedef struct rt_client rt_client;
typedef struct rt_host rt_host;
typedef struct rt_link rt_link;

/* ---- clients (rt_req.c) ------------------------------------------------ */
struct rt_client {
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
};

/* ---- rt_out ------------------------------------------------------------ */
void rt_out_sockets(void *plain, void *curve);
/* Sends at once when q is empty and the client takes it, else queues. */
void rt_out_deliver(rt_client *c, rt_outq *q, const proto_buf *body);
/* Sends what q holds; true when it is empty. */
bool rt_out_flush(rt_client *c, rt_outq *q);
void rt_out_clear(rt_outq *q);
size_t rt_out_held(const rt_client *c);

/* ---- rt_msg ------------------------------------------------------------ */
/* A field to set when rewriting a map: str value, or NULL to drop it. */
typedef struct rt_sub {
    const char *key;
    const char *str;
    const proto_val *val; /* used when str is NULL and val is set */
    const proto_buf *raw; /* msgpack bytes, used when str and val are NULL */
    bool drop;
} rt_sub;
/* Re-encodes map msg with subs applied (absent keys appended). */
void rt_msg_rewrite(proto_buf *b, const proto_val *msg, const rt_sub *subs, size_t nsubs);
/* {v, t, re} head of a router message; caller adds nfields pairs. */
void rt_msg_begin(proto_buf *b, const char *type, const uint8_t *re, size_t re_len,
                  uint32_t nfields);
void rt_msg_err(proto_buf *b, const uint8_t *re, size_t re_len, const char *code, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
/* An `err` to client c (its own queue). */
void rt_reply_err(rt_client *c, const uint8_t *re, size_t re_len, const char *code, const char *fmt,
                  ...) __attribute__((format(printf, 5, 6)));
/* Host-side name of a client's context name: the tenant prefix added. */
void rt_msg_hostname(const rt_client *c, const char *name, size_t n, char out[PROTO_MAX_NAME + 1]);
/* The client-side name, or NULL when host_name is not the tenant's. */
const char *rt_msg_clientname(const rt_client *c, const char *host_name);

/* ---- rt_cat: the catalog ----------------------------------------------- */
enum { RT_CTX_PENDING, RT_CTX_LIVE, RT_CTX_LOST };
typedef struct rt_entry {
    struct rt_entry *next; /* hash chain */
    char name[PROTO_MAX_NAME + 1];
    int host;
    char instance[RT_INSTANCE + 1];
    uint64_t incarnation;
    int state;
    char cause[256];
} rt_entry;
rt_entry *rt_cat_get(const char *name);
rt_entry *rt_cat_put(const char *name, int host, const char *instance, int state);
void rt_cat_del(const char *name);
/* Saves an entry's current value to etcd (when configured). */
void rt_cat_save(const rt_entry *e);
/* Calls fn for every entry (fn may change, not delete, it). */
void rt_cat_each(void (*fn)(rt_entry *e, void *arg), void *arg);
/* Changes an entry's state: the counts (stats) follow; never assign it. */
void rt_cat_set_state(rt_entry *e, int state);
size_t rt_cat_count(int state);
/* Loads the catalog from etcd; *done is set when it has been read. */
void rt_cat_load(bool *done);
/* Looks name up in etcd (another router may have made it): fn gets the
 * entry, or NULL. */
void rt_cat_fetch(const char *name, void (*fn)(void *arg, rt_entry *e), void *arg);
void rt_cat_set_pack(const uint8_t *v, size_t n, const char *name);

/* ---- rt_etcd ----------------------------------------------------------- */
typedef void (*rt_etcd_cb)(void *arg, const char *json, size_t len);
void rt_etcd_open(const char *url);
bool rt_etcd_on(void);
void rt_etcd_put(const char *key, const void *val, size_t n);
void rt_etcd_del(const char *key);
/* Range read of key (prefix: every key starting with it); cb gets the
 * response body (NULL on failure after retries are exhausted: never). */
void rt_etcd_range(const char *key, bool prefix, rt_etcd_cb cb, void *arg);
/* Each kv of a range response: fn(key, value). */
void rt_etcd_kvs(const char *json, size_t len,
                 void (*fn)(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn),
                 void *arg);
void rt_etcd_io(void);
int rt_etcd_fd(uint32_t *events);
bool rt_etcd_busy(void);

/* ---- rt_host ----------------------------------------------------------- */
enum { RT_HOST_UNKNOWN, RT_HOST_LIVE, RT_HOST_LOST };
struct rt_host {
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
};
extern rt_host rt_hosts[RT_MAX_HOSTS];
extern size_t rt_nhosts;
void rt_host_open(void *zctx);
/* Sets CurveZMQ client options for a socket to host h. */
void rt_host_curve(void *sock);
void rt_host_tick(double now);
void rt_host_read(rt_host *h);
void rt_host_read_monitor(rt_host *h);
/* Why no host is live, for an `err unavailable` (an authentication
 * failure names itself). */
const char *rt_host_why_none(void);
/* A host for a new context: the less loaded of two sampled live ones;
 * NULL when none is live. */
rt_host *rt_host_place(void);
/* The host is lost (liveness failed or its instance changed). */
void rt_host_lost(rt_host *h, const char *cause);
/* Asks the host for its instance now (a request was refused as for
 * another instance). */
void rt_host_check(rt_host *h);
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

/* ---- rt_link ----------------------------------------------------------- */
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
void rt_link_init(void *zctx);
/* Forwards an encoded request to h for client c, tracking it in flight.
 * kind and ctx say what the reply changes in the catalog. */
void rt_link_forward(rt_client *c, rt_host *h, const proto_buf *req, const uint8_t *re,
                     size_t re_len, int kind, const char *ctx);
/* Reads every link that has messages and is not held back; true when
 * something was read. */
bool rt_link_serve(void);
bool rt_link_flush(void);
/* Ends every request in flight to h (exactly one terminal reply each) and
 * closes its links. */
void rt_link_host_lost(rt_host *h, const char *cause);
void rt_link_close_client(rt_client *c);
/* Ids of the router's own requests on a client's link begin with this; a
 * client may not use them (rt_req.c refuses them), so a reply is never
 * taken for the wrong one. */
#define RT_OWN_ID "ctxd-router:"
/* Sends the router's own request {type, id, field: ctx, instance} to h on
 * c's link, tracked as kind (RT_FL_INTERNAL or RT_FL_SETTLE). */
void rt_link_own(rt_client *c, rt_host *h, const char *type, const char *id, const char *field,
                 const char *ctx, int kind);

/* ---- rt_req ------------------------------------------------------------ */
void rt_req_handle(int sock, const uint8_t *route, size_t route_len, const char *key,
                   const uint8_t *data, size_t len);
bool rt_req_flush(void);
/* The reply to the router's own create of a client's `default` (host-side
 * name), or NULL when it has none (its host was lost, its connection cut):
 * the requests that waited for it are handled now, or refused. */
void rt_req_default_made(const char *name, const proto_val *reply);
void rt_req_tick(double now);
/* The reply of a host to a ctx.list the router fanned out. */
void rt_req_init(void);

/* ---- rt_loop ----------------------------------------------------------- */
/* A ZeroMQ socket made or about to be closed after the loop started (a
 * link, a host's new control socket): its ZMQ_FD is watched for its life. */
void rt_loop_watch(void *sock);
void rt_loop_unwatch(void *sock);
int rt_loop_open(void);
void rt_loop_run(void);

/* ---- rt_auth ----------------------------------------------------------- */
int rt_auth_setup(void *zctx, void *curve_router);
void *rt_auth_zap(void);
void rt_auth_handle(void);
const char *rt_auth_public(void);
const char *rt_auth_secret(void);
/* The tenant ("" for none) and bounds of a client key ("" for a client
 * of a plaintext socket). */
void rt_auth_client(const char *key, char tenant[33], rt_bounds *b);

#endif
