/* ctx_media: images and other binary MIME data of results and display
 * outputs are saved to files (a terminal cannot show them); ctx prints their
 * paths. The directory is $CTX_OUTPUT_DIR, else a new ctx-XXXXXX directory
 * under $TMPDIR (or /tmp), made on first use. */
#include "ctx_media.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    snprintf(dir, sizeof dir, "%s/ctx-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        dir[0] = '\0';
        return false;
    }
    return true;
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
