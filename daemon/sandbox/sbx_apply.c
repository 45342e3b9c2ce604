/* sbx_apply: the `local` tier's confinement, applied by the worker to
 * itself before its first `ready` (and inherited by ctx.fork copies and by
 * every process user code starts). Order: read and remove CTXD_SANDBOX;
 * rlimits; the pids cgroup (needs /sys/fs/cgroup writable, so before
 * Landlock); the Python import hook and CPU handler; umask 077; under a
 * root daemon, while still root, private IPC and mount namespaces with its
 * own /dev/shm; Landlock (write roots, read roots or the default read set,
 * signal and abstract-socket scoping); the context's uid; no_new_privs;
 * seccomp last.
 *
 * Every step that was asked for and cannot be applied ends the worker
 * (exit 1, reason in the daemon's log): ctx.create then fails instead of
 * returning a context weaker than its policy. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sbx.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <seccomp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"
#include "sbx_host.h"

/* ---- the policy as the supervisor sent it ------------------------------ */

static sbx_policy pol;

static void free_list(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

void sbx_policy_free(sbx_policy *p)
{
    sbx_spec_free(&p->spec);
    free_list(p->py_paths);
    free(p->site);
    memset(p, 0, sizeof *p);
}

int sbx_policy_parse(sbx_policy *p, const char *text, char *why, size_t n)
{
    char *site = p->site;
    p->site = NULL;
    sbx_policy_free(p);
    p->site = site;
    p->active = true;
    if (sbx_spec_parse(&p->spec, text, why, n) < 0)
        return -1;
    p->is_static = p->spec.tier == SBX_TIER_STATIC;
    p->sandbox = p->spec.tier == SBX_TIER_SANDBOX;
    p->confined = p->spec.tier == SBX_TIER_LOCAL || p->sandbox;
    return 0;
}

static _Noreturn void fail(const char *what)
{
    sbx_host_log("policy: cannot enforce %s: %s", what, strerror(errno));
    _exit(1);
}

/* ---- rlimits, cgroup ----------------------------------------------------- */

static void set_limit(int res, unsigned long long v, const char *what)
{
    struct rlimit rl = {(rlim_t)v, (rlim_t)v};
    if (setrlimit(res, &rl) < 0)
        fail(what);
}

/* An AddressSanitizer build (the integration_asan test) reserves terabytes
 * of address space for its shadow memory: RLIMIT_AS would break it. Such
 * a build keeps only the context's memory cgroup for memory_bytes (which
 * every confined tier has; RLIMIT_AS adds a MemoryError per process). */
static bool address_sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return true;
#else
    return false;
#endif
#else
    return false;
#endif
}

/* ---- Landlock ----------------------------------------------------------- */

/* The installed kernel headers predate ABI 3..6: the values are the
 * kernel's (include/uapi/linux/landlock.h). */
struct sbx_ll_ruleset {
    uint64_t handled_access_fs, handled_access_net, scoped;
};
struct sbx_ll_path {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));
#define LL_FS_TRUNCATE (1ULL << 14)
#define LL_SCOPE_ABSTRACT_UNIX (1ULL << 0)
#define LL_SCOPE_SIGNAL (1ULL << 1)
#define LL_WRITE                                                                                   \
    ((1ULL << 1) | (1ULL << 4) | (1ULL << 5) | (1ULL << 6) | (1ULL << 7) | (1ULL << 8) |           \
     (1ULL << 9) | (1ULL << 10) | (1ULL << 11) | (1ULL << 12))
#define LL_REFER (1ULL << 13)

#define LL_READ ((1ULL << 0) | (1ULL << 2) | (1ULL << 3)) /* execute, read file, dir */
#define LL_FILE_ONLY ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | LL_FS_TRUNCATE)

/* With filesystem_read_roots, and in every local context without them
 * (sup_policy.c then sends an empty list): what CPython, its extension
 * modules and numpy read besides the installation (sys.path, the
 * prefixes). A missing one is skipped. /proc stays readable (another
 * process's entries are still guarded by Landlock's ptrace restriction). */
static const char *const system_read[] = {
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/mime.types",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/python3.11",
    "/etc/matplotlibrc",
    /* as the sandbox tier's root has them (sbx_ns.c) */
    "/etc/alternatives",
    "/etc/fonts",
    "/etc/python3",
    "/etc/timezone",
    "/etc/debian_version",
    "/etc/os-release",
    "/etc/services",
    "/etc/protocols",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/libx32",
    "/dev/full",
    "/proc",
    "/sys/devices/system/cpu",
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
    NULL,
};

static void add_rule(int rs, const char *path, uint64_t access, bool required, const char *what)
{
    struct sbx_ll_path pb = {access, -1};
    /* A root the client named is opened without following links; the
     * system's own paths (/lib -> usr/lib) as they are. */
    pb.parent_fd = required ? sbx_path_open(path, O_PATH, NULL, 0) : open(path, O_PATH | O_CLOEXEC);
    if (pb.parent_fd < 0) {
        if (required)
            fail(what);
        return;
    }
    struct stat st;
    if (fstat(pb.parent_fd, &st) == 0 && !S_ISDIR(st.st_mode))
        pb.allowed_access &= LL_FILE_ONLY;
    if (pb.allowed_access &&
        syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
        fail(what);
    close(pb.parent_fd);
}

/* Builds the Landlock ruleset (its roots opened now, while the worker may
 * still reach them as the daemon's uid); landlock_apply enforces it once
 * the worker is its own uid. -1: nothing to enforce. */
static int landlock_prepare(void)
{
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) {
        if (!pol.spec.write_roots.set && !pol.spec.read_roots.set)
            return -1; /* only the scoping was wanted: best effort */
        fail("filesystem roots (Landlock unavailable)");
    }
    struct sbx_ll_ruleset attr = {0, 0, 0};
    uint64_t write = LL_WRITE | (abi >= 2 ? LL_REFER : 0) | (abi >= 3 ? LL_FS_TRUNCATE : 0);
    if (pol.spec.write_roots.set)
        attr.handled_access_fs |= write;
    if (pol.spec.read_roots.set)
        attr.handled_access_fs |= LL_READ;
    /* ABI 6: no signals to processes outside this worker's domain (the
     * supervisor, other contexts) and no abstract unix sockets outside it. */
    if (abi >= 6)
        attr.scoped = LL_SCOPE_SIGNAL | LL_SCOPE_ABSTRACT_UNIX;
    if (!attr.handled_access_fs && !attr.scoped)
        return -1;
    size_t size = abi >= 6 ? sizeof attr : abi >= 4 ? 16 : 8;
    int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (rs < 0)
        fail("Landlock ruleset");
    uint64_t all = attr.handled_access_fs;
    for (size_t i = 0; pol.spec.write_roots.set && pol.spec.write_roots.v[i]; i++)
        add_rule(rs, pol.spec.write_roots.v[i], all, true, "filesystem_write_roots (a root)");
    for (size_t i = 0; pol.spec.read_roots.set && pol.spec.read_roots.v[i]; i++)
        add_rule(rs, pol.spec.read_roots.v[i], all & LL_READ, true,
                 "filesystem_read_roots (a root)");
    if (pol.spec.read_roots.set) {
        for (size_t i = 0; system_read[i]; i++)
            add_rule(rs, system_read[i], LL_READ, false, "filesystem_read_roots (system)");
        for (size_t i = 0; pol.py_paths && pol.py_paths[i]; i++)
            add_rule(rs, pol.py_paths[i], LL_READ, false, "filesystem_read_roots (sys.path)");
        /* its own directory (the worker runs in it) */
        add_rule(rs, ".", LL_READ, false, "filesystem_read_roots (its directory)");
    }
    /* Writing to /dev/null is not writing to the filesystem. */
    if (pol.spec.write_roots.set)
        add_rule(rs, "/dev/null", all & LL_FILE_ONLY, false, "/dev/null");
    return rs;
}

static void landlock_apply(int rs)
{
    if (rs < 0)
        return;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        fail("no_new_privs");
    if (syscall(SYS_landlock_restrict_self, rs, 0) < 0)
        fail("Landlock restrict_self");
    close(rs);
}

/* ---- the worker's identity (local tier, root daemon) ------------------ */

/* While the worker is still root (local tier, root daemon): its own IPC
 * namespace (SysV IPC private per context) and its own mount namespace,
 * receiving the host's mounts but sending none back, with a tmpfs of its
 * own on /dev/shm (POSIX shared memory and multiprocessing's semaphores),
 * the context's uid's alone (mode 0700), memory_bytes / 4 at most (256 MiB
 * by default, as the sandbox tier's): no context sees another's, and it
 * goes with the worker's last process. */
static void private_namespaces(void)
{
    if (unshare(CLONE_NEWIPC | CLONE_NEWNS) < 0)
        fail("private SysV IPC and mount namespaces");
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
        fail("a mount namespace receiving only");
    unsigned long long size = (pol.spec.memory_bytes ? pol.spec.memory_bytes : 1ULL << 30) / 4;
    char opts[96];
    snprintf(opts, sizeof opts, "mode=0700,uid=%u,gid=%u,size=%llu", pol.spec.ident.uid,
             pol.spec.ident.gid, size);
    if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        fail("a private /dev/shm");
}

/* Becomes the context's own uid/gid (with the workers' group) for good:
 * no capability in any set, the bounding set empty, root not special on
 * exec, no real-time scheduling. */
static void drop_identity(void)
{
    if (prctl(PR_SET_SECUREBITS,
              SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                  SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
              0, 0, 0) < 0)
        fail("securebits");
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            fail("drop the capability bounding set");
    (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    gid_t groups[1] = {(gid_t)pol.spec.ident.group};
    if (setgroups(pol.spec.ident.group ? 1 : 0, groups) < 0 ||
        setresgid(pol.spec.ident.gid, pol.spec.ident.gid, pol.spec.ident.gid) < 0 ||
        setresuid(pol.spec.ident.uid, pol.spec.ident.uid, pol.spec.ident.uid) < 0)
        fail("the context's own uid/gid");
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    if (syscall(SYS_capset, &hdr, data) < 0 || syscall(SYS_capget, &hdr, data) < 0 ||
        data[0].permitted || data[1].permitted || getuid() != pol.spec.ident.uid ||
        geteuid() != pol.spec.ident.uid || getgid() != pol.spec.ident.gid) {
        errno = EPERM;
        fail("the context's own uid/gid (capabilities remain)");
    }
    set_limit(RLIMIT_RTPRIO, 0, "RLIMIT_RTPRIO");
    /* A uid change makes the process undumpable, so its /proc/self would
     * belong to root and be closed to itself (fd/, environ): it is its
     * own uid's now (ptrace stays refused by seccomp, no core dumps). */
    if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
        fail("PR_SET_DUMPABLE");
}

/* GIL held: the interpreter's own directories, readable under read roots. */
static void collect_py_paths(void)
{
    PyObject *sys = PyImport_ImportModule("sys");
    PyObject *l = PyList_New(0);
    static const char *const attrs[] = {"prefix", "base_prefix", "exec_prefix", "base_exec_prefix"};
    for (size_t i = 0; sys && l && i < 4; i++) {
        PyObject *v = PyObject_GetAttrString(sys, attrs[i]);
        if (v && PyUnicode_Check(v))
            PyList_Append(l, v);
        Py_XDECREF(v);
    }
    PyObject *path = sys ? PyObject_GetAttrString(sys, "path") : NULL;
    for (Py_ssize_t i = 0; path && PyList_Check(path) && i < PyList_GET_SIZE(path); i++) {
        PyObject *v = PyList_GET_ITEM(path, i);
        if (PyUnicode_Check(v) && PyUnicode_GetLength(v) > 0)
            PyList_Append(l, v);
    }
    Py_XDECREF(path);
    Py_XDECREF(sys);
    PyErr_Clear();
    Py_ssize_t n = l ? PyList_GET_SIZE(l) : 0;
    pol.py_paths = mem_calloc((size_t)n + 1, sizeof *pol.py_paths);
    size_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *s = PyUnicode_AsUTF8(PyList_GET_ITEM(l, i));
        if (s && s[0] == '/')
            pol.py_paths[k++] = mem_strdup(s);
        PyErr_Clear();
    }
    Py_XDECREF(l);
}

/* ---- seccomp ------------------------------------------------------------- */

/* The local tier's filter: default allow (the worker runs CPython, numpy,
 * whatever user code loads), with these answered EPERM so user code sees an
 * OSError and the context lives on:
 *  - always: calls that change the system or escape a process's view of
 *    it, which a root worker could otherwise make (ptrace, mounts,
 *    namespaces, modules, kexec, bpf, perf, keyrings, clock, hostname,
 *    reboot, swap, handles by inode);
 *  - network_access false: socket() of every family (socketpair stays:
 *    it reaches nothing outside the process tree);
 *  - always: clone with a flag making a new namespace (a user namespace
 *    is the kernel's attack surface behind it), and clone3 answers ENOSYS
 *    so glibc falls back to clone, whose flags the filter can read
 *    (sbx_clone_rules);
 *  - subprocess_execution false: execve/execveat, fork/vfork, and clone
 *    without CLONE_THREAD (threads stay). */
static const char *const always_denied[] = {
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "open_by_handle_at",
    "name_to_handle_at",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "userfaultfd",
    "fsopen",
    "fsmount",
    "fsconfig",
    "move_mount",
    "open_tree",
    "fspick",
    "mount_setattr",
    "acct",
    "quotactl",
    "syslog",
    "kcmp",
    "pidfd_getfd",
    "lookup_dcookie",
    "vhangup",
    /* io_uring performs socket(), connect(), openat() ... without passing
     * through this filter */
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
};

static void seccomp_filter(void)
{
    scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
    if (!f)
        fail("seccomp");
    int rc = seccomp_attr_set(f, SCMP_FLTATR_CTL_TSYNC, 1);
    const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
    for (size_t i = 0; !rc && i < sizeof always_denied / sizeof *always_denied; i++) {
        int nr = seccomp_syscall_resolve_name(always_denied[i]);
        if (nr != __NR_SCMP_ERROR)
            rc = seccomp_rule_add(f, eperm, nr, 0);
    }
    /* Never into same-page merging (KSM): a page merged with another
     * process's is a page whose copy-on-write a tenant can time, learning
     * what the unsafe-tier workers (which are merged, wrk_zygote.c) hold. */
    rc = rc ? rc : sbx_merge_rules(f, false);
    rc = rc ? rc : sbx_clone_rules(f);
    if (!rc && pol.spec.no_network) {
        /* No new socket, and none reached through one it already has (a
         * socketpair end connected or sent to a path). */
        rc = seccomp_rule_add(f, eperm, SCMP_SYS(socket), 0);
        rc = rc ? rc : seccomp_rule_add(f, eperm, SCMP_SYS(connect), 0);
        /* sendmsg carries descriptors to the supervisor on the channel
         * (fd 3, a socketpair end: it reaches nothing else) */
        rc = rc ? rc : seccomp_rule_add(f, eperm, SCMP_SYS(sendmsg), 1, SCMP_A0(SCMP_CMP_NE, 3));
        rc = rc ? rc : seccomp_rule_add(f, eperm, SCMP_SYS(sendmmsg), 0);
        rc = rc ? rc : seccomp_rule_add(f, eperm, SCMP_SYS(sendto), 1, SCMP_A4(SCMP_CMP_NE, 0));
    }
    if (!rc && pol.spec.no_subprocess) {
        rc = seccomp_rule_add(f, eperm, SCMP_SYS(execve), 0);
        rc = rc ? rc : seccomp_rule_add(f, eperm, SCMP_SYS(execveat), 0);
        rc = rc ? rc : seccomp_rule_add(f, eperm, SCMP_SYS(fork), 0);
        rc = rc ? rc : seccomp_rule_add(f, eperm, SCMP_SYS(vfork), 0);
        rc = rc ? rc
                : seccomp_rule_add(f, eperm, SCMP_SYS(clone), 1,
                                   SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
    }
    if (!rc)
        rc = seccomp_load(f);
    seccomp_release(f);
    if (rc) {
        errno = -rc;
        fail("seccomp filter");
    }
}

/* ---- the per-run CPU budget ------------------------------------------- */

static timer_t cpu_timer;
static pid_t cpu_timer_pid;

void sbx_run_begin(void)
{
    if (!pol.confined || pol.spec.cpu_seconds <= 0)
        return;
    if (cpu_timer_pid != getpid()) { /* a ctx.fork copy has no timers */
        struct sigevent sev;
        memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_SIGNAL;
        sev.sigev_signo = SIGXCPU;
        if (timer_create(CLOCK_PROCESS_CPUTIME_ID, &sev, &cpu_timer) < 0)
            fail("cpu_seconds (timer)");
        cpu_timer_pid = getpid();
    }
    /* Fires once at the budget, then every second while the run goes on
     * (a run that catches the TimeoutError gets it again). */
    struct itimerspec its;
    its.it_value.tv_sec = (time_t)pol.spec.cpu_seconds;
    its.it_value.tv_nsec = (long)((pol.spec.cpu_seconds - (double)its.it_value.tv_sec) * 1e9);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
        its.it_value.tv_nsec = 1;
    its.it_interval.tv_sec = 1;
    its.it_interval.tv_nsec = 0;
    timer_settime(cpu_timer, 0, &its, NULL);
}

void sbx_run_end(void)
{
    if (!pol.confined || pol.spec.cpu_seconds <= 0 || cpu_timer_pid != getpid())
        return;
    struct itimerspec zero;
    memset(&zero, 0, sizeof zero);
    timer_settime(cpu_timer, 0, &zero, NULL);
}

/* ---- the initial environment block ------------------------------------ */

extern char **environ;

/* /proc/PID/environ shows the memory of the environment the process was
 * exec'd with: for a worker forked by the zygote, the daemon's own. Every
 * variable still in use is moved to the heap, then that block is zeroed,
 * so no daemon variable can be read back from it. */
static void scrub_initial_environ(void)
{
    for (size_t i = 0; environ && environ[i]; i++)
        environ[i] = mem_strdup(environ[i]);
    unsigned long long start, end;
    if (sbx_host_stat_range(49, &start, &end) < 0 || end - start > (64u << 20)) {
        errno = EINVAL;
        fail("a clean environment (cannot find the initial environment block)");
    }
    memset((void *)(uintptr_t)start, 0, (size_t)(end - start));
}

/* ---- entry ---------------------------------------------------------------- */

bool sbx_static(void)
{
    return pol.active && pol.is_static;
}

const sbx_policy *sbx_policy_current(void)
{
    return &pol;
}

void sbx_init(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    const char *text = getenv("CTXD_SANDBOX");
    if (!text)
        return;
    char why[128];
    if (sbx_policy_parse(&pol, text, why, sizeof why) < 0) {
        sbx_host_log("policy: cannot read CTXD_SANDBOX: %s", why);
        _exit(1);
    }
    scrub_initial_environ();
    PyGILState_STATE gil = PyGILState_Ensure();
    /* Gone from the C environment and os.environ before user code runs. */
    PyObject *os = PyImport_ImportModule("os");
    PyObject *environ = os ? PyObject_GetAttrString(os, "environ") : NULL;
    PyObject *r = environ ? PyObject_CallMethod(environ, "pop", "ss", "CTXD_SANDBOX", "") : NULL;
    if (r && pol.spec.tmpdir) { /* tempfile writes where the context may */
        PyObject *t = PyObject_CallMethod(environ, "__setitem__", "ss", "TMPDIR", pol.spec.tmpdir);
        if (!t)
            PyErr_Clear();
        Py_XDECREF(t);
        PyObject *tname = PyUnicode_FromString("tempfile");
        PyObject *tf = tname ? PyImport_GetModule(tname) : NULL;
        Py_XDECREF(tname);
        if (tf && PyObject_SetAttrString(tf, "tempdir", Py_None) < 0)
            PyErr_Clear();
        Py_XDECREF(tf);
        PyErr_Clear();
    }
    Py_XDECREF(r);
    Py_XDECREF(environ);
    Py_XDECREF(os);
    unsetenv("CTXD_SANDBOX");
    /* The Python side (import hook, CPU timer) only for tiers that use it:
     * an unsafe context starts without its imports. */
    if (!r || (pol.confined && sbx_py_init() < 0)) {
        PyErr_Print();
        errno = EINVAL;
        fail("the policy (Python set-up)");
    }
    /* static: runs nothing (the worker analyses, wrk_static.c, with
     * sbx_policy_current()'s list); unsafe: the supervisor's timeout cap
     * is all. */
    if (!pol.confined) {
        PyGILState_Release(gil);
        return;
    }
    if (sbx_py_imports(pol.spec.imports.v, pol.spec.imports.set) < 0) {
        PyErr_Print();
        errno = EINVAL;
        fail("allowed_imports");
    }
    if (pol.spec.read_roots.set)
        collect_py_paths();
    if (pol.spec.cpu_seconds > 0 && sbx_py_cpu_handler(pol.spec.cpu_seconds) < 0) {
        PyErr_Print();
        errno = EINVAL;
        fail("cpu_seconds");
    }
    PyGILState_Release(gil);
    if (pol.spec.memory_bytes && !address_sanitized())
        set_limit(RLIMIT_AS, pol.spec.memory_bytes, "memory_bytes (RLIMIT_AS)");
    if (pol.spec.file_size_bytes)
        set_limit(RLIMIT_FSIZE, pol.spec.file_size_bytes, "file_size_bytes (RLIMIT_FSIZE)");
    set_limit(RLIMIT_CORE, 0, "RLIMIT_CORE");
    /* The sandbox tier's worker is pid 1 of its own namespaces, its root
     * and cgroups made by the zygote (sbx_ns.c); anywhere else it must not
     * run at all. Landlock then only scopes signals and abstract sockets. */
    if (pol.sandbox && getpid() != 1) {
        errno = EPERM;
        fail("the sandbox tier (the worker was not started in its namespaces)");
    }
    /* memory_bytes and max_processes: the context's cgroup, made by the
     * zygote (or the supervisor) before this worker ran anything. */
    if (pol.sandbox)
        pol.spec.write_roots.set = pol.spec.read_roots.set = false;
    /* Private by default: what it creates is its uid's alone (inherited by
     * every process it starts). */
    umask(077);
    if (!pol.sandbox && pol.spec.has_uid)
        private_namespaces(); /* before Landlock opens /dev/shm: the new one */
    int rs = landlock_prepare();
    if (!pol.sandbox && pol.spec.has_uid)
        drop_identity();
    landlock_apply(rs);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        fail("no_new_privs");
    if (pol.sandbox) {
        int rc = sbx_allow_load(pol.spec.no_network, pol.spec.no_subprocess);
        if (rc) {
            errno = -rc;
            fail("seccomp allowlist");
        }
    } else {
        seccomp_filter();
    }
}
