/* ctx: the command-line client of the ctxd daemon, built on libctxd.
 * Subcommands are dispatched from ctx_commands[]; each parses its own
 * options with getopt_long and returns the process exit status. The REPL
 * lives in ctx_repl.c (line editor: ctx_edit.c), JSON output in ctx_json.c. */
#include "ctx.h"
#include "ctx_media.h"
#include "mem.h"

#include <errno.h>
#include <getopt.h>
#include <zmq.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

typedef struct ctx_cmd {
    const char *name;
    int (*run)(ctx_cli *cli, const struct ctx_cmd *cmd, int argc, char **argv);
    const char *args;    /* synopsis after the name */
    const char *summary; /* one line for ctx --help */
    const char *details; /* options and behaviour for ctx CMD --help */
} ctx_cmd;

typedef int ctx_cmd_fn(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv);
static ctx_cmd_fn cmd_run, cmd_create, cmd_ls, cmd_rm, cmd_restart, cmd_interrupt, cmd_stats,
    cmd_repl, cmd_hello, cmd_help, cmd_fork, cmd_keygen, cmd_cp, cmd_pip, cmd_kernel;

static const ctx_cmd ctx_commands[] = {
    {"run", cmd_run,
     "[-c CTX] [-t SECONDS] [--silent] [--stop-on-error] [-e KEY=VAL]... [--base64] "
     "(CODE | -f FILE [ARGS...] | -)",
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
     "  -f, --file FILE [ARGS...]\n"
     "                       run FILE as `python3 FILE ARGS...` would: __file__,\n"
     "                       sys.argv, sys.path[0] (for this run); options go\n"
     "                       before -f, everything after FILE is the script's\n"
     "                       ('-': the code from stdin)\n"
     "  -                    read the code from stdin\n"
     "      --base64         with --json: stream data as exact bytes in base64\n\n"
     "With --json, every event of the run is one line on stdout, in order:\n"
     "  {\"t\":\"accepted\",\"ctx\":..,\"execution_count\":..,\"incarnation\":..\n"
     "   [,\"previous_death\":..]}\n"
     "  {\"t\":\"stream\",\"name\":\"stdout\"|\"stderr\",\"data\":TEXT}\n"
     "  {\"t\":\"result\",\"execution_count\":..,\"data\":{\"text/plain\":..}}\n"
     "  {\"t\":\"error\",\"ename\":..,\"evalue\":..,\"traceback\":[LINE,..]}\n"
     "  {\"t\":\"done\",\"status\":..,\"execution_count\":..,\"incarnation\":..,\n"
     "   \"duration\":..,\"cpu_time\":..,\"truncated\":..,\"state_lost\":..\n"
     "   [,\"dropped\":{\"stdout\":N,\"stderr\":N}] [,\"cause\":..]}\n"
     "or one {\"t\":\"err\",\"code\":..,\"message\":..} when the run was refused or\n"
     "failed in the client (then with \"local\":true). Stream data (bytes on the\n"
     "wire) is decoded as UTF-8: a character split across two chunks is put back\n"
     "together, invalid bytes become U+FFFD. With --base64 the events carry\n"
     "\"data_b64\" (the chunk's exact bytes) instead of \"data\".\n"},
    {"ls", cmd_ls, "", "list contexts",
     "Columns: NAME, STATE (idle, busy, dead), PID (- when dead), INC (worker\n"
     "incarnation), RUNS (execution count), QUEUED (runs waiting), MEMORY (the\n"
     "worker's proportional set size, PSS: shared pages counted in proportion;\n"
     "- when dead), AGE (since the context was created).\n\n"
     "With --json: {\"t\":\"ok\",\"contexts\":[INFO,..]}, INFO as in\n"
     "proto/PROTOCOL.md (name, cwd, state, pid, incarnation, created,\n"
     "execution_count, queued, rss, pss [, last_death]; bytes, Unix time).\n"},
    {"create", cmd_create,
     "[NAME] [--cwd DIR] [-e KEY=VAL]... [-p PKG]... [-t TIER] [-P FIELD=VALUE]...",
     "start a new context (prints its name)",
     "options:\n"
     "  NAME                 1-64 characters of [A-Za-z0-9_.-]; generated when absent\n"
     "      --cwd DIR        working directory of the worker (no symbolic link in it; for\n"
     "                       local/sandbox writable by the context's uid); default a new\n"
     "                       private directory, removed with the context\n"
     "  -e, --env KEY=VAL    add a variable to the worker's environment (repeatable)\n"
     "  -p, --package PKG    install PKG into the new context first (repeatable; see\n"
     "                       'ctx pip')\n"
     "  -t, --tier TIER      unsafe (default), static (analysis only), local\n"
     "                       (confined process), sandbox (own namespaces and root)\n"
     "  -P, --policy F=V     a policy field (repeatable): V is true, false, a number\n"
     "                       or [a,b,...]; e.g. -P memory_bytes=268435456\n"
     "                       -P filesystem_write_roots=[/srv/out] (PROTOCOL.md section 5)\n\n"
     "With --json: {\"t\":\"ok\",\"ctx\":INFO}.\n"},
    {"cp", cmd_cp, "SRC DST", "copy a file into or out of a context's directory",
     "One of SRC and DST is CTX:PATH, a file relative to the directory of context\n"
     "CTX (its cwd at creation; ':PATH' means 'default'); the other is a local\n"
     "file, or '-' for stdin / stdout. A local name holding ':' must be written\n"
     "with a '/' before the ':' (./a:b). When the destination is a local\n"
     "directory, or CTX:PATH ends in '/' (or is empty), the source's file name\n"
     "is appended. The file moves in 4 MiB chunks (file.put / file.get), so a\n"
     "large file is never held whole in memory. Paths that would leave the\n"
     "context's directory ('..', symbolic links) are refused (exit 7). Copying\n"
     "into a context that does not exist creates it.\n\n"
     "With --json: {\"t\":\"ok\",\"bytes\":N}.\n"},
    {"pip", cmd_pip, "[-c CTX] PKG...", "install packages into one context",
     "Installs each PKG (name, name==1.0, name[extra]>=1; at most 64) from the\n"
     "daemon's wheelhouse or index (ctxd --wheelhouse / --package-index) into\n"
     "the context, where it can be imported from the next run on, and nowhere\n"
     "else. The daemon caches installs: a package another context already got\n"
     "is linked without running pip. Prints one line per package: its name and\n"
     "'installed' or 'cached'. pip's own message comes back when it fails\n"
     "(exit 7).\n\n"
     "options:\n"
     "  -c, --ctx CTX        context (default: default); created when missing\n\n"
     "With --json: {\"t\":\"ok\",\"packages\":[{\"name\":..,\"cached\":BOOL},..]}.\n"},
    {"rm", cmd_rm, "NAME", "delete a context, killing its worker and its processes",
     "Its running and queued runs end as aborted. 'default' cannot be deleted.\n"
     "With --json: {\"t\":\"ok\"}.\n"},
    {"restart", cmd_restart, "[NAME]", "replace a context's worker with a fresh interpreter",
     "Empty globals, execution count 0; running and queued runs end as aborted.\n"
     "NAME defaults to 'default'. With --json: {\"t\":\"ok\",\"ctx\":INFO}.\n"},
    {"fork", cmd_fork, "SRC [NAME]", "clone a live context (globals, modules, cwd) into a new one",
     "The worker of SRC forks: the new context starts with a copy-on-write copy\n"
     "of its state and the two diverge from then on. The fork waits behind the\n"
     "runs queued on SRC. NAME is generated when absent; the new name is\n"
     "printed. With --json: {\"t\":\"ok\",\"ctx\":INFO}.\n"},
    {"interrupt", cmd_interrupt, "[NAME]",
     "raise KeyboardInterrupt in the run executing on a context",
     "Whoever started the run; queued runs are not touched. NAME defaults to\n"
     "'default'. Exit status 0 either way; the output (or --json's\n"
     "{\"t\":\"ok\",\"interrupted\":BOOL}) says whether something was running.\n"},
    {"stats", cmd_stats, "", "show daemon-wide figures: contexts, runs, queue, memory, counters",
     "Totals over the live contexts come from 'hello' and 'ctx.list' (state,\n"
     "queue, execution counts since each worker started, and the memory of\n"
     "the workers alive now: PSS and RSS; the daemon's own 'stats' reply has no\n"
     "memory figures). When the daemon answers the 'stats' request, its uptime\n"
     "and counters since start (runs by status, requests, output bytes, worker\n"
     "spawns and deaths) are shown too; an older daemon without it gets the\n"
     "totals only.\n\n"
     "With --json: {\"t\":\"stats\",\"endpoint\":..,\"server\":..,\"version\":..,\n"
     "\"pid\":..,\"instance\":..,\"contexts\":N,\"idle\":N,\"busy\":N,\"dead\":N,\n"
     "\"queued\":N,\"executions\":N,\"pss\":BYTES,\"rss\":BYTES,\"limits\":{..},\n"
     "\"daemon\":{\"uptime\":..,\"contexts\":{..},\"counters\":{..}} or null}.\n"},
    {"repl", cmd_repl, "[-c CTX] [-t SECONDS] [--no-color]",
     "an interactive, notebook-like session on a context",
     "Type Python; a block runs once it is complete, as Python's own REPL\n"
     "decides (the context itself is asked, with a silent run that touches no\n"
     "globals; an empty line ends an indented block). The prompt [n]: shows the\n"
     "next execution count; a value is shown as Out[n]: and errors in red\n"
     "(colours only on a terminal, and not with NO_COLOR or --no-color).\n\n"
     "keys: Enter runs or continues the block; Ctrl-C while code runs\n"
     "interrupts it (KeyboardInterrupt, the context and its globals are kept;\n"
     "a third Ctrl-C stops waiting), Ctrl-C at the prompt clears the input;\n"
     "Ctrl-D (or 'exit') leaves. Up/Down browse the history, which is kept\n"
     "across sessions in $CTX_HISTORY, else ~/.ctx_history (CTX_HISTORY=''\n"
     "for none); Left/Right/Home/End, Ctrl-A/E/K/U/W/L edit; Tab indents.\n"
     "Without a terminal on stdin, lines are read plainly (no prompts).\n"
     "CTX_REPL_COMPLETE=local decides completeness locally instead (brackets,\n"
     "strings, ':' and '\\' line ends, decorators, indented blocks until an\n"
     "empty line), without asking the context; so does ctx when the context\n"
     "does not answer within 3 s (e.g. busy with another client's run).\n\n"
     "options:\n"
     "  -c, --ctx CTX        context (default: default); created when missing\n"
     "  -t, --timeout SECS   timeout of each run (default 0: none)\n"
     "      --no-color       no colours\n"},
    {"hello", cmd_hello, "", "show the daemon's version, pid and limits",
     "With --json: the hello reply ({\"t\":\"ok\",\"server\":..,\"version\":..,\n"
     "\"protocol\":..,\"versions\":[..],\"pid\":..,\"instance\":..,\"limits\":{..}})\n"
     "plus \"endpoint\".\n"},
    {"keygen", cmd_keygen, "[FILE]", "make a CurveZMQ client key pair for tcp:// endpoints",
     "Writes a new secret key to FILE (default ~/.config/ctxd/client.key, mode\n"
     "0600; an existing file is never overwritten) and prints the public key: add\n"
     "that line to the daemon's STATE_DIR/authorized_keys. Clients then connect\n"
     "to tcp:// with CTXD_SERVER_KEY set to the daemon's server.pub (the key or\n"
     "the file) and CTXD_CLIENT_KEY to FILE (when not the default).\n"},
    {"kernel", cmd_kernel,
     "install [--user | --prefix DIR | --sys-prefix] [--context NAME] [--name NAME]",
     "install the Jupyter kernelspec 'ctxd' (notebooks run in ctxd contexts)",
     "Installs the kernelspec with the kernel's own installer (python3 -m\n"
     "ctxd.kernel install), pointing at this ctx's Python package and daemon.\n"
     "Then `jupyter console --kernel ctxd`, JupyterLab or any jupyter_client\n"
     "program run their cells in a ctxd context: the kernel uses the daemon at\n"
     "$CTXD_ENDPOINT or the default socket, and starts a private daemon (which\n"
     "ends with the kernel) when none answers there.\n\n"
     "options (passed to the installer):\n"
     "  --user               for this user (~/.local/share/jupyter/kernels)\n"
     "  --prefix DIR         under DIR/share/jupyter/kernels\n"
     "  --sys-prefix         under the interpreter's prefix\n"
     "                       (default: the system-wide Jupyter directory)\n"
     "  --context NAME       attach every kernel to the context NAME (shared\n"
     "                       with agents; kept at shutdown); default: each\n"
     "                       kernel has a context of its own, deleted at shutdown\n"
     "  --endpoint EP        the daemon the kernel uses\n"
     "  --name NAME          kernelspec name (default ctxd); --display-name TEXT\n"},
    {"help", cmd_help, "[COMMAND]", "show help for ctx or one command", ""},
};
static const size_t ctx_ncommands = sizeof ctx_commands / sizeof ctx_commands[0];

static const char ctx_exit_help[] =
    "exit status:\n"
    "  0  ok                       5  the worker died (globals lost)\n"
    "  1  the code raised          6  aborted (context deleted/restarted/died, an\n"
    "  2  usage error                 earlier run failed with --stop-on-error, or\n"
    "                                 the daemon shut down during the run)\n"
    "  3  timeout                  7  refused by the daemon (err reply)\n"
    "  4  interrupted              8  daemon unreachable (or it broke the protocol)\n";

static const char ctx_global_help[] =
    "global options (before or after the command):\n"
    "  --endpoint EP   daemon endpoint; default $CTXD_ENDPOINT, else\n"
    "                  ipc://$XDG_RUNTIME_DIR/ctxd/ctxd.sock (ipc:///run/ctxd/ctxd.sock\n"
    "                  when XDG_RUNTIME_DIR is unset)\n"
    "  --json          machine-readable output: one JSON object per line on stdout\n"
    "                  (per event for run; failures as {\"t\":\"err\",\"code\",\"message\"})\n"
    "  -h, --help      show help\n"
    "tcp:// endpoints: CTXD_SERVER_KEY (the daemon's public key, or its server.pub\n"
    "file) and CTXD_CLIENT_KEY (your secret key file, default\n"
    "~/.config/ctxd/client.key; see 'ctx keygen') turn on CurveZMQ.\n";

/* ---- help and errors ----------------------------------------------------- */

/* Top-level help: every command from the table, options, exit statuses. */
static void print_main_help(FILE *f)
{
    fprintf(f, "usage: ctx [--endpoint EP] [--json] COMMAND [ARGS]\n\n"
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

int ctx_exit_for(int rc)
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

/* A failure as one JSON line. */
static void json_err(const char *code, const char *msg, bool local)
{
    jw w;
    jw_init(&w, stdout);
    jw_obj(&w);
    jw_kstr(&w, "t", "err");
    jw_kstr(&w, "code", code);
    jw_kstr(&w, "message", msg);
    if (local)
        jw_kbool(&w, "local", true);
    jw_obj_end(&w);
    jw_line(&w);
}

int ctx_report(ctx_cli *cli, int rc)
{
    const char *code, *msg;
    ctxd_last_error(cli->client, &code, &msg);
    if (cli->json)
        json_err(code, msg, rc != CTXD_EREFUSED || strcmp(code, "too_large") == 0);
    else if (rc == CTXD_EREFUSED)
        fprintf(stderr, "ctx: refused by ctxd (%s): %s\n", code, msg);
    else
        fprintf(stderr, "ctx: %s\n", msg);
    return ctx_exit_for(rc);
}

int ctx_need_client(ctx_cli *cli)
{
    if (cli->client)
        return CONTINUE;
    char err[1024];
    int rc = 0;
    cli->client = ctxd_connect_ex(cli->endpoint, CTXD_DEFAULT_TIMEOUT, &rc, err, sizeof err);
    if (cli->client)
        return CONTINUE;
    if (cli->json) {
        static const char *const names[] = {"",          "unreachable", "refused",   "protocol",
                                            "transport", "invalid",     "cancelled", "lost"};
        json_err(rc < 0 && -rc < 8 ? names[-rc] : "error", err, true);
    } else {
        fprintf(stderr, "ctx: %s\n", err);
    }
    return ctx_exit_for(rc);
}

/* ---- option parsing -------------------------------------------------------- */

/* Long options every command accepts. Option strings start with ':' so a
 * missing argument comes back as ':' and we word the message ourselves. */
#define COMMON_LONGOPTS                                                                            \
    {"endpoint", required_argument, NULL, 'E'}, {"json", no_argument, NULL, 'J'},                  \
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
    case 'J':
        cli->json = true;
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
        return usage(cmd, "expected KEY=VALUE, got '%s'", arg);
    *eq = '\0';
    env->kv = mem_realloc(env->kv, (env->n + 1) * sizeof *env->kv);
    env->kv[env->n++] = (ctxd_kv){.key = arg, .value = eq + 1};
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

int ctx_ensure_context(ctx_cli *cli, const char *name)
{
    if (!name || strcmp(name, "default") == 0)
        return CONTINUE;
    int rc = ctxd_ctx_create(cli->client, name, NULL, NULL, 0, NULL);
    const char *code;
    ctxd_last_error(cli->client, &code, NULL);
    if (rc == 0 || (rc == CTXD_EREFUSED && strcmp(code, "exists") == 0))
        return CONTINUE;
    return ctx_report(cli, rc);
}

/* ---- ctx run ------------------------------------------------------------- */

volatile sig_atomic_t ctx_sigints;

void ctx_on_sigint(int sig)
{
    (void)sig;
    ctx_sigints++;
}

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

/* A MIME bundle on a terminal: images (PNG, JPEG, GIF, SVG, PDF) saved to
 * files whose paths are printed; otherwise its text/plain. */
static void print_bundle(const char *const *keys, const char *const *values, size_t n)
{
    bool saved = false;
    for (size_t i = 0; i < n; i++) {
        char path[4200];
        if (ctx_media_is_file(keys[i])) {
            if (ctx_media_save(keys[i], values[i], path, sizeof path))
                printf("[%s saved to %s]\n", keys[i], path);
            else
                printf("[%s: could not be saved]\n", keys[i]);
            saved = true;
        }
    }
    for (size_t i = 0; i < n && !saved; i++) {
        if (strcmp(keys[i], "text/plain") == 0) {
            fputs(values[i], stdout);
            fputc('\n', stdout);
        }
    }
    fflush(stdout);
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
    print_bundle(keys, values, n);
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
    print_bundle(keys, values, n);
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
static int cmd_run(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {{"ctx", required_argument, NULL, 'c'},
                                             {"timeout", required_argument, NULL, 't'},
                                             {"file", required_argument, NULL, 'f'},
                                             {"env", required_argument, NULL, 'e'},
                                             {"silent", no_argument, NULL, 'S'},
                                             {"stop-on-error", no_argument, NULL, 'X'},
                                             {"base64", no_argument, NULL, 'B'},
                                             COMMON_LONGOPTS,
                                             {0}};
    ctxd_exec_opts opts = {.timeout = -1};
    env_list env = {0};
    const char *file = NULL;
    bool base64 = false;
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
            r = SCRIPT_ARGS; /* the rest of the command line is the script's */
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
        case 'B':
            base64 = true;
            break;
        default:
            r = common_opt(cli, cmd, opt, argv);
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
        r = positionals(cmd, argc, argv, 0, 1);
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
        r = ctx_need_client(cli);
    return r;
}

/* ctx's own directory (from /proc/self/exe), to find the daemon and the
 * Python package installed or built beside it; "" when unknown. */
static void exe_dir(char *buf, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    buf[len > 0 ? len : 0] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    else
        buf[0] = '\0';
}

/* The first of the candidate paths (dir + suffix) that exists, into out. */
static bool first_existing(char *out, size_t n, const char *dir, const char *const *suffixes,
                           size_t nsuffixes)
{
    for (size_t i = 0; i < nsuffixes; i++) {
        if (suffixes[i][0] == '/')
            snprintf(out, n, "%s", suffixes[i]);
        else
            snprintf(out, n, "%s/%s", dir, suffixes[i]);
        if (access(out, F_OK) == 0)
            return true;
    }
    return false;
}

/* ctx kernel install: runs the kernel's installer with the package and the
 * daemon that belong to this ctx (installed tree, else the build tree). */
static int cmd_kernel(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    (void)cli;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        print_cmd_help(cmd, argc < 2 ? stderr : stdout);
        return argc < 2 ? EX_USAGE : EX_OK;
    }
    if (strcmp(argv[1], "install") != 0)
        return usage(cmd, "unknown kernel action '%s' (only: install)", argv[1]);
    char dir[4096], pkg[4200], daemon[4200];
    exe_dir(dir, sizeof dir);
    static const char *const pkgs[] = {"../" CTX_PYTHON_DIR, CTX_SOURCE_PYTHON_DIR};
    static const char *const daemons[] = {"ctxd", "../daemon/ctxd"};
    if (!first_existing(pkg, sizeof pkg, dir, pkgs, 2)) {
        fprintf(stderr, "ctx: the ctxd Python package is not installed beside %s\n", dir);
        return EX_USAGE;
    }
    bool have_daemon = first_existing(daemon, sizeof daemon, dir, daemons, 2);
    const char *old = getenv("PYTHONPATH");
    char *path = mem_alloc(strlen(pkg) + (old ? strlen(old) : 0) + 2);
    sprintf(path, "%s%s%s", pkg, old && *old ? ":" : "", old && *old ? old : "");
    setenv("PYTHONPATH", path, 1);
    free(path);
    char **args = mem_calloc((size_t)argc + 8, sizeof *args);
    size_t n = 0;
    args[n++] = (char *)CTX_KERNEL_PYTHON;
    args[n++] = "-m";
    args[n++] = "ctxd.kernel";
    args[n++] = "install";
    if (have_daemon) {
        args[n++] = "--ctxd";
        args[n++] = daemon;
    }
    for (int i = 2; i < argc; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    fflush(stdout);
    execv(CTX_KERNEL_PYTHON, args);
    fprintf(stderr, "ctx: cannot run %s: %s\n", CTX_KERNEL_PYTHON, strerror(errno));
    free(args);
    return EX_UNREACHABLE;
}

/* ctx keygen: a client key pair for CurveZMQ; needs no daemon. */
static int cmd_keygen(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {COMMON_LONGOPTS, {0}};
    int opt;
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int r = common_opt(cli, cmd, opt, argv);
        if (r != CONTINUE)
            return r;
    }
    int r = positionals(cmd, argc, argv, 0, 1);
    if (r != CONTINUE)
        return r;
    char path[4096];
    if (optind < argc) {
        snprintf(path, sizeof path, "%s", argv[optind]);
    } else {
        const char *home = getenv("HOME");
        snprintf(path, sizeof path, "%s/.config", home ? home : "");
        mkdir(path, 0700);
        strncat(path, "/ctxd", sizeof path - strlen(path) - 1);
        mkdir(path, 0700);
        strncat(path, "/client.key", sizeof path - strlen(path) - 1);
    }
    char public[41], secret[41];
    if (zmq_curve_keypair(public, secret) != 0) {
        fprintf(stderr, "ctx: this libzmq has no CurveZMQ support\n");
        return EX_UNREACHABLE;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "ctx: cannot create %s: %s\n", path, strerror(errno));
        return EX_USAGE;
    }
    char text[160];
    int n =
        snprintf(text, sizeof text, "# ctxd client secret key (public: %s)\n%s\n", public, secret);
    bool ok = write(fd, text, (size_t)n) == n;
    close(fd);
    if (!ok) {
        fprintf(stderr, "ctx: cannot write %s\n", path);
        return EX_USAGE;
    }
    if (cli->json)
        printf("{\"t\":\"ok\",\"public\":\"%s\",\"secret_file\":\"%s\"}\n", public, path);
    else
        printf("%s\n", public);
    if (!cli->json)
        fprintf(stderr,
                "ctx: secret key written to %s; add the public key above to the "
                "daemon's authorized_keys\n",
                path);
    return EX_OK;
}

/* {"t":"ok","ctx":INFO} for create and restart. */
static void json_ok_ctx(const ctxd_ctx_info *info)
{
    jw w;
    jw_init(&w, stdout);
    jw_obj(&w);
    jw_kstr(&w, "t", "ok");
    jw_key(&w, "ctx");
    jw_ctx_info(&w, info);
    jw_obj_end(&w);
    jw_line(&w);
}

/* ctx create: start a context, print its (possibly generated) name. */
static int cmd_create(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {{"cwd", required_argument, NULL, 'C'},
                                             {"env", required_argument, NULL, 'e'},
                                             {"package", required_argument, NULL, 'p'},
                                             {"tier", required_argument, NULL, 't'},
                                             {"policy", required_argument, NULL, 'P'},
                                             COMMON_LONGOPTS,
                                             {0}};
    env_list env = {0}, policy = {0};
    const char *tier = NULL;
    const char *cwd = NULL;
    const char **pkgs = NULL;
    size_t npkgs = 0;
    int opt, r = CONTINUE;
    while (r == CONTINUE && (opt = getopt_long(argc, argv, ":e:p:t:P:h", longopts, NULL)) != -1) {
        if (opt == 'C') {
            cwd = optarg;
        } else if (opt == 'e') {
            r = env_add(&env, cmd, optarg);
        } else if (opt == 't') {
            tier = optarg;
        } else if (opt == 'P') {
            r = env_add(&policy, cmd, optarg);
        } else if (opt == 'p') {
            pkgs = mem_realloc(pkgs, (npkgs + 1) * sizeof *pkgs);
            pkgs[npkgs++] = optarg;
        } else {
            r = common_opt(cli, cmd, opt, argv);
        }
    }
    if (r == CONTINUE)
        r = positionals(cmd, argc, argv, 0, 1);
    if (r == CONTINUE)
        r = ctx_need_client(cli);
    if (r == CONTINUE) {
        /* The daemon wants an absolute path; resolve a relative one here. */
        char *abs = cwd ? realpath(cwd, NULL) : NULL;
        ctxd_ctx_info info;
        ctxd_create_opts o = {.name = optind < argc ? argv[optind] : NULL,
                              .cwd = abs ? abs : cwd,
                              .env = env.kv,
                              .nenv = env.n,
                              .packages = pkgs,
                              .npackages = npkgs,
                              .tier = tier,
                              .policy = policy.kv,
                              .npolicy = policy.n};
        int rc = ctxd_ctx_create_ex(cli->client, &o, &info);
        free(abs);
        if (rc == 0 && cli->json)
            json_ok_ctx(&info);
        else if (rc == 0)
            printf("%s\n", info.name);
        r = rc == 0 ? EX_OK : ctx_report(cli, rc);
    }
    free(env.kv);
    free(policy.kv);
    free(pkgs);
    return r;
}

/* ---- ctx cp -------------------------------------------------------------- */

/* One side of a copy: a context's file (ctx set) or a local one. */
typedef struct cp_end {
    char ctx[80]; /* "" for a local file */
    const char *path;
} cp_end;

/* CTX:PATH when the part before the first ':' is a context name (or empty:
 * 'default'); anything else is local. */
static void cp_parse(const char *arg, cp_end *e)
{
    e->ctx[0] = '\0';
    e->path = arg;
    const char *colon = strchr(arg, ':');
    if (!colon || (size_t)(colon - arg) >= sizeof e->ctx - 1)
        return;
    for (const char *p = arg; p < colon; p++)
        if (!(*p == '_' || *p == '.' || *p == '-' || (*p >= '0' && *p <= '9') ||
              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return;
    if (colon == arg)
        snprintf(e->ctx, sizeof e->ctx, "default");
    else
        snprintf(e->ctx, sizeof e->ctx, "%.*s", (int)(colon - arg), arg);
    e->path = colon + 1;
}

/* The last component of a path ("" for none). */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Reads until buf is full or end of file; -1 on error. */
static ssize_t read_full(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Local file (or stdin) -> the context's file, one file.put per chunk. */
static int cp_in(ctx_cli *cli, const char *local, const char *ctx, const char *path,
                 uint64_t *total)
{
    int fd = strcmp(local, "-") == 0 ? 0 : open(local, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "ctx: %s: %s\n", local, strerror(errno));
        return EX_USAGE;
    }
    char *buf = mem_alloc(CTXD_FILE_CHUNK);
    int r = EX_OK;
    uint64_t off = 0;
    for (;;) {
        ssize_t n = read_full(fd, buf, CTXD_FILE_CHUNK);
        if (n < 0) {
            fprintf(stderr, "ctx: %s: %s\n", local, strerror(errno));
            r = EX_USAGE;
            break;
        }
        /* The first put is sent even for an empty file: it creates it. */
        if (n == 0 && off > 0)
            break;
        int rc = ctxd_file_put(cli->client, ctx, path, off, buf, (size_t)n, NULL);
        if (rc < 0) {
            r = ctx_report(cli, rc);
            break;
        }
        off += (uint64_t)n;
        if ((size_t)n < CTXD_FILE_CHUNK)
            break;
    }
    free(buf);
    if (fd > 0)
        close(fd);
    *total = off;
    return r;
}

/* The context's file -> a local file (or stdout), one file.get per chunk. */
static int cp_out(ctx_cli *cli, const char *ctx, const char *path, const char *local,
                  uint64_t *total)
{
    bool to_stdout = strcmp(local, "-") == 0;
    int fd = -1;
    uint64_t off = 0;
    for (;;) {
        const void *data;
        size_t n;
        bool eof;
        int rc = ctxd_file_get(cli->client, ctx, path, off, CTXD_FILE_CHUNK, &data, &n, NULL, &eof);
        if (rc < 0) {
            if (fd > 1)
                close(fd);
            return ctx_report(cli, rc);
        }
        if (fd < 0) { /* opened once the daemon found the file */
            fd = to_stdout ? 1 : open(local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0) {
                fprintf(stderr, "ctx: %s: %s\n", local, strerror(errno));
                return EX_USAGE;
            }
        }
        for (size_t done = 0; done < n;) {
            ssize_t w = write(fd, (const char *)data + done, n - done);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                fprintf(stderr, "ctx: %s: %s\n", to_stdout ? "stdout" : local, strerror(errno));
                if (fd > 1)
                    close(fd);
                return EX_USAGE;
            }
            done += (size_t)w;
        }
        off += n;
        if (eof || n == 0)
            break;
    }
    if (fd > 1 && close(fd) < 0) {
        fprintf(stderr, "ctx: %s: %s\n", local, strerror(errno));
        return EX_USAGE;
    }
    *total = off;
    return EX_OK;
}

/* ctx cp SRC DST: exactly one side is CTX:PATH. */
static int cmd_cp(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = simple_opts(cli, cmd, argc, argv, 2, 2);
    if (r != CONTINUE)
        return r;
    cp_end src, dst;
    cp_parse(argv[optind], &src);
    cp_parse(argv[optind + 1], &dst);
    if (!src.ctx[0] == !dst.ctx[0])
        return usage(cmd, "exactly one of SRC and DST must be CTX:PATH");
    char *joined = NULL;
    uint64_t total = 0;
    if (dst.ctx[0]) {
        /* CTX: or CTX:dir/ takes the local file's name. */
        if (dst.path[0] == '\0' || dst.path[strlen(dst.path) - 1] == '/') {
            if (strcmp(src.path, "-") == 0 || !base_name(src.path)[0])
                return usage(cmd, "'%s' needs a file name", argv[optind + 1]);
            joined = mem_alloc(strlen(dst.path) + strlen(base_name(src.path)) + 1);
            sprintf(joined, "%s%s", dst.path, base_name(src.path));
            dst.path = joined;
        }
        /* Copying in creates the context on first use, as `run -c` does
         * (also 'default', which file.put does not make). */
        int rc = ctxd_ctx_create(cli->client, dst.ctx, NULL, NULL, 0, NULL);
        const char *code;
        ctxd_last_error(cli->client, &code, NULL);
        if (rc < 0 && !(rc == CTXD_EREFUSED && strcmp(code, "exists") == 0))
            r = ctx_report(cli, rc);
        else
            r = cp_in(cli, src.path, dst.ctx, dst.path, &total);
    } else {
        struct stat st;
        if (strcmp(dst.path, "-") != 0 && stat(dst.path, &st) == 0 && S_ISDIR(st.st_mode)) {
            joined = mem_alloc(strlen(dst.path) + strlen(base_name(src.path)) + 2);
            sprintf(joined, "%s/%s", dst.path, base_name(src.path));
            dst.path = joined;
        }
        r = cp_out(cli, src.ctx, src.path, dst.path, &total);
    }
    free(joined);
    if (r == EX_OK && cli->json)
        printf("{\"t\":\"ok\",\"bytes\":%llu}\n", (unsigned long long)total);
    return r;
}

/* ---- ctx pip ------------------------------------------------------------- */

/* ctx pip [-c CTX] PKG...: pip.install into one context. */
static int cmd_pip(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"ctx", required_argument, NULL, 'c'}, COMMON_LONGOPTS, {0}};
    const char *ctx = NULL;
    int opt, r = CONTINUE;
    while (r == CONTINUE && (opt = getopt_long(argc, argv, ":c:h", longopts, NULL)) != -1) {
        if (opt == 'c')
            ctx = optarg;
        else
            r = common_opt(cli, cmd, opt, argv);
    }
    if (r == CONTINUE)
        r = positionals(cmd, argc, argv, 1, 1 << 20);
    if (r == CONTINUE)
        r = ctx_need_client(cli);
    if (r == CONTINUE)
        r = ctx_ensure_context(cli, ctx);
    if (r != CONTINUE)
        return r;
    const ctxd_package *pkgs;
    size_t n;
    int rc = ctxd_pip_install(cli->client, ctx, (const char *const *)argv + optind,
                              (size_t)(argc - optind), &pkgs, &n);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_key(&w, "packages");
        jw_arr(&w);
        for (size_t i = 0; i < n; i++) {
            jw_obj(&w);
            jw_kstr(&w, "name", pkgs[i].name);
            jw_kbool(&w, "cached", pkgs[i].cached);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
        jw_line(&w);
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s %s\n", pkgs[i].name, pkgs[i].cached ? "cached" : "installed");
    }
    return EX_OK;
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

static double unix_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
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
        return ctx_report(cli, rc);
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_key(&w, "contexts");
        jw_arr(&w);
        for (size_t i = 0; i < n; i++)
            jw_ctx_info(&w, &infos[i]);
        jw_arr_end(&w);
        jw_obj_end(&w);
        jw_line(&w);
        return EX_OK;
    }
    int width = 4;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(infos[i].name) > width)
            width = (int)strlen(infos[i].name);
    double now = unix_now();
    printf("%-*s  %-5s  %-7s  %7s  %4s  %6s  %6s  %9s  %s\n", width, "NAME", "STATE", "TIER", "PID",
           "INC", "RUNS", "QUEUED", "MEMORY", "AGE");
    for (size_t i = 0; i < n; i++) {
        const ctxd_ctx_info *c = &infos[i];
        char pid[24], age[32], mem[32];
        snprintf(pid, sizeof pid, "%llu", (unsigned long long)c->pid);
        printf("%-*s  %-5s  %-7s  %7s  %4llu  %6llu  %6llu  %9s  %s\n", width, c->name, c->state,
               c->tier, c->pid ? pid : "-", (unsigned long long)c->incarnation,
               (unsigned long long)c->execution_count, (unsigned long long)c->queued,
               c->pss ? ctx_format_bytes(c->pss, mem, sizeof mem) : "-",
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
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json)
        printf("{\"t\":\"ok\"}\n");
    return EX_OK;
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
        return ctx_report(cli, rc);
    if (cli->json)
        json_ok_ctx(&info);
    else
        printf("%s: restarted (incarnation %llu, pid %llu)\n", info.name,
               (unsigned long long)info.incarnation, (unsigned long long)info.pid);
    return EX_OK;
}

/* ctx fork: clone a live context. It waits behind SRC's queue, so the
 * reply may take as long as the runs before it. */
static int cmd_fork(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = simple_opts(cli, cmd, argc, argv, 1, 2);
    if (r != CONTINUE)
        return r;
    /* No deadline: ctxd_ctx_fork waits behind SRC's runs while the daemon
     * answers liveness checks. */
    ctxd_ctx_info info;
    int rc = ctxd_ctx_fork(cli->client, argv[optind], optind + 1 < argc ? argv[optind + 1] : NULL,
                           &info);
    if (rc < 0)
        return ctx_report(cli, rc);
    if (cli->json)
        json_ok_ctx(&info);
    else
        printf("%s\n", info.name);
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
        return ctx_report(cli, rc);
    if (cli->json)
        printf("{\"t\":\"ok\",\"interrupted\":%s}\n", interrupted ? "true" : "false");
    else
        printf(interrupted ? "%s: interrupted\n" : "%s: nothing was running\n", name);
    return EX_OK;
}

/* The limits of a hello reply as a JSON object. */
static void json_limits(jw *w, const ctxd_hello_info *h)
{
    jw_key(w, "limits");
    jw_obj(w);
    jw_kuint(w, "max_request_bytes", h->max_request_bytes);
    jw_kuint(w, "max_code_bytes", h->max_code_bytes);
    jw_kuint(w, "max_queue", h->max_queue);
    jw_kuint(w, "max_contexts", h->max_contexts);
    jw_knum(w, "default_timeout", h->default_timeout);
    jw_knum(w, "kill_grace", h->kill_grace);
    jw_kuint(w, "max_output", h->max_output);
    jw_knum(w, "idle_ttl", h->idle_ttl);
    if (h->on_disconnect[0])
        jw_kstr(w, "on_disconnect", h->on_disconnect);
    jw_obj_end(w);
}

/* ctx stats: the daemon's `stats` counters when it has the request, and
 * totals over the live contexts from hello and ctx.list. */
static int cmd_stats(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    int r = simple_opts(cli, cmd, argc, argv, 0, 0);
    if (r != CONTINUE)
        return r;
    ctxd_hello_info h;
    int rc = ctxd_hello(cli->client, &h);
    if (rc < 0)
        return ctx_report(cli, rc);
    /* The next requests release hello's strings: copy what is shown. */
    char server[64], version[64], instance[64], ondisc[32];
    snprintf(server, sizeof server, "%s", h.server ? h.server : "");
    snprintf(version, sizeof version, "%s", h.version);
    snprintf(instance, sizeof instance, "%s", h.instance);
    snprintf(ondisc, sizeof ondisc, "%s", h.on_disconnect);
    h.server = server, h.version = version, h.instance = instance, h.on_disconnect = ondisc;
    h.versions = NULL;
    ctxd_stats_info st;
    rc = ctxd_stats(cli->client, &st);
    const char *code;
    ctxd_last_error(cli->client, &code, NULL);
    bool have_stats = rc == 0;
    if (rc < 0 && !(rc == CTXD_EREFUSED && strcmp(code, "unknown_type") == 0))
        return ctx_report(cli, rc);
    const ctxd_ctx_info *infos;
    size_t n;
    rc = ctxd_ctx_list(cli->client, &infos, &n);
    if (rc < 0)
        return ctx_report(cli, rc);
    uint64_t idle = 0, busy = 0, dead = 0, queued = 0, execs = 0, pss = 0, rss = 0;
    for (size_t i = 0; i < n; i++) {
        const ctxd_ctx_info *c = &infos[i];
        idle += strcmp(c->state, "idle") == 0;
        busy += strcmp(c->state, "busy") == 0;
        dead += strcmp(c->state, "dead") == 0;
        queued += c->queued;
        execs += c->execution_count;
        pss += c->pss;
        rss += c->rss;
    }
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "stats");
        jw_kstr(&w, "endpoint", ctxd_endpoint(cli->client));
        jw_kstr(&w, "server", h.server);
        jw_kstr(&w, "version", h.version);
        jw_kuint(&w, "pid", h.pid);
        jw_kstr(&w, "instance", h.instance);
        jw_kuint(&w, "contexts", n);
        jw_kuint(&w, "idle", idle);
        jw_kuint(&w, "busy", busy);
        jw_kuint(&w, "dead", dead);
        jw_kuint(&w, "queued", queued);
        jw_kuint(&w, "executions", execs);
        jw_kuint(&w, "pss", pss);
        jw_kuint(&w, "rss", rss);
        json_limits(&w, &h);
        jw_key(&w, "daemon");
        if (!have_stats) {
            jw_null(&w);
        } else {
            jw_obj(&w);
            jw_knum(&w, "uptime", st.uptime);
            jw_key(&w, "contexts");
            jw_obj(&w);
            jw_kuint(&w, "live", st.live);
            jw_kuint(&w, "busy", st.busy);
            jw_kuint(&w, "queued", st.queued);
            jw_kuint(&w, "created", st.created);
            jw_obj_end(&w);
            jw_key(&w, "counters");
            jw_obj(&w);
            const struct {
                const char *name;
                uint64_t v;
            } cs[] = {{"requests", st.requests},
                      {"refused", st.refused},
                      {"runs", st.runs},
                      {"runs_ok", st.runs_ok},
                      {"runs_error", st.runs_error},
                      {"runs_interrupted", st.runs_interrupted},
                      {"runs_timeout", st.runs_timeout},
                      {"runs_died", st.runs_died},
                      {"runs_aborted", st.runs_aborted},
                      {"runs_shutdown", st.runs_shutdown},
                      {"stdout_bytes", st.stdout_bytes},
                      {"stderr_bytes", st.stderr_bytes},
                      {"truncated_bytes", st.truncated_bytes},
                      {"workers_spawned", st.workers_spawned},
                      {"worker_deaths", st.worker_deaths}};
            for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
                jw_kuint(&w, cs[i].name, cs[i].v);
            jw_obj_end(&w);
            jw_obj_end(&w);
        }
        jw_obj_end(&w);
        jw_line(&w);
        return EX_OK;
    }
    char b1[32], b2[32], b3[32];
    printf("daemon      %s %s (pid %llu, instance %s)\n", h.server, h.version,
           (unsigned long long)h.pid, h.instance[0] ? h.instance : "?");
    printf("endpoint    %s\n", ctxd_endpoint(cli->client));
    if (have_stats) {
        char up[32];
        printf("uptime      %s\n", format_age(st.uptime, up, sizeof up));
    }
    printf("contexts    %zu of at most %llu: %llu idle, %llu busy, %llu dead", n,
           (unsigned long long)h.max_contexts, (unsigned long long)idle, (unsigned long long)busy,
           (unsigned long long)dead);
    if (have_stats)
        printf(" (%llu created since start)", (unsigned long long)st.created);
    printf("\nruns        %llu running, %llu queued (at most %llu per context)\n",
           (unsigned long long)busy, (unsigned long long)queued, (unsigned long long)h.max_queue);
    printf("executions  %llu (counted since each live worker started)\n",
           (unsigned long long)execs);
    printf("memory      %s PSS, %s RSS (workers alive now)\n", ctx_format_bytes(pss, b1, sizeof b1),
           ctx_format_bytes(rss, b2, sizeof b2));
    if (!have_stats) {
        printf("note        computed from 'hello' and 'ctx.list': this daemon has no "
               "'stats' request\n");
        return EX_OK;
    }
    printf("since start %llu runs: %llu ok, %llu error, %llu interrupted, %llu timeout, "
           "%llu died, %llu aborted, %llu shutdown\n",
           (unsigned long long)st.runs, (unsigned long long)st.runs_ok,
           (unsigned long long)st.runs_error, (unsigned long long)st.runs_interrupted,
           (unsigned long long)st.runs_timeout, (unsigned long long)st.runs_died,
           (unsigned long long)st.runs_aborted, (unsigned long long)st.runs_shutdown);
    printf("            %llu requests (%llu refused); workers %llu spawned, %llu died\n",
           (unsigned long long)st.requests, (unsigned long long)st.refused,
           (unsigned long long)st.workers_spawned, (unsigned long long)st.worker_deaths);
    printf("            output %s stdout, %s stderr, %s cut by max_output\n",
           ctx_format_bytes(st.stdout_bytes, b1, sizeof b1),
           ctx_format_bytes(st.stderr_bytes, b2, sizeof b2),
           ctx_format_bytes(st.truncated_bytes, b3, sizeof b3));
    return EX_OK;
}

/* ctx repl: the interactive session. */
static int cmd_repl(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {{"ctx", required_argument, NULL, 'c'},
                                             {"timeout", required_argument, NULL, 't'},
                                             {"no-color", no_argument, NULL, 'N'},
                                             COMMON_LONGOPTS,
                                             {0}};
    const char *ctx = NULL;
    double timeout = 0;
    bool plain = false;
    int opt, r = CONTINUE;
    while (r == CONTINUE && (opt = getopt_long(argc, argv, ":c:t:h", longopts, NULL)) != -1) {
        if (opt == 'c')
            ctx = optarg;
        else if (opt == 't')
            r = parse_seconds(cmd, optarg, &timeout);
        else if (opt == 'N')
            plain = true;
        else
            r = common_opt(cli, cmd, opt, argv);
    }
    if (r == CONTINUE)
        r = positionals(cmd, argc, argv, 0, 0);
    if (r == CONTINUE && cli->json)
        r = usage(cmd, "--json does not apply to the interactive repl (use 'ctx run --json')");
    if (r == CONTINUE)
        r = ctx_need_client(cli);
    if (r == CONTINUE)
        r = ctx_ensure_context(cli, ctx);
    if (r == CONTINUE)
        r = ctx_repl(cli, ctx, timeout, plain);
    return r;
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
        return ctx_report(cli, rc);
    if (cli->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_kstr(&w, "t", "ok");
        jw_kstr(&w, "server", h.server);
        jw_kstr(&w, "version", h.version);
        jw_kuint(&w, "protocol", h.protocol);
        jw_key(&w, "versions");
        jw_arr(&w);
        for (size_t i = 0; i < h.nversions; i++)
            jw_uint(&w, h.versions[i]);
        jw_arr_end(&w);
        jw_kuint(&w, "pid", h.pid);
        jw_kstr(&w, "instance", h.instance);
        json_limits(&w, &h);
        jw_kstr(&w, "endpoint", ctxd_endpoint(cli->client));
        jw_obj_end(&w);
        jw_line(&w);
        return EX_OK;
    }
    printf("server    %s %s (pid %llu, instance %s)\n", h.server, h.version,
           (unsigned long long)h.pid, h.instance[0] ? h.instance : "?");
    printf("endpoint  %s\n", ctxd_endpoint(cli->client));
    printf("protocol  %llu (speaks", (unsigned long long)h.protocol);
    for (size_t i = 0; i < h.nversions; i++)
        printf(" %llu", (unsigned long long)h.versions[i]);
    printf(")\nlimits    max_request_bytes %llu, max_code_bytes %llu, max_queue %llu,\n"
           "          max_contexts %llu, default_timeout %g s, kill_grace %g s\n",
           (unsigned long long)h.max_request_bytes, (unsigned long long)h.max_code_bytes,
           (unsigned long long)h.max_queue, (unsigned long long)h.max_contexts, h.default_timeout,
           h.kill_grace);
    char cap[32], ttl[32];
    snprintf(ttl, sizeof ttl, "%g s", h.idle_ttl);
    printf("          max_output %s, idle_ttl %s, on_disconnect %s\n",
           h.max_output ? ctx_format_bytes(h.max_output, cap, sizeof cap) : "none",
           h.idle_ttl > 0 ? ttl : "never", h.on_disconnect[0] ? h.on_disconnect : "finish");
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
    if (argc < 2) {
        print_main_help(stdout);
        return EX_OK;
    }
    const ctx_cmd *target =
        strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ? cmd : find_cmd(argv[1]);
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
        } else if (opt == 'J') {
            cli.json = true;
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
