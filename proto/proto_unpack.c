/* proto_unpack: decoding with msgpack-c. A message is first walked
 * (proto_walk.c: depth, counts, str keys, exact length, nothing allocated),
 * then unpacked by msgpack_unpack into a zone reused from call to call, and
 * its objects copied into the proto_val tree the rest of ctxd reads (one
 * allocation sized by the walk), where repeated map keys are refused. Strings
 * stay in the caller's input: msgpack-c references them, it does not copy. */
#include "proto.h"

#include "mem.h"
#include "proto_walk.h"

#include <msgpack.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The zone msgpack-c unpacks into, kept between messages. msgpack-c puts
 * 24 bytes per value (array items, map keys and values) in it, and
 * msgpack_zone_clear frees every chunk but the first; so the first chunk is
 * sized to hold a whole message (up to ZONE_KEEP, what a thread keeps), and
 * a message costs no allocation in msgpack-c (allocating and trimming chunks
 * per message once cost more than the unpacking). One zone per thread (the
 * worker's threads and a libctxd program's may decode concurrently), freed
 * when its thread ends. */
#define ZONE_KEEP (4u << 20)
static pthread_key_t zone_key;
static pthread_once_t zone_once = PTHREAD_ONCE_INIT;

/* pthread key destructor: a thread's zone goes with the thread. */
static void zone_free(void *z)
{
    msgpack_zone_free(z);
}

static void zone_key_create(void)
{
    if (pthread_key_create(&zone_key, zone_free) != 0)
        fatal("proto_unpack: no pthread key for the msgpack zone");
}

/* This thread's zone, with a first chunk of at least need bytes (capped). */
static msgpack_zone *zone_for(size_t need)
{
    pthread_once(&zone_once, zone_key_create);
    msgpack_zone *z = pthread_getspecific(zone_key);
    size_t want = need < ZONE_KEEP ? need : ZONE_KEEP;
    if (z && z->chunk_size >= want)
        return z;
    size_t size = MSGPACK_ZONE_CHUNK_SIZE;
    while (size < want)
        size *= 2;
    if (z)
        msgpack_zone_free(z);
    z = msgpack_zone_new(size);
    if (!z || pthread_setspecific(zone_key, z) != 0)
        fatal("out of memory creating a msgpack zone of %zu bytes", size);
    return z;
}

/* Copy state: the node array (sized by the walk) and how much of it is
 * taken. Children of a container are contiguous, as proto_val expects. */
typedef struct copier {
    proto_val *nodes;
    size_t used, count;
    proto_error *err;
} copier;

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
 * O(n^2) (a 40,000-key env once stalled the daemon for seconds). msgpack-c
 * itself keeps every pair of a repeated key. */
#define SMALL_MAP 16
static bool map_has_duplicate(const proto_val *kids, uint32_t n)
{
    if (n <= SMALL_MAP) {
        for (uint32_t i = 1; i < n; i++)
            for (uint32_t j = 0; j < i; j++)
                if (key_order(&kids[2 * i], &kids[2 * j]) == 0)
                    return true;
        return false;
    }
    const proto_val **keys = mem_alloc(n * sizeof *keys);
    for (uint32_t i = 0; i < n; i++)
        keys[i] = &kids[2 * i];
    qsort(keys, n, sizeof *keys, key_cmp);
    bool dup = false;
    for (uint32_t i = 1; i < n && !dup; i++)
        dup = key_order(keys[i - 1], keys[i]) == 0;
    free(keys);
    return dup;
}

/* Refuses a message msgpack-c read differently from the walk (never
 * expected: a bad_frame rather than a crash if it happens). */
static int disagree(copier *c)
{
    proto_error_set(c->err, "bad_frame", "malformed msgpack: msgpack-c read it differently");
    return -1;
}

/* The next n contiguous nodes; NULL when the walk counted fewer. */
static proto_val *take(copier *c, size_t n)
{
    if (n > c->count - c->used)
        return NULL;
    proto_val *first = c->nodes + c->used;
    c->used += n;
    return first;
}

/* msgpack-c gives an empty str or bin a NULL pointer; ctxd's readers pass
 * strings to memcmp and memcpy, which must not see NULL even for 0 bytes. */
static const char *bytes(const char *p)
{
    return p ? p : "";
}

/* One msgpack-c object into *out (containers recursively: the walk bounded
 * the depth). */
static int copy(copier *c, const msgpack_object *o, proto_val *out)
{
    out->n = 0;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        out->kind = PROTO_NIL;
        return 0;
    case MSGPACK_OBJECT_BOOLEAN:
        out->kind = PROTO_BOOL;
        out->as.b = o->via.boolean;
        return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        out->kind = PROTO_UINT;
        out->as.u = o->via.u64;
        return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        out->kind = PROTO_INT;
        out->as.i = o->via.i64;
        return 0;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        out->kind = PROTO_FLOAT;
        out->as.f = o->via.f64;
        return 0;
    case MSGPACK_OBJECT_STR:
        out->kind = PROTO_STR;
        out->n = o->via.str.size;
        out->as.s = bytes(o->via.str.ptr);
        return 0;
    case MSGPACK_OBJECT_BIN:
        out->kind = PROTO_BIN;
        out->n = o->via.bin.size;
        out->as.s = bytes(o->via.bin.ptr);
        return 0;
    case MSGPACK_OBJECT_EXT: /* as before: the payload with its type byte */
        out->kind = PROTO_EXT;
        out->n = o->via.ext.size + 1;
        out->as.s = o->via.ext.ptr - 1;
        return 0;
    case MSGPACK_OBJECT_ARRAY: {
        uint32_t n = o->via.array.size;
        proto_val *kids = take(c, n);
        if (!kids)
            return disagree(c);
        out->kind = PROTO_ARRAY;
        out->n = n;
        out->as.items = kids;
        for (uint32_t i = 0; i < n; i++)
            if (copy(c, &o->via.array.ptr[i], &kids[i]) < 0)
                return -1;
        return 0;
    }
    case MSGPACK_OBJECT_MAP: {
        uint32_t n = o->via.map.size;
        proto_val *kids = take(c, 2 * (size_t)n);
        if (!kids)
            return disagree(c);
        out->kind = PROTO_MAP;
        out->n = n;
        out->as.items = kids;
        for (uint32_t i = 0; i < n; i++)
            if (copy(c, &o->via.map.ptr[i].key, &kids[2 * i]) < 0 ||
                copy(c, &o->via.map.ptr[i].val, &kids[2 * i + 1]) < 0)
                return -1;
        if (map_has_duplicate(kids, n)) {
            proto_error_set(c->err, "bad_frame", "malformed msgpack: duplicated map key");
            return -1;
        }
        return 0;
    }
    }
    return disagree(c);
}

int proto_decode(proto_doc *doc, const void *buf, size_t len, proto_error *err)
{
    doc->nodes = NULL;
    doc->count = 0;
    if (len > UINT32_MAX) {
        proto_error_set(err, "too_large", "message of %zu bytes is too large", len);
        return -1;
    }
    long long values = proto_walk(buf, len, err);
    if (values < 0)
        return -1;
    msgpack_zone *z = zone_for((size_t)values * sizeof(msgpack_object));
    msgpack_object root;
    size_t off = 0;
    msgpack_unpack_return ret = msgpack_unpack(buf, len, &off, z, &root);
    if (ret == MSGPACK_UNPACK_NOMEM_ERROR)
        fatal("out of memory unpacking a message of %zu bytes", len);
    if (ret != MSGPACK_UNPACK_SUCCESS || off != len) {
        msgpack_zone_clear(z);
        proto_error_set(err, "bad_frame", "malformed msgpack: refused by msgpack-c (%d)", (int)ret);
        return -1;
    }
    copier c = {.count = (size_t)values, .used = 1, .err = err};
    c.nodes = mem_alloc(c.count * sizeof *c.nodes);
    int rc = copy(&c, &root, &c.nodes[0]);
    msgpack_zone_clear(z);
    if (rc < 0) {
        free(c.nodes);
        return -1;
    }
    doc->nodes = c.nodes;
    doc->count = c.count;
    return 0;
}

void proto_doc_free(proto_doc *doc)
{
    free(doc->nodes);
    doc->nodes = NULL;
    doc->count = 0;
}
