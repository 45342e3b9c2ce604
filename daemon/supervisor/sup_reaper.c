/* sup_reaper: the daemon's tree dies with the supervisor.
 *
 * Every worker, and whatever it starts (setsid, double-forked, a forked
 * copy of the worker itself), is in the daemon's cgroup tree ctxd/<tree>
 * (sup_cgroup.c). A supervisor that exits kills that tree itself; one that
 * is SIGKILLed cannot. The reaper is a child of the supervisor, forked
 * when the tree is made, before any worker, that holds nothing but the
 * tree's directories: no descriptor of the supervisor's (all are closed),
 * every catchable signal blocked, in the supervisor's cgroup (no
 * context's: killing a context's cgroup never kills it) and never chosen
 * by the OOM killer. It waits for its parent's death (PR_SET_PDEATHSIG,
 * then checked: its parent is no longer the supervisor), then writes
 * cgroup.kill of the v2 tree, kills every task in the v1 memory/pids trees
 * (until they are empty), removes the directories, detaches the disk
 * budgets' file systems mounted on the daemon's private directories
 * (sup_disk.c) and exits.
 *
 * Workers of the confined tiers run under uids of their own and cannot
 * signal it; an `unsafe` run has the daemon's uid and can: the supervisor
 * learns of the reaper's death (SIGCHLD) and starts another at once; one
 * that is stopped (SIGSTOP) is killed, and so replaced. Only the moment
 * between the two is not covered.
 *
 * After the fork the child runs only system calls (the supervisor has
 * threads; nothing it held, locks or heap, is touched). */
#include "sup_reaper.h"

#include "sup_log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef UMOUNT_NOFOLLOW
#define UMOUNT_NOFOLLOW 8
#endif

#define NDIRS 3
/* How long the reaper waits for killed tasks to leave their cgroups. */
#define REMOVE_TRIES 500
#define REMOVE_PAUSE_NS 10000000L

static char dirs[NDIRS][SUP_REAPER_DIR_MAX];
static size_t ndirs;
static char mounts[SUP_REAPER_DIR_MAX]; /* STATE/contexts/<instance>, or "" */
static bool have_v2;                    /* dirs[0] is the v2 tree */
static pid_t reaper;
static unsigned restarts;

/* Writes text to path (a control file) with system calls only. */
static void put(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!write(fd, text, strlen(text));
        close(fd);
    }
}

/* Joins dir and name into out (SUP_REAPER_DIR_MAX + 64); false if too long. */
static bool join(char *out, size_t n, const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    if (a + 1 + b + 1 > n)
        return false;
    memcpy(out, dir, a);
    out[a] = '/';
    memcpy(out + a + 1, name, b + 1);
    return true;
}

/* For each subdirectory of dir (depth-limited), deepest first, calls fn;
 * then fn(dir). Returns the OR of fn's results. */
static int walk(const char *dir, int depth, int (*fn)(const char *))
{
    int r = 0;
    int fd = depth < 8 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW) : -1;
    if (fd >= 0) {
        char buf[4096], sub[SUP_REAPER_DIR_MAX + 64];
        long got;
        while ((got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
            for (long off = 0; off < got;) {
                struct dirent64 *e = (struct dirent64 *)(buf + off);
                off += e->d_reclen;
                if (e->d_type == DT_DIR && e->d_name[0] != '.' &&
                    join(sub, sizeof sub, dir, e->d_name))
                    r |= walk(sub, depth + 1, fn);
            }
        }
        close(fd);
    }
    return r | fn(dir);
}

/* Kills every task listed in dir's cgroup.procs: 1 when it found one. */
static int kill_listed(const char *dir)
{
    char path[SUP_REAPER_DIR_MAX + 80], buf[4096];
    if (!join(path, sizeof path, dir, "cgroup.procs"))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int found = 0;
    long pid = 0;
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < got; i++) {
            if (buf[i] >= '0' && buf[i] <= '9') {
                pid = pid * 10 + (buf[i] - '0');
                continue;
            }
            if (pid > 0 && kill((pid_t)pid, SIGKILL) == 0)
                found = 1;
            pid = 0;
        }
    if (pid > 0 && kill((pid_t)pid, SIGKILL) == 0)
        found = 1;
    close(fd);
    return found;
}

/* rmdir of one cgroup directory: 1 while it is still there. */
static int remove_one(const char *dir)
{
    return rmdir(dir) < 0 && errno != ENOENT;
}

/* Lazily detaches the mount on each directory directly under mounts (the
 * private directories, some with a disk budget's tmpfs; EINVAL where none).
 * The directory is root's, 0711: no worker renames or links its entries. */
static void detach_mounts(void)
{
    int fd = mounts[0] ? open(mounts, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW) : -1;
    if (fd < 0)
        return;
    char buf[4096], sub[SUP_REAPER_DIR_MAX + 64];
    long got;
    while ((got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
        for (long off = 0; off < got;) {
            struct dirent64 *e = (struct dirent64 *)(buf + off);
            off += e->d_reclen;
            if (e->d_type == DT_DIR && e->d_name[0] != '.' &&
                join(sub, sizeof sub, mounts, e->d_name))
                (void)syscall(SYS_umount2, sub, MNT_DETACH | UMOUNT_NOFOLLOW);
        }
    close(fd);
}

/* The supervisor is gone: kill its tree, remove it, exit. */
static _Noreturn void reap(void)
{
    if (have_v2) {
        char path[SUP_REAPER_DIR_MAX + 80];
        if (join(path, sizeof path, dirs[0], "cgroup.kill"))
            put(path, "1");
    }
    struct timespec pause = {0, REMOVE_PAUSE_NS};
    for (int i = 0; i < REMOVE_TRIES; i++) {
        int left = 0;
        for (size_t k = have_v2 ? 1 : 0; k < ndirs; k++)
            left |= walk(dirs[k], 0, kill_listed); /* v1: no cgroup.kill */
        for (size_t k = 0; k < ndirs; k++)
            left |= walk(dirs[k], 0, remove_one);
        if (!left)
            break;
        nanosleep(&pause, NULL);
    }
    detach_mounts(); /* after the kill: no worker holds them open any more */
    _exit(0);
}

/* The reaper's life after the fork: waits for its parent's death. */
static _Noreturn void serve(pid_t parent)
{
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    /* Nothing of the supervisor's: its sockets, channels and log. */
    syscall(SYS_close_range, 0U, ~0U, 0U);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; null >= 0 && fd < 3; fd++)
        if (fd != null)
            dup2(null, fd);
    setpgid(0, 0); /* a terminal's ^C or a kill of the daemon's group misses it */
    prctl(PR_SET_NAME, "ctxd-reaper");
    put("/proc/self/oom_score_adj", "-1000");
    prctl(PR_SET_PDEATHSIG, SIGUSR2);
    for (;;) {
        if (getppid() != parent) /* also: died before the signal was armed */
            reap();
        siginfo_t si;
        (void)sigwaitinfo(&all, &si); /* anyone's signal: look again */
    }
}

/* Forks a reaper; logs when it cannot. */
static void fork_reaper(void)
{
    pid_t parent = getpid();
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0)
        serve(parent);
    int e = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        sup_log("reaper: cannot fork: %s (a SIGKILLed daemon's workers outlive it until the "
                "next daemon starts)",
                strerror(e));
        return;
    }
    reaper = pid;
}

void sup_reaper_mounts_under(const char *dir)
{
    if (dir && strlen(dir) < SUP_REAPER_DIR_MAX)
        snprintf(mounts, sizeof mounts, "%s", dir);
}

void sup_reaper_start(const char *v2_dir, const char *const v1_dirs[], size_t nv1)
{
    ndirs = 0;
    have_v2 = false;
    if (v2_dir && strlen(v2_dir) < SUP_REAPER_DIR_MAX) {
        snprintf(dirs[ndirs++], SUP_REAPER_DIR_MAX, "%s", v2_dir);
        have_v2 = true;
    }
    for (size_t i = 0; i < nv1 && ndirs < NDIRS; i++)
        if (strlen(v1_dirs[i]) < SUP_REAPER_DIR_MAX)
            snprintf(dirs[ndirs++], SUP_REAPER_DIR_MAX, "%s", v1_dirs[i]);
    if (ndirs)
        fork_reaper();
}

void sup_reaper_check(void)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (reaper <= 0 || waitid(P_PID, (id_t)reaper, &si, WSTOPPED | WNOHANG) < 0 ||
        si.si_pid != reaper)
        return;
    sup_log("reaper: pid %d was stopped (signal %d): killed, another is started", (int)reaper,
            si.si_status);
    kill(reaper, SIGKILL);
}

bool sup_reaper_on_exit(pid_t pid, int status)
{
    if (pid <= 0 || pid != reaper)
        return false;
    reaper = 0;
    restarts++;
    sup_log("reaper: pid %d ended (%s %d); starting another (%u so far)", (int)pid,
            WIFSIGNALED(status) ? "signal" : "status",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), restarts);
    fork_reaper();
    return true;
}
