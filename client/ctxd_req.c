/* libctxd, control requests: hello, stats, contexts (create, list, fork,
 * delete, restart, interrupt), files, packages and queries (complete,
 * inspect, is_complete), each a round trip (ctxd_conn_roundtrip) whose
 * reply is checked and copied into results the client owns. See
 * ctxd_int.h for how the parts fit. */
#include "ctxd_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing replies --------------------------------------------------- */

/* Fills an INFO map (PROTOCOL.md ctx.create) into caller-visible form. */
static int parse_info(ctxd_client *c, const proto_val *v, ctxd_ctx_info *out)
{
    static const proto_field fields[] = {{"name", PF_STR, true, 0},
                                         {"cwd", PF_STR, false, 0},
                                         {"state", PF_STR, true, 0},
                                         {"pid", PF_UINT, false, 0},
                                         {"incarnation", PF_UINT, false, 0},
                                         {"created", PF_NUM, false, 0},
                                         {"execution_count", PF_UINT, false, 0},
                                         {"queued", PF_UINT, false, 0},
                                         {"rss", PF_UINT, false, 0},
                                         {"pss", PF_UINT, false, 0},
                                         {"last_death", PF_STR | PF_NIL, false, 0},
                                         {"tier", PF_STR, false, 0}};
    if (ctxd_conn_check(c, "context info", v, fields, sizeof fields / sizeof fields[0]) < 0)
        return c->last_rc;
    if (!out)
        return 0;
    const char *cwd = ctxd_conn_own_str(c, proto_map_get(v, "cwd"));
    const char *tier = ctxd_conn_own_str(c, proto_map_get(v, "tier"));
    *out = (ctxd_ctx_info){
        .name = ctxd_conn_own_str(c, proto_map_get(v, "name")),
        .cwd = cwd ? cwd : "",
        .state = ctxd_conn_own_str(c, proto_map_get(v, "state")),
        .pid = get_uint(v, "pid"),
        .incarnation = get_uint(v, "incarnation"),
        .created = get_num(v, "created"),
        .execution_count = get_uint(v, "execution_count"),
        .queued = get_uint(v, "queued"),
        .last_death = ctxd_conn_own_str(c, proto_map_get(v, "last_death")),
        .rss = get_uint(v, "rss"),
        .pss = get_uint(v, "pss"),
        .tier = tier ? tier : "unsafe",
    };
    return 0;
}

/* Reads the `ctx` INFO of an ok reply (ctx.create, ctx.restart). */
static int parse_ctx_reply(ctxd_client *c, const msg_in *m, ctxd_ctx_info *out)
{
    static const proto_field fields[] = {{"ctx", PF_MAP, true, 0}};
    if (ctxd_conn_check(c, "reply", m->root, fields, 1) < 0)
        return c->last_rc;
    return parse_info(c, proto_map_get(m->root, "ctx"), out);
}

/* The strings of an array value, owned by the client (non-strings and a
 * missing value: none). */
static const char *const *own_strs(ctxd_client *c, const proto_val *arr, size_t *n)
{
    *n = 0;
    if (!arr || arr->kind != PROTO_ARRAY)
        return NULL;
    const char **out = ctxd_conn_own(c, mem_calloc(arr->n ? arr->n : 1, sizeof *out));
    for (uint32_t i = 0; i < arr->n; i++)
        if (arr->as.items[i].kind == PROTO_STR)
            out[(*n)++] = ctxd_conn_own_str(c, &arr->as.items[i]);
    return out;
}

/* Reads hello's reply into *out (NULL: only the cache), remembering the
 * daemon's pid, instance and request limit in the client. A malformed reply
 * is CTXD_EPROTOCOL. */
static int parse_hello(ctxd_client *c, const msg_in *m, ctxd_hello_info *out)
{
    static const proto_field fields[] = {
        {"server", PF_STR, true, 0},     {"version", PF_STR, false, 0},
        {"protocol", PF_UINT, false, 0}, {"versions", PF_ARRAY, false, 0},
        {"pid", PF_UINT, true, 0},       {"instance", PF_STR, false, 0},
        {"limits", PF_MAP, false, 0}};
    static const proto_field limit_fields[] = {
        {"max_request_bytes", PF_UINT, false, 0}, {"max_code_bytes", PF_UINT, false, 0},
        {"max_queue", PF_UINT, false, 0},         {"max_contexts", PF_UINT, false, 0},
        {"default_timeout", PF_NUM, false, 0},    {"kill_grace", PF_NUM, false, 0},
        {"max_output", PF_UINT, false, 0},        {"idle_ttl", PF_NUM, false, 0},
        {"on_disconnect", PF_STR, false, 0}};
    if (ctxd_conn_check(c, "hello reply", m->root, fields, sizeof fields / sizeof fields[0]) < 0)
        return c->last_rc;
    const proto_val *limits = proto_map_get(m->root, "limits");
    if (limits && ctxd_conn_check(c, "hello limits", limits, limit_fields,
                                  sizeof limit_fields / sizeof limit_fields[0]) < 0)
        return c->last_rc;
    const proto_val *vs = proto_map_get(m->root, "versions");
    uint64_t *versions = ctxd_conn_own(c, mem_calloc(vs && vs->n ? vs->n : 1, sizeof *versions));
    for (uint32_t i = 0; vs && i < vs->n; i++) {
        if (vs->as.items[i].kind != PROTO_UINT)
            return ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL,
                                  "daemon sent a malformed hello reply: "
                                  "'versions' must hold uints");
        versions[i] = vs->as.items[i].as.u;
    }
    const proto_val *inst = proto_map_get(m->root, "instance");
    c->daemon_pid = get_uint(m->root, "pid");
    c->max_request_bytes = get_uint(limits, "max_request_bytes");
    if (inst && inst->n < sizeof c->instance)
        snprintf(c->instance, sizeof c->instance, "%.*s", (int)inst->n, inst->as.s);
    if (!out)
        return 0;
    const char *version = ctxd_conn_own_str(c, proto_map_get(m->root, "version"));
    const char *instance = ctxd_conn_own_str(c, inst);
    *out = (ctxd_hello_info){
        .server = ctxd_conn_own_str(c, proto_map_get(m->root, "server")),
        .version = version ? version : "",
        .protocol = get_uint(m->root, "protocol"),
        .versions = versions,
        .nversions = vs ? vs->n : 0,
        .pid = c->daemon_pid,
        .instance = instance ? instance : "",
        .max_request_bytes = c->max_request_bytes,
        .max_code_bytes = get_uint(limits, "max_code_bytes"),
        .max_queue = get_uint(limits, "max_queue"),
        .max_contexts = get_uint(limits, "max_contexts"),
        .default_timeout = get_num(limits, "default_timeout"),
        .kill_grace = get_num(limits, "kill_grace"),
        .max_output = get_uint(limits, "max_output"),
        .idle_ttl = get_num(limits, "idle_ttl"),
        .on_disconnect = "",
    };
    const char *od = ctxd_conn_own_str(c, proto_map_get(limits, "on_disconnect"));
    if (od)
        out->on_disconnect = od;
    const proto_val *tiers = proto_map_get(m->root, "tiers");
    if (tiers && tiers->kind == PROTO_MAP) {
        ctxd_tier_info *t = ctxd_conn_own(c, mem_calloc(tiers->n ? tiers->n : 1, sizeof *t));
        for (uint32_t i = 0; i < tiers->n; i++) {
            const proto_val *key = &tiers->as.items[2 * i];
            t[i].name = key->kind == PROTO_STR ? ctxd_conn_own_str(c, key) : NULL;
            t[i].fields = own_strs(c, &tiers->as.items[2 * i + 1], &t[i].nfields);
            if (!t[i].name)
                t[i].name = "";
        }
        out->tiers = t;
        out->ntiers = tiers->n;
    }
    const proto_val *pre = proto_map_get(m->root, "preloads");
    out->preloads_loaded = own_strs(c, proto_map_get(pre, "loaded"), &out->npreloads_loaded);
    out->preloads_skipped = own_strs(c, proto_map_get(pre, "skipped"), &out->npreloads_skipped);
    const proto_val *pk = proto_map_get(m->root, "packages");
    const proto_val *offered = proto_map_get(pk, "offered");
    out->packages_offered = offered && offered->kind == PROTO_BOOL && offered->as.b;
    out->package_sources = own_strs(c, proto_map_get(pk, "sources"), &out->npackage_sources);
    const char *hosts =
        ctxd_conn_own_str(c, proto_map_get(proto_map_get(m->root, "router"), "summary"));
    const char *unavailable = ctxd_conn_own_str(c, proto_map_get(m->root, "unavailable"));
    out->hosts = hosts ? hosts : "";
    out->unavailable = unavailable ? unavailable : "";
    return 0;
}

/* ---- hello, stats and contexts ----------------------------------------- */

/* A request without fields (hello, ctx.list, stats): its reply in *m. */
static int bare_request(ctxd_client *c, const char *type, msg_in **m)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id = ctxd_conn_envelope(c, &b, type, 0);
    int r = ctxd_conn_roundtrip(c, &b, id, false, m);
    proto_buf_free(&b);
    return r;
}

/* hello: also refreshes the cached daemon pid, instance and request limit.
 * The reply to the connect check (out NULL) is kept, and the first
 * ctxd_hello with out answers from it: a program that connects and asks
 * hello sends one hello, not two. */
int ctxd_hello(ctxd_client *c, ctxd_hello_info *out)
{
    msg_in *m = c->hello_kept;
    c->hello_kept = NULL;
    int r;
    if (m && out) { /* answer from the connect check's reply */
        r = ctxd_conn_begin(c);
    } else {
        if (m)
            ctxd_conn_msg_free(m);
        m = NULL;
        r = bare_request(c, "hello", &m);
    }
    if (r < 0) {
        if (m)
            ctxd_conn_msg_free(m);
        return r;
    }
    r = parse_hello(c, m, out);
    if (!out && r == 0)
        c->hello_kept = m;
    else
        ctxd_conn_msg_free(m);
    return r;
}

/* ctx.create with the optional fields the caller gave. */
int ctxd_ctx_create(ctxd_client *c, const char *name, const char *cwd, const ctxd_kv *env,
                    size_t nenv, ctxd_ctx_info *out)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    proto_buf b;
    msg_in *m = NULL;
    proto_buf_init(&b);
    uint64_t id =
        ctxd_conn_envelope(c, &b, "ctx.create", (name != NULL) + (cwd != NULL) + (nenv > 0));
    if (name) {
        proto_put_str(&b, "name");
        proto_put_str(&b, name);
    }
    if (cwd) {
        proto_put_str(&b, "cwd");
        proto_put_str(&b, cwd);
    }
    int r = 0;
    if (nenv > 0) {
        proto_put_str(&b, "env");
        r = ctxd_conn_put_env(c, &b, env, nenv);
    }
    if (r == 0)
        r = ctxd_conn_roundtrip(c, &b, id, false, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = parse_ctx_reply(c, m, out);
    ctxd_conn_msg_free(m);
    return r;
}

/* One page of ctx.list: the names after `after` ("" from the start). */
static int list_page(ctxd_client *c, const char *after, msg_in **m)
{
    if (!after[0])
        return bare_request(c, "ctx.list", m);
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id = ctxd_conn_envelope(c, &b, "ctx.list", 1);
    proto_put_str(&b, "after");
    proto_put_str(&b, after);
    int r = ctxd_conn_roundtrip(c, &b, id, false, m);
    proto_buf_free(&b);
    return r;
}

/* ctx.list into an owned array of infos, page after page (a page ends
 * before 4 MiB, about 12,000 contexts: PROTOCOL.md). */
int ctxd_ctx_list(ctxd_client *c, const ctxd_ctx_info **out, size_t *n)
{
    static const proto_field fields[] = {{"contexts", PF_ARRAY, true, 0},
                                         {"next", PF_STR, false, PROTO_MAX_NAME}};
    ctxd_ctx_info *infos = NULL;
    size_t count = 0;
    char after[PROTO_MAX_NAME + 1] = "";
    int r;
    for (;;) {
        msg_in *m = NULL;
        r = list_page(c, after, &m);
        if (r < 0)
            break;
        r = ctxd_conn_check(c, "ctx.list reply", m->root, fields, 2);
        const proto_val *arr = r == 0 ? proto_map_get(m->root, "contexts") : NULL;
        const proto_val *next = r == 0 ? proto_map_get(m->root, "next") : NULL;
        size_t k = arr ? arr->n : 0;
        infos = mem_realloc(infos, (count + k + 1) * sizeof *infos);
        memset(infos + count, 0, (k + 1) * sizeof *infos);
        for (size_t i = 0; i < k && r == 0; i++)
            r = parse_info(c, &arr->as.items[i], &infos[count + i]);
        count += k;
        bool more = r == 0 && next && next->kind == PROTO_STR && k > 0;
        if (more)
            snprintf(after, sizeof after, "%.*s", (int)next->n, next->as.s);
        ctxd_conn_msg_free(m);
        if (!more)
            break;
    }
    if (r < 0) {
        free(infos);
        infos = NULL;
    } else {
        infos = ctxd_conn_own(c, infos ? infos : mem_calloc(1, sizeof *infos));
    }
    if (out)
        *out = r == 0 ? infos : NULL;
    if (n)
        *n = r == 0 ? count : 0;
    return r;
}

/* stats: the daemon's counters. */
int ctxd_stats(ctxd_client *c, ctxd_stats_info *out)
{
    static const proto_field fields[] = {{"uptime", PF_NUM, false, 0},
                                         {"contexts", PF_MAP, false, 0},
                                         {"counters", PF_MAP, false, 0}};
    static const char *const counter_names[] = {
        "requests",        "refused",          "runs",         "runs_ok",
        "runs_error",      "runs_interrupted", "runs_timeout", "runs_died",
        "runs_aborted",    "runs_shutdown",    "stdout_bytes", "stderr_bytes",
        "truncated_bytes", "workers_spawned",  "worker_deaths"};
    msg_in *m = NULL;
    int r = bare_request(c, "stats", &m);
    if (r < 0)
        return r;
    r = ctxd_conn_check(c, "stats reply", m->root, fields, sizeof fields / sizeof fields[0]);
    if (r == 0 && out) {
        const proto_val *ctxs = proto_map_get(m->root, "contexts");
        const proto_val *cnt = proto_map_get(m->root, "counters");
        uint64_t *counters[] = {
            &out->requests,        &out->refused,          &out->runs,         &out->runs_ok,
            &out->runs_error,      &out->runs_interrupted, &out->runs_timeout, &out->runs_died,
            &out->runs_aborted,    &out->runs_shutdown,    &out->stdout_bytes, &out->stderr_bytes,
            &out->truncated_bytes, &out->workers_spawned,  &out->worker_deaths};
        *out = (ctxd_stats_info){
            .uptime = get_num(m->root, "uptime"),
            .live = get_uint(ctxs, "live"),
            .busy = get_uint(ctxs, "busy"),
            .queued = get_uint(ctxs, "queued"),
            .created = get_uint(ctxs, "created"),
        };
        for (size_t i = 0; i < sizeof counter_names / sizeof counter_names[0]; i++)
            *counters[i] = get_uint(cnt, counter_names[i]);
    }
    ctxd_conn_msg_free(m);
    return r;
}

/* ctx.fork: waits in the source's queue, so without a deadline. */
int ctxd_ctx_fork(ctxd_client *c, const char *src, const char *name, ctxd_ctx_info *out)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    if (!src)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "ctx.fork needs the context to clone");
    msg_in *m = NULL;
    int r = ctxd_conn_str_request(c, "ctx.fork", true, &m, "ctx", src, "name", name, NULL);
    if (r < 0)
        return r;
    r = parse_ctx_reply(c, m, out);
    ctxd_conn_msg_free(m);
    return r;
}

/* Sends a request whose fields are a context name (ctx.delete, ctx.restart,
 * interrupt) and optionally a run id, and waits for its ok, left in *m. */
static int ctx_request(ctxd_client *c, const char *type, const char *name, uint64_t run_id,
                       msg_in **m)
{
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id = ctxd_conn_envelope(c, &b, type, 1 + (run_id != 0));
    proto_put_str(&b, "ctx");
    proto_put_str(&b, name);
    if (run_id) {
        proto_put_str(&b, "run");
        proto_put_uint(&b, run_id);
    }
    int r = ctxd_conn_roundtrip(c, &b, id, false, m);
    proto_buf_free(&b);
    return r;
}

/* ctx.delete; the reply carries nothing. */
int ctxd_ctx_delete(ctxd_client *c, const char *name)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    if (!name)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "ctx.delete needs a context name");
    msg_in *m = NULL;
    int r = ctx_request(c, "ctx.delete", name, 0, &m);
    ctxd_conn_msg_free(m);
    return r;
}

/* ctx.restart; default context when name is NULL. */
int ctxd_ctx_restart(ctxd_client *c, const char *name, ctxd_ctx_info *out)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    msg_in *m = NULL;
    int r = ctx_request(c, "ctx.restart", name ? name : "default", 0, &m);
    if (r < 0)
        return r;
    r = parse_ctx_reply(c, m, out);
    ctxd_conn_msg_free(m);
    return r;
}

/* interrupt, optionally of one run; reports whether it hit something. */
int ctxd_interrupt_run(ctxd_client *c, const char *ctx, uint64_t run_id, bool *interrupted)
{
    static const proto_field fields[] = {{"interrupted", PF_BOOL, true, 0}};
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    msg_in *m = NULL;
    int r = ctx_request(c, "interrupt", ctx ? ctx : "default", run_id, &m);
    if (r < 0)
        return r;
    r = ctxd_conn_check(c, "interrupt reply", m->root, fields, 1);
    if (r == 0 && interrupted)
        *interrupted = get_bool(m->root, "interrupted");
    ctxd_conn_msg_free(m);
    return r;
}

/* interrupt of whatever runs on ctx. */
int ctxd_interrupt(ctxd_client *c, const char *ctx, bool *interrupted)
{
    return ctxd_interrupt_run(c, ctx, 0, interrupted);
}

/* ---- files and packages ------------------------------------------------ */

/* file.put of one chunk. */
int ctxd_file_put(ctxd_client *c, const char *ctx, const char *path, uint64_t offset,
                  const void *data, size_t len, uint64_t *size)
{
    static const proto_field fields[] = {{"size", PF_UINT, true, 0}};
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    if (!path || (!data && len) || len > CTXD_FILE_CHUNK)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "file.put needs a path and at most %u bytes",
                              CTXD_FILE_CHUNK);
    proto_buf b;
    msg_in *m = NULL;
    proto_buf_init(&b);
    uint64_t id = ctxd_conn_envelope(c, &b, "file.put", 4);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, ctx ? ctx : "default");
    proto_put_str(&b, "path");
    proto_put_str(&b, path);
    proto_put_str(&b, "data");
    proto_put_bin(&b, data ? data : "", len);
    proto_put_str(&b, "offset");
    proto_put_uint(&b, offset);
    int r = ctxd_conn_roundtrip(c, &b, id, false, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = ctxd_conn_check(c, "file.put reply", m->root, fields, 1);
    if (r == 0 && size)
        *size = get_uint(m->root, "size");
    ctxd_conn_msg_free(m);
    return r;
}

/* file.get of one chunk, copied into memory the client owns. */
int ctxd_file_get(ctxd_client *c, const char *ctx, const char *path, uint64_t offset, size_t length,
                  const void **data, size_t *n, uint64_t *size, bool *eof)
{
    static const proto_field fields[] = {
        {"data", PF_BIN, true, 0}, {"size", PF_UINT, true, 0}, {"eof", PF_BOOL, true, 0}};
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    if (!path)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "file.get needs a path");
    proto_buf b;
    msg_in *m = NULL;
    proto_buf_init(&b);
    uint64_t id = ctxd_conn_envelope(c, &b, "file.get", 4);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, ctx ? ctx : "default");
    proto_put_str(&b, "path");
    proto_put_str(&b, path);
    proto_put_str(&b, "offset");
    proto_put_uint(&b, offset);
    proto_put_str(&b, "length");
    proto_put_uint(&b, length && length < CTXD_FILE_CHUNK ? length : CTXD_FILE_CHUNK);
    int r = ctxd_conn_roundtrip(c, &b, id, false, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = ctxd_conn_check(c, "file.get reply", m->root, fields, 3);
    if (r == 0) {
        const proto_val *d = proto_map_get(m->root, "data");
        void *copy = ctxd_conn_own(c, mem_alloc(d->n ? d->n : 1));
        memcpy(copy, d->as.s, d->n);
        if (data)
            *data = copy;
        if (n)
            *n = d->n;
        if (size)
            *size = get_uint(m->root, "size");
        if (eof)
            *eof = get_bool(m->root, "eof");
    }
    ctxd_conn_msg_free(m);
    return r;
}

/* A `packages` array of the caller's strings. */
static int put_packages(ctxd_client *c, proto_buf *b, const char *const *packages, size_t n)
{
    if (n > UINT32_MAX || (n && !packages))
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "bad package list");
    proto_put_str(b, "packages");
    proto_put_array(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        if (!packages[i])
            return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "package %zu is NULL", i);
        proto_put_str(b, packages[i]);
    }
    return 0;
}

/* pip.install: pip may take long, so without a deadline (liveness checks
 * as for runs). */
int ctxd_pip_install(ctxd_client *c, const char *ctx, const char *const *packages, size_t npackages,
                     const ctxd_package **out, size_t *n)
{
    static const proto_field fields[] = {{"packages", PF_ARRAY, true, 0}};
    static const proto_field item_fields[] = {{"name", PF_STR, true, 0},
                                              {"cached", PF_BOOL, true, 0}};
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    proto_buf b;
    msg_in *m = NULL;
    proto_buf_init(&b);
    uint64_t id = ctxd_conn_envelope(c, &b, "pip.install", 2);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, ctx ? ctx : "default");
    int r = put_packages(c, &b, packages, npackages);
    if (r == 0)
        r = ctxd_conn_roundtrip(c, &b, id, true, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = ctxd_conn_check(c, "pip.install reply", m->root, fields, 1);
    const proto_val *arr = proto_map_get(m->root, "packages");
    size_t count = r == 0 ? arr->n : 0;
    ctxd_package *pkgs = ctxd_conn_own(c, mem_calloc(count ? count : 1, sizeof *pkgs));
    for (size_t i = 0; i < count && r == 0; i++) {
        const proto_val *item = &arr->as.items[i];
        r = ctxd_conn_check(c, "pip.install reply's package", item, item_fields, 2);
        if (r == 0) {
            pkgs[i].name = ctxd_conn_own_str(c, proto_map_get(item, "name"));
            pkgs[i].cached = get_bool(item, "cached");
        }
    }
    ctxd_conn_msg_free(m);
    if (out)
        *out = r == 0 ? pkgs : NULL;
    if (n)
        *n = r == 0 ? count : 0;
    return r;
}

/* One policy value from its text form (see ctxd_create_opts): a boolean,
 * a number (unsigned integer or float) or a [list,of,strings]. */
static int put_policy_value(ctxd_client *c, proto_buf *b, const char *key, const char *v)
{
    size_t n = strlen(v);
    if (!strcmp(v, "true") || !strcmp(v, "false")) {
        proto_put_bool(b, v[0] == 't');
        return 0;
    }
    if (n >= 2 && v[0] == '[' && v[n - 1] == ']') {
        uint32_t items = 0;
        for (size_t i = 1; i < n - 1; i++)
            items += v[i] == ',';
        items += n > 2;
        proto_put_array(b, items);
        for (size_t i = 1, start = 1; n > 2 && i <= n - 1; i++)
            if (i == n - 1 || v[i] == ',') {
                proto_put_strn(b, v + start, i - start);
                start = i + 1;
            }
        return 0;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long u = strtoull(v, &end, 10);
    if (n && v[0] != '-' && end && *end == '\0' && errno == 0) {
        proto_put_uint(b, u);
        return 0;
    }
    double d = strtod(v, &end);
    if (n && end && *end == '\0') {
        proto_put_double(b, d);
        return 0;
    }
    return ctxd_conn_fail(c, CTXD_EINVALID, NULL,
                          "policy field '%s': '%s' is not true, false, a number or [a,b,...]", key,
                          v);
}

static int put_policy(ctxd_client *c, proto_buf *b, const ctxd_kv *kv, size_t n)
{
    if (n > 64 || !kv)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "bad policy (at most 64 fields)");
    proto_put_str(b, "policy");
    proto_put_map(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        if (!kv[i].key || !kv[i].value)
            return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "policy field %zu is NULL", i);
        proto_put_str(b, kv[i].key);
        int r = put_policy_value(c, b, kv[i].key, kv[i].value);
        if (r < 0)
            return r;
    }
    return 0;
}

/* ctx.create with every option; with packages it waits for pip without a
 * deadline. */
int ctxd_ctx_create_ex(ctxd_client *c, const ctxd_create_opts *o, ctxd_ctx_info *out)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    static const ctxd_create_opts none = {0};
    if (!o)
        o = &none;
    proto_buf b;
    msg_in *m = NULL;
    proto_buf_init(&b);
    uint64_t id = ctxd_conn_envelope(c, &b, "ctx.create",
                                     (o->name != NULL) + (o->cwd != NULL) + (o->nenv > 0) +
                                         (o->npackages > 0) + (o->tier != NULL) + (o->npolicy > 0) +
                                         (o->from_snapshot != NULL) + (o->autosnapshot != NULL));
    if (o->from_snapshot) {
        proto_put_str(&b, "from_snapshot");
        proto_put_str(&b, o->from_snapshot);
    }
    if (o->autosnapshot) { /* "run", or seconds */
        char *end;
        double s = strtod(o->autosnapshot, &end);
        proto_put_str(&b, "autosnapshot");
        if (*o->autosnapshot && !*end)
            proto_put_double(&b, s);
        else
            proto_put_str(&b, o->autosnapshot);
    }
    if (o->tier) {
        proto_put_str(&b, "tier");
        proto_put_str(&b, o->tier);
    }
    if (o->name) {
        proto_put_str(&b, "name");
        proto_put_str(&b, o->name);
    }
    if (o->cwd) {
        proto_put_str(&b, "cwd");
        proto_put_str(&b, o->cwd);
    }
    int r = 0;
    if (o->nenv > 0) {
        proto_put_str(&b, "env");
        r = ctxd_conn_put_env(c, &b, o->env, o->nenv);
    }
    if (r == 0 && o->npackages > 0)
        r = put_packages(c, &b, o->packages, o->npackages);
    if (r == 0 && o->npolicy > 0)
        r = put_policy(c, &b, o->policy, o->npolicy);
    if (r == 0)
        r = ctxd_conn_roundtrip(c, &b, id, o->npackages > 0 || o->from_snapshot, &m);
    proto_buf_free(&b);
    if (r < 0)
        return r;
    r = parse_ctx_reply(c, m, out);
    ctxd_conn_msg_free(m);
    return r;
}

/* ---- queries ----------------------------------------------------------- */

/* Sends one query (its optional fields when set) and waits, without a
 * deadline, for its ok, left in *m. */
static int query(ctxd_client *c, const char *type, const char *ctx, const char *code,
                 uint64_t cursor, unsigned detail_level, msg_in **m)
{
    if (ctxd_conn_begin(c) < 0)
        return c->last_rc;
    if (!code)
        return ctxd_conn_fail(c, CTXD_EINVALID, NULL, "%s needs the code", type);
    bool with_cursor = cursor != CTXD_CURSOR_END, with_detail = detail_level != 0;
    proto_buf b;
    proto_buf_init(&b);
    uint64_t id = ctxd_conn_envelope(c, &b, type, 2 + with_cursor + with_detail);
    proto_put_str(&b, "ctx");
    proto_put_str(&b, ctx ? ctx : "default");
    proto_put_str(&b, "code");
    proto_put_str(&b, code);
    if (with_cursor) {
        proto_put_str(&b, "cursor");
        proto_put_uint(&b, cursor);
    }
    if (with_detail) {
        proto_put_str(&b, "detail_level");
        proto_put_uint(&b, detail_level);
    }
    int r = ctxd_conn_roundtrip(c, &b, id, true, m);
    proto_buf_free(&b);
    return r;
}

/* complete: the matches copied out of the reply. */
int ctxd_complete(ctxd_client *c, const char *ctx, const char *code, uint64_t cursor,
                  ctxd_completion *out)
{
    static const proto_field fields[] = {{"matches", PF_ARRAY, true, 0},
                                         {"cursor_start", PF_UINT, true, 0},
                                         {"cursor_end", PF_UINT, true, 0}};
    msg_in *m = NULL;
    int r = query(c, "complete", ctx, code, cursor, 0, &m);
    if (r < 0)
        return r;
    r = ctxd_conn_check(c, "complete reply", m->root, fields, 3);
    const proto_val *arr = r == 0 ? proto_map_get(m->root, "matches") : NULL;
    for (uint32_t i = 0; arr && i < arr->n && r == 0; i++)
        if (arr->as.items[i].kind != PROTO_STR)
            r = ctxd_conn_fail(c, CTXD_EPROTOCOL, NULL, "complete reply: a match is not a str");
    if (r == 0 && out) {
        const char **matches = ctxd_conn_own(c, mem_calloc(arr->n ? arr->n : 1, sizeof *matches));
        for (uint32_t i = 0; i < arr->n; i++)
            matches[i] = ctxd_conn_own_str(c, &arr->as.items[i]);
        *out = (ctxd_completion){.matches = matches,
                                 .nmatches = arr->n,
                                 .cursor_start = get_uint(m->root, "cursor_start"),
                                 .cursor_end = get_uint(m->root, "cursor_end")};
    }
    ctxd_conn_msg_free(m);
    return r;
}

/* inspect: found and the text/plain entry of data. */
int ctxd_inspect(ctxd_client *c, const char *ctx, const char *code, uint64_t cursor,
                 unsigned detail_level, ctxd_inspection *out)
{
    static const proto_field fields[] = {{"found", PF_BOOL, true, 0}, {"data", PF_STRMAP, true, 0}};
    msg_in *m = NULL;
    int r = query(c, "inspect", ctx, code, cursor, detail_level, &m);
    if (r < 0)
        return r;
    r = ctxd_conn_check(c, "inspect reply", m->root, fields, 2);
    if (r == 0 && out) {
        const char *text =
            ctxd_conn_own_str(c, proto_map_get(proto_map_get(m->root, "data"), "text/plain"));
        *out = (ctxd_inspection){.found = get_bool(m->root, "found"), .text = text ? text : ""};
    }
    ctxd_conn_msg_free(m);
    return r;
}

/* is_complete: status and indent. */
int ctxd_is_complete(ctxd_client *c, const char *ctx, const char *code, ctxd_completeness *out)
{
    static const proto_field fields[] = {{"status", PF_STR, true, 0}, {"indent", PF_STR, false, 0}};
    msg_in *m = NULL;
    int r = query(c, "is_complete", ctx, code, CTXD_CURSOR_END, 0, &m);
    if (r < 0)
        return r;
    r = ctxd_conn_check(c, "is_complete reply", m->root, fields, 2);
    if (r == 0 && out) {
        const char *indent = ctxd_conn_own_str(c, proto_map_get(m->root, "indent"));
        *out = (ctxd_completeness){.status = ctxd_conn_own_str(c, proto_map_get(m->root, "status")),
                                   .indent = indent ? indent : ""};
    }
    ctxd_conn_msg_free(m);
    return r;
}
