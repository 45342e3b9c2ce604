/* libctxd's event-loop form against a real daemon.
 *
 *   test_event_loop /path/to/ctxd
 *
 * Starts the daemon on a private ipc socket (its worker is found next to
 * it), then checks: two runs on two contexts driven by one poll() loop run
 * concurrently (each waits for a file the other writes, so a serialised or
 * starved loop would never finish) and each event reaches its own run's
 * callbacks, also across a blocking control request made mid-flight; an
 * interrupt from inside a callback stops its run only; blocking calls from a
 * callback are refused; ctxd_execute dispatches a submitted run's events
 * while it waits; a refused run ends through on_done; a detached run is
 * forgotten. Prints "N passed, M failed". No timing thresholds: a hang is
 * caught by a generous overall deadline. */
#include "ctxd.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int passed, failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Overall bound for one loop: a liveness bound, not a timing assertion. */
#define LOOP_DEADLINE 60.0

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- one run's record --------------------------------------------------- */

typedef struct rec {
    const char *label;
    ctxd_client *c;
    uint64_t id;
    char out[4096];
    size_t outlen;
    int accepted, streams, done_calls, errors;
    int rc;
    ctxd_status status;
    char ename[64];
    char code[64];
    bool state_lost;
    /* behaviour */
    const char *interrupt_on; /* interrupt the run when stdout contains this */
    bool interrupted_sent;
    bool try_blocking; /* call blocking functions from a callback */
    int blocking_rc, step_rc;
} rec;

static void on_accepted(void *user, uint64_t count, uint64_t inc, const char *prev)
{
    rec *r = user;
    (void)count;
    (void)inc;
    (void)prev;
    r->accepted++;
}

static void on_stream(void *user, const char *name, const void *data, size_t len)
{
    rec *r = user;
    r->streams++;
    if (strcmp(name, "stdout") == 0 && r->outlen + len < sizeof r->out) {
        memcpy(r->out + r->outlen, data, len);
        r->outlen += len;
        r->out[r->outlen] = '\0';
    }
    if (r->try_blocking) {
        r->try_blocking = false;
        r->blocking_rc = ctxd_hello(r->c, NULL);
        r->step_rc = ctxd_step(r->c, 0);
    }
    if (r->interrupt_on && !r->interrupted_sent && strstr(r->out, r->interrupt_on)) {
        r->interrupted_sent = true;
        int rc = ctxd_run_interrupt(r->c, r->id);
        CHECK(rc == 0, "ctxd_run_interrupt from a callback: %d", rc);
    }
}

static void on_error(void *user, const char *ename, const char *evalue, const char *const *tb,
                     size_t n)
{
    rec *r = user;
    (void)evalue;
    (void)tb;
    (void)n;
    r->errors++;
    snprintf(r->ename, sizeof r->ename, "%s", ename);
}

static void on_done(void *user, const ctxd_run_end *end)
{
    rec *r = user;
    r->done_calls++;
    r->rc = end->rc;
    CHECK(end->run == r->id, "on_done for run %llu, expected %llu", (unsigned long long)end->run,
          (unsigned long long)r->id);
    if (end->rc == 0) {
        CHECK(end->outcome != NULL, "on_done without outcome");
        r->status = end->outcome->status;
        r->state_lost = end->outcome->state_lost;
    } else {
        CHECK(end->outcome == NULL, "on_done with rc %d and an outcome", end->rc);
        snprintf(r->code, sizeof r->code, "%s", end->code);
    }
}

static const ctxd_callbacks CB = {
    .on_accepted = on_accepted, .on_stream = on_stream, .on_error = on_error, .on_done = on_done};

static int submit(ctxd_client *c, rec *r, const char *ctx, const char *code)
{
    r->c = c;
    r->status = (ctxd_status)-1;
    ctxd_exec_opts o = {.ctx = ctx, .code = code, .timeout = 120};
    return ctxd_submit(c, &o, &CB, r, &r->id);
}

/* The loop every event-loop program writes: poll the fd with the timeout
 * libctxd asks for, then step. `mid` runs once per iteration (may be NULL). */
static bool drive(ctxd_client *c, void (*mid)(ctxd_client *, void *), void *arg)
{
    struct pollfd p = {.fd = ctxd_fd(c), .events = POLLIN};
    double deadline = mono() + LOOP_DEADLINE;
    while (ctxd_pending(c) > 0) {
        if (mono() > deadline) {
            fprintf(stderr, "loop did not finish within %g s\n", LOOP_DEADLINE);
            return false;
        }
        int t = ctxd_timeout_ms(c);
        if (t < 0 || t > 200)
            t = 200; /* only to check the deadline */
        poll(&p, 1, t);
        int n = ctxd_step(c, 0);
        CHECK(n >= 0, "ctxd_step: %d", n);
        if (n < 0)
            return false;
        if (mid)
            mid(c, arg);
    }
    return true;
}

/* ---- the daemon ------------------------------------------------------------ */

static pid_t daemon_pid;
static char tmpdir[] = "/tmp/ctxd-evloop-XXXXXX";
static char endpoint[256];

static void stop_daemon(void)
{
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGTERM);
        int st;
        for (int i = 0; i < 100 && waitpid(daemon_pid, &st, WNOHANG) == 0; i++)
            usleep(50000);
        if (waitpid(daemon_pid, &st, WNOHANG) == 0) {
            kill(daemon_pid, SIGKILL);
            waitpid(daemon_pid, &st, 0);
        }
        daemon_pid = 0;
    }
}

static ctxd_client *start_daemon(const char *bin)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(2);
    }
    snprintf(endpoint, sizeof endpoint, "ipc://%s/s.sock", tmpdir);
    daemon_pid = fork();
    if (daemon_pid == 0) {
        setsid();
        if (chdir(tmpdir) < 0)
            _exit(126);
        char log[300];
        snprintf(log, sizeof log, "%s/ctxd.log", tmpdir);
        if (!freopen(log, "w", stdout) || !freopen(log, "a", stderr))
            _exit(126);
        execl(bin, bin, "--listen", endpoint, (char *)NULL);
        _exit(127);
    }
    double deadline = mono() + 15;
    while (mono() < deadline) {
        ctxd_client *c = ctxd_connect_ex(endpoint, 1.0, NULL, NULL, 0);
        if (c)
            return c;
        int st;
        if (waitpid(daemon_pid, &st, WNOHANG) == daemon_pid) {
            fprintf(stderr, "ctxd exited at start (see %s/ctxd.log)\n", tmpdir);
            exit(2);
        }
        usleep(20000);
    }
    fprintf(stderr, "ctxd did not answer within 15 s\n");
    stop_daemon();
    exit(2);
}

/* ---- tests ----------------------------------------------------------------- */

static char marker_a[400], marker_b[400];

typedef struct mid_state {
    rec *a, *b;
    bool listed;
    size_t nlisted;
    int list_rc;
} mid_state;

/* Once both runs produced output, make a blocking control request: the
 * events that arrive meanwhile must be parked, not lost. */
static void mid_list(ctxd_client *c, void *arg)
{
    mid_state *m = arg;
    if (m->listed || m->a->streams == 0 || m->b->streams == 0)
        return;
    m->listed = true;
    const ctxd_ctx_info *infos;
    m->list_rc = ctxd_ctx_list(c, &infos, &m->nlisted);
}

static void test_two_runs_one_loop(ctxd_client *c)
{
    CHECK(ctxd_ctx_create(c, "a", NULL, NULL, 0, NULL) == 0, "create a");
    CHECK(ctxd_ctx_create(c, "b", NULL, NULL, 0, NULL) == 0, "create b");
    snprintf(marker_a, sizeof marker_a, "%s/marker-a", tmpdir);
    snprintf(marker_b, sizeof marker_b, "%s/marker-b", tmpdir);
    /* Each run announces itself, writes its marker, waits for the other's. */
    char code_a[1200], code_b[1200];
    static const char tmpl[] = "import os, time\n"
                               "print('%s:start', flush=True)\n"
                               "open(%s%s%s, 'w').close()\n"
                               "while not os.path.exists(%s%s%s):\n"
                               "    time.sleep(0.01)\n"
                               "print('%s:end')\n";
    snprintf(code_a, sizeof code_a, tmpl, "A", "'", marker_a, "'", "'", marker_b, "'", "A");
    snprintf(code_b, sizeof code_b, tmpl, "B", "'", marker_b, "'", "'", marker_a, "'", "B");
    rec a = {.label = "a"}, b = {.label = "b"};
    CHECK(submit(c, &a, "a", code_a) == 0, "submit a");
    CHECK(submit(c, &b, "b", code_b) == 0, "submit b");
    CHECK(a.id != 0 && b.id != 0 && a.id != b.id, "run ids %llu %llu", (unsigned long long)a.id,
          (unsigned long long)b.id);
    CHECK(ctxd_pending(c) == 2, "pending %zu", ctxd_pending(c));
    mid_state m = {.a = &a, .b = &b};
    CHECK(drive(c, mid_list, &m), "loop finished");
    CHECK(a.done_calls == 1 && b.done_calls == 1, "on_done calls %d %d", a.done_calls,
          b.done_calls);
    CHECK(a.rc == 0 && a.status == CTXD_OK, "a: rc %d status %d", a.rc, (int)a.status);
    CHECK(b.rc == 0 && b.status == CTXD_OK, "b: rc %d status %d", b.rc, (int)b.status);
    CHECK(strcmp(a.out, "A:start\nA:end\n") == 0, "a's stdout: '%s'", a.out);
    CHECK(strcmp(b.out, "B:start\nB:end\n") == 0, "b's stdout: '%s'", b.out);
    CHECK(a.accepted == 1 && b.accepted == 1, "accepted %d %d", a.accepted, b.accepted);
    CHECK(m.listed && m.list_rc == 0 && m.nlisted >= 2, "ctx.list mid-flight: rc %d, %zu",
          m.list_rc, m.nlisted);
    CHECK(ctxd_timeout_ms(c) == -1, "no timer without runs: %d", ctxd_timeout_ms(c));
}

static void test_interrupt_from_callback(ctxd_client *c)
{
    rec r = {.label = "loop", .interrupt_on = "ready"};
    CHECK(submit(c, &r, "a", "x_kept = 42\nprint('ready', flush=True)\nwhile True:\n    pass\n") ==
              0,
          "submit");
    /* Meanwhile, a run on b finishes normally: the interrupt is only a's. */
    rec other = {.label = "other"};
    CHECK(submit(c, &other, "b", "import time\ntime.sleep(0.2)\nprint('fine')") == 0, "submit");
    CHECK(drive(c, NULL, NULL), "loop finished");
    CHECK(r.rc == 0 && r.status == CTXD_INTERRUPTED, "status %d rc %d", (int)r.status, r.rc);
    CHECK(r.errors == 1 && strcmp(r.ename, "KeyboardInterrupt") == 0, "error %s", r.ename);
    CHECK(!r.state_lost, "state lost");
    CHECK(other.rc == 0 && other.status == CTXD_OK && strcmp(other.out, "fine\n") == 0,
          "other: %d '%s'", (int)other.status, other.out);
    /* The context and its globals are still there. */
    rec after = {.label = "after"};
    CHECK(submit(c, &after, "a", "print(x_kept)") == 0, "submit");
    CHECK(drive(c, NULL, NULL), "loop finished");
    CHECK(after.status == CTXD_OK && strcmp(after.out, "42\n") == 0, "after: '%s'", after.out);
}

static void test_blocking_from_callback(ctxd_client *c)
{
    rec r = {.label = "blocking", .try_blocking = true};
    CHECK(submit(c, &r, "a", "print('hi')") == 0, "submit");
    CHECK(drive(c, NULL, NULL), "loop finished");
    CHECK(r.blocking_rc == CTXD_EINVALID, "hello from a callback: %d", r.blocking_rc);
    CHECK(r.step_rc == CTXD_EINVALID, "step from a callback: %d", r.step_rc);
    CHECK(r.status == CTXD_OK, "status %d", (int)r.status);
}

static void test_execute_dispatches_submitted(ctxd_client *c)
{
    /* A run submitted on b, then a blocking execute queued behind it on the
     * same context: the daemon finishes the first before it starts the
     * second, so ctxd_execute must dispatch all of the submitted run's
     * events, on_done included, while it waits. */
    rec bg = {.label = "bg"};
    CHECK(submit(c, &bg, "b", "import time\ntime.sleep(0.1)\nprint('background')") == 0, "submit");
    ctxd_exec_opts o = {.ctx = "b", .code = "print('foreground')", .timeout = 60};
    ctxd_outcome out;
    int rc = ctxd_execute(c, &o, NULL, NULL, &out);
    CHECK(rc == 0 && out.status == CTXD_OK, "execute: rc %d status %d", rc, (int)out.status);
    CHECK(bg.done_calls == 1 && bg.status == CTXD_OK, "bg ended during ctxd_execute: %d %d",
          bg.done_calls, (int)bg.status);
    CHECK(strcmp(bg.out, "background\n") == 0, "bg: '%s'", bg.out);
    CHECK(ctxd_pending(c) == 0, "pending %zu", ctxd_pending(c));
}

static void test_refused_and_detached(ctxd_client *c)
{
    rec bad = {.label = "bad"};
    CHECK(submit(c, &bad, "no-such-context", "1") == 0, "submit");
    rec gone = {.label = "gone"};
    CHECK(submit(c, &gone, "a", "import time\ntime.sleep(0.3)\nprint('unseen')") == 0, "submit");
    CHECK(ctxd_run_detach(c, gone.id) == 0, "detach");
    CHECK(ctxd_run_detach(c, gone.id) == CTXD_EINVALID, "detach twice");
    CHECK(ctxd_run_interrupt(c, 987654) == CTXD_EINVALID, "interrupt of an unknown run");
    CHECK(drive(c, NULL, NULL), "loop finished");
    CHECK(bad.done_calls == 1 && bad.rc == CTXD_EREFUSED, "bad: calls %d rc %d", bad.done_calls,
          bad.rc);
    CHECK(strcmp(bad.code, "unknown_context") == 0, "bad: code '%s'", bad.code);
    CHECK(gone.done_calls == 0 && gone.streams == 0, "detached run: calls %d streams %d",
          gone.done_calls, gone.streams);
    /* The detached run still ran: wait for it with a blocking run behind it
     * on the same context (runs on one context are serialised). */
    ctxd_exec_opts o = {.ctx = "a", .code = "1", .timeout = 60};
    ctxd_outcome out;
    CHECK(ctxd_execute(c, &o, NULL, NULL, &out) == 0 && out.status == CTXD_OK, "after detach");
}

/* stats and ctx.fork (skipped by a daemon that predates them). The fork
 * waits behind a run submitted on its source: the blocking call parks that
 * run's events, which the loop then dispatches. */
static void test_stats_and_fork(ctxd_client *c)
{
    ctxd_stats_info st;
    int rc = ctxd_stats(c, &st);
    const char *code;
    ctxd_last_error(c, &code, NULL);
    if (rc == CTXD_EREFUSED && strcmp(code, "unknown_type") == 0) {
        fprintf(stderr, "skipped: this daemon has no stats request\n");
        return;
    }
    CHECK(rc == 0, "stats: %d", rc);
    CHECK(st.live >= 2 && st.runs >= 5 && st.runs_ok >= 4, "stats: live %llu runs %llu ok %llu",
          (unsigned long long)st.live, (unsigned long long)st.runs, (unsigned long long)st.runs_ok);
    rec src = {.label = "src"};
    CHECK(submit(c, &src, "a", "import time\ntime.sleep(0.3)\nforked_var = 'yes'\nprint('src')") ==
              0,
          "submit");
    ctxd_ctx_info info;
    rc = ctxd_ctx_fork(c, "a", "a-copy", &info);
    ctxd_last_error(c, &code, NULL);
    if (rc == CTXD_EREFUSED && strcmp(code, "unknown_type") == 0) {
        fprintf(stderr, "skipped: this daemon has no ctx.fork\n");
        drive(c, NULL, NULL);
        return;
    }
    CHECK(rc == 0 && strcmp(info.name, "a-copy") == 0, "fork: rc %d", rc);
    CHECK(drive(c, NULL, NULL), "loop finished");
    CHECK(src.status == CTXD_OK && strcmp(src.out, "src\n") == 0, "src: '%s'", src.out);
    rec copy = {.label = "copy"};
    CHECK(submit(c, &copy, "a-copy", "print(forked_var)") == 0, "submit");
    CHECK(drive(c, NULL, NULL), "loop finished");
    CHECK(copy.status == CTXD_OK && strcmp(copy.out, "yes\n") == 0, "copy: '%s'", copy.out);
}

/* complete, inspect, is_complete through libctxd: answers from the live
 * globals, a query queued behind a submitted run, and a refused cursor. */
static void test_queries(ctxd_client *c)
{
    rec def = {.label = "def"};
    CHECK(submit(c, &def, "a", "query_target_name = 1\ndef qf(x):\n    'Doc of qf.'\n") == 0,
          "submit");
    ctxd_completion comp;
    int rc = ctxd_complete(c, "a", "y = query_tar", CTXD_CURSOR_END, &comp);
    CHECK(drive(c, NULL, NULL), "loop finished");
    CHECK(rc == 0 && comp.nmatches == 1 && strcmp(comp.matches[0], "query_target_name") == 0 &&
              comp.cursor_start == 4 && comp.cursor_end == 13,
          "complete: rc %d, %zu matches", rc, comp.nmatches);
    ctxd_inspection insp;
    rc = ctxd_inspect(c, "a", "qf(1, ", 6, 0, &insp);
    CHECK(rc == 0 && insp.found && strstr(insp.text, "Doc of qf.") != NULL, "inspect: rc %d", rc);
    ctxd_completeness compl ;
    rc = ctxd_is_complete(c, "a", "for i in x:", &compl );
    CHECK(rc == 0 && strcmp(compl .status, "incomplete") == 0 && strcmp(compl .indent, "    ") == 0,
          "is_complete: rc %d", rc);
    rc = ctxd_complete(c, "a", "ab", 3, &comp);
    const char *code;
    ctxd_last_error(c, &code, NULL);
    CHECK(rc == CTXD_EREFUSED && strcmp(code, "bad_field") == 0, "cursor past the end: rc %d", rc);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_event_loop /path/to/ctxd\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    ctxd_client *c = start_daemon(argv[1]);
    CHECK(ctxd_fd(c) >= 0, "ctxd_fd");
    CHECK(ctxd_pending(c) == 0, "nothing pending at start");
    test_two_runs_one_loop(c);
    test_interrupt_from_callback(c);
    test_blocking_from_callback(c);
    test_execute_dispatches_submitted(c);
    test_refused_and_detached(c);
    test_stats_and_fork(c);
    test_queries(c);
    ctxd_close(c);
    int st = 0;
    bool alive = waitpid(daemon_pid, &st, WNOHANG) == 0;
    CHECK(alive, "the daemon survived the tests");
    stop_daemon();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (failed == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
