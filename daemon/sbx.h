/* sbx: confinement of a worker by its context's tier and policy (PROTOCOL.md
 * §5 ctx.create, daemon/sup_policy.c). The supervisor passes the policy in
 * the variable CTXD_SANDBOX; sbx_init removes it and applies the policy
 * before the worker sends its first `ready`, so no user code ever runs
 * unconfined. */
#ifndef CTXD_SBX_H
#define CTXD_SBX_H

#include <stdbool.h>

#include "wrk_run.h"

/* GIL not held. Applies the policy (no-op without CTXD_SANDBOX); exits the
 * process (status 1, reason in the daemon's log) when a requested limit
 * cannot be enforced: a policy is never silently weakened. */
void sbx_init(void);
/* True in a `static` tier worker: runs are analysed, never executed. */
bool sbx_static(void);
/* GIL not held. The static tier's run: start, the analysis, done. */
void sbx_static_execute(const wrk_run_req *req);
/* Around each run: the per-run CPU budget (policy cpu_seconds). */
void sbx_run_begin(void);
void sbx_run_end(void);

/* sbx_py.c (GIL held): the Python half. */
int sbx_py_init(void);
/* Installs the import allowlist (names NULL-terminated). */
int sbx_py_imports(char **names, bool set);
/* The static tier: only records the list for the analysis. */
int sbx_py_static_imports(char **names, bool set);
/* Makes SIGXCPU raise TimeoutError in the run. */
int sbx_py_cpu_handler(double seconds);
/* The analysis of code for the static tier: a new reference to a tuple
 * (summary str, json str, error ename or None, error evalue or None). */
PyObject *sbx_py_analyze(const char *code, size_t len);

#endif
