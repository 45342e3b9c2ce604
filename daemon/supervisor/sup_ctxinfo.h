/* sup_ctxinfo: what a context says of itself: its state, the `ctx` map of
 * replies, the counts of `stats`, and the answers to the requests waiting
 * for its worker's `ready`. */
#ifndef CTXD_SUP_CTXINFO_H
#define CTXD_SUP_CTXINFO_H

#include "sup_ctx.h"

/* "dead", "busy" or "idle". */
const char *sup_ctxinfo_state(const sup_ctx *c);
/* The `ctx` map of a reply (name, state, pid, memory, policy...). */
void sup_ctxinfo_put(proto_buf *b, sup_ctx *c);
/* Live contexts, those running something, runs queued (stats). */
void sup_ctxinfo_counts(size_t *live, size_t *busy, size_t *queued);
/* A request waits for c's `ready`: answered ok (with the `ctx` map) at
 * once when it came already, else by sup_ctxinfo_reply_ok or _err. */
void sup_ctxinfo_add_waiter(sup_ctx *c, const sup_peer *peer);
void sup_ctxinfo_reply_ok(sup_ctx *c);
void sup_ctxinfo_reply_err(sup_ctx *c, const char *code, const char *why);

#endif
