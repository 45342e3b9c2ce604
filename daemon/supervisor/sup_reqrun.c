/* sup_reqrun: the requests on a context's runs (sup_reqrun.h): execute
 * queues one, interrupt stops the running one, input.reply answers its
 * input(). */
#include "sup_reqrun.h"

#include "sup_config.h"
#include "sup_ctx.h"
#include "sup_life.h"
#include "sup_policy.h"
#include "sup_reqarg.h"
#include "sup_run.h"
#include "sup_send.h"

#include "mem.h"
#include "proto.h"

#include <string.h>

/* An execute's argv (sys.argv of a script run): str items without NUL
 * bytes (a process's arguments cannot hold one), at most 1 MiB in all. */
static int argv_check(const proto_val *argv, const sup_peer *peer)
{
    size_t total = 0;
    for (uint32_t i = 0; argv && argv->kind == PROTO_ARRAY && i < argv->n; i++) {
        const proto_val *a = &argv->as.items[i];
        if (a->kind != PROTO_STR || memchr(a->as.s, '\0', a->n)) {
            sup_reply_err(peer, "bad_field",
                          "field 'argv': item %u must be a str without NUL bytes", (unsigned)i);
            return -1;
        }
        total += a->n;
    }
    if (total > (1u << 20)) {
        sup_reply_err(peer, "too_large", "field 'argv' holds %zu bytes; max 1048576", total);
        return -1;
    }
    return 0;
}

/* execute: every field checked before the run is queued on its context
 * (the default one made on first use); the run's own frames answer it, an
 * `err` a bad field. The policy's timeout caps the one asked. */
void sup_reqrun_execute(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *code = sup_reqarg_get(msg, "code");
    if (code->n > sup_cfg.max_code_bytes) {
        sup_reply_err(peer, "too_large", "field 'code' is %u bytes; max_code_bytes is %zu",
                      (unsigned)code->n, sup_cfg.max_code_bytes);
        return;
    }
    double timeout = sup_reqarg_num_value(sup_reqarg_get(msg, "timeout"), sup_cfg.default_timeout);
    if (!(timeout >= 0) || timeout > 1e9) {
        sup_reply_err(peer, "bad_field", "field 'timeout' must be between 0 and 1e9 seconds");
        return;
    }
    const char *syntax = sup_reqarg_syntax_value(sup_reqarg_get(msg, "syntax"), peer);
    if (!syntax)
        return;
    const proto_val *env = sup_reqarg_get(msg, "env");
    char **unused;
    size_t nunused;
    if (sup_reqarg_env_strings(env, &unused, &nunused, peer) < 0)
        return;
    sup_reqarg_free_strings(unused, nunused);
    const proto_val *argv = sup_reqarg_get(msg, "argv");
    const proto_val *file = sup_reqarg_get(msg, "file");
    if (argv_check(argv, peer) < 0)
        return;
    if (file && file->kind == PROTO_STR && (file->n == 0 || memchr(file->as.s, '\0', file->n))) {
        sup_reply_err(peer, "bad_field", "field 'file' must be a non-empty path without NUL bytes");
        return;
    }
    sup_ctx *c = sup_life_lookup(msg, peer, true);
    if (!c)
        return;
    /* The policy's timeout caps every run of the context. */
    if (c->policy && c->policy->timeout > 0 && (timeout == 0 || timeout > c->policy->timeout))
        timeout = c->policy->timeout;
    if (c->run.queued >= sup_cfg.max_queue) {
        sup_reply_err(peer, "busy", "context '%s' already has %zu runs queued (max_queue)", c->name,
                      c->run.queued);
        return;
    }
    sup_run *r = sup_run_new(NULL, peer);
    r->code = mem_strndup(code->as.s, code->n);
    r->code_len = code->n;
    if (env)
        proto_put_val(&r->env, env);
    r->timeout = timeout;
    const proto_val *silent = sup_reqarg_get(msg, "silent");
    const proto_val *soe = sup_reqarg_get(msg, "stop_on_error");
    r->silent = silent && silent->kind == PROTO_BOOL && silent->as.b;
    r->stop_on_error = soe && soe->kind == PROTO_BOOL && soe->as.b;
    const proto_val *stdin_ok = sup_reqarg_get(msg, "allow_stdin");
    r->allow_stdin = stdin_ok && stdin_ok->kind == PROTO_BOOL && stdin_ok->as.b;
    const proto_val *arts = sup_reqarg_get(msg, "artifacts");
    r->artifacts = arts && arts->kind == PROTO_BOOL && arts->as.b;
    if (argv && argv->kind == PROTO_ARRAY) { /* forwarded to the worker verbatim */
        proto_put_str(&r->script, "argv");
        proto_put_val(&r->script, argv);
        r->script_n++;
    }
    if (file && file->kind == PROTO_STR) {
        proto_put_str(&r->script, "file");
        proto_put_val(&r->script, file);
        r->script_n++;
    }
    r->syntax = syntax;
    sup_run_submit(c, r);
}

/* Whether r is the run peer started with request id `id`. */
static bool run_matches(const sup_run *r, const sup_peer *peer, const proto_val *id)
{
    proto_buf b;
    proto_buf_init(&b);
    proto_put_val(&b, id);
    bool same = b.len == r->peer.re_len && memcmp(b.data, r->peer.re, b.len) == 0 &&
                peer->route_len == r->peer.route_len &&
                memcmp(peer->route, r->peer.route, peer->route_len) == 0;
    proto_buf_free(&b);
    return same;
}

/* interrupt [run]: interrupts the context's running execute (only the one
 * named by `run`, when given); `ok {interrupted}` says whether it did. */
void sup_reqrun_interrupt(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *c = sup_life_lookup(msg, peer, false);
    if (!c)
        return;
    /* With `run`, only that execute of this client is interrupted, so an
     * interrupt that races with the run's end cannot hit the next one. */
    const proto_val *run = sup_reqarg_get(msg, "run");
    bool interrupted = false;
    if (!run || (c->running && run_matches(c->running, peer, run)))
        interrupted = sup_run_interrupt(c);
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 1);
    proto_put_str(&b, "interrupted");
    proto_put_bool(&b, interrupted);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

/* input.reply: the line input() returns in the run waiting on ctx. */
void sup_reqrun_input_reply(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *c = sup_life_lookup(msg, peer, false);
    if (!c)
        return;
    const proto_val *value = sup_reqarg_get(msg, "value");
    const proto_val *eof = sup_reqarg_get(msg, "eof");
    bool declined = eof && eof->as.b;
    if (!value && !declined) {
        sup_reply_err(peer, "bad_field", "field 'value' is required (unless 'eof' is true)");
        return;
    }
    if (!sup_run_input_reply(c, value ? value->as.s : "", value ? value->n : 0, declined)) {
        sup_reply_err(peer, "no_input", "no run on context '%s' is waiting for input", c->name);
        return;
    }
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 0);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}
