/* rt_etcd: a non-blocking client of etcd's v3 JSON gateway over one
 * keep-alive HTTP/1.1 connection, one request at a time. */
#ifndef CTXD_RT_ETCD_H
#define CTXD_RT_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*rt_etcd_cb)(void *arg, const char *json, size_t len);
void rt_etcd_open(const char *url);
bool rt_etcd_on(void);
void rt_etcd_put(const char *key, const void *val, size_t n);
void rt_etcd_del(const char *key);
/* Range read of key (prefix: every key starting with it); cb gets the
 * response body (NULL on failure after retries are exhausted: never). */
void rt_etcd_range(const char *key, bool prefix, rt_etcd_cb cb, void *arg);
/* Each kv of a range response: fn(key, value). */
void rt_etcd_kvs(const char *json, size_t len,
                 void (*fn)(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn),
                 void *arg);
/* Moves the queue on as far as the connection allows, never blocking. */
void rt_etcd_io(void);
/* The connection's descriptor and the events it waits for, or -1. */
int rt_etcd_fd(uint32_t *events);
/* True while a request is queued or unanswered. */
bool rt_etcd_busy(void);

#endif
