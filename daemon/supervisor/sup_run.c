/* sup_run: each context's FIFO of runs: queueing, sending the running
 * one's frame to the worker, its interrupt and input, and its replies to
 * the client (accepted, stream, events, done), in order behind what a slow
 * client holds. */
#include "sup_run.h"

#include "sup_cgroup.h"
#include "sup_chan.h"
#include "sup_config.h"
#include "sup_ctxpss.h"
#include "sup_log.h"
#include "sup_policy.h"
#include "sup_send.h"
#include "sup_stats.h"
#include "sup_wproc.h"

#include "mem.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static sup_run_client_fn to_client = sup_send_take;

void sup_run_set_client(sup_run_client_fn fn)
{
    to_client = fn ? fn : sup_send_take;
}

sup_run *sup_run_new(const sup_run_kind *kind, const sup_peer *peer)
{
    sup_run *r = mem_calloc(1, sizeof *r);
    r->kind = kind;
    if (peer)
        r->peer = *peer;
    return r;
}

void sup_run_free(sup_run *r)
{
    if (!r)
        return;
    if (r->kind && r->kind->free)
        r->kind->free(r);
    free(r->code);
    proto_buf_free(&r->env);
    proto_buf_free(&r->script);
    free(r);
}

void sup_run_send(sup_ctx *c, const sup_peer *peer, proto_buf *body)
{
    if (peer->route_len == 0) /* an internal run (a spare's warm-up): no client */
        return;
    int rc = c->pending.head ? -1 : to_client(peer, body);
    if (rc < 0) {
        sup_outq_push(&c->pending, peer, body);
        sup_ctx_arm(c);
    } else if (rc == 1 && sup_cfg.interrupt_on_disconnect && c->running &&
               &c->running->peer == peer && !c->running->client_gone) {
        /* --on-disconnect interrupt: nobody will read this run's output */
        c->running->client_gone = true;
        sup_run_interrupt(c);
    }
}

/* The run's `accepted`: its count, its incarnation, and the death (and
 * restored snapshot) of the incarnation before, shown once. */
static void send_accepted(sup_ctx *c, sup_run *r)
{
    bool show_death = c->death_unshown && c->last_death;
    bool show_restored = show_death && c->restored_from;
    proto_buf b;
    proto_buf_init(&b);
    proto_map m = sup_msg_open(&b, "accepted", &r->peer);
    proto_key(&b, &m, "ctx");
    proto_put_str(&b, c->name);
    proto_key(&b, &m, "execution_count");
    proto_put_uint(&b, c->execution_count);
    proto_key(&b, &m, "incarnation");
    proto_put_uint(&b, c->incarnation);
    if (show_death) {
        proto_key(&b, &m, "previous_death");
        proto_put_str(&b, c->last_death);
        c->death_unshown = false;
    }
    if (show_restored) { /* state restored from an autosnapshot (sup_snap.c) */
        proto_key(&b, &m, "restored_from");
        proto_put_str(&b, c->restored_from);
        free(c->restored_from);
        c->restored_from = NULL;
    }
    sup_msg_end(&b, &m);
    sup_run_send(c, &r->peer, &b);
    proto_buf_free(&b);
}

void sup_run_accept_now(sup_ctx *c)
{
    if (c->running && c->running->accept_due) {
        c->running->accept_due = false;
        send_accepted(c, c->running);
    }
}

static void send_done(sup_ctx *c, sup_run *r, const sup_run_end *e, double duration)
{
    if (r->kind) { /* a ctx.fork that will not happen, a query not answered */
        r->kind->abort(r, e->status, e->cause);
        return;
    }
    proto_buf b;
    proto_buf_init(&b);
    uint64_t dropped = r->dropped[0] + r->dropped[1];
    proto_map m = sup_msg_open(&b, "done", &r->peer);
    proto_key(&b, &m, "status");
    proto_put_str(&b, e->status);
    proto_key(&b, &m, "execution_count");
    proto_put_uint(&b, c->execution_count);
    proto_key(&b, &m, "incarnation");
    proto_put_uint(&b, c->incarnation);
    proto_key(&b, &m, "duration");
    proto_put_double(&b, duration);
    proto_key(&b, &m, "cpu_time");
    proto_put_double(&b, e->cpu_time);
    proto_key(&b, &m, "truncated");
    proto_put_bool(&b, dropped != 0);
    proto_key(&b, &m, "state_lost");
    proto_put_bool(&b, e->state_lost);
    if (e->cause) {
        proto_key(&b, &m, "cause");
        proto_put_str(&b, e->cause);
    }
    if (dropped) {
        proto_key(&b, &m, "dropped");
        proto_put_map(&b, 2);
        proto_put_str(&b, "stdout");
        proto_put_uint(&b, r->dropped[0]);
        proto_put_str(&b, "stderr");
        proto_put_uint(&b, r->dropped[1]);
    }
    if (e->artifacts) {
        proto_key(&b, &m, "artifacts");
        proto_put_val(&b, e->artifacts);
    }
    if (e->exit_code) {
        proto_key(&b, &m, "exit_code");
        proto_put_uint(&b, e->exit_code->as.u);
    }
    sup_msg_end(&b, &m);
    sup_run_send(c, &r->peer, &b);
    proto_buf_free(&b);
    if (r->peer.route_len) /* not an internal run */
        sup_stats_run(c->name, e->status, duration, r->out_bytes);
}

void sup_run_abort_queue(sup_ctx *c, const char *cause)
{
    sup_run_end e = {.status = "aborted", .cause = cause};
    sup_run *r;
    while ((r = c->run.queue) != NULL) {
        c->run.queue = r->next;
        send_done(c, r, &e, 0.0);
        sup_run_free(r);
    }
    c->run.queue_tail = NULL;
    c->run.queued = 0;
}

void sup_run_finish(sup_ctx *c, const sup_run_end *e)
{
    sup_run *r = c->running;
    sup_run_accept_now(c); /* ended before its start came (the worker died) */
    c->running = NULL;
    send_done(c, r, e, sup_now() - c->run.t0);
    if (c->run.timed_out && !c->kill_reason)
        c->kill_at = 0; /* it stopped within the grace period */
    c->run.started = c->run.interrupt_wanted = c->run.timed_out = c->run.cpu_exceeded = false;
    c->run.interrupt_sent = false;
    c->run.input_waiting = false;
    c->run.deadline = c->run.cpu_check = 0;
    c->run.cpu0 = -1;
    if (r->stop_on_error && strcmp(e->status, "ok") != 0)
        sup_run_abort_queue(c, "an earlier run on this context failed (stop_on_error)");
    sup_run_free(r);
    sup_ctx_touch(c);
    if (c->spare.on && c->pid > 0) /* warmed up: its figure ready for the INFO of ctx.create */
        (void)sup_ctxpss_ask(c, sup_now()); /* no slot: INFO reads it (no figure yet) */
}

/* A run id a worker cannot guess (a frame of another run must not pass
 * as this one's): random, never 0, drawn 64 at a time (one getrandom per 64 runs). */
static uint64_t new_run_id(void)
{
    static uint64_t pool[64];
    static size_t left;
    uint64_t v = 0;
    while (v == 0) {
        if (left == 0) {
            if (getrandom(pool, sizeof pool, 0) != (ssize_t)sizeof pool)
                fatal("getrandom: %s", strerror(errno));
            left = sizeof pool / sizeof pool[0];
        }
        v = pool[--left];
        pool[left] = 0; /* used once */
    }
    return v;
}

void sup_run_send_sigint(sup_ctx *c)
{
    sup_wproc_signal(c, SIGINT);
    c->run.interrupt_sent = true;
}

void sup_run_interrupt_running(sup_ctx *c)
{
    if (c->run.started)
        sup_run_send_sigint(c);
    else
        c->run.interrupt_wanted = true;
}

void sup_run_relay(sup_ctx *c, const char *type, const proto_val *msg, const char *const *keys,
                   uint32_t nkeys, bool with_count)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_map m = sup_msg_open(&b, type, &c->running->peer);
    if (with_count) {
        proto_key(&b, &m, "execution_count");
        proto_put_uint(&b, c->execution_count);
    }
    for (uint32_t i = 0; i < nkeys; i++) {
        proto_key(&b, &m, keys[i]);
        proto_put_val(&b, proto_map_get(msg, keys[i]));
    }
    sup_msg_end(&b, &m);
    sup_run_send(c, &c->running->peer, &b);
    proto_buf_free(&b);
}

/* Bytes of n that fit under cap when used are already sent (cap 0: no cap). */
static size_t fit(size_t n, uint64_t used, uint64_t cap)
{
    if (!cap)
        return n;
    uint64_t room = used < cap ? cap - used : 0;
    return n < room ? n : (size_t)room;
}

void sup_run_stream(sup_ctx *c, int stream, const uint8_t *data, size_t n)
{
    static const char *const names[] = {"stdout", "stderr"};
    static const char *const fields[] = {"stdout_max_bytes", "stderr_max_bytes"};
    sup_run *r = c->running;
    uint64_t stream_cap = c->policy ? c->policy->stream_max[stream] : 0;
    size_t keep = fit(n, r->out_bytes, sup_cfg.max_output);
    size_t keep_stream = fit(n, r->stream_bytes[stream], stream_cap);
    bool by_policy = keep_stream < keep;
    if (by_policy)
        keep = keep_stream;
    (stream ? &sup_stats.stderr_bytes : &sup_stats.stdout_bytes)[0] += keep;
    if (keep) {
        proto_buf b;
        proto_buf_init(&b);
        proto_buf_reserve(&b, keep + 128); /* one allocation, no regrowth */
        proto_map m = sup_msg_open(&b, "stream", &r->peer);
        proto_key(&b, &m, "name");
        proto_put_str(&b, names[stream]);
        proto_key(&b, &m, "data");
        proto_put_bin(&b, data, keep);
        sup_msg_end(&b, &m);
        sup_run_send(c, &r->peer, &b);
        proto_buf_free(&b);
        r->out_bytes += keep;
        r->stream_bytes[stream] += keep;
    }
    if (keep == n)
        return;
    bool first = r->dropped[stream] == 0;
    r->dropped[stream] += n - keep;
    sup_stats.truncated_bytes += n - keep;
    if (first) {
        char note[200];
        int len = by_policy
                      ? snprintf(note, sizeof note,
                                 "\n[ctxd: %s truncated: this run reached the policy's %s (%llu "
                                 "bytes); the rest is dropped and counted in done.dropped]\n",
                                 names[stream], fields[stream], (unsigned long long)stream_cap)
                      : snprintf(note, sizeof note,
                                 "\n[ctxd: output truncated: this run reached max_output (%llu "
                                 "bytes); the rest is dropped and counted in done.dropped]\n",
                                 (unsigned long long)sup_cfg.max_output);
        proto_buf b;
        proto_buf_init(&b);
        proto_map m = sup_msg_open(&b, "stream", &r->peer);
        proto_key(&b, &m, "name");
        proto_put_str(&b, "stderr");
        proto_key(&b, &m, "data");
        proto_put_bin(&b, note, (size_t)len);
        sup_msg_end(&b, &m);
        sup_run_send(c, &r->peer, &b);
        proto_buf_free(&b);
    }
}

bool sup_run_input_reply(sup_ctx *c, const char *value, size_t len, bool eof)
{
    if (!c->running || !c->run.input_waiting || c->fd < 0)
        return false;
    c->run.input_waiting = false;
    size_t start = proto_frame_begin(&c->out);
    proto_map m = proto_map_open(&c->out);
    proto_key(&c->out, &m, "t");
    proto_put_str(&c->out, "input_reply");
    proto_key(&c->out, &m, "value");
    proto_put_strn(&c->out, value, len);
    if (eof) { /* the client declined: input() raises EOFError */
        proto_key(&c->out, &m, "eof");
        proto_put_bool(&c->out, true);
    }
    proto_key(&c->out, &m, "n");
    proto_put_uint(&c->out, c->run.input_seq);
    proto_map_close(&c->out, &m);
    proto_frame_end(&c->out, start);
    sup_chan_write(c);
    return true;
}

void sup_run_dispatch(sup_ctx *c)
{
    if (c->running || !c->ready || c->chan.eof || c->kill_reason || !c->run.queue)
        return;
    sup_run *r = c->run.queue;
    c->run.queue = r->next;
    if (!c->run.queue)
        c->run.queue_tail = NULL;
    c->run.queued--;
    r->next = NULL;
    c->running = r;
    r->run_id = new_run_id();
    sup_ctx_touch(c);
    if (r->kind) {      /* ctx.fork, complete, inspect, is_complete: its turn */
        sup_ctx_arm(c); /* its deadline, set by the kind */
        r->kind->start(c);
        return;
    }
    if (!r->silent)
        c->execution_count++;
    size_t start = proto_frame_begin(&c->out);
    proto_map m = proto_map_open(&c->out);
    proto_key(&c->out, &m, "t");
    proto_put_str(&c->out, "run");
    proto_key(&c->out, &m, "run_id");
    proto_put_uint(&c->out, r->run_id);
    proto_key(&c->out, &m, "code");
    proto_put_strn(&c->out, r->code, r->code_len);
    proto_key(&c->out, &m, "execution_count");
    proto_put_uint(&c->out, c->execution_count);
    proto_key(&c->out, &m, "silent");
    proto_put_bool(&c->out, r->silent);
    proto_key(&c->out, &m, "allow_stdin");
    proto_put_bool(&c->out, r->allow_stdin);
    proto_key(&c->out, &m, "artifacts");
    proto_put_bool(&c->out, r->artifacts);
    proto_key(&c->out, &m, "env");
    if (r->env.len)
        proto_buf_append(&c->out, r->env.data, r->env.len);
    else
        proto_put_map(&c->out, 0);
    proto_buf_append(&c->out, r->script.data, r->script.len); /* argv, file */
    proto_map_count(&m, r->script_n);
    proto_key(&c->out, &m, "syntax"); /* last: forged-frame tests rely on it */
    proto_put_str(&c->out, r->syntax ? r->syntax : "");
    proto_map_close(&c->out, &m);
    proto_frame_end(&c->out, start);
    free(r->code); /* the frame holds it now */
    r->code = NULL;
    sup_chan_write(c);
    c->run.started = c->run.interrupt_wanted = c->run.timed_out = c->run.interrupt_sent = false;
    c->run.t0 = sup_now();
    c->run.deadline = r->timeout > 0 ? c->run.t0 + r->timeout : 0;
    c->run.cpu0 = c->policy && c->policy->cpu_seconds > 0 ? sup_cgroup_cpu(c->cgroup) : -1;
    c->run.cpu_check = 0;
    /* The tick has this run's deadline to watch (no turn before it) or a
     * CPU budget to check from now on; nothing timed otherwise. */
    if (c->run.cpu0 >= 0) {
        sup_ctx_arm(c);
    } else if (c->run.deadline > 0) {
        sup_ctx_list_push(SUP_CTX_TIMED, c);
        sup_timer_moved_to(c->run.deadline);
    }
    r->accept_due = true;
}

void sup_run_submit(sup_ctx *c, sup_run *r)
{
    if (c->pid == 0 && !c->spawning) {
        proto_error err;
        if (sup_wproc_spawn(c, &err) < 0) {
            c->running = r;
            c->run.t0 = sup_now();
            sup_run_end e = {.status = "aborted", .cause = err.msg};
            sup_run_finish(c, &e);
            return;
        }
    }
    r->next = NULL;
    if (c->run.queue_tail)
        c->run.queue_tail->next = r;
    else
        c->run.queue = r;
    c->run.queue_tail = r;
    c->run.queued++;
    sup_run_dispatch(c);
}

bool sup_run_interrupt(sup_ctx *c)
{
    if (!c->running || (c->running->kind && (c->running->kind->frames & SUP_RUN_FORKS)))
        return false;
    sup_run_interrupt_running(c);
    return true;
}
