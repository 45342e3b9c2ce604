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
#include "sup_ident.h"

#include "sup_auth.h"
#include "sup_config.h"
#include "sup_privdir.h"
#include "sup_trash.h"

#include "mem.h"
#include "proto.h"

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

void sup_ident_init(void)
{
    if (sup_cfg.worker_uid_count) {
        ids.first = sup_cfg.worker_uid_first;
        ids.count = sup_cfg.worker_uid_count;
    }
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
        sup_trash_rmtree(id->dir);
    if (id->own_uid)
        release_uid(id->uid);
    free(id->dir);
    free(id);
}
