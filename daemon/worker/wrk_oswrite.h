/* wrk_oswrite: os.write, wrapped to keep raw writes to fds 1 and 2 in order
 * with the Python-level writes of the worker's streams. */
#ifndef CTXD_WRK_OSWRITE_H
#define CTXD_WRK_OSWRITE_H

/* GIL held: replaces os.write by a function that calls the original and
 * then tells the capture (wrk_output.h) that fd 1 or 2 was written. -1 with
 * a Python error set. */
int wrk_oswrite_install(void);

#endif
