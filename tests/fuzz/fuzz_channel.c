/* libFuzzer target: a byte stream as a worker would send it — length-prefixed
 * frames, each decoded and checked like the supervisor does. */
#include "proto.h"

#include <stdint.h>

static const proto_field stream_fields[] = {
    {"name", PF_STR, true, 16},
    {"data", PF_BIN, true, PROTO_STREAM_CHUNK},
};
static const proto_field error_fields[] = {
    {"ename", PF_STR, true, 4096},
    {"evalue", PF_STR, true, 1u << 20},
    {"traceback", PF_ARRAY, true, 10000},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    for (;;) {
        const uint8_t *body;
        size_t len, used;
        int r = proto_frame_next(data + off, size - off, PROTO_MAX_FRAME, &body, &len, &used);
        if (r <= 0)
            return 0;
        off += used;
        proto_doc doc;
        proto_error err;
        if (proto_decode(&doc, body, len, &err) < 0)
            continue;
        const proto_val *t = proto_map_get(&doc.nodes[0], "t");
        if (proto_str_eq(t, "stream"))
            proto_check(&doc.nodes[0], stream_fields, 2, &err);
        else if (proto_str_eq(t, "error"))
            proto_check(&doc.nodes[0], error_fields, 3, &err);
        proto_doc_free(&doc);
    }
}
