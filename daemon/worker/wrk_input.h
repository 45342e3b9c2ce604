/* wrk_input: input() and getpass() during a run (PROTOCOL.md section 5,
 * `input.request`). */
#ifndef CTXD_WRK_INPUT_H
#define CTXD_WRK_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "proto.h"

/* Whether the run starting now may ask its client (execute allow_stdin). */
void wrk_input_allow(bool allowed);
/* GIL held: which 0: input(prompt=''), 1: getpass(prompt='Password: ',
 * stream=None); both -> str. New reference. */
PyObject *wrk_input_function(int which);
/* True for a frame the main loop must drop: an input_reply that arrived
 * after the input() it answered was interrupted. */
bool wrk_input_is_stale_reply(const uint8_t *body, size_t len);

/* Requests of the run to the supervisor that wait for an answer (input(),
 * %pip install: wrk_ipy.c) share one numbering: the reply carries it. */
uint64_t wrk_input_next_seq(void);
/* GIL held, during a run: sends frame (carrying number n) after the output
 * written before it and waits for the reply numbered n (`input_reply` or
 * `pip_reply`): its value as a str, or NULL with KeyboardInterrupt set when
 * an interrupt or the timeout ended the wait. */
PyObject *wrk_input_send_wait(const proto_buf *frame, uint64_t n);

#endif
