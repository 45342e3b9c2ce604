/* rt_etcd: a small non-blocking client of etcd's v3 JSON gateway
 * (POST /v3/kv/put, /v3/kv/range, /v3/kv/deleterange) over one HTTP/1.1
 * keep-alive connection to a loopback address. Requests go one at a time,
 * in order; a broken connection is made again and the request at the head
 * resent (a put or delete is idempotent). Nothing here blocks: the loop
 * calls rt_etcd_io on each turn and watches rt_etcd_fd. */
#include "rt_etcd.h"

#include "proto.h"
#include "rt_base.h"

#include "mem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_QUEUE 200000
#define MAX_RESPONSE (64u << 20)

typedef struct ereq {
    struct ereq *next;
    proto_buf http;
    rt_etcd_cb cb;
    void *arg;
} ereq;

static struct sockaddr_in addr;
static bool on;
static int fd = -1;
static bool connected;
static size_t sent; /* bytes of the head request written */
static proto_buf in;
static ereq *head, *tail;
static size_t queued;
static double retry_at;
static char hostport[64];

bool rt_etcd_on(void)
{
    return on;
}

/* Parses http://IP:PORT (loopback or any IPv4 address: no name lookup,
 * which would block). */
void rt_etcd_open(const char *url)
{
    char ip[48];
    unsigned port;
    if (sscanf(url, "http://%47[0-9.]:%u", ip, &port) != 2 || port > 65535 ||
        inet_pton(AF_INET, ip, &addr.sin_addr) != 1)
        fatal("--etcd %s: give http://IPV4:PORT", url);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    snprintf(hostport, sizeof hostport, "%s:%u", ip, port);
    proto_buf_init(&in);
    on = true;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void put_b64(proto_buf *b, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        char q[4] = {b64[v >> 18 & 63], b64[v >> 12 & 63], i + 1 < n ? b64[v >> 6 & 63] : '=',
                     i + 2 < n ? b64[v & 63] : '='};
        proto_buf_append(b, q, 4);
    }
}

/* Decodes base64 in place-safe into out (at most n*3/4 bytes). */
static size_t get_b64(const char *s, size_t n, uint8_t *out)
{
    uint32_t v = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < n && s[i] != '='; i++) {
        const char *p = memchr(b64, s[i], 64);
        if (!p)
            continue;
        v = v << 6 | (uint32_t)(p - b64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(v >> bits);
        }
    }
    return o;
}

static void enqueue(const char *path, const proto_buf *json, rt_etcd_cb cb, void *arg)
{
    if (queued >= MAX_QUEUE) {
        rt_log("etcd: %zu requests queued: dropping one (%s)", queued, path);
        return;
    }
    ereq *r = mem_calloc(1, sizeof *r);
    char head_text[256];
    int hn = snprintf(head_text, sizeof head_text,
                      "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      path, hostport, json->len);
    proto_buf_append(&r->http, head_text, (size_t)hn);
    proto_buf_append(&r->http, json->data, json->len);
    r->cb = cb;
    r->arg = arg;
    if (tail)
        tail->next = r;
    else
        head = r;
    tail = r;
    queued++;
}

static void json_key(proto_buf *j, const char *name, const void *p, size_t n)
{
    char t[32];
    snprintf(t, sizeof t, "\"%s\":\"", name);
    proto_buf_append(j, t, strlen(t));
    put_b64(j, p, n);
    proto_buf_append(j, "\"", 1);
}

void rt_etcd_put(const char *key, const void *val, size_t n)
{
    proto_buf j;
    proto_buf_init(&j);
    proto_buf_append(&j, "{", 1);
    json_key(&j, "key", key, strlen(key));
    proto_buf_append(&j, ",", 1);
    json_key(&j, "value", val, n);
    proto_buf_append(&j, "}", 1);
    enqueue("/v3/kv/put", &j, NULL, NULL);
    proto_buf_free(&j);
}

void rt_etcd_del(const char *key)
{
    proto_buf j;
    proto_buf_init(&j);
    proto_buf_append(&j, "{", 1);
    json_key(&j, "key", key, strlen(key));
    proto_buf_append(&j, "}", 1);
    enqueue("/v3/kv/deleterange", &j, NULL, NULL);
    proto_buf_free(&j);
}

void rt_etcd_range(const char *key, bool prefix, rt_etcd_cb cb, void *arg)
{
    proto_buf j;
    proto_buf_init(&j);
    proto_buf_append(&j, "{", 1);
    size_t n = strlen(key);
    json_key(&j, "key", key, n);
    if (prefix && n > 0) { /* range_end: the key with its last byte + 1 */
        char end[256];
        memcpy(end, key, n < sizeof end ? n : sizeof end - 1);
        end[n - 1]++;
        proto_buf_append(&j, ",", 1);
        json_key(&j, "range_end", end, n);
    }
    proto_buf_append(&j, "}", 1);
    enqueue("/v3/kv/range", &j, cb, arg);
    proto_buf_free(&j);
}

/* Finds each "key":"B64" ... "value":"B64" pair of a range response. */
void rt_etcd_kvs(const char *json, size_t len,
                 void (*fn)(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn),
                 void *arg)
{
    const char *p = json, *end = json + len;
    const char *kvs = memmem(p, len, "\"kvs\"", 5);
    if (!kvs)
        return;
    p = kvs;
    for (;;) {
        const char *k = memmem(p, (size_t)(end - p), "\"key\":\"", 7);
        if (!k)
            return;
        k += 7;
        const char *ke = memchr(k, '"', (size_t)(end - k));
        if (!ke)
            return;
        const char *v = memmem(ke, (size_t)(end - ke), "\"value\":\"", 9);
        const char *nextk = memmem(ke, (size_t)(end - ke), "\"key\":\"", 7);
        const char *ve = NULL;
        if (v && (!nextk || v < nextk)) {
            v += 9;
            ve = memchr(v, '"', (size_t)(end - v));
        }
        uint8_t *kb = mem_alloc((size_t)(ke - k) + 4);
        size_t kn = get_b64(k, (size_t)(ke - k), kb);
        uint8_t *vb = NULL;
        size_t vn = 0;
        if (ve) {
            vb = mem_alloc((size_t)(ve - v) + 4);
            vn = get_b64(v, (size_t)(ve - v), vb);
        }
        fn(arg, kb, kn, vb ? vb : (const uint8_t *)"", vn);
        free(kb);
        free(vb);
        p = ve ? ve : ke;
    }
}

static void drop_conn(const char *why)
{
    if (fd >= 0) {
        rt_log("etcd: connection lost (%s): retrying", why);
        close(fd);
    }
    fd = -1;
    connected = false;
    sent = 0;
    in.len = 0;
    retry_at = rt_now() + 0.2;
}

/* A complete response at the start of `in`: its body and total length;
 * 0 when more bytes are needed, -1 when it cannot be read. */
static int parse_response(const char **body, size_t *blen, size_t *total, int *status)
{
    const char *d = (const char *)in.data;
    const char *hend = memmem(d, in.len, "\r\n\r\n", 4);
    if (!hend)
        return in.len > 65536 ? -1 : 0;
    size_t hlen = (size_t)(hend - d) + 4;
    if (sscanf(d, "HTTP/1.%*d %d", status) != 1)
        return -1;
    const char *cl = memmem(d, hlen, "Content-Length:", 15);
    if (!cl)
        cl = memmem(d, hlen, "content-length:", 15);
    if (cl) {
        size_t n = strtoul(cl + 15, NULL, 10);
        if (n > MAX_RESPONSE)
            return -1;
        if (in.len < hlen + n)
            return 0;
        *body = d + hlen;
        *blen = n;
        *total = hlen + n;
        return 1;
    }
    /* chunked: the whole body ends with a 0-size chunk */
    const char *z = memmem(d + hlen, in.len - hlen, "\r\n0\r\n\r\n", 7);
    if (!z)
        return in.len > MAX_RESPONSE ? -1 : 0;
    /* One chunk is what the gateway sends for these small answers. */
    const char *first = d + hlen;
    const char *nl = memmem(first, in.len - hlen, "\r\n", 2);
    *body = nl + 2;
    *blen = strtoul(first, NULL, 16);
    *total = (size_t)(z - d) + 7;
    return 1;
}

/* Connects, writes the head request, reads its answer: as far as each
 * goes without blocking. */
void rt_etcd_io(void)
{
    if (!on || !head)
        return;
    if (fd < 0) {
        if (rt_now() < retry_at)
            return;
        fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) {
            drop_conn(strerror(errno));
            return;
        }
    }
    if (!connected) {
        int e = 0;
        socklen_t el = sizeof e;
        struct sockaddr_in peer;
        socklen_t pl = sizeof peer;
        if (getpeername(fd, (struct sockaddr *)&peer, &pl) < 0) {
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
            if (e && e != EINPROGRESS)
                drop_conn(strerror(e));
            return;
        }
        connected = true;
    }
    for (int budget = 0; head && budget < 1024; budget++) {
        while (sent < head->http.len) {
            ssize_t n = send(fd, head->http.data + sent, head->http.len - sent, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno != EAGAIN)
                    drop_conn(strerror(errno));
                return;
            }
            sent += (size_t)n;
        }
        for (;;) {
            proto_buf_reserve(&in, 65536);
            ssize_t n = recv(fd, in.data + in.len, 65536, 0);
            if (n == 0) {
                drop_conn("closed by etcd");
                return;
            }
            if (n < 0) {
                if (errno != EAGAIN)
                    drop_conn(strerror(errno));
                break;
            }
            in.len += (size_t)n;
        }
        const char *body;
        size_t blen, total;
        int status = 0;
        int rc = parse_response(&body, &blen, &total, &status);
        if (rc < 0) {
            drop_conn("unreadable response");
            return;
        }
        if (rc == 0)
            return;
        ereq *r = head;
        if (status != 200)
            rt_log("etcd: HTTP %d: %.*s", status, (int)(blen > 200 ? 200 : blen), body);
        if (r->cb)
            r->cb(r->arg, status == 200 ? body : "", status == 200 ? blen : 0);
        proto_buf_consume(&in, total);
        head = r->next;
        if (!head)
            tail = NULL;
        queued--;
        sent = 0;
        proto_buf_free(&r->http);
        free(r);
    }
}

int rt_etcd_fd(uint32_t *events)
{
    *events = 0;
    if (fd < 0 || !head)
        return -1;
    *events = (!connected || sent < head->http.len) ? 0x004 /* EPOLLOUT */ : 0x001 /* EPOLLIN */;
    return fd;
}

bool rt_etcd_busy(void)
{
    return on && head != NULL;
}
