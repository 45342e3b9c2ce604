/* wrk_query: complete, inspect and is_complete against the context's live
 * globals (PROTOCOL.md sections 5 and 9). The Python half is a private
 * module (never in sys.modules): rlcompleter for names and attributes,
 * pkgutil for module names (completion never imports anything), inspect
 * for signatures, docstrings and source, and compile() with
 * PyCF_ALLOW_INCOMPLETE_INPUT for completeness. Every query answers: an
 * exception (KeyboardInterrupt from an interrupt or the timeout included)
 * gives the empty answer. */
#include "wrk_query.h"

#include "wrk_display.h"
#include "wrk_py.h"

/* Matches and text are capped in Python; the item budget bounds the frame. */
#define ANSWER_BUDGET 20000

static const char query_src[] =
    "import builtins, re, sys\n"
    "\n"
    "# inspect, pkgutil and rlcompleter load at the first query, so a new\n"
    "# worker pays nothing for them.\n"
    "\n"
    "_MAX_MATCHES = 5000\n"
    "_MAX_TEXT = 1 << 20\n"
    "_TOKEN = re.compile(r'[\\w.]*\\Z')\n"
    "_WORD = re.compile(r'\\w*')\n"
    "_IMPORT = re.compile(r'\\s*(?:from\\s+([\\w.]+)\\s+import\\s+(?:[\\w.]+\\s*,\\s*)*|'\n"
    "                     r'(?:import|from)\\s+(?:[\\w.]+\\s*,\\s*)*)([\\w.]*)\\Z')\n"
    "_EMPTY = {\n"
    "    'complete': lambda c: {'matches': [], 'cursor_start': c, 'cursor_end': c, 'metadata': "
    "{}},\n"
    "    'inspect': lambda c: {'found': False, 'data': {}, 'metadata': {}},\n"
    "    'is_complete': lambda c: {'status': 'unknown', 'indent': ''},\n"
    "}\n"
    "\n"
    "def query(op, code, cursor, detail, g):\n"
    "    try:\n"
    "        if op == 'complete':\n"
    "            return complete(code, cursor, g)\n"
    "        if op == 'inspect':\n"
    "            return inspect_at(code, cursor, detail, g)\n"
    "        return is_complete(code)\n"
    "    except BaseException:\n"
    "        return _EMPTY[op](cursor)\n"
    "\n"
    "def _bare(m):\n"
    "    return m[:-1] if m.endswith(('(', ' ', ':')) else m\n"
    "\n"
    "def _completer(g):\n"
    "    # rlcompleter would import readline, which may touch the terminal and\n"
    "    # binds a completer: it is kept out unless the code imported it.\n"
    "    if 'rlcompleter' not in sys.modules and 'readline' not in sys.modules:\n"
    "        sys.modules['readline'] = None\n"
    "        try:\n"
    "            import rlcompleter\n"
    "        finally:\n"
    "            del sys.modules['readline']\n"
    "    import rlcompleter\n"
    "    return rlcompleter.Completer(g)\n"
    "\n"
    "def _modules(prefix, package):\n"
    "    import pkgutil\n"
    "    if package:\n"
    "        paths = getattr(sys.modules.get(package), '__path__', None)\n"
    "        if not paths:\n"
    "            return []\n"
    "        names = [package + '.' + m.name for m in pkgutil.iter_modules(paths)]\n"
    "    else:\n"
    "        names = list(sys.builtin_module_names) + [m.name for m in pkgutil.iter_modules()]\n"
    "    return [n for n in names if n.startswith(prefix)]\n"
    "\n"
    "def complete(code, cursor, g):\n"
    "    line = code[code.rfind('\\n', 0, cursor) + 1:cursor]\n"
    "    token = _TOKEN.search(line).group()\n"
    "    start = cursor - len(token)\n"
    "    imp = _IMPORT.match(line)\n"
    "    if imp and imp.group(1):\n"
    "        mod = imp.group(1)\n"
    "        names = _modules(token, mod)\n"
    "        names = [n[len(mod) + 1:] for n in names]\n"
    "        m = sys.modules.get(mod)\n"
    "        if m is not None:\n"
    "            names += [a for a in dir(m) if a.startswith(token) and not a.startswith('_')]\n"
    "    elif imp:\n"
    "        pkg, _, _ = token.rpartition('.')\n"
    "        names = _modules(token, pkg)\n"
    "    else:\n"
    "        c = _completer(g)\n"
    "        names = [_bare(m) for m in (c.attr_matches(token) if '.' in token\n"
    "                                     else c.global_matches(token))]\n"
    "        if not token:\n"
    "            names = [n for n in names if not n.startswith('_')]\n"
    "    names = sorted(set(names), key=lambda n: (n.lower(), n))[:_MAX_MATCHES]\n"
    "    return {'matches': names, 'cursor_start': start, 'cursor_end': cursor, 'metadata': {}}\n"
    "\n"
    "def _name_at(code, cursor):\n"
    "    left = _TOKEN.search(code[:cursor]).group()\n"
    "    name = (left + _WORD.match(code, cursor).group()).strip('.')\n"
    "    if name and not name[0].isdigit():\n"
    "        return name\n"
    "    depth = 0\n"
    "    for i in range(cursor - 1, -1, -1):\n"
    "        ch = code[i]\n"
    "        if ch in ')]}':\n"
    "            depth += 1\n"
    "        elif ch in '([{':\n"
    "            if depth == 0:\n"
    "                if ch != '(':\n"
    "                    return None\n"
    "                name = _TOKEN.search(code[:i].rstrip()).group().strip('.')\n"
    "                return name if name and not name[0].isdigit() else None\n"
    "            depth -= 1\n"
    "    return None\n"
    "\n"
    "def _resolve(name, g):\n"
    "    first, *rest = name.split('.')\n"
    "    if first in g:\n"
    "        obj = g[first]\n"
    "    elif hasattr(builtins, first):\n"
    "        obj = getattr(builtins, first)\n"
    "    else:\n"
    "        raise LookupError(name)\n"
    "    for part in rest:\n"
    "        obj = getattr(obj, part)\n"
    "    return obj\n"
    "\n"
    "def _cut(s, n):\n"
    "    return s if len(s) <= n else s[:n] + '...'\n"
    "\n"
    "def describe(name, obj, detail):\n"
    "    import inspect\n"
    "    out = []\n"
    "    def add(k, v):\n"
    "        v = str(v)\n"
    "        out.append(k + ':' + ('\\n' if '\\n' in v else ' ' * max(1, 11 - len(k))) + v)\n"
    "    if callable(obj):\n"
    "        try:\n"
    "            add('Signature', name.rpartition('.')[2] + str(inspect.signature(obj)))\n"
    "        except (TypeError, ValueError):\n"
    "            pass\n"
    "    add('Type', type(obj).__name__)\n"
    "    if not (inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj)):\n"
    "        try:\n"
    "            add('String form', _cut(repr(obj), 1000))\n"
    "        except Exception:\n"
    "            pass\n"
    "        try:\n"
    "            add('Length', len(obj))\n"
    "        except Exception:\n"
    "            pass\n"
    "    try:\n"
    "        add('File', inspect.getsourcefile(obj) or inspect.getfile(obj))\n"
    "    except (TypeError, OSError):\n"
    "        pass\n"
    "    source = None\n"
    "    if detail:\n"
    "        try:\n"
    "            source = inspect.getsource(obj)\n"
    "        except (TypeError, OSError):\n"
    "            pass\n"
    "    if source:\n"
    "        add('Source', source.rstrip('\\n'))\n"
    "    else:\n"
    "        doc = inspect.getdoc(obj)\n"
    "        add('Docstring', doc if doc else '<no docstring>')\n"
    "    return _cut('\\n'.join(out), _MAX_TEXT)\n"
    "\n"
    "def inspect_at(code, cursor, detail, g):\n"
    "    name = _name_at(code, cursor)\n"
    "    if name:\n"
    "        try:\n"
    "            obj = _resolve(name, g)\n"
    "        except Exception:\n"
    "            pass\n"
    "        else:\n"
    "            return {'found': True, 'data': {'text/plain': describe(name, obj, detail)},\n"
    "                    'metadata': {}}\n"
    "    return _EMPTY['inspect'](cursor)\n"
    "\n"
    "# 0x4000 is PyCF_ALLOW_INCOMPLETE_INPUT (what codeop uses): code that\n"
    "# merely ends too early fails with the message \"incomplete input\".\n"
    "_FLAGS = 0x4000 | 0x200 | 0x2000  # + PyCF_DONT_IMPLY_DEDENT, PyCF_ALLOW_TOP_LEVEL_AWAIT\n"
    "\n"
    "def is_complete(code):\n"
    "    import warnings\n"
    "    try:\n"
    "        with warnings.catch_warnings():\n"
    "            warnings.simplefilter('ignore')\n"
    "            compile(code, '<input>', 'exec', _FLAGS, dont_inherit=True)\n"
    "        more = False\n"
    "    except SyntaxError as e:\n"
    "        if 'incomplete input' not in str(e.msg):\n"
    "            return {'status': 'invalid', 'indent': ''}\n"
    "        more = True\n"
    "    except (OverflowError, ValueError):\n"
    "        return {'status': 'invalid', 'indent': ''}\n"
    "    lines = code.split('\\n')\n"
    "    last = next((l for l in reversed(lines) if l.strip()), '')\n"
    "    indent = last[:len(last) - len(last.lstrip())]\n"
    "    if more:\n"
    "        if last.rstrip().endswith(':'):\n"
    "            indent += '    '\n"
    "        return {'status': 'incomplete', 'indent': indent}\n"
    "    # A block whose last line is indented wants more lines until a blank\n"
    "    # line ends it, as in Python's own REPL.\n"
    "    if indent and lines[-1].strip():\n"
    "        return {'status': 'incomplete', 'indent': indent}\n"
    "    return {'status': 'complete', 'indent': ''}\n";

static PyObject *query_fn;

/* Loads the helper once per worker (before the zygote forks: shared). */
int wrk_query_init(void)
{
    PyObject *mod = wrk_py_private_module("_ctxd_query", query_src, "<ctxd-worker>");
    if (!mod)
        return -1;
    query_fn = PyDict_GetItemString(PyModule_GetDict(mod), "query");
    Py_XINCREF(query_fn);
    Py_DECREF(mod);
    if (!query_fn) {
        PyErr_SetString(PyExc_RuntimeError, "query helper missing");
        return -1;
    }
    return 0;
}

/* The op's name as Python sees it. */
static const char *op_name(wrk_query_op op)
{
    static const char *const names[] = {
        [WRK_QUERY_COMPLETE] = "complete",
        [WRK_QUERY_INSPECT] = "inspect",
        [WRK_QUERY_IS_COMPLETE] = "is_complete",
    };
    return names[op];
}

PyObject *wrk_query_ask(const wrk_query_req *req, PyObject *globals)
{
    PyObject *code = PyUnicode_DecodeUTF8(req->code, (Py_ssize_t)req->code_len, "replace");
    if (!code)
        return NULL;
    PyObject *r = PyObject_CallFunction(query_fn, "sOKKO", op_name(req->op), code,
                                        (unsigned long long)req->cursor,
                                        (unsigned long long)req->detail_level, globals);
    Py_DECREF(code);
    return r;
}

/* The answer of a query that failed outright (an interrupt that landed
 * outside the helper's own handler): no matches, not found, unknown. */
static void put_empty(proto_buf *b, const wrk_query_req *req)
{
    switch (req->op) {
    case WRK_QUERY_COMPLETE:
        proto_put_map(b, 4);
        proto_put_str(b, "matches");
        proto_put_array(b, 0);
        proto_put_str(b, "cursor_start");
        proto_put_uint(b, req->cursor);
        proto_put_str(b, "cursor_end");
        proto_put_uint(b, req->cursor);
        proto_put_str(b, "metadata");
        proto_put_map(b, 0);
        break;
    case WRK_QUERY_INSPECT:
        proto_put_map(b, 3);
        proto_put_str(b, "found");
        proto_put_bool(b, false);
        proto_put_str(b, "data");
        proto_put_map(b, 0);
        proto_put_str(b, "metadata");
        proto_put_map(b, 0);
        break;
    case WRK_QUERY_IS_COMPLETE:
        proto_put_map(b, 2);
        proto_put_str(b, "status");
        proto_put_str(b, "unknown");
        proto_put_str(b, "indent");
        proto_put_str(b, "");
        break;
    }
}

void wrk_query_put_answer(proto_buf *b, uint64_t run_id, const wrk_query_req *req, PyObject *answer)
{
    size_t start = proto_frame_begin(b);
    proto_put_map(b, 3);
    proto_put_str(b, "t");
    proto_put_str(b, "answer");
    proto_put_str(b, "run_id");
    proto_put_uint(b, run_id);
    proto_put_str(b, "data");
    if (answer && PyDict_Check(answer))
        wrk_display_put_pyobj(b, answer, ANSWER_BUDGET);
    else
        put_empty(b, req);
    proto_frame_end(b, start);
}
