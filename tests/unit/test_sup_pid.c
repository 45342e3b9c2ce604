/* sup_pid (daemon/supervisor): the supervisor's getpid() without a system
 * call. What must hold: it answers the kernel's pid, in the process and
 * in every thread, and a forked child (whose copy of the cache page fork
 * wiped) gets its own pid, not its parent's, also in its own children.
 * The test links sup_pid.c, so its getpid() is the one called here, as in
 * ctxd (and by libc-using code through the same symbol). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit_check.h"

static pid_t kernel_pid(void)
{
    return (pid_t)syscall(SYS_getpid);
}

/* A thread's answer, compared in the test's main thread. */
static void *in_thread(void *out)
{
    *(pid_t *)out = getpid();
    return NULL;
}

/* In a fresh child (and its own child, two forks deep): its own pid at
 * the first call and at later ones; exit status 0 when so. */
static int child_checks(pid_t parent, int depth)
{
    pid_t me = kernel_pid();
    if (me == parent || getpid() != me || getpid() != me)
        return 1;
    if (depth == 0)
        return 0;
    pid_t c = fork();
    if (c == 0)
        _exit(child_checks(me, depth - 1));
    int st = 0;
    if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st))
        return 1;
    return WEXITSTATUS(st);
}

int main(void)
{
    pid_t self = kernel_pid();
    CHECK(getpid() == self);
    CHECK(getpid() == self); /* the cached answer */

    pid_t seen = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, in_thread, &seen) == 0);
    pthread_join(t, NULL);
    CHECK(seen == self);

    pid_t c = fork();
    if (c == 0)
        _exit(child_checks(self, 1));
    int st = 0;
    CHECK(c > 0 && waitpid(c, &st, 0) == c);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(getpid() == self); /* the parent's cache is untouched by the child's */

    if (failures)
        fprintf(stderr, "test_sup_pid: %d check(s) failed\n", failures);
    else
        printf("test_sup_pid: ok\n");
    return failures ? 1 : 0;
}
