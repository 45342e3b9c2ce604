/* wrk_query: the `query` frame (complete, inspect, is_complete), answered
 * with `answer {data}` from the context's globals (PROTOCOL.md section 9). */
#ifndef CTXD_WRK_QUERY_H
#define CTXD_WRK_QUERY_H

#include <stddef.h>
#include <stdint.h>

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "proto.h"

typedef enum wrk_query_op {
    WRK_QUERY_COMPLETE,
    WRK_QUERY_INSPECT,
    WRK_QUERY_IS_COMPLETE,
} wrk_query_op;

typedef struct wrk_query_req {
    wrk_query_op op;
    const char *code; /* UTF-8, not NUL-terminated */
    size_t code_len;
    uint64_t cursor; /* in code points, <= the code's length (checked by the supervisor) */
    uint64_t detail_level;
} wrk_query_req;

/* GIL held: loads the helper. -1 with a Python error set. */
int wrk_query_init(void);
/* GIL held: the answer dict (a new reference), or NULL with a Python
 * error set (the helper itself answers every failure of the query). */
PyObject *wrk_query_ask(const wrk_query_req *req, PyObject *globals);
/* GIL held: the `answer` frame of run run_id for answer (NULL or not a
 * dict: the op's empty answer). The run id comes from the caller (wrk_run),
 * so this helper stays below the run layer. */
void wrk_query_put_answer(proto_buf *b, uint64_t run_id, const wrk_query_req *req,
                          PyObject *answer);

#endif
