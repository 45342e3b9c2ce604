/* wrk_zygote: the zygote fork-server and forking a live worker. The zygote
 * holds the GIL for its whole life and keeps one thread, so a fork copies
 * one consistent interpreter; a new worker starts its flusher itself. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "wrk_zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"
#include "proto.h"
#include "sbx.h"
#include "wrk_boot.h"
#include "wrk_chan.h"
#include "wrk_log.h"
#include "wrk_output.h"
#include "wrk_py.h"
#include "wrk_run.h"

#define ZYGOTE_FD 3
/* Largest spawn request (the environment dominates). */
#define ZYGOTE_MAX_MSG (1u << 20)
/* Descriptors of a new worker, in the order the supervisor sends them:
 * channel, stdout and stderr write ends, stdout and stderr read ends. They
 * land on fds 3, 1, 2, 4 and 5. */
#define NEW_FDS 5
static const int fd_targets[NEW_FDS] = {3, 1, 2, 4, 5};

/* The supervisor: the zygote's parent, and the parent a new worker must end
 * up with. */
static pid_t sup_pid;
/* The zygote kept a single thread (a preload may start threads): only then
 * is the vfork-based double fork safe. */
static bool one_thread = true;
/* --merge-pages: unsafe-tier workers are offered to KSM (merge_pages). */
static bool merge_wanted;

/* ---- Python helpers of the zygote ----------------------------------------- */

static const char helper_src[] =
    "import gc, importlib, importlib.util, os, sys, traceback\n"
    /* What a confined worker's policy set-up (sbx_py.c) and the static
     * tier's analysis (wrk_static.c) import: loaded
     * once here, not from disk by every local or sandbox worker. */
    "import importlib.abc, json, ast, signal\n"
    "\n"
    /* A preload that is not installed is skipped quietly; one that fails to
     * import is skipped with its traceback in the daemon's log. */
    "def preload(names):\n"
    "    loaded, skipped = [], []\n"
    "    for name in names:\n"
    "        try:\n"
    "            found = importlib.util.find_spec(name) is not None\n"
    "        except Exception:\n"
    "            found = False\n"
    "        if not found:\n"
    "            skipped.append(name)\n"
    "            continue\n"
    "        try:\n"
    "            importlib.import_module(name)\n"
    "            loaded.append(name)\n"
    "        except BaseException:\n"
    "            print('ctxd-worker: preload %s failed:' % name, file=sys.stderr)\n"
    "            traceback.print_exc()\n"
    "            skipped.append(name)\n"
    "    sys.stdout.flush()\n"
    "    sys.stderr.flush()\n"
    "    return loaded, skipped\n"
    "\n"
    /* The allocator's pools are left part full by the imports and the
     * session's set-up; here their free blocks of every size class are taken
     * by objects kept for the zygote's life, so a worker's first objects go
     * to pools of its own instead of dirtying pages shared with the zygote
     * (README.md). Never called with sys.stderr flushed: it is the capture. */
    "_pool_filler = []\n"
    "def fill_pools():\n"
    "    fd = os.memfd_create('ctxd-mallocstats')\n"
    "    saved = os.dup(2)\n"
    "    try:\n"
    "        os.dup2(fd, 2)\n"
    "        sys._debugmallocstats()\n"
    "    finally:\n"
    "        os.dup2(saved, 2)\n"
    "        os.close(saved)\n"
    "    os.lseek(fd, 0, 0)\n"
    "    text = b''\n"
    "    while chunk := os.read(fd, 65536):\n"
    "        text += chunk\n"
    "    os.close(fd)\n"
    "    for line in text.decode('ascii', 'replace').splitlines():\n"
    "        f = line.split()\n"
    "        if len(f) != 5 or not all(x.isdigit() for x in f):\n"
    "            continue\n"
    "        size, avail = int(f[1]), int(f[4])\n"
    "        if size == 16:\n"
    "            make = object\n"
    "        elif size == 32:\n"
    "            make = float\n"
    "        else:\n"
    "            make = lambda n=size - 33: bytes(n)\n"
    "        _pool_filler.append([make() for _ in range(avail)])\n"
    "\n"
    /* In a new worker: its environment (the keys to drop and pairs to set,
     * worked out by env_diff in the zygote so the child touches only those),
     * a __main__ without what a preload added, fresh seeds for numpy's
     * global generator (a whole MT19937 state set in place, which dirties
     * fewer pages than seed()), and the GC back on. */
    "def env_diff(env):\n"
    "    eb = os.environb\n"
    "    new = {}\n"
    "    for kv in env:\n"
    "        k, sep, v = kv.partition(b'=')\n"
    "        if sep and k:\n"
    "            new[k] = v\n"
    "    return ([k for k in eb if k not in new],\n"
    "            [(k, v) for k, v in new.items() if eb.get(k) != v])\n"
    "\n"
    "def child_setup(drop, add, main_keys):\n"
    "    eb = os.environb\n"
    "    for k in drop:\n"
    "        del eb[k]\n"
    "    for k, v in add:\n"
    "        eb[k] = v\n"
    "    d = sys.modules['__main__'].__dict__\n"
    "    for k in list(d):\n"
    "        if k not in main_keys:\n"
    "            del d[k]\n"
    "    r = sys.modules.get('numpy.random')\n"
    "    if r is not None:\n"
    "        try:\n"
    "            key = sys.modules['numpy'].frombuffer(os.urandom(2496), dtype='uint32')\n"
    "            r.set_state(('MT19937', key, 624, 0, 0.0))\n"
    "        except Exception:\n"
    "            try:\n"
    "                r.seed()\n"
    "            except Exception:\n"
    "                pass\n"
    "    gc.enable()\n";

static PyObject *fn_preload, *fn_child_setup, *fn_env_diff, *fn_fill_pools, *main_keys;

/* GIL held. Compiles the helpers into a private module; records the names
 * __main__ holds before any preload ran. */
static void helpers_init(void)
{
    PyObject *mod = PyModule_New("_ctxd_zygote");
    PyObject *d = mod ? PyModule_GetDict(mod) : NULL;
    PyObject *code = Py_CompileString(helper_src, "<ctxd-zygote>", Py_file_input);
    PyObject *r = d && code && PyDict_SetItemString(d, "__builtins__", PyEval_GetBuiltins()) == 0
                      ? PyEval_EvalCode(code, d, d)
                      : NULL;
    Py_XDECREF(code);
    Py_XDECREF(r);
    fn_preload = r ? PyDict_GetItemString(d, "preload") : NULL;
    fn_child_setup = r ? PyDict_GetItemString(d, "child_setup") : NULL;
    fn_fill_pools = r ? PyDict_GetItemString(d, "fill_pools") : NULL;
    fn_env_diff = r ? PyDict_GetItemString(d, "env_diff") : NULL;
    PyObject *main_mod = PyImport_AddModule("__main__"); /* borrowed */
    main_keys = main_mod ? PyFrozenSet_New(PyModule_GetDict(main_mod)) : NULL;
    if (!fn_preload || !fn_child_setup || !fn_fill_pools || !fn_env_diff || !main_keys) {
        wrk_log("zygote: helper set-up failed");
        PyErr_Print();
        _exit(1);
    }
    Py_INCREF(fn_preload);
    Py_INCREF(fn_child_setup);
    Py_INCREF(fn_fill_pools);
    Py_INCREF(fn_env_diff);
    Py_DECREF(mod);
}

/* A module name we are willing to import: dotted identifiers. */
static bool module_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > 200 || s[0] == '.' || s[n - 1] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
                  (ch >= '0' && ch <= '9' && i > 0 && s[i - 1] != '.') ||
                  (ch == '.' && s[i - 1] != '.');
        if (!ok)
            return false;
    }
    return true;
}

/* GIL held. Imports the comma-separated list; fills the two Python lists. */
static void do_preloads(const char *list, PyObject **loaded, PyObject **skipped)
{
    PyObject *want = PyList_New(0);
    PyObject *bad = PyList_New(0);
    if (!want || !bad)
        goto fail;
    const char *p = list ? list : "";
    while (*p) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        const char *s = p, *e = end;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e > s) {
            size_t n = (size_t)(e - s);
            PyObject *name = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "replace");
            if (!name || PyList_Append(module_name_ok(s, n) ? want : bad, name) < 0)
                goto fail;
            Py_DECREF(name);
        }
        p = comma ? comma + 1 : end;
    }
    PyObject *r = PyObject_CallFunctionObjArgs(fn_preload, want, NULL);
    if (!r || !PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2)
        goto fail;
    *loaded = PyTuple_GET_ITEM(r, 0);
    *skipped = PyTuple_GET_ITEM(r, 1);
    Py_INCREF(*loaded);
    Py_INCREF(*skipped);
    Py_DECREF(r);
    if (PySequence_InPlaceConcat(*skipped, bad) == NULL)
        goto fail;
    Py_DECREF(*skipped); /* InPlaceConcat returned a new reference to it */
    Py_DECREF(want);
    Py_DECREF(bad);
    return;
fail:
    wrk_log("zygote: preloading failed");
    PyErr_Print();
    _exit(1);
}

/* ---- messages to the supervisor ------------------------------------------- */

static void zsend(const proto_buf *b)
{
    for (;;) {
        if (send(ZYGOTE_FD, b->data, b->len, MSG_NOSIGNAL) >= 0)
            return;
        if (errno != EINTR)
            _exit(0); /* the supervisor is gone */
    }
}

static void put_strlist(proto_buf *b, PyObject *list)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    proto_put_array(b, (uint32_t)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(list, i), &len);
        if (!s) {
            PyErr_Clear();
            s = "?", len = 1;
        }
        proto_put_strn(b, s, (size_t)len);
    }
}

static void send_hello(PyObject *loaded, PyObject *skipped)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_put_map(&b, 4);
    proto_put_str(&b, "t");
    proto_put_str(&b, "zygote");
    proto_put_str(&b, "pid");
    proto_put_uint(&b, (uint64_t)getpid());
    proto_put_str(&b, "loaded");
    put_strlist(&b, loaded);
    proto_put_str(&b, "skipped");
    put_strlist(&b, skipped);
    zsend(&b);
    proto_buf_free(&b);
}

static void reply(pid_t pid, const char *failure)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_put_map(&b, 2);
    proto_put_str(&b, "t");
    proto_put_str(&b, failure ? "failed" : "spawned");
    proto_put_str(&b, failure ? "message" : "pid");
    if (failure)
        proto_put_str(&b, failure);
    else
        proto_put_uint(&b, (uint64_t)pid);
    zsend(&b);
    proto_buf_free(&b);
}

/* ---- making a worker ------------------------------------------------------ */

/* A sandbox worker keeps no supplementary group of the daemon's (root's
 * gid 0 would follow it into its namespace, where setgroups is denied).
 * The raw call: this may run in a vfork child. */
static void clear_groups(int ns_flags)
{
    if (ns_flags && geteuid() == 0)
        (void)syscall(SYS_setgroups, 0, NULL);
}

/* Forks twice, so the worker is reparented to the supervisor (a child
 * subreaper) and born in the namespaces ns_flags unshares. The worker's pid
 * with *a_pid the intermediate to reap (-1: none) in the caller; 0 in the
 * worker, *a_pid its first parent; -1 with errno on failure. */
static pid_t double_fork(pid_t *a_pid, int ns_flags)
{
    int p[2];
    *a_pid = -1;
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t a = fork();
    if (a == 0) {
        pid_t self = getpid();
        clear_groups(ns_flags);
        pid_t w = ns_flags && unshare(ns_flags) < 0 ? -1 : fork();
        if (w == 0) {
            close(p[0]);
            close(p[1]);
            *a_pid = self;
            return 0;
        }
        int32_t v = w > 0 ? (int32_t)w : -(int32_t)errno;
        if (write(p[1], &v, sizeof v) < 0)
            _exit(1);
        _exit(0);
    }
    int e = errno;
    close(p[1]);
    if (a < 0) {
        close(p[0]);
        errno = e;
        return -1;
    }
    *a_pid = a;
    int32_t v = 0;
    ssize_t n;
    do
        n = read(p[0], &v, sizeof v);
    while (n < 0 && errno == EINTR);
    close(p[0]);
    if (n != (ssize_t)sizeof v || v <= 0) {
        errno = n == (ssize_t)sizeof v ? (int)-v : EIO;
        return -1;
    }
    return (pid_t)v;
}

/* double_fork with the intermediate made by vfork, sharing the zygote's
 * memory while the zygote waits. Only for a process with a single thread,
 * which vfork suspends. */
static pid_t vfork_double_fork(pid_t *a_pid, int ns_flags)
{
    volatile pid_t w_pid = -1, a_self = 0;
    volatile int w_errno = 0;
    pid_t a = vfork();
    if (a == 0) {
        a_self = getpid();
        clear_groups(ns_flags);
        pid_t w = ns_flags && unshare(ns_flags) < 0 ? -1 : fork();
        if (w == 0) {
            *a_pid = a_self;
            return 0;
        }
        w_errno = errno;
        w_pid = w;
        _exit(0);
    }
    *a_pid = a;
    if (a < 0)
        return -1;
    if (w_pid <= 0)
        errno = w_errno ? w_errno : EIO;
    return w_pid > 0 ? w_pid : -1;
}

static unsigned long long title_start, title_end; /* 0: not read yet */

/* The argument area's bounds, read once by the zygote before it forks, so a
 * new worker's title costs no read of /proc; its children keep the area. */
static bool title_area_known(void)
{
    if (!title_end && wrk_log_stat_range(47, &title_start, &title_end) < 0)
        title_start = title_end = 0;
    return title_end > title_start;
}

/* Shows the new worker as "ctxd-worker NAME" in ps (/proc/PID/cmdline),
 * not as a zygote: the argument area is rewritten in place (truncated to its
 * size; the supervisor gives the zygote a blank argument for room). */
static void set_title(const char *name, size_t n)
{
    if (!title_area_known() || title_end - title_start > 65536)
        return;
    char *area = (char *)(uintptr_t)title_start;
    size_t size = (size_t)(title_end - title_start);
    char title[256];
    int t =
        snprintf(title, sizeof title, "ctxd-worker%c%.*s", '\0', (int)(n > 200 ? 200 : n), name);
    size_t k = t < 0 ? 0 : (size_t)t < size - 1 ? (size_t)t : size - 1;
    memset(area, 0, size);
    memcpy(area, title, k);
}

static void reap(pid_t pid)
{
    if (pid <= 0)
        return;
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* In the new worker, C level: own process group, the five descriptors on
 * their numbers (first lifted above 9, so no dup2 overwrites another), the
 * channel, a private copy of stderr for diagnostics, crash handlers. Fails
 * with exit 127 (the supervisor reports "could not start"). */
static void become_worker(const int fds[NEW_FDS])
{
    setpgid(0, 0);
    int lifted[NEW_FDS];
    for (int i = 0; i < NEW_FDS; i++) {
        lifted[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
        if (lifted[i] < 0)
            _exit(127);
        close(fds[i]);
    }
    for (int i = 0; i < NEW_FDS; i++) {
        if (dup2(lifted[i], fd_targets[i]) < 0)
            _exit(127);
        close(lifted[i]);
    }
    wrk_chan_init(3);
    int err_fd = fcntl(2, F_DUPFD_CLOEXEC, 6);
    if (err_fd >= 0) {
        wrk_log_init(err_fd);
        mem_set_fatal_fd(err_fd);
    }
    wrk_boot_crash_handlers();
}

/* Waits until the intermediate process has exited and the worker belongs to
 * the supervisor, then arms the parent-death signal (armed earlier, the
 * intermediate's exit would fire it). A worker that ends up anywhere else
 * (the supervisor died meanwhile) exits. */
static void await_supervisor(pid_t a_pid)
{
    struct timespec pause = {0, 20 * 1000};
    for (;;) {
        pid_t pp = getppid();
        if (pp == sup_pid)
            break;
        if (pp != a_pid) {
            wrk_log("the supervisor is gone");
            _exit(1);
        }
        nanosleep(&pause, NULL);
    }
    wrk_boot_watch_parent(sup_pid);
}

/* A new worker (not a sandbox's: sbx_ns_enter waits itself) waits until
 * the zygote has put it into its cgroup. */
static void await_go(int go_fd)
{
    char go = 0;
    ssize_t got;
    do
        got = read(go_fd, &go, 1);
    while (got < 0 && errno == EINTR);
    close(go_fd);
    if (got != 1 || go != 'g')
        _exit(1);
}

/* In an unsafe-tier worker (unconfined, the daemon's uid): its pages are
 * offered to the kernel's same-page merging (KSM). Never for a confined or
 * static worker, whose merged pages would let one tenant time another's
 * writes; quietly nothing on a kernel without KSM. */
static void merge_pages(const sbx_policy *p)
{
    if (merge_wanted && !p->confined && !p->is_static && !p->spec.has_uid)
        (void)prctl(SBX_PR_SET_MEMORY_MERGE, 1, 0, 0, 0);
}

/* Serves one spawn request. Returns true in the new worker. */
static bool spawn_one(const uint8_t *msg, size_t len, int *fds, int nfds)
{
    proto_doc doc;
    proto_error err;
    const char *bad = NULL;
    static const proto_field fields[] = {
        {"name", PF_STR, true, 0},
        {"cwd", PF_STR, true, 4095},
        {"env", PF_ARRAY, true, 0},
        {"cgroup", PF_STR, false, SBX_CGROUP_NAME_MAX - 1},
    };
    if (proto_decode(&doc, msg, len, &err) < 0) {
        reply(0, "undecodable request");
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return false;
    }
    const proto_val *m = &doc.nodes[0];
    const proto_val *env = proto_map_get(m, "env");
    const proto_val *name = proto_map_get(m, "name");
    char title[PROTO_MAX_NAME + 1] = "";
    if (!proto_str_eq(proto_map_get(m, "t"), "spawn"))
        bad = "not a spawn request";
    else if (proto_check(m, fields, sizeof fields / sizeof fields[0], &err) < 0)
        bad = err.msg;
    else if (nfds != NEW_FDS)
        bad = "a spawn request carries exactly 5 descriptors";
    for (uint32_t i = 0; !bad && i < env->n; i++)
        if (env->as.items[i].kind != PROTO_BIN && env->as.items[i].kind != PROTO_STR)
            bad = "env items must be bin";
    PyObject *envlist = NULL;
    char *cwd = NULL;
    char cgroup[SBX_CGROUP_NAME_MAX] = "";
    sbx_policy policy = {0};
    for (uint32_t i = 0; !bad && i < env->n; i++) {
        const proto_val *kv = &env->as.items[i];
        if (kv->n > 13 && memcmp(kv->as.s, "CTXD_SANDBOX=", 13) == 0) {
            char *text = mem_strndup(kv->as.s + 13, kv->n - 13);
            static char why[160] = "CTXD_SANDBOX: ";
            if (sbx_policy_parse(&policy, text, why + 14, sizeof why - 14) < 0)
                bad = why;
            free(text);
        } else if (kv->n > 10 && memcmp(kv->as.s, "CTXD_SITE=", 10) == 0) {
            free(policy.site);
            policy.site = mem_strndup(kv->as.s + 10, kv->n - 10);
        }
    }
    if (!bad) {
        snprintf(title, sizeof title, "%.*s", (int)name->n, name->as.s);
        cwd = proto_strdup(proto_map_get(m, "cwd"));
        const proto_val *cg = proto_map_get(m, "cgroup");
        if (cg)
            snprintf(cgroup, sizeof cgroup, "%.*s", (int)cg->n, cg->as.s);
        envlist = PyList_New((Py_ssize_t)env->n);
        for (uint32_t i = 0; envlist && i < env->n; i++) {
            const proto_val *kv = &env->as.items[i];
            PyObject *item = PyBytes_FromStringAndSize(kv->as.s, (Py_ssize_t)kv->n);
            if (!item)
                Py_CLEAR(envlist);
            else
                PyList_SET_ITEM(envlist, (Py_ssize_t)i, item);
        }
        /* What the environment must lose and gain, worked out here: in the
         * child every object it touches costs a copied page. */
        PyObject *diff = envlist ? PyObject_CallFunctionObjArgs(fn_env_diff, envlist, NULL) : NULL;
        Py_CLEAR(envlist);
        if (diff && PyTuple_Check(diff) && PyTuple_GET_SIZE(diff) == 2)
            envlist = diff;
        else
            Py_XDECREF(diff);
        if (!envlist) {
            PyErr_Clear();
            bad = "out of memory";
        }
    }
    proto_doc_free(&doc);
    if (bad) {
        reply(0, bad);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        free(cwd);
        Py_XDECREF(envlist);
        sbx_policy_free(&policy);
        return false;
    }

    int ns_flags = sbx_ns_flags(&policy);
    int go[2] = {-1, -1};
    if (pipe2(go, O_CLOEXEC) < 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "pipe: %s", strerror(errno));
        reply(0, msg);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        free(cwd);
        Py_DECREF(envlist);
        sbx_policy_free(&policy);
        return false;
    }
    fflush(NULL);
    PyOS_BeforeFork();
    pid_t a_pid;
    pid_t w = one_thread ? vfork_double_fork(&a_pid, ns_flags) : double_fork(&a_pid, ns_flags);
    if (w == 0) {
        close(go[1]);
        if (ns_flags)
            sbx_ns_enter(go[0], &policy, cwd);
        else
            await_go(go[0]);
        merge_pages(&policy);
        sbx_policy_free(&policy);
        become_worker(fds);
        set_title(title, strlen(title));
        PyOS_AfterFork_Child();
        int dir = sbx_path_open(cwd, O_PATH | O_DIRECTORY, NULL, 0);
        if (dir < 0 || fchdir(dir) < 0)
            _exit(126); /* reported as "cannot enter directory" */
        close(dir);
        free(cwd);
        PyObject *r = PyObject_CallFunctionObjArgs(fn_child_setup, PyTuple_GET_ITEM(envlist, 0),
                                                   PyTuple_GET_ITEM(envlist, 1), main_keys, NULL);
        if (!r) {
            wrk_log("new worker: set-up failed");
            PyErr_Print();
            _exit(1);
        }
        Py_DECREF(r);
        Py_DECREF(envlist);
        (void)PyEval_SaveThread();
        wrk_output_restart();
        if (ns_flags) /* its parent (outside the namespace: getppid() 0) is already the
                         supervisor */
            wrk_boot_watch_parent(getppid());
        else
            await_supervisor(a_pid);
        return true;
    }
    int e = errno;
    PyOS_AfterFork_Parent();
    for (int i = 0; i < NEW_FDS; i++)
        close(fds[i]);
    free(cwd);
    Py_DECREF(envlist);
    char failure[256] = "";
    if (w > 0) {
        if (ns_flags) {
            /* The intermediate is gone before "go", so the worker's parent
             * is the supervisor when it arms its parent-death signal. */
            reap(a_pid);
            a_pid = -1;
            (void)sbx_ns_prepare(w, &policy, failure, sizeof failure);
        }
        /* Its cgroup before it runs anything: whatever it starts stays in
         * it. Only a tier with limits needs it to work (a non-root daemon
         * may have no cgroups to give). */
        sbx_cgroup_limits lim = sbx_policy_limits(&policy);
        const char *failed;
        if (!failure[0] && cgroup[0] && sbx_cgroup_place(w, cgroup, &lim, &failed) < 0 &&
            (lim.memory_bytes || lim.max_tasks))
            snprintf(failure, sizeof failure,
                     "cannot put the worker into its cgroup (memory_bytes, max_processes: %s): %s",
                     failed, strerror(errno));
        if (failure[0] || write(go[1], "g", 1) != 1) {
            if (!failure[0])
                snprintf(failure, sizeof failure, "cannot start the worker: %s", strerror(errno));
            kill(w, SIGKILL);
        }
    } else {
        snprintf(failure, sizeof failure, "%s: %s",
                 ns_flags ? "sandbox namespaces (unshare/fork)" : "fork", strerror(e));
    }
    close(go[0]);
    close(go[1]);
    sbx_policy_free(&policy);
    reply(failure[0] ? 0 : w, failure[0] ? failure : NULL);
    reap(a_pid);
    return false;
}

/* Collects SCM_RIGHTS descriptors (close-on-exec) into fds; extra ones are
 * closed. Returns how many were kept. */
static int collect_fds(struct msghdr *mh, int *fds, int max)
{
    int k = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof fd, sizeof fd);
            if (k < max)
                fds[k++] = fd;
            else
                close(fd);
        }
    }
    return k;
}

/* The request loop. Returns only in a new worker. */
static void serve(void)
{
    uint8_t *buf = mem_alloc(ZYGOTE_MAX_MSG);
    for (;;) {
        struct iovec iov = {buf, ZYGOTE_MAX_MSG};
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(8 * sizeof(int))];
        } ctl;
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.buf,
                            .msg_controllen = sizeof ctl.buf};
        ssize_t n = recvmsg(ZYGOTE_FD, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(n == 0 ? 0 : 1); /* the supervisor closed its end */
        int fds[8];
        int nfds = collect_fds(&mh, fds, 8);
        if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            reply(0, "request too large");
            continue;
        }
        if (spawn_one(buf, (size_t)n, fds, nfds)) {
            free(buf);
            return;
        }
    }
}

void wrk_zygote_main(int argc, char **argv)
{
    const char *preload = NULL;
    for (int i = 2; i < argc; i++)
        if (strncmp(argv[i], "--preload=", 10) == 0)
            preload = argv[i] + 10;
        else if (strcmp(argv[i], "--merge-pages") == 0)
            merge_wanted = true;
    (void)title_area_known(); /* inherited by every worker forked */

    /* As in every worker: SIGINT blocked in the main thread except during a
     * run (children inherit this mask). */
    sigset_t intr;
    sigemptyset(&intr);
    sigaddset(&intr, SIGINT);
    pthread_sigmask(SIG_BLOCK, &intr, NULL);
    signal(SIGINT, SIG_DFL);
    sup_pid = getppid();
    wrk_boot_watch_parent(sup_pid);

    int type = 0;
    socklen_t tl = sizeof type;
    if (getsockopt(ZYGOTE_FD, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_SEQPACKET) {
        wrk_log("zygote: fd %d is not the supervisor's SOCK_SEQPACKET socket", ZYGOTE_FD);
        _exit(2);
    }
    (void)fcntl(ZYGOTE_FD, F_SETFD, FD_CLOEXEC);
    /* Workers start single-threaded: numerical libraries read these when
     * they are loaded (here, for the preloads). */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("MKL_NUM_THREADS", "1", 1);
    setvbuf(stdout, NULL, _IOLBF, 0);

    wrk_boot_python();
    helpers_init();
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *r = gc ? PyObject_CallMethod(gc, "disable", NULL) : NULL;
    if (!r) {
        PyErr_Print();
        _exit(1);
    }
    Py_DECREF(r);
    PyObject *loaded = NULL, *skipped = NULL;
    do_preloads(preload, &loaded, &skipped);
    wrk_boot_session();
    /* Before the pools are filled: what it leaves allocated is the zygote's. */
    r = wrk_py_call(WRK_PY_WARM, PyTuple_New(0));
    if (!r) { /* a worker's first run only faults more without it */
        wrk_log("zygote: the compiler's warm-up failed");
        PyErr_Print();
    }
    Py_XDECREF(r);
    r = PyObject_CallFunctionObjArgs(fn_fill_pools, NULL);
    if (!r) { /* a worker is only bigger without it */
        wrk_log("zygote: filling the allocator's pools failed");
        PyErr_Print();
    }
    Py_XDECREF(r);
    /* Everything allocated so far stays out of the collector's reach, so
     * collections in the workers do not touch (and copy) the shared pages. */
    r = PyObject_CallMethod(gc, "freeze", NULL);
    if (!r) {
        PyErr_Print();
        _exit(1);
    }
    Py_DECREF(r);
    Py_DECREF(gc);
    one_thread = wrk_log_thread_count() == 1;
    if (!one_thread)
        wrk_log("zygote: a preload started threads; workers will not have them, and the "
                "zygote forks without vfork");
    send_hello(loaded, skipped);
    Py_DECREF(loaded);
    Py_DECREF(skipped);
    serve();
}

/* ---- forking a live worker (ctx.fork) ------------------------------------- */

static void send_fork_reply(pid_t pid, const char *failure)
{
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_put_map(&b, 3);
    proto_put_str(&b, "t");
    proto_put_str(&b, failure ? "fork_failed" : "forked");
    proto_put_str(&b, "run_id");
    proto_put_uint(&b, wrk_run_id());
    proto_put_str(&b, failure ? "message" : "pid");
    if (failure)
        proto_put_str(&b, failure);
    else
        proto_put_uint(&b, (uint64_t)pid);
    proto_frame_end(&b, start);
    wrk_chan_send(&b);
    proto_buf_free(&b);
}

bool wrk_zygote_fork_live(const proto_val *frame)
{
    const proto_val *name = proto_map_get(frame, "name");
    char title[PROTO_MAX_NAME + 1] = "";
    if (name && name->kind == PROTO_STR)
        snprintf(title, sizeof title, "%.*s", (int)name->n, name->as.s);
    int fds[NEW_FDS];
    int n = wrk_chan_take_fds(fds, NEW_FDS);
    if (n != NEW_FDS) {
        for (int i = 0; i < n; i++)
            close(fds[i]);
        send_fork_reply(0, "the fork frame did not carry its 5 descriptors");
        return false;
    }
    sup_pid = getppid();
    PyGILState_STATE gil = PyGILState_Ensure();
    fflush(NULL);
    PyOS_BeforeFork();
    wrk_output_fork_prepare();
    pid_t a_pid;
    pid_t w = double_fork(&a_pid, 0);
    if (w == 0) {
        /* The fork handlers have reset the locks and dropped the old
         * channel; Python's state is the source's, globals and all. */
        become_worker(fds);
        set_title(title, strlen(title));
        PyOS_AfterFork_Child();
        PyGILState_Release(gil);
        wrk_output_restart();
        await_supervisor(a_pid);
        return true;
    }
    int e = errno;
    wrk_output_fork_parent();
    PyOS_AfterFork_Parent();
    PyGILState_Release(gil);
    for (int i = 0; i < NEW_FDS; i++)
        close(fds[i]);
    /* Reaped first: the copy is then the supervisor's child, which the
     * supervisor checks before it believes the pid. */
    reap(a_pid);
    if (w > 0) {
        send_fork_reply(w, NULL);
    } else {
        char msg[160];
        snprintf(msg, sizeof msg, "fork: %s", strerror(e));
        send_fork_reply(0, msg);
    }
    return false;
}

void wrk_zygote_bind(const proto_val *frame)
{
    const proto_val *name = proto_map_get(frame, "name");
    set_title(name->as.s, name->n);
    char *cwd = proto_strdup(proto_map_get(frame, "cwd"));
    int dir = sbx_path_open(cwd, O_PATH | O_DIRECTORY, NULL, 0);
    if (dir < 0 || fchdir(dir) < 0)
        _exit(126); /* reported as "cannot enter directory" */
    close(dir);
    free(cwd);
    /* The supervisor takes an exit 126 before the next `start` for this
     * bind's failure: that start must not wait for the run's end. */
    wrk_output_start_now();
}
