/* sup_ctx: the context table, each context's FIFO of runs, its worker's
 * lifecycle (spawn, death, incarnations) and the worker channel. */
#include "sup_ctx.h"

#include "sup_cgroup.h"
#include "sup_config.h"
#include "sup_chanbud.h"
#include "sup_held.h"
#include "sup_ident.h"
#include "sup_linger.h"
#include "sup_log.h"
#include "sup_outmem.h"
#include "sup_park.h"
#include "sup_peer.h"
#include "sup_pkgs.h"
#include "sup_policy.h"
#include "sup_proc.h"
#include "sup_pss.h"
#include "sup_reaper.h"
#include "sup_send.h"
#include "sup_spawn.h"
#include "sup_stats.h"
#include "sup_trash.h"
#include "sup_zygote.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define READ_CHUNK (256 * 1024)
/* The most a context's channel input buffer holds: one whole frame of the
 * largest size, its prefix, and one read. */
#define IN_MAX ((size_t)PROTO_MAX_FRAME + 4 + READ_CHUNK)
/* The longest traceback line a worker may send (its traceback budget). */
#define TRACEBACK_LINE_MAX (8u * 1024 * 1024)
/* After an interrupt (or a timeout's), a run's worker is read on although
 * its client is slow, until this much is held for that client: the worker's
 * blocked write completes, the interrupt lands (KeyboardInterrupt, globals
 * kept) and the run ends. Code that goes on writing past it is held back
 * again, and a timed-out run is then killed after the grace period. */
#define INTERRUPT_HOLD_MAX ((size_t)8 << 20)
/* A worker holding channel budget for a frame (sup_chanbud) that sends none
 * of it for this long while other contexts wait for the budget is killed:
 * a worker writes a frame with one write, so only a stalling one pauses. */
#define CHAN_STALL_S 10.0

static sup_ctx *contexts;  /* in no order; sup_ctx_sorted sorts */
static sup_ctx *graveyard; /* deleted, freed at the next tick */
static sup_ctx *spare_of(pid_t pid);
static bool ask_pss(sup_ctx *c, double now);
static void spare_drop(sup_ctx *c);
static size_t ncontexts;
static uint64_t table_gen;
/* Names to contexts: chains in a power-of-two table, grown with the count,
 * so a request's lookup costs the same at 10 or 5,000 contexts. */
static sup_ctx **htab;
static size_t hcap;

/* The lists nothing must scan whole per loop turn: contexts whose channel
 * signalled (rd), those with something timed (timed), and all but
 * `default` by last activity (idle, for --idle-ttl). */
typedef struct ctx_list {
    sup_ctx *head, *tail;
    size_t off; /* of the sup_ctx_link in sup_ctx */
} ctx_list;
static ctx_list rd_list = {.off = offsetof(sup_ctx, rd)};
static ctx_list timed_list = {.off = offsetof(sup_ctx, timed)};
static ctx_list idle_list = {.off = offsetof(sup_ctx, idle)};
static ctx_list lease_list = {.off = offsetof(sup_ctx, leased)};
static ctx_list mem_list = {.off = offsetof(sup_ctx, memq)};
static const sup_ctx_chan_watch *chan_watch;
static sup_ctx_change changes[SUP_CTX_CHANGES_MAX];
static size_t nchanges;
static bool changes_overflow;

static void dispatch(sup_ctx *c);
static void worker_broken(sup_ctx *c, const char *why);
static void drop_new_rd(sup_ctx *c);

/* Parks the worker's pipe read ends (sup_park.h): they are read only
 * after its death, and an idle context then holds three descriptors (its
 * channel, its pidfd, the park). Left as they are when parking fails. */
static void park_pipes(sup_ctx *c)
{
    if (c->out_rd[0] < 0 || c->out_rd[1] < 0)
        return;
    int park = sup_park(c->out_rd, 2);
    if (park < 0)
        return;
    for (int s = 0; s < 2; s++) {
        close(c->out_rd[s]);
        c->out_rd[s] = -1;
    }
    if (c->out_park >= 0)
        close(c->out_park);
    c->out_park = park;
}

/* Takes the parked read ends back (the worker died: what it left in its
 * pipes is read now). */
static void unpark_pipes(sup_ctx *c)
{
    if (c->out_park < 0)
        return;
    int fds[2];
    sup_unpark(c->out_park, fds, 2);
    c->out_park = -1;
    for (int s = 0; s < 2; s++) {
        if (c->out_rd[s] >= 0)
            close(c->out_rd[s]);
        c->out_rd[s] = fds[s];
    }
}

/* Closes the worker's pipe read ends, parked or not. */
static void close_pipes(sup_ctx *c)
{
    for (int s = 0; s < 2; s++) {
        if (c->out_rd[s] >= 0)
            close(c->out_rd[s]);
        c->out_rd[s] = -1;
    }
    if (c->out_park >= 0)
        close(c->out_park);
    c->out_park = -1;
}

/* The link of c that list l threads through. */
static sup_ctx_link *link_of(const ctx_list *l, sup_ctx *c)
{
    return (sup_ctx_link *)((char *)c + l->off);
}

/* Appends c to l (no-op when it is on it already). */
static void list_push(ctx_list *l, sup_ctx *c)
{
    sup_ctx_link *k = link_of(l, c);
    if (k->on)
        return;
    k->on = true;
    k->next = NULL;
    k->prev = l->tail;
    if (l->tail)
        link_of(l, l->tail)->next = c;
    else
        l->head = c;
    l->tail = c;
}

/* Puts c first on l (no-op when it is on it already). */
static void list_unshift(ctx_list *l, sup_ctx *c)
{
    sup_ctx_link *k = link_of(l, c);
    if (k->on)
        return;
    k->on = true;
    k->prev = NULL;
    k->next = l->head;
    if (l->head)
        link_of(l, l->head)->prev = c;
    else
        l->tail = c;
    l->head = c;
}

/* Takes c off l (no-op when it is not on it). */
static void list_remove(ctx_list *l, sup_ctx *c)
{
    sup_ctx_link *k = link_of(l, c);
    if (!k->on)
        return;
    if (k->prev)
        link_of(l, k->prev)->next = k->next;
    else
        l->head = k->next;
    if (k->next)
        link_of(l, k->next)->prev = k->prev;
    else
        l->tail = k->prev;
    k->on = false;
    k->prev = k->next = NULL;
}

/* The context was active now: --idle-ttl counts from here. */
static void touch(sup_ctx *c)
{
    c->last_active = sup_now();
    if (c->deleted || c->spare || strcmp(c->name, "default") == 0)
        return;
    list_remove(&idle_list, c);
    list_push(&idle_list, c);
}

/* c's PSS figure is out of date (a new worker, a run ended): first for
 * the tick to read (pss_tick). */
static void pss_want(sup_ctx *c)
{
    c->pss_at = 0;
    if (c->deleted || !(c->next || c->prev || contexts == c))
        return;
    list_remove(&mem_list, c);
    list_unshift(&mem_list, c);
}

/* Something timed (a run's deadline, a kill time, held messages, a CPU
 * budget) may need sup_ctx_tick's look. */
static void arm(sup_ctx *c)
{
    if (!c->deleted)
        list_push(&timed_list, c);
    sup_timer_moved();
}

static uint64_t name_hash(const char *name, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)name[i]) * 1099511628211ull;
    return h;
}

/* Rehashes into twice as many chains once they average more than one. */
static void hash_grow(void)
{
    size_t ncap = hcap ? hcap * 2 : 64;
    sup_ctx **n = mem_calloc(ncap, sizeof *n);
    for (size_t i = 0; i < hcap; i++) {
        for (sup_ctx *c = htab[i], *nx; c; c = nx) {
            nx = c->hnext;
            size_t b = name_hash(c->name, strlen(c->name)) & (ncap - 1);
            c->hnext = n[b];
            n[b] = c;
        }
    }
    free(htab);
    htab = n;
    hcap = ncap;
}

sup_ctx *sup_ctx_first(void)
{
    return contexts;
}

size_t sup_ctx_count(void)
{
    return ncontexts;
}

uint64_t sup_ctx_table_gen(void)
{
    return table_gen;
}

/* Records a change for sup_persist (put: c; del: c's name). */
static void note_change(sup_ctx *c, bool del)
{
    table_gen++;
    if (del)
        for (size_t i = 0; i < nchanges; i++)
            if (changes[i].put == c)
                changes[i].put = NULL; /* its entry goes with the del */
    if (nchanges == SUP_CTX_CHANGES_MAX) {
        changes_overflow = true;
        return;
    }
    changes[nchanges++] =
        del ? (sup_ctx_change){.del = mem_strdup(c->name)} : (sup_ctx_change){.put = c};
}

const sup_ctx_change *sup_ctx_changes(size_t *n, bool *overflow)
{
    *n = nchanges;
    *overflow = changes_overflow;
    return changes;
}

void sup_ctx_changes_clear(void)
{
    for (size_t i = 0; i < nchanges; i++)
        free(changes[i].del);
    nchanges = 0;
    changes_overflow = false;
}

sup_ctx *sup_ctx_find(const char *name, size_t len)
{
    if (!hcap)
        return NULL;
    for (sup_ctx *c = htab[name_hash(name, len) & (hcap - 1)]; c; c = c->hnext)
        if (strlen(c->name) == len && memcmp(c->name, name, len) == 0)
            return c;
    return NULL;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(sup_ctx *const *)a)->name, (*(sup_ctx *const *)b)->name);
}

sup_ctx **sup_ctx_sorted(void)
{
    sup_ctx **v = mem_alloc((ncontexts + 1) * sizeof *v);
    size_t n = 0;
    for (sup_ctx *c = contexts; c && n < ncontexts; c = c->next)
        v[n++] = c;
    qsort(v, n, sizeof *v, by_name);
    return v;
}

static void chan_wake(void *owner);

void sup_ctx_set_chan_watch(const sup_ctx_chan_watch *w)
{
    chan_watch = w;
    sup_chanbud_init(chan_wake);
}

/* c->fd is the context's new channel: the loop watches it. */
static void watch_chan(sup_ctx *c)
{
    if (chan_watch && c->fd >= 0)
        chan_watch->add(c);
}

/* Closes c's channel, the loop forgetting it first. */
static void close_chan(sup_ctx *c)
{
    if (c->fd < 0)
        return;
    if (chan_watch)
        chan_watch->del(c);
    close(c->fd);
    c->fd = -1;
    c->rd_wanted = c->rd_hup = false;
    list_remove(&rd_list, c);
    sup_chanbud_release(&c->chanbud);
}

const char *sup_ctx_state_name(const sup_ctx *c)
{
    if (c->pid == 0 && !c->spawning)
        return "dead";
    return c->running ? "busy" : "idle";
}

void sup_run_free(sup_run *r)
{
    if (!r)
        return;
    if (r->fork_name) { /* a ctx.fork: descriptors of a copy never adopted */
        int fds[] = {r->fork_fd, r->fork_out_rd[0], r->fork_out_rd[1]};
        for (size_t i = 0; i < 3; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        free(r->fork_name);
    }
    if (r->snap_mode) { /* a snapshot or restore: the file (sup_snap.c) */
        if (r->snap_drain)
            r->snap_drop(r->snap_drain);
        if (r->snap_fd >= 0)
            close(r->snap_fd);
        if (r->snap_dirfd >= 0)
            close(r->snap_dirfd);
        free(r->snap_id);
        free(r->snap_tmp);
    }
    free(r->code);
    proto_buf_free(&r->env);
    proto_buf_free(&r->script);
    free(r);
}

static void (*after_ok)(sup_ctx *c);

void sup_ctx_set_after_ok(void (*fn)(sup_ctx *c))
{
    after_ok = fn;
}

/* Messages of one context go out in order: once one is held back by a slow
 * client, the ones after it queue behind it. */
static void ctx_send(sup_ctx *c, const sup_peer *peer, proto_buf *body)
{
    if (peer->route_len == 0) /* an internal run (a spare's warm-up): no client */
        return;
    int rc = c->pending.head ? -1 : sup_send_take(peer, body);
    if (rc < 0) {
        sup_outq_push(&c->pending, peer, body);
        arm(c);
    } else if (rc == 1 && sup_cfg.interrupt_on_disconnect && c->running &&
               &c->running->peer == peer && !c->running->client_gone) {
        /* --on-disconnect interrupt: nobody will read this run's output */
        c->running->client_gone = true;
        sup_ctx_interrupt(c);
    }
}

/* ---- terminal replies of runs ---------------------------------------- */

typedef struct run_end {
    const char *status;
    double cpu_time;
    bool state_lost;
    const char *cause;
    const proto_val *artifacts; /* from the worker's done, checked */
    const proto_val *exit_code; /* from the worker's done (sys.exit), checked */
} run_end;

/* The run's `accepted`: its count, its incarnation, and the death (and
 * restored snapshot) of the incarnation before, shown once. */
static void send_accepted(sup_ctx *c, sup_run *r)
{
    bool show_death = c->death_unshown && c->last_death;
    bool show_restored = show_death && c->restored_from;
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "accepted", &r->peer, 3 + show_death + show_restored);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, c->name);
    proto_put_str(&b, "execution_count");
    proto_put_uint(&b, c->execution_count);
    proto_put_str(&b, "incarnation");
    proto_put_uint(&b, c->incarnation);
    if (show_death) {
        proto_put_str(&b, "previous_death");
        proto_put_str(&b, c->last_death);
        c->death_unshown = false;
    }
    if (show_restored) { /* state restored from an autosnapshot (sup_snap.c) */
        proto_put_str(&b, "restored_from");
        proto_put_str(&b, c->restored_from);
        free(c->restored_from);
        c->restored_from = NULL;
    }
    ctx_send(c, &r->peer, &b);
    proto_buf_free(&b);
}

/* Sends the running execute's `accepted` if it is due: at the worker's
 * `start`, or first thing when the run ends or is recovered without one. */
static void accept_now(sup_ctx *c)
{
    if (c->running && c->running->accept_due) {
        c->running->accept_due = false;
        send_accepted(c, c->running);
    }
}

static void send_done(sup_ctx *c, sup_run *r, const run_end *e, double duration)
{
    if (r->kind) { /* a ctx.fork that will not happen, a query not answered */
        r->kind->abort(r, e->status, e->cause);
        return;
    }
    proto_buf b;
    proto_buf_init(&b);
    uint64_t dropped = r->dropped[0] + r->dropped[1];
    sup_msg_begin(&b, "done", &r->peer,
                  7 + (e->cause ? 1 : 0) + (dropped ? 1 : 0) + (e->artifacts ? 1 : 0) +
                      (e->exit_code ? 1 : 0));
    proto_put_str(&b, "status");
    proto_put_str(&b, e->status);
    proto_put_str(&b, "execution_count");
    proto_put_uint(&b, c->execution_count);
    proto_put_str(&b, "incarnation");
    proto_put_uint(&b, c->incarnation);
    proto_put_str(&b, "duration");
    proto_put_double(&b, duration);
    proto_put_str(&b, "cpu_time");
    proto_put_double(&b, e->cpu_time);
    proto_put_str(&b, "truncated");
    proto_put_bool(&b, dropped != 0);
    proto_put_str(&b, "state_lost");
    proto_put_bool(&b, e->state_lost);
    if (e->cause) {
        proto_put_str(&b, "cause");
        proto_put_str(&b, e->cause);
    }
    if (dropped) {
        proto_put_str(&b, "dropped");
        proto_put_map(&b, 2);
        proto_put_str(&b, "stdout");
        proto_put_uint(&b, r->dropped[0]);
        proto_put_str(&b, "stderr");
        proto_put_uint(&b, r->dropped[1]);
    }
    if (e->artifacts) {
        proto_put_str(&b, "artifacts");
        proto_put_val(&b, e->artifacts);
    }
    if (e->exit_code) {
        proto_put_str(&b, "exit_code");
        proto_put_uint(&b, e->exit_code->as.u);
    }
    ctx_send(c, &r->peer, &b);
    proto_buf_free(&b);
    if (r->peer.route_len) /* not an internal run */
        sup_stats_run(c->name, e->status, duration, r->out_bytes);
}

static void abort_queue(sup_ctx *c, const char *cause)
{
    run_end e = {.status = "aborted", .cause = cause};
    sup_run *r;
    while ((r = c->queue) != NULL) {
        c->queue = r->next;
        send_done(c, r, &e, 0.0);
        sup_run_free(r);
    }
    c->queue_tail = NULL;
    c->queued = 0;
}

static void finish_run(sup_ctx *c, const run_end *e)
{
    sup_run *r = c->running;
    accept_now(c); /* ended before its start came (the worker died) */
    c->running = NULL;
    send_done(c, r, e, sup_now() - c->run_t0);
    if (c->timed_out && !c->kill_reason)
        c->kill_at = 0; /* it stopped within the grace period */
    c->started = c->interrupt_wanted = c->timed_out = c->cpu_exceeded = false;
    c->interrupt_sent = false;
    c->input_waiting = false;
    c->deadline = c->cpu_check = 0;
    c->cpu0 = -1;
    if (r->stop_on_error && strcmp(e->status, "ok") != 0)
        abort_queue(c, "an earlier run on this context failed (stop_on_error)");
    sup_run_free(r);
    touch(c);
    if (c->spare && c->pid > 0)      /* warmed up: its figure ready for the INFO of ctx.create */
        (void)ask_pss(c, sup_now()); /* no slot: INFO reads it (no figure yet) */
}

/* ---- the worker ------------------------------------------------------- */

/* Every signal to a worker: its process group while the pidfd shows it
 * alive, and the worker itself by its pidfd; never a bare pid number. */
static void signal_worker(sup_ctx *c, int sig)
{
    sup_proc_signal_group(c->pidfd, c->pid, sig);
}

/* A run id a worker cannot guess (a frame of another run must not pass
 * as this one's): random, never 0, drawn 64 at a time (one getrandom per 64 runs). */
static uint64_t new_run_id(void)
{
    static uint64_t pool[64];
    static size_t left;
    uint64_t v = 0;
    while (v == 0) {
        if (left == 0) {
            if (getrandom(pool, sizeof pool, 0) != (ssize_t)sizeof pool)
                fatal("getrandom: %s", strerror(errno));
            left = sizeof pool / sizeof pool[0];
        }
        v = pool[--left];
        pool[left] = 0; /* used once */
    }
    return v;
}

/* The new worker's pid is known: the supervisor takes its own handle on
 * it (a pidfd; the worker is its child, not yet reaped, so the pid names
 * it). -1 with err set after killing a worker it could not hold. */
static int take_pid(sup_ctx *c, pid_t pid, proto_error *err)
{
    if (c->pidfd >= 0)
        close(c->pidfd);
    c->pidfd = sup_proc_open(pid);
    if (c->pidfd < 0) {
        int e = errno;
        kill(pid, SIGKILL);
        proto_error_set(err, "spawn", "cannot hold the new worker by a pidfd: %s", strerror(e));
        return -1;
    }
    c->pid = pid;
    c->pss_read_at = 0; /* another process: measured at once */
    pss_want(c);
    sup_log("spawned ctx=%s pid=%d incarnation=%u", c->name, (int)pid, c->incarnation);
    return 0;
}

/* Starts the worker, in a new cgroup: asked of the zygote (answered later,
 * c->spawning meanwhile) or by exec. -1 with err set. */
static int start_worker(sup_ctx *c, bool use_zygote, proto_error *err)
{
    pid_t pid;
    int fd;
    sup_cgroup_new_name(c->cgroup);
    sup_spawn_req w = {.owner = c,
                       .name = c->name,
                       .cwd = c->cwd,
                       .cgroup = c->cgroup,
                       .env = c->env,
                       .nenv = c->nenv,
                       .site = c->site,
                       .policy = c->policy,
                       .ident = c->ident,
                       .zygote_only = c->spare};
    int rc = sup_spawn_worker(&w, use_zygote, &pid, &fd, c->out_rd, err);
    if (rc < 0) {
        sup_cgroup_release(c->cgroup);
        return -1;
    }
    c->fd = fd;
    watch_chan(c);
    park_pipes(c);
    if (rc == 1) {
        c->spawning = true;
        return 0;
    }
    if (take_pid(c, pid, err) < 0) {
        close_chan(c);
        close_pipes(c);
        sup_cgroup_release(c->cgroup);
        return -1;
    }
    return 0;
}

static int spawn(sup_ctx *c, proto_error *err)
{
    if (start_worker(c, true, err) < 0)
        return -1;
    c->incarnation++;
    c->ready = c->chan_eof = c->broken = false;
    c->execution_count = 0;
    c->in.len = c->out.len = 0;
    c->stream_recv[0] = c->stream_recv[1] = 0;
    free(c->kill_reason);
    c->kill_reason = NULL;
    c->kill_why = NULL;
    c->kill_at = 0;
    sup_stats.workers_spawned++;
    if (c->next || c->prev || contexts == c)
        note_change(c, false); /* a new incarnation (create notes its own) */
    touch(c);
    return 0;
}

static void reply_waiters_ok(sup_ctx *c)
{
    sup_waiter *w;
    while ((w = c->waiters) != NULL) {
        c->waiters = w->next;
        proto_buf b;
        proto_buf_init(&b);
        sup_msg_begin(&b, "ok", &w->peer, 1);
        proto_put_str(&b, "ctx");
        sup_ctx_put_info(&b, c);
        sup_deliver(&w->peer, &b);
        proto_buf_free(&b);
        free(w);
    }
}

static void reply_waiters_err(sup_ctx *c, const char *code, const char *why)
{
    sup_waiter *w;
    while ((w = c->waiters) != NULL) {
        c->waiters = w->next;
        sup_reply_err(&w->peer, code, "%s", why);
        free(w);
    }
}

/* Kills the worker and everything it started: its cgroup (which a
 * setsid or double-forked child cannot leave), and its process group on a
 * host without a cgroup v2 tree. */
static void kill_worker(sup_ctx *c)
{
    (void)sup_cgroup_kill(c->cgroup);
    if (c->pid > 0)
        signal_worker(c, SIGKILL);
}

/* Forgets the current worker after killing it and all it started: its
 * runs end with `status`/`cause`. The pid is reaped by the SIGCHLD path. */
static void discard_worker(sup_ctx *c, const char *status, const char *cause)
{
    if (c->spawning) { /* the zygote's answer, when it comes, is nobody's */
        sup_zygote_cancel(c);
        c->spawning = false;
    }
    kill_worker(c);
    sup_cgroup_release(c->cgroup);
    close_chan(c);
    close_pipes(c);
    if (c->pidfd >= 0)
        close(c->pidfd);
    c->pidfd = -1;
    if (c->outmem_fd >= 0)
        close(c->outmem_fd);
    c->outmem_fd = -1;
    sup_outmem_detach(&c->outmem);
    drop_new_rd(c);
    c->pid = 0;
    c->ready = false;
    if (c->running) {
        run_end e = {.status = status, .state_lost = true, .cause = cause};
        finish_run(c, &e);
    }
    abort_queue(c, cause);
    c->kill_at = 0;
    /* What is still held for slow clients belongs to runs that are over:
     * it must not keep the next worker from being read. */
    sup_outq_adopt(&c->pending);
}

/* How a worker ended, in words. Exit codes 125-127 come from the spawn
 * child before exec. */
static char *describe_exit(const sup_ctx *c, pid_t pid, int status)
{
    char buf[256];
    (void)pid;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && c->policy &&
        c->policy->memory_bytes && sup_cgroup_oom(c->cgroup)) {
        snprintf(buf, sizeof buf,
                 "oom: the context needed more than its memory_bytes (%llu bytes); the kernel's "
                 "OOM killer ended it",
                 (unsigned long long)c->policy->memory_bytes);
    } else if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        if ((!c->ready || c->binding) && code == 126)
            snprintf(buf, sizeof buf,
                     "worker could not start: cannot enter directory %s (it must exist, hold no "
                     "symbolic link, and be reachable by the context's uid)",
                     c->cwd);
        else if (!c->ready && code == 125)
            snprintf(buf, sizeof buf,
                     "worker could not start: cannot join its cgroup (memory_bytes, "
                     "max_processes)");
        else if (!c->ready && code == 127)
            snprintf(buf, sizeof buf, "worker could not start: cannot execute %s",
                     sup_cfg.worker_path);
        else
            snprintf(buf, sizeof buf, "exited with code %d", code);
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *abbrev = sigabbrev_np(sig);
        snprintf(buf, sizeof buf, "killed by signal %d (SIG%s)%s", sig, abbrev ? abbrev : "?",
                 sig == SIGKILL ? ", possibly out of memory or killed from outside" : "");
    } else {
        snprintf(buf, sizeof buf, "ended with wait status %d", status);
    }
    return mem_strdup(buf);
}

static void process_frames(sup_ctx *c);
static void send_stream(sup_ctx *c, int stream, const uint8_t *data, size_t n);

/* One read of the channel. recvmsg, so that the output memory a worker
 * sends with `ready` is kept (until on_ready maps it); any other descriptor
 * is closed. *ctl_seen: the read carried control data (where a read stops
 * short of what is queued). */
static ssize_t read_chan_once(sup_ctx *c, uint8_t *buf, size_t len, bool *ctl_seen)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {buf, len};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0)
        return n;
    *ctl_seen = mh.msg_controllen > 0 || (mh.msg_flags & MSG_CTRUNC);
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof fd, sizeof fd);
            if (!c->ready && c->outmem_fd < 0 && !c->outmem)
                c->outmem_fd = fd;
            else if (c->ready && c->nnew_rd < 2)
                c->new_rd[c->nnew_rd++] = fd;
            else
                close(fd);
        }
    }
    return n;
}

/* Reads everything the channel holds now. Returns false on EOF. */
static bool read_channel(sup_ctx *c)
{
    for (int rounds = 0; rounds < 64; rounds++) {
        if (c->in.len + READ_CHUNK > IN_MAX) {
            /* Cannot happen for a worker that keeps to the frame size
             * cap (process_frames leaves less than one frame). */
            worker_broken(c, "more unprocessed bytes than one frame of the largest size");
            return true;
        }
        proto_buf_reserve(&c->in, READ_CHUNK);
        bool ctl = false;
        ssize_t n = read_chan_once(c, c->in.data + c->in.len, READ_CHUNK, &ctl);
        if (n > 0) {
            /* A short read with no descriptors is proof of an empty
             * socket: a stream read takes all that is queued, up to its
             * length, stopping early only where descriptors ride
             * (SCM_RIGHTS); bytes that come after it signal the loop again
             * (edge-triggered). Otherwise only EAGAIN is. */
            c->in.len += (size_t)n;
            process_frames(c);
            if (c->chanbud.granted) {
                c->chan_stall_at = sup_now() + CHAN_STALL_S;
                arm(c);
            }
            if (c->fd < 0 || c->chanbud.waiting || sup_ctx_held_back(c))
                return true;
            if ((size_t)n < READ_CHUNK && !ctl && !c->rd_hup) {
                c->rd_wanted = false;
                return true;
            }
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        c->rd_wanted = false;
        if (n == 0)
            return false;
        return errno == EAGAIN;
    }
    return true;
}

/* Kills a worker that broke the channel protocol; it is reported dead. */
static void worker_broken(sup_ctx *c, const char *why)
{
    if (c->kill_reason)
        return;
    char buf[300];
    snprintf(buf, sizeof buf, "worker broke the channel protocol: %s", why);
    c->kill_reason = mem_strdup(buf);
    sup_log("ctx=%s pid=%d: %s", c->name, (int)c->pid, buf);
    kill_worker(c);
    c->broken = true;
}

/* sup_outmem_recover's emit: output of the running run. */
static void relay_recovered(void *arg, int stream, const uint8_t *p, size_t n)
{
    send_stream(arg, stream, p, n);
}

/* Output the dead worker had not sent: first what its output memory held
 * (Python-level buffers, a chunk read from a pipe), then raw output it
 * wrote to fd 1/2 but never read back. It is output of the run, so it goes
 * out before the run's `done`. */
static void relay_leftover_output(sup_ctx *c)
{
    accept_now(c);
    for (int s = 0; s < 2 && c->running && !c->running->query_op; s++)
        sup_outmem_recover(c->outmem, s, c->stream_recv[s], relay_recovered, c);
    /* At most a pipe's worth (1 MiB): a process that outlived the worker
     * (it left the process group) may still be writing. */
    uint8_t chunk[PROTO_STREAM_CHUNK];
    unpark_pipes(c);
    for (int s = 0; s < 2 && c->running; s++) {
        ssize_t n;
        size_t left = (size_t)1 << 20;
        while (left > 0 && c->out_rd[s] >= 0 &&
               (n = read(c->out_rd[s], chunk, left < sizeof chunk ? left : sizeof chunk)) > 0) {
            send_stream(c, s, chunk, (size_t)n);
            left -= (size_t)n;
        }
    }
}

static void worker_ended(sup_ctx *c, char *cause);

void sup_ctx_on_exit(pid_t pid, int status)
{
    if (sup_reaper_on_exit(pid, status) || sup_zygote_on_exit(pid, status) ||
        sup_pkgs_on_exit(pid, status))
        return;
    sup_ctx *c = contexts;
    while (c && c->pid != pid)
        c = c->next;
    if (!c)
        c = spare_of(pid);
    if (!c) {
        /* A discarded worker, already accounted for; or a forked one whose
         * `forked` frame is still unread: remembered for that. */
        sup_zygote_note_exit(pid, status);
        return;
    }
    /* Children it left behind were killed just before the reap
     * (sup_ctx_before_reap), while the group id was still the worker's;
     * its cgroup holds the ones that left the group (setsid). */
    (void)sup_cgroup_kill(c->cgroup);
    c->pid = 0;
    if (!c->broken && c->fd >= 0) {
        /* Output written before the end is still in the socket. */
        read_channel(c);
        process_frames(c);
        /* an execute's `start` may still have been held back by the worker
         * (wrk_output.c) unless it had just been bound: it ran */
        if (c->started || (c->running && !c->running->kind && !c->binding))
            relay_leftover_output(c);
    }
    char *cause = c->kill_reason ? mem_strdup(c->kill_reason) : describe_exit(c, pid, status);
    worker_ended(c, cause);
}

/* The worker is gone (dead, or never started): its runs end, the reason
 * (taken) is its context's last death, shown by the next incarnation; a
 * context that never got ready is deleted, its creation answered err. */
static void worker_ended(sup_ctx *c, char *cause)
{
    if (c->spare) {
        sup_stats_event("spare-died cause=\"%s\"", cause);
        free(cause);
        spare_drop(c);
        return;
    }
    const char *status_name = c->timed_out && c->kill_reason ? "timeout" : "died";
    char *queued_cause = mem_alloc(strlen(cause) + 32);
    sprintf(queued_cause, "worker died: %s", cause);
    bool failed_create = c->creating;
    if (!c->ready)
        reply_waiters_err(c, "spawn", cause);
    if (c->running) {
        run_end e = {.status = status_name, .state_lost = true, .cause = cause};
        finish_run(c, &e);
    }
    discard_worker(c, "died", queued_cause);
    free(queued_cause);
    free(c->last_death);
    c->last_death = cause;
    c->death_unshown = true;
    c->broken = false;
    sup_stats.worker_deaths++;
    sup_stats_event("worker-died ctx=%s cause=\"%s\"", c->name, c->last_death);
    if (failed_create)
        sup_ctx_delete(c);
}

void sup_ctx_spawned(sup_ctx *c, pid_t pid)
{
    c->spawning = false;
    int status;
    if (sup_zygote_take_exit(pid, &status)) { /* it died (and was reaped) first */
        c->pid = pid;
        sup_ctx_on_exit(pid, status);
        return;
    }
    proto_error err;
    if (take_pid(c, pid, &err) < 0)
        worker_ended(c, mem_strdup(err.msg));
}

void sup_ctx_spawn_failed(sup_ctx *c, const char *why, bool held)
{
    (void)held; /* the exec path below makes new descriptors anyway */
    c->spawning = false;
    close_chan(c);
    close_pipes(c);
    sup_cgroup_release(c->cgroup);
    proto_error err;
    char cause[400];
    if (c->spare) { /* made by the zygote only: dropped, made again later */
        snprintf(cause, sizeof cause, "the zygote could not start it: %s", why);
    } else if (c->policy && c->policy->tier == SUP_TIER_SANDBOX) {
        snprintf(cause, sizeof cause,
                 "worker could not start: the sandbox tier needs the zygote: %s", why);
    } else if (start_worker(c, false, &err) == 0) {
        return; /* started by exec instead */
    } else {
        snprintf(cause, sizeof cause, "worker could not start: %s", err.msg);
    }
    worker_ended(c, mem_strdup(cause));
}

/* ---- frames from the worker (table dispatch) --------------------------- */

/* What a frame needs of the worker's state to be accepted (PROTOCOL.md
 * section 9, "What the supervisor trusts"). */
typedef enum frame_rule {
    RULE_ANY,    /* at any time (a count of output written between runs) */
    RULE_READY,  /* once per worker */
    RULE_START,  /* a run or query was sent and has not started; its run_id */
    RULE_EVENT,  /* the running run or query has started */
    RULE_DONE,   /* the running run (not a query) has started; its run_id */
    RULE_ANSWER, /* the running query has started; its run_id */
    RULE_FORK,   /* a fork frame is out and unanswered; its run_id */
} frame_rule;

typedef struct frame_kind {
    const char *type;
    const proto_field *fields;
    size_t nfields;
    frame_rule rule;
    void (*handle)(sup_ctx *c, const proto_val *msg); /* NULL: c->running->kind */
} frame_kind;

static void on_ready(sup_ctx *c, const proto_val *msg)
{
    (void)msg;
    if (c->ready) {
        worker_broken(c, "a second ready");
        return;
    }
    c->ready = true;
    c->creating = false;
    if (c->outmem_fd >= 0) {
        c->outmem = sup_outmem_attach(c->outmem_fd);
        c->outmem_fd = -1;
        if (!c->outmem) {
            worker_broken(c, "its output memory is not a sealed memfd of the expected size");
            return;
        }
    }
    reply_waiters_ok(c);
    dispatch(c);
}

/* Interrupts the running run (its worker's process group). */
static void send_sigint(sup_ctx *c)
{
    signal_worker(c, SIGINT);
    c->interrupt_sent = true;
}

/* Interrupts the running run: at once once the worker said it started
 * (its SIGINT is unblocked), else when its `start` comes. */
static void interrupt_run(sup_ctx *c)
{
    if (c->started)
        send_sigint(c);
    else
        c->interrupt_wanted = true;
}

/* Whether the worker waits for its client: messages are held for it, or
 * its client (or the daemon) holds as much as it may; after an interrupt
 * it is read on (bounded) so the interrupt lands. */
bool sup_ctx_held_back(const sup_ctx *c)
{
    if (c->running && c->interrupt_sent && c->pending.bytes < INTERRUPT_HOLD_MAX &&
        sup_held_total() < sup_cfg.max_held)
        return false;
    /* Held for this run's client, or its client (or everyone) holds too
     * much already: the worker waits. */
    return c->pending.head || (c->running && sup_held_over(&c->running->peer));
}

/* Closes descriptors received from the worker and not taken. */
static void drop_new_rd(sup_ctx *c)
{
    for (int i = 0; i < c->nnew_rd; i++)
        close(c->new_rd[i]);
    c->nnew_rd = 0;
}

/* A `start` that came with two descriptors: the read ends of the worker's
 * new stdout and stderr pipes, kept (in place of the old ones) to recover
 * raw output if the worker dies. Anything else is closed. */
static void take_new_pipes(sup_ctx *c)
{
    struct stat st[2];
    if (c->nnew_rd == 2 && fstat(c->new_rd[0], &st[0]) == 0 && S_ISFIFO(st[0].st_mode) &&
        fstat(c->new_rd[1], &st[1]) == 0 && S_ISFIFO(st[1].st_mode)) {
        close_pipes(c);
        for (int s = 0; s < 2; s++) {
            c->out_rd[s] = c->new_rd[s];
            fcntl(c->out_rd[s], F_SETFL, fcntl(c->out_rd[s], F_GETFL) | O_NONBLOCK);
        }
        c->nnew_rd = 0;
        park_pipes(c);
    }
    drop_new_rd(c);
}

/* `between {bytes}`: output written while no run was active, counted. */
static void on_between(sup_ctx *c, const proto_val *msg)
{
    (void)c;
    sup_stats.between_runs_bytes += proto_map_get(msg, "bytes")->as.u;
}

static void on_start(sup_ctx *c, const proto_val *msg)
{
    (void)msg;
    take_new_pipes(c);
    accept_now(c);
    c->started = true;
    c->binding = false;
    if (c->interrupt_wanted) {
        c->interrupt_wanted = false;
        send_sigint(c);
    }
}

/* Relays an event to the run's client: envelope plus the listed fields,
 * re-encoded from the checked frame (a worker's bytes are never forwarded
 * unchecked). */
static void relay(sup_ctx *c, const char *type, const proto_val *msg, const char *const *keys,
                  uint32_t nkeys, bool with_count)
{
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, type, &c->running->peer, nkeys + (with_count ? 1 : 0));
    if (with_count) {
        proto_put_str(&b, "execution_count");
        proto_put_uint(&b, c->execution_count);
    }
    for (uint32_t i = 0; i < nkeys; i++) {
        proto_put_str(&b, keys[i]);
        proto_put_val(&b, proto_map_get(msg, keys[i]));
    }
    ctx_send(c, &c->running->peer, &b);
    proto_buf_free(&b);
}

/* Bytes of n that fit under cap when used are already sent (cap 0: no cap). */
static size_t fit(size_t n, uint64_t used, uint64_t cap)
{
    if (!cap)
        return n;
    uint64_t room = used < cap ? cap - used : 0;
    return n < room ? n : (size_t)room;
}

/* Sends output of the running run to its client, applying --max-output and
 * the policy's stdout_max_bytes / stderr_max_bytes: past a cap the bytes are
 * dropped and counted, and the client is told once, on stderr, so
 * truncation is never silent. */
static void send_stream(sup_ctx *c, int stream, const uint8_t *data, size_t n)
{
    static const char *const names[] = {"stdout", "stderr"};
    static const char *const fields[] = {"stdout_max_bytes", "stderr_max_bytes"};
    sup_run *r = c->running;
    uint64_t stream_cap = c->policy ? c->policy->stream_max[stream] : 0;
    size_t keep = fit(n, r->out_bytes, sup_cfg.max_output);
    size_t keep_stream = fit(n, r->stream_bytes[stream], stream_cap);
    bool by_policy = keep_stream < keep;
    if (by_policy)
        keep = keep_stream;
    (stream ? &sup_stats.stderr_bytes : &sup_stats.stdout_bytes)[0] += keep;
    if (keep) {
        proto_buf b;
        proto_buf_init(&b);
        proto_buf_reserve(&b, keep + 128); /* one allocation, no regrowth */
        sup_msg_begin(&b, "stream", &r->peer, 2);
        proto_put_str(&b, "name");
        proto_put_str(&b, names[stream]);
        proto_put_str(&b, "data");
        proto_put_bin(&b, data, keep);
        ctx_send(c, &r->peer, &b);
        proto_buf_free(&b);
        r->out_bytes += keep;
        r->stream_bytes[stream] += keep;
    }
    if (keep == n)
        return;
    bool first = r->dropped[stream] == 0;
    r->dropped[stream] += n - keep;
    sup_stats.truncated_bytes += n - keep;
    if (first) {
        char note[200];
        int len = by_policy
                      ? snprintf(note, sizeof note,
                                 "\n[ctxd: %s truncated: this run reached the policy's %s (%llu "
                                 "bytes); the rest is dropped and counted in done.dropped]\n",
                                 names[stream], fields[stream], (unsigned long long)stream_cap)
                      : snprintf(note, sizeof note,
                                 "\n[ctxd: output truncated: this run reached max_output (%llu "
                                 "bytes); the rest is dropped and counted in done.dropped]\n",
                                 (unsigned long long)sup_cfg.max_output);
        proto_buf b;
        proto_buf_init(&b);
        sup_msg_begin(&b, "stream", &r->peer, 2);
        proto_put_str(&b, "name");
        proto_put_str(&b, "stderr");
        proto_put_str(&b, "data");
        proto_put_bin(&b, note, (size_t)len);
        ctx_send(c, &r->peer, &b);
        proto_buf_free(&b);
    }
}

/* Counts a stream frame's bytes (the worker's sequence numbers, for
 * recovery after its death), also when the frame is then dropped. */
static bool count_stream(sup_ctx *c, const proto_val *msg)
{
    const proto_val *name = proto_map_get(msg, "name");
    int stream = proto_str_eq(name, "stdout") ? 0 : proto_str_eq(name, "stderr") ? 1 : -1;
    if (stream < 0)
        return false;
    c->stream_recv[stream] += proto_map_get(msg, "data")->n;
    return true;
}

static void on_stream(sup_ctx *c, const proto_val *msg)
{
    const proto_val *name = proto_map_get(msg, "name");
    const proto_val *data = proto_map_get(msg, "data");
    int stream = proto_str_eq(name, "stdout") ? 0 : proto_str_eq(name, "stderr") ? 1 : -1;
    if (stream < 0) {
        worker_broken(c, "stream name is not stdout or stderr");
        return;
    }
    send_stream(c, stream, (const uint8_t *)data->as.s, data->n);
}

static void on_result(sup_ctx *c, const proto_val *msg)
{
    static const char *const keys[] = {"data"};
    relay(c, "result", msg, keys, 1, true);
}

/* display / clear_output: relayed like stream (same outbox, same
 * backpressure); display_id only when the worker sent one. */
static void on_display(sup_ctx *c, const proto_val *msg)
{
    const char *keys[4] = {"data", "metadata"};
    uint32_t n = 2;
    if (proto_map_get(msg, "display_id"))
        keys[n++] = "display_id";
    keys[n++] = "update";
    if (!proto_map_get(msg, "metadata") || !proto_map_get(msg, "update")) {
        worker_broken(c, "display without metadata or update");
        return;
    }
    relay(c, "display", msg, keys, n, false);
}

static void on_clear_output(sup_ctx *c, const proto_val *msg)
{
    static const char *const keys[] = {"wait"};
    relay(c, "clear_output", msg, keys, 1, false);
}

/* input() in a run that allows stdin: the client answers with input.reply
 * (sup_ctx_input_reply); the worker's number `n` goes back with it, so a
 * reply that crosses an interrupted input() is recognised as stale. */
static void on_input_request(sup_ctx *c, const proto_val *msg)
{
    if (!c->running->allow_stdin) {
        worker_broken(c, "input_request in a run without allow_stdin");
        return;
    }
    c->input_waiting = true;
    c->input_seq = proto_map_get(msg, "n")->as.u;
    static const char *const keys[] = {"prompt", "password"};
    relay(c, "input.request", msg, keys, 2, false);
}

bool sup_ctx_input_reply(sup_ctx *c, const char *value, size_t len, bool eof)
{
    if (!c->running || !c->input_waiting || c->fd < 0)
        return false;
    c->input_waiting = false;
    size_t start = proto_frame_begin(&c->out);
    proto_put_map(&c->out, eof ? 4 : 3);
    proto_put_str(&c->out, "t");
    proto_put_str(&c->out, "input_reply");
    proto_put_str(&c->out, "value");
    proto_put_strn(&c->out, value, len);
    if (eof) { /* the client declined: input() raises EOFError */
        proto_put_str(&c->out, "eof");
        proto_put_bool(&c->out, true);
    }
    proto_put_str(&c->out, "n");
    proto_put_uint(&c->out, c->input_seq);
    proto_frame_end(&c->out, start);
    sup_ctx_on_writable(c);
    return true;
}

/* `%pip install` in a run (wrk_ipy.c): the worker asks for what
 * pip.install does for its own context and waits for pip_reply {n, value}:
 * value "" once the packages are importable, else the message. The wait
 * is found again by name, incarnation and package directory: a reply for
 * a worker that is gone is dropped, one that crosses an interrupt is
 * dropped by the worker. */
typedef struct pip_wait {
    char name[PROTO_MAX_NAME + 1];
    unsigned incarnation;
    uint64_t n;
    sup_site *site;
} pip_wait;

static void pip_reply(sup_ctx *c, uint64_t n, const char *value)
{
    size_t start = proto_frame_begin(&c->out);
    proto_put_map(&c->out, 3);
    proto_put_str(&c->out, "t");
    proto_put_str(&c->out, "pip_reply");
    proto_put_str(&c->out, "n");
    proto_put_uint(&c->out, n);
    proto_put_str(&c->out, "value");
    proto_put_str(&c->out, value);
    proto_frame_end(&c->out, start);
    sup_ctx_on_writable(c);
}

static void pip_installed(void *arg, const sup_pkgs_result *res)
{
    pip_wait *w = arg;
    sup_ctx *c = sup_ctx_find(w->name, strlen(w->name));
    if (c && c->site == w->site && c->incarnation == w->incarnation && c->fd >= 0) {
        proto_error err;
        if (res->error)
            pip_reply(c, w->n, res->error);
        else if (sup_pkgs_link(c->site, res->reqs, res->n, &err) < 0)
            pip_reply(c, w->n, err.msg);
        else
            pip_reply(c, w->n, "");
    }
    sup_pkgs_site_unref(w->site);
    free(w);
}

static void on_pip_request(sup_ctx *c, const proto_val *msg)
{
    uint64_t n = proto_map_get(msg, "n")->as.u;
    char **reqs;
    size_t nreqs;
    proto_error err;
    if (sup_pkgs_parse(proto_map_get(msg, "packages"), "packages", &reqs, &nreqs, &err) < 0) {
        pip_reply(c, n, err.msg);
        return;
    }
    if (!sup_pkgs_enabled() || !c->site) {
        pip_reply(c, n,
                  "this daemon offers no packages: start it with --wheelhouse DIR or "
                  "--package-index URL");
        sup_pkgs_free_reqs(reqs, nreqs);
        return;
    }
    pip_wait *w = mem_calloc(1, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s", c->name);
    w->incarnation = c->incarnation;
    w->n = n;
    w->site = sup_pkgs_site_ref(c->site);
    sup_pkgs_fetch(reqs, nreqs, pip_installed, w);
    sup_pkgs_free_reqs(reqs, nreqs);
}

static void on_error(sup_ctx *c, const proto_val *msg)
{
    const proto_val *tb = proto_map_get(msg, "traceback");
    for (uint32_t i = 0; i < tb->n; i++) {
        const proto_val *line = &tb->as.items[i];
        if (line->kind != PROTO_STR || line->n > TRACEBACK_LINE_MAX ||
            !proto_utf8_valid(line->as.s, line->n, true)) {
            worker_broken(c, "a traceback line is not a str of at most 8 MiB");
            return;
        }
    }
    static const char *const keys[] = {"ename", "evalue", "traceback"};
    relay(c, "error", msg, keys, 3, false);
}

/* done.artifacts: [{path: str, size: uint, type: str}] */
static bool artifacts_valid(const proto_val *a)
{
    static const proto_field fields[] = {
        {"path", PF_STR, true, 4096},
        {"size", PF_UINT, true, 0},
        {"type", PF_STR, true, 256},
    };
    for (uint32_t i = 0; i < a->n; i++) {
        proto_error err;
        const proto_val *item = &a->as.items[i];
        if (item->kind != PROTO_MAP || item->n != 3 ||
            proto_check(item, fields, sizeof fields / sizeof fields[0], &err) < 0)
            return false;
    }
    return true;
}

static void on_done(sup_ctx *c, const proto_val *msg)
{
    const proto_val *status = proto_map_get(msg, "status");
    const proto_val *cpu = proto_map_get(msg, "cpu_time");
    static const char *const allowed[] = {"ok", "error", "interrupted"};
    const char *st = NULL;
    for (size_t i = 0; i < 3 && !st; i++)
        if (proto_str_eq(status, allowed[i]))
            st = allowed[i];
    if (!st) {
        worker_broken(c, "unknown run status");
        return;
    }
    if (c->timed_out && strcmp(st, "interrupted") == 0)
        st = "timeout";
    const proto_val *arts = proto_map_get(msg, "artifacts");
    if (arts && !artifacts_valid(arts)) {
        worker_broken(c, "malformed artifacts");
        return;
    }
    const proto_val *code = proto_map_get(msg, "exit_code");
    if (code && (code->kind != PROTO_UINT || code->as.u > 255)) {
        worker_broken(c, "malformed exit_code");
        return;
    }
    run_end e = {.status = st, .artifacts = arts, .exit_code = code};
    char cause[160];
    if (c->timed_out && c->cpu_exceeded && strcmp(st, "timeout") == 0) {
        snprintf(cause, sizeof cause,
                 "cpu_seconds: the context used more than its %g s of CPU in this run",
                 c->policy->cpu_seconds);
        e.cause = cause;
    }
    if (cpu)
        e.cpu_time = cpu->kind == PROTO_FLOAT  ? cpu->as.f
                     : cpu->kind == PROTO_UINT ? (double)cpu->as.u
                                               : 0.0;
    bool was_ok = strcmp(st, "ok") == 0;
    pss_want(c); /* the run may have changed it */
    finish_run(c, &e);
    if (was_ok && after_ok)
        after_ok(c); /* an autosnapshot, queued behind what waits */
    dispatch(c);
}

static const proto_field stream_fields[] = {
    {"name", PF_STR, true, 16},
    {"data", PF_BIN, true, PROTO_STREAM_CHUNK},
};
static const proto_field result_fields[] = {{"data", PF_STRMAP, true, 64}};
static const proto_field display_fields[] = {
    {"data", PF_STRMAP, true, 64},
    {"metadata", PF_MAP, true, 64},
    {"display_id", PF_STR, false, 256},
    {"update", PF_BOOL, true, 0},
};
static const proto_field clear_output_fields[] = {{"wait", PF_BOOL, true, 0}};
static const proto_field answer_fields[] = {
    {"run_id", PF_UINT, true, 0},
    {"data", PF_MAP, true, 64},
};
static const proto_field between_fields[] = {{"bytes", PF_UINT, true, 0}};
static const proto_field input_request_fields[] = {
    {"prompt", PF_STR, true, 1u << 16},
    {"password", PF_BOOL, true, 0},
    {"n", PF_UINT, true, 0},
};
static const proto_field pip_request_fields[] = {
    {"n", PF_UINT, true, 0},
    {"packages", PF_ARRAY, true, SUP_PKGS_MAX},
};
static const proto_field error_fields[] = {
    {"ename", PF_STR, true, 4096},
    {"evalue", PF_STR, true, 1u << 20},
    {"traceback", PF_ARRAY, true, 10000},
};
static const proto_field done_fields[] = {
    {"run_id", PF_UINT, true, 0},     {"status", PF_STR, true, 32},
    {"cpu_time", PF_NUM, false, 0},   {"artifacts", PF_ARRAY, false, 1000},
    {"exit_code", PF_UINT, false, 0},
};
static const proto_field ready_fields[] = {{"pid", PF_UINT, false, 0}};
static const proto_field start_fields[] = {{"run_id", PF_UINT, true, 0}};
static const proto_field forked_fields[] = {
    {"run_id", PF_UINT, true, 0},
    {"pid", PF_UINT, true, 0},
};
static const proto_field fork_failed_fields[] = {
    {"run_id", PF_UINT, true, 0},
    {"message", PF_STR, true, 4096},
};

#define FIELDS(a) a, sizeof a / sizeof a[0]
static const frame_kind frame_kinds[] = {
    {"ready", FIELDS(ready_fields), RULE_READY, on_ready},
    {"start", FIELDS(start_fields), RULE_START, on_start},
    {"between", FIELDS(between_fields), RULE_ANY, on_between},
    {"stream", FIELDS(stream_fields), RULE_EVENT, on_stream},
    {"result", FIELDS(result_fields), RULE_EVENT, on_result},
    {"display", FIELDS(display_fields), RULE_EVENT, on_display},
    {"clear_output", FIELDS(clear_output_fields), RULE_EVENT, on_clear_output},
    {"input_request", FIELDS(input_request_fields), RULE_EVENT, on_input_request},
    {"pip_request", FIELDS(pip_request_fields), RULE_EVENT, on_pip_request},
    {"error", FIELDS(error_fields), RULE_EVENT, on_error},
    {"done", FIELDS(done_fields), RULE_DONE, on_done},
    {"answer", FIELDS(answer_fields), RULE_ANSWER, NULL},
    {"forked", FIELDS(forked_fields), RULE_FORK, NULL},
    {"fork_failed", FIELDS(fork_failed_fields), RULE_FORK, NULL},
};

/* Checks a well-formed frame against the worker's state; NULL when it is
 * acceptable, else the rule it breaks (in why). A worker's frames can be
 * forged by its user code, so every one must fit what the supervisor
 * itself sent. */
static const char *frame_breaks_rule(const sup_ctx *c, const frame_kind *k, const proto_val *msg,
                                     char *why, size_t n)
{
    const sup_run *r = c->running;
    bool is_fork = r && r->fork_name;
    bool is_query = r && r->query_op;
    switch (k->rule) {
    case RULE_ANY:
        return NULL;
    case RULE_READY:
        return NULL; /* on_ready refuses a second one */
    case RULE_START:
        if (!r || is_fork)
            snprintf(why, n, "`start` while no run or query is under way");
        else if (c->started)
            snprintf(why, n, "a second `start` for one run");
        break;
    case RULE_EVENT:
        if (!r || is_fork)
            snprintf(why, n, "`%s` while no run is under way", k->type);
        else if (!c->started)
            snprintf(why, n, "`%s` before `start`", k->type);
        return n && why[0] ? why : NULL;
    case RULE_DONE:
        if (!r || is_fork || is_query)
            snprintf(why, n, "`done` while no run is under way");
        else if (!c->started)
            snprintf(why, n, "`done` before `start`");
        break;
    case RULE_ANSWER:
        if (!is_query)
            snprintf(why, n, "`answer` while no query is under way");
        else if (!c->started)
            snprintf(why, n, "`answer` before `start`");
        break;
    case RULE_FORK:
        if (!is_fork || r->fork_fd < 0)
            snprintf(why, n, "`%s` while no fork is under way", k->type);
        break;
    }
    if (why[0])
        return why;
    /* The frame carries an id: it must be the one sent for this run. */
    if (proto_map_get(msg, "run_id")->as.u != r->run_id)
        snprintf(why, n, "`%s` carries a run id that is not the running one's", k->type);
    return why[0] ? why : NULL;
}

static void handle_frame(sup_ctx *c, const uint8_t *body, size_t len)
{
    proto_doc doc;
    proto_error err;
    if (proto_decode(&doc, body, len, &err) < 0) {
        worker_broken(c, err.msg);
        return;
    }
    const proto_val *msg = &doc.nodes[0];
    const proto_val *t = proto_map_get(msg, "t");
    const frame_kind *k = NULL;
    for (size_t i = 0; i < sizeof frame_kinds / sizeof frame_kinds[0] && !k; i++)
        if (proto_str_eq(t, frame_kinds[i].type))
            k = &frame_kinds[i];
    char why[160] = "";
    if (!k)
        worker_broken(c, "unknown frame type");
    else if (proto_check(msg, k->fields, k->nfields, &err) < 0)
        worker_broken(c, err.msg);
    else if (frame_breaks_rule(c, k, msg, why, sizeof why))
        worker_broken(c, why);
    else if (k->handle == on_stream && !count_stream(c, msg))
        worker_broken(c, "stream name is not stdout or stderr");
    else if (k->rule == RULE_EVENT && c->running->query_op)
        ;                /* a query has no output or result: whatever it made is dropped */
    else if (!k->handle) /* answer, forked, fork_failed: the run's kind's */
        c->running->kind->on_frame(c, k->type, msg);
    else
        k->handle(c, msg);
    proto_doc_free(&doc);
}

/* A context's channel is woken: the bytes of the frame it waited for are
 * its now (sup_chanbud). The loop must turn: no new edge comes from a
 * channel whose worker is blocked in its write. */
static void chan_wake(void *owner)
{
    sup_ctx *c = owner;
    if (c->fd < 0 || c->deleted)
        return;
    c->rd_wanted = true;
    list_push(&rd_list, c);
    sup_timer_moved();
}

/* Reserves the bytes of the frame c's buffer has begun, when it is larger
 * than one read (sup_chanbud: c then waits for room, unread), or gives
 * back what the last one had; a buffer grown for a large frame is given
 * back to the allocator once the frame is processed. */
static void chan_budget(sup_ctx *c)
{
    if (c->fd >= 0 && !c->broken && c->in.len >= 4) {
        const uint8_t *d = c->in.data;
        size_t need =
            (((size_t)d[0] << 24) | ((size_t)d[1] << 16) | ((size_t)d[2] << 8) | d[3]) + 4;
        if (need > READ_CHUNK) {
            c->chanbud.owner = c;
            sup_chanbud_want(&c->chanbud, need);
            return;
        }
    }
    sup_chanbud_release(&c->chanbud);
    if (c->in.cap > 2 * (size_t)READ_CHUNK && c->in.len <= READ_CHUNK) {
        c->in.data = mem_realloc(c->in.data, READ_CHUNK);
        c->in.cap = READ_CHUNK;
    }
}

static void process_frames(sup_ctx *c)
{
    size_t off = 0;
    while (c->fd >= 0 && !c->broken) {
        const uint8_t *body;
        size_t body_len, used;
        int r = proto_frame_next(c->in.data + off, c->in.len - off, PROTO_MAX_FRAME, &body,
                                 &body_len, &used);
        if (r < 0) {
            worker_broken(c, "frame longer than the maximum");
            return;
        }
        if (r == 0)
            break;
        off += used;
        handle_frame(c, body, body_len);
    }
    if (c->broken)
        c->in.len = 0;
    else
        proto_buf_consume(&c->in, off);
    chan_budget(c);
}

void sup_ctx_on_readable(sup_ctx *c)
{
    bool open = read_channel(c);
    if (c->fd < 0)
        return;
    process_frames(c);
    if (!open && c->fd >= 0 && !c->chan_eof) {
        /* The worker closed its end; it should be exiting. Give it a moment
         * before killing it, so a crash reports its own cause. */
        c->chan_eof = true;
        c->kill_at = sup_now() + 1.0;
        c->kill_why = "worker closed its channel";
        arm(c);
    }
}

void sup_ctx_chan_event(sup_ctx *c, bool in, bool hup, bool out)
{
    if (out && c->out.len)
        sup_ctx_on_writable(c);
    if (in && c->fd >= 0) {
        c->rd_wanted = true;
        c->rd_hup = c->rd_hup || hup;
        list_push(&rd_list, c);
    }
}

bool sup_ctx_read_ready(void)
{
    bool held = false;
    sup_ctx *nx;
    for (sup_ctx *c = rd_list.head; c; c = nx) {
        nx = c->rd.next;
        if (c->deleted || c->fd < 0 || !c->rd_wanted || c->chan_eof || c->broken ||
            c->chanbud.waiting) { /* a waiter is pushed back when its turn comes */
            list_remove(&rd_list, c);
            continue;
        }
        /* a worker the zygote is still making is read once its pid is known */
        if (c->spawning)
            continue;
        if (sup_ctx_held_back(c)) {
            held = true;
            continue;
        }
        sup_ctx_on_readable(c);
        /* What it did may have taken the next one off the list (deleted):
         * the rest is looked at next turn, soon. */
        if (c->rd.on)
            nx = c->rd.next;
        else if (nx && !nx->rd.on) {
            held = true;
            nx = NULL;
        }
        /* Only a context still wanting reads stays (its budget spent). */
        if (!c->rd_wanted || c->fd < 0 || c->deleted || c->chanbud.waiting)
            list_remove(&rd_list, c);
        else
            held = true;
    }
    return held;
}

void sup_ctx_on_writable(sup_ctx *c)
{
    while (c->out.len) {
        ssize_t n = write(c->fd, c->out.data, c->out.len);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR)
                c->out.len = 0; /* EPIPE: the death path reports it */
            return;
        }
        proto_buf_consume(&c->out, (size_t)n);
    }
}

/* ---- runs ------------------------------------------------------------- */

/* Starts the next queued run when the worker is ready and free. */
static void dispatch(sup_ctx *c)
{
    if (c->running || !c->ready || c->chan_eof || c->kill_reason || !c->queue)
        return;
    sup_run *r = c->queue;
    c->queue = r->next;
    if (!c->queue)
        c->queue_tail = NULL;
    c->queued--;
    r->next = NULL;
    c->running = r;
    r->run_id = new_run_id();
    touch(c);
    if (r->kind) { /* ctx.fork, complete, inspect, is_complete: its turn */
        arm(c);    /* its deadline, set by the kind */
        r->kind->start(c);
        return;
    }
    if (!r->silent)
        c->execution_count++;
    size_t start = proto_frame_begin(&c->out);
    proto_put_map(&c->out, 9 + r->script_n);
    proto_put_str(&c->out, "t");
    proto_put_str(&c->out, "run");
    proto_put_str(&c->out, "run_id");
    proto_put_uint(&c->out, r->run_id);
    proto_put_str(&c->out, "code");
    proto_put_strn(&c->out, r->code, r->code_len);
    proto_put_str(&c->out, "execution_count");
    proto_put_uint(&c->out, c->execution_count);
    proto_put_str(&c->out, "silent");
    proto_put_bool(&c->out, r->silent);
    proto_put_str(&c->out, "allow_stdin");
    proto_put_bool(&c->out, r->allow_stdin);
    proto_put_str(&c->out, "artifacts");
    proto_put_bool(&c->out, r->artifacts);
    proto_put_str(&c->out, "env");
    if (r->env.len)
        proto_buf_append(&c->out, r->env.data, r->env.len);
    else
        proto_put_map(&c->out, 0);
    proto_buf_append(&c->out, r->script.data, r->script.len); /* argv, file */
    proto_put_str(&c->out, "syntax"); /* last: forged-frame tests rely on it */
    proto_put_str(&c->out, r->syntax ? r->syntax : "");
    proto_frame_end(&c->out, start);
    free(r->code); /* the frame holds it now */
    r->code = NULL;
    sup_ctx_on_writable(c);
    c->started = c->interrupt_wanted = c->timed_out = c->interrupt_sent = false;
    c->run_t0 = sup_now();
    c->deadline = r->timeout > 0 ? c->run_t0 + r->timeout : 0;
    c->cpu0 = c->policy && c->policy->cpu_seconds > 0 ? sup_cgroup_cpu(c->cgroup) : -1;
    c->cpu_check = 0;
    /* The tick has this run's deadline to watch (no turn before it) or a
     * CPU budget to check from now on; nothing timed otherwise. */
    if (c->cpu0 >= 0) {
        arm(c);
    } else if (c->deadline > 0) {
        list_push(&timed_list, c);
        sup_timer_moved_to(c->deadline);
    }
    r->accept_due = true;
}

void sup_ctx_submit(sup_ctx *c, sup_run *r)
{
    if (c->pid == 0 && !c->spawning) {
        proto_error err;
        if (spawn(c, &err) < 0) {
            c->running = r;
            c->run_t0 = sup_now();
            run_end e = {.status = "aborted", .cause = err.msg};
            finish_run(c, &e);
            return;
        }
    }
    r->next = NULL;
    if (c->queue_tail)
        c->queue_tail->next = r;
    else
        c->queue = r;
    c->queue_tail = r;
    c->queued++;
    dispatch(c);
}

bool sup_ctx_interrupt(sup_ctx *c)
{
    if (!c->running || c->running->fork_name)
        return false;
    interrupt_run(c);
    return true;
}

void sup_ctx_add_waiter(sup_ctx *c, const sup_peer *peer)
{
    sup_waiter *w = mem_calloc(1, sizeof *w);
    w->peer = *peer;
    sup_waiter **tail = &c->waiters;
    while (*tail)
        tail = &(*tail)->next;
    *tail = w;
    if (c->ready)
        reply_waiters_ok(c);
}

/* Enters c into the table: the list (ctx.list sorts it), the name hash,
 * the idle order. */
static void link_ctx(sup_ctx *c)
{
    c->prev = NULL;
    c->next = contexts;
    if (contexts)
        contexts->prev = c;
    contexts = c;
    ncontexts++;
    note_change(c, false);
    if (ncontexts > hcap)
        hash_grow();
    size_t b = name_hash(c->name, strlen(c->name)) & (hcap - 1);
    c->hnext = htab[b];
    htab[b] = c;
    touch(c);
    list_unshift(&mem_list, c); /* never measured: the tick's first */
}

/* ---- spare workers (--spare-workers) ----------------------------------- */

/* A new context of the default tier (the unsafe tier, whose policy is all
 * the supervisor's; no environment, no package directory, no uid of its
 * own: its worker is the zygote's fork with the daemon's environment,
 * nothing of the context in it but its name and directory) takes a worker
 * forked ahead of time instead of waiting ~25 ms for a fork
 * and its copy-on-write faults. A spare is a hidden context: outside the
 * table, the name hash and the idle order (never listed, counted, saved or
 * swept), with a directory of "/" until it is taken; it runs nothing
 * before. Taken, it gets a `bind` frame (name, directory) ahead of any run,
 * which the worker obeys before reading on (it exits 126 if it cannot
 * enter the directory). The tick makes new ones, only while the zygote
 * is up (a spare made by exec would lack the preloads); one that dies
 * unused holds refilling back for a second, so a worker that cannot start
 * is not forked in a loop. */
static sup_ctx *spares[SUP_SPARE_MAX];
static size_t nspares;
static double spare_after; /* monotonic: no new spare before; < 0 never */
#define SPARE_PAUSE 0.05   /* seconds after a spare is taken before the next is made */

static sup_ctx *spare_of(pid_t pid)
{
    for (size_t i = 0; i < nspares; i++)
        if (pid > 0 && spares[i]->pid == pid)
            return spares[i];
    return NULL;
}

static void spare_remove(sup_ctx *c)
{
    for (size_t i = 0; i < nspares; i++)
        if (spares[i] == c) {
            spares[i] = spares[--nspares];
            return;
        }
    fatal("spare_remove: not a spare");
}

/* A spare's worker died or the daemon stops: kill what is left and free
 * it at the next tick. */
static void spare_drop(sup_ctx *c)
{
    spare_remove(c);
    discard_worker(c, "aborted", "spare worker dropped");
    list_remove(&rd_list, c);
    list_remove(&timed_list, c);
    list_remove(&mem_list, c);
    c->deleted = true;
    c->next = graveyard;
    graveyard = c;
    if (spare_after >= 0)
        spare_after = sup_now() + 1.0;
}

/* Queues a spare's warm-up: a silent cell for no client (ctx_send
 * drops what it would send). A worker's first run costs ~10 ms more than
 * its next ones (the output thread starts, the run machinery's pages are
 * first written: copy-on-write faults); a spare pays it before it is
 * taken. The cell compiles an assignment of a call and runs nothing: the
 * compiler's pools and caches are then written too (a taken spare's first
 * `x = 1` copied 15 pages after a `pass`, 1 after this). Its queue holds
 * the context's first run behind it if taken early. */
static void spare_warm(sup_ctx *c)
{
    sup_run *r = mem_calloc(1, sizeof *r);
    static const char warm[] = "if 0:\n    x = f(1, a.b[2])\n";
    r->code = mem_strdup(warm);
    r->code_len = sizeof warm - 1;
    r->silent = true;
    r->timeout = 60; /* a warm-up that hangs is killed, the spare dropped */
    r->fork_fd = r->fork_out_rd[0] = r->fork_out_rd[1] = -1;
    r->snap_fd = r->snap_dirfd = -1;
    sup_ctx_submit(c, r);
}

/* Whether spare_fill would ask the zygote for a spare now. */
static bool spare_due(double now)
{
    return nspares < sup_cfg.spare_workers && spare_after >= 0 && now >= spare_after &&
           sup_zygote_ready() && ncontexts + nspares < sup_cfg.max_contexts;
}

/* Asks the zygote for spares until --spare-workers are alive or coming. */
static void spare_fill(double now)
{
    while (spare_due(now)) {
        sup_ctx *c = mem_calloc(1, sizeof *c);
        c->name = mem_strdup("(spare)");
        c->cwd = mem_strdup("/");
        c->policy = sup_policy_parse(NULL, NULL, NULL); /* the default tier's */
        c->spare = true;
        c->created = sup_unix_now();
        c->fd = c->out_rd[0] = c->out_rd[1] = c->out_park = c->pidfd = c->outmem_fd = -1;
        c->creating = true;
        proto_error err;
        if (spawn(c, &err) < 0) {
            sup_stats_event("spare-failed error=\"%s\"", err.msg);
            sup_policy_free(c->policy);
            free(c->name);
            free(c->cwd);
            free(c);
            spare_after = now + 1.0;
            return;
        }
        spares[nspares++] = c;
        spare_warm(c);
    }
}

/* The spare to take: a ready one, else the one asked for first (it is
 * further along than a new fork would be); NULL when there is none. */
static sup_ctx *spare_take(void)
{
    sup_ctx *best = NULL;
    for (size_t i = 0; i < nspares; i++) {
        sup_ctx *c = spares[i];
        if (c->broken || c->chan_eof || c->kill_at || (c->pid == 0 && !c->spawning))
            continue;
        if (!best || (c->ready && !best->ready) ||
            (c->ready == best->ready && c->created < best->created))
            best = c;
    }
    if (best)
        spare_remove(best);
    return best;
}

/* Taken spares whose `bind` frame waits for the next tick (spare_bind). */
static sup_ctx *binds[SUP_SPARE_MAX];
static size_t nbinds;

/* Writes the bind frames spare_bind left: before the graveyard is freed,
 * so a context deleted meanwhile is still there to be skipped. */
static void binds_flush(void)
{
    for (size_t i = 0; i < nbinds; i++) {
        sup_ctx *c = binds[i];
        if (!c->deleted && c->fd >= 0 && c->out.len)
            sup_ctx_on_writable(c);
    }
    nbinds = 0;
}

/* Makes the taken spare c the context `name`: its `bind` frame goes ahead
 * of any run; it enters the table as ctx.create's would. */
static void spare_bind(sup_ctx *c, const char *name, const char *cwd, sup_ident *ident,
                       sup_policy *policy)
{
    free(c->name);
    free(c->cwd);
    sup_policy_free(c->policy); /* the default's; the request's gives the same worker */
    c->policy = policy;
    c->name = mem_strdup(name);
    c->cwd = mem_strdup(cwd);
    c->ident = ident;
    c->spare = false;
    c->binding = true;
    c->created = sup_unix_now();
    c->creating = !c->ready;
    sup_stats.contexts_created++;
    size_t start = proto_frame_begin(&c->out);
    proto_put_map(&c->out, 3);
    proto_put_str(&c->out, "t");
    proto_put_str(&c->out, "bind");
    proto_put_str(&c->out, "name");
    proto_put_str(&c->out, c->name);
    proto_put_str(&c->out, "cwd");
    proto_put_str(&c->out, c->cwd);
    proto_frame_end(&c->out, start);
    /* Written at the next tick, after ctx.create's reply has left: the
     * worker it wakes would otherwise take the CPU from that reply. A
     * frame queued before then (the first run) carries it along. */
    if (nbinds < SUP_SPARE_MAX)
        binds[nbinds++] = c;
    else if (c->fd >= 0)
        sup_ctx_on_writable(c);
    bool measured = c->pss_at > 0;
    if (measured) /* an idle spare's figure stays true: not read again for the reply */
        c->pss_at = sup_now();
    link_ctx(c);
    if (measured) { /* as a spare, after its warm-up: not again on the way to the first run */
        list_remove(&mem_list, c);
        list_push(&mem_list, c);
    }
    sup_log("spare taken ctx=%s pid=%d", c->name, (int)c->pid);
    /* Its successor is forked once creations pause: not on the CPUs this
     * context's first run needs. */
    double later = sup_now() + SPARE_PAUSE;
    if (spare_after >= 0 && spare_after < later)
        spare_after = later;
    sup_timer_moved();
}

/* ---- the table -------------------------------------------------------- */

sup_ctx *sup_ctx_create(const char *name, const char *cwd, char **env, size_t nenv, sup_site *site,
                        sup_ident *ident, proto_error *err)
{
    if (ncontexts >= sup_cfg.max_contexts) {
        proto_error_set(err, "limit", "the daemon already holds %zu contexts (max_contexts)",
                        ncontexts);
        return NULL;
    }
    sup_ctx *c = NULL;
    if (nspares > 0 && nenv == 0 && !site && !sup_pkgs_enabled() && !(ident && ident->own_uid) &&
        sup_policy_spare_ok(sup_policy_pending()))
        c = spare_take();
    if (c) {
        spare_bind(c, name, cwd, ident, sup_policy_take_pending());
        return c;
    }
    c = mem_calloc(1, sizeof *c);
    c->name = mem_strdup(name);
    c->cwd = mem_strdup(cwd);
    c->env = env;
    c->nenv = nenv;
    c->policy = sup_policy_take_pending();
    c->site = site ? site : sup_pkgs_site_new();
    c->ident = ident;
    c->created = sup_unix_now();
    sup_stats.contexts_created++;
    c->fd = c->out_rd[0] = c->out_rd[1] = c->out_park = c->pidfd = c->outmem_fd = -1;
    c->creating = true;
    if (spawn(c, err) < 0) {
        c->env = NULL; /* still the caller's on failure */
        c->nenv = 0;
        sup_policy_free(c->policy);
        if (!site) /* the caller's stays the caller's */
            sup_pkgs_site_unref(c->site);
        c->ident = NULL; /* so does the identity */
        free(c->name);
        free(c->cwd);
        free(c);
        return NULL;
    }
    link_ctx(c);
    return c;
}

sup_ctx *sup_ctx_adopt(const sup_ctx *src, const char *name, pid_t pid, int pidfd, int fd,
                       const int out_rd[2])
{
    sup_ctx *c = mem_calloc(1, sizeof *c);
    c->name = mem_strdup(name);
    c->cwd = mem_strdup(src->cwd);
    c->env = mem_calloc(src->nenv + 1, sizeof *c->env);
    for (size_t i = 0; i < src->nenv; i++)
        c->env[i] = mem_strdup(src->env[i]);
    c->nenv = src->nenv;
    c->policy = sup_policy_dup(src->policy);
    /* The copy's interpreter has the source's package directory on its
     * sys.path: they share it (and what is installed into it later). */
    c->site = sup_pkgs_site_ref(src->site);
    /* ... and its identity (uid, directory): it is the same interpreter. */
    c->ident = sup_ident_ref(src->ident);
    /* Its own cgroup: killed with it, not with its source. */
    sup_cgroup_new_name(c->cgroup);
    unsigned long long mem = 0, tasks = 0;
    if (c->policy && (c->policy->tier == SUP_TIER_LOCAL || c->policy->tier == SUP_TIER_SANDBOX)) {
        mem = c->policy->memory_bytes;
        tasks = c->policy->max_processes ? c->policy->max_processes + SUP_OWN_TASKS : 0;
    }
    if (sup_cgroup_move(pid, c->cgroup, mem, tasks) < 0)
        sup_log("fork ctx=%s: cannot move pid %d into its cgroup: %s", name, (int)pid,
                strerror(errno));
    c->created = sup_unix_now();
    sup_stats.contexts_created++;
    sup_stats.workers_spawned++;
    c->pid = pid;
    c->pidfd = pidfd;
    c->fd = fd;
    watch_chan(c);
    pss_want(c);
    c->out_rd[0] = out_rd[0];
    c->out_rd[1] = out_rd[1];
    c->out_park = -1;
    park_pipes(c);
    c->outmem_fd = -1;
    c->incarnation = 1;
    c->execution_count = src->execution_count;
    c->creating = true;
    link_ctx(c);
    return c;
}

void sup_ctx_dispatch(sup_ctx *c)
{
    dispatch(c);
}

/* For sup_fork.c: a `forked` pid must not be a worker already known. */
bool sup_ctx_is_worker(pid_t pid)
{
    for (sup_ctx *c = contexts; c; c = c->next)
        if (pid > 0 && c->pid == pid)
            return true;
    return spare_of(pid) != NULL;
}

/* Called by the loop for an exited child not yet reaped: what a worker's
 * code left in its process group dies with it, while the group id cannot
 * have been reused. */
void sup_ctx_before_reap(pid_t pid)
{
    if (sup_linger_before_reap(pid))
        return;
    for (sup_ctx *c = contexts; c; c = c->next)
        if (pid > 0 && c->pid == pid)
            signal_worker(c, SIGKILL);
    sup_ctx *s = spare_of(pid);
    if (s)
        signal_worker(s, SIGKILL);
}

void sup_ctx_broken(sup_ctx *c, const char *why)
{
    worker_broken(c, why);
}

/* The context ends on purpose: an idle worker gets to run its atexit
 * handlers (sup_linger.c) instead of being killed by discard_worker. */
static void linger_worker(sup_ctx *c)
{
    if (!c->ready || c->running || c->spawning || c->out.len != 0 || c->fd < 0)
        return;
    /* The loop forgets the channel first: the lingerer owns it from here,
     * and an event on it must not find c, which is freed at the next tick. */
    if (chan_watch)
        chan_watch->del(c);
    if (!sup_linger_start(c->name, &c->fd, &c->pid, &c->pidfd, c->cgroup))
        watch_chan(c); /* still c's: discard_worker closes it */
    c->rd_wanted = c->fd >= 0 && c->rd_wanted;
    if (c->fd < 0) {
        list_remove(&rd_list, c);
        sup_chanbud_release(&c->chanbud);
    }
}

void sup_ctx_delete(sup_ctx *c)
{
    linger_worker(c);
    discard_worker(c, "aborted", "context deleted");
    /* Its private directory is gone when the reply says so (unless a
     * ctx.fork copy still works in it). */
    sup_ident_unref(c->ident);
    c->ident = NULL;
    reply_waiters_err(c, "unknown_context", "the context was deleted before it was ready");
    if (c->prev)
        c->prev->next = c->next;
    else
        contexts = c->next;
    if (c->next)
        c->next->prev = c->prev;
    sup_ctx **h = &htab[name_hash(c->name, strlen(c->name)) & (hcap - 1)];
    while (*h != c)
        h = &(*h)->hnext;
    *h = c->hnext;
    ncontexts--;
    note_change(c, true);
    list_remove(&rd_list, c);
    list_remove(&timed_list, c);
    list_remove(&idle_list, c);
    list_remove(&lease_list, c);
    list_remove(&mem_list, c);
    c->deleted = true;
    c->next = graveyard;
    graveyard = c;
}

int sup_ctx_restart(sup_ctx *c, proto_error *err)
{
    linger_worker(c);
    discard_worker(c, "aborted", "context restarted");
    c->death_unshown = false;
    return spawn(c, err);
}

static sup_ctx *pss_asker[SUP_PSS_SLOTS]; /* whose read each sup_pss slot holds */

static void free_ctx(sup_ctx *c)
{
    if (c->pss_slot) /* its figure, when it comes, is for no one */
        pss_asker[c->pss_slot - 1] = NULL;
    sup_outq_adopt(&c->pending); /* terminal replies still go out */
    sup_cgroup_release(c->cgroup);
    sup_ident_unref(c->ident); /* the last one removes the private directory */
    free(c->name);
    free(c->cwd);
    for (size_t i = 0; i < c->nenv; i++)
        free(c->env[i]);
    free(c->env);
    sup_policy_free(c->policy);
    sup_pkgs_site_unref(c->site);
    free(c->last_death);
    free(c->restored_from);
    free(c->kill_reason);
    if (c->outmem_fd >= 0)
        close(c->outmem_fd);
    sup_outmem_detach(&c->outmem);
    sup_chanbud_release(&c->chanbud); /* never left in the line once freed */
    proto_buf_free(&c->in);
    proto_buf_free(&c->out);
    if (c->pidfd >= 0)
        close(c->pidfd);
    free(c);
}

/* Contexts the --idle-ttl sweep deletes per loop turn: 5,000 expiring at
 * once go over ~80 turns, 1 ms apart, with requests served between. */
#define REAP_PER_TURN 64
/* --idle-ttl: the context (not `default`) longest without activity is
 * deleted once that is longer than the TTL, if nothing is running, queued,
 * waiting or held for it (else its activity is now). Returns when the
 * oldest would expire, 0 = never. Looks at the expired ones only. */
static double reap_idle(double now)
{
    if (sup_cfg.idle_ttl <= 0)
        return 0;
    for (int budget = 0; idle_list.head && budget < REAP_PER_TURN; budget++) {
        sup_ctx *c = idle_list.head;
        double expiry = c->last_active + sup_cfg.idle_ttl;
        if (now < expiry)
            return expiry;
        if (c->running || c->queue || c->waiters || c->pending.head) {
            touch(c);
            continue;
        }
        sup_stats_event("reaped ctx=%s idle_ttl=%g", c->name, sup_cfg.idle_ttl);
        sup_ctx_delete(c);
    }
    return idle_list.head ? now + 1e-3 : 0;
}

/* ctx.create `lease`: a leased context whose owner stopped renewing is
 * deleted, busy or not. Looks at the leased contexts only (a kernel's own
 * context each). Returns when the next lease would end, 0 = none. */
static double reap_leases(double now)
{
    double next = 0;
    sup_ctx *c_next;
    for (sup_ctx *c = lease_list.head; c; c = c_next) {
        c_next = c->leased.next;
        if (now >= c->lease_until) {
            sup_stats_event("reaped ctx=%s lease=%g expired", c->name, c->lease);
            sup_ctx_delete(c);
        } else if (next == 0 || c->lease_until < next) {
            next = c->lease_until;
        }
    }
    return next;
}

void sup_ctx_set_lease(sup_ctx *c, double seconds)
{
    c->lease = seconds;
    c->lease_until = sup_now() + seconds;
    sup_timer_moved();
    if (seconds > 0 && !c->deleted)
        list_push(&lease_list, c);
    else
        list_remove(&lease_list, c);
}

/* policy.cpu_seconds counted for the whole context (its cgroup, children
 * included), so neither ignoring the in-process SIGXCPU nor starting
 * processes escapes it: past the budget the run is interrupted like a
 * timeout, and killed after the grace period. True when it fired; else
 * c->cpu_check is when to look again. */
#define CPU_SLACK 0.25 /* seconds */

static bool check_cpu_budget(sup_ctx *c, double now)
{
    if (c->cpu_check > now)
        return false;
    double used = sup_cgroup_cpu(c->cgroup);
    c->cpu_check = now + 0.1;
    /* A little past the budget: at the budget itself the worker's own
     * timer raises TimeoutError in the run, which is the gentler end. */
    if (used < 0 || used - c->cpu0 <= c->policy->cpu_seconds + CPU_SLACK)
        return false;
    c->cpu_check = 0;
    c->timed_out = c->cpu_exceeded = true;
    c->deadline = 0;
    interrupt_run(c);
    c->kill_at = now + sup_cfg.kill_grace;
    c->kill_why = "killed after exceeding cpu_seconds: did not stop within the grace period";
    return true;
}

/* A PSS figure older than this is read again by INFO (within its budget).
 * The tick reads only figures never read for this worker or older than its
 * last run (an idle worker's barely moves), at most PSS_TICK_READS per
 * PSS_TICK_GAP (~2% of a core at 0.3 ms a read, while there are such),
 * and a worker at most once per PSS_MIN_GAP: a context running short runs
 * back to back would otherwise pay a read per run (0.3 ms of the
 * supervisor's CPU against its own ~0.15 ms for a run). A daemon whose
 * contexts are idle does no background reading at all. */
#define PSS_MAX_AGE 30.0
#define PSS_TICK_READS 4
#define PSS_TICK_SCAN 32
#define PSS_TICK_GAP 0.05
#define PSS_MIN_GAP 1.0
static double info_deadline; /* monotonic; 0: INFO reads every stale PSS */
static double pss_tick_next;

/* Resident memory of a worker (bytes; 0 when unknown) from statm, which
 * the kernel answers from counters: cheap enough for every INFO. */
static uint64_t worker_rss(pid_t pid)
{
    if (pid <= 0)
        return 0;
    char path[64], buf[128];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    unsigned long long size, resident;
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
        return 0;
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* c's figure is being read (now, or by the sup_pss thread): it is not
 * wanted again until it is out of date; the least recently measured
 * stay first. */
static void pss_reading(sup_ctx *c, double now)
{
    c->pss_at = c->pss_read_at = now;
    if (c->pid > 0)
        sup_stats.pss_reads++;
    if (!c->deleted && !c->spare) {
        list_remove(&mem_list, c);
        list_push(&mem_list, c);
    }
}

/* Proportional memory of a worker (bytes; 0 when unknown), read now: PSS
 * is what an idle context really costs once pages are shared, but the
 * kernel walks every mapping for it (~0.3 ms, more on a loaded host), so
 * the figure is cached in c. Only for a client's INFO that has no figure
 * or an out-of-date one; the loop's own reads go to ask_pss. */
static void read_pss(sup_ctx *c, double now)
{
    pss_reading(c, now);
    c->pss = 0; /* also a dead worker's, and one whose read failed */
    if (c->pid > 0)
        (void)sup_pss_read(c->pid, &c->pss);
}

/* Has c's PSS read on the sup_pss thread: false when no slot is free (ask
 * again later). A dead worker's figure, 0, needs no read. */
static bool ask_pss(sup_ctx *c, double now)
{
    if (c->pid <= 0) {
        read_pss(c, now); /* 0, without a read */
        return true;
    }
    if (c->pss_slot) /* a read of an earlier worker of c is still out */
        return false;
    int slot = sup_pss_ask(c->pid);
    if (slot < 0)
        return false;
    pss_asker[slot] = c;
    c->pss_slot = slot + 1;
    pss_reading(c, now);
    return true;
}

/* A figure from the sup_pss thread: c's, if c still runs that worker. */
static void pss_arrived(int slot, pid_t pid, uint64_t pss, bool ok)
{
    sup_ctx *c = pss_asker[slot];
    pss_asker[slot] = NULL;
    if (!c)
        return;
    c->pss_slot = 0;
    if (c->pid == pid)
        c->pss = ok ? pss : 0;
}

void sup_ctx_pss_collect(void)
{
    sup_pss_collect(pss_arrived);
}

static bool pss_stale(const sup_ctx *c, double now)
{
    return c->pid > 0 && (c->pss_at == 0 || now - c->pss_at > PSS_MAX_AGE);
}

void sup_ctx_info_budget(double seconds)
{
    info_deadline = seconds > 0 ? sup_now() + seconds : 0;
}

/* Whether the tick has PSS figures to read now. */
static bool pss_due(double now)
{
    return now >= pss_tick_next && mem_list.head && mem_list.head->pss_at == 0;
}

/* Reads the PSS of new workers and of those whose run ended (mem_list's
 * head: they are put there) at a bounded cost per tick; returns when to
 * come back, 0 when none waits. */
static double pss_tick(double now)
{
    if (now < pss_tick_next)
        return pss_tick_next;
    /* The wanted figures are the head of mem_list; a read moves its
     * context to the tail, one read less than PSS_MIN_GAP ago stays. */
    int reads = 0, scanned = 0;
    sup_ctx *next;
    for (sup_ctx *c = mem_list.head;
         c && c->pss_at == 0 && reads < PSS_TICK_READS && scanned < PSS_TICK_SCAN;
         c = next, scanned++) {
        next = c->memq.next;
        if (c->pid > 0 && c->pss_read_at != 0 && now - c->pss_read_at < PSS_MIN_GAP)
            continue;
        if (!ask_pss(c, now)) /* every slot taken: the next tick */
            break;
        reads++; /* a dead one's: 0, and off the head */
    }
    sup_ctx *h = mem_list.head;
    pss_tick_next = h && h->pss_at == 0 ? now + PSS_TICK_GAP : 0;
    return pss_tick_next;
}

/* ---- background work, in the clients' pauses ----------------------------- */

/* Making spares (a zygote fork, then a warm-up run) and reading PSS figures
 * (~0.3-0.7 ms of a CPU each) take a CPU from the request in hand when they
 * start beside it: a read asked in the turn that brought a paced
 * ctx.create had it answered in 1.15 ms instead of 0.4 (2 cores, the other
 * busy; the sup_pss thread it woke ran first). So such work starts after a
 * turn's client messages are served and only BG_QUIET after the last one;
 * under requests without such a pause it waits at most BG_DEFER_MAX, then
 * goes ahead (spares and figures are never starved). */
#define BG_QUIET 0.02
#define BG_DEFER_MAX 1.0
static double bg_held_since; /* monotonic: work due but held since; 0 none */

/* Whether work that is due may start now; else *again is when to look. */
static bool bg_may_start(double now, double client_at, double *again)
{
    if (now - client_at >= BG_QUIET) {
        bg_held_since = 0;
        return true;
    }
    if (bg_held_since == 0)
        bg_held_since = now;
    double until = bg_held_since + BG_DEFER_MAX;
    if (now >= until) {
        bg_held_since = 0;
        return true;
    }
    double quiet = client_at + BG_QUIET;
    *again = quiet < until ? quiet : until;
    return false;
}

double sup_ctx_background_tick(double now, double client_at)
{
    bool spares = spare_due(now), reads = pss_due(now);
    if (!spares && !reads) {
        bg_held_since = 0;
        return pss_tick_next > now ? pss_tick_next : 0;
    }
    double again = 0;
    if (!bg_may_start(now, client_at, &again))
        return again;
    if (spares)
        spare_fill(now);
    return pss_tick(now);
}

/* Fires the timers: a run past its deadline is interrupted, a worker past
 * its kill time is killed. Also retries held-back client messages. */
double sup_ctx_tick(double now)
{
    binds_flush();
    while (graveyard) {
        sup_ctx *c = graveyard;
        graveyard = c->next;
        free_ctx(c);
    }
    double next = reap_idle(now), lease_next = reap_leases(now);
    if (lease_next && (!next || lease_next < next))
        next = lease_next;
    /* a spare to make once the pause after a take is over: the loop wakes
     * for it, not at whatever comes next (a request it would slow) */
    if (nspares < sup_cfg.spare_workers && spare_after > now && (!next || spare_after < next))
        next = spare_after;
    sup_ctx *c_next;
    /* Only contexts with something timed: the idle ones cost nothing. */
    for (sup_ctx *c = timed_list.head; c; c = c_next) {
        c_next = c->timed.next;
        if (c->pending.head) {
            /* A reader only momentarily behind (libzmq's queue per client
             * is short, SUP_ZMQ_SNDHWM) is retried after 1 ms (the poll's
             * resolution), one that stays full every 2 ms. */
            if (sup_outq_flush(&c->pending)) {
                c->flush_retry = 0;
                touch(c);
            } else {
                c->flush_retry = c->flush_retry == 0 ? 1e-3 : 2e-3;
                double t = now + c->flush_retry;
                next = next == 0 || t < next ? t : next;
            }
        }
        if (c->running && c->deadline && now >= c->deadline && !c->timed_out) {
            c->timed_out = true;
            c->deadline = 0;
            interrupt_run(c);
            c->kill_at = now + sup_cfg.kill_grace;
            c->kill_why = "killed after timeout: did not stop within the grace period";
        }
        if (c->kill_at && now >= c->kill_at && c->pid > 0) {
            c->kill_at = 0;
            if (!c->kill_reason) {
                char buf[160];
                if (c->timed_out && !c->cpu_exceeded)
                    snprintf(buf, sizeof buf,
                             "killed after timeout: did not stop within the %g s grace period",
                             sup_cfg.kill_grace);
                else
                    snprintf(buf, sizeof buf, "%s", c->kill_why);
                c->kill_reason = mem_strdup(buf);
            }
            kill_worker(c);
        }
        /* From dispatch on, not from the worker's `start`: a cell can keep
         * its start from ever going out (wrk_output.c holds it back). */
        if (c->running && !c->running->query_op && !c->running->fork_name && c->cpu0 >= 0 &&
            !c->timed_out)
            (void)check_cpu_budget(c, now);
        if (!c->chanbud.granted)
            c->chan_stall_at = 0;
        else if (c->chan_stall_at && now >= c->chan_stall_at) {
            c->chan_stall_at = now + CHAN_STALL_S;
            if (sup_chanbud_waiting() > 0)
                worker_broken(c, "stalled in the middle of a frame while other contexts waited "
                                 "for the channel budget (--max-chan-held)");
        }
        double t[] = {c->deadline, c->kill_at, c->cpu_check, c->chan_stall_at};
        for (size_t i = 0; i < 4; i++)
            if (t[i] > 0 && (next == 0 || t[i] < next))
                next = t[i];
        if (!c->running && !c->kill_at && !c->pending.head && !c->chan_stall_at)
            list_remove(&timed_list, c); /* nothing timed left */
    }
    double l = sup_linger_tick(now); /* kills workers whose atexit took too long */
    if (l > 0 && (next == 0 || l < next))
        next = l;
    double z = sup_zygote_tick(now); /* restarts a dead zygote */
    if (z > 0 && (next == 0 || z < next))
        next = z;
    double id = sup_trash_tick(now); /* empties deleted contexts' directories */
    if (id > 0 && (next == 0 || id < next))
        next = id;
    double g = sup_cgroup_tick(now); /* removes emptied cgroups */
    if (g > 0 && (next == 0 || g < next))
        next = g;
    double p = sup_pkgs_tick(now); /* kills pip runs past their time */
    if (p > 0 && (next == 0 || p < next))
        next = p;
    return next;
}

void sup_ctx_shutdown_all(void)
{
    sup_pkgs_shutdown();
    binds_flush(); /* before any context is freed */
    while (nspares)
        spare_drop(spares[nspares - 1]);
    spare_after = -1; /* none made after this */
    for (sup_ctx *c = contexts; c; c = c->next) {
        linger_worker(c);
        discard_worker(c, "shutdown", "the daemon is shutting down");
        sup_outq_flush(&c->pending);
    }
    sup_linger_shutdown(); /* bounded by kill_grace */
    while (contexts) {
        sup_ctx *c = contexts;
        contexts = c->next;
        free_ctx(c);
    }
    ncontexts = 0;
    rd_list.head = rd_list.tail = timed_list.head = timed_list.tail = NULL;
    idle_list.head = idle_list.tail = lease_list.head = lease_list.tail = NULL;
    mem_list.head = mem_list.tail = NULL;
    if (hcap)
        memset(htab, 0, hcap * sizeof *htab);
    sup_ctx_tick(0);
    sup_cgroup_shutdown();
}

void sup_ctx_put_info(proto_buf *b, sup_ctx *c)
{
    double now = sup_now();
    /* No figure yet (a new worker whose read is out) or an old one: read
     * now, within the budget of a ctx.list page. */
    if ((pss_stale(c, now) || (c->pid > 0 && c->pss == 0)) &&
        (info_deadline == 0 || now < info_deadline))
        read_pss(c, now);
    uint64_t rss = worker_rss(c->pid), pss = c->pid > 0 ? c->pss : 0;
    if (pss > rss) /* read at different times */
        pss = rss;
    proto_put_map(b, 12 + (c->last_death ? 1 : 0) + (c->lease > 0 ? 1 : 0));
    proto_put_str(b, "name");
    proto_put_str(b, c->name);
    proto_put_str(b, "cwd");
    proto_put_str(b, c->cwd);
    proto_put_str(b, "state");
    proto_put_str(b, sup_ctx_state_name(c));
    proto_put_str(b, "pid");
    proto_put_uint(b, (uint64_t)c->pid);
    proto_put_str(b, "incarnation");
    proto_put_uint(b, c->incarnation);
    proto_put_str(b, "created");
    proto_put_double(b, c->created);
    proto_put_str(b, "execution_count");
    proto_put_uint(b, c->execution_count);
    proto_put_str(b, "queued");
    proto_put_uint(b, c->queued);
    proto_put_str(b, "rss");
    proto_put_uint(b, rss);
    proto_put_str(b, "pss");
    proto_put_uint(b, pss);
    proto_put_str(b, "tier");
    proto_put_str(b, sup_policy_tier_name(c->policy));
    proto_put_str(b, "policy");
    sup_policy_put(b, c->policy);
    if (c->last_death) {
        proto_put_str(b, "last_death");
        proto_put_str(b, c->last_death);
    }
    if (c->lease > 0) {
        proto_put_str(b, "lease");
        proto_put_double(b, c->lease);
    }
}

/* For the `stats` reply (sup_stats.c counts nothing itself). */
void sup_ctx_counts(size_t *live, size_t *busy, size_t *queued)
{
    *live = *busy = *queued = 0;
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next) {
        (*live)++;
        *busy += c->running != NULL;
        *queued += c->queued;
    }
}

/* The context a request names (field `ctx`, default "default"); `default`
 * is made on first use when make_default is set. */
sup_ctx *sup_ctx_lookup(const proto_val *msg, const sup_peer *peer, bool make_default)
{
    const proto_val *name = proto_map_get(msg, "ctx");
    if (name && name->kind == PROTO_NIL) /* an explicit nil reads as absent */
        name = NULL;
    const char *s = name ? name->as.s : "default";
    size_t n = name ? name->n : 7;
    sup_ctx *c = sup_ctx_find(s, n);
    if (c) {
        if (c->lease > 0) /* any request naming a leased context renews it */
            c->lease_until = sup_now() + c->lease; /* later: no wake needed */
        return c;
    }
    if (make_default && n == 7 && memcmp(s, "default", 7) == 0) {
        proto_error err;
        sup_ident *id = sup_ident_new(false, "default", true, &err);
        c = id ? sup_ctx_create("default", id->dir, NULL, 0, NULL, id, &err) : NULL;
        if (!c) {
            sup_ident_unref(id);
            sup_reply_err(peer, err.code, "%s", err.msg);
        }
        return c;
    }
    sup_reply_err(peer, "unknown_context", "no context named '%.*s'", (int)n, s);
    return NULL;
}
