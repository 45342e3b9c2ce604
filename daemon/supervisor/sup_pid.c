/* sup_pid: getpid() without a system call in the supervisor.
 *
 * libzmq checks getpid() at every signal between its threads (its guard
 * against use after fork): eleven system calls per `x = 1` in the loop and
 * the I/O thread, a tenth of the supervisor's. This definition takes the
 * place of libc's for the whole process (libzmq's calls included: the
 * executable's symbol comes first). The pid is kept in a page that fork
 * wipes (MADV_WIPEONFORK), so a forked child (sup_child_fork) asks the
 * kernel again and caches its own; the supervisor makes no other children
 * (no vfork, no clone sharing its memory). Where the kernel has no
 * MADV_WIPEONFORK, every call is the system call, as before. */
#include <stdatomic.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

static _Atomic pid_t *cached; /* in the wiped page; NULL: no cache */

/* Maps the page before main (and before libzmq starts a thread). */
__attribute__((constructor)) static void sup_pid_init(void)
{
    long size = sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, (size_t)(size > 0 ? size : 4096), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return;
    if (madvise(p, (size_t)(size > 0 ? size : 4096), MADV_WIPEONFORK) != 0) {
        munmap(p, (size_t)(size > 0 ? size : 4096));
        return;
    }
    atomic_store(&cached, (_Atomic pid_t *)p);
}

/* The process id: from the page while this process wrote it there, from
 * the kernel in a fresh child (the page reads 0 there). */
pid_t getpid(void)
{
    _Atomic pid_t *c = atomic_load_explicit(&cached, memory_order_relaxed);
    pid_t pid = c ? atomic_load_explicit(c, memory_order_relaxed) : 0;
    if (pid > 0)
        return pid;
    pid = (pid_t)syscall(SYS_getpid);
    if (c)
        atomic_store_explicit(c, pid, memory_order_relaxed);
    return pid;
}
