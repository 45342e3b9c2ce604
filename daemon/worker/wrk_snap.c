/* wrk_snap: snapshots of the context's state (wrk_snap.h). The C half only
 * hands the helper the descriptor and the globals and frames its answer:
 * what is saved and how is wrk_snap.py's. */
#include "wrk_snap.h"

#include "wrk_display.h"
#include "wrk_py.h"
#include "wrk_snap_src.h"

/* An answer is small: the unsaved names (capped by the helper's caller,
 * the budget) and a few numbers. */
#define ANSWER_BUDGET 20000

static PyObject *snapshot_fn, *restore_fn;

int wrk_snap_init(void)
{
    PyObject *mod = wrk_py_private_module("_ctxd_snap", snap_src, "<ctxd-worker>");
    if (!mod)
        return -1;
    snapshot_fn = PyDict_GetItemString(PyModule_GetDict(mod), "snapshot");
    restore_fn = PyDict_GetItemString(PyModule_GetDict(mod), "restore");
    Py_XINCREF(snapshot_fn);
    Py_XINCREF(restore_fn);
    Py_DECREF(mod);
    if (!snapshot_fn || !restore_fn) {
        PyErr_SetString(PyExc_RuntimeError, "snapshot helper missing");
        return -1;
    }
    return 0;
}

PyObject *wrk_snap_do(const wrk_snap_req *req, PyObject *globals)
{
    if (req->restore)
        return PyObject_CallFunction(restore_fn, "iOK", req->fd, globals,
                                     (unsigned long long)req->max_bytes);
    PyObject *meta =
        Py_BuildValue("{s:K,s:y#}", "execution_count", (unsigned long long)req->execution_count,
                      "info", req->info, (Py_ssize_t)req->info_len);
    if (!meta)
        return NULL;
    PyObject *r = PyObject_CallFunction(snapshot_fn, "iOOK", req->fd, globals, meta,
                                        (unsigned long long)req->max_bytes);
    Py_DECREF(meta);
    return r;
}

void wrk_snap_put_answer(proto_buf *b, uint64_t run_id, PyObject *answer)
{
    size_t start = proto_frame_begin(b);
    proto_put_map(b, 3);
    proto_put_str(b, "t");
    proto_put_str(b, "answer");
    proto_put_str(b, "run_id");
    proto_put_uint(b, run_id);
    proto_put_str(b, "data");
    if (answer && PyDict_Check(answer)) {
        wrk_display_put_pyobj(b, answer, ANSWER_BUDGET);
    } else {
        proto_put_map(b, 3);
        proto_put_str(b, "ok");
        proto_put_bool(b, false);
        proto_put_str(b, "code");
        proto_put_str(b, "internal");
        proto_put_str(b, "message");
        proto_put_str(b, "the snapshot helper failed");
    }
    proto_frame_end(b, start);
}
