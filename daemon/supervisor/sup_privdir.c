/* sup_privdir: where the private directories of contexts made without a
 * cwd live, STATE_DIR/contexts/<instance>/NAME.XXXXXX (sup_ident.c). A
 * daemon removes each one with its context, but a daemon that is killed or
 * crashes removes nothing; several daemons may share a state directory. So
 * every daemon holds an exclusive lock on STATE_DIR/contexts/<instance>.lock
 * for its whole life, and at start a daemon moves the directories of every
 * instance whose lock it can take (their daemon is gone) into the trash,
 * which empties them in the background by descriptor (sup_trash_rmtree). */
#include "sup_privdir.h"

#include "sup_config.h"
#include "sup_disk.h"
#include "sup_stats.h"
#include "sup_trash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int lock_fd = -1;

/* True for a name of 32 lower-case hex digits (an instance id). */
static bool is_instance(const char *s, size_t n)
{
    if (n != 32)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* Removes dir/<instance> and its lock when no live daemon holds the lock. */
static void sweep_instance(const char *dir, const char *inst)
{
    char lock[PATH_MAX + 64], tree[PATH_MAX + 64];
    snprintf(lock, sizeof lock, "%s/%.32s.lock", dir, inst);
    snprintf(tree, sizeof tree, "%s/%.32s", dir, inst);
    int fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
        close(fd); /* its daemon is alive */
        return;
    }
    struct stat st;
    if (lstat(tree, &st) == 0 && S_ISDIR(st.st_mode)) {
        sup_disk_unmount_children(tree); /* disk budgets (sup_disk.c) */
        sup_trash_rmtree(tree);
        sup_stats_event("contexts-leftovers-removed dir=%s", tree);
    }
    unlink(lock);
    if (fd >= 0)
        close(fd);
}

void sup_privdir_sweep(const char *state_dir)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/contexts", state_dir);
    DIR *d = opendir(dir);
    if (!d)
        return;
    char names[256][33];
    size_t n = 0;
    struct dirent *e;
    /* Collected first (at most 256 a start), then removed: no readdir while
     * the directory changes. */
    while ((e = readdir(d)) && n < sizeof names / sizeof names[0]) {
        size_t len = strlen(e->d_name);
        if (len == 37 && strcmp(e->d_name + 32, ".lock") == 0)
            len = 32;
        if (!is_instance(e->d_name, len) || strncmp(e->d_name, sup_instance, 32) == 0)
            continue;
        bool seen = false;
        for (size_t i = 0; i < n && !seen; i++)
            seen = strncmp(names[i], e->d_name, 32) == 0;
        if (!seen)
            snprintf(names[n++], sizeof names[0], "%.32s", e->d_name);
    }
    closedir(d);
    for (size_t i = 0; i < n; i++)
        sweep_instance(dir, names[i]);
}

int sup_privdir_base(const char *state_dir, char *out, size_t n)
{
    /* 0711 at each level: a confined worker, of its own uid, passes
     * through to its directory and lists nothing */
    snprintf(out, n, "%s/contexts", state_dir);
    if ((mkdir(out, 0711) < 0 && errno != EEXIST) || chmod(out, 0711) < 0)
        return -1;
    if (lock_fd < 0) {
        char lock[PATH_MAX];
        snprintf(lock, sizeof lock, "%s/contexts/%s.lock", state_dir, sup_instance);
        int fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return -1;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        lock_fd = fd; /* held until the daemon ends */
    }
    if ((size_t)snprintf(out, n, "%s/contexts/%s", state_dir, sup_instance) >= n) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if ((mkdir(out, 0711) < 0 && errno != EEXIST) || chmod(out, 0711) < 0)
        return -1;
    return 0;
}
