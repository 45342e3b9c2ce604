/* sup_fork: ctx.fork, cloning a live context by forking its worker
 * (PROTOCOL.md sections 5 and 9.3).
 *
 * The request waits in the source's FIFO like an execute. When its turn
 * comes, the source worker gets a `fork` frame carrying the new worker's
 * channel and pipe descriptors (SCM_RIGHTS over the channel socketpair). It
 * forks twice, so the copy's parent is the supervisor, and answers `forked
 * {pid}`; the source then goes on with its queue. The pid is believed only
 * after the supervisor's own checks (verify_copy; PROTOCOL.md 9.4); the new
 * context enters the table with it and its pidfd and waits for the copy's
 * `ready`, which answers the request with `ok {ctx: INFO}` (as for
 * ctx.create). */
#include "sup_fork.h"

#include "sup_cgroup.h"
#include "sup_config.h"
#include "sup_ctx.h"
#include "sup_chan.h"
#include "sup_ctxinfo.h"
#include "sup_life.h"
#include "sup_run.h"
#include "sup_wexit.h"
#include "sup_wproc.h"
#include "sup_log.h"
#include "sup_peer.h"
#include "sup_proc.h"
#include "sup_send.h"
#include "sup_spawn.h"
#include "sup_zygote.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const sup_run_kind fork_kind;

/* A ctx.fork's own part of its run: the new context's name; once the
 * `fork` frame is out, the supervisor's ends of the new worker's channel
 * and pipes (-1 before) and the boot ticks when the frame went out. */
typedef struct fork_data {
    char *name;
    int fd, out_rd[2];
    uint64_t since;
} fork_data;

static fork_data *F(const sup_run *r)
{
    return r->data;
}

void sup_ctx_fork(sup_ctx *src, const char *name, const sup_peer *peer)
{
    sup_run *r = sup_run_new(&fork_kind, peer);
    fork_data *f = mem_calloc(1, sizeof *f);
    f->name = mem_strdup(name);
    f->fd = f->out_rd[0] = f->out_rd[1] = -1;
    r->data = f;
    sup_run_submit(src, r);
}

static void sup_fork_abort(const sup_run *r, const char *cause)
{
    sup_reply_err(&r->peer, "aborted", "the fork into '%s' did not happen: %s", F(r)->name, cause);
}

/* Ends the running fork with an err and lets the source go on. */
static void end_fork(sup_ctx *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void end_fork(sup_ctx *c, const char *code, const char *fmt, ...)
{
    sup_run *r = c->running;
    c->running = NULL;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sup_reply_err(&r->peer, code, "%s", msg);
    sup_run_free(r);
    sup_run_dispatch(c);
}

/* Writes one frame with the descriptors attached to its first byte. */
static ssize_t send_with_fds(int fd, const proto_buf *b, const int *fds, size_t nfds)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(5 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {b->data, b->len};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    ssize_t n;
    do
        n = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
}

static void sup_fork_start(sup_ctx *c)
{
    sup_run *r = c->running;
    c->run.started = c->run.interrupt_wanted = c->run.timed_out = false;
    c->run.deadline = 0;
    c->run.t0 = sup_now();
    if (sup_ctx_find(F(r)->name, strlen(F(r)->name))) {
        end_fork(c, "exists", "a context named '%s' already exists", F(r)->name);
        return;
    }
    if (sup_ctx_count() >= sup_cfg.max_contexts) {
        end_fork(c, "limit", "the daemon already holds %zu contexts (max_contexts)",
                 sup_ctx_count());
        return;
    }
    int child[5];
    proto_error err;
    if (sup_spawn_fds(&F(r)->fd, F(r)->out_rd, child, &err) < 0) {
        end_fork(c, "spawn", "%s", err.msg);
        return;
    }
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_put_map(&b, 3);
    proto_put_str(&b, "t");
    proto_put_str(&b, "fork");
    proto_put_str(&b, "run_id");
    proto_put_uint(&b, r->run_id);
    proto_put_str(&b, "name");
    proto_put_str(&b, F(r)->name);
    proto_frame_end(&b, start);
    /* The copy is made after this moment: an older process is not it. */
    F(r)->since = sup_proc_boot_ticks();
    /* Between runs nothing is waiting to be written; if something is, the
     * descriptors cannot be attached to the frame's first byte. */
    if (c->out.len)
        sup_chan_write(c);
    ssize_t n = c->out.len ? -1 : send_with_fds(c->fd, &b, child, 5);
    int e = c->out.len ? EBUSY : errno;
    for (int i = 0; i < 3; i++)
        close(child[i]);
    if (n < 0) {
        proto_buf_free(&b);
        end_fork(c, "internal", "cannot pass the new worker's descriptors to '%s': %s", c->name,
                 strerror(e));
        return;
    }
    if ((size_t)n < b.len)
        proto_buf_append(&c->out, b.data + n, b.len - (size_t)n);
    proto_buf_free(&b);
    sup_log("fork ctx=%s into %s: frame sent", c->name, F(r)->name);
}

/* The running fork, or NULL after calling the worker broken. */
static sup_run *running_fork(sup_ctx *c, const char *frame)
{
    sup_run *r = c->running;
    if (!r || r->kind != &fork_kind || F(r)->fd < 0) {
        char why[64];
        snprintf(why, sizeof why, "`%s` while no fork is under way", frame);
        sup_wproc_broken(c, why);
        return NULL;
    }
    return r;
}

/* Checks the pid a `forked` frame names by the supervisor's own means: the
 * copy is a child of the supervisor (the double fork reparents it to the
 * subreaper), made after the `fork` frame went out, with the source's uid,
 * in the source's cgroup, and no context's worker. Returns its pidfd, or -1 with why set. */
static int verify_copy(const sup_ctx *c, const sup_run *r, pid_t pid, char *why, size_t n)
{
    uid_t uid;
    if (pid == c->pid || sup_wexit_is_worker(pid)) {
        snprintf(why, n, "`forked` names pid %d, a worker the supervisor already knows", (int)pid);
        return -1;
    }
    if (!sup_proc_alive(c->pidfd) || sup_proc_uid(c->pid, &uid) < 0 || !sup_proc_alive(c->pidfd)) {
        snprintf(why, n, "the source worker's uid cannot be read");
        return -1;
    }
    char detail[200];
    int fd = sup_proc_adopt_child(pid, uid, F(r)->since, detail, sizeof detail);
    if (fd < 0) {
        snprintf(why, n, "`forked` names no copy of this worker: %s", detail);
        return -1;
    }
    /* ... and in the source's cgroup, where every process it makes starts
     * (checked with the pidfd held, so the pid is still that process). */
    if (sup_cgroup_holds(c->cgroup, pid) == 0) {
        snprintf(why, n, "`forked` names pid %d, which is not in the source's cgroup", (int)pid);
        close(fd);
        return -1;
    }
    return fd;
}

static void sup_fork_on_forked(sup_ctx *c, const proto_val *msg)
{
    sup_run *r = running_fork(c, "forked");
    if (!r)
        return;
    uint64_t u = proto_map_get(msg, "pid")->as.u;
    pid_t pid = u > 0 && u < (1u << 30) ? (pid_t)u : 0;
    int status;
    if (pid > 0 && sup_zygote_take_exit(pid, &status)) {
        /* A child of the supervisor with that pid was reaped before the
         * frame was read: nothing is left to verify or adopt (whatever it
         * was, it is gone); the fork did not happen. */
        end_fork(c, "spawn", "the copy of '%s' ended before it was ready", c->name);
        return;
    }
    char why[300];
    int pidfd = pid > 0 ? verify_copy(c, r, pid, why, sizeof why) : -1;
    if (pid == 0)
        snprintf(why, sizeof why, "`forked` without a valid pid");
    if (pidfd < 0) {
        /* The reply is the fork's `err aborted` when the source's death is
         * reported (it is still the running request). */
        sup_wproc_broken(c, why);
        return;
    }
    const char *code = NULL;
    if (sup_ctx_find(F(r)->name, strlen(F(r)->name)))
        code = "exists";
    else if (sup_ctx_count() >= sup_cfg.max_contexts)
        code = "limit";
    if (code) {
        /* The name was taken (or the table filled up) while the fork ran. */
        sup_proc_signal(pidfd, SIGKILL);
        close(pidfd);
        end_fork(c, code,
                 strcmp(code, "exists") == 0 ? "a context named '%s' was created meanwhile"
                                             : "too many contexts to add '%s' (max_contexts)",
                 F(r)->name);
        return;
    }
    c->running = NULL;
    sup_ctx *n = sup_life_adopt(c, F(r)->name, pid, pidfd, F(r)->fd, F(r)->out_rd);
    F(r)->fd = F(r)->out_rd[0] = F(r)->out_rd[1] = -1; /* n owns them now */
    sup_ctxinfo_add_waiter(n, &r->peer);
    sup_log("fork ctx=%s into %s: pid=%d", c->name, n->name, (int)pid);
    sup_run_free(r);
    sup_run_dispatch(c);
}

static void sup_fork_on_failed(sup_ctx *c, const proto_val *msg)
{
    sup_run *r = running_fork(c, "fork_failed");
    if (!r)
        return;
    const proto_val *m = proto_map_get(msg, "message");
    bool ok = m && m->kind == PROTO_STR;
    end_fork(c, "spawn", "the worker of '%s' could not fork: %.*s", c->name,
             ok ? (int)(m->n > 300 ? 300 : m->n) : 1, ok ? m->as.s : "?");
}

/* The kind's abort: a fork has no status of its own, only a cause. */
static void fork_abort(const sup_run *r, const char *status, const char *cause)
{
    sup_fork_abort(r, cause ? cause : status);
}

/* The worker frames that answer a `fork`. */
static void fork_on_frame(sup_ctx *c, const char *type, const proto_val *msg)
{
    static const struct {
        const char *type;
        void (*handle)(sup_ctx *c, const proto_val *msg);
    } frames[] = {{"forked", sup_fork_on_forked}, {"fork_failed", sup_fork_on_failed}};
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++)
        if (!strcmp(type, frames[i].type))
            frames[i].handle(c, msg);
}

/* The kind's free: the descriptors of a copy never adopted, its name. */
static void fork_free(sup_run *r)
{
    int fds[] = {F(r)->fd, F(r)->out_rd[0], F(r)->out_rd[1]};
    for (size_t i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(F(r)->name);
    free(r->data);
}

/* True once the `fork` frame is out: its forked or fork_failed may come. */
static bool fork_sent(const sup_run *r)
{
    return F(r)->fd >= 0;
}

/* What sup_run.c and sup_frame.c call for a ctx.fork run. */
static const sup_run_kind fork_kind = {sup_fork_start, fork_abort,    fork_on_frame,
                                       fork_free,      SUP_RUN_FORKS, fork_sent};
