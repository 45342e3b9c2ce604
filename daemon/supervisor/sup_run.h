/* sup_run: each context's FIFO of runs (c->run, c->running): queueing,
 * the running one's frame sent to the worker through c->out and
 * sup_chan_write, its interrupt and input, and its replies to the client
 * (accepted, stream, events, done) through sup_send, in order behind what
 * a slow client holds (c->pending). The frames that move a run on
 * (start, stream, done) come from sup_frame.c. */
#ifndef CTXD_SUP_RUN_H
#define CTXD_SUP_RUN_H

#include "sup_ctx.h"

/* How a run ended, for its `done`. */
typedef struct sup_run_end {
    const char *status;
    double cpu_time;
    bool state_lost;
    const char *cause;
    const proto_val *artifacts; /* from the worker's done, checked */
    const proto_val *exit_code; /* from the worker's done (sys.exit), checked */
} sup_run_end;

/* The seam for C unit tests (tests/unit/test_sup_run.c): a run reaches
 * its worker only through c->out and sup_chan_write (so through c->fd: a
 * test makes it one end of a socketpair and plays the worker on the other,
 * writing frames that sup_chan_read hands to sup_frame), and its client
 * only through this function: sup_send_take unless set (NULL restores
 * it). It returns like sup_send_take: 0 sent (body taken), 1 the client is
 * gone (dropped), -1 it would block (held in c->pending and retried by
 * sup_reap_tick). */
typedef int (*sup_run_client_fn)(const sup_peer *peer, proto_buf *body);
void sup_run_set_client(sup_run_client_fn fn);

/* A new run of kind (NULL: an execute) for peer (NULL: no client), its
 * descriptors -1: the one way a run is made. */
sup_run *sup_run_new(const sup_run_kind *kind, const sup_peer *peer);
/* Frees r: its kind's part (kind->free), then what every run holds. */
void sup_run_free(sup_run *r);
/* Queues a run (takes ownership), starting a dead context's worker first,
 * and starts it when the context is free. */
void sup_run_submit(sup_ctx *c, sup_run *r);
/* Starts the next queued run when the worker is ready and free. */
void sup_run_dispatch(sup_ctx *c);
/* Interrupts the running run (not a fork); false when there is none. */
bool sup_run_interrupt(sup_ctx *c);
/* Interrupts the running run: at once once the worker said it started
 * (its SIGINT is unblocked), else when its `start` comes. */
void sup_run_interrupt_running(sup_ctx *c);
/* SIGINT to the running run's worker, now. */
void sup_run_send_sigint(sup_ctx *c);
/* Answers the running run's pending input_request (input.reply; eof: the
 * client declined, input() raises EOFError); false when the context has
 * none. */
bool sup_run_input_reply(sup_ctx *c, const char *value, size_t len, bool eof);
/* The running run ended: its `done` (an unstarted one's `accepted`
 * first), its state reset, the queue aborted after a failure under
 * stop_on_error. */
void sup_run_finish(sup_ctx *c, const sup_run_end *e);
/* Every queued run ends `aborted` with cause. */
void sup_run_abort_queue(sup_ctx *c, const char *cause);
/* Sends the running execute's `accepted` if it is due. */
void sup_run_accept_now(sup_ctx *c);
/* Output of the running run to its client, within --max-output and the
 * policy's stream caps (past them dropped, counted, and told once). */
void sup_run_stream(sup_ctx *c, int stream, const uint8_t *data, size_t n);
/* An event of the running run to its client: the envelope and the listed
 * fields of the checked frame (execution_count first when with_count). */
void sup_run_relay(sup_ctx *c, const char *type, const proto_val *msg, const char *const *keys,
                   uint32_t nkeys, bool with_count);
/* A message of c's to a client, in order: held behind any message held
 * back for a slow client (then c is armed to retry). */
void sup_run_send(sup_ctx *c, const sup_peer *peer, proto_buf *body);

#endif
