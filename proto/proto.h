/* proto: the msgpack codec and framing shared by the ctxd daemon, its workers
 * and libctxd. See proto/PROTOCOL.md for the wire contract.
 *
 * msgpack-c does the packing and unpacking. Encoding appends msgpack to a
 * growable proto_buf (allocation failure aborts) through msgpack-c's packer.
 * Decoding first walks the message (proto_walk.c) so msgpack-c never
 * allocates more than the input can describe, and rejects nesting deeper
 * than PROTO_MAX_DEPTH, trailing bytes, truncation, non-string map keys and
 * duplicated keys. Decoded strings point into the caller's input buffer (not
 * NUL-terminated): keep the input alive while the proto_doc is used. */
#ifndef CTXD_PROTO_H
#define CTXD_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_VERSION 1
#define PROTO_MAX_DEPTH 16
/* Largest client message the daemon accepts by default (bytes of msgpack),
 * and the most it can be configured to. */
#define PROTO_MAX_REQUEST (16u * 1024 * 1024)
#define PROTO_MAX_REQUEST_CAP (256u * 1024 * 1024)
/* Largest frame on a worker channel (4-byte length prefix excluded). */
#define PROTO_MAX_FRAME (20u * 1024 * 1024)
/* Largest stream chunk a worker sends in one frame. */
#define PROTO_STREAM_CHUNK (64u * 1024)
#define PROTO_MAX_ID 64
#define PROTO_MAX_NAME 64

/* ---- growable byte buffer -------------------------------------------- */
typedef struct proto_buf {
    uint8_t *data;
    size_t len, cap;
} proto_buf;

void proto_buf_init(proto_buf *b);
void proto_buf_free(proto_buf *b);
void proto_buf_reserve(proto_buf *b, size_t extra);
void proto_buf_append(proto_buf *b, const void *p, size_t n);
/* Drops the first n bytes (used by stream readers). */
void proto_buf_consume(proto_buf *b, size_t n);

/* ---- encoder ---------------------------------------------------------- */
/* Integers use the smallest msgpack form (as Python's msgpack does); floats
 * are always float64; strings use str8/16/32 by length. */
void proto_put_map(proto_buf *b, uint32_t n);
void proto_put_array(proto_buf *b, uint32_t n);
void proto_put_str(proto_buf *b, const char *s);
void proto_put_strn(proto_buf *b, const char *s, size_t n);
void proto_put_bin(proto_buf *b, const void *p, size_t n);
void proto_put_int(proto_buf *b, int64_t v);
void proto_put_uint(proto_buf *b, uint64_t v);
void proto_put_double(proto_buf *b, double v);
void proto_put_bool(proto_buf *b, bool v);
void proto_put_nil(proto_buf *b);

/* A map whose length is known only once its pairs are written (redis's
 * deferred reply length): open it, write each pair with proto_key first,
 * close it. The bytes are those proto_put_map with the final count gives. */
typedef struct proto_map {
    size_t at;  /* offset of the header's reserved byte in the buffer */
    uint32_t n; /* pairs begun so far */
} proto_map;
proto_map proto_map_open(proto_buf *b);
/* Writes key s and counts one more pair in m: its value comes next. */
void proto_key(proto_buf *b, proto_map *m, const char *s);
/* Counts a pair whose key the caller wrote by other means (proto_put_val). */
void proto_map_count(proto_map *m, uint32_t pairs);
/* Writes m's header for its final count; m must be the last map opened on
 * b that is not closed. */
void proto_map_close(proto_buf *b, const proto_map *m);

/* ---- decoder ---------------------------------------------------------- */
typedef enum proto_kind {
    PROTO_NIL,
    PROTO_BOOL,
    PROTO_INT,  /* negative integer */
    PROTO_UINT, /* non-negative integer */
    PROTO_FLOAT,
    PROTO_STR,
    PROTO_BIN,
    PROTO_ARRAY,
    PROTO_MAP,
    PROTO_EXT
} proto_kind;

typedef struct proto_val {
    proto_kind kind;
    uint32_t n; /* str/bin/ext: byte length; array: items; map: pairs */
    union {
        bool b;
        int64_t i;
        uint64_t u;
        double f;
        const char *s;           /* str, bin, ext payload (into the input) */
        struct proto_val *items; /* array: n items; map: key0,val0,key1,... */
    } as;
} proto_val;

typedef struct proto_doc {
    proto_val *nodes; /* one allocation; root is nodes[0] */
    size_t count;
} proto_doc;

/* What went wrong, for an `err` reply: code is one of PROTOCOL.md's error
 * codes (a static string); msg a human sentence naming the problem. */
typedef struct proto_error {
    const char *code;
    char msg[256];
} proto_error;

void proto_error_set(proto_error *e, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Decodes exactly one msgpack object filling buf[0..len). Returns 0, or -1
 * with err set (code "bad_frame"). On success doc->nodes[0] is the root. */
int proto_decode(proto_doc *doc, const void *buf, size_t len, proto_error *err);
void proto_doc_free(proto_doc *doc);

/* Map lookup by key; NULL when absent or when map is not a map. */
const proto_val *proto_map_get(const proto_val *map, const char *key);
bool proto_str_eq(const proto_val *v, const char *s);
/* NUL-terminated heap copy of a str/bin value (mem_ wrapper). */
char *proto_strdup(const proto_val *v);
/* Re-encodes a decoded value (used to echo a request id as `re`). */
void proto_put_val(proto_buf *b, const proto_val *v);
/* True if s[0..n) is valid UTF-8 (and has no NUL byte unless allow_nul). */
bool proto_utf8_valid(const char *s, size_t n, bool allow_nul);

/* ---- schema checks (table driven) ------------------------------------- */
enum {
    PF_STR = 1 << 0,
    PF_BIN = 1 << 1,
    PF_UINT = 1 << 2, /* non-negative integer */
    PF_NUM = 1 << 3,  /* any integer or float */
    PF_BOOL = 1 << 4,
    PF_STRMAP = 1 << 5, /* map of str -> str */
    PF_ARRAY = 1 << 6,
    PF_MAP = 1 << 7,
    PF_NIL = 1 << 8, /* explicit nil allowed (treated as absent) */
    PF_NAME = 1 << 9 /* str that is a valid context name */
};

typedef struct proto_field {
    const char *name;
    unsigned kinds; /* PF_* bits accepted */
    bool required;
    uint32_t max_len; /* str/bin/map/array: max length; 0 = no extra cap */
} proto_field;

/* Checks msg's fields against a table: each listed field has an accepted
 * kind, required ones are present, str fields are UTF-8 without NUL, names
 * are valid. Unknown fields are ignored (forward compatibility). Returns 0 or
 * -1 with err set ("bad_field" or "bad_name"). */
int proto_check(const proto_val *msg, const proto_field *fields, size_t nfields, proto_error *err);

/* A context name: 1..PROTO_MAX_NAME bytes of [A-Za-z0-9_.-], not starting
 * with '.' or '-'. */
bool proto_name_valid(const char *s, size_t n);

/* The envelope every client message carries. Checks that msg is a map with
 * v == PROTO_VERSION ("version" error otherwise), a str t, and an id that is a
 * str of 1..PROTO_MAX_ID bytes or a uint. On failure *id is still set when an
 * id could be read, so the err reply can carry `re`. */
typedef struct proto_envelope {
    const proto_val *type; /* str */
    const proto_val *id;   /* str or uint; NULL if unreadable */
} proto_envelope;
int proto_envelope_read(const proto_val *msg, proto_envelope *env, proto_error *err);
/* The id of a message too large to decode (proto_peek.c): looks at the
 * first pairs of its top-level map, as far as they are scalars or strings.
 * True with *id (a uint, or a str of 1..PROTO_MAX_ID bytes pointing into
 * buf) when one is found there. */
bool proto_peek_id(const void *buf, size_t len, proto_val *id);
/* The str `t` of a message, when it is among its first scalar pairs (every
 * frame ctxd writes puts it first); false when that cannot be told so. */
bool proto_peek_type(const void *buf, size_t len, proto_val *type);

/* ---- length-prefixed frames (worker channel) ------------------------- */
/* A frame is a 4-byte big-endian length followed by that many bytes of one
 * msgpack map. Begin reserves the prefix and returns its offset; end patches
 * it. */
size_t proto_frame_begin(proto_buf *b);
void proto_frame_end(proto_buf *b, size_t start);
/* Looks for a complete frame at data[0..len). Returns 1 and sets *body, *body_len
 * and *consumed when one is complete, 0 when more bytes are needed, -1 when
 * the announced length exceeds max (the peer is broken: drop it). */
int proto_frame_next(const uint8_t *data, size_t len, size_t max, const uint8_t **body,
                     size_t *body_len, size_t *consumed);

#endif
