/* sup_hsmon: the CurveZMQ handshakes that failed on the daemon's tcp://
 * endpoints, as the route monitor's events tell of them (daemon/zap's
 * zap_hs): each said on stderr with the peer and the reason, at a bounded
 * rate, and counted for `stats`. */
#ifndef CTXD_SUP_HSMON_H
#define CTXD_SUP_HSMON_H

#include "proto.h"

#include <stdint.h>

/* The monitor events sup_hsmon_event wants (the route monitor asks for
 * them beside its own). */
uint16_t sup_hsmon_events(void);
/* One event of the CurveZMQ ROUTER's monitor, with its endpoint. */
void sup_hsmon_event(uint16_t event, uint32_t value, const char *endpoint);
/* The periodic tick: a failure whose DISCONNECTED has not come within
 * ZAP_HS_GRACE is said, its peer unknown. Returns when to tick again. */
double sup_hsmon_tick(double now);
/* `handshakes_failed`: a map of the failures by kind since start. */
void sup_hsmon_put(proto_buf *b);

#endif
