/* sup_ident: who a context's worker is and where it works.
 *
 * Under a root daemon every confined (`local`, `sandbox`) context runs as
 * an unprivileged uid/gid of its own, drawn from --worker-uids FIRST:COUNT:
 * FIRST is the workers' shared group (a supplementary group of every
 * confined worker, for directories an operator shares with them), and
 * FIRST+1 .. FIRST+COUNT-1 are handed out to contexts, never two live
 * contexts at once (a ctx.fork copy shares its source's identity: it is the
 * same interpreter), and never one that another context may have left
 * things as, until those are swept (below). The range is this daemon's
 * alone on the host (sup_uidreg.c); a context restored after a restart
 * keeps its uid (sup_persist.c). Unsafe contexts keep the daemon's uid, by
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
#include "sup_uidreg.h"
#include "sup_uidsweep.h"

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

#define RESERVE_AHEAD 64u /* uids the saved mark runs ahead of the last handed out */

/* The allocator. A uid is handed out only if it is neither in use nor
 * dirty: dirty is every uid that may have been used since the last sweep.
 * The cursor moves up through the range; at its end the uids no live
 * context has are swept (sup_uidsweep.c) and become clean, and the cursor
 * starts again from the bottom. Saved in the state directory
 * (sup_uidreg_state_name): "range FIRST COUNT", "mark M" (every slot below
 * M may have been used; the file is rewritten only when the cursor passes
 * the mark, RESERVE_AHEAD at a time) and "held U" for each uid that was in
 * use at the last sweep (still dirty). After a restart every slot below the
 * mark and every held uid stays dirty until the next sweep. */
static struct {
    bool separated; /* root daemon: confined workers get their own uid */
    bool explicit;  /* --worker-uids was given */
    unsigned first, count;
    uint8_t *used;  /* bitmap over the count - 1 context uids: live */
    uint8_t *dirty; /* ... used since the last sweep */
    unsigned cursor, mark, in_use;
    char path[4096]; /* the saved state; "" when there is no state directory */
} ids = {.first = SUP_UIDREG_AUTO_FIRST, .count = SUP_UIDREG_AUTO_COUNT};

static bool bit(const uint8_t *m, unsigned k)
{
    return m[k / 8] & (1u << (k % 8));
}

static void set_bit(uint8_t *m, unsigned k, bool on)
{
    if (on)
        m[k / 8] |= (uint8_t)(1u << (k % 8));
    else
        m[k / 8] &= (uint8_t) ~(1u << (k % 8));
}

/* Writes the allocator's state whole (temporary file, fsync, rename). */
static void save(void)
{
    if (!ids.path[0])
        return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", ids.path);
    FILE *f = fopen(tmp, "we");
    if (!f) {
        fprintf(stderr, "ctxd: %s: %s\n", tmp, strerror(errno));
        return;
    }
    fprintf(f, "range %u %u\nmark %u\n", ids.first, ids.count, ids.mark);
    for (unsigned k = 0; k < ids.count - 1; k++)
        if (bit(ids.dirty, k) && k >= ids.mark)
            fprintf(f, "held %u\n", ids.first + 1 + k);
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, ids.path) < 0)
        fprintf(stderr, "ctxd: cannot save the worker uid state %s: %s\n", ids.path,
                strerror(errno));
}

/* Reads the saved state (same range): the dirty slots. */
static void load(void)
{
    FILE *f = fopen(ids.path, "re");
    char line[128];
    unsigned first = 0, count = 0, v;
    if (!f)
        return;
    if (!fgets(line, sizeof line, f) || sscanf(line, "range %u %u", &first, &count) != 2 ||
        first != ids.first || count != ids.count) {
        fclose(f);
        return;
    }
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "mark %u", &v) == 1 && v <= ids.count - 1) {
            ids.mark = ids.cursor = v;
            for (unsigned k = 0; k < v; k++)
                set_bit(ids.dirty, k, true);
        } else if (sscanf(line, "held %u", &v) == 1 && v > ids.first &&
                   v - ids.first - 1 < ids.count - 1) {
            set_bit(ids.dirty, v - ids.first - 1, true);
        }
    }
    fclose(f);
}

/* For the sweep: a uid of the range that no live context has. */
static bool sweepable(uid_t uid)
{
    if (uid <= ids.first)
        return uid == ids.first; /* FIRST is never a context's; swept with the range */
    unsigned k = (unsigned)uid - ids.first - 1;
    return k < ids.count - 1 && !bit(ids.used, k);
}

void sup_ident_init(void)
{
    ids.separated = geteuid() == 0;
    if (sup_cfg.worker_uid_count) {
        ids.first = sup_cfg.worker_uid_first;
        ids.count = sup_cfg.worker_uid_count;
        ids.explicit = true;
    }
    const char *state = ids.separated ? sup_auth_state_dir() : NULL;
    bool fresh = true;
    if (ids.separated) {
        if (!state) {
            fprintf(stderr, "ctxd: a root daemon needs its state directory for its worker "
                            "uids\n");
            exit(1);
        }
        if (sup_uidreg_claim(state, ids.explicit, &ids.first, &ids.count, &fresh) < 0)
            exit(1);
        char name[64];
        sup_uidreg_state_name(name, sizeof name);
        snprintf(ids.path, sizeof ids.path, "%s/%s", state, name);
    }
    ids.used = mem_calloc((ids.count + 7) / 8, 1);
    ids.dirty = mem_calloc((ids.count + 7) / 8, 1);
    if (!ids.separated)
        return;
    if (fresh) {
        /* A range new to this state directory: whatever its uids left
         * behind (a daemon whose state directory is gone, anything else
         * that ran as them) goes before any is handed out. */
        sup_uidsweep_run((uid_t)ids.first, (uid_t)(ids.first + ids.count - 1), sweepable);
    } else {
        load();
    }
    save(); /* the range is this state directory's from now on */
    fprintf(stderr, "ctxd: worker uids %u:%u (%s; registry %s)\n", ids.first, ids.count,
            ids.explicit ? "--worker-uids" : "claimed", sup_uidreg_dir());
}

gid_t sup_ident_group(void)
{
    return (gid_t)ids.first;
}

void sup_ident_put_hello(proto_buf *b)
{
    proto_put_map(b, 5);
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
    proto_put_str(b, "worker_uids_from");
    if (ids.separated)
        proto_put_str(b, ids.explicit ? "option" : "claimed");
    else
        proto_put_nil(b);
    proto_put_str(b, "uid_registry");
    if (ids.separated)
        proto_put_str(b, sup_uidreg_dir());
    else
        proto_put_nil(b);
    proto_put_str(b, "worker_uids_in_use");
    proto_put_uint(b, ids.in_use);
}

/* Marks slot k in use (and dirty); the saved mark moves ahead of it. */
static long take_slot(unsigned k)
{
    set_bit(ids.used, k, true);
    set_bit(ids.dirty, k, true);
    ids.in_use++;
    if (k >= ids.cursor)
        ids.cursor = k + 1;
    if (ids.cursor > ids.mark) {
        ids.mark =
            ids.cursor + RESERVE_AHEAD < ids.count - 1 ? ids.cursor + RESERVE_AHEAD : ids.count - 1;
        save();
    }
    return (long)ids.first + 1 + (long)k;
}

/* The next clean context uid, or -1 when all are taken. At the range's end
 * the uids of no live context are swept and the cursor starts over. */
static long take_uid(void)
{
    unsigned slots = ids.count - 1;
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned k = ids.cursor; k < slots; k++)
            if (!bit(ids.used, k) && !bit(ids.dirty, k))
                return take_slot(k);
        bool any = false; /* a dirty uid no live context has: worth a sweep */
        for (unsigned k = 0; k < slots && !any; k++)
            any = bit(ids.dirty, k) && !bit(ids.used, k);
        if (!any && ids.cursor == 0)
            return -1;
        if (any)
            sup_uidsweep_run((uid_t)ids.first, (uid_t)(ids.first + ids.count - 1), sweepable);
        memcpy(ids.dirty, ids.used, (ids.count + 7) / 8);
        ids.cursor = ids.mark = 0;
        save();
    }
    return -1;
}

/* Slot of a uid a restored context had, if it is free in this range. */
static long take_wanted(long uid)
{
    if (uid <= (long)ids.first || uid - ids.first - 1 >= (long)ids.count - 1)
        return -1;
    unsigned k = (unsigned)(uid - ids.first - 1);
    if (bit(ids.used, k))
        return -1;
    set_bit(ids.used, k, true);
    set_bit(ids.dirty, k, true);
    ids.in_use++;
    return uid;
}

static void release_uid(uid_t uid)
{
    unsigned k = (unsigned)uid - ids.first - 1;
    if (uid <= ids.first || k >= ids.count - 1)
        return;
    set_bit(ids.used, k, false); /* stays dirty until the next sweep */
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
    return sup_ident_restore(confined, name, want_dir, -1, err);
}

sup_ident *sup_ident_restore(bool confined, const char *name, bool want_dir, long uid_was,
                             proto_error *err)
{
    sup_ident *id = mem_calloc(1, sizeof *id);
    id->refs = 1;
    id->uid = geteuid();
    id->gid = getegid();
    if (confined && ids.separated) {
        long uid = uid_was >= 0 ? take_wanted(uid_was) : -1;
        if (uid < 0)
            uid = take_uid();
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
