/* sup_disk: a context's disk budget (policy disk_bytes): its private
 * directory is a file system of that size of its own. */
#ifndef CTXD_SUP_DISK_H
#define CTXD_SUP_DISK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Mounts a tmpfs of `bytes` (owned by uid:gid, mode 0700) on the private
 * directory `dir` the daemon just made. -1 with errno on failure. */
int sup_disk_mount(const char *dir, uint64_t bytes, uid_t uid, gid_t gid);
/* Detaches what is mounted on dir, if anything (before it is removed). */
void sup_disk_unmount(const char *dir);
/* Detaches what is mounted on each directory in dir (the private
 * directories of a daemon that is gone, before they are removed). */
void sup_disk_unmount_children(const char *dir);

#endif
