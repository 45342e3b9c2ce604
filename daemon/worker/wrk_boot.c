/* wrk_boot: the start-up steps every worker takes, whether started by exec
 * or forked by the zygote (which takes some of them once for all its
 * workers). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "wrk_boot.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "mem.h"
#include "wrk_chan.h"
#include "wrk_display.h"
#include "wrk_ipy.h"
#include "wrk_log.h"
#include "wrk_mpmain.h"
#include "wrk_oswrite.h"
#include "wrk_outstream.h"
#include "wrk_print.h"
#include "wrk_py.h"
#include "wrk_query.h"
#include "wrk_run.h"
#include "wrk_snap.h"

#if !defined(WRK_PYTHON_EXE) || !defined(WRK_PYTHON_HOME)
#error                                                                                             \
    "WRK_PYTHON_EXE and WRK_PYTHON_HOME (the embedded interpreter's executable and prefix) must be defined"
#endif

/* The supervisor's death is signalled with this; the handler kills the
 * worker's whole process group, so processes the user code started do not
 * outlive the daemon either. */
#define PARENT_DEATH_SIGNAL (SIGRTMIN + 3)

static void on_parent_death(int sig)
{
    (void)sig;
    wrk_chan_gone(1);
}

void wrk_boot_watch_parent(pid_t parent)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_parent_death;
    sigfillset(&sa.sa_mask);
    if (sigaction(PARENT_DEATH_SIGNAL, &sa, NULL) < 0 ||
        prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL) < 0)
        fatal("cannot watch the supervisor: %s", strerror(errno));
    /* Died before the signal was armed: we were reparented already. Compared
     * with the supervisor's real pid, never with 1: the supervisor may be
     * PID 1 itself (in a container). */
    if (getppid() != parent)
        _exit(1);
}

/* Exits after reporting a failed CPython initialisation step. */
static void check_status(PyStatus st, const char *what)
{
    if (!PyStatus_Exception(st))
        return;
    wrk_log("%s: %s%s%s", what, st.func ? st.func : "", st.func ? ": " : "",
            st.err_msg ? st.err_msg : "failed");
    _exit(PyStatus_IsExit(st) ? st.exitcode : 1);
}

/* The executable and prefix are pinned to the interpreter the worker was
 * built against: the first python3 on PATH, or a stray PYTHONHOME, may
 * belong to another one. */
void wrk_boot_python(void)
{
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.parse_argv = 0;
    config.install_signal_handlers = 1;
    config.site_import = 1;
    config.configure_c_stdio = 0;
    check_status(PyConfig_SetBytesString(&config, &config.program_name, WRK_PYTHON_EXE),
                 "python config");
    check_status(PyConfig_SetBytesString(&config, &config.executable, WRK_PYTHON_EXE),
                 "python config");
    check_status(PyConfig_SetBytesString(&config, &config.home, WRK_PYTHON_HOME), "python config");
    char *argv[] = {(char *)""};
    check_status(PyConfig_SetBytesArgv(&config, 1, argv), "python config");
    PyStatus st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    check_status(st, "python initialisation");
}

/* Any step that fails ends the worker (exit 1) with a line in its log. */
void wrk_boot_session(void)
{
    if (wrk_outstream_install() < 0 || wrk_oswrite_install() < 0 || wrk_print_install() < 0 ||
        wrk_py_init() < 0 || wrk_display_init() < 0 || wrk_ipy_init() < 0 ||
        wrk_mpmain_init() < 0 || wrk_py_install_hooks(wrk_display_patch_module) < 0 ||
        wrk_query_init() < 0 || wrk_snap_init() < 0)
        goto fail;
    PyObject *main_mod = PyImport_AddModule("__main__"); /* borrowed */
    if (!main_mod)
        goto fail;
    wrk_run_init(PyModule_GetDict(main_mod));
    PyObject *path = PySys_GetObject("path"); /* borrowed */
    PyObject *empty = PyUnicode_FromString("");
    if (!path || !PyList_Check(path) || !empty || PyList_Insert(path, 0, empty) < 0)
        goto fail;
    Py_DECREF(empty);
    return;
fail:
    wrk_log("python session set-up failed:");
    PyErr_Print(); /* lands in the captured (discarded) stderr; rarely useful */
    _exit(1);
}

/* A crash waits (briefly) for a send of output under way, then dies of the
 * same signal, which the supervisor reports as the cause. */
static void on_crash(int sig)
{
    wrk_chan_quiesce(500);
    raise(sig); /* SA_RESETHAND made this the default action */
}

void wrk_boot_crash_handlers(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}
