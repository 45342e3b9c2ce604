/* sup_frame: the worker's frames, dispatched by a table: each type's
 * fields, the rule of the worker's state it must fit (PROTOCOL.md 9, "What
 * the supervisor trusts"), its handler. A frame of a run kind (answer,
 * forked, fork_failed) goes to c->running->kind. */
#ifndef CTXD_SUP_FRAME_H
#define CTXD_SUP_FRAME_H

#include "sup_ctx.h"

/* One whole frame from c's worker: decoded, checked and handled, or the
 * worker killed for breaking the protocol (sup_chan_set_frames). */
void sup_frame_handle(sup_ctx *c, const uint8_t *body, size_t len);
/* Called after each run of an execute that ended `ok` (set by sup_snap.c
 * for autosnapshots; NULL: none). */
void sup_frame_set_after_ok(void (*fn)(sup_ctx *c));

#endif
