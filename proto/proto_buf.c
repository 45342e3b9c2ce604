/* proto_buf: the growable byte buffer every encoder and reader appends to. */
#include "proto.h"

#include "mem.h"

#include <stdlib.h>
#include <string.h>

void proto_buf_init(proto_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void proto_buf_free(proto_buf *b)
{
    free(b->data);
    proto_buf_init(b);
}

/* Grows geometrically so appending byte by byte stays linear. */
void proto_buf_reserve(proto_buf *b, size_t extra)
{
    if (extra > SIZE_MAX / 2 - b->len)
        fatal("proto_buf: size overflow");
    size_t need = b->len + extra;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    b->data = mem_realloc(b->data, cap);
    b->cap = cap;
}

void proto_buf_append(proto_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    proto_buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void proto_buf_consume(proto_buf *b, size_t n)
{
    if (n > b->len)
        fatal("proto_buf_consume: %zu > %zu", n, b->len);
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}
