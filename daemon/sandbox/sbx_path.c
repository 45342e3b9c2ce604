/* sbx_path: paths by descriptor (sbx_path.h). */
#include "sbx_path.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* After an ELOOP: walks path one component at a time (O_PATH|O_NOFOLLOW
 * from the parent's descriptor) to name the first symbolic link. */
static void find_link(const char *path, char *link, size_t n)
{
    snprintf(link, n, "%s", path);
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return;
    int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    for (char *comp = buf + 1; dir >= 0 && *comp;) {
        char *slash = strchr(comp, '/');
        if (slash)
            *slash = '\0';
        struct stat st;
        if (fstatat(dir, comp, &st, AT_SYMLINK_NOFOLLOW) < 0)
            break;
        if (S_ISLNK(st.st_mode)) {
            snprintf(link, n, "%.*s", (int)(comp + strlen(comp) - buf), buf);
            break;
        }
        int next = openat(dir, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        close(dir);
        dir = next;
        if (!slash)
            break;
        *slash = '/';
        comp = slash + 1;
    }
    if (dir >= 0)
        close(dir);
}

int sbx_path_open(const char *path, int flags, char *link, size_t n)
{
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (unsigned long long)(flags | O_CLOEXEC);
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    if (fd < 0 && errno == ELOOP && link && n) {
        find_link(path, link, n);
        errno = ELOOP;
    }
    return fd;
}
