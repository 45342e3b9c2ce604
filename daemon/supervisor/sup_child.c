/* sup_child: forking a child of the supervisor (a worker by exec, the
 * zygote, pip), and what it gets back before it execs. */
#include "sup_child.h"

#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

static struct rlimit nofile; /* the limit children get back */

/* Three descriptors per context: 1,000 contexts need more than the usual
 * soft limit of 1024. Children get the original limit back. */
void sup_child_raise_limits(void)
{
    getrlimit(RLIMIT_NOFILE, &nofile);
    struct rlimit more = nofile;
    more.rlim_cur = more.rlim_max;
    setrlimit(RLIMIT_NOFILE, &more);
}

/* A child must not run with the supervisor's descriptor limit. */
void sup_child_limits(void)
{
    if (nofile.rlim_cur)
        setrlimit(RLIMIT_NOFILE, &nofile);
}

/* The one way the supervisor forks (see sup_child.h). */
pid_t sup_child_fork(void)
{
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    pid_t self = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != self) /* the supervisor died before the signal was armed */
            _exit(1);
        return 0;
    }
    int saved = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid > 0)
        setpgid(pid, pid); /* also in the child: whichever runs first wins */
    errno = saved;
    return pid;
}

/* What a child must not inherit from the supervisor's signal set-up. */
void sup_child_signals(void)
{
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}
