/* sup_stats: counters and the request log. */
#ifndef CTXD_SUP_STATS_H
#define CTXD_SUP_STATS_H

#include "proto.h"
#include <stddef.h>
#include <stdint.h>

#define SUP_NSTATUS 7 /* ok error interrupted timeout died aborted shutdown */
typedef struct sup_counters {
    uint64_t requests, refused, runs, by_status[SUP_NSTATUS];
    uint64_t stdout_bytes, stderr_bytes, truncated_bytes;
    uint64_t between_runs_bytes; /* output written while no run was active */
    uint64_t requests_unread;    /* dropped: their client held too much unread */
    uint64_t contexts_created, workers_spawned, worker_deaths;
    uint64_t pip_runs, pip_failures, pip_cached; /* sup_pkgs.c */
    uint64_t log_lines_lost;                     /* request log lines a write could not store */
    uint64_t route_dropped; /* messages whose request's connection is gone (sup_route.c) */
    uint64_t disconnects;   /* CurveZMQ connections seen to drop (sup_route.c) */
    uint64_t pss_reads;     /* workers' smaps_rollup read (sup_ctxpss.c: ~0.3 ms each) */
} sup_counters;
extern sup_counters sup_stats;
int sup_stats_open(void);
void sup_stats_flush(void);
/* One log line for a request answered with `ok` or `err:<code>`. */
void sup_stats_request(const char *type, const char *ctx, const char *status, double duration);
void sup_stats_run(const char *ctx, const char *status, double duration, uint64_t out_bytes);
void sup_stats_event(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Appends the `stats` reply's fields (uptime, contexts: live, busy and
 * queued as counted by the caller, counters). */
void sup_stats_put(proto_buf *b, size_t live, size_t busy, size_t queued);

#endif
