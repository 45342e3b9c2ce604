/* rt_cat: the catalog, context -> host, instance, incarnation (a hash in
 * memory; etcd PREFIX/ctx/NAME, msgpack, when configured). */
#ifndef CTXD_RT_CAT_H
#define CTXD_RT_CAT_H

#include "proto.h"
#include "rt_base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { RT_CTX_PENDING, RT_CTX_LIVE, RT_CTX_LOST };
typedef struct rt_entry {
    struct rt_entry *next; /* hash chain */
    char name[PROTO_MAX_NAME + 1];
    int host;
    char instance[RT_INSTANCE + 1];
    uint64_t incarnation;
    int state;
    char cause[256];
} rt_entry;
rt_entry *rt_cat_get(const char *name);
rt_entry *rt_cat_put(const char *name, int host, const char *instance, int state);
void rt_cat_del(const char *name);
/* Saves an entry's current value to etcd (when configured). */
void rt_cat_save(const rt_entry *e);
/* Calls fn for every entry (fn may change, not delete, it). */
void rt_cat_each(void (*fn)(rt_entry *e, void *arg), void *arg);
/* Changes an entry's state: the counts (stats) follow; never assign it. */
void rt_cat_set_state(rt_entry *e, int state);
size_t rt_cat_count(int state);
/* Loads the catalog from etcd; *done is set when it has been read. */
void rt_cat_load(bool *done);
/* Looks name up in etcd (another router may have made it): fn gets the
 * entry, or NULL. */
void rt_cat_fetch(const char *name, void (*fn)(void *arg, rt_entry *e), void *arg);

#endif
