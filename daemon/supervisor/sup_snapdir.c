/* sup_snapdir: the snapshot directory, STATE_DIR/snapshots/CTX/NAME
 * (sup_snapdir.h): walking it, sizing it, opening a snapshot by its id
 * without following symbolic links, and the writer's tier of a file read
 * from its tag, remembered for the files this daemon checked itself. */
#include "sup_snapdir.h"

#include "sup_auth.h"
#include "sup_config.h"
#include "sup_send.h"
#include "sup_snapmac.h"

#include "proto.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
int sup_snapdir_ctx_dir(const char *ctx, bool make)
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
void sup_snapdir_each(int dirfd,
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
void sup_snapdir_each_ctx(bool (*fn)(void *arg, const char *ctx, int dirfd), void *arg)
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

/* Counts one snapshot into the tally arg, unless it is the one skipped;
 * always goes on. */
bool sup_snapdir_tally_one(void *arg, int dirfd, const char *name, const struct stat *st)
{
    (void)dirfd;
    sup_snapdir_tally *t = arg;
    if (t->skip && strcmp(name, t->skip) == 0)
        return true;
    t->count++;
    t->bytes += (uint64_t)st->st_size;
    return true;
}

/* Adds the snapshots of one context's directory to the tally arg. */
static bool tally_dir(void *arg, const char *ctx, int dirfd)
{
    (void)ctx;
    sup_snapdir_tally *t = arg;
    sup_snapdir_tally sub = {NULL, 0, 0};
    sup_snapdir_each(dirfd, sup_snapdir_tally_one, &sub);
    t->bytes += sub.bytes;
    t->count += sub.count;
    return true;
}

/* Bytes of all snapshots in the state directory (their temporary files
 * being written are not counted: each is capped by what was left). */
uint64_t sup_snapdir_total_bytes(void)
{
    sup_snapdir_tally t = {NULL, 0, 0};
    sup_snapdir_each_ctx(tally_dir, &t);
    return t.bytes;
}

/* Splits "CTX/NAME" (or "NAME", meaning dflt's) into its two names; false
 * when either is not a valid name. */
bool sup_snapdir_parse_id(const proto_val *v, const char *dflt, char *ctx, char *name)
{
    if (!v || v->kind != PROTO_STR || v->n > SUP_SNAPDIR_ID_MAX)
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
int sup_snapdir_open(const char *ctx, const char *name, const sup_peer *peer)
{
    int dfd = sup_snapdir_ctx_dir(ctx, false);
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

/* ---- who wrote it ----------------------------------------------------- */

/* Unpickling runs the file's code, so a snapshot is restored only into a
 * context at least as confined as its writer: a sandboxed cell never gets
 * its code run unconfined by a restore. The writer's tier is the one in
 * the file's tag (sup_snapmac.h), which only the supervisor can make; a
 * file without a tag that verifies (copied in by hand, forged, changed)
 * is of the sandbox tier. ctx.snapshot_export and ctx.snapshot_import
 * carry the tier between daemons under the operator's export key. */
const char *const sup_snapdir_tier_names[] = {
    [SUP_TIER_STATIC] = "static",
    [SUP_TIER_UNSAFE] = "unsafe",
    [SUP_TIER_LOCAL] = "local",
    [SUP_TIER_SANDBOX] = "sandbox",
};

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
void sup_snapdir_remember(int fd, sup_tier tier, const char *origin, uint64_t len)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return;
    verified_file *v = &verified_files[verified_next++ % VERIFIED_MAX];
    *v = (verified_file){st.st_dev, st.st_ino, st.st_size, st.st_ctim, tier, len, ""};
    snprintf(v->origin, sizeof v->origin, "%s", origin);
}

/* Whether the file on fd is one checked before (then its tier, origin and
 * content length). */
bool sup_snapdir_cached_tier(int fd, sup_tier *tier, char *origin, uint64_t *content_len)
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

/* The writer's tier of the snapshot on fd by its tag under key (the
 * sandbox tier when it does not verify), *verified whether it did, and
 * the length of the content a worker reads. */
sup_tier sup_snapdir_tagged_tier(int fd, sup_snapmac_key key, bool *verified, char *origin,
                                 uint64_t *content_len)
{
    sup_tier cached;
    if (key == SUP_SNAPMAC_OWN && sup_snapdir_cached_tier(fd, &cached, origin, content_len)) {
        *verified = true;
        return cached;
    }
    int t;
    *verified = sup_snapmac_verify(fd, key, &t, origin, content_len);
    if (!*verified || t < SUP_TIER_UNSAFE || t > SUP_TIER_SANDBOX)
        return SUP_TIER_SANDBOX;
    if (key == SUP_SNAPMAC_OWN)
        sup_snapdir_remember(fd, (sup_tier)t, origin, *content_len);
    return (sup_tier)t;
}
