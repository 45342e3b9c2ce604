/* sup_life: contexts made and ended: ctx.create, a ctx.fork copy adopted,
 * ctx.delete, ctx.restart, a request's context looked up, and the
 * shutdown. sup_life_init wires the callbacks of the context modules
 * below it. */
#ifndef CTXD_SUP_LIFE_H
#define CTXD_SUP_LIFE_H

#include "sup_ctx.h"

/* Sets the callbacks the context modules below call upward (frames to
 * sup_frame, a worker's end to sup_spare and sup_life, the channel
 * budget's wake-up, the freeing of deleted contexts): before any context
 * is made. */
void sup_life_init(void);
/* What a new context is made from. name and cwd are copied; env (nenv
 * strings), site, ident and policy are owned by the caller until a create
 * succeeds. site NULL: a new empty package directory when packages are
 * offered; policy NULL: the unsafe tier. */
typedef struct sup_ctx_spec {
    const char *name;
    const char *cwd;
    char **env;
    size_t nenv;
    struct sup_site *site;     /* a reference */
    struct sup_ident *ident;   /* a reference */
    struct sup_policy *policy; /* parsed by sup_policy.c */
} sup_ctx_spec;

/* Makes a context from spec and starts its worker (a spare's, when it would
 * be the same). On success the context owns spec's env, site, ident and
 * policy; on failure (NULL, err set) they all stay the caller's. */
sup_ctx *sup_life_create(const sup_ctx_spec *spec, proto_error *err);
/* Enters a context whose worker (pid and its verified pidfd, channel fd,
 * pipe read ends) was forked from src: same cwd, env and execution count,
 * incarnation 1, waiting for `ready`. */
sup_ctx *sup_life_adopt(const sup_ctx *src, const char *name, pid_t pid, int pidfd, int fd,
                        const int out_rd[2]);
/* Ends c: its worker lingers or is killed, its runs and waiters answered;
 * freed at the next tick. */
void sup_life_delete(sup_ctx *c);
/* Kills the worker, aborts its runs, starts incarnation + 1. */
int sup_life_restart(sup_ctx *c, proto_error *err);
/* The context a request's `ctx` field names (default "default", made on
 * first use when make_default); renews its lease; NULL after replying
 * `err`. */
sup_ctx *sup_life_lookup(const proto_val *msg, const sup_peer *peer, bool make_default);
/* Ends every context and worker (the daemon stops). */
void sup_life_shutdown(void);

#endif
