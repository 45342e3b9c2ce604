/* rt_auth: the router's key pair, the clients' ZAP handler (daemon/zap),
 * tenants and their bounds (the --tenants file). */
#ifndef CTXD_RT_AUTH_H
#define CTXD_RT_AUTH_H

#include "rt_bound.h"

#include <stdbool.h>

/* Loads (or makes) the key pair and, for a CurveZMQ listening socket,
 * starts the ZAP handler, its socket watched by the loop; -1 (said on
 * stderr) when it cannot. */
int rt_auth_setup(void *zctx, void *curve_router);
/* A loop reader: answers the ZAP requests waiting; true when it answered
 * one. */
bool rt_auth_serve(void *unused);
const char *rt_auth_public(void);
const char *rt_auth_secret(void);
/* The tenant ("" for none) and bounds of a client key ("" for a client
 * of a plaintext socket). */
void rt_auth_client(const char *key, char tenant[33], rt_bounds *b);

#endif
