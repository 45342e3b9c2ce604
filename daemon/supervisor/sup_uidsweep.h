/* sup_uidsweep: removes everything a set of uids owns on the host. */
#ifndef CTXD_SUP_UIDSWEEP_H
#define CTXD_SUP_UIDSWEEP_H

#include <stdbool.h>
#include <sys/types.h>

/* Which uids to sweep: those in lo..hi for which owned(uid) is true. */
typedef bool (*sup_uidsweep_owned)(uid_t uid);

/* Kills every process of a swept uid (real, effective, saved or fs uid),
 * then removes what the uids own in the shared places: files and
 * directories in /dev/shm, /tmp and /var/tmp (their own filesystems only),
 * SysV IPC objects and POSIX message queues of the host's IPC namespace,
 * and the contents of their user keyrings. Synchronous: for a range claimed
 * anew or a wrap-around of the allocator, never per context. Returns the
 * number of things removed (processes and objects). */
unsigned sup_uidsweep_run(uid_t lo, uid_t hi, sup_uidsweep_owned owned);

#endif
