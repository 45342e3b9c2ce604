/* sup_snapdir: the snapshot directory, STATE_DIR/snapshots/CTX/NAME, and
 * the writer's tier of a snapshot file read from its tag (sup_snapmac.h). */
#ifndef CTXD_SUP_SNAPDIR_H
#define CTXD_SUP_SNAPDIR_H

#include "proto.h"
#include "sup_peer.h"
#include "sup_policy.h"
#include "sup_snapmac.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#define SUP_SNAPDIR_ID_MAX (2 * PROTO_MAX_NAME + 2) /* "CTX/NAME" */

/* The names of the tiers, by sup_tier, as replies and events spell them. */
extern const char *const sup_snapdir_tier_names[];

/* A count of snapshots and their bytes, leaving out the one named skip. */
typedef struct sup_snapdir_tally {
    const char *skip; /* a name not counted (the one being replaced) */
    uint64_t count, bytes;
} sup_snapdir_tally;

int sup_snapdir_ctx_dir(const char *ctx, bool make);
void sup_snapdir_each(int dirfd,
                      bool (*fn)(void *arg, int dirfd, const char *name, const struct stat *st),
                      void *arg);
void sup_snapdir_each_ctx(bool (*fn)(void *arg, const char *ctx, int dirfd), void *arg);
bool sup_snapdir_tally_one(void *arg, int dirfd, const char *name, const struct stat *st);
uint64_t sup_snapdir_total_bytes(void);
bool sup_snapdir_parse_id(const proto_val *v, const char *dflt, char *ctx, char *name);
int sup_snapdir_open(const char *ctx, const char *name, const sup_peer *peer);

void sup_snapdir_remember(int fd, sup_tier tier, const char *origin, uint64_t len);
bool sup_snapdir_cached_tier(int fd, sup_tier *tier, char *origin, uint64_t *content_len);
sup_tier sup_snapdir_tagged_tier(int fd, sup_snapmac_key key, bool *verified, char *origin,
                                 uint64_t *content_len);

#endif
