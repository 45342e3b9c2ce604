/* ctxd-worker: one persistent CPython interpreter per context, driven by the
 * supervisor over the channel on fd 3 (PROTOCOL.md section 9). main() sets
 * the process up and then serves `run` requests one at a time. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "mem.h"
#include "proto.h"
#include "sbx.h"
#include "wrk_chan.h"
#include "wrk_display.h"
#include "wrk_input.h"
#include "wrk_ipy.h"
#include "wrk_log.h"
#include "wrk_mpmain.h"
#include "wrk_output.h"
#include "wrk_print.h"
#include "wrk_py.h"
#include "wrk_query.h"
#include "wrk_snap.h"
#include "wrk_run.h"
#include "wrk_site.h"
#include "wrk_static.h"
#include "wrk_zygote.h"

#define CHAN_FD 3

#if !defined(WRK_PYTHON_EXE) || !defined(WRK_PYTHON_HOME)
#error                                                                                             \
    "WRK_PYTHON_EXE and WRK_PYTHON_HOME (the embedded interpreter's executable and prefix) must be defined"
#endif

/* The supervisor's death is signalled with this; the handler kills the
 * worker's whole process group, so processes the user code started do not
 * outlive the daemon either. */
#define PARENT_DEATH_SIGNAL (SIGRTMIN + 3)

static void on_parent_death(int sig)
{
    (void)sig;
    wrk_chan_gone(1);
}

static void watch_parent(pid_t parent)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_parent_death;
    sigfillset(&sa.sa_mask);
    if (sigaction(PARENT_DEATH_SIGNAL, &sa, NULL) < 0 ||
        prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL) < 0)
        fatal("cannot watch the supervisor: %s", strerror(errno));
    /* Died before the signal was armed: we were reparented already. Compared
     * with the supervisor's real pid, never with 1: the supervisor may be
     * PID 1 itself (in a container). */
    if (getppid() != parent)
        _exit(1);
}

/* Exits after reporting a failed CPython initialisation step. */
static void check_status(PyStatus st, const char *what)
{
    if (!PyStatus_Exception(st))
        return;
    wrk_log("%s: %s%s%s", what, st.func ? st.func : "", st.func ? ": " : "",
            st.err_msg ? st.err_msg : "failed");
    _exit(PyStatus_IsExit(st) ? st.exitcode : 1);
}

/* Starts CPython like `python3` would, minus the parts a daemon must not
 * inherit: no argv parsing, the executable and prefix pinned to the
 * interpreter this was built against (the first python3 on PATH, or a stray
 * PYTHONHOME, may belong to another one), C stdio left alone. PYTHONPATH and
 * the other PYTHON* variables apply as usual. site is imported, so dist-packages are importable;
 * SIGINT raises KeyboardInterrupt. */
static void init_python(void)
{
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.parse_argv = 0;
    config.install_signal_handlers = 1;
    config.site_import = 1;
    config.configure_c_stdio = 0;
    check_status(PyConfig_SetBytesString(&config, &config.program_name, WRK_PYTHON_EXE),
                 "python config");
    check_status(PyConfig_SetBytesString(&config, &config.executable, WRK_PYTHON_EXE),
                 "python config");
    check_status(PyConfig_SetBytesString(&config, &config.home, WRK_PYTHON_HOME), "python config");
    char *argv[] = {(char *)""};
    check_status(PyConfig_SetBytesArgv(&config, 1, argv), "python config");
    PyStatus st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    check_status(st, "python initialisation");
}

/* Python-side set-up: output capture, helper module, __main__ as the
 * namespace of runs, and '' on sys.path so modules in the working directory
 * import as in an interactive interpreter. */
static void init_session(void)
{
    if (wrk_output_install() < 0 || wrk_print_install() < 0 || wrk_py_init() < 0 ||
        wrk_display_init() < 0 || wrk_ipy_init() < 0 || wrk_mpmain_init() < 0 ||
        wrk_py_install_hooks(wrk_display_patch_module) < 0 || wrk_query_init() < 0 ||
        wrk_snap_init() < 0)
        goto fail;
    PyObject *main_mod = PyImport_AddModule("__main__"); /* borrowed */
    if (!main_mod)
        goto fail;
    wrk_run_init(PyModule_GetDict(main_mod));
    PyObject *path = PySys_GetObject("path"); /* borrowed */
    PyObject *empty = PyUnicode_FromString("");
    if (!path || !PyList_Check(path) || !empty || PyList_Insert(path, 0, empty) < 0)
        goto fail;
    Py_DECREF(empty);
    return;
fail:
    wrk_log("python session set-up failed:");
    PyErr_Print(); /* lands in the captured (discarded) stderr; rarely useful */
    _exit(1);
}

static void send_ready(void)
{
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_put_map(&b, 2);
    proto_put_str(&b, "t");
    proto_put_str(&b, "ready");
    proto_put_str(&b, "pid");
    proto_put_uint(&b, (uint64_t)getpid());
    proto_frame_end(&b, start);
    /* The output memory goes with it: the supervisor recovers unsent
     * output from it if this worker dies. */
    wrk_chan_send_fd(&b, wrk_output_memfd());
    proto_buf_free(&b);
}

/* What the supervisor sent: a run, a fork (ctx.fork), a query, a snapshot
 * or restore, or `exit` (the context ends on purpose). */
typedef enum frame_kind {
    FRAME_RUN,
    FRAME_FORK,
    FRAME_QUERY,
    FRAME_SNAP,
    FRAME_EXIT,
    FRAME_BIND
} frame_kind;

/* Decodes a `snapshot` or `restore` frame into s and takes the file's
 * descriptor that came with it; a malformed one is a broken supervisor:
 * exit(2). */
static void parse_snap(const proto_val *msg, wrk_snap_req *s)
{
    static const proto_field fields[] = {
        {"max_bytes", PF_UINT, false, 0},
        {"execution_count", PF_UINT, false, 0},
        {"info", PF_BIN, false, 0},
    };
    proto_error err;
    int fd = -1;
    if (proto_check(msg, fields, sizeof fields / sizeof fields[0], &err) < 0 ||
        wrk_chan_take_fds(&fd, 1) != 1) {
        wrk_log("bad snapshot frame");
        _exit(2);
    }
    memset(s, 0, sizeof *s);
    s->restore = proto_str_eq(proto_map_get(msg, "t"), "restore");
    s->fd = fd;
    const proto_val *v = proto_map_get(msg, "max_bytes");
    s->max_bytes = v ? v->as.u : 0;
    v = proto_map_get(msg, "execution_count");
    s->execution_count = v ? v->as.u : 0;
    v = proto_map_get(msg, "info");
    if (v) {
        s->info = v->as.s;
        s->info_len = v->n;
    }
}

/* Decodes a `query` frame into q (pointing into the frame); a malformed one
 * is a broken supervisor: exit(2). */
static void parse_query(const proto_val *msg, wrk_query_req *q)
{
    static const char *const ops[] = {
        [WRK_QUERY_COMPLETE] = "complete",
        [WRK_QUERY_INSPECT] = "inspect",
        [WRK_QUERY_IS_COMPLETE] = "is_complete",
    };
    static const proto_field fields[] = {
        {"op", PF_STR, true, 32},
        {"cursor", PF_UINT, true, 0},
        {"detail_level", PF_UINT, true, 0},
    };
    proto_error err;
    const proto_val *code = proto_map_get(msg, "code");
    if (!code || code->kind != PROTO_STR ||
        proto_check(msg, fields, sizeof fields / sizeof fields[0], &err) < 0) {
        wrk_log("bad query frame");
        _exit(2);
    }
    const proto_val *op = proto_map_get(msg, "op");
    size_t i = 0;
    while (i < sizeof ops / sizeof ops[0] && !proto_str_eq(op, ops[i]))
        i++;
    if (i == sizeof ops / sizeof ops[0]) {
        wrk_log("unknown query op");
        _exit(2);
    }
    q->op = (wrk_query_op)i;
    q->code = code->as.s;
    q->code_len = code->n;
    q->cursor = proto_map_get(msg, "cursor")->as.u;
    q->detail_level = proto_map_get(msg, "detail_level")->as.u;
}

/* Decodes a frame: a `run` into req, a `query` into q (both pointing into
 * the frame), a `fork` or `bind` left for wrk_zygote. Anything else is a broken
 * supervisor: exit(2), it kills and reports the context anyway. */
static frame_kind parse_frame(const uint8_t *body, size_t len, proto_doc *doc, wrk_run_req *req,
                              wrk_query_req *q, wrk_snap_req *snap)
{
    proto_error err;
    if (proto_decode(doc, body, len, &err) < 0) {
        wrk_log("undecodable frame from the supervisor: %s", err.msg);
        _exit(2);
    }
    const proto_val *msg = &doc->nodes[0];
    /* Every request carries the supervisor's run id (absent: 0). */
    const proto_val *id = proto_map_get(msg, "run_id");
    wrk_run_set_id(id && id->kind == PROTO_UINT ? id->as.u : 0);
    const proto_val *t = proto_map_get(msg, "t");
    if (proto_str_eq(t, "fork"))
        return FRAME_FORK;
    if (proto_str_eq(t, "exit"))
        return FRAME_EXIT;
    if (proto_str_eq(t, "bind"))
        return FRAME_BIND;
    if (proto_str_eq(t, "query")) {
        parse_query(msg, q);
        return FRAME_QUERY;
    }
    if (proto_str_eq(t, "snapshot") || proto_str_eq(t, "restore")) {
        parse_snap(msg, snap);
        return FRAME_SNAP;
    }
    if (!proto_str_eq(t, "run")) {
        wrk_log("unexpected frame from the supervisor");
        _exit(2);
    }
    static const proto_field fields[] = {
        {"execution_count", PF_UINT, true, 0}, {"silent", PF_BOOL | PF_NIL, false, 0},
        {"env", PF_STRMAP | PF_NIL, false, 0}, {"argv", PF_ARRAY | PF_NIL, false, 0},
        {"file", PF_STR | PF_NIL, false, 0},   {"syntax", PF_STR | PF_NIL, false, 16},
    };
    /* code may legitimately hold NUL bytes (Python reports them), which the
     * generic str check refuses: check it separately. */
    const proto_val *code = proto_map_get(msg, "code");
    if (!code || code->kind != PROTO_STR ||
        proto_check(msg, fields, sizeof fields / sizeof fields[0], &err) < 0) {
        wrk_log("bad run frame: %s", code && code->kind == PROTO_STR ? err.msg : "code");
        _exit(2);
    }
    const proto_val *silent = proto_map_get(msg, "silent");
    const proto_val *stdin_ok = proto_map_get(msg, "allow_stdin");
    const proto_val *env = proto_map_get(msg, "env");
    req->code = code->as.s;
    req->code_len = code->n;
    req->execution_count = proto_map_get(msg, "execution_count")->as.u;
    req->silent = silent && silent->kind == PROTO_BOOL && silent->as.b;
    req->allow_stdin = stdin_ok && stdin_ok->kind == PROTO_BOOL && stdin_ok->as.b;
    const proto_val *arts = proto_map_get(msg, "artifacts");
    req->artifacts = arts && arts->kind == PROTO_BOOL && arts->as.b;
    req->env = env && env->kind == PROTO_MAP ? env : NULL;
    const proto_val *argv = proto_map_get(msg, "argv");
    const proto_val *file = proto_map_get(msg, "file");
    req->argv = argv && argv->kind == PROTO_ARRAY ? argv : NULL;
    req->file = file && file->kind == PROTO_STR ? file : NULL;
    const proto_val *syntax = proto_map_get(msg, "syntax");
    req->syntax = proto_str_eq(syntax, "ipython")  ? WRK_SYNTAX_IPYTHON
                  : proto_str_eq(syntax, "python") ? WRK_SYNTAX_PYTHON
                                                   : WRK_SYNTAX_DEFAULT;
    return FRAME_RUN;
}

/* A crash signal must not lose output the flusher has taken from a pipe but
 * not yet sent: wait for that send, then die of the same signal (the
 * supervisor reports it as the cause). */
static void on_crash(int sig)
{
    wrk_chan_quiesce(500);
    raise(sig); /* SA_RESETHAND made this the default action */
}

static void install_crash_handlers(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

/* `exit`: the context is deleted or restarted, or the daemon stops. The
 * atexit handlers run as when an interpreter exits, as a silent run whose
 * frames go out as usual (sup_linger.c logs them; the supervisor kills the
 * worker if they take longer than its kill grace); then the worker and what
 * it started end. */
static _Noreturn void exit_on_request(void)
{
    static const char code[] = "__import__('atexit')._run_exitfuncs()";
    wrk_run_req req = {.code = code, .code_len = sizeof code - 1, .silent = true};
    if (!sbx_static()) {
        sbx_run_begin(); /* the handlers are user code */
        wrk_run_execute(&req);
    }
    wrk_chan_gone(0);
}

/* Sends `ready`, then serves `run`, `query` and `fork` frames one at a time. */
static _Noreturn void serve_channel(void)
{
    wrk_site_init(); /* its package directory on sys.path, before sbx_init reads it */
    sbx_init();      /* the context's tier and policy, before any user code */
    if (sbx_static())
        wrk_static_init(sbx_policy_current()->spec.imports.v,
                        sbx_policy_current()->spec.imports.set);
    send_ready();
    proto_buf in;
    proto_buf_init(&in);
    for (;;) {
        const uint8_t *body;
        size_t len, consumed;
        wrk_chan_recv(&in, &body, &len, &consumed);
        if (wrk_input_is_stale_reply(body, len)) { /* crossed an interrupted input() */
            proto_buf_consume(&in, consumed);
            continue;
        }
        proto_doc doc;
        wrk_run_req req;
        wrk_query_req q;
        wrk_snap_req snap;
        frame_kind kind = parse_frame(body, len, &doc, &req, &q, &snap);
        if (kind == FRAME_EXIT)
            exit_on_request();
        if (kind == FRAME_BIND) {
            wrk_zygote_bind(&doc.nodes[0]);
            proto_doc_free(&doc);
            proto_buf_consume(&in, consumed);
            continue;
        }
        if (kind == FRAME_FORK) {
            bool copy = wrk_zygote_fork_live(&doc.nodes[0]);
            proto_doc_free(&doc);
            if (copy) {
                /* This is the copy: a new channel, which starts empty. */
                in.len = 0;
                send_ready();
                continue;
            }
        } else if (kind == FRAME_QUERY) {
            sbx_run_begin(); /* a query may run user code (properties, __dir__) */
            wrk_run_query(&q);
            sbx_run_end();
            proto_doc_free(&doc);
        } else if (kind == FRAME_SNAP) {
            sbx_run_begin(); /* unpickling runs the snapshot's code: untrusted */
            wrk_run_snap(&snap);
            sbx_run_end();
            close(snap.fd);
            proto_doc_free(&doc);
        } else if (sbx_static()) {
            wrk_static_execute(&req);
            proto_doc_free(&doc);
        } else {
            sbx_run_begin();
            wrk_run_execute(&req);
            sbx_run_end();
            proto_doc_free(&doc);
        }
        proto_buf_consume(&in, consumed);
    }
}

/* The sandbox's diagnostics go where the worker's own go (wrk_log.c). */
static void sbx_log_line(const char *msg)
{
    wrk_log("%s", msg);
}

static const sbx_host sandbox_host = {sbx_log_line, wrk_log_stat_range};

int main(int argc, char **argv)
{
    pid_t supervisor = getppid();
    sbx_host_set(&sandbox_host);
    if (argc > 1 && strcmp(argv[1], "--zygote") == 0) {
        wrk_zygote_main(argc, argv); /* returns in a worker it forked */
        serve_channel();
    }
    bool supervised = argc > 1 && strcmp(argv[1], "--out-fds=4,5") == 0;

    /* SIGINT stays blocked in the main thread except during a run; every
     * thread created from here on inherits the block. */
    sigset_t intr;
    sigemptyset(&intr);
    sigaddset(&intr, SIGINT);
    pthread_sigmask(SIG_BLOCK, &intr, NULL);
    signal(SIGINT, SIG_DFL); /* CPython installs its handler only over SIG_DFL */
    /* The parent now is the supervisor: its fork armed PR_SET_PDEATHSIG
     * (SIGKILL, kept across exec) and checked its parent right after. */
    watch_parent(supervisor);

    wrk_chan_init(CHAN_FD);
    int err_fd = fcntl(2, F_DUPFD_CLOEXEC, CHAN_FD + 1);
    if (err_fd >= 0) {
        wrk_log_init(err_fd);
        mem_set_fatal_fd(err_fd);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    wrk_output_init(supervised);
    install_crash_handlers();

    init_python();
    init_session();
    /* Idle time runs without the GIL so user threads keep running; runs
     * take it back with PyGILState_Ensure. */
    (void)PyEval_SaveThread();
    serve_channel();
}

/* For wrk_zygote.c: the steps a zygote and the workers it forks share with
 * a worker started by exec. */
void wrk_main_init_python(void)
{
    init_python();
}

void wrk_main_init_session(void)
{
    init_session();
}

void wrk_main_install_crash_handlers(void)
{
    install_crash_handlers();
}

void wrk_main_watch_parent(pid_t parent)
{
    watch_parent(parent);
}
