/* sup_send: messages to clients. Sends without blocking on the listening
 * sockets (sup_loop.c registers them), queues per client and in the
 * daemon-wide outbox when a client's queue is full, and builds the common
 * head of every message and the `err` reply. */
#ifndef CTXD_SUP_SEND_H
#define CTXD_SUP_SEND_H

#include "proto.h"
#include "sup_peer.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A FIFO of client messages that could not go out yet (the client's queue
 * was full). */
typedef struct sup_outq {
    struct sup_outmsg *head, *tail;
    size_t n;
    size_t bytes; /* bodies plus per-message overhead */
} sup_outq;

/* libzmq's queue per client, in messages (output: at most 64 KiB each):
 * what libzmq holds for a client that does not read is bounded too. */
#define SUP_ZMQ_SNDHWM 64

/* The listening socket number sock (0 plain, 1 CurveZMQ), or NULL. */
void sup_send_router(int sock, void *router);
/* Called before every message leaves (the loop saves a changed context
 * table there: a reply to ctx.create or ctx.delete never goes out before
 * the change is in the state directory, so a daemon killed right after it
 * cannot undo it). */
void sup_send_before(void (*fn)(void));
/* Whether listening socket sock was sent on since the last call (the loop
 * must then look at it again: a send can take its ZMQ_FD signal). */
bool sup_send_take_used(int sock);
/* Sends body to a client without blocking: 0, -1 when the client's queue
 * is full (EAGAIN), or 1 when the client is gone (the message dropped). A
 * large body's buffer may be handed to ZeroMQ instead of copied: body is
 * then left empty (the caller still frees it). */
int sup_send_take(const sup_peer *peer, proto_buf *body);
/* Sends, or queues behind the daemon-wide outbox when the client's queue is
 * full, so replies are never dropped for a slow client. */
void sup_deliver(const sup_peer *peer, const proto_buf *body);
void sup_outq_push(sup_outq *q, const sup_peer *peer, const proto_buf *body);
/* Sends queued messages in order; true when the queue is empty. */
bool sup_outq_flush(sup_outq *q);
/* Hands what a deleted context still holds to the daemon-wide outbox. */
void sup_outq_adopt(sup_outq *q);
/* Sends what the daemon-wide outbox holds; true when it is empty. */
bool sup_send_flush_outbox(void);

/* Writes map header + v, t, re; the caller appends nfields pairs. */
void sup_msg_begin(proto_buf *b, const char *type, const sup_peer *peer, uint32_t nfields);
/* Opens a message to peer with v, t and re written and counted; the caller
 * adds pairs with proto_key and closes it with sup_msg_end before sending. */
proto_map sup_msg_open(proto_buf *b, const char *type, const sup_peer *peer);
/* Writes the header of the message m for the pairs it holds. */
void sup_msg_end(proto_buf *b, const proto_map *m);
void sup_reply_err(const sup_peer *peer, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The code of the last sup_reply_err since sup_reply_reset (the request
 * log says why), NULL when none. */
const char *sup_reply_last_code(void);
void sup_reply_reset(void);

#endif
