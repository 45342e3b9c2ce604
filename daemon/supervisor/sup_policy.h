/* sup_policy: a context's execution tier and policy (PROTOCOL.md §5,
 * ctx.create). Parsed and validated in the supervisor; handed to the worker
 * in the variable CTXD_SANDBOX of its start-up environment, which the worker
 * removes before any user code runs (daemon/sandbox/sbx_*.c enforce it). */
#ifndef CTXD_SUP_POLICY_H
#define CTXD_SUP_POLICY_H

#include "proto.h"
#include "sbx_schema.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum { SUP_TIER_STATIC, SUP_TIER_UNSAFE, SUP_TIER_LOCAL, SUP_TIER_SANDBOX } sup_tier;

typedef struct sup_strlist {
    bool set; /* the field was given (an empty list is not "absent") */
    char **v;
    size_t n;
} sup_strlist;

typedef struct sup_policy {
    sup_tier tier;
    double timeout;     /* seconds; 0 = not set */
    int network_access; /* -1 not set, 0, 1 */
    int subprocess_execution;
    int env_var_access;
    sup_strlist env;          /* daemon variables passed through */
    sup_strlist read_roots;   /* filesystem_read_roots */
    sup_strlist write_roots;  /* filesystem_write_roots */
    bool write_default;       /* write_roots is local's default (cwd, /dev/shm), not asked for */
    uint64_t memory_bytes;    /* 0 = not set */
    uint64_t max_processes;   /* 0 = not set */
    double cpu_seconds;       /* per run; 0 = not set */
    uint64_t file_size_bytes; /* 0 = not set */
    uint64_t disk_bytes;      /* the private directory's size (sup_disk.c); 0 = not set */
    uint64_t stream_max[2];   /* stdout_max_bytes, stderr_max_bytes per run; 0 = not set */
    sup_strlist allowed_imports;
    sup_strlist packages;
} sup_policy;

/* Reads ctx.create's `tier` and `policy` (either may be NULL). Returns a
 * new policy, or NULL with err set ("bad_field" naming the field). */
sup_policy *sup_policy_parse(const proto_val *tier, const proto_val *policy, proto_error *err);
sup_policy *sup_policy_dup(const sup_policy *p);
void sup_policy_free(sup_policy *p);
const char *sup_policy_tier_name(const sup_policy *p); /* NULL p: "unsafe" */
/* ctx.list INFO's `policy` map (the fields that were set). */
void sup_policy_put(proto_buf *b, const sup_policy *p);
/* hello's `tiers` map: per tier, the policy fields it enforces. */
void sup_policy_put_tiers(proto_buf *b);
/* The worker's start-up environment under a policy: of the daemon's
 * environment only an allowlist (and policy.env), then the context's own
 * variables, then CTXD_SANDBOX, the worker's policy (sbx_schema.h) with its
 * own identity unless ident is NULL. A new NULL-terminated array whose
 * strings are borrowed except those in *owned (sup_policy_env_free); NULL
 * when the policy cannot be written for the worker. */
char **sup_policy_env(const sup_policy *p, char **daemon_env, char **ctx_env, size_t nctx,
                      const sbx_ident *ident, char ***owned);
void sup_policy_env_free(char **env, char **owned);
/* Whether a worker started for p is one started for the default tier's
 * policy (an unsafe tier whose CTXD_SANDBOX, the only part of its
 * environment a policy decides, is the default's): a spare worker
 * (--spare-workers) may serve it. */
bool sup_policy_spare_ok(const sup_policy *p);

/* An absolute path without '.', '..' or empty components (a trailing '/'
 * is allowed). */
bool sup_policy_path_plain(const char *s, size_t n);
/* A path a sandbox may bind (its cwd, a root): not '/', not under /proc,
 * /sys or /dev, which the sandbox has its own of. */
bool sup_policy_sandbox_path_ok(const char *path);

/* A local context without write roots writes only cwd and /dev/shm
 * (its TMPDIR becomes cwd). */
void sup_policy_default_write_roots(sup_policy *p, const char *cwd);

#endif
