/* sup_park: keeps descriptors the supervisor needs only later (a worker's
 * stdout/stderr read ends, read after its death) in one descriptor: a
 * socket whose receive queue holds them in flight. Each idle context then
 * costs one descriptor less against the open-file limit. */
#ifndef CTXD_SUP_PARK_H
#define CTXD_SUP_PARK_H

/* Parks fds[0..n) (n <= 4; they stay open in the caller, who closes them):
 * the descriptor that holds them, or -1 (errno set) with nothing parked. */
int sup_park(const int *fds, int n);
/* Takes back what sup_park(…, n) parked into fds (close-on-exec) and
 * closes park. The count received; the rest of fds is -1. */
int sup_unpark(int park, int *fds, int n);

#endif
