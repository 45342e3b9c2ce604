/* wrk_output: the capture of a run's output, the sender half of the worker's
 * streams (the Python objects that write into it are wrk_outstream.h).
 *
 * File descriptors 1 and 2 are the write ends of two pipes, so raw writes
 * (os.write, C extensions, subprocesses) are captured; Python-level writes
 * are appended to a buffer per stream without a system call. Both reach the
 * supervisor as `stream` frames in the order they were written, sent by a
 * background thread (the flusher, which never touches Python objects) or by
 * a writer whose buffer is full. Every byte not yet sent lives in memory the
 * supervisor can read (chan_outmem.h), so a dying worker loses none of it.
 * Output that appears while no run is active is counted (`between`) and
 * discarded. */
#ifndef CTXD_WRK_OUTPUT_H
#define CTXD_WRK_OUTPUT_H

#include <Python.h>

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#include "proto.h"

/* The streams, numbered as their file descriptors minus one. */
enum { WRK_OUTPUT_STDOUT, WRK_OUTPUT_STDERR, WRK_OUTPUT_NSTREAMS };

/* Before Python is initialised, after the channel: makes the output memory
 * and the pipes and puts their write ends on fds 1 and 2. supervised: the
 * read ends are fds 4 and 5, passed by the supervisor; otherwise the worker
 * makes its own pipes. */
void wrk_output_init(bool supervised);
/* GIL released: counts and discards left-over output (sending `between`),
 * replaces the pipes when another process may still write into them, marks
 * a run active and sends `start` (with the new pipes' read ends if any)
 * before any output of the run. Without new pipes `start` may be held back
 * until the run's first frame, for a short time at most. */
void wrk_output_begin_run(const proto_buf *start);
/* The next run's `start` goes out at once (the first run after a bind). */
void wrk_output_start_now(void);
/* GIL released: sends every byte written so far (C stdio, Python-level
 * buffers, both pipes drained), then the frames in `tail`, then marks the
 * run over. */
void wrk_output_end_run(const proto_buf *tail);
/* GIL released: sends frames (display events) during a run, after all
 * output written before them; does nothing when no run is active. */
void wrk_output_send_frames(const proto_buf *frames);
/* The output memory (chan_outmem.h) as a sealed memfd, for `ready`; -1 when
 * there is none. */
int wrk_output_memfd(void);
/* True in a process forked from the worker (it has no channel). */
bool wrk_output_forked(void);
/* Around the fork of a new worker: the parent holds the channel lock and
 * the buffer lock across fork(2) and releases them after; the child's fork
 * handlers reset them. */
void wrk_output_fork_prepare(void);
void wrk_output_fork_parent(void);
/* In the new worker, after its pipes were put on fds 1, 2, 4, 5: closes the
 * previous incarnation's descriptors, resets the run state and makes a new
 * output memory; the flusher starts again at the first run. */
void wrk_output_restart(void);

/* ---- for the stream objects (GIL held) ---------------------------------- */

/* Appends the pieces (n bytes in all) to stream s as one write, after every
 * raw write made before it; a large write or a full buffer is sent by the
 * caller with the GIL released, so the pieces must belong to objects it
 * holds. Dropped when no run is active; written to fd s + 1 directly in a
 * forked process. */
void wrk_output_writev(int s, const struct iovec *iov, size_t cnt, size_t n);
/* Sends stream s's buffered data now, so it has left the process on
 * return. */
void wrk_output_flush(int s);
/* "stdout" or "stderr". */
const char *wrk_output_stream_name(int s);
/* Sets the function called at every run's start, before any of the run's
 * output is taken (one hook; the stream objects reopen on it). */
void wrk_output_on_run(void (*hook)(void));
/* Notes that a raw write went to stream s's fd: the next Python-level write
 * of s first forwards what the pipe holds. */
void wrk_output_raw_written(int s);

#endif
