/* sup_spare: spare workers (--spare-workers, PROTOCOL.md 9.3a): hidden
 * contexts forked ahead of time and warmed up, which ctx.create takes for
 * a context of the default tier. */
#ifndef CTXD_SUP_SPARE_H
#define CTXD_SUP_SPARE_H

#include "sup_ctx.h"
#include "sup_ident.h"
#include "sup_policy.h"

/* Background work (sup_loop.c's table): whether a spare is to be asked of
 * the zygote now; asks for spares until --spare-workers are alive or
 * coming (returns 0). */
bool sup_spare_due(double now);
double sup_spare_fill(double now);
/* The spare to take (a ready one, else the oldest), out of the spares;
 * NULL when none. */
sup_ctx *sup_spare_take(void);
/* Makes the taken spare c the context `name`: its `bind` frame goes ahead
 * of any run (written at the next tick). The caller links it into the
 * table; true when its PSS figure is still good (then not first to read). */
bool sup_spare_bind(sup_ctx *c, const char *name, const char *cwd, sup_ident *ident,
                    sup_policy *policy);
/* A spare's worker died or the daemon stops: what is left is killed and
 * freed at the next tick; refilling waits a second. */
void sup_spare_drop(sup_ctx *c);
/* Periodic work: writes the bind frames left by sup_spare_bind; returns
 * when the pause after a take ends, 0 = nothing timed. */
double sup_spare_tick(double now);
/* Drops every spare; none is made after. */
void sup_spare_shutdown(void);

#endif
