/* ctx_media: saving images (and PDF, SVG) of MIME bundles to files. */
#ifndef CTX_MEDIA_H
#define CTX_MEDIA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* True for the MIME types ctx saves to a file instead of printing. */
bool ctx_media_is_file(const char *mime);
/* Saves value (base64 for binary types) to a new file; its path goes to
 * path. False when the type is not one of those, or on an error. */
bool ctx_media_save(const char *mime, const char *value, char *path, size_t path_len);
/* A MIME bundle on a terminal: images (PNG, JPEG, GIF, SVG, PDF) saved to
 * files whose paths are printed (PNG also inline when the terminal speaks an
 * image protocol); otherwise its text/plain (text/html shows as that). */
void ctx_media_print(FILE *out, const char *const *keys, const char *const *values, size_t n);

#endif
