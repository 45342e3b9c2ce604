/* wrk_children: what the worker knows of its child processes at a run's
 * start: whether one may still be writing into the output pipes, and the
 * CPU time its waited-for children have used. */
#ifndef CTXD_WRK_CHILDREN_H
#define CTXD_WRK_CHILDREN_H

#include <stdbool.h>

/* True when a child is alive or children were reaped since the last look
 * (one may have left a grandchild behind). Also takes the children's CPU
 * time for wrk_children_cpu. */
bool wrk_children_look(void);
/* The CPU seconds of the waited-for children, as of the last look. */
double wrk_children_cpu(void);
/* A new worker made by fork: its first look compares with nothing. */
void wrk_children_forget(void);

#endif
