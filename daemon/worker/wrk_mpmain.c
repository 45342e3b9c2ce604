/* wrk_mpmain: a process started with multiprocessing's `spawn` or
 * `forkserver` method is a fresh python3 that re-imports __main__ from its
 * file to find the functions and classes it is sent. A script run (execute
 * `file`) has that file; a cell does not, and a child sent a function the
 * cell defined dies unpickling it ("Can't get attribute 'work' on <module
 * '__main__' (built-in)>"), which makes Pool.map wait for ever (the task
 * is lost with the worker). So while __main__ has no file, pickling such a
 * function or class for a spawned process (a Pool's tasks, Process.start)
 * raises a PicklingError that says why, in the parent, at once. */
#include "wrk_mpmain.h"

#include "wrk_display.h"
#include "wrk_py.h"

static const char mpmain_src[] =
    "import pickle, sys, threading, types\n"
    "\n"
    "_dest = threading.local()  # spawned: pickling for a spawned process\n"
    "\n"
    "def _cell_main():\n"
    "    m = sys.modules.get('__main__')\n"
    "    return m is not None and getattr(m, '__file__', None) is None and \\\n"
    "        getattr(m, '__spec__', None) is None\n"
    "\n"
    "def _check(obj):\n"
    "    method = getattr(_dest, 'spawned', None)\n"
    "    if method and isinstance(obj, (types.FunctionType, type)) and \\\n"
    "            getattr(obj, '__module__', None) == '__main__' and _cell_main():\n"
    "        raise pickle.PicklingError(\n"
    "            '%s is defined in a cell, and a process started with the %r start method '\n"
    "            'cannot import it: its __main__ has no file. Run the code as a script '\n"
    "            '(ctx run -f FILE, execute \\'file\\'), define it in a module, or use the '\n"
    "            '\\'fork\\' start method' % (getattr(obj, '__qualname__', obj), method))\n"
    "\n"
    "def _flagged(method, fn, *args):\n"
    "    old = getattr(_dest, 'spawned', None)\n"
    "    _dest.spawned = method\n"
    "    try:\n"
    "        return fn(*args)\n"
    "    finally:\n"
    "        _dest.spawned = old\n"
    "\n"
    "def patch_reduction(mod):\n"
    "    fp = mod.ForkingPickler\n"
    "    prev = getattr(fp, 'reducer_override', None)\n"
    "    def reducer_override(self, obj):\n"
    "        _check(obj)\n"
    "        return NotImplemented if prev is None else prev(self, obj)\n"
    "    fp.reducer_override = reducer_override\n"
    "\n"
    "def patch_popen(mod):\n"
    "    cls = mod.Popen\n"
    "    launch = cls._launch\n"
    "    def _launch(self, process_obj):\n"
    "        return _flagged(cls.method, launch, self, process_obj)\n"
    "    cls._launch = _launch\n"
    "\n"
    "def patch_pool(mod):\n"
    "    setup = mod.Pool._setup_queues\n"
    "    def _setup_queues(self):\n"
    "        setup(self)\n"
    "        method = self._ctx.get_start_method()\n"
    "        if method != 'fork':\n"
    "            put = self._quick_put\n"
    "            self._quick_put = lambda task: _flagged(method, put, task)\n"
    "    mod.Pool._setup_queues = _setup_queues\n"
    "\n"
    "PATCHES = {'multiprocessing.reduction': patch_reduction,\n"
    "           'multiprocessing.popen_spawn_posix': patch_popen,\n"
    "           'multiprocessing.popen_forkserver': patch_popen,\n"
    "           'multiprocessing.pool': patch_pool}\n";

/* Creates the patches' module and registers each with the import hook. */
int wrk_mpmain_init(void)
{
    PyObject *mod = wrk_py_private_module("_ctxd_mpmain", mpmain_src, "<ctxd-worker>");
    if (!mod)
        return -1;
    PyObject *patches = PyDict_GetItemString(PyModule_GetDict(mod), "PATCHES"); /* borrowed */
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    int rc = patches ? 0 : -1;
    while (rc == 0 && PyDict_Next(patches, &pos, &k, &v))
        rc = wrk_display_patch_module(PyUnicode_AsUTF8(k), v);
    Py_DECREF(mod); /* the import hook keeps the functions */
    return rc;
}
