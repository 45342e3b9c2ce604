/* sup_uidreg: a root daemon's worker uid range, claimed host-wide. */
#ifndef CTXD_SUP_UIDREG_H
#define CTXD_SUP_UIDREG_H

#include <stdbool.h>
#include <stddef.h>

/* The first automatic block and the size of every automatic block. */
#define SUP_UIDREG_AUTO_FIRST 524288u
#define SUP_UIDREG_AUTO_COUNT 65536u

/* The name of this daemon's uid state file in its state directory
 * ("uids-<endpoints hash>"); its first line is "range FIRST COUNT". */
void sup_uidreg_state_name(char *out, size_t n);
/* Claims the range for this daemon (state_dir, the endpoints' hash) in the
 * registry (--uid-registry) and holds its lock until the daemon exits.
 * explicit: --worker-uids *first:*count, refused (printed) when another
 * daemon holds an overlapping range or a stopped daemon's state directory
 * still owns one; otherwise the range saved in state_dir, else the first
 * free automatic block (*first, *count set). *fresh is set when the range
 * was not this state directory's already: its uids must be swept before
 * any is handed out. -1 after printing why. */
int sup_uidreg_claim(const char *state_dir, bool explicit, unsigned *first, unsigned *count,
                     bool *fresh);
/* The registry directory in use. */
const char *sup_uidreg_dir(void);

#endif
