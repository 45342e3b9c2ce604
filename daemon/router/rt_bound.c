/* rt_bound: what a client may ask the hosts for. The router owns every
 * field of a ctx.create that names something on a host: the tier, the cwd,
 * the policy's filesystem roots and its caps. Each client key has bounds
 * (the --tenants file's options, rt_auth.c); a create outside them is
 * refused with `err forbidden` naming the field, never passed on, and one
 * inside them goes to the host with the tier and every capped field set
 * explicitly (a field left out gets the cap, not the host's default). */
#include "rt_bound.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const tier_names[RT_NTIERS] = {"static", "unsafe", "local", "sandbox"};

/* The capped policy fields; whole: a uint field, else a float. all_tiers:
 * every tier enforces it (the others only local and sandbox, so they are
 * set only there: a host refuses a restricting value its tier does not
 * enforce). */
static const struct {
    const char *name;
    bool whole, all_tiers;
} caps[RT_NCAPS] = {
    {"timeout", false, true},         {"cpu_seconds", false, false},
    {"memory_bytes", true, false},    {"max_processes", true, false},
    {"file_size_bytes", true, false}, {"stdout_max_bytes", true, true},
    {"stderr_max_bytes", true, true},
};
static const char *const bool_names[RT_NBOOLS] = {"network_access", "subprocess_execution",
                                                  "env_var_access"};

void rt_bound_default(rt_bounds *b)
{
    memset(b, 0, sizeof *b);
    b->tiers = 1u << RT_TIER_SANDBOX;
    b->dflt = RT_TIER_SANDBOX;
}

/* The tier a name means (mellea's names too), or -1. */
static int tier_of(const char *s, size_t n)
{
    static const struct {
        const char *name;
        int tier;
    } alias[] = {{"static", RT_TIER_STATIC},        {"unsafe", RT_TIER_UNSAFE},
                 {"local_unsafe", RT_TIER_UNSAFE},  {"local", RT_TIER_LOCAL},
                 {"sandbox", RT_TIER_SANDBOX},      {"docker", RT_TIER_SANDBOX},
                 {"docker_unsafe", RT_TIER_SANDBOX}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (strlen(alias[i].name) == n && memcmp(alias[i].name, s, n) == 0)
            return alias[i].tier;
    return -1;
}

/* Whether s (n bytes) is an absolute path without ".", ".." or empty
 * components (a lone "/" is one): such a path names one place by its text. */
static bool clean_path(const char *s, size_t n)
{
    if (n == 0 || n >= RT_MAX_PATH || s[0] != '/' || memchr(s, '\0', n))
        return false;
    if (n == 1)
        return true;
    for (size_t i = 1, start = 1; i <= n; i++) {
        if (i < n && s[i] != '/')
            continue;
        size_t len = i - start;
        if (len == 0 || (len == 1 && s[start] == '.') ||
            (len == 2 && s[start] == '.' && s[start + 1] == '.'))
            return false;
        start = i + 1;
    }
    return true;
}

/* Whether path p (n bytes, clean) lies under one of b's roots, component
 * by component. */
static bool under_root(const rt_bounds *b, const char *p, size_t n)
{
    for (size_t i = 0; i < b->nroots; i++) {
        const char *r = b->roots[i];
        size_t rn = strlen(r);
        if (rn == 1 || (n >= rn && memcmp(p, r, rn) == 0 && (n == rn || p[rn] == '/')))
            return true;
    }
    return false;
}

/* Adds the option OPT (one word of a tenants-file line) to b; false when
 * it is not one. */
bool rt_bound_option(rt_bounds *b, const char *opt)
{
    const char *eq = strchr(opt, '=');
    if (!eq || !eq[1])
        return false;
    size_t kn = (size_t)(eq - opt);
    const char *v = eq + 1;
    if (kn == 5 && memcmp(opt, "tiers", 5) == 0) {
        b->tiers = 0;
        for (const char *s = v; *s;) {
            size_t n = strcspn(s, ",");
            int t = tier_of(s, n);
            if (t < 0)
                return false;
            if (!b->tiers)
                b->dflt = t; /* the first listed: a create without a tier */
            b->tiers |= 1u << t;
            s += n + (s[n] == ',');
        }
        return b->tiers != 0;
    }
    if (kn == 3 && memcmp(opt, "cwd", 3) == 0) {
        for (const char *s = v; *s;) {
            size_t n = strcspn(s, ",");
            if (b->nroots == RT_MAX_ROOTS || !clean_path(s, n))
                return false;
            snprintf(b->roots[b->nroots++], RT_MAX_PATH, "%.*s", (int)n, s);
            s += n + (s[n] == ',');
        }
        return true;
    }
    for (int i = 0; i < RT_NCAPS; i++)
        if (strlen(caps[i].name) == kn && memcmp(opt, caps[i].name, kn) == 0) {
            char *end;
            double d = strtod(v, &end);
            if (*end || !(d > 0) || d > 1e18)
                return false;
            b->cap[i] = d;
            b->capped[i] = true;
            return true;
        }
    for (int i = 0; i < RT_NBOOLS; i++)
        if (strlen(bool_names[i]) == kn && memcmp(opt, bool_names[i], kn) == 0) {
            if (strcmp(v, "false") != 0)
                return false;
            b->no[i] = true;
            return true;
        }
    return false;
}

static bool is_num(const proto_val *v, double *d)
{
    if (v->kind == PROTO_UINT)
        *d = (double)v->as.u;
    else if (v->kind == PROTO_INT)
        *d = (double)v->as.i;
    else if (v->kind == PROTO_FLOAT)
        *d = v->as.f;
    else
        return false;
    return true;
}

/* The policy to send: pol's fields (checked against b) and the capped or
 * bounded ones it lacks set to the bound; false after filling why. */
static bool put_policy(const rt_bounds *b, int tier, const proto_val *pol, proto_buf *out,
                       char *why, size_t whylen)
{
    bool seen_cap[RT_NCAPS] = {false}, seen_bool[RT_NBOOLS] = {false};
    uint32_t n = pol ? pol->n : 0, extra = 0;
    for (uint32_t i = 0; i < n; i++) {
        const proto_val *k = &pol->as.items[2 * i], *v = &pol->as.items[2 * i + 1];
        for (int c = 0; c < RT_NCAPS; c++) {
            if (!proto_str_eq(k, caps[c].name))
                continue;
            seen_cap[c] = true;
            double d;
            if (b->capped[c] && (!is_num(v, &d) || d > b->cap[c])) {
                snprintf(why, whylen, "policy.%s must be a number at most %g for this client",
                         caps[c].name, b->cap[c]);
                return false;
            }
        }
        for (int c = 0; c < RT_NBOOLS; c++) {
            if (!proto_str_eq(k, bool_names[c]))
                continue;
            seen_bool[c] = true;
            if (b->no[c] && !(v->kind == PROTO_BOOL && !v->as.b)) {
                snprintf(why, whylen, "policy.%s must stay false for this client", bool_names[c]);
                return false;
            }
        }
        if (proto_str_eq(k, "filesystem_write_roots") || proto_str_eq(k, "filesystem_read_roots")) {
            if (v->kind != PROTO_ARRAY) {
                snprintf(why, whylen, "policy.%.*s must be an array of paths", (int)k->n, k->as.s);
                return false;
            }
            for (uint32_t j = 0; j < v->n; j++) {
                const proto_val *p = &v->as.items[j];
                if (p->kind != PROTO_STR || !clean_path(p->as.s, p->n) ||
                    !under_root(b, p->as.s, p->n)) {
                    snprintf(why, whylen,
                             "policy.%.*s: every path must lie under this client's cwd roots "
                             "(%zu configured)",
                             (int)k->n, k->as.s, b->nroots);
                    return false;
                }
            }
        }
    }
    for (int c = 0; c < RT_NCAPS; c++)
        extra += b->capped[c] && !seen_cap[c] && (caps[c].all_tiers || tier >= RT_TIER_LOCAL);
    for (int c = 0; c < RT_NBOOLS; c++)
        extra += b->no[c] && !seen_bool[c] && tier >= RT_TIER_LOCAL;
    proto_put_map(out, n + extra);
    for (uint32_t i = 0; i < n; i++) {
        proto_put_val(out, &pol->as.items[2 * i]);
        proto_put_val(out, &pol->as.items[2 * i + 1]);
    }
    for (int c = 0; c < RT_NCAPS; c++) {
        if (!b->capped[c] || seen_cap[c] || !(caps[c].all_tiers || tier >= RT_TIER_LOCAL))
            continue;
        proto_put_str(out, caps[c].name);
        if (caps[c].whole)
            proto_put_uint(out, (uint64_t)b->cap[c]);
        else
            proto_put_double(out, b->cap[c]);
    }
    for (int c = 0; c < RT_NBOOLS; c++)
        if (b->no[c] && !seen_bool[c] && tier >= RT_TIER_LOCAL) {
            proto_put_str(out, bool_names[c]);
            proto_put_bool(out, false);
        }
    return true;
}

bool rt_bound_create(const rt_bounds *b, const proto_val *msg, proto_buf *tier_out,
                     proto_buf *policy_out, char *why, size_t whylen)
{
    const proto_val *t = proto_map_get(msg, "tier");
    int tier = b->dflt;
    if (t && t->kind != PROTO_NIL) {
        tier = t->kind == PROTO_STR ? tier_of(t->as.s, t->n) : -1;
        if (tier < 0) {
            snprintf(why, whylen, "tier must be static, unsafe, local or sandbox");
            return false;
        }
    }
    if (!(b->tiers & (1u << tier))) {
        int k = snprintf(why, whylen,
                         "tier %s is not allowed for this client (allowed:", tier_names[tier]);
        for (int i = 0; i < RT_NTIERS && k > 0 && (size_t)k < whylen; i++)
            if (b->tiers & (1u << i))
                k += snprintf(why + k, whylen - (size_t)k, " %s", tier_names[i]);
        if (k > 0 && (size_t)k < whylen)
            snprintf(why + k, whylen - (size_t)k, ")");
        return false;
    }
    proto_put_str(tier_out, tier_names[tier]);
    const proto_val *cwd = proto_map_get(msg, "cwd");
    if (cwd && cwd->kind != PROTO_NIL &&
        (cwd->kind != PROTO_STR || !clean_path(cwd->as.s, cwd->n) ||
         !under_root(b, cwd->as.s, cwd->n))) {
        if (b->nroots)
            snprintf(why, whylen,
                     "cwd must be an absolute path without '.', '..' or empty components under "
                     "this client's cwd roots");
        else
            snprintf(why, whylen,
                     "cwd is not allowed for this client (no cwd roots: its contexts get the "
                     "host's private directories)");
        return false;
    }
    const proto_val *pol = proto_map_get(msg, "policy");
    if (pol && pol->kind == PROTO_NIL)
        pol = NULL;
    if (pol && pol->kind != PROTO_MAP) {
        snprintf(why, whylen, "policy must be a map");
        return false;
    }
    return put_policy(b, tier, pol, policy_out, why, whylen);
}
