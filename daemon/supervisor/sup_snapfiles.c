/* sup_snapfiles: the snapshot files as a client manages them
 * (sup_snapfiles.h; PROTOCOL.md section 5): ctx.snapshots lists them,
 * ctx.snapshot_delete removes one, ctx.snapshot_export copies one out
 * under the operator's export key and ctx.snapshot_import takes one in
 * under the daemon's own, keeping its writer's tier. */
#include "sup_snapfiles.h"

#include "sup_auth.h"
#include "sup_config.h"
#include "sup_send.h"
#include "sup_snapdir.h"
#include "sup_snapmac.h"
#include "sup_stats.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIST_MAX 10000       /* ctx.snapshots lists at most this many */
#define COPY_CHUNK (1 << 20) /* bytes an export or import copies at a time */

/* ---- ctx.snapshots, ctx.snapshot_delete -------------------------------- */

typedef struct listing {
    proto_buf items;
    uint32_t n;
    const char *ctx;
} listing;

/* Appends one snapshot's entry to the listing arg; false once it holds
 * LIST_MAX. */
static bool list_one(void *arg, int dirfd, const char *name, const struct stat *st)
{
    (void)dirfd;
    listing *l = arg;
    if (l->n >= LIST_MAX)
        return false;
    char id[SUP_SNAPDIR_ID_MAX + 1];
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

/* Appends the snapshots of context ctx's directory; false once the
 * listing is full. */
static bool list_dir(void *arg, const char *ctx, int dirfd)
{
    listing *l = arg;
    l->ctx = ctx;
    sup_snapdir_each(dirfd, list_one, l);
    return l->n < LIST_MAX;
}

void sup_snapfiles_list(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *ctx = proto_map_get(msg, "ctx");
    listing l;
    proto_buf_init(&l.items);
    l.n = 0;
    if (ctx && ctx->kind == PROTO_STR) {
        char name[PROTO_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)ctx->n, ctx->as.s);
        int dfd = sup_snapdir_ctx_dir(name, false);
        if (dfd >= 0) {
            list_dir(&l, name, dfd);
            close(dfd);
        }
    } else {
        sup_snapdir_each_ctx(list_dir, &l);
    }
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 2);
    proto_put_str(&b, "snapshots");
    proto_put_array(&b, l.n);
    proto_buf_append(&b, l.items.data, l.items.len);
    proto_put_str(&b, "total_bytes");
    proto_put_uint(&b, sup_snapdir_total_bytes());
    sup_deliver(peer, &b);
    proto_buf_free(&b);
    proto_buf_free(&l.items);
}

void sup_snapfiles_delete(const proto_val *msg, const sup_peer *peer)
{
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    if (!sup_snapdir_parse_id(proto_map_get(msg, "snapshot"), NULL, ctx, name)) {
        sup_reply_err(peer, "bad_name", "field 'snapshot' must be CTX/NAME");
        return;
    }
    int dfd = sup_snapdir_ctx_dir(ctx, false);
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
    unsigned char *buf = mem_alloc(COPY_CHUNK);
    bool ok = true;
    for (uint64_t at = 0; ok && at < len;) {
        size_t want = len - at < COPY_CHUNK ? (size_t)(len - at) : COPY_CHUNK;
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
        sup_snapdir_remember(out, tier, origin, len);
    int e = errno;
    close(out);
    if (!ok)
        (void)unlinkat(dirfd, tmp, 0);
    errno = e;
    return ok;
}

void sup_snapfiles_export(const proto_val *msg, const sup_peer *peer)
{
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    if (!sup_snapdir_parse_id(proto_map_get(msg, "snapshot"), NULL, ctx, name)) {
        sup_reply_err(peer, "bad_name", "field 'snapshot' must be CTX/NAME");
        return;
    }
    int fd = sup_snapdir_open(ctx, name, peer);
    if (fd < 0)
        return;
    bool verified;
    char origin[PROTO_MAX_NAME + 1];
    uint64_t len;
    sup_tier tier = sup_snapdir_tagged_tier(fd, SUP_SNAPMAC_OWN, &verified, origin, &len);
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
    sup_stats_event("snapshot-export snapshot=%s/%s tier=%s", ctx, name,
                    sup_snapdir_tier_names[tier]);
    proto_buf b;
    proto_buf_init(&b);
    char id[SUP_SNAPDIR_ID_MAX + 1];
    snprintf(id, sizeof id, "%s/%s", ctx, name);
    sup_msg_begin(&b, "ok", peer, 4);
    proto_put_str(&b, "snapshot");
    proto_put_str(&b, id);
    proto_put_str(&b, "path");
    proto_put_str(&b, path);
    proto_put_str(&b, "tier");
    proto_put_str(&b, sup_snapdir_tier_names[tier]);
    proto_put_str(&b, "size");
    proto_put_uint(&b, len + SUP_SNAPMAC_TAG);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

void sup_snapfiles_import(const proto_val *msg, const sup_peer *peer)
{
    char ctx[PROTO_MAX_NAME + 1], name[PROTO_MAX_NAME + 1];
    if (!sup_snapdir_parse_id(proto_map_get(msg, "snapshot"), NULL, ctx, name)) {
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
    uint64_t total = sup_snapdir_total_bytes();
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
    sup_tier tier = sup_snapdir_tagged_tier(fd, SUP_SNAPMAC_EXPORT, &verified, origin, &len);
    if (!verified) {
        close(fd);
        sup_reply_err(peer, "bad_snapshot",
                      "STATE_DIR/imports/%s/%s is not a snapshot exported under this daemon's "
                      "STATE_DIR/export.key (its tag does not verify: another key, changed, or "
                      "no export)",
                      ctx, name);
        return;
    }
    int dfd = sup_snapdir_ctx_dir(ctx, true);
    sup_snapdir_tally mine = {name, 0, 0};
    if (dfd >= 0)
        sup_snapdir_each(dfd, sup_snapdir_tally_one, &mine);
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
    char id[SUP_SNAPDIR_ID_MAX + 1];
    snprintf(id, sizeof id, "%s/%s", ctx, name);
    sup_stats_event("snapshot-import snapshot=%s tier=%s", id, sup_snapdir_tier_names[tier]);
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
    proto_put_str(&b, sup_snapdir_tier_names[tier]);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}
