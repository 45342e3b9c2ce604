/* wrk_ipy: IPython syntax for runs. The Python half is wrk_ipy.py, which
 * the build embeds as ipy_src (wrk_ipy_src.h); the helper's run() calls
 * into it for runs with IPython syntax. */
#include "wrk_ipy.h"

#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "wrk_input.h"
#include "wrk_ipy_src.h"
#include "wrk_output.h"
#include "wrk_py.h"

#define PIP_REQS_MAX 64 /* as pip.install (SUP_PKGS_MAX) */
#define PIP_REQ_MAX 200

/* _pip_install([requirement, ...]) -> str: `%pip install` asks the daemon
 * to install into this context (the supervisor runs pip, as for
 * pip.install) and waits; "" when the packages are importable, else the
 * daemon's message. */
static PyObject *pip_install(PyObject *self, PyObject *reqs)
{
    (void)self;
    if (!PyList_Check(reqs) || PyList_GET_SIZE(reqs) > PIP_REQS_MAX)
        return PyErr_Format(PyExc_ValueError, "at most %d requirements", PIP_REQS_MAX);
    if (wrk_output_forked())
        return PyErr_Format(PyExc_RuntimeError,
                            "%%pip install is not available in a forked process");
    uint64_t n = wrk_input_next_seq();
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_put_map(&b, 3);
    proto_put_str(&b, "t");
    proto_put_str(&b, "pip_request");
    proto_put_str(&b, "n");
    proto_put_uint(&b, n);
    proto_put_str(&b, "packages");
    proto_put_array(&b, (uint32_t)PyList_GET_SIZE(reqs));
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(reqs); i++) {
        Py_ssize_t len;
        const char *r = PyUnicode_Check(PyList_GET_ITEM(reqs, i))
                            ? PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(reqs, i), &len)
                            : NULL;
        if (!r || len > PIP_REQ_MAX) {
            proto_buf_free(&b);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "a requirement is a str of at most %d bytes",
                             PIP_REQ_MAX);
            return NULL;
        }
        proto_put_strn(&b, r, (size_t)len);
    }
    proto_frame_end(&b, start);
    PyObject *answer = wrk_input_send_wait(&b, n);
    proto_buf_free(&b);
    return answer;
}

static PyMethodDef pip_def = {"_pip_install", pip_install, METH_O, NULL};

/* Loads _ctxd_ipython once per worker; the IPython shell in it is made on
 * the first run that uses IPython syntax, so plain runs never import
 * IPython. */
int wrk_ipy_init(void)
{
    PyObject *mod = wrk_py_private_module("_ctxd_ipython", ipy_src, "<ctxd-worker>");
    if (!mod)
        return -1;
    PyObject *f = PyCFunction_New(&pip_def, NULL);
    int r = f ? PyObject_SetAttrString(mod, "_pip_install", f) : -1;
    Py_XDECREF(f);
    if (r == 0)
        r = wrk_py_set_global("_ipy", mod);
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
