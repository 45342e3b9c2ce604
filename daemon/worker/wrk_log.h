/* wrk_log: the worker's own diagnostics. File descriptor 2 is captured into
 * the run's output, so the worker keeps a private copy of the stderr it was
 * started with and reports its own problems there. */
#ifndef CTXD_WRK_LOG_H
#define CTXD_WRK_LOG_H

/* fd: a duplicate of the original stderr (owned from now on). */
void wrk_log_init(int fd);
/* Two consecutive numeric fields of /proc/self/stat (1-based numbering as
 * in proc(5), e.g. 47/48 arg_start/arg_end, 49/50 env_start/env_end): the
 * bounds of a memory area the worker rewrites. 0 when unreadable. */
int wrk_log_stat_range(int first_field, unsigned long long *start, unsigned long long *end);
/* Threads of this process (/proc/self/status), 0 if unknown. */
int wrk_log_thread_count(void);

/* Prints "ctxd-worker[pid]: <msg>\n" to the original stderr. */
void wrk_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
