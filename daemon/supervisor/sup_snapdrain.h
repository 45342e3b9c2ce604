/* sup_snapdrain: the copier of the pipe a snapshot comes through, and the
 * state of a restore whose tag a thread checks (sup_snap.c). */
#ifndef CTXD_SUP_SNAPDRAIN_H
#define CTXD_SUP_SNAPDRAIN_H

#include "proto.h"
#include "sup_ctx.h"
#include "sup_snapmac.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sup_snap_drain {
    pthread_t thread, hasher;
    bool running;
    int rd, evfd, out;
    uint64_t max;
    sup_snapmac *mac;
    atomic_bool stop; /* set with a write to evfd: take what is there, end */
    /* Under mu: the file's length so far, how much of it the hasher took
     * into mac, the number of the last reset (the hasher starts over),
     * whether the copier ended; cv: any of them moved. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t n, hashed;
    unsigned gen;
    bool copied;
    /* Why the file is not the snapshot (set by the copier, under mu; read
     * by the loop after the join), and a fault of the hasher's. */
    const char *bad;
    int bad_errno;
    bool hash_failed;
    /* A restore whose file's tag a thread checks (verifier) while the
     * loop goes on: its result when checked is set, the context and run
     * it is for, and the next such check (the list the tick looks at). */
    bool verifying;
    pthread_t verifier;
    atomic_bool checked;
    bool ok;
    int tier;
    uint64_t content_len;
    char origin[PROTO_MAX_NAME + 1];
    sup_ctx *ctx;
    sup_run *run;
    struct sup_snap_drain *next_check;
} sup_snap_drain;
/* Starts copying a pipe into out, at most max bytes, with the HMAC of the
 * daemon's own key computed alongside; the pipe's write end for the worker
 * in *wfd, or NULL with errno. */
sup_snap_drain *sup_snapdrain_start(int out, uint64_t max, int *wfd);
/* Takes what the pipe holds, ends both threads and waits for them; after
 * it, d->n is the file's length and d->bad says why it is not whole. */
void sup_snapdrain_join(sup_snap_drain *d);

#endif
