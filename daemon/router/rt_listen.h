/* rt_listen: the clients' listening ROUTER sockets (tcp:// with CurveZMQ,
 * ipc:// plain): bound, read, each message handed to rt_req. */
#ifndef CTXD_RT_LISTEN_H
#define CTXD_RT_LISTEN_H

#include <stdbool.h>

/* Binds every --listen endpoint and sets up the router's keys (rt_auth);
 * -1 (said on stderr) when one cannot be. */
int rt_listen_open(void *zctx);
/* A loop reader (gated: clients wait for the catalog and the hosts): the
 * messages each listening socket holds; true when it read one. */
bool rt_listen_serve(void *unused);

#endif
