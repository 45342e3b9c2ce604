/* sup_reqarg: fields that several requests' handlers read and check the
 * same way, and the `err` reply of a failed check. */
#ifndef CTXD_SUP_REQARG_H
#define CTXD_SUP_REQARG_H

#include "proto.h"
#include "sup_peer.h"

#include <stddef.h>

/* The syntaxes a run may ask for (execute and ctx.create `syntax`), as
 * hello's `syntaxes` lists them. */
extern const char *const sup_reqarg_syntaxes[2];

const proto_val *sup_reqarg_get(const proto_val *msg, const char *key);
void sup_reqarg_reply_error(const sup_peer *peer, const proto_error *err);
int sup_reqarg_env_strings(const proto_val *map, char ***out, size_t *n, const sup_peer *peer);
void sup_reqarg_free_strings(char **s, size_t n);
const char *sup_reqarg_syntax_value(const proto_val *v, const sup_peer *peer);
double sup_reqarg_num_value(const proto_val *v, double dflt);

#endif
