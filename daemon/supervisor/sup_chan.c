/* sup_chan: a context's worker channel, bytes only: reading it (to EAGAIN,
 * within the channel budget and the client's backpressure), cutting what
 * was read into frames for the frame handler, and writing what waits in
 * c->out. */
#include "sup_chan.h"

#include "sup_chanbud.h"
#include "sup_config.h"
#include "sup_held.h"
#include "sup_log.h"
#include "sup_wproc.h"

#include "mem.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define READ_CHUNK (256 * 1024)
/* The most a context's channel input buffer holds: one whole frame of the
 * largest size, its prefix, and one read. */
#define IN_MAX ((size_t)PROTO_MAX_FRAME + 4 + READ_CHUNK)
/* After an interrupt (or a timeout's), a run's worker is read on although
 * its client is slow, until this much is held for that client: the worker's
 * blocked write completes, the interrupt lands (KeyboardInterrupt, globals
 * kept) and the run ends. Code that goes on writing past it is held back
 * again, and a timed-out run is then killed after the grace period. */
#define INTERRUPT_HOLD_MAX ((size_t)8 << 20)

static void (*frame_fn)(sup_ctx *c, const uint8_t *body, size_t len);

void sup_chan_set_frames(void (*fn)(sup_ctx *c, const uint8_t *body, size_t len))
{
    frame_fn = fn;
}

/* One read of the channel. recvmsg, so that the output memory a worker
 * sends with `ready` is kept (until on_ready maps it); any other descriptor
 * is closed. *ctl_seen: the read carried control data (where a read stops
 * short of what is queued). */
static ssize_t read_chan_once(sup_ctx *c, uint8_t *buf, size_t len, bool *ctl_seen)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {buf, len};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0)
        return n;
    *ctl_seen = mh.msg_controllen > 0 || (mh.msg_flags & MSG_CTRUNC);
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof fd, sizeof fd);
            if (!c->ready && c->chan.outmem_fd < 0 && !c->chan.outmem)
                c->chan.outmem_fd = fd;
            else if (c->ready && c->chan.nnew_rd < 2)
                c->chan.new_rd[c->chan.nnew_rd++] = fd;
            else
                close(fd);
        }
    }
    return n;
}

bool sup_chan_read_all(sup_ctx *c)
{
    for (int rounds = 0; rounds < 64; rounds++) {
        if (c->chan.in.len + READ_CHUNK > IN_MAX) {
            /* Cannot happen for a worker that keeps to the frame size
             * cap (sup_chan_process leaves less than one frame). */
            sup_wproc_broken(c, "more unprocessed bytes than one frame of the largest size");
            return true;
        }
        proto_buf_reserve(&c->chan.in, READ_CHUNK);
        bool ctl = false;
        ssize_t n = read_chan_once(c, c->chan.in.data + c->chan.in.len, READ_CHUNK, &ctl);
        if (n > 0) {
            /* A short read with no descriptors is proof of an empty
             * socket: a stream read takes all that is queued, up to its
             * length, stopping early only where descriptors ride
             * (SCM_RIGHTS); bytes that come after it signal the loop again
             * (edge-triggered). Otherwise only EAGAIN is. */
            c->chan.in.len += (size_t)n;
            sup_chan_process(c);
            if (c->chan.bud.granted) {
                c->chan.stall_at = sup_now() + SUP_CHAN_STALL_S;
                sup_ctx_arm(c);
            }
            if (c->fd < 0 || c->chan.bud.waiting || sup_chan_held_back(c))
                return true;
            if ((size_t)n < READ_CHUNK && !ctl && !c->chan.rd_hup) {
                c->chan.rd_wanted = false;
                return true;
            }
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        c->chan.rd_wanted = false;
        if (n == 0)
            return false;
        return errno == EAGAIN;
    }
    return true;
}

bool sup_chan_held_back(const sup_ctx *c)
{
    if (c->running && c->run.interrupt_sent && c->pending.bytes < INTERRUPT_HOLD_MAX &&
        sup_held_total() < sup_cfg.max_held)
        return false;
    /* Held for this run's client, or its client (or everyone) holds too
     * much already: the worker waits. */
    return c->pending.head || (c->running && sup_held_over(&c->running->peer));
}

void sup_chan_wake(void *owner)
{
    sup_ctx *c = owner;
    if (c->fd < 0 || c->deleted)
        return;
    c->chan.rd_wanted = true;
    sup_ctx_list_push(SUP_CTX_RD, c);
    sup_timer_moved();
}

/* Reserves the bytes of the frame c's buffer has begun, when it is larger
 * than one read (sup_chanbud: c then waits for room, unread), or gives
 * back what the last one had; a buffer grown for a large frame is given
 * back to the allocator once the frame is processed. */
static void chan_budget(sup_ctx *c)
{
    if (c->fd >= 0 && !c->chan.broken && c->chan.in.len >= 4) {
        const uint8_t *d = c->chan.in.data;
        size_t need =
            (((size_t)d[0] << 24) | ((size_t)d[1] << 16) | ((size_t)d[2] << 8) | d[3]) + 4;
        if (need > READ_CHUNK) {
            c->chan.bud.owner = c;
            sup_chanbud_want(&c->chan.bud, need);
            return;
        }
    }
    sup_chanbud_release(&c->chan.bud);
    if (c->chan.in.cap > 2 * (size_t)READ_CHUNK && c->chan.in.len <= READ_CHUNK) {
        c->chan.in.data = mem_realloc(c->chan.in.data, READ_CHUNK);
        c->chan.in.cap = READ_CHUNK;
    }
}

void sup_chan_process(sup_ctx *c)
{
    size_t off = 0;
    while (c->fd >= 0 && !c->chan.broken) {
        const uint8_t *body;
        size_t body_len, used;
        int r = proto_frame_next(c->chan.in.data + off, c->chan.in.len - off, PROTO_MAX_FRAME,
                                 &body, &body_len, &used);
        if (r < 0) {
            sup_wproc_broken(c, "frame longer than the maximum");
            return;
        }
        if (r == 0)
            break;
        off += used;
        frame_fn(c, body, body_len);
    }
    if (c->chan.broken)
        c->chan.in.len = 0;
    else
        proto_buf_consume(&c->chan.in, off);
    chan_budget(c);
}

void sup_chan_read(sup_ctx *c)
{
    bool open = sup_chan_read_all(c);
    if (c->fd < 0)
        return;
    sup_chan_process(c);
    if (!open && c->fd >= 0 && !c->chan.eof) {
        /* The worker closed its end; it should be exiting. Give it a moment
         * before killing it, so a crash reports its own cause. */
        c->chan.eof = true;
        c->kill_at = sup_now() + 1.0;
        c->kill_why = "worker closed its channel";
        sup_ctx_arm(c);
    }
}

void sup_chan_event(sup_ctx *c, bool in, bool hup, bool out)
{
    if (out && c->out.len)
        sup_chan_write(c);
    if (in && c->fd >= 0) {
        c->chan.rd_wanted = true;
        c->chan.rd_hup = c->chan.rd_hup || hup;
        sup_ctx_list_push(SUP_CTX_RD, c);
    }
}

bool sup_chan_read_ready(void)
{
    bool held = false;
    sup_ctx *nx;
    for (sup_ctx *c = sup_ctx_list_head(SUP_CTX_RD); c; c = nx) {
        nx = c->rd.next;
        if (c->deleted || c->fd < 0 || !c->chan.rd_wanted || c->chan.eof || c->chan.broken ||
            c->chan.bud.waiting) { /* a waiter is pushed back when its turn comes */
            sup_ctx_list_remove(SUP_CTX_RD, c);
            continue;
        }
        /* a worker the zygote is still making is read once its pid is known */
        if (c->spawning)
            continue;
        if (sup_chan_held_back(c)) {
            held = true;
            continue;
        }
        sup_chan_read(c);
        /* What it did may have taken the next one off the list (deleted):
         * the rest is looked at next turn, soon. */
        if (c->rd.on)
            nx = c->rd.next;
        else if (nx && !nx->rd.on) {
            held = true;
            nx = NULL;
        }
        /* Only a context still wanting reads stays (its budget spent). */
        if (!c->chan.rd_wanted || c->fd < 0 || c->deleted || c->chan.bud.waiting)
            sup_ctx_list_remove(SUP_CTX_RD, c);
        else
            held = true;
    }
    return held;
}

void sup_chan_write(sup_ctx *c)
{
    while (c->out.len) {
        ssize_t n = write(c->fd, c->out.data, c->out.len);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR)
                c->out.len = 0; /* EPIPE: the death path reports it */
            return;
        }
        proto_buf_consume(&c->out, (size_t)n);
    }
}
