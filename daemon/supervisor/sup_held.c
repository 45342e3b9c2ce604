/* sup_held: the bytes the daemon holds for clients that are not reading
 * (messages queued behind a full client queue), per client and in total,
 * so both can be bounded (--max-client-held, --max-held) and reported
 * (stats `held_bytes`). A client is known by its listening socket and
 * routing id; it has an entry only while something is held for it. */
#include "sup_held.h"

#include "sup_config.h"
#include "sup_peer.h"

#include "mem.h"

#include <stdlib.h>
#include <string.h>

#define NBUCKETS 1024

typedef struct held_entry {
    struct held_entry *next;
    uint8_t sock;
    uint8_t route_len;
    uint8_t route[SUP_ROUTE_MAX];
    size_t bytes;
} held_entry;

static held_entry *buckets[NBUCKETS];
static size_t total, peak;

/* FNV-1a over the socket and routing id. */
static size_t bucket_of(const sup_peer *p)
{
    uint32_t h = 2166136261u ^ p->sock;
    for (size_t i = 0; i < p->route_len; i++)
        h = (h ^ p->route[i]) * 16777619u;
    return h % NBUCKETS;
}

/* The entry of p's client (made when make), else NULL; *link is where it
 * hangs, for removal. */
static held_entry *find(const sup_peer *p, bool make, held_entry ***link)
{
    held_entry **l = &buckets[bucket_of(p)];
    for (; *l; l = &(*l)->next) {
        held_entry *e = *l;
        if (e->sock == p->sock && e->route_len == p->route_len &&
            memcmp(e->route, p->route, p->route_len) == 0) {
            *link = l;
            return e;
        }
    }
    if (!make)
        return NULL;
    held_entry *e = mem_calloc(1, sizeof *e);
    e->sock = p->sock;
    e->route_len = (uint8_t)p->route_len;
    memcpy(e->route, p->route, p->route_len);
    e->next = buckets[bucket_of(p)];
    buckets[bucket_of(p)] = e;
    *link = &buckets[bucket_of(p)];
    return e;
}

/* A message of n bytes is now held for p's client. */
void sup_held_add(const sup_peer *p, size_t n)
{
    held_entry **link;
    find(p, true, &link)->bytes += n;
    total += n;
    if (total > peak)
        peak = total;
}

/* A held message of n bytes went out (or was dropped). */
void sup_held_sub(const sup_peer *p, size_t n)
{
    held_entry **link;
    held_entry *e = find(p, false, &link);
    if (!e)
        return;
    size_t k = n < e->bytes ? n : e->bytes;
    e->bytes -= k;
    total -= k < total ? k : total;
    if (e->bytes == 0) {
        *link = e->next;
        free(e);
    }
}

/* Bytes held for p's client. */
size_t sup_held_client(const sup_peer *p)
{
    held_entry **link;
    held_entry *e = find(p, false, &link);
    return e ? e->bytes : 0;
}

/* Bytes held for all clients, now and at most (stats held_bytes). */
size_t sup_held_total(void)
{
    return total;
}

/* The most ever held at once. */
size_t sup_held_peak(void)
{
    return peak;
}

/* Whether p's client (or the daemon) holds as much as it may. */
bool sup_held_over(const sup_peer *p)
{
    return total >= sup_cfg.max_held || sup_held_client(p) >= sup_cfg.max_client_held;
}
