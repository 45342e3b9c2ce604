/* wrk_py: the Python-level half of the worker, an embedded helper module
 * (splitting off a trailing expression, linecache registration, traceback
 * filtering, applying and restoring a run's environment). It lives in a
 * private module whose code has the file name "<ctxd-worker>", which is how
 * its frames are recognised and removed from user tracebacks. */
#ifndef CTXD_WRK_PY_H
#define CTXD_WRK_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef enum wrk_py_fn {
    WRK_PY_ENV_APPLY,   /* (env: dict) -> saved state */
    WRK_PY_ENV_RESTORE, /* (saved) -> None */
    /* A run, in stages (wrk_run.c evaluates the code objects itself): */
    WRK_PY_ENTER, /* ((file, argv) or None, globals) -> saved state of a script run */
    /* (code, filename, silent, globals, ipython) -> (body code, trailing
     * expression's code or None, quiet: a trailing `;`) */
    WRK_PY_COMPILE,
    WRK_PY_AWAIT,      /* (coroutine) -> its value, run in the helper's event loop */
    WRK_PY_RESULT,     /* (value, silent, globals, ipython) -> MIME bundle dict, repr str or None */
    WRK_PY_LEAVE,      /* (saved, silent, globals, exception or None) -> None */
    WRK_PY_FORMAT,     /* (exc) -> (ename, evalue, [lines]) */
    WRK_PY_CHILD_EXIT, /* (exc or None) -> exit status of a forked child */
    WRK_PY_EXIT_CODE,  /* (SystemExit) -> the exit status a script would have */
    WRK_PY_END_RUN,    /* (silent) -> None: the figures the run left open */
    WRK_PY_WARM,       /* () -> None: a cell compiled, run and shown, kept nowhere (zygote) */
    WRK_PY_NFNS
} wrk_py_fn;

/* GIL held: creates the helper module. Returns -1 with a Python error set. */
int wrk_py_init(void);
/* GIL held: a new module named name (not in sys.modules, so user code never
 * sees it) with src executed in it; NULL with a Python error set. */
PyObject *wrk_py_private_module(const char *name, const char *src, const char *filename);
/* GIL held, after wrk_display_init: sys.unraisablehook and
 * threading.excepthook in Python, so they show cells' source lines;
 * patch_module (wrk_display_patch_module) patches threading when it is
 * imported. -1 with a Python error set. */
int wrk_py_install_hooks(int (*patch_module)(const char *name, PyObject *patch));
/* GIL held: sets a global of the helper module. -1 with a Python error. */
int wrk_py_set_global(const char *name, PyObject *value);
/* GIL held: compile_cell's (body, None, quiet) for a cell without IPython
 * syntax cached without nested code or a trailing expression; NULL (no
 * error set) when compile_cell must run. */
PyObject *wrk_py_compiled_hit(PyObject *code, PyObject *filename);
/* GIL held: a cell compiled as filename (body and last, the code objects
 * compile_cell gave) ran: its linecache entry is dropped FLAT_LINES_KEPT
 * flat cells later if no code of it can run again. */
void wrk_py_cell_ran(PyObject *filename, PyObject *body, PyObject *last);
/* GIL held: calls a helper function with a tuple of arguments (stolen). */
PyObject *wrk_py_call(wrk_py_fn fn, PyObject *args);

#endif
