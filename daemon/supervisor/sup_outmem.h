/* sup_outmem: a worker's output memory (daemon/channel/chan_outmem.h),
 * read after its death. */
#ifndef CTXD_SUP_OUTMEM_H
#define CTXD_SUP_OUTMEM_H

#include <stddef.h>
#include <stdint.h>

/* Maps the memfd a worker sent (and closes fd); NULL when it is not the
 * sealed memory of the expected size. */
const void *sup_outmem_attach(int fd);
void sup_outmem_detach(const void **map);
typedef void (*sup_outmem_emit)(void *arg, int stream, const uint8_t *p, size_t n);
/* After the worker's death: passes to emit, in order, stream s's bytes the
 * memory holds past the recv bytes already received. */
void sup_outmem_recover(const void *map, int s, uint64_t recv, sup_outmem_emit emit, void *arg);

#endif
