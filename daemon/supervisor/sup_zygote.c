/* sup_zygote: the supervisor's side of the zygote fork-server
 * (PROTOCOL.md 9.2).
 *
 * The zygote is `ctxd-worker --zygote`, started by fork+exec with a
 * SOCK_SEQPACKET socket on fd 3. It initialises CPython and imports the
 * preloads once, says `zygote {pid, loaded, skipped}`, and then forks a
 * worker for each `spawn` request (the request carries the worker's five
 * descriptors as SCM_RIGHTS). The answer, `spawned {pid}`, is awaited right
 * away (a fork takes about a millisecond), so sup_spawn_worker stays
 * synchronous. The worker is a grandchild of the zygote; the supervisor is a
 * child subreaper, so the worker is reparented to it, and the supervisor
 * reaps it like a worker it started itself.
 *
 * A zygote that dies is restarted (at once the first time, with growing
 * pauses if it keeps dying); meanwhile, and whenever it does not answer,
 * workers are started by fork+exec. */
#include "sup_zygote.h"

#include "sup_cgroup.h"
#include "sup_child.h"
#include "sup_config.h"
#include "sup_log.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* How long the daemon's start waits for the first zygote (preloads can be
 * slow to import), and how long a spawn waits for its answer. */
#define FIRST_START_WAIT 60.0
#define SPAWN_WAIT 2.0
/* A zygote that lived this long is healthy: if it dies it is restarted at
 * once; quicker deaths double the pause before the next start. */
#define HEALTHY_UPTIME 10.0
#define MAX_BACKOFF 30.0
#define MAX_MSG (64 * 1024)

typedef enum { Z_OFF, Z_STARTING, Z_READY, Z_DEAD } zstate;

/* Where the answers to sup_zygote_spawn go (sup_zygote_init). */
static const sup_zygote_answers *answers;

static struct {
    zstate state;
    bool disabled; /* no subreaper: forked workers could not be adopted */
    pid_t pid;
    int fd;
    double started, restart_at, backoff;
    unsigned starts;
    /* From the running zygote's hello (loaded) and the configured list. */
    char **loaded;
    size_t nloaded;
    char **wanted;
    size_t nwanted;
} z = {.fd = -1};

/* Exits of pids no context knew yet: a worker forked from a live context
 * can die before the `forked` frame naming it is read. */
#define NEXITS 64
static struct {
    pid_t pid;
    int status;
    double when;
} exits[NEXITS];
static size_t exits_next;

/* A spawn asked of the zygote: queued until the zygote is ready, then sent
 * (its five descriptors, our own copies, go with it) and answered in
 * order. owner NULL: its context gave up on it (deleted, restarted); the
 * worker it gets, if any, is killed with its cgroup. */
typedef struct zreq {
    struct sup_ctx *owner;
    char cgroup[SBX_CGROUP_NAME_MAX];
    proto_buf msg;
    int fds[5];
    double since; /* queued, then sent */
    bool sent;
    bool must; /* only the zygote can make it (sandbox): waits for a restart */
} zreq;

#define QUEUE_MAX 4096
/* How long a request may wait for a zygote that is (re)starting. */
#define QUEUE_WAIT 10.0

static zreq *queue;
static size_t nqueue, capqueue;

static void finish(size_t k, pid_t pid, const char *failure, bool held);
static void fail_all(const char *why, bool keep_unsent);
static void flush_queue(void);

/* ---- preload list -------------------------------------------------------- */

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Splits "a, b,c" into trimmed, non-empty names. */
static char **split_list(const char *s, size_t *n)
{
    char **v = NULL;
    *n = 0;
    while (s && *s) {
        const char *comma = strchr(s, ',');
        const char *end = comma ? comma : s + strlen(s);
        const char *a = s, *b = end;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if (b > a) {
            v = mem_realloc(v, (*n + 1) * sizeof *v);
            v[(*n)++] = mem_strndup(a, (size_t)(b - a));
        }
        s = comma ? comma + 1 : end;
    }
    return v;
}

void sup_zygote_put_preloads(proto_buf *b)
{
    proto_put_map(b, 2);
    proto_put_str(b, "loaded");
    size_t nloaded = z.state == Z_READY ? z.nloaded : 0;
    proto_put_array(b, (uint32_t)nloaded);
    for (size_t i = 0; i < nloaded; i++)
        proto_put_str(b, z.loaded[i]);
    /* skipped: every configured preload the running zygote did not load
     * (all of them while there is no zygote). */
    size_t nskipped = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            proto_put_str(b, "skipped");
            proto_put_array(b, (uint32_t)nskipped);
        }
        for (size_t i = 0; i < z.nwanted; i++) {
            bool found = false;
            for (size_t j = 0; j < nloaded && !found; j++)
                found = strcmp(z.wanted[i], z.loaded[j]) == 0;
            if (found)
                continue;
            if (pass == 0)
                nskipped++;
            else
                proto_put_str(b, z.wanted[i]);
        }
    }
}

/* ---- starting ------------------------------------------------------------- */

static void forget(void)
{
    if (z.fd >= 0)
        close(z.fd);
    z.fd = -1;
    free_list(z.loaded, z.nloaded);
    z.loaded = NULL;
    z.nloaded = 0;
}

/* fork+exec of `ctxd-worker --zygote --preload=LIST`: fd 0 /dev/null, 1
 * and 2 the daemon's stderr (its messages and preload noise go to the
 * daemon's log), 3 its socket; own process group, dies with us. */
static void start(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        sup_log("zygote: socketpair: %s", strerror(errno));
        z.state = Z_DEAD;
        z.restart_at = sup_now() + 1;
        sup_timer_moved();
        return;
    }
    int sndbuf = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    char *arg = mem_alloc(strlen(sup_cfg.preload ? sup_cfg.preload : "") + 16);
    sprintf(arg, "--preload=%s", sup_cfg.preload ? sup_cfg.preload : "");
    /* The blank argument is room for the title of the workers it forks
     * ("ctxd-worker NAME" in ps). */
    static char room[72];
    memset(room, ' ', sizeof room - 1);
    char *argv[] = {(char *)"ctxd-worker", (char *)"--zygote", arg, room, NULL, NULL};
    if (!sup_cfg.no_page_merging) { /* before the room: the title spans the arguments' end */
        argv[4] = room;
        argv[3] = (char *)"--merge-pages";
    }
    pid_t pid = sup_child_fork();
    if (pid == 0) {
        int fd = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || devnull < 0 || dup2(devnull, 0) < 0 || dup2(2, 1) < 0 || dup2(fd, 3) < 0)
            _exit(127);
        close_range(4, ~0u, 0);
        sup_child_limits();
        sup_child_signals();
        execve(sup_cfg.worker_path, argv, environ);
        _exit(127);
    }
    int saved = errno;
    free(arg);
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        sup_log("zygote: fork: %s", strerror(saved));
        z.state = Z_DEAD;
        z.restart_at = sup_now() + 1;
        sup_timer_moved();
        return;
    }
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    z.pid = pid;
    z.fd = sv[0];
    z.state = Z_STARTING;
    z.started = sup_now();
    z.starts++;
    sup_log("zygote: started pid=%d preload=%s", (int)pid, sup_cfg.preload ? sup_cfg.preload : "");
}

/* Gives up on a zygote that misbehaves: it is killed, and restarted when
 * its exit is reaped. */
static void give_up(const char *why)
{
    fprintf(stderr, "ctxd: zygote %d: %s; killing it\n", (int)z.pid, why);
    if (z.pid > 0)
        kill(z.pid, SIGKILL);
    forget();
    z.state = Z_DEAD;
    z.restart_at = 0; /* set when the exit is reaped */
    /* A sandbox spawn waits for the next zygote; the others start by exec. */
    fail_all(why, true);
}

/* Reads one message if there is one: 1 read, 0 none, -1 the socket failed
 * (closed, or a message that is not msgpack). */
static int recv_msg(proto_doc *doc, uint8_t *buf, size_t cap)
{
    ssize_t n;
    do
        n = recv(z.fd, buf, cap, MSG_DONTWAIT | MSG_TRUNC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN ? 0 : -1;
    proto_error err;
    if (n == 0 || (size_t)n > cap || proto_decode(doc, buf, (size_t)n, &err) < 0)
        return -1;
    return 1;
}

/* The zygote's hello: it is ready. */
static void take_hello(const proto_val *m)
{
    static const proto_field fields[] = {
        {"pid", PF_UINT, true, 0},
        {"loaded", PF_ARRAY, true, 4096},
        {"skipped", PF_ARRAY, true, 4096},
    };
    proto_error err;
    if (!proto_str_eq(proto_map_get(m, "t"), "zygote") ||
        proto_check(m, fields, sizeof fields / sizeof fields[0], &err) < 0) {
        give_up("its first message is not `zygote`");
        return;
    }
    const proto_val *loaded = proto_map_get(m, "loaded");
    const proto_val *skipped = proto_map_get(m, "skipped");
    free_list(z.loaded, z.nloaded);
    z.loaded = mem_calloc(loaded->n + 1, sizeof *z.loaded);
    z.nloaded = 0;
    for (uint32_t i = 0; i < loaded->n; i++)
        if (loaded->as.items[i].kind == PROTO_STR)
            z.loaded[z.nloaded++] = proto_strdup(&loaded->as.items[i]);
    for (uint32_t i = 0; i < skipped->n; i++)
        if (skipped->as.items[i].kind == PROTO_STR)
            fprintf(stderr, "ctxd: preload %.*s skipped (not installed or failed to import)\n",
                    (int)skipped->as.items[i].n, skipped->as.items[i].as.s);
    z.state = Z_READY;
    sup_log("zygote: ready pid=%d after %.3f s", (int)z.pid, sup_now() - z.started);
    flush_queue();
}

/* While starting: takes the hello if it has arrived, waiting up to wait
 * seconds. */
static void check_starting(double wait)
{
    double deadline = sup_now() + wait;
    uint8_t buf[MAX_MSG];
    while (z.state == Z_STARTING) {
        proto_doc doc;
        int r = recv_msg(&doc, buf, sizeof buf);
        if (r < 0) {
            give_up("it closed its socket or sent garbage while starting");
            return;
        }
        if (r > 0) {
            take_hello(&doc.nodes[0]);
            proto_doc_free(&doc);
            return;
        }
        double left = deadline - sup_now();
        if (left <= 0)
            return;
        struct pollfd p = {.fd = z.fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) < 0 && errno != EINTR)
            return;
    }
}

void sup_zygote_init(const sup_zygote_answers *a)
{
    answers = a;
    sup_child_raise_limits();

    const char *list = sup_cfg.preload;
    if (!list || !*list)
        list = getenv("CTXD_PRELOAD");
    sup_cfg.preload = list && *list ? mem_strdup(list) : NULL;
    z.wanted = split_list(sup_cfg.preload, &z.nwanted);

    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
        fprintf(stderr,
                "ctxd: cannot become a child subreaper (%s): no zygote, workers are "
                "started by exec\n",
                strerror(errno));
        z.disabled = true;
        return;
    }
    start();
    if (z.state == Z_STARTING)
        check_starting(FIRST_START_WAIT);
    if (z.state != Z_READY)
        fprintf(stderr, "ctxd: the zygote is not ready; workers are started by exec until it is\n");
}

bool sup_zygote_on_exit(pid_t pid, int status)
{
    if (pid <= 0 || pid != z.pid)
        return false;
    double now = sup_now();
    double uptime = now - z.started;
    if (WIFSIGNALED(status))
        fprintf(stderr, "ctxd: zygote %d killed by signal %d after %.1f s; restarting it\n",
                (int)pid, WTERMSIG(status), uptime);
    else
        fprintf(stderr, "ctxd: zygote %d exited with code %d after %.1f s; restarting it\n",
                (int)pid, WEXITSTATUS(status), uptime);
    forget();
    z.pid = 0;
    z.state = Z_DEAD;
    fail_all("the zygote died", true);
    /* The first death after a healthy life restarts at once; a zygote that
     * keeps dying young waits 0.25 s, 0.5 s, ... up to MAX_BACKOFF. */
    if (uptime >= HEALTHY_UPTIME)
        z.backoff = 0;
    z.restart_at = now + z.backoff;
    for (size_t k = 0; k < nqueue; k++)
        if (queue[k].must && !queue[k].sent)
            z.restart_at = now; /* a sandbox waits for it: no back-off */
    sup_timer_moved();
    z.backoff = z.backoff == 0 ? 0.25 : z.backoff * 2 > MAX_BACKOFF ? MAX_BACKOFF : z.backoff * 2;
    return true;
}

double sup_zygote_tick(double now)
{
    if (z.disabled)
        return 0;
    /* The oldest request sent waits at most SPAWN_WAIT for its answer; a
     * queued one at most QUEUE_WAIT for a zygote that is (re)starting. */
    for (size_t k = 0; k < nqueue; k++) {
        if (queue[k].sent && now - queue[k].since > SPAWN_WAIT) {
            give_up("no answer to a spawn request");
            break;
        }
        if (!queue[k].sent && now - queue[k].since > QUEUE_WAIT) {
            finish(k, 0, "the zygote did not come back in time", false);
            k--;
        }
    }
    flush_queue(); /* what sup_zygote_spawn queued */
    if (z.state == Z_DEAD && z.pid == 0 && now >= z.restart_at)
        start();
    if (z.state == Z_STARTING) {
        check_starting(0);
        if (z.state == Z_STARTING)
            return now + 0.005; /* look again soon */
    }
    double next = z.state == Z_DEAD && z.pid == 0 ? z.restart_at : 0;
    for (size_t k = 0; k < nqueue; k++) { /* when a request times out */
        double t = queue[k].since + (queue[k].sent ? SPAWN_WAIT : QUEUE_WAIT) + 0.001;
        if (next == 0 || t < next)
            next = t;
    }
    return next;
}

/* ---- spawning: a queue, never a wait -------------------------------- */

/* Why the last spawn the zygote answered failed. */
static char last_failure[256];

const char *sup_zygote_last_failure(void)
{
    return last_failure;
}

static void close_fds(zreq *r)
{
    for (int i = 0; i < 5; i++)
        if (r->fds[i] >= 0)
            close(r->fds[i]);
    for (int i = 0; i < 5; i++)
        r->fds[i] = -1;
}

/* Ends request k of the queue: with failure, its owner hears why (held:
 * the zygote had its descriptors, so a worker of it may exist); with
 * pid > 0, the worker it got. Removes it from the queue. */
static void finish(size_t k, pid_t pid, const char *failure, bool held)
{
    zreq r = queue[k];
    memmove(queue + k, queue + k + 1, (nqueue - k - 1) * sizeof *queue);
    nqueue--;
    close_fds(&r);
    proto_buf_free(&r.msg);
    if (!r.owner) { /* nobody wants it: whatever it made dies */
        if (r.cgroup[0])
            sup_cgroup_release(r.cgroup);
        return;
    }
    if (pid > 0)
        answers->spawned(r.owner, pid);
    else
        answers->failed(r.owner, failure, held);
}

/* Fails every request: the ones sent (their worker may exist, the zygote
 * is gone or killed) and, unless keep_unsent, the queued ones. */
static void fail_all(const char *why, bool keep_unsent)
{
    snprintf(last_failure, sizeof last_failure, "%s", why);
    for (size_t k = 0; k < nqueue;)
        if (queue[k].sent || !keep_unsent || !queue[k].must)
            finish(k, 0, why, queue[k].sent);
        else
            k++;
}

/* Sends the queued requests the zygote has not seen, in order, while its
 * socket takes them. */
static void flush_queue(void)
{
    for (size_t k = 0; z.state == Z_READY && k < nqueue; k++) {
        zreq *r = &queue[k];
        if (r->sent)
            continue;
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(5 * sizeof(int))];
        } ctl;
        memset(&ctl, 0, sizeof ctl);
        struct iovec iov = {r->msg.data, r->msg.len};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.buf,
                            .msg_controllen = sizeof ctl.buf};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(5 * sizeof(int));
        memcpy(CMSG_DATA(cm), r->fds, 5 * sizeof(int));
        ssize_t n;
        do
            n = sendmsg(z.fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN)
            return; /* the rest when it has read these */
        if (n < 0) {
            if (errno == EMSGSIZE) { /* this one only: started by exec */
                finish(k, 0, "spawn request too large for the zygote", false);
                k--;
                continue;
            }
            give_up(strerror(errno));
            return;
        }
        r->sent = true;
        r->since = sup_now();
        sup_timer_moved();
        close_fds(r); /* the zygote has them now */
    }
}

int sup_zygote_spawn(struct sup_ctx *owner, const char *name, const char *cwd, const char *cgroup,
                     char *const *env, const int fds[5], bool wait_for_zygote)
{
    if (z.disabled) {
        snprintf(last_failure, sizeof last_failure, "no zygote (not a child subreaper)");
        return -1;
    }
    if (z.state != Z_READY && !wait_for_zygote) {
        snprintf(last_failure, sizeof last_failure, "the zygote is not running");
        return -1;
    }
    if (nqueue >= QUEUE_MAX) {
        snprintf(last_failure, sizeof last_failure, "%d spawns already wait for the zygote",
                 QUEUE_MAX);
        return -1;
    }
    if (z.state == Z_DEAD && z.pid == 0) {
        z.restart_at = 0; /* a spawn that needs it: restart now, not after the back-off */
        sup_timer_moved();
    }
    if (nqueue == capqueue) {
        capqueue = capqueue ? capqueue * 2 : 16;
        queue = mem_realloc(queue, capqueue * sizeof *queue);
    }
    zreq *r = &queue[nqueue];
    memset(r, 0, sizeof *r);
    for (int i = 0; i < 5; i++) {
        r->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
        if (r->fds[i] < 0) {
            snprintf(last_failure, sizeof last_failure, "dup: %s", strerror(errno));
            close_fds(r);
            return -1;
        }
    }
    r->owner = owner;
    r->must = wait_for_zygote;
    snprintf(r->cgroup, sizeof r->cgroup, "%s", cgroup);
    r->since = sup_now();
    sup_timer_moved();
    size_t nenv = 0;
    while (env[nenv])
        nenv++;
    proto_buf_init(&r->msg);
    proto_put_map(&r->msg, 5);
    proto_put_str(&r->msg, "t");
    proto_put_str(&r->msg, "spawn");
    proto_put_str(&r->msg, "cgroup");
    proto_put_str(&r->msg, cgroup);
    proto_put_str(&r->msg, "name");
    proto_put_str(&r->msg, name);
    proto_put_str(&r->msg, "cwd");
    proto_put_str(&r->msg, cwd);
    proto_put_str(&r->msg, "env");
    proto_put_array(&r->msg, (uint32_t)nenv);
    for (size_t i = 0; i < nenv; i++)
        proto_put_bin(&r->msg, env[i], strlen(env[i]));
    nqueue++;
    /* Sent by the next turn's tick, not here: a send that fails (the
     * zygote just died) ends requests through answers->failed, which
     * starts workers by exec; inside this call it would start this very
     * context's worker while its caller is still setting it up (the
     * caller then overwrote the new worker's channel with the old one,
     * and the create was never answered). */
    sup_timer_moved();
    return 0;
}

void sup_zygote_cancel(const struct sup_ctx *owner)
{
    for (size_t k = 0; k < nqueue; k++)
        if (queue[k].owner == owner)
            queue[k].owner = NULL;
}

bool sup_zygote_ready(void)
{
    return !z.disabled && z.state == Z_READY;
}

int sup_zygote_fd(void)
{
    return z.state == Z_STARTING || z.state == Z_READY ? z.fd : -1;
}

unsigned sup_zygote_starts(void)
{
    return z.starts;
}

/* An answer to the oldest request sent. */
static void take_answer(const proto_val *m)
{
    size_t k = 0;
    while (k < nqueue && !queue[k].sent)
        k++;
    if (k == nqueue) {
        give_up("an answer to no spawn request");
        return;
    }
    const proto_val *p = proto_map_get(m, "pid");
    const proto_val *msg = proto_map_get(m, "message");
    if (proto_str_eq(proto_map_get(m, "t"), "spawned") && p && p->kind == PROTO_UINT &&
        p->as.u > 0 && p->as.u < (1u << 30)) {
        finish(k, (pid_t)p->as.u, NULL, false);
    } else if (proto_str_eq(proto_map_get(m, "t"), "failed")) {
        snprintf(last_failure, sizeof last_failure, "%.*s",
                 msg && msg->kind == PROTO_STR ? (int)msg->n : 1,
                 msg && msg->kind == PROTO_STR ? msg->as.s : "?");
        fprintf(stderr, "ctxd: zygote could not fork a worker: %s\n", last_failure);
        finish(k, 0, last_failure, false);
    } else {
        give_up("unexpected answer to a spawn request");
    }
}

void sup_zygote_on_readable(void)
{
    if (z.state == Z_STARTING) {
        check_starting(0);
        flush_queue();
        return;
    }
    uint8_t *buf = mem_alloc(MAX_MSG);
    for (int i = 0; i < 64 && z.state == Z_READY; i++) {
        proto_doc doc;
        int r = recv_msg(&doc, buf, MAX_MSG);
        if (r < 0)
            give_up("it closed its socket or sent garbage");
        if (r <= 0)
            break;
        take_answer(&doc.nodes[0]);
        proto_doc_free(&doc);
    }
    free(buf);
    flush_queue();
}

/* ---- exits of pids not known yet ------------------------------------------ */

void sup_zygote_note_exit(pid_t pid, int status)
{
    exits[exits_next].pid = pid;
    exits[exits_next].status = status;
    exits[exits_next].when = sup_now();
    exits_next = (exits_next + 1) % NEXITS;
}

bool sup_zygote_take_exit(pid_t pid, int *status)
{
    double now = sup_now();
    for (size_t i = 0; i < NEXITS; i++) {
        if (exits[i].pid == pid && pid > 0 && now - exits[i].when < 60) {
            *status = exits[i].status;
            exits[i].pid = 0;
            return true;
        }
    }
    return false;
}
