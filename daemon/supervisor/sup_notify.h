/* sup_notify: systemd's readiness protocol (Type=notify) without libsystemd:
 * one datagram to $NOTIFY_SOCKET. */
#ifndef CTXD_SUP_NOTIFY_H
#define CTXD_SUP_NOTIFY_H

/* Sends state (e.g. "READY=1") to $NOTIFY_SOCKET when it is set (a path, or
 * '@' for an abstract socket); returns 0, or -1 when it is unset or the
 * send failed. */
int sup_notify(const char *state);

#endif
