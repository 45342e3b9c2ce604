/* sup_reap: what ends on time: contexts idle past --idle-ttl, leases not
 * renewed, and the timers of each context with something timed (a run's
 * deadline and CPU budget, a kill time, a channel stalled in a frame,
 * messages held for a slow client). */
#include "sup_reap.h"

#include "sup_cgroup.h"
#include "sup_chan.h"
#include "sup_chanbud.h"
#include "sup_config.h"
#include "sup_life.h"
#include "sup_log.h"
#include "sup_policy.h"
#include "sup_run.h"
#include "sup_send.h"
#include "sup_stats.h"
#include "sup_wproc.h"

#include "mem.h"

#include <stdio.h>

/* Contexts the --idle-ttl sweep deletes per loop turn: 5,000 expiring at
 * once go over ~80 turns, 1 ms apart, with requests served between. */
#define REAP_PER_TURN 64
/* --idle-ttl: the context (not `default`) longest without activity is
 * deleted once that is longer than the TTL, if nothing is running, queued,
 * waiting or held for it (else its activity is now). Returns when the
 * oldest would expire, 0 = never. Looks at the expired ones only. */
static double reap_idle(double now)
{
    if (sup_cfg.idle_ttl <= 0)
        return 0;
    for (int budget = 0; sup_ctx_list_head(SUP_CTX_IDLE) && budget < REAP_PER_TURN; budget++) {
        sup_ctx *c = sup_ctx_list_head(SUP_CTX_IDLE);
        double expiry = c->last_active + sup_cfg.idle_ttl;
        if (now < expiry)
            return expiry;
        if (c->running || c->run.queue || c->waiters || c->pending.head) {
            sup_ctx_touch(c);
            continue;
        }
        sup_stats_event("reaped ctx=%s idle_ttl=%g", c->name, sup_cfg.idle_ttl);
        sup_life_delete(c);
    }
    return sup_ctx_list_head(SUP_CTX_IDLE) ? now + 1e-3 : 0;
}

/* ctx.create `lease`: a leased context whose owner stopped renewing is
 * deleted, busy or not. Looks at the leased contexts only (a kernel's own
 * context each). Returns when the next lease would end, 0 = none. */
static double reap_leases(double now)
{
    double next = 0;
    sup_ctx *c_next;
    for (sup_ctx *c = sup_ctx_list_head(SUP_CTX_LEASED); c; c = c_next) {
        c_next = c->leased.next;
        if (now >= c->lease_until) {
            sup_stats_event("reaped ctx=%s lease=%g expired", c->name, c->lease);
            sup_life_delete(c);
        } else if (next == 0 || c->lease_until < next) {
            next = c->lease_until;
        }
    }
    return next;
}

void sup_reap_set_lease(sup_ctx *c, double seconds)
{
    c->lease = seconds;
    c->lease_until = sup_now() + seconds;
    sup_timer_moved();
    if (seconds > 0 && !c->deleted)
        sup_ctx_list_push(SUP_CTX_LEASED, c);
    else
        sup_ctx_list_remove(SUP_CTX_LEASED, c);
}

/* policy.cpu_seconds counted for the whole context (its cgroup, children
 * included), so neither ignoring the in-process SIGXCPU nor starting
 * processes escapes it: past the budget the run is interrupted like a
 * timeout, and killed after the grace period. True when it fired; else
 * c->run.cpu_check is when to look again. */
#define CPU_SLACK 0.25 /* seconds */

static bool check_cpu_budget(sup_ctx *c, double now)
{
    if (c->run.cpu_check > now)
        return false;
    double used = sup_cgroup_cpu(c->cgroup);
    c->run.cpu_check = now + 0.1;
    /* A little past the budget: at the budget itself the worker's own
     * timer raises TimeoutError in the run, which is the gentler end. */
    if (used < 0 || used - c->run.cpu0 <= c->policy->cpu_seconds + CPU_SLACK)
        return false;
    c->run.cpu_check = 0;
    c->run.timed_out = c->run.cpu_exceeded = true;
    c->run.deadline = 0;
    sup_run_interrupt_running(c);
    c->kill_at = now + sup_cfg.kill_grace;
    c->kill_why = "killed after exceeding cpu_seconds: did not stop within the grace period";
    return true;
}

/* The timers of the contexts with something timed (the idle ones cost
 * nothing); returns the earliest next one, 0 = none. */
static double timers(double now)
{
    double next = 0;
    sup_ctx *c_next;
    /* Only contexts with something timed: the idle ones cost nothing. */
    for (sup_ctx *c = sup_ctx_list_head(SUP_CTX_TIMED); c; c = c_next) {
        c_next = c->timed.next;
        if (c->pending.head) {
            /* A reader only momentarily behind (libzmq's queue per client
             * is short, SUP_ZMQ_SNDHWM) is retried after 1 ms (the poll's
             * resolution), one that stays full every 2 ms. */
            if (sup_outq_flush(&c->pending)) {
                c->flush_retry = 0;
                sup_ctx_touch(c);
            } else {
                c->flush_retry = c->flush_retry == 0 ? 1e-3 : 2e-3;
                double t = now + c->flush_retry;
                next = next == 0 || t < next ? t : next;
            }
        }
        if (c->running && c->run.deadline && now >= c->run.deadline && !c->run.timed_out) {
            c->run.timed_out = true;
            c->run.deadline = 0;
            sup_run_interrupt_running(c);
            c->kill_at = now + sup_cfg.kill_grace;
            c->kill_why = "killed after timeout: did not stop within the grace period";
        }
        if (c->kill_at && now >= c->kill_at && c->pid > 0) {
            c->kill_at = 0;
            if (!c->kill_reason) {
                char buf[160];
                if (c->run.timed_out && !c->run.cpu_exceeded)
                    snprintf(buf, sizeof buf,
                             "killed after timeout: did not stop within the %g s grace period",
                             sup_cfg.kill_grace);
                else
                    snprintf(buf, sizeof buf, "%s", c->kill_why);
                c->kill_reason = mem_strdup(buf);
            }
            sup_wproc_kill(c);
        }
        /* From sup_run_dispatch on, not from the worker's `start`: a cell can keep
         * its start from ever going out (wrk_output.c holds it back). */
        if (c->running && !c->running->kind && c->run.cpu0 >= 0 && !c->run.timed_out)
            (void)check_cpu_budget(c, now);
        if (!c->chan.bud.granted)
            c->chan.stall_at = 0;
        else if (c->chan.stall_at && now >= c->chan.stall_at) {
            c->chan.stall_at = now + SUP_CHAN_STALL_S;
            if (sup_chanbud_waiting() > 0)
                sup_wproc_broken(c, "stalled in the middle of a frame while other contexts waited "
                                    "for the channel budget (--max-chan-held)");
        }
        double t[] = {c->run.deadline, c->kill_at, c->run.cpu_check, c->chan.stall_at};
        for (size_t i = 0; i < 4; i++)
            if (t[i] > 0 && (next == 0 || t[i] < next))
                next = t[i];
        if (!c->running && !c->kill_at && !c->pending.head && !c->chan.stall_at)
            sup_ctx_list_remove(SUP_CTX_TIMED, c); /* nothing timed left */
    }
    return next;
}

double sup_reap_tick(double now)
{
    double next = reap_idle(now), t = reap_leases(now);
    if (t && (!next || t < next))
        next = t;
    t = timers(now);
    if (t && (!next || t < next))
        next = t;
    return next;
}
