/* sbx_path: opening a path given from outside (a context's cwd, its read
 * and write roots, a mount source) without following a symbolic link in
 * any component, so what is checked is what is used: the caller keeps the
 * descriptor and works from it. Shared by the supervisor and the worker. */
#ifndef CTXD_SBX_PATH_H
#define CTXD_SBX_PATH_H

#include <stddef.h>

/* openat2(path, O_CLOEXEC | flags, RESOLVE_NO_SYMLINKS | NO_MAGICLINKS):
 * the descriptor, or -1 with errno (ELOOP: a component is a symbolic
 * link; then `link`, when given, names the first such component's path). */
int sbx_path_open(const char *path, int flags, char *link, size_t n);

#endif
