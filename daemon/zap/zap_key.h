/* zap_key: reading a CurveZMQ key file, the one way both daemons read
 * theirs (their own secret key, the hosts' public key). */
#ifndef CTXD_ZAP_KEY_H
#define CTXD_ZAP_KEY_H

#include <stddef.h>

#define ZAP_KEY_FILE_MAX (16u << 10) /* bytes a key file may hold */

/* Reads the key of the file open at fd (which it does not close): the first
 * line that, past leading white space, is no '#' comment and begins with 40
 * characters that decode as Z85. 0 with key set; -1 with why set when the
 * file cannot be read, holds more than ZAP_KEY_FILE_MAX bytes, or has no
 * such line. */
int zap_key_read_fd(int fd, char key[41], char *why, size_t whylen);
/* The same for the file at path; -1 with errno kept when it cannot be
 * opened. */
int zap_key_read(const char *path, char key[41], char *why, size_t whylen);

/* The key given inline as an option's value: 0 with key set when text is
 * exactly 40 characters that decode as Z85 and name no file (a value that
 * names a file is refused, not guessed at: its option has a -file twin);
 * -1 with why set otherwise. */
int zap_key_parse(const char *text, char key[41], char *why, size_t whylen);

/* An option pair of the KEY / KEY_FILE kind (name, name-file): reads
 * whichever is set into key and returns 1, 0 when neither is set, -1 with
 * why set (naming the option) when both are, or the one set is no key. */
int zap_key_option(const char *name, const char *inline_key, const char *file, char key[41],
                   char *why, size_t whylen);

#endif
