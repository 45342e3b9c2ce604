/* libctxd, opening and closing a client: the endpoint resolved, the
 * connection made and proved with a hello, the client released, its
 * settings, and the last error. See ctxd_int.h for how the parts fit. */
#include "ctxd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        "authentication failed",
    };
    if (rc > 0 || -rc >= (int)(sizeof text / sizeof text[0]))
        return "unknown error";
    return text[-rc];
}

/* PROTOCOL.md section 1's default, for clients without --endpoint. */
const char *ctxd_default_endpoint(char *buf, size_t n)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int len = (xdg && *xdg) ? snprintf(buf, n, "ipc://%s/ctxd/ctxd.sock", xdg)
                            : snprintf(buf, n, "ipc:///run/ctxd/ctxd.sock");
    return len < 0 || (size_t)len >= n ? NULL : buf;
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
    int r = !endpoint ? ctxd_conn_fail(c, CTXD_EINVALID, NULL, "XDG_RUNTIME_DIR is too long")
                      : ctxd_conn_open(c);
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
    ctxd_conn_begin(c);
    msg_in *m;
    while ((m = ctxd_conn_inbox_pop(c)))
        ctxd_conn_msg_free(m);
    if (c->hello_kept)
        ctxd_conn_msg_free(c->hello_kept);
    for (run *r = c->runs; r; r = r->next) {
        r->removed = true;
        r->blocking = false;
    }
    ctxd_run_sweep(c);
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
