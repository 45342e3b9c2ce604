/* sup_life: contexts made and ended: ctx.create (a spare taken or a new
 * worker), a ctx.fork copy adopted, ctx.delete, ctx.restart, the lookup of
 * a request's context, the freeing of deleted ones, and the shutdown. It
 * wires the context modules' callbacks (sup_life_init). */
#include "sup_life.h"

#include "sup_cgroup.h"
#include "sup_chan.h"
#include "sup_chanbud.h"
#include "sup_config.h"
#include "sup_ctxinfo.h"
#include "sup_ctxpss.h"
#include "sup_frame.h"
#include "sup_ident.h"
#include "sup_linger.h"
#include "sup_log.h"
#include "sup_outmem.h"
#include "sup_pkgs.h"
#include "sup_policy.h"
#include "sup_send.h"
#include "sup_spare.h"
#include "sup_stats.h"
#include "sup_trash.h"
#include "sup_wexit.h"
#include "sup_wproc.h"
#include "sup_zygote.h"

#include "mem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void free_ctx(sup_ctx *c);

void sup_life_init(void)
{
    static const sup_wexit_hooks hooks = {.spare_ended = sup_spare_drop,
                                          .never_ready = sup_life_delete};
    sup_chanbud_init(sup_chan_wake);
    sup_chan_set_frames(sup_frame_handle);
    sup_wexit_set_hooks(&hooks);
    sup_ctx_set_free(free_ctx);
}

sup_ctx *sup_life_create(const sup_ctx_spec *spec, proto_error *err)
{
    if (sup_ctx_count() >= sup_cfg.max_contexts) {
        proto_error_set(err, "limit", "the daemon already holds %zu contexts (max_contexts)",
                        sup_ctx_count());
        return NULL;
    }
    sup_ctx *c = NULL;
    if (sup_ctx_spare_count() > 0 && spec->nenv == 0 && !spec->site && !sup_pkgs_enabled() &&
        !(spec->ident && spec->ident->own_uid) && sup_policy_spare_ok(spec->policy))
        c = sup_spare_take();
    if (c) {
        bool measured = sup_spare_bind(c, spec->name, spec->cwd, spec->ident, spec->policy);
        sup_ctx_link_in(c);
        if (measured) { /* as a spare, after its warm-up: not again on the way to the first run */
            sup_ctx_list_remove(SUP_CTX_MEM, c);
            sup_ctx_list_push(SUP_CTX_MEM, c);
        }
        return c;
    }
    c = mem_calloc(1, sizeof *c);
    c->name = mem_strdup(spec->name);
    c->cwd = mem_strdup(spec->cwd);
    c->env = spec->env;
    c->nenv = spec->nenv;
    c->policy = spec->policy;
    c->site = spec->site ? spec->site : sup_pkgs_site_new();
    c->ident = spec->ident;
    c->created = sup_unix_now();
    sup_stats.contexts_created++;
    c->fd = c->out_rd[0] = c->out_rd[1] = c->out_park = c->pidfd = c->chan.outmem_fd = -1;
    c->creating = true;
    if (sup_wproc_spawn(c, err) < 0) {
        /* spec's parts stay the caller's; only a site made here goes */
        if (!spec->site)
            sup_pkgs_site_unref(c->site);
        free(c->name);
        free(c->cwd);
        free(c);
        return NULL;
    }
    sup_ctx_link_in(c);
    return c;
}

sup_ctx *sup_life_adopt(const sup_ctx *src, const char *name, pid_t pid, int pidfd, int fd,
                        const int out_rd[2])
{
    sup_ctx *c = mem_calloc(1, sizeof *c);
    c->name = mem_strdup(name);
    c->cwd = mem_strdup(src->cwd);
    c->env = mem_calloc(src->nenv + 1, sizeof *c->env);
    for (size_t i = 0; i < src->nenv; i++)
        c->env[i] = mem_strdup(src->env[i]);
    c->nenv = src->nenv;
    c->policy = sup_policy_dup(src->policy);
    /* The copy's interpreter has the source's package directory on its
     * sys.path: they share it (and what is installed into it later). */
    c->site = sup_pkgs_site_ref(src->site);
    /* ... and its identity (uid, directory): it is the same interpreter. */
    c->ident = sup_ident_ref(src->ident);
    /* Its own cgroup: killed with it, not with its source. */
    sup_cgroup_new_name(c->cgroup);
    unsigned long long mem = 0, tasks = 0;
    if (c->policy && (c->policy->tier == SUP_TIER_LOCAL || c->policy->tier == SUP_TIER_SANDBOX)) {
        mem = c->policy->memory_bytes;
        tasks = c->policy->max_processes ? c->policy->max_processes + SUP_OWN_TASKS : 0;
    }
    if (sup_cgroup_move(pid, c->cgroup, mem, tasks) < 0)
        sup_log("fork ctx=%s: cannot move pid %d into its cgroup: %s", name, (int)pid,
                strerror(errno));
    c->created = sup_unix_now();
    sup_stats.contexts_created++;
    sup_stats.workers_spawned++;
    c->pid = pid;
    c->pidfd = pidfd;
    c->fd = fd;
    sup_wproc_watch_chan(c);
    sup_ctxpss_want(c);
    c->out_rd[0] = out_rd[0];
    c->out_rd[1] = out_rd[1];
    c->out_park = -1;
    sup_wproc_park(c);
    c->chan.outmem_fd = -1;
    c->incarnation = 1;
    c->execution_count = src->execution_count;
    c->creating = true;
    sup_ctx_link_in(c);
    return c;
}

void sup_life_delete(sup_ctx *c)
{
    sup_wexit_linger(c);
    sup_wexit_discard(c, "aborted", "context deleted");
    /* Its private directory is gone when the reply says so (unless a
     * ctx.fork copy still works in it). */
    sup_ident_unref(c->ident);
    c->ident = NULL;
    sup_ctxinfo_reply_err(c, "unknown_context", "the context was deleted before it was ready");
    sup_ctx_unlink(c);
}

int sup_life_restart(sup_ctx *c, proto_error *err)
{
    sup_wexit_linger(c);
    sup_wexit_discard(c, "aborted", "context restarted");
    c->death_unshown = false;
    return sup_wproc_spawn(c, err);
}

/* Frees a context no list or table holds any more. */
static void free_ctx(sup_ctx *c)
{
    sup_ctxpss_forget(c);
    sup_outq_adopt(&c->pending); /* terminal replies still go out */
    sup_cgroup_release(c->cgroup);
    sup_ident_unref(c->ident); /* the last one removes the private directory */
    free(c->name);
    free(c->cwd);
    for (size_t i = 0; i < c->nenv; i++)
        free(c->env[i]);
    free(c->env);
    sup_policy_free(c->policy);
    sup_pkgs_site_unref(c->site);
    free(c->last_death);
    free(c->restored_from);
    free(c->kill_reason);
    if (c->chan.outmem_fd >= 0)
        close(c->chan.outmem_fd);
    sup_outmem_detach(&c->chan.outmem);
    sup_chanbud_release(&c->chan.bud); /* never left in the line once freed */
    proto_buf_free(&c->chan.in);
    proto_buf_free(&c->out);
    if (c->pidfd >= 0)
        close(c->pidfd);
    free(c);
}

void sup_life_shutdown(void)
{
    sup_pkgs_shutdown();
    sup_spare_shutdown(); /* its bind frames out before any context is freed */
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next) {
        sup_wexit_linger(c);
        sup_wexit_discard(c, "shutdown", "the daemon is shutting down");
        sup_outq_flush(&c->pending);
    }
    sup_linger_shutdown(); /* bounded by kill_grace */
    for (sup_ctx *c = sup_ctx_first(), *nx; c; c = nx) {
        nx = c->next;
        free_ctx(c);
    }
    sup_ctx_clear();
    /* What the periodic work would still do at time 0: the graveyard
     * freed, the services' own timers looked at. */
    sup_ctx_tick(0);
    (void)sup_linger_tick(0);
    (void)sup_zygote_tick(0);
    (void)sup_trash_tick(0);
    (void)sup_cgroup_tick(0);
    (void)sup_pkgs_tick(0);
    sup_cgroup_shutdown();
}

sup_ctx *sup_life_lookup(const proto_val *msg, const sup_peer *peer, bool make_default)
{
    const proto_val *name = proto_map_get(msg, "ctx");
    if (name && name->kind == PROTO_NIL) /* an explicit nil reads as absent */
        name = NULL;
    const char *s = name ? name->as.s : "default";
    size_t n = name ? name->n : 7;
    sup_ctx *c = sup_ctx_find(s, n);
    if (c) {
        if (c->lease > 0) /* any request naming a leased context renews it */
            c->lease_until = sup_now() + c->lease; /* later: no wake needed */
        return c;
    }
    if (make_default && n == 7 && memcmp(s, "default", 7) == 0) {
        proto_error err;
        sup_ident *id = sup_ident_new(false, "default", true, &err);
        sup_ctx_spec spec = {.name = "default", .cwd = id ? id->dir : NULL, .ident = id};
        c = id ? sup_life_create(&spec, &err) : NULL;
        if (!c) {
            sup_ident_unref(id);
            sup_reply_err(peer, err.code, "%s", err.msg);
        }
        return c;
    }
    sup_reply_err(peer, "unknown_context", "no context named '%.*s'", (int)n, s);
    return NULL;
}
