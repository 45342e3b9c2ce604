/* sup_stats: the daemon's counters (the `stats` request) and its request
 * log: one logfmt line per request, buffered and written once per loop
 * round so logging costs no syscall per request. Lines a write could not
 * store (a full disk) are counted (`log_lines_lost`) and said on stderr
 * once, never lost silently. */
#include "sup_stats.h"

#include "sup_config.h"
#include "sup_chanbud.h"
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

/* A log line being built. Requests and runs append their fields as plain
 * bytes: a line is on every round trip's path, and printf was a tenth of
 * the supervisor's instructions per `x = 1`. */
typedef struct log_text {
    char s[1024];
    size_t len; /* at most sizeof s - 2: room for the newline */
} log_text;

/* Appends n bytes of p, cut where the line is full (one line stays one
 * line). */
static void text_putn(log_text *t, const char *p, size_t n)
{
    size_t room = sizeof t->s - 2 - t->len;
    if (n > room)
        n = room;
    memcpy(t->s + t->len, p, n);
    t->len += n;
}

/* Appends a NUL-terminated string. */
static void text_put(log_text *t, const char *p)
{
    text_putn(t, p, strlen(p));
}

/* v in decimal, zero-padded to at least width digits. */
static void text_put_uint(log_text *t, unsigned long long v, int width)
{
    char d[24];
    int i = sizeof d;
    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v || (int)sizeof d - i < width);
    text_putn(t, d + i, sizeof d - (size_t)i);
}

/* A duration as "%.6f" prints it, by integer formatting (glibc's
 * floating-point formatter is the slowest part of a line). */
static void text_put_seconds(log_text *t, double d)
{
    if (!(d >= 0 && d < 1e12)) {
        char b[64];
        snprintf(b, sizeof b, "%.6f", d);
        text_put(t, b);
        return;
    }
    unsigned long long us = (unsigned long long)(d * 1e6 + 0.5);
    text_put_uint(t, us / 1000000, 1);
    text_putn(t, ".", 1);
    text_put_uint(t, us % 1000000, 6);
}

/* Starts a line with its time: "ts=YYYY-MM-DDTHH:MM:SS.mmmZ ". */
static void text_begin(log_text *t)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != when_sec) { /* the date is spelled once a second */
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        strftime(when_text, sizeof when_text, "%Y-%m-%dT%H:%M:%S", &tm);
        when_sec = ts.tv_sec;
    }
    t->len = 0;
    if (log_midline)
        text_putn(t, "\n", 1);
    log_midline = false;
    text_putn(t, "ts=", 3);
    text_put(t, when_text);
    text_putn(t, ".", 1);
    text_put_uint(t, (unsigned long long)(ts.tv_nsec / 1000000), 3);
    text_putn(t, "Z ", 2);
}

/* Ends the line and queues it for the next flush. */
static void text_end(log_text *t)
{
    t->s[t->len++] = '\n';
    if (log_len + t->len > sizeof log_buf)
        sup_stats_flush();
    memcpy(log_buf + log_len, t->s, t->len);
    log_len += t->len;
}

/* The head of a request's or a run's line, up to its status. */
static void text_request(log_text *t, const char *type, const char *ctx, const char *status)
{
    text_begin(t);
    text_putn(t, "type=", 5);
    text_put(t, type);
    text_putn(t, " ctx=", 5);
    text_put(t, ctx && *ctx ? ctx : "-");
    text_putn(t, " status=", 8);
    text_put(t, status);
    text_putn(t, " duration=", 10);
}

void sup_stats_request(const char *type, const char *ctx, const char *status, double duration)
{
    sup_stats.requests++;
    if (strncmp(status, "err:", 4) == 0)
        sup_stats.refused++;
    if (log_fd < 0)
        return;
    log_text t;
    text_request(&t, type, ctx, status);
    text_put_seconds(&t, duration);
    text_end(&t);
}

void sup_stats_run(const char *ctx, const char *status, double duration, uint64_t out_bytes)
{
    sup_stats.runs++;
    for (int i = 0; i < SUP_NSTATUS; i++)
        if (strcmp(status, status_names[i]) == 0)
            sup_stats.by_status[i]++;
    if (log_fd < 0)
        return;
    log_text t;
    text_request(&t, "execute", ctx, status);
    text_put_seconds(&t, duration);
    text_putn(&t, " output_bytes=", 14);
    text_put_uint(&t, out_bytes, 1);
    text_end(&t);
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
    log_text t;
    text_begin(&t);
    text_putn(&t, "event=", 6);
    text_put(&t, msg);
    text_end(&t);
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
    proto_put_str(b, "chan_bytes");
    proto_put_map(b, 3);
    proto_put_str(b, "current");
    proto_put_uint(b, sup_chanbud_used());
    proto_put_str(b, "peak");
    proto_put_uint(b, sup_chanbud_peak());
    proto_put_str(b, "waiting");
    proto_put_uint(b, sup_chanbud_waiting());
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
    proto_map m = proto_map_open(b);
    for (size_t i = 0; i < n; i++) {
        if (i == 3) /* after requests, refused, runs: the runs by status */
            for (int k = 0; k < SUP_NSTATUS; k++) {
                char key[32];
                snprintf(key, sizeof key, "runs_%s", status_names[k]);
                proto_key(b, &m, key);
                proto_put_uint(b, sup_stats.by_status[k]);
            }
        proto_key(b, &m, counter_fields[i].name);
        proto_put_uint(b, *counter_fields[i].value);
    }
    proto_map_close(b, &m);
}
