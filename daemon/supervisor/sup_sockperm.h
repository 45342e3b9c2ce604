/* sup_sockperm: who may connect to an ipc:// socket. */
#ifndef CTXD_SUP_SOCKPERM_H
#define CTXD_SUP_SOCKPERM_H

/* After binding the socket file at path: mode 0600 (connecting needs write
 * permission on it, so only the daemon's user connects), or with
 * --socket-group 0660 of that group, and its directory 0750 of that group
 * so the group can reach it. Returns 0, or -1 (reported on stderr). */
int sup_sockperm_apply(const char *path);

#endif
