/* sup_spawn: starting a worker. */
#ifndef CTXD_SUP_SPAWN_H
#define CTXD_SUP_SPAWN_H

#include "proto.h"
#include "sup_ident.h"
#include "sup_pkgs.h"
#include "sup_policy.h"
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct sup_ctx;

/* What a worker is started with: its context's name, directory, cgroup,
 * environment, package directory, policy and identity. owner: the context
 * the zygote's answer is for. */
typedef struct sup_spawn_req {
    struct sup_ctx *owner;
    const char *name, *cwd, *cgroup;
    char **env;
    size_t nenv;
    const sup_site *site;     /* NULL = none */
    const sup_policy *policy; /* NULL = unsafe */
    const sup_ident *ident;   /* NULL = the daemon's */
    bool zygote_only; /* no fork+exec fallback (a spare worker: it would lack the preloads) */
} sup_spawn_req;

/* The one place that makes a worker process: forked by the zygote (with
 * use_zygote), or by fork+exec when the zygote is not available. Sets *fd
 * (the supervisor's channel end) and out_rd (read ends of the worker's
 * stdout/stderr pipes), all non-blocking and close-on-exec. Returns 0 with
 * *pid set (started by exec), 1 when the zygote was asked (its answer
 * comes later: sup_zygote_answers), -1 with err set. */
int sup_spawn_worker(const sup_spawn_req *w, bool use_zygote, pid_t *pid, int *fd, int out_rd[2],
                     proto_error *err);
/* A worker's channel and pipes: *fd and out_rd are the supervisor's ends
 * (non-blocking); child[] = {channel, stdout write, stderr write, stdout
 * read, stderr read} are the worker's (close-on-exec; the caller closes
 * child[0..2] once they are passed on, child[3..4] are out_rd). */
int sup_spawn_fds(int *fd, int out_rd[2], int child[5], proto_error *err);

#endif
