/* sup_snapmac: the writer's mark inside a snapshot file. The supervisor
 * appends a fixed block (a tag) to what the worker wrote: the writer's
 * tier, its context's name, the content's length and an HMAC-SHA256 over
 * the content and the block, under a key only the daemon holds
 * (STATE_DIR/snapshot.key, 0600, made at first use; the state directory
 * is root's, so no confined worker reads it) or, for an export
 * between daemons, under the operator's STATE_DIR/export.key. A file
 * without a tag that verifies is of the most confined tier. */
#ifndef CTXD_SUP_SNAPMAC_H
#define CTXD_SUP_SNAPMAC_H

#include <stdbool.h>
#include <stdint.h>

#define SUP_SNAPMAC_TAG 128 /* bytes of the block at a file's end */

typedef enum { SUP_SNAPMAC_OWN = 1, SUP_SNAPMAC_EXPORT = 2 } sup_snapmac_key;

/* An HMAC being computed over a stream (opaque). */
typedef struct sup_snapmac sup_snapmac;

/* A new HMAC under the key (the daemon's own is made on first use); NULL
 * with errno (ENOENT: there is no export key) when the key is missing. */
sup_snapmac *sup_snapmac_new(sup_snapmac_key key);
/* Adds n bytes to the HMAC. */
void sup_snapmac_add(sup_snapmac *m, const void *p, uint64_t n);
/* Starts the HMAC over again (same key). */
void sup_snapmac_reset(sup_snapmac *m);
void sup_snapmac_free(sup_snapmac *m);

/* Writes the tag of content_len bytes already added to m (written by a
 * context named origin of tier tier) at offset content_len of fd, and
 * frees m; false with errno. */
bool sup_snapmac_seal(sup_snapmac *m, int fd, uint64_t content_len, int tier, const char *origin);

/* Reads the file on fd to its end and checks its tag under key: true and
 * the writer's tier, origin (64 + 1 bytes) and the content's length when
 * it verifies; false otherwise (*content_len then the part a worker may
 * read: the file less a tag block, if one is there). */
bool sup_snapmac_verify(int fd, sup_snapmac_key key, int *tier, char *origin,
                        uint64_t *content_len);

#endif
