/* rt_info: the router's hello and stats replies (PROTOCOL.md section 10). */
#ifndef CTXD_RT_INFO_H
#define CTXD_RT_INFO_H

#include "rt_out.h"

#include <stddef.h>
#include <stdint.h>

/* Answers hello (request id re_id) to c: a live host's hello with the
 * router's pid and instance and a `router` map (hosts, live, instance,
 * summary, states); with no live host the router's own, `unavailable`
 * saying why. */
void rt_info_hello(rt_client *c, const uint8_t *re_id, size_t re_len);
/* Answers stats to c: counters (requests, forwarded, refused, as given),
 * contexts, each host's state and reach, failed handshakes. */
void rt_info_stats(rt_client *c, const uint8_t *re_id, size_t re_len, const uint64_t counters[3]);

#endif
