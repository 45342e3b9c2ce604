/* sup_loop: the supervisor's one event loop (sockets, worker channels,
 * signals, timers). The top layer but for sup_main.c. */
#ifndef CTXD_SUP_LOOP_H
#define CTXD_SUP_LOOP_H

#include <stddef.h>

int sup_loop_open(const char **endpoints, size_t n);
void sup_loop_run(void);

#endif
