/* sup_pss: see sup_pss.h. One thread, a fixed table of slots under one
 * mutex: the loop never waits for a read, only for the mutex, which the
 * thread holds only to take or fill a slot (never while reading). */
#include "sup_pss.h"

#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum { FREE, ASKED, READING, DONE };

static struct {
    int state;
    pid_t pid;
    uint64_t pss;
    bool ok;
    uint64_t order; /* asked first, read first */
} slots[SUP_PSS_SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t asked = PTHREAD_COND_INITIALIZER;
static uint64_t next_order;
static int done_fd = -1;

bool sup_pss_read(pid_t pid, uint64_t *pss)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    size_t len = 0; /* the file is ~1 KiB; a longer one is cut (Pss comes early) */
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == sizeof buf - 1)
            break;
    }
    close(fd);
    buf[len] = '\0';
    const char *p = strstr(buf, "\nPss:");
    unsigned long long kb;
    if (!p || sscanf(p, "\nPss: %llu kB", &kb) != 1)
        return false;
    *pss = (uint64_t)kb * 1024;
    return true;
}

/* The oldest asked slot, marked READING; waits for one. Holds lock. */
static int take_asked(void)
{
    for (;;) {
        int best = -1;
        for (int i = 0; i < SUP_PSS_SLOTS; i++)
            if (slots[i].state == ASKED && (best < 0 || slots[i].order < slots[best].order))
                best = i;
        if (best >= 0) {
            slots[best].state = READING;
            return best;
        }
        pthread_cond_wait(&asked, &lock);
    }
}

/* The thread: reads what is asked, one at a time, and signals done_fd. */
static void *reader(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        int i = take_asked();
        pid_t pid = slots[i].pid;
        pthread_mutex_unlock(&lock);
        uint64_t pss = 0;
        bool ok = sup_pss_read(pid, &pss);
        pthread_mutex_lock(&lock);
        slots[i].pss = pss;
        slots[i].ok = ok;
        slots[i].state = DONE;
        uint64_t one = 1;
        if (write(done_fd, &one, sizeof one) < 0 && errno != EAGAIN)
            fatal("sup_pss: eventfd write: %s", strerror(errno));
    }
    return NULL;
}

int sup_pss_start(void)
{
    if (done_fd >= 0)
        return done_fd;
    done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (done_fd < 0)
        fatal("sup_pss: eventfd: %s", strerror(errno));
    /* No signal for the thread: the loop takes them all by its signalfd. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t t;
    int e = pthread_create(&t, &attr, reader, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0)
        fatal("sup_pss: pthread_create: %s", strerror(e));
    pthread_setname_np(t, "ctxd-pss");
    return done_fd;
}

int sup_pss_ask(pid_t pid)
{
    if (done_fd < 0 || pid <= 0)
        return -1;
    int slot = -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < SUP_PSS_SLOTS && slot < 0; i++)
        if (slots[i].state == FREE)
            slot = i;
    if (slot >= 0) {
        slots[slot].state = ASKED;
        slots[slot].pid = pid;
        slots[slot].order = next_order++;
        pthread_cond_signal(&asked);
    }
    pthread_mutex_unlock(&lock);
    return slot;
}

void sup_pss_collect(sup_pss_done_fn done)
{
    uint64_t n;
    if (done_fd < 0 || read(done_fd, &n, sizeof n) < 0)
        return; /* EAGAIN: nothing signalled since the last collect */
    struct {
        int slot;
        pid_t pid;
        uint64_t pss;
        bool ok;
    } got[SUP_PSS_SLOTS];
    int k = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < SUP_PSS_SLOTS; i++)
        if (slots[i].state == DONE) {
            got[k].slot = i;
            got[k].pid = slots[i].pid;
            got[k].pss = slots[i].pss;
            got[k].ok = slots[i].ok;
            k++;
            slots[i].state = FREE;
        }
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < k; i++)
        done(got[i].slot, got[i].pid, got[i].pss, got[i].ok);
}
