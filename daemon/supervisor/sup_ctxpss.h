/* sup_ctxpss: each worker's PSS figure, cached in its context (c->pss),
 * read on sup_pss's thread in the clients' pauses and by INFO within a
 * budget. */
#ifndef CTXD_SUP_CTXPSS_H
#define CTXD_SUP_CTXPSS_H

#include "sup_ctx.h"

/* c's figure is out of date (a new worker, a run ended): first for the
 * background reads. */
void sup_ctxpss_want(sup_ctx *c);
/* Has c's figure read on the sup_pss thread (a dead worker's, 0, at once);
 * false when no slot is free: ask again later. */
bool sup_ctxpss_ask(sup_ctx *c, double now);
/* Takes the figures the sup_pss thread read (the loop calls it when
 * sup_pss_start's descriptor is readable). */
void sup_ctxpss_collect(void);
/* How long INFO may spend re-reading stale figures from now on: 0 lifts
 * the bound (one context's INFO always reads a stale figure). */
void sup_ctxpss_info_budget(double seconds);
/* The worker's RSS (statm, always read) and its PSS for INFO (read now
 * when stale and within the budget; never above the RSS). */
void sup_ctxpss_info(sup_ctx *c, uint64_t *rss, uint64_t *pss);
/* c is freed: a read still out for it is for no one. */
void sup_ctxpss_forget(sup_ctx *c);
/* Background work (sup_loop.c's table): whether figures wait to be read
 * now; reads a bounded few, returning when to come back (0: none waits);
 * when to come back while nothing is due. */
bool sup_ctxpss_due(double now);
double sup_ctxpss_tick(double now);
double sup_ctxpss_wake(double now);

#endif
