/* ctx repl's line editor, on libedit (BSD editline): emacs keys by default,
 * vi mode and any binding through ~/.editrc or $EDITRC (the program name is
 * "ctx", so "ctx:bind -v" applies to ctx alone), UTF-8 aware editing.
 *
 * What ctx adds to libedit:
 * - Tab completes from the context's live globals (the daemon's `complete`
 *   request, answered by the worker); at the start of a line, or after
 *   blanks only, Tab indents by 4 spaces.
 * - Ctrl-R searches the history incrementally (emacs mode), labelled
 *   "(reverse-i-search)`QUERY':" as bash and IPython label it (ctx_search):
 *   typed characters and Backspace edit the query, Ctrl-R again finds an
 *   older entry, Ctrl-G gives the line back, any other key ends the search
 *   with the entry as the line and then acts (Enter runs it).
 * - A bracketed paste (ctx_paste) enters the buffer whole, newlines and
 *   blank lines included, so Enter runs it as one cell.
 * - History entries are whole blocks: a multi-line `def` comes back as one
 *   entry, newlines included, and runs as one block again.
 * - The history file ($CTX_HISTORY, else ~/.ctx_history) holds one entry a
 *   line, '\' and newline escaped as "\\" and "\n"; each entry is appended
 *   when entered, so concurrent sessions and crashes lose nothing. */
#include "ctx.h"
#include "ctx_paste.h"
#include "ctx_search.h"
#include "mem.h"

#include <errno.h>
#include <histedit.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#define HISTORY_MAX 1000
#define LIST_MAX 200 /* completions listed at most */

struct ctx_edit {
    EditLine *el;
    int sigints; /* ctx_sigints when the line started: a change cancels it */
    History *hist;
    ctxd_client *client;
    const char *ctx;
    FILE *out;
    char prompt[128];
    char pend[8]; /* bytes read ahead after an ESC that began no paste */
    size_t npend, pendpos;
    char *paste; /* a paste read by getc_fn, for paste_fn */
    ctx_search search;
    int search_act;                /* what search_key_fn does (enum below) */
    char search_bytes[MB_LEN_MAX]; /* the character SEARCH_ADD adds */
    size_t search_n;
};

enum { SEARCH_ADD = 1, SEARCH_BACK, SEARCH_CANCEL, SEARCH_EXIT };

/* The character getc_fn returns for a paste: a C1 control no key sends,
 * bound to paste_fn. */
#define PASTE_KEY L"\x9e"
/* The character getc_fn returns for a key that steps the search. */
#define SEARCH_KEY L"\x9f"

/* libedit asks for the prompt through this function. */
static char *prompt_fn(EditLine *el)
{
    ctx_edit *e = NULL;
    el_get(el, EL_CLIENTDATA, &e);
    return e->prompt;
}

/* Code points in s[0..n). */
static uint64_t utf8_chars(const char *s, size_t n)
{
    uint64_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* Byte offset of code point `chars` in s (at most n). */
static size_t utf8_offset(const char *s, size_t n, uint64_t chars)
{
    size_t i = 0;
    for (uint64_t c = 0; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (c == chars)
                return i;
            c++;
        }
    }
    return n;
}

/* Prints the candidates below the line, in columns. */
static void list_matches(ctx_edit *e, const char *const *m, size_t n)
{
    size_t width = 0;
    for (size_t i = 0; i < n && i < LIST_MAX; i++)
        if (strlen(m[i]) > width)
            width = strlen(m[i]);
    int cols = 80;
    el_get(e->el, EL_GETTC, "co", &cols);
    size_t per_line = (size_t)cols / (width + 2);
    if (per_line == 0)
        per_line = 1;
    fputc('\n', e->out);
    for (size_t i = 0; i < n && i < LIST_MAX; i++) {
        bool last = (i + 1) % per_line == 0 || i + 1 == n || i + 1 == LIST_MAX;
        fprintf(e->out, "%-*s%s", last ? 0 : (int)width + 2, m[i], last ? "\n" : "");
    }
    if (n > LIST_MAX)
        fprintf(e->out, "(%zu more)\n", n - LIST_MAX);
    fflush(e->out);
}

/* Tab: indent at the start of a line, else complete from the context. */
static unsigned char complete_fn(EditLine *el, int ch)
{
    (void)ch;
    ctx_edit *e = NULL;
    el_get(el, EL_CLIENTDATA, &e);
    const LineInfo *li = el_line(el);
    size_t pre = (size_t)(li->cursor - li->buffer);
    size_t len = (size_t)(li->lastchar - li->buffer);
    size_t sol = pre; /* start of the cursor's line inside a recalled block */
    while (sol > 0 && li->buffer[sol - 1] != '\n')
        sol--;
    bool blank = true;
    for (size_t i = sol; i < pre; i++)
        blank = blank && (li->buffer[i] == ' ' || li->buffer[i] == '\t');
    if (blank) {
        el_insertstr(el, "    ");
        return CC_REFRESH;
    }
    char *code = mem_alloc(len + 1);
    memcpy(code, li->buffer, len);
    code[len] = '\0';
    uint64_t cursor = utf8_chars(code, pre);
    ctxd_completion c;
    int rc = ctxd_complete(e->client, e->ctx, code, cursor, &c);
    if (rc < 0 || c.nmatches == 0 || c.cursor_start > cursor) {
        free(code);
        return CC_REFRESH_BEEP;
    }
    /* The typed part the matches replace: code[cursor_start, cursor). */
    size_t from = utf8_offset(code, pre, c.cursor_start);
    size_t typed = pre - from;
    size_t common = strlen(c.matches[0]);
    for (size_t i = 1; i < c.nmatches; i++) {
        size_t k = 0;
        while (k < common && c.matches[i][k] == c.matches[0][k])
            k++;
        common = k;
    }
    while (common > 0 && ((unsigned char)c.matches[0][common] & 0xC0) == 0x80)
        common--; /* whole characters only */
    unsigned char ret = CC_REFRESH;
    if (c.nmatches == 1 || common > typed) {
        char *ins = mem_alloc(common + 1);
        memcpy(ins, c.matches[0], common);
        ins[common] = '\0';
        el_deletestr(el, (int)(cursor - c.cursor_start));
        el_insertstr(el, ins);
        free(ins);
    } else {
        list_matches(e, c.matches, c.nmatches);
        ret = CC_REDISPLAY;
    }
    free(code);
    return ret;
}

/* One byte of input: the bytes read ahead first, then standard input. As
 * read(2): 1, 0 at the end of input, -1 with errno. */
static ssize_t next_byte(ctx_edit *e, char *byte)
{
    if (e->pendpos < e->npend) {
        *byte = e->pend[e->pendpos++];
        return 1;
    }
    e->npend = e->pendpos = 0;
    return read(STDIN_FILENO, byte, 1);
}

/* After an ESC: true when the terminal's paste marker follows (the rest of
 * ESC[200~, sent with it in one write). Otherwise the bytes read to find out
 * are kept for next_byte, so an ESC typed alone stays an ESC. */
static bool paste_begins(ctx_edit *e)
{
    static const char rest[] = "[200~";
    if (e->pendpos < e->npend)
        return false; /* replaying read-ahead: it began no paste */
    e->npend = e->pendpos = 0;
    for (size_t i = 0; i < sizeof rest - 1; i++) {
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        if (poll(&p, 1, i == 0 ? 0 : 50) <= 0 || read(STDIN_FILENO, &e->pend[i], 1) != 1)
            break;
        e->npend = i + 1;
        if (e->pend[i] != rest[i])
            break;
        if (i + 1 == sizeof rest - 1) {
            e->npend = 0;
            return true;
        }
    }
    return false;
}

/* The key getc_fn returns for a paste: inserts the paste it read. */
static unsigned char paste_fn(EditLine *el, int ch)
{
    (void)ch;
    ctx_edit *e = NULL;
    el_get(el, EL_CLIENTDATA, &e);
    if (e->paste)
        ctx_paste_insert(el, e->paste);
    free(e->paste);
    e->paste = NULL;
    return CC_REFRESH;
}

/* Shows the search's label as the prompt while it is active, else the
 * prompt saved at its start (freed). */
static void search_prompt(ctx_edit *e, char *restored)
{
    if (e->search.active)
        ctx_search_label(&e->search, e->prompt, sizeof e->prompt);
    else if (restored)
        snprintf(e->prompt, sizeof e->prompt, "%s", restored);
    free(restored);
}

/* Ctrl-R: starts a reverse search, or while one is active finds an older
 * entry holding the query. */
static unsigned char search_fn(EditLine *el, int ch)
{
    (void)ch;
    ctx_edit *e = NULL;
    el_get(el, EL_CLIENTDATA, &e);
    if (!e->search.active)
        ctx_search_start(&e->search, el, e->prompt);
    else
        ctx_search_step(&e->search, el, e->hist, true);
    search_prompt(e, NULL);
    return CC_REDISPLAY;
}

/* The key getc_fn returns while a search is active: edits the query, or
 * ends the search (the key that ended it is read again afterwards). */
static unsigned char search_key_fn(EditLine *el, int ch)
{
    (void)ch;
    ctx_edit *e = NULL;
    el_get(el, EL_CLIENTDATA, &e);
    char *restored = NULL;
    if (e->search_act == SEARCH_ADD)
        ctx_search_edit(&e->search, el, e->hist, e->search_bytes, e->search_n);
    else if (e->search_act == SEARCH_BACK)
        ctx_search_edit(&e->search, el, e->hist, NULL, 0);
    else
        restored = ctx_search_end(&e->search, el, e->search_act == SEARCH_CANCEL);
    search_prompt(e, restored);
    return CC_REDISPLAY;
}

/* While a search is active, turns the character just read (raw[0..n) its
 * bytes) into SEARCH_KEY with what it does; Ctrl-R passes. A key that ends
 * the search is kept to be read again, so it then acts as itself. */
static void search_filter(ctx_edit *e, wchar_t *wc, const char *raw, size_t n)
{
    if (*wc == 0x12)
        return;
    if (*wc >= 0x20 && *wc != 0x7f && n <= sizeof e->search_bytes) {
        e->search_act = SEARCH_ADD;
        memcpy(e->search_bytes, raw, n);
        e->search_n = n;
    } else if (*wc == 0x7f || *wc == 0x08) {
        e->search_act = SEARCH_BACK;
    } else if (*wc == 0x07) {
        e->search_act = SEARCH_CANCEL;
    } else {
        e->search_act = SEARCH_EXIT;
        if (e->pendpos >= n && e->pendpos <= e->npend) {
            e->pendpos -= n; /* it came from the read-ahead: read it again */
        } else if (n <= sizeof e->pend) {
            memcpy(e->pend, raw, n);
            e->npend = n;
            e->pendpos = 0;
        }
    }
    *wc = SEARCH_KEY[0];
}

/* libedit's character reader, replaced so that Ctrl-C cancels the line
 * whenever it comes: libedit retries a read that a signal interrupted, and
 * a signal that arrives while it is not in read() would be lost. SIGINT is
 * blocked while the counter is checked and unblocked only inside ppoll.
 * An ESC that begins a bracketed paste reads the whole paste and returns
 * PASTE_KEY. Bytes are decoded as the locale's multibyte characters (an invalid byte
 * passes as itself). */
static int getc_fn(EditLine *el, wchar_t *wc)
{
    ctx_edit *e = NULL;
    el_get(el, EL_CLIENTDATA, &e);
    mbstate_t st;
    memset(&st, 0, sizeof st);
    size_t got = 0;
    char raw[MB_LEN_MAX];
    sigset_t intr, orig;
    sigemptyset(&intr);
    sigaddset(&intr, SIGINT);
    for (;;) {
        sigprocmask(SIG_BLOCK, &intr, &orig);
        if (ctx_sigints != e->sigints) {
            sigprocmask(SIG_SETMASK, &orig, NULL);
            errno = EINTR;
            return -1;
        }
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        sigset_t wait = orig;
        sigdelset(&wait, SIGINT);
        int r = e->pendpos < e->npend ? 1 : ppoll(&p, 1, NULL, &wait);
        sigprocmask(SIG_SETMASK, &orig, NULL);
        if (r < 0) {
            if (errno == EINTR)
                continue; /* the counter decides */
            return -1;
        }
        char byte;
        ssize_t k = next_byte(e, &byte);
        if (k == 0)
            return 0;
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        if (byte == 0x1b && got == 0 && paste_begins(e)) {
            search_prompt(e, ctx_search_end(&e->search, el, false));
            free(e->paste);
            e->paste = ctx_paste_read();
            *wc = PASTE_KEY[0];
            return 1;
        }
        raw[got++] = byte;
        size_t m = mbrtowc(wc, &byte, 1, &st);
        if (m == (size_t)-2 && got < MB_LEN_MAX)
            continue;
        if (m == (size_t)-1 || m == (size_t)-2)
            *wc = (wchar_t)(unsigned char)byte;
        if (e->search.active)
            search_filter(e, wc, raw, got);
        return 1;
    }
}

ctx_edit *ctx_edit_new(ctxd_client *client, const char *ctx)
{
    ctx_edit *e = mem_calloc(1, sizeof *e);
    e->client = client;
    e->ctx = ctx;
    e->out = stdout;
    e->el = el_init("ctx", stdin, stdout, stderr);
    e->hist = history_init();
    if (!e->el || !e->hist) {
        if (e->el)
            el_end(e->el);
        if (e->hist)
            history_end(e->hist);
        free(e);
        return NULL;
    }
    HistEvent ev;
    history(e->hist, &ev, H_SETSIZE, HISTORY_MAX);
    history(e->hist, &ev, H_SETUNIQUE, 1);
    el_set(e->el, EL_CLIENTDATA, e);
    el_set(e->el, EL_EDITOR, "emacs");
    el_set(e->el, EL_HIST, history, e->hist);
    el_set(e->el, EL_PROMPT_ESC, prompt_fn, '\1');
    el_set(e->el, EL_GETCFN, getc_fn);
    el_set(e->el, EL_ADDFN, "ctx-complete", "complete from the context's globals", complete_fn);
    el_set(e->el, EL_BIND, "^I", "ctx-complete", NULL);
    el_set(e->el, EL_ADDFN, "ctx-search", "search the history backwards", search_fn);
    el_set(e->el, EL_ADDFN, "ctx-search-key", "a key of the search", search_key_fn);
    el_set(e->el, EL_BIND, "^R", "ctx-search", NULL);
    el_set(e->el, EL_BIND, "^S", "em-inc-search-next", NULL);
    el_source(e->el, NULL); /* $EDITRC, else ~/.editrc */
    /* After the editrc: a `bind -v` there resets the key maps. */
    el_set(e->el, EL_ADDFN, "ctx-paste", "insert a bracketed paste whole", paste_fn);
    el_wset(e->el, EL_BIND, PASTE_KEY, L"ctx-paste", NULL);
    el_wset(e->el, EL_BIND, L"-a", PASTE_KEY, L"ctx-paste", NULL);
    el_wset(e->el, EL_BIND, SEARCH_KEY, L"ctx-search-key", NULL);
    el_wset(e->el, EL_BIND, L"-a", SEARCH_KEY, L"ctx-search-key", NULL);
    return e;
}

void ctx_edit_free(ctx_edit *e)
{
    if (!e)
        return;
    free(ctx_search_end(&e->search, e->el, false));
    el_end(e->el);
    history_end(e->hist);
    free(e->paste);
    free(e);
}

int ctx_edit_read(ctx_edit *e, const char *prompt, char **line)
{
    free(ctx_search_end(&e->search, e->el, false)); /* one a Ctrl-C left */
    snprintf(e->prompt, sizeof e->prompt, "%s", prompt);
    int count = 0;
    /* Raw mode before the prompt shows (libedit switches at the first read):
     * a key typed as soon as the prompt appears is the editor's, not the
     * canonical line discipline's (which would swallow a Ctrl-D). */
    el_set(e->el, EL_PREP_TERM, 1);
    e->sigints = ctx_sigints;
    errno = 0;
    const char *s = el_gets(e->el, &count);
    if (!s) {
        if (ctx_sigints != e->sigints)
            return EDIT_CANCEL;
        return count < 0 ? EDIT_ERROR : EDIT_EOF;
    }
    size_t n = strlen(s);
    if (n > 0 && s[n - 1] == '\n')
        n--;
    *line = mem_alloc(n + 1);
    memcpy(*line, s, n);
    (*line)[n] = '\0';
    return EDIT_LINE;
}

void ctx_edit_preset(ctx_edit *e, const char *text)
{
    if (*text)
        el_push(e->el, text);
}

void ctx_edit_history_add(ctx_edit *e, const char *entry)
{
    HistEvent ev;
    if (entry[0])
        history(e->hist, &ev, H_ENTER, entry);
}

char *ctx_edit_history_encode(const char *entry)
{
    size_t n = strlen(entry);
    char *out = mem_alloc(2 * n + 2);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (entry[i] == '\\' || entry[i] == '\n') {
            out[k++] = '\\';
            out[k++] = entry[i] == '\n' ? 'n' : '\\';
        } else {
            out[k++] = entry[i];
        }
    }
    out[k++] = '\n';
    out[k] = '\0';
    return out;
}

/* Undoes ctx_edit_history_encode in place (the line without its newline). */
static void history_decode(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '\\' && (r[1] == 'n' || r[1] == '\\')) {
            *w++ = r[1] == 'n' ? '\n' : '\\';
            r++;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

void ctx_edit_history_load(ctx_edit *e, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        if (n > 0 && line[n - 1] == '\n')
            line[n - 1] = '\0';
        history_decode(line);
        ctx_edit_history_add(e, line);
    }
    free(line);
    fclose(f);
}
