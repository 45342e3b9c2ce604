/* libctxd: the blocking client of the ctxd daemon. See ctxd.h for the
 * contract (ownership, threads, return codes) and proto/PROTOCOL.md for the
 * wire format. All msgpack goes through proto.h. */
#include "ctxd.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* Longest wait between two on_wait calls during ctxd_execute. */
#define WAIT_SLICE_MS 100

struct ctxd_client {
    void *zctx;
    void *sock;
    char *endpoint;
    uint64_t next_id;
    double timeout;             /* control reply timeout, seconds */
    double liveness;            /* silence before an execute pings the daemon; 0 = never */
    uint64_t daemon_pid;        /* from the last hello; 0 = unknown */
    uint64_t max_request_bytes; /* from the last hello; 0 = unknown */
    /* Allocations handed to the caller; freed when the next request starts. */
    void **owned;
    size_t nowned, capowned;
    int last_rc;
    char last_code[64];
    char last_msg[1024];
};

/* One decoded daemon message; strings in doc point into zmsg. */
typedef struct msg_in {
    zmq_msg_t zmsg;
    proto_doc doc;
    const proto_val *root; /* the map */
    const proto_val *t;    /* str */
    uint64_t re;           /* 0 when `re` is absent or not a uint (never one of ours) */
} msg_in;

/* ---- small helpers ----------------------------------------------------- */

/* Monotonic seconds, for deadlines that survive wall-clock changes. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Milliseconds left until deadline, for zmq_poll (at least 0). */
static long ms_until(double deadline)
{
    double left = deadline - now();
    return left <= 0 ? 0 : (long)(left * 1000.0) + 1;
}

/* Records a failure for ctxd_last_error and returns rc, so error paths read
 * `return fail(...)`. code NULL means the rc's own name. */
static int fail(ctxd_client *c, int rc, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(ctxd_client *c, int rc, const char *code, const char *fmt, ...)
{
    static const char *const names[] = {"",          "unreachable", "refused",   "protocol",
                                        "transport", "invalid",     "cancelled", "lost"};
    if (!code)
        code = (rc < 0 && -rc < (int)(sizeof names / sizeof names[0])) ? names[-rc] : "error";
    snprintf(c->last_code, sizeof c->last_code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_msg, sizeof c->last_msg, fmt, ap);
    va_end(ap);
    c->last_rc = rc;
    return rc;
}

/* Takes ownership of p on behalf of the caller-visible results. */
static void *own(ctxd_client *c, void *p)
{
    if (c->nowned == c->capowned) {
        c->capowned = c->capowned ? 2 * c->capowned : 16;
        c->owned = mem_realloc(c->owned, c->capowned * sizeof *c->owned);
    }
    c->owned[c->nowned++] = p;
    return p;
}

/* A NUL-terminated copy of a str value owned by the client, or NULL when the
 * value is absent or not a str. */
static const char *own_str(ctxd_client *c, const proto_val *v)
{
    if (!v || v->kind != PROTO_STR)
        return NULL;
    return own(c, proto_strdup(v));
}

/* Frees the previous request's results and error: every request starts here. */
static void request_begin(ctxd_client *c)
{
    for (size_t i = 0; i < c->nowned; i++)
        free(c->owned[i]);
    c->nowned = 0;
    c->last_rc = 0;
    c->last_code[0] = c->last_msg[0] = '\0';
}

/* A uint field, or 0 when absent (types were checked by proto_check). */
static uint64_t get_uint(const proto_val *m, const char *key)
{
    const proto_val *v = proto_map_get(m, key);
    return v && v->kind == PROTO_UINT ? v->as.u : 0;
}

/* A numeric field as double (int, uint or float), 0 when absent. */
static double get_num(const proto_val *m, const char *key)
{
    const proto_val *v = proto_map_get(m, key);
    if (!v)
        return 0;
    switch (v->kind) {
    case PROTO_UINT:
        return (double)v->as.u;
    case PROTO_INT:
        return (double)v->as.i;
    case PROTO_FLOAT:
        return v->as.f;
    default:
        return 0;
    }
}

/* A bool field, false when absent. */
static bool get_bool(const proto_val *m, const char *key)
{
    const proto_val *v = proto_map_get(m, key);
    return v && v->kind == PROTO_BOOL && v->as.b;
}

/* Validates a daemon message body against a field table; a mismatch means
 * the daemon broke the protocol. */
static int check_fields(ctxd_client *c, const char *what, const proto_val *m,
                        const proto_field *fields, size_t n)
{
    proto_error pe;
    if (!m || m->kind != PROTO_MAP)
        return fail(c, CTXD_EPROTOCOL, NULL, "daemon sent a malformed %s: not a map", what);
    if (proto_check(m, fields, n, &pe) < 0)
        return fail(c, CTXD_EPROTOCOL, NULL, "daemon sent a malformed %s: %s", what, pe.msg);
    return 0;
}

/* Writes a NUL-terminated env map from caller pairs; rejects NULL entries. */
static int put_env(ctxd_client *c, proto_buf *b, const ctxd_kv *env, size_t n)
{
    if (n > UINT32_MAX)
        return fail(c, CTXD_EINVALID, NULL, "too many environment entries");
    proto_put_map(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        if (!env[i].key || !env[i].value)
            return fail(c, CTXD_EINVALID, NULL, "environment entry %zu has a NULL key or value", i);
        proto_put_str(b, env[i].key);
        proto_put_str(b, env[i].value);
    }
    return 0;
}

/* ---- transport --------------------------------------------------------- */

/* Starts a request map: v, t, a fresh uint id, and room for nfields more. */
static uint64_t put_envelope(ctxd_client *c, proto_buf *b, const char *type, uint32_t nfields)
{
    uint64_t id = c->next_id++;
    proto_put_map(b, 3 + nfields);
    proto_put_str(b, "v");
    proto_put_uint(b, PROTO_VERSION);
    proto_put_str(b, "t");
    proto_put_str(b, type);
    proto_put_str(b, "id");
    proto_put_uint(b, id);
    return id;
}

/* Sends one encoded request as a single-frame message. Refuses locally what
 * the daemon announced it would refuse, so a huge request fails fast. */
static int send_buf(ctxd_client *c, const proto_buf *b)
{
    if (c->max_request_bytes && b->len > c->max_request_bytes)
        return fail(c, CTXD_EREFUSED, "too_large",
                    "request of %zu bytes exceeds the daemon's max_request_bytes (%llu)", b->len,
                    (unsigned long long)c->max_request_bytes);
    for (;;) {
        if (zmq_send(c->sock, b->data, b->len, 0) >= 0)
            return 0;
        int e = zmq_errno();
        if (e == EINTR)
            continue;
        if (e == EAGAIN)
            return fail(c, CTXD_EUNREACHABLE, NULL, "cannot send to %s within %g s", c->endpoint,
                        c->timeout);
        return fail(c, CTXD_ETRANSPORT, NULL, "cannot send to %s: %s", c->endpoint,
                    zmq_strerror(e));
    }
}

/* Frees what recv_msg filled in. */
static void msg_release(msg_in *m)
{
    proto_doc_free(&m->doc);
    zmq_msg_close(&m->zmsg);
}

/* Decodes a received frame and reads its envelope (v, t, re). */
static int msg_decode(ctxd_client *c, msg_in *m)
{
    proto_error pe;
    if (proto_decode(&m->doc, zmq_msg_data(&m->zmsg), zmq_msg_size(&m->zmsg), &pe) < 0)
        return fail(c, CTXD_EPROTOCOL, NULL, "daemon sent an undecodable message: %s", pe.msg);
    m->root = &m->doc.nodes[0];
    const proto_val *v = proto_map_get(m->root, "v");
    m->t = proto_map_get(m->root, "t");
    const char *bad = m->root->kind != PROTO_MAP         ? "not a map"
                      : !v || v->kind != PROTO_UINT      ? "no uint 'v'"
                      : v->as.u != PROTO_VERSION         ? "another protocol version"
                      : !m->t || m->t->kind != PROTO_STR ? "no str 't'"
                                                         : NULL;
    if (bad) {
        proto_doc_free(&m->doc);
        return fail(c, CTXD_EPROTOCOL, NULL, "daemon sent a malformed message: %s", bad);
    }
    const proto_val *re = proto_map_get(m->root, "re");
    m->re = re && re->kind == PROTO_UINT ? re->as.u : 0;
    return 0;
}

/* Waits up to ms (-1: forever) for one daemon message. Returns 1 with *m
 * filled (release with msg_release), 0 when the wait ended without one
 * (timeout, or a signal), or a negative CTXD_E code. */
static int recv_msg(ctxd_client *c, long ms, msg_in *m)
{
    zmq_pollitem_t item = {.socket = c->sock, .events = ZMQ_POLLIN};
    int n = zmq_poll(&item, 1, ms);
    if (n < 0) {
        if (zmq_errno() == EINTR)
            return 0;
        return fail(c, CTXD_ETRANSPORT, NULL, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    }
    if (n == 0)
        return 0;
    zmq_msg_init(&m->zmsg);
    if (zmq_msg_recv(&m->zmsg, c->sock, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&m->zmsg);
        if (e == EAGAIN || e == EINTR)
            return 0;
        return fail(c, CTXD_ETRANSPORT, NULL, "cannot receive from %s: %s", c->endpoint,
                    zmq_strerror(e));
    }
    if (zmq_msg_more(&m->zmsg)) {
        while (zmq_msg_more(&m->zmsg) && zmq_msg_recv(&m->zmsg, c->sock, ZMQ_DONTWAIT) >= 0)
            ;
        zmq_msg_close(&m->zmsg);
        return fail(c, CTXD_EPROTOCOL, NULL, "daemon sent a message of more than one frame");
    }
    if (msg_decode(c, m) < 0) {
        zmq_msg_close(&m->zmsg);
        return c->last_rc;
    }
    return 1;
}

/* Turns an `err` reply into CTXD_EREFUSED with the daemon's code/message. */
static int take_err(ctxd_client *c, const msg_in *m)
{
    static const proto_field fields[] = {{"code", PF_STR, true, 0}, {"message", PF_STR, true, 0}};
    if (check_fields(c, "err reply", m->root, fields, 2) < 0)
        return c->last_rc;
    const proto_val *code = proto_map_get(m->root, "code");
    const proto_val *msg = proto_map_get(m->root, "message");
    fail(c, CTXD_EREFUSED, NULL, "%.*s", (int)msg->n, msg->as.s);
    snprintf(c->last_code, sizeof c->last_code, "%.*s", (int)code->n, code->as.s);
    return CTXD_EREFUSED;
}

/* Sends a control request and waits (up to the control timeout) for its
 * terminal reply. Returns 0 with *m holding the `ok` (caller releases it), or
 * a negative code. Other messages (late replies, stray events) are dropped. */
static int roundtrip(ctxd_client *c, const proto_buf *b, uint64_t id, msg_in *m)
{
    int r = send_buf(c, b);
    if (r < 0)
        return r;
    double deadline = now() + c->timeout;
    for (;;) {
        if (now() >= deadline)
            return fail(c, CTXD_EUNREACHABLE, NULL,
                        "no reply from ctxd at %s within %g s (is the daemon running?)",
                        c->endpoint, c->timeout);
        r = recv_msg(c, ms_until(deadline), m);
        if (r < 0)
            return r;
        if (r == 0)
            continue;
        if (m->re != id) {
            msg_release(m);
            continue;
        }
        if (proto_str_eq(m->t, "ok"))
            return 0;
        r = proto_str_eq(m->t, "err")
                ? take_err(c, m)
                : fail(c, CTXD_EPROTOCOL, NULL, "daemon answered a control request with '%.*s'",
                       (int)m->t->n, m->t->as.s);
        msg_release(m);
        return r;
    }
}

/* Fails fast when an ipc:// endpoint has no listener (missing or stale
 * socket file), where ZeroMQ would silently retry until the timeout. */
static int ipc_probe(ctxd_client *c)
{
    if (strncmp(c->endpoint, "ipc://", 6) != 0)
        return 0;
    const char *path = c->endpoint + 6;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (path[0] == '\0' || path[0] == '@' || strlen(path) >= sizeof sa.sun_path)
        return 0; /* abstract or too long for a probe: let ZeroMQ try */
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    close(fd);
    if (r == 0)
        return 0;
    switch (e) {
    case ENOENT:
        return fail(c, CTXD_EUNREACHABLE, NULL, "ctxd is not running at %s (no socket file %s)",
                    c->endpoint, path);
    case ECONNREFUSED:
        return fail(c, CTXD_EUNREACHABLE, NULL, "ctxd is not running at %s (stale socket file %s)",
                    c->endpoint, path);
    case EACCES:
    case ENOTDIR:
    case ENOTSOCK:
        return fail(c, CTXD_EUNREACHABLE, NULL, "cannot connect to %s: %s", c->endpoint,
                    strerror(e));
    default:
        return 0;
    }
}

/* ---- parsing replies ---------------------------------------------------- */

/* Fills an INFO map (PROTOCOL.md ctx.create) into caller-visible form. */
static int parse_info(ctxd_client *c, const proto_val *v, ctxd_ctx_info *out)
{
    static const proto_field fields[] = {{"name", PF_STR, true, 0},
                                         {"cwd", PF_STR, false, 0},
                                         {"state", PF_STR, true, 0},
                                         {"pid", PF_UINT, false, 0},
                                         {"incarnation", PF_UINT, false, 0},
                                         {"created", PF_NUM, false, 0},
                                         {"execution_count", PF_UINT, false, 0},
                                         {"queued", PF_UINT, false, 0},
                                         {"last_death", PF_STR | PF_NIL, false, 0}};
    if (check_fields(c, "context info", v, fields, sizeof fields / sizeof fields[0]) < 0)
        return c->last_rc;
    if (!out)
        return 0;
    const char *cwd = own_str(c, proto_map_get(v, "cwd"));
    *out = (ctxd_ctx_info){
        .name = own_str(c, proto_map_get(v, "name")),
        .cwd = cwd ? cwd : "",
        .state = own_str(c, proto_map_get(v, "state")),
        .pid = get_uint(v, "pid"),
        .incarnation = get_uint(v, "incarnation"),
        .created = get_num(v, "created"),
        .execution_count = get_uint(v, "execution_count"),
        .queued = get_uint(v, "queued"),
        .last_death = own_str(c, proto_map_get(v, "last_death")),
    };
    return 0;
}

/* Reads the `ctx` INFO of an ok reply (ctx.create, ctx.restart). */
static int parse_ctx_reply(ctxd_client *c, const msg_in *m, ctxd_ctx_info *out)
{
    static const proto_field fields[] = {{"ctx", PF_MAP, true, 0}};
    if (check_fields(c, "reply", m->root, fields, 1) < 0)
        return c->last_rc;
    return parse_info(c, proto_map_get(m->root, "ctx"), out);
}

/* Reads hello's reply, remembering the daemon pid and request limit. */
static int parse_hello(ctxd_client *c, const msg_in *m, ctxd_hello_info *out)
{
    static const proto_field fields[] = {
        {"server", PF_STR, true, 0},     {"version", PF_STR, false, 0},
        {"protocol", PF_UINT, false, 0}, {"versions", PF_ARRAY, false, 0},
        {"pid", PF_UINT, true, 0},       {"limits", PF_MAP, false, 0}};
    static const proto_field limit_fields[] = {
        {"max_request_bytes", PF_UINT, false, 0}, {"max_code_bytes", PF_UINT, false, 0},
        {"max_queue", PF_UINT, false, 0},         {"max_contexts", PF_UINT, false, 0},
        {"default_timeout", PF_NUM, false, 0},    {"kill_grace", PF_NUM, false, 0}};
    if (check_fields(c, "hello reply", m->root, fields, sizeof fields / sizeof fields[0]) < 0)
        return c->last_rc;
    const proto_val *limits = proto_map_get(m->root, "limits");
    if (limits && check_fields(c, "hello limits", limits, limit_fields,
                               sizeof limit_fields / sizeof limit_fields[0]) < 0)
        return c->last_rc;
    const proto_val *vs = proto_map_get(m->root, "versions");
    uint64_t *versions = own(c, mem_calloc(vs ? vs->n : 0, sizeof *versions));
    for (uint32_t i = 0; vs && i < vs->n; i++) {
        if (vs->as.items[i].kind != PROTO_UINT)
            return fail(c, CTXD_EPROTOCOL, NULL,
                        "daemon sent a malformed hello reply: "
                        "'versions' must hold uints");
        versions[i] = vs->as.items[i].as.u;
    }
    c->daemon_pid = get_uint(m->root, "pid");
    c->max_request_bytes = get_uint(limits, "max_request_bytes");
    if (!out)
        return 0;
    const char *version = own_str(c, proto_map_get(m->root, "version"));
    *out = (ctxd_hello_info){
        .server = own_str(c, proto_map_get(m->root, "server")),
        .version = version ? version : "",
        .protocol = get_uint(m->root, "protocol"),
        .versions = versions,
        .nversions = vs ? vs->n : 0,
        .pid = c->daemon_pid,
        .max_request_bytes = c->max_request_bytes,
        .max_code_bytes = get_uint(limits, "max_code_bytes"),
        .max_queue = get_uint(limits, "max_queue"),
        .max_contexts = get_uint(limits, "max_contexts"),
        .default_timeout = get_num(limits, "default_timeout"),
        .kill_grace = get_num(limits, "kill_grace"),
    };
    return 0;
}

/* ---- connection -------------------------------------------------------- */

/* PROTOCOL.md section 1's default, for clients without --endpoint. */
const char *ctxd_default_endpoint(char *buf, size_t n)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int len = (xdg && *xdg) ? snprintf(buf, n, "ipc://%s/ctxd/ctxd.sock", xdg)
                            : snprintf(buf, n, "ipc:///run/ctxd/ctxd.sock");
    return len < 0 || (size_t)len >= n ? NULL : buf;
}

/* Creates the socket with the options every client needs. */
static int open_socket(ctxd_client *c)
{
    int zero = 0, sndtimeo = (int)(c->timeout * 1000.0);
    c->zctx = zmq_ctx_new();
    if (!c->zctx)
        return fail(c, CTXD_ETRANSPORT, NULL, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    c->sock = zmq_socket(c->zctx, ZMQ_DEALER);
    if (!c->sock)
        return fail(c, CTXD_ETRANSPORT, NULL, "zmq_socket: %s", zmq_strerror(zmq_errno()));
    /* LINGER 0: closing never blocks on unsent requests. RCVHWM 0: the I/O
     * thread always drains the daemon's output, so a slow terminal never
     * makes the daemon's ROUTER hit its high-water mark. */
    zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(c->sock, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof sndtimeo);
    if (zmq_connect(c->sock, c->endpoint) < 0)
        return fail(c, CTXD_EINVALID, NULL, "cannot connect to '%s': %s", c->endpoint,
                    zmq_strerror(zmq_errno()));
    return 0;
}

/* Resolves the endpoint, fails fast on a dead ipc socket, connects and
 * proves the daemon answers with a hello. */
ctxd_client *ctxd_connect_ex(const char *endpoint, double timeout, int *rc, char *err,
                             size_t errlen)
{
    char def[4096];
    if (!endpoint || !*endpoint)
        endpoint = getenv("CTXD_ENDPOINT");
    if (!endpoint || !*endpoint)
        endpoint = ctxd_default_endpoint(def, sizeof def);
    ctxd_client *c = mem_calloc(1, sizeof *c);
    c->endpoint = mem_strdup(endpoint ? endpoint : "");
    c->next_id = 1;
    c->timeout = timeout > 0 ? timeout : CTXD_DEFAULT_TIMEOUT;
    c->liveness = CTXD_DEFAULT_LIVENESS;
    int r = !endpoint ? fail(c, CTXD_EINVALID, NULL, "XDG_RUNTIME_DIR is too long") : ipc_probe(c);
    if (r == 0)
        r = open_socket(c);
    if (r == 0)
        r = ctxd_hello(c, NULL);
    if (rc)
        *rc = r;
    if (r == 0)
        return c;
    if (err && errlen)
        snprintf(err, errlen, "%s", c->last_msg);
    ctxd_close(c);
    return NULL;
}

/* The common case of ctxd_connect_ex. */
ctxd_client *ctxd_connect(const char *endpoint, char *err, size_t errlen)
{
    return ctxd_connect_ex(endpoint, CTXD_DEFAULT_TIMEOUT, NULL, err, errlen);
}

/* Releases the socket, the ZeroMQ context and all owned results. */
void ctxd_close(ctxd_client *c)
{
    if (!c)
        return;
    request_begin(c);
    if (c->sock)
        zmq_close(c->sock);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    free(c->owned);
    free(c->endpoint);
    free(c);
}

/* Lets tools show where they are connected. */
const char *ctxd_endpoint(const ctxd_client *c)
{
    return c->endpoint;
}

/* Control timeout; also bounds a blocked send. */
void ctxd_set_timeout(ctxd_client *c, double seconds)
{
    if (seconds > 0) {
        int ms = (int)(seconds * 1000.0);
        c->timeout = seconds;
        zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &ms, sizeof ms);
    }
}

/* How soon a silent execute checks the daemon is still there. */
void ctxd_set_liveness(ctxd_client *c, double seconds)
{
    c->liveness = seconds > 0 ? seconds : 0;
}

/* Details of the last failure, for messages to the user. */
int ctxd_last_error(const ctxd_client *c, const char **code, const char **msg)
{
    if (code)
        *code = c->last_code;
    if (msg)
        *msg = c->last_msg;
    return c->last_rc;
}

/* Text for a CTXD_E* code when no details are at hand. */
const char *ctxd_strerror(int rc)
{
    static const char *const text[] = {
        "success",
        "daemon unreachable",
        "refused by the daemon",
        "protocol violation by the daemon",
        "transport failure",
        "invalid argument",
        "stopped waiting",
        "daemon restarted; the run's outcome is unknown",
    };
    if (rc > 0 || -rc >= (int)(sizeof text / sizeof text[0]))
        return "unknown error";
    return text[-rc];
}

/* ---- control requests ---------------------------------------------------- */

/* hello: also refreshes the cached daemon pid and request limit. */
int ctxd_hello(ctxd_client *c, ctxd_hello_info *out)
{
    request_begin(c);
    proto_buf b;
    msg_in m;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, "hello", 0);
    int r = roundtrip(c, &b, id, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = parse_hello(c, &m, out);
    msg_release(&m);
    return r;
}

/* ctx.create with the optional fields the caller gave. */
int ctxd_ctx_create(ctxd_client *c, const char *name, const char *cwd, const ctxd_kv *env,
                    size_t nenv, ctxd_ctx_info *out)
{
    request_begin(c);
    proto_buf b;
    msg_in m;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, "ctx.create", (name != NULL) + (cwd != NULL) + (nenv > 0));
    if (name) {
        proto_put_str(&b, "name");
        proto_put_str(&b, name);
    }
    if (cwd) {
        proto_put_str(&b, "cwd");
        proto_put_str(&b, cwd);
    }
    int r = 0;
    if (nenv > 0) {
        proto_put_str(&b, "env");
        r = put_env(c, &b, env, nenv);
    }
    if (r == 0)
        r = roundtrip(c, &b, id, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = parse_ctx_reply(c, &m, out);
    msg_release(&m);
    return r;
}

/* ctx.list into an owned array of infos. */
int ctxd_ctx_list(ctxd_client *c, const ctxd_ctx_info **out, size_t *n)
{
    static const proto_field fields[] = {{"contexts", PF_ARRAY, true, 0}};
    request_begin(c);
    proto_buf b;
    msg_in m;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, "ctx.list", 0);
    int r = roundtrip(c, &b, id, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = check_fields(c, "ctx.list reply", m.root, fields, 1);
    const proto_val *arr = proto_map_get(m.root, "contexts");
    size_t count = r == 0 ? arr->n : 0;
    ctxd_ctx_info *infos = own(c, mem_calloc(count, sizeof *infos));
    for (size_t i = 0; i < count && r == 0; i++)
        r = parse_info(c, &arr->as.items[i], &infos[i]);
    msg_release(&m);
    if (out)
        *out = r == 0 ? infos : NULL;
    if (n)
        *n = r == 0 ? count : 0;
    return r;
}

/* Sends a request whose only field is a context name (ctx.delete,
 * ctx.restart, interrupt) and waits for its ok, left in *m. */
static int ctx_request(ctxd_client *c, const char *type, const char *field, const char *name,
                       msg_in *m)
{
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, type, 1);
    proto_put_str(&b, field);
    proto_put_str(&b, name);
    int r = roundtrip(c, &b, id, m);
    proto_buf_free(&b);
    return r;
}

/* ctx.delete; the reply carries nothing. */
int ctxd_ctx_delete(ctxd_client *c, const char *name)
{
    request_begin(c);
    if (!name)
        return fail(c, CTXD_EINVALID, NULL, "ctx.delete needs a context name");
    msg_in m;
    int r = ctx_request(c, "ctx.delete", "ctx", name, &m);
    if (r == 0)
        msg_release(&m);
    return r;
}

/* ctx.restart; default context when name is NULL. */
int ctxd_ctx_restart(ctxd_client *c, const char *name, ctxd_ctx_info *out)
{
    request_begin(c);
    msg_in m;
    int r = ctx_request(c, "ctx.restart", "ctx", name ? name : "default", &m);
    if (r < 0)
        return r;
    r = parse_ctx_reply(c, &m, out);
    msg_release(&m);
    return r;
}

/* interrupt; reports whether a run was executing. */
int ctxd_interrupt(ctxd_client *c, const char *ctx, bool *interrupted)
{
    static const proto_field fields[] = {{"interrupted", PF_BOOL, true, 0}};
    request_begin(c);
    msg_in m;
    int r = ctx_request(c, "interrupt", "ctx", ctx ? ctx : "default", &m);
    if (r < 0)
        return r;
    r = check_fields(c, "interrupt reply", m.root, fields, 1);
    if (r == 0 && interrupted)
        *interrupted = get_bool(m.root, "interrupted");
    msg_release(&m);
    return r;
}

/* ---- execute ------------------------------------------------------------- */

/* Everything one ctxd_execute call tracks while it waits for `done`. */
typedef struct exec_state {
    ctxd_client *c;
    const ctxd_exec_opts *o;
    const ctxd_callbacks *cb;
    void *user;
    ctxd_outcome *out;
    uint64_t id;
    bool accepted;
    bool interrupt_pending; /* asked for before `accepted` */
    uint64_t ping_id;       /* outstanding liveness hello, 0 = none */
    double ping_deadline;
    double last_heard;
} exec_state;

/* An event handler: 1 to keep waiting, 0 when the run is over, < 0 error. */
typedef int (*event_fn)(exec_state *st, const msg_in *m);

/* Sends `interrupt` for the run's context; its reply is dropped later as
 * unmatched. */
static int send_interrupt(exec_state *st)
{
    proto_buf b;
    proto_buf_init(&b);
    put_envelope(st->c, &b, "interrupt", 1);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, st->o->ctx ? st->o->ctx : "default");
    int r = send_buf(st->c, &b);
    proto_buf_free(&b);
    return r;
}

/* accepted: the run started; send an interrupt asked for earlier. */
static int on_accepted(exec_state *st, const msg_in *m)
{
    static const proto_field fields[] = {{"execution_count", PF_UINT, true, 0},
                                         {"incarnation", PF_UINT, true, 0},
                                         {"previous_death", PF_STR | PF_NIL, false, 0}};
    if (check_fields(st->c, "accepted event", m->root, fields, 3) < 0)
        return st->c->last_rc;
    st->accepted = true;
    if (st->interrupt_pending) {
        st->interrupt_pending = false;
        if (send_interrupt(st) < 0)
            return st->c->last_rc;
    }
    if (st->cb && st->cb->on_accepted) {
        const proto_val *pd = proto_map_get(m->root, "previous_death");
        char *death = pd && pd->kind == PROTO_STR ? proto_strdup(pd) : NULL;
        st->cb->on_accepted(st->user, get_uint(m->root, "execution_count"),
                            get_uint(m->root, "incarnation"), death);
        free(death);
    }
    return 1;
}

/* stream: output bytes straight to the caller. */
static int on_stream(exec_state *st, const msg_in *m)
{
    static const proto_field fields[] = {{"name", PF_STR, true, 0}, {"data", PF_BIN, true, 0}};
    if (check_fields(st->c, "stream event", m->root, fields, 2) < 0)
        return st->c->last_rc;
    if (!st->cb || !st->cb->on_stream)
        return 1;
    const proto_val *name = proto_map_get(m->root, "name");
    const proto_val *data = proto_map_get(m->root, "data");
    char *n = proto_strdup(name);
    st->cb->on_stream(st->user, n, data->as.s, data->n);
    free(n);
    return 1;
}

/* result: the MIME bundle as NUL-terminated arrays. */
static int on_result(exec_state *st, const msg_in *m)
{
    static const proto_field fields[] = {{"execution_count", PF_UINT, false, 0},
                                         {"data", PF_STRMAP, true, 0}};
    if (check_fields(st->c, "result event", m->root, fields, 2) < 0)
        return st->c->last_rc;
    if (!st->cb || !st->cb->on_result)
        return 1;
    const proto_val *data = proto_map_get(m->root, "data");
    char **keys = mem_calloc(data->n, sizeof *keys);
    char **values = mem_calloc(data->n, sizeof *values);
    for (uint32_t i = 0; i < data->n; i++) {
        keys[i] = proto_strdup(&data->as.items[2 * i]);
        values[i] = proto_strdup(&data->as.items[2 * i + 1]);
    }
    st->cb->on_result(st->user, (const char *const *)keys, (const char *const *)values, data->n,
                      get_uint(m->root, "execution_count"));
    for (uint32_t i = 0; i < data->n; i++) {
        free(keys[i]);
        free(values[i]);
    }
    free(keys);
    free(values);
    return 1;
}

/* error: exception name, value and traceback lines. */
static int on_error(exec_state *st, const msg_in *m)
{
    static const proto_field fields[] = {
        {"ename", PF_STR, true, 0}, {"evalue", PF_STR, true, 0}, {"traceback", PF_ARRAY, true, 0}};
    if (check_fields(st->c, "error event", m->root, fields, 3) < 0)
        return st->c->last_rc;
    const proto_val *tb = proto_map_get(m->root, "traceback");
    for (uint32_t i = 0; i < tb->n; i++)
        if (tb->as.items[i].kind != PROTO_STR)
            return fail(st->c, CTXD_EPROTOCOL, NULL,
                        "daemon sent a malformed error event: traceback lines must be str");
    if (!st->cb || !st->cb->on_error)
        return 1;
    char *ename = proto_strdup(proto_map_get(m->root, "ename"));
    char *evalue = proto_strdup(proto_map_get(m->root, "evalue"));
    char **lines = mem_calloc(tb->n, sizeof *lines);
    for (uint32_t i = 0; i < tb->n; i++)
        lines[i] = proto_strdup(&tb->as.items[i]);
    st->cb->on_error(st->user, ename, evalue, (const char *const *)lines, tb->n);
    for (uint32_t i = 0; i < tb->n; i++)
        free(lines[i]);
    free(lines);
    free(ename);
    free(evalue);
    return 1;
}

/* done: the outcome; ends the wait. */
static int on_done(exec_state *st, const msg_in *m)
{
    static const proto_field fields[] = {
        {"status", PF_STR, true, 0},        {"execution_count", PF_UINT, false, 0},
        {"incarnation", PF_UINT, false, 0}, {"duration", PF_NUM, false, 0},
        {"cpu_time", PF_NUM, false, 0},     {"truncated", PF_BOOL, false, 0},
        {"state_lost", PF_BOOL, false, 0},  {"cause", PF_STR | PF_NIL, false, 0}};
    static const char *const statuses[] = {
        [CTXD_OK] = "ok",           [CTXD_ERROR] = "error", [CTXD_INTERRUPTED] = "interrupted",
        [CTXD_TIMEOUT] = "timeout", [CTXD_DIED] = "died",   [CTXD_ABORTED] = "aborted"};
    if (check_fields(st->c, "done reply", m->root, fields, sizeof fields / sizeof fields[0]) < 0)
        return st->c->last_rc;
    const proto_val *status = proto_map_get(m->root, "status");
    size_t s = 0;
    while (s < sizeof statuses / sizeof statuses[0] && !proto_str_eq(status, statuses[s]))
        s++;
    if (s == sizeof statuses / sizeof statuses[0])
        return fail(st->c, CTXD_EPROTOCOL, NULL, "daemon sent an unknown done status '%.*s'",
                    (int)status->n, status->as.s);
    if (st->out)
        *st->out = (ctxd_outcome){
            .status = (ctxd_status)s,
            .execution_count = get_uint(m->root, "execution_count"),
            .incarnation = get_uint(m->root, "incarnation"),
            .duration = get_num(m->root, "duration"),
            .cpu_time = get_num(m->root, "cpu_time"),
            .state_lost = get_bool(m->root, "state_lost"),
            .truncated = get_bool(m->root, "truncated"),
            .cause = own_str(st->c, proto_map_get(m->root, "cause")),
        };
    return 0;
}

/* err: the execute was refused; ends the wait. */
static int on_err(exec_state *st, const msg_in *m)
{
    return take_err(st->c, m);
}

/* Routes a message addressed to the run by its type. Unknown event types
 * are skipped (a newer daemon may add events); `ok` would never end the run,
 * so it is a protocol violation. */
static int dispatch_event(exec_state *st, const msg_in *m)
{
    static const struct {
        const char *type;
        event_fn fn;
    } events[] = {{"accepted", on_accepted}, {"stream", on_stream}, {"result", on_result},
                  {"error", on_error},       {"done", on_done},     {"err", on_err}};
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
        if (proto_str_eq(m->t, events[i].type))
            return events[i].fn(st, m);
    if (proto_str_eq(m->t, "ok"))
        return fail(st->c, CTXD_EPROTOCOL, NULL, "daemon answered execute with 'ok'");
    return 1;
}

/* Handles the reply to a liveness hello: a different pid means a restarted
 * daemon that has never heard of our run. */
static int on_ping_reply(exec_state *st, const msg_in *m)
{
    st->ping_id = 0;
    uint64_t pid = proto_str_eq(m->t, "ok") ? get_uint(m->root, "pid") : 0;
    if (pid && st->c->daemon_pid && pid != st->c->daemon_pid)
        return fail(st->c, CTXD_ELOST, NULL,
                    "ctxd at %s restarted (pid %llu, was %llu) while the run was in flight; "
                    "its outcome is unknown",
                    st->c->endpoint, (unsigned long long)pid,
                    (unsigned long long)st->c->daemon_pid);
    return 1;
}

/* Sends a liveness hello when the daemon has been silent for too long, and
 * fails when an earlier one went unanswered. Returns how long the next wait
 * may last (ms, -1 = forever) or a negative CTXD_E code via *rc. */
static long liveness_tick(exec_state *st, int *rc)
{
    ctxd_client *c = st->c;
    double t = now();
    *rc = 0;
    if (c->liveness <= 0)
        return -1;
    if (st->ping_id && t >= st->ping_deadline) {
        *rc = fail(c, CTXD_EUNREACHABLE, NULL,
                   "ctxd at %s stopped answering (no reply to a liveness check within %g s)",
                   c->endpoint, c->timeout);
        return 0;
    }
    if (!st->ping_id && t - st->last_heard >= c->liveness) {
        proto_buf b;
        proto_buf_init(&b);
        st->ping_id = put_envelope(c, &b, "hello", 0);
        st->ping_deadline = t + c->timeout;
        *rc = send_buf(c, &b);
        proto_buf_free(&b);
    }
    return st->ping_id ? ms_until(st->ping_deadline) : ms_until(st->last_heard + c->liveness);
}

/* Applies what on_wait asked for. Returns 1 to keep waiting or < 0. */
static int wait_hook(exec_state *st)
{
    if (!st->cb || !st->cb->on_wait)
        return 1;
    switch (st->cb->on_wait(st->user)) {
    case CTXD_WAIT_INTERRUPT:
        if (!st->accepted) {
            st->interrupt_pending = true;
            return 1;
        }
        return send_interrupt(st) < 0 ? st->c->last_rc : 1;
    case CTXD_WAIT_DETACH:
        return fail(st->c, CTXD_ECANCELLED, NULL, "stopped waiting; the run goes on in ctxd");
    default:
        return 1;
    }
}

/* Encodes the execute request from the caller's options. */
static int put_execute(ctxd_client *c, proto_buf *b, const ctxd_exec_opts *o, size_t code_len,
                       uint64_t *id)
{
    bool timeout = o->timeout >= 0; /* false for NaN too */
    *id =
        put_envelope(c, b, "execute",
                     1 + (o->ctx != NULL) + timeout + (o->nenv > 0) + o->silent + o->stop_on_error);
    proto_put_str(b, "code");
    proto_put_strn(b, o->code, code_len);
    if (o->ctx) {
        proto_put_str(b, "ctx");
        proto_put_str(b, o->ctx);
    }
    if (timeout) {
        proto_put_str(b, "timeout");
        proto_put_double(b, o->timeout);
    }
    if (o->silent) {
        proto_put_str(b, "silent");
        proto_put_bool(b, true);
    }
    if (o->stop_on_error) {
        proto_put_str(b, "stop_on_error");
        proto_put_bool(b, true);
    }
    if (o->nenv > 0) {
        proto_put_str(b, "env");
        return put_env(c, b, o->env, o->nenv);
    }
    return 0;
}

/* execute: send, then route events until done, err, a failed liveness
 * check or a detach. */
int ctxd_execute(ctxd_client *c, const ctxd_exec_opts *opts, const ctxd_callbacks *cb, void *user,
                 ctxd_outcome *out)
{
    request_begin(c);
    if (!opts || !opts->code)
        return fail(c, CTXD_EINVALID, NULL, "execute needs code");
    size_t code_len = opts->code_len ? opts->code_len : strlen(opts->code);
    if (c->max_request_bytes && code_len > c->max_request_bytes)
        return fail(c, CTXD_EREFUSED, "too_large",
                    "code of %zu bytes exceeds the daemon's max_request_bytes (%llu)", code_len,
                    (unsigned long long)c->max_request_bytes);
    exec_state st = {.c = c, .o = opts, .cb = cb, .user = user, .out = out, .last_heard = now()};
    proto_buf b;
    proto_buf_init(&b);
    int r = put_execute(c, &b, opts, code_len, &st.id);
    if (r == 0)
        r = send_buf(c, &b);
    proto_buf_free(&b);
    while (r == 0) {
        long wait = liveness_tick(&st, &r);
        if (r < 0)
            break;
        if (cb && cb->on_wait && (wait < 0 || wait > WAIT_SLICE_MS))
            wait = WAIT_SLICE_MS;
        msg_in m;
        int got = recv_msg(c, wait, &m);
        if (got < 0)
            return got;
        if (got == 1) {
            st.last_heard = now();
            int e = st.ping_id && m.re == st.ping_id ? on_ping_reply(&st, &m)
                    : m.re == st.id                  ? dispatch_event(&st, &m)
                                                     : 1;
            msg_release(&m);
            if (e <= 0)
                return e;
        }
        r = wait_hook(&st);
        r = r < 0 ? r : 0;
    }
    return r;
}
