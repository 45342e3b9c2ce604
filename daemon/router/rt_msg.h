/* rt_msg: msgpack rewriting (names, instance pins) and the router's own
 * replies. */
#ifndef CTXD_RT_MSG_H
#define CTXD_RT_MSG_H

#include "proto.h"
#include "rt_out.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A field to set when rewriting a map: str value, or NULL to drop it. */
typedef struct rt_sub {
    const char *key;
    const char *str;
    const proto_val *val; /* used when str is NULL and val is set */
    const proto_buf *raw; /* msgpack bytes, used when str and val are NULL */
    bool drop;
} rt_sub;
/* Re-encodes map msg with subs applied (absent keys appended). */
void rt_msg_rewrite(proto_buf *b, const proto_val *msg, const rt_sub *subs, size_t nsubs);
/* {v, t, re} head of a router message; caller adds nfields pairs. */
void rt_msg_begin(proto_buf *b, const char *type, const uint8_t *re, size_t re_len,
                  uint32_t nfields);
void rt_msg_err(proto_buf *b, const uint8_t *re, size_t re_len, const char *code, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
/* An `err` to client c (its own queue). */
void rt_reply_err(rt_client *c, const uint8_t *re, size_t re_len, const char *code, const char *fmt,
                  ...) __attribute__((format(printf, 5, 6)));
/* Host-side name of a client's context name: the tenant prefix added. */
void rt_msg_hostname(const rt_client *c, const char *name, size_t n, char out[PROTO_MAX_NAME + 1]);
/* The client-side name, or NULL when host_name is not the tenant's. */
const char *rt_msg_clientname(const rt_client *c, const char *host_name);

#endif
