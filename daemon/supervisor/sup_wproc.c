/* sup_wproc: a context's worker process and its descriptors: starting it
 * (a new incarnation), its pidfd, signals and kills, its channel
 * descriptor as the loop watches it, and its parked pipe read ends. */
#include "sup_wproc.h"

#include "sup_cgroup.h"
#include "sup_ctxpss.h"
#include "sup_log.h"
#include "sup_park.h"
#include "sup_proc.h"
#include "sup_spawn.h"
#include "sup_stats.h"

#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const sup_wproc_chan_watch *chan_watch;

void sup_wproc_set_chan_watch(const sup_wproc_chan_watch *w)
{
    chan_watch = w;
}

void sup_wproc_park(sup_ctx *c)
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

void sup_wproc_unpark(sup_ctx *c)
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

void sup_wproc_close_pipes(sup_ctx *c)
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

void sup_wproc_watch_chan(sup_ctx *c)
{
    if (chan_watch && c->fd >= 0)
        chan_watch->add(c);
}

void sup_wproc_unwatch_chan(sup_ctx *c)
{
    if (chan_watch)
        chan_watch->del(c);
}

void sup_wproc_close_chan(sup_ctx *c)
{
    if (c->fd < 0)
        return;
    if (chan_watch)
        chan_watch->del(c);
    close(c->fd);
    c->fd = -1;
    c->chan.rd_wanted = c->chan.rd_hup = false;
    sup_ctx_list_remove(SUP_CTX_RD, c);
    sup_chanbud_release(&c->chan.bud);
}

void sup_wproc_signal(sup_ctx *c, int sig)
{
    sup_proc_signal_group(c->pidfd, c->pid, sig);
}

void sup_wproc_kill(sup_ctx *c)
{
    (void)sup_cgroup_kill(c->cgroup);
    if (c->pid > 0)
        sup_wproc_signal(c, SIGKILL);
}

void sup_wproc_broken(sup_ctx *c, const char *why)
{
    if (c->kill_reason)
        return;
    char buf[300];
    snprintf(buf, sizeof buf, "worker broke the channel protocol: %s", why);
    c->kill_reason = mem_strdup(buf);
    sup_log("ctx=%s pid=%d: %s", c->name, (int)c->pid, buf);
    sup_wproc_kill(c);
    c->chan.broken = true;
}

void sup_wproc_drop_new_rd(sup_ctx *c)
{
    for (int i = 0; i < c->chan.nnew_rd; i++)
        close(c->chan.new_rd[i]);
    c->chan.nnew_rd = 0;
}

void sup_wproc_take_new_pipes(sup_ctx *c)
{
    struct stat st[2];
    if (c->chan.nnew_rd == 2 && fstat(c->chan.new_rd[0], &st[0]) == 0 && S_ISFIFO(st[0].st_mode) &&
        fstat(c->chan.new_rd[1], &st[1]) == 0 && S_ISFIFO(st[1].st_mode)) {
        sup_wproc_close_pipes(c);
        for (int s = 0; s < 2; s++) {
            c->out_rd[s] = c->chan.new_rd[s];
            fcntl(c->out_rd[s], F_SETFL, fcntl(c->out_rd[s], F_GETFL) | O_NONBLOCK);
        }
        c->chan.nnew_rd = 0;
        sup_wproc_park(c);
    }
    sup_wproc_drop_new_rd(c);
}

int sup_wproc_take_pid(sup_ctx *c, pid_t pid, proto_error *err)
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
    c->pss.read_at = 0; /* another process: measured at once */
    sup_ctxpss_want(c);
    sup_log("spawned ctx=%s pid=%d incarnation=%u", c->name, (int)pid, c->incarnation);
    return 0;
}

int sup_wproc_start(sup_ctx *c, bool use_zygote, proto_error *err)
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
                       .zygote_only = c->spare.on};
    int rc = sup_spawn_worker(&w, use_zygote, &pid, &fd, c->out_rd, err);
    if (rc < 0) {
        sup_cgroup_release(c->cgroup);
        return -1;
    }
    c->fd = fd;
    sup_wproc_watch_chan(c);
    sup_wproc_park(c);
    if (rc == 1) {
        c->spawning = true;
        return 0;
    }
    if (sup_wproc_take_pid(c, pid, err) < 0) {
        sup_wproc_close_chan(c);
        sup_wproc_close_pipes(c);
        sup_cgroup_release(c->cgroup);
        return -1;
    }
    return 0;
}

int sup_wproc_spawn(sup_ctx *c, proto_error *err)
{
    if (sup_wproc_start(c, true, err) < 0)
        return -1;
    c->incarnation++;
    c->ready = c->chan.eof = c->chan.broken = false;
    c->execution_count = 0;
    c->chan.in.len = c->out.len = 0;
    c->chan.stream_recv[0] = c->chan.stream_recv[1] = 0;
    free(c->kill_reason);
    c->kill_reason = NULL;
    c->kill_why = NULL;
    c->kill_at = 0;
    sup_stats.workers_spawned++;
    if (sup_ctx_linked(c))
        sup_ctx_note_put(c); /* a new incarnation (create notes its own) */
    sup_ctx_touch(c);
    return 0;
}
