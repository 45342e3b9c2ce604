/* zap_hs: failed handshakes named, counted and said at a bounded rate. */
#include "zap_hs.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <zmq.h>

const char *const zap_hs_kind_names[ZAP_HS_NKINDS] = {"refused", "wrong_key", "plain", "no_detail",
                                                      "other"};

void zap_hs_init(zap_hs *hs)
{
    memset(hs, 0, sizeof *hs);
    for (size_t i = 0; i < ZAP_HS_PEERS; i++)
        hs->peers[i].fd = -1;
    hs->pending = -1;
}

bool zap_hs_decode(const void *data, size_t len, uint16_t *event, uint32_t *value)
{
    if (len < 6)
        return false;
    memcpy(event, data, 2);
    memcpy(value, (const uint8_t *)data + 2, 4);
    return true;
}

int zap_hs_kind(uint16_t event, uint32_t value)
{
    switch (event) {
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        return ZAP_HS_REFUSED;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        return ZAP_HS_NO_DETAIL;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
            return ZAP_HS_WRONG_KEY;
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
            return ZAP_HS_PLAIN;
        return ZAP_HS_OTHER;
    default:
        return -1;
    }
}

const char *zap_hs_reason(int kind, bool server)
{
    static const char *const srv[ZAP_HS_NKINDS] = {
        "ZAP refused the client's key (not in authorized_keys)",
        "wrong server key (the client's CurveZMQ HELLO did not decrypt with this server's key)",
        "plain text against CURVE (the client has no server key set)",
        "the client closed during the handshake (a plain-text client, one with no server key "
        "set, does so when it reads this server's CURVE greeting before it sent its own)",
        "CurveZMQ protocol error",
    };
    static const char *const cli[ZAP_HS_NKINDS] = {
        "ZAP refused (our public key is not in the peer's authorized_keys)",
        "wrong server key (or a peer that is no CurveZMQ server): the peer closed during the "
        "handshake",
        "plain text against CURVE (one side has no CurveZMQ keys)",
        "the peer closed during the handshake",
        "CurveZMQ protocol error",
    };
    if (kind < 0 || kind >= ZAP_HS_NKINDS)
        return "?";
    return server ? srv[kind] : cli[kind];
}

bool zap_hs_may_say(zap_hs *hs, double now)
{
    if (now - hs->window >= 1.0) {
        hs->window = now;
        hs->said = 0;
    }
    if (hs->said >= 10) {
        hs->quiet++;
        return false;
    }
    hs->said++;
    return true;
}

/* The address of the peer of fd, "" when it is none (closed already). */
static void peer_of(int fd, char *addr, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "";
    addr[0] = '\0';
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
        return;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(addr, len, "%s:%u", ip, ntohs(in->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        snprintf(addr, len, "[%s]:%u", ip, ntohs(in6->sin6_port));
    }
}

/* The slot of fd, or a free one when take (the oldest reused when full). */
static int slot_of(zap_hs *hs, int fd, bool take)
{
    int free_slot = -1;
    for (int i = 0; i < ZAP_HS_PEERS; i++) {
        if (hs->peers[i].fd == fd)
            return i;
        if (hs->peers[i].fd < 0 && free_slot < 0)
            free_slot = i;
    }
    if (!take)
        return -1;
    return free_slot >= 0 ? free_slot : fd % ZAP_HS_PEERS;
}

/* Says the pending failure with the peer of fd (-1: not known). */
static void say_pending(zap_hs *hs, int fd, const char *endpoint, double now,
                        void (*say)(const char *fmt, ...))
{
    int kind = hs->pending;
    hs->pending = -1;
    if (kind < 0 || kind == ZAP_HS_REFUSED) /* the ZAP handler said it, with the key */
        return;
    int s = fd >= 0 ? slot_of(hs, fd, false) : -1;
    const char *peer = s >= 0 && hs->peers[s].addr[0] ? hs->peers[s].addr : "unknown";
    if (!zap_hs_may_say(hs, now))
        return;
    unsigned quiet = hs->quiet;
    hs->quiet = 0;
    say("handshake failed on %s from peer %s: %s (%s)%s", endpoint, peer, zap_hs_reason(kind, true),
        zap_hs_kind_names[kind], quiet ? " [earlier failures not logged: rate limit]" : "");
}

int zap_hs_server_event(zap_hs *hs, uint16_t event, uint32_t value, const char *endpoint,
                        double now, void (*say)(const char *fmt, ...))
{
    if (event == ZMQ_EVENT_ACCEPTED) {
        int s = slot_of(hs, (int)value, true);
        hs->peers[s].fd = (int)value;
        peer_of((int)value, hs->peers[s].addr, sizeof hs->peers[s].addr);
        return -1;
    }
    if (event == ZMQ_EVENT_DISCONNECTED) {
        say_pending(hs, (int)value, endpoint, now, say);
        int s = slot_of(hs, (int)value, false);
        if (s >= 0)
            hs->peers[s].fd = -1;
        return -1;
    }
    int kind = zap_hs_kind(event, value);
    if (kind < 0)
        return -1;
    if (hs->pending >= 0)
        say_pending(hs, -1, endpoint, now, say);
    hs->failed[kind]++;
    hs->pending = kind;
    hs->pending_at = now;
    return kind;
}

double zap_hs_flush(zap_hs *hs, const char *endpoint, double now, void (*say)(const char *fmt, ...))
{
    if (hs->pending < 0)
        return 0;
    if (now - hs->pending_at < ZAP_HS_GRACE)
        return hs->pending_at + ZAP_HS_GRACE;
    say_pending(hs, -1, endpoint, now, say);
    return 0;
}
