/* sup_route: binds each CurveZMQ routing id to the connection, and so the
 * client key, that sent a request. ZeroMQ lets a new connection take over
 * the routing id of one that dropped (a client may choose its own id); the
 * messages of the first connection's requests must not reach it. Each
 * message received on the CurveZMQ socket records its routing id's current
 * connection: the key the ZAP handler authenticated ("User-Id") and the
 * connection's descriptor, numbered by a generation that changes whenever
 * the pair changes; a socket monitor marks a connection dead the moment it
 * drops. A request remembers the generation it came in on (sup_peer.conn),
 * and a message for it goes out only while that generation is the live
 * binding of its routing id: otherwise it is dropped and counted
 * (`route_dropped`; the run finishes, or is interrupted under
 * --on-disconnect interrupt). A client that reconnects with the same key
 * and id after messages were dropped gets one `gap` message (PROTOCOL.md
 * section 7) before its first reply.
 *
 * The socket keeps libzmq's default (no ZMQ_ROUTER_HANDOVER): a connection
 * that brings a routing id still bound to a live connection is ignored by
 * libzmq until it reconnects, so a live client can never be pushed off its
 * id, and a newcomer never receives what the live one's runs still send
 * before its first message rebinds the id. The `disconnects` counter lets a
 * client see that its old connection is gone before it reuses the id. */
#include "sup_route.h"

#include "sup_hsmon.h"
#include "sup_peer.h"
#include "sup_stats.h"

#include "mem.h"

#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define NBUCKETS 4096
#define ROUTES_MAX 65536 /* bindings kept; dead ones go first when full */

typedef struct binding {
    struct binding *next;
    uint8_t route[SUP_ROUTE_MAX];
    size_t route_len;
    char key[41]; /* Z85 public key, "" when unknown */
    int fd;
    uint32_t gen;
    bool alive;
    uint64_t dropped; /* messages of this generation dropped since it died */
} binding;

static binding *buckets[NBUCKETS];
static size_t nbindings;
static uint32_t next_gen = 1;
static void *monitor;

static size_t bucket_of(const uint8_t *route, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ route[i]) * 1099511628211ull;
    return (size_t)(h % NBUCKETS);
}

static binding *find(const uint8_t *route, size_t len)
{
    for (binding *b = buckets[bucket_of(route, len)]; b; b = b->next)
        if (b->route_len == len && memcmp(b->route, route, len) == 0)
            return b;
    return NULL;
}

/* Frees the dead bindings (when the table is full): a request whose
 * binding is gone is treated as one whose connection dropped. */
static void evict_dead(void)
{
    for (size_t i = 0; i < NBUCKETS; i++) {
        binding **pp = &buckets[i];
        while (*pp) {
            binding *b = *pp;
            if (!b->alive) {
                *pp = b->next;
                free(b);
                nbindings--;
            } else {
                pp = &b->next;
            }
        }
    }
}

int sup_route_open(void *zctx, void *curve_router)
{
    if (zmq_socket_monitor(curve_router, "inproc://ctxd-route-monitor",
                           ZMQ_EVENT_DISCONNECTED | sup_hsmon_events()) < 0)
        return -1;
    monitor = zmq_socket(zctx, ZMQ_PAIR);
    int zero = 0;
    zmq_setsockopt(monitor, ZMQ_LINGER, &zero, sizeof zero);
    return zmq_connect(monitor, "inproc://ctxd-route-monitor");
}

void *sup_route_monitor(void)
{
    return monitor;
}

void sup_route_on_monitor(void)
{
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (!monitor || zmq_msg_recv(&ev, monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t num = 0;
        int32_t fd = -1;
        if (zmq_msg_size(&ev) >= 6) { /* 16-bit event, 32-bit value (the fd) */
            memcpy(&num, zmq_msg_data(&ev), 2);
            memcpy(&fd, (const uint8_t *)zmq_msg_data(&ev) + 2, 4);
        }
        char endpoint[128] = "";
        while (zmq_msg_more(&ev) && zmq_msg_recv(&ev, monitor, ZMQ_DONTWAIT) >= 0) {
            size_t n =
                zmq_msg_size(&ev) < sizeof endpoint - 1 ? zmq_msg_size(&ev) : sizeof endpoint - 1;
            memcpy(endpoint, zmq_msg_data(&ev), n);
            endpoint[n] = '\0';
        }
        zmq_msg_close(&ev);
        sup_hsmon_event(num, (uint32_t)fd, endpoint);
        if (num != ZMQ_EVENT_DISCONNECTED)
            continue;
        sup_stats.disconnects++;
        for (size_t i = 0; i < NBUCKETS; i++)
            for (binding *b = buckets[i]; b; b = b->next)
                if (b->alive && b->fd == fd)
                    b->alive = false;
    }
}

uint32_t sup_route_note(const uint8_t *route, size_t len, void *zmsg, bool *gap,
                        uint64_t *gap_dropped)
{
    zmq_msg_t *msg = zmsg;
    *gap = false;
    if (len > SUP_ROUTE_MAX)
        return 0;
    sup_route_on_monitor(); /* a drop seen before this message is applied first */
    const char *key = zmq_msg_gets(msg, "User-Id");
    int fd = zmq_msg_get(msg, ZMQ_SRCFD);
    if (!key)
        key = "";
    binding *b = find(route, len);
    if (b && b->alive && b->fd == fd && strcmp(b->key, key) == 0)
        return b->gen;
    if (!b) {
        if (nbindings >= ROUTES_MAX)
            evict_dead();
        b = mem_calloc(1, sizeof *b);
        memcpy(b->route, route, len);
        b->route_len = len;
        size_t k = bucket_of(route, len);
        b->next = buckets[k];
        buckets[k] = b;
        nbindings++;
    } else if (strcmp(b->key, key) == 0 && b->dropped > 0) {
        /* The same client back on a new connection: it lost messages. */
        *gap = true;
        *gap_dropped = b->dropped;
    }
    snprintf(b->key, sizeof b->key, "%s", key);
    b->fd = fd;
    b->alive = true;
    b->dropped = 0;
    b->gen = next_gen++;
    if (next_gen == 0)
        next_gen = 1;
    return b->gen;
}

uint32_t sup_route_current(const uint8_t *route, size_t len)
{
    binding *b = find(route, len);
    return b && b->alive ? b->gen : 0;
}

bool sup_route_ok(const sup_peer *peer)
{
    if (peer->sock != 1)
        return true; /* ipc and plain tcp: the file system or nothing guards them */
    sup_route_on_monitor();
    binding *b = find(peer->route, peer->route_len);
    if (b && b->alive && b->gen == peer->conn)
        return true;
    sup_stats.route_dropped++;
    /* Counted for a reconnect of the same client (its gap message). */
    if (b && (b->gen == peer->conn || !b->alive))
        b->dropped++;
    return false;
}
