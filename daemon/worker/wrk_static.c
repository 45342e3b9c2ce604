/* wrk_static: the `static` tier's run. Code is analysed (parsed, its
 * imports listed and checked against the policy's allowed_imports), never
 * executed: each run is start, one `result` with the analysis (text/plain
 * and application/vnd.ctxd.analysis+json), an `error` when the code has a
 * syntax error or a disallowed import, then done. The sandbox (sbx_init)
 * only tells that the tier is static and hands over the policy's list. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "wrk_static.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "proto.h"
#include "sbx.h"
#include "wrk_log.h"
#include "wrk_output.h"

static const char static_src[] =
    "import ast, json\n"
    "\n"
    "def _allowed(name, allowed):\n"
    "    parts = name.split('.')\n"
    "    return any('.'.join(parts[:i]) in allowed for i in range(1, len(parts) + 1))\n"
    "\n"
    "def _dyn_name(node):\n"
    "    f = node.func\n"
    "    dyn = (isinstance(f, ast.Name) and f.id == '__import__') or (\n"
    "        isinstance(f, ast.Attribute) and f.attr in ('import_module', '__import__'))\n"
    "    if not dyn:\n"
    "        return None, False\n"
    "    if node.args and isinstance(node.args[0], ast.Constant) and \\\n"
    "            isinstance(node.args[0].value, str):\n"
    "        return node.args[0].value, True\n"
    "    return None, True\n"
    "\n"
    "def analyze(src, allowed):\n"
    "    res = {'syntax_error': None, 'imports': [], 'dynamic_imports': 0, 'disallowed': []}\n"
    "    try:\n"
    "        tree = ast.parse(src, '<cell>')\n"
    "    except SyntaxError as e:\n"
    "        res['syntax_error'] = {'message': e.msg, 'line': e.lineno, 'col': e.offset,\n"
    "                               'end_line': getattr(e, 'end_lineno', None),\n"
    "                               'end_col': getattr(e, 'end_offset', None),\n"
    "                               'text': (e.text or '').rstrip('\\n')}\n"
    "        tree = None\n"
    "    except ValueError as e:\n"
    "        res['syntax_error'] = {'message': str(e), 'line': None, 'col': None,\n"
    "                               'end_line': None, 'end_col': None, 'text': ''}\n"
    "        tree = None\n"
    "    found = []\n"
    "    for node in ast.walk(tree) if tree is not None else ():\n"
    "        if isinstance(node, ast.Import):\n"
    "            found += [a.name for a in node.names]\n"
    "        elif isinstance(node, ast.ImportFrom):\n"
    "            found.append('.' * node.level + (node.module or ''))\n"
    "        elif isinstance(node, ast.Call):\n"
    "            name, dyn = _dyn_name(node)\n"
    "            if name:\n"
    "                found.append(name)\n"
    "            elif dyn:\n"
    "                res['dynamic_imports'] += 1\n"
    "    for n in found:\n"
    "        if n not in res['imports']:\n"
    "            res['imports'].append(n)\n"
    "    if allowed is not None:\n"
    "        allowed = frozenset(allowed)\n"
    "        res['disallowed'] = [n for n in res['imports']\n"
    "                             if not n.startswith('.') and not _allowed(n, allowed)]\n"
    "        if res['dynamic_imports']:\n"
    "            res['disallowed'].append('<dynamic import>')\n"
    "    ename = evalue = None\n"
    "    se = res['syntax_error']\n"
    "    if se:\n"
    "        ename, evalue = 'SyntaxError', '%s (line %s, col %s)' % (se['message'], se['line'], "
    "se['col'])\n"
    "        summary = 'syntax error: ' + evalue\n"
    "    elif res['disallowed']:\n"
    "        ename = 'ImportError'\n"
    "        evalue = 'not allowed by the policy: ' + ', '.join(res['disallowed'])\n"
    "        summary = 'imports ' + ', '.join(res['imports']) + '; ' + evalue\n"
    "    else:\n"
    "        summary = 'syntax ok; imports: ' + (', '.join(res['imports']) or 'none')\n"
    "    summary += '; not executed (static tier)'\n"
    "    res['executed'] = False\n"
    "    return summary, json.dumps(res), ename, evalue\n";

static PyObject *fn_analyze, *static_allowed;

/* Exits the worker (status 1, reason in the daemon's log) as the sandbox
 * does for a policy it cannot apply: ctx.create then fails. */
static _Noreturn void fail(const char *what)
{
    PyErr_Print();
    wrk_log("policy: cannot enforce %s: %s", what, strerror(EINVAL));
    _exit(1);
}

void wrk_static_init(char **imports, bool imports_set)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *mod = PyModule_New("_ctxd_static");
    PyObject *d = mod ? PyModule_GetDict(mod) : NULL;
    PyObject *code = d ? Py_CompileString(static_src, "<ctxd-static>", Py_file_input) : NULL;
    PyObject *r = code && PyDict_SetItemString(d, "__builtins__", PyEval_GetBuiltins()) == 0
                      ? PyEval_EvalCode(code, d, d)
                      : NULL;
    Py_XDECREF(code);
    Py_XDECREF(r);
    fn_analyze = r ? PyDict_GetItemString(d, "analyze") : NULL;
    Py_XINCREF(fn_analyze);
    /* The module stays alive through its function's globals. */
    Py_XDECREF(mod);
    if (!fn_analyze)
        fail("the policy (Python set-up)");
    static_allowed = imports_set ? sbx_py_str_list(imports) : Py_NewRef(Py_None);
    if (!static_allowed)
        fail("allowed_imports");
    PyGILState_Release(gil);
}

/* The analysis of code: a new reference to a tuple (summary str, json str,
 * error ename or None, error evalue or None). */
static PyObject *analyze(const char *code, size_t len)
{
    PyObject *src = PyUnicode_DecodeUTF8(code, (Py_ssize_t)len, "replace");
    if (!src)
        return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(fn_analyze, src, static_allowed, NULL);
    Py_DECREF(src);
    return r;
}

/* The static tier's error frame: the analysis is the whole story, so the
 * traceback is the one line "ename: evalue". */
static void put_static_error(proto_buf *b, PyObject *ename, PyObject *evalue)
{
    size_t start = proto_frame_begin(b);
    proto_put_map(b, 4);
    proto_put_str(b, "t");
    proto_put_str(b, "error");
    proto_put_str(b, "ename");
    wrk_run_put_pystr(b, ename, SIZE_MAX);
    proto_put_str(b, "evalue");
    wrk_run_put_pystr(b, evalue, SIZE_MAX);
    proto_put_str(b, "traceback");
    proto_put_array(b, 1);
    PyObject *line = PyUnicode_FromFormat("%S: %S", ename, evalue);
    wrk_run_put_pystr(b, line, SIZE_MAX);
    Py_XDECREF(line);
    proto_frame_end(b, start);
}

void wrk_static_execute(const wrk_run_req *req)
{
    proto_buf frames;
    proto_buf_init(&frames);
    wrk_run_put_start(&frames);
    wrk_output_begin_run(&frames);
    frames.len = 0;

    const char *status = "ok";
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *a = analyze(req->code, req->code_len);
    if (!a || !PyTuple_Check(a) || PyTuple_GET_SIZE(a) != 4) {
        PyErr_Clear();
        status = "error";
        PyObject *ename = PyUnicode_FromString("RuntimeError");
        PyObject *evalue = PyUnicode_FromString("the static analysis failed");
        put_static_error(&frames, ename, evalue);
        Py_XDECREF(ename);
        Py_XDECREF(evalue);
    } else {
        size_t start = proto_frame_begin(&frames);
        proto_put_map(&frames, 2);
        proto_put_str(&frames, "t");
        proto_put_str(&frames, "result");
        proto_put_str(&frames, "data");
        proto_put_map(&frames, 2);
        proto_put_str(&frames, "text/plain");
        wrk_run_put_pystr(&frames, PyTuple_GET_ITEM(a, 0), SIZE_MAX);
        proto_put_str(&frames, "application/vnd.ctxd.analysis+json");
        wrk_run_put_pystr(&frames, PyTuple_GET_ITEM(a, 1), SIZE_MAX);
        proto_frame_end(&frames, start);
        if (PyTuple_GET_ITEM(a, 2) != Py_None) {
            status = "error";
            put_static_error(&frames, PyTuple_GET_ITEM(a, 2), PyTuple_GET_ITEM(a, 3));
        }
    }
    Py_XDECREF(a);
    PyGILState_Release(gil);
    wrk_run_put_done(&frames, status, 0, NULL);
    wrk_output_end_run(&frames);
    proto_buf_free(&frames);
}
