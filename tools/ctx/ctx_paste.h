/* ctx repl's bracketed paste: a block pasted into the terminal arrives
 * between ESC[200~ and ESC[201~ and enters the line editor whole, blank
 * lines and all, so it runs as one cell. Includes libedit, nothing of ctx
 * but its own names. */
#ifndef CTX_PASTE_H
#define CTX_PASTE_H

#include <histedit.h>
#include <stdbool.h>
#include <stdio.h>

/* Asks the terminal on out to bracket pastes (on) or to stop (off); a
 * terminal that does not know the mode ignores the request. */
void ctx_paste_mode(FILE *out, bool on);

/* Reads the rest of a paste from standard input, after its opening marker
 * (ESC[200~), up to the closing one or the end of input. Returns the text
 * (malloc'd), carriage returns made newlines, trailing newlines dropped. */
char *ctx_paste_read(void);

/* Inserts a paste at the editor's cursor without submitting the line (Enter
 * runs it). An indentation alone before the cursor is replaced: the pasted
 * text brings its own. */
void ctx_paste_insert(EditLine *el, const char *text);

/* Removes the paste brackets from s[0..n) in place (a paste answering
 * input()); returns the new length. */
size_t ctx_paste_strip(char *s, size_t n);

#endif
