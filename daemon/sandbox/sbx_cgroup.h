/* sbx_cgroup: every worker in a cgroup of its own (shared by the
 * supervisor, which names, kills, measures and removes the cgroups, and by
 * the zygote, which puts each new worker into its cgroup before the worker
 * runs anything). Links neither Python nor ZeroMQ. */
#ifndef CTXD_SBX_CGROUP_H
#define CTXD_SBX_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Longest cgroup name (relative, "ctxd/<tree>/w<n>"). */
#define SBX_CGROUP_NAME_MAX 64

/* What the worker's cgroup limits; 0 = no limit. */
typedef struct sbx_cgroup_limits {
    unsigned long long memory_bytes, max_tasks;
} sbx_cgroup_limits;

/* Puts pid into the cgroup `name` of the cgroup v2 tree (membership: the
 * whole context is killed, frozen, measured through it) and, for the
 * limits asked for, of the v1 memory/pids hierarchies (or sets them in the
 * v2 cgroup on a v2-only host). Makes the leaf directories. -1 with errno
 * and *failed naming the step; a host without a v2 tree and without
 * limits asked for is not an error (0, nothing done). */
int sbx_cgroup_place(pid_t pid, const char *name, const sbx_cgroup_limits *lim,
                     const char **failed);
/* Writes text to an existing file in one write (cgroup and /proc control
 * files): 0, or -1 with errno. */
int sbx_write_file(const char *path, const char *text);
/* Longest directory of sbx_cgroup_v2_root. */
#define SBX_CGROUP_BASE_MAX 200

/* The v2 tree's mount point (hybrid: /sys/fs/cgroup/unified), or NULL. */
const char *sbx_cgroup_v2_mount(void);
/* Where ctxd's v2 cgroups go: the mount point, or under systemd with
 * Delegate=yes the service's cgroup (the nearest ancestor of this process's
 * cgroup that systemd marked delegated); NULL without a v2 tree. */
const char *sbx_cgroup_v2_root(void);
/* The root of a v1 controller's hierarchy, or NULL when not mounted. */
const char *sbx_cgroup_v1_root(const char *controller);

#endif
