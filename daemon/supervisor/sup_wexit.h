/* sup_wexit: how a context's worker ends: discarded on purpose, dead (its
 * last output relayed, its runs ended, the cause kept for the next
 * incarnation), never started, or lingering to run its atexit handlers. */
#ifndef CTXD_SUP_WEXIT_H
#define CTXD_SUP_WEXIT_H

#include "sup_ctx.h"

/* What the modules above do when a worker ended (set by sup_life.c): a
 * spare's is dropped; a context whose worker never got ready is deleted. */
typedef struct sup_wexit_hooks {
    void (*spare_ended)(sup_ctx *c);
    void (*never_ready)(sup_ctx *c);
} sup_wexit_hooks;
void sup_wexit_set_hooks(const sup_wexit_hooks *h);
/* Forgets the current worker after killing it and all it started: its
 * runs end with status/cause. The pid is reaped by the SIGCHLD path. */
void sup_wexit_discard(sup_ctx *c, const char *status, const char *cause);
/* A child was reaped: a worker's death ends its runs (output it left
 * relayed first); the reaper's, the zygote's and pip's go to them. */
void sup_wexit_on_exit(pid_t pid, int status);
/* The zygote's answers to sup_zygote_spawn (sup_zygote_answers, wired by
 * sup_main.c): the worker's pid; or why it made none (held: it had the
 * descriptors, so new ones are made). Without the zygote a worker is
 * started by exec (not for the sandbox tier). */
void sup_wexit_spawned(sup_ctx *c, pid_t pid);
void sup_wexit_spawn_failed(sup_ctx *c, const char *why, bool held);
/* True when pid is the worker of some context or spare. */
bool sup_wexit_is_worker(pid_t pid);
/* A child is about to be reaped (a zombie): the group of a context
 * worker is killed now, while its id cannot have been reused. */
void sup_wexit_before_reap(pid_t pid);
/* The context ends on purpose: an idle worker is handed to sup_linger to
 * run its atexit handlers instead of being killed by sup_wexit_discard. */
void sup_wexit_linger(sup_ctx *c);

#endif
