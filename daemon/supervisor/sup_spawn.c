/* sup_spawn: making a worker process for a context. The zygote forks it
 * (sup_zygote.c); when the zygote is not available the worker is started by
 * fork+exec, which gives the same worker without the preloads. */
#include "sup_spawn.h"
#include "sup_pkgs.h"

#include "sup_child.h"
#include "sup_config.h"
#include "sup_ident.h"
#include "sup_policy.h"
#include "sup_zygote.h"

#include "mem.h"
#include "proto.h"
#include "sbx_cgroup.h"
#include "sbx_path.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

extern char **environ;

/* Strings build_env allocated for the current spawn (sup_policy_env). */
static char **env_owned;
/* The context's variables plus CTXD_SITE, for the current spawn. */
static char **ctx_vars;

static void free_env(char **env)
{
    sup_policy_env_free(env, env_owned);
    env_owned = NULL;
    if (ctx_vars) {
        for (size_t i = 0; ctx_vars[i]; i++)
            if (strncmp(ctx_vars[i], "CTXD_SITE=", 10) == 0)
                free(ctx_vars[i]);
        free(ctx_vars);
        ctx_vars = NULL;
    }
}

/* The context's own variables, plus CTXD_SITE=<its package directory>
 * (the worker puts it on sys.path and removes the variable, wrk_site.c).
 * Sets *n to the count. */
static char **context_vars(const sup_spawn_req *c, size_t *n)
{
    *n = c->nenv;
    if (!c->site)
        return c->env;
    ctx_vars = mem_calloc(c->nenv + 2, sizeof *ctx_vars);
    for (size_t i = 0; i < c->nenv; i++)
        ctx_vars[i] = c->env[i];
    ctx_vars[c->nenv] = mem_alloc(strlen(c->site->path) + 16);
    sprintf(ctx_vars[c->nenv], "CTXD_SITE=%s", c->site->path);
    *n = c->nenv + 1;
    return ctx_vars;
}

/* The worker's environment: the daemon's own, plus the context's additions
 * (later entries win). Built before fork so the child only calls
 * async-signal-safe functions. */
static char **build_env(const sup_spawn_req *c)
{
    size_t n = 0, nvars;
    char **vars = context_vars(c, &nvars);
    if (c->policy) { /* tier and policy: a clean environment (sup_policy.c) */
        /* A worker of its own uid drops to it before its first run. */
        bool own = c->ident && c->ident->own_uid;
        sbx_ident id = {own ? (unsigned)c->ident->uid : 0, own ? (unsigned)c->ident->gid : 0,
                        (unsigned)sup_ident_group()};
        return sup_policy_env(c->policy, environ, vars, nvars, own ? &id : NULL, &env_owned);
    }
    while (environ[n])
        n++;
    char **env = mem_calloc(n + nvars + 1, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t keylen = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool overridden = false;
        for (size_t j = 0; j < nvars && !overridden; j++)
            overridden = strncmp(vars[j], environ[i], keylen) == 0 && vars[j][keylen] == '=';
        if (!overridden)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < nvars; j++)
        env[k++] = vars[j];
    env[k] = NULL;
    return env;
}

/* Moves fd `from` to `to` (clearing close-on-exec) or exits 127. */
static void move_fd(int from, int to)
{
    if (from == to ? fcntl(to, F_SETFD, 0) < 0 : dup2(from, to) < 0)
        _exit(127);
}

/* The cgroup limits of a context's worker: memory_bytes and
 * max_processes of the confined tiers. */
static sbx_cgroup_limits limits_of(const sup_spawn_req *c)
{
    sbx_cgroup_limits lim = {0, 0};
    if (c->policy && (c->policy->tier == SUP_TIER_LOCAL || c->policy->tier == SUP_TIER_SANDBOX)) {
        lim.memory_bytes = c->policy->memory_bytes;
        lim.max_tasks = c->policy->max_processes ? c->policy->max_processes + SUP_OWN_TASKS : 0;
    }
    return lim;
}

/* Runs in the forked child: becomes the worker or exits 127. Layout: the
 * pipes' write ends on 1 and 2, the channel on 3, the pipes' read ends on 4
 * and 5; every other descriptor is closed. The worker gets its own process
 * group so the whole tree can be signalled, and its cgroup before it
 * exists as a worker (125: that failed for a tier that needs it). */
static _Noreturn void child_exec(const sup_spawn_req *c, int chan, const int out[2][2], char **env)
{
    sup_child_limits();
    sbx_cgroup_limits lim = limits_of(c);
    const char *failed;
    if (c->cgroup[0] && sbx_cgroup_place(getpid(), c->cgroup, &lim, &failed) < 0 &&
        (lim.memory_bytes || lim.max_tasks))
        _exit(125);
    /* First lift every source above 5, so no dup2 overwrites another. */
    int src[5] = {out[0][1], out[1][1], chan, out[0][0], out[1][0]};
    for (int i = 0; i < 5; i++)
        if ((src[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 10)) < 0)
            _exit(127);
    for (int i = 0; i < 5; i++)
        move_fd(src[i], i + 1);
    close_range(6, ~0u, 0);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0 || dup2(devnull, 0) < 0)
        _exit(127);
    int dir = sbx_path_open(c->cwd, O_PATH | O_DIRECTORY, NULL, 0);
    if (dir < 0 || fchdir(dir) < 0)
        _exit(126);
    close(dir);
    sup_child_signals();
    char *argv[] = {(char *)"ctxd-worker", (char *)"--out-fds=4,5", (char *)c->name, NULL};
    execve(sup_cfg.worker_path, argv, env);
    _exit(127);
}

static void close_all(int sv[2], int out[2][2])
{
    for (int i = 0; i < 2; i++) {
        close(sv[i]);
        close(out[i][0]);
        close(out[i][1]);
    }
}

int sup_spawn_fds(int *fd, int out_rd[2], int child[5], proto_error *err)
{
    int sv[2] = {-1, -1}, out[2][2] = {{-1, -1}, {-1, -1}};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
        pipe2(out[0], O_CLOEXEC) < 0 || pipe2(out[1], O_CLOEXEC) < 0) {
        proto_error_set(err, "spawn", "socketpair/pipe: %s", strerror(errno));
        close_all(sv, out);
        return -1;
    }
    int keep[3] = {sv[0], out[0][0], out[1][0]};
    for (int i = 0; i < 3; i++)
        fcntl(keep[i], F_SETFL, fcntl(keep[i], F_GETFL) | O_NONBLOCK);
    *fd = sv[0];
    out_rd[0] = out[0][0];
    out_rd[1] = out[1][0];
    /* The worker's ends; it gets its own copies of the read ends too. */
    child[0] = sv[1];
    child[1] = out[0][1];
    child[2] = out[1][1];
    child[3] = out[0][0];
    child[4] = out[1][0];
    return 0;
}

/* Closes a failed spawn's descriptors: the worker's ends (0-2) and the
 * supervisor's (channel, pipe read ends, which are also the worker's 3, 4). */
static void drop_fds(const int child_fds[5], int *fd, int out_rd[2])
{
    for (int i = 0; i < 3; i++)
        close(child_fds[i]);
    close(*fd);
    close(out_rd[0]);
    close(out_rd[1]);
    *fd = out_rd[0] = out_rd[1] = -1;
}

int sup_spawn_worker(const sup_spawn_req *c, bool use_zygote, pid_t *pid, int *fd, int out_rd[2],
                     proto_error *err)
{
    int child_fds[5];
    if (sup_spawn_fds(fd, out_rd, child_fds, err) < 0)
        return -1;
    char **env = build_env(c);
    if (!env) {
        proto_error_set(err, "spawn",
                        "the policy cannot be given to the worker (a path holds a newline or "
                        "the character 0x1f)");
        free_env(NULL);
        drop_fds(child_fds, fd, out_rd);
        return -1;
    }
    bool sandbox = c->policy && c->policy->tier == SUP_TIER_SANDBOX;
    /* Only the zygote makes the sandbox's namespaces: no fallback that
     * could start it weaker (sbx_init would refuse it anyway); its request
     * waits while the zygote restarts. */
    int zr = use_zygote
                 ? sup_zygote_spawn(c->owner, c->name, c->cwd, c->cgroup, env, child_fds, sandbox)
                 : -1;
    pid_t child = 0;
    if (zr != 0 && (sandbox || c->zygote_only)) {
        proto_error_set(err, "spawn", "%s could not start its worker: %s",
                        sandbox ? "the sandbox tier" : "a spare", sup_zygote_last_failure());
        free_env(env);
        drop_fds(child_fds, fd, out_rd);
        return -1;
    }
    if (zr != 0) {
        child = sup_child_fork();
        if (child == 0) {
            const int out[2][2] = {{child_fds[3], child_fds[1]}, {child_fds[4], child_fds[2]}};
            child_exec(c, child_fds[0], out, env);
        }
        if (child < 0) {
            int saved = errno;
            free_env(env);
            drop_fds(child_fds, fd, out_rd);
            proto_error_set(err, "spawn", "fork: %s", strerror(saved));
            return -1;
        }
    }
    free_env(env);
    for (int i = 0; i < 3; i++) /* the read ends (3, 4) are the supervisor's own */
        close(child_fds[i]);
    *pid = child;
    return zr == 0 ? 1 : 0;
}
