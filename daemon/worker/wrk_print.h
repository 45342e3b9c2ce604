/* wrk_print: builtins.print writing a whole line at once to the worker's
 * own streams (wrk_print.c). */
#ifndef CTXD_WRK_PRINT_H
#define CTXD_WRK_PRINT_H

/* GIL held, after wrk_outstream_install: replaces builtins.print by one that
 * hands the values, separators and end to sys.stdout / sys.stderr in one
 * write when the file is one of the worker's streams, and calls the
 * original otherwise. -1 with a Python error set. */
int wrk_print_install(void);

#endif
