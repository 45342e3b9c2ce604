/* codec_bench: one codec as the benchmark drives it. codec_cases.c is built
 * twice, against the msgpack-c codec of proto/ (codec_new) and against the
 * hand-written codec it replaced, taken from git history (codec_old). */
#ifndef CTXD_CODEC_BENCH_H
#define CTXD_CODEC_BENCH_H

#include <stddef.h>
#include <stdint.h>

enum { CASE_EXECUTE, CASE_STREAM, CASE_CTX_LIST, CASE_COUNT };

typedef struct codec_ops {
    const char *name;
    /* Encodes case c into a buffer the codec keeps; *out points at it. */
    size_t (*encode)(int c, const uint8_t **out);
    /* Decodes buf[0..len): the number of values, or -1 when refused. */
    long (*decode)(const uint8_t *buf, size_t len);
} codec_ops;

extern const codec_ops codec_old, codec_new;

#endif
