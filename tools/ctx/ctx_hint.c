/* Hints for the command line's common mistakes: the endpoint a string
 * without a ZeroMQ scheme was probably meant to be, and the command name a
 * mistyped one is closest to. Pure text, no I/O. */
#include "ctx.h"

#include <stdio.h>
#include <string.h>

const char *ctx_hint_endpoint(const char *ep, char *buf, size_t n)
{
    static const char *const tcp_like[] = {"http://", "https://", "zmq://", "tcp:/"};
    static const char *const ipc_like[] = {"unix://", "file://", "unix:", "ipc:/"};
    if (!ep || !*ep || strncmp(ep, "ipc://", 6) == 0 || strncmp(ep, "tcp://", 6) == 0 ||
        strncmp(ep, "inproc://", 9) == 0)
        return NULL;
    for (size_t i = 0; i < sizeof tcp_like / sizeof *tcp_like; i++) {
        size_t k = strlen(tcp_like[i]);
        if (strncmp(ep, tcp_like[i], k) == 0) {
            const char *host = ep + k;
            size_t len = strcspn(host, "/"); /* host:port, without a path */
            snprintf(buf, n, "tcp://%.*s", (int)len, host);
            return buf;
        }
    }
    for (size_t i = 0; i < sizeof ipc_like / sizeof *ipc_like; i++) {
        size_t k = strlen(ipc_like[i]);
        if (strncmp(ep, ipc_like[i], k) == 0) {
            const char *path = ep + k;
            snprintf(buf, n, "ipc://%s%s", path[0] == '/' ? "" : "/", path);
            return buf;
        }
    }
    if (strstr(ep, "://"))
        return NULL; /* another scheme: nothing to guess */
    const char *colon = strrchr(ep, ':');
    if (ep[0] != '/' && ep[0] != '.' && colon && colon[1] >= '0' && colon[1] <= '9' &&
        strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
        snprintf(buf, n, "tcp://%s", ep); /* host:port */
        return buf;
    }
    snprintf(buf, n, "ipc://%s", ep); /* a socket's path */
    return buf;
}

/* Edit distance of a and b, an adjacent transposition counting as one
 * edit; words longer than 63 bytes count as far apart. */
static size_t distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63)
        return 64;
    size_t d[64][64];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

const char *ctx_hint_command(const char *word, const ctx_cmd *table, size_t count)
{
    const char *best = NULL;
    size_t best_d = 64;
    for (size_t i = 0; i < count; i++) {
        const ctx_cmd *c = &table[i];
        for (size_t a = 0;; a++) {
            const char *name = a == 0 ? c->name : c->aliases ? c->aliases[a - 1] : NULL;
            if (!name)
                break;
            size_t d = distance(word, name);
            if (d < best_d) {
                best_d = d;
                best = c->name;
            }
        }
    }
    size_t len = strlen(word), limit = len <= 3 ? 1 : 2;
    return best && best_d <= limit && best_d < len ? best : NULL;
}
