/* sup_policy: parsing and validating a context's tier and policy, and what
 * the supervisor itself enforces (the per-run timeout cap and the worker's
 * clean environment). Everything else the worker enforces on itself before
 * `ready`, from the worker's policy written here into CTXD_SANDBOX by the
 * one schema both sides share (sbx_schema.h). */
#include "sup_policy.h"

#include "sup_pkgs.h"

#include "sbx_schema.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    sup_tier tier;
} tier_names[] = {
    {"static", SUP_TIER_STATIC},
    {"unsafe", SUP_TIER_UNSAFE},
    {"local", SUP_TIER_LOCAL},
    {"sandbox", SUP_TIER_SANDBOX},
    /* mellea's names */
    {"local_unsafe", SUP_TIER_UNSAFE},
    {"docker_unsafe", SUP_TIER_SANDBOX},
    {"docker", SUP_TIER_SANDBOX},
};

static const char *const tier_label[] = {"static", "unsafe", "local", "sandbox"};

/* Per tier, the policy fields it enforces (hello's `tiers`). A field that
 * is not listed is refused at ctx.create when given a restricting value. */
/* timeout and the output caps are the supervisor's: every tier has them. */
static const char *const enforced_static[] = {"timeout", "stdout_max_bytes", "stderr_max_bytes",
                                              "allowed_imports"};
static const char *const enforced_unsafe[] = {"timeout", "stdout_max_bytes", "stderr_max_bytes"};
static const char *const enforced_local[] = {
    "timeout",
    "stdout_max_bytes",
    "stderr_max_bytes",
    "env_var_access",
    "env",
    "network_access",
    "subprocess_execution",
    "memory_bytes",
    "max_processes",
    "cpu_seconds",
    "file_size_bytes",
    "allowed_imports",
    "filesystem_write_roots",
    "filesystem_read_roots",
    "disk_bytes",
};
static const struct {
    const char *const *fields;
    size_t n;
} enforced[] = {
    {enforced_static, sizeof enforced_static / sizeof *enforced_static},
    {enforced_unsafe, sizeof enforced_unsafe / sizeof *enforced_unsafe},
    {enforced_local, sizeof enforced_local / sizeof *enforced_local},
    /* sandbox: the same fields, enforced by namespaces, cgroups and an
     * allowlist filter instead of Landlock and a denylist */
    {enforced_local, sizeof enforced_local / sizeof *enforced_local},
};

/* The sandbox tier's limits when the policy leaves them out: a sandbox is
 * never unbounded. */
#define SANDBOX_MEMORY (1ULL << 30)
#define SANDBOX_PROCESSES 64
/* A sandbox's private directory (and /tmp): a tmpfs of this size, charged
 * to its memory cgroup, unless disk_bytes says otherwise (sup_disk.c). */
#define SANDBOX_DISK (1ULL << 30)
#define LOCAL_PROCESSES 512

static bool tier_enforces(sup_tier t, const char *field)
{
    for (size_t i = 0; i < enforced[t].n; i++)
        if (strcmp(enforced[t].fields[i], field) == 0)
            return true;
    return false;
}

const char *sup_policy_tier_name(const sup_policy *p)
{
    return tier_label[p ? p->tier : SUP_TIER_UNSAFE];
}

static void strlist_free(sup_strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

void sup_policy_free(sup_policy *p)
{
    if (!p)
        return;
    strlist_free(&p->env);
    strlist_free(&p->read_roots);
    strlist_free(&p->write_roots);
    strlist_free(&p->allowed_imports);
    strlist_free(&p->packages);
    free(p);
}

static void strlist_dup(sup_strlist *dst, const sup_strlist *src)
{
    dst->set = src->set;
    dst->n = src->n;
    dst->v = src->n ? mem_calloc(src->n, sizeof *dst->v) : NULL;
    for (size_t i = 0; i < src->n; i++)
        dst->v[i] = mem_strdup(src->v[i]);
}

sup_policy *sup_policy_dup(const sup_policy *p)
{
    if (!p)
        return NULL;
    sup_policy *d = mem_alloc(sizeof *d);
    *d = *p;
    strlist_dup(&d->env, &p->env);
    strlist_dup(&d->read_roots, &p->read_roots);
    strlist_dup(&d->write_roots, &p->write_roots);
    strlist_dup(&d->allowed_imports, &p->allowed_imports);
    strlist_dup(&d->packages, &p->packages);
    return d;
}

/* ---- parsing ----------------------------------------------------------- */

static bool num_of(const proto_val *v, double *out)
{
    switch (v->kind) {
    case PROTO_UINT:
        *out = (double)v->as.u;
        return true;
    case PROTO_INT:
        *out = (double)v->as.i;
        return true;
    case PROTO_FLOAT:
        *out = v->as.f;
        return true;
    default:
        return false;
    }
}

typedef enum { ITEM_NAME, ITEM_MODULE, ITEM_PATH, ITEM_ANY } item_kind;

static bool item_ok(const proto_val *v, item_kind kind)
{
    if (v->kind != PROTO_STR || v->n == 0 || v->n > 4095 || !proto_utf8_valid(v->as.s, v->n, false))
        return false;
    for (uint32_t i = 0; i < v->n; i++) {
        unsigned char ch = (unsigned char)v->as.s[i];
        if (ch == '\n' || ch == SBX_LIST_SEP)
            return false;
        if (kind == ITEM_NAME && ch == '=')
            return false;
        if (kind == ITEM_MODULE && !(ch == '_' || ch == '.' || (ch >= '0' && ch <= '9') ||
                                     (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')))
            return false;
    }
    if (kind == ITEM_PATH && (v->as.s[0] != '/' || !sup_policy_path_plain(v->as.s, v->n)))
        return false;
    return true;
}

bool sup_policy_path_plain(const char *s, size_t n)
{
    for (size_t i = 1, start = 1; i <= n; i++) {
        if (i < n && s[i] != '/')
            continue;
        size_t len = i - start;
        const char *comp = s + start;
        bool last = i == n;
        if ((len == 0 && !(last && n == 1) && !(last && start == n)) ||
            (len == 1 && comp[0] == '.') || (len == 2 && comp[0] == '.' && comp[1] == '.'))
            return false;
        start = i + 1;
    }
    return true;
}

bool sup_policy_sandbox_path_ok(const char *path)
{
    static const char *const own[] = {"/proc", "/sys", "/dev"};
    if (!strcmp(path, "/"))
        return false;
    for (size_t i = 0; i < sizeof own / sizeof *own; i++) {
        size_t n = strlen(own[i]);
        if (!strncmp(path, own[i], n) && (path[n] == '\0' || path[n] == '/'))
            return false;
    }
    return true;
}

static int strlist_parse(sup_strlist *l, const proto_val *v, item_kind kind, const char *field,
                         proto_error *err)
{
    static const char *const what[] = {
        "a non-empty variable name without '='", "a module name (letters, digits, '_' and '.')",
        "an absolute path without '.', '..' or empty components", "a non-empty string"};
    if (v->kind != PROTO_ARRAY || v->n > 1024) {
        proto_error_set(err, "bad_field",
                        "field 'policy.%s' must be an array of at most 1024 "
                        "strings",
                        field);
        return -1;
    }
    for (uint32_t i = 0; i < v->n; i++) {
        if (!item_ok(&v->as.items[i], kind)) {
            proto_error_set(err, "bad_field", "field 'policy.%s': item %u must be %s", field,
                            (unsigned)i, what[kind]);
            return -1;
        }
    }
    l->set = true;
    l->n = v->n;
    l->v = v->n ? mem_calloc(v->n, sizeof *l->v) : NULL;
    for (uint32_t i = 0; i < v->n; i++)
        l->v[i] = proto_strdup(&v->as.items[i]);
    return 0;
}

static int bool_parse(int *dst, const proto_val *v, const char *field, proto_error *err)
{
    if (v->kind != PROTO_BOOL) {
        proto_error_set(err, "bad_field", "field 'policy.%s' must be a boolean", field);
        return -1;
    }
    *dst = v->as.b;
    return 0;
}

static int count_parse(uint64_t *dst, const proto_val *v, const char *field, uint64_t min,
                       proto_error *err)
{
    if (v->kind != PROTO_UINT || v->as.u < min) {
        proto_error_set(err, "bad_field", "field 'policy.%s' must be an integer >= %llu", field,
                        (unsigned long long)min);
        return -1;
    }
    *dst = v->as.u;
    return 0;
}

static int seconds_parse(double *dst, const proto_val *v, const char *field, proto_error *err)
{
    double d;
    if (!num_of(v, &d) || !(d > 0) || d > 1e9) {
        proto_error_set(err, "bad_field",
                        "field 'policy.%s' must be a number of seconds "
                        "above 0 and at most 1e9",
                        field);
        return -1;
    }
    *dst = d;
    return 0;
}

/* A field the tier does not enforce may only be given a value that
 * restricts nothing. */
static bool restricts(const sup_policy *p, const char *field)
{
    if (!strcmp(field, "timeout"))
        return p->timeout > 0;
    if (!strcmp(field, "network_access"))
        return p->network_access == 0;
    if (!strcmp(field, "subprocess_execution"))
        return p->subprocess_execution == 0;
    if (!strcmp(field, "env_var_access"))
        return p->env_var_access == 0;
    if (!strcmp(field, "env"))
        return p->env.set;
    if (!strcmp(field, "filesystem_read_roots"))
        return p->read_roots.set;
    if (!strcmp(field, "filesystem_write_roots"))
        return p->write_roots.set;
    if (!strcmp(field, "memory_bytes"))
        return p->memory_bytes > 0;
    if (!strcmp(field, "max_processes"))
        return p->max_processes > 0;
    if (!strcmp(field, "cpu_seconds"))
        return p->cpu_seconds > 0;
    if (!strcmp(field, "file_size_bytes"))
        return p->file_size_bytes > 0;
    if (!strcmp(field, "disk_bytes"))
        return p->disk_bytes > 0;
    if (!strcmp(field, "allowed_imports"))
        return p->allowed_imports.set;
    if (!strcmp(field, "stdout_max_bytes"))
        return p->stream_max[0] > 0;
    if (!strcmp(field, "stderr_max_bytes"))
        return p->stream_max[1] > 0;
    /* `packages` restricts nothing: ctx.create installs them (sup_pkgs.c). */
    return false;
}

static const char *const all_fields[] = {
    "timeout",
    "stdout_max_bytes",
    "stderr_max_bytes",
    "network_access",
    "subprocess_execution",
    "env_var_access",
    "env",
    "filesystem_read_roots",
    "filesystem_write_roots",
    "memory_bytes",
    "max_processes",
    "cpu_seconds",
    "file_size_bytes",
    "allowed_imports",
    "packages",
    "disk_bytes",
};

static int field_parse(sup_policy *p, const char *k, const proto_val *v, proto_error *err)
{
    if (v->kind == PROTO_NIL)
        return 0;
    if (!strcmp(k, "timeout"))
        return seconds_parse(&p->timeout, v, k, err);
    if (!strcmp(k, "cpu_seconds"))
        return seconds_parse(&p->cpu_seconds, v, k, err);
    if (!strcmp(k, "network_access"))
        return bool_parse(&p->network_access, v, k, err);
    if (!strcmp(k, "subprocess_execution"))
        return bool_parse(&p->subprocess_execution, v, k, err);
    if (!strcmp(k, "env_var_access"))
        return bool_parse(&p->env_var_access, v, k, err);
    if (!strcmp(k, "env"))
        return strlist_parse(&p->env, v, ITEM_NAME, k, err);
    if (!strcmp(k, "filesystem_read_roots"))
        return strlist_parse(&p->read_roots, v, ITEM_PATH, k, err);
    if (!strcmp(k, "filesystem_write_roots"))
        return strlist_parse(&p->write_roots, v, ITEM_PATH, k, err);
    if (!strcmp(k, "allowed_imports"))
        return strlist_parse(&p->allowed_imports, v, ITEM_MODULE, k, err);
    if (!strcmp(k, "packages"))
        return strlist_parse(&p->packages, v, ITEM_ANY, k, err);
    if (!strcmp(k, "memory_bytes"))
        return count_parse(&p->memory_bytes, v, k, SBX_MEMORY_MIN, err);
    if (!strcmp(k, "max_processes"))
        return count_parse(&p->max_processes, v, k, 1, err);
    if (!strcmp(k, "file_size_bytes"))
        return count_parse(&p->file_size_bytes, v, k, 1, err);
    if (!strcmp(k, "disk_bytes"))
        return count_parse(&p->disk_bytes, v, k, SBX_DISK_MIN, err);
    if (!strcmp(k, "stdout_max_bytes"))
        return count_parse(&p->stream_max[0], v, k, 1, err);
    if (!strcmp(k, "stderr_max_bytes"))
        return count_parse(&p->stream_max[1], v, k, 1, err);
    proto_error_set(err, "bad_field", "field 'policy.%s' is not a policy field", k);
    return -1;
}

sup_policy *sup_policy_parse(const proto_val *tier, const proto_val *policy, proto_error *err)
{
    sup_policy *p = mem_calloc(1, sizeof *p);
    p->tier = SUP_TIER_UNSAFE;
    p->network_access = p->subprocess_execution = p->env_var_access = -1;
    if (tier && tier->kind != PROTO_NIL) {
        bool found = false;
        for (size_t i = 0; i < sizeof tier_names / sizeof *tier_names && !found; i++)
            if (proto_str_eq(tier, tier_names[i].name)) {
                p->tier = tier_names[i].tier;
                found = true;
            }
        if (!found) {
            proto_error_set(err, "bad_field",
                            "field 'tier' must be one of static, unsafe, "
                            "local, sandbox (or local_unsafe, docker_unsafe, docker)");
            goto fail;
        }
    }
    if (policy && policy->kind != PROTO_NIL) {
        if (policy->kind != PROTO_MAP) {
            proto_error_set(err, "bad_field", "field 'policy' must be a map");
            goto fail;
        }
        for (uint32_t i = 0; i < policy->n; i++) {
            const proto_val *k = &policy->as.items[2 * i], *v = &policy->as.items[2 * i + 1];
            char key[64];
            if (k->kind != PROTO_STR || k->n == 0 || k->n >= sizeof key) {
                proto_error_set(err, "bad_field", "field 'policy': keys must be field names");
                goto fail;
            }
            memcpy(key, k->as.s, k->n);
            key[k->n] = '\0';
            if (field_parse(p, key, v, err) < 0)
                goto fail;
        }
    }
    /* A local context cannot use up the host's pids (a fork bomb): a root
     * daemon, which has cgroups to give, bounds it by default too. */
    if (p->tier == SUP_TIER_LOCAL && !p->max_processes && geteuid() == 0)
        p->max_processes = LOCAL_PROCESSES;
    if (p->tier == SUP_TIER_SANDBOX) {
        const struct {
            const char *field;
            const sup_strlist *l;
        } roots[] = {{"filesystem_read_roots", &p->read_roots},
                     {"filesystem_write_roots", &p->write_roots}};
        for (size_t r = 0; r < 2; r++)
            for (size_t i = 0; i < roots[r].l->n; i++)
                if (!sup_policy_sandbox_path_ok(roots[r].l->v[i])) {
                    proto_error_set(err, "bad_field",
                                    "field 'policy.%s': '%s' would replace the sandbox's own "
                                    "root, /proc, /sys or /dev",
                                    roots[r].field, roots[r].l->v[i]);
                    goto fail;
                }
        if (p->network_access < 0)
            p->network_access = 0;
        if (!p->memory_bytes)
            p->memory_bytes = SANDBOX_MEMORY;
        if (!p->max_processes)
            p->max_processes = SANDBOX_PROCESSES;
        if (!p->disk_bytes)
            p->disk_bytes = SANDBOX_DISK;
    }
    for (size_t i = 0; i < sizeof all_fields / sizeof *all_fields; i++)
        if (restricts(p, all_fields[i]) && !tier_enforces(p->tier, all_fields[i])) {
            proto_error_set(err, "bad_field",
                            "field 'policy.%s' is not enforced in tier '%s' "
                            "(hello lists what each tier enforces)",
                            all_fields[i], tier_label[p->tier]);
            goto fail;
        }
    return p;
fail:
    sup_policy_free(p);
    return NULL;
}

/* ---- reporting --------------------------------------------------------- */

static void put_strlist(proto_buf *b, const sup_strlist *l)
{
    proto_put_array(b, (uint32_t)l->n);
    for (size_t i = 0; i < l->n; i++)
        proto_put_str(b, l->v[i]);
}

void sup_policy_put(proto_buf *b, const sup_policy *p)
{
    if (!p) {
        proto_put_map(b, 0);
        return;
    }
    uint32_t n = (p->timeout > 0) + (p->network_access >= 0) + (p->subprocess_execution >= 0) +
                 (p->env_var_access >= 0) + p->env.set + p->read_roots.set +
                 (p->write_roots.set && !p->write_default) + (p->memory_bytes > 0) +
                 (p->max_processes > 0) + (p->cpu_seconds > 0) + (p->file_size_bytes > 0) +
                 p->allowed_imports.set + p->packages.set + (p->stream_max[0] > 0) +
                 (p->stream_max[1] > 0) + (p->disk_bytes > 0);
    proto_put_map(b, n);
    if (p->timeout > 0) {
        proto_put_str(b, "timeout");
        proto_put_double(b, p->timeout);
    }
    const struct {
        const char *k;
        int v;
    } bools[] = {{"network_access", p->network_access},
                 {"subprocess_execution", p->subprocess_execution},
                 {"env_var_access", p->env_var_access}};
    for (size_t i = 0; i < 3; i++)
        if (bools[i].v >= 0) {
            proto_put_str(b, bools[i].k);
            proto_put_bool(b, bools[i].v);
        }
    const struct {
        const char *k;
        const sup_strlist *l;
    } lists[] = {{"env", &p->env},
                 {"filesystem_read_roots", &p->read_roots},
                 {"filesystem_write_roots", &p->write_roots},
                 {"allowed_imports", &p->allowed_imports},
                 {"packages", &p->packages}};
    for (size_t i = 0; i < 5; i++)
        if (lists[i].l->set && !(lists[i].l == &p->write_roots && p->write_default)) {
            proto_put_str(b, lists[i].k);
            put_strlist(b, lists[i].l);
        }
    const struct {
        const char *k;
        uint64_t v;
    } nums[] = {{"memory_bytes", p->memory_bytes},       {"max_processes", p->max_processes},
                {"file_size_bytes", p->file_size_bytes}, {"disk_bytes", p->disk_bytes},
                {"stdout_max_bytes", p->stream_max[0]},  {"stderr_max_bytes", p->stream_max[1]}};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++)
        if (nums[i].v) {
            proto_put_str(b, nums[i].k);
            proto_put_uint(b, nums[i].v);
        }
    if (p->cpu_seconds > 0) {
        proto_put_str(b, "cpu_seconds");
        proto_put_double(b, p->cpu_seconds);
    }
}

void sup_policy_put_tiers(proto_buf *b)
{
    proto_put_map(b, 4);
    for (int t = SUP_TIER_STATIC; t <= SUP_TIER_SANDBOX; t++) {
        proto_put_str(b, tier_label[t]);
        proto_put_array(b, (uint32_t)enforced[t].n);
        for (size_t i = 0; i < enforced[t].n; i++)
            proto_put_str(b, enforced[t].fields[i]);
    }
}

/* ---- the worker's environment ------------------------------------------ */

/* Daemon variables a local worker keeps when env_var_access is not false. */
static const char *const env_keep[] = {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", NULL};

static bool name_in(const char *kv, const char *const *names, size_t n)
{
    const char *eq = strchr(kv, '=');
    size_t len = eq ? (size_t)(eq - kv) : strlen(kv);
    for (size_t i = 0; n == (size_t)-1 ? names[i] != NULL : i < n; i++)
        if (strlen(names[i]) == len && memcmp(names[i], kv, len) == 0)
            return true;
    return false;
}

static const sbx_tier worker_tier[] = {
    [SUP_TIER_STATIC] = SBX_TIER_STATIC,
    [SUP_TIER_UNSAFE] = SBX_TIER_UNSAFE,
    [SUP_TIER_LOCAL] = SBX_TIER_LOCAL,
    [SUP_TIER_SANDBOX] = SBX_TIER_SANDBOX,
};

/* l as the worker's list, with one more item when extra is not NULL: the
 * array is new, its strings are borrowed. */
static sbx_list worker_list(const sup_strlist *l, bool set, const char *extra)
{
    sbx_list w = {set, l->n + (extra != NULL), NULL};
    w.v = mem_calloc(w.n + 1, sizeof *w.v);
    for (size_t i = 0; i < l->n; i++)
        w.v[i] = l->v[i];
    if (extra)
        w.v[l->n] = (char *)extra;
    return w;
}

/* The text of CTXD_SANDBOX for p ("CTXD_SANDBOX=" and the worker's policy,
 * sbx_schema.h), the worker's own identity in it unless ident is NULL.
 * NULL when the policy cannot be written (a path holding a newline). */
static char *sandbox_var(const sup_policy *p, const sbx_ident *ident)
{
    sbx_spec w = {
        .tier = worker_tier[p->tier],
        .no_network = p->network_access == 0,
        .no_subprocess = p->subprocess_execution == 0,
        .memory_bytes = p->memory_bytes,
        .max_processes = p->max_processes,
        .file_size_bytes = p->file_size_bytes,
        .disk_bytes = p->disk_bytes,
        .cpu_seconds = p->cpu_seconds,
        /* tempfile writes where the context may */
        .tmpdir = p->write_default ? p->write_roots.v[0] : NULL,
        .has_uid = ident != NULL,
        .ident = ident ? *ident : (sbx_ident){0, 0, 0},
    };
    w.imports = worker_list(&p->allowed_imports, p->allowed_imports.set, NULL);
    w.write_roots = worker_list(&p->write_roots, p->write_roots.set, NULL);
    /* A local context without read roots still reads only what it needs
     * (the system's directories, the interpreter's, its own directory and
     * write roots): never the state directory or another context's. The
     * package directory's links point into the install cache, which a
     * sandbox binds read-only. */
    bool reads = p->read_roots.set || p->tier == SUP_TIER_LOCAL;
    const char *pkgs = (reads || p->tier == SUP_TIER_SANDBOX) ? sup_pkgs_source_dir() : NULL;
    w.read_roots = worker_list(&p->read_roots, reads || pkgs, pkgs);
    char *text = sbx_spec_text(&w);
    free(w.imports.v);
    free(w.write_roots.v);
    free(w.read_roots.v);
    if (!text)
        return NULL;
    char *var = mem_alloc(strlen(text) + sizeof "CTXD_SANDBOX=");
    strcpy(var, "CTXD_SANDBOX=");
    strcat(var, text);
    free(text);
    return var;
}

char **sup_policy_env(const sup_policy *p, char **daemon_env, char **ctx_env, size_t nctx,
                      const sbx_ident *ident, char ***owned)
{
    char *var = sandbox_var(p, ident);
    if (!var)
        return NULL;
    size_t n = 0;
    while (daemon_env[n])
        n++;
    char **env = mem_calloc(n + nctx + 5, sizeof *env);
    char **own = mem_calloc(5, sizeof *own);
    size_t k = 0, o = 0;
    bool confined =
        p->tier == SUP_TIER_LOCAL || p->tier == SUP_TIER_SANDBOX || p->tier == SUP_TIER_STATIC;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(daemon_env[i], "CTXD_SANDBOX=", 13) == 0)
            continue;
        bool keep = !confined ||
                    (p->env_var_access != 0 && name_in(daemon_env[i], env_keep, (size_t)-1)) ||
                    (p->env.set && name_in(daemon_env[i], (const char *const *)p->env.v, p->env.n));
        /* The context's own variables win over the daemon's. */
        for (size_t j = 0; keep && j < nctx; j++) {
            const char *eq = strchr(ctx_env[j], '=');
            size_t len = eq ? (size_t)(eq - ctx_env[j]) : strlen(ctx_env[j]);
            if (strncmp(daemon_env[i], ctx_env[j], len) == 0 && daemon_env[i][len] == '=')
                keep = false;
        }
        if (keep)
            env[k++] = daemon_env[i];
    }
    if (confined && p->env_var_access == 0) {
        own[o] = mem_strdup("PATH=/usr/local/bin:/usr/bin:/bin");
        env[k++] = own[o++];
    }
    if (p->tier == SUP_TIER_SANDBOX) { /* the daemon's home does not exist inside */
        own[o] = mem_strdup("HOME=/tmp");
        env[k++] = own[o++];
    }
    for (size_t j = 0; j < nctx; j++)
        if (strncmp(ctx_env[j], "CTXD_SANDBOX=", 13) != 0)
            env[k++] = ctx_env[j];
    own[o] = var;
    env[k++] = own[o++];
    env[k] = NULL;
    *owned = own;
    return env;
}

bool sup_policy_spare_ok(const sup_policy *p)
{
    if (!p || p->tier != SUP_TIER_UNSAFE)
        return false;
    sup_policy *d = sup_policy_parse(NULL, NULL, NULL);
    char *a = sandbox_var(p, NULL), *b = sandbox_var(d, NULL);
    bool same = a && b && strcmp(a, b) == 0;
    free(a);
    free(b);
    sup_policy_free(d);
    return same;
}

void sup_policy_env_free(char **env, char **owned)
{
    for (size_t i = 0; owned && owned[i]; i++)
        free(owned[i]);
    free(owned);
    free(env);
}

void sup_policy_default_write_roots(sup_policy *p, const char *cwd)
{
    strlist_free(&p->write_roots);
    p->write_roots.set = true;
    p->write_roots.n = 2;
    p->write_roots.v = mem_calloc(2, sizeof *p->write_roots.v);
    p->write_roots.v[0] = mem_strdup(cwd);
    p->write_roots.v[1] = mem_strdup("/dev/shm");
    p->write_default = true;
}
