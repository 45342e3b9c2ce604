/* sup_log: the supervisor's clocks and its verbose log (stderr). */
#ifndef CTXD_SUP_LOG_H
#define CTXD_SUP_LOG_H

#include "sup_config.h"

double sup_now(void);      /* monotonic seconds */
double sup_unix_now(void); /* wall clock seconds */
/* One line "ctxd: ..." on stderr with --verbose. */
void sup_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
