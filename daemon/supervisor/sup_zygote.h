/* sup_zygote: the zygote fork-server (the supervisor's side). It knows a
 * context only as the opaque owner of a request. */
#ifndef CTXD_SUP_ZYGOTE_H
#define CTXD_SUP_ZYGOTE_H

#include "proto.h"
#include <stdbool.h>
#include <sys/types.h>

struct sup_ctx;

/* The answers to sup_zygote_spawn, given by the contexts layer above
 * (sup_wexit_spawned, sup_wexit_spawn_failed): the worker's pid; or why it made
 * none (held: it had the descriptors, so a worker may use them). */
typedef struct sup_zygote_answers {
    void (*spawned)(struct sup_ctx *owner, pid_t pid);
    void (*failed)(struct sup_ctx *owner, const char *why, bool held);
} sup_zygote_answers;

/* Raises the descriptor limit, makes the supervisor a child subreaper, starts
 * the zygote with the preloads (sup_cfg.preload, else $CTXD_PRELOAD) and
 * waits until it is ready (bounded). Call after sup_loop_open. a: where
 * answers go (kept). */
void sup_zygote_init(const sup_zygote_answers *a);
/* Asks the zygote for a worker for owner with the given descriptors (see
 * sup_spawn_fds; copies are kept until sent) and complete environment,
 * without waiting: the answer comes later, from the event loop, as
 * the answers given to sup_zygote_init. owner is opaque here. 0 asked; -1 the zygote cannot
 * take it now (not running, and !wait_for_zygote; the caller starts the
 * worker by exec). wait_for_zygote (the sandbox tier, which only the
 * zygote can make): queued while the zygote (re)starts, at most 10 s. */
int sup_zygote_spawn(struct sup_ctx *owner, const char *name, const char *cwd, const char *cgroup,
                     char *const *env, const int fds[5], bool wait_for_zygote);
/* owner no longer wants what it asked for (deleted, restarted): a worker
 * made for it is killed with its cgroup. */
void sup_zygote_cancel(const struct sup_ctx *owner);
/* The zygote's socket while it starts or serves (poll it), else -1. */
int sup_zygote_fd(void);
/* Whether it serves spawns now (started, said hello, not restarting). */
bool sup_zygote_ready(void);
/* How many times a zygote was started: each start has its own socket, so
 * this tells a watcher whether sup_zygote_fd is still the socket it
 * registered (a new one may reuse the number). */
unsigned sup_zygote_starts(void);
void sup_zygote_on_readable(void);
/* Why the last sup_zygote_spawn that did not return 0 failed. */
const char *sup_zygote_last_failure(void);
/* Called for every reaped child: true when it was the zygote (restarted). */
bool sup_zygote_on_exit(pid_t pid, int status);
/* Remembers the exit of a pid no context knows yet, for sup_zygote_take_exit
 * (a forked worker can die before the frame naming it is read). */
void sup_zygote_note_exit(pid_t pid, int status);
bool sup_zygote_take_exit(pid_t pid, int *status);
/* Restarts a dead zygote when due; returns when to be called next (0 none). */
double sup_zygote_tick(double now);
/* hello's `preloads` value: {loaded: [...], skipped: [...]}. */
void sup_zygote_put_preloads(proto_buf *b);

#endif
