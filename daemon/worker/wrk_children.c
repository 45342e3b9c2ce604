/* wrk_children: a look at the worker's children through waitid(2) and
 * getrusage(2), which never waits and never reaps. */
#include "wrk_children.h"

#include <sys/resource.h>
#include <sys/wait.h>

/* The children's usage (faults, switches, times) at the last look. */
static long long child_usage;
/* The children's CPU seconds at the last look. */
static double child_cpu;

/* Reaped children show as a change in their summed usage. */
bool wrk_children_look(void)
{
    siginfo_t si = {0};
    bool kids = waitid(P_ALL, 0, &si, WEXITED | WSTOPPED | WCONTINUED | WNOHANG | WNOWAIT) == 0;
    struct rusage ru;
    long long usage = 0;
    child_cpu = 0;
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0) {
        usage = ru.ru_minflt + ru.ru_majflt + ru.ru_nvcsw + ru.ru_nivcsw + ru.ru_utime.tv_sec +
                ru.ru_utime.tv_usec + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec;
        child_cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    }
    bool reaped = usage != child_usage;
    child_usage = usage;
    return kids || reaped;
}

double wrk_children_cpu(void)
{
    return child_cpu;
}

void wrk_children_forget(void)
{
    child_usage = 0;
}
