/* sup_ident: who a context's worker is and where it works.
 *
 * Under a root daemon every confined (`local`, `sandbox`) context runs as
 * an unprivileged uid/gid of its own, drawn from --worker-uids FIRST:COUNT:
 * FIRST is the workers' shared group (a supplementary group of every
 * confined worker, for directories an operator shares with them), and
 * FIRST+1 .. FIRST+COUNT-1 are handed out to contexts, round robin, never
 * two live contexts at once (a ctx.fork copy shares its source's identity:
 * it is the same interpreter). Unsafe contexts keep the daemon's uid, by
 * definition of that tier; a non-root daemon cannot switch uids at all.
 *
 * Every context made without a cwd gets a private directory
 * STATE_DIR/contexts/<instance>/NAME.XXXXXX (0700, owned by the context's
 * uid; sup_privdir.c), never
 * the daemon's working directory. It is removed with the last context that
 * uses it, by descriptor (a worker may have left symbolic links in it). */
#include "sup.h"

#include "mem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_FIRST 524288u /* clear of the usual /etc/subuid ranges (100000 + 65536 k) */
#define DEFAULT_COUNT 65536u

static struct {
    bool separated; /* root daemon: confined workers get their own uid */
    unsigned first, count;
    uint8_t *used; /* bitmap over the count - 1 context uids */
    unsigned next, in_use;
} ids = {.first = DEFAULT_FIRST, .count = DEFAULT_COUNT};

int sup_ident_parse_range(const char *v, char *err, size_t n)
{
    char *end;
    errno = 0;
    unsigned long first = strtoul(v, &end, 10);
    unsigned long count = *end == ':' ? strtoul(end + 1, &end, 10) : 0;
    if (errno || *end || first < 1000 || count < 2 || count > (1u << 24) ||
        first + count > 0xfffffffeul) {
        snprintf(err, n,
                 "'%s' must be FIRST:COUNT (FIRST >= 1000, 2 <= COUNT <= 16777216, all below "
                 "2^32 - 1)",
                 v);
        return -1;
    }
    ids.first = (unsigned)first;
    ids.count = (unsigned)count;
    return 0;
}

void sup_ident_init(void)
{
    ids.separated = geteuid() == 0;
    ids.used = mem_calloc((ids.count + 7) / 8, 1);
}

bool sup_ident_separated(void)
{
    return ids.separated;
}

gid_t sup_ident_group(void)
{
    return (gid_t)ids.first;
}

void sup_ident_put_hello(proto_buf *b)
{
    proto_put_map(b, 3);
    proto_put_str(b, "daemon_root");
    proto_put_bool(b, ids.separated);
    proto_put_str(b, "worker_uids");
    if (ids.separated) {
        proto_put_array(b, 2);
        proto_put_uint(b, ids.first);
        proto_put_uint(b, ids.count);
    } else {
        proto_put_nil(b);
    }
    proto_put_str(b, "worker_uids_in_use");
    proto_put_uint(b, ids.in_use);
}

/* The next free context uid, or -1 when all are taken. */
static long take_uid(void)
{
    unsigned slots = ids.count - 1;
    for (unsigned i = 0; i < slots; i++) {
        unsigned k = (ids.next + i) % slots;
        if (!(ids.used[k / 8] & (1u << (k % 8)))) {
            ids.used[k / 8] |= (uint8_t)(1u << (k % 8));
            ids.next = (k + 1) % slots;
            ids.in_use++;
            return (long)ids.first + 1 + (long)k;
        }
    }
    return -1;
}

static void release_uid(uid_t uid)
{
    unsigned k = (unsigned)uid - ids.first - 1;
    if (uid <= ids.first || k >= ids.count - 1)
        return;
    ids.used[k / 8] &= (uint8_t) ~(1u << (k % 8));
    ids.in_use--;
}

/* ---- removing private directories without blocking ------------------ */

/* A deleted context's directory is renamed into STATE_DIR/contexts/.trash
 * at once (its path is gone when ctx.delete answers) and emptied there a
 * bounded number of entries per loop turn, by descriptor: files unlinked,
 * subdirectories renamed into the trash to become items of their own, so
 * no tree, however deep or large a worker made it, blocks the loop or
 * grows the daemon's memory. Nothing is followed: a symbolic link is an
 * entry like any other. */
#define TRASH_BUDGET 512 /* entries removed per loop turn */

static int trash_fd = -1;
static bool trash_busy;
static unsigned long trash_serial;

/* The trash directory (0700), opened once. -1 if it cannot be made. */
static int trash_dir(void)
{
    if (trash_fd >= 0)
        return trash_fd;
    char path[4096];
    const char *state = sup_auth_state_dir();
    if (!state || (size_t)snprintf(path, sizeof path, "%s/contexts/.trash", state) >= sizeof path)
        return -1;
    (void)mkdir(path, 0700);
    trash_fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (trash_fd >= 0 && (fstat(trash_fd, &st) < 0 || st.st_uid != geteuid())) {
        close(trash_fd);
        trash_fd = -1;
    }
    trash_busy = trash_fd >= 0; /* a previous daemon may have left work */
    return trash_fd;
}

/* Moves the entry `name` of the open directory dir into the trash. */
static int to_trash(int dir, const char *name)
{
    char item[32];
    snprintf(item, sizeof item, "t%d.%lu", (int)getpid(), ++trash_serial);
    if (renameat(dir, name, trash_dir(), item) < 0)
        return -1;
    trash_busy = true;
    return 0;
}

/* Empties one trash item, within *budget entries; removes it once empty. */
static void empty_item(const char *item, int *budget)
{
    int fd = openat(trash_fd, item, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) { /* not a directory (or gone): one entry */
        (void)unlinkat(trash_fd, item, 0);
        (*budget)--;
        return;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    bool empty = true;
    struct dirent *e;
    while (*budget > 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat st;
        (*budget)--;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (!S_ISDIR(st.st_mode) ? unlinkat(dirfd(d), e->d_name, 0) < 0
                                 : to_trash(dirfd(d), e->d_name) < 0)
            empty = false; /* (another file system: left, never followed) */
    }
    if (*budget > 0 && empty)
        (void)unlinkat(trash_fd, item, AT_REMOVEDIR);
    closedir(d);
}

double sup_ident_tick(double now)
{
    if (!trash_busy || trash_fd < 0)
        return 0;
    int budget = TRASH_BUDGET;
    int fd = dup(trash_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return now + 1;
    }
    rewinddir(d);
    bool any = false;
    struct dirent *e;
    while (budget > 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        any = true;
        empty_item(e->d_name, &budget);
    }
    closedir(d);
    trash_busy = any;
    return any ? now : 0;
}

void sup_ident_start(void)
{
    (void)trash_dir(); /* empties what a previous daemon left in the trash */
}

void sup_ident_rmtree(const char *path)
{
    char *copy = mem_strdup(path);
    char *slash = strrchr(copy, '/');
    if (slash && slash != copy && slash[1]) {
        *slash = '\0';
        int parent = open(copy, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (parent >= 0 && trash_dir() >= 0 && to_trash(parent, slash + 1) < 0)
            sup_log("context directory %s: cannot remove it: %s", path, strerror(errno));
        if (parent >= 0)
            close(parent);
    }
    free(copy);
}

/* This daemon's directory for private directories (sup_privdir.c). */
static int contexts_dir(char *out, size_t n)
{
    const char *state = sup_auth_state_dir();
    if (!state) {
        errno = ENOENT;
        return -1;
    }
    return sup_privdir_base(state, out, n);
}

sup_ident *sup_ident_new(bool confined, const char *name, bool want_dir, proto_error *err)
{
    sup_ident *id = mem_calloc(1, sizeof *id);
    id->refs = 1;
    id->uid = geteuid();
    id->gid = getegid();
    if (confined && ids.separated) {
        long uid = take_uid();
        if (uid < 0) {
            proto_error_set(err, "limit", "every worker uid of --worker-uids %u:%u is in use",
                            ids.first, ids.count);
            free(id);
            return NULL;
        }
        id->uid = (uid_t)uid;
        id->gid = (gid_t)uid;
        id->own_uid = true;
    }
    if (want_dir) {
        char dir[4096];
        if (contexts_dir(dir, sizeof dir) < 0 ||
            (size_t)snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s.XXXXXX", name) >=
                sizeof dir - 1 ||
            !mkdtemp(dir) || (id->own_uid && chown(dir, id->uid, id->gid) < 0)) {
            proto_error_set(err, "io", "cannot make the context's directory under %s: %s",
                            sup_auth_state_dir() ? sup_auth_state_dir() : "the state directory",
                            strerror(errno));
            sup_ident_unref(id);
            return NULL;
        }
        id->dir = mem_strdup(dir);
    }
    return id;
}

sup_ident *sup_ident_ref(sup_ident *id)
{
    if (id)
        id->refs++;
    return id;
}

void sup_ident_unref(sup_ident *id)
{
    if (!id || --id->refs > 0)
        return;
    if (id->dir)
        sup_ident_rmtree(id->dir);
    if (id->own_uid)
        release_uid(id->uid);
    free(id->dir);
    free(id);
}
