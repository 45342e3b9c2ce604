/* libctxd, the client as its user holds it: connect (the endpoint
 * resolved, the transport opened, the daemon proved to answer), close, the
 * settings, and the last error. It stands above the transport, the runs and
 * the requests and wires them together; nothing calls up into it. See
 * ctxd_int.h for how the parts fit, ctxd.h for the contract. */
#include "ctxd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The last failure's CTXD_E* code (0 after a success), its code and
 * message in *code and *msg (empty after a success). The strings live in
 * the client and change with its next failure or blocking call. */
int ctxd_last_error(const ctxd_client *c, const char **code, const char **msg)
{
    if (code)
        *code = c->last_code;
    if (msg)
        *msg = c->last_msg;
    return c->last_rc;
}

/* A fixed sentence for a CTXD_E* code, for when no details are at hand;
 * "unknown error" for any other value. */
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

/* The default endpoint of PROTOCOL.md section 1 written into buf: under
 * $XDG_RUNTIME_DIR when set, else /run/ctxd. NULL when it does not fit in
 * n bytes. */
const char *ctxd_default_endpoint(char *buf, size_t n)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int len = (xdg && *xdg) ? snprintf(buf, n, "ipc://%s/ctxd/ctxd.sock", xdg)
                            : snprintf(buf, n, "ipc:///run/ctxd/ctxd.sock");
    return len < 0 || (size_t)len >= n ? NULL : buf;
}

/* A client connected to endpoint (else $CTXD_ENDPOINT, else the default)
 * whose daemon answered a hello within timeout seconds. NULL on failure,
 * with the CTXD_E* code in *rc and the reason in err; nothing is left
 * open then. */
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
    ctxd_run_attach(c);
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

/* ctxd_connect_ex with the default control timeout, the reason of a
 * failure in err. */
ctxd_client *ctxd_connect(const char *endpoint, char *err, size_t errlen)
{
    return ctxd_connect_ex(endpoint, CTXD_DEFAULT_TIMEOUT, NULL, err, errlen);
}

/* Releases everything the client holds: runs in flight (without calling
 * them back), parked messages, owned results, the socket and the ZeroMQ
 * context. NULL is fine. */
void ctxd_close(ctxd_client *c)
{
    if (!c)
        return;
    c->depth = 0;
    ctxd_run_forget_all(c);
    if (c->hello_kept)
        ctxd_conn_msg_free(c->hello_kept);
    ctxd_conn_shutdown(c);
    free(c->endpoint);
    free(c);
}

/* The endpoint the client connected to, as resolved; valid until
 * ctxd_close. */
const char *ctxd_endpoint(const ctxd_client *c)
{
    return c->endpoint;
}

/* Sets how long a control request waits for its reply and a send for
 * room; values <= 0 leave it unchanged. */
void ctxd_set_timeout(ctxd_client *c, double seconds)
{
    if (seconds > 0) {
        int ms = (int)(seconds * 1000.0);
        c->timeout = seconds;
        zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &ms, sizeof ms);
    }
}

/* Sets the silence after which a client with runs in flight asks the
 * daemon whether it is still there; <= 0 never asks. */
void ctxd_set_liveness(ctxd_client *c, double seconds)
{
    c->liveness = seconds > 0 ? seconds : 0;
}
