/* wrk_display: MIME bundles for results, the display() family of builtins,
 * IPython.display routing and matplotlib figures (see wrk_display.c). */
#ifndef CTXD_WRK_DISPLAY_H
#define CTXD_WRK_DISPLAY_H

/* GIL held, after wrk_py_init: creates the helper, installs the builtins and
 * the import hook, and hands the helper to wrk_py's run (as `_rich`).
 * Returns -1 with a Python error set. */
int wrk_display_init(void);

#include "proto.h"
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* GIL held: a snapshot of the files under the cwd (at most 10,000 regular
 * files, 0.5 s), or None. Never raises. */
PyObject *wrk_display_scan(void);
/* GIL held: appends the msgpack array of files created or changed since
 * snap ([{path, size, type}], at most 1000) to b; returns 0 and appends
 * nothing when no file changed. Never raises. */
size_t wrk_display_put_artifacts(proto_buf *b, PyObject *snap);
/* GIL held: appends o as msgpack: None, bool, int, float, str, dict and
 * list/tuple (at most budget items in all, 8 levels deep); anything else
 * as its str(). Never raises. */
void wrk_display_put_pyobj(proto_buf *b, PyObject *o, uint32_t budget);
/* GIL held, after wrk_display_init: the import hook calls patch(module)
 * right after module `name` is first executed (at once if it already is).
 * -1 with a Python error set. */
int wrk_display_patch_module(const char *name, PyObject *patch);

/* GIL held: while tail is set, display frames (the figures a run left
 * open) are appended to it, to go out with the run's result or error and
 * its done; NULL sends them at once again. */
void wrk_display_collect(proto_buf *tail);
#endif
