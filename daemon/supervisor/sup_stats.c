/* sup_stats: the daemon's counters (the `stats` request) and its request
 * log: one logfmt line per request, buffered and written once per loop
 * round so logging costs no syscall per request. Lines a write could not
 * store (a full disk) are counted (`log_lines_lost`) and said on stderr
 * once, never lost silently. */
#include "sup_stats.h"

#include "sup_config.h"
#include "sup_held.h"
#include "sup_log.h"

#include "mem.h"
#include "proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

sup_counters sup_stats;
static int log_fd = -1;
static char log_buf[64 * 1024]; /* lines not written yet */
static size_t log_len;
static bool log_midline; /* the last write stopped inside a line */
static bool log_loss_said;
static double started;
static time_t when_sec = -1; /* the second when_text spells */
static char when_text[32];   /* "YYYY-MM-DDTHH:MM:SS" of when_sec */

static const char *const status_names[SUP_NSTATUS] = {
    "ok", "error", "interrupted", "timeout", "died", "aborted", "shutdown",
};

int sup_stats_open(void)
{
    started = sup_now();
    if (!sup_cfg.log_path || strcmp(sup_cfg.log_path, "-") == 0) {
        log_fd = 2;
    } else if ((log_fd = open(sup_cfg.log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) <
               0) {
        perror(sup_cfg.log_path);
        return -1;
    }
    return 0;
}

/* Counts the lines that start in buf[0..n) (the lost ones after a failed
 * write). */
static uint64_t lines_in(const char *buf, size_t n)
{
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += buf[i] == '\n';
    return k;
}

void sup_stats_flush(void)
{
    size_t done = 0;
    while (done < log_len) {
        ssize_t w = write(log_fd, log_buf + done, log_len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    if (done < log_len) {
        int e = errno;
        /* The line the write stopped in is lost too; the next write starts
         * a new line. */
        uint64_t lost = lines_in(log_buf + done, log_len - done);
        sup_stats.log_lines_lost += lost;
        log_midline = done > 0 && log_buf[done - 1] != '\n';
        if (!log_loss_said) {
            log_loss_said = true;
            fprintf(stderr,
                    "ctxd: the request log (%s) lost %llu line(s): %s; lost lines are counted "
                    "in stats (log_lines_lost)\n",
                    log_fd == 2 ? "stderr" : sup_cfg.log_path, (unsigned long long)lost,
                    strerror(e ? e : ENOSPC));
        }
    } else if (done > 0) {
        log_midline = false;
    }
    log_len = 0;
}

/* Writes the common head of a log line: time, then the given fields. */
static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...)
{
    if (log_fd < 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != when_sec) { /* the date is spelled once a second */
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        strftime(when_text, sizeof when_text, "%Y-%m-%dT%H:%M:%S", &tm);
        when_sec = ts.tv_sec;
    }
    char line[1024];
    int n = snprintf(line, sizeof line, "%sts=%s.%03ldZ ", log_midline ? "\n" : "", when_text,
                     ts.tv_nsec / 1000000);
    log_midline = false;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2) /* cut long lines; one line stays one line */
        len = sizeof line - 2;
    line[len++] = '\n';
    if (log_len + len > sizeof log_buf)
        sup_stats_flush();
    memcpy(log_buf + log_len, line, len);
    log_len += len;
}

/* A duration as "%.6f" prints it, by integer formatting: a line per
 * request is on every round trip's path, and glibc's floating-point
 * formatter is its slowest part. */
static const char *seconds_text(double d, char *buf, size_t n)
{
    if (!(d >= 0 && d < 1e12)) {
        snprintf(buf, n, "%.6f", d);
        return buf;
    }
    unsigned long long us = (unsigned long long)(d * 1e6 + 0.5);
    snprintf(buf, n, "%llu.%06llu", us / 1000000, us % 1000000);
    return buf;
}

void sup_stats_request(const char *type, const char *ctx, const char *status, double duration)
{
    sup_stats.requests++;
    if (strncmp(status, "err:", 4) == 0)
        sup_stats.refused++;
    char d[40];
    log_line("type=%s ctx=%s status=%s duration=%s", type, ctx && *ctx ? ctx : "-", status,
             seconds_text(duration, d, sizeof d));
}

void sup_stats_run(const char *ctx, const char *status, double duration, uint64_t out_bytes)
{
    sup_stats.runs++;
    for (int i = 0; i < SUP_NSTATUS; i++)
        if (strcmp(status, status_names[i]) == 0)
            sup_stats.by_status[i]++;
    char d[40];
    log_line("type=execute ctx=%s status=%s duration=%s output_bytes=%llu", ctx, status,
             seconds_text(duration, d, sizeof d), (unsigned long long)out_bytes);
}

void sup_stats_event(const char *fmt, ...)
{
    if (log_fd < 0)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_line("event=%s", msg);
}

/* The `stats` counters in the order they are sent (PROTOCOL.md section 5);
 * the runs by status follow `runs`. */
static const struct {
    const char *name;
    const uint64_t *value;
} counter_fields[] = {
    {"requests", &sup_stats.requests},
    {"refused", &sup_stats.refused},
    {"runs", &sup_stats.runs},
    {"stdout_bytes", &sup_stats.stdout_bytes},
    {"stderr_bytes", &sup_stats.stderr_bytes},
    {"truncated_bytes", &sup_stats.truncated_bytes},
    {"between_runs_bytes", &sup_stats.between_runs_bytes},
    {"requests_unread", &sup_stats.requests_unread},
    {"workers_spawned", &sup_stats.workers_spawned},
    {"worker_deaths", &sup_stats.worker_deaths},
    {"pip_runs", &sup_stats.pip_runs},
    {"pip_failures", &sup_stats.pip_failures},
    {"pip_cached", &sup_stats.pip_cached},
    {"log_lines_lost", &sup_stats.log_lines_lost},
    {"route_dropped", &sup_stats.route_dropped},
    {"disconnects", &sup_stats.disconnects},
    {"pss_reads", &sup_stats.pss_reads},
};

void sup_stats_put(proto_buf *b, size_t live, size_t busy, size_t queued)
{
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
    size_t n = sizeof counter_fields / sizeof counter_fields[0];
    proto_put_map(b, (uint32_t)(n + SUP_NSTATUS));
    for (size_t i = 0; i < n; i++) {
        if (i == 3) /* after requests, refused, runs: the runs by status */
            for (int k = 0; k < SUP_NSTATUS; k++) {
                char key[32];
                snprintf(key, sizeof key, "runs_%s", status_names[k]);
                proto_put_str(b, key);
                proto_put_uint(b, sup_stats.by_status[k]);
            }
        proto_put_str(b, counter_fields[i].name);
        proto_put_uint(b, *counter_fields[i].value);
    }
}
