/* codec_cases: the messages the codec benchmark encodes and decodes, written
 * once against proto.h and built for each codec (CODEC_OPS names the
 * codec_ops this build defines; see codec_bench.h). */
#include "codec_bench.h"
#include "proto.h"

#include <stdio.h>
#include <string.h>

#define STREAM_BYTES (1u << 20)
#define LIST_CONTEXTS 1000

static proto_buf buf;

static void kv_str(proto_buf *b, const char *k, const char *v)
{
    proto_put_str(b, k);
    proto_put_str(b, v);
}

static void kv_uint(proto_buf *b, const char *k, uint64_t v)
{
    proto_put_str(b, k);
    proto_put_uint(b, v);
}

/* A typical execute request: a few lines of code, a timeout, a small env. */
static void build_execute(proto_buf *b)
{
    proto_put_map(b, 9);
    kv_uint(b, "v", 1);
    kv_str(b, "t", "execute");
    kv_str(b, "id", "req-000042");
    kv_str(b, "ctx", "default");
    kv_str(b, "code",
           "import math\n"
           "values = [math.sqrt(i) for i in range(1000)]\n"
           "total = sum(values)\n"
           "print(f'total={total:.3f}')\n"
           "total\n");
    proto_put_str(b, "timeout");
    proto_put_double(b, 30.0);
    proto_put_str(b, "env");
    proto_put_map(b, 2);
    kv_str(b, "LANG", "C.UTF-8");
    kv_str(b, "PYTHONHASHSEED", "0");
    proto_put_str(b, "silent");
    proto_put_bool(b, false);
    proto_put_str(b, "stop_on_error");
    proto_put_bool(b, true);
}

/* A stream event carrying 1 MiB of output. */
static void build_stream(proto_buf *b)
{
    static uint8_t data[STREAM_BYTES];
    if (!data[1])
        for (size_t i = 0; i < sizeof data; i++)
            data[i] = (uint8_t)("0123456789abcdef\n"[i % 17]);
    proto_put_map(b, 5);
    kv_uint(b, "v", 1);
    kv_str(b, "t", "stream");
    kv_str(b, "re", "req-000042");
    kv_str(b, "name", "stdout");
    proto_put_str(b, "data");
    proto_put_bin(b, data, sizeof data);
}

/* The ok reply of ctx.list with 1,000 contexts (the fields sup_query sends). */
static void build_ctx_list(proto_buf *b)
{
    proto_put_map(b, 4);
    kv_uint(b, "v", 1);
    kv_str(b, "t", "ok");
    kv_uint(b, "re", 17);
    proto_put_str(b, "contexts");
    proto_put_array(b, LIST_CONTEXTS);
    for (unsigned i = 0; i < LIST_CONTEXTS; i++) {
        char name[32];
        snprintf(name, sizeof name, "experiment-%04u", i);
        proto_put_map(b, 8);
        kv_str(b, "name", name);
        kv_str(b, "cwd", "/home/user/project");
        kv_str(b, "state", i % 3 ? "idle" : "busy");
        kv_uint(b, "pid", 10000 + i);
        kv_uint(b, "incarnation", 1 + i % 4);
        proto_put_str(b, "created");
        proto_put_double(b, 1764489600.5 + i);
        kv_uint(b, "execution_count", i * 7);
        kv_uint(b, "queued", i % 2);
    }
}

static void (*const builders[CASE_COUNT])(proto_buf *) = {
    [CASE_EXECUTE] = build_execute,
    [CASE_STREAM] = build_stream,
    [CASE_CTX_LIST] = build_ctx_list,
};

/* Encodes into one buffer kept across calls (as the daemon's senders do). */
static size_t encode(int c, const uint8_t **out)
{
    buf.len = 0;
    builders[c](&buf);
    *out = buf.data;
    return buf.len;
}

static long decode(const uint8_t *data, size_t len)
{
    proto_doc doc;
    proto_error err;
    if (proto_decode(&doc, data, len, &err) < 0)
        return -1;
    long n = (long)doc.count;
    proto_doc_free(&doc);
    return n;
}

const codec_ops CODEC_OPS = {CODEC_NAME, encode, decode};
