/* sup_snap: snapshots of a context's Python state (sup_snap.h; PROTOCOL.md
 * section 5, "ctx.snapshot").
 *
 * A snapshot or restore waits in the context's FIFO like a query (it counts
 * toward max_queue) and runs when its turn comes: the supervisor opens the
 * file itself, under STATE_DIR/snapshots/CTX/ by descriptor without
 * following symbolic links, and sends the worker a `snapshot` or `restore`
 * frame with a descriptor attached; the worker sends `start` and then
 * `answer {data}`. A snapshot is never the worker's to hold: it gets the
 * write end of a pipe, which a thread of the supervisor copies into a
 * temporary file of its own, counting the bytes against the cap (past it,
 * the pipe is closed) and computing their HMAC (sup_snapmac.h). When the
 * worker answered ok, what is in the pipe is taken, the pipe closed, the
 * tag (writer's tier and context, HMAC) appended, and the file renamed
 * into place: nothing the worker still holds reaches it. A restore gets a
 * read-only descriptor, after the tag was checked: a file whose tag does
 * not verify under the daemon's key is of the sandbox tier. What else is
 * in the file is the worker's: the supervisor takes nothing from it but
 * the execution count a restore reports (a number), so a context's tier
 * and policy never come from a snapshot. The directory and the writers'
 * tiers are sup_snapdir.c's, the pipe's copier sup_snapdrain.c's, the
 * requests on the files themselves sup_snapfiles.c's. */
#include "sup_snap.h"

#include "sup_auth.h"
#include "sup_chan.h"
#include "sup_config.h"
#include "sup_ctx.h"
#include "sup_ctxinfo.h"
#include "sup_frame.h"
#include "sup_life.h"
#include "sup_log.h"
#include "sup_peer.h"
#include "sup_policy.h"
#include "sup_run.h"
#include "sup_send.h"
#include "sup_snapdir.h"
#include "sup_snapdrain.h"
#include "sup_snapmac.h"
#include "sup_stats.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define AUTO_NAME "auto"       /* the name autosnapshots are kept under */
#define UNSAVED_MAX 1000       /* items of an answer's `unsaved` */
#define MESSAGE_MAX 4096       /* an answer's `message` */
#define COUNT_MAX (1ull << 53) /* an execution count a restore may report */

static const sup_run_kind snap_kind;

/* A snapshot's or restore's own part of its run: SUP_SNAP_*, its op for
 * the worker and the log ("snapshot" or "restore"), whether no client
 * waits (autosnapshot, restore after a restart), its id ("CTX/NAME"), the
 * supervisor's descriptors of the file and of its context's snapshot
 * directory and the temporary name being written (-1 / NULL when none),
 * the cap given to the worker, and, while a snapshot is written, the
 * copier of the worker's pipe into fd and how the free ends it. */
typedef struct snap_data {
    int mode;
    const char *op;
    bool internal;
    char *id;
    char *tmp;
    int fd, dirfd;
    uint64_t max;
    sup_snap_drain *drain;
    void (*drop)(sup_snap_drain *d);
} snap_data;

static snap_data *S(const sup_run *r)
{
    return r->data;
}

/* ---- queueing --------------------------------------------------------- */

static sup_run *new_run(int mode, const sup_peer *peer, const char *ctx, const char *name)
{
    sup_run *r = sup_run_new(&snap_kind, peer);
    snap_data *d = mem_calloc(1, sizeof *d);
    d->fd = d->dirfd = -1;
    r->data = d;
    if (!peer)
        S(r)->internal = true;
    S(r)->mode = mode;
    S(r)->op = mode == SUP_SNAP_WRITE ? "snapshot" : "restore";
    char id[SUP_SNAPDIR_ID_MAX + 1];
    snprintf(id, sizeof id, "%s/%s", ctx, name);
    S(r)->id = mem_strdup(id);
    return r;
}

/* The checks every request on a live context makes; NULL after `err`. */
static sup_ctx *live_ctx(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *c = sup_life_lookup(msg, peer, false);
    if (!c)
        return NULL;
    if (c->policy && c->policy->tier == SUP_TIER_STATIC) {
        sup_reply_err(peer, "forbidden", "context '%s' is of the static tier: it has no state",
                      c->name);
        return NULL;
    }
    if (c->pid == 0 && !c->spawning) {
        sup_reply_err(peer, "dead",
                      "context '%s' has no live worker; run something in it to start a new one",
                      c->name);
        return NULL;
    }
    if (c->run.queued >= sup_cfg.max_queue) {
        sup_reply_err(peer, "busy", "context '%s' already has %zu requests queued (max_queue)",
                      c->name, c->run.queued);
        return NULL;
    }
    return c;
}

void sup_snap_request(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *name = proto_map_get(msg, "name");
    sup_ctx *c = live_ctx(msg, peer);
    if (!c)
        return;
    char gen[PROTO_MAX_NAME + 1];
    if (name && name->kind == PROTO_STR) {
        snprintf(gen, sizeof gen, "%.*s", (int)name->n, name->as.s);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(gen, sizeof gen, "snap-%Y%m%dT%H%M%S", &tm);
        size_t len = strlen(gen);
        snprintf(gen + len, sizeof gen - len, "-%04x", (unsigned)(rand() & 0xffff));
    }
    sup_run_submit(c, new_run(SUP_SNAP_WRITE, peer, c->name, gen));
}

void sup_snap_restore_request(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *c = live_ctx(msg, peer);
    if (!c)
        return;
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    if (!sup_snapdir_parse_id(proto_map_get(msg, "snapshot"), c->name, ctx, name)) {
        sup_reply_err(peer, "bad_name",
                      "field 'snapshot' must be NAME or CTX/NAME (names as "
                      "contexts' names)");
        return;
    }
    int fd = sup_snapdir_open(ctx, name, peer);
    if (fd < 0)
        return;
    sup_run *r = new_run(SUP_SNAP_RESTORE, peer, ctx, name);
    S(r)->fd = fd;
    sup_run_submit(c, r);
}

int sup_snap_open_for_create(const proto_val *id, const sup_peer *peer)
{
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    if (!sup_snapdir_parse_id(id, NULL, ctx, name)) {
        sup_reply_err(peer, "bad_name",
                      "field 'from_snapshot' must be CTX/NAME (names as "
                      "contexts' names)");
        return -1;
    }
    return sup_snapdir_open(ctx, name, peer);
}

void sup_snap_create_restore(sup_ctx *c, int fd, const char *id, const sup_peer *peer)
{
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    proto_val v = {.kind = PROTO_STR, .n = (uint32_t)strlen(id), .as.s = id};
    if (!sup_snapdir_parse_id(&v, NULL, ctx, name)) /* checked by sup_snap_open_for_create */
        fatal("from_snapshot id changed");
    sup_run *r = new_run(SUP_SNAP_CREATE, peer, ctx, name);
    S(r)->fd = fd;
    sup_run_submit(c, r);
}

double sup_snap_parse_auto(const proto_val *v, const sup_peer *peer)
{
    if (!v || v->kind == PROTO_NIL)
        return 0;
    if (proto_str_eq(v, "run"))
        return -1;
    double s = v->kind == PROTO_UINT ? (double)v->as.u : v->kind == PROTO_FLOAT ? v->as.f : -1;
    if (s >= 1 && s <= 1e9)
        return s;
    sup_reply_err(peer, "bad_field",
                  "field 'autosnapshot' must be \"run\" or a number of seconds from 1 to 1e9");
    return -2;
}

/* c's tier: the one a snapshot it writes is marked with, and the least
 * confined writer whose snapshot it may restore. */
static sup_tier ctx_tier(const sup_ctx *c)
{
    return c->policy ? c->policy->tier : SUP_TIER_UNSAFE;
}

static sup_snap_drain *checks; /* restores whose tags are being checked */

/* snap_data.drop: the copier ended and freed. */
static void drain_drop(sup_snap_drain *d)
{
    if (d->verifying) {
        pthread_join(d->verifier, NULL);
        for (sup_snap_drain **p = &checks; *p; p = &(*p)->next_check)
            if (*p == d) {
                *p = d->next_check;
                break;
            }
        free(d);
        return;
    }
    sup_snapdrain_join(d);
    if (d->rd >= 0)
        close(d->rd);
    close(d->evfd);
    sup_snapmac_free(d->mac);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

/* ---- the run ---------------------------------------------------------- */

/* Writes one frame with descriptor fd attached to its first byte. */
static ssize_t send_with_fd(int sock, const proto_buf *b, int fd)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {b->data, b->len};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = CMSG_SPACE(sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    ssize_t n;
    do
        n = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
}

/* Removes the temporary file of a snapshot that did not complete. */
static void drop_tmp(const sup_run *r)
{
    if (S(r)->tmp && S(r)->dirfd >= 0)
        (void)unlinkat(S(r)->dirfd, S(r)->tmp, 0);
}

/* Ends the running snapshot or restore (its reply already sent) and lets
 * the context go on; a ctx.create whose restore failed deletes c. */
static void end_snap(sup_ctx *c, bool delete_ctx)
{
    sup_run *r = c->running;
    c->running = NULL;
    if (c->run.timed_out && !c->kill_reason)
        c->kill_at = 0;
    c->run.started = c->run.interrupt_wanted = c->run.timed_out = false;
    c->run.deadline = 0;
    drop_tmp(r);
    sup_run_free(r);
    if (delete_ctx)
        sup_life_delete(c);
    else
        sup_run_dispatch(c);
}

static void fail(sup_ctx *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Replies `err` (or logs, for an internal run) and ends the run. */
static void fail(sup_ctx *c, const char *code, const char *fmt, ...)
{
    sup_run *r = c->running;
    char msg[MESSAGE_MAX + 200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (S(r)->internal)
        sup_stats_event("%s-failed ctx=%s snapshot=%s error=\"%s\"",
                        S(r)->mode == SUP_SNAP_WRITE ? "autosnapshot" : "restore", c->name,
                        S(r)->id, msg);
    else
        sup_reply_err(&r->peer, code, "%s", msg);
    end_snap(c, S(r)->mode == SUP_SNAP_CREATE);
}

/* The `snapshot` frame: the file is made under a temporary name and its
 * copier started; the pipe's write end for the worker, or -1 after the run
 * failed and ended. */
static int start_write(sup_ctx *c, sup_run *r, proto_buf *b)
{
    const char *name = strchr(S(r)->id, '/') + 1;
    S(r)->dirfd = sup_snapdir_ctx_dir(c->name, true);
    if (S(r)->dirfd < 0) {
        fail(c, "io", "cannot open the snapshot directory of '%s': %s", c->name, strerror(errno));
        return -1;
    }
    sup_snapdir_tally mine = {name, 0, 0};
    sup_snapdir_each(S(r)->dirfd, sup_snapdir_tally_one, &mine);
    if (mine.count >= sup_cfg.max_snapshots) {
        fail(c, "limit",
             "context '%s' already has %llu snapshots (max_snapshots); delete one "
             "(ctx.snapshot_delete) first",
             c->name, (unsigned long long)mine.count);
        return -1;
    }
    struct stat old;
    uint64_t replaced =
        fstatat(S(r)->dirfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(old.st_mode)
            ? (uint64_t)old.st_size
            : 0;
    uint64_t total = sup_snapdir_total_bytes() - replaced;
    uint64_t left = total < sup_cfg.max_snapshot_total ? sup_cfg.max_snapshot_total - total : 0;
    S(r)->max = left < sup_cfg.max_snapshot_bytes ? left : sup_cfg.max_snapshot_bytes;
    /* The file holds the worker's bytes and the tag. */
    S(r)->max = S(r)->max > SUP_SNAPMAC_TAG ? S(r)->max - SUP_SNAPMAC_TAG : 0;
    char tmp[PROTO_MAX_NAME + 40];
    snprintf(tmp, sizeof tmp, ".%s.%016llx.tmp", name, (unsigned long long)r->run_id);
    S(r)->fd = openat(S(r)->dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (S(r)->fd < 0) {
        fail(c, "io", "cannot create snapshot '%s': %s", S(r)->id, strerror(errno));
        return -1;
    }
    S(r)->tmp = mem_strdup(tmp);
    int wfd = -1;
    S(r)->drain = sup_snapdrain_start(S(r)->fd, S(r)->max, &wfd);
    if (!S(r)->drain) {
        fail(c, "io", "cannot start snapshot '%s': %s (the daemon's key %s/snapshot.key)", S(r)->id,
             strerror(errno), sup_auth_state_dir());
        return -1;
    }
    S(r)->drop = drain_drop;
    proto_buf info;
    proto_buf_init(&info);
    sup_ctxinfo_put(&info, c);
    size_t start = proto_frame_begin(b);
    proto_put_map(b, 5);
    proto_put_str(b, "t");
    proto_put_str(b, "snapshot");
    proto_put_str(b, "run_id");
    proto_put_uint(b, r->run_id);
    proto_put_str(b, "max_bytes");
    proto_put_uint(b, S(r)->max);
    proto_put_str(b, "execution_count");
    proto_put_uint(b, c->execution_count);
    proto_put_str(b, "info");
    proto_put_bin(b, info.data, info.len);
    proto_frame_end(b, start);
    proto_buf_free(&info);
    return wfd;
}

/* Sends the run's frame b with descriptor pass (closed after, unless it
 * is the file's own). */
static void send_snap_frame(sup_ctx *c, sup_run *r, proto_buf *b, int pass)
{
    /* Between runs nothing waits to be written; if something does, the
     * descriptor cannot ride on the frame's first byte. */
    if (c->out.len)
        sup_chan_write(c);
    ssize_t n = c->out.len ? -1 : send_with_fd(c->fd, b, pass);
    int e = c->out.len ? EBUSY : errno;
    if (pass != S(r)->fd)
        close(pass); /* the worker's copy is the only one */
    if (n < 0) {
        proto_buf_free(b);
        fail(c, "internal", "cannot pass the snapshot's descriptor to '%s': %s", c->name,
             strerror(e));
        return;
    }
    if ((size_t)n < b->len)
        proto_buf_append(&c->out, b->data + n, b->len - (size_t)n);
    proto_buf_free(b);
    sup_log("%s ctx=%s snapshot=%s: frame sent", S(r)->op, c->name, S(r)->id);
}

/* A restore whose file's tag was checked: refused when its writer was less
 * confined than c, else its frame sent. */
static void restore_go(sup_ctx *c, sup_run *r, sup_tier w, bool verified, uint64_t content_len)
{
    if (w > ctx_tier(c)) {
        if (verified)
            fail(c, "forbidden",
                 "snapshot '%s' was written by a %s context; restoring it runs its code, so "
                 "it goes only into a %s context (this one is %s)",
                 S(r)->id, sup_snapdir_tier_names[w],
                 w == SUP_TIER_SANDBOX ? "sandbox" : "local or sandbox",
                 sup_snapdir_tier_names[ctx_tier(c)]);
        else
            fail(c, "forbidden",
                 "snapshot '%s' has no writer's mark this daemon made (copied in by hand, "
                 "forged or changed): restoring it runs its code, so it goes only into a "
                 "sandbox context (this one is %s); to move snapshots between daemons use "
                 "ctx.snapshot_export and ctx.snapshot_import",
                 S(r)->id, sup_snapdir_tier_names[ctx_tier(c)]);
        return;
    }
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_put_map(&b, 3);
    proto_put_str(&b, "t");
    proto_put_str(&b, "restore");
    proto_put_str(&b, "run_id");
    proto_put_uint(&b, r->run_id);
    proto_put_str(&b, "max_bytes"); /* the worker's part of the file */
    proto_put_uint(&b, content_len);
    proto_frame_end(&b, start);
    send_snap_frame(c, r, &b, S(r)->fd);
}

/* The verifier's thread: the tag of a restore's file checked. */
static void *verify_main(void *arg)
{
    sup_snap_drain *d = arg;
    d->ok =
        sup_snapmac_verify(S(d->run)->fd, SUP_SNAPMAC_OWN, &d->tier, d->origin, &d->content_len);
    atomic_store(&d->checked, true);
    return NULL;
}

/* Below this, a restore's tag is checked in the loop (milliseconds); from
 * it on, by a thread while the loop goes on. */
#define VERIFY_INLINE_MAX (16 << 20)
#define CHECK_POLL 0.005 /* seconds between the tick's looks at the checks */

static void snap_start(sup_ctx *c)
{
    sup_run *r = c->running;
    c->run.started = c->run.interrupt_wanted = c->run.timed_out = false;
    c->run.deadline = 0; /* no timeout: an interrupt stops it */
    c->run.t0 = sup_now();
    if (S(r)->mode == SUP_SNAP_WRITE) {
        proto_buf b;
        proto_buf_init(&b);
        int pass = start_write(c, r, &b);
        if (pass < 0) { /* it failed and ended */
            proto_buf_free(&b);
            return;
        }
        send_snap_frame(c, r, &b, pass);
        return;
    }
    sup_tier w;
    char origin[PROTO_MAX_NAME + 1];
    uint64_t content_len;
    struct stat st;
    if (sup_snapdir_cached_tier(S(r)->fd, &w, origin, &content_len)) {
        restore_go(c, r, w, true, content_len);
        return;
    }
    if (fstat(S(r)->fd, &st) < 0 || st.st_size < VERIFY_INLINE_MAX) {
        bool verified;
        w = sup_snapdir_tagged_tier(S(r)->fd, SUP_SNAPMAC_OWN, &verified, origin, &content_len);
        restore_go(c, r, w, verified, content_len);
        return;
    }
    sup_snap_drain *d = mem_calloc(1, sizeof *d);
    d->verifying = true;
    d->ctx = c;
    d->run = r;
    d->rd = d->evfd = -1;
    int e = pthread_create(&d->verifier, NULL, verify_main, d);
    if (e)
        fatal("pthread_create: %s", strerror(e));
    S(r)->drain = d;
    S(r)->drop = drain_drop;
    d->next_check = checks;
    checks = d;
    sup_timer_moved();
}

/* The checks that ended: their restores go on. */
static void checks_done(void)
{
    for (sup_snap_drain **p = &checks; *p;) {
        sup_snap_drain *d = *p;
        if (!atomic_load(&d->checked)) {
            p = &d->next_check;
            continue;
        }
        *p = d->next_check;
        pthread_join(d->verifier, NULL);
        sup_run *r = d->run;
        sup_ctx *c = d->ctx;
        bool ok = d->ok && d->tier >= SUP_TIER_UNSAFE && d->tier <= SUP_TIER_SANDBOX;
        sup_tier w = ok ? (sup_tier)d->tier : SUP_TIER_SANDBOX;
        uint64_t len = d->content_len;
        if (ok)
            sup_snapdir_remember(S(r)->fd, w, d->origin, len);
        S(r)->drain = NULL;
        S(r)->drop = NULL;
        free(d);
        if (c->running != r)
            fatal("a snapshot's check outlived its run");
        restore_go(c, r, w, ok, len);
    }
}

static void snap_abort(const sup_run *r, const char *status, const char *cause)
{
    drop_tmp(r);
    if (S(r)->internal) {
        sup_stats_event("snapshot-aborted snapshot=%s cause=\"%s\"", S(r)->id,
                        cause ? cause : status);
        return;
    }
    sup_reply_err(&r->peer, "aborted", "the %s of '%s' did not complete: %s", S(r)->op, S(r)->id,
                  cause ? cause : status);
}

/* The answer's `unsaved`, checked: an array of at most UNSAVED_MAX maps
 * {name: str, reason: str}; false when it is not. */
static bool unsaved_valid(const proto_val *u)
{
    static const proto_field item[] = {
        {"name", PF_STR, true, 1024},
        {"reason", PF_STR, true, 1024},
    };
    if (!u)
        return true;
    if (u->kind != PROTO_ARRAY || u->n > UNSAVED_MAX)
        return false;
    proto_error err;
    for (uint32_t i = 0; i < u->n; i++)
        if (u->as.items[i].kind != PROTO_MAP ||
            proto_check(&u->as.items[i], item, sizeof item / sizeof item[0], &err) < 0)
            return false;
    return true;
}

static void put_unsaved(proto_buf *b, const proto_val *u)
{
    proto_put_str(b, "unsaved");
    if (!u) {
        proto_put_array(b, 0);
        return;
    }
    proto_put_array(b, u->n);
    for (uint32_t i = 0; i < u->n; i++) {
        proto_put_map(b, 2);
        proto_put_str(b, "name");
        proto_put_val(b, proto_map_get(&u->as.items[i], "name"));
        proto_put_str(b, "reason");
        proto_put_val(b, proto_map_get(&u->as.items[i], "reason"));
    }
}

/* A snapshot the worker says it wrote: checked by size, put in place. */
static void written(sup_ctx *c, sup_run *r, const proto_val *data, const proto_val *unsaved)
{
    sup_snap_drain *d = S(r)->drain;
    sup_snapdrain_join(d); /* what the pipe holds now is all there is */
    const proto_val *size = proto_map_get(data, "size");
    if (d->bad && strcmp(d->bad, "too_large") == 0) {
        fail(c, "too_large",
             "the snapshot would need more than %llu bytes, the cap (max_snapshot_bytes, or what "
             "max_snapshot_total leaves, less the %d bytes of its tag)",
             (unsigned long long)S(r)->max, SUP_SNAPMAC_TAG);
        return;
    }
    if (d->bad) {
        fail(c, strcmp(d->bad, "io") == 0 ? "io" : "internal",
             "snapshot '%s' did not come through whole from the worker of '%s'%s%s", S(r)->id,
             c->name, d->bad_errno ? ": " : "", d->bad_errno ? strerror(d->bad_errno) : "");
        return;
    }
    if (!size || size->as.u != d->n) {
        fail(c, "internal",
             "the worker of '%s' says snapshot '%s' is %llu bytes; %llu came through the pipe",
             c->name, S(r)->id, size ? (unsigned long long)size->as.u : 0ull,
             (unsigned long long)d->n);
        return;
    }
    sup_snapmac *mac = d->mac;
    d->mac = NULL;
    if (!sup_snapmac_seal(mac, S(r)->fd, d->n, (int)ctx_tier(c), c->name)) {
        fail(c, "io", "cannot write the tag of snapshot '%s': %s", S(r)->id, strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(S(r)->fd, &st) < 0) {
        fail(c, "io", "cannot read the size of snapshot '%s': %s", S(r)->id, strerror(errno));
        return;
    }
    const char *name = strchr(S(r)->id, '/') + 1;
    /* No fsync: it would block the loop for as long as the disk takes (a
     * gigabyte: seconds). The file is in the page cache, which a crash of
     * the daemon or the worker keeps; a power loss may not. */
    if (renameat(S(r)->dirfd, S(r)->tmp, S(r)->dirfd, name) < 0) {
        fail(c, "io", "cannot keep snapshot '%s': %s", S(r)->id, strerror(errno));
        return;
    }
    sup_snapdir_remember(S(r)->fd, ctx_tier(c), c->name, d->n); /* after the rename's ctime */
    free(S(r)->tmp);
    S(r)->tmp = NULL;
    sup_stats_event("snapshot ctx=%s snapshot=%s bytes=%llu", c->name, S(r)->id,
                    (unsigned long long)st.st_size);
    if (S(r)->internal) {
        c->autosnap_last = sup_now();
    } else {
        proto_buf b;
        proto_buf_init(&b);
        sup_msg_begin(&b, "ok", &r->peer, 2);
        proto_put_str(&b, "snapshot");
        proto_put_map(&b, 5);
        proto_put_str(&b, "id");
        proto_put_str(&b, S(r)->id);
        proto_put_str(&b, "ctx");
        proto_put_str(&b, c->name);
        proto_put_str(&b, "name");
        proto_put_str(&b, name);
        proto_put_str(&b, "size");
        proto_put_uint(&b, (uint64_t)st.st_size);
        proto_put_str(&b, "created");
        proto_put_double(&b, (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9);
        put_unsaved(&b, unsaved);
        sup_deliver(&r->peer, &b);
        proto_buf_free(&b);
    }
    end_snap(c, false);
}

/* A restore the worker says it did: the context takes the snapshot's
 * execution count. */
static void restored(sup_ctx *c, sup_run *r, const proto_val *data, const proto_val *unsaved)
{
    const proto_val *count = proto_map_get(data, "execution_count");
    const proto_val *n = proto_map_get(data, "restored");
    if (count && count->kind == PROTO_UINT && count->as.u < COUNT_MAX)
        c->execution_count = count->as.u;
    sup_stats_event("restore ctx=%s snapshot=%s", c->name, S(r)->id);
    if (S(r)->mode == SUP_SNAP_RESUME) {
        free(c->restored_from);
        c->restored_from = mem_strdup(S(r)->id);
    }
    if (!S(r)->internal) {
        proto_buf b;
        proto_buf_init(&b);
        sup_msg_begin(&b, "ok", &r->peer, 4);
        proto_put_str(&b, "ctx");
        sup_ctxinfo_put(&b, c);
        proto_put_str(&b, "snapshot");
        proto_put_str(&b, S(r)->id);
        proto_put_str(&b, "restored");
        proto_put_uint(&b, n && n->kind == PROTO_UINT ? n->as.u : 0);
        put_unsaved(&b, unsaved);
        sup_deliver(&r->peer, &b);
        proto_buf_free(&b);
    }
    end_snap(c, false);
}

/* The codes a worker may give a failure (anything else is `internal`). */
static const char *answer_code(const proto_val *v)
{
    static const char *const codes[] = {"too_large", "bad_snapshot", "io", "internal"};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (proto_str_eq(v, codes[i]))
            return codes[i];
    if (proto_str_eq(v, "interrupted"))
        return "aborted";
    return "internal";
}

static void snap_on_frame(sup_ctx *c, const char *type, const proto_val *msg)
{
    (void)type; /* "answer" (RULE_ANSWER, sup_frame.c) */
    static const proto_field fields[] = {
        {"ok", PF_BOOL, true, 0},
        {"size", PF_UINT, false, 0},
        {"code", PF_STR, false, 32},
        {"message", PF_STR, false, MESSAGE_MAX},
        {"needed", PF_UINT, false, 0},
        {"restored", PF_UINT, false, 0},
        {"execution_count", PF_UINT, false, 0},
    };
    sup_run *r = c->running;
    const proto_val *data = proto_map_get(msg, "data");
    const proto_val *unsaved = proto_map_get(data, "unsaved");
    proto_error err;
    if (!data || data->kind != PROTO_MAP ||
        proto_check(data, fields, sizeof fields / sizeof fields[0], &err) < 0 ||
        !unsaved_valid(unsaved)) {
        fail(c, "internal", "the worker of '%s' gave no usable %s answer", c->name, S(r)->op);
        return;
    }
    if (!proto_map_get(data, "ok")->as.b) {
        const proto_val *m = proto_map_get(data, "message");
        const char *code = answer_code(proto_map_get(data, "code"));
        fail(c, code, "%s of '%s' failed: %.*s", S(r)->op, S(r)->id, m ? (int)m->n : 0,
             m ? m->as.s : "");
        return;
    }
    if (S(r)->mode == SUP_SNAP_WRITE)
        written(c, r, data, unsaved);
    else
        restored(c, r, data, unsaved);
}

/* The kind's free: the file being written or read, its directory, its
 * copier, its names. */
static void snap_free(sup_run *r)
{
    if (S(r)->drain)
        S(r)->drop(S(r)->drain);
    if (S(r)->fd >= 0)
        close(S(r)->fd);
    if (S(r)->dirfd >= 0)
        close(S(r)->dirfd);
    free(S(r)->id);
    free(S(r)->tmp);
    free(r->data);
}

static const sup_run_kind snap_kind = {snap_start, snap_abort,      snap_on_frame,
                                       snap_free,  SUP_RUN_ANSWERS, NULL};

/* ---- autosnapshot ----------------------------------------------------- */

/* Contexts whose interval autosnapshot is due later: names and times. */
typedef struct due {
    char name[PROTO_MAX_NAME + 1];
    double at;
} due;
static due *dues;
static size_t ndues, cap_dues;

/* Queues an autosnapshot at the end of c's queue, unless the last thing
 * queued is one already (it will see this state and what comes before
 * it). */
static void queue_auto(sup_ctx *c)
{
    const sup_run *tail = c->run.queue_tail;
    if (c->run.queued >= sup_cfg.max_queue ||
        (tail && tail->kind == &snap_kind && S(tail)->mode == SUP_SNAP_WRITE && S(tail)->internal))
        return;
    sup_run_submit(c, new_run(SUP_SNAP_WRITE, NULL, c->name, AUTO_NAME));
}

/* After a run that ended ok (sup_frame_set_after_ok). */
static void after_ok(sup_ctx *c)
{
    if (c->autosnap == 0 || c->deleted)
        return;
    double now = sup_now();
    if (c->autosnap < 0 || c->autosnap_last == 0 || now - c->autosnap_last >= c->autosnap) {
        queue_auto(c);
        return;
    }
    for (size_t i = 0; i < ndues; i++)
        if (strcmp(dues[i].name, c->name) == 0)
            return; /* already due */
    if (ndues == cap_dues) {
        cap_dues = cap_dues ? 2 * cap_dues : 16;
        dues = mem_realloc(dues, cap_dues * sizeof *dues);
    }
    snprintf(dues[ndues].name, sizeof dues[ndues].name, "%s", c->name);
    dues[ndues++].at = c->autosnap_last + c->autosnap;
    sup_timer_moved();
}

double sup_snap_tick(double now)
{
    checks_done();
    double next = checks ? now + CHECK_POLL : 0;
    for (size_t i = 0; i < ndues;) {
        if (dues[i].at <= now) {
            sup_ctx *c = sup_ctx_find(dues[i].name, strlen(dues[i].name));
            if (c && c->autosnap > 0)
                queue_auto(c);
            dues[i] = dues[--ndues];
            continue;
        }
        if (next == 0 || dues[i].at < next)
            next = dues[i].at;
        i++;
    }
    return next;
}

void sup_snap_resume_all(void)
{
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next) {
        if (c->autosnap == 0)
            continue;
        int dfd = sup_snapdir_ctx_dir(c->name, false);
        int fd = dfd >= 0 ? openat(dfd, AUTO_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (dfd >= 0)
            close(dfd);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        sup_run *r = new_run(SUP_SNAP_RESUME, NULL, c->name, AUTO_NAME);
        S(r)->fd = fd;
        sup_run_submit(c, r);
    }
}

void sup_snap_init(void)
{
    sup_frame_set_after_ok(after_ok);
}
