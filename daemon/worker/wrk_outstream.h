/* wrk_outstream: the worker's sys.stdout and sys.stderr (ctxd.OutStream)
 * and their binary twins (ctxd.OutBuffer), which write into the capture of
 * wrk_output.h. They behave as a TextIOWrapper over a pipe: write, flush,
 * close for the rest of the run, reconfigure, isinstance of io's ABCs. */
#ifndef CTXD_WRK_OUTSTREAM_H
#define CTXD_WRK_OUTSTREAM_H

#include <Python.h>

#include <stdbool.h>
#include <stddef.h>

/* GIL held: installs the objects as sys.stdout, sys.stderr, sys.__stdout__
 * and sys.__stderr__. -1 with a Python error set. */
int wrk_outstream_install(void);
/* Whether f is one of these objects (text or binary): their data reaches
 * the supervisor in order at the run's end without a flush. */
bool wrk_outstream_owns(PyObject *f);
/* Whether f is one of the text objects and open. */
bool wrk_outstream_is_open_text(PyObject *f);
/* One write of the concatenation of the str pieces to text object f, as
 * f.write would write it; up to WRK_OUTSTREAM_MAX_PIECES ASCII pieces are
 * copied without being joined. 0, or -1 with a Python error set. */
#define WRK_OUTSTREAM_MAX_PIECES 16
int wrk_outstream_text_writev(PyObject *f, PyObject *const *parts, size_t n);

#endif
