/* wrk_py: the embedded helper module and calls into it. */
#include "wrk_py.h"

#include "mem.h"

#include <stdbool.h>

/* The helper's source. Names starting with "_" are internal. */
static const char helper_src[] =
    "import ast, linecache, os, re, sys, traceback\n"
    "\n"
    "_HERE = sys._getframe().f_code.co_filename\n"
    "_LINE = re.compile(r'[^\\r\\n]*(?:\\r\\n|\\r|\\n)|[^\\r\\n]+\\Z')\n"
    "\n"
    "def env_apply(env):\n"
    "    saved = []\n"
    "    try:\n"
    "        for k, v in env.items():\n"
    "            saved.append((k, os.environ.get(k)))\n"
    "            os.environ[k] = v\n"
    "    except BaseException:\n"
    "        env_restore(saved)\n"
    "        raise\n"
    "    return saved\n"
    "\n"
    "def env_restore(saved):\n"
    "    for k, old in reversed(saved):\n"
    "        try:\n"
    "            if old is None:\n"
    "                os.environ.pop(k, None)\n"
    "            else:\n"
    "                os.environ[k] = old\n"
    "        except Exception:\n"
    "            pass\n"
    "\n"
    /* Lines split the way the compiler counts them (\n, \r\n, \r), so
     * traceback line numbers and source lines agree. */
    /* result returns the value's MIME bundle (a dict, see wrk_display.c),
     * or its repr when that helper is absent; figures the run left open are
     * sent after the result or error (end_run). */
    "_rich = None  # set by wrk_display\n"
    "_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT\n"
    "_SKIP = ()  # path prefixes of asyncio, once a run used top-level await\n"
    "_loop = None\n"
    "\n"
    "_ipy = None  # set by wrk_ipy: IPython syntax\n"
    "_ipy_begun = False  # _ipy.begin ran for this run: leave calls _ipy.end\n"
    "\n"
    /* A run is staged so that no frame of this helper is on the stack
     * while user code runs (faulthandler and traceback.print_stack show
     * the stack as python3 would): wrk_run.c calls enter, compile_cell,
     * evaluates the code objects itself (await_ for a coroutine), then
     * result and leave; end_run after the run's result or error frame. */
    "def enter(script, g):\n"
    "    return None if script is None else _script_enter(script, g)\n"
    "\n"
    "def leave(saved, silent, g, err):\n"
    "    global _ipy_begun\n"
    "    try:\n"
    "        if saved is not None:\n"
    "            _script_leave(saved, g)\n"
    "    finally:\n"
    "        if _ipy_begun:\n"
    "            _ipy_begun = False\n"
    "            _ipy.end(silent, err)\n"
    "\n"
    /* The figures a run left open, after its result or error (as
     * ipykernel sends them). */
    "def end_run(silent):\n"
    "    if _rich is not None:\n"
    "        _rich.end_run(silent)\n"
    "\n"
    /* A run of a script (execute `file` and/or `argv`): for its duration
     * __file__, sys.argv, sys.orig_argv and sys.path[0] are what
     * `python3 FILE ARGS...` would have (PROTOCOL.md section 5); they are
     * put back afterwards, since the next run is not that script. */
    "_NONE = object()\n"
    "\n"
    "def _script_enter(script, g):\n"
    "    file, argv = script\n"
    "    saved = (sys.argv, getattr(sys, 'orig_argv', _NONE), g.get('__file__', _NONE), None)\n"
    "    sys.argv = list(argv) if argv else [file if file is not None else '']\n"
    "    sys.orig_argv = [sys.executable] + sys.argv\n"
    "    if file is None:\n"
    "        return saved\n"
    "    g['__file__'] = file\n"
    "    try:\n"
    "        d = os.path.dirname(os.path.realpath(file))\n"
    "    except (OSError, ValueError):\n"
    "        d = os.path.dirname(file)\n"
    "    if sys.path and sys.path[0] == '':\n"
    "        sys.path[0] = d\n"
    "    else:\n"
    "        sys.path.insert(0, d)\n"
    "    return saved[:3] + (d,)\n"
    "\n"
    "def _script_leave(saved, g):\n"
    "    argv, orig, file, d = saved\n"
    "    sys.argv = argv\n"
    "    if orig is not _NONE:\n"
    "        sys.orig_argv = orig\n"
    "    if file is _NONE:\n"
    "        g.pop('__file__', None)\n"
    "    else:\n"
    "        g['__file__'] = file\n"
    "    if d is not None and sys.path and sys.path[0] is d:\n"
    "        sys.path[0] = ''\n"
    "\n"
    /* A last statement ending in `;` shows no value, as in IPython. */
    "def _quiet(src):\n"
    "    import io, tokenize\n"
    "    last = None\n"
    "    try:\n"
    "        for t in tokenize.generate_tokens(io.StringIO(src).readline):\n"
    "            if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT,\n"
    "                              tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):\n"
    "                last = t\n"
    "    except Exception:\n"
    "        return False\n"
    "    return last is not None and last.type == tokenize.OP and last.string == ';'\n"
    "\n"
    /* (body, last, quiet): the code compiled, a trailing expression apart;
     * quiet when a trailing `;` hides its value. code is what the client
     * sent (the source lines tracebacks show); what is compiled is code or,
     * with IPython syntax, its transformation (the shell's pre-run events
     * fire then: leave fires the post-run ones). */
    "def compile_cell(code, filename, silent, g, ipython):\n"
    "    global _ipy_begun\n"
    "    src = code\n"
    "    if ipython:\n"
    "        src = _ipy.transform(code, g)\n"
    "        _ipy.begin(code, silent)\n"
    "        _ipy_begun = True\n"
    "    hit = _compiled.get(src)\n"
    "    if hit is not None and hit[3] == code:\n"
    "        body, last, quiet, _, lines = hit\n"
    "        linecache.cache[filename] = (len(code), None, lines, filename)\n"
    "        return _relabel(body, filename), last and _relabel(last, filename), quiet\n"
    "    lines = _LINE.findall(code)\n"
    "    linecache.cache[filename] = (len(code), None, lines, filename)\n"
    "    tree = compile(src, filename, 'exec', ast.PyCF_ONLY_AST | _AWAIT, dont_inherit=True)\n"
    "    last = None\n"
    "    if tree.body and isinstance(tree.body[-1], ast.Expr):\n"
    "        last = ast.Expression(tree.body.pop().value)\n"
    "        last = compile(last, filename, 'eval', _AWAIT, dont_inherit=True)\n"
    "    out = compile(tree, filename, 'exec', _AWAIT, dont_inherit=True), last,\\\n"
    "        last is not None and _quiet(src)\n"
    "    if len(src) <= _COMPILED_SRC_MAX:\n"
    "        if len(_compiled) >= _COMPILED_MAX:\n"
    "            del _compiled[next(iter(_compiled))]\n"
    "        _compiled[src] = out + (code, lines)\n"
    "    return out\n"
    "\n"
    /* The code objects of the last sources run, by source: compile() with
     * dont_inherit is a function of the source, the flags and the file
     * name, so a cell run again (a polling loop, a notebook cell re-run)
     * gets what a compile would give, its file name put in (the cell's
     * number) instead of the parse and compile of every run. The entry
     * keeps the cell's text and its lines for linecache too (with IPython
     * syntax two texts can give one source: the lines are the text's). */
    "_compiled = {}\n"
    "_COMPILED_MAX, _COMPILED_SRC_MAX = 128, 8192\n"
    "\n"
    /* The zygote compiles a cell of the common statements the way
     * compile_cell does (and runs a short one and shows its value, in a
     * dict of its own) before it forks: the entries CPython's type
     * attribute cache and the interned names get on the way are then the
     * zygote's, shared, where every worker's first run wrote them itself
     * (a copy-on-write fault each: 21-25 -> 15 for a first `x = 1`).
     * Nothing of it stays: no cache entry, no linecache line. */
    "_WARM = '''import math as m\n"
    "from os import path as p\n"
    "def f(a, b=2, /, *c, k=None, **d):\n"
    "    'doc'\n"
    "    global g\n"
    "    x = [i * 2 for i in range(3) if i]\n"
    "    y = {k: v for k, v in zip('ab', x)}\n"
    "    s, t = {1, 2}, (a, b, *c)\n"
    "    z = f'{a!r:>4} {b}' + m.pi.hex()[1:-1]\n"
    "    try:\n"
    "        w = y['a'] + 1 if x else ~y.get(0, -1)\n"
    "    except (KeyError, IndexError) as e:\n"
    "        raise ValueError(e) from None\n"
    "    finally:\n"
    "        pass\n"
    "    while w < 1 and not s or t is None:\n"
    "        w += 1\n"
    "        break\n"
    "    for i, j in enumerate(t):\n"
    "        continue\n"
    "    with open(p.devnull) as q, q:\n"
    "        pass\n"
    "    return lambda u: (yield u)\n"
    "class C(object):\n"
    "    n: int = 1\n"
    "    @staticmethod\n"
    "    def m(self, *, o=None):\n"
    "        v = self[1:2, ...]\n"
    "        yield from ()\n"
    "async def h():\n"
    "    async with h() as a:\n"
    "        await a\n"
    "match x:\n"
    "    case [1, *_] | {'k': _}:\n"
    "        pass\n"
    "x = 1\n"
    "assert x, 'x'\n"
    "del x\n"
    "print(x, end='')\n"
    "'''\n"
    "\n"
    "def warm():\n"
    "    name = '<ctxd-warm>'\n"
    "    tree = compile(_WARM, name, 'exec', ast.PyCF_ONLY_AST | _AWAIT, dont_inherit=True)\n"
    "    last = ast.Expression(tree.body.pop().value)\n"
    "    compile(last, name, 'eval', _AWAIT, dont_inherit=True)\n"
    "    compile(tree, name, 'exec', _AWAIT, dont_inherit=True)\n"
    "    _quiet(_WARM)\n"
    "    g = {}\n"
    "    exec(compile('x = 1\\ny = x + 1\\n', name, 'exec', dont_inherit=True), g)\n"
    "    result(eval(compile('y', name, 'eval', dont_inherit=True), g), False, g, False)\n"
    "\n"
    "_CodeType = type(compile('', '', 'exec'))\n"
    "\n"
    "def _relabel(co, filename):\n"
    "    consts = co.co_consts\n"
    "    for c in consts:\n"
    "        if type(c) is _CodeType:\n"
    "            consts = tuple(_relabel(c, filename) if type(c) is _CodeType else c\n"
    "                           for c in consts)\n"
    "            return co.replace(co_filename=filename, co_consts=consts)\n"
    "    return co.replace(co_filename=filename)\n"
    "\n"
    "def result(value, silent, g, ipython):\n"
    "    if value is None or silent:\n"
    "        return None\n"
    "    g['_'] = value\n"
    "    if _rich is None:\n"
    "        return repr(value)\n"
    "    return _rich.result(value, _ipy.pretty if ipython else repr)\n"
    "\n"
    /* Top-level await: the code object is a coroutine function body; it
     * runs to completion in one event loop kept across runs. */
    "def await_(coro):\n"
    "    global _loop, _SKIP\n"
    "    import asyncio\n"
    "    _SKIP = (os.path.dirname(asyncio.__file__) + os.sep,)\n"
    "    if _loop is None or _loop.is_closed():\n"
    "        _loop = asyncio.new_event_loop()\n"
    "    asyncio.set_event_loop(_loop)\n"
    "    return _loop.run_until_complete(coro)\n"
    "\n"
    /* Drops the helper's own leading frames from every exception of the
     * chain (causes, contexts, members of exception groups). */
    "def _strip(e):\n"
    "    seen = set()\n"
    "    todo = [e]\n"
    "    while todo:\n"
    "        x = todo.pop()\n"
    "        if x is None or id(x) in seen:\n"
    "            continue\n"
    "        seen.add(id(x))\n"
    "        tb = x.__traceback__\n"
    "        while tb is not None and (tb.tb_frame.f_code.co_filename == _HERE or\n"
    "                                  tb.tb_frame.f_code.co_filename.startswith(_SKIP)):\n"
    "            tb = tb.tb_next\n"
    "        try:\n"
    "            x.__traceback__ = tb\n"
    "        except Exception:\n"
    "            pass\n"
    "        todo.append(x.__cause__)\n"
    "        todo.append(x.__context__)\n"
    "        if isinstance(x, BaseExceptionGroup):\n"
    "            todo.extend(x.exceptions)\n"
    "\n"
    "def format(e):\n"
    "    _strip(e)\n"
    "    ename = type(e).__name__\n"
    "    if _ipy is not None and _ipy._shell is not None and \\\n"
    "            isinstance(e, _ipy.usage_error_types()):\n"
    "        return ename, str(e), ['%s: %s' % (ename, e)]\n"
    "    try:\n"
    "        evalue = str(e)\n"
    "    except BaseException:\n"
    "        evalue = '<unprintable %s object>' % ename\n"
    "    try:\n"
    "        text = ''.join(traceback.format_exception(type(e), e, e.__traceback__))\n"
    "    except BaseException:\n"
    "        text = '%s: %s\\n' % (ename, evalue)\n"
    "    if text.endswith('\\n'):\n"
    "        text = text[:-1]\n"
    "    sys.last_type, sys.last_value, sys.last_traceback = type(e), e, e.__traceback__\n"
    "    return ename, evalue, text.split('\\n')\n"
    "\n"
    /* The default sys.unraisablehook and threading.excepthook are C, and
     * C reads source lines from files only: a cell's lines (in linecache)
     * would be missing from what they print. These do the same in Python,
     * so they show them; output is otherwise the C hooks' own. */
    "def _exc_line(t, v):\n"
    "    mod = getattr(t, '__module__', None)\n"
    "    if not isinstance(mod, str):\n"
    "        name = '<unknown>'\n"
    "    else:\n"
    "        name = '' if mod in ('builtins', '__main__') else mod + '.'\n"
    "        name += getattr(t, '__qualname__', '<unknown>')\n"
    "    if v is not None:\n"
    "        try:\n"
    "            name += ': ' + str(v)\n"
    "        except BaseException:\n"
    "            name += ': <exception str() failed>'\n"
    "    return name + '\\n'\n"
    "\n"
    "def unraisablehook(u, /):\n"
    "    f = sys.stderr\n"
    "    if f is None:\n"
    "        return\n"
    "    out = []\n"
    "    if u.object is not None:\n"
    "        msg = 'Exception ignored in' if u.err_msg is None else str(u.err_msg)\n"
    "        out.append(msg + ': ')\n"
    "        try:\n"
    "            out.append(repr(u.object))\n"
    "        except BaseException:\n"
    "            out.append('<object repr() failed>')\n"
    "        out.append('\\n')\n"
    "    elif u.err_msg is not None:\n"
    "        out.append(str(u.err_msg) + ':\\n')\n"
    "    if u.exc_traceback is not None:\n"
    "        out.append('Traceback (most recent call last):\\n')\n"
    "        out.extend(traceback.format_tb(u.exc_traceback))\n"
    "    if u.exc_type is not None:\n"
    "        out.append(_exc_line(u.exc_type, u.exc_value))\n"
    "    f.write(''.join(out))\n"
    "    f.flush()\n"
    "\n"
    "def thread_excepthook(args, /):\n"
    "    if args.exc_type == SystemExit:\n"
    "        return\n"
    "    if sys.stderr is not None:\n"
    "        stderr = sys.stderr\n"
    "    elif args.thread is not None:\n"
    "        stderr = args.thread._stderr\n"
    "        if stderr is None:\n"
    "            return\n"
    "    else:\n"
    "        return\n"
    "    import threading\n"
    "    name = args.thread.name if args.thread is not None else threading.get_ident()\n"
    "    print(f'Exception in thread {name}:', file=stderr, flush=True)\n"
    "    traceback.print_exception(args.exc_type, args.exc_value, args.exc_traceback,\n"
    "                              file=stderr)\n"
    "    stderr.flush()\n"
    "\n"
    "def patch_threading(mod):\n"
    "    mod.excepthook = mod.__excepthook__ = thread_excepthook\n"
    "\n"
    "def install_hooks():\n"
    "    sys.unraisablehook = sys.__unraisablehook__ = unraisablehook\n"
    "\n"
    "def flush():\n"
    "    for name in ('stdout', 'stderr'):\n"
    "        try:\n"
    "            getattr(sys, name).flush()\n"
    "        except BaseException:\n"
    "            pass\n"
    "\n"
    /* A forked child that falls off the end of the cell exits like a
     * script would: SystemExit's code, or 1 with the traceback on stderr. */
    /* SystemExit's exit status as the interpreter computes it: None is 0,
     * an int is itself (low 8 bits), anything else is printed to stderr
     * and is 1. */
    "def exit_code(e):\n"
    "    code = e.code\n"
    "    if code is None:\n"
    "        return 0\n"
    "    if isinstance(code, int):\n"
    "        return code & 0xff\n"
    "    try:\n"
    "        print(code, file=sys.stderr)\n"
    "    except BaseException:\n"
    "        pass\n"
    "    return 1\n"
    "\n"
    "def child_exit(e):\n"
    "    if e is None:\n"
    "        code = 0\n"
    "    elif isinstance(e, SystemExit):\n"
    "        code = exit_code(e)\n"
    "    else:\n"
    "        try:\n"
    "            sys.stderr.write('\\n'.join(format(e)[2]) + '\\n')\n"
    "        except BaseException:\n"
    "            pass\n"
    "        code = 1\n"
    "    flush()\n"
    "    return code & 0xff\n";

static const char *const fn_names[WRK_PY_NFNS] = {
    [WRK_PY_ENV_APPLY] = "env_apply",   [WRK_PY_ENV_RESTORE] = "env_restore",
    [WRK_PY_ENTER] = "enter",           [WRK_PY_COMPILE] = "compile_cell",
    [WRK_PY_AWAIT] = "await_",          [WRK_PY_RESULT] = "result",
    [WRK_PY_LEAVE] = "leave",           [WRK_PY_FORMAT] = "format",
    [WRK_PY_CHILD_EXIT] = "child_exit", [WRK_PY_EXIT_CODE] = "exit_code",
    [WRK_PY_END_RUN] = "end_run",       [WRK_PY_WARM] = "warm",
};

static PyObject *fns[WRK_PY_NFNS];

PyObject *wrk_py_private_module(const char *name, const char *src, const char *filename)
{
    PyObject *mod = PyModule_New(name);
    if (!mod)
        return NULL;
    PyObject *d = PyModule_GetDict(mod);
    PyObject *code = PyDict_SetItemString(d, "__builtins__", PyEval_GetBuiltins()) == 0
                         ? Py_CompileString(src, filename, Py_file_input)
                         : NULL;
    PyObject *r = code ? PyEval_EvalCode(code, d, d) : NULL;
    Py_XDECREF(code);
    if (!r) {
        Py_DECREF(mod);
        return NULL;
    }
    Py_DECREF(r);
    return mod;
}

/* Executes the helper source once in a private module and looks up the
 * entry points. */
int wrk_py_init(void)
{
    PyObject *mod = wrk_py_private_module("_ctxd_worker", helper_src, "<ctxd-worker>");
    if (!mod)
        return -1;
    PyObject *d = PyModule_GetDict(mod);
    for (int i = 0; i < WRK_PY_NFNS; i++) {
        fns[i] = PyDict_GetItemString(d, fn_names[i]);
        if (!fns[i]) {
            PyErr_Format(PyExc_RuntimeError, "helper function %s missing", fn_names[i]);
            goto fail;
        }
        Py_INCREF(fns[i]);
    }
    Py_DECREF(mod);
    return 0;
fail:
    Py_DECREF(mod);
    return -1;
}

/* GIL held, after wrk_display_init: the traceback-printing hooks that show
 * a cell's source lines (sys.unraisablehook now, threading.excepthook when
 * threading is imported, through patch_module: wrk_display_patch_module,
 * given by wrk_main since wrk_display sits above this file). -1 with a
 * Python error set. */
int wrk_py_install_hooks(int (*patch_module)(const char *name, PyObject *patch))
{
    PyObject *g = fns[WRK_PY_ENTER] ? PyFunction_GetGlobals(fns[WRK_PY_ENTER]) : NULL;
    PyObject *install = g ? PyDict_GetItemString(g, "install_hooks") : NULL;
    PyObject *patch = g ? PyDict_GetItemString(g, "patch_threading") : NULL;
    if (!install || !patch) {
        PyErr_SetString(PyExc_RuntimeError, "helper not loaded");
        return -1;
    }
    PyObject *r = PyObject_CallNoArgs(install);
    if (!r)
        return -1;
    Py_DECREF(r);
    return patch_module("threading", patch);
}

/* The linecache entries of flat cells (no function, class, lambda or
 * comprehension: no code of theirs can run after their run) are kept for
 * the last FLAT_LINES_KEPT such cells, not forever: every run adds one, and
 * a context that runs a polling cell a million times would otherwise hold
 * a million (~190 bytes each, and a full collection walks them all). A
 * cell with nested code keeps its lines for good, as in IPython: a
 * function it defined can raise in any later run. */
#define FLAT_LINES_KEPT 128
static PyObject *flat_names[FLAT_LINES_KEPT];
static size_t flat_next;

/* Whether co (a code object, or None) holds no nested code. */
static bool code_is_flat(PyObject *co)
{
    if (co == Py_None)
        return true;
    if (!PyCode_Check(co))
        return false;
    PyObject *consts = ((PyCodeObject *)co)->co_consts;
    for (Py_ssize_t i = 0; consts && i < PyTuple_GET_SIZE(consts); i++)
        if (PyCode_Check(PyTuple_GET_ITEM(consts, i)))
            return false;
    return true;
}

/* linecache.cache (a new reference), fetched each time since a cell may
 * put another dict there; NULL with no error set when it cannot be had. */
static PyObject *linecache_dict(void)
{
    static PyObject *linecache, *k_cache;
    if (!linecache) {
        linecache = PyImport_ImportModule("linecache");
        k_cache = linecache ? PyUnicode_InternFromString("cache") : NULL;
        if (!k_cache)
            Py_CLEAR(linecache);
    }
    PyObject *cache = linecache ? PyObject_GetAttr(linecache, k_cache) : NULL;
    if (!cache)
        PyErr_Clear();
    return cache;
}

/* compile_cell's answer for a cell run before, without its Python frame:
 * a cell without IPython syntax whose code has no nested code and no
 * trailing expression (code_is_flat, last None), which is what a polling
 * loop re-runs. The same steps as the helper: the cell's lines
 * into linecache, the code object with this run's file name. NULL (no
 * error set) sends the caller to compile_cell, which then does it all. */
PyObject *wrk_py_compiled_hit(PyObject *code, PyObject *filename)
{
    static PyObject *compiled, *k_replace, *kwnames;
    if (!compiled) {
        PyObject *g = fns[WRK_PY_COMPILE] ? PyFunction_GetGlobals(fns[WRK_PY_COMPILE]) : NULL;
        PyObject *c = g ? PyDict_GetItemString(g, "_compiled") : NULL;
        PyObject *name = PyUnicode_InternFromString("co_filename");
        k_replace = PyUnicode_InternFromString("replace");
        kwnames = name ? PyTuple_Pack(1, name) : NULL;
        Py_XDECREF(name);
        if (!c || !PyDict_Check(c) || !k_replace || !kwnames) {
            PyErr_Clear();
            return NULL;
        }
        compiled = Py_NewRef(c);
    }
    PyObject *hit = PyDict_GetItemWithError(compiled, code); /* borrowed */
    if (!hit || !PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 5 ||
        PyTuple_GET_ITEM(hit, 1) != Py_None || !code_is_flat(PyTuple_GET_ITEM(hit, 0))) {
        PyErr_Clear();
        return NULL;
    }
    Py_INCREF(hit); /* the cell may change _compiled meanwhile (it is reachable) */
    PyObject *out = NULL, *cache = NULL, *entry = NULL, *replace = NULL, *body = NULL;
    if (PyObject_RichCompareBool(PyTuple_GET_ITEM(hit, 3), code, Py_EQ) != 1)
        goto done;
    cache = linecache_dict();
    entry = Py_BuildValue("(nOOO)", PyUnicode_GET_LENGTH(code), Py_None, PyTuple_GET_ITEM(hit, 4),
                          filename);
    if (!cache || !entry || PyObject_SetItem(cache, filename, entry) < 0)
        goto done;
    replace = PyObject_GetAttr(PyTuple_GET_ITEM(hit, 0), k_replace);
    PyObject *args[1] = {filename};
    body = replace ? PyObject_Vectorcall(replace, args, 0, kwnames) : NULL;
    if (body)
        out = PyTuple_Pack(3, body, Py_None, PyTuple_GET_ITEM(hit, 2));
done:
    if (!out)
        PyErr_Clear();
    Py_XDECREF(body);
    Py_XDECREF(replace);
    Py_XDECREF(entry);
    Py_XDECREF(cache);
    Py_DECREF(hit);
    return out;
}

/* Keeps a flat cell's name in the ring and drops the linecache entry of
 * the one it replaces. */
void wrk_py_cell_ran(PyObject *filename, PyObject *body, PyObject *last)
{
    if (!PyUnicode_Check(filename) || PyUnicode_GET_LENGTH(filename) == 0 ||
        PyUnicode_READ_CHAR(filename, 0) != '<' || !code_is_flat(body) || !code_is_flat(last))
        return; /* a script's file, or code that can run again */
    PyObject *old = flat_names[flat_next];
    flat_names[flat_next] = Py_NewRef(filename);
    flat_next = (flat_next + 1) % FLAT_LINES_KEPT;
    if (!old)
        return;
    PyObject *cache = linecache_dict();
    if (cache && PyObject_DelItem(cache, old) < 0)
        PyErr_Clear(); /* gone already (linecache.clearcache()) */
    Py_XDECREF(cache);
    Py_DECREF(old);
}

/* Sets a global of the helper module (reached through a helper function's
 * globals), e.g. `_rich` from wrk_display. */
int wrk_py_set_global(const char *name, PyObject *value)
{
    PyObject *g = fns[WRK_PY_ENTER] ? PyFunction_GetGlobals(fns[WRK_PY_ENTER]) : NULL;
    if (!g) {
        PyErr_SetString(PyExc_RuntimeError, "helper not loaded");
        return -1;
    }
    return PyDict_SetItemString(g, name, value);
}

/* Thin wrapper so callers need not know the helper's layout. */
PyObject *wrk_py_call(wrk_py_fn fn, PyObject *args)
{
    if (fn < 0 || fn >= WRK_PY_NFNS || !fns[fn])
        fatal("wrk_py_call: helper %d not loaded", (int)fn);
    if (!args)
        return NULL;
    PyObject *r = PyObject_Call(fns[fn], args, NULL);
    Py_DECREF(args);
    return r;
}
