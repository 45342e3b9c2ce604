/* sup_ctxinfo: what a context says of itself: its state, the `ctx` map of
 * replies, the counts of `stats`, and the answers to the requests waiting
 * for its worker's `ready`. */
#include "sup_ctxinfo.h"

#include "sup_ctxpss.h"
#include "sup_policy.h"
#include "sup_send.h"

#include "mem.h"

#include <stdlib.h>

const char *sup_ctxinfo_state(const sup_ctx *c)
{
    if (c->pid == 0 && !c->spawning)
        return "dead";
    return c->running ? "busy" : "idle";
}

void sup_ctxinfo_put(proto_buf *b, sup_ctx *c)
{
    uint64_t rss, pss;
    sup_ctxpss_info(c, &rss, &pss);
    proto_map m = proto_map_open(b);
    proto_key(b, &m, "name");
    proto_put_str(b, c->name);
    proto_key(b, &m, "cwd");
    proto_put_str(b, c->cwd);
    proto_key(b, &m, "state");
    proto_put_str(b, sup_ctxinfo_state(c));
    proto_key(b, &m, "pid");
    proto_put_uint(b, (uint64_t)c->pid);
    proto_key(b, &m, "incarnation");
    proto_put_uint(b, c->incarnation);
    proto_key(b, &m, "created");
    proto_put_double(b, c->created);
    proto_key(b, &m, "execution_count");
    proto_put_uint(b, c->execution_count);
    proto_key(b, &m, "queued");
    proto_put_uint(b, c->run.queued);
    proto_key(b, &m, "rss");
    proto_put_uint(b, rss);
    proto_key(b, &m, "pss");
    proto_put_uint(b, pss);
    proto_key(b, &m, "tier");
    proto_put_str(b, sup_policy_tier_name(c->policy));
    proto_key(b, &m, "policy");
    sup_policy_put(b, c->policy);
    if (c->last_death) {
        proto_key(b, &m, "last_death");
        proto_put_str(b, c->last_death);
    }
    if (c->lease > 0) {
        proto_key(b, &m, "lease");
        proto_put_double(b, c->lease);
    }
    proto_map_close(b, &m);
}

void sup_ctxinfo_counts(size_t *live, size_t *busy, size_t *queued)
{
    *live = *busy = *queued = 0;
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next) {
        (*live)++;
        *busy += c->running != NULL;
        *queued += c->run.queued;
    }
}

void sup_ctxinfo_reply_ok(sup_ctx *c)
{
    sup_waiter *w;
    while ((w = c->waiters) != NULL) {
        c->waiters = w->next;
        proto_buf b;
        proto_buf_init(&b);
        sup_msg_begin(&b, "ok", &w->peer, 1);
        proto_put_str(&b, "ctx");
        sup_ctxinfo_put(&b, c);
        sup_deliver(&w->peer, &b);
        proto_buf_free(&b);
        free(w);
    }
}

void sup_ctxinfo_reply_err(sup_ctx *c, const char *code, const char *why)
{
    sup_waiter *w;
    while ((w = c->waiters) != NULL) {
        c->waiters = w->next;
        sup_reply_err(&w->peer, code, "%s", why);
        free(w);
    }
}

void sup_ctxinfo_add_waiter(sup_ctx *c, const sup_peer *peer)
{
    sup_waiter *w = mem_calloc(1, sizeof *w);
    w->peer = *peer;
    sup_waiter **tail = &c->waiters;
    while (*tail)
        tail = &(*tail)->next;
    *tail = w;
    if (c->ready)
        sup_ctxinfo_reply_ok(c);
}
