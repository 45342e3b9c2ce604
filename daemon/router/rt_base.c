/* rt_base: the router's configuration (filled by the command line), its
 * instance, its clock and its log. */
#include "rt_base.h"

#include "mem.h"
#include "proto.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

rt_config rt_cfg = {
    .liveness = 1.0,
    .liveness_max = 10.0,
    .etcd_prefix = "/ctxd",
    .max_request_bytes = PROTO_MAX_REQUEST,
};
char rt_instance[RT_INSTANCE + 1];

void rt_base_start(void)
{
    uint8_t raw[16];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        fatal("getrandom failed");
    for (int i = 0; i < 16; i++)
        snprintf(rt_instance + 2 * i, 3, "%02x", raw[i]);
    srandom((unsigned)(raw[0] | raw[1] << 8 | raw[2] << 16));
}

double rt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void rt_log(const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ctxd-router: %s\n", text);
}
