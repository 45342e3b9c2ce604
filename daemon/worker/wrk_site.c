/* wrk_site: puts the context's package directory (CTXD_SITE) on sys.path. */
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

/* Called once per worker, before sbx_init (which reads sys.path). */
void wrk_site_init(void)
{
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
