/* sup_reaper: a small process that outlives the supervisor only to kill
 * and remove the daemon's cgroups when the supervisor dies, SIGKILL too. */
#ifndef CTXD_SUP_REAPER_H
#define CTXD_SUP_REAPER_H

#include <stdbool.h>
#include <sys/types.h>

/* Longest directory the reaper is given. */
#define SUP_REAPER_DIR_MAX 320

/* Starts the reaper for the daemon's tree directories: v2 (killed with
 * cgroup.kill; NULL when there is none) and up to two v1 ones (every task
 * in them killed). Call once, before any worker exists. */
/* Where the daemon's private directories are (STATE/contexts/<instance>):
 * a reaper started after this detaches the mounts on them (disk budgets)
 * when the supervisor dies. Called before sup_reaper_start. */
void sup_reaper_mounts_under(const char *dir);
void sup_reaper_start(const char *v2_dir, const char *const v1_dirs[], size_t nv1);
/* After a SIGCHLD: a reaper that was stopped (SIGSTOP, SIGTSTP) could not
 * act; it is killed (and so replaced, sup_reaper_on_exit). */
void sup_reaper_check(void);
/* True when pid was the reaper: it died, and another is started. */
bool sup_reaper_on_exit(pid_t pid, int status);

#endif
