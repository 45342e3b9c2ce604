/* sbx_py: the Python half of a confined worker. The import allowlist (a
 * hook on builtins.__import__, importlib.import_module and importlib.__import__
 * for modules already loaded, plus a sys.meta_path finder that refuses to load
 * any new module for user code, whichever way it asked), the CPU budget
 * handler. (The static tier's analysis is the worker's: wrk_static.c.)
 *
 * The hook decides by the importing code's globals: code of a real module
 * (its globals are that module's dict in sys.modules) or of the worker's own
 * helpers may import anything it needs; __main__, exec'd strings and every
 * other namespace are user code and get only the allowlist. It is a policy
 * check inside the interpreter, not the security boundary: the kernel-level
 * limits (seccomp, Landlock, rlimits, cgroups) are. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sbx.h"

static const char sbx_src[] =
    "import builtins, importlib, importlib.abc, sys, signal\n"
    "_G = globals()\n"
    "_TRUSTED = ('_ctxd_worker', '_ctxd_zygote', '_ctxd_sbx', '_ctxd_query')\n"
    "\n"
    "def _trusted(g):\n"
    "    if not isinstance(g, dict):\n"
    "        return False\n"
    "    name = g.get('__name__')\n"
    "    if not isinstance(name, str) or name == '__main__':\n"
    "        return False\n"
    "    if name in _TRUSTED:\n"
    "        return True\n"
    "    m = sys.modules.get(name)\n"
    "    return m is not None and getattr(m, '__dict__', None) is g\n"
    "\n"
    "def _importer_globals(depth):\n"
    "    f = sys._getframe(depth)\n"
    "    while f is not None and (f.f_globals is _G or\n"
    "                             f.f_code.co_filename.startswith('<frozen importlib')):\n"
    "        f = f.f_back\n"
    "    return f.f_globals if f is not None else None\n"
    "\n"
    "def _allowed(name, allowed):\n"
    "    parts = name.split('.')\n"
    "    return any('.'.join(parts[:i]) in allowed for i in range(1, len(parts) + 1))\n"
    "\n"
    "def _deny(name):\n"
    "    raise ImportError(\"import of '%s' is not allowed by this context's policy \"\n"
    "                      '(allowed_imports)' % name, name=name)\n"
    "\n"
    "def install_imports(allowed):\n"
    "    allowed = frozenset(allowed)\n"
    "    real_import = builtins.__import__\n"
    "    real_import_module = importlib.import_module\n"
    "    real_bootstrap_import = importlib.__import__\n"
    "    def check(name, g, level=0, package=None):\n"
    "        if level or not name or _trusted(g):\n"
    "            return\n"
    "        if not _allowed(name, allowed):\n"
    "            _deny(name)\n"
    "    def __import__(name, globals=None, locals=None, fromlist=(), level=0):\n"
    "        g = globals if globals is not None else _importer_globals(1)\n"
    "        check(name, g, level)\n"
    "        m = real_import(name, globals, locals, fromlist, level)\n"
    "        if fromlist and not level and not _trusted(g):\n"
    "            for f in fromlist:\n"
    "                sub = '%s.%s' % (name, f)\n"
    "                if isinstance(f, str) and sub in sys.modules and not _allowed(sub, allowed):\n"
    "                    _deny(sub)\n"
    "        return m\n"
    "    def import_module(name, package=None):\n"
    "        check(name, _importer_globals(1), name.startswith('.'))\n"
    "        return real_import_module(name, package)\n"
    "    def bootstrap_import(name, globals=None, locals=None, fromlist=(), level=0):\n"
    "        check(name, globals if globals is not None else _importer_globals(1), level)\n"
    "        return real_bootstrap_import(name, globals, locals, fromlist, level)\n"
    "    class Finder(importlib.abc.MetaPathFinder):\n"
    "        def find_spec(self, name, path, target=None):\n"
    "            if not _allowed(name, allowed) and not _trusted(_importer_globals(1)):\n"
    "                _deny(name)\n"
    "            return None\n"
    "    builtins.__import__ = __import__\n"
    "    importlib.import_module = import_module\n"
    "    importlib.__import__ = bootstrap_import\n"
    "    sys.meta_path.insert(0, Finder())\n"
    "\n"
    "def install_cpu(seconds):\n"
    "    def on_xcpu(signum, frame):\n"
    "        raise TimeoutError('the run used its CPU budget of %g s (policy cpu_seconds)' % "
    "seconds)\n"
    "    signal.signal(signal.SIGXCPU, on_xcpu)\n";

static PyObject *fn_install_imports, *fn_install_cpu;

int sbx_py_init(void)
{
    if (fn_install_imports)
        return 0;
    PyObject *mod = PyModule_New("_ctxd_sbx");
    PyObject *d = mod ? PyModule_GetDict(mod) : NULL;
    PyObject *code = d ? Py_CompileString(sbx_src, "<ctxd-sbx>", Py_file_input) : NULL;
    PyObject *r = code && PyDict_SetItemString(d, "__builtins__", PyEval_GetBuiltins()) == 0
                      ? PyEval_EvalCode(code, d, d)
                      : NULL;
    Py_XDECREF(code);
    Py_XDECREF(r);
    if (!r) {
        Py_XDECREF(mod);
        return -1;
    }
    fn_install_imports = PyDict_GetItemString(d, "install_imports");
    fn_install_cpu = PyDict_GetItemString(d, "install_cpu");
    Py_XINCREF(fn_install_imports);
    Py_XINCREF(fn_install_cpu);
    /* The module stays alive through its functions' globals. */
    Py_DECREF(mod);
    return fn_install_imports && fn_install_cpu ? 0 : -1;
}

/* Shared with the static tier (wrk_static.c): policy lists to Python. */
PyObject *sbx_py_str_list(char **names)
{
    PyObject *l = PyList_New(0);
    for (size_t i = 0; l && names && names[i]; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s || PyList_Append(l, s) < 0) {
            Py_XDECREF(s);
            Py_CLEAR(l);
            break;
        }
        Py_DECREF(s);
    }
    return l;
}

int sbx_py_imports(char **names, bool set)
{
    if (!set)
        return 0;
    PyObject *l = sbx_py_str_list(names);
    PyObject *r = l ? PyObject_CallOneArg(fn_install_imports, l) : NULL;
    Py_XDECREF(l);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

int sbx_py_cpu_handler(double seconds)
{
    PyObject *s = PyFloat_FromDouble(seconds);
    PyObject *r = s ? PyObject_CallOneArg(fn_install_cpu, s) : NULL;
    Py_XDECREF(s);
    Py_XDECREF(r);
    return r ? 0 : -1;
}
