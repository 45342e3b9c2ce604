/* sup_child: how the supervisor forks a child (a worker by exec, the
 * zygote, pip) and what the child gets back before it execs. */
#ifndef CTXD_SUP_CHILD_H
#define CTXD_SUP_CHILD_H

#include <sys/types.h>

/* Forks a child of the supervisor: every signal blocked across the fork,
 * so none of the supervisor's handlers runs in the child; the child gets
 * its own process group and SIGKILL when the supervisor dies. Returns as
 * fork(), errno kept. */
pid_t sup_child_fork(void);
/* In such a child, just before execve: default dispositions, no signal
 * blocked. */
void sup_child_signals(void);
/* At start: raises the descriptor limit (three descriptors per context). */
void sup_child_raise_limits(void);
/* In a child about to exec: gives back the descriptor limit ctxd raised. */
void sup_child_limits(void);

#endif
