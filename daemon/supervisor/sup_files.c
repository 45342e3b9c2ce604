/* sup_files: file.put and file.get (PROTOCOL.md section 5). Files move in
 * chunks of at most SUP_FILE_CHUNK bytes, one request per chunk, so the
 * daemon never holds more than one chunk of a file. Paths are relative to
 * the context's directory (its `cwd` at creation) and are opened one
 * component at a time with openat(O_NOFOLLOW): `..`, absolute paths and
 * symbolic links anywhere on the path are refused, so no path leaves that
 * directory. Only regular files are read or written. */
#include "sup_files.h"
#include "sup_ident.h"
#include "sup_policy.h"

#include "sup_ctx.h"
#include "sup_peer.h"
#include "sup_send.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mem.h"
#include "proto.h"
#include "sbx_path.h"

static const proto_val *get(const proto_val *msg, const char *key)
{
    const proto_val *v = proto_map_get(msg, key);
    return v && v->kind == PROTO_NIL ? NULL : v;
}

static sup_ctx *find_ctx(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *name = get(msg, "ctx");
    const char *s = name ? name->as.s : "default";
    size_t n = name ? name->n : 7;
    sup_ctx *c = sup_ctx_find(s, n);
    if (!c)
        sup_reply_err(peer, "unknown_context", "no context named '%.*s'", (int)n, s);
    return c;
}

/* Opens path under c's directory; -1 after replying the error. */
static int open_confined(const sup_ctx *c, const proto_val *path, int flags, const sup_peer *peer)
{
    if (path->n == 0 || path->as.s[0] == '/') {
        sup_reply_err(peer, "bad_path", "path must be relative to the context's directory");
        return -1;
    }
    /* Every component is checked before anything is opened. */
    for (size_t i = 0, start = 0; i <= path->n; i++) {
        if (i < path->n && path->as.s[i] != '/')
            continue;
        size_t len = i - start;
        const char *comp = path->as.s + start;
        if (len == 0 || (len == 1 && comp[0] == '.') ||
            (len == 2 && comp[0] == '.' && comp[1] == '.')) {
            sup_reply_err(peer, "bad_path",
                          "empty, '.' and '..' components are refused (the path must stay "
                          "inside the context's directory)");
            return -1;
        }
        start = i + 1;
    }
    char *p = proto_strdup(path);
    int dir = sbx_path_open(c->cwd, O_RDONLY | O_DIRECTORY, NULL, 0);
    if (dir < 0) {
        sup_reply_err(peer, "io", "context directory %s: %s", c->cwd, strerror(errno));
        free(p);
        return -1;
    }
    int fd = -1;
    char *comp = p;
    for (;;) {
        char *slash = strchr(comp, '/');
        if (slash)
            *slash = '\0';
        if (slash) {
            int next = openat(dir, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (next < 0) {
                if (errno == ELOOP || errno == ENOTDIR)
                    sup_reply_err(peer, "bad_path",
                                  "'%s' is a symbolic link or not a directory: refused", comp);
                else
                    sup_reply_err(peer, errno == ENOENT ? "not_found" : "io", "'%s': %s", comp,
                                  strerror(errno));
                break;
            }
            close(dir);
            dir = next;
            comp = slash + 1;
            continue;
        }
        /* O_NONBLOCK: a FIFO must not block the daemon; it is refused
         * below like any file that is not regular. */
        fd = openat(dir, comp, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
        struct stat st;
        if (fd < 0) {
            if (errno == ELOOP)
                sup_reply_err(peer, "bad_path", "'%s' is a symbolic link: refused", comp);
            else
                sup_reply_err(peer, errno == ENOENT ? "not_found" : "io", "'%s': %s", comp,
                              strerror(errno));
        } else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            sup_reply_err(peer, "bad_path", "'%s' is not a regular file", comp);
            close(fd);
            fd = -1;
        }
        break;
    }
    close(dir);
    free(p);
    return fd;
}

/* file.put {ctx, path, data, offset}: offset 0 creates or truncates the
 * file; a later chunk's offset must be the file's size (chunks in order). */
void sup_files_put(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *c = find_ctx(msg, peer);
    if (!c)
        return;
    const proto_val *data = get(msg, "data");
    const proto_val *off = get(msg, "offset");
    uint64_t offset = off ? off->as.u : 0;
    if (offset + data->n > SUP_FILE_MAX) {
        sup_reply_err(peer, "too_large", "files are limited to %llu bytes",
                      (unsigned long long)SUP_FILE_MAX);
        return;
    }
    int fd =
        open_confined(c, get(msg, "path"), O_WRONLY | (offset == 0 ? O_CREAT | O_TRUNC : 0), peer);
    if (fd < 0)
        return;
    /* A file put into a context of its own uid is that context's. */
    if (offset == 0 && c->ident && c->ident->own_uid)
        (void)fchown(fd, c->ident->uid, c->ident->gid);
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != offset) {
        sup_reply_err(peer, "bad_field",
                      "field 'offset' (%llu) must be the file's size (%lld): chunks go in order",
                      (unsigned long long)offset, (long long)st.st_size);
        close(fd);
        return;
    }
    const char *p = data->as.s;
    size_t left = data->n;
    uint64_t at = offset;
    while (left > 0) {
        ssize_t w = pwrite(fd, p, left, (off_t)at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            /* A full disk or a file size limit: the chunk is rolled back
             * (the file keeps its size before it), and the reply says so. */
            int e = w < 0 ? errno : ENOSPC;
            bool rolled = ftruncate(fd, (off_t)offset) == 0;
            /* The context's own file system full: its disk budget. */
            char budget[96] = "";
            if (e == ENOSPC && c->policy && c->policy->disk_bytes && c->ident && c->ident->dir)
                snprintf(budget, sizeof budget, " (the context's disk_bytes, %llu bytes)",
                         (unsigned long long)c->policy->disk_bytes);
            sup_reply_err(peer, "io", "write: %s%s after %llu of the chunk's %u bytes; %s",
                          strerror(e), budget, (unsigned long long)(at - offset), data->n,
                          rolled ? "the chunk was rolled back: the file's size is its offset "
                                   "again"
                                 : "the partial chunk could not be rolled back");
            close(fd);
            return;
        }
        p += w;
        left -= (size_t)w;
        at += (uint64_t)w;
    }
    close(fd);
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 1);
    proto_put_str(&b, "size");
    proto_put_uint(&b, at);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

/* file.get {ctx, path, offset, length} -> ok {data, size, eof} */
void sup_files_get(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *c = find_ctx(msg, peer);
    if (!c)
        return;
    const proto_val *off = get(msg, "offset");
    const proto_val *len = get(msg, "length");
    uint64_t offset = off ? off->as.u : 0;
    size_t want = len && len->as.u < SUP_FILE_CHUNK ? (size_t)len->as.u : SUP_FILE_CHUNK;
    int fd = open_confined(c, get(msg, "path"), O_RDONLY, peer);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        sup_reply_err(peer, "io", "stat: %s", strerror(errno));
        close(fd);
        return;
    }
    uint8_t *buf = mem_alloc(want ? want : 1);
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(fd, buf + got, want - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            sup_reply_err(peer, "io", "read: %s", strerror(errno));
            free(buf);
            close(fd);
            return;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 3);
    proto_put_str(&b, "data");
    proto_put_bin(&b, buf, got);
    proto_put_str(&b, "size");
    proto_put_uint(&b, (uint64_t)st.st_size);
    proto_put_str(&b, "eof");
    proto_put_bool(&b, offset + got >= (uint64_t)st.st_size);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
    free(buf);
}
