/* sup_stats: the daemon's counters (the `stats` request) and its request
 * log: one logfmt line per request, buffered and written once per loop
 * round so logging costs no syscall per request. */
#include "sup.h"

#include "mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

sup_counters sup_stats;
static FILE *log_file;
static double started;

static const char *const status_names[SUP_NSTATUS] = {
    "ok", "error", "interrupted", "timeout", "died", "aborted", "shutdown",
};

int sup_stats_open(void)
{
    started = sup_now();
    if (!sup_cfg.log_path || strcmp(sup_cfg.log_path, "-") == 0) {
        log_file = stderr;
    } else if (!(log_file = fopen(sup_cfg.log_path, "ae"))) {
        perror(sup_cfg.log_path);
        return -1;
    }
    setvbuf(log_file, NULL, _IOFBF, 64 * 1024);
    return 0;
}

void sup_stats_flush(void)
{
    if (log_file)
        fflush(log_file);
}

/* Writes the common head of a log line: time, then the given fields. */
static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...)
{
    if (!log_file)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(log_file, "ts=%s.%03ldZ ", when, ts.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(log_file, fmt, ap);
    va_end(ap);
    fputc('\n', log_file);
}

void sup_stats_request(const char *type, const char *ctx, const char *status, double duration)
{
    sup_stats.requests++;
    if (strncmp(status, "err:", 4) == 0)
        sup_stats.refused++;
    log_line("type=%s ctx=%s status=%s duration=%.6f", type, ctx && *ctx ? ctx : "-", status,
             duration);
}

void sup_stats_run(const char *ctx, const char *status, double duration, uint64_t out_bytes)
{
    sup_stats.runs++;
    for (int i = 0; i < SUP_NSTATUS; i++)
        if (strcmp(status, status_names[i]) == 0)
            sup_stats.by_status[i]++;
    log_line("type=execute ctx=%s status=%s duration=%.6f output_bytes=%llu", ctx, status, duration,
             (unsigned long long)out_bytes);
}

void sup_stats_event(const char *fmt, ...)
{
    if (!log_file)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_line("event=%s", msg);
}

void sup_stats_put(proto_buf *b)
{
    size_t live = 0, busy = 0, queued = 0;
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next) {
        live++;
        busy += c->running != NULL;
        queued += c->queued;
    }
    proto_put_str(b, "uptime");
    proto_put_double(b, sup_now() - started);
    proto_put_str(b, "held_bytes");
    proto_put_map(b, 2);
    proto_put_str(b, "current");
    proto_put_uint(b, sup_held_total());
    proto_put_str(b, "peak");
    proto_put_uint(b, sup_held_peak());
    proto_put_str(b, "contexts");
    proto_put_map(b, 4);
    proto_put_str(b, "live");
    proto_put_uint(b, live);
    proto_put_str(b, "busy");
    proto_put_uint(b, busy);
    proto_put_str(b, "queued");
    proto_put_uint(b, queued);
    proto_put_str(b, "created");
    proto_put_uint(b, sup_stats.contexts_created);
    proto_put_str(b, "counters");
    proto_put_map(b, 13 + SUP_NSTATUS);
    proto_put_str(b, "requests");
    proto_put_uint(b, sup_stats.requests);
    proto_put_str(b, "refused");
    proto_put_uint(b, sup_stats.refused);
    proto_put_str(b, "runs");
    proto_put_uint(b, sup_stats.runs);
    for (int i = 0; i < SUP_NSTATUS; i++) {
        char key[32];
        snprintf(key, sizeof key, "runs_%s", status_names[i]);
        proto_put_str(b, key);
        proto_put_uint(b, sup_stats.by_status[i]);
    }
    proto_put_str(b, "stdout_bytes");
    proto_put_uint(b, sup_stats.stdout_bytes);
    proto_put_str(b, "stderr_bytes");
    proto_put_uint(b, sup_stats.stderr_bytes);
    proto_put_str(b, "truncated_bytes");
    proto_put_uint(b, sup_stats.truncated_bytes);
    proto_put_str(b, "between_runs_bytes");
    proto_put_uint(b, sup_stats.between_runs_bytes);
    proto_put_str(b, "requests_unread");
    proto_put_uint(b, sup_stats.requests_unread);
    proto_put_str(b, "workers_spawned");
    proto_put_uint(b, sup_stats.workers_spawned);
    proto_put_str(b, "worker_deaths");
    proto_put_uint(b, sup_stats.worker_deaths);
    proto_put_str(b, "pip_runs");
    proto_put_uint(b, sup_stats.pip_runs);
    proto_put_str(b, "pip_failures");
    proto_put_uint(b, sup_stats.pip_failures);
    proto_put_str(b, "pip_cached");
    proto_put_uint(b, sup_stats.pip_cached);
}
