/* sup_notify: see sup_notify.h. sd_notify(3)'s protocol: a datagram of
 * newline-separated VAR=value lines to the AF_UNIX socket named by
 * $NOTIFY_SOCKET, sent by the main pid (or with MAINPID=). */
#include "sup_notify.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Tells the service manager state, when one asked for it. */
int sup_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || (path[0] != '/' && path[0] != '@'))
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof sa.sun_path)
        return -1;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace */
    char msg[256];
    int len = snprintf(msg, sizeof msg, "%s\nMAINPID=%d", state, (int)getpid());
    if (len < 0 || (size_t)len >= sizeof msg)
        return -1;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    ssize_t w = sendto(fd, msg, (size_t)len, MSG_NOSIGNAL, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n));
    close(fd);
    return w == len ? 0 : -1;
}
