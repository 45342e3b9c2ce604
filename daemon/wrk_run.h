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
#include "wrk_query.h"

typedef struct wrk_run_req {
    const char *code; /* UTF-8, not NUL-terminated */
    size_t code_len;
    uint64_t execution_count;
    bool silent;
    bool allow_stdin;     /* input() may ask the client */
    bool artifacts;       /* scan the cwd before and after for done.artifacts */
    const proto_val *env; /* map str -> str, or NULL */
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

#endif
