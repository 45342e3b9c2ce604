/* sup_files: file.put / file.get, one chunk per request. */
#ifndef CTXD_SUP_FILES_H
#define CTXD_SUP_FILES_H

#include "proto.h"
#include "sup_peer.h"

#define SUP_FILE_CHUNK (4u * 1024 * 1024)
#define SUP_FILE_MAX (4ull * 1024 * 1024 * 1024)
void sup_files_put(const proto_val *msg, const sup_peer *peer);
void sup_files_get(const proto_val *msg, const sup_peer *peer);

#endif
