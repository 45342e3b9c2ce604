/* sup_spare: spare workers (--spare-workers): forked ahead of time,
 * warmed up, and taken by ctx.create for a context of the default tier. */
#include "sup_spare.h"

#include "sup_config.h"
#include "sup_ctxpss.h"
#include "sup_chan.h"
#include "sup_log.h"
#include "sup_policy.h"
#include "sup_run.h"
#include "sup_stats.h"
#include "sup_wexit.h"
#include "sup_wproc.h"
#include "sup_zygote.h"

#include "mem.h"

#include <stdlib.h>

/* A new context of the default tier (the unsafe tier, whose policy is all
 * the supervisor's; no environment, no package directory, no uid of its
 * own: its worker is the zygote's fork with the daemon's environment,
 * nothing of the context in it but its name and directory) takes a worker
 * forked ahead of time instead of waiting ~25 ms for a fork
 * and its copy-on-write faults. A spare is a hidden context: outside the
 * table, the name hash and the idle order (never listed, counted, saved or
 * swept), with a directory of "/" until it is taken; it runs nothing
 * before. Taken, it gets a `bind` frame (name, directory) ahead of any run,
 * which the worker obeys before reading on (it exits 126 if it cannot
 * enter the directory). The tick makes new ones, only while the zygote
 * is up (a spare made by exec would lack the preloads); one that dies
 * unused holds refilling back for a second, so a worker that cannot start
 * is not forked in a loop. */
static double spare_after; /* monotonic: no new spare before; < 0 never */
#define SPARE_PAUSE 0.05   /* seconds after a spare is taken before the next is made */

void sup_spare_drop(sup_ctx *c)
{
    sup_ctx_spare_remove(c);
    sup_wexit_discard(c, "aborted", "spare worker dropped");
    sup_ctx_bury(c);
    if (spare_after >= 0)
        spare_after = sup_now() + 1.0;
}

/* Queues a spare's warm-up: a silent cell for no client (sup_run_send
 * drops what it would send). A worker's first run costs ~10 ms more than
 * its next ones (the output thread starts, the run machinery's pages are
 * first written: copy-on-write faults); a spare pays it before it is
 * taken. The cell compiles an assignment of a call and runs nothing: the
 * compiler's pools and caches are then written too (a taken spare's first
 * `x = 1` copied 15 pages after a `pass`, 1 after this). Its queue holds
 * the context's first run behind it if taken early. */
static void spare_warm(sup_ctx *c)
{
    sup_run *r = sup_run_new(NULL, NULL);
    static const char warm[] = "if 0:\n    x = f(1, a.b[2])\n";
    r->code = mem_strdup(warm);
    r->code_len = sizeof warm - 1;
    r->silent = true;
    r->timeout = 60; /* a warm-up that hangs is killed, the spare dropped */
    sup_run_submit(c, r);
}

bool sup_spare_due(double now)
{
    return sup_ctx_spare_count() < sup_cfg.spare_workers && spare_after >= 0 &&
           now >= spare_after && sup_zygote_ready() &&
           sup_ctx_count() + sup_ctx_spare_count() < sup_cfg.max_contexts;
}

double sup_spare_fill(double now)
{
    while (sup_spare_due(now)) {
        sup_ctx *c = mem_calloc(1, sizeof *c);
        c->name = mem_strdup("(spare)");
        c->cwd = mem_strdup("/");
        c->policy = sup_policy_parse(NULL, NULL, NULL); /* the default tier's */
        c->spare.on = true;
        c->created = sup_unix_now();
        c->fd = c->out_rd[0] = c->out_rd[1] = c->out_park = c->pidfd = c->chan.outmem_fd = -1;
        c->creating = true;
        proto_error err;
        if (sup_wproc_spawn(c, &err) < 0) {
            sup_stats_event("spare-failed error=\"%s\"", err.msg);
            sup_policy_free(c->policy);
            free(c->name);
            free(c->cwd);
            free(c);
            spare_after = now + 1.0;
            return 0;
        }
        sup_ctx_spare_add(c);
        spare_warm(c);
    }
    return 0;
}

sup_ctx *sup_spare_take(void)
{
    sup_ctx *best = NULL;
    for (size_t i = 0; i < sup_ctx_spare_count(); i++) {
        sup_ctx *c = sup_ctx_spare_at(i);
        if (c->chan.broken || c->chan.eof || c->kill_at || (c->pid == 0 && !c->spawning))
            continue;
        if (!best || (c->ready && !best->ready) ||
            (c->ready == best->ready && c->created < best->created))
            best = c;
    }
    if (best)
        if (best)
            sup_ctx_spare_remove(best);
    return best;
}

/* Taken spares whose `bind` frame waits for the next tick (sup_spare_bind). */
static sup_ctx *binds[SUP_SPARE_MAX];
static size_t nbinds;

/* Writes the bind frames sup_spare_bind left: before the graveyard is freed,
 * so a context deleted meanwhile is still there to be skipped. */
static void binds_flush(void)
{
    for (size_t i = 0; i < nbinds; i++) {
        sup_ctx *c = binds[i];
        if (!c->deleted && c->fd >= 0 && c->out.len)
            sup_chan_write(c);
    }
    nbinds = 0;
}

bool sup_spare_bind(sup_ctx *c, const char *name, const char *cwd, sup_ident *ident,
                    sup_policy *policy)
{
    free(c->name);
    free(c->cwd);
    sup_policy_free(c->policy); /* the default's; the request's gives the same worker */
    c->policy = policy;
    c->name = mem_strdup(name);
    c->cwd = mem_strdup(cwd);
    c->ident = ident;
    c->spare.on = false;
    c->spare.binding = true;
    c->created = sup_unix_now();
    c->creating = !c->ready;
    sup_stats.contexts_created++;
    size_t start = proto_frame_begin(&c->out);
    proto_put_map(&c->out, 3);
    proto_put_str(&c->out, "t");
    proto_put_str(&c->out, "bind");
    proto_put_str(&c->out, "name");
    proto_put_str(&c->out, c->name);
    proto_put_str(&c->out, "cwd");
    proto_put_str(&c->out, c->cwd);
    proto_frame_end(&c->out, start);
    /* Written at the next tick, after ctx.create's reply has left: the
     * worker it wakes would otherwise take the CPU from that reply. A
     * frame queued before then (the first run) carries it along. */
    if (nbinds < SUP_SPARE_MAX)
        binds[nbinds++] = c;
    else if (c->fd >= 0)
        sup_chan_write(c);
    bool measured = c->pss.at > 0;
    if (measured) /* an idle spare's figure stays true: not read again for the reply */
        c->pss.at = sup_now();
    sup_log("spare taken ctx=%s pid=%d", c->name, (int)c->pid);
    /* Its successor is forked once creations pause: not on the CPUs this
     * context's first run needs. */
    double later = sup_now() + SPARE_PAUSE;
    if (spare_after >= 0 && spare_after < later)
        spare_after = later;
    sup_timer_moved();
    return measured;
}

double sup_spare_tick(double now)
{
    binds_flush();
    /* a spare to make once the pause after a take is over: the loop wakes
     * for it, not at whatever comes next (a request it would slow) */
    if (sup_ctx_spare_count() < sup_cfg.spare_workers && spare_after > now)
        return spare_after;
    return 0;
}

void sup_spare_shutdown(void)
{
    binds_flush(); /* before any context is freed */
    while (sup_ctx_spare_count())
        sup_spare_drop(sup_ctx_spare_at(sup_ctx_spare_count() - 1));
    spare_after = -1; /* none made after this */
}
