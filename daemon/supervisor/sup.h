/* sup: the supervisor's shared types. The supervisor is one thread and one
 * poll loop; it owns the context table, per-context queues, timeouts and
 * routing, and never runs (or links) Python. */
#ifndef CTXD_SUP_H
#define CTXD_SUP_H

#include "proto.h"
#include "sbx_cgroup.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#define SUP_VERSION "0.1.0"
#define SUP_ROUTE_MAX 256 /* ZeroMQ routing ids are at most 255 bytes */

#define SUP_MAX_ENDPOINTS 16
/* A confined worker's own tasks (threads), on top of policy.max_processes. */
#define SUP_OWN_TASKS 8

/* Daemon-wide settings (sup_config.c: command line and config file). */
typedef struct sup_config {
    const char *endpoints[SUP_MAX_ENDPOINTS];
    size_t nendpoints;
    const char *worker_path;
    size_t max_contexts;
    size_t max_queue;
    size_t max_code_bytes;
    size_t max_request_bytes;
    uint64_t max_output;    /* stream bytes per run before truncation; 0 = none */
    size_t max_held;        /* bytes held for clients that do not read, in total */
    size_t max_client_held; /* ... for one client */
    double default_timeout; /* seconds; 0 = none */
    double kill_grace;      /* seconds between SIGINT and SIGKILL on timeout */
    double idle_ttl;        /* seconds; 0 = never reap idle contexts */
    bool interrupt_on_disconnect;
    bool insecure_tcp;
    const char *state_dir;
    const char *authorized_keys;
    const char *log_path;
    const char *preload; /* modules the zygote imports, comma-separated */
    /* Packages (sup_pkgs.c): where pip finds them and where installs are
     * cached; no wheelhouse and no index = packages are not offered. */
    const char *wheelhouse;    /* --wheelhouse: a directory of wheels */
    const char *package_index; /* --package-index: an index URL */
    const char *package_cache; /* --package-cache: default STATE_DIR/packages */
    const char *pip_python;    /* --pip-python: the Python that runs pip */
    bool verbose;
    bool no_cgroup_tuning; /* --no-cgroup-tuning: leave the v2 mount as it is */
} sup_config;

extern sup_config sup_cfg;
/* Random id of this daemon process, so clients can tell a restart. */
extern char sup_instance[33];

/* Who a reply goes to: the client's routing id and its request id, kept
 * encoded (msgpack bytes of the id) so it can be echoed as `re` verbatim. */
typedef struct sup_peer {
    uint8_t sock; /* which listening socket (0 plain, 1 CurveZMQ) */
    uint8_t route[SUP_ROUTE_MAX];
    size_t route_len;
    uint8_t re[PROTO_MAX_ID + 8];
    size_t re_len;
    uint32_t conn; /* CurveZMQ: the connection the request came in on (sup_route.c) */
} sup_peer;

/* One execute request, queued or running. */
typedef struct sup_run {
    struct sup_run *next;
    sup_peer peer;
    char *code;
    size_t code_len;
    proto_buf env; /* msgpack map str->str, forwarded to the worker verbatim */
    double timeout;
    bool silent, stop_on_error;
    bool allow_stdin;         /* input() may ask the client (input.request) */
    bool artifacts;           /* report the files the run wrote (done.artifacts) */
    proto_buf script;         /* execute argv/file, as msgpack key/value pairs for the run frame */
    uint32_t script_n;        /* how many pairs script holds (0-2) */
    uint64_t out_bytes;       /* stream bytes relayed */
    uint64_t stream_bytes[2]; /* of which stdout, stderr (policy caps) */
    uint64_t dropped[2];      /* stdout/stderr bytes dropped past max_output */
    bool client_gone;         /* a send found the client disconnected */
    /* A ctx.fork waiting in (or at the head of) its source's queue: the new
     * context's name (NULL for an execute); once the `fork` frame is out,
     * the supervisor's ends of the new worker's channel and pipes (-1
     * before). */
    char *fork_name;
    int fork_fd, fork_out_rd[2];
    /* A query (sup_query.c: complete, inspect, is_complete): its op (a
     * static string), else NULL; code, cursor and detail_level go out in
     * the `query` frame. */
    const char *query_op;
    uint64_t cursor, detail_level;
    /* Chosen by the supervisor (random, never 0) when the run, query or
     * fork is sent; the worker echoes it in start, done, answer, forked
     * and fork_failed. */
    uint64_t run_id;
    uint64_t fork_since; /* boot ticks when the `fork` frame went out */
} sup_run;

/* A FIFO of client messages that could not go out yet (the client's queue
 * was full). */
typedef struct sup_outq {
    struct sup_outmsg *head, *tail;
    size_t n;
    size_t bytes; /* bodies plus per-message overhead */
} sup_outq;

/* A request (ctx.create / ctx.restart) waiting for its worker's `ready`. */
typedef struct sup_waiter {
    struct sup_waiter *next;
    sup_peer peer;
} sup_waiter;

typedef enum { SUP_CTX_IDLE, SUP_CTX_BUSY, SUP_CTX_DEAD } sup_ctx_state;

typedef struct sup_ctx {
    struct sup_ctx *next;
    bool deleted; /* freed at the next tick, not while the loop holds it */
    char *name;
    char *cwd;
    struct sup_ident *ident; /* its uid/gid and private directory (sup_ident.c);
                                shared with ctx.fork copies */
    char **env;              /* "KEY=VALUE" strings added to the worker's environment */
    size_t nenv;
    struct sup_policy *policy; /* tier and policy (sup_policy.h); NULL = unsafe */
    struct sup_site *site;     /* its package directory (sup_pkgs.c); NULL = none */
    double created;            /* Unix time */
    double last_active;        /* monotonic; for --idle-ttl */

    /* The current incarnation's worker; pid 0 and fd -1 when there is none.
     * pidfd: the supervisor's own handle on it (sup_proc.c), -1 when none;
     * every signal to the worker goes through it. */
    pid_t pid;
    int fd;
    int pidfd;
    bool spawning; /* the zygote was asked for its worker: pid not known yet */
    /* Its cgroup (sup_cgroup.c; "" when none): killed with the worker. */
    char cgroup[SBX_CGROUP_NAME_MAX];
    double cpu0;       /* the cgroup's CPU seconds when the running run started; -1 none */
    double cpu_check;  /* when to read the cgroup's CPU time again (cpu_seconds) */
    bool cpu_exceeded; /* the running run passed the policy's cpu_seconds */
    /* Read ends of the worker's stdout/stderr pipes (the worker reads them
     * too): raw output still in them when a worker dies is not lost. */
    int out_rd[2];
    /* The worker's output memory (sup_outmem.c), mapped read-only, NULL
     * when it sent none; the memfd received with the channel's bytes until
     * `ready` maps it; the stream bytes of whole frames received from this
     * worker, per stream (its sequence numbers). */
    const void *outmem;
    int outmem_fd;
    uint64_t stream_recv[2];
    /* Read ends of new pipes received with a `start` (the worker replaced
     * its pipes: output of processes an earlier run left behind stays in the
     * old ones), until on_start takes them as out_rd. */
    int new_rd[2];
    int nnew_rd;
    unsigned incarnation;
    bool ready;    /* `ready` frame received */
    bool chan_eof; /* worker closed its end; waiting for SIGCHLD */
    uint64_t execution_count;
    char *last_death;   /* cause of the last death, NULL if never died */
    bool death_unshown; /* last_death not yet shown in an `accepted` */
    char *kill_reason;  /* set when the supervisor killed the worker */

    proto_buf in;  /* bytes read from the worker, not yet a whole frame */
    proto_buf out; /* bytes waiting to be written to the worker */

    sup_run *running;
    bool started;          /* `start` received for the running run */
    bool interrupt_wanted; /* interrupt asked before `start` arrived */
    bool interrupt_sent;   /* SIGINT went to the running run */
    bool timed_out;
    bool input_waiting;               /* the running run waits for input.reply */
    uint64_t input_seq;               /* the worker's number of that input_request */
    double run_t0, deadline, kill_at; /* monotonic seconds; 0 = unset */
    sup_run *queue, *queue_tail;
    size_t queued;
    sup_waiter *waiters;

    bool creating;        /* made by ctx.create, never ready yet */
    bool broken;          /* broke the channel protocol: read nothing more */
    const char *kill_why; /* what kill_at is armed for */
    /* Client messages held back by a client's full queue. While any are
     * held, the worker is not read: backpressure reaches it. */
    sup_outq pending;
    double flush_retry; /* seconds until pending is tried again; 0 = not failing */
} sup_ctx;

/* ---- sup_config.c ------------------------------------------------------ */
/* Applies the command line (and any --config files); -1 after printing the
 * problem. --help prints the usage and exits. */
int sup_config_parse(int argc, char **argv);
void sup_config_usage(FILE *out);

/* ---- sup_loop.c: sockets, the poll loop, sending ---------------------- */
double sup_now(void);      /* monotonic seconds */
double sup_unix_now(void); /* wall clock seconds */
/* Sends body to a client without blocking. Returns 0, -1 when the client's
 * queue is full (EAGAIN), or 1 when the client is gone (the message is
 * dropped). */
int sup_send(const sup_peer *peer, const proto_buf *body);
/* Sends, or queues behind the daemon-wide outbox when the client's queue is
 * full, so replies are never dropped for a slow client. */
void sup_deliver(const sup_peer *peer, const proto_buf *body);
void sup_outq_push(sup_outq *q, const sup_peer *peer, const proto_buf *body);
/* Sends queued messages in order; true when the queue is empty. */
bool sup_outq_flush(sup_outq *q);
/* Hands what a deleted context still holds to the daemon-wide outbox. */
void sup_outq_adopt(sup_outq *q);
void sup_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int sup_loop_open(const char **endpoints, size_t n);
void sup_loop_run(void);

/* libzmq's queue per client, in messages (output: at most 64 KiB each):
 * what libzmq holds for a client that does not read is bounded too. */
#define SUP_ZMQ_SNDHWM 64

/* ---- sup_held.c: bytes held for clients that do not read ---------------- */
void sup_held_add(const sup_peer *p, size_t n);
void sup_held_sub(const sup_peer *p, size_t n);
size_t sup_held_client(const sup_peer *p);
size_t sup_held_total(void);
size_t sup_held_peak(void);
/* True when p's client holds max_client_held or more, or everything held
 * reaches max_held: its requests are refused and its runs' workers are not
 * read until it reads. */
bool sup_held_over(const sup_peer *p);

/* ---- sup_auth.c: CurveZMQ keys and the ZAP handler -------------------- */
int sup_auth_setup(void *zctx, void *curve_router);
void *sup_auth_zap_socket(void);
void sup_auth_handle(void);
const char *sup_auth_server_public(void);
/* The state directory (made 0700 on first use); NULL if it cannot be made. */
const char *sup_auth_state_dir(void);

/* ---- sup_route.c: CurveZMQ routing ids bound to their connection ------ */
/* Watches the CurveZMQ router's connections (a socket monitor); -1 on
 * failure. */
int sup_route_open(void *zctx, void *curve_router);
void *sup_route_monitor(void); /* the monitor socket, to poll; NULL before open */
void sup_route_on_monitor(void);
/* A message (zmsg, a zmq_msg_t) arrived on route: records its connection
 * (key and descriptor from its metadata) and returns its generation. *gap: the same client
 * came back on a new connection after *gap_dropped of its messages were
 * dropped. */
uint32_t sup_route_note(const uint8_t *route, size_t len, void *zmsg, bool *gap,
                        uint64_t *gap_dropped);
/* The live generation of route (0 when none). */
uint32_t sup_route_current(const uint8_t *route, size_t len);
/* May a message for peer go out? False (counted) when the connection its
 * request came in on is gone or another one holds its routing id. */
bool sup_route_ok(const sup_peer *peer);

/* ---- sup_privdir.c: where contexts' private directories live --------- */
/* STATE_DIR/contexts/<instance> (made, and this daemon's lock on it taken,
 * on first use) into out; -1 with errno set. */
int sup_privdir_base(const char *state_dir, char *out, size_t n);
/* At start: removes the private directories of daemons that are gone. */
void sup_privdir_sweep(const char *state_dir);

/* ---- sup_persist.c: the context table across daemon restarts --------- */
/* Rewrites STATE_DIR/contexts.msgpack when the table changed (called once
 * per loop round; cheap when nothing changed). */
void sup_persist_flush(void);
/* At start (after the zygote): makes the previous daemon's contexts again,
 * each a new incarnation with previous_death "daemon restarted". */
void sup_persist_restore(void);

/* ---- sup_stats.c: counters and the request log ------------------------- */
#define SUP_NSTATUS 7 /* ok error interrupted timeout died aborted shutdown */
typedef struct sup_counters {
    uint64_t requests, refused, runs, by_status[SUP_NSTATUS];
    uint64_t stdout_bytes, stderr_bytes, truncated_bytes;
    uint64_t between_runs_bytes; /* output written while no run was active */
    uint64_t requests_unread;    /* dropped: their client held too much unread */
    uint64_t contexts_created, workers_spawned, worker_deaths;
    uint64_t pip_runs, pip_failures, pip_cached; /* sup_pkgs.c */
    uint64_t log_lines_lost;                     /* request log lines a write could not store */
    uint64_t route_dropped; /* messages whose request's connection is gone (sup_route.c) */
} sup_counters;
extern sup_counters sup_stats;
int sup_stats_open(void);
void sup_stats_flush(void);
/* One log line for a request answered with `ok` or `err:<code>`. */
void sup_stats_request(const char *type, const char *ctx, const char *status, double duration);
void sup_stats_run(const char *ctx, const char *status, double duration, uint64_t out_bytes);
void sup_stats_event(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Appends the `stats` reply's fields (uptime, contexts, counters). */
void sup_stats_put(proto_buf *b);

/* ---- sup_request.c: client requests ----------------------------------- */
void sup_request_handle(int sock, const uint8_t *route, size_t route_len, const uint8_t *msg,
                        size_t len, bool multipart);
/* Writes map header + v, t, re; the caller appends nfields pairs. */
void sup_msg_begin(proto_buf *b, const char *type, const sup_peer *peer, uint32_t nfields);
void sup_reply_err(const sup_peer *peer, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sup_put_ctx_info(proto_buf *b, const sup_ctx *c);
/* The context a request's `ctx` field names (default "default", made on
 * first use when make_default); NULL after replying `err`. */
sup_ctx *sup_request_ctx(const proto_val *msg, const sup_peer *peer, bool make_default);

/* ---- sup_ctx.c: the context table and run lifecycle ------------------- */
sup_ctx *sup_ctx_find(const char *name, size_t len);
sup_ctx *sup_ctx_first(void);
size_t sup_ctx_count(void);
/* Creates and spawns; returns NULL with err set on failure. site: the
 * context's package directory (its reference is taken on success), or NULL
 * for a new empty one when packages are offered. */
sup_ctx *sup_ctx_create(const char *name, const char *cwd, char **env, size_t nenv,
                        struct sup_site *site, struct sup_ident *ident, proto_error *err);
void sup_ctx_delete(sup_ctx *c);
/* Kills the worker, aborts its runs, starts incarnation + 1. */
int sup_ctx_restart(sup_ctx *c, proto_error *err);
/* Queues a run (takes ownership) and starts it when the context is free. */
void sup_ctx_submit(sup_ctx *c, sup_run *r);
bool sup_ctx_interrupt(sup_ctx *c);
/* Answers the running run's pending input_request (input.reply; eof: the
 * client declined, input() raises EOFError); false when the context has
 * none. */
bool sup_ctx_input_reply(sup_ctx *c, const char *value, size_t len, bool eof);

/* sup_files.c: file.put / file.get, one chunk per request. */
#define SUP_FILE_CHUNK (4u * 1024 * 1024)
#define SUP_FILE_MAX (4ull * 1024 * 1024 * 1024)
void sup_files_put(const proto_val *msg, const sup_peer *peer);
void sup_files_get(const proto_val *msg, const sup_peer *peer);
void sup_ctx_add_waiter(sup_ctx *c, const sup_peer *peer);
void sup_ctx_on_readable(sup_ctx *c);
/* True while the worker's channel is not read because its client is slow
 * (backpressure). */
bool sup_ctx_held_back(const sup_ctx *c);
void sup_ctx_on_writable(sup_ctx *c);
void sup_ctx_on_exit(pid_t pid, int status);
/* The zygote's answers to sup_zygote_spawn: the worker's pid; or why it
 * made none (held: it had the descriptors, so a worker may use them: new
 * ones are made). Without the zygote a worker is started by exec (not for
 * the sandbox tier). */
void sup_ctx_spawned(sup_ctx *c, pid_t pid);
void sup_ctx_spawn_failed(sup_ctx *c, const char *why, bool held);
/* Timers and stalled sends; returns the next deadline (monotonic), 0 = none. */
double sup_ctx_tick(double now);
void sup_ctx_shutdown_all(void);
const char *sup_ctx_state_name(const sup_ctx *c);
void sup_run_free(sup_run *r);

/* ctx.fork (sup_fork.c): queues the fork of src into a new context `name`
 * behind src's runs; the reply to peer comes when the copy is ready. */
void sup_ctx_fork(sup_ctx *src, const char *name, const sup_peer *peer);
/* For sup_fork.c. */
void sup_ctx_dispatch(sup_ctx *c);
void sup_ctx_broken(sup_ctx *c, const char *why);
/* Enters a context whose worker (pid and its verified pidfd, channel fd,
 * pipe read ends) was forked from src: same cwd, env and execution count,
 * incarnation 1, waiting for `ready`. */
sup_ctx *sup_ctx_adopt(const sup_ctx *src, const char *name, pid_t pid, int pidfd, int fd,
                       const int out_rd[2]);
/* True when pid is the worker of some context. */
bool sup_ctx_is_worker(pid_t pid);
/* A child is about to be reaped (it is a zombie): the group of a context
 * worker is killed now, while its id cannot have been reused. */
void sup_ctx_before_reap(pid_t pid);

/* ---- sup_outmem.c: a worker's output memory (wrk_outmem.h) ------------ */
/* Maps the memfd a worker sent (and closes fd); NULL when it is not the
 * sealed memory of the expected size. */
const void *sup_outmem_attach(int fd);
void sup_outmem_detach(const void **map);
typedef void (*sup_outmem_emit)(void *arg, int stream, const uint8_t *p, size_t n);
/* After the worker's death: passes to emit, in order, stream s's bytes the
 * memory holds past the recv bytes already received. */
void sup_outmem_recover(const void *map, int s, uint64_t recv, sup_outmem_emit emit, void *arg);

/* ---- sup_fork.c: the supervisor's half of ctx.fork -------------------- */
/* The fork at the head of c's queue became c->running: sends the `fork`
 * frame with the new worker's descriptors. */
void sup_fork_start(sup_ctx *c);
/* Worker frames `forked {pid}` and `fork_failed {message}`. */
void sup_fork_on_forked(sup_ctx *c, const proto_val *msg);
void sup_fork_on_failed(sup_ctx *c, const proto_val *msg);
/* A queued or running fork that will not happen: its `err aborted`. */
void sup_fork_abort(const sup_run *r, const char *cause);

/* ---- sup_query.c: complete, inspect, is_complete ---------------------- */
/* Request handlers: checked and queued on the context like an execute. */
void sup_query_complete(const proto_val *msg, const sup_peer *peer);
void sup_query_inspect(const proto_val *msg, const sup_peer *peer);
void sup_query_is_complete(const proto_val *msg, const sup_peer *peer);
/* The query at the head of c's queue became c->running: sends `query`. */
void sup_query_start(sup_ctx *c);
/* Worker frame `answer {data}`: the query's `ok`. */
void sup_query_on_answer(sup_ctx *c, const proto_val *msg);
/* A queued or running query that ends without an answer (the context was
 * deleted, restarted, died, timed out or the daemon stops): its `err`. */
void sup_query_abort(const sup_run *r, const char *status, const char *cause);

/* ---- sup_proc.c: signalling workers by pidfd only ------------------- */
/* A pidfd for pid (a process the supervisor knows by its own means), or -1. */
int sup_proc_open(pid_t pid);
/* True while the process has not been reaped. */
bool sup_proc_alive(int pidfd);
void sup_proc_signal(int pidfd, int sig);
/* kill(-leader) only while the pidfd shows the leader alive, then the
 * leader itself by its pidfd. */
void sup_proc_signal_group(int pidfd, pid_t leader, int sig);
/* The uid of pid (real, effective, saved and fs uid all equal); -1 if
 * unreadable or they differ. */
int sup_proc_uid(pid_t pid, uid_t *uid);
/* CLOCK_BOOTTIME in clock ticks, the unit of /proc/PID/stat's start time. */
uint64_t sup_proc_boot_ticks(void);
/* Verifies that pid is a child of the supervisor, runs as uid and started
 * at or after since (boot ticks): returns its pidfd, or -1 with why set. */
int sup_proc_adopt_child(pid_t pid, uid_t uid, uint64_t since, char *why, size_t n);

/* ---- sup_spawn.c: starting a worker ----------------------------------- */
/* The one place that makes a worker process: forked by the zygote (with
 * use_zygote), or by fork+exec when the zygote is not available. Sets *fd
 * (the supervisor's channel end) and out_rd (read ends of the worker's
 * stdout/stderr pipes), all non-blocking and close-on-exec. Returns 0 with
 * *pid set (started by exec), 1 when the zygote was asked (its answer
 * comes later: sup_ctx_spawned / sup_ctx_spawn_failed), -1 with err set. */
int sup_spawn_worker(sup_ctx *c, bool use_zygote, pid_t *pid, int *fd, int out_rd[2],
                     proto_error *err);
/* A worker's channel and pipes: *fd and out_rd are the supervisor's ends
 * (non-blocking); child[] = {channel, stdout write, stderr write, stdout
 * read, stderr read} are the worker's (close-on-exec; the caller closes
 * child[0..2] once they are passed on, child[3..4] are out_rd). */
int sup_spawn_fds(int *fd, int out_rd[2], int child[5], proto_error *err);
/* Forks a child of the supervisor (a worker by exec, the zygote, pip):
 * every signal blocked across the fork, so none of the supervisor's
 * handlers runs in the child; the child gets its own process group and
 * SIGKILL when the supervisor dies. Returns as fork(), errno kept. */
pid_t sup_spawn_fork(void);
/* In such a child, just before execve: default dispositions, no signal
 * blocked. */
void sup_spawn_child_signals(void);

/* ---- sup_ident.c: a context's uid/gid and private directory ----------- */
typedef struct sup_ident {
    unsigned refs;
    uid_t uid;
    gid_t gid;
    bool own_uid; /* drawn from --worker-uids (root daemon, confined tier) */
    char *dir;    /* the private directory made for it; NULL when cwd was given */
} sup_ident;
/* --worker-uids FIRST:COUNT; -1 with err filled on a bad value. */
int sup_ident_parse_range(const char *v, char *err, size_t n);
void sup_ident_init(void);
/* True under a root daemon: confined workers get uids of their own. */
bool sup_ident_separated(void);
/* The workers' shared group (FIRST of --worker-uids). */
gid_t sup_ident_group(void);
/* hello's `identity` map: daemon_root, worker_uids, worker_uids_in_use. */
void sup_ident_put_hello(proto_buf *b);
/* A new identity: an own uid when confined under a root daemon, and with
 * want_dir a new private directory for context `name`. NULL with err set. */
sup_ident *sup_ident_new(bool confined, const char *name, bool want_dir, proto_error *err);
sup_ident *sup_ident_ref(sup_ident *id);
/* The last reference removes the directory and frees the uid. */
void sup_ident_unref(sup_ident *id);
/* Removes a directory tree by descriptor, never following a link: moved
 * into the trash at once, emptied by sup_ident_tick. */
void sup_ident_rmtree(const char *path);
/* Removes up to a few hundred trash entries; the next time to call it. */
double sup_ident_tick(double now);
/* Once the state directory is known: resumes a previous daemon's trash. */
void sup_ident_start(void);

/* ---- sup_cgroup.c: every worker in a cgroup of its own ---------------- */
/* Kills and removes cgroups a dead daemon left behind. */
void sup_cgroup_init(void);
void sup_cgroup_new_name(char out[SBX_CGROUP_NAME_MAX]);
/* Kills every process in the cgroup: 0, or -1 when it cannot (no v2 tree). */
int sup_cgroup_kill(const char *name);
/* The cgroup's CPU time in seconds, children included; -1 if unknown. */
double sup_cgroup_cpu(const char *name);
/* True when the kernel's OOM killer struck in the cgroup. */
bool sup_cgroup_oom(const char *name);
/* 1 when pid is in the cgroup (v2), 0 when not, -1 when it cannot tell. */
int sup_cgroup_holds(const char *name, pid_t pid);
/* Moves pid (a ctx.fork copy) into a new cgroup with limits. 0 or -1. */
int sup_cgroup_move(pid_t pid, const char *name, unsigned long long memory_bytes,
                    unsigned long long max_tasks);
/* Kills the cgroup and removes it once empty; clears name. */
void sup_cgroup_release(char name[SBX_CGROUP_NAME_MAX]);
/* Retries pending removals; the next time to call it (0 none). */
double sup_cgroup_tick(double now);
void sup_cgroup_shutdown(void);

/* ---- sup_pkgs.c: packages (pip.install, ctx.create `packages`) -------- */
#define SUP_PKGS_MAX 64       /* requirements per request */
#define SUP_PKGS_REQ_MAX 200  /* bytes per requirement */
#define SUP_PKGS_JOBS_MAX 256 /* pip runs queued or running, daemon-wide */
/* A context's package directory: symbolic links into the install cache,
 * first on the worker's sys.path (CTXD_SITE). Shared by ctx.fork copies. */
typedef struct sup_site {
    char *path;
    unsigned refs;
} sup_site;
/* The outcome of installing a list of requirements. */
typedef struct sup_pkgs_result {
    const char *error; /* NULL when every requirement is installed */
    const char *code;  /* the err code with error: "install" or "busy" */
    char **reqs;       /* normalised requirements */
    size_t n;
    const bool *cached; /* per requirement: found in the cache, pip not run */
} sup_pkgs_result;
typedef void (*sup_pkgs_cb)(void *arg, const sup_pkgs_result *res);
/* Checks the configuration and makes the cache directories; -1 after
 * printing the problem. */
int sup_pkgs_init(void);
bool sup_pkgs_enabled(void);
/* The install cache of the configured source (readable by confined
 * workers: their package links point there); NULL when disabled. */
const char *sup_pkgs_source_dir(void);
/* Reads a `packages` array: normalised, de-duplicated requirement strings
 * (*reqs NULL-terminated, freed with sup_pkgs_free_reqs); -1 with err set
 * ("bad_field" naming field) on a bad list. */
int sup_pkgs_parse(const proto_val *list, const char *field, char ***reqs, size_t *n,
                   proto_error *err);
void sup_pkgs_free_reqs(char **reqs, size_t n);
/* Installs what is not cached yet (pip as a child of the supervisor, at
 * most two at a time) and calls cb once everything is done (maybe at once). */
void sup_pkgs_fetch(char **reqs, size_t n, sup_pkgs_cb cb, void *arg);
/* Makes reqs visible in a site: links their cached trees into it. */
int sup_pkgs_link(sup_site *site, char **reqs, size_t n, proto_error *err);
/* `packages: [{name, cached}]` (key and value) for an `ok` reply. */
void sup_pkgs_put_result(proto_buf *b, const sup_pkgs_result *res);
sup_site *sup_pkgs_site_new(void); /* NULL when disabled or on failure (logged) */
sup_site *sup_pkgs_site_ref(sup_site *s);
void sup_pkgs_site_unref(sup_site *s);
/* A child about to be reaped (a zombie): a pip run's group is killed. */
void sup_pkgs_before_reap(pid_t pid);
/* A reaped child: true when it was a pip run. */
bool sup_pkgs_on_exit(pid_t pid, int status);
/* Kills pip runs past their time; returns the next deadline (0 none). */
double sup_pkgs_tick(double now);
/* Stops every pip run; their requests get `err install`. */
void sup_pkgs_shutdown(void);

/* ---- sup_zygote.c: the zygote fork-server ----------------------------- */
/* Raises the descriptor limit, makes the supervisor a child subreaper, starts
 * the zygote with the preloads (sup_cfg.preload, else $CTXD_PRELOAD) and
 * waits until it is ready (bounded). Call after sup_loop_open. */
void sup_zygote_init(void);
/* Asks the zygote for a worker for owner with the given descriptors (see
 * sup_spawn_fds; copies are kept until sent) and complete environment,
 * without waiting: the answer comes later, from the event loop, as
 * sup_ctx_spawned or sup_ctx_spawn_failed. 0 asked; -1 the zygote cannot
 * take it now (not running, and !wait_for_zygote; the caller starts the
 * worker by exec). wait_for_zygote (the sandbox tier, which only the
 * zygote can make): queued while the zygote (re)starts, at most 10 s. */
int sup_zygote_spawn(sup_ctx *owner, const char *name, const char *cwd, const char *cgroup,
                     char *const *env, const int fds[5], bool wait_for_zygote);
/* owner no longer wants what it asked for (deleted, restarted): a worker
 * made for it is killed with its cgroup. */
void sup_zygote_cancel(const sup_ctx *owner);
/* The zygote's socket while it starts or serves (poll it), else -1. */
int sup_zygote_fd(void);
void sup_zygote_on_readable(void);
/* Why the last sup_zygote_spawn that did not return 0 failed. */
const char *sup_zygote_last_failure(void);
/* Called for every reaped child: true when it was the zygote (restarted). */
bool sup_zygote_on_exit(pid_t pid, int status);
/* Remembers the exit of a pid no context knows yet, for sup_zygote_take_exit
 * (a forked worker can die before the frame naming it is read). */
void sup_zygote_note_exit(pid_t pid, int status);
bool sup_zygote_take_exit(pid_t pid, int *status);
/* Restarts a dead zygote when due; returns when to be called next (0 none). */
double sup_zygote_tick(double now);
/* hello's `preloads` value: {loaded: [...], skipped: [...]}. */
void sup_zygote_put_preloads(proto_buf *b);
/* In a child about to exec: gives back the descriptor limit ctxd raised. */
void sup_zygote_child_limits(void);

#endif
