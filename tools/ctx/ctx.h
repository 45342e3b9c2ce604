/* Shared declarations of the ctx command line (tools/ctx*.c). */
#ifndef CTXD_CTX_TOOL_H
#define CTXD_CTX_TOOL_H

#include "ctxd.h"

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
    EX_UNREACHABLE = 8
};

/* Returned by option helpers: keep parsing. */
#define CONTINUE (-1)

typedef struct ctx_cli {
    const char *endpoint; /* NULL: $CTXD_ENDPOINT, else the default */
    ctxd_client *client;  /* connected on first use */
    bool json;            /* --json: one JSON object per line on stdout */
} ctx_cli;

/* ---- ctx.c --------------------------------------------------------------- */

/* Connects on first use. Returns CONTINUE, or the exit status of a failed
 * connection (reported on stderr, or as JSON with --json). */
int ctx_need_client(ctx_cli *cli);
/* Reports the last libctxd failure and returns its exit status. */
int ctx_report(ctx_cli *cli, int rc);
/* The exit status for a libctxd return code. */
int ctx_exit_for(int rc);
/* Creates a context unless it exists (or is `default`). CONTINUE or exit. */
int ctx_ensure_context(ctx_cli *cli, const char *name);

/* SIGINT counter shared by run and repl; the handler only increments it. */
extern volatile sig_atomic_t ctx_sigints;
void ctx_on_sigint(int sig);

/* ---- ctx_repl.c ------------------------------------------------------------ */

/* The interactive session of `ctx repl`. timeout: seconds per run (0 none). */
int ctx_repl(ctx_cli *cli, const char *ctx, double timeout, bool force_plain);

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

/* ---- ctx_edit.c ------------------------------------------------------------ */

/* A small line editor (raw terminal mode) with history. */
typedef struct ctx_edit ctx_edit;

enum { EDIT_LINE = 1, EDIT_EOF = 0, EDIT_CANCEL = -2, EDIT_ERROR = -1 };

/* in_fd must be a terminal. */
ctx_edit *ctx_edit_new(int in_fd, int out_fd);
void ctx_edit_free(ctx_edit *e);
/* Reads one line. prompt may contain escape sequences; prompt_cols is its
 * visible width. Returns EDIT_LINE with *line (malloc'd, no newline),
 * EDIT_EOF (Ctrl-D on an empty line), EDIT_CANCEL (Ctrl-C) or EDIT_ERROR. */
int ctx_edit_read(ctx_edit *e, const char *prompt, size_t prompt_cols, char **line);
/* Leaves raw mode (ctx_edit_read leaves the terminal raw, so typed-ahead
 * lines are not echoed twice; restore it before running code). */
void ctx_edit_restore(ctx_edit *e);
/* History: entries are single lines, oldest first. */
void ctx_edit_history_add(ctx_edit *e, const char *line);
/* Loads the last `keep` lines of path (missing file: nothing). */
void ctx_edit_history_load(ctx_edit *e, const char *path, size_t keep);

#endif
