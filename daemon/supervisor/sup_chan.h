/* sup_chan: a context's worker channel, bytes only: read to EAGAIN within
 * the channel budget and the client's backpressure, cut into frames for
 * the frame handler (set by sup_life.c: sup_frame_handle), written from
 * c->out. */
#ifndef CTXD_SUP_CHAN_H
#define CTXD_SUP_CHAN_H

#include "sup_ctx.h"

/* A worker holding channel budget for a frame that sends none of it for
 * this long while other contexts wait for the budget is killed (sup_reap). */
#define SUP_CHAN_STALL_S 10.0

/* Where whole frames go, in order (one call per frame, its body). */
void sup_chan_set_frames(void (*fn)(sup_ctx *c, const uint8_t *body, size_t len));
/* The loop saw the channel's descriptor signal (edge): writes what waits,
 * and remembers to read (sup_chan_read_ready). */
void sup_chan_event(sup_ctx *c, bool in, bool hup, bool out);
/* Reads every channel that signalled and may be read now. True while some
 * is held back by a slow client: the loop looks again within 1 ms. */
bool sup_chan_read_ready(void);
/* Reads c's channel now and handles its frames; a channel closed by the
 * worker gets it killed a second later unless it exits first. */
void sup_chan_read(sup_ctx *c);
/* Reads everything the channel holds now (frames handled on the way);
 * false on EOF. */
bool sup_chan_read_all(sup_ctx *c);
/* Handles the whole frames read and not yet handled. */
void sup_chan_process(sup_ctx *c);
/* Writes what waits in c->out, as far as the socket takes it now. */
void sup_chan_write(sup_ctx *c);
/* True while the worker's channel is not read because its client is slow
 * (backpressure); after an interrupt it is read on, bounded. */
bool sup_chan_held_back(const sup_ctx *c);
/* The channel budget's wake-up (sup_chanbud_init): the frame c waited
 * for may be read now. */
void sup_chan_wake(void *owner);

#endif
