/* rt_loop: the router's one event loop (epoll), in the supervisor's style.
 * It knows no module: each registers a callback and a data pointer per
 * reader, per timer, per output and per descriptor, and the loop calls them
 * in the order they were registered. Every ZeroMQ socket's ZMQ_FD is
 * watched edge-triggered only to wake it; after each turn's sends the
 * readers are asked, pass after pass, until a pass reads nothing. */
#ifndef CTXD_RT_LOOP_H
#define CTXD_RT_LOOP_H

#include <stdbool.h>
#include <stdint.h>

/* Reads what its sockets hold; true when it read (or asked) something. */
typedef bool (*rt_loop_read_fn)(void *data);
/* Called at the start of every turn with the monotonic time. */
typedef void (*rt_loop_timer_fn)(void *data, double now);
/* Sends what is queued; true when nothing is left. */
typedef bool (*rt_loop_flush_fn)(void *data);
/* True when the gated readers may be read (asked every turn after the
 * timers). */
typedef bool (*rt_loop_gate_fn)(void *data, double now);
/* A descriptor that is not a ZeroMQ socket: io moves it on (never
 * blocking), fd says what to watch, level-triggered (-1: nothing now), busy
 * says it still has work (the loop then neither sleeps long nor stops
 * before it is done, for up to a second). */
typedef struct rt_loop_fd_ops {
    void (*io)(void *data);
    int (*fd)(void *data, uint32_t *events);
    bool (*busy)(void *data);
} rt_loop_fd_ops;

/* Makes the epoll set and the signalfd (SIGTERM, SIGINT, SIGHUP stop the
 * loop); before any other call. */
void rt_loop_open(void);
/* A ZeroMQ socket's ZMQ_FD wakes the loop until it is unwatched (before
 * the socket is closed). */
void rt_loop_watch(void *sock);
void rt_loop_unwatch(void *sock);
/* True when sock (may be NULL) has a message to read now. */
bool rt_loop_readable(void *sock);
/* gated: not read until the gate opens. */
void rt_loop_reader(rt_loop_read_fn fn, void *data, bool gated);
void rt_loop_timer(rt_loop_timer_fn fn, void *data);
void rt_loop_output(rt_loop_flush_fn fn, void *data);
void rt_loop_descriptor(const rt_loop_fd_ops *ops, void *data);
void rt_loop_gate(rt_loop_gate_fn fn, void *data);
/* Turns until a signal stops it, sleeping at most idle_ms when nothing is
 * to be done; then gives the outputs and descriptors up to a second. */
void rt_loop_run(int idle_ms);

#endif
