/* sup_snapfiles: ctx.snapshots, ctx.snapshot_delete, ctx.snapshot_export
 * and ctx.snapshot_import (PROTOCOL.md section 5), each answering peer. */
#ifndef CTXD_SUP_SNAPFILES_H
#define CTXD_SUP_SNAPFILES_H

#include "proto.h"
#include "sup_peer.h"

void sup_snapfiles_list(const proto_val *msg, const sup_peer *peer);
void sup_snapfiles_delete(const proto_val *msg, const sup_peer *peer);
/* ctx.snapshot_export: a copy in STATE_DIR/exports/CTX/NAME tagged under
 * the operator's STATE_DIR/export.key; ctx.snapshot_import: such a file
 * in STATE_DIR/imports/CTX/NAME, checked with that key, made snapshot
 * CTX/NAME under the daemon's own key (the writer's tier kept). */
void sup_snapfiles_export(const proto_val *msg, const sup_peer *peer);
void sup_snapfiles_import(const proto_val *msg, const sup_peer *peer);

#endif
