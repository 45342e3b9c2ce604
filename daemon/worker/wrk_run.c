/* wrk_run: one run, from `start` to `done`. SIGINT is blocked in the main
 * thread while idle and unblocked only between `start` and the end of the
 * user code, so an interrupt can never hit the worker's own bookkeeping
 * outside that window, and a late one is discarded before the next run. */
#include "wrk_run.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"
#include "wrk_chan.h"
#include "wrk_children.h"
#include "wrk_display.h"
#include "wrk_input.h"
#include "wrk_log.h"
#include "wrk_output.h"
#include "wrk_outstream.h"
#include "wrk_py.h"

/* Caps that keep result and error frames far below PROTO_MAX_FRAME. */
#define MAX_RESULT_BYTES (8u * 1024 * 1024)
#define MAX_EVALUE_BYTES (1u * 1024 * 1024)
#define MAX_TRACEBACK_BYTES (8u * 1024 * 1024)

static PyObject *run_globals;
static uint64_t silent_runs;
/* The run id of the request being served (PROTOCOL.md section 9): kept in
 * C only, echoed in start, done, answer, forked and fork_failed. */
static uint64_t run_id;

void wrk_run_set_id(uint64_t id)
{
    run_id = id;
}

uint64_t wrk_run_id(void)
{
    return run_id;
}

/* Made once: the keys every run looks up (a C string would be made into a
 * str at each lookup), and the sys module. */
static PyObject *key_pyplot, *key_flush, *key_std[2], *sys_module;

void wrk_run_init(PyObject *globals)
{
    Py_INCREF(globals);
    run_globals = globals;
    key_pyplot = PyUnicode_InternFromString("matplotlib.pyplot");
    key_flush = PyUnicode_InternFromString("flush");
    key_std[0] = PyUnicode_InternFromString("stdout");
    key_std[1] = PyUnicode_InternFromString("stderr");
    sys_module = PyImport_ImportModule("sys");
    if (!key_pyplot || !key_flush || !key_std[0] || !key_std[1] || !sys_module)
        fatal("run: cannot set up the run's lookups");
}

/* ---- signals ---------------------------------------------------------- */

static void sigint_mask(int how)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    pthread_sigmask(how, &set, NULL);
}

/* Drops a SIGINT that arrived while idle (it is blocked then, so it waits
 * as pending) and a Python-level one already tripped by another thread. */
static void sigint_discard(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    struct timespec zero = {0, 0};
    for (;;) {
        int r = sigtimedwait(&set, NULL, &zero);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
    }
    if (PyErr_CheckSignals() < 0)
        PyErr_Clear();
}

/* ---- helpers ----------------------------------------------------------- */

/* CPU seconds of the worker (and, with kids, of its waited-for children)
 * so far. The worker's own is CLOCK_PROCESS_CPUTIME_ID: the same total as
 * getrusage's utime + stime (which the kernel scales to it), at less cost
 * (no per-thread fault counts). A run's start takes its children's figure
 * from the look wrk_output_begin_run makes (wrk_children.h). */
static double cpu_seconds(bool kids)
{
    double t = 0;
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0)
        t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    struct rusage u;
    if (kids && getrusage(RUSAGE_CHILDREN, &u) == 0) {
        t += (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec / 1e6;
        t += (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec / 1e6;
    }
    return t;
}

/* The pending exception as one normalised object with its traceback. */
static PyObject *fetch_exception(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (!type)
        return PyObject_CallFunction(PyExc_SystemError, "s", "error return without exception");
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
}

/* Appends a Python str as msgpack str: UTF-8 with backslashreplace (str()
 * of an exception may hold lone surrogates), at most max bytes, cut at a
 * character boundary. */
void wrk_run_put_pystr(proto_buf *b, PyObject *s, size_t max)
{
    PyObject *bytes = NULL;
    if (s && PyUnicode_Check(s))
        bytes = PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace");
    if (!bytes) {
        PyErr_Clear();
        proto_put_str(b, "<unrepresentable>");
        return;
    }
    const char *p = PyBytes_AS_STRING(bytes);
    size_t n = (size_t)PyBytes_GET_SIZE(bytes);
    if (n <= max) {
        proto_put_strn(b, p, n);
    } else {
        static const char more[] = "... [truncated]";
        size_t cut = max - (sizeof more - 1);
        while (cut > 0 && ((unsigned char)p[cut] & 0xc0) == 0x80)
            cut--;
        proto_buf tmp;
        proto_buf_init(&tmp);
        proto_buf_append(&tmp, p, cut);
        proto_buf_append(&tmp, more, sizeof more - 1);
        proto_put_strn(b, (const char *)tmp.data, tmp.len);
        proto_buf_free(&tmp);
    }
    Py_DECREF(bytes);
}

/* The request's env map as a dict; exits (bad frame) if it is malformed. */
static PyObject *env_dict(const proto_val *env)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    for (uint32_t i = 0; env && i < env->n; i++) {
        const proto_val *k = &env->as.items[2 * i], *v = &env->as.items[2 * i + 1];
        PyObject *ks = PyUnicode_DecodeUTF8(k->as.s, k->n, "strict");
        PyObject *vs = v->kind == PROTO_STR ? PyUnicode_DecodeUTF8(v->as.s, v->n, "strict") : NULL;
        if (!ks || !vs || PyDict_SetItem(d, ks, vs) < 0) {
            wrk_log("run: env is not a map of UTF-8 str to str");
            _exit(2);
        }
        Py_DECREF(ks);
        Py_DECREF(vs);
    }
    return d;
}

/* ---- frames -------------------------------------------------------------- */

static void put_result(proto_buf *b, PyObject *repr)
{
    size_t start = proto_frame_begin(b);
    proto_put_map(b, 2);
    proto_put_str(b, "t");
    proto_put_str(b, "result");
    proto_put_str(b, "data");
    if (PyDict_Check(repr) && PyDict_GET_SIZE(repr) <= 64) {
        /* A MIME bundle (wrk_display.c keeps it under the frame limit). */
        proto_put_map(b, (uint32_t)PyDict_GET_SIZE(repr));
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(repr, &pos, &k, &v)) {
            wrk_run_put_pystr(b, k, 256);
            wrk_run_put_pystr(b, v, MAX_RESULT_BYTES);
        }
    } else {
        proto_put_map(b, 1);
        proto_put_str(b, "text/plain");
        wrk_run_put_pystr(b, repr, MAX_RESULT_BYTES);
    }
    proto_frame_end(b, start);
}

/* The error frame from the helper's (ename, evalue, [lines]); falls back to
 * the bare type name if formatting itself failed. */
static void put_error(proto_buf *b, PyObject *exc)
{
    PyObject *f = wrk_py_call(WRK_PY_FORMAT, PyTuple_Pack(1, exc));
    if (f &&
        (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 3 || !PyList_Check(PyTuple_GET_ITEM(f, 2)))) {
        Py_CLEAR(f);
    }
    if (!f)
        PyErr_Clear();
    size_t start = proto_frame_begin(b);
    proto_put_map(b, 4);
    proto_put_str(b, "t");
    proto_put_str(b, "error");
    proto_put_str(b, "ename");
    if (f)
        wrk_run_put_pystr(b, PyTuple_GET_ITEM(f, 0), MAX_EVALUE_BYTES);
    else
        proto_put_str(b, Py_TYPE(exc)->tp_name);
    proto_put_str(b, "evalue");
    if (f)
        wrk_run_put_pystr(b, PyTuple_GET_ITEM(f, 1), MAX_EVALUE_BYTES);
    else
        proto_put_str(b, "");
    proto_put_str(b, "traceback");
    if (!f) {
        proto_put_array(b, 0);
    } else {
        PyObject *lines = PyTuple_GET_ITEM(f, 2);
        Py_ssize_t n = PyList_GET_SIZE(lines);
        proto_put_array(b, (uint32_t)n);
        size_t budget_end = b->len + MAX_TRACEBACK_BYTES;
        for (Py_ssize_t i = 0; i < n; i++) {
            size_t room = b->len < budget_end ? budget_end - b->len : 0;
            if (room < 64)
                proto_put_str(b, "...");
            else
                wrk_run_put_pystr(b, PyList_GET_ITEM(lines, i), room - 16);
        }
    }
    proto_frame_end(b, start);
    Py_XDECREF(f);
}

void wrk_run_put_start(proto_buf *b)
{
    size_t start = proto_frame_begin(b);
    proto_put_map(b, 2);
    proto_put_str(b, "t");
    proto_put_str(b, "start");
    proto_put_str(b, "run_id");
    proto_put_uint(b, run_id);
    proto_frame_end(b, start);
}

void wrk_run_put_done(proto_buf *b, const char *status, double cpu, const proto_buf *arts)
{
    wrk_run_put_done_exit(b, status, cpu, arts, -1);
}

void wrk_run_put_done_exit(proto_buf *b, const char *status, double cpu, const proto_buf *arts,
                           int exit_code)
{
    bool with_arts = arts && arts->len;
    size_t start = proto_frame_begin(b);
    proto_map m = proto_map_open(b);
    proto_key(b, &m, "t");
    proto_put_str(b, "done");
    proto_key(b, &m, "run_id");
    proto_put_uint(b, run_id);
    proto_key(b, &m, "status");
    proto_put_str(b, status);
    proto_key(b, &m, "cpu_time");
    proto_put_double(b, cpu < 0 ? 0 : cpu);
    if (with_arts) {
        proto_key(b, &m, "artifacts");
        proto_buf_append(b, arts->data, arts->len);
    }
    if (exit_code >= 0) {
        proto_key(b, &m, "exit_code");
        proto_put_uint(b, (uint64_t)exit_code);
    }
    proto_map_close(b, &m);
    proto_frame_end(b, start);
}

/* A script run's (file, argv) for the helper, or None for a cell. argv's
 * items are str (the supervisor checked them); exits on a bad frame. */
static PyObject *script_arg(const wrk_run_req *req)
{
    if (!req->file && !req->argv)
        return Py_NewRef(Py_None);
    PyObject *argv = PyList_New(0);
    for (uint32_t i = 0; argv && req->argv && i < req->argv->n; i++) {
        const proto_val *a = &req->argv->as.items[i];
        PyObject *s = a->kind == PROTO_STR
                          ? PyUnicode_DecodeFSDefaultAndSize(a->as.s, (Py_ssize_t)a->n)
                          : NULL;
        if (!s || PyList_Append(argv, s) < 0) {
            wrk_log("run: argv is not an array of str");
            _exit(2);
        }
        Py_DECREF(s);
    }
    PyObject *file =
        req->file ? PyUnicode_DecodeFSDefaultAndSize(req->file->as.s, (Py_ssize_t)req->file->n)
                  : Py_NewRef(Py_None);
    if (!argv || !file)
        fatal("run: out of memory building the request");
    PyObject *t = PyTuple_Pack(2, file, argv);
    Py_DECREF(file);
    Py_DECREF(argv);
    if (!t)
        fatal("run: out of memory building the request");
    return t;
}

/* Evaluates a code object of the run in its namespace; a body compiled
 * with top-level await is a coroutine, run to its end by the helper. Done
 * here, not in the helper, so no helper frame is on the stack while user
 * code runs. */
static PyObject *eval_code(PyObject *co)
{
    PyObject *r = PyEval_EvalCode(co, run_globals, run_globals);
    if (r && (((PyCodeObject *)co)->co_flags & CO_COROUTINE)) {
        PyObject *coro = r;
        r = wrk_py_call(WRK_PY_AWAIT, PyTuple_Pack(1, coro));
        Py_DECREF(coro);
    }
    return r;
}

/* The run proper: a script's set-up, the code (IPython syntax
 * transformed when ipython), the trailing expression's value as a MIME
 * bundle or repr (None when there is none, or a trailing `;` hides it),
 * the set-up undone whatever happened. NULL with the run's exception
 * set. */
static PyObject *run_cell(PyObject *code, PyObject *filename, bool silent, bool ipython,
                          PyObject *script)
{
    /* enter, result and leave are not called where they would do nothing
     * (a cell, no value, no IPython): each call costs ~0.3 us of a ~10 us
     * run of `x = 1`. */
    PyObject *saved = script == Py_None
                          ? Py_NewRef(Py_None)
                          : wrk_py_call(WRK_PY_ENTER, PyTuple_Pack(2, script, run_globals));
    if (!saved)
        return NULL;
    PyObject *sil = silent ? Py_True : Py_False;
    PyObject *ipy = ipython ? Py_True : Py_False;
    PyObject *value = NULL, *repr = NULL;
    bool quiet = false;
    PyObject *cc = ipython ? NULL : wrk_py_compiled_hit(code, filename);
    if (!cc)
        cc = wrk_py_call(WRK_PY_COMPILE, PyTuple_Pack(5, code, filename, sil, run_globals, ipy));
    if (cc && PyTuple_Check(cc) && PyTuple_GET_SIZE(cc) == 3) {
        wrk_py_cell_ran(filename, PyTuple_GET_ITEM(cc, 0), PyTuple_GET_ITEM(cc, 1));
        PyObject *r = eval_code(PyTuple_GET_ITEM(cc, 0));
        PyObject *last = PyTuple_GET_ITEM(cc, 1);
        quiet = PyTuple_GET_ITEM(cc, 2) == Py_True;
        if (r)
            value = last == Py_None ? Py_NewRef(Py_None) : eval_code(last);
        Py_XDECREF(r);
    }
    Py_XDECREF(cc);
    if (value == Py_None) {
        repr = value; /* result() of None is None */
    } else if (value) {
        PyObject *hide = silent || quiet ? Py_True : Py_False;
        repr = wrk_py_call(WRK_PY_RESULT, PyTuple_Pack(4, value, hide, run_globals, ipy));
        Py_DECREF(value);
    }
    /* leave runs in any case (given the run's exception, for the IPython
     * shell's post-run events); the run's own exception, if any, wins. */
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    PyErr_NormalizeException(&et, &ev, &etb);
    if (ev && etb)
        PyException_SetTraceback(ev, etb);
    PyObject *l = saved == Py_None && !ipython /* leave() has nothing to undo */
                      ? Py_NewRef(Py_None)
                      : wrk_py_call(WRK_PY_LEAVE,
                                    PyTuple_Pack(4, saved, sil, run_globals, ev ? ev : Py_None));
    Py_DECREF(saved);
    if (l) {
        Py_DECREF(l);
    } else if (et) {
        PyErr_Clear();
    } else {
        Py_CLEAR(repr);
    }
    if (et)
        PyErr_Restore(et, ev, etb);
    return repr;
}

/* ---- the run --------------------------------------------------------------- */

/* A process forked by the cell (os.fork) that returns from it must not go
 * on as a second worker: it exits as a script would. */
static _Noreturn void child_exit(PyObject *exc)
{
    PyObject *r = wrk_py_call(WRK_PY_CHILD_EXIT, PyTuple_Pack(1, exc ? exc : Py_None));
    int code = r && PyLong_Check(r) ? (int)PyLong_AsLong(r) : 1;
    fflush(NULL);
    _exit(code);
}

/* Whether the run may have left figures open: end_run does nothing
 * unless pyplot is imported (nor for a silent run), so the two Python
 * calls it takes are made only then. */
static bool figures_possible(bool silent)
{
    if (silent)
        return false;
    PyObject *mods = PyImport_GetModuleDict(); /* borrowed */
    if (!mods)
        return true;
    PyObject *m = PyDict_GetItemWithError(mods, key_pyplot); /* borrowed */
    if (!m && PyErr_Occurred()) {
        PyErr_Clear();
        return true; /* end_run looks for itself */
    }
    return m != NULL;
}

/* sys.stdout.flush() and sys.stderr.flush(), whatever they raise, as the
 * helper's flush() does, without its Python frame; not for ctxd's own
 * stream objects, whose buffers wrk_output_end_run sends in order anyway
 * (only a stream the cell put in their place needs the call). */
static void flush_std(void)
{
    for (size_t i = 0; i < 2; i++) {
        PyObject *f = PyObject_GetAttr(sys_module, key_std[i]);
        if (!f) {
            PyErr_Clear();
            continue;
        }
        if (!wrk_outstream_owns(f)) {
            PyObject *r = PyObject_CallMethodNoArgs(f, key_flush);
            if (!r)
                PyErr_Clear();
            Py_XDECREF(r);
        }
        Py_DECREF(f);
    }
}

/* prefix, n in decimal, then ">": by hand, since PyUnicode_FromFormat
 * goes through sprintf, a few percent of a small run's worker time. */
static PyObject *numbered_name(const char *prefix, unsigned long long n)
{
    char digits[24];
    size_t nd = 0;
    do {
        digits[nd++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    char name[64];
    size_t len = strlen(prefix);
    memcpy(name, prefix, len);
    while (nd)
        name[len++] = digits[--nd];
    name[len++] = '>';
    return PyUnicode_FromStringAndSize(name, (Py_ssize_t)len);
}

/* File name the code is compiled under; silent runs share the execution
 * count of a real cell, so they get names of their own; a script's code
 * is compiled under its path, as python3 does. */
static PyObject *cell_filename(const wrk_run_req *req)
{
    if (req->file)
        return PyUnicode_DecodeFSDefaultAndSize(req->file->as.s, (Py_ssize_t)req->file->n);
    if (req->silent)
        return numbered_name("<silent-", ++silent_runs);
    return numbered_name("<cell-", req->execution_count);
}

void wrk_run_execute(const wrk_run_req *req)
{
    double cpu0 = cpu_seconds(false);
    PyGILState_STATE gil = PyGILState_Ensure();
    wrk_input_allow(req->allow_stdin);

    PyObject *code = PyUnicode_DecodeUTF8(req->code, (Py_ssize_t)req->code_len, "strict");
    if (!code) {
        wrk_log("run: code is not valid UTF-8");
        _exit(2);
    }
    PyObject *filename = cell_filename(req);
    PyObject *env = env_dict(req->env);
    if (!filename || !env)
        fatal("run: out of memory building the request");

    /* Applied while SIGINT is still blocked; a failure (an illegal name)
     * becomes the run's error. */
    PyObject *exc = NULL;
    PyObject *saved = NULL; /* no env: nothing to apply or put back */
    if (PyDict_GET_SIZE(env) && !(saved = wrk_py_call(WRK_PY_ENV_APPLY, PyTuple_Pack(1, env))))
        exc = fetch_exception();
    /* Files in the cwd before the run, for done's artifacts: only when the
     * execute asks (a scan of a large cwd costs up to 0.2 s per side). */
    PyObject *snap = req->silent || !req->artifacts ? Py_NewRef(Py_None) : wrk_display_scan();

    sigint_discard();
    sigint_mask(SIG_UNBLOCK);
    proto_buf frames;
    proto_buf_init(&frames);
    wrk_run_put_start(&frames);
    PyThreadState *ts = PyEval_SaveThread();
    wrk_output_begin_run(&frames);
    cpu0 += wrk_children_cpu(); /* as of the look at begin_run */
    PyEval_RestoreThread(ts);

    PyObject *repr = NULL;
    if (!exc) {
        PyObject *script = script_arg(req);
        repr = run_cell(code, filename, req->silent, wrk_ipy_wanted(req->syntax), script);
        Py_DECREF(script);
        if (!repr)
            exc = fetch_exception();
    }

    sigint_mask(SIG_BLOCK);
    if (PyErr_CheckSignals() < 0)
        PyErr_Clear();
    if (wrk_output_forked())
        child_exit(exc);

    proto_buf arts;
    proto_buf_init(&arts);
    wrk_display_put_artifacts(&arts, snap);
    Py_DECREF(snap);
    frames.len = 0;
    const char *status = "ok";
    int exit_code = -1;
    if (exc && PyErr_GivenExceptionMatches(exc, PyExc_SystemExit)) {
        /* sys.exit(): the run ends as a script would, without a traceback;
         * done carries the exit status (non-zero is an error). */
        PyObject *c = wrk_py_call(WRK_PY_EXIT_CODE, PyTuple_Pack(1, exc));
        exit_code = c && PyLong_Check(c) ? (int)PyLong_AsLong(c) : 1;
        if (!c || PyErr_Occurred())
            PyErr_Clear();
        Py_XDECREF(c);
        status = exit_code == 0 ? "ok" : "error";
    } else if (exc) {
        status =
            PyErr_GivenExceptionMatches(exc, PyExc_KeyboardInterrupt) ? "interrupted" : "error";
        put_error(&frames, exc);
    } else if (repr && repr != Py_None) {
        put_result(&frames, repr);
    }
    /* The figures the run left open come after its result or error, as in
     * ipykernel, in the same tail (so all output before them). */
    wrk_display_collect(&frames);
    if (figures_possible(req->silent)) {
        PyObject *fig =
            wrk_py_call(WRK_PY_END_RUN, PyTuple_Pack(1, req->silent ? Py_True : Py_False));
        if (!fig)
            PyErr_Clear();
        Py_XDECREF(fig);
    }
    wrk_display_collect(NULL);
    if (saved) {
        PyObject *r = wrk_py_call(WRK_PY_ENV_RESTORE, PyTuple_Pack(1, saved));
        if (!r)
            PyErr_Clear();
        Py_XDECREF(r);
    }
    flush_std();

    Py_XDECREF(repr);
    Py_XDECREF(exc);
    Py_XDECREF(saved);
    Py_DECREF(env);
    Py_DECREF(filename);
    Py_DECREF(code);
    PyGILState_Release(gil);

    wrk_run_put_done_exit(&frames, status, cpu_seconds(true) - cpu0, &arts, exit_code);
    proto_buf_free(&arts);
    wrk_output_end_run(&frames);
    proto_buf_free(&frames);
}

void wrk_run_query(const wrk_query_req *req)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    wrk_input_allow(false); /* input() in a property raises EOFError */
    proto_buf frames;
    proto_buf_init(&frames);
    wrk_run_put_start(&frames);
    sigint_discard();
    sigint_mask(SIG_UNBLOCK);
    PyThreadState *ts = PyEval_SaveThread(); /* the send may block (backpressure) */
    wrk_chan_send(&frames);
    PyEval_RestoreThread(ts);
    PyObject *answer = wrk_query_ask(req, run_globals);
    sigint_mask(SIG_BLOCK);
    if (!answer)
        PyErr_Clear();
    if (PyErr_CheckSignals() < 0)
        PyErr_Clear();
    if (wrk_output_forked())
        child_exit(NULL);
    frames.len = 0;
    wrk_query_put_answer(&frames, wrk_run_id(), req, answer);
    Py_XDECREF(answer);
    PyGILState_Release(gil);
    wrk_chan_send(&frames);
    proto_buf_free(&frames);
}

void wrk_run_snap(const wrk_snap_req *req)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    wrk_input_allow(false); /* input() in a __reduce__ raises EOFError */
    proto_buf frames;
    proto_buf_init(&frames);
    wrk_run_put_start(&frames);
    sigint_discard();
    sigint_mask(SIG_UNBLOCK);
    PyThreadState *ts = PyEval_SaveThread();
    wrk_chan_send(&frames);
    PyEval_RestoreThread(ts);
    PyObject *answer = wrk_snap_do(req, run_globals);
    sigint_mask(SIG_BLOCK);
    if (!answer)
        PyErr_Clear();
    if (PyErr_CheckSignals() < 0)
        PyErr_Clear();
    if (wrk_output_forked())
        child_exit(NULL);
    frames.len = 0;
    wrk_snap_put_answer(&frames, wrk_run_id(), answer);
    Py_XDECREF(answer);
    PyGILState_Release(gil);
    wrk_chan_send(&frames);
    proto_buf_free(&frames);
}
