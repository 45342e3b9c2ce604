/* sup_query: complete, inspect, is_complete, a run kind of sup_ctx. */
#ifndef CTXD_SUP_QUERY_H
#define CTXD_SUP_QUERY_H

#include "sup_ctx.h"

/* Request handlers: checked and queued on the context like an execute. */
void sup_query_complete(const proto_val *msg, const sup_peer *peer);
void sup_query_inspect(const proto_val *msg, const sup_peer *peer);
void sup_query_is_complete(const proto_val *msg, const sup_peer *peer);

#endif
