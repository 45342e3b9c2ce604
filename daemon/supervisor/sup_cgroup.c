/* sup_cgroup: the supervisor's half of "every process in a cgroup".
 *
 * Each worker incarnation gets a cgroup named ctxd/<tree>/w<n>, where
 * <tree> is this daemon's: its pid and a random part, "<pid>x<hex>"
 * (daemon/sandbox/sbx_cgroup.c puts the worker in before it runs anything; a
 * ctx.fork copy is moved into its own here). Whatever the worker starts,
 * setsid or double-forked, stays in it: killing the context kills the
 * cgroup (cgroup.kill), on delete, restart, timeout, death and shutdown.
 * Its CPU time (cpu.stat) is the context's, children included. Cgroups of
 * a daemon that died without cleaning up are killed and removed when the
 * next daemon starts; a daemon that is SIGKILLed has them killed and
 * removed at once by its reaper (sup_reaper.c), given the tree's
 * directories here once the tree is made.
 *
 * Which trees are a live daemon's is known by a lock, not by a pid: the
 * daemon holds flock(LOCK_EX) on its tree's directory for its life. A pid
 * says nothing across pid namespaces (a daemon that is PID 1 of a
 * container sees none of the host's pids, and two such daemons would both
 * be "1"), while a lock on the same kernel directory is seen by all. */
#include "sup_cgroup.h"

#include "sup_config.h"
#include "sup_log.h"
#include "sup_reaper.h"

#include "mem.h"
#include "sbx_cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Removals still waiting for a cgroup's last task to be gone. */
#define PENDING_MAX 8192

static char *pending[PENDING_MAX];
static size_t npending;
static unsigned long serial;
/* This daemon's tree (ctxd/<tree>) and the descriptor holding its lock. */
static char tree[32];
static int tree_lock = -1;

/* The hierarchies a worker's cgroup may exist in. */
static size_t roots(const char *out[3])
{
    size_t n = 0;
    const char *v2 = sbx_cgroup_v2_root();
    if (v2)
        out[n++] = v2;
    static const char *const v1[] = {"memory", "pids"};
    for (size_t i = 0; i < 2; i++) {
        const char *r = sbx_cgroup_v1_root(v1[i]);
        if (r)
            out[n++] = r;
    }
    return n;
}

/* Reads a small control file into buf; -1 if it cannot be read. */
static int read_file(const char *path, char *buf, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t got = read(fd, buf, n - 1);
    close(fd);
    if (got < 0)
        return -1;
    buf[got] = '\0';
    return 0;
}

/* Kills everything in the v2 cgroup at dir (and below). */
static int kill_dir(const char *dir)
{
    char path[512];
    if (snprintf(path, sizeof path, "%s/cgroup.kill", dir) >= (int)sizeof path)
        return -1;
    return sbx_write_file(path, "1");
}

/* rmdir of dir and everything below it, deepest first (cgroup
 * directories hold only control files, which rmdir ignores). */
static int remove_tree(const char *dir, int depth)
{
    DIR *d = depth < 8 ? opendir(dir) : NULL;
    if (d) {
        struct dirent *e;
        char sub[512];
        while ((e = readdir(d)))
            if (e->d_type == DT_DIR && e->d_name[0] != '.') {
                if (snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) >= (int)sizeof sub)
                    continue;
                remove_tree(sub, depth + 1);
            }
        closedir(d);
    }
    return rmdir(dir) < 0 && errno != ENOENT ? -1 : 0;
}

/* True when the tree at dir (ctxd/<name>) belongs to a live daemon: its
 * directory is locked (see the file comment). A tree named by a bare pid
 * (a daemon before the lock) also counts as live while that pid is a ctxd
 * this daemon can see. */
static bool live_tree(const char *dir, const char *name)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno != ENOENT; /* cannot tell: leave it */
    bool live = flock(fd, LOCK_EX | LOCK_NB) < 0;
    close(fd);
    if (live)
        return true;
    char *end;
    long pid = strtol(name, &end, 10);
    if (*end || pid <= 0)
        return false;
    char path[64], comm[64];
    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    return read_file(path, comm, sizeof comm) == 0 && strncmp(comm, "ctxd\n", 5) == 0;
}

/* Makes this daemon's tree directory in the lock root (v2, else the first
 * v1 hierarchy) and locks it for the daemon's life. A starting daemon's
 * cleanup may take the lock of a directory made a moment ago and remove
 * it: then the directory locked is not the one at the path, and it is made
 * again. */
static void lock_tree(const char *root)
{
    char dir[320];
    if (snprintf(dir, sizeof dir, "%s/ctxd/%s", root, tree) >= (int)sizeof dir)
        return;
    for (int tries = 0; tries < 8; tries++) {
        char parent[320];
        snprintf(parent, sizeof parent, "%s/ctxd", root);
        if ((mkdir(parent, 0755) < 0 && errno != EEXIST) ||
            (mkdir(dir, 0755) < 0 && errno != EEXIST))
            break;
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        struct stat held, now;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &held) == 0 && stat(dir, &now) == 0 &&
            held.st_ino == now.st_ino && held.st_dev == now.st_dev) {
            tree_lock = fd;
            return;
        }
        close(fd);
    }
    sup_log("cgroup: cannot lock %s: %s (a starting daemon may remove its workers' cgroups)", dir,
            strerror(errno));
}

/* Moving a task between cgroups waits for an RCU grace period (5-10 ms
 * here) unless the hierarchy is mounted with favordynmods, which moves
 * that cost onto forks and exits (a few ns each). A daemon that puts every
 * new worker into a cgroup of its own wants the trade: it remounts the v2
 * tree so (as root, unless --no-cgroup-tuning), keeping the mount's flags. */
static void favor_dynmods(void)
{
    const char *v2 = sbx_cgroup_v2_mount();
    if (!v2 || geteuid() != 0 || sup_cfg.no_cgroup_tuning)
        return;
    FILE *f = fopen("/proc/self/mounts", "re");
    char line[1024];
    bool found = false, set = false;
    while (f && fgets(line, sizeof line, f)) {
        char dev[256], dir[256], type[64], opts[512];
        if (sscanf(line, "%255s %255s %63s %511s", dev, dir, type, opts) == 4 && !strcmp(dir, v2) &&
            !strcmp(type, "cgroup2")) {
            found = true;
            set = strstr(opts, "favordynmods") != NULL;
        }
    }
    if (f)
        fclose(f);
    if (!found || set)
        return;
    struct statvfs sv;
    unsigned long flags = MS_REMOUNT;
    if (statvfs(v2, &sv) == 0) {
        flags |= (sv.f_flag & ST_NOSUID ? MS_NOSUID : 0) | (sv.f_flag & ST_NODEV ? MS_NODEV : 0) |
                 (sv.f_flag & ST_NOEXEC ? MS_NOEXEC : 0) | (sv.f_flag & ST_RDONLY ? MS_RDONLY : 0);
        flags |= sv.f_flag & ST_RELATIME ? MS_RELATIME : 0;
    }
    if (mount(NULL, v2, NULL, flags, "favordynmods") == 0)
        fprintf(stderr,
                "ctxd: remounted %s with favordynmods (cheap cgroup moves; "
                "--no-cgroup-tuning leaves it)\n",
                v2);
    else
        sup_log("cgroup: cannot remount %s with favordynmods: %s", v2, strerror(errno));
}

/* Under systemd with Delegate=yes the service's cgroup is ours, but a
 * cgroup that holds processes cannot hand controllers down to children (v2's
 * no-internal-process rule): the supervisor moves into <service>/supervisor
 * (its zygote and pip children follow it), so workers get
 * <service>/ctxd/<tree>/w<n> with memory and pids limits. */
static void enter_leaf(void)
{
    const char *base = sbx_cgroup_v2_root(), *mount = sbx_cgroup_v2_mount();
    if (!base || !mount || strcmp(base, mount) == 0)
        return; /* not delegated: today's layout at the tree's root */
    char dir[SBX_CGROUP_BASE_MAX + 32], procs[SBX_CGROUP_BASE_MAX + 64], pid[24];
    snprintf(dir, sizeof dir, "%s/supervisor", base);
    snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    if ((mkdir(dir, 0755) < 0 && errno != EEXIST) || sbx_write_file(procs, pid) < 0)
        sup_log("cgroup: cannot move into %s: %s (workers' limits may not apply)", dir,
                strerror(errno));
    else
        sup_log("cgroup: delegated subtree %s (the supervisor in %s)", base, dir);
}

/* Hands the tree's directories in every hierarchy to a reaper, once the
 * tree exists (a daemon without cgroup rights has none: no reaper). */
static void start_reaper(const char *const r[], size_t n)
{
    if (tree_lock < 0)
        return;
    char dirs[3][SUP_REAPER_DIR_MAX];
    const char *v2 = NULL, *v1[2];
    size_t nv1 = 0;
    for (size_t i = 0; i < n && i < 3; i++) {
        if (snprintf(dirs[i], sizeof dirs[i], "%s/ctxd/%s", r[i], tree) >= (int)sizeof dirs[i])
            continue;
        if (r[i] == sbx_cgroup_v2_root())
            v2 = dirs[i];
        else if (nv1 < 2)
            v1[nv1++] = dirs[i];
    }
    sup_reaper_start(v2, v1, nv1);
}

void sup_cgroup_init(void)
{
    favor_dynmods();
    enter_leaf();
    unsigned rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        rnd = (unsigned)time(NULL) ^ (unsigned)getpid();
    snprintf(tree, sizeof tree, "%dx%08x", (int)getpid(), rnd);
    const char *r[3];
    size_t n = roots(r);
    if (n)
        lock_tree(r[0]);
    for (size_t i = 0; i < n; i++) {
        char dir[256];
        if (snprintf(dir, sizeof dir, "%s/ctxd", r[i]) >= (int)sizeof dir)
            continue;
        DIR *d = opendir(dir);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            char left[512], lockdir[512];
            if (e->d_type != DT_DIR || e->d_name[0] == '.' || !strcmp(e->d_name, tree) ||
                snprintf(left, sizeof left, "%s/%s", dir, e->d_name) >= (int)sizeof left ||
                snprintf(lockdir, sizeof lockdir, "%s/ctxd/%s", r[0], e->d_name) >=
                    (int)sizeof lockdir ||
                live_tree(lockdir, e->d_name))
                continue;
            if (r[i] == sbx_cgroup_v2_root())
                (void)kill_dir(left);
            if (remove_tree(left, 0) < 0) {
                char name[SBX_CGROUP_NAME_MAX];
                snprintf(name, sizeof name, "ctxd/%.*s", SBX_CGROUP_NAME_MAX - 6, e->d_name);
                if (npending < PENDING_MAX)
                    pending[npending++] = mem_strdup(name);
                sup_timer_moved();
            }
            sup_log("cgroup: removed %s left by a daemon that is gone", left);
        }
        closedir(d);
    }
    start_reaper(r, n);
}

void sup_cgroup_new_name(char out[SBX_CGROUP_NAME_MAX])
{
    snprintf(out, SBX_CGROUP_NAME_MAX, "ctxd/%s/w%lu", tree, ++serial);
}

int sup_cgroup_kill(const char *name)
{
    const char *v2 = sbx_cgroup_v2_root();
    if (!v2 || !name[0])
        return -1;
    char dir[320];
    if (snprintf(dir, sizeof dir, "%s/%s", v2, name) >= (int)sizeof dir)
        return -1;
    return kill_dir(dir);
}

double sup_cgroup_cpu(const char *name)
{
    const char *v2 = sbx_cgroup_v2_root();
    char path[320], buf[1024];
    if (!v2 || !name[0])
        return -1;
    if (snprintf(path, sizeof path, "%s/%s/cpu.stat", v2, name) >= (int)sizeof path)
        return -1;
    if (read_file(path, buf, sizeof buf) < 0)
        return -1;
    unsigned long long usec;
    const char *line = strstr(buf, "usage_usec ");
    return line && sscanf(line, "usage_usec %llu", &usec) == 1 ? (double)usec / 1e6 : -1;
}

bool sup_cgroup_oom(const char *name)
{
    char path[320], buf[1024];
    const char *v1 = sbx_cgroup_v1_root("memory"), *v2 = sbx_cgroup_v2_root();
    if (!name[0])
        return false;
    int len = v1   ? snprintf(path, sizeof path, "%s/%s/memory.oom_control", v1, name)
              : v2 ? snprintf(path, sizeof path, "%s/%s/memory.events", v2, name)
                   : -1;
    if (len < 0 || len >= (int)sizeof path)
        return false;
    unsigned long long kills = 0;
    const char *line = read_file(path, buf, sizeof buf) == 0 ? strstr(buf, "oom_kill ") : NULL;
    return line && sscanf(line, "oom_kill %llu", &kills) == 1 && kills > 0;
}

int sup_cgroup_holds(const char *name, pid_t pid)
{
    char path[64], buf[1024], want[SBX_CGROUP_NAME_MAX + 8];
    if (!name[0] || !sbx_cgroup_v2_root())
        return -1;
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    snprintf(want, sizeof want, "\n0::/%s\n", name);
    buf[0] = '\n';
    if (read_file(path, buf + 1, sizeof buf - 1) < 0)
        return -1;
    return strstr(buf, want) != NULL;
}

int sup_cgroup_move(pid_t pid, const char *name, unsigned long long memory_bytes,
                    unsigned long long max_tasks)
{
    sbx_cgroup_limits lim = {memory_bytes, max_tasks};
    const char *failed;
    return sbx_cgroup_place(pid, name, &lim, &failed);
}

/* Tries to remove one cgroup everywhere: true when it is gone. */
static bool try_remove(const char *name)
{
    const char *r[3];
    size_t n = roots(r);
    bool gone = true;
    for (size_t i = 0; i < n; i++) {
        char dir[320];
        if (snprintf(dir, sizeof dir, "%s/%s", r[i], name) >= (int)sizeof dir)
            continue;
        if (remove_tree(dir, 0) < 0)
            gone = false;
    }
    return gone;
}

void sup_cgroup_release(char name[SBX_CGROUP_NAME_MAX])
{
    if (!name[0])
        return;
    (void)sup_cgroup_kill(name);
    if (!try_remove(name)) {
        if (npending == PENDING_MAX) {
            sup_log("cgroup: %s left behind (too many removals pending)", pending[0]);
            free(pending[0]);
            memmove(pending, pending + 1, (PENDING_MAX - 1) * sizeof *pending);
            npending--;
        }
        pending[npending++] = mem_strdup(name);
        sup_timer_moved();
    }
    name[0] = '\0';
}

double sup_cgroup_tick(double now)
{
    size_t k = 0;
    for (size_t i = 0; i < npending; i++) {
        if (try_remove(pending[i]))
            free(pending[i]);
        else
            pending[k++] = pending[i];
    }
    npending = k;
    return npending ? now + 0.05 : 0;
}

void sup_cgroup_shutdown(void)
{
    /* The killed tasks exit at once, but not synchronously: give their
     * cgroups a moment to empty. */
    for (int i = 0; i < 50 && npending; i++) {
        sup_cgroup_tick(0);
        if (npending)
            usleep(10000);
    }
    const char *r[3];
    size_t n = roots(r);
    for (size_t i = 0; i < n; i++) {
        char dir[256];
        if (snprintf(dir, sizeof dir, "%s/ctxd/%s", r[i], tree) >= (int)sizeof dir)
            continue;
        if (r[i] == sbx_cgroup_v2_root())
            (void)kill_dir(dir);
        (void)remove_tree(dir, 0);
    }
    if (tree_lock >= 0) {
        close(tree_lock);
        tree_lock = -1;
    }
}
