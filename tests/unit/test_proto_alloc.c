/* What decoding costs in memory: a message that claims more items than it
 * holds is refused before anything is allocated. msgpack-c alone allocates
 * n x 24 bytes on a container header, so 5 bytes claiming 16M items would
 * ask for 512 MiB (a zone chunk, rounded up); proto_decode's pre-walk must
 * stop that. The test counts every byte requested from malloc in this
 * process (msgpack-c's zone and proto/mem.c included) by defining malloc
 * over glibc's __libc_malloc. */
#include "proto.h"

#include <malloc.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

/* Bytes live now, and the most live at any request (a request counts at its
 * size even when it fails, so a refused 512 MiB request is still seen). */
static long long live, peak;

/* Records a request of n bytes on top of what is live. */
static void note_request(size_t n)
{
    if (live + (long long)n > peak)
        peak = live + (long long)n;
}

void *malloc(size_t n)
{
    note_request(n);
    void *p = __libc_malloc(n);
    if (p)
        live += (long long)malloc_usable_size(p);
    return p;
}

void *calloc(size_t count, size_t size)
{
    note_request(count * size);
    void *p = __libc_calloc(count, size);
    if (p)
        live += (long long)malloc_usable_size(p);
    return p;
}

void *realloc(void *old, size_t n)
{
    long long before = old ? (long long)malloc_usable_size(old) : 0;
    note_request(n);
    void *p = __libc_realloc(old, n);
    if (p)
        live += (long long)malloc_usable_size(p) - before;
    return p;
}

void free(void *p)
{
    if (p)
        live -= (long long)malloc_usable_size(p);
    __libc_free(p);
}

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

/* Peak bytes requested beyond what was live before proto_decode(buf). */
static long long decode_cost(const void *buf, size_t len, int *rc, proto_error *err)
{
    proto_doc doc;
    long long base = live;
    peak = live;
    *rc = proto_decode(&doc, buf, len, err);
    long long cost = peak - base;
    if (*rc == 0)
        proto_doc_free(&doc);
    return cost;
}

/* The frames that claim 16M (or 4G) items in 5 or 6 bytes. */
static const struct {
    const char *name;
    unsigned char bytes[8];
    size_t len;
} huge[] = {
    {"array32 of 16M", {0xdd, 0x00, 0xff, 0xff, 0xff}, 5},
    {"map32 of 16M", {0xdf, 0x00, 0xff, 0xff, 0xff}, 5},
    {"array32 of 4G", {0xdd, 0xff, 0xff, 0xff, 0xff}, 5},
    {"map32 of 4G", {0xdf, 0xff, 0xff, 0xff, 0xff}, 5},
    {"array16 of 64K", {0xdc, 0xff, 0xff}, 3},
    {"[array32 of 16M]", {0x91, 0xdd, 0x00, 0xff, 0xff, 0xff}, 6},
    {"{k: array32 of 16M}", {0x81, 0xa1, 'k', 0xdd, 0x00, 0xff, 0xff, 0xff}, 8},
};

int main(void)
{
    proto_error err;
    int rc;

    /* The counter sees proto_decode's allocations (a valid message costs its
     * node array and msgpack-c's zone), so a zero below means something. */
    proto_buf b;
    proto_buf_init(&b);
    proto_put_map(&b, 3);
    proto_put_str(&b, "v");
    proto_put_uint(&b, 1);
    proto_put_str(&b, "t");
    proto_put_str(&b, "execute");
    proto_put_str(&b, "list");
    proto_put_array(&b, 100);
    for (int i = 0; i < 100; i++)
        proto_put_uint(&b, (uint64_t)i);
    long long cost = decode_cost(b.data, b.len, &rc, &err);
    CHECK(rc == 0, "valid message refused: %s", rc ? err.msg : "");
    CHECK(cost >= (long long)(104 * sizeof(proto_val)), "counter saw only %lld bytes", cost);
    proto_buf_free(&b);

    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        cost = decode_cost(huge[i].bytes, huge[i].len, &rc, &err);
        CHECK(rc < 0 && strcmp(err.code, "bad_frame") == 0, "%s not refused as bad_frame",
              huge[i].name);
        CHECK(cost <= (long long)huge[i].len, "%s: decoding allocated %lld bytes", huge[i].name,
              cost);
    }

    /* The same 5 bytes through plain msgpack_unpack ask for 512 MiB: what the
     * pre-walk is there for, and proof that the counter would see it. */
    msgpack_zone *z = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
    msgpack_object obj;
    size_t off = 0;
    long long base = live;
    peak = live;
    msgpack_unpack((const char *)huge[0].bytes, huge[0].len, &off, z, &obj);
    cost = peak - base;
    msgpack_zone_free(z);
    CHECK(cost >= 16777215LL * (long long)sizeof(msgpack_object),
          "plain msgpack_unpack asked for only %lld bytes", cost);
    printf("plain msgpack_unpack of 5 bytes claiming 16M items asked for %lld bytes\n", cost);

    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("test_proto_alloc: all passed\n");
    return 0;
}
