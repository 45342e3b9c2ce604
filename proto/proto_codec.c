/* proto_codec: msgpack encoding and bounded decoding. */
#include "proto.h"

#include "mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- encoder ---------------------------------------------------------- */

static void put_u8(proto_buf *b, uint8_t v)
{
    proto_buf_append(b, &v, 1);
}

/* Type byte followed by a big-endian integer of `width` bytes. */
static void put_be(proto_buf *b, uint8_t type, uint64_t v, int width)
{
    uint8_t tmp[9];
    tmp[0] = type;
    for (int i = 0; i < width; i++)
        tmp[1 + i] = (uint8_t)(v >> (8 * (width - 1 - i)));
    proto_buf_append(b, tmp, (size_t)width + 1);
}

/* Header of a container or byte string: fix form when it fits, else the
 * 8/16/32-bit length forms (fix_max = 0 when there is no fix form). */
static void put_header(proto_buf *b, uint64_t n, uint8_t fix_base, uint64_t fix_max, uint8_t t8,
                       uint8_t t16, uint8_t t32)
{
    if (fix_max && n <= fix_max)
        put_u8(b, (uint8_t)(fix_base | n));
    else if (t8 && n <= 0xff)
        put_be(b, t8, n, 1);
    else if (n <= 0xffff)
        put_be(b, t16, n, 2);
    else if (n <= 0xffffffffu)
        put_be(b, t32, n, 4);
    else
        fatal("proto: object of %llu elements is too large", (unsigned long long)n);
}

void proto_put_map(proto_buf *b, uint32_t n)
{
    put_header(b, n, 0x80, 15, 0, 0xde, 0xdf);
}

void proto_put_array(proto_buf *b, uint32_t n)
{
    put_header(b, n, 0x90, 15, 0, 0xdc, 0xdd);
}

void proto_put_strn(proto_buf *b, const char *s, size_t n)
{
    put_header(b, n, 0xa0, 31, 0xd9, 0xda, 0xdb);
    proto_buf_append(b, s, n);
}

void proto_put_str(proto_buf *b, const char *s)
{
    proto_put_strn(b, s, strlen(s));
}

void proto_put_bin(proto_buf *b, const void *p, size_t n)
{
    put_header(b, n, 0, 0, 0xc4, 0xc5, 0xc6);
    proto_buf_append(b, p, n);
}

void proto_put_uint(proto_buf *b, uint64_t v)
{
    if (v <= 0x7f)
        put_u8(b, (uint8_t)v);
    else if (v <= 0xff)
        put_be(b, 0xcc, v, 1);
    else if (v <= 0xffff)
        put_be(b, 0xcd, v, 2);
    else if (v <= 0xffffffffu)
        put_be(b, 0xce, v, 4);
    else
        put_be(b, 0xcf, v, 8);
}

void proto_put_int(proto_buf *b, int64_t v)
{
    if (v >= 0)
        proto_put_uint(b, (uint64_t)v);
    else if (v >= -32)
        put_u8(b, (uint8_t)(int8_t)v);
    else if (v >= INT8_MIN)
        put_be(b, 0xd0, (uint64_t)v & 0xff, 1);
    else if (v >= INT16_MIN)
        put_be(b, 0xd1, (uint64_t)v & 0xffff, 2);
    else if (v >= INT32_MIN)
        put_be(b, 0xd2, (uint64_t)v & 0xffffffffu, 4);
    else
        put_be(b, 0xd3, (uint64_t)v, 8);
}

void proto_put_double(proto_buf *b, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    put_be(b, 0xcb, bits, 8);
}

void proto_put_bool(proto_buf *b, bool v)
{
    put_u8(b, v ? 0xc3 : 0xc2);
}

void proto_put_nil(proto_buf *b)
{
    put_u8(b, 0xc0);
}

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

/* ---- decoder ---------------------------------------------------------- */

void proto_error_set(proto_error *e, const char *code, const char *fmt, ...)
{
    if (!e)
        return;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
}

/* Decoder state. Pass one (nodes == NULL) validates and counts nodes; pass
 * two fills the node array allocated from that count. Child arrays of a
 * container are laid out contiguously, reserved before the children are
 * parsed, so one allocation holds the whole tree. */
typedef struct decoder {
    const uint8_t *p, *end;
    proto_val *nodes;
    size_t used, count;
    proto_error *err;
} decoder;

static int fail(decoder *d, const char *what)
{
    proto_error_set(d->err, "bad_frame", "malformed msgpack: %s", what);
    return -1;
}

static int need(decoder *d, size_t n)
{
    return (size_t)(d->end - d->p) >= n ? 0 : fail(d, "truncated");
}

static uint64_t read_be(decoder *d, int width)
{
    uint64_t v = 0;
    for (int i = 0; i < width; i++)
        v = (v << 8) | d->p[i];
    d->p += width;
    return v;
}

/* Reads a length of `width` bytes (when width > 0) after the type byte. */
static int read_len(decoder *d, int width, uint64_t *n)
{
    if (need(d, (size_t)width) < 0)
        return -1;
    *n = read_be(d, width);
    return 0;
}

static proto_val *reserve_nodes(decoder *d, uint64_t n)
{
    proto_val *first = d->nodes ? d->nodes + d->used : NULL;
    d->used += n;
    return first;
}

static int parse(decoder *d, proto_val *out, int depth);

/* Orders two map keys (str values) by length, then bytes. */
static int key_order(const proto_val *x, const proto_val *y)
{
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return memcmp(x->as.s, y->as.s, x->n);
}

/* key_order on pointers to keys, for qsort. */
static int key_cmp(const void *a, const void *b)
{
    return key_order(*(const proto_val *const *)a, *(const proto_val *const *)b);
}

/* Small maps are compared pair by pair; larger ones sort pointers to their
 * keys and compare neighbours, so a map of n keys costs O(n log n), never
 * O(n^2) (a 40,000-key env once stalled the daemon for seconds). */
#define SMALL_MAP 16
static bool map_has_duplicate(const proto_val *kids, uint64_t n)
{
    if (n <= SMALL_MAP) {
        for (uint64_t i = 1; i < n; i++)
            for (uint64_t j = 0; j < i; j++)
                if (key_order(&kids[2 * i], &kids[2 * j]) == 0)
                    return true;
        return false;
    }
    const proto_val **keys = mem_alloc(n * sizeof *keys);
    for (uint64_t i = 0; i < n; i++)
        keys[i] = &kids[2 * i];
    qsort(keys, n, sizeof *keys, key_cmp);
    bool dup = false;
    for (uint64_t i = 1; i < n && !dup; i++)
        dup = key_order(keys[i - 1], keys[i]) == 0;
    free(keys);
    return dup;
}

/* A container of n items (maps: 2n). Every item takes at least one byte, so a
 * count larger than the bytes left is rejected before any allocation. */
static int parse_container(decoder *d, proto_val *out, proto_kind kind, uint64_t n, int depth)
{
    uint64_t items = kind == PROTO_MAP ? 2 * n : n;
    if (depth >= PROTO_MAX_DEPTH)
        return fail(d, "nesting too deep");
    if (items > (uint64_t)(d->end - d->p))
        return fail(d, "container count exceeds the message");
    proto_val *kids = reserve_nodes(d, items);
    if (out) {
        out->kind = kind;
        out->n = (uint32_t)n;
        out->as.items = kids;
    }
    for (uint64_t i = 0; i < items; i++) {
        proto_val *kid = kids ? &kids[i] : NULL;
        const uint8_t *key_start = d->p;
        if (parse(d, kid, depth + 1) < 0)
            return -1;
        if (kind != PROTO_MAP || i % 2)
            continue;
        /* Map keys: str only. */
        if (*key_start != 0xd9 && *key_start != 0xda && *key_start != 0xdb &&
            (*key_start & 0xe0) != 0xa0)
            return fail(d, "map key is not a str");
    }
    /* Map keys must not repeat: checked on pass two, where the keys are
     * materialised. */
    if (kids && kind == PROTO_MAP && map_has_duplicate(kids, n))
        return fail(d, "duplicated map key");
    return 0;
}

static int parse_bytes(decoder *d, proto_val *out, proto_kind kind, uint64_t n)
{
    if (need(d, n) < 0)
        return -1;
    if (out) {
        out->kind = kind;
        out->n = (uint32_t)n;
        out->as.s = (const char *)d->p;
    }
    d->p += n;
    return 0;
}

static int parse_scalar(proto_val *out, proto_kind kind, uint64_t bits)
{
    if (!out)
        return 0;
    out->kind = kind;
    out->n = 0;
    switch (kind) {
    case PROTO_BOOL:
        out->as.b = bits != 0;
        break;
    case PROTO_INT:
        out->as.i = (int64_t)bits;
        if (out->as.i >= 0) { /* a signed form holding a non-negative value */
            out->kind = PROTO_UINT;
            out->as.u = bits;
        }
        break;
    case PROTO_UINT:
        out->as.u = bits;
        break;
    default:
        break;
    }
    return 0;
}

static int64_t sign_extend(uint64_t v, int width)
{
    int shift = 64 - 8 * width;
    return (int64_t)(v << shift) >> shift;
}

static int parse(decoder *d, proto_val *out, int depth)
{
    if (need(d, 1) < 0)
        return -1;
    uint8_t t = *d->p++;
    uint64_t n = 0;
    if (t <= 0x7f)
        return parse_scalar(out, PROTO_UINT, t);
    if (t >= 0xe0)
        return parse_scalar(out, PROTO_INT, (uint64_t)(int64_t)(int8_t)t);
    if ((t & 0xf0) == 0x80)
        return parse_container(d, out, PROTO_MAP, t & 0x0f, depth);
    if ((t & 0xf0) == 0x90)
        return parse_container(d, out, PROTO_ARRAY, t & 0x0f, depth);
    if ((t & 0xe0) == 0xa0)
        return parse_bytes(d, out, PROTO_STR, t & 0x1f);
    switch (t) {
    case 0xc0:
        if (out) {
            out->kind = PROTO_NIL;
            out->n = 0;
        }
        return 0;
    case 0xc2:
    case 0xc3:
        return parse_scalar(out, PROTO_BOOL, t == 0xc3);
    case 0xc4:
    case 0xc5:
    case 0xc6:
        if (read_len(d, 1 << (t - 0xc4), &n) < 0)
            return -1;
        return parse_bytes(d, out, PROTO_BIN, n);
    case 0xd9:
    case 0xda:
    case 0xdb:
        if (read_len(d, 1 << (t - 0xd9), &n) < 0)
            return -1;
        return parse_bytes(d, out, PROTO_STR, n);
    case 0xca:
    case 0xcb: {
        int width = t == 0xca ? 4 : 8;
        if (read_len(d, width, &n) < 0)
            return -1;
        if (out) {
            out->kind = PROTO_FLOAT;
            out->n = 0;
            if (width == 4) {
                uint32_t bits32 = (uint32_t)n;
                float f;
                memcpy(&f, &bits32, sizeof f);
                out->as.f = f;
            } else {
                memcpy(&out->as.f, &n, sizeof n);
            }
        }
        return 0;
    }
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf:
        if (read_len(d, 1 << (t - 0xcc), &n) < 0)
            return -1;
        return parse_scalar(out, PROTO_UINT, n);
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        int width = 1 << (t - 0xd0);
        if (read_len(d, width, &n) < 0)
            return -1;
        return parse_scalar(out, PROTO_INT, (uint64_t)sign_extend(n, width));
    }
    case 0xdc:
    case 0xdd:
        if (read_len(d, t == 0xdc ? 2 : 4, &n) < 0)
            return -1;
        return parse_container(d, out, PROTO_ARRAY, n, depth);
    case 0xde:
    case 0xdf:
        if (read_len(d, t == 0xde ? 2 : 4, &n) < 0)
            return -1;
        return parse_container(d, out, PROTO_MAP, n, depth);
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8: /* fixext 1..16: type byte + payload */
        return parse_bytes(d, out, PROTO_EXT, 1 + (1u << (t - 0xd4)));
    case 0xc7:
    case 0xc8:
    case 0xc9:
        if (read_len(d, 1 << (t - 0xc7), &n) < 0)
            return -1;
        return parse_bytes(d, out, PROTO_EXT, n + 1);
    default: /* 0xc1 is never used */
        return fail(d, "invalid type byte");
    }
}

int proto_decode(proto_doc *doc, const void *buf, size_t len, proto_error *err)
{
    doc->nodes = NULL;
    doc->count = 0;
    if (len > UINT32_MAX) {
        proto_error_set(err, "too_large", "message of %zu bytes is too large", len);
        return -1;
    }
    decoder d = {.p = buf, .end = (const uint8_t *)buf + len, .err = err, .used = 1};
    if (len == 0)
        return fail(&d, "empty message");
    if (parse(&d, NULL, 0) < 0)
        return -1;
    if (d.p != d.end)
        return fail(&d, "trailing bytes after the message");
    d.count = d.used;
    d.nodes = mem_calloc(d.count, sizeof *d.nodes);
    d.p = buf;
    d.used = 1;
    if (parse(&d, &d.nodes[0], 0) < 0) {
        free(d.nodes);
        return -1;
    }
    doc->nodes = d.nodes;
    doc->count = d.count;
    return 0;
}

void proto_doc_free(proto_doc *doc)
{
    free(doc->nodes);
    doc->nodes = NULL;
    doc->count = 0;
}

const proto_val *proto_map_get(const proto_val *map, const char *key)
{
    if (!map || map->kind != PROTO_MAP)
        return NULL;
    size_t klen = strlen(key);
    for (uint32_t i = 0; i < map->n; i++) {
        const proto_val *k = &map->as.items[2 * i];
        if (k->kind == PROTO_STR && k->n == klen && memcmp(k->as.s, key, klen) == 0)
            return &map->as.items[2 * i + 1];
    }
    return NULL;
}

bool proto_str_eq(const proto_val *v, const char *s)
{
    size_t n = strlen(s);
    return v && v->kind == PROTO_STR && v->n == n && memcmp(v->as.s, s, n) == 0;
}

char *proto_strdup(const proto_val *v)
{
    if (v->kind != PROTO_STR && v->kind != PROTO_BIN)
        fatal("proto_strdup on a value of kind %d", (int)v->kind);
    return mem_strndup(v->as.s, v->n);
}
