/* proto_peek: a field of a message read from its first bytes, without
 * decoding it whole: the request id of one that exceeds max_request_bytes
 * (its `err too_large` can carry `re`, so the client's request ends), and
 * the type of a frame that is dropped unread when it is of one kind. */
#include "proto.h"

#include <string.h>

/* How many top-level pairs the walk looks at: clients write v, t, id first. */
#define PEEK_PAIRS 8

typedef struct peek {
    const uint8_t *p, *end;
} peek;

/* Big-endian integer of width bytes; false when the message ends first. */
static bool peek_be(peek *k, int width, uint64_t *v)
{
    if ((size_t)(k->end - k->p) < (size_t)width)
        return false;
    *v = 0;
    for (int i = 0; i < width; i++)
        *v = (*v << 8) | *k->p++;
    return true;
}

/* One scalar, str or bin: its kind and value (strings point into the
 * message), every field of *out set (zero where the kind has no value).
 * Containers and ext end the walk (false). */
static bool peek_value(peek *k, proto_val *out)
{
    if (k->p >= k->end)
        return false;
    uint8_t t = *k->p++;
    uint64_t n = 0;
    *out = (proto_val){.kind = PROTO_NIL};
    if (t <= 0x7f) {
        out->kind = PROTO_UINT;
        out->as.u = t;
        return true;
    }
    if (t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
        out->kind = PROTO_NIL; /* not an id: the value is not needed */
        return true;
    }
    if ((t & 0xe0) == 0xa0 || (t >= 0xd9 && t <= 0xdb) || (t >= 0xc4 && t <= 0xc6)) {
        bool str = t < 0xc4 || t > 0xc6;
        if ((t & 0xe0) == 0xa0)
            n = t & 0x1f;
        else if (!peek_be(k, 1 << (str ? t - 0xd9 : t - 0xc4), &n))
            return false;
        if ((uint64_t)(k->end - k->p) < n)
            return false;
        out->kind = str ? PROTO_STR : PROTO_BIN;
        out->n = (uint32_t)n;
        out->as.s = (const char *)k->p;
        k->p += n;
        return true;
    }
    if (t >= 0xcc && t <= 0xcf) {
        out->kind = PROTO_UINT;
        return peek_be(k, 1 << (t - 0xcc), &out->as.u);
    }
    if ((t >= 0xd0 && t <= 0xd3) || t == 0xca || t == 0xcb) {
        int width = t == 0xca ? 4 : t == 0xcb ? 8 : 1 << (t - 0xd0);
        out->kind = PROTO_NIL;
        return peek_be(k, width, &n);
    }
    return false;
}

/* Walks the top-level pairs from the start of buf for the scalar value of
 * key (n bytes); false when the message ends, is not a map, or the walk
 * meets a container or PEEK_PAIRS pairs before it. */
static bool peek_key(const void *buf, size_t len, const char *key, size_t n, proto_val *out)
{
    peek k = {.p = buf, .end = (const uint8_t *)buf + len};
    uint64_t pairs = 0;
    if (len == 0)
        return false;
    uint8_t t = *k.p++;
    if ((t & 0xf0) == 0x80)
        pairs = t & 0x0f;
    else if (t != 0xde && t != 0xdf)
        return false;
    else if (!peek_be(&k, t == 0xde ? 2 : 4, &pairs))
        return false;
    for (uint64_t i = 0; i < pairs && i < PEEK_PAIRS; i++) {
        proto_val kv, val;
        if (!peek_value(&k, &kv) || kv.kind != PROTO_STR || !peek_value(&k, &val))
            return false;
        if (kv.n == n && memcmp(kv.as.s, key, n) == 0) {
            *out = val;
            return true;
        }
    }
    return false;
}

/* A request's id, for the `err too_large` of one not decoded whole. */
bool proto_peek_id(const void *buf, size_t len, proto_val *id)
{
    proto_val val;
    if (!peek_key(buf, len, "id", 2, &val))
        return false;
    if (val.kind == PROTO_UINT || (val.kind == PROTO_STR && val.n >= 1 && val.n <= PROTO_MAX_ID &&
                                   proto_utf8_valid(val.as.s, val.n, false))) {
        *id = val;
        return true;
    }
    return false;
}

/* A frame's `t`, for a reader that drops frames of one kind unread. */
bool proto_peek_type(const void *buf, size_t len, proto_val *type)
{
    return peek_key(buf, len, "t", 1, type) && type->kind == PROTO_STR;
}
