/* wrk_ipy: IPython syntax for runs (PROTOCOL.md, execute and ctx.create
 * `syntax`): the private module _ctxd_ipython (wrk_ipy.py) that transforms
 * a cell and runs its magics, with IPython's own machinery when IPython is
 * importable and a built-in subset otherwise. */
#ifndef CTXD_WRK_IPY_H
#define CTXD_WRK_IPY_H

#include <stdbool.h>

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A run's syntax as the request names it. */
typedef enum wrk_syntax {
    WRK_SYNTAX_DEFAULT, /* the context's (CTXD_SYNTAX in its environment) */
    WRK_SYNTAX_PYTHON,
    WRK_SYNTAX_IPYTHON,
} wrk_syntax;

/* GIL held, after wrk_py_init: loads the module and hands it to the
 * helper. Returns -1 with a Python error set. */
int wrk_ipy_init(void);
/* Whether a run asking for syntax s uses IPython syntax. */
bool wrk_ipy_wanted(wrk_syntax s);

#endif
