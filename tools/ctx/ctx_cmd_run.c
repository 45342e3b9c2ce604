/* ctx run: executes code in a context and mirrors the run on the terminal
 * (output as it arrives, results, tracebacks, Ctrl-C to interrupt) or as
 * one JSON line per event with --json. */
#include "ctx.h"
#include "ctx_media.h"
#include "mem.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bytes of a stream held back because they end inside a UTF-8 character. */
typedef struct carry {
    unsigned char b[4];
    size_t n;
} carry;

typedef struct run_state {
    const char *ctx;
    int sigints_seen;
    bool accepted;
    bool interrupt_asked;
    bool error_shown;
    bool json, base64;
    jw w;
    carry out, err;
} run_state;

/* A run on a fresh worker after a death: say so, the globals are gone. */
static void run_accepted(void *user, uint64_t count, uint64_t incarnation,
                         const char *previous_death)
{
    run_state *rs = user;
    rs->accepted = true;
    if (rs->json) {
        jw_obj(&rs->w);
        jw_kstr(&rs->w, "t", "accepted");
        jw_kstr(&rs->w, "ctx", rs->ctx);
        jw_kuint(&rs->w, "execution_count", count);
        jw_kuint(&rs->w, "incarnation", incarnation);
        if (previous_death)
            jw_kstr(&rs->w, "previous_death", previous_death);
        jw_obj_end(&rs->w);
        jw_line(&rs->w);
        return;
    }
    if (previous_death)
        fprintf(stderr,
                "ctx: note: the previous worker of context '%s' died (%s); this run starts "
                "incarnation %llu with empty globals\n",
                rs->ctx, previous_death, (unsigned long long)incarnation);
}

/* One stream event as JSON text: carried bytes first, and an incomplete
 * character at the end held back for the next chunk (last: flush it, as
 * U+FFFD). No event when everything was held back. */
static void json_stream(run_state *rs, const char *name, const void *data, size_t len, bool last)
{
    carry *cy = strcmp(name, "stderr") == 0 ? &rs->err : &rs->out;
    jw *w = &rs->w;
    if (rs->base64) {
        jw_obj(w);
        jw_kstr(w, "t", "stream");
        jw_kstr(w, "name", name);
        jw_key(w, "data_b64");
        jw_base64(w, data, len);
        jw_obj_end(w);
        jw_line(w);
        return;
    }
    unsigned char *buf = mem_alloc(cy->n + len + 1);
    memcpy(buf, cy->b, cy->n);
    memcpy(buf + cy->n, data, len);
    size_t n = cy->n + len, keep = 0;
    cy->n = 0;
    /* Is the tail the valid beginning of a character? Hold it back. */
    for (size_t back = 1; !last && back <= 3 && back <= n; back++) {
        uint32_t cp;
        if (buf[n - back] >= 0xC0 && utf8_next(buf + n - back, back, &cp) == 0) {
            keep = back;
            break;
        }
        if ((buf[n - back] & 0xC0) != 0x80)
            break;
    }
    memcpy(cy->b, buf + n - keep, keep);
    cy->n = keep;
    if (n > keep) {
        jw_obj(w);
        jw_kstr(w, "t", "stream");
        jw_kstr(w, "name", name);
        jw_key(w, "data");
        jw_strn(w, (const char *)buf, n - keep);
        jw_obj_end(w);
        jw_line(w);
    }
    free(buf);
}

/* Before any other event: bytes still held back go out (as U+FFFD), so
 * events stay in the order they came. */
static void json_flush_carry(run_state *rs)
{
    if (rs->out.n)
        json_stream(rs, "stdout", "", 0, true);
    if (rs->err.n)
        json_stream(rs, "stderr", "", 0, true);
}

/* Output chunks are written as they come, so long runs show progress. */
static void run_stream(void *user, const char *name, const void *data, size_t len)
{
    run_state *rs = user;
    if (rs->json) {
        json_stream(rs, name, data, len, false);
        return;
    }
    FILE *f = strcmp(name, "stderr") == 0 ? stderr : stdout;
    fwrite(data, 1, len, f);
    fflush(f);
}

/* The trailing expression's value, as a notebook shows it. */
static void run_result(void *user, const char *const *keys, const char *const *values, size_t n,
                       uint64_t count)
{
    run_state *rs = user;
    if (rs->json) {
        json_flush_carry(rs);
        jw_obj(&rs->w);
        jw_kstr(&rs->w, "t", "result");
        jw_kuint(&rs->w, "execution_count", count);
        jw_key(&rs->w, "data");
        jw_obj(&rs->w);
        for (size_t i = 0; i < n; i++)
            jw_kstr(&rs->w, keys[i], values[i]);
        jw_obj_end(&rs->w);
        jw_obj_end(&rs->w);
        jw_line(&rs->w);
        return;
    }
    ctx_media_print(stdout, keys, values, n);
}

/* display() outputs and matplotlib figures: as JSON lines with --json,
 * else images saved to files (their paths printed), else text/plain. */
static void run_display(void *user, const char *const *keys, const char *const *values, size_t n,
                        const char *display_id, bool update)
{
    run_state *rs = user;
    if (rs->json) {
        json_flush_carry(rs);
        jw_obj(&rs->w);
        jw_kstr(&rs->w, "t", "display");
        jw_key(&rs->w, "data");
        jw_obj(&rs->w);
        for (size_t i = 0; i < n; i++)
            jw_kstr(&rs->w, keys[i], values[i]);
        jw_obj_end(&rs->w);
        if (display_id)
            jw_kstr(&rs->w, "display_id", display_id);
        if (update)
            jw_kbool(&rs->w, "update", true);
        jw_obj_end(&rs->w);
        jw_line(&rs->w);
        return;
    }
    ctx_media_print(stdout, keys, values, n);
}

/* The traceback goes to stderr, one line per entry. */
static void run_error(void *user, const char *ename, const char *evalue,
                      const char *const *traceback, size_t n)
{
    run_state *rs = user;
    rs->error_shown = true;
    if (rs->json) {
        json_flush_carry(rs);
        jw_obj(&rs->w);
        jw_kstr(&rs->w, "t", "error");
        jw_kstr(&rs->w, "ename", ename);
        jw_kstr(&rs->w, "evalue", evalue);
        jw_key(&rs->w, "traceback");
        jw_arr(&rs->w);
        for (size_t i = 0; i < n; i++)
            jw_str(&rs->w, traceback[i]);
        jw_arr_end(&rs->w);
        jw_obj_end(&rs->w);
        jw_line(&rs->w);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(traceback[i]);
        fputs(traceback[i], stderr);
        if (len == 0 || traceback[i][len - 1] != '\n')
            fputc('\n', stderr);
    }
    if (n == 0)
        fprintf(stderr, "%s: %s\n", ename, evalue);
    fflush(stderr);
}

/* First Ctrl-C interrupts the run (KeyboardInterrupt in the worker); the
 * next one stops waiting and leaves the run to the daemon. */
static int run_wait(void *user)
{
    run_state *rs = user;
    int seen = ctx_sigints;
    if (seen == rs->sigints_seen)
        return CTXD_WAIT_CONTINUE;
    rs->sigints_seen = seen;
    if (rs->interrupt_asked)
        return CTXD_WAIT_DETACH;
    rs->interrupt_asked = true;
    if (!rs->accepted && !rs->json)
        fprintf(stderr, "\nctx: the run is queued; it will be interrupted when it starts "
                        "(Ctrl-C again to stop waiting)\n");
    return CTXD_WAIT_INTERRUPT;
}

/* Reads a whole stream (the code of -f FILE or -) into a NUL-terminated
 * buffer. */
static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = mem_alloc(cap);
    for (;;) {
        if (cap - n < 2) {
            cap *= 2;
            buf = mem_realloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Loads the code from CODE, -f FILE or - (stdin). */
static int load_code(const ctx_cmd *cmd, const char *file, const char *arg, char **code,
                     size_t *len)
{
    if (file && arg)
        return ctx_usage(cmd, "give the code either as an argument or with -f, not both");
    if (!file && !arg)
        return ctx_usage(cmd, "no code given (CODE, -f FILE or - for stdin)");
    if (arg && strcmp(arg, "-") != 0) {
        *code = mem_strdup(arg);
        *len = strlen(arg);
        return CONTINUE;
    }
    const char *path = file ? file : "-";
    bool std = strcmp(path, "-") == 0;
    FILE *f = std ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "ctx: cannot open %s: %s\n", path, strerror(errno));
        return EX_USAGE;
    }
    *code = read_all(f, len);
    int e = errno;
    if (!std)
        fclose(f);
    if (!*code) {
        fprintf(stderr, "ctx: cannot read %s: %s\n", std ? "stdin" : path, strerror(e));
        return EX_USAGE;
    }
    return CONTINUE;
}

/* The exit status of each done status (the table in ctx --help). */
static const int status_exit[] = {
    [CTXD_OK] = EX_OK,           [CTXD_ERROR] = EX_ERROR, [CTXD_INTERRUPTED] = EX_INTERRUPTED,
    [CTXD_TIMEOUT] = EX_TIMEOUT, [CTXD_DIED] = EX_DIED,   [CTXD_ABORTED] = EX_ABORTED,
    [CTXD_SHUTDOWN] = EX_ABORTED};

/* Reports how a run ended and maps it to an exit status. */
static int run_outcome(run_state *rs, const ctxd_outcome *out)
{
    static const char *const what_of[] = {[CTXD_OK] = NULL,
                                          [CTXD_ERROR] = NULL,
                                          [CTXD_INTERRUPTED] = "interrupted",
                                          [CTXD_TIMEOUT] = "timed out",
                                          [CTXD_DIED] = "the worker died",
                                          [CTXD_ABORTED] = "aborted",
                                          [CTXD_SHUTDOWN] = "the daemon shut down"};
    if ((size_t)out->status >= sizeof status_exit / sizeof status_exit[0])
        return EX_UNREACHABLE;
    if (rs->json) {
        json_flush_carry(rs);
        jw *w = &rs->w;
        jw_obj(w);
        jw_kstr(w, "t", "done");
        jw_kstr(w, "status", ctxd_status_name(out->status));
        jw_kuint(w, "execution_count", out->execution_count);
        jw_kuint(w, "incarnation", out->incarnation);
        jw_knum(w, "duration", out->duration);
        jw_knum(w, "cpu_time", out->cpu_time);
        jw_kbool(w, "truncated", out->truncated);
        jw_kbool(w, "state_lost", out->state_lost);
        if (out->exit_code >= 0)
            jw_kuint(w, "exit_code", (uint64_t)out->exit_code);
        if (out->truncated) {
            jw_key(w, "dropped");
            jw_obj(w);
            jw_kuint(w, "stdout", out->dropped_stdout);
            jw_kuint(w, "stderr", out->dropped_stderr);
            jw_obj_end(w);
        }
        if (out->cause)
            jw_kstr(w, "cause", out->cause);
        jw_obj_end(w);
        jw_line(w);
        return out->exit_code >= 0 ? out->exit_code : status_exit[out->status];
    }
    if (out->exit_code >= 0) /* sys.exit(): the script's own exit status */
        return out->exit_code;
    const char *what = what_of[out->status];
    if (rs->error_shown && out->status == CTXD_INTERRUPTED)
        what = NULL; /* the KeyboardInterrupt traceback says it */
    if (out->status == CTXD_ERROR && !rs->error_shown)
        what = "the code raised";
    if (what)
        fprintf(stderr, "ctx: %s%s%s\n", what, out->cause ? ": " : "",
                out->cause ? out->cause : "");
    if (out->state_lost)
        fprintf(stderr, "ctx: state lost: the globals of context '%s' are gone\n", rs->ctx);
    return status_exit[out->status];
}

/* getopt stopped at -f FILE: what follows is the script's argv. */
#define SCRIPT_ARGS (-1000)

/* FILE as python3 makes __file__ of it: absolute by prefixing the current
 * directory, not normalised. */
static char *script_path(const char *file)
{
    char cwd[4096];
    if (file[0] == '/' || !getcwd(cwd, sizeof cwd))
        return mem_strdup(file);
    char *p = mem_alloc(strlen(cwd) + strlen(file) + 2);
    sprintf(p, "%s/%s", cwd, file);
    return p;
}

/* ctx run: execute code and mirror the run on the terminal (or as JSON). */
int ctx_cmd_run(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {{"ctx", required_argument, NULL, 'c'},
                                             {"timeout", required_argument, NULL, 't'},
                                             {"file", required_argument, NULL, 'f'},
                                             {"env", required_argument, NULL, 'e'},
                                             {"silent", no_argument, NULL, 'S'},
                                             {"stop-on-error", no_argument, NULL, 'X'},
                                             {"base64", no_argument, NULL, 'B'},
                                             CTX_COMMON_LONGOPTS,
                                             {0}};
    ctxd_exec_opts opts = {.timeout = -1};
    ctx_env_list env = {0};
    const char *file = NULL;
    bool base64 = false;
    int opt, r = CONTINUE;
    while (r == CONTINUE && (opt = getopt_long(argc, argv, ":c:t:f:e:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            opts.ctx = optarg;
            break;
        case 't':
            r = ctx_parse_seconds(cmd, optarg, &opts.timeout);
            break;
        case 'f':
            file = optarg;
            r = SCRIPT_ARGS; /* the rest of the command line is the script's */
            break;
        case 'e':
            r = ctx_env_add(&env, cmd, optarg);
            break;
        case 'S':
            opts.silent = true;
            break;
        case 'X':
            opts.stop_on_error = true;
            break;
        case 'B':
            base64 = true;
            break;
        default:
            r = ctx_common_opt(cli, cmd, opt, argv);
        }
    }
    char *script = NULL; /* -f FILE: as python3 names it in __file__ */
    const char **sargv = NULL;
    if (r == SCRIPT_ARGS) {
        r = CONTINUE;
        sargv = mem_calloc((size_t)(argc - optind) + 1, sizeof *sargv);
        sargv[0] = file;
        for (int i = optind; i < argc; i++)
            sargv[i - optind + 1] = argv[i];
        opts.argv = sargv;
        opts.argc = (size_t)(argc - optind) + 1;
        if (strcmp(file, "-") != 0)
            opts.file = script = script_path(file);
    } else if (r == CONTINUE) {
        r = ctx_positionals(cmd, argc, argv, 0, 1);
    }
    char *code = NULL;
    size_t len = 0;
    if (r == CONTINUE)
        r = load_code(cmd, file, !file && optind < argc ? argv[optind] : NULL, &code, &len);
    if (r == CONTINUE)
        r = ctx_need_client(cli);
    if (r == CONTINUE)
        r = ctx_ensure_context(cli, opts.ctx);
    if (r == CONTINUE) {
        opts.code = code;
        opts.code_len = len;
        opts.env = env.kv;
        opts.nenv = env.n;
        run_state rs = {
            .ctx = opts.ctx ? opts.ctx : "default", .json = cli->json, .base64 = base64};
        jw_init(&rs.w, stdout);
        ctxd_callbacks cb = {.on_accepted = run_accepted,
                             .on_stream = run_stream,
                             .on_result = run_result,
                             .on_error = run_error,
                             .on_wait = run_wait,
                             .on_display = run_display};
        struct sigaction sa = {.sa_handler = ctx_on_sigint}, old;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old); /* no SA_RESTART: the wait wakes at once */
        rs.sigints_seen = ctx_sigints;
        ctxd_outcome out;
        int rc = ctxd_execute(cli->client, &opts, &cb, &rs, &out);
        sigaction(SIGINT, &old, NULL);
        fflush(stdout);
        r = rc < 0 ? ctx_report(cli, rc) : run_outcome(&rs, &out);
    }
    free(code);
    free(script);
    free(sargv);
    free(env.kv);
    return r;
}
