/* sup_linger: workers of contexts that end on purpose, given a bounded
 * time to run their atexit handlers (see sup_linger.c). */
#ifndef CTXD_SUP_LINGER_H
#define CTXD_SUP_LINGER_H

#include <stdbool.h>
#include <sys/types.h>

#include "sbx_cgroup.h"

/* Sends `exit` on the worker's channel *fd (never blocking) and takes over
 * the worker: channel, pid, pidfd and cgroup (the caller's are cleared, so
 * its usual kill spares the worker). false when it could not (the table is
 * full, the frame could not be written at once): the caller kills as
 * before. */
bool sup_linger_start(const char *ctx, int *fd, pid_t *pid, int *pidfd,
                      char cgroup[SBX_CGROUP_NAME_MAX]);
/* Kills the lingering workers whose time is up; returns the next
 * deadline (0: none). */
double sup_linger_tick(double now);
/* pid exited (not yet reaped): if it was lingering, what it started dies
 * with it and its entry goes. true when it was one. */
bool sup_linger_before_reap(pid_t pid);
/* Daemon shutdown: waits (at most until each one's deadline) for the
 * lingering workers to end, then kills what is left. */
void sup_linger_shutdown(void);

#endif
