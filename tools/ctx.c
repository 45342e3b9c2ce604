/* ctx: the command-line client of the ctxd daemon, built on libctxd.
 * Subcommands are dispatched from ctx_commands[]; each parses its own
 * options with getopt_long and returns the process exit status. */
#include "ctxd.h"
#include "mem.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

/* Exit statuses (documented in ctx --help). */
enum {
    EX_OK = 0,
    EX_ERROR = 1, /* the code raised */
    EX_USAGE = 2,
    EX_TIMEOUT = 3,
    EX_INTERRUPTED = 4,
    EX_DIED = 5,
    EX_ABORTED = 6,
    EX_REFUSED = 7,
    EX_UNREACHABLE = 8
};

/* Returned by option helpers: keep parsing. */
#define CONTINUE (-1)

typedef struct ctx_cli {
    const char *endpoint; /* NULL: $CTXD_ENDPOINT, else the default */
    ctxd_client *client;  /* connected on first use */
} ctx_cli;

typedef struct ctx_cmd {
    const char *name;
    int (*run)(ctx_cli *cli, const struct ctx_cmd *cmd, int argc, char **argv);
    const char *args;    /* synopsis after the name */
    const char *summary; /* one line for ctx --help */
    const char *details; /* options and behaviour for ctx CMD --help */
} ctx_cmd;

typedef int ctx_cmd_fn(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv);
static ctx_cmd_fn cmd_run, cmd_create, cmd_ls, cmd_rm, cmd_restart, cmd_interrupt, cmd_hello,
    cmd_help;

static const ctx_cmd ctx_commands[] = {
    {"run", cmd_run,
     "[-c CTX] [-t SECONDS] [--silent] [--stop-on-error] [-e KEY=VAL]... (CODE | -f FILE | -)",
     "run Python code in a context, streaming its output",
     "Output is written as it arrives: the code's stdout to stdout, its stderr to\n"
     "stderr. A trailing expression's value is printed on stdout (its repr), a\n"
     "traceback on stderr. Ctrl-C interrupts the run (KeyboardInterrupt, globals\n"
     "kept); a second Ctrl-C stops waiting and leaves the run to the daemon.\n\n"
     "options:\n"
     "  -c, --ctx CTX        context to run in (default: default); created first\n"
     "                       when it does not exist\n"
     "  -t, --timeout SECS   interrupt the run after SECS seconds (0: never;\n"
     "                       default: the daemon's, see 'ctx hello')\n"
     "  -e, --env KEY=VAL    set an environment variable for this run only\n"
     "                       (repeatable)\n"
     "      --silent         no result, no execution count increment\n"
     "      --stop-on-error  if this run fails, abort the runs queued behind it\n"
     "  -f, --file FILE      read the code from FILE ('-': stdin)\n"
     "  -                    read the code from stdin\n"},
    {"create", cmd_create, "[NAME] [--cwd DIR] [-e KEY=VAL]...",
     "start a new context (prints its name)",
     "options:\n"
     "  NAME                 1-64 characters of [A-Za-z0-9_.-]; generated when absent\n"
     "      --cwd DIR        working directory of the worker (default: the daemon's)\n"
     "  -e, --env KEY=VAL    add a variable to the worker's environment (repeatable)\n"},
    {"ls", cmd_ls, "", "list contexts",
     "Columns: NAME, STATE (idle, busy, dead), PID (- when dead), INC (worker\n"
     "incarnation), RUNS (execution count), QUEUED (runs waiting), AGE.\n"},
    {"rm", cmd_rm, "NAME", "delete a context, killing its worker and its processes",
     "Its running and queued runs end as aborted. 'default' cannot be deleted.\n"},
    {"restart", cmd_restart, "[NAME]", "replace a context's worker with a fresh interpreter",
     "Empty globals, execution count 0; running and queued runs end as aborted.\n"
     "NAME defaults to 'default'.\n"},
    {"interrupt", cmd_interrupt, "[NAME]",
     "raise KeyboardInterrupt in the run executing on a context",
     "Queued runs are not touched. NAME defaults to 'default'.\n"},
    {"hello", cmd_hello, "", "show the daemon's version, pid and limits", ""},
    {"help", cmd_help, "[COMMAND]", "show help for ctx or one command", ""},
};
static const size_t ctx_ncommands = sizeof ctx_commands / sizeof ctx_commands[0];

static const char ctx_exit_help[] =
    "exit status:\n"
    "  0  ok                       5  the worker died (globals lost)\n"
    "  1  the code raised          6  aborted (context deleted/restarted/died,\n"
    "  2  usage error                 or an earlier run failed with --stop-on-error)\n"
    "  3  timeout                  7  refused by the daemon (err reply)\n"
    "  4  interrupted              8  daemon unreachable (or it broke the protocol)\n";

static const char ctx_global_help[] =
    "global options (before or after the command):\n"
    "  --endpoint EP   daemon endpoint; default $CTXD_ENDPOINT, else\n"
    "                  ipc://$XDG_RUNTIME_DIR/ctxd/ctxd.sock (ipc:///run/ctxd/ctxd.sock\n"
    "                  when XDG_RUNTIME_DIR is unset)\n"
    "  -h, --help      show help\n";

/* ---- help and errors ----------------------------------------------------- */

/* Top-level help: every command from the table, options, exit statuses. */
static void print_main_help(FILE *f)
{
    fprintf(f, "usage: ctx [--endpoint EP] COMMAND [ARGS]\n\n"
               "Runs Python code in persistent interpreters (contexts) kept alive by the\n"
               "ctxd daemon: globals survive from one run to the next.\n\ncommands:\n");
    for (size_t i = 0; i < ctx_ncommands; i++)
        fprintf(f, "  %-10s %s\n", ctx_commands[i].name, ctx_commands[i].summary);
    fprintf(f,
            "\nRun 'ctx help COMMAND' or 'ctx COMMAND --help' for a command's options.\n\n%s\n%s",
            ctx_global_help, ctx_exit_help);
}

/* Help for one command: synopsis, summary, details, shared options and
 * exit statuses. */
static void print_cmd_help(const ctx_cmd *cmd, FILE *f)
{
    fprintf(f, "usage: ctx %s%s%s\n\n%s\n", cmd->name, cmd->args[0] ? " " : "", cmd->args,
            cmd->summary);
    if (cmd->details[0])
        fprintf(f, "\n%s", cmd->details);
    fprintf(f, "\n%s\n%s", ctx_global_help, ctx_exit_help);
}

/* A usage error: the problem, the synopsis, and exit status 2. */
static int usage(const ctx_cmd *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage(const ctx_cmd *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ctx: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "\nusage: ctx %s %s\nTry 'ctx %s --help'.\n", cmd->name, cmd->args,
                cmd->name);
    else
        fprintf(stderr, "\nTry 'ctx --help'.\n");
    return EX_USAGE;
}

/* Maps a libctxd failure to the documented exit status. */
static int exit_for(int rc)
{
    switch (rc) {
    case 0:
        return EX_OK;
    case CTXD_EREFUSED:
        return EX_REFUSED;
    case CTXD_EINVALID:
        return EX_USAGE;
    case CTXD_ECANCELLED:
        return EX_INTERRUPTED;
    default:
        return EX_UNREACHABLE;
    }
}

/* Prints the last library failure on stderr and returns its exit status. */
static int report(ctx_cli *cli, int rc)
{
    const char *code, *msg;
    ctxd_last_error(cli->client, &code, &msg);
    if (rc == CTXD_EREFUSED)
        fprintf(stderr, "ctx: refused by ctxd (%s): %s\n", code, msg);
    else
        fprintf(stderr, "ctx: %s\n", msg);
    return exit_for(rc);
}

/* Connects on first use, so `ctx help` works without a daemon. Returns
 * CONTINUE, or the exit status of a failed connection. */
static int need_client(ctx_cli *cli)
{
    if (cli->client)
        return CONTINUE;
    char err[1024];
    int rc = 0;
    cli->client = ctxd_connect_ex(cli->endpoint, CTXD_DEFAULT_TIMEOUT, &rc, err, sizeof err);
    if (cli->client)
        return CONTINUE;
    fprintf(stderr, "ctx: %s\n", err);
    return exit_for(rc);
}

/* ---- option parsing -------------------------------------------------------- */

/* Long options every command accepts. Option strings start with ':' so a
 * missing argument comes back as ':' and we word the message ourselves. */
#define COMMON_LONGOPTS                                                                            \
    {"endpoint", required_argument, NULL, 'E'},                                                    \
    {                                                                                              \
        "help", no_argument, NULL, 'h'                                                             \
    }

/* Handles the options every command accepts and getopt's error returns.
 * Returns CONTINUE, or an exit status to return at once. */
static int common_opt(ctx_cli *cli, const ctx_cmd *cmd, int opt, char **argv)
{
    char buf[3] = {'-', (char)optopt, '\0'};
    const char *bad = opt != ':' && optopt ? buf : argv[optind - 1];
    switch (opt) {
    case 'E':
        cli->endpoint = optarg;
        return CONTINUE;
    case 'h':
        print_cmd_help(cmd, stdout);
        return EX_OK;
    case ':':
        return usage(cmd, "option '%s' needs an argument", bad);
    default:
        return usage(cmd, "unknown option '%s'", bad);
    }
}

/* Checks the number of positional arguments left after the options. */
static int positionals(const ctx_cmd *cmd, int argc, char **argv, int min, int max)
{
    int n = argc - optind;
    if (n < min)
        return usage(cmd, "missing argument");
    if (n > max)
        return usage(cmd, "unexpected argument '%s'", argv[optind + max]);
    return CONTINUE;
}

/* Environment pairs collected from repeated -e KEY=VALUE options. */
typedef struct env_list {
    ctxd_kv *kv;
    size_t n;
} env_list;

/* Adds one -e KEY=VALUE; the strings point into argv. */
static int env_add(env_list *env, const ctx_cmd *cmd, char *arg)
{
    char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return usage(cmd, "-e needs KEY=VALUE, got '%s'", arg);
    *eq = '\0';
    env->kv = mem_realloc(env->kv, (env->n + 1) * sizeof *env->kv);
    env->kv[env->n++] = (ctxd_kv){.key = arg, .value = eq + 1};
    return CONTINUE;
}

/* ---- ctx run ------------------------------------------------------------- */

static volatile sig_atomic_t ctx_sigints;

/* SIGINT only counts; the wait loop turns it into an interrupt request. */
static void on_sigint(int sig)
{
    (void)sig;
    ctx_sigints++;
}

typedef struct run_state {
    const char *ctx;
    int sigints_seen;
    bool accepted;
    bool interrupt_asked;
    bool error_shown;
} run_state;

/* A run on a fresh worker after a death: say so, the globals are gone. */
static void run_accepted(void *user, uint64_t count, uint64_t incarnation,
                         const char *previous_death)
{
    run_state *rs = user;
    (void)count;
    rs->accepted = true;
    if (previous_death)
        fprintf(stderr,
                "ctx: note: the previous worker of context '%s' died (%s); this run starts "
                "incarnation %llu with empty globals\n",
                rs->ctx, previous_death, (unsigned long long)incarnation);
}

/* Output chunks are written as they come, so long runs show progress. */
static void run_stream(void *user, const char *name, const void *data, size_t len)
{
    (void)user;
    FILE *f = strcmp(name, "stderr") == 0 ? stderr : stdout;
    fwrite(data, 1, len, f);
    fflush(f);
}

/* The trailing expression's value, as a notebook shows it. */
static void run_result(void *user, const char *const *keys, const char *const *values, size_t n,
                       uint64_t count)
{
    (void)user;
    (void)count;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(keys[i], "text/plain") == 0) {
            fputs(values[i], stdout);
            fputc('\n', stdout);
            fflush(stdout);
        }
    }
}

/* The traceback goes to stderr, one line per entry. */
static void run_error(void *user, const char *ename, const char *evalue,
                      const char *const *traceback, size_t n)
{
    run_state *rs = user;
    rs->error_shown = true;
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
    if (!rs->accepted)
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
        return usage(cmd, "give the code either as an argument or with -f, not both");
    if (!file && !arg)
        return usage(cmd, "no code given (CODE, -f FILE or - for stdin)");
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

/* Parses a timeout in seconds (>= 0, 0 = none). */
static int parse_seconds(const ctx_cmd *cmd, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0)
        return usage(cmd, "-t needs a number of seconds >= 0 (0: no timeout), got '%s'", s);
    *out = v;
    return CONTINUE;
}

/* Creates the run's context unless it is there already (or is `default`,
 * which the daemon creates on first use). */
static int ensure_context(ctx_cli *cli, const char *name)
{
    if (!name || strcmp(name, "default") == 0)
        return CONTINUE;
    int rc = ctxd_ctx_create(cli->client, name, NULL, NULL, 0, NULL);
    const char *code;
    ctxd_last_error(cli->client, &code, NULL);
    if (rc == 0 || (rc == CTXD_EREFUSED && strcmp(code, "exists") == 0))
        return CONTINUE;
    return report(cli, rc);
}

/* Reports how a run ended and maps it to an exit status. */
static int run_outcome(const run_state *rs, const ctxd_outcome *out)
{
    static const struct {
        int exit;
        const char *what;
    } statuses[] = {[CTXD_OK] = {EX_OK, NULL},
                    [CTXD_ERROR] = {EX_ERROR, NULL},
                    [CTXD_INTERRUPTED] = {EX_INTERRUPTED, "interrupted"},
                    [CTXD_TIMEOUT] = {EX_TIMEOUT, "timed out"},
                    [CTXD_DIED] = {EX_DIED, "the worker died"},
                    [CTXD_ABORTED] = {EX_ABORTED, "aborted"}};
    if ((size_t)out->status >= sizeof statuses / sizeof statuses[0])
        return EX_UNREACHABLE;
    const char *what = statuses[out->status].what;
    if (rs->error_shown && out->status == CTXD_INTERRUPTED)
        what = NULL; /* the KeyboardInterrupt traceback says it */
    if (out->status == CTXD_ERROR && !rs->error_shown)
        what = "the code raised";
    if (what)
        fprintf(stderr, "ctx: %s%s%s\n", what, out->cause ? ": " : "",
                out->cause ? out->cause : "");
    if (out->state_lost)
        fprintf(stderr, "ctx: state lost: the globals of context '%s' are gone\n", rs->ctx);
    return statuses[out->status].exit;
}

/* ctx run: execute code and mirror the run on the terminal. */
static int cmd_run(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {{"ctx", required_argument, NULL, 'c'},
                                             {"timeout", required_argument, NULL, 't'},
                                             {"file", required_argument, NULL, 'f'},
                                             {"env", required_argument, NULL, 'e'},
                                             {"silent", no_argument, NULL, 'S'},
                                             {"stop-on-error", no_argument, NULL, 'X'},
                                             COMMON_LONGOPTS,
                                             {0}};
    ctxd_exec_opts opts = {.timeout = -1};
    env_list env = {0};
    const char *file = NULL;
    int opt, r = CONTINUE;
    while (r == CONTINUE && (opt = getopt_long(argc, argv, ":c:t:f:e:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            opts.ctx = optarg;
            break;
        case 't':
            r = parse_seconds(cmd, optarg, &opts.timeout);
            break;
        case 'f':
            file = optarg;
            break;
        case 'e':
            r = env_add(&env, cmd, optarg);
            break;
        case 'S':
            opts.silent = true;
            break;
        case 'X':
            opts.stop_on_error = true;
            break;
        default:
            r = common_opt(cli, cmd, opt, argv);
        }
    }
    if (r == CONTINUE)
        r = positionals(cmd, argc, argv, 0, 1);
    char *code = NULL;
    size_t len = 0;
    if (r == CONTINUE)
        r = load_code(cmd, file, optind < argc ? argv[optind] : NULL, &code, &len);
    if (r == CONTINUE)
        r = need_client(cli);
    if (r == CONTINUE)
        r = ensure_context(cli, opts.ctx);
    if (r == CONTINUE) {
        opts.code = code;
        opts.code_len = len;
        opts.env = env.kv;
        opts.nenv = env.n;
        run_state rs = {.ctx = opts.ctx ? opts.ctx : "default"};
        ctxd_callbacks cb = {.on_accepted = run_accepted,
                             .on_stream = run_stream,
                             .on_result = run_result,
                             .on_error = run_error,
                             .on_wait = run_wait};
        struct sigaction sa = {.sa_handler = on_sigint}, old;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old); /* no SA_RESTART: the wait wakes at once */
        ctxd_outcome out;
        int rc = ctxd_execute(cli->client, &opts, &cb, &rs, &out);
        sigaction(SIGINT, &old, NULL);
        fflush(stdout);
        r = rc < 0 ? report(cli, rc) : run_outcome(&rs, &out);
    }
    free(code);
    free(env.kv);
    return r;
}

/* ---- control commands ------------------------------------------------------ */

/* Parses a command that takes only the common options and between min and
 * max positional arguments. */
static int simple_opts(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv, int min, int max)
{
    static const struct option longopts[] = {COMMON_LONGOPTS, {0}};
    int opt;
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int r = common_opt(cli, cmd, opt, argv);
        if (r != CONTINUE)
            return r;
    }
    int r = positionals(cmd, argc, argv, min, max);
    if (r == CONTINUE)
        r = need_client(cli);
    return r;
}

/* ctx create: start a context, print its (possibly generated) name. */
static int cmd_create(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {{"cwd", required_argument, NULL, 'C'},
                                             {"env", required_argument, NULL, 'e'},
                                             COMMON_LONGOPTS,
                                             {0}};
    env_list env = {0};
    const char *cwd = NULL;
    int opt, r = CONTINUE;
    while (r == CONTINUE && (opt = getopt_long(argc, argv, ":e:h", longopts, NULL)) != -1) {
        if (opt == 'C')
            cwd = optarg;
        else if (opt == 'e')
            r = env_add(&env, cmd, optarg);
        else
            r = common_opt(cli, cmd, opt, argv);
    }
    if (r == CONTINUE)
        r = positionals(cmd, argc, argv, 0, 1);
    if (r == CONTINUE)
        r = need_client(cli);
    if (r == CONTINUE) {
        /* The daemon wants an absolute path; resolve a relative one here. */
        char *abs = cwd ? realpath(cwd, NULL) : NULL;
        ctxd_ctx_info info;
        int rc = ctxd_ctx_create(cli->client, optind < argc ? argv[optind] : NULL, abs ? abs : cwd,
                                 env.kv, env.n, &info);
        free(abs);
        if (rc == 0)
            printf("%s\n", info.name);
        r = rc == 0 ? EX_OK : report(cli, rc);
    }
    free(env.kv);
    return r;
}

/* Formats an age in the largest unit that fits ("42s", "7m", "3h", "2d"). */
static const char *format_age(double seconds, char *buf, size_t n)
{
    static const struct {
        double size;
        char unit;
    } units[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}, {1, 's'}};
    size_t i = 0;
    while (i + 1 < sizeof units / sizeof units[0] && seconds < units[i].size)
        i++;
    snprintf(buf, n, "%.0f%c", seconds < 0 ? 0 : floor(seconds / units[i].size), units[i].unit);
    return buf;
}

/* ctx ls: one table row per context. */
static int cmd_ls(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = simple_opts(cli, cmd, argc, argv, 0, 0);
    if (r != CONTINUE)
        return r;
    const ctxd_ctx_info *infos;
    size_t n;
    int rc = ctxd_ctx_list(cli->client, &infos, &n);
    if (rc < 0)
        return report(cli, rc);
    int width = 4;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(infos[i].name) > width)
            width = (int)strlen(infos[i].name);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    double now = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
    printf("%-*s  %-5s  %7s  %4s  %6s  %6s  %s\n", width, "NAME", "STATE", "PID", "INC", "RUNS",
           "QUEUED", "AGE");
    for (size_t i = 0; i < n; i++) {
        const ctxd_ctx_info *c = &infos[i];
        char pid[24], age[32];
        snprintf(pid, sizeof pid, "%llu", (unsigned long long)c->pid);
        printf("%-*s  %-5s  %7s  %4llu  %6llu  %6llu  %s\n", width, c->name, c->state,
               c->pid ? pid : "-", (unsigned long long)c->incarnation,
               (unsigned long long)c->execution_count, (unsigned long long)c->queued,
               format_age(now - c->created, age, sizeof age));
    }
    return EX_OK;
}

/* ctx rm: delete a context. */
static int cmd_rm(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = simple_opts(cli, cmd, argc, argv, 1, 1);
    if (r != CONTINUE)
        return r;
    int rc = ctxd_ctx_delete(cli->client, argv[optind]);
    return rc == 0 ? EX_OK : report(cli, rc);
}

/* ctx restart: fresh worker for a context. */
static int cmd_restart(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = simple_opts(cli, cmd, argc, argv, 0, 1);
    if (r != CONTINUE)
        return r;
    ctxd_ctx_info info;
    int rc = ctxd_ctx_restart(cli->client, optind < argc ? argv[optind] : NULL, &info);
    if (rc < 0)
        return report(cli, rc);
    printf("%s: restarted (incarnation %llu, pid %llu)\n", info.name,
           (unsigned long long)info.incarnation, (unsigned long long)info.pid);
    return EX_OK;
}

/* ctx interrupt: KeyboardInterrupt in whatever runs on a context. */
static int cmd_interrupt(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = simple_opts(cli, cmd, argc, argv, 0, 1);
    if (r != CONTINUE)
        return r;
    const char *name = optind < argc ? argv[optind] : "default";
    bool interrupted = false;
    int rc = ctxd_interrupt(cli->client, name, &interrupted);
    if (rc < 0)
        return report(cli, rc);
    printf(interrupted ? "%s: interrupted\n" : "%s: nothing was running\n", name);
    return EX_OK;
}

/* ctx hello: check the daemon is there and show what it reports. */
static int cmd_hello(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = simple_opts(cli, cmd, argc, argv, 0, 0);
    if (r != CONTINUE)
        return r;
    ctxd_hello_info h;
    int rc = ctxd_hello(cli->client, &h);
    if (rc < 0)
        return report(cli, rc);
    printf("server    %s %s (pid %llu)\n", h.server, h.version, (unsigned long long)h.pid);
    printf("endpoint  %s\n", ctxd_endpoint(cli->client));
    printf("protocol  %llu (speaks", (unsigned long long)h.protocol);
    for (size_t i = 0; i < h.nversions; i++)
        printf(" %llu", (unsigned long long)h.versions[i]);
    printf(")\nlimits    max_request_bytes %llu, max_code_bytes %llu, max_queue %llu,\n"
           "          max_contexts %llu, default_timeout %g s, kill_grace %g s\n",
           (unsigned long long)h.max_request_bytes, (unsigned long long)h.max_code_bytes,
           (unsigned long long)h.max_queue, (unsigned long long)h.max_contexts, h.default_timeout,
           h.kill_grace);
    return EX_OK;
}

/* Looks a command up in the table; NULL when there is none. */
static const ctx_cmd *find_cmd(const char *name)
{
    for (size_t i = 0; i < ctx_ncommands; i++)
        if (strcmp(ctx_commands[i].name, name) == 0)
            return &ctx_commands[i];
    return NULL;
}

/* ctx help [COMMAND]: the same text as --help. */
static int cmd_help(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    (void)cli;
    (void)cmd;
    if (argc < 2) {
        print_main_help(stdout);
        return EX_OK;
    }
    const ctx_cmd *target = find_cmd(argv[1]);
    if (!target)
        return usage(NULL, "unknown command '%s'", argv[1]);
    print_cmd_help(target, stdout);
    return EX_OK;
}

/* Parses the global options up to the command name, then hands the rest of
 * argv (starting at the command name) to the command. */
int main(int argc, char **argv)
{
    static const struct option longopts[] = {COMMON_LONGOPTS, {0}};
    ctx_cli cli = {0};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        if (opt == 'E') {
            cli.endpoint = optarg;
        } else if (opt == 'h') {
            print_main_help(stdout);
            return EX_OK;
        } else {
            return usage(NULL, opt == ':' ? "option '%s' needs an argument" : "unknown option '%s'",
                         argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage(NULL, "no command given");
    const ctx_cmd *cmd = find_cmd(argv[optind]);
    if (!cmd)
        return usage(NULL, "unknown command '%s'", argv[optind]);
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    optind = 0; /* GNU getopt: start afresh, at sub_argv[1] */
    int r = cmd->run(&cli, cmd, sub_argc, sub_argv);
    ctxd_close(cli.client);
    return r;
}
