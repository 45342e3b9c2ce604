/* sbx_allow: the sandbox tier's seccomp filter. An allowlist: every system
 * call not listed below fails with EPERM (clone3 with ENOSYS, so glibc falls
 * back to clone, whose flags a filter can read), never a kill: user code
 * sees an OSError and the context lives on.
 *
 * The list was measured, not guessed: `strace -f` of the zygote while
 * sandbox workers ran the workload of tests/integration/test_sandbox.py
 * (WORKLOAD: files, threads, subprocess, multiprocessing, socketpair,
 * asyncio, signals and timers, numpy, matplotlib to PNG) with numpy
 * preloaded. The calls made after the filter was loaded (clone3 answered
 * ENOSYS, as intended; nothing else refused) were, on 2026-11-30:
 *   access arch_prctl brk chdir chmod clock_gettime clock_nanosleep clone
 *   close close_range dup2 epoll_create1 epoll_ctl epoll_wait eventfd2
 *   execve exit exit_group fadvise64 fcntl fstatfs futex getcwd getdents64
 *   getegid geteuid getpid getppid getrandom getrusage getsockname gettid
 *   ioctl link lseek madvise mkdir mmap mprotect munmap newfstatat openat
 *   pipe2 poll ppoll prctl pread64 prlimit64 read readlink recvfrom recvmsg
 *   rename restart_syscall rmdir rseq rt_sigaction rt_sigprocmask
 *   rt_sigreturn rt_sigtimedwait sched_getaffinity sendfile sendto
 *   set_robust_list set_tid_address setitimer setpgid socketpair symlink
 *   sysinfo uname unlink unlinkat utimensat vfork wait4 write
 * test_workload_meets_no_eperm re-runs that workload in CI. The list
 * below adds what the same libraries reach on other paths, grouped; each
 * group says why it is
 * there. Not listed, on purpose (EPERM): ptrace and process_vm_*, mount and
 * the new mount API, unshare/setns/pivot_root/chroot, bpf, perf_event_open,
 * keyctl and friends, io_uring, userfaultfd, kexec/modules/reboot/swap,
 * the clock and host setters, SysV IPC, personality, name_to_handle_at and
 * open_by_handle_at, kcmp, pidfd_getfd, acct, quotactl, syslog; socket()
 * of families other than AF_UNIX without network_access; the id setters
 * except as no-ops (all -1). */
#include "sbx.h"

#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>

/* Always allowed. */
static const char *const allowed[] = {
    /* memory: the allocator, mmap'd modules, numpy's buffers */
    "brk", "mmap", "munmap", "mremap", "mprotect", "msync", "mincore", "membarrier", "mlock",
    "munlock", "get_mempolicy",
    /* files and descriptors: imports, open(), shutil, os.*, the channel */
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "open", "openat", "openat2", "close", "close_range", "creat", "stat", "fstat",
    "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat", "faccessat2",
    "lseek", "getdents", "getdents64", "readlink", "readlinkat", "fcntl", "dup", "dup2", "dup3",
    "pipe", "pipe2", "ioctl", "flock", "fsync", "fdatasync", "syncfs", "ftruncate", "truncate",
    "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "link",
    "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown",
    "fchownat", "utime", "utimes", "utimensat", "futimesat", "getcwd", "chdir", "fchdir", "umask",
    "fadvise64", "fallocate", "sendfile", "copy_file_range", "splice", "tee", "readahead",
    "sync_file_range", "memfd_create", "getxattr", "lgetxattr", "fgetxattr", "listxattr",
    "llistxattr", "flistxattr", "mknodat",
    /* extended attributes of its own files (the kernel keeps trusted.* and
     * security.* for capabilities it does not have; read-only binds refuse) */
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    /* waiting for descriptors: selectors, asyncio, subprocess */
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "timerfd_create",
    "timerfd_settime", "timerfd_gettime", "signalfd", "signalfd4",
    /* threads and the process itself (clone is below: threads always) */
    "exit", "exit_group", "wait4", "waitid", "getpid", "getppid", "gettid", "getpgid", "setpgid",
    "getpgrp", "getsid", "setsid", "set_tid_address", "set_robust_list", "get_robust_list", "rseq",
    "futex", "futex_waitv", "sched_yield", "sched_getaffinity", "sched_setaffinity",
    "sched_getparam", "sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "getpriority", "setpriority", "arch_prctl", "getrusage", "times",
    "getrlimit", "setrlimit", "prlimit64", "capget", "pidfd_open",
    /* signals, sleeping, timers: KeyboardInterrupt, time.sleep, the CPU
     * budget (timer_create), signal.alarm; kill reaches only this pid
     * namespace; restart_syscall resumes a futex or sleep a signal
     * interrupted (without it glibc aborts: "The futex facility returned an
     * unexpected error code") */
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "restart_syscall", "rt_sigpending",
    "rt_sigtimedwait", "rt_sigsuspend", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack",
    "kill", "tgkill", "tkill", "pidfd_send_signal", "alarm", "pause", "nanosleep",
    "clock_nanosleep", "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime",
    "timer_getoverrun", "timer_delete",
    /* time and identity, system facts */
    "clock_gettime", "clock_getres", "gettimeofday", "time", "getuid", "geteuid", "getgid",
    "getegid", "getresuid", "getresgid", "getgroups", "uname", "sysinfo", "getrandom", "getcpu",
    /* sockets: socketpair (multiprocessing, subprocess) reaches nothing
     * outside the process tree; socket() itself is below */
    "socketpair", "connect", "bind", "listen", "accept", "accept4", "sendto", "recvfrom", "sendmsg",
    "recvmsg", "sendmmsg", "recvmmsg", "shutdown", "getsockname", "getpeername", "setsockopt",
    "getsockopt"};

/* With subprocess_execution (the default in this tier): new processes.
 * The pids cgroup bounds how many; the pid namespace what they can see. */
static const char *const subprocess_calls[] = {"fork", "vfork", "execve", "execveat"};

static int allow_list(scmp_filter_ctx f, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int nr = seccomp_syscall_resolve_name(names[i]);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not on this architecture */
        int rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 0);
        if (rc)
            return rc;
    }
    return 0;
}

/* clone flags that would make new namespaces: refused even where new
 * processes are allowed (a nested user namespace is attack surface). */
#define NEW_NAMESPACES                                                                             \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |  \
     CLONE_NEWNET)

int sbx_merge_rules(void *filter, bool allowlist)
{
    /* allowlist: allowed unless the argument is the merging one;
     * denylist: refused when it is */
    uint32_t act = allowlist ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO(EPERM);
    enum scmp_compare op = allowlist ? SCMP_CMP_NE : SCMP_CMP_EQ;
    int rc = seccomp_rule_add(filter, act, SCMP_SYS(madvise), 1, SCMP_A2(op, SBX_MADV_MERGEABLE));
    return rc ? rc
              : seccomp_rule_add(filter, act, SCMP_SYS(prctl), 1,
                                 SCMP_A0(op, SBX_PR_SET_MEMORY_MERGE));
}

/* The denylist's rules on new processes (sbx.h): clone with any of the
 * namespace flags EPERM, one rule a flag; clone3 ENOSYS. */
int sbx_clone_rules(void *filter)
{
    static const unsigned long flags[] = {CLONE_NEWNS,  CLONE_NEWCGROUP, CLONE_NEWUTS,
                                          CLONE_NEWIPC, CLONE_NEWUSER,   CLONE_NEWPID,
                                          CLONE_NEWNET};
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof flags / sizeof *flags; i++)
        rc = seccomp_rule_add(filter, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, flags[i], flags[i]));
    return rc ? rc : seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
}

int sbx_allow_load(bool no_network, bool no_subprocess)
{
    scmp_filter_ctx f = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    if (!f)
        return -ENOMEM;
    int rc = seccomp_attr_set(f, SCMP_FLTATR_CTL_TSYNC, 1);
    rc = rc ? rc : allow_list(f, allowed, sizeof allowed / sizeof *allowed);
    if (!rc && !no_subprocess) {
        rc = allow_list(f, subprocess_calls, sizeof subprocess_calls / sizeof *subprocess_calls);
        rc = rc ? rc
                : seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                                   SCMP_A0(SCMP_CMP_MASKED_EQ, NEW_NAMESPACES, 0));
    } else if (!rc) { /* threads only */
        rc = seccomp_rule_add(
            f, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
            SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD | NEW_NAMESPACES, CLONE_THREAD));
    }
    rc = rc ? rc : seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    rc = rc ? rc : sbx_merge_rules(f, true); /* madvise and prctl, but not into KSM */
    if (!rc && !no_network)
        rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(socket), 0);
    else if (!rc) /* AF_UNIX is not network: its paths are in this root, its
                     abstract names in this net namespace */
        rc =
            seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
    /* setreuid(-1, -1) and the like change nothing (the namespace has one
     * uid): allowed, as the no-ops they are */
    static const int noop_id_calls[] = {SCMP_SYS(setreuid), SCMP_SYS(setregid)};
    for (size_t i = 0; !rc && i < 2; i++)
        rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, noop_id_calls[i], 2,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, 0xffffffffu),
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, 0xffffffffu));
    for (size_t i = 0; !rc && i < 2; i++) {
        int nr = i ? SCMP_SYS(setresgid) : SCMP_SYS(setresuid);
        rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 3,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, 0xffffffffu),
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, 0xffffffffu),
                              SCMP_A2(SCMP_CMP_MASKED_EQ, 0xffffffffu, 0xffffffffu));
    }
    rc = rc ? rc : seccomp_load(f);
    seccomp_release(f);
    return rc;
}
