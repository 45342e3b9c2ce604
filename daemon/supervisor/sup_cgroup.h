/* sup_cgroup: every worker in a cgroup of its own (the supervisor's side;
 * the placing itself is sbx_cgroup.c, shared with the zygote). */
#ifndef CTXD_SUP_CGROUP_H
#define CTXD_SUP_CGROUP_H

#include "sbx_cgroup.h"
#include <stdbool.h>
#include <sys/types.h>

/* Kills and removes cgroups a dead daemon left behind. */
void sup_cgroup_init(void);
void sup_cgroup_new_name(char out[SBX_CGROUP_NAME_MAX]);
/* Kills every process in the cgroup: 0, or -1 when it cannot (no v2 tree). */
int sup_cgroup_kill(const char *name);
/* The cgroup's CPU time in seconds, children included; -1 if unknown. */
double sup_cgroup_cpu(const char *name);
/* True when the kernel's OOM killer struck in the cgroup. */
bool sup_cgroup_oom(const char *name);
/* 1 when pid is in the cgroup (v2), 0 when not, -1 when it cannot tell. */
int sup_cgroup_holds(const char *name, pid_t pid);
/* Moves pid (a ctx.fork copy) into a new cgroup with limits. 0 or -1. */
int sup_cgroup_move(pid_t pid, const char *name, unsigned long long memory_bytes,
                    unsigned long long max_tasks);
/* Kills the cgroup and removes it once empty; clears name. */
void sup_cgroup_release(char name[SBX_CGROUP_NAME_MAX]);
/* Retries pending removals; the next time to call it (0 none). */
double sup_cgroup_tick(double now);
void sup_cgroup_shutdown(void);

#endif
