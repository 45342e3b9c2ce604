/* proto_val: reading a decoded message (lookups, comparisons, copies) and
 * the error record every decode and check fills. */
#include "proto.h"

#include "mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

/* Linear: messages have a handful of fields, and the one large map a client
 * may send (an env) is read whole by its users, not looked up in. */
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
