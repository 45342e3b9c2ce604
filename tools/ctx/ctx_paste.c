/* ctx repl's bracketed paste (ctx_paste.h). The terminal marks a paste
 * with ESC[200~ ... ESC[201~ once ESC[?2004h asked it to; the opening
 * marker is recognised by the editor's character reader, which then reads
 * the rest of the paste here, straight from standard input (the editor
 * reads a byte at a time, so nothing is buffered ahead of it). */
#include "ctx_paste.h"
#include "mem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PASTE_END "\x1b[201~"
#define PASTE_BEGIN "\x1b[200~"
#define PASTE_MAX (16 << 20) /* bytes of one paste kept at most */

void ctx_paste_mode(FILE *out, bool on)
{
    fputs(on ? "\x1b[?2004h" : "\x1b[?2004l", out);
    fflush(out);
}

char *ctx_paste_read(void)
{
    size_t cap = 1024, n = 0, mlen = strlen(PASTE_END);
    char *buf = mem_alloc(cap);
    for (;;) {
        char ch;
        ssize_t k = read(STDIN_FILENO, &ch, 1);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            break;
        if (n + 2 >= cap) {
            if (cap >= PASTE_MAX)
                continue;
            cap *= 2;
            buf = mem_realloc(buf, cap);
        }
        buf[n++] = ch;
        if (n >= mlen && memcmp(buf + n - mlen, PASTE_END, mlen) == 0) {
            n -= mlen;
            break;
        }
    }
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == '\r' && i + 1 < n && buf[i + 1] == '\n')
            continue;
        buf[w++] = buf[i] == '\r' ? '\n' : buf[i];
    }
    while (w > 0 && buf[w - 1] == '\n')
        w--;
    buf[w] = '\0';
    return buf;
}

void ctx_paste_insert(EditLine *el, const char *text)
{
    if (!*text)
        return;
    const LineInfo *li = el_line(el);
    size_t pre = (size_t)(li->cursor - li->buffer), sol = pre;
    while (sol > 0 && li->buffer[sol - 1] != '\n')
        sol--;
    bool blank = true;
    for (size_t i = sol; i < pre; i++)
        blank = blank && (li->buffer[i] == ' ' || li->buffer[i] == '\t');
    if (blank && pre > sol)
        el_deletestr(el, (int)(pre - sol));
    el_insertstr(el, text);
}

size_t ctx_paste_strip(char *s, size_t n)
{
    static const char *const marks[] = {PASTE_BEGIN, PASTE_END};
    for (size_t m = 0; m < 2; m++) {
        size_t ml = strlen(marks[m]);
        char *hit;
        while ((hit = memmem(s, n, marks[m], ml)) != NULL) {
            memmove(hit, hit + ml, n - (size_t)(hit - s) - ml);
            n -= ml;
        }
    }
    return n;
}
