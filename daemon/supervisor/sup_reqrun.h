/* sup_reqrun: execute, interrupt and input.reply, the requests on a
 * context's runs (PROTOCOL.md); fields checked by sup_request.c. */
#ifndef CTXD_SUP_REQRUN_H
#define CTXD_SUP_REQRUN_H

#include "proto.h"
#include "sup_peer.h"

void sup_reqrun_execute(const proto_val *msg, const sup_peer *peer);
void sup_reqrun_interrupt(const proto_val *msg, const sup_peer *peer);
void sup_reqrun_input_reply(const proto_val *msg, const sup_peer *peer);

#endif
