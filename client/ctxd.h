/* libctxd: a blocking C client for the ctxd daemon (proto/PROTOCOL.md).
 *
 * A ctxd_client owns one ZeroMQ DEALER socket (and its own ZeroMQ context)
 * connected to the daemon. Every request function sends one request and waits
 * for its terminal reply; replies are matched to requests by `re` (requests
 * carry `id` as an increasing uint), so a late reply to an earlier request
 * that timed out is recognised and dropped.
 *
 * THREADS. A ctxd_client is not thread-safe: use it from one thread at a time
 * (one client per thread is the simple rule). Distinct clients share nothing
 * and may be used from different threads concurrently. Callbacks run on the
 * thread that called ctxd_execute, from inside that call; they must not call
 * any ctxd_* function on the same client.
 *
 * OWNERSHIP. Every pointer the library hands out (strings and arrays in
 * ctxd_outcome, ctxd_hello_info, ctxd_ctx_info, and from ctxd_last_error) is
 * owned by the client: never free it; it stays valid until the next request
 * function (ctxd_execute, ctxd_hello, ctxd_ctx_*, ctxd_interrupt) is called on
 * the same client, or until ctxd_close. Copy what must live longer.
 * Pointers passed to callbacks are valid only for the duration of that
 * callback. Pointers the caller passes in (options, names, code, env) are only
 * read during the call and are not retained.
 *
 * RETURN CODES. Request functions return 0 on success, or one of the negative
 * CTXD_E* codes below. After any failure, ctxd_last_error() gives a code
 * string and a human message: for CTXD_EREFUSED these are the daemon's `err`
 * code (PROTOCOL.md section 8, e.g. "unknown_context") and message; for local
 * failures the code is the lower-case name of the CTXD_E* constant
 * ("unreachable", "protocol", ...). */
#ifndef CTXD_CLIENT_H
#define CTXD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Negative results of request functions. */
enum {
    /* No reply within the timeout, or no daemon listens on the endpoint. */
    CTXD_EUNREACHABLE = -1,
    /* The daemon answered `err`; ctxd_last_error() has its code and message.
     * Also used with code "too_large" when the client refuses locally to send
     * a request larger than the daemon's advertised max_request_bytes. */
    CTXD_EREFUSED = -2,
    /* The daemon sent a message that breaks PROTOCOL.md. */
    CTXD_EPROTOCOL = -3,
    /* A ZeroMQ call failed for a reason other than a timeout. */
    CTXD_ETRANSPORT = -4,
    /* Bad arguments (e.g. NULL code, a malformed endpoint). Nothing was sent. */
    CTXD_EINVALID = -5,
    /* ctxd_execute only: on_wait returned CTXD_WAIT_DETACH. The run goes on
     * in the daemon; its remaining events are dropped. */
    CTXD_ECANCELLED = -6,
    /* ctxd_execute only: the daemon restarted while the run was in flight
     * (a liveness ping was answered by a different daemon pid); the run's
     * outcome is unknown. */
    CTXD_ELOST = -7
};

/* Default reply timeout for control requests (and the connect check). */
#define CTXD_DEFAULT_TIMEOUT 5.0
/* Default silence, in seconds, after which ctxd_execute pings the daemon. */
#define CTXD_DEFAULT_LIVENESS 10.0

typedef struct ctxd_client ctxd_client;

/* A key/value pair of NUL-terminated UTF-8 strings (environment entries). */
typedef struct ctxd_kv {
    const char *key;
    const char *value;
} ctxd_kv;

/* ---- connection ------------------------------------------------------- */

/* Writes the default endpoint (PROTOCOL.md section 1, ignoring
 * CTXD_ENDPOINT): "ipc://$XDG_RUNTIME_DIR/ctxd/ctxd.sock", or
 * "ipc:///run/ctxd/ctxd.sock" when XDG_RUNTIME_DIR is unset or empty. Returns
 * buf, or NULL when n is too small. */
const char *ctxd_default_endpoint(char *buf, size_t n);

/* Connects to endpoint (NULL or "": $CTXD_ENDPOINT when set and non-empty,
 * else the default endpoint) and checks the daemon answers `hello` within
 * CTXD_DEFAULT_TIMEOUT seconds. Returns a client to release with ctxd_close,
 * or NULL with a message in err (if err is not NULL; truncated to errlen). */
ctxd_client *ctxd_connect(const char *endpoint, char *err, size_t errlen);

/* As ctxd_connect, with the connect-check timeout in seconds (also used as
 * the client's control timeout) and the failure code stored in *rc (if rc is
 * not NULL): CTXD_EUNREACHABLE, CTXD_EREFUSED (e.g. `err version`),
 * CTXD_EPROTOCOL, CTXD_ETRANSPORT or CTXD_EINVALID (malformed endpoint).
 * For an ipc:// endpoint a missing or stale socket file is reported at once
 * instead of after the timeout. */
ctxd_client *ctxd_connect_ex(const char *endpoint, double timeout, int *rc, char *err,
                             size_t errlen);

/* Closes the socket and frees the client and everything it owns. NULL is
 * accepted. Requests in flight are abandoned (ZMQ_LINGER is 0). */
void ctxd_close(ctxd_client *c);

/* The endpoint the client connected to (owned by the client, valid until
 * ctxd_close). */
const char *ctxd_endpoint(const ctxd_client *c);

/* Sets the reply timeout of control requests (seconds, > 0). */
void ctxd_set_timeout(ctxd_client *c, double seconds);

/* Sets after how many seconds without any message ctxd_execute checks the
 * daemon is still there (a `hello` that must be answered within the control
 * timeout by the same daemon pid). 0 disables the check. */
void ctxd_set_liveness(ctxd_client *c, double seconds);

/* Result of the last failed request: returns its CTXD_E* code (0 if the last
 * request succeeded) and sets *code and *msg (either may be NULL) to
 * NUL-terminated strings owned by the client (empty strings after success). */
int ctxd_last_error(const ctxd_client *c, const char **code, const char **msg);

/* A static description of a CTXD_E* code (or "success" for 0). */
const char *ctxd_strerror(int rc);

/* ---- execute ---------------------------------------------------------- */

typedef enum ctxd_status {
    CTXD_OK,          /* ran to the end */
    CTXD_ERROR,       /* raised; on_error was called first */
    CTXD_INTERRUPTED, /* stopped by an interrupt (KeyboardInterrupt), globals kept */
    CTXD_TIMEOUT,     /* ran past its timeout; see state_lost */
    CTXD_DIED,        /* the worker process ended during the run; globals gone */
    CTXD_ABORTED      /* never ran, or stopped, because of the context (see cause) */
} ctxd_status;

typedef struct ctxd_exec_opts {
    const char *ctx;    /* context name; NULL: "default" */
    const char *code;   /* Python source (UTF-8), required */
    size_t code_len;    /* bytes of code; 0: strlen(code) */
    double timeout;     /* seconds; < 0: the daemon's default; 0: no timeout */
    const ctxd_kv *env; /* variables set for this run only; may be NULL */
    size_t nenv;
    bool silent;        /* no result, no execution count increment */
    bool stop_on_error; /* an error aborts the runs queued behind this one */
} ctxd_exec_opts;

/* What ctxd_callbacks.on_wait asks for. */
enum {
    CTXD_WAIT_CONTINUE = 0,
    /* Send `interrupt` for the run's context: at once if the run has started,
     * else when its `accepted` arrives (so a run queued behind another
     * client's run never interrupts that run; several such requests before
     * `accepted` collapse into one). The interrupt's reply is consumed
     * internally. */
    CTXD_WAIT_INTERRUPT = 1,
    /* Stop waiting: ctxd_execute returns CTXD_ECANCELLED. */
    CTXD_WAIT_DETACH = 2
};

/* Event callbacks; any may be NULL. user is ctxd_execute's user argument.
 * Strings are NUL-terminated UTF-8 valid during the callback only. */
typedef struct ctxd_callbacks {
    /* The run started on the worker. previous_death is NULL, or the cause of
     * the previous worker's death when this run starts a new incarnation that
     * replaced a dead worker. */
    void (*on_accepted)(void *user, uint64_t execution_count, uint64_t incarnation,
                        const char *previous_death);
    /* Output bytes; name is "stdout" or "stderr". data is not NUL-terminated. */
    void (*on_stream)(void *user, const char *name, const void *data, size_t len);
    /* The trailing expression's value as a MIME bundle of n entries
     * (keys[i] -> values[i]); "text/plain" is always present. */
    void (*on_result)(void *user, const char *const *keys, const char *const *values, size_t n,
                      uint64_t execution_count);
    /* The run raised. traceback holds n formatted lines. */
    void (*on_error)(void *user, const char *ename, const char *evalue,
                     const char *const *traceback, size_t n);
    /* Called after every message of the run and whenever the wait wakes
     * without one: at least every 100 ms, and right after a signal interrupted
     * the wait (install the SIGINT handler without SA_RESTART to react at
     * once). Returns a CTXD_WAIT_* value. */
    int (*on_wait)(void *user);
} ctxd_callbacks;

typedef struct ctxd_outcome {
    ctxd_status status;
    uint64_t execution_count;
    uint64_t incarnation;
    double duration; /* seconds on the worker */
    double cpu_time; /* CPU seconds of the worker and its waited-for children */
    bool state_lost; /* the worker was killed or died: the context's globals are gone */
    bool truncated;
    const char *cause; /* NULL, or why (died, aborted, timeout with state_lost);
                          owned by the client */
} ctxd_outcome;

/* Runs code and blocks until its `done`, calling cb's callbacks for events
 * as they arrive (cb may be NULL). Returns 0 when `done` arrived (out, if not
 * NULL, holds the outcome, whatever the status), or a negative CTXD_E* code:
 * CTXD_EREFUSED for an `err` reply (e.g. busy, unknown_context), and
 * CTXD_EUNREACHABLE / CTXD_ELOST when a liveness check fails. */
int ctxd_execute(ctxd_client *c, const ctxd_exec_opts *opts, const ctxd_callbacks *cb, void *user,
                 ctxd_outcome *out);

/* ---- control requests -------------------------------------------------- */

typedef struct ctxd_hello_info {
    const char *server;  /* "ctxd" */
    const char *version; /* daemon version, e.g. "0.1.0" */
    uint64_t protocol;
    const uint64_t *versions; /* protocol versions the daemon speaks */
    size_t nversions;
    uint64_t pid; /* the supervisor's pid */
    uint64_t max_request_bytes, max_code_bytes, max_queue, max_contexts;
    double default_timeout, kill_grace;
} ctxd_hello_info;

typedef struct ctxd_ctx_info {
    const char *name;
    const char *cwd;
    const char *state; /* "idle", "busy" or "dead" */
    uint64_t pid;      /* 0 when dead */
    uint64_t incarnation;
    double created; /* Unix time */
    uint64_t execution_count;
    uint64_t queued;        /* runs waiting, not counting the running one */
    const char *last_death; /* NULL until a worker of this context died */
} ctxd_ctx_info;

/* `hello`: fills *out (may be NULL). */
int ctxd_hello(ctxd_client *c, ctxd_hello_info *out);

/* `ctx.create`: name NULL for a generated name, cwd NULL for the daemon's
 * cwd, env (nenv entries) added to the worker's environment. Fills *out (may
 * be NULL) with the new context. */
int ctxd_ctx_create(ctxd_client *c, const char *name, const char *cwd, const ctxd_kv *env,
                    size_t nenv, ctxd_ctx_info *out);

/* `ctx.list`: *out is set to an array of *n contexts sorted by name (owned
 * by the client). */
int ctxd_ctx_list(ctxd_client *c, const ctxd_ctx_info **out, size_t *n);

/* `ctx.delete` of name (required). */
int ctxd_ctx_delete(ctxd_client *c, const char *name);

/* `ctx.restart` of name (NULL: "default"); fills *out (may be NULL). */
int ctxd_ctx_restart(ctxd_client *c, const char *name, ctxd_ctx_info *out);

/* `interrupt` of the run executing on ctx (NULL: "default"). *interrupted
 * (may be NULL) tells whether something was running. */
int ctxd_interrupt(ctxd_client *c, const char *ctx, bool *interrupted);

#ifdef __cplusplus
}
#endif

#endif
