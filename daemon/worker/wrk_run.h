/* wrk_run: executing one `run` request of the supervisor, from `start` to
 * `done` (PROTOCOL.md section 9). */
#ifndef CTXD_WRK_RUN_H
#define CTXD_WRK_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "proto.h"
#include "wrk_ipy.h"
#include "wrk_query.h"
#include "wrk_snap.h"

typedef struct wrk_run_req {
    const char *code; /* UTF-8, not NUL-terminated */
    size_t code_len;
    uint64_t execution_count;
    bool silent;
    bool allow_stdin;      /* input() may ask the client */
    bool artifacts;        /* scan the cwd before and after for done.artifacts */
    const proto_val *env;  /* map str -> str, or NULL */
    const proto_val *argv; /* array of str (sys.argv of a script), or NULL */
    const proto_val *file; /* str: the script's path (__file__), or NULL */
    wrk_syntax syntax;     /* python, ipython, or the context's default */
} wrk_run_req;

/* GIL held: remembers the namespace runs execute in (__main__'s dict). */
void wrk_run_init(PyObject *globals);
/* GIL not held (it is taken inside). Sends start, output, result/error and
 * done. Exits the process with status 2 when the request is malformed. */
void wrk_run_execute(const wrk_run_req *req);
/* GIL not held. A query (complete, inspect, is_complete): `start`, then
 * `answer`. SIGINT is open in between, so an interrupt or the timeout
 * stops user code the query ran (the answer is then empty). */
void wrk_run_query(const wrk_query_req *req);
/* GIL not held. A snapshot or restore: `start`, then `answer`; SIGINT is
 * open in between (an interrupted one answers that it was). */
void wrk_run_snap(const wrk_snap_req *req);

/* The run id the supervisor chose for the request being served (0 when it
 * sent none); the frames below and the fork answer carry it. */
void wrk_run_set_id(uint64_t id);
uint64_t wrk_run_id(void);

/* Frames every run and the static tier's analysis share (PROTOCOL.md
 * section 9). */
void wrk_run_put_start(proto_buf *b);
/* arts: the encoded `artifacts` array (wrk_display.c); NULL or empty: none. */
void wrk_run_put_done(proto_buf *b, const char *status, double cpu, const proto_buf *arts);
/* The same with done.exit_code when exit_code >= 0 (the run ended with
 * SystemExit; the status a script would have exited with). */
void wrk_run_put_done_exit(proto_buf *b, const char *status, double cpu, const proto_buf *arts,
                           int exit_code);
/* Appends a Python str as msgpack str: UTF-8 with backslashreplace (str()
 * of an exception may hold lone surrogates), at most max bytes, cut at a
 * character boundary; "<unrepresentable>" for a non-str. */
void wrk_run_put_pystr(proto_buf *b, PyObject *s, size_t max);

#endif
