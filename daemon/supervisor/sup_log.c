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

static double timer_moved = -1; /* -1 none, 0 a turn now, else the earliest time */

/* Called wherever a timer is set between two ticks: without it the loop
 * could sleep past the new time (or forever) on the timeout computed by
 * the last tick. */
void sup_timer_moved(void)
{
    timer_moved = 0;
}

/* A timer set for time t: the loop need not turn before then (a run's
 * deadline: no turn at every run's start). */
void sup_timer_moved_to(double t)
{
    if (t <= 0)
        timer_moved = 0;
    else if (timer_moved < 0 || t < timer_moved)
        timer_moved = t;
}

/* The loop's side of sup_timer_moved. */
double sup_timer_take(void)
{
    double m = timer_moved;
    timer_moved = -1;
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
