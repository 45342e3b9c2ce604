/* sup_reap: what ends on time: contexts idle past --idle-ttl, leases not
 * renewed, and each timed context's timers (a run's deadline and CPU
 * budget, a kill time, a channel stalled in a frame, messages held for a
 * slow client). */
#ifndef CTXD_SUP_REAP_H
#define CTXD_SUP_REAP_H

#include "sup_ctx.h"

/* Gives c a lease of seconds from now (0: none): deleted once no request
 * names it for that long (sup_life_lookup renews it). */
void sup_reap_set_lease(sup_ctx *c, double seconds);
/* Periodic work: the sweeps and timers; returns the next deadline
 * (monotonic), 0 = none. */
double sup_reap_tick(double now);

#endif
