/* sup_ctx: the context table and the run lifecycle: one worker per
 * context, its queue of runs, its timers, its channel. Above it sit the
 * request handlers and the run kinds other than execute (ctx.fork,
 * queries), which it calls back through sup_run_kind, never by name. */
#ifndef CTXD_SUP_CTX_H
#define CTXD_SUP_CTX_H

#include "proto.h"
#include "sbx_cgroup.h"
#include "sup_chanbud.h"
#include "sup_peer.h"
#include "sup_send.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One execute request, queued or running. */
typedef struct sup_run {
    struct sup_run *next;
    const struct sup_run_kind *kind; /* NULL: an execute */
    sup_peer peer;
    char *code;
    size_t code_len;
    proto_buf env; /* msgpack map str->str, forwarded to the worker verbatim */
    double timeout;
    bool silent, stop_on_error;
    bool allow_stdin;         /* input() may ask the client (input.request) */
    bool artifacts;           /* report the files the run wrote (done.artifacts) */
    const char *syntax;       /* "python", "ipython" or "" (the context's default) */
    proto_buf script;         /* execute argv/file, as msgpack key/value pairs for the run frame */
    uint32_t script_n;        /* how many pairs script holds (0-2) */
    uint64_t out_bytes;       /* stream bytes relayed */
    uint64_t stream_bytes[2]; /* of which stdout, stderr (policy caps) */
    uint64_t dropped[2];      /* stdout/stderr bytes dropped past max_output */
    bool client_gone;         /* a send found the client disconnected */
    /* An execute sent to the worker whose `accepted` is not out yet: it
     * goes out at the worker's `start` (which a short run sends with its
     * `done`), or before anything else the run ends with. */
    bool accept_due;
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
    /* A snapshot or restore (sup_snap.c; query_op is then "snapshot" or
     * "restore", so the worker's `start` and `answer` are checked as a
     * query's): SUP_SNAP_* below, 0 for anything else; the snapshot's id
     * ("CTX/NAME"); the supervisor's descriptors of the file and of its
     * context's snapshot directory, and the temporary name being written
     * (-1 / NULL when none); the cap given to the worker. */
    int snap_mode;
    bool snap_internal; /* no client waits: autosnapshot, restore after a restart */
    char *snap_id;
    char *snap_tmp;
    int snap_fd, snap_dirfd;
    uint64_t snap_max;
    /* A snapshot being written: the supervisor's copier of the worker's
     * pipe into snap_fd, and how sup_run_free ends it (NULL: none). */
    struct sup_snap_drain *snap_drain;
    void (*snap_drop)(struct sup_snap_drain *d);
} sup_run;

enum {
    SUP_SNAP_WRITE = 1, /* ctx.snapshot, autosnapshot */
    SUP_SNAP_RESTORE,   /* ctx.restore */
    SUP_SNAP_CREATE,    /* ctx.create from_snapshot: the new context's first request */
    SUP_SNAP_RESUME,    /* an autosnapshotted context made again after a daemon restart */
};

/* A request (ctx.create / ctx.restart) waiting for its worker's `ready`. */
typedef struct sup_waiter {
    struct sup_waiter *next;
    sup_peer peer;
} sup_waiter;

typedef enum { SUP_CTX_IDLE, SUP_CTX_BUSY, SUP_CTX_DEAD } sup_ctx_state;

/* A context's place in one of the table's lists (sup_ctx.c): what needs
 * reading, what has timers, the idle order. */
typedef struct sup_ctx_link {
    struct sup_ctx *prev, *next;
    bool on;
} sup_ctx_link;

typedef struct sup_ctx {
    struct sup_ctx *next; /* the table, in no order (sup_ctx_sorted for one) */
    struct sup_ctx *prev;
    struct sup_ctx *hnext; /* the name hash's chain */
    sup_ctx_link rd;       /* its channel signalled input not yet read */
    sup_ctx_link timed;    /* a run, a kill time or held messages: tick looks */
    sup_ctx_link idle;     /* --idle-ttl order, oldest last_active first */
    sup_ctx_link leased;   /* it has a lease (ctx.create `lease`) */
    sup_ctx_link memq;     /* live workers, the least recently measured PSS first */
    bool rd_wanted;        /* the channel may hold unread bytes */
    bool rd_hup;           /* ... and signalled its end (read to EAGAIN or EOF then) */
    bool deleted;          /* freed at the next tick, not while the loop holds it */
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
    double lease;              /* ctx.create `lease` seconds; 0 = none */
    double lease_until;        /* monotonic; deleted past it (ctx.renew extends) */

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
    /* Where out_rd wait, parked (sup_park.c), while the worker lives: one
     * descriptor instead of two; -1 when they are not parked. */
    int out_park;
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

    proto_buf in;             /* bytes read from the worker, not yet a whole frame */
    sup_chanbud_slot chanbud; /* the budget the frame begun in `in` holds */
    double chan_stall_at;     /* monotonic: killed if it sent none of it by then */
    proto_buf out;            /* bytes waiting to be written to the worker */

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

    bool creating; /* made by ctx.create, never ready yet */
    /* A spare worker (--spare-workers): a hidden context outside the table,
     * which ctx.create takes for a context of the default tier. binding:
     * taken, its `bind` frame (name, directory) sent and no run started
     * since (exit code 126 then means the directory could not be
     * entered). */
    bool spare, binding;
    bool broken;          /* broke the channel protocol: read nothing more */
    const char *kill_why; /* what kill_at is armed for */
    /* Client messages held back by a client's full queue. While any are
     * held, the worker is not read: backpressure reaches it. */
    sup_outq pending;
    double flush_retry; /* seconds until pending is tried again; 0 = not failing */

    /* ctx.create `autosnapshot` (sup_snap.c): 0 off, < 0 after each run
     * that ends ok, > 0 at most every that many seconds after one; the
     * last one's monotonic time. restored_from: the
     * snapshot id the next `accepted` names (restored after a daemon
     * restart), NULL when none. */
    double autosnap;
    double autosnap_last;
    char *restored_from;
    /* The worker's PSS (bytes) as last read from smaps_rollup, which costs
     * ~0.3 ms a worker: INFO reads it again only when stale (see
     * sup_ctx_info_budget); pss_at: monotonic time of that read, 0 never
     * or out of date; pss_read_at: of the last read, kept when out of date
     * (the tick reads a worker at most once per PSS_MIN_GAP). pss_slot:
     * 1 + the sup_pss slot of a read asked for and not collected, 0 none. */
    uint64_t pss;
    double pss_at, pss_read_at;
    int pss_slot;
} sup_ctx;

/* A run that is not an execute (ctx.fork: sup_fork.c; complete, inspect,
 * is_complete: sup_query.c): what the context calls when its turn comes,
 * when it ends unanswered and for the worker frames of its kind. */
typedef struct sup_run_kind {
    /* The run at the head of c's queue became c->running: send its frame. */
    void (*start)(sup_ctx *c);
    /* Queued or running, it will not happen: its `err`. */
    void (*abort)(const sup_run *r, const char *status, const char *cause);
    /* A worker frame of this kind (answer, forked, fork_failed), checked. */
    void (*on_frame)(sup_ctx *c, const char *type, const proto_val *msg);
} sup_run_kind;

sup_ctx *sup_ctx_find(const char *name, size_t len);
sup_ctx *sup_ctx_first(void);
size_t sup_ctx_count(void);
/* The contexts sorted by name (ctx.list): an array of sup_ctx_count()
 * pointers the caller frees. */
sup_ctx **sup_ctx_sorted(void);
/* How long INFO may spend re-reading stale PSS figures from now on (a
 * ctx.list of 5,000 contexts would spend 1.5 s): 0 lifts the bound (one
 * context's INFO always reads a stale figure). */
void sup_ctx_info_budget(double seconds);
/* Takes the PSS figures the sup_pss thread read (the loop calls it when
 * sup_pss_start's descriptor is readable). */
void sup_ctx_pss_collect(void);
/* Changes whenever a context is added, removed or gets a new incarnation
 * (what sup_persist keeps): the loop saves the table only then. */
uint64_t sup_ctx_table_gen(void);
/* What changed in the table since sup_ctx_changes_clear, in order (for
 * sup_persist's journal): a context made or given a new incarnation (put),
 * or a name deleted (del; a put of that context before is dropped). At
 * most SUP_CTX_CHANGES_MAX are kept; past that *overflow is set and the
 * whole table must be saved. */
#define SUP_CTX_CHANGES_MAX 4096
typedef struct sup_ctx_change {
    sup_ctx *put; /* NULL when dropped or a del */
    char *del;
} sup_ctx_change;
const sup_ctx_change *sup_ctx_changes(size_t *n, bool *overflow);
void sup_ctx_changes_clear(void);
/* Where the loop learns of worker channels (set by sup_loop.c): add once a
 * channel descriptor is the context's, del just before it is closed. */
typedef struct sup_ctx_chan_watch {
    void (*add)(sup_ctx *c);
    void (*del)(sup_ctx *c);
} sup_ctx_chan_watch;
void sup_ctx_set_chan_watch(const sup_ctx_chan_watch *w);
/* The loop saw the channel's descriptor signal (edge): writes what waits,
 * and remembers to read (sup_ctx_read_ready). */
void sup_ctx_chan_event(sup_ctx *c, bool in, bool hup, bool out);
/* Reads every channel that signalled and may be read now. True while some
 * is held back by a slow client: the loop looks again within 1 ms. */
bool sup_ctx_read_ready(void);
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

void sup_ctx_add_waiter(sup_ctx *c, const sup_peer *peer);
void sup_ctx_on_readable(sup_ctx *c);
/* True while the worker's channel is not read because its client is slow
 * (backpressure). */
bool sup_ctx_held_back(const sup_ctx *c);
void sup_ctx_on_writable(sup_ctx *c);
void sup_ctx_on_exit(pid_t pid, int status);
/* The zygote's answers to sup_zygote_spawn (sup_zygote_answers, wired by
 * sup_main.c): the worker's pid; or why it made none (held: it had the
 * descriptors, so a worker may use them: new ones are made). Without the
 * zygote a worker is started by exec (not for the sandbox tier). */
void sup_ctx_spawned(sup_ctx *c, pid_t pid);
void sup_ctx_spawn_failed(sup_ctx *c, const char *why, bool held);
/* Timers and stalled sends; returns the next deadline (monotonic), 0 = none. */
double sup_ctx_tick(double now);
/* The background work (spares made, stale PSS figures read a few at a
 * time) once the clients pause (client_at: monotonic time of the last
 * client message): called after the turn's client messages are served, so
 * a turn that brings a request starts none of it first. Returns when to
 * come back, 0 = nothing waits. */
double sup_ctx_background_tick(double now, double client_at);
void sup_ctx_shutdown_all(void);
const char *sup_ctx_state_name(const sup_ctx *c);
void sup_run_free(sup_run *r);

/* Called after each run of an execute that ended `ok` (set by sup_snap.c
 * for autosnapshots; NULL: none). */
void sup_ctx_set_after_ok(void (*fn)(sup_ctx *c));

/* For the run kinds above (sup_fork.c, sup_query.c, sup_snap.c). */
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

/* The `ctx` map of a reply (name, state, pid, policy...). */
void sup_ctx_put_info(proto_buf *b, sup_ctx *c);
/* The context a request's `ctx` field names (default "default", made on
 * first use when make_default); NULL after replying `err`. */
/* Gives c a lease of seconds from now (0: none): deleted by the tick once
 * no request names it for that long (sup_ctx_lookup renews it). */
void sup_ctx_set_lease(sup_ctx *c, double seconds);
sup_ctx *sup_ctx_lookup(const proto_val *msg, const sup_peer *peer, bool make_default);
/* Live contexts, those running something, runs queued (stats). */
void sup_ctx_counts(size_t *live, size_t *busy, size_t *queued);

#endif
