/* sup_request: decoding, checking and answering client requests. Requests
 * are dispatched from a table; each entry lists its fields for proto_check. */
#include "sup_request.h"

#include "sup_config.h"
#include "sup_ctxinfo.h"
#include "sup_ctxpss.h"
#include "sup_disk.h"
#include "sup_ctx.h"
#include "sup_files.h"
#include "sup_fork.h"
#include "sup_held.h"
#include "sup_ident.h"
#include "sup_life.h"
#include "sup_log.h"
#include "sup_peer.h"
#include "sup_pkgs.h"
#include "sup_policy.h"
#include "sup_query.h"
#include "sup_reap.h"
#include "sup_route.h"
#include "sup_run.h"
#include "sup_send.h"
#include "sup_snap.h"
#include "sup_stats.h"
#include "sup_zygote.h"

#include "mem.h"
#include "proto.h"
#include "sbx_path.h"

#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A field's value, with an explicit nil read as absent (as proto_check
 * treats it). */
static const proto_val *get(const proto_val *msg, const char *key)
{
    const proto_val *v = proto_map_get(msg, key);
    return v && v->kind == PROTO_NIL ? NULL : v;
}

static void reply_error(const sup_peer *peer, const proto_error *err)
{
    sup_reply_err(peer, err->code, "%s", err->msg);
}

/* `ok` with one context's INFO, the reply of create and restart. */
static void reply_ok_empty(const sup_peer *peer)
{
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 0);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

/* Copies a checked str->str map into "KEY=VALUE" strings. Keys must be
 * non-empty and free of '='. */
static int env_strings(const proto_val *map, char ***out, size_t *n, const sup_peer *peer)
{
    *out = NULL;
    *n = 0;
    if (!map)
        return 0;
    for (uint32_t i = 0; i < map->n; i++) {
        const proto_val *k = &map->as.items[2 * i];
        if (k->n == 0 || memchr(k->as.s, '=', k->n)) {
            sup_reply_err(peer, "bad_field",
                          "field 'env': a variable name must be non-empty "
                          "and must not contain '='");
            return -1;
        }
    }
    char **env = mem_calloc(map->n + 1, sizeof *env);
    for (uint32_t i = 0; i < map->n; i++) {
        const proto_val *k = &map->as.items[2 * i], *v = &map->as.items[2 * i + 1];
        env[i] = mem_alloc(k->n + v->n + 2);
        memcpy(env[i], k->as.s, k->n);
        env[i][k->n] = '=';
        memcpy(env[i] + k->n + 1, v->as.s, v->n);
        env[i][k->n + 1 + v->n] = '\0';
    }
    *out = env;
    *n = map->n;
    return 0;
}

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

static void free_strings(char **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

/* ---- handlers --------------------------------------------------------- */

/* The syntaxes a run may ask for (execute and ctx.create `syntax`), as
 * hello's `syntaxes` lists them. */
static const char *const syntaxes[] = {"python", "ipython"};

/* A checked `syntax` field: its static name, "" when absent, NULL (after
 * replying bad_field) when it names none. */
static const char *syntax_value(const proto_val *v, const sup_peer *peer)
{
    if (!v)
        return "";
    for (size_t i = 0; i < sizeof syntaxes / sizeof syntaxes[0]; i++)
        if (proto_str_eq(v, syntaxes[i]))
            return syntaxes[i];
    sup_reply_err(peer, "bad_field", "field 'syntax' must be \"python\" or \"ipython\"");
    return NULL;
}

static void put_limits(proto_buf *b);

static void do_hello(const proto_val *msg, const sup_peer *peer)
{
    (void)msg;
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 12);
    proto_put_str(&b, "server");
    proto_put_str(&b, "ctxd");
    proto_put_str(&b, "version");
    proto_put_str(&b, SUP_VERSION);
    proto_put_str(&b, "protocol");
    proto_put_uint(&b, PROTO_VERSION);
    proto_put_str(&b, "versions");
    proto_put_array(&b, 1);
    proto_put_uint(&b, PROTO_VERSION);
    proto_put_str(&b, "pid");
    proto_put_uint(&b, (uint64_t)getpid());
    proto_put_str(&b, "instance");
    proto_put_str(&b, sup_instance);
    proto_put_str(&b, "limits");
    put_limits(&b);
    proto_put_str(&b, "tiers");
    sup_policy_put_tiers(&b);
    proto_put_str(&b, "preloads");
    sup_zygote_put_preloads(&b);
    proto_put_str(&b, "identity");
    sup_ident_put_hello(&b);
    proto_put_str(&b, "syntaxes");
    proto_put_array(&b, sizeof syntaxes / sizeof syntaxes[0]);
    for (size_t i = 0; i < sizeof syntaxes / sizeof syntaxes[0]; i++)
        proto_put_str(&b, syntaxes[i]);
    /* Whether pip.install and ctx.create {packages} can install anything,
     * and from which kinds of source (no paths or URLs). */
    proto_put_str(&b, "packages");
    proto_put_map(&b, 2);
    proto_put_str(&b, "offered");
    proto_put_bool(&b, sup_cfg.wheelhouse || sup_cfg.package_index);
    proto_put_str(&b, "sources");
    proto_put_array(&b, (sup_cfg.wheelhouse != NULL) + (sup_cfg.package_index != NULL));
    if (sup_cfg.wheelhouse)
        proto_put_str(&b, "wheelhouse");
    if (sup_cfg.package_index)
        proto_put_str(&b, "index");
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

/* The configured limits, as `hello` and `stats` report them. */
static void put_limits(proto_buf *b)
{
    proto_put_map(b, 15);
    proto_put_str(b, "max_request_bytes");
    proto_put_uint(b, sup_cfg.max_request_bytes);
    proto_put_str(b, "max_code_bytes");
    proto_put_uint(b, sup_cfg.max_code_bytes);
    proto_put_str(b, "max_queue");
    proto_put_uint(b, sup_cfg.max_queue);
    proto_put_str(b, "max_contexts");
    proto_put_uint(b, sup_cfg.max_contexts);
    proto_put_str(b, "max_output");
    proto_put_uint(b, sup_cfg.max_output);
    proto_put_str(b, "default_timeout");
    proto_put_double(b, sup_cfg.default_timeout);
    proto_put_str(b, "kill_grace");
    proto_put_double(b, sup_cfg.kill_grace);
    proto_put_str(b, "idle_ttl");
    proto_put_double(b, sup_cfg.idle_ttl);
    proto_put_str(b, "on_disconnect");
    proto_put_str(b, sup_cfg.interrupt_on_disconnect ? "interrupt" : "finish");
    proto_put_str(b, "max_held");
    proto_put_uint(b, sup_cfg.max_held);
    proto_put_str(b, "max_client_held");
    proto_put_uint(b, sup_cfg.max_client_held);
    proto_put_str(b, "max_chan_held");
    proto_put_uint(b, sup_cfg.max_chan_held);
    proto_put_str(b, "max_snapshot_bytes");
    proto_put_uint(b, sup_cfg.max_snapshot_bytes);
    proto_put_str(b, "max_snapshots");
    proto_put_uint(b, sup_cfg.max_snapshots);
    proto_put_str(b, "max_snapshot_total");
    proto_put_uint(b, sup_cfg.max_snapshot_total);
}

static void do_stats(const proto_val *msg, const sup_peer *peer)
{
    (void)msg;
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 7);
    size_t live, busy, queued;
    sup_ctxinfo_counts(&live, &busy, &queued);
    sup_stats_put(&b, live, busy, queued);
    proto_put_str(&b, "limits");
    put_limits(&b);
    proto_put_str(&b, "preloads");
    sup_zygote_put_preloads(&b);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

static double num_value(const proto_val *v, double dflt)
{
    if (!v)
        return dflt;
    switch (v->kind) {
    case PROTO_UINT:
        return (double)v->as.u;
    case PROTO_INT:
        return (double)v->as.i;
    case PROTO_FLOAT:
        return v->as.f;
    default:
        return dflt;
    }
}

static void do_execute(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *code = get(msg, "code");
    if (code->n > sup_cfg.max_code_bytes) {
        sup_reply_err(peer, "too_large", "field 'code' is %u bytes; max_code_bytes is %zu",
                      (unsigned)code->n, sup_cfg.max_code_bytes);
        return;
    }
    double timeout = num_value(get(msg, "timeout"), sup_cfg.default_timeout);
    if (!(timeout >= 0) || timeout > 1e9) {
        sup_reply_err(peer, "bad_field", "field 'timeout' must be between 0 and 1e9 seconds");
        return;
    }
    const char *syntax = syntax_value(get(msg, "syntax"), peer);
    if (!syntax)
        return;
    const proto_val *env = get(msg, "env");
    char **unused;
    size_t nunused;
    if (env_strings(env, &unused, &nunused, peer) < 0)
        return;
    free_strings(unused, nunused);
    const proto_val *argv = get(msg, "argv");
    const proto_val *file = get(msg, "file");
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
    sup_run *r = mem_calloc(1, sizeof *r);
    r->peer = *peer;
    r->code = mem_strndup(code->as.s, code->n);
    r->code_len = code->n;
    if (env)
        proto_put_val(&r->env, env);
    r->timeout = timeout;
    const proto_val *silent = get(msg, "silent");
    const proto_val *soe = get(msg, "stop_on_error");
    r->silent = silent && silent->kind == PROTO_BOOL && silent->as.b;
    r->stop_on_error = soe && soe->kind == PROTO_BOOL && soe->as.b;
    const proto_val *stdin_ok = get(msg, "allow_stdin");
    r->allow_stdin = stdin_ok && stdin_ok->kind == PROTO_BOOL && stdin_ok->as.b;
    const proto_val *arts = get(msg, "artifacts");
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

static void do_interrupt(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *c = sup_life_lookup(msg, peer, false);
    if (!c)
        return;
    /* With `run`, only that execute of this client is interrupted, so an
     * interrupt that races with the run's end cannot hit the next one. */
    const proto_val *run = get(msg, "run");
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
static void do_input_reply(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *c = sup_life_lookup(msg, peer, false);
    if (!c)
        return;
    const proto_val *value = get(msg, "value");
    const proto_val *eof = get(msg, "eof");
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

/* ctx.create `lease`: seconds a context lives without a request naming it. */
#define LEASE_MIN 1.0
#define LEASE_MAX 86400.0

/* ctx.create's checked arguments, kept while its packages install. */
typedef struct create_args {
    sup_peer peer;
    char *name;
    char cwd[4096];
    char **env;
    size_t nenv;
    sup_policy *policy;
    sup_ident *ident; /* its uid/gid and private directory */
    double lease;     /* seconds; 0 = none */
    double autosnap;  /* `autosnapshot` (sup_snap_parse_auto); 0 = off */
    int snap_fd;      /* from_snapshot: the snapshot, opened; -1 = none */
    char *snap_id;    /* ... and its id */
} create_args;

static void create_args_free(create_args *a)
{
    sup_ident_unref(a->ident); /* when the context was not made: its directory goes */
    free(a->name);
    free_strings(a->env, a->nenv);
    sup_policy_free(a->policy);
    if (a->snap_fd >= 0)
        close(a->snap_fd);
    free(a->snap_id);
    free(a);
}

/* Makes the context (with site, its package directory, or NULL for a new
 * one); the `ok` comes when its worker is ready. Frees a. */
static void create_finish(create_args *a, sup_site *site)
{
    proto_error err;
    if (sup_ctx_find(a->name, strlen(a->name))) { /* taken while packages installed */
        sup_reply_err(&a->peer, "exists", "a context named '%s' already exists", a->name);
        sup_pkgs_site_unref(site);
        create_args_free(a);
        return;
    }
    sup_policy_set_pending(a->policy);
    a->policy = NULL;
    sup_ctx *c = sup_life_create(a->name, a->cwd, a->env, a->nenv, site, a->ident, &err);
    sup_policy_free(sup_policy_take_pending()); /* not taken when the limit refused it */
    if (!c) {
        sup_pkgs_site_unref(site);
        reply_error(&a->peer, &err);
        create_args_free(a);
        return;
    }
    a->env = NULL; /* the context's now */
    a->nenv = 0;
    a->ident = NULL;
    sup_reap_set_lease(c, a->lease);
    c->autosnap = a->autosnap;
    if (a->snap_fd >= 0) { /* the reply comes once the snapshot is restored */
        sup_snap_create_restore(c, a->snap_fd, a->snap_id, &a->peer);
        a->snap_fd = -1;
    } else {
        sup_ctxinfo_add_waiter(c, &a->peer);
    }
    create_args_free(a);
}

/* ctx.create with packages: they are in the cache; link them into a new
 * package directory before the worker starts, so its first import sees
 * them. */
static void create_installed(void *arg, const sup_pkgs_result *res)
{
    create_args *a = arg;
    if (res->error) {
        sup_reply_err(&a->peer, res->code, "%s", res->error);
        create_args_free(a);
        return;
    }
    sup_site *site = sup_pkgs_site_new();
    proto_error err;
    if (sup_pkgs_link(site, res->reqs, res->n, &err) < 0) {
        reply_error(&a->peer, &err);
        sup_pkgs_site_unref(site);
        create_args_free(a);
        return;
    }
    create_finish(a, site);
}

/* ctx.create's `packages` and `policy.packages`, as one list. A daemon
 * that offers no packages refuses them (bad_field naming the field). */
static int create_packages(const proto_val *msg, char ***reqs, size_t *n, const sup_peer *peer)
{
    const proto_val *lists[2] = {get(msg, "packages"), NULL};
    const char *names[2] = {"packages", "policy.packages"};
    const proto_val *policy = get(msg, "policy");
    if (policy && policy->kind == PROTO_MAP)
        lists[1] = get(policy, "packages");
    *reqs = NULL;
    *n = 0;
    for (int i = 0; i < 2; i++) {
        if (!lists[i] || (lists[i]->kind == PROTO_ARRAY && lists[i]->n == 0))
            continue;
        char **more;
        size_t nmore;
        proto_error err;
        if (sup_pkgs_parse(lists[i], names[i], &more, &nmore, &err) < 0) {
            reply_error(peer, &err);
            sup_pkgs_free_reqs(*reqs, *n);
            return -1;
        }
        if (!sup_pkgs_enabled()) {
            sup_reply_err(peer, "bad_field",
                          "field '%s': this daemon offers no packages (start it with "
                          "--wheelhouse DIR or --package-index URL)",
                          names[i]);
            sup_pkgs_free_reqs(more, nmore);
            sup_pkgs_free_reqs(*reqs, *n);
            return -1;
        }
        *reqs = mem_realloc(*reqs, (*n + nmore + 1) * sizeof **reqs);
        for (size_t k = 0; k < nmore; k++) {
            bool dup = false;
            for (size_t j = 0; j < *n && !dup; j++)
                dup = strcmp((*reqs)[j], more[k]) == 0;
            if (dup)
                free(more[k]);
            else
                (*reqs)[(*n)++] = more[k];
        }
        free(more);
        if (*n > SUP_PKGS_MAX) {
            sup_reply_err(peer, "bad_field",
                          "fields 'packages' and 'policy.packages' together name more than %d "
                          "requirements",
                          SUP_PKGS_MAX);
            sup_pkgs_free_reqs(*reqs, *n);
            return -1;
        }
    }
    return 0;
}

/* A cwd or root must be reachable without following a symbolic link in
 * any component (what is checked is what the worker opens): else `code`
 * naming field and the link. dir: it must be a directory. */
static int check_path(const char *path, bool dir, const char *code, const char *field,
                      const sup_peer *peer)
{
    char link[4096];
    int fd = sbx_path_open(path, O_PATH | (dir ? O_DIRECTORY : 0), link, sizeof link);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    if (errno == ELOOP)
        sup_reply_err(peer, code,
                      "field '%s': '%s' is a symbolic link (in '%s'): paths are resolved "
                      "without following links",
                      field, link, path);
    else if (dir)
        sup_reply_err(peer, code, "field '%s': '%s' is not an existing directory", field, path);
    else
        return 0; /* a missing root: the worker says so (it must exist) */
    return -1;
}

static void do_create(const proto_val *msg, const sup_peer *peer)
{
    create_args *a = mem_calloc(1, sizeof *a);
    a->peer = *peer;
    a->snap_fd = -1;
    const proto_val *name = get(msg, "name");
    if (name) {
        a->name = proto_strdup(name);
    } else {
        unsigned long long r = 0;
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&r, sizeof r, 1, f) != 1)
            r = (unsigned long long)(sup_unix_now() * 1e6);
        if (f)
            fclose(f);
        char generated[32];
        snprintf(generated, sizeof generated, "ctx-%012llx", r & 0xffffffffffffULL);
        a->name = mem_strdup(generated);
    }
    if (sup_ctx_find(a->name, strlen(a->name))) {
        sup_reply_err(peer, "exists", "a context named '%s' already exists", a->name);
        create_args_free(a);
        return;
    }
    const proto_val *cwdv = get(msg, "cwd");
    if (cwdv) {
        if (cwdv->n >= sizeof a->cwd || cwdv->n == 0 || cwdv->as.s[0] != '/' ||
            !sup_policy_path_plain(cwdv->as.s, cwdv->n)) {
            sup_reply_err(peer, "bad_cwd",
                          "field 'cwd' must be an absolute path without '.', '..' or empty "
                          "components");
            create_args_free(a);
            return;
        }
        memcpy(a->cwd, cwdv->as.s, cwdv->n);
        a->cwd[cwdv->n] = '\0';
        if (check_path(a->cwd, true, "bad_cwd", "cwd", peer) < 0) {
            create_args_free(a);
            return;
        }
    }
    proto_error err;
    a->policy = sup_policy_parse(get(msg, "tier"), get(msg, "policy"), &err);
    if (!a->policy) {
        reply_error(peer, &err);
        create_args_free(a);
        return;
    }
    if (cwdv && a->policy->tier == SUP_TIER_SANDBOX && !sup_policy_sandbox_path_ok(a->cwd)) {
        sup_reply_err(peer, "bad_cwd",
                      "a sandbox's cwd must be a plain absolute path (no '.' or '..') other "
                      "than '/' and not under /proc, /sys or /dev");
        create_args_free(a);
        return;
    }
    const struct {
        const char *field;
        const sup_strlist *l;
    } roots[] = {{"policy.filesystem_read_roots", &a->policy->read_roots},
                 {"policy.filesystem_write_roots", &a->policy->write_roots}};
    for (size_t r = 0; r < 2; r++)
        for (size_t i = 0; i < roots[r].l->n; i++)
            if (check_path(roots[r].l->v[i], false, "bad_field", roots[r].field, peer) < 0) {
                create_args_free(a);
                return;
            }
    /* Who the worker is, and without a cwd a private directory: never the
     * daemon's working directory. */
    bool confined = a->policy->tier == SUP_TIER_LOCAL || a->policy->tier == SUP_TIER_SANDBOX;
    a->ident = sup_ident_new(confined, a->name, !cwdv, &err);
    if (!a->ident) {
        reply_error(peer, &err);
        create_args_free(a);
        return;
    }
    if (!cwdv)
        snprintf(a->cwd, sizeof a->cwd, "%s", a->ident->dir);
    /* disk_bytes: the private directory is a file system of that size. */
    if (!cwdv && a->policy->disk_bytes &&
        sup_disk_mount(a->ident->dir, a->policy->disk_bytes, a->ident->uid, a->ident->gid) < 0) {
        proto_error_set(&err, "io", "cannot make the context's disk_bytes file system: %s",
                        strerror(errno));
        reply_error(peer, &err);
        create_args_free(a);
        return;
    }
    /* A local context writes only its directory (and /dev/shm, where
     * multiprocessing keeps its semaphores) unless its policy names
     * write roots. */
    if (a->policy->tier == SUP_TIER_LOCAL && !a->policy->write_roots.set)
        sup_policy_default_write_roots(a->policy, a->cwd);
    if (env_strings(get(msg, "env"), &a->env, &a->nenv, peer) < 0) {
        create_args_free(a);
        return;
    }
    /* figures: false turns off sending matplotlib figures (wrk_display.c
     * reads CTXD_FIGURES; an explicit env entry is overridden). */
    const proto_val *figures = get(msg, "figures");
    if (figures && figures->kind == PROTO_BOOL && !figures->as.b) {
        a->env = mem_realloc(a->env, (a->nenv + 2) * sizeof *a->env);
        a->env[a->nenv++] = mem_strdup("CTXD_FIGURES=0");
        a->env[a->nenv] = NULL;
    }
    /* syntax: the context's default for runs that name none (wrk_ipy.c
     * reads CTXD_SYNTAX), kept across restarts like the rest of env. */
    const char *syntax = syntax_value(get(msg, "syntax"), peer);
    if (!syntax) {
        create_args_free(a);
        return;
    }
    if (*syntax) {
        char kv[32];
        snprintf(kv, sizeof kv, "CTXD_SYNTAX=%s", syntax);
        a->env = mem_realloc(a->env, (a->nenv + 2) * sizeof *a->env);
        a->env[a->nenv++] = mem_strdup(kv);
        a->env[a->nenv] = NULL;
    }
    const proto_val *lease = get(msg, "lease");
    a->lease = num_value(lease, 0);
    if (lease &&
        (!(a->lease >= LEASE_MIN && a->lease <= LEASE_MAX) || strcmp(a->name, "default") == 0)) {
        sup_reply_err(peer, "bad_field",
                      "field 'lease' must be between %g and %g seconds (and not on 'default')",
                      LEASE_MIN, LEASE_MAX);
        create_args_free(a);
        return;
    }
    a->autosnap = sup_snap_parse_auto(get(msg, "autosnapshot"), peer);
    if (a->autosnap < -1) {
        create_args_free(a);
        return;
    }
    const proto_val *from = get(msg, "from_snapshot");
    if (from) {
        a->snap_fd = sup_snap_open_for_create(from, peer);
        if (a->snap_fd < 0) {
            create_args_free(a);
            return;
        }
        a->snap_id = proto_strdup(from);
    }
    char **reqs;
    size_t nreqs;
    if (create_packages(msg, &reqs, &nreqs, peer) < 0) {
        create_args_free(a);
        return;
    }
    if (nreqs == 0) {
        create_finish(a, NULL);
        return;
    }
    if (sup_ctx_count() >= sup_cfg.max_contexts) { /* before any pip runs */
        sup_reply_err(peer, "limit", "the daemon already holds %zu contexts (max_contexts)",
                      sup_ctx_count());
        sup_pkgs_free_reqs(reqs, nreqs);
        create_args_free(a);
        return;
    }
    sup_pkgs_fetch(reqs, nreqs, create_installed, a);
    sup_pkgs_free_reqs(reqs, nreqs);
}

/* pip.install, kept while the packages install: the context is found
 * again by name, and must still have the same package directory. */
typedef struct install_args {
    sup_peer peer;
    char name[PROTO_MAX_NAME + 1];
    sup_site *site;
} install_args;

static void install_done(void *arg, const sup_pkgs_result *res)
{
    install_args *a = arg;
    sup_ctx *c = sup_ctx_find(a->name, strlen(a->name));
    proto_error err;
    if (res->error) {
        sup_reply_err(&a->peer, res->code, "%s", res->error);
    } else if (!c || c->site != a->site) {
        sup_reply_err(&a->peer, "unknown_context",
                      "context '%s' was deleted while its packages were installed", a->name);
    } else if (sup_pkgs_link(c->site, res->reqs, res->n, &err) < 0) {
        reply_error(&a->peer, &err);
    } else {
        proto_buf b;
        proto_buf_init(&b);
        sup_msg_begin(&b, "ok", &a->peer, 1);
        sup_pkgs_put_result(&b, res);
        sup_deliver(&a->peer, &b);
        proto_buf_free(&b);
    }
    sup_pkgs_site_unref(a->site);
    free(a);
}

/* pip.install {ctx, packages}: installs (or finds in the cache) and links
 * into the context's package directory; `ok` once importable there. */
static void do_pip_install(const proto_val *msg, const sup_peer *peer)
{
    char **reqs;
    size_t n;
    proto_error err;
    if (sup_pkgs_parse(get(msg, "packages"), "packages", &reqs, &n, &err) < 0) {
        reply_error(peer, &err);
        return;
    }
    if (!sup_pkgs_enabled()) {
        sup_reply_err(peer, "install",
                      "this daemon offers no packages: start it with --wheelhouse DIR or "
                      "--package-index URL");
        sup_pkgs_free_reqs(reqs, n);
        return;
    }
    sup_ctx *c = sup_life_lookup(msg, peer, true);
    if (!c) {
        sup_pkgs_free_reqs(reqs, n);
        return;
    }
    if (!c->site) {
        sup_reply_err(peer, "install", "context '%s' has no package directory", c->name);
        sup_pkgs_free_reqs(reqs, n);
        return;
    }
    install_args *a = mem_calloc(1, sizeof *a);
    a->peer = *peer;
    snprintf(a->name, sizeof a->name, "%s", c->name);
    a->site = sup_pkgs_site_ref(c->site);
    sup_pkgs_fetch(reqs, n, install_done, a);
    sup_pkgs_free_reqs(reqs, n);
}

/* ctx.list [after] [limit]: one page of INFOs sorted by name. A page ends
 * at `limit`, or before the reply would pass LIST_PAGE_BYTES (far below the
 * frame cap), and then says `next`, the name to ask `after`; stale PSS
 * figures are read again for at most LIST_PSS_BUDGET seconds a page. */
#define LIST_PAGE_BYTES (4u * 1024 * 1024)
#define LIST_PSS_BUDGET 0.02
static void do_list(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *after = get(msg, "after"), *lim = get(msg, "limit");
    size_t n = sup_ctx_count(), from = 0;
    sup_ctx **v = sup_ctx_sorted(); /* by name */
    if (after && after->kind == PROTO_STR) {
        size_t lo = 0, hi = n; /* the first name greater than `after` */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            const char *m = v[mid]->name;
            size_t ml = strlen(m), k = ml < after->n ? ml : after->n;
            int cmp = memcmp(m, after->as.s, k);
            if (cmp < 0 || (cmp == 0 && ml <= after->n))
                lo = mid + 1;
            else
                hi = mid;
        }
        from = lo;
    }
    size_t want = n - from;
    if (lim && lim->kind == PROTO_UINT && lim->as.u > 0 && lim->as.u < want)
        want = (size_t)lim->as.u;
    /* INFOs go to a buffer of their own first: the page's length is known
     * only at its end. */
    proto_buf items;
    proto_buf_init(&items);
    size_t taken = 0;
    sup_ctxpss_info_budget(LIST_PSS_BUDGET);
    while (taken < want && items.len < LIST_PAGE_BYTES)
        sup_ctxinfo_put(&items, v[from + taken++]);
    sup_ctxpss_info_budget(0);
    bool more = from + taken < n;
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, more ? 2 : 1);
    proto_put_str(&b, "contexts");
    proto_put_array(&b, (uint32_t)taken);
    proto_buf_append(&b, items.data, items.len);
    if (more) {
        proto_put_str(&b, "next");
        proto_put_str(&b, v[from + taken - 1]->name);
    }
    free(v);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
    proto_buf_free(&items);
}

static void do_delete(const proto_val *msg, const sup_peer *peer)
{
    if (proto_str_eq(get(msg, "ctx"), "default")) {
        sup_reply_err(peer, "forbidden", "the context 'default' cannot be deleted; restart it");
        return;
    }
    sup_ctx *c = sup_life_lookup(msg, peer, false);
    if (!c)
        return;
    sup_life_delete(c);
    reply_ok_empty(peer);
}

/* ctx.renew {ctx}: a leased context's owner is alive (sup_life_lookup renews
 * it); the reply says the lease, 0 for a context without one. */
static void do_renew(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *c = sup_life_lookup(msg, peer, false);
    if (!c)
        return;
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 1);
    proto_put_str(&b, "lease");
    proto_put_double(&b, c->lease);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

/* ctx.info {ctx}: one context's INFO, without listing them all (the
 * router asks it to learn what a dropped connection left undecided). */
static void do_info(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *c = sup_life_lookup(msg, peer, false);
    if (!c)
        return;
    proto_buf b;
    proto_buf_init(&b);
    sup_msg_begin(&b, "ok", peer, 1);
    proto_put_str(&b, "ctx");
    sup_ctxinfo_put(&b, c);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
}

static void do_restart(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *name = get(msg, "ctx");
    bool existed = sup_ctx_find(name->as.s, name->n) != NULL;
    sup_ctx *c = sup_life_lookup(msg, peer, true);
    if (!c)
        return;
    proto_error err;
    if (existed && sup_life_restart(c, &err) < 0) {
        reply_error(peer, &err);
        return;
    }
    sup_ctxinfo_add_waiter(c, peer);
}

/* ctx.fork: validated here, queued on the source (sup_fork.c), answered
 * when the copy is ready. */
static void do_fork(const proto_val *msg, const sup_peer *peer)
{
    sup_ctx *src = sup_life_lookup(msg, peer, false);
    if (!src)
        return;
    if (src->policy && src->policy->tier == SUP_TIER_SANDBOX) {
        /* Its worker is pid 1 of its namespaces: a copy would share them
         * and die with the source. */
        sup_reply_err(peer, "forbidden",
                      "context '%s' cannot be forked: ctx.fork is not available in the sandbox "
                      "tier (create a new sandbox context instead)",
                      src->name);
        return;
    }
    if (src->policy && src->policy->subprocess_execution == 0) {
        /* The worker's seccomp filter forbids the fork that copies it. */
        sup_reply_err(peer, "forbidden",
                      "context '%s' cannot be forked: its policy has subprocess_execution "
                      "false",
                      src->name);
        return;
    }
    const proto_val *name = get(msg, "name");
    char want[PROTO_MAX_NAME + 1];
    if (name) {
        snprintf(want, sizeof want, "%.*s", (int)name->n, name->as.s);
    } else {
        unsigned long long r = 0;
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&r, sizeof r, 1, f) != 1)
            r = (unsigned long long)(sup_unix_now() * 1e6);
        if (f)
            fclose(f);
        snprintf(want, sizeof want, "ctx-%012llx", r & 0xffffffffffffULL);
    }
    if (sup_ctx_find(want, strlen(want))) {
        sup_reply_err(peer, "exists", "a context named '%s' already exists", want);
        return;
    }
    if (src->pid == 0 && !src->spawning) {
        sup_reply_err(peer, "dead",
                      "context '%s' has no live worker to fork%s%s; run something in it to "
                      "start a new one",
                      src->name, src->last_death ? ": it died, " : "",
                      src->last_death ? src->last_death : "");
        return;
    }
    if (sup_ctx_count() >= sup_cfg.max_contexts) {
        sup_reply_err(peer, "limit", "the daemon already holds %zu contexts (max_contexts)",
                      sup_ctx_count());
        return;
    }
    if (src->run.queued >= sup_cfg.max_queue) {
        sup_reply_err(peer, "busy", "context '%s' already has %zu requests queued (max_queue)",
                      src->name, src->run.queued);
        return;
    }
    sup_ctx_fork(src, want, peer);
}

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
/* Snapshots (sup_snap.c). */
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
    {"hello", NULL, 0, do_hello},
    {"execute", FIELDS(execute_fields), do_execute},
    {"interrupt", FIELDS(interrupt_fields), do_interrupt},
    {"input.reply", FIELDS(input_reply_fields), do_input_reply},
    {"file.put", FIELDS(file_put_fields), sup_files_put},
    {"file.get", FIELDS(file_get_fields), sup_files_get},
    {"ctx.create", FIELDS(create_fields), do_create},
    {"ctx.list", FIELDS(list_fields), do_list},
    {"stats", NULL, 0, do_stats},
    {"ctx.delete", FIELDS(ctx_req_fields), do_delete},
    {"ctx.restart", FIELDS(ctx_req_fields), do_restart},
    {"ctx.renew", FIELDS(ctx_req_fields), do_renew},
    {"ctx.info", FIELDS(ctx_req_fields), do_info},
    {"ctx.fork", FIELDS(fork_fields), do_fork},
    {"pip.install", FIELDS(pip_install_fields), do_pip_install},
    {"complete", FIELDS(complete_fields), sup_query_complete},
    {"inspect", FIELDS(inspect_fields), sup_query_inspect},
    {"is_complete", FIELDS(is_complete_fields), sup_query_is_complete},
    {"ctx.snapshot", FIELDS(snapshot_fields), sup_snap_request},
    {"ctx.restore", FIELDS(restore_fields), sup_snap_restore_request},
    {"ctx.snapshots", FIELDS(snapshots_fields), sup_snap_list},
    {"ctx.snapshot_delete", FIELDS(snapshot_delete_fields), sup_snap_delete},
    {"ctx.snapshot_export", FIELDS(snapshot_delete_fields), sup_snap_export},
    {"ctx.snapshot_import", FIELDS(snapshot_delete_fields), sup_snap_import},
};

static void log_request(const char *type, const proto_val *msg, double t0)
{
    char ctx[PROTO_MAX_NAME + 1] = "";
    const proto_val *name = get(msg, "ctx");
    if (!name)
        name = get(msg, "name");
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
    const proto_val *want = get(msg, "instance");
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
        reply_error(&peer, &err);
        sup_stats_request("unreadable", NULL, "err:bad_frame", 0);
        return;
    }
    const proto_val *msg = &doc.nodes[0];
    proto_envelope env;
    int ok = proto_envelope_read(msg, &env, &err);
    if (env.id)
        set_re(&peer, env.id);
    if (ok < 0) {
        reply_error(&peer, &err);
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
        reply_error(&peer, &err);
    else
        k->handle(msg, &peer);
    /* Runs are logged when they end; everything else here. */
    if (!k || sup_reply_last_code() || strcmp(k->type, "execute") != 0)
        log_request(k ? k->type : "unknown", msg, t0);
    proto_doc_free(&doc);
}
