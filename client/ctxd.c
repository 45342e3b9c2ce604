/* libctxd: the client of the ctxd daemon. See ctxd.h for the contract
 * (ownership, threads, return codes, the event-loop form) and
 * proto/PROTOCOL.md for the wire format. All msgpack goes through proto.h.
 *
 * Structure: every run (blocking or submitted) is a `run` in the client's
 * list. Messages are received by one path (recv_nowait), routed by `re` to
 * their run (handle_msg), and turned into callbacks there. A blocking control
 * request that receives messages for runs parks them in the inbox; ctxd_step
 * and ctxd_execute dispatch the inbox first, so nothing is lost or
 * reordered. */
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

/* One decoded daemon message; strings in doc point into zmsg, so a msg_in
 * never moves once received (it lives on the heap). */
typedef struct msg_in {
    struct msg_in *next; /* inbox link */
    zmq_msg_t zmsg;
    proto_doc doc;
    const proto_val *root; /* the map */
    const proto_val *t;    /* str */
    uint64_t re;           /* 0 when `re` is absent or not a uint (never one of ours) */
} msg_in;

/* A run in flight (ctxd_submit or ctxd_execute). */
typedef struct run {
    struct run *next;
    uint64_t id;
    char *ctx; /* NULL: "default" */
    ctxd_callbacks cb;
    void *user;
    bool accepted;
    bool interrupt_pending; /* asked for before `accepted` */
    bool ended;             /* terminal reply handled (or failed); no more events */
    bool removed;           /* detached or ended: unlink at the next sweep */
    bool blocking;          /* ctxd_execute waits for it: keep the outcome below */
    int rc;                 /* blocking: 0 or the CTXD_E* code it ended with */
    ctxd_outcome out;       /* blocking: the outcome (cause points to `cause`) */
    char *cause;
    char *err_code, *err_msg; /* blocking, rc < 0 */
} run;

struct ctxd_client {
    void *zctx;
    void *sock;
    void *mon; /* PAIR socket receiving sock's ZMQ_EVENT_DISCONNECTED */
    char *endpoint;
    uint64_t next_id;
    double timeout;             /* control reply timeout, seconds */
    double liveness;            /* silence before pinging the daemon; 0 = never */
    uint64_t daemon_pid;        /* from the last hello; 0 = unknown */
    char instance[40];          /* from the last hello; "" = unknown */
    uint64_t max_request_bytes; /* from the last hello; 0 = unknown */
    /* Allocations handed to the caller; freed when the next blocking call
     * starts. */
    void **owned;
    size_t nowned, capowned;
    int last_rc;
    char last_code[64];
    char last_msg[4096]; /* pip's messages can be long */
    /* Runs in flight, and messages received for them by a blocking control
     * request, not dispatched yet (FIFO). */
    run *runs;
    size_t nactive; /* runs neither ended nor removed */
    msg_in *inbox, *inbox_tail;
    int depth; /* > 0 while a callback runs */
    /* Liveness check while runs are in flight. */
    double last_heard;
    uint64_t ping_id; /* outstanding hello, 0 = none */
    double ping_deadline;
};

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
    if (left <= 0)
        return 0;
    if (left > 1e6)
        return 1000000000L;
    return (long)(left * 1000.0) + 1;
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

/* Starts a blocking call: refuses it inside a callback, then frees the
 * previous call's results and error. */
static int request_begin(ctxd_client *c)
{
    if (c->depth > 0)
        return fail(c, CTXD_EINVALID, NULL,
                    "blocking libctxd calls are not allowed from inside a callback");
    for (size_t i = 0; i < c->nowned; i++)
        free(c->owned[i]);
    c->nowned = 0;
    c->last_rc = 0;
    c->last_code[0] = c->last_msg[0] = '\0';
    return 0;
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

/* Frees a received message. */
static void msg_free(msg_in *m)
{
    if (!m)
        return;
    proto_doc_free(&m->doc);
    zmq_msg_close(&m->zmsg);
    free(m);
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
    if (bad)
        return fail(c, CTXD_EPROTOCOL, NULL, "daemon sent a malformed message: %s", bad);
    const proto_val *re = proto_map_get(m->root, "re");
    m->re = re && re->kind == PROTO_UINT ? re->as.u : 0;
    return 0;
}

/* Receives one message without waiting. Returns it (free with msg_free), or
 * NULL with *rc 0 when none is queued, or NULL with *rc < 0 on a transport
 * failure. A message that breaks the envelope rules is dropped (*rc 0, the
 * failure recorded for ctxd_last_error): it cannot be matched to a request. */
static msg_in *recv_nowait(ctxd_client *c, int *rc)
{
    *rc = 0;
    for (;;) {
        msg_in *m = mem_calloc(1, sizeof *m);
        zmq_msg_init(&m->zmsg);
        if (zmq_msg_recv(&m->zmsg, c->sock, ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&m->zmsg);
            free(m);
            if (e == EINTR)
                continue;
            if (e == EAGAIN)
                return NULL;
            *rc = fail(c, CTXD_ETRANSPORT, NULL, "cannot receive from %s: %s", c->endpoint,
                       zmq_strerror(e));
            return NULL;
        }
        if (zmq_msg_more(&m->zmsg)) {
            while (zmq_msg_more(&m->zmsg) && zmq_msg_recv(&m->zmsg, c->sock, ZMQ_DONTWAIT) >= 0)
                ;
            msg_free(m);
            fail(c, CTXD_EPROTOCOL, NULL, "daemon sent a message of more than one frame");
            continue;
        }
        if (msg_decode(c, m) < 0) {
            msg_free(m);
            continue;
        }
        return m;
    }
}

/* Waits up to ms (-1: forever) for the socket to be readable. Returns 1
 * readable, 0 not (timeout or a signal), or CTXD_ETRANSPORT. */
static int wait_readable(ctxd_client *c, long ms)
{
    zmq_pollitem_t items[2] = {{.socket = c->sock, .events = ZMQ_POLLIN},
                               {.socket = c->mon, .events = ZMQ_POLLIN}};
    int n = zmq_poll(items, c->mon ? 2 : 1, ms);
    if (n < 0) {
        if (zmq_errno() == EINTR)
            return 0;
        return fail(c, CTXD_ETRANSPORT, NULL, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    }
    return n > 0;
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

/* ---- runs ------------------------------------------------------------------ */

static run *find_run(ctxd_client *c, uint64_t id)
{
    for (run *r = c->runs; r; r = r->next)
        if (r->id == id && !r->removed)
            return r;
    return NULL;
}

/* Unlinks and frees the runs marked removed (never while a callback runs:
 * the run being dispatched may be one of them). */
static void sweep_runs(ctxd_client *c)
{
    if (c->depth > 0)
        return;
    run **p = &c->runs;
    while (*p) {
        run *r = *p;
        if (r->removed && !r->blocking) {
            *p = r->next;
            free(r->ctx);
            free(r->cause);
            free(r->err_code);
            free(r->err_msg);
            free(r);
        } else {
            p = &r->next;
        }
    }
}

/* Frees a blocking run once ctxd_execute has read it. */
static void drop_blocking(ctxd_client *c, run *r)
{
    r->blocking = false;
    r->removed = true;
    if (!r->ended && c->nactive > 0)
        c->nactive--;
    r->ended = true;
    sweep_runs(c);
}

/* Ends a run: records the outcome for a blocking waiter, calls on_done,
 * marks it for removal. out is NULL when rc < 0 (code/message then say
 * why). */
static void end_run(ctxd_client *c, run *r, int rc, const ctxd_outcome *out, const char *code,
                    const char *message)
{
    if (r->ended)
        return;
    r->ended = true;
    if (c->nactive > 0)
        c->nactive--;
    if (r->blocking) {
        r->rc = rc;
        if (out) {
            r->out = *out;
            r->cause = out->cause ? mem_strdup(out->cause) : NULL;
            r->out.cause = r->cause;
        } else {
            r->err_code = mem_strdup(code ? code : "");
            r->err_msg = mem_strdup(message ? message : "");
        }
    }
    if (r->cb.on_done) {
        ctxd_run_end end = {.run = r->id,
                            .rc = rc,
                            .outcome = out,
                            .code = rc < 0 && code ? code : "",
                            .message = rc < 0 && message ? message : ""};
        c->depth++;
        r->cb.on_done(r->user, &end);
        c->depth--;
    }
    r->removed = true;
}

/* Ends every run in flight with rc (a failed liveness check). */
static void end_all_runs(ctxd_client *c, int rc)
{
    char code[sizeof c->last_code], msg[sizeof c->last_msg];
    snprintf(code, sizeof code, "%s", c->last_code);
    snprintf(msg, sizeof msg, "%s", c->last_msg);
    for (run *r = c->runs; r; r = r->next)
        if (!r->ended && !r->removed)
            end_run(c, r, rc, NULL, code, msg);
}

/* True when the socket monitor reported a dropped connection since the
 * last call (its messages are consumed). */
static bool take_disconnect(ctxd_client *c)
{
    bool dropped = false;
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (!c->mon || zmq_msg_recv(&ev, c->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return dropped;
        }
        uint16_t num = 0;
        if (zmq_msg_size(&ev) >= 2) /* 16-bit event number, native order */
            memcpy(&num, zmq_msg_data(&ev), 2);
        dropped = dropped || (zmq_msg_more(&ev) && num == ZMQ_EVENT_DISCONNECTED);
        while (zmq_msg_more(&ev) && zmq_msg_recv(&ev, c->mon, ZMQ_DONTWAIT) >= 0)
            ;
        zmq_msg_close(&ev);
    }
}

/* A dropped connection loses what was in flight on it (ZeroMQ reconnects,
 * but the daemon answers the old connection): every run then ends with
 * CTXD_ELOST instead of waiting forever. True when that happened. */
static bool connection_dropped(ctxd_client *c)
{
    if (!take_disconnect(c))
        return false;
    fail(c, CTXD_ELOST, NULL,
         "the connection to ctxd at %s dropped while requests were in flight; their outcome "
         "is unknown",
         c->endpoint);
    c->ping_id = 0;
    end_all_runs(c, CTXD_ELOST);
    return true;
}

/* Sends `interrupt {ctx, run}` for a run; the reply is dropped as unmatched. */
static int send_run_interrupt(ctxd_client *c, run *r)
{
    proto_buf b;
    proto_buf_init(&b);
    put_envelope(c, &b, "interrupt", 2);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, r->ctx ? r->ctx : "default");
    proto_put_str(&b, "run");
    proto_put_uint(&b, r->id);
    int rc = send_buf(c, &b);
    proto_buf_free(&b);
    return rc;
}

/* accepted: the run started; send an interrupt asked for earlier. */
static int ev_accepted(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"execution_count", PF_UINT, true, 0},
                                         {"incarnation", PF_UINT, true, 0},
                                         {"previous_death", PF_STR | PF_NIL, false, 0}};
    if (check_fields(c, "accepted event", m->root, fields, 3) < 0)
        return c->last_rc;
    r->accepted = true;
    if (r->interrupt_pending) {
        r->interrupt_pending = false;
        send_run_interrupt(c, r); /* a failed send shows in the liveness check */
    }
    if (r->cb.on_accepted) {
        const proto_val *pd = proto_map_get(m->root, "previous_death");
        char *death = pd && pd->kind == PROTO_STR ? proto_strdup(pd) : NULL;
        r->cb.on_accepted(r->user, get_uint(m->root, "execution_count"),
                          get_uint(m->root, "incarnation"), death);
        free(death);
    }
    return 0;
}

/* stream: output bytes straight to the caller. */
static int ev_stream(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"name", PF_STR, true, 0}, {"data", PF_BIN, true, 0}};
    if (check_fields(c, "stream event", m->root, fields, 2) < 0)
        return c->last_rc;
    if (!r->cb.on_stream)
        return 0;
    const proto_val *name = proto_map_get(m->root, "name");
    const proto_val *data = proto_map_get(m->root, "data");
    char *n = proto_strdup(name);
    r->cb.on_stream(r->user, n, data->as.s, data->n);
    free(n);
    return 0;
}

/* result: the MIME bundle as NUL-terminated arrays. */
static int ev_result(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"execution_count", PF_UINT, false, 0},
                                         {"data", PF_STRMAP, true, 0}};
    if (check_fields(c, "result event", m->root, fields, 2) < 0)
        return c->last_rc;
    if (!r->cb.on_result)
        return 0;
    const proto_val *data = proto_map_get(m->root, "data");
    char **keys = mem_calloc(data->n ? data->n : 1, sizeof *keys);
    char **values = mem_calloc(data->n ? data->n : 1, sizeof *values);
    for (uint32_t i = 0; i < data->n; i++) {
        keys[i] = proto_strdup(&data->as.items[2 * i]);
        values[i] = proto_strdup(&data->as.items[2 * i + 1]);
    }
    r->cb.on_result(r->user, (const char *const *)keys, (const char *const *)values, data->n,
                    get_uint(m->root, "execution_count"));
    for (uint32_t i = 0; i < data->n; i++) {
        free(keys[i]);
        free(values[i]);
    }
    free(keys);
    free(values);
    return 0;
}

/* display: a MIME bundle shown during the run (display(), figures). */
static int ev_display(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"data", PF_STRMAP, true, 0},
                                         {"metadata", PF_MAP | PF_NIL, false, 0},
                                         {"display_id", PF_STR | PF_NIL, false, 0},
                                         {"update", PF_BOOL | PF_NIL, false, 0}};
    if (check_fields(c, "display event", m->root, fields, 4) < 0)
        return c->last_rc;
    if (!r->cb.on_display)
        return 0;
    const proto_val *data = proto_map_get(m->root, "data");
    const proto_val *idv = proto_map_get(m->root, "display_id");
    char *id = idv && idv->kind == PROTO_STR ? proto_strdup(idv) : NULL;
    char **keys = mem_calloc(data->n ? data->n : 1, sizeof *keys);
    char **values = mem_calloc(data->n ? data->n : 1, sizeof *values);
    for (uint32_t i = 0; i < data->n; i++) {
        keys[i] = proto_strdup(&data->as.items[2 * i]);
        values[i] = proto_strdup(&data->as.items[2 * i + 1]);
    }
    r->cb.on_display(r->user, (const char *const *)keys, (const char *const *)values, data->n, id,
                     get_bool(m->root, "update"));
    for (uint32_t i = 0; i < data->n; i++) {
        free(keys[i]);
        free(values[i]);
    }
    free(keys);
    free(values);
    free(id);
    return 0;
}

/* clear_output: the code cleared what it displayed. */
static int ev_clear_output(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"wait", PF_BOOL | PF_NIL, false, 0}};
    if (check_fields(c, "clear_output event", m->root, fields, 1) < 0)
        return c->last_rc;
    if (r->cb.on_clear_output)
        r->cb.on_clear_output(r->user, get_bool(m->root, "wait"));
    return 0;
}

/* input.request: asks on_input and answers with `input.reply` (its `ok` is
 * dropped as unmatched); a NULL answer (or no callback) declines, and the
 * code gets EOFError. */
static int ev_input_request(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"prompt", PF_STR, true, 0},
                                         {"password", PF_BOOL | PF_NIL, false, 0}};
    if (check_fields(c, "input.request event", m->root, fields, 2) < 0)
        return c->last_rc;
    char *prompt = proto_strdup(proto_map_get(m->root, "prompt"));
    const char *value =
        r->cb.on_input ? r->cb.on_input(r->user, prompt, get_bool(m->root, "password")) : NULL;
    free(prompt);
    proto_buf b;
    proto_buf_init(&b);
    put_envelope(c, &b, "input.reply", 2);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, r->ctx ? r->ctx : "default");
    if (value) {
        size_t len = strlen(value);
        proto_put_str(&b, "value");
        proto_put_strn(&b, value, len > (1u << 20) ? 1u << 20 : len);
    } else {
        proto_put_str(&b, "eof");
        proto_put_bool(&b, true);
    }
    send_buf(c, &b); /* a failed send shows in the liveness check */
    proto_buf_free(&b);
    return 0;
}

/* error: exception name, value and traceback lines. */
static int ev_error(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {
        {"ename", PF_STR, true, 0}, {"evalue", PF_STR, true, 0}, {"traceback", PF_ARRAY, true, 0}};
    if (check_fields(c, "error event", m->root, fields, 3) < 0)
        return c->last_rc;
    const proto_val *tb = proto_map_get(m->root, "traceback");
    for (uint32_t i = 0; i < tb->n; i++)
        if (tb->as.items[i].kind != PROTO_STR)
            return fail(c, CTXD_EPROTOCOL, NULL,
                        "daemon sent a malformed error event: traceback lines must be str");
    if (!r->cb.on_error)
        return 0;
    char *ename = proto_strdup(proto_map_get(m->root, "ename"));
    char *evalue = proto_strdup(proto_map_get(m->root, "evalue"));
    char **lines = mem_calloc(tb->n ? tb->n : 1, sizeof *lines);
    for (uint32_t i = 0; i < tb->n; i++)
        lines[i] = proto_strdup(&tb->as.items[i]);
    r->cb.on_error(r->user, ename, evalue, (const char *const *)lines, tb->n);
    for (uint32_t i = 0; i < tb->n; i++)
        free(lines[i]);
    free(lines);
    free(ename);
    free(evalue);
    return 0;
}

static const char *const status_names[] = {[CTXD_OK] = "ok",
                                           [CTXD_ERROR] = "error",
                                           [CTXD_INTERRUPTED] = "interrupted",
                                           [CTXD_TIMEOUT] = "timeout",
                                           [CTXD_DIED] = "died",
                                           [CTXD_ABORTED] = "aborted",
                                           [CTXD_SHUTDOWN] = "shutdown"};

const char *ctxd_status_name(ctxd_status s)
{
    return (size_t)s < sizeof status_names / sizeof status_names[0] ? status_names[s] : "?";
}

/* done: the outcome; ends the run. */
static int ev_done(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {
        {"status", PF_STR, true, 0},        {"execution_count", PF_UINT, false, 0},
        {"incarnation", PF_UINT, false, 0}, {"duration", PF_NUM, false, 0},
        {"cpu_time", PF_NUM, false, 0},     {"truncated", PF_BOOL, false, 0},
        {"state_lost", PF_BOOL, false, 0},  {"cause", PF_STR | PF_NIL, false, 0},
        {"dropped", PF_MAP, false, 0},      {"exit_code", PF_UINT, false, 0}};
    static const proto_field dropped_fields[] = {{"stdout", PF_UINT, false, 0},
                                                 {"stderr", PF_UINT, false, 0}};
    if (check_fields(c, "done reply", m->root, fields, sizeof fields / sizeof fields[0]) < 0)
        return c->last_rc;
    const proto_val *dropped = proto_map_get(m->root, "dropped");
    if (dropped && check_fields(c, "done reply's dropped", dropped, dropped_fields, 2) < 0)
        return c->last_rc;
    const proto_val *status = proto_map_get(m->root, "status");
    size_t s = 0, ns = sizeof status_names / sizeof status_names[0];
    while (s < ns && !proto_str_eq(status, status_names[s]))
        s++;
    if (s == ns)
        return fail(c, CTXD_EPROTOCOL, NULL, "daemon sent an unknown done status '%.*s'",
                    (int)status->n, status->as.s);
    const proto_val *cv = proto_map_get(m->root, "cause");
    char *cause = cv && cv->kind == PROTO_STR ? proto_strdup(cv) : NULL;
    ctxd_outcome out = {
        .status = (ctxd_status)s,
        .execution_count = get_uint(m->root, "execution_count"),
        .incarnation = get_uint(m->root, "incarnation"),
        .duration = get_num(m->root, "duration"),
        .cpu_time = get_num(m->root, "cpu_time"),
        .state_lost = get_bool(m->root, "state_lost"),
        .truncated = get_bool(m->root, "truncated"),
        .dropped_stdout = get_uint(dropped, "stdout"),
        .dropped_stderr = get_uint(dropped, "stderr"),
        .cause = cause,
        .exit_code =
            proto_map_get(m->root, "exit_code") ? (int)(get_uint(m->root, "exit_code") & 0xff) : -1,
    };
    end_run(c, r, 0, &out, NULL, NULL);
    free(cause);
    return 0;
}

/* Routes a message addressed to a run by its type. Unknown event types are
 * skipped (a newer daemon may add events); `ok` would never end the run, so
 * it is a protocol violation, as is a malformed event: the run then ends
 * with CTXD_EPROTOCOL. */
static void run_event(ctxd_client *c, run *r, const msg_in *m)
{
    static const struct {
        const char *type;
        int (*fn)(ctxd_client *, run *, const msg_in *);
    } events[] = {{"accepted", ev_accepted},
                  {"stream", ev_stream},
                  {"result", ev_result},
                  {"display", ev_display},
                  {"error", ev_error},
                  {"done", ev_done},
                  {"clear_output", ev_clear_output},
                  {"input.request", ev_input_request}};
    int rc = 0;
    c->depth++;
    bool known = false;
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++) {
        if (proto_str_eq(m->t, events[i].type)) {
            known = true;
            rc = events[i].fn(c, r, m);
            break;
        }
    }
    c->depth--;
    if (!known && proto_str_eq(m->t, "err")) {
        rc = take_err(c, m);
        end_run(c, r, rc, NULL, c->last_code, c->last_msg);
        return;
    }
    if (!known && proto_str_eq(m->t, "ok"))
        rc = fail(c, CTXD_EPROTOCOL, NULL, "daemon answered execute with 'ok'");
    if (rc < 0)
        end_run(c, r, rc, NULL, c->last_code, c->last_msg);
}

/* Handles the reply to a liveness hello: another instance (or pid) means a
 * restarted daemon that has never heard of our runs. */
static void on_ping_reply(ctxd_client *c, const msg_in *m)
{
    c->ping_id = 0;
    if (!proto_str_eq(m->t, "ok"))
        return;
    const proto_val *inst = proto_map_get(m->root, "instance");
    uint64_t pid = get_uint(m->root, "pid");
    bool other = false;
    char was[sizeof c->instance];
    snprintf(was, sizeof was, "%s", c->instance[0] ? c->instance : "?");
    if (inst && inst->kind == PROTO_STR && c->instance[0])
        other = inst->n != strlen(c->instance) || memcmp(inst->as.s, c->instance, inst->n) != 0;
    else if (pid && c->daemon_pid)
        other = pid != c->daemon_pid;
    if (other) {
        fail(c, CTXD_ELOST, NULL,
             "ctxd at %s restarted (now pid %llu, instance %.*s; was %s) while runs were in "
             "flight; their outcome is unknown",
             c->endpoint, (unsigned long long)pid,
             inst && inst->kind == PROTO_STR ? (int)inst->n : 1,
             inst && inst->kind == PROTO_STR ? inst->as.s : "?", was);
        end_all_runs(c, CTXD_ELOST);
    }
}

/* Dispatches one message (and frees it). */
static void handle_msg(ctxd_client *c, msg_in *m)
{
    c->last_heard = now();
    if (m->re && c->ping_id && m->re == c->ping_id) {
        on_ping_reply(c, m);
    } else if (m->re) {
        run *r = find_run(c, m->re);
        if (r && !r->ended)
            run_event(c, r, m);
    } else if (proto_str_eq(m->t, "err") && c->nactive) {
        /* The daemon could not read the id of a request of ours: which
         * one is unknown, so every run ends rather than one hanging. */
        take_err(c, m);
        char msg[sizeof c->last_msg];
        snprintf(msg, sizeof msg, "%s", c->last_msg);
        fail(c, CTXD_EPROTOCOL, NULL, "the daemon could not read a request of this client: %s",
             msg);
        end_all_runs(c, CTXD_EPROTOCOL);
    }
    msg_free(m);
}

/* Sends a liveness hello when the daemon has been silent for too long while
 * runs are in flight, and ends them when an earlier one went unanswered. */
static void liveness_tick(ctxd_client *c)
{
    if (c->nactive == 0 || c->liveness <= 0) {
        c->ping_id = 0;
        return;
    }
    double t = now();
    if (c->ping_id && t >= c->ping_deadline) {
        c->ping_id = 0;
        fail(c, CTXD_EUNREACHABLE, NULL,
             "ctxd at %s stopped answering (no reply to a liveness check within %g s)", c->endpoint,
             c->timeout);
        end_all_runs(c, CTXD_EUNREACHABLE);
        c->last_heard = t;
        return;
    }
    if (!c->ping_id && t - c->last_heard >= c->liveness) {
        proto_buf b;
        proto_buf_init(&b);
        uint64_t id = put_envelope(c, &b, "hello", 0);
        if (send_buf(c, &b) == 0) {
            c->ping_id = id;
            c->ping_deadline = t + c->timeout;
        } else {
            c->ping_id = 0;
            end_all_runs(c, c->last_rc);
            c->last_heard = t;
        }
        proto_buf_free(&b);
    }
}

/* Milliseconds until liveness_tick has something to do (-1: never). */
static long liveness_due_ms(const ctxd_client *c)
{
    if (c->nactive == 0 || c->liveness <= 0)
        return -1;
    return c->ping_id ? ms_until(c->ping_deadline) : ms_until(c->last_heard + c->liveness);
}

/* Parks a message for a run in the inbox (used by blocking control calls). */
static void inbox_push(ctxd_client *c, msg_in *m)
{
    m->next = NULL;
    if (c->inbox_tail)
        c->inbox_tail->next = m;
    else
        c->inbox = m;
    c->inbox_tail = m;
}

static msg_in *inbox_pop(ctxd_client *c)
{
    msg_in *m = c->inbox;
    if (m) {
        c->inbox = m->next;
        if (!c->inbox)
            c->inbox_tail = NULL;
    }
    return m;
}

/* The body of ctxd_step (also used by ctxd_execute's wait). */
static int step(ctxd_client *c, long timeout_ms)
{
    int n = 0, rc = 0;
    msg_in *m;
    while ((m = inbox_pop(c))) {
        handle_msg(c, m);
        n++;
    }
    if (n == 0 && timeout_ms != 0) {
        long due = liveness_due_ms(c);
        long wait = timeout_ms < 0 ? due : (due >= 0 && due < timeout_ms ? due : timeout_ms);
        rc = wait_readable(c, wait);
        if (rc < 0)
            return rc;
    }
    for (;;) {
        m = recv_nowait(c, &rc);
        if (rc < 0)
            return rc;
        if (!m)
            break;
        handle_msg(c, m);
        n++;
    }
    if (connection_dropped(c))
        n++;
    liveness_tick(c);
    sweep_runs(c);
    return n;
}

/* ---- control requests: the round trip ----------------------------------- */

/* Sends a control request and waits (up to the control timeout) for its
 * terminal reply. Returns 0 with *out holding the `ok` (caller frees it with
 * msg_free), or a negative code. Messages for runs in flight are parked in
 * the inbox; others (late replies) are dropped. */
static int roundtrip_ex(ctxd_client *c, const proto_buf *b, uint64_t id, bool live, msg_in **out)
{
    /* A drop reported before this request concerns what was in flight then. */
    connection_dropped(c);
    int r = send_buf(c, b);
    if (r < 0)
        return r;
    /* live: no deadline, but after `liveness` seconds of silence a hello
     * must be answered within the control timeout. */
    double heard = now(), deadline = heard + c->timeout;
    uint64_t ping = 0;
    for (;;) {
        if (live && !ping && c->liveness > 0 && now() - heard >= c->liveness) {
            proto_buf pb;
            proto_buf_init(&pb);
            ping = put_envelope(c, &pb, "hello", 0);
            r = send_buf(c, &pb);
            proto_buf_free(&pb);
            if (r < 0)
                return r;
            deadline = now() + c->timeout;
        }
        msg_in *m = recv_nowait(c, &r);
        if (r < 0)
            return r;
        if (!m) {
            if (connection_dropped(c))
                return CTXD_ELOST;
            if ((!live || ping) && now() >= deadline)
                return fail(c, CTXD_EUNREACHABLE, NULL,
                            "no reply from ctxd at %s within %g s (is the daemon running?)",
                            c->endpoint, c->timeout);
            long wait = !live || ping     ? ms_until(deadline)
                        : c->liveness > 0 ? ms_until(heard + c->liveness)
                                          : -1;
            r = wait_readable(c, wait);
            if (r < 0)
                return r;
            continue;
        }
        heard = now();
        if (ping && m->re == ping) {
            ping = 0;
            msg_free(m);
            continue;
        }
        if (!m->re && proto_str_eq(m->t, "err")) {
            /* An unreadable request: ours is the one waiting here. */
            r = take_err(c, m);
            msg_free(m);
            return r;
        }
        if (m->re != id) {
            if (m->re && ((c->ping_id && m->re == c->ping_id) || find_run(c, m->re)))
                inbox_push(c, m);
            else
                msg_free(m);
            continue;
        }
        c->last_heard = now();
        if (proto_str_eq(m->t, "ok")) {
            *out = m;
            return 0;
        }
        r = proto_str_eq(m->t, "err")
                ? take_err(c, m)
                : fail(c, CTXD_EPROTOCOL, NULL, "daemon answered a control request with '%.*s'",
                       (int)m->t->n, m->t->as.s);
        msg_free(m);
        return r;
    }
}

static int roundtrip(ctxd_client *c, const proto_buf *b, uint64_t id, msg_in **out)
{
    return roundtrip_ex(c, b, id, false, out);
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
                                         {"rss", PF_UINT, false, 0},
                                         {"pss", PF_UINT, false, 0},
                                         {"last_death", PF_STR | PF_NIL, false, 0},
                                         {"tier", PF_STR, false, 0}};
    if (check_fields(c, "context info", v, fields, sizeof fields / sizeof fields[0]) < 0)
        return c->last_rc;
    if (!out)
        return 0;
    const char *cwd = own_str(c, proto_map_get(v, "cwd"));
    const char *tier = own_str(c, proto_map_get(v, "tier"));
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
        .rss = get_uint(v, "rss"),
        .pss = get_uint(v, "pss"),
        .tier = tier ? tier : "unsafe",
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

/* Reads hello's reply, remembering the daemon pid, instance and request
 * limit. */
static int parse_hello(ctxd_client *c, const msg_in *m, ctxd_hello_info *out)
{
    static const proto_field fields[] = {
        {"server", PF_STR, true, 0},     {"version", PF_STR, false, 0},
        {"protocol", PF_UINT, false, 0}, {"versions", PF_ARRAY, false, 0},
        {"pid", PF_UINT, true, 0},       {"instance", PF_STR, false, 0},
        {"limits", PF_MAP, false, 0}};
    static const proto_field limit_fields[] = {
        {"max_request_bytes", PF_UINT, false, 0}, {"max_code_bytes", PF_UINT, false, 0},
        {"max_queue", PF_UINT, false, 0},         {"max_contexts", PF_UINT, false, 0},
        {"default_timeout", PF_NUM, false, 0},    {"kill_grace", PF_NUM, false, 0},
        {"max_output", PF_UINT, false, 0},        {"idle_ttl", PF_NUM, false, 0},
        {"on_disconnect", PF_STR, false, 0}};
    if (check_fields(c, "hello reply", m->root, fields, sizeof fields / sizeof fields[0]) < 0)
        return c->last_rc;
    const proto_val *limits = proto_map_get(m->root, "limits");
    if (limits && check_fields(c, "hello limits", limits, limit_fields,
                               sizeof limit_fields / sizeof limit_fields[0]) < 0)
        return c->last_rc;
    const proto_val *vs = proto_map_get(m->root, "versions");
    uint64_t *versions = own(c, mem_calloc(vs && vs->n ? vs->n : 1, sizeof *versions));
    for (uint32_t i = 0; vs && i < vs->n; i++) {
        if (vs->as.items[i].kind != PROTO_UINT)
            return fail(c, CTXD_EPROTOCOL, NULL,
                        "daemon sent a malformed hello reply: "
                        "'versions' must hold uints");
        versions[i] = vs->as.items[i].as.u;
    }
    const proto_val *inst = proto_map_get(m->root, "instance");
    c->daemon_pid = get_uint(m->root, "pid");
    c->max_request_bytes = get_uint(limits, "max_request_bytes");
    if (inst && inst->n < sizeof c->instance)
        snprintf(c->instance, sizeof c->instance, "%.*s", (int)inst->n, inst->as.s);
    if (!out)
        return 0;
    const char *version = own_str(c, proto_map_get(m->root, "version"));
    const char *instance = own_str(c, inst);
    *out = (ctxd_hello_info){
        .server = own_str(c, proto_map_get(m->root, "server")),
        .version = version ? version : "",
        .protocol = get_uint(m->root, "protocol"),
        .versions = versions,
        .nversions = vs ? vs->n : 0,
        .pid = c->daemon_pid,
        .instance = instance ? instance : "",
        .max_request_bytes = c->max_request_bytes,
        .max_code_bytes = get_uint(limits, "max_code_bytes"),
        .max_queue = get_uint(limits, "max_queue"),
        .max_contexts = get_uint(limits, "max_contexts"),
        .default_timeout = get_num(limits, "default_timeout"),
        .kill_grace = get_num(limits, "kill_grace"),
        .max_output = get_uint(limits, "max_output"),
        .idle_ttl = get_num(limits, "idle_ttl"),
        .on_disconnect = "",
    };
    const char *od = own_str(c, proto_map_get(limits, "on_disconnect"));
    if (od)
        out->on_disconnect = od;
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

/* A Z85 key (40 characters) given inline or as the first such line of a
 * file, as PROTOCOL.md section 1 allows for CTXD_SERVER_KEY/CTXD_CLIENT_KEY. */
static int read_z85(const char *spec, char key[41])
{
    if (strlen(spec) == 40 && spec[0] != '/' && spec[0] != '.') {
        memcpy(key, spec, 41);
        return 0;
    }
    FILE *f = fopen(spec, "r");
    if (!f)
        return -1;
    char line[256];
    int rc = -1;
    while (rc < 0 && fgets(line, sizeof line, f)) {
        char *p = line + strspn(line, " \t");
        if (*p == '#' || strcspn(p, " \t\r\n") != 40)
            continue;
        memcpy(key, p, 40);
        key[40] = '\0';
        rc = 0;
    }
    fclose(f);
    return rc;
}

/* tcp:// with CurveZMQ: the server's public key from $CTXD_SERVER_KEY, the
 * client's secret key from $CTXD_CLIENT_KEY (default
 * ~/.config/ctxd/client.key); the public key follows from the secret. No
 * server key: plain tcp (a daemon started with --insecure-tcp). */
static int apply_curve(ctxd_client *c)
{
    const char *server = getenv("CTXD_SERVER_KEY");
    if (strncmp(c->endpoint, "tcp://", 6) != 0 || !server || !*server)
        return 0;
    char server_key[41], secret[41], public[41], path[4096];
    if (read_z85(server, server_key) < 0)
        return fail(c, CTXD_EINVALID, NULL,
                    "CTXD_SERVER_KEY: '%s' is neither a Z85 key nor a "
                    "readable key file",
                    server);
    const char *client = getenv("CTXD_CLIENT_KEY");
    if (!client || !*client) {
        const char *home = getenv("HOME");
        snprintf(path, sizeof path, "%s/.config/ctxd/client.key", home ? home : "");
        client = path;
    }
    if (read_z85(client, secret) < 0 || zmq_curve_public(public, secret) != 0)
        return fail(c, CTXD_EINVALID, NULL,
                    "client key '%s' cannot be read (make one with "
                    "`ctx keygen`)",
                    client);
    zmq_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, server_key, 40);
    zmq_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, public, 40);
    zmq_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, secret, 40);
    return 0;
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
    if (apply_curve(c) < 0)
        return -1;
    /* A monitor tells when the connection drops (what was in flight on it
     * is lost); the PAIR end is polled with the socket. */
    char mon[64];
    snprintf(mon, sizeof mon, "inproc://ctxd-monitor-%p", (void *)c);
    if (zmq_socket_monitor(c->sock, mon, ZMQ_EVENT_DISCONNECTED) < 0 ||
        !(c->mon = zmq_socket(c->zctx, ZMQ_PAIR)))
        return fail(c, CTXD_ETRANSPORT, NULL, "zmq_socket_monitor: %s", zmq_strerror(zmq_errno()));
    zmq_setsockopt(c->mon, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(c->mon, mon) < 0)
        return fail(c, CTXD_ETRANSPORT, NULL, "zmq_connect(monitor): %s",
                    zmq_strerror(zmq_errno()));
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
    c->last_heard = now();
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

/* Releases the socket, the ZeroMQ context, runs in flight, parked messages
 * and all owned results. */
void ctxd_close(ctxd_client *c)
{
    if (!c)
        return;
    c->depth = 0;
    request_begin(c);
    msg_in *m;
    while ((m = inbox_pop(c)))
        msg_free(m);
    for (run *r = c->runs; r; r = r->next) {
        r->removed = true;
        r->blocking = false;
    }
    sweep_runs(c);
    if (c->mon)
        zmq_close(c->mon);
    if (c->sock) {
        zmq_socket_monitor(c->sock, NULL, 0);
        zmq_close(c->sock);
    }
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

/* How soon a client with runs in flight checks the daemon is still there. */
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

/* A request without fields (hello, ctx.list, stats): its reply in *m. */
static int bare_request(ctxd_client *c, const char *type, msg_in **m)
{
    if (request_begin(c) < 0)
        return c->last_rc;
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, type, 0);
    int r = roundtrip(c, &b, id, m);
    proto_buf_free(&b);
    return r;
}

/* hello: also refreshes the cached daemon pid, instance and request limit. */
int ctxd_hello(ctxd_client *c, ctxd_hello_info *out)
{
    msg_in *m = NULL;
    int r = bare_request(c, "hello", &m);
    if (r < 0)
        return r;
    r = parse_hello(c, m, out);
    msg_free(m);
    return r;
}

/* ctx.create with the optional fields the caller gave. */
int ctxd_ctx_create(ctxd_client *c, const char *name, const char *cwd, const ctxd_kv *env,
                    size_t nenv, ctxd_ctx_info *out)
{
    if (request_begin(c) < 0)
        return c->last_rc;
    proto_buf b;
    msg_in *m = NULL;
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
    r = parse_ctx_reply(c, m, out);
    msg_free(m);
    return r;
}

/* ctx.list into an owned array of infos. */
int ctxd_ctx_list(ctxd_client *c, const ctxd_ctx_info **out, size_t *n)
{
    static const proto_field fields[] = {{"contexts", PF_ARRAY, true, 0}};
    msg_in *m = NULL;
    int r = bare_request(c, "ctx.list", &m);
    if (r < 0)
        return r;
    r = check_fields(c, "ctx.list reply", m->root, fields, 1);
    const proto_val *arr = proto_map_get(m->root, "contexts");
    size_t count = r == 0 ? arr->n : 0;
    ctxd_ctx_info *infos = own(c, mem_calloc(count ? count : 1, sizeof *infos));
    for (size_t i = 0; i < count && r == 0; i++)
        r = parse_info(c, &arr->as.items[i], &infos[i]);
    msg_free(m);
    if (out)
        *out = r == 0 ? infos : NULL;
    if (n)
        *n = r == 0 ? count : 0;
    return r;
}

/* stats: the daemon's counters. */
int ctxd_stats(ctxd_client *c, ctxd_stats_info *out)
{
    static const proto_field fields[] = {{"uptime", PF_NUM, false, 0},
                                         {"contexts", PF_MAP, false, 0},
                                         {"counters", PF_MAP, false, 0}};
    static const char *const counter_names[] = {
        "requests",        "refused",          "runs",         "runs_ok",
        "runs_error",      "runs_interrupted", "runs_timeout", "runs_died",
        "runs_aborted",    "runs_shutdown",    "stdout_bytes", "stderr_bytes",
        "truncated_bytes", "workers_spawned",  "worker_deaths"};
    msg_in *m = NULL;
    int r = bare_request(c, "stats", &m);
    if (r < 0)
        return r;
    r = check_fields(c, "stats reply", m->root, fields, sizeof fields / sizeof fields[0]);
    if (r == 0 && out) {
        const proto_val *ctxs = proto_map_get(m->root, "contexts");
        const proto_val *cnt = proto_map_get(m->root, "counters");
        uint64_t *counters[] = {
            &out->requests,        &out->refused,          &out->runs,         &out->runs_ok,
            &out->runs_error,      &out->runs_interrupted, &out->runs_timeout, &out->runs_died,
            &out->runs_aborted,    &out->runs_shutdown,    &out->stdout_bytes, &out->stderr_bytes,
            &out->truncated_bytes, &out->workers_spawned,  &out->worker_deaths};
        *out = (ctxd_stats_info){
            .uptime = get_num(m->root, "uptime"),
            .live = get_uint(ctxs, "live"),
            .busy = get_uint(ctxs, "busy"),
            .queued = get_uint(ctxs, "queued"),
            .created = get_uint(ctxs, "created"),
        };
        for (size_t i = 0; i < sizeof counter_names / sizeof counter_names[0]; i++)
            *counters[i] = get_uint(cnt, counter_names[i]);
    }
    msg_free(m);
    return r;
}

/* ctx.fork: waits in the source's queue, so without a deadline. */
int ctxd_ctx_fork(ctxd_client *c, const char *src, const char *name, ctxd_ctx_info *out)
{
    if (request_begin(c) < 0)
        return c->last_rc;
    if (!src)
        return fail(c, CTXD_EINVALID, NULL, "ctx.fork needs the context to clone");
    proto_buf b;
    msg_in *m = NULL;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, "ctx.fork", 1 + (name != NULL));
    proto_put_str(&b, "ctx");
    proto_put_str(&b, src);
    if (name) {
        proto_put_str(&b, "name");
        proto_put_str(&b, name);
    }
    int r = roundtrip_ex(c, &b, id, true, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = parse_ctx_reply(c, m, out);
    msg_free(m);
    return r;
}

/* Sends a request whose fields are a context name (ctx.delete, ctx.restart,
 * interrupt) and optionally a run id, and waits for its ok, left in *m. */
static int ctx_request(ctxd_client *c, const char *type, const char *name, uint64_t run_id,
                       msg_in **m)
{
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, type, 1 + (run_id != 0));
    proto_put_str(&b, "ctx");
    proto_put_str(&b, name);
    if (run_id) {
        proto_put_str(&b, "run");
        proto_put_uint(&b, run_id);
    }
    int r = roundtrip(c, &b, id, m);
    proto_buf_free(&b);
    return r;
}

/* ctx.delete; the reply carries nothing. */
int ctxd_ctx_delete(ctxd_client *c, const char *name)
{
    if (request_begin(c) < 0)
        return c->last_rc;
    if (!name)
        return fail(c, CTXD_EINVALID, NULL, "ctx.delete needs a context name");
    msg_in *m = NULL;
    int r = ctx_request(c, "ctx.delete", name, 0, &m);
    msg_free(m);
    return r;
}

/* ctx.restart; default context when name is NULL. */
int ctxd_ctx_restart(ctxd_client *c, const char *name, ctxd_ctx_info *out)
{
    if (request_begin(c) < 0)
        return c->last_rc;
    msg_in *m = NULL;
    int r = ctx_request(c, "ctx.restart", name ? name : "default", 0, &m);
    if (r < 0)
        return r;
    r = parse_ctx_reply(c, m, out);
    msg_free(m);
    return r;
}

/* interrupt, optionally of one run; reports whether it hit something. */
int ctxd_interrupt_run(ctxd_client *c, const char *ctx, uint64_t run_id, bool *interrupted)
{
    static const proto_field fields[] = {{"interrupted", PF_BOOL, true, 0}};
    if (request_begin(c) < 0)
        return c->last_rc;
    msg_in *m = NULL;
    int r = ctx_request(c, "interrupt", ctx ? ctx : "default", run_id, &m);
    if (r < 0)
        return r;
    r = check_fields(c, "interrupt reply", m->root, fields, 1);
    if (r == 0 && interrupted)
        *interrupted = get_bool(m->root, "interrupted");
    msg_free(m);
    return r;
}

/* interrupt of whatever runs on ctx. */
int ctxd_interrupt(ctxd_client *c, const char *ctx, bool *interrupted)
{
    return ctxd_interrupt_run(c, ctx, 0, interrupted);
}

/* ---- files and packages ------------------------------------------------- */

/* file.put of one chunk. */
int ctxd_file_put(ctxd_client *c, const char *ctx, const char *path, uint64_t offset,
                  const void *data, size_t len, uint64_t *size)
{
    static const proto_field fields[] = {{"size", PF_UINT, true, 0}};
    if (request_begin(c) < 0)
        return c->last_rc;
    if (!path || (!data && len) || len > CTXD_FILE_CHUNK)
        return fail(c, CTXD_EINVALID, NULL, "file.put needs a path and at most %u bytes",
                    CTXD_FILE_CHUNK);
    proto_buf b;
    msg_in *m = NULL;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, "file.put", 4);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, ctx ? ctx : "default");
    proto_put_str(&b, "path");
    proto_put_str(&b, path);
    proto_put_str(&b, "data");
    proto_put_bin(&b, data ? data : "", len);
    proto_put_str(&b, "offset");
    proto_put_uint(&b, offset);
    int r = roundtrip(c, &b, id, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = check_fields(c, "file.put reply", m->root, fields, 1);
    if (r == 0 && size)
        *size = get_uint(m->root, "size");
    msg_free(m);
    return r;
}

/* file.get of one chunk, copied into memory the client owns. */
int ctxd_file_get(ctxd_client *c, const char *ctx, const char *path, uint64_t offset, size_t length,
                  const void **data, size_t *n, uint64_t *size, bool *eof)
{
    static const proto_field fields[] = {
        {"data", PF_BIN, true, 0}, {"size", PF_UINT, true, 0}, {"eof", PF_BOOL, true, 0}};
    if (request_begin(c) < 0)
        return c->last_rc;
    if (!path)
        return fail(c, CTXD_EINVALID, NULL, "file.get needs a path");
    proto_buf b;
    msg_in *m = NULL;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, "file.get", 4);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, ctx ? ctx : "default");
    proto_put_str(&b, "path");
    proto_put_str(&b, path);
    proto_put_str(&b, "offset");
    proto_put_uint(&b, offset);
    proto_put_str(&b, "length");
    proto_put_uint(&b, length && length < CTXD_FILE_CHUNK ? length : CTXD_FILE_CHUNK);
    int r = roundtrip(c, &b, id, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = check_fields(c, "file.get reply", m->root, fields, 3);
    if (r == 0) {
        const proto_val *d = proto_map_get(m->root, "data");
        void *copy = own(c, mem_alloc(d->n ? d->n : 1));
        memcpy(copy, d->as.s, d->n);
        if (data)
            *data = copy;
        if (n)
            *n = d->n;
        if (size)
            *size = get_uint(m->root, "size");
        if (eof)
            *eof = get_bool(m->root, "eof");
    }
    msg_free(m);
    return r;
}

/* A `packages` array of the caller's strings. */
static int put_packages(ctxd_client *c, proto_buf *b, const char *const *packages, size_t n)
{
    if (n > UINT32_MAX || (n && !packages))
        return fail(c, CTXD_EINVALID, NULL, "bad package list");
    proto_put_str(b, "packages");
    proto_put_array(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        if (!packages[i])
            return fail(c, CTXD_EINVALID, NULL, "package %zu is NULL", i);
        proto_put_str(b, packages[i]);
    }
    return 0;
}

/* pip.install: pip may take long, so without a deadline (liveness checks
 * as for runs). */
int ctxd_pip_install(ctxd_client *c, const char *ctx, const char *const *packages, size_t npackages,
                     const ctxd_package **out, size_t *n)
{
    static const proto_field fields[] = {{"packages", PF_ARRAY, true, 0}};
    static const proto_field item_fields[] = {{"name", PF_STR, true, 0},
                                              {"cached", PF_BOOL, true, 0}};
    if (request_begin(c) < 0)
        return c->last_rc;
    proto_buf b;
    msg_in *m = NULL;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, "pip.install", 2);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, ctx ? ctx : "default");
    int r = put_packages(c, &b, packages, npackages);
    if (r == 0)
        r = roundtrip_ex(c, &b, id, true, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = check_fields(c, "pip.install reply", m->root, fields, 1);
    const proto_val *arr = proto_map_get(m->root, "packages");
    size_t count = r == 0 ? arr->n : 0;
    ctxd_package *pkgs = own(c, mem_calloc(count ? count : 1, sizeof *pkgs));
    for (size_t i = 0; i < count && r == 0; i++) {
        const proto_val *item = &arr->as.items[i];
        r = check_fields(c, "pip.install reply's package", item, item_fields, 2);
        if (r == 0) {
            pkgs[i].name = own_str(c, proto_map_get(item, "name"));
            pkgs[i].cached = get_bool(item, "cached");
        }
    }
    msg_free(m);
    if (out)
        *out = r == 0 ? pkgs : NULL;
    if (n)
        *n = r == 0 ? count : 0;
    return r;
}

/* One policy value from its text form (see ctxd_create_opts): a boolean,
 * a number (unsigned integer or float) or a [list,of,strings]. */
static int put_policy_value(ctxd_client *c, proto_buf *b, const char *key, const char *v)
{
    size_t n = strlen(v);
    if (!strcmp(v, "true") || !strcmp(v, "false")) {
        proto_put_bool(b, v[0] == 't');
        return 0;
    }
    if (n >= 2 && v[0] == '[' && v[n - 1] == ']') {
        uint32_t items = 0;
        for (size_t i = 1; i < n - 1; i++)
            items += v[i] == ',';
        items += n > 2;
        proto_put_array(b, items);
        for (size_t i = 1, start = 1; n > 2 && i <= n - 1; i++)
            if (i == n - 1 || v[i] == ',') {
                proto_put_strn(b, v + start, i - start);
                start = i + 1;
            }
        return 0;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long u = strtoull(v, &end, 10);
    if (n && v[0] != '-' && end && *end == '\0' && errno == 0) {
        proto_put_uint(b, u);
        return 0;
    }
    double d = strtod(v, &end);
    if (n && end && *end == '\0') {
        proto_put_double(b, d);
        return 0;
    }
    return fail(c, CTXD_EINVALID, NULL,
                "policy field '%s': '%s' is not true, false, a number or [a,b,...]", key, v);
}

static int put_policy(ctxd_client *c, proto_buf *b, const ctxd_kv *kv, size_t n)
{
    if (n > 64 || !kv)
        return fail(c, CTXD_EINVALID, NULL, "bad policy (at most 64 fields)");
    proto_put_str(b, "policy");
    proto_put_map(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        if (!kv[i].key || !kv[i].value)
            return fail(c, CTXD_EINVALID, NULL, "policy field %zu is NULL", i);
        proto_put_str(b, kv[i].key);
        int r = put_policy_value(c, b, kv[i].key, kv[i].value);
        if (r < 0)
            return r;
    }
    return 0;
}

/* ctx.create with every option; with packages it waits for pip without a
 * deadline. */
int ctxd_ctx_create_ex(ctxd_client *c, const ctxd_create_opts *o, ctxd_ctx_info *out)
{
    if (request_begin(c) < 0)
        return c->last_rc;
    static const ctxd_create_opts none = {0};
    if (!o)
        o = &none;
    proto_buf b;
    msg_in *m = NULL;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, "ctx.create",
                               (o->name != NULL) + (o->cwd != NULL) + (o->nenv > 0) +
                                   (o->npackages > 0) + (o->tier != NULL) + (o->npolicy > 0));
    if (o->tier) {
        proto_put_str(&b, "tier");
        proto_put_str(&b, o->tier);
    }
    if (o->name) {
        proto_put_str(&b, "name");
        proto_put_str(&b, o->name);
    }
    if (o->cwd) {
        proto_put_str(&b, "cwd");
        proto_put_str(&b, o->cwd);
    }
    int r = 0;
    if (o->nenv > 0) {
        proto_put_str(&b, "env");
        r = put_env(c, &b, o->env, o->nenv);
    }
    if (r == 0 && o->npackages > 0)
        r = put_packages(c, &b, o->packages, o->npackages);
    if (r == 0 && o->npolicy > 0)
        r = put_policy(c, &b, o->policy, o->npolicy);
    if (r == 0)
        r = roundtrip_ex(c, &b, id, o->npackages > 0, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = parse_ctx_reply(c, m, out);
    msg_free(m);
    return r;
}

/* ---- queries ------------------------------------------------------------- */

/* Sends one query (its optional fields when set) and waits, without a
 * deadline, for its ok, left in *m. */
static int query(ctxd_client *c, const char *type, const char *ctx, const char *code,
                 uint64_t cursor, unsigned detail_level, msg_in **m)
{
    if (request_begin(c) < 0)
        return c->last_rc;
    if (!code)
        return fail(c, CTXD_EINVALID, NULL, "%s needs the code", type);
    bool with_cursor = cursor != CTXD_CURSOR_END, with_detail = detail_level != 0;
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id = put_envelope(c, &b, type, 2 + with_cursor + with_detail);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, ctx ? ctx : "default");
    proto_put_str(&b, "code");
    proto_put_str(&b, code);
    if (with_cursor) {
        proto_put_str(&b, "cursor");
        proto_put_uint(&b, cursor);
    }
    if (with_detail) {
        proto_put_str(&b, "detail_level");
        proto_put_uint(&b, detail_level);
    }
    int r = roundtrip_ex(c, &b, id, true, m);
    proto_buf_free(&b);
    return r;
}

/* complete: the matches copied out of the reply. */
int ctxd_complete(ctxd_client *c, const char *ctx, const char *code, uint64_t cursor,
                  ctxd_completion *out)
{
    static const proto_field fields[] = {{"matches", PF_ARRAY, true, 0},
                                         {"cursor_start", PF_UINT, true, 0},
                                         {"cursor_end", PF_UINT, true, 0}};
    msg_in *m = NULL;
    int r = query(c, "complete", ctx, code, cursor, 0, &m);
    if (r < 0)
        return r;
    r = check_fields(c, "complete reply", m->root, fields, 3);
    const proto_val *arr = r == 0 ? proto_map_get(m->root, "matches") : NULL;
    for (uint32_t i = 0; arr && i < arr->n && r == 0; i++)
        if (arr->as.items[i].kind != PROTO_STR)
            r = fail(c, CTXD_EPROTOCOL, NULL, "complete reply: a match is not a str");
    if (r == 0 && out) {
        const char **matches = own(c, mem_calloc(arr->n ? arr->n : 1, sizeof *matches));
        for (uint32_t i = 0; i < arr->n; i++)
            matches[i] = own_str(c, &arr->as.items[i]);
        *out = (ctxd_completion){.matches = matches,
                                 .nmatches = arr->n,
                                 .cursor_start = get_uint(m->root, "cursor_start"),
                                 .cursor_end = get_uint(m->root, "cursor_end")};
    }
    msg_free(m);
    return r;
}

/* inspect: found and the text/plain entry of data. */
int ctxd_inspect(ctxd_client *c, const char *ctx, const char *code, uint64_t cursor,
                 unsigned detail_level, ctxd_inspection *out)
{
    static const proto_field fields[] = {{"found", PF_BOOL, true, 0}, {"data", PF_STRMAP, true, 0}};
    msg_in *m = NULL;
    int r = query(c, "inspect", ctx, code, cursor, detail_level, &m);
    if (r < 0)
        return r;
    r = check_fields(c, "inspect reply", m->root, fields, 2);
    if (r == 0 && out) {
        const char *text = own_str(c, proto_map_get(proto_map_get(m->root, "data"), "text/plain"));
        *out = (ctxd_inspection){.found = get_bool(m->root, "found"), .text = text ? text : ""};
    }
    msg_free(m);
    return r;
}

/* is_complete: status and indent. */
int ctxd_is_complete(ctxd_client *c, const char *ctx, const char *code, ctxd_completeness *out)
{
    static const proto_field fields[] = {{"status", PF_STR, true, 0}, {"indent", PF_STR, false, 0}};
    msg_in *m = NULL;
    int r = query(c, "is_complete", ctx, code, CTXD_CURSOR_END, 0, &m);
    if (r < 0)
        return r;
    r = check_fields(c, "is_complete reply", m->root, fields, 2);
    if (r == 0 && out) {
        const char *indent = own_str(c, proto_map_get(m->root, "indent"));
        *out = (ctxd_completeness){.status = own_str(c, proto_map_get(m->root, "status")),
                                   .indent = indent ? indent : ""};
    }
    msg_free(m);
    return r;
}

/* ---- execute ------------------------------------------------------------- */

/* Encodes the execute request from the caller's options. */
static int put_execute(ctxd_client *c, proto_buf *b, const ctxd_exec_opts *o, size_t code_len,
                       bool allow_stdin, uint64_t *id)
{
    bool timeout = o->timeout >= 0; /* false for NaN too */
    *id = put_envelope(c, b, "execute",
                       1 + (o->ctx != NULL) + timeout + (o->nenv > 0) + o->silent +
                           o->stop_on_error + allow_stdin + (o->file != NULL) + (o->argc > 0));
    if (o->ctx) {
        proto_put_str(b, "ctx");
        proto_put_str(b, o->ctx);
    }
    proto_put_str(b, "code");
    proto_put_strn(b, o->code, code_len);
    if (timeout) {
        proto_put_str(b, "timeout");
        proto_put_double(b, o->timeout);
    }
    int r = 0;
    if (o->nenv > 0) {
        proto_put_str(b, "env");
        r = put_env(c, b, o->env, o->nenv);
    }
    if (o->silent) {
        proto_put_str(b, "silent");
        proto_put_bool(b, true);
    }
    if (o->stop_on_error) {
        proto_put_str(b, "stop_on_error");
        proto_put_bool(b, true);
    }
    if (allow_stdin) { /* on_input answers input() */
        proto_put_str(b, "allow_stdin");
        proto_put_bool(b, true);
    }
    if (o->file) {
        proto_put_str(b, "file");
        proto_put_str(b, o->file);
    }
    if (o->argc > 0) {
        proto_put_str(b, "argv");
        proto_put_array(b, (uint32_t)o->argc);
        for (size_t i = 0; i < o->argc; i++)
            proto_put_str(b, o->argv[i] ? o->argv[i] : "");
    }
    return r;
}

/* Sends an execute and registers its run. */
static int submit(ctxd_client *c, const ctxd_exec_opts *opts, const ctxd_callbacks *cb, void *user,
                  bool blocking, run **out)
{
    if (!opts || !opts->code)
        return fail(c, CTXD_EINVALID, NULL, "execute needs code");
    if (opts->argc > 4096)
        return fail(c, CTXD_EINVALID, NULL, "execute argv has more than 4096 items");
    size_t code_len = opts->code_len ? opts->code_len : strlen(opts->code);
    if (c->max_request_bytes && code_len > c->max_request_bytes)
        return fail(c, CTXD_EREFUSED, "too_large",
                    "code of %zu bytes exceeds the daemon's max_request_bytes (%llu)", code_len,
                    (unsigned long long)c->max_request_bytes);
    /* A drop seen now ended what was in flight before this run (not from a
     * callback: ending runs calls their on_done). */
    if (c->depth == 0)
        connection_dropped(c);
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id;
    int r = put_execute(c, &b, opts, code_len, cb && cb->on_input, &id);
    if (r == 0)
        r = send_buf(c, &b);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    run *rn = mem_calloc(1, sizeof *rn);
    rn->id = id;
    rn->ctx = opts->ctx ? mem_strdup(opts->ctx) : NULL;
    if (cb)
        rn->cb = *cb;
    rn->user = user;
    rn->blocking = blocking;
    /* Append, so runs are found in submission order. */
    run **p = &c->runs;
    while (*p)
        p = &(*p)->next;
    *p = rn;
    if (c->nactive++ == 0) {
        c->last_heard = now(); /* the silence that matters starts now */
        c->ping_id = 0;
    }
    if (out)
        *out = rn;
    return 0;
}

int ctxd_submit(ctxd_client *c, const ctxd_exec_opts *opts, const ctxd_callbacks *cb, void *user,
                uint64_t *run_id)
{
    run *r = NULL;
    int rc = submit(c, opts, cb, user, false, &r);
    if (rc == 0 && run_id)
        *run_id = r->id;
    return rc;
}

int ctxd_step(ctxd_client *c, int timeout_ms)
{
    if (c->depth > 0)
        return fail(c, CTXD_EINVALID, NULL, "ctxd_step is not allowed from inside a callback");
    return step(c, timeout_ms);
}

int ctxd_fd(ctxd_client *c)
{
    int fd = -1;
    size_t len = sizeof fd;
    if (zmq_getsockopt(c->sock, ZMQ_FD, &fd, &len) < 0)
        return fail(c, CTXD_ETRANSPORT, NULL, "zmq_getsockopt(ZMQ_FD): %s",
                    zmq_strerror(zmq_errno()));
    return fd;
}

int ctxd_timeout_ms(ctxd_client *c)
{
    if (c->inbox)
        return 0;
    int ev = 0;
    size_t len = sizeof ev;
    if (zmq_getsockopt(c->sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN))
        return 0;
    len = sizeof ev; /* a dropped connection: ctxd_step ends the runs */
    if (c->mon && zmq_getsockopt(c->mon, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN))
        return 0;
    long due = liveness_due_ms(c);
    return due > 1000000000L ? 1000000000 : (int)due;
}

size_t ctxd_pending(const ctxd_client *c)
{
    return c->nactive;
}

int ctxd_run_interrupt(ctxd_client *c, uint64_t run_id)
{
    run *r = find_run(c, run_id);
    if (!r || r->ended)
        return fail(c, CTXD_EINVALID, NULL, "no run %llu in flight", (unsigned long long)run_id);
    if (!r->accepted) {
        r->interrupt_pending = true;
        return 0;
    }
    return send_run_interrupt(c, r);
}

int ctxd_run_detach(ctxd_client *c, uint64_t run_id)
{
    run *r = find_run(c, run_id);
    if (!r || r->ended)
        return fail(c, CTXD_EINVALID, NULL, "no run %llu in flight", (unsigned long long)run_id);
    r->ended = true;
    r->removed = true;
    if (c->nactive > 0)
        c->nactive--;
    sweep_runs(c);
    return 0;
}

/* Applies what on_wait asked for. Returns 0 to keep waiting or < 0. */
static int wait_hook(ctxd_client *c, run *r)
{
    if (!r->cb.on_wait)
        return 0;
    c->depth++;
    int what = r->cb.on_wait(r->user);
    c->depth--;
    switch (what) {
    case CTXD_WAIT_INTERRUPT:
        if (!r->accepted) {
            r->interrupt_pending = true;
            return 0;
        }
        send_run_interrupt(c, r); /* a failed send shows in the liveness check */
        return 0;
    case CTXD_WAIT_DETACH:
        return fail(c, CTXD_ECANCELLED, NULL, "stopped waiting; the run goes on in ctxd");
    default:
        return 0;
    }
}

/* execute: submit, then dispatch everything until this run ends, a
 * transport failure, or a detach. */
int ctxd_execute(ctxd_client *c, const ctxd_exec_opts *opts, const ctxd_callbacks *cb, void *user,
                 ctxd_outcome *out)
{
    if (request_begin(c) < 0)
        return c->last_rc;
    run *r = NULL;
    int rc = submit(c, opts, cb, user, true, &r);
    if (rc < 0)
        return rc;
    while (!r->ended) {
        long wait = ctxd_timeout_ms(c);
        if (r->cb.on_wait && (wait < 0 || wait > WAIT_SLICE_MS))
            wait = WAIT_SLICE_MS;
        rc = step(c, wait);
        if (rc < 0) {
            drop_blocking(c, r);
            return rc;
        }
        if (r->ended)
            break;
        rc = wait_hook(c, r);
        if (rc < 0) {
            drop_blocking(c, r);
            return rc;
        }
    }
    rc = r->rc;
    if (rc == 0) {
        if (out) {
            *out = r->out;
            out->cause = r->cause ? own(c, mem_strdup(r->cause)) : NULL;
        }
        c->last_rc = 0;
        c->last_code[0] = c->last_msg[0] = '\0';
    } else {
        fail(c, rc, r->err_code, "%s", r->err_msg ? r->err_msg : "");
    }
    drop_blocking(c, r);
    return rc;
}
