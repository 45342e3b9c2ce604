/* wrk_chan: the framed channel to the supervisor (fd 3). Every frame the
 * worker sends goes through one mutex so frames from the main thread, Python
 * threads and the output flusher never interleave. Writes block: when the
 * supervisor stops reading, every writer waits (backpressure). */
#ifndef CTXD_WRK_CHAN_H
#define CTXD_WRK_CHAN_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* Takes over fd as the channel (blocking, close-on-exec). Exits with status 2
 * when fd is not open. */
void wrk_chan_init(int fd);

/* The supervisor is gone (end of file, broken channel, or its death
 * signal): the worker exits with code, taking its process group (what the
 * user code started) with it when it leads one. Async-signal-safe. */
_Noreturn void wrk_chan_gone(int code);

void wrk_chan_lock(void);
/* For a crash handler: waits (at most max_ms) until no thread is between
 * taking output and sending it, then keeps the lock so none starts. Output
 * still in the pipes is then recovered by the supervisor. Uses only
 * trylock and nanosleep. */
void wrk_chan_quiesce(int max_ms);
void wrk_chan_unlock(void);
/* Writes n bytes of whole frames; the caller holds the lock. A broken channel
 * means the supervisor is gone: the worker exits. In a forked child (which
 * has no channel) this does nothing. */
void wrk_chan_write_locked(const void *p, size_t n);
/* Writes n bytes of stream `name` ("stdout" or "stderr") as `stream` frames
 * of at most PROTO_STREAM_CHUNK bytes each; the caller holds the lock. */
void wrk_chan_write_stream_locked(const char *name, const uint8_t *p, size_t n);
/* Holds a frame of at most WRK_CHAN_DEFER_MAX bytes back (the caller holds
 * the lock): the next write of any thread sends it first, in the same
 * sendmsg; wrk_chan_flush_deferred_locked sends it alone. One at a time. */
#define WRK_CHAN_DEFER_MAX 64
void wrk_chan_defer_locked(const void *p, size_t n);
void wrk_chan_flush_deferred_locked(void);
/* Lock, write one buffer of whole frames, unlock. */
void wrk_chan_send(const proto_buf *frames);
/* wrk_chan_write_locked with up to 4 descriptors attached to the first
 * byte (SCM_RIGHTS). */
void wrk_chan_write_fds_locked(const void *p, size_t n, const int *fds, int nfds);
/* wrk_chan_send with descriptor fd attached to the frames' first byte
 * (SCM_RIGHTS); plain wrk_chan_send when fd < 0. */
void wrk_chan_send_fd(const proto_buf *frames, int fd);

/* Takes up to n descriptors that arrived with SCM_RIGHTS (oldest first);
 * returns how many. */
int wrk_chan_take_fds(int *fds, int n);

/* Reads from the channel until `in` starts with one complete frame and
 * returns its body. The caller drops it with proto_buf_consume(in, consumed).
 * Exits on end of file (0), on a read error (1) or on an oversized frame (2). */
void wrk_chan_recv(proto_buf *in, const uint8_t **body, size_t *body_len, size_t *consumed);
/* The channel's descriptor (wrk_input reads input replies from it). */
int wrk_chan_fd(void);

#endif
