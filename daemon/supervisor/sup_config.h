/* sup_config: the daemon-wide settings (command line and config files) and
 * this daemon's identity. The bottom layer of the supervisor: it includes
 * no other sup_ header (daemon/supervisor/README.md). */
#ifndef CTXD_SUP_CONFIG_H
#define CTXD_SUP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SUP_VERSION "0.1.0"

#define SUP_MAX_ENDPOINTS 16
/* Most spare workers (--spare-workers). */
#define SUP_SPARE_MAX 64
/* A confined worker's own tasks (threads), on top of policy.max_processes. */
#define SUP_OWN_TASKS 8
/* The host-wide registry of worker uid ranges (--uid-registry). */
#define SUP_UID_REGISTRY "/var/lib/ctxd/uid-ranges"

/* Daemon-wide settings (sup_config.c: command line and config file). */
typedef struct sup_config {
    const char *endpoints[SUP_MAX_ENDPOINTS];
    size_t nendpoints;
    const char *worker_path;
    size_t max_contexts;
    size_t spare_workers; /* workers forked ahead for default-tier contexts */
    size_t max_queue;
    size_t max_code_bytes;
    size_t max_request_bytes;
    uint64_t max_output;    /* stream bytes per run before truncation; 0 = none */
    size_t max_held;        /* bytes held for clients that do not read, in total */
    size_t max_client_held; /* ... for one client */
    /* Bytes of channel frames being received, across all contexts
     * (sup_chanbud.c). */
    size_t max_chan_held;
    /* Snapshots (sup_snap.c): bytes of one, how many per context, bytes of
     * all in the state directory. */
    uint64_t max_snapshot_bytes;
    size_t max_snapshots;
    uint64_t max_snapshot_total;
    double default_timeout; /* seconds; 0 = none */
    double kill_grace;      /* seconds between SIGINT and SIGKILL on timeout */
    double idle_ttl;        /* seconds; 0 = never reap idle contexts */
    bool interrupt_on_disconnect;
    bool insecure_tcp;
    /* --socket-group: ipc sockets (and their directory) group-accessible
     * to this group; -1 none (owner only). */
    long socket_gid;
    const char *state_dir;
    const char *authorized_keys;
    const char *log_path;
    const char *preload; /* modules the zygote imports, comma-separated */
    /* Packages (sup_pkgs.c): where pip finds them and where installs are
     * cached; no wheelhouse and no index = packages are not offered. */
    const char *wheelhouse;    /* --wheelhouse: a directory of wheels */
    const char *package_index; /* --package-index: an index URL */
    const char *package_cache; /* --package-cache: default STATE_DIR/packages */
    const char *pip_python;    /* --pip-python: the Python that runs pip */
    bool verbose;
    bool no_cgroup_tuning; /* --no-cgroup-tuning: leave the v2 mount as it is */
    /* --no-page-merging: unsafe-tier workers are not offered to the
     * kernel's same-page merging (KSM, sup_zygote.c). */
    bool no_page_merging;
    /* --worker-uids FIRST:COUNT (sup_ident.c); 0: a range claimed from the
     * host's registry (sup_uidreg.c). */
    unsigned worker_uid_first, worker_uid_count;
    const char *uid_registry; /* --uid-registry DIR: NULL = SUP_UID_REGISTRY */
} sup_config;

extern sup_config sup_cfg;
/* Random id of this daemon process, so clients can tell a restart. */
extern char sup_instance[33];

/* Applies the command line (and any --config files); -1 after printing the
 * problem. --help prints the usage and exits. */
int sup_config_parse(int argc, char **argv);
/* A hash of the endpoints: daemons sharing a state directory but listening
 * elsewhere keep files of their own in it (context table, uid state). */
uint64_t sup_config_endpoints_hash(void);

#endif
