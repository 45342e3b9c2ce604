/* wrk_input: input() and getpass() during a run (PROTOCOL.md section 5,
 * `input.request`). */
#ifndef CTXD_WRK_INPUT_H
#define CTXD_WRK_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Whether the run starting now may ask its client (execute allow_stdin). */
void wrk_input_allow(bool allowed);
/* GIL held: which 0: input(prompt=''), 1: getpass(prompt='Password: ',
 * stream=None); both -> str. New reference. */
PyObject *wrk_input_function(int which);
/* True for a frame the main loop must drop: an input_reply that arrived
 * after the input() it answered was interrupted. */
bool wrk_input_is_stale_reply(const uint8_t *body, size_t len);

#endif
