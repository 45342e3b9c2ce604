/* ctx repl: a notebook-like terminal session on one context.
 *
 * Input is read a line at a time (ctx_edit, on libedit, on a terminal; plain
 * lines otherwise) and collected into a block until the block is complete;
 * the block then runs as one execute (a cell), and the prompt shows the next
 * execution count. On a terminal the block enters the history as one entry.
 * Displays (display(), figures) and results with images are saved to files
 * whose paths are printed (ctx_media); input() and getpass() read a line
 * from the terminal; `name?` and `name??` show the context's `inspect` of
 * the name (?? with its source).
 *
 * WHEN IS A BLOCK COMPLETE? Exactly as Python's own REPL decides: ctx embeds
 * no Python, so it asks the context itself. After each line it sends a
 * *silent* execute (no result, no execution count increment) that runs
 * codeop.compile_command(block, '<input>', 'single') inside a throwaway
 * namespace (builtins.exec with a fresh dict, the lambda's parameter the only
 * other name), so the context's globals are not touched, and writes the
 * answer to fd 1 ("more" or "run"; a SyntaxError counts as "run", so the
 * context reports it when the block executes). This is the context's own
 * Python version and grammar. When the check cannot answer within 3 s (the
 * context is busy with another client's run) or fails, a local heuristic
 * mirroring codeop decides for the rest of the block: more input is needed
 * while brackets or a triple-quoted string are open, after a line ending in
 * ':' or '\', or after a decorator, and inside an indented block until an
 * empty line. CTX_REPL_COMPLETE=local makes the heuristic the only judge
 * (no silent runs at all). */
#include "ctx.h"
#include "ctx_media.h"
#include "ctx_indent.h"
#include "ctx_paste.h"
#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <locale.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define CHECK_TIMEOUT 3.0   /* seconds the completeness check may take */
#define INPUT_MAX (1 << 20) /* bytes of one input() line */

typedef struct repl {
    ctx_cli *cli;
    const char *ctx;
    double timeout;
    bool tty;   /* stdin is a terminal: line editor and prompts */
    bool color; /* stdout is a terminal and colour is wanted */
    ctx_edit *ed;
    int hist_fd; /* -1: no history file */
    uint64_t next_count;
    bool at_line_start; /* the last byte shown was a newline */
    bool heuristic;     /* the check failed for this block */
    bool local_only;    /* CTX_REPL_COMPLETE=local: never ask the context */
    bool autoindent;    /* continuation lines start indented (ctx_indent) */
    /* the run in progress */
    int sigints_seen;
    int interrupts;
    bool accepted;
    bool error_shown;
    /* the check in progress */
    char *input_line; /* the last input() answer */
    char check_out[64];
    size_t check_len;
    double check_deadline;
} repl;

/* Colours (empty strings without a terminal). */
static const char *col(const repl *r, const char *seq)
{
    return r->color ? seq : "";
}
#define C_PROMPT "\x1b[32m"
#define C_OUT "\x1b[1;34m"
#define C_ERR "\x1b[31m"
#define C_ERRB "\x1b[1;31m"
#define C_STDERR "\x1b[33m"
#define C_NOTE "\x1b[2m"
#define C_RESET "\x1b[0m"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Writes to a stream and remembers whether the output ends a line. */
static void show(repl *r, FILE *f, const char *color, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (color && *color)
        fputs(color, f);
    fwrite(s, 1, n, f);
    if (color && *color)
        fputs(C_RESET, f);
    fflush(f);
    r->at_line_start = s[n - 1] == '\n';
}

static void showf(repl *r, FILE *f, const char *color, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void showf(repl *r, FILE *f, const char *color, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        show(r, f, color, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* A note from ctx itself (not from the code), on its own line. */
static void note(repl *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(repl *r, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!r->at_line_start)
        show(r, stderr, NULL, "\n", 1);
    showf(r, stderr, col(r, C_NOTE), "ctx: %s\n", buf);
}

/* ---- the local heuristic --------------------------------------------------- */

bool ctx_repl_heuristic_more(const char *block)
{
    int depth = 0;
    char quote = 0;
    bool triple = false, in_block = false, last_blank = true, cont = false;
    char last_sig = 0;
    const char *p = block;
    while (*p) {
        /* one line */
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        bool blank = true;
        last_sig = 0;
        cont = false;
        for (size_t i = 0; i < n; i++) {
            char ch = p[i];
            if (ch != ' ' && ch != '\t' && ch != '\r')
                blank = false;
            if (quote) {
                if (ch == '\\') {
                    i++;
                    if (i == n)
                        cont = true;
                } else if (ch == quote &&
                           (!triple || (i + 2 < n && p[i + 1] == quote && p[i + 2] == quote))) {
                    if (triple)
                        i += 2;
                    quote = 0;
                    triple = false;
                }
                last_sig = 'x';
                continue;
            }
            if (ch == '#')
                break;
            if (ch == '\'' || ch == '"') {
                quote = ch;
                triple = i + 2 < n && p[i + 1] == ch && p[i + 2] == ch;
                if (triple)
                    i += 2;
                last_sig = 'x';
                continue;
            }
            if (ch == '(' || ch == '[' || ch == '{')
                depth++;
            else if ((ch == ')' || ch == ']' || ch == '}') && depth > 0)
                depth--;
            if (ch == '\\' && i + 1 == n)
                cont = true;
            if (ch != ' ' && ch != '\t' && ch != '\r')
                last_sig = ch;
        }
        if (quote && !triple)
            quote = 0; /* an unterminated short string ends at the line's end */
        if (!quote && depth == 0 && !blank) {
            const char *s = p;
            while (*s == ' ' || *s == '\t')
                s++;
            if (last_sig == ':' || *s == '@')
                in_block = true;
        }
        last_blank = blank;
        if (!eol)
            break;
        p = eol + 1;
        if (!*p)
            last_blank = true; /* the block ends with an empty line */
    }
    if (quote || depth > 0 || cont)
        return true;
    if (in_block && !last_blank)
        return true;
    return false;
}

/* ---- the completeness check in the context ---------------------------------- */

static void hex(char *out, const char *s, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[(unsigned char)s[i] >> 4];
        out[2 * i + 1] = digits[(unsigned char)s[i] & 15];
    }
    out[2 * n] = '\0';
}

static void check_stream(void *user, const char *name, const void *data, size_t len)
{
    repl *r = user;
    if (strcmp(name, "stdout") != 0)
        return;
    size_t room = sizeof r->check_out - 1 - r->check_len;
    if (len > room)
        len = room;
    memcpy(r->check_out + r->check_len, data, len);
    r->check_len += len;
}

static void check_accepted(void *user, uint64_t count, uint64_t incarnation,
                           const char *previous_death)
{
    repl *r = user;
    (void)count;
    if (previous_death)
        note(r,
             "the previous worker of context '%s' died (%s); incarnation %llu starts with "
             "empty globals",
             r->ctx, previous_death, (unsigned long long)incarnation);
}

static int check_wait(void *user)
{
    repl *r = user;
    return mono() > r->check_deadline ? CTXD_WAIT_DETACH : CTXD_WAIT_CONTINUE;
}

/* 1: the block needs more lines, 0: it is complete, -1: no answer. */
static int check_in_context(repl *r, const char *block)
{
    static const char checker[] =
        "import codeop, os\n"
        "try:\n"
        "    w = b'more' if codeop.compile_command(s, '<input>', 'single') is None else b'run'\n"
        "except (SyntaxError, ValueError, OverflowError):\n"
        "    w = b'run'\n"
        "os.write(1, b'\\x00ctx-complete:' + w + b'\\x00')\n";
    size_t n = strlen(block);
    char *hc = mem_alloc(2 * sizeof checker + 1);
    char *hb = mem_alloc(2 * n + 1);
    hex(hc, checker, strlen(checker));
    hex(hb, block, n);
    size_t cap = strlen(hc) + strlen(hb) + 256;
    char *code = mem_alloc(cap);
    snprintf(code, cap,
             "(lambda b: b.exec(b.bytes.fromhex('%s').decode(), "
             "{'s': b.bytes.fromhex('%s').decode('utf-8', 'replace')}))(__import__('builtins'))",
             hc, hb);
    free(hc);
    free(hb);
    ctxd_exec_opts o = {.ctx = r->ctx, .code = code, .timeout = CHECK_TIMEOUT * 3, .silent = true};
    ctxd_callbacks cb = {
        .on_stream = check_stream, .on_accepted = check_accepted, .on_wait = check_wait};
    ctxd_outcome out;
    r->check_len = 0;
    r->check_deadline = mono() + CHECK_TIMEOUT;
    int rc = ctxd_execute(r->cli->client, &o, &cb, r, &out);
    free(code);
    if (rc < 0 || out.status != CTXD_OK)
        return -1;
    r->check_out[r->check_len] = '\0';
    static const char tag[] = "\0ctx-complete:";
    char *hit = memmem(r->check_out, r->check_len, tag, sizeof tag - 1);
    if (!hit)
        return -1;
    hit += sizeof tag - 1;
    if (strncmp(hit, "more", 4) == 0)
        return 1;
    if (strncmp(hit, "run", 3) == 0)
        return 0;
    return -1;
}

/* Does the block need more lines? */
static bool needs_more(repl *r, const char *block)
{
    if (!r->heuristic && !r->local_only) {
        int v = check_in_context(r, block);
        if (v >= 0)
            return v == 1;
        r->heuristic = true;
    }
    return ctx_repl_heuristic_more(block);
}

/* ---- running a block ----------------------------------------------------------- */

static void run_accepted(void *user, uint64_t count, uint64_t incarnation,
                         const char *previous_death)
{
    repl *r = user;
    r->accepted = true;
    r->next_count = count + 1;
    if (previous_death)
        note(r,
             "the previous worker of context '%s' died (%s); incarnation %llu starts with "
             "empty globals",
             r->ctx, previous_death, (unsigned long long)incarnation);
}

static void run_stream(void *user, const char *name, const void *data, size_t len)
{
    repl *r = user;
    if (strcmp(name, "stderr") == 0)
        show(r, stderr, col(r, C_STDERR), data, len);
    else
        show(r, stdout, NULL, data, len);
}

/* A run's value under `Out[n]:`: an image saved to a file (its path shown),
 * else its text/plain, on the same line when it is one line, below the
 * label when it spans lines (a table), as IPython shows it. */
static void run_result(void *user, const char *const *keys, const char *const *values, size_t n,
                       uint64_t count)
{
    repl *r = user;
    for (size_t i = 0; i < n; i++) {
        if (ctx_media_is_file(keys[i])) { /* an image: saved, its path shown */
            if (!r->at_line_start)
                show(r, stdout, NULL, "\n", 1);
            showf(r, stdout, col(r, C_OUT), "Out[%llu]:\n", (unsigned long long)count);
            ctx_media_print(stdout, keys, values, n);
            r->at_line_start = true;
            return;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(keys[i], "text/plain") != 0)
            continue;
        if (!r->at_line_start)
            show(r, stdout, NULL, "\n", 1);
        showf(r, stdout, col(r, C_OUT), "Out[%llu]:", (unsigned long long)count);
        const char *v = values[i];
        if (strchr(v, '\n')) /* as IPython: a table starts on a line of its own */
            showf(r, stdout, NULL, "\n%s\n", v[0] == '\n' ? v + 1 : v);
        else
            showf(r, stdout, NULL, " %s\n", v);
    }
}

/* display() and figures: images to files (paths printed), else text/plain. */
static void run_display(void *user, const char *const *keys, const char *const *values, size_t n,
                        const char *display_id, bool update)
{
    repl *r = user;
    (void)display_id;
    (void)update;
    if (!r->at_line_start)
        show(r, stdout, NULL, "\n", 1);
    ctx_media_print(stdout, keys, values, n);
    r->at_line_start = true;
}

/* Reads one line from the terminal (canonical mode: read returns a line),
 * byte by byte so nothing typed after it is taken from the line editor. */
static ssize_t read_tty_line(char **line)
{
    size_t cap = 256, n = 0;
    *line = mem_alloc(cap);
    for (;;) {
        char ch;
        ssize_t k = read(STDIN_FILENO, &ch, 1);
        if (k <= 0) {
            if (k == 0 && n > 0)
                break;
            free(*line);
            *line = NULL;
            return -1;
        }
        if (ch == '\n')
            break;
        if (n + 1 >= cap) {
            if (cap >= INPUT_MAX)
                continue; /* the rest of an over-long line is dropped */
            cap *= 2;
            *line = mem_realloc(*line, cap);
        }
        (*line)[n++] = ch;
    }
    n = ctx_paste_strip(*line, n); /* a paste answering input() */
    (*line)[n] = '\0';
    return (ssize_t)n;
}

/* input() and getpass() in the code: the prompt, then a line from the
 * terminal (without echo for a password); NULL (EOFError) at end of input
 * or on Ctrl-C. */
static const char *run_input(void *user, const char *prompt, bool password)
{
    repl *r = user;
    free(r->input_line);
    r->input_line = NULL;
    /* Echo goes off before the prompt shows, and without TCSAFLUSH: a line
     * typed as soon as the prompt appears is neither echoed nor discarded. */
    struct termios t, saved;
    bool noecho = password && r->tty && tcgetattr(STDIN_FILENO, &saved) == 0;
    if (noecho) {
        t = saved;
        t.c_lflag &= ~(tcflag_t)ECHO;
        tcsetattr(STDIN_FILENO, TCSANOW, &t);
    }
    show(r, stdout, NULL, prompt, strlen(prompt));
    ssize_t n;
    if (r->tty) {
        n = read_tty_line(&r->input_line);
    } else {
        size_t cap = 0;
        n = getline(&r->input_line, &cap, stdin);
        if (n > 0 && r->input_line[n - 1] == '\n')
            r->input_line[--n] = '\0';
        if (n > INPUT_MAX)
            r->input_line[INPUT_MAX] = '\0';
    }
    if (noecho) {
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
        show(r, stdout, NULL, "\n", 1);
    }
    r->at_line_start = true;
    if (n < 0) {
        free(r->input_line);
        r->input_line = NULL;
        clearerr(stdin);
    }
    return r->input_line;
}

static void run_error(void *user, const char *ename, const char *evalue,
                      const char *const *traceback, size_t n)
{
    repl *r = user;
    r->error_shown = true;
    if (!r->at_line_start)
        show(r, stderr, NULL, "\n", 1);
    for (size_t i = 0; i < n; i++) {
        bool last = i + 1 == n;
        showf(r, stderr, col(r, last ? C_ERRB : C_ERR), "%s", traceback[i]);
        show(r, stderr, NULL, "\n", 1);
    }
    if (n == 0) {
        showf(r, stderr, col(r, C_ERRB), "%s: %s", ename, evalue);
        show(r, stderr, NULL, "\n", 1);
    }
}

/* Ctrl-C while a run executes: interrupt it (twice at most), then a third
 * stops waiting for it. */
static int run_wait(void *user)
{
    repl *r = user;
    int seen = ctx_sigints;
    if (seen == r->sigints_seen)
        return CTXD_WAIT_CONTINUE;
    r->sigints_seen = seen;
    r->interrupts++;
    if (r->tty)
        r->at_line_start = false; /* the terminal echoed ^C */
    if (r->interrupts >= 3) {
        note(r, "stopped waiting; the run goes on in context '%s'", r->ctx);
        return CTXD_WAIT_DETACH;
    }
    if (!r->accepted)
        note(r, "the run is queued; it will be interrupted when it starts");
    else if (r->interrupts == 2)
        note(r, "interrupting again (a third Ctrl-C stops waiting)");
    return CTXD_WAIT_INTERRUPT;
}

static void run_block(repl *r, const char *code)
{
    ctxd_exec_opts o = {.ctx = r->ctx, .code = code, .timeout = r->timeout};
    ctxd_callbacks cb = {.on_accepted = run_accepted,
                         .on_stream = run_stream,
                         .on_result = run_result,
                         .on_error = run_error,
                         .on_wait = run_wait,
                         .on_display = run_display,
                         .on_input = run_input};
    r->sigints_seen = ctx_sigints;
    r->interrupts = 0;
    r->accepted = false;
    r->error_shown = false;
    r->at_line_start = true;
    ctxd_outcome out;
    int rc = ctxd_execute(r->cli->client, &o, &cb, r, &out);
    if (rc < 0) {
        const char *code_s, *msg;
        ctxd_last_error(r->cli->client, &code_s, &msg);
        if (rc != CTXD_ECANCELLED)
            note(r, "%s%s%s%s", rc == CTXD_EREFUSED ? "refused by ctxd (" : "",
                 rc == CTXD_EREFUSED ? code_s : "", rc == CTXD_EREFUSED ? "): " : "", msg);
        return;
    }
    if (!r->at_line_start)
        show(r, stdout, NULL, "\n", 1);
    switch (out.status) {
    case CTXD_TIMEOUT:
        note(r, "timed out%s%s", out.cause ? ": " : "", out.cause ? out.cause : "");
        break;
    case CTXD_DIED:
        note(r, "the worker died: %s", out.cause ? out.cause : "unknown cause");
        break;
    case CTXD_ABORTED:
        note(r, "aborted: %s", out.cause ? out.cause : "unknown cause");
        break;
    case CTXD_SHUTDOWN:
        note(r, "the daemon shut down during the run%s%s", out.cause ? ": " : "",
             out.cause ? out.cause : "");
        break;
    case CTXD_ERROR:
        if (!r->error_shown)
            note(r, "the code raised");
        break;
    default:
        break;
    }
    if (out.state_lost)
        note(r, "state lost: the globals of context '%s' are gone; the next run starts afresh",
             r->ctx);
    if (out.status == CTXD_OK || out.status == CTXD_ERROR || out.status == CTXD_INTERRUPTED ||
        out.status == CTXD_TIMEOUT)
        r->next_count = out.execution_count + 1;
    if (out.state_lost)
        r->next_count = 1;
}

/* ---- input ------------------------------------------------------------------ */

static bool is_blank(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r')
        s++;
    return *s == '\0';
}

/* One line of input: EDIT_LINE (*line malloc'd), EDIT_EOF or EDIT_CANCEL. */
static int read_line(repl *r, const char *block, char **line)
{
    bool first = block == NULL;
    *line = NULL;
    if (r->tty) {
        char prompt[96], label[32];
        int w = snprintf(label, sizeof label, "[%llu]:", (unsigned long long)r->next_count);
        if (first)
            snprintf(prompt, sizeof prompt, "\1%s\1%s\1%s\1 ", col(r, C_PROMPT), label,
                     col(r, C_RESET));
        else
            snprintf(prompt, sizeof prompt, "\1%s\1%*s\1%s\1 ", col(r, C_PROMPT), w,
                     "...:", col(r, C_RESET));
        fflush(stdout);
        fflush(stderr);
        char *indent = !first && r->autoindent ? ctx_indent_next(block) : NULL;
        if (indent)
            ctx_edit_preset(r->ed, indent);
        free(indent);
        int rc = ctx_edit_read(r->ed, prompt, line);
        if (rc == EDIT_LINE && !first && r->autoindent && is_blank(*line))
            (*line)[0] = '\0'; /* only the indentation given: the block ends */
        return rc == EDIT_ERROR ? EDIT_EOF : rc;
    }
    size_t cap = 0;
    errno = 0;
    ssize_t n = getline(line, &cap, stdin);
    if (n < 0) {
        bool intr = errno == EINTR;
        free(*line);
        *line = NULL;
        clearerr(stdin);
        return intr ? EDIT_CANCEL : EDIT_EOF;
    }
    while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r'))
        (*line)[--n] = '\0';
    return EDIT_LINE;
}

static bool is_exit_word(const char *s)
{
    return strcmp(s, "exit") == 0 || strcmp(s, "quit") == 0 || strcmp(s, "exit()") == 0 ||
           strcmp(s, "quit()") == 0;
}

/* `name?` / `name??` (or `?name`): shows the context's inspection of the
 * name (?? with the source). False when the line is not such a request. */
static bool help_request(repl *r, const char *line)
{
    while (*line == ' ' || *line == '\t')
        line++;
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t'))
        n--;
    unsigned detail = 0;
    size_t q = 0;
    const char *name = line;
    while (q < n && q < 2 && name[q] == '?')
        q++;
    if (q) {
        name += q;
        n -= q;
    } else {
        while (q < n && q < 2 && line[n - 1 - q] == '?')
            q++;
        n -= q;
    }
    if (q == 0 || n == 0 || (name[0] >= '0' && name[0] <= '9'))
        return false;
    detail = q == 2;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (!(ch == '_' || ch == '.' || ch >= 0x80 || (ch >= '0' && ch <= '9') ||
              ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')))
            return false;
    }
    char *code = mem_alloc(n + 1);
    memcpy(code, name, n);
    code[n] = '\0';
    ctxd_inspection ins;
    int rc = ctxd_inspect(r->cli->client, r->ctx, code, CTXD_CURSOR_END, detail, &ins);
    if (rc < 0) {
        const char *code_s, *msg;
        ctxd_last_error(r->cli->client, &code_s, &msg);
        note(r, "inspect failed: %s", msg);
    } else if (!ins.found) {
        note(r, "no object named '%s' in context '%s'", code, r->ctx);
    } else {
        show(r, stdout, NULL, ins.text, strlen(ins.text));
        if (!r->at_line_start)
            show(r, stdout, NULL, "\n", 1);
    }
    free(code);
    return true;
}

/* The session: read blocks, run them, until end of input. */
int ctx_repl(ctx_cli *cli, const char *ctx, double timeout, bool force_plain, bool autoindent)
{
    setlocale(LC_CTYPE, "");
    repl r = {.cli = cli, .ctx = ctx ? ctx : "default", .timeout = timeout, .hist_fd = -1};
    r.tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    const char *term = getenv("TERM");
    r.color = !force_plain && isatty(STDOUT_FILENO) && !getenv("NO_COLOR") &&
              !(term && strcmp(term, "dumb") == 0);
    r.at_line_start = true;
    const char *how = getenv("CTX_REPL_COMPLETE");
    r.local_only = how && strcmp(how, "local") == 0;
    const char *ai = getenv("CTX_REPL_AUTOINDENT");
    r.autoindent = autoindent || (ai && strcmp(ai, "1") == 0);

    const ctxd_ctx_info *infos;
    size_t n;
    int rc = ctxd_ctx_list(cli->client, &infos, &n);
    if (rc < 0)
        return ctx_report(cli, rc);
    uint64_t incarnation = 0;
    r.next_count = 1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(infos[i].name, r.ctx) == 0) {
            r.next_count = infos[i].execution_count + 1;
            incarnation = infos[i].incarnation;
        }
    }
    ctxd_hello_info h;
    if (ctxd_hello(cli->client, &h) < 0)
        h.version = "?";
    if (r.tty) {
        r.ed = ctx_edit_new(cli->client, r.ctx);
        if (!r.ed)
            r.tty = false; /* libedit could not start: plain lines */
    }
    if (r.ed) {
        r.hist_fd = ctx_history_open(r.ed);
        showf(&r, stdout, col(&r, C_NOTE),
              "ctx repl: context '%s' (incarnation %llu) on ctxd %s at %s\n"
              "A block runs when complete (an empty line ends an indented one). Ctrl-C "
              "interrupts a run or clears the input; Ctrl-D leaves.\n",
              r.ctx, (unsigned long long)incarnation, h.version, ctxd_endpoint(cli->client));
        ctx_paste_mode(stdout, true);
    }
    struct sigaction sa = {.sa_handler = ctx_on_sigint}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old); /* no SA_RESTART: waits wake at once */

    char *block = NULL;
    size_t blen = 0;
    int status = EX_OK;
    for (;;) {
        bool first = blen == 0;
        char *line;
        int got = read_line(&r, first ? NULL : block, &line);
        if (got == EDIT_CANCEL) {
            free(block);
            block = NULL;
            blen = 0;
            r.heuristic = false;
            if (!r.tty)
                note(&r, "input cleared");
            else
                show(&r, stdout, NULL, "^C\n", 3);
            continue;
        }
        if (got == EDIT_EOF) {
            if (blen > 0 && !r.tty) { /* the input ended inside a block: run it */
                run_block(&r, block);
            }
            if (r.tty)
                show(&r, stdout, NULL, "\n", 1);
            break;
        }
        if (first && is_blank(line)) {
            free(line);
            continue;
        }
        if (first && strcmp(line, "%autoindent") == 0) { /* IPython's toggle */
            r.autoindent = !r.autoindent;
            showf(&r, stdout, NULL, "Automatic indentation is: %s\n", r.autoindent ? "ON" : "OFF");
            free(line);
            continue;
        }
        if (first && is_exit_word(line)) {
            ctx_history_add(r.ed, r.hist_fd, line);
            free(line);
            break;
        }
        if (first && help_request(&r, line)) {
            ctx_history_add(r.ed, r.hist_fd, line);
            free(line);
            continue;
        }
        size_t ln = strlen(line);
        block = mem_realloc(block, blen + ln + 2);
        if (blen)
            block[blen++] = '\n';
        memcpy(block + blen, line, ln + 1);
        blen += ln;
        free(line);
        if (needs_more(&r, block))
            continue;
        ctx_history_add(r.ed, r.hist_fd, block);
        run_block(&r, block);
        free(block);
        block = NULL;
        blen = 0;
        r.heuristic = false;
    }
    free(block);
    sigaction(SIGINT, &old, NULL);
    if (r.ed)
        ctx_paste_mode(stdout, false);
    ctx_edit_free(r.ed);
    free(r.input_line);
    if (r.hist_fd >= 0)
        close(r.hist_fd);
    fflush(stdout);
    return status;
}

/* ---- the command ------------------------------------------------------- */

/* ctx repl: the interactive session. */
int ctx_repl_cmd(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {{"ctx", required_argument, NULL, 'c'},
                                             {"timeout", required_argument, NULL, 't'},
                                             {"no-color", no_argument, NULL, 'N'},
                                             {"autoindent", no_argument, NULL, 'A'},
                                             CTX_COMMON_LONGOPTS,
                                             {0}};
    const char *ctx = NULL;
    double timeout = 0;
    bool plain = false, autoindent = false;
    int opt, r = CONTINUE;
    while (r == CONTINUE && (opt = getopt_long(argc, argv, ":c:t:h", longopts, NULL)) != -1) {
        if (opt == 'c')
            ctx = optarg;
        else if (opt == 't')
            r = ctx_parse_seconds(cmd, optarg, &timeout);
        else if (opt == 'N')
            plain = true;
        else if (opt == 'A')
            autoindent = true;
        else
            r = ctx_common_opt(cli, cmd, opt, argv);
    }
    if (r == CONTINUE)
        r = ctx_positionals(cmd, argc, argv, 0, 0);
    if (r == CONTINUE && cli->json)
        r = ctx_usage(cmd, "--json does not apply to the interactive repl (use 'ctx run --json')");
    if (r == CONTINUE)
        r = ctx_need_client(cli);
    if (r == CONTINUE)
        r = ctx_ensure_context(cli, ctx);
    if (r == CONTINUE)
        r = ctx_repl(cli, ctx, timeout, plain, autoindent);
    return r;
}
