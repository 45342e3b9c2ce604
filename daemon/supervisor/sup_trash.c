/* sup_trash: removing private directories without blocking the loop.
 *
 * A deleted context's directory is renamed into STATE_DIR/contexts/.trash
 * at once (its path is gone when ctx.delete answers) and emptied there a
 * bounded number of entries per loop turn, by descriptor: files unlinked,
 * subdirectories renamed into the trash to become items of their own, so
 * no tree, however deep or large a worker made it, blocks the loop or
 * grows the daemon's memory. Nothing is followed: a symbolic link is an
 * entry like any other. */
#include "sup_trash.h"

#include "sup_auth.h"
#include "sup_disk.h"
#include "sup_log.h"

#include "mem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TRASH_BUDGET 512 /* entries removed per loop turn */

static int trash_fd = -1;
static bool trash_busy;
static unsigned long trash_serial;

/* The trash directory (0700), opened once. -1 if it cannot be made. */
static int trash_dir(void)
{
    if (trash_fd >= 0)
        return trash_fd;
    char path[4096];
    const char *state = sup_auth_state_dir();
    if (!state || (size_t)snprintf(path, sizeof path, "%s/contexts/.trash", state) >= sizeof path)
        return -1;
    (void)mkdir(path, 0700);
    trash_fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (trash_fd >= 0 && (fstat(trash_fd, &st) < 0 || st.st_uid != geteuid())) {
        close(trash_fd);
        trash_fd = -1;
    }
    trash_busy = trash_fd >= 0; /* a previous daemon may have left work */
    return trash_fd;
}

/* Moves the entry `name` of the open directory dir into the trash. */
static int to_trash(int dir, const char *name)
{
    char item[32];
    snprintf(item, sizeof item, "t%d.%lu", (int)getpid(), ++trash_serial);
    if (renameat(dir, name, trash_dir(), item) < 0)
        return -1;
    trash_busy = true;
    sup_timer_moved();
    return 0;
}

/* Empties one trash item, within *budget entries; removes it once empty. */
static void empty_item(const char *item, int *budget)
{
    int fd = openat(trash_fd, item, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) { /* not a directory (or gone): one entry */
        (void)unlinkat(trash_fd, item, 0);
        (*budget)--;
        return;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    bool empty = true;
    struct dirent *e;
    while (*budget > 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat st;
        (*budget)--;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (!S_ISDIR(st.st_mode) ? unlinkat(dirfd(d), e->d_name, 0) < 0
                                 : to_trash(dirfd(d), e->d_name) < 0)
            empty = false; /* (another file system: left, never followed) */
    }
    if (*budget > 0 && empty)
        (void)unlinkat(trash_fd, item, AT_REMOVEDIR);
    closedir(d);
}

/* A loop turn's share of the emptying. */
double sup_trash_tick(double now)
{
    if (!trash_busy || trash_fd < 0)
        return 0;
    int budget = TRASH_BUDGET;
    int fd = dup(trash_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return now + 1;
    }
    rewinddir(d);
    bool any = false;
    struct dirent *e;
    while (budget > 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        any = true;
        empty_item(e->d_name, &budget);
    }
    closedir(d);
    trash_busy = any;
    return any ? now : 0;
}

/* At start, once the state directory is known. */
void sup_trash_start(void)
{
    (void)trash_dir(); /* empties what a previous daemon left in the trash */
}

/* The one way a private directory goes (sup_ident.c, sup_privdir.c). */
void sup_trash_rmtree(const char *path)
{
    sup_disk_unmount(path); /* its disk budget's file system (sup_disk.c) */
    char *copy = mem_strdup(path);
    char *slash = strrchr(copy, '/');
    if (slash && slash != copy && slash[1]) {
        *slash = '\0';
        int parent = open(copy, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (parent >= 0 && trash_dir() >= 0 && to_trash(parent, slash + 1) < 0)
            sup_log("context directory %s: cannot remove it: %s", path, strerror(errno));
        if (parent >= 0)
            close(parent);
    }
    free(copy);
}
