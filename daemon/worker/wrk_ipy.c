/* wrk_ipy: IPython syntax for runs. The Python half is wrk_ipy.py, which
 * the build embeds as ipy_src (wrk_ipy_src.h); the helper's run() calls
 * into it for runs with IPython syntax. */
#include "wrk_ipy.h"

#include <stdlib.h>
#include <string.h>

#include "wrk_py.h"
#include "wrk_ipy_src.h"

/* Loads _ctxd_ipython once per worker; the IPython shell in it is made on
 * the first run that uses IPython syntax, so plain runs never import
 * IPython. */
int wrk_ipy_init(void)
{
    PyObject *mod = wrk_py_private_module("_ctxd_ipython", ipy_src, "<ctxd-worker>");
    if (!mod)
        return -1;
    int r = wrk_py_set_global("_ipy", mod);
    Py_DECREF(mod); /* the helper's global holds it */
    return r;
}

/* The context's default comes from CTXD_SYNTAX, which ctx.create `syntax`
 * puts in the worker's environment (so it survives restarts and forks). */
bool wrk_ipy_wanted(wrk_syntax s)
{
    if (s != WRK_SYNTAX_DEFAULT)
        return s == WRK_SYNTAX_IPYTHON;
    const char *d = getenv("CTXD_SYNTAX");
    return d && strcmp(d, "ipython") == 0;
}
