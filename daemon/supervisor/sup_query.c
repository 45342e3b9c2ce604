/* sup_query: complete, inspect and is_complete (PROTOCOL.md section 5,
 * "Queries"), answered by the context's worker from its live globals.
 *
 * A query waits in the context's FIFO like an execute (it counts toward
 * max_queue) and runs when its turn comes: the worker gets a `query` frame,
 * sends `start` (SIGINT may interrupt it from then on, as for a run) and
 * answers `answer {data}`, whose fields become the `ok` reply. A query has
 * no `accepted`, no output and no execution count; it has a timeout (default
 * 10 s) after which it is interrupted, and killed with the worker past the
 * grace period like a run. */
#include "sup_query.h"

#include "sup_config.h"
#include "sup_ctx.h"
#include "sup_chan.h"
#include "sup_life.h"
#include "sup_run.h"
#include "sup_wproc.h"
#include "sup_log.h"
#include "sup_peer.h"
#include "sup_policy.h"
#include "sup_send.h"

#include "mem.h"
#include "proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUERY_DEFAULT_TIMEOUT 10.0

/* The fields each op's answer must have (the worker is checked, never
 * trusted). */
static const proto_field complete_answer[] = {
    {"matches", PF_ARRAY, true, 10000},
    {"cursor_start", PF_UINT, true, 0},
    {"cursor_end", PF_UINT, true, 0},
    {"metadata", PF_MAP, false, 64},
};
static const proto_field inspect_answer[] = {
    {"found", PF_BOOL, true, 0},
    {"data", PF_STRMAP, true, 64},
    {"metadata", PF_MAP, false, 64},
};
static const proto_field is_complete_answer[] = {
    {"status", PF_STR, true, 16},
    {"indent", PF_STR, true, 256},
};

typedef struct query_kind {
    const char *op; /* the request type and the frame's `op` */
    const proto_field *answer;
    size_t nanswer;
} query_kind;

#define FIELDS(a) a, sizeof a / sizeof a[0]
static const query_kind query_kinds[] = {
    {"complete", FIELDS(complete_answer)},
    {"inspect", FIELDS(inspect_answer)},
    {"is_complete", FIELDS(is_complete_answer)},
};

static const query_kind *find_kind(const char *op)
{
    for (size_t i = 0; i < sizeof query_kinds / sizeof query_kinds[0]; i++)
        if (strcmp(query_kinds[i].op, op) == 0)
            return &query_kinds[i];
    return NULL;
}

/* Characters (code points) in valid UTF-8: the unit of `cursor`, as in
 * Jupyter's messaging protocol 5.2 and Python's str indexes. */
static uint64_t code_points(const char *s, size_t n)
{
    uint64_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += ((unsigned char)s[i] & 0xc0) != 0x80;
    return count;
}

static double num_or(const proto_val *v, double dflt)
{
    if (!v || v->kind == PROTO_NIL)
        return dflt;
    return v->kind == PROTO_UINT    ? (double)v->as.u
           : v->kind == PROTO_INT   ? (double)v->as.i
           : v->kind == PROTO_FLOAT ? v->as.f
                                    : dflt;
}

/* The request's checks beyond the field table, then the queue. */
static const sup_run_kind run_kind;

/* A query's own part of its run: its op (a static string), and the
 * cursor and detail_level that go out in the `query` frame with the code. */
typedef struct query_data {
    const char *op;
    uint64_t cursor, detail_level;
} query_data;

static query_data *Q(const sup_run *r)
{
    return r->data;
}

static void submit(const char *op, const proto_val *msg, const sup_peer *peer)
{
    const proto_val *code = proto_map_get(msg, "code");
    if (code->n > sup_cfg.max_code_bytes) {
        sup_reply_err(peer, "too_large", "field 'code' is %u bytes; max_code_bytes is %zu",
                      (unsigned)code->n, sup_cfg.max_code_bytes);
        return;
    }
    uint64_t len = code_points(code->as.s, code->n);
    const proto_val *cur = proto_map_get(msg, "cursor");
    uint64_t cursor = cur && cur->kind == PROTO_UINT ? cur->as.u : len;
    if (cursor > len) {
        sup_reply_err(peer, "bad_field",
                      "field 'cursor' (%llu) is past the end of 'code' (%llu characters)",
                      (unsigned long long)cursor, (unsigned long long)len);
        return;
    }
    const proto_val *dl = proto_map_get(msg, "detail_level");
    uint64_t detail = dl && dl->kind == PROTO_UINT ? dl->as.u : 0;
    if (detail > 1) {
        sup_reply_err(peer, "bad_field", "field 'detail_level' must be 0 or 1");
        return;
    }
    double timeout = num_or(proto_map_get(msg, "timeout"), QUERY_DEFAULT_TIMEOUT);
    if (!(timeout >= 0) || timeout > 1e9) {
        sup_reply_err(peer, "bad_field", "field 'timeout' must be between 0 and 1e9 seconds");
        return;
    }
    sup_ctx *c = sup_life_lookup(msg, peer, true); /* `default` is made on first use */
    if (!c)
        return;
    if (c->pid == 0 && !c->spawning) {
        sup_reply_err(peer, "dead",
                      "context '%s' has no live worker to ask; run something in it to start "
                      "a new one",
                      c->name);
        return;
    }
    if (c->policy && c->policy->timeout > 0 && (timeout == 0 || timeout > c->policy->timeout))
        timeout = c->policy->timeout;
    if (c->run.queued >= sup_cfg.max_queue) {
        sup_reply_err(peer, "busy", "context '%s' already has %zu requests queued (max_queue)",
                      c->name, c->run.queued);
        return;
    }
    sup_run *r = sup_run_new(&run_kind, peer);
    query_data *q = mem_calloc(1, sizeof *q);
    q->op = find_kind(op)->op;
    r->data = q;
    r->code = mem_strndup(code->as.s, code->n);
    r->code_len = code->n;
    Q(r)->cursor = cursor;
    Q(r)->detail_level = detail;
    r->timeout = timeout;
    sup_run_submit(c, r);
}

void sup_query_complete(const proto_val *msg, const sup_peer *peer)
{
    submit("complete", msg, peer);
}

void sup_query_inspect(const proto_val *msg, const sup_peer *peer)
{
    submit("inspect", msg, peer);
}

void sup_query_is_complete(const proto_val *msg, const sup_peer *peer)
{
    submit("is_complete", msg, peer);
}

static void sup_query_start(sup_ctx *c)
{
    sup_run *r = c->running;
    size_t start = proto_frame_begin(&c->out);
    proto_put_map(&c->out, 6);
    proto_put_str(&c->out, "t");
    proto_put_str(&c->out, "query");
    proto_put_str(&c->out, "run_id");
    proto_put_uint(&c->out, r->run_id);
    proto_put_str(&c->out, "op");
    proto_put_str(&c->out, Q(r)->op);
    proto_put_str(&c->out, "code");
    proto_put_strn(&c->out, r->code, r->code_len);
    proto_put_str(&c->out, "cursor");
    proto_put_uint(&c->out, Q(r)->cursor);
    proto_put_str(&c->out, "detail_level");
    proto_put_uint(&c->out, Q(r)->detail_level);
    proto_frame_end(&c->out, start);
    free(r->code); /* the frame holds it now */
    r->code = NULL;
    c->run.started = c->run.interrupt_wanted = c->run.timed_out = false;
    c->run.t0 = sup_now();
    c->run.deadline = r->timeout > 0 ? c->run.t0 + r->timeout : 0;
    sup_chan_write(c);
}

static void sup_query_abort(const sup_run *r, const char *status, const char *cause)
{
    bool timeout = strcmp(status, "timeout") == 0;
    sup_reply_err(&r->peer, timeout ? "timeout" : "aborted", "the %s query did not complete: %s",
                  Q(r)->op, cause ? cause : status);
}

/* Ends the running query and lets the context go on with its queue. */
static void end_query(sup_ctx *c)
{
    sup_run *r = c->running;
    c->running = NULL;
    if (c->run.timed_out && !c->kill_reason)
        c->kill_at = 0; /* it stopped within the grace period */
    c->run.started = c->run.interrupt_wanted = c->run.timed_out = false;
    c->run.deadline = 0;
    sup_run_free(r);
    sup_run_dispatch(c);
}

static void sup_query_on_answer(sup_ctx *c, const proto_val *msg)
{
    sup_run *r = c->running;
    if (r->kind != &run_kind) {
        sup_wproc_broken(c, "`answer` while no query is under way");
        return;
    }
    const query_kind *k = find_kind(Q(r)->op);
    const proto_val *data = proto_map_get(msg, "data");
    proto_error err;
    if (c->run.timed_out) {
        sup_query_abort(r, "timeout", "it ran past its timeout and was interrupted");
        end_query(c);
        return;
    }
    bool ok = proto_check(data, k->answer, k->nanswer, &err) == 0;
    const proto_val *matches = proto_map_get(data, "matches");
    for (uint32_t i = 0; ok && matches && i < matches->n; i++) {
        const proto_val *m = &matches->as.items[i];
        ok = m->kind == PROTO_STR && proto_utf8_valid(m->as.s, m->n, false);
    }
    if (!ok) {
        sup_reply_err(&r->peer, "internal", "the worker of '%s' gave no usable %s answer", c->name,
                      Q(r)->op);
        end_query(c);
        return;
    }
    proto_buf b;
    proto_buf_init(&b);
    proto_map m = sup_msg_open(&b, "ok", &r->peer);
    for (uint32_t i = 0; i < 2 * data->n; i++)
        proto_put_val(&b, &data->as.items[i]);
    proto_map_count(&m, data->n);
    sup_msg_end(&b, &m);
    sup_deliver(&r->peer, &b);
    proto_buf_free(&b);
    end_query(c);
}

/* The only worker frame that answers a `query`. */
static void query_on_frame(sup_ctx *c, const char *type, const proto_val *msg)
{
    (void)type; /* "answer" (RULE_ANSWER, sup_frame.c) */
    sup_query_on_answer(c, msg);
}

/* The kind's free: the query's part. */
static void query_free(sup_run *r)
{
    free(r->data);
}

/* What sup_run.c and sup_frame.c call for a query run. */
static const sup_run_kind run_kind = {sup_query_start, sup_query_abort, query_on_frame,
                                      query_free,      SUP_RUN_ANSWERS, NULL};
