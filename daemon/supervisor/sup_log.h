/* sup_log: the supervisor's clocks and its verbose log (stderr). */
#ifndef CTXD_SUP_LOG_H
#define CTXD_SUP_LOG_H

#include "sup_config.h"

#include <stdbool.h>

double sup_now(void);      /* monotonic seconds */
double sup_unix_now(void); /* wall clock seconds */
/* A timer was set outside sup_ctx_tick (a deadline, a lease, a restart, a
 * pending removal): the loop takes one more turn before it sleeps, so the
 * tick sees it. sup_timer_moved_to(t) says the tick has nothing to do
 * before time t (sup_now's clock): the loop then sleeps at most until t
 * instead of taking that turn at once. sup_timer_take reads and clears
 * the mark: -1 none, 0 a turn now, else the earliest t. */
void sup_timer_moved(void);
void sup_timer_moved_to(double t);
double sup_timer_take(void);
/* One line "ctxd: ..." on stderr with --verbose. */
void sup_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
