/* wrk_input: input() and getpass() during a run. In a run whose execute
 * allowed stdin, the prompt goes to the supervisor as `input_request` (after
 * all output written before it) and the main thread blocks reading the
 * channel for the matching `input_reply`; otherwise input() raises EOFError
 * at once, as Jupyter's kernels do with allow_stdin false. SIGINT (interrupt,
 * timeout) breaks the wait with KeyboardInterrupt. During a run the
 * supervisor sends nothing else on the channel (runs and forks wait for the
 * run's `done`); each request carries a number the reply echoes, so a reply
 * that crossed an interrupted input() is dropped, here or by the main loop
 * (wrk_input_is_stale_reply). */
#include "wrk_input.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "mem.h"
#include "proto.h"
#include "wrk_chan.h"
#include "wrk_log.h"
#include "wrk_output.h"

static bool allowed;
static pthread_t run_thread; /* only the thread running the cell may ask */
static uint64_t seq;
static proto_buf inbuf; /* bytes read from the channel, not yet a whole frame */

void wrk_input_allow(bool a)
{
    allowed = a;
    run_thread = pthread_self();
}

bool wrk_input_is_stale_reply(const uint8_t *body, size_t len)
{
    /* The type from the frame's first bytes (the supervisor writes `t`
     * first): every frame passes here, and a decode is most of a small
     * run's parsing; the whole frame is decoded only if that fails. */
    proto_val tv;
    const proto_val *t = proto_peek_type(body, len, &tv) ? &tv : NULL;
    proto_doc doc;
    bool decoded = false;
    if (!t) {
        proto_error err;
        if (proto_decode(&doc, body, len, &err) < 0)
            return false; /* the main loop reports it */
        decoded = true;
        t = proto_map_get(&doc.nodes[0], "t");
    }
    bool stale = proto_str_eq(t, "input_reply") || proto_str_eq(t, "pip_reply");
    if (decoded)
        proto_doc_free(&doc);
    return stale;
}

/* Looks for a whole frame in inbuf. Returns 1 with *value set (a new str)
 * for the reply numbered n, 0 when more bytes are needed; drops stale
 * replies; exits on anything else (a broken supervisor). */
static int take_reply(uint64_t n, PyObject **value)
{
    for (;;) {
        const uint8_t *body;
        size_t len, used;
        int r = proto_frame_next(inbuf.data, inbuf.len, PROTO_MAX_FRAME, &body, &len, &used);
        if (r < 0) {
            wrk_log("the supervisor announced a frame larger than %u bytes", PROTO_MAX_FRAME);
            _exit(2);
        }
        if (r == 0)
            return 0;
        proto_doc doc;
        proto_error err;
        if (proto_decode(&doc, body, len, &err) < 0) {
            wrk_log("undecodable frame from the supervisor: %s", err.msg);
            _exit(2);
        }
        const proto_val *msg = &doc.nodes[0];
        const proto_val *num = proto_map_get(msg, "n");
        const proto_val *v = proto_map_get(msg, "value");
        const proto_val *t = proto_map_get(msg, "t");
        if (!(proto_str_eq(t, "input_reply") || proto_str_eq(t, "pip_reply")) || !num ||
            num->kind != PROTO_UINT || !v || v->kind != PROTO_STR) {
            wrk_log("unexpected frame from the supervisor while waiting for input");
            _exit(2);
        }
        int found = 0;
        const proto_val *eof = proto_map_get(msg, "eof");
        if (num->as.u == n && eof && eof->kind == PROTO_BOOL && eof->as.b) {
            /* The client declined to answer (input.reply eof). */
            PyErr_SetString(PyExc_EOFError, "the client declined to answer input()");
            *value = NULL;
            found = 1;
        } else if (num->as.u == n) {
            *value = PyUnicode_DecodeUTF8(v->as.s, (Py_ssize_t)v->n, "replace");
            found = 1;
        }
        proto_doc_free(&doc);
        proto_buf_consume(&inbuf, used);
        if (found)
            return 1;
    }
}

/* GIL released: reads until inbuf holds only whole frames. */
static void finish_partial_frame(int fd)
{
    for (;;) {
        size_t off = 0;
        for (;;) {
            const uint8_t *body;
            size_t len, used;
            int r = proto_frame_next(inbuf.data + off, inbuf.len - off, PROTO_MAX_FRAME, &body,
                                     &len, &used);
            if (r <= 0)
                break;
            off += used;
        }
        if (off == inbuf.len)
            return;
        proto_buf_reserve(&inbuf, 64 * 1024);
        ssize_t r = read(fd, inbuf.data + inbuf.len, inbuf.cap - inbuf.len);
        if (r > 0)
            inbuf.len += (size_t)r;
        else if (r == 0)
            wrk_chan_gone(0);
        else if (errno != EINTR)
            wrk_chan_gone(1);
    }
}

/* input(prompt='') and getpass(prompt='Password: ', stream=None), in C so
 * no frame of the worker shows in a traceback. */
static PyObject *ask(PyObject *prompt_obj, int password);
static PyObject *wait_reply(uint64_t n);

/* The builtin input() and the context's own sys.stdin, as they were when
 * the replacements were made; code that replaced sys.stdin (io.StringIO, a
 * pipe) or a forked child (which may have a real terminal on fd 0) gets
 * the builtin's behaviour, as `python3 script.py` would. */
static PyObject *builtin_input, *own_stdin;

/* True when input() should read sys.stdin itself instead of asking. */
static bool stdin_replaced(void)
{
    PyObject *in = PySys_GetObject("stdin"); /* borrowed */
    return wrk_output_forked() || in != own_stdin;
}

static PyObject *py_input(PyObject *self, PyObject *args)
{
    (void)self;
    if (stdin_replaced() && builtin_input)
        return PyObject_Call(builtin_input, args, NULL);
    PyObject *prompt = NULL;
    if (!PyArg_ParseTuple(args, "|O:input", &prompt))
        return NULL;
    return ask(prompt, 0);
}

/* getpass with a replaced sys.stdin: the stdlib's own (unix_getpass: the
 * terminal if there is one, else sys.stdin with a GetPassWarning). */
static PyObject *stdlib_getpass(PyObject *args, PyObject *kw)
{
    PyObject *mod = PyImport_ImportModule("getpass");
    PyObject *fn = mod ? PyObject_GetAttrString(mod, "unix_getpass") : NULL;
    PyObject *r = fn ? PyObject_Call(fn, args, kw) : NULL;
    Py_XDECREF(fn);
    Py_XDECREF(mod);
    return r;
}

static PyObject *py_getpass(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    if (stdin_replaced())
        return stdlib_getpass(args, kw);
    static char *names[] = {"prompt", "stream", NULL};
    PyObject *prompt = NULL, *stream = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:getpass", names, &prompt, &stream))
        return NULL;
    if (!prompt) {
        PyObject *p = PyUnicode_FromString("Password: ");
        if (!p)
            return NULL;
        PyObject *r = ask(p, 1);
        Py_DECREF(p);
        return r;
    }
    return ask(prompt, 1);
}

static PyObject *ask(PyObject *prompt_obj, int password)
{
    PyObject *prompt = prompt_obj ? PyObject_Str(prompt_obj) : PyUnicode_FromString("");
    if (!prompt)
        return NULL;
    if (allowed && !pthread_equal(pthread_self(), run_thread)) {
        PyErr_SetString(PyExc_EOFError, "input() is only available in the thread running the cell");
        Py_DECREF(prompt);
        return NULL;
    }
    if (!allowed || wrk_output_forked()) {
        PyErr_SetString(PyExc_EOFError, "input() is not available: the client did not allow stdin "
                                        "(execute allow_stdin is false)");
        Py_DECREF(prompt);
        return NULL;
    }
    PyObject *pb = PyUnicode_AsEncodedString(prompt, "utf-8", "backslashreplace");
    Py_DECREF(prompt);
    if (!pb)
        return NULL;
    size_t plen = (size_t)PyBytes_GET_SIZE(pb);
    if (plen > 65536)
        plen = 65536;
    while (plen > 0 && plen < (size_t)PyBytes_GET_SIZE(pb) &&
           ((unsigned char)PyBytes_AS_STRING(pb)[plen] & 0xc0) == 0x80)
        plen--;
    uint64_t n = ++seq;
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_put_map(&b, 4);
    proto_put_str(&b, "t");
    proto_put_str(&b, "input_request");
    proto_put_str(&b, "prompt");
    proto_put_strn(&b, PyBytes_AS_STRING(pb), plen);
    proto_put_str(&b, "password");
    proto_put_bool(&b, password);
    proto_put_str(&b, "n");
    proto_put_uint(&b, n);
    proto_frame_end(&b, start);
    Py_DECREF(pb);

    PyThreadState *ts = PyEval_SaveThread();
    wrk_output_send_frames(&b);
    proto_buf_free(&b);
    PyEval_RestoreThread(ts);
    return wait_reply(n);
}

/* GIL held, SIGINT unblocked (a run). Waits for reply n without a window
 * where an interrupt is missed: SIGINT is blocked while Python's flag is
 * checked, and unblocked only inside ppoll, atomically. */
static PyObject *wait_reply(uint64_t n)
{
    int fd = wrk_chan_fd();
    sigset_t intr, old, during;
    sigemptyset(&intr);
    sigaddset(&intr, SIGINT);
    pthread_sigmask(SIG_BLOCK, &intr, &old);
    during = old;
    sigdelset(&during, SIGINT);
    PyObject *value = NULL;
    for (;;) {
        if (inbuf.len && take_reply(n, &value))
            break; /* value NULL with an error if decoding failed */
        if (PyErr_CheckSignals() < 0) {
            /* KeyboardInterrupt (interrupt or timeout). A frame half read
             * is completed first (the supervisor writes whole frames), so
             * the channel stays aligned; a whole one left over is stale. */
            PyThreadState *ts = PyEval_SaveThread();
            finish_partial_frame(fd);
            PyEval_RestoreThread(ts);
            break;
        }
        PyThreadState *ts = PyEval_SaveThread();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = ppoll(&p, 1, NULL, &during);
        ssize_t r = -1;
        if (pr > 0) {
            proto_buf_reserve(&inbuf, 64 * 1024);
            r = read(fd, inbuf.data + inbuf.len, inbuf.cap - inbuf.len);
            if (r == 0)
                wrk_chan_gone(0);
            if (r > 0)
                inbuf.len += (size_t)r;
        }
        if ((pr < 0 || r < 0) && errno != EINTR && errno != EAGAIN) {
            wrk_log("channel read failed: %s; exiting", strerror(errno));
            wrk_chan_gone(1);
        }
        PyEval_RestoreThread(ts);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return value;
}

uint64_t wrk_input_next_seq(void)
{
    return ++seq;
}

PyObject *wrk_input_send_wait(const proto_buf *frame, uint64_t n)
{
    PyThreadState *ts = PyEval_SaveThread();
    wrk_output_send_frames(frame);
    PyEval_RestoreThread(ts);
    return wait_reply(n);
}

/* The docstrings start with the builtins' text signatures, so
 * inspect.signature(input) and inspect.signature(getpass.getpass) answer
 * as for the originals. */
static PyMethodDef input_defs[] = {
    {"input", py_input, METH_VARARGS,
     "input(prompt='', /)\n--\n\n"
     "Read a string from standard input; while sys.stdin is the context's own,\n"
     "the client is asked (input.request)."},
    {"getpass", (PyCFunction)(void (*)(void))py_getpass, METH_VARARGS | METH_KEYWORDS,
     "getpass(prompt='Password: ', stream=None)\n--\n\n"
     "Prompt for a password, with echo turned off; while sys.stdin is the\n"
     "context's own, the client is asked (input.request, password true)."},
};

PyObject *wrk_input_function(int which)
{
    if (!builtin_input) {
        PyObject *b = PyEval_GetBuiltins(); /* borrowed */
        builtin_input = b ? PyDict_GetItemString(b, "input") : NULL;
        Py_XINCREF(builtin_input);
        own_stdin = PySys_GetObject("stdin");
        Py_XINCREF(own_stdin);
    }
    return PyCFunction_New(&input_defs[which ? 1 : 0], NULL);
}
