/* sup_sockperm: see sup_sockperm.h. */
#include "sup_sockperm.h"

#include "sup_config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Sets the owner-only or group mode of an ipc socket and its directory. */
int sup_sockperm_apply(const char *path)
{
    if (sup_cfg.socket_gid < 0) {
        (void)chmod(path, 0600); /* closed by mode, whatever directory it is in */
        return 0;
    }
    gid_t gid = (gid_t)sup_cfg.socket_gid;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, "/");
    if (chown(path, (uid_t)-1, gid) < 0 || chmod(path, 0660) < 0 ||
        chown(dir, (uid_t)-1, gid) < 0 || chmod(dir, 0750) < 0) {
        fprintf(stderr, "ctxd: --socket-group: cannot give %s and %s to group %ld: %s\n", path, dir,
                sup_cfg.socket_gid, strerror(errno));
        return -1;
    }
    return 0;
}
