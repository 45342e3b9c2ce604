/* sup_route: CurveZMQ routing ids bound to their connection. */
#ifndef CTXD_SUP_ROUTE_H
#define CTXD_SUP_ROUTE_H

#include "sup_peer.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Watches the CurveZMQ router's connections (a socket monitor); -1 on
 * failure. */
int sup_route_open(void *zctx, void *curve_router);
void *sup_route_monitor(void); /* the monitor socket, to poll; NULL before open */
void sup_route_on_monitor(void);
/* A message (zmsg, a zmq_msg_t) arrived on route: records its connection
 * (key and descriptor from its metadata) and returns its generation. *gap: the same client
 * came back on a new connection after *gap_dropped of its messages were
 * dropped. */
uint32_t sup_route_note(const uint8_t *route, size_t len, void *zmsg, bool *gap,
                        uint64_t *gap_dropped);
/* The live generation of route (0 when none). */
uint32_t sup_route_current(const uint8_t *route, size_t len);
/* May a message for peer go out? False (counted) when the connection its
 * request came in on is gone or another one holds its routing id. */
bool sup_route_ok(const sup_peer *peer);

#endif
