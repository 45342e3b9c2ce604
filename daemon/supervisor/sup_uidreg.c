/* sup_uidreg: the host-wide registry of root daemons' worker uid ranges, so
 * that no two daemons of a host ever hand out the same uid.
 *
 * The registry (--uid-registry, default SUP_UID_REGISTRY; root's, 0700)
 * holds one record per claimed range, named FIRST-COUNT, saying which
 * daemon owns it: "state=STATE_DIR\nfile=uids-<endpoints hash>\n". The
 * daemon holds an flock on its record for its life (the descriptor is
 * close-on-exec and the zygote closes what it inherits, so no worker holds
 * it). A record is
 *   live   while its lock is held (its daemon runs),
 *   owned  while its state directory's uid state file (sup_ident.c) still
 *          names that range: a stopped daemon comes back to its range,
 *   stale  otherwise (its state directory is gone): its range may be
 *          claimed again, after the uids are swept (sup_uidsweep.c).
 * Claims are made one at a time under REGISTRY/.lock. */
#include "sup_uidreg.h"

#include "sup_config.h"

#include "mem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_RECORDS 100000
#define OURS_WAIT_TRIES 30     /* x 100 ms for our own record's lock */
#define AUTO_END 0x80000000ull /* automatic blocks stay below 2^31 */

typedef enum { REC_LIVE, REC_OWNED, REC_STALE, REC_OURS } rec_state;

typedef struct rec {
    unsigned first, count;
    int fd; /* locked by us unless REC_LIVE (-1 then) */
    rec_state st;
    bool us_live; /* live, naming our state directory and file: we run already */
    char state[PATH_MAX];
} rec;

static int held_fd = -1; /* our record, locked for the daemon's life */

const char *sup_uidreg_dir(void)
{
    return sup_cfg.uid_registry ? sup_cfg.uid_registry : SUP_UID_REGISTRY;
}

void sup_uidreg_state_name(char *out, size_t n)
{
    snprintf(out, n, "uids-%016llx", (unsigned long long)sup_config_endpoints_hash());
}

/* Reads "range FIRST COUNT" from the first line of dir/name. */
static bool read_range(const char *dir, const char *name, unsigned *first, unsigned *count)
{
    char path[PATH_MAX + 64], line[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    if (n <= 0)
        return false;
    line[n] = '\0';
    return sscanf(line, "range %u %u", first, count) == 2 && *count >= 2;
}

/* The range saved in state_dir's uid state file; false when there is none. */
static bool saved_range(const char *state_dir, unsigned *first, unsigned *count)
{
    char name[64];
    sup_uidreg_state_name(name, sizeof name);
    return read_range(state_dir, name, first, count);
}

/* Makes the registry directory (and its parents) and checks that only we
 * can write it; its descriptor, or -1 after printing why. */
static int open_registry(void)
{
    const char *dir = sup_uidreg_dir();
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0711) < 0 && errno != EEXIST)
            break;
        *p = '/';
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "ctxd: uid registry %s: %s (--uid-registry)\n", dir, strerror(errno));
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
        fprintf(stderr,
                "ctxd: uid registry %s: %s (--uid-registry: a directory of root's that only "
                "root may write)\n",
                dir, fd < 0 ? strerror(errno) : "writable by others or not root's");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Reads one record's owner into r->state and whether it is ours. */
static void classify(rec *r, const char *our_state, const char *our_file)
{
    char buf[PATH_MAX + 128], file[128] = "";
    r->state[0] = '\0';
    ssize_t n = pread(r->fd >= 0 ? r->fd : -1, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    char *s = strstr(buf, "state="), *f = strstr(buf, "\nfile=");
    if (s && f && f > s) {
        snprintf(r->state, sizeof r->state, "%.*s", (int)(f - s - 6), s + 6);
        snprintf(file, sizeof file, "%.*s", (int)strcspn(f + 6, "\n"), f + 6);
    }
    if (r->st == REC_LIVE)
        return;
    unsigned first, count;
    if (!r->state[0] || strchr(file, '/') || !read_range(r->state, file, &first, &count) ||
        first != r->first || count != r->count)
        r->st = REC_STALE;
    else if (strcmp(r->state, our_state) == 0 && strcmp(file, our_file) == 0)
        r->st = REC_OURS;
    else
        r->st = REC_OWNED;
}

/* Whether the record open at fd names our state directory and file. */
static bool names_us(int fd, const char *our_state, const char *our_file)
{
    char buf[PATH_MAX + 128], want[PATH_MAX + 128];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    snprintf(want, sizeof want, "state=%s\nfile=%s\n", our_state, our_file);
    return strcmp(buf, want) == 0;
}

/* Every record of the registry, each classified (locks taken where free). */
static rec *scan(int dfd, size_t *n, const char *our_state, const char *our_file)
{
    rec *recs = NULL;
    size_t cap = 0;
    *n = 0;
    int d2 = dup(dfd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!d) {
        if (d2 >= 0)
            close(d2);
        return NULL;
    }
    struct dirent *e;
    while ((e = readdir(d)) && *n < MAX_RECORDS) {
        unsigned first, count;
        char again[64];
        if (sscanf(e->d_name, "%u-%u", &first, &count) != 2)
            continue;
        snprintf(again, sizeof again, "%u-%u", first, count);
        if (strcmp(again, e->d_name) != 0 || count == 0)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            recs = mem_realloc(recs, cap * sizeof *recs);
        }
        rec *r = &recs[(*n)++];
        r->first = first;
        r->count = count;
        r->fd = openat(dfd, e->d_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        r->st = REC_STALE;
        if (r->fd >= 0 && flock(r->fd, LOCK_EX | LOCK_NB) < 0)
            r->st = REC_LIVE; /* its fd stays open for classify, closed below */
        classify(r, our_state, our_file);
        if (r->st == REC_LIVE && r->fd >= 0 && names_us(r->fd, our_state, our_file)) {
            /* Our own record, still locked: this daemon's predecessor (or
             * what it left running) is ending. A little patience; a daemon
             * still running on our endpoints stays live and is refused. */
            for (int i = 0; i < OURS_WAIT_TRIES && flock(r->fd, LOCK_EX | LOCK_NB) < 0; i++)
                usleep(100000);
            if (flock(r->fd, LOCK_EX | LOCK_NB) == 0) {
                r->st = REC_STALE;
                classify(r, our_state, our_file);
            }
        }
        r->us_live = r->st == REC_LIVE && r->fd >= 0 && names_us(r->fd, our_state, our_file);
        if (r->st == REC_LIVE && r->fd >= 0) {
            close(r->fd);
            r->fd = -1;
        }
    }
    closedir(d);
    return recs;
}

static bool overlaps(const rec *r, unsigned first, unsigned count)
{
    return (uint64_t)r->first < (uint64_t)first + count &&
           (uint64_t)first < (uint64_t)r->first + r->count;
}

/* The record that keeps first:count from us, or NULL. */
static const rec *conflict(const rec *recs, size_t n, unsigned first, unsigned count)
{
    for (size_t i = 0; i < n; i++)
        if (overlaps(&recs[i], first, count) && (recs[i].st == REC_LIVE || recs[i].st == REC_OWNED))
            return &recs[i];
    return NULL;
}

/* Takes first:count: removes the stale records it overlaps, writes ours
 * and keeps it locked. Sets *fresh unless it was ours already. */
static int commit(int dfd, rec *recs, size_t n, unsigned first, unsigned count,
                  const char *our_state, const char *our_file, bool *fresh)
{
    char name[64];
    snprintf(name, sizeof name, "%u-%u", first, count);
    int fd = -1;
    *fresh = true;
    for (size_t i = 0; i < n; i++) {
        rec *r = &recs[i];
        if (!overlaps(r, first, count))
            continue;
        if (r->first == first && r->count == count && r->fd >= 0) {
            *fresh = r->st != REC_OURS;
            fd = r->fd;
            r->fd = -1;
        } else {
            char other[64];
            snprintf(other, sizeof other, "%u-%u", r->first, r->count);
            (void)unlinkat(dfd, other, 0);
        }
    }
    if (fd < 0) {
        (void)unlinkat(dfd, name, 0);
        fd = openat(dfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
            fprintf(stderr, "ctxd: uid registry %s/%s: %s\n", sup_uidreg_dir(), name,
                    strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
    }
    char body[PATH_MAX + 128];
    int len = snprintf(body, sizeof body, "state=%s\nfile=%s\n", our_state, our_file);
    if (ftruncate(fd, 0) < 0 || pwrite(fd, body, (size_t)len, 0) != len || fsync(fd) < 0) {
        fprintf(stderr, "ctxd: uid registry %s/%s: %s\n", sup_uidreg_dir(), name, strerror(errno));
        close(fd);
        return -1;
    }
    held_fd = fd;
    return 0;
}

int sup_uidreg_claim(const char *state_dir, bool explicit, unsigned *first, unsigned *count,
                     bool *fresh)
{
    char our_file[64];
    sup_uidreg_state_name(our_file, sizeof our_file);
    int dfd = open_registry();
    if (dfd < 0)
        return -1;
    int lk = openat(dfd, ".lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lk < 0 || flock(lk, LOCK_EX) < 0) {
        fprintf(stderr, "ctxd: uid registry %s/.lock: %s\n", sup_uidreg_dir(), strerror(errno));
        if (lk >= 0)
            close(lk);
        close(dfd);
        return -1;
    }
    size_t n;
    rec *recs = scan(dfd, &n, state_dir, our_file);
    int rc = -1;
    unsigned f = *first, c = *count;
    bool running = false;
    for (size_t i = 0; i < n && !running; i++)
        if (recs[i].us_live) {
            fprintf(stderr,
                    "ctxd: a daemon with the state directory %s and these endpoints runs "
                    "already (it holds %u:%u in the uid registry %s)\n",
                    state_dir, recs[i].first, recs[i].count, sup_uidreg_dir());
            running = true;
        }
    if (running) {
        /* refused: said above */
    } else if (explicit) {
        const rec *r = conflict(recs, n, f, c);
        if (r)
            fprintf(stderr,
                    "ctxd: --worker-uids %u:%u: its uids overlap %u:%u, which %s daemon of "
                    "the state directory %s %s (uid registry %s). Choose another range, or "
                    "leave --worker-uids out to claim a free one\n",
                    f, c, r->first, r->count, r->st == REC_LIVE ? "the running" : "the stopped",
                    r->state[0] ? r->state : "(unknown)",
                    r->st == REC_LIVE ? "holds" : "owns while that directory exists",
                    sup_uidreg_dir());
        else
            rc = commit(dfd, recs, n, f, c, state_dir, our_file, fresh);
    } else {
        bool found = saved_range(state_dir, &f, &c) && !conflict(recs, n, f, c);
        for (uint64_t k = 0; !found; k++) {
            uint64_t at = SUP_UIDREG_AUTO_FIRST + k * SUP_UIDREG_AUTO_COUNT;
            if (at + SUP_UIDREG_AUTO_COUNT > AUTO_END)
                break;
            f = (unsigned)at;
            c = SUP_UIDREG_AUTO_COUNT;
            found = !conflict(recs, n, f, c);
        }
        if (!found)
            fprintf(stderr,
                    "ctxd: no free block of %u worker uids below 2^31 in the uid registry %s; "
                    "give --worker-uids\n",
                    SUP_UIDREG_AUTO_COUNT, sup_uidreg_dir());
        else if (commit(dfd, recs, n, f, c, state_dir, our_file, fresh) == 0) {
            *first = f;
            *count = c;
            rc = 0;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (recs[i].fd >= 0)
            close(recs[i].fd);
    free(recs);
    close(lk); /* the claim is made: others may claim theirs */
    close(dfd);
    return rc;
}
