/* rt_msg: the few msgpack rewrites the router makes: a request's context
 * names (tenant prefix, the default context, a generated name) and its
 * instance pin; the router's own replies. */
#include "rt_msg.h"

#include "mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A substitution's value. */
static void put_sub(proto_buf *b, const rt_sub *s)
{
    if (s->str)
        proto_put_str(b, s->str);
    else if (s->val)
        proto_put_val(b, s->val);
    else if (s->raw)
        proto_buf_append(b, s->raw->data, s->raw->len);
    else
        proto_put_nil(b);
}

/* Re-encodes map msg, replacing or dropping the keys in subs and appending
 * those it lacks. */
void rt_msg_rewrite(proto_buf *b, const proto_val *msg, const rt_sub *subs, size_t nsubs)
{
    bool seen[16] = {false};
    if (nsubs > 16)
        fatal("rt_msg_rewrite: %zu substitutions", nsubs);
    uint32_t n = 0;
    for (uint32_t i = 0; i < msg->n; i++) {
        const proto_val *k = &msg->as.items[2 * i];
        bool dropped = false;
        for (size_t j = 0; j < nsubs; j++)
            if (proto_str_eq(k, subs[j].key)) {
                seen[j] = true;
                dropped = subs[j].drop;
            }
        n += dropped ? 0 : 1;
    }
    for (size_t j = 0; j < nsubs; j++)
        n += !seen[j] && !subs[j].drop ? 1 : 0;
    proto_put_map(b, n);
    for (uint32_t i = 0; i < msg->n; i++) {
        const proto_val *k = &msg->as.items[2 * i], *v = &msg->as.items[2 * i + 1];
        const rt_sub *s = NULL;
        for (size_t j = 0; j < nsubs && !s; j++)
            if (proto_str_eq(k, subs[j].key))
                s = &subs[j];
        if (s && s->drop)
            continue;
        proto_put_val(b, k);
        if (!s)
            proto_put_val(b, v);
        else
            put_sub(b, s);
    }
    for (size_t j = 0; j < nsubs; j++) {
        if (seen[j] || subs[j].drop)
            continue;
        proto_put_str(b, subs[j].key);
        put_sub(b, &subs[j]);
    }
}

/* The head every router message starts with. re is the msgpack of the
 * request's id (nil when none). */
void rt_msg_begin(proto_buf *b, const char *type, const uint8_t *re, size_t re_len,
                  uint32_t nfields)
{
    proto_put_map(b, 3 + nfields);
    proto_put_str(b, "v");
    proto_put_uint(b, PROTO_VERSION);
    proto_put_str(b, "t");
    proto_put_str(b, type);
    proto_put_str(b, "re");
    if (re_len)
        proto_buf_append(b, re, re_len);
    else
        proto_put_nil(b);
}

/* Encodes `err {code, message}`. */
static void msg_verr(proto_buf *b, const uint8_t *re, size_t re_len, const char *code,
                     const char *fmt, va_list ap)
{
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    rt_msg_begin(b, "err", re, re_len, 2);
    proto_put_str(b, "code");
    proto_put_str(b, code);
    proto_put_str(b, "message");
    proto_put_str(b, text);
}

void rt_msg_err(proto_buf *b, const uint8_t *re, size_t re_len, const char *code, const char *fmt,
                ...)
{
    va_list ap;
    va_start(ap, fmt);
    msg_verr(b, re, re_len, code, fmt, ap);
    va_end(ap);
}

void rt_reply_err(rt_client *c, const uint8_t *re, size_t re_len, const char *code, const char *fmt,
                  ...)
{
    proto_buf b;
    proto_buf_init(&b);
    va_list ap;
    va_start(ap, fmt);
    msg_verr(&b, re, re_len, code, fmt, ap);
    va_end(ap);
    rt_out_deliver(c, &c->out, &b);
    proto_buf_free(&b);
}

/* TENANT.NAME for a client with a tenant; NAME otherwise. The caller has
 * checked that it fits (rt_req.c). */
void rt_msg_hostname(const rt_client *c, const char *name, size_t n, char out[PROTO_MAX_NAME + 1])
{
    if (c->tenant[0])
        snprintf(out, PROTO_MAX_NAME + 1, "%s.%.*s", c->tenant, (int)n, name);
    else
        snprintf(out, PROTO_MAX_NAME + 1, "%.*s", (int)n, name);
}

const char *rt_msg_clientname(const rt_client *c, const char *host_name)
{
    if (!c->tenant[0])
        return host_name;
    size_t t = strlen(c->tenant);
    if (strncmp(host_name, c->tenant, t) != 0 || host_name[t] != '.')
        return NULL;
    return host_name + t + 1;
}
