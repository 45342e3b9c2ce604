/* proto_walk: the guarantees of PROTOCOL.md section 2 that msgpack-c does
 * not give. msgpack_unpack allocates n x 24 bytes when a container header
 * arrives (5 bytes claiming 16M items ask for 512 MiB), caps depth at a
 * build-time 32 reported as out of memory, and accepts non-str keys; so
 * every message is walked once here, reading headers only, before it is
 * unpacked. Repeated keys are found after unpacking (proto_unpack.c). */
#include "proto_walk.h"

typedef struct walk {
    const uint8_t *p, *end;
    long long values;
    proto_error *err;
} walk;

/* Every refusal of the walk: a bad_frame naming the problem. */
static int fail(walk *w, const char *what)
{
    proto_error_set(w->err, "bad_frame", "malformed msgpack: %s", what);
    return -1;
}

/* Steps over n bytes of payload, refusing a message that ends first. */
static int skip(walk *w, uint64_t n)
{
    if ((uint64_t)(w->end - w->p) < n)
        return fail(w, "truncated");
    w->p += n;
    return 0;
}

/* Reads the big-endian length of width bytes that follows a type byte. */
static int read_len(walk *w, int width, uint64_t *n)
{
    if (w->end - w->p < width)
        return fail(w, "truncated");
    *n = 0;
    for (int i = 0; i < width; i++)
        *n = (*n << 8) | *w->p++;
    return 0;
}

/* The first byte of a str (fixstr, str8, str16, str32). */
static bool is_str_byte(uint8_t t)
{
    return (t & 0xe0) == 0xa0 || (t >= 0xd9 && t <= 0xdb);
}

static int walk_value(walk *w, int depth);

/* A container of n items (maps: 2n). Every item takes at least one byte, so
 * a count larger than the bytes left is refused before anything is read. */
static int walk_container(walk *w, uint64_t n, bool map, int depth)
{
    uint64_t items = map ? 2 * n : n;
    if (depth >= PROTO_MAX_DEPTH)
        return fail(w, "nesting too deep");
    if (items > (uint64_t)(w->end - w->p))
        return fail(w, "container count exceeds the message");
    w->values += (long long)items;
    for (uint64_t i = 0; i < items; i++) {
        const uint8_t *start = w->p;
        if (walk_value(w, depth + 1) < 0)
            return -1;
        if (map && i % 2 == 0 && !is_str_byte(*start))
            return fail(w, "map key is not a str");
    }
    return 0;
}

/* The payload sizes of the fixed-width forms 0xc0..0xdf that carry no length
 * (-1: a form with a length or a container, handled in walk_value; -2: the
 * never-used 0xc1). */
static const signed char fixed_payload[32] = {
    [0x00] = 0,  [0x01] = -2, [0x02] = 0,  [0x03] = 0,  /* nil, (c1), false, true */
    [0x04] = -1, [0x05] = -1, [0x06] = -1,              /* bin 8/16/32 */
    [0x07] = -1, [0x08] = -1, [0x09] = -1,              /* ext 8/16/32 */
    [0x0a] = 4,  [0x0b] = 8,                            /* float 32/64 */
    [0x0c] = 1,  [0x0d] = 2,  [0x0e] = 4,  [0x0f] = 8,  /* uint 8..64 */
    [0x10] = 1,  [0x11] = 2,  [0x12] = 4,  [0x13] = 8,  /* int 8..64 */
    [0x14] = 2,  [0x15] = 3,  [0x16] = 5,  [0x17] = 9,  /* fixext 1/2/4/8 */
    [0x18] = 17, [0x19] = -1, [0x1a] = -1, [0x1b] = -1, /* fixext 16, str 8/16/32 */
    [0x1c] = -1, [0x1d] = -1, [0x1e] = -1, [0x1f] = -1, /* array 16/32, map 16/32 */
};

/* One value of any type, containers recursively (depth-bounded). */
static int walk_value(walk *w, int depth)
{
    if (w->p >= w->end)
        return fail(w, "truncated");
    uint8_t t = *w->p++;
    uint64_t n = 0;
    if (t <= 0x7f || t >= 0xe0)
        return 0; /* fixint */
    if (t <= 0x8f)
        return walk_container(w, t & 0x0f, true, depth);
    if (t <= 0x9f)
        return walk_container(w, t & 0x0f, false, depth);
    if (t <= 0xbf)
        return skip(w, t & 0x1f);
    int fixed = fixed_payload[t - 0xc0];
    if (fixed == -2)
        return fail(w, "invalid type byte");
    if (fixed >= 0)
        return skip(w, (uint64_t)fixed);
    if (t >= 0xc4 && t <= 0xc6) /* bin */
        return read_len(w, 1 << (t - 0xc4), &n) < 0 ? -1 : skip(w, n);
    if (t >= 0xc7 && t <= 0xc9) /* ext: the type byte follows the length */
        return read_len(w, 1 << (t - 0xc7), &n) < 0 ? -1 : skip(w, n + 1);
    if (t >= 0xd9 && t <= 0xdb) /* str */
        return read_len(w, 1 << (t - 0xd9), &n) < 0 ? -1 : skip(w, n);
    if (read_len(w, t & 1 ? 4 : 2, &n) < 0) /* 0xdc..0xdf */
        return -1;
    return walk_container(w, n, t >= 0xde, depth);
}

long long proto_walk(const uint8_t *buf, size_t len, proto_error *err)
{
    walk w = {.p = buf, .end = buf + len, .values = 1, .err = err};
    if (len == 0)
        return fail(&w, "empty message");
    if (walk_value(&w, 0) < 0)
        return -1;
    if (w.p != w.end)
        return fail(&w, "trailing bytes after the message");
    return w.values;
}
