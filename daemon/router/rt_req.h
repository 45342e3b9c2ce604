/* rt_req: client requests, dispatched by a table: answered by the router
 * (hello, stats, ctx.list), placed (ctx.create) or forwarded to the host
 * the catalog names. */
#ifndef CTXD_RT_REQ_H
#define CTXD_RT_REQ_H

#include "proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Handles one message from client `route` on listening socket sock (0
 * plain, 1 CurveZMQ) with CurveZMQ key `key` ("" for none). */
void rt_req_handle(int sock, const uint8_t *route, size_t route_len, const char *key,
                   const uint8_t *data, size_t len);
/* A loop output: sends the router's own replies queued; true when nothing
 * is left. */
bool rt_req_flush(void *unused);
/* The reply to the router's own create of a client's `default` (host-side
 * name), or NULL when it has none (its host was lost, its connection cut):
 * the requests that waited for it are handled now, or refused. */
void rt_req_default_made(const char *name, const proto_val *reply);
/* A loop timer: forgets clients gone or long silent with nothing in
 * flight. */
void rt_req_tick(void *unused, double now);

#endif
