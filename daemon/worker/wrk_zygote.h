/* wrk_zygote: workers made by fork instead of exec (PROTOCOL.md 9.2, 9.3).
 *
 * `ctxd-worker --zygote [--preload=MOD,MOD...]` initialises CPython once,
 * imports the preloads and then forks a worker for every `spawn` request of
 * the supervisor. A live worker forks a copy of itself on a `fork` frame
 * (ctx.fork). Either way the new worker comes out of a double fork, so its
 * parent is the supervisor (a child subreaper), and it re-initialises what
 * belongs to one worker: channel, output pipes and flusher thread, process
 * group, parent-death signal (and, from the zygote, environment, working
 * directory and `__main__`). */
#ifndef CTXD_WRK_ZYGOTE_H
#define CTXD_WRK_ZYGOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

/* Runs the zygote. Returns only in a worker it forked, fully set up with the
 * GIL released; the caller then sends `ready` and serves the channel. */
void wrk_zygote_main(int argc, char **argv);

/* Handles a `fork` frame, decoded (GIL not held; the descriptors came with the frame,
 * see wrk_chan_take_fds). Returns false in the worker that was asked (it has
 * sent `forked` or `fork_failed`), true in the new worker, set up like one
 * returned by wrk_zygote_main. */
bool wrk_zygote_fork_live(const proto_val *frame);
/* A `bind` frame, its name and cwd checked as strs: the spare worker takes
 * the context's name as its title and enters its directory; exits 126 when
 * it cannot. */
void wrk_zygote_bind(const proto_val *frame);

#endif
