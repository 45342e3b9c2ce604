/* sup_privdir: where contexts' private directories live. */
#ifndef CTXD_SUP_PRIVDIR_H
#define CTXD_SUP_PRIVDIR_H

#include <stddef.h>

/* STATE_DIR/contexts/<instance> (made, and this daemon's lock on it taken,
 * on first use) into out; -1 with errno set. */
int sup_privdir_base(const char *state_dir, char *out, size_t n);
/* At start: removes the private directories of daemons that are gone. */
void sup_privdir_sweep(const char *state_dir);

#endif
