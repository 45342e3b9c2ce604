/* sup_reqdaemon: `hello` and `stats`, the requests about the daemon itself
 * (PROTOCOL.md); each answers peer. Fields checked by sup_request.c. */
#ifndef CTXD_SUP_REQDAEMON_H
#define CTXD_SUP_REQDAEMON_H

#include "proto.h"
#include "sup_peer.h"

void sup_reqdaemon_hello(const proto_val *msg, const sup_peer *peer);
void sup_reqdaemon_stats(const proto_val *msg, const sup_peer *peer);

#endif
