/* sup_spawn: making a worker process for a context. Kept behind one function
 * so a zygote fork-server can replace plain fork+exec later. */
#include "sup.h"

#include "mem.h"

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

/* The worker's environment: the daemon's own, plus the context's additions
 * (later entries win). Built before fork so the child only calls
 * async-signal-safe functions. */
static char **build_env(const sup_ctx *c)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = mem_calloc(n + c->nenv + 1, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t keylen = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool overridden = false;
        for (size_t j = 0; j < c->nenv && !overridden; j++)
            overridden = strncmp(c->env[j], environ[i], keylen) == 0 && c->env[j][keylen] == '=';
        if (!overridden)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < c->nenv; j++)
        env[k++] = c->env[j];
    env[k] = NULL;
    return env;
}

/* Runs in the forked child: becomes the worker or exits 127. The channel is
 * moved to fd 3, every other descriptor above 2 is closed, and the worker
 * gets its own process group so the whole tree can be signalled. */
static _Noreturn void child_exec(const sup_ctx *c, int chan, char **env)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (chan != 3) {
        if (dup2(chan, 3) < 0)
            _exit(127);
    } else {
        fcntl(3, F_SETFD, 0);
    }
    close_range(4, ~0u, 0);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0 && devnull != 0) {
        dup2(devnull, 0);
        close(devnull);
    }
    if (chdir(c->cwd) < 0)
        _exit(126);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    char *argv[] = {(char *)"ctxd-worker", c->name, NULL};
    execve(sup_cfg.worker_path, argv, env);
    _exit(127);
}

int sup_spawn_worker(const sup_ctx *c, pid_t *pid, int *fd, proto_error *err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        proto_error_set(err, "spawn", "socketpair: %s", strerror(errno));
        return -1;
    }
    char **env = build_env(c);
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    pid_t child = fork();
    if (child == 0)
        child_exec(c, sv[1], env);
    int saved = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    free(env);
    close(sv[1]);
    if (child < 0) {
        close(sv[0]);
        proto_error_set(err, "spawn", "fork: %s", strerror(saved));
        return -1;
    }
    setpgid(child, child); /* also in the child: whichever runs first wins */
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    *pid = child;
    *fd = sv[0];
    return 0;
}
