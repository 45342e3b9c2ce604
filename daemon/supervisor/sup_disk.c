/* sup_disk: the kernel enforces a context's disk budget (policy
 * disk_bytes): its private directory is a tmpfs of that size mounted by
 * the supervisor on the directory it made, so a write past it fails with
 * ENOSPC (an OSError in the run) and the state directory's file system
 * never fills. Its pages are charged to the memory cgroup of the process
 * that writes them (the context's), so the directory also counts against
 * memory_bytes. A private directory never outlived its daemon (sup_ident.c,
 * sup_persist.c: a restarted context gets a new one), so a tmpfs loses
 * nothing that was kept. Why not a quota: this kernel has no CONFIG_QUOTA
 * (no project quotas on ext4 or XFS), and a loop-mounted image per context
 * costs an mkfs and a loop device per create (README). The mount is made
 * by descriptor (fsopen, fsmount, move_mount onto the directory opened
 * O_NOFOLLOW), a few system calls per create; the inode count is bounded
 * too (one per 4 KiB of the budget), so many empty files cannot use up
 * kernel memory past the budget either. */
#include "sup_disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MNT_DETACH
#define MNT_DETACH 2
#endif
#ifndef UMOUNT_NOFOLLOW
#define UMOUNT_NOFOLLOW 8
#endif

/* Sets one string option of the file system context fs. */
static int set_opt(int fs, const char *key, const char *val)
{
    return (int)syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, key, val, 0);
}

/* The tmpfs of bytes for dir. */
int sup_disk_mount(const char *dir, uint64_t bytes, uid_t uid, gid_t gid)
{
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC), mfd = -1, rc = -1;
    char size[32], inodes[32], u[16], g[16];
    uint64_t ni = bytes / 4096 < 1024 ? 1024 : bytes / 4096;
    snprintf(size, sizeof size, "%llu", (unsigned long long)bytes);
    snprintf(inodes, sizeof inodes, "%llu", (unsigned long long)ni);
    snprintf(u, sizeof u, "%u", (unsigned)uid);
    snprintf(g, sizeof g, "%u", (unsigned)gid);
    if (fs >= 0 && set_opt(fs, "size", size) == 0 && set_opt(fs, "nr_inodes", inodes) == 0 &&
        set_opt(fs, "mode", "0700") == 0 && set_opt(fs, "uid", u) == 0 &&
        set_opt(fs, "gid", g) == 0 &&
        syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0) {
        mfd = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (mfd >= 0 && syscall(SYS_move_mount, mfd, "", dfd, "",
                                MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) == 0)
            rc = 0;
    }
    int e = errno;
    if (mfd >= 0)
        close(mfd);
    if (fs >= 0)
        close(fs);
    close(dfd);
    errno = e;
    return rc;
}

/* Lazily detaches dir's mount (EINVAL when there is none: nothing to do). */
void sup_disk_unmount(const char *dir)
{
    (void)syscall(SYS_umount2, dir, MNT_DETACH | UMOUNT_NOFOLLOW);
}

/* Each subdirectory's mount, for a gone daemon's directory of them. */
void sup_disk_unmount_children(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[4096];
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_type == DT_DIR && e->d_name[0] != '.' &&
            (size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < sizeof path)
            sup_disk_unmount(path);
    closedir(d);
}
