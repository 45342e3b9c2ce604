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
#include <unistd.h>

#include "mem.h"
#include "proto.h"
#include "sbx.h"
#include "wrk_boot.h"
#include "wrk_chan.h"
#include "wrk_input.h"
#include "wrk_log.h"
#include "wrk_output.h"
#include "wrk_query.h"
#include "wrk_snap.h"
#include "wrk_run.h"
#include "wrk_site.h"
#include "wrk_static.h"
#include "wrk_zygote.h"

#define CHAN_FD 3

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

/* A frame's code (a str that may hold NUL bytes, which Python reports and
 * the generic str check refuses); exits on a frame without one. */
static const proto_val *frame_code(const proto_val *msg, const char *type)
{
    const proto_val *code = proto_map_get(msg, "code");
    if (!code || code->kind != PROTO_STR) {
        wrk_log("bad %s frame: code", type);
        _exit(2);
    }
    return code;
}

/* `run`: the cell, executed (or analysed, in the static tier) with its
 * frames sent as it goes. */
static bool on_run(const proto_val *msg)
{
    const proto_val *code = frame_code(msg, "run");
    const proto_val *silent = proto_map_get(msg, "silent");
    const proto_val *stdin_ok = proto_map_get(msg, "allow_stdin");
    const proto_val *env = proto_map_get(msg, "env");
    const proto_val *arts = proto_map_get(msg, "artifacts");
    const proto_val *argv = proto_map_get(msg, "argv");
    const proto_val *file = proto_map_get(msg, "file");
    const proto_val *syntax = proto_map_get(msg, "syntax");
    wrk_run_req req = {
        .code = code->as.s,
        .code_len = code->n,
        .execution_count = proto_map_get(msg, "execution_count")->as.u,
        .silent = silent && silent->kind == PROTO_BOOL && silent->as.b,
        .allow_stdin = stdin_ok && stdin_ok->kind == PROTO_BOOL && stdin_ok->as.b,
        .artifacts = arts && arts->kind == PROTO_BOOL && arts->as.b,
        .env = env && env->kind == PROTO_MAP ? env : NULL,
        .argv = argv && argv->kind == PROTO_ARRAY ? argv : NULL,
        .file = file && file->kind == PROTO_STR ? file : NULL,
        .syntax = proto_str_eq(syntax, "ipython")  ? WRK_SYNTAX_IPYTHON
                  : proto_str_eq(syntax, "python") ? WRK_SYNTAX_PYTHON
                                                   : WRK_SYNTAX_DEFAULT,
    };
    if (sbx_static()) {
        wrk_static_execute(&req);
    } else {
        sbx_run_begin();
        wrk_run_execute(&req);
        sbx_run_end();
    }
    return false;
}

/* `query`: completion, inspection or is_complete; it may run user code
 * (properties, __dir__), so it runs as a run does. */
static bool on_query(const proto_val *msg)
{
    static const char *const ops[] = {
        [WRK_QUERY_COMPLETE] = "complete",
        [WRK_QUERY_INSPECT] = "inspect",
        [WRK_QUERY_IS_COMPLETE] = "is_complete",
    };
    const proto_val *code = frame_code(msg, "query");
    const proto_val *op = proto_map_get(msg, "op");
    size_t i = 0;
    while (i < sizeof ops / sizeof ops[0] && !proto_str_eq(op, ops[i]))
        i++;
    if (i == sizeof ops / sizeof ops[0]) {
        wrk_log("unknown query op");
        _exit(2);
    }
    wrk_query_req q = {
        .op = (wrk_query_op)i,
        .code = code->as.s,
        .code_len = code->n,
        .cursor = proto_map_get(msg, "cursor")->as.u,
        .detail_level = proto_map_get(msg, "detail_level")->as.u,
    };
    sbx_run_begin();
    wrk_run_query(&q);
    sbx_run_end();
    return false;
}

/* `snapshot` and `restore`: the session to or from the file whose
 * descriptor came with the frame; unpickling runs the snapshot's code, so
 * it runs as a run does. */
static bool on_snap(const proto_val *msg)
{
    int fd = -1;
    if (wrk_chan_take_fds(&fd, 1) != 1) {
        wrk_log("bad snapshot frame: no descriptor");
        _exit(2);
    }
    wrk_snap_req s = {.restore = proto_str_eq(proto_map_get(msg, "t"), "restore"), .fd = fd};
    const proto_val *v = proto_map_get(msg, "max_bytes");
    s.max_bytes = v ? v->as.u : 0;
    v = proto_map_get(msg, "execution_count");
    s.execution_count = v ? v->as.u : 0;
    v = proto_map_get(msg, "info");
    if (v) {
        s.info = v->as.s;
        s.info_len = v->n;
    }
    sbx_run_begin();
    wrk_run_snap(&s);
    sbx_run_end();
    close(fd);
    return false;
}

/* `fork` (ctx.fork): true in the copy, which has a new channel. */
static bool on_fork(const proto_val *msg)
{
    return wrk_zygote_fork_live(msg);
}

/* `bind`: a spare worker taken by its context. */
static bool on_bind(const proto_val *msg)
{
    wrk_zygote_bind(msg);
    return false;
}

/* `exit`: the context is deleted or restarted, or the daemon stops. The
 * atexit handlers run as a silent run whose frames go out as usual (the
 * supervisor kills the worker if they take too long); then the worker and
 * what it started end. */
static bool on_exit_request(const proto_val *msg)
{
    (void)msg;
    static const char code[] = "__import__('atexit')._run_exitfuncs()";
    wrk_run_req req = {.code = code, .code_len = sizeof code - 1, .silent = true};
    if (!sbx_static()) {
        sbx_run_begin(); /* the handlers are user code */
        wrk_run_execute(&req);
    }
    wrk_chan_gone(0);
}

static const proto_field run_fields[] = {
    {"execution_count", PF_UINT, true, 0}, {"silent", PF_BOOL | PF_NIL, false, 0},
    {"env", PF_STRMAP | PF_NIL, false, 0}, {"argv", PF_ARRAY | PF_NIL, false, 0},
    {"file", PF_STR | PF_NIL, false, 0},   {"syntax", PF_STR | PF_NIL, false, 16},
};
static const proto_field query_fields[] = {
    {"op", PF_STR, true, 32},
    {"cursor", PF_UINT, true, 0},
    {"detail_level", PF_UINT, true, 0},
};
static const proto_field snap_fields[] = {
    {"max_bytes", PF_UINT, false, 0},
    {"execution_count", PF_UINT, false, 0},
    {"info", PF_BIN, false, 0},
};
static const proto_field bind_fields[] = {
    {"name", PF_STR, true, PROTO_MAX_NAME},
    {"cwd", PF_STR, true, 4095},
};

/* A frame the supervisor sends: its type, the fields it must carry (checked
 * before the handler sees it) and the handler, which returns true in a new
 * worker (a fork's copy, whose channel starts empty). */
typedef struct frame_kind {
    const char *type;
    const proto_field *fields;
    size_t nfields;
    bool (*handle)(const proto_val *msg);
} frame_kind;

#define FIELDS(a) a, sizeof a / sizeof a[0]
static const frame_kind frame_kinds[] = {
    {"run", FIELDS(run_fields), on_run},
    {"query", FIELDS(query_fields), on_query},
    {"snapshot", FIELDS(snap_fields), on_snap},
    {"restore", FIELDS(snap_fields), on_snap},
    {"fork", NULL, 0, on_fork},
    {"bind", FIELDS(bind_fields), on_bind},
    {"exit", NULL, 0, on_exit_request},
};

/* Decodes one frame and hands it to its kind's handler; true in a fork's
 * copy. A frame that cannot be decoded, of an unknown type or missing its
 * fields is a broken supervisor: exit(2), it kills and reports the context
 * anyway. */
static bool dispatch(const uint8_t *body, size_t len)
{
    proto_doc doc;
    proto_error err;
    if (proto_decode(&doc, body, len, &err) < 0) {
        wrk_log("undecodable frame from the supervisor: %s", err.msg);
        _exit(2);
    }
    const proto_val *msg = &doc.nodes[0];
    /* Every request carries the supervisor's run id (absent: 0). */
    const proto_val *id = proto_map_get(msg, "run_id");
    wrk_run_set_id(id && id->kind == PROTO_UINT ? id->as.u : 0);
    const proto_val *t = proto_map_get(msg, "t");
    const frame_kind *k = NULL;
    for (size_t i = 0; i < sizeof frame_kinds / sizeof frame_kinds[0] && !k; i++)
        if (proto_str_eq(t, frame_kinds[i].type))
            k = &frame_kinds[i];
    if (!k) {
        wrk_log("unexpected frame from the supervisor");
        _exit(2);
    }
    if (k->nfields && proto_check(msg, k->fields, k->nfields, &err) < 0) {
        wrk_log("bad %s frame: %s", k->type, err.msg);
        _exit(2);
    }
    bool copy = k->handle(msg);
    proto_doc_free(&doc);
    return copy;
}

/* Sends `ready`, then serves the supervisor's frames one at a time. */
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
        if (dispatch(body, len)) {
            in.len = 0; /* the fork's copy: a new channel, which starts empty */
            send_ready();
            continue;
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
    wrk_boot_watch_parent(supervisor);

    wrk_chan_init(CHAN_FD);
    int err_fd = fcntl(2, F_DUPFD_CLOEXEC, CHAN_FD + 1);
    if (err_fd >= 0) {
        wrk_log_init(err_fd);
        mem_set_fatal_fd(err_fd);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    wrk_output_init(supervised);
    wrk_boot_crash_handlers();

    wrk_boot_python();
    wrk_boot_session();
    /* Idle time runs without the GIL so user threads keep running; runs
     * take it back with PyGILState_Ensure. */
    (void)PyEval_SaveThread();
    serve_channel();
}
