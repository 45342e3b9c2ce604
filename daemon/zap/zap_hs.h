/* zap_hs: failed CurveZMQ handshakes as a socket monitor (libzmq's
 * ZMQ_EVENT_HANDSHAKE_FAILED_*) tells of them, named, counted and said at
 * a bounded rate. Both daemons feed it the events of their CurveZMQ
 * sockets: ctxd and the router its clients' ROUTER, the router its DEALERs
 * to the hosts. */
#ifndef CTXD_ZAP_HS_H
#define CTXD_ZAP_HS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a handshake failed, as counted. */
enum {
    ZAP_HS_REFUSED,   /* the ZAP handler refused the client's key */
    ZAP_HS_WRONG_KEY, /* the CurveZMQ HELLO did not decrypt: wrong server key */
    ZAP_HS_PLAIN,     /* one side spoke plain text (NULL) to the other's CURVE */
    ZAP_HS_NO_DETAIL, /* the peer closed during the handshake, saying nothing */
    ZAP_HS_OTHER,     /* any other protocol error */
    ZAP_HS_NKINDS
};
extern const char *const zap_hs_kind_names[ZAP_HS_NKINDS];

#define ZAP_HS_PEERS 64 /* accepted connections whose address is kept */

typedef struct zap_hs {
    uint64_t failed[ZAP_HS_NKINDS];
    struct {
        int fd;
        char addr[64];
    } peers[ZAP_HS_PEERS]; /* fd -1: a free slot */
    int pending;           /* a failure waiting for its DISCONNECTED, or -1 */
    double pending_at;     /* when it was read */
    double window;         /* the start of the current second of logging */
    unsigned said, quiet;  /* lines said in it, and failures not said */
} zap_hs;

/* The events zap_hs_event understands, for zmq_socket_monitor. */
#define ZAP_HS_EVENTS                                                                              \
    (ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |          \
     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

void zap_hs_init(zap_hs *hs);

/* The kind of a failure event (event, its value), or -1 when the event is
 * no handshake failure. */
int zap_hs_kind(uint16_t event, uint32_t value);

/* What a kind means for an operator on the accepting side (server) or the
 * connecting side (client). */
const char *zap_hs_reason(int kind, bool server);

/* Feeds one monitor event of a listening socket. A failure is counted at
 * once; its line is written through say (a printf-like function) when the
 * connection's DISCONNECTED names its descriptor, with the peer's address
 * when its ACCEPTED was read while the connection was still open, and at
 * most ten lines a second (the rest are counted and their number said
 * next). Returns the failure's kind, or -1. */
int zap_hs_server_event(zap_hs *hs, uint16_t event, uint32_t value, const char *endpoint,
                        double now, void (*say)(const char *fmt, ...));

/* How long a failure waits for its DISCONNECTED (which libzmq sends right
 * after it) before it is said with its peer unknown. */
#define ZAP_HS_GRACE 1.0

/* Says a failure that has waited ZAP_HS_GRACE for its DISCONNECTED, its
 * peer unknown. Returns when to call again (monotonic; 0: nothing waits). */
double zap_hs_flush(zap_hs *hs, const char *endpoint, double now,
                    void (*say)(const char *fmt, ...));

/* Whether a line may be said now (the same rate limit), counting it. */
bool zap_hs_may_say(zap_hs *hs, double now);

/* Decodes a monitor message's first frame: event and value; false when
 * it is too short. */
bool zap_hs_decode(const void *data, size_t len, uint16_t *event, uint32_t *value);

#endif
