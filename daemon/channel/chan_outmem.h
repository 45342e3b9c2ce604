/* chan_outmem: the layout of a worker's output memory, a sealed memfd the
 * worker maps read-write and the supervisor read-only (PROTOCOL.md 9.5).
 *
 * Every byte of a stream that the worker takes for sending gets the next
 * sequence number of that stream (`taken` is the count so far); the
 * supervisor counts the stream bytes of the whole frames it received. The
 * worker keeps every byte it has not finished sending in this memory: its
 * Python-level buffer (`pend`), the buffer whose frame it is writing
 * (`send`), and the chunk it read from a pipe (`raw`). When the worker
 * dies, however abruptly (SIGKILL, OOM), the supervisor delivers from here
 * the bytes past the count it received, in sequence order, then what is
 * still unread in the pipes. The worker is untrusted: the supervisor
 * bounds-checks every field and copies data out before using it. */
#ifndef CTXD_CHAN_OUTMEM_H
#define CTXD_CHAN_OUTMEM_H

#include <stdint.h>

#include "proto.h"

#define CHAN_OUTMEM_MAGIC 0x6f747863u /* "ctxo" */
#define CHAN_OUTMEM_AREA PROTO_STREAM_CHUNK

/* raw_state: a read of raw_len bytes from the pipe is under way (a worker
 * killed inside read(2) may or may not have taken them from the pipe: they
 * were taken when raw no longer starts with the 8 bytes of raw_nonce,
 * written there just before); the raw chunk is read but not sequenced yet
 * (it comes after `pend`); or it is ([raw_seq, raw_seq + raw_len)). */
enum { CHAN_OUTMEM_RAW_READ = 1, CHAN_OUTMEM_RAW_SEQ = 2, CHAN_OUTMEM_RAW_READING = 3 };

typedef struct chan_outmem_stream {
    uint64_t taken;    /* bytes taken for sending; `pend` starts here */
    uint64_t send_seq; /* first byte of the buffer being sent */
    uint64_t raw_seq;
    uint64_t raw_nonce;
    uint32_t send_idx, send_len; /* buf[send_idx] holds send_len bytes being sent */
    uint32_t pend_idx, pend_len; /* buf[pend_idx] holds pend_len bytes not taken yet */
    uint32_t raw_state, raw_len; /* raw holds raw_len bytes read from the pipe */
    uint8_t buf[2][CHAN_OUTMEM_AREA];
    uint8_t raw[CHAN_OUTMEM_AREA];
} chan_outmem_stream;

typedef struct chan_outmem {
    uint32_t magic, size;
    chan_outmem_stream s[2]; /* stdout, stderr */
} chan_outmem;

#endif
