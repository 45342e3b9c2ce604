/* ctx_media: saving images (and PDF, SVG) of MIME bundles to files. */
#ifndef CTX_MEDIA_H
#define CTX_MEDIA_H

#include <stdbool.h>
#include <stddef.h>

/* True for the MIME types ctx saves to a file instead of printing. */
bool ctx_media_is_file(const char *mime);
/* Saves value (base64 for binary types) to a new file; its path goes to
 * path. False when the type is not one of those, or on an error. */
bool ctx_media_save(const char *mime, const char *value, char *path, size_t path_len);

#endif
