/* rt_cat: the catalog, context (host-side name) -> host, host instance,
 * incarnation, state. A hash in memory; with --etcd each change is also
 * written to etcd (key PREFIX/ctx/NAME, a msgpack value), read back whole
 * when a router starts and per name when a router misses one another
 * router made. */
#include "rt_cat.h"

#include "rt_base.h"
#include "rt_etcd.h"

#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 4096
static rt_entry *buckets[NBUCKETS];
static size_t counts[3];

/* FNV-1a of a name. */
static size_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return (size_t)(h % NBUCKETS);
}

rt_entry *rt_cat_get(const char *name)
{
    for (rt_entry *e = buckets[hash(name)]; e; e = e->next)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

rt_entry *rt_cat_put(const char *name, int host, const char *instance, int state)
{
    rt_entry *e = rt_cat_get(name);
    if (!e) {
        e = mem_calloc(1, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", name);
        size_t b = hash(name);
        e->next = buckets[b];
        buckets[b] = e;
    } else {
        counts[e->state]--;
    }
    e->host = host;
    snprintf(e->instance, sizeof e->instance, "%s", instance);
    e->state = state;
    e->incarnation = 0;
    e->cause[0] = '\0';
    counts[state]++;
    return e;
}

static void etcd_key(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/ctx/%s", rt_cfg.etcd_prefix, name);
}

void rt_cat_del(const char *name)
{
    rt_entry **p = &buckets[hash(name)];
    for (; *p; p = &(*p)->next)
        if (strcmp((*p)->name, name) == 0) {
            rt_entry *e = *p;
            *p = e->next;
            counts[e->state]--;
            free(e);
            break;
        }
    if (rt_etcd_on()) {
        char key[256];
        etcd_key(key, sizeof key, name);
        rt_etcd_del(key);
    }
}

void rt_cat_save(const rt_entry *e)
{
    if (!rt_etcd_on() || e->state == RT_CTX_PENDING)
        return;
    proto_buf b;
    proto_buf_init(&b);
    proto_put_map(&b, 5);
    proto_put_str(&b, "host");
    proto_put_str(&b, rt_cfg.hosts[e->host]);
    proto_put_str(&b, "instance");
    proto_put_str(&b, e->instance);
    proto_put_str(&b, "incarnation");
    proto_put_uint(&b, e->incarnation);
    proto_put_str(&b, "state");
    proto_put_str(&b, e->state == RT_CTX_LOST ? "lost" : "live");
    proto_put_str(&b, "cause");
    proto_put_str(&b, e->cause);
    char key[256];
    etcd_key(key, sizeof key, e->name);
    rt_etcd_put(key, b.data, b.len);
    proto_buf_free(&b);
}

void rt_cat_each(void (*fn)(rt_entry *e, void *arg), void *arg)
{
    for (size_t b = 0; b < NBUCKETS; b++)
        for (rt_entry *e = buckets[b]; e; e = e->next)
            fn(e, arg);
}

void rt_cat_set_state(rt_entry *e, int state)
{
    counts[e->state]--;
    e->state = state;
    counts[state]++;
}

size_t rt_cat_count(int state)
{
    return counts[state];
}

/* Decodes one stored value into the catalog (a host the router does not
 * know, or a value that does not decode, is skipped and logged). */
static void set_pack(const uint8_t *v, size_t n, const char *name)
{
    proto_doc doc;
    proto_error err;
    if (!proto_name_valid(name, strlen(name)) || proto_decode(&doc, v, n, &err) < 0) {
        rt_log("etcd: entry '%s' does not decode: skipped", name);
        return;
    }
    const proto_val *m = &doc.nodes[0], *host = proto_map_get(m, "host"),
                    *inst = proto_map_get(m, "instance"), *inc = proto_map_get(m, "incarnation"),
                    *st = proto_map_get(m, "state"), *cause = proto_map_get(m, "cause");
    int idx = -1;
    for (size_t i = 0; host && host->kind == PROTO_STR && i < rt_cfg.nhosts; i++)
        if (strlen(rt_cfg.hosts[i]) == host->n && memcmp(rt_cfg.hosts[i], host->as.s, host->n) == 0)
            idx = (int)i;
    if (idx < 0 || !inst || inst->kind != PROTO_STR || inst->n != RT_INSTANCE) {
        rt_log("etcd: entry '%s' names a host this router does not serve: skipped", name);
        proto_doc_free(&doc);
        return;
    }
    char instance[RT_INSTANCE + 1];
    memcpy(instance, inst->as.s, RT_INSTANCE);
    instance[RT_INSTANCE] = '\0';
    bool lost = st && proto_str_eq(st, "lost");
    rt_entry *e = rt_cat_put(name, idx, instance, lost ? RT_CTX_LOST : RT_CTX_LIVE);
    if (inc && inc->kind == PROTO_UINT)
        e->incarnation = inc->as.u;
    if (cause && cause->kind == PROTO_STR)
        snprintf(e->cause, sizeof e->cause, "%.*s", (int)cause->n, cause->as.s);
    proto_doc_free(&doc);
}

/* One key/value of a range answer into the catalog. */
static void load_kv(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    (void)arg;
    size_t plen = strlen(rt_cfg.etcd_prefix) + strlen("/ctx/");
    if (kn <= plen || kn - plen > PROTO_MAX_NAME)
        return;
    char name[PROTO_MAX_NAME + 1];
    memcpy(name, k + plen, kn - plen);
    name[kn - plen] = '\0';
    set_pack(v, vn, name);
}

static void loaded(void *arg, const char *json, size_t len)
{
    rt_etcd_kvs(json, len, load_kv, NULL);
    *(bool *)arg = true;
    rt_log("catalog: %zu contexts (%zu lost) read from etcd",
           rt_cat_count(RT_CTX_LIVE) + rt_cat_count(RT_CTX_LOST), rt_cat_count(RT_CTX_LOST));
}

void rt_cat_load(bool *done)
{
    if (!rt_etcd_on()) {
        *done = true;
        return;
    }
    char key[256];
    etcd_key(key, sizeof key, "");
    rt_etcd_range(key, true, loaded, done);
}

typedef struct fetch {
    void (*fn)(void *arg, rt_entry *e);
    void *arg;
    char name[PROTO_MAX_NAME + 1];
} fetch;

static void fetched(void *arg, const char *json, size_t len)
{
    fetch *f = arg;
    rt_etcd_kvs(json, len, load_kv, NULL);
    f->fn(f->arg, rt_cat_get(f->name));
    free(f);
}

void rt_cat_fetch(const char *name, void (*fn)(void *arg, rt_entry *e), void *arg)
{
    if (!rt_etcd_on()) {
        fn(arg, NULL);
        return;
    }
    fetch *f = mem_calloc(1, sizeof *f);
    f->fn = fn;
    f->arg = arg;
    snprintf(f->name, sizeof f->name, "%s", name);
    char key[256];
    etcd_key(key, sizeof key, name);
    rt_etcd_range(key, false, fetched, f);
}
