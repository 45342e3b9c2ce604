/* ctxd-icount: counts the user-space instructions a running process
 * executes, exactly, by single-stepping every one of its threads with
 * ptrace. tools/bench/bench.py uses it for figure 9 (the supervisor's
 * instructions per `x = 1`), where callgrind cannot run the supervisor
 * (Debian's valgrind 3.19 has no pidfd_open) and this VM exposes no
 * hardware counters to perf.
 *
 *     ctxd-icount PID
 *
 * Attaches to every thread of PID (and to threads it starts), prints
 * "attached" on stdout, single-steps until a line or end of file arrives on
 * stdin, detaches (the process goes on unharmed) and prints
 * "instructions N" and "steps-per-thread TID:N ...". The traced process
 * runs some thousand times slower meanwhile. Counting is by trap, so a
 * rep-prefixed string instruction counts once per iteration, in both trees
 * compared: the figure is for comparing builds, like callgrind's. Root (or
 * CAP_SYS_PTRACE) is needed. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_THREADS 256

typedef struct tracee {
    pid_t tid;
    unsigned long long steps;
    bool running; /* stepping (not stopped by us) */
    bool gone;
} tracee;

static tracee threads[MAX_THREADS];
static int nthreads;
static atomic_bool stop_asked;
static pthread_t main_thread;

/* Why it exists: a broken invariant or a refused ptrace ends the count. */
static void die(const char *what)
{
    fprintf(stderr, "ctxd-icount: %s: %s\n", what, strerror(errno));
    exit(1);
}

static tracee *find(pid_t tid)
{
    for (int i = 0; i < nthreads; i++)
        if (threads[i].tid == tid && !threads[i].gone)
            return &threads[i];
    return NULL;
}

static tracee *add(pid_t tid)
{
    if (nthreads == MAX_THREADS) {
        errno = EMFILE;
        die("too many threads");
    }
    threads[nthreads] = (tracee){.tid = tid};
    return &threads[nthreads++];
}

/* Seizes every thread listed in /proc/PID/task, until a pass finds no new
 * one (a thread may start while we attach), and stops each once. */
static void attach_all(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    for (bool found = true; found;) {
        found = false;
        DIR *d = opendir(path);
        if (!d)
            die("opendir /proc/PID/task");
        struct dirent *e;
        while ((e = readdir(d))) {
            pid_t tid = (pid_t)atoi(e->d_name);
            if (tid <= 0 || find(tid))
                continue;
            if (ptrace(PTRACE_SEIZE, tid, 0, (void *)(long)PTRACE_O_TRACECLONE) < 0) {
                if (errno == ESRCH)
                    continue;
                die("PTRACE_SEIZE");
            }
            if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0)
                die("PTRACE_INTERRUPT");
            add(tid)->running = true;
            found = true;
        }
        closedir(d);
    }
}

/* The stdin reader: any line or end of file asks the tracer to stop; a
 * signal breaks its waitpid, which may sit while every thread blocks. */
static void *watch_stdin(void *arg)
{
    (void)arg;
    char buf[64];
    (void)!read(0, buf, sizeof buf);
    atomic_store(&stop_asked, true);
    pthread_kill(main_thread, SIGUSR1);
    return NULL;
}

static void on_usr1(int sig)
{
    (void)sig;
}

/* Restarts tid for one instruction, passing sig on. */
static void step(tracee *t, int sig)
{
    if (ptrace(PTRACE_SINGLESTEP, t->tid, 0, (void *)(long)sig) < 0) {
        if (errno == ESRCH) {
            t->gone = true;
            return;
        }
        die("PTRACE_SINGLESTEP");
    }
    t->running = true;
}

/* A single step's SIGTRAP still pending for tid (it can queue behind the
 * stop PTRACE_INTERRUPT makes, and would kill the process if left). */
static bool trap_pending(pid_t tid)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    bool pending = false;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "SigPnd:", 7) == 0 || strncmp(line, "ShdPnd:", 7) == 0)
            pending = pending || (strtoull(line + 7, NULL, 16) & (1ull << (SIGTRAP - 1)));
    if (f)
        fclose(f);
    return pending;
}

/* Stops every stepping thread and detaches from all of them, each at a
 * stop where no step's SIGTRAP is left to deliver (detaching clears the
 * trap flag and a pending interrupt). */
static void detach_all(void)
{
    for (int i = 0; i < nthreads; i++)
        if (!threads[i].gone && threads[i].running)
            (void)ptrace(PTRACE_INTERRUPT, threads[i].tid, 0, 0);
    for (;;) {
        int left = 0;
        for (int i = 0; i < nthreads; i++)
            left += !threads[i].gone && threads[i].running;
        if (!left)
            break;
        int status;
        pid_t tid = waitpid(-1, &status, __WALL);
        if (tid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        tracee *t = find(tid);
        if (!t)
            continue;
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            t->gone = true;
            continue;
        }
        int sig = WSTOPSIG(status), event = status >> 16;
        if (event != 0 && trap_pending(tid)) {
            /* Resumed without the trap flag: the pending SIGTRAP stops it
             * next, and is dropped there. */
            (void)ptrace(PTRACE_CONT, tid, 0, 0);
            continue;
        }
        if (event == 0 && sig == SIGTRAP)
            t->steps++;
        /* A signal the process was to receive is passed on at detach. */
        int pass = (sig == SIGTRAP || event != 0) ? 0 : sig;
        (void)ptrace(PTRACE_DETACH, tid, 0, (void *)(long)pass);
        t->running = false;
        t->gone = true;
    }
    for (int i = 0; i < nthreads; i++)
        if (!threads[i].gone)
            (void)ptrace(PTRACE_DETACH, threads[i].tid, 0, 0);
}

int main(int argc, char **argv)
{
    if (argc != 2 || atoi(argv[1]) <= 0) {
        fprintf(stderr, "usage: ctxd-icount PID  (stops at a line or end of file on stdin)\n");
        return 2;
    }
    pid_t pid = (pid_t)atoi(argv[1]);
    main_thread = pthread_self();
    struct sigaction sa = {.sa_handler = on_usr1}; /* no SA_RESTART: waitpid returns EINTR */
    sigaction(SIGUSR1, &sa, NULL);
    attach_all(pid);
    printf("attached %d threads\n", nthreads);
    fflush(stdout);
    pthread_t reader;
    if (pthread_create(&reader, NULL, watch_stdin, NULL) != 0)
        die("pthread_create");
    while (!atomic_load(&stop_asked)) {
        int status;
        pid_t tid = waitpid(-1, &status, __WALL);
        if (tid < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ECHILD)
                break; /* the process is gone */
            die("waitpid");
        }
        tracee *t = find(tid);
        if (!t) /* a new thread may report before its parent's clone event */
            t = add(tid);
        t->running = false;
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            t->gone = true;
            continue;
        }
        int sig = WSTOPSIG(status), event = status >> 16;
        if (event == PTRACE_EVENT_CLONE) {
            unsigned long child = 0;
            if (ptrace(PTRACE_GETEVENTMSG, tid, 0, &child) == 0 && !find((pid_t)child))
                add((pid_t)child)->running = true; /* its first stop comes on its own */
            step(t, 0);
        } else if (event != 0) { /* PTRACE_EVENT_STOP: attach, interrupt, group stop */
            step(t, 0);
        } else if (sig == SIGTRAP) {
            t->steps++;
            step(t, 0);
        } else {
            step(t, sig); /* a signal for the process: delivered as usual */
        }
    }
    detach_all();
    unsigned long long total = 0;
    for (int i = 0; i < nthreads; i++)
        total += threads[i].steps;
    printf("instructions %llu\nsteps-per-thread", total);
    for (int i = 0; i < nthreads; i++)
        printf(" %d:%llu", (int)threads[i].tid, threads[i].steps);
    printf("\n");
    return 0;
}
