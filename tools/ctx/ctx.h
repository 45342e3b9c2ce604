/* Shared declarations of the ctx command line (every file of tools/ctx):
 * the command table and the helpers its commands share. */
#ifndef CTXD_CTX_TOOL_H
#define CTXD_CTX_TOOL_H

#include "ctxd.h"

#include <getopt.h>

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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
    EX_UNREACHABLE = 8,
    EX_AUTH = 9 /* tcp:// CurveZMQ handshake failed */
};

/* Returned by option helpers: keep parsing. */
#define CONTINUE (-1)

typedef struct ctx_cli {
    const char *endpoint; /* NULL: $CTXD_ENDPOINT, else the default */
    ctxd_client *client;  /* connected on first use */
    bool json;            /* --json: one JSON object per line on stdout */
} ctx_cli;

/* ---- ctx.c: the command table ---------------------------------------------- */

/* One command of ctx_cmd_table. handler gets argv starting at the command
 * name (getopt_long starts afresh at argv[1]) and returns the exit status. */
typedef struct ctx_cmd ctx_cmd;
typedef int ctx_cmd_fn(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv);
struct ctx_cmd {
    const char *name;
    const char *const *aliases; /* other names, NULL-terminated; NULL: none */
    const char *usage;          /* synopsis after the name */
    ctx_cmd_fn *handler;
    const char *summary; /* one line for ctx --help */
    const char *help;    /* options and behaviour for ctx COMMAND --help */
};

/* Every command, in the order ctx --help lists them. */
extern const struct ctx_cmd ctx_cmd_table[];
extern const size_t ctx_cmd_count;

/* The handlers, one file per command family. */
ctx_cmd_fn ctx_cmd_run;                                        /* ctx_cmd_run.c */
ctx_cmd_fn ctx_cmd_ctx_create, ctx_cmd_ctx_ls, ctx_cmd_ctx_rm, /* ctx_cmd_ctx.c */
    ctx_cmd_ctx_restart, ctx_cmd_ctx_fork, ctx_cmd_ctx_interrupt;
ctx_cmd_fn ctx_cmd_files_cp; /* ctx_cmd_files.c */
ctx_cmd_fn ctx_cmd_snap_snapshot, ctx_cmd_snap_restore, ctx_cmd_snap_list, ctx_cmd_snap_rm,
    ctx_cmd_snap_export, ctx_cmd_snap_import;      /* ctx_cmd_snap.c */
ctx_cmd_fn ctx_cmd_pkgs_pip;                       /* ctx_cmd_pkgs.c */
ctx_cmd_fn ctx_cmd_info_hello, ctx_cmd_info_stats; /* ctx_cmd_info.c */
ctx_cmd_fn ctx_cmd_kernel;                         /* ctx_cmd_kernel.c */
ctx_cmd_fn ctx_cmd_keygen;                         /* ctx_cmd_keygen.c */
ctx_cmd_fn ctx_repl_cmd;                           /* ctx_repl.c */

/* ---- ctx.c: help, errors and option parsing ----------------------------------- */

/* Help for one command: synopsis, summary, details, shared options and
 * exit statuses. */
void ctx_print_cmd_help(const ctx_cmd *cmd, FILE *f);
/* A usage error: the problem, the synopsis (cmd NULL: none), exit status 2. */
int ctx_usage(const ctx_cmd *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Connects on first use. Returns CONTINUE, or the exit status of a failed
 * connection (reported on stderr, or as JSON with --json). */
int ctx_need_client(ctx_cli *cli);
/* Reports the last libctxd failure and returns its exit status. */
int ctx_report(ctx_cli *cli, int rc);
/* The exit status for a libctxd return code. */
int ctx_exit_for(int rc);
/* Creates a context unless it exists (or is `default`). CONTINUE or exit. */
int ctx_ensure_context(ctx_cli *cli, const char *name);

/* Long options every command accepts. Option strings start with ':' so a
 * missing argument comes back as ':' and we word the message ourselves. */
#define CTX_COMMON_LONGOPTS                                                                        \
    {"endpoint", required_argument, NULL, 'E'}, {"json", no_argument, NULL, 'J'},                  \
    {                                                                                              \
        "help", no_argument, NULL, 'h'                                                             \
    }

/* Environment pairs collected from repeated -e KEY=VALUE options. */
typedef struct ctx_env_list {
    ctxd_kv *kv;
    size_t n;
} ctx_env_list;

/* Handles the options every command accepts (CTX_COMMON_LONGOPTS) and
 * getopt's error returns. Returns CONTINUE, or an exit status. */
int ctx_common_opt(ctx_cli *cli, const ctx_cmd *cmd, int opt, char **argv);
/* Checks the number of positional arguments left after the options. */
int ctx_positionals(const ctx_cmd *cmd, int argc, char **argv, int min, int max);
/* Parses a command that takes only the common options and between min and
 * max positional arguments, then connects. */
int ctx_simple_opts(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv, int min, int max);
/* Adds one -e KEY=VALUE; the strings point into argv. */
int ctx_env_add(ctx_env_list *env, const ctx_cmd *cmd, char *arg);
/* Parses a timeout in seconds (>= 0, 0 = none). */
int ctx_parse_seconds(const ctx_cmd *cmd, const char *s, double *out);

/* SIGINT counter shared by run and repl; the handler only increments it. */
extern volatile sig_atomic_t ctx_sigints;
void ctx_on_sigint(int sig);

/* ---- ctx_cmd_ctx.c ---------------------------------------------------------- */

/* Natural order of names (exp-2 before exp-10), as ctx ls sorts them. */
int ctx_natural_cmp(const char *a, const char *b);

/* ---- ctx_repl.c ------------------------------------------------------------ */

/* The interactive session of `ctx repl`. timeout: seconds per run (0 none). */
int ctx_repl(ctx_cli *cli, const char *ctx, double timeout, bool force_plain, bool autoindent);

/* Exposed for the fallback completeness check (tested through the REPL). */
bool ctx_repl_heuristic_more(const char *block);

/* ---- ctx_json.c ------------------------------------------------------------ */

/* A streaming JSON writer: commas and nesting are handled for the caller. */
typedef struct jw {
    FILE *f;
    int depth;
    bool need_comma[32];
    bool after_key;
} jw;

void jw_init(jw *w, FILE *f);
void jw_obj(jw *w);
void jw_obj_end(jw *w);
void jw_arr(jw *w);
void jw_arr_end(jw *w);
void jw_key(jw *w, const char *key);
/* A string value from UTF-8 text; invalid bytes become U+FFFD. */
void jw_str(jw *w, const char *s);
void jw_strn(jw *w, const char *s, size_t n);
void jw_uint(jw *w, uint64_t v);
void jw_num(jw *w, double v);
void jw_bool(jw *w, bool v);
void jw_null(jw *w);
/* Base64 of bytes, as a string value. */
void jw_base64(jw *w, const void *data, size_t n);
/* Ends a top-level object: newline and flush. */
void jw_line(jw *w);

/* Shortcuts: key + value. */
void jw_kstr(jw *w, const char *key, const char *s);
void jw_kuint(jw *w, const char *key, uint64_t v);
void jw_knum(jw *w, const char *key, double v);
void jw_kbool(jw *w, const char *key, bool v);

/* One context INFO as a JSON object. */
void jw_ctx_info(jw *w, const ctxd_ctx_info *info);

/* Decodes one UTF-8 sequence at s[0..n): returns its length and sets *cp
 * (U+FFFD and length 1 for an invalid byte). Returns 0 when s holds only the
 * valid beginning of a longer sequence (more bytes needed). */
size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

/* Human units of a byte count ("512 B", "23.4 MiB"). */
const char *ctx_format_bytes(uint64_t n, char *buf, size_t len);
/* An age in the largest unit that fits ("42s", "7m", "3h", "2d"). */
const char *ctx_format_age(double seconds, char *buf, size_t n);

/* ---- ctx_hint.c ------------------------------------------------------------ */

/* The endpoint ep was probably meant to be, written into buf: a path as
 * ipc://PATH, host:port and http://HOST:PORT/... as tcp://HOST:PORT. NULL
 * when ep has a ZeroMQ scheme already or there is nothing to guess. */
const char *ctx_hint_endpoint(const char *ep, char *buf, size_t n);
/* The command of table[0..count) whose name (or an alias) is within one or
 * two edits of word, the closest; NULL when none is that close. */
const char *ctx_hint_command(const char *word, const ctx_cmd *table, size_t count);

/* ---- ctx_edit.c ------------------------------------------------------------ */

/* The REPL's line editor (libedit), completing from a context. */
typedef struct ctx_edit ctx_edit;

enum { EDIT_LINE = 1, EDIT_EOF = 0, EDIT_CANCEL = -2, EDIT_ERROR = -1 };

/* On stdin/stdout (a terminal); Tab asks `complete` of ctx through client.
 * NULL when libedit cannot start. */
ctx_edit *ctx_edit_new(ctxd_client *client, const char *ctx);
void ctx_edit_free(ctx_edit *e);
/* Reads one line (a recalled history entry may hold newlines). prompt may
 * hold escape sequences between \1 characters. Returns EDIT_LINE with *line
 * (malloc'd, no trailing newline), EDIT_EOF (Ctrl-D on an empty line),
 * EDIT_CANCEL (Ctrl-C) or EDIT_ERROR. */
int ctx_edit_read(ctx_edit *e, const char *prompt, char **line);
/* Makes the next ctx_edit_read start with text in its buffer, as if typed
 * (an auto-indent the user may erase). */
void ctx_edit_preset(ctx_edit *e, const char *text);
/* Adds one history entry (a whole block). */
void ctx_edit_history_add(ctx_edit *e, const char *entry);
/* An entry as one line of the history file (malloc'd, with its newline). */
char *ctx_edit_history_encode(const char *entry);
/* Loads a history file (missing file: nothing). */
void ctx_edit_history_load(ctx_edit *e, const char *path);

/* ---- ctx_history.c --------------------------------------------------------- */

/* Loads the history file into the editor and opens it for appending;
 * returns its descriptor, or -1 when there is none (no path, no home, or it
 * cannot be opened). */
int ctx_history_open(ctx_edit *ed);
/* Adds a block (trailing blank lines dropped) to the editor's history and
 * appends it to the file at fd (-1: none) at once, so concurrent sessions
 * and crashes lose nothing. Nothing without an editor. */
void ctx_history_add(ctx_edit *ed, int fd, const char *block);

#endif
