/* sup_park: descriptors parked in a socket's receive queue (sup_park.h).
 * A datagram socket pair: one datagram carries them (SCM_RIGHTS) from one
 * end to the other, the sending end is closed, and the receiving end is
 * the one descriptor held. The kernel keeps the files open while they are
 * in flight; closing the park closes them. */
#include "sup_park.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PARK_MAX 4

int sup_park(const int *fds, int n)
{
    if (n < 1 || n > PARK_MAX) {
        errno = EINVAL;
        return -1;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    union {
        char buf[CMSG_SPACE(sizeof(int) * PARK_MAX)];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    char one = 'p';
    struct iovec iov = {.iov_base = &one, .iov_len = 1};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = u.buf,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n);
    ssize_t w = sendmsg(sv[0], &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    int saved = errno;
    close(sv[0]);
    if (w != 1) {
        close(sv[1]);
        errno = w < 0 ? saved : EIO;
        return -1;
    }
    /* Nothing is ever sent to it again: no one holds the other end. */
    shutdown(sv[1], SHUT_WR);
    return sv[1];
}

int sup_unpark(int park, int *fds, int n)
{
    for (int i = 0; i < n; i++)
        fds[i] = -1;
    if (park < 0)
        return 0;
    union {
        char buf[CMSG_SPACE(sizeof(int) * PARK_MAX)];
        struct cmsghdr align;
    } u;
    char one;
    struct iovec iov = {.iov_base = &one, .iov_len = 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    int got = 0;
    if (recvmsg(park, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) == 1) {
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            if (k > PARK_MAX)
                k = PARK_MAX;
            int tmp[PARK_MAX];
            memcpy(tmp, CMSG_DATA(cm), k * sizeof(int));
            for (size_t i = 0; i < k; i++) {
                if (got < n)
                    fds[got++] = tmp[i];
                else
                    close(tmp[i]);
            }
        }
    }
    close(park);
    return got;
}
