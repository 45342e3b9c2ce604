/* wrk_log: diagnostics to the stderr the worker was started with. */
#include "wrk_log.h"

#include <string.h>

#include <stdlib.h>

#include <fcntl.h>

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static int log_fd = 2;

/* Remembers where diagnostics go once fd 2 has been redirected. */
void wrk_log_init(int fd)
{
    /* A worker forked from another gets a new one: the old copy goes. */
    if (log_fd > 2 && log_fd != fd)
        close(log_fd);
    log_fd = fd;
}

/* One unbuffered write per message so lines from concurrent threads do not
 * mix and nothing is lost when the worker exits right after. */
void wrk_log(const char *fmt, ...)
{
    char line[1024];
    int n = snprintf(line, sizeof line, "ctxd-worker[%ld]: ", (long)getpid());
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    if (write(log_fd, line, len) < 0)
        return;
}

int wrk_log_stat_range(int first_field, unsigned long long *start, unsigned long long *end)
{
    char stat[2048];
    *start = *end = 0;
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    ssize_t len = fd >= 0 ? read(fd, stat, sizeof stat - 1) : -1;
    if (fd >= 0)
        close(fd);
    char *p = len > 0 ? strrchr((stat[len] = '\0', stat), ')') : NULL;
    for (int field = 2; p && *p && field <= first_field + 1; field++) { /* ")" ends field 2 */
        p = strchr(p + 1, ' ');
        if (p && field == first_field)
            *start = strtoull(p + 1, NULL, 10);
        if (p && field == first_field + 1)
            *end = strtoull(p + 1, NULL, 10);
    }
    return *start && *end > *start ? 0 : -1;
}

/* Threads of this process (/proc/self/status), 0 if unknown. */
int wrk_log_thread_count(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *t = strstr(buf, "\nThreads:");
    return t ? atoi(t + 9) : 0;
}
