/* wrk_site: puts the context's package directory (CTXD_SITE) on sys.path;
 * site.USER_BASE / USER_SITE for the worker's own HOME. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>

#include "wrk_log.h"
#include "wrk_site.h"

/* Before the first site-packages / dist-packages entry, as a virtual
 * environment's packages come before the system's: an installed package
 * wins over a Debian one of the same name, the standard library does not
 * lose to an installed package. */
static const char site_code[] =
    "import os, sys\n"
    "os.environ.pop('CTXD_SITE', None)\n"
    "if site not in sys.path:\n"
    "    at = next((i for i, p in enumerate(sys.path)\n"
    "               if p.endswith(('site-packages', 'dist-packages'))), len(sys.path))\n"
    "    sys.path.insert(at, site)\n";

/* site.USER_BASE and USER_SITE were computed where `site` was imported
 * (the zygote: the daemon's HOME); a worker's HOME may differ (the sandbox
 * tier's is /tmp, a context's env may set it), so they are computed again
 * as python3 started here would; the old user site leaves sys.path unless
 * it is still the one. */
static const char user_code[] = "import site, sys\n"
                                "old = site.USER_SITE\n"
                                "site.USER_BASE = site.USER_SITE = None\n"
                                "site.getuserbase()\n"
                                "site.getusersitepackages()\n"
                                "if old and old != site.USER_SITE and old in sys.path:\n"
                                "    sys.path.remove(old)\n";

/* Runs user_code once per worker (its HOME is final by now). */
static void reset_user_site(void)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *globals = PyDict_New();
    PyObject *r = NULL;
    if (globals && PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) == 0)
        r = PyRun_String(user_code, Py_file_input, globals, globals);
    if (!r) {
        wrk_log("cannot compute site.USER_BASE again");
        PyErr_Print();
    }
    Py_XDECREF(r);
    Py_XDECREF(globals);
    PyGILState_Release(gil);
}

/* Called once per worker, before sbx_init (which reads sys.path). */
void wrk_site_init(void)
{
    reset_user_site();
    const char *site = getenv("CTXD_SITE");
    if (!site)
        return;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *globals = PyDict_New();
    PyObject *path = PyUnicode_DecodeFSDefault(site);
    PyObject *r = NULL;
    if (globals && path && PyDict_SetItemString(globals, "site", path) == 0 &&
        PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) == 0)
        r = PyRun_String(site_code, Py_file_input, globals, globals);
    if (!r) {
        wrk_log("cannot put the package directory %s on sys.path", site);
        PyErr_Print();
    }
    Py_XDECREF(r);
    Py_XDECREF(path);
    Py_XDECREF(globals);
    PyGILState_Release(gil);
    unsetenv("CTXD_SITE");
}
