/* ctx repl's reverse incremental search (ctx_search.h): a substring search
 * over the history, newest entry first, the found entry shown as the line. */
#include "ctx_search.h"
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Replaces the editor's whole line with text, the cursor at its end. */
static void set_line(EditLine *el, const char *text)
{
    const LineInfo *li = el_line(el);
    el_cursor(el, (int)(li->lastchar - li->cursor));
    li = el_line(el);
    int len = (int)(li->lastchar - li->buffer);
    if (len > 0)
        el_deletestr(el, len);
    if (*text)
        el_insertstr(el, text);
}

void ctx_search_start(ctx_search *s, EditLine *el, const char *prompt)
{
    const LineInfo *li = el_line(el);
    size_t len = (size_t)(li->lastchar - li->buffer);
    free(s->saved);
    free(s->prompt);
    s->saved = mem_alloc(len + 1);
    memcpy(s->saved, li->buffer, len);
    s->saved[len] = '\0';
    s->prompt = mem_strdup(prompt);
    s->active = true;
    s->failed = false;
    s->qlen = 0;
    s->query[0] = '\0';
    s->match = -1;
}

void ctx_search_step(ctx_search *s, EditLine *el, History *h, bool older)
{
    if (s->qlen == 0) {
        s->failed = false;
        return;
    }
    int from = s->match < 0 ? 0 : s->match + (older ? 1 : 0);
    HistEvent ev;
    int i = 0;
    for (int rc = history(h, &ev, H_FIRST); rc >= 0; rc = history(h, &ev, H_NEXT), i++) {
        if (i < from || !strstr(ev.str, s->query))
            continue;
        s->match = i;
        s->failed = false;
        set_line(el, ev.str);
        return;
    }
    s->failed = true;
}

void ctx_search_edit(ctx_search *s, EditLine *el, History *h, const char *bytes, size_t n)
{
    if (n == 0) {
        while (s->qlen > 0 && ((unsigned char)s->query[s->qlen - 1] & 0xC0) == 0x80)
            s->qlen--; /* a whole character goes */
        if (s->qlen > 0)
            s->qlen--;
    } else if (s->qlen + n < sizeof s->query) {
        memcpy(s->query + s->qlen, bytes, n);
        s->qlen += n;
    }
    s->query[s->qlen] = '\0';
    s->match = -1;
    if (s->qlen == 0)
        set_line(el, s->saved);
    ctx_search_step(s, el, h, false);
}

const char *ctx_search_label(const ctx_search *s, char *buf, size_t n)
{
    snprintf(buf, n, "(%sreverse-i-search)`%s': ", s->failed ? "failed " : "", s->query);
    return buf;
}

char *ctx_search_end(ctx_search *s, EditLine *el, bool cancel)
{
    if (!s->active)
        return NULL;
    if (cancel)
        set_line(el, s->saved);
    s->active = false;
    free(s->saved);
    s->saved = NULL;
    char *p = s->prompt;
    s->prompt = NULL;
    return p;
}
