/* ctx_media: images and other binary MIME data of results and display
 * outputs are saved to files; ctx prints their paths, and shows PNG images
 * inline when the terminal says it speaks an image protocol (kitty's when
 * TERM is xterm-kitty or KITTY_WINDOW_ID is set, iTerm2's when TERM_PROGRAM
 * is iTerm.app). The directory is $CTX_OUTPUT_DIR, else one directory per
 * user, $TMPDIR/ctx-UID (or /tmp/ctx-UID, mode 0700, checked to be the
 * user's own), reused by every ctx run and repl session; files are named
 * output-PID-N.EXT. */
#include "ctx_media.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[4096];
static unsigned serial;

static const struct {
    const char *mime, *ext;
    bool base64;
} kinds[] = {
    {"image/png", "png", true},       {"image/jpeg", "jpg", true},     {"image/gif", "gif", true},
    {"application/pdf", "pdf", true}, {"image/svg+xml", "svg", false},
};

bool ctx_media_is_file(const char *mime)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(mime, kinds[i].mime) == 0)
            return true;
    return false;
}

static int b64val(int ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

/* Decodes base64 (whitespace skipped, stops at '='); returns the length or
 * -1 on a bad character. out must hold strlen(in) * 3 / 4 + 3 bytes. */
static long b64decode(const char *in, unsigned char *out)
{
    uint32_t acc = 0;
    int bits = 0;
    long n = 0;
    for (const char *p = in; *p && *p != '='; p++) {
        if (*p == '\n' || *p == '\r' || *p == ' ')
            continue;
        int v = b64val((unsigned char)*p);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    return n;
}

static bool make_dir(void)
{
    if (dir[0])
        return true;
    const char *env = getenv("CTX_OUTPUT_DIR");
    if (env && *env) {
        snprintf(dir, sizeof dir, "%s", env);
        return true;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ctx-%u", tmp && *tmp ? tmp : "/tmp", (unsigned)getuid());
    struct stat st;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        goto fail;
    /* Someone else's directory (or a link) in a shared /tmp: not ours. */
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 0077))
        goto fail;
    return true;
fail:
    dir[0] = '\0';
    return false;
}

bool ctx_media_save(const char *mime, const char *value, char *path, size_t path_len)
{
    size_t k = 0;
    while (k < sizeof kinds / sizeof kinds[0] && strcmp(mime, kinds[k].mime) != 0)
        k++;
    if (k == sizeof kinds / sizeof kinds[0] || !make_dir())
        return false;
    size_t len = strlen(value);
    unsigned char *buf = malloc(len * 3 / 4 + 3);
    if (!buf)
        return false;
    long n;
    if (kinds[k].base64) {
        n = b64decode(value, buf);
    } else {
        memcpy(buf, value, len);
        n = (long)len;
    }
    bool ok = false;
    if (n >= 0) {
        snprintf(path, path_len, "%s/output-%d-%u.%s", dir, (int)getpid(), ++serial, kinds[k].ext);
        FILE *f = fopen(path, "wb");
        if (f) {
            ok = fwrite(buf, 1, (size_t)n, f) == (size_t)n;
            ok = fclose(f) == 0 && ok;
        }
    }
    free(buf);
    return ok;
}

/* Which image protocol the terminal announced, if any. */
typedef enum { INLINE_NONE, INLINE_KITTY, INLINE_ITERM } inline_kind;

static inline_kind inline_protocol(FILE *out)
{
    if (!isatty(fileno(out)))
        return INLINE_NONE;
    const char *term = getenv("TERM"), *prog = getenv("TERM_PROGRAM");
    if ((term && strcmp(term, "xterm-kitty") == 0) || getenv("KITTY_WINDOW_ID"))
        return INLINE_KITTY;
    if (prog && strcmp(prog, "iTerm.app") == 0)
        return INLINE_ITERM;
    return INLINE_NONE;
}

/* A base64 PNG inline: kitty's graphics protocol (chunks of 4096) or
 * iTerm2's inline image escape. */
static void show_inline(FILE *out, inline_kind kind, const char *b64)
{
    size_t n = strlen(b64);
    if (kind == INLINE_ITERM) {
        fprintf(out, "\x1b]1337;File=inline=1:%s\a\n", b64);
        return;
    }
    for (size_t off = 0; off < n || off == 0; off += 4096) {
        size_t chunk = n - off < 4096 ? n - off : 4096;
        bool more = off + chunk < n;
        fprintf(out, "\x1b_G%s%s;%.*s\x1b\\", off == 0 ? "a=T,f=100," : "", more ? "m=1" : "m=0",
                (int)chunk, b64 + off);
        if (!more)
            break;
    }
    fputc('\n', out);
}

void ctx_media_print(FILE *out, const char *const *keys, const char *const *values, size_t n)
{
    bool saved = false;
    inline_kind kind = inline_protocol(out);
    for (size_t i = 0; i < n; i++) {
        char path[4200];
        if (!ctx_media_is_file(keys[i]))
            continue;
        if (ctx_media_save(keys[i], values[i], path, sizeof path))
            fprintf(out, "[%s saved to %s]\n", keys[i], path);
        else
            fprintf(out, "[%s: could not be saved]\n", keys[i]);
        if (kind != INLINE_NONE && strcmp(keys[i], "image/png") == 0)
            show_inline(out, kind, values[i]);
        saved = true;
    }
    for (size_t i = 0; i < n && !saved; i++) {
        if (strcmp(keys[i], "text/plain") == 0) {
            fputs(values[i], out);
            fputc('\n', out);
        }
    }
    fflush(out);
}
