/* sup_chanbud: a worker announces a frame's length in its first 4 bytes
 * (up to PROTO_MAX_FRAME, 20 MiB) and the supervisor buffers the frame
 * until it is whole. A worker that announces a large frame and stalls
 * would make the supervisor hold it, outside every memory cgroup, once per
 * context. So a frame larger than one read is buffered only with bytes
 * reserved from one budget across all contexts (--max-chan-held, at least
 * one frame of the largest size): a context whose frame does not fit waits
 * in line (first asked, first served, so a large frame is not starved by
 * small ones) and its channel is not read; its worker blocks in its write
 * (backpressure) and nothing it sends is lost. */
#include "sup_chanbud.h"

#include "sup_config.h"

static sup_chanbud_slot *head, *tail;
static size_t used, peak, nwaiting;
static sup_chanbud_wake wake_fn;

/* Sets the callback that wakes a granted waiter. */
void sup_chanbud_init(sup_chanbud_wake wake)
{
    wake_fn = wake;
}

/* Takes n more bytes of the budget for s. */
static void grant(sup_chanbud_slot *s, size_t n)
{
    used += n - s->granted;
    s->granted = n;
    if (used > peak)
        peak = used;
}

/* Whether n bytes fit beside what others hold (s's own share is its). */
static bool fits(const sup_chanbud_slot *s, size_t n)
{
    return used - s->granted + n <= sup_cfg.max_chan_held;
}

/* Leaves the line. */
static void unqueue(sup_chanbud_slot *s)
{
    if (!s->waiting)
        return;
    sup_chanbud_slot **l = &head, *prev = NULL;
    while (*l && *l != s) {
        prev = *l;
        l = &(*l)->next;
    }
    if (*l) {
        *l = s->next;
        if (tail == s)
            tail = prev;
    }
    s->next = NULL;
    s->waiting = false;
    nwaiting--;
}

/* Grants the waiters at the head of the line that fit, in order. */
static void serve(void)
{
    while (head && fits(head, head->need)) {
        sup_chanbud_slot *s = head;
        unqueue(s);
        grant(s, s->need);
        if (wake_fn)
            wake_fn(s->owner);
    }
}

/* s needs `need` bytes for the frame it is reading. */
bool sup_chanbud_want(sup_chanbud_slot *s, size_t need)
{
    if (s->granted >= need && !s->waiting)
        return true;
    if (s->waiting) {
        s->need = need;
        return false;
    }
    if (!head && fits(s, need)) {
        grant(s, need);
        return true;
    }
    s->need = need;
    s->waiting = true;
    s->next = NULL;
    if (tail)
        tail->next = s;
    else
        head = s;
    tail = s;
    nwaiting++;
    return false;
}

/* s's frame is complete or its worker gone. */
void sup_chanbud_release(sup_chanbud_slot *s)
{
    unqueue(s);
    used -= s->granted;
    s->granted = 0;
    s->need = 0;
    serve();
}

/* Bytes reserved now, at most since start, and contexts waiting (stats
 * `chan_bytes`). */
size_t sup_chanbud_used(void)
{
    return used;
}

size_t sup_chanbud_peak(void)
{
    return peak;
}

size_t sup_chanbud_waiting(void)
{
    return nwaiting;
}
