/* wrk_snap: the `snapshot` and `restore` frames (ctx.snapshot, ctx.restore,
 * ctx.create from_snapshot; PROTOCOL.md section 9): the context's Python
 * state written to, or read from, the file whose descriptor came with the
 * frame. The Python half is wrk_snap.py, embedded by the build. */
#ifndef CTXD_WRK_SNAP_H
#define CTXD_WRK_SNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "proto.h"

typedef struct wrk_snap_req {
    bool restore;             /* false: write a snapshot */
    int fd;                   /* a pipe the supervisor copies into the file; or the file */
    uint64_t max_bytes;       /* a snapshot past this is refused with its size; a
                               * restore's: the length of the worker's part of the file */
    uint64_t execution_count; /* recorded in the snapshot */
    const char *info;         /* msgpack of the context's INFO, recorded */
    size_t info_len;
} wrk_snap_req;

/* GIL held: loads the helper. -1 with a Python error set. */
int wrk_snap_init(void);
/* GIL held: does the request against globals; the answer dict (a new
 * reference), or NULL with a Python error set. */
PyObject *wrk_snap_do(const wrk_snap_req *req, PyObject *globals);
/* GIL held: the `answer` frame of run run_id (NULL or not a dict: a
 * failure without detail). */
void wrk_snap_put_answer(proto_buf *b, uint64_t run_id, PyObject *answer);

#endif
