/* sbx_cgroup: a worker's cgroups (see sbx_cgroup.h).
 *
 * Membership is the cgroup v2 tree (/sys/fs/cgroup/unified in the hybrid
 * layout this machine has, /sys/fs/cgroup on a v2-only host): every worker
 * and everything it starts is in <base>/ctxd/<tree>/w<n>, where base
 * is the tree's root, or under systemd with Delegate=yes the service's own
 * cgroup (the delegated ancestor of this process's cgroup), which the
 * supervisor kills as a whole (cgroup.kill) and reads CPU time from
 * (cpu.stat, kept by every v2 cgroup). Limits use the v1 memory and pids
 * controllers where they are mounted, else the v2 ones. */
#include "sbx_cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

int sbx_write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* True when path is a mount of the file system type magic. */
static bool is_fs(const char *path, long magic)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

const char *sbx_cgroup_v2_mount(void)
{
    static int known; /* 0 unknown, 1 unified, 2 /sys/fs/cgroup, 3 none */
    if (!known)
        known = is_fs("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC) ? 1
                : is_fs("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC)       ? 2
                                                                     : 3;
    return known == 1 ? "/sys/fs/cgroup/unified" : known == 2 ? "/sys/fs/cgroup" : NULL;
}

/* True when systemd delegated the cgroup dir (Delegate=yes marks it with the
 * xattr trusted.delegate, or user.delegate for a user manager, = "1"). */
static bool is_delegated(const char *dir)
{
    char v[8];
    ssize_t n = getxattr(dir, "trusted.delegate", v, sizeof v);
    if (n <= 0)
        n = getxattr(dir, "user.delegate", v, sizeof v);
    return n == 1 && v[0] == '1';
}

/* This process's v2 cgroup path (the "0::" line of /proc/self/cgroup). */
static bool own_cgroup(char *out, size_t n)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return false;
    char line[SBX_CGROUP_BASE_MAX + 16];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::/", 4) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        found = snprintf(out, n, "%s", line + 3) < (int)n;
    }
    fclose(f);
    return found;
}

const char *sbx_cgroup_v2_root(void)
{
    static char base[SBX_CGROUP_BASE_MAX];
    static int known; /* 0 unknown, 1 base set, 2 none */
    if (known)
        return known == 1 ? base : NULL;
    known = 2;
    const char *mount = sbx_cgroup_v2_mount();
    if (!mount)
        return NULL;
    known = 1;
    snprintf(base, sizeof base, "%s", mount);
    char own[SBX_CGROUP_BASE_MAX], dir[SBX_CGROUP_BASE_MAX];
    if (!own_cgroup(own, sizeof own) ||
        snprintf(dir, sizeof dir, "%s%s", mount, own) >= (int)sizeof dir)
        return base;
    /* The nearest delegated ancestor (the supervisor itself lives in
     * <service>/supervisor, its zygote too). */
    size_t root_len = strlen(mount);
    while (strlen(dir) > root_len) {
        if (is_delegated(dir)) {
            snprintf(base, sizeof base, "%s", dir);
            break;
        }
        *strrchr(dir, '/') = '\0';
    }
    return base;
}

const char *sbx_cgroup_v1_root(const char *controller)
{
    static const char *const names[] = {"memory", "pids"};
    static const char *const roots[] = {"/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"};
    static int known[2];
    for (int i = 0; i < 2; i++) {
        if (strcmp(controller, names[i]) != 0)
            continue;
        if (!known[i])
            known[i] = is_fs(roots[i], CGROUP_SUPER_MAGIC) ? 1 : 2;
        return known[i] == 1 ? roots[i] : NULL;
    }
    return NULL;
}

/* True when name is one the supervisor makes: [a-z0-9/], no empty
 * component, starts with "ctxd/". */
static bool name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n < 6 || n >= SBX_CGROUP_NAME_MAX || strncmp(name, "ctxd/", 5) != 0 || name[n - 1] == '/')
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '/'))
            return false;
        if (ch == '/' && name[i + 1] == '/')
            return false;
    }
    return true;
}

/* mkdir -p root/name; with enable (v2 limits), each level above the leaf
 * hands the memory and pids controllers down. */
static int make_path(const char *root, const char *name, bool enable, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", root, name);
    char *start = out + strlen(root) + 1;
    for (char *s = start;; s++) {
        bool end = *s == '\0';
        if (*s != '/' && !end)
            continue;
        char saved = *s;
        *s = '\0';
        if (enable) { /* the level above this one offers the controllers */
            char ctl[320];
            char *slash = strrchr(out, '/');
            *slash = '\0';
            if (snprintf(ctl, sizeof ctl, "%s/cgroup.subtree_control", out) >= (int)sizeof ctl)
                return -1;
            *slash = '/';
            (void)sbx_write_file(ctl, "+memory +pids");
        }
        if (mkdir(out, 0755) < 0 && errno != EEXIST)
            return -1;
        *s = saved;
        if (end)
            return 0;
    }
}

/* Writes the limits (v1 or v2 file names) into dir; optional ones may
 * fail (memsw is absent without swap accounting). */
static int write_limits(const char *dir, bool v2, const char *controller,
                        const sbx_cgroup_limits *lim, const char **failed)
{
    char path[320], num[32];
    if (!strcmp(controller, "memory") && lim->memory_bytes) {
        snprintf(num, sizeof num, "%llu", lim->memory_bytes);
        if (snprintf(path, sizeof path, "%s/%s", dir,
                     v2 ? "memory.max" : "memory.limit_in_bytes") >= (int)sizeof path)
            return -1;
        *failed = v2 ? "memory.max" : "memory.limit_in_bytes";
        if (sbx_write_file(path, num) < 0)
            return -1;
        /* No swap: the limit is the limit (memsw must not be below it, so
         * it is written after). */
        if (snprintf(path, sizeof path, "%s/%s", dir,
                     v2 ? "memory.swap.max" : "memory.memsw.limit_in_bytes") >= (int)sizeof path)
            return -1;
        (void)sbx_write_file(path, v2 ? "0" : num);
    }
    if (!strcmp(controller, "pids") && lim->max_tasks) {
        snprintf(num, sizeof num, "%llu", lim->max_tasks);
        if (snprintf(path, sizeof path, "%s/pids.max", dir) >= (int)sizeof path)
            return -1;
        *failed = "pids.max";
        if (sbx_write_file(path, num) < 0)
            return -1;
    }
    return 0;
}

static int join(const char *dir, pid_t pid, const char **failed)
{
    char path[320], num[32];
    if (snprintf(path, sizeof path, "%s/cgroup.procs", dir) >= (int)sizeof path)
        return -1;
    snprintf(num, sizeof num, "%d", (int)pid);
    *failed = "cgroup.procs";
    return sbx_write_file(path, num);
}

int sbx_cgroup_place(pid_t pid, const char *name, const sbx_cgroup_limits *lim, const char **failed)
{
    char dir[320];
    *failed = "cgroup name";
    if (!name_ok(name)) {
        errno = EINVAL;
        return -1;
    }
    const char *v2 = sbx_cgroup_v2_root();
    static const char *const controllers[] = {"memory", "pids"};
    bool wanted[2] = {lim->memory_bytes > 0, lim->max_tasks > 0};
    bool in_v2[2] = {false, false};
    for (int i = 0; i < 2; i++) {
        if (!wanted[i])
            continue;
        const char *root = sbx_cgroup_v1_root(controllers[i]);
        if (!root) {
            in_v2[i] = true;
            continue;
        }
        *failed = controllers[i];
        if (make_path(root, name, false, dir, sizeof dir) < 0 ||
            write_limits(dir, false, controllers[i], lim, failed) < 0 || join(dir, pid, failed) < 0)
            return -1;
    }
    if (!v2) {
        *failed = "no cgroup v2 tree, and a limit needs a controller";
        errno = ENOENT;
        return in_v2[0] || in_v2[1] ? -1 : 0;
    }
    *failed = "mkdir (cgroup v2)";
    if (make_path(v2, name, in_v2[0] || in_v2[1], dir, sizeof dir) < 0)
        return -1;
    for (int i = 0; i < 2; i++)
        if (in_v2[i] && write_limits(dir, true, controllers[i], lim, failed) < 0)
            return -1;
    return join(dir, pid, failed);
}
