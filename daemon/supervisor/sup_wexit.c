/* sup_wexit: how a context's worker ends: discarded on purpose, dead (its
 * last output relayed, its runs ended, its cause kept for the next
 * incarnation), never started (the zygote's failure), or lingering to run
 * its atexit handlers when its context ends. */
#include "sup_wexit.h"

#include "sup_cgroup.h"
#include "sup_chan.h"
#include "sup_chanbud.h"
#include "sup_config.h"
#include "sup_ctxinfo.h"
#include "sup_linger.h"
#include "sup_log.h"
#include "sup_outmem.h"
#include "sup_pkgs.h"
#include "sup_policy.h"
#include "sup_reaper.h"
#include "sup_run.h"
#include "sup_stats.h"
#include "sup_wproc.h"
#include "sup_zygote.h"

#include "mem.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const sup_wexit_hooks *hooks;

void sup_wexit_set_hooks(const sup_wexit_hooks *h)
{
    hooks = h;
}

void sup_wexit_discard(sup_ctx *c, const char *status, const char *cause)
{
    if (c->spawning) { /* the zygote's answer, when it comes, is nobody's */
        sup_zygote_cancel(c);
        c->spawning = false;
    }
    sup_wproc_kill(c);
    sup_cgroup_release(c->cgroup);
    sup_wproc_close_chan(c);
    sup_wproc_close_pipes(c);
    if (c->pidfd >= 0)
        close(c->pidfd);
    c->pidfd = -1;
    if (c->chan.outmem_fd >= 0)
        close(c->chan.outmem_fd);
    c->chan.outmem_fd = -1;
    sup_outmem_detach(&c->chan.outmem);
    sup_wproc_drop_new_rd(c);
    c->pid = 0;
    c->ready = false;
    if (c->running) {
        sup_run_end e = {.status = status, .state_lost = true, .cause = cause};
        sup_run_finish(c, &e);
    }
    sup_run_abort_queue(c, cause);
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
        if ((!c->ready || c->spare.binding) && code == 126)
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

/* sup_outmem_recover's emit: output of the running run. */
static void relay_recovered(void *arg, int stream, const uint8_t *p, size_t n)
{
    sup_run_stream(arg, stream, p, n);
}

/* Output the dead worker had not sent: first what its output memory held
 * (Python-level buffers, a chunk read from a pipe), then raw output it
 * wrote to fd 1/2 but never read back. It is output of the run, so it goes
 * out before the run's `done`. */
static void relay_leftover_output(sup_ctx *c)
{
    sup_run_accept_now(c);
    for (int s = 0;
         s < 2 && c->running && !(c->running->kind && (c->running->kind->frames & SUP_RUN_ANSWERS));
         s++)
        sup_outmem_recover(c->chan.outmem, s, c->chan.stream_recv[s], relay_recovered, c);
    /* At most a pipe's worth (1 MiB): a process that outlived the worker
     * (it left the process group) may still be writing. */
    uint8_t chunk[PROTO_STREAM_CHUNK];
    sup_wproc_unpark(c);
    for (int s = 0; s < 2 && c->running; s++) {
        ssize_t n;
        size_t left = (size_t)1 << 20;
        while (left > 0 && c->out_rd[s] >= 0 &&
               (n = read(c->out_rd[s], chunk, left < sizeof chunk ? left : sizeof chunk)) > 0) {
            sup_run_stream(c, s, chunk, (size_t)n);
            left -= (size_t)n;
        }
    }
}

static void worker_ended(sup_ctx *c, char *cause);

void sup_wexit_on_exit(pid_t pid, int status)
{
    if (sup_reaper_on_exit(pid, status) || sup_zygote_on_exit(pid, status) ||
        sup_pkgs_on_exit(pid, status))
        return;
    sup_ctx *c = sup_ctx_first();
    while (c && c->pid != pid)
        c = c->next;
    if (!c)
        c = sup_ctx_spare_of(pid);
    if (!c) {
        /* A discarded worker, already accounted for; or a forked one whose
         * `forked` frame is still unread: remembered for that. */
        sup_zygote_note_exit(pid, status);
        return;
    }
    /* Children it left behind were killed just before the reap
     * (sup_wexit_before_reap), while the group id was still the worker's;
     * its cgroup holds the ones that left the group (setsid). */
    (void)sup_cgroup_kill(c->cgroup);
    c->pid = 0;
    if (!c->chan.broken && c->fd >= 0) {
        /* Output written before the end is still in the socket. */
        sup_chan_read_all(c);
        sup_chan_process(c);
        /* an execute's `start` may still have been held back by the worker
         * (wrk_output.c) unless it had just been bound: it ran */
        if (c->run.started || (c->running && !c->running->kind && !c->spare.binding))
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
    if (c->spare.on) {
        sup_stats_event("spare-died cause=\"%s\"", cause);
        free(cause);
        hooks->spare_ended(c);
        return;
    }
    const char *status_name = c->run.timed_out && c->kill_reason ? "timeout" : "died";
    char *queued_cause = mem_alloc(strlen(cause) + 32);
    sprintf(queued_cause, "worker died: %s", cause);
    bool failed_create = c->creating;
    if (!c->ready)
        sup_ctxinfo_reply_err(c, "spawn", cause);
    if (c->running) {
        sup_run_end e = {.status = status_name, .state_lost = true, .cause = cause};
        sup_run_finish(c, &e);
    }
    sup_wexit_discard(c, "died", queued_cause);
    free(queued_cause);
    free(c->last_death);
    c->last_death = cause;
    c->death_unshown = true;
    c->chan.broken = false;
    sup_stats.worker_deaths++;
    sup_stats_event("worker-died ctx=%s cause=\"%s\"", c->name, c->last_death);
    if (failed_create)
        hooks->never_ready(c);
}

void sup_wexit_spawned(sup_ctx *c, pid_t pid)
{
    c->spawning = false;
    int status;
    if (sup_zygote_take_exit(pid, &status)) { /* it died (and was reaped) first */
        c->pid = pid;
        sup_wexit_on_exit(pid, status);
        return;
    }
    proto_error err;
    if (sup_wproc_take_pid(c, pid, &err) < 0)
        worker_ended(c, mem_strdup(err.msg));
}

void sup_wexit_spawn_failed(sup_ctx *c, const char *why, bool held)
{
    (void)held; /* the exec path below makes new descriptors anyway */
    c->spawning = false;
    sup_wproc_close_chan(c);
    sup_wproc_close_pipes(c);
    sup_cgroup_release(c->cgroup);
    proto_error err;
    char cause[400];
    if (c->spare.on) { /* made by the zygote only: dropped, made again later */
        snprintf(cause, sizeof cause, "the zygote could not start it: %s", why);
    } else if (c->policy && c->policy->tier == SUP_TIER_SANDBOX) {
        snprintf(cause, sizeof cause,
                 "worker could not start: the sandbox tier needs the zygote: %s", why);
    } else if (sup_wproc_start(c, false, &err) == 0) {
        return; /* started by exec instead */
    } else {
        snprintf(cause, sizeof cause, "worker could not start: %s", err.msg);
    }
    worker_ended(c, mem_strdup(cause));
}

bool sup_wexit_is_worker(pid_t pid)
{
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next)
        if (pid > 0 && c->pid == pid)
            return true;
    return sup_ctx_spare_of(pid) != NULL;
}

void sup_wexit_before_reap(pid_t pid)
{
    if (sup_linger_before_reap(pid))
        return;
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next)
        if (pid > 0 && c->pid == pid)
            sup_wproc_signal(c, SIGKILL);
    sup_ctx *s = sup_ctx_spare_of(pid);
    if (s)
        sup_wproc_signal(s, SIGKILL);
}

void sup_wexit_linger(sup_ctx *c)
{
    if (!c->ready || c->running || c->spawning || c->out.len != 0 || c->fd < 0)
        return;
    /* The loop forgets the channel first: the lingerer owns it from here,
     * and an event on it must not find c, which is freed at the next tick. */
    sup_wproc_unwatch_chan(c);
    if (!sup_linger_start(c->name, &c->fd, &c->pid, &c->pidfd, c->cgroup))
        sup_wproc_watch_chan(c); /* still c's: sup_wexit_discard closes it */
    c->chan.rd_wanted = c->fd >= 0 && c->chan.rd_wanted;
    if (c->fd < 0) {
        sup_ctx_list_remove(SUP_CTX_RD, c);
        sup_chanbud_release(&c->chan.bud);
    }
}
