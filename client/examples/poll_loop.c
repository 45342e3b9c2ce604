/* poll_loop: libctxd's event-loop form. It submits one run to each of two
 * contexts ("default" and "poll-b", created if missing) without waiting,
 * then drives both from a single poll() loop: output of the two runs arrives
 * interleaved, each chunk on its own run's callback, and on_done reports
 * each end. The same loop can watch any other fds of a program.
 *
 *   ctxd --listen ipc:///tmp/ctxd.sock &
 *   ctxd_example_poll ipc:///tmp/ctxd.sock */
#include "ctxd.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>

/* What one run's callbacks need: a label for its lines. */
typedef struct job {
    const char *label;
    int status; /* -1 until done */
} job;

/* Output of either run, prefixed with the run's label. */
static void on_stream(void *user, const char *name, const void *data, size_t len)
{
    job *j = user;
    printf("[%s %s] %.*s", j->label, name, (int)len, (const char *)data);
    fflush(stdout);
}

static void on_error(void *user, const char *ename, const char *evalue,
                     const char *const *traceback, size_t n)
{
    job *j = user;
    (void)traceback;
    (void)n;
    printf("[%s] raised %s: %s\n", j->label, ename, evalue);
}

/* Called once per run, last. */
static void on_done(void *user, const ctxd_run_end *end)
{
    job *j = user;
    if (end->rc < 0) {
        printf("[%s] failed: %s: %s\n", j->label, end->code, end->message);
        j->status = 99;
        return;
    }
    printf("[%s] %s after %.2f s\n", j->label, ctxd_status_name(end->outcome->status),
           end->outcome->duration);
    j->status = (int)end->outcome->status;
}

int main(int argc, char **argv)
{
    char err[512];
    ctxd_client *c = ctxd_connect(argc > 1 ? argv[1] : NULL, err, sizeof err);
    if (!c) {
        fprintf(stderr, "cannot connect: %s\n", err);
        return 1;
    }
    /* A blocking control request may be mixed in at any time. */
    if (ctxd_ctx_create(c, "poll-b", NULL, NULL, 0, NULL) < 0) {
        const char *code;
        ctxd_last_error(c, &code, NULL);
        if (strcmp(code, "exists") != 0) {
            fprintf(stderr, "ctx.create: %s\n", code);
            return 1;
        }
    }
    static const char code[] = "import time\n"
                               "for i in range(3):\n"
                               "    print('tick', i, flush=True)\n"
                               "    time.sleep(0.2)\n";
    job a = {"default", -1}, b = {"poll-b", -1};
    ctxd_callbacks cb = {.on_stream = on_stream, .on_error = on_error, .on_done = on_done};
    ctxd_exec_opts oa = {.code = code, .timeout = -1};
    ctxd_exec_opts ob = {.ctx = "poll-b", .code = code, .timeout = -1};
    uint64_t ida, idb;
    if (ctxd_submit(c, &oa, &cb, &a, &ida) < 0 || ctxd_submit(c, &ob, &cb, &b, &idb) < 0) {
        const char *msg;
        ctxd_last_error(c, NULL, &msg);
        fprintf(stderr, "submit: %s\n", msg);
        return 1;
    }
    printf("submitted runs %llu and %llu\n", (unsigned long long)ida, (unsigned long long)idb);

    /* The loop: wait on the fd with the timeout libctxd asks for, then let
     * ctxd_step drain and dispatch. Other fds would join `fds` here. */
    struct pollfd fds[1] = {{.fd = ctxd_fd(c), .events = POLLIN}};
    while (ctxd_pending(c) > 0) {
        if (poll(fds, 1, ctxd_timeout_ms(c)) < 0)
            continue; /* EINTR: just look again */
        if (ctxd_step(c, 0) < 0) {
            const char *msg;
            ctxd_last_error(c, NULL, &msg);
            fprintf(stderr, "step: %s\n", msg);
            return 1;
        }
    }
    ctxd_close(c);
    return a.status == CTXD_OK && b.status == CTXD_OK ? 0 : 1;
}
