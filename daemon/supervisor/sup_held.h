/* sup_held: bytes held for clients that do not read. */
#ifndef CTXD_SUP_HELD_H
#define CTXD_SUP_HELD_H

#include "sup_peer.h"
#include <stdbool.h>
#include <stddef.h>

void sup_held_add(const sup_peer *p, size_t n);
void sup_held_sub(const sup_peer *p, size_t n);
size_t sup_held_client(const sup_peer *p);
size_t sup_held_total(void);
size_t sup_held_peak(void);
/* True when p's client holds max_client_held or more, or everything held
 * reaches max_held: its requests are refused and its runs' workers are not
 * read until it reads. */
bool sup_held_over(const sup_peer *p);

#endif
