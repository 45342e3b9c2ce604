/* wrk_site: the context's package directory (PROTOCOL.md section 5,
 * pip.install). The supervisor names it in CTXD_SITE; the worker puts it on
 * sys.path before any user code runs (and before its confinement, so a
 * worker with filesystem_read_roots may read it) and removes the variable. */
#ifndef CTXD_WRK_SITE_H
#define CTXD_WRK_SITE_H

/* GIL not held. A worker started without CTXD_SITE is left as it is. */
void wrk_site_init(void);

#endif
