/* zap_key: the key file read whole (up to its cap), then line by line. */
#include "zap_key.h"

#include "zap.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

/* The first key of text (n bytes): 0 with key set, -1 when none. */
static int first_key(const char *text, size_t n, char key[ZAP_KEY_Z85 + 1])
{
    const char *end = text + n;
    for (const char *s = text; s < end;) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *eol = nl ? nl : end;
        while (s < eol && isspace((unsigned char)*s))
            s++;
        if (s < eol && *s != '#' && eol - s >= ZAP_KEY_Z85) {
            uint8_t raw[32];
            memcpy(key, s, ZAP_KEY_Z85);
            key[ZAP_KEY_Z85] = '\0';
            if (memchr(key, '\0', ZAP_KEY_Z85) == NULL && zmq_z85_decode(raw, key))
                return 0;
        }
        s = nl ? nl + 1 : end;
    }
    return -1;
}

int zap_key_read_fd(int fd, char key[ZAP_KEY_Z85 + 1], char *why, size_t whylen)
{
    char text[ZAP_KEY_FILE_MAX + 1];
    size_t n = 0;
    int rc = 0;
    while (n <= ZAP_KEY_FILE_MAX) {
        ssize_t got = read(fd, text + n, ZAP_KEY_FILE_MAX + 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            snprintf(why, whylen, "cannot be read: %s", strerror(errno));
            rc = -1;
            break;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    if (rc == 0 && n > ZAP_KEY_FILE_MAX) {
        snprintf(why, whylen, "holds more than %u bytes: not a key file", ZAP_KEY_FILE_MAX);
        rc = -1;
    }
    if (rc == 0 && first_key(text, n, key) < 0) {
        snprintf(why, whylen, "holds no Z85 key (a line of 40 characters)");
        rc = -1;
    }
    return rc;
}

int zap_key_read(const char *path, char key[ZAP_KEY_Z85 + 1], char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot be opened: %s", strerror(e));
        errno = e;
        return -1;
    }
    int rc = zap_key_read_fd(fd, key, why, whylen);
    close(fd);
    return rc;
}

int zap_key_parse(const char *text, char key[ZAP_KEY_Z85 + 1], char *why, size_t whylen)
{
    uint8_t raw[32];
    if (strlen(text) != ZAP_KEY_Z85 || !zmq_z85_decode(raw, text)) {
        snprintf(why, whylen, "'%s' is not a Z85 key (40 characters)", text);
        return -1;
    }
    if (access(text, F_OK) == 0) {
        snprintf(why, whylen, "'%s' names a file, not a key", text);
        return -1;
    }
    memcpy(key, text, ZAP_KEY_Z85 + 1);
    return 0;
}

int zap_key_option(const char *name, const char *inline_key, const char *file,
                   char key[ZAP_KEY_Z85 + 1], char *why, size_t whylen)
{
    char what[160];
    if (inline_key && file) {
        snprintf(why, whylen, "%s and %s-file are one setting: give one of them", name, name);
        return -1;
    }
    if (inline_key && zap_key_parse(inline_key, key, what, sizeof what) < 0) {
        snprintf(why, whylen, "%s: %s; for a key file use %s-file PATH", name, what, name);
        return -1;
    }
    if (file && zap_key_read(file, key, what, sizeof what) < 0) {
        snprintf(why, whylen, "%s-file: %s %s", name, file, what);
        return -1;
    }
    return inline_key || file ? 1 : 0;
}
