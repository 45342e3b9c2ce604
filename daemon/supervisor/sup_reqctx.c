/* sup_reqctx: the requests on contexts themselves (sup_reqctx.h):
 * ctx.create (with its packages and from_snapshot), pip.install,
 * ctx.list, ctx.delete, ctx.renew, ctx.info, ctx.restart and ctx.fork. */
#include "sup_reqctx.h"

#include "sup_config.h"
#include "sup_ctx.h"
#include "sup_ctxinfo.h"
#include "sup_ctxpss.h"
#include "sup_disk.h"
#include "sup_fork.h"
#include "sup_ident.h"
#include "sup_life.h"
#include "sup_log.h"
#include "sup_pkgs.h"
#include "sup_policy.h"
#include "sup_reap.h"
#include "sup_reqarg.h"
#include "sup_send.h"
#include "sup_snap.h"

#include "mem.h"
#include "proto.h"
#include "sbx_path.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* An `ok` without fields. */
static void reply_ok_empty(const sup_peer *peer)
{
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

/* Frees a and what it still holds (a context made took its env and
 * ident); closes the snapshot it did not hand on. */
static void create_args_free(create_args *a)
{
    sup_ident_unref(a->ident); /* when the context was not made: its directory goes */
    free(a->name);
    sup_reqarg_free_strings(a->env, a->nenv);
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
    sup_ctx_spec spec = {.name = a->name,
                         .cwd = a->cwd,
                         .env = a->env,
                         .nenv = a->nenv,
                         .site = site,
                         .ident = a->ident,
                         .policy = a->policy};
    sup_ctx *c = sup_life_create(&spec, &err);
    if (!c) {
        sup_pkgs_site_unref(site);
        sup_reqarg_reply_error(&a->peer, &err);
        create_args_free(a);
        return;
    }
    a->env = NULL; /* the context's now */
    a->nenv = 0;
    a->ident = NULL;
    a->policy = NULL;
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
        sup_reqarg_reply_error(&a->peer, &err);
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
    const proto_val *lists[2] = {sup_reqarg_get(msg, "packages"), NULL};
    const char *names[2] = {"packages", "policy.packages"};
    const proto_val *policy = sup_reqarg_get(msg, "policy");
    if (policy && policy->kind == PROTO_MAP)
        lists[1] = sup_reqarg_get(policy, "packages");
    *reqs = NULL;
    *n = 0;
    for (int i = 0; i < 2; i++) {
        if (!lists[i] || (lists[i]->kind == PROTO_ARRAY && lists[i]->n == 0))
            continue;
        char **more;
        size_t nmore;
        proto_error err;
        if (sup_pkgs_parse(lists[i], names[i], &more, &nmore, &err) < 0) {
            sup_reqarg_reply_error(peer, &err);
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

/* ctx.create: the fields are checked, and the first bad one refused with
 * an `err`, before anything is made; the `ok {ctx}` comes once the worker
 * is ready, after its packages are linked and its snapshot restored. */
void sup_reqctx_create(const proto_val *msg, const sup_peer *peer)
{
    create_args *a = mem_calloc(1, sizeof *a);
    a->peer = *peer;
    a->snap_fd = -1;
    const proto_val *name = sup_reqarg_get(msg, "name");
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
    const proto_val *cwdv = sup_reqarg_get(msg, "cwd");
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
    a->policy = sup_policy_parse(sup_reqarg_get(msg, "tier"), sup_reqarg_get(msg, "policy"), &err);
    if (!a->policy) {
        sup_reqarg_reply_error(peer, &err);
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
        sup_reqarg_reply_error(peer, &err);
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
        sup_reqarg_reply_error(peer, &err);
        create_args_free(a);
        return;
    }
    /* A local context writes only its directory (and /dev/shm, where
     * multiprocessing keeps its semaphores) unless its policy names
     * write roots. */
    if (a->policy->tier == SUP_TIER_LOCAL && !a->policy->write_roots.set)
        sup_policy_default_write_roots(a->policy, a->cwd);
    if (sup_reqarg_env_strings(sup_reqarg_get(msg, "env"), &a->env, &a->nenv, peer) < 0) {
        create_args_free(a);
        return;
    }
    /* figures: false turns off sending matplotlib figures (wrk_display.c
     * reads CTXD_FIGURES; an explicit env entry is overridden). */
    const proto_val *figures = sup_reqarg_get(msg, "figures");
    if (figures && figures->kind == PROTO_BOOL && !figures->as.b) {
        a->env = mem_realloc(a->env, (a->nenv + 2) * sizeof *a->env);
        a->env[a->nenv++] = mem_strdup("CTXD_FIGURES=0");
        a->env[a->nenv] = NULL;
    }
    /* syntax: the context's default for runs that name none (wrk_ipy.c
     * reads CTXD_SYNTAX), kept across restarts like the rest of env. */
    const char *syntax = sup_reqarg_syntax_value(sup_reqarg_get(msg, "syntax"), peer);
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
    const proto_val *lease = sup_reqarg_get(msg, "lease");
    a->lease = sup_reqarg_num_value(lease, 0);
    if (lease &&
        (!(a->lease >= LEASE_MIN && a->lease <= LEASE_MAX) || strcmp(a->name, "default") == 0)) {
        sup_reply_err(peer, "bad_field",
                      "field 'lease' must be between %g and %g seconds (and not on 'default')",
                      LEASE_MIN, LEASE_MAX);
        create_args_free(a);
        return;
    }
    a->autosnap = sup_snap_parse_auto(sup_reqarg_get(msg, "autosnapshot"), peer);
    if (a->autosnap < -1) {
        create_args_free(a);
        return;
    }
    const proto_val *from = sup_reqarg_get(msg, "from_snapshot");
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

/* The packages of a pip.install fetched: linked into the context's
 * package directory if it is still the one asked for; answers the client
 * and frees a. */
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
        sup_reqarg_reply_error(&a->peer, &err);
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
void sup_reqctx_pip_install(const proto_val *msg, const sup_peer *peer)
{
    char **reqs;
    size_t n;
    proto_error err;
    if (sup_pkgs_parse(sup_reqarg_get(msg, "packages"), "packages", &reqs, &n, &err) < 0) {
        sup_reqarg_reply_error(peer, &err);
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
void sup_reqctx_list(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *after = sup_reqarg_get(msg, "after"), *lim = sup_reqarg_get(msg, "limit");
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
    proto_map m = sup_msg_open(&b, "ok", peer);
    proto_key(&b, &m, "contexts");
    proto_put_array(&b, (uint32_t)taken);
    proto_buf_append(&b, items.data, items.len);
    if (more) {
        proto_key(&b, &m, "next");
        proto_put_str(&b, v[from + taken - 1]->name);
    }
    sup_msg_end(&b, &m);
    free(v);
    sup_deliver(peer, &b);
    proto_buf_free(&b);
    proto_buf_free(&items);
}

/* ctx.delete {ctx}: the context ends (never 'default'); `ok` at once. */
void sup_reqctx_delete(const proto_val *msg, const sup_peer *peer)
{
    if (proto_str_eq(sup_reqarg_get(msg, "ctx"), "default")) {
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
void sup_reqctx_renew(const proto_val *msg, const sup_peer *peer)
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
void sup_reqctx_info(const proto_val *msg, const sup_peer *peer)
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

/* ctx.restart {ctx}: a new worker for the context (made when absent);
 * the `ok {ctx}` comes when it is ready. */
void sup_reqctx_restart(const proto_val *msg, const sup_peer *peer)
{
    const proto_val *name = sup_reqarg_get(msg, "ctx");
    bool existed = sup_ctx_find(name->as.s, name->n) != NULL;
    sup_ctx *c = sup_life_lookup(msg, peer, true);
    if (!c)
        return;
    proto_error err;
    if (existed && sup_life_restart(c, &err) < 0) {
        sup_reqarg_reply_error(peer, &err);
        return;
    }
    sup_ctxinfo_add_waiter(c, peer);
}

/* ctx.fork: validated here, queued on the source (sup_fork.c), answered
 * when the copy is ready. */
void sup_reqctx_fork(const proto_val *msg, const sup_peer *peer)
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
    const proto_val *name = sup_reqarg_get(msg, "name");
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
