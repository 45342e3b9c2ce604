/* sup_ctx: the context table. It defines the context and the run, holds
 * every context in a list and a name hash, journals what changed for
 * sup_persist, and threads the lists the other context modules walk (what
 * needs reading, what has timers, the idle order, leases, PSS order). It
 * calls nothing above it: the context modules are, lowest first,
 * sup_ctxpss, sup_wproc, sup_ctxinfo, sup_chan, sup_run, sup_frame,
 * sup_wexit, sup_spare, sup_life and sup_reap (README.md). */
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
    /* Chosen by the supervisor (random, never 0) when the run, query or
     * fork is sent; the worker echoes it in start, done, answer, forked
     * and fork_failed. */
    uint64_t run_id;
    /* What the run holds of its kind (the kind's own struct, which its
     * constructor allocates and its free releases); NULL for an execute. */
    void *data;
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

/* A context's place in one of the table's lists: what needs reading, what
 * has timers, the idle order, leases, the PSS order. */
typedef struct sup_ctx_link {
    struct sup_ctx *prev, *next;
    bool on;
} sup_ctx_link;

/* The channel's reading side (sup_chan.c, sup_frame.c): what was read and
 * not yet a whole frame, what came with it. */
typedef struct sup_ctx_chan {
    proto_buf in;         /* bytes read from the worker, not yet a whole frame */
    sup_chanbud_slot bud; /* the budget the frame begun in `in` holds */
    double stall_at;      /* monotonic: killed if it sent none of it by then */
    bool rd_wanted;       /* the channel may hold unread bytes */
    bool rd_hup;          /* ... and signalled its end (read to EAGAIN or EOF then) */
    bool eof;             /* worker closed its end; waiting for SIGCHLD */
    bool broken;          /* broke the channel protocol: read nothing more */
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
} sup_ctx_chan;

/* The queue of runs and the running one's state (sup_run.c; its timers in
 * sup_reap.c). */
typedef struct sup_ctx_run {
    sup_run *queue, *queue_tail;
    size_t queued;
    bool started;          /* `start` received for the running run */
    bool interrupt_wanted; /* interrupt asked before `start` arrived */
    bool interrupt_sent;   /* SIGINT went to the running run */
    bool timed_out;
    bool input_waiting;  /* the running run waits for input.reply */
    uint64_t input_seq;  /* the worker's number of that input_request */
    double t0, deadline; /* monotonic seconds; 0 = unset */
    double cpu0;         /* the cgroup's CPU seconds when the run started; -1 none */
    double cpu_check;    /* when to read the cgroup's CPU time again (cpu_seconds) */
    bool cpu_exceeded;   /* the running run passed the policy's cpu_seconds */
} sup_ctx_run;

/* The worker's PSS (bytes) as last read from smaps_rollup (sup_ctxpss.c),
 * read again by INFO only when stale; at: monotonic time of that read, 0
 * never or out of date; read_at: of the last read, kept when out of date;
 * slot: 1 + the sup_pss slot of a read asked for and not collected, 0 none. */
typedef struct sup_ctx_pss {
    uint64_t bytes;
    double at, read_at;
    int slot;
} sup_ctx_pss;

/* A spare worker (--spare-workers, sup_spare.c): a hidden context outside
 * the table, which ctx.create takes for a context of the default tier.
 * binding: taken, its `bind` frame (name, directory) sent and no run
 * started since (exit code 126 then means the directory could not be
 * entered). */
typedef struct sup_ctx_spare {
    bool on;
    bool binding;
} sup_ctx_spare;

typedef struct sup_ctx {
    struct sup_ctx *next; /* the table, in no order (sup_ctx_sorted for one) */
    struct sup_ctx *prev;
    struct sup_ctx *hnext; /* the name hash's chain */
    sup_ctx_link rd;       /* its channel signalled input not yet read */
    sup_ctx_link timed;    /* a run, a kill time or held messages: tick looks */
    sup_ctx_link idle;     /* --idle-ttl order, oldest last_active first */
    sup_ctx_link leased;   /* it has a lease (ctx.create `lease`) */
    sup_ctx_link memq;     /* live workers, the least recently measured PSS first */
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
    /* Read ends of the worker's stdout/stderr pipes (the worker reads them
     * too): raw output still in them when a worker dies is not lost. */
    int out_rd[2];
    /* Where out_rd wait, parked (sup_park.c), while the worker lives: one
     * descriptor instead of two; -1 when they are not parked. */
    int out_park;
    unsigned incarnation;
    bool ready; /* `ready` frame received */
    uint64_t execution_count;
    char *last_death;     /* cause of the last death, NULL if never died */
    bool death_unshown;   /* last_death not yet shown in an `accepted` */
    char *kill_reason;    /* set when the supervisor killed the worker */
    double kill_at;       /* monotonic: the worker is killed then; 0 = unset */
    const char *kill_why; /* what kill_at is armed for */

    sup_ctx_chan chan;
    proto_buf out; /* bytes waiting to be written to the worker */

    sup_run *running;
    sup_ctx_run run;
    sup_waiter *waiters;

    bool creating; /* made by ctx.create, never ready yet */
    sup_ctx_spare spare;
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
    sup_ctx_pss pss;
} sup_ctx;

/* A run that is not an execute (ctx.fork: sup_fork.c; complete, inspect,
 * is_complete: sup_query.c; snapshots: sup_snap.c): what the run module
 * calls when its turn comes, when it ends unanswered, and what the frame
 * module calls for the worker frames of its kind. */
typedef struct sup_run_kind {
    /* The run at the head of c's queue became c->running: send its frame. */
    void (*start)(sup_ctx *c);
    /* Queued or running, it will not happen: its `err`. */
    void (*abort)(const sup_run *r, const char *status, const char *cause);
    /* A worker frame of this kind (answer, forked, fork_failed), checked. */
    void (*on_frame)(sup_ctx *c, const char *type, const proto_val *msg);
    /* Frees what the run holds of its kind (descriptors, names), before
     * sup_run_free frees the rest; NULL: nothing. */
    void (*free)(sup_run *r);
    /* The worker frames a run of this kind expects, for the frame rules:
     * SUP_RUN_ANSWERS (a `start`, then an `answer`; its output and events
     * are dropped) or SUP_RUN_FORKS (`forked` or `fork_failed`, no `start`,
     * no interrupt). */
    unsigned frames;
    /* Whether the run's frame is out, so its answer may come; NULL: once
     * it is running. */
    bool (*sent)(const sup_run *r);
} sup_run_kind;
#define SUP_RUN_ANSWERS 1u
#define SUP_RUN_FORKS 2u

/* The context named so, NULL when none. */
sup_ctx *sup_ctx_find(const char *name, size_t len);
/* The table's first context (walk on with ->next); NULL when empty. */
sup_ctx *sup_ctx_first(void);
size_t sup_ctx_count(void);
/* The contexts sorted by name (ctx.list): an array of sup_ctx_count()
 * pointers the caller frees. */
sup_ctx **sup_ctx_sorted(void);
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

/* ---- for the context modules (sup_ctxpss.c ... sup_reap.c) ---- */

/* The lists nothing must scan whole per loop turn. */
typedef enum sup_ctx_list {
    SUP_CTX_RD,     /* channels that signalled (sup_chan.c) */
    SUP_CTX_TIMED,  /* something timed (sup_reap.c) */
    SUP_CTX_IDLE,   /* all but `default`, by last activity (--idle-ttl) */
    SUP_CTX_LEASED, /* contexts with a lease */
    SUP_CTX_MEM,    /* live workers, the least recently measured PSS first */
    SUP_CTX_NLISTS
} sup_ctx_list;
/* Appends c to list l, or puts it first; both no-ops when it is on l. */
void sup_ctx_list_push(sup_ctx_list l, sup_ctx *c);
void sup_ctx_list_unshift(sup_ctx_list l, sup_ctx *c);
/* Takes c off l (no-op when it is not on it). */
void sup_ctx_list_remove(sup_ctx_list l, sup_ctx *c);
sup_ctx *sup_ctx_list_head(sup_ctx_list l);
/* The context was active now: --idle-ttl counts from here. */
void sup_ctx_touch(sup_ctx *c);
/* Something timed (a run's deadline, a kill time, held messages, a CPU
 * budget) needs the timers' look (sup_reap_tick) from now on. */
void sup_ctx_arm(sup_ctx *c);
/* Enters c into the table (list, name hash, idle order, first for a PSS
 * read) and journals it. */
void sup_ctx_link_in(sup_ctx *c);
/* Takes c out of the table and every list, journals its name's delete,
 * and keeps it until sup_ctx_tick frees it. */
void sup_ctx_unlink(sup_ctx *c);
/* Keeps c (a context outside the table: a spare) off every list until
 * sup_ctx_tick frees it. */
void sup_ctx_bury(sup_ctx *c);
/* True while c is in the table. */
bool sup_ctx_linked(const sup_ctx *c);
/* Journals c's new incarnation. */
void sup_ctx_note_put(sup_ctx *c);
/* Empties the table and its lists (at shutdown, once every context was
 * freed). */
void sup_ctx_clear(void);
/* Where sup_ctx_tick sends each context unlinked or buried: it frees it
 * (set by sup_life.c). */
void sup_ctx_set_free(void (*fn)(sup_ctx *c));
/* Frees the contexts unlinked or buried since the last call; returns 0
 * (nothing timed). */
double sup_ctx_tick(double now);

/* The hidden spare contexts (sup_spare.c), kept here so the death and pid
 * checks below sup_spare see them. */
void sup_ctx_spare_add(sup_ctx *c);
void sup_ctx_spare_remove(sup_ctx *c);
size_t sup_ctx_spare_count(void);
sup_ctx *sup_ctx_spare_at(size_t i);
/* The spare whose worker is pid, NULL when none. */
sup_ctx *sup_ctx_spare_of(pid_t pid);

#endif
