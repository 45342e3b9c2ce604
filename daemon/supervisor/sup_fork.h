/* sup_fork: the supervisor's half of ctx.fork, a run kind of sup_ctx. */
#ifndef CTXD_SUP_FORK_H
#define CTXD_SUP_FORK_H

#include "sup_ctx.h"

/* ctx.fork: queues the fork of src into a new context `name` behind src's
 * runs; the reply to peer comes when the copy is ready. */
void sup_ctx_fork(sup_ctx *src, const char *name, const sup_peer *peer);

#endif
