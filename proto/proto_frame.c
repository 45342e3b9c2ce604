/* proto_frame: 4-byte big-endian length prefixes for the worker channel. */
#include "proto.h"

#include "mem.h"

size_t proto_frame_begin(proto_buf *b)
{
    static const uint8_t zero[4];
    size_t start = b->len;
    proto_buf_append(b, zero, sizeof zero);
    return start;
}

void proto_frame_end(proto_buf *b, size_t start)
{
    size_t n = b->len - start - 4;
    if (n > UINT32_MAX)
        fatal("proto_frame_end: frame of %zu bytes", n);
    uint8_t *p = b->data + start;
    p[0] = (uint8_t)(n >> 24);
    p[1] = (uint8_t)(n >> 16);
    p[2] = (uint8_t)(n >> 8);
    p[3] = (uint8_t)n;
}

int proto_frame_next(const uint8_t *data, size_t len, size_t max, const uint8_t **body,
                     size_t *body_len, size_t *consumed)
{
    if (len < 4)
        return 0;
    size_t n = ((size_t)data[0] << 24) | ((size_t)data[1] << 16) | ((size_t)data[2] << 8) |
               (size_t)data[3];
    if (n > max)
        return -1;
    if (len - 4 < n)
        return 0;
    *body = data + 4;
    *body_len = n;
    *consumed = n + 4;
    return 1;
}
