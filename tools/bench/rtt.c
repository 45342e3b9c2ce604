/* ctxd-bench: the C half of tools/bench/bench.py. Each mode measures one
 * thing and prints its samples as one JSON object on stdout.
 *
 *   ctxd-bench rtt ENDPOINT CTX N WARMUP      execute `x = 1`, send -> done (libctxd)
 *   ctxd-bench floor IPCPATH N WARMUP [GAP_MS]
 *                                             raw ZeroMQ DEALER/ROUTER round trip of
 *                                             100 bytes to an echo process (the floor);
 *                                             with GAP_MS, two round trips after that
 *                                             long idle (the floor of a paced creation)
 *   ctxd-bench create ENDPOINT PREFIX N [TIER|- [GAP_MS]]
 *                                             ctx.create PREFIX-i, then `x = 1` there:
 *                                             create -> first done; GAP_MS between
 *                                             creations (0: back to back)
 *   ctxd-bench stream ENDPOINT CTX print|write  1,000,000 x print('x'*99), or one
 *                                             100 MB sys.stdout.write; every byte checked
 *   ctxd-bench tput ENDPOINT PREFIX THREADS SECONDS
 *                                             THREADS clients, each running `x = 1` in
 *                                             context PREFIX-i, for SECONDS
 */
#include "ctxd.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static _Noreturn void die(const char *what, ctxd_client *c, int rc)
{
    const char *code = "", *msg = "";
    if (c)
        ctxd_last_error(c, &code, &msg);
    fprintf(stderr, "ctxd-bench: %s: %s %s %s\n", what, ctxd_strerror(rc), code, msg);
    exit(1);
}

static ctxd_client *connect_or_die(const char *endpoint)
{
    char err[256];
    ctxd_client *c = ctxd_connect(endpoint, err, sizeof err);
    if (!c) {
        fprintf(stderr, "ctxd-bench: connect %s: %s\n", endpoint, err);
        exit(1);
    }
    ctxd_set_timeout(c, 120);
    return c;
}

/* One series of samples, `"key": [...]`, inside the caller's object. */
static void print_series(const char *key, const double *v, size_t n)
{
    printf("\"%s\": [", key);
    for (size_t i = 0; i < n; i++)
        printf("%s%.9g", i ? ", " : "", v[i]);
    printf("]");
}

/* The samples as the one JSON object a mode prints. */
static void print_samples(const char *key, const double *v, size_t n)
{
    printf("{");
    print_series(key, v, n);
    printf("}\n");
}

/* Sleeps s seconds (the gap of a paced mode). */
static void sleep_seconds(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void run_x1(ctxd_client *c, const char *ctx)
{
    ctxd_exec_opts o = {.ctx = ctx, .code = "x = 1", .timeout = -1};
    ctxd_outcome out;
    int rc = ctxd_execute(c, &o, NULL, NULL, &out);
    if (rc < 0)
        die("execute", c, rc);
    if (out.status != CTXD_OK) {
        fprintf(stderr, "ctxd-bench: x = 1 ended with status %d\n", (int)out.status);
        exit(1);
    }
}

/* ---- rtt ------------------------------------------------------------------ */

static int mode_rtt(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    ctxd_client *c = connect_or_die(argv[2]);
    const char *ctx = argv[3];
    size_t n = strtoul(argv[4], NULL, 10), warm = strtoul(argv[5], NULL, 10);
    double *v = calloc(n, sizeof *v);
    for (size_t i = 0; i < warm; i++)
        run_x1(c, ctx);
    for (size_t i = 0; i < n; i++) {
        double t0 = now();
        run_x1(c, ctx);
        v[i] = now() - t0;
    }
    print_samples("rtt", v, n);
    ctxd_close(c);
    return 0;
}

/* ---- floor: raw ZeroMQ ------------------------------------------------------- */

static int mode_floor(int argc, char **argv)
{
    if (argc != 5 && argc != 6)
        return 2;
    /* GAP_MS: each sample is two round trips after that long idle, the
     * shape of create -> first run (a request, then another right after) */
    double gap = argc == 6 ? strtod(argv[5], NULL) / 1e3 : 0;
    char ep[600];
    snprintf(ep, sizeof ep, "ipc://%s", argv[2]);
    size_t n = strtoul(argv[3], NULL, 10), warm = strtoul(argv[4], NULL, 10);
    int ready[2];
    if (pipe(ready) < 0)
        return 1;
    pid_t echo = fork();
    if (echo == 0) { /* the echo server: ROUTER, like ctxd */
        void *z = zmq_ctx_new();
        void *r = zmq_socket(z, ZMQ_ROUTER);
        if (zmq_bind(r, ep) < 0)
            _exit(1);
        if (write(ready[1], "x", 1) < 0)
            _exit(1);
        for (;;) {
            zmq_msg_t id, body;
            zmq_msg_init(&id);
            zmq_msg_init(&body);
            if (zmq_msg_recv(&id, r, 0) < 0 || zmq_msg_recv(&body, r, 0) < 0)
                _exit(0);
            zmq_msg_send(&id, r, ZMQ_SNDMORE);
            zmq_msg_send(&body, r, 0);
        }
    }
    char x;
    if (read(ready[0], &x, 1) != 1)
        return 1;
    void *z = zmq_ctx_new();
    void *d = zmq_socket(z, ZMQ_DEALER);
    zmq_connect(d, ep);
    char msg[100], buf[200];
    memset(msg, 'm', sizeof msg);
    double *v = calloc(n, sizeof *v);
    for (size_t i = 0; i < warm + n; i++) {
        if (gap > 0)
            sleep_seconds(gap);
        double t0 = now();
        for (int trip = 0; trip < (gap > 0 ? 2 : 1); trip++) {
            zmq_send(d, msg, sizeof msg, 0);
            if (zmq_recv(d, buf, sizeof buf, 0) != (int)sizeof msg)
                return 1;
        }
        if (i >= warm)
            v[i - warm] = now() - t0;
    }
    kill(echo, SIGKILL);
    waitpid(echo, NULL, 0);
    print_samples("rtt", v, n);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(d);
    zmq_ctx_term(z);
    return 0;
}

/* ---- create -> first done ------------------------------------------------ */

static int mode_create(int argc, char **argv)
{
    if (argc < 5 || argc > 7) /* ENDPOINT PREFIX N [TIER|- [GAP_MS]] */
        return 2;
    ctxd_client *c = connect_or_die(argv[2]);
    size_t n = strtoul(argv[4], NULL, 10);
    const char *tier = argc >= 6 && strcmp(argv[5], "-") != 0 ? argv[5] : NULL;
    double gap = argc == 7 ? strtod(argv[6], NULL) / 1e3 : 0;
    double *v = calloc(n, sizeof *v), *created = calloc(n, sizeof *created);
    if (!v || !created)
        return 2;
    for (size_t i = 0; i < n; i++) {
        char name[80];
        snprintf(name, sizeof name, "%s-%zu", argv[3], i);
        if (gap > 0 && i > 0)
            sleep_seconds(gap);
        double t0 = now();
        ctxd_create_opts o = {.name = name, .tier = tier};
        int rc = ctxd_ctx_create_ex(c, &o, NULL);
        if (rc < 0)
            die("ctx.create", c, rc);
        created[i] = now() - t0;
        run_x1(c, name);
        v[i] = now() - t0;
    }
    /* "created": the ctx.create reply alone, so a slow creation shows
     * which half was slow */
    printf("{");
    print_series("ready", v, n);
    printf(", ");
    print_series("created", created, n);
    printf("}\n");
    free(created);
    free(v);
    ctxd_close(c);
    return 0;
}

/* ---- stream ----------------------------------------------------------------- */

typedef struct {
    unsigned long long out, err, bad;
    bool lines; /* print mode: lines of 99 'x' and '\n' */
} stream_check;

/* What stdout must hold from any position: lines of 99 'x' and '\n' (print)
 * or only 'x' (write), a line longer than the largest chunk compared at once,
 * so each chunk is checked with one memcmp (the floor's cat checks nothing;
 * a byte-by-byte check cost this client more CPU than the worker's
 * Python, on a machine of two CPUs). */
#define PATTERN_SPAN (64 * 1024)
static unsigned char pattern[2][PATTERN_SPAN + 100];

static void make_patterns(void)
{
    for (size_t i = 0; i < sizeof pattern[0]; i++) {
        pattern[0][i] = 'x';
        pattern[1][i] = i % 100 == 99 ? '\n' : 'x';
    }
}

static void on_stream(void *user, const char *name, const void *data, size_t len)
{
    stream_check *s = user;
    if (strcmp(name, "stdout") != 0) {
        s->err += len;
        return;
    }
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i += PATTERN_SPAN) {
        size_t k = len - i < PATTERN_SPAN ? len - i : PATTERN_SPAN;
        const unsigned char *want = pattern[s->lines] + (s->out + i) % 100;
        if (memcmp(p + i, want, k) != 0)
            for (size_t j = 0; j < k; j++) /* count the wrong bytes */
                s->bad += p[i + j] != want[j];
    }
    s->out += len;
}

static int mode_stream(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    ctxd_client *c = connect_or_die(argv[2]);
    const char *ctx = argv[3];
    bool lines = strcmp(argv[4], "print") == 0;
    make_patterns();
    ctxd_callbacks cb = {.on_stream = on_stream};
    stream_check s = {.lines = lines};
    ctxd_outcome out;
    if (!lines) { /* the string is made in an earlier cell */
        ctxd_exec_opts prep = {
            .ctx = ctx, .code = "import sys\ns = 'x' * 100_000_000", .timeout = 0};
        if (ctxd_execute(c, &prep, NULL, NULL, &out) < 0 || out.status != CTXD_OK)
            die("prepare", c, -1);
    }
    ctxd_exec_opts o = {.ctx = ctx,
                        .code = lines ? "for i in range(1_000_000):\n    print('x' * 99)"
                                      : "sys.stdout.write(s)\nNone",
                        .timeout = 0};
    double t0 = now();
    int rc = ctxd_execute(c, &o, &cb, &s, &out);
    double t = now() - t0;
    if (rc < 0)
        die("execute", c, rc);
    if (!lines) {
        ctxd_exec_opts drop = {.ctx = ctx, .code = "del s", .timeout = 0};
        ctxd_execute(c, &drop, NULL, NULL, &out);
    }
    printf("{\"bytes\": %llu, \"seconds\": %.6f, \"bad\": %llu, \"stderr\": %llu, "
           "\"ok\": %s}\n",
           s.out, t, s.bad, s.err,
           s.out == 100000000ULL && s.bad == 0 && s.err == 0 && out.status == CTXD_OK ? "true"
                                                                                      : "false");
    ctxd_close(c);
    return 0;
}

/* ---- aggregate throughput ------------------------------------------------- */

typedef struct {
    const char *endpoint;
    char ctx[80];
    double seconds;
    unsigned long long runs;
    pthread_barrier_t *start;
} tput_arg;

static void *tput_thread(void *p)
{
    tput_arg *a = p;
    ctxd_client *c = connect_or_die(a->endpoint);
    run_x1(c, a->ctx);
    pthread_barrier_wait(a->start);
    double end = now() + a->seconds;
    while (now() < end) {
        run_x1(c, a->ctx);
        a->runs++;
    }
    ctxd_close(c);
    return NULL;
}

static int mode_tput(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    int n = atoi(argv[4]);
    double secs = atof(argv[5]);
    if (n < 1 || n > 256)
        return 2;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n + 1);
    tput_arg *a = calloc((size_t)n, sizeof *a);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    for (int i = 0; i < n; i++) {
        a[i].endpoint = argv[2];
        snprintf(a[i].ctx, sizeof a[i].ctx, "%s-%d", argv[3], i);
        a[i].seconds = secs;
        a[i].start = &start;
        pthread_create(&th[i], NULL, tput_thread, &a[i]);
    }
    pthread_barrier_wait(&start);
    double t0 = now();
    unsigned long long total = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        total += a[i].runs;
    }
    double t = now() - t0;
    printf("{\"runs\": %llu, \"seconds\": %.6f}\n", total, t);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } modes[] = {{"rtt", mode_rtt},
                 {"floor", mode_floor},
                 {"create", mode_create},
                 {"stream", mode_stream},
                 {"tput", mode_tput}};
    for (size_t i = 0; argc > 1 && i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(argv[1], modes[i].name) == 0) {
            int rc = modes[i].fn(argc, argv);
            if (rc == 2)
                fprintf(stderr, "ctxd-bench: bad arguments for %s (see tools/bench/rtt.c)\n",
                        argv[1]);
            return rc;
        }
    }
    fprintf(stderr, "usage: ctxd-bench rtt|floor|create|stream|tput ... (see tools/bench/rtt.c)\n");
    return 2;
}
