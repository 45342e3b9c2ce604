/* libctxd, the transport: CurveZMQ keys, the DEALER socket and the monitor
 * that reports a dropped connection, sending and receiving messages, the
 * inbox, the errors and caller-owned results of blocking calls, the control
 * round trip and the liveness check of a daemon that went silent. It is the
 * lowest floor: it calls nothing of the files above it, and tells them of a
 * lost connection or a message for a run through the hooks they register
 * (ctxd_conn_hooks). See ctxd_int.h for how the parts fit and
 * proto/PROTOCOL.md for the wire format; all msgpack goes through proto.h. */
#include "ctxd_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- errors and caller-owned results ----------------------------------- */

/* Records a failure for ctxd_last_error and returns rc, so error paths read
 * `return ctxd_conn_fail(...)`. code NULL means the rc's own name. */
int ctxd_conn_fail(ctxd_client *c, int rc, const char *code, const char *fmt, ...)
{
    static const char *const names[] = {"",          "unreachable", "refused",
                                        "protocol",  "transport",   "invalid",
                                        "cancelled", "lost",        "auth"};
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
void *ctxd_conn_own(ctxd_client *c, void *p)
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
const char *ctxd_conn_own_str(ctxd_client *c, const proto_val *v)
{
    if (!v || v->kind != PROTO_STR)
        return NULL;
    return ctxd_conn_own(c, proto_strdup(v));
}

/* Starts a blocking call: refuses it inside a callback, then frees the
 * previous call's results and error. */
int ctxd_conn_begin(ctxd_client *c)
{
    if (c->depth > 0)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL,
                              "blocking libctxd calls are not allowed from inside a callback");
    for (size_t i = 0; i < c->nowned; i++)
        free(c->owned[i]);
    c->nowned = 0;
    c->last_rc = 0;
    c->last_code[0] = c->last_msg[0] = '\0';
    return 0;
}

/* ---- messages ---------------------------------------------------------- */

/* Validates a daemon message body against a field table; a mismatch means
 * the daemon broke the protocol. */
int ctxd_conn_check(ctxd_client *c, const char *what, const proto_val *m, const proto_field *fields,
                    size_t n)
{
    proto_error pe;
    if (!m || m->kind != PROTO_MAP)
        return ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL, "daemon sent a malformed %s: not a map",
                              what);
    if (proto_check(m, fields, n, &pe) < 0)
        return ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL, "daemon sent a malformed %s: %s", what,
                              pe.msg);
    return 0;
}

/* Starts a request map: v, t, a fresh uint id, and room for nfields more. */
uint64_t ctxd_conn_envelope(ctxd_client *c, proto_buf *b, const char *type, uint32_t nfields)
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

/* Most control requests carry only string fields: one builder for them. */
int ctxd_conn_str_request(ctxd_client *c, const char *type, bool live, msg_in **out, ...)
{
    va_list ap;
    uint32_t n = 0;
    va_start(ap, out);
    for (const char *k = va_arg(ap, const char *); k; k = va_arg(ap, const char *))
        n += va_arg(ap, const char *) != NULL;
    va_end(ap);
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id = ctxd_conn_envelope(c, &b, type, n);
    va_start(ap, out);
    for (const char *k = va_arg(ap, const char *); k; k = va_arg(ap, const char *)) {
        const char *v = va_arg(ap, const char *);
        if (v) {
            proto_put_str(&b, k);
            proto_put_str(&b, v);
        }
    }
    va_end(ap);
    int r = ctxd_conn_roundtrip(c, &b, id, live, out);
    proto_buf_free(&b);
    return r;
}

/* Writes a NUL-terminated env map from caller pairs; rejects NULL entries. */
int ctxd_conn_put_env(ctxd_client *c, proto_buf *b, const ctxd_kv *env, size_t n)
{
    if (n > UINT32_MAX)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "too many environment entries");
    proto_put_map(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        if (!env[i].key || !env[i].value)
            return ctxd_conn_fail(c, CTXD_EINVALID, NULL,
                                  "environment entry %zu has a NULL key or value", i);
        proto_put_str(b, env[i].key);
        proto_put_str(b, env[i].value);
    }
    return 0;
}

/* Sends one encoded request as a single-frame message. Refuses locally what
 * the daemon announced it would refuse, so a huge request fails fast. */
int ctxd_conn_send(ctxd_client *c, const proto_buf *b)
{
    if (c->max_request_bytes && b->len > c->max_request_bytes)
        return ctxd_conn_fail(c, CTXD_EREFUSED, "too_large",
                              "request of %zu bytes exceeds the daemon's max_request_bytes (%llu)",
                              b->len, (unsigned long long)c->max_request_bytes);
    /* The last handshake failed and no good one followed (the monitor's
     * events are read first): say so at once rather than wait for a peer
     * that may never come. */
    if (c->handshake_failed && ctxd_conn_auth_failed(c))
        return CTXD_EAUTH;
    for (;;) {
        if (zmq_send(c->sock, b->data, b->len, 0) >= 0)
            return 0;
        int e = zmq_errno();
        if (e == EINTR)
            continue;
        /* A connection whose handshake failed leaves the DEALER no peer:
         * the send waited out SNDTIMEO, and the monitor says why. */
        if (e == EAGAIN && ctxd_conn_auth_failed(c))
            return CTXD_EAUTH;
        if (e == EAGAIN)
            return ctxd_conn_fail(c, CTXD_EUNREACHABLE, NULL, "cannot send to %s within %g s",
                                  c->endpoint, c->timeout);
        return ctxd_conn_fail(c, CTXD_ETRANSPORT, NULL, "cannot send to %s: %s", c->endpoint,
                              zmq_strerror(e));
    }
}

/* Frees a received message. */
void ctxd_conn_msg_free(msg_in *m)
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
        return ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL, "daemon sent an undecodable message: %s",
                              pe.msg);
    m->root = &m->doc.nodes[0];
    const proto_val *v = proto_map_get(m->root, "v");
    m->t = proto_map_get(m->root, "t");
    const char *bad = m->root->kind != PROTO_MAP         ? "not a map"
                      : !v || v->kind != PROTO_UINT      ? "no uint 'v'"
                      : v->as.u != PROTO_VERSION         ? "another protocol version"
                      : !m->t || m->t->kind != PROTO_STR ? "no str 't'"
                                                         : NULL;
    if (bad)
        return ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL, "daemon sent a malformed message: %s", bad);
    const proto_val *re = proto_map_get(m->root, "re");
    m->re = re && re->kind == PROTO_UINT ? re->as.u : 0;
    return 0;
}

/* Receives one message without waiting. Returns it (free with ctxd_conn_msg_free), or
 * NULL with *rc 0 when none is queued, or NULL with *rc < 0 on a transport
 * failure. A message that breaks the envelope rules is dropped (*rc 0, the
 * failure recorded for ctxd_last_error): it cannot be matched to a request. */
msg_in *ctxd_conn_recv(ctxd_client *c, int *rc)
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
            *rc = ctxd_conn_fail(c, CTXD_ETRANSPORT, NULL, "cannot receive from %s: %s",
                                 c->endpoint, zmq_strerror(e));
            return NULL;
        }
        if (zmq_msg_more(&m->zmsg)) {
            while (zmq_msg_more(&m->zmsg) && zmq_msg_recv(&m->zmsg, c->sock, ZMQ_DONTWAIT) >= 0)
                ;
            ctxd_conn_msg_free(m);
            ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL, "daemon sent a message of more than one frame");
            continue;
        }
        if (msg_decode(c, m) < 0) {
            ctxd_conn_msg_free(m);
            continue;
        }
        return m;
    }
}

/* Waits up to ms (-1: forever) for the socket to be readable. Returns 1
 * readable, 0 not (timeout, a signal, or the monitor has events: see
 * mon_check), or CTXD_ETRANSPORT. A look at the socket (ZMQ_EVENTS), then
 * poll(2) on the two ZMQ_FDs, and a look again when the socket's signalled:
 * zmq_poll would look at both sockets before and after every sleep, two
 * system calls each, on every wait of every run. */
int ctxd_conn_wait(ctxd_client *c, long ms)
{
    double deadline = ms > 0 ? now() + (double)ms / 1e3 : 0;
    for (bool first = true;; first = false) {
        /* A send (it processes the socket's commands) may have taken the
         * signal of a reply queued since; ZMQ_FD also signals commands
         * that bring no message: look before sleeping, and after. */
        int ev = 0;
        size_t len = sizeof ev;
        if (zmq_getsockopt(c->sock, ZMQ_EVENTS, &ev, &len) < 0)
            return ctxd_conn_fail(c, CTXD_ETRANSPORT, NULL, "zmq_getsockopt(ZMQ_EVENTS): %s",
                                  zmq_strerror(zmq_errno()));
        if (ev & ZMQ_POLLIN)
            return 1;
        long left = ms < 0 ? -1 : first || ms == 0 ? ms : ms_until(deadline);
        /* The monitor needs no look: only take_disconnect processes its
         * commands, and it reads it empty, so its ZMQ_FD signals every
         * event that comes after. */
        struct pollfd p[2] = {{.fd = c->sock_fd, .events = POLLIN},
                              {.fd = c->mon_fd, .events = POLLIN}};
        int n = poll(p, c->mon ? 2 : 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n < 0) {
            c->mon_check = true;
            if (errno == EINTR)
                return 0;
            return ctxd_conn_fail(c, CTXD_ETRANSPORT, NULL, "poll: %s", strerror(errno));
        }
        /* The monitor is read after a wait only when the wait saw it
         * readable (or timed out): reading it otherwise costs libzmq two
         * system calls to learn nothing, twice per step. */
        if (n == 0 || (c->mon && p[1].revents)) {
            if (c->mon)
                c->mon_check = true;
            return 0;
        }
    }
}

/* Turns an `err` reply into CTXD_EREFUSED with the daemon's code/message. */
int ctxd_conn_take_err(ctxd_client *c, const msg_in *m)
{
    static const proto_field fields[] = {{"code", PF_STR, true, 0}, {"message", PF_STR, true, 0}};
    if (ctxd_conn_check(c, "err reply", m->root, fields, 2) < 0)
        return c->last_rc;
    const proto_val *code = proto_map_get(m->root, "code");
    const proto_val *msg = proto_map_get(m->root, "message");
    ctxd_conn_fail(c, CTXD_EREFUSED, NULL, "%.*s", (int)msg->n, msg->as.s);
    snprintf(c->last_code, sizeof c->last_code, "%.*s", (int)code->n, code->as.s);
    return CTXD_EREFUSED;
}

/* Parks a message for a run in the inbox (used by blocking control calls). */
void ctxd_conn_inbox_push(ctxd_client *c, msg_in *m)
{
    m->next = NULL;
    if (c->inbox_tail)
        c->inbox_tail->next = m;
    else
        c->inbox = m;
    c->inbox_tail = m;
}

/* Takes the oldest parked message, or NULL. */
msg_in *ctxd_conn_inbox_pop(ctxd_client *c)
{
    msg_in *m = c->inbox;
    if (m) {
        c->inbox = m->next;
        if (!c->inbox)
            c->inbox_tail = NULL;
    }
    return m;
}

/* ---- liveness and the socket monitor ----------------------------------- */

/* Ends every run in flight with rc, through the floor above (while none is
 * registered there is no run to end). */
static void lost(ctxd_client *c, int rc)
{
    if (c->hooks)
        c->hooks->lost(c, rc);
}

/* True when the floor above claims a message answering re. */
static bool claimed(ctxd_client *c, uint64_t re)
{
    return c->hooks && c->hooks->claims(c, re);
}

/* True when the socket monitor reported a dropped connection since the
 * last call (its messages are consumed). */
static bool take_disconnect(ctxd_client *c)
{
    /* Nothing new since it was last read empty unless its descriptor
     * says so (one system call; a receive that finds nothing costs two). */
    struct pollfd p = {.fd = c->mon_fd, .events = POLLIN};
    if (!c->mon || (!c->mon_check && poll(&p, 1, 0) == 0))
        return false;
    c->mon_check = false;
    bool dropped = false;
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (!c->mon || zmq_msg_recv(&ev, c->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return dropped;
        }
        uint16_t num = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&ev) >= 2) /* 16-bit event number, native order */
            memcpy(&num, zmq_msg_data(&ev), 2);
        if (zmq_msg_size(&ev) >= 6) /* then its 32-bit value */
            memcpy(&value, (const char *)zmq_msg_data(&ev) + 2, 4);
        if (num == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || num == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
            num == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            c->handshake_failed = num;
            c->handshake_value = value;
        } else if (num == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            c->handshake_failed = 0;
        }
        /* A connection whose handshake failed carried nothing: not a drop. */
        dropped =
            dropped || (zmq_msg_more(&ev) && num == ZMQ_EVENT_DISCONNECTED && !c->handshake_failed);
        while (zmq_msg_more(&ev) && zmq_msg_recv(&ev, c->mon, ZMQ_DONTWAIT) >= 0)
            ;
        zmq_msg_close(&ev);
    }
}

/* CTXD_EAUTH with what the monitor saw, when a CurveZMQ handshake failed
 * since the last successful one; else 0. */
int ctxd_conn_auth_failed(ctxd_client *c)
{
    take_disconnect(c); /* collect the monitor's events */
    if (!c->handshake_failed)
        return 0;
    if (c->handshake_failed == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        return ctxd_conn_fail(c, CTXD_EAUTH, NULL,
                              "authentication failed at %s: the daemon refused this client's "
                              "key (ZAP status %u); add its public key (`ctx keygen` prints it) "
                              "to the daemon's authorized_keys",
                              c->endpoint, (unsigned)c->handshake_value);
    return ctxd_conn_fail(
        c, CTXD_EAUTH, NULL,
        "authentication failed at %s: the CurveZMQ handshake failed (%s, "
        "error 0x%x); is CTXD_SERVER_KEY the daemon's public key "
        "(STATE_DIR/server.pub)?",
        c->endpoint,
        c->handshake_failed == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol error" : "no detail",
        (unsigned)c->handshake_value);
}

/* A dropped connection loses what was in flight on it (ZeroMQ reconnects,
 * but the daemon answers the old connection): every run then ends with
 * CTXD_ELOST instead of waiting forever. True when that happened. */
bool ctxd_conn_dropped(ctxd_client *c)
{
    if (!take_disconnect(c))
        return false;
    ctxd_conn_fail(
        c, CTXD_ELOST, NULL,
        "the connection to ctxd at %s dropped while requests were in flight; their outcome "
        "is unknown",
        c->endpoint);
    c->ping_id = 0;
    lost(c, CTXD_ELOST);
    return true;
}

/* Handles the reply to a liveness hello: another instance (or pid) means a
 * restarted daemon that has never heard of our runs. */
void ctxd_conn_ping_reply(ctxd_client *c, const msg_in *m)
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
        ctxd_conn_fail(
            c, CTXD_ELOST, NULL,
            "ctxd at %s restarted (now pid %llu, instance %.*s; was %s) while runs were in "
            "flight; their outcome is unknown",
            c->endpoint, (unsigned long long)pid,
            inst && inst->kind == PROTO_STR ? (int)inst->n : 1,
            inst && inst->kind == PROTO_STR ? inst->as.s : "?", was);
        lost(c, CTXD_ELOST);
    }
}

/* Sends a liveness hello when the daemon has been silent for too long while
 * runs are in flight, and ends them when an earlier one went unanswered. */
void ctxd_conn_liveness_tick(ctxd_client *c)
{
    if (c->nactive == 0 || c->liveness <= 0) {
        c->ping_id = 0;
        return;
    }
    double t = now();
    if (c->ping_id && t >= c->ping_deadline) {
        c->ping_id = 0;
        ctxd_conn_fail(c, CTXD_EUNREACHABLE, NULL,
                       "ctxd at %s stopped answering (no reply to a liveness check within %g s)",
                       c->endpoint, c->timeout);
        lost(c, CTXD_EUNREACHABLE);
        c->last_heard = t;
        return;
    }
    if (!c->ping_id && t - c->last_heard >= c->liveness) {
        proto_buf b;
        proto_buf_init(&b);
        uint64_t id = ctxd_conn_envelope(c, &b, "hello", 0);
        if (ctxd_conn_send(c, &b) == 0) {
            c->ping_id = id;
            c->ping_deadline = t + c->timeout;
        } else {
            c->ping_id = 0;
            lost(c, c->last_rc);
            c->last_heard = t;
        }
        proto_buf_free(&b);
    }
}

/* Milliseconds until ctxd_conn_liveness_tick has something to do (-1: never). */
long ctxd_conn_liveness_due_ms(const ctxd_client *c)
{
    if (c->nactive == 0 || c->liveness <= 0)
        return -1;
    return c->ping_id ? ms_until(c->ping_deadline) : ms_until(c->last_heard + c->liveness);
}

/* ---- control requests: the round trip ---------------------------------- */

/* Sends a control request and waits (up to the control timeout) for its
 * terminal reply. Returns 0 with *out holding the `ok` (caller frees it with
 * ctxd_conn_msg_free), or a negative code. Messages for runs in flight are parked in
 * the inbox; others (late replies) are dropped. */
int ctxd_conn_roundtrip(ctxd_client *c, const proto_buf *b, uint64_t id, bool live, msg_in **out)
{
    /* A drop reported before this request concerns what was in flight then. */
    ctxd_conn_dropped(c);
    int r = ctxd_conn_send(c, b);
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
            ping = ctxd_conn_envelope(c, &pb, "hello", 0);
            r = ctxd_conn_send(c, &pb);
            proto_buf_free(&pb);
            if (r < 0)
                return r;
            deadline = now() + c->timeout;
        }
        msg_in *m = ctxd_conn_recv(c, &r);
        if (r < 0)
            return r;
        if (!m) {
            /* The monitor was read before the request; since then only
             * what a wait saw there is new (ctxd_conn_wait). */
            if (c->mon_check && ctxd_conn_dropped(c))
                return CTXD_ELOST;
            if (c->handshake_failed && ctxd_conn_auth_failed(c))
                return CTXD_EAUTH;
            if ((!live || ping) && now() >= deadline)
                return ctxd_conn_fail(
                    c, CTXD_EUNREACHABLE, NULL,
                    "no reply from ctxd at %s within %g s (is the daemon running?)", c->endpoint,
                    c->timeout);
            long wait = !live || ping     ? ms_until(deadline)
                        : c->liveness > 0 ? ms_until(heard + c->liveness)
                                          : -1;
            r = ctxd_conn_wait(c, wait);
            if (r < 0)
                return r;
            continue;
        }
        heard = now();
        if (ping && m->re == ping) {
            ping = 0;
            ctxd_conn_msg_free(m);
            continue;
        }
        if (!m->re && proto_str_eq(m->t, "err")) {
            /* An unreadable request: ours is the one waiting here. */
            r = ctxd_conn_take_err(c, m);
            ctxd_conn_msg_free(m);
            return r;
        }
        if (m->re != id) {
            if (m->re && ((c->ping_id && m->re == c->ping_id) || claimed(c, m->re)))
                ctxd_conn_inbox_push(c, m);
            else
                ctxd_conn_msg_free(m);
            continue;
        }
        c->last_heard = now();
        if (proto_str_eq(m->t, "ok")) {
            *out = m;
            return 0;
        }
        r = proto_str_eq(m->t, "err")
                ? ctxd_conn_take_err(c, m)
                : ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL,
                                 "daemon answered a control request with '%.*s'", (int)m->t->n,
                                 m->t->as.s);
        ctxd_conn_msg_free(m);
        return r;
    }
}

/* ---- the socket: CurveZMQ keys, connecting, releasing ------------------ */

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
        return ctxd_conn_fail(c, CTXD_EUNREACHABLE, NULL,
                              "ctxd is not running at %s (no socket file %s)", c->endpoint, path);
    case ECONNREFUSED:
        return ctxd_conn_fail(c, CTXD_EUNREACHABLE, NULL,
                              "ctxd is not running at %s (stale socket file %s)", c->endpoint,
                              path);
    case EACCES:
    case ENOTDIR:
    case ENOTSOCK:
        return ctxd_conn_fail(c, CTXD_EUNREACHABLE, NULL, "cannot connect to %s: %s", c->endpoint,
                              strerror(e));
    default:
        return 0;
    }
}

/* The first line of the file at path that, past leading blanks, is no '#'
 * comment and is 40 characters: 0 with key set, -1 when none. */
static int read_key_file(const char *path, char key[41])
{
    FILE *f = fopen(path, "re");
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

/* One key from the environment pair NAME (the Z85 key itself, which must
 * name no file: a path there is refused, never guessed at) and NAME_FILE
 * (a file holding it), PROTOCOL.md section 1: 1 with key set, 0
 * when neither is set (and dflt is NULL), -1 (failed on c, the variable
 * named) when both are set or the one set holds no key. dflt is the file
 * used when neither is set. */
static int env_key(ctxd_client *c, const char *name, const char *dflt, char key[41])
{
    char file_name[64];
    snprintf(file_name, sizeof file_name, "%s_FILE", name);
    const char *inl = getenv(name), *file = getenv(file_name);
    inl = inl && *inl ? inl : NULL;
    file = file && *file ? file : NULL;
    uint8_t raw[32];
    if (inl && file)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "%s and %s are both set: give one", name,
                              file_name);
    if (inl) {
        if (strlen(inl) != 40 || !zmq_z85_decode(raw, inl) || access(inl, F_OK) == 0)
            return ctxd_conn_fail(c, CTXD_EINVALID, NULL,
                                  "%s: '%s' is not a Z85 key (40 characters); for a key file "
                                  "set %s",
                                  name, inl, file_name);
        memcpy(key, inl, 41);
        return 1;
    }
    if (!file && !dflt)
        return 0;
    const char *path = file ? file : dflt;
    if (read_key_file(path, key) < 0 || !zmq_z85_decode(raw, key))
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "%s: '%s' holds no Z85 key%s",
                              file ? file_name : "client key file", path,
                              file ? "" : " (make one with `ctx keygen`)");
    return 1;
}

/* tcp:// with CurveZMQ: the server's public key from $CTXD_SERVER_KEY (the
 * key) or $CTXD_SERVER_KEY_FILE (its server.pub), the client's secret key
 * from $CTXD_CLIENT_KEY or $CTXD_CLIENT_KEY_FILE (default
 * ~/.config/ctxd/client.key); the public key follows from the secret. No
 * server key: plain tcp (a daemon started with --insecure-tcp). */
static int apply_curve(ctxd_client *c)
{
    if (strncmp(c->endpoint, "tcp://", 6) != 0)
        return 0;
    char server_key[41], secret[41], public[41], path[4096];
    int rc = env_key(c, "CTXD_SERVER_KEY", NULL, server_key);
    if (rc <= 0)
        return rc;
    const char *home = getenv("HOME");
    snprintf(path, sizeof path, "%s/.config/ctxd/client.key", home ? home : "");
    if (env_key(c, "CTXD_CLIENT_KEY", path, secret) < 0)
        return -1;
    if (zmq_curve_public(public, secret) != 0)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "the client key is no CurveZMQ secret key");
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
        return ctxd_conn_fail(c, CTXD_ETRANSPORT, NULL, "zmq_ctx_new: %s",
                              zmq_strerror(zmq_errno()));
    c->sock = zmq_socket(c->zctx, ZMQ_DEALER);
    if (!c->sock)
        return ctxd_conn_fail(c, CTXD_ETRANSPORT, NULL, "zmq_socket: %s",
                              zmq_strerror(zmq_errno()));
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
    if (zmq_socket_monitor(c->sock, mon,
                           ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED) <
            0 ||
        !(c->mon = zmq_socket(c->zctx, ZMQ_PAIR)))
        return ctxd_conn_fail(c, CTXD_ETRANSPORT, NULL, "zmq_socket_monitor: %s",
                              zmq_strerror(zmq_errno()));
    zmq_setsockopt(c->mon, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(c->mon, mon) < 0)
        return ctxd_conn_fail(c, CTXD_ETRANSPORT, NULL, "zmq_connect(monitor): %s",
                              zmq_strerror(zmq_errno()));
    size_t len = sizeof c->sock_fd;
    if (zmq_getsockopt(c->sock, ZMQ_FD, &c->sock_fd, &len) < 0 ||
        (len = sizeof c->mon_fd, zmq_getsockopt(c->mon, ZMQ_FD, &c->mon_fd, &len) < 0))
        return ctxd_conn_fail(c, CTXD_ETRANSPORT, NULL, "zmq_getsockopt(ZMQ_FD): %s",
                              zmq_strerror(zmq_errno()));
    c->mon_check = true;
    if (zmq_connect(c->sock, c->endpoint) < 0)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "cannot connect to '%s': %s", c->endpoint,
                              zmq_strerror(zmq_errno()));
    return 0;
}

/* Connects the client's socket to its endpoint: a dead ipc socket fails at
 * once, tcp gets the CurveZMQ keys the environment names, and the monitor
 * is started. 0, or a negative code recorded for ctxd_last_error. */
int ctxd_conn_open(ctxd_client *c)
{
    int r = ipc_probe(c);
    return r < 0 ? r : open_socket(c);
}

/* Releases what the transport holds: parked messages, caller-owned results,
 * the monitor, the socket and the ZeroMQ context. The client itself stays
 * for its owner to free. */
void ctxd_conn_shutdown(ctxd_client *c)
{
    msg_in *m;
    while ((m = ctxd_conn_inbox_pop(c)))
        ctxd_conn_msg_free(m);
    for (size_t i = 0; i < c->nowned; i++)
        free(c->owned[i]);
    free(c->owned);
    c->owned = NULL;
    c->nowned = c->capowned = 0;
    if (c->mon)
        zmq_close(c->mon);
    if (c->sock) {
        zmq_socket_monitor(c->sock, NULL, 0);
        zmq_close(c->sock);
    }
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    c->mon = c->sock = c->zctx = NULL;
}
