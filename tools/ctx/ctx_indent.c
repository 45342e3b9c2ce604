/* ctx repl's auto-indent (ctx_indent.h): the next line's indentation from
 * the block's last non-blank line, a tab counting to the next multiple of
 * eight columns as Python's tokenizer counts it. */
#include "ctx_indent.h"
#include "mem.h"

#include <stdbool.h>
#include <string.h>

#define STEP 4

/* Does the line [s, end) start with keyword kw as a whole word? */
static bool starts_with_word(const char *s, const char *end, const char *kw)
{
    size_t n = strlen(kw);
    if ((size_t)(end - s) < n || memcmp(s, kw, n) != 0)
        return false;
    if (s + n == end)
        return true;
    char ch = s[n];
    return !(ch == '_' || (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z'));
}

/* The last significant character of the line [s, end): a '#' outside a
 * string starts a comment. 0 for none. */
static char last_significant(const char *s, const char *end)
{
    char quote = 0, last = 0;
    for (const char *p = s; p < end; p++) {
        if (quote) {
            if (*p == '\\')
                p++;
            else if (*p == quote)
                quote = 0;
            last = 'x';
            continue;
        }
        if (*p == '#')
            break;
        if (*p == '\'' || *p == '"')
            quote = *p;
        if (*p != ' ' && *p != '\t' && *p != '\r')
            last = *p;
    }
    return last;
}

char *ctx_indent_next(const char *block)
{
    static const char *const dedent[] = {"return", "pass", "raise", "break", "continue"};
    const char *line = NULL, *end = NULL, *p = block;
    while (*p) { /* the last non-blank line */
        const char *eol = strchr(p, '\n');
        const char *e = eol ? eol : p + strlen(p);
        for (const char *q = p; q < e; q++)
            if (*q != ' ' && *q != '\t' && *q != '\r') {
                line = p;
                end = e;
                break;
            }
        if (!eol)
            break;
        p = eol + 1;
    }
    size_t cols = 0;
    const char *s = line;
    while (s && s < end && (*s == ' ' || *s == '\t')) {
        cols = *s == '\t' ? (cols / 8 + 1) * 8 : cols + 1;
        s++;
    }
    if (s) {
        if (last_significant(s, end) == ':')
            cols += STEP;
        else
            for (size_t i = 0; i < sizeof dedent / sizeof *dedent; i++)
                if (starts_with_word(s, end, dedent[i]))
                    cols = cols >= STEP ? cols - STEP : 0;
    }
    char *out = mem_alloc(cols + 1);
    memset(out, ' ', cols);
    out[cols] = '\0';
    return out;
}
