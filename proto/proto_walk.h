/* proto_walk: the bounded pre-walk run before msgpack-c sees a message
 * (private to proto/). */
#ifndef CTXD_PROTO_WALK_H
#define CTXD_PROTO_WALK_H

#include "proto.h"

/* Checks that buf[0..len) is exactly one msgpack object that msgpack-c may
 * unpack: no container deeper than PROTO_MAX_DEPTH, no count larger than the
 * bytes left after its header, str map keys only, no truncation, no trailing
 * byte, no invalid type byte. Allocates nothing. Returns the number of
 * values (root included; at most len) or -1 with err set ("bad_frame"). */
long long proto_walk(const uint8_t *buf, size_t len, proto_error *err);

#endif
