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
