/* wrk_print: print() that hands a whole line to the worker's own streams.
 *
 * CPython's print calls file.write once for every value, separator and end:
 * print(s) is two writes, each a method lookup, a call and a pass through
 * the output buffer's lock and its look for raw output (wrk_output.c). When
 * the file is one of the worker's text streams, this print gives it the
 * pieces at once. For any other file, and for any call it does not take as
 * it is (a keyword it does not know by identity, a separator or end that is
 * not exactly a str, a flush that is not a bool), it calls the interpreter's
 * own print, which also gives every error its usual message.
 *
 * What reaches the stream is what the original writes, in the same order:
 * a value whose str() may run user code (anything but a str, int, float,
 * bool or None) is converted only after what comes before it is written;
 * when str() fails, what came before it is written and the error raised. */
#include <Python.h>

#include "wrk_print.h"

#include "wrk_outstream.h"

/* The interpreter's builtins.print; the keywords (interned); sys's dict. */
static PyObject *orig_print;
static PyObject *kw_sep, *kw_end, *kw_file, *kw_flush, *key_stdout;
static PyObject *sys_dict;
static PyObject *space, *newline;

/* Pieces not yet written, in order (new references). */
typedef struct pieces {
    PyObject *v[WRK_OUTSTREAM_MAX_PIECES];
    size_t n;
} pieces;

/* Writes the pieces and lets them go. */
static int flush_pieces(pieces *p, PyObject *file)
{
    int rc = wrk_outstream_text_writev(file, p->v, p->n);
    for (size_t i = 0; i < p->n; i++)
        Py_DECREF(p->v[i]);
    p->n = 0;
    return rc;
}

/* Adds a piece (a new reference, taken), writing what is there first when
 * full. */
static int put(pieces *p, PyObject *file, PyObject *v)
{
    if (p->n == WRK_OUTSTREAM_MAX_PIECES && flush_pieces(p, file) < 0) {
        Py_DECREF(v);
        return -1;
    }
    p->v[p->n++] = v;
    return 0;
}

/* str() of these runs no user code. */
static bool pure(PyObject *v)
{
    return PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
           PyBool_Check(v) || v == Py_None;
}

/* The values, separators and end as pieces on file (held by the caller). */
static int print_to(PyObject *file, PyObject *const *args, Py_ssize_t nargs, PyObject *sep,
                    PyObject *end)
{
    pieces p = {.n = 0};
    int rc = 0;
    for (Py_ssize_t i = 0; i < nargs && rc == 0; i++) {
        if (i > 0)
            rc = put(&p, file, Py_NewRef(sep));
        if (rc == 0 && !pure(args[i]) && p.n > 0)
            rc = flush_pieces(&p, file); /* its str() may print too */
        PyObject *s = rc == 0 ? PyObject_Str(args[i]) : NULL;
        if (!s)
            rc = -1;
        else
            rc = put(&p, file, s);
    }
    if (rc == 0)
        rc = put(&p, file, Py_NewRef(end));
    if (rc == 0)
        return flush_pieces(&p, file);
    if (p.n > 0) { /* the original had written these before the error */
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        if (flush_pieces(&p, file) < 0)
            PyErr_Clear();
        PyErr_Restore(t, v, tb);
    }
    return -1;
}

/* print(*args, sep=' ', end='\n', file=None, flush=False). */
static PyObject *fast_print(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    (void)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *sep = NULL, *end = NULL, *file = NULL, *flush = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
        if (k == kw_sep)
            sep = v;
        else if (k == kw_end)
            end = v;
        else if (k == kw_file)
            file = v;
        else if (k == kw_flush)
            flush = v;
        else
            goto original;
    }
    sep = sep && sep != Py_None ? sep : space;
    end = end && end != Py_None ? end : newline;
    if (!PyUnicode_CheckExact(sep) || !PyUnicode_CheckExact(end) ||
        (flush && flush != Py_True && flush != Py_False))
        goto original;
    if (!file || file == Py_None)
        file = PyDict_GetItemWithError(sys_dict, key_stdout); /* borrowed */
    if (!file || !wrk_outstream_is_open_text(file)) {
        if (PyErr_Occurred())
            return NULL;
        goto original;
    }
    Py_INCREF(file); /* a value's str() may replace sys.stdout */
    int rc = print_to(file, args, nargs, sep, end);
    if (rc == 0 && flush == Py_True) {
        PyObject *r = PyObject_CallMethodNoArgs(file, kw_flush);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
    }
    Py_DECREF(file);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
original:
    return PyObject_Vectorcall(orig_print, args, nargsf, kwnames);
}

/* Named and documented as the original (its doc carries the signature). */
static PyMethodDef print_def = {"print", (PyCFunction)(void (*)(void))fast_print,
                                METH_FASTCALL | METH_KEYWORDS, NULL};

int wrk_print_install(void)
{
    PyObject *builtins = PyImport_ImportModule("builtins");
    PyObject *sys = builtins ? PyImport_ImportModule("sys") : NULL;
    if (!sys) {
        Py_XDECREF(builtins);
        return -1;
    }
    orig_print = PyObject_GetAttrString(builtins, "print");
    sys_dict = PyModule_GetDict(sys); /* borrowed; sys lives as long */
    kw_sep = PyUnicode_InternFromString("sep");
    kw_end = PyUnicode_InternFromString("end");
    kw_file = PyUnicode_InternFromString("file");
    kw_flush = PyUnicode_InternFromString("flush");
    key_stdout = PyUnicode_InternFromString("stdout");
    space = PyUnicode_FromString(" ");
    newline = PyUnicode_FromString("\n");
    int rc = -1;
    if (orig_print && PyCFunction_Check(orig_print) && kw_sep && kw_end && kw_file && kw_flush &&
        key_stdout && space && newline) {
        print_def.ml_doc = ((PyCFunctionObject *)orig_print)->m_ml->ml_doc;
        PyObject *name = PyUnicode_FromString("builtins");
        PyObject *fn = name ? PyCFunction_NewEx(&print_def, builtins, name) : NULL;
        rc = fn ? PyObject_SetAttrString(builtins, "print", fn) : -1;
        Py_XDECREF(fn);
        Py_XDECREF(name);
    } else if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_RuntimeError, "builtins.print is not the interpreter's");
    }
    Py_DECREF(sys);
    Py_DECREF(builtins);
    return rc;
}
