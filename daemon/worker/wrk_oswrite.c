/* wrk_oswrite: os.write wrapped so that a raw write to fd 1 or 2 is noted
 * for the capture (wrk_output.h), which then keeps it in order with the
 * next Python-level write of that stream. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "wrk_oswrite.h"

#include "wrk_output.h"

/* os.write as it was (posix.write). */
static PyObject *posix_write;

/* os.write: the original, then a note that fd 1 or 2 was written, so the
 * next Python-level write of that stream first forwards it (order). */
static PyObject *os_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    long fd = nargs > 0 && PyLong_Check(args[0]) ? PyLong_AsLong(args[0]) : -1;
    if (fd == -1 && PyErr_Occurred())
        PyErr_Clear(); /* the original reports a bad fd */
    PyObject *r = PyObject_Vectorcall(posix_write, args, (size_t)nargs, NULL);
    if (fd == 1 || fd == 2)
        wrk_output_raw_written((int)fd - 1);
    return r;
}

static PyMethodDef os_write_def = {"write", (PyCFunction)(void (*)(void))os_write, METH_FASTCALL,
                                   "Write a bytes object to a file descriptor."};

int wrk_oswrite_install(void)
{
    PyObject *os = PyImport_ImportModule("os");
    if (!os)
        return -1;
    if (!posix_write)
        posix_write = PyObject_GetAttrString(os, "write");
    PyObject *fn = posix_write ? PyCFunction_NewEx(&os_write_def, NULL, NULL) : NULL;
    int rc = fn ? PyObject_SetAttrString(os, "write", fn) : -1;
    Py_XDECREF(fn);
    Py_DECREF(os);
    return rc;
}
