/* sup_request: decoding, checking and dispatching client requests. Each
 * entry of the table lists a request's fields for proto_check and its
 * handler, in the unit of what it touches (sup_reqctx.c, sup_reqrun.c,
 * sup_reqdaemon.c, sup_files.c, sup_query.c, sup_snap.c, sup_snapfiles.c). */
#include "sup_request.h"

#include "sup_reqarg.h"
#include "sup_reqctx.h"
#include "sup_reqdaemon.h"
#include "sup_reqrun.h"

#include "sup_config.h"
#include "sup_files.h"
#include "sup_held.h"
#include "sup_log.h"
#include "sup_peer.h"
#include "sup_query.h"
#include "sup_route.h"
#include "sup_send.h"
#include "sup_snap.h"
#include "sup_snapfiles.h"
#include "sup_stats.h"

#include "proto.h"

#include <stdio.h>
#include <string.h>

/* ---- the table -------------------------------------------------------- */

typedef struct request_kind {
    const char *type;
    const proto_field *fields;
    size_t nfields;
    void (*handle)(const proto_val *msg, const sup_peer *peer);
} request_kind;

#define MAX_ENV 1024
#define MAX_ARGV 4096
static const proto_field execute_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},          {"code", PF_STR, true, 0},
    {"timeout", PF_NUM | PF_NIL, false, 0},       {"env", PF_STRMAP | PF_NIL, false, MAX_ENV},
    {"silent", PF_BOOL | PF_NIL, false, 0},       {"stop_on_error", PF_BOOL | PF_NIL, false, 0},
    {"allow_stdin", PF_BOOL | PF_NIL, false, 0},  {"artifacts", PF_BOOL | PF_NIL, false, 0},
    {"argv", PF_ARRAY | PF_NIL, false, MAX_ARGV}, {"file", PF_STR | PF_NIL, false, 4095},
    {"syntax", PF_STR | PF_NIL, false, 16},
};
static const proto_field file_put_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},
    {"path", PF_STR, true, 4095},
    {"data", PF_BIN, true, SUP_FILE_CHUNK},
    {"offset", PF_UINT | PF_NIL, false, 0},
};
static const proto_field file_get_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},
    {"path", PF_STR, true, 4095},
    {"offset", PF_UINT | PF_NIL, false, 0},
    {"length", PF_UINT | PF_NIL, false, 0},
};
static const proto_field input_reply_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},
    {"value", PF_STR | PF_NIL, false, 1u << 20},
    {"eof", PF_BOOL | PF_NIL, false, 0},
};
static const proto_field interrupt_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},
    {"run", PF_STR | PF_UINT | PF_NIL, false, PROTO_MAX_ID},
};
static const proto_field ctx_req_fields[] = {{"ctx", PF_NAME, true, 0}};
/* complete / inspect / is_complete (sup_query.c checks code against
 * max_code_bytes, cursor against the code's length, detail_level 0 or 1). */
static const proto_field complete_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},
    {"code", PF_STR, true, 0},
    {"cursor", PF_UINT | PF_NIL, false, 0},
    {"timeout", PF_NUM | PF_NIL, false, 0},
};
static const proto_field inspect_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},    {"code", PF_STR, true, 0},
    {"cursor", PF_UINT | PF_NIL, false, 0}, {"detail_level", PF_UINT | PF_NIL, false, 0},
    {"timeout", PF_NUM | PF_NIL, false, 0},
};
static const proto_field is_complete_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},
    {"code", PF_STR, true, 0},
    {"timeout", PF_NUM | PF_NIL, false, 0},
};
static const proto_field create_fields[] = {
    {"name", PF_NAME | PF_NIL, false, 0},
    {"cwd", PF_STR | PF_NIL, false, 4095},
    {"env", PF_STRMAP | PF_NIL, false, MAX_ENV},
    {"tier", PF_STR | PF_NIL, false, 32},
    {"policy", PF_MAP | PF_NIL, false, 64},
    {"figures", PF_BOOL | PF_NIL, false, 0},
    {"packages", PF_ARRAY | PF_NIL, false, 0},
    {"syntax", PF_STR | PF_NIL, false, 16},
    {"lease", PF_NUM | PF_NIL, false, 0},
    {"from_snapshot", PF_STR | PF_NIL, false, 200},
    {"autosnapshot", PF_STR | PF_NUM | PF_NIL, false, 16},
};
static const proto_field pip_install_fields[] = {
    {"ctx", PF_NAME | PF_NIL, false, 0},
    {"packages", PF_ARRAY, true, 0},
};
static const proto_field list_fields[] = {
    {"after", PF_NAME | PF_NIL, false, 0},
    {"limit", PF_UINT | PF_NIL, false, 0},
};
static const proto_field fork_fields[] = {
    {"ctx", PF_NAME, true, 0},
    {"name", PF_NAME | PF_NIL, false, 0},
};
/* Snapshots (sup_snap.c, sup_snapfiles.c). */
static const proto_field snapshot_fields[] = {
    {"ctx", PF_NAME, true, 0},
    {"name", PF_NAME | PF_NIL, false, 0},
};
static const proto_field restore_fields[] = {
    {"ctx", PF_NAME, true, 0},
    {"snapshot", PF_STR, true, 200},
};
static const proto_field snapshots_fields[] = {{"ctx", PF_NAME | PF_NIL, false, 0}};
static const proto_field snapshot_delete_fields[] = {{"snapshot", PF_STR, true, 200}};

#define FIELDS(a) a, sizeof a / sizeof a[0]
static const request_kind request_kinds[] = {
    {"hello", NULL, 0, sup_reqdaemon_hello},
    {"execute", FIELDS(execute_fields), sup_reqrun_execute},
    {"interrupt", FIELDS(interrupt_fields), sup_reqrun_interrupt},
    {"input.reply", FIELDS(input_reply_fields), sup_reqrun_input_reply},
    {"file.put", FIELDS(file_put_fields), sup_files_put},
    {"file.get", FIELDS(file_get_fields), sup_files_get},
    {"ctx.create", FIELDS(create_fields), sup_reqctx_create},
    {"ctx.list", FIELDS(list_fields), sup_reqctx_list},
    {"stats", NULL, 0, sup_reqdaemon_stats},
    {"ctx.delete", FIELDS(ctx_req_fields), sup_reqctx_delete},
    {"ctx.restart", FIELDS(ctx_req_fields), sup_reqctx_restart},
    {"ctx.renew", FIELDS(ctx_req_fields), sup_reqctx_renew},
    {"ctx.info", FIELDS(ctx_req_fields), sup_reqctx_info},
    {"ctx.fork", FIELDS(fork_fields), sup_reqctx_fork},
    {"pip.install", FIELDS(pip_install_fields), sup_reqctx_pip_install},
    {"complete", FIELDS(complete_fields), sup_query_complete},
    {"inspect", FIELDS(inspect_fields), sup_query_inspect},
    {"is_complete", FIELDS(is_complete_fields), sup_query_is_complete},
    {"ctx.snapshot", FIELDS(snapshot_fields), sup_snap_request},
    {"ctx.restore", FIELDS(restore_fields), sup_snap_restore_request},
    {"ctx.snapshots", FIELDS(snapshots_fields), sup_snapfiles_list},
    {"ctx.snapshot_delete", FIELDS(snapshot_delete_fields), sup_snapfiles_delete},
    {"ctx.snapshot_export", FIELDS(snapshot_delete_fields), sup_snapfiles_export},
    {"ctx.snapshot_import", FIELDS(snapshot_delete_fields), sup_snapfiles_import},
};

static void log_request(const char *type, const proto_val *msg, double t0)
{
    char ctx[PROTO_MAX_NAME + 1] = "";
    const proto_val *name = sup_reqarg_get(msg, "ctx");
    if (!name)
        name = sup_reqarg_get(msg, "name");
    if (name && name->kind == PROTO_STR && proto_name_valid(name->as.s, name->n))
        snprintf(ctx, sizeof ctx, "%.*s", (int)name->n, name->as.s);
    char status[48];
    snprintf(status, sizeof status, "%s%s", sup_reply_last_code() ? "err:" : "ok",
             sup_reply_last_code() ? sup_reply_last_code() : "");
    sup_stats_request(type, ctx, status, sup_now() - t0);
}

/* Keeps a request id (a uint or a str of at most PROTO_MAX_ID bytes) as
 * msgpack, to echo as `re`. */
static void set_re(sup_peer *peer, const proto_val *id)
{
    proto_buf idb;
    proto_buf_init(&idb);
    proto_put_val(&idb, id);
    memcpy(peer->re, idb.data, idb.len);
    peer->re_len = idb.len;
    proto_buf_free(&idb);
}

/* Entry point for one client message: every path ends in exactly one
 * terminal reply (here for refusals, later for runs). */
/* A client that does not read its replies cannot make the daemon hold
 * more for it: past max_client_held (or max_held in total) a request is
 * refused with `err busy` while those refusals fit in REFUSALS_MAX more
 * bytes, and past that it is not read at all (dropped, counted in stats
 * requests_unread). True when the request was refused or dropped. */
#define REFUSALS_MAX ((size_t)64 << 10)
static bool refuse_unread(const sup_peer *peer)
{
    if (!sup_held_over(peer))
        return false;
    size_t mine = sup_held_client(peer);
    if (mine < sup_cfg.max_client_held + REFUSALS_MAX &&
        sup_held_total() < sup_cfg.max_held + REFUSALS_MAX) {
        sup_reply_err(peer, "busy",
                      "%zu bytes of replies to this client are unread (max_client_held %zu, "
                      "max_held %zu): read them before sending more requests",
                      mine, sup_cfg.max_client_held, sup_cfg.max_held);
        return true;
    }
    if (sup_stats.requests_unread++ % 1000 == 0)
        sup_stats_event("request-unread held=%zu dropped=%llu", mine,
                        (unsigned long long)sup_stats.requests_unread);
    return true;
}

/* A request pinned to a daemon instance (the `instance` field, which
 * ctxd-router adds to everything it forwards) is refused by any other
 * instance: a restarted daemon at the same address never serves a request
 * meant for the one that held the context (its table made the context
 * again, empty). True when refused. */
static bool wrong_instance(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *want = sup_reqarg_get(msg, "instance");
    if (!want || want->kind == PROTO_NIL)
        return false;
    if (want->kind == PROTO_STR && want->n == strlen(sup_instance) &&
        memcmp(want->as.s, sup_instance, want->n) == 0)
        return false;
    sup_reply_err(peer, "instance", "this daemon is instance %s, not the one the request names",
                  sup_instance);
    return true;
}

static bool shutting_down;

void sup_request_shutting_down(void)
{
    shutting_down = true;
}

void sup_request_handle(int sock, const uint8_t *route, size_t route_len, const uint8_t *data,
                        size_t len, bool multipart)
{
    sup_peer peer = {.sock = (uint8_t)sock, .route_len = route_len, .re_len = 0};
    if (route_len > sizeof peer.route)
        return;
    memcpy(peer.route, route, route_len);
    peer.conn = sock == 1 ? sup_route_current(route, route_len) : 0;
    if (multipart) {
        sup_reply_err(&peer, "bad_frame", "a message must be exactly one frame");
        return;
    }
    proto_val peeked;
    if (len > sup_cfg.max_request_bytes) {
        /* Answer with the request's id when its first bytes hold it, so
         * the client's request ends instead of waiting. */
        if (proto_peek_id(data, len, &peeked))
            set_re(&peer, &peeked);
        sup_reply_err(&peer, "too_large", "message of %zu bytes exceeds max_request_bytes (%zu)",
                      len, sup_cfg.max_request_bytes);
        return;
    }
    proto_doc doc;
    proto_error err;
    if (proto_decode(&doc, data, len, &err) < 0) {
        sup_reqarg_reply_error(&peer, &err);
        sup_stats_request("unreadable", NULL, "err:bad_frame", 0);
        return;
    }
    const proto_val *msg = &doc.nodes[0];
    proto_envelope env;
    int ok = proto_envelope_read(msg, &env, &err);
    if (env.id)
        set_re(&peer, env.id);
    if (ok < 0) {
        sup_reqarg_reply_error(&peer, &err);
        proto_doc_free(&doc);
        return;
    }
    if (shutting_down) {
        sup_reply_err(&peer, "shutting_down", "the daemon is shutting down");
        proto_doc_free(&doc);
        return;
    }
    if (refuse_unread(&peer) || wrong_instance(msg, &peer)) {
        proto_doc_free(&doc);
        return;
    }
    const request_kind *k = NULL;
    for (size_t i = 0; i < sizeof request_kinds / sizeof request_kinds[0] && !k; i++)
        if (proto_str_eq(env.type, request_kinds[i].type))
            k = &request_kinds[i];
    double t0 = sup_now();
    sup_reply_reset();
    if (!k)
        sup_reply_err(&peer, "unknown_type", "unknown message type '%.*s'",
                      (int)(env.type->n > 64 ? 64 : env.type->n), env.type->as.s);
    else if (proto_check(msg, k->fields, k->nfields, &err) < 0)
        sup_reqarg_reply_error(&peer, &err);
    else
        k->handle(msg, &peer);
    /* Runs are logged when they end; everything else here. */
    if (!k || sup_reply_last_code() || strcmp(k->type, "execute") != 0)
        log_request(k ? k->type : "unknown", msg, t0);
    proto_doc_free(&doc);
}
