/* wrk_output: capturing the output of runs.
 *
 * File descriptors 1 and 2 are the write ends of two pipes, so raw writes
 * (os.write, C extensions, subprocesses) are captured. sys.stdout and
 * sys.stderr are replaced by a C type that appends UTF-8 to an in-process
 * buffer per stream, without a system call per write (the buffers live in
 * memory the supervisor can read, so a dying worker loses nothing; see
 * chan_outmem.h). A background thread
 * (the flusher, which never touches Python objects) forwards pipe data as
 * `stream` frames and sends the buffers within a few milliseconds; writers
 * send themselves once a buffer holds PROTO_STREAM_CHUNK bytes. Output that
 * appears while no run is active is counted (`between`, sent before the next
 * `start`) and discarded; a run that may have left processes behind makes
 * the next run start on new pipes (the old ones are drained). */
#ifndef CTXD_WRK_OUTPUT_H
#define CTXD_WRK_OUTPUT_H

#include <Python.h>

#include <stdbool.h>

#include "proto.h"

/* Creates the pipes, puts them on fds 1 and 2 and starts the flusher. Call
 * before Python is initialised (and after the channel is set up). */
/* supervised: the supervisor passed the read ends of the stdout/stderr
 * pipes as fds 4 and 5 (argv[1] "--out-fds=4,5"); otherwise the worker
 * makes its own pipes. */
void wrk_output_init(bool supervised);
/* GIL held: installs the capturing objects as sys.stdout, sys.stderr and
 * sys.__stdout__, sys.__stderr__, and wraps os.write (a write to fd 1 or 2
 * makes the next Python-level write of that stream keep the order). Returns
 * -1 with a Python error set. */
int wrk_output_install(void);
/* GIL released: counts and discards left-over output (sending `between`),
 * replaces the pipes when another process may still write into them, marks
 * a run active and sends `start` (the frames in `start`, with the new pipes'
 * read ends) before any output of the run. Without new pipes `start` is
 * held back until the run's first frame (output, display, input.request,
 * done) or START_DELAY_NS, whichever comes first. */
void wrk_output_begin_run(const proto_buf *start);
/* Whether f is one of this module's sys.stdout / sys.stderr objects (text
 * or binary), whose buffered data wrk_output_end_run sends anyway. */
bool wrk_output_owns(PyObject *f);
/* print()'s fast path (wrk_print.c). Whether f is one of this module's text
 * objects and open; and one write of the str pieces' concatenation, as
 * sys.stdout.write writes it (up to WRK_OUTPUT_MAX_PIECES ASCII pieces are
 * copied without joining): 0, or -1 with a Python error set. */
#define WRK_OUTPUT_MAX_PIECES 16
bool wrk_output_is_open_text(PyObject *f);
int wrk_output_text_writev(PyObject *f, PyObject *const *parts, size_t n);
/* The CPU seconds of the worker's waited-for children, as read at the
 * start of the current run (by the look for other writers). */
double wrk_output_children_cpu(void);
/* The next run's `start` goes out at once (the first run after a bind). */
void wrk_output_start_now(void);
/* GIL released: sends every byte written so far (C stdio, Python buffers,
 * both pipes drained), then the frames in `tail` (result/error/done), then
 * marks the run over. */
void wrk_output_end_run(const proto_buf *tail);
/* GIL released: sends frames (display events) during a run, after all
 * output written before them; does nothing when no run is active. */
void wrk_output_send_frames(const proto_buf *frames);
/* The output memory (chan_outmem.h) as a sealed memfd, sent to the
 * supervisor with `ready`; -1 when there is none. */
int wrk_output_memfd(void);
/* True in a process forked from the worker (it has no channel). */
bool wrk_output_forked(void);
/* Around the fork of a new worker (wrk_zygote.c): takes the channel lock and
 * the buffer lock; the parent releases them, the child's fork handlers reset
 * them. */
void wrk_output_fork_prepare(void);
void wrk_output_fork_parent(void);
/* In the new worker, after its pipes were put on fds 1, 2, 4, 5: closes the
 * previous incarnation's descriptors, resets the run state and starts a new
 * flusher thread. */
void wrk_output_restart(void);

#endif
