/* test_sup_run: the supervisor's run state machine (sup_run.c, with the
 * frames of sup_frame.c and the channel of sup_chan.c) against a fake
 * worker: the test plays the worker on the other end of a socketpair (a
 * child process stands in for its pid, to be signalled and to die), and
 * records what would go to the client through sup_run_set_client. It
 * drives submit -> start -> stream -> done, a second run queued behind a
 * first, an interrupt, a timeout and a worker's death in a run (unit_sup_run),
 * then one behaviour per test: frames out of state (a protocol breach),
 * input, a queue answered in order, an interrupt with runs queued, a client
 * gone mid-run, output past max_output. Each test runs in a process of its
 * own (unit_runner.c), so the table and these statics start empty. */
#include "sup_chan.h"
#include "sup_config.h"
#include "sup_ctx.h"
#include "sup_life.h"
#include "sup_log.h"
#include "sup_proc.h"
#include "sup_reap.h"
#include "sup_run.h"
#include "sup_wexit.h"

#include "mem.h"
#include "proto.h"
#include "unit_check.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What the run module sent to the client: the message types, in order. */
#define MAX_SENT 64
static char sent[MAX_SENT][32];
static char sent_status[MAX_SENT][32];  /* a done's status */
static uint8_t sent_route[MAX_SENT];    /* the peer's first route byte */
static size_t sent_len[MAX_SENT];       /* a stream's data length */
static uint64_t sent_dropped[MAX_SENT]; /* a done's dropped.stdout */
static size_t nsent;
static int client_answer; /* what record returns: 0 sent, 1 gone */

/* sup_run_client_fn: records the message's type (and a done's status). */
static int record(const sup_peer *peer, proto_buf *body)
{
    proto_doc doc;
    proto_error err;
    if (proto_decode(&doc, body->data, body->len, &err) < 0) {
        CHECK(!"a message to the client decodes");
        return 0;
    }
    const proto_val *t = proto_map_get(&doc.nodes[0], "t");
    const proto_val *st = proto_map_get(&doc.nodes[0], "status");
    if (nsent < MAX_SENT && t && t->kind == PROTO_STR) {
        snprintf(sent[nsent], sizeof sent[nsent], "%.*s", (int)t->n, t->as.s);
        sent_status[nsent][0] = '\0';
        if (st && st->kind == PROTO_STR)
            snprintf(sent_status[nsent], sizeof sent_status[nsent], "%.*s", (int)st->n, st->as.s);
        const proto_val *data = proto_map_get(&doc.nodes[0], "data");
        const proto_val *dropped = proto_map_get(&doc.nodes[0], "dropped");
        const proto_val *out = dropped ? proto_map_get(dropped, "stdout") : NULL;
        sent_route[nsent] = peer->route_len ? peer->route[0] : 0;
        sent_len[nsent] = data ? data->n : 0;
        sent_dropped[nsent] = out ? out->as.u : 0;
        nsent++;
    }
    proto_doc_free(&doc);
    proto_buf_free(body);
    return client_answer;
}

/* Whether the client got exactly these types since the last call. */
static bool got(const char *const *types, size_t n)
{
    bool ok = nsent == n;
    for (size_t i = 0; ok && i < n; i++)
        ok = strcmp(sent[i], types[i]) == 0;
    if (!ok) {
        fprintf(stderr, "client got:");
        for (size_t i = 0; i < nsent; i++)
            fprintf(stderr, " %s", sent[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}

static int worker_end;  /* the test's end of the channel */
static int sigint_pipe; /* the stand-in worker writes a byte per SIGINT */

/* Writes a frame {t: type, run_id, ...} as the worker would. */
static void put_frame(const char *type, uint64_t run_id, const char *status, const char *stream)
{
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_put_map(&b, 1 + (run_id ? 1 : 0) + (status ? 1 : 0) + (stream ? 2 : 0));
    proto_put_str(&b, "t");
    proto_put_str(&b, type);
    if (run_id) {
        proto_put_str(&b, "run_id");
        proto_put_uint(&b, run_id);
    }
    if (status) {
        proto_put_str(&b, "status");
        proto_put_str(&b, status);
    }
    if (stream) {
        proto_put_str(&b, "name");
        proto_put_str(&b, stream);
        proto_put_str(&b, "data");
        proto_put_bin(&b, "hello\n", 6);
    }
    proto_frame_end(&b, start);
    CHECK(write(worker_end, b.data, b.len) == (ssize_t)b.len);
    proto_buf_free(&b);
}

/* Reads the next frame the supervisor wrote to the worker: its type into
 * type, its run_id returned (0 when none). */
static uint64_t take_frame(char *type, size_t n)
{
    uint8_t buf[65536];
    ssize_t len = read(worker_end, buf, sizeof buf);
    type[0] = '\0';
    if (len <= 0) {
        CHECK(!"the supervisor wrote a frame");
        return 0;
    }
    const uint8_t *body;
    size_t body_len, used;
    if (proto_frame_next(buf, (size_t)len, PROTO_MAX_FRAME, &body, &body_len, &used) != 1 ||
        used != (size_t)len) {
        CHECK(!"one whole frame");
        return 0;
    }
    proto_doc doc;
    proto_error err;
    if (proto_decode(&doc, body, body_len, &err) < 0) {
        CHECK(!"the frame decodes");
        return 0;
    }
    const proto_val *t = proto_map_get(&doc.nodes[0], "t");
    const proto_val *id = proto_map_get(&doc.nodes[0], "run_id");
    snprintf(type, n, "%.*s", t ? (int)t->n : 0, t ? t->as.s : "");
    uint64_t run_id = id ? id->as.u : 0;
    proto_doc_free(&doc);
    return run_id;
}

/* A stand-in for the worker's process: a group of its own, a byte on the
 * pipe for each SIGINT, otherwise asleep until killed. */
static void on_sigint(int sig)
{
    (void)sig;
    char x = 'i';
    (void)!write(sigint_pipe, &x, 1);
}

static int sigints_seen(int fd, int want);

static pid_t start_child(int *sigints)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
        exit(2);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* not outliving a crashed test */
        setpgid(0, 0);
        sigint_pipe = p[1];
        signal(SIGINT, on_sigint);
        on_sigint(0); /* ready: its handler is in place */
        for (;;)
            pause();
    }
    setpgid(pid, pid); /* either side may win the race */
    close(p[1]);
    *sigints = p[0];
    if (sigints_seen(p[0], 1) != 1) /* a SIGINT before it would kill it */
        exit(2);
    return pid;
}

/* How many SIGINTs the child reported within a second. */
static int sigints_seen(int fd, int want)
{
    int n = 0;
    for (int i = 0; i < 100 && n < want; i++) {
        char x;
        while (read(fd, &x, 1) == 1)
            n++;
        if (n < want) {
            struct timespec ms10 = {0, 10000000};
            nanosleep(&ms10, NULL);
        }
    }
    return n;
}

/* A context as sup_life_create leaves it, with the test's child as its
 * worker and a socketpair as its channel, ready. */
static sup_ctx *make_ctx(pid_t pid)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        exit(2);
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    worker_end = sv[1];
    sup_ctx *c = mem_calloc(1, sizeof *c);
    c->name = mem_strdup("t");
    c->cwd = mem_strdup("/");
    c->fd = sv[0];
    c->pid = pid;
    c->pidfd = sup_proc_open(pid);
    c->out_rd[0] = c->out_rd[1] = c->out_park = c->chan.outmem_fd = -1;
    c->run.cpu0 = -1;
    c->incarnation = 1;
    c->creating = true;
    sup_ctx_link_in(c);
    put_frame("ready", 0, NULL, NULL);
    sup_chan_read(c);
    CHECK(c->ready);
    return c;
}

static sup_run *new_run(double timeout)
{
    sup_run *r = sup_run_new(NULL, NULL);
    r->code = mem_strdup("x = 1");
    r->code_len = 5;
    r->timeout = timeout;
    r->peer.route_len = 1; /* a client, so its messages go out */
    return r;
}

int unit_sup_run(void)
{
    sup_life_init();
    sup_run_set_client(record);
    int sigints;
    pid_t pid = start_child(&sigints);
    sup_ctx *c = make_ctx(pid);
    char type[32];

    /* submit -> run frame -> start -> stream -> done */
    sup_run_submit(c, new_run(0));
    uint64_t id = take_frame(type, sizeof type);
    CHECK(strcmp(type, "run") == 0 && id != 0);
    CHECK(c->running && c->run.queued == 0);
    put_frame("start", id, NULL, NULL);
    put_frame("stream", 0, NULL, "stdout");
    put_frame("done", id, "ok", NULL);
    sup_chan_read(c);
    CHECK(got((const char *const[]){"accepted", "stream", "done"}, 3));
    CHECK(strcmp(sent_status[2], "ok") == 0);
    CHECK(!c->running && c->execution_count == 1);
    nsent = 0;

    /* a second run queued behind the first, sent at the first's done */
    sup_run_submit(c, new_run(0));
    sup_run_submit(c, new_run(0));
    CHECK(c->run.queued == 1);
    uint64_t id1 = take_frame(type, sizeof type);
    put_frame("start", id1, NULL, NULL);
    put_frame("done", id1, "ok", NULL);
    sup_chan_read(c);
    uint64_t id2 = take_frame(type, sizeof type);
    CHECK(strcmp(type, "run") == 0 && id2 != 0 && id2 != id1);
    CHECK(c->running && c->run.queued == 0);
    put_frame("start", id2, NULL, NULL);
    put_frame("done", id2, "ok", NULL);
    sup_chan_read(c);
    CHECK(got((const char *const[]){"accepted", "done", "accepted", "done"}, 4));
    nsent = 0;

    /* interrupt: SIGINT once the worker said it started */
    sup_run_submit(c, new_run(0));
    id = take_frame(type, sizeof type);
    CHECK(sup_run_interrupt(c));
    CHECK(sigints_seen(sigints, 1) == 0); /* not before its start */
    put_frame("start", id, NULL, NULL);
    sup_chan_read(c);
    CHECK(sigints_seen(sigints, 1) == 1);
    put_frame("done", id, "interrupted", NULL);
    sup_chan_read(c);
    CHECK(got((const char *const[]){"accepted", "done"}, 2));
    CHECK(strcmp(sent_status[1], "interrupted") == 0);
    nsent = 0;

    /* timeout: the timers interrupt it past its deadline; its
     * `interrupted` reads as timeout */
    sup_run_submit(c, new_run(0.05));
    id = take_frame(type, sizeof type);
    put_frame("start", id, NULL, NULL);
    sup_chan_read(c);
    struct timespec ms100 = {0, 100000000};
    nanosleep(&ms100, NULL);
    sup_reap_tick(sup_now());
    CHECK(c->run.timed_out && c->kill_at > 0);
    CHECK(sigints_seen(sigints, 1) == 1);
    put_frame("done", id, "interrupted", NULL);
    sup_chan_read(c);
    CHECK(got((const char *const[]){"accepted", "done"}, 2));
    CHECK(strcmp(sent_status[1], "timeout") == 0);
    CHECK(c->kill_at == 0); /* it stopped within the grace period */
    nsent = 0;

    /* the worker dies in a run: it ends `died`, state lost; the next run
     * is queued behind a new worker (not started here) */
    sup_run_submit(c, new_run(0));
    id = take_frame(type, sizeof type);
    put_frame("start", id, NULL, NULL);
    sup_chan_read(c);
    kill(pid, SIGKILL);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    sup_wexit_on_exit(pid, status);
    CHECK(got((const char *const[]){"accepted", "done"}, 2));
    CHECK(strcmp(sent_status[1], "died") == 0);
    CHECK(!c->running && c->pid == 0 && c->fd < 0);
    CHECK(c->last_death && strstr(c->last_death, "signal 9"));

    close(worker_end);
    close(sigints);
    return failures;
}

/* ---- one behaviour per test ---- */

/* Writes the frame b holds (a map, begun by frame_begin) as the worker. */
static void put_built(proto_buf *b, size_t start)
{
    proto_frame_end(b, start);
    CHECK(write(worker_end, b->data, b->len) == (ssize_t)b->len);
    proto_buf_free(b);
}

/* Reads the supervisor's next frame to the worker: its type, and the
 * unsigned value of key (0 when none). */
static uint64_t take_key(char *type, size_t n, const char *key)
{
    uint8_t buf[65536];
    ssize_t len = read(worker_end, buf, sizeof buf);
    type[0] = '\0';
    const uint8_t *body;
    size_t body_len, used;
    proto_doc doc;
    proto_error err;
    if (len <= 0 ||
        proto_frame_next(buf, (size_t)len, PROTO_MAX_FRAME, &body, &body_len, &used) != 1 ||
        proto_decode(&doc, body, body_len, &err) < 0) {
        CHECK(!"the supervisor wrote a frame that decodes");
        return 0;
    }
    const proto_val *t = proto_map_get(&doc.nodes[0], "t");
    const proto_val *v = proto_map_get(&doc.nodes[0], key);
    snprintf(type, n, "%.*s", t ? (int)t->n : 0, t ? t->as.s : "");
    uint64_t u = v && v->kind == PROTO_UINT ? v->as.u : 0;
    proto_doc_free(&doc);
    return u;
}

/* A test's context: a stand-in worker and its ready channel. */
static sup_ctx *setup(pid_t *pid, int *sigints)
{
    sup_life_init();
    sup_run_set_client(record);
    *pid = start_child(sigints);
    return make_ctx(*pid);
}

/* Ends the stand-in (whatever the supervisor did to it) and the channel. */
static void teardown(pid_t pid, int sigints)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(worker_end);
    close(sigints);
}

/* Whether the worker was judged broken for why (a part of the reason),
 * its process being killed. */
static bool broken_for(const sup_ctx *c, const char *why)
{
    bool ok = c->chan.broken && c->kill_reason && strstr(c->kill_reason, "protocol") &&
              strstr(c->kill_reason, why);
    if (!ok)
        fprintf(stderr, "kill_reason: %s\n", c->kill_reason ? c->kill_reason : "(none)");
    return ok;
}

/* A `done` before the run's `start` breaks the protocol. */
int unit_sup_run_breach_done_before_start(void)
{
    pid_t pid;
    int sigints;
    sup_ctx *c = setup(&pid, &sigints);
    char type[32];
    sup_run_submit(c, new_run(0));
    uint64_t id = take_frame(type, sizeof type);
    put_frame("done", id, "ok", NULL);
    sup_chan_read(c);
    CHECK(broken_for(c, "`done` before `start`"));
    CHECK(c->running && !c->run.started); /* the run is not taken as begun */
    teardown(pid, sigints);
    return failures;
}

/* A `start` carrying another run's id breaks the protocol. */
int unit_sup_run_breach_wrong_run_id(void)
{
    pid_t pid;
    int sigints;
    sup_ctx *c = setup(&pid, &sigints);
    char type[32];
    sup_run_submit(c, new_run(0));
    uint64_t id = take_frame(type, sizeof type);
    put_frame("start", id + 1, NULL, NULL);
    sup_chan_read(c);
    CHECK(broken_for(c, "run id that is not the running one's"));
    CHECK(!c->run.started);
    teardown(pid, sigints);
    return failures;
}

/* A stream frame while no run is under way breaks the protocol. */
int unit_sup_run_breach_stream_no_run(void)
{
    pid_t pid;
    int sigints;
    sup_ctx *c = setup(&pid, &sigints);
    put_frame("stream", 0, NULL, "stdout");
    sup_chan_read(c);
    CHECK(broken_for(c, "`stream` while no run is under way"));
    CHECK(nsent == 0); /* nothing went to a client */
    teardown(pid, sigints);
    return failures;
}

/* input(): the worker's input_request goes to the client as
 * input.request, and the client's answer back as input_reply carrying the
 * worker's number n; a second answer finds nothing waiting. */
int unit_sup_run_input(void)
{
    pid_t pid;
    int sigints;
    sup_ctx *c = setup(&pid, &sigints);
    char type[32];
    sup_run *r = new_run(0);
    r->allow_stdin = true;
    sup_run_submit(c, r);
    uint64_t id = take_frame(type, sizeof type);
    put_frame("start", id, NULL, NULL);
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_put_map(&b, 4);
    proto_put_str(&b, "t");
    proto_put_str(&b, "input_request");
    proto_put_str(&b, "prompt");
    proto_put_str(&b, "name? ");
    proto_put_str(&b, "password");
    proto_put_bool(&b, false);
    proto_put_str(&b, "n");
    proto_put_uint(&b, 7);
    put_built(&b, start);
    sup_chan_read(c);
    CHECK(got((const char *const[]){"accepted", "input.request"}, 2));
    CHECK(c->run.input_waiting && !c->chan.broken);
    CHECK(sup_run_input_reply(c, "abc", 3, false));
    CHECK(take_key(type, sizeof type, "n") == 7 && strcmp(type, "input_reply") == 0);
    CHECK(!sup_run_input_reply(c, "again", 5, false)); /* nothing waits now */
    put_frame("done", id, "ok", NULL);
    sup_chan_read(c);
    CHECK(!c->running && c->execution_count == 1);
    teardown(pid, sigints);
    return failures;
}

/* A run ends in each client's hands (the route byte says whose). */
static sup_run *run_for(uint8_t client)
{
    sup_run *r = new_run(0);
    r->peer.route[0] = client;
    return r;
}

/* Three runs queued at once are sent to the worker one at a time, in the
 * order submitted, each at the previous one's done, and each client gets
 * its own accepted and done. */
int unit_sup_run_queue_order(void)
{
    pid_t pid;
    int sigints;
    sup_ctx *c = setup(&pid, &sigints);
    char type[32];
    static const char *const status[] = {"ok", "error", "ok"};
    sup_run_submit(c, run_for(1));
    sup_run_submit(c, run_for(2));
    sup_run_submit(c, run_for(3));
    CHECK(c->run.queued == 2);
    uint64_t last = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t id = take_frame(type, sizeof type);
        CHECK(strcmp(type, "run") == 0 && id != 0 && id != last);
        CHECK(c->running && c->running->peer.route[0] == i + 1);
        CHECK(c->run.queued == (uint32_t)(2 - i));
        last = id;
        put_frame("start", id, NULL, NULL);
        put_frame("done", id, status[i], NULL);
        sup_chan_read(c);
    }
    CHECK(
        got((const char *const[]){"accepted", "done", "accepted", "done", "accepted", "done"}, 6));
    for (int i = 0; i < 3; i++)
        CHECK(sent_route[2 * i] == i + 1 && sent_route[2 * i + 1] == i + 1 &&
              strcmp(sent_status[2 * i + 1], status[i]) == 0);
    CHECK(!c->running && c->execution_count == 3);
    teardown(pid, sigints);
    return failures;
}

/* With a run queued behind the running one, an interrupt stops only the
 * running run (its SIGINT at its start); the queued one then runs, and
 * aborting the queue ends a run not yet started `aborted` with the
 * cause, without a word to the worker. */
int unit_sup_run_interrupt_with_queue(void)
{
    pid_t pid;
    int sigints;
    sup_ctx *c = setup(&pid, &sigints);
    char type[32];
    sup_run_submit(c, run_for(1));
    sup_run_submit(c, run_for(2));
    uint64_t id1 = take_frame(type, sizeof type);
    CHECK(sup_run_interrupt(c));
    put_frame("start", id1, NULL, NULL);
    sup_chan_read(c);
    CHECK(sigints_seen(sigints, 1) == 1);
    CHECK(c->run.queued == 1); /* the queued run is untouched */
    put_frame("done", id1, "interrupted", NULL);
    sup_chan_read(c);
    uint64_t id2 = take_frame(type, sizeof type);
    CHECK(strcmp(type, "run") == 0 && id2 != id1 && c->running->peer.route[0] == 2);
    sup_run_submit(c, run_for(3)); /* queued behind run 2 */
    CHECK(c->run.queued == 1);
    sup_run_abort_queue(c, "the test aborted it");
    CHECK(c->run.queued == 0 && c->run.queue == NULL);
    CHECK(c->running && c->running->peer.route[0] == 2); /* still running */
    put_frame("start", id2, NULL, NULL);
    put_frame("done", id2, "ok", NULL);
    sup_chan_read(c);
    CHECK(got((const char *const[]){"accepted", "done", "done", "accepted", "done"}, 5));
    CHECK(strcmp(sent_status[1], "interrupted") == 0);
    CHECK(sent_route[2] == 3 && strcmp(sent_status[2], "aborted") == 0);
    CHECK(sent_route[4] == 2 && strcmp(sent_status[4], "ok") == 0);
    CHECK(!c->running && sigints_seen(sigints, 1) == 0); /* run 2 was not signalled */
    teardown(pid, sigints);
    return failures;
}

/* The client gone mid-run (its sends report 1): the run still goes to its
 * done, nothing is held for it, the worker is not judged broken, and the
 * next run starts; with --on-disconnect interrupt the run is interrupted. */
int unit_sup_run_client_gone(void)
{
    pid_t pid;
    int sigints;
    sup_ctx *c = setup(&pid, &sigints);
    char type[32];
    sup_run_submit(c, new_run(0));
    uint64_t id = take_frame(type, sizeof type);
    put_frame("start", id, NULL, NULL);
    sup_chan_read(c);
    client_answer = 1; /* gone from here on */
    put_frame("stream", 0, NULL, "stdout");
    put_frame("done", id, "ok", NULL);
    sup_chan_read(c);
    CHECK(!c->running && c->execution_count == 1 && !c->chan.broken && !c->kill_reason);
    CHECK(c->pending.n == 0); /* nothing held for a client that is gone */
    client_answer = 0;
    nsent = 0;
    sup_run_submit(c, new_run(0));
    id = take_frame(type, sizeof type);
    CHECK(strcmp(type, "run") == 0);
    put_frame("start", id, NULL, NULL);
    put_frame("done", id, "ok", NULL);
    sup_chan_read(c);
    CHECK(got((const char *const[]){"accepted", "done"}, 2));

    /* --on-disconnect interrupt: the first send that finds the client gone
     * interrupts the run (once), which then ends as the worker says */
    sup_cfg.interrupt_on_disconnect = true;
    sup_run_submit(c, new_run(0));
    id = take_frame(type, sizeof type);
    put_frame("start", id, NULL, NULL);
    sup_chan_read(c);
    client_answer = 1;
    put_frame("stream", 0, NULL, "stdout");
    put_frame("stream", 0, NULL, "stdout");
    sup_chan_read(c);
    CHECK(c->running && c->running->client_gone);
    CHECK(sigints_seen(sigints, 2) == 1);
    put_frame("done", id, "interrupted", NULL);
    sup_chan_read(c);
    CHECK(!c->running && c->pending.n == 0 && !c->kill_reason);
    teardown(pid, sigints);
    return failures;
}

/* Output past max_output: what fits goes out, the rest is dropped with one
 * note on stderr and counted in done.dropped. */
int unit_sup_run_max_output(void)
{
    pid_t pid;
    int sigints;
    sup_ctx *c = setup(&pid, &sigints);
    char type[32];
    sup_cfg.max_output = 10;
    sup_run_submit(c, new_run(0));
    uint64_t id = take_frame(type, sizeof type);
    put_frame("start", id, NULL, NULL);
    for (int i = 0; i < 3; i++)
        put_frame("stream", 0, NULL, "stdout"); /* 6 bytes each */
    put_frame("done", id, "ok", NULL);
    sup_chan_read(c);
    CHECK(got((const char *const[]){"accepted", "stream", "stream", "stream", "done"}, 5));
    CHECK(sent_len[1] == 6 && sent_len[2] == 4); /* then the note */
    CHECK(sent_dropped[4] == 8);
    CHECK(c->execution_count == 1 && !c->chan.broken);
    teardown(pid, sigints);
    return failures;
}
