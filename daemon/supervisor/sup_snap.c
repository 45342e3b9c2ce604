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
 * and policy never come from a snapshot. */
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
#include "sup_snapmac.h"
#include "sup_stats.h"

#include "mem.h"
#include "proto.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define AUTO_NAME "auto"       /* the name autosnapshots are kept under */
#define LIST_MAX 10000         /* ctx.snapshots lists at most this many */
#define UNSAVED_MAX 1000       /* items of an answer's `unsaved` */
#define MESSAGE_MAX 4096       /* an answer's `message` */
#define COUNT_MAX (1ull << 53) /* an execution count a restore may report */
#define ID_MAX (2 * PROTO_MAX_NAME + 2)

static const sup_run_kind snap_kind;

/* ---- the snapshot directory ------------------------------------------- */

/* STATE_DIR/snapshots, made on first use (0700); -1 with errno. */
static int root_dir(void)
{
    static int fd = -1;
    if (fd >= 0)
        return fd;
    const char *state = sup_auth_state_dir();
    if (!state) {
        errno = ENOENT;
        return -1;
    }
    int sfd = open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sfd < 0)
        return -1;
    if (mkdirat(sfd, "snapshots", 0700) < 0 && errno != EEXIST) {
        close(sfd);
        return -1;
    }
    fd = openat(sfd, "snapshots", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    close(sfd);
    errno = e;
    return fd;
}

/* The directory of ctx's snapshots (made when make); -1 with errno. */
static int ctx_dir(const char *ctx, bool make)
{
    int root = root_dir();
    if (root < 0)
        return -1;
    if (make && mkdirat(root, ctx, 0700) < 0 && errno != EEXIST)
        return -1;
    return openat(root, ctx, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* A snapshot file's name: a context name (so no '/', no leading '.'). */
static bool entry_is_snapshot(const struct dirent *d)
{
    return proto_name_valid(d->d_name, strlen(d->d_name));
}

/* Calls fn for every snapshot in dirfd (a context's directory); fn may
 * stop the walk by returning false. */
static void each_snapshot(int dirfd,
                          bool (*fn)(void *arg, int dirfd, const char *name, const struct stat *st),
                          void *arg)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (!entry_is_snapshot(e) || fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (!fn(arg, dirfd, e->d_name, &st))
            break;
    }
    closedir(d);
}

/* Calls fn for each context directory under the root (name and fd). */
static void each_ctx_dir(bool (*fn)(void *arg, const char *ctx, int dirfd), void *arg)
{
    int root = root_dir();
    int fd = root >= 0 ? dup(root) : -1;
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    rewinddir(d);
    struct dirent *e;
    bool go = true;
    while (go && (e = readdir(d)) != NULL) {
        if (!entry_is_snapshot(e))
            continue;
        int cfd = openat(root, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cfd < 0)
            continue;
        go = fn(arg, e->d_name, cfd);
        close(cfd);
    }
    closedir(d);
}

typedef struct tally {
    const char *skip; /* a name not counted (the one being replaced) */
    uint64_t count, bytes;
} tally;

static bool tally_one(void *arg, int dirfd, const char *name, const struct stat *st)
{
    (void)dirfd;
    tally *t = arg;
    if (t->skip && strcmp(name, t->skip) == 0)
        return true;
    t->count++;
    t->bytes += (uint64_t)st->st_size;
    return true;
}

static bool tally_dir(void *arg, const char *ctx, int dirfd)
{
    (void)ctx;
    tally *t = arg;
    tally sub = {NULL, 0, 0};
    each_snapshot(dirfd, tally_one, &sub);
    t->bytes += sub.bytes;
    t->count += sub.count;
    return true;
}

/* Bytes of all snapshots in the state directory (their temporary files
 * being written are not counted: each is capped by what was left). */
static uint64_t total_bytes(void)
{
    tally t = {NULL, 0, 0};
    each_ctx_dir(tally_dir, &t);
    return t.bytes;
}

/* Splits "CTX/NAME" (or "NAME", meaning dflt's) into its two names; false
 * when either is not a valid name. */
static bool parse_id(const proto_val *v, const char *dflt, char *ctx, char *name)
{
    if (!v || v->kind != PROTO_STR || v->n > ID_MAX)
        return false;
    const char *s = v->as.s;
    const char *slash = memchr(s, '/', v->n);
    size_t cn = slash ? (size_t)(slash - s) : 0;
    const char *n = slash ? slash + 1 : s;
    size_t nn = slash ? v->n - cn - 1 : v->n;
    if (slash ? !proto_name_valid(s, cn) : !dflt)
        return false;
    if (!proto_name_valid(n, nn))
        return false;
    if (slash)
        snprintf(ctx, PROTO_MAX_NAME + 1, "%.*s", (int)cn, s);
    else
        snprintf(ctx, PROTO_MAX_NAME + 1, "%s", dflt);
    snprintf(name, PROTO_MAX_NAME + 1, "%.*s", (int)nn, n);
    return true;
}

/* Opens snapshot CTX/NAME for reading: the descriptor, or -1 after
 * replying `err`. */
static int open_snapshot(const char *ctx, const char *name, const sup_peer *peer)
{
    int dfd = ctx_dir(ctx, false);
    int fd = dfd >= 0 ? openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK) : -1;
    int e = errno;
    if (dfd >= 0)
        close(dfd);
    if (fd < 0) {
        if (e == ENOENT)
            sup_reply_err(peer, "not_found", "no snapshot '%s/%s'", ctx, name);
        else
            sup_reply_err(peer, "io", "cannot open snapshot '%s/%s': %s", ctx, name, strerror(e));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        sup_reply_err(peer, "bad_snapshot", "snapshot '%s/%s' is not a regular file", ctx, name);
        close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > sup_cfg.max_snapshot_bytes) {
        sup_reply_err(peer, "too_large",
                      "snapshot '%s/%s' is %llu bytes, past max_snapshot_bytes (%llu)", ctx, name,
                      (unsigned long long)st.st_size,
                      (unsigned long long)sup_cfg.max_snapshot_bytes);
        close(fd);
        return -1;
    }
    (void)fcntl(fd, F_SETFL, 0); /* the worker reads it blocking */
    return fd;
}

/* ---- queueing --------------------------------------------------------- */

static sup_run *new_run(int mode, const sup_peer *peer, const char *ctx, const char *name)
{
    sup_run *r = mem_calloc(1, sizeof *r);
    r->kind = &snap_kind;
    if (peer)
        r->peer = *peer;
    else
        r->snap_internal = true;
    r->snap_mode = mode;
    r->query_op = mode == SUP_SNAP_WRITE ? "snapshot" : "restore";
    r->fork_fd = r->fork_out_rd[0] = r->fork_out_rd[1] = -1;
    r->snap_fd = r->snap_dirfd = -1;
    char id[ID_MAX + 1];
    snprintf(id, sizeof id, "%s/%s", ctx, name);
    r->snap_id = mem_strdup(id);
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
    if (!parse_id(proto_map_get(msg, "snapshot"), c->name, ctx, name)) {
        sup_reply_err(peer, "bad_name",
                      "field 'snapshot' must be NAME or CTX/NAME (names as "
                      "contexts' names)");
        return;
    }
    int fd = open_snapshot(ctx, name, peer);
    if (fd < 0)
        return;
    sup_run *r = new_run(SUP_SNAP_RESTORE, peer, ctx, name);
    r->snap_fd = fd;
    sup_run_submit(c, r);
}

int sup_snap_open_for_create(const proto_val *id, const sup_peer *peer)
{
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    if (!parse_id(id, NULL, ctx, name)) {
        sup_reply_err(peer, "bad_name",
                      "field 'from_snapshot' must be CTX/NAME (names as "
                      "contexts' names)");
        return -1;
    }
    return open_snapshot(ctx, name, peer);
}

void sup_snap_create_restore(sup_ctx *c, int fd, const char *id, const sup_peer *peer)
{
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    proto_val v = {.kind = PROTO_STR, .n = (uint32_t)strlen(id), .as.s = id};
    if (!parse_id(&v, NULL, ctx, name)) /* checked by sup_snap_open_for_create */
        fatal("from_snapshot id changed");
    sup_run *r = new_run(SUP_SNAP_CREATE, peer, ctx, name);
    r->snap_fd = fd;
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

/* ---- who wrote it ----------------------------------------------------- */

/* Unpickling runs the file's code, so a snapshot is restored only into a
 * context at least as confined as its writer: a sandboxed cell never gets
 * its code run unconfined by a restore. The writer's tier is the one in
 * the file's tag (sup_snapmac.h), which only the supervisor can make; a
 * file without a tag that verifies (copied in by hand, forged, changed)
 * is of the sandbox tier. ctx.snapshot_export and ctx.snapshot_import
 * carry the tier between daemons under the operator's export key. */
static const char *const tier_names[] = {
    [SUP_TIER_STATIC] = "static",
    [SUP_TIER_UNSAFE] = "unsafe",
    [SUP_TIER_LOCAL] = "local",
    [SUP_TIER_SANDBOX] = "sandbox",
};

static sup_tier ctx_tier(const sup_ctx *c)
{
    return c->policy ? c->policy->tier : SUP_TIER_UNSAFE;
}

/* Files of the snapshot directory this daemon tagged or verified under its
 * own key since it started, by inode, size and change time: reading a
 * gigabyte again to check a tag the daemon wrote itself is what a restore
 * would cost most. Any write to a file moves its change time (which only
 * root can set back), no worker holds a writable descriptor of one, and
 * the state directory is root's: an entry that matches is the file that
 * was checked. */
#define VERIFIED_MAX 1024
typedef struct verified_file {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec ctime;
    sup_tier tier;
    uint64_t content_len;
    char origin[PROTO_MAX_NAME + 1];
} verified_file;
static verified_file verified_files[VERIFIED_MAX];
static size_t verified_next;

static bool same_file(const verified_file *v, const struct stat *st)
{
    return v->ino == st->st_ino && v->dev == st->st_dev && v->size == st->st_size &&
           v->ctime.tv_sec == st->st_ctim.tv_sec && v->ctime.tv_nsec == st->st_ctim.tv_nsec;
}

/* Remembers the file on fd as tagged (own key) with tier, origin, len. */
static void remember_verified(int fd, sup_tier tier, const char *origin, uint64_t len)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return;
    verified_file *v = &verified_files[verified_next++ % VERIFIED_MAX];
    *v = (verified_file){st.st_dev, st.st_ino, st.st_size, st.st_ctim, tier, len, ""};
    snprintf(v->origin, sizeof v->origin, "%s", origin);
}

/* The writer's tier of the snapshot on fd by its tag under key (the
 * sandbox tier when it does not verify), *verified whether it did, and
 * the length of the content a worker reads. */
/* Whether the file on fd is one checked before (then its tier, origin and
 * content length). */
static bool cached_tier(int fd, sup_tier *tier, char *origin, uint64_t *content_len)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return false;
    for (size_t i = 0; i < VERIFIED_MAX; i++)
        if (same_file(&verified_files[i], &st)) {
            *tier = verified_files[i].tier;
            *content_len = verified_files[i].content_len;
            snprintf(origin, PROTO_MAX_NAME + 1, "%s", verified_files[i].origin);
            return true;
        }
    return false;
}

static sup_tier tagged_tier(int fd, sup_snapmac_key key, bool *verified, char *origin,
                            uint64_t *content_len)
{
    sup_tier cached;
    if (key == SUP_SNAPMAC_OWN && cached_tier(fd, &cached, origin, content_len)) {
        *verified = true;
        return cached;
    }
    int t;
    *verified = sup_snapmac_verify(fd, key, &t, origin, content_len);
    if (!*verified || t < SUP_TIER_UNSAFE || t > SUP_TIER_SANDBOX)
        return SUP_TIER_SANDBOX;
    if (key == SUP_SNAPMAC_OWN)
        remember_verified(fd, (sup_tier)t, origin, *content_len);
    return (sup_tier)t;
}

/* ---- the pipe a snapshot comes through --------------------------------- */

/* What the worker writes to the pipe is records, each a u64 (little-
 * endian): a length, then that many bytes of the file; or, with bit 63
 * set, an offset at most what was written, to which the file goes back
 * (the worker writes the stream again without the globals that failed). */
#define DRAIN_CHUNK (1 << 20)
#define DRAIN_RESET (1ull << 63)
#define PIPE_BYTES (8 << 20)

typedef struct sup_snap_drain {
    pthread_t thread, hasher;
    bool running;
    int rd, evfd, out;
    uint64_t max;
    sup_snapmac *mac;
    atomic_bool stop; /* set with a write to evfd: take what is there, end */
    /* Under mu: the file's length so far, how much of it the hasher took
     * into mac, the number of the last reset (the hasher starts over),
     * whether the copier ended; cv: any of them moved. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t n, hashed;
    unsigned gen;
    bool copied;
    /* Why the file is not the snapshot (set by the copier, under mu; read
     * by the loop after the join), and a fault of the hasher's. */
    const char *bad;
    int bad_errno;
    bool hash_failed;
    /* A restore whose file's tag a thread checks (verifier) while the
     * loop goes on: its result when checked is set, the context and run
     * it is for, and the next such check (the list the tick looks at). */
    bool verifying;
    pthread_t verifier;
    atomic_bool checked;
    bool ok;
    int tier;
    uint64_t content_len;
    char origin[PROTO_MAX_NAME + 1];
    sup_ctx *ctx;
    sup_run *run;
    struct sup_snap_drain *next_check;
} sup_snap_drain;

static sup_snap_drain *checks; /* restores whose tags are being checked */

static void drain_fail(sup_snap_drain *d, const char *why, int e)
{
    pthread_mutex_lock(&d->mu);
    if (!d->bad) {
        d->bad = why;
        d->bad_errno = e;
    }
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* The hasher's thread: the file's bytes into the HMAC as the copier writes
 * them (read back from the page cache), so the two run side by side. */
static void *hash_main(void *arg)
{
    sup_snap_drain *d = arg;
    unsigned char *buf = mem_alloc(DRAIN_CHUNK);
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->hashed == d->n && !d->copied && !d->bad)
            pthread_cond_wait(&d->cv, &d->mu);
        if (d->bad || (d->hashed == d->n && d->copied))
            break;
        uint64_t at = d->hashed;
        size_t want = d->n - at < DRAIN_CHUNK ? (size_t)(d->n - at) : DRAIN_CHUNK;
        unsigned gen = d->gen;
        pthread_mutex_unlock(&d->mu);
        ssize_t k = pread(d->out, buf, want, (off_t)at);
        if (k > 0)
            sup_snapmac_add(d->mac, buf, (uint64_t)k);
        pthread_mutex_lock(&d->mu);
        if (d->gen != gen) { /* the file went back: start over */
            sup_snapmac_reset(d->mac);
            d->hashed = 0;
            continue;
        }
        if (k <= 0) {
            d->hash_failed = true;
            break;
        }
        d->hashed += (uint64_t)k;
    }
    pthread_mutex_unlock(&d->mu);
    free(buf);
    return NULL;
}

/* Moves len bytes of the record being read from the pipe to the file's
 * end (splice: no copy); false (d->bad set) when it cannot. The bytes
 * moved, through *moved (0 when the pipe was empty). */
static bool drain_move(sup_snap_drain *d, uint64_t len, unsigned flags, size_t *moved)
{
    pthread_mutex_lock(&d->mu);
    loff_t off = (loff_t)d->n;
    pthread_mutex_unlock(&d->mu);
    size_t want = len < DRAIN_CHUNK ? (size_t)len : DRAIN_CHUNK;
    ssize_t k = splice(d->rd, NULL, d->out, &off, want, SPLICE_F_MOVE | flags);
    *moved = 0;
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
        return true;
    if (k <= 0) {
        drain_fail(d, k == 0 ? "internal" : "io", k == 0 ? 0 : errno);
        return false;
    }
    pthread_mutex_lock(&d->mu);
    d->n += (uint64_t)k;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    *moved = (size_t)k;
    return true;
}

/* Takes the file back to off (the hasher starts over). */
static bool drain_reset(sup_snap_drain *d, uint64_t off)
{
    pthread_mutex_lock(&d->mu);
    bool ok = off <= d->n && ftruncate(d->out, (off_t)off) == 0;
    int e = errno;
    if (ok) {
        d->n = off;
        d->gen++;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    if (!ok)
        drain_fail(d, off > d->n ? "internal" : "io", e);
    return ok;
}

/* The copier's thread: the pipe into the file until its end, a fault, the
 * cap, or the stop (then what the pipe holds, without waiting). Closing
 * its read end makes the worker's further writes fail. */
static void *drain_main(void *arg)
{
    sup_snap_drain *d = arg;
    unsigned char hdr[8];
    size_t hn = 0;
    uint64_t left = 0; /* bytes of the record being read still to come */
    bool stopping = false;
    size_t last = 0; /* once stopping: what the pipe held then, left to read */
    while (!d->bad) {
        if (!stopping) {
            struct pollfd p[2] = {{d->rd, POLLIN, 0}, {d->evfd, POLLIN, 0}};
            if (poll(p, 2, -1) < 0 && errno != EINTR) {
                drain_fail(d, "io", errno);
                break;
            }
            if (atomic_load(&d->stop)) {
                /* The worker wrote everything before it answered: what
                 * the pipe holds now is the rest (at most the pipe's
                 * size); what it writes later is not read. */
                int avail = 0;
                stopping = true;
                (void)fcntl(d->rd, F_SETFL, O_NONBLOCK);
                if (ioctl(d->rd, FIONREAD, &avail) < 0 || avail <= 0)
                    break;
                last = (size_t)avail;
            } else if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
                continue;
            }
        }
        if (stopping && last == 0)
            break;
        size_t got = 0;
        if (left) {
            uint64_t want = stopping && last < left ? last : left;
            if (!drain_move(d, want, stopping ? SPLICE_F_NONBLOCK : 0, &got))
                break;
            left -= got;
        } else {
            size_t want = stopping && last < 8 - hn ? last : 8 - hn;
            ssize_t k = read(d->rd, hdr + hn, want);
            if (k == 0)
                break; /* the worker closed its end */
            if (k < 0) {
                if (errno != EAGAIN && errno != EINTR)
                    drain_fail(d, "io", errno);
                if (errno == EINTR || (errno == EAGAIN && !stopping))
                    continue;
                break;
            }
            got = (size_t)k;
            hn += got;
            if (hn == 8) {
                hn = 0;
                uint64_t v = 0;
                for (int j = 7; j >= 0; j--)
                    v = v << 8 | hdr[j];
                pthread_mutex_lock(&d->mu);
                uint64_t n = d->n;
                pthread_mutex_unlock(&d->mu);
                if (v & DRAIN_RESET)
                    (void)drain_reset(d, v & ~DRAIN_RESET);
                else if (n + v > d->max) /* the cap: known from the length */
                    drain_fail(d, "too_large", 0);
                else
                    left = v;
            }
        }
        if (stopping) {
            if (got == 0)
                break; /* nothing more was there */
            last -= got;
        }
    }
    if (!d->bad && (left || hn))
        drain_fail(d, "internal", 0); /* a record cut short */
    close(d->rd);
    d->rd = -1;
    pthread_mutex_lock(&d->mu);
    d->copied = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* Ends the copier (it takes what the pipe holds first) and waits for it. */
static void drain_join(sup_snap_drain *d)
{
    if (!d->running)
        return;
    atomic_store(&d->stop, true);
    uint64_t one = 1;
    if (write(d->evfd, &one, sizeof one) != sizeof one)
        fatal("eventfd write: %s", strerror(errno));
    pthread_join(d->thread, NULL);
    pthread_join(d->hasher, NULL);
    d->running = false;
    if (d->hash_failed && !d->bad) {
        d->bad = "io";
        d->bad_errno = EIO;
    }
}

/* sup_run.snap_drop: the copier ended and freed. */
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
    drain_join(d);
    if (d->rd >= 0)
        close(d->rd);
    close(d->evfd);
    sup_snapmac_free(d->mac);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

/* Starts copying a pipe into out (capped at max); the pipe's write end for
 * the worker in *wfd, or NULL with errno. */
static sup_snap_drain *drain_start(int out, uint64_t max, int *wfd)
{
    sup_snapmac *mac = sup_snapmac_new(SUP_SNAPMAC_OWN);
    if (!mac)
        return NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        sup_snapmac_free(mac);
        return NULL;
    }
    (void)fcntl(p[0], F_SETPIPE_SZ, PIPE_BYTES);
    sup_snap_drain *d = mem_calloc(1, sizeof *d);
    d->rd = p[0];
    d->out = out;
    d->max = max;
    d->mac = mac;
    d->evfd = eventfd(0, EFD_CLOEXEC);
    if (d->evfd < 0)
        fatal("eventfd: %s", strerror(errno));
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    int e = pthread_create(&d->thread, NULL, drain_main, d);
    if (!e)
        e = pthread_create(&d->hasher, NULL, hash_main, d);
    if (e)
        fatal("pthread_create: %s", strerror(e));
    d->running = true;
    *wfd = p[1];
    return d;
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
    if (r->snap_tmp && r->snap_dirfd >= 0)
        (void)unlinkat(r->snap_dirfd, r->snap_tmp, 0);
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
    if (r->snap_internal)
        sup_stats_event("%s-failed ctx=%s snapshot=%s error=\"%s\"",
                        r->snap_mode == SUP_SNAP_WRITE ? "autosnapshot" : "restore", c->name,
                        r->snap_id, msg);
    else
        sup_reply_err(&r->peer, code, "%s", msg);
    end_snap(c, r->snap_mode == SUP_SNAP_CREATE);
}

/* The `snapshot` frame: the file is made under a temporary name and its
 * copier started; the pipe's write end for the worker, or -1 after the run
 * failed and ended. */
static int start_write(sup_ctx *c, sup_run *r, proto_buf *b)
{
    const char *name = strchr(r->snap_id, '/') + 1;
    r->snap_dirfd = ctx_dir(c->name, true);
    if (r->snap_dirfd < 0) {
        fail(c, "io", "cannot open the snapshot directory of '%s': %s", c->name, strerror(errno));
        return -1;
    }
    tally mine = {name, 0, 0};
    each_snapshot(r->snap_dirfd, tally_one, &mine);
    if (mine.count >= sup_cfg.max_snapshots) {
        fail(c, "limit",
             "context '%s' already has %llu snapshots (max_snapshots); delete one "
             "(ctx.snapshot_delete) first",
             c->name, (unsigned long long)mine.count);
        return -1;
    }
    struct stat old;
    uint64_t replaced =
        fstatat(r->snap_dirfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(old.st_mode)
            ? (uint64_t)old.st_size
            : 0;
    uint64_t total = total_bytes() - replaced;
    uint64_t left = total < sup_cfg.max_snapshot_total ? sup_cfg.max_snapshot_total - total : 0;
    r->snap_max = left < sup_cfg.max_snapshot_bytes ? left : sup_cfg.max_snapshot_bytes;
    /* The file holds the worker's bytes and the tag. */
    r->snap_max = r->snap_max > SUP_SNAPMAC_TAG ? r->snap_max - SUP_SNAPMAC_TAG : 0;
    char tmp[PROTO_MAX_NAME + 40];
    snprintf(tmp, sizeof tmp, ".%s.%016llx.tmp", name, (unsigned long long)r->run_id);
    r->snap_fd =
        openat(r->snap_dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (r->snap_fd < 0) {
        fail(c, "io", "cannot create snapshot '%s': %s", r->snap_id, strerror(errno));
        return -1;
    }
    r->snap_tmp = mem_strdup(tmp);
    int wfd = -1;
    r->snap_drain = drain_start(r->snap_fd, r->snap_max, &wfd);
    if (!r->snap_drain) {
        fail(c, "io", "cannot start snapshot '%s': %s (the daemon's key %s/snapshot.key)",
             r->snap_id, strerror(errno), sup_auth_state_dir());
        return -1;
    }
    r->snap_drop = drain_drop;
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
    proto_put_uint(b, r->snap_max);
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
    if (pass != r->snap_fd)
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
    sup_log("%s ctx=%s snapshot=%s: frame sent", r->query_op, c->name, r->snap_id);
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
                 r->snap_id, tier_names[w], w == SUP_TIER_SANDBOX ? "sandbox" : "local or sandbox",
                 tier_names[ctx_tier(c)]);
        else
            fail(c, "forbidden",
                 "snapshot '%s' has no writer's mark this daemon made (copied in by hand, "
                 "forged or changed): restoring it runs its code, so it goes only into a "
                 "sandbox context (this one is %s); to move snapshots between daemons use "
                 "ctx.snapshot_export and ctx.snapshot_import",
                 r->snap_id, tier_names[ctx_tier(c)]);
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
    send_snap_frame(c, r, &b, r->snap_fd);
}

/* The verifier's thread: the tag of a restore's file checked. */
static void *verify_main(void *arg)
{
    sup_snap_drain *d = arg;
    d->ok =
        sup_snapmac_verify(d->run->snap_fd, SUP_SNAPMAC_OWN, &d->tier, d->origin, &d->content_len);
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
    if (r->snap_mode == SUP_SNAP_WRITE) {
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
    if (cached_tier(r->snap_fd, &w, origin, &content_len)) {
        restore_go(c, r, w, true, content_len);
        return;
    }
    if (fstat(r->snap_fd, &st) < 0 || st.st_size < VERIFY_INLINE_MAX) {
        bool verified;
        w = tagged_tier(r->snap_fd, SUP_SNAPMAC_OWN, &verified, origin, &content_len);
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
    r->snap_drain = d;
    r->snap_drop = drain_drop;
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
            remember_verified(r->snap_fd, w, d->origin, len);
        r->snap_drain = NULL;
        r->snap_drop = NULL;
        free(d);
        if (c->running != r)
            fatal("a snapshot's check outlived its run");
        restore_go(c, r, w, ok, len);
    }
}

static void snap_abort(const sup_run *r, const char *status, const char *cause)
{
    drop_tmp(r);
    if (r->snap_internal) {
        sup_stats_event("snapshot-aborted snapshot=%s cause=\"%s\"", r->snap_id,
                        cause ? cause : status);
        return;
    }
    sup_reply_err(&r->peer, "aborted", "the %s of '%s' did not complete: %s", r->query_op,
                  r->snap_id, cause ? cause : status);
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
    sup_snap_drain *d = r->snap_drain;
    drain_join(d); /* what the pipe holds now is all there is */
    const proto_val *size = proto_map_get(data, "size");
    if (d->bad && strcmp(d->bad, "too_large") == 0) {
        fail(c, "too_large",
             "the snapshot would need more than %llu bytes, the cap (max_snapshot_bytes, or what "
             "max_snapshot_total leaves, less the %d bytes of its tag)",
             (unsigned long long)r->snap_max, SUP_SNAPMAC_TAG);
        return;
    }
    if (d->bad) {
        fail(c, strcmp(d->bad, "io") == 0 ? "io" : "internal",
             "snapshot '%s' did not come through whole from the worker of '%s'%s%s", r->snap_id,
             c->name, d->bad_errno ? ": " : "", d->bad_errno ? strerror(d->bad_errno) : "");
        return;
    }
    if (!size || size->as.u != d->n) {
        fail(c, "internal",
             "the worker of '%s' says snapshot '%s' is %llu bytes; %llu came through the pipe",
             c->name, r->snap_id, size ? (unsigned long long)size->as.u : 0ull,
             (unsigned long long)d->n);
        return;
    }
    sup_snapmac *mac = d->mac;
    d->mac = NULL;
    if (!sup_snapmac_seal(mac, r->snap_fd, d->n, (int)ctx_tier(c), c->name)) {
        fail(c, "io", "cannot write the tag of snapshot '%s': %s", r->snap_id, strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(r->snap_fd, &st) < 0) {
        fail(c, "io", "cannot read the size of snapshot '%s': %s", r->snap_id, strerror(errno));
        return;
    }
    const char *name = strchr(r->snap_id, '/') + 1;
    /* No fsync: it would block the loop for as long as the disk takes (a
     * gigabyte: seconds). The file is in the page cache, which a crash of
     * the daemon or the worker keeps; a power loss may not. */
    if (renameat(r->snap_dirfd, r->snap_tmp, r->snap_dirfd, name) < 0) {
        fail(c, "io", "cannot keep snapshot '%s': %s", r->snap_id, strerror(errno));
        return;
    }
    remember_verified(r->snap_fd, ctx_tier(c), c->name, d->n); /* after the rename's ctime */
    free(r->snap_tmp);
    r->snap_tmp = NULL;
    sup_stats_event("snapshot ctx=%s snapshot=%s bytes=%llu", c->name, r->snap_id,
                    (unsigned long long)st.st_size);
    if (r->snap_internal) {
        c->autosnap_last = sup_now();
    } else {
        proto_buf b;
        proto_buf_init(&b);
        sup_msg_begin(&b, "ok", &r->peer, 2);
        proto_put_str(&b, "snapshot");
        proto_put_map(&b, 5);
        proto_put_str(&b, "id");
        proto_put_str(&b, r->snap_id);
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
    sup_stats_event("restore ctx=%s snapshot=%s", c->name, r->snap_id);
    if (r->snap_mode == SUP_SNAP_RESUME) {
        free(c->restored_from);
        c->restored_from = mem_strdup(r->snap_id);
    }
    if (!r->snap_internal) {
        proto_buf b;
        proto_buf_init(&b);
        sup_msg_begin(&b, "ok", &r->peer, 4);
        proto_put_str(&b, "ctx");
        sup_ctxinfo_put(&b, c);
        proto_put_str(&b, "snapshot");
        proto_put_str(&b, r->snap_id);
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
        fail(c, "internal", "the worker of '%s' gave no usable %s answer", c->name, r->query_op);
        return;
    }
    if (!proto_map_get(data, "ok")->as.b) {
        const proto_val *m = proto_map_get(data, "message");
        const char *code = answer_code(proto_map_get(data, "code"));
        fail(c, code, "%s of '%s' failed: %.*s", r->query_op, r->snap_id, m ? (int)m->n : 0,
             m ? m->as.s : "");
        return;
    }
    if (r->snap_mode == SUP_SNAP_WRITE)
        written(c, r, data, unsaved);
    else
        restored(c, r, data, unsaved);
}

static const sup_run_kind snap_kind = {snap_start, snap_abort, snap_on_frame, NULL};

/* ---- ctx.snapshots, ctx.snapshot_delete -------------------------------- */

typedef struct listing {
    proto_buf items;
    uint32_t n;
    const char *ctx;
} listing;

static bool list_one(void *arg, int dirfd, const char *name, const struct stat *st)
{
    (void)dirfd;
    listing *l = arg;
    if (l->n >= LIST_MAX)
        return false;
    char id[ID_MAX + 1];
    snprintf(id, sizeof id, "%s/%s", l->ctx, name);
    proto_put_map(&l->items, 5);
    proto_put_str(&l->items, "id");
    proto_put_str(&l->items, id);
    proto_put_str(&l->items, "ctx");
    proto_put_str(&l->items, l->ctx);
    proto_put_str(&l->items, "name");
    proto_put_str(&l->items, name);
    proto_put_str(&l->items, "size");
    proto_put_uint(&l->items, (uint64_t)st->st_size);
    proto_put_str(&l->items, "created");
    proto_put_double(&l->items, (double)st->st_mtim.tv_sec + st->st_mtim.tv_nsec / 1e9);
    l->n++;
    return true;
}

static bool list_dir(void *arg, const char *ctx, int dirfd)
{
    listing *l = arg;
    l->ctx = ctx;
    each_snapshot(dirfd, list_one, l);
    return l->n < LIST_MAX;
}

void sup_snap_list(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *ctx = proto_map_get(msg, "ctx");
    listing l;
    proto_buf_init(&l.items);
    l.n = 0;
    if (ctx && ctx->kind == PROTO_STR) {
        char name[PROTO_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)ctx->n, ctx->as.s);
        int dfd = ctx_dir(name, false);
        if (dfd >= 0) {
            list_dir(&l, name, dfd);
            close(dfd);
        }
    } else {
        each_ctx_dir(list_dir, &l);
    }
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 2);
    proto_put_str(&b, "snapshots");
    proto_put_array(&b, l.n);
    proto_buf_append(&b, l.items.data, l.items.len);
    proto_put_str(&b, "total_bytes");
    proto_put_uint(&b, total_bytes());
    sup_deliver(peer, &b);
    proto_buf_free(&b);
    proto_buf_free(&l.items);
}

void sup_snap_delete(const proto_val *msg, const sup_peer *peer)
{
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    if (!parse_id(proto_map_get(msg, "snapshot"), NULL, ctx, name)) {
        sup_reply_err(peer, "bad_name", "field 'snapshot' must be CTX/NAME");
        return;
    }
    int dfd = ctx_dir(ctx, false);
    struct stat st;
    int rc = dfd < 0                                            ? -1
             : fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -1
             : !S_ISREG(st.st_mode)                             ? (errno = ENOENT, -1)
                                                                : unlinkat(dfd, name, 0);
    int e = errno;
    if (dfd >= 0) {
        (void)unlinkat(dfd, ".", AT_REMOVEDIR); /* fails unless empty: fine */
        close(dfd);
    }
    if (rc < 0) {
        sup_reply_err(peer, e == ENOENT ? "not_found" : "io", "cannot delete snapshot '%s/%s': %s",
                      ctx, name, e == ENOENT ? "no such snapshot" : strerror(e));
        return;
    }
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 0);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

/* ---- ctx.snapshot_export, ctx.snapshot_import ----------------------- */

/* STATE_DIR/SUB/CTX (both made 0700 when make); -1 with errno. */
static int side_dir(const char *sub, const char *ctx, bool make)
{
    const char *state = sup_auth_state_dir();
    int sfd = state ? open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (sfd < 0)
        return -1;
    if (make)
        (void)mkdirat(sfd, sub, 0700);
    int dfd = openat(sfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    close(sfd);
    if (dfd < 0) {
        errno = e;
        return -1;
    }
    if (make)
        (void)mkdirat(dfd, ctx, 0700);
    int cfd = openat(dfd, ctx, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    e = errno;
    close(dfd);
    errno = e;
    return cfd;
}

/* Copies the first len bytes of src into dirfd/NAME (through a temporary
 * name), tagged under key as written by a context named origin of tier
 * tier; false with errno. */
static bool copy_tagged(int src, uint64_t len, int dirfd, const char *name, sup_snapmac_key key,
                        sup_tier tier, const char *origin)
{
    char tmp[PROTO_MAX_NAME + 40];
    snprintf(tmp, sizeof tmp, ".%s.%08x.tmp", name, (unsigned)rand());
    sup_snapmac *m = sup_snapmac_new(key);
    if (!m)
        return false;
    int out = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) {
        int e = errno;
        sup_snapmac_free(m);
        errno = e;
        return false;
    }
    unsigned char *buf = mem_alloc(DRAIN_CHUNK);
    bool ok = true;
    for (uint64_t at = 0; ok && at < len;) {
        size_t want = len - at < DRAIN_CHUNK ? (size_t)(len - at) : DRAIN_CHUNK;
        ssize_t k = pread(src, buf, want, (off_t)at);
        if (k <= 0) {
            if (k == 0)
                errno = EIO;
            ok = false;
            break;
        }
        sup_snapmac_add(m, buf, (uint64_t)k);
        for (ssize_t w = 0; ok && w < k;) {
            ssize_t n = pwrite(out, buf + w, (size_t)(k - w), (off_t)(at + (uint64_t)w));
            if (n <= 0)
                ok = false;
            else
                w += n;
        }
        at += (uint64_t)k;
    }
    free(buf);
    if (ok)
        ok = sup_snapmac_seal(m, out, len, (int)tier, origin);
    else
        sup_snapmac_free(m);
    if (ok)
        ok = renameat(dirfd, tmp, dirfd, name) == 0;
    if (ok && key == SUP_SNAPMAC_OWN)
        remember_verified(out, tier, origin, len);
    int e = errno;
    close(out);
    if (!ok)
        (void)unlinkat(dirfd, tmp, 0);
    errno = e;
    return ok;
}

void sup_snap_export(const proto_val *msg, const sup_peer *peer)
{
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    if (!parse_id(proto_map_get(msg, "snapshot"), NULL, ctx, name)) {
        sup_reply_err(peer, "bad_name", "field 'snapshot' must be CTX/NAME");
        return;
    }
    int fd = open_snapshot(ctx, name, peer);
    if (fd < 0)
        return;
    bool verified;
    char origin[PROTO_MAX_NAME + 1];
    uint64_t len;
    sup_tier tier = tagged_tier(fd, SUP_SNAPMAC_OWN, &verified, origin, &len);
    if (!verified)
        snprintf(origin, sizeof origin, "%s", ctx);
    int dfd = side_dir("exports", ctx, true);
    sup_snapmac *probe = dfd >= 0 ? sup_snapmac_new(SUP_SNAPMAC_EXPORT) : NULL;
    if (!probe) {
        int e = errno;
        close(fd);
        if (dfd >= 0)
            close(dfd);
        sup_reply_err(peer, e == ENOENT ? "no_key" : "io", "cannot export snapshot '%s/%s': %s%s",
                      ctx, name, strerror(e),
                      dfd >= 0 ? " (the operator's key: STATE_DIR/export.key, 16 to 4096 bytes, "
                                 "the same file on both daemons)"
                               : "");
        return;
    }
    sup_snapmac_free(probe);
    bool ok = copy_tagged(fd, len, dfd, name, SUP_SNAPMAC_EXPORT, tier, origin);
    int e = errno;
    close(fd);
    close(dfd);
    if (!ok) {
        sup_reply_err(peer, "io", "cannot export snapshot '%s/%s': %s", ctx, name, strerror(e));
        return;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/exports/%s/%s", sup_auth_state_dir(), ctx, name);
    sup_stats_event("snapshot-export snapshot=%s/%s tier=%s", ctx, name, tier_names[tier]);
    proto_buf b;
    proto_buf_init(&b);
    char id[ID_MAX + 1];
    snprintf(id, sizeof id, "%s/%s", ctx, name);
    sup_msg_begin(&b, "ok", peer, 4);
    proto_put_str(&b, "snapshot");
    proto_put_str(&b, id);
    proto_put_str(&b, "path");
    proto_put_str(&b, path);
    proto_put_str(&b, "tier");
    proto_put_str(&b, tier_names[tier]);
    proto_put_str(&b, "size");
    proto_put_uint(&b, len + SUP_SNAPMAC_TAG);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

void sup_snap_import(const proto_val *msg, const sup_peer *peer)
{
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    if (!parse_id(proto_map_get(msg, "snapshot"), NULL, ctx, name)) {
        sup_reply_err(peer, "bad_name", "field 'snapshot' must be CTX/NAME");
        return;
    }
    int idir = side_dir("imports", ctx, false);
    int fd = idir >= 0 ? openat(idir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK) : -1;
    int e = errno;
    if (idir >= 0)
        close(idir);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        sup_reply_err(peer, e == ENOENT ? "not_found" : "io",
                      "no file to import at STATE_DIR/imports/%s/%s%s%s (put ctx.snapshot_export's "
                      "file there)",
                      ctx, name, e == ENOENT ? "" : ": ", e == ENOENT ? "" : strerror(e));
        return;
    }
    uint64_t total = total_bytes();
    if ((uint64_t)st.st_size > sup_cfg.max_snapshot_bytes ||
        total + (uint64_t)st.st_size > sup_cfg.max_snapshot_total) {
        close(fd);
        sup_reply_err(peer, "too_large",
                      "the file to import is %llu bytes: past max_snapshot_bytes (%llu) or what "
                      "max_snapshot_total leaves",
                      (unsigned long long)st.st_size,
                      (unsigned long long)sup_cfg.max_snapshot_bytes);
        return;
    }
    bool verified;
    char origin[PROTO_MAX_NAME + 1];
    uint64_t len;
    sup_tier tier = tagged_tier(fd, SUP_SNAPMAC_EXPORT, &verified, origin, &len);
    if (!verified) {
        close(fd);
        sup_reply_err(peer, "bad_snapshot",
                      "STATE_DIR/imports/%s/%s is not a snapshot exported under this daemon's "
                      "STATE_DIR/export.key (its tag does not verify: another key, changed, or "
                      "no export)",
                      ctx, name);
        return;
    }
    int dfd = ctx_dir(ctx, true);
    tally mine = {name, 0, 0};
    if (dfd >= 0)
        each_snapshot(dfd, tally_one, &mine);
    if (dfd >= 0 && mine.count >= sup_cfg.max_snapshots) {
        close(fd);
        close(dfd);
        sup_reply_err(peer, "limit", "context '%s' already has %llu snapshots (max_snapshots)", ctx,
                      (unsigned long long)mine.count);
        return;
    }
    bool ok = dfd >= 0 && copy_tagged(fd, len, dfd, name, SUP_SNAPMAC_OWN, tier, origin);
    e = errno;
    close(fd);
    struct stat out;
    if (ok && fstatat(dfd, name, &out, AT_SYMLINK_NOFOLLOW) < 0)
        ok = false;
    if (dfd >= 0)
        close(dfd);
    if (!ok) {
        sup_reply_err(peer, "io", "cannot import snapshot '%s/%s': %s", ctx, name, strerror(e));
        return;
    }
    char id[ID_MAX + 1];
    snprintf(id, sizeof id, "%s/%s", ctx, name);
    sup_stats_event("snapshot-import snapshot=%s tier=%s", id, tier_names[tier]);
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 1);
    proto_put_str(&b, "snapshot");
    proto_put_map(&b, 6);
    proto_put_str(&b, "id");
    proto_put_str(&b, id);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, ctx);
    proto_put_str(&b, "name");
    proto_put_str(&b, name);
    proto_put_str(&b, "size");
    proto_put_uint(&b, (uint64_t)out.st_size);
    proto_put_str(&b, "created");
    proto_put_double(&b, (double)out.st_mtim.tv_sec + out.st_mtim.tv_nsec / 1e9);
    proto_put_str(&b, "tier");
    proto_put_str(&b, tier_names[tier]);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

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
        (tail && tail->snap_mode == SUP_SNAP_WRITE && tail->snap_internal))
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
        int dfd = ctx_dir(c->name, false);
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
        r->snap_fd = fd;
        sup_run_submit(c, r);
    }
}

void sup_snap_init(void)
{
    sup_frame_set_after_ok(after_ok);
}
