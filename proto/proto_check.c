/* proto_check: validation of decoded messages against field tables, the
 * envelope every client message carries, UTF-8 and context names. */
#include "proto.h"

#include <string.h>

/* Strict UTF-8 (no overlongs, no surrogates, max U+10FFFF). */
bool proto_utf8_valid(const char *str, size_t n, bool allow_nul)
{
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if (c == 0 && !allow_nul)
                return false;
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

bool proto_name_valid(const char *s, size_t n)
{
    if (n == 0 || n > PROTO_MAX_NAME || s[0] == '.' || s[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

static const char *kind_names(unsigned kinds, char *buf, size_t n)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{PF_STR, "str"},
                 {PF_NAME, "str"},
                 {PF_BIN, "bin"},
                 {PF_UINT, "uint"},
                 {PF_NUM, "number"},
                 {PF_BOOL, "bool"},
                 {PF_STRMAP, "map of str to str"},
                 {PF_ARRAY, "array"},
                 {PF_MAP, "map"}};
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(kinds & names[i].bit) || strstr(buf, names[i].name))
            continue;
        if (buf[0])
            strncat(buf, " or ", n - strlen(buf) - 1);
        strncat(buf, names[i].name, n - strlen(buf) - 1);
    }
    return buf;
}

/* Which PF_* bit a decoded value satisfies, given the bits asked for. */
static bool kind_matches(const proto_val *v, unsigned kinds)
{
    switch (v->kind) {
    case PROTO_STR:
        return kinds & (PF_STR | PF_NAME);
    case PROTO_BIN:
        return kinds & PF_BIN;
    case PROTO_UINT:
        return kinds & (PF_UINT | PF_NUM);
    case PROTO_INT:
    case PROTO_FLOAT:
        return kinds & PF_NUM;
    case PROTO_BOOL:
        return kinds & PF_BOOL;
    case PROTO_ARRAY:
        return kinds & PF_ARRAY;
    case PROTO_MAP:
        return kinds & (PF_MAP | PF_STRMAP);
    case PROTO_NIL:
        return kinds & PF_NIL;
    default:
        return false;
    }
}

static int check_strmap(const proto_val *v, const proto_field *f, proto_error *err)
{
    for (uint32_t i = 0; i < 2 * v->n; i++) {
        const proto_val *s = &v->as.items[i];
        if (s->kind != PROTO_STR || !proto_utf8_valid(s->as.s, s->n, false)) {
            proto_error_set(err, "bad_field",
                            "field '%s' must map str to str (UTF-8, no NUL bytes)", f->name);
            return -1;
        }
    }
    return 0;
}

static int check_field(const proto_val *v, const proto_field *f, proto_error *err)
{
    char kinds[96];
    if (!kind_matches(v, f->kinds)) {
        proto_error_set(err, "bad_field", "field '%s' must be %s", f->name,
                        kind_names(f->kinds, kinds, sizeof kinds));
        return -1;
    }
    bool sized = v->kind == PROTO_STR || v->kind == PROTO_BIN || v->kind == PROTO_MAP ||
                 v->kind == PROTO_ARRAY;
    if (f->max_len && sized && v->n > f->max_len) {
        proto_error_set(err, "too_large", "field '%s' is longer than %u", f->name,
                        (unsigned)f->max_len);
        return -1;
    }
    if (v->kind == PROTO_STR) {
        if ((f->kinds & PF_NAME) && !proto_name_valid(v->as.s, v->n)) {
            proto_error_set(err, "bad_name",
                            "field '%s': a context name is 1-%d characters of "
                            "[A-Za-z0-9_.-], not starting with '.' or '-'",
                            f->name, PROTO_MAX_NAME);
            return -1;
        }
        if (!proto_utf8_valid(v->as.s, v->n, false)) {
            proto_error_set(err, "bad_field", "field '%s' is not valid UTF-8 or contains NUL",
                            f->name);
            return -1;
        }
    }
    if (v->kind == PROTO_MAP && (f->kinds & PF_STRMAP))
        return check_strmap(v, f, err);
    return 0;
}

/* The value of each field (NULL: absent), in one walk over the message's
 * keys rather than a walk per field; the first of repeated keys, as
 * proto_map_get. */
static void find_fields(const proto_val *msg, const proto_field *fields, size_t nfields,
                        const proto_val **found, size_t *lens)
{
    for (size_t i = 0; i < nfields; i++) {
        found[i] = NULL;
        lens[i] = strlen(fields[i].name);
    }
    for (uint32_t k = 0; k < msg->n; k++) {
        const proto_val *key = &msg->as.items[2 * k];
        if (key->kind != PROTO_STR)
            continue;
        for (size_t i = 0; i < nfields; i++) {
            if (lens[i] == key->n && !found[i] &&
                (key->n == 0 || (fields[i].name[0] == key->as.s[0] &&
                                 memcmp(fields[i].name, key->as.s, key->n) == 0)))
                found[i] = &msg->as.items[2 * k + 1];
        }
    }
}

/* Tables longer than this are checked a lookup per field. */
#define CHECK_ONE_WALK_MAX 64

int proto_check(const proto_val *msg, const proto_field *fields, size_t nfields, proto_error *err)
{
    const proto_val *found[CHECK_ONE_WALK_MAX];
    size_t lens[CHECK_ONE_WALK_MAX];
    bool walked = msg && msg->kind == PROTO_MAP && nfields <= CHECK_ONE_WALK_MAX;
    if (walked)
        find_fields(msg, fields, nfields, found, lens);
    for (size_t i = 0; i < nfields; i++) {
        const proto_field *f = &fields[i];
        const proto_val *v = walked ? found[i] : proto_map_get(msg, f->name);
        if (v && v->kind == PROTO_NIL && (f->kinds & PF_NIL))
            v = NULL;
        if (!v) {
            if (f->required) {
                proto_error_set(err, "bad_field", "missing required field '%s'", f->name);
                return -1;
            }
            continue;
        }
        if (check_field(v, f, err) < 0)
            return -1;
    }
    return 0;
}

int proto_envelope_read(const proto_val *msg, proto_envelope *env, proto_error *err)
{
    env->type = env->id = NULL;
    if (msg->kind != PROTO_MAP) {
        proto_error_set(err, "bad_request", "a message must be a msgpack map");
        return -1;
    }
    const proto_val *id = proto_map_get(msg, "id");
    if (id && ((id->kind == PROTO_STR && id->n >= 1 && id->n <= PROTO_MAX_ID &&
                proto_utf8_valid(id->as.s, id->n, false)) ||
               id->kind == PROTO_UINT))
        env->id = id;
    const proto_val *v = proto_map_get(msg, "v");
    if (!v || v->kind != PROTO_UINT || v->as.u != PROTO_VERSION) {
        proto_error_set(err, "version",
                        "field 'v' must be the protocol version; this daemon speaks [1]");
        return -1;
    }
    if (!env->id) {
        proto_error_set(err, "bad_request",
                        "field 'id' must be a str of 1-%d bytes (UTF-8) or a uint", PROTO_MAX_ID);
        return -1;
    }
    const proto_val *t = proto_map_get(msg, "t");
    if (!t || t->kind != PROTO_STR || !proto_utf8_valid(t->as.s, t->n, false)) {
        proto_error_set(err, "bad_request", "field 't' (the message type) must be a str");
        return -1;
    }
    env->type = t;
    return 0;
}
