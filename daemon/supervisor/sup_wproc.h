/* sup_wproc: a context's worker process and its descriptors: a new
 * incarnation started (by the zygote or by exec), its pidfd, the signals
 * and kills that go through it, the channel descriptor the loop watches,
 * and the pipe read ends parked while it lives. */
#ifndef CTXD_SUP_WPROC_H
#define CTXD_SUP_WPROC_H

#include "sup_ctx.h"

/* Where the loop learns of worker channels (set by sup_loop.c): add once a
 * channel descriptor is the context's, del just before it is closed. */
typedef struct sup_wproc_chan_watch {
    void (*add)(sup_ctx *c);
    void (*del)(sup_ctx *c);
} sup_wproc_chan_watch;
void sup_wproc_set_chan_watch(const sup_wproc_chan_watch *w);
/* c->fd is the context's new channel: the loop watches it from now on. */
void sup_wproc_watch_chan(sup_ctx *c);
/* The loop forgets c's channel (it is handed on, not closed). */
void sup_wproc_unwatch_chan(sup_ctx *c);
/* Closes c's channel, the loop forgetting it first, and drops what it was
 * owed (unread input, channel budget). */
void sup_wproc_close_chan(sup_ctx *c);

/* Parks the worker's pipe read ends (one descriptor for both while it
 * lives; left as they are when parking fails); takes them back (it died:
 * what it left in its pipes is read now); closes them, parked or not. */
void sup_wproc_park(sup_ctx *c);
void sup_wproc_unpark(sup_ctx *c);
void sup_wproc_close_pipes(sup_ctx *c);
/* Closes descriptors received from the worker and not taken. */
void sup_wproc_drop_new_rd(sup_ctx *c);
/* A `start` that came with two FIFOs: they replace the pipe read ends
 * (raw output is recovered from them if the worker dies); anything else
 * received is closed. */
void sup_wproc_take_new_pipes(sup_ctx *c);

/* Every signal to a worker: its process group while the pidfd shows it
 * alive, and the worker itself by its pidfd; never a bare pid number. */
void sup_wproc_signal(sup_ctx *c, int sig);
/* Kills the worker and everything it started: its cgroup (which a setsid
 * or double-forked child cannot leave), and its process group. */
void sup_wproc_kill(sup_ctx *c);
/* Kills a worker that broke the channel protocol (once; it is reported
 * dead with that cause) and reads nothing more from it. */
void sup_wproc_broken(sup_ctx *c, const char *why);

/* The new worker's pid is known: the supervisor holds it by a pidfd; -1
 * with err set after killing a worker it could not hold. */
int sup_wproc_take_pid(sup_ctx *c, pid_t pid, proto_error *err);
/* Starts the worker in a new cgroup: asked of the zygote (c->spawning
 * until it answers) or by exec; -1 with err set. */
int sup_wproc_start(sup_ctx *c, bool use_zygote, proto_error *err);
/* Starts incarnation + 1: a new worker, the channel and counts reset, the
 * change journaled; -1 with err set. */
int sup_wproc_spawn(sup_ctx *c, proto_error *err);

#endif
