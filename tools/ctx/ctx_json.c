/* ctx --json: a small streaming JSON writer, UTF-8 decoding with
 * replacement, base64, and human byte units. */
#include "ctx.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void jw_init(jw *w, FILE *f)
{
    memset(w, 0, sizeof *w);
    w->f = f;
}

/* Writes the comma a value needs inside a container (none after a key). */
static void sep(jw *w)
{
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth > 0) {
        if (w->need_comma[w->depth])
            fputc(',', w->f);
        w->need_comma[w->depth] = true;
    }
}

static void open_c(jw *w, char ch)
{
    sep(w);
    fputc(ch, w->f);
    if (w->depth + 1 < (int)(sizeof w->need_comma / sizeof w->need_comma[0]))
        w->depth++;
    w->need_comma[w->depth] = false;
}

static void close_c(jw *w, char ch)
{
    fputc(ch, w->f);
    if (w->depth > 0)
        w->depth--;
}

void jw_obj(jw *w)
{
    open_c(w, '{');
}
void jw_obj_end(jw *w)
{
    close_c(w, '}');
}
void jw_arr(jw *w)
{
    open_c(w, '[');
}
void jw_arr_end(jw *w)
{
    close_c(w, ']');
}

size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char b = s[0];
    size_t len;
    uint32_t v, min;
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
        len = 2, v = b & 0x1F, min = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3, v = b & 0x0F, min = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4, v = b & 0x07, min = 0x10000;
    } else {
        *cp = 0xFFFD;
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if (i >= n)
            return 0; /* a valid beginning, cut short */
        if ((s[i] & 0xC0) != 0x80) {
            *cp = 0xFFFD;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = v;
    return len;
}

/* Escapes text as a JSON string; invalid (or cut-short) UTF-8 becomes
 * U+FFFD. */
static void put_text(FILE *f, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = utf8_next(p + i, n - i, &cp);
        if (len == 0) { /* truncated at the end */
            fputs("\\ufffd", f);
            break;
        }
        if (cp == 0xFFFD && len == 1 && p[i] >= 0x80) {
            fputs("\\ufffd", f);
        } else if (cp == '"') {
            fputs("\\\"", f);
        } else if (cp == '\\') {
            fputs("\\\\", f);
        } else if (cp == '\n') {
            fputs("\\n", f);
        } else if (cp == '\r') {
            fputs("\\r", f);
        } else if (cp == '\t') {
            fputs("\\t", f);
        } else if (cp < 0x20 || cp == 0x7F) {
            fprintf(f, "\\u%04x", (unsigned)cp);
        } else {
            fwrite(p + i, 1, len, f);
        }
        i += len;
    }
    fputc('"', f);
}

void jw_key(jw *w, const char *key)
{
    sep(w);
    put_text(w->f, key, strlen(key));
    fputc(':', w->f);
    w->after_key = true;
}

void jw_strn(jw *w, const char *s, size_t n)
{
    sep(w);
    put_text(w->f, s, n);
}

void jw_str(jw *w, const char *s)
{
    if (!s) {
        jw_null(w);
        return;
    }
    jw_strn(w, s, strlen(s));
}

void jw_uint(jw *w, uint64_t v)
{
    sep(w);
    fprintf(w->f, "%llu", (unsigned long long)v);
}

void jw_num(jw *w, double v)
{
    sep(w);
    if (!isfinite(v))
        fputs("null", w->f);
    else
        fprintf(w->f, "%.6f", v);
}

void jw_bool(jw *w, bool v)
{
    sep(w);
    fputs(v ? "true" : "false", w->f);
}

void jw_null(jw *w)
{
    sep(w);
    fputs("null", w->f);
}

void jw_base64(jw *w, const void *data, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    sep(w);
    fputc('"', w->f);
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        fputc(tab[v >> 18], w->f);
        fputc(tab[(v >> 12) & 63], w->f);
        fputc(tab[(v >> 6) & 63], w->f);
        fputc(tab[v & 63], w->f);
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        fputc(tab[v >> 18], w->f);
        fputc(tab[(v >> 12) & 63], w->f);
        fputc(i + 1 < n ? tab[(v >> 6) & 63] : '=', w->f);
        fputc('=', w->f);
    }
    fputc('"', w->f);
}

void jw_line(jw *w)
{
    fputc('\n', w->f);
    fflush(w->f);
    w->depth = 0;
    w->after_key = false;
    w->need_comma[0] = false;
}

void jw_kstr(jw *w, const char *key, const char *s)
{
    jw_key(w, key);
    jw_str(w, s);
}
void jw_kuint(jw *w, const char *key, uint64_t v)
{
    jw_key(w, key);
    jw_uint(w, v);
}
void jw_knum(jw *w, const char *key, double v)
{
    jw_key(w, key);
    jw_num(w, v);
}
void jw_kbool(jw *w, const char *key, bool v)
{
    jw_key(w, key);
    jw_bool(w, v);
}

void jw_ctx_info(jw *w, const ctxd_ctx_info *c)
{
    jw_obj(w);
    jw_kstr(w, "name", c->name);
    jw_kstr(w, "cwd", c->cwd);
    jw_kstr(w, "state", c->state);
    jw_kuint(w, "pid", c->pid);
    jw_kuint(w, "incarnation", c->incarnation);
    jw_knum(w, "created", c->created);
    jw_kuint(w, "execution_count", c->execution_count);
    jw_kuint(w, "queued", c->queued);
    jw_kuint(w, "rss", c->rss);
    jw_kuint(w, "pss", c->pss);
    jw_kstr(w, "tier", c->tier ? c->tier : "unsafe");
    if (c->last_death)
        jw_kstr(w, "last_death", c->last_death);
    jw_obj_end(w);
}

const char *ctx_format_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (n < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)n);
        return buf;
    }
    double v = (double)n / 1024.0;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

/* Formats an age in the largest unit that fits ("42s", "7m", "3h", "2d"). */
const char *ctx_format_age(double seconds, char *buf, size_t n)
{
    static const struct {
        double size;
        char unit;
    } units[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}, {1, 's'}};
    size_t i = 0;
    while (i + 1 < sizeof units / sizeof units[0] && seconds < units[i].size)
        i++;
    snprintf(buf, n, "%.0f%c", seconds < 0 ? 0 : floor(seconds / units[i].size), units[i].unit);
    return buf;
}
