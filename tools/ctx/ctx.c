/* ctx: the command-line client of the ctxd daemon, built on libctxd.
 *
 * This file holds main, the global options, the command table
 * (ctx_cmd_table[]: from it come ctx --help, ctx COMMAND --help and the
 * dispatch), the option helpers every command uses and the error
 * reporting. Each command parses its own options with getopt_long and
 * returns the process exit status; the commands live in one file per
 * family (ctx_cmd_*.c, as tmux's cmd-*.c), the REPL in ctx_repl.c (line
 * editor on libedit: ctx_edit.c), JSON output in ctx_json.c. */
#include "ctx.h"
#include "mem.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ctx help (defined below, with the lookup). */
static ctx_cmd_fn cmd_help;

/* Every command: its name (and other names), synopsis, handler, the line
 * of ctx --help and the text of ctx COMMAND --help. The handlers live in
 * one file per command family: ctx_cmd_run.c (run), ctx_cmd_ctx.c
 * (create, ls, rm, restart, fork, interrupt), ctx_cmd_files.c (cp),
 * ctx_cmd_pkgs.c (pip), ctx_cmd_info.c (hello, stats), ctx_repl.c (repl),
 * ctx_cmd_kernel.c (kernel), ctx_cmd_keygen.c (keygen); help is here. The
 * order is the order of ctx --help. */
const struct ctx_cmd ctx_cmd_table[] = {
    {.name = "run",
     .usage = "[-c CTX] [-t SECONDS] [--silent] [--stop-on-error] [-e KEY=VAL]... [--base64] "
              "(CODE | -f FILE [ARGS...] | -)",
     .handler = ctx_cmd_run,
     .summary = "run Python code in a context, streaming its output",
     .help = "Output is written as it arrives: the code's stdout to stdout, its stderr to\n"
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
    {.name = "ls",
     .usage = "",
     .handler = ctx_cmd_ctx_ls,
     .summary = "list contexts (names in natural order: exp-2 before exp-10)",
     .help = "Columns: NAME, STATE (idle, busy, dead), PID (- when dead), INC (worker\n"
             "incarnation), RUNS (execution count), QUEUED (runs waiting), MEMORY (the\n"
             "worker's proportional set size, PSS: shared pages counted in proportion;\n"
             "- when dead), AGE (since the context was created).\n\n"
             "With --json: {\"t\":\"ok\",\"contexts\":[INFO,..]}, INFO as in\n"
             "proto/PROTOCOL.md (name, cwd, state, pid, incarnation, created,\n"
             "execution_count, queued, rss, pss [, last_death]; bytes, Unix time).\n"},
    {.name = "create",
     .usage = "[NAME] [--cwd DIR] [-e KEY=VAL]... [-p PKG]... [-t TIER] [-P FIELD=VALUE]...\n"
              "       [--from-snapshot CTX/NAME] [--autosnapshot run|SECONDS]",
     .handler = ctx_cmd_ctx_create,
     .summary = "start a new context (prints its name)",
     .help =
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
         "                       -P filesystem_write_roots=[/srv/out] (PROTOCOL.md section 5)\n"
         "      --from-snapshot CTX/NAME\n"
         "                       start from a snapshot's state ('ctx snapshots'); the tier\n"
         "                       and policy are this command's, not the snapshot's\n"
         "      --autosnapshot run|SECONDS\n"
         "                       snapshot the state (as CTX/auto) after each run that ends ok,\n"
         "                       or at most every SECONDS; after a daemon restart the context\n"
         "                       comes back with that state\n\n"
         "With --json: {\"t\":\"ok\",\"ctx\":INFO}.\n"},
    {.name = "cp",
     .usage = "SRC DST",
     .handler = ctx_cmd_files_cp,
     .summary = "copy a file into or out of a context's directory",
     .help = "One of SRC and DST is CTX:PATH, a file relative to the directory of context\n"
             "CTX (its cwd at creation; ':PATH' means 'default'); the other is a local\n"
             "file, or '-' for stdin / stdout. A local name holding ':' must be written\n"
             "with a '/' before the ':' (./a:b). When the destination is a local\n"
             "directory, or CTX:PATH ends in '/' (or is empty), the source's file name\n"
             "is appended. The file moves in 4 MiB chunks (file.put / file.get), so a\n"
             "large file is never held whole in memory. Paths that would leave the\n"
             "context's directory ('..', symbolic links) are refused (exit 7). Copying\n"
             "into a context that does not exist creates it.\n\n"
             "With --json: {\"t\":\"ok\",\"bytes\":N}.\n"},
    {.name = "pip",
     .usage = "[-c CTX] PKG...",
     .handler = ctx_cmd_pkgs_pip,
     .summary = "install packages into one context",
     .help = "Installs each PKG (name, name==1.0, name[extra]>=1; at most 64) from the\n"
             "daemon's wheelhouse or index (ctxd --wheelhouse / --package-index) into\n"
             "the context, where it can be imported from the next run on, and nowhere\n"
             "else. The daemon caches installs: a package another context already got\n"
             "is linked without running pip. Prints one line per package: its name and\n"
             "'installed' or 'cached'. pip's own message comes back when it fails\n"
             "(exit 7).\n\n"
             "options:\n"
             "  -c, --ctx CTX        context (default: default); created when missing\n\n"
             "With --json: {\"t\":\"ok\",\"packages\":[{\"name\":..,\"cached\":BOOL},..]}.\n"},
    {.name = "rm",
     .usage = "NAME",
     .handler = ctx_cmd_ctx_rm,
     .summary = "delete a context, killing its worker and its processes",
     .help = "Its running and queued runs end as aborted. 'default' cannot be deleted.\n"
             "With --json: {\"t\":\"ok\"}.\n"},
    {.name = "restart",
     .usage = "[NAME]",
     .handler = ctx_cmd_ctx_restart,
     .summary = "replace a context's worker with a fresh interpreter",
     .help = "Empty globals, execution count 0; running and queued runs end as aborted.\n"
             "NAME defaults to 'default'. With --json: {\"t\":\"ok\",\"ctx\":INFO}.\n"},
    {.name = "fork",
     .usage = "SRC [NAME]",
     .handler = ctx_cmd_ctx_fork,
     .summary = "clone a live context (globals, modules, cwd) into a new one",
     .help = "The worker of SRC forks: the new context starts with a copy-on-write copy\n"
             "of its state and the two diverge from then on. The fork waits behind the\n"
             "runs queued on SRC. NAME is generated when absent; the new name is\n"
             "printed. With --json: {\"t\":\"ok\",\"ctx\":INFO}.\n"},
    {.name = "snapshot",
     .usage = "CTX [NAME]",
     .handler = ctx_cmd_snap_snapshot,
     .summary = "save a context's Python state to a snapshot file",
     .help = "Writes the globals (functions and classes by value), the modules imported,\n"
             "cwd, environment and execution count to STATE_DIR/snapshots/CTX/NAME (NAME\n"
             "generated when absent). Prints the snapshot's id and size; each global that\n"
             "could not be saved (an open socket, a thread, a generator...) is named on\n"
             "stderr. Waits behind the runs queued on CTX. With --json:\n"
             "{\"t\":\"ok\",\"snapshot\":{id,ctx,name,size,created},\"unsaved\":[..]}.\n"},
    {.name = "restore",
     .usage = "CTX SNAPSHOT",
     .handler = ctx_cmd_snap_restore,
     .summary = "replace a context's state with a snapshot's",
     .help = "SNAPSHOT is NAME (one of CTX's) or CTX2/NAME. A snapshot that is corrupt or\n"
             "was made by another Python or other package versions is refused and the\n"
             "context keeps its state. See also 'ctx create --from-snapshot'.\n"},
    {.name = "snapshots",
     .usage = "[CTX]",
     .handler = ctx_cmd_snap_list,
     .summary = "list snapshots (of one context, or all)",
     .help = "One line per snapshot: its id (CTX/NAME), size and creation time (local),\n"
             "under an ID SIZE CREATED header on a terminal. With --json:\n"
             "{\"t\":\"ok\",\"snapshots\":[{id,ctx,name,size,created},..]}.\n"},
    {.name = "snapshot-rm",
     .usage = "CTX/NAME",
     .handler = ctx_cmd_snap_rm,
     .summary = "delete a snapshot",
     .help = "Snapshots outlive their context; this removes one.\n"},
    {.name = "snapshot-export",
     .usage = "CTX/NAME",
     .handler = ctx_cmd_snap_export,
     .summary = "export a snapshot for another daemon, its writer's tier kept",
     .help = "Writes STATE_DIR/exports/CTX/NAME on the daemon's host: the snapshot with its\n"
             "writer's tier marked under the operator's key STATE_DIR/export.key (16 to\n"
             "4096 bytes; the same file on both daemons). Prints the file's path and the\n"
             "tier. Copy the file (cp, scp) to the other daemon's\n"
             "STATE_DIR/imports/CTX/NAME and run 'ctx snapshot-import' there. A snapshot\n"
             "copied into STATE_DIR/snapshots by hand has no mark: it restores only into\n"
             "sandbox contexts. With --json: {\"t\":\"ok\",\"snapshot\",\"path\",\"tier\"}.\n"},
    {.name = "snapshot-import",
     .usage = "CTX/NAME",
     .handler = ctx_cmd_snap_import,
     .summary = "make an exported snapshot one of this daemon's",
     .help = "Checks STATE_DIR/imports/CTX/NAME (from 'ctx snapshot-export') with\n"
             "STATE_DIR/export.key and makes it snapshot CTX/NAME, its writer's tier kept:\n"
             "a file changed or made under another key is refused. With --json:\n"
             "{\"t\":\"ok\",\"snapshot\":{id,ctx,name,size,created},\"tier\":TIER}.\n"},
    {.name = "interrupt",
     .usage = "[NAME]",
     .handler = ctx_cmd_ctx_interrupt,
     .summary = "raise KeyboardInterrupt in the run executing on a context",
     .help = "Whoever started the run; queued runs are not touched. NAME defaults to\n"
             "'default'. Exit status 0 either way; the output (or --json's\n"
             "{\"t\":\"ok\",\"interrupted\":BOOL}) says whether something was running.\n"},
    {.name = "stats",
     .usage = "",
     .handler = ctx_cmd_info_stats,
     .summary = "show daemon-wide figures: contexts, runs, queue, memory, counters",
     .help = "Totals over the live contexts come from 'hello' and 'ctx.list' (state,\n"
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
    {.name = "repl",
     .usage = "[-c CTX] [-t SECONDS] [--no-color] [--autoindent]",
     .handler = ctx_repl_cmd,
     .summary = "an interactive, notebook-like session on a context",
     .help = "Type Python; a block runs once it is complete, as Python's own REPL\n"
             "decides (the context itself is asked, with a silent run that touches no\n"
             "globals; an empty line ends an indented block). The prompt [n]: shows the\n"
             "next execution count; a value is shown as Out[n]: and errors in red\n"
             "(colours only on a terminal, and not with NO_COLOR or --no-color).\n\n"
             "keys: Enter runs or continues the block; Ctrl-C while code runs\n"
             "interrupts it (KeyboardInterrupt, the context and its globals are kept;\n"
             "a third Ctrl-C stops waiting), Ctrl-C at the prompt clears the input;\n"
             "Ctrl-D (or 'exit') leaves. The line editor is libedit: emacs keys, or\n"
             "vi mode and other bindings through ~/.editrc or $EDITRC ('ctx:bind -v').\n"
             "Tab completes names from the context's live globals (at the start of a\n"
             "line it indents); Ctrl-R searches the history, shown as\n"
             "(reverse-i-search)`QUERY': ENTRY (Ctrl-R again: older, Ctrl-G: back, any\n"
             "other key ends the search and acts); Up/Down browse it. A\n"
             "multi-line block is one history entry; the history is kept across\n"
             "sessions in $CTX_HISTORY, else ~/.ctx_history (CTX_HISTORY='' for none).\n"
             "A block pasted into the terminal is one cell (blank lines inside\n"
             "included); Enter runs it. With --autoindent (or CTX_REPL_AUTOINDENT=1;\n"
             "%autoindent toggles it) a line after one ending in ':' starts four\n"
             "spaces in, one after return/pass/raise/break/continue four fewer.\n"
             "A value that spans lines (a DataFrame) starts below its Out[n]:.\n"
             "NAME? shows the context's description of NAME, NAME?? with its source.\n"
             "Images (display(), matplotlib figures) are saved to files whose paths are\n"
             "printed (as with ctx run; PNG shown inline too when TERM is xterm-kitty\n"
             "or TERM_PROGRAM is iTerm.app); text/html shows as its text/plain;\n"
             "input() and getpass() read a line from the terminal.\n"
             "Without a terminal on stdin, lines are read plainly (no prompts).\n"
             "CTX_REPL_COMPLETE=local decides completeness locally instead (brackets,\n"
             "strings, ':' and '\\' line ends, decorators, indented blocks until an\n"
             "empty line), without asking the context; so does ctx when the context\n"
             "does not answer within 3 s (e.g. busy with another client's run).\n\n"
             "options:\n"
             "  -c, --ctx CTX        context (default: default); created when missing\n"
             "  -t, --timeout SECS   timeout of each run (default 0: none)\n"
             "      --no-color       no colours\n"},
    {.name = "hello",
     .usage = "",
     .handler = ctx_cmd_info_hello,
     .summary = "show the daemon's version, pid, limits, tiers, preloads and packages",
     .help = "The tiers offered (ctx create --tier), the preloaded modules (and configured\n"
             "ones not loaded), and whether packages can be installed (ctx pip).\n\n"
             "With --json: the hello reply ({\"t\":\"ok\",\"server\":..,\"version\":..,\n"
             "\"protocol\":..,\"versions\":[..],\"pid\":..,\"instance\":..,\"limits\":{..},\n"
             "\"tiers\":{TIER:[POLICY FIELD..]},\"preloads\":{\"loaded\":[..],\"skipped\":[..]},\n"
             "\"packages\":{\"offered\":BOOL,\"sources\":[..]}) plus \"endpoint\".\n"},
    {.name = "keygen",
     .usage = "[FILE]",
     .handler = ctx_cmd_keygen,
     .summary = "make a CurveZMQ client key pair for tcp:// endpoints",
     .help = "Writes a new secret key to FILE (default ~/.config/ctxd/client.key, mode\n"
             "0600; an existing file is never overwritten) and prints the public key: add\n"
             "that line to the daemon's STATE_DIR/authorized_keys. Clients then connect\n"
             "to tcp:// with CTXD_SERVER_KEY set to the daemon's public key (or\n"
             "CTXD_SERVER_KEY_FILE to its server.pub) and CTXD_CLIENT_KEY_FILE to FILE\n"
             "(when not the default).\n"},
    {.name = "kernel",
     .usage = "install [--user | --prefix DIR | --sys-prefix] [--context NAME] [--name NAME]",
     .handler = ctx_cmd_kernel,
     .summary = "install the Jupyter kernelspec 'ctxd' (notebooks run in ctxd contexts)",
     .help = "Installs the kernelspec with the kernel's own installer (python3 -m\n"
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
    {.name = "help",
     .usage = "[COMMAND]",
     .handler = cmd_help,
     .summary = "show help for ctx or one command",
     .help = ""},
};
const size_t ctx_cmd_count = sizeof ctx_cmd_table / sizeof ctx_cmd_table[0];

static const char ctx_exit_help[] =
    "exit status:\n"
    "  0  ok                       5  the worker died (globals lost)\n"
    "  1  the code raised          6  aborted (context deleted/restarted/died, an\n"
    "  2  usage error                 earlier run failed with --stop-on-error, or\n"
    "                                 the daemon shut down during the run)\n"
    "  3  timeout                  7  refused by the daemon (err reply)\n"
    "  4  interrupted              8  daemon unreachable (or it broke the protocol)\n"
    "                              9  authentication failed (tcp://: the daemon refused\n"
    "                                 the client key, or CTXD_SERVER_KEY is wrong)\n";

static const char ctx_global_help[] =
    "global options (before or after the command):\n"
    "  --endpoint EP   daemon endpoint; default $CTXD_ENDPOINT, else\n"
    "                  ipc://$XDG_RUNTIME_DIR/ctxd/ctxd.sock (ipc:///run/ctxd/ctxd.sock\n"
    "                  when XDG_RUNTIME_DIR is unset)\n"
    "  --json          machine-readable output: one JSON object per line on stdout\n"
    "                  (per event for run; failures as {\"t\":\"err\",\"code\",\"message\"})\n"
    "  -h, --help      show help\n"
    "tcp:// endpoints: CTXD_SERVER_KEY (the daemon's public key, Z85) or\n"
    "CTXD_SERVER_KEY_FILE (its server.pub), and CTXD_CLIENT_KEY (your secret key)\n"
    "or CTXD_CLIENT_KEY_FILE (default ~/.config/ctxd/client.key; see 'ctx keygen')\n"
    "turn on CurveZMQ. A key variable holds the key only, a _FILE one a path.\n";

/* ---- help and errors --------------------------------------------------- */

/* Top-level help: every command from the table, options, exit statuses. */
static void print_main_help(FILE *f)
{
    fprintf(f, "usage: ctx [--endpoint EP] [--json] COMMAND [ARGS]\n\n"
               "Runs Python code in persistent interpreters (contexts) kept alive by the\n"
               "ctxd daemon: globals survive from one run to the next.\n\ncommands:\n");
    int width = 0; /* the longest name sets the column */
    for (size_t i = 0; i < ctx_cmd_count; i++)
        if ((int)strlen(ctx_cmd_table[i].name) > width)
            width = (int)strlen(ctx_cmd_table[i].name);
    for (size_t i = 0; i < ctx_cmd_count; i++)
        fprintf(f, "  %-*s  %s\n", width, ctx_cmd_table[i].name, ctx_cmd_table[i].summary);
    fprintf(f,
            "\nRun 'ctx help COMMAND' or 'ctx COMMAND --help' for a command's options.\n\n%s\n%s",
            ctx_global_help, ctx_exit_help);
}

/* Help for one command: synopsis, summary, details, shared options and
 * exit statuses. */
void ctx_print_cmd_help(const ctx_cmd *cmd, FILE *f)
{
    fprintf(f, "usage: ctx %s%s%s\n\n%s\n", cmd->name, cmd->usage[0] ? " " : "", cmd->usage,
            cmd->summary);
    for (size_t i = 0; cmd->aliases && cmd->aliases[i]; i++)
        fprintf(f, "%s%s", i ? ", " : "\nalso: ctx ", cmd->aliases[i]);
    if (cmd->aliases && cmd->aliases[0])
        fprintf(f, "\n");
    if (cmd->help[0])
        fprintf(f, "\n%s", cmd->help);
    fprintf(f, "\n%s\n%s", ctx_global_help, ctx_exit_help);
}

/* A usage error: the problem, the synopsis, and exit status 2. */
int ctx_usage(const ctx_cmd *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ctx: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "\nusage: ctx %s %s\nTry 'ctx %s --help'.\n", cmd->name, cmd->usage,
                cmd->name);
    else
        fprintf(stderr, "\nTry 'ctx --help'.\n");
    return EX_USAGE;
}

/* The exit status for a libctxd return code (the table in ctx --help). */
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
    case CTXD_EAUTH:
        return EX_AUTH;
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

/* Reports the last libctxd failure (stderr, or one JSON line) and returns
 * its exit status. */
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

/* Connects on first use, so commands that need no daemon never touch it. */
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
        static const char *const names[] = {"",          "unreachable", "refused",
                                            "protocol",  "transport",   "invalid",
                                            "cancelled", "lost",        "auth"};
        json_err(rc < 0 && -rc < 9 ? names[-rc] : "error", err, true);
    } else {
        fprintf(stderr, "ctx: %s\n", err);
        char hint[1100];
        const char *ep = cli->endpoint ? cli->endpoint : getenv("CTXD_ENDPOINT");
        if (ctx_hint_endpoint(ep, hint, sizeof hint))
            fprintf(stderr, "ctx: did you mean %s? (endpoints are ipc://PATH or tcp://HOST:PORT)\n",
                    hint);
    }
    return ctx_exit_for(rc);
}

/* ---- option parsing ---------------------------------------------------- */

/* Handles the options every command accepts and getopt's error returns.
 * Returns CONTINUE, or an exit status to return at once. */
int ctx_common_opt(ctx_cli *cli, const ctx_cmd *cmd, int opt, char **argv)
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
        ctx_print_cmd_help(cmd, stdout);
        return EX_OK;
    case ':':
        return ctx_usage(cmd, "option '%s' needs an argument", bad);
    default:
        return ctx_usage(cmd, "unknown option '%s'", bad);
    }
}

/* Checks the number of positional arguments left after the options. */
int ctx_positionals(const ctx_cmd *cmd, int argc, char **argv, int min, int max)
{
    int n = argc - optind;
    if (n < min)
        return ctx_usage(cmd, "missing argument");
    if (n > max)
        return ctx_usage(cmd, "unexpected argument '%s'", argv[optind + max]);
    return CONTINUE;
}

/* Parses a command that takes only the common options and between min and
 * max positional arguments. */
int ctx_simple_opts(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv, int min, int max)
{
    static const struct option longopts[] = {CTX_COMMON_LONGOPTS, {0}};
    int opt;
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int r = ctx_common_opt(cli, cmd, opt, argv);
        if (r != CONTINUE)
            return r;
    }
    int r = ctx_positionals(cmd, argc, argv, min, max);
    if (r == CONTINUE)
        r = ctx_need_client(cli);
    return r;
}

/* Adds one -e KEY=VALUE; the strings point into argv. */
int ctx_env_add(ctx_env_list *env, const ctx_cmd *cmd, char *arg)
{
    char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return ctx_usage(cmd, "expected KEY=VALUE, got '%s'", arg);
    *eq = '\0';
    env->kv = mem_realloc(env->kv, (env->n + 1) * sizeof *env->kv);
    env->kv[env->n++] = (ctxd_kv){.key = arg, .value = eq + 1};
    return CONTINUE;
}

/* Parses a timeout in seconds (>= 0, 0 = none). */
int ctx_parse_seconds(const ctx_cmd *cmd, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0)
        return ctx_usage(cmd, "-t needs a number of seconds >= 0 (0: no timeout), got '%s'", s);
    *out = v;
    return CONTINUE;
}

/* Creates a context unless it exists (or is `default`), as run, pip and
 * repl do on first use. */
int ctx_ensure_context(ctx_cli *cli, const char *name)
{
    if (!name || strcmp(name, "default") == 0)
        return CONTINUE;
    /* An existing context is looked up, not created: the daemon logs no
     * failed ctx.create and counts no refusal for it. */
    const ctxd_ctx_info *infos;
    size_t n;
    int rc = ctxd_ctx_list(cli->client, &infos, &n);
    if (rc < 0)
        return ctx_report(cli, rc);
    for (size_t i = 0; i < n; i++)
        if (strcmp(infos[i].name, name) == 0)
            return CONTINUE;
    rc = ctxd_ctx_create(cli->client, name, NULL, NULL, 0, NULL);
    const char *code;
    ctxd_last_error(cli->client, &code, NULL);
    if (rc == 0 || (rc == CTXD_EREFUSED && strcmp(code, "exists") == 0))
        return CONTINUE;
    return ctx_report(cli, rc);
}

/* ---- SIGINT, shared by run and repl ------------------------------------ */

/* Ctrl-Cs seen so far; run_wait and the REPL compare it with what they saw. */
volatile sig_atomic_t ctx_sigints;

/* The SIGINT handler of run and repl: only counts, the wait loops act. */
void ctx_on_sigint(int sig)
{
    (void)sig;
    ctx_sigints++;
}

/* ---- the table lookup and dispatch ------------------------------------- */

/* Looks a command up in the table by its name or one of its aliases; NULL
 * when there is none. */
static const ctx_cmd *find_cmd(const char *name)
{
    for (size_t i = 0; i < ctx_cmd_count; i++) {
        const ctx_cmd *cmd = &ctx_cmd_table[i];
        if (strcmp(cmd->name, name) == 0)
            return cmd;
        for (size_t a = 0; cmd->aliases && cmd->aliases[a]; a++)
            if (strcmp(cmd->aliases[a], name) == 0)
                return cmd;
    }
    return NULL;
}

/* The usage error for a command name no command has, with the closest name
 * when one is near (a typo). */
static int unknown_command(const char *word)
{
    const char *near = ctx_hint_command(word, ctx_cmd_table, ctx_cmd_count);
    if (near)
        return ctx_usage(NULL, "unknown command '%s'; did you mean '%s'?", word, near);
    return ctx_usage(NULL, "unknown command '%s'", word);
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
        return unknown_command(argv[1]);
    ctx_print_cmd_help(target, stdout);
    return EX_OK;
}

/* Parses the global options up to the command name, then hands the rest of
 * argv (starting at the command name) to the command. */
int main(int argc, char **argv)
{
    static const struct option longopts[] = {CTX_COMMON_LONGOPTS, {0}};
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
            return ctx_usage(NULL,
                             opt == ':' ? "option '%s' needs an argument" : "unknown option '%s'",
                             argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return ctx_usage(NULL, "no command given");
    const ctx_cmd *cmd = find_cmd(argv[optind]);
    if (!cmd)
        return unknown_command(argv[optind]);
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    optind = 0; /* GNU getopt: start afresh, at sub_argv[1] */
    int r = cmd->handler(&cli, cmd, sub_argc, sub_argv);
    ctxd_close(cli.client);
    return r;
}
