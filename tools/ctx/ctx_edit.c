/* ctx repl's line editor: one line at a time in raw terminal mode, with
 * horizontal scrolling for lines wider than the terminal, UTF-8 aware cursor
 * movement (wcwidth for the width of a character), and a history browsed with
 * Up/Down. No dependency beyond libc.
 *
 * Keys: Enter accepts; Ctrl-C cancels the line; Ctrl-D deletes under the
 * cursor, or is end of input on an empty line; Left/Right/Ctrl-B/Ctrl-F,
 * Home/End/Ctrl-A/Ctrl-E, Ctrl-Left/Ctrl-Right/Alt-B/Alt-F (words),
 * Backspace/Delete, Ctrl-K/Ctrl-U (kill to end/start), Ctrl-W (word before),
 * Up/Down/Ctrl-P/Ctrl-N (history), Ctrl-L (clear screen), Tab (spaces to the
 * next multiple of 4). */
#include "ctx.h"
#include "mem.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>
#include <wchar.h>

#define HISTORY_MAX 1000

struct ctx_edit {
    int in, out;
    struct termios orig;
    bool raw;
    char *buf; /* the line, NUL-terminated */
    size_t len, cap, pos;
    const char *prompt;
    size_t prompt_cols;
    char **hist;
    size_t nhist;
    /* Output is collected here and written once per refresh. */
    char *ob;
    size_t olen, ocap;
};

ctx_edit *ctx_edit_new(int in_fd, int out_fd)
{
    ctx_edit *e = mem_calloc(1, sizeof *e);
    e->in = in_fd;
    e->out = out_fd;
    e->cap = 256;
    e->buf = mem_alloc(e->cap);
    e->buf[0] = '\0';
    return e;
}

static void raw_off(ctx_edit *e);

void ctx_edit_restore(ctx_edit *e)
{
    if (e)
        raw_off(e);
}

void ctx_edit_free(ctx_edit *e)
{
    if (!e)
        return;
    raw_off(e);
    for (size_t i = 0; i < e->nhist; i++)
        free(e->hist[i]);
    free(e->hist);
    free(e->buf);
    free(e->ob);
    free(e);
}

void ctx_edit_history_add(ctx_edit *e, const char *line)
{
    if (!line[0] || (e->nhist && strcmp(e->hist[e->nhist - 1], line) == 0))
        return;
    if (e->nhist == HISTORY_MAX) {
        free(e->hist[0]);
        memmove(e->hist, e->hist + 1, (e->nhist - 1) * sizeof *e->hist);
        e->nhist--;
    }
    e->hist = mem_realloc(e->hist, (e->nhist + 1) * sizeof *e->hist);
    e->hist[e->nhist++] = mem_strdup(line);
}

void ctx_edit_history_load(ctx_edit *e, const char *path, size_t keep)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        ctx_edit_history_add(e, line);
    }
    free(line);
    fclose(f);
    while (e->nhist > keep) {
        free(e->hist[0]);
        memmove(e->hist, e->hist + 1, (e->nhist - 1) * sizeof *e->hist);
        e->nhist--;
    }
}

/* ---- terminal ------------------------------------------------------------ */

static int raw_on(ctx_edit *e)
{
    if (e->raw)
        return 0;
    if (tcgetattr(e->in, &e->orig) < 0)
        return -1;
    struct termios t = e->orig;
    t.c_iflag &= ~(tcflag_t)(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
    t.c_oflag &= ~(tcflag_t)OPOST;
    t.c_cflag |= CS8;
    t.c_lflag &= ~(tcflag_t)(ECHO | ICANON | IEXTEN | ISIG);
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(e->in, TCSADRAIN, &t) < 0)
        return -1;
    e->raw = true;
    return 0;
}

static void raw_off(ctx_edit *e)
{
    if (e->raw) {
        tcsetattr(e->in, TCSADRAIN, &e->orig);
        e->raw = false;
    }
}

static int term_cols(ctx_edit *e)
{
    struct winsize ws;
    if (ioctl(e->out, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

static void oput(ctx_edit *e, const char *s, size_t n)
{
    if (e->olen + n > e->ocap) {
        e->ocap = (e->olen + n) * 2 + 64;
        e->ob = mem_realloc(e->ob, e->ocap);
    }
    memcpy(e->ob + e->olen, s, n);
    e->olen += n;
}

static void oputs(ctx_edit *e, const char *s)
{
    oput(e, s, strlen(s));
}

static void oflush(ctx_edit *e)
{
    size_t off = 0;
    while (off < e->olen) {
        ssize_t w = write(e->out, e->ob + off, e->olen - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    e->olen = 0;
}

/* ---- UTF-8 positions -------------------------------------------------------- */

/* Byte length of the character at i (1 for a stray byte). */
static size_t char_len(const ctx_edit *e, size_t i)
{
    uint32_t cp;
    size_t n = utf8_next((const unsigned char *)e->buf + i, e->len - i, &cp);
    return n ? n : 1;
}

/* Start of the character before i. */
static size_t char_before(const ctx_edit *e, size_t i)
{
    if (i == 0)
        return 0;
    size_t j = i - 1;
    while (j > 0 && ((unsigned char)e->buf[j] & 0xC0) == 0x80 && i - j < 4)
        j--;
    return j;
}

/* Display width of the character at i. */
static int char_width(const ctx_edit *e, size_t i)
{
    uint32_t cp;
    size_t n = utf8_next((const unsigned char *)e->buf + i, e->len - i, &cp);
    if (n == 0)
        return 1;
    int w = wcwidth((wchar_t)cp);
    return w < 0 ? 1 : w;
}

/* Columns of buf[from..to). */
static size_t width(const ctx_edit *e, size_t from, size_t to)
{
    size_t w = 0;
    for (size_t i = from; i < to; i += char_len(e, i))
        w += (size_t)char_width(e, i);
    return w;
}

/* ---- drawing ------------------------------------------------------------------ */

/* Redraws prompt and line, scrolled so the cursor is visible. */
static void refresh(ctx_edit *e)
{
    size_t cols = (size_t)term_cols(e);
    size_t avail = cols > e->prompt_cols + 1 ? cols - e->prompt_cols - 1 : 1;
    size_t start = 0;
    while (start < e->pos && width(e, start, e->pos) > avail)
        start += char_len(e, start);
    size_t end = start, w = 0;
    while (end < e->len) {
        size_t cw = (size_t)char_width(e, end);
        if (w + cw > avail)
            break;
        w += cw;
        end += char_len(e, end);
    }
    oputs(e, "\r");
    oputs(e, e->prompt);
    oput(e, e->buf + start, end - start);
    oputs(e, "\x1b[0K\r");
    size_t col = e->prompt_cols + width(e, start, e->pos);
    if (col > 0) {
        char seq[32];
        snprintf(seq, sizeof seq, "\x1b[%zuC", col);
        oputs(e, seq);
    }
    oflush(e);
}

/* ---- editing ------------------------------------------------------------------ */

static void set_line(ctx_edit *e, const char *s)
{
    size_t n = strlen(s);
    if (n + 1 > e->cap) {
        e->cap = n + 256;
        e->buf = mem_realloc(e->buf, e->cap);
    }
    memcpy(e->buf, s, n + 1);
    e->len = e->pos = n;
}

static void insert(ctx_edit *e, const char *s, size_t n)
{
    if (e->len + n + 1 > e->cap) {
        e->cap = (e->len + n + 1) * 2;
        e->buf = mem_realloc(e->buf, e->cap);
    }
    memmove(e->buf + e->pos + n, e->buf + e->pos, e->len - e->pos + 1);
    memcpy(e->buf + e->pos, s, n);
    e->len += n;
    e->pos += n;
}

static void delete_range(ctx_edit *e, size_t from, size_t to)
{
    if (to <= from)
        return;
    memmove(e->buf + from, e->buf + to, e->len - to + 1);
    e->len -= to - from;
    if (e->pos > to)
        e->pos -= to - from;
    else if (e->pos > from)
        e->pos = from;
}

static bool is_word(char ch)
{
    return ch == '_' || (unsigned char)ch >= 0x80 || (ch >= '0' && ch <= '9') ||
           (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static size_t word_left(const ctx_edit *e)
{
    size_t i = e->pos;
    while (i > 0 && !is_word(e->buf[i - 1]))
        i--;
    while (i > 0 && is_word(e->buf[i - 1]))
        i--;
    return i;
}

static size_t word_right(const ctx_edit *e)
{
    size_t i = e->pos;
    while (i < e->len && !is_word(e->buf[i]))
        i++;
    while (i < e->len && is_word(e->buf[i]))
        i++;
    return i;
}

/* Reads one byte; -1 on EOF or error (EINTR is retried). */
static int read_byte(ctx_edit *e)
{
    unsigned char ch;
    for (;;) {
        ssize_t n = read(e->in, &ch, 1);
        if (n == 1)
            return ch;
        if (n < 0 && errno == EINTR)
            continue;
        return -1;
    }
}

/* A byte that follows ESC within 50 ms, else -1 (a lone ESC). */
static int read_byte_soon(ctx_edit *e)
{
    struct pollfd p = {.fd = e->in, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0)
        return -1;
    return read_byte(e);
}

enum { K_NONE, K_LEFT, K_RIGHT, K_UP, K_DOWN, K_HOME, K_END, K_DEL, K_WLEFT, K_WRIGHT };

/* Decodes an escape sequence after ESC. */
static int read_escape(ctx_edit *e)
{
    int a = read_byte_soon(e);
    if (a == 'b')
        return K_WLEFT;
    if (a == 'f')
        return K_WRIGHT;
    if (a != '[' && a != 'O')
        return K_NONE;
    char seq[16];
    size_t n = 0;
    int ch;
    /* Parameters and intermediates, up to the final byte (0x40-0x7E). */
    while ((ch = read_byte_soon(e)) >= 0) {
        if (n + 1 < sizeof seq)
            seq[n++] = (char)ch;
        if (ch >= 0x40 && ch <= 0x7E)
            break;
    }
    seq[n] = '\0';
    if (n == 0)
        return K_NONE;
    char fin = seq[n - 1];
    bool ctrl = strstr(seq, ";5") != NULL || strstr(seq, ";3") != NULL;
    switch (fin) {
    case 'A':
        return K_UP;
    case 'B':
        return K_DOWN;
    case 'C':
        return ctrl ? K_WRIGHT : K_RIGHT;
    case 'D':
        return ctrl ? K_WLEFT : K_LEFT;
    case 'H':
        return K_HOME;
    case 'F':
        return K_END;
    case '~':
        switch (atoi(seq)) {
        case 1:
        case 7:
            return K_HOME;
        case 4:
        case 8:
            return K_END;
        case 3:
            return K_DEL;
        default:
            return K_NONE;
        }
    default:
        return K_NONE;
    }
}

/* Steps through history (dir -1: older, +1: newer); *hidx == nhist is the
 * line being edited, kept in *saved. */
static void history_step(ctx_edit *e, size_t *hidx, char **saved, int dir)
{
    if (e->nhist == 0)
        return;
    if (dir < 0 && *hidx == 0)
        return;
    if (dir > 0 && *hidx >= e->nhist)
        return;
    if (*hidx == e->nhist) {
        free(*saved);
        *saved = mem_strdup(e->buf);
    }
    *hidx = dir < 0 ? *hidx - 1 : *hidx + 1;
    set_line(e, *hidx == e->nhist ? (*saved ? *saved : "") : e->hist[*hidx]);
}

int ctx_edit_read(ctx_edit *e, const char *prompt, size_t prompt_cols, char **line)
{
    *line = NULL;
    e->prompt = prompt;
    e->prompt_cols = prompt_cols;
    e->len = e->pos = 0;
    e->buf[0] = '\0';
    if (raw_on(e) < 0)
        return EDIT_ERROR;
    size_t hidx = e->nhist;
    char *saved = NULL;
    int result = EDIT_ERROR;
    refresh(e);
    for (;;) {
        int ch = read_byte(e);
        if (ch < 0) {
            result = e->len ? EDIT_LINE : EDIT_EOF;
            break;
        }
        int key = K_NONE;
        switch (ch) {
        case '\r':
        case '\n':
            result = EDIT_LINE;
            goto done;
        case 3: /* Ctrl-C */
            result = EDIT_CANCEL;
            goto done;
        case 4: /* Ctrl-D */
            if (e->len == 0) {
                result = EDIT_EOF;
                goto done;
            }
            key = K_DEL;
            break;
        case 1:
            key = K_HOME;
            break;
        case 5:
            key = K_END;
            break;
        case 2:
            key = K_LEFT;
            break;
        case 6:
            key = K_RIGHT;
            break;
        case 16:
            key = K_UP;
            break;
        case 14:
            key = K_DOWN;
            break;
        case 127:
        case 8: /* Backspace */
            if (e->pos > 0)
                delete_range(e, char_before(e, e->pos), e->pos);
            break;
        case 11: /* Ctrl-K */
            delete_range(e, e->pos, e->len);
            break;
        case 21: /* Ctrl-U */
            delete_range(e, 0, e->pos);
            break;
        case 23: /* Ctrl-W */
            delete_range(e, word_left(e), e->pos);
            break;
        case 12: /* Ctrl-L */
            oputs(e, "\x1b[H\x1b[2J");
            break;
        case '\t': {
            size_t col = width(e, 0, e->pos);
            size_t n = 4 - col % 4;
            insert(e, "    ", n);
            break;
        }
        case 27:
            key = read_escape(e);
            break;
        default:
            if (ch >= 32) {
                char c = (char)ch;
                insert(e, &c, 1);
            }
            break;
        }
        switch (key) {
        case K_LEFT:
            e->pos = char_before(e, e->pos);
            break;
        case K_RIGHT:
            if (e->pos < e->len)
                e->pos += char_len(e, e->pos);
            break;
        case K_HOME:
            e->pos = 0;
            break;
        case K_END:
            e->pos = e->len;
            break;
        case K_DEL:
            if (e->pos < e->len)
                delete_range(e, e->pos, e->pos + char_len(e, e->pos));
            break;
        case K_WLEFT:
            e->pos = word_left(e);
            break;
        case K_WRIGHT:
            e->pos = word_right(e);
            break;
        case K_UP:
            history_step(e, &hidx, &saved, -1);
            break;
        case K_DOWN:
            history_step(e, &hidx, &saved, +1);
            break;
        default:
            break;
        }
        /* Redraw only once no more typed (or pasted) bytes are waiting. */
        struct pollfd p = {.fd = e->in, .events = POLLIN};
        if (poll(&p, 1, 0) <= 0)
            refresh(e);
    }
done:
    free(saved);
    if (result == EDIT_CANCEL) {
        e->pos = e->len;
        refresh(e);
        oputs(e, "^C");
    } else {
        e->pos = e->len;
        refresh(e);
    }
    oputs(e, "\r\n");
    oflush(e);
    if (result == EDIT_LINE)
        *line = mem_strdup(e->buf);
    return result;
}
