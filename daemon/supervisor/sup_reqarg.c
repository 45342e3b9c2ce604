/* sup_reqarg: what several requests' handlers read and check the same
 * way (sup_reqarg.h): a field with nil as absent, an `env` map, a
 * `syntax`, a number, and the `err` reply of a proto_error. */
#include "sup_reqarg.h"

#include "sup_send.h"

#include "mem.h"
#include "proto.h"

#include <stdlib.h>
#include <string.h>

/* A field's value, with an explicit nil read as absent (as proto_check
 * treats it). */
const proto_val *sup_reqarg_get(const proto_val *msg, const char *key)
{
    const proto_val *v = proto_map_get(msg, key);
    return v && v->kind == PROTO_NIL ? NULL : v;
}

/* Replies `err` with the code and message of a failed check. */
void sup_reqarg_reply_error(const sup_peer *peer, const proto_error *err)
{
    sup_reply_err(peer, err->code, "%s", err->msg);
}

/* Copies a checked str->str map (NULL: none) into "KEY=VALUE" strings,
 * *out holding *n of them and a NULL; -1 after replying bad_field when a
 * key is empty or holds '='. */
int sup_reqarg_env_strings(const proto_val *map, char ***out, size_t *n, const sup_peer *peer)
{
    *out = NULL;
    *n = 0;
    if (!map)
        return 0;
    for (uint32_t i = 0; i < map->n; i++) {
        const proto_val *k = &map->as.items[2 * i];
        if (k->n == 0 || memchr(k->as.s, '=', k->n)) {
            sup_reply_err(peer, "bad_field",
                          "field 'env': a variable name must be non-empty "
                          "and must not contain '='");
            return -1;
        }
    }
    char **env = mem_calloc(map->n + 1, sizeof *env);
    for (uint32_t i = 0; i < map->n; i++) {
        const proto_val *k = &map->as.items[2 * i], *v = &map->as.items[2 * i + 1];
        env[i] = mem_alloc(k->n + v->n + 2);
        memcpy(env[i], k->as.s, k->n);
        env[i][k->n] = '=';
        memcpy(env[i] + k->n + 1, v->as.s, v->n);
        env[i][k->n + 1 + v->n] = '\0';
    }
    *out = env;
    *n = map->n;
    return 0;
}

/* Frees n strings and the array holding them (NULL with n 0 is fine). */
void sup_reqarg_free_strings(char **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

/* The syntaxes a run may ask for (execute and ctx.create `syntax`), as
 * hello's `syntaxes` lists them. */
const char *const sup_reqarg_syntaxes[2] = {"python", "ipython"};

/* A checked `syntax` field: its static name, "" when absent, NULL (after
 * replying bad_field) when it names none. */
const char *sup_reqarg_syntax_value(const proto_val *v, const sup_peer *peer)
{
    if (!v)
        return "";
    for (size_t i = 0; i < sizeof sup_reqarg_syntaxes / sizeof sup_reqarg_syntaxes[0]; i++)
        if (proto_str_eq(v, sup_reqarg_syntaxes[i]))
            return sup_reqarg_syntaxes[i];
    sup_reply_err(peer, "bad_field", "field 'syntax' must be \"python\" or \"ipython\"");
    return NULL;
}

/* A number field as a double: dflt when it is absent or not a number. */
double sup_reqarg_num_value(const proto_val *v, double dflt)
{
    if (!v)
        return dflt;
    switch (v->kind) {
    case PROTO_UINT:
        return (double)v->as.u;
    case PROTO_INT:
        return (double)v->as.i;
    case PROTO_FLOAT:
        return v->as.f;
    default:
        return dflt;
    }
}
