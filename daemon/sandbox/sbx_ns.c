/* sbx_ns: the sandbox tier's process, mount and identity isolation.
 *
 * How a sandbox worker is made (wrk_zygote.c): the zygote's intermediate
 * process unshares user, pid, mount, ipc, uts (and, without network_access,
 * net) namespaces and forks the worker, which is pid 1 of the new pid
 * namespace and root of the new user namespace. The zygote, still fully
 * privileged outside, then maps the worker's root to the daemon's own user
 * (uid_map/gid_map; no other id exists inside), puts it into its memory and
 * pids cgroups, and writes "go". Only then does the worker build its root
 * file system (sbx_ns_enter), pivot into it and drop every capability.
 *
 * The root is a read-only tmpfs holding: read-only binds of /usr and the
 * few /etc files CPython and its libraries read; generated passwd, group,
 * hosts and hostname; services and protocols, and with network_access the
 * resolver's files (resolv.conf, host.conf, gai.conf); the merged-/usr
 * symlinks; /dev with null, zero, full, random, urandom, a tmpfs shm and a
 * devpts of its own (ptmx); a fresh /proc of the new pid namespace;
 * a tmpfs /tmp; the context's directory and write roots bound writable and
 * read roots bound read-only, each at its own path. Nothing else of the
 * host exists inside: other contexts' directories, the daemon's socket
 * directory and state, /etc/shadow, /root, /home. */
#include "sbx.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mem.h"
#include "sbx_host.h"

/* Where the new root is assembled, in the worker's own mount namespace
 * (the host's /tmp is hidden only there; sources are opened first). */
#define NEW_ROOT "/tmp"
/* The worker's own tasks (threads), on top of max_processes. */
#define OWN_TASKS 8

int sbx_ns_flags(const sbx_policy *p)
{
    if (!p->active || !p->sandbox)
        return 0;
    return CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS |
           (p->spec.no_network ? CLONE_NEWNET : 0);
}

/* ---- the zygote's half ------------------------------------------------- */

static int write_proc(pid_t pid, const char *file, const char *text)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
    return sbx_write_file(path, text);
}

sbx_cgroup_limits sbx_policy_limits(const sbx_policy *p)
{
    sbx_cgroup_limits lim = {0, 0};
    if (p->active && p->confined) {
        lim.memory_bytes = p->spec.memory_bytes;
        lim.max_tasks = p->spec.max_processes ? p->spec.max_processes + OWN_TASKS : 0;
    }
    return lim;
}

int sbx_ns_prepare(pid_t w, const sbx_policy *p, char *msg, size_t n)
{
    /* Root inside is the context's own uid outside: never host root. */
    unsigned uid = p->spec.has_uid ? p->spec.ident.uid : (unsigned)geteuid();
    unsigned gid = p->spec.has_uid ? p->spec.ident.gid : (unsigned)getegid();
    char map[64];
    snprintf(map, sizeof map, "0 %u 1\n", uid);
    if (write_proc(w, "uid_map", map) < 0) {
        snprintf(msg, n, "sandbox: uid_map: %s", strerror(errno));
        return -1;
    }
    snprintf(map, sizeof map, "0 %u 1\n", gid);
    if (write_proc(w, "setgroups", "deny") < 0 || write_proc(w, "gid_map", map) < 0) {
        snprintf(msg, n, "sandbox: gid_map: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- the worker's half: building the root ------------------------------ */

static _Noreturn void fail(const char *what, const char *path)
{
    sbx_host_log("sandbox: %s%s%s: %s", what, path ? " " : "", path ? path : "", strerror(errno));
    _exit(1);
}

typedef enum {
    M_RO,      /* read-only bind; skipped when the source does not exist */
    M_RO_MUST, /* read-only bind of a read root: must exist */
    M_RW,      /* writable bind: the context's directory and write roots */
    M_TMPFS,   /* a fresh tmpfs (options in `data`) */
    M_DEV,     /* a device node bound from the host's /dev */
} mount_kind;

typedef struct mount_entry {
    char *path; /* inside the new root (and the source's path outside) */
    mount_kind kind;
    const char *data;
    int src;    /* O_PATH descriptor of the source, -1 if none */
    char *link; /* the source is a symbolic link: recreated, not bound */
    bool is_dir;
} mount_entry;

/* What CPython, its extension modules, numpy and matplotlib read from the
 * system: the installation and a few /etc files (a missing one is skipped).
 * /bin, /lib... are symlinks into /usr on Debian 12 and are recreated as
 * such; on a split-/usr system they are bound. */
static const char *const system_ro[] = {
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/fonts",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/matplotlibrc",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/ssl",
    "/etc/timezone",
    "/etc/debian_version",
    "/etc/os-release",
    "/etc/services",  /* getservbyname, getaddrinfo(host, "http") */
    "/etc/protocols", /* getprotobyname */
    NULL,
};

/* With network_access: what the resolver reads to find hosts by name (a
 * symbolic link, e.g. systemd-resolved's, is bound as the file it names). */
static const char *const resolver_ro[] = {"/etc/resolv.conf", "/etc/host.conf", "/etc/gai.conf",
                                          NULL};

static const char *const devices[] = {"null", "zero", "full", "random", "urandom", NULL};

typedef struct plan {
    mount_entry *v;
    size_t n, cap;
} plan;

static mount_entry *add(plan *pl, const char *path, mount_kind kind, const char *data)
{
    if (pl->n == pl->cap) {
        pl->cap = pl->cap ? pl->cap * 2 : 64;
        pl->v = mem_realloc(pl->v, pl->cap * sizeof *pl->v);
    }
    mount_entry *e = &pl->v[pl->n++];
    memset(e, 0, sizeof *e);
    e->path = mem_strdup(path);
    e->kind = kind;
    e->data = data;
    e->src = -1;
    return e;
}

/* Opens (O_PATH) or reads the link of each bound source now, while the
 * host's tree is whole. Returns false for a source to skip. */
static bool open_source(mount_entry *e, const char *src)
{
    struct stat st;
    if (lstat(src, &st) < 0) {
        if (e->kind == M_RO)
            return false;
        fail("cannot open", src);
    }
    if (S_ISLNK(st.st_mode) && e->kind == M_RO) {
        char buf[4096];
        ssize_t n = readlink(src, buf, sizeof buf - 1);
        if (n <= 0)
            return false;
        buf[n] = '\0';
        e->link = mem_strdup(buf);
        return true;
    }
    /* System paths are the host's own; everything a client named (cwd,
     * roots) is opened without following a link anywhere. */
    e->src = e->kind == M_RO ? open(src, O_PATH | O_CLOEXEC) : sbx_path_open(src, O_PATH, NULL, 0);
    if (e->src < 0 || fstat(e->src, &st) < 0) {
        if (e->kind == M_RO)
            return false;
        fail("cannot open", src);
    }
    e->is_dir = S_ISDIR(st.st_mode);
    return true;
}

static int by_path(const void *a, const void *b)
{
    const mount_entry *x = a, *y = b;
    /* parents first: "/a" before "/a/b"; ties keep tmpfs before binds */
    int c = strcmp(x->path, y->path);
    return c ? c : (int)(x->kind == M_TMPFS ? 0 : 1) - (int)(y->kind == M_TMPFS ? 0 : 1);
}

/* mkdir -p of path (absolute, inside the new root), then the last
 * component as a directory or an empty file. */
static void make_target(const char *path, bool dir)
{
    char buf[4200];
    snprintf(buf, sizeof buf, "%s%s", NEW_ROOT, path);
    for (char *s = buf + strlen(NEW_ROOT) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            fail("mkdir", buf);
        *s = '/';
    }
    if (dir) {
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            fail("mkdir", buf);
    } else {
        int fd = open(buf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST && errno != EISDIR)
            fail("create", buf);
        if (fd >= 0)
            close(fd);
    }
}

/* The flags a bind mount must keep from its source (a remount in a user
 * namespace may not clear them), plus the ones we add. */
static unsigned long kept_flags(int src)
{
    struct statvfs sv;
    unsigned long f = 0;
    if (fstatvfs(src, &sv) < 0)
        return f;
    static const struct {
        unsigned long st, ms;
    } map[] = {{ST_RDONLY, MS_RDONLY},    {ST_NOSUID, MS_NOSUID},   {ST_NODEV, MS_NODEV},
               {ST_NOEXEC, MS_NOEXEC},    {ST_NOATIME, MS_NOATIME}, {ST_NODIRATIME, MS_NODIRATIME},
               {ST_RELATIME, MS_RELATIME}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (sv.f_flag & map[i].st)
            f |= map[i].ms;
    return f;
}

static void do_mount(const mount_entry *e)
{
    char dst[4200], src[64];
    snprintf(dst, sizeof dst, "%s%s", NEW_ROOT, e->path);
    if (e->link) {
        make_target(e->path, true); /* its parent */
        rmdir(dst);
        if (symlink(e->link, dst) < 0 && errno != EEXIST)
            fail("symlink", dst);
        return;
    }
    if (e->kind == M_TMPFS) {
        make_target(e->path, true);
        if (mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, e->data) < 0)
            fail("mount tmpfs on", e->path);
        return;
    }
    make_target(e->path, e->is_dir);
    snprintf(src, sizeof src, "/proc/self/fd/%d", e->src);
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
        fail("bind", e->path);
    unsigned long f = MS_REMOUNT | MS_BIND | MS_NOSUID | kept_flags(e->src);
    if (e->kind != M_DEV)
        f |= MS_NODEV;
    if (e->kind == M_RO || e->kind == M_RO_MUST)
        f |= MS_RDONLY;
    if (mount(NULL, dst, NULL, f, NULL) < 0)
        fail("remount", e->path);
}

static void write_new(const char *path, const char *text)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s%s", NEW_ROOT, path);
    int fd = open(buf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        fail("write", buf);
    close(fd);
}

static void symlink_new(const char *target, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s%s", NEW_ROOT, path);
    if (symlink(target, buf) < 0)
        fail("symlink", buf);
}

/* A devpts of its own (newinstance: the host's terminals stay invisible)
 * and /dev/ptmx into it, for os.openpty and pty.fork. A kernel that
 * refuses it leaves the sandbox without terminals, not without a worker. */
static void new_devpts(void)
{
    make_target("/dev/pts", true);
    if (mount("devpts", NEW_ROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=0620") < 0) {
        sbx_host_log("sandbox: no devpts (%s): os.openpty will fail", strerror(errno));
        return;
    }
    symlink_new("pts/ptmx", "/dev/ptmx");
}

/* The kernel's knobs and leaks in /proc, as runc masks them: hidden
 * behind /dev/null or an empty read-only tmpfs, or made read-only. A
 * namespace root cannot write host sysctls anyway (they belong to host
 * root, which is not mapped); this closes what it could still read or
 * what is namespaced but shared with the host's kernel. */
static void mask_proc(void)
{
    static const char *const masked[] = {
        "acpi",        "asound", "kcore",    "keys", "latency_stats", "timer_list", "timer_stats",
        "sched_debug", "scsi",   "kallsyms", "kmsg", "config.gz",     NULL};
    /* sysrq-trigger: read-only, so a write fails (EROFS) instead of
     * vanishing into /dev/null */
    static const char *const readonly[] = {"bus", "fs", "irq", "sys", "sysrq-trigger", NULL};
    char path[128];
    struct stat st;
    for (size_t i = 0; masked[i]; i++) {
        snprintf(path, sizeof path, NEW_ROOT "/proc/%s", masked[i]);
        if (lstat(path, &st) < 0)
            continue;
        int rc = S_ISDIR(st.st_mode)
                     ? mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                             "mode=0555")
                     : mount(NEW_ROOT "/dev/null", path, NULL, MS_BIND, NULL);
        if (rc < 0)
            fail("mask", path);
    }
    for (size_t i = 0; readonly[i]; i++) {
        snprintf(path, sizeof path, NEW_ROOT "/proc/%s", readonly[i]);
        if (lstat(path, &st) < 0)
            continue;
        if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0 ||
            mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) <
                0)
            fail("make read-only", path);
    }
}

/* Every capability gone, for good: the bounding and ambient sets emptied,
 * root no longer special on exec (securebits, locked), the sets cleared.
 * no_new_privs and the seccomp filter follow in sbx_init. */
static void drop_capabilities(void)
{
    if (prctl(PR_SET_SECUREBITS,
              SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                  SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED,
              0, 0, 0) < 0)
        fail("securebits", NULL);
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            fail("drop the bounding set", NULL);
    (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    if (syscall(SYS_capset, &hdr, data) < 0)
        fail("capset", NULL);
}

void sbx_ns_enter(int go_fd, const sbx_policy *p, const char *cwd)
{
    char go = 0;
    ssize_t got;
    do
        got = read(go_fd, &go, 1);
    while (got < 0 && errno == EINTR);
    close(go_fd);
    if (got != 1 || go != 'g') {
        errno = ECANCELED;
        fail("the zygote did not finish the set-up", NULL);
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        fail("make / private", NULL);

    plan pl = {NULL, 0, 0};
    char tmp_opts[64], shm_opts[64];
    unsigned long long tmp_size = p->spec.memory_bytes ? p->spec.memory_bytes : 1ULL << 30;
    if (p->spec.disk_bytes && p->spec.disk_bytes < tmp_size) /* /tmp is disk too */
        tmp_size = p->spec.disk_bytes;
    snprintf(tmp_opts, sizeof tmp_opts, "mode=1777,size=%llu", tmp_size);
    snprintf(shm_opts, sizeof shm_opts, "mode=1777,size=%llu", tmp_size / 4);
    for (size_t i = 0; system_ro[i]; i++) {
        mount_entry *e = add(&pl, system_ro[i], M_RO, NULL);
        if (!open_source(e, system_ro[i]))
            pl.n--;
    }
    for (size_t i = 0; !p->spec.no_network && resolver_ro[i]; i++) {
        char *real = realpath(resolver_ro[i], NULL);
        mount_entry *e = add(&pl, resolver_ro[i], M_RO, NULL);
        if (!real || !open_source(e, real))
            pl.n--;
        free(real);
    }
    add(&pl, "/tmp", M_TMPFS, tmp_opts);
    add(&pl, "/dev", M_TMPFS, "mode=0755,size=64k");
    add(&pl, "/dev/shm", M_TMPFS, shm_opts);
    for (size_t i = 0; devices[i]; i++) {
        char path[32];
        snprintf(path, sizeof path, "/dev/%s", devices[i]);
        mount_entry *e = add(&pl, path, M_DEV, NULL);
        open_source(e, path);
    }
    for (size_t i = 0; p->spec.read_roots.set && p->spec.read_roots.v[i]; i++)
        open_source(add(&pl, p->spec.read_roots.v[i], M_RO_MUST, NULL), p->spec.read_roots.v[i]);
    for (size_t i = 0; p->spec.write_roots.set && p->spec.write_roots.v[i]; i++)
        open_source(add(&pl, p->spec.write_roots.v[i], M_RW, NULL), p->spec.write_roots.v[i]);
    if (p->site) /* its installed packages (links into read roots) */
        open_source(add(&pl, p->site, M_RO_MUST, NULL), p->site);
    open_source(add(&pl, cwd, M_RW, NULL), cwd);
    qsort(pl.v, pl.n, sizeof *pl.v, by_path);
    /* Every source is open: now become root of the namespace, which is the
     * context's own uid outside (the zygote's uid_map). */
    if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
        fail("become the namespace's root", NULL);
    /* ... and keep /proc/self its own (a uid change makes it undumpable). */
    if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
        fail("PR_SET_DUMPABLE", NULL);

    if (mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0)
        fail("mount the new root", NULL);
    for (size_t i = 0; i < pl.n; i++)
        do_mount(&pl.v[i]);
    make_target("/etc", true);
    make_target("/proc", true);
    write_new("/etc/passwd", "root:x:0:0:root:/tmp:/bin/sh\n"
                             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    write_new("/etc/group", "root:x:0:\nnogroup:x:65534:\n");
    write_new("/etc/hostname", "ctxd\n");
    write_new("/etc/hosts", "127.0.0.1\tlocalhost ctxd\n::1\tlocalhost ip6-localhost\n");
    new_devpts();
    symlink_new("/proc/self/fd", "/dev/fd");
    symlink_new("/proc/self/fd/0", "/dev/stdin");
    symlink_new("/proc/self/fd/1", "/dev/stdout");
    symlink_new("/proc/self/fd/2", "/dev/stderr");
    /* This process is pid 1 of the new namespace: the /proc mounted here
     * shows that namespace only. It must be mounted while the host's /proc
     * is still visible (the kernel refuses a proc that would reveal more). */
    if (mount("proc", NEW_ROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        fail("mount /proc", NULL);
    mask_proc();
    if (mount(NULL, NEW_ROOT, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) <
        0)
        fail("make the root read-only", NULL);
    for (size_t i = 0; i < pl.n; i++) {
        if (pl.v[i].src >= 0)
            close(pl.v[i].src);
        free(pl.v[i].path);
        free(pl.v[i].link);
    }
    free(pl.v);

    if (chdir(NEW_ROOT) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
        fail("pivot_root", NULL);
    if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
        fail("detach the host's root", NULL);
    if (sethostname("ctxd", 4) < 0)
        fail("sethostname", NULL);
    drop_capabilities();
}
