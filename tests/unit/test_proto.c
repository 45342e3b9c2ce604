/* Unit tests of the proto codec: golden vectors byte for byte, every
 * malformed-input vector refused with its code, and frame handling. */
#include "proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static const char *vecdir;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

static unsigned char *slurp(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", vecdir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("FAIL cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)n + 1);
    if (fread(d, 1, (size_t)n, f) != (size_t)n)
        exit(1);
    fclose(f);
    *len = (size_t)n;
    return d;
}

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

static void head(proto_buf *b, uint32_t n, const char *t)
{
    proto_put_map(b, n);
    kv_uint(b, "v", 1);
    kv_str(b, "t", t);
}

/* Each builder writes one vector the way the daemon or a client would. */
static void build_hello(proto_buf *b)
{
    head(b, 3, "hello");
    kv_uint(b, "id", 1);
}

static void build_execute(proto_buf *b)
{
    head(b, 9, "execute");
    kv_str(b, "id", "req-42");
    kv_str(b, "ctx", "default");
    kv_str(b, "code", "x = 1\nprint(x)");
    proto_put_str(b, "timeout");
    proto_put_double(b, 2.5);
    proto_put_str(b, "env");
    proto_put_map(b, 1);
    kv_str(b, "A", "1");
    proto_put_str(b, "silent");
    proto_put_bool(b, false);
    proto_put_str(b, "stop_on_error");
    proto_put_bool(b, true);
}

static void build_accepted(proto_buf *b)
{
    head(b, 6, "accepted");
    kv_str(b, "re", "req-42");
    kv_str(b, "ctx", "default");
    kv_uint(b, "execution_count", 3);
    kv_uint(b, "incarnation", 1);
}

static void build_stream(proto_buf *b)
{
    head(b, 5, "stream");
    kv_str(b, "re", "req-42");
    kv_str(b, "name", "stdout");
    proto_put_str(b, "data");
    proto_put_bin(b, "hello\n\x00\xff", 8);
}

static void build_result(proto_buf *b)
{
    head(b, 5, "result");
    kv_uint(b, "re", 7);
    kv_uint(b, "execution_count", 300);
    proto_put_str(b, "data");
    proto_put_map(b, 1);
    char text[128] = "";
    for (int i = 0; i < 20; i++)
        strcat(text, "'\xc3\xa9'");
    kv_str(b, "text/plain", text);
}

static void build_error(proto_buf *b)
{
    head(b, 6, "error");
    kv_uint(b, "re", 7);
    kv_str(b, "ename", "ZeroDivisionError");
    kv_str(b, "evalue", "division by zero");
    proto_put_str(b, "traceback");
    proto_put_array(b, 3);
    proto_put_str(b, "Traceback (most recent call last):");
    proto_put_str(b, "  File \"<cell-1>\", line 1, in <module>");
    proto_put_str(b, "ZeroDivisionError: division by zero");
}

static void build_done(proto_buf *b)
{
    head(b, 11, "done");
    kv_uint(b, "re", 70000);
    kv_str(b, "status", "timeout");
    kv_uint(b, "execution_count", 65536);
    kv_uint(b, "incarnation", 2);
    proto_put_str(b, "duration");
    proto_put_double(b, 1.25);
    proto_put_str(b, "cpu_time");
    proto_put_double(b, 0.0);
    proto_put_str(b, "truncated");
    proto_put_bool(b, false);
    proto_put_str(b, "state_lost");
    proto_put_bool(b, true);
    kv_str(b, "cause", "killed after timeout: did not stop within the 2 s grace period");
}

static void build_err(proto_buf *b)
{
    head(b, 5, "err");
    proto_put_str(b, "re");
    proto_put_nil(b);
    kv_str(b, "code", "bad_frame");
    kv_str(b, "message", "malformed msgpack: truncated");
}

static void build_ctx_list_ok(proto_buf *b)
{
    head(b, 4, "ok");
    kv_uint(b, "re", 1ull << 40);
    proto_put_str(b, "contexts");
    proto_put_array(b, 1);
    proto_put_map(b, 8);
    kv_str(b, "name", "exp-1");
    kv_str(b, "cwd", "/tmp");
    kv_str(b, "state", "idle");
    kv_uint(b, "pid", 1234);
    kv_uint(b, "incarnation", 1);
    proto_put_str(b, "created");
    proto_put_double(b, 1764489600.5);
    kv_uint(b, "execution_count", 0);
    kv_uint(b, "queued", 0);
}

static void build_ints(proto_buf *b)
{
    static const uint64_t pos[] = {0,     127,   128,           255,           256,
                                   65535, 65536, 4294967295ull, 4294967296ull, UINT64_MAX};
    static const int64_t neg[] = {-1,     -32,    -33,         -128,        -129,
                                  -32768, -32769, -2147483648, -2147483649, INT64_MIN};
    head(b, 4, "x");
    kv_uint(b, "id", 5);
    proto_put_str(b, "a");
    proto_put_array(b, 20);
    for (size_t i = 0; i < 10; i++)
        proto_put_uint(b, pos[i]);
    for (size_t i = 0; i < 10; i++)
        proto_put_int(b, neg[i]);
}

static void build_long_str(proto_buf *b)
{
    static char big[65537];
    head(b, 11, "x");
    kv_uint(b, "id", 6);
    memset(big, 'a', 31);
    big[31] = 0;
    kv_str(b, "s31", big);
    memset(big, 'b', 32);
    big[32] = 0;
    kv_str(b, "s32", big);
    memset(big, 'c', 256);
    big[256] = 0;
    kv_str(b, "s256", big);
    memset(big, 'd', 65536);
    big[65536] = 0;
    kv_str(b, "s65536", big);
    memset(big, 1, 300);
    proto_put_str(b, "b300");
    proto_put_bin(b, big, 300);
    proto_put_str(b, "arr16");
    proto_put_array(b, 16);
    for (int i = 0; i < 16; i++)
        proto_put_uint(b, (uint64_t)i);
    proto_put_str(b, "nil");
    proto_put_nil(b);
    proto_put_str(b, "bool");
    proto_put_bool(b, true);
}

/* complete: a query request, and the reply the daemon relays from the
 * worker's answer. */
static void build_complete(proto_buf *b)
{
    head(b, 6, "complete");
    kv_uint(b, "id", 9);
    kv_str(b, "ctx", "default");
    kv_str(b, "code", "import os\nos.pa");
    kv_uint(b, "cursor", 15);
}

static void build_complete_ok(proto_buf *b)
{
    head(b, 7, "ok");
    kv_uint(b, "re", 9);
    proto_put_str(b, "matches");
    proto_put_array(b, 2);
    proto_put_str(b, "os.pardir");
    proto_put_str(b, "os.path");
    kv_uint(b, "cursor_start", 10);
    kv_uint(b, "cursor_end", 15);
    proto_put_str(b, "metadata");
    proto_put_map(b, 0);
}

static const struct {
    const char *name;
    void (*build)(proto_buf *);
} good[] = {
    {"hello", build_hello},
    {"execute", build_execute},
    {"accepted", build_accepted},
    {"stream", build_stream},
    {"result", build_result},
    {"error", build_error},
    {"done", build_done},
    {"err", build_err},
    {"ctx_list_ok", build_ctx_list_ok},
    {"ints", build_ints},
    {"long_str", build_long_str},
    {"complete", build_complete},
    {"complete_ok", build_complete_ok},
};

/* Encodes each vector and compares; decodes it and re-encodes (round trip). */
static void test_good_vectors(void)
{
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char file[128];
        snprintf(file, sizeof file, "%s.msgpack", good[i].name);
        size_t len;
        unsigned char *want = slurp(file, &len);
        proto_buf b;
        proto_buf_init(&b);
        good[i].build(&b);
        CHECK(b.len == len && memcmp(b.data, want, len) == 0, "vector %s differs (%zu vs %zu)",
              good[i].name, b.len, len);
        proto_doc doc;
        proto_error err;
        CHECK(proto_decode(&doc, want, len, &err) == 0, "vector %s does not decode: %s",
              good[i].name, err.msg);
        proto_buf again;
        proto_buf_init(&again);
        proto_put_val(&again, &doc.nodes[0]);
        CHECK(again.len == len && memcmp(again.data, want, len) == 0,
              "vector %s does not round-trip", good[i].name);
        proto_doc_free(&doc);
        proto_buf_free(&again);
        proto_buf_free(&b);
        free(want);
    }
}

/* The daemon's execute table, as proto/PROTOCOL.md specifies it. */
static const proto_field execute_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},    {"code", PF_STR, true, 0},
    {"timeout", PF_NUM | PF_NIL, false, 0}, {"env", PF_STRMAP | PF_NIL, false, 1024},
    {"silent", PF_BOOL | PF_NIL, false, 0}, {"stop_on_error", PF_BOOL | PF_NIL, false, 0},
};
/* ... and its complete table. */
static const proto_field complete_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},
    {"code", PF_STR, true, 0},
    {"cursor", PF_UINT | PF_NIL, false, 0},
    {"timeout", PF_NUM | PF_NIL, false, 0},
};

/* The code a bad message gets through decode → envelope → field check. */
static const char *refusal(const unsigned char *data, size_t len)
{
    static proto_error err;
    proto_doc doc;
    if (proto_decode(&doc, data, len, &err) < 0)
        return err.code;
    proto_envelope env;
    const char *code = NULL;
    if (proto_envelope_read(&doc.nodes[0], &env, &err) < 0)
        code = err.code;
    else if (proto_str_eq(env.type, "execute") &&
             proto_check(&doc.nodes[0], execute_fields, 6, &err) < 0)
        code = err.code;
    else if (proto_str_eq(env.type, "complete") &&
             proto_check(&doc.nodes[0], complete_fields, 4, &err) < 0)
        code = err.code;
    proto_doc_free(&doc);
    return code;
}

static void test_bad_vectors(void)
{
    size_t jlen;
    char *json = (char *)slurp("vectors.json", &jlen);
    json[jlen] = '\0';
    char *bad = strstr(json, "\"bad\"");
    CHECK(bad != NULL, "vectors.json has no bad section");
    int seen = 0;
    /* Entries look like  "name": "code"  one per line. */
    for (char *line = bad ? strchr(bad, '\n') : NULL; line && *line;
         line = strchr(line + 1, '\n')) {
        char name[128], code[64];
        if (sscanf(line, " \"%127[^\"]\": \"%63[^\"]\"", name, code) != 2)
            continue;
        char file[200];
        snprintf(file, sizeof file, "bad/%s.msgpack", name);
        size_t len;
        unsigned char *data = slurp(file, &len);
        const char *got = refusal(data, len);
        CHECK(got && strcmp(got, code) == 0, "bad vector %s: want %s, got %s", name, code,
              got ? got : "(accepted)");
        free(data);
        seen++;
    }
    CHECK(seen >= 20, "only %d bad vectors read", seen);
    free(json);
}

static void test_frames(void)
{
    proto_buf b;
    proto_buf_init(&b);
    size_t s = proto_frame_begin(&b);
    proto_put_map(&b, 1);
    kv_str(&b, "t", "ready");
    proto_frame_end(&b, s);
    const uint8_t *body;
    size_t blen, used;
    CHECK(proto_frame_next(b.data, 3, 100, &body, &blen, &used) == 0, "short prefix");
    CHECK(proto_frame_next(b.data, b.len - 1, 100, &body, &blen, &used) == 0, "short body");
    CHECK(proto_frame_next(b.data, b.len, 100, &body, &blen, &used) == 1 && used == b.len &&
              blen == b.len - 4,
          "whole frame");
    CHECK(proto_frame_next(b.data, b.len, 2, &body, &blen, &used) == -1, "over max");
    const uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    CHECK(proto_frame_next(huge, 4, PROTO_MAX_FRAME, &body, &blen, &used) == -1, "4 GB prefix");
    proto_buf_free(&b);
}

static void test_utf8_and_names(void)
{
    CHECK(proto_utf8_valid("h\xc3\xa9", 3, false), "valid 2-byte");
    CHECK(!proto_utf8_valid("\xc0\xaf", 2, false), "overlong");
    CHECK(!proto_utf8_valid("\xed\xa0\x80", 3, false), "surrogate");
    CHECK(!proto_utf8_valid("\xf4\x90\x80\x80", 4, false), "above U+10FFFF");
    CHECK(!proto_utf8_valid("a\0b", 3, false), "NUL refused");
    CHECK(proto_utf8_valid("a\0b", 3, true), "NUL allowed");
    CHECK(!proto_utf8_valid("\xe2\x82", 2, false), "truncated sequence");
    CHECK(proto_name_valid("exp-1.fork_2", 12), "plain name");
    CHECK(!proto_name_valid("", 0), "empty name");
    CHECK(!proto_name_valid(".hidden", 7), "leading dot");
    CHECK(!proto_name_valid("-x", 2), "leading dash");
    CHECK(!proto_name_valid("a b", 3), "space");
}

/* Every prefix of a valid message is refused, never read past its end. */
static void test_truncations(void)
{
    size_t len;
    unsigned char *data = slurp("done.msgpack", &len);
    for (size_t n = 0; n < len; n++) {
        unsigned char *copy = malloc(n ? n : 1);
        memcpy(copy, data, n);
        proto_doc doc;
        proto_error err;
        CHECK(proto_decode(&doc, copy, n, &err) < 0, "prefix %zu accepted", n);
        free(copy);
    }
    free(data);
}

/* A map of 2^20 keys (10 MiB, as an execute's env could be) decodes, and
 * one repeated key among them is found wherever it is. Decoding costs
 * O(n log n): with the old pairwise check this takes hours, so ctest's
 * timeout ends it. */
#define LARGE_KEYS (1u << 20)
static void test_large_map(void)
{
    for (int round = 0; round < 3; round++) {
        proto_buf b;
        proto_buf_init(&b);
        proto_put_map(&b, LARGE_KEYS);
        for (uint32_t i = 0; i < LARGE_KEYS; i++) {
            char key[16];
            /* round 1: the last key repeats the first; round 2: a middle one */
            uint32_t k = round == 1 && i == LARGE_KEYS - 1   ? 0
                         : round == 2 && i == LARGE_KEYS / 2 ? LARGE_KEYS / 3
                                                             : i;
            snprintf(key, sizeof key, "k%07u", (unsigned)k);
            proto_put_str(&b, key);
            proto_put_nil(&b);
        }
        proto_doc doc;
        proto_error err;
        int rc = proto_decode(&doc, b.data, b.len, &err);
        if (round == 0) {
            CHECK(rc == 0, "large map refused: %s", err.msg);
            if (rc == 0) {
                CHECK(doc.nodes[0].n == LARGE_KEYS, "large map has %u keys", doc.nodes[0].n);
                CHECK(proto_map_get(&doc.nodes[0], "k0999999") != NULL, "key not found");
                proto_doc_free(&doc);
            }
        } else {
            CHECK(rc < 0 && strcmp(err.code, "bad_frame") == 0 && strstr(err.msg, "duplicated"),
                  "repeated key in a large map accepted (round %d)", round);
        }
        proto_buf_free(&b);
    }
}

/* proto_peek_type / proto_peek_id: a field read from a message's first
 * bytes, found where it is among the first scalar pairs, refused where the
 * walk cannot tell (a container first, not a map, cut short). */
static void test_peek(void)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_put_map(&b, 3);
    kv_str(&b, "t", "input_reply");
    proto_put_str(&b, "id");
    proto_put_uint(&b, 7);
    kv_str(&b, "value", "x");
    proto_val v;
    CHECK(proto_peek_type(b.data, b.len, &v) && v.n == 11 && memcmp(v.as.s, "input_reply", 11) == 0,
          "peek t first");
    CHECK(proto_peek_id(b.data, b.len, &v) && v.kind == PROTO_UINT && v.as.u == 7, "peek id");
    CHECK(!proto_peek_type(b.data, 4, &v), "peek cut short");
    proto_buf_free(&b);

    proto_put_map(&b, 2); /* a container before t: the walk stops there */
    proto_put_str(&b, "env");
    proto_put_map(&b, 0);
    kv_str(&b, "t", "run");
    CHECK(!proto_peek_type(b.data, b.len, &v), "peek past a container");
    proto_buf_free(&b);

    proto_put_map(&b, 2); /* t after a scalar, and t not a str */
    kv_str(&b, "a", "b");
    proto_put_str(&b, "t");
    proto_put_uint(&b, 1);
    CHECK(!proto_peek_type(b.data, b.len, &v), "peek t not a str");
    proto_buf_free(&b);

    proto_put_array(&b, 1);
    proto_put_str(&b, "t");
    CHECK(!proto_peek_type(b.data, b.len, &v), "peek not a map");
    proto_buf_free(&b);
}

/* A deferred map gives the bytes of a counted one at every header size
 * (fixmap, map16, map32), nested inside another deferred map. */
static void test_deferred_map(void)
{
    static const uint32_t sizes[] = {0, 1, 15, 16, 300, 65535, 65536};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint32_t n = sizes[i];
        proto_buf want, got;
        proto_buf_init(&want);
        proto_buf_init(&got);
        proto_put_map(&want, 2);
        proto_put_str(&want, "t");
        proto_put_map(&want, n);
        for (uint32_t k = 0; k < n; k++) {
            proto_put_uint(&want, k);
            proto_put_nil(&want);
        }
        proto_put_str(&want, "end");
        proto_put_bool(&want, true);

        proto_map outer = proto_map_open(&got);
        proto_key(&got, &outer, "t");
        proto_map inner = proto_map_open(&got);
        for (uint32_t k = 0; k < n; k++) {
            proto_put_uint(&got, k);
            proto_map_count(&inner, 1);
            proto_put_nil(&got);
        }
        proto_map_close(&got, &inner);
        proto_key(&got, &outer, "end");
        proto_put_bool(&got, true);
        proto_map_close(&got, &outer);
        CHECK(got.len == want.len && memcmp(got.data, want.data, want.len) == 0,
              "deferred map of %u pairs differs (%zu vs %zu bytes)", n, got.len, want.len);
        proto_buf_free(&want);
        proto_buf_free(&got);
    }
}

int main(int argc, char **argv)
{
    vecdir = argc > 1 ? argv[1] : "proto/vectors";
    test_good_vectors();
    test_bad_vectors();
    test_frames();
    test_utf8_and_names();
    test_truncations();
    test_large_map();
    test_peek();
    test_deferred_map();
    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("test_proto: all passed\n");
    return 0;
}
