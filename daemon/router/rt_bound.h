/* rt_bound: what one client's ctx.create may ask a host for (the tenants
 * file's options): tiers, cwd roots, policy caps. */
#ifndef CTXD_RT_BOUND_H
#define CTXD_RT_BOUND_H

#include "proto.h"

#include <stdbool.h>
#include <stddef.h>

enum { RT_TIER_STATIC, RT_TIER_UNSAFE, RT_TIER_LOCAL, RT_TIER_SANDBOX, RT_NTIERS };
#define RT_MAX_ROOTS 8
#define RT_MAX_PATH 256
#define RT_NCAPS 7
#define RT_NBOOLS 3
typedef struct rt_bounds {
    unsigned tiers;                        /* bit per RT_TIER_* it may ask for */
    int dflt;                              /* the tier of a create that names none */
    char roots[RT_MAX_ROOTS][RT_MAX_PATH]; /* its cwd may lie under these */
    size_t nroots;
    double cap[RT_NCAPS]; /* timeout, cpu_seconds, memory_bytes, ... */
    bool capped[RT_NCAPS];
    bool no[RT_NBOOLS]; /* network_access, subprocess_execution, env_var_access stay false */
} rt_bounds;
/* The bounds of a client no line names: sandbox only, no cwd, no caps. */
void rt_bound_default(rt_bounds *b);
/* Adds one tenants-file option (tiers=A,B cwd=/D,/E FIELD=MAX FIELD=false)
 * to b; false when opt is not one. */
bool rt_bound_option(rt_bounds *b, const char *opt);
/* Checks ctx.create msg against b: false (why filled, naming the field)
 * when it asks for more; else the tier to send (a str) in tier_out and the
 * policy (a map, capped fields set) in policy_out. */
bool rt_bound_create(const rt_bounds *b, const proto_val *msg, proto_buf *tier_out,
                     proto_buf *policy_out, char *why, size_t whylen);

#endif
