/* ctx repl's reverse incremental search (Ctrl-R), labelled as bash and
 * IPython label it: "(reverse-i-search)`QUERY': MATCH". The state and its
 * steps; the line editor (ctx_edit.c) feeds it keys. Includes libedit. */
#ifndef CTX_SEARCH_H
#define CTX_SEARCH_H

#include <histedit.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ctx_search {
    bool active;
    bool failed;     /* the last step found nothing */
    char query[256]; /* UTF-8 */
    size_t qlen;
    int match;    /* index of the shown entry (0: the newest), -1: none */
    char *saved;  /* the line before the search (malloc'd), for Ctrl-G */
    char *prompt; /* the editor's prompt before the search (malloc'd) */
} ctx_search;

/* Starts a search from the line the editor holds and the prompt it shows
 * (both copied); the query is empty and nothing is matched yet. */
void ctx_search_start(ctx_search *s, EditLine *el, const char *prompt);

/* Looks for the query in the history h, in entries older than the current
 * match when older is set, else from the current match on (from the
 * newest without one), and shows the entry found in the editor's line.
 * When nothing matches, the line stays and the search is marked failed. */
void ctx_search_step(ctx_search *s, EditLine *el, History *h, bool older);

/* Adds a character (its UTF-8 bytes) to the query, or removes the last
 * character when n is 0; then searches from the newest entry again. */
void ctx_search_edit(ctx_search *s, EditLine *el, History *h, const char *bytes, size_t n);

/* The prompt to show while searching, into buf. */
const char *ctx_search_label(const ctx_search *s, char *buf, size_t n);

/* Ends the search: the line keeps the match, or with cancel gets back what
 * it held before. Returns the prompt saved at the start (the caller's to
 * free), or NULL when no search was active. */
char *ctx_search_end(ctx_search *s, EditLine *el, bool cancel);

#endif
