/* wrk_static: the `static` tier's run (analysis, no execution). */
#ifndef CTXD_WRK_STATIC_H
#define CTXD_WRK_STATIC_H

#include <stdbool.h>

#include "wrk_run.h"

/* After sbx_init, in a static tier worker: prepares the analysis with the
 * policy's allowed_imports (imports NULL-terminated; !imports_set: any
 * import is allowed). Exits (status 1, reason logged) when it cannot. */
void wrk_static_init(char **imports, bool imports_set);
/* GIL not held. One run: start, the analysis, done. */
void wrk_static_execute(const wrk_run_req *req);

#endif
