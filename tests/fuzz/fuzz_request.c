/* libFuzzer target: a client message through decode, envelope and the
 * execute field checks, then re-encoded — what the daemon does first with
 * every byte a client sends; and the id peek of an oversized message. */
#include "proto.h"

#include <stdint.h>
#include <string.h>

static const proto_field fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},    {"code", PF_STR, true, 0},
    {"timeout", PF_NUM | PF_NIL, false, 0}, {"env", PF_STRMAP | PF_NIL, false, 1024},
    {"silent", PF_BOOL | PF_NIL, false, 0}, {"stop_on_error", PF_BOOL | PF_NIL, false, 0},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    proto_doc doc;
    proto_error err;
    proto_val id;
    if (proto_peek_id(data, size, &id) && id.kind == PROTO_STR && (id.n < 1 || id.n > PROTO_MAX_ID))
        __builtin_trap(); /* the peek promises a str id of 1..PROTO_MAX_ID bytes */
    if (proto_decode(&doc, data, size, &err) < 0)
        return 0;
    proto_envelope env;
    if (proto_envelope_read(&doc.nodes[0], &env, &err) == 0)
        proto_check(&doc.nodes[0], fields, sizeof fields / sizeof fields[0], &err);
    proto_buf b;
    proto_buf_init(&b);
    proto_put_val(&b, &doc.nodes[0]);
    /* Re-encoding a decoded value and decoding it again must agree. */
    proto_doc again;
    if (proto_decode(&again, b.data, b.len, &err) != 0)
        __builtin_trap();
    proto_doc_free(&again);
    proto_buf_free(&b);
    proto_doc_free(&doc);
    return 0;
}
