/* sup_uidsweep: what a uid leaves behind on the host, removed before the
 * uid is handed to another context (sup_ident.c, on a wrap-around of its
 * allocator) or a range changes hands (sup_uidreg.c, a range claimed anew).
 *
 * Confined workers have IPC namespaces of their own (sbx_apply.c), so
 * their SysV objects and message queues die with them; the host's are
 * swept anyway, for anything that ever ran as the uid outside ctxd. Files
 * are walked by descriptor, never following a link nor leaving the
 * filesystem each place starts on. */
#include "sup_uidsweep.h"

#include "sup_child.h"
#include "sup_log.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_DEPTH 64
#define KILL_PASSES 20

#ifndef KEYCTL_CLEAR
#define KEYCTL_GET_PERSISTENT 22
#define KEYCTL_CLEAR 7
#endif
#define KEY_SPEC_USER_KEYRING (-4)
#define KEY_SPEC_USER_SESSION_KEYRING (-5)

static uid_t sw_lo, sw_hi;
static sup_uidsweep_owned sw_owned;

static bool swept(unsigned long uid)
{
    return uid >= sw_lo && uid <= sw_hi && sw_owned((uid_t)uid);
}

/* Whether /proc/PID/status shows a swept uid in any of its four uids. */
static bool proc_swept(int procfd, const char *pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "%s/status", pid);
    int fd = openat(procfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *u = strstr(buf, "\nUid:");
    if (!u)
        return false;
    u += 5;
    for (int i = 0; i < 4; i++) {
        char *end;
        unsigned long v = strtoul(u, &end, 10);
        if (end == u)
            break;
        if (swept(v))
            return true;
        u = end;
    }
    return false;
}

/* SIGKILLs every process of a swept uid, by pidfd (checked again after the
 * pidfd is open, so a reused pid is never hit); passes until none is left. */
static unsigned kill_processes(void)
{
    unsigned killed = 0;
    int procfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (procfd < 0)
        return 0;
    for (int pass = 0; pass < KILL_PASSES; pass++) {
        unsigned found = 0;
        int d2 = dup(procfd);
        DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
        if (!d)
            break;
        rewinddir(d);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!isdigit((unsigned char)e->d_name[0]) || !proc_swept(procfd, e->d_name))
                continue;
            int pfd = (int)syscall(SYS_pidfd_open, (pid_t)atoi(e->d_name), 0);
            if (pfd < 0)
                continue;
            if (proc_swept(procfd, e->d_name) &&
                syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0) == 0)
                found++;
            close(pfd);
        }
        closedir(d);
        killed += found;
        if (!found)
            break;
        usleep(10000); /* let them die before looking for their children */
    }
    close(procfd);
    return killed;
}

/* Removes dfd/name, a directory, with all it holds. */
static unsigned rmtree_at(int dfd, const char *name, int depth)
{
    unsigned n = 0;
    int fd =
        depth < MAX_DEPTH ? openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            struct stat st;
            if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            if (S_ISDIR(st.st_mode))
                n += rmtree_at(fd, e->d_name, depth + 1);
            else
                n += unlinkat(fd, e->d_name, 0) == 0;
        }
        closedir(d);
    } else if (fd >= 0) {
        close(fd);
    }
    return n + (unlinkat(dfd, name, AT_REMOVEDIR) == 0);
}

/* Removes what swept uids own under dfd (a directory on device dev):
 * their files, and their directories whole. */
static unsigned sweep_tree(int dfd, dev_t dev, int depth)
{
    unsigned n = 0;
    int d2 = dup(dfd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!d) {
        if (d2 >= 0)
            close(d2);
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != dev)
            continue;
        if (swept(st.st_uid)) {
            n += S_ISDIR(st.st_mode) ? rmtree_at(dfd, e->d_name, depth + 1)
                                     : (unsigned)(unlinkat(dfd, e->d_name, 0) == 0);
        } else if (S_ISDIR(st.st_mode) && depth < MAX_DEPTH) {
            int sub = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                n += sweep_tree(sub, dev, depth + 1);
                close(sub);
            }
        }
    }
    closedir(d);
    return n;
}

static unsigned sweep_place(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    unsigned n = fd >= 0 && fstat(fd, &st) == 0 ? sweep_tree(fd, st.st_dev, 0) : 0;
    if (fd >= 0)
        close(fd);
    return n;
}

/* Removes the SysV objects of /proc/sysvipc/WHAT whose uid or creator uid
 * is swept. */
static unsigned sweep_sysv(const char *what)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/sysvipc/%s", what);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    int id_col = -1, uid_col = -1, cuid_col = -1, col = 0;
    unsigned n = 0;
    if (fgets(line, sizeof line, f))
        for (char *t = strtok(line, " \n"); t; t = strtok(NULL, " \n"), col++) {
            if (strcmp(t, "shmid") == 0 || strcmp(t, "semid") == 0 || strcmp(t, "msqid") == 0)
                id_col = col;
            else if (strcmp(t, "uid") == 0)
                uid_col = col;
            else if (strcmp(t, "cuid") == 0)
                cuid_col = col;
        }
    while (id_col >= 0 && uid_col >= 0 && cuid_col >= 0 && fgets(line, sizeof line, f)) {
        long id = -1;
        bool hit = false;
        col = 0;
        for (char *t = strtok(line, " \n"); t; t = strtok(NULL, " \n"), col++) {
            if (col == id_col)
                id = atol(t);
            else if (col == uid_col || col == cuid_col)
                hit |= swept(strtoul(t, NULL, 10));
        }
        if (!hit || id < 0)
            continue;
        int rc = what[1] == 'h'   ? shmctl((int)id, IPC_RMID, NULL)
                 : what[1] == 'e' ? semctl((int)id, 0, IPC_RMID)
                                  : msgctl((int)id, IPC_RMID, NULL);
        n += rc == 0;
    }
    fclose(f);
    return n;
}

/* Waits for a child forked for the sweep; its exit status. */
static int wait_child(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

/* The host IPC namespace's POSIX message queues of swept uids: in a child
 * of its own mount namespace, an mqueue filesystem mounted over /dev (the
 * host may have none mounted), walked like a directory. */
static unsigned sweep_mqueues(void)
{
    pid_t pid = sup_child_fork();
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount("mqueue", "/dev", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
            _exit(0);
        unsigned n = sweep_place("/dev");
        _exit(n > 255 ? 255 : (int)n);
    }
    return pid > 0 ? (unsigned)wait_child(pid) : 0;
}

/* Clears the user keyrings of every swept uid /proc/key-users lists: in a
 * child that becomes the uid (keyrings answer to their owner, not root). */
static unsigned sweep_keyrings(void)
{
    FILE *f = fopen("/proc/key-users", "re");
    if (!f)
        return 0;
    unsigned n = 0;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long uid = strtoul(line, NULL, 10);
        if (!swept(uid))
            continue;
        pid_t pid = sup_child_fork();
        if (pid == 0) {
            if (setgroups(0, NULL) < 0 || setresgid((gid_t)uid, (gid_t)uid, (gid_t)uid) < 0 ||
                setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0)
                _exit(0);
            long persistent = syscall(SYS_keyctl, KEYCTL_GET_PERSISTENT, -1, 0);
            int cleared = syscall(SYS_keyctl, KEYCTL_CLEAR, KEY_SPEC_USER_KEYRING) == 0;
            cleared += syscall(SYS_keyctl, KEYCTL_CLEAR, KEY_SPEC_USER_SESSION_KEYRING) == 0;
            if (persistent >= 0)
                cleared += syscall(SYS_keyctl, KEYCTL_CLEAR, persistent) == 0;
            _exit(cleared);
        }
        if (pid > 0)
            n += wait_child(pid) > 0;
    }
    fclose(f);
    return n;
}

unsigned sup_uidsweep_run(uid_t lo, uid_t hi, sup_uidsweep_owned owned)
{
    sw_lo = lo;
    sw_hi = hi;
    sw_owned = owned;
    unsigned procs = kill_processes();
    unsigned files = sweep_place("/dev/shm") + sweep_place("/tmp") + sweep_place("/var/tmp");
    unsigned ipc = sweep_sysv("shm") + sweep_sysv("sem") + sweep_sysv("msg") + sweep_mqueues();
    unsigned keys = sweep_keyrings();
    sup_log("uid sweep %u..%u: %u processes killed, %u files, %u IPC objects, %u keyrings",
            (unsigned)lo, (unsigned)hi, procs, files, ipc, keys);
    return procs + files + ipc + keys;
}
