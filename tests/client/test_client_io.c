/* libctxd's input, clear_output, file and package calls against a real
 * daemon.
 *
 *   test_client_io /path/to/ctxd
 *
 * Makes a wheelhouse with one small wheel (written by /usr/bin/python3's
 * zipfile), starts the daemon on a private ipc socket with --wheelhouse and
 * a private --package-cache, then checks: on_input answers input() and
 * getpass() (with the password flag), a NULL answer makes the code see
 * EOFError, no on_input means EOFError at once; on_clear_output reports
 * clear_output(wait); ctxd_file_put / ctxd_file_get move a file of several
 * chunks unchanged (compared byte for byte) and refuse '..'; ctxd_pip_install
 * makes a package importable in one context only, says `cached` the second
 * time, and reports pip's message for a missing package; ctxd_ctx_create_ex
 * with packages. Prints "N passed, M failed". No timing thresholds. */
#include "ctxd.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static pid_t daemon_pid;
static char tmpdir[] = "/tmp/ctxd-clientio-XXXXXX";
static char endpoint[256];

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A wheel of module ctxdcio (VALUE = 7) in DIR/wh, via Python's zipfile. */
static void make_wheelhouse(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/wh' && /usr/bin/python3 -c \"\n"
             "import zipfile, hashlib, base64\n"
             "files = {'ctxdcio/__init__.py': 'VALUE = 7\\n',\n"
             "  'ctxdcio-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\\nName: ctxdcio\\n"
             "Version: 1.0\\n',\n"
             "  'ctxdcio-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\n"
             "Tag: py3-none-any\\n'}\n"
             "rec = []\n"
             "with zipfile.ZipFile('%s/wh/ctxdcio-1.0-py3-none-any.whl', 'w') as z:\n"
             "    for p, t in files.items():\n"
             "        z.writestr(p, t)\n"
             "        h = base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest())\n"
             "        rec.append(p + ',sha256=' + h.rstrip(b'=').decode() + ',' + "
             "str(len(t)))\n"
             "    z.writestr('ctxdcio-1.0.dist-info/RECORD', '\\n'.join(rec + "
             "['ctxdcio-1.0.dist-info/RECORD,,']) + '\\n')\n"
             "\"",
             tmpdir, tmpdir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not make the test wheel\n");
        exit(2);
    }
}

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
    snprintf(endpoint, sizeof endpoint, "ipc://%s/s.sock", tmpdir);
    char wh[300], cache[300];
    snprintf(wh, sizeof wh, "%s/wh", tmpdir);
    snprintf(cache, sizeof cache, "%s/cache", tmpdir);
    daemon_pid = fork();
    if (daemon_pid == 0) {
        setsid();
        if (chdir(tmpdir) < 0)
            _exit(126);
        char log[300];
        snprintf(log, sizeof log, "%s/ctxd.log", tmpdir);
        if (!freopen(log, "w", stdout) || !freopen(log, "a", stderr))
            _exit(126);
        execl(bin, bin, "--listen", endpoint, "--wheelhouse", wh, "--package-cache", cache,
              (char *)NULL);
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

/* ---- what a run reported ------------------------------------------------- */

typedef struct rec {
    char result[256];
    char ename[64];
    char prompts[256];
    int inputs, clears, clear_waits;
    const char *const *answers; /* NULL entries decline */
} rec;

static void on_result(void *user, const char *const *keys, const char *const *values, size_t n,
                      uint64_t count)
{
    rec *r = user;
    (void)count;
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i], "text/plain") == 0)
            snprintf(r->result, sizeof r->result, "%s", values[i]);
}

static void on_error(void *user, const char *ename, const char *evalue, const char *const *tb,
                     size_t n)
{
    rec *r = user;
    (void)evalue, (void)tb, (void)n;
    snprintf(r->ename, sizeof r->ename, "%s", ename);
}

static const char *on_input(void *user, const char *prompt, bool password)
{
    rec *r = user;
    size_t len = strlen(r->prompts);
    snprintf(r->prompts + len, sizeof r->prompts - len, "%s%s|", prompt, password ? "*" : "");
    return r->answers[r->inputs++];
}

static void on_clear_output(void *user, bool wait)
{
    rec *r = user;
    r->clears++;
    r->clear_waits += wait;
}

static int run(ctxd_client *c, const char *ctx, const char *code, rec *r, bool with_input)
{
    ctxd_callbacks cb = {.on_result = on_result,
                         .on_error = on_error,
                         .on_input = with_input ? on_input : NULL,
                         .on_clear_output = on_clear_output};
    ctxd_exec_opts o = {.ctx = ctx, .code = code, .timeout = 120};
    ctxd_outcome out;
    int rc = ctxd_execute(c, &o, &cb, r, &out);
    return rc < 0 ? rc : (int)out.status;
}

/* ---- tests ----------------------------------------------------------------- */

static void test_input(ctxd_client *c)
{
    static const char *const answers[] = {"bob", "s3cret", NULL, "after"};
    rec r = {.answers = answers};
    int st = run(c, NULL,
                 "import getpass\na = input('name? ')\nb = getpass.getpass('pw? ')\n"
                 "try:\n    input('third? ')\nexcept EOFError:\n    c = 'eof'\n"
                 "a, b, c, input()",
                 &r, true);
    CHECK(st == CTXD_OK, "input run status %d (%s)", st, r.ename);
    CHECK(strcmp(r.result, "('bob', 's3cret', 'eof', 'after')") == 0, "result %s", r.result);
    CHECK(strcmp(r.prompts, "name? |pw? *|third? ||") == 0, "prompts %s", r.prompts);
    CHECK(r.inputs == 4, "%d inputs", r.inputs);
    /* without on_input: EOFError at once, no callback */
    rec r2 = {.answers = answers};
    st = run(c, NULL, "input('x')", &r2, false);
    CHECK(st == CTXD_ERROR && strcmp(r2.ename, "EOFError") == 0, "status %d ename %s", st,
          r2.ename);
    CHECK(r2.inputs == 0, "on_input called without allow_stdin");
}

static void test_clear_output(ctxd_client *c)
{
    rec r = {0};
    int st = run(c, NULL, "clear_output()\nclear_output(wait=True)\n1", &r, false);
    CHECK(st == CTXD_OK, "status %d", st);
    CHECK(r.clears == 2 && r.clear_waits == 1, "clears %d waits %d", r.clears, r.clear_waits);
}

static void test_files(ctxd_client *c)
{
    /* 9 MiB + 5: three chunks, the last a short one */
    size_t size = 9u * 1024 * 1024 + 5;
    unsigned char *data = malloc(size);
    unsigned x = 12345;
    for (size_t i = 0; i < size; i++) {
        x = x * 1103515245u + 12345u;
        data[i] = (unsigned char)(x >> 16);
    }
    uint64_t off = 0, got_size = 0;
    int rc = 0;
    while (rc == 0 && (off < size || off == 0)) {
        size_t n = size - off < CTXD_FILE_CHUNK ? size - off : CTXD_FILE_CHUNK;
        rc = ctxd_file_put(c, NULL, "io.bin", off, data + off, n, &got_size);
        off += n;
    }
    CHECK(rc == 0 && got_size == size, "put rc %d size %llu", rc, (unsigned long long)got_size);
    rec r = {0};
    run(c, NULL, "import os; os.path.getsize('io.bin')", &r, false);
    char want[64];
    snprintf(want, sizeof want, "%zu", size);
    CHECK(strcmp(r.result, want) == 0, "the code sees %s bytes", r.result);
    unsigned char *back = malloc(size);
    off = 0;
    bool eof = false;
    int chunks = 0;
    while (rc == 0 && !eof) {
        const void *d;
        size_t n;
        uint64_t total;
        rc = ctxd_file_get(c, NULL, "io.bin", off, 0, &d, &n, &total, &eof);
        if (rc == 0 && off + n <= size) {
            memcpy(back + off, d, n);
            off += n;
            chunks++;
        }
        CHECK(rc == 0 && total == size, "get rc %d", rc);
    }
    CHECK(off == size && memcmp(data, back, size) == 0, "file came back changed (%llu bytes)",
          (unsigned long long)off);
    CHECK(chunks == 3, "%d chunks", chunks);
    const char *code;
    rc = ctxd_file_get(c, NULL, "../io.bin", 0, 0, NULL, NULL, NULL, NULL);
    ctxd_last_error(c, &code, NULL);
    CHECK(rc == CTXD_EREFUSED && strcmp(code, "bad_path") == 0, "'..' gave %d %s", rc, code);
    free(data);
    free(back);
}

static void test_packages(ctxd_client *c)
{
    const char *pkgs[] = {"ctxdcio"};
    CHECK(ctxd_ctx_create(c, "one", NULL, NULL, 0, NULL) == 0, "create one");
    CHECK(ctxd_ctx_create(c, "two", NULL, NULL, 0, NULL) == 0, "create two");
    const ctxd_package *out;
    size_t n = 0;
    int rc = ctxd_pip_install(c, "one", pkgs, 1, &out, &n);
    CHECK(rc == 0 && n == 1 && strcmp(out[0].name, "ctxdcio") == 0 && !out[0].cached,
          "first install rc %d n %zu", rc, n);
    rec r = {0};
    run(c, "one", "import ctxdcio; ctxdcio.VALUE", &r, false);
    CHECK(strcmp(r.result, "7") == 0, "in one: %s %s", r.result, r.ename);
    rec r2 = {0};
    run(c, "two", "import ctxdcio", &r2, false);
    CHECK(strcmp(r2.ename, "ModuleNotFoundError") == 0, "in two: %s", r2.ename);
    rc = ctxd_pip_install(c, "two", pkgs, 1, &out, &n);
    CHECK(rc == 0 && n == 1 && out[0].cached, "second install rc %d cached %d", rc,
          n ? out[0].cached : -1);
    const char *missing[] = {"ctxdcio-nosuch"};
    const char *code, *msg;
    rc = ctxd_pip_install(c, "two", missing, 1, NULL, NULL);
    ctxd_last_error(c, &code, &msg);
    CHECK(rc == CTXD_EREFUSED && strcmp(code, "install") == 0 &&
              strstr(msg, "No matching distribution found for ctxdcio-nosuch"),
          "missing package: %d %s %s", rc, code, msg);
    ctxd_create_opts o = {.name = "three", .packages = pkgs, .npackages = 1};
    ctxd_ctx_info info;
    rc = ctxd_ctx_create_ex(c, &o, &info);
    CHECK(rc == 0 && strcmp(info.name, "three") == 0, "create_ex rc %d", rc);
    rec r3 = {0};
    run(c, "three", "import ctxdcio; ctxdcio.VALUE", &r3, false);
    CHECK(strcmp(r3.result, "7") == 0, "in three: %s %s", r3.result, r3.ename);
}

/* on_done of the run test_dropped_connection submits. */
static void on_done_rc(void *user, const ctxd_run_end *end)
{
    *(int *)user = end->rc;
}

/* The daemon's end of the connection goes away (SIGKILL) while a run is in
 * flight and the liveness check is off: the run still ends (CTXD_ELOST,
 * seen by the socket monitor) instead of waiting forever; a new daemon on
 * the endpoint then serves the same client. The wait is bounded. */
static ctxd_client *test_dropped_connection(ctxd_client *c, const char *bin)
{
    ctxd_set_liveness(c, 0);
    ctxd_exec_opts o = {.code = "import time\ntime.sleep(3600)", .timeout = 0};
    ctxd_callbacks cb = {.on_done = on_done_rc};
    int rc = 1;
    uint64_t id;
    CHECK(ctxd_submit(c, &o, &cb, &rc, &id) == 0, "submit: %s", ctxd_strerror(-1));
    ctxd_step(c, 200);
    kill(daemon_pid, SIGKILL);
    int st;
    waitpid(daemon_pid, &st, 0);
    daemon_pid = 0;
    double deadline = mono() + 60;
    while (rc == 1 && mono() < deadline)
        ctxd_step(c, 100);
    CHECK(rc == CTXD_ELOST, "run ended with %d after the connection dropped", rc);
    CHECK(ctxd_pending(c) == 0, "%zu runs still pending", ctxd_pending(c));
    ctxd_close(start_daemon(bin));
    rec r = {0};
    CHECK(run(c, NULL, "6 * 7", &r, false) == CTXD_OK && strcmp(r.result, "42") == 0,
          "the client goes on with the new daemon: %s", r.result);
    return c;
}

/* The same drop under a blocking ctxd_execute (its own wait loop, which
 * reads the monitor only when a wait saw it readable): a helper process
 * kills the daemon while the run sleeps; ctxd_execute returns CTXD_ELOST
 * instead of waiting forever (the test's own deadline is the helper's 60 s
 * SIGKILL of this test, never reached when it passes). */
static ctxd_client *test_dropped_connection_blocking(ctxd_client *c, const char *bin)
{
    ctxd_set_liveness(c, 0);
    pid_t victim = daemon_pid;
    pid_t killer = fork();
    if (killer == 0) {
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
        kill(victim, SIGKILL);
        sleep(60); /* the execute never returned: end the test */
        kill(getppid(), SIGKILL);
        _exit(0);
    }
    ctxd_exec_opts o = {.code = "import time\ntime.sleep(3600)", .timeout = 0};
    ctxd_outcome out;
    int rc = ctxd_execute(c, &o, NULL, NULL, &out);
    kill(killer, SIGKILL);
    waitpid(killer, NULL, 0);
    int st;
    waitpid(victim, &st, 0);
    daemon_pid = 0;
    CHECK(rc == CTXD_ELOST, "blocking execute ended with %d after the connection dropped", rc);
    ctxd_close(start_daemon(bin));
    rec r = {0};
    CHECK(run(c, NULL, "6 * 7", &r, false) == CTXD_OK && strcmp(r.result, "42") == 0,
          "the client goes on with the new daemon: %s", r.result);
    return c;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_client_io /path/to/ctxd\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    make_wheelhouse();
    ctxd_client *c = start_daemon(argv[1]);
    test_input(c);
    test_clear_output(c);
    test_files(c);
    test_packages(c);
    c = test_dropped_connection(c, argv[1]);
    c = test_dropped_connection_blocking(c, argv[1]);
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
