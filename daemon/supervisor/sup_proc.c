/* sup_proc: the supervisor's handle on its worker processes. Every worker is
 * known by a pidfd taken as soon as its pid is known from the supervisor's
 * own means (its fork, the zygote's answer, a verified ctx.fork copy), and
 * every signal goes through it: a pid number a worker sent is never
 * signalled (PROTOCOL.md section 9, "What the supervisor trusts"). */
#include "sup_proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/pidfd.h>
#include <time.h>
#include <unistd.h>

/* The handle by which a worker is signalled; never for pid 0, 1 or a
 * negative (group) number. */
int sup_proc_open(pid_t pid)
{
    if (pid <= 1)
        return -1;
    int fd = pidfd_open(pid, 0);
    if (fd < 0)
        return -1;
    return fd;
}

/* True while the process behind pidfd has not been reaped (running or a
 * zombie): its pid, and so its process group id, cannot be reused yet. */
bool sup_proc_alive(int pidfd)
{
    return pidfd >= 0 && pidfd_send_signal(pidfd, 0, NULL, 0) == 0;
}

/* Signals the process itself, never anything else: a reaped one (a stale
 * pidfd) is simply not signalled. */
void sup_proc_signal(int pidfd, int sig)
{
    if (pidfd >= 0)
        (void)pidfd_send_signal(pidfd, sig, NULL, 0);
}

/* Signals the process group a worker leads (what its code started), only
 * while the pidfd shows the leader alive, so the group id is still the
 * worker's. The leader itself gets it by its pidfd when it left its group,
 * and always for SIGKILL (a second SIGINT could hit the handling of the
 * first). */
void sup_proc_signal_group(int pidfd, pid_t leader, int sig)
{
    bool leads = false;
    if (leader > 1 && leader != getpid() && leader != getpgrp() && sup_proc_alive(pidfd)) {
        leads = getpgid(leader) == leader;
        (void)kill(-leader, sig);
    }
    if (!leads || sig == SIGKILL)
        sup_proc_signal(pidfd, sig);
}

/* Reads /proc/PID/stat: the parent pid and the start time (clock ticks
 * after boot). The command name may hold spaces and parentheses: the
 * fields start after its last ')'. */
static int read_stat(pid_t pid, pid_t *ppid, unsigned long long *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    int pp;
    /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
     * cmajflt utime stime cutime cstime priority nice num_threads
     * itrealvalue starttime */
    if (sscanf(p + 1,
               " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &pp, start) != 2)
        return -1;
    *ppid = pp;
    return 0;
}

/* The uid a process runs as, for comparing a fork copy with its source. */
int sup_proc_uid(pid_t pid, uid_t *uid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long r, e, s, fs;
        if (sscanf(line, "Uid: %lu %lu %lu %lu", &r, &e, &s, &fs) == 4) {
            /* All four must agree: a process in the middle of changing
             * uid is nobody's copy. */
            if (r == e && e == s && s == fs) {
                *uid = (uid_t)r;
                rc = 0;
            }
            break;
        }
    }
    fclose(f);
    return rc;
}

/* Now, in the unit and clock of /proc/PID/stat's start time, so a process
 * can be told to be younger than an event. */
uint64_t sup_proc_boot_ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        hz = 100;
    return (uint64_t)ts.tv_sec * (uint64_t)hz +
           (uint64_t)ts.tv_nsec / (1000000000ull / (uint64_t)hz);
}

/* The checks a pid named by a worker must pass before the supervisor holds
 * it as a worker: its own child, of that uid, new; the pidfd is taken first
 * and checked alive last, so /proc was read about that very process. */
int sup_proc_adopt_child(pid_t pid, uid_t uid, uint64_t since, char *why, size_t n)
{
    if (pid <= 1 || pid == getpid()) {
        snprintf(why, n, "pid %d is not a process the supervisor made", (int)pid);
        return -1;
    }
    int fd = pidfd_open(pid, 0);
    if (fd < 0) {
        snprintf(why, n, "pid %d is not a live process", (int)pid);
        return -1;
    }
    pid_t ppid;
    unsigned long long start;
    uid_t have;
    if (read_stat(pid, &ppid, &start) < 0 || sup_proc_uid(pid, &have) < 0) {
        snprintf(why, n, "pid %d cannot be read in /proc", (int)pid);
    } else if (ppid != getpid()) {
        snprintf(why, n, "pid %d is not a child of the supervisor", (int)pid);
    } else if (have != uid) {
        snprintf(why, n, "pid %d runs as uid %lu, not as the worker's uid %lu", (int)pid,
                 (unsigned long)have, (unsigned long)uid);
    } else if (start < since) {
        snprintf(why, n, "pid %d is older than the fork it claims to be", (int)pid);
    } else if (!sup_proc_alive(fd)) {
        /* What /proc said may have been about a new process of that pid. */
        snprintf(why, n, "pid %d ended while it was checked", (int)pid);
    } else {
        return fd;
    }
    close(fd);
    return -1;
}
