/* sbx: confinement of a worker by its context's tier and policy (PROTOCOL.md
 * §5 ctx.create, daemon/supervisor/sup_policy.c). The supervisor passes the
 * policy in the variable CTXD_SANDBOX; sbx_init removes it and applies the
 * policy before the worker sends its first `ready`, so no user code ever
 * runs unconfined. Confinement steps only: nothing here knows runs, frames
 * or the channel (daemon/sandbox/README.md). */
#ifndef CTXD_SBX_H
#define CTXD_SBX_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "sbx_cgroup.h"
#include "sbx_host.h"
#include "sbx_path.h"
#include "sbx_schema.h"

/* The policy as the supervisor sent it (CTXD_SANDBOX, sbx_schema.h), and
 * what the worker learns of it on the way. */
typedef struct sbx_policy {
    bool active;                       /* CTXD_SANDBOX was given */
    bool is_static, confined, sandbox; /* of spec.tier: static; local or sandbox; sandbox */
    sbx_spec spec;
    char **py_paths; /* sys.path, sys.prefix...: readable with read roots */
    char *site;      /* the context's package directory (CTXD_SITE), sandbox */
} sbx_policy;

/* What a confined worker's seccomp filters refuse (sbx_merge_rules):
 * offering its pages to the kernel's same-page merging,
 * madvise(MADV_MERGEABLE) and prctl(PR_SET_MEMORY_MERGE). */
#define SBX_MADV_MERGEABLE 12
#define SBX_PR_SET_MEMORY_MERGE 67

/* Fills p from the CTXD_SANDBOX text (p->site kept as it was): 0, or -1
 * with why filled and p's spec empty when the text is malformed.
 * sbx_policy_free releases it. */
int sbx_policy_parse(sbx_policy *p, const char *text, char *why, size_t n);
void sbx_policy_free(sbx_policy *p);

/* GIL not held. Applies the policy (no-op without CTXD_SANDBOX); exits the
 * process (status 1, reason in the daemon's log) when a requested limit
 * cannot be enforced: a policy is never silently weakened. */
void sbx_init(void);
/* True in a `static` tier worker: runs are analysed (by the worker,
 * wrk_static.c), never executed. */
bool sbx_static(void);
/* The policy sbx_init applied (all zero without CTXD_SANDBOX). */
const sbx_policy *sbx_policy_current(void);
/* Around each run: the per-run CPU budget (policy cpu_seconds). */
void sbx_run_begin(void);
void sbx_run_end(void);

/* sbx_py.c (GIL held): the Python half. */
int sbx_py_init(void);
/* A new Python list of the C strings (NULL-terminated array; NULL names an
 * empty list), or NULL with the Python error set. */
struct _object *sbx_py_str_list(char **names);
/* Installs the import allowlist (names NULL-terminated). */
int sbx_py_imports(char **names, bool set);
/* Makes SIGXCPU raise TimeoutError in the run. */
int sbx_py_cpu_handler(double seconds);

/* sbx_ns.c: the sandbox tier's namespaces, root and cgroups. */
/* The clone flags the intermediate process of a sandbox worker unshares
 * before forking it (0: not the sandbox tier). */
int sbx_ns_flags(const sbx_policy *p);
/* Zygote, after the fork: the new worker's uid/gid maps (its root is the
 * context's own uid, never the daemon's when that is root). -1 with msg
 * filled. */
int sbx_ns_prepare(pid_t w, const sbx_policy *p, char *msg, size_t n);
/* In the new worker, first thing: waits for the zygote's go on go_fd,
 * opens every mount source (by descriptor, no symbolic links), becomes the
 * context's uid, builds the root (read-only system, tmpfs /tmp, writable
 * cwd and write roots, own /proc with the kernel's knobs masked, /dev),
 * enters it and drops every capability. Exits (status 1, reason logged)
 * on failure. */
void sbx_ns_enter(int go_fd, const sbx_policy *p, const char *cwd);

/* The cgroup limits a worker of this policy gets (memory_bytes,
 * max_processes plus its own threads). */
sbx_cgroup_limits sbx_policy_limits(const sbx_policy *p);

/* sbx_allow.c: the sandbox tier's seccomp filter (allowlist; EPERM for
 * everything else). 0, or -errno. */
int sbx_allow_load(bool no_network, bool no_subprocess);
/* Adds to filter (a scmp_filter_ctx) the rules that keep a confined
 * worker out of same-page merging: in an allowlist, madvise and prctl
 * allowed but for those two; in a denylist (sbx_apply.c), those two
 * refused with EPERM. 0, or -errno. */
int sbx_merge_rules(void *filter, bool allowlist);
/* Adds to filter (a denylist, sbx_apply.c) the rules on new processes that
 * hold in every confined tier: clone with any flag making a new namespace
 * refused (EPERM), clone3 answered ENOSYS (its flags are behind a pointer
 * a filter cannot read; glibc then falls back to clone). The allowlist
 * (sbx_allow_load) holds the same by allowing clone only without those
 * flags. 0, or -errno. */
int sbx_clone_rules(void *filter);

#endif
