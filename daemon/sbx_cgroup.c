/* sbx_cgroup: putting a worker into its own cgroup of one controller with
 * limits. cgroup v1 (<root>/<controller>, what this machine has) is used
 * when that controller is mounted there; otherwise the cgroup v2 tree
 * (/sys/fs/cgroup, or /sys/fs/cgroup/unified in a hybrid layout) when it
 * offers the controller. The cgroup is <root>/ctxd/w<pid>; the supervisor
 * reads it after the worker's death (an OOM kill) and removes it once empty
 * (sup_policy_sweep_cgroups). */
#include "sbx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

/* True when the v2 tree at root offers controller. */
static bool v2_offers(const char *root, const char *controller)
{
    char path[256], buf[512];
    snprintf(path, sizeof path, "%s/cgroup.controllers", root);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    for (char *save = NULL, *w = strtok_r(buf, " \n", &save); w; w = strtok_r(NULL, " \n", &save))
        if (!strcmp(w, controller))
            return true;
    return false;
}

int sbx_cgroup_root(const char *controller, char *root, size_t n, bool *v2)
{
    struct stat st;
    snprintf(root, n, "/sys/fs/cgroup/%s", controller);
    *v2 = false;
    if (stat(root, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    static const char *const v2_roots[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
    for (size_t i = 0; i < 2; i++)
        if (v2_offers(v2_roots[i], controller)) {
            snprintf(root, n, "%s", v2_roots[i]);
            *v2 = true;
            return 0;
        }
    errno = ENOENT;
    return -1;
}

int sbx_cgroup_join(pid_t pid, const char *controller, const sbx_cgroup_setting *settings,
                    const char **failed)
{
    char root[128], dir[256], path[320], num[32];
    bool v2;
    *failed = "no such cgroup controller";
    if (sbx_cgroup_root(controller, root, sizeof root, &v2) < 0)
        return -1;
    snprintf(dir, sizeof dir, "%s/ctxd", root);
    *failed = "mkdir";
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return -1;
    if (v2) { /* the controller must be enabled for the children of each level */
        char plus[64];
        snprintf(plus, sizeof plus, "+%s", controller);
        snprintf(path, sizeof path, "%s/cgroup.subtree_control", root);
        (void)sbx_write_file(path, plus);
        snprintf(path, sizeof path, "%s/cgroup.subtree_control", dir);
        (void)sbx_write_file(path, plus);
    }
    snprintf(dir, sizeof dir, "%s/ctxd/w%d", root, (int)pid);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return -1;
    for (const sbx_cgroup_setting *s = settings; s && s->file; s++) {
        snprintf(path, sizeof path, "%s/%s", dir, v2 && s->file_v2 ? s->file_v2 : s->file);
        if (sbx_write_file(path, s->value) < 0 && !s->optional) {
            *failed = s->file;
            return -1;
        }
    }
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    snprintf(num, sizeof num, "%d", (int)pid);
    *failed = "cgroup.procs";
    return sbx_write_file(path, num);
}
