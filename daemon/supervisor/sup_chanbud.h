/* sup_chanbud: the budget of channel frames the supervisor buffers while
 * they arrive, across all contexts (--max-chan-held). */
#ifndef CTXD_SUP_CHANBUD_H
#define CTXD_SUP_CHANBUD_H

#include <stdbool.h>
#include <stddef.h>

/* One context's share: embedded in its sup_ctx. */
typedef struct sup_chanbud_slot {
    struct sup_chanbud_slot *next; /* in the queue of waiters */
    void *owner;                   /* the sup_ctx, passed to the wake callback */
    size_t granted;                /* bytes reserved for the frame being read */
    size_t need;                   /* while waiting: the bytes asked for */
    bool waiting;
} sup_chanbud_slot;

/* What a waiter that was granted its bytes is told with (its channel is to
 * be read again). */
typedef void (*sup_chanbud_wake)(void *owner);
void sup_chanbud_init(sup_chanbud_wake wake);
/* True when s holds need bytes (granted now if the budget has room and no
 * one asked before it); false when it waits in line: its channel must not
 * be read until the wake callback says so. */
bool sup_chanbud_want(sup_chanbud_slot *s, size_t need);
/* s holds nothing and waits for nothing (its frame is complete, its worker
 * gone); waiters that now fit are granted and woken. */
void sup_chanbud_release(sup_chanbud_slot *s);
size_t sup_chanbud_used(void);
size_t sup_chanbud_peak(void);
size_t sup_chanbud_waiting(void);

#endif
