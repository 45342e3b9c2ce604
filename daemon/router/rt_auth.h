/* rt_auth: the router's key pair, the clients' ZAP handler (daemon/zap),
 * tenants and their bounds (the --tenants file). */
#ifndef CTXD_RT_AUTH_H
#define CTXD_RT_AUTH_H

#include "rt_bound.h"

#include <stdbool.h>
#include <stdint.h>

/* Loads (or makes) the key pair and, for a CurveZMQ listening socket,
 * starts the ZAP handler, its socket watched by the loop; -1 (said on
 * stderr) when it cannot. */
int rt_auth_setup(void *zctx, void *curve_router);
/* A loop reader: answers the ZAP requests waiting; true when it answered
 * one. */
bool rt_auth_serve(void *unused);
/* A loop reader: the clients' CurveZMQ socket's failed handshakes, each
 * said (peer, reason, at a bounded rate) and counted; true when it read. */
bool rt_auth_serve_monitor(void *unused);
/* The clients' failed handshakes by kind (daemon/zap's ZAP_HS_NKINDS). */
const uint64_t *rt_auth_failed(void);
const char *rt_auth_public(void);
const char *rt_auth_secret(void);
/* The tenant ("" for none) and bounds of a client key ("" for a client
 * of a plaintext socket). */
void rt_auth_client(const char *key, char tenant[33], rt_bounds *b);

#endif
