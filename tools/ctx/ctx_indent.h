/* ctx repl's auto-indent: the indentation the next line of a block starts
 * with, as IPython's terminal gives it. Pure text, no I/O. */
#ifndef CTX_INDENT_H
#define CTX_INDENT_H

/* The whitespace the line after block should start with (malloc'd): the
 * last non-blank line's indentation, four spaces more after a line ending
 * in ':' (a comment aside), four fewer after a line that is a return, pass,
 * raise, break or continue statement. "" for a block of blank lines. */
char *ctx_indent_next(const char *block);

#endif
