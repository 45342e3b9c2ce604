/* sup_reqctx: the requests on contexts themselves (PROTOCOL.md): ctx.create,
 * pip.install, ctx.list, ctx.delete, ctx.renew, ctx.info, ctx.restart and
 * ctx.fork; fields checked by sup_request.c. */
#ifndef CTXD_SUP_REQCTX_H
#define CTXD_SUP_REQCTX_H

#include "proto.h"
#include "sup_peer.h"

void sup_reqctx_create(const proto_val *msg, const sup_peer *peer);
void sup_reqctx_pip_install(const proto_val *msg, const sup_peer *peer);
void sup_reqctx_list(const proto_val *msg, const sup_peer *peer);
void sup_reqctx_delete(const proto_val *msg, const sup_peer *peer);
void sup_reqctx_renew(const proto_val *msg, const sup_peer *peer);
void sup_reqctx_info(const proto_val *msg, const sup_peer *peer);
void sup_reqctx_restart(const proto_val *msg, const sup_peer *peer);
void sup_reqctx_fork(const proto_val *msg, const sup_peer *peer);

#endif
