/* libctxd's private header: the client's state and what its parts share.
 * Not installed; the public contract is ctxd.h. The parts stand in floors,
 * and each calls only the floors below it:
 *
 *   3  ctxd_open.c  connect and close, the client's settings, the last error
 *   2  ctxd_run.c   runs: execute and submit, the run list, one handler per
 *                   event type, the event-loop form (ctxd_step, ctxd_fd,
 *                   ctxd_timeout_ms)
 *      ctxd_req.c   control requests and their replies: hello, stats,
 *                   contexts, files, packages, queries
 *      ctxd_snap.c  snapshot requests and their replies
 *   1  ctxd_conn.c  the transport: CurveZMQ keys, the socket and its
 *                   monitor, sending and receiving messages, the inbox,
 *                   errors and results owned for the caller, the control
 *                   round trip, liveness
 *
 * Structure: every run (blocking or submitted) is a `run` in the client's
 * list. Messages are received by one path (ctxd_conn_recv), routed by `re`
 * to their run (ctxd_run.c's handle_msg), and turned into callbacks there. A
 * blocking control request that receives messages for runs parks them in
 * the inbox; ctxd_step and ctxd_execute dispatch the inbox first, so
 * nothing is lost or reordered. The transport learns about runs only
 * through the hooks the run list registers (ctxd_conn_hooks).
 *
 * The functions declared here are internal to the library: hidden from
 * libctxd.so's dynamic symbols, so its ABI stays exactly ctxd.h's. */
#ifndef CTXD_INT_H
#define CTXD_INT_H

#include "ctxd.h"

#include "mem.h"
#include "proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <zmq.h>

#pragma GCC visibility push(hidden)

/* ---- the client and its runs ------------------------------------------- */

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

/* What the transport asks of the floor above it, which registers them when
 * the client is made. */
typedef struct ctxd_conn_hooks {
    /* The daemon is gone, silent or restarted (rc says which, the last
     * error why): every run in flight ends with rc. */
    void (*lost)(ctxd_client *c, int rc);
    /* True when a message answering `re` belongs to a run in flight, so a
     * control request parks it in the inbox rather than drop it. */
    bool (*claims)(ctxd_client *c, uint64_t re);
} ctxd_conn_hooks;

struct ctxd_client {
    const ctxd_conn_hooks *hooks; /* NULL: nothing above the transport yet */
    void *zctx;
    void *sock;
    void *mon;                 /* PAIR socket receiving sock's ZMQ_EVENT_DISCONNECTED and
                                  handshake failures */
    struct msg_in *hello_kept; /* the connect check's hello reply, for ctxd_hello */
    int sock_fd, mon_fd;       /* their ZMQ_FD: what a wait sleeps on */
    bool mon_check;            /* the monitor may hold events: the last wait saw it
                                  readable (or none looked yet); see ctxd_conn_wait */
    int handshake_failed;      /* the last ZMQ_EVENT_HANDSHAKE_FAILED_* seen; 0 none */
    uint32_t handshake_value;  /* its value (a ZAP status or protocol error) */
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

/* ---- time and field readers, for every part ---------------------------- */

/* Monotonic seconds, for deadlines that survive wall-clock changes. */
static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Milliseconds left until deadline, for a wait (at least 0). */
static inline long ms_until(double deadline)
{
    double left = deadline - now();
    if (left <= 0)
        return 0;
    if (left > 1e6)
        return 1000000000L;
    return (long)(left * 1000.0) + 1;
}

/* A uint field, or 0 when absent (types were checked by proto_check). */
static inline uint64_t get_uint(const proto_val *m, const char *key)
{
    const proto_val *v = proto_map_get(m, key);
    return v && v->kind == PROTO_UINT ? v->as.u : 0;
}

/* A numeric field as double (int, uint or float), 0 when absent. */
static inline double get_num(const proto_val *m, const char *key)
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
static inline bool get_bool(const proto_val *m, const char *key)
{
    const proto_val *v = proto_map_get(m, key);
    return v && v->kind == PROTO_BOOL && v->as.b;
}

/* ---- ctxd_conn.c: errors and caller-owned results ---------------------- */

/* Records a failure for ctxd_last_error and returns rc, so error paths read
 * `return ctxd_conn_fail(...)`. code NULL means the rc's own name. */
int ctxd_conn_fail(ctxd_client *c, int rc, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Takes ownership of p on behalf of the caller-visible results. */
void *ctxd_conn_own(ctxd_client *c, void *p);
/* A NUL-terminated copy of a str value owned by the client, or NULL. */
const char *ctxd_conn_own_str(ctxd_client *c, const proto_val *v);
/* Starts a blocking call: refuses it inside a callback, then frees the
 * previous call's results and error. */
int ctxd_conn_begin(ctxd_client *c);

/* ---- ctxd_conn.c: messages --------------------------------------------- */

/* Validates a daemon message body against a field table. */
int ctxd_conn_check(ctxd_client *c, const char *what, const proto_val *m, const proto_field *fields,
                    size_t n);
/* Starts a request map: v, t, a fresh uint id (returned), room for nfields. */
uint64_t ctxd_conn_envelope(ctxd_client *c, proto_buf *b, const char *type, uint32_t nfields);
/* Writes an env map from caller pairs; rejects NULL entries. */
int ctxd_conn_put_env(ctxd_client *c, proto_buf *b, const ctxd_kv *env, size_t n);
/* Sends one encoded request as a single-frame message. */
int ctxd_conn_send(ctxd_client *c, const proto_buf *b);
/* Frees a received message (NULL is fine). */
void ctxd_conn_msg_free(msg_in *m);
/* Receives one message without waiting: the message, or NULL with *rc 0
 * (none queued) or *rc < 0 (transport failure). */
msg_in *ctxd_conn_recv(ctxd_client *c, int *rc);
/* Waits up to ms (-1: forever) for the socket or its monitor: 1 readable,
 * 0 not, or CTXD_ETRANSPORT. */
int ctxd_conn_wait(ctxd_client *c, long ms);
/* Turns an `err` reply into CTXD_EREFUSED with the daemon's code/message. */
int ctxd_conn_take_err(ctxd_client *c, const msg_in *m);
/* The inbox: messages for runs parked by a blocking control request. */
void ctxd_conn_inbox_push(ctxd_client *c, msg_in *m);
msg_in *ctxd_conn_inbox_pop(ctxd_client *c);

/* ---- ctxd_conn.c: liveness, the monitor, the round trip ---------------- */

/* CTXD_EAUTH (recorded for ctxd_last_error) when a CurveZMQ handshake
 * failed since the last one that succeeded; else 0. */
int ctxd_conn_auth_failed(ctxd_client *c);
/* True when the connection dropped (every run then ended with CTXD_ELOST). */
bool ctxd_conn_dropped(ctxd_client *c);
/* Handles the reply to a liveness hello. */
void ctxd_conn_ping_reply(ctxd_client *c, const msg_in *m);
/* Pings a silent daemon while runs are in flight; ends them when a ping went
 * unanswered. */
void ctxd_conn_liveness_tick(ctxd_client *c);
/* Milliseconds until ctxd_conn_liveness_tick has something to do (-1: never). */
long ctxd_conn_liveness_due_ms(const ctxd_client *c);
/* Sends a control request and waits for its terminal reply: 0 with the `ok`
 * in *out (free with ctxd_conn_msg_free), or a negative code. live: no
 * deadline, but liveness checks (pip, fork, queries). */
int ctxd_conn_roundtrip(ctxd_client *c, const proto_buf *b, uint64_t id, bool live, msg_in **out);
/* A request whose fields are strings: pairs of name and value, ended by a
 * NULL name; a pair whose value is NULL is left out. Sent and waited for
 * as ctxd_conn_roundtrip. */
int ctxd_conn_str_request(ctxd_client *c, const char *type, bool live, msg_in **out, ...);

/* ---- ctxd_conn.c: the socket ------------------------------------------- */

/* Connects the client's socket to its endpoint (ipc probe, CurveZMQ keys,
 * the monitor): 0 or a negative code. */
int ctxd_conn_open(ctxd_client *c);
/* Releases what the transport holds: parked messages, caller-owned results,
 * the monitor, the socket and the ZeroMQ context. */
void ctxd_conn_shutdown(ctxd_client *c);

/* ---- ctxd_run.c: the run list ------------------------------------------ */

/* Registers the run list's hooks with the transport of a new client. */
void ctxd_run_attach(ctxd_client *c);
/* Frees every run, blocking or not, without calling back: the client is
 * closing. */
void ctxd_run_forget_all(ctxd_client *c);

#pragma GCC visibility pop

#endif
