/* libctxd, runs: execute and submit, the list of runs in flight, one
 * handler per event type (accepted, stream, result, display, clear_output,
 * input.request, error, done) dispatched from a table, and the event-loop
 * form (ctxd_step, ctxd_fd, ctxd_timeout_ms). See ctxd_int.h for how the
 * parts fit. */
#include "ctxd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest wait between two on_wait calls during ctxd_execute. */
#define WAIT_SLICE_MS 100

/* ---- the run list ------------------------------------------------------ */

/* The run in flight with this id (not detached or ended), or NULL. */
static run *find_run(ctxd_client *c, uint64_t id)
{
    for (run *r = c->runs; r; r = r->next)
        if (r->id == id && !r->removed)
            return r;
    return NULL;
}

/* Unlinks and frees the runs marked removed (never while a callback runs:
 * the run being dispatched may be one of them). */
static void sweep(ctxd_client *c)
{
    if (c->depth > 0)
        return;
    run **p = &c->runs;
    while (*p) {
        run *r = *p;
        if (r->removed && !r->blocking) {
            *p = r->next;
            free(r->ctx);
            free(r->cause);
            free(r->err_code);
            free(r->err_msg);
            free(r);
        } else {
            p = &r->next;
        }
    }
}

/* Frees a blocking run once ctxd_execute has read it. */
static void drop_blocking(ctxd_client *c, run *r)
{
    r->blocking = false;
    r->removed = true;
    if (!r->ended && c->nactive > 0)
        c->nactive--;
    r->ended = true;
    sweep(c);
}

/* Ends a run: records the outcome for a blocking waiter, calls on_done,
 * marks it for removal. out is NULL when rc < 0 (code/message then say
 * why). */
static void end_run(ctxd_client *c, run *r, int rc, const ctxd_outcome *out, const char *code,
                    const char *message)
{
    if (r->ended)
        return;
    r->ended = true;
    if (c->nactive > 0)
        c->nactive--;
    if (r->blocking) {
        r->rc = rc;
        if (out) {
            r->out = *out;
            r->cause = out->cause ? mem_strdup(out->cause) : NULL;
            r->out.cause = r->cause;
        } else {
            r->err_code = mem_strdup(code ? code : "");
            r->err_msg = mem_strdup(message ? message : "");
        }
    }
    if (r->cb.on_done) {
        ctxd_run_end end = {.run = r->id,
                            .rc = rc,
                            .outcome = out,
                            .code = rc < 0 && code ? code : "",
                            .message = rc < 0 && message ? message : ""};
        c->depth++;
        r->cb.on_done(r->user, &end);
        c->depth--;
    }
    r->removed = true;
}

/* Ends every run in flight with rc, the last error as its code and
 * message. */
static void end_all(ctxd_client *c, int rc)
{
    char code[sizeof c->last_code], msg[sizeof c->last_msg];
    snprintf(code, sizeof code, "%s", c->last_code);
    snprintf(msg, sizeof msg, "%s", c->last_msg);
    for (run *r = c->runs; r; r = r->next)
        if (!r->ended && !r->removed)
            end_run(c, r, rc, NULL, code, msg);
}

/* A message answering re is for a run the list still tracks. */
static bool claims(ctxd_client *c, uint64_t re)
{
    return find_run(c, re) != NULL;
}

/* Registers the run list with the transport: a lost connection ends the
 * runs in flight, and their messages are parked by control requests. */
void ctxd_run_attach(ctxd_client *c)
{
    static const ctxd_conn_hooks hooks = {.lost = end_all, .claims = claims};
    c->hooks = &hooks;
}

/* Frees every run, blocking or not, without calling on_done: the client
 * is closing and nobody waits for them. */
void ctxd_run_forget_all(ctxd_client *c)
{
    for (run *r = c->runs; r; r = r->next) {
        r->removed = true;
        r->blocking = false;
    }
    sweep(c);
}

/* Sends `interrupt {ctx, run}` for a run; the reply is dropped as unmatched. */
static int send_run_interrupt(ctxd_client *c, run *r)
{
    proto_buf b;
    proto_buf_init(&b);
    ctxd_conn_envelope(c, &b, "interrupt", 2);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, r->ctx ? r->ctx : "default");
    proto_put_str(&b, "run");
    proto_put_uint(&b, r->id);
    int rc = ctxd_conn_send(c, &b);
    proto_buf_free(&b);
    return rc;
}

/* ---- events: one handler per message type ------------------------------ */

/* accepted: the run started; send an interrupt asked for earlier. */
static int ev_accepted(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"execution_count", PF_UINT, true, 0},
                                         {"incarnation", PF_UINT, true, 0},
                                         {"previous_death", PF_STR | PF_NIL, false, 0}};
    if (ctxd_conn_check(c, "accepted event", m->root, fields, 3) < 0)
        return c->last_rc;
    r->accepted = true;
    if (r->interrupt_pending) {
        r->interrupt_pending = false;
        send_run_interrupt(c, r); /* a failed send shows in the liveness check */
    }
    if (r->cb.on_accepted) {
        const proto_val *pd = proto_map_get(m->root, "previous_death");
        char *death = pd && pd->kind == PROTO_STR ? proto_strdup(pd) : NULL;
        r->cb.on_accepted(r->user, get_uint(m->root, "execution_count"),
                          get_uint(m->root, "incarnation"), death);
        free(death);
    }
    return 0;
}

/* stream: output bytes straight to the caller. */
static int ev_stream(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"name", PF_STR, true, 0}, {"data", PF_BIN, true, 0}};
    if (ctxd_conn_check(c, "stream event", m->root, fields, 2) < 0)
        return c->last_rc;
    if (!r->cb.on_stream)
        return 0;
    const proto_val *name = proto_map_get(m->root, "name");
    const proto_val *data = proto_map_get(m->root, "data");
    char *n = proto_strdup(name);
    r->cb.on_stream(r->user, n, data->as.s, data->n);
    free(n);
    return 0;
}

/* result: the MIME bundle as NUL-terminated arrays. */
static int ev_result(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"execution_count", PF_UINT, false, 0},
                                         {"data", PF_STRMAP, true, 0}};
    if (ctxd_conn_check(c, "result event", m->root, fields, 2) < 0)
        return c->last_rc;
    if (!r->cb.on_result)
        return 0;
    const proto_val *data = proto_map_get(m->root, "data");
    char **keys = mem_calloc(data->n ? data->n : 1, sizeof *keys);
    char **values = mem_calloc(data->n ? data->n : 1, sizeof *values);
    for (uint32_t i = 0; i < data->n; i++) {
        keys[i] = proto_strdup(&data->as.items[2 * i]);
        values[i] = proto_strdup(&data->as.items[2 * i + 1]);
    }
    r->cb.on_result(r->user, (const char *const *)keys, (const char *const *)values, data->n,
                    get_uint(m->root, "execution_count"));
    for (uint32_t i = 0; i < data->n; i++) {
        free(keys[i]);
        free(values[i]);
    }
    free(keys);
    free(values);
    return 0;
}

/* display: a MIME bundle shown during the run (display(), figures). */
static int ev_display(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"data", PF_STRMAP, true, 0},
                                         {"metadata", PF_MAP | PF_NIL, false, 0},
                                         {"display_id", PF_STR | PF_NIL, false, 0},
                                         {"update", PF_BOOL | PF_NIL, false, 0}};
    if (ctxd_conn_check(c, "display event", m->root, fields, 4) < 0)
        return c->last_rc;
    if (!r->cb.on_display)
        return 0;
    const proto_val *data = proto_map_get(m->root, "data");
    const proto_val *idv = proto_map_get(m->root, "display_id");
    char *id = idv && idv->kind == PROTO_STR ? proto_strdup(idv) : NULL;
    char **keys = mem_calloc(data->n ? data->n : 1, sizeof *keys);
    char **values = mem_calloc(data->n ? data->n : 1, sizeof *values);
    for (uint32_t i = 0; i < data->n; i++) {
        keys[i] = proto_strdup(&data->as.items[2 * i]);
        values[i] = proto_strdup(&data->as.items[2 * i + 1]);
    }
    r->cb.on_display(r->user, (const char *const *)keys, (const char *const *)values, data->n, id,
                     get_bool(m->root, "update"));
    for (uint32_t i = 0; i < data->n; i++) {
        free(keys[i]);
        free(values[i]);
    }
    free(keys);
    free(values);
    free(id);
    return 0;
}

/* clear_output: the code cleared what it displayed. */
static int ev_clear_output(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"wait", PF_BOOL | PF_NIL, false, 0}};
    if (ctxd_conn_check(c, "clear_output event", m->root, fields, 1) < 0)
        return c->last_rc;
    if (r->cb.on_clear_output)
        r->cb.on_clear_output(r->user, get_bool(m->root, "wait"));
    return 0;
}

/* input.request: asks on_input and answers with `input.reply` (its `ok` is
 * dropped as unmatched); a NULL answer (or no callback) declines, and the
 * code gets EOFError. */
static int ev_input_request(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {{"prompt", PF_STR, true, 0},
                                         {"password", PF_BOOL | PF_NIL, false, 0}};
    if (ctxd_conn_check(c, "input.request event", m->root, fields, 2) < 0)
        return c->last_rc;
    char *prompt = proto_strdup(proto_map_get(m->root, "prompt"));
    const char *value =
        r->cb.on_input ? r->cb.on_input(r->user, prompt, get_bool(m->root, "password")) : NULL;
    free(prompt);
    proto_buf b;
    proto_buf_init(&b);
    ctxd_conn_envelope(c, &b, "input.reply", 2);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, r->ctx ? r->ctx : "default");
    if (value) {
        size_t len = strlen(value);
        proto_put_str(&b, "value");
        proto_put_strn(&b, value, len > (1u << 20) ? 1u << 20 : len);
    } else {
        proto_put_str(&b, "eof");
        proto_put_bool(&b, true);
    }
    ctxd_conn_send(c, &b); /* a failed send shows in the liveness check */
    proto_buf_free(&b);
    return 0;
}

/* error: exception name, value and traceback lines. */
static int ev_error(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {
        {"ename", PF_STR, true, 0}, {"evalue", PF_STR, true, 0}, {"traceback", PF_ARRAY, true, 0}};
    if (ctxd_conn_check(c, "error event", m->root, fields, 3) < 0)
        return c->last_rc;
    const proto_val *tb = proto_map_get(m->root, "traceback");
    for (uint32_t i = 0; i < tb->n; i++)
        if (tb->as.items[i].kind != PROTO_STR)
            return ctxd_conn_fail(
                c, CTXD_EPROTOCOL, NULL,
                "daemon sent a malformed error event: traceback lines must be str");
    if (!r->cb.on_error)
        return 0;
    char *ename = proto_strdup(proto_map_get(m->root, "ename"));
    char *evalue = proto_strdup(proto_map_get(m->root, "evalue"));
    char **lines = mem_calloc(tb->n ? tb->n : 1, sizeof *lines);
    for (uint32_t i = 0; i < tb->n; i++)
        lines[i] = proto_strdup(&tb->as.items[i]);
    r->cb.on_error(r->user, ename, evalue, (const char *const *)lines, tb->n);
    for (uint32_t i = 0; i < tb->n; i++)
        free(lines[i]);
    free(lines);
    free(ename);
    free(evalue);
    return 0;
}

/* Done statuses by ctxd_status value: their names on the wire. */
static const char *const status_names[] = {[CTXD_OK] = "ok",
                                           [CTXD_ERROR] = "error",
                                           [CTXD_INTERRUPTED] = "interrupted",
                                           [CTXD_TIMEOUT] = "timeout",
                                           [CTXD_DIED] = "died",
                                           [CTXD_ABORTED] = "aborted",
                                           [CTXD_SHUTDOWN] = "shutdown"};

/* The wire name of a done status, for tools that print or log it. */
const char *ctxd_status_name(ctxd_status s)
{
    return (size_t)s < sizeof status_names / sizeof status_names[0] ? status_names[s] : "?";
}

/* done: the outcome; ends the run. */
static int ev_done(ctxd_client *c, run *r, const msg_in *m)
{
    static const proto_field fields[] = {
        {"status", PF_STR, true, 0},        {"execution_count", PF_UINT, false, 0},
        {"incarnation", PF_UINT, false, 0}, {"duration", PF_NUM, false, 0},
        {"cpu_time", PF_NUM, false, 0},     {"truncated", PF_BOOL, false, 0},
        {"state_lost", PF_BOOL, false, 0},  {"cause", PF_STR | PF_NIL, false, 0},
        {"dropped", PF_MAP, false, 0},      {"exit_code", PF_UINT, false, 0}};
    static const proto_field dropped_fields[] = {{"stdout", PF_UINT, false, 0},
                                                 {"stderr", PF_UINT, false, 0}};
    if (ctxd_conn_check(c, "done reply", m->root, fields, sizeof fields / sizeof fields[0]) < 0)
        return c->last_rc;
    const proto_val *dropped = proto_map_get(m->root, "dropped");
    if (dropped && ctxd_conn_check(c, "done reply's dropped", dropped, dropped_fields, 2) < 0)
        return c->last_rc;
    const proto_val *status = proto_map_get(m->root, "status");
    size_t s = 0, ns = sizeof status_names / sizeof status_names[0];
    while (s < ns && !proto_str_eq(status, status_names[s]))
        s++;
    if (s == ns)
        return ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL, "daemon sent an unknown done status '%.*s'",
                              (int)status->n, status->as.s);
    const proto_val *cv = proto_map_get(m->root, "cause");
    char *cause = cv && cv->kind == PROTO_STR ? proto_strdup(cv) : NULL;
    ctxd_outcome out = {
        .status = (ctxd_status)s,
        .execution_count = get_uint(m->root, "execution_count"),
        .incarnation = get_uint(m->root, "incarnation"),
        .duration = get_num(m->root, "duration"),
        .cpu_time = get_num(m->root, "cpu_time"),
        .state_lost = get_bool(m->root, "state_lost"),
        .truncated = get_bool(m->root, "truncated"),
        .dropped_stdout = get_uint(dropped, "stdout"),
        .dropped_stderr = get_uint(dropped, "stderr"),
        .cause = cause,
        .exit_code =
            proto_map_get(m->root, "exit_code") ? (int)(get_uint(m->root, "exit_code") & 0xff) : -1,
    };
    end_run(c, r, 0, &out, NULL, NULL);
    free(cause);
    return 0;
}

/* err: the daemon refused the execute (or failed it); the run ends with
 * CTXD_EREFUSED and the daemon's code and message. */
static int ev_err(ctxd_client *c, run *r, const msg_in *m)
{
    (void)r;
    return ctxd_conn_take_err(c, m);
}

/* ok: would never end the run, so it is a protocol violation. */
static int ev_ok(ctxd_client *c, run *r, const msg_in *m)
{
    (void)r, (void)m;
    return ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL, "daemon answered execute with 'ok'");
}

/* Routes a message addressed to a run by its type. Unknown event types are
 * skipped (a newer daemon may add events); a handler's failure (a malformed
 * event, `ok`, or an `err` reply) ends the run with its code. */
static void run_event(ctxd_client *c, run *r, const msg_in *m)
{
    static const struct {
        const char *type;
        int (*fn)(ctxd_client *, run *, const msg_in *);
    } events[] = {{"accepted", ev_accepted},
                  {"stream", ev_stream},
                  {"result", ev_result},
                  {"display", ev_display},
                  {"error", ev_error},
                  {"done", ev_done},
                  {"clear_output", ev_clear_output},
                  {"input.request", ev_input_request},
                  {"err", ev_err},
                  {"ok", ev_ok}};
    int rc = 0;
    c->depth++;
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++) {
        if (proto_str_eq(m->t, events[i].type)) {
            rc = events[i].fn(c, r, m);
            break;
        }
    }
    c->depth--;
    if (rc < 0)
        end_run(c, r, rc, NULL, c->last_code, c->last_msg);
}

/* Dispatches one message (and frees it). */
static void handle_msg(ctxd_client *c, msg_in *m)
{
    c->last_heard = now();
    if (m->re && c->ping_id && m->re == c->ping_id) {
        ctxd_conn_ping_reply(c, m);
    } else if (m->re) {
        run *r = find_run(c, m->re);
        if (r && !r->ended)
            run_event(c, r, m);
    } else if (proto_str_eq(m->t, "err") && c->nactive) {
        /* The daemon could not read the id of a request of ours: which
         * one is unknown, so every run ends rather than one hanging. */
        ctxd_conn_take_err(c, m);
        char msg[sizeof c->last_msg];
        snprintf(msg, sizeof msg, "%s", c->last_msg);
        ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL,
                       "the daemon could not read a request of this client: %s", msg);
        end_all(c, CTXD_EPROTOCOL);
    }
    ctxd_conn_msg_free(m);
}

/* The body of ctxd_step (also used by ctxd_execute's wait). */
static int step(ctxd_client *c, long timeout_ms)
{
    int n = 0, rc = 0;
    msg_in *m;
    while ((m = ctxd_conn_inbox_pop(c))) {
        handle_msg(c, m);
        n++;
    }
    bool waited = false;
    if (n == 0 && timeout_ms != 0) {
        long due = ctxd_conn_liveness_due_ms(c);
        long wait = timeout_ms < 0 ? due : (due >= 0 && due < timeout_ms ? due : timeout_ms);
        rc = ctxd_conn_wait(c, wait);
        if (rc < 0)
            return rc;
        waited = true;
    }
    for (;;) {
        m = ctxd_conn_recv(c, &rc);
        if (rc < 0)
            return rc;
        if (!m)
            break;
        handle_msg(c, m);
        n++;
    }
    /* After a wait, the monitor is read only if the wait saw it readable;
     * without one (the caller polls ZMQ_FD, which the monitor is not
     * behind) it is read every step. */
    if ((!waited || c->mon_check) && ctxd_conn_dropped(c))
        n++;
    ctxd_conn_liveness_tick(c);
    sweep(c);
    return n;
}

/* ---- execute and the event-loop form ----------------------------------- */

/* Encodes the execute request from the caller's options. */
static int put_execute(ctxd_client *c, proto_buf *b, const ctxd_exec_opts *o, size_t code_len,
                       bool allow_stdin, uint64_t *id)
{
    bool timeout = o->timeout >= 0; /* false for NaN too */
    *id =
        ctxd_conn_envelope(c, b, "execute",
                           1 + (o->ctx != NULL) + timeout + (o->nenv > 0) + o->silent +
                               o->stop_on_error + allow_stdin + (o->file != NULL) + (o->argc > 0));
    if (o->ctx) {
        proto_put_str(b, "ctx");
        proto_put_str(b, o->ctx);
    }
    proto_put_str(b, "code");
    proto_put_strn(b, o->code, code_len);
    if (timeout) {
        proto_put_str(b, "timeout");
        proto_put_double(b, o->timeout);
    }
    int r = 0;
    if (o->nenv > 0) {
        proto_put_str(b, "env");
        r = ctxd_conn_put_env(c, b, o->env, o->nenv);
    }
    if (o->silent) {
        proto_put_str(b, "silent");
        proto_put_bool(b, true);
    }
    if (o->stop_on_error) {
        proto_put_str(b, "stop_on_error");
        proto_put_bool(b, true);
    }
    if (allow_stdin) { /* on_input answers input() */
        proto_put_str(b, "allow_stdin");
        proto_put_bool(b, true);
    }
    if (o->file) {
        proto_put_str(b, "file");
        proto_put_str(b, o->file);
    }
    if (o->argc > 0) {
        proto_put_str(b, "argv");
        proto_put_array(b, (uint32_t)o->argc);
        for (size_t i = 0; i < o->argc; i++)
            proto_put_str(b, o->argv[i] ? o->argv[i] : "");
    }
    return r;
}

/* Sends an execute and registers its run. */
static int submit(ctxd_client *c, const ctxd_exec_opts *opts, const ctxd_callbacks *cb, void *user,
                  bool blocking, run **out)
{
    if (!opts || !opts->code)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "execute needs code");
    if (opts->argc > 4096)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "execute argv has more than 4096 items");
    size_t code_len = opts->code_len ? opts->code_len : strlen(opts->code);
    if (c->max_request_bytes && code_len > c->max_request_bytes)
        return ctxd_conn_fail(c, CTXD_EREFUSED, "too_large",
                              "code of %zu bytes exceeds the daemon's max_request_bytes (%llu)",
                              code_len, (unsigned long long)c->max_request_bytes);
    /* A drop seen now ended what was in flight before this run (not from a
     * callback: ending runs calls their on_done). */
    if (c->depth == 0)
        ctxd_conn_dropped(c);
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id;
    int r = put_execute(c, &b, opts, code_len, cb && cb->on_input, &id);
    if (r == 0)
        r = ctxd_conn_send(c, &b);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    run *rn = mem_calloc(1, sizeof *rn);
    rn->id = id;
    rn->ctx = opts->ctx ? mem_strdup(opts->ctx) : NULL;
    if (cb)
        rn->cb = *cb;
    rn->user = user;
    rn->blocking = blocking;
    /* Append, so runs are found in submission order. */
    run **p = &c->runs;
    while (*p)
        p = &(*p)->next;
    *p = rn;
    if (c->nactive++ == 0) {
        c->last_heard = now(); /* the silence that matters starts now */
        c->ping_id = 0;
    }
    if (out)
        *out = rn;
    return 0;
}

/* The event-loop form: sends an execute without waiting for it. */
int ctxd_submit(ctxd_client *c, const ctxd_exec_opts *opts, const ctxd_callbacks *cb, void *user,
                uint64_t *run_id)
{
    run *r = NULL;
    int rc = submit(c, opts, cb, user, false, &r);
    if (rc == 0 && run_id)
        *run_id = r->id;
    return rc;
}

/* Dispatches what the daemon sent; refused inside a callback. */
int ctxd_step(ctxd_client *c, int timeout_ms)
{
    if (c->depth > 0)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL,
                              "ctxd_step is not allowed from inside a callback");
    return step(c, timeout_ms);
}

/* ZeroMQ's notification fd, for the caller's poll loop (see ctxd.h). */
int ctxd_fd(ctxd_client *c)
{
    int fd = -1;
    size_t len = sizeof fd;
    if (zmq_getsockopt(c->sock, ZMQ_FD, &fd, &len) < 0)
        return ctxd_conn_fail(c, CTXD_ETRANSPORT, NULL, "zmq_getsockopt(ZMQ_FD): %s",
                              zmq_strerror(zmq_errno()));
    return fd;
}

/* How long the caller's loop may wait: 0 when a message is already
 * queued, else until the next liveness check is due. */
int ctxd_timeout_ms(ctxd_client *c)
{
    if (c->inbox)
        return 0;
    int ev = 0;
    size_t len = sizeof ev;
    if (zmq_getsockopt(c->sock, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN))
        return 0;
    len = sizeof ev; /* a dropped connection: ctxd_step ends the runs */
    if (c->mon && zmq_getsockopt(c->mon, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN)) {
        c->mon_check = true; /* the look took its descriptor's signal */
        return 0;
    }
    long due = ctxd_conn_liveness_due_ms(c);
    return due > 1000000000L ? 1000000000 : (int)due;
}

/* Runs still in flight (the caller's loop runs while > 0). */
size_t ctxd_pending(const ctxd_client *c)
{
    return c->nactive;
}

/* Interrupts a submitted run, at once or as soon as it is accepted. */
int ctxd_run_interrupt(ctxd_client *c, uint64_t run_id)
{
    run *r = find_run(c, run_id);
    if (!r || r->ended)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "no run %llu in flight",
                              (unsigned long long)run_id);
    if (!r->accepted) {
        r->interrupt_pending = true;
        return 0;
    }
    return send_run_interrupt(c, r);
}

/* Stops tracking a run; it goes on in the daemon, its events are dropped. */
int ctxd_run_detach(ctxd_client *c, uint64_t run_id)
{
    run *r = find_run(c, run_id);
    if (!r || r->ended)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "no run %llu in flight",
                              (unsigned long long)run_id);
    r->ended = true;
    r->removed = true;
    if (c->nactive > 0)
        c->nactive--;
    sweep(c);
    return 0;
}

/* Applies what on_wait asked for. Returns 0 to keep waiting or < 0. */
static int wait_hook(ctxd_client *c, run *r)
{
    if (!r->cb.on_wait)
        return 0;
    c->depth++;
    int what = r->cb.on_wait(r->user);
    c->depth--;
    switch (what) {
    case CTXD_WAIT_INTERRUPT:
        if (!r->accepted) {
            r->interrupt_pending = true;
            return 0;
        }
        send_run_interrupt(c, r); /* a failed send shows in the liveness check */
        return 0;
    case CTXD_WAIT_DETACH:
        return ctxd_conn_fail(c, CTXD_ECANCELLED, NULL, "stopped waiting; the run goes on in ctxd");
    default:
        return 0;
    }
}

/* execute: submit, then dispatch everything until this run ends, a
 * transport failure, or a detach. */
int ctxd_execute(ctxd_client *c, const ctxd_exec_opts *opts, const ctxd_callbacks *cb, void *user,
                 ctxd_outcome *out)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    run *r = NULL;
    int rc = submit(c, opts, cb, user, true, &r);
    if (rc < 0)
        return rc;
    while (!r->ended) {
        /* step's wait returns at once when a message is queued: no
         * ZMQ_EVENTS look first (ctxd_timeout_ms, for callers' own loops) */
        long wait = c->inbox ? 0 : ctxd_conn_liveness_due_ms(c);
        if (r->cb.on_wait && (wait < 0 || wait > WAIT_SLICE_MS))
            wait = WAIT_SLICE_MS;
        rc = step(c, wait);
        if (rc < 0) {
            drop_blocking(c, r);
            return rc;
        }
        if (r->ended)
            break;
        rc = wait_hook(c, r);
        if (rc < 0) {
            drop_blocking(c, r);
            return rc;
        }
    }
    rc = r->rc;
    if (rc == 0) {
        if (out) {
            *out = r->out;
            out->cause = r->cause ? ctxd_conn_own(c, mem_strdup(r->cause)) : NULL;
        }
        c->last_rc = 0;
        c->last_code[0] = c->last_msg[0] = '\0';
    } else {
        ctxd_conn_fail(c, rc, r->err_code, "%s", r->err_msg ? r->err_msg : "");
    }
    drop_blocking(c, r);
    return rc;
}
