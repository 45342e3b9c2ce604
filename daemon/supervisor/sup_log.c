/* sup_log: the supervisor's clocks and its verbose log. */
#include "sup_log.h"

#include "sup_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* Monotonic seconds: every timer and deadline of the supervisor. */
double sup_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wall clock seconds: what clients are told (created, uptime). */
double sup_unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool timer_moved;

/* Called wherever a timer is set between two ticks: without it the loop
 * could sleep past the new time (or forever) on the timeout computed by
 * the last tick. */
void sup_timer_moved(void)
{
    timer_moved = true;
}

/* The loop's side of sup_timer_moved. */
bool sup_timer_take(void)
{
    bool m = timer_moved;
    timer_moved = false;
    return m;
}

/* The daemon's diagnostics, only with --verbose. */
void sup_log(const char *fmt, ...)
{
    if (!sup_cfg.verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("ctxd: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
