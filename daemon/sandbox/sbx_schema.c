/* sbx_schema: the worker's policy written as CTXD_SANDBOX's text and parsed
 * back, both by the one table below (sbx_schema.h). */
#include "sbx_schema.h"

#include "mem.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F(key, type, member, min, max)                                                             \
    {                                                                                              \
        key, type, offsetof(sbx_spec, member), min, max                                            \
    }

const sbx_field sbx_schema[] = {
    F("tier", SBX_FIELD_TIER, tier, 0, 0),
    F("network", SBX_FIELD_DENY, no_network, 0, 0),
    F("subprocess", SBX_FIELD_DENY, no_subprocess, 0, 0),
    F("memory_bytes", SBX_FIELD_COUNT, memory_bytes, SBX_MEMORY_MIN, ULLONG_MAX),
    F("max_processes", SBX_FIELD_COUNT, max_processes, 1, ULLONG_MAX),
    F("file_size_bytes", SBX_FIELD_COUNT, file_size_bytes, 1, ULLONG_MAX),
    F("disk_bytes", SBX_FIELD_COUNT, disk_bytes, SBX_DISK_MIN, ULLONG_MAX),
    F("cpu_seconds", SBX_FIELD_SECONDS, cpu_seconds, 0, 1000000000),
    F("allowed_imports", SBX_FIELD_LIST, imports, 0, SBX_LIST_MAX),
    F("write_roots", SBX_FIELD_LIST, write_roots, 0, SBX_LIST_MAX),
    F("tmpdir", SBX_FIELD_PATH, tmpdir, 0, 0),
    F("read_roots", SBX_FIELD_LIST, read_roots, 0, SBX_LIST_MAX),
    /* never root: a uid of 0 would be the daemon's own */
    F("uid", SBX_FIELD_ID, ident.uid, 1, UINT_MAX - 1),
    F("gid", SBX_FIELD_ID, ident.gid, 0, UINT_MAX - 1),
    F("group", SBX_FIELD_ID, ident.group, 0, UINT_MAX - 1),
};
const size_t sbx_schema_n = sizeof sbx_schema / sizeof *sbx_schema;

static const char *const tier_names[] = {
    [SBX_TIER_UNSAFE] = "unsafe",
    [SBX_TIER_STATIC] = "static",
    [SBX_TIER_LOCAL] = "local",
    [SBX_TIER_SANDBOX] = "sandbox",
};

#define AT(s, f, type) ((type *)((char *)(s) + (f)->offset))
#define AT_C(s, f, type) ((const type *)((const char *)(s) + (f)->offset))

/* ---- writing -------------------------------------------------------------- */

/* A value that reads back as itself: not empty, no newline or separator. */
static bool plain(const char *v)
{
    return v && *v && !strpbrk(v, (const char[]){'\n', SBX_LIST_SEP, '\0'});
}

/* Whether f is in the text of s, and its value there can be read back.
 * *ok false: it should be, and cannot. */
static bool wanted(const sbx_spec *s, const sbx_field *f, bool *ok)
{
    *ok = true;
    switch (f->type) {
    case SBX_FIELD_TIER: {
        sbx_tier t = *AT_C(s, f, sbx_tier);
        *ok = (unsigned)t < sizeof tier_names / sizeof *tier_names;
        return true;
    }
    case SBX_FIELD_DENY:
        return *AT_C(s, f, bool);
    case SBX_FIELD_COUNT: {
        unsigned long long v = *AT_C(s, f, unsigned long long);
        *ok = v == 0 || (v >= f->min && v <= f->max);
        return v != 0;
    }
    case SBX_FIELD_SECONDS: {
        double v = *AT_C(s, f, double);
        *ok = v == 0 || (v > 0 && v <= (double)f->max);
        return v != 0;
    }
    case SBX_FIELD_LIST: {
        const sbx_list *l = AT_C(s, f, sbx_list);
        *ok = l->n <= f->max;
        for (size_t i = 0; *ok && i < l->n; i++)
            *ok = plain(l->v[i]);
        return l->set;
    }
    case SBX_FIELD_PATH: {
        const char *v = *AT_C(s, f, char *);
        *ok = !v || (plain(v) && v[0] == '/');
        return v != NULL;
    }
    case SBX_FIELD_ID: {
        unsigned v = *AT_C(s, f, unsigned);
        *ok = !s->has_uid || (v >= f->min && v <= f->max);
        return s->has_uid;
    }
    }
    return false;
}

/* Appends n bytes of v to *out (grown as needed), which stays a string. */
static void put(char **out, size_t *len, size_t *cap, const char *v, size_t n)
{
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *out = mem_realloc(*out, *cap);
    }
    memcpy(*out + *len, v, n);
    *len += n;
    (*out)[*len] = '\0';
}

/* Appends field f's value in s as the text writes it. */
static void put_value(const sbx_spec *s, const sbx_field *f, char **out, size_t *len, size_t *cap)
{
    char num[64];
    switch (f->type) {
    case SBX_FIELD_TIER:
        snprintf(num, sizeof num, "%s", tier_names[*AT_C(s, f, sbx_tier)]);
        break;
    case SBX_FIELD_DENY:
        snprintf(num, sizeof num, "0");
        break;
    case SBX_FIELD_COUNT:
        snprintf(num, sizeof num, "%llu", *AT_C(s, f, unsigned long long));
        break;
    case SBX_FIELD_SECONDS:
        snprintf(num, sizeof num, "%.17g", *AT_C(s, f, double));
        break;
    case SBX_FIELD_ID:
        snprintf(num, sizeof num, "%u", *AT_C(s, f, unsigned));
        break;
    case SBX_FIELD_PATH: {
        const char *v = *AT_C(s, f, char *);
        put(out, len, cap, v, strlen(v));
        return;
    }
    case SBX_FIELD_LIST: {
        const sbx_list *l = AT_C(s, f, sbx_list);
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                put(out, len, cap, (const char[]){SBX_LIST_SEP}, 1);
            put(out, len, cap, l->v[i], strlen(l->v[i]));
        }
        return;
    }
    }
    put(out, len, cap, num, strlen(num));
}

char *sbx_spec_text(const sbx_spec *s)
{
    size_t len = 0, cap = 256;
    char *out = mem_alloc(cap);
    out[0] = '\0';
    for (size_t i = 0; i < sbx_schema_n; i++) {
        const sbx_field *f = &sbx_schema[i];
        bool ok;
        bool w = wanted(s, f, &ok);
        if (!ok) {
            free(out);
            return NULL;
        }
        if (!w)
            continue;
        put(&out, &len, &cap, f->key, strlen(f->key));
        put(&out, &len, &cap, "=", 1);
        put_value(s, f, &out, &len, &cap);
        put(&out, &len, &cap, "\n", 1);
    }
    return out;
}

/* ---- parsing -------------------------------------------------------------- */

/* Fills why with the reason; -1. */
static int refuse(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* A decimal number without sign, spaces or leading zeros, in [min, max]. */
static bool count_of(const char *v, unsigned long long min, unsigned long long max,
                     unsigned long long *out)
{
    if (v[0] < '0' || v[0] > '9' || (v[0] == '0' && v[1]))
        return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || n < min || n > max)
        return false;
    *out = n;
    return true;
}

/* Fills l (set) with the items of v; -1 when there are more than max or
 * one is empty (l then holds those read so far, for sbx_spec_free). */
static int list_of(sbx_list *l, const char *v, size_t max)
{
    size_t n = *v ? 1 : 0;
    for (const char *p = v; *p; p++)
        n += *p == SBX_LIST_SEP;
    if (n > max)
        return -1;
    l->set = true;
    l->v = mem_calloc(n + 1, sizeof *l->v);
    for (const char *p = v; *v; p++)
        if (*p == SBX_LIST_SEP || *p == '\0') {
            if (p == v)
                return -1; /* an empty item */
            l->v[l->n++] = mem_strndup(v, (size_t)(p - v));
            if (!*p)
                break;
            v = p + 1;
            if (!*v)
                return -1; /* a trailing separator */
        }
    return 0;
}

/* The value v of field f into s; -1 when it is not one f can hold. */
static int value_of(sbx_spec *s, const sbx_field *f, const char *v)
{
    unsigned long long n;
    switch (f->type) {
    case SBX_FIELD_TIER:
        for (size_t t = 0; t < sizeof tier_names / sizeof *tier_names; t++)
            if (!strcmp(v, tier_names[t])) {
                *AT(s, f, sbx_tier) = (sbx_tier)t;
                return 0;
            }
        return -1;
    case SBX_FIELD_DENY:
        if (strcmp(v, "0"))
            return -1;
        *AT(s, f, bool) = true;
        return 0;
    case SBX_FIELD_COUNT:
        if (!count_of(v, f->min, f->max, &n))
            return -1;
        *AT(s, f, unsigned long long) = n;
        return 0;
    case SBX_FIELD_SECONDS: {
        char *end;
        double d = strtod(v, &end);
        if (!*v || *end || !(d > 0) || d > (double)f->max)
            return -1;
        *AT(s, f, double) = d;
        return 0;
    }
    case SBX_FIELD_LIST:
        return list_of(AT(s, f, sbx_list), v, f->max);
    case SBX_FIELD_PATH:
        if (v[0] != '/')
            return -1;
        *AT(s, f, char *) = mem_strdup(v);
        return 0;
    case SBX_FIELD_ID:
        if (!count_of(v, f->min, f->max, &n))
            return -1;
        *AT(s, f, unsigned) = (unsigned)n;
        s->has_uid = true;
        return 0;
    }
    return -1;
}

int sbx_spec_parse(sbx_spec *s, const char *text, char *why, size_t n)
{
    memset(s, 0, sizeof *s);
    bool seen[sizeof sbx_schema / sizeof *sbx_schema] = {false};
    size_t ids = 0;
    char *copy = mem_strdup(text);
    int rc = 0;
    for (char *line = copy, *next; rc == 0 && *line; line = next) {
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : line + strlen(line);
        if (nl)
            *nl = '\0';
        char *eq = strchr(line, '=');
        if (!eq) {
            rc = refuse(why, n, "a line without '='");
            break;
        }
        *eq = '\0';
        size_t i = 0;
        while (i < sbx_schema_n && strcmp(sbx_schema[i].key, line))
            i++;
        if (i == sbx_schema_n)
            rc = refuse(why, n, "unknown key '%.64s'", line);
        else if (seen[i])
            rc = refuse(why, n, "'%s' given twice", line);
        else if (value_of(s, &sbx_schema[i], eq + 1) < 0)
            rc = refuse(why, n, "'%s' has a value out of its limits", line);
        else
            seen[i] = true, ids += sbx_schema[i].type == SBX_FIELD_ID;
    }
    free(copy);
    if (rc == 0 && !seen[0])
        rc = refuse(why, n, "no tier");
    size_t all_ids = 0;
    for (size_t i = 0; i < sbx_schema_n; i++)
        all_ids += sbx_schema[i].type == SBX_FIELD_ID;
    if (rc == 0 && ids && ids != all_ids)
        rc = refuse(why, n, "uid, gid and group go together");
    if (rc < 0)
        sbx_spec_free(s);
    return rc;
}

static void list_free(sbx_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

void sbx_spec_free(sbx_spec *s)
{
    for (size_t i = 0; i < sbx_schema_n; i++) {
        const sbx_field *f = &sbx_schema[i];
        if (f->type == SBX_FIELD_LIST)
            list_free(AT(s, f, sbx_list));
        else if (f->type == SBX_FIELD_PATH)
            free(*AT(s, f, char *));
    }
    memset(s, 0, sizeof *s);
}
