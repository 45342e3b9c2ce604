/* sup_peer: who a reply goes to (a type only; no sup_peer.c). */
#ifndef CTXD_SUP_PEER_H
#define CTXD_SUP_PEER_H

#include "proto.h"
#include <stddef.h>
#include <stdint.h>

#define SUP_ROUTE_MAX 256 /* ZeroMQ routing ids are at most 255 bytes */

/* Who a reply goes to: the client's routing id and its request id, kept
 * encoded (msgpack bytes of the id) so it can be echoed as `re` verbatim. */
typedef struct sup_peer {
    uint8_t sock; /* which listening socket (0 plain, 1 CurveZMQ) */
    uint8_t route[SUP_ROUTE_MAX];
    size_t route_len;
    uint8_t re[PROTO_MAX_ID + 8];
    size_t re_len;
    uint32_t conn; /* CurveZMQ: the connection the request came in on (sup_route.c) */
} sup_peer;

#endif
