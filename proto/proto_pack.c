/* proto_pack: msgpack encoding with msgpack-c's packer, writing into a
 * proto_buf the caller owns. msgpack-c picks the smallest form for integers
 * and lengths (fixint, uint8.., fixstr, str8/16/32, bin8/16/32), floats are
 * float64: the bytes the golden vectors in proto/vectors/ hold. */
#include "proto.h"

#include "mem.h"

#include <msgpack.h>
#include <string.h>

/* msgpack-c's write callback: appends to the proto_buf (which aborts when
 * it cannot grow), so packing never fails. */
static int buf_write(void *data, const char *p, size_t n)
{
    proto_buf_append(data, p, n);
    return 0;
}

/* A packer over b; it is two pointers, so one per call costs nothing. */
static msgpack_packer packer(proto_buf *b)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, buf_write);
    return pk;
}

/* msgpack-c stores a 32-bit length without checking it: a larger object is
 * a broken invariant of the caller, not something to truncate silently. */
static void check_len(size_t n)
{
    if (n > UINT32_MAX)
        fatal("proto: object of %zu elements is too large", n);
}

void proto_put_map(proto_buf *b, uint32_t n)
{
    msgpack_packer pk = packer(b);
    msgpack_pack_map(&pk, n);
}

void proto_put_array(proto_buf *b, uint32_t n)
{
    msgpack_packer pk = packer(b);
    msgpack_pack_array(&pk, n);
}

void proto_put_strn(proto_buf *b, const char *s, size_t n)
{
    check_len(n);
    msgpack_packer pk = packer(b);
    msgpack_pack_str(&pk, n);
    msgpack_pack_str_body(&pk, s, n);
}

void proto_put_str(proto_buf *b, const char *s)
{
    proto_put_strn(b, s, strlen(s));
}

void proto_put_bin(proto_buf *b, const void *p, size_t n)
{
    check_len(n);
    msgpack_packer pk = packer(b);
    msgpack_pack_bin(&pk, n);
    msgpack_pack_bin_body(&pk, p, n);
}

void proto_put_uint(proto_buf *b, uint64_t v)
{
    msgpack_packer pk = packer(b);
    msgpack_pack_uint64(&pk, v);
}

void proto_put_int(proto_buf *b, int64_t v)
{
    msgpack_packer pk = packer(b);
    msgpack_pack_int64(&pk, v);
}

void proto_put_double(proto_buf *b, double v)
{
    msgpack_packer pk = packer(b);
    msgpack_pack_double(&pk, v);
}

void proto_put_bool(proto_buf *b, bool v)
{
    msgpack_packer pk = packer(b);
    if (v)
        msgpack_pack_true(&pk);
    else
        msgpack_pack_false(&pk);
}

void proto_put_nil(proto_buf *b)
{
    msgpack_packer pk = packer(b);
    msgpack_pack_nil(&pk);
}

/* Re-encodes a decoded value (the daemon echoes a request id as `re`). */
void proto_put_val(proto_buf *b, const proto_val *v)
{
    switch (v->kind) {
    case PROTO_NIL:
        proto_put_nil(b);
        break;
    case PROTO_BOOL:
        proto_put_bool(b, v->as.b);
        break;
    case PROTO_INT:
        proto_put_int(b, v->as.i);
        break;
    case PROTO_UINT:
        proto_put_uint(b, v->as.u);
        break;
    case PROTO_FLOAT:
        proto_put_double(b, v->as.f);
        break;
    case PROTO_STR:
        proto_put_strn(b, v->as.s, v->n);
        break;
    case PROTO_BIN:
    case PROTO_EXT: /* re-encoded as bin: the daemon never echoes ext */
        proto_put_bin(b, v->as.s, v->n);
        break;
    case PROTO_ARRAY:
        proto_put_array(b, v->n);
        for (uint32_t i = 0; i < v->n; i++)
            proto_put_val(b, &v->as.items[i]);
        break;
    case PROTO_MAP:
        proto_put_map(b, v->n);
        for (uint32_t i = 0; i < 2 * v->n; i++)
            proto_put_val(b, &v->as.items[i]);
        break;
    }
}

proto_map proto_map_open(proto_buf *b)
{
    proto_map m = {.at = b->len, .n = 0};
    proto_buf_append(b, "\x80", 1);
    return m;
}

void proto_key(proto_buf *b, proto_map *m, const char *s)
{
    proto_put_str(b, s);
    proto_map_count(m, 1);
}

void proto_map_count(proto_map *m, uint32_t pairs)
{
    if (pairs > UINT32_MAX - m->n)
        fatal("proto: map of more than %u pairs", UINT32_MAX);
    m->n += pairs;
}

void proto_map_close(proto_buf *b, const proto_map *m)
{
    if (m->at >= b->len || b->data[m->at] != 0x80)
        fatal("proto: map closed at %zu, not where it was opened", m->at);
    if (m->n <= 15) {
        b->data[m->at] = (uint8_t)(0x80 | m->n);
        return;
    }
    /* map16 or map32: the body moves up by the header's extra bytes. */
    size_t extra = m->n <= 0xffff ? 2 : 4;
    size_t body = b->len - m->at - 1;
    proto_buf_reserve(b, extra);
    memmove(b->data + m->at + 1 + extra, b->data + m->at + 1, body);
    b->len += extra;
    uint8_t *h = b->data + m->at;
    if (extra == 2) {
        h[0] = 0xde;
        h[1] = (uint8_t)(m->n >> 8);
        h[2] = (uint8_t)m->n;
    } else {
        h[0] = 0xdf;
        h[1] = (uint8_t)(m->n >> 24);
        h[2] = (uint8_t)(m->n >> 16);
        h[3] = (uint8_t)(m->n >> 8);
        h[4] = (uint8_t)m->n;
    }
}
