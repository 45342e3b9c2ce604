/* sup_ident: a context's uid/gid and private directory. */
#ifndef CTXD_SUP_IDENT_H
#define CTXD_SUP_IDENT_H

#include "proto.h"
#include <stdbool.h>
#include <sys/types.h>

typedef struct sup_ident {
    unsigned refs;
    uid_t uid;
    gid_t gid;
    bool own_uid; /* drawn from --worker-uids (root daemon, confined tier) */
    char *dir;    /* the private directory made for it; NULL when cwd was given */
} sup_ident;
/* After sup_config_parse: claims the uid range host-wide (sup_uidreg.c),
 * loads the allocator saved in the state directory, and sweeps a range new
 * to it; exits after printing why when the range cannot be had. */
void sup_ident_init(void);
/* The workers' shared group (FIRST of --worker-uids). */
gid_t sup_ident_group(void);
/* hello's `identity` map: daemon_root, worker_uids, worker_uids_from,
 * uid_registry, worker_uids_in_use. */
void sup_ident_put_hello(proto_buf *b);
/* A new identity: an own uid when confined under a root daemon, and with
 * want_dir a new private directory for context `name`. NULL with err set. */
sup_ident *sup_ident_new(bool confined, const char *name, bool want_dir, proto_error *err);
/* The same for a context restored after a restart: it gets back uid_was
 * (its uid before; -1 none) when that is free in the range, else a new one. */
sup_ident *sup_ident_restore(bool confined, const char *name, bool want_dir, long uid_was,
                             proto_error *err);
sup_ident *sup_ident_ref(sup_ident *id);
/* The last reference removes the directory and frees the uid. */
void sup_ident_unref(sup_ident *id);

#endif
