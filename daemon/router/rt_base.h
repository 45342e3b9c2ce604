/* rt_base: the ground floor of ctxd-router: its configuration, its
 * instance, its clock and its log. It calls no other router file. */
#ifndef CTXD_RT_BASE_H
#define CTXD_RT_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RT_MAX_HOSTS 64
#define RT_KEY_Z85 40
#define RT_INSTANCE 32
#define RT_MAX_ROUTE 256
/* Bytes held for one client (its queues and its requests waiting for a
 * host), past which its requests get `err busy` and its links are not read. */
#define RT_CLIENT_HELD (16u << 20)
#define RT_HWM 64

typedef struct rt_config {
    const char *listen[8];
    size_t nlisten;
    const char *hosts[RT_MAX_HOSTS];
    size_t nhosts;
    const char *state_dir;
    const char *host_key;      /* --host-key: the hosts' server public key */
    const char *host_key_file; /* --host-key-file: the file holding it */
    char host_z85[41];         /* the key of either, checked at start; "" none */
    const char *tenants;       /* file: "CLIENTKEY TENANT" lines */
    const char *etcd;          /* http://127.0.0.1:2379 or NULL */
    const char *etcd_prefix;
    double liveness;     /* seconds between hellos to each host */
    double liveness_max; /* no answer this long: the host is lost */
    size_t max_request_bytes;
} rt_config;
extern rt_config rt_cfg;
/* This run's instance, random hex, set by rt_base_start. */
extern char rt_instance[RT_INSTANCE + 1];

/* Draws this run's instance and seeds random() from the same bytes. */
void rt_base_start(void);
/* Seconds on the monotonic clock. */
double rt_now(void);
/* One line on stderr, prefixed with the program's name. */
void rt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
