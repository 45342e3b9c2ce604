/* sbx_host: the confinement steps' link to the program they confine. */
#include "sbx_host.h"

#include <stdarg.h>
#include <stdio.h>

static const sbx_host *host;

/* Set once by the worker, before it applies any step. */
void sbx_host_set(const sbx_host *h)
{
    host = h;
}

/* The sandbox's diagnostics, formatted here so the host only writes lines. */
void sbx_host_log(const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (host && host->log)
        host->log(msg);
    else
        fprintf(stderr, "%s\n", msg);
}

/* Passes through to the host, which knows how it reads /proc. */
int sbx_host_stat_range(int first_field, unsigned long long *start, unsigned long long *end)
{
    *start = *end = 0;
    return host && host->stat_range ? host->stat_range(first_field, start, end) : -1;
}
