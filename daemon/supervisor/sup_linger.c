/* sup_linger: a context that ends on purpose (ctx.delete, ctx.restart,
 * daemon shutdown) with an idle worker does not have it killed at once: the
 * worker is sent `exit` and runs its atexit handlers as an interpreter does
 * at exit, as a silent run whose frames (start, output, done) it sends on
 * its channel as usual; then it ends with everything it started. The
 * context moves on at once (a restart's new worker starts meanwhile); the
 * old worker and its channel are held here until it is reaped, or killed
 * with its process group and cgroup once the budget (kill_grace) is spent.
 * No client waits for that output any more: what the channel holds then
 * (at most DRAIN_MAX bytes) is counted and logged, its start quoted, as the
 * event `atexit` (when there was output, or the handlers did not finish:
 * done=none). Nothing here waits, except at shutdown, and there only
 * until the budget ends. */
#include "sup_linger.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto.h"
#include "sup_cgroup.h"
#include "sup_config.h"
#include "sup_log.h"
#include "sup_proc.h"
#include "sup_stats.h"

#define MAX_LINGER 64
#define DRAIN_MAX (1024 * 1024)
#define QUOTE_MAX 240

typedef struct lingerer {
    pid_t pid; /* 0: a free slot */
    int pidfd;
    int fd; /* the channel */
    char cgroup[SBX_CGROUP_NAME_MAX];
    char ctx[64];
    double deadline;
} lingerer;

static lingerer table[MAX_LINGER];
static size_t nlinger; /* slots in use: the tick skips an empty table */

/* Appends stream bytes to the quote, as printable ASCII with \n, \" and
 * \xNN escapes. */
static void quote(char *q, size_t *qn, const char *p, size_t n)
{
    for (size_t i = 0; i < n && *qn + 5 < QUOTE_MAX; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\n')
            *qn += (size_t)snprintf(q + *qn, QUOTE_MAX - *qn, "\\n");
        else if (ch == '"' || ch == '\\')
            *qn += (size_t)snprintf(q + *qn, QUOTE_MAX - *qn, "\\%c", ch);
        else if (ch < 0x20 || ch > 0x7e)
            *qn += (size_t)snprintf(q + *qn, QUOTE_MAX - *qn, "\\x%02x", ch);
        else
            q[(*qn)++] = (char)ch;
    }
    q[*qn] = '\0';
}

/* Reads what the worker sent (never blocking) and logs the output of its
 * atexit handlers. */
static void drain(lingerer *l)
{
    proto_buf in;
    proto_buf_init(&in);
    while (in.len < DRAIN_MAX) {
        proto_buf_reserve(&in, 64 * 1024);
        ssize_t r = recv(l->fd, in.data + in.len, in.cap - in.len, MSG_DONTWAIT);
        if (r <= 0)
            break;
        in.len += (size_t)r;
    }
    unsigned long long bytes[2] = {0, 0};
    char q[QUOTE_MAX + 1] = "";
    size_t qn = 0, off = 0;
    const char *status = "none";
    const uint8_t *body;
    size_t len, used;
    while (proto_frame_next(in.data + off, in.len - off, PROTO_MAX_FRAME, &body, &len, &used) > 0) {
        off += used;
        proto_doc doc;
        proto_error err;
        if (proto_decode(&doc, body, len, &err) < 0)
            break;
        const proto_val *m = &doc.nodes[0];
        const proto_val *t = proto_map_get(m, "t"), *data = proto_map_get(m, "data");
        if (proto_str_eq(t, "stream") && data && data->kind == PROTO_BIN) {
            int s = proto_str_eq(proto_map_get(m, "name"), "stderr");
            bytes[s] += data->n;
            quote(q, &qn, data->as.s, data->n);
        } else if (proto_str_eq(t, "done")) {
            status = proto_str_eq(proto_map_get(m, "status"), "ok") ? "ok" : "error";
        }
        proto_doc_free(&doc);
    }
    proto_buf_free(&in);
    if (bytes[0] || bytes[1] || strcmp(status, "none") == 0)
        sup_stats_event("atexit ctx=%s done=%s stdout_bytes=%llu stderr_bytes=%llu output=\"%s\"",
                        l->ctx, status, bytes[0], bytes[1], q);
}

/* Logs the handlers' output, kills the worker and what it started, and
 * frees the slot. */
static void end(lingerer *l)
{
    drain(l);
    sup_proc_signal_group(l->pidfd, l->pid, SIGKILL);
    sup_cgroup_release(l->cgroup); /* kills what left the group */
    if (l->pidfd >= 0)
        close(l->pidfd);
    close(l->fd);
    memset(l, 0, sizeof *l);
    nlinger--;
}

bool sup_linger_start(const char *ctx, int *fd, pid_t *pid, int *pidfd,
                      char cgroup[SBX_CGROUP_NAME_MAX])
{
    if (*fd < 0 || *pid <= 0 || *pidfd < 0)
        return false;
    lingerer *l = NULL;
    for (size_t i = 0; i < MAX_LINGER && !l; i++)
        if (table[i].pid == 0)
            l = &table[i];
    if (!l)
        return false;
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_put_map(&b, 1);
    proto_put_str(&b, "t");
    proto_put_str(&b, "exit");
    proto_frame_end(&b, start);
    ssize_t w = send(*fd, b.data, b.len, MSG_DONTWAIT | MSG_NOSIGNAL);
    bool sent = w == (ssize_t)b.len;
    proto_buf_free(&b);
    if (!sent) /* a partial frame is harmless: the worker is killed */
        return false;
    l->pid = *pid;
    nlinger++;
    l->pidfd = *pidfd;
    l->fd = *fd;
    memcpy(l->cgroup, cgroup, SBX_CGROUP_NAME_MAX);
    snprintf(l->ctx, sizeof l->ctx, "%s", ctx);
    l->deadline = sup_now() + sup_cfg.kill_grace;
    sup_timer_moved();
    *pid = 0;
    *pidfd = -1;
    *fd = -1;
    cgroup[0] = '\0';
    return true;
}

double sup_linger_tick(double now)
{
    double next = 0;
    for (size_t i = 0; i < MAX_LINGER && nlinger > 0; i++) {
        lingerer *l = &table[i];
        if (l->pid == 0)
            continue;
        if (now >= l->deadline) {
            sup_stats_event("atexit-killed ctx=%s pid=%d grace=%g", l->ctx, (int)l->pid,
                            sup_cfg.kill_grace);
            end(l);
        } else if (next == 0 || l->deadline < next) {
            next = l->deadline;
        }
    }
    return next;
}

bool sup_linger_before_reap(pid_t pid)
{
    for (size_t i = 0; i < MAX_LINGER && nlinger > 0; i++) {
        if (pid > 0 && table[i].pid == pid) {
            end(&table[i]);
            return true;
        }
    }
    return false;
}

/* True once the process behind pidfd has exited: its pidfd polls readable
 * then, also while it is a zombie nobody reaps yet (at shutdown the loop
 * reaps no more, and a signal 0 still reaches a zombie). */
static bool exited(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return pidfd < 0 || (poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR)));
}

void sup_linger_shutdown(void)
{
    for (;;) {
        struct pollfd p[MAX_LINGER];
        size_t n = 0;
        double now = sup_now(), first = 0;
        for (size_t i = 0; i < MAX_LINGER; i++) {
            lingerer *l = &table[i];
            if (l->pid == 0)
                continue;
            if (now >= l->deadline || exited(l->pidfd)) {
                end(l);
                continue;
            }
            p[n++] = (struct pollfd){.fd = l->pidfd, .events = POLLIN};
            if (first == 0 || l->deadline < first)
                first = l->deadline;
        }
        if (n == 0)
            return;
        int ms = (int)((first - now) * 1000) + 1;
        if (poll(p, n, ms) < 0 && errno != EINTR)
            return;
    }
}
