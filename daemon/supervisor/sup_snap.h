/* sup_snap: snapshots of a context's Python state (PROTOCOL.md section 5,
 * ctx.snapshot): ctx.snapshot, ctx.restore, ctx.create from_snapshot
 * and autosnapshot (the files themselves: sup_snapfiles.h). The
 * files live in STATE_DIR/snapshots/CTX/NAME, opened by descriptor; the
 * context's worker writes and reads them through a descriptor it is
 * given (the unpickling runs inside its tier). */
#ifndef CTXD_SUP_SNAP_H
#define CTXD_SUP_SNAP_H

#include "proto.h"
#include "sup_ctx.h"
#include "sup_peer.h"

/* The requests (sup_request.c's table; fields checked by it). */
void sup_snap_request(const proto_val *msg, const sup_peer *peer);
void sup_snap_restore_request(const proto_val *msg, const sup_peer *peer);

/* ctx.create from_snapshot: opens the snapshot named by id (a str value)
 * before the context is made; its descriptor, or -1 after replying `err`. */
int sup_snap_open_for_create(const proto_val *id, const sup_peer *peer);
/* The new context c restores the snapshot on fd (taken) before anything
 * else; the `ok {ctx}` (or the `err`, and c deleted) comes once it has. */
void sup_snap_create_restore(sup_ctx *c, int fd, const char *id, const sup_peer *peer);
/* ctx.create `autosnapshot`: "run" or seconds (>= 1); 0 = off, < 0 after
 * each run; -2 when v is not valid (after replying `err`). NULL: off. */
double sup_snap_parse_auto(const proto_val *v, const sup_peer *peer);

/* At start, after sup_persist_restore: every context with autosnapshot
 * whose last autosnapshot is on disk restores it first. */
void sup_snap_resume_all(void);
/* Interval autosnapshots that came due; the next deadline (monotonic),
 * 0 = none. Called by the loop each turn. */
double sup_snap_tick(double now);
/* Wires the after-run hook (sup_frame_set_after_ok). */
void sup_snap_init(void);

#endif
