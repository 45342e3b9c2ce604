/* sup_hsmon: failed CurveZMQ handshakes on the daemon's tcp:// endpoints,
 * said and counted (daemon/zap's zap_hs). */
#include "sup_hsmon.h"

#include "sup_log.h"

#include "zap_hs.h"

#include <stdarg.h>
#include <stdio.h>
#include <zmq.h>

static zap_hs hs;
static bool ready;
static char last_endpoint[128] = "tcp";

/* A line on the daemon's stderr, as its other lines. */
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ctxd: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

uint16_t sup_hsmon_events(void)
{
    return (uint16_t)ZAP_HS_EVENTS;
}

void sup_hsmon_event(uint16_t event, uint32_t value, const char *endpoint)
{
    if (!ready) {
        zap_hs_init(&hs);
        ready = true;
    }
    if (endpoint && *endpoint)
        snprintf(last_endpoint, sizeof last_endpoint, "%s", endpoint);
    zap_hs_server_event(&hs, event, value, last_endpoint, sup_now(), say);
}

double sup_hsmon_tick(double now)
{
    return ready ? zap_hs_flush(&hs, last_endpoint, now, say) : 0;
}

void sup_hsmon_put(proto_buf *b)
{
    proto_put_map(b, ZAP_HS_NKINDS);
    for (int k = 0; k < ZAP_HS_NKINDS; k++) {
        proto_put_str(b, zap_hs_kind_names[k]);
        proto_put_uint(b, ready ? hs.failed[k] : 0);
    }
}
