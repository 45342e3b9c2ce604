/* sup_proc: signalling workers by pidfd only. */
#ifndef CTXD_SUP_PROC_H
#define CTXD_SUP_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A pidfd for pid (a process the supervisor knows by its own means), or -1. */
int sup_proc_open(pid_t pid);
/* True while the process has not been reaped. */
bool sup_proc_alive(int pidfd);
void sup_proc_signal(int pidfd, int sig);
/* kill(-leader) only while the pidfd shows the leader alive, then the
 * leader itself by its pidfd. */
void sup_proc_signal_group(int pidfd, pid_t leader, int sig);
/* The uid of pid (real, effective, saved and fs uid all equal); -1 if
 * unreadable or they differ. */
int sup_proc_uid(pid_t pid, uid_t *uid);
/* CLOCK_BOOTTIME in clock ticks, the unit of /proc/PID/stat's start time. */
uint64_t sup_proc_boot_ticks(void);
/* Verifies that pid is a child of the supervisor, runs as uid and started
 * at or after since (boot ticks): returns its pidfd, or -1 with why set. */
int sup_proc_adopt_child(pid_t pid, uid_t uid, uint64_t since, char *why, size_t n);

#endif
