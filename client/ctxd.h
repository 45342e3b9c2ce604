/* libctxd: the C client of the ctxd daemon (proto/PROTOCOL.md).
 *
 * A ctxd_client owns one ZeroMQ DEALER socket (and its own ZeroMQ context)
 * connected to the daemon. Requests carry `id` as an increasing uint, and
 * every message from the daemon is matched to its request by `re`; messages
 * for requests the client no longer tracks are dropped.
 *
 * TWO WAYS TO USE IT
 *
 *  1. Blocking. ctxd_execute runs code and returns when its `done` arrived,
 *     calling the callbacks of ctxd_callbacks for the run's events as they
 *     arrive. The other requests (ctxd_hello, ctxd_stats, ctxd_ctx_create,
 *     ctxd_ctx_list, ctxd_ctx_fork, ctxd_ctx_delete, ctxd_ctx_restart,
 *     ctxd_interrupt, ctxd_interrupt_run, ctxd_file_put, ctxd_file_get,
 *     ctxd_pip_install, ctxd_ctx_create_ex) block until their reply.
 *
 *  2. Event loop. ctxd_submit sends an execute without waiting and returns
 *     its run id; any number of runs (on any contexts) may be in flight.
 *     ctxd_step receives whatever the daemon sent and dispatches each event
 *     to the callbacks of the run it belongs to, never blocking when called
 *     with timeout 0; on_done reports each run's end. To fit into a poll /
 *     epoll / libuv / ... loop, wait for ctxd_fd() to be readable with the
 *     timeout ctxd_timeout_ms() returns, then call ctxd_step(c, 0):
 *
 *         while (ctxd_pending(c) > 0) {
 *             struct pollfd p = {.fd = fd, .events = POLLIN};
 *             poll(&p, 1, ctxd_timeout_ms(c));
 *             if (ctxd_step(c, 0) < 0) ...;
 *         }
 *
 *     THE EDGE-TRIGGER CAVEAT. ctxd_fd() is ZeroMQ's ZMQ_FD: it is not the
 *     socket that carries the data but a notification fd. It becomes readable
 *     when the socket's state *may have changed*, it behaves like an
 *     edge-triggered fd, and any operation on the socket (a send as much as a
 *     receive, done by any ctxd_* call) may consume the notification while
 *     messages remain queued. libctxd handles this for you as long as you
 *     follow two rules: (a) ctxd_step drains the socket until it would block
 *     (EAGAIN), so one call consumes everything that is queued; (b)
 *     ctxd_timeout_ms checks ZMQ_EVENTS and the library's own queue and
 *     returns 0 when a message is already waiting, so always compute the poll
 *     timeout with ctxd_timeout_ms() right before you wait, after any other
 *     ctxd_* call. Never read or write the fd yourself. With epoll, register
 *     it with EPOLLIN (EPOLLET is fine under these rules).
 *
 *     Blocking and event-loop calls can be mixed on one client: a blocking
 *     control request keeps the events of submitted runs in an internal
 *     queue (they are dispatched by the next ctxd_step or ctxd_execute, not
 *     lost), and ctxd_execute dispatches the events of every submitted run
 *     while it waits for its own.
 *
 * THREADS. A ctxd_client is not thread-safe: use it from one thread at a
 * time (one client per thread is the simple rule). Distinct clients share
 * nothing and may be used from different threads concurrently. Callbacks run
 * on the thread that called ctxd_execute or ctxd_step, from inside that call.
 * From a callback, only the non-blocking calls ctxd_submit,
 * ctxd_run_interrupt, ctxd_run_detach, ctxd_pending, ctxd_fd,
 * ctxd_timeout_ms, ctxd_last_error and ctxd_endpoint may be used on the same
 * client; the blocking calls and ctxd_step return CTXD_EINVALID there, and
 * ctxd_close must not be called.
 *
 * OWNERSHIP. Every pointer the library hands out from a blocking call
 * (strings and arrays in ctxd_outcome, ctxd_hello_info, ctxd_ctx_info, and
 * from ctxd_last_error) is owned by the client: never free it. It stays
 * valid until the next blocking call (ctxd_execute, ctxd_hello, ctxd_stats,
 * ctxd_ctx_*, ctxd_interrupt, ctxd_interrupt_run, ctxd_file_*,
 * ctxd_pip_install) on the same client, or until
 * ctxd_close; ctxd_submit, ctxd_step and the other non-blocking calls do not
 * release them (ctxd_last_error's strings excepted: they change with the
 * next failure). Copy what must live longer. Pointers passed to callbacks
 * (including the ctxd_run_end and its outcome) are valid only for the
 * duration of that callback. Pointers the caller passes in (options, names,
 * code, env, callback tables) are only read during the call and are not
 * retained: ctxd_submit copies what it needs, except `user`, which is handed
 * back to the callbacks as is.
 *
 * RETURN CODES. Functions return 0 (or a count) on success, or one of the
 * negative CTXD_E* codes below. After a failure, ctxd_last_error() gives a
 * code string and a human message: for CTXD_EREFUSED these are the daemon's
 * `err` code (PROTOCOL.md section 8, e.g. "unknown_context") and message;
 * for local failures the code is the lower-case name of the CTXD_E* constant
 * ("unreachable", "protocol", ...). A run that ends without `done` reports
 * the same code and message in its ctxd_run_end. */
#ifndef CTXD_CLIENT_H
#define CTXD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Negative results of library functions. */
enum {
    /* No reply within the timeout, or no daemon listens on the endpoint
     * (also: a liveness check during a run went unanswered). */
    CTXD_EUNREACHABLE = -1,
    /* The daemon answered `err`; ctxd_last_error() has its code and message.
     * Also used with code "too_large" when the client refuses locally to send
     * a request larger than the daemon's advertised max_request_bytes. */
    CTXD_EREFUSED = -2,
    /* The daemon sent a message that breaks PROTOCOL.md. */
    CTXD_EPROTOCOL = -3,
    /* A ZeroMQ call failed for a reason other than a timeout. */
    CTXD_ETRANSPORT = -4,
    /* Bad arguments (e.g. NULL code, a malformed endpoint, an unknown run
     * id, a blocking call from inside a callback). Nothing was sent. */
    CTXD_EINVALID = -5,
    /* ctxd_execute only: on_wait returned CTXD_WAIT_DETACH. The run goes on
     * in the daemon; its remaining events are dropped. */
    CTXD_ECANCELLED = -6,
    /* A run was in flight when the daemon restarted (a liveness check was
     * answered by a daemon with another `instance`), or when the connection
     * dropped (seen by a socket monitor in ctxd_step and the blocking
     * calls; ZeroMQ reconnects for later requests); its outcome is
     * unknown. */
    CTXD_ELOST = -7,
    /* tcp:// with CurveZMQ: the handshake failed (a socket monitor saw
     * ZMQ_EVENT_HANDSHAKE_FAILED_*): the daemon refused the client's key,
     * or CTXD_SERVER_KEY is not the daemon's key. Code "auth". */
    CTXD_EAUTH = -8
};

/* Default reply timeout for control requests (and the connect check). */
#define CTXD_DEFAULT_TIMEOUT 5.0
/* Default silence, in seconds, after which a client with runs in flight
 * pings the daemon. */
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
 * accepted. Requests in flight are abandoned (ZMQ_LINGER is 0): runs still
 * pending get no on_done. */
void ctxd_close(ctxd_client *c);

/* The endpoint the client connected to (owned by the client, valid until
 * ctxd_close). */
const char *ctxd_endpoint(const ctxd_client *c);

/* Sets the reply timeout of control requests (seconds, > 0). */
void ctxd_set_timeout(ctxd_client *c, double seconds);

/* Sets after how many seconds without any message a client with runs in
 * flight checks the daemon is still there: a `hello` that must be answered
 * within the control timeout by the same daemon (same `instance`). A failed
 * check ends every run in flight with CTXD_EUNREACHABLE (no answer) or
 * CTXD_ELOST (another daemon answered). 0 disables the check. In the event
 * loop form the check only happens inside ctxd_step: ctxd_timeout_ms tells
 * when it is due. */
void ctxd_set_liveness(ctxd_client *c, double seconds);

/* Result of the last failure: returns its CTXD_E* code (0 if the last
 * blocking call succeeded) and sets *code and *msg (either may be NULL) to
 * NUL-terminated strings owned by the client (empty strings after
 * success). */
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
    CTXD_ABORTED,     /* never ran, or stopped, because of the context (see cause) */
    CTXD_SHUTDOWN     /* the daemon stopped while the run was in flight; globals gone */
} ctxd_status;

/* The protocol's name of a status ("ok", "error", ...; "?" when unknown). */
const char *ctxd_status_name(ctxd_status s);

typedef struct ctxd_exec_opts {
    const char *ctx;    /* context name; NULL: "default" */
    const char *code;   /* Python source (UTF-8), required */
    size_t code_len;    /* bytes of code; 0: strlen(code) */
    double timeout;     /* seconds; < 0: the daemon's default; 0: no timeout.
                           NOTE: a zero-initialised struct means "no timeout";
                           set -1 for the daemon's default (600 s). */
    const ctxd_kv *env; /* variables set for this run only; may be NULL */
    size_t nenv;
    bool silent;        /* no result, no execution count increment */
    bool stop_on_error; /* an error aborts the runs queued behind this one */
    /* A script run, as `python3 FILE ARGV[1]...` (execute `file`, `argv`):
     * file is compiled under that path and is __file__, sys.path[0] its
     * directory; argv is sys.argv (argv[0] the script as named). Either may
     * be NULL / 0. */
    const char *file;
    const char *const *argv;
    size_t argc;
} ctxd_exec_opts;

/* What ctxd_callbacks.on_wait asks for. */
enum {
    CTXD_WAIT_CONTINUE = 0,
    /* Interrupt the run (as ctxd_run_interrupt): `interrupt` with the run's
     * id in `run`, at once if the run has started, else when its `accepted`
     * arrives, so a run queued behind another client's run never interrupts
     * that run, and an interrupt racing with the run's end never hits the
     * next run. The interrupt's reply is consumed internally. */
    CTXD_WAIT_INTERRUPT = 1,
    /* Stop waiting: ctxd_execute returns CTXD_ECANCELLED. */
    CTXD_WAIT_DETACH = 2
};

/* How a run ended, for on_done. */
typedef struct ctxd_run_end {
    uint64_t run; /* the run's id (ctxd_submit's *run_id) */
    /* 0 when `done` arrived (outcome is set, whatever the status), else why
     * the run ended without it: CTXD_EREFUSED (`err` reply, e.g. busy or
     * unknown_context), CTXD_EUNREACHABLE or CTXD_ELOST (failed liveness
     * check, dropped connection), CTXD_EPROTOCOL (a malformed event, or an
     * `err` with `re: nil`: the daemon could not read a request). */
    int rc;
    const struct ctxd_outcome *outcome; /* NULL when rc < 0 */
    const char *code;                   /* rc < 0: as ctxd_last_error's code, else "" */
    const char *message;                /* rc < 0: a human message, else "" */
} ctxd_run_end;

/* Event callbacks; any may be NULL. user is the user argument given to
 * ctxd_execute or ctxd_submit. Strings are NUL-terminated UTF-8 valid during
 * the callback only. */
typedef struct ctxd_callbacks {
    /* The run started on the worker. previous_death is NULL, or the cause of
     * the previous worker's death when this run starts a new incarnation that
     * replaced a dead worker. */
    void (*on_accepted)(void *user, uint64_t execution_count, uint64_t incarnation,
                        const char *previous_death);
    /* Output bytes; name is "stdout" or "stderr". data is not NUL-terminated
     * and not necessarily valid UTF-8 (a chunk may end inside a character). */
    void (*on_stream)(void *user, const char *name, const void *data, size_t len);
    /* The trailing expression's value as a MIME bundle of n entries
     * (keys[i] -> values[i]); "text/plain" is always present. */
    void (*on_result)(void *user, const char *const *keys, const char *const *values, size_t n,
                      uint64_t execution_count);
    /* The run raised. traceback holds n formatted lines. */
    void (*on_error)(void *user, const char *ename, const char *evalue,
                     const char *const *traceback, size_t n);
    /* ctxd_execute only: called after every message of the run and whenever
     * the wait wakes without one: at least every 100 ms, and right after a
     * signal interrupted the wait (install the SIGINT handler without
     * SA_RESTART to react at once). Returns a CTXD_WAIT_* value. Ignored for
     * submitted runs. */
    int (*on_wait)(void *user);
    /* The run ended: called exactly once per run, last, unless the run was
     * detached (ctxd_run_detach, CTXD_WAIT_DETACH) or the client closed.
     * For ctxd_execute it is called before ctxd_execute returns. */
    void (*on_done)(void *user, const ctxd_run_end *end);
    /* A display() output or a matplotlib figure, as a MIME bundle like
     * on_result's (binary types such as "image/png" are base64); display_id
     * is NULL unless given; update is true for update_display(). */
    void (*on_display)(void *user, const char *const *keys, const char *const *values, size_t n,
                       const char *display_id, bool update);
    /* input() or getpass.getpass() in the code (password true: do not echo).
     * Setting it sends the execute with allow_stdin. Return the line
     * (without its newline; read before the callback's caller returns, at
     * most 1 MiB), or NULL to decline: the code's input() raises EOFError
     * (input.reply {eof: true}). Without it, input() raises EOFError at
     * once. */
    const char *(*on_input)(void *user, const char *prompt, bool password);
    /* clear_output(wait) in the code: clear what the run displayed, now or
     * (wait) when the next output arrives. */
    void (*on_clear_output)(void *user, bool wait);
} ctxd_callbacks;

typedef struct ctxd_outcome {
    ctxd_status status;
    uint64_t execution_count;
    uint64_t incarnation;
    double duration; /* seconds on the worker */
    double cpu_time; /* CPU seconds of the worker and its waited-for children */
    bool state_lost; /* the worker was killed or died: the context's globals are gone */
    bool truncated;  /* output passed the daemon's max_output and was cut */
    uint64_t dropped_stdout, dropped_stderr; /* bytes cut when truncated */
    const char *cause; /* NULL, or why (died, aborted, timeout with state_lost);
                          ctxd_execute: owned by the client; on_done: valid
                          during the callback */
    int exit_code;     /* the run ended with SystemExit (sys.exit): the exit
                          status a script would have (0-255); else -1 */
} ctxd_outcome;

/* Runs code and blocks until its `done`, calling cb's callbacks for events
 * as they arrive (cb may be NULL). Events of runs submitted earlier with
 * ctxd_submit are dispatched to their own callbacks meanwhile. Returns 0 when
 * `done` arrived (out, if not NULL, holds the outcome, whatever the status),
 * or a negative CTXD_E* code: CTXD_EREFUSED for an `err` reply (e.g. busy,
 * unknown_context), CTXD_EUNREACHABLE / CTXD_ELOST when a liveness check
 * fails, CTXD_ECANCELLED when on_wait asked to detach. */
int ctxd_execute(ctxd_client *c, const ctxd_exec_opts *opts, const ctxd_callbacks *cb, void *user,
                 ctxd_outcome *out);

/* ---- event-loop form ------------------------------------------------- */

/* Sends an execute and returns at once; *run_id (may be NULL) receives the
 * run's id (the request's `id`, never 0). The run's events are dispatched to
 * cb (copied; may be NULL) by later ctxd_step / ctxd_execute calls, ending
 * with on_done. Returns 0, or CTXD_EINVALID / CTXD_EREFUSED ("too_large") /
 * CTXD_EUNREACHABLE / CTXD_ETRANSPORT when nothing could be sent (no
 * on_done then). May be called from a callback. */
int ctxd_submit(ctxd_client *c, const ctxd_exec_opts *opts, const ctxd_callbacks *cb, void *user,
                uint64_t *run_id);

/* Receives and dispatches. Dispatches the messages already queued; if there
 * were none and timeout_ms is not 0, waits up to timeout_ms milliseconds (<
 * 0: until a message arrives or a liveness check is due) for one; then
 * drains the socket until it would block, dispatching every message to the
 * callbacks of its run, and runs the liveness check. Returns the number of
 * messages handled (0 when there were none), or CTXD_ETRANSPORT, or
 * CTXD_EINVALID when called from a callback. A signal ends the wait early
 * (returns what was handled). */
int ctxd_step(ctxd_client *c, int timeout_ms);

/* The fd to wait on for readability (ZeroMQ's ZMQ_FD; see the edge-trigger
 * caveat above), or CTXD_ETRANSPORT. Stable for the client's life. */
int ctxd_fd(ctxd_client *c);

/* How long a loop may sleep before it must call ctxd_step: 0 when a message
 * is already waiting (checked with ZMQ_EVENTS, so a notification consumed by
 * another ctxd_* call is never missed), the time until the next liveness
 * action when runs are in flight, else -1 (only the fd matters). Never
 * blocks; poll()'s timeout argument accepts it as is. */
int ctxd_timeout_ms(ctxd_client *c);

/* Runs in flight (submitted or executing, not yet ended or detached). */
size_t ctxd_pending(const ctxd_client *c);

/* Interrupts a run in flight (KeyboardInterrupt in its code, globals kept):
 * sends `interrupt` with the run's id in `run` at once if its `accepted` came,
 * else as soon as it comes. Does not wait for the reply (consumed
 * internally); the run ends with `interrupted` if the interrupt hit it.
 * Returns 0, CTXD_EINVALID for a run id not in flight, or a send failure.
 * May be called from a callback. */
int ctxd_run_interrupt(ctxd_client *c, uint64_t run_id);

/* Stops tracking a run: its remaining events are dropped and on_done is not
 * called; the run goes on in the daemon. Returns 0 or CTXD_EINVALID. May be
 * called from a callback (also the run's own). */
int ctxd_run_detach(ctxd_client *c, uint64_t run_id);

/* ---- control requests -------------------------------------------------- */

/* One tier of hello's `tiers`. */
typedef struct ctxd_tier_info {
    const char *name;
    const char *const *fields;
    size_t nfields;
} ctxd_tier_info;

typedef struct ctxd_hello_info {
    const char *server;  /* "ctxd" */
    const char *version; /* daemon version, e.g. "0.1.0" */
    uint64_t protocol;
    const uint64_t *versions; /* protocol versions the daemon speaks */
    size_t nversions;
    uint64_t pid;         /* the supervisor's pid */
    const char *instance; /* 32 hex digits, new per daemon start ("" if absent) */
    uint64_t max_request_bytes, max_code_bytes, max_queue, max_contexts;
    double default_timeout, kill_grace;
    uint64_t max_output;       /* bytes of output per run; 0: no cap */
    double idle_ttl;           /* idle contexts are deleted after this; 0: never */
    const char *on_disconnect; /* "finish" or "interrupt" ("" if not reported) */
    /* The execution tiers offered, each with the policy fields it enforces. */
    const struct ctxd_tier_info *tiers;
    size_t ntiers;
    /* Preloaded modules: imported in every new context, and configured but
     * not loaded. */
    const char *const *preloads_loaded;
    size_t npreloads_loaded;
    const char *const *preloads_skipped;
    size_t npreloads_skipped;
    bool packages_offered;              /* pip.install can install anything */
    const char *const *package_sources; /* "wheelhouse", "index" */
    size_t npackage_sources;
    /* Through ctxd-router: each host's reach in one line ("N of M hosts
     * up; ENDPOINT up; ENDPOINT refused (why); ..."), and, when no host is
     * live, why not (the limits are then absent). "" from a ctxd. */
    const char *hosts;
    const char *unavailable;
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
    uint64_t rss;           /* resident set size of the worker, bytes (0 when dead) */
    uint64_t pss;           /* proportional set size, bytes (0 when dead or unknown) */
    const char *tier;       /* "static", "unsafe", "local" or "sandbox" */
} ctxd_ctx_info;

/* `hello`: fills *out (may be NULL). The first call with out after
 * ctxd_connect answers from the reply to the connect check (so a program
 * that connects and asks hello sends one); later calls ask the daemon. */
int ctxd_hello(ctxd_client *c, ctxd_hello_info *out);

/* The daemon's `stats` reply: counters since it started. */
typedef struct ctxd_stats_info {
    double uptime; /* seconds */
    /* contexts */
    uint64_t live, busy, queued, created;
    /* counters */
    uint64_t requests, refused, runs, runs_ok, runs_error, runs_interrupted, runs_timeout,
        runs_died, runs_aborted, runs_shutdown, stdout_bytes, stderr_bytes, truncated_bytes,
        workers_spawned, worker_deaths;
} ctxd_stats_info;

/* `stats`: fills *out (may be NULL). A daemon that predates the request
 * answers CTXD_EREFUSED with code "unknown_type". */
int ctxd_stats(ctxd_client *c, ctxd_stats_info *out);

/* `ctx.create`: name NULL for a generated name, cwd NULL for the daemon's
 * cwd, env (nenv entries) added to the worker's environment. Fills *out (may
 * be NULL) with the new context. */
int ctxd_ctx_create(ctxd_client *c, const char *name, const char *cwd, const ctxd_kv *env,
                    size_t nenv, ctxd_ctx_info *out);

/* `ctx.list`: *out is set to an array of *n contexts sorted by name (owned
 * by the client). */
int ctxd_ctx_list(ctxd_client *c, const ctxd_ctx_info **out, size_t *n);

/* `ctx.fork`: clones the live context src (required) into a new context
 * (name NULL: generated) with the same globals, modules, cwd and
 * environment. The request waits in src's queue behind its runs, so this
 * call waits without a deadline while the daemon answers liveness checks
 * (as for runs). Fills *out (may be NULL) with the new context. Errors
 * (CTXD_EREFUSED): unknown_context, dead, exists, limit, busy, spawn,
 * aborted. */
int ctxd_ctx_fork(ctxd_client *c, const char *src, const char *name, ctxd_ctx_info *out);

/* `ctx.delete` of name (required). */
int ctxd_ctx_delete(ctxd_client *c, const char *name);

/* `ctx.restart` of name (NULL: "default"); fills *out (may be NULL). */
int ctxd_ctx_restart(ctxd_client *c, const char *name, ctxd_ctx_info *out);

/* `interrupt` of the run executing on ctx (NULL: "default"), whoever sent
 * it. *interrupted (may be NULL) tells whether something was running. */
int ctxd_interrupt(ctxd_client *c, const char *ctx, bool *interrupted);

/* `interrupt` with `run`: interrupts run run_id (an id this client's
 * ctxd_submit returned) on ctx only while it is the one executing there.
 * *interrupted (may be NULL) is false when it was not (queued, or over).
 * Unlike ctxd_run_interrupt it waits for the reply and does not defer. */
int ctxd_interrupt_run(ctxd_client *c, const char *ctx, uint64_t run_id, bool *interrupted);

/* ---- files and packages ----------------------------------------------- */

/* Largest chunk of one file.put / file.get (PROTOCOL.md section 5). */
#define CTXD_FILE_CHUNK (4u * 1024 * 1024)

/* `file.put` of one chunk: len bytes (at most CTXD_FILE_CHUNK) written at
 * offset of path, relative to the directory of ctx (NULL: "default").
 * Offset 0 creates or truncates the file; any other offset must be the
 * file's current size (chunks go in order). *size (may be NULL): the file's
 * size after the write. Errors (CTXD_EREFUSED): bad_path, not_found, io,
 * too_large, bad_field, unknown_context. A whole file is a loop of these,
 * so neither side holds more than a chunk. */
int ctxd_file_put(ctxd_client *c, const char *ctx, const char *path, uint64_t offset,
                  const void *data, size_t len, uint64_t *size);

/* `file.get` of up to length bytes (0 or more than CTXD_FILE_CHUNK:
 * CTXD_FILE_CHUNK) from offset: *data (owned by the client, see OWNERSHIP)
 * and *n, the bytes; *size, the file's size; *eof, true when this chunk
 * reaches the end. Any out-pointer may be NULL. */
int ctxd_file_get(ctxd_client *c, const char *ctx, const char *path, uint64_t offset, size_t length,
                  const void **data, size_t *n, uint64_t *size, bool *eof);

/* One installed requirement (pip.install's reply). */
typedef struct ctxd_package {
    const char *name; /* normalised, e.g. "my-pkg==1.0" */
    bool cached;      /* found in the daemon's cache: pip did not run */
} ctxd_package;

/* `pip.install`: installs requirements ("name", "name==1.0",
 * "name[extra]>=1"; at most 64) from the daemon's wheelhouse or index into
 * ctx (NULL: "default"), where they are importable once this returns 0, and
 * nowhere else. pip may take long: the call waits without a deadline while
 * the daemon answers liveness checks. *out (owned by the client) is set to
 * *n packages (either may be NULL). Errors (CTXD_EREFUSED): install (pip's
 * message, or the daemon offers no packages), bad_field, unknown_context,
 * busy. */
int ctxd_pip_install(ctxd_client *c, const char *ctx, const char *const *packages, size_t npackages,
                     const ctxd_package **out, size_t *n);

/* ctx.create's options for ctxd_ctx_create_ex; zero-initialise, then set
 * what you need. */
typedef struct ctxd_create_opts {
    const char *name; /* NULL: generated */
    const char *cwd;  /* NULL: the daemon's cwd */
    const ctxd_kv *env;
    size_t nenv;
    const char *const *packages; /* installed before the worker starts */
    size_t npackages;
    const char *tier; /* NULL: "unsafe"; "static", "local", "sandbox", mellea's names */
    /* Policy fields (PROTOCOL.md section 5) as text, each value one of:
     * true, false, a number, or [item,item,...] (strings; [] empty). E.g.
     * {"memory_bytes", "268435456"}, {"filesystem_write_roots", "[/srv/a]"}. */
    const ctxd_kv *policy;
    size_t npolicy;
    /* "CTX/NAME": the new context restores this snapshot first (the reply
     * comes once it has); NULL: none. */
    const char *from_snapshot;
    /* "run" (after each run that ends ok) or a number of seconds; NULL: off. */
    const char *autosnapshot;
} ctxd_create_opts;

/* `ctx.create` with every option (o may be NULL); with packages it waits
 * for pip without a deadline, as ctxd_pip_install. */
int ctxd_ctx_create_ex(ctxd_client *c, const ctxd_create_opts *o, ctxd_ctx_info *out);

/* ---- snapshots (ctxd_snap.c; PROTOCOL.md section 5, ctx.snapshot) -------- */

/* A snapshot of a context's state. Strings owned by the client until its
 * next call. */
typedef struct ctxd_snapshot {
    const char *id;  /* "CTX/NAME" */
    const char *ctx; /* the context it was taken of */
    const char *name;
    uint64_t size;  /* bytes */
    double created; /* Unix time */
} ctxd_snapshot;

/* A global a snapshot could not keep (or a restore could not bring back),
 * and why. */
typedef struct ctxd_unsaved {
    const char *name;
    const char *reason;
} ctxd_unsaved;

/* ctx.snapshot: writes ctx's state as snapshot NAME (NULL: generated);
 * waits behind its runs, without a deadline. */
int ctxd_ctx_snapshot(ctxd_client *c, const char *ctx, const char *name, ctxd_snapshot *out,
                      const ctxd_unsaved **unsaved, size_t *nunsaved);
/* ctx.restore: replaces ctx's state with snapshot ("NAME" of ctx's own or
 * "CTX/NAME"); restored: how many globals came back. */
int ctxd_ctx_restore(ctxd_client *c, const char *ctx, const char *snapshot, uint64_t *restored,
                     const ctxd_unsaved **unsaved, size_t *nunsaved);
/* ctx.snapshots: the snapshots of ctx (NULL: of every context). */
int ctxd_ctx_snapshots(ctxd_client *c, const char *ctx, const ctxd_snapshot **out, size_t *n);
/* ctx.snapshot_delete of "CTX/NAME". */
int ctxd_snapshot_delete(ctxd_client *c, const char *snapshot);
/* ctx.snapshot_export of "CTX/NAME": the exported file's path on the
 * daemon's host (STATE_DIR/exports/CTX/NAME) and the writer's tier it
 * carries, marked under the operator's STATE_DIR/export.key. */
int ctxd_snapshot_export(ctxd_client *c, const char *snapshot, const char **path,
                         const char **tier);
/* ctx.snapshot_import of "CTX/NAME" (an export put at the daemon's
 * STATE_DIR/imports/CTX/NAME): the snapshot made, and the writer's tier. */
int ctxd_snapshot_import(ctxd_client *c, const char *snapshot, ctxd_snapshot *out,
                         const char **tier);

/* ---- queries: complete, inspect, is_complete ----------------------------- */
/* Answered by the context's worker from its live globals (PROTOCOL.md
 * section 5, "Queries"). A query waits in the context's queue behind its
 * runs, so these calls wait without a deadline while the daemon answers
 * liveness checks (as for runs); the daemon interrupts a query after 10 s.
 * Strings and arrays they return are owned by the client and valid until
 * its next call. cursor counts characters (code points) into code;
 * CTXD_CURSOR_END is the end. Errors (CTXD_EREFUSED): bad_field (cursor
 * past the end), too_large, unknown_context, dead, busy, aborted, timeout. */
#define CTXD_CURSOR_END UINT64_MAX

typedef struct ctxd_completion {
    const char *const *matches; /* may replace code[cursor_start:cursor_end] */
    size_t nmatches;
    uint64_t cursor_start, cursor_end;
} ctxd_completion;

typedef struct ctxd_inspection {
    bool found;
    const char *text; /* the text/plain description; "" when not found */
} ctxd_inspection;

typedef struct ctxd_completeness {
    const char *status; /* "complete", "incomplete", "invalid" or "unknown" */
    const char *indent; /* for "incomplete": how the next line starts */
} ctxd_completeness;

/* `complete` on ctx (NULL: "default"); fills *out (may be NULL). */
int ctxd_complete(ctxd_client *c, const char *ctx, const char *code, uint64_t cursor,
                  ctxd_completion *out);
/* `inspect` of the name at cursor; detail_level 1 adds the source. */
int ctxd_inspect(ctxd_client *c, const char *ctx, const char *code, uint64_t cursor,
                 unsigned detail_level, ctxd_inspection *out);
/* `is_complete` of code. */
int ctxd_is_complete(ctxd_client *c, const char *ctx, const char *code, ctxd_completeness *out);

#ifdef __cplusplus
}
#endif

#endif
