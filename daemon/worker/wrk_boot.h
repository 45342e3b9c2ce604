/* wrk_boot: the start-up steps a worker started by exec, the zygote and the
 * workers the zygote forks share: the parent's watch, crash handlers,
 * CPython and the session's Python-side set-up. */
#ifndef CTXD_WRK_BOOT_H
#define CTXD_WRK_BOOT_H

#include <sys/types.h>

/* Arms the parent-death signal, whose handler ends the worker and its
 * process group; exits at once when the parent is no longer `parent` (the
 * supervisor's pid, which may be 1 in a container). */
void wrk_boot_watch_parent(pid_t parent);
/* A crash signal (SIGSEGV, SIGBUS, ...) first lets output being sent reach
 * the channel, then kills the worker with that signal. */
void wrk_boot_crash_handlers(void);
/* Starts CPython as `python3` would, minus argv parsing and C stdio: site
 * imported, PYTHON* variables honoured, SIGINT raising KeyboardInterrupt.
 * Exits on failure. */
void wrk_boot_python(void);
/* GIL held: the worker's streams and helper modules, __main__ as the
 * namespace of runs, and '' first on sys.path as in an interactive
 * interpreter. Exits on failure. */
void wrk_boot_session(void);

#endif
