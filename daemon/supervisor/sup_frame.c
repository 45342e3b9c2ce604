/* sup_frame: the worker's frames, by a table: each frame type's fields,
 * the rule of the worker's state it must fit (PROTOCOL.md section 9, "What
 * the supervisor trusts") and its handler; a frame of a run kind goes to
 * that kind. A worker that breaks a rule is killed. */
#include "sup_frame.h"

#include "sup_chan.h"
#include "sup_ctxinfo.h"
#include "sup_ctxpss.h"
#include "sup_log.h"
#include "sup_outmem.h"
#include "sup_pkgs.h"
#include "sup_policy.h"
#include "sup_run.h"
#include "sup_stats.h"
#include "sup_wproc.h"

#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest traceback line a worker may send (its traceback budget). */
#define TRACEBACK_LINE_MAX (8u * 1024 * 1024)

static void (*after_ok)(sup_ctx *c);

void sup_frame_set_after_ok(void (*fn)(sup_ctx *c))
{
    after_ok = fn;
}

/* What a frame needs of the worker's state to be accepted (PROTOCOL.md
 * section 9, "What the supervisor trusts"). */
typedef enum frame_rule {
    RULE_ANY,    /* at any time (a count of output written between runs) */
    RULE_READY,  /* once per worker */
    RULE_START,  /* a run or query was sent and has not started; its run_id */
    RULE_EVENT,  /* the running run or query has started */
    RULE_DONE,   /* the running run (not a query) has started; its run_id */
    RULE_ANSWER, /* the running query has started; its run_id */
    RULE_FORK,   /* a fork frame is out and unanswered; its run_id */
} frame_rule;

typedef struct frame_kind {
    const char *type;
    const proto_field *fields;
    size_t nfields;
    frame_rule rule;
    void (*handle)(sup_ctx *c, const proto_val *msg); /* NULL: c->running->kind */
} frame_kind;

static void on_ready(sup_ctx *c, const proto_val *msg)
{
    (void)msg;
    if (c->ready) {
        sup_wproc_broken(c, "a second ready");
        return;
    }
    c->ready = true;
    c->creating = false;
    if (c->chan.outmem_fd >= 0) {
        c->chan.outmem = sup_outmem_attach(c->chan.outmem_fd);
        c->chan.outmem_fd = -1;
        if (!c->chan.outmem) {
            sup_wproc_broken(c, "its output memory is not a sealed memfd of the expected size");
            return;
        }
    }
    sup_ctxinfo_reply_ok(c);
    sup_run_dispatch(c);
}

/* `between {bytes}`: output written while no run was active, counted. */
static void on_between(sup_ctx *c, const proto_val *msg)
{
    (void)c;
    sup_stats.between_runs_bytes += proto_map_get(msg, "bytes")->as.u;
}

static void on_start(sup_ctx *c, const proto_val *msg)
{
    (void)msg;
    sup_wproc_take_new_pipes(c);
    sup_run_accept_now(c);
    c->run.started = true;
    c->spare.binding = false;
    if (c->run.interrupt_wanted) {
        c->run.interrupt_wanted = false;
        sup_run_send_sigint(c);
    }
}

/* Counts a stream frame's bytes (the worker's sequence numbers, for
 * recovery after its death), also when the frame is then dropped. */
static bool count_stream(sup_ctx *c, const proto_val *msg)
{
    const proto_val *name = proto_map_get(msg, "name");
    int stream = proto_str_eq(name, "stdout") ? 0 : proto_str_eq(name, "stderr") ? 1 : -1;
    if (stream < 0)
        return false;
    c->chan.stream_recv[stream] += proto_map_get(msg, "data")->n;
    return true;
}

static void on_stream(sup_ctx *c, const proto_val *msg)
{
    const proto_val *name = proto_map_get(msg, "name");
    const proto_val *data = proto_map_get(msg, "data");
    int stream = proto_str_eq(name, "stdout") ? 0 : proto_str_eq(name, "stderr") ? 1 : -1;
    if (stream < 0) {
        sup_wproc_broken(c, "stream name is not stdout or stderr");
        return;
    }
    sup_run_stream(c, stream, (const uint8_t *)data->as.s, data->n);
}

static void on_result(sup_ctx *c, const proto_val *msg)
{
    static const char *const keys[] = {"data"};
    sup_run_relay(c, "result", msg, keys, 1, true);
}

/* display / clear_output: relayed like stream (same outbox, same
 * backpressure); display_id only when the worker sent one. */
static void on_display(sup_ctx *c, const proto_val *msg)
{
    const char *keys[4] = {"data", "metadata"};
    uint32_t n = 2;
    if (proto_map_get(msg, "display_id"))
        keys[n++] = "display_id";
    keys[n++] = "update";
    if (!proto_map_get(msg, "metadata") || !proto_map_get(msg, "update")) {
        sup_wproc_broken(c, "display without metadata or update");
        return;
    }
    sup_run_relay(c, "display", msg, keys, n, false);
}

static void on_clear_output(sup_ctx *c, const proto_val *msg)
{
    static const char *const keys[] = {"wait"};
    sup_run_relay(c, "clear_output", msg, keys, 1, false);
}

/* input() in a run that allows stdin: the client answers with input.reply
 * (sup_run_input_reply); the worker's number `n` goes back with it, so a
 * reply that crosses an interrupted input() is recognised as stale. */
static void on_input_request(sup_ctx *c, const proto_val *msg)
{
    if (!c->running->allow_stdin) {
        sup_wproc_broken(c, "input_request in a run without allow_stdin");
        return;
    }
    c->run.input_waiting = true;
    c->run.input_seq = proto_map_get(msg, "n")->as.u;
    static const char *const keys[] = {"prompt", "password"};
    sup_run_relay(c, "input.request", msg, keys, 2, false);
}

/* `%pip install` in a run (wrk_ipy.c): the worker asks for what
 * pip.install does for its own context and waits for pip_reply {n, value}:
 * value "" once the packages are importable, else the message. The wait
 * is found again by name, incarnation and package directory: a reply for
 * a worker that is gone is dropped, one that crosses an interrupt is
 * dropped by the worker. */
typedef struct pip_wait {
    char name[PROTO_MAX_NAME + 1];
    unsigned incarnation;
    uint64_t n;
    sup_site *site;
} pip_wait;

static void pip_reply(sup_ctx *c, uint64_t n, const char *value)
{
    size_t start = proto_frame_begin(&c->out);
    proto_put_map(&c->out, 3);
    proto_put_str(&c->out, "t");
    proto_put_str(&c->out, "pip_reply");
    proto_put_str(&c->out, "n");
    proto_put_uint(&c->out, n);
    proto_put_str(&c->out, "value");
    proto_put_str(&c->out, value);
    proto_frame_end(&c->out, start);
    sup_chan_write(c);
}

static void pip_installed(void *arg, const sup_pkgs_result *res)
{
    pip_wait *w = arg;
    sup_ctx *c = sup_ctx_find(w->name, strlen(w->name));
    if (c && c->site == w->site && c->incarnation == w->incarnation && c->fd >= 0) {
        proto_error err;
        if (res->error)
            pip_reply(c, w->n, res->error);
        else if (sup_pkgs_link(c->site, res->reqs, res->n, &err) < 0)
            pip_reply(c, w->n, err.msg);
        else
            pip_reply(c, w->n, "");
    }
    sup_pkgs_site_unref(w->site);
    free(w);
}

static void on_pip_request(sup_ctx *c, const proto_val *msg)
{
    uint64_t n = proto_map_get(msg, "n")->as.u;
    char **reqs;
    size_t nreqs;
    proto_error err;
    if (sup_pkgs_parse(proto_map_get(msg, "packages"), "packages", &reqs, &nreqs, &err) < 0) {
        pip_reply(c, n, err.msg);
        return;
    }
    if (!sup_pkgs_enabled() || !c->site) {
        pip_reply(c, n,
                  "this daemon offers no packages: start it with --wheelhouse DIR or "
                  "--package-index URL");
        sup_pkgs_free_reqs(reqs, nreqs);
        return;
    }
    pip_wait *w = mem_calloc(1, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s", c->name);
    w->incarnation = c->incarnation;
    w->n = n;
    w->site = sup_pkgs_site_ref(c->site);
    sup_pkgs_fetch(reqs, nreqs, pip_installed, w);
    sup_pkgs_free_reqs(reqs, nreqs);
}

static void on_error(sup_ctx *c, const proto_val *msg)
{
    const proto_val *tb = proto_map_get(msg, "traceback");
    for (uint32_t i = 0; i < tb->n; i++) {
        const proto_val *line = &tb->as.items[i];
        if (line->kind != PROTO_STR || line->n > TRACEBACK_LINE_MAX ||
            !proto_utf8_valid(line->as.s, line->n, true)) {
            sup_wproc_broken(c, "a traceback line is not a str of at most 8 MiB");
            return;
        }
    }
    static const char *const keys[] = {"ename", "evalue", "traceback"};
    sup_run_relay(c, "error", msg, keys, 3, false);
}

/* done.artifacts: [{path: str, size: uint, type: str}] */
static bool artifacts_valid(const proto_val *a)
{
    static const proto_field fields[] = {
        {"path", PF_STR, true, 4096},
        {"size", PF_UINT, true, 0},
        {"type", PF_STR, true, 256},
    };
    for (uint32_t i = 0; i < a->n; i++) {
        proto_error err;
        const proto_val *item = &a->as.items[i];
        if (item->kind != PROTO_MAP || item->n != 3 ||
            proto_check(item, fields, sizeof fields / sizeof fields[0], &err) < 0)
            return false;
    }
    return true;
}

static void on_done(sup_ctx *c, const proto_val *msg)
{
    const proto_val *status = proto_map_get(msg, "status");
    const proto_val *cpu = proto_map_get(msg, "cpu_time");
    static const char *const allowed[] = {"ok", "error", "interrupted"};
    const char *st = NULL;
    for (size_t i = 0; i < 3 && !st; i++)
        if (proto_str_eq(status, allowed[i]))
            st = allowed[i];
    if (!st) {
        sup_wproc_broken(c, "unknown run status");
        return;
    }
    if (c->run.timed_out && strcmp(st, "interrupted") == 0)
        st = "timeout";
    const proto_val *arts = proto_map_get(msg, "artifacts");
    if (arts && !artifacts_valid(arts)) {
        sup_wproc_broken(c, "malformed artifacts");
        return;
    }
    const proto_val *code = proto_map_get(msg, "exit_code");
    if (code && (code->kind != PROTO_UINT || code->as.u > 255)) {
        sup_wproc_broken(c, "malformed exit_code");
        return;
    }
    sup_run_end e = {.status = st, .artifacts = arts, .exit_code = code};
    char cause[160];
    if (c->run.timed_out && c->run.cpu_exceeded && strcmp(st, "timeout") == 0) {
        snprintf(cause, sizeof cause,
                 "cpu_seconds: the context used more than its %g s of CPU in this run",
                 c->policy->cpu_seconds);
        e.cause = cause;
    }
    if (cpu)
        e.cpu_time = cpu->kind == PROTO_FLOAT  ? cpu->as.f
                     : cpu->kind == PROTO_UINT ? (double)cpu->as.u
                                               : 0.0;
    bool was_ok = strcmp(st, "ok") == 0;
    sup_ctxpss_want(c); /* the run may have changed it */
    sup_run_finish(c, &e);
    if (was_ok && after_ok)
        after_ok(c); /* an autosnapshot, queued behind what waits */
    sup_run_dispatch(c);
}

static const proto_field stream_fields[] = {
    {"name", PF_STR, true, 16},
    {"data", PF_BIN, true, PROTO_STREAM_CHUNK},
};
static const proto_field result_fields[] = {{"data", PF_STRMAP, true, 64}};
static const proto_field display_fields[] = {
    {"data", PF_STRMAP, true, 64},
    {"metadata", PF_MAP, true, 64},
    {"display_id", PF_STR, false, 256},
    {"update", PF_BOOL, true, 0},
};
static const proto_field clear_output_fields[] = {{"wait", PF_BOOL, true, 0}};
static const proto_field answer_fields[] = {
    {"run_id", PF_UINT, true, 0},
    {"data", PF_MAP, true, 64},
};
static const proto_field between_fields[] = {{"bytes", PF_UINT, true, 0}};
static const proto_field input_request_fields[] = {
    {"prompt", PF_STR, true, 1u << 16},
    {"password", PF_BOOL, true, 0},
    {"n", PF_UINT, true, 0},
};
static const proto_field pip_request_fields[] = {
    {"n", PF_UINT, true, 0},
    {"packages", PF_ARRAY, true, SUP_PKGS_MAX},
};
static const proto_field error_fields[] = {
    {"ename", PF_STR, true, 4096},
    {"evalue", PF_STR, true, 1u << 20},
    {"traceback", PF_ARRAY, true, 10000},
};
static const proto_field done_fields[] = {
    {"run_id", PF_UINT, true, 0},     {"status", PF_STR, true, 32},
    {"cpu_time", PF_NUM, false, 0},   {"artifacts", PF_ARRAY, false, 1000},
    {"exit_code", PF_UINT, false, 0},
};
static const proto_field ready_fields[] = {{"pid", PF_UINT, false, 0}};
static const proto_field start_fields[] = {{"run_id", PF_UINT, true, 0}};
static const proto_field forked_fields[] = {
    {"run_id", PF_UINT, true, 0},
    {"pid", PF_UINT, true, 0},
};
static const proto_field fork_failed_fields[] = {
    {"run_id", PF_UINT, true, 0},
    {"message", PF_STR, true, 4096},
};

#define FIELDS(a) a, sizeof a / sizeof a[0]
static const frame_kind frame_kinds[] = {
    {"ready", FIELDS(ready_fields), RULE_READY, on_ready},
    {"start", FIELDS(start_fields), RULE_START, on_start},
    {"between", FIELDS(between_fields), RULE_ANY, on_between},
    {"stream", FIELDS(stream_fields), RULE_EVENT, on_stream},
    {"result", FIELDS(result_fields), RULE_EVENT, on_result},
    {"display", FIELDS(display_fields), RULE_EVENT, on_display},
    {"clear_output", FIELDS(clear_output_fields), RULE_EVENT, on_clear_output},
    {"input_request", FIELDS(input_request_fields), RULE_EVENT, on_input_request},
    {"pip_request", FIELDS(pip_request_fields), RULE_EVENT, on_pip_request},
    {"error", FIELDS(error_fields), RULE_EVENT, on_error},
    {"done", FIELDS(done_fields), RULE_DONE, on_done},
    {"answer", FIELDS(answer_fields), RULE_ANSWER, NULL},
    {"forked", FIELDS(forked_fields), RULE_FORK, NULL},
    {"fork_failed", FIELDS(fork_failed_fields), RULE_FORK, NULL},
};

/* Checks a well-formed frame against the worker's state; NULL when it is
 * acceptable, else the rule it breaks (in why). A worker's frames can be
 * forged by its user code, so every one must fit what the supervisor
 * itself sent. */
static const char *frame_breaks_rule(const sup_ctx *c, const frame_kind *k, const proto_val *msg,
                                     char *why, size_t n)
{
    const sup_run *r = c->running;
    unsigned frames = r && r->kind ? r->kind->frames : 0;
    bool is_fork = frames & SUP_RUN_FORKS;
    bool is_query = frames & SUP_RUN_ANSWERS;
    switch (k->rule) {
    case RULE_ANY:
        return NULL;
    case RULE_READY:
        return NULL; /* on_ready refuses a second one */
    case RULE_START:
        if (!r || is_fork)
            snprintf(why, n, "`start` while no run or query is under way");
        else if (c->run.started)
            snprintf(why, n, "a second `start` for one run");
        break;
    case RULE_EVENT:
        if (!r || is_fork)
            snprintf(why, n, "`%s` while no run is under way", k->type);
        else if (!c->run.started)
            snprintf(why, n, "`%s` before `start`", k->type);
        return n && why[0] ? why : NULL;
    case RULE_DONE:
        if (!r || is_fork || is_query)
            snprintf(why, n, "`done` while no run is under way");
        else if (!c->run.started)
            snprintf(why, n, "`done` before `start`");
        break;
    case RULE_ANSWER:
        if (!is_query)
            snprintf(why, n, "`answer` while no query is under way");
        else if (!c->run.started)
            snprintf(why, n, "`answer` before `start`");
        break;
    case RULE_FORK:
        if (!is_fork || (r->kind->sent && !r->kind->sent(r)))
            snprintf(why, n, "`%s` while no fork is under way", k->type);
        break;
    }
    if (why[0])
        return why;
    /* The frame carries an id: it must be the one sent for this run. */
    if (proto_map_get(msg, "run_id")->as.u != r->run_id)
        snprintf(why, n, "`%s` carries a run id that is not the running one's", k->type);
    return why[0] ? why : NULL;
}

void sup_frame_handle(sup_ctx *c, const uint8_t *body, size_t len)
{
    proto_doc doc;
    proto_error err;
    if (proto_decode(&doc, body, len, &err) < 0) {
        sup_wproc_broken(c, err.msg);
        return;
    }
    const proto_val *msg = &doc.nodes[0];
    const proto_val *t = proto_map_get(msg, "t");
    const frame_kind *k = NULL;
    for (size_t i = 0; i < sizeof frame_kinds / sizeof frame_kinds[0] && !k; i++)
        if (proto_str_eq(t, frame_kinds[i].type))
            k = &frame_kinds[i];
    char why[160] = "";
    if (!k)
        sup_wproc_broken(c, "unknown frame type");
    else if (proto_check(msg, k->fields, k->nfields, &err) < 0)
        sup_wproc_broken(c, err.msg);
    else if (frame_breaks_rule(c, k, msg, why, sizeof why))
        sup_wproc_broken(c, why);
    else if (k->handle == on_stream && !count_stream(c, msg))
        sup_wproc_broken(c, "stream name is not stdout or stderr");
    else if (k->rule == RULE_EVENT && c->running->kind &&
             (c->running->kind->frames & SUP_RUN_ANSWERS))
        ;                /* a query has no output or result: whatever it made is dropped */
    else if (!k->handle) /* answer, forked, fork_failed: the run's kind's */
        c->running->kind->on_frame(c, k->type, msg);
    else
        k->handle(c, msg);
    proto_doc_free(&doc);
}
