/* wrk_outstream: the worker's sys.stdout and sys.stderr, text objects with
 * binary twins that behave as a pipe-backed TextIOWrapper and its buffer.
 * Every write goes down to the capture (wrk_output.h) as bytes of stream 0
 * or 1; these objects hold no data of their own, only the settings
 * reconfigure() changes and whether a run closed them. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "wrk_outstream.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/uio.h>

#include "wrk_output.h"

/* Counts runs: a stream closed by a run stays closed until the next run
 * starts, which finds it open again. */
static atomic_ullong run_gen = 1;

/* The capture's hook at each run's start. */
static void next_run(void)
{
    atomic_fetch_add(&run_gen, 1);
}

/* One piece written to stream s, in order with everything else. */
static void out_write(int s, const char *p, size_t n)
{
    struct iovec v = {.iov_base = (void *)p, .iov_len = n};
    wrk_output_writev(s, &v, 1, n);
}

/* One object per stream and kind: text (sys.stdout) and its binary twin
 * (sys.stdout.buffer). */
typedef struct out_obj {
    PyObject_HEAD int stream;
    PyObject *buffer; /* text objects: the binary twin */
    /* close(): the run_gen it happened in (0: never). A text object is
     * closed when its buffer is, as a TextIOWrapper. */
    unsigned long long closed_in;
    /* Text objects, as reconfigure() sets them: encoding and errors (NULL:
     * utf-8 and backslashreplace), newline (NULL: '\n' unchanged). */
    PyObject *encoding, *errors, *newline;
    bool line_buffering, write_through;
} out_obj;

static void out_dealloc(out_obj *self)
{
    Py_XDECREF(self->buffer);
    Py_XDECREF(self->encoding);
    Py_XDECREF(self->errors);
    Py_XDECREF(self->newline);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Closed in this run (the object itself, or a text object's buffer). */
static bool out_closed(const out_obj *self)
{
    unsigned long long g = atomic_load(&run_gen);
    const out_obj *b = (const out_obj *)self->buffer;
    return self->closed_in == g || (b && b->closed_in == g);
}

/* The ValueError of an operation on a closed file; NULL. The text layer's
 * message ends with a full stop, the buffer's and the raw file's do not. */
static PyObject *closed_error(void)
{
    PyErr_SetString(PyExc_ValueError, "I/O operation on closed file.");
    return NULL;
}

static PyObject *closed_error_raw(void)
{
    PyErr_SetString(PyExc_ValueError, "I/O operation on closed file");
    return NULL;
}

/* Writes text (a str) as reconfigure() said: '\n' as the newline, encoded
 * with the encoding and errors (default UTF-8 with backslashreplace); ASCII
 * text with neither set is copied without re-encoding. */
static int write_encoded(out_obj *self, PyObject *text)
{
    Py_INCREF(text);
    if (self->newline && PyUnicode_GET_LENGTH(self->newline) > 0) { /* '\r' or '\r\n' */
        PyObject *nl = PyUnicode_FromString("\n");
        Py_SETREF(text, nl ? PyUnicode_Replace(text, nl, self->newline, -1) : NULL);
        Py_XDECREF(nl);
        if (!text)
            return -1;
    }
    if (!self->encoding && !self->errors && PyUnicode_IS_COMPACT_ASCII(text)) {
        out_write(self->stream, PyUnicode_DATA(text), (size_t)PyUnicode_GET_LENGTH(text));
    } else {
        PyObject *b = PyUnicode_AsEncodedString(
            text, self->encoding ? PyUnicode_AsUTF8(self->encoding) : "utf-8",
            self->errors ? PyUnicode_AsUTF8(self->errors) : "backslashreplace");
        if (!b) {
            Py_DECREF(text);
            return -1;
        }
        out_write(self->stream, PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
        Py_DECREF(b);
    }
    Py_DECREF(text);
    return 0;
}

/* Writes the str pieces to text stream f as one write of their
 * concatenation: text_write's one piece, or a print's values, separators
 * and end. When all are ASCII and the stream re-encodes nothing they are
 * copied into the buffer in one go; otherwise joined and written by
 * write_encoded. Flushed after, as line_buffering / write_through say. 0,
 * or -1 with an exception set. */
int wrk_outstream_text_writev(PyObject *f, PyObject *const *parts, size_t n)
{
    out_obj *self = (out_obj *)f;
    if (out_closed(self)) {
        closed_error();
        return -1;
    }
    struct iovec iov[WRK_OUTSTREAM_MAX_PIECES];
    size_t total = 0;
    bool plain = n <= WRK_OUTSTREAM_MAX_PIECES && !self->encoding && !self->errors &&
                 !(self->newline && PyUnicode_GET_LENGTH(self->newline) > 0);
    for (size_t i = 0; plain && i < n; i++) {
        if (!(plain = PyUnicode_IS_COMPACT_ASCII(parts[i])))
            break; /* a str subclass, or not ASCII */
        iov[i] = (struct iovec){PyUnicode_DATA(parts[i]), (size_t)PyUnicode_GET_LENGTH(parts[i])};
        total += iov[i].iov_len;
    }
    int rc = 0;
    if (plain) {
        wrk_output_writev(self->stream, iov, n, total);
    } else if (n == 1) {
        rc = write_encoded(self, parts[0]);
    } else {
        PyObject *empty = PyUnicode_New(0, 0);
        PyObject *seq = empty ? PyTuple_New((Py_ssize_t)n) : NULL;
        for (size_t i = 0; seq && i < n; i++)
            PyTuple_SET_ITEM(seq, (Py_ssize_t)i, Py_NewRef(parts[i]));
        PyObject *text = seq ? PyUnicode_Join(empty, seq) : NULL;
        rc = text ? write_encoded(self, text) : -1;
        Py_XDECREF(empty);
        Py_XDECREF(seq);
        Py_XDECREF(text);
    }
    if (rc == 0 && (self->line_buffering || self->write_through))
        wrk_output_flush(self->stream);
    return rc;
}

/* TextIOBase.write: str only, returns the number of characters. */
static PyObject *text_write(out_obj *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "write() argument must be str, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    if (PyUnicode_READY(arg) < 0)
        return NULL;
    if (wrk_outstream_text_writev((PyObject *)self, &arg, 1) < 0)
        return NULL;
    return PyLong_FromSsize_t(PyUnicode_GET_LENGTH(arg));
}

/* BufferedIOBase.write: any bytes-like object, returns its length. */
static PyObject *bin_write(out_obj *self, PyObject *arg)
{
    if (out_closed(self)) {
        PyErr_SetString(PyExc_ValueError, "write to closed file"); /* BufferedWriter's */
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    out_write(self->stream, view.buf, (size_t)view.len);
    Py_ssize_t n = view.len;
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(n);
}

/* IOBase.writelines: write() for every item. */
static PyObject *out_writelines(out_obj *self, PyObject *lines)
{
    PyObject *it = PyObject_GetIter(lines);
    if (!it)
        return NULL;
    PyObject *item;
    PyObject *(*wr)(out_obj *, PyObject *) =
        self->buffer ? text_write : bin_write; /* only text objects have a twin */
    while ((item = PyIter_Next(it)) != NULL) {
        PyObject *r = wr(self, item);
        Py_DECREF(item);
        if (!r) {
            Py_DECREF(it);
            return NULL;
        }
        Py_DECREF(r);
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *out_flush_m(out_obj *self, PyObject *unused)
{
    (void)unused;
    if (out_closed(self))
        return closed_error();
    wrk_output_flush(self->stream);
    Py_RETURN_NONE;
}

static PyObject *out_fileno(out_obj *self, PyObject *unused)
{
    (void)unused;
    if (out_closed(self))
        return closed_error_raw();
    return PyLong_FromLong(self->stream + 1);
}

/* isatty(), readable(), seekable(): False (a pipe); ValueError once closed. */
static PyObject *out_false(out_obj *self, PyObject *unused)
{
    (void)unused;
    if (out_closed(self))
        return closed_error_raw();
    Py_RETURN_FALSE;
}

static PyObject *out_true(out_obj *self, PyObject *unused)
{
    (void)unused;
    if (out_closed(self))
        return closed_error();
    Py_RETURN_TRUE;
}

/* close(): flushes, then the stream is closed for the rest of the run, as
 * a pipe-backed TextIOWrapper (writes raise ValueError); closing the text
 * object closes its buffer too. The next run finds it open again. Closing
 * twice is allowed. */
static PyObject *out_close(out_obj *self, PyObject *unused)
{
    (void)unused;
    if (out_closed(self))
        Py_RETURN_NONE;
    wrk_output_flush(self->stream);
    unsigned long long g = atomic_load(&run_gen);
    self->closed_in = g;
    if (self->buffer)
        ((out_obj *)self->buffer)->closed_in = g;
    Py_RETURN_NONE;
}

/* TextIOWrapper.reconfigure(*, encoding, errors, newline, line_buffering,
 * write_through), checked as it checks them: an unknown encoding is a
 * LookupError; a new encoding without errors means errors='strict'. */
static PyObject *out_reconfigure(out_obj *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"encoding",       "errors",        "newline",
                            "line_buffering", "write_through", NULL};
    PyObject *enc = Py_None, *err = Py_None, *nl = NULL, *lb = Py_None, *wt = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOOO:reconfigure", names, &enc, &err, &nl, &lb,
                                     &wt))
        return NULL;
    if (out_closed(self))
        return closed_error();
    if ((enc != Py_None && !PyUnicode_Check(enc)) || (err != Py_None && !PyUnicode_Check(err))) {
        PyErr_SetString(PyExc_TypeError, "reconfigure() argument must be str or None");
        return NULL;
    }
    if (nl && nl != Py_None) {
        static const char *const ok[] = {"", "\n", "\r", "\r\n"};
        bool valid = false;
        for (size_t i = 0; PyUnicode_Check(nl) && i < 4 && !valid; i++)
            valid = PyUnicode_CompareWithASCIIString(nl, ok[i]) == 0;
        if (!valid) {
            if (PyUnicode_Check(nl))
                PyErr_Format(PyExc_ValueError, "illegal newline value: %U", nl);
            else
                PyErr_Format(PyExc_TypeError, "illegal newline type: %.100s", Py_TYPE(nl)->tp_name);
            return NULL;
        }
    }
    if (enc != Py_None) {
        PyObject *info = PyCodec_Encoder(PyUnicode_AsUTF8(enc)); /* LookupError */
        if (!info)
            return NULL;
        Py_DECREF(info);
        if (err == Py_None)
            err = PyUnicode_FromString("strict");
        else
            Py_INCREF(err);
        if (!err)
            return NULL;
        Py_XSETREF(self->encoding, Py_NewRef(enc));
        Py_XSETREF(self->errors, err);
    } else if (err != Py_None) {
        Py_XSETREF(self->errors, Py_NewRef(err));
    }
    if (nl) {
        /* None and '' write '\n' as it is; '\r' and '\r\n' translate it. */
        bool keep = nl == Py_None || PyUnicode_GET_LENGTH(nl) == 0 ||
                    PyUnicode_CompareWithASCIIString(nl, "\n") == 0;
        Py_XSETREF(self->newline, keep ? NULL : Py_NewRef(nl));
    }
    if (lb != Py_None) {
        int t = PyObject_IsTrue(lb);
        if (t < 0)
            return NULL;
        self->line_buffering = t;
    }
    if (wt != Py_None) {
        int t = PyObject_IsTrue(wt);
        if (t < 0)
            return NULL;
        self->write_through = t;
    }
    Py_RETURN_NONE;
}

static PyObject *out_repr(out_obj *self)
{
    return PyUnicode_FromFormat("<ctxd %s%s>", wrk_output_stream_name(self->stream),
                                self->buffer ? "" : ".buffer");
}

static PyObject *get_name(out_obj *self, void *c)
{
    (void)c;
    return PyUnicode_FromFormat("<%s>", wrk_output_stream_name(self->stream));
}

static PyObject *get_const(out_obj *self, void *c)
{
    (void)self;
    return PyUnicode_FromString((const char *)c);
}

static PyObject *get_closed(out_obj *self, void *c)
{
    (void)c;
    return PyBool_FromLong(out_closed(self));
}

static PyObject *get_encoding(out_obj *self, void *c)
{
    (void)c;
    return self->encoding ? Py_NewRef(self->encoding) : PyUnicode_FromString("utf-8");
}

static PyObject *get_errors(out_obj *self, void *c)
{
    (void)c;
    return self->errors ? Py_NewRef(self->errors) : PyUnicode_FromString("backslashreplace");
}

static PyObject *get_line_buffering(out_obj *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->line_buffering);
}

static PyObject *get_write_through(out_obj *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->write_through);
}

static PyObject *get_none(out_obj *self, void *c)
{
    (void)self, (void)c;
    Py_RETURN_NONE;
}

static PyObject *get_buffer(out_obj *self, void *c)
{
    (void)c;
    Py_INCREF(self->buffer);
    return self->buffer;
}

static PyMethodDef text_methods[] = {
    {"write", (PyCFunction)text_write, METH_O, NULL},
    {"writelines", (PyCFunction)out_writelines, METH_O, NULL},
    {"flush", (PyCFunction)out_flush_m, METH_NOARGS, NULL},
    {"fileno", (PyCFunction)out_fileno, METH_NOARGS, NULL},
    {"isatty", (PyCFunction)out_false, METH_NOARGS, NULL},
    {"readable", (PyCFunction)out_false, METH_NOARGS, NULL},
    {"seekable", (PyCFunction)out_false, METH_NOARGS, NULL},
    {"writable", (PyCFunction)out_true, METH_NOARGS, NULL},
    {"close", (PyCFunction)out_close, METH_NOARGS, NULL},
    {"reconfigure", (PyCFunction)(void (*)(void))out_reconfigure, METH_VARARGS | METH_KEYWORDS,
     NULL},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef bin_methods[] = {
    {"write", (PyCFunction)bin_write, METH_O, NULL},
    {"writelines", (PyCFunction)out_writelines, METH_O, NULL},
    {"flush", (PyCFunction)out_flush_m, METH_NOARGS, NULL},
    {"fileno", (PyCFunction)out_fileno, METH_NOARGS, NULL},
    {"isatty", (PyCFunction)out_false, METH_NOARGS, NULL},
    {"readable", (PyCFunction)out_false, METH_NOARGS, NULL},
    {"seekable", (PyCFunction)out_false, METH_NOARGS, NULL},
    {"writable", (PyCFunction)out_true, METH_NOARGS, NULL},
    {"close", (PyCFunction)out_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef text_getset[] = {
    {"name", (getter)get_name, NULL, NULL, NULL},
    {"encoding", (getter)get_encoding, NULL, NULL, NULL},
    {"errors", (getter)get_errors, NULL, NULL, NULL},
    {"mode", (getter)get_const, NULL, NULL, "w"},
    {"closed", (getter)get_closed, NULL, NULL, NULL},
    {"line_buffering", (getter)get_line_buffering, NULL, NULL, NULL},
    {"write_through", (getter)get_write_through, NULL, NULL, NULL},
    {"newlines", (getter)get_none, NULL, NULL, NULL},
    {"buffer", (getter)get_buffer, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyGetSetDef bin_getset[] = {
    {"name", (getter)get_name, NULL, NULL, NULL},
    {"mode", (getter)get_const, NULL, NULL, "wb"},
    {"closed", (getter)get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject text_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ctxd.OutStream",
    .tp_basicsize = sizeof(out_obj),
    .tp_dealloc = (destructor)out_dealloc,
    .tp_repr = (reprfunc)out_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Captured text output of a ctxd worker.",
    .tp_methods = text_methods,
    .tp_getset = text_getset,
};

static PyTypeObject bin_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ctxd.OutBuffer",
    .tp_basicsize = sizeof(out_obj),
    .tp_dealloc = (destructor)out_dealloc,
    .tp_repr = (reprfunc)out_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Captured binary output of a ctxd worker.",
    .tp_methods = bin_methods,
    .tp_getset = bin_getset,
};

/* A text object for stream s with its binary twin. */
static PyObject *make_stream(int s)
{
    out_obj *b = PyObject_New(out_obj, &bin_type);
    if (!b)
        return NULL;
    *b = (out_obj){.ob_base = b->ob_base, .stream = s};
    out_obj *t = PyObject_New(out_obj, &text_type);
    if (!t) {
        Py_DECREF(b);
        return NULL;
    }
    *t = (out_obj){.ob_base = t->ob_base, .stream = s, .buffer = (PyObject *)b};
    return (PyObject *)t;
}

/* Registers type with an io ABC so isinstance(sys.stdout, io.TextIOBase)
 * holds, as some libraries check it. */
static int register_abc(PyObject *io, const char *abc, PyTypeObject *type)
{
    PyObject *cls = PyObject_GetAttrString(io, abc);
    if (!cls)
        return -1;
    PyObject *r = PyObject_CallMethod(cls, "register", "O", (PyObject *)type);
    Py_DECREF(cls);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* os.write as it was (posix.write). */
int wrk_outstream_install(void)
{
    if (PyType_Ready(&text_type) < 0 || PyType_Ready(&bin_type) < 0)
        return -1;
    PyObject *io = PyImport_ImportModule("io");
    if (!io)
        return -1;
    int rc = register_abc(io, "TextIOBase", &text_type);
    if (rc == 0)
        rc = register_abc(io, "BufferedIOBase", &bin_type);
    Py_DECREF(io);
    if (rc < 0)
        return -1;
    wrk_output_on_run(next_run);
    static const char *const names[WRK_OUTPUT_NSTREAMS][2] = {{"stdout", "__stdout__"},
                                                              {"stderr", "__stderr__"}};
    for (int s = 0; s < WRK_OUTPUT_NSTREAMS; s++) {
        PyObject *o = make_stream(s);
        if (!o)
            return -1;
        rc = PySys_SetObject(names[s][0], o);
        if (rc == 0)
            rc = PySys_SetObject(names[s][1], o);
        Py_DECREF(o);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* Whether f is one of the worker's own text streams and open: print()'s
 * fast path (wrk_print.c) writes to those directly. */
bool wrk_outstream_is_open_text(PyObject *f)
{
    return Py_IS_TYPE(f, &text_type) && !out_closed((const out_obj *)f);
}

/* Whether f is a stream object of this module: wrk_run skips flushing
 * those, since wrk_output_end_run sends their buffers in order. */
bool wrk_outstream_owns(PyObject *f)
{
    return Py_IS_TYPE(f, &text_type) || Py_IS_TYPE(f, &bin_type);
}
